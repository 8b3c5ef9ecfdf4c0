/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_ipc_holder.c — the holder (`dmm hold`, run as its own process) and its clients
 * (dmm/ipc.h; issue 14 acceptance 3 and 4).
 *
 * What it proves: a client creates "w", fills it and is killed with SIGKILL; a new client attaches
 * "w" with its token and reads the same bytes; dropping "w" frees it (census zero); a private region
 * dies with its connection; 100 clients crashing at random points (between requests, in the middle
 * of one, with a half-sent message) leave the holder's census equal to the named regions and nothing
 * else, and no descriptor leaked in the holder (/proc/PID/fd). Hostile clients: garbage, truncated,
 * oversized, out-of-order, wrongly numbered messages, requests before hello, messages carrying
 * descriptors, bad names, a wrong token — each gets an error reply and changes nothing; 10,000
 * connect/disconnect cycles leave the holder's descriptors as they were; another uid (a real second
 * user: euid 65534 through a child that keeps root's fsuid to reach the socket) is refused with a
 * logged sentence, and one without it cannot even reach the 0600 socket; the socket is mode 0600;
 * a directory others may write is refused; --limit refuses what does not fit.
 */
#include "testkit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "holder_kit.h"
#include "ipc/wire.h"

#define fd_count_of dmm_test_fd_count
#define sleep_ms dmm_test_sleep_ms
#define holder_refuses(path) dmm_test_holder_refuses(DMM_CLI_PATH, (path), log_path)
#define census() dmm_test_holder_census(sock_path)
#define stop_holder dmm_test_holder_stop

#ifdef DMM_CLI_PATH /* the tool's path: without the tool (DMM_BUILD_TOOLS=OFF) the test reports skipped */

#define MIB ((uint64_t)1 << 20)

static char dir[48], sock_path[96], log_path[96];
static pid_t holder = -1;

/* Starts `dmm hold --socket sock_path EXTRA1 EXTRA2` (NULL: none); returns its pid once it accepts,
 * or -1 if it exited (then *status holds how). */
static pid_t start_holder(const char *extra1, const char *extra2, int *status) {
    const char *extra[3] = {extra1, extra2, NULL};
    return dmm_test_holder_start(DMM_CLI_PATH, sock_path, log_path, -1, 0, extra, status);
}



/* The holder's descriptors once it has closed the connections we just closed: waits (up to 10 s) for
 * `want` (or, with want = 0, for the count to stay still for 20 ms) and returns the count. */
static size_t holder_fds(pid_t pid, size_t want) {
    size_t n = fd_count_of(pid);
    for (int i = 0; i < 500; i++) {
        sleep_ms(20);
        size_t m = fd_count_of(pid);
        if (want ? m == want : m == n) return m;
        n = m;
    }
    return n;
}


static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dmm-ipc-holder-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(sock_path, sizeof sock_path, "%s/hold.sock", dir);
    snprintf(log_path, sizeof log_path, "%s/hold.log", dir);
    int st = 0;
    holder = start_holder(NULL, NULL, &st);
    return holder > 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (holder > 0) stop_holder(holder);
    holder = -1;
    unlink(log_path);
    rmdir(dir);
    return 0;
}


/* The census once the holder has noticed every closed connection (only the asking one is left). */
static dmm_ipc_census settled(void) {
    dmm_ipc_census k = census();
    for (int i = 0; i < 2000 && k.connections != 1; i++) { /* up to 10 s: sanitized builds on a busy machine */
        sleep_ms(5);
        k = census();
    }
    assert_int_equal(k.connections, 1);
    return k;
}

/* An arena to import into (a client's own, over its own host driver). */
typedef struct mapper {
    dmm_driver *d;
    dmm_mechanism *m;
} mapper;

static mapper mapper_new(void) {
    mapper x;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &x.d));
    dmm_arena_config c = {.size = sizeof c, .reserve_bytes = (uint64_t)1 << 32};
    DMM_OK_OR_FAIL(dmm_arena_create(x.d, &c, &x.m));
    return x;
}

