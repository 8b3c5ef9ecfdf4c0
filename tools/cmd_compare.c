/* tools/cmd_compare.c — `dmm compare OLD.json NEW.json [--threshold-floor PCT] [--k K]`: the
 * comparator of two builds' bench results (DESIGN §8; the rule is in compare.h, the format and the
 * calibration in docs/benchmarks.md). Exit 0: nothing WORSE; 1: something WORSE; 2: bad input or
 * usage, with one sentence naming the file and the problem.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "compare.h"

static void compare_usage(FILE *f) {
    fprintf(f, "usage: dmm compare OLD.json NEW.json [--threshold-floor PCT] [--k K]\n\n"
               "Compares two results of one bench (written by bench_* --json FILE). A metric is WORSE when its\n"
               "median moved in the worse direction by more than max(K x noise, floor), where noise is\n"
               "1.4826 x sqrt((mad_old/median_old)^2 + (mad_new/median_new)^2). Defaults: K = %g, floor = %g %%.\n"
               "Exit 0 when nothing is WORSE, 1 when something is, 2 on bad input.\n",
            DMM_CMP_DEFAULT_K, 100 * DMM_CMP_DEFAULT_FLOOR);
}

/* A finite number >= 0 from the whole of s; false if s is not one. */
static bool parse_num(const char *s, double *out) {
    char *end = NULL;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || !(x >= 0) || x > 1e9) return false;
    *out = x;
    return true;
}

int dmm_cmd_compare(int argc, char **argv) {
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    const char *files[2] = {NULL, NULL};
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            compare_usage(stdout);
            return 0;
        }
        if (strcmp(arg, "--threshold-floor") == 0 || strcmp(arg, "--k") == 0) {
            double x = 0;
            if (i + 1 >= argc || !parse_num(argv[i + 1], &x)) {
                fprintf(stderr, "dmm compare: %s needs a number >= 0 (got %s%s%s).\n", arg, i + 1 < argc ? "'" : "",
                        i + 1 < argc ? argv[i + 1] : "nothing", i + 1 < argc ? "'" : "");
                return 2;
            }
            if (arg[2] == 'k') o.k = x;
            else o.floor = x / 100;
            i++;
            continue;
        }
        if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "dmm compare: unknown option '%s'.\n", arg);
            compare_usage(stderr);
            return 2;
        }
        if (nfiles == 2) {
            fprintf(stderr, "dmm compare: takes two files, OLD.json and NEW.json (a third: '%s').\n", arg);
            return 2;
        }
        files[nfiles++] = arg;
    }
    if (nfiles != 2) {
        compare_usage(stderr);
        return 2;
    }
    char err[1024];
    dmm_bench_file a, b;
    if (dmm_bench_load(files[0], &a, err, sizeof err) != 0) {
        fprintf(stderr, "dmm compare: %s\n", err);
        return 2;
    }
    if (dmm_bench_load(files[1], &b, err, sizeof err) != 0) {
        fprintf(stderr, "dmm compare: %s\n", err);
        dmm_bench_file_free(&a);
        return 2;
    }
    dmm_cmp_result r;
    int rc = 2;
    if (dmm_compare(&a, &b, files[0], files[1], &o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "dmm compare: %s\n", err);
    } else {
        dmm_cmp_print(stdout, &r, &a, &b, &o);
        rc = r.count[DMM_CMP_WORSE] > 0 ? 1 : 0;
        dmm_cmp_result_free(&r);
    }
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
    return rc;
}
