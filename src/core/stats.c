/* src/core/stats.c — the stats struct as JSON, and version-tolerant copy-out. Both walk the
 * X-macro lists of dmm/stats.h, so a new stat needs no change here. */
#include <stdarg.h>
#include <stdio.h>
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

dmm_status dmm_stats_json(const dmm_stats *s, char *buf, size_t cap, size_t *needed) {
    if (s == NULL || (buf == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_stats_json: stats is NULL or buf is NULL with cap %zu; pass a filled "
                             "dmm_stats and a buffer (or cap 0 to ask for the length)",
                             cap);
    dmm_json o = {buf, cap, 0};
    const char *sep = "";
    dmm__json_put(&o, "{");
#define DMM_JSON_COUNT(name, desc)                                                                  \
    dmm__json_count(&o, sep, #name, &s->name);                                                     \
    sep = ",";
    DMM_STAT_COUNTS(DMM_JSON_COUNT)
#undef DMM_JSON_COUNT
#define DMM_JSON_COUNTER(name, desc)                                                                \
    dmm__json_put(&o, "%s\"" #name "\":%llu", sep, (unsigned long long)s->name);                              \
    sep = ",";
    DMM_STAT_COUNTERS(DMM_JSON_COUNTER)
#undef DMM_JSON_COUNTER
    dmm__json_put(&o, "}");
    return dmm__json_finish(&o, needed, "dmm_stats_json");
}
