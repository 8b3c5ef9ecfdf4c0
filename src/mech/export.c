/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/export.c — the export description (dmm/share.h) as a value: making an empty one, closing
 * its descriptors, and the value-by-value check every importer and every receiver of an untrusted
 * description runs before touching anything. Knows no mechanism.
 *
 * Invariants of a description that passes dmm_export_check: size ≥ sizeof(dmm_export);
 * 1 ≤ nchunks ≤ DMM_EXPORT_MAX_CHUNKS; granule a power of two; every chunk_bytes[i] a non-zero
 * multiple of granule; bytes = Σ chunk_bytes[i] without overflow; access ∈ {READ, READ_WRITE};
 * tier a dmm_tier, index ≥ 0; with need_fds, fds[i] ≥ 0 for i < nchunks and distinct.
 */
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "dmm/share.h"

void dmm_export_init(dmm_export *ex) {
    if (ex == NULL) return;
    memset(ex, 0, sizeof *ex);
    ex->size = (uint32_t)sizeof *ex;
    for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++) ex->fds[i] = -1;
}

void dmm_export_close(dmm_export *ex) {
    if (ex == NULL) return;
    for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++)
        if (ex->fds[i] >= 0) {
            close(ex->fds[i]);
            ex->fds[i] = -1;
        }
}

dmm_status dmm_export_check(const dmm_export *ex, bool need_fds) {
    const char *op = "export description";
    if (ex == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the description is NULL", op);
    if (ex->size < sizeof *ex)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "%s: its size is %u bytes; set .size = sizeof(dmm_export) (%zu) "
                                                   "with dmm_export_init", op, ex->size, sizeof *ex);
    if (ex->nchunks == 0 || ex->nchunks > DMM_EXPORT_MAX_CHUNKS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: it names %u chunks; an export has 1 to %d", op,
                             ex->nchunks, DMM_EXPORT_MAX_CHUNKS);
    if (ex->granule == 0 || !dmm_is_pow2(ex->granule))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: granule %llu is not a power of two", op,
                             (unsigned long long)ex->granule);
    if (ex->access != DMM_ACCESS_READ && ex->access != DMM_ACCESS_READ_WRITE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: access %u is neither READ (1) nor READ_WRITE (3)", op,
                             ex->access);
    if ((unsigned)ex->device.tier > DMM_TIER_DISK || ex->device.index < 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: device (tier %d, index %d) is not a dmm device", op,
                             (int)ex->device.tier, (int)ex->device.index);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < ex->nchunks; i++) {
        uint64_t b = ex->chunk_bytes[i];
        if (b == 0 || b % ex->granule != 0)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: chunk %u has %llu bytes, not a non-zero multiple of "
                                                           "the granule (%llu)",
                                 op, i, (unsigned long long)b, (unsigned long long)ex->granule);
        if (__builtin_add_overflow(sum, b, &sum) || sum > (uint64_t)SIZE_MAX / 2)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: its chunks' sizes overflow", op);
        if (!need_fds) continue;
        if (ex->fds[i] < 0)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: chunk %u has no descriptor (%d)", op, i, ex->fds[i]);
        for (uint32_t j = 0; j < i; j++)
            if (ex->fds[j] == ex->fds[i])
                return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: chunks %u and %u name one descriptor (%d)", op, j,
                                     i, ex->fds[i]);
    }
    if (sum != ex->bytes)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: it says %llu bytes but its chunks sum to %llu", op,
                             (unsigned long long)ex->bytes, (unsigned long long)sum);
    return DMM_OK;
}
