/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_trace.c — the trace reader (tools/trace.c) on hostile input.
 *
 * The input is a trace file's bytes. Plain text goes to dmm_trace_parse; input that starts with the
 * gzip magic goes to dmm_trace_load through a memfd (the loader's zlib path). What must hold:
 *   - a refusal leaves nothing (no events, n = 0) and says why in one sentence;
 *   - an accepted trace keeps the reader's invariants (trace.c's opening): allocs + frees = n; every
 *     free names an earlier allocation of its slot, freed once, with its bytes and stream; live ≥ 0;
 *     peak_live, max_bytes, total_alloc_bytes and duration are what the events say; streams dense;
 *   - it round-trips: written back as a v1 trace (ids = slot + 1) it parses to the same events;
 *   - the bounds (dmm_trace_limits) are exact: an accepted text is accepted again within {its length,
 *     its events} and refused, naming the flag that raises it, one byte or one record below either.
 * Plain text is not also run through the loader: each load allocates the loader's 4 MiB buffer,
 * which slows the harness a hundredfold; the gzip inputs cover the loader.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzzkit.h"
#include "trace.h"

static void check_accepted(const dmm_trace *t) {
    FUZZ_ASSERT(t->allocs + t->frees == t->n, "allocs %zu + frees %zu != n %zu", t->allocs, t->frees, t->n);
    FUZZ_ASSERT(t->nstreams <= sizeof t->stream_ids / sizeof t->stream_ids[0], "nstreams %u", t->nstreams);
    uint8_t *state = calloc(t->allocs ? t->allocs : 1, 1); /* 1 = allocated, 2 = freed */
    uint64_t *bytes = calloc(t->allocs ? t->allocs : 1, sizeof *bytes);
    uint16_t *stream = calloc(t->allocs ? t->allocs : 1, sizeof *stream);
    FUZZ_ASSERT(state && bytes && stream, "out of memory");
    uint64_t live = 0, peak = 0, max = 0, total = 0, last = 0;
    size_t allocs = 0;
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        FUZZ_ASSERT(e->stream < t->nstreams, "event %zu: stream %u of %u", i, e->stream, t->nstreams);
        if (e->t_us > last) last = e->t_us;
        if (e->kind == DMM_TRACE_ALLOC) {
            FUZZ_ASSERT(e->slot == allocs, "event %zu: allocation slot %u, expected %zu", i, e->slot, allocs);
            FUZZ_ASSERT(e->bytes > 0, "event %zu: an allocation of 0 bytes", i);
            state[allocs] = 1;
            bytes[allocs] = e->bytes;
            stream[allocs] = e->stream;
            allocs++;
            FUZZ_ASSERT(live + e->bytes >= live && total + e->bytes >= total, "event %zu: totals wrap", i);
            live += e->bytes;
            total += e->bytes;
            if (e->bytes > max) max = e->bytes;
            if (live > peak) peak = live;
        } else {
            FUZZ_ASSERT(e->kind == DMM_TRACE_FREE, "event %zu: kind %u", i, e->kind);
            FUZZ_ASSERT(e->slot < allocs && state[e->slot] == 1, "event %zu: free of slot %u (state %d)", i,
                        e->slot, e->slot < allocs ? state[e->slot] : -1);
            FUZZ_ASSERT(e->bytes == bytes[e->slot] && e->stream == stream[e->slot],
                        "event %zu: free of slot %u says %llu bytes on stream %u, the allocation %llu on %u", i,
                        e->slot, (unsigned long long)e->bytes, e->stream, (unsigned long long)bytes[e->slot],
                        stream[e->slot]);
            state[e->slot] = 2;
            FUZZ_ASSERT(live >= e->bytes, "event %zu: live below zero", i);
            live -= e->bytes;
        }
    }
    FUZZ_ASSERT(allocs == t->allocs, "%zu allocation events, allocs %zu", allocs, t->allocs);
    FUZZ_ASSERT(peak == t->peak_live_bytes && max == t->max_bytes && total == t->total_alloc_bytes &&
                    last == t->duration_us,
                "peak %llu/%llu max %llu/%llu total %llu/%llu duration %llu/%llu", (unsigned long long)peak,
                (unsigned long long)t->peak_live_bytes, (unsigned long long)max, (unsigned long long)t->max_bytes,
                (unsigned long long)total, (unsigned long long)t->total_alloc_bytes, (unsigned long long)last,
                (unsigned long long)t->duration_us);
    for (uint32_t i = 0; i < t->nstreams; i++)
        for (uint32_t j = 0; j < i; j++)
            FUZZ_ASSERT(t->stream_ids[i] != t->stream_ids[j], "streams %u and %u are both id %llu", i, j,
                        (unsigned long long)t->stream_ids[i]);
    FUZZ_ASSERT(memchr(t->workload, '\0', sizeof t->workload) != NULL, "workload not terminated");
    free(state);
    free(bytes);
    free(stream);
}

