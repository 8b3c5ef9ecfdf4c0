/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_torch_record.c — the torch adapter's recorder (adapters/torch/record.c) over the host
 * driver, read back by the trace reader `dmm replay` uses (tools/trace.c, compiled in here).
 *
 * What is proven: a recorded sequence (pool blocks on three streams, a tagged block, a block left
 * live, an address reused) loads through dmm_trace_load with exactly its events, ids, rounded sizes
 * and streams, and the peak live bytes the test computes itself; frees of blocks from before the
 * recording are left out and counted; a path that cannot be written fails at start with a sentence
 * naming it and starts nothing; a second start is BUSY; a failing disk (/dev/full) never reaches malloc
 * or free and stop says the trace is incomplete; four threads recording at once (the buffers flushed
 * many times) give a trace the reader accepts with every event in it. Every test ends with the
 * driver's census at zero.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testkit.h"

#include "device/device_internal.h"
#include "../../tools/trace.c"

#include "torch_kit.h"

#include "torch_fx.h"

typedef struct fx {
    kit_torch_fx base; /* over the host driver */
    char path[64];     /* the trace file the tests record to */
} fx;

static fx *fx_open(void) {
    fx *f = malloc(sizeof *f);
    kit_torch_fx_open(&f->base, false, 0);
    kit_temp_file(f->path, "dmm-test-record");
    return f;
}

/* The teardown without the context's checks (a test that destroyed it itself). */
static void fx_free(fx *f) {
    kit_torch_fx_close(&f->base);
    unlink(f->path);
    free(f);
}

static void fx_close(fx *f) {
    assert_false(dmm__device_recording(f->base.c));
    assert_int_equal(dmm_atomic_load_relaxed(&f->base.c->blocks.cur), 0);
    fx_free(f);
}

static void *xmalloc(fx *f, size_t bytes, dmm_stream s) { return kit_torch_malloc(&f->base, bytes, s); }
static void xfree(fx *f, void *p, dmm_stream s) { kit_torch_free(&f->base, p, s); }
static dmm_device_record_stats stop(fx *f) { return kit_torch_record_stop(&f->base); }

static void load(const char *path, dmm_trace *t) {
    char err[512] = "";
    if (dmm_trace_load(path, t, err, sizeof err) != 0) fail_msg("the recorded trace does not load: %s", err);
}

/* Loads the recorded trace, which must say what the recorder's stop did: its workload, an event for
 * each allocation and each free counted, the same peak and streams. */
static void load_matching(const fx *f, const dmm_device_record_stats *st, const char *workload, dmm_trace *t) {
    load(f->path, t);
    assert_string_equal(t->workload, workload);
    assert_int_equal(t->allocs, st->allocations);
    assert_int_equal(t->frees, st->frees);
    assert_int_equal(t->n, st->allocations + st->frees);
    assert_int_equal(t->peak_live_bytes, st->peak_live_bytes);
    assert_int_equal(t->nstreams, st->streams);
}

static void a_recording_replays_through_the_trace_reader(void **state) {
    (void)state;
    fx *f = fx_open();
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, "unit-sequence"));
    assert_true(dmm__device_recording(f->base.c));
    /* live: 1024 → 1024+512 → +(3 MiB) → ... the test's own running sum */
    uint64_t live = 0, peak = 0;
