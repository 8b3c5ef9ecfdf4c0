/* SPDX-License-Identifier: Apache-2.0 */
/* tests/plugin/mock_plugin.c — a dmm plugin for the loader's tests (tests/unit/test_plugin.c).
 *
 * The plain build ("good") offers one mechanism kind, "mock", over the dmm_driver it is given:
 * allocate = one driver alloc (eager), and virtual backing over the driver's VMM (a VA reservation
 * per allocation, one physical handle per granule committed). It counts everything it owns
 * (mechanisms, allocations, reservations, handles) and answers dmm_plugin_can_unload from that.
 * It links no dmm symbol: only the public types of dmm/plugin.h.
 *
 * Aliases (the ALIAS variant's 1.1 slot) work the way the arena does them over the same driver: the
 * handles of the source granules are mapped a second time at the destination granules, so both
 * places show the same bytes. A handle mapped at more than one granule is listed in `shared` with
 * its mapping count; a decommit of one place unmaps it and releases the handle only when its last
 * mapping goes. Invariants: handles owned = granules committed − Σ(shared maps − 1);
 * committed_bytes (mapped) = granules committed × gran.
 *
 * Variants, one MODULE each (tests/plugin/CMakeLists.txt), built from this file with one -D flag:
 *   MOCK_MAJOR2         says ABI major 2
 *   MOCK_NEWER_MINOR    says a minor above the host's (DMM_PLUGIN_ABI_MINOR + 1), with a longer info
 *                       and a mechanism table with one more slot that abort()s if ever called
 *   MOCK_ALIAS          says minor 1 and fills the optional virtual-backing slots of 1.1 (alias,
 *                       is_quarantined, drain_cache, reservation); mock_test_slot_calls counts them
 *   MOCK_SLOTS_AT_MINOR0 says minor 0 but its virtual-backing table (struct_size and abi_minor of
 *                       1.1) fills the 1.1 slots with functions that abort(): the agreed minor is 0,
 *                       so the host must never copy them
 *   MOCK_SHORT_INFO     its info's struct_size is below what 1.0 defines
 *   MOCK_SHORT_OPS      its mechanism table's struct_size is below what 1.0 defines
 *   MOCK_TORN_VB        the ALIAS variant whose virtual-backing table's struct_size ends 4 bytes into
 *                       the is_quarantined slot (the host must copy whole slots only)
 *   MOCK_NO_CAN_UNLOAD  lacks the dmm_plugin_can_unload export
 *   MOCK_NULL_NAME      info->name is NULL
 *   MOCK_LONG_KIND      its second kind is 100 characters with no NUL (the host must bound it)
 *   MOCK_NULL_RELEASE   the mechanism table's release slot is NULL
 *   MOCK_NO_OPTIONAL    no stats slot and no virtual backing (both absent)
 *   MOCK_REFUSES        negotiation fails with an inline message
 *   MOCK_SILENT         an allocate of MOCK_SILENT_BYTES sets no status (and allocates nothing), one
 *                       of MOCK_SILENT_BYTES + 1 fails with code 99 (no dmm_status);
 *                       release frees but leaves its outcome unfilled
 *
 * Misbehaviours of any variant, asked for per mechanism through mock_config.flags (MOCK_FLAG_*,
 * mock_plugin.h): a contradicting release, misaligned addresses, a permissive release of unknown
 * handles, another device, overcounted or inconsistent outcomes, reused ids, a wrong size. Each is
 * a value the host must check before it uses it (issue 11).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/plugin.h"
#define MOCK_PLUGIN_ITSELF 1 /* not the tests' helpers of mock_plugin.h */
#include "mock_plugin.h"

#ifdef MOCK_TORN_VB
#define MOCK_ALIAS 1
#define MOCK_VB_SIZE (offsetof(dmm_plugin_virtual_backing_ops, is_quarantined) + 4)
#else
#define MOCK_VB_SIZE sizeof(dmm_plugin_virtual_backing_ops)
#endif

/* ---- what the library owns, for dmm_plugin_can_unload ---- */
static _Atomic long owned_mechanisms, owned_allocations, owned_reservations, owned_handles;
static _Atomic uint64_t next_id = 1;
static _Atomic long test_held; /* mock_test_hold: ownership the test pretends the plugin keeps */

/* Calls of the 1.1 slots (the ALIAS variant) and of release, decommit and commit, for
 * mock_test_slot_calls. */
enum { SLOT_ALIAS, SLOT_IS_QUARANTINED, SLOT_DRAIN_CACHE, SLOT_RESERVATION, SLOT_RELEASE, SLOT_DECOMMIT,
       SLOT_COMMIT, SLOT_COUNT };
static _Atomic uint64_t slot_calls[SLOT_COUNT];

/* A test-only export: makes dmm_plugin_can_unload answer BUSY while held (something the plugin owns
 * outside any mechanism: a cache, a thread). */
DMM_PLUGIN_EXPORT void mock_test_hold(int held);
DMM_PLUGIN_EXPORT void mock_test_hold(int held) { test_held = held; }

/* A test-only export: how often the slot `slot` ("alias", "is_quarantined", "drain_cache",
 * "reservation", "release", "decommit", "commit") was called in this library; UINT64_MAX for
 * another name. */
