/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/options.c — the table of dmm's options, the one reader of the environment, and the one
 * grammar of the numbers in options (contract: options.h).
 *
 * What it owns: every row of the table (an environment variable or a flag of the tool: its kind, range,
 * default and one-sentence description), the getenv of each variable, and the scanner every option's
 * number goes through (the torch adapter's DMM_TORCH_* sizes, the tool's --granule, --max-input-bytes, …).
 *
 * The idea: an option that is described in one place, read in one place and parsed by one grammar cannot
 * drift between the environment, the tool's --help and docs/options.md, which are all printed from here
 * (`dmm options --markdown`; the test docs/options fails when the file in docs/ differs). The scanner
 * reads the text exactly — the digits before and after the point as integers, the unit as a
 * multiplier — so a value never passes through a double on its way to an integer (strtod took "nan",
 * "1e3", "0x10" and " 2M", and a cast of NaN is undefined).
 *
 * The trade-off: sizes take binary units only (K = 1024: memory is sized in powers of two, and a "G"
 * that meant 10^9 would hand out 7 % less than asked); whole numbers take no unit and no fraction, so
 * that "20%" or "2.5" for a per mille is an error, not a guess. The rows are designated initializers
 * indexed by dmm_option_id, so a row cannot sit under another's id; an id without a row has no reader
 * and the unit test of the table (tests/unit/test_options.c) fails.
 *
 * Invariants: a number is written only on success; every reason is one phrase ("it is negative");
 * dmm__option_env never returns an empty string; no function here writes anything but its outputs.
 */
#include "core/options.h"
#include "dmm/status.h" /* dmm_env, public */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U32 UINT32_MAX

