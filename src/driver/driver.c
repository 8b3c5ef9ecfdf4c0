/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/driver.c — what every driver shares: destruction through the table and the names of
 * the ops (used by the fault driver's sentences, the funnel's refusals and by tools). Nothing here
 * knows an implementation. */
#include "core/core.h"
#include "dmm/driver.h"

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
    case DMM_OP_EXPORT: return "export";
    case DMM_OP_IMPORT: return "import";
    case DMM_OP_CAPTURE_STATUS: return "stream_capture_status";
    case DMM_OP_HOST_ALLOC: return "host_alloc";
    case DMM_OP_HOST_FREE: return "host_free";
    case DMM_OP_STREAM_WAIT_EVENT: return "stream_wait_event";
    case DMM_OP_DEVICE_SYNCHRONIZE: return "device_synchronize";
    case DMM_OP_COUNT: break;
    }
    return "unknown op";
}
