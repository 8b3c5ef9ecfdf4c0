/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_spans.c — the span set behind the arena's free list and quarantine: coalescing
 * inserts, refused overlaps, best fit with alignment, carving, and a seeded random model check
 * against a byte map. */
#include "testkit.h"

#include <stdlib.h>
#include <string.h>

#include "core/spans.h"

#define CHECK_SPANS(s, limit)                                                                       \
    do {                                                                                            \
        const char *why_ = dmm__spans_check((s), (limit));                                          \
        if (why_ != NULL) fail_msg("spans broken: %s", why_);                                       \
    } while (0)

static void insert_coalesces_both_sides(void **state) {
    (void)state;
    dmm_spans s;
    dmm__spans_init(&s);
    assert_true(dmm__spans_reserve(&s, 4));
    assert_true(dmm__spans_insert(&s, 0, 100));
    assert_true(dmm__spans_insert(&s, 200, 100));
    assert_int_equal(s.n, 2);
    assert_true(dmm__spans_insert(&s, 100, 100)); /* joins both */
    assert_int_equal(s.n, 1);
    assert_int_equal(s.v[0].off, 0);
    assert_int_equal(s.v[0].len, 300);
    assert_int_equal(s.total, 300);
    assert_true(dmm__spans_insert(&s, 400, 10));
    assert_true(dmm__spans_insert(&s, 390, 10)); /* joins the next only */
    assert_int_equal(s.n, 2);
    assert_int_equal(s.v[1].off, 390);
    assert_int_equal(s.v[1].len, 20);
    CHECK_SPANS(&s, 1000);
    /* overlaps are refused and change nothing */
    assert_false(dmm__spans_insert(&s, 250, 100));
    assert_false(dmm__spans_insert(&s, 395, 1));
    assert_false(dmm__spans_insert(&s, 380, 11));
    assert_int_equal(s.n, 2);
    assert_int_equal(s.total, 320);
    CHECK_SPANS(&s, 1000);
    dmm__spans_fini(&s);
}

static void best_fit_prefers_the_smallest_span(void **state) {
    (void)state;
    dmm_spans s;
    dmm__spans_init(&s);
    assert_true(dmm__spans_reserve(&s, 8));
    assert_true(dmm__spans_insert(&s, 0, 1000));
    assert_true(dmm__spans_insert(&s, 2000, 300));
    assert_true(dmm__spans_insert(&s, 3000, 200));
    uint64_t off = 0;
    assert_true(dmm__spans_take_best_fit(&s, 0, 150, 1, &off));
    assert_int_equal(off, 3000); /* the 200-byte span, not the first fit */
    assert_true(dmm__spans_take_best_fit(&s, 0, 250, 1, &off));
    assert_int_equal(off, 2000);
    assert_false(dmm__spans_take_best_fit(&s, 0, 1001, 1, &off));
    /* alignment is absolute: base + off */
    assert_true(dmm__spans_take_best_fit(&s, 0x10, 100, 256, &off));
    assert_int_equal((0x10 + off) % 256, 0);
    assert_int_equal(off, 0xf0);
    CHECK_SPANS(&s, 4000);
    assert_int_equal(s.total, 1000 + 300 + 200 - 150 - 250 - 100);
    dmm__spans_fini(&s);
}

static void first_fit_takes_the_lowest_span(void **state) {
    (void)state;
    dmm_spans s;
    dmm__spans_init(&s);
    assert_true(dmm__spans_reserve(&s, 8));
    assert_true(dmm__spans_insert(&s, 1000, 2000));
    assert_true(dmm__spans_insert(&s, 4000, 1000));
    uint64_t off = 0;
    assert_true(dmm__spans_take_first_fit(&s, 0, 1000, 1, &off));
    assert_int_equal(off, 1000); /* the lowest span that holds it, not the 1000-byte best fit */
    assert_true(dmm__spans_take_first_fit(&s, 0, 1000, 1, &off));
    assert_int_equal(off, 2000); /* packed after the first */
    assert_true(dmm__spans_take_first_fit(&s, 0, 500, 1, &off));
    assert_int_equal(off, 4000);
    assert_false(dmm__spans_take_first_fit(&s, 0, 501, 1, &off));
    /* alignment is absolute, as for best fit: the first span whose aligned start still fits ([4500,
     * 5000) holds 408 bytes from 0x10 + 4592, too few) */
    assert_true(dmm__spans_insert(&s, 6100, 600));
    assert_true(dmm__spans_take_first_fit(&s, 0x10, 450, 256, &off));
    assert_int_equal((0x10 + off) % 256, 0);
    assert_int_equal(off, 6128);
    CHECK_SPANS(&s, 8000);
    assert_int_equal(s.total, 3000 - 2500 + 600 - 450);
    dmm__spans_fini(&s);
}

