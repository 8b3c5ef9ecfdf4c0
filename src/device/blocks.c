/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/blocks.c — the pool's live blocks: address → rounded size, requested size, stream.
 *
 * What it owns: DMM_DEVICE_BLOCK_SHARDS shards, each a lock, a map (core/u64map.h) from address to a
 * record index, and the records with a free list threaded through them. Only pool blocks are here:
 * tag and graph blocks live in their segments' own tables (segment.c). Kept only once tracking is
 * on (dmm_device_track_blocks); it is never turned off, so no entry can outlive its block.
 *
 * Why: the pool keeps its blocks private (src/pool), yet a snapshot in PyTorch's layout lays every
 * block out in address order inside its segment. The trade-off, paid only while tracking: a malloc
 * and a free of the pool take one more lock, the shard's (chosen by a hash of the address, so threads
 * on their own streams seldom share one), and make no allocation once the shard's arrays have grown
 * to the live count: a device malloc/free pair went from 40 to 75-115 ns on the host driver.
 *
 * Invariants (per shard, its lock): |at| = live records; every value of `at` names a record with
 * len > 0; the free list holds exactly the other records of [0, n); n ≤ cap.
 */
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "context.h"

static device_block_shard *shard_of(dmm_device *c, const void *ptr) {
    uint64_t h = ((uint64_t)(uintptr_t)ptr >> 9) * 0x9E3779B97F4A7C15ull;
    return &c->pool_blocks[h >> 58]; /* 64 shards: the top 6 bits */
}

dmm_status dmm__device_blocks_open(dmm_device *c) {
    _Static_assert(DMM_DEVICE_BLOCK_SHARDS == 64, "shard_of takes 6 bits");
    size_t bytes = DMM_DEVICE_BLOCK_SHARDS * sizeof(device_block_shard);
    c->pool_blocks = aligned_alloc(_Alignof(device_block_shard), bytes);
    if (c->pool_blocks == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for the table of pool blocks");
    memset(c->pool_blocks, 0, bytes);
    for (int i = 0; i < DMM_DEVICE_BLOCK_SHARDS; i++) {
        pthread_mutex_init(&c->pool_blocks[i].mu, NULL);
        dmm__u64map_init(&c->pool_blocks[i].at);
    }
    return DMM_OK;
}

void dmm__device_blocks_close(dmm_device *c) {
    if (c->pool_blocks == NULL) return;
    for (int i = 0; i < DMM_DEVICE_BLOCK_SHARDS; i++) {
        device_block_shard *sh = &c->pool_blocks[i];
        dmm__u64map_fini(&sh->at);
        free(sh->recs);
        pthread_mutex_destroy(&sh->mu);
    }
    free(c->pool_blocks);
    c->pool_blocks = NULL;
}

void dmm__device_blocks_add(dmm_device *c, const void *ptr, uint64_t len, uint64_t req, dmm_stream stream,
                            uint32_t context) {
    device_block_shard *sh = shard_of(c, ptr);
    pthread_mutex_lock(&sh->mu);
    if (!dmm__u64map_reserve(&sh->at, 1)) goto untracked;
    size_t k;
    if (sh->free_head != 0) {
        k = sh->free_head - 1;
        sh->free_head = (size_t)sh->recs[k].req;
    } else {
        if (sh->n == sh->cap) {
            size_t nc = sh->cap ? sh->cap * 2 : 64;
            device_block *r = realloc(sh->recs, nc * sizeof *r);
            if (r == NULL) {
                dmm__u64map_unreserve(&sh->at, 1);
                goto untracked;
            }
            sh->recs = r;
            sh->cap = nc;
        }
        k = sh->n++;
    }
    sh->recs[k] = (device_block){len, req, stream, context};
    dmm__u64map_insert_reserved(&sh->at, (uint64_t)(uintptr_t)ptr, k);
    pthread_mutex_unlock(&sh->mu);
    return;
untracked:
    pthread_mutex_unlock(&sh->mu);
}

void dmm_device_track_blocks(dmm_device *c) {
    if (c != NULL) dmm_atomic_store_relaxed(&c->track_blocks, 1);
}

bool dmm__device_blocks_take(dmm_device *c, const void *ptr, device_block *out) {
    device_block_shard *sh = shard_of(c, ptr);
    pthread_mutex_lock(&sh->mu);
    uint64_t k = 0;
    bool found = dmm__u64map_remove(&sh->at, (uint64_t)(uintptr_t)ptr, &k);
    if (found) {
        if (out != NULL) *out = sh->recs[k];
        sh->recs[k].len = 0;
        sh->recs[k].req = sh->free_head;
        sh->free_head = (size_t)k + 1;
    }
    pthread_mutex_unlock(&sh->mu);
    return found;
}

static int by_addr(const void *x, const void *y) {
    uintptr_t a = ((const device_block_at *)x)->addr, b = ((const device_block_at *)y)->addr;
    return a < b ? -1 : a > b;
}

size_t dmm__device_blocks_collect(dmm_device *c, device_block_at **out) {
    *out = NULL;
    size_t n = 0, cap = 0;
    device_block_at *v = NULL;
    for (int i = 0; i < DMM_DEVICE_BLOCK_SHARDS; i++) {
        device_block_shard *sh = &c->pool_blocks[i];
        pthread_mutex_lock(&sh->mu);
        size_t need = n + dmm__u64map_count(&sh->at);
        if (need > cap) {
            size_t nc = need * 2 + 16;
            device_block_at *w = realloc(v, nc * sizeof *w);
            if (w == NULL) {
                pthread_mutex_unlock(&sh->mu);
                free(v);
                return SIZE_MAX;
            }
            v = w;
            cap = nc;
        }
        size_t at = 0;
        uint64_t key, k;
        while (dmm__u64map_next(&sh->at, &at, &key, &k)) v[n++] = (device_block_at){(uintptr_t)key, sh->recs[k]};
        pthread_mutex_unlock(&sh->mu);
    }
    if (n > 1) qsort(v, n, sizeof *v, by_addr);
    *out = v;
    return n;
}
