/* SPDX-License-Identifier: Apache-2.0 */
/* The deferred-release queue (src/bind/deferred.c) over fault(host): events held incomplete with
 * dmm_fault_hold_events, a recording mechanism that logs the order of the releases it is asked for
 * and can answer FAILED on demand. Proves: gated by events (and only by event_query: no synchronize),
 * drained in order, a poll runs only what was queued when it started (what on_done re-enqueues runs
 * at the next poll), a full queue hands the exact request back, nothing dropped (a FAILED outcome or
 * a failing event query keeps the request at the head), re-entrant callbacks, and concurrent
 * enqueuers against a poller. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/deferred.h"
#include "testkit.h"

/* ---- a recording mechanism ---- */

#define LOG_MAX 8192

typedef struct rec {
    pthread_mutex_t m;
    uint64_t next_id;
    uint64_t log[LOG_MAX]; /* ids released / decommitted, in call order */
    uint32_t kinds[LOG_MAX];
    size_t n;
    int fail_next; /* answer FAILED this many times */
} rec;

static dmm_status rec_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    rec *r = impl;
    pthread_mutex_lock(&r->m);
    out->id = ++r->next_id;
    pthread_mutex_unlock(&r->m);
    out->ptr = (void *)(uintptr_t)(0x10000 * out->id);
    out->bytes = bytes;
    out->align = align != 0 ? align : 256;
    return DMM_OK;
}

static dmm_release_outcome rec_log(rec *r, const dmm_allocation *a, uint32_t kind, uint64_t bytes) {
    dmm_release_outcome o = {DMM_RELEASE_COMPLETE, bytes, bytes, 0, DMM_OK, 0};
    pthread_mutex_lock(&r->m);
    if (r->fail_next > 0) {
        r->fail_next--;
        o.state = DMM_RELEASE_FAILED;
        o.unmapped_bytes = 0;
        o.failure = dmm_error_set(DMM_ERR_DRIVER, "rec: planned failure of allocation %llu", (unsigned long long)a->id);
    } else if (r->n < LOG_MAX) {
        r->kinds[r->n] = kind;
        r->log[r->n++] = a->id;
    }
    pthread_mutex_unlock(&r->m);
    return o;
}

static dmm_release_outcome rec_release(void *impl, const dmm_allocation *a) {
    return rec_log(impl, a, DMM_DEFERRED_RELEASE, a->bytes);
}
static dmm_device_id rec_device(void *impl) {
    (void)impl;
    dmm_device_id d = {DMM_TIER_HOST, 0};
    return d;
}
static dmm_status rec_destroy(void *impl) {
    rec *r = impl;
    pthread_mutex_destroy(&r->m);
    return DMM_OK;
}
static dmm_status rec_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges, size_t n,
                                         dmm_allocation *out) {
    (void)ranges;
    (void)n;
    return rec_allocate(impl, bytes, align, out);
}
static dmm_status rec_commit(void *impl, const dmm_allocation *a, dmm_range range, uint64_t *newly) {
    (void)impl;
    (void)a;
    *newly = range.bytes;
    return DMM_OK;
}
static dmm_release_outcome rec_decommit(void *impl, const dmm_allocation *a, dmm_range range) {
    return rec_log(impl, a, DMM_DEFERRED_DECOMMIT, range.bytes);
}
static dmm_status rec_committed(void *impl, const dmm_allocation *a, uint64_t *bytes) {
    (void)impl;
    *bytes = a->bytes;
    return DMM_OK;
}
static dmm_status rec_mapped_for(void *impl, const dmm_allocation *a, const dmm_range *ranges, size_t n,
                                 uint64_t *bytes) {
    (void)impl;
    (void)a;
    (void)ranges;
    (void)n;
    *bytes = 0;
    return DMM_OK;
}

static const dmm_virtual_backing_ops rec_vb = {
    .size = sizeof(dmm_virtual_backing_ops),
    .allocate_committed = rec_allocate_committed,
    .commit = rec_commit,
    .decommit = rec_decommit,
    .committed_bytes = rec_committed,
    .mapped_bytes_for_ranges = rec_mapped_for,
};

static const dmm_mechanism_ops rec_ops = {
    .size = sizeof(dmm_mechanism_ops),
    .name = "recorder",
    .allocate = rec_allocate,
    .release = rec_release,
    .device = rec_device,
    .destroy = rec_destroy,
    .virtual_backing = &rec_vb,
};

/* ---- fixture ---- */

