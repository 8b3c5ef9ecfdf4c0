/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/fault.c — the `fault` driver: wraps another driver (not owned) and fails chosen calls
 * on purpose, for fault sweeps (DESIGN §8) and event-gating tests.
 *
 * Idea: every forwarded op first counts itself (per op, and in the DMM_OP_ANY counter unless it is
 * granularity or census), then asks the plans for that op and for DMM_OP_ANY whether this call
 * number falls in [start, start + repeat). A call that fails on purpose is NOT forwarded: the inner
 * driver really did nothing, so "a failed op changed nothing" holds by construction. census is
 * always forwarded and never counted: it reports what the inner driver really holds.
 *
 * Each instance has its own ops table: a slot is NULL exactly where the inner driver's is, so a
 * wrapped driver without VMM still reads as one without VMM. The one exception is
 * stream_capture_status, always present: dmm_fault_capture makes a stream capture a graph on any inner
 * driver, so that capture safety is tested on the host; other streams are asked of the inner driver.
 *
 * Invariants (under `lock`): calls[op] = calls of op since creation (failed ones included);
 * calls[ANY] = Σ calls[op] over op ∉ {granularity, capture_status, host_free} (queries, and host
 * memory given back, which a plan for ANY never fails: it is freed after a device loss too);
 * injected = calls failed on purpose; capture_stream ≠ NULL ⇔ capture_id ≠ 0.
 * A plan made when calls[op] = c with (nth, repeat) fails calls c+nth … c+nth+repeat-1.
 *
 * Locking: one mutex guards plans and counters; the inner driver is called outside it.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dmm/driver.h"

typedef struct fault_plan {
    bool active;
    uint64_t base;   /* calls[op] when the plan was made */
    uint64_t nth;    /* first failing call, 1-based, counted from base */
    uint32_t repeat; /* UINT32_MAX: sticky */
    dmm_status code;
} fault_plan;

typedef struct fault_driver {
    dmm_driver base; /* first */
    dmm_driver_ops ops;
    dmm_driver *inner;
    dmm_lock lock;
    fault_plan plans[DMM_OP_COUNT];
    uint64_t calls[DMM_OP_COUNT];
    uint64_t injected;
    bool hold_events;
    dmm_stream capture_stream; /* the stream dmm_fault_capture made capture (NULL: none) */
    uint64_t capture_id;       /* its capture id */
} fault_driver;

static fault_driver *F(dmm_driver *d) { return (fault_driver *)d; }

static void plan_text(const fault_plan *p, dmm_driver_op op, char *buf, size_t cap) {
    char rep[48];
    if (p->repeat == UINT32_MAX) snprintf(rep, sizeof rep, "every call from then on");
    else snprintf(rep, sizeof rep, "%u time%s", p->repeat, p->repeat == 1 ? "" : "s");
    snprintf(buf, cap, "fail call %llu of %s, %s", (unsigned long long)p->nth, dmm_driver_op_name(op), rep);
}

/* Does plan p fail the call that made calls = n? Sets *rel to the call's number counted from the plan. */
static bool plan_hits(const fault_plan *p, uint64_t n, uint64_t *rel) {
    if (!p->active || n <= p->base) return false;
    uint64_t r = n - p->base;
    if (r < p->nth) return false;
    if (p->repeat != UINT32_MAX && r - p->nth >= p->repeat) return false;
    *rel = r;
    return true;
}

/* Counts one call of op and decides whether it fails; on failure sets the error and returns the code. */
static dmm_status fault_enter(fault_driver *f, dmm_driver_op op) {
    dmm_lock_acquire(&f->lock);
    uint64_t n = ++f->calls[op];
    /* not memory ops of the device: a query, a capture query, host memory given back (after a loss too) */
    bool query = op == DMM_OP_GRANULARITY || op == DMM_OP_CAPTURE_STATUS || op == DMM_OP_HOST_FREE;
    uint64_t nany = query ? 0 : ++f->calls[DMM_OP_ANY];
    uint64_t rel = 0;
    fault_plan hit;
    dmm_driver_op hit_op = op;
    bool fail = plan_hits(&f->plans[op], n, &rel);
    if (fail) {
        hit = f->plans[op];
    } else if (!query && plan_hits(&f->plans[DMM_OP_ANY], nany, &rel)) {
        fail = true;
        hit = f->plans[DMM_OP_ANY];
        hit_op = DMM_OP_ANY;
    }
    if (fail) f->injected++;
    dmm_lock_release(&f->lock);
    if (!fail) return DMM_OK;
    char pt[96];
    plan_text(&hit, hit_op, pt, sizeof pt);
    if (hit_op == DMM_OP_ANY)
        return dmm_error_set(hit.code, "fault driver: injected %s on %s, call #%llu of any op (plan: %s)",
                             dmm_status_str(hit.code), dmm_driver_op_name(op), (unsigned long long)rel, pt);
    return dmm_error_set(hit.code, "fault driver: injected %s on %s call #%llu (plan: %s)", dmm_status_str(hit.code),
                         dmm_driver_op_name(op), (unsigned long long)rel, pt);
}

