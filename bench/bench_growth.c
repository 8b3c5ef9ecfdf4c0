/* SPDX-License-Identifier: Apache-2.0 */
/* bench/bench_growth.c — growing by 1 GiB on the GPU (DESIGN §6, §7; issue 3, acceptance 3).
 *
 * In one run, in interleaved blocks (see main: warm and cold conditions):
 *   arena     dmm_mechanism_commit of 1 GiB on a VA-only arena allocation (chunk limit 1 GiB, no
 *             handle cache: every commit creates, maps and grants access to a fresh handle)
 *   raw 1G    one raw 1 GiB handle: cuMemCreate + cuMemMap + cuMemSetAccess (libcuda called directly)
 *   raw 512   the same 1 GiB as 512 raw 2 MiB handles, create + map + set access each
 * and the teardown of each (decommit; unmap + release). Prints medians of ≥ 10 repetitions and the
 * ratios; the target is arena ≤ 1.2 × raw 1G. Nothing is asserted: the verdict is printed.
 *
 * What a create costs depends on what the driver did just before (it clears the memory it hands out;
 * on the H200 a 1 GiB cuMemCreate took ~40 us right after a release of 1 GiB and ~350 us after 5 ms
 * of quiet), so every case is measured in blocks after its own teardown, in two conditions. The
 * arena runs over a timing shim, so its own bookkeeping (commit time minus time inside the driver's
 * calls) is printed beside; diagnostics: the dmm driver's ops alone, a 1 GiB-aligned arena
 * allocation, a raw handle at the arena allocation's offset from a 1 GiB boundary.
 *
 * usage: bench_growth [--reps N] [--json FILE]   (samples per case and condition; default 31, at least 10)
 * Exit 77 with "skipped: no GPU (…)" where there is no CUDA driver or GPU (--json then writes a
 * result with no metrics). --json: growth.<warm|cold>.<case>.grow_us / teardown_us medians with
 * their MAD, the raw 1 GiB handle as the reference (docs/benchmarks.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmm/dmm.h"
#include "driver/cuda_decl.h" /* dmm's own declarations of the driver API: no toolkit needed */
#include "libcuda.h"
#include "results.h"

/* Parses the arguments; 0, or 2 after the usage line. */
static int parse_args(int argc, char **argv, int *reps, const char **json) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) *reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) *json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_growth [--reps N] [--json FILE]\n");
            return 2;
        }
    }
    return 0;
}

/* A skip: the JSON (when asked) has no metrics; exit 77. */
static int skipped(const char *json) {
    return bench_results_finish(bench_results_create("bench_growth"), json) == 0 ? 77 : 1;
}

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)
#define SMALL_HANDLES 512

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
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
    dmm_cuCtxSetCurrent_fn *ctxSetCurrent;
    dmm_cuCtxGetCurrent_fn *ctxGetCurrent;
    dmm_cuMemAddressReserve_fn *reserve;
    dmm_cuMemAddressFree_fn *addrFree;
    dmm_cuMemCreate_fn *create;
    dmm_cuMemRelease_fn *release;
    dmm_cuMemMap_fn *map;
    dmm_cuMemUnmap_fn *unmap;
    dmm_cuMemSetAccess_fn *setAccess;
} raw;

#define RAW_CHECK(call) BENCH_CU("bench_growth", call)

static dmm_cu_mem_allocation_prop g_prop;
static dmm_cu_mem_access_desc g_access;

/* Per-call times of the last raw_grow of one handle (µs). */
static double g_t_create, g_t_map, g_t_access;

