/* Per-row reductions over wide rows (logits, candidate scores) for the CPU: argmax, entropy and top-k.
 *
 * PyTorch runs these as several passes or as scalar loops in bf16 (its bf16 argmax), and its top-k sorts
 * more than it must: at a few rows of 32-49k entries each call costs 0.1-0.7 ms, paid every step. Here
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

static inline float load1(const void *row, int bf16, int64_t i) {
    if (bf16) {
        uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)row)[i];
}

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

/* A heap entry; "worse" = a smaller value, or an equal value at a larger index (ties keep the first). */
typedef struct { float v; int64_t i; } Entry;

static inline int worse(Entry a, Entry b) { return a.v < b.v || (a.v == b.v && a.i > b.i); }

static void sift_down(Entry *h, int k, int at) {
    for (;;) {
        int c = 2 * at + 1;
        if (c >= k) return;
        if (c + 1 < k && worse(h[c + 1], h[c])) c++;
        if (!worse(h[c], h[at])) return;
        const Entry t = h[c]; h[c] = h[at]; h[at] = t;
        at = c;
    }
}

static inline void offer(Entry *h, int k, float v, int64_t i) {
    const Entry e = {v, i};
    if (worse(h[0], e)) { h[0] = e; sift_down(h, k, 0); }
}

#define BLOCK 256   /* values per block of the first pass */

/* idx[r][0..k-1] = the indices of row r's k largest values, largest first (equal values: lower index
 * first); 1 <= k <= n. First pass: each block of 256 values' maximum. The k-th largest block maximum is a
 * value that at least k entries reach, so only the entries at or above it can be among the k largest; the
 * second pass collects those (a few hundred of 32k in a row of logits) and a min-heap of k keeps the
 * best of them. Rows with fewer than k blocks take every entry as a candidate. k is at most 4096 (the
 * heap lives on the thread's stack; row_ops.py keeps larger k in PyTorch). */
void rows_topk(const void *x, int bf16, int64_t rows, int64_t n, int64_t ld, int k, int64_t *idx) {
    #pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const void *row = row_at(x, bf16, r, ld);
        const int64_t nblk = n / BLOCK;
        float bound = -INFINITY;
        Entry *bm = nblk >= k ? malloc((size_t)k * sizeof(Entry)) : NULL;  /* the k largest block maxima */
        if (bm != NULL) {                                /* (without it every entry is a candidate) */
            for (int64_t b = 0; b < nblk; b++) {
                v16f m = load16(row, bf16, b * BLOCK);
                for (int64_t i = b * BLOCK + LANES; i < (b + 1) * BLOCK; i += LANES) m = max16(load16(row, bf16, i), m);
                float best = m[0];
                for (int l = 1; l < LANES; l++) best = m[l] > best ? m[l] : best;
                if (b < k) {
                    bm[b] = (Entry){best, b};
                    if (b == k - 1)
                        for (int j = k / 2 - 1; j >= 0; j--) sift_down(bm, k, j);
                } else {
                    offer(bm, k, best, b);
                }
            }
            bound = bm[0].v;
            free(bm);
        }
        Entry heap[k];
        int filled = 0;
        for (int64_t i = 0; i < n; i += LANES) {
            if (i + LANES <= n) {
                const v16i hit = load16(row, bf16, i) >= bound;
                int any = 0;
                for (int l = 0; l < LANES; l++) any |= hit[l];
                if (!any) continue;
            }
            const int64_t end = i + LANES <= n ? i + LANES : n;
            for (int64_t j = i; j < end; j++) {
                const float v = load1(row, bf16, j);
                if (!(v >= bound)) continue;
                if (filled < k) {
                    heap[filled++] = (Entry){v, j};
                    if (filled == k)
                        for (int t = k / 2 - 1; t >= 0; t--) sift_down(heap, k, t);
                } else {
                    offer(heap, k, v, j);
                }
            }
        }
        for (int end = k - 1; end > 0; end--) {          /* heap sort: the worst goes last */
            const Entry t = heap[0]; heap[0] = heap[end]; heap[end] = t;
            sift_down(heap, end, 0);
        }
        for (int j = 0; j < k; j++) idx[r * k + j] = heap[j].i;
    }
}
