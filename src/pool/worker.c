/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/worker.c — the pool's own threads (the stock's, the planner's: types.h, pworker): started
 * with every signal blocked, so that the process's handlers run on its own threads, and stopped by
 * setting `stop`, waking and joining them.
 *
 * Invariants: `running` ⇔ the thread was created and not yet joined; the mutex and both conditions
 * exist exactly while it runs (a failed start leaves nothing); `idle` waits on CLOCK_MONOTONIC.
 */
#include <signal.h>
#include <stdbool.h>

#include "pool/types.h"

bool dmm__pool_worker_start(pworker *w, void *(*main_fn)(void *), void *arg, const char *what, const char *remedy) {
    pthread_condattr_t ca;
    pthread_mutex_init(&w->m, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the bounded waits for `idle` measure this clock */
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->idle, &ca);
    pthread_condattr_destroy(&ca);
    w->stop = false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&w->thread, NULL, main_fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        pthread_cond_destroy(&w->idle);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->m);
        dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                      "dmm_pool_create: starting %s failed (error %d); create the pool with %s or free some "
                      "threads",
                      what, e, remedy);
        return false;
    }
    w->running = true;
    return true;
}

void dmm__pool_worker_stop(pworker *w) {
    if (!w->running) return;
    pthread_mutex_lock(&w->m);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->m);
    pthread_join(w->thread, NULL);
    w->running = false;
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->m);
}
