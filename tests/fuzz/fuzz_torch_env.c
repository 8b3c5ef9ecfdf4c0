/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_torch_env.c — the torch adapter's DMM_TORCH_* knobs (adapters/torch/env.c,
 * compiled in like tests/unit/test_torch_env.c does: no GPU, no cuda.h) on hostile values.
 *
 * The input is an environment, one "NAME=value" per line (a value ends at the line's end or at a
 * NUL; the last line for a name wins; other lines are ignored). Each value the parser asks for is
 * handed over in a buffer of exactly its length plus the NUL. What must hold (env.h's contract):
 *   - a refusal is DMM_ERR_INVALID_ARGUMENT with a sentence naming a variable that is set, and leaves
 *     the whole config untouched (every byte);
 *   - an acceptance writes exactly the fields of the variables that are set, with the values an
 *     independent reading of the documented syntax gives (sizes: digits, a fraction of whole bytes and a
 *     binary unit K/M/G/T[i][B] in either case; whole numbers: digits; RETAIN and SETTLE ≤ 1000,
 *     HANDLES MAX[,DIVISOR ≤ 2^32 − 1[,MIN[,FLOOR_DIVISOR ≤ 2^32 − 1]]], RESTORE_PIECE MAX[,FIRST[,COPY]], MAX 0 = UINT64_MAX,
 *     STOCK bytes, PLAN and SHAREABLE 0 or 1), and
 *     refuses every value that reading refuses.
 */
#include "fuzzkit.h"

#include "../../adapters/torch/env.c"

#define NVARS 8
static const char *const names[NVARS] = {"DMM_TORCH_POOL_VA", "DMM_TORCH_RETAIN",        "DMM_TORCH_SETTLE",
                                         "DMM_TORCH_HANDLES", "DMM_TORCH_RESTORE_PIECE", "DMM_TORCH_STOCK",
                                         "DMM_TORCH_PLAN",    "DMM_TORCH_SHAREABLE"};

typedef struct fuzz_env {
    char *value[NVARS]; /* exact-size copies; NULL = unset */
    int asked[NVARS];
} fuzz_env;

static const char *fuzz_getenv(void *user, const char *name) {
    fuzz_env *e = user;
    for (int i = 0; i < NVARS; i++)
        if (strcmp(name, names[i]) == 0) {
            e->asked[i]++;
            return e->value[i];
        }
    FUZZ_ASSERT(0, "the parser asked for an unknown variable %s", name);
    return NULL;
}

/* The oracle, written apart from src/core/options.c in 128-bit arithmetic: one field of [s, end) as a
 * whole number (digits only) or, when `bytes`, a size: digits, optionally '.' and 1 to 9 digits, optionally
 * a unit K/M/G/T in either case followed by an optional i/I and an optional b/B; the value must be whole
 * bytes and fit in 64 bits. */
__extension__ typedef unsigned __int128 wide;
static bool field(const char *s, const char *end, bool bytes, uint64_t *out) {
    wide whole = 0, frac = 0, scale = 1, unit = 1;
    const char *p = s;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        whole = whole * 10 + (wide)(*p - '0');
        if (whole > UINT64_MAX) return false;
    }
    if (p == s) return false;
    if (bytes && p < end && *p == '.') {
        const char *q = ++p;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            frac = frac * 10 + (wide)(*p - '0');
            scale *= 10;
        }
        if (p == q || p - q > 9) return false;
    }
    if (bytes && p < end) {
        const char *units = "KMGT", *u = NULL;
        for (int i = 0; i < 4; i++)
            if (*p == units[i] || *p == units[i] + ('a' - 'A')) u = units + i;
        if (u != NULL) {
            unit = (wide)1 << (10 * (u - units + 1));
            p++;
            if (p < end && (*p == 'i' || *p == 'I')) p++;
            if (p < end && (*p == 'b' || *p == 'B')) p++;
        }
    }
    if (p != end) return false;
    if ((frac * unit) % scale != 0) return false;
    wide v = whole * unit + frac * unit / scale;
    if (v > UINT64_MAX) return false;
    *out = (uint64_t)v;
    return true;
}

