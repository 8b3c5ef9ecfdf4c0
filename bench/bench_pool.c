/* bench/bench_pool.c — the pool's hot path: cached malloc+free pair latency.
 *
 *   1. single thread, per size: the pool's pair vs glibc malloc/free, same run, medians and ratio
 *      (DESIGN §7: ≤ 60 ns median on the CI machine);
 *   2. a mixed pattern (256 live slots, log-uniform sizes 512 B – 4 MiB, random replace) after
 *      warm-up, with the driver calls made during the measurement printed (must be 0);
 *   3. single thread, a second thread alive (the real-process case: every CUDA process has several
 *      threads): section 1 again on a fresh pool while one idle thread sleeps on a condition
 *      variable (issue 10: pool pair at 64 KiB ≤ 1.2 × glibc's, ≤ 30 ns median at 512 B – 1 MiB);
 *   4. a per-stream worker: one thread on its own stream does the 64 KiB pairs of a pool that the
 *      main thread created, while the main thread waits for it;
 *   5. 1/2/4/8 threads, each on its own stream: per-thread median and aggregate throughput, with
 *      the scaling against 1 thread (printed, not asserted: it is bounded by the cores);
 *   6. on a GPU (when the CUDA driver opens): the same pair over the CUDA driver vs
 *      cuMemAllocAsync + cuMemFreeAsync on a stream, same run (DESIGN §7: ≤ 0.15 × the driver's).
 *
 * Sections 1 and 2 run while the process has one thread; 3 to 6 run multi-threaded. glibc's
 * pthread_mutex_lock/unlock (the pool's heap lock) and its malloc skip their atomic read-modify-writes
 * only until a process creates its first thread, and never go back: so 1 and 2 stay first, and 3 is
 * the number a real process sees.
 *
 * usage: bench_pool [--samples N] [--batch N] [--no-threads] [--json FILE]
 * Medians over N batches (default 301) of B pairs (default 2000); nothing is asserted. --no-threads
 * skips section 5 only. --json writes the same medians with their MAD for `dmm compare`
 * (docs/benchmarks.md).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_ref.h"
#include "dmm/dmm.h"
#include "results.h"

static int g_samples = 301, g_batch = 2000;
static bench_results *g_res; /* the --json collection (also filled without --json: it is small) */
static double g_mad;         /* MAD of the samples of the last pool_pair_ns / glibc_pair_ns / mixed_ns */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return v[n / 2];
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        dmm_status s_ = (call);                                                                    \
        if (s_ != DMM_OK) {                                                                        \
            fprintf(stderr, "bench_pool: %s failed: %s\n", #call, dmm_last_error());               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct stack {
    dmm_driver *drv;
    dmm_mechanism *arena;
    dmm_pool *pool;
} stack;

static int stack_open(stack *st, bool cuda) {
    memset(st, 0, sizeof *st);
    if (cuda) {
        if (dmm_cuda_driver_create(0, &st->drv) != DMM_OK) return -1;
    } else {
        CHECK(dmm_host_driver_create(NULL, &st->drv));
    }
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)64 << 30;
    ac.cache_limit_bytes = 8u << 20;
    CHECK(dmm_arena_create(st->drv, &ac, &st->arena));
    CHECK(dmm_pool_create(st->arena, st->drv, NULL, &st->pool));
    return 0;
}

/* Destroys a pool, waiting (outside the pool) for the events after the streams' last frees. */
static void pool_destroy_when_idle(dmm_pool *pool) {
    dmm_status s = dmm_pool_destroy(pool);
    for (int i = 0; s == DMM_ERR_BUSY && i < 5000; i++) {
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
        s = dmm_pool_destroy(pool);
    }
    if (s != DMM_OK) {
        fprintf(stderr, "bench_pool: dmm_pool_destroy failed: %s\n", dmm_last_error());
        exit(1);
    }
}

