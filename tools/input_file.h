/* SPDX-License-Identifier: Apache-2.0 */
/* tools/input_file.h — a whole input file read into memory within a bound (an ONNX model for `dmm ort`,
 * a bench result for `dmm compare`): the tool's inputs that are parsed whole rather than streamed
 * (traces stream: trace.h has their bounds).
 *
 * A regular file larger than the bound is refused before a byte is read (its size says so); anything
 * else (a device, a FIFO, a pipe: /dev/zero, /dev/urandom, `<(...)`) is read up to one byte past the
 * bound and refused there, so an endless input ends and costs at most the bound in memory. The
 * sentence names the file, the bound, and the flag that raises it.
 *
 * Pure: errors go into the caller's buffer; nothing here prints or exits. Thread-safe (no globals).
 */
#ifndef DMM_TOOLS_INPUT_FILE_H
#define DMM_TOOLS_INPUT_FILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dmm_input_bound {
    uint64_t max_bytes; /* the most the file may hold (≥ 1) */
    const char *what;   /* what it should be, for the sentence: "an ONNX model", "a bench result" */
    const char *flag;   /* the option that raises the bound: "--max-input-bytes" */
} dmm_input_bound;

/* Reads all of `path` (at most b->max_bytes) into *buf (malloc'd, NUL-terminated after *len bytes; the
 * caller frees it). 0, or -1 with a sentence in err that starts with the path (*buf NULL). */
int dmm_input_read(const char *path, const dmm_input_bound *b, char **buf, size_t *len, char *err, size_t errcap);

#endif /* DMM_TOOLS_INPUT_FILE_H */
