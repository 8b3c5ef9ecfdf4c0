/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/kv.h — the KV arena: a contiguous, growable KV cache per request, with prefixes held once
 * physically and mapped into every request that starts with them (docs/kv.md).
 *
 * A serving engine pages its KV cache because a contiguous cache per request must be sized for the
 * longest request up front. Here each request gets its maximum length as address space only, and
 * physical memory granule by granule as its tokens arrive: its cache is one dense range
 * [base, base + tokens × token_bytes), so attention needs no block table, and its address never moves
 * (a captured CUDA graph stays valid across growth).
 *
 * Layout: token-major. Token t of a request lies at base + t × token_bytes, every layer's K and V of
 * that token together (the caller lays them out inside token_bytes). One granule then covers
 * granule / token_bytes tokens of every layer, so a request grows by one commit per that many tokens,
 * and a prefix of the first P tokens is one contiguous range.
 *
 * Prefixes: dmm_kv_share makes the first P tokens of a request a prefix. Its whole granules are held
 * once (the request's own chunks, dmm/prefix.h) and mapped read-only into each request opened with
 * it; the granule where the prefix ends, shared by its last tokens and the next request's first
 * private ones, is copied (copy-on-write at the first divergent granule): the prefix keeps a copy of
 * it, taken at dmm_kv_share, and every request opened with the prefix gets a private granule filled
 * from that copy. A request writes only at or after its prefix's length; a write into the shared
 * granules faults (they are mapped read-only).
 *
 * Memory: every commit is charged to the device's governor (role DMM_ROLE_KV_CACHE): a request that
 * does not fit is refused with DMM_ERR_BUDGET and a sentence, nothing changed, so the governor, not a
 * profiling guess, decides how many requests fit. Granules a request gives back (close) go to a
 * reserve of physical handles kept for growth (at most reserve_bytes, charged as owned memory);
 * dmm_kv_refill tops it up ahead of need, off the decode thread, so that growth during decode maps a
 * handle it already has instead of creating one.
 *
 * Fixed-length reads (flag DMM_KV_ZERO_TAIL): a kernel captured once in a CUDA graph reads every
 * request up to one fixed length and masks what lies past each request's own (as over a static cache).
 * With the flag, every granule of an open request's range that is not backed reads zeros: one granule
 * of zeros, made once per arena, is mapped read-only there (writes fault), and growth, offload and
 * restore swap it for the request's own granules and back. Only whole granules: the tokens past a
 * request's length inside a granule it backs hold what that memory held before (another request's
 * bytes, from the reserve) until written. Cost: one mapping per granule of the range at open (a map and
 * an access grant, no memory; each charged MAPPED like any mapping), one unmap per granule grown and
 * per zero granule at close. A call that fails half-way maps back the zeros it took away; where it
 * cannot, it says so, and the request's info counts the bytes a read would fault on (unreadable_bytes)
 * until a later grow, restore or offload maps them.
 *
 * Releases report honestly (dmm_release_outcome): nothing is reused or refunded before the driver let
 * go of it.
 *
 * A release that the driver refuses half-way keeps what it could not give back (an allocation, a
 * prefix's mapping, a host copy), charged, in the arena: destroy tries those again (stats: unreleased).
 *
 * Thread contract: thread-safe across requests; one request is driven (grow, share, offload, restore,
 * close) by one thread at a time, as a block is freed once.
 */
#ifndef DMM_KV_H
#define DMM_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "dmm/device.h"
#include "dmm/mechanism.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_kv dmm_kv;
typedef struct dmm_kv_request dmm_kv_request;
typedef struct dmm_kv_prefix dmm_kv_prefix;

/* Read min(size, sizeof) bytes; every 0 is a default where one is said. */
typedef struct dmm_kv_config {
    uint32_t size;          /* sizeof(dmm_kv_config) */
    uint64_t token_bytes;   /* one token's K and V over every layer (2 × layers × kv heads × head dim × dtype
                               size); required */
    uint64_t max_tokens;    /* the most tokens one request may hold: its reserved range; required */
    uint32_t max_requests;  /* requests open at once (also the most prefixes); 0 = 256 */
    uint64_t reserve_bytes; /* physical handles kept for growth, rounded up to granules; 0 = 8 granules */
    bool refill_thread;     /* a thread of the arena's own tops the reserve up whenever growth took half of
                               it (dmm_kv_refill, off the caller's thread); false: the caller refills */
    uint64_t flags;         /* DMM_KV_* below (appended: read only when .size covers it; other bits refused) */
} dmm_kv_config;
/* Every granule of a request's range that holds none of its tokens reads zeros ("Fixed-length reads"
 * above); without it, reading there faults. */
#define DMM_KV_ZERO_TAIL ((uint64_t)1)

/* A KV arena on `dev` (not owned: destroy the arena first): its own address space of max_requests
 * ranges, charged to the device's governor under the device's holder. INVALID_ARGUMENT (nothing
 * created) for a token size or length of 0 or one whose range does not fit in 2^46 bytes. */
DMM_API dmm_status dmm_kv_create(dmm_device *dev, const dmm_kv_config *cfg, dmm_kv **out);
/* BUSY (nothing changed) while a request or a prefix is open, or while what an earlier failed release
 * left (stats: unreleased) still cannot be given back. */
DMM_API dmm_status dmm_kv_destroy(dmm_kv *kv);

/* Opens a request backed for its first `tokens` (0: none yet), starting with `prefix` (NULL: none;
 * then tokens counts from the prefix's start and must be at least the prefix's length). Copies the
 * prefix's last, partial granule on `stream`. BUSY when max_requests are open; BUDGET or
 * OUT_OF_MEMORY when the memory does not fit (nothing changed either way). */
DMM_API dmm_status dmm_kv_open(dmm_kv *kv, const dmm_kv_prefix *prefix, uint64_t tokens, dmm_stream stream,
                               dmm_kv_request **out);
/* Backs the request for its first `tokens` (a no-op when it is already; never shrinks). */
DMM_API dmm_status dmm_kv_grow(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens);
/* Gives the request's memory back (its private granules to the reserve or the driver; its mapping of
 * a prefix, which stays). FAILED: nothing changed, the request is still open. */
DMM_API dmm_release_outcome dmm_kv_close(dmm_kv *kv, dmm_kv_request *r);

typedef struct dmm_kv_request_info {
    uint32_t size;            /* sizeof(dmm_kv_request_info), set by the caller */
    void *base;               /* token t at base + t × token_bytes; never moves */
    uint64_t backed_tokens;   /* tokens backed now (from the start, the prefix included) */
    uint64_t prefix_tokens;   /* tokens of the prefix it was opened with (read-only up to the last whole
                                 granule of them) */
    uint64_t private_bytes;   /* bytes of its own granules */
    uint64_t shared_bytes;    /* bytes of a prefix's granules mapped into it */
    uint64_t offloaded_bytes; /* bytes of its own held in host memory while it is offloaded (0: resident) */
    uint64_t unreadable_bytes; /* bytes of its range that a read faults on: the range past what is backed
                                  without DMM_KV_ZERO_TAIL; with it 0, unless a failed call left a hole */
} dmm_kv_request_info;
DMM_API dmm_status dmm_kv_request_get(dmm_kv *kv, const dmm_kv_request *r, dmm_kv_request_info *out);

/* Preemption. Offload copies the request's own granules (one copy of its contiguous private range;
 * a prefix's granules stay mapped, they are not its own) on `stream` into host memory the governor
 * charges to the host tier (role KV_CACHE), waits for that copy, and gives the granules back: the
 * request stays open, holds no device memory of its own, and its range stays reserved. Restore
 * backs the same addresses again and copies the contents back on `stream` (waiting for the copy),
 * then gives the host memory back. Both are for a scheduler that preempts: they wait for their one
 * copy. While offloaded, grow and share are refused (BUSY); close gives the host copy back too.
 * UNSUPPORTED where the driver has no host memory for copies (the host_alloc slot). */
DMM_API dmm_status dmm_kv_offload(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream);
DMM_API dmm_status dmm_kv_restore(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream);

/* Makes the first `tokens` of request r (backed, written by work ordered on `stream`) a prefix that
 * new requests start with. Its whole granules stay r's physical memory, held once; its last partial
 * granule is copied now, on `stream`, and waited for (so any stream may open requests with it). r may
 * close before the prefix goes: the memory stays while the prefix or any request mapping it lives;
 * while r is open its granules held for the prefix are not counted as its own (and r cannot be
 * offloaded) until the prefix is released. */
DMM_API dmm_status dmm_kv_share(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens, dmm_stream stream,
                                dmm_kv_prefix **out);
/* Drops the prefix: its memory goes with the last request that maps it. BUSY (nothing changed) while
 * a request opened with it is open. */
DMM_API dmm_release_outcome dmm_kv_prefix_release(dmm_kv *kv, dmm_kv_prefix *p);

/* Tops the reserve of physical handles up to reserve_bytes (creates what is missing: call it off the
 * decode thread, or let the arena's refill thread do it). *created (optional) = bytes created. */
DMM_API dmm_status dmm_kv_refill(dmm_kv *kv, uint64_t *created);

typedef struct dmm_kv_stats {
    uint32_t size;             /* sizeof(dmm_kv_stats), set by the caller */
    uint64_t granule;          /* the driver's granularity: the unit of growth */
    uint64_t range_bytes;      /* each request's reserved range */
    uint64_t requests;         /* open now */
    uint64_t prefixes;         /* open now */
    uint64_t private_bytes;    /* the requests' own granules */
    uint64_t shared_bytes;     /* granules held once for prefixes (their owners' and tails' memory) */
    uint64_t mapped_shared_bytes; /* prefix granules mapped into requests (mapped, not owned again) */
    uint64_t reserve_bytes;    /* handles kept for growth now */
    uint64_t owned_bytes;      /* all the arena owns: what the governor charged it */
    uint64_t driver_creates;   /* physical handles created since the arena was made */
    uint64_t grows;            /* commits made by growth */
    uint64_t refusals;         /* opens, grows, offloads and refills refused for memory or budget */
    uint64_t offloaded;        /* requests offloaded now */
    uint64_t host_bytes;       /* host memory holding offloaded requests (charged to the host tier) */
    uint64_t refills;          /* refills the refill thread made (each created handles) */
    uint64_t unreleased;       /* what failed releases left (allocations, prefix mappings, host copies): held
                                  and charged, tried again at destroy */
} dmm_kv_stats;
DMM_API dmm_status dmm_kv_stats_get(dmm_kv *kv, dmm_kv_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* DMM_KV_H */
