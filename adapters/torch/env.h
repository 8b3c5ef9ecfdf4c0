/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/env.h — the environment variables of libdmm_torch.so, read into a dmm_device_config.
 * Internal to libdmm_torch.so and its tests (tests/unit/test_torch_env.c compiles env.c in). */
#ifndef DMM_TORCH_ENV_H
#define DMM_TORCH_ENV_H

#include "dmm/device.h"

/* Looks a variable up: its value, or NULL when it is not set (getenv, or a test's table). */
typedef const char *(*dmm_torch_getenv_fn)(void *user, const char *name);

/* Reads DMM_TORCH_POOL_VA (a size: bytes, or with a unit such as 64G or 512MiB; src/core/options.h has
 * the grammar), DMM_TORCH_RETAIN and DMM_TORCH_SETTLE (whole per mille, 0..1000), DMM_TORCH_HANDLES
 * (MAX[,DIVISOR[,MIN[,FLOOR_DIVISOR]]]: sizes MAX and MIN, whole divisors up to 2^32 - 1: max_chunk_bytes,
 * handle_divisor, min_chunk_bytes, floor_divisor; MAX 0 = one granule per handle), DMM_TORCH_STOCK (a size:
 * stock_bytes) and DMM_TORCH_RESTORE_PIECE (MAX[,FIRST[,COPY]], sizes; MAX 0 = one commit per segment)
 * through `get` into cfg->pool_va_bytes, retain_permille, settle_permille, the handle fields and
 * restore_piece/first/copy_bytes. A variable that is unset or empty leaves its fields alone. A
 * malformed value (not a number, a sign, trailing characters, a unit on a whole number, a fraction that
 * is not whole bytes, a number beyond 64 bits, RETAIN or SETTLE above 1000, a divisor above 2^32 - 1, an
 * empty field, a fifth field of HANDLES or a fourth of RESTORE_PIECE) gives DMM_ERR_INVALID_ARGUMENT with
 * a sentence naming the variable, its value and what to set, and leaves *cfg untouched. Pure: no state,
 * no allocation. The library passes dmm__option_env_named (the option table's reader) as `get`. */
dmm_status dmm__torch_config_from_env(dmm_device_config *cfg, dmm_torch_getenv_fn get, void *user);

#endif /* DMM_TORCH_ENV_H */
