/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_compare.c — `dmm compare OLD.json NEW.json [--threshold-floor PCT] [--k K]
 * [--max-input-bytes SIZE]`: the
 * comparator of two builds' bench results (DESIGN §8; the rule is in compare.h, the format and the
 * calibration in docs/benchmarks.md). Exit 0: nothing WORSE; 1: something WORSE; 2: bad input or
 * usage, with one sentence naming the file and the problem.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "compare.h"

void dmm_usage_compare(FILE *f) {
    fprintf(f, "usage: dmm compare OLD.json NEW.json [--threshold-floor PCT] [--k K] [--max-input-bytes SIZE]\n\n"
               "Compares two results of one bench (written by bench_* --json FILE). A metric is WORSE when its\n"
               "median moved in the worse direction by more than max(K x noise, floor), where noise is\n"
               "1.4826 x sqrt((mad_old/median_old)^2 + (mad_new/median_new)^2).\n");
    dmm_cli_print_flags(f, "dmm compare");
    fprintf(f, "Options take --opt VALUE or --opt=VALUE. Exit 0 when nothing is WORSE, 1 when something is, 2 on\n"
               "bad input.\n");
}

int dmm_cmd_compare(int argc, char **argv) {
    /* (jansson's tree takes up to ~75 times the text, for a file of empty objects: 1 GiB of text is
     * the most --max-input-bytes allows) */
    struct option longs[8];
    dmm_cli_longs("dmm compare", longs, sizeof longs / sizeof longs[0]);
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    double pct = 100 * DMM_CMP_DEFAULT_FLOOR;
    uint64_t max_bytes = DMM_BENCH_MAX_FILE;
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'h': dmm_usage_compare(stdout); return 0;
        case DMM_CLI_FLAG(DMM_OPTION_COMPARE_THRESHOLD_FLOOR):
            rc = dmm_cli_flag_real("compare", DMM_OPTION_COMPARE_THRESHOLD_FLOOR, optarg, &pct);
            break;
        case DMM_CLI_FLAG(DMM_OPTION_COMPARE_K): rc = dmm_cli_flag_real("compare", DMM_OPTION_COMPARE_K, optarg, &o.k); break;
        case DMM_CLI_FLAG(DMM_OPTION_COMPARE_MAX_INPUT_BYTES):
            rc = dmm_cli_flag_u64("compare", DMM_OPTION_COMPARE_MAX_INPUT_BYTES, optarg, &max_bytes);
            break;
        default: return dmm_cli_bad_option("compare", c, argv);
        }
        if (rc != 0) return rc;
    }
    o.floor = pct / 100;
    if (argc - optind != 2) {
        if (argc - optind > 2)
            fprintf(stderr, "dmm compare: takes two files, OLD.json and NEW.json (a third: '%s').\n", argv[optind + 2]);
        else dmm_usage_compare(stderr);
        return 2;
    }
    const char *files[2] = {argv[optind], argv[optind + 1]};
    char err[1024];
    dmm_bench_file a, b;
    if (dmm_bench_load_bounded(files[0], max_bytes, &a, err, sizeof err) != 0) {
        fprintf(stderr, "dmm compare: %s\n", err);
        return 2;
    }
    if (dmm_bench_load_bounded(files[1], max_bytes, &b, err, sizeof err) != 0) {
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
