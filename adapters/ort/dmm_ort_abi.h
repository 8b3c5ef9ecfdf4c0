/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/dmm_ort_abi.h — dmm's own declaration of the part of ONNX Runtime's C ABI the adapter uses.
 * Internal to libdmm_ort (never installed); no ONNX Runtime header is included or copied.
 *
 * What it owns: the facts of the ABI, written down once:
 *   - OrtApiBase: the table OrtGetApiBase() returns: GetApi(version) (NULL for a version the runtime
 *     does not support) and GetVersionString();
 *   - OrtApi: an append-only table of function pointers. A function keeps its slot (index) forever,
 *     so a call is "slot k of the table"; each slot below carries the API version it first appeared in,
 *     and the loader (loader.c) never reads a slot above the version the runtime granted;
 *   - OrtAllocator: the struct a custom allocator fills (version, then the function fields in order);
 *     the runtime reads a field only when `version` is at least the version that field appeared in;
 *   - the enum values and the session option keys the adapter passes.
 *
 * Where the facts come from: the public onnxruntime_c_api.h of microsoft/onnxruntime at API version 30
 * (ONNX Runtime 1.30), its slots counted one per ORT_API2_STATUS / ORT_CLASS_RELEASE / plain function
 * member, and checked against the runtime's own static_asserts of its version boundaries
 * (onnxruntime_c_api.cc: ReleaseCustomOpDomain = 101 ends v1, ReleaseModelMetadata = 118 v2,
 * AddFreeDimensionOverrideByName = 124 v3, ReleaseAvailableProviders = 126 v4, SetGlobalSpinControl = 149
 * v5, ReleaseArenaCfg = 157 v6, GetCurrentGpuDeviceId = 161 v7,
 * CreateSessionFromArrayWithPrepackedWeightsContainer = 169 v8, GetSparseTensorIndices = 191 v9) and the
 * header's "since" notes for the later ones. The tests prove every slot here by using it against the
 * real library (tests/ort/test_ort_loader.c: a wrong slot calls the wrong function, which crashes or
 * answers wrongly).
 *
 * Invariants: slot indices strictly increase with their version (append-only); every slot's version
 * ≤ DMM_ORT_API_KNOWN; the OrtAllocator fields are in ABI order, one pointer each after `version`.
 */
#ifndef DMM_ORT_ABI_H
#define DMM_ORT_ABI_H

#include <stddef.h>
#include <stdint.h>

/* The newest API version whose table this file describes, and the oldest the adapter runs on
 * (RegisterAllocator appeared in 9; sessions then use env allocators only by the session option). */
#define DMM_ORT_API_KNOWN 30u
#define DMM_ORT_API_OLDEST 9u

/* ---- opaque runtime objects (the tags are the runtime's, so a caller's own declarations agree) ---- */
struct OrtEnv;
struct OrtStatus;
struct OrtMemoryInfo;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtRunOptions;
struct OrtTensorTypeAndShapeInfo;
struct OrtTypeInfo;
struct OrtKeyValuePairs;
struct OrtSyncStream;
struct OrtAllocator;

/* ---- enum values (ints in the ABI) ---- */
enum {
    DMM_ORT_OK = 0, /* OrtErrorCode: 0 ok, 1 fail, 2 invalid argument, ... (the adapter passes only these) */
    DMM_ORT_FAIL = 1,
    DMM_ORT_INVALID_ARGUMENT = 2,
};
enum { /* OrtLoggingLevel */
    DMM_ORT_LOG_VERBOSE = 0,
    DMM_ORT_LOG_INFO = 1,
    DMM_ORT_LOG_WARNING = 2,
    DMM_ORT_LOG_ERROR = 3,
    DMM_ORT_LOG_FATAL = 4,
};
enum { /* OrtAllocatorType */
    DMM_ORT_INVALID_ALLOCATOR = -1,
    DMM_ORT_DEVICE_ALLOCATOR = 0,
    DMM_ORT_ARENA_ALLOCATOR = 1,
};
enum { /* OrtMemType */
    DMM_ORT_MEM_CPU_INPUT = -2,
    DMM_ORT_MEM_CPU_OUTPUT = -1,
    DMM_ORT_MEM_DEFAULT = 0,
};
enum { /* OrtMemoryInfoDeviceType */
    DMM_ORT_DEVICE_CPU = 0,
    DMM_ORT_DEVICE_GPU = 1,
};
enum { /* ONNXTensorElementDataType */
    DMM_ORT_TENSOR_FLOAT = 1,
};

