/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/frames.c — the history's context for torch: who allocated each block.
 *
 * What it owns: the context function (dmm/device.h's dmm_device_history_context) that libdmm_torch
 * gives a device whose history records context, one slot per device (the caller's hook, the event kinds
 * it wants, how many native frames it is given), the count of calls in flight, and the symbolizer that
 * names native frames later (dladdr; C++ names demangled when the process has libstdc++).
 *
 * Invariants: each event reads its slot with one atomic load per field; the context function runs on
 * the allocating thread with no lock of dmm held (the device's contract), so the hook may take the GIL;
 * it is not called for kinds the slot does not want (no GIL for a free nobody records), nor once the
 * process's Python (when there is one) is no longer initialized. Clearing a hook returns after every
 * call in flight has returned: the caller may free what the old hook used.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm_torch.h"
#include "frames.h"

/* libstdc++'s demangler, when the process has it (torch's does); weak, so a C-only process still links */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status) __attribute__((weak));

typedef struct context_slot {
    dmm_torch_context_fn _Atomic hook; /* NULL: none */
    _Atomic uint32_t events;           /* 1 << DMM_DEVICE_EVENT_* of the kinds the hook is called for */
    _Atomic int depth;                 /* native frames passed: 0 … DMM_TORCH_NATIVE_FRAMES_MAX */
} context_slot;

static context_slot g_slots[DMM_TORCH_MAX_DEVICES];
static _Atomic int g_inflight; /* calls into a hook not returned yet, every device */

/* Python's Py_IsInitialized where the process has Python (NULL: none); looked up once. */
static int (*g_python_initialized)(void);
static pthread_once_t g_python_once = PTHREAD_ONCE_INIT;

static void find_python(void) {
    void *f = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    memcpy(&g_python_initialized, &f, sizeof f); /* a data pointer to a function pointer: POSIX allows it */
}

static bool python_gone(void) {
    pthread_once(&g_python_once, find_python);
    return g_python_initialized != NULL && !g_python_initialized();
}

uint32_t dmm__torch_context(void *arg, int event) {
    context_slot *s = arg;
    if (event < 0 || event > 31 || !(atomic_load_explicit(&s->events, memory_order_relaxed) >> event & 1)) return 0;
    atomic_fetch_add_explicit(&g_inflight, 1, memory_order_acq_rel);
    uint32_t n = 0;
    dmm_torch_context_fn hook = atomic_load_explicit(&s->hook, memory_order_acquire);
    if (hook != NULL && !python_gone()) {
        void *frames[DMM_TORCH_NATIVE_FRAMES_MAX];
        int depth = atomic_load_explicit(&s->depth, memory_order_relaxed), k = 0;
        if (depth > 0) k = backtrace(frames, depth);
        n = hook(event, frames, k < 0 ? 0 : k);
    }
    atomic_fetch_sub_explicit(&g_inflight, 1, memory_order_acq_rel);
    return n;
}

void *dmm__torch_context_set(int device, dmm_torch_context_fn hook, uint32_t events, int native_depth) {
    context_slot *s = &g_slots[device];
    atomic_store_explicit(&s->depth, native_depth, memory_order_relaxed);
    atomic_store_explicit(&s->events, hook != NULL ? events : 0, memory_order_relaxed);
    atomic_store_explicit(&s->hook, hook, memory_order_release);
    if (hook == NULL)
        while (atomic_load_explicit(&g_inflight, memory_order_acquire) > 0) sched_yield();
    return s;
}

int dmm_torch_native_symbol(const void *addr, char *name, size_t name_cap, char *object, size_t object_cap,
                            uint64_t *offset) {
    if (name == NULL || object == NULL || name_cap == 0 || object_cap == 0 || offset == NULL) return -1;
    name[0] = object[0] = '\0';
    *offset = 0;
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (addr == NULL || dladdr(addr, &info) == 0) return -1;
    if (info.dli_fname != NULL) snprintf(object, object_cap, "%s", info.dli_fname);
    if (info.dli_sname == NULL) {
        *offset = (uint64_t)((const char *)addr - (const char *)info.dli_fbase);
        return 0;
    }
    *offset = (uint64_t)((const char *)addr - (const char *)info.dli_saddr);
    int status = -1;
    char *plain = __cxa_demangle != NULL ? __cxa_demangle(info.dli_sname, NULL, NULL, &status) : NULL;
    snprintf(name, name_cap, "%s", status == 0 && plain != NULL ? plain : info.dli_sname);
    free(plain);
    return 0;
}
