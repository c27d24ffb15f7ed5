/* Normalisation: batch norm (batch statistics, or frozen ones: _eval), layer norm, softmax and
 * log-softmax, forward and backward (kernels/norm.c). */
#include "op_util.h"

/* ---- batch norm ------------------------------------------------------------------------------- */

/* x[B, C, HW]; EPS and MOMENTUM are f32; WEIGHT and BIAS (the affine ones) and RUN_MEAN and RUN_VAR
 * (the running statistics) are parameters or -1. */
enum { B = 0, C = 1, HW = 2, EPS = 3, MOMENTUM = 4, WEIGHT = 5, BIAS = 6, RUN_MEAN = 7, RUN_VAR = 8,
       NEED_GX = 9 };

/* Running statistics: both absent (-1) or two distinct untrained tensors of C elements; in RAM
 * (state) where the forward moves them (training mode), since nv storage is not written by a step. */
static int stat_ok(const poet_model_t *m, int32_t p, uint64_t c, int moved)
{
    return param_ok(m, p, c) && !poet_param_trained(m, (uint16_t)p) &&
           (!moved || !poet_param_frozen(m, (uint16_t)p));
}

static int stats_ok(const poet_model_t *m, int32_t mean, int32_t var, uint64_t c, int moved)
{
    if (mean == -1 && var == -1)
        return 1;
    return mean != var && stat_ok(m, mean, c, moved) && stat_ok(m, var, c, moved);
}

/* The four batch norm ops. B*HW > 1: the batch variance of a single value is undefined (torch
 * raises); frozen statistics (eval) need the running statistics they normalise with. */
int op_batchnorm_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    int eval = n->op == POET_OP_BATCHNORM_EVAL || n->op == POET_OP_BATCHNORM_EVAL_BWD;
    uint64_t x;
    /* batch statistics need two values per channel (PyTorch's rule); running ones take one (a 1x1 map) */
    if (!pos(a[B]) || !pos(a[C]) || !pos(a[HW]) || (!eval && mul((uint64_t)a[B], (uint64_t)a[HW]) < 2u) ||
        !finite_attr(a[EPS]) || !(poet_attr_f32(a[EPS]) > 0.0f) || !finite_attr(a[MOMENTUM]) ||
        !opt_param_ok(m, a[WEIGHT], (uint64_t)a[C]) || !opt_param_ok(m, a[BIAS], (uint64_t)a[C]) ||
        !stats_ok(m, a[RUN_MEAN], a[RUN_VAR], (uint64_t)a[C], n->op == POET_OP_BATCHNORM) || (eval && a[RUN_MEAN] < 0))
        return 0;
    x = f32s(mul(mul((uint64_t)a[B], (uint64_t)a[C]), (uint64_t)a[HW]));
    return (n->op == POET_OP_BATCHNORM || n->op == POET_OP_BATCHNORM_EVAL) ? io1(m, n, x, x)
                                                                            : bwd_ok(m, n, a[NEED_GX], x, x);
}

/* The graph keeps no batch statistics (docs/graph.md): the backward recomputes them from x. The
 * running statistics move once per step, as in PyTorch: not again on a recompute. */
void op_batchnorm_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (e->eval && a[RUN_MEAN] >= 0) { /* without running statistics, PyTorch's eval() uses the batch's */
        op_batchnorm_eval_run(e);
        return;
    }
    poet_batchnorm2d_fwd_train(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), poet_attr_f32(a[MOMENTUM]),
                               e->in[0], param(e, a[WEIGHT]), param(e, a[BIAS]), e->out, 0, 0,
                               e->recompute || e->eval ? 0 : param(e, a[RUN_MEAN]),
                               e->recompute || e->eval ? 0 : param(e, a[RUN_VAR]));
}

void op_batchnorm_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    poet_batchnorm2d_bwd_train(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), e->in[0], e->in[1],
                               param(e, a[WEIGHT]), 0, 0, grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb),
                               a[NEED_GX] ? e->out : 0);
}

void op_batchnorm_eval_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_batchnorm2d_fwd_eval(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), e->in[0], param(e, a[WEIGHT]),
                              param(e, a[BIAS]), param(e, a[RUN_MEAN]), param(e, a[RUN_VAR]), e->out);
}

void op_batchnorm_eval_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    poet_batchnorm2d_bwd_eval(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), e->in[0], e->in[1],
                              param(e, a[WEIGHT]), param(e, a[RUN_MEAN]), param(e, a[RUN_VAR]),
                              grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb), a[NEED_GX] ? e->out : 0);
}

/* ---- batch norm, ReLU and mean, fused ----------------------------------------------------------
 *
 * A classifier head's BN -> ReLU -> global average pool (MobileNetV2, MCUNet, EfficientNet) with
 * the batch norm trained: apart, the three keep [B, C, HW] maps alive into the backward pass
 * (MobileNetV2-0.35's 1280x4x4 is 80 KiB each, three at once in the ReLU's backward); fused, a
 * channel at a time, only the BN's input x[B, C, HW] and y[B, C] exist. Attributes as batch norm's. */
