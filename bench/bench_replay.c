/* bench/bench_replay.c — replays allocation traces through the pool and, on a GPU, through the
 * driver's own stream-ordered pool (cuMemAllocAsync / cuMemFreeAsync) in the same run.
 *
 * For each trace: the median replay time of N runs (each a fresh driver, arena and pool: growth
 * included, per-op timing off), peak physical ÷ peak live (and PyTorch's ratio from the trace
 * header), driver calls per 1,000 allocations and the H200 driver time those calls would cost by
 * DESIGN §6's medians. On a GPU: the same replay over the CUDA driver and through cuMemAllocAsync,
 * runs interleaved, and the ratio pool ÷ driver (issue 4: ≤ 2 for llama-generate).
 *
 * usage: bench_replay [--runs N] [--host-only] [--json FILE] [TRACE.gz ...]
 * --json writes the medians (with their MAD), ratios and driver calls for `dmm compare`; metric ids
 * are replay.<workload>.* (docs/benchmarks.md).
 * Default traces: every data/traces/NAME.trace.gz and ../shared/traces/llama-generate.trace.gz (when present),
 * relative to the current directory or to the source tree. Nothing is asserted.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cuda_ref.h"
#include "replay.h"
#include "results.h"
#include "trace.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double med(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int add_glob(const char *pattern, char ***paths, int *n) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        *paths = realloc(*paths, (size_t)(*n + 1) * sizeof **paths);
        (*paths)[(*n)++] = strdup(g.gl_pathv[i]);
    }
    globfree(&g);
    return (int)g.gl_pathc;
}

int main(int argc, char **argv) {
    int runs = 5;
    bool host_only = false;
    const char *json = NULL;
    char **paths = NULL;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--host-only") == 0) host_only = true;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_replay [--runs N] [--host-only] [--json FILE] [TRACE.gz ...]\n");
            return 2;
        } else {
            paths = realloc(paths, (size_t)(np + 1) * sizeof *paths);
            paths[np++] = strdup(argv[i]);
        }
    }
    if (runs < 1) runs = 1;
    if (np == 0) {
        /* from the source tree when run from a build directory */
        char here[4096];
        snprintf(here, sizeof here, "%s", __FILE__);
        char *cut = strstr(here, "bench/bench_replay.c");
        if (add_glob("data/traces/*.trace.gz", &paths, &np) == 0 && cut != NULL) {
            snprintf(cut, sizeof here - (size_t)(cut - here), "data/traces/*.trace.gz");
            add_glob(here, &paths, &np);
        }
        if (add_glob("../shared/traces/llama-generate.trace.gz", &paths, &np) == 0 && cut != NULL) {
            snprintf(cut, sizeof here - (size_t)(cut - here), "../shared/traces/llama-generate.trace.gz");
            add_glob(here, &paths, &np);
        }
    }
    if (np == 0) {
        fprintf(stderr, "bench_replay: no trace found; pass TRACE.gz paths\n");
        return 1;
    }
    struct rlimit rl; /* one memfd per chunk on the host driver */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char err[1024];
    dmm_cuda_ref *ref = NULL;
    bool gpu = false;
    bench_results *res = bench_results_create("bench_replay");
    if (!host_only) {
        dmm_driver *probe = NULL;
        if (dmm_cuda_driver_create(0, &probe) == DMM_OK) {
            dmm_driver_destroy(probe);
            gpu = dmm_cuda_ref_open(&ref, err, sizeof err) == 0;
            if (!gpu) printf("GPU reference unavailable: %s\n", err);
            dmm_cuda_device_info info;
            memset(&info, 0, sizeof info);
            info.size = sizeof info;
            if (gpu && dmm_cuda_device_query(0, &info) == DMM_OK) {
                char what[300];
                snprintf(what, sizeof what, "GPU %s", info.name);
                bench_results_host(res, what);
            }
        } else {
            printf("GPU: skipped (%s)\n", dmm_last_error());
        }
    }
    printf("bench_replay: %d run(s) per trace, medians; ratio = peak physical / peak live (physical = handles "
           "held, mapped + cached)\n",
           runs);
    for (int i = 0; i < np; i++) {
        dmm_trace t;
        if (dmm_trace_load(paths[i], &t, err, sizeof err) != 0) {
            printf("%s: %s\n", paths[i], err);
            continue;
        }
        double *hv = malloc((size_t)runs * sizeof *hv), *gv = malloc((size_t)runs * sizeof *gv),
               *rv = malloc((size_t)runs * sizeof *rv);
        char wl[96], id[160];
        bench_id(wl, sizeof wl, t.workload[0] ? t.workload : paths[i]);
        dmm_replay_result r, last;
        memset(&last, 0, sizeof last);
        bool ok = true;
        dmm_replay_opts o;
        memset(&o, 0, sizeof o);
        o.driver = "host";
        o.samples = 16;
        for (int k = 0; k < runs && ok; k++) {
            if (dmm_replay_run(&t, &o, &r, err, sizeof err) != 0) {
                printf("%s (host): %s\n", paths[i], err);
                ok = false;
                break;
            }
            hv[k] = r.wall_s;
            dmm_replay_result_free(&last);
            last = r;
        }
        if (ok) {
            printf("\n%s (%s): %zu events, %zu allocations, peak live %.3f GiB\n", t.workload, paths[i], t.n, t.allocs,
                   (double)t.peak_live_bytes / (1 << 30));
            printf("  ratio %.4f (committed %.4f), PyTorch %.4f\n", last.ratio, last.ratio_committed, last.native_ratio);
            printf("  driver calls per 1,000 allocations: create %.2f, map %.2f, set_access %.2f, unmap %.2f, release "
                   "%.2f; H200 time of those calls by DESIGN §6: %.3f s\n",
                   dmm_replay_per_1k(last.calls_create, last.allocs), dmm_replay_per_1k(last.calls_map, last.allocs),
                   dmm_replay_per_1k(last.calls_set_access, last.allocs),
                   dmm_replay_per_1k(last.calls_unmap, last.allocs), dmm_replay_per_1k(last.calls_release, last.allocs),
                   last.est_h200_driver_s);
            double hm = med(hv, runs);
            printf("  host driver: replay %.3f s median (%.0f ns per event)\n", hm, hm * 1e9 / (double)t.n);
            snprintf(id, sizeof id, "replay.%s.host_s", wl);
            bench_results_add(res, id, "s", true, hm, runs, bench_mad(hv, runs, hm), -1);
            snprintf(id, sizeof id, "replay.%s.ratio", wl);
            bench_results_add(res, id, "ratio", true, last.ratio, 1, 0, last.native_ratio);
            snprintf(id, sizeof id, "replay.%s.ratio_committed", wl);
            bench_results_add(res, id, "ratio", true, last.ratio_committed, 1, 0, last.native_ratio);
            snprintf(id, sizeof id, "replay.%s.driver_calls_per_1k", wl);
            bench_results_add(res, id, "calls", true,
                              dmm_replay_per_1k(last.calls_create + last.calls_map + last.calls_set_access +
                                                    last.calls_unmap + last.calls_release,
                                                last.allocs),
                              1, 0, -1);
        }
        if (ok && gpu) {
            o.driver = "cuda";
            int k;
            for (k = 0; k < runs; k++) {
                if (dmm_replay_run(&t, &o, &r, err, sizeof err) != 0) {
                    printf("  cuda pool: %s\n", err);
                    break;
                }
                gv[k] = r.wall_s;
                dmm_replay_result_free(&r);
                dmm_cuda_ref_bind(ref);
                rv[k] = dmm_cuda_ref_replay(ref, &t, err, sizeof err);
                if (rv[k] < 0) {
                    printf("  cuMemAllocAsync: %s\n", err);
                    break;
                }
            }
            if (k == runs) {
                double gm = med(gv, runs), rm = med(rv, runs);
                printf("  GPU: pool %.3f s, cuMemAllocAsync/cuMemFreeAsync %.3f s (medians): pool / driver = %.2f\n", gm,
                       rm, gm / rm);
                snprintf(id, sizeof id, "replay.%s.gpu_pool_s", wl);
                bench_results_add(res, id, "s", true, gm, runs, bench_mad(gv, runs, gm), rm);
                snprintf(id, sizeof id, "replay.%s.gpu_driver_s", wl);
                bench_results_add(res, id, "s", true, rm, runs, bench_mad(rv, runs, rm), -1);
            }
        }
        dmm_replay_result_free(&last);
        free(hv);
        free(gv);
        free(rv);
        dmm_trace_free(&t);
    }
    for (int i = 0; i < np; i++) free(paths[i]);
    free(paths);
    dmm_cuda_ref_close(ref);
    return bench_results_finish(res, json) == 0 ? 0 : 1;
}
