/* src/core/json.c — see json.h. Invariant: o->len = the bytes the whole JSON needs so far; the buffer
 * holds its first min(len, cap - 1) bytes. */
#include "core/json.h"

#include <stdarg.h>
#include <stdio.h>

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
