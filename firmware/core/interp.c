#include "interp.h"

#include "kernels.h"
#include "port.h"
#include "status.h"
#include "util.h"

static float *pparam(const poet_model_t *m, float *base, int32_t p)
{
    return p < 0 ? 0 : base + m->param_off[p];
}

/* A parameter's gradient, NULL for a frozen one: the kernels then skip that gradient. */
static float *pgrad(const poet_model_t *m, float *grads, int32_t p)
{
    return (p < 0 || m->grad_off[p] == POET_NO_GRAD) ? 0 : grads + m->grad_off[p];
}

static void optimize(const poet_model_t *m, const int32_t *a, const poet_buffers_t *buf, float lr)
{
    uint16_t p;
    uint32_t step = ++*buf->opt_step;
    for (p = 0; p < m->n_params; p++) {
        uint32_t g = m->grad_off[p], n = poet_param_elems(m, p);
        float *w = buf->params + m->param_off[p];
        if (g == POET_NO_GRAD)
            continue;
        if (m->opt == POET_OPT_ADAM)
            poet_adam(n, lr, poet_attr_f32(a[1]), poet_attr_f32(a[2]), poet_attr_f32(a[3]), step, w,
                      buf->grads + g, buf->opt_state + g, buf->opt_state + m->train_elems + g);
        else if (m->opt == POET_OPT_MOMENTUM)
            poet_sgd_momentum(n, lr, poet_attr_f32(a[1]), step, w, buf->grads + g, buf->opt_state + g);
        else
            poet_sgd(n, lr, w, buf->grads + g);
    }
}

/* Token ids are staged as fp32 (docs/spec.md section 4), and arange/zeros ids exist nowhere, so
 * each row's id is made here and the kernel is run one row at a time: no id buffer is needed. An
 * id outside [0, V) (including NaN) becomes -1, which the kernels turn into a zero row / no update. */
static void embedding_rows(const int32_t *a, const float *ids, const float *w, const float *g,
                           float *y, float *dw)
{
    int32_t r, id;
    for (r = 0; r < a[0]; r++) {
        if (a[3] == 1)
            id = r;
        else if (a[3] == 2)
            id = 0;
        else
            id = (ids[r] >= 0.0f && ids[r] < (float)a[1]) ? (int32_t)ids[r] : -1;
        if (y)
            poet_embedding_fwd(1, a[1], a[2], &id, w, y + (long)r * a[2]);
        else
            poet_embedding_bwd(1, a[1], a[2], &id, g + (long)r * a[2], dw);
    }
}

/* A cast (docs/spec.md section 2): src is dep 0 or the parameter a3; an int8 side's scale is the
 * last dep, the 4-byte output of an absmax node. Narrow tensors sit in the arena like fp32 ones
 * (4-byte aligned offsets), so the pointers are only reinterpreted. */
static void cast(const int32_t *a, const void *src, const float *scale, void *out)
{
    switch (a[1] * 4 + a[2]) {
    case POET_DT_F32 * 4 + POET_DT_F16:
        poet_cast_f32_f16(a[0], (const float *)src, (uint16_t *)out);
        break;
    case POET_DT_F16 * 4 + POET_DT_F32:
        poet_cast_f16_f32(a[0], (const uint16_t *)src, (float *)out);
        break;
    case POET_DT_F32 * 4 + POET_DT_BF16:
        poet_cast_f32_bf16(a[0], (const float *)src, (uint16_t *)out);
        break;
    case POET_DT_BF16 * 4 + POET_DT_F32:
        poet_cast_bf16_f32(a[0], (const uint16_t *)src, (float *)out);
        break;
    case POET_DT_F32 * 4 + POET_DT_I8:
        poet_quantize_i8(a[0], scale[0], (const float *)src, (int8_t *)out);
        break;
    case POET_DT_I8 * 4 + POET_DT_F32:
        poet_dequantize_i8(a[0], scale[0], (const int8_t *)src, (float *)out);
        break;
    default: /* model.c admits no other pair */
        break;
    }
}

/* Runs node n's kernel (n: the record as decoded from the blob). in[k] is dep k's tensor (NULL
 * for deps without arena output). Backward nodes read dL/dy as dep 0 and what the forward saved
 * as dep 1. */
