/* Static int8: a frozen prefix run in int8 from end to end (kernels/lowp.c). Every int8 tensor's
 * scale was fixed on the host (calibrated once) and is a one-element frozen fp32 parameter; the node
 * that makes the tensor names it, and its readers find it there. A layer's epilogue attribute packs
 * its output's scale parameter (bits 0-15; POET_Q_FP32: the output is fp32, the prefix ends) and a
 * ReLU (bit 16), so activations never exist in fp32 inside the prefix. */
#include "op_util.h"

#include "../port.h"
#include "../status.h"

/* ---- quantize, dequantize -------------------------------------------------------------------- */

/* N elements; SCALE the output's (quantize) scale parameter. */
enum { N = 0, SCALE = 1 };

int op_quantize_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && q_scale_ok(m, a[SCALE]) && io1(m, n, f32s((uint64_t)a[N]), (uint64_t)a[N]);
}

void op_quantize_run(const poet_exec_t *e)
{
    poet_quantize_i8(e->a[N], param(e, e->a[SCALE])[0], e->in[0], (int8_t *)(void *)e->out);
}

int op_dequantize_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && io1(m, n, (uint64_t)a[N], f32s((uint64_t)a[N])) && q_dep_ok(m, n, 0);
}

void op_dequantize_run(const poet_exec_t *e)
{
    poet_dequantize_i8(e->a[N], q_in_scale(e, 0), (const int8_t *)(const void *)e->in[0], e->out);
}

/* ---- conv2d_q: conv2d's attributes, its weight a frozen int8 parameter, EPI in a9 ------------- */

enum { B = 0, C = 1, H = 2, W = 3, O = 4, K = 5, GEOM = 6, WEIGHT = 7, BIAS = 8, EPI = 9 };

/* Where an in-place depthwise conv's weight rows read from aux storage go in the stream buffer: after the
 * channel plane it makes there, at a word. */
static uint32_t in_place_at(uint32_t plane) { return (plane + 3u) & ~3u; }

/* A weight on aux storage is streamed one output channel's weights (a row) or more at a time, so the
 * pool's stream buffer (model.h stream_bytes) is the largest row of any such conv. */
int op_conv2d_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    const int32_t epi = (int32_t)((uint32_t)a[EPI] & ~POET_Q_IN_PLACE);
    uint64_t x, y, w, reduce;
    if (!conv_geometry_ok(a, &x, &y, &reduce) || !q_epi_ok(m, epi))
        return 0;
    w = mul((uint64_t)a[O], reduce);
    if (!(reduce <= POET_I8_MAX_REDUCE && q_weight_ok(m, a[WEIGHT], w) && q_bias_ok(m, a[BIAS], (uint64_t)a[O]) &&
          n->n_deps == 1 && dep_bytes(m, n, 0) == x && q_dep_ok(m, n, 0) && n->bytes == q_out_bytes(epi, y)))
        return 0;
    if ((uint32_t)a[EPI] & POET_Q_IN_PLACE) /* in place: depthwise, a channel no larger; a plane in the buffer, */
        return a[C] == a[O] && POET_CONV_GROUPS(a[GEOM]) == a[C] && n->bytes <= x && /* and a weight read's row */
               streams(m, in_place_at(n->bytes / (uint32_t)(a[B] * a[O])) +
                              (poet_param_aux(m, (uint16_t)a[WEIGHT]) ? (uint32_t)reduce : 0u));
    /* reduce is C/groups kh kw, below POET_I8_MAX_REDUCE: a row fits 32 bits */
    return !poet_param_aux(m, (uint16_t)a[WEIGHT]) || streams(m, (uint32_t)reduce);
}

/* Output channels first..end-1 from their weights wq: the whole layer in flash, or one read of a weight on
 * aux storage (POET_PARAM_AUX), whose outputs are then the in-flash layer's, bit for bit. */
static void conv2d_q_rows(const poet_exec_t *e, int32_t first, int32_t end, const int8_t *wq, float ws)
{
    const int32_t *a = e->a;
    poet_conv_t cv = conv_shape(a);
    poet_conv2d_q_fwd_rows(&cv, first, end, (const int8_t *)(const void *)e->in[0], q_in_scale(e, 0), wq, ws, param(e, a[BIAS]), Q_RELU(a[EPI]),
                           q_out_scale(e, a[EPI]), e->out);
}

/* A depthwise conv marked to run in place (a9 bit 19): each channel of each sample made in the stream buffer from its
 * own input channel, then copied to its place in the output. Made over its input (the schedule's IN_PLACE: the
 * output's offset is the input's), that place lies over input channels already read (an output channel is no
 * larger than an input one: checked). It runs so in place or not, so that a plan's time does not hang on which
 * (the profile measures the one cost). A weight on aux storage is read as many channels' rows at a time as the
 * buffer holds after the plane. */
