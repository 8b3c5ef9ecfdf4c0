/* SPDX-License-Identifier: Apache-2.0 */
/* tests/soak/soak_holder.c — the holder soak (issue 35 acceptance 5; docs/security.md). Not a CTest
 * test: run it by hand for as long as you like (`build/tests/soak_holder --seconds 3600`).
 *
 * A holder process (the library's, over the fault driver wrapping the host driver) keeps 40 named
 * regions, 20 of them published read-only. A planner thread inside it makes one driver call fail now
 * and then (a create, a map or an export, every 50th to 400th call), so requests are refused half-way
 * and must change nothing. 20 client processes loop: attach a region read-write and write it, or
 * read-only and check its bytes, create and drop a scratch region, create a private one, and crash
 * (SIGKILL, at a random point, a request half-sent included); the parent starts a new one in place of
 * each that died (a scratch region its predecessor left is dropped by the next in the slot, or at the
 * end). At the start and at the end (clients stopped) it reports the holder's census
 * (regions, pending and private regions, region and owned bytes, driver handles, connections) and its
 * descriptors (/proc/PID/fd) and resident memory (VmRSS), and fails unless the end equals the start:
 * the 40 regions, nothing pending or private, no handle or descriptor more.
 *
 * Usage: soak_holder [--seconds N] [--clients N]   (defaults: 60, 20)
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dmm/dmm.h"
#include "ipc/wire.h"
#include "holder_kit.h"

#define fd_count dmm_test_fd_count

#define REGIONS 40
#define READ_ONLY 20 /* regions 0 … 19 are published read-only; 20 … 39 stay read-write */
#define MIB ((uint64_t)1 << 20)
#define MAX_CLIENTS 256

typedef struct soak_scratch {
    _Atomic int live;                      /* 1 from its creation (taken) until its drop */
    char name[48];
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];
} soak_scratch;

typedef struct soak_table {
    uint8_t tokens[REGIONS][DMM_EXPORT_TOKEN_BYTES];
    soak_scratch scratch[MAX_CLIENTS];     /* per client slot: a scratch region a crash may leave behind */
    atomic_bool stop;                      /* the clients finish their round and exit */
    _Atomic uint64_t rounds, crashes, refused_by_faults, wrong_bytes, other_errors;
} soak_table;

static char dir[48], sock_path[96];
static soak_table *table; /* shared with the clients (MAP_SHARED) */

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint8_t region_byte(int k) { return (uint8_t)(0x30 + k); }

/* ---- the holder ---- */

static dmm_driver *fault;
static atomic_bool holder_stopping;

static void *planner(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    const dmm_driver_op ops[] = {DMM_OP_CREATE, DMM_OP_MAP, DMM_OP_SET_ACCESS};
    while (!atomic_load(&holder_stopping)) {
        dmm_driver_op op = ops[rnd(&seed) % 3];
        (void)dmm_fault_plan(fault, op, 50 + rnd(&seed) % 350, 1, DMM_ERR_OUT_OF_MEMORY);
        sleep_ms(100);
    }
    return NULL;
}

static pid_t holder_fork(int stop_read) {
    pid_t p = fork();
    if (p != 0) return p;
    dmm_driver *host;
    if (dmm_host_driver_create(NULL, &host) != DMM_OK || dmm_fault_driver_create(host, &fault) != DMM_OK) _exit(2);
    dmm_ipc_holder_config cfg = {.size = sizeof cfg, .socket_path = sock_path, .driver = fault};
    dmm_ipc_holder *h;
    if (dmm_ipc_holder_create(&cfg, &h) != DMM_OK) {
        fprintf(stderr, "holder: %s\n", dmm_last_error());
        _exit(3);
    }
    pthread_t t;
    pthread_create(&t, NULL, planner, (void *)(uintptr_t)getpid());
    dmm_status s = dmm_ipc_holder_serve(h, stop_read, -1);
    atomic_store(&holder_stopping, true);
    pthread_join(t, NULL);
    dmm_fault_clear(fault);
    dmm_status d = dmm_ipc_holder_destroy(h);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
    _exit(s == DMM_OK && d == DMM_OK ? 0 : 4);
}

