/* SPDX-License-Identifier: Apache-2.0 */
/* tools/main.c — the dmm command-line tool's entry: everything else is dmm_cli (cmd_help.c), so that a
 * test can drive the whole tool in its own process. */
#include "commands.h"

int main(int argc, char **argv) { return dmm_cli(argc, argv); }
