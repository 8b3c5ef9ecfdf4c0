/* SPDX-License-Identifier: Apache-2.0 */
/* tools/trace.c — the trace reader (format: ../shared/traces/README.md; contract: trace.h).
 *
 * Idea: one pass over the lines, fed one at a time to a reader (trace_reader) — from a buffer in
 * memory (dmm_trace_parse) or from zlib through a 1 MiB window (dmm_trace_load), so the text is never
 * held whole and memory follows the events, not the bytes. The loader asks zlib, at the end, whether
 * the gzip stream was complete: a stream that stops early is an error that says "truncated", reported
 * before the unfinished last line is parsed (so a cut mid-line blames the cut, not the content).
 * The pass validates and resolves: allocation ids must be positive and
 * strictly increasing (so the id → ordinal map is a binary search in the ids seen so far), a free
 * must name a live allocation, and each free event carries the ordinal, bytes and stream of the
 * allocation it frees. Peak live bytes are computed here, from the trace alone, so that every
 * replay compares against the same number.
 *
 * Bounds (trace.h, dmm_trace_limits): the text read is counted as zlib hands it over, and the loader
 * asks for no more than one byte past the bound, so an endless input (/dev/zero, a pipe that never
 * closes) or a gzip bomb ends at the bound with a sentence; event lines are counted before an event is
 * stored. Reading on after a refused line (to blame a cut stream instead) is bounded too.
 * Invariants: every line fed is at most DMM_TRACE_MAX_LINE bytes (a longer one is refused), and the
 * loader's window holds at most one unfinished line; text_bytes ≤ max_text_bytes + 1 and n ≤
 * max_records at all times. After a successful parse: allocs + frees = n; every free's slot < allocs and names an
 * allocation freed exactly once; live(t) = Σ bytes(alloc) − Σ bytes(free) ≥ 0; peak_live_bytes =
 * max_t live(t).
 *
 * Build note: define DMM_TRACE_NO_ZLIB to compile the parser without the file loader (for a user
 * without zlib; the unit test compiles the loader in and reads the real traces through it).
 */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DMM_TRACE_NO_ZLIB
#include <zlib.h>
#endif

#include "err_text.h"

void dmm_trace_free(dmm_trace *t) {
    if (t == NULL) return;
    free(t->ev);
    t->ev = NULL;
    t->n = 0;
}

/* Reads an unsigned decimal at *p (skipping blanks first); advances *p. */
static int read_u64(const char **p, const char *end, uint64_t *v) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (s >= end || *s < '0' || *s > '9') return -1;
    uint64_t x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
        s++;
    }
    *p = s;
    *v = x;
    return 0;
}

static void header_line(dmm_trace *t, const char *s, const char *end) {
    /* "# key: value" — unknown keys are ignored */
    s++; /* '#' */
    while (s < end && *s == ' ') s++;
    const char *colon = memchr(s, ':', (size_t)(end - s));
    if (colon == NULL) return;
    size_t klen = (size_t)(colon - s);
    const char *v = colon + 1;
    while (v < end && *v == ' ') v++;
    const char *vend = end;
    while (vend > v && (vend[-1] == ' ' || vend[-1] == '\r' || vend[-1] == '\t')) vend--;
    uint64_t num = 0;
    const char *q = v;
    if (klen == 8 && memcmp(s, "workload", 8) == 0) {
        size_t n = (size_t)(vend - v);
        if (n >= sizeof t->workload) n = sizeof t->workload - 1;
        memcpy(t->workload, v, n);
        t->workload[n] = '\0';
    } else if (klen == 21 && memcmp(s, "native_peak_allocated", 21) == 0) {
        if (read_u64(&q, vend, &num) == 0) t->native_peak_allocated = num;
    } else if (klen == 20 && memcmp(s, "native_peak_reserved", 20) == 0) {
        if (read_u64(&q, vend, &num) == 0) t->native_peak_reserved = num;
    }
}

typedef struct parse_state {
    uint64_t *ids;    /* id of each allocation ordinal (strictly increasing) */
    uint64_t *bytes;  /* bytes of each allocation ordinal */
    uint16_t *stream; /* dense stream of each allocation ordinal */
    uint8_t *freed;   /* 1 once freed */
    size_t cap;       /* of the four arrays above */
    size_t evcap;
} parse_state;

