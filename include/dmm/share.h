/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/share.h — memory shared between processes: export and import (docs/ipc.md).
 *
 * An export is the committed chunks of one range of an allocation, as file descriptors (one per
 * physical handle) plus a small description: the sizes, the granule, the device, the access an
 * importer may use, and a 128-bit random token (getrandom). The descriptors travel to another
 * process over a Unix socket (SCM_RIGHTS: dmm/ipc.h does this); there dmm_import maps them into
 * that process's own VA through its mechanism, so its releases report honest outcomes like any
 * other allocation's.
 *
 * Accounting (the governor's two axes, docs/guide.md, across processes): the exporter's mechanism charged OWNED
 * (and MAPPED) when it committed the memory, once; an import charges MAPPED only, and the stats
 * say which bytes are imported (dmm_stats.imported_bytes). An exported handle is never put in a
 * handle cache (an importer still sees its bytes); an exporter that releases it refunds it and says
 * so in the outcome (dmm_release_outcome.exported_bytes): the physical memory lives on while any
 * importer maps it (the kernel, or the CUDA driver, keeps it alive through the descriptor).
 *
 * Capability: the optional virtual-backing slots `export_range` and `import` (the arena has them;
 * eager and plugins do not: DMM_ERR_UNSUPPORTED with a sentence). Over CUDA, only chunks of an arena
 * created with exportable = true can be exported (cuMemCreate's requestedHandleTypes); the host
 * driver can export every chunk.
 *
 * Thread contract: the calls are thread-safe; a dmm_export value has one owner (its descriptors).
 */
#ifndef DMM_SHARE_H
#define DMM_SHARE_H

#include "dmm/mechanism.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most handles one export carries (also the most descriptors one message of dmm/ipc.h passes). */
#define DMM_EXPORT_MAX_CHUNKS 64
#define DMM_EXPORT_TOKEN_BYTES 16

struct dmm_export {
    uint32_t size;                                /* sizeof(dmm_export): dmm_export_init sets it */
    uint32_t nchunks;                             /* handles, in address order: 1 … DMM_EXPORT_MAX_CHUNKS */
    uint64_t bytes;                               /* Σ chunk_bytes: the imported allocation's size */
    uint64_t granule;                             /* the exporter's driver granularity */
    dmm_device_id device;                            /* the exporter's device */
    uint32_t access;                              /* the most an importer may map with (a dmm_access) */
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];        /* random (getrandom), names this export */
    uint64_t chunk_bytes[DMM_EXPORT_MAX_CHUNKS];  /* each a whole number of granules */
    int fds[DMM_EXPORT_MAX_CHUNKS];               /* one per handle; -1 = none; owned by the holder */
};

/* Sets size, nchunks = 0 and every descriptor to -1 (an empty export, safe to close). */
DMM_API void dmm_export_init(dmm_export *ex);
/* Closes every descriptor that is not -1 and sets it to -1 (the description stays). NULL is ignored. */
DMM_API void dmm_export_close(dmm_export *ex);

/* Exports [range.offset, +range.bytes) of `a` (relative to its start): the range must start on a
 * granule (absolute address), be whole granules, and be committed by `a` as whole chunks (the
 * ranges of whole commits) that are its own, live, read-write, held by no prefix and not imported.
 * `access` (READ or READ_WRITE) is the most an importer may use. On success `out` (initialised here)
 * holds new descriptors the caller owns (dmm_export_close) and the chunks are marked exported (never
 * cached again). Refused, changing nothing, with a sentence naming the range and the reason
 * (INVALID_ARGUMENT; UNKNOWN_ALLOCATION; QUARANTINED; UNSUPPORTED for a mechanism or driver that
 * cannot export). */
DMM_API dmm_status dmm_export_range(dmm_mechanism *m, const dmm_allocation *a, dmm_range range, dmm_access access,
                                    dmm_export *out);

/* Maps another process's export into a new allocation of `m` (ex->bytes, aligned to the granule),
 * with `access` (READ, or READ_WRITE where ex->access allows it). The description is checked value
 * by value (size, counts, sums, granule and device equal to m's, descriptors present); MAPPED is
 * charged before mapping, OWNED is not. The descriptors stay the caller's (the driver keeps its own
 * references): close them with dmm_export_close once imported. Transactional: on failure nothing is
 * mapped and nothing is charged. Release the allocation with dmm_mechanism_release (its outcome is
 * honest like any other's); the memory goes when the exporter's and every importer's reference are
 * gone. */
DMM_API dmm_status dmm_import(dmm_mechanism *m, const dmm_export *ex, dmm_access access, dmm_allocation *out);

/* Checks a description value by value, as every import does before touching anything (for a
 * receiver of untrusted descriptions): DMM_OK, or INVALID_ARGUMENT / SHORT_STRUCT with a sentence
 * naming the first wrong value. `need_fds`: every descriptor must be present (≥ 0). */
DMM_API dmm_status dmm_export_check(const dmm_export *ex, bool need_fds);

#ifdef __cplusplus
}
#endif
#endif /* DMM_SHARE_H */
