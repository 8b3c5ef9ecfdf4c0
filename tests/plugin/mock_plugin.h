/* tests/plugin/mock_plugin.h — the config of the test plugin's "mock" kind (opaque to dmm: the
 * plugin and the test agree on it, dmm only passes the pointer through). */
#ifndef DMM_TEST_MOCK_PLUGIN_H
#define DMM_TEST_MOCK_PLUGIN_H

#include <stdint.h>

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

#endif
