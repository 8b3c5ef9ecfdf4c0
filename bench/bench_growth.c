/* bench/bench_growth.c — growing by 1 GiB on the GPU (DESIGN §6, §7; issue 3, acceptance 3).
 *
 * In one run, interleaved per repetition so that drift hits all alike:
 *   arena     dmm_mechanism_commit of 1 GiB on a VA-only arena allocation (chunk limit 1 GiB, no
 *             handle cache: every commit creates, maps and grants access to a fresh handle)
 *   raw 1G    one raw 1 GiB handle: cuMemCreate + cuMemMap + cuMemSetAccess (libcuda called directly)
 *   raw 512   the same 1 GiB as 512 raw 2 MiB handles, create + map + set access each
 * and the teardown of each (decommit; unmap + release). Prints medians of ≥ 10 repetitions and the
 * ratios; the target is arena ≤ 1.2 × raw 1G. Nothing is asserted: the verdict is printed.
 *
 * usage: bench_growth [--reps N]   (default 15, at least 10)
 * Exit 77 with "skipped: no GPU (…)" where there is no CUDA driver or GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmm/dmm.h"

#ifndef DMM_HAVE_CUDA_H
int main(void) {
    printf("bench_growth: skipped: no GPU (built without CUDA headers)\n");
    return 77;
}
#else

#include <cuda.h>
#include <dlfcn.h>

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)
#define SMALL_HANDLES 512

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *t = malloc((size_t)n * sizeof *t);
    if (t == NULL) return 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_dbl);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

static double minimum(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < m) m = v[i];
    return m;
}

#define DMM_CHECK(call)                                                                             \
    do {                                                                                            \
        dmm_status s_ = (call);                                                                     \
        if (s_ != DMM_OK) {                                                                         \
            fprintf(stderr, "bench_growth: %s failed: %s\n", #call, dmm_last_error());              \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* ---- raw libcuda, for the references ---- */
static struct {
    CUresult (*ctxSetCurrent)(CUcontext);
    CUresult (*ctxGetCurrent)(CUcontext *);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*addrFree)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} raw;

static void raw_sym(void *lib, const char *name, void *out) {
    void *s = dlsym(lib, name);
    if (s == NULL) {
        fprintf(stderr, "bench_growth: libcuda.so.1 lacks %s\n", name);
        exit(1);
    }
    memcpy(out, &s, sizeof s);
}

