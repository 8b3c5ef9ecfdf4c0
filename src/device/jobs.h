/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/jobs.h — the jobs floor: our requests in the deferred queue. Internal. */
#ifndef DMM_DEVICE_JOBS_H
#define DMM_DEVICE_JOBS_H

#include "types.h"

/* Creates / destroys the context's queue (c->q). Destroy is refused (BUSY) while jobs are queued. */
dmm_status dmm__device_jobs_open(dmm_device *c);
dmm_status dmm__device_jobs_close(dmm_device *c);

/* A job that calls `finish` when it leaves the queue; NULL when out of host memory. */
device_job *dmm__device_job_new(device_job_finish finish, void *owner);
/* Queues `r` with `j` as its user (dev.lock held). On success the job (and j->ev) belong to the
 * queue until its finish; on failure nothing was queued and the job is still the caller's. */
dmm_status dmm__device_job_queue(dmm_device *c, dmm_deferred_request *r, device_job *j);

/* Runs the jobs whose events completed (dev.lock held; never waits). A job whose request FAILED, or
 * whose event cannot be asked, is taken out (its finish: DEVICE_JOB_FAILED) so that the queue moves
 * on, and the call reports it; DMM_ERR_DEVICE_LOST (with a sentence) when the device is lost: the
 * jobs then wait for the confirmation. */
dmm_status dmm__device_jobs_poll_locked(dmm_device *c);
/* The opening of a slow path that asks the driver: refused (naming `op`) when the device is lost;
 * else dev.lock taken and the jobs polled — and when that poll found the loss, the lock is released
 * and the call refused. DMM_OK: dev.lock held. */
dmm_status dmm__device_lock_and_poll(dmm_device *c, const char *op);
/* After a confirmed loss (dev.lock held): takes every job back unrun (finish: DEVICE_JOB_TAKEN_BACK),
 * with no driver call; once. */
void dmm__device_jobs_take_back_locked(dmm_device *c);

#endif /* DMM_DEVICE_JOBS_H */
