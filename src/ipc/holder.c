/* src/ipc/holder.c — the holder process's body (dmm/ipc.h): its socket, its memory (a driver, an
 * exportable arena charged to its own governor under the limit), the connections it serves and the
 * loop that serves them; what a request does is requests.c's.
 *
 * Idea: one thread polls the listening socket and every connection. A new connection is accepted,
 * its peer's uid read from the kernel (SO_PEERCRED) and refused, with a logged sentence, unless it
 * is the holder's own; beyond DMM_IPC_MAX_CONNS connections are refused too. A readable connection
 * yields one record (SOCK_SEQPACKET: never a partial one), which gets exactly one reply. A closed
 * connection (a client's exit or crash) drops the regions private to it, nothing else.
 *
 * Trade-off: one request at a time, in one thread: requests are rare and short (a commit or an
 * export), and a single thread needs no lock around the region table.
 *
 * Invariants: holder_types.h; nconns ≤ DMM_IPC_MAX_CONNS; every conns[i].fd is open and ours.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "dmm/arena.h"
#include "driver/call.h"
#include "ipc/holder_types.h"

dmm_status dmm_ipc_holder_create(const dmm_ipc_holder_config *cfg, dmm_ipc_holder **out) {
    static const char op[] = "dmm_ipc_holder_create";
    if (cfg == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the config and the output must be non-NULL", op);
    if (cfg->size < sizeof *cfg)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "%s: the config's size is %u bytes; set .size = "
                                                   "sizeof(dmm_ipc_holder_config) (%zu)", op, cfg->size, sizeof *cfg);
    dmm_ipc_holder *h = calloc(1, sizeof *h);
    if (h == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the holder", op);
    h->listen_fd = -1;
    h->uid = (uint32_t)geteuid();
    dmm_status s = DMM_OK;
    if (cfg->socket_path == NULL || strlen(cfg->socket_path) >= sizeof h->path)
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
    if (s == DMM_OK) {
        dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = (uint64_t)1 << 40, .accounting = &acct,
                               .exportable = true};
        s = dmm_arena_create(h->drv, &ac, &h->arena);
    }
    size_t gran = 0;
    if (s == DMM_OK) s = dmm__drv_granularity(h->drv, &gran);
    h->gran = gran;
    if (s == DMM_OK) s = dmm__ipc_listen(h->path, &h->listen_fd);
    if (s != DMM_OK) {
        dmm__error_wrap(s, "%s: the holder on '%s' did not start", op, cfg->socket_path ? cfg->socket_path : "(NULL)");
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        (void)dmm_ipc_holder_destroy(h);
        return dmm__error_restore(&why);
    }
    dmm__log(DMM_LOG_INFO, "dmm hold: serving uid %u on %s (limit %llu bytes)", (unsigned)h->uid, h->path,
             (unsigned long long)cfg->limit_bytes);
    *out = h;
    return DMM_OK;
}

static void conn_close(dmm_ipc_holder *h, size_t i) {
    ipc_conn c = h->conns[i];
    close(c.fd);
    h->conns[i] = h->conns[--h->nconns];
    dmm__holder_conn_gone(h, c.id);
}

static void on_accept(dmm_ipc_holder *h) {
    int fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return; /* the client went away meanwhile (or EMFILE): nothing to do */
    uint32_t uid = 0;
    int32_t pid = 0;
    if (dmm__ipc_peer(fd, &uid, &pid) != DMM_OK) {
        h->refused++;
        dmm__log(DMM_LOG_WARN, "dmm hold: refused a connection: %s", dmm_last_error());
        close(fd);
        return;
    }
    if (uid != h->uid) {
        h->refused++;
        dmm__log(DMM_LOG_WARN, "dmm hold: refused a connection from uid %u (pid %d): this holder serves only uid %u",
                 (unsigned)uid, (int)pid, (unsigned)h->uid);
        close(fd);
        return;
    }
    if (h->nconns == DMM_IPC_MAX_CONNS) {
        h->refused++;
        dmm__log(DMM_LOG_WARN, "dmm hold: refused a connection from pid %d: %d clients are connected, the most served",
                 (int)pid, DMM_IPC_MAX_CONNS);
        close(fd);
        return;
    }
    h->conns[h->nconns++] = (ipc_conn){fd, ++h->next_conn, pid, false, 0};
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
        conn_close(h, i);
        return false;
    }
    dmm_ipc_msg reply;
    int fds[DMM_EXPORT_MAX_CHUNKS];
    size_t nfds = 0;
    dmm__holder_handle(h, c, buf, &rx, &reply, fds, &nfds);
    s = dmm__ipc_send(c->fd, &reply, fds, nfds);
    dmm__ipc_close_fds(fds, nfds);
    if (s != DMM_OK) { /* the client is gone (or stuck): drop the connection */
        dmm__log(DMM_LOG_INFO, "dmm hold: the reply to pid %d could not be sent (%s); closing its connection",
                 (int)c->pid, dmm_last_error());
        conn_close(h, i);
        return false;
    }
    return true;
}

