/* Exact-by-construction attention of T new tokens per sequence over a ragged KV cache, on the CPU.
 *
 * Greedy speculative decoding reproduces vanilla decoding only if a tree node's attention output is
 * bit-for-bit what decoding its path one token at a time computes. BLAS and SDPA kernels sum in an order
 * that depends on the batch (blocking by row count, vector lanes by key position), and a node's ancestors
 * sit at other cache positions than when vanilla reaches the same token. Here every output element is one
 * fixed sequence of fp32 operations over the query's *logical* keys (its prefix in order, then the tree
 * tokens it sees, in tree order, which is the order vanilla decoding cached them in), whatever else the
 * step holds:
 *   - a score is the chain fmaf(q[d], k[d], acc) over d = 0..D-1, times the scale;
 *   - the softmax sum keeps 16 partial sums, logical key i going to sum i % 16, added in a fixed order;
 *   - the output is the chain fmaf(w_i, v_i[d], acc) over the logical keys, divided by that sum.
 * Loops run over rows, lanes and head dimensions only element-wise, so vectorised and scalar code paths
 * compute the same values (built with -ffp-contract=off; fmaf is exactly rounded on every path).
 * Python side: reference_eagle4/kernels/exact_attention_cpu.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "vec16.h"
#include "workspace.h"

#define MAX_D 256

static float *work;
static size_t work_cap;
static int *iwork;
static size_t iwork_cap;

/* D values (a multiple of 16) from element offset on, as fp32 */
static inline void load_row(const void *base, int bf16, int64_t offset, int D, float *dst) {
    for (int d = 0; d < D; d += LANES) {
        store16(dst + d, load16(base, bf16, offset + d));
    }
}

/* out[j][r][l] = the chain fmaf(x_r[i], m[off + j * jump + i * stride + l], .) over i = 0..n-1, for nr rows
 * r (4 or 8, a constant where inlined), 16 lanes l and blocks j < nb (1 or 2), m bf16 (widened exactly as
 * it is read) or fp32: scores (x = a query, m = 16 keys transposed, n = D, the second block the next 16
 * keys) and weighted values (x = softmax weights, m = 16 dimensions of the cached values, n = keys, the
 * second block the next 16 dimensions). Up to 16 independent chains hide the fma latency, and 8 rows share
 * each load of m; each output element is the same chain whatever nr and nb are. */
static inline __attribute__((always_inline)) void fma_rows(const float *const *x, int nr, const void *m,
                                                            int bf16, int64_t off, int64_t stride, int64_t n,
                                                            int64_t jump, int nb, float out[2][8][LANES]) {
    v16f a[8], b[8];
    for (int r = 0; r < nr; r++) a[r] = b[r] = (v16f){0};
    if (nb == 2) {
        for (int64_t i = 0; i < n; i++) {
            const v16f mi = load16(m, bf16, off + i * stride), mj = load16(m, bf16, off + jump + i * stride);
            for (int r = 0; r < nr; r++) {
                const float y = x[r][i];
                a[r] = fma16(y, mi, a[r]);
                b[r] = fma16(y, mj, b[r]);
            }
        }
        for (int r = 0; r < nr; r++) store16(out[1][r], b[r]);
    } else {
        for (int64_t i = 0; i < n; i++) {
            const v16f mi = load16(m, bf16, off + i * stride);
            for (int r = 0; r < nr; r++) a[r] = fma16(x[r][i], mi, a[r]);
        }
    }
    for (int r = 0; r < nr; r++) store16(out[0][r], a[r]);
}

/* fma_rows with nr a constant (so the accumulators stay in registers) */
static void fma_rows_n(const float *const *x, int nr, const void *m, int bf16, int64_t off, int64_t stride,
                       int64_t n, int64_t jump, int nb, float out[2][8][LANES]) {
    if (nr == 8) fma_rows(x, 8, m, bf16, off, stride, n, jump, nb, out);
    else fma_rows(x, 4, m, bf16, off, stride, n, jump, nb, out);
}

/* Rows go in blocks of 8, the last one of 4 where R4 is not a multiple of 8: block rb starts at row 8 rb. */
static inline int row_blocks(int R4) { return (R4 + 7) / 8; }
static inline int block_rows(int R4, int rb) { return R4 - 8 * rb >= 8 ? 8 : 4; }