DMM_PLUGIN_EXPORT uint64_t mock_test_slot_calls(const char *slot);
DMM_PLUGIN_EXPORT uint64_t mock_test_slot_calls(const char *slot) {
    static const char *const names[SLOT_COUNT] = {"alias",   "is_quarantined", "drain_cache", "reservation",
                                                  "release", "decommit",       "commit"};
    for (int i = 0; i < SLOT_COUNT; i++)
        if (strcmp(slot, names[i]) == 0) return slot_calls[i];
    return UINT64_MAX;
}

static void ok(dmm_plugin_status *st) { st->code = DMM_OK; }

/* Fails the call (a void function) with a code and a sentence. */
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fail(__VA_ARGS__);                                                                         \
        return;                                                                                    \
    } while (0)

static void fail(dmm_plugin_status *st, dmm_status code, const char *fmt, ...) {
    st->code = (int32_t)code;
    size_t cap = st->struct_size > offsetof(dmm_plugin_status, message)
                     ? st->struct_size - offsetof(dmm_plugin_status, message)
                     : 0;
    if (cap > sizeof st->message) cap = sizeof st->message;
    if (cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, cap, fmt, ap);
    va_end(ap);
}

/* ---- the mechanism ---- */

typedef struct rec {
    uint64_t ptr, bytes, align, id;
    uint64_t skew;     /* ptr - skew is what the driver handed out (MOCK_FLAG_MISALIGN) */
    int vb;            /* made through virtual backing: a reservation with granules */
    uint64_t va_bytes; /* reservation (vb) or driver alloc bytes */
    size_t ngran;
    unsigned char *committed; /* per granule (vb) */
    dmm_phys *handles;        /* per granule (vb) */
} rec;

/* A handle mapped at more than one granule (by alias) and how many times. */
typedef struct shared_handle {
    dmm_phys handle;
    uint32_t maps; /* >= 2 while listed */
} shared_handle;

typedef struct mock {
    dmm_driver *driver;
    uint64_t limit;      /* fail_above_bytes */
    uint32_t flags;      /* MOCK_FLAG_* */
    size_t gran;         /* the driver's granularity (0: no VMM) */
    pthread_mutex_t lock;
    rec *recs;
    size_t n, cap;
    shared_handle *shared; /* handles mapped more than once (aliases) */
    size_t nshared, capshared;
    uint64_t live_bytes, committed_bytes, reserved_bytes, handle_count, driver_calls;
    uint64_t handle_peak; /* the most handles owned at once (the peak of owned_bytes) */
} mock;

static rec *find(mock *m, const dmm_plugin_allocation *a, size_t *at) {
    for (size_t i = 0; i < m->n; i++) {
        rec *r = &m->recs[i];
        if (r->ptr == a->ptr && r->id == a->id && r->bytes == a->bytes && r->align == a->align) {
            if (at != NULL) *at = i;
            return r;
        }
    }
    return NULL;
}

static int push(mock *m, const rec *r) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        rec *g = realloc(m->recs, cap * sizeof *g);
        if (g == NULL) return -1;
        m->recs = g;
        m->cap = cap;
    }
    m->recs[m->n++] = *r;
    return 0;
}

static void drop(mock *m, size_t at) {
    free(m->recs[at].committed);
    free(m->recs[at].handles);
    m->recs[at] = m->recs[--m->n];
}

static void fill_allocation(dmm_plugin_allocation *out, const rec *r) {
    /* Write only the fields of 1.0, inside the host's struct_size (it is the host's struct). */
    if (out->struct_size < sizeof *out) return;
    out->ptr = r->ptr;
    out->bytes = r->bytes;
    out->align = r->align;
    out->id = r->id;
}

static void fill_outcome(dmm_plugin_release_outcome *o, uint32_t state, uint64_t bytes, uint64_t unmapped,
                         uint64_t residual, dmm_status failure) {
    if (o->struct_size < sizeof *o) return;
#ifdef MOCK_SILENT
    (void)state, (void)bytes, (void)unmapped, (void)residual, (void)failure;
    return; /* leaves the outcome as the host pre-filled it */
#else
    o->state = state;
    o->allocation_bytes = bytes;
    o->unmapped_bytes = unmapped;
    o->residual_owned_bytes = residual;
    o->failure = (int32_t)failure;
#endif
}

