/* SPDX-License-Identifier: Apache-2.0 */
/* bench/bench_growth_load.c — growing while the GPU works: does the growth delay the work queued before it?
 *
 * Issue 10, acceptance 4: under PyTorch, GPT-2's first training step (the growth step) took 1.14 × native's
 * on the H200 while only ~44 ms of it were spent inside dmm's driver calls; the rest of the gap is
 * unexplained. One question decides where to look: when the host creates, maps and grants access to
 * physical handles while the GPU still runs queued work, does the GPU work finish later (the driver
 * serialises the two, or the memory it clears for a new handle competes with the work), and is that
 * worse for VMM handles than for cuMemAlloc (what PyTorch's native allocator calls)?
 *
 * Each case grows by 1 GiB; in interleaved rounds, three ways:
 *   alone     the growth on an idle GPU (host time);
 *   gpu       the load alone: `LOAD_COPIES` device-to-device copies of 256 MiB queued on one stream,
 *             then a synchronize (wall time ≈ GPU time);
 *   both      the load queued, then the growth, then the synchronize: the host part (queue + growth)
 *             and the total wall time.
 * Cases: VMM handles of 2, 8 and 32 MiB (cuMemCreate + cuMemMap + cuMemSetAccess each, fresh VA) and
 * cuMemAlloc in 2 and 32 MiB pieces. Printed per case: the medians, and
 *   overlap = (gpu + alone − both) / min(gpu, alone)   1: the growth hid fully under the GPU work;
 *                                                      0: the two ran one after the other.
 * Teardown (unmap + release, cuMemFree) is untimed and happens with the GPU idle.
 *
 * A second table asks whether the growth could move off the thread that waits for it (a growth
 * thread, issue 10's "handle work moved off the moments the application waits"): does a growth on
 * another thread slow this thread's enqueueing (the driver serialising the two)? This thread enqueues
 * `ENQUEUES` small copies (what a training step's kernel launches cost the host), alone and while a
 * second thread grows by 1 GiB; printed per case the medians and
 *   blocked = (enqueue with the growth − enqueue alone) / the growth alone   0: the enqueueing thread
 *                                           lost nothing; 1: it waited for all of the growth.
 * Nothing is asserted.
 *
 * usage: bench_growth_load [--rounds N]   (default 7, from 3 to 101). Exit 77 "skipped: no GPU (…)" where
 * there is no CUDA driver or GPU.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/atomics.h"
#include "dmm/dmm.h"
#include "libcuda.h"
#include "results.h"

#define MIB ((size_t)1 << 20)
#define GROW_BYTES ((size_t)1 << 30)
#define LOAD_BYTES (256 * MIB)
#define LOAD_COPIES 192
#define ENQUEUES 20000
#define SMALL_BYTES 4096
#define MAX_ROUNDS 101

static struct {
    dmm_cuMemAddressReserve_fn *reserve;
    dmm_cuMemAddressFree_fn *addr_free;
    dmm_cuMemCreate_fn *create;
    dmm_cuMemRelease_fn *release;
    dmm_cuMemMap_fn *map;
    dmm_cuMemUnmap_fn *unmap;
    dmm_cuMemSetAccess_fn *set_access;
    dmm_cuMemAlloc_fn *alloc;
    dmm_cuMemFree_fn *mem_free;
    dmm_cuMemcpyAsync_fn *copy;
    dmm_cuStreamCreate_fn *stream_create;
    dmm_cuStreamDestroy_fn *stream_destroy;
    dmm_cuStreamSynchronize_fn *sync;
    dmm_cuCtxGetCurrent_fn *ctx_get;
    dmm_cuCtxSetCurrent_fn *ctx_set;
} cu;

#define CU(call) BENCH_CU("bench_growth_load", call)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct grow_case {
    const char *name;
    bool vmm;    /* cuMemCreate + map + set access; else cuMemAlloc */
    size_t each; /* bytes per handle or allocation */
} grow_case;

