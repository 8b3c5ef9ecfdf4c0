/* SPDX-License-Identifier: Apache-2.0 */
/* tools/output_file.h — the dmm tool's output files (--json=FILE, --report FILE, --write-model FILE):
 * what a path the user named may be, and how it is written without harming what is already there.
 *
 * The target decides (DESIGN §4.17):
 *   - "-", or the very file this process's standard output or error already is (/dev/stdout, a shell
 *     redirection named again): that stream, so the two outputs never overwrite each other;
 *   - a regular file, or a name that does not exist yet: the output goes to a temporary created
 *     exclusively beside it (".NAME.dmm-XXXXXXXXXXXX", O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600 while
 *     it is written), which is renamed over the target only when the work and the writing succeeded; a
 *     symbolic link to a regular file is followed, and the file it names is replaced (the link stays);
 *   - a character device (a terminal, /dev/null, /dev/full) or a FIFO: opened and written in place,
 *     never created, truncated or removed;
 *   - a folder, a block device, a socket, a link to nothing: refused before the work, with a sentence.
 * The only file dmm ever removes is a temporary it created itself, and only while the name still
 * holds the inode it created (checked against the open descriptor first).
 *
 * Mode of a new file: the replaced file's permission bits, else 0666 less the process's umask read
 * from /proc/self/status (the umask is never set, so no other thread sees it change; 0644 where it
 * cannot be read); set on the descriptor with fchmod. A run killed mid-way may leave its temporary.
 *
 * Outputs are opened before the work starts (an unwritable path fails at once, not after a long
 * replay), and a target that is one of the inputs is refused (writing it would destroy it).
 * Pure: errors go into the caller's buffer; nothing here prints or exits. Thread contract: one owner
 * per dmm_output_file; no globals.
 */
#ifndef DMM_TOOLS_OUTPUT_FILE_H
#define DMM_TOOLS_OUTPUT_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct dmm_output_file {
    FILE *f;             /* what the command writes; stdout or stderr when the target is that stream */
    const char *opt;     /* the option that named it ("--json"), for the sentences */
    const char *path;    /* as the user gave it */
    char *target;        /* the regular file the temporary replaces (malloc'd); NULL when written in place */
    char *temp;          /* the temporary beside it (malloc'd); NULL when written in place */
    dev_t temp_dev;      /* the temporary's inode, as created: only that is ever renamed or removed */
    ino_t temp_ino;
} dmm_output_file;

/* Opens the output that option `opt` names (`path`; "-" = the standard output) before the work. 0, or
 * -1 with a sentence in err (nothing created) when it cannot be written that way or when it is one of
 * inputs[0..ninputs) (NULL entries skipped). */
int dmm_output_open(const char *opt, const char *path, const char *const *inputs, size_t ninputs, dmm_output_file *out,
                    char *err, size_t errcap);

/* Ends it. ok = the work succeeded and wrote its result: the temporary is flushed, synced and renamed
 * over the target, or the in-place target flushed; 0, or -1 with a sentence when writing failed (a full
 * disk, /dev/full: the target is then as it was, or holds what a device took). !ok: the temporary is
 * removed, an in-place target closed, and 0. Safe on a zeroed or already closed one. */
int dmm_output_close(dmm_output_file *o, bool ok, char *err, size_t errcap);

#endif /* DMM_TOOLS_OUTPUT_FILE_H */