/* create + map + set access of `count` handles of `each` bytes at va; returns µs. */
static double raw_grow(dmm_cu_deviceptr va, size_t each, int count, dmm_cu_mem_handle *h) {
    double t0 = now_us();
    for (int i = 0; i < count; i++) {
        double a = now_us();
        RAW_CHECK(raw.create(&h[i], each, &g_prop, 0));
        double b = now_us();
        RAW_CHECK(raw.map(va + (size_t)i * each, each, 0, h[i], 0));
        double c = now_us();
        RAW_CHECK(raw.setAccess(va + (size_t)i * each, each, &g_access, 1));
        double d = now_us();
        g_t_create = b - a;
        g_t_map = c - b;
        g_t_access = d - c;
    }
    return now_us() - t0;
}

static double raw_shrink(dmm_cu_deviceptr va, size_t each, int count, const dmm_cu_mem_handle *h) {
    double t0 = now_us();
    for (int i = 0; i < count; i++) {
        RAW_CHECK(raw.unmap(va + (size_t)i * each, each));
        RAW_CHECK(raw.release(h[i]));
    }
    return now_us() - t0;
}

/* ---- a timing shim between the arena and the cuda driver: how much of a commit is CUDA's ---- */

typedef struct timing_driver {
    dmm_driver base;
    dmm_driver *inner;
    double in_driver_us; /* time spent inside the inner driver's ops since the last reset */
} timing_driver;

#define TD(d) ((timing_driver *)(d))
#define TIMED(call)                                                                                 \
    do {                                                                                            \
        double t_ = now_us();                                                                       \
        dmm_status s_ = (call);                                                                     \
        TD(d)->in_driver_us += now_us() - t_;                                                       \
        return s_;                                                                                  \
    } while (0)

static dmm_status td_granularity(dmm_driver *d, size_t *b) { return TD(d)->inner->ops->granularity(TD(d)->inner, b); }
static dmm_status td_reserve(dmm_driver *d, size_t b, size_t al, uintptr_t *va) {
    return TD(d)->inner->ops->reserve(TD(d)->inner, b, al, va);
}
static dmm_status td_unreserve(dmm_driver *d, uintptr_t va, size_t b) {
    return TD(d)->inner->ops->unreserve(TD(d)->inner, va, b);
}
static dmm_status td_create(dmm_driver *d, size_t b, dmm_phys *h) { TIMED(TD(d)->inner->ops->create(TD(d)->inner, b, h)); }
static dmm_status td_release(dmm_driver *d, dmm_phys h) { TIMED(TD(d)->inner->ops->release(TD(d)->inner, h)); }
static dmm_status td_map(dmm_driver *d, uintptr_t va, size_t b, dmm_phys h) {
    TIMED(TD(d)->inner->ops->map(TD(d)->inner, va, b, h));
}
static dmm_status td_unmap(dmm_driver *d, uintptr_t va, size_t b) { TIMED(TD(d)->inner->ops->unmap(TD(d)->inner, va, b)); }
static dmm_status td_set_access(dmm_driver *d, uintptr_t va, size_t b, dmm_access a) {
    TIMED(TD(d)->inner->ops->set_access(TD(d)->inner, va, b, a));
}
static dmm_status td_census(dmm_driver *d, dmm_driver_census *c) { return TD(d)->inner->ops->census(TD(d)->inner, c); }
static void td_destroy(dmm_driver *d) { (void)d; }

static const dmm_driver_ops timing_ops = {
    .size = sizeof(dmm_driver_ops),
    .name = "timing",
    .granularity = td_granularity,
    .reserve = td_reserve,
    .unreserve = td_unreserve,
    .create = td_create,
    .release = td_release,
    .map = td_map,
    .unmap = td_unmap,
    .set_access = td_set_access,
    .census = td_census,
    .destroy = td_destroy,
};

