/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/env.c — the environment variables of libdmm_torch.so, parsed into a dmm_device_config.
 *
 * What it owns: which DMM_TORCH_* variable fills which field of the config, and the sentence a malformed
 * one fails with. The variables themselves (names, kinds, defaults, descriptions) are rows of dmm's one
 * option table (src/core/options.h, docs/options.md), and every number goes through its one grammar
 * (dmm__number_read): DMM_TORCH_POOL_VA, DMM_TORCH_STOCK and the sizes among the fields of
 * DMM_TORCH_HANDLES and DMM_TORCH_RESTORE_PIECE take units (64G, 512MiB, 1.5G, or plain bytes as
 * before); DMM_TORCH_RETAIN, DMM_TORCH_SETTLE and the divisors are whole numbers.
 *
 * The idea: these knobs change how memory is laid out, so a typo must not silently become "the
 * default" (strtoull's 0): the first entry point that creates a device context fails with a sentence
 * naming the variable, its value and a valid setting, and nothing is created. The parser is a pure
 * function over a lookup callback, so a host unit test drives it without a GPU or the real
 * environment (the library passes dmm__option_env_named, the table's reader).
 *
 * The trade-off: every variable is one list of comma-separated numbers (a single value is a list of
 * one), so the five share one loop and one sentence; a field's position says whether it is a size or
 * a whole number. An empty value counts as unset (the measurement scripts pass "" for "the default").
 *
 * Invariants: on failure *cfg is unchanged; on success only the fields of the variables that are
 * set (non-empty) are written.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/options.h"
#include "env.h"

#define SHOWN 64   /* characters of a value quoted in a sentence */
#define MAX_FIELDS 4

/* What each field of a variable is: a size (units allowed) or a whole number up to max. */
typedef struct field_rule {
    bool bytes;
    uint64_t max;
} field_rule;

typedef struct variable_rule {
    dmm_option_id id;
    int fields; /* at most this many */
    field_rule field[MAX_FIELDS];
} variable_rule;

enum { POOL_VA, RETAIN, SETTLE, HANDLES, STOCK, RESTORE_PIECE, PLAN, SHAREABLE, VARIABLES };

static const variable_rule rules[VARIABLES] = {
    [POOL_VA] = {DMM_OPTION_TORCH_POOL_VA, 1, {{true, UINT64_MAX}}},
    [RETAIN] = {DMM_OPTION_TORCH_RETAIN, 1, {{false, 1000}}},
    [SETTLE] = {DMM_OPTION_TORCH_SETTLE, 1, {{false, 1000}}},
    [HANDLES] = {DMM_OPTION_TORCH_HANDLES, 4, {{true, UINT64_MAX}, {false, UINT32_MAX}, {true, UINT64_MAX}, {false, UINT32_MAX}}},
    [STOCK] = {DMM_OPTION_TORCH_STOCK, 1, {{true, UINT64_MAX}}},
    [RESTORE_PIECE] = {DMM_OPTION_TORCH_RESTORE_PIECE, 3, {{true, UINT64_MAX}, {true, UINT64_MAX}, {true, UINT64_MAX}}},
    [PLAN] = {DMM_OPTION_TORCH_PLAN, 1, {{false, 1}}},
    [SHAREABLE] = {DMM_OPTION_TORCH_SHAREABLE, 1, {{false, 1}}},
};

#define SIZE_GRAMMAR "digits and an optional unit K, M, G or T, e.g. 64G or 512MiB; no sign, spaces or hex"

static dmm_status bad(const dmm_option *o, const char *value, const char *why) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                         "dmm torch: %s='%.*s%s' %s; set it to %s, e.g. %s, or unset it for the default (%s). %s: %s",
                         o->env, SHOWN, value, strlen(value) > SHOWN ? "..." : "", why, o->value, o->example,
                         o->fallback, o->env, o->description);
}

