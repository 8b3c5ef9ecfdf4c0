/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/records.h — the arena's allocation records (records.c). Never installed. */
#ifndef DMM_MECH_RECORDS_H
#define DMM_MECH_RECORDS_H

#include "mech/arena_types.h"

/* Finds the live record at `off` (NULL if none). */
arena_record *dmm__arena_find(const dmm_arena *a, uint64_t off);
/* Removes r from the hash and frees it. */
void dmm__arena_forget(dmm_arena *a, arena_record *r);
/* Validates an allocation value against its live record under the lock: ptr, bytes, align and id
 * must all match. Sets the last error (naming `op`) and returns its status on a mismatch. */
dmm_status dmm__arena_lookup(dmm_arena *a, const dmm_allocation *al, const char *op, arena_record **out);
/* For the calls that take a range of an allocation as whole chunks (dmm_prefix_create, dmm_export_range):
 * its refusal, after the caller set the reason (dmm_error_set): "<op> of [offset, +bytes) of the
 * allocation at <ptr> refused, nothing was changed: <reason>" with status code, which it returns. */
dmm_status dmm__arena_range_refused(dmm_status code, const char *op, const dmm_allocation *al, dmm_range range);
/* Checks such a range of r, al's live record: r is not quarantined and the range is non-empty, starts on
 * a granule and is whole granules (`what` names the thing made in the reason: "a prefix"). Gives its
 * granules [*g0, *g0 + *ng); refuses as dmm__arena_range_refused. */
dmm_status dmm__arena_range_granules(const dmm_arena *a, const arena_record *r, const dmm_allocation *al,
                                     dmm_range range, const char *what, const char *op, uint64_t *g0,
                                     uint64_t *ng);
/* Gives a whole span back: granules backed by a poisoned chunk go to the quarantine, the rest to the
 * free list. Needs dmm__arena_span_room(). */
void dmm__arena_span_free(dmm_arena *a, uint64_t off, uint64_t len);
/* The free-list and quarantine entries dmm__arena_span_free may need for this span. */
size_t dmm__arena_span_room(const dmm_arena *a, uint64_t off, uint64_t len);
/* Puts a whole span into the quarantine (never handed out again). */
void dmm__arena_span_quarantine(dmm_arena *a, uint64_t off, uint64_t len);
/* Grows the hash so that one more record fits (false when out of host memory; nothing changed). */
bool dmm__arena_records_room(dmm_arena *a);
/* Inserts a new record (needs dmm__arena_records_room). */
void dmm__arena_records_insert(dmm_arena *a, arena_record *r);
/* Frees every record (destroy, or a confirmed device loss: no driver call); the hash stays. */
void dmm__arena_records_free(dmm_arena *a);

#endif /* DMM_MECH_RECORDS_H */