static void mock_allocate(void *impl, uint64_t bytes, uint64_t align, dmm_plugin_allocation *out,
                          dmm_plugin_status *st) {
    mock *m = impl;
#ifdef MOCK_SILENT
    if (bytes == MOCK_SILENT_BYTES) return; /* forgets the status: the host must read a failure */
    if (bytes == MOCK_SILENT_BYTES + 1) FAIL(st, (dmm_status)99, "mock invents code 99"); /* no dmm_status */
#endif
    if (m->limit != 0 && bytes > m->limit)
        FAIL(st, DMM_ERR_OUT_OF_MEMORY, MOCK_REFUSAL_TEXT " (%llu bytes asked, limit %llu)",
                    (unsigned long long)bytes, (unsigned long long)m->limit);
    if (align > 4096)
        FAIL(st, DMM_ERR_INVALID_ARGUMENT, "mock aligns to at most 4096 bytes, not %llu",
                    (unsigned long long)align);
    if (m->driver->ops->alloc == NULL)
        FAIL(st, DMM_ERR_UNSUPPORTED, "mock needs a driver with eager alloc");
    uintptr_t p = 0;
    pthread_mutex_lock(&m->lock);
    m->driver_calls++;
    dmm_status s = m->driver->ops->alloc(m->driver, (size_t)bytes, &p);
    if (s != DMM_OK) {
        pthread_mutex_unlock(&m->lock);
        FAIL(st, s, "mock: the driver's alloc of %llu bytes failed (code %d)", (unsigned long long)bytes,
                    (int)s);
    }
    uint64_t skew = m->flags & MOCK_FLAG_MISALIGN ? MOCK_SKEW : 0;
    uint64_t id = m->flags & MOCK_FLAG_SAME_ID ? MOCK_SAME_ID : atomic_fetch_add(&next_id, 1);
    uint64_t told = m->flags & MOCK_FLAG_WRONG_BYTES ? bytes + 1 : bytes; /* what it records and hands back */
    rec r = {p + skew, told, align ? align : 256, id, skew, 0, bytes, 0, NULL, NULL};
    if (push(m, &r) != 0) {
        m->driver->ops->free(m->driver, p, (size_t)bytes);
        pthread_mutex_unlock(&m->lock);
        FAIL(st, DMM_ERR_OUT_OF_MEMORY, "mock: no memory for a record");
    }
    m->live_bytes += r.bytes;
    owned_allocations++;
    pthread_mutex_unlock(&m->lock);
    fill_allocation(out, &r);
    ok(st);
}

/* Forgets one mapping of handle h; true when h is still mapped elsewhere (an alias: keep it). */
static int forget_mapping(mock *m, dmm_phys h) {
    for (size_t i = 0; i < m->nshared; i++) {
        if (m->shared[i].handle != h) continue;
        if (--m->shared[i].maps == 1) m->shared[i] = m->shared[--m->nshared];
        return 1;
    }
    return 0;
}

/* Unmaps the committed granules of r inside [first, last) and releases each handle whose last
 * mapping that was; returns the bytes unmapped, stops at the first driver failure (*s set). */
static uint64_t decommit_granules(mock *m, rec *r, size_t first, size_t last, dmm_status *s) {
    uint64_t unmapped = 0;
    *s = DMM_OK;
    for (size_t g = first; g < last; g++) {
        if (!r->committed[g]) continue;
        uintptr_t va = (uintptr_t)r->ptr + g * m->gran;
        if ((*s = m->driver->ops->unmap(m->driver, va, m->gran)) != DMM_OK) return unmapped;
        unmapped += m->gran;
        r->committed[g] = 0;
        m->committed_bytes -= m->gran;
        if (forget_mapping(m, r->handles[g])) continue; /* still mapped at its other place: the memory lives on */
        if ((*s = m->driver->ops->release(m->driver, r->handles[g])) != DMM_OK) return unmapped;
        m->handle_count--;
        owned_handles--;
    }
    return unmapped;
}

#ifdef MOCK_NULL_RELEASE
__attribute__((unused))
#endif
static void mock_release(void *impl, const dmm_plugin_allocation *a, dmm_plugin_release_outcome *out,
                         dmm_plugin_status *st) {
    mock *m = impl;
    slot_calls[SLOT_RELEASE]++;
    pthread_mutex_lock(&m->lock);
    size_t at;
    rec *r = find(m, a, &at);
    if (r == NULL && (m->flags & MOCK_FLAG_PERMISSIVE)) { /* frees nothing, says it did */
        pthread_mutex_unlock(&m->lock);
        fill_outcome(out, DMM_RELEASE_COMPLETE, a->bytes, a->bytes, 0, DMM_OK);
        ok(st);
        return;
    }
    if (r == NULL) {
        pthread_mutex_unlock(&m->lock);
        fill_outcome(out, DMM_RELEASE_FAILED, a->bytes, 0, 0, DMM_ERR_UNKNOWN_ALLOCATION);
        FAIL(st, DMM_ERR_UNKNOWN_ALLOCATION, "mock: no live allocation at 0x%llx with id %llu",
                    (unsigned long long)a->ptr, (unsigned long long)a->id);
    }
    dmm_status s;
    uint64_t unmapped = 0;
    if (r->vb) {
        unmapped = decommit_granules(m, r, 0, r->ngran, &s);
        if (s == DMM_OK) s = m->driver->ops->unreserve(m->driver, (uintptr_t)(r->ptr - r->skew), (size_t)r->va_bytes);
        if (s == DMM_OK) {
            m->reserved_bytes -= r->va_bytes;
            owned_reservations--;
        }
    } else {
        s = m->driver->ops->free(m->driver, (uintptr_t)(r->ptr - r->skew), (size_t)r->va_bytes);
        if (s == DMM_OK) unmapped = r->va_bytes;
    }
    if (s != DMM_OK) {
        pthread_mutex_unlock(&m->lock);
        /* Honest: a failure after some granules were unmapped leaves the rest owned. */
        fill_outcome(out, unmapped ? DMM_RELEASE_QUARANTINED : DMM_RELEASE_FAILED, a->bytes, unmapped, 0, s);
        FAIL(st, s, "mock: the driver failed releasing the allocation at 0x%llx (code %d)",
                    (unsigned long long)a->ptr, (int)s);
    }
    m->live_bytes -= r->bytes;
    drop(m, at);
    owned_allocations--;
    pthread_mutex_unlock(&m->lock);
    if (m->flags & MOCK_FLAG_FAILED_BUT_FREED) {
        fill_outcome(out, DMM_RELEASE_FAILED, a->bytes, unmapped, 0, DMM_ERR_DRIVER);
        FAIL(st, DMM_ERR_DRIVER, "mock says nothing changed (it freed everything)");
    }
    fill_outcome(out, DMM_RELEASE_COMPLETE, a->bytes, unmapped, m->flags & MOCK_FLAG_COMPLETE_OWNED ? a->bytes : 0,
                 DMM_OK);
    if (m->flags & MOCK_FLAG_CONTRADICT) FAIL(st, DMM_ERR_DRIVER, MOCK_SNAG_TEXT);
    ok(st);
}

