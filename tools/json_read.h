/* SPDX-License-Identifier: Apache-2.0 */
/* tools/json_read.h — a small strict JSON reader for the tools (the library only writes JSON).
 *
 * RFC 8259 values: objects, arrays, strings with every escape (\uXXXX and surrogate pairs, decoded to
 * UTF-8), numbers, true, false, null. Strict: no comments, no trailing commas, no duplicate keys, no
 * raw control characters in strings, no "\u0000" (strings are C strings), nesting at most 64 deep,
 * nothing but whitespace after the value. Errors name the line and column (both from 1); a repeated key
 * is found when its object closes (an error inside the object after it is reported first).
 * Thread contract: none needed (no globals).
 */
#ifndef DMM_TOOLS_JSON_READ_H
#define DMM_TOOLS_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

typedef enum dmm_jv_kind {
    DMM_JV_NULL,
    DMM_JV_BOOL,
    DMM_JV_NUMBER,
    DMM_JV_STRING,
    DMM_JV_ARRAY,
    DMM_JV_OBJECT,
} dmm_jv_kind;

typedef struct dmm_jv dmm_jv;
struct dmm_jv {
    dmm_jv_kind kind;
    int line, col; /* where the value starts in the text */
    bool boolean;  /* BOOL */
    double number; /* NUMBER (finite) */
    char *str;     /* STRING: NUL-terminated UTF-8 */
    dmm_jv *items; /* ARRAY: its elements; OBJECT: its values */
    char **keys;   /* OBJECT: keys[i] names items[i] */
    size_t n;      /* ARRAY / OBJECT: how many */
};

/* Parses text[0..len). 0 with *out set (free with dmm_jv_free), or -1 with a sentence in err
 * ("line L, column C: ..."). */
int dmm_json_parse(const char *text, size_t len, dmm_jv **out, char *err, size_t errcap);
void dmm_jv_free(dmm_jv *v);

/* The value of `key` in an object; NULL when v is not an object or has no such key. */
const dmm_jv *dmm_jv_get(const dmm_jv *v, const char *key);

/* The first of names[0..n) (in their order) equal to an earlier one: its index; n when none repeats;
 * SIZE_MAX when out of memory. O(n log n) (a sort), for every "appears twice" check of the tools. */
size_t dmm_first_repeated(const char *const *names, size_t n);

/* "an object", "a string", ... (for error sentences). */
const char *dmm_jv_kind_str(dmm_jv_kind k);

#endif /* DMM_TOOLS_JSON_READ_H */
