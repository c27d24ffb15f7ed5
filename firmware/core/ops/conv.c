/* 2-d convolution (fp32 forward and backward, int8 forward; kernels/conv.c, kernels/lowp.c). */
#include "op_util.h"

/* x[B, C, H, W] * weight[O, C/groups, kh, kw] (+ bias[O]) -> y[B, O, Ho, Wo]. K packs the kernel
 * window and the width padding, GEOM the height padding, stride and groups (POET_CONV_* in model.h). conv2d_i8 reads its weight from dep 2, quantised from
 * the parameter WEIGHT, or, with two deps, WEIGHT itself stored int8 (a frozen one, in nv storage, or
 * streamed from aux storage). */
enum { B = 0, C = 1, H = 2, W = 3, O = 4, K = 5, GEOM = 6, WEIGHT = 7, BIAS = 8, NEED_GX = 9, REST = 9 };

/* A weight trained in part (a sparse update's share) is stored split: WEIGHT the share, trained, in RAM, and its
 * rest a frozen fp32 parameter in nv storage (docs/spec.md 2): conv2d's a9 - 1, conv2d_bwd's a9 bits 16-30 - 1;
 * -1 for a weight stored whole. */
static int32_t rest_of(uint8_t op, const int32_t *a)
{
    if (op == POET_OP_CONV2D) /* bits 0-15 (the in-place mark is bit 19): never a9 - 1 overflowing */
        return (int32_t)((uint32_t)a[REST] & 0xFFFFu) - 1;
    return op == POET_OP_CONV2D_BWD ? (int32_t)(((uint32_t)a[NEED_GX] >> 16) & 0x7FFFu) - 1 : -1;
}

/* conv2d_bwd's a9 bits 1-14: the input channels its weight gradient covers (kernels.h poet_conv_t ck), 0 for all */
static int32_t ck_of(const int32_t *a) { return (int32_t)(((uint32_t)a[NEED_GX] >> 1) & 0x3FFFu); }

/* Marked to run in place (POET_CONV_IN_PLACE, POET_CONV_BWD_IN_PLACE): a channel at a time (by_channel). */
static int marked(uint8_t op, const int32_t *a)
{
    return ((uint32_t)a[REST] & (op == POET_OP_CONV2D ? POET_CONV_IN_PLACE : POET_CONV_BWD_IN_PLACE)) != 0;
}

static int depthwise(const int32_t *a) { return a[C] == a[O] && POET_CONV_GROUPS(a[GEOM]) == a[C]; }

/* A split weight's parts: the share trained, the rest frozen fp32, the whole's elements between them, cut at
 * whole channels (each output channel's first ck input channels; a depthwise conv's first ck channels). ck:
 * conv2d_bwd's, whose weight gradient is the share's and must cover it exactly, or -1 (conv2d: any). */
static int split_ok(const poet_model_t *m, const int32_t *a, int32_t rest, uint64_t reduce, int32_t ck)
{
    /* in 32 bits: the elements of a parameter fit 28, and a 64-bit division costs the M4 image 700 B */
    const uint32_t khkw = (uint32_t)(POET_CONV_KH(a[K]) * POET_CONV_KW(a[K]));
    const uint32_t unit = depthwise(a) ? khkw : (uint32_t)a[O] * khkw; /* the share's elements per channel */
    const uint32_t channels = depthwise(a) ? (uint32_t)a[O] : (uint32_t)(a[C] / POET_CONV_GROUPS(a[GEOM]));
    uint32_t share;
    if (a[WEIGHT] < 0 || (uint32_t)a[WEIGHT] >= m->n_params || !poet_param_trained(m, (uint16_t)a[WEIGHT]) ||
        (uint32_t)rest >= m->n_params || poet_param_trained(m, (uint16_t)rest) || poet_param_i8(m, (uint16_t)rest))
        return 0;
    share = poet_param_elems(m, (uint16_t)a[WEIGHT]);
    return unit > 0 && share % unit == 0 && share / unit > 0 && share / unit < channels &&
           (ck < 0 || (uint32_t)ck == share / unit) &&
           (uint64_t)share + poet_param_elems(m, (uint16_t)rest) == mul((uint64_t)a[O], reduce);
}