static void mock_device(void *impl, int32_t *tier, int32_t *index, dmm_plugin_status *st) {
    mock *m = impl;
    *tier = (int32_t)m->driver->device.tier;
    *index = m->driver->device.index + (m->flags & MOCK_FLAG_OTHER_DEVICE ? 1 : 0);
    ok(st);
}

static void mock_destroy(void *impl, dmm_plugin_status *st) {
    mock *m = impl;
    pthread_mutex_lock(&m->lock);
    size_t n = m->n;
    pthread_mutex_unlock(&m->lock);
    if (n > 0) FAIL(st, DMM_ERR_BUSY, "mock: %zu allocations are still live", n);
    pthread_mutex_destroy(&m->lock);
    free(m->recs);
    free(m->shared);
    free(m);
    owned_mechanisms--;
    ok(st);
}

#ifndef MOCK_NO_OPTIONAL
static void set_count(dmm_count *c, uint64_t v) { c->current = (int64_t)v; }

static void mock_stats(void *impl, dmm_stats *out, dmm_plugin_status *st) {
    mock *m = impl;
    if (out->size < sizeof *out) FAIL(st, DMM_ERR_SHORT_STRUCT, "mock fills a whole dmm_stats");
    pthread_mutex_lock(&m->lock);
    set_count(&out->allocations, m->n);
    set_count(&out->allocated_bytes, m->live_bytes);
    set_count(&out->reserved_bytes, m->reserved_bytes);
    set_count(&out->committed_bytes, m->committed_bytes);
    set_count(&out->mapped_bytes, m->committed_bytes);
    set_count(&out->owned_bytes, m->handle_count * m->gran); /* an alias maps, it owns nothing more */
    out->owned_bytes.peak = (int64_t)(m->handle_peak * m->gran);
    set_count(&out->handles, m->handle_count);
    out->driver_alloc = m->driver_calls;
    if (m->flags & MOCK_FLAG_NEGATIVE_STATS)
        out->allocations.current = out->owned_bytes.current = out->handles.current = -1;
    pthread_mutex_unlock(&m->lock);
    ok(st);
}

/* ---- virtual backing ---- */

static void granules_of(const mock *m, uint64_t offset, uint64_t bytes, size_t *first, size_t *last, int whole) {
    if (whole) { /* granules wholly inside */
        *first = (size_t)((offset + m->gran - 1) / m->gran);
        *last = (size_t)((offset + bytes) / m->gran);
    } else { /* granules touched */
        *first = (size_t)(offset / m->gran);
        *last = (size_t)((offset + bytes + m->gran - 1) / m->gran);
    }
    if (*last < *first) *last = *first;
}

/* Commits granules [first, last) of r; undoes this call's granules on failure. */
static dmm_status commit_granules(mock *m, rec *r, size_t first, size_t last, uint64_t *newly) {
    dmm_driver *d = m->driver;
    *newly = 0;
    size_t g = first;
    dmm_status s = DMM_OK;
    for (; g < last; g++) {
        if (r->committed[g]) continue;
        uintptr_t va = (uintptr_t)r->ptr + g * m->gran;
        dmm_phys h;
        if ((s = d->ops->create(d, m->gran, &h)) != DMM_OK) break;
        if ((s = d->ops->map(d, va, m->gran, h)) != DMM_OK) {
            d->ops->release(d, h);
            break;
        }
        if ((s = d->ops->set_access(d, va, m->gran, DMM_ACCESS_READ_WRITE)) != DMM_OK) {
            d->ops->unmap(d, va, m->gran);
            d->ops->release(d, h);
            break;
        }
        r->committed[g] = 2; /* 2 = committed by this call (for the undo) */
        r->handles[g] = h;
        *newly += m->gran;
    }
    for (size_t i = first; i < g; i++) {
        if (r->committed[i] != 2) continue;
        if (s != DMM_OK) {
            d->ops->unmap(d, (uintptr_t)r->ptr + i * m->gran, m->gran);
            d->ops->release(d, r->handles[i]);
            r->committed[i] = 0;
        } else {
            r->committed[i] = 1;
            m->committed_bytes += m->gran;
            if (++m->handle_count > m->handle_peak) m->handle_peak = m->handle_count;
            owned_handles++;
        }
    }
    if (s != DMM_OK) *newly = 0;
    return s;
}

