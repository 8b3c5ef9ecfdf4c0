/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_ipc_trust.c — the holder and the wire against a hostile neighbour (issue 35, items 1-10;
 * docs/security.md). Real `dmm hold` processes, real sockets, real descriptors, real uids (root only:
 * a forked child switches to uid 65534; skipped with a reason otherwise).
 *
 * What it proves, item by item:
 *   1. a read-write attacher cannot resize a region (sealed at creation); after the first read-only
 *      attach, a read-only attacher that reopens its descriptor through /proc/self/fd gets nothing
 *      writable: write, truncate, grow, punch a hole and a shared writable mapping all fail, the bytes
 *      stay, the creator's own mapping keeps writing, and a later read-write attach is refused;
 *   2. a silent connection is closed at the hello deadline with a reply that says so; more silent
 *      connections than the holder serves do not lock a client out (they yield their slots);
 *   3. at the holder's descriptor limit a newcomer gets a refusal naming the cause, existing clients
 *      are served, and the holder does not spin (its wake-ups, counted by the holder, stay few while
 *      the refused newcomer's peers wait);
 *   4. a named region whose creator never read the reply with its token goes with the connection; one
 *      whose creator said TAKEN (with the token) stays;
 *   5. a client refuses a "holder" of another uid with a sentence naming both uids;
 *   6. a socket path through a symbolic link, or under a folder others may write without the sticky
 *      bit, is refused and nothing is made;
 *   7. stopping holder A leaves the socket of holder B, started at the same path after A's file went;
 *   8. `dmm hold` on a path where something listens but never accepts refuses at once;
 *   9. a stderr pipe that nobody reads never stops the holder; the dropped lines are counted;
 *  10. dmm_ipc_holder_create never calls umask (an interposed umask counts calls) and the socket is
 *      mode 0600 whatever the process's umask;
 * and a client's reply deadline: a listener that never answers ends dmm_ipc_connect_with with BUSY.
 */
#include "testkit.h"
#include "holder_kit.h"

#define sleep_ms dmm_test_sleep_ms
#define holder_refuses(path) dmm_test_holder_refuses(DMM_CLI_PATH, (path), log_path)
#define holder_start(path, err_fd, nofile, extra) \
    dmm_test_holder_start(DMM_CLI_PATH, (path), log_path, (err_fd), (nofile), (extra), NULL)
#define holder_stop dmm_test_holder_stop

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/sock.h"

/* ---- item 10: every umask call of this process is counted (the library must make none) ---- */
static int umask_calls;
mode_t umask(mode_t mask);
mode_t umask(mode_t mask) {
    umask_calls++;
    return (mode_t)syscall(SYS_umask, mask);
}

#ifdef DMM_CLI_PATH /* the tool's path: without the tool (DMM_BUILD_TOOLS=OFF) the test reports skipped */

#define MIB ((uint64_t)1 << 20)

static char dir[64], sock_path[128], log_path[128];

static struct sockaddr_un address_of(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path));
    return sa;
}



static bool log_says(const char *what) {
    FILE *f = fopen(log_path, "r");
    if (f == NULL) return false;
    char line[1024];
    bool said = false;
    while (fgets(line, sizeof line, f) != NULL) said |= strstr(line, what) != NULL;
    fclose(f);
    return said;
}

static dmm_ipc_census census_on(dmm_ipc_client *c) {
    dmm_ipc_census k = {.size = sizeof k};
    DMM_OK_OR_FAIL(dmm_ipc_census_get(c, &k));
    return k;
}

/* The census once the holder has noticed every closed connection (only the asking one is left). */
static dmm_ipc_census settled(const char *path) {
    dmm_ipc_census k = {0};
    for (int i = 0; i < 2000; i++) { /* up to 10 s: sanitized builds on a busy machine */
        dmm_ipc_client *c;
        DMM_OK_OR_FAIL(dmm_ipc_connect(path, &c));
        k = census_on(c);
        dmm_ipc_disconnect(c);
        if (k.connections == 1) return k;
        sleep_ms(5);
    }
    fail_msg("the holder still counts %llu connections", (unsigned long long)k.connections);
    return k;
}