static void carve_removes_an_intersection(void **state) {
    (void)state;
    dmm_spans s;
    dmm__spans_init(&s);
    assert_true(dmm__spans_reserve(&s, 8));
    assert_true(dmm__spans_insert(&s, 0, 100));
    assert_true(dmm__spans_insert(&s, 200, 100));
    assert_int_equal(dmm__spans_count_overlapping(&s, 50, 200), 2); /* the pieces the carve below makes */
    assert_int_equal(dmm__spans_count_overlapping(&s, 100, 100), 0);
    assert_int_equal(dmm__spans_count_overlapping(&s, 99, 1), 1);
    assert_int_equal(dmm__spans_count_overlapping(&s, 0, 0), 0);
    assert_int_equal(dmm__spans_carve(&s, 50, 200, NULL, NULL), 50 + 50);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.v[0].len, 50);
    assert_int_equal(s.v[1].off, 250);
    assert_int_equal(dmm__spans_carve(&s, 260, 10, NULL, NULL), 10); /* split */
    assert_int_equal(s.n, 3);
    assert_true(dmm__spans_overlaps(&s, 255, 10));
    assert_false(dmm__spans_overlaps(&s, 260, 10));
    assert_true(dmm__spans_contains(&s, 270, 30));
    assert_false(dmm__spans_contains(&s, 250, 20));
    CHECK_SPANS(&s, 300);
    dmm__spans_fini(&s);
}

static void check_catches_broken_sets(void **state) {
    (void)state;
    dmm_span v[3] = {{0, 10}, {10, 5}, {40, 5}};
    dmm_spans s = {v, 3, 3, 20};
    assert_non_null(dmm__spans_check(&s, 100)); /* touching: not coalesced */
    v[1].off = 20;
    assert_null(dmm__spans_check(&s, 100));
    assert_non_null(dmm__spans_check(&s, 44)); /* outside the reservation */
    s.total = 21;
    assert_non_null(dmm__spans_check(&s, 100));
}

/* A random model check: the span set against a byte map of 4096 units. */
static void random_against_a_byte_map(void **state) {
    (void)state;
    enum { N = 4096 };
    unsigned char *map = calloc(N, 1); /* 1 = in the set */
    dmm_spans s;
    dmm__spans_init(&s);
    srand(12345);
    for (int it = 0; it < 20000; it++) {
        assert_true(dmm__spans_reserve(&s, 1));
        uint64_t off = (uint64_t)(rand() % N), len = (uint64_t)(1 + rand() % 64);
        if (off + len > N) len = N - off;
        int what = rand() % 3;
        if (what == 0) {
            bool free_all = true;
            for (uint64_t i = off; i < off + len; i++) free_all &= map[i] == 0;
            assert_int_equal(dmm__spans_insert(&s, off, len), free_all);
            if (free_all) memset(map + off, 1, len);
        } else if (what == 1) {
            uint64_t expect = 0;
            for (uint64_t i = off; i < off + len; i++) expect += map[i];
            assert_int_equal(dmm__spans_carve(&s, off, len, NULL, NULL), expect);
            memset(map + off, 0, len);
        } else {
            uint64_t align = (uint64_t)1 << (rand() % 5), got;
            if (dmm__spans_take_best_fit(&s, 0, len, align, &got)) {
                assert_int_equal(got % align, 0);
                for (uint64_t i = got; i < got + len; i++) {
                    assert_int_equal(map[i], 1);
                    map[i] = 0;
                }
            }
        }
        CHECK_SPANS(&s, N);
        uint64_t total = 0;
        for (int i = 0; i < N; i++) total += map[i];
        assert_int_equal(s.total, total);
    }
    for (size_t i = 0; i < s.n; i++)
        for (uint64_t b = s.v[i].off; b < s.v[i].off + s.v[i].len; b++) assert_int_equal(map[b], 1);
    dmm__spans_fini(&s);
    free(map);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(insert_coalesces_both_sides),
        cmocka_unit_test(best_fit_prefers_the_smallest_span),
        cmocka_unit_test(first_fit_takes_the_lowest_span),
        cmocka_unit_test(carve_removes_an_intersection),
        cmocka_unit_test(check_catches_broken_sets),
        cmocka_unit_test(random_against_a_byte_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
