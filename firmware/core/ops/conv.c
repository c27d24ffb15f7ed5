/* 2-d convolution (fp32 forward and backward, int8 forward; kernels/conv.c, kernels/lowp.c). */
#include "op_util.h"

/* x[B, C, H, W] * weight[O, C/groups, kh, kw] (+ bias[O]) -> y[B, O, Ho, Wo]. K packs the kernel
 * window and the width padding, GEOM the height padding, stride and groups (POET_CONV_* in model.h). conv2d_i8 reads its weight from dep 2, quantised from
 * the parameter WEIGHT, or, with two deps, WEIGHT itself stored int8 (a frozen one, in nv storage, or
 * streamed from aux storage). */
enum { B = 0, C = 1, H = 2, W = 3, O = 4, K = 5, GEOM = 6, WEIGHT = 7, BIAS = 8, NEED_GX = 9 };

/* The output channels a weight-only int8 conv makes fp32 together at the least: the four the kernels block
 * (kernels/conv.c), within a group; one for a depthwise conv, which has no such blocks. */
static uint64_t w8_block(const int32_t *a)
{
    const int32_t groups = POET_CONV_GROUPS(a[GEOM]), og = a[O] / groups;
    return a[C] == groups && og == 1 ? 1u : og < 4 ? (uint64_t)og : 4u;
}

/* conv2d, conv2d_bwd and conv2d_i8: the same shapes and parameters, then each op's deps and output.
 * conv2d_i8's deps: the int8 x and its scale, then the int8 weight and its scale (cast and absmax
 * nodes) unless the weight is stored int8. */
int op_conv2d_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y, w, reduce;
    if (!conv_geometry_ok(a, &x, &y, &reduce) || a[K] >> 24) /* the fp32 kernels pad alike above and below */
        return 0;
    x = f32s(x);
    y = f32s(y);
    w = mul((uint64_t)a[O], reduce);
    if (!(n->op == POET_OP_CONV2D_I8 ? i8_weight_ok(m, n, a[WEIGHT], w) ||
                                            /* stored int8 on aux storage: streamed an output channel or more
                                             * a read (reduce is below POET_I8_MAX_REDUCE: i8_io) */
                                            (n->n_deps == 2 && w8_weight_ok(m, a[WEIGHT], w, 1) &&
                                             streams(m, (uint32_t)reduce))
                                      : param_ok(m, a[WEIGHT], w) ||
                                            /* weight-only int8: made fp32 a block of output channels at a
                                             * time in the stream buffer (w8_blocks) */
                                            (w8_weight_ok(m, a[WEIGHT], w, 0) &&
                                             streams(m, (uint32_t)f32s(mul(reduce, w8_block(a)))))) ||
        !opt_param_ok(m, a[BIAS], (uint64_t)a[O]))
        return 0;
    if (n->op == POET_OP_CONV2D_I8)
        return i8_io(m, n, x / 4u, w, reduce, y);
    if (n->op == POET_OP_CONV2D)
        return io1(m, n, x, y);
    /* conv2d_bwd's NEED_GX slot: need_grad_input in bit 0, above it the input channels the weight gradient
     * covers (kernels.h poet_conv_t ck), 0 for all */
    return a[NEED_GX] >= 0 && (a[NEED_GX] >> 1) <= a[C] &&
           weighted_bwd_ok(m, n, a[NEED_GX] & 1, y, x, a[WEIGHT]);
}

/* A frozen weight stored int8 (weight-only, poet.plan.transform.placement) read by an fp32 conv: its output
 * channels a block at a time, as many as the stream buffer holds and never across a group, each block's
 * w = q * scale made in the buffer and handed to run(e, first, end, w). Each output channel sums its terms as
 * the whole layer's kernel does, so the layer is the fp32 layer of the weight q * scale, bit for bit. */
