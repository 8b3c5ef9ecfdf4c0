/* src/device/poolview.c — the mechanism the pool sees: every call goes to the arena, and the
 * committed granules of the pool's VA are kept on the side (the pool's segments in a snapshot).
 *
 * What it owns: the view's ops table, its state (device_poolview: the pool's VA allocation and a span
 * set of its committed ranges), and the translation of the pool's allocation handles (stamped with the
 * view by dmm_mechanism_allocate) back to the arena's before each forwarded call.
 *
 * Why a view instead of asking the pool: the pool keeps its chunks private (src/pool), and a mechanism
 * is the interface it already calls for every commit and decommit. The view makes no driver call and
 * changes no outcome: it forwards, then records what the arena's contract says happened —
 *   commit / allocate_committed / alias (dst) succeeded  ⇒ every granule the range touches is committed;
 *   decommit COMPLETE with unmapped_bytes = the committed bytes of the granules wholly inside the range
 *     ⇒ those granules are not (the pool decommits whole chunks, so this is the usual case);
 *   any other decommit (a chunk reaching outside the range, QUARANTINED) ⇒ the granules of the range are
 *     asked of the arena one by one (mapped_bytes_for_ranges is exact per granule for the arena).
 * Host memory the span set cannot get makes the map inexact (said in every snapshot), never a failure.
 *
 * Invariants (mu): committed ⊆ [0, bytes), whole granules; have ⇒ base/bytes are the pool's VA
 * allocation; exact (¬inexact) ⇒ committed = the granules the arena has mapped in it, between calls.
 */
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "history.h"
#include "poolview.h"

static device_poolview *PV(void *impl) { return impl; }

static dmm_allocation to_arena(const device_poolview *v, const dmm_allocation *a) {
    dmm_allocation x = *a;
    x.mechanism = v->arena;
    return x;
}

static bool mine(const device_poolview *v, const dmm_allocation *a) {
    return v->have && (uintptr_t)a->ptr == v->base && a->bytes == v->bytes;
}

static uint64_t down(const device_poolview *v, uint64_t x) { return x / v->granule * v->granule; }
static uint64_t up(const device_poolview *v, uint64_t x) { return (x + v->granule - 1) / v->granule * v->granule; }

/* The history's events for the change of [lo, hi) to `on` (mu held): a map for each piece that was not
 * committed, an unmap for each that was. */
static void history_of_change(device_poolview *v, uint64_t lo, uint64_t hi, bool on) {
    if (v->c == NULL || !dmm__device_history_on(v->c)) return;
    uint64_t at = lo;
    for (size_t i = 0; i < v->committed.n && at < hi; i++) {
        uint64_t a = v->committed.v[i].off, b = a + v->committed.v[i].len;
        if (b <= at) continue;
        if (a >= hi) break;
        if (a > at && on) dmm__device_history_add(v->c, DEVICE_EV_MAP, v->base + at, a - at, NULL);
        uint64_t s = a > at ? a : at, e = b < hi ? b : hi;
        if (!on) dmm__device_history_add(v->c, DEVICE_EV_UNMAP, v->base + s, e - s, NULL);
        at = e;
    }
    if (at < hi && on) dmm__device_history_add(v->c, DEVICE_EV_MAP, v->base + at, hi - at, NULL);
}

/* [lo, hi) is committed (on) or not (mu held); whole granules. */
static void mark(device_poolview *v, uint64_t lo, uint64_t hi, bool on) {
    if (lo >= hi) return;
    if (!dmm__spans_reserve(&v->committed, 2)) {
        v->inexact = true;
        return;
    }
    history_of_change(v, lo, hi, on);
    (void)dmm__spans_carve(&v->committed, lo, hi - lo, NULL, NULL);
    if (on && !dmm__spans_insert(&v->committed, lo, hi - lo)) v->inexact = true;
}

