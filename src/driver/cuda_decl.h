/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_decl.h — dmm's own declarations of the part of the CUDA driver API it calls: the
 * types, the constants, the struct layouts and the signature of every entry point that the cuda
 * driver, the tools, the benchmarks and the GPU tests resolve with dlsym from
 * libcuda.so.1. Never installed.
 *
 * The idea: the CUDA driver API is a stable C ABI (a result is a 32-bit enum, handles are pointers,
 * device addresses and physical handles are 64-bit integers, the few structs have documented
 * layouts), so dmm declares the little it uses and needs no toolkit header to build: a machine with
 * only the NVIDIA driver builds the CUDA driver and libdmm_torch.so. The trade-off: declarations of
 * our own could drift from NVIDIA's, so cuda_decl_check.c compares them with cuda.h wherever one is
 * found at configure time (DMM_HAVE_CUDA_H): every constant, every type's size, every struct member's
 * offset, and every entry point's signature and ABI version.
 *
 * Names: CUDA's with a prefix, so that the check can include this header beside cuda.h:
 *   a constant      DMM_ + CUDA's name                   DMM_CUDA_SUCCESS, DMM_CU_MEM_ACCESS_FLAGS_PROT_READ
 *   a type          dmm_cu_ + CUDA's name in snake case  dmm_cu_result (CUresult), dmm_cu_mem_access_desc
 *   an entry point  dmm_<documented name>_fn, its function type        dmm_cuMemAlloc_fn
 * Never include cuda.h beside this header except in the check: cuda.h turns the documented names into
 * macros (cuMemAlloc → cuMemAlloc_v2), which would rename fields called after them.
 *
 * Invariants: only what dmm calls is declared; every constant comes from one of the lists below (so
 * the check compares each); an entry point's symbol is the exact name dlsym looks up, the ABI version
 * that cuda.h binds its documented name to (cuMemAlloc → cuMemAlloc_v2), and the check fails when
 * cuda.h binds it to another. 64-bit Linux only (CUdeviceptr is 64 bits wide there).
 */
#ifndef DMM_DRIVER_CUDA_DECL_H
#define DMM_DRIVER_CUDA_DECL_H

#include <stddef.h>
#include <stdint.h>

/* ---- scalars and handles ---- */
typedef int dmm_cu_device;                                       /* CUdevice: a device's handle */
typedef unsigned long long dmm_cu_deviceptr;                     /* CUdeviceptr: a device address */
typedef unsigned long long dmm_cu_mem_handle;                    /* CUmemGenericAllocationHandle */
typedef struct dmm_cu_context_st *dmm_cu_context;                /* CUcontext */
typedef struct dmm_cu_stream_st *dmm_cu_stream;                  /* CUstream (NULL: the legacy stream) */
typedef struct dmm_cu_event_st *dmm_cu_event;                    /* CUevent */
typedef struct dmm_cu_graph_st *dmm_cu_graph;                    /* CUgraph */
typedef struct dmm_cu_graph_node_st *dmm_cu_graph_node;          /* CUgraphNode */
typedef struct dmm_cu_graph_edge_data_st dmm_cu_graph_edge_data; /* CUgraphEdgeData: only pointed to */
typedef struct dmm_cu_module_st *dmm_cu_module;                  /* CUmodule */
typedef struct dmm_cu_function_st *dmm_cu_function;              /* CUfunction */
typedef void (*dmm_cu_host_fn)(void *user);                      /* CUhostFn */
typedef struct dmm_cu_mem_pool_st *dmm_cu_mem_pool;              /* CUmemoryPool: a stream-ordered pool */

/* ---- constants: X(CUDA's name, value), one list per CUDA type ---- */
#define DMM_CU_ENUMERATOR(name, value) DMM_##name = value,

/* CUresult: the results dmm tells apart; libcuda may return any other value too. */
#define DMM_CU_RESULTS(X)                                                                                  \
    X(CUDA_SUCCESS, 0)                                                                                     \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                                                                         \
    X(CUDA_ERROR_DEINITIALIZED, 4)                                                                         \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, 214)                                                                   \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, 220)                                                                \
    X(CUDA_ERROR_NOT_READY, 600)                                                                           \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)                                                                     \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, 702)                                                                      \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709)                                                                \
    X(CUDA_ERROR_ASSERT, 710)                                                                              \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714)                                                                \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715)                                                                 \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, 716)                                                                  \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717)                                                               \
    X(CUDA_ERROR_INVALID_PC, 718)                                                                          \
    X(CUDA_ERROR_LAUNCH_FAILED, 719)                                                                       \
    X(CUDA_ERROR_NOT_SUPPORTED, 801)                                                                       \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, 906)