#define ENTER(op)                                                                                   \
    fault_driver *f = F(d);                                                                         \
    dmm_status s_ = fault_enter(f, op);                                                             \
    if (s_ != DMM_OK) return s_;                                                                    \
    dmm_driver *in = f->inner

static dmm_status f_granularity(dmm_driver *d, size_t *bytes) {
    ENTER(DMM_OP_GRANULARITY);
    return in->ops->granularity(in, bytes);
}
static dmm_status f_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va) {
    ENTER(DMM_OP_RESERVE);
    return in->ops->reserve(in, bytes, align, va);
}
static dmm_status f_unreserve(dmm_driver *d, uintptr_t va, size_t bytes) {
    ENTER(DMM_OP_UNRESERVE);
    return in->ops->unreserve(in, va, bytes);
}
static dmm_status f_create(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    ENTER(DMM_OP_CREATE);
    return in->ops->create(in, bytes, handle);
}
static dmm_status f_release(dmm_driver *d, dmm_phys handle) {
    ENTER(DMM_OP_RELEASE);
    return in->ops->release(in, handle);
}
static dmm_status f_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle) {
    ENTER(DMM_OP_MAP);
    return in->ops->map(in, va, bytes, handle);
}
static dmm_status f_unmap(dmm_driver *d, uintptr_t va, size_t bytes) {
    ENTER(DMM_OP_UNMAP);
    return in->ops->unmap(in, va, bytes);
}
static dmm_status f_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access) {
    ENTER(DMM_OP_SET_ACCESS);
    return in->ops->set_access(in, va, bytes, access);
}
static dmm_status f_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    ENTER(DMM_OP_ALLOC);
    return in->ops->alloc(in, bytes, ptr);
}
static dmm_status f_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    ENTER(DMM_OP_FREE);
    return in->ops->free(in, ptr, bytes);
}
static dmm_status f_stream_create(dmm_driver *d, dmm_stream *stream) {
    ENTER(DMM_OP_STREAM_CREATE);
    return in->ops->stream_create(in, stream);
}
static dmm_status f_stream_destroy(dmm_driver *d, dmm_stream stream) {
    ENTER(DMM_OP_STREAM_DESTROY);
    return in->ops->stream_destroy(in, stream);
}
static dmm_status f_event_create(dmm_driver *d, dmm_event *event) {
    ENTER(DMM_OP_EVENT_CREATE);
    return in->ops->event_create(in, event);
}
static dmm_status f_event_destroy(dmm_driver *d, dmm_event event) {
    ENTER(DMM_OP_EVENT_DESTROY);
    return in->ops->event_destroy(in, event);
}
static dmm_status f_event_record(dmm_driver *d, dmm_event event, dmm_stream stream) {
    ENTER(DMM_OP_EVENT_RECORD);
    return in->ops->event_record(in, event, stream);
}
static bool holding(fault_driver *f) {
    dmm_lock_acquire(&f->lock);
    bool h = f->hold_events;
    dmm_lock_release(&f->lock);
    return h;
}
static dmm_status f_event_query(dmm_driver *d, dmm_event event) {
    ENTER(DMM_OP_EVENT_QUERY);
    if (holding(f))
        return dmm_error_set(DMM_ERR_BUSY, "fault driver: event_query of %p: events are held (dmm_fault_hold_events), "
                                           "the work before it counts as still running",
                             event);
    return in->ops->event_query(in, event);
}
static dmm_status f_event_synchronize(dmm_driver *d, dmm_event event) {
    ENTER(DMM_OP_EVENT_SYNCHRONIZE);
    if (holding(f))
        return dmm_error_set(DMM_ERR_BUSY,
                             "fault driver: event_synchronize of %p: events are held (dmm_fault_hold_events); "
                             "release the hold before waiting",
                             event);
    return in->ops->event_synchronize(in, event);
}
static dmm_status f_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream) {
    ENTER(DMM_OP_COPY);
    return in->ops->copy(in, dst, src, bytes, stream);
}
static dmm_status f_stream_synchronize(dmm_driver *d, dmm_stream stream) {
    ENTER(DMM_OP_STREAM_SYNCHRONIZE);
    return in->ops->stream_synchronize(in, stream);
}
static dmm_status f_mem_info(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    ENTER(DMM_OP_MEM_INFO);
    return in->ops->mem_info(in, free_bytes, total_bytes);
}
static dmm_status f_create_exportable(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    ENTER(DMM_OP_CREATE);
    return in->ops->create_exportable(in, bytes, handle);
}
static dmm_status f_export_handle(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd) {
    ENTER(DMM_OP_EXPORT);
    return in->ops->export_handle(in, handle, access, fd);
}
static dmm_status f_import_handle(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle) {
    ENTER(DMM_OP_IMPORT);
    return in->ops->import_handle(in, fd, bytes, access, handle);
}
static bool has_late(const dmm_driver_ops *o, size_t offset) {
    return o->size >= offset + sizeof(void (*)(void));
}
static dmm_status f_stream_capture_status(dmm_driver *d, dmm_stream stream, bool *capturing, uint64_t *id) {
    ENTER(DMM_OP_CAPTURE_STATUS);
    dmm_lock_acquire(&f->lock);
    bool ours = f->capture_stream != NULL && stream == f->capture_stream;
    uint64_t cid = f->capture_id;
    dmm_lock_release(&f->lock);
    *capturing = ours;
    *id = ours ? cid : 0;
    if (ours || in->ops->stream_capture_status == NULL) return DMM_OK; /* create checked the table's size */
    return in->ops->stream_capture_status(in, stream, capturing, id);
}
static dmm_status f_host_alloc(dmm_driver *d, size_t bytes, void **out) {
    ENTER(DMM_OP_HOST_ALLOC);
    return in->ops->host_alloc(in, bytes, out);
}
static dmm_status f_host_free(dmm_driver *d, void *ptr) {
    ENTER(DMM_OP_HOST_FREE);
    return in->ops->host_free(in, ptr);
}
static dmm_status f_stream_wait_event(dmm_driver *d, dmm_stream waiter, dmm_event event) {
    ENTER(DMM_OP_STREAM_WAIT_EVENT);
    return in->ops->stream_wait_event(in, waiter, event);
}
static dmm_status f_device_synchronize(dmm_driver *d) {
    ENTER(DMM_OP_DEVICE_SYNCHRONIZE);
    return in->ops->device_synchronize(in);
}
static dmm_status f_census(dmm_driver *d, dmm_driver_census *out) {
    dmm_driver *in = F(d)->inner;
    return in->ops->census(in, out);
}
static void f_destroy(dmm_driver *d) {
    fault_driver *f = F(d);
    dmm_lock_destroy(&f->lock);
    free(f);
}

