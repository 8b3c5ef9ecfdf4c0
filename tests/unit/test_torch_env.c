/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_torch_env.c — the torch adapter's environment variables (adapters/torch/env.c, compiled
 * into this test like test_torch_adapter.c compiles the adapter's core: no GPU, no cuda.h needed).
 *
 * What is proven: DMM_TORCH_POOL_VA, DMM_TORCH_RETAIN, DMM_TORCH_SETTLE, DMM_TORCH_HANDLES, DMM_TORCH_STOCK,
 * DMM_TORCH_PLAN (0 or 1) and DMM_TORCH_RESTORE_PIECE read as documented (docs/options.md: sizes as plain bytes exactly as before, or with
 * a binary unit: 64G, 64GiB, 64gb, 512MiB, 1.5G; per mille 0..1000; MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]];
 * MAX[,FIRST[,COPY]] with MAX 0 = one commit per segment); unset and empty leave the config alone; every
 * malformed value (not a number, a sign, trailing characters, an unknown unit or one on a whole number, a
 * fraction that is not whole bytes, hex, a number beyond 64 bits, RETAIN or SETTLE above 1000, a divisor
 * beyond 32 bits, a bad or extra field) fails with
 * DMM_ERR_INVALID_ARGUMENT and a sentence naming the variable, its value and "unset it", and leaves
 * the whole config untouched, even the fields of the other, valid variables.
 */
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "../../adapters/torch/env.c"

typedef struct env {
    const char *pool_va, *retain, *piece, *settle, *handles, *stock;
} env;

static const char *plan_value;      /* DMM_TORCH_PLAN's, beside every env below (NULL: unset) */
static const char *shareable_value; /* DMM_TORCH_SHAREABLE's, the same way */

static const char *get(void *user, const char *name) {
    const env *e = user;
    if (strcmp(name, "DMM_TORCH_POOL_VA") == 0) return e->pool_va;
    if (strcmp(name, "DMM_TORCH_RETAIN") == 0) return e->retain;
    if (strcmp(name, "DMM_TORCH_RESTORE_PIECE") == 0) return e->piece;
    if (strcmp(name, "DMM_TORCH_SETTLE") == 0) return e->settle;
    if (strcmp(name, "DMM_TORCH_HANDLES") == 0) return e->handles;
    if (strcmp(name, "DMM_TORCH_STOCK") == 0) return e->stock;
    if (strcmp(name, "DMM_TORCH_PLAN") == 0) return plan_value;
    if (strcmp(name, "DMM_TORCH_SHAREABLE") == 0) return shareable_value;
    fail_msg("unexpected variable %s", name);
    return NULL;
}

/* A config whose every byte is a known pattern, so that "untouched" is checkable with memcmp. */
static dmm_device_config marked(void) {
    dmm_device_config c;
    memset(&c, 0xA5, sizeof c);
    c.size = sizeof c;
    return c;
}

#define HANDLES_SYNTAX "MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]]" /* what a refusal of DMM_TORCH_HANDLES says */