/* Results that older cuda.h do not name (the check compares them with cuda.h 13.0 or later). */
#define DMM_CU_RESULTS_RECENT(X)                                                                           \
    X(CUDA_ERROR_CONTAINED, 226)                                                                           \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, 721)                                                                  \
    X(CUDA_ERROR_EXTERNAL_DEVICE, 911)
typedef enum dmm_cu_result {
    DMM_CU_RESULTS(DMM_CU_ENUMERATOR) DMM_CU_RESULTS_RECENT(DMM_CU_ENUMERATOR)
} dmm_cu_result; /* CUresult */

#define DMM_CU_DEVICE_ATTRIBUTES(X)                                                                        \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                                                    \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                                                    \
    X(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 102)                                       \
    X(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 103)
typedef enum dmm_cu_device_attribute {
    DMM_CU_DEVICE_ATTRIBUTES(DMM_CU_ENUMERATOR)
} dmm_cu_device_attribute; /* CUdevice_attribute */

#define DMM_CU_MEM_ALLOCATION_TYPES(X) X(CU_MEM_ALLOCATION_TYPE_PINNED, 0x1)
typedef enum dmm_cu_mem_allocation_type {
    DMM_CU_MEM_ALLOCATION_TYPES(DMM_CU_ENUMERATOR)
} dmm_cu_mem_allocation_type; /* CUmemAllocationType */

#define DMM_CU_MEM_HANDLE_TYPES(X)                                                                         \
    X(CU_MEM_HANDLE_TYPE_NONE, 0x0)                                                                        \
    X(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0x1)
typedef enum dmm_cu_mem_handle_type {
    DMM_CU_MEM_HANDLE_TYPES(DMM_CU_ENUMERATOR)
} dmm_cu_mem_handle_type; /* CUmemAllocationHandleType */

#define DMM_CU_MEM_LOCATION_TYPES(X) X(CU_MEM_LOCATION_TYPE_DEVICE, 0x1)
typedef enum dmm_cu_mem_location_type {
    DMM_CU_MEM_LOCATION_TYPES(DMM_CU_ENUMERATOR)
} dmm_cu_mem_location_type; /* CUmemLocationType */

#define DMM_CU_MEM_ACCESS_FLAGS(X)                                                                         \
    X(CU_MEM_ACCESS_FLAGS_PROT_NONE, 0x0)                                                                  \
    X(CU_MEM_ACCESS_FLAGS_PROT_READ, 0x1)                                                                  \
    X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0x3)
typedef enum dmm_cu_mem_access_flags {
    DMM_CU_MEM_ACCESS_FLAGS(DMM_CU_ENUMERATOR)
} dmm_cu_mem_access_flags; /* CUmemAccess_flags */

#define DMM_CU_MEM_GRANULARITY_FLAGS(X) X(CU_MEM_ALLOC_GRANULARITY_MINIMUM, 0x0)
typedef enum dmm_cu_mem_granularity_flags {
    DMM_CU_MEM_GRANULARITY_FLAGS(DMM_CU_ENUMERATOR)
} dmm_cu_mem_granularity_flags; /* CUmemAllocationGranularity_flags */

#define DMM_CU_STREAM_CAPTURE_STATUSES(X) X(CU_STREAM_CAPTURE_STATUS_NONE, 0)
typedef enum dmm_cu_stream_capture_status {
    DMM_CU_STREAM_CAPTURE_STATUSES(DMM_CU_ENUMERATOR)
} dmm_cu_stream_capture_status; /* CUstreamCaptureStatus */

/* CUmemPool_attribute: what the tools read of the driver's own pool (its reserved peak, reset by writing 0). */
#define DMM_CU_MEM_POOL_ATTRIBUTES(X) X(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 6)
typedef enum dmm_cu_mem_pool_attribute {
    DMM_CU_MEM_POOL_ATTRIBUTES(DMM_CU_ENUMERATOR)
} dmm_cu_mem_pool_attribute; /* CUmemPool_attribute */

/* Flags passed as unsigned int (CUstream_flags, CUevent_flags, cuMemHostAlloc's flags). */
#define DMM_CU_FLAGS(X)                                                                                    \
    X(CU_STREAM_NON_BLOCKING, 0x1)                                                                         \
    X(CU_EVENT_DISABLE_TIMING, 0x2)                                                                        \
    X(CU_MEMHOSTALLOC_PORTABLE, 0x1)
enum { DMM_CU_FLAGS(DMM_CU_ENUMERATOR) };

/* ---- structs: CUDA's layouts, member by member ---- */
typedef struct dmm_cu_mem_location { /* CUmemLocation */
    dmm_cu_mem_location_type type;
    int id; /* the device ordinal, for a device location */
} dmm_cu_mem_location;

