/* tests/common/torch_kit.h — the host side of the torch adapter's tests (unit and fault): the extras
 * the CUDA entry points would give the core (a capture switch, pinned host memory from malloc, both
 * counted) and the context's configuration. Include after the adapter's sources (adapter.h).
 * Header-only, static. */
#ifndef DMM_TORCH_KIT_H
#define DMM_TORCH_KIT_H

#include <stdlib.h>
#include <string.h>

/* The stream that "captures" (NULL: none) and its capture id; queries counts the capture checks. */
static struct {
    dmm_stream stream;
    uint64_t id;
    uint64_t queries;
} kit_cap;
static int kit_host_allocs, kit_host_frees; /* pinned copies made and given back */

static dmm_status kit_capture_status(void *user, dmm_stream stream, bool *capturing, uint64_t *id) {
    (void)user;
    kit_cap.queries++;
    *capturing = kit_cap.stream != NULL && stream == kit_cap.stream;
    *id = *capturing ? kit_cap.id : 0;
    return DMM_OK;
}

static dmm_status kit_host_alloc(void *user, size_t bytes, void **out) {
    (void)user;
    *out = malloc(bytes);
    if (*out == NULL) return DMM_ERR_OUT_OF_MEMORY;
    kit_host_allocs++;
    return DMM_OK;
}

static void kit_host_free(void *user, void *p) {
    (void)user;
    kit_host_frees++;
    free(p);
}

/* The extras, with the capture switch off and the counters at zero. */
static inline dmm_device_ext kit_torch_ext(void) {
    memset(&kit_cap, 0, sizeof kit_cap);
    kit_host_allocs = kit_host_frees = 0;
    dmm_device_ext x = {NULL, kit_capture_status, kit_host_alloc, kit_host_free, NULL};
    return x;
}

/* A small context: 1 GiB of pool VA in an 8 GiB reservation, 256 MiB tag segments, `limit` (0: none). */
static inline dmm_device_config kit_torch_config(uint64_t limit) {
    dmm_device_config k;
    memset(&k, 0, sizeof k);
    k.size = sizeof k;
    k.pool_va_bytes = (uint64_t)1 << 30;
    k.reserve_bytes = (uint64_t)8 << 30;
    k.tag_segment_bytes = (uint64_t)256 << 20;
    k.limit_bytes = limit;
    return k;
}

#endif