/* A raw connection (no hello), with a receive deadline so that a stuck holder fails the test, not hangs it. */
static int raw_connect(const char *path) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = address_of(path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void raw_send(int fd, dmm_ipc_msg *m, uint32_t seq) {
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    size_t len = 0;
    m->seq = seq;
    DMM_OK_OR_FAIL(dmm__ipc_encode(m, buf, sizeof buf, &len));
    assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads one reply (closing any descriptors with it); -1 when the connection closed or the wait ran out. */
static int raw_reply(int fd, dmm_ipc_msg *r) {
    uint8_t in[DMM_IPC_MAX_MESSAGE];
    dmm_ipc_rx rx;
    if (dmm__ipc_recv(fd, in, sizeof in, false, &rx) != DMM_OK || rx.closed) return -1;
    dmm__ipc_close_fds(rx.fds, rx.nfds);
    DMM_OK_OR_FAIL(dmm__ipc_decode(in, rx.len, r));
    return (int)r->status;
}

static void raw_hello(int fd) {
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_HELLO);
    m.version = DMM_IPC_VERSION;
    raw_send(fd, &m, 1);
    assert_int_equal(raw_reply(fd, &r), DMM_OK);
}

static pid_t holder = -1, second = -1; /* the holders a test runs (killed after it, if it left them) */

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dmm-ipc-trust-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(sock_path, sizeof sock_path, "%s/hold.sock", dir);
    snprintf(log_path, sizeof log_path, "%s/hold.log", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(log_path);
    rmdir(dir);
    return 0;
}

/* Each test starts its own holder (with the options it needs) and stops it. */
static void start(const char *const *extra) {
    holder = holder_start(sock_path, -1, 0, extra);
    assert_true(holder > 0);
}

static void stop(void) {
    holder_stop(holder);
    holder = -1;
}

/* After each test: a holder a failed test left running is killed, so the next one starts afresh. */
static int kill_leftover(void **state) {
    (void)state;
    pid_t left[2] = {holder, second};
    for (int i = 0; i < 2; i++)
        if (left[i] > 0) {
            kill(left[i], SIGKILL);
            waitpid(left[i], NULL, 0);
            unlink(sock_path);
        }
    holder = second = -1;
    return 0;
}

/* ---- item 1 ---- */

/* The child's verdict: bit i set = attack i worked. */
static int attacks_on(int fd, uint64_t bytes) {
    int worked = 0;
    if (pwrite(fd, "x", 1, 0) == 1) worked |= 1;
    if (ftruncate(fd, 0) == 0) worked |= 2;
    if (ftruncate(fd, (off_t)(2 * bytes)) == 0) worked |= 4;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0) worked |= 8;
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        worked |= 16;
        munmap(p, (size_t)bytes);
    }
    return worked;
}

