/* SPDX-License-Identifier: Apache-2.0 */
/* tests/stress/test_pool_stress.c — a seeded 8-thread mix of malloc, free (on the block's stream and
 * on others), trim and empty_cache over one pool on the real host driver.
 *
 * Eight threads share four streams (two per stream: their heap's lock is contended; the streams
 * contend for moves and trims). Each thread writes a pattern unique to (thread, block) into every
 * block it gets — all of a small block, the first 64 KiB and one word per 64 KiB of a large one —
 * and verifies it right before freeing: a block handed out twice, or a chunk unmapped or moved
 * under a live block, shows up as a wrong word (or a fault). A retention limit of 0.1 % keeps the
 * pool moving chunks all the time; a second run lets growth commit chunks of up to 16 MiB; a third
 * runs over the fault driver while the threads hold and release every event at random (fences
 * pending for stretches, as on a GPU), so that growth aliases fenced chunks of its own stream: an
 * old place handed out while its memory lives on elsewhere would break a pattern; a fourth adds the
 * stock thread (stock_bytes), growing beside the threads and their trims; a fifth runs the mix again
 * over the layout the first pass of it grew through (dmm_pool_warm_layout), committed ahead before the
 * threads start and again by the threads now and then on their own streams, so that growths take and
 * give back handles ahead while trims give them back too (only the first growth, made before the
 * threads start, is sure to take some: the rest is up to the schedule). At the end: every block
 * freed, the invariant check passes, the pool's, the arena's and the driver's counts are back to
 * zero. Run under TSan and ASan by `make test`. Seed: DMM_STRESS_SEED (default 42).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomics.h"
#include "testkit.h"

#define THREADS 8
#define STREAMS 4
#define OPS 6000
#define LIVE 48
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

typedef struct shared {
    dmm_driver *drv;
    dmm_driver *host;  /* drv wraps it when `flap` */
    bool flap;         /* hold and release every event at random */
    dmm_mechanism *arena;
    dmm_pool *pool;
    dmm_stream streams[STREAMS];
    const dmm_pool_span *warm; /* a warm layout the threads commit ahead again now and then */
    size_t nwarm;
    uint64_t seed;
    _Atomic uint64_t errors, mallocs, frees, cross, trims;
} shared;

typedef struct slot {
    uint64_t *p;
    size_t bytes;
    uint64_t tag;
} slot;

typedef struct thread_arg {
    shared *sh;
    int id;
    pthread_t th;
} thread_arg;

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* the words of a block that carry the pattern */
#define HEAD (64 * KIB)
#define STRIDE (64 * KIB)

static void stamp(slot *s) {
    size_t words = s->bytes / 8;
    size_t head = s->bytes < HEAD ? words : HEAD / 8;
    for (size_t i = 0; i < head; i++) s->p[i] = s->tag ^ i;
    for (size_t i = head; i < words; i += STRIDE / 8) s->p[i] = s->tag ^ i;
    if (words > 0) s->p[words - 1] = s->tag ^ (words - 1);
}

static bool verify(const slot *s) {
    size_t words = s->bytes / 8;
    size_t head = s->bytes < HEAD ? words : HEAD / 8;
    for (size_t i = 0; i < head; i++)
        if (s->p[i] != (s->tag ^ i)) return false;
    for (size_t i = head; i < words; i += STRIDE / 8)
        if (s->p[i] != (s->tag ^ i)) return false;
    return words == 0 || s->p[words - 1] == (s->tag ^ (words - 1));
}

