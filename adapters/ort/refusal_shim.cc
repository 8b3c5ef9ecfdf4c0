/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/refusal_shim.cc — the allocator's entry points as ONNX Runtime calls them: a refusal
 * becomes a C++ exception carrying dmm's sentence.
 *
 * Why: the OrtAllocator contract says a failed Alloc returns NULL, but ONNX Runtime 1.30 does not check
 * it where a Run allocates a tensor (its own IAllocator contract is "throw on failure"): a NULL becomes
 * a tensor at address 0 and the kernel writing it crashes the process (measured: tests/ort/
 * test_ort_allocator.c with null_on_refusal = 1 in a Run segfaults inside libonnxruntime). A
 * std::runtime_error thrown here instead unwinds through ONNX Runtime (no C frame in between: this
 * function is the one ONNX Runtime called) to the API boundary, which turns it into the Run's (or the
 * session creation's) error status with dmm's sentence as its message. ONNX Runtime links the system's
 * libstdc++, so the exception's type is the one its handlers catch.
 *
 * What it owns: nothing; it wraps allocator.c's C entry points. A request of 0 bytes is NULL without an
 * exception (ONNX Runtime never touches an empty tensor's data). dmm_ort_config.null_on_refusal = 1
 * installs the plain C entry points instead.
 */
#include <stdexcept>
#include <string>

#include "dmm_ort.h"

/* allocator.c's C entry points (declared in ort_internal.h, which is C only). */
extern "C" {
struct OrtSyncStream;
void *dmm__ort_c_alloc(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_c_reserve(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_c_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *stream);
void *dmm__ort_throwing_alloc(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_throwing_reserve(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_throwing_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *s);
}

[[noreturn]] static void refuse(dmm_ort_allocator *a) {
    char why[1024]; /* DMM__ERROR_CAP */
    dmm_ort_allocator_last_error(a, why, sizeof why);
    throw std::runtime_error(std::string(why));
}

void *dmm__ort_throwing_alloc(struct OrtAllocator *self, size_t bytes) {
    void *p = dmm__ort_c_alloc(self, bytes);
    if (p == nullptr && bytes > 0) refuse(reinterpret_cast<dmm_ort_allocator *>(self) /* its first member */);
    return p;
}

void *dmm__ort_throwing_reserve(struct OrtAllocator *self, size_t bytes) {
    void *p = dmm__ort_c_reserve(self, bytes);
    if (p == nullptr && bytes > 0) refuse(reinterpret_cast<dmm_ort_allocator *>(self) /* its first member */);
    return p;
}

void *dmm__ort_throwing_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *s) {
    void *p = dmm__ort_c_alloc_on_stream(self, bytes, s);
    if (p == nullptr && bytes > 0) refuse(reinterpret_cast<dmm_ort_allocator *>(self) /* its first member */);
    return p;
}
