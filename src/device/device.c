/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/device.c — the device front (dmm/device.h): one device's allocator, under every adapter.
 *
 * What it owns: the stack driver → arena → pool of one device, its lease with the governor, and the
 * routing of every malloc and free:
 *   - the stream is capturing a CUDA graph  → a graph segment (graphs.c): memory mapped before the
 *     capture, so the capture sees no map, unmap, set-access or event query; none free → a clear error;
 *   - the thread is inside a tag scope       → the tag's segment (tags.c), so the tag can be offloaded
 *     as whole ranges and restored at the same addresses;
 *   - otherwise                              → the pool (its hot path: no driver call, one heap lock).
 * A free goes to the pool first (a pointer outside it is refused at once, with no driver call) and
 * then to the tag and graph segments. While a recording is on (record.c), every malloc served and
 * every free is also written to its trace: the malloc after the route served it, the free before.
 *
 * The trade-off: one capture-status query per malloc on a non-default stream (the legacy default
 * stream cannot capture, so eager work on it pays nothing), bought so that every capture is served
 * from already-mapped memory without a begin/end hook from torch (its pluggable path has none).
 *
 * Accounting: the arena charges the device's lease through the governor's own hook (nothing of ours in
 * between); the lease's stats are what is mapped (= committed: pool chunks, tag and graph segments) and
 * owned (plus the handle cache), with peaks that reset_peaks lowers. A malloc refused for budget or
 * memory trims the pool and retries once.
 *
 * Device loss (dmm/device.h): the driver is the one place that knows (it latches the first loss any call
 * over it reported: the pool's, the arena's, the deferred queue's or ours); the slow paths ask it
 * first (context.c) and make no driver call once it is lost; confirm_lost takes the jobs back unrun
 * (jobs.c), and destroy then goes without a driver call, freeing every host structure (events are not
 * destroyed: the context took them).
 *
 * Invariants: reserve ≤ 2^63 and every request served is ≤ reserve, so that rounding it up to the
 * block alignment or the granule never wraps (a larger one is refused at the entry);
 * alloc_bytes.cur = Σ live blocks' rounded sizes over pool (unless pool_only), tags and graphs;
 * blocks.cur = their number; the lease's mapped bytes = bytes the arena mapped for us; queued = our
 * requests in the deferred queue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_internal.h"
#include "driver/call.h"
#include "blocks.h"
#include "history.h"
#include "jobs.h"
#include "record.h"
#include "imports.h"
#include "stream_uses.h"

#define MIB ((uint64_t)1 << 20)
/* The size of dmm_device_config's first version (0.2.0): every field up to stock_bytes. */
#define DEVICE_CONFIG_MIN_SIZE (offsetof(dmm_device_config, stock_bytes) + sizeof(uint64_t))
#define GIB ((uint64_t)1 << 30)
#define DEVICE_MAX_RESERVE ((uint64_t)1 << 63) /* reserve ≤ 2^63: a request ≤ reserve rounds up without wrapping */

void dmm_device_set_capture_check(dmm_device *c, bool on) {
    if (c != NULL) dmm_atomic_store_relaxed(&c->capture_check, on ? 1 : 0);
}


/* ---- what the arena mapped and owns: the lease's bytes, as the governor counts them ---- */
static dmm_lease_stats lease_stats(dmm_device *c) {
    dmm_lease_stats st = {.size = sizeof st};
    if (dmm_lease_stats_get(c->gov, c->lease, &st) != DMM_OK) dmm_clear_error(); /* the lease lives as long as c */
    return st;
}

uint64_t dmm__device_mapped(dmm_device *c) { return lease_stats(c).used[DMM_AXIS_MAPPED]; }

uint64_t dmm__device_owned(dmm_device *c) { return lease_stats(c).used[DMM_AXIS_OWNED]; }

/* The pool's observer: a range of its VA mapped or unmapped, for the history (cheap when it is off). */
static void pool_mapped(void *user, uintptr_t addr, uint64_t bytes, bool mapped) {
    dmm__device_history_add(user, mapped ? DEVICE_EV_MAP : DEVICE_EV_UNMAP, (uint64_t)addr, bytes, NULL, 0);
}

/* ---- create / destroy ---- */
dmm_status dmm_device_create(dmm_driver *drv, dmm_governor *gov,
                             const dmm_device_config *cfg, dmm_device **out) {
    if (drv == NULL || gov == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: creating a device needs a driver, a "
                                                       "governor and an output pointer");
    *out = NULL;
    dmm_device_config k;
    memset(&k, 0, sizeof k);
    if (cfg != NULL && cfg->size < DEVICE_CONFIG_MIN_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_device_create: the config's size is %u bytes, less than the %zu of its first "
                             "version; set .size = sizeof(dmm_device_config) (%zu); nothing was created",
                             cfg->size, (size_t)DEVICE_CONFIG_MIN_SIZE, sizeof(dmm_device_config));
    if (cfg != NULL) memcpy(&k, cfg, cfg->size < sizeof k ? cfg->size : sizeof k);
    dmm_device *c = calloc(1, sizeof *c);
    if (c == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory");
    c->drv = drv;
    c->dev = drv->device;
    c->can_capture = dmm__drv_can_capture(drv);
    dmm_atomic_store_relaxed(&c->capture_check, 1);
    c->gov = gov;
    c->block_align = 512; /* torch's own rounding, so that sizes and alignments match the native allocator */
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(drv, &gran);
    if (s != DMM_OK || gran == 0) {
        free(c);
        return dmm_error_set(s != DMM_OK ? s : DMM_ERR_UNSUPPORTED,
                             "dmm device: device %d has no virtual memory management (driver '%s'); the device front "
                             "needs it to map memory under stable addresses",
                             (int)drv->device.index, drv->ops->name);
    }
    c->granule = gran;
    uint64_t pool_va = k.pool_va_bytes;
    if (pool_va == 0) {
        uint64_t fr = 0, total = 0;
        if (dmm__drv_mem_info(drv, &fr, &total) != DMM_OK || total == 0) total = 64 * GIB;
        dmm_clear_error();
        if (!dmm_pow2_up(total, &pool_va)) pool_va = UINT64_MAX; /* refused below */
    }
    if (pool_va < 64 * gran) pool_va = 64 * gran;
    uint64_t reserve = k.reserve_bytes ? k.reserve_bytes : 4 * (pool_va <= DEVICE_MAX_RESERVE / 4 ? pool_va : 0);
    if (pool_va > DEVICE_MAX_RESERVE / 4 && k.reserve_bytes == 0) {
        free(c);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: a pool VA of %llu bytes on device %d is too large: the device reserves 4 x "
                             "it, and 64 bits hold a pool VA of at most %llu (2^61); set the config's pool_va_bytes "
                             "(DMM_TORCH_POOL_VA under PyTorch) to the device's memory or less, or 0 for that; "
                             "nothing was created",
                             (unsigned long long)pool_va, (int)drv->device.index,
                             (unsigned long long)(DEVICE_MAX_RESERVE / 4));
    }
    if (reserve > DEVICE_MAX_RESERVE) {
        free(c);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: a reservation of %llu bytes on device %d is above %llu (2^63), the most the "
                             "device's sizes are checked for; pass a smaller reserve_bytes; nothing was created",
                             (unsigned long long)reserve, (int)drv->device.index,
                             (unsigned long long)DEVICE_MAX_RESERVE);
    }
    c->pool_va = pool_va;
    c->reserve = reserve;
    c->tag_va = k.tag_segment_bytes ? k.tag_segment_bytes : pool_va / 2;
    c->tag_va = dmm__device_round_granule(c, c->tag_va);
    c->restore_piece = k.restore_piece_bytes;
    c->restore_first = k.restore_first_bytes;
    c->restore_copy = k.restore_copy_bytes;

    dmm__device_history_init(c); /* (from here on, failures go to `fail`, which undoes it) */
    c->pool_only = k.pool_only;
    c->own_holder = k.holder == NULL;
    c->holder = k.holder;
    if (c->own_holder) {
        dmm_holder_config hc = {sizeof hc, k.name != NULL ? k.name : "device", 0, NULL, NULL};
        s = dmm_governor_holder_register(gov, &hc, &c->holder);
        if (s != DMM_OK) goto fail;
    }
    dmm_tier_usage tu;
    memset(&tu, 0, sizeof tu);
    tu.size = sizeof tu;
    if (dmm_governor_tier_usage(gov, c->dev, &tu) != DMM_OK) {
        dmm_clear_error();
        s = dmm_governor_set_limit(gov, c->dev, DMM_AXIS_OWNED, k.limit_bytes ? k.limit_bytes : DMM_UNLIMITED);
        if (s != DMM_OK) goto fail;
    } else if (k.limit_bytes) {
        s = dmm_governor_set_limit(gov, c->dev, DMM_AXIS_OWNED, k.limit_bytes);
        if (s != DMM_OK) goto fail;
    }
    s = dmm_lease_reserve(c->holder, c->dev, k.role_given ? k.role : DMM_ROLE_WORKSPACE, 0, 0, &c->lease);
    if (s != DMM_OK) goto fail;
    dmm_device_id host = {DMM_TIER_HOST, 0};
    if (!c->pool_only) s = dmm_lease_reserve(c->holder, host, DMM_ROLE_WEIGHTS, 0, 0, &c->host_lease); /* copies */
    if (s != DMM_OK) goto fail;
    s = dmm_governor_accounting(gov, c->lease, &c->accounting);
    if (s != DMM_OK) goto fail;

    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = reserve;
    ac.cache_limit_bytes = k.cache_limit_bytes == UINT64_MAX ? 0 : k.cache_limit_bytes ? k.cache_limit_bytes : 8 * MIB;
    ac.accounting = &c->accounting; /* the governor's own hook: the arena charges the lease directly */
    ac.exportable = k.exportable;
    c->exportable = k.exportable;
    s = dmm_arena_create(drv, &ac, &c->arena);
    if (s != DMM_OK) goto fail;
    uint64_t va_bytes = 0;
    s = dmm_arena_reservation(c->arena, &c->va, &va_bytes);
    if (s != DMM_OK) goto fail;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.va_bytes = pool_va;
    pc.block_align = (size_t)c->block_align;
    pc.retain_permille = k.retain_permille;
    pc.settle_permille = k.settle_permille;
    pc.stock_bytes = k.stock_bytes;
    pc.plan_loops = k.plan_loops;
    pc.move_batch_bytes = ac.cache_limit_bytes; /* moves pass through the arena's cache */
    if (k.max_chunk_bytes == 0) { /* the default: large handles for the interior of large requests only */
        pc.max_chunk_bytes = (32 * MIB + gran - 1) / gran * gran;
        pc.handle_divisor = k.handle_divisor ? k.handle_divisor : 8;
        pc.min_chunk_bytes = k.min_chunk_bytes ? k.min_chunk_bytes : (8 * MIB + gran - 1) / gran * gran;
        pc.floor_divisor = k.floor_divisor; /* a fixed floor: the rising one raised real runs' peaks */
    } else if (k.max_chunk_bytes != UINT64_MAX) {
        pc.max_chunk_bytes = k.max_chunk_bytes;
        pc.handle_divisor = k.handle_divisor;
        pc.min_chunk_bytes = k.min_chunk_bytes;
        pc.floor_divisor = k.floor_divisor;
    }
    pc.on_map = pool_mapped; /* the history's map and unmap events */
    pc.on_map_user = c;
    s = dmm__device_blocks_open(c);
    if (s != DMM_OK) goto fail;
    s = dmm_pool_create(c->arena, drv, &pc, &c->pool);
    if (s != DMM_OK) goto fail;
    s = dmm__device_jobs_open(c);
    if (s != DMM_OK) goto fail;
    pthread_mutex_init(&c->lock, NULL);
    dmm__device_record_init(c);
    *out = c;
    return DMM_OK;
fail:
    dmm__error_wrap(s, "dmm device: setting up device %d failed", (int)drv->device.index);
    if (c->pool != NULL) dmm_pool_destroy(c->pool);
    dmm__device_blocks_close(c);
    if (c->arena != NULL) dmm_mechanism_destroy(c->arena);
    dmm__device_history_fini(c);
    if (c->host_lease) dmm_lease_release(gov, c->host_lease);
    if (c->lease) dmm_lease_release(gov, c->lease);
    if (c->holder != NULL && c->own_holder) dmm_governor_holder_unregister(c->holder);
    free(c);
    return s;
}

