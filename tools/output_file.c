/* SPDX-License-Identifier: Apache-2.0 */
/* tools/output_file.c — the dmm tool's output files (contract: output_file.h).
 *
 * What it owns: deciding, before the work, how a path the user named is written (a stream the process
 * already has, a temporary renamed over a regular file, a device or FIFO in place, or a refusal), and
 * ending that writing so that a failure leaves the target as it was.
 *
 * The idea: the old way (open the target without O_TRUNC, cut it at the end, remove it when anything
 * failed) removed whatever the path named when writing failed — a FIFO, /dev/full, and as root
 * /dev/null itself. Now nothing at the target is ever removed or truncated: a regular file is replaced
 * by a rename, which either happens whole or not at all, and a device or FIFO, which has no "whole
 * file", is written in place. The temporary is created exclusively (O_EXCL | O_NOFOLLOW: never through
 * a name someone planted, link or file) with a random name, mode 0600 until fchmod sets the final mode.
 *
 * Trade-offs: a target in a folder this user cannot write is refused even when the file itself is
 * writable (a rename needs the folder); a regular file with several hard links is replaced at this
 * name only (the others keep the old content); the temporary is checked to be ours just before the
 * rename or the unlink (a neighbour who may write the folder could still swap it in between: the
 * window is a system call wide, and in a folder only we may write there is none).
 *
 * Invariants: temp != NULL ⇔ target != NULL ⇔ a temporary of inode (temp_dev, temp_ino) exists that
 * this run created; unlink and rename touch only a name whose lstat shows that inode; no path that
 * was not created here is passed to unlink, rename or O_TRUNC.
 */
#include "output_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err_text.h"

#define TEMP_TRIES 64      /* names tried before giving up (each is random: a collision is a planted name) */
#define TEMP_BASE_MAX 200  /* bytes of the target's name kept in the temporary's (NAME_MAX is 255) */

static bool same_inode(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* 0666 less the process's umask, read from /proc/self/status: calling umask() to read it would set it,
 * and another thread creating a file meanwhile would get the wrong mode. 0644 where it cannot be read. */
static mode_t new_file_mode(void) {
    unsigned mask = 022;
    FILE *f = fopen("/proc/self/status", "re");
    if (f != NULL) {
        char line[256];
        unsigned m;
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "Umask: %o", &m) == 1) {
                mask = m & 0777;
                break;
            }
        fclose(f);
    }
    return (mode_t)(0666 & ~mask);
}

/* Twelve hex digits from the kernel's generator (or, where it fails, from the clock, the pid and a
 * counter: the name is only a hint, O_EXCL is what makes the file ours). */