static void *worker(void *arg) {
    thread_arg *a = arg;
    shared *sh = a->sh;
    uint64_t x = sh->seed * 0x9E3779B97F4A7C15ull + (uint64_t)a->id * 7919 + 1;
    dmm_stream mine = sh->streams[a->id % STREAMS];
    slot live[LIVE];
    memset(live, 0, sizeof live);
    uint64_t serial = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rnd(&x);
        int k = (int)(r % LIVE);
        unsigned what = (unsigned)((r >> 8) % 1000);
        if (what < 6) {
            uint64_t target = (rnd(&x) % 64) * MIB;
            dmm_status s = dmm_pool_trim(sh->pool, target, NULL);
            if (s != DMM_OK) dmm_atomic_add_seq_cst(&sh->errors, 1);
            dmm_atomic_add_seq_cst(&sh->trims, 1);
        } else if (what < 7) {
            if (dmm_pool_empty_cache(sh->pool, NULL) != DMM_OK) dmm_atomic_add_seq_cst(&sh->errors, 1);
        } else if (what < 17 && sh->flap) {
            if (dmm_fault_hold_events(sh->drv, (r >> 40) % 4 != 0) != DMM_OK) dmm_atomic_add_seq_cst(&sh->errors, 1);
        } else if (what >= 17 && what < 20 && sh->warm != NULL) {
            dmm_status s = dmm_pool_warm_layout(sh->pool, mine, sh->warm, sh->nwarm, NULL);
            if (s != DMM_OK) {
                fprintf(stderr, "thread %d: warm layout failed: %s\n", a->id, dmm_last_error());
                dmm_atomic_add_seq_cst(&sh->errors, 1);
            }
        } else if (live[k].p != NULL) {
            if (!verify(&live[k])) {
                fprintf(stderr, "thread %d: block %p of %zu bytes lost its pattern\n", a->id, (void *)live[k].p,
                        live[k].bytes);
                dmm_atomic_add_seq_cst(&sh->errors, 1);
            }
            dmm_stream on = mine;
            if ((r >> 20) % 10 == 0) { /* free on another stream: its event gates the reuse */
                on = sh->streams[(a->id + 1 + (int)((r >> 24) % (STREAMS - 1))) % STREAMS];
                dmm_atomic_add_seq_cst(&sh->cross, 1);
            }
            if (dmm_pool_free(sh->pool, live[k].p, on) != DMM_OK) {
                fprintf(stderr, "thread %d: free failed: %s\n", a->id, dmm_last_error());
                dmm_atomic_add_seq_cst(&sh->errors, 1);
            }
            live[k].p = NULL;
            dmm_atomic_add_seq_cst(&sh->frees, 1);
        } else {
            /* log-uniform 512 B .. 4 MiB, plus a random tail */
            size_t bytes = (size_t)512 << ((r >> 12) % 14);
            bytes += (size_t)((r >> 32) % bytes);
            bytes &= ~(size_t)7;
            void *p = NULL;
            dmm_status s = dmm_pool_malloc(sh->pool, bytes, mine, &p);
            if (s != DMM_OK) {
                fprintf(stderr, "thread %d: malloc of %zu failed: %s\n", a->id, bytes, dmm_last_error());
                dmm_atomic_add_seq_cst(&sh->errors, 1);
                continue;
            }
            live[k].p = p;
            live[k].bytes = bytes;
            live[k].tag = ((uint64_t)a->id << 56) ^ (++serial << 20) ^ 0x5A5A5A5A;
            stamp(&live[k]);
            dmm_atomic_add_seq_cst(&sh->mallocs, 1);
        }
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k].p != NULL) {
            if (!verify(&live[k])) dmm_atomic_add_seq_cst(&sh->errors, 1);
            if (dmm_pool_free(sh->pool, live[k].p, mine) != DMM_OK) dmm_atomic_add_seq_cst(&sh->errors, 1);
            dmm_atomic_add_seq_cst(&sh->frees, 1);
        }
    return NULL;
}

/* One mix; `resident_bytes` (may be 0): bytes malloc'ed on the null stream before the threads start and
 * freed after they end; `warm`: a layout committed ahead first and by the threads now and then;
 * *layout (may be NULL): the layout the pool grew through, read after the threads are done
 * (malloc'ed). */