static const grow_case CASES[] = {
    {"VMM handles of 2 MiB (512)", true, 2 * MIB},  {"VMM handles of 8 MiB (128)", true, 8 * MIB},
    {"VMM handles of 32 MiB (32)", true, 32 * MIB}, {"cuMemAlloc of 2 MiB (512)", false, 2 * MIB},
    {"cuMemAlloc of 32 MiB (32)", false, 32 * MIB},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static dmm_cu_mem_allocation_prop g_prop;
static dmm_cu_mem_access_desc g_access;
static dmm_cu_deviceptr g_va; /* GROW_BYTES of VA for the VMM cases */
static dmm_cu_mem_handle g_handles[GROW_BYTES / (2 * MIB)];
static dmm_cu_deviceptr g_ptrs[GROW_BYTES / (2 * MIB)];

static void grow(const grow_case *c) {
    int n = (int)(GROW_BYTES / c->each);
    for (int i = 0; i < n; i++) {
        if (c->vmm) {
            dmm_cu_deviceptr at = g_va + (size_t)i * c->each;
            CU(cu.create(&g_handles[i], c->each, &g_prop, 0));
            CU(cu.map(at, c->each, 0, g_handles[i], 0));
            CU(cu.set_access(at, c->each, &g_access, 1));
        } else {
            CU(cu.alloc(&g_ptrs[i], c->each));
        }
    }
}

static void teardown(const grow_case *c) {
    int n = (int)(GROW_BYTES / c->each);
    for (int i = 0; i < n; i++) {
        if (c->vmm) {
            CU(cu.unmap(g_va + (size_t)i * c->each, c->each));
            CU(cu.release(g_handles[i]));
        } else {
            CU(cu.mem_free(g_ptrs[i]));
        }
    }
}

static void queue_load(dmm_cu_stream s, dmm_cu_deviceptr src, dmm_cu_deviceptr dst) {
    for (int i = 0; i < LOAD_COPIES; i++) CU(cu.copy(dst, src, LOAD_BYTES, s));
}

/* ENQUEUES small copies on s, then a synchronize; the enqueueing's host time in ms. */
static double enqueue_small(dmm_cu_stream s, dmm_cu_deviceptr src, dmm_cu_deviceptr dst) {
    double t0 = now_ms();
    for (int i = 0; i < ENQUEUES; i++) CU(cu.copy(dst, src, SMALL_BYTES, s));
    double t = now_ms() - t0;
    CU(cu.sync(s));
    return t;
}

/* The growth thread: waits for `go`, grows, reports its time. */
typedef struct grower {
    const grow_case *c;
    dmm_cu_context ctx;
    atomic_int go;
    double ms;
} grower;

static void *grow_thread(void *arg) {
    grower *g = arg;
    CU(cu.ctx_set(g->ctx));
    while (dmm_atomic_load_seq_cst(&g->go) == 0) {
    }
    double t0 = now_ms();
    grow(g->c);
    g->ms = now_ms() - t0;
    return NULL;
}

/* The second table: per VMM and cuMemAlloc case, this thread's enqueueing alone and while another
 * thread grows, in interleaved rounds. */
static void growth_on_another_thread(int rounds, dmm_cu_stream st, dmm_cu_deviceptr src, dmm_cu_deviceptr dst) {
    dmm_cu_context ctx = NULL;
    CU(cu.ctx_get(&ctx));
    double alone[NCASES][MAX_ROUNDS], with[NCASES][MAX_ROUNDS], grown[NCASES][MAX_ROUNDS],
        grown_alone[NCASES][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (size_t j = 0; j < NCASES; j++) {
            size_t k = (j + (size_t)r) % NCASES;
            const grow_case *c = &CASES[k];
            double t0 = now_ms();
            grow(c);
            grown_alone[k][r] = now_ms() - t0;
            teardown(c);
            alone[k][r] = enqueue_small(st, src, dst);
            grower g = {.c = c, .ctx = ctx, .ms = 0};
            atomic_init(&g.go, 0);
            pthread_t th;
            if (pthread_create(&th, NULL, grow_thread, &g) != 0) {
                fprintf(stderr, "bench_growth_load: pthread_create failed\n");
                exit(1);
            }
            dmm_atomic_store_seq_cst(&g.go, 1);
            with[k][r] = enqueue_small(st, src, dst);
            pthread_join(th, NULL);
            grown[k][r] = g.ms;
            teardown(c);
        }
    printf("\nbench_growth_load: this thread enqueues %d copies of %d bytes while another thread grows by 1 GiB; "
           "medians of %d rounds\n",
           ENQUEUES, SMALL_BYTES, rounds);
    printf("%-30s %12s %12s %12s %12s %8s\n", "growth (other thread)", "enqueue ms", "with growth", "growth alone",
           "growth there", "blocked");
    for (size_t k = 0; k < NCASES; k++) {
        double a = bench_median(alone[k], rounds), w = bench_median(with[k], rounds),
               ga = bench_median(grown_alone[k], rounds), gt = bench_median(grown[k], rounds);
        printf("%-30s %12.2f %12.2f %12.2f %12.2f %8.2f\n", CASES[k].name, a, w, ga, gt, ga > 0 ? (w - a) / ga : 0);
    }
    printf("blocked 0: a growth on another thread cost the enqueueing thread nothing; 1: it waited for all of it\n");
}

int main(int argc, char **argv) {
    int rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_growth_load [--rounds N]\n");
            return 2;
        }
    }
    if (rounds < 3) rounds = 3;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;

    dmm_driver *cuda = NULL; /* makes the primary context of device 0 current */
    dmm_status s = dmm_cuda_driver_create(0, &cuda);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("bench_growth_load: skipped: no GPU (%s)\n", dmm_last_error());
        return 77;
    }
    if (s != DMM_OK) {
        fprintf(stderr, "bench_growth_load: the CUDA driver: %s\n", dmm_last_error());
        return 1;
    }
    if (cuda->ops->reserve == NULL) {
        printf("bench_growth_load: skipped: device 0 has no VMM\n");
        dmm_driver_destroy(cuda);
        return 77;
    }
    const bench_cu_symbol syms[] = {
        {"cuMemAddressReserve", &cu.reserve}, {"cuMemAddressFree", &cu.addr_free},
        {"cuMemCreate", &cu.create},          {"cuMemRelease", &cu.release},
        {"cuMemMap", &cu.map},                {"cuMemUnmap", &cu.unmap},
        {"cuMemSetAccess", &cu.set_access},   {"cuMemAlloc_v2", &cu.alloc},
        {"cuMemFree_v2", &cu.mem_free},       {"cuMemcpyAsync", &cu.copy},
        {"cuStreamCreate", &cu.stream_create}, {"cuStreamDestroy_v2", &cu.stream_destroy},
        {"cuStreamSynchronize", &cu.sync},    {"cuCtxGetCurrent", &cu.ctx_get},
        {"cuCtxSetCurrent", &cu.ctx_set},
    };
    void *lib = bench_libcuda_open("bench_growth_load", syms, sizeof syms / sizeof syms[0]);
    if (lib == NULL) return 1;
    bench_cu_device_memory(0, &g_prop, &g_access);
    CU(cu.reserve(&g_va, GROW_BYTES, 32 * MIB, 0, 0));
    dmm_cu_stream st = NULL;
    CU(cu.stream_create(&st, 0));
    dmm_cu_deviceptr src = 0, dst = 0;
    CU(cu.alloc(&src, LOAD_BYTES));
    CU(cu.alloc(&dst, LOAD_BYTES));
    queue_load(st, src, dst); /* wakes the copy path; untimed */
    CU(cu.sync(st));

    double alone[NCASES][MAX_ROUNDS], gpu[NCASES][MAX_ROUNDS], host[NCASES][MAX_ROUNDS], both[NCASES][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (size_t j = 0; j < NCASES; j++) {
            size_t k = (j + (size_t)r) % NCASES; /* rotate: no case always first */
            const grow_case *c = &CASES[k];
            double t0 = now_ms();
            grow(c);
            alone[k][r] = now_ms() - t0;
            teardown(c);
            t0 = now_ms();
            queue_load(st, src, dst);
            CU(cu.sync(st));
            gpu[k][r] = now_ms() - t0;
            t0 = now_ms();
            queue_load(st, src, dst);
            grow(c);
            host[k][r] = now_ms() - t0;
            CU(cu.sync(st));
            both[k][r] = now_ms() - t0;
            teardown(c);
        }

    printf("bench_growth_load: growing by 1 GiB while %d copies of %zu MiB run on the GPU; medians of %d rounds, "
           "cases interleaved\n",
           LOAD_COPIES, LOAD_BYTES / MIB, rounds);
    printf("%-30s %10s %10s %12s %10s %8s\n", "growth", "alone ms", "gpu ms", "both: host", "total ms", "overlap");
    for (size_t k = 0; k < NCASES; k++) {
        double a = bench_median(alone[k], rounds), g = bench_median(gpu[k], rounds),
               h = bench_median(host[k], rounds), b = bench_median(both[k], rounds);
        double shorter = a < g ? a : g;
        printf("%-30s %10.2f %10.2f %12.2f %10.2f %8.2f\n", CASES[k].name, a, g, h, b,
               shorter > 0 ? (g + a - b) / shorter : 0);
    }
    printf("overlap 1: the growth hid under the queued GPU work; 0: growth and GPU work ran one after the other\n");
    growth_on_another_thread(rounds, st, src, dst);

    CU(cu.mem_free(src));
    CU(cu.mem_free(dst));
    CU(cu.stream_destroy(st));
    CU(cu.addr_free(g_va, GROW_BYTES));
    dmm_driver_destroy(cuda);
    return 0;
}
