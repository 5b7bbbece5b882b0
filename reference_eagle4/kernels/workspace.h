/* Scratch buffers the CPU kernels of this folder keep between calls (a kernel runs once per layer or per
 * draft level, every step: allocating each time would cost more than some calls' work). One caller at a
 * time, as the engine is. */
#ifndef SPECBENCH_WORKSPACE_H
#define SPECBENCH_WORKSPACE_H
#include <stdlib.h>

/* *buf holds at least `bytes` (growing it, contents not kept); 0 if that allocation failed. */
static int grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc(bytes);
        *cap = *buf ? bytes : 0;
    }
    return *buf != NULL;
}

#endif
