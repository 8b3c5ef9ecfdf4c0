/* tools/trace.c — the trace reader (format: ../shared/traces/README.md; contract: trace.h).
 *
 * Idea: decompress the whole file into memory through zlib (the largest trace is ~20 MB of text),
 * then parse it in one pass. The pass validates and resolves: allocation ids must be positive and
 * strictly increasing (so the id → ordinal map is a binary search in the ids seen so far), a free
 * must name a live allocation, and each free event carries the ordinal, bytes and stream of the
 * allocation it frees. Peak live bytes are computed here, from the trace alone, so that every
 * replay compares against the same number.
 *
 * Invariants after a successful parse: allocs + frees = n; every free's slot < allocs and names an
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

static int trace_err(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int trace_err(char *err, size_t cap, const char *fmt, ...) {
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

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

int dmm_trace_parse(const char *text, size_t len, dmm_trace *t, char *err, size_t errcap) {
    memset(t, 0, sizeof *t);
    parse_state ps;
    memset(&ps, 0, sizeof ps);
    void *grown_ = NULL;
    int rc = -1;
    uint64_t live = 0, last_t = 0;
    size_t lineno = 0;
    int seen_magic = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *lend = eol != NULL ? eol : end;
        lineno++;
        const char *s = p;
        p = eol != NULL ? eol + 1 : end;
        while (s < lend && (*s == ' ' || *s == '\t')) s++;
        const char *e = lend;
        while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
        if (s == e) continue;
        if (*s == '#') {
            if (lineno == 1 && e - s >= 14 && memcmp(s, "# dmm-trace v1", 14) == 0) seen_magic = 1;
            header_line(t, s, e);
            continue;
        }
        if (!seen_magic) {
            trace_err(err, errcap, "line %zu: the trace does not start with '# dmm-trace v1'; is this a dmm trace?",
                      lineno);
            goto out;
        }
        uint64_t tus = 0, id = 0;
        const char *q = s;
        if (read_u64(&q, e, &tus) != 0) {
            trace_err(err, errcap, "line %zu: expected '<t_us> a|f <id> ...', found '%.*s'", lineno,
                      (int)(e - s > 60 ? 60 : e - s), s);
            goto out;
        }
        while (q < e && (*q == ' ' || *q == '\t')) q++;
        char kind = q < e ? *q++ : '?';
        if ((kind != 'a' && kind != 'f') || read_u64(&q, e, &id) != 0 || id == 0) {
            trace_err(err, errcap, "line %zu: expected 'a <id> <bytes> <stream>' or 'f <id>' with a positive id, "
                                   "found '%.*s'",
                      lineno, (int)(e - s > 60 ? 60 : e - s), s);
            goto out;
        }
        if (t->n == ps.evcap) {
            size_t nc = ps.evcap ? ps.evcap * 2 : 4096;
            if (GROW(t->ev, nc) != 0) goto oom;
            ps.evcap = nc;
        }
        dmm_trace_event *ev = &t->ev[t->n];
        memset(ev, 0, sizeof *ev);
        ev->t_us = tus;
        if (kind == 'a') {
            uint64_t bytes = 0, sid = 0;
            if (read_u64(&q, e, &bytes) != 0 || read_u64(&q, e, &sid) != 0 || bytes == 0) {
                trace_err(err, errcap, "line %zu: an allocation needs '<t_us> a <id> <bytes> <stream>' with bytes > 0",
                          lineno);
                goto out;
            }
            if (live + bytes < live || t->total_alloc_bytes + bytes < t->total_alloc_bytes) {
                trace_err(err, errcap, "line %zu: %llu more bytes would overflow the trace's 64-bit byte totals; "
                                       "the bytes field is corrupt (a negative size?)",
                          lineno, (unsigned long long)bytes);
                goto out;
            }
            if (t->allocs > 0 && id <= ps.ids[t->allocs - 1]) {
                trace_err(err, errcap, "line %zu: allocation id %llu is not above the previous id %llu; ids must be "
                                       "unique and increasing",
                          lineno, (unsigned long long)id, (unsigned long long)ps.ids[t->allocs - 1]);
                goto out;
            }
            uint32_t si = 0;
            while (si < t->nstreams && t->stream_ids[si] != sid) si++;
            if (si == t->nstreams) {
                if (t->nstreams == sizeof t->stream_ids / sizeof t->stream_ids[0]) {
                    trace_err(err, errcap, "line %zu: more than %zu distinct streams; the reader keeps at most that many",
                              lineno, sizeof t->stream_ids / sizeof t->stream_ids[0]);
                    goto out;
                }
                t->stream_ids[t->nstreams++] = sid;
            }
            if (t->allocs == ps.cap) {
                size_t nc = ps.cap ? ps.cap * 2 : 4096;
                if (GROW(ps.ids, nc) || GROW(ps.bytes, nc) ||
                    GROW(ps.stream, nc) ||
                    GROW(ps.freed, nc))
                    goto oom;
                ps.cap = nc;
            }
            if (t->allocs > UINT32_MAX) {
                trace_err(err, errcap, "line %zu: more than %u allocations", lineno, UINT32_MAX);
                goto out;
            }
            ps.ids[t->allocs] = id;
            ps.bytes[t->allocs] = bytes;
            ps.stream[t->allocs] = (uint16_t)si;
            ps.freed[t->allocs] = 0;
            ev->kind = DMM_TRACE_ALLOC;
            ev->bytes = bytes;
            ev->slot = (uint32_t)t->allocs;
            ev->stream = (uint16_t)si;
            t->allocs++;
            live += bytes;
            t->total_alloc_bytes += bytes;
            if (bytes > t->max_bytes) t->max_bytes = bytes;
            if (live > t->peak_live_bytes) t->peak_live_bytes = live;
        } else {
            long k = find_slot(&ps, t->allocs, id);
            if (k < 0) {
                trace_err(err, errcap, "line %zu: free of allocation id %llu, which was never allocated", lineno,
                          (unsigned long long)id);
                goto out;
            }
            if (ps.freed[k]) {
                trace_err(err, errcap, "line %zu: second free of allocation id %llu", lineno, (unsigned long long)id);
                goto out;
            }
            ps.freed[k] = 1;
            ev->kind = DMM_TRACE_FREE;
            ev->bytes = ps.bytes[k];
            ev->slot = (uint32_t)k;
            ev->stream = ps.stream[k];
            t->frees++;
            live -= ps.bytes[k];
        }
        if (tus > last_t) last_t = tus;
        t->n++;
    }
    if (!seen_magic) {
        trace_err(err, errcap, "the trace is empty or lacks the '# dmm-trace v1' first line");
        goto out;
    }
    t->duration_us = last_t;
    rc = 0;
    goto out;
oom:
    trace_err(err, errcap, "out of host memory reading the trace at line %zu", lineno);
out:
    free(ps.ids);
    free(ps.bytes);
    free(ps.stream);
    free(ps.freed);
    if (rc != 0) dmm_trace_free(t);
    return rc;
}

#ifndef DMM_TRACE_NO_ZLIB
int dmm_trace_load(const char *path, dmm_trace *t, char *err, size_t errcap) {
    memset(t, 0, sizeof *t);
    gzFile f = gzopen(path, "rb");
    if (f == NULL)
        return trace_err(err, errcap, "cannot open trace '%s': %s", path, errno ? strerror(errno) : "zlib failed");
    gzbuffer(f, 1 << 17);
    size_t cap = 1 << 22, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) {
        gzclose(f);
        return trace_err(err, errcap, "out of host memory reading '%s'", path);
    }
    for (;;) {
        if (cap - len < (1 << 20)) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                gzclose(f);
                return trace_err(err, errcap, "out of host memory reading '%s' (%zu bytes so far)", path, len);
            }
            buf = nb;
            cap *= 2;
        }
        size_t room = cap - len < (1u << 30) ? cap - len : (1u << 30); /* gzread takes an unsigned */
        int r = gzread(f, buf + len, (unsigned)room);
        if (r < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            trace_err(err, errcap, "cannot read trace '%s': %s (is it a complete gzip file?)", path, msg);
            free(buf);
            gzclose(f);
            return -1;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    gzclose(f);
    char perr[256];
    int rc = dmm_trace_parse(buf, len, t, perr, sizeof perr);
    free(buf);
    if (rc != 0) return trace_err(err, errcap, "trace '%s': %s", path, perr);
    return 0;
}
#endif
