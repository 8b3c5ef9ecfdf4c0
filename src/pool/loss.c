/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/loss.c — the pool's side of a device loss (pool.h, "Device loss"; DESIGN §4.10).
 *
 * What it owns: the moment the pool starts refusing, and the sentences of its refusals. The loss
 * itself is not the pool's: it is latched on the driver (src/driver/call.h), by whichever of the
 * driver's users met it first (the pool's own event calls, the mechanism's calls made for the pool
 * or for another of its users), and every later driver call through the wrappers is refused there.
 * So the pool asks dmm__drv_lost(p->drv) before anything that would reach the driver, directly or
 * through the mechanism, and needs no flag of its own for that.
 *
 * What it adds, and why: `refusing`. The hot path (a malloc served from a mapped free block) makes
 * no driver call and asks nobody: it tests only p->refusing, one load of the pool's own line. The
 * pool sets it the first time it notices the loss — a call of its own, or one the mechanism made for
 * it, reported DMM_ERR_DEVICE_LOST, or a slow path (growth, trim, empty_cache, destroy, a
 * cross-stream free) asked the driver at its entry and found it lost. From then on even a malloc that
 * a mapped free block would fit is refused (its memory is gone). A loss another user met is
 * therefore noticed at the pool's next slow path, as the contract says.
 *
 * Invariant: p->refusing goes NULL → a static fragment once and never back; once it is set,
 * dmm__drv_lost(p->drv) holds (notice latches the driver first).
 */
#include <stdio.h>

#include "pool/types.h"

void dmm__pool_notice_loss(dmm_pool *p, const char *where) {
    dmm__drv_latch(p->drv, where); /* a mechanism's report the driver did not see; no-op once latched */
    const char *none = NULL;
    if (!dmm_atomic_cas_strong_acq_rel(&p->refusing, &none, where))
        return; /* noticed before */
    dmm_log(DMM_LOG_WARN,
             "pool %p: the device was lost (first seen at %s; the pool noticed it while %s); the pool makes no more "
             "driver calls, and frees only its bookkeeping",
             (void *)p, dmm__drv_lost_why(p->drv), where);
}

dmm_status dmm__pool_lost_error(const dmm_pool *p, const char *op) {
    const char *where = dmm_atomic_load_acquire(&p->refusing);
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "%s: refused without a driver call: the pool's device was lost (the pool noticed it while %s; "
                         "first seen at %s); its memory is gone and the pool serves nothing more. Free what is live if "
                         "you can (frees are accepted, bookkeeping only), tear the context down, call "
                         "dmm_arena_confirm_context_terminated() on the arena, then dmm_pool_destroy()",
                         op, where != NULL ? where : "asking its driver", dmm__drv_lost_why(p->drv));
}

__attribute__((noinline, cold)) dmm_status dmm__pool_malloc_refused(const dmm_pool *p, size_t bytes,
                                                                   dmm_stream stream) {
    char op[96];
    snprintf(op, sizeof op, "dmm_pool_malloc of %zu bytes on stream %p", bytes, stream);
    return dmm__pool_lost_error(p, op);
}
