/* What the family files share: the checks' size arithmetic and dep tests, and the runs' parameter
 * lookups. Only ops/ includes this. */
#ifndef POET_OP_UTIL_H
#define POET_OP_UTIL_H

#include <stdint.h>

#include "../kernels/kernels.h"
#include "../model.h"
#include "ops.h"

/* ---- checks ---------------------------------------------------------------------------------- */

/* Products of attribute values saturate in 64 bits, so a hostile blob cannot wrap them into a
 * size that matches. Out of line (ops.c): the checks call it some fifty times, and inlined it costs
 * the M4 images more flash than they have. */
uint64_t mul(uint64_t a, uint64_t b);

static inline uint64_t f32s(uint64_t elems) { return mul(4u, elems); }

static inline int pos(int32_t v) { return v > 0; }

/* NaN and infinity fail: no op of the set has a use for them as a constant. */
static inline int finite_attr(int32_t a) { return ((uint32_t)a & 0x7F800000u) != 0x7F800000u; }

/* Parameter p exists and has elems elements. */
int param_ok(const poet_model_t *m, int32_t p, uint64_t elems);
/* Optional parameters (a bias, a norm's affine weight) are -1 when absent. */
int opt_param_ok(const poet_model_t *m, int32_t p, uint64_t elems);

uint32_t dep_bytes(const poet_model_t *m, const poet_node_t *n, int k);
/* The element type of dep k's output: a cast's a2, fp32 for every other op. */
int32_t dep_dtype(const poet_model_t *m, const poet_node_t *n, int k);
/* An int8 tensor's scale: a 4-byte fp32 made by an absmax node (not any 4-byte tensor, a loss). */
int is_scale(const poet_model_t *m, uint16_t d);

/* One dep of in bytes and an output of out bytes; io2: two deps. */
int io1(const poet_model_t *m, const poet_node_t *n, uint64_t in, uint64_t out);
int io2(const poet_model_t *m, const poet_node_t *n, uint64_t in0, uint64_t in1, uint64_t out);
/* A parameterised backward: dep 0 is dL/dy (y bytes), dep 1 the forward input (x bytes); the
 * input gradient is the output only if need (need_grad_input), else the output is 0 bytes. */
int bwd_ok(const poet_model_t *m, const poet_node_t *n, int32_t need, uint64_t y, uint64_t x);
/* linear's and conv2d's backward: as bwd_ok, or, when the weight is frozen (no gradient), dL/dy alone:
 * the forward input serves only the weight's gradient, so a frozen layer keeps none (--train bias,
 * bias+last:N). weight must have passed param_ok. */
int weighted_bwd_ok(const poet_model_t *m, const poet_node_t *n, int32_t need, uint64_t y, uint64_t x,
                    int32_t weight);
/* The geometry every convolution shares, a0..a6 = B, C, H, W, O, K, GEOM (POET_CONV_* in model.h):
 * positive sizes within the kernels' ranges, groups dividing C and O, the kernel within the padded
 * input. Gives the input's and output's element counts and the reduction length C/groups K K. Only
 * conv2d_q takes padding below that differs from above's (POET_CONV_PAD_B); the others check. */
int conv_geometry_ok(const int32_t *a, uint64_t *x_elems, uint64_t *y_elems, uint64_t *reduce);
/* The kernels' view of a conv2d node's attributes a0..a6 (checked by conv_geometry_ok). */
poet_conv_t conv_shape(const int32_t *a);
/* A backward that adds into parameter p's gradient once per row (grad_buf) runs only where gradients
 * are stored: p is absent or untrained, or the model does not update in backward. */
int grad_buf_ok(const poet_model_t *m, int32_t p);
/* Whether m's optimizer node asks for the update in backward, read from its record (optim.c): the
 * backward nodes are checked before the optimizer node, the model's last, has been (or has set
 * m->in_backward), so their checks read this. 0 when the last node is no optimizer node. */
int optimizer_in_backward(const poet_model_t *m);
/* An int8 layer's deps: the quantised input (xe elements) and its scale, the quantised weight (we
 * elements) and its scale; reduce is the kernel's reduction length; the output is y bytes of fp32. */
int i8_weight_ok(const poet_model_t *m, const poet_node_t *n, int32_t p, uint64_t elems);
/* A weight-only int8 weight of an fp32 layer: frozen, stored int8 in nv storage (not streamed). */
int w8_weight_ok(const poet_model_t *m, int32_t p, uint64_t elems, int aux);
/* A node that streams its weight from aux storage in rows of `row` bytes: the pool's stream buffer holds one
 * (model.h stream_bytes). Returns 1. */
int streams(poet_model_t *m, uint32_t row);
/* A node's rows (output channels or features) from its int8 weight p: run(e, 0, rows, wq, scale) on the
 * weight in nv storage (or deps 2 and 3: i8_weight), or, for one on aux storage (POET_PARAM_AUX, checked),
 * its scale, then as many of its rows of `row` bytes as the pool's stream buffer holds per read,
 * run(e, first, end, the buffer, scale) computing those rows' outputs before the next read overwrites it.
 * A failed read leaves POET_E_PAGER in e->err. */
typedef void (*rows_fn)(const poet_exec_t *e, int32_t first, int32_t end, const int8_t *wq, float w_scale);
void int8_rows(const poet_exec_t *e, int32_t p, uint32_t row, int32_t rows, rows_fn run);
int i8_io(const poet_model_t *m, const poet_node_t *n, uint64_t xe, uint64_t we, uint64_t reduce,
          uint64_t y);

