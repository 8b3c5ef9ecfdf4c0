/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/driver.h — the physical primitives every mechanism is built from.
 *
 * A driver is a function table plus the object it acts on. dmm ships three: `host` (mmap + memfd,
 * real memory on any Linux machine), `cuda` (libcuda.so.1 opened at run time) and `fault` (wraps
 * another driver and fails chosen calls on purpose). Third parties and tests may supply their own:
 * fill a dmm_driver_ops, embed a dmm_driver at the start of the object, and hand it to a mechanism.
 *
 * Conventions every implementation keeps:
 *  - every op returns a dmm_status and on failure sets the thread's last error with
 *    dmm_error_set(), naming the op, the values and the driver's own error code and name;
 *  - a failed op changed nothing (the driver reports what it really did, never more or less);
 *  - a sticky context error (the device can no longer be used) is reported as
 *    DMM_ERR_DEVICE_LOST; the library latches it on the driver object and makes no further calls on
 *    that driver (dmm_driver_lost());
 *  - `event_query` returns DMM_OK when the event has completed and DMM_ERR_BUSY while the work
 *    before it is still queued;
 *  - a NULL slot means "absent" (the caller reports DMM_ERR_UNSUPPORTED), never "no-op success".
 *
 * Thread contract: a driver is thread-safe; ops may be called concurrently from several threads.
 */
#ifndef DMM_DRIVER_H
#define DMM_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dmm_tier {
    DMM_TIER_DEVICE = 0, /* GPU memory: fastest */
    DMM_TIER_HOST = 1,   /* RAM */
    DMM_TIER_DISK = 2,   /* slowest; the last step of demotion */
} dmm_tier;

typedef struct dmm_device_id {
    dmm_tier tier;
    int32_t index; /* e.g. the CUDA ordinal; 0 for the host */
} dmm_device_id;

/* A physical memory handle (CUmemGenericAllocationHandle, or the host driver's memfd record). */
typedef uint64_t dmm_phys;

/* A stream and an event: opaque to dmm (CUstream / CUevent for CUDA). NULL stream = default. */
typedef void *dmm_stream;
typedef void *dmm_event;

typedef enum dmm_access {
    DMM_ACCESS_NONE = 0,
    DMM_ACCESS_READ = 1,
    DMM_ACCESS_READ_WRITE = 3,
} dmm_access;

/* The driver's own tally of what it really holds, for tests and reconciliation. */
typedef struct dmm_driver_census {
    uint32_t size;           /* sizeof(dmm_driver_census), set by the caller */
    uint64_t reserved_bytes; /* VA reserved and not yet given back */
    uint64_t handles;        /* physical handles alive */
    uint64_t handle_bytes;   /* their bytes */
    uint64_t mapped_bytes;   /* bytes mapped into VA */
    uint64_t eager_bytes;    /* bytes of eager (alloc/free) allocations alive */
    uint64_t imported_handles; /* of `handles`: those made by import_handle (another process's memory) */
    uint64_t imported_bytes;   /* their bytes (counted in handle_bytes too) */
} dmm_driver_census;

typedef struct dmm_driver dmm_driver;

