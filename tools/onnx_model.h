/* SPDX-License-Identifier: Apache-2.0 */
/* tools/onnx_model.h — a small ONNX model writer: dmm's own protobuf encoding of the few ONNX messages a
 * dense test model needs, so that the ORT tests, the bench and `dmm ort --write-model` run real models
 * without downloading any.
 *
 * The model: input X [batch, in] float32 → `layers` × (MatMul W_i → Add B_i → Relu) → output Y
 * [batch, hidden]; W_0 is [in, hidden], the others [hidden, hidden]; initializers as raw float32 data,
 * their values a deterministic function of the seed. batch > 0 is a fixed dimension; batch = 0 makes it
 * symbolic (dim_param "batch"), so that the shape may change from one Run to the next.
 *
 * Pure: no printing, no globals; thread-safe.
 */
#ifndef DMM_TOOLS_ONNX_MODEL_H
#define DMM_TOOLS_ONNX_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct dmm_onnx_model_desc {
    uint32_t in;      /* columns of X (≥ 1) */
    uint32_t hidden;  /* width of every layer (≥ 1) */
    uint32_t layers;  /* MatMul-Add-Relu blocks (1..64) */
    uint32_t batch;   /* rows of X; 0 = symbolic ("batch") */
    uint64_t seed;    /* the initializers' values */
} dmm_onnx_model_desc;

/* Encodes the model; *bytes (malloc'd, the caller frees) and *len. 0, or -1 with a sentence in err
 * (bad description, out of memory). */
int dmm_onnx_model_write(const dmm_onnx_model_desc *d, uint8_t **bytes, size_t *len, char *err, size_t errcap);

/* Weight k of initializer `tensor` (W_i = 2i, B_i = 2i + 1) of a model with `seed`, as written. */
float dmm_onnx_model_weight(uint64_t seed, uint32_t tensor, uint64_t k);

/* The reference result: Y = the model applied to x[batch × in] in float32, in ONNX Runtime's order of
 * operations is not promised (tests compare ONNX Runtime with itself; this is for a sanity bound). */
void dmm_onnx_model_reference(const dmm_onnx_model_desc *d, uint32_t batch, const float *x, float *y);

#endif
