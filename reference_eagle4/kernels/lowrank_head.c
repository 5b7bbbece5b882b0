/* The EAGLE-4 drafter's low-rank candidate head on the CPU: the k best next tokens of N hidden rows in one call.
 *
 * In PyTorch a call is a dozen operators (two linears, a top-64, a gather of 64 head rows, a batched
 * matvec, log-softmax, top-k), run once or more per step right after a target forward has evicted every
 * weight from the caches: about 1 ms a call at one to eight rows, mostly fixed per-operator cost, while the
 * bytes it must read (the 64 x 32k factor B, 4 MB in bf16) take ~0.2 ms. Here, for each row n:
 *   u[n]      = A . hn[n]                       [r], rounded to bf16
 *   s[n]      = u[n] . B                        fp32 [V]; B is read once for every 8 rows, in blocks of
 *                                                16 rows, rank pairs interleaved, so 16 scores share a load
 *   cand[n]   = the K best of s[n]              (topk.h)
 *   logit[n]  = W[cand] . hn[n]                 fp32: the exact logits of the candidates
 *   out[n]    = the k best of log_softmax(logit[n]), best first (equal values: the better score first)
 * Drafts need not be exact (verification is lossless whatever is proposed), so sums run in any order.
 * Python side: reference_eagle4/kernels/lowrank_head_cpu.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "vec16.h"
#include "workspace.h"
#include "topk.h"
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#define TILE 8           /* rows scored together per load of a block of B */

static float *work;
static size_t work_cap;
static int64_t *cand_buf;
static size_t cand_cap;

/* sum over i < n of a[i] * b[i]: a bf16 or fp32 at element offset off, b fp32 */
static inline float dot(const void *a, int bf16, int64_t off, const float *b, int64_t n) {
    v16f acc = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        v16f y;
        memcpy(&y, b + i, sizeof y);
        acc += load16(a, bf16, off + i) * y;
    }
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += load1(a, bf16, off + i) * b[i];
    return s;
}

/* 16 scores of nt rows (nt = 1, 2, 4 or TILE, a constant where inlined) from one block of B, pairs of
 * ranks at a time: out[t][l] = sum_p u[t][2p] * blk[p][l][0] + u[t][2p + 1] * blk[p][l][1], u and B in
 * bf16 (u's pairs packed in one 32-bit word, B's 16 pairs in 32 bf16). With AVX512-BF16 a pair is one
 * instruction (VDPBF16PS); elsewhere the bf16 values are widened exactly and multiplied in fp32. */
static inline __attribute__((always_inline)) void score_block(const uint32_t *u, int64_t pairs, int nt,
                                                              const uint16_t *blk, float *out, int64_t ld) {
#if defined(__AVX512BF16__)
    __m512 acc[TILE];
    for (int t = 0; t < TILE; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const __m512bh b = (__m512bh)_mm512_loadu_si512(blk + p * 2 * LANES);
        for (int t = 0; t < nt; t++)
            acc[t] = _mm512_dpbf16_ps(acc[t], (__m512bh)_mm512_set1_epi32((int)u[t * pairs + p]), b);
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + t * ld, acc[t]);
#else
    v16f acc[TILE];
    for (int t = 0; t < TILE; t++) acc[t] = (v16f){0};
    for (int64_t p = 0; p < pairs; p++) {
        v16i w;
        memcpy(&w, blk + p * 2 * LANES, sizeof w);
        const v16f lo = (v16f)(w << 16), hi = (v16f)(w & (int32_t)0xffff0000u);
        for (int t = 0; t < nt; t++) {
            const uint32_t up = u[t * pairs + p];
            float ulo, uhi;
            const uint32_t a = up << 16, c = up & 0xffff0000u;
            memcpy(&ulo, &a, sizeof ulo);
            memcpy(&uhi, &c, sizeof uhi);
            acc[t] += ulo * lo + uhi * hi;
        }
    }
    for (int t = 0; t < nt; t++) memcpy(out + t * ld, &acc[t], sizeof(v16f));
#endif
}

