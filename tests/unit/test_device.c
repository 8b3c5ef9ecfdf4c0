/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_device.c — the device front (dmm/device.h) driven directly, with no framework and
 * through its public header only, as an adapter would use it: blocks on two streams; a tag put to
 * sleep and woken with its contents kept, at the same addresses; a tag discarded and woken (mapped
 * again, writable); a graph-capture pool (a capture served from memory mapped before it, with no
 * driver call); a region exported by another process, received over a socket and imported; two
 * devices under one holder of the caller's, whose reclaim a malloc short of budget asks.
 *
 * The device runs over the fault driver over the host driver: the fault driver is transparent here but
 * for its capture switch (dmm_fault_capture) and its call counters. Every test ends with the device
 * destroyed and the host driver's census at zero.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testkit.h"

#include "dmm/device.h"
#include "dmm/dmm.h"

#define MIB ((uint64_t)1 << 20)

typedef struct fx {
    dmm_driver *host, *fault;
    dmm_governor *gov;
    dmm_device *dev;
    dmm_stream s1, s2;
} fx;

static void fx_open(fx *f) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->fault));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.pool_va_bytes = 1024 * MIB;
    cfg.reserve_bytes = 8192 * MIB;
    cfg.tag_segment_bytes = 256 * MIB;
    DMM_OK_OR_FAIL(dmm_device_create(f->fault, f->gov, &cfg, &f->dev));
    DMM_OK_OR_FAIL(f->fault->ops->stream_create(f->fault, &f->s1));
    DMM_OK_OR_FAIL(f->fault->ops->stream_create(f->fault, &f->s2));
}

static void fx_close(fx *f) {
    (void)dmm_device_tag_default(NULL); /* process-wide: a test that failed half-way leaves none to the next */
    DMM_OK_OR_FAIL(dmm_device_destroy(f->dev));
    DMM_OK_OR_FAIL(f->fault->ops->stream_destroy(f->fault, f->s1));
    DMM_OK_OR_FAIL(f->fault->ops->stream_destroy(f->fault, f->s2));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->fault);
    dmm_driver_destroy(f->host);
}

static void fill(void *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(seed * 31u + i * 7u + (i >> 13));
}

static bool same(const void *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != (unsigned char)(seed * 31u + i * 7u + (i >> 13))) return false;
    return true;
}

/* The value of `"key":{"current":N` in the device's stats JSON. */
static uint64_t stat_current(fx *f, const char *key) {
    static char buf[1 << 16];
    size_t need = 0;
    DMM_OK_OR_FAIL(dmm_device_stats_json(f->dev, buf, sizeof buf, &need));
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":{\"current\":", key);
    const char *at = strstr(buf, pat);
    assert_non_null(at);
    return strtoull(at + strlen(pat), NULL, 10);
}

/* The value of `"key":N` in the stats JSON's graphs object. */
static uint64_t graph_stat(fx *f, const char *key) {
    static char buf[1 << 16];
    size_t need = 0;
    DMM_OK_OR_FAIL(dmm_device_stats_json(f->dev, buf, sizeof buf, &need));
    const char *g = strstr(buf, "\"graphs\":{");
    assert_non_null(g);
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(g, pat);
    assert_non_null(at);
    return strtoull(at + strlen(pat), NULL, 10);
}

static void blocks_on_two_streams(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *a = NULL, *b = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s1, &a));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 5 * MIB, f.s2, &b));
    assert_non_null(a);
    assert_non_null(b);
    fill(a, 3 * MIB, 1);
    fill(b, 5 * MIB, 2);
    assert_true(same(a, 3 * MIB, 1) && same(b, 5 * MIB, 2));
    void *odd = NULL; /* 1000 bytes: 1024 allocated (torch's rounding to 512), 1000 requested */
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 1000, f.s1, &odd));
    assert_int_equal(stat_current(&f, "allocation"), 3);
    assert_int_equal(stat_current(&f, "allocated_bytes"), 8 * MIB + 1024);
    assert_int_equal(stat_current(&f, "requested_bytes"), 8 * MIB + 1000);
    DMM_OK_OR_FAIL(dmm_device_record_stream(a, f.s2)); /* used on s2 too: handed out again after s2's work */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, a, f.s1)); /* the device knows each block's size */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, b, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, odd, f.s2)); /* on another stream than its own */
    assert_int_equal(dmm_device_free(f.dev, b, f.s2), DMM_ERR_UNKNOWN_ALLOCATION); /* twice: refused */
    assert_int_equal(stat_current(&f, "allocation"), 0);
    assert_int_equal(stat_current(&f, "allocated_bytes"), 0);
    assert_int_equal(stat_current(&f, "requested_bytes"), 0);
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    /* a consumer stream ordered after another's work: one event recorded there and waited for here */
    uint64_t waits = dmm_fault_calls(f.fault, DMM_OP_STREAM_WAIT_EVENT);
    uint64_t records = dmm_fault_calls(f.fault, DMM_OP_EVENT_RECORD);
    DMM_OK_OR_FAIL(dmm_device_stream_wait(f.dev, f.s2, f.s1));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_STREAM_WAIT_EVENT), waits + 1);
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_EVENT_RECORD), records + 1);
    DMM_OK_OR_FAIL(dmm_device_stream_wait(f.dev, f.s1, f.s1)); /* the same stream: nothing to order */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_STREAM_WAIT_EVENT), waits + 1);
    assert_int_equal(dmm_device_stream_wait(NULL, f.s2, f.s1), DMM_ERR_INVALID_ARGUMENT);
    fx_close(&f);
}

