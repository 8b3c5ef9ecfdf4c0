/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/call.c — the out-of-line half of the driver funnel (driver/call.h): the device-loss
 * latch and the refusals. The invariant of the latch is stated in call.h; here is where it is kept:
 * one compare-and-swap moves a usable driver to "being latched", the winner writes the sentence and
 * then publishes "lost" (release order), so a reader that sees "lost" (acquire) reads a whole
 * sentence; a reader that meets "being latched" waits the few instructions of one snprintf. */
#include <sched.h>
#include <stdio.h>

#include "core/core.h"
#include "driver/call.h"

static const char *tier_word(dmm_tier t) {
    return t == DMM_TIER_DEVICE ? "device" : t == DMM_TIER_HOST ? "host" : "disk";
}

void dmm__drv_latch(dmm_driver *d, const char *what) {
    uint32_t expected = 0;
    if (!__atomic_compare_exchange_n(&d->latch.state, &expected, 1u, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* latched before: the first sentence stays */
    snprintf(d->latch.why, sizeof d->latch.why, "%s: %s", what, dmm_last_error());
    __atomic_store_n(&d->latch.state, 2u, __ATOMIC_RELEASE);
}

const char *dmm__drv_lost_why(const dmm_driver *d) {
    uint32_t st;
    while ((st = __atomic_load_n(&d->latch.state, __ATOMIC_ACQUIRE)) == 1u) sched_yield(); /* a snprintf away */
    return st >= 2u ? d->latch.why : "";
}

bool dmm__drv_confirm_terminated(dmm_driver *d) {
    uint32_t expected = 2u;
    (void)dmm__drv_lost_why(d); /* waits out a latch being written */
    (void)__atomic_compare_exchange_n(&d->latch.state, &expected, 3u, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return dmm__drv_terminated(d);
}

dmm_status dmm__drv_refuse(dmm_driver *d, dmm_driver_op op) {
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "driver '%s' (%s:%d): %s refused without a driver call: the device was lost (first seen at "
                         "%s)",
                         d->ops->name ? d->ops->name : "?", tier_word(d->device.tier), (int)d->device.index,
                         dmm_driver_op_name(op), dmm__drv_lost_why(d));
}

dmm_status dmm__drv_absent(dmm_driver *d, dmm_driver_op op) {
    return dmm_error_set(DMM_ERR_UNSUPPORTED, "driver '%s' (%s:%d) has no %s", d->ops->name ? d->ops->name : "?",
                         tier_word(d->device.tier), (int)d->device.index, dmm_driver_op_name(op));
}

bool dmm_driver_lost(const dmm_driver *d, const char **why) {
    bool lost = d != NULL && dmm__drv_lost(d);
    if (why != NULL) *why = lost ? dmm__drv_lost_why(d) : "";
    return lost;
}

