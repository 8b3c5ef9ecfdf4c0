/* SPDX-License-Identifier: Apache-2.0 */
/* tests/plugin/mock_plugin.h — the config of the test plugin's "mock" kind (opaque to dmm: the
 * plugin and the test agree on it, dmm only passes the pointer through). */
#ifndef DMM_TEST_MOCK_PLUGIN_H
#define DMM_TEST_MOCK_PLUGIN_H

#include <stdint.h>
#include <string.h>

typedef struct mock_config {
    uint32_t struct_size;      /* sizeof(mock_config) */
    uint32_t flags;            /* MOCK_FLAG_* */
    uint64_t fail_above_bytes; /* allocations above this fail with an inline message; 0 = no limit */
} mock_config;

/* release frees the memory and reports COMPLETE, yet fails its status with MOCK_SNAG_TEXT: a
 * contradiction the host must not read as a clean COMPLETE. */
#define MOCK_FLAG_CONTRADICT 1u
#define MOCK_SNAG_TEXT "mock hit a snag after freeing"

/* Hostile numbers (issue 11): each flag makes the mock hand back one kind of value the host must
 * check before it uses it. */
/* allocate and allocate_committed hand out an address MOCK_SKEW bytes past an aligned one (the
 * mock's own record holds that address: the host's give-back finds it). */
#define MOCK_FLAG_MISALIGN 2u
#define MOCK_SKEW 256u
/* release of an allocation the mock does not know reports COMPLETE with a good status (a permissive
 * plugin: it would free nothing and say it did). */
#define MOCK_FLAG_PERMISSIVE 4u
/* device reports the driver's index + 1 (another device than the one it was made on). */
#define MOCK_FLAG_OTHER_DEVICE 8u
/* decommit reports COMPLETE with twice the range's bytes unmapped. */
#define MOCK_FLAG_OVERCOUNT 16u
/* release frees the memory but reports FAILED (nothing changed) with a failing status and the bytes
 * it unmapped. */
#define MOCK_FLAG_FAILED_BUT_FREED 32u
/* release frees the memory and reports COMPLETE with a good status, but all of it still owned. */
#define MOCK_FLAG_COMPLETE_OWNED 64u
/* every allocation gets id MOCK_SAME_ID (the mock tells them apart by address). */
#define MOCK_FLAG_SAME_ID 128u
#define MOCK_SAME_ID 4242u
/* allocate hands back (and records) one byte more than asked. */
#define MOCK_FLAG_WRONG_BYTES 256u
/* stats report counts below zero (allocations, owned bytes and handles of -1), as a plugin whose own
 * counters wrapped would. */
#define MOCK_FLAG_NEGATIVE_STATS 512u

/* The sentence fragment a refused allocation's message carries. */
#define MOCK_REFUSAL_TEXT "mock refuses allocations above its configured limit"
/* The sentence fragment of the REFUSES variant's negotiation. */
#define MOCK_NEGOTIATION_TEXT "mock needs a host with the frobnicator"

/* The SILENT variant's allocate of exactly this many bytes returns without setting its status. */
#define MOCK_SILENT_BYTES 12345u

#ifndef MOCK_PLUGIN_ITSELF
#include <dlfcn.h>

/* For the tests (host side): how often the slot `slot` (the 1.1 slots "alias", "is_quarantined",
 * "drain_cache", "reservation", and "release", "decommit", "commit") was called in the test plugin
 * at `path` (already loaded), through its test export mock_test_slot_calls; UINT64_MAX if the
 * library, the export or the slot is not there. */
static inline uint64_t mock_slot_calls(const char *path, const char *slot) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return UINT64_MAX;
    void *sym = dlsym(h, "mock_test_slot_calls");
    uint64_t n = UINT64_MAX;
    if (sym != NULL) {
        uint64_t (*fn)(const char *);
        memcpy(&fn, &sym, sizeof fn);
        n = fn(slot);
    }
    dlclose(h);
    return n;
}
#endif

#endif
