/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzzkit.h — what every libFuzzer harness under tests/fuzz/ shares: a reader that turns
 * the input bytes into choices, the splitting of an input into parts, and the one way a harness
 * reports a broken property (FUZZ_ASSERT: a sentence on stderr, then abort(), which libFuzzer
 * reports as a crash with the input saved). Header-only, static; no cmocka (libFuzzer owns main).
 *
 * The reader never fails: past the end it yields 0, so an exhausted input reads as "the plain,
 * well-behaved choice" wherever a harness makes 0 mean that (the fake plugin's teardown relies on it).
 */
#ifndef DMM_FUZZKIT_H
#define DMM_FUZZKIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A broken property: names it and stops the run (the harness is test code; the library never aborts). */
#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct fuzz_in {
    const uint8_t *p;
    size_t n; /* bytes left */
} fuzz_in;

static inline fuzz_in fuzz_in_of(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    return in;
}

static inline bool fuzz_done(const fuzz_in *in) { return in->n == 0; }

static inline uint8_t fuzz_u8(fuzz_in *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

/* `bytes` (≤ 8) little-endian bytes as a number. */
static inline uint64_t fuzz_bits(fuzz_in *in, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)fuzz_u8(in) << (8 * i);
    return v;
}

/* Splits data at the first `sep` byte: the part before it in *a, the rest in *b; false (b empty)
 * when there is no separator. */
static inline bool fuzz_split(const uint8_t *data, size_t size, uint8_t sep, fuzz_in *a, fuzz_in *b) {
    const uint8_t *s = size > 0 ? memchr(data, sep, size) : NULL;
    if (s == NULL) {
        *a = fuzz_in_of(data, size);
        *b = fuzz_in_of(data + size, 0);
        return false;
    }
    *a = fuzz_in_of(data, (size_t)(s - data));
    *b = fuzz_in_of(s + 1, size - (size_t)(s - data) - 1);
    return true;
}

/* A copy of `n` bytes in a buffer of exactly n bytes, so that the sanitizer catches a read one byte
 * past the input (libFuzzer's own buffer is exact, a part of it is not). Aborts when out of memory;
 * free() it (malloc(0) gives a pointer with no byte behind it). */
static inline char *fuzz_exact_copy(const uint8_t *p, size_t n) {
    char *c = malloc(n);
    FUZZ_ASSERT(c != NULL || n == 0, "out of memory");
    if (n > 0) memcpy(c, p, n);
    return c;
}

#endif /* DMM_FUZZKIT_H */
