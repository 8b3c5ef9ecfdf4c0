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
