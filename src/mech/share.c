/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/share.c — the arena's memory shared with other processes (dmm/share.h): export of an
 * allocation's committed chunks as descriptors, and import of another process's descriptors into a
 * new allocation, as a fourth kind of the arena's one transaction (commit.c).
 *
 * Idea: an export hands out the driver's descriptor of each whole chunk of the range and marks the
 * chunk's ring exported, so that its handle never reaches the cache (a new allocation would write
 * into memory an importer still reads); its last mapping releases it (refund OWNED, counted in
 * exported_released_bytes, said in the release's outcome). An import files each descriptor as a
 * handle of the driver (its own reference) in a ring marked imported: charged MAPPED only, never
 * cached, released (not refunded on OWNED: it was never charged) with its last mapping. Everything
 * else — unmap, poison, quarantine, decommit, release outcomes — is the arena's usual machinery.
 *
 * Trade-off: only whole chunks that the allocation alone references can be exported (a chunk under
 * a small allocation may hold other allocations' bytes, which an importer must not see); a prefix
 * made of exported memory, or an export of a prefix's memory, is refused (a parked handle would
 * forget the mark).
 *
 * Invariants (with arena_types.h): a ring is imported or exported as a whole (alias joins copy the
 * marks); imported rings hold no piece; stats.imported_bytes = Σ imported ring bytes + qimported.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

#include "mech/chunks.h"
#include "mech/commit.h"
#include "mech/records.h"
#include "mech/share.h"

/* 128 random bits from the kernel (getrandom blocks only before the pool is initialised at boot). */
static dmm_status random_token(uint8_t *out, const char *op) {
    size_t got = 0;
    while (got < DMM_EXPORT_TOKEN_BYTES) {
        ssize_t n = getrandom(out + got, DMM_EXPORT_TOKEN_BYTES - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return dmm_error_set(DMM_ERR_DRIVER, "%s: getrandom failed (errno %d), so no token could be made; nothing "
                                                 "was exported", op, errno);
        got += (size_t)n;
    }
    return DMM_OK;
}

/* ---- export ---- */

dmm_status dmm__arena_export(void *impl, const dmm_allocation *al, dmm_range range, dmm_access access,
                             dmm_export *out) {
    dmm_arena *a = impl;
    const char *op = "dmm_export_range";
    dmm_export_init(out);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    uint32_t slots[DMM_EXPORT_MAX_CHUNKS];
    uint32_t n = 0;
    uint64_t g0 = 0, ng = 0, bytes = range.bytes;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = dmm__arena_range_granules(a, r, al, range, "an export", op, &g0, &ng);
    if (s != DMM_OK) goto out;
#define REFUSE(code, ...)                                                                                      \
    do {                                                                                                       \
        dmm_error_set(code, __VA_ARGS__);                                                                      \
        s = dmm__arena_range_refused(code, op, al, range);                                                     \
        goto out;                                                                                              \
    } while (0)
    for (uint64_t g = g0; g < g0 + ng;) {
        const arena_chunk *c = arena_chunk_at(a, g);
        unsigned long long at = (unsigned long long)(range.offset + (g - g0) * a->gran);
        if (c == NULL || !rec_bit(r, g))
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu is not committed by this allocation: commit "
                                             "(and fill) what you export first", at);
        if (c->state != CHUNK_LIVE)
            REFUSE(DMM_ERR_QUARANTINED, "the granule at offset %llu is backed by a poisoned chunk", at);
        if (c->first != g || c->first + c->n > g0 + ng)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk backing the granule at offset %llu (%llu granules) reaches "
                                             "outside the range: an export is whole chunks (the ranges of whole "
                                             "commits)", at, (unsigned long long)c->n);
        if (c->refs != c->n)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk at offset %llu also backs other allocations, whose bytes an "
                                             "importer would see: export memory one allocation alone commits", at);
        if (c->imported)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu is imported from another process: let the "
                                             "importer ask its exporter", at);
        if (c->access != DMM_ACCESS_READ_WRITE || c->piece != NULL)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu belongs to a shared prefix: export the "
                                             "prefix owner's memory before making a prefix of it", at);
        if (n == DMM_EXPORT_MAX_CHUNKS)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the range holds more than %d chunks: export it in parts, or commit it "
                                             "in larger chunks (chunk_limit_bytes)", DMM_EXPORT_MAX_CHUNKS);
        slots[n++] = a->gmap[g] - 1;
        g += c->n;
    }