/* Committed bytes of [lo, hi) on record (mu held). */
static uint64_t committed_in(const device_poolview *v, uint64_t lo, uint64_t hi) {
    uint64_t n = 0;
    for (size_t i = 0; i < v->committed.n; i++) {
        uint64_t a = v->committed.v[i].off, b = a + v->committed.v[i].len;
        if (b <= lo || a >= hi) continue;
        n += (b < hi ? b : hi) - (a > lo ? a : lo);
    }
    return n;
}

/* Asks the arena, granule by granule, what of [lo, hi) is mapped (mu held). */
static void resync(device_poolview *v, const dmm_allocation *x, uint64_t lo, uint64_t hi) {
    for (uint64_t g = lo; g < hi; g += v->granule) {
        dmm_range r = {(size_t)g, (size_t)v->granule};
        uint64_t need = 0;
        if (dmm_mechanism_mapped_bytes_for_ranges(v->arena, x, &r, 1, &need) != DMM_OK) {
            dmm_clear_error();
            v->inexact = true;
            continue;
        }
        mark(v, g, g + v->granule, need == 0);
    }
}

static void track_commit(device_poolview *v, const dmm_allocation *a, dmm_range r) {
    pthread_mutex_lock(&v->mu);
    if (mine(v, a)) mark(v, down(v, r.offset), up(v, (uint64_t)r.offset + r.bytes), true);
    pthread_mutex_unlock(&v->mu);
}

/* ---- the mechanism ---- */
static dmm_status pv_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    device_poolview *v = PV(impl);
    dmm_status s = dmm_mechanism_allocate(v->arena, bytes, align, out);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&v->mu);
    if (!v->have) {
        v->have = true;
        v->base = (uintptr_t)out->ptr;
        v->bytes = out->bytes;
    } else {
        v->inexact = true; /* the pool takes one VA allocation; a second one is not watched */
    }
    pthread_mutex_unlock(&v->mu);
    return DMM_OK;
}

static dmm_release_outcome pv_release(void *impl, const dmm_allocation *a) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    dmm_release_outcome o = dmm_mechanism_release(v->arena, &x);
    pthread_mutex_lock(&v->mu);
    if (mine(v, a) && dmm_release_state_of(&o) != DMM_RELEASE_FAILED) {
        v->have = false;
        dmm__spans_fini(&v->committed);
        dmm__spans_init(&v->committed);
    }
    pthread_mutex_unlock(&v->mu);
    return o;
}

static dmm_device_id pv_device(void *impl) { return dmm_mechanism_device(PV(impl)->arena); }

static dmm_status pv_stats(void *impl, dmm_stats *out) { return dmm_mechanism_stats(PV(impl)->arena, out); }

static dmm_status pv_destroy(void *impl) {
    device_poolview *v = PV(impl);
    dmm__spans_fini(&v->committed);
    pthread_mutex_destroy(&v->mu);
    free(v);
    return DMM_OK;
}

static dmm_status pv_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges, size_t n,
                                        dmm_allocation *out) {
    device_poolview *v = PV(impl);
    dmm_status s = dmm_mechanism_allocate_committed(v->arena, bytes, align, ranges, n, out);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&v->mu);
    if (!v->have) {
        v->have = true;
        v->base = (uintptr_t)out->ptr;
        v->bytes = out->bytes;
        for (size_t i = 0; i < n; i++)
            mark(v, down(v, ranges[i].offset), up(v, (uint64_t)ranges[i].offset + ranges[i].bytes), true);
    } else {
        v->inexact = true;
    }
    pthread_mutex_unlock(&v->mu);
    return DMM_OK;
}

static dmm_status pv_commit(void *impl, const dmm_allocation *a, dmm_range range, uint64_t *newly) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    dmm_status s = dmm_mechanism_commit(v->arena, &x, range, newly);
    if (s == DMM_OK) track_commit(v, a, range);
    return s;
}

