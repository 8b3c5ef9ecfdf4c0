/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_replay.c — the replay tool's --repeat and --stock (tools/replay.c, compiled in here
 * with the trace reader): the trace taken as one iteration, replayed K times over one pool, the
 * leftovers of each repetition freed before the next, and the driver calls of the last repetition
 * alone.
 *   - once: the "steady" counts are the whole run's;
 *   - a repeating workload whose memory the pool keeps mapped reaches a steady state with no
 *     driver call at all in its last repetition, and the totals count every repetition;
 *   - the leftovers (allocations a repetition never frees) are freed between repetitions, so the
 *     physical peak of three repetitions is the peak of one;
 *   - the replay ends with the driver holding nothing (dmm_replay_run checks the census);
 *   - hostile sizes: a trace whose peak needs a reservation beyond 64 bits (above 2^58 bytes) is refused
 *     before anything is created (it hung above 2^63 and silently reserved 64 GiB from 2^58), and so is
 *     one whose peak needs more host-driver handles than the open-file limit allows;
 *   - --lag UINT64_MAX means "never" (a synchronize completes), not "at once" (the sum wrapped);
 *   - --stock: with the stock synced after every malloc, a pool that keeps growing in small steps
 *     fits them into the stock instead of growing, the same way in every run;
 *   - --warm-layout: the first pass's handles, committed ahead, are each taken by the growth that
 *     made it in the first pass (none created twice, the same peak and layout). */
#include "../../tools/replay.c"
#include "../../tools/trace.c"
#include "../../tools/plan.c"

#include <string.h>
#include <sys/resource.h>

#include "testkit.h"

/* One "step": 4 MiB + 1 MiB + 6 MiB live at once, a 2 MiB block left live at the end. */
static const char *const step = "# dmm-trace v1\n"
                                "# workload: step\n"
                                "0 a 1 4194304 0\n"
                                "1 a 2 1048576 0\n"
                                "2 a 3 6291456 0\n"
                                "3 f 2\n"
                                "4 a 4 2097152 0\n"
                                "5 f 1\n"
                                "6 f 3\n";

/* Replays the trace `text` on the host driver with `o` (its driver set here). */
static void replay_text(const char *text, dmm_replay_opts o, dmm_replay_result *r) {
    dmm_trace t;
    char err[512] = "";
    assert_int_equal(dmm_trace_parse(text, strlen(text), &t, err, sizeof err), 0);
    o.driver = "host";
    memset(r, 0, sizeof *r);
    if (dmm_replay_run(&t, &o, r, err, sizeof err) != 0) fail_msg("replay: %s", err);
    dmm_trace_free(&t);
}

static void run(uint32_t repeat, uint64_t lag, dmm_replay_result *r) {
    dmm_replay_opts o;
    memset(&o, 0, sizeof o);
    o.repeat = repeat;
    o.lag = lag;
    replay_text(step, o, r);
}

static void once_the_steady_counts_are_the_whole_run(void **state) {
    (void)state;
    dmm_replay_result r;
    run(1, 0, &r);
    assert_int_equal(r.repeat, 1);
    assert_int_equal(r.allocs, 4);
    assert_int_equal(r.frees, 3);
    assert_true(r.calls_create > 0);
    assert_int_equal(r.steady_create, r.calls_create);
    assert_int_equal(r.steady_map, r.calls_map);
    assert_int_equal(r.steady_grows, r.pool.grows);
    dmm_replay_result_free(&r);
}

static void a_repeating_step_reaches_a_steady_state_without_driver_calls(void **state) {
    (void)state;
    dmm_replay_result one, three;
    run(1, 0, &one);
    run(3, 0, &three);
    assert_int_equal(three.repeat, 3);
    assert_int_equal(three.allocs, 12);
    assert_int_equal(three.frees, 3 * 3 + 2); /* two repetitions' leftovers freed before the next */
    assert_int_equal(three.events, 21);
    assert_int_equal(three.steady_create + three.steady_map + three.steady_set_access + three.steady_unmap +
                         three.steady_release,
                     0);
    assert_int_equal(three.steady_grows, 0);
    assert_int_equal(three.calls_create, one.calls_create); /* nothing was created after the first */
    assert_int_equal(three.peak_physical_bytes, one.peak_physical_bytes);
    assert_int_equal(three.peak_live_bytes, one.peak_live_bytes);
    dmm_replay_result_free(&one);
    dmm_replay_result_free(&three);
}

