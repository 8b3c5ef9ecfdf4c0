/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_json.c — the strict JSON reader (tools/json_read.c) on hostile input.
 *
 * The input is the text (in a buffer of exactly its length: the reader must never look past it).
 * What must hold:
 *   - a refusal says where and why ("line L, column C: ...") and leaves *out NULL;
 *   - an accepted tree keeps the reader's promises: numbers finite, object keys unique, nesting at
 *     most 64 deep, strings without NUL (C strings: their length is what strlen says);
 *   - it round-trips: the tree written back as JSON parses to an equal tree, and writing that one
 *     gives the same text (the writer here escapes every byte below 0x20 and prints numbers %.17g).
 */
#include <math.h>

#include "fuzzkit.h"
#include "json_read.h"

typedef struct out {
    char *s;
    size_t len, cap;
} out;

static void put(out *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n + 1) cap *= 2;
        o->s = realloc(o->s, cap);
        FUZZ_ASSERT(o->s != NULL, "out of memory");
        o->cap = cap;
    }
    memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = '\0';
}

static void put_string(out *o, const char *s) {
    put(o, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(o, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(o, esc, 6);
        } else {
            put(o, (const char *)&c, 1);
        }
    }
    put(o, "\"", 1);
}

static void write_value(out *o, const dmm_jv *v) {
    char num[40];
    switch (v->kind) {
    case DMM_JV_NULL: put(o, "null", 4); break;
    case DMM_JV_BOOL: v->boolean ? put(o, "true", 4) : put(o, "false", 5); break;
    case DMM_JV_NUMBER: put(o, num, (size_t)snprintf(num, sizeof num, "%.17g", v->number)); break;
    case DMM_JV_STRING: put_string(o, v->str); break;
    case DMM_JV_ARRAY:
    case DMM_JV_OBJECT:
        put(o, v->kind == DMM_JV_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i > 0) put(o, ",", 1);
            if (v->kind == DMM_JV_OBJECT) {
                put_string(o, v->keys[i]);
                put(o, ":", 1);
            }
            write_value(o, &v->items[i]);
        }
        put(o, v->kind == DMM_JV_ARRAY ? "]" : "}", 1);
        break;
    }
}

static void check_tree(const dmm_jv *v, int depth) {
    FUZZ_ASSERT(depth <= 64 || (v->kind != DMM_JV_ARRAY && v->kind != DMM_JV_OBJECT), "nesting %d", depth);
    FUZZ_ASSERT(v->line >= 1 && v->col >= 1, "position %d:%d", v->line, v->col);
    switch (v->kind) {
    case DMM_JV_NUMBER: FUZZ_ASSERT(isfinite(v->number), "a number that is not finite"); break;
    case DMM_JV_STRING: FUZZ_ASSERT(v->str != NULL, "a string without text"); break;
    case DMM_JV_OBJECT:
        for (size_t i = 0; i < v->n; i++)
            for (size_t j = 0; j < i; j++)
                FUZZ_ASSERT(strcmp(v->keys[i], v->keys[j]) != 0, "the key \"%s\" twice", v->keys[i]);
        /* fall through */
    case DMM_JV_ARRAY:
        for (size_t i = 0; i < v->n; i++) check_tree(&v->items[i], depth + 1);
        break;
    default: break;
    }
}

static bool equal(const dmm_jv *a, const dmm_jv *b) {
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case DMM_JV_NULL: return true;
    case DMM_JV_BOOL: return a->boolean == b->boolean;
    case DMM_JV_NUMBER: return a->number == b->number;
    case DMM_JV_STRING: return strcmp(a->str, b->str) == 0;
    default:
        if (a->n != b->n) return false;
        for (size_t i = 0; i < a->n; i++)
            if ((a->kind == DMM_JV_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0) || !equal(&a->items[i], &b->items[i]))
                return false;
        return true;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_exact_copy(data, size);
    dmm_jv *v = (dmm_jv *)&v; /* must be overwritten */
    char err[512] = "";
    int rc = dmm_json_parse(text, size, &v, err, sizeof err);
    free(text);
    if (rc != 0) {
        FUZZ_ASSERT(v == NULL, "a refusal left a tree");
        FUZZ_ASSERT(strncmp(err, "line ", 5) == 0 && strstr(err, ", column ") != NULL,
                    "a refusal that does not say where: '%s'", err);
        return 0;
    }
    FUZZ_ASSERT(v != NULL, "an accepted text without a tree");
    check_tree(v, 0);
    out o1 = {NULL, 0, 0}, o2 = {NULL, 0, 0};
    write_value(&o1, v);
    dmm_jv *w = NULL;
    FUZZ_ASSERT(dmm_json_parse(o1.s, o1.len, &w, err, sizeof err) == 0, "the written-back JSON is refused: %s (%s)",
                err, o1.s);
    FUZZ_ASSERT(equal(v, w), "the written-back JSON reads differently: %s", o1.s);
    write_value(&o2, w);
    FUZZ_ASSERT(o1.len == o2.len && memcmp(o1.s, o2.s, o1.len) == 0, "writing twice differs: %s / %s", o1.s, o2.s);
    dmm_jv_free(w);
    dmm_jv_free(v);
    free(o1.s);
    free(o2.s);
    return 0;
}
