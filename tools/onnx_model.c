/* SPDX-License-Identifier: Apache-2.0 */
/* tools/onnx_model.c — writes ONNX protobuf bytes for the dense test model (onnx_model.h).
 *
 * What it owns: a growable byte buffer and the protobuf wire format for the fields used: varints (wire
 * type 0) for integers, length-delimited (wire type 2) for strings, bytes and sub-messages, each field
 * keyed by (number << 3 | wire type). A sub-message is encoded into its own buffer first, then written
 * with its length, so no size has to be computed ahead.
 *
 * The ONNX field numbers used (onnx.proto): ModelProto ir_version 1, graph 7, opset_import 8;
 * OperatorSetIdProto domain 1, version 2; GraphProto node 1, name 2, initializer 5, input 11, output 12;
 * NodeProto input 1, output 2, name 3, op_type 4; TensorProto dims 1, data_type 2 (FLOAT = 1), name 8,
 * raw_data 9 (little-endian); ValueInfoProto name 1, type 2; TypeProto tensor_type 1; TypeProto.Tensor
 * elem_type 1, shape 2; TensorShapeProto dim 1; Dimension dim_value 1, dim_param 2.
 *
 * Invariants: a buffer's len ≤ cap; a failed allocation sets `bad` and every later write is a no-op, so
 * the caller checks once at the end.
 */