/* ---- device loss ---- */
/* dev.lock held; the context is lost and confirmed terminated. Takes every job back unrun and marks
 * the tags; no driver call (the events the jobs name went with the context). */
static void confirm_lost_locked(dmm_device *c) {
    if (c->jobs_taken_back) return;
    dmm__device_jobs_take_back_locked(c);
    dmm__device_tags_mark_lost(c);
}

dmm_status dmm_device_confirm_lost(dmm_device *c) {
    if (c == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: confirm_lost of a NULL device");
    pthread_mutex_lock(&c->lock);
    if (!dmm__device_lost(c)) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: confirm_lost on device %d refused: the device was not lost, so there is "
                             "nothing to discharge; free everything and destroy the context normally",
                             (int)c->dev.index);
    }
    dmm_status s = dmm__device_terminated(c) ? DMM_OK : dmm_arena_confirm_context_terminated(c->arena);
    if (s == DMM_OK) confirm_lost_locked(c);
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* The rest of a destroy once the pool is gone (both destroys end here): the jobs, the blocks' table, the arena,
 * then every host structure. Each step that can fail is skipped once done, so a destroy that fails here
 * leaves a context that can only be destroyed again, and that call resumes. */
static dmm_status destroy_after_pool(dmm_device *c) {
    dmm_status s = dmm__device_jobs_close(c);
    if (s != DMM_OK) return s;
    dmm__device_blocks_close(c);
    s = dmm_mechanism_destroy(c->arena);
    if (s != DMM_OK)
        return dmm__error_wrap(s, "dmm device: destroying device %d: its pool is gone but the arena could not be "
                                  "destroyed (%s); call destroy again (the only call this context still takes)",
                               (int)c->dev.index, dmm_status_str(s));
    if (c->host_lease) dmm_lease_release(c->gov, c->host_lease);
    dmm_lease_release(c->gov, c->lease);
    if (c->own_holder) dmm_governor_holder_unregister(c->holder);
    dmm__device_record_fini(c);
    dmm__device_history_fini(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return DMM_OK;
}

/* destroy after a loss: refused until confirmed; then everything goes without a driver call. */
static dmm_status destroy_lost_locked(dmm_device *c) {
    if (!dmm__device_terminated(c)) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_DEVICE_LOST,
                             "dmm device: destroying device %d refused: the device is lost and the context was not "
                             "confirmed terminated; tear it down, call dmm_device_confirm_lost, then destroy "
                             "again; nothing changed",
                             (int)c->dev.index);
    }
    confirm_lost_locked(c);
    dmm__device_tags_drop_lost(c);
    dmm__device_graphs_drop_lost(c);
    dmm__device_imports_drop_lost(c);
    pthread_mutex_unlock(&c->lock);
    dmm_status s = c->pool != NULL ? dmm_pool_destroy(c->pool) : DMM_OK; /* forgets live blocks */
    if (s != DMM_OK) return s;
    c->pool = NULL;
    return destroy_after_pool(c);
}

