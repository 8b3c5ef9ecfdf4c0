/* SPDX-License-Identifier: Apache-2.0 */
/* tools/report.c — writers for a replay's result: text (for people), JSON (one object, for scripts
 * and the benchmarks' comparator, written through the project's one JSON writer, src/core/json.h)
 * and HTML (a self-contained page: inline SVG and CSS, no script, no external resource, so it opens
 * from a file in any browser).
 *
 * The ratio everybody quotes is peak physical ÷ peak live, where physical is the arena's owned
 * bytes (mapped chunks + cached handles): the memory really held. The pool's committed bytes (its
 * mapped chunks) are shown beside it.
 */
#include "report.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/json.h"

static const char *fmtb(uint64_t b, char *buf, size_t cap) { return dmm__fmt_bytes(b, buf, cap); }

static void html_str(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

void dmm_report_text(FILE *f, const char *path, const dmm_trace *t, const dmm_replay_result *r) {
    char a[32], b[32], c[32];
    fprintf(f, "dmm replay: %s (%s) on the %s driver, granule %s, chunk %s", t->workload[0] ? t->workload : "?",
            path, r->driver, fmtb(r->granule, a, sizeof a), fmtb(r->chunk, b, sizeof b));
    if (r->lag > 0) fprintf(f, ", events complete %llu allocations late", (unsigned long long)r->lag);
    if (r->no_alias) fprintf(f, ", no aliases");
    fprintf(f, "\n");
    fprintf(f, "  events          %llu (%llu allocations, %llu frees, %u stream%s, %.1f s of trace)\n",
            (unsigned long long)r->events, (unsigned long long)r->allocs, (unsigned long long)r->frees, t->nstreams,
            t->nstreams == 1 ? "" : "s", (double)t->duration_us * 1e-6);
    fprintf(f, "  peak live       %s (%llu bytes)\n", fmtb(r->peak_live_bytes, a, sizeof a),
            (unsigned long long)r->peak_live_bytes);
    fprintf(f, "  peak physical   %s  ratio %.4f  (physical handles held: mapped + cached)\n",
            fmtb(r->peak_physical_bytes, a, sizeof a), r->ratio);
    fprintf(f, "  peak committed  %s  ratio %.4f  (the pool's mapped chunks; arena mapped peak %s)\n",
            fmtb(r->peak_committed_bytes, a, sizeof a), r->ratio_committed, fmtb(r->peak_mapped_bytes, b, sizeof b));
    if (r->plan_extent_bytes > 0)
        fprintf(f, "  offline plan    %s  ratio %.4f  (the best fixed layout found for the whole trace, placed ahead in "
                   "whole chunks: about the least memory that serves it with no driver call)\n",
                fmtb(r->plan_extent_bytes, a, sizeof a), r->plan_ratio);
    if (r->native_ratio > 0)
        fprintf(f, "  PyTorch         %s reserved for %s allocated: ratio %.4f\n",
                fmtb(t->native_peak_reserved, a, sizeof a), fmtb(t->native_peak_allocated, b, sizeof b),
                r->native_ratio);
    else
        fprintf(f, "  PyTorch         (the trace header has no native peaks)\n");
    if (r->repeat > 1)
        fprintf(f, "  steady state    the last of %u repetitions alone: create %llu, map %llu, set_access %llu, unmap "
                   "%llu, release %llu; %llu grows, %llu chunks aliased, %llu moved\n",
                r->repeat, (unsigned long long)r->steady_create, (unsigned long long)r->steady_map,
                (unsigned long long)r->steady_set_access, (unsigned long long)r->steady_unmap,
                (unsigned long long)r->steady_release, (unsigned long long)r->steady_grows,
                (unsigned long long)r->steady_aliased, (unsigned long long)r->steady_moved);
    double k = (double)r->allocs;
    fprintf(f, "  driver calls    create %llu, map %llu, set_access %llu, unmap %llu, release %llu (handle cache "
               "hits %llu)\n",
            (unsigned long long)r->calls_create, (unsigned long long)r->calls_map,
            (unsigned long long)r->calls_set_access, (unsigned long long)r->calls_unmap,
            (unsigned long long)r->calls_release, (unsigned long long)r->cache_hits);
    fprintf(f, "  per 1,000 allocs create %.2f, map %.2f, set_access %.2f, unmap %.2f, release %.2f\n",
            dmm_replay_per_1k(r->calls_create, r->allocs), dmm_replay_per_1k(r->calls_map, r->allocs),
            dmm_replay_per_1k(r->calls_set_access, r->allocs), dmm_replay_per_1k(r->calls_unmap, r->allocs),
            dmm_replay_per_1k(r->calls_release, r->allocs));
    fprintf(f, "  pool            %llu cached mallocs of %llu (%.2f%%), %llu grows (and %llu of the stock), %llu chunks "
               "committed, %llu moved, %llu aliased, %llu decommitted\n",
            (unsigned long long)r->pool.cached_mallocs, (unsigned long long)r->pool.mallocs,
            r->pool.mallocs ? 100.0 * (double)r->pool.cached_mallocs / (double)r->pool.mallocs : 0.0,
            (unsigned long long)r->pool.grows, (unsigned long long)r->pool.stock_grows,
            (unsigned long long)r->pool.chunks_committed,
            (unsigned long long)r->pool.chunks_moved, (unsigned long long)r->pool.chunks_aliased,
            (unsigned long long)r->pool.chunks_decommitted);
    if (r->pool.plans > 0)
        fprintf(f, "  plan of a loop  %llu made; %llu mallocs placed by plan, %llu went elsewhere\n",
                (unsigned long long)r->pool.plans, (unsigned long long)r->pool.planned_mallocs,
                (unsigned long long)r->pool.plan_misses);
    if (r->warm_spans > 0)
        fprintf(f, "  warm layout     %zu spans of the first pass, %.1f GiB committed ahead: growths took %llu, %llu "
                   "given back unused\n",
                r->warm_spans, (double)r->warm_ahead_bytes / (double)(1ull << 30),
                (unsigned long long)r->pool.layout_adopted, (unsigned long long)r->pool.layout_released);
    if (r->malloc_p50 > 0 || r->free_p50 > 0) {
        fprintf(f, "  malloc latency  p50 %.0f ns, p90 %.0f ns, p99 %.0f ns, max %.1f us\n", r->malloc_p50,
                r->malloc_p90, r->malloc_p99, r->malloc_max * 1e-3);
        fprintf(f, "  free latency    p50 %.0f ns, p90 %.0f ns, p99 %.0f ns, max %.1f us\n", r->free_p50, r->free_p90,
                r->free_p99, r->free_max * 1e-3);
    }
    fprintf(f, "  replay time     %.3f s (%.0f ns per event, timing included); these driver calls would take "
               "%.3f s on the H200 (its median per call: " DMM_REPLAY_H200_COSTS ")\n",
            r->wall_s, k > 0 ? r->wall_s * 1e9 / (double)r->events : 0.0, r->est_h200_driver_s);
    (void)c;
}

/* The result as one JSON object, through the project's one JSON writer (src/core/json.h). */
static void report_json_build(dmm_json *o, const char *path, const dmm_trace *t, const dmm_replay_result *r) {
    dmm__json_put(o, "{\"trace\":");
    dmm__json_string(o, path);
    dmm__json_put(o, ",\"workload\":");
    dmm__json_string(o, t->workload);
    dmm__json_put(o, ",\"driver\":");
    dmm__json_string(o, r->driver);
    dmm__json_put(o, ",\"lag\":%llu,\"no_alias\":%s", (unsigned long long)r->lag, r->no_alias ? "true" : "false");
    dmm__json_put(o,
                  ",\"repeat\":%u,\"steady\":{\"create\":%llu,\"map\":%llu,\"set_access\":%llu,\"unmap\":%llu"
                  ",\"release\":%llu,\"grows\":%llu,\"chunks_aliased\":%llu,\"chunks_moved\":%llu}",
                  r->repeat, (unsigned long long)r->steady_create, (unsigned long long)r->steady_map,
                  (unsigned long long)r->steady_set_access, (unsigned long long)r->steady_unmap,
                  (unsigned long long)r->steady_release, (unsigned long long)r->steady_grows,
                  (unsigned long long)r->steady_aliased, (unsigned long long)r->steady_moved);
    dmm__json_put(o,
            ",\"granule\":%llu,\"chunk\":%llu,\"events\":%llu,\"allocations\":%llu,\"frees\":%llu,\"streams\":%u"
            ",\"peak_live_bytes\":%llu,\"peak_physical_bytes\":%llu,\"peak_committed_bytes\":%llu"
            ",\"peak_mapped_bytes\":%llu,\"ratio\":%.6f,\"ratio_committed\":%.6f,\"native_ratio\":%.6f"
            ",\"native_peak_allocated\":%llu,\"native_peak_reserved\":%llu",
            (unsigned long long)r->granule, (unsigned long long)r->chunk, (unsigned long long)r->events,
            (unsigned long long)r->allocs, (unsigned long long)r->frees, t->nstreams,
            (unsigned long long)r->peak_live_bytes, (unsigned long long)r->peak_physical_bytes,
            (unsigned long long)r->peak_committed_bytes, (unsigned long long)r->peak_mapped_bytes, r->ratio,
            r->ratio_committed, r->native_ratio, (unsigned long long)t->native_peak_allocated,
            (unsigned long long)t->native_peak_reserved);
    if (r->plan_extent_bytes > 0)
        dmm__json_put(o, ",\"plan_extent_bytes\":%llu,\"plan_ratio\":%.6f", (unsigned long long)r->plan_extent_bytes,
                      r->plan_ratio);
    dmm__json_put(o,
            ",\"driver_calls\":{\"create\":%llu,\"map\":%llu,\"set_access\":%llu,\"unmap\":%llu,\"release\":%llu"
            ",\"cache_hits\":%llu}",
            (unsigned long long)r->calls_create, (unsigned long long)r->calls_map,
            (unsigned long long)r->calls_set_access, (unsigned long long)r->calls_unmap,
            (unsigned long long)r->calls_release, (unsigned long long)r->cache_hits);
    dmm__json_put(o,
            ",\"driver_calls_per_1k_allocs\":{\"create\":%.3f,\"map\":%.3f,\"set_access\":%.3f,\"unmap\":%.3f"
            ",\"release\":%.3f}",
            dmm_replay_per_1k(r->calls_create, r->allocs), dmm_replay_per_1k(r->calls_map, r->allocs),
            dmm_replay_per_1k(r->calls_set_access, r->allocs), dmm_replay_per_1k(r->calls_unmap, r->allocs),
            dmm_replay_per_1k(r->calls_release, r->allocs));
    dmm__json_put(o,
            ",\"malloc_p50_ns\":%.0f,\"malloc_p90_ns\":%.0f,\"malloc_p99_ns\":%.0f,\"malloc_max_ns\":%.0f"
            ",\"free_p50_ns\":%.0f,\"free_p90_ns\":%.0f,\"free_p99_ns\":%.0f,\"free_max_ns\":%.0f"
            ",\"wall_s\":%.6f,\"est_h200_driver_s\":%.6f",
            r->malloc_p50, r->malloc_p90, r->malloc_p99, r->malloc_max, r->free_p50, r->free_p90, r->free_p99,
            r->free_max, r->wall_s, r->est_h200_driver_s);
    char buf[4096];
    size_t need = 0;
    if (dmm_pool_stats_json(&r->pool, buf, sizeof buf, &need) == DMM_OK) dmm__json_put(o, ",\"pool\":%s", buf);
    dmm__json_put(o, "}\n");
}

void dmm_report_json(FILE *f, const char *path, const dmm_trace *t, const dmm_replay_result *r) {
    char small[16384];
    dmm_json o = {small, sizeof small, 0};
    report_json_build(&o, path, t, r);
    char *big = NULL;
    if (o.len >= sizeof small) { /* measured: build it again into a buffer that fits */
        big = malloc(o.len + 1);
        if (big == NULL) {
            fprintf(stderr, "dmm replay: out of host memory for the %zu-byte JSON report\n", o.len);
            return;
        }
        o = (dmm_json){big, o.len + 1, 0};
        report_json_build(&o, path, t, r);
    }
    fwrite(o.buf, 1, o.len, f);
    free(big);
}

/* ---- HTML ---- */
#define W 960
#define H 360
#define ML 70
#define MR 20
#define MT 20
#define MB 40

static double xs(uint64_t t, uint64_t tmax) { return ML + (double)(W - ML - MR) * (tmax ? (double)t / (double)tmax : 0); }
static double ys(uint64_t v, uint64_t vmax) { return MT + (double)(H - MT - MB) * (1.0 - (double)v / (double)vmax); }

double dmm_report_tick_step(double max, double *top) {
    double p = 1;
    while (p * 10 <= max / 3) p *= 10;
    while (p > max / 3 && p > 1e-9) p /= 10;
    double step = p; /* the largest power of ten that gives at least 3 ticks; then 2 or 5 times it if they do too */
    if (p * 5 <= max / 3) step = p * 5;
    else if (p * 2 <= max / 3) step = p * 2;
    double n = 0;
    while (n * step < max * (1 - 1e-12)) n += 1;
    *top = n * step;
    return step;
}

uint64_t dmm_report_bytes_unit(uint64_t max, const char **name) {
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (k < 3 && max >= ((uint64_t)2 << (10 * (k + 2)))) k++; /* the largest unit of which the top holds 2 */
    *name = names[k];
    return (uint64_t)1 << (10 * (k + 1));
}

static void polyline(FILE *f, const dmm_replay_result *r, int which, uint64_t tmax, uint64_t vmax, const char *color,
                     const char *dash) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s%s%s points=\"", color,
            dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (size_t i = 0; i < r->npoints; i++) {
        const dmm_replay_point *p = &r->timeline[i];
        uint64_t v = which == 0 ? p->live : which == 1 ? p->committed : p->physical;
        fprintf(f, "%.1f,%.1f ", xs(p->t_us, tmax), ys(v, vmax));
    }
    fprintf(f, "\"/>\n");
}