static void test_a_read_only_attacher_can_neither_write_nor_resize_the_region(void **state) {
    (void)state;
    start(NULL);
    dmm_driver *d;
    dmm_mechanism *arena;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &d));
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = (uint64_t)1 << 32};
    DMM_OK_OR_FAIL(dmm_arena_create(d, &ac, &arena));
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_export ex;
    DMM_OK_OR_FAIL(dmm_ipc_create(c, "w", 2 * MIB, 0, &ex));
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];
    memcpy(token, ex.token, sizeof token);
    dmm_allocation al;
    DMM_OK_OR_FAIL(dmm_import(arena, &ex, DMM_ACCESS_READ_WRITE, &al)); /* mapped before the token is shared */
    dmm_export_close(&ex);
    memset(al.ptr, 0x5a, al.bytes);

    int verdict[2];
    assert_int_equal(pipe(verdict), 0);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) { /* the neighbour: a read-write attach first (it may write, never resize), then read-only */
        dmm_ipc_client *n;
        dmm_export rw, ro;
        int worked = 0;
        if (dmm_ipc_connect(sock_path, &n) != DMM_OK || dmm_ipc_attach(n, "w", token, DMM_ACCESS_READ_WRITE, &rw) != DMM_OK)
            worked = -1;
        if (worked == 0 && ftruncate(rw.fds[0], 0) == 0) worked |= 1 << 5;
        if (worked == 0 && ftruncate(rw.fds[0], (off_t)(4 * MIB)) == 0) worked |= 1 << 6;
        if (worked >= 0 && dmm_ipc_attach(n, "w", token, DMM_ACCESS_READ, &ro) != DMM_OK) worked = -2;
        if (worked >= 0) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", ro.fds[0]);
            int reopened = open(path, O_RDWR | O_CLOEXEC); /* the attack of issue 35 item 1 */
            if (reopened >= 0) worked |= attacks_on(reopened, ro.bytes) << 8;
            worked |= attacks_on(rw.fds[0], rw.bytes) << 16; /* the read-write descriptor, after the seal */
        }
        _exit(write(verdict[1], &worked, sizeof worked) == (ssize_t)sizeof worked ? 0 : 1);
    }
    close(verdict[1]);
    int worked = -3;
    assert_int_equal(read(verdict[0], &worked, sizeof worked), (ssize_t)sizeof worked);
    close(verdict[0]);
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    if (worked != 0)
        fail_msg("the neighbour's verdict %#x: negative = it could not attach; bits 5-6 = a read-write attacher resized "
                 "the region; bits 8-12 = the reopened read-only descriptor wrote, shrank, grew, punched or mapped "
                 "writable; bits 16-20 = the same through the read-write descriptor after the seal", worked);
    for (size_t i = 0; i < al.bytes; i++)
        if (((uint8_t *)al.ptr)[i] != 0x5a) fail_msg("byte %zu changed", i);
    ((uint8_t *)al.ptr)[7] = 0x11; /* the creator's mapping, made before the seal, keeps writing */
    assert_int_equal(((uint8_t *)al.ptr)[7], 0x11);
    assert_int_equal(dmm_ipc_attach(c, "w", token, DMM_ACCESS_READ_WRITE, &ex), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("read-only", NULL);
    DMM_OK_OR_FAIL(dmm_ipc_attach(c, "w", token, DMM_ACCESS_READ, &ex)); /* read-only still works */
    int seals = fcntl(ex.fds[0], F_GET_SEALS);
    assert_true(seals >= 0);
    assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
    dmm_export_close(&ex);
    assert_int_equal(dmm_mechanism_release(arena, &al).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_ipc_drop(c, "w", token));
    dmm_ipc_disconnect(c);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    dmm_test_census_zero(d);
    dmm_driver_destroy(d);
    dmm_ipc_census k = settled(sock_path);
    assert_int_equal(k.regions, 0);
    stop();
}

/* ---- item 2 ---- */

static void test_a_silent_connection_is_closed_at_the_hello_deadline(void **state) {
    (void)state;
    const char *opts[] = {"--hello-deadline", "200", "--max-connections", "64", NULL};
    start(opts);
    int fd = raw_connect(sock_path);
    dmm_ipc_msg r;
    assert_int_equal(raw_reply(fd, &r), DMM_ERR_BUSY); /* the holder's word on why, then the close */
    assert_non_null(strstr(r.text, "hello"));
    uint8_t b[16];
    assert_int_equal(recv(fd, b, sizeof b, 0), 0);
    close(fd);
    /* more silent connections than the holder serves: a client still gets in at once */
    int silent[100];
    for (int i = 0; i < 100; i++) silent[i] = raw_connect(sock_path);
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_ipc_census k = census_on(c);
    assert_true(k.evicted >= 100 - 64);
    assert_true(k.hello_timeouts >= 1);
    assert_true(k.connections <= 64);
    dmm_ipc_disconnect(c);
    for (int i = 0; i < 100; i++) close(silent[i]);
    settled(sock_path);
    assert_true(log_says("no hello within 200 ms"));
    stop();
}

/* ---- item 3 ---- */

static void test_a_full_descriptor_table_refuses_newcomers_without_spinning(void **state) {
    (void)state;
    holder = holder_start(sock_path, -1, 24, NULL); /* 24 descriptors: full after a dozen connections */
    assert_true(holder > 0);
    dmm_ipc_client *first;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &first));
    dmm_ipc_client *more[40];
    int served = 0, refused = 0;
    for (int i = 0; i < 40; i++) {
        more[i] = NULL;
        dmm_status s = dmm_ipc_connect(sock_path, &more[i]);
        if (s == DMM_OK) {
            served++;
            continue;
        }
        if (s != DMM_ERR_BUSY) fail_msg("connection %d: %s: %s", i, dmm_status_str(s), dmm_last_error());
        dmm_test_error_mentions("descriptor", NULL);
        refused++;
    }
    assert_true(served > 0);
    assert_true(refused > 0);
    /* the holder sleeps while newcomers wait: its wake-ups are those our census requests cause */
    int waiting[4];
    dmm_ipc_msg r;
    for (int i = 0; i < 4; i++) { /* each newcomer is answered with a refusal at once, not left queued */
        waiting[i] = raw_connect(sock_path);
        assert_int_equal(raw_reply(waiting[i], &r), DMM_ERR_BUSY);
        assert_non_null(strstr(r.text, "descriptor"));
    }
    dmm_ipc_census k0 = census_on(first);
    sleep_ms(300);
    dmm_ipc_census k1 = census_on(first);
    if (k1.wakeups - k0.wakeups > 3)
        fail_msg("the holder woke %llu times between two census requests: it spins", 
                 (unsigned long long)(k1.wakeups - k0.wakeups));
    for (int i = 0; i < 4; i++) close(waiting[i]);
    for (int i = 0; i < 40; i++) dmm_ipc_disconnect(more[i]);
    dmm_ipc_disconnect(first);
    dmm_ipc_census k = settled(sock_path); /* a slot freed: served again */
    assert_true(k.refused >= (uint64_t)refused);
    stop();
}