/* ---- a client: loops until killed (by itself or by the parent at the end) ---- */

static void note(dmm_status s) {
    if (s == DMM_OK) return;
    if (strstr(dmm_last_error(), "fault driver") != NULL || s == DMM_ERR_OUT_OF_MEMORY) table->refused_by_faults++;
    else table->other_errors++;
}

static void maybe_crash(uint64_t *seed, int one_in) {
    if (rnd(seed) % (uint64_t)one_in == 0) raise(SIGKILL);
}

static void client_main(int slot, uint64_t seed) {
    dmm_driver *d;
    dmm_mechanism *arena;
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = (uint64_t)1 << 32};
    if (dmm_host_driver_create(NULL, &d) != DMM_OK || dmm_arena_create(d, &ac, &arena) != DMM_OK) _exit(20);
    soak_scratch *mine = &table->scratch[slot];
    while (!atomic_load(&table->stop)) {
        dmm_ipc_client *c;
        dmm_status s = dmm_ipc_connect(sock_path, &c);
        if (s != DMM_OK) {
            note(s);
            sleep_ms(10);
            continue;
        }
        for (int step = 0; step < 8; step++) {
            int k = (int)(rnd(&seed) % REGIONS);
            bool ro = k < READ_ONLY;
            dmm_export ex;
            dmm_allocation al;
            char name[32];
            snprintf(name, sizeof name, "soak-%02d", k);
            switch (rnd(&seed) % 4) {
            case 0:
            case 1: /* attach, map, write (read-write regions) or check (read-only ones), detach */
                s = dmm_ipc_attach(c, name, table->tokens[k], ro ? DMM_ACCESS_READ : DMM_ACCESS_READ_WRITE, &ex);
                note(s);
                if (s != DMM_OK) break;
                s = dmm_import(arena, &ex, ro ? DMM_ACCESS_READ : DMM_ACCESS_READ_WRITE, &al);
                dmm_export_close(&ex);
                note(s);
                if (s != DMM_OK) break;
                maybe_crash(&seed, 200); /* with the region mapped */
                if (ro) {
                    for (size_t i = 0; i < al.bytes; i += 4096)
                        if (((uint8_t *)al.ptr)[i] != region_byte(k)) table->wrong_bytes++;
                } else {
                    memset(al.ptr, region_byte(k), al.bytes); /* every writer writes the same bytes */
                }
                if (dmm_mechanism_release(arena, &al).state != DMM_RELEASE_COMPLETE) table->other_errors++;
                break;
            case 2: /* a scratch region: created, taken, dropped (or left by a crash, for the next one in this slot) */
                if (atomic_load(&mine->live)) {
                    s = dmm_ipc_drop(c, mine->name, mine->token);
                    note(s);
                    if (s == DMM_OK) atomic_store(&mine->live, 0);
                    break;
                }
                snprintf(mine->name, sizeof mine->name, "scratch-%d", slot);
                s = dmm_ipc_create(c, mine->name, 2 * MIB, 0, &ex);
                note(s);
                if (s != DMM_OK) break;
                memcpy(mine->token, ex.token, sizeof mine->token);
                atomic_store(&mine->live, 1);
                dmm_export_close(&ex);
                maybe_crash(&seed, 50); /* with the scratch region made and not yet dropped */
                s = dmm_ipc_drop(c, mine->name, mine->token);
                note(s);
                if (s == DMM_OK) atomic_store(&mine->live, 0);
                break;
            default: /* a private region, and a request half-sent */
                snprintf(name, sizeof name, "private-%d", slot);
                s = dmm_ipc_create(c, name, 2 * MIB, DMM_IPC_PRIVATE, &ex);
                if (s == DMM_OK) dmm_export_close(&ex);
                else if (s != DMM_ERR_INVALID_ARGUMENT) note(s); /* this connection made it already */
                if (rnd(&seed) % 100 == 0) {
                    uint8_t half[8] = {0x44, 0x4d, 0x4d, 0x48, DMM_IPC_VERSION, 0, 2, 0};
                    (void)send(dmm_ipc_client_fd(c), half, sizeof half, MSG_NOSIGNAL);
                    raise(SIGKILL);
                }
            }
            table->rounds++;
            maybe_crash(&seed, 300);
        }
        dmm_ipc_disconnect(c);
    }
    dmm_mechanism_destroy(arena);
    dmm_driver_destroy(d);
    _exit(0);
}

