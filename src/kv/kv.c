/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/kv.c — the KV arena (contract: include/dmm/kv.h; design and costs: docs/kv.md): its life,
 * its requests, the reserve and its refill thread, the stats. The top of the folder: prefixes are
 * prefixes.c's, preemption preempt.c's, what every operation does to granules granules.c's (the
 * bottom); the data and the invariants kv_internal.h's.
 *
 * What it owns: an arena of its own (one VA reservation of max_requests request ranges, as many prefix
 * tails and room for a refill; handles of one granule each; a handle cache that is the growth
 * reserve) charged to the device's governor through a lease of role KV_CACHE under the device's
 * holder; the open requests.
 *
 * Idea: a request is one arena allocation of range_bytes, reserved and never moved; growth commits
 * whole granules at its end (the arena maps a cached handle when it has one, else creates one).
 * Handles are one granule each (the arena's chunk limit): any granule boundary is a chunk boundary,
 * so any prefix length can be shared, and every handle fits every commit from the reserve.
 *
 * The refill thread (config refill_thread) sleeps on kv.wake until growth took half of the reserve,
 * then calls dmm_kv_refill; destroy stops and joins it (and starts it again when it refuses).
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_internal.h"

/* Retries every kept release (no other call runs: destroy); true when none is left. */
static bool release_stuck(dmm_kv *kv) {
    size_t kept = 0;
    for (size_t i = 0; i < kv->nstuck; i++) {
        kv_stuck *k = &kv->stuck[i];
        bool gone;
        if (k->kind == KV_STUCK_ALLOCATION) {
            dmm_release_outcome o = dmm_mechanism_release(kv->arena, &k->a);
            gone = dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
        } else if (k->kind == KV_STUCK_PREFIX) {
            dmm_release_outcome o = dmm_prefix_release(kv->arena, &k->p);
            gone = dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
        } else {
            gone = dmm__drv_host_free(kv->drv, k->host) == DMM_OK;
            if (gone) {
                (void)dmm_lease_shrink(kv->gov, kv->host_lease, k->host_bytes, 0);
                kv->host_bytes -= k->host_bytes;
            }
        }
        if (!gone) kv->stuck[kept++] = *k;
    }
    kv->nstuck = kept;
    return kept == 0;
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

static bool refill_start(dmm_kv *kv) {
    kv->stop = false;
    kv->wanted = true; /* a first refill at once */
    kv->has_thread = pthread_create(&kv->thread, NULL, refill_main, kv) == 0;
    return kv->has_thread;
}

static void refill_stop(dmm_kv *kv) {
    if (!kv->has_thread) return;
    pthread_mutex_lock(&kv->lock);
    kv->stop = true;
    pthread_cond_signal(&kv->wake);
    pthread_mutex_unlock(&kv->lock);
    pthread_join(kv->thread, NULL);
    kv->has_thread = false;
}

/* ---- life ---- */
dmm_status dmm_kv_create(dmm_device *dev, const dmm_kv_config *cfg, dmm_kv **out) {
    if (dev == NULL || cfg == NULL || out == NULL) return dmm__kv_null("dmm_kv_create", "a device, a config and an output");
    *out = NULL;
    if (cfg->size < offsetof(dmm_kv_config, reserve_bytes) + sizeof(uint64_t))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_kv_create: the config's size is %u bytes; set .size = "
                             "sizeof(dmm_kv_config) (%zu); nothing was created", cfg->size, sizeof(dmm_kv_config));
    dmm_kv_config k;
    memset(&k, 0, sizeof k);
    memcpy(&k, cfg, cfg->size < sizeof k ? cfg->size : sizeof k);
    if (cfg->size < offsetof(dmm_kv_config, flags) + sizeof k.flags) k.flags = 0; /* (older callers: none) */
    if (k.flags & ~DMM_KV_ZERO_TAIL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_kv_create: flags %#llx refused: the only flag is "
                             "DMM_KV_ZERO_TAIL (%#llx); nothing was created",
                             (unsigned long long)k.flags, (unsigned long long)DMM_KV_ZERO_TAIL);
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(dev->drv, &gran);
    if (s != DMM_OK || gran == 0)
        return dmm_error_set(s != DMM_OK ? s : DMM_ERR_UNSUPPORTED, "dmm_kv_create: device %d has no virtual "
                             "memory management (driver '%s'); a KV arena maps memory under fixed addresses",
                             (int)dev->dev.index, dev->drv->ops->name);
    uint32_t nreq = k.max_requests ? k.max_requests : 256;
    if (k.token_bytes == 0 || k.max_tokens == 0 || k.token_bytes > KV_RANGE_MAX / k.max_tokens || nreq > 65536 ||
        k.reserve_bytes > KV_RANGE_MAX)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_kv_create: token_bytes %llu × max_tokens %llu, max_requests %u, reserve_bytes %llu "
                             "refused: token_bytes and max_tokens must be non-zero and their product (one request's "
                             "range) at most 2^46 bytes, max_requests at most 65536 and reserve_bytes at most 2^46; "
                             "nothing was created",
                             (unsigned long long)k.token_bytes, (unsigned long long)k.max_tokens, nreq,
                             (unsigned long long)k.reserve_bytes);
    uint64_t range = dmm__kv_round_up(k.token_bytes * k.max_tokens, gran);
    uint64_t reserve = k.reserve_bytes ? dmm__kv_round_up(k.reserve_bytes, gran) : 8 * gran;
    if (range > KV_RANGE_MAX / (2 * (uint64_t)nreq))
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
    kv->reserve_bytes = reserve;
    kv->zero_tail = (k.flags & DMM_KV_ZERO_TAIL) != 0;
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
        ac.reserve_bytes = (uint64_t)nreq * (range + gran) + reserve + gran; /* requests, prefix tails, a refill,
                                                                                the zeros */
        ac.chunk_limit_bytes = gran;                                   /* one handle per granule */
        ac.cache_limit_bytes = reserve;
        ac.min_align = gran;
        ac.accounting = &kv->acct;
        s = dmm_arena_create(kv->drv, &ac, &kv->arena);
    }
    bool made = s == DMM_OK;
    if (s == DMM_OK && kv->zero_tail) s = dmm__kv_zero_make(kv);
    if (s == DMM_OK && k.refill_thread && !refill_start(kv))
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_kv_create: the refill thread could not be started");
    if (s != DMM_OK && made) { /* nothing else holds the arena yet */
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        bool gone = dmm__kv_zero_drop(kv) && release_stuck(kv) && dmm_mechanism_destroy(kv->arena) == DMM_OK;
        s = dmm__error_restore(&why);
        if (!gone) /* the driver holds some of it still: the arena, its charges and this record stay (leaked) */
            return dmm__error_wrap(s, "dmm_kv_create: the KV arena of device %d was not created, and the driver "
                                   "refused to give back what it had made (its memory stays charged to the "
                                   "device's governor)", (int)dev->dev.index);
    }
    if (s != DMM_OK) {
        dmm__error_wrap(s, "dmm_kv_create: the KV arena of device %d was not created", (int)dev->dev.index);
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        if (kv->host_lease) (void)dmm_lease_release(kv->gov, kv->host_lease);
        if (kv->lease) (void)dmm_lease_release(kv->gov, kv->lease);
        s = dmm__error_restore(&why);
        pthread_cond_destroy(&kv->wake);
        pthread_mutex_destroy(&kv->lock);
        free(kv->stuck);
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
    bool had_thread = kv->has_thread;
    refill_stop(kv); /* no refill runs from here on */
    dmm_status s = release_stuck(kv) ? DMM_OK
                                     : dmm_error_set(DMM_ERR_BUSY, "dmm_kv_destroy: %zu release(s) that failed before "
                                                     "fail again (the driver still holds their memory); retry later",
                                                     kv->nstuck);
    if (s == DMM_OK && !dmm__kv_zero_drop(kv))
        s = dmm_error_set(DMM_ERR_BUSY, "dmm_kv_destroy: the driver refused to give the granule of zeros "
                          "(DMM_KV_ZERO_TAIL) back; the arena stays usable; retry later");
    if (s == DMM_OK) s = dmm_mechanism_destroy(kv->arena);
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        if (had_thread) (void)refill_start(kv); /* the arena stays as it was */
        bool zeros = !kv->zero_tail || kv->has_zero || dmm__kv_zero_make(kv) == DMM_OK;
        s = dmm__error_restore(&why);
        return dmm__error_wrap(s, zeros ? "dmm_kv_destroy: the arena could not be destroyed; it stays usable"
                                        : "dmm_kv_destroy: the arena could not be destroyed; it stays usable, but its "
                                          "granule of zeros could not be made again (its opens fail)");
    }
    (void)dmm_lease_release(kv->gov, kv->host_lease);
    (void)dmm_lease_release(kv->gov, kv->lease);
    free(kv->stuck);
    pthread_cond_destroy(&kv->wake);
    pthread_mutex_destroy(&kv->lock);
    free(kv);
    return DMM_OK;
}