static const dmm_option table[DMM_OPTION_COUNT_] = {
    /* ---- the environment ---- */
    [DMM_OPTION_TORCH_POOL_VA] = {"DMM_TORCH_POOL_VA", NULL, "libdmm_torch.so", DMM_OPTION_BYTES, 0, UINT64_MAX,
                                  "SIZE", "a size", "64G", "0: the device's memory rounded up to a power of two",
                                  "the VA each device's pool reserves for its memory (the adapter reserves 4 times it, "
                                  "so at most 2^61 bytes)"},
    [DMM_OPTION_TORCH_RETAIN] = {"DMM_TORCH_RETAIN", NULL, "libdmm_torch.so", DMM_OPTION_PERMILLE, 0, 1000, "PERMILLE",
                                 "a whole number from 0 to 1000", "20", "0: the pool's default",
                                 "the memory the pool keeps mapped while free, in per mille of the live peak (20 = 2 %)"},
    [DMM_OPTION_TORCH_SETTLE] = {"DMM_TORCH_SETTLE", NULL, "libdmm_torch.so", DMM_OPTION_PERMILLE, 0, 1000, "PERMILLE",
                                 "a whole number from 0 to 1000", "100", "0: the pool's default, 100",
                                 "how far the pool's retention may rise while it keeps re-mapping memory, in per mille "
                                 "of the live peak (at or below the retention: never)"},
    [DMM_OPTION_TORCH_HANDLES] = {"DMM_TORCH_HANDLES", NULL, "libdmm_torch.so", DMM_OPTION_FIELDS, 0, UINT64_MAX,
                                  "MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]]", "a size, a whole divisor, a size, a whole divisor",
                                  "128M,4", "32M,8,8M",
                                  "the pool's physical handles: at most MAX bytes each (a multiple of the granule; 0 = "
                                  "one granule per handle), a growth for n bytes commits handles of at most n / DIVISOR "
                                  "but at least MIN bytes, and FLOOR_DIVISOR raises that floor to the live peak / "
                                  "FLOOR_DIVISOR as the pool grows"},
    [DMM_OPTION_TORCH_STOCK] = {"DMM_TORCH_STOCK", NULL, "libdmm_torch.so", DMM_OPTION_BYTES, 0, UINT64_MAX, "SIZE",
                                "a size", "256M", "0: no stock",
                                "the bytes the pool's stock thread keeps committed ahead of a growing pool (at most "
                                "1/128 of the live peak is used)"},
    [DMM_OPTION_TORCH_PLAN] = {"DMM_TORCH_PLAN", NULL, "libdmm_torch.so", DMM_OPTION_COUNT, 0, 1, "0|1",
                               "0 or 1", "1", "0: off",
                               "experimental: each stream's pool heap learns its repeating loop and follows a plan of "
                               "it (dmm_pool_config.plan_loops; with DMM_TORCH_SETTLE=25, docs/architecture.md)"},
    [DMM_OPTION_TORCH_RESTORE_PIECE] = {"DMM_TORCH_RESTORE_PIECE", NULL, "libdmm_torch.so", DMM_OPTION_FIELDS, 0,
                                        UINT64_MAX, "MAX[,FIRST[,COPY]]", "three sizes", "256M,16M",
                                        "the device front's default",
                                        "how restore maps a segment back (a measurement knob): pieces of at most MAX "
                                        "bytes (0 = one commit per segment), growing from FIRST by doubling, each copied "
                                        "in parts of COPY bytes"},
    [DMM_OPTION_TORCH_OOM] = {"DMM_TORCH_OOM", NULL, "libdmm_torch.so", DMM_OPTION_TEXT, 0, 0, "null", "null", "null",
                              "unset, a failed allocation raises an exception",
                              "null makes a failed allocation return NULL to torch instead of raising "
                              "torch.cuda.OutOfMemoryError or RuntimeError (torch does not check that NULL)"},
    [DMM_OPTION_TORCH_SHAREABLE] = {"DMM_TORCH_SHAREABLE", NULL, "libdmm_torch.so", DMM_OPTION_COUNT, 0, 1, "0|1",
                                     "0 or 1", "0", "1: where the device exports POSIX file descriptors",
                                     "1 creates every handle exportable, so that a tensor can be sent to another "
                                     "process (torch.multiprocessing; dmm_device_config.exportable); 0 creates "
                                     "plain handles and such a send raises"},
    [DMM_OPTION_CUDA_LIBRARY] = {"DMM_CUDA_LIBRARY", NULL, "libdmm", DMM_OPTION_TEXT, 0, 0, "PATH", "a library path",
                                 "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.1",
                                 "the CUDA driver library the cuda driver opens (for tests and unusual installs)"},
    [DMM_OPTION_ORT_LIB] = {"DMM_ORT_LIB", NULL, "libdmm_ort", DMM_OPTION_TEXT, 0, 0, "PATH", "a library path",
                            ".ort/lib/libonnxruntime.so.1", "libonnxruntime.so.1",
                            "the ONNX Runtime library that dmm_ort_runtime_open(NULL, ...) and dmm ort open"},
    [DMM_OPTION_PYTHON_LIB] = {"DMM_LIB", NULL, "python dmm", DMM_OPTION_TEXT, 0, 0, "PATH", "a library path",
                               "build/adapters/torch/libdmm_torch.so",
                               "the package's own copy, else the source tree's build folders",
                               "the libdmm_torch.so the Python package loads (the file or its folder); a wrong one "
                               "is an error, never a fall-back"},
    [DMM_OPTION_PYTHON_BUILD_DIR] = {"DMM_BUILD_DIR", NULL, "python build backend", DMM_OPTION_TEXT, 0, 0, "DIR",
                                     "a build folder", "build", "CMake builds the library",
                                     "the build folder whose libdmm_torch.so `pip install ./python` packs into the "
                                     "wheel"},
    [DMM_OPTION_PYTHON_DISABLE] = {"DMM_DISABLE", NULL, "python dmm", DMM_OPTION_TEXT, 0, 0, "1", "1, true, yes or on",
                                   "1", "unset: dmm is used",
                                   "switches dmm off without a change of code: dmm.torch.enable() leaves torch its own "
                                   "allocator and says so once (logger \"dmm\")"},

    /* ---- dmm replay ---- */
    [DMM_OPTION_REPLAY_DRIVER] = {NULL, "--driver", "dmm replay", DMM_OPTION_TEXT, 0, 0, "host|cuda", "host or cuda",
                                  "cuda", "host",
                                  "the driver: host (mmap + memfd, real memory never touched) or cuda"},
    [DMM_OPTION_REPLAY_GRANULE] = {NULL, "--granule", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                   "a size in bytes", "2M", "2M", "the host driver's granularity"},
    [DMM_OPTION_REPLAY_CHUNK] = {NULL, "--chunk", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                 "a size in bytes", "2M", "the granule", "the pool's commit quantum"},
    [DMM_OPTION_REPLAY_MAX_CHUNK] = {NULL, "--max-chunk", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                     "a size in bytes", "2M", "the quantum",
                                     "the largest chunk a growth commits as one handle (larger: fewer driver calls, "
                                     "more fragmentation)"},
    [DMM_OPTION_REPLAY_HANDLE_DIV] = {NULL, "--handle-div", "dmm replay", DMM_OPTION_COUNT, 0, U32, "N",
                                      "a whole divisor", "4", "0: up to --max-chunk",
                                      "with --max-chunk: a growth for n bytes commits handles of at most n / N (only "
                                      "large requests get large handles)"},
    [DMM_OPTION_REPLAY_MIN_CHUNK] = {NULL, "--min-chunk", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                     "a size in bytes", "2M", "the quantum",
                                     "with --handle-div: the smallest handle the divisor cuts to (a multiple of the "
                                     "quantum, at most --max-chunk)"},
    [DMM_OPTION_REPLAY_FLOOR_DIV] = {NULL, "--floor-div", "dmm replay", DMM_OPTION_COUNT, 0, U32, "N", "a whole divisor",
                                     "4", "0: a fixed floor",
                                     "with --handle-div: the floor rises to the live peak / N (up to --max-chunk)"},
    [DMM_OPTION_REPLAY_RETAIN] = {NULL, "--retain", "dmm replay", DMM_OPTION_PERMILLE, 0, U32, "PERMILLE",
                                  "a whole number of per mille", "20", "20",
                                  "the memory kept mapped while free, in per mille of the live peak"},
    [DMM_OPTION_REPLAY_SETTLE] = {NULL, "--settle", "dmm replay", DMM_OPTION_PERMILLE, 0, U32, "PERMILLE",
                                  "a whole number of per mille", "20", "100",
                                  "the most the retention limit rises while the pool keeps re-mapping memory, in per "
                                  "mille of the live peak (at or below --retain: fixed)"},
    [DMM_OPTION_REPLAY_LAG] = {NULL, "--lag", "dmm replay", DMM_OPTION_COUNT, 0, UINT64_MAX, "N",
                               "a number of allocations", "64", "0: at once",
                               "host driver: every event completes only N allocations after it was recorded, as on a "
                               "GPU where the CPU runs ahead of the work"},
    [DMM_OPTION_REPLAY_NO_ALIAS] = {NULL, "--no-alias", "dmm replay", DMM_OPTION_SWITCH, 0, 0, NULL, NULL, NULL, NULL,
                                    "the pool never aliases fenced chunks of the requesting stream (it waits or grows "
                                    "instead): the behaviour before aliases, for comparison"},
    [DMM_OPTION_REPLAY_REPEAT] = {NULL, "--repeat", "dmm replay", DMM_OPTION_COUNT, 1, 1000, "K",
                                  "a number of repetitions", "4", "1",
                                  "the trace as one iteration, replayed K times over the same pool (each repetition's "
                                  "leftovers freed before the next); also prints the driver calls, aliases and moves "
                                  "of the last repetition alone: the steady state"},
    [DMM_OPTION_REPLAY_WARM] = {NULL, "--warm", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                "a size in bytes", "2M", "none",
                                "a warm start: the pool first commits BYTES (e.g. the last run's peak) in handles of up "
                                "to 1 GiB, timed with the replay"},
    [DMM_OPTION_REPLAY_WARM_LAYOUT] = {NULL, "--warm-layout", "dmm replay", DMM_OPTION_SWITCH, 0, 0, NULL, NULL, NULL,
                                       NULL,
                                       "a warm start that keeps the layout: the trace is first replayed once, untimed, "
                                       "with the same options, and the handles that pool created for its growths are "
                                       "committed ahead, each at its place, timed with the replay "
                                       "(dmm_pool_warm_layout)"},
    [DMM_OPTION_REPLAY_STOCK] = {NULL, "--stock", "dmm replay", DMM_OPTION_BYTES, 1, (uint64_t)1 << 63, "BYTES",
                                 "a size in bytes", "2M", "none",
                                 "the pool's stock thread keeps up to BYTES (at most 1/128 of the live peak) committed "
                                 "ahead of a growing pool, synced after every malloc"},
    [DMM_OPTION_REPLAY_PLAN] = {NULL, "--plan", "dmm replay", DMM_OPTION_SWITCH, 0, 0, NULL, NULL, NULL, NULL,
                                "also places the whole trace offline in a fixed layout (three greedy orders and "
                                "seeded restarts, the smallest kept) and prints its extent: about the least memory "
                                "that serves the trace with no driver call"},
    [DMM_OPTION_REPLAY_PLAN_LOOPS] = {NULL, "--plan-loops", "dmm replay", DMM_OPTION_SWITCH, 0, 0, NULL, NULL, NULL,
                                      NULL,
                                      "experimental: the pool's heaps learn a repeating loop and follow a plan of it "
                                      "(dmm_pool_config.plan_loops)"},
    [DMM_OPTION_REPLAY_JSON] = {NULL, "--json", "dmm replay", DMM_OPTION_TEXT, 0, 0, "[=FILE]", "a file", "out.json",
                                NULL,
                                "one JSON object instead of text; --json=FILE writes it to FILE (and the text to the "
                                "standard output)"},
    [DMM_OPTION_REPLAY_REPORT] = {NULL, "--report", "dmm replay", DMM_OPTION_TEXT, 0, 0, "FILE.html", "a file",
                                  "report.html", NULL, "also write a self-contained HTML page with the timeline"},
    [DMM_OPTION_REPLAY_MAX_INPUT_BYTES] = {NULL, "--max-input-bytes", "dmm replay", DMM_OPTION_BYTES, 1,
                                           (uint64_t)1 << 50, "SIZE", "a size in bytes", "8G", "4G",
                                           "the most text the trace may hold, after decompression; an endless or larger "
                                           "input ends there with an error"},
    [DMM_OPTION_REPLAY_MAX_RECORDS] = {NULL, "--max-records", "dmm replay", DMM_OPTION_COUNT, 1, (uint64_t)1 << 32, "N",
                                       "a number of events", "200000000", "100000000",
                                       "the most events (lines that are not comments) the trace may hold; an endless "
                                       "or longer input ends there with an error"},

    /* ---- dmm compare ---- */
    [DMM_OPTION_COMPARE_THRESHOLD_FLOOR] = {NULL, "--threshold-floor", "dmm compare", DMM_OPTION_REAL, 0, 1000000000,
                                            "PCT", "a number", "5", "2",
                                            "the floor below which a move is never WORSE, in per cent"},
    [DMM_OPTION_COMPARE_K] = {NULL, "--k", "dmm compare", DMM_OPTION_REAL, 0, 1000000000, "K", "a number", "3", "3",
                              "the noise multiple a move must pass to be WORSE"},
    [DMM_OPTION_COMPARE_MAX_INPUT_BYTES] = {NULL, "--max-input-bytes", "dmm compare", DMM_OPTION_BYTES, 1,
                                            (uint64_t)1 << 30, "SIZE", "a size in bytes", "16M", "4M",
                                            "the most a result file may hold (jansson's tree takes up to 75 "
                                            "times the text); a larger or endless input is refused"},

    /* ---- dmm ort ---- */
    [DMM_OPTION_ORT_LIMIT] = {NULL, "--limit", "dmm ort", DMM_OPTION_BYTES, 1, (uint64_t)1 << 62, "BYTES",
                              "a size in bytes", "64M", "none", "the governor's host limit"},
    [DMM_OPTION_ORT_RUNS] = {NULL, "--runs", "dmm ort", DMM_OPTION_COUNT, 1, 100000, "N", "a number of Runs", "4", "4",
                             "how many times the session runs the model"},
    [DMM_OPTION_ORT_BATCH] = {NULL, "--batch", "dmm ort", DMM_OPTION_COUNT, 0, 65536, "N", "a dimension", "8",
                              "1; with --write-model, 0",
                              "the size of the model's symbolic dimensions; with --write-model, the model's batch (0 "
                              "= symbolic)"},
    [DMM_OPTION_ORT_MAX_INPUT_BYTES] = {NULL, "--max-input-bytes", "dmm ort", DMM_OPTION_BYTES, 1, (uint64_t)1 << 40,
                                        "SIZE", "a size in bytes", "4G", "2G",
                                        "the largest model file read (2G is protobuf's ceiling); a larger or endless "
                                        "input is refused before ONNX Runtime sees it"},
    [DMM_OPTION_ORT_WRITE_MODEL] = {NULL, "--write-model", "dmm ort", DMM_OPTION_TEXT, 0, 0, "FILE", "a file",
                                    "model.onnx", NULL,
                                    "write dmm's dense test model (MatMul-Add-Relu) and exit; a regular FILE is written "
                                    "beside and renamed into place, a device or FIFO in place"},

    /* ---- dmm hold ---- */
    [DMM_OPTION_HOLD_SOCKET] = {NULL, "--socket", "dmm hold", DMM_OPTION_TEXT, 0, 0, "PATH", "a socket path",
                                "$XDG_RUNTIME_DIR/dmm.sock", NULL,
                                "where to listen (required): in a directory that you own and no one else may write, "
                                "reached through no symbolic link; the socket is made mode 0600"},
    [DMM_OPTION_HOLD_LIMIT] = {NULL, "--limit", "dmm hold", DMM_OPTION_BYTES, 1, UINT64_MAX / 2, "BYTES",
                               "a size in bytes", "64G", "no limit", "the most the regions may hold together"},
    [DMM_OPTION_HOLD_CUDA] = {NULL, "--cuda", "dmm hold", DMM_OPTION_COUNT, 0, 1023, "N", "a CUDA device ordinal", "0",
                              "host memory", "keep the regions in the memory of CUDA device N"},
    [DMM_OPTION_HOLD_HELLO_DEADLINE] = {NULL, "--hello-deadline", "dmm hold", DMM_OPTION_COUNT, 10, 600000, "MS",
                                        "milliseconds", "3000", "3000",
                                        "a connection that has not said hello within MS milliseconds is closed"},
    [DMM_OPTION_HOLD_MAX_CONNECTIONS] = {NULL, "--max-connections", "dmm hold", DMM_OPTION_COUNT, 1, 65536, "N",
                                         "connections", "256", "256",
                                         "connections served at once; at the limit one that has not said hello "
                                         "yields its slot to a newcomer"},
    [DMM_OPTION_HOLD_MAX_CONNECTIONS_PER_UID] = {NULL, "--max-connections-per-uid", "dmm hold", DMM_OPTION_COUNT, 1,
                                                 65536, "N", "connections", "128", "128",
                                                 "connections of one uid at once (at most --max-connections)"},

    /* ---- dmm options ---- */
    [DMM_OPTION_OPTIONS_MARKDOWN] = {NULL, "--markdown", "dmm options", DMM_OPTION_SWITCH, 0, 0, NULL, NULL, NULL, NULL,
                                     "print this table as docs/options.md (the test docs/options fails when the file "
                                     "differs)"},
};

