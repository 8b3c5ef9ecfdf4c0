/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_options.c — `dmm options [--markdown]`, and the lists of flags every command's --help prints:
 * the two ways the tool serves dmm's one option table (src/core/options.h).
 *
 * What it owns: the layout of the table as text (a --help's flag lines, wrapped at 100 columns; the whole
 * table for `dmm options`) and as Markdown (docs/options.md, which the test docs/options compares with
 * what this prints, so the page cannot drift from the table).
 * The idea: the descriptions, defaults and value names live in the table only; a command's usage keeps
 * its synopsis and its paragraph about what it does, and lists its flags by calling
 * dmm_cli_print_flags with its name.
 * Trade-off: the Markdown is plain tables, one per reader group, so a change to the table changes the
 * page by whole rows, and a reviewer sees the row that moved.
 * Invariants: every row is printed exactly once by `dmm options` (environment rows first, then the
 * flags grouped by command, in the table's order); output depends on the table only.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"

#define WIDTH 100 /* columns of the text layout */
#define LABEL 24  /* columns before a description in a --help */

static const char *kind_word(dmm_option_kind k) {
    switch (k) {
    case DMM_OPTION_BYTES: return "size";
    case DMM_OPTION_COUNT: return "whole number";
    case DMM_OPTION_PERMILLE: return "per mille";
    case DMM_OPTION_REAL: return "number";
    case DMM_OPTION_TEXT: return "text";
    case DMM_OPTION_FIELDS: return "list";
    case DMM_OPTION_SWITCH: return "switch";
    }
    return "?";
}

/* `text` from column `at` on, wrapped at WIDTH with continuation lines indented to `indent`. */
static void wrapped(FILE *f, int at, int indent, const char *text) {
    int col = at;
    const char *p = text;
    while (*p != '\0') {
        size_t word = strcspn(p, " ");
        if (col > indent && col + 1 + (int)word > WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)word, p);
        col += (int)word;
        p += word;
        while (*p == ' ') p++;
    }
    fputc('\n', f);
}

/* One row as text: its label ("--granule BYTES" or "DMM_TORCH_RETAIN=PERMILLE"), then the description and
 * the default. */
static void print_row(FILE *f, const dmm_option *o) {
    char label[96], text[1024];
    if (o->flag != NULL)
        snprintf(label, sizeof label, "%s%s%s", o->flag,
                 o->value == NULL ? "" : o->value[0] == '[' ? "" : " ", o->value != NULL ? o->value : "");
    else snprintf(label, sizeof label, "%s=%s", o->env, o->value);
    snprintf(text, sizeof text, "%s%s%s%s", o->description, o->fallback != NULL ? " (default: " : "",
             o->fallback != NULL ? o->fallback : "", o->fallback != NULL ? ")" : "");
    int n = fprintf(f, "  %s", label);
    if (n + 1 > LABEL) {
        fprintf(f, "\n%*s", LABEL, "");
        n = LABEL;
    } else {
        fprintf(f, "%*s", LABEL - n, "");
        n = LABEL;
    }
    wrapped(f, n, LABEL, text);
}

void dmm_cli_print_flags(FILE *f, const char *command) {
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->flag != NULL && strcmp(o->reader, command) == 0) print_row(f, o);
    }
}

size_t dmm_cli_longs(const char *command, struct option *longs, size_t cap) {
    size_t n = 0;
    for (unsigned i = 0; i < DMM_OPTION_COUNT_ && n + 2 < cap; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->flag == NULL || strcmp(o->reader, command) != 0) continue;
        int has_arg = o->kind == DMM_OPTION_SWITCH                 ? no_argument
                      : o->value != NULL && o->value[0] == '['     ? optional_argument
                                                                   : required_argument;
        longs[n++] = (struct option){o->flag + 2, has_arg, NULL, DMM_CLI_FLAG(i)};
    }
    longs[n++] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n] = (struct option){NULL, 0, NULL, 0};
    return n;
}

void dmm_usage_options(FILE *f) {
    fprintf(f, "usage: dmm options [--markdown]\n\n"
               "Lists every option of dmm from its one table (src/core/options.c): the environment variables\n"
               "the libraries read, then each command's flags.\n");
    dmm_cli_print_flags(f, "dmm options");
}