static void a_tag_sleeps_and_wakes_with_its_contents(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *w[3];
    DMM_OK_OR_FAIL(dmm_device_tag_begin("weights"));
    for (int i = 0; i < 3; i++) {
        DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 4 * MIB, f.s1, &w[i]));
        fill(w[i], 4 * MIB, 10u + (unsigned)i);
    }
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    uint64_t mapped = stat_current(&f, "reserved_bytes");
    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "weights", DMM_DEVICE_TO_HOST, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "weights"));
    assert_true(stat_current(&f, "reserved_bytes") + 12 * MIB <= mapped); /* the tag left the device */
    assert_true(dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC) > 0);         /* through the driver's host copies */
    /* asleep, each tensor's bytes are in the pinned copy (torch_memory_saver's get_cpu_backup) */
    for (int i = 0; i < 3; i++) {
        void *copy = NULL;
        DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, w[i], 4 * MIB, &copy));
        assert_non_null(copy);
        assert_true(same(copy, 4 * MIB, 10u + (unsigned)i));
    }
    void *none = w[0];
    DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, (char *)w[2] + 4 * MIB, 1, &none)); /* past what was saved */
    assert_null(none);
    none = w[0];
    DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, (char *)w[2] + 4 * MIB - 4, 8, &none)); /* straddles its end */
    assert_null(none);
    DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, &none, 8, &none)); /* host memory: in no tag */
    assert_null(none);
    assert_int_equal(dmm_device_host_copy(f.dev, w[0], 8, NULL), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "weights", f.s1));
    DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, w[0], 8, &none)); /* resident: no copy to read */
    assert_null(none);
    for (int i = 0; i < 3; i++) assert_true(same(w[i], 4 * MIB, 10u + (unsigned)i)); /* same addresses, same bytes */
    DMM_OK_OR_FAIL(dmm_device_release_host(f.dev, "weights"));
    for (int i = 0; i < 3; i++) DMM_OK_OR_FAIL(dmm_device_free(f.dev, w[i], f.s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_FREE), dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC));
    fx_close(&f);
}

typedef struct other_thread {
    dmm_device *dev;
    dmm_stream s;
    void *p;
    dmm_status st;
} other_thread;

static void *malloc_on_another_thread(void *arg) {
    other_thread *t = arg;
    t->st = dmm_device_malloc(t->dev, 2 * MIB, t->s, &t->p);
    return NULL;
}

/* Whether p lies in a tag that sleeps with a copy now (its pinned copy exists). */
static bool in_a_copied_tag(fx *f, void *p) {
    void *copy = NULL;
    DMM_OK_OR_FAIL(dmm_device_host_copy(f->dev, p, 8, &copy));
    return copy != NULL;
}

/* A default tag (torch_memory_saver's TMS_INIT_ENABLE): every malloc outside a scope is in it, on any
 * thread; a tag scope wins over it, an untagged scope takes the pool (the saver's disable()); a bad
 * name changes nothing; cleared, mallocs come from the pool again. */