/* A depthwise conv marked to run in place (docs/spec.md 1, "In place"): a forward one at any batch, its output no
 * larger than its input; a backward one at batch 1 making the input gradient, no larger than the output
 * gradient it overwrites (a weight gradient sums over the batch, so every sample's output gradient of a channel
 * must still be there). The stream buffer holds one output channel's plane, and after it one channel's fp32 weights
 * (a weight stored int8 made so). x, y: the input's and the output's fp32 bytes. */
static int in_place_ok(poet_model_t *m, const poet_node_t *n, uint64_t x, uint64_t y)
{
    const int32_t *a = n->a;
    const int fwd = n->op == POET_OP_CONV2D;
    const uint64_t out = fwd ? y : x;
    /* the plane in 32 bits (bounded first): a 64-bit division costs the M4 image 700 B */
    return depthwise(a) && a[C] > 1 && out <= (fwd ? x : y) && out < 0x40000000u &&
           (fwd || (a[B] == 1 && (a[NEED_GX] & 1))) &&
           streams(m, (uint32_t)out / ((uint32_t)a[B] * (uint32_t)a[O]) +
                          4u * (uint32_t)(POET_CONV_KH(a[K]) * POET_CONV_KW(a[K])));
}

/* conv2d, conv2d_bwd and conv2d_i8: the same shapes and parameters, then each op's deps and output.
 * conv2d_i8's deps: the int8 x and its scale, then the int8 weight and its scale (cast and absmax
 * nodes) unless the weight is stored int8. */
int op_conv2d_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y, w, reduce;
    int32_t rest;
    uint32_t ck;
    int weight;
    if (!conv_geometry_ok(a, &x, &y, &reduce) || a[K] >> 24) /* the fp32 kernels pad alike above and below */
        return 0;
    x = f32s(x);
    y = f32s(y);
    w = mul((uint64_t)a[O], reduce);
    rest = rest_of(n->op, a);
    if (n->op == POET_OP_CONV2D && ((uint32_t)a[REST] & ~(0xFFFFu | POET_CONV_IN_PLACE)) != 0)
        return 0;
    if (n->op != POET_OP_CONV2D_I8 && marked(n->op, a) && !in_place_ok(m, n, x, y))
        return 0;
    if (rest >= 0) /* made fp32 a block of output channels at a time in the stream buffer, as a w8 one */
        weight = split_ok(m, a, rest, reduce, n->op == POET_OP_CONV2D ? -1 : ck_of(a)) &&
                 streams(m, (uint32_t)f32s(reduce));
    else
        weight = n->op == POET_OP_CONV2D_I8 ? i8_weight_ok(m, n, a[WEIGHT], w) ||
                                            /* stored int8 on aux storage: streamed an output channel or more
                                             * a read (reduce is below POET_I8_MAX_REDUCE: i8_io) */
                                            (n->n_deps == 2 && w8_weight_ok(m, a[WEIGHT], w, 1) &&
                                             streams(m, (uint32_t)reduce))
                                      : param_ok(m, a[WEIGHT], w) ||
                                            /* weight-only int8: made fp32 a block of output channels at a
                                             * time in the stream buffer (blocks) */
                                            (w8_weight_ok(m, a[WEIGHT], w, 0) &&
                                             streams(m, (uint32_t)f32s(reduce)));
    if (!weight || !opt_param_ok(m, a[BIAS], (uint64_t)a[O]))
        return 0;
    if (n->op == POET_OP_CONV2D_I8)
        return i8_io(m, n, x / 4u, w, reduce, y);
    if (n->op == POET_OP_CONV2D)
        return io1(m, n, x, y);
    /* conv2d_bwd's NEED_GX slot: need_grad_input in bit 0, in bits 1-14 the input channels the weight gradient
     * covers (kernels.h poet_conv_t ck), 0 for all, and a share's gradient only of a weight stored split (the
     * share's layout); bit 15 the in-place mark; then the rest */
    ck = (uint32_t)ck_of(a);
    return a[NEED_GX] >= 0 && ck <= (uint32_t)a[C] &&
           (rest >= 0 || ck == 0 || ck >= (uint32_t)(depthwise(a) ? a[O] : a[C] / POET_CONV_GROUPS(a[GEOM]))) &&
           weighted_bwd_ok(m, n, a[NEED_GX] & 1, y, x, a[WEIGHT]);
}

