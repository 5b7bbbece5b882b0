/* What the AMX kernels of this folder share: HAVE_AMX, the tile configuration and the permission to use
 * the tiles. */
#ifndef SPECBENCH_AMX_H
#define SPECBENCH_AMX_H

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_AMX 1

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

/* Linux lends AMX's tile state to a process that asks (once; oneDNN's AMX kernels ask too). */
static int amx_ready(void) {
    static int state;                            /* 0 not asked yet, 1 granted, -1 refused */
    if (state == 0)
        state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 1 : -1;
    return state > 0;
}
#else
#define HAVE_AMX 0
#endif

#endif