dmm_status dmm_device_destroy(dmm_device *c) {
    if (c == NULL) return DMM_OK;
    pthread_mutex_lock(&c->lock);
    dmm__device_jobs_poll_locked(c);
    if (c->jobs_taken_back || dmm__device_lost(c)) return destroy_lost_locked(c); /* unlocks */
    uint64_t live = dmm_atomic_load_relaxed(&c->blocks.cur), queued = dmm_atomic_load_relaxed(&c->queued);
    if (c->pool_only && c->pool != NULL) { /* the pool alone counts its blocks */
        dmm_pool_stats ps = {.size = sizeof ps};
        if (dmm_pool_stats_get(c->pool, &ps) == DMM_OK) live += (uint64_t)ps.allocations.current;
        dmm_clear_error();
    }
    if (live > 0 || queued > 0) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm device: device %d still has %llu live block(s) and %llu queued decommit(s); free "
                             "them (and let the streams finish) first; nothing changed",
                             (int)c->dev.index, (unsigned long long)live, (unsigned long long)queued);
    }
    /* Imports, tag and graph segments go first; one whose release FAILED (nothing changed) stays, one
     * whose release waits behind its event (a released graph's last replay) stays queued, and the
     * destroy stops there with the context intact (and usable): call it again. */
    size_t kept = dmm__device_imports_fini(c);
    dmm__device_tags_fini(c);
    (void)dmm__device_graphs_fini_locked(c);
    dmm__device_jobs_poll_locked(c);
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++)
        for (tag_segment *g = c->tags[i].segs; g != NULL; g = g->next) kept++;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) kept++;
    queued = dmm_atomic_load_relaxed(&c->queued);
    pthread_mutex_unlock(&c->lock);
    if (kept > 0 || queued > 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm device: destroying device %d: %zu import(s), tag or graph segment(s) could not be released "
                             "(the driver failed and nothing changed for them) and %llu release(s) wait behind work "
                             "still running on their streams; the context is intact: let the streams finish and call "
                             "destroy again",
                             (int)c->dev.index, kept, (unsigned long long)queued);
    /* From here each step is skipped once done: a destroy that fails later (the pool, or the arena giving
     * back its address space) leaves a context that can only be destroyed again, and that call resumes. */
    dmm_status s = c->pool != NULL ? dmm_pool_destroy(c->pool) : DMM_OK;
    if (s != DMM_OK && s != DMM_ERR_QUARANTINED) return s; /* refused: the pool is intact */
    c->pool = NULL; /* QUARANTINED: the pool is gone, the arena keeps what it could not give back */
    return destroy_after_pool(c);
}

