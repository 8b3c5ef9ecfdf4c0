/* adapters/torch/env.c — the environment variables of libdmm_torch.so, parsed into a dmm_device_config.
 *
 * What it owns: the syntax of DMM_TORCH_POOL_VA, DMM_TORCH_RETAIN, DMM_TORCH_SETTLE, DMM_TORCH_HANDLES,
 * DMM_TORCH_STOCK and DMM_TORCH_RESTORE_PIECE
 * (docs/torch.md), and the sentence a malformed one fails with.
 *
 * The idea: these knobs change how memory is laid out, so a typo must not silently become "the
 * default" (strtoull's 0): the first entry point that creates a device context fails with a sentence
 * naming the variable, its value and a valid setting, and nothing is created. The parser is a pure
 * function over a lookup callback, so a host unit test drives it without a GPU or the real
 * environment.
 *
 * The trade-off: strict decimal only (no sign, spaces, suffixes or hex; docs/torch.md promises plain
 * bytes), so "64G" or " 20" are refused rather than guessed at. An empty value counts as unset (the
 * measurement scripts pass "" for "the default").
 *
 * Invariants: on failure *cfg is unchanged; on success only the fields of the variables that are
 * set (non-empty) are written.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "env.h"

typedef enum num_result { NUM_OK, NUM_NOT_DECIMAL, NUM_TOO_BIG } num_result;

/* One decimal number at *s (digits only); on success *s moves past it. */
static num_result parse_u64(const char **s, uint64_t *out) {
    const char *p = *s;
    if (*p < '0' || *p > '9') return NUM_NOT_DECIMAL;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return NUM_TOO_BIG;
        v = v * 10 + d;
    }
    *s = p;
    *out = v;
    return NUM_OK;
}

/* The whole string is one decimal number. */
static num_result parse_whole(const char *s, uint64_t *out) {
    num_result r = parse_u64(&s, out);
    return r == NUM_OK && *s != '\0' ? NUM_NOT_DECIMAL : r;
}

#define SHOWN 64 /* characters of a value quoted in a sentence */

static dmm_status bad(const char *name, const char *value, const char *why, const char *remedy) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: %s='%.*s%s' %s; set it to %s or unset it", name, SHOWN,
                         value, strlen(value) > SHOWN ? "..." : "", why, remedy);
}

static const char *num_why(num_result r) {
    return r == NUM_TOO_BIG ? "is not a byte count: it does not fit in 64 bits"
                            : "is not a decimal byte count (digits only: no sign, spaces, suffix or hex)";
}

#define POOL_VA_REMEDY                                                                             \
    "a decimal number of bytes (e.g. 68719476736 for 64 GiB; 0 = the device memory rounded up to a power of two)"
#define RETAIN_REMEDY "the pool's retention in per mille of the live peak (e.g. 20 = 2 %; 0 = the pool's default)"
#define SETTLE_REMEDY                                                                              \
    "how far the pool's retention may rise while it keeps re-mapping memory, in per mille of the live peak " \
    "(e.g. 100 = 10 %; 0 = the pool's default; at or below the retention: never)"
#define HANDLES_REMEDY                                                                             \
    "MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]]: the pool's largest physical handle in decimal bytes, a multiple "  \
    "of the granule, optionally a divisor (a growth for n bytes then commits handles of at most "            \
    "n / DIVISOR), the smallest handle that divisor cuts to (decimal bytes, a multiple of the granule) and " \
    "a divisor of the live peak that raises that floor as the pool grows, e.g. 134217728,4 or "              \
    "67108864,8,8388608,256; 0 = one granule per handle"
#define STOCK_REMEDY                                                                               \
    "the bytes the pool's stock thread keeps committed ahead of a growing pool, decimal (e.g. 268435456 for " \
    "256 MiB, at most 1/128 of the live peak is used; 0 = no stock)"
#define PIECE_REMEDY                                                                               \
    "MAX[,FIRST[,COPY]] in decimal bytes (e.g. 33554432, or 268435456,16777216, or 0 for one commit per "   \
    "segment)"

