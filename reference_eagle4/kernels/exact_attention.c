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

#define LANES 16
#define MAX_D 256

static float *work;
static size_t work_cap;
static int *iwork;
static size_t iwork_cap;

/* Buffers kept between calls (the engine calls once per layer and step); one caller at a time. */
static int grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc(bytes);
        *cap = *buf ? bytes : 0;
    }
    return *buf != NULL;
}

static inline float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void load_row(const void *base, int bf16, int64_t offset, int D, float *dst) {
    if (bf16) {
        const uint16_t *src = (const uint16_t *)base + offset;
        for (int d = 0; d < D; d++) dst[d] = bf16_value(src[d]);
    } else {
        memcpy(dst, (const float *)base + offset, (size_t)D * sizeof(float));
    }
}

typedef float v16f __attribute__((vector_size(LANES * sizeof(float)), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(LANES * sizeof(int32_t)), aligned(4)));

/* exp(x) lane by lane for x <= 0 (Cephes' polynomial): x = n ln2 + r with n = round(x / ln2). */
static inline v16f exp_nonpositive(v16f x) {
    const v16f lo = (v16f){0} - 87.0f;
    const v16i low = x < lo;
    x = (v16f)(((v16i)x & ~low) | ((v16i)lo & low));
    const v16f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;    /* round to nearest */
    v16f r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16f y = r * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    const v16i bits = (__builtin_convertvector(n, v16i) + 127) << 23;
    return y * (v16f)bits;
}

/* out[r][l] = the chain fmaf(x_r[i], m[i * stride + l], .) over i = 0..n-1, for 4 rows r and 16 lanes l:
 * scores (x = a query, m = 16 keys transposed, n = D) and weighted values (x = softmax weights, m = 16
 * dimensions of the values, n = keys). Four independent chains hide the fmaf latency. */
static inline void fma_rows4(const float *x0, const float *x1, const float *x2, const float *x3,
                             const float *m, int64_t stride, int64_t n, float out[4][LANES]) {
    float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float y0 = x0[i], y1 = x1[i], y2 = x2[i], y3 = x3[i];
        const float *mi = m + i * stride;
        for (int l = 0; l < LANES; l++) {
            a0[l] = fmaf(y0, mi[l], a0[l]);
            a1[l] = fmaf(y1, mi[l], a1[l]);
            a2[l] = fmaf(y2, mi[l], a2[l]);
            a3[l] = fmaf(y3, mi[l], a3[l]);
        }
    }
    memcpy(out[0], a0, sizeof a0);
    memcpy(out[1], a1, sizeof a1);
    memcpy(out[2], a2, sizeof a2);
    memcpy(out[3], a3, sizeof a3);
}

static inline uint16_t bf16_round(float f) {       /* round to nearest even, as torch's .to(bfloat16) */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* q, out [B, H, T, D] contiguous, bf16 (io_bf16 = 1) or fp32; k, v: cache views, element (b, h, s, d) at
 * b*sb + h*sh + s*D + d, bf16 (kv_bf16 = 1) or fp32; lens [B]; mask [B, T, T] uint8 (row t = the new tokens
 * token t sees). D must be a multiple of 16, at most MAX_D. Runs on the caller's OpenMP threads (torch's, as
 * the library shares its runtime). Returns 0, -1 if the workspace could not be allocated, -2 for a bad D. */
