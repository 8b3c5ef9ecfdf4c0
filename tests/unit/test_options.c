/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_options.c — dmm's one option table and its grammar of numbers (src/core/options.c).
 *
 * What is proven: every id has a complete row (a variable or a flag, who reads it, a kind, a description,
 * a value name, an example and a range for numbers), no variable or flag of a reader appears twice, and
 * each row's example reads under its own rules; the tool's defaults that live in its headers agree with
 * the rows; dmm__option_env reads the row's variable, takes empty for unset, and
 * dmm__option_env_named reads only variables of the table; dmm__number_read takes plain decimal
 * exactly as before, sizes with binary units K/M/G/T in either case with optional i/B/iB and
 * fractions of whole bytes, and refuses everything else (sign, spaces, hex, exponent, an unknown or
 * doubled unit, a unit or fraction on a whole number, a fraction that is not whole bytes, overflow)
 * with a reason, leaving the output untouched.
 */
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "../../adapters/ort/dmm_ort.h"
#include "../../tools/compare.h"
#include "core/options.h"

static void every_row_is_complete_and_unique(void **state) {
    (void)state;
    assert_null(dmm__option(DMM_OPTION_COUNT_));
    assert_null(dmm__option((dmm_option_id)-1));
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        assert_non_null(o);
        if ((o->env == NULL) == (o->flag == NULL)) fail_msg("row %u: a variable or a flag, exactly one", i);
        const char *name = o->env != NULL ? o->env : o->flag;
        if (o->reader == NULL || o->description == NULL || o->description[0] == '\0')
            fail_msg("%s: no reader or description", name);
        if (o->env != NULL && strncmp(o->env, "DMM_", 4) != 0) fail_msg("%s: a variable of dmm starts with DMM_", name);
        if (o->flag != NULL && (strncmp(o->flag, "--", 2) != 0 || strncmp(o->reader, "dmm ", 4) != 0))
            fail_msg("%s: a flag is --name, read by a command 'dmm X' (%s)", name, o->reader);
        if (o->kind != DMM_OPTION_SWITCH && (o->value == NULL || o->what == NULL || o->example == NULL))
            fail_msg("%s: a value needs its name, what it is and an example", name);
        bool number = o->kind == DMM_OPTION_BYTES || o->kind == DMM_OPTION_COUNT || o->kind == DMM_OPTION_PERMILLE;
        if (number) {
            if (o->min > o->max) fail_msg("%s: min above max", name);
            uint64_t v = 0;
            char why[128];
            const char *bad = dmm__number_read(o->example, strlen(o->example), o->kind == DMM_OPTION_BYTES, &v, why,
                                               sizeof why);
            if (bad != NULL || v < o->min || v > o->max) fail_msg("%s: its example '%s' is not valid", name, o->example);
        }
        for (unsigned j = 0; j < i; j++) {
            const dmm_option *p = dmm__option((dmm_option_id)j);
            if (o->env != NULL && p->env != NULL && strcmp(o->env, p->env) == 0) fail_msg("%s: twice", o->env);
            if (o->flag != NULL && p->flag != NULL && strcmp(o->flag, p->flag) == 0 && strcmp(o->reader, p->reader) == 0)
                fail_msg("%s %s: twice", o->reader, o->flag);
        }
    }
}

static void rows_agree_with_the_headers_that_use_them(void **state) {
    (void)state;
    assert_string_equal(dmm__option(DMM_OPTION_ORT_LIB)->env, DMM_ORT_LIB_ENV);
    char text[32];
    snprintf(text, sizeof text, "%g", DMM_CMP_DEFAULT_K);
    assert_string_equal(dmm__option(DMM_OPTION_COMPARE_K)->fallback, text);
    snprintf(text, sizeof text, "%g", 100 * DMM_CMP_DEFAULT_FLOOR);
    assert_string_equal(dmm__option(DMM_OPTION_COMPARE_THRESHOLD_FLOOR)->fallback, text);
    snprintf(text, sizeof text, "%dM", DMM_BENCH_MAX_FILE >> 20);
    assert_string_equal(dmm__option(DMM_OPTION_COMPARE_MAX_INPUT_BYTES)->fallback, text);
    /* the flags that land in 32-bit fields (replay's divisors, per mille and repetitions) stay within 32 bits */
    const dmm_option_id narrow[] = {DMM_OPTION_REPLAY_HANDLE_DIV, DMM_OPTION_REPLAY_FLOOR_DIV, DMM_OPTION_REPLAY_RETAIN,
                                    DMM_OPTION_REPLAY_SETTLE, DMM_OPTION_REPLAY_REPEAT};
    for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++) assert_true(dmm__option(narrow[i])->max <= UINT32_MAX);
}

