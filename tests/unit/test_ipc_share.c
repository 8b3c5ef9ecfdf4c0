/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_ipc_share.c — memory shared between two real processes over the host driver
 * (dmm/share.h, issue 14 acceptance 1 and 2).
 *
 * What it proves: a 64 MiB region exported by this process and imported by another (this binary,
 * exec'ed as "--importer MODE FD", the export passed over a SOCK_SEQPACKET socketpair with
 * SCM_RIGHTS) reads the same bytes there; the exporter's census shows the memory once (owned here,
 * 0 owned and 64 MiB imported in the importer); a write through a read-only import kills the writer
 * with SIGSEGV/SIGBUS (checked here, by the parent); a read-write import's writes are seen by the
 * exporter; the exporter may release first (its outcome says the bytes were exported) and the
 * importer still reads the right bytes, then releases, and both censuses are zero and no descriptor
 * is left (/proc/self/fd). In one process: a mechanism or driver that cannot export answers
 * DMM_ERR_UNSUPPORTED with a sentence; every malformed description and every refused export
 * changes nothing; failing each driver call of an import in turn leaves nothing behind, and a failed
 * export of any chunk marks nothing and leaks no descriptor; an exported handle never reaches the
 * handle cache.
 */
#include "arena_kit.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGION (64 * MIB)

static size_t fd_count(void) {
    DIR *d = opendir("/proc/self/fd");
    size_t n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    if (d != NULL) closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static uint64_t pattern(uint64_t i, uint64_t seed) { return (i * 0x9e3779b97f4a7c15ull) ^ seed; }

static void fill(void *p, size_t bytes, uint64_t seed) {
    uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++) w[i] = pattern(i, seed);
}

static bool same(const void *p, size_t bytes, uint64_t seed) {
    const uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++)
        if (w[i] != pattern(i, seed)) return false;
    return true;
}

/* ---- the importer: this binary exec'ed with "--importer MODE FD"; its exit code is the verdict ---- */

#define DIE(code, ...)                                                                              \
    do {                                                                                            \
        fprintf(stderr, "importer: " __VA_ARGS__);                                                  \
        fprintf(stderr, " (last error: %s)\n", dmm_last_error());                                   \
        _exit(code);                                                                                \
    } while (0)

static int importer(const char *mode, int sock) {
    size_t fds0 = fd_count() - 1; /* the socket goes at the end */
    dmm_driver *d = NULL;
    dmm_mechanism *m = NULL;
    kit_tally tally = {0};
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(1 * GIB, 0, 0, &acct);
    if (dmm_host_driver_create(NULL, &d) != DMM_OK || dmm_arena_create(d, &c, &m) != DMM_OK) DIE(10, "no arena");
    dmm_export ex;
    if (dmm_ipc_recv_export(sock, &ex) != DMM_OK) DIE(11, "no export");
    bool rw = strcmp(mode, "write-rw") == 0;
    if (strcmp(mode, "rw-of-ro") == 0) {
        dmm_allocation bad;
        if (dmm_import(m, &ex, DMM_ACCESS_READ_WRITE, &bad) != DMM_ERR_INVALID_ARGUMENT) DIE(12, "rw of ro accepted");
        if (kit_census(d).handles != 0 || kit_stats(m).allocations.current != 0) DIE(13, "a refusal left something");
        dmm_export_close(&ex);
        dmm_mechanism_destroy(m);
        dmm_driver_destroy(d);
        close(sock);
        return fd_count() == fds0 ? 0 : 14;
    }
    dmm_allocation a;
    if (dmm_import(m, &ex, rw ? DMM_ACCESS_READ_WRITE : DMM_ACCESS_READ, &a) != DMM_OK) DIE(15, "import failed");
    dmm_export_close(&ex); /* the driver keeps its own references */
    dmm_stats s = kit_stats(m);
    dmm_driver_census k = kit_census(d);
    if (a.bytes != REGION || s.owned_bytes.current != 0 || s.mapped_bytes.current != (int64_t)REGION ||
        s.imported_bytes.current != (int64_t)REGION || k.imported_bytes != REGION || tally.owned != 0 ||
        tally.mapped != (int64_t)REGION)
        DIE(16, "accounting: owned %lld mapped %lld imported %lld, tally owned %lld mapped %lld",
            (long long)s.owned_bytes.current, (long long)s.mapped_bytes.current, (long long)s.imported_bytes.current,
            (long long)tally.owned, (long long)tally.mapped);
    if (dmm_arena_check(m) != DMM_OK) DIE(17, "arena check");
    if (strcmp(mode, "lifetime") == 0) {
        char b = '1';
        if (write(sock, &b, 1) != 1 || read(sock, &b, 1) != 1 || b != '2') DIE(18, "no go from the exporter");
    }
    if (!same(a.ptr, REGION, 42)) DIE(19, "the bytes differ");
    if (strcmp(mode, "write-ro") == 0) {
        struct sigaction dfl; /* the kernel's default action (a sanitizer's handler would exit instead) */
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &dfl, NULL);
        sigaction(SIGBUS, &dfl, NULL);
        ((volatile uint64_t *)a.ptr)[100] = 7; /* must fault: the parent expects SIGSEGV / SIGBUS */
        DIE(20, "a write through a read-only import survived");
    }
    if (rw) {
        fill(a.ptr, REGION, 99);
        char b = 'w';
        if (write(sock, &b, 1) != 1 || read(sock, &b, 1) != 1) DIE(21, "no ack");
    }
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    if (o.state != DMM_RELEASE_COMPLETE || o.unmapped_bytes != REGION) DIE(22, "release: %u", o.state);
    k = kit_census(d);
    if (k.handles || k.mapped_bytes || kit_stats(m).imported_bytes.current || tally.mapped || tally.owned)
        DIE(23, "something is left after the release");
    if (dmm_mechanism_destroy(m) != DMM_OK) DIE(24, "destroy");
    dmm_driver_destroy(d);
    close(sock);
    if (fd_count() != fds0) DIE(25, "descriptors leaked: %zu before, %zu after", fds0, fd_count());
    return 0;
}

