/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/kv.c — the KV arena (contract: include/dmm/kv.h; design and costs: docs/kv.md).
 *
 * What it owns: an arena of its own (one VA reservation of max_requests request ranges and as many
 * prefix tails, handles of one granule each, a handle cache that is the growth reserve) charged to
 * the device's governor through a lease of role KV_CACHE under the device's holder; the open requests
 * and prefixes.
 *
 * Idea: a request is one arena allocation of range_bytes, reserved and never moved; growth commits
 * whole granules at its end (the arena maps a cached handle when it has one, else creates one). A
 * prefix is the arena's shared mapping (dmm/prefix.h) of the owner's whole granules, plus a tail: a
 * one-granule allocation of the prefix's own holding a copy of the granule where the prefix ends.
 * Opening a request with it maps the shared granules read-only at the range's start, commits one
 * private granule after them and copies the tail into it; the request then grows from there.
 *
 * The refill thread (config refill_thread) sleeps on kv.wake until growth took half of the reserve,
 * then calls dmm_kv_refill; destroy stops and joins it.
 *
 * Handles are one granule each (the arena's chunk limit): any granule boundary is a chunk boundary,
 * so any prefix length can be shared, and every handle fits every commit from the reserve.
 *
 * Invariants: kv.lock guards the lists and the counts; a request's backed bytes are a whole number of
 * granules from its start and ≤ range_bytes; its shared bytes are the whole granules of its prefix; a
 * prefix's users = the open requests opened with it; requests + prefixes ≤ max_requests each. Arena
 * calls run outside kv.lock (the arena has its own) except where a count must change with them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "device/types.h"
#include "driver/call.h"
#include "dmm/arena.h"
#include "dmm/kv.h"

#define RANGE_MAX ((uint64_t)1 << 46)

struct dmm_kv_prefix {
    dmm_prefix shared;        /* the owner's whole granules (shared.bytes = 0: none) */
    dmm_allocation tail;      /* one granule holding a copy of the granule where the prefix ends */
    bool has_tail;
    uint64_t tokens;
    uint32_t users;           /* open requests opened with it (kv.lock) */
    dmm_kv_prefix *next;
};

struct dmm_kv_request {
    dmm_allocation a;         /* the reserved range */
    uint64_t backed;          /* bytes backed from the start (whole granules) */
    uint64_t shared;          /* of them, a prefix's granules mapped read-only */
    uint64_t lent;            /* of its own, granules it made a prefix of (held for the prefix now) */
    dmm_kv_prefix *prefix;    /* the prefix it was opened with, or NULL */
    void *host;               /* offloaded: its own bytes [shared, backed) in host memory; else NULL */
    uint64_t host_bytes;
    dmm_kv_request *next;
};

struct dmm_kv {
    dmm_device *dev;
    dmm_driver *drv;
    dmm_governor *gov;
    dmm_lease_id lease;
    dmm_lease_id host_lease;  /* the host tier: offloaded requests' copies, charged by hand */
    dmm_accounting acct;
    dmm_mechanism *arena;
    uint64_t granule, token_bytes, max_tokens, range_bytes, reserve_bytes;
    uint32_t max_requests;

    pthread_mutex_t lock;
    dmm_kv_request *requests;
    dmm_kv_prefix *prefixes;
    uint32_t nrequests, nprefixes;
    uint64_t grows, refusals, shared_bytes, host_bytes;
    uint32_t noffloaded;

    bool has_thread, stop, wanted; /* the refill thread: started; asked to stop; asked to refill (kv.lock) */
    pthread_cond_t wake;
    pthread_t thread;
    uint64_t refills;              /* refills the thread made */
};

static uint64_t round_up(uint64_t x, uint64_t g) { return (x + g - 1) / g * g; }

static dmm_status null_arg(const char *op, const char *needs) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: needs %s (NULL given); nothing changed", op, needs);
}

/* ---- the refill thread ---- */
static void *refill_main(void *arg) {
    dmm_kv *kv = arg;
    pthread_mutex_lock(&kv->lock);
    for (;;) {
        while (!kv->stop && !kv->wanted) pthread_cond_wait(&kv->wake, &kv->lock);
        if (kv->stop) break;
        kv->wanted = false;
        pthread_mutex_unlock(&kv->lock);
        uint64_t created = 0;
        (void)dmm_kv_refill(kv, &created); /* a failure (budget): growth creates what it needs itself */
        dmm_clear_error();
        pthread_mutex_lock(&kv->lock);
        if (created > 0) kv->refills++;
    }
    pthread_mutex_unlock(&kv->lock);
    return NULL;
}