static void run_mix_over(uint64_t max_chunk, bool flap, uint64_t stock, size_t resident_bytes,
                         const dmm_pool_span *warm, size_t nwarm, dmm_pool_span **layout, size_t *nlayout) {
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.warm = warm;
    sh.nwarm = nwarm;
    const char *seed = getenv("DMM_STRESS_SEED");
    sh.seed = seed != NULL ? strtoull(seed, NULL, 10) : 42;
    sh.flap = flap;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &sh.host));
    sh.drv = sh.host;
    if (flap) DMM_OK_OR_FAIL(dmm_fault_driver_create(sh.host, &sh.drv));
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)64 << 30;
    ac.cache_limit_bytes = 8 * MIB;
    DMM_OK_OR_FAIL(dmm_arena_create(sh.drv, &ac, &sh.arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 1; /* keep it moving chunks */
    pc.settle_permille = stock ? 100 : 1; /* a fixed limit; with a stock one that rises as chunks move, so
                                             that the stock, which grows only inside the limit, finds room */
    pc.max_chunk_bytes = max_chunk;
    pc.stock_bytes = stock;
    DMM_OK_OR_FAIL(dmm_pool_create(sh.arena, sh.drv, &pc, &sh.pool));
    sh.streams[0] = NULL;
    for (int i = 1; i < STREAMS; i++) DMM_OK_OR_FAIL(sh.drv->ops->stream_create(sh.drv, &sh.streams[i]));
    /* What the schedule cannot change is checked before the threads start. Over a layout: the null
     * stream's heap is the pool's first in both passes, and the resident block its first growth, which
     * takes its handles ahead. With a stock: a small growth after the resident block posts a stock,
     * which the stock thread commits. */
    if (warm != NULL) DMM_OK_OR_FAIL(dmm_pool_warm_layout(sh.pool, NULL, warm, nwarm, NULL));
    void *resident = NULL;
    if (resident_bytes) {
        DMM_OK_OR_FAIL(dmm_pool_malloc(sh.pool, resident_bytes, NULL, &resident));
        dmm_atomic_add_seq_cst(&sh.mallocs, 1);
    }
    if (stock) {
        void *small = NULL;
        DMM_OK_OR_FAIL(dmm_pool_malloc(sh.pool, MIB, NULL, &small));
        dmm_status s;
        while ((s = dmm_pool_stock_sync(sh.pool)) == DMM_ERR_BUSY) {
        }
        DMM_OK_OR_FAIL(s);
        DMM_OK_OR_FAIL(dmm_pool_free(sh.pool, small, NULL));
        dmm_atomic_add_seq_cst(&sh.mallocs, 1);
        dmm_atomic_add_seq_cst(&sh.frees, 1);
    }
    if (stock || warm != NULL) {
        dmm_pool_stats first;
        memset(&first, 0, sizeof first);
        first.size = sizeof first;
        DMM_OK_OR_FAIL(dmm_pool_stats_get(sh.pool, &first));
        if (stock) assert_true(first.stock_grows > 0);
        if (warm != NULL) assert_true(first.layout_adopted > 0);
    }

    thread_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i].sh = &sh;
        args[i].id = i;
        assert_int_equal(pthread_create(&args[i].th, NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(args[i].th, NULL);
    if (resident != NULL) {
        DMM_OK_OR_FAIL(dmm_pool_free(sh.pool, resident, NULL));
        dmm_atomic_add_seq_cst(&sh.frees, 1);
    }
    assert_int_equal(dmm_atomic_load_seq_cst(&sh.errors), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&sh.mallocs), dmm_atomic_load_seq_cst(&sh.frees));
    if (layout != NULL) {
        DMM_OK_OR_FAIL(dmm_pool_layout(sh.pool, NULL, 0, nlayout));
        *layout = calloc(*nlayout ? *nlayout : 1, sizeof **layout);
        assert_non_null(*layout);
        DMM_OK_OR_FAIL(dmm_pool_layout(sh.pool, *layout, *nlayout, nlayout));
    }

    if (flap) DMM_OK_OR_FAIL(dmm_fault_hold_events(sh.drv, false)); /* the work is done */
    for (int i = 0; i < 3; i++) /* also makes the cross-stream frees reusable and the old places go */
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(sh.pool, NULL));
    DMM_OK_OR_FAIL(dmm_pool_check(sh.pool));
    dmm_pool_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.size = sizeof ps;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(sh.pool, &ps));
    printf("max chunk %llu MiB, stock %llu MiB, seed %llu: %llu mallocs, %llu frees (%llu on another stream), %llu trims; "
           "%llu grows (%llu of the stock), %llu chunks committed, %llu moved, %llu aliased; peak committed %lld bytes, "
           "peak physical %lld; warm layout of %zu spans: %llu taken, %llu given back\n",
           (unsigned long long)(max_chunk >> 20), (unsigned long long)(stock >> 20), (unsigned long long)sh.seed, (unsigned long long)ps.mallocs, (unsigned long long)ps.frees,
           (unsigned long long)ps.cross_stream_frees, (unsigned long long)dmm_atomic_load_seq_cst(&sh.trims),
           (unsigned long long)ps.grows, (unsigned long long)ps.stock_grows, (unsigned long long)ps.chunks_committed, (unsigned long long)ps.chunks_moved,
           (unsigned long long)ps.chunks_aliased,
           (long long)ps.committed_bytes.peak, (long long)ps.physical_bytes.peak, nwarm,
           (unsigned long long)ps.layout_adopted, (unsigned long long)ps.layout_released);
    assert_int_equal(ps.mallocs, dmm_atomic_load_seq_cst(&sh.mallocs));
    assert_int_equal(ps.allocations.current, 0);
    assert_int_equal(ps.allocated_bytes.current, 0);
    assert_int_equal(ps.requested_bytes.current, 0);
    assert_int_equal(ps.pending_blocks.current, 0);
    assert_int_equal(ps.committed_bytes.current, 0);
    assert_int_equal(ps.physical_bytes.current, 0);
    assert_true(ps.chunks_moved > 0); /* the mix really moved memory between places */
    if (flap) assert_true(ps.chunks_aliased > 0); /* and aliased it */
    DMM_OK_OR_FAIL(dmm_pool_destroy(sh.pool));
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(sh.arena, &as));
    assert_int_equal(as.allocations.current, 0);
    assert_int_equal(as.owned_bytes.current, 0);
    assert_int_equal(as.mapped_bytes.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(sh.arena));
    for (int i = 1; i < STREAMS; i++) DMM_OK_OR_FAIL(sh.drv->ops->stream_destroy(sh.drv, sh.streams[i]));
    dmm_test_census_zero(sh.drv);
    if (flap) dmm_driver_destroy(sh.drv);
    dmm_driver_destroy(sh.host);
}