static void a_default_tag_holds_every_malloc_outside_a_scope(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *a = NULL, *b = NULL, *c = NULL, *e = NULL;
    DMM_OK_OR_FAIL(dmm_device_tag_default("proc"));
    assert_int_equal(dmm_device_tag_default(""), DMM_ERR_INVALID_ARGUMENT); /* refused: "proc" stays */
    dmm_test_error_mentions("default tag", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 4 * MIB, f.s1, &a));
    fill(a, 4 * MIB, 21);
    DMM_OK_OR_FAIL(dmm_device_tag_begin("other"));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s1, &b));
    DMM_OK_OR_FAIL(dmm_device_untagged_begin());
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s1, &c));
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    other_thread t = {f.dev, NULL, NULL, DMM_OK}; /* the default stream: the malloc path with no capture to ask */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, malloc_on_another_thread, &t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    DMM_OK_OR_FAIL(t.st);
    fill(t.p, 2 * MIB, 22);

    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "proc", DMM_DEVICE_TO_HOST, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "proc"));
    assert_true(in_a_copied_tag(&f, a));
    assert_true(in_a_copied_tag(&f, t.p)); /* the other thread's too */
    assert_false(in_a_copied_tag(&f, b));  /* its own tag, awake */
    assert_false(in_a_copied_tag(&f, c));  /* the pool's */
    void *p = NULL; /* the default tag sleeps: a malloc outside a scope is served, awake, from the pool */
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 1 * MIB, f.s1, &p));
    fill(p, 1 * MIB, 23);
    DMM_OK_OR_FAIL(dmm_device_tag_begin("proc")); /* in an explicit scope, allocating in it is refused */
    void *q = NULL;
    assert_int_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s1, &q), DMM_ERR_BUSY);
    dmm_test_error_mentions("proc", "restore it", NULL);
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    assert_null(q);
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "proc", f.s1));
    assert_false(in_a_copied_tag(&f, p));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, f.s1));
    /* a block of the tag freed on one stream is not handed to a malloc on another */
    void *r1 = NULL, *r2 = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s1, &r1));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, r1, f.s1));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s2, &r2));
    assert_ptr_not_equal(r1, r2);
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, r2, f.s2));
    assert_true(same(a, 4 * MIB, 21));
    assert_true(same(t.p, 2 * MIB, 22));

    DMM_OK_OR_FAIL(dmm_device_tag_default(NULL)); /* cleared: the pool's again */
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s1, &e));
    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "proc", DMM_DEVICE_TO_HOST, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "proc"));
    assert_false(in_a_copied_tag(&f, e));
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "proc", f.s1));
    DMM_OK_OR_FAIL(dmm_device_release_host(f.dev, "proc"));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, t.p, NULL));
    void *all[] = {a, b, c, e};
    for (int i = 0; i < 4; i++) DMM_OK_OR_FAIL(dmm_device_free(f.dev, all[i], f.s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

static void a_discarded_tag_wakes_mapped_and_writable(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *kv = NULL;
    DMM_OK_OR_FAIL(dmm_device_tag_begin("kv"));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 6 * MIB, f.s1, &kv));
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    fill(kv, 6 * MIB, 3);
    uint64_t host_allocs = dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC);
    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "kv", DMM_DEVICE_DISCARD, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "kv"));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC), host_allocs); /* nothing copied */
    void *copy = kv;
    DMM_OK_OR_FAIL(dmm_device_host_copy(f.dev, kv, 8, &copy)); /* discarded: no copy */
    assert_null(copy);
    /* allocating in a tag that sleeps is refused with a sentence, nothing changed */
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_tag_begin("kv"));
    assert_int_not_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s1, &p), DMM_OK);
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    assert_null(p);
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "kv", f.s1));
    fill(kv, 6 * MIB, 4); /* mapped again at the same address: writable, contents undefined until written */
    assert_true(same(kv, 6 * MIB, 4));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, kv, f.s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

static void a_capture_is_served_from_its_pool_without_a_driver_call(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *p = NULL;
    /* without memory reserved, a capture is refused with a sentence naming the remedy */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 7));
    bool capturing = false;
    uint64_t id = 0;
    DMM_OK_OR_FAIL(dmm_device_capture_status(f.dev, f.s2, &capturing, &id));
    assert_true(capturing);
    assert_int_equal(id, 7);
    assert_int_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("capture 7", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    /* reserved before the capture: the capture's blocks come from it, with no driver call at all */
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 7));
    uint64_t calls = dmm_fault_calls(f.fault, DMM_OP_ANY);
    void *g1 = NULL, *g2 = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &g1));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s2, &g2));
    fill(g1, 1 * MIB, 5);
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, g2, f.s2));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_ANY), calls);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    /* the graph goes: its memory is reusable once its last block is freed */
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 7, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, g1, f.s2));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

/* Graph memory sleeps and wakes at the same addresses: a capture's blocks keep their bytes through a
 * sleep to host and leave the device meanwhile; after a discard they are mapped and writable again;
 * while asleep no capture is served from them (said); a sleep during a capture, a bad mode and a second
 * sleep or wake that finds nothing to do change nothing; a sleep whose unmap the driver refuses leaves
 * the memory awake with its bytes. */
