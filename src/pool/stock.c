/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/stock.c — the stock thread: memory committed ahead of a growing pool's mallocs, off the
 * threads that wait for it (DESIGN §4.9; the option: stock_bytes in include/dmm/pool.h).
 *
 * Why. A growth costs its thread one create + map + set-access per handle (~50 µs on the H200, the
 * same for 2 MiB and 32 MiB), and a training's first step grows hundreds of times while its thread
 * is the one enqueueing the GPU's work. Growth on another thread does not hold up the enqueueing one
 * (bench_growth_load: "blocked" ≈ 0 for VMM handles). So after a malloc grew, this thread commits
 * the next stock_target bytes right after the growth's window, as FREE memory in one handle, and the
 * next mallocs of a pool that keeps growing find it mapped (a fit, or a window that needs fewer new
 * handles). One handle, because the driver serialises this thread's calls with the mallocs': cut
 * into 1/8s, the stock kept GPT-2's mallocs waiting 19 ms for it in a regrowth, in one handle 3 ms.
 *
 * What it owns: the thread, and one request slot. Two kinds of malloc post a request (a newer post
 * replaces an older one): one that grew, where its window ended (only a growth that moved and aliased
 * nothing, the pool still growing, not settling, and only for a request no larger than the stock: the
 * VA after a large one is where the next of its kind grows in place), and one that fitted into the
 * stock and left less than half the target free before the stock's end (the heap's stock_end, which
 * each stock growth sets): the thread refills the stock while it is still there, so that mallocs that
 * keep coming fit instead of growing on their own thread. Before a malloc on a heap grows, it waits until the thread
 * has done that heap's request, pending or in flight, so that it sees the stock instead of planning
 * around COMMITTING pieces (the wait is counted: stock_wait_ns); dmm_pool_stock_sync waits for every
 * request, pending or in flight; a trim, empty_cache or destroy drops the pending request and waits for
 * the one in flight, and a trim forgets every heap's stock_end, so that what it gives back is not grown
 * again behind it. Every wait is bounded (STOCK_WAIT_NS): a thread that waits longer goes on as if
 * there were no stock (concurrent growth is the pool's normal case), so no wait can deadlock, e.g. on a
 * budget callback the stock thread runs. The growth itself is growth.c's (dmm__pool_stock_grow): the
 * same plan → carve → drive → fix-up, under the heap's lock and outside it, with the same fault
 * handling; a failure is dropped (the next malloc grows, and reports, itself).
 *
 * What it costs: the stock is at most stock_bytes and at most the live peak / POOL_STOCK_SHARE, and
 * the retention limit rises by as much (so that a growth does not move the stock's chunks away): a
 * pool may hold up to that much more than without a stock, at its peak too. No stock growth takes the
 * pool above that limit: once a workload stops growing, its fits into the stock refill nothing more.
 *
 * Invariants: want, want_at, busy and w.stop change only under w.m, w.running only at start and stop
 * (worker.c); busy != NULL only on the thread, between taking a request and its end; the thread takes
 * no lock of the pool's while it holds w.m, and nobody waits on w.idle while holding a heap's lock.
 */
#include <errno.h>
#include <time.h>

#include "pool/types.h"

#define STOCK_WAIT_NS ((uint64_t)20 * 1000 * 1000) /* 20 ms: far beyond one stock growth (~1 ms) */

static void *stock_main(void *arg) {
    dmm_pool *p = arg;
    pstock *st = &p->stock;
    pthread_mutex_lock(&st->w.m);
    for (;;) {
        while (!st->w.stop && st->want == NULL) pthread_cond_wait(&st->w.wake, &st->w.m);
        if (st->w.stop) break;
        pool_heap *h = st->want;
        uintptr_t at = st->want_at;
        st->want = NULL;
        st->busy = h;
        pthread_mutex_unlock(&st->w.m);
        uint64_t t0 = dmm_now_ns();
        if (dmm__pool_stock_grow(p, h, at) > 0) {
            dmm_atomic_add_relaxed(&p->stock_grows, 1);
            dmm_atomic_add_relaxed(&p->stock_ns, dmm_now_ns() - t0);
        }
        pthread_mutex_lock(&st->w.m);
        st->busy = NULL;
        pthread_cond_broadcast(&st->w.idle);
    }
    pthread_mutex_unlock(&st->w.m);
    return NULL;
}

bool dmm__pool_stock_start(dmm_pool *p) {
    return dmm__pool_worker_start(&p->stock.w, stock_main, p, "the stock thread", "stock_bytes = 0 (no stock)");
}

void dmm__pool_stock_stop(dmm_pool *p) { dmm__pool_worker_stop(&p->stock.w); }

void dmm__pool_stock_post(dmm_pool *p, pool_heap *h, uintptr_t at) {
    pstock *st = &p->stock;
    if (!st->w.running || at == 0) return;
    pthread_mutex_lock(&st->w.m);
    st->want = h;
    st->want_at = at;
    pthread_cond_signal(&st->w.wake);
    pthread_mutex_unlock(&st->w.m);
}

/* What a wait waits for: h's request, pending or in flight (STOCK_FOR_HEAP), any growth in flight
 * (STOCK_IN_FLIGHT: a trim, once it dropped the pending request), or every request (STOCK_ALL). */
typedef enum { STOCK_FOR_HEAP, STOCK_IN_FLIGHT, STOCK_ALL } stock_wait_for;

/* Under m: whether that wait still has something to wait for. */
static bool stock_owes(const pstock *st, const pool_heap *h, stock_wait_for what) {
    switch (what) {
    case STOCK_FOR_HEAP: return st->busy == h || st->want == h;
    case STOCK_IN_FLIGHT: return st->busy != NULL;
    default: return st->busy != NULL || st->want != NULL;
    }
}

/* Waits (at most STOCK_WAIT_NS) until the thread owes nothing of `what`; never on the thread itself.
 * Returns the nanoseconds it waited; *done (may be NULL) whether nothing is owed now. */
static uint64_t stock_wait_for_it(dmm_pool *p, const pool_heap *h, stock_wait_for what, bool *done) {
    pstock *st = &p->stock;
    if (done != NULL) *done = true;
    if (!st->w.running || pthread_equal(pthread_self(), st->w.thread)) return 0;
    uint64_t t0 = 0;
    pthread_mutex_lock(&st->w.m);
    if (what == STOCK_IN_FLIGHT) st->want = NULL;
    if (stock_owes(st, h, what)) {
        t0 = dmm_now_ns(); /* CLOCK_MONOTONIC, as `idle` measures */
        uint64_t deadline = t0 + STOCK_WAIT_NS;
        struct timespec until = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
        while (stock_owes(st, h, what))
            if (pthread_cond_timedwait(&st->w.idle, &st->w.m, &until) == ETIMEDOUT) break;
    }
    if (done != NULL) *done = !stock_owes(st, h, what);
    pthread_mutex_unlock(&st->w.m);
    return t0 != 0 ? dmm_now_ns() - t0 : 0;
}

uint64_t dmm__pool_stock_wait(dmm_pool *p, const pool_heap *h) {
    return stock_wait_for_it(p, h, h != NULL ? STOCK_FOR_HEAP : STOCK_IN_FLIGHT, NULL);
}

bool dmm__pool_stock_drain(dmm_pool *p) {
    bool done;
    stock_wait_for_it(p, NULL, STOCK_ALL, &done);
    return done;
}