/* After growth: wakes the refill thread when the reserve fell to half or less. */
static void maybe_wake_refill(dmm_kv *kv) {
    if (!kv->has_thread) return;
    dmm_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (dmm_mechanism_stats(kv->arena, &st) != DMM_OK) {
        dmm_clear_error();
        return;
    }
    if ((uint64_t)st.cached_bytes.current * 2 > kv->reserve_bytes) return;
    pthread_mutex_lock(&kv->lock);
    kv->wanted = true;
    pthread_cond_signal(&kv->wake);
    pthread_mutex_unlock(&kv->lock);
}

/* ---- life ---- */
dmm_status dmm_kv_create(dmm_device *dev, const dmm_kv_config *cfg, dmm_kv **out) {
    if (dev == NULL || cfg == NULL || out == NULL) return null_arg("dmm_kv_create", "a device, a config and an output");
    *out = NULL;
    if (cfg->size < offsetof(dmm_kv_config, reserve_bytes) + sizeof(uint64_t))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_kv_create: the config's size is %u bytes; set .size = "
                             "sizeof(dmm_kv_config) (%zu); nothing was created", cfg->size, sizeof(dmm_kv_config));
    dmm_kv_config k;
    memset(&k, 0, sizeof k);
    memcpy(&k, cfg, cfg->size < sizeof k ? cfg->size : sizeof k);
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(dev->drv, &gran);
    if (s != DMM_OK || gran == 0)
        return dmm_error_set(s != DMM_OK ? s : DMM_ERR_UNSUPPORTED, "dmm_kv_create: device %d has no virtual "
                             "memory management (driver '%s'); a KV arena maps memory under fixed addresses",
                             (int)dev->dev.index, dev->drv->ops->name);
    uint32_t nreq = k.max_requests ? k.max_requests : 256;
    if (k.token_bytes == 0 || k.max_tokens == 0 || k.token_bytes > RANGE_MAX / k.max_tokens || nreq > 65536)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_kv_create: token_bytes %llu × max_tokens %llu refused: both must be non-zero and "
                             "their product (one request's range) at most 2^46 bytes, and max_requests (%u) at most "
                             "65536; nothing was created",
                             (unsigned long long)k.token_bytes, (unsigned long long)k.max_tokens, nreq);
    uint64_t range = round_up(k.token_bytes * k.max_tokens, gran);
    if (range > RANGE_MAX / (2 * (uint64_t)nreq))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_kv_create: %u requests of %llu bytes each need more than 2^46 bytes of address "
                             "space; lower max_requests or max_tokens; nothing was created",
                             nreq, (unsigned long long)range);
    dmm_kv *kv = calloc(1, sizeof *kv);
    if (kv == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_kv_create: no host memory for the arena");
    kv->dev = dev;
    kv->drv = dev->drv;
    kv->gov = dev->gov;
    kv->granule = gran;
    kv->token_bytes = k.token_bytes;
    kv->max_tokens = k.max_tokens;
    kv->range_bytes = range;
    kv->max_requests = nreq;
    kv->reserve_bytes = k.reserve_bytes ? round_up(k.reserve_bytes, gran) : 8 * gran;
    pthread_mutex_init(&kv->lock, NULL);
    pthread_cond_init(&kv->wake, NULL);
    s = dmm_lease_reserve(dev->holder, dev->dev, DMM_ROLE_KV_CACHE, 0, 0, &kv->lease);
    if (s == DMM_OK) s = dmm_governor_accounting(kv->gov, kv->lease, &kv->acct);
    dmm_device_id host = {DMM_TIER_HOST, 0};
    if (s == DMM_OK) s = dmm_lease_reserve(dev->holder, host, DMM_ROLE_KV_CACHE, 0, 0, &kv->host_lease);
    if (s == DMM_OK) {
        dmm_arena_config ac;
        memset(&ac, 0, sizeof ac);
        ac.size = sizeof ac;
        ac.reserve_bytes = (uint64_t)nreq * (range + gran); /* the requests' ranges and the prefixes' tails */
        ac.chunk_limit_bytes = gran;                         /* one handle per granule: see the opening */
        ac.cache_limit_bytes = kv->reserve_bytes;
        ac.min_align = gran;
        ac.accounting = &kv->acct;
        s = dmm_arena_create(kv->drv, &ac, &kv->arena);
    }
    if (s == DMM_OK && k.refill_thread) {
        kv->wanted = true; /* a first refill at once */
        if (pthread_create(&kv->thread, NULL, refill_main, kv) == 0) kv->has_thread = true;
        else s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_kv_create: the refill thread could not be started");
        if (s != DMM_OK) (void)dmm_mechanism_destroy(kv->arena);
    }
    if (s != DMM_OK) {
        dmm__error_wrap(s, "dmm_kv_create: the KV arena of device %d was not created", (int)dev->dev.index);
        if (kv->host_lease) (void)dmm_lease_release(kv->gov, kv->host_lease);
        if (kv->lease) (void)dmm_lease_release(kv->gov, kv->lease);
        pthread_cond_destroy(&kv->wake);
        pthread_mutex_destroy(&kv->lock);
        free(kv);
        return s;
    }
    *out = kv;
    return DMM_OK;
}

