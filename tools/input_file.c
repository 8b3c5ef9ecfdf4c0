/* SPDX-License-Identifier: Apache-2.0 */
/* tools/input_file.c — whole input files read within a bound (contract: input_file.h).
 *
 * What it owns: the one reader of a whole file for the tool, so that no command grows a buffer without
 * limit again (`dmm ort /dev/zero` once took 2 GiB in 3 s and went on).
 * The idea: ask the descriptor what it is. A regular file states its size, so a file over the bound is
 * refused unread and one under it is read into a buffer of its size (+1, to see it grow meanwhile);
 * anything else states nothing, so it is read in doubling pieces up to one byte past the bound.
 * Trade-off: a file that grows while it is read is taken as far as the bound, not refused at its
 * stated size: the bound, not the stat, is the promise.
 * Invariants: len ≤ max_bytes on success; the buffer never grows beyond max_bytes + 2 bytes; on failure
 * nothing is kept and *buf is NULL.
 */
#include "input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err_text.h"

#define FIRST_PIECE ((size_t)64 << 10) /* of an input whose size is unknown */

/* "4 MiB" when n is a whole number of MiB or GiB, else "N bytes". */
static const char *size_text(uint64_t n, char *s, size_t cap) {
    if (n >= (1u << 30) && n % (1u << 30) == 0) snprintf(s, cap, "%llu GiB", (unsigned long long)(n >> 30));
    else if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(s, cap, "%llu MiB", (unsigned long long)(n >> 20));
    else snprintf(s, cap, "%llu bytes", (unsigned long long)n);
    return s;
}

int dmm_input_read(const char *path, const dmm_input_bound *b, char **buf, size_t *len, char *err, size_t errcap) {
    *buf = NULL;
    *len = 0;
    char most[32];
    size_text(b->max_bytes, most, sizeof most);
    int fd = open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return dmm_tool_err(err, errcap, "%s: cannot open it: %s.", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
        close(fd);
        return dmm_tool_err(err, errcap, "%s: cannot read it: %s.", path, strerror(e));
    }
    bool regular = S_ISREG(st.st_mode);
    if (regular && (uint64_t)st.st_size > b->max_bytes) {
        close(fd);
        return dmm_tool_err(err, errcap, "%s: larger than %s, the most %s may be (%s=SIZE raises the bound if it "
                            "really is one); nothing was read.", path, most, b->what, b->flag);
    }
    uint64_t limit = b->max_bytes + 1; /* one byte past the bound tells that it goes on */
    size_t cap = regular ? (size_t)st.st_size + 2 : (limit < FIRST_PIECE ? (size_t)limit + 1 : FIRST_PIECE);
    char *p = malloc(cap);
    size_t n = 0;
    int e = 0;
    while (p != NULL) {
        if (n + 1 == cap) { /* full but for the terminator: grow, up to the bound */
            if ((uint64_t)n >= limit) break;
            size_t want = (uint64_t)cap * 2 > limit + 1 ? (size_t)limit + 1 : cap * 2;
            char *q = realloc(p, want);
            if (q == NULL) {
                free(p);
                p = NULL;
                break;
            }
            p = q;
            cap = want;
        }
        ssize_t got = read(fd, p + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) e = errno;
        if (got <= 0) break;
        n += (size_t)got;
        if ((uint64_t)n >= limit) break;
    }
    close(fd);
    if (p == NULL) return dmm_tool_err(err, errcap, "%s: out of host memory reading it (%zu bytes so far).", path, n);
    if (e != 0) {
        free(p);
        return dmm_tool_err(err, errcap, "%s: reading it failed after %zu bytes: %s.", path, n, strerror(e));
    }
    if ((uint64_t)n > b->max_bytes) {
        free(p);
        if (regular)
            return dmm_tool_err(err, errcap, "%s: it grew past %s while it was read, the most %s may be (%s=SIZE "
                                "raises the bound).", path, most, b->what, b->flag);
        return dmm_tool_err(err, errcap, "%s: more than %s were read and it goes on, but %s is at most %s (an input "
                            "that never ends, such as a device or a pipe, is not one; %s=SIZE raises the bound).",
                            path, most, b->what, most, b->flag);
    }
    p[n] = '\0';
    *buf = p;
    *len = n;
    return 0;
}
