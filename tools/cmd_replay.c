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
               "                  [--warm BYTES] [--warm-layout] [--stock BYTES] [--json[=FILE]]\n"
               "                  [--report FILE.html] [--max-input-bytes SIZE] [--max-records N]\n\n"
               "Replays an allocation trace (# dmm-trace v1, gzip) through the dmm pool over an arena and\n"
               "prints peak live, physical and committed bytes, their ratio beside PyTorch's, driver calls\n"
               "by kind and per 1,000 allocations, and malloc/free latency percentiles.\n"
               "  --driver     host (default: mmap + memfd, real memory never touched) or cuda\n"
               "  --granule    host driver granularity (default 2 MiB); sizes take K/M/G suffixes (2M, 1.5G),\n"
               "               from 1 byte to 2^63\n"
               "  --chunk      pool commit quantum (default: the granule)\n"
               "  --max-chunk  largest chunk a growth commits as one handle (default: the quantum;\n"
               "               larger: fewer driver calls, more fragmentation)\n"
               "  --handle-div with --max-chunk: a growth for n bytes commits handles of at most n / N\n"
               "               (only large requests get large handles; default 0: up to --max-chunk)\n"
               "  --min-chunk  with --handle-div: the smallest handle the divisor cuts to (a multiple of the\n"
               "               quantum, at most --max-chunk; default: the quantum)\n"
               "  --floor-div  with --handle-div: the floor rises to the live peak / N (up to --max-chunk;\n"
               "               default 0: a fixed floor)\n"
               "  --retain     memory kept mapped while free, in permille of the live peak (default 20)\n"
               "  --settle     the most the retention limit rises while the pool keeps re-mapping memory,\n"
               "               in permille of the live peak (default 100; at or below --retain: fixed)\n"
               "  --lag        host driver: every event completes only N allocations after it was recorded,\n"
               "               as on a GPU where the CPU runs ahead of the work (default 0: at once)\n"
               "  --no-alias   the pool never aliases fenced chunks of the requesting stream (it waits or\n"
               "               grows instead): the behaviour before aliases, for comparison\n"
               "  --repeat     the trace as one iteration, replayed K times (1 to 1000) over the same pool\n"
               "               (each repetition's leftovers freed before the next); also prints the driver\n"
               "               calls, aliases and moves of the last repetition alone: the steady state\n"
               "  --warm       a warm start: the pool first commits BYTES (e.g. the last run's peak) in\n"
               "               handles of up to 1 GiB, timed with the replay (default: none)\n"
               "  --warm-layout a warm start that keeps the layout: the trace is first replayed once,\n"
               "               untimed, with the same options (the last run), and the handles that\n"
               "               pool created for its growths are committed ahead, each at its place,\n"
               "               timed with the replay; growths take them as they come (dmm_pool_warm_layout)\n"
               "  --stock      the pool's stock thread keeps up to BYTES (at most 1/128 of the live peak)\n"
               "               committed ahead of a growing pool, synced after every malloc (default: none)\n"
               "  --json       one JSON object instead of text; --json=FILE writes it to FILE (and the text\n"
               "               to the standard output)\n"
               "  --report     also write a self-contained HTML page with the timeline\n"
               "  --max-input-bytes  the most text the trace may hold, after decompression (default 4G); an\n"
               "               endless or larger input ends there with an error\n"
               "  --max-records the most events (lines that are not comments) the trace may hold (default\n"
               "               100000000); an endless or longer input ends there with an error\n"
               "Options take --opt VALUE or --opt=VALUE. Output files are opened before the replay starts: a\n"
               "regular file is written beside its target and renamed into place when the replay succeeded; a\n"
               "device, FIFO or terminal is written in place; nothing else is created, cut or removed.\n"
               "Exit 0 done, 1 the trace or the replay failed, 2 bad usage.\n");
}

static const dmm_opt_range SIZE = {1, (uint64_t)1 << 63, true, "a size in bytes", "2097152 or 2M"};
static const dmm_opt_range PERMILLE = {0, UINT32_MAX, false, "a whole number of per mille", "20 = 2 %"};
static const dmm_opt_range DIVISOR = {0, UINT32_MAX, false, "a whole divisor", "4"};
static const dmm_opt_range LAG = {0, UINT64_MAX, false, "a number of allocations", "64"};
static const dmm_opt_range REPEAT = {1, 1000, false, "a number of repetitions", "4"};
static const dmm_opt_range INPUT_BYTES = {1, (uint64_t)1 << 50, true, "a size in bytes", "8G"};
static const dmm_opt_range RECORDS = {1, (uint64_t)1 << 32, false, "a number of events", "200000000"};