static void run_node(const poet_model_t *m, const poet_node_t *n, const poet_buffers_t *buf,
                     float *const *in, float *out, float lr, float *loss, int recompute)
{
    const int32_t *a = n->a;
    float *P = buf->params, *G = buf->grads;

    switch (n->op) {
    case POET_OP_INPUT:
        poet_copy(a[0], buf->x, out);
        break;
    case POET_OP_LINEAR:
        poet_linear_fwd(a[0], a[1], a[2], in[0], pparam(m, P, a[3]), pparam(m, P, a[4]), out);
        break;
    case POET_OP_LINEAR_BWD:
        poet_linear_bwd(a[0], a[1], a[2], in[0], in[1], pparam(m, P, a[3]), pgrad(m, G, a[3]),
                        pgrad(m, G, a[4]), a[5] ? out : 0);
        break;
    case POET_OP_CONV2D:
        poet_conv2d_ex_fwd(a[0], a[1], a[2], a[3], a[4], a[5], POET_CONV_STRIDE(a[6]),
                           POET_CONV_PAD(a[6]), POET_CONV_GROUPS(a[6]), in[0], pparam(m, P, a[7]),
                           pparam(m, P, a[8]), out);
        break;
    case POET_OP_CONV2D_BWD:
        poet_conv2d_ex_bwd(a[0], a[1], a[2], a[3], a[4], a[5], POET_CONV_STRIDE(a[6]),
                           POET_CONV_PAD(a[6]), POET_CONV_GROUPS(a[6]), in[0], in[1],
                           pparam(m, P, a[7]), pgrad(m, G, a[7]), pgrad(m, G, a[8]),
                           a[9] ? out : 0);
        break;
    case POET_OP_RELU:
        poet_relu_fwd(a[0], in[0], out);
        break;
    case POET_OP_RELU_BWD:
        poet_relu_bwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_TANH:
        poet_tanh_fwd(a[0], in[0], out);
        break;
    case POET_OP_TANH_BWD:
        poet_tanh_bwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_SIGMOID:
        poet_sigmoid_fwd(a[0], in[0], out);
        break;
    case POET_OP_SIGMOID_BWD:
        poet_sigmoid_bwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_GELU:
        poet_gelu_fwd(a[0], a[1], in[0], out);
        break;
    case POET_OP_GELU_BWD:
        poet_gelu_bwd(a[0], a[1], in[0], in[1], out);
        break;
    case POET_OP_HARDTANH:
        poet_hardtanh_fwd(a[0], poet_attr_f32(a[1]), poet_attr_f32(a[2]), in[0], out);
        break;
    case POET_OP_HARDTANH_BWD:
        poet_hardtanh_bwd(a[0], poet_attr_f32(a[1]), poet_attr_f32(a[2]), in[0], in[1], out);
        break;
    case POET_OP_MAXPOOL2D:
        poet_maxpool2d_fwd(a[0], a[1], a[2], a[3], in[0], out);
        break;
    case POET_OP_MAXPOOL2D_BWD:
        poet_maxpool2d_bwd(a[0], a[1], a[2], a[3], in[0], in[1], out);
        break;
    case POET_OP_FLATTEN:
    case POET_OP_FLATTEN_BWD:
    case POET_OP_RESHAPE:
    case POET_OP_RESHAPE_BWD:
        poet_copy(a[0], in[0], out);
        break;
    case POET_OP_BATCHNORM:
        /* The graph keeps no batch statistics (docs/graph.md): the backward recomputes them from
         * x. The running statistics move once per step, as in PyTorch: not again on a recompute. */
        poet_batchnorm2d_fwd_train(a[0], a[1], a[2], poet_attr_f32(a[3]), poet_attr_f32(a[4]), in[0],
                                   pparam(m, P, a[5]), pparam(m, P, a[6]), out, 0, 0,
                                   recompute ? 0 : pparam(m, P, a[7]), recompute ? 0 : pparam(m, P, a[8]));
        break;
    case POET_OP_BATCHNORM_BWD:
        poet_batchnorm2d_bwd_train(a[0], a[1], a[2], poet_attr_f32(a[3]), in[0], in[1],
                                   pparam(m, P, a[5]), 0, 0, pgrad(m, G, a[5]), pgrad(m, G, a[6]),
                                   a[9] ? out : 0);
        break;
    case POET_OP_BATCHNORM_EVAL:
        poet_batchnorm2d_fwd_eval(a[0], a[1], a[2], poet_attr_f32(a[3]), in[0], pparam(m, P, a[5]),
                                  pparam(m, P, a[6]), pparam(m, P, a[7]), pparam(m, P, a[8]), out);
        break;
    case POET_OP_BATCHNORM_EVAL_BWD:
        poet_batchnorm2d_bwd_eval(a[0], a[1], a[2], poet_attr_f32(a[3]), in[0], in[1], pparam(m, P, a[5]),
                                  pparam(m, P, a[7]), pparam(m, P, a[8]), pgrad(m, G, a[5]),
                                  pgrad(m, G, a[6]), a[9] ? out : 0);
        break;
    case POET_OP_LAYERNORM:
        poet_layernorm_fwd(a[0], a[1], poet_attr_f32(a[2]), in[0], pparam(m, P, a[3]),
                           pparam(m, P, a[4]), out, 0, 0);
        break;
    case POET_OP_LAYERNORM_BWD:
        poet_layernorm_bwd(a[0], a[1], poet_attr_f32(a[2]), in[0], in[1], pparam(m, P, a[3]), 0, 0,
                           pgrad(m, G, a[3]), pgrad(m, G, a[4]), a[5] ? out : 0);
        break;
    case POET_OP_MEAN:
        poet_mean_fwd(a[0], a[1], a[2], in[0], out);
        break;
    case POET_OP_MEAN_BWD:
        poet_mean_bwd(a[0], a[1], a[2], in[0], out);
        break;
    case POET_OP_PERMUTE:
    case POET_OP_PERMUTE_BWD: {
        int d[4], q[4], k;
        for (k = 0; k < 4; k++) {
            d[k] = a[k];
            q[k] = a[4 + k];
        }
        if (n->op == POET_OP_PERMUTE)
            poet_permute4_fwd(d, q, in[0], out);
        else
            poet_permute4_bwd(d, q, in[0], out);
        break;
    }
    case POET_OP_ADD:
        if (a[0] == a[1])
            poet_add_fwd(a[0], in[0], in[1], out);
        else
            poet_add_bcast_fwd(a[0] / a[1], a[1], 1, in[0], in[1], out);
        break;
    case POET_OP_SUB:
        if (a[0] == a[1])
            poet_sub_fwd(a[0], in[0], in[1], out);
        else
            poet_sub_bcast_fwd(a[0] / a[1], a[1], 1, in[0], in[1], out);
        break;
    case POET_OP_ADD_BWD:
        poet_add_bcast_bwd(a[0] / a[1], a[1], 1, in[0], 0, out);
        break;
    case POET_OP_SUB_BWD:
        poet_sub_bcast_bwd(a[0] / a[1], a[1], 1, in[0], 0, out);
        break;
    case POET_OP_MUL:
        poet_mul_fwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_MUL_BWD_A:
    case POET_OP_MUL_BWD_B:
        poet_mul_bwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_SCALE:
        poet_scale_fwd(a[0], poet_attr_f32(a[1]), poet_attr_f32(a[2]), in[0], out);
        break;
    case POET_OP_SCALE_BWD:
        poet_scale_bwd(a[0], poet_attr_f32(a[1]), in[0], out);
        break;
    case POET_OP_MATMUL:
        poet_matmul_fwd(a[0], a[1], a[2], a[3], in[0], in[1], out);
        break;
    case POET_OP_MATMUL_BWD_A:
        poet_matmul_bwd_a(a[0], a[1], a[2], a[3], in[0], in[1], out);
        break;
    case POET_OP_MATMUL_BWD_B:
        poet_matmul_bwd_b(a[0], a[1], a[2], a[3], in[0], in[1], out);
        break;
    case POET_OP_SOFTMAX:
        poet_softmax_fwd(a[0], a[1], in[0], out);
        break;
    case POET_OP_SOFTMAX_BWD:
        poet_softmax_bwd(a[0], a[1], in[0], in[1], out);
        break;
    case POET_OP_EMBEDDING:
        embedding_rows(a, in[0], pparam(m, P, a[4]), 0, out, 0);
        break;
    case POET_OP_EMBEDDING_BWD:
        if (pgrad(m, G, a[4])) /* a frozen table has nothing to accumulate */
            embedding_rows(a, in[1], 0, in[0], 0, pgrad(m, G, a[4]));
        break;
    case POET_OP_SELECT:
        poet_select_fwd(a[0], a[1], a[2], a[3], in[0], out);
        break;
    case POET_OP_SELECT_BWD:
        poet_select_bwd(a[0], a[1], a[2], a[3], in[0], out);
        break;
    case POET_OP_CAST:
        cast(a, a[3] >= 0 ? pparam(m, P, a[3]) : in[0], n->n_deps ? in[n->n_deps - 1] : 0, out);
        break;
    case POET_OP_ABSMAX:
        out[0] = poet_absmax_scale(a[0], a[1] >= 0 ? pparam(m, P, a[1]) : in[0]);
        break;
    case POET_OP_LINEAR_I8:
        poet_linear_i8_fwd(a[0], a[1], a[2], (const int8_t *)(const void *)in[0], in[1][0],
                           (const int8_t *)(const void *)in[2], in[3][0], pparam(m, P, a[4]), out);
        break;
    case POET_OP_CONV2D_I8:
        poet_conv2d_i8_fwd(a[0], a[1], a[2], a[3], a[4], a[5], POET_CONV_STRIDE(a[6]),
                           POET_CONV_PAD(a[6]), POET_CONV_GROUPS(a[6]),
                           (const int8_t *)(const void *)in[0], in[1][0],
                           (const int8_t *)(const void *)in[2], in[3][0], pparam(m, P, a[8]), out);
        break;
    case POET_OP_CROSS_ENTROPY:
        out[0] = poet_cross_entropy_fwd(a[0], a[1], in[0], buf->labels);
        *loss = out[0];
        break;
    case POET_OP_CROSS_ENTROPY_BWD:
        poet_cross_entropy_bwd(a[0], a[1], in[0], buf->labels, out);
        break;
    case POET_OP_SGD:
        optimize(m, a, buf, lr);
        break;
    default:
        break;
    }
}

