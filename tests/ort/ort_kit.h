/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/ort_kit.h — what the ORT tests share: the real runtime or SKIP (exit 77), an environment,
 * sessions of the generated model with and without dmm, Runs on deterministic inputs, and the host
 * driver and governor under them. Header-only, static.
 *
 * Every helper fails the test (cmocka) on an unexpected ONNX Runtime error, naming the call and ONNX
 * Runtime's sentence. */
#ifndef DMM_ORT_KIT_H
#define DMM_ORT_KIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../adapters/ort/ort_internal.h"
#include "onnx_model.h"
#include "testkit.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
static const dmm_device_id KIT_HOST = {DMM_TIER_HOST, 0};

/* The runtime: $DMM_ORT_LIB, else the build's default (.ort/). Skipped, never passed, when absent. */
static inline dmm_ort_runtime *kit_ort_open_or_skip(const char *test) {
    const char *path = getenv(DMM_ORT_LIB_ENV);
    if (path == NULL || path[0] == '\0') path = DMM_ORT_LIB_DEFAULT;
    dmm_ort_runtime *rt = NULL;
    dmm_status s = dmm_ort_runtime_open(path, &rt);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("%s: skipped: %s\n", test, dmm_last_error());
        exit(DMM_TEST_SKIP);
    }
    if (s != DMM_OK) {
        fprintf(stderr, "%s: dmm_ort_runtime_open failed: %s: %s\n", test, dmm_status_str(s), dmm_last_error());
        exit(1);
    }
    return rt;
}

/* Fails the test when st is an error (and releases it). */
#define ORT_OK(rt, call)                                                                                       \
    do {                                                                                                       \
        struct OrtStatus *st_ = (call);                                                                        \
        if (st_ != NULL) {                                                                                     \
            const char *m_ = (rt)->calls.GetErrorMessage(st_);                                                        \
            char copy_[1024];                                                                                  \
            snprintf(copy_, sizeof copy_, "%s", m_ != NULL ? m_ : "?");                                        \
            (rt)->calls.ReleaseStatus(st_);                                                                          \
            fail_msg("%s failed: %s", #call, copy_);                                                           \
        }                                                                                                      \
    } while (0)

/* A failed call's status `st` (released here): ONNX Runtime's sentence into err, or, where err is NULL,
 * the test fails naming `what`. */
static inline void kit_ort_error(dmm_ort_runtime *rt, struct OrtStatus *st, const char *what, char *err, size_t cap) {
    const char *m = rt->calls.GetErrorMessage(st);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", m != NULL ? m : "?");
    rt->calls.ReleaseStatus(st);
    if (err == NULL) fail_msg("%s failed: %s", what, copy);
    snprintf(err, cap, "%s", copy);
}

static inline struct OrtEnv *kit_env(dmm_ort_runtime *rt) {
    struct OrtEnv *env = NULL;
    ORT_OK(rt, rt->calls.CreateEnv(DMM_ORT_LOG_ERROR, "dmm-test", &env));
    return env;
}

/* A host driver of 64 KiB granules (so the tests' small models are charged closely). */
static inline dmm_driver *kit_host(void) {
    dmm_host_driver_config hc = {sizeof hc, 64 * KIB};
    dmm_driver *d = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(&hc, &d));
    return d;
}

static inline dmm_ort_allocator *kit_alloc(dmm_ort_runtime *rt, dmm_driver *d, dmm_governor *g, const char *name) {
    dmm_ort_config c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.name = name;
    c.va_bytes = 1ull << 30;
    dmm_ort_allocator *a = NULL;
    DMM_OK_OR_FAIL(dmm_ort_allocator_create(rt, d, g, &c, &a));
    return a;
}

/* One test's world: the runtime, a host driver, a governor and one allocator registered on an
 * environment. kit_world_drop_allocator ends the allocator's part (unregister, the environment, destroy);
 * kit_world_close ends the rest and checks that the driver holds nothing. */
typedef struct kit_world {
    dmm_ort_runtime *rt;
    dmm_driver *host;
    dmm_governor *g;
    dmm_ort_allocator *a; /* NULL once dropped */
    struct OrtEnv *env;   /* the environment `a` is registered on; NULL once dropped */
} kit_world;

static inline kit_world kit_world_open(const char *test, const char *name) {
    kit_world w;
    memset(&w, 0, sizeof w);
    w.rt = kit_ort_open_or_skip(test);
    w.host = kit_host();
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &w.g));
    w.a = kit_alloc(w.rt, w.host, w.g, name);
    w.env = kit_env(w.rt);
    DMM_OK_OR_FAIL(dmm_ort_allocator_register(w.a, w.env));
    return w;
}

