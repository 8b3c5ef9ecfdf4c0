/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/release.h — the arena's release state machine (release.c): the mechanism's release slot
 * and the virtual-backing decommit slot. Never installed. Each takes the arena's lock. */
#ifndef DMM_MECH_RELEASE_H
#define DMM_MECH_RELEASE_H

#include "mech/arena_types.h"

dmm_release_outcome dmm__arena_release(void *impl, const dmm_allocation *al);
dmm_release_outcome dmm__arena_decommit(void *impl, const dmm_allocation *al, dmm_range range);

#endif /* DMM_MECH_RELEASE_H */
