/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_decl_check.c — the compile-time comparison of dmm's own CUDA declarations
 * (cuda_decl.h) with NVIDIA's cuda.h. Compiled into libdmm's objects only where configure found a
 * cuda.h of CUDA 12.0 or later (DMM_HAVE_CUDA_H), and the only file that sees cuda.h's folder. It
 * holds no code, only _Static_asserts, so a difference stops the build with the name of what differs.
 *
 * What is compared, from the lists of cuda_decl.h, so nothing declared there escapes:
 *   values      each DMM_<name> equals cuda.h's <name> (the recent results with cuda.h 13.0 or later)
 *   types       scalars are the same C type; handles and enums have the same size; each struct has
 *               the same size and alignment, and each member the same offset and size
 *   signatures  each entry point's function type, with dmm's type names mapped to CUDA's, is
 *               compatible with cuda.h's declaration of the symbol dlsym looks up (_Generic picks by
 *               type compatibility: a parameter more or less, another width, a lost const all fail)
 *   binding     cuda.h binds each documented name to exactly that symbol (cuMemAlloc → cuMemAlloc_v2):
 *               a cuda.h that moves a name to a new ABI version fails here, before dmm calls the old one
 * The trade-off: the check sees only the cuda.h it is built against; cuStreamGetCaptureInfo's two ABIs
 * are compared where that cuda.h declares them (_v3 from 12.3, _v2 before 13.0).
 */
#include <cuda.h>
#include <stddef.h>

#include "driver/cuda_decl.h"

#define DMM_CAT(a, b) a##b
#define DMM_XCAT(a, b) DMM_CAT(a, b) /* after expanding a and b (cuda.h's renaming macros) */

#if !defined(CUDA_VERSION) || CUDA_VERSION < 12000
#error "cuda_decl_check.c compares with cuda.h of CUDA 12.0 or later (configure checks CUDA_VERSION)"
#endif

/* ---- values ---- */
#define DMM_CHECK_VALUE(name, value) /* as integers: the two enum types differ on purpose */       \
    _Static_assert((long long)DMM_##name == (long long)(name),                                     \
                   "cuda_decl.h: DMM_" #name " differs from cuda.h's " #name);
DMM_CU_RESULTS(DMM_CHECK_VALUE)
#if CUDA_VERSION >= 13000
DMM_CU_RESULTS_RECENT(DMM_CHECK_VALUE)
#endif
DMM_CU_DEVICE_ATTRIBUTES(DMM_CHECK_VALUE)
DMM_CU_MEM_ALLOCATION_TYPES(DMM_CHECK_VALUE)
DMM_CU_MEM_HANDLE_TYPES(DMM_CHECK_VALUE)
DMM_CU_MEM_LOCATION_TYPES(DMM_CHECK_VALUE)
DMM_CU_MEM_ACCESS_FLAGS(DMM_CHECK_VALUE)
DMM_CU_MEM_GRANULARITY_FLAGS(DMM_CHECK_VALUE)
DMM_CU_STREAM_CAPTURE_STATUSES(DMM_CHECK_VALUE)
DMM_CU_MEM_POOL_ATTRIBUTES(DMM_CHECK_VALUE)
DMM_CU_FLAGS(DMM_CHECK_VALUE)

/* ---- types ---- */
#define DMM_CHECK_SAME_TYPE(own, cuda)                                                             \
    _Static_assert(_Generic((own)0, cuda: 1, default: 0), "cuda_decl.h: " #own " is not cuda.h's " #cuda);
#define DMM_CHECK_SAME_SIZE(own, cuda)                                                             \
    _Static_assert(sizeof(own) == sizeof(cuda) && _Alignof(own) == _Alignof(cuda),                  \
                   "cuda_decl.h: " #own " differs in size or alignment from cuda.h's " #cuda);
#define DMM_CHECK_MEMBER(own, cuda, own_member, cuda_member)                                       \
    _Static_assert(offsetof(own, own_member) == offsetof(cuda, cuda_member) &&                     \
                       sizeof(((own *)0)->own_member) == sizeof(((cuda *)0)->cuda_member),          \
                   "cuda_decl.h: " #own "." #own_member " differs from cuda.h's " #cuda "." #cuda_member);

DMM_CHECK_SAME_TYPE(dmm_cu_device, CUdevice)
DMM_CHECK_SAME_TYPE(dmm_cu_deviceptr, CUdeviceptr)
DMM_CHECK_SAME_TYPE(dmm_cu_mem_handle, CUmemGenericAllocationHandle)
DMM_CHECK_SAME_TYPE(uint64_t, cuuint64_t)
DMM_CHECK_SAME_TYPE(dmm_cu_host_fn, CUhostFn)
DMM_CHECK_SAME_SIZE(dmm_cu_context, CUcontext)
DMM_CHECK_SAME_SIZE(dmm_cu_stream, CUstream)
DMM_CHECK_SAME_SIZE(dmm_cu_event, CUevent)
DMM_CHECK_SAME_SIZE(dmm_cu_graph, CUgraph)
DMM_CHECK_SAME_SIZE(dmm_cu_graph_node, CUgraphNode)
DMM_CHECK_SAME_SIZE(dmm_cu_module, CUmodule)
DMM_CHECK_SAME_SIZE(dmm_cu_function, CUfunction)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_pool, CUmemoryPool)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_pool_attribute, CUmemPool_attribute)
DMM_CHECK_SAME_SIZE(dmm_cu_result, CUresult)
DMM_CHECK_SAME_SIZE(dmm_cu_device_attribute, CUdevice_attribute)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_allocation_type, CUmemAllocationType)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_handle_type, CUmemAllocationHandleType)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_location_type, CUmemLocationType)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_access_flags, CUmemAccess_flags)
DMM_CHECK_SAME_SIZE(dmm_cu_mem_granularity_flags, CUmemAllocationGranularity_flags)
DMM_CHECK_SAME_SIZE(dmm_cu_stream_capture_status, CUstreamCaptureStatus)

