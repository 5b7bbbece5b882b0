/* 16-lane fp32 vectors (GCC/Clang vector extensions: AVX-512 registers where the CPU has them, two AVX2
 * ones or scalar code elsewhere, with the same results) shared by the CPU kernels of this folder. */
#ifndef SPECBENCH_VEC16_H
#define SPECBENCH_VEC16_H
#include <stdint.h>

#define LANES 16

typedef float v16f __attribute__((vector_size(LANES * sizeof(float)), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(LANES * sizeof(int32_t)), aligned(4)));

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

#endif
