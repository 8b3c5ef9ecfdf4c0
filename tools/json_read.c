/* SPDX-License-Identifier: Apache-2.0 */
/* tools/json_read.c — the strict JSON reader of json_read.h (used by `dmm compare`).
 *
 * Idea: recursive descent over a length-bounded buffer (the text need not be NUL-terminated), one
 * character of lookahead, the position (line, column in bytes) kept beside the cursor so every error
 * can say where it is. Values become a small tree of dmm_jv nodes owned by their parent.
 * Trade-off: a tree, not a streaming reader: bench results are a few kilobytes, and a tree lets the
 * caller check the shape in any order with plain lookups.
 * Cost: linear in the text but for an object's keys, checked for repeats by one sort when the object
 * closes (n log n; a scan per key was quadratic); the tree takes at most ~30 bytes per byte of text (a
 * value per two bytes), so callers bound the text (dmm_bench_load: 4 MiB).
 * Invariants: p <= end at all times and nothing reads at or past end; on error every node built so
 * far is freed exactly once (a partly filled node is freed by whoever owns it, its counts say how far
 * it got); depth <= JSON_MAX_DEPTH.
 */
#include "json_read.h"

#include <errno.h>
#include <math.h> /* isfinite only: no libm */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct reader {
    const char *p, *end;
    int line, col; /* of *p */
    int depth;
    char *err;
    size_t errcap;
    bool failed;
} reader;

static int fail_at(reader *r, int line, int col, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int fail_at(reader *r, int line, int col, const char *fmt, ...) {
    if (r->failed) return -1; /* keep the first, innermost error */
    r->failed = true;
    if (r->errcap == 0) return -1;
    int n = snprintf(r->err, r->errcap, "line %d, column %d: ", line, col);
    if (n < 0 || (size_t)n >= r->errcap) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errcap - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

#define FAIL(r, ...) fail_at((r), (r)->line, (r)->col, __VA_ARGS__)

static bool at_end(const reader *r) { return r->p >= r->end; }

static void advance(reader *r) {
    if (at_end(r)) return;
    if (*r->p == '\n') {
        r->line++;
        r->col = 1;
    } else {
        r->col++;
    }
    r->p++;
}

static void skip_ws(reader *r) {
    while (!at_end(r) && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) advance(r);
}

/* "'x'" or "the end of the input" or "byte 0x01", for messages. */
static const char *what_is_here(const reader *r, char *buf, size_t cap) {
    if (at_end(r)) return "the end of the input";
    unsigned char c = (unsigned char)*r->p;
    if (c >= 0x20 && c < 0x7f) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static int parse_value(reader *r, dmm_jv *v);

static int expect_word(reader *r, const char *word) {
    int line = r->line, col = r->col;
    for (const char *w = word; *w; w++) {
        if (at_end(r) || *r->p != *w) {
            char here[32];
            return fail_at(r, line, col, "expected '%s' but found %s at column %d.", word,
                           what_is_here(r, here, sizeof here), r->col);
        }
        advance(r);
    }
    return 0;
}

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

static int sb_put(reader *r, strbuf *b, const char *bytes, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (s == NULL) return FAIL(r, "out of memory reading a string of %zu bytes.", b->len + n);
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, bytes, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

static int hex4(reader *r, unsigned *out) {
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        if (at_end(r)) return FAIL(r, "the input ends inside a \\u escape.");
        char c = *r->p;
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else {
            char here[32];
            return FAIL(r, "a \\u escape needs 4 hex digits, found %s.", what_is_here(r, here, sizeof here));
        }
        x = x * 16 + d;
        advance(r);
    }
    *out = x;
    return 0;
}

static int put_utf8(reader *r, strbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sb_put(r, b, u, n);
}

/* At the opening quote; *out = the decoded string (malloc'd). */
static int parse_string(reader *r, char **out) {
    int line = r->line, col = r->col;
    strbuf b = {NULL, 0, 0};
    advance(r); /* the quote */
    if (sb_put(r, &b, "", 0) != 0) return -1;
    for (;;) {
        if (at_end(r)) {
            free(b.s);
            return fail_at(r, line, col, "the string that starts here is not closed before the end of the input.");
        }
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') {
            advance(r);
            break;
        }
        if (c < 0x20) {
            free(b.s);
            return FAIL(r, "a raw control character (byte 0x%02x) in a string; escape it.", c);
        }
        if (c != '\\') {
            const char *run = r->p;
            while (!at_end(r) && *r->p != '"' && *r->p != '\\' && (unsigned char)*r->p >= 0x20) advance(r);
            if (sb_put(r, &b, run, (size_t)(r->p - run)) != 0) {
                free(b.s);
                return -1;
            }
            continue;
        }
        int eline = r->line, ecol = r->col;
        advance(r); /* the backslash */
        if (at_end(r)) {
            free(b.s);
            return FAIL(r, "the input ends inside an escape.");
        }
        char e = *r->p, one = 0;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': break;
        default: {
            char here[32];
            free(b.s);
            return fail_at(r, eline, ecol, "invalid escape: a backslash followed by %s (valid: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX).",
                           what_is_here(r, here, sizeof here));
        }
        }
        advance(r);
        int rc;
        if (e != 'u') {
            rc = sb_put(r, &b, &one, 1);
        } else {
            unsigned hi = 0, lo = 0;
            rc = hex4(r, &hi);
            uint32_t cp = hi;
            if (rc == 0 && hi >= 0xD800 && hi <= 0xDBFF) {
                if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') {
                    rc = fail_at(r, eline, ecol, "\\u%04X is a high surrogate without the low surrogate after it.", hi);
                } else {
                    advance(r);
                    advance(r);
                    rc = hex4(r, &lo);
                    if (rc == 0 && (lo < 0xDC00 || lo > 0xDFFF))
                        rc = fail_at(r, eline, ecol, "\\u%04X is a high surrogate followed by \\u%04X, not a low one.",
                                     hi, lo);
                    cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                }
            } else if (rc == 0 && hi >= 0xDC00 && hi <= 0xDFFF) {
                rc = fail_at(r, eline, ecol, "\\u%04X is a low surrogate without a high one before it.", hi);
            } else if (rc == 0 && hi == 0) {
                rc = fail_at(r, eline, ecol, "\\u0000 is not accepted (strings here are C strings).");
            }
            if (rc == 0) rc = put_utf8(r, &b, cp);
        }
        if (rc != 0) {
            free(b.s);
            return -1;
        }
    }
    *out = b.s;
    return 0;
}

