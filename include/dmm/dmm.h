/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/dmm.h — the umbrella header: include this one. */
#ifndef DMM_DMM_H
#define DMM_DMM_H

#include "dmm/status.h"
#include "dmm/stats.h"
#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/arena.h"
#include "dmm/prefix.h"
#include "dmm/share.h"
#include "dmm/ipc.h"
#include "dmm/pool.h"
#include "dmm/governor.h"
#include "dmm/provider.h"
#include "dmm/deferred.h"
#include "dmm/plugin.h"
#include "dmm/device.h"
#include "dmm/kv.h"

#endif /* DMM_DMM_H */
