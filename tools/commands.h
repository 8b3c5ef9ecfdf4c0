/* tools/commands.h — the subcommands of the dmm tool. Each returns the process exit code. */
#ifndef DMM_TOOLS_COMMANDS_H
#define DMM_TOOLS_COMMANDS_H

int dmm_cmd_version(int argc, char **argv);
int dmm_cmd_info(int argc, char **argv);
int dmm_cmd_replay(int argc, char **argv);
int dmm_cmd_compare(int argc, char **argv);

#endif
