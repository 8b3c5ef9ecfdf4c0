/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/stats.c — the stats struct as JSON (through the one stats writer of core/json.h), and
 * the version-tolerant copy-out of every stats struct (dmm_stats here, dmm_pool_stats in
 * src/pool/pool_stats.c: one check and one copy, core.h). The JSON's field table comes from the
 * X-macro lists of dmm/stats.h, so a new stat needs no change here.
 *
 * Invariant of a copy-out: the caller's struct ends with size = what the caller set, its first
 * min(size, this build's size) bytes are this build's values, and any bytes beyond are zero. */
#include <stddef.h>
#include <string.h>

#include "core/core.h"
#include "core/json.h"

/* The size of the first published dmm_stats: a caller's struct may never be smaller. */
#define DMM_STATS_MIN_SIZE (offsetof(dmm_stats, allocations) + sizeof(dmm_count))

dmm_status dmm__stats_out_check(const void *dst, size_t min_size, size_t type_size, const char *type,
                                const char *what) {
    if (dst == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: the output struct is NULL; pass a %s with .size = sizeof(%s)", what, type, type);
    uint32_t want;
    memcpy(&want, dst, sizeof want); /* every stats struct starts with its uint32_t size */
    if (want < min_size)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "%s: the output struct's size is %u bytes; set .size = sizeof(%s) (%zu in this build) "
                             "before the call",
                             what, want, type, type_size);
    return DMM_OK;
}

void dmm__stats_out_copy(const void *src, size_t src_size, void *dst) {
    uint32_t want;
    memcpy(&want, dst, sizeof want);
    size_t n = want < src_size ? want : src_size;
    memcpy(dst, src, n);
    if (want > src_size) memset((char *)dst + src_size, 0, want - src_size);
    memcpy(dst, &want, sizeof want);
}

dmm_status dmm__stats_copy_out(const dmm_stats *src, dmm_stats *dst) {
    dmm_status s = dmm__stats_out_check(dst, DMM_STATS_MIN_SIZE, sizeof(dmm_stats), "dmm_stats", "stats");
    if (s != DMM_OK) return s;
    dmm__stats_out_copy(src, sizeof *src, dst);
    return DMM_OK;
}

/* dmm_stats, described once from its X-macros for the one stats writer (core/json.h). */
#define STATS_JSON_COUNT(name, desc) DMM_JSON_STAT_COUNT(dmm_stats, name),
#define STATS_JSON_COUNTER(name, desc) DMM_JSON_STAT_COUNTER(dmm_stats, name),
static const dmm_json_stat stats_fields[] = {DMM_STAT_COUNTS(STATS_JSON_COUNT) DMM_STAT_COUNTERS(STATS_JSON_COUNTER)};
#undef STATS_JSON_COUNT
#undef STATS_JSON_COUNTER
static const dmm_json_stats stats_desc = DMM_JSON_STATS(dmm_stats, stats_fields);

dmm_status dmm_stats_json(const dmm_stats *s, char *buf, size_t cap, size_t *needed) {
    return dmm__json_stats(&stats_desc, "dmm_stats_json", s, buf, cap, needed);
}
