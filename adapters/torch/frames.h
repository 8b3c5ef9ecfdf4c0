/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/frames.h — the history's context function of libdmm_torch (frames.c). Internal. */
#ifndef DMM_TORCH_FRAMES_H
#define DMM_TORCH_FRAMES_H

#include <stdint.h>

#include "dmm_torch.h"
#include "front.h" /* DMM_TORCH_MAX_DEVICES: a slot per device the library serves */

/* The dmm_device_context_fn of a device with a hook; its argument is the device's slot. */
uint32_t dmm__torch_context(void *arg, int event);
/* Sets `device`'s slot (0 ≤ device < DMM_TORCH_MAX_DEVICES): the hook (NULL: none), the event kinds it
 * is called for, how many native frames it is given (0 … DMM_TORCH_NATIVE_FRAMES_MAX). Returns the slot,
 * the context function's argument. With hook NULL, returns once no call into any hook is in flight. */
void *dmm__torch_context_set(int device, dmm_torch_context_fn hook, uint32_t events, int native_depth);

#endif /* DMM_TORCH_FRAMES_H */
