/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/jobs.c — the jobs floor: the device's deferred work, polled and taken back.
 *
 * What it owns: the context's deferred queue (dmm/deferred.h) and the jobs in it — decommits of an
 * offload's pieces and releases of segments, each gated by events. A job carries its own finish
 * callback, set by the floor that queued it (offload.c, tags.c, graphs.c), so a poll never needs to
 * know what the job was for: the queue's on_done, a failed request taken out, and the take-back after
 * a confirmed loss all end in `finish`, then in the job's event going (not after a loss: the context
 * took the events) and the job being freed.
 *
 * The trade-off: a failed request is taken out of the queue at once (its owner puts the memory back
 * in service) rather than retried, so one bad event never stalls everything queued behind it.
 *
 * Invariants (dev.lock): queued = jobs in the queue; every job leaves through exactly one finish;
 * polls counts the polls that found jobs queued (offload.c measures how long an offload pends by it).
 */
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "driver/call.h"
#include "jobs.h"

/* Ends a job that left the queue. */
static void job_end(dmm_device *c, device_job *j, device_job_end how, dmm_status status) {
    dmm_atomic_sub_relaxed(&c->queued, 1);
    j->finish(c, j, how, status);
    if (j->ev != NULL && how != DEVICE_JOB_TAKEN_BACK) (void)dmm__drv_event_destroy(c->drv, j->ev);
    free(j);
}

/* on_done of the deferred queue (runs inside a poll, dev.lock held by the poller). */
static void job_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o) {
    job_end(user, r->user, DEVICE_JOB_RAN,
            dmm_release_state_of(o) == DMM_RELEASE_COMPLETE ? DMM_OK : DMM_ERR_QUARANTINED);
}

dmm_status dmm__device_jobs_open(dmm_device *c) {
    dmm_deferred_config dc = {sizeof dc, c->drv, 4096, job_done, c};
    return dmm_deferred_create(&dc, &c->q);
}

dmm_status dmm__device_jobs_close(dmm_device *c) {
    dmm_status s = c->q != NULL ? dmm_deferred_destroy(c->q) : DMM_OK;
    if (s == DMM_OK) c->q = NULL;
    return s;
}

device_job *dmm__device_job_new(device_job_finish finish, void *owner) {
    device_job *j = calloc(1, sizeof *j);
    if (j == NULL) return NULL;
    j->finish = finish;
    j->owner = owner;
    return j;
}

dmm_status dmm__device_job_queue(dmm_device *c, dmm_deferred_request *r, device_job *j) {
    r->user = j;
    dmm_status s = dmm_deferred_enqueue(c->q, r);
    if (s == DMM_OK) dmm_atomic_add_relaxed(&c->queued, 1);
    return s;
}

dmm_status dmm__device_jobs_poll_locked(dmm_device *c) {
    dmm_status result = DMM_OK;
    if (dmm_atomic_load_relaxed(&c->queued) == 0) return DMM_OK;
    for (int round = 0; round < 4; round++) {
        size_t ran = 0;
        dmm_status s = dmm_deferred_poll(c->q, &ran);
        if (s == DMM_OK) {
            dmm_clear_error(); /* a pending event leaves its BUSY sentence behind: not a failure */
            break;
        }
        /* lost: the queue asks nothing more of the driver; its requests wait for confirm_lost */
        if (s == DMM_ERR_DEVICE_LOST)
            return dmm__error_wrap(s, "dmm device: polling the queue of device %d: the device is lost; the queue asks "
                                      "the driver nothing more and its requests wait for the confirmation",
                                   (int)c->dev.index);
        /* The head failed (a FAILED decommit changed nothing, or its event cannot be asked): take it out so
         * that the queue moves on; its finish puts the memory back in service (a segment: restore maps it
         * again). */
        dmm_status failed =
            dmm__error_wrap(s, "dmm device: a queued decommit or release failed and was taken out of the queue");
        dmm_deferred_request r;
        if (dmm_deferred_take(c->q, &r) != DMM_OK) break;
        job_end(c, r.user, DEVICE_JOB_FAILED, s);
        result = failed;
    }
    c->polls++;
    return result;
}

dmm_status dmm__device_lock_and_poll(dmm_device *c, const char *op) {
    dmm_status s = dmm__device_refuse_lost(c, op);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&c->lock);
    if (dmm__device_jobs_poll_locked(c) == DMM_ERR_DEVICE_LOST) { /* this poll found the loss */
        pthread_mutex_unlock(&c->lock);
        return dmm__device_refuse_lost(c, op);
    }
    return DMM_OK;
}

void dmm__device_jobs_take_back_locked(dmm_device *c) {
    if (c->jobs_taken_back) return;
    dmm_deferred_request r;
    while (dmm_deferred_take(c->q, &r) == DMM_OK) job_end(c, r.user, DEVICE_JOB_TAKEN_BACK, DMM_ERR_DEVICE_LOST);
    dmm_clear_error(); /* take's "empty" ends the loop */
    c->jobs_taken_back = true;
}