/* A Markdown table cell: '|' escaped, everything else as it is. */
static void cell(FILE *f, const char *s) {
    fputs("| ", f);
    for (; s != NULL && *s != '\0'; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
    fputc(' ', f);
}

static void code_cell(FILE *f, const char *prefix, const char *s) {
    char buf[160];
    snprintf(buf, sizeof buf, "`%s%s`", prefix, s != NULL ? s : "");
    cell(f, buf);
}

static void value_cell(FILE *f, const dmm_option *o) {
    char buf[256];
    if (o->kind == DMM_OPTION_SWITCH) snprintf(buf, sizeof buf, "(none)");
    else snprintf(buf, sizeof buf, "`%s`: %s, e.g. `%s`", o->value, kind_word(o->kind), o->example);
    cell(f, buf);
}

static void print_markdown(FILE *f) {
    fprintf(f,
            "# Options\n\n"
            "<!-- Generated by `dmm options --markdown` from the table in src/core/options.c; do not edit here.\n"
            "     After changing the table: build, then `build/tools/dmm options --markdown > docs/options.md`.\n"
            "     The test docs/options fails while this file differs from what the table prints. -->\n\n"
            "Every option of dmm comes from one table (`src/core/options.c`): the environment variables the\n"
            "libraries and the Python package read, and the flags of the `dmm` tool (`dmm COMMAND --help` prints\n"
            "the same descriptions; `dmm options` prints this page as text). The libraries read each variable\n"
            "in one place (`dmm__option_env`), when the component that uses it starts.\n\n"
            "## Values\n\n"
            "- **size**: digits, optionally a fraction, and optionally a binary unit `K`, `M`, `G` or `T`\n"
            "  (2^10 to 2^40) in either case, optionally followed by `i`, `B` or `iB`: `64G`, `64GiB`, `64gb`,\n"
            "  `512MiB`, `512m`, `1.5G` and `536870912` are sizes. A fraction must come out whole bytes (`1.5K`\n"
            "  is 1536; `1.3` is refused), with at most 9 decimals. Units are binary: `1G` is 1073741824.\n"
            "- **whole number**, **per mille**: digits only, no unit and no fraction.\n"
            "- **number**: digits with an optional fraction, no unit.\n"
            "- **list**: comma-separated fields, each a size or a whole number as its syntax says.\n"
            "- Never a sign, spaces, hex or an exponent. An empty variable counts as unset. A malformed value\n"
            "  is an error naming the variable or flag, its value and a valid setting, never a silent default.\n\n"
            "## Environment variables\n\n"
            "| variable | read by | value | default | what it sets |\n"
            "|---|---|---|---|---|\n");
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->env == NULL) continue;
        code_cell(f, "", o->env);
        cell(f, o->reader);
        value_cell(f, o);
        cell(f, o->fallback);
        cell(f, o->description);
        fputs("|\n", f);
    }
    fprintf(f, "\n## Flags of the dmm tool\n\n"
               "Flags take `--flag VALUE` or `--flag=VALUE`.\n");
    const char *group = NULL;
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->flag == NULL) continue;
        if (group == NULL || strcmp(group, o->reader) != 0) {
            group = o->reader;
            fprintf(f, "\n### %s\n\n| flag | value | default | what it sets |\n|---|---|---|---|\n", group);
        }
        code_cell(f, "", o->flag);
        value_cell(f, o);
        cell(f, o->fallback);
        cell(f, o->description);
        fputs("|\n", f);
    }
}

static void print_text(FILE *f) {
    fprintf(f, "Environment variables (empty = unset; sizes take K, M, G or T, e.g. 64G or 512MiB):\n");
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->env != NULL) print_row(f, o);
    }
    const char *group = NULL;
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++) {
        const dmm_option *o = dmm__option((dmm_option_id)i);
        if (o->flag == NULL || (group != NULL && strcmp(group, o->reader) == 0)) continue;
        group = o->reader;
        fprintf(f, "\n%s:\n", group);
        dmm_cli_print_flags(f, group);
    }
}

int dmm_cmd_options(int argc, char **argv) {
    struct option longs[4];
    dmm_cli_longs("dmm options", longs, 4);
    bool markdown = false;
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        if (c == 'h') {
            dmm_usage_options(stdout);
            return 0;
        }
        if (c != DMM_CLI_FLAG(DMM_OPTION_OPTIONS_MARKDOWN)) return dmm_cli_bad_option("options", c, argv);
        markdown = true;
    }
    if (optind < argc) {
        fprintf(stderr, "dmm options: takes no arguments besides --markdown (got '%s')\n", argv[optind]);
        return 2;
    }
    if (markdown) print_markdown(stdout);
    else print_text(stdout);
    return 0;
}