static void settle(void) {
    /* Between cases: a 1 GiB release or 512 releases leave the driver busy for a while, and
     * whichever case came next paid for it (seen on the H200: medians moved by 50 %). */
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* ---- the cases, run in a rotated order per repetition ---- */

enum { C_ARENA, C_ARENA_ALIGNED, C_DRIVER, C_RAW1, C_RAW1_MISALIGNED, C_RAW512, C_COUNT };
static const char *case_id[C_COUNT] = {"arena", "arena_aligned", "dmm_driver", "raw_1g", "raw_1g_misaligned",
                                       "raw_512x2m"};
static const char *case_name[C_COUNT] = {
    "arena commit (1 chunk of 1 GiB)",
    "  arena, allocation aligned to 1 GiB",
    "  dmm cuda driver ops, 1 handle of 1 GiB",
    "raw: 1 handle of 1 GiB (create+map+access)",
    "  raw 1 GiB at a VA not 1 GiB-aligned",
    "raw: 512 handles of 2 MiB",
};

typedef struct bench_ctx {
    dmm_mechanism *arena;
    dmm_allocation w, w_aligned;
    bool have_aligned;
    dmm_cu_context ctx;
    dmm_cu_deviceptr va1, va3, va2; /* 1 GiB-aligned; at the arena's offset; for the 512 handles */
    uintptr_t va4;             /* the dmm driver's own reservation, 1 GiB-aligned */
    dmm_cu_mem_handle big[1], small[SMALL_HANDLES];
    double split[C_COUNT][3]; /* create, map, access of the last raw single-handle grow */
    timing_driver *td;
    double in_driver;         /* of the last arena grow: µs inside the driver's ops */
} bench_ctx;

static void arena_case(bench_ctx *b, const dmm_allocation *w, double *grow, double *shrink) {
    dmm_mechanism *arena = b->arena;
    uint64_t newly = 0;
    b->td->in_driver_us = 0;
    double t0 = now_us();
    DMM_CHECK(dmm_mechanism_commit(arena, w, (dmm_range){0, GIB}, &newly));
    double t1 = now_us();
    if (newly != GIB) {
        fprintf(stderr, "bench_growth: the arena commit mapped %llu bytes, not 1 GiB\n", (unsigned long long)newly);
        exit(1);
    }
    b->in_driver = b->td->in_driver_us;
    dmm_release_outcome o = dmm_mechanism_decommit(arena, w, (dmm_range){0, GIB});
    double t2 = now_us();
    if (o.state != DMM_RELEASE_COMPLETE) {
        fprintf(stderr, "bench_growth: decommit was %s: %s\n", dmm_release_state_str(o.state), dmm_last_error());
        exit(1);
    }
    *grow = t1 - t0;
    *shrink = t2 - t1;
}

static bool run_case(bench_ctx *b, int k, double *grow, double *shrink) {
    switch (k) {
    case C_ARENA: arena_case(b, &b->w, grow, shrink); return true;
    case C_ARENA_ALIGNED:
        if (!b->have_aligned) return false;
        arena_case(b, &b->w_aligned, grow, shrink);
        return true;
    case C_RAW1:
    case C_RAW1_MISALIGNED: {
        dmm_cu_deviceptr va = k == C_RAW1 ? b->va1 : b->va3;
        RAW_CHECK(raw.ctxSetCurrent(b->ctx));
        *grow = raw_grow(va, GIB, 1, b->big);
        b->split[k][0] = g_t_create;
        b->split[k][1] = g_t_map;
        b->split[k][2] = g_t_access;
        *shrink = raw_shrink(va, GIB, 1, b->big);
        return true;
    }
    case C_DRIVER: {
        dmm_driver *d = b->td->inner;
        dmm_phys h = 0;
        double t0 = now_us();
        DMM_CHECK(d->ops->create(d, GIB, &h));
        DMM_CHECK(d->ops->map(d, b->va4, GIB, h));
        DMM_CHECK(d->ops->set_access(d, b->va4, GIB, DMM_ACCESS_READ_WRITE));
        double t1 = now_us();
        DMM_CHECK(d->ops->unmap(d, b->va4, GIB));
        DMM_CHECK(d->ops->release(d, h));
        *grow = t1 - t0;
        *shrink = now_us() - t1;
        return true;
    }
    case C_RAW512:
        RAW_CHECK(raw.ctxSetCurrent(b->ctx));
        *grow = raw_grow(b->va2, 2 * MIB, SMALL_HANDLES, b->small);
        *shrink = raw_shrink(b->va2, 2 * MIB, SMALL_HANDLES, b->small);
        return true;
    }
    return false;
}

int main(int argc, char **argv) {
    int reps = 31;
    const char *json = NULL;
    if (parse_args(argc, argv, &reps, &json) != 0) return 2;
    if (reps < 10) reps = 10;

    dmm_driver *cuda = NULL;
    dmm_status s = dmm_cuda_driver_create(0, &cuda);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("bench_growth: skipped: no GPU (%s)\n", dmm_last_error());
        return skipped(json);
    }
    DMM_CHECK(s);
    if (cuda->ops->reserve == NULL) {
        printf("bench_growth: skipped: device 0 has no VMM\n");
        dmm_driver_destroy(cuda);
        return skipped(json);
    }
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    DMM_CHECK(dmm_cuda_device_query(0, &info));

    const bench_cu_symbol syms[] = {
        {"cuCtxSetCurrent", &raw.ctxSetCurrent}, {"cuCtxGetCurrent", &raw.ctxGetCurrent},
        {"cuMemAddressReserve", &raw.reserve},   {"cuMemAddressFree", &raw.addrFree},
        {"cuMemCreate", &raw.create},            {"cuMemRelease", &raw.release},
        {"cuMemMap", &raw.map},                  {"cuMemUnmap", &raw.unmap},
        {"cuMemSetAccess", &raw.setAccess},
    };
    void *lib = bench_libcuda_open("bench_growth", syms, sizeof syms / sizeof syms[0]);
    if (lib == NULL) return 1;
    bench_cu_device_memory(0, &g_prop, &g_access);

    /* the arena: 1 GiB chunks, no cache, its own 8 GiB of VA; VA-only allocations of 1 GiB: one
     * where the arena places it by default, one aligned to 1 GiB (a diagnostic) */
    bench_ctx B;
    memset(&B, 0, sizeof B);
    dmm_arena_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.reserve_bytes = 8 * GIB;
    cfg.chunk_limit_bytes = GIB;
    cfg.cache_limit_bytes = 0;
    timing_driver td = {{.ops = &timing_ops, .device = cuda->device}, cuda, 0};
    B.td = &td;
    DMM_CHECK(dmm_arena_create(&td.base, &cfg, &B.arena));
    DMM_CHECK(dmm_mechanism_allocate_committed(B.arena, GIB, 0, NULL, 0, &B.w));
    B.have_aligned = dmm_mechanism_allocate_committed(B.arena, GIB, GIB, NULL, 0, &B.w_aligned) == DMM_OK;
    if (!B.have_aligned) printf("(no 1 GiB-aligned arena allocation: %s)\n", dmm_last_error());
    uintptr_t rva = 0;
    uint64_t rbytes = 0;
    DMM_CHECK(dmm_arena_reservation(B.arena, &rva, &rbytes));

    /* the references' VA, reserved once (the primary context is current: the dmm driver set it) */
    RAW_CHECK(raw.ctxGetCurrent(&B.ctx));
    if (B.ctx == NULL) {
        fprintf(stderr, "bench_growth: no current context after the dmm driver's calls\n");
        return 1;
    }
    dmm_cu_deviceptr va3base = 0;
    RAW_CHECK(raw.reserve(&B.va1, GIB, GIB, 0, 0));
    RAW_CHECK(raw.reserve(&B.va2, GIB, 2 * MIB, 0, 0));
    RAW_CHECK(raw.reserve(&va3base, 2 * GIB, GIB, 0, 0));
    /* the arena allocation's offset from a 1 GiB boundary, or 32 MiB where that is 0 */
    const size_t mis = (uintptr_t)B.w.ptr % GIB != 0 ? (uintptr_t)B.w.ptr % GIB : 32 * MIB;
    B.va3 = va3base + mis;
    DMM_CHECK(cuda->ops->reserve(cuda, GIB, GIB, &B.va4));

    /* Two conditions, each case measured in blocks (one untimed grow+shrink, then `per` timed ones
     * back to back), the blocks of all cases interleaved over `rounds` rounds:
     *   warm  each grow follows the release of an equal amount (steady growth and shrink);
     *   cold  each grow comes 5 ms after the last driver call (a growth after a quiet spell).
     * The state the driver was left in decides much of a create's cost (it clears memory), so every
     * case must be measured after the same predecessor: its own teardown. */
    const int rounds = 5, per = (reps + rounds - 1) / rounds, n = rounds * per;
    double *grow[2][C_COUNT], *shrink[2][C_COUNT], *inside[2][C_COUNT], *split[2][C_COUNT][3];
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < C_COUNT; k++) {
            grow[c][k] = calloc((size_t)n, sizeof(double));
            shrink[c][k] = calloc((size_t)n, sizeof(double));
            inside[c][k] = calloc((size_t)n, sizeof(double));
            for (int q = 0; q < 3; q++) split[c][k][q] = calloc((size_t)n, sizeof(double));
            if (!grow[c][k] || !shrink[c][k] || !inside[c][k] || !split[c][k][0] || !split[c][k][1] ||
                !split[c][k][2])
                return 1;
        }
    int got[2][C_COUNT] = {{0}};
    for (int round = 0; round < rounds; round++)
        for (int c = 0; c < 2; c++)
            for (int j = 0; j < C_COUNT; j++) {
                int k = (j + round) % C_COUNT;
                double g = 0, d = 0;
                if (!run_case(&B, k, &g, &d)) continue; /* the block's untimed first grow+shrink */
                for (int i = 0; i < per; i++) {
                    if (c == 1) settle();
                    run_case(&B, k, &g, &d);
                    int at = got[c][k]++;
                    grow[c][k][at] = g;
                    shrink[c][k][at] = d;
                    inside[c][k][at] = B.in_driver;
                    for (int q = 0; q < 3; q++) split[c][k][q][at] = B.split[k][q];
                }
            }

    dmm_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    DMM_CHECK(dmm_mechanism_stats(B.arena, &st));

    printf("bench_growth: %s (compute %d.%d), driver %d, granularity %llu bytes; %d samples per case and "
           "condition (%d rounds of %d, blocks interleaved)\n",
           info.name, info.compute_major, info.compute_minor, info.driver_version,
           (unsigned long long)info.granularity, n, rounds, per);
    printf("arena reservation at 0x%llx (%% 1 GiB = %llu MiB); default allocation at offset %llu MiB (%% 1 GiB = %llu "
           "MiB)\n",
           (unsigned long long)rva, (unsigned long long)((rva % GIB) / MIB),
           (unsigned long long)(((uintptr_t)B.w.ptr - rva) / MIB),
           (unsigned long long)(((uintptr_t)B.w.ptr % GIB) / MIB));
    printf("the not-aligned raw case maps at %llu MiB past a 1 GiB boundary\n", (unsigned long long)(mis / MIB));
    bench_results *res = bench_results_create("bench_growth");
    char gpu_desc[300];
    snprintf(gpu_desc, sizeof gpu_desc, "GPU %s", info.name);
    bench_results_host(res, gpu_desc);
    static const char *cond_id[2] = {"warm", "cold"};
    static const char *cond_name[2] = {"warm: each grow right after an equal release",
                                       "cold: each grow 5 ms after the last driver call"};
    for (int c = 0; c < 2; c++) {
        printf("\n-- %s --\n", cond_name[c]);
        printf("%-44s %12s %12s %16s\n", "grow by 1 GiB", "median us", "min us", "median teardown");
        for (int k = 0; k < C_COUNT; k++) {
            int m = got[c][k];
            if (m == 0) continue;
            printf("%-44s %12.1f %12.1f %13.1f us", case_name[k], bench_median(grow[c][k], m), minimum(grow[c][k], m),
                   bench_median(shrink[c][k], m));
            if (k == C_RAW1 || k == C_RAW1_MISALIGNED)
                printf("   (create %.1f, map %.1f, access %.1f)", bench_median(split[c][k][0], m),
                       bench_median(split[c][k][1], m), bench_median(split[c][k][2], m));
            if (k == C_ARENA || k == C_ARENA_ALIGNED) {
                double *own = calloc((size_t)m, sizeof(double));
                if (own == NULL) return 1;
                for (int r = 0; r < m; r++) own[r] = grow[c][k][r] - inside[c][k][r];
                double own_median = bench_median(own, m);
                printf("   (in the driver %.1f, the arena's own %.1f)", bench_median(inside[c][k], m), own_median);
                char oid[96];
                snprintf(oid, sizeof oid, "growth.%s.%s.own_us", cond_id[c], case_id[k]);
                bench_results_add(res, oid, "us", true, own_median, m, bench_mad(own, m, own_median), -1);
                free(own);
            }
            printf("\n");
            char id[96];
            double g = bench_median(grow[c][k], m), d = bench_median(shrink[c][k], m);
            double ref = k == C_RAW1 || got[c][C_RAW1] == 0 ? -1 : bench_median(grow[c][C_RAW1], got[c][C_RAW1]);
            snprintf(id, sizeof id, "growth.%s.%s.grow_us", cond_id[c], case_id[k]);
            bench_results_add(res, id, "us", true, g, m, bench_mad(grow[c][k], m, g), ref);
            snprintf(id, sizeof id, "growth.%s.%s.teardown_us", cond_id[c], case_id[k]);
            bench_results_add(res, id, "us", true, d, m, bench_mad(shrink[c][k], m, d), -1);
        }
        double ma = bench_median(grow[c][C_ARENA], got[c][C_ARENA]), m1 = bench_median(grow[c][C_RAW1], got[c][C_RAW1]);
        double m512 = bench_median(grow[c][C_RAW512], got[c][C_RAW512]);
        printf("ratio arena / raw 1 GiB handle   = %.3f  (target <= 1.2: %s)\n", ma / m1,
               ma / m1 <= 1.2 ? "PASS" : "MISS");
        printf("ratio 512 x 2 MiB / raw 1 GiB    = %.1f\n", m512 / m1);
        printf("ratio arena / 512 x 2 MiB        = %.4f\n", ma / m512);
    }
    printf("\narena driver calls over the run: create %lld, map %lld, set_access %lld, unmap %lld, release %lld\n",
           (long long)st.driver_create, (long long)st.driver_map, (long long)st.driver_set_access,
           (long long)st.driver_unmap, (long long)st.driver_release);

    RAW_CHECK(raw.addrFree(B.va1, GIB));
    RAW_CHECK(raw.addrFree(B.va2, GIB));
    RAW_CHECK(raw.addrFree(va3base, 2 * GIB));
    DMM_CHECK(cuda->ops->unreserve(cuda, B.va4, GIB));
    if (B.have_aligned && dmm_mechanism_release(B.arena, &B.w_aligned).state != DMM_RELEASE_COMPLETE) return 1;
    if (dmm_mechanism_release(B.arena, &B.w).state != DMM_RELEASE_COMPLETE) return 1;
    DMM_CHECK(dmm_mechanism_destroy(B.arena));
    dmm_driver_destroy(cuda);
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < C_COUNT; k++) {
            free(grow[c][k]);
            free(shrink[c][k]);
            free(inside[c][k]);
            for (int q = 0; q < 3; q++) free(split[c][k][q]);
        }
    return bench_results_finish(res, json) == 0 ? 0 : 1;
}