typedef struct dmm_cu_mem_allocation_prop { /* CUmemAllocationProp */
    dmm_cu_mem_allocation_type type;
    dmm_cu_mem_handle_type requested_handle_types; /* requestedHandleTypes */
    dmm_cu_mem_location location;
    void *win32_handle_meta_data; /* win32HandleMetaData: Windows only, NULL here */
    struct {
        unsigned char compression_type;        /* compressionType */
        unsigned char gpu_direct_rdma_capable; /* gpuDirectRDMACapable */
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags; /* allocFlags: all 0 for plain device memory */
} dmm_cu_mem_allocation_prop;

typedef struct dmm_cu_mem_access_desc { /* CUmemAccessDesc */
    dmm_cu_mem_location location;
    dmm_cu_mem_access_flags flags;
} dmm_cu_mem_access_desc;

/* ---- entry points: X(documented name, symbol dlsym looks up, parameters) ---- */

/* The cuda driver's (cuda_api.c): all required, resolved once per process. */
#define DMM_CU_DRIVER_ENTRY_POINTS(X)                                                                      \
    X(cuInit, cuInit, (unsigned int flags))                                                                \
    X(cuDriverGetVersion, cuDriverGetVersion, (int *version))                                              \
    X(cuGetErrorName, cuGetErrorName, (dmm_cu_result result, const char **name))                           \
    X(cuGetErrorString, cuGetErrorString, (dmm_cu_result result, const char **text))                       \
    X(cuDeviceGetCount, cuDeviceGetCount, (int *count))                                                    \
    X(cuDeviceGet, cuDeviceGet, (dmm_cu_device *device, int ordinal))                                      \
    X(cuDeviceGetName, cuDeviceGetName, (char *name, int len, dmm_cu_device device))                       \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute,                                                          \
      (int *value, dmm_cu_device_attribute attribute, dmm_cu_device device))                               \
    X(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer,                                                        \
      (int *can_access, dmm_cu_device device, dmm_cu_device peer))                                         \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain,                                                  \
      (dmm_cu_context *context, dmm_cu_device device))                                                     \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (dmm_cu_device device))                     \
    X(cuCtxSetCurrent, cuCtxSetCurrent, (dmm_cu_context context))                                          \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity,                                        \
      (size_t *granularity, const dmm_cu_mem_allocation_prop *prop, dmm_cu_mem_granularity_flags option))  \
    X(cuMemAddressReserve, cuMemAddressReserve,                                                            \
      (dmm_cu_deviceptr *ptr, size_t size, size_t alignment, dmm_cu_deviceptr addr,                        \
       unsigned long long flags))                                                                          \
    X(cuMemAddressFree, cuMemAddressFree, (dmm_cu_deviceptr ptr, size_t size))                             \
    X(cuMemCreate, cuMemCreate,                                                                            \
      (dmm_cu_mem_handle *handle, size_t size, const dmm_cu_mem_allocation_prop *prop,                     \
       unsigned long long flags))                                                                          \
    X(cuMemRelease, cuMemRelease, (dmm_cu_mem_handle handle))                                              \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle,                                          \
      (void *shareable_handle, dmm_cu_mem_handle handle, dmm_cu_mem_handle_type handle_type,               \
       unsigned long long flags))                                                                          \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle,                                      \
      (dmm_cu_mem_handle *handle, void *os_handle, dmm_cu_mem_handle_type handle_type))                    \
    X(cuMemMap, cuMemMap,                                                                                  \
      (dmm_cu_deviceptr ptr, size_t size, size_t offset, dmm_cu_mem_handle handle,                         \
       unsigned long long flags))                                                                          \
    X(cuMemUnmap, cuMemUnmap, (dmm_cu_deviceptr ptr, size_t size))                                         \
    X(cuMemSetAccess, cuMemSetAccess,                                                                      \
      (dmm_cu_deviceptr ptr, size_t size, const dmm_cu_mem_access_desc *desc, size_t count))               \
    X(cuMemAlloc, cuMemAlloc_v2, (dmm_cu_deviceptr *ptr, size_t bytes))                                    \
    X(cuMemFree, cuMemFree_v2, (dmm_cu_deviceptr ptr))                                                     \
    X(cuMemGetInfo, cuMemGetInfo_v2, (size_t *free_bytes, size_t *total_bytes))                            \
    X(cuStreamCreate, cuStreamCreate, (dmm_cu_stream *stream, unsigned int flags))                         \
    X(cuStreamDestroy, cuStreamDestroy_v2, (dmm_cu_stream stream))                                         \
    X(cuStreamSynchronize, cuStreamSynchronize, (dmm_cu_stream stream))                                    \
    X(cuEventCreate, cuEventCreate, (dmm_cu_event *event, unsigned int flags))                             \
    X(cuEventDestroy, cuEventDestroy_v2, (dmm_cu_event event))                                             \
    X(cuEventRecord, cuEventRecord, (dmm_cu_event event, dmm_cu_stream stream))                            \
    X(cuEventQuery, cuEventQuery, (dmm_cu_event event))                                                    \
    X(cuEventSynchronize, cuEventSynchronize, (dmm_cu_event event))                                        \
    X(cuMemcpyAsync, cuMemcpyAsync,                                                                        \
      (dmm_cu_deviceptr dst, dmm_cu_deviceptr src, size_t bytes, dmm_cu_stream stream))                    \
    X(cuStreamIsCapturing, cuStreamIsCapturing,                                                            \
      (dmm_cu_stream stream, dmm_cu_stream_capture_status *status))                                        \
    X(cuMemHostAlloc, cuMemHostAlloc, (void **ptr, size_t bytes, unsigned int flags))                      \
    X(cuMemFreeHost, cuMemFreeHost, (void *ptr))                                                           \
    X(cuStreamWaitEvent, cuStreamWaitEvent, (dmm_cu_stream stream, dmm_cu_event event, unsigned int flags))   \
    X(cuCtxSynchronize, cuCtxSynchronize, (void))

