/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/share.h — the arena's export and import (share.c): the virtual-backing slots
 * export_range and import of dmm/share.h. Never installed. */
#ifndef DMM_MECH_SHARE_H
#define DMM_MECH_SHARE_H

#include "dmm/share.h"
#include "mech/arena_types.h"

/* The export_range slot. Takes the lock. */
dmm_status dmm__arena_export(void *impl, const dmm_allocation *al, dmm_range range, dmm_access access,
                             dmm_export *out);
/* What the import refuses before it makes anything: a description of another granule or device, an
 * access above the exported one. No lock needed (reads only the arena's constants). */
dmm_status dmm__arena_import_check(dmm_arena *a, const dmm_export *ex, dmm_access access, const char *op);
/* Maps the export into the VA-only allocation `al` (ex->bytes, on a granule) as one transaction:
 * MAPPED charged ahead, every handle imported and mapped with `access`, all undone on failure.
 * Takes the lock. */
dmm_status dmm__arena_import_commit(dmm_arena *a, const dmm_allocation *al, const dmm_export *ex, dmm_access access,
                                    const char *op);

#endif /* DMM_MECH_SHARE_H */