static dmm_release_outcome pv_decommit(void *impl, const dmm_allocation *a, dmm_range range) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    dmm_release_outcome o = dmm_mechanism_decommit(v->arena, &x, range);
    dmm_release_state st = dmm_release_state_of(&o);
    if (st == DMM_RELEASE_FAILED) return o; /* nothing changed */
    pthread_mutex_lock(&v->mu);
    if (mine(v, a)) {
        uint64_t end = (uint64_t)range.offset + range.bytes;
        uint64_t lo = up(v, range.offset), hi = down(v, end); /* the granules wholly inside */
        if (st == DMM_RELEASE_COMPLETE && lo <= hi && o.unmapped_bytes == committed_in(v, lo, hi))
            mark(v, lo, hi, false);
        else
            resync(v, &x, down(v, range.offset), up(v, end));
    }
    pthread_mutex_unlock(&v->mu);
    return o;
}

static dmm_status pv_committed_bytes(void *impl, const dmm_allocation *a, uint64_t *bytes) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    return dmm_mechanism_committed_bytes(v->arena, &x, bytes);
}

static dmm_status pv_mapped_bytes_for_ranges(void *impl, const dmm_allocation *a, const dmm_range *ranges, size_t n,
                                             uint64_t *bytes) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    return dmm_mechanism_mapped_bytes_for_ranges(v->arena, &x, ranges, n, bytes);
}

static dmm_status pv_alias(void *impl, const dmm_allocation *a, dmm_range dst, dmm_range src) {
    device_poolview *v = PV(impl);
    dmm_allocation x = to_arena(v, a);
    dmm_status s = dmm_mechanism_alias(v->arena, &x, dst, src);
    if (s == DMM_OK) track_commit(v, a, dst);
    return s;
}

static dmm_status pv_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out) {
    return dmm_mechanism_is_quarantined(PV(impl)->arena, ptr, bytes, out);
}

static dmm_status pv_drain_cache(void *impl) { return dmm_mechanism_drain_cache(PV(impl)->arena); }

static dmm_status pv_reservation(void *impl, uintptr_t *va, uint64_t *bytes) {
    return dmm_mechanism_reservation(PV(impl)->arena, va, bytes);
}

static const dmm_virtual_backing_ops pv_vb_ops = {
    .size = sizeof(dmm_virtual_backing_ops),
    .allocate_committed = pv_allocate_committed,
    .commit = pv_commit,
    .decommit = pv_decommit,
    .committed_bytes = pv_committed_bytes,
    .mapped_bytes_for_ranges = pv_mapped_bytes_for_ranges,
    .alias = pv_alias,
    .is_quarantined = pv_is_quarantined,
    .drain_cache = pv_drain_cache,
    .reservation = pv_reservation,
};

static const dmm_mechanism_ops pv_ops = {
    /* named as what the pool sees through it, so that the pool's sentences read the same */
    sizeof(dmm_mechanism_ops), "arena", pv_allocate, pv_release, pv_device, pv_stats, pv_destroy,
    &pv_vb_ops, NULL, NULL,
};

dmm_status dmm__device_poolview_open(dmm_device *c) {
    device_poolview *v = calloc(1, sizeof *v);
    if (v == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for the pool's view");
    v->arena = c->arena;
    v->c = c;
    v->granule = c->granule;
    pthread_mutex_init(&v->mu, NULL);
    dmm__spans_init(&v->committed);
    dmm_status s = dmm_mechanism_create(&pv_ops, v, &c->view);
    if (s != DMM_OK) {
        pv_destroy(v);
        return s;
    }
    c->pv = v;
    return DMM_OK;
}

size_t dmm__device_poolview_runs(dmm_device *c, uint64_t **runs, bool *exact) {
    device_poolview *v = c->pv;
    *runs = NULL;
    pthread_mutex_lock(&v->mu);
    *exact = !v->inexact;
    size_t n = v->have ? v->committed.n : 0;
    uint64_t *r = malloc((n ? n : 1) * 2 * sizeof *r);
    if (r == NULL) {
        pthread_mutex_unlock(&v->mu);
        return SIZE_MAX;
    }
    for (size_t i = 0; i < n; i++) {
        r[2 * i] = (uint64_t)v->base + v->committed.v[i].off;
        r[2 * i + 1] = v->committed.v[i].len;
    }
    pthread_mutex_unlock(&v->mu);
    *runs = r;
    return n;
}