static void graph_memory_sleeps_and_wakes_in_place(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 9));
    void *g1 = NULL, *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &g1));
    assert_int_equal(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2), DMM_ERR_BUSY);
    dmm_test_error_mentions("capturing", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    fill(g1, 3 * MIB, 31);
    assert_int_equal(dmm_device_graphs_sleep(f.dev, 7, f.s2), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("DMM_DEVICE_TO_HOST", "nothing changed", NULL);

    uint64_t reserved = stat_current(&f, "reserved_bytes"), host_allocs = dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC);
    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2));
    assert_true(stat_current(&f, "reserved_bytes") + 4 * MIB <= reserved); /* off the device */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC), host_allocs + 1);
    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2)); /* nothing awake: nothing to do */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 10)); /* asleep: no capture is served from it */
    assert_int_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("asleep", "wake", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2));
    assert_true(stat_current(&f, "reserved_bytes") >= reserved);
    assert_true(same(g1, 3 * MIB, 31)); /* the same address, its bytes back */
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2)); /* nothing asleep */

    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_DISCARD, f.s2));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC), host_allocs + 1); /* nothing copied */
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2));
    fill(g1, 3 * MIB, 32); /* mapped and writable again */
    assert_true(same(g1, 3 * MIB, 32));

    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_UNMAP, 1, UINT32_MAX, DMM_ERR_DRIVER));
    assert_int_not_equal(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2), DMM_OK);
    dmm_test_error_mentions("stays awake", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_true(same(g1, 3 * MIB, 32)); /* still there, with its bytes */
    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2)); /* the driver lets go now */
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2));
    assert_true(same(g1, 3 * MIB, 32));

    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 9, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, g1, f.s2));
    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2));
    DMM_OK_OR_FAIL(dmm_device_poll(f.dev, NULL)); /* (the release's event seen complete: the segment idle) */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 11)); /* idle and asleep: no capture is served from it */
    assert_int_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("asleep", "wake", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    assert_true(dmm_fault_calls(f.fault, DMM_OP_HOST_FREE) < dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL)); /* a trim gives it back, its copy too */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_FREE), dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC));
    fx_close(&f);
}

/* A fit gives back what a capture's graph segment did not use: of a 16 MiB reserve, a capture whose
 * blocks reached 5 MiB keeps 6 MiB (whole pieces), its blocks keep their bytes; a later capture of its
 * pool fits in what is left, one that needs more is refused; a fit during a capture is refused; sleep
 * and wake move what is left. */
static void a_fit_gives_back_what_captures_did_not_use(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *tmp = NULL, *out = NULL, *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 16 * MIB, f.s2));
    uint64_t reserved0 = stat_current(&f, "reserved_bytes");
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 60));
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 7));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &tmp));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s2, &out));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, tmp, f.s2));
    assert_int_equal(dmm_device_graph_fit(f.dev, 60, f.s2), DMM_ERR_BUSY); /* not during a capture */
    dmm_test_error_mentions("capturing", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    fill(out, 2 * MIB, 61);
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 60, f.s2));
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 10 * MIB);
    assert_true(same(out, 2 * MIB, 61));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 60, f.s2)); /* nothing more to give */
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 10 * MIB);

    DMM_OK_OR_FAIL(dmm_device_graph_reserve_pool(f.dev, 16 * MIB, 7, f.s2)); /* a reserve the pool will not need */
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 + 6 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 61)); /* the pool's next capture: [0, 3) MiB is free */
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 7));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &p));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s1, 62)); /* another capture of the pool, still going on s1 */
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s1, 7));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 61, NULL)); /* nothing unmapped under s1's capture */
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 + 6 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 61, f.s2)); /* the pool's memory served it: the reserve goes */
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 10 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 64)); /* without a reserve, more than is left is refused */
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 7));
    assert_int_equal(dmm_device_malloc(f.dev, 4 * MIB, f.s2, &p), DMM_ERR_OUT_OF_MEMORY);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 64, f.s2));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 62, f.s1));
    /* a release whose event cannot be made changes nothing: the graph stays the pool's, and a retry lets go */
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_EVENT_RECORD, 1, 1, DMM_ERR_DRIVER));
    assert_int_not_equal(dmm_device_graph_release(f.dev, 61, f.s2), DMM_OK);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 61, f.s2));

    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2));
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 16 * MIB);
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2));
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 10 * MIB);
    assert_true(same(out, 2 * MIB, 61));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 60, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, out, f.s2));
    DMM_OK_OR_FAIL(dmm_device_poll(f.dev, NULL));
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 16 * MIB, f.s2)); /* the fitted idle segment, mapped again */
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0);
    /* a capture of one block: the fit keeps that block's pieces */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 63));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &p));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 63, f.s2));
    assert_int_equal(stat_current(&f, "reserved_bytes"), reserved0 - 12 * MIB);
    fill(p, 3 * MIB, 64);
    assert_true(same(p, 3 * MIB, 64));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 63, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, f.s2));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

/* A shared pool grows in its own segment: a later reserve of the pool maps the tail a fit gave back (the
 * first reserve of a pool leaves it room in its address range), so that a capture whose blocks do not fit
 * the pool's free holes continues there instead of in a segment of its own; a capture of the pool that
 * is still going on keeps it from being mapped (a segment of its own then). */