static void valid_values_are_read(void **state) {
    (void)state;
    env e = {"68719476736", "20", "268435456,16777216,33554432", "150", "134217728,4,8388608,256", "268435456"};
    dmm_device_config c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &e));
    assert_int_equal(c.pool_va_bytes, 68719476736ull);
    assert_int_equal(c.retain_permille, 20);
    assert_int_equal(c.settle_permille, 150);
    assert_int_equal(c.max_chunk_bytes, 134217728ull);
    assert_int_equal(c.handle_divisor, 4);
    assert_int_equal(c.min_chunk_bytes, 8388608ull);
    assert_int_equal(c.floor_divisor, 256);
    assert_int_equal(c.stock_bytes, 268435456ull);
    assert_int_equal(c.restore_piece_bytes, 268435456ull);
    assert_int_equal(c.restore_first_bytes, 16777216ull);
    assert_int_equal(c.restore_copy_bytes, 33554432ull);
    assert_int_equal(c.limit_bytes, 0xA5A5A5A5A5A5A5A5ull); /* not an env field: untouched */

    /* the edges: 0 (the defaults), RETAIN 1000, UINT64_MAX, MAX 0 = one commit per segment */
    env e2 = {"0", "1000", "0", "1000", "0", NULL};
    c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &e2));
    assert_int_equal(c.pool_va_bytes, 0);
    assert_int_equal(c.retain_permille, 1000);
    assert_int_equal(c.settle_permille, 1000);
    assert_int_equal(c.max_chunk_bytes, UINT64_MAX); /* one granule per handle */
    assert_int_equal(c.handle_divisor, 0);
    assert_int_equal(c.min_chunk_bytes, 0); /* MAX alone: no floor */
    assert_int_equal(c.floor_divisor, 0);
    assert_int_equal(c.restore_piece_bytes, UINT64_MAX);
    assert_int_equal(c.restore_first_bytes, 0);
    assert_int_equal(c.restore_copy_bytes, 0);
    env e3 = {"18446744073709551615", "0", "0,0,33554432", NULL, NULL, NULL};
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &e3));
    assert_int_equal(c.pool_va_bytes, UINT64_MAX);
    assert_int_equal(c.retain_permille, 0);
    assert_int_equal(c.restore_piece_bytes, UINT64_MAX);
    assert_int_equal(c.restore_copy_bytes, 33554432ull);
    env none = {NULL, NULL, NULL, NULL, NULL, NULL};
    plan_value = "1";
    c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &none));
    assert_int_equal(c.plan_loops, 1);
    assert_int_equal(c.settle_permille, 0xA5A5A5A5u); /* the others untouched */
    plan_value = "0";
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &none));
    assert_int_equal(c.plan_loops, 0);
    for (int i = 0; i < 2; i++) { /* neither 0 nor 1: refused, the config untouched */
        plan_value = i == 0 ? "2" : "yes";
        dmm_device_config before = marked(), after = before;
        assert_int_equal(dmm__torch_config_from_env(&after, get, &none), DMM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(dmm_last_error(), "DMM_TORCH_PLAN"));
        assert_non_null(strstr(dmm_last_error(), "0 or 1"));
        assert_memory_equal(&before, &after, sizeof before);
    }
    plan_value = NULL;
    shareable_value = "0";
    c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &none));
    assert_false(c.exportable);
    shareable_value = "1";
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &none));
    assert_true(c.exportable);
    shareable_value = "true"; /* a whole number, as DMM_TORCH_PLAN */
    assert_int_equal(dmm__torch_config_from_env(&c, get, &none), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dmm_last_error(), "DMM_TORCH_SHAREABLE"));
    shareable_value = NULL;
    env e4 = {NULL, NULL, "33554432", NULL, NULL, NULL};
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &e4));
    assert_int_equal(c.restore_piece_bytes, 33554432ull);
    assert_int_equal(c.restore_first_bytes, 0);
    assert_int_equal(c.restore_copy_bytes, 0);
}

static void sizes_take_binary_units(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t want;
    } sizes[] = {
        {"64G", 64ull << 30},   {"64GiB", 64ull << 30}, {"64gb", 64ull << 30},  {"64Gi", 64ull << 30},
        {"512MiB", 512ull << 20}, {"512m", 512ull << 20}, {"512M", 512ull << 20}, {"8k", 8192},
        {"1T", 1ull << 40},     {"1.5G", 3ull << 29},   {"0.5K", 512},          {"4096", 4096},
        {"0G", 0},              {"16777215T", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        env e = {sizes[i].text, NULL, NULL, NULL, NULL, sizes[i].text};
        dmm_device_config c = marked();
        dmm_status s = dmm__torch_config_from_env(&c, get, &e);
        if (s != DMM_OK) fail_msg("'%s': %s", sizes[i].text, dmm_last_error());
        if (c.pool_va_bytes != sizes[i].want || c.stock_bytes != sizes[i].want)
            fail_msg("'%s' read as %llu", sizes[i].text, (unsigned long long)c.pool_va_bytes);
    }
    /* the sizes among the fields of the lists take units too; the divisors stay whole numbers */
    env e = {NULL, NULL, "256M,16M,32MiB", NULL, "128M,4,8M,256", NULL};
    dmm_device_config c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &e));
    assert_int_equal(c.max_chunk_bytes, 128ull << 20);
    assert_int_equal(c.handle_divisor, 4);
    assert_int_equal(c.min_chunk_bytes, 8ull << 20);
    assert_int_equal(c.floor_divisor, 256);
    assert_int_equal(c.restore_piece_bytes, 256ull << 20);
    assert_int_equal(c.restore_first_bytes, 16ull << 20);
    assert_int_equal(c.restore_copy_bytes, 32ull << 20);
}