dmm_status dmm_kv_destroy(dmm_kv *kv) {
    if (kv == NULL) return DMM_OK;
    pthread_mutex_lock(&kv->lock);
    uint32_t nr = kv->nrequests, np = kv->nprefixes;
    pthread_mutex_unlock(&kv->lock);
    if (nr > 0 || np > 0)
        return dmm_error_set(DMM_ERR_BUSY, "dmm_kv_destroy: %u request(s) and %u prefix(es) are open; close and "
                             "release them first; nothing changed", nr, np);
    if (kv->has_thread) { /* no refill runs from here on */
        pthread_mutex_lock(&kv->lock);
        kv->stop = true;
        pthread_cond_signal(&kv->wake);
        pthread_mutex_unlock(&kv->lock);
        pthread_join(kv->thread, NULL);
        kv->has_thread = false;
    }
    dmm_status s = dmm_mechanism_destroy(kv->arena);
    if (s != DMM_OK) return dmm__error_wrap(s, "dmm_kv_destroy: the arena could not be destroyed; nothing changed");
    (void)dmm_lease_release(kv->gov, kv->host_lease);
    (void)dmm_lease_release(kv->gov, kv->lease);
    pthread_cond_destroy(&kv->wake);
    pthread_mutex_destroy(&kv->lock);
    free(kv);
    return DMM_OK;
}

/* ---- requests ---- */
static void refused(dmm_kv *kv, dmm_status s) {
    if (s != DMM_ERR_BUDGET && s != DMM_ERR_OUT_OF_MEMORY) return;
    pthread_mutex_lock(&kv->lock);
    kv->refusals++;
    pthread_mutex_unlock(&kv->lock);
}

/* Backs r up to `bytes` (whole granules, ≤ range_bytes): one commit of what is missing. */
static dmm_status back_to(dmm_kv *kv, dmm_kv_request *r, uint64_t bytes) {
    if (bytes <= r->backed) return DMM_OK;
    dmm_range range = {(size_t)r->backed, (size_t)(bytes - r->backed)};
    uint64_t mapped = 0;
    dmm_status s = dmm_mechanism_commit(kv->arena, &r->a, range, &mapped);
    if (s != DMM_OK) {
        refused(kv, s);
        return s;
    }
    r->backed = bytes;
    pthread_mutex_lock(&kv->lock);
    kv->grows++;
    pthread_mutex_unlock(&kv->lock);
    maybe_wake_refill(kv);
    return DMM_OK;
}

/* The bytes that back `tokens` tokens: whole granules. */
static uint64_t bytes_for(const dmm_kv *kv, uint64_t tokens) { return round_up(tokens * kv->token_bytes, kv->granule); }

static dmm_status check_tokens(const dmm_kv *kv, const char *op, uint64_t tokens) {
    if (tokens <= kv->max_tokens) return DMM_OK;
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %llu tokens refused: a request holds at most max_tokens = "
                         "%llu (its reserved range); nothing changed",
                         op, (unsigned long long)tokens, (unsigned long long)kv->max_tokens);
}

/* Maps prefix p into the fresh request r: its shared granules read-only, then a private granule with
 * the copy of its tail. */