/* with a stock, 512 MiB held for the whole mix: a live peak whose 1/128 (the stock, ~6 MiB) is larger
 * than most of the mix's requests (512 B to 8 MiB), whose growths then post stocks */
static void run_mix(uint64_t max_chunk, bool flap, uint64_t stock) {
    run_mix_over(max_chunk, flap, stock, stock ? 512 * MIB : 0, NULL, 0, NULL, NULL);
}

/* every chunk one quantum (the default) */
static void eight_threads_malloc_free_trim(void **state) {
    (void)state;
    run_mix(0, false, 0);
}

/* chunks up to 16 MiB: growth by one handle per need, moves of whole chunks of several sizes */
static void eight_threads_with_variable_chunks(void **state) {
    (void)state;
    run_mix(16 * MIB, false, 0);
}

/* events held and released at random: growth aliases fenced chunks of its own stream */
static void eight_threads_with_pending_fences(void **state) {
    (void)state;
    run_mix(0, true, 0);
}

/* with a stock: its thread grows, and its requests are dropped by trims and empty_caches, beside them */
static void eight_threads_with_a_stock(void **state) {
    (void)state;
    run_mix(16 * MIB, true, 64 * MIB);
}

/* over a warm layout: the first pass's layout ahead, taken, given back and committed again by the
 * threads while they grow, trim and empty the cache */
static void eight_threads_over_a_warm_layout(void **state) {
    (void)state;
    dmm_pool_span *layout = NULL;
    size_t n = 0;
    run_mix_over(16 * MIB, true, 0, 32 * MIB, NULL, 0, &layout, &n);
    assert_true(n > 0);
    run_mix_over(16 * MIB, true, 0, 32 * MIB, layout, n, NULL, NULL);
    free(layout);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_threads_malloc_free_trim),
        cmocka_unit_test(eight_threads_with_variable_chunks),
        cmocka_unit_test(eight_threads_with_pending_fences),
        cmocka_unit_test(eight_threads_with_a_stock),
        cmocka_unit_test(eight_threads_over_a_warm_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