static bool is_digit(const reader *r) { return !at_end(r) && *r->p >= '0' && *r->p <= '9'; }

static int parse_number(reader *r, dmm_jv *v) {
    const char *start = r->p;
    int line = r->line, col = r->col;
    char here[32];
    if (*r->p == '-') advance(r);
    if (!is_digit(r)) return FAIL(r, "a number needs a digit here, found %s.", what_is_here(r, here, sizeof here));
    if (*r->p == '0') {
        advance(r);
        if (is_digit(r)) return fail_at(r, line, col, "a number may not have leading zeros.");
    } else {
        while (is_digit(r)) advance(r);
    }
    if (!at_end(r) && *r->p == '.') {
        advance(r);
        if (!is_digit(r)) return FAIL(r, "a digit must follow the decimal point, found %s.", what_is_here(r, here, sizeof here));
        while (is_digit(r)) advance(r);
    }
    if (!at_end(r) && (*r->p == 'e' || *r->p == 'E')) {
        advance(r);
        if (!at_end(r) && (*r->p == '+' || *r->p == '-')) advance(r);
        if (!is_digit(r)) return FAIL(r, "a digit must follow the exponent, found %s.", what_is_here(r, here, sizeof here));
        while (is_digit(r)) advance(r);
    }
    size_t n = (size_t)(r->p - start);
    char buf[128];
    if (n >= sizeof buf) return fail_at(r, line, col, "a number of %zu characters is too long.", n);
    memcpy(buf, start, n);
    buf[n] = '\0';
    errno = 0;
    double x = strtod(buf, NULL);
    if (!isfinite(x) || (errno == ERANGE && (x > 1.0 || x < -1.0)))
        return fail_at(r, line, col, "the number %s is out of range.", buf);
    v->kind = DMM_JV_NUMBER;
    v->number = x;
    return 0;
}

