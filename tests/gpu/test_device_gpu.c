/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_device_gpu.c — the device front (dmm/device.h) over the real cuda driver, through its
 * public header only: blocks on two streams with their bytes moved by the device; a tag put to sleep
 * to pinned host memory (the cuda driver's host_alloc slot) and woken at the same addresses with its
 * bytes; a tag discarded and woken writable; a block used on a second stream (record_stream, ordered
 * by the driver's stream_wait_event slot); the capture query of a stream that does not capture; a
 * graph reservation given back; a region of another process (this binary exec'ed as "--exporter FD":
 * CUDA cannot be used in a fork()ed child) imported into the device, its bytes read, unimported.
 * Every test ends with the device destroyed and the cuda driver's census
 * at zero. Exit 77 (skipped) without a GPU or CUDA driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include <sys/wait.h>
#include <unistd.h>

#include "cuda_kit.h"
#include "dmm/device.h"
#include "dmm/dmm.h"

#define MIB ((uint64_t)1 << 20)

static dmm_driver *g_cuda;

typedef struct fx {
    dmm_governor *gov;
    dmm_device *dev;
    dmm_stream s1, s2;
} fx;

static void fx_open(fx *f) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.pool_va_bytes = (uint64_t)4 << 30;
    cfg.tag_segment_bytes = (uint64_t)1 << 30;
    DMM_OK_OR_FAIL(dmm_device_create(g_cuda, f->gov, &cfg, &f->dev));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_create(g_cuda, &f->s1));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_create(g_cuda, &f->s2));
}

static void fx_close(fx *f) {
    DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f->s1));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f->s2));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->dev, NULL));
    DMM_OK_OR_FAIL(dmm_device_destroy(f->dev));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_destroy(g_cuda, f->s1));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_destroy(g_cuda, f->s2));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    kit_census_zero(g_cuda);
}

static void blocks_on_two_streams(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *a = NULL, *b = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * MIB, f.s1, &a));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 5 * MIB, f.s2, &b));
    unsigned char *pa = kit_pattern(1, 3 * MIB), *pb = kit_pattern(2, 5 * MIB);
    kit_put(g_cuda, (uintptr_t)a, pa, 3 * MIB);
    kit_put(g_cuda, (uintptr_t)b, pb, 5 * MIB);
    kit_expect(g_cuda, (uintptr_t)a, pa, 3 * MIB, "the block on stream 1");
    kit_expect(g_cuda, (uintptr_t)b, pb, 5 * MIB, "the block on stream 2");
    DMM_OK_OR_FAIL(dmm_device_record_stream(a, f.s2)); /* used on s2 too: s1 is ordered after s2 at its free */
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, a, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, b, f.s2));
    free(pa);
    free(pb);
    fx_close(&f);
}

static void a_tag_sleeps_in_pinned_memory_and_wakes_with_its_bytes(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *w[2];
    unsigned char *pat[2];
    DMM_OK_OR_FAIL(dmm_device_tag_begin("weights"));
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 16 * MIB, f.s1, &w[i]));
        pat[i] = kit_pattern(10 + (uint64_t)i, 16 * MIB);
        kit_put(g_cuda, (uintptr_t)w[i], pat[i], 16 * MIB);
    }
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "weights", DMM_DEVICE_TO_HOST, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "weights"));
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "weights", f.s1));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f.s1));
    for (int i = 0; i < 2; i++) kit_expect(g_cuda, (uintptr_t)w[i], pat[i], 16 * MIB, "a woken tag block");
    DMM_OK_OR_FAIL(dmm_device_release_host(f.dev, "weights"));
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_device_free(f.dev, w[i], f.s1));
        free(pat[i]);
    }
    fx_close(&f);
}

