/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/frames.c — the history's context for torch: who allocated each block.
 *
 * What it owns: the one context function (dmm/device.h's dmm_device_history_context) that libdmm_torch
 * gives every device whose history records context, the caller's hook it forwards to (python/dmm/
 * _stacks.py, a ctypes callback that numbers the thread's Python frames), and the native frames it
 * passes along when asked (glibc's backtrace, up to DMM_TORCH_NATIVE_FRAMES_MAX return addresses), with
 * the symbolizer that names them later (dladdr; C++ names demangled when the process has libstdc++).
 *
 * Invariants: the hook and the depth are read with one atomic load each per event; the context
 * function runs on the allocating thread with no lock of dmm held (the device's contract), so the hook
 * may take the GIL. A hook cleared while a thread is inside it finishes that call.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm_torch.h"
#include "frames.h"

/* libstdc++'s demangler, when the process has it (torch's does); weak, so a C-only process still links */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status) __attribute__((weak));

static dmm_torch_context_fn _Atomic g_hook;
static _Atomic int g_depth;

uint32_t dmm__torch_context(void *arg, int event) {
    (void)arg;
    dmm_torch_context_fn hook = atomic_load_explicit(&g_hook, memory_order_acquire);
    if (hook == NULL) return 0;
    void *frames[DMM_TORCH_NATIVE_FRAMES_MAX];
    int depth = atomic_load_explicit(&g_depth, memory_order_relaxed), n = 0;
    if (depth > 0) n = backtrace(frames, depth);
    return hook(event, frames, n < 0 ? 0 : n);
}

void dmm__torch_context_set(dmm_torch_context_fn hook, int native_depth) {
    atomic_store_explicit(&g_depth, native_depth, memory_order_relaxed);
    atomic_store_explicit(&g_hook, hook, memory_order_release);
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
