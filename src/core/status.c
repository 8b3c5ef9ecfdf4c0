/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/status.c — status names, the per-thread last-error sentence (and an earlier failure kept
 * while later calls run), and the version.
 *
 * dmm_error_set never logs: it runs under locks, and the log callback must never be called under
 * one (status.h). Whoever returns the failure to the user may log it.
 *
 * Invariant: dmm_last_status() == DMM_OK ⇔ dmm_last_error() is "" (until the next failure or clear).
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/core.h"

static _Thread_local char tls_error[DMM__ERROR_CAP];
static _Thread_local dmm_status tls_status = DMM_OK;

uint32_t dmm_version(void) { return DMM_VERSION_NUMBER; }

const char *dmm_version_string(void) {
#define DMM_STR2(x) #x
#define DMM_STR(x) DMM_STR2(x)
    return DMM_STR(DMM_VERSION_MAJOR) "." DMM_STR(DMM_VERSION_MINOR) "." DMM_STR(DMM_VERSION_PATCH);
#undef DMM_STR
#undef DMM_STR2
}

const char *dmm_status_str(dmm_status status) {
    switch (status) {
    case DMM_OK: return "DMM_OK";
    case DMM_ERR_INVALID_ARGUMENT: return "DMM_ERR_INVALID_ARGUMENT";
    case DMM_ERR_OUT_OF_MEMORY: return "DMM_ERR_OUT_OF_MEMORY";
    case DMM_ERR_BUDGET: return "DMM_ERR_BUDGET";
    case DMM_ERR_UNSUPPORTED: return "DMM_ERR_UNSUPPORTED";
    case DMM_ERR_WRONG_DEVICE: return "DMM_ERR_WRONG_DEVICE";
    case DMM_ERR_WRONG_MECHANISM: return "DMM_ERR_WRONG_MECHANISM";
    case DMM_ERR_UNKNOWN_ALLOCATION: return "DMM_ERR_UNKNOWN_ALLOCATION";
    case DMM_ERR_QUARANTINED: return "DMM_ERR_QUARANTINED";
    case DMM_ERR_DEVICE_LOST: return "DMM_ERR_DEVICE_LOST";
    case DMM_ERR_BUSY: return "DMM_ERR_BUSY";
    case DMM_ERR_DRIVER: return "DMM_ERR_DRIVER";
    case DMM_ERR_VERSION_MISMATCH: return "DMM_ERR_VERSION_MISMATCH";
    case DMM_ERR_SHORT_STRUCT: return "DMM_ERR_SHORT_STRUCT";
    }
    return "DMM_ERR_UNKNOWN_STATUS";
}

const char *dmm_last_error(void) { return tls_error; }

dmm_status dmm_last_status(void) { return tls_status; }

void dmm_clear_error(void) {
    tls_error[0] = '\0';
    tls_status = DMM_OK;
}

dmm_status dmm_error_set(dmm_status status, const char *fmt, ...) {
    char buf[sizeof tls_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap); /* format first: fmt's arguments may be tls_error itself */
    va_end(ap);
    snprintf(tls_error, sizeof tls_error, "%s", buf);
    tls_status = status;
    return status;
}

dmm_status dmm__error_wrap(dmm_status status, const char *fmt, ...) {
    char ctx[sizeof tls_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    if (tls_error[0] == '\0') return dmm_error_set(status, "%s", ctx);
    return dmm_error_set(status, "%s: %s", ctx, tls_error); /* dmm_error_set formats first */
}

dmm_status dmm__error_keep(dmm_error_kept *k, dmm_status s) {
    if (s == DMM_OK || k->status != DMM_OK) return s; /* a success, or the first failure is kept already */
    k->status = s;
    snprintf(k->text, sizeof k->text, "%s", tls_error);
    return s;
}

dmm_status dmm__error_restore(const dmm_error_kept *k) {
    if (k->status == DMM_OK) return DMM_OK;
    return dmm_error_set(k->status, "%s", k->text);
}

const char *dmm__error_kept_text(const dmm_error_kept *k) { return k->status == DMM_OK ? "" : k->text; }

const char *dmm__fmt_bytes(uint64_t bytes, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}
