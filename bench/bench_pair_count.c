/* SPDX-License-Identifier: Apache-2.0 */
/* bench/bench_pair_count.c — N cached malloc+free pairs of one size on one stream while a second
 * thread is alive (bench_pool's section 3 without the clock): a fixed workload whose instruction
 * count a tool measures, since this is repeatable where seconds on a shared machine are not.
 *
 *   usage: bench_pair_count [BYTES [PAIRS]]          (defaults 65536, 100000)
 *   instructions per pair: run it under `valgrind --tool=callgrind` with PAIRS = 10000 and 20000 and
 *   divide the difference of the two totals by 10000 (the set-up and the warm-up cancel out).
 *
 * The arena reserves 4 GiB only (valgrind refuses bench_pool's 64 GiB). Nothing is printed but
 * failures; exit 0 on success.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmm/dmm.h"

static void *idle_main(void *arg) {
    (void)arg;
    for (;;) pause(); /* exists, and nothing else: the process is multi-threaded from here on */
    return NULL;
}

__attribute__((noinline)) static int pairs(dmm_pool *pool, size_t bytes, long n) {
    for (long i = 0; i < n; i++) {
        void *p = NULL;
        if (dmm_pool_malloc(pool, bytes, NULL, &p) != DMM_OK) return -1;
        __asm__ volatile("" : : "r"(p) : "memory");
        if (dmm_pool_free(pool, p, NULL) != DMM_OK) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : 65536;
    long n = argc > 2 ? atol(argv[2]) : 100000;
    if (bytes == 0 || n < 0) {
        fprintf(stderr, "usage: bench_pair_count [BYTES [PAIRS]]\n");
        return 2;
    }
    pthread_t idle;
    if (pthread_create(&idle, NULL, idle_main, NULL) != 0) {
        fprintf(stderr, "bench_pair_count: pthread_create failed\n");
        return 1;
    }
    dmm_driver *drv = NULL;
    dmm_mechanism *arena = NULL;
    dmm_pool *pool = NULL;
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)4 << 30;
    ac.cache_limit_bytes = 8u << 20;
    if (dmm_host_driver_create(NULL, &drv) != DMM_OK || dmm_arena_create(drv, &ac, &arena) != DMM_OK ||
        dmm_pool_create(arena, drv, NULL, &pool) != DMM_OK || pairs(pool, bytes, 1000) != 0 ||
        pairs(pool, bytes, n) != 0) {
        fprintf(stderr, "bench_pair_count: %s\n", dmm_last_error());
        return 1;
    }
    _exit(0); /* the idle thread never ends: leave without tearing down (nothing is measured past here) */
}
