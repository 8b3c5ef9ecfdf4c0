/* SPDX-License-Identifier: Apache-2.0 */
/* tests/stress/test_torch_observe_race.c — the device front's observers under threads: the recorder
 * (record.c), the table of pool blocks (blocks.c), the pool's committed ranges (dmm_pool_committed)
 * and its history (history.c), while the allocator serves.
 *
 * Six threads, each on its own stream, malloc and free a seeded mix of sizes (some tagged) while a
 * seventh takes snapshot JSONs, empties the cache, and turns the history off and on. At the end the
 * trace loads through the reader `dmm replay` uses with every event the recorder counted, the
 * pool's committed ranges equal its committed bytes, the table holds nothing, and the driver holds nothing.
 * Run it under TSan (make test does) and ASan.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomics.h"
#include "testkit.h"

#include "device/device_internal.h"
#include "../../tools/trace.c"

#include "torch_kit.h"

enum { WORKERS = 6, ROUNDS = 20000, SLOTS = 16 };

typedef struct shared {
    dmm_device *c;
    dmm_driver *host;
    _Atomic int done, failures;
} shared;

typedef struct worker {
    shared *sh;
    dmm_stream stream;
    unsigned seed;
    bool tagged;
} worker;

static void *work(void *u) {
    worker *w = u;
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    if (w->tagged && dmm_device_tag_begin("kv") != DMM_OK) dmm_atomic_add_seq_cst(&w->sh->failures, 1);
    for (int i = 0; i < ROUNDS; i++) {
        int k = (int)(rand_r(&w->seed) % SLOTS);
        if (p[k] != NULL) {
            if (dmm_device_free(w->sh->c, p[k], w->stream) != DMM_OK)
                dmm_atomic_add_seq_cst(&w->sh->failures, 1);
            p[k] = NULL;
        } else {
            sz[k] = rand_r(&w->seed) % 16 == 0 ? ((size_t)1 << 20) * (1 + rand_r(&w->seed) % 3)
                                               : 512 * (size_t)(1 + rand_r(&w->seed) % 64);
            if (dmm_device_malloc(w->sh->c, sz[k], w->stream, &p[k]) != DMM_OK)
                dmm_atomic_add_seq_cst(&w->sh->failures, 1);
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (p[k] != NULL && dmm_device_free(w->sh->c, p[k], w->stream) != DMM_OK)
            dmm_atomic_add_seq_cst(&w->sh->failures, 1);
    if (w->tagged) (void)dmm_device_tag_end();
    return NULL;
}

static void *observe(void *u) {
    shared *sh = u;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    for (int i = 0; !dmm_atomic_load_seq_cst(&sh->done); i++) {
        size_t need = 0;
        dmm_status s = dmm_device_snapshot_json(sh->c, buf, cap, &need);
        if (s != DMM_OK && need < cap) dmm_atomic_add_seq_cst(&sh->failures, 1); /* (too small is fine) */
        dmm_clear_error();
        if (i % 8 == 0) (void)dmm_device_empty_cache(sh->c, NULL);
        if (i % 16 == 0) (void)dmm_device_history(sh->c, i % 32 == 0 ? 0 : 512);
    }
    free(buf);
    return NULL;
}

static void observers_race_with_the_allocator(void **state) {
    (void)state;
    shared sh;
    memset(&sh, 0, sizeof sh);
    dmm_governor *gov = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &sh.host));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &gov));
    dmm_device_config k = kit_torch_config(0);
    DMM_OK_OR_FAIL(dmm_device_create(sh.host, gov, &k, &sh.c));
    dmm_device_track_blocks(sh.c);
    char path[] = "/tmp/dmm-test-observe-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    DMM_OK_OR_FAIL(dmm_device_record_start(sh.c, path, "race"));
    DMM_OK_OR_FAIL(dmm_device_history(sh.c, 1024));
    worker w[WORKERS];
    pthread_t th[WORKERS], obs;
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker){&sh, NULL, (unsigned)(7 * i + 1), i == WORKERS - 1};
        DMM_OK_OR_FAIL(sh.host->ops->stream_create(sh.host, &w[i].stream));
    }
    assert_int_equal(pthread_create(&obs, NULL, observe, &sh), 0);
    for (int i = 0; i < WORKERS; i++) assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < WORKERS; i++) pthread_join(th[i], NULL);
    dmm_atomic_store_seq_cst(&sh.done, 1);
    pthread_join(obs, NULL);
    assert_int_equal(dmm_atomic_load_seq_cst(&sh.failures), 0);

    dmm_device_record_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    DMM_OK_OR_FAIL(dmm_device_record_stop(sh.c, &st));
    dmm_trace t;
    char err[512] = "";
    if (dmm_trace_load(path, &t, err, sizeof err) != 0) fail_msg("the trace does not load: %s", err);
    assert_int_equal(t.allocs, st.allocations);
    assert_int_equal(t.frees, st.frees);
    assert_int_equal(st.allocations, st.frees); /* everything allocated while recording was freed */
    assert_int_equal(t.peak_live_bytes, st.peak_live_bytes);
    dmm_trace_free(&t);
    unlink(path);

    DMM_OK_OR_FAIL(dmm_device_empty_cache(sh.c, NULL));
    dmm_pool_stats ps = dmm_test_pool_stats(sh.c->pool);
    size_t n = 0;
    uint64_t *runs = kit_pool_runs(sh.c, &n);
    uint64_t committed = 0;
    for (size_t i = 0; i < n; i++) committed += runs[2 * i + 1];
    free(runs);
    assert_int_equal(committed, ps.committed_bytes.current);
    device_block_at *b = NULL;
    assert_int_equal(dmm__device_blocks_collect(sh.c, &b), 0);
    free(b);

    DMM_OK_OR_FAIL(dmm_device_destroy(sh.c));
    for (int i = 0; i < WORKERS; i++) DMM_OK_OR_FAIL(sh.host->ops->stream_destroy(sh.host, w[i].stream));
    DMM_OK_OR_FAIL(dmm_governor_destroy(gov));
    dmm_test_census_zero(sh.host);
    dmm_driver_destroy(sh.host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(observers_race_with_the_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
