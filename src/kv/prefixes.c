/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/prefixes.c — the KV arena's prefixes (contract: include/dmm/kv.h, dmm_kv_share and
 * dmm_kv_prefix_release; docs/kv.md, "Prefixes"): made, mapped into the requests opened with them, and
 * released.
 *
 * Idea: a prefix is the arena's shared mapping (dmm/prefix.h) of its owner's whole granules, plus a
 * tail: a one-granule allocation of the prefix's own holding a copy of the granule where the prefix
 * ends (copied at the share, and waited for, so that any stream may read it afterwards). Opening a
 * request with it maps the shared granules read-only at the range's start, commits one private
 * granule after them and copies the tail into it; the request then grows from there.
 *
 * Release: a prefix that a request still maps is refused (BUSY); otherwise it is marked going (no new
 * user), then its tail and its shared mapping are released. Each part that the driver refuses after
 * the other went is kept for destroy, and the release says QUARANTINED; FAILED only when nothing went.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_internal.h"

static dmm_kv_prefix *find_locked(const dmm_kv *kv, const dmm_kv_prefix *p) {
    for (dmm_kv_prefix *x = kv->prefixes; x != NULL; x = x->next)
        if (x == p) return x;
    return NULL;
}

bool dmm__kv_prefix_hold_locked(dmm_kv *kv, dmm_kv_prefix *p) {
    if (find_locked(kv, p) == NULL || p->going) return false;
    p->users++;
    return true;
}

void dmm__kv_owner_gone_locked(dmm_kv *kv, const dmm_kv_request *r) {
    for (dmm_kv_prefix *x = kv->prefixes; x != NULL; x = x->next)
        if (x->owner == r) x->owner = NULL;
}

dmm_status dmm__kv_attach(dmm_kv *kv, dmm_kv_request *r, const dmm_kv_prefix *p, dmm_stream stream) {
    if (p->shared.bytes > 0) {
        dmm_status s = dmm_prefix_commit(kv->arena, &p->shared, &r->a, 0);
        if (s != DMM_OK) return s;
        pthread_mutex_lock(&kv->lock);
        r->backed = r->shared = p->shared.bytes;
        pthread_mutex_unlock(&kv->lock);
    }
    if (!p->has_tail) return DMM_OK;
    dmm_status s = dmm__kv_back_to(kv, r, r->backed + kv->granule);
    if (s == DMM_OK) /* the tail is complete (the share waited for its copy): any stream reads it */
        s = dmm__drv_copy(kv->drv, (uintptr_t)r->a.ptr + r->shared, (uintptr_t)p->tail.ptr,
                          (size_t)(p->tokens * kv->token_bytes - p->shared.bytes), stream);
    return s;
}

/* Takes back a prefix that was not made: its tail and its shared mapping (each kept for destroy when
 * the driver refuses), then the slot. */
static void share_undo(dmm_kv *kv, dmm_kv_prefix *p) {
    if (p->has_tail) {
        dmm_release_outcome o = dmm_mechanism_release(kv->arena, &p->tail);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) dmm__kv_keep_allocation(kv, &p->tail);
    }
    if (p->shared.bytes > 0) {
        dmm_release_outcome o = dmm_prefix_release(kv->arena, &p->shared);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) dmm__kv_keep_prefix(kv, &p->shared);
    }
    free(p);
    pthread_mutex_lock(&kv->lock);
    kv->nprefixes--;
    pthread_mutex_unlock(&kv->lock);
}

