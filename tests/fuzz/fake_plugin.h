/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fake_plugin.h — the test exports of the fake plugin (fake_plugin.c) that fuzz_plugin.c
 * drives: the harness looks them up with dlsym in the same library that dmm_plugin_load opens. */
#ifndef DMM_FAKE_PLUGIN_H
#define DMM_FAKE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

/* Starts a new input: every answer the plugin gives from now on is drawn from data[0..n) (copied),
 * and what it handed out for the previous input is freed (the host unloaded it by then). */
typedef void fake_plugin_feed_fn(const uint8_t *data, size_t n);
/* The next byte of the same input, for the harness's own choices (0 once it is used up). */
typedef uint8_t fake_plugin_byte_fn(void);
/* From now on every answer is the well-behaved one (the teardown of an input). */
typedef void fake_plugin_behave_fn(void);

#define FAKE_PLUGIN_FEED "fake_plugin_feed"
#define FAKE_PLUGIN_BYTE "fake_plugin_byte"
#define FAKE_PLUGIN_BEHAVE "fake_plugin_behave"

#endif
