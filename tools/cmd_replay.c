/* tools/cmd_replay.c — `dmm replay TRACE.gz [--driver host|cuda] [--granule BYTES] [--lag N]
 * [--no-alias] [--repeat K] [--json] [--report FILE.html]`: replays an allocation trace through the pool and reports peak live,
 * physical and committed bytes and their ratio beside PyTorch's, driver calls by kind and per
 * 1,000 allocations, and malloc/free latency percentiles.
 *
 * On the host driver the replay maps real memfd memory but never touches it, so RSS stays small;
 * it does hold one file descriptor per physical chunk, so the command raises its soft open-file
 * limit to the hard one first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "commands.h"
#include "report.h"
#include "replay.h"
#include "trace.h"

static void replay_usage(FILE *f) {
    fprintf(f, "usage: dmm replay TRACE.gz [--driver host|cuda] [--granule BYTES] [--chunk BYTES]\n"
               "                  [--max-chunk BYTES] [--handle-div N] [--retain PERMILLE] [--settle PERMILLE]\n"
               "                  [--lag N] [--no-alias] [--repeat K] [--json] [--report FILE.html]\n\n"
               "Replays an allocation trace (# dmm-trace v1, gzip) through the dmm pool over an arena and\n"
               "prints peak live, physical and committed bytes, their ratio beside PyTorch's, driver calls\n"
               "by kind and per 1,000 allocations, and malloc/free latency percentiles.\n"
               "  --driver     host (default: mmap + memfd, real memory never touched) or cuda\n"
               "  --granule    host driver granularity (default 2 MiB); sizes take K/M/G suffixes\n"
               "  --chunk      pool commit quantum (default: the granule)\n"
               "  --max-chunk  largest chunk a growth commits as one handle (default: the quantum;\n"
               "               larger: fewer driver calls, more fragmentation)\n"
               "  --handle-div with --max-chunk: a growth for n bytes commits handles of at most n / N\n"
               "               (only large requests get large handles; default 0: up to --max-chunk)\n"
               "  --retain     memory kept mapped while free, in permille of the live peak (default 20)\n"
               "  --settle     the most the retention limit rises while the pool keeps re-mapping memory,\n"
               "               in permille of the live peak (default 100; at or below --retain: fixed)\n"
               "  --lag        host driver: every event completes only N allocations after it was recorded,\n"
               "               as on a GPU where the CPU runs ahead of the work (default 0: at once)\n"
               "  --no-alias   the pool never aliases fenced chunks of the requesting stream (it waits or\n"
               "               grows instead): the behaviour before aliases, for comparison\n"
               "  --repeat     the trace as one iteration, replayed K times over the same pool (each\n"
               "               repetition's leftovers freed before the next); also prints the driver\n"
               "               calls, aliases and moves of the last repetition alone: the steady state\n"
               "  --json       one JSON object instead of text\n"
               "  --report     also write a self-contained HTML page with the timeline\n");
}

static int parse_bytes(const char *s, uint64_t *out) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1ull << 10;
    else if (*end == 'm' || *end == 'M') mul = 1ull << 20;
    else if (*end == 'g' || *end == 'G') mul = 1ull << 30;
    else if (*end != '\0') return -1;
    if (mul > 1) {
        end++;
        if (strcmp(end, "") != 0 && strcmp(end, "i") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
            return -1;
    }
    if (v * (double)mul >= 18446744073709551616.0) return -1; /* 2^64: the cast would be undefined */
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

