/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_torch_dlpack.c — the claims and DLPack tensors of libdmm_torch.so
 * (adapters/torch/dlpack.c), compiled in here over host memory, under the sanitizers.
 *
 * What is proven: a claim counts its creator and each DLPack tensor not yet deleted; the tensor
 * describes the whole claim (address, 1-D uint8, stride 1, the device type and index asked); its
 * deleter gives its hold back once and frees the struct; the memory of a claim that owns it is freed
 * (dmm_torch_free) exactly once, with the last holder, in either order, and never for one that does
 * not own it; an import's claim is unmapped (dmm_torch_unimport) once, with its last holder; the count
 * of live claims follows; bad input is refused; the capsule destructor outside a
 * Python process does nothing. dmm_torch_free is this file's: it records the call and frees the host
 * memory (the real one is torch_cuda.c's, on a GPU).
 */
#include "../../adapters/torch/dlpack.c"

#include <fcntl.h>
#include <sys/eventfd.h>

#include "testkit.h"

static int g_frees, g_unimports;
static void *g_freed, *g_unimported;

void dmm_torch_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size;
    (void)device;
    (void)stream;
    g_frees++;
    g_freed = ptr;
    free(ptr);
}

int dmm_torch_unimport(int device, void *ptr) {
    (void)device;
    g_unimports++;
    g_unimported = ptr;
    return 0;
}

static void a_tensor_holds_its_claim_and_describes_it(void **state) {
    (void)state;
    g_frees = 0;
    uint64_t live = dmm_torch_claims_live();
    void *mem = malloc(4096);
    assert_non_null(mem);
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(mem, 4096, 3, NULL, 1, &c), 0);
    assert_int_equal(dmm_torch_claims_live(), live + 1);
    assert_int_equal(dmm_torch_claim_holders(c), 1);
    dl_managed_tensor *m = dmm_torch_claim_dlpack(c, 2);
    assert_non_null(m);
    assert_int_equal(dmm_torch_claim_holders(c), 2);
    assert_ptr_equal(m->dl_tensor.data, mem);
    assert_int_equal(m->dl_tensor.device.device_type, 2);
    assert_int_equal(m->dl_tensor.device.device_id, 3);
    assert_int_equal(m->dl_tensor.ndim, 1);
    assert_int_equal(m->dl_tensor.shape[0], 4096);
    assert_int_equal(m->dl_tensor.strides[0], 1);
    assert_int_equal(m->dl_tensor.dtype.code, 1);
    assert_int_equal(m->dl_tensor.dtype.bits, 8);
    assert_int_equal(m->dl_tensor.dtype.lanes, 1);
    assert_int_equal(m->dl_tensor.byte_offset, 0);
    /* the creator goes first: the tensor keeps the memory */
    dmm_torch_claim_drop(c);
    assert_int_equal(g_frees, 0);
    assert_int_equal(dmm_torch_claims_live(), live + 1);
    m->deleter(m); /* the last holder: the memory goes, once */
    assert_int_equal(g_frees, 1);
    assert_ptr_equal(g_freed, mem);
    assert_int_equal(dmm_torch_claims_live(), live);
}

static void the_memory_goes_once_with_the_last_holder_in_either_order(void **state) {
    (void)state;
    g_frees = 0;
    void *mem = malloc(512);
    assert_non_null(mem);
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(mem, 512, 0, NULL, 1, &c), 0);
    dl_managed_tensor *a = dmm_torch_claim_dlpack(c, 2), *b = dmm_torch_claim_dlpack(c, 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(dmm_torch_claim_holders(c), 3);
    a->deleter(a);
    assert_int_equal(dmm_torch_claim_holders(c), 2);
    b->deleter(b);
    assert_int_equal(g_frees, 0); /* the creator still holds it */
    dmm_torch_claim_drop(c);
    assert_int_equal(g_frees, 1);
}

static void a_claim_that_does_not_own_its_memory_never_frees_it(void **state) {
    (void)state;
    g_frees = 0;
    static unsigned char range[8192];
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(range, sizeof range, 0, NULL, 0, &c), 0);
    dl_managed_tensor *m = dmm_torch_claim_dlpack(c, 2);
    assert_non_null(m);
    dmm_torch_claim_drop(c);
    m->deleter(m);
    assert_int_equal(g_frees, 0);
}

