/* SPDX-License-Identifier: Apache-2.0 */
/* tools/trace.h — allocation traces (`# dmm-trace v1`, ../shared/traces/README.md), read into memory.
 *
 * A trace is a header of `# key: value` comments and one event per line:
 *   <t_us> a <id> <bytes> <stream>     allocation number <id> of <bytes> on stream <stream>
 *   <t_us> f <id>                      free of allocation <id>
 * The reader validates as it goes (ids positive and increasing, every free names a live allocation,
 * no double free) and resolves each free to the ordinal of its allocation, so that a replay needs
 * no hash table: allocation k (0-based, in file order) lives in slot k of the replayer's arrays.
 * Stream ids become dense indices 0..nstreams-1 in order of first appearance (ids kept in
 * stream_ids[]).
 *
 * Used by the `dmm replay` command and by bench_replay, both through dmm_tools_lib (tools/CMakeLists.txt).
 * Thread contract: a loaded trace is immutable; one owner frees it.
 */
#ifndef DMM_TOOLS_TRACE_H
#define DMM_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

enum { DMM_TRACE_ALLOC = 0, DMM_TRACE_FREE = 1 };

typedef struct dmm_trace_event {
    uint64_t t_us;  /* microseconds since the first event */
    uint64_t bytes; /* allocation: its bytes; free: the bytes of the allocation it frees */
    uint32_t slot;  /* the allocation's ordinal (0-based, file order), for both kinds */
    uint16_t stream; /* dense stream index (allocation: its stream; free: the allocation's stream) */
    uint8_t kind;   /* DMM_TRACE_ALLOC or DMM_TRACE_FREE */
    uint8_t pad_;
} dmm_trace_event;

typedef struct dmm_trace {
    char workload[64];               /* header `workload` ("" if absent) */
    uint64_t native_peak_allocated;  /* header; 0 if absent */
    uint64_t native_peak_reserved;   /* header; 0 if absent */
    dmm_trace_event *ev;             /* events in file order */
    size_t n;                        /* events */
    size_t allocs, frees;            /* by kind; allocs - frees = allocations never freed */
    uint64_t peak_live_bytes;        /* max over time of Σ bytes of live allocations */
    uint64_t max_bytes;              /* largest allocation */
    uint64_t total_alloc_bytes;      /* Σ bytes of every allocation */
    uint64_t duration_us;            /* t_us of the last event */
    uint32_t nstreams;               /* distinct streams */
    uint64_t stream_ids[64];         /* the trace's stream id of each dense index */
} dmm_trace;

/* The longest line a trace may have (a header comment included); a longer one is refused. */
#define DMM_TRACE_MAX_LINE 65536

/* The bounds of one reading (DESIGN §4.17: every input has one, and a flag raises it): the bytes of
 * text read (after decompression: a small gzip file may inflate to any size, and a device or a pipe
 * may never end) and the records (event lines; header comments count as bytes only). A reading that
 * would pass either ends with a sentence naming the bound and `dmm replay`'s flag that raises it. The
 * defaults are some 200 times the largest trace shipped (llama-generate: 18 MB, 865,000 events); at
 * the record bound the events take ~3 GiB of memory. */
#define DMM_TRACE_DEFAULT_MAX_TEXT_BYTES ((uint64_t)4 << 30)
#define DMM_TRACE_DEFAULT_MAX_RECORDS ((uint64_t)100000000)
typedef struct dmm_trace_limits {
    uint64_t max_text_bytes; /* 0: DMM_TRACE_DEFAULT_MAX_TEXT_BYTES */
    uint64_t max_records;    /* 0: DMM_TRACE_DEFAULT_MAX_RECORDS */
} dmm_trace_limits;

/* Parses trace text that is already in memory (`len` bytes, need not be NUL-terminated; any bytes:
 * the entry point for fuzzing). Returns 0, or -1 with a sentence in err (file line number, what is
 * wrong). `out` is zeroed first; free it with dmm_trace_free() also after a failure. Memory: the
 * events and four small per-allocation tables, nothing per byte of text. */
int dmm_trace_parse(const char *text, size_t len, dmm_trace *out, char *err, size_t errcap);
/* The same within `limits` (NULL: the defaults; so is dmm_trace_parse). */
int dmm_trace_parse_limited(const char *text, size_t len, const dmm_trace_limits *limits, dmm_trace *out, char *err,
                            size_t errcap);

#ifndef DMM_TRACE_NO_ZLIB
/* Reads a trace file, gzip-compressed or plain (zlib reads both), streaming: the text passes through a
 * 1 MiB buffer and is never held whole (a small gzip file that inflates to gigabytes costs time, not
 * memory). Same contract as parse, with "trace 'PATH': " before every sentence; a gzip stream that
 * stops early (a recorder killed mid-run, a cut or missing trailer) or compressed data that is invalid
 * is an error that says so, with the compressed byte offset and the lines read, never a shorter trace. */
int dmm_trace_load(const char *path, dmm_trace *out, char *err, size_t errcap);
/* The same within `limits` (NULL: the defaults; so is dmm_trace_load). A line refused mid-stream makes
 * the loader read on to see whether the stream is cut (then the cut is blamed): at most 16 MiB more,
 * and never past the text bound, so an endless input ends. */
int dmm_trace_load_limited(const char *path, const dmm_trace_limits *limits, dmm_trace *out, char *err, size_t errcap);
#endif

void dmm_trace_free(dmm_trace *t);

#endif /* DMM_TOOLS_TRACE_H */
