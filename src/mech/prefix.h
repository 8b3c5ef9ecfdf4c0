/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/prefix.h — the arena's shared prefixes (prefix.c): the shared_mapping capability. Never
 * installed. */
#ifndef DMM_MECH_PREFIX_H
#define DMM_MECH_PREFIX_H

#include "mech/arena_types.h"

extern const dmm_shared_mapping_ops dmm__arena_shared_ops;

/* Frees every prefix record (destroy, or a confirmed device loss: no driver call). Under the lock. */
void dmm__arena_prefixes_free(dmm_arena *a);

#endif /* DMM_MECH_PREFIX_H */
