/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/imports.h — memory shared with another process: imports into this device's arena, exports
 * of its pool blocks. Internal. */
#ifndef DMM_DEVICE_IMPORTS_H
#define DMM_DEVICE_IMPORTS_H

#include "dmm/share.h"
#include "types.h"

/* Unmaps every import (for destroy; dev.lock held); returns how many FAILED and stay (the destroy stops). */
size_t dmm__device_imports_fini(dmm_device *c);
/* After a confirmed loss: frees every entry without a driver call. */
void dmm__device_imports_drop_lost(dmm_device *c);

#endif /* DMM_DEVICE_IMPORTS_H */
