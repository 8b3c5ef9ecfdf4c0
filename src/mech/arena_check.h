/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/arena_check.h — the arena's expensive invariant check (arena_check.c). Never installed. */
#ifndef DMM_MECH_ARENA_CHECK_H
#define DMM_MECH_ARENA_CHECK_H

#include "mech/arena_types.h"

/* Under the lock: NULL when every invariant holds, else a sentence fragment. */
const char *dmm__arena_check_locked(dmm_arena *a);

#endif /* DMM_MECH_ARENA_CHECK_H */