static void stack_close(stack *st) {
    pool_destroy_when_idle(st->pool);
    CHECK(dmm_mechanism_destroy(st->arena));
    dmm_driver_destroy(st->drv);
}

static void *volatile sink;

static uint64_t driver_calls(dmm_pool *pool);

/* Median ns per pair; *calls = driver calls made during the measurement (after the warm-up). */
static double pool_pair_ns(dmm_pool *pool, size_t bytes, dmm_stream stream, uint64_t *calls) {
    double *v = malloc((size_t)g_samples * sizeof *v);
    void *p = NULL;
    CHECK(dmm_pool_malloc(pool, bytes, stream, &p)); /* warm: the first one grows */
    CHECK(dmm_pool_free(pool, p, stream));
    uint64_t c0 = driver_calls(pool);
    for (int s = 0; s < g_samples; s++) {
        double t0 = now_s();
        for (int i = 0; i < g_batch; i++) {
            dmm_pool_malloc(pool, bytes, stream, &p);
            sink = p;
            dmm_pool_free(pool, p, stream);
        }
        v[s] = (now_s() - t0) * 1e9 / g_batch;
    }
    *calls = driver_calls(pool) - c0;
    double m = median(v, g_samples);
    g_mad = bench_mad(v, g_samples, m);
    free(v);
    return m;
}

static double glibc_pair_ns(size_t bytes) {
    double *v = malloc((size_t)g_samples * sizeof *v);
    void *p = malloc(bytes);
    free(p);
    for (int s = 0; s < g_samples; s++) {
        double t0 = now_s();
        for (int i = 0; i < g_batch; i++) {
            p = malloc(bytes);
            sink = p;
            free(p);
        }
        v[s] = (now_s() - t0) * 1e9 / g_batch;
    }
    double m = median(v, g_samples);
    g_mad = bench_mad(v, g_samples, m);
    free(v);
    return m;
}

static uint64_t driver_calls(dmm_pool *pool) {
    dmm_pool_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(dmm_pool_stats_get(pool, &s));
    return s.driver_create + s.driver_map + s.driver_unmap + s.driver_set_access + s.driver_release;
}

/* 256 live slots, log-uniform sizes 512 B – 4 MiB, random replace; ns per operation. */
static double mixed_ns(dmm_pool *pool, uint64_t *calls_during) {
    enum { SLOTS = 256 };
    void *slot[SLOTS] = {0};
    uint64_t x = 0x9E3779B97F4A7C15ull;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms the pool to the pattern's footprint */
        double *v = malloc((size_t)g_samples * sizeof *v);
        uint64_t c0 = driver_calls(pool);
        for (int s = 0; s < g_samples; s++) {
            double t0 = now_s();
            for (int i = 0; i < g_batch; i++) {
                uint64_t r = RND();
                int k = (int)(r % SLOTS);
                if (slot[k] != NULL) {
                    dmm_pool_free(pool, slot[k], NULL);
                    slot[k] = NULL;
                } else {
                    size_t bytes = (size_t)512 << ((r >> 8) % 14); /* 512 B .. 4 MiB */
                    bytes += (size_t)((r >> 20) % bytes);
                    if (dmm_pool_malloc(pool, bytes, NULL, &slot[k]) != DMM_OK) slot[k] = NULL;
                }
            }
            v[s] = (now_s() - t0) * 1e9 / g_batch;
        }
        double m = median(v, g_samples);
        g_mad = bench_mad(v, g_samples, m);
        free(v);
        if (pass == 1) {
            *calls_during = driver_calls(pool) - c0;
            for (int k = 0; k < SLOTS; k++)
                if (slot[k] != NULL) dmm_pool_free(pool, slot[k], NULL);
            return m;
        }
    }
#undef RND
    return 0;
}

static const size_t g_sizes[] = {512, 4096, 65536, 1 << 20, 16 << 20};
enum { N_SIZES = sizeof g_sizes / sizeof g_sizes[0] };

