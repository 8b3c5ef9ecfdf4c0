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

#endif /* DMM_TOOLS_REPORT_H */
