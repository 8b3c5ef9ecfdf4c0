/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/plugin.h — the plugin ABI (docs/abi.md): third-party mechanisms in a shared object, loaded
 * at run time, used by pools, providers and the governor like any built-in mechanism.
 *
 * Two sides share this header:
 *  - the PLUGIN (a shared object) defines the three required exports below and fills the
 *    dmm_plugin_* structs; it needs no dmm symbol (it may use the public types and inline helpers);
 *  - the HOST (libdmm) loads it with dmm_plugin_load(), makes mechanisms with
 *    dmm_plugin_mechanism_create() and unloads it with dmm_plugin_unload().
 *
 * Versions. DMM_PLUGIN_ABI_MAJOR changes only when a layout below changes incompatibly; the host
 * refuses any other major (DMM_ERR_VERSION_MISMATCH). DMM_PLUGIN_ABI_MINOR grows when slots or
 * fields are APPENDED to a struct; nothing is ever removed, reordered or retyped within a major.
 * Each field below names the minor that introduced it ("since 1.0"). The agreed minor is
 * min(host minor, plugin minor): a minor is a ceiling, and neither side calls a slot or reads a field
 * introduced after the agreed minor.
 *
 * Structs. Every struct that crosses the boundary starts with `uint32_t struct_size`, then, where it
 * can grow, `uint32_t abi_minor` (the minor its writer filled it for). Two directions:
 *  - structs one side HANDS the other by pointer (dmm_plugin_host, dmm_plugin_info, the ops tables,
 *    dmm_plugin_create_args): the reader copies min(struct_size, sizeof local) bytes into a zeroed
 *    local, so fields the writer does not know read as 0 / NULL (absent), and fields the reader does
 *    not know are never seen. A struct_size below the minimum of the agreed minor
 *    (DMM_PLUGIN_*_SIZE_1_0) is refused with DMM_ERR_SHORT_STRUCT.
 *  - structs the host LENDS the plugin to fill (dmm_plugin_status, dmm_plugin_allocation,
 *    dmm_plugin_release_outcome, dmm_stats): the host sets struct_size to its sizeof and pre-fills
 *    values that read as failure (status code DMM_PLUGIN_STATUS_UNSET, outcome state
 *    DMM_PLUGIN_STATE_UNSET, every other byte 0); the plugin writes no byte at or beyond struct_size
 *    and leaves struct_size alone. A call that forgets to fill its status is a failure, never a
 *    silent success; an outcome left unfilled reads as QUARANTINED.
 *
 * Slots. A NULL optional slot or capability table means ABSENT: the host reports
 * DMM_ERR_UNSUPPORTED when it is asked for, never "no-op success". A NULL required slot is refused
 * when the table is read (DMM_ERR_INVALID_ARGUMENT, naming the slot).
 *
 * Status. Every plugin call (the exports and every slot) takes a dmm_plugin_status *: it sets `code`
 * (DMM_OK or a dmm_status value) and, on failure, one sentence in `message`. The host turns a failure
 * into the thread's last error, prefixed with the plugin's name, file and the operation; a code that
 * is not a dmm_status becomes DMM_ERR_DRIVER.
 *
 * Threads. The host calls a mechanism's slots concurrently from several threads (the contract of
 * dmm/mechanism.h): a plugin's mechanisms must be thread-safe. The exports are called under the
 * host's process-wide plugin lock, one at a time: an export must not call dmm_plugin_* itself.
 *
 * Unload. dmm_plugin_unload() is refused (DMM_ERR_BUSY, nothing changed) while a mechanism made from
 * the plugin is alive, or, when this is the library's last load, while its dmm_plugin_can_unload()
 * says it still owns anything; only then is the library closed.
 */
#ifndef DMM_PLUGIN_H
#define DMM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/stats.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DMM_PLUGIN_ABI_MAJOR 1
/* 1.0: the first layout. 1.1: the optional virtual-backing slots alias, is_quarantined, drain_cache
 * and reservation, appended to dmm_plugin_virtual_backing_ops. */
#define DMM_PLUGIN_ABI_MINOR 1