/* ---- requests ---- */
/* The bytes that back `tokens` tokens: whole granules. */
static uint64_t bytes_for(const dmm_kv *kv, uint64_t tokens) {
    return dmm__kv_round_up(tokens * kv->token_bytes, kv->granule);
}

static dmm_status check_tokens(const dmm_kv *kv, const char *op, uint64_t tokens) {
    if (tokens <= kv->max_tokens) return DMM_OK;
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %llu tokens refused: a request holds at most max_tokens = "
                         "%llu (its reserved range); nothing changed",
                         op, (unsigned long long)tokens, (unsigned long long)kv->max_tokens);
}

/* Takes back a request that failed to open: its slot, its hold on the prefix, its range (whose mappings
 * the release undoes; kept for destroy when the driver refuses). */
static void open_undo(dmm_kv *kv, dmm_kv_request *r, dmm_kv_prefix *held) {
    if (r->a.ptr != NULL) {
        dmm_release_outcome o = dmm_mechanism_release(kv->arena, &r->a);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) dmm__kv_keep_allocation(kv, &r->a);
    }
    pthread_mutex_lock(&kv->lock);
    kv->nrequests--;
    if (held != NULL) held->users--;
    pthread_mutex_unlock(&kv->lock);
    free(r);
}

dmm_status dmm_kv_open(dmm_kv *kv, const dmm_kv_prefix *prefix, uint64_t tokens, dmm_stream stream,
                       dmm_kv_request **out) {
    const char *op = "dmm_kv_open";
    if (kv == NULL || out == NULL) return dmm__kv_null(op, "an arena and an output");
    *out = NULL;
    dmm_status s = check_tokens(kv, op, tokens);
    if (s != DMM_OK) return s;
    dmm_kv_request *r = calloc(1, sizeof *r);
    if (r == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the request", op);
    /* the slot and the prefix are held (under the lock) while the request is made */
    dmm_kv_prefix *p = (dmm_kv_prefix *)(uintptr_t)prefix;
    dmm_status refusal = DMM_OK;
    uint64_t prefix_tokens = 0;
    pthread_mutex_lock(&kv->lock);
    if (p != NULL && !dmm__kv_prefix_hold_locked(kv, p)) {
        refusal = DMM_ERR_UNKNOWN_ALLOCATION;
    } else if (kv->nrequests >= kv->max_requests || (p != NULL && tokens < p->tokens)) {
        refusal = kv->nrequests >= kv->max_requests ? DMM_ERR_BUSY : DMM_ERR_INVALID_ARGUMENT;
        if (p != NULL) {
            prefix_tokens = p->tokens;
            p->users--;
        }
    } else {
        kv->nrequests++;
    }
    pthread_mutex_unlock(&kv->lock);
    if (refusal != DMM_OK) {
        free(r);
        if (refusal == DMM_ERR_UNKNOWN_ALLOCATION)
            return dmm_error_set(refusal, "%s: %p is not an open prefix of this arena (released, being released, or "
                                 "another arena's); nothing changed", op, (const void *)prefix);
        if (refusal == DMM_ERR_BUSY)
            return dmm_error_set(refusal, "%s: %u requests are open, the arena's max_requests; close one first; "
                                 "nothing changed", op, kv->max_requests);
        return dmm_error_set(refusal, "%s: %llu tokens refused: the request starts with a prefix of %llu tokens, so "
                             "it holds at least those; nothing changed",
                             op, (unsigned long long)tokens, (unsigned long long)prefix_tokens);
    }
    r->prefix = p;
    r->zero_from = kv->range_bytes;
    s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->range_bytes, (size_t)kv->granule, NULL, 0, &r->a);
    if (s == DMM_OK && p != NULL) s = dmm__kv_attach(kv, r, p, stream);
    if (s == DMM_OK) s = dmm__kv_back_to(kv, r, bytes_for(kv, tokens));
    if (s == DMM_OK) s = dmm__kv_zero_fill(kv, r);
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_wrap(s, "%s: a request of %llu tokens%s was not opened", op, (unsigned long long)tokens,
                        p != NULL ? " with a prefix" : "");
        dmm__error_keep(&why, s);
        open_undo(kv, r, p);
        return dmm__error_restore(&why);
    }
    pthread_mutex_lock(&kv->lock);
    r->next = kv->requests;
    kv->requests = r;
    pthread_mutex_unlock(&kv->lock);
    *out = r;
    return DMM_OK;
}