/* Output channels first..end-1 of a split weight (rest_of), whole, into w: each one's share, then its rest; a
 * depthwise conv's channel is all in one of them. */
static void split_rows(const poet_exec_t *e, int32_t rest, int first, int end, long row, float *w)
{
    const float *share = param(e, e->a[WEIGHT]), *past = param(e, rest);
    const long n_share = (long)poet_param_elems(e->m, (uint16_t)e->a[WEIGHT]);
    const long cut = depthwise(e->a) ? row : n_share / e->a[O]; /* a row's elements from the share */
    long o, i, at;
    for (o = first; o < end; o++, w += row) {
        if (depthwise(e->a)) {
            at = o * row;
            for (i = 0; i < row; i++)
                w[i] = at < n_share ? share[at + i] : past[at - n_share + i];
            continue;
        }
        for (i = 0; i < cut; i++)
            w[i] = share[o * cut + i];
        for (i = cut; i < row; i++)
            w[i] = past[o * (row - cut) + i - cut];
    }
}

/* A weight not stored whole in fp32 read by an fp32 conv: a frozen one stored int8 (weight-only,
 * poet.plan.transform.placement), or one stored split (rest_of). Its output channels a block at a time, as many
 * as the stream buffer holds (one at least: the check asks for one channel's row) and never across a group, each block's fp32 weights (q * scale; or share and rest)
 * made in the buffer and handed to run(e, first, end, w). Each output channel sums its terms as the whole
 * layer's kernel does, so the layer is the fp32 layer of that weight, bit for bit. */