static const char *lookup(dmm_torch_getenv_fn get, void *user, const char *name) {
    const char *v = get(user, name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

dmm_status dmm__device_config_from_env(dmm_device_config *cfg, dmm_torch_getenv_fn get, void *user) {
    if (cfg == NULL || get == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: reading the environment needs a config and a lookup");
    num_result r;

    const char *va = lookup(get, user, "DMM_TORCH_POOL_VA");
    uint64_t pool_va = 0;
    if (va != NULL && (r = parse_whole(va, &pool_va)) != NUM_OK)
        return bad("DMM_TORCH_POOL_VA", va, num_why(r), POOL_VA_REMEDY);

    const char *keep = lookup(get, user, "DMM_TORCH_RETAIN");
    uint64_t retain = 0;
    if (keep != NULL && ((r = parse_whole(keep, &retain)) != NUM_OK || retain > 1000))
        return bad("DMM_TORCH_RETAIN", keep, "is not a whole number from 0 to 1000", RETAIN_REMEDY);

    const char *settle = lookup(get, user, "DMM_TORCH_SETTLE");
    uint64_t settle_pm = 0;
    if (settle != NULL && ((r = parse_whole(settle, &settle_pm)) != NUM_OK || settle_pm > 1000))
        return bad("DMM_TORCH_SETTLE", settle, "is not a whole number from 0 to 1000", SETTLE_REMEDY);

    const char *hs = lookup(get, user, "DMM_TORCH_HANDLES");
    uint64_t handles[4] = {0, 0, 0, 0};
    if (hs != NULL) {
        const char *p = hs;
        r = parse_u64(&p, &handles[0]);
        for (int n = 1; n < 4 && r == NUM_OK && *p == ','; n++) {
            p++;
            r = parse_u64(&p, &handles[n]);
        }
        if (r == NUM_OK && *p != '\0') r = NUM_NOT_DECIMAL;
        if (r != NUM_OK || handles[1] > UINT32_MAX || handles[3] > UINT32_MAX)
            return bad("DMM_TORCH_HANDLES", hs,
                       "is not MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]] (decimal bytes, a whole divisor, decimal bytes, "
                       "a whole divisor)",
                       HANDLES_REMEDY);
    }

    const char *st = lookup(get, user, "DMM_TORCH_STOCK");
    uint64_t stock = 0;
    if (st != NULL && (r = parse_whole(st, &stock)) != NUM_OK) return bad("DMM_TORCH_STOCK", st, num_why(r), STOCK_REMEDY);

    const char *rp = lookup(get, user, "DMM_TORCH_RESTORE_PIECE");
    uint64_t piece[3] = {0, 0, 0};
    if (rp != NULL) {
        const char *p = rp;
        for (int n = 0;; n++) {
            if (n == 3) return bad("DMM_TORCH_RESTORE_PIECE", rp, "has more than three fields", PIECE_REMEDY);
            const char *field = p;
            r = parse_u64(&p, &piece[n]);
            if (r == NUM_OK && *p != '\0' && *p != ',') r = NUM_NOT_DECIMAL; /* trailing characters */
            if (r != NUM_OK) {
                char why[160];
                int len = (int)strcspn(field, ",");
                snprintf(why, sizeof why, "is not MAX[,FIRST[,COPY]]: field %d ('%.*s%s') %s", n + 1,
                         len < 32 ? len : 32, field, len > 32 ? "..." : "",
                         r == NUM_TOO_BIG ? "does not fit in 64 bits" : "is not a decimal byte count");
                return bad("DMM_TORCH_RESTORE_PIECE", rp, why, PIECE_REMEDY);
            }
            if (*p == '\0') break;
            p++; /* the comma */
        }
    }

    /* every value is valid: only now write */
    if (va != NULL) cfg->pool_va_bytes = pool_va;
    if (keep != NULL) cfg->retain_permille = (uint32_t)retain;
    if (settle != NULL) cfg->settle_permille = (uint32_t)settle_pm;
    if (hs != NULL) {
        cfg->max_chunk_bytes = handles[0] != 0 ? handles[0] : UINT64_MAX; /* 0 = one granule */
        cfg->handle_divisor = (uint32_t)handles[1];
        cfg->min_chunk_bytes = handles[2];
        cfg->floor_divisor = (uint32_t)handles[3];
    }
    if (st != NULL) cfg->stock_bytes = stock;
    if (rp != NULL) {
        cfg->restore_piece_bytes = piece[0] != 0 ? piece[0] : UINT64_MAX; /* 0 = one commit per segment */
        cfg->restore_first_bytes = piece[1];
        cfg->restore_copy_bytes = piece[2];
    }
    return DMM_OK;
}