/* The name ONNX Runtime gives CPU memory ("Cpu") and CUDA device memory ("Cuda"). */
#define DMM_ORT_NAME_CPU "Cpu"
#define DMM_ORT_NAME_CUDA "Cuda"

/* Session option keys. */
#define DMM_ORT_KEY_USE_ENV_ALLOCATORS "session.use_env_allocators"
#define DMM_ORT_KEY_INITIALIZERS_ON_DEVICE_ALLOCATOR "session.use_device_allocator_for_initializers"

/* ---- OrtApiBase ---- */
typedef struct dmm_ort_api_base {
    const void *(*get_api)(uint32_t version); /* the OrtApi table, or NULL for an unsupported version */
    const char *(*get_version_string)(void);  /* e.g. "1.30.0" */
} dmm_ort_api_base;

typedef const dmm_ort_api_base *(*dmm_ort_get_api_base_fn)(void);

/* ---- OrtAllocator: version, then one function pointer per field, in this order ---- */
#define DMM_ORT_ALLOCATOR_V_RESERVE 18u   /* Reserve: session-time (initializer) allocations */
#define DMM_ORT_ALLOCATOR_V_STATS 23u     /* GetStats */
#define DMM_ORT_ALLOCATOR_V_ON_STREAM 23u /* AllocOnStream */
#define DMM_ORT_ALLOCATOR_V_SHRINK 25u    /* Shrink */
#define DMM_ORT_ALLOCATOR_V_NEWEST 25u    /* no field was added after Shrink up to DMM_ORT_API_KNOWN */

struct OrtAllocator {
    uint32_t version;
    void *(*Alloc)(struct OrtAllocator *self, size_t bytes);
    void (*Free)(struct OrtAllocator *self, void *p);
    const struct OrtMemoryInfo *(*Info)(const struct OrtAllocator *self);
    void *(*Reserve)(struct OrtAllocator *self, size_t bytes);                                  /* ≥ 18 */
    struct OrtStatus *(*GetStats)(const struct OrtAllocator *self, struct OrtKeyValuePairs **out); /* ≥ 23 */
    void *(*AllocOnStream)(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *stream); /* ≥ 23 */
    struct OrtStatus *(*Shrink)(struct OrtAllocator *self);                                     /* ≥ 25 */
};

/* The log callback of CreateEnvWithCustomLogger. */
typedef void (*dmm_ort_logging_fn)(void *param, int severity, const char *category, const char *logid,
                                   const char *code_location, const char *message);