DMM_CHECK_SAME_SIZE(dmm_cu_mem_location, CUmemLocation)
DMM_CHECK_MEMBER(dmm_cu_mem_location, CUmemLocation, type, type)
DMM_CHECK_MEMBER(dmm_cu_mem_location, CUmemLocation, id, id)

DMM_CHECK_SAME_SIZE(dmm_cu_mem_allocation_prop, CUmemAllocationProp)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, type, type)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, requested_handle_types, requestedHandleTypes)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, location, location)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, win32_handle_meta_data, win32HandleMetaData)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, alloc_flags, allocFlags)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, alloc_flags.compression_type,
                 allocFlags.compressionType)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, alloc_flags.gpu_direct_rdma_capable,
                 allocFlags.gpuDirectRDMACapable)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, alloc_flags.usage, allocFlags.usage)
DMM_CHECK_MEMBER(dmm_cu_mem_allocation_prop, CUmemAllocationProp, alloc_flags.reserved, allocFlags.reserved)

DMM_CHECK_SAME_SIZE(dmm_cu_mem_access_desc, CUmemAccessDesc)
DMM_CHECK_MEMBER(dmm_cu_mem_access_desc, CUmemAccessDesc, location, location)
DMM_CHECK_MEMBER(dmm_cu_mem_access_desc, CUmemAccessDesc, flags, flags)

/* ---- binding: one enumerator per symbol we look up, the documented name must expand to its own ---- */
#define DMM_SYMBOL_ENUMERATOR(name, symbol, params) dmm_check_symbol_##symbol,
enum {
    DMM_CU_DRIVER_ENTRY_POINTS(DMM_SYMBOL_ENUMERATOR) DMM_CU_OTHER_ENTRY_POINTS(DMM_SYMBOL_ENUMERATOR)
    DMM_CU_CAPTURE_INFO_V3(DMM_SYMBOL_ENUMERATOR) DMM_CU_CAPTURE_INFO_V2(DMM_SYMBOL_ENUMERATOR)
};
/* An undeclared dmm_check_symbol_<x> here means: cuda.h binds `name` to <x>, a symbol dmm does not use. */
#define DMM_CHECK_BINDING(name, symbol, params)                                                    \
    _Static_assert(DMM_XCAT(dmm_check_symbol_, name) == dmm_check_symbol_##symbol,                  \
                   "cuda_decl.h: cuda.h binds " #name " to another symbol than " #symbol);
DMM_CU_DRIVER_ENTRY_POINTS(DMM_CHECK_BINDING)
DMM_CU_OTHER_ENTRY_POINTS(DMM_CHECK_BINDING)

/* ---- signatures: from here on, dmm's type names stand for CUDA's ---- */
#define dmm_cu_result CUresult
#define dmm_cu_device CUdevice
#define dmm_cu_deviceptr CUdeviceptr
#define dmm_cu_mem_handle CUmemGenericAllocationHandle
#define dmm_cu_context CUcontext
#define dmm_cu_stream CUstream
#define dmm_cu_event CUevent
#define dmm_cu_graph CUgraph
#define dmm_cu_graph_node CUgraphNode
#define dmm_cu_graph_edge_data CUgraphEdgeData
#define dmm_cu_module CUmodule
#define dmm_cu_function CUfunction
#define dmm_cu_host_fn CUhostFn
#define dmm_cu_mem_pool CUmemoryPool
#define dmm_cu_mem_pool_attribute CUmemPool_attribute
#define dmm_cu_device_attribute CUdevice_attribute
#define dmm_cu_mem_granularity_flags CUmemAllocationGranularity_flags
#define dmm_cu_stream_capture_status CUstreamCaptureStatus
#define dmm_cu_mem_allocation_prop CUmemAllocationProp
#define dmm_cu_mem_access_desc CUmemAccessDesc
#define dmm_cu_mem_handle_type CUmemAllocationHandleType

#define DMM_CHECK_SIGNATURE(name, symbol, params)                                                  \
    _Static_assert(_Generic(&symbol, dmm_cu_result(*) params: 1, default: 0),                       \
                   "cuda_decl.h: the parameters of " #symbol " differ from cuda.h's");
DMM_CU_DRIVER_ENTRY_POINTS(DMM_CHECK_SIGNATURE)
DMM_CU_OTHER_ENTRY_POINTS(DMM_CHECK_SIGNATURE)
#if CUDA_VERSION >= 12030
DMM_CU_CAPTURE_INFO_V3(DMM_CHECK_SIGNATURE)
#endif
#if CUDA_VERSION < 13000
DMM_CU_CAPTURE_INFO_V2(DMM_CHECK_SIGNATURE)
#endif
