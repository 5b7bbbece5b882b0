/* The EAGLE-4 drafter's low-rank candidate head on the CPU: the k best next tokens of N hidden rows in one call.
 *
 * In PyTorch a call is a dozen operators (two linears, a top-64, a gather of 64 head rows, a batched
 * matvec, log-softmax, top-k), run once or more per step right after a target forward has evicted every
 * weight from the caches: at one to eight rows mostly fixed per-operator cost, several times what reading
 * its bytes (the 64 x 32k factor B, 4 MB in bf16) needs. Here, for each row n:
 *   u[n]      = A . hn[n]                       [r], rounded to bf16
 *   s[n]      = u[n] . B                        fp32 [V]; B in blocks of 16 rows, rank pairs interleaved
 *                                                (the VNNI layout): one AMX tile product per 16 rows of hn
 *                                                where the CPU has AMX, else 16 scores per VDPBF16PS load
 *   cand[n]   = the K best of s[n]              (topk.h; with AMX, two passes over B, below)
 *   logit[n]  = W[cand] . hn[n]                 fp32: the exact logits of the candidates
 *   out[n]    = the k best of log_softmax(logit[n]), best first (equal values: the better score first)
 * With AMX the scores never reach memory (at 64 rows they would be 8 MB, whose writing and rereading
 * would take most of a call): a first pass keeps the maximum of each span of 32 scores, whose K-th largest bounds
 * each row's K best from below; a second, identical pass recomputes the scores (a tile product is cheap)
 * and offers those that reach the bound to a heap per thread and row; the heaps are merged per row.
 * Without AMX the scores of a call's few rows are stored (they fit in L2) and selected from there.
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
#include "amx.h"

#define TILE 8           /* rows scored together per load of a block of B (VDPBF16PS path) */
#define CHUNK 16         /* blocks of B per unit of the scoring loop (32 KB of B, kept in L1 across rows) */
#define SPAN 2           /* blocks per maximum the scoring pass keeps */
#define AMX_MIN_ROWS 5   /* below this a 16-row tile would be mostly padding: VDPBF16PS instead */
#define PREFETCH 4       /* head rows fetched ahead of the exact logits' dot products */

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

#if HAVE_AMX
/* Tiles for M rows of hn: 0 = scores [M][16] fp32; 1, 2 = u's first (up to) 16 rank pairs [M][k0] and
 * the block of B's same pairs [k0][16 x 2]; 3, 4 = the remaining k1 pairs (rank <= 64). */
static void amx_config(int M, int64_t pairs) {
    TileConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int k0 = pairs < 16 ? (int)pairs : 16, k1 = (int)pairs - k0;
    c.rows[0] = (uint8_t)M; c.colsb[0] = 64;
    c.rows[1] = (uint8_t)M; c.colsb[1] = (uint16_t)(4 * k0);
    c.rows[2] = (uint8_t)k0; c.colsb[2] = 64;
    if (k1 > 0) {
        c.rows[3] = (uint8_t)M; c.colsb[3] = (uint16_t)(4 * k1);
        c.rows[4] = (uint8_t)k1; c.colsb[4] = 64;
    }
    _tile_loadconfig(&c);
}

/* Scores of the configured M rows from n0 on, blocks b0 <= b < b1, into out [M][ldo] (block b at column
 * 16 (b - b0)): one tile product per block and 16 rank pairs, u's tiles loaded once. */
static void amx_score(const uint32_t *ub, int64_t pairs, int64_t n0, const uint16_t *Bblk, int64_t b0,
                      int64_t b1, float *out, int64_t ldo) {
    _tile_loadd(1, ub + n0 * pairs, pairs * 4);
    if (pairs > 16) _tile_loadd(3, ub + n0 * pairs + 16, pairs * 4);
    for (int64_t b = b0; b < b1; b++) {
        const uint16_t *blk = Bblk + b * pairs * 2 * LANES;
        _tile_zero(0);
        _tile_loadd(2, blk, 64);
        _tile_dpbf16ps(0, 1, 2);
        if (pairs > 16) {
            _tile_loadd(4, blk + 16 * 2 * LANES, 64);
            _tile_dpbf16ps(0, 3, 4);
        }
        _tile_stored(0, out + (b - b0) * LANES, ldo * 4);
    }
}
#endif

static inline float hmax16(v16f v) {
#if defined(__AVX512F__)
    return _mm512_reduce_max_ps((__m512)v);
#else
    float m = v[0];
    for (int l = 1; l < LANES; l++) m = v[l] > m ? v[l] : m;
    return m;
#endif
}

/* bm[t][b / SPAN] = the maximum of each span's scores below V, for nt rows whose scores of blocks
 * b0 <= b < b1 are in buf [nt][ldb] (block b at column 16 (b - b0)); b0 is a multiple of SPAN. */