/* Grows v->items (and v->keys for objects) to hold one more; the new slot is zeroed. */
static int grow(reader *r, dmm_jv *v, size_t *cap) {
    if (v->n < *cap) return 0;
    size_t ncap = *cap ? 2 * *cap : 8;
    dmm_jv *items = realloc(v->items, ncap * sizeof *items);
    if (items == NULL) return FAIL(r, "out of memory (%zu elements).", ncap);
    v->items = items;
    if (v->kind == DMM_JV_OBJECT) {
        char **keys = realloc(v->keys, ncap * sizeof *keys);
        if (keys == NULL) return FAIL(r, "out of memory (%zu keys).", ncap);
        v->keys = keys;
    }
    *cap = ncap;
    return 0;
}

static int parse_array(reader *r, dmm_jv *v) {
    size_t cap = 0;
    v->kind = DMM_JV_ARRAY;
    advance(r); /* [ */
    skip_ws(r);
    if (!at_end(r) && *r->p == ']') {
        advance(r);
        return 0;
    }
    for (;;) {
        if (grow(r, v, &cap) != 0) return -1;
        dmm_jv *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        v->n++; /* counted before parsing: a half-built item is freed with its parent */
        if (parse_value(r, item) != 0) return -1;
        skip_ws(r);
        char here[32];
        if (at_end(r)) return FAIL(r, "the input ends inside an array (expected ',' or ']').");
        if (*r->p == ']') {
            advance(r);
            return 0;
        }
        if (*r->p != ',') return FAIL(r, "expected ',' or ']' in an array, found %s.", what_is_here(r, here, sizeof here));
        advance(r);
    }
}

typedef struct named {
    const char *name;
    size_t at; /* its place in the caller's array */
} named;

static int by_name_then_place(const void *x, const void *y) {
    const named *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c != 0 ? c : (a->at > b->at) - (a->at < b->at);
}

size_t dmm_first_repeated(const char *const *names, size_t n) {
    if (n < 2) return n;
    named *v = malloc(n * sizeof *v);
    if (v == NULL) return SIZE_MAX;
    for (size_t i = 0; i < n; i++) v[i] = (named){names[i], i};
    qsort(v, n, sizeof *v, by_name_then_place);
    size_t first = n; /* a repeat is the later of two equal neighbours; the first of those in text order */
    for (size_t i = 1; i < n; i++)
        if (v[i].at < first && strcmp(v[i - 1].name, v[i].name) == 0) first = v[i].at;
    free(v);
    return first;
}

typedef struct place {
    int line, col;
} place;

/* The object's members; then its keys checked for repeats all at once (a sort: a scan of the earlier
 * keys per key was quadratic, minutes for a megabyte of keys). */
static int parse_object(reader *r, dmm_jv *v) {
    size_t cap = 0, kcap = 0;
    place *kat = NULL; /* where each key starts, for the repeat's sentence */
    int rc = -1;
    v->kind = DMM_JV_OBJECT;
    advance(r); /* { */
    skip_ws(r);
    if (!at_end(r) && *r->p == '}') {
        advance(r);
        return 0;
    }
    for (;;) {
        char here[32];
        skip_ws(r);
        if (at_end(r)) {
            FAIL(r, "the input ends inside an object (expected a key).");
            goto out;
        }
        if (*r->p != '"') {
            FAIL(r, "expected a string key in an object, found %s.", what_is_here(r, here, sizeof here));
            goto out;
        }
        if (v->n == kcap) {
            size_t ncap = kcap ? 2 * kcap : 8;
            place *k = realloc(kat, ncap * sizeof *k);
            if (k == NULL) {
                FAIL(r, "out of memory (%zu keys).", ncap);
                goto out;
            }
            kat = k;
            kcap = ncap;
        }
        kat[v->n] = (place){r->line, r->col};
        char *key = NULL;
        if (parse_string(r, &key) != 0) goto out;
        if (grow(r, v, &cap) != 0) {
            free(key);
            goto out;
        }
        v->keys[v->n] = key;
        dmm_jv *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        v->n++;
        skip_ws(r);
        if (at_end(r)) {
            FAIL(r, "the input ends after the key \"%s\" (expected ':').", key);
            goto out;
        }
        if (*r->p != ':') {
            FAIL(r, "expected ':' after the key \"%s\", found %s.", key, what_is_here(r, here, sizeof here));
            goto out;
        }
        advance(r);
        if (parse_value(r, item) != 0) goto out;
        skip_ws(r);
        if (at_end(r)) {
            FAIL(r, "the input ends inside an object (expected ',' or '}').");
            goto out;
        }
        if (*r->p == '}') {
            advance(r);
            break;
        }
        if (*r->p != ',') {
            FAIL(r, "expected ',' or '}' in an object, found %s.", what_is_here(r, here, sizeof here));
            goto out;
        }
        advance(r);
    }
    size_t dup = dmm_first_repeated((const char *const *)v->keys, v->n);
    if (dup == SIZE_MAX) FAIL(r, "out of memory checking %zu keys.", v->n);
    else if (dup < v->n) fail_at(r, kat[dup].line, kat[dup].col, "the key \"%s\" appears twice in one object.", v->keys[dup]);
    else rc = 0;
out:
    free(kat);
    return rc;
}