static void a_pool_grows_in_its_own_segment(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *tmp = NULL, *out = NULL, *big = NULL;
    DMM_OK_OR_FAIL(dmm_device_graph_reserve_pool(f.dev, 4 * MIB, 9, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 70));
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 9));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &tmp));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &out)); /* kept: the graph's output */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, tmp, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 70, f.s2));
    assert_int_equal(graph_stat(&f, "reserved_bytes"), 4 * MIB);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve_pool(f.dev, 4 * MIB, 9, f.s2)); /* the pool's tail, mapped again */
    assert_int_equal(graph_stat(&f, "segments"), 1);
    assert_int_equal(graph_stat(&f, "reserved_bytes"), 8 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 71));
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 9));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, (size_t)(7 * MIB / 2), f.s2, &big)); /* past the 3 MiB hole */
    assert_true((uintptr_t)big >= (uintptr_t)out + MIB && (uintptr_t)big + 7 * MIB / 2 <= (uintptr_t)out + 5 * MIB);
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, big, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_fit(f.dev, 71, f.s2));
    assert_int_equal(graph_stat(&f, "segments"), 1); /* one segment, fitted to what the captures reached */
    assert_int_equal(graph_stat(&f, "reserved_bytes"), 8 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s1, 72)); /* a capture of the pool going on (s1) */
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s1, 9));
    DMM_OK_OR_FAIL(dmm_device_graph_reserve_pool(f.dev, 8 * MIB, 9, f.s2)); /* nothing mapped under it */
    assert_int_equal(graph_stat(&f, "segments"), 2);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    for (uint64_t id = 70; id <= 72; id++) DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, id, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, out, f.s2));
    DMM_OK_OR_FAIL(dmm_device_poll(f.dev, NULL));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

/* Graph memory sleep and wake when things fail: a sleep while another stream's capture is served from
 * graph memory is refused; a sleep whose second copy cannot be made changes nothing and frees the first
 * (nothing was queued yet); a wake whose wait for its copies fails keeps them, and the next sleep uses
 * them again (no second copy, nothing leaked). */
static void graph_sleep_when_things_fail(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *a = NULL, *b = NULL;
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s1));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s1, 50));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s1, &a));
    assert_int_equal(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2), DMM_ERR_BUSY); /* s1 captures */
    dmm_test_error_mentions("capture 50", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2)); /* a second segment */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 51));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s2, &b));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    fill(a, 2 * MIB, 41);
    fill(b, 2 * MIB, 42);

    uint64_t allocs = dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC), frees = dmm_fault_calls(f.fault, DMM_OP_HOST_FREE);
    uint64_t copies = dmm_fault_calls(f.fault, DMM_OP_COPY);
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_HOST_ALLOC, 2, 1, DMM_ERR_OUT_OF_MEMORY));
    assert_int_not_equal(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2), DMM_OK);
    dmm_test_error_mentions("nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_COPY), copies); /* no copy began */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_FREE) - frees,
                     dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC) - allocs - 1); /* the one made went back */
    assert_true(same(a, 2 * MIB, 41) && same(b, 2 * MIB, 42)); /* awake, with their bytes */

    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_STREAM_SYNCHRONIZE, 1, 1, DMM_ERR_DRIVER));
    assert_int_not_equal(dmm_device_graphs_wake(f.dev, f.s2), DMM_OK);
    dmm_test_error_mentions("copies are kept", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_true(same(a, 2 * MIB, 41) && same(b, 2 * MIB, 42)); /* awake */
    allocs = dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC);
    DMM_OK_OR_FAIL(dmm_device_graphs_sleep(f.dev, DMM_DEVICE_TO_HOST, f.s2)); /* the kept copies serve again */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC), allocs);
    DMM_OK_OR_FAIL(dmm_device_graphs_wake(f.dev, f.s2));
    assert_true(same(a, 2 * MIB, 41) && same(b, 2 * MIB, 42));

    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 50, f.s1));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 51, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, a, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, b, f.s2));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL)); /* every copy made went back (one host_alloc failed) */
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_HOST_FREE), dmm_fault_calls(f.fault, DMM_OP_HOST_ALLOC) - 1);
    fx_close(&f);
}

/* Captures that join one shared graph pool reuse the blocks earlier captures of the pool freed: three
 * captures, largest first, fit in one reserve with no mapping; the pool's memory stays its own until its
 * last graph is released, then serves any capture. Joining outside a capture, after allocating, or pool 0
 * is refused and changes nothing. */
