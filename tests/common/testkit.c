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

dmm_pool_stats dmm_test_pool_stats(dmm_pool *pool) {
    dmm_pool_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(pool, &s));
    return s;
}

void *dmm_test_pool_malloc(dmm_pool *pool, size_t bytes, dmm_stream stream) {
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, bytes, stream, &p));
    assert_non_null(p);
    return p;
}

void dmm_test_pool_free(dmm_pool *pool, void *ptr, dmm_stream stream) {
    DMM_OK_OR_FAIL(dmm_pool_free(pool, ptr, stream));
}

void dmm_test_pool_poll_until_reaped(dmm_pool *pool) {
    for (int i = 0; i < 4; i++) DMM_OK_OR_FAIL(dmm_pool_trim(pool, UINT64_MAX, NULL));
}
