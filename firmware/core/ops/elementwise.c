/* Elementwise ops: the activations (relu, tanh, sigmoid, gelu, hardtanh), add/sub/mul and the
 * affine scale, forward and backward (kernels/elementwise.c). relu, tanh and sigmoid need no check
 * of their own: ops.c's op_same_check is theirs. */
#include "op_util.h"

/* Attribute slots (docs/spec.md section 2). Every op here: a0 the elements of x (of a, for the
 * binary ops). */
enum { N = 0 };
enum { GELU_TANH = 1 };        /* gelu: 0 exact erf, 1 approximate='tanh' */
enum { LO = 1, HI = 2 };       /* hardtanh: the clamp's bounds (f32) */
enum { S_MUL = 1, S_ADD = 2 }; /* scale: y = x * mul + add (f32) */
/* dropout: p 2^24, 1 / (1 - p) (f32), which layer, elements a draw (0 or 1: a draw each element) */
enum { D_THRESHOLD = 1, D_SCALE = 2, D_SALT = 3, D_ROW = 4 };
enum { M = 1 };                /* add, sub, mul: b's elements, broadcast over a's leading dims;
                                  mul_bwd_a/b: the other operand's elements */

/* ---- activations ------------------------------------------------------------------------------ */

int op_gelu_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && (a[GELU_TANH] == 0 || a[GELU_TANH] == 1) &&
           io1(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[N]));
}

/* hardtanh, scale and scale_bwd: two finite float constants. */
int op_two_floats_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && finite_attr(a[1]) && finite_attr(a[2]) &&
           io1(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[N]));
}

/* relu, tanh and sigmoid backward: dL/dy and the forward's output y, all of one shape; silu,
 * hardswish and hardsigmoid backward: dL/dy and the forward's input x. */
int op_pointwise_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    uint64_t x = f32s((uint64_t)n->a[N]);
    return pos(n->a[N]) && io2(m, n, x, x, x);
}

/* gelu and hardtanh backward read the forward's input x. */
int op_gelu_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x = f32s((uint64_t)a[N]);
    return pos(a[N]) && (a[GELU_TANH] == 0 || a[GELU_TANH] == 1) && io2(m, n, x, x, x);
}

int op_hardtanh_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x = f32s((uint64_t)a[N]);
    return pos(a[N]) && finite_attr(a[LO]) && finite_attr(a[HI]) && io2(m, n, x, x, x);
}

void op_relu_run(const poet_exec_t *e) { poet_relu_fwd(e->a[N], e->in[0], e->out); }
void op_relu_bwd_run(const poet_exec_t *e) { poet_relu_bwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_tanh_run(const poet_exec_t *e) { poet_tanh_fwd(e->a[N], e->in[0], e->out); }
void op_tanh_bwd_run(const poet_exec_t *e) { poet_tanh_bwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_sigmoid_run(const poet_exec_t *e) { poet_sigmoid_fwd(e->a[N], e->in[0], e->out); }
void op_sigmoid_bwd_run(const poet_exec_t *e) { poet_sigmoid_bwd(e->a[N], e->in[0], e->in[1], e->out); }
/* silu, hardswish, hardsigmoid: their backwards read the forward's input x (op_pointwise_bwd_check) */
void op_silu_run(const poet_exec_t *e) { poet_silu_fwd(e->a[N], e->in[0], e->out); }
void op_silu_bwd_run(const poet_exec_t *e) { poet_silu_bwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_hardswish_run(const poet_exec_t *e) { poet_hardswish_fwd(e->a[N], e->in[0], e->out); }
void op_hardswish_bwd_run(const poet_exec_t *e) { poet_hardswish_bwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_hardsigmoid_run(const poet_exec_t *e) { poet_hardsigmoid_fwd(e->a[N], e->in[0], e->out); }
void op_hardsigmoid_bwd_run(const poet_exec_t *e) { poet_hardsigmoid_bwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_gelu_run(const poet_exec_t *e) { poet_gelu_fwd(e->a[N], e->a[GELU_TANH], e->in[0], e->out); }

void op_gelu_bwd_run(const poet_exec_t *e)
{
    poet_gelu_bwd(e->a[N], e->a[GELU_TANH], e->in[0], e->in[1], e->out);
}

void op_hardtanh_run(const poet_exec_t *e)
{
    poet_hardtanh_fwd(e->a[N], poet_attr_f32(e->a[LO]), poet_attr_f32(e->a[HI]), e->in[0], e->out);
}

void op_hardtanh_bwd_run(const poet_exec_t *e)
{
    poet_hardtanh_bwd(e->a[N], poet_attr_f32(e->a[LO]), poet_attr_f32(e->a[HI]), e->in[0], e->in[1],
                      e->out);
}

/* ---- arithmetic ------------------------------------------------------------------------------- */

/* add and sub: b broadcasts over a's leading dims (m divides n). */
int op_add_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (!pos(a[N]) || !pos(a[M]) || a[N] % a[M])
        return 0;
    return io2(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[M]), f32s((uint64_t)a[N]));
}

/* mul: same shapes only. */
int op_mul_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (!pos(a[N]) || a[M] != a[N])
        return 0;
    return io2(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[M]), f32s((uint64_t)a[N]));
}

/* add and sub backward: dL/dy in, the gradient to b (dL/dy summed over a's leading dims) out. */
int op_add_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (!pos(a[N]) || !pos(a[M]) || a[N] % a[M])
        return 0;
    return io1(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[M]));
}