/* The pool's pair and glibc's at every size, printed as a table and recorded as
 * pool.<tag>pair_ns.<bytes> (reference: glibc) and glibc.<tag>pair_ns.<bytes>; pool_ns[i] and
 * glibc_ns[i] receive the medians. */
static void size_sweep(dmm_pool *pool, const char *tag, double *pool_ns, double *glibc_ns) {
    printf("%10s %12s %12s %10s\n", "bytes", "pool ns", "glibc ns", "pool/glibc");
    for (int i = 0; i < N_SIZES; i++) {
        uint64_t calls = 0;
        double pn = pool_pair_ns(pool, g_sizes[i], NULL, &calls);
        double pmad = g_mad;
        double gn = glibc_pair_ns(g_sizes[i]);
        printf("%10zu %12.1f %12.1f %10.2f%s\n", g_sizes[i], pn, gn, pn / gn,
               calls ? "  (driver calls during the measurement!)" : "");
        char id[64];
        snprintf(id, sizeof id, "pool.%spair_ns.%zu", tag, g_sizes[i]);
        bench_results_add(g_res, id, "ns", true, pn, g_samples, pmad, gn);
        snprintf(id, sizeof id, "glibc.%spair_ns.%zu", tag, g_sizes[i]);
        bench_results_add(g_res, id, "ns", true, gn, g_samples, g_mad, -1);
        pool_ns[i] = pn;
        glibc_ns[i] = gn;
    }
}

/* A thread that does nothing but exist: from its creation on, the process is multi-threaded. */
typedef struct idle_thread {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* under mu */
} idle_thread;