static void score_rows(const uint32_t *u, int64_t pairs, int nt, const uint16_t *blk, float *out, int64_t ld) {
    switch (nt) {                                 /* constant tile sizes keep the accumulators in registers */
        case 8: score_block(u, pairs, 8, blk, out, ld); return;
        case 4: score_block(u, pairs, 4, blk, out, ld); return;
        case 2: score_block(u, pairs, 2, blk, out, ld); return;
        default: score_block(u, pairs, 1, blk, out, ld);
    }
}

/* hn [N][H] (hn_bf16: bf16, else fp32); A [r][H] and W [V][H], bf16 (w_bf16) or fp32; Bblk bf16
 * [ceil(V / 16)][r / 2][16][2] (r even: element [b][p][l][e] = B[16 b + l][2 p + e]);
 * 1 <= k <= K <= min(V, 4096). Writes logp [N][k] (log-probabilities under the softmax over the
 * K exact logits) and idx [N][k] (rows of W). Returns 0, or -1 if the workspace cannot be allocated. */
int lowrank_topk(const void *hn, int hn_bf16, int64_t N, int64_t H, const void *A, const void *Bblk,
                 const void *W, int w_bf16, int64_t r, int64_t V, int K, int k, float *logp, int64_t *idx) {
    const int64_t nb = (V + LANES - 1) / LANES, ld = nb * LANES;
    const int64_t pairs = r / 2;
    if (!grow((void **)&work, &work_cap, ((size_t)N * (H + ld + K + pairs)) * sizeof(float))
            || !grow((void **)&cand_buf, &cand_cap, (size_t)N * K * sizeof(int64_t)))
        return -1;
    float *hf = work, *s = hf + (size_t)N * H, *lg = s + (size_t)N * ld;
    uint32_t *ub = (uint32_t *)(lg + (size_t)N * K);              /* u's pairs in bf16 */
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < H; i++) hf[n * H + i] = load1(hn, hn_bf16, n * H + i);
        #pragma omp for schedule(static)
        for (int64_t np = 0; np < N * pairs; np++) {
            const float *h = hf + np / pairs * H;
            const int64_t j = np % pairs * 2;
            ub[np] = (uint32_t)bf16_round(dot(A, w_bf16, j * H, h, H))
                     | (uint32_t)bf16_round(dot(A, w_bf16, (j + 1) * H, h, H)) << 16;
        }
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++)
            for (int64_t n0 = 0, nt; n0 < N; n0 += nt) {
                nt = N - n0 >= TILE ? TILE : N - n0 >= 4 ? 4 : N - n0 >= 2 ? 2 : 1;
                score_rows(ub + n0 * pairs, pairs, (int)nt, (const uint16_t *)Bblk + b * pairs * 2 * LANES,
                           s + n0 * ld + b * LANES, ld);
            }
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            int64_t *c = cand_buf + n * K;
            float *x = lg + n * K;
            topk_row(s + n * ld, 0, V, K, c);
            float m = -INFINITY;
            for (int j = 0; j < K; j++) {
                x[j] = dot(W, w_bf16, c[j] * H, hf + n * H, H);
                m = x[j] > m ? x[j] : m;
            }
            double total = 0.0;
            for (int j = 0; j < K; j++) total += exp((double)x[j] - m);
            const float shift = m + (float)log(total);
            for (int t = 0; t < k; t++) {             /* selection: the best of the rest, earliest on ties */
                int best = t;
                for (int j = t + 1; j < K; j++) best = x[j] > x[best] ? j : best;
                const float xv = x[best];
                const int64_t cv = c[best];
                memmove(x + t + 1, x + t, (size_t)(best - t) * sizeof(float));
                memmove(c + t + 1, c + t, (size_t)(best - t) * sizeof(int64_t));
                x[t] = xv;
                c[t] = cv;
                logp[n * k + t] = xv - shift;
                idx[n * k + t] = cv;
            }
        }
    }
    return 0;
}
