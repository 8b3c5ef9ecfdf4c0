/* src/driver/driver.c — what every driver shares: destruction through the table, the names of the
 * ops (used by the fault driver's sentences and by tools), and the device-loss latch behind the call
 * funnel (driver/call.h: its invariant is stated there). Nothing here knows an implementation. */
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

void dmm_driver_destroy(dmm_driver *d) {
    if (d == NULL || d->ops == NULL || d->ops->destroy == NULL) return;
    d->ops->destroy(d);
}

const char *dmm_driver_op_name(dmm_driver_op op) {
    switch (op) {
    case DMM_OP_ANY: return "any op";
    case DMM_OP_GRANULARITY: return "granularity";
    case DMM_OP_RESERVE: return "reserve";
    case DMM_OP_UNRESERVE: return "unreserve";
    case DMM_OP_CREATE: return "create";
    case DMM_OP_RELEASE: return "release";
    case DMM_OP_MAP: return "map";
    case DMM_OP_UNMAP: return "unmap";
    case DMM_OP_SET_ACCESS: return "set_access";
    case DMM_OP_ALLOC: return "alloc";
    case DMM_OP_FREE: return "free";
    case DMM_OP_STREAM_CREATE: return "stream_create";
    case DMM_OP_STREAM_DESTROY: return "stream_destroy";
    case DMM_OP_EVENT_CREATE: return "event_create";
    case DMM_OP_EVENT_DESTROY: return "event_destroy";
    case DMM_OP_EVENT_RECORD: return "event_record";
    case DMM_OP_EVENT_QUERY: return "event_query";
    case DMM_OP_EVENT_SYNCHRONIZE: return "event_synchronize";
    case DMM_OP_COPY: return "copy";
    case DMM_OP_STREAM_SYNCHRONIZE: return "stream_synchronize";
    case DMM_OP_MEM_INFO: return "mem_info";
    case DMM_OP_COUNT: break;
    }
    return "unknown op";
}
