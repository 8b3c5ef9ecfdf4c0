/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_hold.c — `dmm hold --socket PATH [options]`: the holder process of dmm/ipc.h. It keeps
 * named regions of memory alive across the restarts and crashes of the clients that use them, until
 * they are dropped by name (docs/ipc.md; its threat model: docs/security.md). It prints the library's
 * log lines (refusals, drops) on stderr, and stops on SIGINT or SIGTERM, dropping everything it holds
 * and removing its socket (if the file at the path is still its own).
 *
 * Logging never blocks serving: the loop calls the log callback, so a stderr that nobody reads (a
 * full pipe) must not stop it. Lines go out through a descriptor that never waits: stderr reopened
 * non-blocking through /proc/self/fd/2 where it is a pipe, FIFO or terminal (a description of our
 * own, so the shared one's flags stay as they are), send(MSG_DONTWAIT) where it is a socket, a plain
 * write where it is a regular file (which does not block on readers). A line that does not fit is
 * dropped and counted; the next line that fits is preceded by the count. Each line is at most
 * PIPE_BUF bytes, so a pipe takes it whole or not at all. The same goes for the one line on stdout.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "dmm/dmm.h"

void dmm_usage_hold(FILE *f) {
    fprintf(f, "usage: dmm hold --socket PATH [--limit BYTES] [--cuda N] [--hello-deadline MS]\n"
               "                [--max-connections N] [--max-connections-per-uid N]\n\n"
               "Keeps named regions of memory alive for the processes that attach them (docs/ipc.md).\n");
    dmm_cli_print_flags(f, "dmm hold");
    fprintf(f, "Serves only your own uid; see docs/security.md for what it promises. Log lines that stderr\n"
               "cannot take at once are dropped and counted, never waited for. Stops on SIGINT or SIGTERM,\n"
               "dropping every region. Exit 0 after a stop, 1 when it could not start or serve, 2 on bad usage.\n");
}

static int stop_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    ssize_t w = write(stop_pipe[1], "x", 1);
    (void)w;
    errno = saved;
}

/* Where lines go without ever waiting. */
typedef struct hold_sink {
    int fd;              /* the descriptor written */
    bool own;            /* fd is our own non-blocking reopening (closed at the end) */
    bool socket;         /* fd is a socket: send(MSG_DONTWAIT) */
    bool check;          /* neither: ask poll() before writing (the reopening failed) */
    uint64_t dropped;    /* lines dropped since the last one written */
    uint64_t dropped_all;
} hold_sink;

static hold_sink sink_err, sink_out;

static void sink_open(hold_sink *s, int fd) {
    memset(s, 0, sizeof *s);
    s->fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    if (S_ISSOCK(st.st_mode)) {
        s->socket = true;
    } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
        char path[32];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        int own = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (own >= 0) {
            s->fd = own;
            s->own = true;
        } else {
            s->check = true;
        }
    }
}

static void sink_close(hold_sink *s) {
    if (s->own) close(s->fd);
    s->own = false;
}

/* Writes one line whole, or not at all; true when written. */
static bool sink_try(hold_sink *s, const char *line, size_t n) {
    if (s->check) {
        struct pollfd p = {s->fd, POLLOUT, 0};
        if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) return false;
    }
    ssize_t w = s->socket ? send(s->fd, line, n, MSG_DONTWAIT | MSG_NOSIGNAL) : write(s->fd, line, n);
    return w == (ssize_t)n;
}

static void sink_line(hold_sink *s, const char *text) {
    char line[PIPE_BUF];
    if (s->dropped > 0) {
        int k = snprintf(line, sizeof line, "! dmm hold: %llu log line(s) dropped: this stream did not take them at "
                                            "once\n", (unsigned long long)s->dropped);
        if (!sink_try(s, line, (size_t)k)) {
            s->dropped++;
            s->dropped_all++;
            return;
        }
        s->dropped = 0;
    }
    int k = snprintf(line, sizeof line, "%s\n", text);
    size_t n = k < 0 ? 0 : (size_t)k >= sizeof line ? sizeof line - 1 : (size_t)k;
    if (n > 0 && line[n - 1] != '\n') line[n - 1] = '\n'; /* cut to PIPE_BUF: still one line */
    if (!sink_try(s, line, n)) {
        s->dropped++;
        s->dropped_all++;
    }
}

