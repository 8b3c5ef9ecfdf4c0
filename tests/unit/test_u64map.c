/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_u64map.c — the core u64 → u64 hash map (src/core/u64map.h): insert, find,
 * overwrite, remove, growth, deletion without tombstones (backward shift, also across the table's
 * wrap-around), iteration, promises, and refusals that change nothing. A seeded random sequence of
 * operations is checked against a plain array after every step. */
#include <stdlib.h>
#include <string.h>

#include "core/u64map.h"
#include "testkit.h"

/* Every used slot is reachable by a lookup and the counts agree: count = used slots, load ≤ 1/2. */
static void check_map(const dmm_u64map *m) {
    size_t used = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        used++;
        uint64_t v = ~m->slots[i].value;
        assert_true(dmm__u64map_find(m, m->slots[i].key, &v));
        assert_true(v == m->slots[i].value);
    }
    assert_int_equal(used, m->count);
    assert_true(m->cap == 0 || (m->cap & (m->cap - 1)) == 0);
    assert_true((m->count + m->pending) * 2 <= m->cap || (m->cap == 0 && m->count + m->pending == 0));
}

static void empty_map_finds_nothing_and_every_key_is_valid(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    uint64_t v = 7;
    assert_false(dmm__u64map_find(&m, 0, &v));
    assert_false(dmm__u64map_remove(&m, 0, NULL));
    assert_false(dmm__u64map_set(&m, 0, 1));
    assert_int_equal(v, 7);
    assert_true(dmm__u64map_insert(&m, 0, 10));
    assert_true(dmm__u64map_insert(&m, UINT64_MAX, 20));
    assert_true(dmm__u64map_find(&m, 0, &v));
    assert_int_equal(v, 10);
    assert_true(dmm__u64map_find(&m, UINT64_MAX, &v));
    assert_int_equal(v, 20);
    assert_int_equal(dmm__u64map_count(&m), 2);
    check_map(&m);
    dmm__u64map_fini(&m);
    assert_int_equal(m.cap, 0);
    assert_false(dmm__u64map_find(&m, 0, NULL));
}

static void insert_overwrites_and_remove_returns_the_value(void **state) {
    (void)state;
    dmm_u64map m = {0}; /* a zeroed map is an empty map */
    assert_true(dmm__u64map_insert(&m, 42, 1));
    assert_true(dmm__u64map_insert(&m, 42, 2)); /* overwrite, not a second key */
    assert_int_equal(dmm__u64map_count(&m), 1);
    assert_true(dmm__u64map_set(&m, 42, 3));
    assert_false(dmm__u64map_set(&m, 43, 3)); /* set never adds */
    uint64_t v = 0;
    assert_true(dmm__u64map_remove(&m, 42, &v));
    assert_int_equal(v, 3);
    assert_false(dmm__u64map_remove(&m, 42, &v));
    assert_false(dmm__u64map_find(&m, 42, NULL));
    assert_int_equal(dmm__u64map_count(&m), 0);
    check_map(&m);
    dmm__u64map_fini(&m);
}

static void grows_and_keeps_every_key(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    const uint64_t n = 20000;
    size_t last_cap = 0;
    unsigned grew = 0;
    for (uint64_t i = 0; i < n; i++) {
        assert_true(dmm__u64map_insert(&m, i << 21, i)); /* 2 MiB-aligned "addresses" */
        if (m.cap != last_cap) grew++;
        last_cap = m.cap;
    }
    assert_true(grew >= 5);
    check_map(&m);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        assert_true(dmm__u64map_find(&m, i << 21, &v));
        assert_true(v == i);
        assert_false(dmm__u64map_find(&m, (i << 21) + 1, NULL));
    }
    dmm__u64map_fini(&m);
}

static void removal_leaves_no_tombstones(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    /* Churn: a million keys come and go, never more than 6 at once. With tombstones the table would
     * fill with dead slots and grow or slow down; with backward shift it stays at its first size
     * and every slot not holding a live key is empty. */
    for (uint64_t i = 0; i < 1000000; i++) {
        assert_true(dmm__u64map_insert(&m, i * 0x9e3779b97f4a7c15ULL, i));
        if (i >= 6) assert_true(dmm__u64map_remove(&m, (i - 6) * 0x9e3779b97f4a7c15ULL, NULL));
    }
    assert_int_equal(dmm__u64map_count(&m), 6);
    assert_int_equal(m.cap, 16);
    size_t used = 0;
    for (size_t i = 0; i < m.cap; i++) used += m.slots[i].used;
    assert_int_equal(used, 6);
    check_map(&m);
    dmm__u64map_fini(&m);
}

/* A seeded random mix over a small key space (many probe-run collisions and wrap-arounds in a small
 * table), checked against a plain array after every operation. */
