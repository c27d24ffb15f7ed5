/* Elementwise ops: the activations (relu, tanh, sigmoid, gelu, hardtanh), add/sub/mul and the
 * affine scale, forward and backward (kernels/elementwise.c). relu, tanh and sigmoid need no check
 * of their own: ops.c's op_same_check is theirs. */
#include "op_util.h"

/* Attribute slots (docs/spec.md section 2). Every op here: a0 the elements of x (of a, for the
 * binary ops). */
enum { N = 0 };
enum { GELU_TANH = 1 };        /* gelu: 0 exact erf, 1 approximate='tanh' */
enum { LO = 1, HI = 2 };       /* hardtanh: the clamp's bounds (f32) */
enum { BOUNDED = 3 };          /* act_mask: lo < y, and y < hi if 1 */
enum { S_MUL = 1, S_ADD = 2 }; /* scale: y = x * mul + add (f32) */
/* dropout: p 2^24, 1 / (1 - p) (f32), which layer, elements a draw (0 or 1: a draw each element) */
enum { D_THRESHOLD = 1, D_SCALE = 2, D_SALT = 3, D_ROW = 4 };
/* add, sub, mul and their backwards: a (n elements) viewed as [outer, r, inner] and b (m elements)
 * as [outer, inner], repeated r = n / m times along a's middle dim; INNER 0 means inner = m (b is a's
 * trailing shape, repeated over its leading dims: the only form before the slot). m = n: same shapes. */
enum { M = 1, INNER = 2 };

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

/* act_mask: y's n fp32 elements -> a bit each, in u32 words (kernels.h poet_act_mask). */
int op_act_mask_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && finite_attr(a[LO]) && finite_attr(a[HI]) && (a[BOUNDED] == 0 || a[BOUNDED] == 1) &&
           io1(m, n, f32s((uint64_t)a[N]), 4u * (((uint64_t)a[N] + 31u) / 32u));
}

/* mask_bwd: dL/dy (fp32, the op is NARROW for its other dep) and an act_mask node's bits of as many elements. */
int op_mask_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const uint64_t x = f32s((uint64_t)n->a[N]);
    return pos(n->a[N]) && io2(m, n, x, 4u * (((uint64_t)n->a[N] + 31u) / 32u), x) &&
           dep_dtype(m, n, 0) == POET_DT_F32 && dep_dtype(m, n, 1) == POET_DT_BITS &&
           poet_rd32(poet_node_rec(m, n->deps[1]) + 16) == (uint32_t)n->a[N];
}

void op_act_mask_run(const poet_exec_t *e)
{
    poet_act_mask(e->a[N], poet_attr_f32(e->a[LO]), poet_attr_f32(e->a[HI]), e->a[BOUNDED], e->in[0],
                  (uint32_t *)(void *)e->out);
}

void op_mask_bwd_run(const poet_exec_t *e)
{
    poet_mask_bwd(e->a[N], e->in[0], (const uint32_t *)(const void *)e->in[1], e->out);
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

/* m divides n, and inner divides m (then outer = m / inner, r = n / m). */
static int bcast_ok(const int32_t *a)
{
    if (!pos(a[N]) || !pos(a[M]) || a[N] % a[M] || a[INNER] < 0)
        return 0;
    return a[INNER] == 0 || a[M] % a[INNER] == 0;
}

/* add, sub and mul: a and b in, a's shape out. */
int op_add_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return bcast_ok(a) && io2(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[M]), f32s((uint64_t)a[N]));
}

/* add and sub backward: dL/dy in, the gradient to b (dL/dy summed over r) out. */
int op_add_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return bcast_ok(a) && io1(m, n, f32s((uint64_t)a[N]), f32s((uint64_t)a[M]));
}

/* mul backward: dL/dy and b in, a's gradient out (mul_bwd_a); dL/dy and a in, b's out (mul_bwd_b). */
int op_mul_bwd_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t big = f32s((uint64_t)a[N]), small = f32s((uint64_t)a[M]);
    if (!bcast_ok(a))
        return 0;
    return n->op == POET_OP_MUL_BWD_A ? io2(m, n, big, small, big) : io2(m, n, big, big, small);
}

static void b_view(const int32_t *a, int *outer, int *r, int *inner)
{
    *inner = a[INNER] ? a[INNER] : a[M];
    *outer = a[M] / *inner;
    *r = a[N] / a[M];
}

typedef void (*rep_fn)(int outer, int r, int inner, const float *a, const float *b, float *y);

/* a (op) b: the same-shape kernel when m = n, else b repeated (kernels.h) */
static void binary(const poet_exec_t *e, void (*same)(int, const float *, const float *, float *), rep_fn rep)
{
    int outer, r, inner;
    if (e->a[N] == e->a[M]) {
        same(e->a[N], e->in[0], e->in[1], e->out);
        return;
    }
    b_view(e->a, &outer, &r, &inner);
    rep(outer, r, inner, e->in[0], e->in[1], e->out);
}

void op_add_run(const poet_exec_t *e) { binary(e, poet_add_fwd, poet_add_rep_fwd); }
void op_sub_run(const poet_exec_t *e) { binary(e, poet_sub_fwd, poet_sub_rep_fwd); }
void op_mul_run(const poet_exec_t *e) { binary(e, poet_mul_fwd, poet_mul_rep_fwd); }
/* a's gradient, g * b repeated: mul's forward with g for a (poet_mul_bwd is poet_mul_fwd's loop) */
void op_mul_bwd_a_run(const poet_exec_t *e) { binary(e, poet_mul_fwd, poet_mul_rep_fwd); }

/* b's gradient, g summed over the repeats (negated for sub; r = 1: g itself, or -g) */
void op_add_bwd_run(const poet_exec_t *e)
{
    int outer, r, inner;
    b_view(e->a, &outer, &r, &inner);
    poet_add_rep_bwd(outer, r, inner, e->in[0], e->out);
}

void op_sub_bwd_run(const poet_exec_t *e)
{
    int outer, r, inner;
    b_view(e->a, &outer, &r, &inner);
    poet_sub_rep_bwd(outer, r, inner, e->in[0], e->out);
}

/* b's gradient: g * a, summed over the repeats */
void op_mul_bwd_b_run(const poet_exec_t *e)
{
    int outer, r, inner;
    if (e->a[N] == e->a[M]) {
        poet_mul_bwd(e->a[N], e->in[0], e->in[1], e->out);
        return;
    }
    b_view(e->a, &outer, &r, &inner);
    poet_mul_rep_bwd_b(outer, r, inner, e->in[0], e->in[1], e->out);
}

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
