/* Dense ops: linear (fp32 and int8) and batched matmul, forward and backward (kernels/linear.c,
 * kernels/lowp.c). */
#include "op_util.h"

/* ---- linear ----------------------------------------------------------------------------------- */

/* x[B, in] @ weight[out, in]^T (+ bias[out]) -> y[B, out]. linear_i8 reads its weight from dep 2,
 * quantised from the parameter a3, or, with two deps, a3 itself stored int8 (a frozen one, in nv
 * storage); its bias (fp32) from a4. linear and linear_bwd read a3 fp32, or stored int8 when it is a
 * frozen POET_PARAM_I8 one (weight-only int8: fp32 arithmetic on w = q * scale). */
enum { B = 0, IN = 1, OUT = 2, WEIGHT = 3, BIAS = 4, NEED_GX = 5 };

/* linear, linear_bwd and linear_i8: the same shapes and parameters, then each op's deps and output.
 * linear_i8's deps: the int8 x and its scale, then the int8 weight and its scale (cast and absmax
 * nodes) unless the weight is stored int8. */
int op_linear_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y, w;
    if (!pos(a[B]) || !pos(a[IN]) || !pos(a[OUT]))
        return 0;
    x = f32s(mul((uint64_t)a[B], (uint64_t)a[IN]));
    y = f32s(mul((uint64_t)a[B], (uint64_t)a[OUT]));
    w = mul((uint64_t)a[IN], (uint64_t)a[OUT]);
    if (!(n->op == POET_OP_LINEAR_I8 ? i8_weight_ok(m, n, a[WEIGHT], w)
                                      : param_ok(m, a[WEIGHT], w) || w8_weight_ok(m, a[WEIGHT], w, 0) ||
                                            /* a forward may stream its weight's rows (a backward's input
                                             * gradient sums over every row) */
                                            (n->op == POET_OP_LINEAR && w8_weight_ok(m, a[WEIGHT], w, 1) &&
                                             streams(m, (uint32_t)a[IN]))) ||
        !opt_param_ok(m, a[BIAS], (uint64_t)a[OUT]))
        return 0;
    if (n->op == POET_OP_LINEAR_I8)
        return i8_io(m, n, x / 4u, w, (uint64_t)a[IN], y);
    return n->op == POET_OP_LINEAR ? io1(m, n, x, y) : weighted_bwd_ok(m, n, a[NEED_GX], y, x, a[WEIGHT]);
}

/* Output features first..end-1 of a weight stored int8 from their rows wq: the whole layer in flash, or one
 * read of a weight on aux storage, whose outputs are then the in-flash layer's, bit for bit. */
static void w8_rows(const poet_exec_t *e, int32_t first, int32_t end, const int8_t *wq, float ws)
{
    const int32_t *a = e->a;
    poet_linear_w8_fwd(a[B], a[IN], a[OUT], first, end, e->in[0], wq, ws, param(e, a[BIAS]), e->out);
}

void op_linear_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    if (poet_param_i8(e->m, (uint16_t)a[WEIGHT])) { /* weight-only int8, in nv storage or on aux storage */
        int8_rows(e, a[WEIGHT], (uint32_t)a[IN], a[OUT], w8_rows);
        return;
    }
    poet_linear_fwd(a[B], a[IN], a[OUT], e->in[0], param(e, a[WEIGHT]), param(e, a[BIAS]), e->out);
}

void op_linear_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    float ws;
    if (poet_param_i8(e->m, (uint16_t)a[WEIGHT])) { /* frozen (checked): the input gradient and the bias's */
        const int8_t *wq = i8_weight(e, a[WEIGHT], &ws);
        if (a[NEED_GX])
            poet_linear_w8_bwd_gx(a[B], a[IN], a[OUT], e->in[0], wq, ws, e->out);
        poet_linear_bwd(a[B], a[IN], a[OUT], e->in[0], 0, 0, 0, grad(e, a[BIAS], &gb), 0);
        return;
    }
    poet_linear_bwd(a[B], a[IN], a[OUT], e->in[0], e->in[1], param(e, a[WEIGHT]), grad(e, a[WEIGHT], &gw),
                    grad(e, a[BIAS], &gb), a[NEED_GX] ? e->out : 0);
}

void op_linear_i8_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    float ws;
    const int8_t *wq = i8_weight(e, a[WEIGHT], &ws);
    poet_linear_i8_fwd(a[B], a[IN], a[OUT], (const int8_t *)(const void *)e->in[0], e->in[1][0], wq, ws,
                       param(e, a[BIAS]), e->out);
}

/* ---- matmul ----------------------------------------------------------------------------------- */

/* y[batch, M, N] = a[batch, M, K] @ b[batch, K, N] */
enum { BATCH = 0, MM_M = 1, MM_K = 2, MM_N = 3 };

/* matmul: a and b in, y out; backward to a: dL/dy and b in, ga out; to b: dL/dy and a in, gb out. */
int op_matmul_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t xa, xb, y;
    if (!pos(a[BATCH]) || !pos(a[MM_M]) || !pos(a[MM_K]) || !pos(a[MM_N]))
        return 0;
    xa = f32s(mul(mul((uint64_t)a[BATCH], (uint64_t)a[MM_M]), (uint64_t)a[MM_K]));
    xb = f32s(mul(mul((uint64_t)a[BATCH], (uint64_t)a[MM_K]), (uint64_t)a[MM_N]));
    y = f32s(mul(mul((uint64_t)a[BATCH], (uint64_t)a[MM_M]), (uint64_t)a[MM_N]));
    if (n->op == POET_OP_MATMUL)
        return io2(m, n, xa, xb, y);
    return n->op == POET_OP_MATMUL_BWD_A ? io2(m, n, y, xb, xa) : io2(m, n, y, xa, xb);
}

void op_matmul_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_matmul_fwd(a[BATCH], a[MM_M], a[MM_K], a[MM_N], e->in[0], e->in[1], e->out);
}

void op_matmul_bwd_a_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_matmul_bwd_a(a[BATCH], a[MM_M], a[MM_K], a[MM_N], e->in[0], e->in[1], e->out);
}

void op_matmul_bwd_b_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_matmul_bwd_b(a[BATCH], a[MM_M], a[MM_K], a[MM_N], e->in[0], e->in[1], e->out);
}
