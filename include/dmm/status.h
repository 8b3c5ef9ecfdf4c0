/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/status.h — status codes, last-error sentences, version, logging.
 *
 * Every fallible dmm call returns a dmm_status (0 = DMM_OK) and writes its outputs through
 * out-parameters. On failure the calling thread's dmm_last_error() holds one full sentence: the
 * operation, the values involved and what to do about it. The numbers below are frozen: new codes
 * are only ever appended.
 *
 * Thread contract: all functions here are thread-safe; the last error is per thread.
 */
#ifndef DMM_STATUS_H
#define DMM_STATUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DMM_STATIC_DEFINE)
#define DMM_API
#elif defined(_WIN32)
#define DMM_API __declspec(dllexport)
#else
#define DMM_API __attribute__((visibility("default")))
#endif

#define DMM_VERSION_MAJOR 0
#define DMM_VERSION_MINOR 2
#define DMM_VERSION_PATCH 0
#define DMM_VERSION_NUMBER (DMM_VERSION_MAJOR * 10000 + DMM_VERSION_MINOR * 100 + DMM_VERSION_PATCH)

/* The library's version as MAJOR*10000 + MINOR*100 + PATCH (may differ from the header's). */
DMM_API uint32_t dmm_version(void);
DMM_API const char *dmm_version_string(void);

typedef enum dmm_status {
    DMM_OK = 0,
    DMM_ERR_INVALID_ARGUMENT = 1,  /* the caller passed something wrong; nothing changed */
    DMM_ERR_OUT_OF_MEMORY = 2,     /* the driver (or the OS) said it has no memory */
    DMM_ERR_BUDGET = 3,            /* the accounting hook / governor declined the charge */
    DMM_ERR_UNSUPPORTED = 4,       /* the mechanism or driver lacks this capability */
    DMM_ERR_WRONG_DEVICE = 5,      /* the object belongs to another device */
    DMM_ERR_WRONG_MECHANISM = 6,   /* the allocation or object belongs to another mechanism */
    DMM_ERR_UNKNOWN_ALLOCATION = 7,/* no live allocation matches (ptr, bytes, align, id) */
    DMM_ERR_QUARANTINED = 8,       /* the address range or chunk is quarantined / poisoned */
    DMM_ERR_DEVICE_LOST = 9,       /* a sticky context error happened; no more driver calls */
    DMM_ERR_BUSY = 10,             /* not now: an event is pending, a release is in flight */
    DMM_ERR_DRIVER = 11,           /* the driver failed; the sentence carries its own code */
    DMM_ERR_VERSION_MISMATCH = 12, /* ABI major differs */
    DMM_ERR_SHORT_STRUCT = 13,     /* a struct's size field is smaller than the minimum */
} dmm_status;

#define DMM_STATUS_COUNT 14

/* Stable name of a code, e.g. "DMM_ERR_BUDGET"; "DMM_ERR_UNKNOWN_STATUS" for unknown values. */
DMM_API const char *dmm_status_str(dmm_status status);

/* The sentence of the last failure on this thread ("" if none). Valid until the next dmm call on
 * this thread that fails. */
DMM_API const char *dmm_last_error(void);

/* The status of the last failure on this thread (DMM_OK if none). */
DMM_API dmm_status dmm_last_status(void);

/* Clears this thread's last error. */
DMM_API void dmm_clear_error(void);

/* For driver and plugin implementers: records a failure sentence for this thread (printf format)
 * and returns `status` so that a driver can write `return dmm_error_set(DMM_ERR_DRIVER, ...)`. */
DMM_API dmm_status dmm_error_set(dmm_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

typedef enum dmm_log_level {
    DMM_LOG_ERROR = 0,
    DMM_LOG_WARN = 1,
    DMM_LOG_INFO = 2,
    DMM_LOG_DEBUG = 3,
} dmm_log_level;

/* Receives the library's log lines (one sentence, no newline). Called on the thread that logs,
 * possibly concurrently from several threads, never under a dmm lock. */
typedef void (*dmm_log_fn)(void *user, dmm_log_level level, const char *message);

/* Installs (or with fn = NULL removes) the process-wide log callback; messages above `max_level`
 * are dropped. Without a callback the library is silent. */
DMM_API void dmm_set_log_callback(dmm_log_fn fn, void *user, dmm_log_level max_level);

/* One line (printf format, cut to 1023 bytes) to that callback, as the library's own lines go: for
 * adapters and plugins built on dmm. Dropped without a callback or above its max_level. */
DMM_API void dmm_log(dmm_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The value dmm reads for its environment variable `name` (docs/options.md: DMM_ORT_LIB, DMM_TORCH_*,
 * ...): NULL when `name` is none of dmm's, or the variable is unset or empty. For adapters built on
 * dmm, so that each variable is read in the one place. */
DMM_API const char *dmm_env(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DMM_STATUS_H */
