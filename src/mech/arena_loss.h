/* src/mech/arena_loss.h — what the pool (src/pool/pool.c) asks of an arena about device loss, beyond
 * the public dmm/arena.h. Never installed.
 *
 * The pool and its arena call one driver. A sticky context error that either of them sees is a loss
 * for both (dmm/driver.h: the caller then makes no further calls on that driver). So when one of the
 * pool's own driver calls (an event) reports DMM_ERR_DEVICE_LOST, the pool marks the arena lost: the
 * arena then makes no driver call either, and dmm_arena_confirm_context_terminated accepts the
 * caller's confirmation (it refuses an arena that never saw a loss). And before its slow paths, and
 * at destroy, the pool asks whether the arena is lost (another user of the arena may have seen the
 * loss first) and whether the caller confirmed the context terminated (the arena has then
 * discharged the pool's VA and chunks, and the pool may go without giving them back).
 */
#ifndef DMM_MECH_ARENA_LOSS_H
#define DMM_MECH_ARENA_LOSS_H

#include <stdbool.h>

#include "dmm/mechanism.h"

/* mark: make the arena lost (idempotent; nothing else changes: it refunds nothing and keeps every
 * record until the confirmation). *lost and *confirmed (either may be NULL) receive the state after.
 * No driver call; takes the arena's lock (call it with no pool lock held). DMM_ERR_WRONG_MECHANISM
 * (error set) when m is not an arena. */
dmm_status dmm__arena_device_loss(dmm_mechanism *m, bool mark, bool *lost, bool *confirmed);

#endif /* DMM_MECH_ARENA_LOSS_H */
