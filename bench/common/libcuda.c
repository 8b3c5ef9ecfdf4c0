/* SPDX-License-Identifier: Apache-2.0 */
/* bench/common/libcuda.c — see libcuda.h. */
#include "libcuda.h"

#include <dlfcn.h>
#include <string.h>

void bench_cu_device_memory(int device, dmm_cu_mem_allocation_prop *prop, dmm_cu_mem_access_desc *access) {
    memset(prop, 0, sizeof *prop);
    prop->type = DMM_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = DMM_CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
    memset(access, 0, sizeof *access);
    access->location = prop->location;
    access->flags = DMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

void *bench_libcuda_open(const char *bench, const bench_cu_symbol *symbols, size_t n) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "%s: dlopen libcuda.so.1: %s\n", bench, dlerror());
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        void *s = dlsym(lib, symbols[i].symbol);
        if (s == NULL) {
            fprintf(stderr, "%s: libcuda.so.1 lacks %s\n", bench, symbols[i].symbol);
            dlclose(lib);
            return NULL;
        }
        memcpy(symbols[i].slot, &s, sizeof s);
    }
    return lib;
}
