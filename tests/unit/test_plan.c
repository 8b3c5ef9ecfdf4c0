/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_plan.c — the offline plan of a whole trace (tools/plan.c, compiled in here with the
 * trace reader): the floor a fixed layout reaches, reported by `dmm replay --plan` and bench_replay.
 *   - allocations alive at once lie side by side; one freed before the next is allocated gives its
 *     place to it;
 *   - largest first: where placing in arrival order would strand a small block below a big one, the
 *     plan reaches the live peak;
 *   - on random traces (three streams, some allocations never freed) no two allocations whose
 *     lifetimes overlap overlap in address, and the extent is the highest end, never below the live
 *     peak;
 *   - an alignment that is not a power of two is refused with a sentence that names it;
 *   - a trace whose lifetimes would take the planner past its bounds of work or index (allocations that
 *     live across the whole trace) is refused with a sentence, not planned for hours. */
#include "../../tools/plan.c"
#include "../../tools/trace.c"

#include <stdio.h>
#include <string.h>

#include "testkit.h"

static void plan_text(const char *text, dmm_plan_result *r, uint64_t *offsets) {
    dmm_trace t;
    char err[512] = "";
    assert_int_equal(dmm_trace_parse(text, strlen(text), &t, err, sizeof err), 0);
    if (dmm_plan_trace(&t, 512, r, offsets, err, sizeof err) != 0) fail_msg("plan: %s", err);
    dmm_trace_free(&t);
}

static void live_at_once_side_by_side_and_freed_places_reused(void **state) {
    (void)state;
    dmm_plan_result r;
    uint64_t off[3];
    plan_text("# dmm-trace v1\n0 a 1 4096 0\n1 a 2 1024 0\n2 f 1\n3 f 2\n", &r, off);
    assert_int_equal(r.extent, 5120);
    assert_int_equal(r.peak_live, 5120);
    assert_true(off[0] == 0 ? off[1] == 4096 : off[0] == 1024 && off[1] == 0);
    plan_text("# dmm-trace v1\n0 a 1 4096 0\n1 f 1\n2 a 2 4096 0\n3 f 2\n4 a 3 1000 0\n", &r, off);
    assert_int_equal(r.extent, 4096);
    assert_int_equal(r.peak_live, 4096);
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], 0);
    assert_int_equal(off[2], 0); /* 1000 rounded to 1024, placed at 0 too */
}

/* Arrival order would put the 512-byte block at 0 and the first 4 KiB one above it; the second 4 KiB
 * one cannot then use the 512 bytes freed below: extent 8704 for a peak of 8192. Largest first, the
 * small one goes above the first big one, where the second big one (which starts after it died)
 * may lie too. */
static void largest_first_reaches_the_peak_where_arrival_order_would_not(void **state) {
    (void)state;
    dmm_plan_result r;
    uint64_t off[3];
    plan_text("# dmm-trace v1\n0 a 1 512 0\n1 a 2 4096 0\n2 f 1\n3 a 3 4096 0\n4 f 2\n5 f 3\n", &r, off);
    assert_int_equal(r.peak_live, 8192);
    assert_int_equal(r.extent, 8192);
    assert_int_equal(off[1], 0);
    assert_int_equal(off[2], 4096);
    assert_int_equal(off[0], 4096);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void random_traces_never_overlap_in_space_and_time(void **state) {
    (void)state;
    enum { N = 600 };
    char *text = malloc(64 * 2 * N + 64);
    uint64_t *off = malloc(N * sizeof *off);
    assert_non_null(text);
    assert_non_null(off);
    int improved = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull, sz[N], start[N], end[N];
        int live[N], nlive = 0;
        size_t len = (size_t)sprintf(text, "# dmm-trace v1\n"), ev = 0;
        unsigned next_id = 1;
        for (int i = 0; i < N; i++) end[i] = UINT64_MAX;
        /* some allocations stay live to the end (never freed), on three streams */
        while (next_id <= N || (nlive > 0 && rng_next(&s) % 64 != 0)) {
            bool alloc = next_id <= N && (nlive == 0 || rng_next(&s) % 3 != 0);
            if (alloc) {
                int k = (int)next_id - 1;
                sz[k] = (rng_next(&s) % 64 + 1) * 512 * (rng_next(&s) % 8 == 0 ? 64 : 1);
                start[k] = ev;
                len += (size_t)sprintf(text + len, "%zu a %u %llu %llu\n", ev++, next_id++, (unsigned long long)sz[k],
                                       (unsigned long long)(rng_next(&s) % 3));
                live[nlive++] = k;
            } else {
                int j = (int)(rng_next(&s) % (uint64_t)nlive), k = live[j];
                live[j] = live[--nlive];
                end[k] = ev;
                len += (size_t)sprintf(text + len, "%zu f %d\n", ev++, k + 1);
            }
        }
        dmm_plan_result r;
        plan_text(text, &r, off);
        uint64_t top = 0;
        for (int i = 0; i < N; i++) {
            if (off[i] + sz[i] > top) top = off[i] + sz[i];
            assert_int_equal(off[i] % 512, 0);
            for (int j = i + 1; j < N; j++) {
                bool in_time = start[i] < end[j] && start[j] < end[i];
                bool in_space = off[i] < off[j] + sz[j] && off[j] < off[i] + sz[i];
                if (in_time && in_space) fail_msg("seed %llu: allocations %d and %d overlap", (unsigned long long)seed, i + 1, j + 1);
            }
        }
        assert_int_equal(r.extent, top);
        assert_true(r.extent >= r.peak_live);
        /* the restarts keep the greedy orders' best or beat it, and the plan is the same every time */
        dmm_trace t;
        char err[512] = "";
        assert_int_equal(dmm_trace_parse(text, len, &t, err, sizeof err), 0);
        dmm_plan_limits greedy_only = {0, 0, 0, 0};
        dmm_plan_result greedy, again;
        assert_int_equal(dmm_plan_trace_limited(&t, 512, &greedy_only, &greedy, NULL, err, sizeof err), 0);
        assert_int_equal(greedy.orders, 3);
        assert_true(r.orders > 3);
        assert_true(r.extent <= greedy.extent);
        improved += r.extent < greedy.extent;
        if (seed <= 4) { /* the same plan every time (a few seeds: each plan is 64 placements) */
            assert_int_equal(dmm_plan_trace(&t, 512, &again, NULL, err, sizeof err), 0);
            assert_int_equal(again.extent, r.extent);
            assert_int_equal(again.orders, r.orders);
        }
        dmm_trace_free(&t);
    }
    /* on random traces the greedy orders are rarely the best: the restarts must show it */
    assert_true(improved > 0);
    free(off);
    free(text);
}