/* ---- item 4 ---- */

static void test_a_region_whose_token_was_never_read_goes_with_its_connection(void **state) {
    (void)state;
    start(NULL);
    int fd = raw_connect(sock_path);
    raw_hello(fd);
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_CREATE);
    snprintf(m.name, sizeof m.name, "orphan");
    m.bytes = 2 * MIB;
    m.access = DMM_ACCESS_READ_WRITE;
    raw_send(fd, &m, 2);
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_ipc_census k = census_on(c);
    assert_int_equal(k.regions, 1);
    assert_int_equal(k.pending_regions, 1);
    close(fd); /* it goes without ever reading the reply that carries the token */
    dmm_ipc_disconnect(c);
    k = settled(sock_path);
    assert_int_equal(k.regions, 0);
    assert_int_equal(k.owned_bytes, 0);
    assert_int_equal(k.handles, 0);

    fd = raw_connect(sock_path); /* the same, read in order: the TAKEN after the reply is accepted */
    raw_hello(fd);
    dmm__ipc_msg_init(&m, DMM_IPC_CREATE);
    snprintf(m.name, sizeof m.name, "kept");
    m.bytes = 2 * MIB;
    m.access = DMM_ACCESS_READ_WRITE;
    raw_send(fd, &m, 2);
    assert_int_equal(raw_reply(fd, &r), DMM_OK);
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];
    memcpy(token, r.ex.token, sizeof token);
    dmm__ipc_msg_init(&m, DMM_IPC_TAKEN);
    snprintf(m.name, sizeof m.name, "kept");
    memcpy(m.token, token, sizeof token);
    raw_send(fd, &m, 3);
    assert_int_equal(raw_reply(fd, &r), DMM_OK);
    close(fd);
    k = settled(sock_path);
    assert_int_equal(k.regions, 1);
    assert_int_equal(k.pending_regions, 0);
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    DMM_OK_OR_FAIL(dmm_ipc_drop(c, "kept", token));
    dmm_ipc_disconnect(c);
    stop();
}

/* ---- item 5 ---- */

