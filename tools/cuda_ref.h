/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cuda_ref.h — the reference the pool is measured against on a GPU: CUDA's own stream-ordered
 * pool (cuMemAllocAsync / cuMemFreeAsync on the device's default memory pool), called directly
 * through libcuda.so.1 opened with dlopen (no cuda.h needed, so the tool and the benchmarks build
 * anywhere; without a driver or GPU `open` fails with a sentence and callers skip).
 *
 * Thread contract: one owner; the calling thread gets the primary context made current.
 */
#ifndef DMM_TOOLS_CUDA_REF_H
#define DMM_TOOLS_CUDA_REF_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

typedef struct dmm_cuda_ref dmm_cuda_ref;

/* Opens libcuda, device 0's primary context, and makes it current. 0, or -1 with a sentence. */
int dmm_cuda_ref_open(dmm_cuda_ref **out, char *err, size_t errcap);
void dmm_cuda_ref_close(dmm_cuda_ref *r);
/* Makes the primary context current on the calling thread. */
int dmm_cuda_ref_bind(dmm_cuda_ref *r);
/* A new non-blocking stream (NULL on failure); destroy with dmm_cuda_ref_stream_destroy. */
void *dmm_cuda_ref_stream_create(dmm_cuda_ref *r);
void dmm_cuda_ref_stream_destroy(dmm_cuda_ref *r, void *stream);
int dmm_cuda_ref_sync(dmm_cuda_ref *r, void *stream);

/* The median ns of one cuMemAllocAsync + cuMemFreeAsync pair of `bytes` on `stream` (enqueue only),
 * over `samples` batches of `batch` pairs; -1 on failure. */
double dmm_cuda_ref_pair_ns(dmm_cuda_ref *r, size_t bytes, void *stream, int samples, int batch);

/* Replays trace `t` through cuMemAllocAsync/cuMemFreeAsync (trace stream 0 = the default stream,
 * others get their own) and synchronizes at the end; returns the seconds, or -1 with a sentence.
 * *peak_reserved (may be NULL) receives the driver pool's reserved peak during the replay (its
 * physical memory: the driver's fragmentation is that ÷ the trace's peak live), 0 when the driver
 * cannot tell. */
double dmm_cuda_ref_replay(dmm_cuda_ref *r, const dmm_trace *t, uint64_t *peak_reserved, char *err, size_t errcap);

#endif /* DMM_TOOLS_CUDA_REF_H */
