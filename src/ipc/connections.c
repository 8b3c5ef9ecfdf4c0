/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/connections.c — the holder's connections: who gets one, how many, for how long before its
 * hello, and what a newcomer hears when there is no room (holder.c runs the loop around it).
 *
 * Idea: every connection is accepted at once (so nobody waits in the kernel's queue for an answer),
 * its peer read from the kernel (SO_PEERCRED), and then admitted or refused. A refused newcomer gets
 * one reply with the reason (another uid, too many connections, no descriptor free) and is closed;
 * the client library reads that reply, so its caller gets the holder's sentence. Limits: at most
 * max_conns connections in all and max_per_uid of one uid. At a limit, the oldest connection that
 * has not said hello yields its slot to the newcomer (it is closed with a reply saying why): silent
 * connections can delay nobody, however many come. Every connection must say hello within the hello
 * deadline or it is closed (counted in hello_timeouts). After the hello a connection may stay idle as
 * long as it likes: its private regions live that long, and the limits bound how many there are.
 *
 * A full descriptor table: the holder keeps one descriptor in reserve (/dev/null). When accept()
 * answers EMFILE or ENFILE, the reserve is given up, the newcomer accepted on it, told "no descriptor
 * free" and closed, and the reserve taken again: each wake-up answers one newcomer, and the loop
 * never spins on a listening socket it cannot drain. If the reserve cannot be taken again (another
 * thread of the process took the slot), listening pauses for DMM_IPC_PAUSE_NS or until a connection
 * of ours closes, whichever comes first; the only timer of a full table.
 *
 * Trade-off: limits are checked by counting the connections (at most max_conns): admission is O(n),
 * for simplicity; n is a few hundred. An evicted client sees a refusal, not service: it tries again.
 *
 * Invariants: holder_types.h (the limits, the deadline).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "ipc/holder_types.h"

/* Tells a connection why it is closed (one reply, numbered 1: the answer to the hello it sent or will
 * send), without waiting, and closes it. */
static void refuse(int fd, dmm_status status, const char *why) {
    dmm_ipc_msg r;
    dmm__ipc_msg_init(&r, DMM_IPC_REPLY);
    r.seq = 1;
    r.status = (uint32_t)status;
    snprintf(r.text, sizeof r.text, "%s", why);
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    size_t len = 0;
    if (dmm__ipc_encode(&r, buf, sizeof buf, &len) == DMM_OK) (void)send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}

/* Takes connection i out (the last one moves into its slot; its descriptor already closed) and drops
 * what was its own. */
static void forget(dmm_ipc_holder *h, size_t i) {
    uint64_t id = h->conns[i].id;
    h->conns[i] = h->conns[--h->nconns];
    dmm__holder_conn_gone(h, id);
    h->paused_until_ns = 0; /* a descriptor is free again: listen */
    if (h->reserve_fd < 0) h->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void dmm__holder_conn_close(dmm_ipc_holder *h, size_t i) {
    if (h->conns[i].fd >= 0) close(h->conns[i].fd);
    forget(h, i);
}

/* The oldest connection without hello among those of `uid` (UINT32_MAX: of any uid); SIZE_MAX if none. */
static size_t oldest_silent(const dmm_ipc_holder *h, uint32_t uid) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < h->nconns; i++) {
        const ipc_conn *c = &h->conns[i];
        if (c->hello || (uid != UINT32_MAX && c->uid != uid)) continue;
        if (best == SIZE_MAX || c->hello_by_ns < h->conns[best].hello_by_ns) best = i;
    }
    return best;
}

