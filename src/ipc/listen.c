/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/listen.c — the holder's socket file: where it may be made, how it is made, and when it may
 * be removed (dmm__ipc_listen, dmm__ipc_unlisten).
 *
 * Idea: the path is walked one component at a time from "/" (or the working folder for a relative
 * path) with openat(O_PATH | O_NOFOLLOW), so no symbolic link is followed anywhere, and every folder
 * on the way is inspected on the descriptor just opened, not by name again: an ancestor may be
 * writable by others only with the sticky bit and must belong to root or to us (else its owner could
 * rename our folder away and put its own in its place); the socket's own folder must be ours and
 * writable by no one else. That folder stays open (folder_fd) for the holder's life: the socket is
 * bound, inspected and removed through it ("/proc/self/fd/N/name"), so a folder renamed or replaced
 * after the check is not the one written.
 *
 * The socket is made mode 0600 without the process's umask (a process-wide setting that other
 * threads use meanwhile): fchmod on the unbound socket gives the mode bind() creates the file with
 * (Linux takes it from the socket's inode, less the umask), and fchmodat afterwards undoes a umask
 * stricter than 0177 (the file is in our own folder, created a moment ago, never more open than 0600).
 * The device and inode of the file bound are kept; at the end the file at the path is removed only if
 * it is still that one (another holder started there after ours lost its file keeps its socket). The
 * removal happens before the listening socket closes, so while we check, a new holder's probe still
 * finds ours alive and does not take the path.
 *
 * A file already at the path is probed with a non-blocking connect: accepted → a holder lives there
 * (refused); EAGAIN → something listens but does not accept (refused, never waited for); refused →
 * a stale socket, removed if it is still the file inspected; anything else → refused with its errno.
 *
 * Trade-off: "/proc/self/fd/N/name" must fit sun_path (108 bytes) and /proc must be mounted; where
 * either fails the checked path itself is used (the folder was checked a moment ago; the window is a
 * rename by root or by us).
 *
 * Invariant: every function here either succeeds or leaves no descriptor and no file of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/core.h"
#include "ipc/sock.h"

#define SUN_PATH_BYTES sizeof(((struct sockaddr_un *)0)->sun_path)

/* Returns DMM_ERR_DRIVER with the sentence and the errno's name (every use passes one argument or more). */
#define LISTEN_ERR(e, fmt, ...)                                                                     \
    do {                                                                                            \
        char eb_[128];                                                                              \
        return dmm_error_set(DMM_ERR_DRIVER, fmt " (errno %d: %s)", __VA_ARGS__, (e),               \
                             strerror_r((e), eb_, sizeof eb_));                                     \
    } while (0)

/* The folder path[0, upto) names, for sentences: its trailing slashes dropped; "/" or "." when empty. */
static const char *folder_text(const char *path, size_t upto, char *buf, size_t cap) {
    while (upto > 1 && path[upto - 1] == '/') upto--;
    if (upto == 0) snprintf(buf, cap, "%s", path[0] == '/' ? "/" : ".");
    else snprintf(buf, cap, "%.*s", (int)upto, path);
    return buf;
}

/* A folder on the way to the socket: root's or ours, and writable by others only with the sticky bit. */
static dmm_status check_ancestor(int fd, const char *path, size_t upto) {
    char shown[SUN_PATH_BYTES];
    folder_text(path, upto, shown, sizeof shown);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        LISTEN_ERR(e, "ipc: the folder '%s' on the socket path '%s' cannot be inspected", shown, path);
    }
    uid_t me = geteuid();
    bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if ((st.st_uid != 0 && st.st_uid != me) || (others_write && (st.st_mode & S_ISVTX) == 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "ipc: the folder '%s' on the socket path '%s' is owned by uid %u with mode %04o: "
                             "someone else could replace what lies below it; use a path whose folders belong to "
                             "root or to you (uid %u) and are writable by others only with the sticky bit, e.g. "
                             "$XDG_RUNTIME_DIR",
                             shown, path, (unsigned)st.st_uid,
                             (unsigned)(st.st_mode & 07777), (unsigned)me);
    return DMM_OK;
}

/* The socket's own folder: ours, writable by no one else. */
static dmm_status check_folder(int fd, const char *path, size_t upto) {
    char shown[SUN_PATH_BYTES];
    folder_text(path, upto, shown, sizeof shown);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        LISTEN_ERR(e, "ipc: the socket's folder on '%s' cannot be inspected", path);
    }
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "ipc: the socket's directory '%s' is owned by uid %u with mode %03o; the holder's socket "
                             "must live in a directory that you (uid %u) own and no one else may write (e.g. "
                             "$XDG_RUNTIME_DIR, or mkdir -m 700)",
                             shown, (unsigned)st.st_uid,
                             (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
    return DMM_OK;
}

/* Walks `path` without following a link; on DMM_OK *folder_fd is its last folder (O_PATH) and *name
 * points at the last component inside `path`. */
static dmm_status open_folder(const char *path, int *folder_fd, const char **name) {
    size_t n = strlen(path);
    if (n == 0 || path[n - 1] == '/')
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: the socket path '%s' must name a file, not a folder", path);
    int fd = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        LISTEN_ERR(e, "ipc: the start of the socket path '%s' cannot be opened", path);
    }
    size_t at = 0;
    for (;;) {
        while (path[at] == '/') at++;
        const char *end = strchr(path + at, '/');
        if (end == NULL) break; /* path + at is the socket's name */
        size_t len = (size_t)(end - (path + at));
        char part[SUN_PATH_BYTES];
        snprintf(part, sizeof part, "%.*s", (int)len, path + at);
        dmm_status s = check_ancestor(fd, path, at);
        if (s != DMM_OK) {
            close(fd);
            return s;
        }
        int next = openat(fd, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
            int e = errno;
            struct stat st;
            bool link = fstatat(fd, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
            close(fd);
            if (link)
                return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                     "ipc: '%.*s' on the socket path '%s' is a symbolic link; the holder follows no "
                                     "link (its target could change under it): give the real path",
                                     (int)(end - path), path, path);
            LISTEN_ERR(e, "ipc: the folder '%.*s' on the socket path '%s' cannot be opened", (int)(end - path), path,
                       path);
        }
        close(fd);
        fd = next;
        at += len;
    }
    const char *last = path + at;
    if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
        close(fd);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: the socket path '%s' must end in a file name", path);
    }
    dmm_status s = check_folder(fd, path, (size_t)(last - path));
    if (s != DMM_OK) {
        close(fd);
        return s;
    }
    *folder_fd = fd;
    *name = last;
    return DMM_OK;
}

