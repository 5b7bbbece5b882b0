/* The element-wise work of a decoder layer for the CPU: RMS norm (with the residual add before it),
 * rotary embedding with the key/value cache write, and the MLP's SiLU gate.
 *
 * In eager PyTorch these are about twenty small operators a layer (an RMS norm alone is five on the CPU:
 * pow, mean, add, rsqrt, mul), each paying dispatch and a pass over memory, and in bf16 each rounding to
 * bf16: a sizeable share of a decoding step of the default target. Here each is one pass in fp32, rounded once
 * at the end. Every row is computed alone in a fixed order (vectors run along the row, never across rows),
 * so a token's results do not depend on what else the step holds, as exact verification needs. Rows hold
 * bf16 (bf16 = 1) or fp32 values. Python side: reference_eagle4/kernels/layer_ops.py.
 */
#include <stdint.h>
#include <math.h>
#include <omp.h>

#include "vec16.h"

static inline v16f select_nonneg(v16f x, v16f a, v16f b) {
    return select16(x >= 0.0f, a, b);
}

/* 16 values to bf16 (store16_bf16) or fp32. */
static inline void store16_as(void *row, int bf16, int64_t i, v16f x) {
    if (bf16) store16_bf16((uint16_t *)row + i, x);
    else store16((float *)row + i, x);
}

/* The m <= 16 values from element i on (the rest of a row shorter than a vector: zeros in the other
 * lanes), and their store: rows of any length take the same vector code. */
static inline v16f loadn(const void *row, int bf16, int64_t i, int64_t m) {
    if (m >= LANES) return load16(row, bf16, i);
    v16f v = {0};
    for (int64_t l = 0; l < m; l++) v[l] = load1(row, bf16, i + l);
    return v;
}

static inline void storen(void *row, int bf16, int64_t i, int64_t m, v16f x) {
    if (m >= LANES) {
        store16_as(row, bf16, i, x);
        return;
    }
    for (int64_t l = 0; l < m; l++) {
        if (bf16) ((uint16_t *)row)[i + l] = bf16_round(x[l]);
        else ((float *)row)[i + l] = x[l];
    }
}

static inline void *row_ptr(void *x, int bf16, int64_t offset) {
    return (char *)x + offset * (bf16 ? sizeof(uint16_t) : sizeof(float));
}

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows of n. With res, the norm is of x[r] + res[r] instead,
 * rounded to the dtype and stored in sum[r] (the residual stream), as `x = x + res; y = rms_norm(x)`
 * computes it. Row r of x, res and y at r * ldx, r * ldr and r * ldy elements; of sum, at r * n. */
void rows_rms_norm(const void *x, int64_t ldx, const void *res, int64_t ldr, void *sum, const void *w, void *y,
                   int64_t ldy, int bf16, int64_t rows, int64_t n, float eps) {
    #pragma omp parallel for schedule(static) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) {
        const void *xr = row_ptr((void *)x, bf16, r * ldx);
        if (res != NULL) {
            const void *rr = row_ptr((void *)res, bf16, r * ldr);
            void *sr = row_ptr(sum, bf16, r * n);
            for (int64_t i = 0; i < n; i += LANES)
                storen(sr, bf16, i, n - i, loadn(xr, bf16, i, n - i) + loadn(rr, bf16, i, n - i));
            xr = sr;
        }
        v16f s = {0};
        for (int64_t i = 0; i < n; i += LANES) {
            const v16f v = loadn(xr, bf16, i, n - i);
            s += v * v;
        }
        float total = 0.0f;
        for (int l = 0; l < LANES; l++) total += s[l];
        const float scale = 1.0f / sqrtf(total / (float)n + eps);
        void *yr = row_ptr(y, bf16, r * ldy);
        for (int64_t i = 0; i < n; i += LANES)
            storen(yr, bf16, i, n - i, loadn(xr, bf16, i, n - i) * scale * loadn(w, bf16, i, n - i));
    }
}

/* Rotate the halves of one head (HF Llama convention: out = x * cos + rotate_half(x) * sin) with the fp32
 * tables' row for this position, from src to dst. */
static inline void rope_head(const void *src, void *dst, int bf16, const float *cos, const float *sin, int D) {
    const int half = D / 2;
    for (int i = 0; i < half; i += LANES) {
        const int m = half - i;
        const v16f a = loadn(src, bf16, i, m), b = loadn(src, bf16, i + half, m);
        const v16f c = loadn(cos, 0, i, m), s = loadn(sin, 0, i, m);
        const v16f c2 = loadn(cos, 0, half + i, m), s2 = loadn(sin, 0, half + i, m);
        storen(dst, bf16, i, m, a * c - b * s);
        storen(dst, bf16, i + half, m, b * c2 + a * s2);
    }
}

/* The attention input of a step: qkv holds B * T rows of [H query heads | KV key heads | KV value heads] of
 * D each (row stride ld). Queries, rotated, go to q [B, H, T, D]; keys, rotated, and values go to the
 * caches at position start[b] + t of sequence b (k_cache + b * slot + h * head + position * D). The token of
 * row b * T + t sits at table row pos[b * T + t] of cos and sin ([positions, D], fp32). */
void rope_store(const void *qkv, int64_t ld, int bf16, int64_t B, int64_t T, const int64_t *pos,
                const float *cos, const float *sin, int H, int KV, int D, void *q,
                void *k_cache, void *v_cache, int64_t slot, int64_t head, const int64_t *start) {
    #pragma omp parallel for schedule(static) if (B * T > 4)
    for (int64_t row = 0; row < B * T; row++) {
        const int64_t b = row / T, t = row % T;
        const float *c = cos + pos[row] * D, *s = sin + pos[row] * D;
        const void *src = row_ptr((void *)qkv, bf16, row * ld);
        for (int h = 0; h < H; h++)
            rope_head(row_ptr((void *)src, bf16, (int64_t)h * D), row_ptr(q, bf16, ((b * H + h) * T + t) * D),
                      bf16, c, s, D);
        const int64_t at = b * slot + (start[b] + t) * D;
        for (int h = 0; h < KV; h++) {
            rope_head(row_ptr((void *)src, bf16, (int64_t)(H + h) * D), row_ptr(k_cache, bf16, at + h * head),
                      bf16, c, s, D);
            const void *v = row_ptr((void *)src, bf16, (int64_t)(H + KV + h) * D);
            void *dst = row_ptr(v_cache, bf16, at + h * head);
            for (int i = 0; i < D; i += LANES) storen(dst, bf16, i, D - i, loadn(v, bf16, i, D - i));
        }
    }
}

/* out[r] = silu(g) * u for gu[r] = [g | u] of n each (row stride ld; out rows contiguous). silu(g) =
 * g * sigmoid(g), the sigmoid from exp(-|g|) so the exponential never overflows. */
void rows_silu_mul(const void *gu, int64_t ld, int bf16, int64_t rows, int64_t n, void *out) {
    #pragma omp parallel for schedule(static) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) {
        const void *g = row_ptr((void *)gu, bf16, r * ld);
        const void *u = row_ptr((void *)g, bf16, n);
        void *o = row_ptr(out, bf16, r * n);
        for (int64_t i = 0; i < n; i += LANES) {
            const v16f x = loadn(g, bf16, i, n - i);
            const v16f e = exp_nonpositive(select_nonneg(x, (v16f){0} - x, x));        /* exp(-|x|) */
            const v16f sig = select_nonneg(x, 1.0f / (1.0f + e), e / (1.0f + e));
            storen(o, bf16, i, n - i, x * sig * loadn(u, bf16, i, n - i));
        }
    }
}