dmm_status dmm_kv_grow(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens) {
    const char *op = "dmm_kv_grow";
    if (kv == NULL || r == NULL) return dmm__kv_null(op, "an arena and a request");
    dmm_status s = check_tokens(kv, op, tokens);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&kv->lock);
    bool open = dmm__kv_request_open_locked(kv, r), away = open && r->host != NULL;
    pthread_mutex_unlock(&kv->lock);
    if (!open) return dmm__kv_unknown_request(op, r);
    if (away)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p is offloaded; restore it first; nothing changed", op,
                             (void *)r);
    s = dmm__kv_back_to(kv, r, bytes_for(kv, tokens));
    if (s != DMM_OK)
        return dmm__error_wrap(s, "%s: backing %llu tokens (%llu bytes) failed; the request keeps its %llu bytes", op,
                               (unsigned long long)tokens, (unsigned long long)bytes_for(kv, tokens),
                               (unsigned long long)r->backed);
    return DMM_OK;
}

dmm_release_outcome dmm_kv_close(dmm_kv *kv, dmm_kv_request *r) {
    dmm_release_outcome failed = {.state = DMM_RELEASE_FAILED, .failure = DMM_ERR_INVALID_ARGUMENT};
    if (kv == NULL || r == NULL) {
        (void)dmm__kv_null("dmm_kv_close", "an arena and a request");
        return failed;
    }
    pthread_mutex_lock(&kv->lock);
    bool open = dmm__kv_request_open_locked(kv, r);
    pthread_mutex_unlock(&kv->lock);
    if (!open) {
        failed.failure = dmm__kv_unknown_request("dmm_kv_close", r);
        return failed;
    }
    dmm_release_outcome o = dmm_mechanism_release(kv->arena, &r->a);
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) return o; /* still open, nothing changed */
    dmm__kv_host_drop(kv, r);
    pthread_mutex_lock(&kv->lock);
    for (dmm_kv_request **l = &kv->requests; *l != NULL; l = &(*l)->next)
        if (*l == r) {
            *l = r->next;
            break;
        }
    kv->nrequests--;
    if (r->prefix != NULL) r->prefix->users--;
    dmm__kv_owner_gone_locked(kv, r);
    pthread_mutex_unlock(&kv->lock);
    free(r);
    return o;
}

