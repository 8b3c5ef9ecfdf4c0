/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_cli_files.c — the dmm tool against files that are not what they claim (issue 35,
 * items 11–13; tools/output_file.c, tools/input_file.c, the bounds of tools/trace.c), through the
 * real tool (tests/common/tool_kit.h), real FIFOs, device nodes made here with mknod, real pipes and
 * writer processes that never stop.
 *
 * What is proven:
 *   outputs (11) — a FIFO, a character device (a null and a full one, made in a scratch folder: the
 *   machine's own /dev is never named where the old tool would have removed it), and a link to this
 *   process's standard output are written in place and are still there afterwards, whether the run
 *   succeeded, failed, or the device refused the bytes (/dev/full's "No space left on device" is the
 *   sentence, exit 1); a regular file is replaced by a rename (a new inode, the old mode kept; a new
 *   file takes 0666 less the umask), a link to one keeps being a link, a failed run leaves the file and
 *   its inode as they were, and no temporary is left behind; a folder or a link to nothing is refused
 *   before the work and nothing is created;
 *   inputs (12, 13) — `dmm replay /dev/zero` ends with the line's sentence; a writer that never stops
 *   (valid events, or comments) ends at --max-records / --max-input-bytes with a sentence naming the
 *   flag; a small gzip file that inflates past --max-input-bytes is refused; `dmm ort /dev/zero` ends
 *   at --max-input-bytes, and a sparse 3 GiB "model" is refused by the default bound without being
 *   read; `dmm compare` refuses a bench result above 4 MiB unless --max-input-bytes raises the bound;
 *   the flags are in the commands' --help.
 * A run that does not end is caught by the runner's 60 s safety net: a failure, never a measurement.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "testkit.h"
#include "tool_kit.h"

#define NEED_TOOL()                                                                                \
    do {                                                                                           \
        if (!dmm_test_tool_find()) skip(); /* DMM_BUILD_TOOLS=OFF */                               \
    } while (0)

typedef struct scratch {
    char dir[64];
    char trace[128];
} scratch;

/* A fresh folder with a small valid trace in it. */
static void scratch_open(scratch *s) {
    snprintf(s->dir, sizeof s->dir, "/tmp/dmm-test-cli-files-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->trace, sizeof s->trace, "%s/small.trace", s->dir);
    FILE *f = fopen(s->trace, "w");
    assert_non_null(f);
    fputs("# dmm-trace v1\n0 a 1 4194304 0\n1 a 2 1048576 0\n2 f 1\n3 a 3 6291456 0\n4 f 2\n5 f 3\n", f);
    assert_int_equal(fclose(f), 0);
}

/* The names in the folder (but . and ..), space-separated, sorted by the caller's expectation. */
static void listing(const scratch *s, char *out, size_t cap) {
    out[0] = '\0';
    DIR *d = opendir(s->dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s ", e->d_name);
    }
    closedir(d);
}

/* Fails when a temporary (".NAME.dmm-...") is left in the folder. */
static void no_temporary_left(const scratch *s) {
    char names[4096];
    listing(s, names, sizeof names);
    if (strstr(names, ".dmm-") != NULL) fail_msg("a temporary is left behind: %s", names);
}

static void scratch_close(scratch *s) {
    DIR *d = opendir(s->dir);
    assert_non_null(d);
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(d);
    assert_int_equal(rmdir(s->dir), 0);
}

static void path_in(const scratch *s, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", s->dir, name);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* ---- outputs (item 11) ---- */

static void a_fifo_is_written_in_place_and_never_removed(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char fifo[160], opt[200];
    path_in(&s, "out.fifo", fifo, sizeof fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader, so that the tool's open does not wait */
    assert_true(rd >= 0);
    static dmm_test_tool_run r;
    static char got[1 << 16];
    snprintf(opt, sizeof opt, "--json=%s", fifo);
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 0, "peak live", NULL);
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    ssize_t n = read(rd, got, sizeof got - 1);
    assert_true(n > 0);
    got[n] = '\0';
    if (strncmp(got, "{\"trace\":", 9) != 0) fail_msg("the FIFO carried '%.200s'", got);
    /* the HTML report too; and a failed run leaves the FIFO where it was */
    dmm_test_tool_run_args(&r, "replay", s.trace, "--report", fifo, NULL);
    dmm_test_tool_expect(&r, 0, NULL, NULL);
    n = read(rd, got, sizeof got - 1);
    assert_true(n > 0);
    got[n] = '\0';
    assert_non_null(strstr(got, "<!DOCTYPE html>"));
    dmm_test_tool_run_args(&r, "replay", "/tmp/dmm-test-cli-files-no-such.trace", opt, NULL);
    dmm_test_tool_expect(&r, 1, NULL, "cannot open trace");
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    close(rd);
    no_temporary_left(&s);
    scratch_close(&s);
}

/* A character device node made here (null: 1,3; full: 1,7); false when this process may not make one. */
static bool make_device(const char *path, unsigned minor) {
    return mknod(path, S_IFCHR | 0666, makedev(1, minor)) == 0;
}

static void expect_device(const char *path, unsigned minor) {
    struct stat st;
    if (lstat(path, &st) != 0) fail_msg("the device %s is gone: %s", path, strerror(errno));
    if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, minor)) fail_msg("%s is no longer the device 1,%u", path, minor);
}

static void a_device_is_written_in_place_and_never_removed(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char null_dev[160], full_dev[160], opt[200];
    path_in(&s, "null", null_dev, sizeof null_dev);
    path_in(&s, "full", full_dev, sizeof full_dev);
    if (!make_device(null_dev, 3) || !make_device(full_dev, 7)) {
        /* not root (or no CAP_MKNOD): the machine's own nodes, which such a process cannot remove */
        if (geteuid() == 0) {
            scratch_close(&s);
            printf("SKIP: root without CAP_MKNOD: no device node to write to that the old tool could not remove\n");
            skip();
        }
        snprintf(null_dev, sizeof null_dev, "/dev/null");
        snprintf(full_dev, sizeof full_dev, "/dev/full");
    }
    static dmm_test_tool_run r;
    snprintf(opt, sizeof opt, "--json=%s", null_dev);
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 0, "peak live", NULL);
    expect_device(null_dev, 3);
    dmm_test_tool_run_args(&r, "replay", s.trace, "--report", null_dev, NULL);
    dmm_test_tool_expect(&r, 0, NULL, NULL);
    expect_device(null_dev, 3);
    dmm_test_tool_run_args(&r, "ort", "--write-model", null_dev, NULL);
    dmm_test_tool_expect(&r, 0, "wrote", NULL);
    expect_device(null_dev, 3);
    /* a device that refuses the bytes: the run fails with the device's reason, and the device stays */
    snprintf(opt, sizeof opt, "--json=%s", full_dev);
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 1, NULL, "No space left on device");
    assert_non_null(strstr(r.err, "written in place"));
    expect_device(full_dev, 7);
    dmm_test_tool_run_args(&r, "ort", "--write-model", full_dev, NULL);
    dmm_test_tool_expect(&r, 1, NULL, "No space left on device");
    expect_device(full_dev, 7);
    no_temporary_left(&s);
    scratch_close(&s);
}