static void print_log(void *user, dmm_log_level level, const char *message) {
    (void)user;
    char text[PIPE_BUF];
    snprintf(text, sizeof text, "%s %s", level <= DMM_LOG_WARN ? "!" : "-", message);
    sink_line(&sink_err, text);
}

/* Prints "dmm hold: <text>" on stderr through the sink. */
static void say(const char *what, const char *text) {
    char line[PIPE_BUF];
    snprintf(line, sizeof line, "dmm hold: %s%s", what, text);
    sink_line(&sink_err, line);
}

int dmm_cmd_hold(int argc, char **argv) {
    struct option longs[11];
    dmm_cli_longs("dmm hold", longs, sizeof longs / sizeof longs[0]);
    const char *path = NULL;
    uint64_t limit = 0, cuda = UINT64_MAX, hello = 0, max_conns = 0, max_uid = 0;
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'h': dmm_usage_hold(stdout); return 0;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_SOCKET): path = optarg; break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_LIMIT): rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_LIMIT, optarg, &limit); break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_CUDA): rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_CUDA, optarg, &cuda); break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_HELLO_DEADLINE):
            rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_HELLO_DEADLINE, optarg, &hello);
            break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_MAX_CONNECTIONS):
            rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_MAX_CONNECTIONS, optarg, &max_conns);
            break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_MAX_CONNECTIONS_PER_UID):
            rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_MAX_CONNECTIONS_PER_UID, optarg, &max_uid);
            break;
        default: return dmm_cli_bad_option("hold", c, argv);
        }
        if (rc != 0) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "dmm hold: takes no arguments besides its options (got '%s').\n", argv[optind]);
        return 2;
    }
    if (path == NULL) {
        fprintf(stderr, "dmm hold: --socket PATH is required: where clients connect.\n");
        dmm_usage_hold(stderr);
        return 2;
    }
    uint64_t all = max_conns ? max_conns : DMM_IPC_MAX_CONNECTIONS;
    if (max_uid > all) {
        fprintf(stderr, "dmm hold: --max-connections-per-uid %llu is more than the %llu connections served in all; "
                        "give at most %llu.\n", (unsigned long long)max_uid, (unsigned long long)all,
                (unsigned long long)all);
        return 2;
    }
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "dmm hold: pipe2 failed: %s\n", strerror(errno));
        return 1;
    }
    sink_open(&sink_err, STDERR_FILENO);
    sink_open(&sink_out, STDOUT_FILENO);
    dmm_set_log_callback(print_log, NULL, DMM_LOG_INFO);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    dmm_driver *drv = NULL;
    int rc = 0;
    if (cuda != UINT64_MAX && dmm_cuda_driver_create((int)cuda, &drv) != DMM_OK) {
        char what[64];
        snprintf(what, sizeof what, "--cuda %llu: ", (unsigned long long)cuda);
        say(what, dmm_last_error());
        rc = 1;
    }
    dmm_ipc_holder_config cfg = {sizeof cfg, path, limit, drv, (uint32_t)hello, (uint32_t)max_conns, (uint32_t)max_uid};
    dmm_ipc_holder *h = NULL;
    if (rc == 0 && dmm_ipc_holder_create(&cfg, &h) != DMM_OK) {
        say("", dmm_last_error());
        rc = 1;
    } else if (rc == 0) {
        char line[PIPE_BUF];
        snprintf(line, sizeof line, "dmm hold: listening on %s", path);
        sink_line(&sink_out, line);
        if (dmm_ipc_holder_serve(h, stop_pipe[0], -1) != DMM_OK) {
            say("", dmm_last_error());
            rc = 1;
        }
        if (dmm_ipc_holder_destroy(h) != DMM_OK) {
            say("stopping: ", dmm_last_error());
            rc = 1;
        }
    }
    dmm_set_log_callback(NULL, NULL, DMM_LOG_ERROR);
    if (sink_err.dropped_all > 0) {
        char line[128];
        snprintf(line, sizeof line, "%llu log line(s) were dropped in all: stderr did not take them at once",
                 (unsigned long long)sink_err.dropped_all);
        say("", line);
    }
    sink_close(&sink_err);
    sink_close(&sink_out);
    if (drv != NULL) dmm_driver_destroy(drv);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    return rc;
}