int dmm_cmd_replay(int argc, char **argv) {
    const char *path = NULL, *report = NULL;
    dmm_replay_opts o;
    memset(&o, 0, sizeof o);
    o.driver = "host";
    o.time_ops = true;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        static const char *const with_value[] = {"--driver", "--granule", "--chunk", "--max-chunk",
                                                 "--retain",  "--settle", "--handle-div", "--lag",     "--report", "--repeat"};
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0] && i + 1 == argc; k++)
            if (strcmp(a, with_value[k]) == 0) {
                fprintf(stderr, "dmm replay: %s needs a value after it (dmm replay --help lists them)\n", a);
                return 2;
            }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            replay_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--driver") == 0 && i + 1 < argc) {
            o.driver = argv[++i];
        } else if ((strcmp(a, "--granule") == 0 || strcmp(a, "--chunk") == 0 || strcmp(a, "--max-chunk") == 0) &&
                   i + 1 < argc) {
            uint64_t v = 0;
            if (parse_bytes(argv[++i], &v) != 0 || v == 0) {
                fprintf(stderr, "dmm replay: %s wants a size in bytes (e.g. 2097152 or 2M), not '%s'\n", a, argv[i]);
                return 2;
            }
            if (strcmp(a, "--granule") == 0) o.granule = v;
            else if (strcmp(a, "--chunk") == 0) o.chunk_bytes = v;
            else o.max_chunk_bytes = v;
        } else if (strcmp(a, "--lag") == 0 && i + 1 < argc) {
            char *end = NULL;
            o.lag = strtoull(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || argv[i][0] == '-') {
                fprintf(stderr, "dmm replay: --lag wants a number of allocations, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--repeat") == 0 && i + 1 < argc) {
            char *end = NULL;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || argv[i][0] == '-' || v < 1 || v > 1000) {
                fprintf(stderr, "dmm replay: --repeat wants a number of repetitions from 1 to 1000, not '%s'\n", argv[i]);
                return 2;
            }
            o.repeat = (uint32_t)v;
        } else if (strcmp(a, "--no-alias") == 0) {
            o.no_alias = true;
        } else if ((strcmp(a, "--retain") == 0 || strcmp(a, "--settle") == 0 || strcmp(a, "--handle-div") == 0) &&
                   i + 1 < argc) {
            char *end = NULL;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || argv[i][0] == '-' || v > UINT32_MAX) {
                fprintf(stderr, "dmm replay: %s wants a whole number%s, not '%s'\n", a,
                        strcmp(a, "--handle-div") == 0 ? " (e.g. 4)" : " of per mille (e.g. 20 = 2 %)", argv[i]);
                return 2;
            }
            if (strcmp(a, "--retain") == 0) o.retain_permille = (uint32_t)v;
            else if (strcmp(a, "--settle") == 0) o.settle_permille = (uint32_t)v;
            else o.handle_divisor = (uint32_t)v;
        } else if (strcmp(a, "--report") == 0 && i + 1 < argc) {
            report = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "dmm replay: unknown option '%s'\n", a);
            replay_usage(stderr);
            return 2;
        } else if (path == NULL) {
            path = a;
        } else {
            fprintf(stderr, "dmm replay: one trace at a time ('%s' and '%s')\n", path, a);
            return 2;
        }
    }
    if (path == NULL) {
        replay_usage(stderr);
        return 2;
    }
    if (strcmp(o.driver, "host") != 0 && strcmp(o.driver, "cuda") != 0) {
        fprintf(stderr, "dmm replay: --driver must be host or cuda, not '%s'\n", o.driver);
        return 2;
    }
    if (o.lag != 0 && strcmp(o.driver, "cuda") == 0) {
        fprintf(stderr, "dmm replay: --lag imitates a GPU's pending events on the host driver; CUDA has real ones\n");
        return 2;
    }
    if (o.granule != 0 && strcmp(o.driver, "cuda") == 0) {
        fprintf(stderr, "dmm replay: --granule applies to the host driver; CUDA's granularity is the device's\n");
        return 2;
    }
    if (strcmp(o.driver, "host") == 0) {
        /* one memfd per physical chunk: lift the soft open-file limit to the hard one */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    char err[1024];
    dmm_trace t;
    if (dmm_trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "dmm replay: %s\n", err);
        return 1;
    }
    if (strcmp(o.driver, "host") == 0) {
        /* one memfd per chunk: say so up front when the open-file limit cannot hold the trace's peak */
        struct rlimit rl;
        uint64_t chunk = o.chunk_bytes ? o.chunk_bytes : o.granule ? o.granule : (2u << 20);
        uint64_t need = t.peak_live_bytes / chunk * 11 / 10 + 128;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
            fprintf(stderr,
                    "dmm replay: warning: the host driver holds one file descriptor per %llu-byte chunk; this trace "
                    "needs about %llu but the limit is %llu (raise it with ulimit -n, or pass a larger --granule)\n",
                    (unsigned long long)chunk, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
    }
    dmm_replay_result r;
    if (dmm_replay_run(&t, &o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "dmm replay: %s\n", err);
        dmm_trace_free(&t);
        return 1;
    }
    if (json) dmm_report_json(stdout, path, &t, &r);
    else dmm_report_text(stdout, path, &t, &r);
    int rc = 0;
    if (report != NULL) {
        if (dmm_report_html(report, path, &t, &r, err, sizeof err) != 0) {
            fprintf(stderr, "dmm replay: %s\n", err);
            rc = 1;
        } else if (!json) {
            printf("  report          %s\n", report);
        }
    }
    dmm_replay_result_free(&r);
    dmm_trace_free(&t);
    return rc;
}