#undef ENTER

/* The instance's table: each slot present exactly where the inner driver's is. */
static void build_ops(dmm_driver_ops *o, const dmm_driver_ops *in) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->name = "fault";
#define SLOT(s) o->s = in->s ? f_##s : NULL
    SLOT(granularity);
    SLOT(reserve);
    SLOT(unreserve);
    SLOT(create);
    SLOT(release);
    SLOT(map);
    SLOT(unmap);
    SLOT(set_access);
    SLOT(alloc);
    SLOT(free);
    SLOT(stream_create);
    SLOT(stream_destroy);
    SLOT(event_create);
    SLOT(event_destroy);
    SLOT(event_record);
    SLOT(event_query);
    SLOT(event_synchronize);
    SLOT(copy);
    SLOT(stream_synchronize);
    SLOT(mem_info);
    SLOT(census);
#undef SLOT
    /* the sharing slots, present where the inner table is recent enough to have them */
#define LATE_SLOT(s) o->s = has_late(in, offsetof(dmm_driver_ops, s)) && in->s ? f_##s : NULL
    LATE_SLOT(create_exportable);
    LATE_SLOT(export_handle);
    LATE_SLOT(import_handle);
    LATE_SLOT(host_alloc);
    LATE_SLOT(host_free);
    LATE_SLOT(stream_wait_event);
    LATE_SLOT(device_synchronize);
#undef LATE_SLOT
    o->stream_capture_status = f_stream_capture_status; /* always: dmm_fault_capture */
    o->destroy = f_destroy;
}

