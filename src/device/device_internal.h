/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/device_internal.h — the device front's inside (include/dmm/device.h is its outside), for
 * its own files and the tests (adapters use dmm/device.h, never this).
 *
 * One dmm_device per device (types.h: the data; its floors, each over the ones below: context.c,
 * jobs.c, segment.c, tags.c, offload.c, graphs.c, and device.c on top; beside them blocks.c,
 * history.c, record.c, stream_uses.c, imports.c). This header gathers the floors' headers.
 *
 * Lock order: dev.lock → (pool → arena → driver). The hot path (pool malloc/free) takes no dev lock.
 */
#ifndef DMM_DEVICE_INTERNAL_H
#define DMM_DEVICE_INTERNAL_H

#include "blocks.h"
#include "context.h"
#include "graphs.h"
#include "history.h"
#include "imports.h"
#include "jobs.h"
#include "record.h"
#include "segment.h"
#include "stream_uses.h"
#include "tags.h"
#include "types.h"


#endif /* DMM_DEVICE_INTERNAL_H */
