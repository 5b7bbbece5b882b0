/* x @ W^T in bf16 on AMX tiles, each output row computed the same way whatever the number of rows.
 *
 * Exact verification needs every row of a linear layer computed as if it were alone (a tree node as
 * vanilla decoding computes it). oneDNN's bf16 kernels do that only up to 32 rows, so a step of more rows
 * would go in blocks of 32, streaming every weight once per block (40 rows costing twice 32). Here one pass
 * over the weights serves any number of rows. Rows are padded to a multiple of 16 and every 16 go through the
 * same tile products: an output element is the chain of TDPBF16PS products over the 32-input blocks
 * in order, rounded once to bf16 (nearest even), which depends on that row of x and that row of W only.
 *
 * Weights are laid out once (amx_pack) as [N/32][K/32][2][16 input pairs][16 outputs][2]: the two B tiles
 * of 32 outputs and 32 inputs side by side, a block of 32 outputs contiguous over K, so each thread
 * streams whole blocks. Per block of 32 outputs, rows go 32 at a time (four accumulator tiles, the B
 * tiles loaded once for both row tiles); past 32 rows the block's weights come again from the caches.
 * Python side: reference_eagle4/kernels/amx_linear.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "amx.h"
#include "vec16.h"
#include "workspace.h"

#if HAVE_AMX

/* Eight full tiles of 16 rows x 64 bytes: 0-3 accumulators (row tile r, output half h at 2r + h), 4-5 the
 * two row tiles of x, 6-7 the two halves of W's block. */
static void config(void) {
    TileConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

static uint16_t *xpad;
static size_t xpad_cap;
#endif

/* 1 where this build and this process can run amx_linear. */
int amx_linear_available(void) {
#if HAVE_AMX
    return amx_ready();
#else
    return 0;
#endif
}

/* w [N][K] bf16 (row stride K) into out, N * K elements in amx_linear's layout; N and K multiples of 32. */
void amx_linear_pack(const uint16_t *w, int64_t N, int64_t K, uint16_t *out) {
    const int64_t KB = K / 32;
    #pragma omp parallel for
    for (int64_t nb = 0; nb < N / 32; nb++)
        for (int64_t kb = 0; kb < KB; kb++)
            for (int h = 0; h < 2; h++) {
                uint16_t *t = out + ((nb * KB + kb) * 2 + h) * 512;
                for (int kp = 0; kp < 16; kp++)
                    for (int n = 0; n < 16; n++)
                        for (int j = 0; j < 2; j++)
                            t[(kp * 16 + n) * 2 + j] = w[(nb * 32 + h * 16 + n) * K + kb * 32 + 2 * kp + j];
            }
}

/* out [M][N] (row stride ldo) = x [M][K] (row stride ldx) times the packed W, transposed; bf16 throughout.
 * Runs on the caller's OpenMP threads (torch's), which split the blocks of 32 outputs. Returns 0, -1 where
 * AMX is not available or N, K are not multiples of 32, -2 if the workspace could not be allocated. */
int amx_linear(const uint16_t *x, int64_t M, int64_t K, int64_t ldx, const uint16_t *wt, int64_t N,
               uint16_t *out, int64_t ldo) {
#if HAVE_AMX
    if (!amx_ready() || K % 32 || N % 32) return -1;
    const int64_t M16 = (M + 15) / 16 * 16, KB = K / 32, NB = N / 32;
    if (!grow((void **)&xpad, &xpad_cap, (size_t)M16 * K * sizeof(uint16_t))) return -2;
    for (int64_t r = 0; r < M16; r++) {           /* padding rows are zeros: computed, never written out */
        if (r < M) memcpy(xpad + r * K, x + r * ldx, (size_t)K * sizeof(uint16_t));
        else memset(xpad + r * K, 0, (size_t)K * sizeof(uint16_t));
    }
    #pragma omp parallel
    {
        config();
        float acc[2][2][16][16];                  /* [row tile][output half][row][output] */
        #pragma omp for schedule(static)
        for (int64_t nb = 0; nb < NB; nb++) {
            const uint16_t *wb = wt + nb * KB * 1024;
            for (int64_t r0 = 0; r0 < M16; r0 += 32) {
                const int two = r0 + 16 < M16;
                _tile_zero(0);
                _tile_zero(1);
                if (two) {
                    _tile_zero(2);
                    _tile_zero(3);
                }
                for (int64_t kb = 0; kb < KB; kb++) {
                    _tile_loadd(6, wb + kb * 1024, 64);
                    _tile_loadd(7, wb + kb * 1024 + 512, 64);
                    _tile_loadd(4, xpad + r0 * K + kb * 32, K * sizeof(uint16_t));
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    if (two) {
                        _tile_loadd(5, xpad + (r0 + 16) * K + kb * 32, K * sizeof(uint16_t));
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
                _tile_stored(0, acc[0][0], 64);
                _tile_stored(1, acc[0][1], 64);
                if (two) {
                    _tile_stored(2, acc[1][0], 64);
                    _tile_stored(3, acc[1][1], 64);
                }
                for (int t = 0; t <= two; t++)
                    for (int rr = 0; rr < 16 && r0 + 16 * t + rr < M; rr++) {
                        uint16_t *o = out + (r0 + 16 * t + rr) * ldo + nb * 32;
                        for (int h = 0; h < 2; h++) store16_bf16(o + 16 * h, load16(acc[t][h][rr], 0, 0));
                    }
            }
        }
        _tile_release();
    }
    return 0;
#else
    (void)x; (void)M; (void)K; (void)ldx; (void)wt; (void)N; (void)out; (void)ldo;
    return -1;
#endif
}