void dmm__holder_admit(dmm_ipc_holder *h, int fd, uint32_t uid, int32_t pid, uint64_t now_ns) {
    char why[DMM_IPC_TEXT_MAX];
    if (uid != h->uid) {
        h->refused++;
        dmm_log(DMM_LOG_WARN, "dmm hold: refused a connection from uid %u (pid %d): this holder serves only uid %u",
                 (unsigned)uid, (int)pid, (unsigned)h->uid);
        snprintf(why, sizeof why, "this holder serves only uid %u, not uid %u", (unsigned)h->uid, (unsigned)uid);
        refuse(fd, DMM_ERR_INVALID_ARGUMENT, why);
        return;
    }
    size_t of_uid = 0;
    for (size_t i = 0; i < h->nconns; i++) of_uid += h->conns[i].uid == uid;
    bool total_full = h->nconns >= h->max_conns, uid_full = of_uid >= h->max_per_uid;
    if (total_full || uid_full) {
        size_t victim = oldest_silent(h, uid_full ? uid : UINT32_MAX);
        if (victim == SIZE_MAX) {
            h->refused++;
            snprintf(why, sizeof why, "the holder serves %zu connections%s, its most (%u); try again when one closes",
                     uid_full ? of_uid : h->nconns, uid_full ? " of your uid" : "",
                     uid_full ? h->max_per_uid : h->max_conns);
            dmm_log(DMM_LOG_WARN, "dmm hold: refused a connection from pid %d: %s", (int)pid, why);
            refuse(fd, DMM_ERR_BUSY, why);
            return;
        }
        ipc_conn *v = &h->conns[victim];
        h->evicted++;
        dmm_log(DMM_LOG_INFO, "dmm hold: closed the connection of pid %d: no hello yet, and a newcomer needed its slot",
                 (int)v->pid);
        refuse(v->fd, DMM_ERR_BUSY, "closed: no hello came, and a newcomer needed the slot; say hello at once");
        forget(h, victim);
    }
    h->conns[h->nconns++] = (ipc_conn){.fd = fd, .id = ++h->next_conn, .pid = pid, .uid = uid, .hello = false,
                                       .seq = 0, .hello_by_ns = now_ns + h->hello_deadline_ns};
}

/* accept() found no descriptor (it says so whether or not anyone waits): answer a waiting newcomer on
 * the reserve, or pause listening when there is no reserve to give. */
static void out_of_descriptors(dmm_ipc_holder *h, int e, uint64_t now_ns) {
    if (h->reserve_fd >= 0) {
        close(h->reserve_fd);
        h->reserve_fd = -1;
        int fd = accept4(h->listener.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        int again = fd < 0 ? errno : 0;
        if (fd >= 0) {
            h->refused++;
            dmm_log(DMM_LOG_WARN, "dmm hold: refused a connection: no descriptor free (errno %d); the holder keeps "
                                   "serving its %zu connections", e, h->nconns);
            refuse(fd, DMM_ERR_BUSY, "the holder has no descriptor free (its process's limit); try again later");
        }
        h->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (h->reserve_fd >= 0 && (fd >= 0 || again == EAGAIN || again == EWOULDBLOCK)) return;
    }
    if (h->paused_until_ns == 0)
        dmm_log(DMM_LOG_WARN, "dmm hold: no descriptor free (errno %d) and none in reserve: listening pauses until a "
                               "connection closes", e);
    h->paused_until_ns = now_ns + DMM_IPC_PAUSE_NS;
}

void dmm__holder_accept(dmm_ipc_holder *h, uint64_t now_ns) {
    for (int k = 0; k < DMM_IPC_ACCEPTS_PER_WAKE; k++) {
        int fd = accept4(h->listener.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED) continue;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) out_of_descriptors(h, e, now_ns);
            return; /* EAGAIN: nobody waits; after out_of_descriptors: one newcomer answered per wake-up */
        }
        uint32_t uid = 0;
        int32_t pid = 0;
        if (dmm__ipc_peer(fd, &uid, &pid) != DMM_OK) {
            h->refused++;
            dmm_log(DMM_LOG_WARN, "dmm hold: refused a connection: %s", dmm_last_error());
            close(fd);
            continue;
        }
        dmm__holder_admit(h, fd, uid, pid, now_ns);
    }
}

uint64_t dmm__holder_expire(dmm_ipc_holder *h, uint64_t now_ns) {
    uint64_t next = 0;
    for (size_t i = h->nconns; i-- > 0;) {
        ipc_conn *c = &h->conns[i];
        if (c->hello) continue;
        if (c->hello_by_ns <= now_ns) {
            h->hello_timeouts++;
            dmm_log(DMM_LOG_INFO, "dmm hold: closed the connection of pid %d: no hello within %llu ms", (int)c->pid,
                     (unsigned long long)(h->hello_deadline_ns / 1000000u));
            char why[DMM_IPC_TEXT_MAX];
            snprintf(why, sizeof why, "closed: no hello within %llu ms (the hello deadline)",
                     (unsigned long long)(h->hello_deadline_ns / 1000000u));
            if (c->fd >= 0) refuse(c->fd, DMM_ERR_BUSY, why);
            forget(h, i);
            continue;
        }
        if (next == 0 || c->hello_by_ns < next) next = c->hello_by_ns;
    }
    return next;
}