static void mapper_end(mapper *x) {
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(x->m));
    dmm_test_census_zero(x->d);
    dmm_driver_destroy(x->d);
}

static uint64_t pattern(uint64_t i) { return i * 0x9e3779b97f4a7c15ull + 17; }

static void test_a_region_outlives_its_creator_killed_with_sigkill(void **state) {
    (void)state;
    int tok[2];
    assert_int_equal(pipe(tok), 0);
    pid_t a = fork();
    assert_true(a >= 0);
    if (a == 0) { /* the creator: create, map, fill, hand the token over, wait to be killed */
        dmm_ipc_client *c;
        dmm_export ex;
        mapper x = mapper_new();
        dmm_allocation al;
        if (dmm_ipc_connect(sock_path, &c) != DMM_OK || dmm_ipc_create(c, "w", 8 * MIB, 0, &ex) != DMM_OK ||
            dmm_import(x.m, &ex, DMM_ACCESS_READ_WRITE, &al) != DMM_OK)
            _exit(1);
        dmm_export_close(&ex);
        for (size_t i = 0; i < al.bytes / 8; i++) ((uint64_t *)al.ptr)[i] = pattern(i);
        if (write(tok[1], ex.token, sizeof ex.token) != (ssize_t)sizeof ex.token) _exit(2);
        for (;;) pause();
    }
    close(tok[1]);
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];
    assert_int_equal(read(tok[0], token, sizeof token), (ssize_t)sizeof token);
    close(tok[0]);
    kill(a, SIGKILL);
    int st;
    assert_int_equal(waitpid(a, &st, 0), a);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    dmm_ipc_census k = settled();
    assert_int_equal(k.regions, 1);
    assert_int_equal(k.region_bytes, 8 * MIB);
    assert_int_equal(k.owned_bytes, 8 * MIB);

    /* a new client attaches "w" and reads what the dead one wrote */
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_export ex;
    uint8_t wrong[DMM_EXPORT_TOKEN_BYTES];
    memcpy(wrong, token, sizeof wrong);
    wrong[5] ^= 1;
    assert_int_equal(dmm_ipc_attach(c, "w", wrong, DMM_ACCESS_READ, &ex), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("token", NULL);
    DMM_OK_OR_FAIL(dmm_ipc_attach(c, "w", token, DMM_ACCESS_READ, &ex));
    assert_int_equal(ex.bytes, 8 * MIB);
    assert_true(memcmp(ex.token, token, sizeof token) == 0);
    mapper x = mapper_new();
    dmm_allocation al;
    DMM_OK_OR_FAIL(dmm_import(x.m, &ex, DMM_ACCESS_READ, &al));
    dmm_export_close(&ex);
    for (size_t i = 0; i < al.bytes / 8; i++)
        if (((uint64_t *)al.ptr)[i] != pattern(i)) fail_msg("word %zu differs", i);
    assert_int_equal(dmm_mechanism_release(x.m, &al).state, DMM_RELEASE_COMPLETE);
    mapper_end(&x);
    /* dropping it frees it */
    DMM_OK_OR_FAIL(dmm_ipc_drop(c, "w", token));
    assert_int_equal(dmm_ipc_attach(c, "w", token, DMM_ACCESS_READ, &ex), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_ipc_disconnect(c);
    k = settled();
    assert_int_equal(k.regions, 0);
    assert_int_equal(k.owned_bytes, 0);
    assert_int_equal(k.handles, 0);
}

static void test_a_private_region_dies_with_its_connection(void **state) {
    (void)state;
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_export ex;
    DMM_OK_OR_FAIL(dmm_ipc_create(c, "p", 2 * MIB, DMM_IPC_PRIVATE, &ex));
    dmm_export_close(&ex);
    dmm_ipc_census k = {.size = sizeof k};
    DMM_OK_OR_FAIL(dmm_ipc_census_get(c, &k));
    assert_int_equal(k.private_regions, 1);
    assert_int_equal(dmm_ipc_create(c, "p", 2 * MIB, 0, &ex), DMM_ERR_INVALID_ARGUMENT); /* the name is taken */
    dmm_test_error_mentions("exists", NULL);
    dmm_ipc_disconnect(c);
    k = settled();
    assert_int_equal(k.regions, 0);
    assert_int_equal(k.owned_bytes, 0);
}

/* One crashing client: a few random requests, killed (by itself) at a random point. */
static void crashing_client(unsigned seed) {
    srand(seed);
    int steps = rand() % 5;
    dmm_ipc_client *c;
    if (rand() % 8 == 0) raise(SIGKILL); /* before connecting */
    if (dmm_ipc_connect(sock_path, &c) != DMM_OK) _exit(3);
    for (int i = 0; i <= steps; i++) {
        char name[32];
        dmm_export ex;
        switch (rand() % 4) {
        case 0:
            snprintf(name, sizeof name, "n%u-%d", seed, i);
            (void)dmm_ipc_create(c, name, (uint64_t)(1 + rand() % 3) * 2 * MIB, 0, &ex);
            break;
        case 1:
            snprintf(name, sizeof name, "p%u-%d", seed, i);
            (void)dmm_ipc_create(c, name, 2 * MIB, DMM_IPC_PRIVATE, &ex);
            break;
        case 2: { /* a request cut short: the header only */
            uint8_t half[8] = {0x44, 0x4d, 0x4d, 0x48, 1, 0, 2, 0};
            (void)send(dmm_ipc_client_fd(c), half, sizeof half, MSG_NOSIGNAL);
            raise(SIGKILL);
            break;
        }
        default: { /* killed between sending a request and reading its reply */
            dmm_ipc_msg m;
            dmm__ipc_msg_init(&m, DMM_IPC_CREATE);
            snprintf(m.name, sizeof m.name, "q%u-%d", seed, i);
            m.bytes = 2 * MIB;
            m.flags = rand() % 2 ? DMM_IPC_PRIVATE : 0;
            m.access = DMM_ACCESS_READ_WRITE;
            m.seq = (uint32_t)(2 + i);
            uint8_t buf[DMM_IPC_MAX_MESSAGE];
            size_t len = 0;
            if (dmm__ipc_encode(&m, buf, sizeof buf, &len) == DMM_OK)
                (void)send(dmm_ipc_client_fd(c), buf, len, MSG_NOSIGNAL);
            raise(SIGKILL);
        }
        }
        if (rand() % 3 == 0) raise(SIGKILL);
    }
    raise(SIGKILL);
}

static void test_a_hundred_client_crashes_leave_only_the_named_regions(void **state) {
    (void)state;
    size_t fds0 = holder_fds(holder, 0);
    for (unsigned i = 0; i < 100; i++) {
        pid_t p = fork();
        assert_true(p >= 0);
        if (p == 0) crashing_client(1000 + i);
        if (i % 3 == 0) { /* some are killed from outside, at whatever point they reached */
            sleep_ms(rand() % 3);
            kill(p, SIGKILL);
        }
        int st;
        assert_int_equal(waitpid(p, &st, 0), p);
        assert_true(WIFSIGNALED(st));
    }
    dmm_ipc_census k = settled();
    assert_int_equal(k.private_regions, 0);          /* every private one died with its client */
    assert_true(k.regions > 0);                      /* named ones stay (seeded: some were made) */
    assert_int_equal(k.owned_bytes, k.region_bytes); /* nothing held beside the named regions */
    assert_int_equal(k.handles, k.regions);          /* one handle each: no stray handle */
    /* the host driver holds one memfd per handle, nothing more */
    assert_int_equal(holder_fds(holder, fds0 + k.handles), fds0 + k.handles);
    stop_holder(holder); /* and start afresh for the next test */
    int st = 0;
    holder = start_holder(NULL, NULL, &st);
    assert_true(holder > 0);
}

/* Sends raw bytes (with an optional descriptor) and reads the reply record; returns its decoded status,
 * or -1 when the holder closed the connection. */
static int raw_request(int fd, const void *buf, size_t len, int pass_fd, dmm_ipc_msg *reply) {
    struct iovec iov = {(void *)buf, len};
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.b;
        mh.msg_controllen = sizeof ctl.b;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0) return -1;
    uint8_t in[DMM_IPC_MAX_MESSAGE];
    ssize_t r = recv(fd, in, sizeof in, 0);
    if (r <= 0) return -1;
    DMM_OK_OR_FAIL(dmm__ipc_decode(in, (size_t)r, reply));
    assert_int_equal(reply->type, DMM_IPC_REPLY);
    return (int)reply->status;
}