static void mock_allocate_committed(void *impl, uint64_t bytes, uint64_t align, const uint64_t *ranges, uint64_t n,
                                    dmm_plugin_allocation *out, dmm_plugin_status *st) {
    mock *m = impl;
    if (m->limit != 0 && bytes > m->limit)
        FAIL(st, DMM_ERR_OUT_OF_MEMORY, MOCK_REFUSAL_TEXT " (%llu bytes asked, limit %llu)",
                    (unsigned long long)bytes, (unsigned long long)m->limit);
    if (m->gran == 0) FAIL(st, DMM_ERR_UNSUPPORTED, "mock: the driver has no VMM (no granularity)");
    size_t ngran = (size_t)((bytes + m->gran - 1) / m->gran);
    uint64_t skew = m->flags & MOCK_FLAG_MISALIGN ? MOCK_SKEW : 0; /* (only for n = 0: nothing is mapped) */
    rec r = {0, bytes, align > m->gran ? align : m->gran, 0, skew, 1, (uint64_t)ngran * m->gran, ngran, NULL, NULL};
    r.committed = calloc(ngran, 1);
    r.handles = calloc(ngran, sizeof *r.handles);
    if (r.committed == NULL || r.handles == NULL) {
        free(r.committed);
        free(r.handles);
        FAIL(st, DMM_ERR_OUT_OF_MEMORY, "mock: no memory for %zu granule records", ngran);
    }
    pthread_mutex_lock(&m->lock);
    uintptr_t va = 0;
    dmm_status s = m->driver->ops->reserve(m->driver, (size_t)r.va_bytes, (size_t)r.align, &va);
    if (s == DMM_OK) {
        r.ptr = va;
        for (uint64_t i = 0; i < n && s == DMM_OK; i++) {
            size_t first, last;
            uint64_t newly;
            granules_of(m, ranges[2 * i], ranges[2 * i + 1], &first, &last, 0);
            s = commit_granules(m, &r, first, last, &newly);
        }
        if (s != DMM_OK) {
            dmm_status u;
            decommit_granules(m, &r, 0, ngran, &u);
            m->driver->ops->unreserve(m->driver, va, (size_t)r.va_bytes);
        }
    }
    if (s == DMM_OK) {
        r.ptr += skew;
        r.id = m->flags & MOCK_FLAG_SAME_ID ? MOCK_SAME_ID : atomic_fetch_add(&next_id, 1);
        if (push(m, &r) != 0) s = DMM_ERR_OUT_OF_MEMORY; /* (a mock: not unwound) */
    }
    if (s != DMM_OK) {
        pthread_mutex_unlock(&m->lock);
        free(r.committed);
        free(r.handles);
        FAIL(st, s, "mock: reserving or committing %llu bytes failed (code %d)", (unsigned long long)bytes,
                    (int)s);
    }
    m->reserved_bytes += r.va_bytes;
    m->live_bytes += bytes;
    owned_reservations++;
    owned_allocations++;
    pthread_mutex_unlock(&m->lock);
    fill_allocation(out, &r);
    ok(st);
}

static void mock_commit(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                        uint64_t *newly_mapped, dmm_plugin_status *st) {
    mock *m = impl;
    slot_calls[SLOT_COMMIT]++;
    pthread_mutex_lock(&m->lock);
    rec *r = find(m, a, NULL);
    if (r == NULL || !r->vb) {
        pthread_mutex_unlock(&m->lock);
        FAIL(st, DMM_ERR_UNKNOWN_ALLOCATION, "mock: no live virtual allocation at 0x%llx",
                    (unsigned long long)a->ptr);
    }
    size_t first, last;
    granules_of(m, offset, bytes, &first, &last, 0);
    dmm_status s = commit_granules(m, r, first, last, newly_mapped);
    pthread_mutex_unlock(&m->lock);
    if (s != DMM_OK) FAIL(st, s, "mock: commit failed (code %d); nothing was changed", (int)s);
    ok(st);
}

static void mock_decommit(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                          dmm_plugin_release_outcome *out, dmm_plugin_status *st) {
    mock *m = impl;
    slot_calls[SLOT_DECOMMIT]++;
    pthread_mutex_lock(&m->lock);
    rec *r = find(m, a, NULL);
    if (r == NULL || !r->vb) {
        pthread_mutex_unlock(&m->lock);
        fill_outcome(out, DMM_RELEASE_FAILED, bytes, 0, 0, DMM_ERR_UNKNOWN_ALLOCATION);
        FAIL(st, DMM_ERR_UNKNOWN_ALLOCATION, "mock: no live virtual allocation at 0x%llx",
                    (unsigned long long)a->ptr);
    }
    size_t first, last;
    granules_of(m, offset, bytes, &first, &last, 1);
    dmm_status s;
    uint64_t unmapped = decommit_granules(m, r, first, last, &s);
    pthread_mutex_unlock(&m->lock);
    if (s != DMM_OK) {
        fill_outcome(out, unmapped ? DMM_RELEASE_QUARANTINED : DMM_RELEASE_FAILED, bytes, unmapped, 0, s);
        FAIL(st, s, "mock: decommit failed (code %d)", (int)s);
    }
    fill_outcome(out, DMM_RELEASE_COMPLETE, bytes, m->flags & MOCK_FLAG_OVERCOUNT ? 2 * bytes : unmapped, 0, DMM_OK);
    ok(st);
}

static void mock_committed_bytes(void *impl, const dmm_plugin_allocation *a, uint64_t *bytes, dmm_plugin_status *st) {
    mock *m = impl;
    pthread_mutex_lock(&m->lock);
    rec *r = find(m, a, NULL);
    uint64_t v = 0;
    if (r != NULL && r->vb)
        for (size_t g = 0; g < r->ngran; g++) v += r->committed[g] ? m->gran : 0;
    pthread_mutex_unlock(&m->lock);
    if (r == NULL) FAIL(st, DMM_ERR_UNKNOWN_ALLOCATION, "mock: no live allocation");
    *bytes = r->vb ? v : a->bytes;
    ok(st);
}