/* POET_TRACE 0 builds a runtime that records nothing: the baseline the overhead benchmark measures
 * the cost of tracing against (qemu-m4-notrace). */
#ifndef POET_TRACE
#define POET_TRACE 1
#endif

#if POET_TRACE
static uint8_t trace_kind(uint8_t node_kind, uint8_t op)
{
    switch (op) {
    case POET_I_RECOMPUTE: return POET_TRACE_RECOMPUTE;
    case POET_I_PAGE_IN: return POET_TRACE_PAGE_IN;
    case POET_I_PAGE_OUT: return POET_TRACE_PAGE_OUT;
    case POET_I_FREE: return POET_TRACE_FREE;
    default:
        if (node_kind == POET_KIND_BACKWARD)
            return POET_TRACE_BACKWARD;
        if (node_kind == POET_KIND_OPTIMIZER)
            return POET_TRACE_OPTIMIZER;
        return POET_TRACE_FORWARD;
    }
}
#endif

void poet_interp_step(const poet_model_t *m, const uint8_t *schedule, const poet_buffers_t *buf,
                      float lr, poet_trace_t *trace, poet_step_result_t *res)
{
    /* The interpreter's only per-node state: where each resident tensor sits in the arena. */
    static uint32_t offset[POET_MAX_NODES];
    uint16_t n_instr = poet_sched_n_instr(schedule), i, j;
    uint32_t live = 0, t_step;
    float *in[4];
#if POET_TRACE
    uint32_t t0;
#else
    (void)trace;
#endif

    res->status = POET_OK;
    res->loss = 0.0f;
    res->peak_live_bytes = 0;
    res->peak_extent_bytes = 0;
    res->n_records = 0;

    t_step = port_ticks();
    for (i = 0; i < n_instr; i++) {
        const uint8_t *p = schedule + POET_SCHED_HDR + 8u * i;
        uint8_t op = p[0];
        uint16_t node = poet_rd16(p + 2);
        uint32_t off = poet_rd32(p + 4);
        uint32_t bytes = poet_node_bytes(m, node);
        uint8_t *t = buf->arena + off;
        int err = 0;

#if POET_TRACE
        /* high from just before t0 to just after the record's end, so each pulse spans its ticks */
        port_mark(1);
        t0 = port_ticks();
#endif
        if ((op == POET_I_COMPUTE || op == POET_I_RECOMPUTE || op == POET_I_PAGE_IN) && bytes) {
            offset[node] = off;
            live += bytes;
            if (live > res->peak_live_bytes)
                res->peak_live_bytes = live;
            if (off + bytes > res->peak_extent_bytes)
                res->peak_extent_bytes = off + bytes;
        }
        switch (op) {
        case POET_I_COMPUTE:
        case POET_I_RECOMPUTE: {
            /* decoded on the stack for this instruction only; no node table is kept */
            poet_node_t n;
            poet_node_view(m, node, &n);
            for (j = 0; j < 4; j++)
                in[j] = (j < n.n_deps && poet_node_bytes(m, n.deps[j]))
                            ? (float *)(void *)(buf->arena + offset[n.deps[j]])
                            : 0;
            run_node(m, &n, buf, in, (float *)(void *)t, lr, &res->loss, op == POET_I_RECOMPUTE);
            break;
        }
        case POET_I_PAGE_IN:
            err = port_pager_read(m->swap_off[node], t, bytes);
            break;
        case POET_I_PAGE_OUT:
            t = buf->arena + offset[node];
            err = port_pager_write(m->swap_off[node], t, bytes);
            break;
        case POET_I_FREE:
            live -= bytes;
            break;
        default:
            break;
        }
#if POET_TRACE
        {
            poet_trace_t *r = &trace[i];
            r->ticks = port_ticks() - t0;
            port_mark(0); /* before the error check below, so a failed step leaves the pin low too */
            r->instr = i;
            r->node = node;
            r->kind = trace_kind(poet_node_kind(m, node), op);
            r->op = poet_node_op(m, node);
            r->bytes = bytes;
            res->n_records = (uint16_t)(i + 1u);
        }
#endif
        if (err) {
            res->status = POET_E_PAGER;
            break;
        }
    }
    res->step_ticks = port_ticks() - t_step;
}
