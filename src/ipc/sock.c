/* src/ipc/sock.c — the holder protocol's Unix sockets: where the socket file is made and with which
 * permissions, and how one message and its descriptors cross (SOCK_SEQPACKET: one record per
 * message, so a message is never split or merged, and a truncated or oversized one is seen as such).
 *
 * Security (docs/ipc.md, threat model): the socket's directory must be owned by this user and
 * writable by no one else (else another user could replace the socket file); the socket is bound
 * under umask 0177 and then chmod 0600, so only this user (and root) can connect; SO_PEERCRED is the
 * holder's second check. Received descriptors arrive close-on-exec; whatever does not fit is
 * reported (fds_cut) and dropped by the kernel.
 *
 * Invariant: every function here either succeeds or leaves no descriptor of its own open.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* The directory of `path` belongs to this user and only this user may write it. */
static dmm_status check_dir(const char *path) {
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *slash = strrchr(path, '/');
    if (slash == NULL) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        SOCK_ERR(e, "ipc: the socket's directory '%s' cannot be inspected", dir);
    }
    if (!S_ISDIR(st.st_mode))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: '%s' (the socket's directory) is not a directory", dir);
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "ipc: the socket's directory '%s' is owned by uid %u with mode %03o; the holder's socket "
                             "must live in a directory that you (uid %u) own and no one else may write (e.g. "
                             "$XDG_RUNTIME_DIR, or mkdir -m 700)",
                             dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
    return DMM_OK;
}

dmm_status dmm__ipc_listen(const char *path, int *fd) {
    struct sockaddr_un sa;
    dmm_status s = sun_of(path, &sa);
    if (s != DMM_OK) return s;
    if ((s = check_dir(path)) != DMM_OK) return s;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: '%s' exists and is not a socket; choose another path "
                                                           "or remove it", path);
        int probe = -1;
        if (dmm__ipc_dial(path, &probe) == DMM_OK) {
            close(probe);
            return dmm_error_set(DMM_ERR_BUSY, "ipc: a holder already listens on '%s'; stop it or choose another path",
                                 path);
        }
        dmm_clear_error();
        if (unlink(path) != 0) {
            int e = errno;
            SOCK_ERR(e, "ipc: the stale socket '%s' (nobody listens) could not be removed", path);
        }
    }
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (l < 0) {
        int e = errno;
        SOCK_ERR(e, "ipc: socket(AF_UNIX, SOCK_SEQPACKET) for %s failed", path);
    }
    mode_t old = umask(0177);
    int rc = bind(l, (const struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc != 0) {
        close(l);
        SOCK_ERR(e, "ipc: bind to '%s' failed", path);
    }
    if (chmod(path, 0600) != 0 || listen(l, 64) != 0) {
        e = errno;
        close(l);
        unlink(path);
        SOCK_ERR(e, "ipc: making '%s' mode 0600 and listening on it failed", path);
    }
    *fd = l;
    return DMM_OK;
}

dmm_status dmm__ipc_dial(const char *path, int *fd) {
    struct sockaddr_un sa;
    dmm_status s = sun_of(path, &sa);
    if (s != DMM_OK) return s;
    int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c < 0) {
        int e = errno;
        SOCK_ERR(e, "ipc: socket(AF_UNIX, SOCK_SEQPACKET) for %s failed", path);
    }
    if (connect(c, (const struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(c);
        SOCK_ERR(e, "ipc: connecting to the holder at '%s' failed; is `dmm hold --socket %s` running, as you?", path,
                 path);
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
    if (r < 0) {
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK) return dmm_error_set(DMM_ERR_BUSY, "ipc: no message is waiting");
        if (e == ECONNRESET) {
            rx->closed = true;
            return DMM_OK;
        }
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

dmm_status dmm__ipc_recv_msg(int sock, dmm_ipc_msg *m, const char *what) {
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    dmm_ipc_rx rx;
    dmm__ipc_msg_init(m, 0);
    dmm_status s = dmm__ipc_recv(sock, buf, sizeof buf, false, &rx);
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
