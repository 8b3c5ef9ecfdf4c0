/* SPDX-License-Identifier: Apache-2.0 */
/* tools/report.h — a replay's result as text, as one JSON object, and as a self-contained HTML page
 * with an SVG timeline (live, committed and physical bytes, and PyTorch's peak as a line). */
#ifndef DMM_TOOLS_REPORT_H
#define DMM_TOOLS_REPORT_H

#include <stdio.h>

#include "replay.h"
#include "trace.h"

void dmm_report_text(FILE *f, const char *trace_path, const dmm_trace *t, const dmm_replay_result *r);
void dmm_report_json(FILE *f, const char *trace_path, const dmm_trace *t, const dmm_replay_result *r);
/* Writes the page to f (the caller opened it before the work, and checks the writes when it closes it). */
void dmm_report_html(FILE *f, const char *trace_path, const dmm_trace *t, const dmm_replay_result *r);

/* An axis from 0 past `max` (> 0) in round ticks: the step, 1, 2 or 5 times a power of ten, that gives
 * 3 to 8 ticks above 0; *top = the first multiple of the step at or above max. */
double dmm_report_tick_step(double max, double *top);
/* The one unit of a bytes axis whose top is `max` bytes: KiB, MiB, GiB or TiB (*name), as bytes. */
uint64_t dmm_report_bytes_unit(uint64_t max, const char **name);

#endif /* DMM_TOOLS_REPORT_H */
