/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/chunks.h — the arena's physical chunks, driver calls and accounting (chunks.c). Never
 * installed. All of it runs under the arena's lock, except the hook calls where said. */
#ifndef DMM_MECH_CHUNKS_H
#define DMM_MECH_CHUNKS_H

#include "mech/arena_types.h"

/* ---- driver calls, accounting (chunks.c) ---- */
/* Each counts itself in the stats and goes through the driver's funnel; a lost arena makes no call
 * and returns DMM_ERR_DEVICE_LOST. */
dmm_status dmm__arena_drv_create(dmm_arena *a, uint64_t bytes, dmm_phys *phys);
dmm_status dmm__arena_drv_release(dmm_arena *a, dmm_phys phys, uint64_t bytes);
dmm_status dmm__arena_drv_map(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_phys phys);
dmm_status dmm__arena_drv_unmap(dmm_arena *a, uint64_t off, uint64_t bytes);
dmm_status dmm__arena_drv_set_access(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_access access);
dmm_status dmm__arena_lost_error(dmm_arena *a, const char *op);
/* Sharing (dmm/share.h): a handle that can be exported; a new descriptor for one (counted in
 * exported_handles); a handle for another process's descriptor. */
dmm_status dmm__arena_drv_create_exportable(dmm_arena *a, uint64_t bytes, dmm_phys *phys);
dmm_status dmm__arena_drv_export(dmm_arena *a, dmm_phys phys, dmm_access access, int *fd);
dmm_status dmm__arena_drv_import(dmm_arena *a, int fd, uint64_t bytes, dmm_access access, dmm_phys *phys);

/* Charges before a driver call: from the running commit's pot if there is one (a shortfall sets
 * pot->short_of and fails with DMM_ERR_BUSY), else through the hook. A refusal changes nothing. */
dmm_status dmm__arena_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op);
/* Refunds after a driver call freed the bytes (into the pot while a commit runs); does nothing once
 * the arena is lost. */
void dmm__arena_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes);
/* The hook itself (no pot, no arena state): charge with the sentence on refusal, and refund. Safe
 * to call without the arena's lock. */
dmm_status dmm__arena_hook_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op);
void dmm__arena_hook_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes);

/* ---- chunks (chunks.c) ---- */
/* Makes room so that the next steps cannot fail for lack of host memory: `chunks` new chunk slots,
 * `handles` more quarantined handles and cached handles, `spans` more free-list and quarantine
 * entries. False (nothing changed, error set naming op) when out of memory. */
bool dmm__arena_room(dmm_arena *a, size_t chunks, size_t handles, size_t spans, const char *op);

/* A birth maps a chunk without access: its caller grants it over the whole contiguous run it births,
 * in one driver call (a set_access may span many mappings), once every chunk of the run is mapped.
 * A birth that takes `access` records it in the chunk (a remap after a failed decommit sets it again):
 * the caller grants that same access.
 * Access to granules [first, end), every one of them mapped, as one set_access; its failure is
 * returned (named with op) and the caller's transaction unwinds the chunks it births. */
dmm_status dmm__arena_grant(dmm_arena *a, uint64_t first, uint64_t end, dmm_access access, const char *op);

/* Births a LIVE chunk over granules [first, first + n) (all unbacked): a cached handle of that size
 * or (after charging OWNED) a new one, then charge MAPPED, map (access READ_WRITE, granted by the
 * caller: dmm__arena_grant). On failure it undoes its own steps (see dmm__arena_chunk_unwind) and
 * returns the error; *leaked is set when the undo could not fully unwind. Needs
 * dmm__arena_room(1, 1, 1). */
dmm_status dmm__arena_chunk_birth(dmm_arena *a, uint64_t first, uint64_t n, const char *op, uint32_t *slot,
                                  bool *leaked);

/* Births a LIVE chunk over granules [first, first + n(src)) (all unbacked) that maps the handle of
 * chunk `src` (LIVE, or POISONED for a prefix's piece) a second time: it joins src's ring (no handle
 * is created, OWNED is not charged), then charge MAPPED, map (`access` granted by the caller). Failure
 * and *leaked as dmm__arena_chunk_birth. Needs dmm__arena_room(1, 0, 1). */