const dmm_option *dmm__option(dmm_option_id id) {
    return (unsigned)id < DMM_OPTION_COUNT_ ? &table[id] : NULL;
}

const char *dmm__option_env(dmm_option_id id) {
    const dmm_option *o = dmm__option(id);
    if (o == NULL || o->env == NULL) return NULL;
    const char *v = getenv(o->env); /* the one read of the environment in dmm's C code */
    return v != NULL && v[0] != '\0' ? v : NULL;
}

const char *dmm_env(const char *name) { return dmm__option_env_named(NULL, name); }

const char *dmm__option_env_named(void *user, const char *name) {
    (void)user;
    if (name == NULL) return NULL;
    for (unsigned i = 0; i < DMM_OPTION_COUNT_; i++)
        if (table[i].env != NULL && strcmp(table[i].env, name) == 0) return dmm__option_env((dmm_option_id)i);
    return NULL;
}

/* The unit at s, when s starts with one: its multiplier and length ("K", "Ki", "KB", "KiB" in any case). */
static size_t unit_at(const char *s, const char *end, uint64_t *mult) {
    static const char letters[] = "kmgt";
    if (s == end) return 0;
    char c = *s;
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    const char *at = c != '\0' ? strchr(letters, c) : NULL;
    if (at == NULL) return 0;
    *mult = (uint64_t)1 << (10 * (unsigned)(at - letters + 1));
    size_t n = 1;
    if (s + n < end && (s[n] == 'i' || s[n] == 'I')) n++;
    if (s + n < end && (s[n] == 'b' || s[n] == 'B')) n++;
    return n;
}

