/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_onnx_model.c — the ONNX model writer (tools/onnx_model.c, compiled in here), read
 * back by an independent protobuf walker written for this test.
 *
 * What is proven: the bytes are well-formed protobuf (every field's key, varint and length lands
 * inside its message); the model says IR version 8 and opset 13 of the default domain; the graph has
 * 3 nodes per layer in MatMul, Add, Relu order; each initializer carries dims and raw float32 data of
 * exactly rows × cols × 4 bytes equal to dmm_onnx_model_weight; input and output name a fixed batch
 * dimension, or the symbolic "batch" when batch = 0; bad descriptions are refused with a sentence. That
 * ONNX Runtime accepts and runs these models is proven in tests/ort.
 */
#include "../../tools/onnx_model.c"

#include "testkit.h"

typedef struct field {
    unsigned num, wire;
    uint64_t v;          /* a varint's value */
    const uint8_t *p;    /* a length-delimited field's bytes */
    size_t len;
} field;

/* Reads the next field of [*at, end); false at the end; fails the test on malformed bytes. */
static bool next_field(const uint8_t **at, const uint8_t *end, field *f) {
    if (*at == end) return false;
    uint64_t k = 0;
    int shift = 0;
    const uint8_t *q = *at;
    for (;;) {
        assert_true(q < end && shift < 64);
        k |= (uint64_t)(*q & 0x7f) << shift;
        shift += 7;
        if (!(*q++ & 0x80)) break;
    }
    f->num = (unsigned)(k >> 3);
    f->wire = (unsigned)(k & 7);
    uint64_t v = 0;
    shift = 0;
    for (;;) {
        assert_true(q < end && shift < 64);
        v |= (uint64_t)(*q & 0x7f) << shift;
        shift += 7;
        if (!(*q++ & 0x80)) break;
    }
    f->v = v;
    if (f->wire == 2) {
        assert_true(v <= (uint64_t)(end - q));
        f->p = q;
        f->len = (size_t)v;
        q += v;
    } else {
        assert_int_equal(f->wire, 0);
    }
    *at = q;
    return true;
}

static bool str_is(const field *f, const char *s) { return f->len == strlen(s) && memcmp(f->p, s, f->len) == 0; }

/* The first dimension of a ValueInfoProto: dim_value into *value, or dim_param into *param. */
static void first_dim(const field *vi, int64_t *value, char *param) {
    const uint8_t *a = vi->p, *e = vi->p + vi->len;
    field f, t, tt, sh, d;
    *value = -1;
    param[0] = 0;
    while (next_field(&a, e, &f)) {
        if (f.num != 2) continue;
        const uint8_t *b = f.p;
        assert_true(next_field(&b, f.p + f.len, &t) && t.num == 1); /* tensor_type */
        const uint8_t *c = t.p;
        while (next_field(&c, t.p + t.len, &tt)) {
            if (tt.num == 1) assert_int_equal(tt.v, 1); /* FLOAT */
            if (tt.num != 2) continue;
            const uint8_t *s = tt.p;
            assert_true(next_field(&s, tt.p + tt.len, &sh) && sh.num == 1);
            const uint8_t *x = sh.p;
            assert_true(next_field(&x, sh.p + sh.len, &d));
            if (d.num == 1) *value = (int64_t)d.v;
            else {
                assert_int_equal(d.num, 2);
                memcpy(param, d.p, d.len);
                param[d.len] = 0;
            }
        }
    }
}

static void check_model(const dmm_onnx_model_desc *d) {
    uint8_t *m = NULL;
    size_t len = 0;
    char err[256];
    assert_int_equal(dmm_onnx_model_write(d, &m, &len, err, sizeof err), 0);
    const uint8_t *a = m, *end = m + len;
    field f;
    int saw_graph = 0;
    int64_t ir = -1, opset = -1;
    while (next_field(&a, end, &f)) {
        if (f.num == 1) ir = (int64_t)f.v;
        if (f.num == 8) {
            const uint8_t *b = f.p;
            field o;
            while (next_field(&b, f.p + f.len, &o))
                if (o.num == 2) opset = (int64_t)o.v;
        }
        if (f.num != 7) continue;
        saw_graph++;
        const uint8_t *g = f.p, *ge = f.p + f.len;
        field x;
        unsigned nodes = 0, inits = 0, inputs = 0, outputs = 0;
        const char *ops[] = {"MatMul", "Add", "Relu"};
        while (next_field(&g, ge, &x)) {
            if (x.num == 1) {
                const uint8_t *n = x.p;
                field y;
                while (next_field(&n, x.p + x.len, &y))
                    if (y.num == 4) assert_true(str_is(&y, ops[nodes % 3]));
                nodes++;
            } else if (x.num == 5) {
                const uint8_t *t = x.p;
                field y;
                uint64_t dims[2] = {0, 0}, nd = 0, elems = 1;
                const uint8_t *raw = NULL;
                size_t rawlen = 0;
                while (next_field(&t, x.p + x.len, &y)) {
                    if (y.num == 1) dims[nd++] = y.v;
                    if (y.num == 2) assert_int_equal(y.v, 1);
                    if (y.num == 9) raw = y.p, rawlen = y.len;
                }
                for (uint64_t k = 0; k < nd; k++) elems *= dims[k];
                uint32_t layer = inits / 2;
                bool is_w = inits % 2 == 0;
                assert_int_equal(nd, is_w ? 2 : 1);
                assert_int_equal(dims[0], is_w ? (layer == 0 ? d->in : d->hidden) : d->hidden);
                assert_int_equal(rawlen, elems * 4);
                for (uint64_t k = 0; k < elems; k += 97) {
                    float w;
                    memcpy(&w, raw + k * 4, 4);
                    assert_true(w == dmm_onnx_model_weight(d->seed, inits, k));
                }
                inits++;
            } else if (x.num == 11 || x.num == 12) {
                int64_t v;
                char param[32];
                first_dim(&x, &v, param);
                if (d->batch > 0) assert_int_equal(v, d->batch);
                else assert_string_equal(param, "batch");
                if (x.num == 11) inputs++;
                else outputs++;
            }
        }
        assert_int_equal(nodes, 3 * d->layers);
        assert_int_equal(inits, 2 * d->layers);
        assert_int_equal(inputs, 1);
        assert_int_equal(outputs, 1);
    }
    assert_int_equal(saw_graph, 1);
    assert_int_equal(ir, 8);
    assert_int_equal(opset, 13);
    free(m);
}

static void the_dense_model_reads_back_field_by_field(void **state) {
    (void)state;
    dmm_onnx_model_desc fixed = {64, 96, 3, 4, 5};
    check_model(&fixed);
    dmm_onnx_model_desc symbolic = {32, 48, 1, 0, 9};
    check_model(&symbolic);
}

static void bad_descriptions_are_refused(void **state) {
    (void)state;
    uint8_t *m = (uint8_t *)0x1;
    size_t len = 7;
    char err[256] = "";
    dmm_onnx_model_desc zero = {0, 8, 1, 1, 0};
    assert_int_equal(dmm_onnx_model_write(&zero, &m, &len, err, sizeof err), -1);
    assert_null(m);
    assert_non_null(strstr(err, "in and hidden must be 1..65536"));
    dmm_onnx_model_desc deep = {8, 8, 65, 1, 0};
    assert_int_equal(dmm_onnx_model_write(&deep, &m, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "layers 1..64"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_dense_model_reads_back_field_by_field),
        cmocka_unit_test(bad_descriptions_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
