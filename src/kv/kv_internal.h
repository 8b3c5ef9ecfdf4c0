/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/kv_internal.h — the KV arena's data and what its files share. The files stand on floors:
 * kv.c (life, requests, the reserve, stats) on prefixes.c (share, attach, release) and preempt.c
 * (offload, restore), all three on granules.c (backing, copies, what failed releases left); no file
 * calls one above it. Internal.
 *
 * Invariants, under kv.lock: the lists hold the open requests and prefixes (nrequests, nprefixes
 * count them, each at most max_requests); a request's backed bytes are whole granules from its start,
 * at most range_bytes; its shared bytes are the whole granules of the prefix it was opened with; its
 * lent bytes are its own whole granules that prefixes it made hold (Σ over its open prefixes); a
 * prefix's users are the open requests opened with it, and one that is `going` takes no more; what a
 * release could not give back (an undo that failed) is kept in `stuck` and retried at destroy.
 * With zero_tail, a request's range reads zeros from zero_from on (the arena's zero granule mapped
 * read-only at each granule of [zero_from, range_bytes)) and zero_from ≥ backed: [backed, zero_from) is
 * a hole (unmapped) that a failed call left, 0 bytes otherwise; without it zero_from = range_bytes.
 * Request fields change under kv.lock only; a request is driven by one thread at a time (kv.h), so its
 * driver reads them without the lock.
 */
#ifndef DMM_KV_INTERNAL_H
#define DMM_KV_INTERNAL_H

#include <pthread.h>

#include "core/core.h"
#include "device/types.h"
#include "driver/call.h"
#include "dmm/arena.h"
#include "dmm/kv.h"

#define KV_RANGE_MAX ((uint64_t)1 << 46)

struct dmm_kv_prefix {
    dmm_prefix shared;        /* the owner's whole granules (shared.bytes = 0: none) */
    dmm_allocation tail;      /* one granule holding a copy of the granule where the prefix ends */
    bool has_tail;
    uint64_t tokens;
    dmm_kv_request *owner;    /* the request whose granules it holds, while that request is open */
    uint32_t users;           /* open requests opened with it */
    bool going;               /* its release has begun: no new user */
    dmm_kv_prefix *next;
};

struct dmm_kv_request {
    dmm_allocation a;         /* the reserved range */
    uint64_t backed;          /* bytes backed from the start (whole granules) */
    uint64_t shared;          /* of them, a prefix's granules mapped read-only */
    uint64_t lent;            /* of its own, granules its prefixes hold */
    dmm_kv_prefix *prefix;    /* the prefix it was opened with, or NULL */
    void *host;               /* offloaded: its own bytes [shared, shared + host_bytes) in host memory */
    uint64_t host_bytes;
    uint64_t zero_from;       /* [zero_from, range_bytes) reads zeros (zero_tail); range_bytes without */
    bool zeroed;              /* the open mapped its zeros: growth fills a hole it finds from then on */
    dmm_kv_request *next;
};

/* Something a failed undo left behind: retried at destroy, counted in the stats (unreleased). */
typedef struct kv_stuck {
    enum { KV_STUCK_ALLOCATION, KV_STUCK_PREFIX, KV_STUCK_HOST } kind;
    dmm_allocation a;
    dmm_prefix p;
    void *host;
    uint64_t host_bytes;
} kv_stuck;

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
    bool zero_tail;           /* flag DMM_KV_ZERO_TAIL: unbacked granules map `zero` (kv.h, "Fixed-length reads") */
    bool has_zero_owner, has_zero; /* zero_owner (one granule of zeros) and the prefix `zero` of it exist */
    dmm_allocation zero_owner;
    dmm_prefix zero;

    pthread_mutex_t lock;
    dmm_kv_request *requests;
    dmm_kv_prefix *prefixes;
    uint32_t nrequests, nprefixes, noffloaded;
    uint64_t grows, refusals, shared_bytes, host_bytes;
    kv_stuck *stuck;
    size_t nstuck, stuck_cap;

    bool has_thread, stop, wanted; /* the refill thread: started; asked to stop; asked to refill */
    pthread_cond_t wake;
    pthread_t thread;
    uint64_t refills;              /* refills the thread made */
};

/* ---- granules.c ---- */
uint64_t dmm__kv_round_up(uint64_t x, uint64_t granule);
dmm_status dmm__kv_null(const char *op, const char *needs);
dmm_status dmm__kv_unknown_request(const char *op, const dmm_kv_request *r);
/* Counts a refusal for memory or budget (the stats' refusals). */
void dmm__kv_refused(dmm_kv *kv, dmm_status s);
/* Whether r is an open request of kv (kv.lock held). */
bool dmm__kv_request_open_locked(const dmm_kv *kv, const dmm_kv_request *r);
/* Backs r up to `bytes` (whole granules, ≤ range_bytes): one commit of what is missing, the zeros
 * mapped there unmapped first (and mapped back when the commit fails). */
dmm_status dmm__kv_back_to(dmm_kv *kv, dmm_kv_request *r, uint64_t bytes);
/* zero_tail: maps the zero granule over r's hole [backed, zero_from), from its top down (each granule
 * mapped moves zero_from down); an error when it cannot (the hole left is what stays). DMM_OK without
 * zero_tail. The open's fill sets r->zeroed. */
dmm_status dmm__kv_zero_fill(dmm_kv *kv, dmm_kv_request *r);
/* zero_tail: makes the arena's zero granule (create) and gives it back (destroy: false while the
 * driver refuses, kept for the next destroy). */
dmm_status dmm__kv_zero_make(dmm_kv *kv);
bool dmm__kv_zero_drop(dmm_kv *kv);
/* One copy on `stream`, waited for (an event of the arena's own, recorded after it). */
dmm_status dmm__kv_copy_and_wait(dmm_kv *kv, uintptr_t dst, uintptr_t src, uint64_t bytes, dmm_stream stream);
/* What a failed undo left: kept (kv.lock taken here), retried at destroy. */
void dmm__kv_keep_allocation(dmm_kv *kv, const dmm_allocation *a);
void dmm__kv_keep_prefix(dmm_kv *kv, const dmm_prefix *p);
void dmm__kv_keep_host(dmm_kv *kv, void *host, uint64_t bytes);

/* ---- prefixes.c ---- */
/* Takes a user of p for a request being opened (kv.lock held): false when p is no open prefix of kv or
 * its release has begun. */
bool dmm__kv_prefix_hold_locked(dmm_kv *kv, dmm_kv_prefix *p);
/* Maps held prefix p into the fresh request r: its shared granules read-only, then a private granule
 * with the copy of its tail. */
dmm_status dmm__kv_attach(dmm_kv *kv, dmm_kv_request *r, const dmm_kv_prefix *p, dmm_stream stream);
/* Request r closes (kv.lock held): its prefixes hold their granules without an owner from now on. */
void dmm__kv_owner_gone_locked(dmm_kv *kv, const dmm_kv_request *r);

/* ---- preempt.c ---- */
/* Gives r's host copy back and refunds it; a free the driver refused keeps the copy charged, in
 * `stuck`. */
void dmm__kv_host_drop(dmm_kv *kv, dmm_kv_request *r);

#endif /* DMM_KV_INTERNAL_H */
