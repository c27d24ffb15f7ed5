#include "interp.h"

#include "kernels.h"
#include "port.h"
#include "status.h"
#include "util.h"

static float *pparam(const poet_model_t *m, float *base, int32_t p)
{
    return p < 0 ? 0 : base + m->param_off[p];
}

/* Runs node i's kernel. in[k] is dep k's tensor (NULL for deps without arena output). */
static void run_node(const poet_model_t *m, uint16_t i, const poet_buffers_t *buf, float *const *in,
                     float *out, float lr, float *loss)
{
    const poet_node_t *n = &m->nodes[i];
    const int32_t *a = n->a;
    uint16_t p;

    switch (n->op) {
    case POET_OP_INPUT:
        poet_copy(a[0], buf->x, out);
        break;
    case POET_OP_LINEAR:
        poet_linear_fwd(a[0], a[1], a[2], in[0], pparam(m, buf->params, a[3]),
                        pparam(m, buf->params, a[4]), out);
        break;
    case POET_OP_LINEAR_BWD:
        poet_linear_bwd(a[0], a[1], a[2], in[0], in[1], pparam(m, buf->params, a[3]),
                        pparam(m, buf->grads, a[3]), pparam(m, buf->grads, a[4]), a[5] ? out : 0);
        break;
    case POET_OP_CONV2D:
        poet_conv2d_fwd(a[0], a[1], a[2], a[3], a[4], a[5], a[6], in[0],
                        pparam(m, buf->params, a[7]), pparam(m, buf->params, a[8]), out);
        break;
    case POET_OP_CONV2D_BWD:
        poet_conv2d_bwd(a[0], a[1], a[2], a[3], a[4], a[5], a[6], in[0], in[1],
                        pparam(m, buf->params, a[7]), pparam(m, buf->grads, a[7]),
                        pparam(m, buf->grads, a[8]), a[9] ? out : 0);
        break;
    case POET_OP_RELU:
        poet_relu_fwd(a[0], in[0], out);
        break;
    case POET_OP_RELU_BWD:
        poet_relu_bwd(a[0], in[0], in[1], out);
        break;
    case POET_OP_MAXPOOL2D:
        poet_maxpool2d_fwd(a[0], a[1], a[2], a[3], in[0], out);
        break;
    case POET_OP_MAXPOOL2D_BWD:
        poet_maxpool2d_bwd(a[0], a[1], a[2], a[3], in[0], in[1], out);
        break;
    case POET_OP_FLATTEN:
    case POET_OP_FLATTEN_BWD:
        poet_copy(a[0], in[0], out);
        break;
    case POET_OP_CROSS_ENTROPY:
        out[0] = poet_cross_entropy_fwd(a[0], a[1], in[0], buf->labels);
        *loss = out[0];
        break;
    case POET_OP_CROSS_ENTROPY_BWD:
        poet_cross_entropy_bwd(a[0], a[1], in[0], buf->labels, out);
        break;
    case POET_OP_SGD:
        for (p = 0; p < m->n_params; p++)
            poet_sgd(m->param_elems[p], lr, buf->params + m->param_off[p],
                     buf->grads + m->param_off[p]);
        break;
    default:
        break;
    }
}

static uint8_t trace_kind(const poet_node_t *n, uint8_t op)
{
    switch (op) {
    case POET_I_RECOMPUTE: return POET_TRACE_RECOMPUTE;
    case POET_I_PAGE_IN: return POET_TRACE_PAGE_IN;
    case POET_I_PAGE_OUT: return POET_TRACE_PAGE_OUT;
    case POET_I_FREE: return POET_TRACE_FREE;
    default:
        if (n->kind == POET_KIND_BACKWARD)
            return POET_TRACE_BACKWARD;
        if (n->kind == POET_KIND_OPTIMIZER)
            return POET_TRACE_OPTIMIZER;
        return POET_TRACE_FORWARD;
    }
}

void poet_interp_step(const poet_model_t *m, const uint8_t *schedule, const poet_buffers_t *buf,
                      float lr, poet_trace_t *trace, poet_step_result_t *res)
{
    static uint32_t offset[POET_MAX_NODES];
    uint16_t n_instr = poet_sched_n_instr(schedule), i, j;
    uint32_t live = 0, t_step, t0;
    float *in[4];

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
        const poet_node_t *n = &m->nodes[node];
        uint8_t *t = buf->arena + off;
        poet_trace_t *r = &trace[i];
        int err = 0;

        t0 = port_ticks();
        if ((op == POET_I_COMPUTE || op == POET_I_RECOMPUTE || op == POET_I_PAGE_IN) && n->bytes) {
            offset[node] = off;
            live += n->bytes;
            if (live > res->peak_live_bytes)
                res->peak_live_bytes = live;
            if (off + n->bytes > res->peak_extent_bytes)
                res->peak_extent_bytes = off + n->bytes;
        }
        switch (op) {
        case POET_I_COMPUTE:
        case POET_I_RECOMPUTE:
            for (j = 0; j < 4; j++)
                in[j] = (j < n->n_deps && m->nodes[n->deps[j]].bytes)
                            ? (float *)(void *)(buf->arena + offset[n->deps[j]])
                            : 0;
            run_node(m, node, buf, in, (float *)(void *)t, lr, &res->loss);
            break;
        case POET_I_PAGE_IN:
            err = port_pager_read(m->swap_off[node], t, n->bytes);
            break;
        case POET_I_PAGE_OUT:
            t = buf->arena + offset[node];
            err = port_pager_write(m->swap_off[node], t, n->bytes);
            break;
        case POET_I_FREE:
            live -= n->bytes;
            break;
        default:
            break;
        }
        r->ticks = port_ticks() - t0;
        r->instr = i;
        r->node = node;
        r->kind = trace_kind(n, op);
        r->op = n->op;
        r->bytes = n->bytes;
        res->n_records = (uint16_t)(i + 1u);
        if (err) {
            res->status = POET_E_PAGER;
            break;
        }
    }
    res->step_ticks = port_ticks() - t_step;
}
