/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/sock.c — the holder protocol's messages on a Unix socket: dialing the holder, and how one
 * message and its descriptors cross (SOCK_SEQPACKET: one record per message, so a message is never
 * split or merged, and a truncated or oversized one is seen as such). The socket file itself is
 * listen.c's.
 *
 * Security (docs/security.md): the kernel's record of who is at the other end (SO_PEERCRED) is the
 * authority both ways: the holder serves only its own uid, and a client dials only a holder of its
 * own uid (a socket file at the path could be anybody's listener). Every wait has a deadline: the
 * dial and every send wait at most the client's deadline (SO_SNDTIMEO, which also bounds connect()
 * on a full queue), a receive polls up to it. Received descriptors arrive close-on-exec; whatever
 * does not fit is reported (fds_cut) and dropped by the kernel.
 *
 * Invariant: every function here either succeeds or leaves no descriptor of its own open.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/core.h"
#include "ipc/sock.h"

/* Returns DMM_ERR_DRIVER with the sentence and the errno's name (every use passes one argument or more). */
#define SOCK_ERR(e, fmt, ...)                                                                       \
    do {                                                                                            \
        char eb_[128];                                                                              \
        return dmm_error_set(DMM_ERR_DRIVER, fmt " (errno %d: %s)", __VA_ARGS__, (e),               \
                             strerror_r((e), eb_, sizeof eb_));                                     \
    } while (0)

static dmm_status sun_of(const char *path, struct sockaddr_un *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof sa->sun_path)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: the socket path %s%s%s must be non-empty and shorter than "
                                                       "%zu bytes", path ? "'" : "", path ? path : "(NULL)",
                             path ? "'" : "", sizeof sa->sun_path);
    memcpy(sa->sun_path, path, strlen(path));
    return DMM_OK;
}

dmm_status dmm__ipc_dial(const char *path, uint32_t deadline_ms, int *fd) {
    struct sockaddr_un sa;
    dmm_status s = sun_of(path, &sa);
    if (s != DMM_OK) return s;
    int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c < 0) {
        int e = errno;
        SOCK_ERR(e, "ipc: socket(AF_UNIX, SOCK_SEQPACKET) for %s failed", path);
    }
    struct timeval tv = {(time_t)(deadline_ms / 1000), (suseconds_t)(deadline_ms % 1000) * 1000};
    if (setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
        int e = errno;
        close(c);
        SOCK_ERR(e, "ipc: setting the %u ms send deadline for '%s' failed", deadline_ms, path);
    }
    int rc;
    do rc = connect(c, (const struct sockaddr *)&sa, sizeof sa);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        int e = errno;
        close(c);
        if (e == EAGAIN || e == EINPROGRESS)
            return dmm_error_set(DMM_ERR_BUSY, "ipc: the holder at '%s' did not take the connection within %u ms (its "
                                               "queue is full); try again later", path, deadline_ms);
        SOCK_ERR(e, "ipc: connecting to the holder at '%s' failed; is `dmm hold --socket %s` running, as you?", path,
                 path);
    }
    uint32_t uid = 0;
    int32_t pid = 0;
    if ((s = dmm__ipc_peer(c, &uid, &pid)) != DMM_OK) {
        close(c);
        return s;
    }
    if (uid != (uint32_t)geteuid()) {
        close(c);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "ipc: the process listening on '%s' (pid %d) runs as uid %u, not as this client's uid %u: "
                             "it is not your holder, and nothing was sent to it; start your own `dmm hold` in a folder "
                             "only you can write", path, (int)pid, (unsigned)uid, (unsigned)geteuid());
    }
    *fd = c;
    return DMM_OK;
}

/* Room for the most descriptors one message carries (SCM_RIGHTS), aligned as the cmsg macros need. */
typedef union sock_control {
    char buf[CMSG_SPACE(sizeof(int) * DMM_EXPORT_MAX_CHUNKS)];
    struct cmsghdr align;
} sock_control;

/* A header for one record of one iovec; its control data is the first ctl_len bytes of ctl (none if 0). */
static struct msghdr sock_msghdr(struct iovec *iov, sock_control *ctl, size_t ctl_len) {
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = 1;
    if (ctl_len > 0) {
        mh.msg_control = ctl->buf;
        mh.msg_controllen = ctl_len;
    }
    return mh;
}

dmm_status dmm__ipc_send(int sock, const dmm_ipc_msg *m, const int *fds, size_t n) {
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    size_t len = 0;
    dmm_status s = dmm__ipc_encode(m, buf, sizeof buf, &len);
    if (s != DMM_OK) return s;
    if (n > DMM_EXPORT_MAX_CHUNKS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: %zu descriptors in one message; at most %d", n,
                             DMM_EXPORT_MAX_CHUNKS);
    struct iovec iov = {buf, len};
    sock_control ctl;
    struct msghdr mh = sock_msghdr(&iov, &ctl, n > 0 ? CMSG_SPACE(sizeof(int) * n) : 0);
    if (n > 0) {
        memset(&ctl, 0, sizeof ctl);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
    }
    ssize_t w;
    do w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return dmm_error_set(DMM_ERR_BUSY, "ipc: a message of %zu bytes could not be sent: the peer's queue stayed "
                                               "full (it does not read, or the deadline passed)", len);
        SOCK_ERR(e, "ipc: sending a message of %zu bytes with %zu descriptor(s) failed", len, n);
    }
    return DMM_OK;
}