static int parse_value(reader *r, dmm_jv *v) {
    skip_ws(r);
    v->line = r->line;
    v->col = r->col;
    if (at_end(r)) return FAIL(r, "expected a value but the input ends here.");
    char c = *r->p;
    if (c == '{' || c == '[') {
        if (r->depth >= JSON_MAX_DEPTH) return FAIL(r, "nesting deeper than %d levels.", JSON_MAX_DEPTH);
        r->depth++;
        int rc = c == '{' ? parse_object(r, v) : parse_array(r, v);
        r->depth--;
        return rc;
    }
    if (c == '"') {
        v->kind = DMM_JV_STRING;
        return parse_string(r, &v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(r, v);
    if (c == 't' || c == 'f') {
        v->kind = DMM_JV_BOOL;
        v->boolean = c == 't';
        return expect_word(r, c == 't' ? "true" : "false");
    }
    if (c == 'n') {
        v->kind = DMM_JV_NULL;
        return expect_word(r, "null");
    }
    char here[32];
    return FAIL(r, "expected a value (object, array, string, number, true, false or null), found %s.",
                what_is_here(r, here, sizeof here));
}

static void jv_clear(dmm_jv *v) {
    if (v->kind == DMM_JV_STRING) free(v->str);
    if (v->kind == DMM_JV_ARRAY || v->kind == DMM_JV_OBJECT) {
        for (size_t i = 0; i < v->n; i++) {
            jv_clear(&v->items[i]);
            if (v->kind == DMM_JV_OBJECT) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
}

void dmm_jv_free(dmm_jv *v) {
    if (v == NULL) return;
    jv_clear(v);
    free(v);
}

int dmm_json_parse(const char *text, size_t len, dmm_jv **out, char *err, size_t errcap) {
    *out = NULL;
    if (errcap > 0) err[0] = '\0';
    reader r = {text, text + len, 1, 1, 0, err, errcap, false};
    dmm_jv *v = calloc(1, sizeof *v);
    if (v == NULL) return fail_at(&r, 1, 1, "out of memory.");
    if (parse_value(&r, v) != 0) {
        dmm_jv_free(v);
        return -1;
    }
    skip_ws(&r);
    if (!at_end(&r)) {
        char here[32];
        FAIL(&r, "unexpected %s after the JSON value.", what_is_here(&r, here, sizeof here));
        dmm_jv_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

const dmm_jv *dmm_jv_get(const dmm_jv *v, const char *key) {
    if (v == NULL || v->kind != DMM_JV_OBJECT) return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}

const char *dmm_jv_kind_str(dmm_jv_kind k) {
    switch (k) {
    case DMM_JV_NULL: return "null";
    case DMM_JV_BOOL: return "a boolean";
    case DMM_JV_NUMBER: return "a number";
    case DMM_JV_STRING: return "a string";
    case DMM_JV_ARRAY: return "an array";
    case DMM_JV_OBJECT: return "an object";
    }
    return "a value";
}