static void *idle_main(void *arg) {
    idle_thread *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void idle_start(idle_thread *t) {
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->stop = false;
    if (pthread_create(&t->th, NULL, idle_main, t) != 0) {
        fprintf(stderr, "bench_pool: pthread_create failed\n");
        exit(1);
    }
}

static void idle_stop(idle_thread *t) {
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

/* Section 3: section 1's table on a fresh pool while a second thread is alive, with issue 10's targets. */
static void alive2_bench(void) {
    idle_thread idle;
    idle_start(&idle);
    stack st;
    stack_open(&st, false);
    printf("\n-- single thread, a second thread alive (the real-process case; targets: pool <= 1.2 x glibc "
           "at 64 KiB, <= 30 ns median at 512 B - 1 MiB on a quiet run) --\n");
    double pn[N_SIZES], gn[N_SIZES];
    size_sweep(st.pool, "alive2.", pn, gn);
    double worst = 0, r64 = 0;
    for (int i = 0; i < N_SIZES; i++) {
        if (g_sizes[i] <= (1u << 20) && pn[i] > worst) worst = pn[i];
        if (g_sizes[i] == (64u << 10)) r64 = pn[i] / gn[i];
    }
    printf("64 KiB: pool/glibc %.2f (target <= 1.2: %s); 512 B - 1 MiB: slowest pool median %.1f ns "
           "(target <= 30: %s)\n",
           r64, r64 <= 1.2 ? "met" : "NOT met", worst, worst <= 30 ? "met" : "NOT met");
    stack_close(&st);
    idle_stop(&idle);
}

typedef struct worker {
    pthread_t th;
    bool glibc; /* the reference: glibc malloc/free in the same loop */
    dmm_stream stream; /* thread i's stream, the same in every run */
    stack *st;
    pthread_barrier_t *bar;
    size_t bytes;
    double median_ns;
    double mad_ns; /* of this thread's batches */
    double worst_ns; /* its slowest batch, per pair */
    double t0, t1; /* absolute start and end of the measurement */
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    dmm_stream stream = w->stream;
    void *p = NULL;
    CHECK(dmm_pool_malloc(w->st->pool, w->bytes, stream, &p));
    CHECK(dmm_pool_free(w->st->pool, p, stream));
    double *v = malloc((size_t)g_samples * sizeof *v);
    /* each thread's own sink: one shared by all threads would bounce its cache line on every pair */
    void *volatile mine = NULL;
    pthread_barrier_wait(w->bar);
    w->t0 = now_s();
    for (int s = 0; s < g_samples; s++) {
        double a = now_s();
        if (w->glibc)
            for (int i = 0; i < g_batch; i++) {
                p = malloc(w->bytes);
                mine = p;
                free(p);
            }
        else
            for (int i = 0; i < g_batch; i++) {
                dmm_pool_malloc(w->st->pool, w->bytes, stream, &p);
                mine = p;
                dmm_pool_free(w->st->pool, p, stream);
            }
        v[s] = (now_s() - a) * 1e9 / g_batch;
    }
    w->t1 = now_s();
    (void)mine;
    w->median_ns = median(v, g_samples);
    w->mad_ns = bench_mad(v, g_samples, w->median_ns);
    w->worst_ns = 0;
    for (int s = 0; s < g_samples; s++)
        if (v[s] > w->worst_ns) w->worst_ns = v[s];
    free(v);
    /* the stream's heap keeps a reference to the stream value only; make its fence complete first */
    pthread_barrier_wait(w->bar);
    return NULL;
}

static void threads_bench(void) {
    stack st;
    stack_open(&st, false);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("\n-- threads, each on its own stream, 64 KiB pairs (this machine: %ld core%s; scaling is bounded by "
           "them) --\n",
           cores, cores == 1 ? "" : "s");
    printf("%8s %8s %14s %18s %10s %16s %14s\n", "", "threads", "median ns/pair", "aggregate Mpair/s", "scaling",
           "slowest thread", "slowest batch");
    printf("(median: of each thread's batches, averaged over threads; aggregate: all pairs / wall time;\n"
           " slowest thread: the longest thread's wall time per pair; slowest batch: per pair, of all threads)\n");
    double base[2] = {0, 0}, eff8[2] = {0, 0};
    dmm_stream streams[8];
    for (int i = 0; i < 8; i++) CHECK(st.drv->ops->stream_create(st.drv, &streams[i]));
    for (int run = 0; run < 8; run++) {
        int n = 1 << (run / 2), glibc = run % 2;
        worker w[8];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) {
            w[i] = (worker){0};
            w[i].st = &st;
            w[i].bar = &bar;
            w[i].bytes = 64 << 10;
            w[i].glibc = glibc;
            w[i].stream = streams[i];
            pthread_create(&w[i].th, NULL, run_worker, &w[i]);
        }
        double med = 0, mad = 0, t0 = 1e300, t1 = 0, slowest = 0, worst = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(w[i].th, NULL);
            med += w[i].median_ns / n;
            mad += w[i].mad_ns / n;
            double wall = (w[i].t1 - w[i].t0) * 1e9 / ((double)g_samples * g_batch);
            if (wall > slowest) slowest = wall;
            if (w[i].worst_ns > worst) worst = w[i].worst_ns;
            if (w[i].t0 < t0) t0 = w[i].t0;
            if (w[i].t1 > t1) t1 = w[i].t1;
        }
        double agg = (double)n * g_samples * g_batch / (t1 - t0); /* pairs per second, all threads */
        pthread_barrier_destroy(&bar);
        if (n == 1) base[glibc] = agg;
        if (n == 8) eff8[glibc] = agg / base[glibc] / 8;
        printf("%8s %8d %14.1f %18.2f %9.2fx %16.1f %14.1f\n", glibc ? "glibc" : "pool", n, med, agg / 1e6,
               agg / base[glibc], slowest, worst);
        /* JSON: per-thread median (MAD: the threads' average); aggregate throughput, one wall-clock
         * measurement whose noise is estimated by the batches' relative MAD. Only without
         * oversubscription (threads <= cores): beyond that the numbers are the scheduler's, and two
         * runs of one build differ by 10-80 % (measured on 2 cores), which no threshold separates. */
        if (n > cores) continue;
        char id[64];
        snprintf(id, sizeof id, "%s.threads.%d.pair_ns", glibc ? "glibc" : "pool", n);
        bench_results_add(g_res, id, "ns", true, med, (long)n * g_samples, mad, -1);
        snprintf(id, sizeof id, "%s.threads.%d.mpairs_per_s", glibc ? "glibc" : "pool", n);
        bench_results_add(g_res, id, "Mpair/s", false, agg / 1e6, 1, med > 0 ? agg / 1e6 * mad / med : 0, -1);
        if (n == 8) {
            snprintf(id, sizeof id, "%s.threads.8.linear_fraction", glibc ? "glibc" : "pool");
            bench_results_add(g_res, id, "ratio", false, eff8[glibc], 1, med > 0 ? eff8[glibc] * mad / med : 0, -1);
        }
    }
    printf("8 threads: pool %.2f of linear, glibc %.2f (target: pool >= 0.90 of linear; %s)\n", eff8[0], eff8[1],
           cores < 8 ? "not judged: fewer than 8 cores here" : eff8[0] >= 0.9 ? "met" : "NOT met");
    pool_destroy_when_idle(st.pool);
    CHECK(dmm_mechanism_destroy(st.arena));
    for (int i = 0; i < 8; i++) st.drv->ops->stream_destroy(st.drv, streams[i]);
    dmm_driver_destroy(st.drv);
}

