/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/json.h — the one JSON writer every snapshot and stats call uses: printf-style appends into
 * a caller's buffer that keep counting past its end, so a too-small buffer still yields the length
 * needed. Internal; never installed.
 *
 * Two layers: the appends (dmm__json_put, _string, _count, _finish) for any JSON, and the stats
 * writer (dmm__json_stats) for every stats struct declared by X-macros (dmm_stats, dmm_pool_stats,
 * …): describe the struct once as a table of its fields, and one call does a public *_stats_json
 * whole (argument check, object, length, sentence). See "stats structs" below.
 *
 * Invariant: dmm_json.len = the bytes the whole JSON needs so far; buf holds its first
 * min(len, cap - 1) bytes. */
#ifndef DMM_CORE_JSON_H
#define DMM_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "dmm/stats.h"
#include "dmm/status.h"

typedef struct dmm_json {
    char *buf;  /* may be NULL when cap == 0 */
    size_t cap; /* bytes of buf */
    size_t len; /* bytes the JSON needs so far (may exceed cap) */
} dmm_json;

void dmm__json_put(dmm_json *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A JSON string literal, escaped. */
void dmm__json_string(dmm_json *o, const char *s);

/* `"name":{"current":…,"peak":…,"total":…}` preceded by sep. */
void dmm__json_count(dmm_json *o, const char *sep, const char *name, const dmm_count *c);

/* Ends a write: *needed (may be NULL) = the length without the NUL; DMM_OK if it fit, else
 * DMM_ERR_INVALID_ARGUMENT with a sentence naming `what` and both sizes (buf stays NUL-terminated). */
dmm_status dmm__json_finish(dmm_json *o, size_t *needed, const char *what);

/* ---- stats structs: the one writer for every X-macro stats struct ----
 *
 * A stats struct is counts (dmm_count: current, peak, total) and counters (uint64_t), each declared
 * once in an X-macro list X(name, description). Its JSON is one object, the counts first, in list
 * order: {"allocations":{"current":1,"peak":2,"total":3},…,"driver_map":4,…}.
 *
 * Describe a struct once (a file-scope table built from its X-macros):
 *
 *   #define POOL_COUNT(name, desc)   DMM_JSON_STAT_COUNT(dmm_pool_stats, name),
 *   #define POOL_COUNTER(name, desc) DMM_JSON_STAT_COUNTER(dmm_pool_stats, name),
 *   static const dmm_json_stat pool_fields[] = {DMM_POOL_STAT_COUNTS(POOL_COUNT)
 *                                               DMM_POOL_STAT_COUNTERS(POOL_COUNTER)};
 *   static const dmm_json_stats pool_stats_desc = DMM_JSON_STATS(dmm_pool_stats, pool_fields);
 *
 * and a public writer is one line:
 *
 *   dmm_status dmm_pool_stats_json(const dmm_pool_stats *s, char *buf, size_t cap, size_t *needed) {
 *       return dmm__json_stats(&pool_stats_desc, "dmm_pool_stats_json", s, buf, cap, needed);
 *   }
 *
 * To embed a stats object in a larger JSON, append it with dmm__json_stats_object. */

typedef enum dmm_json_stat_kind {
    DMM_JSON_STAT_IS_COUNT,   /* a dmm_count: written as {"current":…,"peak":…,"total":…} */
    DMM_JSON_STAT_IS_COUNTER, /* a uint64_t: written as a number */
} dmm_json_stat_kind;

typedef struct dmm_json_stat {
    const char *name;        /* the JSON key: the field's name */
    size_t offset;           /* offsetof(struct, field) */
    dmm_json_stat_kind kind;
} dmm_json_stat;

typedef struct dmm_json_stats {
    const char *type;            /* the struct's name, for sentences ("dmm_pool_stats") */
    const dmm_json_stat *fields; /* in JSON order */
    size_t n;
} dmm_json_stats;

#define DMM_JSON_STAT_COUNT(type, field) {#field, offsetof(type, field), DMM_JSON_STAT_IS_COUNT}
#define DMM_JSON_STAT_COUNTER(type, field) {#field, offsetof(type, field), DMM_JSON_STAT_IS_COUNTER}
#define DMM_JSON_STATS(type, fields) {#type, (fields), sizeof(fields) / sizeof((fields)[0])}

/* Appends the object of the struct at `stats` described by `desc`. */
void dmm__json_stats_object(dmm_json *o, const dmm_json_stats *desc, const void *stats);

/* A whole public *_stats_json call named `what`: stats NULL, or buf NULL with cap > 0, is
 * DMM_ERR_INVALID_ARGUMENT with a sentence; else the object into buf and dmm__json_finish's result
 * (*needed = the length without the NUL; a too-small buffer is DMM_ERR_INVALID_ARGUMENT). */
dmm_status dmm__json_stats(const dmm_json_stats *desc, const char *what, const void *stats, char *buf, size_t cap,
                           size_t *needed);

#endif /* DMM_CORE_JSON_H */