dmm_status dmm_kv_request_get(dmm_kv *kv, const dmm_kv_request *r, dmm_kv_request_info *out) {
    if (kv == NULL || r == NULL || out == NULL) return dmm__kv_null("dmm_kv_request_get", "an arena, a request and an output");
    if (out->size < offsetof(dmm_kv_request_info, unreadable_bytes)) /* (unreadable_bytes came later) */
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_kv_request_get: set .size = sizeof(dmm_kv_request_info)");
    pthread_mutex_lock(&kv->lock);
    bool open = dmm__kv_request_open_locked(kv, r);
    if (open) {
        uint64_t tokens = r->host != NULL ? (r->shared + r->host_bytes) / kv->token_bytes : r->backed / kv->token_bytes;
        out->base = r->a.ptr;
        out->backed_tokens = tokens < kv->max_tokens ? tokens : kv->max_tokens;
        out->prefix_tokens = r->prefix != NULL ? r->prefix->tokens : 0;
        out->private_bytes = r->host != NULL ? 0 : r->backed - r->shared - r->lent;
        out->shared_bytes = r->shared;
        out->offloaded_bytes = r->host_bytes;
        if (out->size >= sizeof *out) out->unreadable_bytes = r->zero_from - r->backed;
    }
    pthread_mutex_unlock(&kv->lock);
    return open ? DMM_OK : dmm__kv_unknown_request("dmm_kv_request_get", r);
}

