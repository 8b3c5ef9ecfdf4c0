/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/dlpack.c — claims on memory and the DLPack tensors that hold them (dmm_torch.h,
 * "Claims and DLPack"; python/dmm/_dlpack.py, dmm.buffer and dmm.kv's views stand on it).
 *
 * What it owns: the claim objects (memory, its device and stream, a count of holders, what the last
 * holder does with the memory: nothing, free it or unmap an import of it) and the DLManagedTensor structs it hands out, each with its shape and
 * stride, in C memory.
 *
 * Why in C: a DLPack consumer calls the deleter from its own thread and state — while an exception
 * is pending, without the GIL, at interpreter exit after Python's modules are gone. A deleter that is
 * plain C touches no Python state, so it works in all of these; only the capsule destructor (run by
 * Python when a capsule nobody consumed goes) calls two of Python's C functions, looked up in the
 * process when first needed, which neither reads nor sets the error state.
 *
 * Invariants: a claim's count is the number of holders (its creator, one per DLPack tensor not yet
 * deleted); the claim (and, as it says, its memory through dmm_torch_free or dmm_torch_unimport) goes
 * exactly once, when the count reaches 0. A DLManagedTensor holds one count and is freed by its deleter, once.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmm_torch.h"

struct dmm_torch_claim {
    _Atomic uint64_t holders;
    void *ptr;
    uint64_t bytes;
    int device;
    void *stream;
    int owns;  /* DMM_TORCH_CLAIM_*: what the last holder does with the memory */
    _Atomic int notify; /* a descriptor told (one 8-byte count of 1, then closed) once that is done; -1: none */
};

/* DLPack's ABI (dlpack.h, version 0.8 and later: the unversioned "dltensor" every consumer takes). */
typedef struct {
    int32_t device_type, device_id;
} dl_device;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} dl_data_type;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_data_type dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed_tensor {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_tensor *self);
} dl_managed_tensor;

/* One allocation: the struct, then its shape and stride. */
typedef struct {
    dl_managed_tensor m;
    int64_t shape[1], strides[1];
} managed_block;

static _Atomic uint64_t g_live; /* claims not gone yet, in the process */

uint64_t dmm_torch_claims_live(void) { return atomic_load_explicit(&g_live, memory_order_acquire); }

int dmm_torch_claim_create(void *ptr, uint64_t bytes, int device, void *stream, int owns, dmm_torch_claim **out) {
    if (out == NULL || ptr == NULL || bytes == 0 || bytes >= (uint64_t)1 << 63 || owns < DMM_TORCH_CLAIM_BORROWS ||
        owns > DMM_TORCH_CLAIM_UNIMPORTS)
        return -1;
    dmm_torch_claim *c = malloc(sizeof *c);
    if (c == NULL) return -1;
    atomic_init(&c->holders, 1);
    c->ptr = ptr;
    c->bytes = bytes;
    c->device = device;
    c->stream = stream;
    c->owns = owns;
    atomic_init(&c->notify, -1);
    atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
    *out = c;
    return 0;
}

void dmm_torch_claim_drop(dmm_torch_claim *c) {
    if (c == NULL) return;
    if (atomic_fetch_sub_explicit(&c->holders, 1, memory_order_acq_rel) != 1) return;
    if (c->owns == DMM_TORCH_CLAIM_FREES) dmm_torch_free(c->ptr, (ssize_t)c->bytes, c->device, c->stream);
    else if (c->owns == DMM_TORCH_CLAIM_UNIMPORTS) (void)dmm_torch_unimport(c->device, c->ptr); /* said in last_error */
    int fd = atomic_exchange_explicit(&c->notify, -1, memory_order_acq_rel);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(fd, &one, sizeof one); /* an eventfd counts it; anything else gets 8 bytes */
        (void)w;
        close(fd);
    }
    free(c);
    atomic_fetch_sub_explicit(&g_live, 1, memory_order_release);
}

int dmm_torch_claim_notify(dmm_torch_claim *c, int fd) {
    if (c == NULL || fd < 0) return -1;
    int old = atomic_exchange_explicit(&c->notify, fd, memory_order_acq_rel);
    if (old >= 0) close(old);
    return 0;
}

uint64_t dmm_torch_claim_holders(const dmm_torch_claim *c) {
    return c != NULL ? atomic_load_explicit(&((dmm_torch_claim *)c)->holders, memory_order_acquire) : 0;
}

static void managed_delete(dl_managed_tensor *m) {
    if (m == NULL) return;
    dmm_torch_claim *c = m->manager_ctx;
    free(m); /* the block's first member */
    dmm_torch_claim_drop(c);
}

void *dmm_torch_claim_dlpack(dmm_torch_claim *c, int device_type) {
    return c != NULL ? dmm_torch_claim_dlpack_range(c, 0, c->bytes, device_type) : NULL;
}

void *dmm_torch_claim_dlpack_range(dmm_torch_claim *c, uint64_t offset, uint64_t bytes, int device_type) {
    if (c == NULL || bytes == 0 || offset > c->bytes || bytes > c->bytes - offset) return NULL;
    managed_block *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    atomic_fetch_add_explicit(&c->holders, 1, memory_order_relaxed);
    b->shape[0] = (int64_t)bytes;
    b->strides[0] = 1;
    b->m.dl_tensor = (dl_tensor){.data = (char *)c->ptr + offset,
                                 .device = {device_type, c->device},
                                 .ndim = 1,
                                 .dtype = {1, 8, 1}, /* kDLUInt, 8 bits, 1 lane */
                                 .shape = b->shape,
                                 .strides = b->strides,
                                 .byte_offset = 0};
    b->m.manager_ctx = c;
    b->m.deleter = managed_delete;
    return &b->m;
}

/* Python's capsule calls, found in the process (this library does not link libpython). */
typedef int (*capsule_is_valid_fn)(void *capsule, const char *name);
typedef void *(*capsule_pointer_fn)(void *capsule, const char *name);
static _Atomic(capsule_is_valid_fn) g_is_valid;
static _Atomic(capsule_pointer_fn) g_pointer;

void dmm_torch_dlpack_capsule_destructor(void *capsule) {
    capsule_is_valid_fn is_valid = atomic_load_explicit(&g_is_valid, memory_order_acquire);
    capsule_pointer_fn pointer = atomic_load_explicit(&g_pointer, memory_order_acquire);
    if (is_valid == NULL || pointer == NULL) {
        void *a = dlsym(RTLD_DEFAULT, "PyCapsule_IsValid"), *b = dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
        if (a == NULL || b == NULL) return; /* not in a Python process: nothing to do */
        /* a data pointer to a function pointer: memcpy keeps ISO C quiet; POSIX guarantees the sizes */
        memcpy(&is_valid, &a, sizeof a);
        memcpy(&pointer, &b, sizeof b);
        atomic_store_explicit(&g_is_valid, is_valid, memory_order_release);
        atomic_store_explicit(&g_pointer, pointer, memory_order_release);
    }
    /* still "dltensor": nobody consumed it (a consumer renames it "used_dltensor" and owns the tensor) */
    if (!is_valid(capsule, "dltensor")) return;
    dl_managed_tensor *m = pointer(capsule, "dltensor");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
}
