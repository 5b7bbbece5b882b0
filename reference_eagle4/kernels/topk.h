/* Top-k of one row (bf16 or fp32 values, no NaN), shared by the CPU kernels of this folder that select
 * candidates: row_ops.c (rows_topk) and lowrank_head.c. */
#ifndef SPECBENCH_TOPK_H
#define SPECBENCH_TOPK_H
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "vec16.h"

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

/* Keep (v, i) among the best k seen: fill the heap, then replace its worst. */
static inline void push(Entry *h, int *filled, int k, float v, int64_t i) {
    if (*filled < k) {
        h[(*filled)++] = (Entry){v, i};
        if (*filled == k)
            for (int t = k / 2 - 1; t >= 0; t--) sift_down(h, k, t);
    } else {
        offer(h, k, v, i);
    }
}

/* idx[0..k-1] = the indices of a full heap's entries, best first (heap sort: the worst goes last). */
static void take_sorted(Entry *h, int k, int64_t *idx) {
    for (int end = k - 1; end > 0; end--) {
        const Entry t = h[0]; h[0] = h[end]; h[end] = t;
        sift_down(h, end, 0);
    }
    for (int j = 0; j < k; j++) idx[j] = h[j].i;
}

#define BLOCK 256   /* values per block of the first pass */

/* idx[0..k-1] = the indices of the row's k largest values, largest first (equal values: lower index
 * first); 1 <= k <= n. First pass: each block of 256 values' maximum. The k-th largest block maximum is a
 * value that at least k entries reach, so only the entries at or above it can be among the k largest; the
 * second pass collects those (a few hundred of 32k in a row of logits) and a min-heap of k keeps the
 * best of them. A row with fewer than k blocks takes every entry as a candidate. k is at most 4096 (the
 * heap lives on the thread's stack; row_ops.py keeps larger k in PyTorch). */
static void topk_row(const void *row, int bf16, int64_t n, int k, int64_t *idx) {
    const int64_t nblk = n / BLOCK;
    float bound = -INFINITY;
    Entry *bm = nblk >= k ? malloc((size_t)k * sizeof(Entry)) : NULL;  /* the k largest block maxima */
    if (bm != NULL) {                                /* (without it every entry is a candidate) */
        int nbm = 0;
        for (int64_t b = 0; b < nblk; b++) {
            v16f m = load16(row, bf16, b * BLOCK);
            for (int64_t i = b * BLOCK + LANES; i < (b + 1) * BLOCK; i += LANES) m = max16(load16(row, bf16, i), m);
            float best = m[0];
            for (int l = 1; l < LANES; l++) best = m[l] > best ? m[l] : best;
            push(bm, &nbm, k, best, b);
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
            if (v >= bound) push(heap, &filled, k, v, j);
        }
    }
    take_sorted(heap, k, idx);
}

#endif
