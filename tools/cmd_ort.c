/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_ort.c — `dmm ort`: run an ONNX model on dmm's allocator and show both sides' stats.
 *
 *   dmm ort MODEL.onnx [--limit BYTES] [--runs N] [--batch N] [--max-input-bytes SIZE]
 *       reads the model whole, within --max-input-bytes (default 2 GiB, protobuf's own ceiling for one
 *       message: no single-file ONNX model is larger; input_file.h refuses a larger file unread and an
 *       endless input where it passes the bound), then opens ONNX Runtime ($DMM_ORT_LIB, else the .ort/
 *       of the tree the tool was built from, where scripts/ort.sh put one, else libonnxruntime.so.1), registers a dmm allocator (host driver, one governor whose host limit is
 *       --limit) on the environment, creates the session with
 *       session.use_env_allocators = 1, runs it N times (default 4) on deterministic pseudo-random
 *       inputs, and prints dmm's stats beside the ones ONNX Runtime reads (AllocatorGetStats).
 *       The model's inputs must be float tensors; a symbolic dimension takes --batch (default 1).
 *   dmm ort --write-model FILE [--batch N]
 *       writes dmm's own dense test model (tools/onnx_model.h: 256 → 512 → 512, MatMul-Add-Relu × 2;
 *       --batch 0, the default here, makes the batch symbolic), so there is a model to run; FILE is
 *       written as every output of the tool is (output_file.h: a temporary renamed into place, or a
 *       device or FIFO in place).
 *
 * Exit 0 done; 1 ONNX Runtime or dmm failed (the sentence says which and why: a Run over --limit fails
 * here, with dmm's sentence); 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "dmm_ort.h"
#include "commands.h"
#include "input_file.h"
#include "onnx_model.h"

/* The largest model read by default: protobuf's ceiling for one message (2 GiB); a bigger ONNX model
 * keeps its weights as external data, which this command does not read. */
#define DMM_ORT_MODEL_MAX_BYTES ((uint64_t)2 << 30)

void dmm_usage_ort(FILE *f) {
    fprintf(f, "usage: dmm ort MODEL.onnx [--limit BYTES] [--runs N] [--batch N] [--max-input-bytes SIZE]\n"
               "       dmm ort --write-model FILE [--batch N]\n\n"
               "Runs an ONNX model with ONNX Runtime ($DMM_ORT_LIB, else the .ort/ of the tree dmm was built from,\n"
               "which scripts/ort.sh fills, else libonnxruntime.so.1) on dmm's allocator (session.use_env_allocators=1), on pseudo-random\n"
               "float inputs, and prints dmm's stats beside ONNX Runtime's view of them (GetStats).\n");
    dmm_cli_print_flags(f, "dmm ort");
}

static int write_model(const char *path, uint64_t batch) {
    dmm_onnx_model_desc d = {256, 512, 2, (uint32_t)batch, 1};
    uint8_t *bytes = NULL;
    size_t len = 0;
    char err[1024];
    if (dmm_onnx_model_write(&d, &bytes, &len, err, sizeof err) != 0) {
        fprintf(stderr, "dmm ort: %s\n", err);
        return 1;
    }
    dmm_output_file out;
    if (dmm_output_open("--write-model", path, NULL, 0, &out, err, sizeof err) != 0) {
        fprintf(stderr, "dmm ort: %s\n", err);
        free(bytes);
        return 2;
    }
    bool ok = fwrite(bytes, 1, len, out.f) == len;
    int e = errno;
    free(bytes);
    if (dmm_output_close(&out, ok, err, sizeof err) != 0 || !ok) {
        if (ok) fprintf(stderr, "dmm ort: %s\n", err);
        else fprintf(stderr, "dmm ort: writing the model to %s failed (%s); a regular file is as it was\n", path,
                     strerror(e));
        return 1;
    }
    printf("dmm ort: wrote %s (%zu bytes): X [%s, 256] -> MatMul-Add-Relu x 2 -> Y [%s, 512]\n", path, len,
           batch ? "fixed" : "batch", batch ? "fixed" : "batch");
    return 0;
}

/* ONNX Runtime's status as a printed sentence; returns 1 (the exit code) when st is an error. */
static int ort_failed(dmm_ort_runtime *rt, struct OrtStatus *st, const char *what) {
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    if (st == NULL) return 0;
    fprintf(stderr, "dmm ort: %s failed: %s\n", what, api->GetErrorMessage(st));
    api->ReleaseStatus(st);
    return 1;
}

static int run_model(const char *path, uint64_t limit, uint64_t runs, uint64_t batch, uint64_t max_model) {
    size_t len = 0;
    char *model = NULL, err[1024];
    dmm_input_bound bound = {max_model, "an ONNX model", "--max-input-bytes"};
    if (dmm_input_read(path, &bound, &model, &len, err, sizeof err) != 0) {
        fprintf(stderr, "dmm ort: model %s Give the path of an .onnx file (dmm ort --write-model FILE writes one).\n",
                err);
        return 2;
    }
    /* $DMM_ORT_LIB, else the .ort/ of the tree this tool was built from (scripts/ort.sh), where it is,
     * else the loader's own default (libonnxruntime.so.1 on the library path) */
    const char *lib = dmm__option_env(DMM_OPTION_ORT_LIB);
#ifdef DMM_ORT_LIB_DEFAULT
    if (lib == NULL && access(DMM_ORT_LIB_DEFAULT, R_OK) == 0) lib = DMM_ORT_LIB_DEFAULT;
#endif
    dmm_ort_runtime *rt = NULL;
    if (dmm_ort_runtime_open(lib, &rt) != DMM_OK) {
        fprintf(stderr, "%s\n", dmm_last_error());
        free(model);
        return 1;
    }
    const dmm_ort_calls *api = dmm_ort_runtime_calls(rt);
    int rc = 1;
    dmm_driver *host = NULL;
    dmm_governor *g = NULL;
    dmm_ort_allocator *a = NULL;
    struct OrtEnv *env = NULL;
    struct OrtSessionOptions *so = NULL;
    struct OrtSession *s = NULL;
    struct OrtAllocator *def = NULL;
    dmm_host_driver_config hc = {sizeof hc, 64 << 10};
    dmm_device_id hostdev = {DMM_TIER_HOST, 0};
    if (dmm_host_driver_create(&hc, &host) != DMM_OK || dmm_governor_create(NULL, &g) != DMM_OK ||
        (limit && dmm_governor_set_limit(g, hostdev, DMM_AXIS_OWNED, limit) != DMM_OK)) {
        fprintf(stderr, "dmm ort: %s\n", dmm_last_error());
        goto out;
    }
    dmm_ort_config c = {.size = sizeof c, .name = "dmm-ort"};
    if (dmm_ort_allocator_create(rt, host, g, &c, &a) != DMM_OK) {
        fprintf(stderr, "%s\n", dmm_last_error());
        goto out;
    }
    if (ort_failed(rt, api->CreateEnv(DMM_ORT_LOG_FATAL, "dmm", &env), "CreateEnv")) goto out;
    if (dmm_ort_allocator_register(a, env) != DMM_OK) {
        fprintf(stderr, "%s\n", dmm_last_error());
        goto out;
    }
    if (ort_failed(rt, api->CreateSessionOptions(&so), "CreateSessionOptions")) goto out;
    if (dmm_ort_session_options_use_dmm(rt, so) != DMM_OK) {
        fprintf(stderr, "%s\n", dmm_last_error());
        goto out;
    }
    if (ort_failed(rt, api->CreateSessionFromArray(env, model, len, so, &s), "creating the session")) goto out;
    if (ort_failed(rt, api->GetAllocatorWithDefaultOptions(&def), "GetAllocatorWithDefaultOptions")) goto out;
    size_t nin = 0, nout = 0;
    if (ort_failed(rt, api->SessionGetInputCount(s, &nin), "SessionGetInputCount") ||
        ort_failed(rt, api->SessionGetOutputCount(s, &nout), "SessionGetOutputCount"))
        goto out;
    if (nin == 0 || nin > 16 || nout == 0 || nout > 16) {
        fprintf(stderr, "dmm ort: the model has %zu inputs and %zu outputs; dmm ort runs models with 1..16 of each\n",
                nin, nout);
        goto out;
    }
    char *in_names[16] = {0}, *out_names[16] = {0};
    struct OrtValue *ins[16] = {0};
    float *bufs[16] = {0};
    struct OrtMemoryInfo *cpu = NULL;
    int bad = ort_failed(rt, api->CreateCpuMemoryInfo(DMM_ORT_DEVICE_ALLOCATOR, DMM_ORT_MEM_DEFAULT, &cpu), "memory info");
    for (size_t i = 0; !bad && i < nin; i++) {
        struct OrtTypeInfo *ti = NULL;
        const struct OrtTensorTypeAndShapeInfo *tsi = NULL;
        int et = 0;
        size_t rank = 0;
        int64_t dims[8];
        bad = ort_failed(rt, api->SessionGetInputName(s, i, def, &in_names[i]), "SessionGetInputName") ||
              ort_failed(rt, api->SessionGetInputTypeInfo(s, i, &ti), "SessionGetInputTypeInfo") ||
              ort_failed(rt, api->CastTypeInfoToTensorInfo(ti, &tsi), "CastTypeInfoToTensorInfo");
        if (!bad && tsi == NULL) {
            fprintf(stderr, "dmm ort: input %zu is not a tensor; dmm ort feeds float tensors only\n", i);
            bad = 1;
        }
        if (!bad) bad = ort_failed(rt, api->GetTensorElementType(tsi, &et), "GetTensorElementType") ||
                        ort_failed(rt, api->GetDimensionsCount(tsi, &rank), "GetDimensionsCount");
        if (!bad && (et != DMM_ORT_TENSOR_FLOAT || rank > 8)) {
            fprintf(stderr, "dmm ort: input '%s' is of element type %d and rank %zu; dmm ort feeds float tensors of "
                            "rank 0..8 only\n", in_names[i], et, rank);
            bad = 1;
        }
        if (!bad) bad = ort_failed(rt, api->GetDimensions(tsi, dims, rank), "GetDimensions");
        size_t count = 1;
        for (size_t k = 0; !bad && k < rank; k++) {
            if (dims[k] <= 0) dims[k] = (int64_t)batch;
            count *= (size_t)dims[k];
        }
        if (!bad && count > ((size_t)1 << 28)) {
            fprintf(stderr, "dmm ort: input '%s' has %zu elements; dmm ort feeds at most 2^28\n", in_names[i], count);
            bad = 1;
        }
        if (!bad) {
            bufs[i] = malloc(count * sizeof(float) + 1);
            if (bufs[i] == NULL) bad = 1;
            for (size_t k = 0; !bad && k < count; k++) bufs[i][k] = dmm_onnx_model_weight(42, (uint32_t)i, k) * 8.0f;
            if (!bad)
                bad = ort_failed(rt, api->CreateTensorWithDataAsOrtValue(cpu, bufs[i], count * sizeof(float), dims, rank,
                                                                        DMM_ORT_TENSOR_FLOAT, &ins[i]),
                                 "creating an input");
        }
        if (ti != NULL) api->ReleaseTypeInfo(ti);
    }
    for (size_t i = 0; !bad && i < nout; i++)
        bad = ort_failed(rt, api->SessionGetOutputName(s, i, def, &out_names[i]), "SessionGetOutputName");
    uint64_t done = 0;
    for (; !bad && done < runs; done++) {
        struct OrtValue *outs[16] = {0};
        struct OrtStatus *st = api->Run(s, NULL, (const char *const *)in_names, (const struct OrtValue *const *)ins, nin,
                                       (const char *const *)out_names, nout, outs);
        for (size_t i = 0; i < nout; i++)
            if (outs[i] != NULL) api->ReleaseValue(outs[i]);
        if (st != NULL) {
            char what[64];
            snprintf(what, sizeof what, "Run %llu", (unsigned long long)done + 1);
            bad = ort_failed(rt, st, what);
        }
    }
    if (!bad) {
        dmm_ort_stats ds = {.size = sizeof ds};
        struct OrtKeyValuePairs *kv = NULL;
        bad = dmm_ort_allocator_stats(a, &ds) != DMM_OK ||
              ort_failed(rt, api->AllocatorGetStats(dmm_ort_allocator_ort(a), &kv), "AllocatorGetStats");
        if (!bad) {
            char b1[32], b2[32], b3[32];
            printf("dmm ort: %s, ONNX Runtime %s (API %u), %llu run(s)\n", path, dmm_ort_runtime_version(rt),
                   dmm_ort_runtime_api_version(rt), (unsigned long long)done);
            printf("%-34s %-22s %s\n", "dmm", "", "ONNX Runtime (GetStats)");
            printf("%-34s %-22llu NumReserves %s\n", "reserves (weights pool mallocs)", (unsigned long long)ds.reserves,
                   api->GetKeyValue(kv, "NumReserves"));
            printf("%-34s %-22llu NumAllocs %s\n", "allocs + reserves", (unsigned long long)(ds.allocs + ds.reserves),
                   api->GetKeyValue(kv, "NumAllocs"));
            printf("%-34s %-22s InUse %s\n", "bytes in use", dmm__fmt_bytes(ds.in_use, b1, sizeof b1),
                   api->GetKeyValue(kv, "InUse"));
            printf("%-34s %-22s MaxInUse %s\n", "peak in use (sum of pool peaks)",
                   dmm__fmt_bytes(ds.max_in_use, b2, sizeof b2), api->GetKeyValue(kv, "MaxInUse"));
            printf("%-34s %-22s MaxAllocSize %s\n", "largest request", dmm__fmt_bytes(ds.max_alloc, b3, sizeof b3),
                   api->GetKeyValue(kv, "MaxAllocSize"));
            const char *lim = api->GetKeyValue(kv, "Limit");
            printf("%-34s %-22s Limit %s\n", "governor host limit", limit ? "set" : "none", lim ? lim : "(none)");
            printf("%-34s weights %s, runs %s\n", "committed",
                   dmm__fmt_bytes((uint64_t)ds.weights.committed_bytes.current, b1, sizeof b1),
                   dmm__fmt_bytes((uint64_t)ds.run.committed_bytes.current, b2, sizeof b2));
            printf("%-34s %llu refused, %llu bad frees\n", "refusals", (unsigned long long)ds.refusals,
                   (unsigned long long)ds.bad_frees);
            api->ReleaseKeyValuePairs(kv);
            rc = 0;
        }
    }
    for (size_t i = 0; i < 16; i++) {
        if (ins[i] != NULL) api->ReleaseValue(ins[i]);
        free(bufs[i]);
        if (in_names[i] != NULL) (void)api->AllocatorFree(def, in_names[i]);
        if (out_names[i] != NULL) (void)api->AllocatorFree(def, out_names[i]);
    }
    if (cpu != NULL) api->ReleaseMemoryInfo(cpu);
out:
    if (s != NULL) api->ReleaseSession(s);
    if (so != NULL) api->ReleaseSessionOptions(so);
    if (env != NULL) {
        if (a != NULL) (void)dmm_ort_allocator_unregister(a, env);
        api->ReleaseEnv(env);
    }
    if (a != NULL && dmm_ort_allocator_destroy(a) != DMM_OK) fprintf(stderr, "%s\n", dmm_last_error());
    if (g != NULL) (void)dmm_governor_destroy(g);
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
    free(model);
    return rc;
}

int dmm_cmd_ort(int argc, char **argv) {
    struct option opts[10];
    dmm_cli_longs("dmm ort", opts, sizeof opts / sizeof opts[0]);
    uint64_t limit = 0, runs = 4, batch = 1, max_model = DMM_ORT_MODEL_MAX_BYTES;
    bool batch_given = false;
    const char *write = NULL;
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        dmm_option_id id = (dmm_option_id)(c - DMM_CLI_FLAG(0));
        switch (c) {
        case DMM_CLI_FLAG(DMM_OPTION_ORT_LIMIT): if (dmm_cli_flag_u64("ort", id, optarg, &limit)) return 2; break;
        case DMM_CLI_FLAG(DMM_OPTION_ORT_RUNS): if (dmm_cli_flag_u64("ort", id, optarg, &runs)) return 2; break;
        case DMM_CLI_FLAG(DMM_OPTION_ORT_BATCH):
            if (dmm_cli_flag_u64("ort", id, optarg, &batch)) return 2;
            batch_given = true;
            break;
        case DMM_CLI_FLAG(DMM_OPTION_ORT_WRITE_MODEL): write = optarg; break;
        case DMM_CLI_FLAG(DMM_OPTION_ORT_MAX_INPUT_BYTES):
            if (dmm_cli_flag_u64("ort", id, optarg, &max_model)) return 2;
            break;
        case 'h': dmm_usage_ort(stdout); return 0;
        default: return dmm_cli_bad_option("ort", c, argv);
        }
    }
    if (write != NULL) {
        if (optind != argc) {
            fprintf(stderr, "dmm ort: --write-model takes no model to run; drop '%s'\n", argv[optind]);
            return 2;
        }
        return write_model(write, batch_given ? batch : 0);
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "dmm ort: give exactly one MODEL.onnx (or --write-model FILE); see dmm ort --help\n");
        return 2;
    }
    if (batch == 0) {
        fprintf(stderr, "dmm ort: --batch 0 is for --write-model (a symbolic batch); to run, give 1..65536\n");
        return 2;
    }
    return run_model(argv[optind], limit, runs, batch, max_model);
}
