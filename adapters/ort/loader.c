/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/loader.c — ONNX Runtime opened at run time, as the CUDA driver opens libcuda.
 *
 * What it owns: the dlopen handle, the OrtApi table the library granted, and the slot pointers read
 * from it (dmm_dmm_ort_abi.h says which slot is which function and since which API version).
 *
 * The idea: OrtGetApiBase()->GetApi(v) hands out the table of version v, or NULL when the library does
 * not support v. The adapter asks for the newest version it knows (DMM_ORT_API_KNOWN) and walks down to
 * the oldest it runs on, so a newer runtime grants our version and an older one its own. Then every slot
 * of a version ≤ the granted one is read from the table (by index: the table is append-only); a slot of a
 * later version is left NULL and never called. The required slots (version ≤ DMM_ORT_API_OLDEST) must all
 * be there, else the runtime is refused with a sentence: a library that grants a version must fill its
 * slots, and calling a NULL one would crash.
 *
 * Trade-off: asking for versions the library lacks makes ONNX Runtime print one line to stderr per
 * refused version (its own GetApi does that); only for a library older than DMM_ORT_API_KNOWN.
 *
 * Invariants: an open runtime has dl, base, api non-NULL and every required slot non-NULL; a failed open
 * leaves nothing open; closing a runtime frees dmm's object and keeps the library loaded (see close). This file never aborts, exits or prints.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_internal.h"

#define ORT_DEFAULT_LIB "libonnxruntime.so.1"

static dmm_status refuse_open(const char *path, const char *why) {
    return dmm_error_set(DMM_ERR_UNSUPPORTED,
                         "dmm ort: cannot use ONNX Runtime at '%s': %s; set " DMM_ORT_LIB_ENV
                         " to a libonnxruntime.so.1 (1.x, API version %u..%u), or run scripts/ort.sh to fetch "
                         "1.30.0 into .ort/",
                         path, why, DMM_ORT_API_OLDEST, DMM_ORT_API_KNOWN);
}

/* Reads slot `slot` of the table as a function pointer (the table is an array of them). */
static void read_slot(const void *api, unsigned slot, void *fn, size_t fn_size) {
    memcpy(fn, (const char *)api + (size_t)slot * fn_size, fn_size);
}

dmm_status dmm_ort_runtime_open(const char *path, dmm_ort_runtime **out) {
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: dmm_ort_runtime_open needs an output pointer");
    *out = NULL;
    if (path == NULL || path[0] == '\0') path = dmm_env(DMM_ORT_LIB_ENV); /* the option table's reading of it */
    if (path == NULL) path = ORT_DEFAULT_LIB;
    if (strlen(path) >= sizeof(((dmm_ort_runtime *)0)->path))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: the library path is longer than %zu bytes",
                             sizeof(((dmm_ort_runtime *)0)->path) - 1);
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *e = dlerror();
        char why[400];
        snprintf(why, sizeof why, "dlopen failed (%s)", e != NULL ? e : "no reason given");
        return refuse_open(path, why);
    }
    dmm_ort_get_api_base_fn get_base = NULL;
    void *sym = dlsym(dl, "OrtGetApiBase");
    if (sym != NULL) memcpy(&get_base, &sym, sizeof get_base);
    const dmm_ort_api_base *base = get_base != NULL ? get_base() : NULL;
    if (base == NULL || base->get_api == NULL || base->get_version_string == NULL) {
        dlclose(dl);
        return refuse_open(path, sym == NULL ? "it has no symbol OrtGetApiBase (not an ONNX Runtime library)"
                                             : "OrtGetApiBase() answered no usable table");
    }
    const void *api = NULL;
    uint32_t v = DMM_ORT_API_KNOWN;
    for (; v >= DMM_ORT_API_OLDEST; v--) {
        api = base->get_api(v);
        if (api != NULL) break;
    }
    const char *vs = base->get_version_string();
    if (api == NULL) {
        dlclose(dl);
        return dmm_error_set(DMM_ERR_VERSION_MISMATCH,
                             "dmm ort: ONNX Runtime '%s' at '%s' grants no API version from %u to %u (GetApi "
                             "answered NULL for each); use ONNX Runtime 1.%u or newer (scripts/ort.sh fetches "
                             "1.30.0), or set " DMM_ORT_LIB_ENV,
                             vs != NULL ? vs : "?", path, DMM_ORT_API_OLDEST, DMM_ORT_API_KNOWN, DMM_ORT_API_OLDEST);
    }
    dmm_ort_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL) {
        dlclose(dl);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm ort: out of host memory opening ONNX Runtime");
    }
    rt->dl = dl;
    rt->base = base;
    rt->api = api;
    rt->api_version = v;
    snprintf(rt->version, sizeof rt->version, "%s", vs != NULL ? vs : "?");
    snprintf(rt->path, sizeof rt->path, "%s", path);
    const char *missing = NULL;