void dmm__ipc_close_fds(int *fds, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}

dmm_status dmm__ipc_recv(int sock, uint8_t *buf, size_t cap, bool nonblocking, dmm_ipc_rx *rx) {
    memset(rx, 0, sizeof *rx);
    for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++) rx->fds[i] = -1;
    struct iovec iov = {buf, cap};
    sock_control ctl;
    struct msghdr mh = sock_msghdr(&iov, &ctl, sizeof ctl.buf);
    ssize_t r;
    do r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | (nonblocking ? MSG_DONTWAIT : 0));
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno == ECONNRESET) {
        /* the peer closed with our bytes unread (a holder refusing a newcomer whose hello had come):
         * the kernel reports that first, but what it sent before closing is still queued */
        do r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
            rx->closed = true;
            return DMM_OK;
        }
    }
    if (r < 0) {
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK) return dmm_error_set(DMM_ERR_BUSY, "ipc: no message is waiting");
        SOCK_ERR(e, "ipc: receiving a message on descriptor %d failed", sock);
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(0)) continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
            if (rx->nfds < DMM_EXPORT_MAX_CHUNKS) rx->fds[rx->nfds++] = f;
            else {
                close(f);
                rx->fds_cut = true;
            }
        }
    }
    rx->len = (size_t)r;
    rx->closed = r == 0 && rx->nfds == 0;
    rx->oversized = (mh.msg_flags & MSG_TRUNC) != 0;
    rx->fds_cut |= (mh.msg_flags & MSG_CTRUNC) != 0;
    return DMM_OK;
}

dmm_status dmm__ipc_peer(int sock, uint32_t *uid, int32_t *pid) {
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof cr) {
        int e = errno;
        SOCK_ERR(e, "ipc: reading the peer's credentials (SO_PEERCRED) of descriptor %d failed", sock);
    }
    *uid = (uint32_t)cr.uid;
    *pid = (int32_t)cr.pid;
    return DMM_OK;
}

/* Waits until sock is readable or deadline_ms passed (DMM_ERR_BUSY with a sentence). */
static dmm_status wait_readable(int sock, uint32_t deadline_ms, const char *what) {
    uint64_t end = dmm_now_ns() + (uint64_t)deadline_ms * 1000000u;
    for (;;) {
        uint64_t now = dmm_now_ns();
        int left = now >= end ? 0 : (int)((end - now + 999999u) / 1000000u);
        struct pollfd p = {sock, POLLIN, 0};
        int r = poll(&p, 1, left);
        if (r > 0) return DMM_OK;
        if (r == 0)
            return dmm_error_set(DMM_ERR_BUSY, "ipc: %s did not come within %u ms (the reply deadline); the peer is "
                                               "stuck or gone", what, deadline_ms);
        if (errno != EINTR) {
            int e = errno;
            SOCK_ERR(e, "ipc: waiting for %s failed", what);
        }
    }
}

dmm_status dmm__ipc_recv_msg(int sock, uint32_t deadline_ms, dmm_ipc_msg *m, const char *what) {
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    dmm_ipc_rx rx;
    dmm__ipc_msg_init(m, 0);
    dmm_status s = deadline_ms > 0 ? wait_readable(sock, deadline_ms, what) : DMM_OK;
    if (s == DMM_OK) s = dmm__ipc_recv(sock, buf, sizeof buf, false, &rx);
    if (s != DMM_OK) return dmm__error_wrap(s, "ipc: waiting for %s", what);
    if (rx.closed) return dmm_error_set(DMM_ERR_DRIVER, "ipc: the peer closed the connection before %s came", what);
    if (rx.oversized || rx.fds_cut) {
        dmm__ipc_close_fds(rx.fds, rx.nfds);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: %s was %s; it was dropped", what,
                             rx.oversized ? "longer than any message of the protocol" : "sent with too many descriptors");
    }
    s = dmm__ipc_decode(buf, rx.len, m);
    bool carries = s == DMM_OK && (m->type == DMM_IPC_EXPORT || (m->type == DMM_IPC_REPLY && m->body == DMM_IPC_BODY_EXPORT));
    size_t want = carries ? m->ex.nchunks : 0;
    if (s == DMM_OK && rx.nfds != want)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: %s came with %zu descriptor(s) but names %zu", what, rx.nfds,
                          want);
    if (s != DMM_OK) {
        dmm__ipc_close_fds(rx.fds, rx.nfds);
        return dmm__error_wrap(s, "ipc: %s was refused", what);
    }
    for (size_t i = 0; i < rx.nfds; i++) m->ex.fds[i] = rx.fds[i];
    return DMM_OK;
}