int op_bn_relu_mean_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[B]) || !pos(a[C]) || !pos(a[HW]) || mul((uint64_t)a[B], (uint64_t)a[HW]) < 2u ||
        !finite_attr(a[EPS]) || !(poet_attr_f32(a[EPS]) > 0.0f) || !finite_attr(a[MOMENTUM]) ||
        !opt_param_ok(m, a[WEIGHT], (uint64_t)a[C]) || !opt_param_ok(m, a[BIAS], (uint64_t)a[C]) ||
        !stats_ok(m, a[RUN_MEAN], a[RUN_VAR], (uint64_t)a[C], 1))
        return 0;
    y = f32s(mul((uint64_t)a[B], (uint64_t)a[C]));
    x = f32s(mul(mul((uint64_t)a[B], (uint64_t)a[C]), (uint64_t)a[HW]));
    return n->op == POET_OP_BN_RELU_MEAN ? io1(m, n, x, y) : bwd_ok(m, n, a[NEED_GX], y, x);
}

void op_bn_relu_mean_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (e->eval && a[RUN_MEAN] >= 0) {
        poet_bn_relu_mean_fwd_eval(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), e->in[0], param(e, a[WEIGHT]),
                                   param(e, a[BIAS]), param(e, a[RUN_MEAN]), param(e, a[RUN_VAR]), e->out);
        return;
    }
    poet_bn_relu_mean_fwd(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), poet_attr_f32(a[MOMENTUM]), e->in[0],
                          param(e, a[WEIGHT]), param(e, a[BIAS]), e->out,
                          e->recompute || e->eval ? 0 : param(e, a[RUN_MEAN]),
                          e->recompute || e->eval ? 0 : param(e, a[RUN_VAR]));
}

void op_bn_relu_mean_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    poet_bn_relu_mean_bwd(a[B], a[C], a[HW], poet_attr_f32(a[EPS]), e->in[0], e->in[1], param(e, a[WEIGHT]),
                          param(e, a[BIAS]), grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb), a[NEED_GX] ? e->out : 0);
}

/* ---- layer norm ------------------------------------------------------------------------------- */

/* Over the last dim of x[rows, D]; LN_EPS f32, LN_WEIGHT and LN_BIAS parameters or -1. */
enum { ROWS = 0, D = 1, LN_EPS = 2, LN_WEIGHT = 3, LN_BIAS = 4, LN_NEED_GX = 5 };

int op_layernorm_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x;
    if (!pos(a[ROWS]) || !pos(a[D]) || !finite_attr(a[LN_EPS]) || !(poet_attr_f32(a[LN_EPS]) > 0.0f) ||
        !opt_param_ok(m, a[LN_WEIGHT], (uint64_t)a[D]) || !opt_param_ok(m, a[LN_BIAS], (uint64_t)a[D]))
        return 0;
    x = f32s(mul((uint64_t)a[ROWS], (uint64_t)a[D]));
    if (n->op == POET_OP_LAYERNORM)
        return io1(m, n, x, x);
    return grad_buf_ok(m, a[LN_WEIGHT]) && grad_buf_ok(m, a[LN_BIAS]) && bwd_ok(m, n, a[LN_NEED_GX], x, x);
}

/* Like batch norm's, the row statistics are recomputed by the backward, not kept. */
void op_layernorm_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_layernorm_fwd(a[ROWS], a[D], poet_attr_f32(a[LN_EPS]), e->in[0], param(e, a[LN_WEIGHT]),
                       param(e, a[LN_BIAS]), e->out, 0, 0);
}

void op_layernorm_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_layernorm_bwd(a[ROWS], a[D], poet_attr_f32(a[LN_EPS]), e->in[0], e->in[1], param(e, a[LN_WEIGHT]),
                       0, 0, grad_buf(e, a[LN_WEIGHT]), grad_buf(e, a[LN_BIAS]), a[LN_NEED_GX] ? e->out : 0);
}

/* ---- softmax ---------------------------------------------------------------------------------- */

/* Softmax and log-softmax over the last dim of x[rows, D] (ROWS, D as layer norm's); each backward
 * reads dL/dy and the output y. */
int op_softmax_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x;
    if (!pos(a[ROWS]) || !pos(a[D]))
        return 0;
    x = f32s(mul((uint64_t)a[ROWS], (uint64_t)a[D]));
    return n->kind == POET_KIND_FORWARD ? io1(m, n, x, x) : io2(m, n, x, x, x);
}

void op_softmax_run(const poet_exec_t *e) { poet_softmax_fwd(e->a[ROWS], e->a[D], e->in[0], e->out); }
void op_softmax_bwd_run(const poet_exec_t *e) { poet_softmax_bwd(e->a[ROWS], e->a[D], e->in[0], e->in[1], e->out); }
void op_log_softmax_run(const poet_exec_t *e) { poet_log_softmax_fwd(e->a[ROWS], e->a[D], e->in[0], e->out); }
void op_log_softmax_bwd_run(const poet_exec_t *e)
{
    poet_log_softmax_bwd(e->a[ROWS], e->a[D], e->in[0], e->in[1], e->out);
}
