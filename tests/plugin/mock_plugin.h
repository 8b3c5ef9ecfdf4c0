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

/* The sentence fragment a refused allocation's message carries. */
#define MOCK_REFUSAL_TEXT "mock refuses allocations above its configured limit"
/* The sentence fragment of the REFUSES variant's negotiation. */
#define MOCK_NEGOTIATION_TEXT "mock needs a host with the frobnicator"

/* The SILENT variant's allocate of exactly this many bytes returns without setting its status. */
#define MOCK_SILENT_BYTES 12345u

#ifndef MOCK_PLUGIN_ITSELF
#include <dlfcn.h>

/* For the tests (host side): how often the 1.1 slot `slot` ("alias", "is_quarantined",
 * "drain_cache", "reservation") was called in the test plugin at `path` (already loaded), through
 * its test export mock_test_slot_calls; UINT64_MAX if the library, the export or the slot is not
 * there. */
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