const char *dmm__number_scan(const char *text, size_t len, bool units, unsigned max_decimals, dmm_number_parts *out,
                             char *why, size_t whycap) {
    const char *s = text, *end = text + len;
    dmm_number_parts v = {0, 0, 0, 1};
    if (s == end) return "it is empty";
    if (*s == '-') return "it is negative";
    if (*s < '0' || *s > '9') return "it does not start with a digit";
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v.whole > (UINT64_MAX - d) / 10) return "it does not fit in 64 bits";
        v.whole = v.whole * 10 + d;
    }
    if (s < end && *s == '.') {
        if (max_decimals == 0) return "it is not a whole number (no fraction)";
        s++;
        if (s == end || *s < '0' || *s > '9') return "a digit must follow the decimal point";
        for (; s < end && *s >= '0' && *s <= '9'; s++) {
            if (v.decimals == max_decimals) {
                snprintf(why, whycap, "it has more than %u decimals", max_decimals);
                return why;
            }
            v.fraction = v.fraction * 10 + (uint64_t)(*s - '0');
            v.decimals++;
        }
    }
    if (units) s += unit_at(s, end, &v.unit);
    if (s != end) {
        size_t rest = (size_t)(end - s);
        snprintf(why, whycap, "'%.*s%s' follows the number%s", (int)(rest > 16 ? 16 : rest), s, rest > 16 ? "..." : "",
                 units ? " (sizes take K, M, G or T, optionally with iB)" : "");
        return why;
    }
    *out = v;
    return NULL;
}

const char *dmm__number_read(const char *text, size_t len, bool bytes, uint64_t *out, char *why, size_t whycap) {
    dmm_number_parts v;
    const char *bad = dmm__number_scan(text, len, bytes, bytes ? 9 : 0, &v, why, whycap);
    if (bad != NULL) return bad;
    /* fraction < 10^9 and unit <= 2^40: their product needs up to 70 bits, so it is formed in 128 */
    __extension__ typedef unsigned __int128 wide;
    uint64_t pow10 = 1, x = 0;
    for (unsigned i = 0; i < v.decimals; i++) pow10 *= 10;
    wide part = (wide)v.fraction * v.unit;
    if (part % pow10 != 0) return bytes ? "it is not a whole number of bytes" : "it is not a whole number";
    if (__builtin_mul_overflow(v.whole, v.unit, &x) || __builtin_add_overflow(x, (uint64_t)(part / pow10), &x))
        return "it does not fit in 64 bits";
    *out = x;
    return NULL;
}