typedef struct fx {
    dmm_driver *host;
    dmm_driver *fault;
    rec rec;
    dmm_mechanism *mech;
    dmm_deferred *q;
    /* what on_done saw */
    uint64_t done_ids[LOG_MAX];
    uint32_t done_states[LOG_MAX];
    size_t n_done;
    /* re-entrance probes */
    bool poll_from_callback;
    bool enqueue_from_callback;
    bool requeue_always; /* on_done re-enqueues a ready copy of every request it sees */
    dmm_status reentrant_poll;
    dmm_status reentrant_take;
} fx;

static void on_done(void *user, const dmm_deferred_request *req, const dmm_release_outcome *o) {
    fx *f = user;
    if (f->n_done < LOG_MAX) {
        f->done_ids[f->n_done] = req->allocation.id;
        f->done_states[f->n_done++] = o->state;
    }
    if (f->poll_from_callback) {
        size_t ran = 99;
        f->reentrant_poll = dmm_deferred_poll(f->q, &ran);
        assert_int_equal(ran, 0);
        dmm_deferred_request tmp;
        f->reentrant_take = dmm_deferred_take(f->q, &tmp);
    }
    /* Capped, so that a poll that keeps running what its callback enqueues ends (and fails the
     * test) instead of spinning forever. */
    if (f->requeue_always && f->n_done < 1000) {
        dmm_deferred_request again = *req;
        again.n_events = 0;
        DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &again));
    }
    if (f->enqueue_from_callback) {
        f->enqueue_from_callback = false;
        dmm_deferred_request again = *req;
        again.n_events = 0;
        DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &again));
    }
}

static void make_queue(fx *f, size_t capacity) {
    dmm_deferred_config cfg = {sizeof cfg, f->fault, capacity, on_done, f};
    DMM_OK_OR_FAIL(dmm_deferred_create(&cfg, &f->q));
}

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    pthread_mutex_init(&f->rec.m, NULL);
    if (dmm_host_driver_create(NULL, &f->host) != DMM_OK) return -1;
    if (dmm_fault_driver_create(f->host, &f->fault) != DMM_OK) return -1;
    if (dmm_mechanism_create(&rec_ops, &f->rec, &f->mech) != DMM_OK) return -1;
    make_queue(f, 0);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    size_t n = 1;
    if (f->q != NULL) {
        DMM_OK_OR_FAIL(dmm_deferred_pending(f->q, &n));
        assert_int_equal(n, 0); /* every test ends with nothing queued */
        DMM_OK_OR_FAIL(dmm_deferred_destroy(f->q));
    }
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->mech));
    dmm_driver_destroy(f->fault);
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(f->host->ops->census(f->host, &c));
    dmm_driver_destroy(f->host);
    free(f);
    return 0;
}

static dmm_event new_event(fx *f) {
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(f->fault->ops->event_create(f->fault, &e));
    DMM_OK_OR_FAIL(f->fault->ops->event_record(f->fault, e, NULL));
    return e;
}

static dmm_deferred_request request(fx *f, uint32_t kind, dmm_event *events, uint32_t n) {
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = kind;
    r.mechanism = f->mech;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->mech, 1 << 20, 0, &r.allocation));
    r.range.offset = 0;
    r.range.bytes = 1 << 20;
    r.n_events = n;
    for (uint32_t i = 0; i < n; i++) r.events[i] = events[i];
    return r;
}

static size_t pending(fx *f) {
    size_t n = 0;
    DMM_OK_OR_FAIL(dmm_deferred_pending(f->q, &n));
    return n;
}

/* ---- tests ---- */

static void runs_only_after_its_events_completed(void **state) {
    fx *f = *state;
    dmm_event ev[2] = {new_event(f), new_event(f)};
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, true));
    dmm_deferred_request r = request(f, DMM_DEFERRED_DECOMMIT, ev, 2);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &r));
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_EVENT_QUERY), 0); /* enqueue asks nothing */
    size_t ran = 99;
    for (int i = 0; i < 5; i++) {
        DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
        assert_int_equal(ran, 0);
        assert_int_equal(dmm_last_status(), DMM_OK); /* a pending event is not this poll's failure */
    }
    assert_int_equal(f->rec.n, 0);
    assert_int_equal(pending(f), 1);
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_EVENT_QUERY), 5);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, false));
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 1);
    assert_int_equal(f->rec.n, 1);
    assert_int_equal(f->rec.log[0], r.allocation.id);
    assert_int_equal(f->rec.kinds[0], DMM_DEFERRED_DECOMMIT);
    assert_int_equal(f->n_done, 1);
    assert_int_equal(f->done_states[0], DMM_RELEASE_COMPLETE);
    /* Readiness came from event_query alone: never a stream or event synchronize. */
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_EVENT_SYNCHRONIZE), 0);
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_STREAM_SYNCHRONIZE), 0);
    assert_int_equal(pending(f), 0);
    for (int i = 0; i < 2; i++) DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, ev[i]));
}

