/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/holder.c — the holder process's body (dmm/ipc.h): its life (socket, memory: a driver, an
 * exportable arena charged to its own governor under the limit) and the loop that serves it; who gets
 * a connection is connections.c's, what a request does is requests.c's.
 *
 * Idea: one thread polls the listening socket and every connection. A readable connection yields one
 * record (SOCK_SEQPACKET: never a partial one, so the holder never waits inside a read), which gets
 * exactly one reply, sent without waiting (a client whose queue is full is disconnected). A closed
 * connection (a client's exit or crash) drops what was its own: its private regions, and its named
 * ones whose token it never took. The loop sleeps until a descriptor is ready or the nearest timer:
 * a hello deadline, or the retry of a paused listening socket; with neither, it sleeps without one
 * (census.wakeups counts every return from poll, so a test can see an idle holder stay asleep).
 *
 * Trade-off: one request at a time, in one thread: requests are rare and short (a commit or an
 * export), and a single thread needs no lock around the region table.
 *
 * Invariants: holder_types.h; every conns[i].fd is open and ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "dmm/arena.h"
#include "driver/call.h"
#include "ipc/holder_types.h"

/* The address space the holder's arena reserves: four times the limit (the VA of dropped regions is
 * reused, so that is room for its fragmentation), at least HOLDER_MIN_RESERVE, at most
 * HOLDER_MAX_RESERVE, which is also what an unlimited holder asks for. Where the process has less to
 * give, create halves it, down to HOLDER_MIN_RESERVE but never below the limit (then it does not start,
 * and says why). */
#define HOLDER_MIN_RESERVE ((uint64_t)1 << 30)
#define HOLDER_MAX_RESERVE ((uint64_t)1 << 40)

static uint64_t holder_reserve_bytes(uint64_t limit) {
    if (limit == 0 || limit > HOLDER_MAX_RESERVE / 4) return HOLDER_MAX_RESERVE;
    uint64_t r = HOLDER_MIN_RESERVE;
    while (r < 4 * limit) r *= 2;
    return r;
}

dmm_status dmm_ipc_holder_create(const dmm_ipc_holder_config *cfg, dmm_ipc_holder **out) {
    static const char op[] = "dmm_ipc_holder_create";
    if (cfg == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the config and the output must be non-NULL", op);
    const size_t v1 = offsetof(dmm_ipc_holder_config, driver) + sizeof(dmm_driver *);
    if (cfg->size < v1)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "%s: the config's size is %u bytes; set .size = "
                                                   "sizeof(dmm_ipc_holder_config) (%zu)", op, cfg->size, sizeof *cfg);
    dmm_ipc_holder_config c = {0};
    memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
    if (c.hello_deadline_ms == 0) c.hello_deadline_ms = DMM_IPC_HELLO_DEADLINE_MS;
    if (c.max_connections == 0) c.max_connections = DMM_IPC_MAX_CONNECTIONS;
    if (c.max_connections_per_uid == 0)
        c.max_connections_per_uid = DMM_IPC_MAX_CONNECTIONS_PER_UID < c.max_connections ? DMM_IPC_MAX_CONNECTIONS_PER_UID
                                                                                        : c.max_connections;
    if (c.hello_deadline_ms > 600000 || c.max_connections > 65536 || c.max_connections_per_uid > c.max_connections)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: hello deadline %u ms, %u connections, %u per uid: the deadline must be at most "
                             "600000 ms, the connections at most 65536, and those of one uid at most all of them",
                             op, c.hello_deadline_ms, c.max_connections, c.max_connections_per_uid);
    dmm_ipc_holder *h = calloc(1, sizeof *h);
    if (h == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the holder", op);
    h->listener.fd = h->listener.folder_fd = -1;
    h->reserve_fd = -1;
    h->uid = (uint32_t)geteuid();
    h->hello_deadline_ns = (uint64_t)c.hello_deadline_ms * 1000000u;
    h->max_conns = c.max_connections;
    h->max_per_uid = c.max_connections_per_uid;
    h->conns = calloc(h->max_conns, sizeof *h->conns);
    h->polls = calloc((size_t)h->max_conns + 2, sizeof *h->polls);
    dmm_status s = DMM_OK;
    if (h->conns == NULL || h->polls == NULL)
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for %u connections", op, h->max_conns);
    if (s == DMM_OK && (h->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        s = dmm_error_set(DMM_ERR_DRIVER, "%s: no descriptor for the reserve (/dev/null, errno %d)", op, e);
    }
    if (s == DMM_OK && (cfg->socket_path == NULL || strlen(cfg->socket_path) >= sizeof h->path))
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the socket path must be given and shorter than %zu bytes", op,
                          sizeof h->path);
    if (s == DMM_OK) {
        snprintf(h->path, sizeof h->path, "%s", cfg->socket_path);
        h->drv = cfg->driver;
        if (h->drv == NULL) {
            s = dmm_host_driver_create(NULL, &h->drv);
            h->own_drv = s == DMM_OK;
        }
    }
    if (s == DMM_OK) s = dmm_governor_create(NULL, &h->gov);
    if (s == DMM_OK)
        s = dmm_governor_set_limit(h->gov, h->drv->device, DMM_AXIS_OWNED,
                                   cfg->limit_bytes ? cfg->limit_bytes : DMM_UNLIMITED);
    dmm_holder_config hc = {sizeof hc, "dmm hold", 0, NULL, NULL};
    if (s == DMM_OK) s = dmm_governor_holder_register(h->gov, &hc, &h->gh);
    if (s == DMM_OK) s = dmm_lease_reserve(h->gh, h->drv->device, DMM_ROLE_WEIGHTS, 0, 0, &h->lease);
    dmm_accounting acct;
    if (s == DMM_OK) s = dmm_governor_accounting(h->gov, h->lease, &acct);
    /* halved down to HOLDER_MIN_RESERVE, never below the limit: the holder could not hold that */
    uint64_t reserve = holder_reserve_bytes(cfg->limit_bytes);
    uint64_t least = cfg->limit_bytes > HOLDER_MIN_RESERVE ? cfg->limit_bytes : HOLDER_MIN_RESERVE;
    while (s == DMM_OK) {
        dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = reserve, .accounting = &acct, .exportable = true};
        s = dmm_arena_create(h->drv, &ac, &h->arena);
        if (s != DMM_ERR_OUT_OF_MEMORY || reserve / 2 < least) break;
        reserve /= 2; /* less address space than asked for: a sanitizer's layout, a vm limit */
        s = DMM_OK;
        dmm_clear_error();
    }
    size_t gran = 0;
    if (s == DMM_OK) s = dmm__drv_granularity(h->drv, &gran);
    h->gran = gran;
    if (s == DMM_OK) s = dmm__ipc_listen(h->path, &h->listener);
    if (s != DMM_OK) {
        dmm__error_wrap(s, "%s: the holder on '%s' did not start", op, cfg->socket_path ? cfg->socket_path : "(NULL)");
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        (void)dmm_ipc_holder_destroy(h);
        return dmm__error_restore(&why);
    }
    dmm_log(DMM_LOG_INFO, "dmm hold: serving uid %u on %s (limit %llu bytes, %llu bytes of address space; hello "
             "deadline %u ms; at most %u connections, %u per uid)", (unsigned)h->uid, h->path,
             (unsigned long long)cfg->limit_bytes, (unsigned long long)reserve, c.hello_deadline_ms, h->max_conns,
             h->max_per_uid);
    *out = h;
    return DMM_OK;
}

