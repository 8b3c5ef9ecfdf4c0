/* src/core/stats.c — the stats struct as JSON (through the one stats writer of core/json.h), and
 * version-tolerant copy-out. The JSON's field table comes from the X-macro lists of dmm/stats.h, so
 * a new stat needs no change here. */
#include <stddef.h>
#include <string.h>

#include "core/core.h"
#include "core/json.h"

/* The size of the first published dmm_stats: a caller's struct may never be smaller. */
#define DMM_STATS_MIN_SIZE (offsetof(dmm_stats, allocations) + sizeof(dmm_count))

dmm_status dmm__stats_copy_out(const dmm_stats *src, dmm_stats *dst) {
    if (dst == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "stats: the output struct is NULL; pass a dmm_stats "
                                                       "with .size = sizeof(dmm_stats)");
    uint32_t want = dst->size;
    if (want < DMM_STATS_MIN_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "stats: the output struct's size is %u bytes; set .size = sizeof(dmm_stats) "
                             "(%zu in this build) before the call",
                             want, sizeof(dmm_stats));
    size_t n = want < sizeof *src ? want : sizeof *src;
    memcpy(dst, src, n);
    if (want > sizeof *src) memset((char *)dst + sizeof *src, 0, want - sizeof *src);
    dst->size = want;
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