static void mock_mapped_bytes_for_ranges(void *impl, const dmm_plugin_allocation *a, const uint64_t *ranges,
                                         uint64_t n, uint64_t *bytes, dmm_plugin_status *st) {
    mock *m = impl;
    pthread_mutex_lock(&m->lock);
    rec *r = find(m, a, NULL);
    uint64_t v = 0;
    if (r != NULL && r->vb)
        for (uint64_t i = 0; i < n; i++) {
            size_t first, last;
            granules_of(m, ranges[2 * i], ranges[2 * i + 1], &first, &last, 0);
            for (size_t g = first; g < last; g++) v += r->committed[g] ? 0 : m->gran;
        }
    pthread_mutex_unlock(&m->lock);
    if (r == NULL || !r->vb) FAIL(st, DMM_ERR_UNKNOWN_ALLOCATION, "mock: no live virtual allocation");
    *bytes = v;
    ok(st);
}

/* ---- the optional virtual-backing slots of 1.1 ---- */

#if defined(MOCK_ALIAS)
/* Room for k more entries in m->shared (before anything is mapped: nothing fails after it). */
static int shared_reserve(mock *m, size_t k) {
    if (m->nshared + k <= m->capshared) return 0;
    size_t cap = m->capshared ? m->capshared : 8;
    while (cap < m->nshared + k) cap *= 2;
    shared_handle *g = realloc(m->shared, cap * sizeof *g);
    if (g == NULL) return -1;
    m->shared = g;
    m->capshared = cap;
    return 0;
}

/* One more mapping of handle h (room reserved). */
static void add_mapping(mock *m, dmm_phys h) {
    for (size_t i = 0; i < m->nshared; i++)
        if (m->shared[i].handle == h) {
            m->shared[i].maps++;
            return;
        }
    m->shared[m->nshared++] = (shared_handle){h, 2};
}

/* Why the alias cannot be made (checked under the lock, nothing changed), or NULL. */
static const char *alias_refusal(const mock *m, const rec *r, uint64_t dst, uint64_t src, uint64_t bytes) {
    if (r == NULL || !r->vb) return "no live virtual allocation has that identity";
    if (dst % m->gran || src % m->gran || bytes % m->gran) return "the ranges must be whole granules";
    if (src + bytes > (uint64_t)r->ngran * m->gran || dst + bytes > (uint64_t)r->ngran * m->gran)
        return "the ranges reach past the allocation's granules";
    size_t s0 = (size_t)(src / m->gran), d0 = (size_t)(dst / m->gran), n = (size_t)(bytes / m->gran);
    for (size_t i = 0; i < n; i++) {
        if (!r->committed[s0 + i]) return "the source is not wholly committed";
        if (r->committed[d0 + i]) return "the destination is not wholly uncommitted";
    }
    return NULL;
}

/* Maps the source granules' handles a second time at the destination (READ_WRITE), all or nothing. */
static void mock_alias(void *impl, const dmm_plugin_allocation *a, uint64_t dst_offset, uint64_t src_offset,
                       uint64_t bytes, dmm_plugin_status *st) {
    mock *m = impl;
    slot_calls[SLOT_ALIAS]++;
    pthread_mutex_lock(&m->lock);
    rec *r = find(m, a, NULL);
    const char *why = alias_refusal(m, r, dst_offset, src_offset, bytes);
    if (why == NULL && shared_reserve(m, (size_t)(bytes / m->gran)) != 0) why = "no memory for the shared-handle list";
    if (why != NULL) {
        pthread_mutex_unlock(&m->lock);
        FAIL(st, DMM_ERR_INVALID_ARGUMENT,
             "mock: alias of [%llu, +%llu) to [%llu, +%llu) refused: %s; nothing was changed",
             (unsigned long long)src_offset, (unsigned long long)bytes, (unsigned long long)dst_offset,
             (unsigned long long)bytes, why);
    }
    dmm_driver *d = m->driver;
    size_t s0 = (size_t)(src_offset / m->gran), d0 = (size_t)(dst_offset / m->gran), n = (size_t)(bytes / m->gran);
    size_t i = 0;
    dmm_status s = DMM_OK;
    for (; i < n; i++) {
        uintptr_t va = (uintptr_t)r->ptr + (d0 + i) * m->gran;
        if ((s = d->ops->map(d, va, m->gran, r->handles[s0 + i])) != DMM_OK) break;
        if ((s = d->ops->set_access(d, va, m->gran, DMM_ACCESS_READ_WRITE)) != DMM_OK) {
            d->ops->unmap(d, va, m->gran);
            break;
        }
    }
    if (s != DMM_OK) {
        for (size_t j = 0; j < i; j++) d->ops->unmap(d, (uintptr_t)r->ptr + (d0 + j) * m->gran, m->gran);
        pthread_mutex_unlock(&m->lock);
        FAIL(st, s, "mock: alias failed in the driver (code %d); nothing was changed", (int)s);
    }
    for (i = 0; i < n; i++) {
        r->committed[d0 + i] = 1;
        r->handles[d0 + i] = r->handles[s0 + i];
        add_mapping(m, r->handles[s0 + i]);
        m->committed_bytes += m->gran;
    }
    pthread_mutex_unlock(&m->lock);
    ok(st);
}