/* The reader: fed one line at a time (from a buffer or from zlib), so that a file is never held whole. */
typedef struct trace_reader {
    dmm_trace *t;
    parse_state ps;
    uint64_t live, last_t; /* bytes live now; the latest t_us */
    size_t lineno;         /* of the line fed last */
    int seen_magic;
    const char *path; /* the file's, for errors; NULL for text in memory */
    uint64_t max_text_bytes, max_records; /* the reading's bounds (never 0) */
    uint64_t text_bytes;                  /* of text read so far */
    char *err;
    size_t errcap;
} trace_reader;

/* The reading's error sentence, after "trace 'PATH': " when it reads a file. */
static int reader_err(trace_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reader_err(trace_reader *r, const char *fmt, ...) {
    if (r->err == NULL || r->errcap == 0) return -1;
    int n = r->path != NULL ? snprintf(r->err, r->errcap, "trace '%s': ", r->path) : 0;
    if (n < 0 || (size_t)n >= r->errcap) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errcap - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Grows array lvalue `p` to `need` elements; evaluates to 0, or -1 with p unchanged. */
#define GROW(p, need) (grow_to((void *)(p), (need), sizeof *(p), &grown_) != 0 ? -1 : ((p) = grown_, 0))
static int grow_to(void *p, size_t need, size_t elem, void **out) {
    void *q = realloc(p, need * elem);
    if (q == NULL) return -1;
    *out = q;
    return 0;
}


static long find_slot(const parse_state *ps, size_t n, uint64_t id) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ps->ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ps->ids[lo] == id ? (long)lo : -1;
}

static void reader_init(trace_reader *r, dmm_trace *t, const char *path, const dmm_trace_limits *limits, char *err,
                        size_t errcap) {
    memset(t, 0, sizeof *t);
    memset(r, 0, sizeof *r);
    r->t = t;
    r->path = path;
    r->max_text_bytes = limits != NULL && limits->max_text_bytes != 0 ? limits->max_text_bytes
                                                                      : DMM_TRACE_DEFAULT_MAX_TEXT_BYTES;
    r->max_records = limits != NULL && limits->max_records != 0 ? limits->max_records : DMM_TRACE_DEFAULT_MAX_RECORDS;
    r->err = err;
    r->errcap = errcap;
}

/* Reads the line [s, lend) (without its '\n'); 0, or -1 with the sentence in r->err. */
static int reader_line(trace_reader *r, const char *s, const char *lend) {
    dmm_trace *t = r->t;
    parse_state *ps = &r->ps;
    void *grown_ = NULL;
    size_t lineno = ++r->lineno;
    if ((size_t)(lend - s) > DMM_TRACE_MAX_LINE)
        return reader_err(r, "line %zu is longer than %d bytes; a trace line is a few dozen (is this a "
                                            "dmm trace?)",
                         lineno, DMM_TRACE_MAX_LINE);
    while (s < lend && (*s == ' ' || *s == '\t')) s++;
    const char *e = lend;
    while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
    if (s == e) return 0;
    if (*s == '#') {
        if (lineno == 1 && e - s >= 14 && memcmp(s, "# dmm-trace v1", 14) == 0) r->seen_magic = 1;
        header_line(t, s, e);
        return 0;
    }
    if (!r->seen_magic)
        return reader_err(r,
                         "line %zu: the trace does not start with '# dmm-trace v1'; is this a dmm trace?", lineno);
    uint64_t tus = 0, id = 0;
    const char *q = s;
    if (read_u64(&q, e, &tus) != 0)
        return reader_err(r, "line %zu: expected '<t_us> a|f <id> ...', found '%.*s'", lineno,
                         (int)(e - s > 60 ? 60 : e - s), s);
    while (q < e && (*q == ' ' || *q == '\t')) q++;
    char kind = q < e ? *q++ : '?';
    if ((kind != 'a' && kind != 'f') || read_u64(&q, e, &id) != 0 || id == 0)
        return reader_err(r,
                         "line %zu: expected 'a <id> <bytes> <stream>' or 'f <id>' with a positive id, found '%.*s'",
                         lineno, (int)(e - s > 60 ? 60 : e - s), s);
    if ((uint64_t)t->n >= r->max_records)
        return reader_err(r, "line %zu: more than %llu records (event lines), the most this reading takes; a longer "
                             "trace needs a higher bound (dmm replay --max-records=N), an endless input (a device, a "
                             "pipe that never closes) is not a trace",
                          lineno, (unsigned long long)r->max_records);
    if (t->n == ps->evcap) {
        size_t nc = ps->evcap ? ps->evcap * 2 : 4096;
        if (GROW(t->ev, nc) != 0) goto oom;
        ps->evcap = nc;
    }
    dmm_trace_event *ev = &t->ev[t->n];
    memset(ev, 0, sizeof *ev);
    ev->t_us = tus;
    if (kind == 'a') {
        uint64_t bytes = 0, sid = 0;
        if (read_u64(&q, e, &bytes) != 0 || read_u64(&q, e, &sid) != 0 || bytes == 0)
            return reader_err(r,
                             "line %zu: an allocation needs '<t_us> a <id> <bytes> <stream>' with bytes > 0", lineno);
        if (r->live + bytes < r->live || t->total_alloc_bytes + bytes < t->total_alloc_bytes)
            return reader_err(r,
                             "line %zu: %llu more bytes would overflow the trace's 64-bit byte totals; the bytes "
                             "field is corrupt (a negative size?)",
                             lineno, (unsigned long long)bytes);
        if (t->allocs > 0 && id <= ps->ids[t->allocs - 1])
            return reader_err(r,
                             "line %zu: allocation id %llu is not above the previous id %llu; ids must be unique and "
                             "increasing",
                             lineno, (unsigned long long)id, (unsigned long long)ps->ids[t->allocs - 1]);
        uint32_t si = 0;
        while (si < t->nstreams && t->stream_ids[si] != sid) si++;
        if (si == t->nstreams) {
            if (t->nstreams == sizeof t->stream_ids / sizeof t->stream_ids[0])
                return reader_err(r,
                                 "line %zu: more than %zu distinct streams; the reader keeps at most that many", lineno,
                                 sizeof t->stream_ids / sizeof t->stream_ids[0]);
            t->stream_ids[t->nstreams++] = sid;
        }
        if (t->allocs == ps->cap) {
            size_t nc = ps->cap ? ps->cap * 2 : 4096;
            if (GROW(ps->ids, nc) || GROW(ps->bytes, nc) || GROW(ps->stream, nc) || GROW(ps->freed, nc)) goto oom;
            ps->cap = nc;
        }
        if (t->allocs > UINT32_MAX)
            return reader_err(r, "line %zu: more than %u allocations", lineno, UINT32_MAX);
        ps->ids[t->allocs] = id;
        ps->bytes[t->allocs] = bytes;
        ps->stream[t->allocs] = (uint16_t)si;
        ps->freed[t->allocs] = 0;
        ev->kind = DMM_TRACE_ALLOC;
        ev->bytes = bytes;
        ev->slot = (uint32_t)t->allocs;
        ev->stream = (uint16_t)si;
        t->allocs++;
        r->live += bytes;
        t->total_alloc_bytes += bytes;
        if (bytes > t->max_bytes) t->max_bytes = bytes;
        if (r->live > t->peak_live_bytes) t->peak_live_bytes = r->live;
    } else {
        long k = find_slot(ps, t->allocs, id);
        if (k < 0)
            return reader_err(r, "line %zu: free of allocation id %llu, which was never allocated",
                             lineno, (unsigned long long)id);
        if (ps->freed[k])
            return reader_err(r, "line %zu: second free of allocation id %llu", lineno,
                             (unsigned long long)id);
        ps->freed[k] = 1;
        ev->kind = DMM_TRACE_FREE;
        ev->bytes = ps->bytes[k];
        ev->slot = (uint32_t)k;
        ev->stream = ps->stream[k];
        t->frees++;
        r->live -= ps->bytes[k];
    }
    if (tus > r->last_t) r->last_t = tus;
    t->n++;
    return 0;
oom:
    return reader_err(r, "out of host memory reading the trace at line %zu", lineno);
}

/* Ends the reading: rc is the reading's (0, or -1 with the sentence given); the reader's tables go, and
 * on failure the trace's too. */
static int reader_end(trace_reader *r, int rc) {
    if (rc == 0 && !r->seen_magic)
        rc = reader_err(r, "the trace is empty or lacks the '# dmm-trace v1' first line");
    if (rc == 0) r->t->duration_us = r->last_t;
    free(r->ps.ids);
    free(r->ps.bytes);
    free(r->ps.stream);
    free(r->ps.freed);
    memset(&r->ps, 0, sizeof r->ps);
    if (rc != 0) dmm_trace_free(r->t);
    return rc;
}

/* Feeds every '\n'-terminated line of [p, end) to the reader; *rest = the start of what is left (a
 * line not yet terminated). */
static int reader_lines(trace_reader *r, const char *p, const char *end, const char **rest) {
    const char *eol;
    while (p < end && (eol = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        if (reader_line(r, p, eol) != 0) return -1;
        p = eol + 1;
    }
    *rest = p;
    return 0;
}

/* The sentence for text beyond the bound. */
static int too_much_text(trace_reader *r) {
    return reader_err(r, "more than %llu bytes of text (after decompression; %zu whole lines read), the most this "
                         "reading takes; a larger trace needs a higher bound (dmm replay --max-input-bytes=SIZE), an "
                         "endless input (a device, a pipe that never closes) is not a trace",
                      (unsigned long long)r->max_text_bytes, r->lineno);
}

int dmm_trace_parse_limited(const char *text, size_t len, const dmm_trace_limits *limits, dmm_trace *t, char *err,
                            size_t errcap) {
    trace_reader r;
    reader_init(&r, t, NULL, limits, err, errcap);
    if ((uint64_t)len > r.max_text_bytes) return reader_end(&r, too_much_text(&r));
    const char *rest = text, *end = text + len;
    int rc = reader_lines(&r, text, end, &rest);
    if (rc == 0 && rest < end) rc = reader_line(&r, rest, end); /* the last line, without its '\n' */
    return reader_end(&r, rc);
}

int dmm_trace_parse(const char *text, size_t len, dmm_trace *t, char *err, size_t errcap) {
    return dmm_trace_parse_limited(text, len, NULL, t, err, errcap);
}

#ifndef DMM_TRACE_NO_ZLIB
/* What went wrong inside the compressed stream, as the reading's sentence. */
static int gz_fail(trace_reader *r, gzFile f, int zerr, const char *zmsg) {
    long long at = (long long)gzoffset(f), text = (long long)gztell(f);
    if (zerr == Z_BUF_ERROR)
        return reader_err(r, "the file is truncated: its gzip stream stops in the middle, after %lld compressed bytes "
                             "(%lld bytes of text, %zu whole lines); was the recorder killed before it finished the "
                             "file?",
                          at, text, r->lineno);
    if (zerr == Z_ERRNO)
        return reader_err(r, "reading the file failed after %lld bytes (line %zu): %s", at, r->lineno,
                          strerror(errno));
    return reader_err(r, "the file is corrupt: its compressed data is invalid near compressed byte %lld, after line "
                         "%zu (%lld bytes of text): %s",
                      at, r->lineno, text, zmsg != NULL ? zmsg : "zlib failed");
}

/* The stream's state after a gzread that returned n: Z_OK (data, or the end of a complete stream) or
 * the zlib error (Z_BUF_ERROR: the input ended inside the stream; gzread says so only here). */
static int gz_state(gzFile f, int n, const char **msg) {
    int zerr = Z_OK;
    *msg = gzerror(f, &zerr);
    if (n > 0 || (n == 0 && zerr == Z_OK)) return Z_OK;
    return zerr != Z_OK ? zerr : Z_STREAM_ERROR;
}

/* A line read wrong: if the rest of the stream is truncated or corrupt, that is the likelier cause, so
 * the sentence says it first and quotes the line's after it; else the line's sentence stands. The rest
 * is read up to BLAME_MAX bytes and never past the text bound: an input that goes on keeps the line's
 * sentence. */
#define BLAME_MAX ((uint64_t)16 << 20)
static int blame_stream(trace_reader *r, gzFile f, char *buf, size_t cap) {
    uint64_t left = r->max_text_bytes > r->text_bytes ? r->max_text_bytes - r->text_bytes : 0;
    if (left > BLAME_MAX) left = BLAME_MAX;
    int n = 0;
    while (left > 0 && (n = gzread(f, buf, (unsigned)(left < cap ? left : cap))) > 0) left -= (uint64_t)n;
    if (left == 0) return -1; /* it goes on: the line's sentence stands */
    const char *zmsg = NULL;
    int zerr = gz_state(f, n, &zmsg);
    if (zerr == Z_OK || r->err == NULL || r->errcap == 0) return zerr == Z_OK ? -1 : gz_fail(r, f, zerr, zmsg);
    char line[512];
    size_t skip = (size_t)snprintf(NULL, 0, "trace '%s': ", r->path);
    snprintf(line, sizeof line, "%s", strlen(r->err) > skip ? r->err + skip : r->err);
    gz_fail(r, f, zerr, zmsg);
    size_t used = strlen(r->err);
    snprintf(r->err + used, r->errcap - used, " (before that, %s)", line);
    return -1;
}

int dmm_trace_load_limited(const char *path, const dmm_trace_limits *limits, dmm_trace *t, char *err, size_t errcap) {
    trace_reader r;
    reader_init(&r, t, path, limits, err, errcap);
    gzFile f = gzopen(path, "rb");
    if (f == NULL)
        return dmm_tool_err(err, errcap, "cannot open trace '%s': %s", path, errno ? strerror(errno) : "zlib failed");
    gzbuffer(f, 1 << 17);
    /* the text passes through one buffer, asked of zlib 64 KiB at a time (so that a stream error is found
     * near its lines): whole lines are read out of it, the unfinished one moves to the front */
    const size_t cap = (size_t)1 << 20, ask = (size_t)1 << 16;
    _Static_assert(DMM_TRACE_MAX_LINE < (1 << 20) - (1 << 16), "an unfinished line and one request fit");
    char *buf = malloc(cap);
    if (buf == NULL) {
        gzclose(f);
        return dmm_tool_err(err, errcap, "out of host memory reading '%s'", path);
    }
    size_t held = 0; /* bytes of an unfinished line at buf[0]: at most DMM_TRACE_MAX_LINE */
    int rc = 0;
    for (;;) {
        uint64_t room = r.max_text_bytes - r.text_bytes + 1; /* one byte past the bound tells that it goes on */
        int n = gzread(f, buf + held, (unsigned)(room < ask ? room : ask));
        const char *zmsg = NULL;
        int zerr = gz_state(f, n, &zmsg);
        if (zerr != Z_OK) { /* before the unfinished line: a cut mid-line blames the cut */
            rc = gz_fail(&r, f, zerr, zmsg);
            break;
        }
        if (n > 0 && (r.text_bytes += (uint64_t)n) > r.max_text_bytes) {
            rc = too_much_text(&r);
            break;
        }
        if (n == 0) { /* the end of a complete stream */
            if (held > 0) rc = reader_line(&r, buf, buf + held);
            break;
        }
        const char *rest = buf;
        rc = reader_lines(&r, buf, buf + held + (size_t)n, &rest);
        held = (size_t)(buf + held + (size_t)n - rest);
        if (rc == 0 && held > DMM_TRACE_MAX_LINE) rc = reader_line(&r, rest, rest + held); /* refused: too long */
        if (rc != 0) {
            rc = blame_stream(&r, f, buf, cap);
            break;
        }
        memmove(buf, rest, held);
    }
    free(buf);
    int zc = gzclose(f);
    if (rc == 0 && zc != Z_OK) /* (an unfinished stream was seen above already) */
        rc = reader_err(&r, "reading the file failed when closing it (zlib error %d)", zc);
    return reader_end(&r, rc);
}

int dmm_trace_load(const char *path, dmm_trace *t, char *err, size_t errcap) {
    return dmm_trace_load_limited(path, NULL, t, err, errcap);
}
#endif