/* ---- the parent ---- */


static long rss_kib(pid_t pid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    if (f != NULL) fclose(f);
    return kib;
}

static bool census(dmm_ipc_census *k) {
    for (int i = 0; i < 100; i++) {
        dmm_ipc_client *c;
        if (dmm_ipc_connect(sock_path, &c) == DMM_OK) {
            k->size = sizeof *k;
            dmm_status s = dmm_ipc_census_get(c, k);
            dmm_ipc_disconnect(c);
            if (s == DMM_OK) return true;
        }
        sleep_ms(20);
    }
    return false;
}

static void report(const char *when, pid_t holder, const dmm_ipc_census *k) {
    printf("%-5s regions %llu (pending %llu, private %llu), region bytes %llu, owned bytes %llu, handles %llu, "
           "connections %llu | holder descriptors %zu, VmRSS %ld KiB\n",
           when, (unsigned long long)k->regions, (unsigned long long)k->pending_regions,
           (unsigned long long)k->private_regions, (unsigned long long)k->region_bytes,
           (unsigned long long)k->owned_bytes, (unsigned long long)k->handles, (unsigned long long)k->connections,
           fd_count(holder), rss_kib(holder));
    fflush(stdout);
}

/* The census once only the asking connection is left (the dead clients' connections noticed). */
static bool settled(dmm_ipc_census *k) {
    for (int i = 0; i < 500; i++) {
        if (!census(k)) return false;
        if (k->connections == 1) return true;
        sleep_ms(20);
    }
    return false;
}