/* The mock keeps nothing out of use for good: every decommit failure is reported, never hidden. */
static void mock_is_quarantined(void *impl, uint64_t ptr, uint64_t bytes, uint32_t *quarantined,
                                dmm_plugin_status *st) {
    (void)impl, (void)ptr, (void)bytes;
    slot_calls[SLOT_IS_QUARANTINED]++;
    *quarantined = 0;
    ok(st);
}

/* The mock caches no handles: a decommit releases them at once. */
static void mock_drain_cache(void *impl, dmm_plugin_status *st) {
    (void)impl;
    slot_calls[SLOT_DRAIN_CACHE]++;
    ok(st);
}

/* Its largest live reservation (the mock reserves per allocation), or none. */
static void mock_reservation(void *impl, uint64_t *va, uint64_t *bytes, dmm_plugin_status *st) {
    mock *m = impl;
    slot_calls[SLOT_RESERVATION]++;
    pthread_mutex_lock(&m->lock);
    *va = 0;
    *bytes = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->recs[i].vb && m->recs[i].va_bytes > *bytes) {
            *va = m->recs[i].ptr;
            *bytes = m->recs[i].va_bytes;
        }
    pthread_mutex_unlock(&m->lock);
    ok(st);
}
#define MOCK_VB_MINOR 1
#define MOCK_VB_1_1 mock_alias, mock_is_quarantined, mock_drain_cache, mock_reservation
#elif defined(MOCK_SLOTS_AT_MINOR0)
/* Slots above the agreed minor (0): the proof that the host never copies them is that they abort. */
static void never_alias(void *impl, const dmm_plugin_allocation *a, uint64_t d, uint64_t s, uint64_t b,
                        dmm_plugin_status *st) {
    (void)impl, (void)a, (void)d, (void)s, (void)b, (void)st;
    abort();
}
static void never_is_quarantined(void *impl, uint64_t p, uint64_t b, uint32_t *q, dmm_plugin_status *st) {
    (void)impl, (void)p, (void)b, (void)q, (void)st;
    abort();
}
static void never_drain_cache(void *impl, dmm_plugin_status *st) {
    (void)impl, (void)st;
    abort();
}
static void never_reservation(void *impl, uint64_t *va, uint64_t *b, dmm_plugin_status *st) {
    (void)impl, (void)va, (void)b, (void)st;
    abort();
}
#define MOCK_VB_MINOR 1
#define MOCK_VB_1_1 never_alias, never_is_quarantined, never_drain_cache, never_reservation
#else
#define MOCK_VB_MINOR 0
#define MOCK_VB_1_1 NULL, NULL, NULL, NULL /* absent */
#endif

static const dmm_plugin_virtual_backing_ops mock_vb = {
    (uint32_t)MOCK_VB_SIZE, MOCK_VB_MINOR, mock_allocate_committed, mock_commit, mock_decommit,
    mock_committed_bytes, mock_mapped_bytes_for_ranges, MOCK_VB_1_1,
};
#endif /* !MOCK_NO_OPTIONAL */

/* ---- the tables ---- */

#ifdef MOCK_NEWER_MINOR
/* A table of a minor above the host's: its slots, then one the host must never call. */
static void mock_future_slot(void *impl, dmm_plugin_status *st) {
    (void)impl, (void)st;
    abort(); /* the proof: a host that calls a slot above the agreed minor kills the test */
}
typedef struct mock_ops_future {
    dmm_plugin_mechanism_ops base;
    void (*future)(void *impl, dmm_plugin_status *status);
} mock_ops_future;
#define MOCK_OPS_SIZE sizeof(mock_ops_future)
#define MOCK_OPS_MINOR (DMM_PLUGIN_ABI_MINOR + 1)
#elif defined(MOCK_SHORT_OPS)
#define MOCK_OPS_SIZE offsetof(dmm_plugin_mechanism_ops, virtual_backing)
#define MOCK_OPS_MINOR 0
#elif defined(MOCK_ALIAS)
#define MOCK_OPS_SIZE sizeof(dmm_plugin_mechanism_ops)
#define MOCK_OPS_MINOR 1
#else
#define MOCK_OPS_SIZE sizeof(dmm_plugin_mechanism_ops)
#define MOCK_OPS_MINOR 0
#endif

#ifdef MOCK_NULL_RELEASE
#define MOCK_RELEASE_SLOT NULL
#else
#define MOCK_RELEASE_SLOT mock_release
#endif
#ifdef MOCK_NO_OPTIONAL
#define MOCK_STATS_SLOT NULL
#define MOCK_VB_TABLE NULL
#else
#define MOCK_STATS_SLOT mock_stats
#define MOCK_VB_TABLE (&mock_vb)
#endif

#define MOCK_BASE_OPS                                                                                \
    {MOCK_OPS_SIZE, MOCK_OPS_MINOR, "mock", mock_allocate, MOCK_RELEASE_SLOT, mock_device, mock_destroy, \
     MOCK_STATS_SLOT, MOCK_VB_TABLE}

#ifdef MOCK_NEWER_MINOR
static const mock_ops_future mock_ops_table = {MOCK_BASE_OPS, mock_future_slot};
#define MOCK_OPS (&mock_ops_table.base)
#else
static const dmm_plugin_mechanism_ops mock_ops_table = MOCK_BASE_OPS;
#define MOCK_OPS (&mock_ops_table)
#endif

