/* SPDX-License-Identifier: Apache-2.0 */
/* tools/err_text.h — the one way the tool's modules write an error sentence into their caller's
 * buffer (err, cap): formatted, always NUL-terminated when cap > 0, nothing written when err is NULL
 * or cap is 0. Returns -1, the modules' failure value, so that `return dmm_tool_err(...)` ends a
 * failing function.
 */
#ifndef DMM_TOOLS_ERR_TEXT_H
#define DMM_TOOLS_ERR_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int dmm_tool_err(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int dmm_tool_err(char *err, size_t cap, const char *fmt, ...) {
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