/* What a plugin puts before its exports (default visibility, C linkage). */
#if defined(_WIN32)
#define DMM_PLUGIN_EXPORT __declspec(dllexport)
#else
#define DMM_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status: what every plugin call fills (lent by the host) ---------------------------------- */

#define DMM_PLUGIN_MESSAGE_BYTES 256
/* The code the host pre-fills: a plugin that leaves it has failed (DMM_ERR_DRIVER). */
#define DMM_PLUGIN_STATUS_UNSET (-1)

typedef struct dmm_plugin_status {
    uint32_t struct_size;                   /* set by the host (since 1.0) */
    int32_t code;                           /* DMM_OK or a dmm_status; the host pre-fills UNSET */
    char message[DMM_PLUGIN_MESSAGE_BYTES]; /* one sentence on failure, NUL-terminated */
} dmm_plugin_status;

/* ---- negotiation ------------------------------------------------------------------------------ */

/* The host's description, handed to dmm_plugin_negotiate. The first three fields are the same in
 * every major (so that a plugin of any major can read which major the host speaks). */
typedef struct dmm_plugin_host {
    uint32_t struct_size;           /* sizeof(dmm_plugin_host) of the host (since 1.0) */
    uint32_t abi_minor;             /* the highest minor the host speaks (since 1.0) */
    uint32_t abi_major;             /* DMM_PLUGIN_ABI_MAJOR of the host (since 1.0) */
    uint32_t dmm_version;           /* dmm_version(): MAJOR*10000 + MINOR*100 + PATCH (since 1.0) */
    const char *dmm_version_string; /* dmm_version_string() (since 1.0) */
} dmm_plugin_host;

/* The plugin's answer: a struct the plugin owns (static storage is fine) and keeps valid, with
 * every string and array it points to, until its library is closed. The first three fields are the
 * same in every major. */
typedef struct dmm_plugin_info {
    uint32_t struct_size;     /* sizeof(dmm_plugin_info) of the plugin (since 1.0) */
    uint32_t abi_minor;       /* the highest minor the plugin implements (since 1.0) */
    uint32_t abi_major;       /* must equal the host's DMM_PLUGIN_ABI_MAJOR (since 1.0) */
    uint32_t capabilities;    /* dmm_capability bits its mechanisms may offer (since 1.0) */
    const char *name;         /* required: short, e.g. "acme-pool" (since 1.0) */
    const char *version;      /* required: the plugin's own version, e.g. "2.3.1" (since 1.0) */
    const char *const *kinds; /* required: NULL-terminated list of the mechanism kinds that
                                 dmm_plugin_create makes (since 1.0) */
} dmm_plugin_info;

/* Minimum struct_size of an info of minor 1.0 (everything through `kinds`). */
#define DMM_PLUGIN_INFO_SIZE_1_0 (offsetof(dmm_plugin_info, kinds) + sizeof(const char *const *))
/* The negotiation header every major shares: struct_size, abi_minor, abi_major. */
#define DMM_PLUGIN_HEADER_SIZE (3 * sizeof(uint32_t))

/* ---- what crosses the boundary in a mechanism call (plain data) -------------------------------- */

/* An allocation as the plugin sees it; the host keeps the dmm_allocation value around it (mechanism
 * and device). `id` is the plugin's generation (never 0, never reused: docs/guide.md); the plugin
 * checks ptr, bytes, align and id against its live record on every call that names it. The host
 * keeps its own record of what it handed out and calls the plugin only with allocations it issued
 * (unchanged); an allocation the plugin hands back must have a non-zero ptr and id, `bytes` as
 * requested, and a power-of-two `align` (0 = the one requested) of at least the one requested that
 * ptr keeps, else the host refuses it and gives it back through `release`. */
typedef struct dmm_plugin_allocation {
    uint32_t struct_size; /* sizeof(dmm_plugin_allocation) of the host (since 1.0) */
    uint32_t reserved;    /* 0 */
    uint64_t ptr;         /* the address (since 1.0) */
    uint64_t bytes;       /* as requested (since 1.0) */
    uint64_t align;       /* as handed out (since 1.0) */
    uint64_t id;          /* the plugin's generation, never 0 (since 1.0) */
} dmm_plugin_allocation;

/* The state the host pre-fills in an outcome: unknown, so it reads as QUARANTINED. */
#define DMM_PLUGIN_STATE_UNSET UINT32_MAX

