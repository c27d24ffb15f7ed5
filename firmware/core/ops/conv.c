/* 2-d convolution (fp32 forward and backward, int8 forward; kernels/conv.c, kernels/lowp.c). */
#include "op_util.h"

/* x[B, C, H, W] * weight[O, C/groups, kh, kw] (+ bias[O]) -> y[B, O, Ho, Wo]. K packs the kernel
 * window and the width padding, GEOM the height padding, stride and groups (POET_CONV_* in model.h). conv2d_i8 reads its weight from dep 2, quantised from
 * the parameter WEIGHT, or, with two deps, WEIGHT itself stored int8 (a frozen one, in nv storage). */
enum { B = 0, C = 1, H = 2, W = 3, O = 4, K = 5, GEOM = 6, WEIGHT = 7, BIAS = 8, NEED_GX = 9 };

/* conv2d, conv2d_bwd and conv2d_i8: the same shapes and parameters, then each op's deps and output.
 * conv2d_i8's deps: the int8 x and its scale, then the int8 weight and its scale (cast and absmax
 * nodes) unless the weight is stored int8. */
int op_conv2d_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y, w, reduce;
    if (!conv_geometry_ok(a, &x, &y, &reduce))
        return 0;
    x = f32s(x);
    y = f32s(y);
    w = mul((uint64_t)a[O], reduce);
    if (!(n->op == POET_OP_CONV2D_I8 ? i8_weight_ok(m, n, a[WEIGHT], w) : param_ok(m, a[WEIGHT], w)) ||
        !opt_param_ok(m, a[BIAS], (uint64_t)a[O]))
        return 0;
    if (n->op == POET_OP_CONV2D_I8)
        return i8_io(m, n, x / 4u, w, reduce, y);
    return n->op == POET_OP_CONV2D ? io1(m, n, x, y) : weighted_bwd_ok(m, n, a[NEED_GX], y, x, a[WEIGHT]);
}

void op_conv2d_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_conv_t cv = conv_shape(a);
    poet_conv2d_ex_fwd(&cv, e->in[0], param(e, a[WEIGHT]), param(e, a[BIAS]), e->out);
}

void op_conv2d_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    poet_conv_t cv = conv_shape(a);
    poet_conv2d_ex_bwd(&cv, e->in[0], e->in[1], param(e, a[WEIGHT]), grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb),
                       a[NEED_GX] ? e->out : 0);
}

void op_conv2d_i8_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    float ws;
    const int8_t *wq = i8_weight(e, a[WEIGHT], &ws);
    poet_conv_t cv = conv_shape(a);
    poet_conv2d_i8_fwd(&cv, (const int8_t *)(const void *)e->in[0], e->in[1][0], wq, ws, param(e, a[BIAS]), e->out);
}
