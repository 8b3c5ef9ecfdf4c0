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