#define LIVE(d) (live += (uint64_t)(d), peak = live > peak ? live : peak)
    void *a = xmalloc(f, 1000, NULL); /* 1024 */
    LIVE(1024);
    void *b = xmalloc(f, 1, f->base.s1); /* 512 */
    LIVE(512);
    void *c = xmalloc(f, (size_t)3 << 20, f->base.s2); /* 3 MiB */
    LIVE(3u << 20);
    DMM_OK_OR_FAIL(dmm_device_tag_begin("weights"));
    void *w = xmalloc(f, 5000, NULL); /* 5120, in a tag segment */
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    LIVE(5120);
    xfree(f, c, f->base.s2);
    LIVE(-(int64_t)(3u << 20));
    xfree(f, a, NULL);
    LIVE(-1024);
    void *a2 = xmalloc(f, 1000, NULL); /* the same size again: typically the same address, a new id */
    LIVE(1024);
    xfree(f, b, f->base.s1);
    LIVE(-512);
    xfree(f, w, NULL);
    LIVE(-5120);
    dmm_device_record_stats st = stop(f);
    assert_false(dmm__device_recording(f->base.c));
    assert_int_equal(st.allocations, 5);
    assert_int_equal(st.frees, 4);
    assert_int_equal(st.untracked_frees, 0);
    assert_int_equal(st.live_bytes, 1024);
    assert_int_equal(st.peak_live_bytes, peak);
    assert_int_equal(st.streams, 3);

    dmm_trace t;
    load_matching(f, &st, "unit-sequence", &t); /* 9 events, 5 allocations, 4 frees, 3 streams */
    assert_int_equal(t.max_bytes, 3u << 20);
    assert_int_equal(t.total_alloc_bytes, 1024 + 512 + (3u << 20) + 5120 + 1024);
    assert_int_equal(t.stream_ids[0], 0); /* the default stream first, then s1, s2 in order of first use */
    assert_int_equal(t.stream_ids[1], 1);
    assert_int_equal(t.stream_ids[2], 2);
    const uint8_t kinds[9] = {DMM_TRACE_ALLOC, DMM_TRACE_ALLOC, DMM_TRACE_ALLOC, DMM_TRACE_ALLOC, DMM_TRACE_FREE,
                              DMM_TRACE_FREE,  DMM_TRACE_ALLOC, DMM_TRACE_FREE,  DMM_TRACE_FREE};
    const uint32_t slots[9] = {0, 1, 2, 3, 2, 0, 4, 1, 3};
    for (size_t i = 0; i < 9; i++) {
        assert_int_equal(t.ev[i].kind, kinds[i]);
        assert_int_equal(t.ev[i].slot, slots[i]);
        if (i > 0) assert_true(t.ev[i].t_us >= t.ev[i - 1].t_us);
    }
    assert_int_equal(t.ev[0].t_us, 0); /* times count from the first event */
    assert_int_equal(t.ev[1].stream, 1);
    assert_int_equal(t.ev[2].stream, 2);
    assert_int_equal(t.ev[3].bytes, 5120);
    dmm_trace_free(&t);
    xfree(f, a2, NULL);
    fx_close(f);
}

static void frees_of_blocks_from_before_the_recording_are_left_out(void **state) {
    (void)state;
    fx *f = fx_open();
    void *old = xmalloc(f, 4096, NULL);
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, NULL));
    void *p = xmalloc(f, 4096, f->base.s1);
    xfree(f, old, NULL);
    xfree(f, p, f->base.s1);
    dmm_device_record_stats st = stop(f);
    assert_int_equal(st.allocations, 1);
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.untracked_frees, 1);
    assert_int_equal(st.peak_live_bytes, 4096);
    assert_int_equal(st.streams, 1);
    dmm_trace t;
    load_matching(f, &st, "recorded", &t); /* 2 events, peak 4096, one stream: */
    assert_int_equal(t.stream_ids[0], 1);
    dmm_trace_free(&t);
    /* stopped: the next malloc and free are not recorded, and stop again is refused */
    p = xmalloc(f, 512, NULL);
    xfree(f, p, NULL);
    assert_int_equal(dmm_device_record_stop(f->base.c, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not recording", NULL);
    fx_close(f);
}

static void a_bad_path_fails_at_start_and_changes_nothing(void **state) {
    (void)state;
    fx *f = fx_open();
    const char *bad = "/tmp/dmm-test-record-no-such-folder/x/run.trace.gz";
    assert_int_equal(dmm_device_record_start(f->base.c, bad, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("cannot open", bad, "No such file or directory", "nothing was started", NULL);
    assert_false(dmm__device_recording(f->base.c));
    assert_int_equal(access("/tmp/dmm-test-record-no-such-folder", F_OK), -1);
    assert_int_equal(dmm_device_record_start(f->base.c, "", NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("path is empty", NULL);
    assert_int_equal(dmm_device_record_start(f->base.c, f->path, "two\nlines"), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("one line", NULL);
    assert_false(dmm__device_recording(f->base.c));
    void *p = xmalloc(f, 512, NULL);
    xfree(f, p, NULL);
    /* a second start while one records is BUSY and keeps the first */
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, NULL));
    assert_int_equal(dmm_device_record_start(f->base.c, "/tmp/dmm-test-record-other.gz", NULL), DMM_ERR_BUSY);
    dmm_test_error_mentions("already recording", f->path, NULL);
    assert_int_equal(access("/tmp/dmm-test-record-other.gz", F_OK), -1);
    p = xmalloc(f, 512, NULL);
    xfree(f, p, NULL);
    dmm_device_record_stats st = stop(f);
    assert_int_equal(st.allocations, 1);
    fx_close(f);
}

static void a_failing_disk_never_reaches_malloc_and_stop_says_so(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) skip();
    fx *f = fx_open();
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, "/dev/full", "full"));
    /* enough events to fill a buffer several times: every write fails, no malloc or free does */
    for (int i = 0; i < 200000; i++) {
        void *p = xmalloc(f, 512 + (size_t)(i % 64) * 512, i % 2 ? f->base.s1 : NULL);
        xfree(f, p, i % 2 ? f->base.s1 : NULL);
    }
    dmm_device_record_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    assert_int_equal(dmm_device_record_stop(f->base.c, &st), DMM_ERR_DRIVER);
    dmm_test_error_mentions("incomplete", "/dev/full", NULL);
    assert_true(st.allocations > 0);
    assert_false(dmm__device_recording(f->base.c));
    /* a fresh recording works afterwards */
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, NULL));
    void *p = xmalloc(f, 512, NULL);
    xfree(f, p, NULL);
    st = stop(f);
    assert_int_equal(st.frees, 1);
    fx_close(f);
}