/* Products of int8 values are below 127^2 in magnitude, so an int32 sum of up to 2^31 / 127^2 of
 * them cannot overflow: the int8 kernels' reduction length (in, or C/groups k k) is held to that. */
#define POET_I8_MAX_REDUCE 133143u

/* Static int8 (ops/quant.c). A layer's epilogue attribute: bits 0-15 its output's scale parameter,
 * or POET_Q_FP32 for an fp32 output; bits 16-18 the activation (Q_RELU); nothing above. */
#define POET_Q_FP32 0xFFFF
/* a depthwise conv2d_q's a9 bit 19: it may run in place, a channel at a time through the stream buffer */
#define POET_Q_IN_PLACE (1u << 19)
/* an fp32 depthwise conv2d's a9 bit 19, its conv2d_bwd's bit 15: it may run in place, a channel at a time through
 * the stream buffer (ops/conv.c by_channel) */
#define POET_CONV_IN_PLACE (1u << 19)
#define POET_CONV_BWD_IN_PLACE (1u << 15)
#define Q_RELU(epi) (((epi) >> 16) & 7) /* the activation: 0 none, 1 ReLU, 2 ReLU6, 3 hardswish, 4 hardsigmoid */
static inline int32_t q_epi_scale(int32_t epi) { return (epi & 0xFFFF) == POET_Q_FP32 ? -1 : (epi & 0xFFFF); }
static inline uint64_t q_out_bytes(int32_t epi, uint64_t elems) { return q_epi_scale(epi) < 0 ? f32s(elems) : elems; }
/* The scale parameter of the int8 tensor node d makes, -1 if d makes none with a fixed scale. */
int32_t q_scale_of(const poet_model_t *m, uint16_t d);
/* A scale: a one-element fp32 frozen parameter. */
int q_scale_ok(const poet_model_t *m, int32_t p);
int q_epi_ok(const poet_model_t *m, int32_t epi);
/* A 2-d pooling record's a0..a6 (B, C, H, W, KH, KW, the POET_POOL_* geometry) and a flag a7 (0 or 1) within
 * PyTorch's limits (padding at most half the window, the window within the padded map): *in and *out the
 * map's and the pooled map's elements (ceil, with ceil_mode), else 0. */
int pool_window_ok(const int32_t *a, int ceil, uint64_t *in, uint64_t *out);
/* A static-int8 layer's weight: a frozen int8 parameter (POET_PARAM_I8), in flash or on aux storage
 * (POET_PARAM_AUX); its bias: frozen fp32 or -1. */
int q_weight_ok(const poet_model_t *m, int32_t p, uint64_t elems);
int q_bias_ok(const poet_model_t *m, int32_t p, uint64_t elems);
/* Dep k is an int8 tensor with a fixed scale. */
int q_dep_ok(const poet_model_t *m, const poet_node_t *n, int k);

/* ---- runs ------------------------------------------------------------------------------------ */

/* Parameter p's values, NULL for an absent one (p = -1): a frozen one read in place from nv
 * storage, a trained one from the pool. Kernels take weights as const, so the cast only lets one
 * pointer type serve both. */
static inline float *param(const poet_exec_t *e, int32_t p)
{
    if (p < 0)
        return 0;
    return poet_param_frozen(e->m, (uint16_t)p) ? (float *)(uintptr_t)(e->buf->frozen + e->m->param_off[p])
                                                 : e->buf->params + e->m->param_off[p];
}

/* An int8 layer's weight and its scale: dep 2 and 3, or the frozen int8 parameter p (two deps). */
static inline const int8_t *i8_weight(const poet_exec_t *e, int32_t p, float *scale)
{
    const float *s;
    if (e->n_deps == 4) {
        *scale = e->in[3][0];
        return (const int8_t *)(const void *)e->in[2];
    }
    s = e->buf->frozen + e->m->param_off[p];
    *scale = s[0];
    return (const int8_t *)(const void *)(s + 1);
}

/* Static int8: the scale of dep k, and a layer's output scale (NULL: fp32 output). */
static inline float q_in_scale(const poet_exec_t *e, int k)
{
    return param(e, q_scale_of(e->m, e->deps[k]))[0];
}

static inline const float *q_out_scale(const poet_exec_t *e, int32_t epi)
{
    return q_epi_scale(epi) < 0 ? 0 : param(e, q_epi_scale(epi));
}

/* Where a backward kernel hands parameter p's gradient (kernels.h), made in *d: its stored gradient,
 * or with the update in backward (model.h in_backward) the parameter and its optimizer state. NULL
 * for an untrained or absent parameter: the kernels then skip that gradient. */
static inline const poet_grad_t *grad(const poet_exec_t *e, int32_t p, poet_grad_t *d)
{
    const poet_model_t *m = e->m;
    uint32_t off;
    if (p < 0 || !poet_param_trained(m, (uint16_t)p))
        return 0;
    off = m->param_off[p];
    d->g = m->in_backward ? 0 : e->buf->grads + off;
    d->w = e->buf->params + off;
    d->s0 = m->opt_words > 0 ? e->buf->opt_state + off : 0;
    d->s1 = m->opt_words > 1 ? e->buf->opt_state + m->train_elems + off : 0;
    d->u = e->upd;
    return d;
}

/* Parameter p's stored gradient, for the kernels that add into an element once per row (layer norm,
 * embedding): a model that updates in backward has none, so grad_buf_ok refuses such a node. */
static inline float *grad_buf(const poet_exec_t *e, int32_t p)
{
    return (p < 0 || !poet_param_trained(e->m, (uint16_t)p)) ? 0 : e->buf->grads + e->m->param_off[p];
}

#endif