/* The operations; `d` is the dmm_driver embedded in the implementation object. */
typedef struct dmm_driver_ops {
    uint32_t size;    /* sizeof(dmm_driver_ops) */
    const char *name; /* "host", "cuda", "fault", … */

    /* --- virtual memory management (NULL together when the device has no VMM) --- */
    /* Allocation granularity in bytes; every size and offset below is a multiple of it. */
    dmm_status (*granularity)(dmm_driver *d, size_t *bytes);
    /* Reserves `bytes` of VA aligned to `align` (0 = granularity) without backing. */
    dmm_status (*reserve)(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va);
    /* Gives back a reservation; everything in it must be unmapped. */
    dmm_status (*unreserve)(dmm_driver *d, uintptr_t va, size_t bytes);
    /* Creates one physical handle of `bytes`. */
    dmm_status (*create)(dmm_driver *d, size_t bytes, dmm_phys *handle);
    /* Releases a handle; it must not be mapped anywhere. */
    dmm_status (*release)(dmm_driver *d, dmm_phys handle);
    /* Maps the whole of `handle` (`bytes` = its size) at `va`, inside a reservation. */
    dmm_status (*map)(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle);
    /* Unmaps exactly one earlier map (same va and bytes); the VA stays reserved. */
    dmm_status (*unmap)(dmm_driver *d, uintptr_t va, size_t bytes);
    /* Sets the access of a mapped range for this driver's device. */
    dmm_status (*set_access)(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access);

    /* --- eager memory (cuMemAlloc / malloc) --- */
    dmm_status (*alloc)(dmm_driver *d, size_t bytes, uintptr_t *ptr);
    dmm_status (*free)(dmm_driver *d, uintptr_t ptr, size_t bytes);

    /* --- streams, events, copies --- */
    dmm_status (*stream_create)(dmm_driver *d, dmm_stream *stream);
    dmm_status (*stream_destroy)(dmm_driver *d, dmm_stream stream);
    dmm_status (*event_create)(dmm_driver *d, dmm_event *event);
    dmm_status (*event_destroy)(dmm_driver *d, dmm_event event);
    /* Records `event` after the work queued so far on `stream`. */
    dmm_status (*event_record)(dmm_driver *d, dmm_event event, dmm_stream stream);
    /* DMM_OK when complete, DMM_ERR_BUSY while pending. */
    dmm_status (*event_query)(dmm_driver *d, dmm_event event);
    /* Blocks until the event completed (never called by the library's own release paths). */
    dmm_status (*event_synchronize)(dmm_driver *d, dmm_event event);
    /* Copies `bytes` from src to dst (either may be device or host memory), ordered on `stream`. */
    dmm_status (*copy)(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream);
    dmm_status (*stream_synchronize)(dmm_driver *d, dmm_stream stream);

    /* --- information --- */
    dmm_status (*mem_info)(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes);
    dmm_status (*census)(dmm_driver *d, dmm_driver_census *out);

    /* Destroys the driver object (after every user of it is gone). */
    void (*destroy)(dmm_driver *d);

    /* --- sharing between processes (optional: NULL, or beyond `size`, = absent; the library then
     * answers DMM_ERR_UNSUPPORTED with a sentence). A handle made by create_exportable or
     * import_handle is an ordinary handle for map, unmap, set_access and release. --- */
    /* Creates one physical handle of `bytes` that export_handle can export (CUDA: requestedHandleTypes
     * = POSIX file descriptor; host: every memfd can). */
    dmm_status (*create_exportable)(dmm_driver *d, size_t bytes, dmm_phys *handle);
    /* A new file descriptor (close-on-exec, owned by the caller) for the memory of `handle`, through
     * which another process can import it. `access` is the most the importer may map it with: the host
     * driver hands out a read-only descriptor for DMM_ACCESS_READ, so that a read-write mapping is
     * refused by the kernel; CUDA's descriptor carries no access, the importer's set_access decides. */
    dmm_status (*export_handle)(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd);
    /* A handle for the memory behind `fd` (a descriptor from export_handle, maybe of another process)
     * of exactly `bytes`, to be mapped with at most `access`. The caller keeps `fd` (the driver
     * keeps its own reference); releasing the handle drops this process's reference only: the memory
     * lives while any process holds a handle or mapping of it. */
    dmm_status (*import_handle)(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle);

    /* --- beyond memory (optional, like the sharing slots: NULL, or beyond `size`, = absent), what a
     * device front needs of its driver besides memory; the library calls them through the same funnel as
     * every other op, so a device loss they report is latched too. --- */
    /* *capturing = whether `stream` is capturing a graph now (CUDA graphs: map, unmap and set-access
     * would invalidate the capture), *id = the capture's id (0 = unknown). Absent: streams never
     * capture (host: its streams are synchronous tokens). */
    dmm_status (*stream_capture_status)(dmm_driver *d, dmm_stream stream, bool *capturing, uint64_t *id);
    /* Host memory that copies to and from the device reach at full speed (CUDA: page-locked,
     * cuMemHostAlloc; host: ordinary memory), and its release. */
    dmm_status (*host_alloc)(dmm_driver *d, size_t bytes, void **out);
    dmm_status (*host_free)(dmm_driver *d, void *ptr);
    /* Work queued on `waiter` from now on waits, on the device, for `event` (cuStreamWaitEvent; host:
     * every event is complete when recorded). Absent: the caller synchronizes instead. */
    dmm_status (*stream_wait_event)(dmm_driver *d, dmm_stream waiter, dmm_event event);
    /* Returns once every piece of work queued on the device is done, on every stream, also on streams
     * destroyed since (their queued work still runs; cuCtxSynchronize; host: at once, its work is
     * synchronous). A pool calls it only in destroy, when a stream it must fence is gone. Absent: such a
     * pool stays BUSY. */
    dmm_status (*device_synchronize)(dmm_driver *d);
} dmm_driver_ops;