/* Serves one readable connection; false when it closed (and was removed). */
static bool on_readable(dmm_ipc_holder *h, size_t i) {
    ipc_conn *c = &h->conns[i];
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    dmm_ipc_rx rx;
    dmm_status s = dmm__ipc_recv(c->fd, buf, sizeof buf, true, &rx);
    if (s == DMM_ERR_BUSY) return true;
    if (s != DMM_OK || rx.closed) {
        dmm__ipc_close_fds(rx.fds, rx.nfds);
        dmm__holder_conn_close(h, i);
        return false;
    }
    dmm_ipc_msg reply;
    int fds[DMM_EXPORT_MAX_CHUNKS];
    size_t nfds = 0;
    dmm__holder_handle(h, c, buf, &rx, &reply, fds, &nfds);
    s = dmm__ipc_send(c->fd, &reply, fds, nfds);
    dmm__ipc_close_fds(fds, nfds);
    if (s != DMM_OK) { /* the client is gone (or stuck): drop the connection */
        dmm_log(DMM_LOG_INFO, "dmm hold: the reply to pid %d could not be sent (%s); closing its connection",
                 (int)c->pid, dmm_last_error());
        dmm__holder_conn_close(h, i);
        return false;
    }
    return true;
}

/* The earlier of two times, 0 meaning "none". */
static uint64_t earlier(uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : a < b ? a : b; }