static void a_link_to_the_standard_output_is_that_stream(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char link[160], opt[200];
    path_in(&s, "stdout", link, sizeof link);
    assert_int_equal(symlink("/proc/self/fd/1", link), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    snprintf(opt, sizeof opt, "--json=%s", link);
    static dmm_test_tool_run r;
    const char *args[] = {"replay", s.trace, opt, NULL};
    dmm_test_tool_run_argv(&r, p[1], args); /* its standard output is a pipe (the output is small) */
    close(p[1]);
    static char got[1 << 16];
    ssize_t n = read(p[0], got, sizeof got - 1);
    close(p[0]);
    got[n > 0 ? n : 0] = '\0';
    dmm_test_tool_expect(&r, 0, NULL, NULL);
    if (strncmp(got, "{\"trace\":", 9) != 0) fail_msg("the pipe carried '%.200s'", got);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    no_temporary_left(&s);
    scratch_close(&s);
}

static void a_regular_file_is_replaced_whole_by_a_rename(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char file[160], link[160], opt[200];
    static char body[1 << 16];
    path_in(&s, "result.json", file, sizeof file);
    path_in(&s, "latest.json", link, sizeof link);
    write_text(file, "an older and much longer content than the result will ever be, to be replaced whole");
    assert_int_equal(chmod(file, 0640), 0);
    struct stat before, after;
    assert_int_equal(stat(file, &before), 0);
    static dmm_test_tool_run r;
    /* a failed run: the file and its inode as they were */
    snprintf(opt, sizeof opt, "--json=%s", file);
    dmm_test_tool_run_args(&r, "replay", "/tmp/dmm-test-cli-files-no-such.trace", opt, NULL);
    dmm_test_tool_expect(&r, 1, NULL, "cannot open trace");
    assert_int_equal(stat(file, &after), 0);
    assert_true(after.st_ino == before.st_ino);
    read_text(file, body, sizeof body);
    assert_non_null(strstr(body, "an older and much longer content"));
    no_temporary_left(&s);
    /* a run that succeeds: a new inode at the name, the mode kept, the whole result */
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 0, "peak live", NULL);
    assert_int_equal(stat(file, &after), 0);
    if (after.st_ino == before.st_ino) fail_msg("%s", "the file was written in place, not replaced by a rename");
    assert_int_equal(after.st_mode & 0777, 0640);
    read_text(file, body, sizeof body);
    if (body[0] != '{' || strstr(body, "older") != NULL) fail_msg("the file holds '%.200s'", body);
    no_temporary_left(&s);
    /* through a link: the file it names is replaced, the link stays a link */
    assert_int_equal(symlink("result.json", link), 0);
    snprintf(opt, sizeof opt, "--json=%s", link);
    write_text(file, "old");
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 0, "peak live", NULL);
    assert_int_equal(lstat(link, &after), 0);
    assert_true(S_ISLNK(after.st_mode));
    read_text(file, body, sizeof body);
    assert_true(body[0] == '{');
    /* a new file: 0666 less the umask, set on the descriptor */
    char fresh[160];
    path_in(&s, "fresh.html", fresh, sizeof fresh);
    mode_t old_mask = umask(027);
    dmm_test_tool_run_args(&r, "replay", s.trace, "--report", fresh, NULL);
    umask(old_mask);
    dmm_test_tool_expect(&r, 0, NULL, NULL);
    assert_int_equal(stat(fresh, &after), 0);
    assert_int_equal(after.st_mode & 0777, 0640);
    no_temporary_left(&s);
    scratch_close(&s);
}

