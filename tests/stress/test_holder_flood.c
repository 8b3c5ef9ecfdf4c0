/* SPDX-License-Identifier: Apache-2.0 */
/* Stress: the holder under a flood (issue 35 acceptance 3; docs/security.md). A holder process (forked
 * before any thread, serving through the library) gets 500 connections that never speak and never
 * reconnect, while 50 client threads create, fill, attach read-only, read, drop and close regions in a
 * loop for DMM_HOLDER_FLOOD_SECONDS (default 10; 60 for the run), with a hello deadline of
 * DMM_HOLDER_FLOOD_HELLO_MS (default 1000; the holder's own default is 3000).
 *
 * What must hold, counted, never timed:
 *   - every silent connection is closed by the holder, with a reply saying why: at its hello deadline
 *     or earlier, when a newcomer needed its slot (census: hello_timeouts + evicted ≥ 500);
 *   - every client is served: each finishes at least one whole round, and no request fails except
 *     the refusals the protocol promises (a read-write attach of a region published read-only);
 *   - the run ends with zero orphaned regions: no region, no owned byte, no handle;
 *   - afterwards the idle holder sleeps: between two census requests three hello deadlines apart it
 *     wakes only for the second request (census.wakeups), so it keeps no timer shorter than its
 *     deadlines.
 * Runs under TSan with the stress suite (the threads share nothing but the holder). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/sock.h"
#include "testkit.h"
#include "holder_kit.h"

#define sleep_ms dmm_test_sleep_ms
#define census() dmm_test_holder_census(sock_path)

#define SILENT 500
#define CLIENTS 50
#define MIB ((uint64_t)1 << 20)

static char dir[48], sock_path[96];
static uint64_t seconds = 10, hello_ms = 1000;
static struct timespec end_at;

static bool past_end(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec > end_at.tv_sec || (t.tv_sec == end_at.tv_sec && t.tv_nsec >= end_at.tv_nsec);
}


static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long long x = v != NULL ? strtoull(v, &end, 10) : 0;
    return v != NULL && end != v && *end == '\0' && x > 0 ? (uint64_t)x : fallback;
}

/* ---- the holder: a child process serving until its stop pipe is readable ---- */
static pid_t holder_fork(int stop_read) {
    pid_t p = fork();
    if (p != 0) return p;
    dmm_ipc_holder_config cfg = {.size = sizeof cfg, .socket_path = sock_path, .hello_deadline_ms = (uint32_t)hello_ms};
    dmm_ipc_holder *h;
    if (dmm_ipc_holder_create(&cfg, &h) != DMM_OK) {
        fprintf(stderr, "holder: %s\n", dmm_last_error());
        _exit(2);
    }
    dmm_status s = dmm_ipc_holder_serve(h, stop_read, -1);
    dmm_ipc_census k = {.size = sizeof k};
    dmm_ipc_holder_census(h, &k);
    dmm_status d = dmm_ipc_holder_destroy(h);
    _exit(s == DMM_OK && d == DMM_OK && k.regions == 0 ? 0 : 3);
}

/* ---- a busy client ---- */
typedef struct client {
    pthread_t thread;
    int index;
    uint64_t rounds, retries, refusals_seen, unexpected;
    char unexpected_msg[512];
} client;

static void note(client *c, dmm_status s, const char *what) {
    if (s == DMM_OK) return;
    if (c->unexpected++ == 0)
        snprintf(c->unexpected_msg, sizeof c->unexpected_msg, "%s: %s: %s", what, dmm_status_str(s), dmm_last_error());
}

static dmm_ipc_client *connect_retrying(client *c) {
    for (int i = 0; i < 1000; i++) {
        dmm_ipc_client *cl;
        dmm_status s = dmm_ipc_connect(sock_path, &cl);
        if (s == DMM_OK) return cl;
        if (s != DMM_ERR_BUSY) {
            note(c, s, "connect");
            return NULL;
        }
        c->retries++; /* a refusal with the holder's sentence: try again */
        sleep_ms(5);
    }
    note(c, DMM_ERR_BUSY, "connect (1000 refusals in a row)");
    return NULL;
}

