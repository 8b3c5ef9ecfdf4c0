/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_ipc.c — memory shared between two processes over the real CUDA driver
 * (dmm/share.h; issue 14 acceptance 5, the part without PyTorch).
 *
 * What it proves on a GPU: a 4 GiB region of an exportable arena (cuMemCreate with
 * requestedHandleTypes = POSIX file descriptor) exported by this process and imported by a second
 * one (this binary exec'ed as "--importer FD": CUDA cannot be used in a fork()ed child) costs no
 * second copy (cuMemGetInfo's free memory drops by ~4 GiB once, in the exporter, and by less than
 * 64 MiB in the importer), and the importer reads the bytes the exporter wrote (through the
 * driver's copies, at both ends of the region); the importer's census and accounting are those of
 * dmm_import (MAPPED only, imported bytes counted); the exporter's release says the bytes were
 * exported; a handle of an arena created without exportable cannot be exported (DMM_ERR_UNSUPPORTED
 * with a sentence). Exit 77 (skipped) without a GPU. Not run on the machine it was written on (no
 * GPU there): the lead runs it on the H200. */
#include "cuda_kit.h"

#include <sys/wait.h>
#include <unistd.h>

#define REGION (4 * GIB)
#define PROBE (64 * MIB)

static int importer(int sock) {
    dmm_driver *d = NULL;
    if (dmm_cuda_driver_create(0, &d) != DMM_OK) return 10;
    kit_tally tally = {0};
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(8 * GIB, 0, 0, &acct);
    dmm_mechanism *m;
    if (dmm_arena_create(d, &c, &m) != DMM_OK) return 11;
    dmm_export ex;
    if (dmm_ipc_recv_export(sock, &ex) != DMM_OK) return 12;
    uint64_t free0 = 0, free1 = 0, total = 0;
    if (d->ops->mem_info(d, &free0, &total) != DMM_OK) return 13;
    dmm_allocation a;
    if (dmm_import(m, &ex, DMM_ACCESS_READ, &a) != DMM_OK) {
        fprintf(stderr, "importer: %s\n", dmm_last_error());
        return 14;
    }
    dmm_export_close(&ex);
    if (d->ops->mem_info(d, &free1, &total) != DMM_OK) return 15;
    if (free0 - free1 >= PROBE) {
        fprintf(stderr, "importer: the import cost %llu bytes of device memory\n", (unsigned long long)(free0 - free1));
        return 16;
    }
    dmm_stats s = kit_stats(m);
    if (s.owned_bytes.current != 0 || s.imported_bytes.current != (int64_t)REGION || tally.owned != 0 ||
        tally.mapped != (int64_t)REGION)
        return 17;
    unsigned char *got = malloc(PROBE), *want = kit_pattern(7, PROBE);
    if (d->ops->copy(d, (uintptr_t)got, (uintptr_t)a.ptr, PROBE, NULL) != DMM_OK ||
        d->ops->stream_synchronize(d, NULL) != DMM_OK || memcmp(got, want, PROBE) != 0)
        return 18;
    free(want);
    want = kit_pattern(8, PROBE);
    if (d->ops->copy(d, (uintptr_t)got, (uintptr_t)a.ptr + REGION - PROBE, PROBE, NULL) != DMM_OK ||
        d->ops->stream_synchronize(d, NULL) != DMM_OK || memcmp(got, want, PROBE) != 0)
        return 19;
    free(want);
    free(got);
    if (dmm_mechanism_release(m, &a).state != DMM_RELEASE_COMPLETE) return 20;
    dmm_driver_census k = kit_census(d);
    if (k.handles != 0 || k.mapped_bytes != 0 || k.imported_handles != 0) return 21;
    if (dmm_mechanism_destroy(m) != DMM_OK) return 22;
    dmm_driver_destroy(d);
    return 0;
}

static dmm_driver *g_cuda;

static void test_a_second_process_maps_the_same_4gib_without_a_copy(void **state) {
    (void)state;
    kit_tally tally = {0};
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(8 * GIB, 0, 0, &acct);
    c.exportable = true;
    dmm_mechanism *m;
    DMM_OK_OR_FAIL(dmm_arena_create(g_cuda, &c, &m));
    uint64_t free0 = 0, free1 = 0, total = 0;
    DMM_OK_OR_FAIL(g_cuda->ops->mem_info(g_cuda, &free0, &total));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, REGION, 0, &a));
    DMM_OK_OR_FAIL(g_cuda->ops->mem_info(g_cuda, &free1, &total));
    assert_true(free0 - free1 >= REGION);
    unsigned char *head = kit_pattern(7, PROBE), *tail = kit_pattern(8, PROBE);
    kit_put(g_cuda, (uintptr_t)a.ptr, head, PROBE);
    kit_put(g_cuda, (uintptr_t)a.ptr + REGION - PROBE, tail, PROBE);
    free(head);
    free(tail);
    dmm_export ex;
    DMM_OK_OR_FAIL(dmm_export_range(m, &a, (dmm_range){0, REGION}, DMM_ACCESS_READ, &ex));
    const char *const args[] = {"--importer", NULL};
    int sock;
    pid_t pid = dmm_test_spawn_self("test_cuda_ipc", args, &sock);
    DMM_OK_OR_FAIL(dmm_ipc_send_export(sock, &ex));
    dmm_export_close(&ex);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the importer failed: %s %d", WIFEXITED(st) ? "exit" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    close(sock);
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.exported_bytes, REGION);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    kit_tally_zero(&tally);
}

static void test_a_handle_made_without_the_handle_type_cannot_be_exported(void **state) {
    (void)state;
    dmm_arena_config c = kit_config(8 * GIB, 0, 0, NULL);
    dmm_mechanism *m;
    DMM_OK_OR_FAIL(dmm_arena_create(g_cuda, &c, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 2 * MIB, 0, &a));
    dmm_export ex;
    assert_int_equal(dmm_export_range(m, &a, (dmm_range){0, 2 * MIB}, DMM_ACCESS_READ, &ex), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("exportable", NULL);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--importer") == 0) return importer(atoi(argv[2]));
    g_cuda = kit_cuda_open_or_skip("test_cuda_ipc");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_second_process_maps_the_same_4gib_without_a_copy),
        cmocka_unit_test(test_a_handle_made_without_the_handle_type_cannot_be_exported),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_test_census_zero(g_cuda);
    dmm_driver_destroy(g_cuda);
    return rc;
}