static void under_lag_the_repetitions_still_end_with_nothing_held(void **state) {
    (void)state;
    dmm_replay_result r;
    run(4, 2, &r); /* fences pending as on a GPU; the census check at the end is dmm_replay_run's */
    assert_int_equal(r.repeat, 4);
    assert_int_equal(r.allocs, 16);
    assert_int_equal(r.frees, 4 * 3 + 3); /* three repetitions' leftovers freed before the next */
    assert_int_equal(r.events, 28);
    dmm_replay_result_free(&r);
}

/* One allocation of `bytes`, replayed on `driver` (or only checked, when check_only). */
static int replay_one(const char *bytes, const char *driver, bool check_only, char *err, size_t errcap) {
    char text[128];
    snprintf(text, sizeof text, "# dmm-trace v1\n0 a 1 %s 0\n", bytes);
    dmm_trace t;
    assert_int_equal(dmm_trace_parse(text, strlen(text), &t, err, errcap), 0);
    dmm_replay_opts o;
    memset(&o, 0, sizeof o);
    o.driver = driver;
    dmm_replay_result r;
    int rc = check_only ? dmm_replay_check(&t, &o, NULL, err, errcap) : dmm_replay_run(&t, &o, &r, err, errcap);
    if (!check_only && rc == 0) dmm_replay_result_free(&r);
    dmm_trace_free(&t);
    return rc;
}

static void sizes_whose_reservation_would_overflow_are_refused_at_once(void **state) {
    (void)state;
    char err[512] = "";
    /* above 2^63 the power-of-two round-up wrapped to 0 and looped for ever */
    assert_int_equal(replay_one("9223372036854775809", "host", false, err, sizeof err), -1);
    if (strstr(err, "9223372036854775809 bytes, is above 288230376151711744 (2^58)") == NULL) fail_msg("%s", err);
    /* from 2^58 to 2^63 the × 32 wrapped and the reservation silently became 64 GiB */
    assert_int_equal(replay_one("576460752303423488", "host", false, err, sizeof err), -1);
    if (strstr(err, "576460752303423488 bytes, is above") == NULL || strstr(err, "corrupt") == NULL)
        fail_msg("%s", err);
    assert_int_equal(replay_one("288230376151711745", "cuda", true, err, sizeof err), -1); /* 2^58 + 1 */
    assert_int_equal(replay_one("288230376151711744", "cuda", true, err, sizeof err), 0); /* 2^58: 2^63 of VA */
}

