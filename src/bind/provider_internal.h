/* SPDX-License-Identifier: Apache-2.0 */
/* src/bind/provider_internal.h — what the provider shows inside the library and to its tests, beyond
 * dmm/provider.h. Never installed.
 *
 * These were public until 0.2.0 and nothing outside the tests used them (CHANGELOG.md): a caller
 * knows the name it gave, and learns that the mechanism is fixed from a refused replacement
 * (DMM_ERR_BUSY, with the reason). They stay for white-box checks of the provider's state.
 */
#ifndef DMM_BIND_PROVIDER_INTERNAL_H
#define DMM_BIND_PROVIDER_INTERNAL_H

#include <stdbool.h>

#include "dmm/provider.h"

/* The consumer's name (cfg->name, copied; "provider" by default); "(null provider)" for NULL. */
const char *dmm__provider_name(const dmm_provider *p);

/* Whether the mechanism is now fixed: it has served an allocation through this provider. */
bool dmm__provider_in_use(dmm_provider *p);

#endif /* DMM_BIND_PROVIDER_INTERNAL_H */