/* Up to `max` comma-separated fields, field i a size when bytes[i]; false for anything else. */
static bool fields(const char *s, uint64_t *v, int max, const bool *bytes) {
    for (int n = 0;; n++) {
        if (n == max) return false;
        const char *end = s + strcspn(s, ",");
        if (!field(s, end, bytes[n], &v[n])) return false;
        if (*end == '\0') return true;
        s = end + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_env e;
    memset(&e, 0, sizeof e);
    for (size_t i = 0; i < size;) {
        const uint8_t *nl = memchr(data + i, '\n', size - i);
        size_t end = nl != NULL ? (size_t)(nl - data) : size;
        const uint8_t *eq = memchr(data + i, '=', end - i);
        if (eq != NULL) {
            size_t klen = (size_t)(eq - (data + i)), v = (size_t)(eq - data) + 1;
            const uint8_t *nul = memchr(data + v, '\0', end - v);
            size_t vlen = nul != NULL ? (size_t)(nul - (data + v)) : end - v;
            for (int k = 0; k < NVARS; k++)
                if (strlen(names[k]) == klen && memcmp(names[k], data + i, klen) == 0) {
                    free(e.value[k]);
                    e.value[k] = malloc(vlen + 1);
                    FUZZ_ASSERT(e.value[k] != NULL, "out of memory");
                    memcpy(e.value[k], data + v, vlen);
                    e.value[k][vlen] = '\0';
                }
        }
        i = end + 1;
    }

    /* what the documented syntax says */
    bool set[NVARS], ok = true;
    uint64_t v[NVARS][4];
    memset(v, 0, sizeof v);
    for (int k = 0; k < NVARS; k++) {
        set[k] = e.value[k] != NULL && e.value[k][0] != '\0';
        if (!set[k]) continue;
        static const int max_fields[NVARS] = {1, 1, 1, 4, 3, 1, 1, 1};
        static const bool bytes[NVARS][4] = {
            {true}, {false}, {false}, {true, false, true, false}, {true, true, true}, {true}, {false}, {false}};
        bool good = fields(e.value[k], v[k], max_fields[k], bytes[k]);
        if ((k == 1 || k == 2) && good && v[k][0] > 1000) good = false;
        if ((k == 6 || k == 7) && good && v[k][0] > 1) good = false;
        if (k == 3 && good && (v[k][1] > UINT32_MAX || v[k][3] > UINT32_MAX)) good = false;
        ok = ok && good;
    }

    dmm_device_config c, before;
    memset(&c, 0x5A, sizeof c);
    c.size = sizeof c;
    memcpy(&before, &c, sizeof c);
    dmm_clear_error();
    dmm_status s = dmm__torch_config_from_env(&c, fuzz_getenv, &e);
    if (s != DMM_OK) {
        FUZZ_ASSERT(s == DMM_ERR_INVALID_ARGUMENT, "refused with %s", dmm_status_str(s));
        FUZZ_ASSERT(!ok, "a valid environment was refused: %s", dmm_last_error());
        FUZZ_ASSERT(memcmp(&c, &before, sizeof c) == 0, "a refusal changed the config");
        const char *msg = dmm_last_error();
        bool named = false;
        for (int k = 0; k < NVARS; k++) named = named || (set[k] && strstr(msg, names[k]) != NULL);
        FUZZ_ASSERT(named && strstr(msg, "unset it") != NULL, "the sentence names no set variable: %s", msg);
    } else {
        FUZZ_ASSERT(ok, "an invalid environment was accepted");
        dmm_device_config want;
        memcpy(&want, &before, sizeof want);
        if (set[0]) want.pool_va_bytes = v[0][0];
        if (set[1]) want.retain_permille = (uint32_t)v[1][0];
        if (set[2]) want.settle_permille = (uint32_t)v[2][0];
        if (set[3]) {
            want.max_chunk_bytes = v[3][0] != 0 ? v[3][0] : UINT64_MAX;
            want.handle_divisor = (uint32_t)v[3][1];
            want.min_chunk_bytes = v[3][2];
            want.floor_divisor = (uint32_t)v[3][3];
        }
        if (set[4]) {
            want.restore_piece_bytes = v[4][0] != 0 ? v[4][0] : UINT64_MAX;
            want.restore_first_bytes = v[4][1];
            want.restore_copy_bytes = v[4][2];
        }
        if (set[5]) want.stock_bytes = v[5][0];
        if (set[6]) want.plan_loops = (uint32_t)v[6][0];
        if (set[7]) want.exportable = v[7][0] != 0;
        FUZZ_ASSERT(memcmp(&c, &want, sizeof c) == 0, "the config is not what the values say");
    }
    for (int k = 0; k < NVARS; k++) free(e.value[k]);
    return 0;
}