/* ---- polls ---- */
dmm_status dmm_device_poll(dmm_device *c, uint64_t *queued) {
    if (c == NULL) return dmm__device_null("dmm_device_poll", "a device");
    pthread_mutex_lock(&c->lock);
    dmm_status s = c->jobs_taken_back ? dmm__device_refuse_lost(c, "poll") : dmm__device_jobs_poll_locked(c);
    if (queued != NULL) *queued = dmm_atomic_load_relaxed(&c->queued);
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* ---- malloc / free ---- */
static size_class *class_of(dmm_device *c, uint64_t len) {
    return &c->by_class[len <= DEVICE_SMALL_BYTES ? DEVICE_CLASS_SMALL : DEVICE_CLASS_LARGE];
}

static void count_malloc(dmm_device *c, uint64_t len, size_t req) {
    size_class *k = class_of(c, len);
    dmm__device_count_add(&c->alloc_bytes, len);
    dmm__device_count_add(&c->req_bytes, req);
    dmm__device_count_add(&c->blocks, 1);
    dmm__device_count_add(&k->alloc_bytes, len);
    dmm__device_count_add(&k->req_bytes, req);
    dmm__device_count_add(&k->blocks, 1);
}

static void count_free(dmm_device *c, uint64_t len, uint64_t req) {
    size_class *k = class_of(c, len);
    dmm__device_count_sub(&c->alloc_bytes, len);
    dmm__device_count_sub(&c->req_bytes, req);
    dmm__device_count_sub(&c->blocks, 1);
    dmm_atomic_add_relaxed(&c->freed_bytes, len);
    dmm_atomic_add_relaxed(&c->req_freed, req);
    dmm_atomic_add_relaxed(&c->frees, 1);
    dmm__device_count_sub(&k->alloc_bytes, len);
    dmm__device_count_sub(&k->req_bytes, req);
    dmm__device_count_sub(&k->blocks, 1);
    dmm_atomic_add_relaxed(&k->freed_bytes, len);
    dmm_atomic_add_relaxed(&k->req_freed, req);
    dmm_atomic_add_relaxed(&k->frees, 1);
}

/* A pool malloc refused for budget or memory: give back what the pool caches, then try once more. */
static dmm_status pool_retry(dmm_device *c, size_t bytes, dmm_stream stream, void **out, dmm_status first) {
    if (first != DMM_ERR_BUDGET && first != DMM_ERR_OUT_OF_MEMORY) return first;
    dmm_error_kept first_try = {0}; /* the sentence names both tries, and the second overwrites the first */
    dmm__error_keep(&first_try, first);
    dmm_atomic_add_relaxed(&c->retries, 1);
    pthread_mutex_lock(&c->lock);
    dmm__device_jobs_poll_locked(c);
    (void)dmm__device_graphs_trim_locked(c);
    pthread_mutex_unlock(&c->lock);
    uint64_t released = 0;
    (void)dmm_pool_empty_cache(c->pool, &released);
    if (!c->own_holder) /* the caller's holder: what else it holds (its other devices) gives back too */
        released += dmm_holder_reclaim(c->holder, c->dev, DMM_RECLAIM_CACHED, bytes);
    dmm_clear_error();
    dmm_status s = dmm_pool_malloc(c->pool, bytes, stream, out);
    if (s == DMM_OK) return DMM_OK;
    dmm_atomic_add_relaxed(&c->ooms, 1);
    return dmm__error_wrap(s,
                           "dmm device: allocating %zu bytes on device %d (stream %p) failed, also after giving back "
                           "%llu cached bytes (first try: %.767s)", /* (cut: the second try's cause follows) */
                           bytes, (int)c->dev.index, stream, (unsigned long long)released,
                           dmm__error_kept_text(&first_try));
}

/* The routing of a malloc (the file's opening); dmm_device_malloc records what it served. */
static dmm_status route_malloc(dmm_device *c, size_t bytes, dmm_stream stream, void **out) {
    *out = NULL;
    if (bytes == 0) return DMM_OK;
    if (bytes > c->reserve) /* no route could serve it, and its rounding up (tags, graphs) would wrap */
        return dmm__device_too_large(c, bytes, "allocating");
    if (!c->pool_only && stream != NULL && c->can_capture && dmm_atomic_load_relaxed(&c->capture_check)) {
        bool capturing = false;
        uint64_t id = 0;
        dmm_status s = dmm_device_capture_status(c, stream, &capturing, &id);
        if (s != DMM_OK) return s;
        if (capturing) {
            s = dmm__device_graph_malloc(c, bytes, stream, id, out);
            if (s != DMM_OK) return s;
            count_malloc(c, dmm__device_round_block(c, bytes), bytes);
            return DMM_OK;
        }
    }
    bool by_default = false;
    int tag = c->pool_only ? -1 : dmm__device_tag_current(&by_default);
    if (tag >= 0) {
        dmm_status s = dmm__device_tag_malloc(c, tag, bytes, stream, out);
        if (s == DMM_OK) {
            dmm_atomic_add_relaxed(&c->tag_mallocs, 1);
            count_malloc(c, dmm__device_round_block(c, bytes), bytes);
            return DMM_OK;
        }
        if (s != DMM_ERR_BUSY || !by_default) return s;
        dmm_clear_error(); /* the default tag sleeps: what is allocated meanwhile stays awake, in the pool */
    }
    if (dmm_atomic_load_relaxed(&c->queued) > 0 && pthread_mutex_trylock(&c->lock) == 0) {
        dmm__device_jobs_poll_locked(c);
        pthread_mutex_unlock(&c->lock);
        dmm_clear_error();
    }
    /* the caller's context first, outside the pool (the context function may take the caller's locks):
     * once the pool hands the block out, the table has it at once */
    bool tracking = dmm__device_blocks_tracking(c);
    uint32_t context = tracking ? dmm__device_history_context(c, DEVICE_EV_ALLOC) : 0;
    dmm_status s = dmm_pool_malloc(c->pool, bytes, stream, out);
    if (s != DMM_OK) s = pool_retry(c, bytes, stream, out, s);
    if (s != DMM_OK) return s;
    if (tracking) {
        dmm__device_blocks_add(c, *out, dmm__device_round_block(c, bytes), bytes, stream, context);
        dmm__device_history_add(c, DEVICE_EV_ALLOC, (uint64_t)(uintptr_t)*out, dmm__device_round_block(c, bytes),
                               stream, context);
    }
    if (!c->pool_only) count_malloc(c, dmm__device_round_block(c, bytes), bytes);
    return DMM_OK;
}

/* Every malloc but the hot one: routed, then recorded. */
static __attribute__((noinline)) dmm_status malloc_routed(dmm_device *c, size_t bytes, dmm_stream stream, void **out) {
    dmm_status s = route_malloc(c, bytes, stream, out);
    if (s == DMM_OK && *out != NULL && dmm__device_recording(c))
        dmm__device_record_alloc(c, *out, dmm__device_round_block(c, bytes), stream);
    return s;
}

dmm_status dmm_device_malloc(dmm_device *c, size_t bytes, dmm_stream stream, void **out) {
    if (c == NULL || out == NULL) return dmm__device_null("dmm_device_malloc", "a device and an output pointer");
    /* the hot path: a pool block (no capture can be asked of, no tag scope, no queued release to run
     * first), nothing observing, and the pool serves it; route_malloc decides every other case */
    bool hot = bytes - 1 < c->reserve &&
               (c->pool_only || ((stream == NULL || !c->can_capture) && dmm__device_tag_depth == 0 &&
                                 dmm_atomic_load_relaxed(&dmm__device_tag_default_id) < 0)) &&
               dmm_atomic_load_relaxed(&c->queued) == 0 && !dmm__device_blocks_tracking(c) &&
               !dmm__device_recording(c);
    if (!__builtin_expect(hot, 1)) return malloc_routed(c, bytes, stream, out);
    *out = NULL;
    dmm_status s = dmm_pool_malloc(c->pool, bytes, stream, out);
    if (__builtin_expect(s != DMM_OK, 0)) s = pool_retry(c, bytes, stream, out, s);
    if (s == DMM_OK && !c->pool_only) count_malloc(c, dmm__device_round_block(c, bytes), bytes);
    return s;
}

static dmm_status free_segment_block(dmm_device *c, void *ptr, dmm_stream stream, dmm_stream own, bool uses);

/* A block torch recorded on other streams (record_stream) is freed on the first of them, after it was
 * made to wait for the others (stream_uses.c): the pool then holds it back behind an event there. A
 * tag block orders its own stream too. */
static dmm_status free_routed(dmm_device *c, void *ptr, dmm_stream stream, dmm_stream own, bool uses) {
    /* the trace and the table of pool blocks let go of the block before the pool does: once the pool
     * has it, another thread may get the same address and record it first */
    bool recorded = dmm__device_recording(c) && dmm__device_record_free(c, ptr);
    device_block b;
    bool tracking = dmm__device_blocks_tracking(c);
    uint32_t context = tracking ? dmm__device_history_context(c, DEVICE_EV_FREE) : 0; /* before the table changes */
    bool tracked = tracking && dmm__device_blocks_take(c, ptr, &b);
    if (tracked) /* a free without its own context shows the allocation's */
        dmm__device_history_add(c, DEVICE_EV_FREE, (uint64_t)(uintptr_t)ptr, b.len, b.stream,
                                context != 0 ? context : b.context);
    uint64_t requested = 0;
    dmm_status s = dmm_pool_free_requested(c->pool, ptr, stream, &requested);
    if (s == DMM_OK) {
        if (!c->pool_only) count_free(c, dmm__device_round_block(c, requested), requested);
        return DMM_OK;
    }
    if (s != DMM_ERR_UNKNOWN_ALLOCATION) { /* the pool refused the free of a live block (nothing changed) */
        if (tracked) {                     /* it is live again, in the table and the history */
            dmm__device_blocks_add(c, ptr, b.len, b.req, b.stream, b.context);
            dmm__device_history_add(c, DEVICE_EV_ALLOC, (uint64_t)(uintptr_t)ptr, b.len, b.stream, b.context);
        }
        if (recorded) { /* and in the trace, under a new id */
            dmm_error_kept why = {0};
            dmm__error_keep(&why, s);
            size_t len = 0;
            if (!tracked && dmm_pool_block_size(c->pool, ptr, &len) != DMM_OK) len = c->block_align;
            dmm__device_record_alloc(c, ptr, tracked ? b.len : len, tracked ? b.stream : own);
            s = dmm__error_restore(&why);
        }
        return s;
    }
    return free_segment_block(c, ptr, stream, own, uses);
}

/* The free of a block the pool does not know: one of a tag or graph segment, or none. */
static dmm_status free_segment_block(dmm_device *c, void *ptr, dmm_stream stream, dmm_stream own, bool uses) {
    if (uses) dmm__device_stream_wait(c, stream, own);
    uint64_t len = 0, req = 0;
    pthread_mutex_lock(&c->lock);
    dmm_status s = dmm__device_tag_free_locked(c, ptr, stream, &len, &req);
    if (s == DMM_ERR_UNKNOWN_ALLOCATION) s = dmm__device_graph_free_locked(c, ptr, &len, &req);
    pthread_mutex_unlock(&c->lock);
    if (s == DMM_OK) {
        count_free(c, len, req);
        return DMM_OK;
    }
    return dmm_error_set(s,
                         "dmm device: free of %p on device %d: not a live allocation of this device (pool, tag or "
                         "graph segment); nothing changed",
                         ptr, (int)c->dev.index);
}

dmm_status dmm_device_free(dmm_device *c, void *ptr, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_free", "a device");
    if (ptr == NULL) return DMM_OK;
    if (!dmm__device_uses_any() && !dmm__device_recording(c) && !dmm__device_blocks_tracking(c)) {
        /* the hot path: no block was used on another stream, nothing observes */
        uint64_t requested = 0;
        dmm_status s = dmm_pool_free_requested(c->pool, ptr, stream, &requested);
        if (s == DMM_OK && !c->pool_only) count_free(c, dmm__device_round_block(c, requested), requested);
        if (s != DMM_ERR_UNKNOWN_ALLOCATION) return s; /* freed, or refused (the pool's sentence) */
        return free_segment_block(c, ptr, stream, stream, false);
    }
    dmm_stream *uses = NULL;
    size_t nuses = 0;
    if (!dmm__device_uses_any() || !dmm__device_uses_take(ptr, stream, &uses, &nuses))
        return free_routed(c, ptr, stream, stream, false);
    for (size_t i = 1; i < nuses; i++) dmm__device_stream_wait(c, uses[0], uses[i]);
    dmm_status s = free_routed(c, ptr, uses[0], stream, true);
    if (s != DMM_OK) { /* refused, nothing changed: the block keeps its recorded streams (the waits are harmless) */
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        for (size_t i = 0; i < nuses; i++) (void)dmm_device_record_stream(ptr, uses[i]);
        s = dmm__error_restore(&why);
    }
    free(uses);
    return s;
}

/* ---- empty_cache, peaks, limit ---- */
dmm_status dmm_device_empty_cache(dmm_device *c, uint64_t *released) {
    if (c == NULL) return dmm__device_null("dmm_device_empty_cache", "a device");
    uint64_t freed = 0;
    if (released != NULL) *released = 0;
    dmm_status ls = dmm__device_lock_and_poll(c, "empty_cache");
    if (ls != DMM_OK) return ls;
    if (dmm__device_tags_trim_locked(c, &freed) == DMM_ERR_DEVICE_LOST) { /* an empty segment's event found the loss */
        pthread_mutex_unlock(&c->lock);
        return dmm__device_refuse_lost(c, "empty_cache");
    }
    freed += dmm__device_graphs_trim_locked(c);
    dmm__device_jobs_poll_locked(c);
    pthread_mutex_unlock(&c->lock);
    uint64_t pool_freed = 0, again = 0;
    dmm_status s = dmm_pool_empty_cache(c->pool, &pool_freed);
    /* A heap whose fence the first pass had to record (frees since its last fence) is asked again:
     * the fence is usually complete by now. Never a wait: what is still pending stays. */
    if (s == DMM_OK) s = dmm_pool_empty_cache(c->pool, &again);
    if (released != NULL) *released = freed + pool_freed + again;
    return s;
}

dmm_status dmm_device_reset_peaks(dmm_device *c) {
    if (c == NULL) return dmm__device_null("dmm_device_reset_peaks", "a device");
    (void)dmm_lease_reset_peak(c->gov, c->lease);
    dmm__device_count_reset(&c->alloc_bytes);
    dmm__device_count_reset(&c->req_bytes);
    dmm__device_count_reset(&c->blocks);
    for (int k = 0; k < 2; k++) {
        dmm__device_count_reset(&c->by_class[k].alloc_bytes);
        dmm__device_count_reset(&c->by_class[k].req_bytes);
        dmm__device_count_reset(&c->by_class[k].blocks);
    }
    return DMM_OK;
}

/* torch's reset_accumulated_memory_stats: the totals ("allocated", "freed") and the event counters
 * (num_ooms, num_alloc_retries) start again from 0; current values and peaks stay. */
static void zero(_Atomic uint64_t *x) { dmm_atomic_store_relaxed(x, 0); }

dmm_status dmm_device_reset_accumulated(dmm_device *c) {
    if (c == NULL) return dmm__device_null("dmm_device_reset_accumulated", "a device");
    device_count *counts[] = {&c->alloc_bytes, &c->req_bytes, &c->blocks, &c->by_class[0].alloc_bytes,
                        &c->by_class[0].req_bytes, &c->by_class[0].blocks, &c->by_class[1].alloc_bytes,
                        &c->by_class[1].req_bytes, &c->by_class[1].blocks};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) zero(&counts[i]->total);
    zero(&c->freed_bytes);
    zero(&c->req_freed);
    zero(&c->frees);
    for (int k = 0; k < 2; k++) {
        zero(&c->by_class[k].freed_bytes);
        zero(&c->by_class[k].req_freed);
        zero(&c->by_class[k].frees);
    }
    zero(&c->ooms);
    zero(&c->retries);
    return DMM_OK;
}

