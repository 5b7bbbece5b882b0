/* 16-lane fp32 vectors (GCC/Clang vector extensions: AVX-512 registers where the CPU has them, two AVX2
 * ones or scalar code elsewhere, with the same results) shared by the CPU kernels of this folder. */
#ifndef SPECBENCH_VEC16_H
#define SPECBENCH_VEC16_H
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define LANES 16

typedef float v16f __attribute__((vector_size(LANES * sizeof(float)), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(LANES * sizeof(int32_t)), aligned(4)));

typedef uint16_t v16h __attribute__((vector_size(LANES * sizeof(uint16_t)), aligned(2)));

static inline void store16(float *dst, v16f x) { *(v16f *)dst = x; }

/* 16 values from element i on, bf16 (widened exactly) or fp32. Vector loads and stores go through the
 * vector types (unaligned, as declared), not memcpy: GCC splits a 64-byte memcpy into two 32-byte moves,
 * and a 64-byte load of what two 32-byte stores just wrote stalls on store forwarding. */
static inline v16f load16(const void *row, int bf16, int64_t i) {
#if defined(__AVX512F__)
    /* one 512-bit widening from memory (asm: GCC splits the generic form below, and even the intrinsic,
     * into two 256-bit halves and a lane insert, shuffle-port uops that compete with the FMAs) */
    if (bf16) {
        __m512i w;
        __asm__("vpmovzxwd %1, %0" : "=v"(w) : "m"(*(const __m256i *)((const uint16_t *)row + i)));
        return (v16f)_mm512_slli_epi32(w, 16);
    }
#else
    if (bf16) return (v16f)(__builtin_convertvector(*(const v16h *)((const uint16_t *)row + i), v16i) << 16);
#endif
    return *(const v16f *)((const float *)row + i);
}

/* Element i, bf16 (widened exactly) or fp32: load16 for one value. */
static inline float load1(const void *row, int bf16, int64_t i) {
    if (bf16) {
        uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)row)[i];
}

/* a * b + c lane by lane for a scalar a, rounded once (fmaf's result on every path): one broadcast FMA on
 * AVX-512 CPUs, where GCC keeps a loop of fmaf's accumulators in memory rather than in registers */
static inline v16f fma16(float a, v16f b, v16f c) {
#if defined(__AVX512F__)
    return (v16f)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)c);
#else
    v16f r;
    for (int l = 0; l < LANES; l++) r[l] = __builtin_fmaf(a, b[l], c[l]);
    return r;
#endif
}

static inline uint16_t bf16_round(float f) {       /* round to nearest even, as torch's .to(bfloat16) */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16_round of 16 lanes at once, NaN kept a quiet NaN (integer vector code: AVX512-BF16's conversion would
 * flush denormals to zero, which bf16_round and torch do not) */
static inline void store16_bf16(uint16_t *dst, v16f x) {
    typedef uint32_t v16u __attribute__((vector_size(LANES * sizeof(uint32_t)), aligned(4)));
    const v16u u = (v16u)x;
    const v16u rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u);
    const v16u bits = (((u >> 16) | 0x40u) & nan) | (rounded & ~nan);
    *(v16h *)dst = __builtin_convertvector(bits, v16h);
}

/* a where mask (all ones) else b, lane by lane (GCC's C has no vector ?:) */
static inline v16f select16(v16i mask, v16f a, v16f b) {
    return (v16f)(((v16i)a & mask) | ((v16i)b & ~mask));
}

static inline v16f max16(v16f a, v16f b) { return select16(a > b, a, b); }

/* exp(x) lane by lane for x <= 0 (Cephes' polynomial, about 1 ulp): x = n ln2 + r, n = round(x / ln2). */
static inline v16f exp_nonpositive(v16f x) {
    const v16f lo = (v16f){0} - 87.0f;
    x = max16(x, lo);
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

/* Transpose 16 rows of 16 lanes in place (r[i][j] becomes r[j][i]): four butterfly stages, each swapping
 * the off-diagonal blocks of size b = 8, 4, 2, 1 between rows i and i + b; 64 two-source shuffles in all. */
#define TRANSPOSE_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define TRANSPOSE_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define TRANSPOSE_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define TRANSPOSE_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define TRANSPOSE_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define TRANSPOSE_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define TRANSPOSE_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define TRANSPOSE_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define TRANSPOSE_STAGE(b, lo, hi)                                    \
    for (int i = 0; i < LANES; i++) {                                 \
        if (i & (b)) continue;                                        \
        const v16f a = r[i], c = r[i | (b)];                          \
        r[i] = __builtin_shufflevector(a, c, lo);                     \
        r[i | (b)] = __builtin_shufflevector(a, c, hi);               \
    }

static inline void transpose16(v16f r[LANES]) {
    TRANSPOSE_STAGE(8, TRANSPOSE_LO8, TRANSPOSE_HI8)
    TRANSPOSE_STAGE(4, TRANSPOSE_LO4, TRANSPOSE_HI4)
    TRANSPOSE_STAGE(2, TRANSPOSE_LO2, TRANSPOSE_HI2)
    TRANSPOSE_STAGE(1, TRANSPOSE_LO1, TRANSPOSE_HI1)
}

#endif