static void what_cannot_be_written_is_refused_before_the_work(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char folder[160], dangling[160], nowhere[160], opt[200];
    path_in(&s, "folder", folder, sizeof folder);
    path_in(&s, "dangling.json", dangling, sizeof dangling);
    path_in(&s, "nowhere.json", nowhere, sizeof nowhere);
    assert_int_equal(mkdir(folder, 0700), 0);
    assert_int_equal(symlink("nowhere.json", dangling), 0);
    static dmm_test_tool_run r;
    snprintf(opt, sizeof opt, "--json=%s", folder);
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 2, NULL, "is a folder");
    snprintf(opt, sizeof opt, "--json=%s", dangling);
    dmm_test_tool_run_args(&r, "replay", s.trace, opt, NULL);
    dmm_test_tool_expect(&r, 2, NULL, "symbolic link to a file that does not exist");
    struct stat st;
    assert_int_equal(lstat(nowhere, &st), -1); /* nothing was created through the link */
    assert_int_equal(lstat(dangling, &st), 0);
    no_temporary_left(&s);
    scratch_close(&s);
}

/* ---- inputs (items 12, 13) ---- */

/* A process that writes into the FIFO at `path` for ever: valid events (events = true) or comment
 * lines, until its reader goes (EPIPE). Its pid. */
static pid_t endless_writer(const char *path, bool events) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0) return pid;
    signal(SIGPIPE, SIG_IGN);
    int fd = open(path, O_WRONLY);
    if (fd < 0) _exit(1);
    char buf[1 << 16];
    size_t n = (size_t)snprintf(buf, sizeof buf, "# dmm-trace v1\n");
    for (unsigned long long id = 1;; id++) {
        if (events) n += (size_t)snprintf(buf + n, sizeof buf - n, "%llu a %llu 512 0\n%llu f %llu\n", id, id, id, id);
        else n += (size_t)snprintf(buf + n, sizeof buf - n, "# and more\n");
        if (n > sizeof buf - 128) {
            if (write(fd, buf, n) != (ssize_t)n) _exit(0); /* the reader is gone */
            n = 0;
        }
    }
}

static void end_writer(pid_t pid) {
    kill(pid, SIGKILL); /* (our own child, by its pid) */
    waitpid(pid, NULL, 0);
}