static void conv2d_q_by_channel(const poet_exec_t *e, const poet_conv_t *cv)
{
    const int32_t *a = e->a;
    const long kk = (long)cv->kh * cv->kw, in_plane = (long)cv->H * cv->W;
    const uint32_t plane = (uint32_t)poet_conv2d_rows(cv) * (uint32_t)poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw) *
                           (q_epi_scale(a[EPI]) < 0 ? 4u : 1u);
    const float *b = param(e, a[BIAS]), xs = q_in_scale(e, 0), *ys = q_out_scale(e, a[EPI]);
    const int aux = poet_param_aux(e->m, (uint16_t)a[WEIGHT]);
    const uint32_t rows_at = e->m->aux_at + 4u * e->m->param_off[a[WEIGHT]] + 4u;
    float ws;
    int8_t *rows = (int8_t *)(void *)(e->buf->stream + in_place_at(plane));
    const int8_t *wq = aux ? rows : i8_weight(e, a[WEIGHT], &ws);
    const int8_t *x = (const int8_t *)(const void *)e->in[0];
    const int per = aux ? (int)((e->m->stream_bytes - in_place_at(plane)) / (uint32_t)kk) : cv->C;
    uint8_t *y = (uint8_t *)(void *)e->out, *tmp = e->buf->stream;
    poet_conv_t one = *cv;
    int s, c, first = 0, end = aux ? 0 : cv->C; /* the channels whose weights wq holds (from first) */
    uint32_t i;
    one.B = one.C = one.O = one.groups = 1;
    if (aux && port_pager_read(rows_at - 4u, &ws, 4u) != 0) { /* on aux storage: the scale, then rows a read */
        *e->err = POET_E_PAGER;
        return;
    }
    for (s = 0; s < cv->B; s++)
        for (c = 0; c < cv->C; c++) {
            const long at = (long)s * cv->C + c;
            if (c >= end || c < first) {
                first = c;
                end = cv->C - c < per ? cv->C : c + per;
                if (port_pager_read(rows_at + (uint32_t)(c * kk), rows, (uint32_t)((end - c) * kk)) != 0) {
                    *e->err = POET_E_PAGER;
                    return;
                }
            }
            poet_conv2d_q_fwd_rows(&one, 0, 1, x + at * in_plane, xs, wq + (c - first) * kk, ws, b ? b + c : 0,
                                   Q_RELU(a[EPI]), ys, tmp);
            for (i = 0; i < plane; i++)
                y[(uint32_t)at * plane + i] = tmp[i];
        }
}

void op_conv2d_q_run(const poet_exec_t *e)
{
    poet_conv_t cv = conv_shape(e->a);
    if ((uint32_t)e->a[EPI] & POET_Q_IN_PLACE) {
        conv2d_q_by_channel(e, &cv);
        return;
    }
    int8_rows(e, e->a[WEIGHT], (uint32_t)(cv.C / cv.groups * cv.kh * cv.kw), cv.O, conv2d_q_rows);
}

/* ---- maxpool2d_q: a0..a7 as maxpool2d_general, a8 the scale parameter, its input's -------------- */

enum { MB = 0, MC = 1, MH = 2, MW = 3, MKH = 4, MKW = 5, MGEOM = 6, MCEIL = 7, MSCALE = 8 };

int op_maxpool2d_q_check(poet_model_t *m, const poet_node_t *n)
{
    uint64_t x, y;
    return pool_window_ok(n->a, n->a[MCEIL], &x, &y) && n->n_deps == 1 && q_dep_ok(m, n, 0) &&
           q_scale_of(m, n->deps[0]) == n->a[MSCALE] && dep_bytes(m, n, 0) == x && n->bytes == y;
}

void op_maxpool2d_q_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    int g = a[MGEOM];
    poet_maxpool2d_q_fwd(a[MB], a[MC], a[MH], a[MW], a[MKH], a[MKW], POET_POOL_STRIDE_H(g), POET_POOL_STRIDE_W(g),
                         POET_POOL_PAD_H(g), POET_POOL_PAD_W(g), a[MCEIL], (const int8_t *)(const void *)e->in[0],
                         (int8_t *)(void *)e->out);
}

/* ---- slice_q, cat_q: int8 rows at their input's scale (a stage run in row strips) ------------------ */

/* slice_q: a0..a3 as slice's (x[OUTER, TOTAL]'s columns OFFSET..OFFSET+LEN-1), a4 the scale parameter, its
 * input's. cat_q: a0 OUTER, a1..a4 each dep's row length (0 past n_deps) as cat's, a5 the scale, every input's. */
enum { S_OUTER = 0, S_TOTAL = 1, S_OFFSET = 2, S_LEN = 3, S_SCALE = 4, CAT_SCALE = 5 };

int op_slice_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (!pos(a[S_OUTER]) || !pos(a[S_TOTAL]) || !pos(a[S_LEN]) || a[S_OFFSET] < 0 ||
        a[S_OFFSET] > a[S_TOTAL] - a[S_LEN] || n->n_deps != 1 || !q_dep_ok(m, n, 0) ||
        q_scale_of(m, n->deps[0]) != a[S_SCALE])
        return 0;
    return dep_bytes(m, n, 0) == mul((uint64_t)a[S_OUTER], (uint64_t)a[S_TOTAL]) &&
           n->bytes == mul((uint64_t)a[S_OUTER], (uint64_t)a[S_LEN]);
}