/* ---- the exports ---- */

#ifdef MOCK_LONG_KIND
static const char long_kind[100] = /* exactly 100 characters: no terminating NUL */
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";
static const char *const mock_kinds[] = {"mock", long_kind, NULL};
#else
static const char *const mock_kinds[] = {"mock", NULL};
#endif

#ifdef MOCK_NEWER_MINOR
typedef struct mock_info_future {
    dmm_plugin_info base;
    const char *future_field; /* a host of a lower minor never reads it */
} mock_info_future;
static const mock_info_future mock_info_ext = {
    {sizeof(mock_info_future), DMM_PLUGIN_ABI_MINOR + 1, DMM_PLUGIN_ABI_MAJOR, DMM_CAP_VIRTUAL_BACKING, "mock-newer",
     "1.1.0", mock_kinds},
    "from the future"};
#define MOCK_INFO (&mock_info_ext.base)
#else
#if defined(MOCK_SHORT_INFO)
#define MOCK_INFO_SIZE (DMM_PLUGIN_INFO_SIZE_1_0 - sizeof(void *))
#else
#define MOCK_INFO_SIZE sizeof(dmm_plugin_info)
#endif
#if defined(MOCK_MAJOR2)
#define MOCK_MAJOR 2
#else
#define MOCK_MAJOR DMM_PLUGIN_ABI_MAJOR
#endif
#if defined(MOCK_NULL_NAME)
#define MOCK_NAME NULL
#else
#define MOCK_NAME "mock"
#endif
#if defined(MOCK_NO_OPTIONAL)
#define MOCK_CAPS 0u
#else
#define MOCK_CAPS ((uint32_t)DMM_CAP_VIRTUAL_BACKING)
#endif
#if defined(MOCK_ALIAS)
#define MOCK_INFO_MINOR 1 /* what its 1.1 slots need */
#define MOCK_VERSION "1.1.0"
#else
#define MOCK_INFO_MINOR 0 /* MOCK_SLOTS_AT_MINOR0 included: its 1.1 slots lie above the agreed minor */
#define MOCK_VERSION "1.0.0"
#endif
static const dmm_plugin_info mock_info = {MOCK_INFO_SIZE, MOCK_INFO_MINOR, MOCK_MAJOR, MOCK_CAPS,
                                          MOCK_NAME,      MOCK_VERSION,    mock_kinds};
#define MOCK_INFO (&mock_info)
#endif

DMM_PLUGIN_EXPORT void dmm_plugin_negotiate(const dmm_plugin_host *host, const dmm_plugin_info **info,
                                            dmm_plugin_status *st) {
#ifdef MOCK_REFUSES
    (void)host, (void)info, (void)MOCK_INFO;
    FAIL(st, DMM_ERR_UNSUPPORTED, MOCK_NEGOTIATION_TEXT);
#else
    if (host->struct_size < DMM_PLUGIN_HEADER_SIZE || host->abi_major != DMM_PLUGIN_ABI_MAJOR)
        FAIL(st, DMM_ERR_VERSION_MISMATCH, "mock speaks plugin ABI major %d", DMM_PLUGIN_ABI_MAJOR);
    *info = MOCK_INFO;
    ok(st);
#endif
}

DMM_PLUGIN_EXPORT void dmm_plugin_create(const dmm_plugin_create_args *args, void **impl,
                                         const dmm_plugin_mechanism_ops **ops, dmm_plugin_status *st) {
    dmm_plugin_create_args a;
    memset(&a, 0, sizeof a);
    memcpy(&a, args, args->struct_size < sizeof a ? args->struct_size : sizeof a); /* the copy rule */
    if (a.kind == NULL || strcmp(a.kind, "mock") != 0)
        FAIL(st, DMM_ERR_INVALID_ARGUMENT, "mock makes only kind 'mock'");
    mock_config cfg = {sizeof cfg, 0, 0};
    if (a.config != NULL) {
        const mock_config *c = a.config;
        if (c->struct_size < sizeof cfg)
            FAIL(st, DMM_ERR_SHORT_STRUCT, "mock_config.struct_size %u is below %zu", c->struct_size,
                        sizeof cfg);
        cfg = *c;
    }
    mock *m = calloc(1, sizeof *m);
    if (m == NULL) FAIL(st, DMM_ERR_OUT_OF_MEMORY, "mock: no memory");
    m->driver = a.driver;
    m->limit = cfg.fail_above_bytes;
    m->flags = cfg.flags;
    if (a.driver->ops->granularity != NULL) {
        size_t g = 0;
        if (a.driver->ops->granularity(a.driver, &g) == DMM_OK) m->gran = g;
    }
    pthread_mutex_init(&m->lock, NULL);
    owned_mechanisms++;
    *impl = m;
    *ops = MOCK_OPS;
    ok(st);
}

#ifndef MOCK_NO_CAN_UNLOAD
DMM_PLUGIN_EXPORT void dmm_plugin_can_unload(dmm_plugin_status *st) {
    long mech = owned_mechanisms, allocs = owned_allocations, res = owned_reservations, h = owned_handles;
    if (mech || allocs || res || h || test_held)
        FAIL(st, DMM_ERR_BUSY,
             "mock still owns %ld mechanisms, %ld allocations, %ld reservations, %ld handles, %ld held objects",
             mech, allocs, res, h, (long)test_held);
    ok(st);
}
#endif
