/* src/core/json.h — the one JSON writer every snapshot and stats call uses: printf-style appends into
 * a caller's buffer that keep counting past its end, so a too-small buffer still yields the length
 * needed. Internal; never installed. */
#ifndef DMM_CORE_JSON_H
#define DMM_CORE_JSON_H

#include <stddef.h>

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

#endif /* DMM_CORE_JSON_H */
