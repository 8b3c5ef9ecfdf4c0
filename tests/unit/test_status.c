/* SPDX-License-Identifier: Apache-2.0 */
/* Status names, per-thread last error (and a failure kept while later calls run), stats JSON, version. */
#include <pthread.h>
#include <string.h>

#include "core/core.h"
#include "testkit.h"

static void names_are_distinct_and_stable(void **state) {
    (void)state;
    assert_string_equal(dmm_status_str(DMM_OK), "DMM_OK");
    assert_string_equal(dmm_status_str(DMM_ERR_BUDGET), "DMM_ERR_BUDGET");
    assert_int_equal(DMM_ERR_SHORT_STRUCT, 13);
    for (int i = 0; i < DMM_STATUS_COUNT; i++)
        for (int j = i + 1; j < DMM_STATUS_COUNT; j++)
            assert_string_not_equal(dmm_status_str((dmm_status)i), dmm_status_str((dmm_status)j));
    assert_string_equal(dmm_status_str((dmm_status)999), "DMM_ERR_UNKNOWN_STATUS");
}

static void *other_thread(void *arg) {
    (void)arg;
    return (void *)(uintptr_t)(dmm_last_error()[0] == '\0' && dmm_last_status() == DMM_OK);
}

static void last_error_is_per_thread(void **state) {
    (void)state;
    dmm_clear_error();
    assert_int_equal(dmm_error_set(DMM_ERR_BUDGET, "tier %s over by %d", "device", 7), DMM_ERR_BUDGET);
    assert_string_equal(dmm_last_error(), "tier device over by 7");
    assert_int_equal(dmm_last_status(), DMM_ERR_BUDGET);
    pthread_t t;
    void *clean = NULL;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, &clean);
    assert_true((uintptr_t)clean);
    dmm_clear_error();
    assert_string_equal(dmm_last_error(), "");
}

static void stats_json_lists_every_stat(void **state) {
    (void)state;
    dmm_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.committed_bytes.current = 2097152;
    s.committed_bytes.peak = 4194304;
    s.poisoned_chunks = 3;
    size_t need = 0;
    assert_int_equal(dmm_stats_json(&s, NULL, 0, &need), DMM_ERR_INVALID_ARGUMENT);
    assert_true(need > 100);
    char buf[8192];
    DMM_OK_OR_FAIL(dmm_stats_json(&s, buf, sizeof buf, &need));
    assert_int_equal(strlen(buf), need);
    assert_non_null(strstr(buf, "\"committed_bytes\":{\"current\":2097152,\"peak\":4194304,\"total\":0}"));
    assert_non_null(strstr(buf, "\"poisoned_chunks\":3"));
#define CHECK_NAME(name, desc) assert_non_null(strstr(buf, "\"" #name "\""));
    DMM_STAT_COUNTS(CHECK_NAME)
    DMM_STAT_COUNTERS(CHECK_NAME)
#undef CHECK_NAME
    assert_int_equal(buf[0], '{');
    assert_int_equal(buf[need - 1], '}');
}

static void version_matches_header(void **state) {
    (void)state;
    assert_int_equal(dmm_version(), DMM_VERSION_NUMBER);
    assert_string_equal(dmm_version_string(), "0.2.0");
}

static int log_count;
static void count_log(void *user, dmm_log_level level, const char *msg) {
    (void)level;
    (void)msg;
    *(int *)user += 1;
}

static void log_callback_filters_and_detaches(void **state) {
    (void)state;
    dmm_set_log_callback(count_log, &log_count, DMM_LOG_INFO);
    dmm_log(DMM_LOG_WARN, "kept %d", 1);
    dmm_log(DMM_LOG_DEBUG, "dropped: above max level");
    assert_int_equal(log_count, 1);
    dmm_error_set(DMM_ERR_DRIVER, "errors are not logged: they may be set under a lock");
    assert_int_equal(log_count, 1);
    dmm_set_log_callback(NULL, NULL, DMM_LOG_WARN);
    dmm_log(DMM_LOG_ERROR, "no callback");
    assert_int_equal(log_count, 1);
}

static void a_kept_failure_is_the_first_and_comes_back_as_it_was(void **state) {
    (void)state;
    dmm_error_kept k = {0};
    dmm_clear_error();
    assert_int_equal(dmm__error_keep(&k, DMM_OK), DMM_OK); /* a success keeps nothing */
    assert_int_equal(k.status, DMM_OK);
    dmm_error_set(DMM_ERR_BUDGET, "first: tier device over by 7");
    assert_int_equal(dmm__error_keep(&k, DMM_ERR_BUDGET), DMM_ERR_BUDGET);
    dmm_error_set(DMM_ERR_DRIVER, "second: unmap failed");
    assert_int_equal(dmm__error_keep(&k, DMM_ERR_DRIVER), DMM_ERR_DRIVER); /* returns its status, keeps nothing */
    assert_string_equal(dmm__error_kept_text(&k), "first: tier device over by 7");
    dmm_clear_error(); /* a later call that succeeds */
    assert_int_equal(dmm__error_restore(&k), DMM_ERR_BUDGET);
    assert_int_equal(dmm_last_status(), DMM_ERR_BUDGET);
    assert_string_equal(dmm_last_error(), "first: tier device over by 7");
    /* the status is the caller's (a missing one reported as DRIVER), the sentence the last error's */
    dmm_error_kept d = {0};
    dmm__error_keep(&d, DMM_ERR_DRIVER);
    dmm_error_set(DMM_ERR_BUSY, "a poll");
    assert_int_equal(dmm__error_restore(&d), DMM_ERR_DRIVER);
    assert_string_equal(dmm_last_error(), "first: tier device over by 7");
    dmm_clear_error();
}

static void nothing_kept_restores_ok_and_clears_nothing(void **state) {
    (void)state;
    dmm_error_kept k = {0};
    assert_string_equal(dmm__error_kept_text(&k), "");
    dmm_error_set(DMM_ERR_QUARANTINED, "a later failure of its own");
    assert_int_equal(dmm__error_restore(&k), DMM_OK);
    assert_int_equal(dmm_last_status(), DMM_ERR_QUARANTINED);
    assert_string_equal(dmm_last_error(), "a later failure of its own");
    dmm_clear_error();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_are_distinct_and_stable),
        cmocka_unit_test(last_error_is_per_thread),
        cmocka_unit_test(a_kept_failure_is_the_first_and_comes_back_as_it_was),
        cmocka_unit_test(nothing_kept_restores_ok_and_clears_nothing),
        cmocka_unit_test(stats_json_lists_every_stat),
        cmocka_unit_test(version_matches_header),
        cmocka_unit_test(log_callback_filters_and_detaches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