/* ---- the exporter's side ---- */

typedef struct fx {
    dmm_driver *host;
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
} fx;

static fx *fx_new(uint64_t cache_limit) {
    fx *f = calloc(1, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    f->acct = kit_accounting(&f->tally);
    dmm_arena_config c = kit_config(1 * GIB, 0, cache_limit, &f->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(f->host, &c, &f->m));
    return f;
}

static void fx_end(fx *f) {
    KIT_CHECK(f->m);
    DMM_OK_OR_FAIL(dmm_mechanism_drain_cache(f->m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->m));
    dmm_test_census_zero(f->host);
    kit_tally_zero(&f->tally);
    dmm_driver_destroy(f->host);
    free(f);
}

/* Starts the importer in MODE on a new process; *sock = our end. */
static pid_t spawn(const char *mode, int *sock) {
    const char *const args[] = {"--importer", mode, NULL};
    return dmm_test_spawn_self("test_ipc_share", args, sock);
}

static int wait_for(pid_t pid) {
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static dmm_allocation region(fx *f, dmm_access access, dmm_export *ex) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, REGION, 2 * MIB, &a));
    fill(a.ptr, REGION, 42);
    DMM_OK_OR_FAIL(dmm_export_range(f->m, &a, (dmm_range){0, REGION}, access, ex));
    assert_int_equal(ex->nchunks, 1);
    assert_int_equal(ex->bytes, REGION);
    return a;
}

/* One exchange with an importer: the fixture, a region filled with seed 42 and exported with `access`,
 * the importer started in `mode` and sent the export (ours closed: the driver keeps its references). */
typedef struct session {
    fx *f;
    size_t fds0; /* this process's descriptors before the region */
    dmm_allocation a;
    int sock;
    pid_t pid;
} session;

static session session_start(uint64_t cache_limit, dmm_access access, const char *mode) {
    session x;
    x.f = fx_new(cache_limit);
    x.fds0 = fd_count();
    dmm_export ex;
    x.a = region(x.f, access, &ex);
    x.pid = spawn(mode, &x.sock);
    DMM_OK_OR_FAIL(dmm_ipc_send_export(x.sock, &ex));
    dmm_export_close(&ex);
    return x;
}

/* The region released (unless `released`), our socket closed: no descriptor is left and the fixture ends
 * at zero. */
static void session_end(session *x, bool released) {
    if (!released) assert_int_equal(dmm_mechanism_release(x->f->m, &x->a).state, DMM_RELEASE_COMPLETE);
    close(x->sock);
    assert_int_equal(fd_count(), x->fds0);
    fx_end(x->f);
}