dmm_status dmm_fault_driver_create(dmm_driver *inner, dmm_driver **out) {
    if (out == NULL || inner == NULL || inner->ops == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_fault_driver_create: inner driver (%p) and output pointer (%p) must be "
                             "non-NULL and the inner driver must have an ops table",
                             (void *)inner, (void *)out);
    if (inner->ops->size < sizeof(dmm_driver_ops))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_fault_driver_create: the inner driver's ops table is %u bytes, this build "
                             "needs %zu",
                             inner->ops->size, sizeof(dmm_driver_ops));
    fault_driver *f = calloc(1, sizeof *f);
    if (f == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_fault_driver_create: out of memory for the driver object");
    build_ops(&f->ops, inner->ops);
    f->base.ops = &f->ops;
    f->base.device = inner->device;
    f->inner = inner;
    dmm_lock_init(&f->lock);
    *out = &f->base;
    return DMM_OK;
}

static fault_driver *as_fault(dmm_driver *d) {
    return d != NULL && d->ops != NULL && d->ops->destroy == f_destroy ? F(d) : NULL;
}

dmm_status dmm_fault_plan(dmm_driver *fault, dmm_driver_op op, uint64_t nth, uint32_t repeat, dmm_status code) {
    fault_driver *f = as_fault(fault);
    if (f == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_fault_plan: %p is not a fault driver", (void *)fault);
    if ((unsigned)op >= DMM_OP_COUNT || nth == 0 || repeat == 0 || code == DMM_OK)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_fault_plan: op %d, nth %llu, repeat %u, code %s refused: op must be a "
                             "dmm_driver_op, nth and repeat at least 1 (repeat UINT32_MAX = sticky), and code a "
                             "failure",
                             (int)op, (unsigned long long)nth, repeat, dmm_status_str(code));
    dmm_lock_acquire(&f->lock);
    f->plans[op] = (fault_plan){true, f->calls[op], nth, repeat, code};
    dmm_lock_release(&f->lock);
    return DMM_OK;
}

dmm_status dmm_fault_clear(dmm_driver *fault) {
    fault_driver *f = as_fault(fault);
    if (f == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_fault_clear: %p is not a fault driver", (void *)fault);
    dmm_lock_acquire(&f->lock);
    memset(f->plans, 0, sizeof f->plans);
    dmm_lock_release(&f->lock);
    return DMM_OK;
}

uint64_t dmm_fault_calls(dmm_driver *fault, dmm_driver_op op) {
    fault_driver *f = as_fault(fault);
    if (f == NULL || (unsigned)op >= DMM_OP_COUNT) return 0;
    dmm_lock_acquire(&f->lock);
    uint64_t n = f->calls[op];
    dmm_lock_release(&f->lock);
    return n;
}

uint64_t dmm_fault_injected(dmm_driver *fault) {
    fault_driver *f = as_fault(fault);
    if (f == NULL) return 0;
    dmm_lock_acquire(&f->lock);
    uint64_t n = f->injected;
    dmm_lock_release(&f->lock);
    return n;
}

dmm_status dmm_fault_hold_events(dmm_driver *fault, bool hold) {
    fault_driver *f = as_fault(fault);
    if (f == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_fault_hold_events: %p is not a fault driver",
                             (void *)fault);
    dmm_lock_acquire(&f->lock);
    f->hold_events = hold;
    dmm_lock_release(&f->lock);
    return DMM_OK;
}

dmm_status dmm_fault_capture(dmm_driver *fault, dmm_stream stream, uint64_t capture_id) {
    fault_driver *f = as_fault(fault);
    if (f == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_fault_capture: %p is not a fault driver", (void *)fault);
    if ((stream == NULL) != (capture_id == 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_fault_capture: stream %p with capture id %llu refused: a capture needs a stream "
                             "other than the default one and an id above 0; pass NULL and 0 to end it",
                             stream, (unsigned long long)capture_id);
    dmm_lock_acquire(&f->lock);
    bool busy = stream != NULL && f->capture_stream != NULL;
    dmm_stream on = f->capture_stream;
    if (!busy) {
        f->capture_stream = stream;
        f->capture_id = capture_id;
    }
    dmm_lock_release(&f->lock);
    if (busy)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_fault_capture: stream %p is capturing already (one capture at a time); end it "
                             "with (NULL, 0) first; nothing changed",
                             on);
    return DMM_OK;
}