#undef REFUSE
    if ((s = random_token(out->token, op)) != DMM_OK) goto out;
    for (uint32_t i = 0; i < n; i++) {
        const arena_chunk *c = &a->chunks[slots[i]];
        s = dmm__arena_drv_export(a, c->phys, access, &out->fds[i]);
        if (s != DMM_OK) {
            dmm_export_close(out); /* nothing was marked yet: as if never asked */
            s = dmm__error_wrap(s, "%s of [%zu, +%zu) at %p: exporting chunk %u of %u failed, nothing was changed", op,
                                range.offset, range.bytes, al->ptr, i + 1, n);
            goto out;
        }
        out->chunk_bytes[i] = chunk_bytes(a, c);
    }
    for (uint32_t i = 0; i < n; i++) { /* the whole ring: an alias of it must not cache the handle either */
        uint32_t k = slots[i], j = k;
        do {
            a->chunks[j].exported = true;
            j = a->chunks[j].twin;
        } while (j != k);
    }
    out->nchunks = n;
    out->bytes = bytes;
    out->granule = a->gran;
    out->device = a->device;
    out->access = (uint32_t)access;
out:
    dmm_lock_release(&a->lock);
    return s;
}

/* ---- import ---- */

dmm_status dmm__arena_import_check(dmm_arena *a, const dmm_export *ex, dmm_access access, const char *op) {
    if (ex->granule != a->gran)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s refused: the export's granule is %llu bytes, the %s's is "
                                                       "%llu; import into an arena over the same kind of driver",
                             op, (unsigned long long)ex->granule, a->where, (unsigned long long)a->gran);
    if (ex->device.tier != a->device.tier || ex->device.index != a->device.index)
        return dmm_error_set(DMM_ERR_WRONG_DEVICE, "%s refused: the export is memory of device (tier %d, index %d), "
                                                   "this is the %s; import into an arena of that device",
                             op, (int)ex->device.tier, (int)ex->device.index, a->where);
    if (access == DMM_ACCESS_READ_WRITE && ex->access != DMM_ACCESS_READ_WRITE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s refused: read-write access asked, but the memory was "
                                                       "exported read-only; import it DMM_ACCESS_READ", op);
    if (ex->bytes > a->reserve)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %llu bytes refused: the %s reserved only %llu bytes of "
                                                    "address space; create it with a larger reserve_bytes",
                             op, (unsigned long long)ex->bytes, a->where, (unsigned long long)a->reserve);
    return DMM_OK;
}

typedef struct import_req {
    const dmm_export *ex;
    dmm_access access;
} import_req;

/* The record is still the fresh VA-only one (nothing committed); the call charges MAPPED only. */
static dmm_status import_plan(dmm_arena *a, arena_record *r, void *req, const char *op, uint64_t need[2]) {
    const import_req *q = req;
    (void)a;
    if (r->nrefs != 0 || r->state != RECORD_LIVE || r->bytes != q->ex->bytes)
        return dmm_error_set(DMM_ERR_BUSY, "%s: the allocation made for the import changed under it; nothing was "
                                           "imported", op);
    need[DMM_AXIS_OWNED] = 0;
    need[DMM_AXIS_MAPPED] = q->ex->bytes;
    return DMM_OK;
}

static dmm_status import_apply(dmm_arena *a, arena_record *r, void *req, const char *op, arena_txn *t) {
    const import_req *q = req;
    const dmm_export *ex = q->ex;
    size_t pieces = dmm__spans_count_overlapping(&a->free, r->off, ex->bytes);
    if (!dmm__arena_room(a, ex->nchunks, ex->nchunks, 2 * (size_t)ex->nchunks + 4 + pieces, op))
        return DMM_ERR_OUT_OF_MEMORY;
    if (!dmm__arena_txn_room(t, ex->nchunks, 1))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the import's log; nothing was changed",
                             op);
    uint64_t g = r->off / a->gran;
    for (uint32_t i = 0; i < ex->nchunks; i++) {
        uint32_t slot = 0;
        bool lk = false;
        dmm_status s = dmm__arena_chunk_import(a, ex->fds[i], g, ex->chunk_bytes[i] / a->gran, q->access, op, &slot,
                                               &lk);
        t->leaked |= lk;
        if (s != DMM_OK)
            return dmm__error_wrap(s, "%s: importing chunk %u of %u (%llu bytes, descriptor %d) failed", op, i + 1,
                                   ex->nchunks, (unsigned long long)ex->chunk_bytes[i], ex->fds[i]);
        dmm__arena_txn_born(t, slot);
        g += ex->chunk_bytes[i] / a->gran;
    }
    dmm_status s = dmm__arena_grant(a, r->off / a->gran, g, q->access, op);
    if (s != DMM_OK) return s;
    for (uint64_t k = r->off / a->gran; k < g; k++) dmm__arena_txn_ref(a, r, t, k); /* cannot fail */
    return DMM_OK;
}

static const arena_txn_kind import_kind = {import_plan, import_apply, "nothing was imported"};

dmm_status dmm__arena_import_commit(dmm_arena *a, const dmm_allocation *al, const dmm_export *ex, dmm_access access,
                                    const char *op) {
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    import_req q = {ex, access};
    if (s == DMM_OK) s = dmm__arena_txn_run(a, r->off, r->id, &import_kind, &q, op, NULL);
    dmm_lock_release(&a->lock);
    return s;
}