/* The device-loss latch of a driver object: dmm's own, at the one funnel through which the library
 * calls every driver (src/driver/call.h). An implementation leaves it zeroed and never touches it. */
typedef struct dmm_driver_latch {
    uint32_t state; /* 0 = usable; 1 = being latched; 2 = lost; 3 = lost, and its context confirmed
                       torn down (dmm_arena_confirm_context_terminated); read and written atomically */
    char why[400];  /* the first call that reported DMM_ERR_DEVICE_LOST, and its sentence; written once */
} dmm_driver_latch;

/* The head of every driver object. */
struct dmm_driver {
    const dmm_driver_ops *ops;
    dmm_device_id device;
    dmm_driver_latch latch; /* zero at creation; see dmm_driver_lost() */
};

/* Destroys any driver (NULL is ignored). */
DMM_API void dmm_driver_destroy(dmm_driver *d);

/* Device loss (docs/guide.md, "Device loss"), latched once per driver object. The first library call into `d` that
 * reports DMM_ERR_DEVICE_LOST latches the loss on `d`; from then on every call the library would make
 * into `d` is refused at once with DMM_ERR_DEVICE_LOST and that first sentence, without calling the
 * driver: the arena, the pool, the deferred queue and the device front over `d` all stop together.
 * A latch is never undone: a context that died is torn down with its driver (ownership of what the
 * arena held is discharged by dmm_arena_confirm_context_terminated). Returns whether `d` is lost;
 * *why (may be NULL) receives the first loss's sentence ("" while usable), valid as long as `d`. */
DMM_API bool dmm_driver_lost(const dmm_driver *d, const char **why);

/* ---------------------------------------------------------------------------------------------- */
/* host: real memory on Linux. VA = mmap(PROT_NONE, MAP_NORESERVE); one memfd per physical handle;
 * map = mmap(MAP_FIXED|MAP_SHARED) of the memfd; unmap = PROT_NONE anonymous mapping back over it;
 * access = mprotect. Streams are NULL-like tokens and every copy is synchronous, so events complete
 * at once. */

typedef struct dmm_host_driver_config {
    uint32_t size;          /* sizeof(dmm_host_driver_config) */
    size_t granularity;     /* power of two, ≥ the page size; 0 = 2 MiB (mirrors CUDA) */
} dmm_host_driver_config;

/* cfg may be NULL for the defaults. */
DMM_API dmm_status dmm_host_driver_create(const dmm_host_driver_config *cfg, dmm_driver **out);

/* ---------------------------------------------------------------------------------------------- */
/* fault: wraps `inner` (not owned) and fails chosen calls on purpose. Each instance has its own
 * plan and counters; nothing is process-global. A failed call is not forwarded: the inner driver
 * really did nothing. `census` reports the inner driver's census (what is really held). */

typedef enum dmm_driver_op {
    DMM_OP_ANY = 0, /* matches every op below */
    DMM_OP_GRANULARITY, DMM_OP_RESERVE, DMM_OP_UNRESERVE, DMM_OP_CREATE, DMM_OP_RELEASE,
    DMM_OP_MAP, DMM_OP_UNMAP, DMM_OP_SET_ACCESS, DMM_OP_ALLOC, DMM_OP_FREE,
    DMM_OP_STREAM_CREATE, DMM_OP_STREAM_DESTROY, DMM_OP_EVENT_CREATE, DMM_OP_EVENT_DESTROY,
    DMM_OP_EVENT_RECORD, DMM_OP_EVENT_QUERY, DMM_OP_EVENT_SYNCHRONIZE, DMM_OP_COPY,
    DMM_OP_STREAM_SYNCHRONIZE, DMM_OP_MEM_INFO, DMM_OP_EXPORT, DMM_OP_IMPORT,
    DMM_OP_CAPTURE_STATUS, DMM_OP_HOST_ALLOC, DMM_OP_HOST_FREE, DMM_OP_STREAM_WAIT_EVENT,
    DMM_OP_DEVICE_SYNCHRONIZE,
    DMM_OP_COUNT /* create_exportable counts (and fails) as DMM_OP_CREATE */
} dmm_driver_op;

