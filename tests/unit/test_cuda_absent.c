/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_cuda_absent.c — the cuda driver where there is no CUDA driver (DESIGN §5: "a
 * machine without a GPU reports 'no CUDA driver' and runs on host"). DMM_CUDA_LIBRARY names a library
 * that does not exist, so this runs the same on a GPU machine: create reports UNSUPPORTED with the
 * loader's reason, the device count is 0 with DMM_OK, and nothing else breaks. */
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

static void no_driver_is_unsupported_with_the_reason(void **state) {
    (void)state;
    dmm_driver *d = (dmm_driver *)&d; /* overwritten with NULL on failure */
    assert_int_equal(dmm_cuda_driver_create(0, &d), DMM_ERR_UNSUPPORTED);
    assert_null(d);
    dmm_test_error_mentions("dmm_cuda_driver_create", "no CUDA driver: ", NULL);
    /* the reason is the loader's: every build has the CUDA driver (no toolkit header needed) */
    dmm_test_error_mentions("dlopen(\"libdmm-no-such-driver.so.1\") failed", NULL);
    int n = 99;
    DMM_OK_OR_FAIL(dmm_cuda_device_count(&n));
    assert_int_equal(n, 0);
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    assert_int_equal(dmm_cuda_device_query(0, &info), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("no CUDA driver", NULL);
    /* asking again gives the same answer (the load is tried once per process) */
    assert_int_equal(dmm_cuda_driver_create(0, &d), DMM_ERR_UNSUPPORTED);
}

static void bad_arguments(void **state) {
    (void)state;
    assert_int_equal(dmm_cuda_device_count(NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_cuda_driver_create(0, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    assert_int_equal(dmm_cuda_driver_set_peer_access(host, NULL, 0), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not a cuda driver", NULL);
    dmm_driver_destroy(host);
}

int main(void) {
    setenv("DMM_CUDA_LIBRARY", "libdmm-no-such-driver.so.1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_driver_is_unsupported_with_the_reason),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