dmm_status dmm_kv_share(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens, dmm_stream stream, dmm_kv_prefix **out) {
    const char *op = "dmm_kv_share";
    if (kv == NULL || r == NULL || out == NULL) return dmm__kv_null(op, "an arena, a request and an output");
    *out = NULL;
    pthread_mutex_lock(&kv->lock);
    bool open = dmm__kv_request_open_locked(kv, r), away = open && r->host != NULL;
    bool room = kv->nprefixes < kv->max_requests;
    if (open && !away && room) kv->nprefixes++; /* the slot is held while the prefix is made */
    pthread_mutex_unlock(&kv->lock);
    if (!open) return dmm__kv_unknown_request(op, r);
    if (away)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p is offloaded; restore it first; nothing changed", op,
                             (void *)r);
    if (!room)
        return dmm_error_set(DMM_ERR_BUSY, "%s: %u prefixes are open, the arena's max_requests; release one first; "
                             "nothing changed", op, kv->max_requests);
    uint64_t bytes = tokens * kv->token_bytes, whole = bytes / kv->granule * kv->granule;
    dmm_status s = DMM_OK;
    if (tokens == 0 || tokens > kv->max_tokens || dmm__kv_round_up(bytes, kv->granule) > r->backed)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s: a prefix of %llu tokens refused: it must hold at least one token and be backed (the "
                          "request backs %llu bytes, the prefix needs %llu); nothing changed",
                          op, (unsigned long long)tokens, (unsigned long long)r->backed,
                          (unsigned long long)dmm__kv_round_up(bytes, kv->granule));
    else if (r->shared > 0)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the request maps a prefix already; share from the request "
                          "that owns the memory (a prefix of a prefix is not made); nothing changed", op);
    dmm_kv_prefix *p = s == DMM_OK ? calloc(1, sizeof *p) : NULL;
    if (s == DMM_OK && p == NULL) s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the prefix", op);
    if (s == DMM_OK && whole > 0) s = dmm_prefix_create(kv->arena, &r->a, (dmm_range){0, (size_t)whole}, &p->shared);
    if (s == DMM_OK && bytes > whole) {
        dmm_range all = {0, (size_t)kv->granule};
        s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->granule, (size_t)kv->granule, &all, 1, &p->tail);
        if (s == DMM_OK) {
            p->has_tail = true;
            s = dmm__kv_copy_and_wait(kv, (uintptr_t)p->tail.ptr, (uintptr_t)r->a.ptr + whole, bytes - whole, stream);
        }
    }
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        if (p != NULL) share_undo(kv, p);
        else {
            pthread_mutex_lock(&kv->lock);
            kv->nprefixes--;
            pthread_mutex_unlock(&kv->lock);
        }
        return dmm__error_restore(&why);
    }
    p->tokens = tokens;
    p->owner = whole > 0 ? r : NULL;
    pthread_mutex_lock(&kv->lock);
    r->lent += whole;
    kv->shared_bytes += whole + (p->has_tail ? kv->granule : 0);
    p->next = kv->prefixes;
    kv->prefixes = p;
    pthread_mutex_unlock(&kv->lock);
    *out = p;
    return DMM_OK;
}

/* Takes p off the list, gives its owner its granules back in the counts (kv.lock held). */
static void unlist_locked(dmm_kv *kv, dmm_kv_prefix *p) {
    for (dmm_kv_prefix **l = &kv->prefixes; *l != NULL; l = &(*l)->next)
        if (*l == p) {
            *l = p->next;
            break;
        }
    kv->nprefixes--;
    kv->shared_bytes -= p->shared.bytes + (p->has_tail ? kv->granule : 0);
    if (p->owner != NULL) p->owner->lent -= p->shared.bytes;
}

dmm_release_outcome dmm_kv_prefix_release(dmm_kv *kv, dmm_kv_prefix *p) {
    dmm_release_outcome failed = {.state = DMM_RELEASE_FAILED, .failure = DMM_ERR_INVALID_ARGUMENT};
    if (kv == NULL || p == NULL) {
        (void)dmm__kv_null("dmm_kv_prefix_release", "an arena and a prefix");
        return failed;
    }
    pthread_mutex_lock(&kv->lock);
    bool open = find_locked(kv, p) != NULL && !p->going;
    uint32_t users = open ? p->users : 0;
    if (open && users == 0) p->going = true; /* no new user from here on */
    pthread_mutex_unlock(&kv->lock);
    if (!open || users > 0) {
        failed.failure = open ? dmm_error_set(DMM_ERR_BUSY, "dmm_kv_prefix_release: %u open request(s) were opened "
                                              "with the prefix; close them first; nothing changed", users)
                              : dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_kv_prefix_release: %p is not an open "
                                              "prefix of this arena (or its release runs); nothing changed", (void *)p);
        return failed;
    }
    dmm_release_outcome o = {.state = DMM_RELEASE_COMPLETE, .failure = DMM_OK};
    bool went = false; /* a part went: the prefix cannot stay as it was */
    if (p->has_tail) {
        o = dmm_mechanism_release(kv->arena, &p->tail);
        went = dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
    }
    if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED && p->shared.bytes > 0) {
        dmm_release_outcome q = dmm_prefix_release(kv->arena, &p->shared);
        if (dmm_release_state_of(&q) == DMM_RELEASE_FAILED && went) { /* the tail went: keep the mapping for destroy */
            dmm__kv_keep_prefix(kv, &p->shared);
            q.state = DMM_RELEASE_QUARANTINED;
            q.residual_owned_bytes += p->shared.bytes;
        } else if (dmm_release_state_of(&q) != DMM_RELEASE_FAILED && dmm_release_state_of(&o) == DMM_RELEASE_QUARANTINED) {
            q.state = DMM_RELEASE_QUARANTINED;
            q.residual_owned_bytes += o.residual_owned_bytes;
            if (q.failure == DMM_OK) q.failure = o.failure;
        }
        q.allocation_bytes += o.allocation_bytes;
        went |= dmm_release_state_of(&q) != DMM_RELEASE_FAILED;
        o = q;
    }
    pthread_mutex_lock(&kv->lock);
    if (went || dmm_release_state_of(&o) != DMM_RELEASE_FAILED) unlist_locked(kv, p);
    else p->going = false; /* nothing went: the prefix is as it was */
    pthread_mutex_unlock(&kv->lock);
    if (went || dmm_release_state_of(&o) != DMM_RELEASE_FAILED) free(p);
    return o;
}