static void drains_in_order_behind_a_pending_head(void **state) {
    fx *f = *state;
    dmm_event e = new_event(f);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, true));
    dmm_deferred_request a = request(f, DMM_DEFERRED_RELEASE, &e, 1);
    dmm_deferred_request b = request(f, DMM_DEFERRED_DECOMMIT, NULL, 0); /* ready at once, but behind a */
    dmm_deferred_request c = request(f, DMM_DEFERRED_RELEASE, &e, 1);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &b));
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &c));
    size_t ran = 99;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 0);
    assert_int_equal(f->rec.n, 0); /* b did not overtake a */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, false));
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 3);
    assert_int_equal(f->rec.n, 3);
    assert_int_equal(f->rec.log[0], a.allocation.id);
    assert_int_equal(f->rec.log[1], b.allocation.id);
    assert_int_equal(f->rec.log[2], c.allocation.id);
    assert_int_equal(f->rec.kinds[0], DMM_DEFERRED_RELEASE);
    assert_int_equal(f->rec.kinds[1], DMM_DEFERRED_DECOMMIT);
    assert_int_equal(f->done_ids[0], a.allocation.id);
    assert_int_equal(f->done_ids[2], c.allocation.id);
    DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, e));
}

static void a_full_queue_hands_the_exact_request_back(void **state) {
    fx *f = *state;
    DMM_OK_OR_FAIL(dmm_deferred_destroy(f->q));
    make_queue(f, 2);
    dmm_event e = new_event(f);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, true));
    dmm_deferred_request a = request(f, DMM_DEFERRED_RELEASE, &e, 1);
    dmm_deferred_request b = request(f, DMM_DEFERRED_RELEASE, &e, 1);
    dmm_deferred_request c = request(f, DMM_DEFERRED_DECOMMIT, &e, 1);
    c.user = &c;
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &b));
    dmm_deferred_request before = c;
    assert_int_equal(dmm_deferred_enqueue(f->q, &c), DMM_ERR_BUSY);
    dmm_test_error_mentions("full", "still yours", NULL);
    assert_memory_equal(&before, &c, sizeof c);
    assert_int_equal(pending(f), 2);
    /* The refused request is whole: once room is made, it goes in and runs like any other. */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, false));
    size_t ran = 0;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 2);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &c));
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 1);
    assert_int_equal(f->rec.log[2], c.allocation.id);
    DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, e));
}

static void a_failed_outcome_keeps_the_request(void **state) {
    fx *f = *state;
    dmm_deferred_request a = request(f, DMM_DEFERRED_RELEASE, NULL, 0);
    dmm_deferred_request b = request(f, DMM_DEFERRED_RELEASE, NULL, 0);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &b));
    f->rec.fail_next = 2;
    size_t ran = 99;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(dmm_deferred_poll(f->q, &ran), DMM_ERR_DRIVER);
        dmm_test_error_mentions("planned failure", NULL);
        assert_int_equal(ran, 0);
        assert_int_equal(pending(f), 2); /* nothing dropped, b still behind a */
        assert_int_equal(f->n_done, 0);
    }
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 2);
    assert_int_equal(f->rec.log[0], a.allocation.id);
    assert_int_equal(f->rec.log[1], b.allocation.id);
}