static void captures_of_a_shared_pool_reuse_its_memory(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *p = NULL, *out[3] = {NULL, NULL, NULL};
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2));
    assert_int_equal(dmm_device_graph_share(f.dev, f.s2, 5), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not capturing", "nothing changed", NULL);
    uint64_t maps = dmm_fault_calls(f.fault, DMM_OP_MAP);
    for (int k = 0; k < 3; k++) {
        DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 20 + (uint64_t)k));
        if (k == 0) assert_int_equal(dmm_device_graph_share(f.dev, f.s2, 0), DMM_ERR_INVALID_ARGUMENT);
        DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 5));
        DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 5)); /* the same pool again: nothing to do */
        assert_int_equal(dmm_device_graph_share(f.dev, f.s2, 6), DMM_ERR_BUSY);
        void *tmp = NULL; /* an intermediate, freed inside the capture */
        DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, (size_t)(3 - k) * MIB, f.s2, &tmp));
        DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 256 << 10, f.s2, &out[k]));
        DMM_OK_OR_FAIL(dmm_device_free(f.dev, tmp, f.s2));
        DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    }
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_MAP), maps); /* all three in the one reserve */
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 30)); /* a capture of its own: nothing left for it */
    assert_int_equal(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &p), DMM_ERR_OUT_OF_MEMORY);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 2 * MIB, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 31)); /* allocated first: too late to join */
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 1 * MIB, f.s2, &p));
    assert_int_equal(dmm_device_graph_share(f.dev, f.s2, 5), DMM_ERR_BUSY);
    dmm_test_error_mentions("before the capture allocates", NULL);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, f.s2));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 31, f.s2));

    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 20, f.s2)); /* two of three go: the pool keeps its memory */
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 21, f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, out[0], f.s2));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, out[1], f.s2));
    maps = dmm_fault_calls(f.fault, DMM_OP_MAP);
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 23)); /* a new capture of the pool: its memory still serves */
    DMM_OK_OR_FAIL(dmm_device_graph_share(f.dev, f.s2, 5));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 2 * MIB, f.s2, &p)); /* (graph 22's output lies at 1 MiB) */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, f.s2));
    DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 23, f.s2));
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_MAP), maps);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2)); /* maps a segment: the pool's is not idle */
    assert_true(dmm_fault_calls(f.fault, DMM_OP_MAP) > maps);
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 22, f.s2)); /* the last: the pool's memory is free for all */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, out[2], f.s2));
    maps = dmm_fault_calls(f.fault, DMM_OP_MAP);
    for (int k = 0; k < 2; k++) { /* both idle 4 MiB segments serve captures of their own, with no mapping */
        DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 4 * MIB, f.s2));
        DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, f.s2, 40 + (uint64_t)k));
        DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s2, &out[k]));
        DMM_OK_OR_FAIL(dmm_fault_capture(f.fault, NULL, 0));
    }
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_MAP), maps);
    for (int k = 0; k < 2; k++) {
        DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 40 + (uint64_t)k, f.s2));
        DMM_OK_OR_FAIL(dmm_device_free(f.dev, out[k], f.s2));
    }
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

/* The child: its own host driver and arena; exports 4 MiB filled with seed 21 over `sock`, then, told
 * to, writes byte 100 and says so; exits 0 when all went well. */
static int exporter(int sock, uint64_t unused) {
    (void)unused;
    dmm_driver *host = NULL;
    dmm_mechanism *arena = NULL;
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = 64 * MIB;
    if (dmm_host_driver_create(NULL, &host) != DMM_OK || dmm_arena_create(host, &ac, &arena) != DMM_OK) return 1;
    dmm_allocation a;
    if (dmm_mechanism_allocate(arena, 4 * MIB, 2 * MIB, &a) != DMM_OK) return 2;
    fill(a.ptr, 4 * MIB, 21);
    dmm_export ex;
    if (dmm_export_range(arena, &a, (dmm_range){0, 4 * MIB}, DMM_ACCESS_READ, &ex) != DMM_OK) return 3;
    if (dmm_ipc_send_export(sock, &ex) != DMM_OK) return 4;
    dmm_export_close(&ex);
    char c = 0;
    if (read(sock, &c, 1) != 1) return 5;
    ((volatile unsigned char *)a.ptr)[100] = 0xa5;
    if (write(sock, "w", 1) != 1) return 6;
    if (read(sock, &c, 1) != 1) return 7; /* the parent has read it */
    if (dmm_mechanism_release(arena, &a).state != DMM_RELEASE_COMPLETE) return 8;
    if (dmm_mechanism_destroy(arena) != DMM_OK) return 9;
    dmm_driver_destroy(host);
    return 0;
}

/* A child process running child(its end of a socket pair, arg) until it exits with its answer; *sock =
 * this process's end. */
static pid_t start_child(int (*child)(int sock, uint64_t arg), uint64_t arg, int *sock) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(child(sv[1], arg));
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

/* Waits for the child and closes this process's end: the child must have exited 0. */
static void end_child(pid_t pid, int sock) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(sock);
}

static void a_region_of_another_process_is_imported(void **state) {
    (void)state;
    int sock = -1;
    pid_t pid = start_child(exporter, 0, &sock);
    fx f;
    fx_open(&f);
    dmm_export ex;
    dmm_export_init(&ex);
    DMM_OK_OR_FAIL(dmm_ipc_recv_export(sock, &ex));
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_import(f.dev, &ex, false, &p));
    dmm_export_close(&ex);
    assert_true(same(p, 4 * MIB, 21)); /* the other process's bytes */
    assert_int_equal(write(sock, "g", 1), 1);
    char c = 0;
    assert_int_equal(read(sock, &c, 1), 1);
    assert_int_equal(((volatile unsigned char *)p)[100], 0xa5); /* its later write shows here */
    DMM_OK_OR_FAIL(dmm_device_unimport(f.dev, p));
    assert_int_equal(dmm_device_unimport(f.dev, p), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(write(sock, "d", 1), 1);
    end_child(pid, sock);
    fx_close(&f);
}