static dmm_status attach(dmm_kv *kv, dmm_kv_request *r, const dmm_kv_prefix *p, dmm_stream stream) {
    if (p->shared.bytes > 0) {
        dmm_status s = dmm_prefix_commit(kv->arena, &p->shared, &r->a, 0);
        if (s != DMM_OK) return s;
        r->backed = r->shared = p->shared.bytes;
    }
    if (!p->has_tail) return DMM_OK;
    dmm_status s = back_to(kv, r, r->backed + kv->granule);
    if (s == DMM_OK)
        s = dmm__drv_copy(kv->drv, (uintptr_t)r->a.ptr + r->shared, (uintptr_t)p->tail.ptr,
                          (size_t)(p->tokens * kv->token_bytes - p->shared.bytes), stream);
    return s;
}

dmm_status dmm_kv_open(dmm_kv *kv, const dmm_kv_prefix *prefix, uint64_t tokens, dmm_stream stream,
                       dmm_kv_request **out) {
    const char *op = "dmm_kv_open";
    if (kv == NULL || out == NULL) return null_arg(op, "an arena and an output");
    *out = NULL;
    dmm_status s = check_tokens(kv, op, tokens);
    if (s != DMM_OK) return s;
    if (prefix != NULL && tokens < prefix->tokens)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %llu tokens refused: the request starts with a prefix "
                             "of %llu tokens, so it holds at least those; nothing changed",
                             op, (unsigned long long)tokens, (unsigned long long)prefix->tokens);
    dmm_kv_request *r = calloc(1, sizeof *r);
    if (r == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the request", op);
    pthread_mutex_lock(&kv->lock);
    bool room = kv->nrequests < kv->max_requests;
    if (room) kv->nrequests++; /* the slot is held while the request is made */
    pthread_mutex_unlock(&kv->lock);
    if (!room) {
        free(r);
        return dmm_error_set(DMM_ERR_BUSY, "%s: %u requests are open, the arena's max_requests; close one first; "
                             "nothing changed", op, kv->max_requests);
    }
    s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->range_bytes, (size_t)kv->granule, NULL, 0, &r->a);
    if (s == DMM_OK && prefix != NULL) s = attach(kv, r, prefix, stream);
    if (s == DMM_OK) s = back_to(kv, r, bytes_for(kv, tokens));
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_wrap(s, "%s: a request of %llu tokens%s was not opened", op, (unsigned long long)tokens,
                        prefix != NULL ? " with a prefix" : "");
        dmm__error_keep(&why, s);
        if (r->a.ptr != NULL) (void)dmm_mechanism_release(kv->arena, &r->a); /* undoes the mappings made */
        pthread_mutex_lock(&kv->lock);
        kv->nrequests--;
        pthread_mutex_unlock(&kv->lock);
        free(r);
        return dmm__error_restore(&why);
    }
    pthread_mutex_lock(&kv->lock);
    r->prefix = (dmm_kv_prefix *)(uintptr_t)prefix;
    if (prefix != NULL) r->prefix->users++;
    r->next = kv->requests;
    kv->requests = r;
    pthread_mutex_unlock(&kv->lock);
    *out = r;
    return DMM_OK;
}

/* Whether r is an open request of kv (kv.lock held). */
static bool request_open_locked(const dmm_kv *kv, const dmm_kv_request *r) {
    for (const dmm_kv_request *x = kv->requests; x != NULL; x = x->next)
        if (x == r) return true;
    return false;
}

static dmm_status unknown_request(const char *op, const dmm_kv_request *r) {
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "%s: %p is not an open request of this arena; nothing changed",
                         op, (const void *)r);
}

static dmm_status offloaded_refusal(const char *op, const dmm_kv_request *r) {
    return dmm_error_set(DMM_ERR_BUSY, "%s: request %p is offloaded (%llu bytes in host memory); restore it first; "
                         "nothing changed", op, (const void *)r, (unsigned long long)r->host_bytes);
}

/* Gives r's host copy back (its charge to the host tier too). */
static void host_copy_drop(dmm_kv *kv, dmm_kv_request *r) {
    if (r->host == NULL) return;
    (void)dmm__drv_host_free(kv->drv, r->host);
    (void)dmm_lease_shrink(kv->gov, kv->host_lease, r->host_bytes, 0);
    pthread_mutex_lock(&kv->lock);
    kv->host_bytes -= r->host_bytes;
    kv->noffloaded--;
    pthread_mutex_unlock(&kv->lock);
    r->host = NULL;
    r->host_bytes = 0;
}