static void *client_main(void *arg) {
    client *c = arg;
    dmm_driver *d = NULL;
    dmm_mechanism *arena = NULL;
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = (uint64_t)1 << 30};
    if (dmm_host_driver_create(NULL, &d) != DMM_OK || dmm_arena_create(d, &ac, &arena) != DMM_OK) {
        note(c, DMM_ERR_DRIVER, "arena");
        return NULL;
    }
    for (uint64_t n = 0; !past_end() && c->unexpected == 0; n++) {
        dmm_ipc_client *cl = connect_retrying(c);
        if (cl == NULL) break;
        char name[64];
        snprintf(name, sizeof name, "flood-%d-%llu", c->index, (unsigned long long)n);
        dmm_export ex;
        dmm_allocation w, r;
        dmm_status s = dmm_ipc_create(cl, name, 2 * MIB, 0, &ex);
        note(c, s, "create");
        if (s != DMM_OK) {
            dmm_ipc_disconnect(cl);
            break;
        }
        uint8_t token[DMM_EXPORT_TOKEN_BYTES];
        memcpy(token, ex.token, sizeof token);
        s = dmm_import(arena, &ex, DMM_ACCESS_READ_WRITE, &w);
        note(c, s, "import read-write");
        dmm_export_close(&ex);
        if (s == DMM_OK) memset(w.ptr, (int)(n & 0xff), w.bytes);
        s = dmm_ipc_attach(cl, name, token, DMM_ACCESS_READ, &ex); /* publishes it read-only */
        note(c, s, "attach read-only");
        if (s == DMM_OK) {
            s = dmm_import(arena, &ex, DMM_ACCESS_READ, &r);
            note(c, s, "import read-only");
            dmm_export_close(&ex);
            if (s == DMM_OK && ((uint8_t *)r.ptr)[r.bytes - 1] != (uint8_t)(n & 0xff)) note(c, DMM_ERR_INVALID_ARGUMENT, "bytes");
            if (s == DMM_OK && dmm_mechanism_release(arena, &r).state != DMM_RELEASE_COMPLETE)
                note(c, DMM_ERR_DRIVER, "release read-only");
        }
        if (dmm_ipc_attach(cl, name, token, DMM_ACCESS_READ_WRITE, &ex) == DMM_OK) {
            dmm_export_close(&ex);
            note(c, DMM_ERR_INVALID_ARGUMENT, "a read-write attach after the read-only publication was served");
        } else {
            c->refusals_seen++;
        }
        if (dmm_mechanism_release(arena, &w).state != DMM_RELEASE_COMPLETE) note(c, DMM_ERR_DRIVER, "release read-write");
        note(c, dmm_ipc_drop(cl, name, token), "drop");
        if (n % 2 == 0) { /* and a private one, left to die with the connection */
            snprintf(name, sizeof name, "flood-p-%d-%llu", c->index, (unsigned long long)n);
            s = dmm_ipc_create(cl, name, 2 * MIB, DMM_IPC_PRIVATE, &ex);
            note(c, s, "create private");
            if (s == DMM_OK) dmm_export_close(&ex);
        }
        dmm_ipc_disconnect(cl);
        if (c->unexpected == 0) c->rounds++;
    }
    if (dmm_mechanism_destroy(arena) != DMM_OK) note(c, DMM_ERR_DRIVER, "arena destroy");
    dmm_driver_destroy(d);
    return NULL;
}

static int silent_connect(void) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock_path, strlen(sock_path));
    int rc = -1;
    for (int t = 0; fd >= 0 && (rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EAGAIN && t < 2000; t++)
        sleep_ms(1);
    return rc == 0 ? fd : -1;
}

