/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cmd_info.c — `dmm info`: what this machine offers dmm.
 *
 * Lists the host driver (always there: granularity, memory) and the CUDA devices (driver version,
 * name, compute capability, VMM support, granularity, free/total memory). Without a CUDA driver or
 * GPU it prints "cuda: no CUDA driver: <reason>" and still exits 0: having no GPU is a fact to
 * report, not a failure of the command. Exit 1 only when a present device cannot be queried.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "core/core.h"
#include "dmm/dmm.h"

static void info_host(void) {
    dmm_driver *host = NULL;
    char a[32], b[32], g[32];
    if (dmm_host_driver_create(NULL, &host) != DMM_OK) {
        printf("host: unavailable: %s\n", dmm_last_error());
        return;
    }
    size_t granule = 0;
    uint64_t f = 0, t = 0;
    dmm_status sg = host->ops->granularity(host, &granule);
    dmm_status sm = host->ops->mem_info(host, &f, &t);
    printf("host: driver 'host' (mmap + memfd), granularity %s",
           sg == DMM_OK ? dmm__fmt_bytes(granule, g, sizeof g) : "?");
    if (sm == DMM_OK)
        printf(", memory %s free of %s\n", dmm__fmt_bytes(f, a, sizeof a), dmm__fmt_bytes(t, b, sizeof b));
    else
        printf(", memory unknown (%s)\n", dmm_last_error());
    dmm_driver_destroy(host);
}

/* Returns the number of devices that could not be queried. */
static int info_cuda(void) {
    int n = 0;
    (void)dmm_cuda_device_count(&n);
    if (n == 0) {
        /* Creating a driver is what explains the absence ("no CUDA driver: <reason>"). */
        dmm_driver *d = NULL;
        dmm_status s = dmm_cuda_driver_create(0, &d);
        if (s == DMM_OK) { /* a device appeared between the two calls */
            dmm_driver_destroy(d);
            printf("cuda: a device appeared while looking; run again\n");
            return 0;
        }
        const char *why = strstr(dmm_last_error(), "no CUDA driver");
        printf("cuda: %s\n", why != NULL ? why : dmm_last_error());
        return 0;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        dmm_cuda_device_info info;
        memset(&info, 0, sizeof info);
        info.size = sizeof info;
        if (dmm_cuda_device_query(i, &info) != DMM_OK) {
            printf("cuda device %d: cannot be queried: %s\n", i, dmm_last_error());
            bad++;
            continue;
        }
        if (i == 0)
            printf("cuda: %d device(s), driver version %d.%d\n", n, info.driver_version / 1000,
                   (info.driver_version % 1000) / 10);
        char g[32], f[32], t[32];
        printf("cuda device %d: %s, compute %d.%d, VMM %s, granularity %s, memory %s free of %s\n", i, info.name,
               info.compute_major, info.compute_minor, info.vmm_supported ? "yes" : "no",
               info.vmm_supported ? dmm__fmt_bytes(info.granularity, g, sizeof g) : "n/a",
               dmm__fmt_bytes(info.free_bytes, f, sizeof f), dmm__fmt_bytes(info.total_bytes, t, sizeof t));
    }
    return bad;
}

void dmm_usage_info(FILE *f) {
    fprintf(f, "usage: dmm info\n\nLists the host driver and every CUDA device: driver version, VMM support,\n"
               "granularity and free/total memory. Exit 0 also without a GPU.\n");
}

int dmm_cmd_info(int argc, char **argv) {
    int rc = dmm_cli_no_arguments("info", argc, argv, dmm_usage_info);
    if (rc >= 0) return rc;
    printf("dmm %s\n", dmm_version_string());
    info_host();
    return info_cuda() == 0 ? 0 : 1;
}