dmm_status dmm_kv_grow(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens) {
    const char *op = "dmm_kv_grow";
    if (kv == NULL || r == NULL) return null_arg(op, "an arena and a request");
    dmm_status s = check_tokens(kv, op, tokens);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&kv->lock);
    bool open = request_open_locked(kv, r), away = open && r->host != NULL;
    pthread_mutex_unlock(&kv->lock);
    if (!open) return unknown_request(op, r);
    if (away) return offloaded_refusal(op, r);
    s = back_to(kv, r, bytes_for(kv, tokens));
    if (s != DMM_OK)
        return dmm__error_wrap(s, "%s: backing %llu tokens (%llu bytes) failed; the request keeps its %llu bytes", op,
                               (unsigned long long)tokens, (unsigned long long)bytes_for(kv, tokens),
                               (unsigned long long)r->backed);
    return DMM_OK;
}

dmm_release_outcome dmm_kv_close(dmm_kv *kv, dmm_kv_request *r) {
    dmm_release_outcome failed = {.state = DMM_RELEASE_FAILED, .failure = DMM_ERR_INVALID_ARGUMENT};
    if (kv == NULL || r == NULL) {
        (void)null_arg("dmm_kv_close", "an arena and a request");
        return failed;
    }
    pthread_mutex_lock(&kv->lock);
    bool open = request_open_locked(kv, r);
    pthread_mutex_unlock(&kv->lock);
    if (!open) {
        failed.failure = unknown_request("dmm_kv_close", r);
        return failed;
    }
    dmm_release_outcome o = dmm_mechanism_release(kv->arena, &r->a);
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) return o; /* still open, nothing changed */
    host_copy_drop(kv, r);
    pthread_mutex_lock(&kv->lock);
    for (dmm_kv_request **l = &kv->requests; *l != NULL; l = &(*l)->next)
        if (*l == r) {
            *l = r->next;
            break;
        }
    kv->nrequests--;
    if (r->prefix != NULL) r->prefix->users--;
    pthread_mutex_unlock(&kv->lock);
    free(r);
    return o;
}

dmm_status dmm_kv_request_get(dmm_kv *kv, const dmm_kv_request *r, dmm_kv_request_info *out) {
    if (kv == NULL || r == NULL || out == NULL) return null_arg("dmm_kv_request_get", "an arena, a request and an output");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_kv_request_get: set .size = sizeof(dmm_kv_request_info)");
    pthread_mutex_lock(&kv->lock);
    bool open = request_open_locked(kv, r);
    if (open) {
        out->base = r->a.ptr;
        out->backed_tokens = r->backed / kv->token_bytes < kv->max_tokens ? r->backed / kv->token_bytes : kv->max_tokens;
        out->prefix_tokens = r->prefix != NULL ? r->prefix->tokens : 0;
        out->private_bytes = r->backed - r->shared - r->lent;
        out->shared_bytes = r->shared;
        out->offloaded_bytes = r->host_bytes;
        if (r->host != NULL) out->private_bytes = 0;
    }
    pthread_mutex_unlock(&kv->lock);
    return open ? DMM_OK : unknown_request("dmm_kv_request_get", r);
}

/* ---- preemption ---- */
/* One copy on `stream`, waited for (an event of our own, recorded after it). */
static dmm_status copy_and_wait(dmm_kv *kv, uintptr_t dst, uintptr_t src, uint64_t bytes, dmm_stream stream) {
    dmm_event ev = NULL;
    dmm_status s = dmm__drv_copy(kv->drv, dst, src, (size_t)bytes, stream);
    if (s == DMM_OK) s = dmm__drv_event_create(kv->drv, &ev);
    if (s == DMM_OK) s = dmm__drv_event_record(kv->drv, ev, stream);
    if (s == DMM_OK) s = dmm__drv_event_synchronize(kv->drv, ev);
    if (ev != NULL) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        (void)dmm__drv_event_destroy(kv->drv, ev);
        s = dmm__error_restore(&why);
    }
    return s;
}

/* Whether r is open, resident and unshared (a request whose granules back a prefix keeps them). */
static dmm_status check_movable(dmm_kv *kv, const char *op, const dmm_kv_request *r, bool want_offloaded) {
    pthread_mutex_lock(&kv->lock);
    bool open = request_open_locked(kv, r), away = open && r->host != NULL;
    uint64_t lent = open ? r->lent : 0;
    pthread_mutex_unlock(&kv->lock);
    if (!open) return unknown_request(op, r);
    if (away != want_offloaded)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p is %s; nothing changed", op, (const void *)r,
                             away ? "offloaded already (restore it first)" : "resident (nothing to restore)");
    if (lent > 0)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p holds the memory of a prefix (%llu bytes), which other "
                             "requests map; release the prefix first; nothing changed",
                             op, (const void *)r, (unsigned long long)lent);
    return DMM_OK;
}

