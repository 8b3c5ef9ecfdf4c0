/* adapters/torch/offload.h — a tag's offload and restore. Internal. */
#ifndef DMM_TORCH_OFFLOAD_H
#define DMM_TORCH_OFFLOAD_H

#include "types.h"

dmm_status dmm__torch_offload(tctx *c, const char *tag, int mode, dmm_stream stream);
dmm_status dmm__torch_restore(tctx *c, const char *tag, dmm_stream stream);
/* Blocks until the tag's offload has decommitted (waits on the offload's own event, never on the
 * device or a stream). */
dmm_status dmm__torch_offload_wait(tctx *c, const char *tag);
dmm_status dmm__torch_release_host(tctx *c, const char *tag);

#endif /* DMM_TORCH_OFFLOAD_H */
