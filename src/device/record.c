/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/record.c — the recorder: the allocations and frees one device serves,
 * streamed into a gzip file as a dmm trace (`# dmm-trace v1`; the format: docs/trace-format.md; the
 * reader: tools/trace.c, which `dmm replay` uses).
 *
 * What it owns: while on, the file, two text buffers, and a table of the recorded blocks that are
 * live (address → trace id, address → bytes), so that a free names its allocation's id.
 *
 * The idea: an event is formatted and appended under `mu`, with its id and timestamp taken under the
 * same lock, so that the file's order is the order of ids and of time (the reader refuses ids that
 * do not increase). When the buffer passes FLUSH_AT, the thread that filled it takes `file_mu` (still
 * under mu, so buffers reach the file in order), swaps in the spare buffer, lets go of mu — other
 * threads keep recording into the fresh buffer — and compresses the full one with only file_mu held.
 * A free is recorded before the route frees the block, an allocation after the route served it: an
 * address can only be handed out again after its free was recorded, so a reused address never gets
 * its new id before the old one's free.
 *
 * The trade-off: while on, every malloc and free takes mu (a few hundred ns; recording is for
 * measuring a workload's pattern, not its speed); while off, the hooks cost one relaxed load.
 *
 * Failures never reach malloc or free: host memory that runs out stops the recording of events
 * (failure, why), a write that fails stops the writing (broken, write_failure); stop closes the file
 * and returns the first of them with a sentence that says the file is incomplete.
 *
 * Invariants (mu): active ⇒ gz, path, buf are set and used < BUF_CAP; |ids| = |bytes| = live recorded
 * blocks; live = Σ bytes of them; peak = max over the file of live; allocs − frees = |ids|;
 * next_id = allocs + 1; streams[0] = NULL and nstreams ≤ DMM_DEVICE_RECORD_STREAMS.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "context.h"
#include "record.h"

#define FLUSH_AT ((size_t)1 << 20)     /* a buffer is compressed once it holds this much text */
#define BUF_CAP (FLUSH_AT + 256)         /* room for the line that passes FLUSH_AT */

void dmm__device_record_init(dmm_device *c) {
    pthread_mutex_init(&c->rec.mu, NULL);
    pthread_mutex_init(&c->rec.file_mu, NULL);
}

/* The recording's first failure (mu held); later ones are dropped (the first is the cause). */
static void rec_fail(device_recorder *r, dmm_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rec_fail(device_recorder *r, dmm_status s, const char *fmt, ...) {
    if (r->failure != DMM_OK) return;
    r->failure = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

/* Writes n bytes to the file (file_mu held); a failure is kept and stops later writes. */
static void rec_write(device_recorder *r, const char *text, size_t n) {
    if (r->write_failure != DMM_OK || n == 0) return;
    if (gzwrite(r->gz, text, (unsigned)n) == (int)n) return;
    int zerr = Z_OK;
    const char *zmsg = gzerror(r->gz, &zerr);
    r->write_failure = DMM_ERR_DRIVER;
    snprintf(r->write_why, sizeof r->write_why, "writing '%s' failed: %s", r->path,
             zerr == Z_ERRNO ? strerror(errno) : (zmsg != NULL ? zmsg : "zlib failed"));
    dmm_atomic_store_relaxed(&r->broken, 1);
}

/* Appends a line (mu held); when the buffer passes FLUSH_AT, writes it out and lets go of mu. Returns
 * with mu released either way. */
static void rec_put_and_unlock(device_recorder *r, const char *line, int n) {
    if (n > 0 && (size_t)n < BUF_CAP - r->used) {
        memcpy(r->buf + r->used, line, (size_t)n);
        r->used += (size_t)n;
    }
    if (r->used < FLUSH_AT) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_lock(&r->file_mu); /* the previous buffer's write is over once we have it: spare is back */
    char *full = r->buf;
    size_t len = r->used;
    r->buf = r->spare;
    r->spare = NULL;
    r->used = 0;
    pthread_mutex_unlock(&r->mu);
    rec_write(r, full, len);
    r->spare = full;
    pthread_mutex_unlock(&r->file_mu);
}

static uint64_t rec_time_us(device_recorder *r) {
    uint64_t now = dmm_device_clock_ns();
    if (!r->started) {
        r->started = true;
        r->t0_ns = now;
    }
    return now > r->t0_ns ? (now - r->t0_ns) / 1000 : 0;
}

static uint32_t rec_stream_id(device_recorder *r, dmm_stream s) {
    if (s == NULL) {
        r->default_used = true;
        return 0;
    }
    for (uint32_t k = 1; k < r->nstreams; k++)
        if (r->streams[k] == s) return k;
    if (r->nstreams < DMM_DEVICE_RECORD_STREAMS) {
        r->streams[r->nstreams] = s;
        return r->nstreams++;
    }
    r->folded++;
    return DMM_DEVICE_RECORD_STREAMS - 1;
}

/* Takes mu when the recording is on and healthy; false (nothing held) otherwise. */
static bool rec_enter(device_recorder *r) {
    if (!dmm_atomic_load_relaxed(&r->active)) return false;
    pthread_mutex_lock(&r->mu);
    if (r->active && r->failure == DMM_OK && !dmm_atomic_load_relaxed(&r->broken)) return true;
    pthread_mutex_unlock(&r->mu);
    return false;
}

void dmm__device_record_alloc(dmm_device *c, const void *ptr, uint64_t bytes, dmm_stream stream) {
    device_recorder *r = &c->rec;
    if (!rec_enter(r)) return;
    uint64_t key = (uint64_t)(uintptr_t)ptr;
    if (!dmm__u64map_reserve(&r->ids, 1) || !dmm__u64map_reserve(&r->bytes, 1)) {
        rec_fail(r, DMM_ERR_OUT_OF_MEMORY,
                 "out of host memory for the table of live blocks after %llu allocations; events after that "
                 "were not recorded",
                 (unsigned long long)r->allocs);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    uint64_t id = r->next_id++;
    dmm__u64map_insert_reserved(&r->ids, key, id);
    dmm__u64map_insert_reserved(&r->bytes, key, bytes);
    r->allocs++;
    r->live += bytes;
    if (r->live > r->peak) r->peak = r->live;
    char line[96];
    int n = snprintf(line, sizeof line, "%llu a %llu %llu %u\n", (unsigned long long)rec_time_us(r),
                     (unsigned long long)id, (unsigned long long)bytes, rec_stream_id(r, stream));
    rec_put_and_unlock(r, line, n);
}

bool dmm__device_record_free(dmm_device *c, const void *ptr) {
    device_recorder *r = &c->rec;
    if (!rec_enter(r)) return false;
    uint64_t key = (uint64_t)(uintptr_t)ptr, id = 0, bytes = 0;
    if (!dmm__u64map_remove(&r->ids, key, &id)) { /* allocated before the recording began */
        r->untracked_frees++;
        pthread_mutex_unlock(&r->mu);
        return false;
    }
    (void)dmm__u64map_remove(&r->bytes, key, &bytes);
    r->frees++;
    r->live -= bytes;
    char line[64];
    int n = snprintf(line, sizeof line, "%llu f %llu\n", (unsigned long long)rec_time_us(r), (unsigned long long)id);
    rec_put_and_unlock(r, line, n);
    return true;
}

/* Frees what the recording holds and zeroes its state (the locks stay; both held, or the context going). */
static void rec_clear(device_recorder *r) {
    free(r->buf);
    free(r->spare);
    free(r->path);
    dmm__u64map_fini(&r->ids);
    dmm__u64map_fini(&r->bytes);
    dmm_atomic_store_relaxed(&r->active, 0);
    dmm_atomic_store_relaxed(&r->broken, 0);
    r->gz = NULL;
    r->path = r->buf = r->spare = NULL;
    r->used = 0;
    r->next_id = r->t0_ns = r->live = r->peak = 0;
    r->allocs = r->frees = r->untracked_frees = r->folded = 0;
    r->started = r->default_used = false;
    memset(r->streams, 0, sizeof r->streams);
    r->nstreams = 0;
    r->failure = r->write_failure = DMM_OK;
    r->why[0] = r->write_why[0] = '\0';
}

dmm_status dmm_device_record_start(dmm_device *c, const char *path, const char *workload) {
    if (c == NULL) return dmm__device_null("dmm_device_record_start", "a device");
    device_recorder *r = &c->rec;
    if (path == NULL || path[0] == '\0')
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: record: the trace's path is empty; pass the file to write (e.g. "
                             "'run.trace.gz')");
    if (workload != NULL && (strlen(workload) > 200 || strpbrk(workload, "\r\n") != NULL))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: record: the workload name must be one line of at most 200 characters "
                             "(it goes into the header line '# workload: ...'); nothing was started");
    pthread_mutex_lock(&r->mu);
    if (r->active) {
        pthread_mutex_unlock(&r->mu);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm device: record: device %d is already recording to '%s'; stop that recording "
                             "first (one trace per device at a time); nothing changed",
                             (int)c->dev.index, r->path);
    }
    r->buf = malloc(BUF_CAP); /* before the file: a failure here leaves no file behind */
    r->spare = malloc(BUF_CAP);
    r->path = strdup(path);
    if (r->buf == NULL || r->spare == NULL || r->path == NULL) {
        rec_clear(r);
        pthread_mutex_unlock(&r->mu);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: record: out of host memory for the trace's "
                                                    "buffers (2 MiB); nothing was started");
    }
    errno = 0;
    gzFile gz = gzopen(path, "wb");
    if (gz == NULL) {
        int e = errno;
        rec_clear(r);
        pthread_mutex_unlock(&r->mu);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: record: cannot open '%s' for writing: %s; give a file in a folder that "
                             "exists and is writable; nothing was started",
                             path, e != 0 ? strerror(e) : "zlib could not open it");
    }
    r->gz = gz;
    r->next_id = 1;
    r->nstreams = 1; /* id 0: the default stream */
    int n = snprintf(r->buf, BUF_CAP,
                     "# dmm-trace v1\n# workload: %s\n# recorder: dmm_device_record_start, device %d\n"
                     "# sizes: the allocator's block sizes (requests rounded up to %llu bytes)\n",
                     workload != NULL && workload[0] != '\0' ? workload : "recorded", (int)c->dev.index,
                     (unsigned long long)c->block_align);
    r->used = n > 0 ? (size_t)n : 0;
    dmm_atomic_store_relaxed(&r->active, 1);
    pthread_mutex_unlock(&r->mu);
    return DMM_OK;
}

