/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_help.c — the tool's top level: dispatch to one subcommand per cmd_*.c, `dmm help
 * [COMMAND]`, `dmm --help`, `dmm version` / `dmm --version`, and what every command shares
 * (commands.h): getopt's reset, the sentences for bad options (with the nearest known spelling of a
 * mistyped one), numeric options with their refusal printed.
 *
 * Exit codes: 0 done, 1 the work failed, 2 bad usage (an unknown command or option, a bad value).
 * Help asked for goes to stdout with 0; help after a usage error goes to stderr with 2.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dmm/dmm.h"

static const dmm_command commands[] = {
    {"info", dmm_cmd_info, dmm_usage_info, "list the host driver and the CUDA devices (driver, VMM, granularity, memory)"},
    {"ort", dmm_cmd_ort, dmm_usage_ort,
     "run an ONNX model with ONNX Runtime on dmm's allocator: dmm's and ONNX Runtime's stats side by side"},
    {"replay", dmm_cmd_replay, dmm_usage_replay,
     "replay an allocation trace through the pool: fragmentation, driver calls, latency"},
    {"compare", dmm_cmd_compare, dmm_usage_compare,
     "compare two bench results (bench_* --json): WORSE / same / better per metric"},
    {"hold", dmm_cmd_hold, dmm_usage_hold,
     "keep named regions of memory alive for other processes to attach (docs/ipc.md)"},
    {"options", dmm_cmd_options, dmm_usage_options,
     "every option of dmm: the environment variables and these commands' flags (--markdown: docs/options.md)"},
    {"version", dmm_cmd_version, dmm_usage_version, "print the library version (also: dmm --version)"},
    {"help", dmm_cmd_help, dmm_usage_help, "this list, or a command's help: dmm help COMMAND"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* The edit distance (insertions, deletions, substitutions, and swaps of neighbours) of a and b, both
 * cut to 63 characters. */
static size_t distance(const char *a, const char *b) {
    size_t n = strnlen(a, 63), m = strnlen(b, 63), d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* Keeps `candidate` in *best when it is nearer to `typed` than *best, and near enough to be what was
 * meant: at most a third of its length away (at least 1, at most 3 edits). */
static void nearer(const char *typed, const char *candidate, const char **best, size_t *best_d) {
    size_t d = distance(typed, candidate), len = strlen(candidate), most = len / 3;
    if (most < 1) most = 1;
    if (most > 3) most = 3;
    if (d <= most && d < *best_d) {
        *best = candidate;
        *best_d = d;
    }
}

/* " (did you mean 'X'?)" for the known spelling nearest to `typed`, or "" when none is near. */
static const char *did_you_mean(char *buf, size_t cap, const char *best) {
    if (best == NULL) return "";
    snprintf(buf, cap, "; did you mean '%s'?", best);
    return buf;
}

static const dmm_command *find_command(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return &commands[i];
    return NULL;
}

/* The command nearest to a mistyped one, or NULL. */
static const char *nearest_command(const char *typed) {
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < NCOMMANDS; i++) nearer(typed, commands[i].name, &best, &best_d);
    return best;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dmm COMMAND [ARGS]      (dmm COMMAND --help: its options)\n"
               "       dmm --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    /* the bounds' defaults from the option table */
    const dmm_option *rb = dmm__option(DMM_OPTION_REPLAY_MAX_INPUT_BYTES), *ob = dmm__option(DMM_OPTION_ORT_MAX_INPUT_BYTES),
                     *cb = dmm__option(DMM_OPTION_COMPARE_MAX_INPUT_BYTES), *rr = dmm__option(DMM_OPTION_REPLAY_MAX_RECORDS);
    fprintf(f, "\nEvery input has a bound that a flag raises: %s %s (replay: text after decompression,\n"
               "default %s; ort: the model, %s; compare: a result, %s) and %s %s\n"
               "(replay, default %s); an endless or larger input ends with an error. Output files: a regular\n"
               "file is written beside and renamed into place when the work succeeded, a device, FIFO or terminal\n"
               "in place; nothing else is created, cut or removed. Sizes take K, M, G or T (64G, 512MiB);\n"
               "dmm options lists every option and environment variable.\n",
            rb->flag, rb->value, rb->fallback, ob->fallback, cb->fallback, rr->flag, rr->value, rr->fallback);
}

void dmm_cli_getopt_reset(void) {
    optind = 0; /* GNU getopt: 0 starts a fresh scan (its internal state included) */
    opterr = 0; /* the sentences are ours (dmm_cli_bad_option) */
}

int dmm_cli_bad_option(const char *cmd, int c, char *const *argv) {
    const char *arg = argv[optind - 1];
    if (c == ':')
        fprintf(stderr, "dmm %s: %s needs a value (%s=VALUE or %s VALUE; dmm %s --help lists the options)\n", cmd, arg,
                arg, arg, cmd);
    else if (optopt != 0 && strncmp(arg, "--", 2) != 0)
        fprintf(stderr, "dmm %s: unknown option '-%c' (dmm %s --help lists the options)\n", cmd, optopt, cmd);
    else {
        char typed[64], hint[96], reader[32];
        snprintf(typed, sizeof typed, "%.*s", (int)strcspn(arg, "="), arg); /* --opt=VALUE: the --opt */
        snprintf(reader, sizeof reader, "dmm %s", cmd);
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
            const dmm_option *o = dmm__option((dmm_option_id)i);
            if (o->flag != NULL && strcmp(o->reader, reader) == 0) nearer(typed, o->flag, &best, &best_d);
        }
        nearer(typed, "--help", &best, &best_d);
        fprintf(stderr, "dmm %s: unknown or ambiguous option '%s'%s (dmm %s --help lists the options)\n", cmd, arg,
                did_you_mean(hint, sizeof hint, best), cmd);
    }
    return 2;
}

int dmm_cli_flag_u64(const char *cmd, dmm_option_id id, const char *text, uint64_t *out) {
    char err[512];
    if (dmm_opt_flag_u64(id, text, out, err, sizeof err) == 0) return 0;
    fprintf(stderr, "dmm %s: %s\n", cmd, err);
    return 2;
}

int dmm_cli_flag_real(const char *cmd, dmm_option_id id, const char *text, double *out) {
    char err[512];
    if (dmm_opt_flag_real(id, text, out, err, sizeof err) == 0) return 0;
    fprintf(stderr, "dmm %s: %s\n", cmd, err);
    return 2;
}

int dmm_cli_no_arguments(const char *cmd, int argc, char **argv, void (*usage_of)(FILE *)) {
    static const struct option longs[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        if (c != 'h') return dmm_cli_bad_option(cmd, c, argv);
        usage_of(stdout);
        return 0;
    }
    if (optind < argc) {
        fprintf(stderr, "dmm %s: takes no arguments (got '%s')\n", cmd, argv[optind]);
        return 2;
    }
    return -1; /* go on */
}

void dmm_usage_version(FILE *f) { fprintf(f, "usage: dmm version   (or dmm --version)\n\nPrints the library version.\n"); }

int dmm_cmd_version(int argc, char **argv) {
    int rc = dmm_cli_no_arguments("version", argc, argv, dmm_usage_version);
    if (rc >= 0) return rc;
    printf("dmm %s\n", dmm_version_string());
    return 0;
}

void dmm_usage_help(FILE *f) {
    fprintf(f, "usage: dmm help [COMMAND]\n\nLists the commands, or prints COMMAND's options (as dmm COMMAND --help).\n");
}

int dmm_cmd_help(int argc, char **argv) {
    if (argc > 2) {
        fprintf(stderr, "dmm help: one command at a time (got '%s' and '%s')\n", argv[1], argv[2]);
        return 2;
    }
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        dmm_usage_help(stdout);
        return 0;
    }
    const dmm_command *k = find_command(argv[1]);
    if (k == NULL) {
        char hint[96];
        fprintf(stderr, "dmm help: unknown command '%s'%s\n", argv[1], did_you_mean(hint, sizeof hint, nearest_command(argv[1])));
        usage(stderr);
        return 2;
    }
    k->usage(stdout);
    return 0;
}

int dmm_cli(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) return dmm_cmd_version(1, argv + 1);
    const dmm_command *k = find_command(a);
    if (k != NULL) return k->run(argc - 1, argv + 1);
    char hint[96];
    if (a[0] == '-') fprintf(stderr, "dmm: unknown option '%s' before the command\n", a);
    else fprintf(stderr, "dmm: unknown command '%s'%s\n", a, did_you_mean(hint, sizeof hint, nearest_command(a)));
    usage(stderr);
    return 2;
}