/* Section 4: one worker thread on its own stream does the pairs of a pool created by the main
 * thread, which waits in pthread_join meanwhile; glibc's pair on the same worker is the reference. */
static void worker_bench(void) {
    stack st;
    stack_open(&st, false);
    dmm_stream stream;
    CHECK(st.drv->ops->stream_create(st.drv, &stream));
    printf("\n-- per-stream worker: one thread on its own stream, 64 KiB pairs, the pool's creator idle --\n");
    printf("%10s %12s %12s %10s\n", "bytes", "pool ns", "glibc ns", "pool/glibc");
    worker w[2]; /* [0] the pool, [1] glibc */
    for (int glibc = 0; glibc < 2; glibc++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 1);
        w[glibc] = (worker){0};
        w[glibc].st = &st;
        w[glibc].bar = &bar;
        w[glibc].bytes = 64 << 10;
        w[glibc].glibc = glibc;
        w[glibc].stream = stream;
        pthread_create(&w[glibc].th, NULL, run_worker, &w[glibc]);
        pthread_join(w[glibc].th, NULL);
        pthread_barrier_destroy(&bar);
    }
    double pn = w[0].median_ns, gn = w[1].median_ns;
    printf("%10d %12.1f %12.1f %10.2f\n", 64 << 10, pn, gn, pn / gn);
    bench_results_add(g_res, "pool.worker.pair_ns.65536", "ns", true, pn, g_samples, w[0].mad_ns, gn);
    bench_results_add(g_res, "glibc.worker.pair_ns.65536", "ns", true, gn, g_samples, w[1].mad_ns, -1);
    pool_destroy_when_idle(st.pool);
    CHECK(dmm_mechanism_destroy(st.arena));
    st.drv->ops->stream_destroy(st.drv, stream);
    dmm_driver_destroy(st.drv);
}