/* One call's arguments (see exact_attention). */
typedef struct {
    const void *q, *k, *v;
    void *out;
    const int64_t *lens;
    const uint8_t *mask, *valid;
    int64_t sb, sh, sp;
    int io_bf16, kv_bf16, H, G, T, D, R, R4;
    float scale;
} Step;

/* Buffers of one key head: queries [R4][D], scores and softmax weights [R4][sp] each, sums [R], keys
 * transposed in blocks of 16 positions [sp][D] (values are read from the cache as they are); the rows
 * computed (a padding token's are not) [R], each one's tree keys [R][T] and their count [R]. */
typedef struct {
    float *qf, *sc, *w, *sums, *kt;
    int *rows, *tail, *count;
} Buffers;

static size_t floats_per_head(const Step *c) {
    return (size_t)c->R4 * c->D + 2 * (size_t)c->R4 * c->sp + c->R + (size_t)c->sp * c->D;
}

static Buffers buffers(const Step *c, float *f, int *i) {
    Buffers u;
    u.qf = f;
    u.sc = u.qf + (size_t)c->R4 * c->D;
    u.w = u.sc + (size_t)c->R4 * c->sp;
    u.sums = u.w + (size_t)c->R4 * c->sp;
    u.kt = u.sums + c->R;
    u.rows = i;
    u.tail = i + c->R;
    u.count = u.tail + (size_t)c->R * c->T;
    return u;
}

static inline void zero_row(void *base, int bf16, size_t offset, int D) {
    const size_t size = bf16 ? sizeof(uint16_t) : sizeof(float);
    memset((char *)base + offset * size, 0, (size_t)D * size);
}

/* This thread's share [*lo, *hi) of n items split over nt threads. */
static inline void share(int64_t n, int tid, int nt, int64_t *lo, int64_t *hi) {
    *lo = n * tid / nt;
    *hi = n * (tid + 1) / nt;
}

/* Attention of key head g of sequence b for its real rows first..last-1 (in order; first a multiple of 4),
 * by thread tid of nt working on it together (nt = 1: alone). A row's output does not depend on which
 * other rows share the call, so threads may split a head's rows between them. */