static void test_the_holder_serves_every_client_through_a_flood_and_then_sleeps(void **state) {
    (void)state;
    seconds = env_u64("DMM_HOLDER_FLOOD_SECONDS", 10);
    hello_ms = env_u64("DMM_HOLDER_FLOOD_HELLO_MS", 1000);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2048 && rl.rlim_max > rl.rlim_cur) { /* 500 silent sockets and 50 clients' */
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    snprintf(dir, sizeof dir, "/tmp/dmm-flood-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sock_path, sizeof sock_path, "%s/s", dir);
    int stop[2];
    assert_int_equal(pipe(stop), 0);
    pid_t holder = holder_fork(stop[0]);
    assert_true(holder > 0);
    dmm_ipc_client *probe = NULL;
    for (int i = 0; i < 2000 && dmm_ipc_connect(sock_path, &probe) != DMM_OK; i++) sleep_ms(10);
    assert_non_null(probe);
    dmm_ipc_disconnect(probe);

    int silent[SILENT];
    for (int i = 0; i < SILENT; i++) {
        silent[i] = silent_connect();
        if (silent[i] < 0) fail_msg("silent connection %d could not connect (errno %d)", i, errno);
    }
    clock_gettime(CLOCK_MONOTONIC, &end_at);
    end_at.tv_sec += (time_t)seconds;
    static client clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = (client){.index = i};
        assert_int_equal(pthread_create(&clients[i].thread, NULL, client_main, &clients[i]), 0);
    }
    uint64_t rounds = 0, retries = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(clients[i].thread, NULL);
        if (clients[i].unexpected != 0) fail_msg("client %d: %s", i, clients[i].unexpected_msg);
        if (clients[i].rounds == 0) fail_msg("client %d was never served a whole round", i);
        assert_int_equal(clients[i].refusals_seen, clients[i].rounds);
        rounds += clients[i].rounds;
        retries += clients[i].retries;
    }
    /* every silent connection was closed by the holder, with its reason */
    for (int i = 0; i < SILENT; i++) {
        struct pollfd p = {silent[i], POLLIN, 0};
        if (poll(&p, 1, 30000) != 1) fail_msg("silent connection %d is still open", i);
        uint8_t in[DMM_IPC_MAX_MESSAGE];
        dmm_ipc_rx rx;
        dmm_ipc_msg r;
        DMM_OK_OR_FAIL(dmm__ipc_recv(silent[i], in, sizeof in, false, &rx));
        assert_false(rx.closed);
        DMM_OK_OR_FAIL(dmm__ipc_decode(in, rx.len, &r));
        assert_int_equal(r.status, DMM_ERR_BUSY);
        assert_non_null(strstr(r.text, "hello"));
        close(silent[i]);
    }
    dmm_ipc_census k = census();
    for (int i = 0; i < 2000 && k.connections != 1; i++) {
        sleep_ms(5);
        k = census();
    }
    print_message("flood: %llu s, hello deadline %llu ms: %llu rounds by %d clients (%llu connect retries); %llu silent "
                  "connections closed at the deadline, %llu earlier for a newcomer; %llu wake-ups\n",
                  (unsigned long long)seconds, (unsigned long long)hello_ms, (unsigned long long)rounds, CLIENTS,
                  (unsigned long long)retries, (unsigned long long)k.hello_timeouts, (unsigned long long)k.evicted,
                  (unsigned long long)k.wakeups);
    assert_true(k.hello_timeouts + k.evicted >= SILENT);
    assert_int_equal(k.connections, 1);
    assert_int_equal(k.regions, 0); /* zero orphaned regions */
    assert_int_equal(k.pending_regions, 0);
    assert_int_equal(k.owned_bytes, 0);
    assert_int_equal(k.handles, 0);

    /* idle: one client stays connected (it said hello: no timer); the holder wakes only for its requests */
    dmm_ipc_client *watch;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &watch));
    dmm_ipc_census k0 = {.size = sizeof k0}, k1 = {.size = sizeof k1};
    DMM_OK_OR_FAIL(dmm_ipc_census_get(watch, &k0));
    sleep_ms((long)(3 * hello_ms));
    DMM_OK_OR_FAIL(dmm_ipc_census_get(watch, &k1));
    if (k1.wakeups - k0.wakeups > 2)
        fail_msg("the idle holder woke %llu times in three hello deadlines: a timer shorter than its deadlines",
                 (unsigned long long)(k1.wakeups - k0.wakeups));
    dmm_ipc_disconnect(watch);

    assert_int_equal(write(stop[1], "x", 1), 1);
    int st;
    assert_int_equal(waitpid(holder, &st, 0), holder);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(stop[0]);
    close(stop[1]);
    rmdir(dir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_holder_serves_every_client_through_a_flood_and_then_sleeps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