/* mul backward, to either operand: dL/dy and the other operand. */
int op_mul_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x = f32s((uint64_t)a[N]);
    return pos(a[N]) && a[M] == a[N] && io2(m, n, x, x, x);
}

void op_add_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (a[N] == a[M])
        poet_add_fwd(a[N], e->in[0], e->in[1], e->out);
    else
        poet_add_bcast_fwd(a[N] / a[M], a[M], 1, e->in[0], e->in[1], e->out);
}

void op_sub_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (a[N] == a[M])
        poet_sub_fwd(a[N], e->in[0], e->in[1], e->out);
    else
        poet_sub_bcast_fwd(a[N] / a[M], a[M], 1, e->in[0], e->in[1], e->out);
}

void op_add_bwd_run(const poet_exec_t *e)
{
    poet_add_bcast_bwd(e->a[N] / e->a[M], e->a[M], 1, e->in[0], 0, e->out);
}

void op_sub_bwd_run(const poet_exec_t *e)
{
    poet_sub_bcast_bwd(e->a[N] / e->a[M], e->a[M], 1, e->in[0], 0, e->out);
}

void op_mul_run(const poet_exec_t *e) { poet_mul_fwd(e->a[N], e->in[0], e->in[1], e->out); }
void op_mul_bwd_run(const poet_exec_t *e) { poet_mul_bwd(e->a[N], e->in[0], e->in[1], e->out); }

void op_scale_run(const poet_exec_t *e)
{
    poet_scale_fwd(e->a[N], poet_attr_f32(e->a[S_MUL]), poet_attr_f32(e->a[S_ADD]), e->in[0], e->out);
}

void op_scale_bwd_run(const poet_exec_t *e)
{
    poet_scale_bwd(e->a[N], poet_attr_f32(e->a[S_MUL]), e->in[0], e->out);
}

/* ---- dropout ---------------------------------------------------------------------------------- */

/* dropout and dropout_bwd: x (or dL/dy) in, one shape out; the mask is made again from the step's
 * count (upd->step) wherever it is needed, so it is never stored and a recompute makes the same one. */
int op_dropout_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && a[D_THRESHOLD] >= 0 && a[D_THRESHOLD] < (1 << 24) && finite_attr(a[D_SCALE]) &&
           a[D_ROW] >= 0 && io1(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[N]));
}

void op_dropout_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (e->eval) {
        poet_copy(a[N], e->in[0], e->out);
        return;
    }
    poet_dropout(a[N], poet_dropout_key((uint32_t)a[D_SALT], e->upd->step), (uint32_t)a[D_THRESHOLD],
                 poet_attr_f32(a[D_SCALE]), a[D_ROW], e->in[0], e->out);
}