/* Name of an op ("map", "unmap", …). */
DMM_API const char *dmm_driver_op_name(dmm_driver_op op);

DMM_API dmm_status dmm_fault_driver_create(dmm_driver *inner, dmm_driver **out);

/* Plans: from now on, the `nth` (1-based) call of `op` (counted from this call; DMM_OP_ANY counts
 * every op except census, granularity, stream_capture_status and host_free) fails with `code`, and so
 * do the `repeat - 1` calls of that op after it (repeat = UINT32_MAX: every call from then on: a
 * sticky failure). Replaces any plan for that op. DMM_ERR_DEVICE_LOST as `code` models a sticky context error. */
DMM_API dmm_status dmm_fault_plan(dmm_driver *fault, dmm_driver_op op, uint64_t nth, uint32_t repeat,
                                  dmm_status code);
/* Removes every plan (counters stay). */
DMM_API dmm_status dmm_fault_clear(dmm_driver *fault);
/* Calls made to `op` since creation (DMM_OP_ANY: all), failed ones included. */
DMM_API uint64_t dmm_fault_calls(dmm_driver *fault, dmm_driver_op op);
/* Calls failed on purpose so far. */
DMM_API uint64_t dmm_fault_injected(dmm_driver *fault);
/* While held, every event_query reports DMM_ERR_BUSY and event_synchronize DMM_ERR_BUSY, as if the
 * work before every event were still running: a CPU test of event gating. */
DMM_API dmm_status dmm_fault_hold_events(dmm_driver *fault, bool hold);
/* A graph capture on the fault driver, for CPU tests of capture safety: from now on the fault
 * driver's stream_capture_status reports `stream` capturing with capture id `capture_id`; (NULL, 0)
 * ends it. One capture at a time: a second is refused with DMM_ERR_BUSY until the first ended. Other streams are asked of the inner driver (absent there: not capturing).
 * Calls to stream_capture_status count as DMM_OP_CAPTURE_STATUS and can be failed by a plan. */
DMM_API dmm_status dmm_fault_capture(dmm_driver *fault, dmm_stream stream, uint64_t capture_id);

/* ---------------------------------------------------------------------------------------------- */
/* cuda: libcuda.so.1 through dlopen, the primary context of device `ordinal`. Returns
 * DMM_ERR_UNSUPPORTED with "no CUDA driver: <reason>" where there is none. */
DMM_API dmm_status dmm_cuda_driver_create(int ordinal, dmm_driver **out);
/* Number of CUDA devices (0 with DMM_OK where there is no driver or no GPU). */
DMM_API dmm_status dmm_cuda_device_count(int *count);

/* What `dmm info` shows about one CUDA device. The environment variable DMM_CUDA_LIBRARY, read once
 * per process, names another driver library than libcuda.so.1 (tests, unusual installs). */
typedef struct dmm_cuda_device_info {
    uint32_t size;          /* sizeof(dmm_cuda_device_info), set by the caller */
    int32_t ordinal;
    char name[128];         /* e.g. "NVIDIA H200" */
    int32_t driver_version; /* cuDriverGetVersion, e.g. 13000 */
    int32_t compute_major;
    int32_t compute_minor;
    bool vmm_supported;     /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    uint64_t granularity;   /* minimum VMM granularity in bytes; 0 without VMM */
    uint64_t free_bytes;    /* cuMemGetInfo in the primary context */
    uint64_t total_bytes;
    bool posix_fd_export;   /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: its memory can be
                               exported to other processes as file descriptors (dmm/share.h) */
} dmm_cuda_device_info;

/* Fills `out` for device `ordinal` (retains the primary context for the query) up to out->size (a
 * struct from before posix_fd_export is filled without it). UNSUPPORTED with "no CUDA driver: <reason>"
 * where there is none. */
DMM_API dmm_status dmm_cuda_device_query(int ordinal, dmm_cuda_device_info *out);

/* Peer access per mapping: from now on every set_access of this cuda driver also grants the same
 * access to the listed devices (n = 0: none). Each must be another device that can access this one
 * (cuDeviceCanAccessPeer), else nothing changes. INVALID_ARGUMENT for a driver that is not `cuda`. */
DMM_API dmm_status dmm_cuda_driver_set_peer_access(dmm_driver *cuda, const int *peers, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DMM_DRIVER_H */