int main(int argc, char **argv) {
    bool threads = true;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc) g_samples = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) g_batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-threads") == 0) threads = false;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: bench_pool [--samples N] [--batch N] [--no-threads] [--json FILE]\n");
            return 2;
        }
    }
    g_res = bench_results_create("bench_pool");
    if (g_samples < 3) g_samples = 3;
    if (g_batch < 1) g_batch = 1;
    printf("bench_pool: cached malloc+free pair, medians of %d batches of %d pairs (dmm %s)\n", g_samples, g_batch,
           dmm_version_string());
    stack st;
    stack_open(&st, false);
    printf("\n-- single thread, host driver (target: pool median <= 60 ns) --\n");
    double pn1[N_SIZES], gn1[N_SIZES];
    size_sweep(st.pool, "", pn1, gn1);
    uint64_t calls = 0;
    double mx = mixed_ns(st.pool, &calls);
    bench_results_add(g_res, "pool.mixed.op_ns", "ns", true, mx, g_samples, g_mad, -1);
    bench_results_add(g_res, "pool.mixed.driver_calls_per_1k", "calls", true,
                      1000.0 * (double)calls / ((double)g_samples * g_batch), 1, 0, -1);
    printf("\n-- mixed: 256 live slots, sizes 512 B - 4 MiB, random replace --\n");
    printf("pool: %.1f ns per operation (median); driver calls during the measurement: %llu in %d operations "
           "(%.3f per 1,000: the random walk keeps reaching new peaks and layouts)\n",
           mx, (unsigned long long)calls, g_samples * g_batch, 1000.0 * (double)calls / ((double)g_samples * g_batch));
    stack_close(&st);
    /* from here on the process is multi-threaded (sections 3-6) */
    alive2_bench();
    worker_bench();
    if (threads) threads_bench();

    /* the GPU: the pool over the CUDA driver vs the driver's own stream-ordered pool */
    stack gs;
    if (stack_open(&gs, true) != 0) {
        printf("\n-- GPU: skipped (%s) --\n", dmm_last_error());
        return bench_results_finish(g_res, json) == 0 ? 0 : 1;
    }
    char err[256];
    dmm_cuda_ref *ref = NULL;
    if (dmm_cuda_ref_open(&ref, err, sizeof err) != 0) {
        printf("\n-- GPU: skipped (%s) --\n", err);
        stack_close(&gs);
        return bench_results_finish(g_res, json) == 0 ? 0 : 1;
    }
    dmm_cuda_device_info dinfo;
    memset(&dinfo, 0, sizeof dinfo);
    dinfo.size = sizeof dinfo;
    if (dmm_cuda_device_query(0, &dinfo) == DMM_OK) {
        char gpu[300];
        snprintf(gpu, sizeof gpu, "GPU %s", dinfo.name);
        bench_results_host(g_res, gpu);
    }
    void *stream = dmm_cuda_ref_stream_create(ref);
    printf("\n-- GPU: pool over the CUDA driver vs cuMemAllocAsync+cuMemFreeAsync, same stream (target: ratio "
           "<= 0.15) --\n");
    printf("%10s %12s %14s %10s\n", "bytes", "pool ns", "driver ns", "ratio");
    for (int i = 0; i < N_SIZES; i++) {
        uint64_t gcalls = 0;
        double pn = pool_pair_ns(gs.pool, g_sizes[i], (dmm_stream)stream, &gcalls);
        double pmad = g_mad;
        dmm_cuda_ref_bind(ref);
        double rn = dmm_cuda_ref_pair_ns(ref, g_sizes[i], stream, g_samples, g_batch);
        printf("%10zu %12.1f %14.1f %10.3f%s\n", g_sizes[i], pn, rn, rn > 0 ? pn / rn : 0.0,
               gcalls ? "  (driver calls during the measurement!)" : "");
        char id[64];
        snprintf(id, sizeof id, "gpu.pool.pair_ns.%zu", g_sizes[i]);
        bench_results_add(g_res, id, "ns", true, pn, g_samples, pmad, rn);
        snprintf(id, sizeof id, "gpu.driver.pair_ns.%zu", g_sizes[i]);
        if (rn > 0) bench_results_add(g_res, id, "ns", true, rn, g_samples, 0, -1);
    }
    dmm_cuda_ref_sync(ref, stream);
    /* the pool's fence on this stream must complete before destroy: the stream is idle now */
    stack_close(&gs);
    dmm_cuda_ref_stream_destroy(ref, stream);
    dmm_cuda_ref_close(ref);
    return bench_results_finish(g_res, json) == 0 ? 0 : 1;
}
