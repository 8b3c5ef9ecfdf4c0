/* tools/options.c — the numeric options of the dmm tool (contract: options.h).
 *
 * Idea: one scanner reads the text exactly — the digits before and after the point as integers, and
 * the suffix as a multiplier — so a value is never routed through a double on its way to an integer
 * (strtod took "nan", "1e3", "0x10" and " 2M", and a cast of NaN is undefined). The whole-number
 * path then checks the multiplication and that the fraction makes whole units; the real path divides.
 * Invariants: a result is written only on success; every refusal is one sentence of the form
 * "OPT wants WHAT from MIN to MAX (e.g. EXAMPLE), not 'TEXT': REASON".
 */
#include "options.h"

#include <stdio.h>
#include <string.h>

#define SHOWN 40 /* characters of a value quoted in a sentence */

typedef struct scanned {
    uint64_t whole;    /* the digits before the point */
    uint64_t frac;     /* the digits after it, as a whole number */
    unsigned decimals; /* how many there are */
    uint64_t mult;     /* the suffix's: 1, 2^10, 2^20 or 2^30 */
} scanned;

/* Reads all of s; NULL with v filled, or the reason it is not a number of that grammar (a literal,
 * or written into why[96]). */
static const char *scan(const char *s, bool sizes, unsigned max_decimals, scanned *v, char *why) {
    memset(v, 0, sizeof *v);
    v->mult = 1;
    if (*s == '\0') return "it is empty";
    if (*s == '-') return "it is negative";
    if (*s < '0' || *s > '9') return "it does not start with a digit";
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v->whole > (UINT64_MAX - d) / 10) return "it does not fit in 64 bits";
        v->whole = v->whole * 10 + d;
    }
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9') return "a digit must follow the decimal point";
        for (; *s >= '0' && *s <= '9'; s++) {
            if (v->decimals == max_decimals) {
                snprintf(why, 96, "it has more than %u decimals", max_decimals);
                return why;
            }
            v->frac = v->frac * 10 + (uint64_t)(*s - '0');
            v->decimals++;
        }
    }
    if (sizes && *s != '\0' && strchr("kKmMgG", *s) != NULL) {
        v->mult = *s == 'k' || *s == 'K' ? (uint64_t)1 << 10 : *s == 'm' || *s == 'M' ? (uint64_t)1 << 20 : (uint64_t)1 << 30;
        s++;
        if (strcmp(s, "i") == 0 || strcmp(s, "iB") == 0 || strcmp(s, "B") == 0) s += strlen(s);
    }
    if (*s != '\0') {
        snprintf(why, 96, "'%.*s%s' follows the number%s", 16, s, strlen(s) > 16 ? "..." : "",
                 sizes ? " (sizes take K, M or G)" : "");
        return why;
    }
    return NULL;
}

static int refuse(char *err, size_t errcap, const char *opt, const char *what, const char *range, const char *example,
                  const char *text, const char *why) {
    if (errcap > 0)
        snprintf(err, errcap, "%s wants %s %s%s%s%s, not '%.*s%s': %s", opt, what, range, example ? " (e.g. " : "",
                 example ? example : "", example ? ")" : "", SHOWN, text, strlen(text) > SHOWN ? "..." : "", why);
    return -1;
}

int dmm_opt_u64(const char *opt, const char *text, const dmm_opt_range *r, uint64_t *out, char *err, size_t errcap) {
    char range[64], why[96];
    snprintf(range, sizeof range, "from %llu to %llu", (unsigned long long)r->min, (unsigned long long)r->max);
    scanned v;
    const char *bad = scan(text, r->sizes, 9, &v, why);
    if (bad != NULL) return refuse(err, errcap, opt, r->what, range, r->example, text, bad);
    uint64_t pow10 = 1, x = 0, part = v.frac * v.mult; /* frac < 10^9 and mult ≤ 2^30: no overflow */
    for (unsigned i = 0; i < v.decimals; i++) pow10 *= 10;
    if (part % pow10 != 0)
        return refuse(err, errcap, opt, r->what, range, r->example, text,
                      r->sizes ? "it is not a whole number of bytes" : "it is not a whole number");
    if (__builtin_mul_overflow(v.whole, v.mult, &x) || __builtin_add_overflow(x, part / pow10, &x))
        return refuse(err, errcap, opt, r->what, range, r->example, text, "it does not fit in 64 bits");
    if (x < r->min || x > r->max) {
        snprintf(why, sizeof why, "it is %s the %s, %llu", x < r->min ? "below" : "above", x < r->min ? "least" : "most",
                 (unsigned long long)(x < r->min ? r->min : r->max));
        return refuse(err, errcap, opt, r->what, range, r->example, text, why);
    }
    *out = x;
    return 0;
}

int dmm_opt_real(const char *opt, const char *text, double min, double max, double *out, char *err, size_t errcap) {
    char range[64], why[96];
    snprintf(range, sizeof range, "from %.15g to %.15g", min, max);
    scanned v;
    const char *bad = scan(text, false, 15, &v, why);
    if (bad != NULL) return refuse(err, errcap, opt, "a number", range, NULL, text, bad);
    double pow10 = 1;
    for (unsigned i = 0; i < v.decimals; i++) pow10 *= 10;
    double x = (double)v.whole + (double)v.frac / pow10;
    if (!(x >= min && x <= max)) {
        snprintf(why, sizeof why, "it is %s the %s, %.15g", x < min ? "below" : "above", x < min ? "least" : "most",
                 x < min ? min : max);
        return refuse(err, errcap, opt, "a number", range, NULL, text, why);
    }
    *out = x;
    return 0;
}