void dmm_report_html(FILE *f, const char *path, const dmm_trace *t, const dmm_replay_result *r) {
    uint64_t tmax = t->duration_us ? t->duration_us : 1, vmax = r->peak_physical_bytes;
    if (t->native_peak_reserved > vmax) vmax = t->native_peak_reserved;
    if (r->peak_committed_bytes > vmax) vmax = r->peak_committed_bytes;
    if (vmax == 0) vmax = 1;
    vmax += vmax / 20;
    /* round ticks in one unit: the bytes axis ends on a tick, and so does the time axis */
    const char *unit_name = NULL;
    uint64_t unit = dmm_report_bytes_unit(vmax, &unit_name);
    double vtop = 0, vstep = dmm_report_tick_step((double)vmax / (double)unit, &vtop);
    vmax = (uint64_t)(vtop * (double)unit);
    double ttop = 0, tstep = dmm_report_tick_step((double)tmax * 1e-6, &ttop);
    tmax = (uint64_t)(ttop * 1e6);
    char a[32], b[32], c[32];
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dmm replay: ");
    html_str(f, t->workload[0] ? t->workload : path);
    fprintf(f, "</title>\n<style>\n"
               "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;"
               "max-width:1000px;color:#222}\n"
               "h1{font-size:1.4em}table{border-collapse:collapse;margin:1em 0}"
               "td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}"
               "td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
               ".good{color:#080;font-weight:600}.bad{color:#b00;font-weight:600}"
               "svg text{font-size:11px;fill:#444}.legend span{margin-right:1.5em}\n"
               "</style></head><body>\n");
    fprintf(f, "<h1>dmm replay: ");
    html_str(f, t->workload[0] ? t->workload : "trace");
    fprintf(f, "</h1>\n<p>Trace <code>");
    html_str(f, path);
    fprintf(f, "</code> replayed through the dmm pool over an arena on the <b>%s</b> driver (granule %s, chunk "
               "%s).</p>\n",
            r->driver, fmtb(r->granule, a, sizeof a), fmtb(r->chunk, b, sizeof b));
    /* the chart */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "role=\"img\" aria-label=\"live, committed and physical bytes over time\">\n",
            W, H, W, H);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n", ML, MT,
            W - ML - MR, H - MT - MB);
    for (int i = 0; i * vstep <= vtop * (1 + 1e-9); i++) {
        uint64_t v = (uint64_t)(i * vstep * (double)unit);
        double y = ys(v, vmax);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>", ML, W - MR, y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n", ML - 6, y + 4, i * vstep, unit_name);
    }
    for (int i = 0; i * tstep <= ttop * (1 + 1e-9); i++) {
        double x = xs((uint64_t)(i * tstep * 1e6), tmax);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g s</text>\n", x, H - MB + 16, i * tstep);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">trace time</text>\n", (W + ML) / 2, H - 6);
    if (t->native_peak_reserved > 0) {
        double y = ys(t->native_peak_reserved, vmax);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 4\"/>\n",
                ML, W - MR, y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" style=\"fill:#d62728\">PyTorch peak reserved %s</text>\n",
                W - MR - 4, y - 4, fmtb(t->native_peak_reserved, a, sizeof a));
    }
    polyline(f, r, 2, tmax, vmax, "#ff7f0e", NULL);
    polyline(f, r, 1, tmax, vmax, "#2ca02c", "3 2");
    polyline(f, r, 0, tmax, vmax, "#1f77b4", NULL);
    fprintf(f, "</svg>\n<p class=\"legend\"><span style=\"color:#1f77b4\">&#9644; live bytes</span>"
               "<span style=\"color:#2ca02c\">&#9476; pool committed (mapped chunks)</span>"
               "<span style=\"color:#ff7f0e\">&#9644; physical (handles held: mapped + cached)</span>"
               "<span style=\"color:#d62728\">&#9476; PyTorch peak reserved</span></p>\n");
    /* the numbers: dmm's ratio is good where it meets the goal the chart draws, PyTorch's own (or, where
     * the trace does not say it, the 1.03 of DESIGN) */
    double goal = r->native_ratio > 0 ? r->native_ratio : 1.03;
    bool good = r->ratio <= goal;
    fprintf(f, "<table>\n<tr><th>measure</th><th>dmm</th><th>PyTorch (from the trace)</th></tr>\n");
    fprintf(f, "<tr><td>peak live</td><td class=\"n\">%s</td><td class=\"n\">%s allocated</td></tr>\n",
            fmtb(r->peak_live_bytes, a, sizeof a), fmtb(t->native_peak_allocated, b, sizeof b));
    fprintf(f, "<tr><td>peak physical</td><td class=\"n\">%s</td><td class=\"n\">%s reserved</td></tr>\n",
            fmtb(r->peak_physical_bytes, a, sizeof a), fmtb(t->native_peak_reserved, b, sizeof b));
    fprintf(f, "<tr><td>peak ÷ live</td><td class=\"n %s\">%.4f</td><td class=\"n\">%.4f</td></tr>\n",
            good ? "good" : "bad", r->ratio, r->native_ratio);
    fprintf(f, "<tr><td>peak committed (pool)</td><td class=\"n\">%s (%.4f)</td><td></td></tr>\n",
            fmtb(r->peak_committed_bytes, a, sizeof a), r->ratio_committed);
    fprintf(f, "</table>\n<table>\n<tr><th>driver call</th><th>count</th><th>per 1,000 allocations</th></tr>\n");
    const char *names[] = {"create", "map", "set_access", "unmap", "release"};
    uint64_t calls[] = {r->calls_create, r->calls_map, r->calls_set_access, r->calls_unmap, r->calls_release};
    for (int i = 0; i < 5; i++)
        fprintf(f, "<tr><td>%s</td><td class=\"n\">%llu</td><td class=\"n\">%.2f</td></tr>\n", names[i],
                (unsigned long long)calls[i], dmm_replay_per_1k(calls[i], r->allocs));
    fprintf(f, "<tr><td>handle cache hits</td><td class=\"n\">%llu</td><td class=\"n\">%.2f</td></tr>\n",
            (unsigned long long)r->cache_hits, dmm_replay_per_1k(r->cache_hits, r->allocs));
    fprintf(f, "</table>\n<table>\n<tr><th>operation</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>\n");
    fprintf(f, "<tr><td>malloc</td><td class=\"n\">%.0f ns</td><td class=\"n\">%.0f ns</td><td class=\"n\">%.0f ns</td>"
               "<td class=\"n\">%.1f µs</td></tr>\n",
            r->malloc_p50, r->malloc_p90, r->malloc_p99, r->malloc_max * 1e-3);
    fprintf(f, "<tr><td>free</td><td class=\"n\">%.0f ns</td><td class=\"n\">%.0f ns</td><td class=\"n\">%.0f ns</td>"
               "<td class=\"n\">%.1f µs</td></tr>\n",
            r->free_p50, r->free_p90, r->free_p99, r->free_max * 1e-3);
    fprintf(f, "</table>\n<p>%llu events (%llu allocations, %llu frees) replayed in %.3f s; %llu of %llu mallocs were "
               "served from mapped free blocks without a driver call; %llu chunks were moved rather than "
               "created.</p>\n",
            (unsigned long long)r->events, (unsigned long long)r->allocs, (unsigned long long)r->frees, r->wall_s,
            (unsigned long long)r->pool.cached_mallocs, (unsigned long long)r->pool.mallocs,
            (unsigned long long)r->pool.chunks_moved);
    fprintf(f, "<p style=\"color:#777\">Physical = bytes of the physical handles the arena holds (mapped plus its "
               "handle cache). Generated by <code>dmm replay</code>, dmm %s.</p>\n</body></html>\n",
            dmm_version_string());
    (void)c;
}