/* ---- OrtApi slots: X(name, slot, first API version, return type, parameters) ---- */
#define DMM_ORT_SLOTS(X)                                                                                       \
    X(CreateStatus, 0, 1, struct OrtStatus *, (int code, const char *msg))                                    \
    X(GetErrorCode, 1, 1, int, (const struct OrtStatus *status))                                              \
    X(GetErrorMessage, 2, 1, const char *, (const struct OrtStatus *status))                                  \
    X(CreateEnv, 3, 1, struct OrtStatus *, (int level, const char *logid, struct OrtEnv **out))               \
    X(CreateEnvWithCustomLogger, 4, 1, struct OrtStatus *,                                                   \
      (dmm_ort_logging_fn fn, void *param, int level, const char *logid, struct OrtEnv **out))                \
    X(CreateSessionFromArray, 8, 1, struct OrtStatus *,                                                      \
      (const struct OrtEnv *env, const void *model, size_t bytes, const struct OrtSessionOptions *options,   \
       struct OrtSession **out))                                                                              \
    X(Run, 9, 1, struct OrtStatus *,                                                                          \
      (struct OrtSession *session, const struct OrtRunOptions *run_options, const char *const *input_names,  \
       const struct OrtValue *const *inputs, size_t ninputs, const char *const *output_names,                 \
       size_t noutputs, struct OrtValue **outputs))                                                           \
    X(CreateSessionOptions, 10, 1, struct OrtStatus *, (struct OrtSessionOptions **out))                     \
    X(DisableCpuMemArena, 19, 1, struct OrtStatus *, (struct OrtSessionOptions *options))                    \
    X(SetIntraOpNumThreads, 24, 1, struct OrtStatus *, (struct OrtSessionOptions *options, int n))           \
    X(SessionGetInputCount, 30, 1, struct OrtStatus *, (const struct OrtSession *session, size_t *out))        \
    X(SessionGetOutputCount, 31, 1, struct OrtStatus *, (const struct OrtSession *session, size_t *out))       \
    X(SessionGetInputTypeInfo, 33, 1, struct OrtStatus *,                                                     \
      (const struct OrtSession *session, size_t index, struct OrtTypeInfo **out))                             \
    X(SessionGetInputName, 36, 1, struct OrtStatus *,                                                         \
      (const struct OrtSession *session, size_t index, struct OrtAllocator *a, char **out))                   \
    X(SessionGetOutputName, 37, 1, struct OrtStatus *,                                                        \
      (const struct OrtSession *session, size_t index, struct OrtAllocator *a, char **out))                   \
    X(CreateTensorWithDataAsOrtValue, 49, 1, struct OrtStatus *,                                             \
      (const struct OrtMemoryInfo *info, void *data, size_t bytes, const int64_t *shape, size_t rank,        \
       int element_type, struct OrtValue **out))                                                              \
    X(GetTensorMutableData, 51, 1, struct OrtStatus *, (struct OrtValue *value, void **out))                 \
    X(CastTypeInfoToTensorInfo, 55, 1, struct OrtStatus *,                                                    \
      (const struct OrtTypeInfo *info, const struct OrtTensorTypeAndShapeInfo **out))                         \
    X(GetTensorElementType, 60, 1, struct OrtStatus *, (const struct OrtTensorTypeAndShapeInfo *info, int *out)) \
    X(GetDimensionsCount, 61, 1, struct OrtStatus *, (const struct OrtTensorTypeAndShapeInfo *info, size_t *out)) \
    X(GetDimensions, 62, 1, struct OrtStatus *,                                                               \
      (const struct OrtTensorTypeAndShapeInfo *info, int64_t *dims, size_t n))                                \
    X(GetTensorShapeElementCount, 64, 1, struct OrtStatus *,                                                 \
      (const struct OrtTensorTypeAndShapeInfo *info, size_t *out))                                            \
    X(GetTensorTypeAndShape, 65, 1, struct OrtStatus *,                                                       \
      (const struct OrtValue *value, struct OrtTensorTypeAndShapeInfo **out))                                 \
    X(CreateMemoryInfo, 68, 1, struct OrtStatus *,                                                            \
      (const char *name, int allocator_type, int id, int mem_type, struct OrtMemoryInfo **out))               \
    X(CreateCpuMemoryInfo, 69, 1, struct OrtStatus *, (int allocator_type, int mem_type, struct OrtMemoryInfo **out)) \
    X(CompareMemoryInfo, 70, 1, struct OrtStatus *,                                                           \
      (const struct OrtMemoryInfo *a, const struct OrtMemoryInfo *b, int *out))                               \
    X(MemoryInfoGetName, 71, 1, struct OrtStatus *, (const struct OrtMemoryInfo *info, const char **out))    \
    X(MemoryInfoGetId, 72, 1, struct OrtStatus *, (const struct OrtMemoryInfo *info, int *out))              \
    X(MemoryInfoGetMemType, 73, 1, struct OrtStatus *, (const struct OrtMemoryInfo *info, int *out))         \
    X(MemoryInfoGetType, 74, 1, struct OrtStatus *, (const struct OrtMemoryInfo *info, int *out))            \
    X(AllocatorAlloc, 75, 1, struct OrtStatus *, (struct OrtAllocator *a, size_t bytes, void **out))         \
    X(AllocatorFree, 76, 1, struct OrtStatus *, (struct OrtAllocator *a, void *p))                           \
    X(AllocatorGetInfo, 77, 1, struct OrtStatus *, (const struct OrtAllocator *a, const struct OrtMemoryInfo **out)) \
    X(GetAllocatorWithDefaultOptions, 78, 1, struct OrtStatus *, (struct OrtAllocator **out))                \
    X(ReleaseEnv, 92, 1, void, (struct OrtEnv *p))                                                            \
    X(ReleaseStatus, 93, 1, void, (struct OrtStatus *p))                                                      \
    X(ReleaseMemoryInfo, 94, 1, void, (struct OrtMemoryInfo *p))                                              \
    X(ReleaseSession, 95, 1, void, (struct OrtSession *p))                                                    \
    X(ReleaseValue, 96, 1, void, (struct OrtValue *p))                                                        \
    X(ReleaseTypeInfo, 98, 1, void, (struct OrtTypeInfo *p))                                                  \
    X(ReleaseTensorTypeAndShapeInfo, 99, 1, void, (struct OrtTensorTypeAndShapeInfo *p))                      \
    X(ReleaseSessionOptions, 100, 1, void, (struct OrtSessionOptions *p))                                     \
    X(AddSessionConfigEntry, 130, 5, struct OrtStatus *,                                                     \
      (struct OrtSessionOptions *options, const char *key, const char *value))                                \
    X(CreateAllocator, 131, 5, struct OrtStatus *,                                                            \
      (const struct OrtSession *session, const struct OrtMemoryInfo *info, struct OrtAllocator **out))        \
    X(ReleaseAllocator, 132, 5, void, (struct OrtAllocator *p))                                               \
    X(RegisterAllocator, 176, 9, struct OrtStatus *, (struct OrtEnv *env, struct OrtAllocator *a))          \
    X(UnregisterAllocator, 177, 9, struct OrtStatus *, (struct OrtEnv *env, const struct OrtMemoryInfo *info)) \
    X(MemoryInfoGetDeviceType, 225, 14, void, (const struct OrtMemoryInfo *info, int *out))                  \
    X(GetBuildInfoString, 254, 15, const char *, (void))                                                      \
    X(CreateKeyValuePairs, 295, 22, void, (struct OrtKeyValuePairs **out))                                   \
    X(AddKeyValuePair, 296, 22, void, (struct OrtKeyValuePairs *kvps, const char *key, const char *value))  \
    X(GetKeyValue, 297, 22, const char *, (const struct OrtKeyValuePairs *kvps, const char *key))           \
    X(GetKeyValuePairs, 298, 22, void,                                                                        \
      (const struct OrtKeyValuePairs *kvps, const char *const **keys, const char *const **values, size_t *n)) \
    X(ReleaseKeyValuePairs, 300, 22, void, (struct OrtKeyValuePairs *p))                                      \
    X(AllocatorGetStats, 319, 23, struct OrtStatus *, (const struct OrtAllocator *a, struct OrtKeyValuePairs **out)) \
    X(SyncStream_GetHandle, 384, 23, void *, (struct OrtSyncStream *stream))

/* One typedef per slot: dmm_ort_fn_<name>. */
#define DMM_ORT_SLOT_TYPEDEF(name, slot, version, ret, params) typedef ret(*dmm_ort_fn_##name) params;
DMM_ORT_SLOTS(DMM_ORT_SLOT_TYPEDEF)
#undef DMM_ORT_SLOT_TYPEDEF

/* The slots an open runtime resolved (dmm_ort_runtime_calls), by name: ort->CreateEnv(...). A slot of an
 * API version above the one ONNX Runtime granted is NULL; the required ones (version ≤
 * DMM_ORT_API_OLDEST) never are. */
typedef struct dmm_ort_calls {
#define DMM_ORT_SLOT_FIELD(name, slot, version, ret, params) dmm_ort_fn_##name name;
    DMM_ORT_SLOTS(DMM_ORT_SLOT_FIELD)
#undef DMM_ORT_SLOT_FIELD
} dmm_ort_calls;

#endif /* DMM_ORT_ABI_H */