dmm_status dmm_kv_offload(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream) {
    const char *op = "dmm_kv_offload";
    if (kv == NULL || r == NULL) return null_arg(op, "an arena and a request");
    if (!dmm__drv_can_host_alloc(kv->drv))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s: driver '%s' has no host memory for copies (its host_alloc "
                             "slot); nothing changed", op, kv->drv->ops->name);
    dmm_status s = check_movable(kv, op, r, false);
    if (s != DMM_OK) return s;
    uint64_t bytes = r->backed - r->shared;
    if (bytes == 0) return DMM_OK; /* nothing of its own */
    s = dmm_lease_grow(kv->gov, kv->host_lease, bytes, 0);
    if (s != DMM_OK) {
        refused(kv, s);
        return dmm__error_wrap(s, "%s: no room on the host tier for the %llu bytes of request %p; it stays on the "
                               "device", op, (unsigned long long)bytes, (void *)r);
    }
    void *host = NULL;
    s = dmm__drv_host_alloc(kv->drv, (size_t)bytes, &host);
    if (s == DMM_OK) s = copy_and_wait(kv, (uintptr_t)host, (uintptr_t)r->a.ptr + r->shared, bytes, stream);
    dmm_release_outcome o = {.state = DMM_RELEASE_FAILED, .failure = s};
    if (s == DMM_OK) o = dmm_mechanism_decommit(kv->arena, &r->a, (dmm_range){(size_t)r->shared, (size_t)bytes});
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) { /* the request keeps its memory and contents */
        dmm_error_kept why = {0};
        dmm__error_wrap(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, "%s: request %p stays on the device",
                        op, (void *)r);
        dmm__error_keep(&why, dmm_last_status());
        if (host != NULL) (void)dmm__drv_host_free(kv->drv, host);
        (void)dmm_lease_shrink(kv->gov, kv->host_lease, bytes, 0);
        return dmm__error_restore(&why);
    }
    /* COMPLETE, or QUARANTINED (some granule could not be given back: it stays charged, never reused) */
    pthread_mutex_lock(&kv->lock);
    r->host = host;
    r->host_bytes = bytes;
    r->backed = r->shared;
    kv->host_bytes += bytes;
    kv->noffloaded++;
    pthread_mutex_unlock(&kv->lock);
    return dmm_release_state_of(&o) == DMM_RELEASE_COMPLETE
               ? DMM_OK
               : dmm_error_set(DMM_ERR_QUARANTINED, "%s: request %p is offloaded, but %llu bytes of its granules could "
                               "not be given back (quarantined, never reused)", op, (void *)r,
                               (unsigned long long)o.residual_owned_bytes);
}

dmm_status dmm_kv_restore(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream) {
    const char *op = "dmm_kv_restore";
    if (kv == NULL || r == NULL) return null_arg(op, "an arena and a request");
    dmm_status s = check_movable(kv, op, r, true);
    if (s != DMM_OK) return s;
    uint64_t bytes = r->host_bytes;
    s = back_to(kv, r, r->shared + bytes);
    if (s == DMM_OK) s = copy_and_wait(kv, (uintptr_t)r->a.ptr + r->shared, (uintptr_t)r->host, bytes, stream);
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_wrap(s, "%s: request %p stays offloaded (its host copy kept)", op, (void *)r);
        dmm__error_keep(&why, s);
        if (r->backed > r->shared) { /* what this call backed goes back */
            (void)dmm_mechanism_decommit(kv->arena, &r->a, (dmm_range){(size_t)r->shared, (size_t)(r->backed - r->shared)});
            r->backed = r->shared;
        }
        return dmm__error_restore(&why);
    }
    host_copy_drop(kv, r);
    return DMM_OK;
}