dmm_status dmm_ipc_holder_serve(dmm_ipc_holder *h, int stop_fd, int timeout_ms) {
    if (h == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_holder_serve: the holder is NULL");
    struct pollfd p[DMM_IPC_MAX_CONNS + 2];
    for (;;) {
        size_t n = 0;
        p[n++] = (struct pollfd){h->listen_fd, POLLIN, 0};
        if (stop_fd >= 0) p[n++] = (struct pollfd){stop_fd, POLLIN, 0};
        size_t first = n;
        for (size_t i = 0; i < h->nconns; i++) p[n++] = (struct pollfd){h->conns[i].fd, POLLIN, 0};
        int r = poll(p, n, timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            return dmm_error_set(DMM_ERR_DRIVER, "dmm_ipc_holder_serve: poll failed (errno %d)", e);
        }
        if (r == 0) return DMM_OK; /* the timeout passed with nothing to do */
        if (stop_fd >= 0 && p[1].revents != 0) return DMM_OK;
        /* connections first, from the last (closing one moves the last into its slot) */
        for (size_t k = n; k-- > first;) {
            size_t i = k - first;
            if (p[k].revents == 0 || i >= h->nconns || h->conns[i].fd != p[k].fd) continue;
            if (p[k].revents & POLLIN) (void)on_readable(h, i);
            else conn_close(h, i); /* POLLHUP / POLLERR without data */
        }
        if (p[0].revents & POLLIN) on_accept(h);
    }
}

dmm_status dmm_ipc_holder_census(dmm_ipc_holder *h, dmm_ipc_census *out) {
    if (h == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_holder_census: the holder and the output must be non-NULL");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_ipc_holder_census: set .size = sizeof(dmm_ipc_census) (%zu)",
                             sizeof *out);
    dmm__holder_census(h, out);
    return DMM_OK;
}

dmm_status dmm_ipc_holder_destroy(dmm_ipc_holder *h) {
    if (h == NULL) return DMM_OK;
    dmm_error_kept first = {0};
    while (h->nconns > 0) conn_close(h, h->nconns - 1);
    if (h->arena != NULL) {
        dmm__error_keep(&first, dmm__holder_drop_all(h));
        if (dmm__error_keep(&first, dmm_mechanism_destroy(h->arena)) != DMM_OK)
            dmm__log(DMM_LOG_ERROR, "dmm hold: the arena could not be destroyed (%s); its memory stays with the process",
                     dmm_last_error());
    }
    if (h->lease != 0) dmm__error_keep(&first, dmm_lease_release(h->gov, h->lease));
    if (h->gh != NULL) dmm__error_keep(&first, dmm_governor_holder_unregister(h->gh));
    if (h->gov != NULL) dmm__error_keep(&first, dmm_governor_destroy(h->gov));
    if (h->listen_fd >= 0) {
        close(h->listen_fd);
        unlink(h->path);
    }
    if (h->own_drv) dmm_driver_destroy(h->drv);
    free(h->regions);
    free(h);
    return dmm__error_restore(&first);
}