/* The child of pool_blocks_go_to_another_process: its own device over its own host driver; imports
 * the export it is sent, checks the block's bytes at `lead` (seed 33), writes seed 34 over them, says
 * so, waits to be told to go, unimports. Exits 0 when all went well. */
static int importer(int sock, uint64_t bytes) {
    fx f;
    fx_open(&f);
    dmm_export ex;
    dmm_export_init(&ex);
    uint64_t lead = 0;
    if (dmm_ipc_recv_export(sock, &ex) != DMM_OK || read(sock, &lead, sizeof lead) != (ssize_t)sizeof lead) return 1;
    void *p = NULL;
    if (dmm_device_import(f.dev, &ex, true, &p) != DMM_OK) return 2;
    dmm_export_close(&ex);
    unsigned char *b = (unsigned char *)p + lead;
    if (!same(b, bytes, 33)) return 3;
    fill(b, bytes, 34);
    char c = 0;
    if (write(sock, "w", 1) != 1 || read(sock, &c, 1) != 1) return 4;
    if (dmm_device_unimport(f.dev, p) != DMM_OK) return 5;
    return dmm_device_destroy(f.dev) == DMM_OK ? 0 : 6;
}

/* A pool block goes to another process: the whole handles under it are exported, the other process
 * reads what this one wrote and this one sees what it writes; a pointer that is not a live pool block
 * (a freed one, a tag block) is refused with a sentence and exports nothing. */
static void pool_blocks_go_to_another_process(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const uint64_t n = 3 * MIB + 4096;
    void *before = NULL, *blk = NULL, *freed = NULL, *tagged = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 4096, f.s1, &before)); /* another block in the same handle */
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, n, f.s1, &blk));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 512, f.s1, &freed));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, freed, f.s1));
    DMM_OK_OR_FAIL(dmm_device_tag_begin("kept"));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 4096, f.s1, &tagged));
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    fill(blk, n, 33);
    dmm_export ex;
    uint64_t lead = 0;
    assert_int_equal(dmm_device_export(f.dev, freed, true, &ex, &lead), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("not a live pool block", NULL);
    assert_int_equal(dmm_device_export(f.dev, tagged, true, &ex, &lead), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("outside tag scopes", NULL);
    assert_int_equal(dmm_device_export(f.dev, NULL, true, &ex, &lead), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_device_export(f.dev, blk, true, &ex, &lead));
    assert_true(ex.nchunks >= 1 && lead + n <= ex.bytes && ex.bytes % ex.granule == 0);
    assert_int_equal(((uintptr_t)blk - lead) % ex.granule, 0); /* the export starts on a handle */
    int sock = -1;
    pid_t pid = start_child(importer, n, &sock);
    DMM_OK_OR_FAIL(dmm_ipc_send_export(sock, &ex));
    dmm_export_close(&ex);
    assert_int_equal(write(sock, &lead, sizeof lead), (ssize_t)sizeof lead);
    char c = 0;
    assert_int_equal(read(sock, &c, 1), 1); /* it wrote */
    assert_true(same(blk, n, 34));
    assert_int_equal(write(sock, "g", 1), 1);
    end_child(pid, sock);
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, blk, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, before, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, tagged, f.s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.dev, NULL));
    fx_close(&f);
}

/* The holder of two devices (an adapter's, as ONNX Runtime's): its reclaim trims both devices' pools. */
typedef struct two_devices {
    dmm_device *d[2];
    int asked;
} two_devices;

static uint64_t trim_both(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)device;
    (void)wanted;
    two_devices *t = user;
    t->asked++;
    uint64_t total = 0;
    for (int i = 0; i < 2 && step == DMM_RECLAIM_CACHED; i++) {
        uint64_t r = 0;
        if (t->d[i] != NULL && dmm_pool_trim(dmm_device_pool(t->d[i]), 0, &r) == DMM_OK) total += r;
    }
    return total;
}

/* Two devices under one holder of the caller's, each with its role and no counts of its own: a pointer
 * is the device's whose address space holds it; each lease holds what its pool maps; a malloc of one
 * that the limit refuses while the other caches memory climbs the ladder to the holder's reclaim (which
 * the governor never asks of the holder that is charging), and is served after it. */