#include "onnx_model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IR_VERSION 8 /* ONNX IR version 8 (ONNX 1.10+), read by every ONNX Runtime ≥ 1.10 */
#define OPSET 13     /* the default domain's opset: MatMul, Add and Relu as of opset 13 */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
    bool bad;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->bad) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL) {
            b->bad = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void varint(buf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        tmp[n++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v);
    put(b, tmp, n);
}

static void key(buf *b, unsigned field, unsigned wire) { varint(b, (uint64_t)field << 3 | wire); }
static void f_int(buf *b, unsigned field, int64_t v) {
    key(b, field, 0);
    varint(b, (uint64_t)v);
}
static void f_bytes(buf *b, unsigned field, const void *p, size_t n) {
    key(b, field, 2);
    varint(b, n);
    put(b, p, n);
}
static void f_str(buf *b, unsigned field, const char *s) { f_bytes(b, field, s, strlen(s)); }
static void f_msg(buf *b, unsigned field, buf *sub) { /* writes sub as a field of b and frees it */
    if (sub->bad) b->bad = true;
    f_bytes(b, field, sub->p, sub->len);
    free(sub->p);
    memset(sub, 0, sizeof *sub);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

float dmm_onnx_model_weight(uint64_t seed, uint32_t tensor, uint64_t k) {
    uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull + ((uint64_t)tensor << 40) + k);
    /* in [-0.125, 0.125): small enough that deep stacks stay finite, varied enough to mean something */
    return (float)((double)(h >> 11) / (double)(1ull << 53) - 0.5) * 0.25f;
}

/* ValueInfoProto of a float tensor [batch or "batch", cols]. */
static void value_info(buf *g, unsigned field, const char *name, uint32_t batch, uint32_t cols) {
    buf vi = {0}, type = {0}, tensor = {0}, shape = {0}, d0 = {0}, d1 = {0};
    if (batch > 0) f_int(&d0, 1, batch);
    else f_str(&d0, 2, "batch");
    f_int(&d1, 1, cols);
    f_msg(&shape, 1, &d0);
    f_msg(&shape, 1, &d1);
    f_int(&tensor, 1, 1); /* FLOAT */
    f_msg(&tensor, 2, &shape);
    f_msg(&type, 1, &tensor);
    f_str(&vi, 1, name);
    f_msg(&vi, 2, &type);
    f_msg(g, field, &vi);
}

static void initializer(buf *g, const char *name, uint32_t tensor_index, uint64_t seed, uint32_t rows, uint32_t cols) {
    buf t = {0};
    uint64_t n = (uint64_t)rows * (cols ? cols : 1);
    f_int(&t, 1, rows);
    if (cols) f_int(&t, 1, cols);
    f_int(&t, 2, 1); /* FLOAT */
    f_str(&t, 8, name);
    float *v = malloc(n * sizeof *v);
    if (v == NULL) {
        g->bad = true;
        free(t.p);
        return;
    }
    for (uint64_t k = 0; k < n; k++) v[k] = dmm_onnx_model_weight(seed, tensor_index, k);
    f_bytes(&t, 9, v, n * sizeof *v); /* x86-64 and aarch64 are little-endian, as raw_data is */
    free(v);
    f_msg(g, 5, &t);
}

static void node(buf *g, const char *op, const char *name, const char *a, const char *b, const char *out) {
    buf n = {0};
    f_str(&n, 1, a);
    if (b != NULL) f_str(&n, 1, b);
    f_str(&n, 2, out);
    f_str(&n, 3, name);
    f_str(&n, 4, op);
    f_msg(g, 1, &n);
}

int dmm_onnx_model_write(const dmm_onnx_model_desc *d, uint8_t **bytes, size_t *len, char *err, size_t errcap) {
    if (d == NULL || bytes == NULL || len == NULL) {
        snprintf(err, errcap, "onnx model: needs a description and output pointers");
        return -1;
    }
    *bytes = NULL;
    *len = 0;
    if (d->in == 0 || d->hidden == 0 || d->layers == 0 || d->layers > 64 || d->in > (1u << 16) ||
        d->hidden > (1u << 16)) {
        snprintf(err, errcap,
                 "onnx model: in %u, hidden %u, layers %u refused: in and hidden must be 1..65536 and layers 1..64",
                 d->in, d->hidden, d->layers);
        return -1;
    }
    buf g = {0};
    char prev[32] = "X", w[32], bn[32], mm[32], add[32], relu[32], nm[48];
    for (uint32_t i = 0; i < d->layers; i++) {
        snprintf(w, sizeof w, "W%u", i);
        snprintf(bn, sizeof bn, "B%u", i);
        snprintf(mm, sizeof mm, "mm%u", i);
        snprintf(add, sizeof add, "add%u", i);
        if (i + 1 == d->layers) snprintf(relu, sizeof relu, "Y");
        else snprintf(relu, sizeof relu, "h%u", i);
        snprintf(nm, sizeof nm, "matmul%u", i);
        node(&g, "MatMul", nm, prev, w, mm);
        snprintf(nm, sizeof nm, "add%u", i);
        node(&g, "Add", nm, mm, bn, add);
        snprintf(nm, sizeof nm, "relu%u", i);
        node(&g, "Relu", nm, add, NULL, relu);
        snprintf(prev, sizeof prev, "%s", relu);
    }
    f_str(&g, 2, "dmm_dense");
    for (uint32_t i = 0; i < d->layers; i++) {
        snprintf(w, sizeof w, "W%u", i);
        snprintf(bn, sizeof bn, "B%u", i);
        initializer(&g, w, 2 * i, d->seed, i == 0 ? d->in : d->hidden, d->hidden);
        initializer(&g, bn, 2 * i + 1, d->seed, d->hidden, 0);
    }
    value_info(&g, 11, "X", d->batch, d->in);
    value_info(&g, 12, "Y", d->batch, d->hidden);

    buf m = {0}, opset = {0};
    f_int(&m, 1, IR_VERSION);
    f_str(&opset, 1, "");
    f_int(&opset, 2, OPSET);
    f_msg(&m, 8, &opset);
    f_str(&m, 2, "dmm");
    f_msg(&m, 7, &g);
    if (m.bad) {
        free(m.p);
        snprintf(err, errcap, "onnx model: out of host memory");
        return -1;
    }
    *bytes = m.p;
    *len = m.len;
    return 0;
}

void dmm_onnx_model_reference(const dmm_onnx_model_desc *d, uint32_t batch, const float *x, float *y) {
    uint32_t h = d->hidden;
    float *cur = malloc((size_t)batch * (d->in > h ? d->in : h) * sizeof *cur);
    float *next = malloc((size_t)batch * h * sizeof *next);
    if (cur == NULL || next == NULL) {
        free(cur);
        free(next);
        return;
    }
    memcpy(cur, x, (size_t)batch * d->in * sizeof *cur);
    uint32_t cols = d->in;
    for (uint32_t l = 0; l < d->layers; l++) {
        for (uint32_t r = 0; r < batch; r++)
            for (uint32_t j = 0; j < h; j++) {
                float s = 0;
                for (uint32_t k = 0; k < cols; k++)
                    s += cur[(size_t)r * cols + k] * dmm_onnx_model_weight(d->seed, 2 * l, (uint64_t)k * h + j);
                s += dmm_onnx_model_weight(d->seed, 2 * l + 1, j);
                next[(size_t)r * h + j] = s > 0 ? s : 0;
            }
        memcpy(cur, next, (size_t)batch * h * sizeof *cur);
        cols = h;
    }
    memcpy(y, cur, (size_t)batch * h * sizeof *y);
    free(cur);
    free(next);
}