#define DMM_ORT_SLOT_READ(name, slot, version, ret, params)                                                   \
    if ((version) <= v) {                                                                                     \
        read_slot(api, (slot), &rt->calls.name, sizeof rt->calls.name);                                       \
        if (rt->calls.name == NULL && (version) <= DMM_ORT_API_OLDEST && missing == NULL) missing = #name;    \
    }
    DMM_ORT_SLOTS(DMM_ORT_SLOT_READ)
#undef DMM_ORT_SLOT_READ
    if (missing != NULL) {
        dmm_status s = dmm_error_set(DMM_ERR_VERSION_MISMATCH,
                                     "dmm ort: ONNX Runtime '%s' at '%s' granted API version %u but its table has no "
                                     "%s, which that version must have; the library is broken or not ONNX Runtime; "
                                     "set " DMM_ORT_LIB_ENV " to another copy or run scripts/ort.sh",
                                     rt->version, path, v, missing);
        dlclose(dl);
        free(rt);
        return s;
    }
    *out = rt;
    return DMM_OK;
}

void dmm_ort_runtime_close(dmm_ort_runtime *rt) {
    if (rt == NULL) return;
    /* The library stays loaded: ONNX Runtime is not made to be unloaded (its process-wide environment,
     * thread pools and static objects outlive every OrtEnv), so dlclose would run its static destructors
     * under objects other code may still hold. A second open finds it loaded. */
    free(rt);
}

uint32_t dmm_ort_runtime_api_version(const dmm_ort_runtime *rt) { return rt != NULL ? rt->api_version : 0; }
const char *dmm_ort_runtime_version(const dmm_ort_runtime *rt) { return rt != NULL ? rt->version : ""; }
const void *dmm_ort_runtime_api(const dmm_ort_runtime *rt) { return rt != NULL ? rt->api : NULL; }

const dmm_ort_calls *dmm_ort_runtime_calls(const dmm_ort_runtime *rt) { return rt != NULL ? &rt->calls : NULL; }

dmm_status dmm__ort_status(const dmm_ort_runtime *rt, struct OrtStatus *st, dmm_status code, const char *what) {
    if (st == NULL) return DMM_OK;
    const char *msg = rt->calls.GetErrorMessage(st);
    int ortcode = rt->calls.GetErrorCode(st);
    dmm_status s = dmm_error_set(code, "%s: ONNX Runtime said (code %d): %s", what, ortcode,
                                 msg != NULL ? msg : "(no message)");
    rt->calls.ReleaseStatus(st);
    return s;
}

struct OrtStatus *dmm__ort_make_status(const dmm_ort_runtime *rt, int code, const char *msg) {
    return rt->calls.CreateStatus(code, msg != NULL ? msg : "dmm ort: failed");
}

dmm_status dmm_ort_session_options_use_dmm(dmm_ort_runtime *rt, struct OrtSessionOptions *options) {
    if (rt == NULL || options == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm ort: dmm_ort_session_options_use_dmm needs a runtime and session options");
    dmm_status s = dmm__ort_status(rt, rt->calls.AddSessionConfigEntry(options, DMM_ORT_KEY_USE_ENV_ALLOCATORS, "1"),
                                   DMM_ERR_INVALID_ARGUMENT, "dmm ort: setting " DMM_ORT_KEY_USE_ENV_ALLOCATORS "=1");
    if (s != DMM_OK) return s;
    return dmm__ort_status(rt, rt->calls.AddSessionConfigEntry(options, DMM_ORT_KEY_INITIALIZERS_ON_DEVICE_ALLOCATOR, "1"),
                           DMM_ERR_INVALID_ARGUMENT,
                           "dmm ort: setting " DMM_ORT_KEY_INITIALIZERS_ON_DEVICE_ALLOCATOR "=1");
}