/* A release outcome (docs/guide.md) as plain data; same meaning as dmm_release_outcome. It must agree
 * with the call (allocation_bytes = the allocation's or the range's bytes; a decommit unmaps and keeps
 * at most the range's bytes) and with its state (FAILED: nothing unmapped or kept; COMPLETE: nothing
 * kept, failure DMM_OK); the host reads one that does not as QUARANTINED. */
typedef struct dmm_plugin_release_outcome {
    uint32_t struct_size;          /* sizeof(dmm_plugin_release_outcome) of the host (since 1.0) */
    uint32_t state;                /* a dmm_release_state; others read as QUARANTINED (since 1.0) */
    uint64_t allocation_bytes;     /* (since 1.0) */
    uint64_t unmapped_bytes;       /* (since 1.0) */
    uint64_t residual_owned_bytes; /* (since 1.0) */
    int32_t failure;               /* DMM_OK for COMPLETE, else a dmm_status (since 1.0) */
    uint32_t reserved;             /* 0 */
} dmm_plugin_release_outcome;

/* ---- the mechanism a plugin makes --------------------------------------------------------------- */

/* Virtual backing (docs/guide.md), optional. When the table is present, the slots of 1.0 are required
 * and the slots of 1.1 are optional (NULL = absent: the host's dmm_mechanism_alias & co. answer
 * DMM_ERR_UNSUPPORTED and a pool on top works without them). Ranges are relative to the
 * allocation's start and inside it (the host checked); `ranges` is n pairs (offset, bytes). A table
 * shorter than the 1.1 slots (struct_size of 1.0) simply lacks them; a host of 1.0, or an agreed
 * minor of 0, never reads them. */
typedef struct dmm_plugin_virtual_backing_ops {
    uint32_t struct_size; /* sizeof(dmm_plugin_virtual_backing_ops) of the plugin (since 1.0) */
    uint32_t abi_minor;   /* (since 1.0) */
    void (*allocate_committed)(void *impl, uint64_t bytes, uint64_t align, const uint64_t *ranges, uint64_t n,
                               dmm_plugin_allocation *out, dmm_plugin_status *status);
    void (*commit)(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                   uint64_t *newly_mapped, dmm_plugin_status *status);
    void (*decommit)(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                     dmm_plugin_release_outcome *out, dmm_plugin_status *status);
    void (*committed_bytes)(void *impl, const dmm_plugin_allocation *a, uint64_t *bytes, dmm_plugin_status *status);
    void (*mapped_bytes_for_ranges)(void *impl, const dmm_plugin_allocation *a, const uint64_t *ranges, uint64_t n,
                                    uint64_t *bytes, dmm_plugin_status *status);
    /* Optional (since 1.1). Maps the physical memory behind [src_offset, +bytes) a second time at
     * [dst_offset, +bytes) of the same allocation, READ_WRITE, so both places show the same bytes
     * (the contract of dmm_arena_alias, dmm/arena.h). The host checked: bytes > 0, both ranges inside
     * the allocation, no overlap. The plugin refuses (nothing changed) a range off its granules, a
     * source not wholly committed, a destination not wholly uncommitted; transactional like commit.
     * Each place then lives on its own: decommitting one unmaps that place only, and the memory is
     * freed when its last mapping goes. */
    void (*alias)(void *impl, const dmm_plugin_allocation *a, uint64_t dst_offset, uint64_t src_offset,
                  uint64_t bytes, dmm_plugin_status *status);
    /* Optional (since 1.1). *quarantined = 1 when [ptr, ptr+bytes) overlaps memory the mechanism keeps
     * out of use for good (quarantined VA, poisoned backing), else 0. The host pre-fills
     * DMM_PLUGIN_ANSWER_UNSET: a success that leaves it (or writes another value) is a failure. */
    void (*is_quarantined)(void *impl, uint64_t ptr, uint64_t bytes, uint32_t *quarantined,
                           dmm_plugin_status *status);
    /* Optional (since 1.1). Gives back every physical handle the mechanism caches for reuse. */
    void (*drain_cache)(void *impl, dmm_plugin_status *status);
    /* Optional (since 1.1). The mechanism's VA reservation (a size hint for a pool's own VA): *va and
     * *bytes (both pointers valid; 0 bytes = none). */
    void (*reservation)(void *impl, uint64_t *va, uint64_t *bytes, dmm_plugin_status *status);
} dmm_plugin_virtual_backing_ops;