dmm_status dmm__arena_chunk_alias(dmm_arena *a, uint32_t src, uint64_t first, dmm_access access, const char *op,
                                  uint32_t *slot, bool *leaked);

/* Births a LIVE chunk over granules [first, first + piece->n) (all unbacked) that maps the PARKED
 * handle of a prefix piece: a new ring of one (OWNED is not charged: the handle is owned already),
 * then charge MAPPED, map (`access` granted by the caller). On failure the handle is parked again (or, if its unmap
 * failed, stays in a poisoned chunk). Needs dmm__arena_room(1, 0, 1). */
dmm_status dmm__arena_chunk_adopt(dmm_arena *a, arena_piece *piece, uint64_t first, dmm_access access,
                                  const char *op, uint32_t *slot, bool *leaked);

/* Births a LIVE chunk over granules [first, first + n) (all unbacked) that maps another process's
 * memory: imports `fd` (the caller keeps it) as a new ring of one marked imported (OWNED is not
 * charged: the exporter owns it), then charge MAPPED, map (`access` granted by the caller). On failure the imported
 * handle is released again. Needs dmm__arena_room(1, 1, 1). */
dmm_status dmm__arena_chunk_import(dmm_arena *a, int fd, uint64_t first, uint64_t n, dmm_access access,
                                   const char *op, uint32_t *slot, bool *leaked);

/* Undoes a chunk born by the current operation (BIRTH or LIVE, refs 0): unmap, refund mapped, then
 * (unless other chunks of its ring still map the handle) the handle back to the cache it came from
 * or released (refund owned). An unmap that fails poisons the chunk; a release that fails
 * quarantines the handle. Returns false when something could not be undone. */
bool dmm__arena_chunk_unwind(dmm_arena *a, uint32_t slot);

/* Unmaps a chunk (the VA stays reserved; the chunk stays in the table, state unchanged). On success
 * the stats say so, but the MAPPED refund is the caller's: a decommit refunds only once every unmap
 * of the transaction succeeded. */
dmm_status dmm__arena_chunk_unmap(dmm_arena *a, arena_chunk *c);
/* Maps an unmapped LIVE chunk again with its own handle and its own access (a decommit's restore).
 * On a set-access failure the map is undone; returns the failure. */
dmm_status dmm__arena_chunk_remap(dmm_arena *a, arena_chunk *c, bool *still_mapped);
/* Ends an unmapped LIVE chunk with refs 0 (its MAPPED refund already made): its granules become
 * unbacked, its slot free. If other chunks of its ring still map the handle it just leaves the ring;
 * else, if a prefix holds the handle, the handle is parked in its piece (still owned); an imported
 * handle is released (no OWNED refund: it was never charged); else it goes to the cache (if allowed,
 * it fits and it was never exported) or is released (refund OWNED); a failed
 * release quarantines the handle. Returns the bytes that stay owned because of a failure (0 when the
 * handle was kept by its ring, cached or released). Needs dmm__arena_room(0, 1, 0). */
uint64_t dmm__arena_chunk_retire(dmm_arena *a, arena_chunk *c, bool allow_cache);
/* Marks a chunk that is still mapped as POISONED and moves the free VA of its granules into the
 * quarantine. Returns the bytes it newly keeps owned: the chunk's, unless another mapping of its
 * handle is poisoned already (a handle is owned once, however many of its mappings are stuck).
 * Needs dmm__arena_room(0, 0, dmm__arena_poison_room(chunk's granules)). */
uint64_t dmm__arena_chunk_poison(dmm_arena *a, arena_chunk *c);

/* The span entries that poisoning chunks over granules [first, first + n) may need: one split of
 * the free list, plus one quarantine entry per free piece there (the granules at the edge of an
 * allocation may hold many free gaps between small allocations). */
size_t dmm__arena_poison_room(const dmm_arena *a, uint64_t first, uint64_t n);

/* Releases every cached handle (refund OWNED per success; a failure quarantines it). DMM_OK when
 * all went, else the first failure. */
dmm_status dmm__arena_drain(dmm_arena *a);
/* Destroy's give-back: releases quarantined handles again, unmaps and releases poisoned chunks. */
dmm_status dmm__arena_give_back(dmm_arena *a);

#endif /* DMM_MECH_CHUNKS_H */