#define RAW_CHECK(call)                                                                             \
    do {                                                                                            \
        CUresult r_ = (call);                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                   \
            fprintf(stderr, "bench_growth: %s failed with CUresult %d\n", #call, (int)r_);          \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static CUmemAllocationProp g_prop;
static CUmemAccessDesc g_access;

/* create + map + set access of `count` handles of `each` bytes at va; returns µs. */
static double raw_grow(CUdeviceptr va, size_t each, int count, CUmemGenericAllocationHandle *h) {
    double t0 = now_us();
    for (int i = 0; i < count; i++) {
        RAW_CHECK(raw.create(&h[i], each, &g_prop, 0));
        RAW_CHECK(raw.map(va + (size_t)i * each, each, 0, h[i], 0));
        RAW_CHECK(raw.setAccess(va + (size_t)i * each, each, &g_access, 1));
    }
    return now_us() - t0;
}

static double raw_shrink(CUdeviceptr va, size_t each, int count, const CUmemGenericAllocationHandle *h) {
    double t0 = now_us();
    for (int i = 0; i < count; i++) {
        RAW_CHECK(raw.unmap(va + (size_t)i * each, each));
        RAW_CHECK(raw.release(h[i]));
    }
    return now_us() - t0;
}

int main(int argc, char **argv) {
    int reps = 15;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_growth [--reps N]\n");
            return 2;
        }
    }
    if (reps < 10) reps = 10;

    dmm_driver *cuda = NULL;
    dmm_status s = dmm_cuda_driver_create(0, &cuda);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("bench_growth: skipped: no GPU (%s)\n", dmm_last_error());
        return 77;
    }
    DMM_CHECK(s);
    if (cuda->ops->reserve == NULL) {
        printf("bench_growth: skipped: device 0 has no VMM\n");
        dmm_driver_destroy(cuda);
        return 77;
    }
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    DMM_CHECK(dmm_cuda_device_query(0, &info));

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "bench_growth: dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    raw_sym(lib, "cuCtxSetCurrent", &raw.ctxSetCurrent);
    raw_sym(lib, "cuCtxGetCurrent", &raw.ctxGetCurrent);
    raw_sym(lib, "cuMemAddressReserve", &raw.reserve);
    raw_sym(lib, "cuMemAddressFree", &raw.addrFree);
    raw_sym(lib, "cuMemCreate", &raw.create);
    raw_sym(lib, "cuMemRelease", &raw.release);
    raw_sym(lib, "cuMemMap", &raw.map);
    raw_sym(lib, "cuMemUnmap", &raw.unmap);
    raw_sym(lib, "cuMemSetAccess", &raw.setAccess);
    memset(&g_prop, 0, sizeof g_prop);
    g_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    g_prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    g_prop.location.id = 0;
    g_access.location = g_prop.location;
    g_access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    /* the arena: 1 GiB chunks, no cache, its own 4 GiB of VA; one VA-only allocation of 1 GiB */
    dmm_arena_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.reserve_bytes = 4 * GIB;
    cfg.chunk_limit_bytes = GIB;
    cfg.cache_limit_bytes = 0;
    dmm_mechanism *arena = NULL;
    DMM_CHECK(dmm_arena_create(cuda, &cfg, &arena));
    dmm_allocation w;
    DMM_CHECK(dmm_mechanism_allocate_committed(arena, GIB, 0, NULL, 0, &w));

    /* the references' VA, reserved once (the primary context is current: the dmm driver set it) */
    CUcontext ctx = NULL;
    RAW_CHECK(raw.ctxGetCurrent(&ctx));
    if (ctx == NULL) {
        fprintf(stderr, "bench_growth: no current context after the dmm driver's calls\n");
        return 1;
    }
    CUdeviceptr va1 = 0, va2 = 0;
    RAW_CHECK(raw.reserve(&va1, GIB, GIB, 0, 0));
    RAW_CHECK(raw.reserve(&va2, GIB, 2 * MIB, 0, 0));
    CUmemGenericAllocationHandle big[1], small[SMALL_HANDLES];

    double *t_arena = calloc((size_t)reps, sizeof(double)), *t_arena_down = calloc((size_t)reps, sizeof(double));
    double *t_raw1 = calloc((size_t)reps, sizeof(double)), *t_raw1_down = calloc((size_t)reps, sizeof(double));
    double *t_raw512 = calloc((size_t)reps, sizeof(double)), *t_raw512_down = calloc((size_t)reps, sizeof(double));
    if (!t_arena || !t_arena_down || !t_raw1 || !t_raw1_down || !t_raw512 || !t_raw512_down) return 1;

    const int warm = 2;
    for (int r = -warm; r < reps; r++) {
        /* arena */
        uint64_t newly = 0;
        double t0 = now_us();
        DMM_CHECK(dmm_mechanism_commit(arena, &w, (dmm_range){0, GIB}, &newly));
        double t1 = now_us();
        if (newly != GIB) {
            fprintf(stderr, "bench_growth: the arena commit mapped %llu bytes, not 1 GiB\n", (unsigned long long)newly);
            return 1;
        }
        dmm_release_outcome o = dmm_mechanism_decommit(arena, &w, (dmm_range){0, GIB});
        double t2 = now_us();
        if (o.state != DMM_RELEASE_COMPLETE) {
            fprintf(stderr, "bench_growth: decommit was %s: %s\n", dmm_release_state_str(o.state), dmm_last_error());
            return 1;
        }
        /* raw, one 1 GiB handle */
        RAW_CHECK(raw.ctxSetCurrent(ctx));
        double g1 = raw_grow(va1, GIB, 1, big);
        double d1 = raw_shrink(va1, GIB, 1, big);
        /* raw, 512 handles of 2 MiB */
        double g2 = raw_grow(va2, 2 * MIB, SMALL_HANDLES, small);
        double d2 = raw_shrink(va2, 2 * MIB, SMALL_HANDLES, small);
        if (r >= 0) {
            t_arena[r] = t1 - t0;
            t_arena_down[r] = t2 - t1;
            t_raw1[r] = g1;
            t_raw1_down[r] = d1;
            t_raw512[r] = g2;
            t_raw512_down[r] = d2;
        }
    }

    dmm_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    DMM_CHECK(dmm_mechanism_stats(arena, &st));

    double ma = median(t_arena, reps), m1 = median(t_raw1, reps), m512 = median(t_raw512, reps);
    double mad = median(t_arena_down, reps), m1d = median(t_raw1_down, reps), m512d = median(t_raw512_down, reps);
    printf("bench_growth: %s (compute %d.%d), driver %d, granularity %llu bytes; %d repetitions after %d warm-up, "
           "interleaved\n",
           info.name, info.compute_major, info.compute_minor, info.driver_version,
           (unsigned long long)info.granularity, reps, warm);
    printf("%-44s %12s %12s %14s\n", "grow by 1 GiB", "median us", "min us", "median teardown");
    printf("%-44s %12.1f %12.1f %12.1f us\n", "arena commit (1 chunk of 1 GiB)", ma, minimum(t_arena, reps), mad);
    printf("%-44s %12.1f %12.1f %12.1f us\n", "raw: 1 handle of 1 GiB (create+map+access)", m1, minimum(t_raw1, reps),
           m1d);
    printf("%-44s %12.1f %12.1f %12.1f us\n", "raw: 512 handles of 2 MiB", m512, minimum(t_raw512, reps), m512d);
    printf("ratio arena / raw 1 GiB handle   = %.3f  (target <= 1.2: %s)\n", ma / m1, ma / m1 <= 1.2 ? "PASS" : "MISS");
    printf("ratio 512 x 2 MiB / raw 1 GiB    = %.1f\n", m512 / m1);
    printf("ratio arena / 512 x 2 MiB        = %.4f\n", ma / m512);
    printf("arena driver calls over the run: create %lld, map %lld, set_access %lld, unmap %lld, release %lld\n",
           (long long)st.driver_create, (long long)st.driver_map, (long long)st.driver_set_access,
           (long long)st.driver_unmap, (long long)st.driver_release);

    RAW_CHECK(raw.addrFree(va1, GIB));
    RAW_CHECK(raw.addrFree(va2, GIB));
    dmm_release_outcome o = dmm_mechanism_release(arena, &w);
    if (o.state != DMM_RELEASE_COMPLETE) return 1;
    DMM_CHECK(dmm_mechanism_destroy(arena));
    dmm_driver_destroy(cuda);
    free(t_arena);
    free(t_arena_down);
    free(t_raw1);
    free(t_raw1_down);
    free(t_raw512);
    free(t_raw512_down);
    return 0;
}

#endif /* DMM_HAVE_CUDA_H */
