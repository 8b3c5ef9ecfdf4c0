/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/options.h — the one table of dmm's options (every environment variable dmm reads and every
 * flag of the dmm tool), the one reader of the environment, and the one grammar of numbers in them.
 * Internal: libdmm, its adapters, the tool and the tests; never installed.
 *
 * The table is served three ways: the library reads each variable through dmm__option_env (the only
 * getenv of dmm's C code), the tool prints each command's flags in its --help from the rows of that
 * command, and `dmm options --markdown` writes docs/options.md (a test fails when the file differs).
 * A new option is a new row here and in options.c, nowhere else.
 *
 * Numbers (dmm__number_read): DIGITS[.DIGITS][UNIT]. A size may carry a binary unit, K, M, G or T
 * (2^10 ... 2^40), in either case, optionally followed by "i", "B" or "iB" in either case: 64G, 64GiB,
 * 64gb, 512MiB, 512m and 536870912 are all sizes; a size may have up to 9 decimals when it comes out a
 * whole number of bytes (1.5G, 0.5K; not 1.3 or 1.0000000001K). A whole number (a count, per mille, a
 * divisor) is digits only. Never a sign, spaces, hex, an exponent or anything after the number.
 *
 * Thread contract: the table is constant; dmm__option_env reads the environment (getenv), which is
 * safe as long as no thread changes the environment meanwhile (as every getenv caller assumes).
 */
#ifndef DMM_CORE_OPTIONS_H
#define DMM_CORE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dmm_option_kind {
    DMM_OPTION_BYTES,    /* a size: a number with an optional binary unit (64G, 512MiB, 4096) */
    DMM_OPTION_COUNT,    /* a whole number: a count, a divisor, an ordinal */
    DMM_OPTION_PERMILLE, /* a whole number of per mille of something */
    DMM_OPTION_REAL,     /* a number with a fraction (digits only, no unit) */
    DMM_OPTION_TEXT,     /* a word, a path, a file name */
    DMM_OPTION_FIELDS,   /* comma-separated numbers (MAX[,DIVISOR[,...]]): its syntax says which */
    DMM_OPTION_SWITCH,   /* a flag that takes no value */
} dmm_option_kind;

/* One row per option: the order is the order of the docs and of each command's --help. */
typedef enum dmm_option_id {
    /* the environment */
    DMM_OPTION_TORCH_POOL_VA,
    DMM_OPTION_TORCH_RETAIN,
    DMM_OPTION_TORCH_SETTLE,
    DMM_OPTION_TORCH_HANDLES,
    DMM_OPTION_TORCH_STOCK,
    DMM_OPTION_TORCH_PLAN,
    DMM_OPTION_TORCH_RESTORE_PIECE,
    DMM_OPTION_TORCH_OOM,
    DMM_OPTION_TORCH_SHAREABLE,
    DMM_OPTION_CUDA_LIBRARY,
    DMM_OPTION_ORT_LIB,
    DMM_OPTION_PYTHON_LIB,
    DMM_OPTION_PYTHON_BUILD_DIR,
    DMM_OPTION_PYTHON_DISABLE,
    /* dmm replay */
    DMM_OPTION_REPLAY_DRIVER,
    DMM_OPTION_REPLAY_GRANULE,
    DMM_OPTION_REPLAY_CHUNK,
    DMM_OPTION_REPLAY_MAX_CHUNK,
    DMM_OPTION_REPLAY_HANDLE_DIV,
    DMM_OPTION_REPLAY_MIN_CHUNK,
    DMM_OPTION_REPLAY_FLOOR_DIV,
    DMM_OPTION_REPLAY_RETAIN,
    DMM_OPTION_REPLAY_SETTLE,
    DMM_OPTION_REPLAY_LAG,
    DMM_OPTION_REPLAY_NO_ALIAS,
    DMM_OPTION_REPLAY_REPEAT,
    DMM_OPTION_REPLAY_WARM,
    DMM_OPTION_REPLAY_WARM_LAYOUT,
    DMM_OPTION_REPLAY_STOCK,
    DMM_OPTION_REPLAY_PLAN,
    DMM_OPTION_REPLAY_PLAN_LOOPS,
    DMM_OPTION_REPLAY_JSON,
    DMM_OPTION_REPLAY_REPORT,
    DMM_OPTION_REPLAY_MAX_INPUT_BYTES,
    DMM_OPTION_REPLAY_MAX_RECORDS,
    /* dmm compare */
    DMM_OPTION_COMPARE_THRESHOLD_FLOOR,
    DMM_OPTION_COMPARE_K,
    DMM_OPTION_COMPARE_MAX_INPUT_BYTES,
    /* dmm ort */
    DMM_OPTION_ORT_LIMIT,
    DMM_OPTION_ORT_RUNS,
    DMM_OPTION_ORT_BATCH,
    DMM_OPTION_ORT_MAX_INPUT_BYTES,
    DMM_OPTION_ORT_WRITE_MODEL,
    /* dmm hold */
    DMM_OPTION_HOLD_SOCKET,
    DMM_OPTION_HOLD_LIMIT,
    DMM_OPTION_HOLD_CUDA,
    DMM_OPTION_HOLD_HELLO_DEADLINE,
    DMM_OPTION_HOLD_MAX_CONNECTIONS,
    DMM_OPTION_HOLD_MAX_CONNECTIONS_PER_UID,
    /* dmm options */
    DMM_OPTION_OPTIONS_MARKDOWN,
    DMM_OPTION_COUNT_ /* the number of rows */
} dmm_option_id;