static void an_endless_trace_ends_with_a_sentence(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    static dmm_test_tool_run r;
    /* /dev/zero: one endless line, refused, and the reading stops (it once read on for ever) */
    dmm_test_tool_run_args(&r, "replay", "/dev/zero", NULL);
    dmm_test_tool_expect(&r, 1, NULL, "line 1 is longer than 65536 bytes");
    char fifo[160];
    path_in(&s, "endless.trace", fifo, sizeof fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t w = endless_writer(fifo, true);
    dmm_test_tool_run_args(&r, "replay", fifo, "--max-records=1000", NULL);
    end_writer(w);
    dmm_test_tool_expect(&r, 1, NULL, "more than 1000 records");
    assert_non_null(strstr(r.err, "--max-records=N"));
    w = endless_writer(fifo, false);
    dmm_test_tool_run_args(&r, "replay", fifo, "--max-input-bytes", "64K", NULL);
    end_writer(w);
    dmm_test_tool_expect(&r, 1, NULL, "more than 65536 bytes of text");
    assert_non_null(strstr(r.err, "--max-input-bytes=SIZE"));
    /* a small gzip file that inflates past the bound */
    char bomb[160];
    path_in(&s, "bomb.trace.gz", bomb, sizeof bomb);
    gzFile g = gzopen(bomb, "wb9");
    assert_non_null(g);
    static char comments[1 << 16];
    for (size_t i = 0; i + 2 <= sizeof comments; i += 2) memcpy(comments + i, "#\n", 2);
    gzputs(g, "# dmm-trace v1\n");
    for (int i = 0; i < 64; i++) assert_int_equal(gzwrite(g, comments, sizeof comments), (int)sizeof comments);
    assert_int_equal(gzclose(g), Z_OK);
    dmm_test_tool_run_args(&r, "replay", bomb, "--max-input-bytes=1M", NULL);
    dmm_test_tool_expect(&r, 1, NULL, "more than 1048576 bytes of text (after decompression");
    dmm_test_tool_run_args(&r, "replay", bomb, "--max-input-bytes=8M", NULL);
    dmm_test_tool_expect(&r, 0, "events          0", NULL); /* a higher bound reads it whole: no events */
    dmm_test_tool_run_args(&r, "replay", s.trace, "--max-records=0", NULL);
    dmm_test_tool_expect(&r, 2, NULL, "--max-records wants a number of events");
    dmm_test_tool_run_args(&r, "replay", "--help", NULL);
    dmm_test_tool_expect(&r, 0, "--max-input-bytes", NULL);
    dmm_test_tool_expect(&r, 0, "--max-records", NULL);
    dmm_test_tool_run_args(&r, "--help", NULL);
    dmm_test_tool_expect(&r, 0, "--max-input-bytes SIZE", NULL);
    dmm_test_tool_expect(&r, 0, "--max-records N", NULL);
    scratch_close(&s);
}

static void an_endless_or_oversized_model_is_refused(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    static dmm_test_tool_run r;
    dmm_test_tool_run_args(&r, "ort", "/dev/zero", "--max-input-bytes=1M", NULL);
    dmm_test_tool_expect(&r, 2, NULL, "/dev/zero: more than 1 MiB were read");
    assert_non_null(strstr(r.err, "--max-input-bytes=SIZE"));
    /* above the default bound (2 GiB): refused by its size, unread (a sparse file costs nothing) */
    char big[160];
    path_in(&s, "big.onnx", big, sizeof big);
    int fd = open(big, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)3 << 30), 0);
    close(fd);
    dmm_test_tool_run_args(&r, "ort", big, NULL);
    dmm_test_tool_expect(&r, 2, NULL, "larger than 2 GiB, the most an ONNX model may be");
    assert_non_null(strstr(r.err, "nothing was read"));
    dmm_test_tool_run_args(&r, "ort", "--help", NULL);
    dmm_test_tool_expect(&r, 0, "--max-input-bytes", NULL);
    scratch_close(&s);
}

static void a_bench_result_above_the_bound_is_refused_unless_raised(void **state) {
    (void)state;
    NEED_TOOL();
    scratch s;
    scratch_open(&s);
    char json[160];
    path_in(&s, "big.json", json, sizeof json);
    FILE *f = fopen(json, "w");
    assert_non_null(f);
    fputs("{\"bench\":\"b\",\"version\":\"0.1.0\",\"host\":\"test\",\"metrics\":[{\"name\":\"m\",\"unit\":\"ns\","
          "\"better\":\"lower\",\"median\":10,\"samples\":101,\"mad\":0.5}]", f);
    for (int i = 0; i < 5 << 10; i++) fprintf(f, "%1023s\n", ""); /* 5 MiB of blanks before the end */
    fputs("}\n", f);
    assert_int_equal(fclose(f), 0);
    static dmm_test_tool_run r;
    dmm_test_tool_run_args(&r, "compare", json, json, NULL);
    dmm_test_tool_expect(&r, 2, NULL, "larger than 4 MiB, the most a bench result may be");
    dmm_test_tool_run_args(&r, "compare", json, json, "--max-input-bytes=8M", NULL);
    dmm_test_tool_expect(&r, 0, NULL, NULL);
    dmm_test_tool_run_args(&r, "compare", "/dev/zero", json, NULL);
    dmm_test_tool_expect(&r, 2, NULL, "/dev/zero: more than 4 MiB were read");
    scratch_close(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_fifo_is_written_in_place_and_never_removed),
        cmocka_unit_test(a_device_is_written_in_place_and_never_removed),
        cmocka_unit_test(a_link_to_the_standard_output_is_that_stream),
        cmocka_unit_test(a_regular_file_is_replaced_whole_by_a_rename),
        cmocka_unit_test(what_cannot_be_written_is_refused_before_the_work),
        cmocka_unit_test(an_endless_trace_ends_with_a_sentence),
        cmocka_unit_test(an_endless_or_oversized_model_is_refused),
        cmocka_unit_test(a_bench_result_above_the_bound_is_refused_unless_raised),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
