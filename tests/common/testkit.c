/* tests/common/testkit.c — shared helpers for the cmocka tests. */
#include "testkit.h"

#include <string.h>

void dmm_test_error_mentions(const char *first, ...) {
    const char *err = dmm_last_error();
    va_list ap;
    va_start(ap, first);
    for (const char *frag = first; frag != NULL; frag = va_arg(ap, const char *))
        if (strstr(err, frag) == NULL) {
            va_end(ap);
            fail_msg("the error sentence does not mention '%s': \"%s\"", frag, err);
        }
    va_end(ap);
}

void dmm_test_census_zero(dmm_driver *d) {
    dmm_driver_census c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    if (c.reserved_bytes || c.handles || c.handle_bytes || c.mapped_bytes || c.eager_bytes)
        fail_msg("the driver still holds: reserved %llu, handles %llu (%llu bytes), mapped %llu, eager %llu",
                 (unsigned long long)c.reserved_bytes, (unsigned long long)c.handles,
                 (unsigned long long)c.handle_bytes, (unsigned long long)c.mapped_bytes,
                 (unsigned long long)c.eager_bytes);
}
