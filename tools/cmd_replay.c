/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_replay.c — `dmm replay TRACE.gz [OPTIONS]`: replays an allocation trace through the pool
 * and reports peak live, physical and committed bytes and their ratio beside PyTorch's, driver calls
 * by kind and per 1,000 allocations, and malloc/free latency percentiles (as text, as JSON with
 * --json, and as an HTML page with --report).
 *
 * Order of work: options (every numeric one through the one parser, commands.h), then the output
 * files opened (output_file.h: an unwritable --report or --json=FILE fails before anything is read),
 * then the trace, within --max-input-bytes of text and --max-records events (trace.h: an endless input
 * ends there), then dmm_replay_check (sizes the replay cannot take fail before any driver call), then
 * the replay. A replay that fails leaves every output as it was.
 *
 * On the host driver the replay maps real memfd memory but never touches it, so RSS stays small;
 * it does hold one file descriptor per physical chunk, so the command raises its soft open-file
 * limit to the hard one first.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "commands.h"
#include "replay.h"
#include "report.h"
#include "trace.h"

void dmm_usage_replay(FILE *f) {
    fprintf(f, "usage: dmm replay TRACE.gz [--driver host|cuda] [--granule BYTES] [--chunk BYTES]\n"
               "                  [--max-chunk BYTES] [--handle-div N] [--min-chunk BYTES] [--floor-div N]\n"
               "                  [--retain PERMILLE] [--settle PERMILLE] [--lag N] [--no-alias] [--repeat K]\n"
               "                  [--warm BYTES] [--warm-layout] [--stock BYTES] [--plan] [--plan-loops]\n"
               "                  [--json[=FILE]] [--report FILE.html] [--max-input-bytes SIZE] [--max-records N]\n\n"
               "Replays an allocation trace (# dmm-trace v1, gzip) through the dmm pool over an arena and\n"
               "prints peak live, physical and committed bytes, their ratio beside PyTorch's, driver calls\n"
               "by kind and per 1,000 allocations, and malloc/free latency percentiles.\n");
    dmm_cli_print_flags(f, "dmm replay");
    fprintf(f, "Sizes take K, M, G or T (2M, 1.5G, 512MiB). Options take --opt VALUE or --opt=VALUE. Output\n"
               "files are opened before the replay starts: a regular file is written beside its target and\n"
               "renamed into place when the replay succeeded; a device, FIFO or terminal is written in place;\n"
               "nothing else is created, cut or removed.\n"
               "Exit 0 done, 1 the trace or the replay failed, 2 bad usage.\n");
}

typedef struct replay_args {
    dmm_replay_opts o;
    const char *path, *report, *json_path; /* json_path: --json=FILE (NULL: stdout or no JSON) */
    bool json;
    dmm_trace_limits limits; /* --max-input-bytes, --max-records (0: the defaults) */
} replay_args;

/* 0 with *a filled; -1 after --help (printed); 2 after a sentence. */
static int parse(int argc, char **argv, replay_args *a) {
    memset(a, 0, sizeof *a);
    a->o.driver = "host";
    a->o.time_ops = true;
    struct option longs[DMM_OPTION_COUNT_ + 2];
    dmm_cli_longs("dmm replay", longs, sizeof longs / sizeof longs[0]);
    dmm_cli_getopt_reset();
    int c;
    /* where each numeric flag's value goes (the 32-bit fields' rows have ranges within 32 bits) */
    const struct {
        dmm_option_id id;
        uint64_t *u64;
        uint32_t *u32;
    } numbers[] = {
        {DMM_OPTION_REPLAY_GRANULE, &a->o.granule, NULL},
        {DMM_OPTION_REPLAY_CHUNK, &a->o.chunk_bytes, NULL},
        {DMM_OPTION_REPLAY_MAX_CHUNK, &a->o.max_chunk_bytes, NULL},
        {DMM_OPTION_REPLAY_HANDLE_DIV, NULL, &a->o.handle_divisor},
        {DMM_OPTION_REPLAY_MIN_CHUNK, &a->o.min_chunk_bytes, NULL},
        {DMM_OPTION_REPLAY_FLOOR_DIV, NULL, &a->o.floor_divisor},
        {DMM_OPTION_REPLAY_RETAIN, NULL, &a->o.retain_permille},
        {DMM_OPTION_REPLAY_SETTLE, NULL, &a->o.settle_permille},
        {DMM_OPTION_REPLAY_LAG, &a->o.lag, NULL},
        {DMM_OPTION_REPLAY_REPEAT, NULL, &a->o.repeat},
        {DMM_OPTION_REPLAY_WARM, &a->o.warm_bytes, NULL},
        {DMM_OPTION_REPLAY_STOCK, &a->o.stock_bytes, NULL},
        {DMM_OPTION_REPLAY_MAX_INPUT_BYTES, &a->limits.max_text_bytes, NULL},
        {DMM_OPTION_REPLAY_MAX_RECORDS, &a->limits.max_records, NULL},
    };
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        bool number = false;
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0] && !number; i++) {
            if (c != DMM_CLI_FLAG(numbers[i].id)) continue;
            number = true;
            uint64_t v = 0;
            if (dmm_cli_flag_u64("replay", numbers[i].id, optarg, &v) != 0) return 2;
            if (numbers[i].u64 != NULL) *numbers[i].u64 = v;
            else *numbers[i].u32 = (uint32_t)v;
        }
        if (number) continue;
        switch (c) {
        case 'h': dmm_usage_replay(stdout); return -1;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_DRIVER): a->o.driver = optarg; break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_NO_ALIAS): a->o.no_alias = true; break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_WARM_LAYOUT): a->o.warm_layout = true; break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_PLAN): a->o.plan = true; break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_PLAN_LOOPS): a->o.plan_loops = true; break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_JSON):
            a->json = true;
            a->json_path = optarg;
            break;
        case DMM_CLI_FLAG(DMM_OPTION_REPLAY_REPORT): a->report = optarg; break;
        default: return dmm_cli_bad_option("replay", c, argv);
        }
    }
    if (optind == argc) {
        dmm_usage_replay(stderr);
        return 2;
    }
    if (argc - optind > 1) {
        fprintf(stderr, "dmm replay: one trace at a time ('%s' and '%s')%s\n", argv[optind], argv[optind + 1],
                a->json && a->json_path == NULL ? "; --json takes its file as --json=FILE" : "");
        return 2;
    }
    a->path = argv[optind];
    const dmm_replay_opts *o = &a->o;
    if (strcmp(o->driver, "host") != 0 && strcmp(o->driver, "cuda") != 0) {
        fprintf(stderr, "dmm replay: --driver must be host or cuda, not '%s'\n", o->driver);
        return 2;
    }
    if (o->lag != 0 && strcmp(o->driver, "cuda") == 0) {
        fprintf(stderr, "dmm replay: --lag imitates a GPU's pending events on the host driver; CUDA has real ones\n");
        return 2;
    }
    if (o->granule != 0 && strcmp(o->driver, "cuda") == 0) {
        fprintf(stderr, "dmm replay: --granule applies to the host driver; CUDA's granularity is the device's\n");
        return 2;
    }
    return 0;
}