int main(int argc, char **argv) {
    uint64_t seconds = 60, nclients = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0) seconds = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--clients") == 0) nclients = strtoull(argv[i + 1], NULL, 10);
    }
    if (seconds == 0 || nclients == 0 || nclients > MAX_CLIENTS) {
        fprintf(stderr, "usage: soak_holder [--seconds N] [--clients N (1 to %d)]\n", MAX_CLIENTS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    table = mmap(NULL, sizeof *table, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (table == MAP_FAILED) return 1;
    snprintf(dir, sizeof dir, "/tmp/dmm-soak-XXXXXX");
    if (mkdtemp(dir) == NULL) return 1;
    snprintf(sock_path, sizeof sock_path, "%s/s", dir);
    int stop[2];
    if (pipe(stop) != 0) return 1;
    pid_t holder = holder_fork(stop[0]);
    dmm_ipc_client *c = NULL;
    for (int i = 0; i < 500 && dmm_ipc_connect(sock_path, &c) != DMM_OK; i++) sleep_ms(10);
    if (c == NULL) {
        fprintf(stderr, "soak: the holder did not start: %s\n", dmm_last_error());
        return 1;
    }
    /* the 40 regions, filled through a mapping of our own (made before any read-only publication) */
    dmm_driver *d;
    dmm_mechanism *arena;
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = (uint64_t)1 << 34};
    if (dmm_host_driver_create(NULL, &d) != DMM_OK || dmm_arena_create(d, &ac, &arena) != DMM_OK) return 1;
    for (int k = 0; k < REGIONS; k++) {
        char name[32];
        snprintf(name, sizeof name, "soak-%02d", k);
        dmm_export ex;
        dmm_allocation al;
        dmm_status s;
        while ((s = dmm_ipc_create(c, name, 4 * MIB, 0, &ex)) != DMM_OK) { /* a planned fault: again */
            if (s != DMM_ERR_OUT_OF_MEMORY) {
                fprintf(stderr, "soak: create %s: %s\n", name, dmm_last_error());
                return 1;
            }
        }
        memcpy(table->tokens[k], ex.token, DMM_EXPORT_TOKEN_BYTES);
        while ((s = dmm_import(arena, &ex, DMM_ACCESS_READ_WRITE, &al)) != DMM_OK) {
        }
        dmm_export_close(&ex);
        memset(al.ptr, region_byte(k), al.bytes);
        dmm_mechanism_release(arena, &al);
        if (k < READ_ONLY) {
            while ((s = dmm_ipc_attach(c, name, table->tokens[k], DMM_ACCESS_READ, &ex)) != DMM_OK) {
            }
            dmm_export_close(&ex);
        }
    }
    dmm_ipc_disconnect(c);
    dmm_mechanism_destroy(arena);
    dmm_driver_destroy(d);
    dmm_ipc_census k0;
    if (!settled(&k0)) return 1;
    report("start", holder, &k0);
    size_t fds0 = fd_count(holder);

    pid_t kids[MAX_CLIENTS];
    uint64_t seed = (uint64_t)time(NULL);
    for (uint64_t i = 0; i < nclients; i++)
        if ((kids[i] = fork()) == 0) client_main((int)i, rnd(&seed));
    time_t end = time(NULL) + (time_t)seconds;
    while (time(NULL) < end) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) {
            sleep_ms(20);
            continue;
        }
        for (uint64_t i = 0; i < nclients; i++)
            if (kids[i] == p) { /* crashed: start another in its place */
                table->crashes++;
                uint64_t s = rnd(&seed);
                if ((kids[i] = fork()) == 0) client_main((int)i, s);
            }
    }
    atomic_store(&table->stop, true); /* each finishes its round (or crashes in it) and exits */
    for (uint64_t i = 0; i < nclients; i++) waitpid(kids[i], NULL, 0);
    /* a scratch region a crash left behind (named, taken: it stays, as promised) is dropped here */
    uint64_t leftovers = 0;
    if (dmm_ipc_connect(sock_path, &c) != DMM_OK) return 1;
    for (uint64_t i = 0; i < nclients; i++)
        if (atomic_load(&table->scratch[i].live)) {
            while (dmm_ipc_drop(c, table->scratch[i].name, table->scratch[i].token) == DMM_ERR_OUT_OF_MEMORY) {
            }
            leftovers++;
        }
    dmm_ipc_disconnect(c);
    dmm_ipc_census k1;
    if (!settled(&k1)) return 1;
    size_t fds1 = fd_count(holder);
    report("end", holder, &k1);
    printf("soak: %llu s, %llu clients: %llu rounds, %llu crashes (each restarted), %llu requests refused by a "
           "planned driver fault, %llu wrong bytes read, %llu other errors; %llu scratch regions left by crashes "
           "after their creation, dropped at the end\n",
           (unsigned long long)seconds, (unsigned long long)nclients, (unsigned long long)table->rounds,
           (unsigned long long)table->crashes, (unsigned long long)table->refused_by_faults,
           (unsigned long long)table->wrong_bytes, (unsigned long long)table->other_errors,
           (unsigned long long)leftovers);
    bool same = k1.regions == k0.regions && k1.pending_regions == 0 && k1.private_regions == 0 &&
                k1.owned_bytes == k0.owned_bytes && k1.handles == k0.handles && fds1 == fds0 &&
                table->wrong_bytes == 0;
    if (write(stop[1], "x", 1) != 1) return 1;
    int st;
    waitpid(holder, &st, 0);
    bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("soak: %s; holder stopped %s\n", same ? "nothing leaked (census and descriptors as at the start)"
                                                 : "LEAK: the end differs from the start",
           clean ? "cleanly" : "with an error");
    rmdir(dir);
    return same && clean ? 0 : 1;
}