typedef struct dmm_option {
    const char *env;         /* the environment variable, or NULL (a flag of the tool) */
    const char *flag;        /* the tool's flag ("--granule"), or NULL (a variable) */
    const char *reader;      /* who reads it: "libdmm_torch.so", "libdmm", "dmm replay", "python dmm" */
    dmm_option_kind kind;    /* how its value is read */
    uint64_t min, max;       /* the range of a number (BYTES, COUNT, PERMILLE, REAL), inclusive */
    const char *value;       /* its value's name in a synopsis: "SIZE", "N", "MAX[,FIRST[,COPY]]"; NULL: none */
    const char *what;        /* what the value is, for a refusal: "a size in bytes", "a number of Runs" */
    const char *example;     /* a valid value, for a refusal and the docs: "64G" */
    const char *fallback;    /* the default, in words: "4G", "the pool's default", NULL (none) */
    const char *description; /* what it does: one sentence, no final full stop */
} dmm_option;

/* The row of `id` (a valid id), or NULL. */
const dmm_option *dmm__option(dmm_option_id id);

/* The value of the variable of row `id` from the environment: NULL when the row has no variable, or the
 * variable is unset or empty (an empty value means "the default" everywhere in dmm). The only place
 * dmm's C code reads the environment. */
const char *dmm__option_env(dmm_option_id id);

/* The same by the variable's name, in the shape of a lookup callback (adapters/torch/env.h): NULL for a
 * name that is no row's variable, so nothing outside the table is read. `user` is unused. */
const char *dmm__option_env_named(void *user, const char *name);

/* Reads text[0 .. len) as a number of the grammar above: a size (units and whole-byte fractions) when
 * `bytes`, else a whole number (digits only). NULL with *out written, or the reason it is not one (a
 * phrase such as "it is negative" or "'Q' follows the number (sizes take K, M, G or T)", a literal
 * or written into why[whycap]); *out is untouched then. Pure. */
const char *dmm__number_read(const char *text, size_t len, bool bytes, uint64_t *out, char *why, size_t whycap);

/* The pieces of a number, for a caller that needs a fraction (compare's --k): whole.fraction (fraction
 * has `decimals` digits, at most max_decimals) × unit (1 unless `units`). Same reasons as above. */
typedef struct dmm_number_parts {
    uint64_t whole;    /* the digits before the point */
    uint64_t fraction; /* the digits after it, as a whole number */
    unsigned decimals; /* how many there are */
    uint64_t unit;     /* the unit's multiplier: 1, 2^10, 2^20, 2^30 or 2^40 */
} dmm_number_parts;
const char *dmm__number_scan(const char *text, size_t len, bool units, unsigned max_decimals, dmm_number_parts *out,
                             char *why, size_t whycap);

#ifdef __cplusplus
}
#endif

#endif /* DMM_CORE_OPTIONS_H */