static void random_suffix(char out[13], unsigned attempt) {
    uint8_t b[6];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 20 ^ attempt;
        for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(x >> (8 * i));
    }
    for (size_t i = 0; i < sizeof b; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Creates ".NAME.dmm-XXXXXXXXXXXX" beside `target` exclusively; the descriptor, or -1 with errno. */
static int create_temp(const char *target, char **temp_out) {
    const char *slash = strrchr(target, '/');
    size_t dirlen = slash != NULL ? (size_t)(slash - target) + 1 : 0; /* with its '/' */
    const char *base = target + dirlen;
    size_t baselen = strlen(base) > TEMP_BASE_MAX ? TEMP_BASE_MAX : strlen(base);
    size_t cap = dirlen + 1 + baselen + 5 + 12 + 1;
    char *name = malloc(cap);
    if (name == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (unsigned attempt = 0; attempt < TEMP_TRIES; attempt++) {
        char suffix[13];
        random_suffix(suffix, attempt);
        snprintf(name, cap, "%.*s.%.*s.dmm-%s", (int)dirlen, target, (int)baselen, base, suffix);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            *temp_out = name;
            return fd;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(name);
    errno = e;
    return -1;
}

/* Whether the temporary's name still holds the inode this run created. */
static bool temp_is_ours(const dmm_output_file *o) {
    struct stat s;
    return lstat(o->temp, &s) == 0 && S_ISREG(s.st_mode) && s.st_dev == o->temp_dev && s.st_ino == o->temp_ino;
}

static void forget(dmm_output_file *o) {
    free(o->target);
    free(o->temp);
    o->target = o->temp = NULL;
}

/* A device or FIFO, written where it is: never created, truncated or removed. */
static int open_in_place(dmm_output_file *o, const struct stat *st, char *err, size_t errcap) {
    int fd = open(o->path, O_WRONLY | O_NOCTTY | O_CLOEXEC); /* a FIFO waits for its reader, as `>` does */
    struct stat now;
    if (fd >= 0 && (fstat(fd, &now) != 0 || !same_inode(&now, st))) {
        close(fd);
        return dmm_tool_err(err, errcap, "%s %s changed while dmm opened it; nothing was done: run again", o->opt,
                            o->path);
    }
    if (fd >= 0 && (o->f = fdopen(fd, "w")) == NULL) close(fd);
    if (o->f == NULL)
        return dmm_tool_err(err, errcap, "%s %s (a %s) cannot be written (%s); nothing was done: name a writable "
                            "file, device or FIFO", o->opt, o->path, S_ISFIFO(st->st_mode) ? "FIFO" : "device",
                            strerror(errno));
    return 0;
}

int dmm_output_open(const char *opt, const char *path, const char *const *inputs, size_t ninputs, dmm_output_file *out,
                    char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    out->opt = opt;
    out->path = path;
    if (strcmp(path, "-") == 0) {
        out->f = stdout;
        return 0;
    }
    if (path[0] == '\0') return dmm_tool_err(err, errcap, "%s names no file (an empty path); name one, or - for the "
                                             "standard output", opt);
    struct stat ls, st, is;
    bool exists = lstat(path, &ls) == 0;
    if (!exists && errno != ENOENT)
        return dmm_tool_err(err, errcap, "%s %s cannot be examined (%s); nothing was done: name a file in a folder "
                            "you can reach", opt, path, strerror(errno));
    if (exists && stat(path, &st) != 0) {
        if (S_ISLNK(ls.st_mode) && errno == ENOENT)
            return dmm_tool_err(err, errcap, "%s %s is a symbolic link to a file that does not exist; dmm creates no "
                                "file through a link: name the file itself", opt, path);
        return dmm_tool_err(err, errcap, "%s %s cannot be examined (%s); nothing was done", opt, path, strerror(errno));
    }
    mode_t mode = new_file_mode();
    if (exists) {
        for (size_t i = 0; i < ninputs; i++)
            if (inputs[i] != NULL && stat(inputs[i], &is) == 0 && same_inode(&is, &st))
                return dmm_tool_err(err, errcap, "%s %s is the input %s: writing it would destroy it; name another "
                                    "file", opt, path, inputs[i]);
        if (fstat(STDOUT_FILENO, &is) == 0 && same_inode(&is, &st)) {
            out->f = stdout; /* (/dev/stdout, or the file `>` named): one stream, one offset */
            return 0;
        }
        if (fstat(STDERR_FILENO, &is) == 0 && same_inode(&is, &st)) {
            out->f = stderr;
            return 0;
        }
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return open_in_place(out, &st, err, errcap);
        if (S_ISDIR(st.st_mode))
            return dmm_tool_err(err, errcap, "%s %s is a folder; name a file in it (e.g. %s/out)", opt, path, path);
        if (!S_ISREG(st.st_mode))
            return dmm_tool_err(err, errcap, "%s %s is a %s; dmm writes to regular files, character devices, FIFOs "
                                "and terminals: name one of those", opt, path,
                                S_ISBLK(st.st_mode) ? "block device" : S_ISSOCK(st.st_mode) ? "socket" : "special file");
        out->target = realpath(path, NULL); /* a link's file is replaced, the link stays */
        mode = st.st_mode & 0777;
    } else {
        out->target = strdup(path);
    }
    if (out->target == NULL)
        return dmm_tool_err(err, errcap, "%s %s: %s; nothing was done", opt, path, strerror(errno));
    int fd = create_temp(out->target, &out->temp);
    if (fd < 0) {
        int e = errno;
        const char *slash = strrchr(out->target, '/');
        int dirlen = slash == NULL ? 1 : slash == out->target ? 1 : (int)(slash - out->target);
        dmm_tool_err(err, errcap, "%s %s cannot be written: a temporary file cannot be created in its folder %.*s "
                     "(%s); dmm writes a file beside its target and renames it into place: name a file in a folder "
                     "you can write", opt, path, dirlen, slash == NULL ? "." : out->target, strerror(e));
        forget(out);
        return -1;
    }
    struct stat ts;
    if (fchmod(fd, mode) != 0 || fstat(fd, &ts) != 0 || (out->f = fdopen(fd, "w")) == NULL) {
        int e = errno;
        close(fd);
        unlink(out->temp); /* created a moment ago by this call, exclusively */
        forget(out);
        return dmm_tool_err(err, errcap, "%s %s cannot be written (%s); nothing was done", opt, path, strerror(e));
    }
    out->temp_dev = ts.st_dev;
    out->temp_ino = ts.st_ino;
    return 0;
}

int dmm_output_close(dmm_output_file *o, bool ok, char *err, size_t errcap) {
    if (o->f == NULL) {
        forget(o);
        return 0;
    }
    FILE *f = o->f;
    o->f = NULL;
    if (f == stdout || f == stderr) {
        if (fflush(f) == 0 && !ferror(f)) return 0;
        return ok ? dmm_tool_err(err, errcap, "writing %s to the standard %s failed: %s", o->opt,
                                 f == stdout ? "output" : "error", strerror(errno))
                  : -1;
    }
    int e = 0;
    if (ok && (fflush(f) != 0 || ferror(f))) e = errno ? errno : EIO;
    if (ok && e == 0 && o->temp != NULL && fsync(fileno(f)) != 0) e = errno;
    if (fclose(f) != 0 && ok && e == 0) e = errno ? errno : EIO;
    if (o->temp == NULL) { /* a device or FIFO: nothing to rename, nothing to remove */
        if (ok && e != 0)
            return dmm_tool_err(err, errcap, "writing %s %s failed (%s); it is a device or FIFO, written in place, and "
                                "was left there", o->opt, o->path, strerror(e));
        return 0;
    }
    bool ours = temp_is_ours(o);
    if (ok && e == 0 && !ours) {
        int rc = dmm_tool_err(err, errcap, "%s %s: the temporary %s was replaced by someone else while dmm wrote it; "
                              "%s is as it was and nothing was removed: write into a folder only you can write",
                              o->opt, o->path, o->temp, o->path);
        forget(o);
        return rc;
    }
    if (ok && e == 0 && rename(o->temp, o->target) == 0) {
        forget(o);
        return 0;
    }
    if (ok && e == 0) e = errno;
    if (ours) unlink(o->temp);
    int rc = ok ? dmm_tool_err(err, errcap, "writing %s %s failed (%s); %s is as it was before the run", o->opt,
                               o->path, strerror(e), o->path)
                : 0;
    forget(o);
    return rc;
}
