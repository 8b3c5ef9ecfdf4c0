/* SPDX-License-Identifier: Apache-2.0 */
/* tools/options.c — the numeric options of the dmm tool (contract: options.h).
 *
 * Idea: the grammar is dmm's one (src/core/options.c: dmm__number_read and dmm__number_scan read the
 * text exactly, never through a double); this file adds the range and the tool's sentence, and for a
 * flag of the option table takes the range, what the value is and an example from its row.
 * Invariants: a result is written only on success; every refusal is one sentence of the form
 * "OPT wants WHAT from MIN to MAX (e.g. EXAMPLE), not 'TEXT': REASON".
 */
#include "options.h"

#include <stdio.h>
#include <string.h>

#define SHOWN 40 /* characters of a value quoted in a sentence */

static int refuse(char *err, size_t errcap, const char *opt, const char *what, const char *range, const char *example,
                  const char *text, const char *why) {
    if (errcap > 0)
        snprintf(err, errcap, "%s wants %s %s%s%s%s, not '%.*s%s': %s", opt, what, range, example ? " (e.g. " : "",
                 example ? example : "", example ? ")" : "", SHOWN, text, strlen(text) > SHOWN ? "..." : "", why);
    return -1;
}

int dmm_opt_u64(const char *opt, const char *text, const dmm_opt_range *r, uint64_t *out, char *err, size_t errcap) {
    char range[64], why[128];
    snprintf(range, sizeof range, "from %llu to %llu", (unsigned long long)r->min, (unsigned long long)r->max);
    uint64_t x = 0;
    const char *bad = dmm__number_read(text, strlen(text), r->sizes, &x, why, sizeof why);
    if (bad != NULL) return refuse(err, errcap, opt, r->what, range, r->example, text, bad);
    if (x < r->min || x > r->max) {
        snprintf(why, sizeof why, "it is %s the %s, %llu", x < r->min ? "below" : "above", x < r->min ? "least" : "most",
                 (unsigned long long)(x < r->min ? r->min : r->max));
        return refuse(err, errcap, opt, r->what, range, r->example, text, why);
    }
    *out = x;
    return 0;
}

int dmm_opt_real(const char *opt, const char *text, double min, double max, double *out, char *err, size_t errcap) {
    char range[64], why[128];
    snprintf(range, sizeof range, "from %.15g to %.15g", min, max);
    dmm_number_parts v;
    const char *bad = dmm__number_scan(text, strlen(text), false, 15, &v, why, sizeof why);
    if (bad != NULL) return refuse(err, errcap, opt, "a number", range, NULL, text, bad);
    double pow10 = 1;
    for (unsigned i = 0; i < v.decimals; i++) pow10 *= 10;
    double x = (double)v.whole + (double)v.fraction / pow10;
    if (!(x >= min && x <= max)) {
        snprintf(why, sizeof why, "it is %s the %s, %.15g", x < min ? "below" : "above", x < min ? "least" : "most",
                 x < min ? min : max);
        return refuse(err, errcap, opt, "a number", range, NULL, text, why);
    }
    *out = x;
    return 0;
}


int dmm_opt_flag_u64(dmm_option_id id, const char *text, uint64_t *out, char *err, size_t errcap) {
    const dmm_option *o = dmm__option(id);
    dmm_opt_range r = {o->min, o->max, o->kind == DMM_OPTION_BYTES, o->what, o->example};
    return dmm_opt_u64(o->flag, text, &r, out, err, errcap);
}

int dmm_opt_flag_real(dmm_option_id id, const char *text, double *out, char *err, size_t errcap) {
    const dmm_option *o = dmm__option(id);
    return dmm_opt_real(o->flag, text, (double)o->min, (double)o->max, out, err, errcap);
}