static void fill_stats(const device_recorder *r, dmm_device_record_stats *out) {
    if (out == NULL || out->size < sizeof(uint32_t)) return;
    dmm_device_record_stats k;
    memset(&k, 0, sizeof k);
    k.size = out->size < sizeof k ? out->size : (uint32_t)sizeof k;
    k.allocations = r->allocs;
    k.frees = r->frees;
    k.untracked_frees = r->untracked_frees;
    k.live_bytes = r->live;
    k.peak_live_bytes = r->peak;
    k.streams = (r->nstreams > 0 ? r->nstreams - 1 : 0) + (r->default_used ? 1 : 0);
    k.streams_folded = r->folded;
    memcpy(out, &k, k.size);
}

dmm_status dmm_device_record_stop(dmm_device *c, dmm_device_record_stats *out) {
    if (c == NULL) return dmm__device_null("dmm_device_record_stop", "a device");
    device_recorder *r = &c->rec;
    pthread_mutex_lock(&r->mu);
    if (!r->active) {
        pthread_mutex_unlock(&r->mu);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: record stop: device %d is not recording (start a recording first)",
                             (int)c->dev.index);
    }
    dmm_atomic_store_relaxed(&r->active, 0);
    pthread_mutex_lock(&r->file_mu); /* a buffer still being compressed is written first */
    char tail[512];
    int n = snprintf(tail, sizeof tail,
                     "# recorded_allocations: %llu\n# recorded_frees: %llu\n# untracked_frees: %llu\n"
                     "# peak_live_bytes: %llu\n# streams_folded: %llu\n",
                     (unsigned long long)r->allocs, (unsigned long long)r->frees,
                     (unsigned long long)r->untracked_frees, (unsigned long long)r->peak,
                     (unsigned long long)r->folded);
    rec_write(r, r->buf, r->used);
    if (n > 0) rec_write(r, tail, (size_t)n); /* the counts of what the file holds */
    int zc = gzclose(r->gz);
    r->gz = NULL;
    if (zc != Z_OK && r->write_failure == DMM_OK) {
        r->write_failure = DMM_ERR_DRIVER;
        snprintf(r->write_why, sizeof r->write_why, "closing '%s' failed (zlib error %d: %s)", r->path, zc,
                 zc == Z_ERRNO ? strerror(errno) : "the data did not reach the file");
    }
    fill_stats(r, out);
    dmm_status s = DMM_OK;
    if (r->failure != DMM_OK)
        s = dmm_error_set(r->failure,
                          "dmm device: record: the trace '%s' is incomplete: %s; the %llu allocations and %llu frees "
                          "before that are in it (a valid trace, shorter than the run)",
                          r->path, r->why, (unsigned long long)r->allocs, (unsigned long long)r->frees);
    else if (r->write_failure != DMM_OK)
        s = dmm_error_set(r->write_failure,
                          "dmm device: record: the trace is incomplete: %s; free space or choose another file "
                          "and record again",
                          r->write_why);
    rec_clear(r);
    pthread_mutex_unlock(&r->file_mu);
    pthread_mutex_unlock(&r->mu);
    return s;
}

void dmm__device_record_fini(dmm_device *c) {
    if (dmm__device_recording(c)) {
        (void)dmm_device_record_stop(c, NULL);
        dmm_clear_error();
    }
    pthread_mutex_destroy(&c->rec.mu);
    pthread_mutex_destroy(&c->rec.file_mu);
}