/* Reads `value` by rule r into v[0 .. r->fields) (zeros where a field is absent); DMM_OK or the refusal. */
static dmm_status read_variable(const variable_rule *r, const char *value, uint64_t *v) {
    static const char *const counted[] = {"one", "two", "three", "four"};
    const dmm_option *o = dmm__option(r->id);
    char reason[128], why[320];
    const char *p = value;
    for (int n = 0;; n++) {
        if (n == r->fields) {
            snprintf(why, sizeof why, "has more than %s field%s", counted[r->fields - 1], r->fields > 1 ? "s" : "");
            break;
        }
        size_t len = strcspn(p, ",");
        if (r->fields == 1) len = strlen(p); /* a single value: a comma is just a wrong character */
        const field_rule *f = &r->field[n];
        const char *no = dmm__number_read(p, len, f->bytes, &v[n], reason, sizeof reason);
        if (no == NULL && v[n] > f->max) {
            snprintf(reason, sizeof reason, "it is above the most, %llu", (unsigned long long)f->max);
            no = reason;
        }
        if (no != NULL) {
            if (r->fields > 1)
                snprintf(why, sizeof why, "is not %s (%s): field %d ('%.*s%s'): %s", o->value, o->what, n + 1,
                         len < 32 ? (int)len : 32, p, len > 32 ? "..." : "", no);
            else if (f->bytes) snprintf(why, sizeof why, "is not a size (" SIZE_GRAMMAR "): %s", no);
            else snprintf(why, sizeof why, "is not %s", o->what);
            break;
        }
        p += len;
        if (*p == '\0') return DMM_OK;
        p++; /* the comma */
    }
    return bad(o, value, why);
}

dmm_status dmm__torch_config_from_env(dmm_device_config *cfg, dmm_torch_getenv_fn get, void *user) {
    if (cfg == NULL || get == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: reading the environment needs a config and a lookup");
    const char *text[VARIABLES];
    uint64_t v[VARIABLES][MAX_FIELDS];
    memset(v, 0, sizeof v);
    for (int i = 0; i < VARIABLES; i++) {
        text[i] = get(user, dmm__option(rules[i].id)->env);
        if (text[i] != NULL && text[i][0] == '\0') text[i] = NULL; /* empty = unset */
        if (text[i] == NULL) continue;
        dmm_status s = read_variable(&rules[i], text[i], v[i]);
        if (s != DMM_OK) return s;
    }

    /* every value is valid: only now write */
    if (text[POOL_VA] != NULL) cfg->pool_va_bytes = v[POOL_VA][0];
    if (text[RETAIN] != NULL) cfg->retain_permille = (uint32_t)v[RETAIN][0];
    if (text[SETTLE] != NULL) cfg->settle_permille = (uint32_t)v[SETTLE][0];
    if (text[HANDLES] != NULL) {
        cfg->max_chunk_bytes = v[HANDLES][0] != 0 ? v[HANDLES][0] : UINT64_MAX; /* 0 = one granule */
        cfg->handle_divisor = (uint32_t)v[HANDLES][1];
        cfg->min_chunk_bytes = v[HANDLES][2];
        cfg->floor_divisor = (uint32_t)v[HANDLES][3];
    }
    if (text[STOCK] != NULL) cfg->stock_bytes = v[STOCK][0];
    if (text[PLAN] != NULL) cfg->plan_loops = (uint32_t)v[PLAN][0];
    if (text[SHAREABLE] != NULL) cfg->exportable = v[SHAREABLE][0] != 0;
    if (text[RESTORE_PIECE] != NULL) {
        cfg->restore_piece_bytes = v[RESTORE_PIECE][0] != 0 ? v[RESTORE_PIECE][0] : UINT64_MAX; /* 0 = one commit per segment */
        cfg->restore_first_bytes = v[RESTORE_PIECE][1];
        cfg->restore_copy_bytes = v[RESTORE_PIECE][2];
    }
    return DMM_OK;
}
