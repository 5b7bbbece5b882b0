/* Per-row reductions over wide rows (logits, candidate scores) for the CPU: argmax, entropy and top-k.
 *
 * PyTorch runs these as several passes or as scalar loops in bf16 (its bf16 argmax), and its top-k sorts
 * more than it must, over rows of tens of thousands of entries, several calls every step. Here
 * each row is one or two vectorised passes, and rows are spread over the caller's OpenMP threads (torch's:
 * the library shares its runtime). Rows hold bf16 (bf16 = 1) or fp32 values, row r at x + r * ld, and no
 * NaN. Python side: reference_eagle4/kernels/row_ops.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "vec16.h"
#include "topk.h"

static inline const void *row_at(const void *x, int bf16, int64_t r, int64_t ld) {
    return (const char *)x + (size_t)(r * ld) * (bf16 ? sizeof(uint16_t) : sizeof(float));
}

static float row_max(const void *row, int bf16, int64_t n) {
    v16f m = (v16f){0} - INFINITY;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        const v16f v = load16(row, bf16, i);
        m = max16(v, m);
    }
    float best = -INFINITY;
    for (int l = 0; l < LANES; l++) best = m[l] > best ? m[l] : best;
    for (; i < n; i++) {
        const float v = load1(row, bf16, i);
        best = v > best ? v : best;
    }
    return best;
}

/* out[r] = the first index of row r's maximum. */
void rows_argmax(const void *x, int bf16, int64_t rows, int64_t n, int64_t ld, int64_t *out) {
    #pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const void *row = row_at(x, bf16, r, ld);
        const float m = row_max(row, bf16, n);
        int64_t i = 0, at = n - 1;
        for (; i + LANES <= n; i += LANES) {
            const v16i hit = load16(row, bf16, i) == m;
            int any = 0;
            for (int l = 0; l < LANES; l++) any |= hit[l];
            if (any) {
                for (int l = 0; l < LANES; l++)
                    if (hit[l]) { at = i + l; break; }
                break;
            }
        }
        if (i + LANES > n)
            for (; i < n; i++)
                if (load1(row, bf16, i) == m) { at = i; break; }
        out[r] = at;
    }
}

/* out[r] = the entropy (nats) of softmax(row r): log S - sum_i e_i (x_i - m) / S, e_i = exp(x_i - m). */
void rows_entropy(const void *x, int bf16, int64_t rows, int64_t n, int64_t ld, float *out) {
    #pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const void *row = row_at(x, bf16, r, ld);
        const float m = row_max(row, bf16, n);
        v16f s = {0}, w = {0};
        int64_t i = 0;
        for (; i + LANES <= n; i += LANES) {
            const v16f d = load16(row, bf16, i) - m;
            const v16f e = exp_nonpositive(d);
            s += e;
            w += e * d;
        }
        double S = 0.0, W = 0.0;
        for (int l = 0; l < LANES; l++) { S += s[l]; W += w[l]; }
        for (; i < n; i++) {
            const double d = (double)load1(row, bf16, i) - m, e = exp(d);
            S += e;
            W += e * d;
        }
        out[r] = (float)(log(S) - W / S);
    }
}

/* idx[r][0..k-1] = the indices of row r's k largest values, largest first (topk.h). */
void rows_topk(const void *x, int bf16, int64_t rows, int64_t n, int64_t ld, int k, int64_t *idx) {
    #pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) topk_row(row_at(x, bf16, r, ld), bf16, n, k, idx + r * k);
}