static void test_a_client_refuses_a_holder_of_another_uid(void **state) {
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: a second user needs root to simulate (setresuid to 65534)\n");
        skip();
    }
    char other_dir[64] = "/tmp/dmm-ipc-impostor-XXXXXX", path[96];
    assert_non_null(mkdtemp(other_dir)); /* beside ours (which uid 65534 cannot enter), then given away */
    assert_int_equal(chown(other_dir, 65534, 65534), 0);
    snprintf(path, sizeof path, "%s/s", other_dir);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) { /* the impostor: uid 65534, listening at the path, answering every hello */
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
        int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        struct sockaddr_un sa = address_of(path);
        if (bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 8) != 0) _exit(11);
        if (write(ready[1], "r", 1) != 1) _exit(12);
        for (;;) {
            int c = accept(l, NULL, NULL);
            uint8_t in[DMM_IPC_MAX_MESSAGE], out[DMM_IPC_MAX_MESSAGE];
            ssize_t n = recv(c, in, sizeof in, 0);
            dmm_ipc_msg m, r;
            if (n > 0 && dmm__ipc_decode(in, (size_t)n, &m) == DMM_OK) {
                dmm__ipc_msg_init(&r, DMM_IPC_REPLY);
                r.seq = m.seq;
                size_t len = 0;
                if (dmm__ipc_encode(&r, out, sizeof out, &len) == DMM_OK) (void)send(c, out, len, MSG_NOSIGNAL);
            }
            close(c);
        }
    }
    close(ready[1]);
    char b;
    ssize_t got = read(ready[0], &b, 1); /* 0: the impostor could not listen (its exit status says why) */
    close(ready[0]);
    if (got != 1) {
        int st = 0;
        waitpid(p, &st, 0);
        rmdir(other_dir);
        fail_msg("the impostor did not start (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    dmm_ipc_client *c = NULL;
    dmm_status s = dmm_ipc_connect(path, &c);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    unlink(path);
    rmdir(other_dir);
    if (s == DMM_OK) dmm_ipc_disconnect(c);
    assert_int_equal(s, DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("uid 65534", "uid 0", NULL);
}

/* ---- item 6 ---- */

static void test_a_socket_path_through_a_link_or_an_open_folder_is_refused(void **state) {
    (void)state;
    char real[96], link[96], path[160], open_dir[96], inner[128];
    snprintf(real, sizeof real, "%s/real", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(mkdir(real, 0700), 0);
    assert_int_equal(symlink(real, link), 0);
    snprintf(path, sizeof path, "%s/s", link);
    int st = holder_refuses(path);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    assert_true(log_says("symbolic link"));
    snprintf(path, sizeof path, "%s/s", real);
    assert_int_not_equal(access(path, F_OK), 0); /* nothing was made through the link */
    /* a folder others may write (no sticky bit) on the way, though the last folder is ours and 0700 */
    snprintf(open_dir, sizeof open_dir, "%s/open", dir);
    assert_int_equal(mkdir(open_dir, 0700), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    snprintf(inner, sizeof inner, "%s/inner", open_dir);
    assert_int_equal(mkdir(inner, 0700), 0);
    snprintf(path, sizeof path, "%s/s", inner);
    st = holder_refuses(path);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    assert_true(log_says("sticky bit"));
    assert_int_not_equal(access(path, F_OK), 0);
    rmdir(inner);
    rmdir(open_dir);
    unlink(link);
    rmdir(real);
}

/* ---- item 7 ---- */

static void test_stopping_a_holder_leaves_the_socket_of_a_later_one(void **state) {
    (void)state;
    pid_t a = holder = holder_start(sock_path, -1, 0, NULL);
    assert_true(a > 0);
    assert_int_equal(unlink(sock_path), 0); /* A's file is gone (someone removed it) */
    pid_t b = second = holder_start(sock_path, -1, 0, NULL);
    assert_true(b > 0);
    struct stat before;
    assert_int_equal(stat(sock_path, &before), 0);
    holder_stop(a);
    holder = -1;
    struct stat after;
    assert_int_equal(stat(sock_path, &after), 0); /* B's socket is still there ... */
    assert_int_equal(after.st_ino, before.st_ino);
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c)); /* ... and B serves */
    dmm_ipc_disconnect(c);
    holder_stop(b);
    second = -1;
    assert_int_not_equal(access(sock_path, F_OK), 0); /* B removed its own */
}

/* ---- item 8 ---- */

static void test_a_listener_that_never_accepts_is_refused_at_once(void **state) {
    (void)state;
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = address_of(sock_path);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(l, 0), 0);
    int queued[8], nq = 0;
    for (; nq < 8; nq++) { /* fill its queue: the next connect would wait */
        queued[nq] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (connect(queued[nq], (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(queued[nq]);
            break;
        }
    }
    assert_true(nq < 8);
    int st = holder_refuses(sock_path);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    assert_true(log_says("does not accept"));
    for (int i = 0; i < nq; i++) close(queued[i]);
    close(l);
    unlink(sock_path);
}

/* ---- item 9 ---- */

static void test_a_stderr_pipe_nobody_reads_never_stops_the_holder(void **state) {
    (void)state;
    int err[2];
    assert_int_equal(pipe(err), 0);
    holder = holder_start(sock_path, err[1], 0, NULL);
    assert_true(holder > 0);
    close(err[1]);
    int fd = raw_connect(sock_path);
    raw_hello(fd);
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_ATTACH);
    snprintf(m.name, sizeof m.name, "no-such-region-with-a-long-name-to-fill-the-pipe-sooner");
    m.access = DMM_ACCESS_READ;
    for (uint32_t i = 0; i < 3000; i++) { /* 3000 refusals, a log line each: far more than a pipe holds */
        raw_send(fd, &m, 2 + i);
        if (raw_reply(fd, &r) != DMM_ERR_UNKNOWN_ALLOCATION) fail_msg("request %u got no answer: the holder is stuck", i);
    }
    close(fd);
    dmm_ipc_client *c;
    dmm_ipc_client_config cc = {sizeof cc, sock_path, 5000};
    DMM_OK_OR_FAIL(dmm_ipc_connect_with(&cc, &c)); /* a newcomer is served */
    dmm_ipc_census k = census_on(c);
    assert_true(k.errors >= 3000);
    dmm_ipc_disconnect(c);
    /* drain the pipe; the next line says how many were dropped */
    int fl = fcntl(err[0], F_GETFL);
    fcntl(err[0], F_SETFL, fl | O_NONBLOCK);
    char buf[65536];
    while (read(err[0], buf, sizeof buf) > 0) {
    }
    fcntl(err[0], F_SETFL, fl);
    fd = raw_connect(sock_path);
    raw_hello(fd);
    raw_send(fd, &m, 2);
    assert_int_equal(raw_reply(fd, &r), DMM_ERR_UNKNOWN_ALLOCATION);
    close(fd);
    struct pollfd p = {err[0], POLLIN, 0};
    assert_int_equal(poll(&p, 1, 20000), 1);
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "dropped"));
    stop();
    close(err[0]);
}

