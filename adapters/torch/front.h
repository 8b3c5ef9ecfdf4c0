/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/front.h — what torch_cuda.c shares with the other files of libdmm_torch.so that put more
 * frameworks on its governor (ort_front.c). Internal. */
#ifndef DMM_TORCH_FRONT_H
#define DMM_TORCH_FRONT_H

#include "dmm/governor.h"
#include "dmm/status.h"

/* The process-wide governor every device of the library is charged to (created on first use); NULL with
 * the sentence recorded when it cannot be created. */
dmm_governor *dmm__torch_governor(void);
/* Keeps `s`'s sentence (dmm_last_error) as the library's last failure; returns (int)s, 0 for DMM_OK. */
int dmm__torch_record(dmm_status s);

#endif /* DMM_TORCH_FRONT_H */