/* An import's claim (another process's memory, mapped here) unmaps it with the last holder, once. */
static void an_imported_claim_is_unmapped_with_its_last_holder(void **state) {
    (void)state;
    g_frees = g_unimports = 0;
    static unsigned char range[4096];
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(range, sizeof range, 1, NULL, DMM_TORCH_CLAIM_UNIMPORTS, &c), 0);
    dl_managed_tensor *m = dmm_torch_claim_dlpack_range(c, 1024, 512, 2); /* a storage inside the import */
    assert_non_null(m);
    assert_ptr_equal(m->dl_tensor.data, range + 1024);
    assert_int_equal(m->dl_tensor.shape[0], 512);
    assert_null(dmm_torch_claim_dlpack_range(c, 4000, 512, 2)); /* leaves the claim */
    assert_null(dmm_torch_claim_dlpack_range(c, 0, 0, 2));
    assert_int_equal(dmm_torch_claim_holders(c), 2);
    dmm_torch_claim_drop(c);
    assert_int_equal(g_unimports, 0);
    int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), other = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    assert_true(ev >= 0 && other >= 0);
    assert_int_equal(dmm_torch_claim_notify(c, other), 0);
    assert_int_equal(dmm_torch_claim_notify(c, ev), 0); /* replaces (and closes) the first */
    assert_int_equal(dmm_torch_claim_notify(NULL, ev), -1);
    uint64_t n = 0;
    assert_int_equal(read(ev, &n, sizeof n), -1); /* nothing yet: a holder is left */
    m->deleter(m);
    assert_int_equal(g_unimports, 1);
    assert_ptr_equal(g_unimported, range);
    assert_int_equal(g_frees, 0);
    assert_int_equal(fcntl(ev, F_GETFD), -1); /* the claim closed its descriptor ... */
    assert_int_equal(fcntl(other, F_GETFD), -1);
}

/* A sender's eventfd counts the receiver's release once, after the memory went. */
static void a_claim_tells_its_descriptor_once_the_memory_went(void **state) {
    (void)state;
    g_unimports = 0;
    static unsigned char range[4096];
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(range, sizeof range, 0, NULL, DMM_TORCH_CLAIM_UNIMPORTS, &c), 0);
    int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int dup_ev = dup(ev); /* the sender's end */
    assert_int_equal(dmm_torch_claim_notify(c, ev), 0);
    uint64_t n = 0;
    assert_int_equal(read(dup_ev, &n, sizeof n), -1);
    dmm_torch_claim_drop(c);
    assert_int_equal(g_unimports, 1);
    assert_int_equal(read(dup_ev, &n, sizeof n), (ssize_t)sizeof n);
    assert_int_equal(n, 1);
    close(dup_ev);
}

static void bad_input_is_refused(void **state) {
    (void)state;
    uint64_t live = dmm_torch_claims_live();
    static unsigned char range[64];
    dmm_torch_claim *c = NULL;
    assert_int_equal(dmm_torch_claim_create(NULL, 64, 0, NULL, 0, &c), -1);
    assert_int_equal(dmm_torch_claim_create(range, 0, 0, NULL, 0, &c), -1);
    assert_int_equal(dmm_torch_claim_create(range, (uint64_t)1 << 63, 0, NULL, 0, &c), -1);
    assert_int_equal(dmm_torch_claim_create(range, 64, 0, NULL, 0, NULL), -1);
    assert_int_equal(dmm_torch_claim_create(range, 64, 0, NULL, 3, &c), -1); /* no such release */
    assert_int_equal(dmm_torch_claim_create(range, 64, 0, NULL, -1, &c), -1);
    assert_null(c);
    assert_int_equal(dmm_torch_claims_live(), live);
    assert_null(dmm_torch_claim_dlpack(NULL, 2));
    assert_int_equal(dmm_torch_claim_holders(NULL), 0);
    dmm_torch_claim_drop(NULL);
    /* outside a Python process the capsule destructor finds no Python and does nothing */
    dmm_torch_dlpack_capsule_destructor(range);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_tensor_holds_its_claim_and_describes_it),
        cmocka_unit_test(the_memory_goes_once_with_the_last_holder_in_either_order),
        cmocka_unit_test(a_claim_that_does_not_own_its_memory_never_frees_it),
        cmocka_unit_test(an_imported_claim_is_unmapped_with_its_last_holder),
        cmocka_unit_test(a_claim_tells_its_descriptor_once_the_memory_went),
        cmocka_unit_test(bad_input_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