/* ---- threads ---- */
#define THREADS 4
#define ROUNDS 30000

typedef struct worker {
    fx *f;
    dmm_stream s;
    unsigned seed;
} worker;

static void *work(void *u) {
    worker *w = u;
    void *held[8] = {0};
    size_t sizes[8] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int k = (int)(rand_r(&w->seed) % 8);
        if (held[k] != NULL) {
            if (dmm_device_free(w->f->base.c, held[k], w->s) != DMM_OK) return (void *)1;
            held[k] = NULL;
        } else {
            sizes[k] = 512 + (size_t)(rand_r(&w->seed) % 256) * 512;
            if (dmm_device_malloc(w->f->base.c, sizes[k], w->s, &held[k]) != DMM_OK) return (void *)1;
        }
    }
    for (int k = 0; k < 8; k++)
        if (held[k] != NULL && dmm_device_free(w->f->base.c, held[k], w->s) != DMM_OK) return (void *)1;
    return NULL;
}

static void threads_record_one_valid_trace(void **state) {
    (void)state;
    fx *f = fx_open();
    dmm_stream streams[THREADS];
    for (int i = 0; i < THREADS; i++) DMM_OK_OR_FAIL(f->base.host->ops->stream_create(f->base.host, &streams[i]));
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, "threads"));
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){f, streams[i], (unsigned)(i + 1)};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *rc = NULL;
        pthread_join(th[i], &rc);
        assert_null(rc);
    }
    dmm_device_record_stats st = stop(f);
    assert_int_equal(st.allocations, st.frees);
    assert_true(st.allocations > (uint64_t)THREADS * ROUNDS / 4);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.streams, THREADS);
    dmm_trace t;
    load_matching(f, &st, "threads", &t); /* ids increasing, every free after its allocation: else the reader refuses */
    dmm_trace_free(&t);
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->base.c, NULL)); /* the heaps' last fences are polled */
    for (int i = 0; i < THREADS; i++) DMM_OK_OR_FAIL(f->base.host->ops->stream_destroy(f->base.host, streams[i]));
    fx_close(f);
}

static void destroy_stops_a_recording_still_on(void **state) {
    (void)state;
    fx *f = fx_open();
    DMM_OK_OR_FAIL(dmm_device_record_start(f->base.c, f->path, NULL));
    void *p = xmalloc(f, 512, NULL);
    xfree(f, p, NULL);
    DMM_OK_OR_FAIL(dmm_device_destroy(f->base.c)); /* the file is closed whole */
    f->base.c = NULL;
    dmm_trace t;
    load(f->path, &t);
    assert_int_equal(t.n, 2);
    dmm_trace_free(&t);
    fx_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_recording_replays_through_the_trace_reader),
        cmocka_unit_test(frees_of_blocks_from_before_the_recording_are_left_out),
        cmocka_unit_test(a_bad_path_fails_at_start_and_changes_nothing),
        cmocka_unit_test(a_failing_disk_never_reaches_malloc_and_stop_says_so),
        cmocka_unit_test(threads_record_one_valid_trace),
        cmocka_unit_test(destroy_stops_a_recording_still_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