typedef void (*block_fn)(const poet_exec_t *e, const poet_conv_t *cv, int first, int end, const float *w);
static void blocks(const poet_exec_t *e, const poet_conv_t *cv, int32_t rest, block_fn run)
{
    const int Og = cv->O / cv->groups;
    const long row = (long)(cv->C / cv->groups) * cv->kh * cv->kw;
    const int per = (int)(e->m->stream_bytes / (4u * (uint32_t)row));
    float ws = 0.0f, *w = (float *)(void *)e->buf->stream;
    const int8_t *wq = rest < 0 ? i8_weight(e, e->a[WEIGHT], &ws) : 0;
    int o, n;
    long i;
    for (o = 0; o < cv->O; o += n) {
        const int group_end = Og == 1 ? cv->O : (o / Og + 1) * Og;
        n = group_end - o < per ? group_end - o : per;
        if (wq)
            for (i = 0; i < n * row; i++)
                w[i] = (float)wq[(long)o * row + i] * ws;
        else
            split_rows(e, rest, o, o + n, row, w);
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

/* Channel c's kh kw fp32 weights: the whole weight's, the share's or the rest's of a split one, or made from a
 * weight stored int8 into w (after the channel's plane in the stream buffer: in_place_ok). */
static const float *channel_weights(const poet_exec_t *e, int32_t rest, int c, long kk, float *w)
{
    long i;
    float ws;
    if (rest >= 0) {
        const long n_share = (long)poet_param_elems(e->m, (uint16_t)e->a[WEIGHT]), at = c * kk;
        return at < n_share ? param(e, e->a[WEIGHT]) + at : param(e, rest) + (at - n_share);
    }
    if (poet_param_i8(e->m, (uint16_t)e->a[WEIGHT])) {
        const int8_t *wq = i8_weight(e, e->a[WEIGHT], &ws) + c * kk;
        for (i = 0; i < kk; i++)
            w[i] = (float)wq[i] * ws; /* as blocks makes it */
        return w;
    }
    return param(e, e->a[WEIGHT]) + c * kk;
}

/* gradient d's element `at` onwards as a gradient of its own: one channel's share of it */
static const poet_grad_t *from(const poet_grad_t *d, long at, poet_grad_t *out)
{
    if (!d)
        return 0;
    out->g = d->g ? d->g + at : 0;
    out->w = d->w + at;
    out->s0 = d->s0 ? d->s0 + at : 0;
    out->s1 = d->s1 ? d->s1 + at : 0;
    out->u = d->u;
    return out;
}

/* A depthwise conv marked in place (in_place_ok): each channel of each sample as a convolution of its own, made
 * in the stream buffer and copied to its place in the output, which lies over input channels already read (a
 * plane of the output is no larger than one of the input: checked). Backward (batch 1), a channel's input
 * gradient first (an update in backward changes its weights), then its weight's and bias's gradients, which read
 * the output gradient its input gradient then overwrites. Each element sums the whole layer's terms in its
 * order (kernels/conv.c: a depthwise conv's channels are computed apart), so the layer's bits are the same, in
 * place or not; it runs so either way, and the profile measures the one cost. */
static void by_channel(const poet_exec_t *e, const poet_conv_t *cv, int32_t rest, int fwd)
{
    const long kk = (long)cv->kh * cv->kw, in_plane = (long)cv->H * cv->W;
    const long out_plane = (long)poet_conv2d_out(cv->H, cv->kh, cv->stride, cv->ph) *
                           poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    const long plane = fwd ? out_plane : in_plane;
    const float *b = fwd ? param(e, e->a[BIAS]) : 0;
    float *tmp = (float *)(void *)e->buf->stream;
    poet_grad_t gw, gb, gw_c, gb_c;
    const poet_grad_t *dw = fwd ? 0 : grad(e, e->a[WEIGHT], &gw), *db = fwd ? 0 : grad(e, e->a[BIAS], &gb);
    const int shared = rest >= 0 ? cv->ck : cv->C; /* the channels whose weights train */
    poet_conv_t one = *cv;
    int s, c;
    long i;
    one.B = one.C = one.O = one.groups = 1;
    one.ck = 0;
    for (s = 0; s < cv->B; s++)
        for (c = 0; c < cv->C; c++) {
            const long at = (long)s * cv->C + c;
            const float *w = channel_weights(e, rest, c, kk, tmp + plane);
            if (fwd) {
                poet_conv2d_ex_fwd(&one, e->in[0] + at * in_plane, w, b ? b + c : 0, tmp);
            } else {
                const float *g = e->in[0] + at * out_plane;
                poet_conv2d_gx_rows(&one, 0, 1, g, w, tmp);
                poet_conv2d_ex_bwd(&one, g, e->in[1] + at * in_plane, 0, c < shared ? from(dw, c * kk, &gw_c) : 0,
                                   from(db, c, &gb_c), 0);
            }
            for (i = 0; i < plane; i++)
                e->out[at * plane + i] = tmp[i];
        }
}

void op_conv2d_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_conv_t cv = conv_shape(a);
    if (marked(POET_OP_CONV2D, a)) {
        by_channel(e, &cv, rest_of(POET_OP_CONV2D, a), 1);
        return;
    }
    if (rest_of(POET_OP_CONV2D, a) >= 0 || poet_param_i8(e->m, (uint16_t)a[WEIGHT])) {
        blocks(e, &cv, rest_of(POET_OP_CONV2D, a), w8_fwd);
        return;
    }
    poet_conv2d_ex_fwd(&cv, e->in[0], param(e, a[WEIGHT]), param(e, a[BIAS]), e->out);
}

void op_conv2d_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_grad_t gw, gb;
    const int32_t rest = rest_of(POET_OP_CONV2D_BWD, a);
    poet_conv_t cv = conv_shape(a);
    cv.ck = ck_of(a);
    if (marked(POET_OP_CONV2D_BWD, a)) {
        by_channel(e, &cv, rest, 0);
        return;
    }
    if (rest >= 0) { /* the input gradient first: an update in backward changes the share */
        if (a[NEED_GX] & 1)
            blocks(e, &cv, rest, w8_gx);
        poet_conv2d_ex_bwd(&cv, e->in[0], e->in[1], 0, grad(e, a[WEIGHT], &gw), grad(e, a[BIAS], &gb), 0);
        return;
    }
    if (poet_param_i8(e->m, (uint16_t)a[WEIGHT])) { /* frozen (checked): the input gradient and the bias's */
        if (a[NEED_GX] & 1)
            blocks(e, &cv, -1, w8_gx);
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
