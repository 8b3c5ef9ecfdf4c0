/* SPDX-License-Identifier: Apache-2.0 */
/* Uses the installed libdmm_ort (shared, static or through pkg-config). ONNX Runtime is opened at run
 * time: with a path to one (argv[1]) an allocator over a host driver serves an Alloc and a Free through
 * the OrtAllocator ONNX Runtime would call; without one, the refusal must name the path it tried. */
#include <dmm/dmm.h>
#include <dmm_ort.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *lib = argc > 1 ? argv[1] : "/nonexistent/libonnxruntime.so.1";
    dmm_ort_runtime *rt = NULL;
    if (dmm_ort_runtime_open(lib, &rt) != DMM_OK) {
        if (argc > 1 || strstr(dmm_last_error(), lib) == NULL) {
            fprintf(stderr, "dmm_ort: %s\n", dmm_last_error());
            return 1;
        }
        printf("dmm_ort %s: no ONNX Runtime at %s, refused with a sentence that says so\n", dmm_version_string(), lib);
        return 0;
    }
    dmm_driver *host = NULL;
    dmm_governor *gov = NULL;
    dmm_ort_allocator *a = NULL;
    dmm_ort_config cfg = {.size = sizeof cfg, .va_bytes = (uint64_t)1 << 30, .null_on_refusal = 1};
    if (dmm_host_driver_create(NULL, &host) != DMM_OK || dmm_governor_create(NULL, &gov) != DMM_OK ||
        dmm_ort_allocator_create(rt, host, gov, &cfg, &a) != DMM_OK) {
        fprintf(stderr, "dmm_ort: %s\n", dmm_last_error());
        return 1;
    }
    struct OrtAllocator *o = dmm_ort_allocator_ort(a);
    void *p = o->Alloc(o, 4096);
    if (p == NULL) {
        fprintf(stderr, "dmm_ort: Alloc refused\n");
        return 1;
    }
    memset(p, 0x5a, 4096);
    o->Free(o, p);
    if (dmm_ort_allocator_destroy(a) != DMM_OK || dmm_governor_destroy(gov) != DMM_OK) {
        fprintf(stderr, "dmm_ort: %s\n", dmm_last_error());
        return 1;
    }
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
    printf("dmm_ort %s: an Alloc and a Free through the OrtAllocator over %s\n", dmm_version_string(), lib);
    return 0;
}
