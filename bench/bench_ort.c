/* SPDX-License-Identifier: Apache-2.0 */
/* bench/bench_ort.c — ONNX Runtime on dmm (DESIGN §7: the adapter's Alloc+Free ≤ 0.5 × ONNX Runtime's
 * own CPU allocator, same run).
 *
 *   1. per size: a cached Alloc+Free pair through the adapter's OrtAllocator (called from C, as ONNX
 *      Runtime calls it) vs the same pair through ONNX Runtime's own CPU allocator of a session created
 *      without dmm (CreateAllocator on it, called through AllocatorAlloc / AllocatorFree: ONNX Runtime's
 *      API, as a runtime would), medians over batches, and their ratio;
 *   2. a Run of the small model (256 → 512 → 512, batch 8) in a session on dmm (use_env_allocators) and
 *      in one on ONNX Runtime's own allocator, medians and ratio.
 * Nothing is asserted. ONNX Runtime: $DMM_ORT_LIB, else the build's .ort/ default (scripts/ort.sh).
 *
 * usage: bench_ort [--samples N] [--batch N]   (defaults 101 batches of 2000 pairs; 101 Runs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmm_ort.h"
#include "onnx_model.h"

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static int die(dmm_ort_runtime *rt, struct OrtStatus *st, const char *what) {
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    if (st == NULL) return 0;
    fprintf(stderr, "bench_ort: %s: %s\n", what, api->GetErrorMessage(st));
    exit(1);
}

static struct OrtSession *session(dmm_ort_runtime *rt, struct OrtEnv *env, const uint8_t *m, size_t len, int dmm) {
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    struct OrtSessionOptions *so = NULL;
    struct OrtSession *s = NULL;
    die(rt, api->CreateSessionOptions(&so), "CreateSessionOptions");
    die(rt, api->SetIntraOpNumThreads(so, 1), "SetIntraOpNumThreads");
    if (dmm && dmm_ort_session_options_use_dmm(rt, so) != DMM_OK) {
        fprintf(stderr, "bench_ort: %s\n", dmm_last_error());
        exit(1);
    }
    die(rt, api->CreateSessionFromArray(env, m, len, so, &s), "CreateSessionFromArray");
    api->ReleaseSessionOptions(so);
    return s;
}

static double run_ns(dmm_ort_runtime *rt, struct OrtSession *s, struct OrtValue *in, int samples) {
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    const char *in_names[] = {"X"}, *out_names[] = {"Y"};
    const struct OrtValue *ins[] = {in};
    double *v = malloc((size_t)samples * sizeof *v);
    for (int k = -5; k < samples; k++) {
        struct OrtValue *out = NULL;
        double t0 = now_ns();
        die(rt, api->Run(s, NULL, in_names, ins, 1, out_names, 1, &out), "Run");
        double t1 = now_ns();
        api->ReleaseValue(out);
        if (k >= 0) v[k] = t1 - t0;
    }
    double m = median(v, samples);
    free(v);
    return m;
}

int main(int argc, char **argv) {
    int samples = 101, batch = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0) samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0) batch = atoi(argv[i + 1]);
    }
    if (samples < 1 || batch < 1) {
        fprintf(stderr, "bench_ort: --samples and --batch take positive counts\n");
        return 2;
    }
    const char *path = getenv(DMM_ORT_LIB_ENV);
    dmm_ort_runtime *rt = NULL;
    if (dmm_ort_runtime_open(path != NULL && path[0] ? path : DMM_ORT_LIB_DEFAULT, &rt) != DMM_OK) {
        fprintf(stderr, "bench_ort: %s\n", dmm_last_error());
        return 1;
    }
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    dmm_host_driver_config hc = {sizeof hc, 64 << 10};
    dmm_driver *host = NULL;
    dmm_governor *g = NULL;
    dmm_ort_allocator *a = NULL;
    dmm_ort_config c = {.size = sizeof c, .name = "bench"};
    if (dmm_host_driver_create(&hc, &host) != DMM_OK || dmm_governor_create(NULL, &g) != DMM_OK ||
        dmm_ort_allocator_create(rt, host, g, &c, &a) != DMM_OK) {
        fprintf(stderr, "bench_ort: %s\n", dmm_last_error());
        return 1;
    }
    struct OrtEnv *env = NULL;
    die(rt, api->CreateEnv(DMM_ORT_LOG_ERROR, "bench", &env), "CreateEnv");
    dmm_onnx_model_desc d = {256, 512, 2, 8, 1};
    uint8_t *m = NULL;
    size_t len = 0;
    char err[256];
    if (dmm_onnx_model_write(&d, &m, &len, err, sizeof err) != 0) return 1;
    struct OrtSession *own = session(rt, env, m, len, 0);
    struct OrtMemoryInfo *cpu = NULL;
    die(rt, api->CreateCpuMemoryInfo(DMM_ORT_ARENA_ALLOCATOR, DMM_ORT_MEM_DEFAULT, &cpu), "CreateCpuMemoryInfo");
    struct OrtAllocator *ort = NULL;
    die(rt, api->CreateAllocator(own, cpu, &ort), "CreateAllocator on a session without dmm");
    struct OrtAllocator *mine = dmm_ort_allocator_ort(a);
    printf("bench_ort: ONNX Runtime %s (API %u); medians of %d batches of %d pairs, cached\n",
           dmm_ort_runtime_version(rt), dmm_ort_runtime_api_version(rt), samples, batch);
    printf("%10s %14s %16s %8s\n", "size", "dmm (ns/pair)", "ORT CPU (ns/pair)", "ratio");
    const size_t sizes[] = {64, 512, 4096, 65536, 1 << 20};
    double *v = malloc((size_t)samples * sizeof *v), *w = malloc((size_t)samples * sizeof *w);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        for (int k = -3; k < samples; k++) { /* interleaved: both see the same machine state */
            double t0 = now_ns();
            for (int b = 0; b < batch; b++) {
                void *p = mine->Alloc(mine, n);
                mine->Free(mine, p);
            }
            double t1 = now_ns();
            for (int b = 0; b < batch; b++) {
                void *p = NULL;
                (void)api->AllocatorAlloc(ort, n, &p);
                (void)api->AllocatorFree(ort, p);
            }
            double t2 = now_ns();
            if (k >= 0) {
                v[k] = (t1 - t0) / batch;
                w[k] = (t2 - t1) / batch;
            }
        }
        double md = median(v, samples), mo = median(w, samples);
        printf("%10zu %14.1f %16.1f %8.2f\n", n, md, mo, md / mo);
    }
    free(v);
    free(w);
    /* a Run with each allocator */
    if (dmm_ort_allocator_register(a, env) != DMM_OK) {
        fprintf(stderr, "bench_ort: %s\n", dmm_last_error());
        return 1;
    }
    struct OrtSession *on_dmm = session(rt, env, m, len, 1);
    size_t nx = (size_t)d.batch * d.in;
    float *x = malloc(nx * sizeof *x);
    for (size_t k = 0; k < nx; k++) x[k] = dmm_onnx_model_weight(3, 9, k);
    int64_t shape[2] = {d.batch, d.in};
    struct OrtValue *in = NULL;
    die(rt, api->CreateTensorWithDataAsOrtValue(cpu, x, nx * sizeof *x, shape, 2, DMM_ORT_TENSOR_FLOAT, &in), "input");
    int runs = samples;
    double r_own = run_ns(rt, own, in, runs), r_dmm = run_ns(rt, on_dmm, in, runs);
    printf("Run of the small model (batch 8, 256 -> 512 -> 512), median of %d: dmm %.1f us, ORT's own %.1f us, "
           "ratio %.2f\n", runs, r_dmm / 1e3, r_own / 1e3, r_dmm / r_own);
    api->ReleaseValue(in);
    free(x);
    api->ReleaseSession(on_dmm);
    api->ReleaseAllocator(ort);
    api->ReleaseMemoryInfo(cpu);
    api->ReleaseSession(own);
    (void)dmm_ort_allocator_unregister(a, env);
    api->ReleaseEnv(env);
    free(m);
    if (dmm_ort_allocator_destroy(a) != DMM_OK) fprintf(stderr, "bench_ort: %s\n", dmm_last_error());
    dmm_governor_destroy(g);
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
    return 0;
}
