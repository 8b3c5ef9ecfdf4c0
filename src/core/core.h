/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/core.h — internal helpers shared by every layer: logging, locks, atomics with the
 * memory order in their names (core/atomics.h, included here), checked arithmetic, and stats
 * updates. Never installed.
 *
 * Lock order (outermost first): pool → provider → arena → driver-internal. No callback is called
 * and no wait happens under a lock that others need for bookkeeping.
 */
#ifndef DMM_CORE_H
#define DMM_CORE_H

#include <pthread.h>
#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/atomics.h"
#include "dmm/stats.h"
#include "dmm/status.h"

/* ---- logging: dmm_log (dmm/status.h), to the user's callback only; silent without one ---- */

/* ---- errors: the two idioms (no copy buffers at call sites) ----
 * Which one:
 *   - the failure is reported right away, with context: dmm__error_wrap, called right after the
 *     failing call;
 *   - calls that set (and clear) errors of their own run between the failure and its report (a loop
 *     that tries every member and reports the first failure, an undo, a poll): dmm__error_keep right
 *     after the failing call, then dmm__error_restore to report it as it was, or
 *     dmm__error_kept_text inside a sentence of its own (one that names two causes, or adds context).
 * Reading dmm_last_error() directly as an argument of dmm_error_set is fine (it formats first). */

#define DMM__ERROR_CAP 1024 /* bytes of a last-error sentence, its NUL included */

/* Bytes that data written by different threads must not share: two 64-byte lines, because x86's
 * adjacent-line prefetcher moves lines in pairs (a write next door then costs a transfer too). */
#define DMM_SHARING_BYTES 128

/* dmm__error_wrap(s, "op: what was being done", ...) sets the thread's last error to
 * "<context>: <the last error>" (the context alone when there is none) with status s, and returns s.
 * It formats before it writes, so it is called right after the failing call, before anything else
 * that may set an error of its own. */
dmm_status dmm__error_wrap(dmm_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* An earlier failure kept while later calls run. Zero-initialised ({0}) = nothing kept.
 * Invariant: status == DMM_OK ⇔ nothing kept ⇔ text is "". */
typedef struct dmm_error_kept {
    dmm_status status;          /* the kept failure's status; DMM_OK: nothing kept */
    char text[DMM__ERROR_CAP];  /* its sentence, as the thread's last error read when it was kept */
} dmm_error_kept;

/* Keeps status s with the thread's last error sentence, if s is a failure and nothing is kept yet (the
 * first failure wins); returns s, so that it wraps a call: dmm__error_keep(&k, dmm__drv_x(...)). */
dmm_status dmm__error_keep(dmm_error_kept *k, dmm_status s);
/* Makes the kept failure the thread's last error again and returns its status; with nothing kept it
 * returns DMM_OK and leaves the last error as it is. */
dmm_status dmm__error_restore(const dmm_error_kept *k);
/* The kept sentence ("" when nothing is kept), for a sentence of the caller's own. */
const char *dmm__error_kept_text(const dmm_error_kept *k);

/* ---- locks ---- (a pool heap's lock is biased to its stream's thread instead: core/biased_lock.h) */
typedef struct dmm_lock {
    pthread_mutex_t m;
} dmm_lock;

static inline void dmm_lock_init(dmm_lock *l) { pthread_mutex_init(&l->m, NULL); }
static inline void dmm_lock_destroy(dmm_lock *l) { pthread_mutex_destroy(&l->m); }
static inline void dmm_lock_acquire(dmm_lock *l) { pthread_mutex_lock(&l->m); }
static inline void dmm_lock_release(dmm_lock *l) { pthread_mutex_unlock(&l->m); }

/* ---- checked arithmetic ---- */
/* A monotonic clock in nanoseconds (for time spent in driver calls: a vDSO read, no system call). */
static inline uint64_t dmm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline bool dmm_add_overflows(uint64_t a, uint64_t b, uint64_t *sum) {
    return __builtin_add_overflow(a, b, sum);
}
static inline bool dmm_mul_overflows(uint64_t a, uint64_t b, uint64_t *product) {
    return __builtin_mul_overflow(a, b, product);
}
static inline bool dmm_is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }
/* The least power of two ≥ x (1 for x ≤ 1); false when that is above 2^63 (it would not fit in 64
 * bits), so that no caller doubles a size into 0. */
static inline bool dmm_pow2_up(uint64_t x, uint64_t *out) {
    if (x > ((uint64_t)1 << 63)) return false;
    *out = x <= 1 ? 1 : (uint64_t)1 << (64 - __builtin_clzll(x - 1));
    return true;
}
/* Rounds up to a multiple of a power of two; returns false on overflow. */
static inline bool dmm_align_up(uint64_t x, uint64_t align, uint64_t *out) {
    uint64_t t;
    if (__builtin_add_overflow(x, align - 1, &t)) return false;
    *out = t & ~(align - 1);
    return true;
}
static inline uint64_t dmm_align_down(uint64_t x, uint64_t align) { return x & ~(align - 1); }

/* ---- stats ---- */
static inline void dmm_count_add(dmm_count *c, int64_t v) {
    c->current += v;
    c->total += v;
    if (c->current > c->peak) c->peak = c->current;
}
static inline void dmm_count_sub(dmm_count *c, int64_t v) { c->current -= v; }

/* Version-tolerant copy-out of any stats struct whose first field is `uint32_t size` (dmm_stats,
 * dmm_pool_stats, …), in two steps so that a refused call gathers nothing:
 *   dmm__stats_out_check: the caller's struct is non-NULL and its size at least min_size (the first
 *     published version's), else DMM_ERR_INVALID_ARGUMENT / DMM_ERR_SHORT_STRUCT with a sentence
 *     naming `what` (the call) and `type` (the struct) and this build's size, type_size;
 *   dmm__stats_out_copy: copies min(dst's size, src_size) bytes of src into dst, zeroes dst beyond
 *     src_size (a newer caller's fields this build does not know), and keeps dst's size. */
dmm_status dmm__stats_out_check(const void *dst, size_t min_size, size_t type_size, const char *type,
                                const char *what);
void dmm__stats_out_copy(const void *src, size_t src_size, void *dst);

/* Both steps for a dmm_stats: min(dst->size, sizeof *src) bytes into a caller's (possibly older or
 * newer) struct; DMM_ERR_SHORT_STRUCT if dst->size is below the first version's size. */
dmm_status dmm__stats_copy_out(const dmm_stats *src, dmm_stats *dst);

/* Human-readable byte count ("2.0 MiB") into buf; returns buf. */
const char *dmm__fmt_bytes(uint64_t bytes, char *buf, size_t cap);

#endif /* DMM_CORE_H */
