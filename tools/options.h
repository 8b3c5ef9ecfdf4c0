/* SPDX-License-Identifier: Apache-2.0 */
/* tools/options.h — the numeric options of the dmm tool, over dmm's one grammar of numbers.
 *
 * Every numeric option of every subcommand goes through dmm_opt_u64 (whole numbers: counts, per
 * mille, sizes) or dmm_opt_real (compare's K and floor), both over src/core/options.h's scanner:
 * decimal digits, for sizes an optional fraction and a unit K, M, G or T in either case (binary: K =
 * 1024; "KiB", "Ki" and "KB" spell the same). Nothing else: no sign, spaces, exponent, hex or trailing
 * characters, so a typo is an error, never a silent 0 or a truncation. A size must come out a whole
 * number of bytes ("1.5K" is 1536; "1.3" is refused); a whole number takes no fraction. The sentence
 * names the option, the value as given, what was wrong, and the range. The flags are rows of dmm's
 * option table (src/core/options.h): dmm_opt_flag_u64 and dmm_opt_flag_real take the range from the row.
 *
 * The output files the options name are output_file.h's.
 *
 * Pure: errors go into the caller's buffer; nothing here prints or exits. Thread contract: none
 * needed (no globals).
 */
#ifndef DMM_TOOLS_OPTIONS_H
#define DMM_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/options.h"

typedef struct dmm_opt_range {
    uint64_t min, max; /* inclusive */
    bool sizes;        /* K/M/G suffixes and fractions allowed ("2M", "1.5G") */
    const char *what;  /* what the value counts, for the sentence: "a size in bytes", "repetitions" */
    const char *example; /* a valid value, for the sentence ("2M") */
} dmm_opt_range;

/* All of `text` as the value of option `opt` ("--chunk"), within `r`. 0 with *out, or -1 with a
 * sentence in err (*out untouched). */
int dmm_opt_u64(const char *opt, const char *text, const dmm_opt_range *r, uint64_t *out, char *err, size_t errcap);

/* The same for a real number (digits and a fraction, no suffix) from min to max. */
int dmm_opt_real(const char *opt, const char *text, double min, double max, double *out, char *err, size_t errcap);

/* The same for the flag of table row `id` (a flag of kind BYTES, COUNT or PERMILLE; REAL): its name,
 * range, what and example come from the row. */
int dmm_opt_flag_u64(dmm_option_id id, const char *text, uint64_t *out, char *err, size_t errcap);
int dmm_opt_flag_real(dmm_option_id id, const char *text, double *out, char *err, size_t errcap);

#endif /* DMM_TOOLS_OPTIONS_H */