static void random_operations_match_a_reference(void **state) {
    (void)state;
    enum { KEYS = 96, STEPS = 200000 };
    bool present[KEYS] = {false};
    uint64_t value[KEYS] = {0};
    dmm_u64map m;
    dmm__u64map_init(&m);
    uint64_t x = 0x2545f4914f6cdd1dULL;
    for (int step = 0; step < STEPS; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned k = (unsigned)(x % KEYS), op = (unsigned)((x >> 32) % 3);
        uint64_t key = (uint64_t)k << 12, got = 0;
        if (op == 0) {
            assert_true(dmm__u64map_insert(&m, key, x));
            present[k] = true;
            value[k] = x;
        } else if (op == 1) {
            assert_int_equal(dmm__u64map_remove(&m, key, &got), present[k]);
            if (present[k]) assert_true(got == value[k]);
            present[k] = false;
        } else {
            assert_int_equal(dmm__u64map_find(&m, key, &got), present[k]);
            if (present[k]) assert_true(got == value[k]);
        }
        if (step % 64 == 0) {
            size_t live = 0;
            for (unsigned j = 0; j < KEYS; j++) {
                live += present[j];
                assert_int_equal(dmm__u64map_find(&m, (uint64_t)j << 12, NULL), present[j]);
            }
            assert_int_equal(dmm__u64map_count(&m), live);
            check_map(&m);
        }
    }
    dmm__u64map_fini(&m);
}

static void iteration_visits_every_key_once(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    size_t at = 0;
    assert_false(dmm__u64map_next(&m, &at, NULL, NULL)); /* empty */
    enum { N = 500 };
    for (uint64_t i = 0; i < N; i++) assert_true(dmm__u64map_insert(&m, i * 3 + 1, i));
    for (uint64_t i = 0; i < N; i += 5) assert_true(dmm__u64map_remove(&m, i * 3 + 1, NULL));
    unsigned seen[N] = {0};
    uint64_t k, v;
    size_t visits = 0;
    for (at = 0; dmm__u64map_next(&m, &at, &k, &v);) {
        assert_true(k == v * 3 + 1);
        assert_true(v < N);
        seen[v]++;
        visits++;
        assert_true(dmm__u64map_set(&m, k, v)); /* a set of the visited key is allowed */
    }
    assert_int_equal(visits, dmm__u64map_count(&m));
    for (unsigned i = 0; i < N; i++) assert_int_equal(seen[i], i % 5 == 0 ? 0 : 1);
    dmm__u64map_fini(&m);
}

static void promised_inserts_cannot_fail_and_take_keeps_the_promise(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    assert_true(dmm__u64map_reserve(&m, 40));
    size_t cap = m.cap;
    assert_int_equal(m.pending, 40);
    assert_true(cap >= 80);
    for (uint64_t i = 0; i < 40; i++) dmm__u64map_insert_reserved(&m, i, i + 100); /* no growth */
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.pending, 0);
    assert_int_equal(dmm__u64map_count(&m), 40);
    uint64_t v = 0;
    assert_true(dmm__u64map_take(&m, 7, &v)); /* out, its slot still promised */
    assert_int_equal(v, 107);
    assert_false(dmm__u64map_find(&m, 7, NULL));
    assert_int_equal(m.pending, 1);
    assert_false(dmm__u64map_take(&m, 7, &v)); /* absent: no promise added */
    assert_int_equal(m.pending, 1);
    dmm__u64map_insert_reserved(&m, 7, v); /* back again */
    assert_int_equal(m.pending, 0);
    assert_true(dmm__u64map_find(&m, 7, &v));
    assert_int_equal(v, 107);
    assert_true(dmm__u64map_reserve(&m, 3));
    dmm__u64map_unreserve(&m, 3);
    assert_int_equal(m.pending, 0);
    check_map(&m);
    dmm__u64map_fini(&m);
}

static void a_refused_reserve_changes_nothing(void **state) {
    (void)state;
    dmm_u64map m;
    dmm__u64map_init(&m);
    for (uint64_t i = 0; i < 10; i++) assert_true(dmm__u64map_insert(&m, i, i));
    dmm_u64map before = m;
    assert_false(dmm__u64map_reserve(&m, SIZE_MAX / 2)); /* no host has this much memory */
    assert_memory_equal(&m, &before, sizeof m);
    for (uint64_t i = 0; i < 10; i++) assert_true(dmm__u64map_find(&m, i, NULL));
    check_map(&m);
    dmm__u64map_fini(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_map_finds_nothing_and_every_key_is_valid),
        cmocka_unit_test(insert_overwrites_and_remove_returns_the_value),
        cmocka_unit_test(grows_and_keeps_every_key),
        cmocka_unit_test(removal_leaves_no_tombstones),
        cmocka_unit_test(random_operations_match_a_reference),
        cmocka_unit_test(iteration_visits_every_key_once),
        cmocka_unit_test(promised_inserts_cannot_fail_and_take_keeps_the_promise),
        cmocka_unit_test(a_refused_reserve_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