static void head(const Step *c, const Buffers *u, int b, int g, int first, int last, int tid, int nt) {
    const int D = c->D, T = c->T;
    const int64_t sp = c->sp, L = c->lens[b], S = L + T, S16 = (S + LANES - 1) / LANES * LANES;
    const uint8_t *mb = c->mask + (size_t)b * T * T, *vb = c->valid ? c->valid + (size_t)b * T : NULL;
    const size_t q0 = ((size_t)(b * c->H + g * c->G) * T) * D;        /* the rows sharing key head g */
    const int64_t base = b * c->sb + g * c->sh;
    float *qf = u->qf, *sc = u->sc, *w = u->w, *sums = u->sums, *kt = u->kt;
    int *rows = u->rows, *tail = u->tail, *count = u->count;
    int real = 0;                                      /* rows of this head's real tokens */
    for (int r = 0; r < c->R; r++) real += !vb || vb[r % T];
    const int R = (real < last ? real : last) - first;  /* this call's, listed in rows */
    if (R <= 0) return;
    const int R4 = (R + 3) / 4 * 4;
    int64_t lo, hi;
    /* 0. the rows, the queries and the keys (transposed, 16 positions a block), as fp32; a padding
     * token's output is zeros (written by the call that has row 0) */
    if (tid == 0) {
        int n = 0, seen = 0;
        for (int r = 0; r < c->R; r++) {
            if (!vb || vb[r % T]) {
                if (seen >= first && seen < first + R) rows[n++] = r;
                seen++;
            } else if (first == 0) zero_row(c->out, c->io_bf16, q0 + (size_t)r * D, D);
        }
    }
    if (nt > 1) {
        #pragma omp barrier
    }
    share(R4, tid, nt, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        if (r < R) load_row(c->q, c->io_bf16, (int64_t)(q0 + (size_t)rows[r] * D), D, qf + (size_t)r * D);
        else memset(qf + (size_t)r * D, 0, (size_t)D * sizeof(float));
    }
    share(S16 / LANES, tid, nt, &lo, &hi);
    for (int64_t blk = lo; blk < hi; blk++) {          /* 16 positions: keys as 16 x 16 tiles, transposed */
        const int64_t s0 = blk * LANES;
        float *kb = kt + s0 * D;
        for (int d0 = 0; d0 < D; d0 += LANES) {
            v16f tile[LANES];
            for (int l = 0; l < LANES; l++)
                tile[l] = s0 + l < S ? load16(c->k, c->kv_bf16, base + (s0 + l) * D + d0) : (v16f){0};
            transpose16(tile);
            for (int d = 0; d < LANES; d++) store16(kb + (size_t)(d0 + d) * LANES, tile[d]);
        }
    }
    if (nt > 1) {
        #pragma omp barrier
    }
    /* 1. scores over every cache position 0..S-1, 8 rows (4 in a last block) x 32 positions a job (16 for an
     * odd last block) */
    const int64_t nblk = S16 / LANES, npair = (nblk + 1) / 2;
    const int nrb = row_blocks(R4);
    share((int64_t)nrb * npair, tid, nt, &lo, &hi);
    for (int64_t job = lo; job < hi; job++) {
        const int rb = (int)(job % nrb), r0 = 8 * rb, nr = block_rows(R4, rb);   /* a key block for every row */
        const int64_t b0 = job / nrb * 2, s0 = b0 * LANES;
        const int nb = b0 + 1 < nblk ? 2 : 1;
        float blk[2][8][LANES];
        const float *qr[8];
        for (int rr = 0; rr < nr; rr++) qr[rr] = qf + (size_t)(r0 + rr) * D;
        fma_rows_n(qr, nr, kt, 0, s0 * D, LANES, D, (int64_t)LANES * D, nb, blk);
        for (int j = 0; j < nb; j++)
            for (int rr = 0; rr < nr; rr++)
                store16(sc + (size_t)(r0 + rr) * sp + s0 + j * LANES, load16(blk[j][rr], 0, 0) * c->scale);
    }
    if (nt > 1) {
        #pragma omp barrier
    }
    /* 2. per row: its logical keys (prefix, then its tree row), softmax weights and their sum */
    share(R4, tid, nt, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        float *wr = w + (size_t)r * sp;
        if (r >= R) {                                  /* padding rows of the last block of 4 */
            memset(wr, 0, (size_t)sp * sizeof(float));
            continue;
        }
        const int t = rows[r] % T;
        const float *sr = sc + (size_t)r * sp;
        int *tr = tail + (size_t)r * T;
        int64_t n = L;
        memcpy(wr, sr, (size_t)L * sizeof(float));
        int cnt = 0;
        for (int j = 0; j < T; j++)
            if (mb[t * T + j]) {
                tr[cnt++] = j;
                wr[n++] = sr[L + j];
            }
        count[r] = cnt;
        const int64_t np = (n + LANES - 1) / LANES * LANES;
        for (int64_t i = n; i < np; i++) wr[i] = -INFINITY;
        v16f acc = (v16f){0} - INFINITY;
        for (int64_t i0 = 0; i0 < np; i0 += LANES) acc = max16(load16(wr, 0, i0), acc);
        float m = -INFINITY;                          /* the maximum: exact in any order */
        for (int l = 0; l < LANES; l++) m = acc[l] > m ? acc[l] : m;
        for (int64_t i0 = 0; i0 < np; i0 += LANES) store16(wr + i0, exp_nonpositive(load16(wr, 0, i0) - m));
        for (int64_t i = n; i < np; i++) wr[i] = 0.0f;
        acc = (v16f){0};                              /* logical key i adds to partial sum i % 16 */
        for (int64_t i0 = 0; i0 < np; i0 += LANES) acc += load16(wr, 0, i0);
        float total = 0.0f;
        for (int l = 0; l < LANES; l++) total += acc[l];
        sums[r] = total;
    }
    if (nt > 1) {
        #pragma omp barrier
    }
    /* 3. weighted values: the shared prefix 8 rows (4 in a last block) x 32 dimensions a job (16 for an odd
     * last block), then each row's tree keys */
    const int nd = D / LANES, nd2 = (nd + 1) / 2;
    share((int64_t)nrb * nd2, tid, nt, &lo, &hi);
    for (int64_t job = lo; job < hi; job++) {
        const int rb = (int)(job % nrb), r0 = 8 * rb, nr = block_rows(R4, rb), j0 = (int)(job / nrb) * 2;
        const int nb = j0 + 1 < nd ? 2 : 1;
        float blk[2][8][LANES];
        const float *wp[8];
        for (int rr = 0; rr < nr; rr++) wp[rr] = w + (size_t)(r0 + rr) * sp;
        fma_rows_n(wp, nr, c->v, c->kv_bf16, base + j0 * LANES, D, L, LANES, nb, blk);
        for (int j = 0; j < nb; j++) {
            const int d0 = (j0 + j) * LANES;
            for (int rr = 0; rr < nr && r0 + rr < R; rr++) {
                const int r = r0 + rr;
                float *ar = blk[j][rr];
                v16f a = load16(ar, 0, 0);
                for (int k = 0; k < count[r]; k++)
                    a = fma16(w[(size_t)r * sp + L + k],
                              load16(c->v, c->kv_bf16, base + (L + tail[(size_t)r * T + k]) * D + d0), a);
                store16(ar, a);
                const float total = sums[r];
                const size_t o = q0 + (size_t)rows[r] * D + d0;
                for (int l = 0; l < LANES; l++) {
                    const float x = total > 0.0f ? ar[l] / total : 0.0f;
                    if (c->io_bf16) ((uint16_t *)c->out)[o + l] = bf16_round(x);
                    else ((float *)c->out)[o + l] = x;
                }
            }
        }
    }
    if (nt > 1) {                                     /* the buffers are reused by the next head */
        #pragma omp barrier
    }
}

