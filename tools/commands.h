/* SPDX-License-Identifier: Apache-2.0 */
/* tools/commands.h — the subcommands of the dmm tool, one per cmd_*.c, and what they share
 * (cmd_help.c): the dispatcher, the sentences for bad options, and the one numeric-option parser
 * (options.h) with its message printed.
 *
 * Every command parses its options with getopt_long (--opt VALUE and --opt=VALUE; unambiguous
 * prefixes too), answers -h/--help on stdout with exit 0, and returns the process exit code: 0 done,
 * 1 the work failed, 2 bad usage or input (one sentence on stderr, naming what was wrong and how to
 * fix it). Output files are opened before the work starts (output_file.h); every input is read
 * within a bound that a flag raises (--max-input-bytes, --max-records: input_limits.h).
 */
#ifndef DMM_TOOLS_COMMANDS_H
#define DMM_TOOLS_COMMANDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "options.h"
#include "output_file.h"

typedef struct dmm_command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
    void (*usage)(FILE *f);            /* its --help */
    const char *summary;               /* one line, for `dmm help` */
} dmm_command;

/* The whole tool: `dmm COMMAND [ARGS]`, `dmm help [COMMAND]`, `dmm --help`, `dmm --version`. */
int dmm_cli(int argc, char **argv);

int dmm_cmd_version(int argc, char **argv);
int dmm_cmd_help(int argc, char **argv);
int dmm_cmd_info(int argc, char **argv);
int dmm_cmd_replay(int argc, char **argv);
int dmm_cmd_compare(int argc, char **argv);
int dmm_cmd_ort(int argc, char **argv);
int dmm_cmd_hold(int argc, char **argv);
int dmm_cmd_options(int argc, char **argv);
void dmm_usage_version(FILE *f);
void dmm_usage_help(FILE *f);
void dmm_usage_info(FILE *f);
void dmm_usage_replay(FILE *f);
void dmm_usage_compare(FILE *f);
void dmm_usage_ort(FILE *f);
void dmm_usage_hold(FILE *f);
void dmm_usage_options(FILE *f);

/* Resets getopt for a fresh scan of a command's argv (a test runs several commands in one process). */
void dmm_cli_getopt_reset(void);
/* For a command that takes no arguments but -h/--help: the exit code when it is done (help printed: 0;
 * an argument: 2, said), or -1 to go on. */
int dmm_cli_no_arguments(const char *cmd, int argc, char **argv, void (*usage_of)(FILE *));
/* The sentence for getopt_long's '?' (unknown or ambiguous option) or ':' (missing value) at argv;
 * returns 2. */
int dmm_cli_bad_option(const char *cmd, int c, char *const *argv);
/* dmm_opt_flag_u64 / dmm_opt_flag_real for the flag of option-table row `id` (its name and range from the
 * row), with the refusal printed as "dmm CMD: ..."; 0, or 2 (the exit code). */
int dmm_cli_flag_u64(const char *cmd, dmm_option_id id, const char *text, uint64_t *out);
int dmm_cli_flag_real(const char *cmd, dmm_option_id id, const char *text, double *out);
/* The flags of `command` ("dmm replay") from the option table, one per row in the table's order, as a
 * --help lists them: "  --flag VALUE  description (default: X)", wrapped at 100 columns (cmd_options.c). */
void dmm_cli_print_flags(FILE *f, const char *command);
/* getopt_long's table for `command` built from the option table: one entry per flag row of the command
 * (val DMM_CLI_FLAG(id); a SWITCH takes no value, a value written "[=...]" an optional one), then
 * "help" ('h') and the terminator; cap ≥ the command's rows + 2. Returns the entries before the
 * terminator. */
#define DMM_CLI_FLAG(id) (256 + (int)(id))
struct option;
size_t dmm_cli_longs(const char *command, struct option *longs, size_t cap);

#endif