static void the_environment_is_read_through_the_table(void **state) {
    (void)state;
    const char *name = dmm__option(DMM_OPTION_CUDA_LIBRARY)->env;
    char *saved = getenv(name) != NULL ? strdup(getenv(name)) : NULL;
    assert_int_equal(setenv(name, "/nowhere/libcuda.so.1", 1), 0);
    assert_string_equal(dmm__option_env(DMM_OPTION_CUDA_LIBRARY), "/nowhere/libcuda.so.1");
    assert_string_equal(dmm__option_env_named(NULL, name), "/nowhere/libcuda.so.1");
    assert_int_equal(setenv(name, "", 1), 0);
    assert_null(dmm__option_env(DMM_OPTION_CUDA_LIBRARY)); /* empty = unset */
    assert_null(dmm__option_env_named(NULL, name));
    assert_int_equal(unsetenv(name), 0);
    assert_null(dmm__option_env(DMM_OPTION_CUDA_LIBRARY));
    /* a variable outside the table is not read, nor is a flag's row */
    assert_int_equal(setenv("DMM_NOT_AN_OPTION", "1", 1), 0);
    assert_null(dmm__option_env_named(NULL, "DMM_NOT_AN_OPTION"));
    assert_null(dmm__option_env_named(NULL, NULL));
    assert_null(dmm__option_env(DMM_OPTION_REPLAY_GRANULE));
    assert_null(dmm__option_env(DMM_OPTION_COUNT_));
    unsetenv("DMM_NOT_AN_OPTION");
    if (saved != NULL) setenv(name, saved, 1);
    free(saved);
}

static void sizes_and_whole_numbers_read_exactly(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool bytes;
        uint64_t want;
    } ok[] = {
        {"0", false, 0},
        {"4096", false, 4096},
        {"18446744073709551615", false, UINT64_MAX},
        {"4096", true, 4096},
        {"18446744073709551615", true, UINT64_MAX},
        {"64G", true, 64ull << 30},
        {"64g", true, 64ull << 30},
        {"64GiB", true, 64ull << 30},
        {"64gib", true, 64ull << 30},
        {"64GB", true, 64ull << 30},
        {"64Gi", true, 64ull << 30},
        {"512MiB", true, 512ull << 20},
        {"512M", true, 512ull << 20},
        {"8K", true, 8192},
        {"2T", true, 2ull << 40},
        {"1.5G", true, 3ull << 29},
        {"0.5K", true, 512},
        {"1.0", true, 1},
        {"0.125T", true, 1ull << 37},
        {"16777215.5T", true, (16777215ull << 40) + (1ull << 39)},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 7;
        char why[128];
        const char *bad = dmm__number_read(ok[i].text, strlen(ok[i].text), ok[i].bytes, &v, why, sizeof why);
        if (bad != NULL) fail_msg("'%s': %s", ok[i].text, bad);
        if (v != ok[i].want) fail_msg("'%s' read as %llu", ok[i].text, (unsigned long long)v);
    }
    /* a field of a longer text: only [0, len) is read */
    uint64_t v = 0;
    char why[128];
    assert_null(dmm__number_read("128M,4", 4, true, &v, why, sizeof why));
    assert_int_equal(v, 128ull << 20);
}

static void everything_else_is_refused_with_a_reason(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool bytes;
        const char *why;
    } bad[] = {
        {"", true, "it is empty"},
        {"-1", true, "it is negative"},
        {"+1", true, "does not start with a digit"},
        {" 1", true, "does not start with a digit"},
        {"1 ", true, "' ' follows the number"},
        {"64 G", true, "' G' follows the number"},
        {"0x10", true, "'x10' follows the number"},
        {"1e3", true, "'e3' follows the number"},
        {"nan", true, "does not start with a digit"},
        {"64Q", true, "'Q' follows the number (sizes take K, M, G or T"},
        {"64E", true, "'E' follows"},
        {"64GG", true, "'G' follows"},
        {"64GiBs", true, "'s' follows"},
        {"64iB", true, "'iB' follows"},
        {"64B", true, "'B' follows"},
        {"1.", true, "a digit must follow the decimal point"},
        {"1.3", true, "not a whole number of bytes"},
        {"15.999999999T", true, "not a whole number of bytes"},
        {"1.0000000001K", true, "more than 9 decimals"},
        {"18446744073709551616", true, "does not fit in 64 bits"},
        {"16777216T", true, "does not fit in 64 bits"},
        {"17179869184G", true, "does not fit in 64 bits"},
        {"4M", false, "'M' follows the number"},
        {"2.5", false, "not a whole number"},
        {"2.0", false, "not a whole number"},
        {"18446744073709551616", false, "does not fit in 64 bits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        char why[128] = "";
        const char *r = dmm__number_read(bad[i].text, strlen(bad[i].text), bad[i].bytes, &v, why, sizeof why);
        if (r == NULL) fail_msg("'%s' was accepted as %llu", bad[i].text, (unsigned long long)v);
        if (strstr(r, bad[i].why) == NULL) fail_msg("'%s': '%s' lacks '%s'", bad[i].text, r, bad[i].why);
        assert_int_equal(v, 12345); /* untouched */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_row_is_complete_and_unique),
        cmocka_unit_test(rows_agree_with_the_headers_that_use_them),
        cmocka_unit_test(the_environment_is_read_through_the_table),
        cmocka_unit_test(sizes_and_whole_numbers_read_exactly),
        cmocka_unit_test(everything_else_is_refused_with_a_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