static void span_max(const float *buf, int64_t ldb, int64_t nt, int64_t b0, int64_t b1, int64_t V, float *bm,
                     int64_t nsp) {
    for (int64_t t = 0; t < nt; t++) {
        const float *row = buf + t * ldb - b0 * LANES;            /* indexed by vocabulary entry */
        for (int64_t b = b0; b < b1; b += SPAN) {
            const int64_t e0 = b * LANES, e1 = (b + SPAN) * LANES < V ? (b + SPAN) * LANES : V;
            float m;
            if (e1 - e0 == SPAN * LANES) {
                v16f v = load16(row, 0, e0);
                for (int64_t e = e0 + LANES; e < e1; e += LANES) v = max16(load16(row, 0, e), v);
                m = hmax16(v);
            } else {
                m = -INFINITY;
                for (int64_t e = e0; e < e1; e++) m = row[e] > m ? row[e] : m;
            }
            bm[t * nsp + b / SPAN] = m;
        }
    }
}

/* The K-th largest of row n's span maxima (every span holds an entry below V, so K entries reach it), or
 * -inf where there are fewer than K spans: a quickselect on a copy (quicker than a heap of K). */
static float span_bound(const float *bm, int64_t nsp, int K) {
    if (nsp < K) return -INFINITY;
    float a[nsp];
    memcpy(a, bm, (size_t)nsp * sizeof(float));
    int64_t lo = 0, hi = nsp - 1;
    const int64_t want = K - 1;                        /* position in descending order */
    while (lo < hi) {
        const float pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                const float t = a[i]; a[i] = a[j]; a[j] = t;
                i++; j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;                                    /* a[j + 1 .. i - 1] all equal the pivot */
    }
    return a[want];
}

/* Offer the entries of nt rows' scores in buf (blocks b0 <= b < b1, as span_max reads them) that reach
 * their row's bound, from the spans whose maximum does, to heaps[t] (filled[t] so far). */
static void offer_spans(const float *buf, int64_t ldb, int64_t nt, int64_t b0, int64_t b1, int64_t V,
                        const float *bm, int64_t nsp, const float *bound, Entry *heaps, int *filled, int K) {
    for (int64_t t = 0; t < nt; t++) {
        const float *row = buf + t * ldb - b0 * LANES;
        for (int64_t b = b0; b < b1; b += SPAN) {
            if (!(bm[t * nsp + b / SPAN] >= bound[t])) continue;
            const int64_t e1 = (b + SPAN) * LANES < V ? (b + SPAN) * LANES : V;
            for (int64_t e0 = b * LANES; e0 < e1; e0 += LANES) {
                const v16i hit = load16(row, 0, e0) >= bound[t];
                for (int l = 0; l < LANES && e0 + l < e1; l++)
                    if (hit[l]) push(heaps + t * K, filled + t, K, row[e0 + l], e0 + l);
            }
        }
    }
}

