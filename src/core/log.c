/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/log.c — the process-wide log callback. The library never prints: without a callback
 * every log line is dropped. The callback is read under a lock and called outside it. */
#include <stdarg.h>
#include <stdio.h>

#include "core/core.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static dmm_log_fn log_fn;
static void *log_user;
static dmm_log_level log_max = DMM_LOG_WARN;

void dmm_set_log_callback(dmm_log_fn fn, void *user, dmm_log_level max_level) {
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    log_max = max_level;
    pthread_mutex_unlock(&log_lock);
}

void dmm_log(dmm_log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&log_lock);
    dmm_log_fn fn = log_fn;
    void *user = log_user;
    dmm_log_level max = log_max;
    pthread_mutex_unlock(&log_lock);
    if (fn == NULL || level > max) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(user, level, buf);
}