static void test_another_process_reads_the_same_bytes_and_the_memory_is_counted_once(void **state) {
    (void)state;
    session x = session_start(0, DMM_ACCESS_READ, "read");
    int st = wait_for(x.pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the exporter's census shows the memory once: one handle of 64 MiB, owned and charged here */
    dmm_driver_census k = kit_census(x.f->host);
    assert_int_equal(k.handles, 1);
    assert_int_equal(k.handle_bytes, REGION);
    assert_int_equal(k.imported_bytes, 0);
    assert_int_equal(kit_stats(x.f->m).owned_bytes.current, REGION);
    assert_int_equal(x.f->tally.owned, REGION);
    assert_int_equal(kit_stats(x.f->m).exported_handles, 1);
    dmm_release_outcome o = dmm_mechanism_release(x.f->m, &x.a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.exported_bytes, REGION); /* says so: importers may have held it */
    session_end(&x, true);
}

static void test_a_write_through_a_read_only_import_kills_the_writer(void **state) {
    (void)state;
    session x = session_start(0, DMM_ACCESS_READ, "write-ro");
    int st = wait_for(x.pid);
    if (!WIFSIGNALED(st)) fail_msg("the writer was not killed: exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_true(WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
    assert_true(same(x.a.ptr, REGION, 42)); /* and nothing was written */
    session_end(&x, false);
}

static void test_a_read_write_import_writes_what_the_exporter_reads(void **state) {
    (void)state;
    session x = session_start(0, DMM_ACCESS_READ_WRITE, "write-rw");
    char b = 0;
    assert_int_equal(read(x.sock, &b, 1), 1);
    assert_int_equal(b, 'w');
    assert_true(same(x.a.ptr, REGION, 99)); /* one physical copy: the importer's bytes are ours */
    assert_int_equal(write(x.sock, &b, 1), 1);
    int st = wait_for(x.pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    session_end(&x, false);
}

static void test_a_read_only_export_cannot_be_imported_read_write(void **state) {
    (void)state;
    session x = session_start(0, DMM_ACCESS_READ, "rw-of-ro");
    int st = wait_for(x.pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    session_end(&x, false);
}

static void test_the_importer_reads_on_after_the_exporter_released(void **state) {
    (void)state;
    /* a cache that could take the handle: an exported one must not go there */
    session x = session_start(64 * MIB, DMM_ACCESS_READ, "lifetime");
    char b = 0;
    assert_int_equal(read(x.sock, &b, 1), 1); /* imported */
    dmm_release_outcome o = dmm_mechanism_release(x.f->m, &x.a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.exported_bytes, REGION);
    assert_int_equal(kit_stats(x.f->m).cached_bytes.current, 0);
    assert_int_equal(kit_stats(x.f->m).exported_released_bytes, REGION);
    dmm_driver_census k = kit_census(x.f->host); /* our reference is gone: the importer's keeps the memory */
    assert_int_equal(k.handles, 0);
    assert_int_equal(k.mapped_bytes, 0);
    kit_tally_zero(&x.f->tally);
    b = '2';
    assert_int_equal(write(x.sock, &b, 1), 1);
    int st = wait_for(x.pid); /* it reads the right bytes, releases, and its census and descriptors go to zero */
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    session_end(&x, true);
}

/* ---- in one process ---- */

static void test_what_cannot_export_says_unsupported(void **state) {
    (void)state;
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *eager;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(eager, 4096, 0, &a));
    dmm_export ex;
    assert_int_equal(dmm_export_range(eager, &a, (dmm_range){0, 4096}, DMM_ACCESS_READ, &ex), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("eager", "cannot export", NULL);
    dmm_export_init(&ex);
    assert_int_equal(dmm_import(eager, &ex, DMM_ACCESS_READ, &a), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("cannot import", NULL);
    assert_int_equal(dmm_mechanism_release(eager, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));

    /* a driver whose table has no sharing slots (a table of before them: its size ends at destroy) */
    dmm_driver_ops old = *host->ops;
    old.size = (uint32_t)offsetof(dmm_driver_ops, create_exportable);
    const dmm_driver_ops *real = host->ops;
    host->ops = &old;
    dmm_mechanism *m;
    dmm_arena_config c = kit_config(1 * GIB, 0, 0, NULL);
    c.exportable = true;
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("exportable", "cannot create handles for export", NULL);
    c.exportable = false;
    DMM_OK_OR_FAIL(dmm_arena_create(host, &c, &m));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 2 * MIB, 0, &a));
    assert_int_equal(dmm_export_range(m, &a, (dmm_range){0, 2 * MIB}, DMM_ACCESS_READ, &ex), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("export", NULL);
    assert_int_equal(kit_stats(m).exported_handles, 0);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    host->ops = real;
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
}

static void test_refused_exports_change_nothing(void **state) {
    (void)state;
    fx *f = fx_new(0);
    dmm_allocation a, s1, s2;
    dmm_range none[1] = {{0, 2 * MIB}};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 8 * MIB, 2 * MIB, none, 1, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4096, 0, &s1)); /* two small ones share a granule */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4096, 0, &s2));
    size_t fds0 = fd_count();
    kit_snapshot b = kit_snap(f->host, f->m, &f->tally);
    struct {
        const dmm_allocation *al;
        dmm_range r;
        dmm_status want;
        const char *says;
    } cases[] = {
        {&a, {2 * MIB, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "not committed"},
        {&a, {0, 4 * MIB}, DMM_ERR_INVALID_ARGUMENT, "not committed"},
        {&a, {4096, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "granule"},
        {&a, {0, 0}, DMM_ERR_INVALID_ARGUMENT, NULL},
        {&a, {0, 16 * MIB}, DMM_ERR_INVALID_ARGUMENT, NULL},
        {&s1, {0, 4096}, DMM_ERR_INVALID_ARGUMENT, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dmm_export ex;
        assert_int_equal(dmm_export_range(f->m, cases[i].al, cases[i].r, DMM_ACCESS_READ, &ex), cases[i].want);
        if (cases[i].says) dmm_test_error_mentions(cases[i].says, NULL);
        kit_snapshot x = kit_snap(f->host, f->m, &f->tally);
        kit_unchanged(&b, &x, "a refused export", false);
        assert_int_equal(fd_count(), fds0);
    }
    dmm_allocation stale = a;
    stale.id++;
    dmm_export ex;
    assert_int_equal(dmm_export_range(f->m, &stale, (dmm_range){0, 2 * MIB}, DMM_ACCESS_READ, &ex),
                     DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(dmm_export_range(f->m, &a, (dmm_range){0, 2 * MIB}, (dmm_access)2, &ex), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(kit_stats(f->m).exported_handles, 0);
    KIT_CHECK(f->m);
    assert_int_equal(dmm_mechanism_release(f->m, &a).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(f->m, &s1).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(f->m, &s2).state, DMM_RELEASE_COMPLETE);
    fx_end(f);
}

static void test_malformed_descriptions_change_nothing(void **state) {
    (void)state;
    fx *f = fx_new(0), *g = fx_new(0);
    dmm_export ex;
    dmm_allocation a = region(f, DMM_ACCESS_READ_WRITE, &ex);
    char path[] = "/tmp/dmm-ipc-share-XXXXXX";
    int file = mkstemp(path);
    assert_true(file >= 0);
    unlink(path);
    assert_int_equal(ftruncate(file, 4 * MIB), 0); /* a real file, of the wrong size */
    size_t fds0 = fd_count();
    kit_snapshot b = kit_snap(g->host, g->m, &g->tally);
    for (int i = 0; i < 11; i++) {
        dmm_export bad = ex;
        dmm_access access = DMM_ACCESS_READ;
        switch (i) {
        case 0: bad.granule = 4096; break;
        case 1: bad.bytes += 2 * MIB; break;
        case 2: bad.nchunks = 0; break;
        case 3: bad.nchunks = DMM_EXPORT_MAX_CHUNKS + 1; break;
        case 4: bad.fds[0] = -1; break;
        case 5: bad.chunk_bytes[0] = 3 * MIB; bad.bytes = 3 * MIB; break;
        case 6: bad.fds[0] = file; break;
        case 7: bad.device.index = 3; break;
        case 8: bad.access = 2; break;
        case 9: bad.size = 8; break;
        case 10: bad.access = DMM_ACCESS_READ; access = DMM_ACCESS_READ_WRITE; break;
        }
        dmm_allocation out;
        dmm_status s = dmm_import(g->m, &bad, access, &out);
        if (s == DMM_OK) fail_msg("malformed description %d was imported", i);
        kit_snapshot x = kit_snap(g->host, g->m, &g->tally);
        kit_unchanged(&b, &x, "a refused import", false);
        assert_int_equal(fd_count(), fds0);
    }
    close(file);
    dmm_export_close(&ex);
    assert_int_equal(dmm_mechanism_release(f->m, &a).state, DMM_RELEASE_COMPLETE);
    fx_end(f);
    fx_end(g);
}

static void test_every_failed_driver_call_of_an_import_leaves_nothing(void **state) {
    (void)state;
    fx *f = fx_new(0);
    dmm_export ex;
    dmm_allocation a = region(f, DMM_ACCESS_READ, &ex);
    dmm_driver *host, *fault;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    kit_tally tally = {0};
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(1 * GIB, 0, 0, &acct);
    dmm_mechanism *m;
    DMM_OK_OR_FAIL(dmm_arena_create(fault, &c, &m));
    size_t fds0 = fd_count();
    kit_snapshot b = kit_snap(host, m, &tally);
    uint64_t nth = 1;
    dmm_allocation out;
    for (;; nth++) {
        DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_ANY, nth, 1, DMM_ERR_DRIVER));
        dmm_status s = dmm_import(m, &ex, DMM_ACCESS_READ, &out);
        DMM_OK_OR_FAIL(dmm_fault_clear(fault));
        if (s == DMM_OK) break;
        KIT_CHECK(m);
        kit_snapshot x = kit_snap(host, m, &tally);
        kit_unchanged(&b, &x, "a failed import", false);
        assert_int_equal(x.s.imported_bytes.current, 0);
        assert_int_equal(fd_count(), fds0);
        assert_true(nth < 20);
    }
    assert_true(nth > 3); /* import, map, set_access at least failed once each */
    assert_true(same(out.ptr, REGION, 42));
    KIT_CHECK(m);
    kit_stats_match_census(m, fault);
    dmm_export_close(&ex);
    assert_int_equal(dmm_mechanism_release(m, &out).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    dmm_test_census_zero(host);
    kit_tally_zero(&tally);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
    assert_int_equal(dmm_mechanism_release(f->m, &a).state, DMM_RELEASE_COMPLETE);
    fx_end(f);
}

static void test_a_failed_export_marks_nothing_and_leaks_no_descriptor(void **state) {
    (void)state;
    dmm_driver *host, *fault;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, 64 * MIB, NULL); /* 2 MiB chunks: 3 handles */
    dmm_mechanism *m;
    DMM_OK_OR_FAIL(dmm_arena_create(fault, &c, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 6 * MIB, 2 * MIB, &a));
    size_t fds0 = fd_count();
    for (uint64_t nth = 1; nth <= 3; nth++) { /* the 1st, 2nd, 3rd chunk's export fails */
        DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_EXPORT, nth, 1, DMM_ERR_DRIVER));
        dmm_export ex;
        assert_int_equal(dmm_export_range(m, &a, (dmm_range){0, 6 * MIB}, DMM_ACCESS_READ, &ex), DMM_ERR_DRIVER);
        dmm_test_error_mentions("nothing was changed", NULL);
        DMM_OK_OR_FAIL(dmm_fault_clear(fault));
        assert_int_equal(fd_count(), fds0);
        for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++) assert_int_equal(ex.fds[i], -1);
    }
    KIT_CHECK(m);
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.exported_bytes, 0);                            /* no chunk was marked exported */
    assert_int_equal(kit_stats(m).cached_bytes.current, 6 * MIB);     /* so all three went to the cache */
    DMM_OK_OR_FAIL(dmm_mechanism_drain_cache(m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    dmm_test_census_zero(host);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

static void test_only_exported_handles_skip_the_cache(void **state) {
    (void)state;
    fx *f = fx_new(64 * MIB);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4 * MIB, 2 * MIB, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4 * MIB, 2 * MIB, &b));
    dmm_export ex;
    DMM_OK_OR_FAIL(dmm_export_range(f->m, &a, (dmm_range){0, 4 * MIB}, DMM_ACCESS_READ, &ex));
    dmm_export_close(&ex);
    dmm_release_outcome o = dmm_mechanism_release(f->m, &b);
    assert_int_equal(o.exported_bytes, 0);
    assert_int_equal(kit_stats(f->m).cached_bytes.current, 4 * MIB); /* b's handle went to the cache */
    o = dmm_mechanism_release(f->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.exported_bytes, 4 * MIB);
    assert_int_equal(kit_stats(f->m).cached_bytes.current, 4 * MIB); /* a's did not */
    KIT_CHECK(f->m);
    fx_end(f);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--importer") == 0) return importer(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_another_process_reads_the_same_bytes_and_the_memory_is_counted_once),
        cmocka_unit_test(test_a_write_through_a_read_only_import_kills_the_writer),
        cmocka_unit_test(test_a_read_write_import_writes_what_the_exporter_reads),
        cmocka_unit_test(test_a_read_only_export_cannot_be_imported_read_write),
        cmocka_unit_test(test_the_importer_reads_on_after_the_exporter_released),
        cmocka_unit_test(test_what_cannot_export_says_unsupported),
        cmocka_unit_test(test_refused_exports_change_nothing),
        cmocka_unit_test(test_malformed_descriptions_change_nothing),
        cmocka_unit_test(test_every_failed_driver_call_of_an_import_leaves_nothing),
        cmocka_unit_test(test_a_failed_export_marks_nothing_and_leaks_no_descriptor),
        cmocka_unit_test(test_only_exported_handles_skip_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