static inline void prefetch_row(const void *W, int w_bf16, int64_t row, int64_t H) {
    const size_t bytes = (size_t)H * (w_bf16 ? 2 : 4);
    const char *p = (const char *)W + (size_t)row * bytes;
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

/* hn [N][H] (hn_bf16: bf16, else fp32); At fp32 [H][rp] (A transposed, ranks padded with zeros to rp, a
 * multiple of 16); W [V][H], bf16 (w_bf16) or fp32; Bblk bf16 [ceil(V / 16)][r / 2][16][2] (r even:
 * element [b][p][l][e] = B[16 b + l][2 p + e]); 1 <= k <= K <= min(V, 4096). Writes logp [N][k]
 * (log-probabilities under the softmax over the K exact logits) and idx [N][k] (rows of W). Returns 0, or
 * -1 if the workspace cannot be allocated. */
int lowrank_topk(const void *hn, int hn_bf16, int64_t N, int64_t H, const float *At, int64_t rp,
                 const void *Bblk, const void *W, int w_bf16, int64_t r, int64_t V, int K, int k, float *logp,
                 int64_t *idx) {
    const int64_t nb = (V + LANES - 1) / LANES, ld = nb * LANES, nch = (nb + CHUNK - 1) / CHUNK;
    const int64_t nsp = (nb + SPAN - 1) / SPAN, pairs = r / 2;
#if HAVE_AMX
    const int amx = N >= AMX_MIN_ROWS && pairs <= 32 && amx_ready();
#else
    const int amx = 0;
#endif
    const int64_t nthr = omp_get_max_threads();
    /* floats: hf, logits, then span maxima and bounds (AMX) or the stored scores; then u's pairs */
    const size_t floats = (size_t)N * (H + K + (amx ? nsp + 1 : ld) + pairs);
    const size_t entries = amx ? (size_t)nthr * N * K : 0;          /* a heap per thread and row */
    if (!grow((void **)&work, &work_cap, floats * sizeof(float) + entries * sizeof(Entry) + nthr * N * sizeof(int))
            || !grow((void **)&cand_buf, &cand_cap, (size_t)N * K * sizeof(int64_t)))
        return -1;
    float *hf = work, *lg = hf + (size_t)N * H, *s = lg + (size_t)N * K;      /* s: scores, or span maxima */
    float *bound = s + (size_t)N * nsp;
    uint32_t *ub = (uint32_t *)(s + (size_t)N * (amx ? nsp + 1 : ld));        /* u's pairs in bf16 */
    Entry *heaps = (Entry *)((char *)work + floats * sizeof(float));
    int *filled = (int *)(heaps + entries);
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            float *h = hf + n * H;
            for (int64_t i = 0; i < H; i++) h[i] = load1(hn, hn_bf16, n * H + i);
            float u[rp];
            for (int64_t j0 = 0; j0 < rp; j0 += 4 * LANES) {          /* 64 ranks at a time in registers */
                const int nv = rp - j0 >= 4 * LANES ? 4 : (int)((rp - j0) / LANES);
                v16f acc[4] = {{0}, {0}, {0}, {0}};
                for (int64_t i = 0; i < H; i++)
                    for (int q = 0; q < nv; q++) acc[q] = fma16(h[i], load16(At, 0, i * rp + j0 + q * LANES), acc[q]);
                for (int q = 0; q < nv; q++) store16(u + j0 + q * LANES, acc[q]);
            }
            for (int64_t p = 0; p < pairs; p++)
                ub[n * pairs + p] = (uint32_t)bf16_round(u[2 * p]) | (uint32_t)bf16_round(u[2 * p + 1]) << 16;
            for (int64_t t = 0; t < nthr; t++) filled[t * N + n] = 0;
        }
#if HAVE_AMX
        if (amx) {
            const int64_t tid = omp_get_thread_num();
            float buf[16 * CHUNK * LANES];             /* one chunk's scores of up to 16 rows, in L1 */
            for (int sweep = 0; sweep < 2; sweep++) {  /* 0: span maxima; 1: the same scores, offered */
                for (int pass = 0; pass < 2; pass++) {  /* full tiles of 16 rows, then the rest (same for all) */
                    const int64_t M = pass == 0 ? 16 : N % 16, first = pass == 0 ? 0 : N - N % 16;
                    const int64_t last = pass == 0 ? N - N % 16 : N;
                    if (M == 0 || first == last) continue;
                    amx_config((int)M, pairs);
                    #pragma omp for schedule(static)
                    for (int64_t c = 0; c < nch; c++) {
                        const int64_t b0 = c * CHUNK, b1 = b0 + CHUNK < nb ? b0 + CHUNK : nb;
                        for (int64_t n0 = first; n0 < last; n0 += M) {
                            amx_score(ub, pairs, n0, (const uint16_t *)Bblk, b0, b1, buf, CHUNK * LANES);
                            if (sweep == 0)
                                span_max(buf, CHUNK * LANES, M, b0, b1, V, s + n0 * nsp, nsp);
                            else
                                offer_spans(buf, CHUNK * LANES, M, b0, b1, V, s + n0 * nsp, nsp, bound + n0,
                                            heaps + (tid * N + n0) * K, filled + tid * N + n0, K);
                        }
                    }
                }
                if (sweep == 0) {
                    #pragma omp for schedule(static)
                    for (int64_t n = 0; n < N; n++) bound[n] = span_bound(s + n * nsp, nsp, K);
                }
            }
            _tile_release();
        }
#endif
        if (!amx) {
            #pragma omp for schedule(static)
            for (int64_t b = 0; b < nb; b++)
                for (int64_t n0 = 0, nt; n0 < N; n0 += nt) {
                    nt = N - n0 >= TILE ? TILE : N - n0 >= 4 ? 4 : N - n0 >= 2 ? 2 : 1;
                    score_rows(ub + n0 * pairs, pairs, (int)nt, (const uint16_t *)Bblk + b * pairs * 2 * LANES,
                               s + n0 * ld + b * LANES, ld);
                }
        }
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            int64_t *c = cand_buf + n * K;
            float *x = lg + n * K;
            if (amx) {                                 /* merge the threads' heaps of the row */
                Entry heap[K];
                int got = 0;
                for (int64_t t = 0; t < nthr; t++) {
                    const Entry *h = heaps + (t * N + n) * K;
                    for (int j = 0; j < filled[t * N + n]; j++) push(heap, &got, K, h[j].v, h[j].i);
                }
                take_sorted(heap, K, c);
            } else {
                topk_row(s + n * ld, 0, V, K, c);
            }
            for (int j = 0; j < PREFETCH && j < K; j++) prefetch_row(W, w_bf16, c[j], H);
            float m = -INFINITY;
            for (int j = 0; j < K; j++) {
                if (j + PREFETCH < K) prefetch_row(W, w_bf16, c[j + PREFETCH], H);
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