/* ---- prefixes ---- */
dmm_status dmm_kv_share(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens, dmm_stream stream, dmm_kv_prefix **out) {
    const char *op = "dmm_kv_share";
    if (kv == NULL || r == NULL || out == NULL) return null_arg(op, "an arena, a request and an output");
    *out = NULL;
    pthread_mutex_lock(&kv->lock);
    bool open = request_open_locked(kv, r), away = open && r->host != NULL;
    bool room = kv->nprefixes < kv->max_requests;
    if (open && !away && room) kv->nprefixes++;
    pthread_mutex_unlock(&kv->lock);
    if (!open) return unknown_request(op, r);
    if (away) return offloaded_refusal(op, r);
    if (!room)
        return dmm_error_set(DMM_ERR_BUSY, "%s: %u prefixes are open, the arena's max_requests; release one first; "
                             "nothing changed", op, kv->max_requests);
    uint64_t bytes = tokens * kv->token_bytes, whole = bytes / kv->granule * kv->granule;
    dmm_status s = DMM_OK;
    if (tokens == 0 || tokens > kv->max_tokens || round_up(bytes, kv->granule) > r->backed || whole < r->shared)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s: a prefix of %llu tokens refused: it must hold at least one token, be backed (the "
                          "request backs %llu bytes, the prefix needs %llu) and cover the request's own prefix; "
                          "nothing changed",
                          op, (unsigned long long)tokens, (unsigned long long)r->backed,
                          (unsigned long long)round_up(bytes, kv->granule));
    dmm_kv_prefix *p = s == DMM_OK ? calloc(1, sizeof *p) : NULL;
    if (s == DMM_OK && p == NULL) s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the prefix", op);
    if (s == DMM_OK && whole > 0 && r->shared > 0)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the request maps a prefix already; share from the request "
                          "that owns the memory (a prefix of a prefix is not made); nothing changed", op);
    if (s == DMM_OK && whole > 0) s = dmm_prefix_create(kv->arena, &r->a, (dmm_range){0, (size_t)whole}, &p->shared);
    if (s == DMM_OK && bytes > whole) {
        dmm_range all = {0, (size_t)kv->granule};
        s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->granule, (size_t)kv->granule, &all, 1, &p->tail);
        if (s == DMM_OK) {
            p->has_tail = true;
            s = dmm__drv_copy(kv->drv, (uintptr_t)p->tail.ptr, (uintptr_t)r->a.ptr + whole, (size_t)(bytes - whole),
                              stream);
        }
    }
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        if (p != NULL && p->has_tail) (void)dmm_mechanism_release(kv->arena, &p->tail);
        if (p != NULL && p->shared.bytes > 0) (void)dmm_prefix_release(kv->arena, &p->shared);
        free(p);
        pthread_mutex_lock(&kv->lock);
        kv->nprefixes--;
        pthread_mutex_unlock(&kv->lock);
        return dmm__error_restore(&why);
    }
    p->tokens = tokens;
    pthread_mutex_lock(&kv->lock);
    r->lent += whole;
    kv->shared_bytes += whole + (p->has_tail ? kv->granule : 0);
    p->next = kv->prefixes;
    kv->prefixes = p;
    pthread_mutex_unlock(&kv->lock);
    *out = p;
    return DMM_OK;
}

dmm_release_outcome dmm_kv_prefix_release(dmm_kv *kv, dmm_kv_prefix *p) {
    dmm_release_outcome failed = {.state = DMM_RELEASE_FAILED, .failure = DMM_ERR_INVALID_ARGUMENT};
    if (kv == NULL || p == NULL) {
        (void)null_arg("dmm_kv_prefix_release", "an arena and a prefix");
        return failed;
    }
    pthread_mutex_lock(&kv->lock);
    bool open = false;
    for (dmm_kv_prefix *x = kv->prefixes; x != NULL; x = x->next) open |= x == p;
    uint32_t users = open ? p->users : 0;
    pthread_mutex_unlock(&kv->lock);
    if (!open || users > 0) {
        failed.failure = open ? dmm_error_set(DMM_ERR_BUSY, "dmm_kv_prefix_release: %u open request(s) were opened "
                                              "with the prefix; close them first; nothing changed", users)
                              : dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_kv_prefix_release: %p is not an open "
                                              "prefix of this arena; nothing changed", (void *)p);
        return failed;
    }
    /* the tail first: a FAILED tail leaves the prefix whole, to be released again */
    dmm_release_outcome o = {.state = DMM_RELEASE_COMPLETE, .failure = DMM_OK};
    if (p->has_tail) {
        o = dmm_mechanism_release(kv->arena, &p->tail);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) return o;
        p->has_tail = false;
        pthread_mutex_lock(&kv->lock);
        kv->shared_bytes -= kv->granule;
        pthread_mutex_unlock(&kv->lock);
    }
    if (p->shared.bytes > 0) {
        dmm_release_outcome q = dmm_prefix_release(kv->arena, &p->shared);
        if (dmm_release_state_of(&q) == DMM_RELEASE_FAILED) return q; /* the prefix stays (its tail is gone) */
        if (dmm_release_state_of(&q) == DMM_RELEASE_QUARANTINED || dmm_release_state_of(&o) == DMM_RELEASE_QUARANTINED) {
            q.residual_owned_bytes += o.residual_owned_bytes;
            q.state = DMM_RELEASE_QUARANTINED;
            if (q.failure == DMM_OK) q.failure = o.failure;
        }
        q.allocation_bytes += o.allocation_bytes;
        o = q;
    }
    pthread_mutex_lock(&kv->lock);
    for (dmm_kv_prefix **l = &kv->prefixes; *l != NULL; l = &(*l)->next)
        if (*l == p) {
            *l = p->next;
            break;
        }
    kv->nprefixes--;
    kv->shared_bytes -= p->shared.bytes;
    pthread_mutex_unlock(&kv->lock);
    free(p);
    return o;
}