dmm_status dmm_device_set_limit(dmm_device *c, uint64_t bytes) {
    if (c == NULL) return dmm__device_null("dmm_device_set_limit", "a device");
    dmm_status s = dmm_governor_set_limit(c->gov, c->dev, DMM_AXIS_OWNED, bytes ? bytes : DMM_UNLIMITED);
    if (s != DMM_OK) return s;
    if (bytes != 0 && dmm__device_owned(c) > bytes) (void)dmm_device_empty_cache(c, NULL);
    return DMM_OK;
}

/* ---- JSON ---- */
static void put_count(dmm_json *j, const char *name, device_count *t, bool with_total, uint64_t freed) {
    dmm__json_put(j, "\"%s\":{\"current\":%llu,\"peak\":%llu", name, (unsigned long long)dmm_atomic_load_relaxed(&t->cur),
                  (unsigned long long)dmm_atomic_load_relaxed(&t->peak));
    if (with_total)
        dmm__json_put(j, ",\"allocated\":%llu,\"freed\":%llu", (unsigned long long)dmm_atomic_load_relaxed(&t->total), (unsigned long long)freed);
    dmm__json_put(j, "}");
}

/* An axis of the lease as a count: what the arena mapped (reserved_bytes, with its totals) or owns. */
static void put_lease_axis(dmm_json *j, const char *name, const dmm_lease_stats *ls, dmm_axis x, bool with_total) {
    dmm__json_put(j, "\"%s\":{\"current\":%llu,\"peak\":%llu", name, (unsigned long long)ls->used[x],
                  (unsigned long long)ls->peak[x]);
    if (with_total)
        dmm__json_put(j, ",\"allocated\":%llu,\"freed\":%llu", (unsigned long long)ls->charged[x],
                      (unsigned long long)(ls->charged[x] - ls->used[x]));
    dmm__json_put(j, "}");
}

