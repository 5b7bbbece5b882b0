/* Attention of the EAGLE-4 drafter's queries on the CPU, one call a draft level.
 *
 * A query at position p of sequence b sees the entries of its slot's ring of cached keys that are filled,
 * before p (at p too with `inclusive`: the catch-up's last pair sees its own key) and, with a window W,
 * after p - W; and the keys of this step's tree that its row of the ancestor mask names (itself included).
 * In PyTorch that is a dozen operators a level (the window mask from the ring's positions, ring and tree
 * keys concatenated, a masked softmax and two matmuls per group of query heads), each paying its fixed
 * cost right after a target forward, even for one query. Drafts need not be exact (verification is lossless whatever is
 * proposed), so sums run in any order. Python side: reference_eagle4/kernels/drafter_attention.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>

#include "vec16.h"
#include "workspace.h"

#define MAX_D 256

static float *work;
static size_t work_cap;

/* acc[r] += sum_i x[r][i] * m_i for nr <= 8 rows (a constant where inlined) of x (row stride ldx) and the
 * 16-lane vectors m_i at element i * stride of m (bf16 or fp32), i < n. */
static inline __attribute__((always_inline)) void rows_fma(const float *x, int64_t ldx, int nr, const void *m,
                                                            int bf16, int64_t stride, int64_t n, v16f acc[8]) {
    v16f a[8];
    for (int r = 0; r < nr; r++) a[r] = acc[r];
    for (int64_t i = 0; i < n; i++) {
        const v16f mi = load16(m, bf16, i * stride);
        for (int r = 0; r < nr; r++) a[r] = fma16(x[r * ldx + i], mi, a[r]);
    }
    for (int r = 0; r < nr; r++) acc[r] = a[r];
}

static void rows_fma_n(const float *x, int64_t ldx, int nr, const void *m, int bf16, int64_t stride, int64_t n,
                       v16f acc[8]) {
    switch (nr) {
        case 8: rows_fma(x, ldx, 8, m, bf16, stride, n, acc); return;
        case 4: rows_fma(x, ldx, 4, m, bf16, stride, n, acc); return;
        default:
            for (int r = 0; r < nr; r++) rows_fma(x + r * ldx, ldx, 1, m, bf16, stride, n, acc + r);
    }
}

/* element i of a bf16 or fp32 array */
static inline const void *elem(const void *base, int bf16, int64_t i) {
    return (const char *)base + i * (bf16 ? sizeof(uint16_t) : sizeof(float));
}

static inline int block(int rows, int r0) { return rows - r0 >= 8 ? 8 : rows - r0 >= 4 ? 4 : rows - r0; }

/* The n keys (rows of D at element stride D from base) as fp32 blocks of 16 keys, transposed: kt[blk][d][l]
 * = key 16 blk + l, dimension d (zeros past n). */
static void transpose_keys(const void *base, int bf16, int64_t n, int D, float *kt) {
    for (int64_t s0 = 0; s0 < n; s0 += LANES) {
        float *kb = kt + s0 * D;
        for (int d0 = 0; d0 < D; d0 += LANES) {
            v16f tile[LANES];
            for (int l = 0; l < LANES; l++)
                tile[l] = s0 + l < n ? load16(base, bf16, (s0 + l) * D + d0) : (v16f){0};
            transpose16(tile);
            for (int d = 0; d < LANES; d++) store16(kb + (size_t)(d0 + d) * LANES, tile[d]);
        }
    }
}

/* q [B, T, NQ, D] (bf16 = 1: bf16, else fp32, as every tensor here); ring_k, ring_v [S, KV, R, D] with
 * ring_pos [S, R] (-1: empty) and slots [B]; qpos [B, T]; window <= 0: no window; tree_k, tree_v
 * [B, KV, cap, D] with anc [B, T, n_tree] uint8 (n_tree = 0: no tree, tree pointers unused). Writes out
 * [B, T, NQ, D]. Work goes round the threads by (sequence, key head). Returns 0, -1 if the workspace could
 * not be allocated, -2 for a head size that is not a multiple of 16 up to MAX_D. */