/* ---- the reserve ---- */
static dmm_status arena_stats(dmm_kv *kv, dmm_stats *st) {
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    return dmm_mechanism_stats(kv->arena, st);
}

dmm_status dmm_kv_refill(dmm_kv *kv, uint64_t *created) {
    if (created != NULL) *created = 0;
    if (kv == NULL) return null_arg("dmm_kv_refill", "an arena");
    dmm_stats st;
    dmm_status s = arena_stats(kv, &st);
    if (s != DMM_OK) return s;
    uint64_t have = (uint64_t)st.cached_bytes.current;
    if (have >= kv->reserve_bytes) return DMM_OK;
    /* handles made by a commit and given back at once land in the arena's cache: the reserve. The commit
     * takes the cached ones first, so it asks for the whole reserve: it creates only what is missing */
    uint64_t want = kv->reserve_bytes - have;
    dmm_range all = {0, (size_t)kv->reserve_bytes};
    dmm_allocation a;
    s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->reserve_bytes, (size_t)kv->granule, &all, 1, &a);
    if (s != DMM_OK) {
        refused(kv, s);
        return dmm__error_wrap(s, "dmm_kv_refill: creating %llu bytes of handles for the reserve failed (it holds "
                               "%llu)", (unsigned long long)want, (unsigned long long)have);
    }
    dmm_release_outcome o = dmm_mechanism_release(kv->arena, &a);
    if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE)
        return dmm_error_set(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, "dmm_kv_refill: handing the new "
                             "handles to the reserve did not complete (%s)", dmm_release_state_str(o.state));
    if (created != NULL) *created = want;
    return DMM_OK;
}

dmm_status dmm_kv_stats_get(dmm_kv *kv, dmm_kv_stats *out) {
    if (kv == NULL || out == NULL) return null_arg("dmm_kv_stats_get", "an arena and an output");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_kv_stats_get: set .size = sizeof(dmm_kv_stats)");
    dmm_stats st;
    dmm_status s = arena_stats(kv, &st);
    if (s != DMM_OK) return s;
    uint64_t owned = 0;
    s = dmm_lease_usage(kv->gov, kv->lease, &owned, NULL);
    if (s != DMM_OK) return s;
    dmm_kv_stats k;
    memset(&k, 0, sizeof k);
    k.size = sizeof k;
    k.granule = kv->granule;
    k.range_bytes = kv->range_bytes;
    k.reserve_bytes = (uint64_t)st.cached_bytes.current;
    k.owned_bytes = owned;
    k.driver_creates = st.driver_create;
    pthread_mutex_lock(&kv->lock);
    k.requests = kv->nrequests;
    k.prefixes = kv->nprefixes;
    k.shared_bytes = kv->shared_bytes;
    for (const dmm_kv_request *r = kv->requests; r != NULL; r = r->next) {
        if (r->host == NULL) k.private_bytes += r->backed - r->shared - r->lent;
        k.mapped_shared_bytes += r->shared;
    }
    k.grows = kv->grows;
    k.refusals = kv->refusals;
    k.offloaded = kv->noffloaded;
    k.refills = kv->refills;
    k.host_bytes = kv->host_bytes;
    pthread_mutex_unlock(&kv->lock);
    *out = k;
    return DMM_OK;
}