/* The host driver holds one memfd per chunk: an estimate of what the trace needs, said up front. */
static void warn_open_files(const dmm_trace *t, const dmm_replay_opts *o) {
    struct rlimit rl;
    uint64_t chunk = o->chunk_bytes ? o->chunk_bytes : o->granule ? o->granule : (2u << 20);
    uint64_t n = t->peak_live_bytes / chunk, need = n + n / 10 + 128; /* (the peak is at most 2^58) */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        fprintf(stderr,
                "dmm replay: warning: the host driver holds one file descriptor per %llu-byte chunk; this trace "
                "needs about %llu but the limit is %llu (raise it with ulimit -n, or pass a larger --granule)\n",
                (unsigned long long)chunk, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
}

int dmm_cmd_replay(int argc, char **argv) {
    replay_args a;
    int rc = parse(argc, argv, &a);
    if (rc != 0) return rc < 0 ? 0 : rc;
    char err[1024];
    const char *inputs[1] = {a.path};
    dmm_output_file report, json;
    memset(&report, 0, sizeof report);
    memset(&json, 0, sizeof json);
    json.f = a.json ? stdout : NULL; /* --json alone: the standard output */
    json.opt = "--json";
    json.path = "-";
    if ((a.report != NULL && dmm_output_open("--report", a.report, inputs, 1, &report, err, sizeof err) != 0) ||
        (a.json_path != NULL && dmm_output_open("--json", a.json_path, inputs, 1, &json, err, sizeof err) != 0)) {
        fprintf(stderr, "dmm replay: %s\n", err);
        dmm_output_close(&report, false, NULL, 0);
        return 2;
    }
    bool host = strcmp(a.o.driver, "host") == 0;
    if (host) {
        /* one memfd per physical chunk: lift the soft open-file limit to the hard one */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    dmm_trace t;
    dmm_replay_result r;
    memset(&r, 0, sizeof r);
    bool ok = false;
    if (dmm_trace_load_limited(a.path, &a.limits, &t, err, sizeof err) != 0 ||
        dmm_replay_check(&t, &a.o, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "dmm replay: %s\n", err);
    } else {
        if (host) warn_open_files(&t, &a.o);
        if (dmm_replay_run(&t, &a.o, &r, err, sizeof err) != 0) {
            fprintf(stderr, "dmm replay: %s\n", err);
        } else {
            ok = true;
            if (json.f != stdout) dmm_report_text(stdout, a.path, &t, &r);
            if (json.f != NULL) dmm_report_json(json.f, a.path, &t, &r);
            if (report.f != NULL) dmm_report_html(report.f, a.path, &t, &r);
            if (json.f != stdout) {
                if (a.json_path != NULL) printf("  json            %s\n", a.json_path);
                if (report.f != NULL) printf("  report          %s\n", a.report);
            }
        }
    }
    rc = ok ? 0 : 1;
    dmm_output_file *outs[2] = {&report, &json};
    for (int i = 0; i < 2; i++)
        if (dmm_output_close(outs[i], ok, err, sizeof err) != 0 && ok) {
            fprintf(stderr, "dmm replay: %s\n", err);
            rc = 1;
        }
    dmm_replay_result_free(&r);
    dmm_trace_free(&t); /* (also after a failed load: trace.h) */
    return rc;
}
