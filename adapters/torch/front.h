/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/front.h — what torch_cuda.c shares with the other files of libdmm_torch.so that put more
 * frameworks on its governor (ort_front.c). Internal. */
#ifndef DMM_TORCH_FRONT_H
#define DMM_TORCH_FRONT_H

#include "dmm/device.h"
#include "dmm/governor.h"
#include "dmm/status.h"

#define DMM_TORCH_MAX_DEVICES 64 /* CUDA ordinals the library serves: 0 .. 63 */

/* The process-wide governor every device of the library is charged to (created on first use); NULL with
 * the sentence recorded when it cannot be created. */
dmm_governor *dmm__torch_governor(void);
/* The device front of CUDA device `device` (created on first use, with the limit dmm_torch_set_limit gave
 * it); NULL with the sentence recorded when it cannot be made. */
dmm_device *dmm__torch_device(int device);
/* Keeps `s`'s sentence (dmm_last_error) as the library's last failure; returns (int)s, 0 for DMM_OK. */
int dmm__torch_record(dmm_status s);

#endif /* DMM_TORCH_FRONT_H */