/* ---- item 10 ---- */

static void test_the_holder_never_calls_umask_and_its_socket_is_0600(void **state) {
    (void)state;
    mode_t masks[] = {0, 022, 0277};
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
        mode_t old = (mode_t)syscall(SYS_umask, masks[i]); /* around the counter: the test's own */
        int before = umask_calls;
        dmm_ipc_holder_config cfg = {.size = sizeof cfg, .socket_path = sock_path};
        dmm_ipc_holder *h;
        DMM_OK_OR_FAIL(dmm_ipc_holder_create(&cfg, &h));
        struct stat st;
        assert_int_equal(stat(sock_path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        DMM_OK_OR_FAIL(dmm_ipc_holder_destroy(h));
        assert_int_equal(umask_calls, before);
        assert_int_equal((mode_t)syscall(SYS_umask, old), masks[i]); /* the process's umask is as it was */
    }
    assert_int_not_equal(access(sock_path, F_OK), 0);
}

/* ---- the client's reply deadline ---- */

static void test_a_holder_that_never_answers_ends_the_client_at_its_deadline(void **state) {
    (void)state;
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = address_of(sock_path);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(l, 4), 0); /* the kernel completes the connection; nobody ever answers */
    dmm_ipc_client_config cfg = {sizeof cfg, sock_path, 200};
    dmm_ipc_client *c = NULL;
    assert_int_equal(dmm_ipc_connect_with(&cfg, &c), DMM_ERR_BUSY);
    dmm_test_error_mentions("200 ms", NULL);
    assert_null(c);
    close(l);
    unlink(sock_path);
}

#endif /* DMM_CLI_PATH */

int main(void) {
#ifndef DMM_CLI_PATH
    printf("SKIP: the dmm tool is not built (DMM_BUILD_TOOLS=OFF)\n");
    return DMM_TEST_SKIP;
#else
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_a_read_only_attacher_can_neither_write_nor_resize_the_region, kill_leftover),
        cmocka_unit_test_teardown(test_a_silent_connection_is_closed_at_the_hello_deadline, kill_leftover),
        cmocka_unit_test_teardown(test_a_full_descriptor_table_refuses_newcomers_without_spinning, kill_leftover),
        cmocka_unit_test_teardown(test_a_region_whose_token_was_never_read_goes_with_its_connection, kill_leftover),
        cmocka_unit_test_teardown(test_a_client_refuses_a_holder_of_another_uid, kill_leftover),
        cmocka_unit_test_teardown(test_a_socket_path_through_a_link_or_an_open_folder_is_refused, kill_leftover),
        cmocka_unit_test_teardown(test_stopping_a_holder_leaves_the_socket_of_a_later_one, kill_leftover),
        cmocka_unit_test_teardown(test_a_listener_that_never_accepts_is_refused_at_once, kill_leftover),
        cmocka_unit_test_teardown(test_a_stderr_pipe_nobody_reads_never_stops_the_holder, kill_leftover),
        cmocka_unit_test_teardown(test_the_holder_never_calls_umask_and_its_socket_is_0600, kill_leftover),
        cmocka_unit_test_teardown(test_a_holder_that_never_answers_ends_the_client_at_its_deadline, kill_leftover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
#endif
}
