/* adapters/torch/record.h — the recorder: every malloc and free the adapter serves, written as a dmm
 * trace (`# dmm-trace v1`, gzip; docs/trace-format.md) while it is on. Internal to libdmm_torch.so and
 * its tests; the public face is dmm_torch_record_start / _stop (dmm_torch.h).
 *
 * Thread contract: thread-safe. The hooks run on every malloc and free; off, each costs one relaxed
 * load. The recorder's locks are leaves: nothing is called under them but zlib and the host heap.
 */
#ifndef DMM_TORCH_RECORD_H
#define DMM_TORCH_RECORD_H

#include "dmm_torch.h"
#include "types.h"

/* Opens `path` for writing (gzip) and starts recording; `workload` (may be NULL or "") goes into the
 * header. DMM_ERR_INVALID_ARGUMENT for a path that cannot be opened (the sentence names it and the
 * system's reason), DMM_ERR_BUSY when a recording is already on; both change nothing. */
dmm_status dmm__torch_record_start(tctx *c, const char *path, const char *workload);
/* Ends the recording: writes what is buffered and the trailer, closes the file. *out (optional,
 * out->size set by the caller) gets the recording's counts, also when the recording failed. Returns
 * DMM_OK, or the first failure of the recording (a write that failed, host memory that ran out: the
 * file is then incomplete and the sentence says so); DMM_ERR_INVALID_ARGUMENT when nothing is being
 * recorded. The recorder is off afterwards either way. */
dmm_status dmm__torch_record_stop(tctx *c, dmm_torch_record_stats *out);
/* Whether a recording is on (a relaxed read: for the hooks' callers and tests). */
bool dmm__torch_recording(tctx *c);

/* The hooks (adapter.c): a block handed out (after the route served it), a block about to be freed
 * (before the route frees it, so that its address cannot be handed out again and recorded before its
 * free is; free returns whether it wrote the free, and a free the route then refuses is answered with
 * a new allocation of the same block, so that the trace stays true). `bytes` is the block's rounded
 * size. They never fail: a failure is kept for stop. */
void dmm__torch_record_alloc(tctx *c, const void *ptr, uint64_t bytes, dmm_stream stream);
bool dmm__torch_record_free(tctx *c, const void *ptr);

/* The recorder's locks and state, at create; at destroy (a recording still on is stopped, its result
 * dropped: the context is going). */
void dmm__torch_record_init(tctx *c);
void dmm__torch_record_fini(tctx *c);

#endif /* DMM_TORCH_RECORD_H */