/* ---- the reserve ---- */
static dmm_status arena_stats(dmm_kv *kv, dmm_stats *st) {
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    return dmm_mechanism_stats(kv->arena, st);
}

dmm_status dmm_kv_refill(dmm_kv *kv, uint64_t *created) {
    if (created != NULL) *created = 0;
    if (kv == NULL) return dmm__kv_null("dmm_kv_refill", "an arena");
    dmm_stats st;
    dmm_status s = arena_stats(kv, &st);
    if (s != DMM_OK) return s;
    uint64_t have = (uint64_t)st.cached_bytes.current;
    if (have >= kv->reserve_bytes) return DMM_OK;
    /* handles a commit made and gave back at once land in the arena's cache: the reserve. The commit
     * takes the cached ones first, so it asks for the whole reserve and creates only what is missing
     * (while it runs, growth finds the cache empty and creates its own: the window is one commit) */
    dmm_range all = {0, (size_t)kv->reserve_bytes};
    dmm_allocation a;
    s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->reserve_bytes, (size_t)kv->granule, &all, 1, &a);
    if (s != DMM_OK) {
        dmm__kv_refused(kv, s);
        return dmm__error_wrap(s, "dmm_kv_refill: creating the %llu bytes of handles the reserve lacks failed (it "
                               "holds %llu)", (unsigned long long)(kv->reserve_bytes - have), (unsigned long long)have);
    }
    dmm_release_outcome o = dmm_mechanism_release(kv->arena, &a);
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) dmm__kv_keep_allocation(kv, &a);
    if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE)
        return dmm_error_set(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, "dmm_kv_refill: handing the new "
                             "handles to the reserve did not complete (%s)", dmm_release_state_str(o.state));
    if (created != NULL) *created = kv->reserve_bytes - have; /* (about: other threads move the cache too) */
    return DMM_OK;
}

dmm_status dmm_kv_stats_get(dmm_kv *kv, dmm_kv_stats *out) {
    if (kv == NULL || out == NULL) return dmm__kv_null("dmm_kv_stats_get", "an arena and an output");
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
    k.host_bytes = kv->host_bytes;
    k.refills = kv->refills;
    k.unreleased = kv->nstuck;
    pthread_mutex_unlock(&kv->lock);
    *out = k;
    return DMM_OK;
}