static void a_failing_event_query_keeps_everything(void **state) {
    fx *f = *state;
    dmm_event e = new_event(f);
    dmm_deferred_request a = request(f, DMM_DEFERRED_DECOMMIT, &e, 1);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    DMM_OK_OR_FAIL(dmm_fault_plan(f->fault, DMM_OP_EVENT_QUERY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    size_t ran = 99;
    assert_int_equal(dmm_deferred_poll(f->q, &ran), DMM_ERR_DEVICE_LOST);
    assert_int_equal(ran, 0);
    assert_int_equal(f->rec.n, 0);
    assert_int_equal(pending(f), 1);
    /* The queue cannot be destroyed while it holds a request; take hands it back unrun. */
    assert_int_equal(dmm_deferred_destroy(f->q), DMM_ERR_BUSY);
    dmm_deferred_request back;
    DMM_OK_OR_FAIL(dmm_deferred_take(f->q, &back));
    assert_memory_equal(&back, &a, sizeof a);
    assert_int_equal(dmm_deferred_take(f->q, &back), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(f->rec.n, 0);
    DMM_OK_OR_FAIL(dmm_fault_clear(f->fault));
    /* The caller still owns the allocation and releases it itself. */
    dmm_release_outcome o = dmm_mechanism_release(f->mech, &back.allocation);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, e));
}

static void completed_events_are_not_asked_again(void **state) {
    fx *f = *state;
    dmm_event ev[3] = {new_event(f), new_event(f), new_event(f)};
    dmm_deferred_request a = request(f, DMM_DEFERRED_RELEASE, ev, 3);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    /* Event 2 of 3 fails once with BUSY (as if still running): the first two queries are spent. */
    DMM_OK_OR_FAIL(dmm_fault_plan(f->fault, DMM_OP_EVENT_QUERY, 2, 1, DMM_ERR_BUSY));
    size_t ran = 99;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 0);
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_EVENT_QUERY), 2);
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 1);
    /* event 1 was not asked again: 2 + (event 2, event 3) */
    assert_int_equal(dmm_fault_calls(f->fault, DMM_OP_EVENT_QUERY), 4);
    for (int i = 0; i < 3; i++) DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, ev[i]));
}

static void callbacks_may_enqueue_and_cannot_deadlock(void **state) {
    fx *f = *state;
    dmm_deferred_request a = request(f, DMM_DEFERRED_RELEASE, NULL, 0);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &a));
    f->poll_from_callback = true;
    f->enqueue_from_callback = true; /* re-enqueues a copy of a once (the recorder accepts any id) */
    size_t ran = 0;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    /* The re-entrant poll ran nothing and returned; the enqueued copy waits for the next poll. */
    assert_int_equal(f->reentrant_poll, DMM_OK);
    assert_int_equal(f->reentrant_take, DMM_ERR_BUSY);
    assert_int_equal(ran, 1);
    assert_int_equal(pending(f), 1);
    f->poll_from_callback = false;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 1);
    assert_int_equal(pending(f), 0);
    assert_int_equal(f->n_done, 2);
    assert_int_equal(f->done_ids[0], a.allocation.id);
    assert_int_equal(f->done_ids[1], a.allocation.id);
}

/* An on_done that re-enqueues a ready request every time: each poll runs exactly the requests queued
 * when it started (in order), returns, and leaves the re-enqueued ones for the next poll. Without the
 * bound the first poll would run the callback's requests until the callback's cap. */
static void a_poll_runs_only_what_was_queued_when_it_started(void **state) {
    fx *f = *state;
    dmm_deferred_request r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = request(f, DMM_DEFERRED_RELEASE, NULL, 0);
        DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &r[i]));
    }
    f->requeue_always = true;
    for (int round = 0; round < 3; round++) {
        size_t ran = 99;
        DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
        assert_int_equal(ran, 3);
        assert_int_equal(pending(f), 3); /* the copies on_done enqueued, not yet run */
        assert_int_equal(f->n_done, 3 * (size_t)(round + 1));
        for (int i = 0; i < 3; i++) assert_int_equal(f->done_ids[3 * round + i], r[i].allocation.id); /* in order */
    }
    /* a pending head still stops the next poll (head-of-line), and the bound counts what ran */
    dmm_event ev = new_event(f);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, true));
    dmm_deferred_request gated = request(f, DMM_DEFERRED_RELEASE, &ev, 1);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(f->q, &gated)); /* behind the 3 copies */
    size_t ran = 99;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 3);        /* the 3 copies ran; the gated one stopped the poll */
    assert_int_equal(pending(f), 4); /* the gated one, then the 3 new copies behind it */
    f->requeue_always = false;
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->fault, false));
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(ran, 4);
    assert_int_equal(pending(f), 0);
    assert_int_equal(f->done_ids[f->n_done - 4], gated.allocation.id);
    DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, ev));
}