/* The address of name in the pinned folder: "/proc/self/fd/N/name" where it fits, else `path`. */
static void address_of(const dmm_ipc_listener *l, const char *path, struct sockaddr_un *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    char via[SUN_PATH_BYTES + 32];
    int w = snprintf(via, sizeof via, "/proc/self/fd/%d/%s", l->folder_fd, l->name);
    struct stat st;
    bool proc = w > 0 && (size_t)w < sizeof sa->sun_path && stat("/proc/self/fd", &st) == 0;
    const char *use = proc ? via : path; /* both shorter than sun_path: checked above and by the caller */
    memcpy(sa->sun_path, use, strlen(use));
}

/* Clears the path for bind: DMM_OK when nothing is there (or a stale socket was, now removed); a
 * failure with a sentence when something else is, or something listens. */
static dmm_status clear_stale(dmm_ipc_listener *l, const char *path, const struct sockaddr_un *sa) {
    struct stat st;
    if (fstatat(l->folder_fd, l->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        if (e == ENOENT) return DMM_OK;
        LISTEN_ERR(e, "ipc: '%s' cannot be inspected", path);
    }
    if (!S_ISSOCK(st.st_mode))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: '%s' exists and is not a socket; choose another path "
                                                       "or remove it", path);
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (probe < 0) {
        int e = errno;
        LISTEN_ERR(e, "ipc: socket(AF_UNIX, SOCK_SEQPACKET) to probe '%s' failed", path);
    }
    int rc = connect(probe, (const struct sockaddr *)sa, sizeof *sa);
    int e = rc == 0 ? 0 : errno;
    close(probe);
    if (rc == 0)
        return dmm_error_set(DMM_ERR_BUSY, "ipc: a holder already listens on '%s'; stop it or choose another path", path);
    if (e == EAGAIN || e == EINPROGRESS)
        return dmm_error_set(DMM_ERR_BUSY, "ipc: something listens on '%s' but does not accept connections (its queue "
                                           "is full); stop it or choose another path", path);
    if (e != ECONNREFUSED) LISTEN_ERR(e, "ipc: probing the socket already at '%s' failed", path);
    struct stat again;
    if (fstatat(l->folder_fd, l->name, &again, AT_SYMLINK_NOFOLLOW) == 0 && again.st_dev == st.st_dev &&
        again.st_ino == st.st_ino && unlinkat(l->folder_fd, l->name, 0) != 0) {
        e = errno;
        LISTEN_ERR(e, "ipc: the stale socket '%s' (nobody listens) could not be removed", path);
    }
    return DMM_OK;
}