static size_t encode(dmm_ipc_msg *m, uint32_t seq, uint8_t *buf) {
    size_t len = 0;
    m->seq = seq;
    DMM_OK_OR_FAIL(dmm__ipc_encode(m, buf, DMM_IPC_MAX_MESSAGE, &len));
    return len;
}

static void test_hostile_messages_get_an_error_reply_and_change_nothing(void **state) {
    (void)state;
    dmm_ipc_census k0 = settled();
    size_t fds0 = holder_fds(holder, 0);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    dmm_ipc_msg r, m;
    uint8_t buf[DMM_IPC_MAX_MESSAGE], big[3 * DMM_IPC_MAX_MESSAGE];
    size_t len;

    const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
    assert_int_equal(raw_request(fd, garbage, sizeof garbage, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(r.text, "magic"));
    assert_int_equal(raw_request(fd, "DMMH", 4, -1, &r), DMM_ERR_INVALID_ARGUMENT); /* truncated header */
    assert_non_null(strstr(r.text, "truncated"));
    memset(big, 0x41, sizeof big);
    assert_int_equal(raw_request(fd, big, sizeof big, -1, &r), DMM_ERR_INVALID_ARGUMENT); /* oversized */
    assert_non_null(strstr(r.text, "oversized"));

    dmm__ipc_msg_init(&m, DMM_IPC_CREATE); /* a create before hello: out of order */
    snprintf(m.name, sizeof m.name, "x");
    m.bytes = 2 * MIB;
    m.access = DMM_ACCESS_READ_WRITE;
    len = encode(&m, 1, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(r.text, "hello"));

    dmm__ipc_msg_init(&m, DMM_IPC_HELLO);
    m.version = DMM_IPC_VERSION;
    len = encode(&m, 1, buf);
    buf[len - 1] = 0; /* a cut-short field: the payload says 4 bytes, 3 come */
    assert_int_equal(raw_request(fd, buf, len - 1, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    len = encode(&m, 1, buf);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_int_equal(raw_request(fd, buf, len, devnull, &r), DMM_ERR_INVALID_ARGUMENT); /* with a descriptor */
    assert_non_null(strstr(r.text, "descriptor"));
    close(devnull);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_OK); /* the hello itself */
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT); /* numbered 1 again */
    len = encode(&m, 2, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT); /* a second hello */

    dmm__ipc_msg_init(&m, DMM_IPC_CREATE);
    snprintf(m.name, sizeof m.name, "x");
    m.bytes = 2 * MIB;
    m.access = DMM_ACCESS_READ_WRITE;
    len = encode(&m, 7, buf); /* skipped numbers */
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(r.text, "out of order"));
    len = encode(&m, 2, buf);
    buf[DMM_IPC_HEADER + 2] = '*'; /* a name byte outside the alphabet */
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    m.flags = 0x80;
    len = encode(&m, 2, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    m.flags = 0;
    m.bytes = UINT64_MAX;
    len = encode(&m, 2, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    dmm__ipc_msg_init(&m, DMM_IPC_REPLY); /* a reply from a client */
    len = encode(&m, 2, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_INVALID_ARGUMENT);
    dmm__ipc_msg_init(&m, DMM_IPC_ATTACH); /* a name that does not exist (2 was the refused create's) */
    snprintf(m.name, sizeof m.name, "nope");
    m.access = DMM_ACCESS_READ;
    len = encode(&m, 3, buf);
    assert_int_equal(raw_request(fd, buf, len, -1, &r), DMM_ERR_UNKNOWN_ALLOCATION);
    for (int i = 0; i < 200; i++) { /* random records */
        size_t n = (size_t)(rand() % 300);
        for (size_t j = 0; j < n; j++) buf[j] = (uint8_t)rand();
        if (n >= 4) memcpy(buf, "DMMH", 4);
        if (n == 0) continue; /* an empty record reads as a close */
        int s = raw_request(fd, buf, n, -1, &r);
        assert_true(s != -1 && s != DMM_OK);
    }
    close(fd);
    dmm_ipc_census k = settled();
    assert_int_equal(k.regions, k0.regions);
    assert_int_equal(k.owned_bytes, k0.owned_bytes);
    assert_int_equal(k.handles, k0.handles);
    assert_true(k.errors >= k0.errors + 200);
    assert_int_equal(holder_fds(holder, fds0), fds0);
}

static void test_ten_thousand_connects_leave_the_holder_as_it_was(void **state) {
    (void)state;
    settled();
    size_t fds0 = holder_fds(holder, 0);
    for (int i = 0; i < 10000; i++) {
        if (i % 4 == 0) {
            dmm_ipc_client *c;
            DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
            dmm_ipc_disconnect(c);
            continue;
        }
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        int rc;
        for (int t = 0; (rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EAGAIN && t < 1000; t++)
            sleep_ms(1); /* the backlog is full for a moment */
        assert_int_equal(rc, 0);
        close(fd);
    }
    dmm_ipc_census k = settled();
    assert_int_equal(k.regions, 0);
    assert_int_equal(holder_fds(holder, fds0), fds0);
}

static void test_another_uid_is_refused(void **state) {
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: a second user needs root to simulate (setresuid)\n");
        skip();
    }
    dmm_ipc_census k0 = settled();
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) { /* euid 65534 (what SO_PEERCRED reports) with root's fsuid (so the 0600 socket is reachable) */
        if (setresuid(0, 65534, 0) != 0) _exit(10);
        setfsuid(0);
        dmm_ipc_client *c;
        _exit(dmm_ipc_connect(sock_path, &c) == DMM_OK ? 1 : 0);
    }
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0); /* refused */
    p = fork();
    if (p == 0) { /* a plain second user cannot even reach the socket (mode 0600, directory 0700) */
        if (setresuid(65534, 65534, 65534) != 0) _exit(10);
        dmm_ipc_client *c;
        dmm_status s = dmm_ipc_connect(sock_path, &c);
        _exit(s == DMM_OK ? 1 : strstr(dmm_last_error(), "Permission denied") ? 0 : 2);
    }
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    dmm_ipc_census k = settled();
    assert_int_equal(k.refused, k0.refused + 1);
    assert_int_equal(k.regions, k0.regions);
    char line[512];
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    bool said = false;
    while (fgets(line, sizeof line, f) != NULL) said |= strstr(line, "refused a connection from uid 65534") != NULL;
    fclose(f);
    assert_true(said);
}