static void a_peak_the_open_file_limit_cannot_hold_is_refused_before_any_driver_call(void **state) {
    (void)state;
    struct rlimit was, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    low = was;
    low.rlim_cur = 1024;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    char err[512] = "";
    /* 1 TiB in 2 MiB handles: 524,288 memfds, each created before the limit stopped the replay */
    int rc = replay_one("1099511627776", "host", false, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
    assert_int_equal(rc, -1);
    if (strstr(err, "at least 524288 physical handles") == NULL || strstr(err, "open-file limit is 1024") == NULL)
        fail_msg("%s", err);
}

static void a_huge_lag_means_never_not_at_once(void **state) {
    (void)state;
    lag_driver l;
    memset(&l, 0, sizeof l);
    l.clock = 10;
    lag_event e = {NULL, 5};
    l.lag = 5;
    assert_true(lag_done(&l, &e));
    l.lag = 6;
    assert_false(lag_done(&l, &e));
    l.lag = UINT64_MAX; /* at + lag wrapped to at - 1: the event completed at once */
    assert_false(lag_done(&l, &e));
    l.synced_to = 5; /* a synchronize still completes it */
    assert_true(lag_done(&l, &e));
}

/* 256 MiB, then eight 1 MiB allocations: a pool that keeps growing, in small steps. */
static const char *const growing = "# dmm-trace v1\n"
                                   "0 a 1 268435456 0\n"
                                   "1 a 2 1048576 0\n"
                                   "2 a 3 1048576 0\n"
                                   "3 a 4 1048576 0\n"
                                   "4 a 5 1048576 0\n"
                                   "5 a 6 1048576 0\n"
                                   "6 a 7 1048576 0\n"
                                   "7 a 8 1048576 0\n"
                                   "8 a 9 1048576 0\n";

static void run_growing(uint64_t stock, dmm_replay_result *r) {
    dmm_replay_opts o;
    memset(&o, 0, sizeof o);
    o.stock_bytes = stock;
    replay_text(growing, o, r);
}

static void with_a_stock_the_small_steps_fit_and_every_run_is_the_same(void **state) {
    (void)state;
    dmm_replay_result none, a, b;
    run_growing(0, &none);
    run_growing(64 << 20, &a); /* the stock: 256 MiB / 128 = 2 MiB, synced after every malloc */
    run_growing(64 << 20, &b);
    assert_int_equal(none.pool.stock_grows, 0);
    assert_true(none.pool.grows > 2); /* without it the small steps grow */
    /* with it they fit: only the first allocation grew (larger than the stock, it posts none) and the
     * first small step, whose growth posts the stock */
    assert_int_equal(a.pool.grows, 2);
    assert_true(a.pool.stock_grows >= 2); /* the stock, and refills as the steps used it */
    assert_int_equal(a.pool.stock_grows, b.pool.stock_grows);
    assert_int_equal(a.peak_physical_bytes, b.peak_physical_bytes);
    assert_int_equal(a.calls_create, b.calls_create);
    dmm_replay_result_free(&none);
    dmm_replay_result_free(&a);
    dmm_replay_result_free(&b);
}

/* --warm-layout: the handles the first pass created are committed ahead and every growth takes its
 * own, so no handle is created twice, and the peak is the cold run's. */
static void with_a_warm_layout_every_growth_takes_the_first_pass_handle(void **state) {
    (void)state;
    dmm_replay_opts o;
    memset(&o, 0, sizeof o);
    o.max_chunk_bytes = 8 << 20; /* handles larger than one quantum: the layout has sizes to match */
    dmm_replay_result cold, warm;
    replay_text(growing, o, &cold);
    o.warm_layout = true;
    replay_text(growing, o, &warm);
    assert_true(cold.nlayout > 2);
    assert_int_equal(warm.warm_spans, cold.nlayout);
    assert_int_equal(warm.pool.layout_adopted, cold.nlayout);
    assert_int_equal(warm.pool.layout_released, 0);
    assert_int_equal(warm.calls_create, cold.calls_create); /* ahead, then taken: each handle made once */
    assert_int_equal(warm.peak_physical_bytes, cold.peak_physical_bytes);
    assert_int_equal(warm.nlayout, cold.nlayout); /* and the warm run's own layout is the same again */
    for (size_t i = 0; i < cold.nlayout; i++) {
        assert_int_equal(warm.layout[i].offset, cold.layout[i].offset);
        assert_int_equal(warm.layout[i].bytes, cold.layout[i].bytes);
    }
    dmm_replay_result_free(&cold);
    dmm_replay_result_free(&warm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_whose_reservation_would_overflow_are_refused_at_once),
        cmocka_unit_test(a_peak_the_open_file_limit_cannot_hold_is_refused_before_any_driver_call),
        cmocka_unit_test(a_huge_lag_means_never_not_at_once),
        cmocka_unit_test(once_the_steady_counts_are_the_whole_run),
        cmocka_unit_test(a_repeating_step_reaches_a_steady_state_without_driver_calls),
        cmocka_unit_test(under_lag_the_repetitions_still_end_with_nothing_held),
        cmocka_unit_test(with_a_stock_the_small_steps_fit_and_every_run_is_the_same),
        cmocka_unit_test(with_a_warm_layout_every_growth_takes_the_first_pass_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