typedef void (*w8_fn)(const poet_exec_t *e, const poet_conv_t *cv, int first, int end, const float *w);
static void w8_blocks(const poet_exec_t *e, const poet_conv_t *cv, w8_fn run)
{
    const int Og = cv->O / cv->groups;
    const long row = (long)(cv->C / cv->groups) * cv->kh * cv->kw;
    const int per = (int)(e->m->stream_bytes / (4u * (uint32_t)row));
    float ws, *w = (float *)(void *)e->buf->stream;
    const int8_t *wq = i8_weight(e, e->a[WEIGHT], &ws);
    int o, n;
    long i;
    for (o = 0; o < cv->O; o += n) {
        const int group_end = Og == 1 ? cv->O : (o / Og + 1) * Og;
        n = group_end - o < per ? group_end - o : per;
        for (i = 0; i < n * row; i++)
            w[i] = (float)wq[(long)o * row + i] * ws;
        run(e, cv, o, o + n, w);
    }
}

/* Output channels first..end-1 of each sample, as a convolution of their own: the group's input channels in
 * (a depthwise conv's: the block's own), the block's weights w. */
static void w8_fwd(const poet_exec_t *e, const poet_conv_t *cv, int first, int end, const float *w)
{
    const int Cg = cv->C / cv->groups, Og = cv->O / cv->groups, depthwise = Cg == 1 && Og == 1;
    const long HW = (long)cv->H * cv->W;
    const long HoWo = (long)poet_conv2d_out(cv->H, cv->kh, cv->stride, cv->ph) *
                      poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    const float *b = param(e, e->a[BIAS]);
    poet_conv_t part = *cv;
    int s;
    part.B = 1;
    part.O = end - first;
    part.C = depthwise ? end - first : Cg;
    part.groups = depthwise ? end - first : 1;
    for (s = 0; s < cv->B; s++)
        poet_conv2d_ex_fwd(&part, e->in[0] + ((long)s * cv->C + (depthwise ? first : first / Og * Cg)) * HW, w,
                           b ? b + first : 0, e->out + ((long)s * cv->O + first) * HoWo);
}

static void w8_gx(const poet_exec_t *e, const poet_conv_t *cv, int first, int end, const float *w)
{
    poet_conv2d_gx_rows(cv, first, end, e->in[0], w, e->out);
}

void op_conv2d_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_conv_t cv = conv_shape(a);
    if (poet_param_i8(e->m, (uint16_t)a[WEIGHT])) {
        w8_blocks(e, &cv, w8_fwd);
        return;
    }
    poet_conv2d_ex_fwd(&cv, e->in[0], param(e, a[WEIGHT]), param(e, a[BIAS]), e->out);
}

void op_conv2d_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    poet_conv_t cv = conv_shape(a);
    cv.ck = a[NEED_GX] >> 1;
    if (poet_param_i8(e->m, (uint16_t)a[WEIGHT])) { /* frozen (checked): the input gradient and the bias's */
        if (a[NEED_GX] & 1)
            w8_blocks(e, &cv, w8_gx);
        poet_conv2d_ex_bwd(&cv, e->in[0], 0, 0, 0, grad(e, a[BIAS], &gb), 0);
        return;
    }
    poet_conv2d_ex_bwd(&cv, e->in[0], e->in[1], param(e, a[WEIGHT]), grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb),
                       a[NEED_GX] & 1 ? e->out : 0);
}

/* Output channels first..end-1 from their int8 weights wq: the whole layer, or one read of a weight on aux
 * storage, whose outputs are then the in-flash layer's, bit for bit (poet_conv2d_i8_fwd's kernel). */
static void i8_rows(const poet_exec_t *e, int32_t first, int32_t end, const int8_t *wq, float ws)
{
    const int32_t *a = e->a;
    poet_conv_t cv = conv_shape(a);
    poet_conv2d_q_fwd_rows(&cv, first, end, (const int8_t *)(const void *)e->in[0], e->in[1][0], wq, ws,
                           param(e, a[BIAS]), 0, 0, e->out);
}

void op_conv2d_i8_run(const poet_exec_t *e)
{
    poet_conv_t cv = conv_shape(e->a);
    int8_rows(e, e->a[WEIGHT], (uint32_t)(cv.C / cv.groups * cv.kh * cv.kw), cv.O, i8_rows);
}