int drafter_attention(const void *q, int bf16, int64_t B, int64_t T, int NQ, int KV, int D,
                      const void *ring_k, const void *ring_v, const int64_t *ring_pos, const int64_t *slots,
                      int64_t R, const int64_t *qpos, int64_t window, int inclusive, const void *tree_k,
                      const void *tree_v, int64_t cap, int64_t n_tree, const uint8_t *anc, float scale,
                      void *out) {
    if (D % LANES || D > MAX_D) return -2;
    const int G = NQ / KV, rows = G * (int)T;
    const int64_t Rp = (R + LANES - 1) / LANES * LANES, Np = (n_tree + LANES - 1) / LANES * LANES;
    const int64_t ld = Rp + Np;                        /* scores of a row: ring entries, then tree keys */
    const size_t per_thread = (size_t)rows * D + (size_t)ld * D + (size_t)rows * ld;
    const int threads = omp_get_max_threads();
    if (!grow((void **)&work, &work_cap, per_thread * threads * sizeof(float))) return -1;
    #pragma omp parallel
    {
        float *qf = work + per_thread * omp_get_thread_num();
        float *kt = qf + (size_t)rows * D, *sc = kt + (size_t)ld * D;
        #pragma omp for schedule(dynamic)
        for (int64_t job = 0; job < B * KV; job++) {
            const int64_t b = job / KV, g = job % KV;
            const int64_t ring = (slots[b] * KV + g) * R * D, tree = (b * KV + g) * cap * D;
            const int64_t *rp = ring_pos + slots[b] * R;
            /* row r = query t, head g G + i (r = t G + i): scaled fp32 queries */
            for (int r = 0; r < rows; r++) {
                const int64_t t = r / G, h = g * G + r % G;
                for (int d = 0; d < D; d += LANES)
                    store16(qf + (size_t)r * D + d, load16(q, bf16, ((b * T + t) * NQ + h) * D + d) * scale);
            }
            transpose_keys(elem(ring_k, bf16, ring), bf16, R, D, kt);
            if (n_tree) transpose_keys(elem(tree_k, bf16, tree), bf16, n_tree, D, kt + Rp * D);
            for (int64_t s0 = 0; s0 < ld; s0 += LANES) {    /* scores, 16 keys by up to 8 rows at a time */
                const float *kb = kt + s0 * D;
                for (int r0 = 0; r0 < rows; r0 += block(rows, r0)) {
                    const int nr = block(rows, r0);
                    v16f acc[8] = {{0}};
                    rows_fma_n(qf + (size_t)r0 * D, D, nr, kb, 0, LANES, D, acc);
                    for (int r = 0; r < nr; r++) store16(sc + (size_t)(r0 + r) * ld + s0, acc[r]);
                }
            }
            for (int r = 0; r < rows; r++) {               /* the visible keys' softmax weights, others 0 */
                const int64_t t = r / G, p = qpos[b * T + t];
                const uint8_t *ar = n_tree ? anc + (b * T + t) * n_tree : NULL;
                float *s = sc + (size_t)r * ld, m = -INFINITY;
                for (int64_t j = 0; j < ld; j++) {
                    const int64_t e = j < Rp ? (j < R ? rp[j] : -1) : -1;
                    const int seen = j < Rp ? e >= 0 && (inclusive ? e <= p : e < p) && (window <= 0 || e > p - window)
                                            : j - Rp < n_tree && ar[j - Rp];
                    s[j] = seen ? s[j] : -INFINITY;
                    m = s[j] > m ? s[j] : m;
                }
                float total = 0.0f;
                for (int64_t j = 0; j < ld; j++) {
                    s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - m);
                    total += s[j];
                }
                const float inv = total > 0.0f ? 1.0f / total : 0.0f;
                for (int64_t j = 0; j < ld; j++) s[j] *= inv;
            }
            for (int r0 = 0; r0 < rows; r0 += block(rows, r0)) {   /* weighted values, 16 dimensions at a time */
                const int nr = block(rows, r0);
                for (int d0 = 0; d0 < D; d0 += LANES) {
                    v16f acc[8] = {{0}};
                    rows_fma_n(sc + (size_t)r0 * ld, ld, nr, elem(ring_v, bf16, ring + d0),
                               bf16, D, R, acc);
                    if (n_tree)
                        rows_fma_n(sc + (size_t)r0 * ld + Rp, ld, nr,
                                   elem(tree_v, bf16, tree + d0), bf16, D, n_tree, acc);
                    for (int r = 0; r < nr; r++) {
                        const int64_t t = (r0 + r) / G, h = g * G + (r0 + r) % G;
                        const int64_t o = ((b * T + t) * NQ + h) * D + d0;
                        for (int l = 0; l < LANES; l++) {
                            if (bf16) ((uint16_t *)out)[o + l] = bf16_round(acc[r][l]);
                            else ((float *)out)[o + l] = acc[r][l];
                        }
                    }
                }
            }
        }
    }
    return 0;
}