/* The trace written back in v1 form; NULL when out of memory. */
static char *write_back(const dmm_trace *t, size_t *len) {
    size_t cap = 64 + t->n * 80;
    char *s = malloc(cap);
    if (s == NULL) return NULL;
    size_t n = (size_t)snprintf(s, cap, "# dmm-trace v1\n");
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        if (e->kind == DMM_TRACE_ALLOC)
            n += (size_t)snprintf(s + n, cap - n, "%llu a %llu %llu %llu\n", (unsigned long long)e->t_us,
                                  (unsigned long long)e->slot + 1, (unsigned long long)e->bytes,
                                  (unsigned long long)t->stream_ids[e->stream]);
        else
            n += (size_t)snprintf(s + n, cap - n, "%llu f %llu\n", (unsigned long long)e->t_us,
                                  (unsigned long long)e->slot + 1);
    }
    *len = n;
    return s;
}

static void same_events(const dmm_trace *a, const dmm_trace *b, const char *what) {
    FUZZ_ASSERT(a->n == b->n && a->allocs == b->allocs && a->nstreams == b->nstreams &&
                    a->peak_live_bytes == b->peak_live_bytes,
                "%s: %zu/%zu events, %u/%u streams", what, a->n, b->n, a->nstreams, b->nstreams);
    for (size_t i = 0; i < a->n; i++)
        FUZZ_ASSERT(memcmp(&a->ev[i], &b->ev[i], sizeof a->ev[i]) == 0, "%s: event %zu differs", what, i);
    FUZZ_ASSERT(memcmp(a->stream_ids, b->stream_ids, a->nstreams * sizeof a->stream_ids[0]) == 0,
                "%s: stream ids differ", what);
}

/* dmm_trace_load of the bytes, through a memfd. */
static int load_bytes(const uint8_t *data, size_t size, dmm_trace *t, char *err, size_t cap) {
    int fd = memfd_create("fuzz-trace", 0);
    FUZZ_ASSERT(fd >= 0, "memfd_create failed");
    FUZZ_ASSERT(size == 0 || write(fd, data, size) == (ssize_t)size, "memfd write failed");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = dmm_trace_load(path, t, err, cap);
    close(fd);
    return rc;
}

/* The bounds, as properties of an accepted plain text of `size` bytes and t->n events. */
static void check_bounds(const char *text, size_t size, const dmm_trace *t) {
    dmm_trace u;
    char err[512] = "";
    dmm_trace_limits exact = {size ? size : 1, t->n ? t->n : 1};
    FUZZ_ASSERT(dmm_trace_parse_limited(text, size, &exact, &u, err, sizeof err) == 0 && u.n == t->n,
                "refused within its own length %zu and events %zu: %s", size, t->n, err);
    dmm_trace_free(&u);
    if (size > 1) {
        dmm_trace_limits shorter = {size - 1, 0};
        FUZZ_ASSERT(dmm_trace_parse_limited(text, size, &shorter, &u, err, sizeof err) == -1 && u.ev == NULL &&
                        strstr(err, "bytes of text") != NULL && strstr(err, "--max-input-bytes=SIZE") != NULL,
                    "a text of %zu bytes within a bound of %zu: '%s'", size, size - 1, err);
        dmm_trace_free(&u);
    }
    if (t->n > 1) {
        dmm_trace_limits fewer = {0, t->n - 1};
        FUZZ_ASSERT(dmm_trace_parse_limited(text, size, &fewer, &u, err, sizeof err) == -1 && u.ev == NULL &&
                        strstr(err, "records") != NULL && strstr(err, "--max-records=N") != NULL,
                    "%zu events within a bound of %zu: '%s'", t->n, t->n - 1, err);
        dmm_trace_free(&u);
    }
}

static void check_refused(const dmm_trace *t, const char *err) {
    FUZZ_ASSERT(t->ev == NULL && t->n == 0, "a refused trace keeps %zu events", t->n);
    FUZZ_ASSERT(err[0] != '\0', "a refusal without a sentence");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dmm_trace t;
    char err[256] = "";
    bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    int rc;
    if (gz) {
        rc = load_bytes(data, size, &t, err, sizeof err);
    } else {
        char *text = fuzz_exact_copy(data, size);
        rc = dmm_trace_parse(text, size, &t, err, sizeof err);
        if (rc == 0) check_bounds(text, size, &t);
        free(text);
    }
    if (rc != 0) {
        check_refused(&t, err);
        dmm_trace_free(&t);
    } else {
        check_accepted(&t);
        size_t len = 0;
        char *again = write_back(&t, &len);
        FUZZ_ASSERT(again != NULL, "out of memory");
        dmm_trace u;
        char err2[256] = "";
        FUZZ_ASSERT(dmm_trace_parse(again, len, &u, err2, sizeof err2) == 0, "the written-back trace is refused: %s",
                    err2);
        same_events(&t, &u, "round trip");
        dmm_trace_free(&u);
        free(again);
    }
    if (rc == 0) dmm_trace_free(&t);
    return 0;
}