static void an_alignment_that_is_not_a_power_of_two_is_refused(void **state) {
    (void)state;
    dmm_trace t;
    char err[512] = "";
    const char *text = "# dmm-trace v1\n0 a 1 4096 0\n";
    assert_int_equal(dmm_trace_parse(text, strlen(text), &t, err, sizeof err), 0);
    dmm_plan_result r;
    assert_int_equal(dmm_plan_trace(&t, 768, &r, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "768 is not a power of two"));
    dmm_trace_free(&t);
}

static void a_plan_past_its_bounds_is_refused_with_a_sentence(void **state) {
    (void)state;
    /* 40 allocations live across 6,400 events and 3,200 short ones: over 3,000 index entries in each order */
    enum { LONG = 40, SHORT = 3200 };
    char *text = malloc((LONG + 2 * SHORT) * 40 + 64);
    assert_non_null(text);
    size_t len = (size_t)sprintf(text, "# dmm-trace v1\n"), ev = 0;
    for (int i = 1; i <= LONG; i++) len += (size_t)sprintf(text + len, "%zu a %d 4096 0\n", ev++, i);
    for (int i = LONG + 1; i <= LONG + SHORT; i++) {
        len += (size_t)sprintf(text + len, "%zu a %d 512 0\n", ev++, i);
        len += (size_t)sprintf(text + len, "%zu f %d\n", ev++, i);
    }
    dmm_trace t;
    char err[512] = "";
    assert_int_equal(dmm_trace_parse(text, len, &t, err, sizeof err), 0);
    dmm_plan_result r;
    dmm_plan_limits index_bound = {0, 3000, 0, 0}, work_bound = {20000, 0, 0, 0};
    assert_int_equal(dmm_plan_trace_limited(&t, 512, &index_bound, &r, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "overlap too much to plan within the planner's bounds"));
    assert_int_equal(r.extent, 0);
    err[0] = '\0';
    assert_int_equal(dmm_plan_trace_limited(&t, 512, &work_bound, &r, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "plan a shorter part of the trace"));
    /* within the default bounds it plans: the long ones side by side, the short ones in one slot */
    assert_int_equal(dmm_plan_trace(&t, 512, &r, NULL, err, sizeof err), 0);
    assert_int_equal(r.extent, LONG * 4096 + 512);
    dmm_trace_free(&t);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(live_at_once_side_by_side_and_freed_places_reused),
        cmocka_unit_test(largest_first_reaches_the_peak_where_arrival_order_would_not),
        cmocka_unit_test(random_traces_never_overlap_in_space_and_time),
        cmocka_unit_test(an_alignment_that_is_not_a_power_of_two_is_refused),
        cmocka_unit_test(a_plan_past_its_bounds_is_refused_with_a_sentence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