/* The others': the CUDA reference of the tools, the benchmarks and the GPU tests (a kernel that faults, a host function that holds a
 * stream). Each user resolves the ones it needs. */
#define DMM_CU_OTHER_ENTRY_POINTS(X)                                                                       \
    X(cuCtxGetCurrent, cuCtxGetCurrent, (dmm_cu_context *context))                                         \
    X(cuMemAllocAsync, cuMemAllocAsync, (dmm_cu_deviceptr *ptr, size_t bytes, dmm_cu_stream stream))       \
    X(cuMemFreeAsync, cuMemFreeAsync, (dmm_cu_deviceptr ptr, dmm_cu_stream stream))                        \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, (dmm_cu_mem_pool *pool, dmm_cu_device device)) \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute,                                                        \
      (dmm_cu_mem_pool pool, dmm_cu_mem_pool_attribute attribute, void *value))                            \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute,                                                        \
      (dmm_cu_mem_pool pool, dmm_cu_mem_pool_attribute attribute, void *value))                            \
    X(cuModuleLoadData, cuModuleLoadData, (dmm_cu_module *module, const void *image))                      \
    X(cuModuleGetFunction, cuModuleGetFunction,                                                            \
      (dmm_cu_function *function, dmm_cu_module module, const char *name))                                 \
    X(cuLaunchKernel, cuLaunchKernel,                                                                      \
      (dmm_cu_function function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,            \
       unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,        \
       dmm_cu_stream stream, void **params, void **extra))                                                 \
    X(cuLaunchHostFunc, cuLaunchHostFunc, (dmm_cu_stream stream, dmm_cu_host_fn fn, void *user))

/* cuStreamGetCaptureInfo's two ABIs, each named by its version because the cuda driver asks for both
 * (optional: a capture's id is 0 without either): _v3 (with edge data; cuda.h 12.3 and later declare it, 13.0 binds the documented name to it)
 * and _v2 (cuda.h 12.x declares it, 13.0 no longer does; drivers older than 12.3 have only this one). */
#define DMM_CU_CAPTURE_INFO_V3(X)                                                                          \
    X(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3,                                                \
      (dmm_cu_stream stream, dmm_cu_stream_capture_status *status, uint64_t *id, dmm_cu_graph *graph,      \
       const dmm_cu_graph_node **dependencies, const dmm_cu_graph_edge_data **edge_data, size_t *count))
#define DMM_CU_CAPTURE_INFO_V2(X)                                                                          \
    X(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2,                                                \
      (dmm_cu_stream stream, dmm_cu_stream_capture_status *status, uint64_t *id, dmm_cu_graph *graph,      \
       const dmm_cu_graph_node **dependencies, size_t *count))

/* The function type of each: dmm_cuMemAlloc_fn, … */
#define DMM_CU_FN_TYPE(name, symbol, params) typedef dmm_cu_result dmm_##name##_fn params;
DMM_CU_DRIVER_ENTRY_POINTS(DMM_CU_FN_TYPE)
DMM_CU_OTHER_ENTRY_POINTS(DMM_CU_FN_TYPE)
DMM_CU_CAPTURE_INFO_V3(DMM_CU_FN_TYPE)
DMM_CU_CAPTURE_INFO_V2(DMM_CU_FN_TYPE)

#endif /* DMM_DRIVER_CUDA_DECL_H */