/* The pool's committed ranges (dmm_pool_committed) in a new array: *n pairs of address and bytes. */
static dmm_status pool_runs(dmm_device *c, uint64_t **runs, size_t *n) {
    *runs = NULL;
    for (int tries = 0; tries < 8; tries++) { /* the count can grow between the two calls */
        size_t count = 0;
        dmm_status s = dmm_pool_committed(c->pool, NULL, 0, &count);
        if (s != DMM_OK) return s;
        uint64_t *v = malloc((count + 16) * 2 * sizeof *v);
        if (v == NULL)
            return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for the snapshot of device "
                                                        "%d's pool; nothing was written", (int)c->dev.index);
        s = dmm_pool_committed(c->pool, v, count + 16, n);
        if (s == DMM_OK) {
            *runs = v;
            return DMM_OK;
        }
        free(v);
        if (s != DMM_ERR_INVALID_ARGUMENT) return s;
        dmm_clear_error();
    }
    return dmm_error_set(DMM_ERR_BUSY, "dmm device: the pool of device %d kept growing while its snapshot was taken; "
                                       "take it again", (int)c->dev.index);
}

/* The snapshot's pool: its committed runs (the segments) and its live blocks, both in address order. */
static void put_pool_layout(dmm_device *c, dmm_json *j, const uint64_t *runs, size_t nruns,
                            const device_block_at *b, size_t nb, uint64_t pool_live) {
    /* live pool blocks the table lacks: those from before tracking began, or left out for want of host
     * memory (read a moment apart from the table: approximate while other threads allocate) */
    uint64_t untracked = pool_live > nb ? pool_live - nb : 0;
    dmm__json_put(j, ",\"pool_map_exact\":true,\"pool_segments\":["); /* the pool's own answer */
    for (size_t i = 0; i < nruns; i++)
        dmm__json_put(j, "%s[%llu,%llu]", i ? "," : "", (unsigned long long)runs[2 * i],
                      (unsigned long long)runs[2 * i + 1]);
    dmm__json_put(j, "],\"block_tracking\":%s,\"pool_blocks_untracked\":%llu,\"pool_blocks\":[",
                  dmm__device_blocks_tracking(c) ? "true" : "false", (unsigned long long)untracked);
    for (size_t i = 0; i < nb; i++)
        dmm__json_put(j, "%s[%llu,%llu,%llu,%llu,%u]", i ? "," : "", (unsigned long long)b[i].addr,
                      (unsigned long long)b[i].b.len, (unsigned long long)b[i].b.req,
                      (unsigned long long)(uintptr_t)b[i].b.stream, b[i].b.context);
    dmm__json_put(j, "]");
}

