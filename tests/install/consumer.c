/* SPDX-License-Identifier: Apache-2.0 */
/* Uses the installed dmm: a host driver, an arena, one allocation written and released. */
#include <dmm/dmm.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (dmm_version() != DMM_VERSION_NUMBER) {
        fprintf(stderr, "header %d, library %u\n", DMM_VERSION_NUMBER, dmm_version());
        return 1;
    }
    dmm_driver *host = NULL;
    dmm_mechanism *arena = NULL;
    dmm_allocation a;
    if (dmm_host_driver_create(NULL, &host) != DMM_OK || dmm_arena_create(host, NULL, &arena) != DMM_OK ||
        dmm_mechanism_allocate(arena, 1 << 20, 0, &a) != DMM_OK) {
        fprintf(stderr, "dmm: %s\n", dmm_last_error());
        return 1;
    }
    memset(a.ptr, 0x5a, a.bytes);
    dmm_release_outcome o = dmm_mechanism_release(arena, &a);
    if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE || dmm_mechanism_destroy(arena) != DMM_OK) {
        fprintf(stderr, "dmm: %s\n", dmm_last_error());
        return 1;
    }
    dmm_driver_destroy(host);
    printf("dmm %s ok\n", dmm_version_string());
    return 0;
}