static void test_the_socket_is_private_and_its_directory_checked(void **state) {
    (void)state;
    struct stat st;
    assert_int_equal(stat(sock_path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    int status = holder_refuses(sock_path); /* a second holder on a live socket */
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_equal(stat(sock_path, &st), 0); /* the live one's socket is untouched */
    char open_dir[80], path[128];
    snprintf(open_dir, sizeof open_dir, "%s/open", dir);
    assert_int_equal(mkdir(open_dir, 0777), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    snprintf(path, sizeof path, "%s/s", open_dir);
    status = holder_refuses(path);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_not_equal(access(path, F_OK), 0); /* nothing was made there */
    rmdir(open_dir);
}

static void test_the_limit_refuses_what_does_not_fit(void **state) {
    (void)state;
    stop_holder(holder);
    int st = 0;
    holder = start_holder("--limit", "16M", &st);
    assert_true(holder > 0);
    dmm_ipc_client *c;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_export ex;
    DMM_OK_OR_FAIL(dmm_ipc_create(c, "a", 10 * MIB, 0, &ex));
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];
    memcpy(token, ex.token, sizeof token);
    dmm_export_close(&ex);
    assert_int_equal(dmm_ipc_create(c, "b", 8 * MIB, 0, &ex), DMM_ERR_BUDGET);
    /* the holder's own words (its limit is a flag), then the governor's sentence, longer than a reply
     * holds: cut after a clause and said so, never mid-word */
    dmm_test_error_mentions("create 'b' of 8.0 MiB: over the holder's limit (10.0 MiB held of 16.0 MiB)",
                            "a larger --limit", "[...] (cut; the holder's log has the whole sentence)", NULL);
    dmm_ipc_census k = {.size = sizeof k};
    DMM_OK_OR_FAIL(dmm_ipc_census_get(c, &k));
    assert_int_equal(k.regions, 1);
    assert_int_equal(k.owned_bytes, 10 * MIB);
    DMM_OK_OR_FAIL(dmm_ipc_drop(c, "a", token));
    DMM_OK_OR_FAIL(dmm_ipc_create(c, "b", 16 * MIB, 0, &ex)); /* fits once "a" is gone */
    dmm_export_close(&ex);
    dmm_ipc_disconnect(c);
    stop_holder(holder); /* drops "b" on its way out */
    holder = start_holder(NULL, NULL, &st);
    assert_true(holder > 0);
}

/* The address space this process has mapped now (VmSize of /proc/self/status), 0 if unknown. */
static uint64_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned long long kib = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %llu kB", &kib) == 1) break;
    if (f != NULL) fclose(f);
    return (uint64_t)kib * 1024;
}

/* A holder without a limit asks for 1 TiB of address space; a process with less to give (here
 * RLIMIT_AS leaves 96 GiB; a sanitizer's layout does the same) still gets a holder: it starts and is
 * destroyed cleanly (the flood test then serves through one under TSan). */
static void test_a_holder_starts_where_the_address_space_is_short(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/short", dir);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        uint64_t now = mapped_bytes();
        struct rlimit rl = {.rlim_cur = now + ((uint64_t)96 << 30), .rlim_max = now + ((uint64_t)96 << 30)};
        if (now == 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
        dmm_ipc_holder_config cfg = {.size = sizeof cfg, .socket_path = path};
        dmm_ipc_holder *h = NULL;
        if (dmm_ipc_holder_create(&cfg, &h) != DMM_OK) {
            fprintf(stderr, "holder under RLIMIT_AS: %s\n", dmm_last_error());
            _exit(2);
        }
        _exit(dmm_ipc_holder_destroy(h) == DMM_OK ? 0 : 3);
    }
    int st = 0;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

#endif /* DMM_CLI_PATH */

int main(void) {
#ifndef DMM_CLI_PATH
    printf("SKIP: the dmm tool is not built (DMM_BUILD_TOOLS=OFF)\n");
    return DMM_TEST_SKIP;
#else
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_region_outlives_its_creator_killed_with_sigkill),
        cmocka_unit_test(test_a_private_region_dies_with_its_connection),
        cmocka_unit_test(test_a_hundred_client_crashes_leave_only_the_named_regions),
        cmocka_unit_test(test_hostile_messages_get_an_error_reply_and_change_nothing),
        cmocka_unit_test(test_ten_thousand_connects_leave_the_holder_as_it_was),
        cmocka_unit_test(test_another_uid_is_refused),
        cmocka_unit_test(test_the_socket_is_private_and_its_directory_checked),
        cmocka_unit_test(test_the_limit_refuses_what_does_not_fit),
        cmocka_unit_test(test_a_holder_starts_where_the_address_space_is_short),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
#endif
}