static inline void kit_world_drop_allocator(kit_world *w) {
    DMM_OK_OR_FAIL(dmm_ort_allocator_unregister(w->a, w->env));
    w->rt->calls.ReleaseEnv(w->env);
    w->env = NULL;
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(w->a));
    w->a = NULL;
}

static inline void kit_world_close(kit_world *w) {
    if (w->a != NULL) kit_world_drop_allocator(w);
    DMM_OK_OR_FAIL(dmm_governor_destroy(w->g));
    dmm_test_census_zero(w->host);
    dmm_driver_destroy(w->host);
    dmm_ort_runtime_close(w->rt);
    memset(w, 0, sizeof *w);
}

static inline struct OrtSessionOptions *kit_options(dmm_ort_runtime *rt, bool use_dmm) {
    struct OrtSessionOptions *so = NULL;
    ORT_OK(rt, rt->calls.CreateSessionOptions(&so));
    ORT_OK(rt, rt->calls.SetIntraOpNumThreads(so, 1));
    if (use_dmm) DMM_OK_OR_FAIL(dmm_ort_session_options_use_dmm(rt, so));
    return so;
}

/* A session of model `d`; NULL with *err (ONNX Runtime's sentence) when creation fails and err != NULL. */
static inline struct OrtSession *kit_session(dmm_ort_runtime *rt, struct OrtEnv *env, const dmm_onnx_model_desc *d,
                                             bool use_dmm, char *err, size_t cap) {
    uint8_t *model = NULL;
    size_t len = 0;
    char e[256];
    if (dmm_onnx_model_write(d, &model, &len, e, sizeof e) != 0) fail_msg("%s", e);
    struct OrtSessionOptions *so = kit_options(rt, use_dmm);
    struct OrtSession *s = NULL;
    struct OrtStatus *st = rt->calls.CreateSessionFromArray(env, model, len, so, &s);
    rt->calls.ReleaseSessionOptions(so);
    free(model);
    if (st != NULL) {
        kit_ort_error(rt, st, "CreateSessionFromArray", err, cap);
        return NULL;
    }
    return s;
}

/* Input k of a Run with `seed`. */
static inline float kit_input(uint64_t seed, uint64_t k) { return dmm_onnx_model_weight(seed ^ 0x5eed, 99, k) * 8.0f; }

/* Runs `s` on [batch × in] inputs of `seed`; the output (batch × hidden floats) into y. Returns NULL on
 * success, or ONNX Runtime's error sentence copied into err (when err != NULL; else fails the test). */
static inline int kit_run(dmm_ort_runtime *rt, struct OrtSession *s, const dmm_onnx_model_desc *d, uint32_t batch,
                          uint64_t seed, float *y, char *err, size_t cap) {
    struct OrtMemoryInfo *mi = NULL;
    ORT_OK(rt, rt->calls.CreateCpuMemoryInfo(DMM_ORT_DEVICE_ALLOCATOR, DMM_ORT_MEM_DEFAULT, &mi));
    size_t n = (size_t)batch * d->in;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t k = 0; k < n; k++) x[k] = kit_input(seed, k);
    int64_t shape[2] = {batch, d->in};
    struct OrtValue *in = NULL, *out = NULL;
    ORT_OK(rt, rt->calls.CreateTensorWithDataAsOrtValue(mi, x, n * sizeof *x, shape, 2, DMM_ORT_TENSOR_FLOAT, &in));
    const char *in_names[] = {"X"}, *out_names[] = {"Y"};
    const struct OrtValue *ins[] = {in};
    struct OrtStatus *st = rt->calls.Run(s, NULL, in_names, ins, 1, out_names, 1, &out);
    int rc = 0;
    if (st != NULL) {
        kit_ort_error(rt, st, "Run", err, cap);
        rc = -1;
    } else {
        struct OrtTensorTypeAndShapeInfo *ti = NULL;
        ORT_OK(rt, rt->calls.GetTensorTypeAndShape(out, &ti));
        size_t count = 0;
        ORT_OK(rt, rt->calls.GetTensorShapeElementCount(ti, &count));
        rt->calls.ReleaseTensorTypeAndShapeInfo(ti);
        assert_int_equal(count, (size_t)batch * d->hidden);
        void *data = NULL;
        ORT_OK(rt, rt->calls.GetTensorMutableData(out, &data));
        if (y != NULL) memcpy(y, data, count * sizeof(float));
        rt->calls.ReleaseValue(out);
    }
    rt->calls.ReleaseValue(in);
    free(x);
    rt->calls.ReleaseMemoryInfo(mi);
    return rc;
}

static inline dmm_ort_stats kit_stats(dmm_ort_allocator *a) {
    dmm_ort_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    DMM_OK_OR_FAIL(dmm_ort_allocator_stats(a, &st));
    return st;
}

#endif