dmm_status dmm_ipc_holder_serve(dmm_ipc_holder *h, int stop_fd, int timeout_ms) {
    if (h == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_holder_serve: the holder is NULL");
    const uint64_t idle_ns = timeout_ms >= 0 ? (uint64_t)timeout_ms * 1000000u : 0;
    uint64_t idle_end = timeout_ms >= 0 ? dmm_now_ns() + idle_ns : 0;
    for (;;) {
        uint64_t now = dmm_now_ns();
        uint64_t next = dmm__holder_expire(h, now);
        if (h->paused_until_ns != 0 && now >= h->paused_until_ns) h->paused_until_ns = 0;
        next = earlier(next, h->paused_until_ns);
        if (timeout_ms >= 0) {
            if (now >= idle_end) return DMM_OK; /* that long with nothing to do */
            next = earlier(next, idle_end);
        }
        int wait = next == 0 ? -1 : (int)((next - now + 999999u) / 1000000u);
        struct pollfd *p = h->polls;
        size_t n = 0, listen_at = SIZE_MAX, stop_at = SIZE_MAX;
        if (h->paused_until_ns == 0) {
            listen_at = n;
            p[n++] = (struct pollfd){h->listener.fd, POLLIN, 0};
        }
        if (stop_fd >= 0) {
            stop_at = n;
            p[n++] = (struct pollfd){stop_fd, POLLIN, 0};
        }
        size_t first = n;
        for (size_t i = 0; i < h->nconns; i++) p[n++] = (struct pollfd){h->conns[i].fd, POLLIN, 0};
        int r = poll(p, n, wait);
        h->wakeups++;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            return dmm_error_set(DMM_ERR_DRIVER, "dmm_ipc_holder_serve: poll failed (errno %d)", e);
        }
        if (r == 0) continue; /* a timer: handled above */
        if (timeout_ms >= 0) idle_end = dmm_now_ns() + idle_ns;
        if (stop_at != SIZE_MAX && p[stop_at].revents != 0) return DMM_OK;
        /* connections first, from the last (closing one moves the last into its slot) */
        for (size_t k = n; k-- > first;) {
            size_t i = k - first;
            if (p[k].revents == 0 || i >= h->nconns || h->conns[i].fd != p[k].fd) continue;
            if (p[k].revents & POLLIN) (void)on_readable(h, i);
            else dmm__holder_conn_close(h, i); /* POLLHUP / POLLERR without data */
        }
        if (listen_at != SIZE_MAX && (p[listen_at].revents & POLLIN)) dmm__holder_accept(h, dmm_now_ns());
    }
}

dmm_status dmm_ipc_holder_census(dmm_ipc_holder *h, dmm_ipc_census *out) {
    if (h == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_holder_census: the holder and the output must be non-NULL");
    if (out->size < DMM_IPC_CENSUS_V1_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_ipc_holder_census: set .size = sizeof(dmm_ipc_census) (%zu)",
                             sizeof *out);
    dmm_ipc_census k;
    dmm__holder_census(h, &k);
    dmm__ipc_census_copy(out, &k);
    return DMM_OK;
}

dmm_status dmm_ipc_holder_destroy(dmm_ipc_holder *h) {
    if (h == NULL) return DMM_OK;
    dmm_error_kept first = {0};
    while (h->nconns > 0) dmm__holder_conn_close(h, h->nconns - 1);
    if (h->arena != NULL) {
        dmm__error_keep(&first, dmm__holder_drop_all(h));
        if (dmm__error_keep(&first, dmm_mechanism_destroy(h->arena)) != DMM_OK)
            dmm_log(DMM_LOG_ERROR, "dmm hold: the arena could not be destroyed (%s); its memory stays with the process",
                     dmm_last_error());
    }
    if (h->lease != 0) dmm__error_keep(&first, dmm_lease_release(h->gov, h->lease));
    if (h->gh != NULL) dmm__error_keep(&first, dmm_governor_holder_unregister(h->gh));
    if (h->gov != NULL) dmm__error_keep(&first, dmm_governor_destroy(h->gov));
    dmm__ipc_unlisten(&h->listener); /* the file only if it is still the one we bound */
    if (h->reserve_fd >= 0) close(h->reserve_fd);
    if (h->own_drv) dmm_driver_destroy(h->drv);
    free(h->regions);
    free(h->conns);
    free(h->polls);
    free(h);
    return dmm__error_restore(&first);
}