/* q, out [B, H, T, D] contiguous, bf16 (io_bf16 = 1) or fp32; k, v: cache views, element (b, h, s, d) at
 * b*sb + h*sh + s*D + d, bf16 (kv_bf16 = 1) or fp32; lens [B]; mask [B, T, T] uint8 (row t = the new tokens
 * token t sees); valid [B, T] uint8 (0: a padding token, skipped, its output zeros) or NULL (all real). D must be a multiple of 16, at most MAX_D. Runs on the caller's OpenMP threads (torch's: the
 * library shares its runtime): each thread takes whole key heads when they share evenly or there are
 * plenty, else equal shares of all heads' row blocks, else (fewer blocks than threads) all threads share
 * each head. Returns 0, -1 if the workspace could not be allocated, -2 for a bad D. */
int exact_attention(const void *q, int io_bf16, const void *k, const void *v, int kv_bf16, int64_t sb,
                    int64_t sh, const int64_t *lens, const uint8_t *mask, const uint8_t *valid, void *out,
                    int B, int H, int KV, int T, int D, float scale) {
    if (D % LANES || D > MAX_D) return -2;
    Step c = {q, k, v, out, lens, mask, valid, sb, sh, 0, io_bf16, kv_bf16, H, H / KV, T, D, 0, 0, scale};
    c.R = c.G * T;
    c.R4 = (c.R + 3) / 4 * 4;
    int64_t smax = 0;
    for (int b = 0; b < B; b++) smax = lens[b] + T > smax ? lens[b] + T : smax;
    c.sp = (smax + LANES - 1) / LANES * LANES;
    const int threads = omp_get_max_threads(), heads = B * KV;
    const size_t nf = floats_per_head(&c), ni = (size_t)c.R * (T + 2);
    if (!grow((void **)&work, &work_cap, nf * threads * sizeof(float)) ||
        !grow((void **)&iwork, &iwork_cap, ni * threads * sizeof(int)))
        return -1;
    const int blocks = c.R4 / 4;                       /* a head's rows, in blocks of 4 */
    #pragma omp parallel
    {
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        if (heads % nt == 0 || heads >= 4 * nt) {      /* whole heads, taken as threads come free */
            const Buffers u = buffers(&c, work + nf * tid, iwork + ni * tid);
            #pragma omp for schedule(dynamic)
            for (int h = 0; h < heads; h++) head(&c, &u, h / KV, h % KV, 0, c.R, 0, 1);
        } else if ((int64_t)heads * blocks >= nt) {    /* equal shares of all heads' row blocks, e.g. 3 key
                                                        * heads on 2 threads: 1.5 each, not 2 and 1 */
            const Buffers u = buffers(&c, work + nf * tid, iwork + ni * tid);
            int64_t lo, hi;
            share((int64_t)heads * blocks, tid, nt, &lo, &hi);
            for (int64_t i = lo; i < hi;) {
                const int h = (int)(i / blocks), first = (int)(i % blocks);
                const int last = hi - i < blocks - first ? first + (int)(hi - i) : blocks;
                head(&c, &u, h / KV, h % KV, 4 * first, 4 * last, 0, 1);
                i += last - first;
            }
        } else {                                       /* few rows: all threads on each head */
            const Buffers u = buffers(&c, work, iwork);
            for (int h = 0; h < heads; h++) head(&c, &u, h / KV, h % KV, 0, c.R, tid, nt);
        }
    }
    return 0;
}
