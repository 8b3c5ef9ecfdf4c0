/* SPDX-License-Identifier: Apache-2.0 */
#include <dmm/dmm.h>
#include <stdio.h>

int main(void) {
    dmm_driver *drv;          /* dmm_cuda_driver_create(0, &drv) on a GPU */
    dmm_mechanism *arena;
    dmm_allocation a;
    if (dmm_host_driver_create(NULL, &drv) || dmm_arena_create(drv, NULL, &arena)) goto fail;
    /* reserve 1 GiB of address space, back only the first 4 MiB with memory */
    dmm_range first = {0, 4 << 20};
    if (dmm_mechanism_allocate_committed(arena, 1u << 30, 0, &first, 1, &a)) goto fail;
    uint64_t mapped;
    dmm_range more = {4 << 20, 60 << 20};
    if (dmm_mechanism_commit(arena, &a, more, &mapped)) goto fail;  /* grow, same address */
    dmm_release_outcome o = dmm_mechanism_release(arena, &a);
    printf("%s: %llu bytes unmapped\n", dmm_release_state_str(o.state),
           (unsigned long long)o.unmapped_bytes);
    dmm_mechanism_destroy(arena);
    dmm_driver_destroy(drv);
    return 0;
fail:
    fprintf(stderr, "dmm: %s\n", dmm_last_error());
    return 1;
}