static void two_devices_share_a_holder_and_its_reclaim(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_governor *gov = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &gov));
    two_devices t = {{NULL, NULL}, 0};
    dmm_holder_config hc = {sizeof hc, "adapter", 0, trim_both, &t};
    dmm_holder *holder = NULL;
    DMM_OK_OR_FAIL(dmm_governor_holder_register(gov, &hc, &holder));
    const dmm_role roles[2] = {DMM_ROLE_WEIGHTS, DMM_ROLE_ACTIVATION};
    for (int i = 0; i < 2; i++) {
        dmm_device_config cfg = {.size = sizeof cfg, .pool_va_bytes = 256 * MIB, .cache_limit_bytes = UINT64_MAX,
                                 .max_chunk_bytes = UINT64_MAX, .holder = holder, .role_given = true,
                                 .role = roles[i], .pool_only = true};
        DMM_OK_OR_FAIL(dmm_device_create(host, gov, &cfg, &t.d[i]));
    }
    void *w = NULL, *r = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(t.d[0], 24 * MIB, NULL, &w));
    assert_true(dmm_device_contains(t.d[0], w) && !dmm_device_contains(t.d[1], w));
    DMM_OK_OR_FAIL(dmm_device_free(t.d[0], w, NULL)); /* 24 MiB stay mapped in the weights pool */
    uint64_t owned = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(gov, dmm_device_lease(t.d[0]), &owned, NULL));
    assert_true(owned >= 24 * MIB);

    /* the tier's limit leaves 16 MiB beside the weights pool's cache: 32 MiB for activations fit only
     * once the holder's reclaim gave the cache back */
    DMM_OK_OR_FAIL(dmm_governor_set_limit(gov, host->device, DMM_AXIS_OWNED, owned + 16 * MIB));
    DMM_OK_OR_FAIL(dmm_device_malloc(t.d[1], 32 * MIB, NULL, &r));
    assert_true(t.asked >= 1);
    assert_true(dmm_device_contains(t.d[1], r) && !dmm_device_contains(t.d[0], r));
    DMM_OK_OR_FAIL(dmm_lease_usage(gov, dmm_device_lease(t.d[0]), &owned, NULL));
    assert_int_equal(owned, 0);
    DMM_OK_OR_FAIL(dmm_lease_usage(gov, dmm_device_lease(t.d[1]), &owned, NULL));
    assert_true(owned >= 32 * MIB);

    /* no counts of its own: the pool counts the block, and destroy sees it live */
    dmm_pool_stats ps = {.size = sizeof ps};
    DMM_OK_OR_FAIL(dmm_pool_stats_get(dmm_device_pool(t.d[1]), &ps));
    assert_int_equal(ps.allocations.current, 1);
    assert_int_equal(dmm_device_destroy(t.d[1]), DMM_ERR_BUSY); /* seen before anything is taken down */
    dmm_test_error_mentions("dmm device: device 0 still has 1 live block", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_device_free(t.d[1], r, NULL));
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_device_destroy(t.d[i]));
        t.d[i] = NULL;
    }
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(holder)); /* the caller's: the devices left it registered */
    DMM_OK_OR_FAIL(dmm_governor_destroy(gov));
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
}

/* Bad input gets a sentence and changes nothing: a NULL device or output, a config from no version. */
static void bad_input_is_refused_with_a_sentence(void **state) {
    (void)state;
    void *p = NULL;
    assert_int_equal(dmm_device_malloc(NULL, 64, NULL, &p), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_device_malloc", "NULL", NULL);
    assert_int_equal(dmm_device_free(NULL, &p, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_device_offload(NULL, "w", DMM_DEVICE_TO_HOST, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_device_stats_json(NULL, NULL, 0, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_null(dmm_device_pool(NULL));
    dmm_device_track_blocks(NULL); /* a no-op, no crash */
    fx f;
    fx_open(&f);
    assert_int_equal(dmm_device_malloc(f.dev, 64, NULL, NULL), DMM_ERR_INVALID_ARGUMENT);
    bool capturing = false;
    assert_int_equal(dmm_device_capture_status(f.dev, f.s1, &capturing, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_device_import(f.dev, NULL, false, &p), DMM_ERR_INVALID_ARGUMENT);
    dmm_device_config old = {.size = 8};
    dmm_device *d = NULL;
    assert_int_equal(dmm_device_create(f.fault, f.gov, &old, &d), DMM_ERR_SHORT_STRUCT);
    dmm_test_error_mentions("sizeof(dmm_device_config)", "nothing was created", NULL);
    assert_null(d);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocks_on_two_streams),
        cmocka_unit_test(a_tag_sleeps_and_wakes_with_its_contents),
        cmocka_unit_test(a_discarded_tag_wakes_mapped_and_writable),
        cmocka_unit_test(a_default_tag_holds_every_malloc_outside_a_scope),
        cmocka_unit_test(a_capture_is_served_from_its_pool_without_a_driver_call),
        cmocka_unit_test(graph_memory_sleeps_and_wakes_in_place),
        cmocka_unit_test(captures_of_a_shared_pool_reuse_its_memory),
        cmocka_unit_test(graph_sleep_when_things_fail),
        cmocka_unit_test(a_fit_gives_back_what_captures_did_not_use),
        cmocka_unit_test(a_pool_grows_in_its_own_segment),
        cmocka_unit_test(a_region_of_another_process_is_imported),
        cmocka_unit_test(pool_blocks_go_to_another_process),
        cmocka_unit_test(two_devices_share_a_holder_and_its_reclaim),
        cmocka_unit_test(bad_input_is_refused_with_a_sentence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
