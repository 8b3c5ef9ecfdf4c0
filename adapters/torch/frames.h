/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/frames.h — the history's context function of libdmm_torch (frames.c). Internal. */
#ifndef DMM_TORCH_FRAMES_H
#define DMM_TORCH_FRAMES_H

#include <stdint.h>

#include "dmm_torch.h"

/* The dmm_device_context_fn every device of libdmm_torch gets while a hook is set. */
uint32_t dmm__torch_context(void *arg, int event);
/* Sets the hook (NULL: none) and how many native frames it is given (0 … DMM_TORCH_NATIVE_FRAMES_MAX). */
void dmm__torch_context_set(dmm_torch_context_fn hook, int native_depth);

#endif /* DMM_TORCH_FRAMES_H */
