/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/json.c — the JSON writer (contract: json.h): appends into a caller's buffer, and the stats
 * writer every X-macro stats struct goes through.
 * Invariant: o->len = the bytes the whole JSON needs so far; the buffer holds its first
 * min(len, cap - 1) bytes. */
#include "core/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dmm__json_put(dmm_json *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

void dmm__json_string(dmm_json *o, const char *s) {
    dmm__json_put(o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') dmm__json_put(o, "\\%c", *p);
        else if (*p < 0x20) dmm__json_put(o, "\\u%04x", *p);
        else dmm__json_put(o, "%c", *p);
    }
    dmm__json_put(o, "\"");
}

void dmm__json_count(dmm_json *o, const char *sep, const char *name, const dmm_count *c) {
    dmm__json_put(o, "%s\"%s\":{\"current\":%lld,\"peak\":%lld,\"total\":%lld}", sep, name, (long long)c->current,
                  (long long)c->peak, (long long)c->total);
}

dmm_status dmm__json_finish(dmm_json *o, size_t *needed, const char *what) {
    if (needed != NULL) *needed = o->len;
    if (o->len < o->cap) return DMM_OK;
    if (o->cap > 0) o->buf[o->cap - 1] = '\0';
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                         "%s: the buffer holds %zu bytes but the JSON needs %zu plus the NUL; pass a larger buffer "
                         "(or cap 0 to ask for the length)",
                         what, o->cap, o->len);
}

void dmm__json_stats_object(dmm_json *o, const dmm_json_stats *desc, const void *stats) {
    const unsigned char *base = stats;
    dmm__json_put(o, "{");
    for (size_t i = 0; i < desc->n; i++) {
        const dmm_json_stat *f = &desc->fields[i];
        const char *sep = i ? "," : "";
        if (f->kind == DMM_JSON_STAT_IS_COUNT) {
            dmm_count c;
            memcpy(&c, base + f->offset, sizeof c);
            dmm__json_count(o, sep, f->name, &c);
        } else {
            uint64_t v;
            memcpy(&v, base + f->offset, sizeof v);
            dmm__json_put(o, "%s\"%s\":%llu", sep, f->name, (unsigned long long)v);
        }
    }
    dmm__json_put(o, "}");
}

dmm_status dmm__json_stats(const dmm_json_stats *desc, const char *what, const void *stats, char *buf, size_t cap,
                           size_t *needed) {
    if (stats == NULL || (buf == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: stats is NULL or buf is NULL with cap %zu; pass a filled %s and a buffer (or cap "
                             "0 to ask for the length)",
                             what, cap, desc->type);
    dmm_json o = {buf, cap, 0};
    dmm__json_stats_object(&o, desc, stats);
    return dmm__json_finish(&o, needed, what);
}