/* Makes, binds and listens on the socket; 0, or the errno with *step naming what failed. */
static int make_socket(dmm_ipc_listener *l, const struct sockaddr_un *sa, const char **step, bool *bound) {
    *step = "socket(AF_UNIX, SOCK_SEQPACKET)";
    l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0) return errno;
    *step = "fchmod of the unbound socket";
    if (fchmod(l->fd, 0600) != 0) return errno;
    *step = "bind";
    if (bind(l->fd, (const struct sockaddr *)sa, sizeof *sa) != 0) return errno;
    *bound = true;
    *step = "inspecting the bound socket";
    struct stat st;
    if (fstatat(l->folder_fd, l->name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
    if (!S_ISSOCK(st.st_mode)) return EEXIST;
    *step = "making the socket mode 0600";
    if (fchmodat(l->folder_fd, l->name, 0600, 0) != 0) return errno;
    *step = "listen";
    if (listen(l->fd, 128) != 0) return errno;
    l->dev = (uint64_t)st.st_dev;
    l->ino = (uint64_t)st.st_ino;
    return 0;
}

dmm_status dmm__ipc_listen(const char *path, dmm_ipc_listener *out) {
    out->fd = out->folder_fd = -1;
    if (path == NULL || path[0] == '\0' || strlen(path) >= SUN_PATH_BYTES)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: the socket path %s%s%s must be non-empty and shorter than "
                                                       "%zu bytes", path ? "'" : "", path ? path : "(NULL)",
                             path ? "'" : "", SUN_PATH_BYTES);
    dmm_ipc_listener l = {.fd = -1, .folder_fd = -1};
    const char *name = NULL;
    dmm_status s = open_folder(path, &l.folder_fd, &name);
    if (s != DMM_OK) return s;
    snprintf(l.name, sizeof l.name, "%s", name);
    struct sockaddr_un sa;
    address_of(&l, path, &sa);
    if ((s = clear_stale(&l, path, &sa)) != DMM_OK) {
        close(l.folder_fd);
        return s;
    }
    const char *step = NULL;
    bool bound = false;
    int e = make_socket(&l, &sa, &step, &bound);
    if (e == 0) {
        *out = l;
        return DMM_OK;
    }
    if (bound) (void)unlinkat(l.folder_fd, l.name, 0); /* ours: made a moment ago in our own folder */
    if (l.fd >= 0) close(l.fd);
    close(l.folder_fd);
    LISTEN_ERR(e, "ipc: %s for the socket '%s' failed", step, path);
}

bool dmm__ipc_still_ours(const dmm_ipc_listener *l) {
    struct stat st;
    return l->folder_fd >= 0 && fstatat(l->folder_fd, l->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           (uint64_t)st.st_dev == l->dev && (uint64_t)st.st_ino == l->ino;
}

void dmm__ipc_unlisten(dmm_ipc_listener *l) {
    if (l->fd >= 0 && dmm__ipc_still_ours(l)) (void)unlinkat(l->folder_fd, l->name, 0);
    if (l->fd >= 0) close(l->fd);
    if (l->folder_fd >= 0) close(l->folder_fd);
    l->fd = l->folder_fd = -1;
}