static void unset_and_empty_leave_the_config_alone(void **state) {
    (void)state;
    const dmm_device_config want = marked();
    env unset = {NULL, NULL, NULL, NULL, NULL, NULL}, empty = {"", "", "", "", "", ""};
    dmm_device_config c = marked();
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &unset));
    assert_memory_equal(&c, &want, sizeof c);
    DMM_OK_OR_FAIL(dmm__torch_config_from_env(&c, get, &empty));
    assert_memory_equal(&c, &want, sizeof c);
}

typedef struct bad_case {
    env e;
    const char *variable; /* the sentence names it ... */
    const char *value;    /* ... and quotes this */
    const char *why;      /* ... and says this */
} bad_case;

static void malformed_values_fail_and_change_nothing(void **state) {
    (void)state;
    static const bad_case cases[] = {
        /* POOL_VA: each with valid neighbours, which must not be written either */
        {{"abc", "20", "0", NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'abc'", "is not a size"},
        {{"64Q", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'64Q'", "'Q' follows the number"},
        {{"64 G", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'64 G'", "' G' follows the number"},
        {{"64GG", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'64GG'", "'G' follows the number"},
        {{"64iB", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'64iB'", "'iB' follows the number"},
        {{"64E", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'64E'", "sizes take K, M, G or T"},
        {{"G", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'G'", "does not start with a digit"},
        {{"1.3", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'1.3'", "not a whole number of bytes"},
        {{"1.G", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'1.G'", "a digit must follow the decimal point"},
        {{"16777216T", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'16777216T'", "64 bits"},
        {{"0x10M", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'0x10M'", "hex"},
        {{"123abc", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'123abc'", "is not a size"},
        {{"-1", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'-1'", "no sign"},
        {{"+5", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'+5'", "no sign"},
        {{" 5", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "' 5'", "spaces"},
        {{"5 ", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'5 '", "spaces"},
        {{"0x1000", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'0x1000'", "hex"},
        {{"18446744073709551616", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'18446744073709551616'",
         "64 bits"},
        {{"99999999999999999999999", NULL, NULL, NULL, NULL, NULL}, "DMM_TORCH_POOL_VA", "'99999999999999999999999'",
         "64 bits"},
        /* RETAIN */
        {{"4096", "abc", "0", NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'abc'", "0 to 1000"},
        {{NULL, "1001", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'1001'", "0 to 1000"},
        {{NULL, "-1", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'-1'", "0 to 1000"},
        {{NULL, "20%", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'20%'", "0 to 1000"},
        {{NULL, "4294967316", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'4294967316'", "0 to 1000"}, /* 2^32 + 20 */
        {{NULL, "18446744073709551617", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'18446744073709551617'",
         "0 to 1000"},
        {{NULL, "1K", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'1K'", "0 to 1000"}, /* no units on per mille */
        {{NULL, "2.5", NULL, NULL, NULL, NULL}, "DMM_TORCH_RETAIN", "'2.5'", "0 to 1000"},
        /* SETTLE */
        {{NULL, NULL, NULL, "abc", NULL, NULL}, "DMM_TORCH_SETTLE", "'abc'", "0 to 1000"},
        {{"4096", "20", "0", "1001", NULL, NULL}, "DMM_TORCH_SETTLE", "'1001'", "0 to 1000"},
        {{NULL, NULL, NULL, "10%", NULL, NULL}, "DMM_TORCH_SETTLE", "'10%'", "0 to 1000"},
        /* HANDLES */
        {{NULL, NULL, NULL, NULL, "128Q", NULL}, "DMM_TORCH_HANDLES", "'128Q'", HANDLES_SYNTAX},
        {{NULL, NULL, NULL, NULL, "128M,4K", NULL}, "DMM_TORCH_HANDLES", "'128M,4K'", "field 2 ('4K')"}, /* a divisor */
        {{NULL, NULL, NULL, NULL, "128M,4,8M,2.5", NULL}, "DMM_TORCH_HANDLES", "'128M,4,8M,2.5'", "field 4 ('2.5')"},
        {{NULL, NULL, NULL, NULL, "134217728,", NULL}, "DMM_TORCH_HANDLES", "'134217728,'", HANDLES_SYNTAX},
        {{NULL, NULL, NULL, NULL, "1,2,3,4,5", NULL}, "DMM_TORCH_HANDLES", "'1,2,3,4,5'", HANDLES_SYNTAX},
        {{NULL, NULL, NULL, NULL, "1,2,8Mx", NULL}, "DMM_TORCH_HANDLES", "'1,2,8Mx'", "field 3 ('8Mx')"},
        {{"4096", "20", "0", "100", "1,4294967296", NULL}, "DMM_TORCH_HANDLES", "'1,4294967296'", HANDLES_SYNTAX},
        {{NULL, NULL, NULL, NULL, "1,2,3,4294967296", NULL}, "DMM_TORCH_HANDLES", "'1,2,3,4294967296'", HANDLES_SYNTAX},
        {{NULL, NULL, NULL, NULL, "1,2,3,", NULL}, "DMM_TORCH_HANDLES", "'1,2,3,'", HANDLES_SYNTAX},
        /* STOCK */
        {{NULL, NULL, NULL, NULL, NULL, "256Mi B"}, "DMM_TORCH_STOCK", "'256Mi B'", "is not a size"},
        {{"4096", "20", "0", "100", "0", "-1"}, "DMM_TORCH_STOCK", "'-1'", "it is negative"},
        {{NULL, NULL, NULL, NULL, NULL, "18446744073709551616"}, "DMM_TORCH_STOCK", "'18446744073709551616'",
         "does not fit in 64 bits"},
        /* RESTORE_PIECE */
        {{"4096", "20", "x", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'x'", "field 1 ('x')"},
        {{NULL, NULL, "32X", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'32X'", "field 1 ('32X')"},
        {{NULL, NULL, "32M,1.5", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'32M,1.5'", "not a whole number of bytes"},
        {{NULL, NULL, "33554432,", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'33554432,'", "field 2 ('')"},
        {{NULL, NULL, ",1", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "',1'", "field 1 ('')"},
        {{NULL, NULL, "1,,2", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'1,,2'", "field 2 ('')"},
        {{NULL, NULL, "1;2", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'1;2'", "field 1 ('1;2')"},
        {{NULL, NULL, "1, 2", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'1, 2'", "field 2 (' 2')"},
        {{NULL, NULL, "1,2,-3", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'1,2,-3'", "field 3 ('-3')"},
        {{NULL, NULL, "1,2,3,4", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE", "'1,2,3,4'", "more than three fields"},
        {{NULL, NULL, "1,99999999999999999999", NULL, NULL, NULL}, "DMM_TORCH_RESTORE_PIECE",
         "'1,99999999999999999999'",
         "64 bits"},
    };
    const dmm_device_config want = marked();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *k = &cases[i];
        dmm_device_config c = marked();
        dmm_clear_error();
        dmm_status s = dmm__torch_config_from_env(&c, get, (void *)&k->e);
        if (s != DMM_ERR_INVALID_ARGUMENT) fail_msg("case %zu (%s=%s): status %d", i, k->variable, k->value, (int)s);
        assert_memory_equal(&c, &want, sizeof c); /* nothing written, not even the valid neighbours */
        dmm_test_error_mentions("dmm torch: ", k->variable, k->value, k->why, "set it to", "or unset it", NULL);
    }
}

static void a_long_value_is_quoted_shortened(void **state) {
    (void)state;
    char big[300];
    memset(big, '7', sizeof big - 2);
    big[sizeof big - 2] = 'x';
    big[sizeof big - 1] = '\0';
    env e = {big, NULL, NULL, NULL, NULL, NULL};
    dmm_device_config c = marked();
    assert_int_equal(dmm__torch_config_from_env(&c, get, &e), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("DMM_TORCH_POOL_VA='7777", "...'", "unset it", NULL);
    assert_true(strlen(dmm_last_error()) < 600);
    assert_int_equal(dmm__torch_config_from_env(NULL, get, &e), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm__torch_config_from_env(&c, NULL, &e), DMM_ERR_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_values_are_read),
        cmocka_unit_test(sizes_take_binary_units),
        cmocka_unit_test(unset_and_empty_leave_the_config_alone),
        cmocka_unit_test(malformed_values_fail_and_change_nothing),
        cmocka_unit_test(a_long_value_is_quoted_shortened),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