#define DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0                                                          \
    (offsetof(dmm_plugin_virtual_backing_ops, mapped_bytes_for_ranges) + sizeof(void (*)(void)))
/* Everything through the optional slots of 1.1 (a 1.1 table may still stop at SIZE_1_0). */
#define DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_1                                                          \
    (offsetof(dmm_plugin_virtual_backing_ops, reservation) + sizeof(void (*)(void)))

/* What the host pre-fills in an answer a slot must write (is_quarantined): unset reads as failure. */
#define DMM_PLUGIN_ANSWER_UNSET UINT32_MAX

/* A mechanism's table; owned by the plugin, valid until the mechanism's destroy succeeded. A later
 * minor may append slots (shared mapping, deferred release, …) after `virtual_backing` (1.1 appends
 * none here: its slots are in dmm_plugin_virtual_backing_ops). */
typedef struct dmm_plugin_mechanism_ops {
    uint32_t struct_size; /* sizeof(dmm_plugin_mechanism_ops) of the plugin (since 1.0) */
    uint32_t abi_minor;   /* (since 1.0) */
    const char *name;     /* required: the mechanism's name, e.g. "acme-eager" (since 1.0) */
    /* Required (since 1.0). allocate: align 0 = the plugin's default; fills out on success. */
    void (*allocate)(void *impl, uint64_t bytes, uint64_t align, dmm_plugin_allocation *out,
                     dmm_plugin_status *status);
    /* Required (since 1.0). Releases a whole allocation (also one made through virtual backing). The
     * status says whether the call itself worked; the outcome says what happened to the memory. */
    void (*release)(void *impl, const dmm_plugin_allocation *a, dmm_plugin_release_outcome *out,
                    dmm_plugin_status *status);
    /* Required (since 1.0). The mechanism's device; asked once, at creation. */
    void (*device)(void *impl, int32_t *tier, int32_t *index, dmm_plugin_status *status);
    /* Required (since 1.0). Destroys impl; may refuse (DMM_ERR_BUSY) while it owns memory. */
    void (*destroy)(void *impl, dmm_plugin_status *status);
    /* Optional (since 1.0): fills the host's dmm_stats (out->size set; write within it). */
    void (*stats)(void *impl, dmm_stats *out, dmm_plugin_status *status);
    /* Optional capability (since 1.0): NULL = absent. */
    const dmm_plugin_virtual_backing_ops *virtual_backing;
} dmm_plugin_mechanism_ops;

#define DMM_PLUGIN_MECHANISM_OPS_SIZE_1_0                                                            \
    (offsetof(dmm_plugin_mechanism_ops, virtual_backing) + sizeof(const void *))

/* What dmm_plugin_create receives (lent by the host; read it by the copy rule). */
typedef struct dmm_plugin_create_args {
    uint32_t struct_size; /* sizeof(dmm_plugin_create_args) of the host (since 1.0) */
    uint32_t abi_minor;   /* the AGREED minor: build nothing above it (since 1.0) */
    const char *kind;     /* one of info->kinds (since 1.0) */
    dmm_driver *driver;   /* the driver of the device (not owned; outlives the mechanism) (since 1.0) */
    const void *config;   /* the kind's own config, opaque to dmm; may be NULL (since 1.0) */
} dmm_plugin_create_args;

#define DMM_PLUGIN_CREATE_ARGS_SIZE_1_0 (offsetof(dmm_plugin_create_args, config) + sizeof(const void *))

/* ---- the required exports (names fixed) -------------------------------------------------------- */

#define DMM_PLUGIN_NEGOTIATE_SYMBOL "dmm_plugin_negotiate"
#define DMM_PLUGIN_CREATE_SYMBOL "dmm_plugin_create"
#define DMM_PLUGIN_CAN_UNLOAD_SYMBOL "dmm_plugin_can_unload"