void op_slice_q_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_slice_i8(a[S_OUTER], a[S_TOTAL], a[S_OFFSET], a[S_LEN], (const int8_t *)(const void *)e->in[0],
                  (int8_t *)(void *)e->out);
}

int op_cat_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t sum = 0;
    int k;
    if (!pos(a[S_OUTER]) || n->n_deps < 2 || !q_scale_ok(m, a[CAT_SCALE]))
        return 0;
    for (k = 0; k < 4; k++) {
        if (k < n->n_deps ? !pos(a[1 + k]) || !q_dep_ok(m, n, k) || q_scale_of(m, n->deps[k]) != a[CAT_SCALE] ||
                                dep_bytes(m, n, k) != mul((uint64_t)a[S_OUTER], (uint64_t)a[1 + k])
                          : a[1 + k] != 0)
            return 0;
        sum += (uint64_t)a[1 + k];
    }
    return sum <= 0x7FFFFFFFu && n->bytes == mul((uint64_t)a[S_OUTER], sum);
}

void op_cat_q_run(const poet_exec_t *e)
{
    int len[4], k;
    const int8_t *x[4];
    for (k = 0; k < e->n_deps; k++) {
        len[k] = e->a[1 + k];
        x[k] = (const int8_t *)(const void *)e->in[k];
    }
    poet_cat_i8(e->a[S_OUTER], e->n_deps, len, x, (int8_t *)(void *)e->out);
}

/* ---- mean_q: x[outer, r, inner] int8 -> y[outer, inner], a3 the epilogue ------------------------- */

enum { Q_OUTER = 0, Q_R = 1, Q_INNER = 2, MEAN_EPI = 3 };

int op_mean_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t y;
    if (!pos(a[Q_OUTER]) || !pos(a[Q_R]) || !pos(a[Q_INNER]) || a[Q_R] > 0x10000 || !q_epi_ok(m, a[MEAN_EPI]) ||
        n->n_deps != 1 || !q_dep_ok(m, n, 0))
        return 0;
    y = mul((uint64_t)a[Q_OUTER], (uint64_t)a[Q_INNER]);
    return dep_bytes(m, n, 0) == mul(y, (uint64_t)a[Q_R]) && n->bytes == q_out_bytes(a[MEAN_EPI], y);
}

void op_mean_q_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_mean_q_fwd(a[Q_OUTER], a[Q_R], a[Q_INNER], (const int8_t *)(const void *)e->in[0], q_in_scale(e, 0),
                    Q_RELU(a[MEAN_EPI]), q_out_scale(e, a[MEAN_EPI]), e->out);
}

/* ---- mul_q: a0 n, a1 m, a2 inner (0: m) as mul's, a3 the epilogue ----------------------------------- */

enum { MQ_N = 0, MQ_M = 1, MQ_INNER = 2, MQ_EPI = 3 };

int op_mul_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    int32_t inner = a[MQ_INNER] ? a[MQ_INNER] : a[MQ_M];
    return pos(a[MQ_N]) && pos(a[MQ_M]) && a[MQ_INNER] >= 0 && a[MQ_N] % a[MQ_M] == 0 && a[MQ_M] % inner == 0 &&
           q_epi_ok(m, a[MQ_EPI]) && n->n_deps == 2 && dep_bytes(m, n, 0) == (uint64_t)a[MQ_N] &&
           dep_bytes(m, n, 1) == (uint64_t)a[MQ_M] && q_dep_ok(m, n, 0) && q_dep_ok(m, n, 1) &&
           n->bytes == q_out_bytes(a[MQ_EPI], (uint64_t)a[MQ_N]);
}

void op_mul_q_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    int inner = a[MQ_INNER] ? a[MQ_INNER] : a[MQ_M];
    poet_mul_q_fwd(a[MQ_M] / inner, a[MQ_N] / a[MQ_M], inner, (const int8_t *)(const void *)e->in[0],
                   q_in_scale(e, 0), (const int8_t *)(const void *)e->in[1], q_in_scale(e, 1), Q_RELU(a[MQ_EPI]),
                   q_out_scale(e, a[MQ_EPI]), e->out);
}

/* ---- add_q: two int8 tensors of N elements, EPI in a1 ------------------------------------------ */

enum { ADD_EPI = 1 };

int op_add_q_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[N]) && q_epi_ok(m, a[ADD_EPI]) && n->n_deps == 2 && dep_bytes(m, n, 0) == (uint64_t)a[N] &&
           dep_bytes(m, n, 1) == (uint64_t)a[N] && q_dep_ok(m, n, 0) && q_dep_ok(m, n, 1) &&
           n->bytes == q_out_bytes(a[ADD_EPI], (uint64_t)a[N]);
}

void op_add_q_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_add_q_fwd(a[N], (const int8_t *)(const void *)e->in[0], q_in_scale(e, 0),
                   (const int8_t *)(const void *)e->in[1], q_in_scale(e, 1), Q_RELU(a[ADD_EPI]),
                   q_out_scale(e, a[ADD_EPI]), e->out);
}