enum {
    OPT_DRIVER = 256, OPT_GRANULE, OPT_CHUNK, OPT_MAX_CHUNK, OPT_HANDLE_DIV, OPT_MIN_CHUNK, OPT_FLOOR_DIV,
    OPT_RETAIN, OPT_SETTLE, OPT_LAG, OPT_NO_ALIAS, OPT_REPEAT, OPT_WARM, OPT_WARM_LAYOUT, OPT_STOCK, OPT_JSON,
    OPT_REPORT, OPT_MAX_INPUT_BYTES, OPT_MAX_RECORDS,
};

static const struct option longs[] = {
    {"driver", required_argument, NULL, OPT_DRIVER},
    {"granule", required_argument, NULL, OPT_GRANULE},
    {"chunk", required_argument, NULL, OPT_CHUNK},
    {"max-chunk", required_argument, NULL, OPT_MAX_CHUNK},
    {"handle-div", required_argument, NULL, OPT_HANDLE_DIV},
    {"min-chunk", required_argument, NULL, OPT_MIN_CHUNK},
    {"floor-div", required_argument, NULL, OPT_FLOOR_DIV},
    {"retain", required_argument, NULL, OPT_RETAIN},
    {"settle", required_argument, NULL, OPT_SETTLE},
    {"lag", required_argument, NULL, OPT_LAG},
    {"no-alias", no_argument, NULL, OPT_NO_ALIAS},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {"warm", required_argument, NULL, OPT_WARM},
    {"warm-layout", no_argument, NULL, OPT_WARM_LAYOUT},
    {"stock", required_argument, NULL, OPT_STOCK},
    {"json", optional_argument, NULL, OPT_JSON},
    {"report", required_argument, NULL, OPT_REPORT},
    {"max-input-bytes", required_argument, NULL, OPT_MAX_INPUT_BYTES},
    {"max-records", required_argument, NULL, OPT_MAX_RECORDS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* The option being parsed, as typed ("--chunk"), for the sentences. */
static const char *opt_name(int c) {
    for (const struct option *o = longs; o->name != NULL; o++)
        if (o->val == c) return o->name;
    return "?";
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
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        char opt[32];
        snprintf(opt, sizeof opt, "--%s", opt_name(c));
        uint64_t v = 0;
        int rc = 0;
        switch (c) {
        case 'h': dmm_usage_replay(stdout); return -1;
        case OPT_DRIVER: a->o.driver = optarg; break;
        case OPT_GRANULE: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.granule); break;
        case OPT_CHUNK: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.chunk_bytes); break;
        case OPT_MAX_CHUNK: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.max_chunk_bytes); break;
        case OPT_MIN_CHUNK: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.min_chunk_bytes); break;
        case OPT_LAG: rc = dmm_cli_u64("replay", opt, optarg, &LAG, &a->o.lag); break;
        case OPT_WARM: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.warm_bytes); break;
        case OPT_STOCK: rc = dmm_cli_u64("replay", opt, optarg, &SIZE, &a->o.stock_bytes); break;
        case OPT_NO_ALIAS: a->o.no_alias = true; break;
        case OPT_WARM_LAYOUT: a->o.warm_layout = true; break;
        case OPT_HANDLE_DIV:
        case OPT_FLOOR_DIV:
        case OPT_RETAIN:
        case OPT_SETTLE:
        case OPT_REPEAT:
            rc = dmm_cli_u64("replay", opt, optarg,
                             c == OPT_HANDLE_DIV || c == OPT_FLOOR_DIV ? &DIVISOR
                             : c == OPT_REPEAT                          ? &REPEAT
                                                                        : &PERMILLE,
                             &v);
            if (c == OPT_HANDLE_DIV) a->o.handle_divisor = (uint32_t)v;
            else if (c == OPT_FLOOR_DIV) a->o.floor_divisor = (uint32_t)v;
            else if (c == OPT_RETAIN) a->o.retain_permille = (uint32_t)v;
            else if (c == OPT_SETTLE) a->o.settle_permille = (uint32_t)v;
            else a->o.repeat = (uint32_t)v;
            break;
        case OPT_JSON:
            a->json = true;
            a->json_path = optarg;
            break;
        case OPT_REPORT: a->report = optarg; break;
        case OPT_MAX_INPUT_BYTES:
            rc = dmm_cli_u64("replay", opt, optarg, &INPUT_BYTES, &a->limits.max_text_bytes);
            break;
        case OPT_MAX_RECORDS: rc = dmm_cli_u64("replay", opt, optarg, &RECORDS, &a->limits.max_records); break;
        default: return dmm_cli_bad_option("replay", c, argv);
        }
        if (rc != 0) return rc;
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