/* Negotiation, once per dmm_plugin_load: read the host's description, point *info at the plugin's
 * answer, set status (a plugin may refuse a host, e.g. DMM_ERR_VERSION_MISMATCH with a sentence). */
typedef void dmm_plugin_negotiate_fn(const dmm_plugin_host *host, const dmm_plugin_info **info,
                                     dmm_plugin_status *status);
/* Factory: makes one mechanism of args->kind; *impl is passed back to every slot of *ops. */
typedef void dmm_plugin_create_fn(const dmm_plugin_create_args *args, void **impl,
                                  const dmm_plugin_mechanism_ops **ops, dmm_plugin_status *status);
/* Unload readiness: DMM_OK when the plugin owns nothing any more (no mechanism, no memory, no
 * thread), DMM_ERR_BUSY with a sentence saying what it still owns. */
typedef void dmm_plugin_can_unload_fn(dmm_plugin_status *status);

DMM_PLUGIN_EXPORT dmm_plugin_negotiate_fn dmm_plugin_negotiate;
DMM_PLUGIN_EXPORT dmm_plugin_create_fn dmm_plugin_create;
DMM_PLUGIN_EXPORT dmm_plugin_can_unload_fn dmm_plugin_can_unload;

/* ---- the host side (libdmm) --------------------------------------------------------------------- */

typedef struct dmm_plugin dmm_plugin;

/* Opens `path` (dlopen RTLD_NOW | RTLD_LOCAL), finds the three exports, negotiates. Refused with a
 * sentence naming the file and the problem, the library closed again and nothing kept: a file that
 * cannot be opened (the loader's own text) or lacks an export (INVALID_ARGUMENT), a plugin that
 * refuses or fails negotiation (its code and message), another major (VERSION_MISMATCH), an info
 * shorter than its minor's minimum (SHORT_STRUCT), a NULL name, version or kinds, no kind or more
 * than 32, or a kind longer than 63 characters (INVALID_ARGUMENT; kinds are copied, bounded).
 * Loading one file twice gives two independent handles over one library. */
DMM_API dmm_status dmm_plugin_load(const char *path, dmm_plugin **out);

/* Makes a mechanism of `kind` on `driver` (not owned; must outlive the mechanism) through the
 * plugin's factory, wrapped as a normal dmm_mechanism (dmm_mechanism_destroy ends it). Capabilities
 * are the tables present. Refused, changing nothing: an unknown kind (INVALID_ARGUMENT), the
 * factory's failure (its code and message), a short table (SHORT_STRUCT), a NULL required slot
 * (INVALID_ARGUMENT), a capability table the plugin did not declare in info->capabilities, a device
 * other than the driver's (WRONG_DEVICE). */
DMM_API dmm_status dmm_plugin_mechanism_create(dmm_plugin *p, const char *kind, dmm_driver *driver,
                                               const void *config, dmm_mechanism **out);

/* DMM_ERR_BUSY (nothing changed) while a mechanism made from `p` is alive, or, on the library's
 * last load, while the plugin's dmm_plugin_can_unload says it still owns something. Otherwise
 * closes the library and frees `p`. NULL is ignored. */
DMM_API dmm_status dmm_plugin_unload(dmm_plugin *p);

/* What negotiation found; strings are valid until the unload. */
DMM_API const char *dmm_plugin_name(const dmm_plugin *p);
DMM_API const char *dmm_plugin_version(const dmm_plugin *p);
DMM_API const char *dmm_plugin_path(const dmm_plugin *p);
/* The agreed minor: min(DMM_PLUGIN_ABI_MINOR, the plugin's). */
DMM_API uint32_t dmm_plugin_abi_minor(const dmm_plugin *p);
/* info->capabilities. */
DMM_API uint32_t dmm_plugin_capabilities(const dmm_plugin *p);
/* The kinds (NULL past the end). */
DMM_API size_t dmm_plugin_kind_count(const dmm_plugin *p);
DMM_API const char *dmm_plugin_kind(const dmm_plugin *p, size_t i);
/* Mechanisms made from `p` and not yet destroyed. */
DMM_API size_t dmm_plugin_live_mechanisms(const dmm_plugin *p);

#ifdef __cplusplus
}
#endif
#endif /* DMM_PLUGIN_H */
