/* tools/main.c — the dmm command-line tool: dispatches to one subcommand per file (cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dmm/dmm.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"version", dmm_cmd_version, "print the library version"},
    {"info", dmm_cmd_info, "list the host driver and the CUDA devices (driver, VMM, granularity, memory)"},
    {"replay", dmm_cmd_replay, "replay an allocation trace through the pool: fragmentation, driver calls, latency"},
    {"compare", dmm_cmd_compare, "compare two bench results (bench_* --json): WORSE / same / better per metric"},
};

int dmm_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("dmm %s\n", dmm_version_string());
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dmm COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "dmm: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