/* The JSON object of the stats (and, with `snapshot`, every block and segment: the snapshot). */
static dmm_status write_json(dmm_device *c, char *buf, size_t cap, size_t *needed, bool snapshot) {
    if (needed == NULL || (buf == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: stats JSON needs `needed` (and a buffer when cap > 0)");
    dmm_json j = {buf, cap, 0};
    dmm_pool_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.size = sizeof ps;
    dmm_status s = dmm_pool_stats_get(c->pool, &ps);
    if (s != DMM_OK) return s;
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    s = dmm_mechanism_stats(c->arena, &as);
    if (s != DMM_OK) return s;
    dmm_tier_usage tu;
    memset(&tu, 0, sizeof tu);
    tu.size = sizeof tu;
    s = dmm_governor_tier_usage(c->gov, c->dev, &tu);
    if (s != DMM_OK) return s;
    dmm_lease_stats ls = {.size = sizeof ls};
    s = dmm_lease_stats_get(c->gov, c->lease, &ls);
    if (s != DMM_OK) return s;
    /* the pool's segments and blocks (snapshot), read before dev.lock: their locks are taken alone */
    uint64_t *runs = NULL;
    device_block_at *pblocks = NULL;
    size_t nruns = 0, nblocks = 0;
    if (snapshot) {
        s = pool_runs(c, &runs, &nruns);
        if (s != DMM_OK) return s;
        nblocks = dmm__device_blocks_collect(c, &pblocks);
        if (nblocks == SIZE_MAX) {
            free(runs);
            free(pblocks);
            return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for the snapshot of device %d's "
                                                        "pool; nothing was written",
                                 (int)c->dev.index);
        }
    }
    char pj[4096], aj[4096];
    size_t need = 0;
    if (dmm_pool_stats_json(&ps, pj, sizeof pj, &need) != DMM_OK) snprintf(pj, sizeof pj, "null");
    if (dmm_stats_json(&as, aj, sizeof aj, &need) != DMM_OK) snprintf(aj, sizeof aj, "null");
    dmm_clear_error();

    pthread_mutex_lock(&c->lock);
    dmm__device_jobs_poll_locked(c);
    dmm_clear_error();
    uint64_t tag_live = 0, tag_committed = 0, g_live = 0, g_committed = 0;
    dmm__device_tags_totals_locked(c, &tag_live, &tag_committed);
    dmm__device_graphs_totals_locked(c, &g_live, &g_committed);
    dmm__json_put(&j, "{\"device\":%d,", (int)c->dev.index);
    put_count(&j, "allocated_bytes", &c->alloc_bytes, true, dmm_atomic_load_relaxed(&c->freed_bytes));
    dmm__json_put(&j, ",");
    put_count(&j, "requested_bytes", &c->req_bytes, true, dmm_atomic_load_relaxed(&c->req_freed));
    dmm__json_put(&j, ",");
    put_count(&j, "allocation", &c->blocks, true, dmm_atomic_load_relaxed(&c->frees));
    dmm__json_put(&j, ",\"by_class\":{");
    for (int k = 0; k < 2; k++) {
        size_class *t = &c->by_class[k];
        dmm__json_put(&j, "%s\"%s\":{", k ? "," : "", k == DEVICE_CLASS_SMALL ? "small_pool" : "large_pool");
        put_count(&j, "allocated_bytes", &t->alloc_bytes, true, dmm_atomic_load_relaxed(&t->freed_bytes));
        dmm__json_put(&j, ",");
        put_count(&j, "requested_bytes", &t->req_bytes, true, dmm_atomic_load_relaxed(&t->req_freed));
        dmm__json_put(&j, ",");
        put_count(&j, "allocation", &t->blocks, true, dmm_atomic_load_relaxed(&t->frees));
        dmm__json_put(&j, "}");
    }
    dmm__json_put(&j, "},");
    put_lease_axis(&j, "reserved_bytes", &ls, DMM_AXIS_MAPPED, true);
    dmm__json_put(&j, ",");
    put_lease_axis(&j, "physical_bytes", &ls, DMM_AXIS_OWNED, false);
    dmm__json_put(&j,
                  ",\"num_alloc_retries\":%llu,\"num_ooms\":%llu,\"num_device_alloc\":%llu,\"num_device_free\":%llu,"
                  "\"capture_mallocs\":%llu,\"capture_refusals\":%llu,\"tag_mallocs\":%llu,\"queued\":%llu,"
                  "\"limit\":",
                  (unsigned long long)dmm_atomic_load_relaxed(&c->retries), (unsigned long long)dmm_atomic_load_relaxed(&c->ooms),
                  (unsigned long long)as.driver_create, (unsigned long long)as.driver_release,
                  (unsigned long long)dmm_atomic_load_relaxed(&c->capture_mallocs), (unsigned long long)dmm_atomic_load_relaxed(&c->capture_refusals),
                  (unsigned long long)dmm_atomic_load_relaxed(&c->tag_mallocs), (unsigned long long)dmm_atomic_load_relaxed(&c->queued));
    if (tu.limit[DMM_AXIS_OWNED] == DMM_UNLIMITED) dmm__json_put(&j, "null");
    else dmm__json_put(&j, "%llu", (unsigned long long)tu.limit[DMM_AXIS_OWNED]);
    dmm__json_put(&j,
                  ",\"governor_used\":%llu,\"host_bytes\":%llu,\"granule\":%llu,\"pool_va_bytes\":%llu,"
                  "\"pool_live_bytes\":%llu,\"pool_committed_bytes\":%llu,\"tag_live_bytes\":%llu,"
                  "\"tag_committed_bytes\":%llu,\"graph_live_bytes\":%llu,\"graph_committed_bytes\":%llu,",
                  (unsigned long long)tu.used[DMM_AXIS_OWNED], (unsigned long long)c->host_bytes,
                  (unsigned long long)c->granule, (unsigned long long)c->pool_va,
                  (unsigned long long)ps.allocated_bytes.current, (unsigned long long)ps.committed_bytes.current,
                  (unsigned long long)tag_live, (unsigned long long)tag_committed, (unsigned long long)g_live,
                  (unsigned long long)g_committed);
    dmm__json_put(&j, "\"pool\":%s,\"arena\":%s,\"tags\":", pj, aj);
    dmm__device_tags_json_locked(c, &j, snapshot);
    dmm__json_put(&j, ",\"graphs\":");
    dmm__device_graphs_json_locked(c, &j, snapshot);
    if (snapshot) {
        put_pool_layout(c, &j, runs, nruns, pblocks, nblocks, ps.allocations.current);
        dmm__json_put(&j, ",");
        dmm__device_history_json(c, &j); /* (its lock is a leaf) */
    }
    dmm__json_put(&j, "}");
    pthread_mutex_unlock(&c->lock);
    free(runs);
    free(pblocks);
    return dmm__json_finish(&j, needed, "dmm device stats JSON");
}

dmm_status dmm_device_stats_json(dmm_device *c, char *buf, size_t cap, size_t *needed) {
    if (c == NULL) return dmm__device_null("dmm_device_stats_json", "a device");
    return write_json(c, buf, cap, needed, false);
}

dmm_status dmm_device_snapshot_json(dmm_device *c, char *buf, size_t cap, size_t *needed) {
    if (c == NULL) return dmm__device_null("dmm_device_snapshot_json", "a device");
    return write_json(c, buf, cap, needed, true);
}

dmm_pool *dmm_device_pool(dmm_device *c) { return c != NULL ? c->pool : NULL; }

dmm_lease_id dmm_device_lease(const dmm_device *c) { return c != NULL ? c->lease : 0; }

bool dmm_device_contains(const dmm_device *c, const void *ptr) {
    return c != NULL && (uintptr_t)ptr >= c->va && (uintptr_t)ptr - c->va < c->reserve;
}
