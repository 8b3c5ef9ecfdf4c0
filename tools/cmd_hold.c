/* tools/cmd_hold.c — `dmm hold --socket PATH [--limit BYTES] [--cuda N]`: the holder process of dmm/ipc.h. It
 * keeps named regions of memory alive across the restarts and crashes of the clients that use them,
 * until they are dropped by name (docs/ipc.md). It prints the library's log lines (refusals, drops)
 * on stderr, and stops on SIGINT or SIGTERM, dropping everything it holds and removing its socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dmm/dmm.h"

void dmm_usage_hold(FILE *f) {
    fprintf(f, "usage: dmm hold --socket PATH [--limit BYTES] [--cuda N]\n\n"
               "Keeps named regions of memory alive for the processes that attach them (docs/ipc.md).\n");
    dmm_cli_print_flags(f, "dmm hold");
    fprintf(f, "Serves only your own uid. Stops on SIGINT or SIGTERM, dropping every region. Exit 0 after a\n"
               "stop, 1 when it could not start or serve, 2 on bad usage.\n");
}

static int stop_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    ssize_t w = write(stop_pipe[1], "x", 1);
    (void)w;
    errno = saved;
}

static void print_log(void *user, dmm_log_level level, const char *message) {
    (void)user;
    fprintf(stderr, "%s %s\n", level <= DMM_LOG_WARN ? "!" : "-", message);
    fflush(stderr);
}

int dmm_cmd_hold(int argc, char **argv) {
    struct option longs[8];
    dmm_cli_longs("dmm hold", longs, sizeof longs / sizeof longs[0]);
    const char *path = NULL;
    uint64_t limit = 0, cuda = UINT64_MAX;
    dmm_cli_getopt_reset();
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'h': dmm_usage_hold(stdout); return 0;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_SOCKET): path = optarg; break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_LIMIT): rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_LIMIT, optarg, &limit); break;
        case DMM_CLI_FLAG(DMM_OPTION_HOLD_CUDA): rc = dmm_cli_flag_u64("hold", DMM_OPTION_HOLD_CUDA, optarg, &cuda); break;
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
    dmm_set_log_callback(print_log, NULL, DMM_LOG_INFO);
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "dmm hold: pipe2 failed: %s\n", strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    dmm_driver *drv = NULL;
    if (cuda != UINT64_MAX && dmm_cuda_driver_create((int)cuda, &drv) != DMM_OK) {
        fprintf(stderr, "dmm hold: --cuda %llu: %s\n", (unsigned long long)cuda, dmm_last_error());
        close(stop_pipe[0]);
        close(stop_pipe[1]);
        return 1;
    }
    dmm_ipc_holder_config cfg = {sizeof cfg, path, limit, drv};
    dmm_ipc_holder *h = NULL;
    int rc = 0;
    if (dmm_ipc_holder_create(&cfg, &h) != DMM_OK) {
        fprintf(stderr, "dmm hold: %s\n", dmm_last_error());
        rc = 1;
    } else {
        printf("dmm hold: listening on %s\n", path);
        fflush(stdout);
        if (dmm_ipc_holder_serve(h, stop_pipe[0], -1) != DMM_OK) {
            fprintf(stderr, "dmm hold: %s\n", dmm_last_error());
            rc = 1;
        }
        if (dmm_ipc_holder_destroy(h) != DMM_OK) {
            fprintf(stderr, "dmm hold: stopping: %s\n", dmm_last_error());
            rc = 1;
        }
    }
    dmm_set_log_callback(NULL, NULL, DMM_LOG_ERROR);
    if (drv != NULL) dmm_driver_destroy(drv);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    return rc;
}