static void a_discarded_tag_wakes_writable(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    void *kv = NULL;
    DMM_OK_OR_FAIL(dmm_device_tag_begin("kv"));
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 8 * MIB, f.s1, &kv));
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    DMM_OK_OR_FAIL(dmm_device_offload(f.dev, "kv", DMM_DEVICE_DISCARD, f.s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.dev, "kv"));
    DMM_OK_OR_FAIL(dmm_device_restore(f.dev, "kv", f.s1));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f.s1));
    unsigned char *p = kit_pattern(4, 8 * MIB);
    kit_put(g_cuda, (uintptr_t)kv, p, 8 * MIB); /* mapped again at the same address */
    kit_expect(g_cuda, (uintptr_t)kv, p, 8 * MIB, "the woken discarded block");
    free(p);
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, kv, f.s1));
    fx_close(&f);
}

static void captures_are_asked_of_the_driver(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    bool capturing = true;
    uint64_t id = 7;
    DMM_OK_OR_FAIL(dmm_device_capture_status(f.dev, f.s1, &capturing, &id));
    assert_false(capturing);
    assert_int_equal(id, 0);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f.dev, 8 * MIB, f.s1)); /* mapped now, outside any capture */
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.dev, 1, f.s1));       /* no graph 1: nothing to give back */
    fx_close(&f);
}

/* The other process: an exportable arena of its own over its own cuda driver, 4 MiB filled with
 * pattern 21 and exported read-only; it keeps the region until the importer says it is done. */
static int exporter(int sock) {
    dmm_driver *d = NULL;
    dmm_mechanism *arena = NULL;
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = 64 * MIB, .exportable = true};
    if (dmm_cuda_driver_create(0, &d) != DMM_OK || dmm_arena_create(d, &ac, &arena) != DMM_OK) return 10;
    dmm_allocation a;
    if (dmm_mechanism_allocate(arena, 4 * MIB, 2 * MIB, &a) != DMM_OK) return 11;
    unsigned char *bytes = kit_pattern(21, 4 * MIB);
    if (d->ops->copy(d, (uintptr_t)a.ptr, (uintptr_t)bytes, 4 * MIB, NULL) != DMM_OK ||
        d->ops->stream_synchronize(d, NULL) != DMM_OK)
        return 12;
    free(bytes);
    dmm_export ex;
    if (dmm_export_range(arena, &a, (dmm_range){0, 4 * MIB}, DMM_ACCESS_READ, &ex) != DMM_OK) return 13;
    if (dmm_ipc_send_export(sock, &ex) != DMM_OK) return 14;
    dmm_export_close(&ex);
    char c = 0;
    if (read(sock, &c, 1) != 1) return 15; /* the importer is done */
    if (dmm_mechanism_release(arena, &a).state != DMM_RELEASE_COMPLETE) return 16;
    if (dmm_mechanism_destroy(arena) != DMM_OK) return 17;
    dmm_driver_destroy(d);
    return 0;
}

static void a_region_of_another_process_is_imported(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const char *const args[] = {"--exporter", NULL};
    int sock = -1;
    pid_t pid = dmm_test_spawn_self("test_device_gpu", args, &sock);
    dmm_export ex;
    dmm_export_init(&ex);
    DMM_OK_OR_FAIL(dmm_ipc_recv_export(sock, &ex));
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_import(f.dev, &ex, false, &p));
    dmm_export_close(&ex);
    unsigned char *want = kit_pattern(21, 4 * MIB);
    kit_expect(g_cuda, (uintptr_t)p, want, 4 * MIB, "the other process's region, imported");
    free(want);
    DMM_OK_OR_FAIL(dmm_device_unimport(f.dev, p));
    assert_int_equal(dmm_device_unimport(f.dev, p), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(write(sock, "d", 1), 1);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the exporter failed: %s %d", WIFEXITED(st) ? "exit" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    close(sock);
    fx_close(&f);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--exporter") == 0) return exporter(atoi(argv[2]));
    g_cuda = kit_cuda_open_or_skip("test_device_gpu");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocks_on_two_streams),
        cmocka_unit_test(a_tag_sleeps_in_pinned_memory_and_wakes_with_its_bytes),
        cmocka_unit_test(a_discarded_tag_wakes_writable),
        cmocka_unit_test(captures_are_asked_of_the_driver),
        cmocka_unit_test(a_region_of_another_process_is_imported),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_cuda);
    return rc;
}