static void malformed_requests_are_refused(void **state) {
    fx *f = *state;
    dmm_event e = new_event(f);
    dmm_deferred_request r = request(f, DMM_DEFERRED_RELEASE, &e, 1);
    dmm_deferred_request bad = r;
    bad.kind = 7;
    assert_int_equal(dmm_deferred_enqueue(f->q, &bad), DMM_ERR_INVALID_ARGUMENT);
    bad = r;
    bad.mechanism = NULL;
    assert_int_equal(dmm_deferred_enqueue(f->q, &bad), DMM_ERR_INVALID_ARGUMENT);
    bad = r;
    bad.n_events = DMM_DEFERRED_MAX_EVENTS + 1;
    assert_int_equal(dmm_deferred_enqueue(f->q, &bad), DMM_ERR_INVALID_ARGUMENT);
    bad = r;
    bad.n_events = 2; /* events[1] is NULL */
    assert_int_equal(dmm_deferred_enqueue(f->q, &bad), DMM_ERR_INVALID_ARGUMENT);
    bad = r;
    bad.size = 8;
    assert_int_equal(dmm_deferred_enqueue(f->q, &bad), DMM_ERR_SHORT_STRUCT);
    assert_int_equal(dmm_deferred_enqueue(f->q, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_deferred_enqueue(NULL, &r), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(pending(f), 0);
    dmm_deferred *q = NULL;
    assert_int_equal(dmm_deferred_create(NULL, &q), DMM_ERR_INVALID_ARGUMENT);
    dmm_deferred_config cfg = {4, f->fault, 0, NULL, NULL};
    assert_int_equal(dmm_deferred_create(&cfg, &q), DMM_ERR_SHORT_STRUCT);
    assert_null(q);
    DMM_OK_OR_FAIL(f->fault->ops->event_destroy(f->fault, e));
}

/* Several enqueuers against one poller: every request runs exactly once, each thread's in its order. */
#define THREADS 4
#define PER_THREAD 2000

typedef struct producer {
    fx *f;
    int index;
    uint64_t first_id;
    dmm_status failure;
} producer;

static void *produce(void *arg) {
    producer *p = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        dmm_deferred_request r;
        memset(&r, 0, sizeof r);
        r.size = sizeof r;
        r.kind = DMM_DEFERRED_RELEASE;
        r.mechanism = p->f->mech;
        r.allocation.id = p->first_id + (uint64_t)i;
        r.allocation.mechanism = p->f->mech;
        r.allocation.device = dmm_mechanism_device(p->f->mech);
        r.allocation.bytes = 4096;
        dmm_status s;
        while ((s = dmm_deferred_enqueue(p->f->q, &r)) == DMM_ERR_BUSY)
            if ((s = dmm_deferred_poll(p->f->q, NULL)) != DMM_OK) break;
        if (s != DMM_OK) {
            p->failure = s; /* a stuck head would spin forever: stop and report */
            break;
        }
    }
    return NULL;
}

static void concurrent_enqueuers_and_pollers(void **state) {
    fx *f = *state;
    DMM_OK_OR_FAIL(dmm_deferred_destroy(f->q));
    make_queue(f, 64); /* small: the producers meet a full queue and poll themselves */
    pthread_t t[THREADS];
    producer p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i].f = f;
        p[i].index = i;
        p[i].first_id = 1000000ull * (uint64_t)(i + 1);
        p[i].failure = DMM_OK;
        pthread_create(&t[i], NULL, produce, &p[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) assert_int_equal(p[i].failure, DMM_OK);
    size_t ran = 0;
    DMM_OK_OR_FAIL(dmm_deferred_poll(f->q, &ran));
    assert_int_equal(pending(f), 0);
    assert_int_equal(f->rec.n, THREADS * PER_THREAD);
    uint64_t next[THREADS];
    for (int i = 0; i < THREADS; i++) next[i] = p[i].first_id;
    for (size_t k = 0; k < f->rec.n; k++) {
        int who = (int)(f->rec.log[k] / 1000000ull) - 1;
        assert_true(who >= 0 && who < THREADS);
        assert_int_equal(f->rec.log[k], next[who]); /* per producer: in order, none lost, none twice */
        next[who]++;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(runs_only_after_its_events_completed, setup, teardown),
        cmocka_unit_test_setup_teardown(drains_in_order_behind_a_pending_head, setup, teardown),
        cmocka_unit_test_setup_teardown(a_full_queue_hands_the_exact_request_back, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failed_outcome_keeps_the_request, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failing_event_query_keeps_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(completed_events_are_not_asked_again, setup, teardown),
        cmocka_unit_test_setup_teardown(callbacks_may_enqueue_and_cannot_deadlock, setup, teardown),
        cmocka_unit_test_setup_teardown(a_poll_runs_only_what_was_queued_when_it_started, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_requests_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_enqueuers_and_pollers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