int exact_attention(const void *q, int io_bf16, const void *k, const void *v, int kv_bf16, int64_t sb,
                    int64_t sh, const int64_t *lens, const uint8_t *mask, void *out, int B, int H, int KV,
                    int T, int D, float scale) {
    if (D % LANES || D > MAX_D) return -2;
    const int G = H / KV, R = G * T, R4 = (R + 3) / 4 * 4;
    int64_t smax = 0;
    for (int b = 0; b < B; b++) smax = lens[b] + T > smax ? lens[b] + T : smax;
    const int64_t sp = (smax + LANES - 1) / LANES * LANES;
    /* queries [R4][D], scores [R4][sp], softmax weights [R4][sp], sums [R], keys transposed in blocks of 16
     * positions [sp][D], values [sp][D]; each row's tree keys [R][T] and their count [R] */
    const size_t need = (size_t)R4 * D + 2 * (size_t)R4 * sp + R + 2 * (size_t)sp * D;
    if (!grow((void **)&work, &work_cap, need * sizeof(float)) ||
        !grow((void **)&iwork, &iwork_cap, (size_t)R * (T + 1) * sizeof(int)))
        return -1;
    float *qf = work, *sc = qf + (size_t)R4 * D, *w = sc + (size_t)R4 * sp, *sums = w + (size_t)R4 * sp;
    float *kt = sums + R, *vf = kt + (size_t)sp * D;
    int *tail = iwork, *count = iwork + (size_t)R * T;

    #pragma omp parallel
    for (int b = 0; b < B; b++) {
        const int64_t L = lens[b], S = L + T, S16 = (S + LANES - 1) / LANES * LANES;
        const uint8_t *mb = mask + (size_t)b * T * T;
        for (int g = 0; g < KV; g++) {
            const size_t q0 = ((size_t)(b * H + g * G) * T) * D;       /* the R rows sharing key head g */
            const int64_t base = b * sb + g * sh;
            /* 0. this head's queries, keys (transposed, 16 positions a block) and values, as fp32 */
            #pragma omp for
            for (int r = 0; r < R4; r++) {
                if (r < R) load_row(q, io_bf16, (int64_t)(q0 + (size_t)r * D), D, qf + (size_t)r * D);
                else memset(qf + (size_t)r * D, 0, (size_t)D * sizeof(float));
            }
            #pragma omp for
            for (int64_t s = 0; s < S16; s++) {
                float row[MAX_D];
                float *kb = kt + (s / LANES) * D * LANES + s % LANES;
                if (s < S) {
                    load_row(k, kv_bf16, base + s * D, D, row);
                    for (int d = 0; d < D; d++) kb[d * LANES] = row[d];
                    load_row(v, kv_bf16, base + s * D, D, vf + (size_t)s * D);
                } else {
                    for (int d = 0; d < D; d++) kb[d * LANES] = 0.0f;
                }
            }
            /* 1. scores over every cache position 0..S-1, 4 rows x 16 positions a block */
            const int64_t nblk = S16 / LANES;
            #pragma omp for
            for (int64_t job = 0; job < (int64_t)(R4 / 4) * nblk; job++) {
                const int r0 = (int)(job / nblk) * 4;
                const int64_t s0 = job % nblk * LANES;
                float blk[4][LANES];
                const float *qr = qf + (size_t)r0 * D;
                fma_rows4(qr, qr + D, qr + 2 * D, qr + 3 * D, kt + s0 * D, LANES, D, blk);
                for (int rr = 0; rr < 4; rr++)
                    for (int l = 0; l < LANES; l++) sc[(size_t)(r0 + rr) * sp + s0 + l] = blk[rr][l] * scale;
            }
            /* 2. per row: its logical keys (prefix, then its tree row), softmax weights and their sum */
            #pragma omp for
            for (int r = 0; r < R4; r++) {
                float *wr = w + (size_t)r * sp;
                if (r >= R) {                              /* padding rows of the last block of 4 */
                    memset(wr, 0, (size_t)sp * sizeof(float));
                    continue;
                }
                const int t = r % T;
                const float *sr = sc + (size_t)r * sp;
                int *tr = tail + (size_t)r * T;
                int64_t n = L;
                memcpy(wr, sr, (size_t)L * sizeof(float));
                int c = 0;
                for (int j = 0; j < T; j++)
                    if (mb[t * T + j]) {
                        tr[c++] = j;
                        wr[n++] = sr[L + j];
                    }
                count[r] = c;
                const int64_t np = (n + LANES - 1) / LANES * LANES;
                for (int64_t i = n; i < np; i++) wr[i] = -INFINITY;
                float lanes[LANES];
                for (int l = 0; l < LANES; l++) lanes[l] = -INFINITY;
                for (int64_t i0 = 0; i0 < np; i0 += LANES)
                    for (int l = 0; l < LANES; l++) lanes[l] = wr[i0 + l] > lanes[l] ? wr[i0 + l] : lanes[l];
                float m = -INFINITY;                  /* the maximum: exact in any order */
                for (int l = 0; l < LANES; l++) m = lanes[l] > m ? lanes[l] : m;
                for (int64_t i0 = 0; i0 < np; i0 += LANES)
                    *(v16f *)(wr + i0) = exp_nonpositive(*(v16f *)(wr + i0) - m);
                for (int64_t i = n; i < np; i++) wr[i] = 0.0f;
                for (int l = 0; l < LANES; l++) lanes[l] = 0.0f;
                for (int64_t i0 = 0; i0 < np; i0 += LANES)
                    for (int l = 0; l < LANES; l++) lanes[l] += wr[i0 + l];
                float total = 0.0f;
                for (int l = 0; l < LANES; l++) total += lanes[l];
                sums[r] = total;
            }
            /* 3. weighted values: the shared prefix 4 rows x 16 dimensions a block, then each row's tree keys */
            const int nd = D / LANES;
            #pragma omp for
            for (int job = 0; job < R4 / 4 * nd; job++) {
                const int r0 = job / nd * 4, d0 = job % nd * LANES;
                float blk[4][LANES];
                const float *wp = w + (size_t)r0 * sp;
                fma_rows4(wp, wp + sp, wp + 2 * sp, wp + 3 * sp, vf + d0, D, L, blk);
                for (int rr = 0; rr < 4 && r0 + rr < R; rr++) {
                    const int r = r0 + rr;
                    float *ar = blk[rr];
                    for (int c = 0; c < count[r]; c++) {
                        const float wi = w[(size_t)r * sp + L + c];
                        const float *vi = vf + (size_t)(L + tail[(size_t)r * T + c]) * D + d0;
                        for (int l = 0; l < LANES; l++) ar[l] = fmaf(wi, vi[l], ar[l]);
                    }
                    const float total = sums[r];
                    const size_t o = q0 + (size_t)r * D + d0;
                    for (int l = 0; l < LANES; l++) {
                        const float x = total > 0.0f ? ar[l] / total : 0.0f;
                        if (io_bf16) ((uint16_t *)out)[o + l] = bf16_round(x);
                        else ((float *)out)[o + l] = x;
                    }
                }
            }
        }
    }
    return 0;
}
