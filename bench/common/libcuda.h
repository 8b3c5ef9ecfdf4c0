/* SPDX-License-Identifier: Apache-2.0 */
/* bench/common/libcuda.h — libcuda itself, for the benches whose references time the driver's own calls
 * (bench_growth, bench_growth_load): opened once, each entry point bound by its symbol name into a slot
 * typed with dmm's own declarations (driver/cuda_decl.h: no toolkit needed), every CUresult checked.
 * A failure prints one sentence naming the bench and the call to stderr. Bench code only: it exits. */
#ifndef DMM_BENCH_LIBCUDA_H
#define DMM_BENCH_LIBCUDA_H

#include <stdio.h>
#include <stdlib.h>

#include "driver/cuda_decl.h"

/* One entry point to bind: its symbol (e.g. "cuMemAlloc_v2") and where its address goes. */
typedef struct bench_cu_symbol {
    const char *symbol;
    void *slot; /* a pointer to a dmm_<name>_fn pointer */
} bench_cu_symbol;

/* dlopens libcuda.so.1 and binds the n symbols; the library handle, or NULL after a sentence. */
void *bench_libcuda_open(const char *bench, const bench_cu_symbol *symbols, size_t n);

/* The properties of a plain physical handle on `device` (pinned device memory) and the read-write
 * access of that device to where it is mapped: what cuMemCreate and cuMemSetAccess are given. */
void bench_cu_device_memory(int device, dmm_cu_mem_allocation_prop *prop, dmm_cu_mem_access_desc *access);

/* A libcuda call that must succeed: on any other CUresult, a sentence and exit(1). */
#define BENCH_CU(bench, call)                                                                       \
    do {                                                                                            \
        dmm_cu_result r_ = (call);                                                                  \
        if (r_ != DMM_CUDA_SUCCESS) {                                                               \
            fprintf(stderr, "%s: %s failed with CUresult %d\n", (bench), #call, (int)r_);            \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#endif /* DMM_BENCH_LIBCUDA_H */
