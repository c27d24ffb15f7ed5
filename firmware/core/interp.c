#include "interp.h"

#include "ops/ops.h"
#include "port.h"
#include "status.h"
#include "util.h"

/* POET_TRACE 0 builds a runtime that records nothing: the baseline the overhead benchmark measures
 * the cost of tracing against (qemu-m4-notrace). */
#ifndef POET_TRACE
#define POET_TRACE 1
#endif

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

void poet_trace_record(const poet_model_t *m, const uint8_t *schedule, uint16_t i, uint32_t ticks,
                       poet_trace_t *r)
{
    const uint8_t *p = schedule + POET_SCHED_HDR + 8u * i;
    uint16_t node = poet_rd16(p + 2);
    r->instr = i;
    r->node = node;
    r->kind = trace_kind(poet_node_kind(m, node), p[0]);
    r->op = poet_node_op(m, node);
    r->ticks = ticks;
    r->bytes = poet_node_bytes(m, node);
}

/* Where dep d's tensor is: an input's is the staged batch, read in place (docs/spec.md section 1);
 * any other's is in the arena where the schedule put it, or nowhere (NULL) when it has no output. */
static float *dep_tensor(const poet_model_t *m, const poet_buffers_t *buf, const uint32_t *offset, uint16_t d)
{
    if (poet_node_kind(m, d) == POET_KIND_INPUT)
        return (float *)(uintptr_t)buf->x; /* the ops take in[] non-const; none writes a dep */
    return poet_node_bytes(m, d) ? (float *)(void *)(buf->arena + offset[d]) : 0;
}

/* STAGE: each sample's features from the aux offset its row holds, into the row (docs/spec.md 6). */
static int stage_features(poet_cache_t *c)
{
    uint16_t r;
    for (r = 0; r < c->stage_n; r++) {
        uint8_t *row = c->stage + (uint32_t)r * c->stage_row;
        if (port_pager_read(poet_rd32(row), row, c->stage_row) != 0)
            return POET_E_PAGER;
    }
    return POET_OK;
}

void poet_interp_step(const poet_model_t *m, const uint8_t *schedule, const poet_buffers_t *buf,
                      float lr, uint32_t *ticks, poet_step_result_t *res)
{
    /* The interpreter's only per-node state: where each resident tensor sits in the arena. */
    uint32_t *offset = m->arena_off;
    uint16_t n_instr = poet_sched_n_instr(schedule), i, j;
    uint32_t live = 0, t_step;
    int err = 0;
    poet_node_t n; /* decoded for one instruction at a time; no node table is kept */
    poet_exec_t x;
    poet_update_t upd;
#if POET_TRACE
    uint32_t t0;
#else
    (void)ticks;
#endif

    res->status = POET_OK;
    res->loss = 0.0f;
    res->peak_live_bytes = 0;
    res->peak_extent_bytes = 0;
    res->n_records = 0;
    x.m = m;
    x.buf = buf;
    x.a = n.a;
    x.loss = &res->loss;
    x.err = &err;
    x.eval = (uint8_t)poet_sched_forward(schedule);
    /* the step this one will be once the optimizer node counts it: the backward nodes that update in
     * backward apply the same rule before it runs */
    poet_update_init(&upd, m->opt, lr, m->opt_p[0], m->opt_p[1], m->opt_p[2], *buf->opt_step + 1u);
    x.upd = &upd;

    t_step = port_ticks();
    if (buf->cache) {
        buf->cache->read_done = buf->cache->read_ok = buf->cache->write_done = 0;
        if (buf->cache->stage_n) {
#if POET_TRACE
            port_mark(1);
            t0 = port_ticks();
#endif
            err = stage_features(buf->cache);
            buf->cache->read_done = 1;
            buf->cache->read_ok = err == POET_OK;
#if POET_TRACE
            buf->cache->read_ticks = port_ticks() - t0;
            port_mark(0);
            res->n_records = 1;
#endif
            if (err) {
                res->status = err;
                res->step_ticks = port_ticks() - t_step;
                return;
            }
        }
    }
    for (i = 0; i < n_instr; i++) {
        err = 0;
        const uint8_t *p = schedule + POET_SCHED_HDR + 8u * i;
        uint8_t op = p[0];
        uint16_t node = poet_rd16(p + 2);
        uint32_t off = poet_rd32(p + 4);
        uint32_t bytes = poet_arena_bytes(m, node); /* none for the input: the staged batch */
        uint8_t *t = buf->arena + off;

#if POET_TRACE
        /* high from just before t0 to just after the record's end, so each pulse spans its ticks */
        port_mark(1);
        t0 = port_ticks();
#endif
        if ((op == POET_I_COMPUTE || op == POET_I_RECOMPUTE || op == POET_I_PAGE_IN) && bytes) {
            offset[node] = off;
            if (p[1] & POET_I_IN_PLACE) { /* made over its dep 0, which leaves with it (validated) */
                poet_node_view(m, node, &n);
                live -= poet_arena_bytes(m, n.deps[0]);
            }
            live += bytes;
            if (live > res->peak_live_bytes)
                res->peak_live_bytes = live;
            if (off + bytes > res->peak_extent_bytes)
                res->peak_extent_bytes = off + bytes;
        }
        switch (op) {
        case POET_I_COMPUTE:
        case POET_I_RECOMPUTE:
            poet_node_view(m, node, &n);
            for (j = 0; j < 4; j++)
                x.in[j] = j < n.n_deps ? dep_tensor(m, buf, offset, n.deps[j]) : 0;
            x.out = (float *)(void *)t;
            x.deps = n.deps;
            x.n_deps = n.n_deps;
            x.recompute = op == POET_I_RECOMPUTE;
            poet_ops[n.op].run(&x);
            if (n.kind == POET_KIND_LOSS && buf->stop_on_bad_loss && !poet_finite(res->loss))
                err = POET_E_DIVERGED;
            break;
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
        ticks[i] = port_ticks() - t0;
        port_mark(0); /* before the error check below, so a failed step leaves the pin low too */
        res->n_records = (uint16_t)(res->n_records + 1u);
#endif
        if (err) {
            res->status = err == POET_E_DIVERGED ? POET_E_DIVERGED : POET_E_PAGER;
            break;
        }
        /* KEEP: the kept node's output, just made in its own stage, to the feature cache */
        if (op == POET_I_COMPUTE && buf->cache && node == buf->cache->keep_node) {
#if POET_TRACE
            port_mark(1);
            t0 = port_ticks();
#endif
            err = port_pager_write(buf->cache->keep_at, t, bytes);
            buf->cache->write_done = 1;
            buf->cache->write_after = i;
#if POET_TRACE
            buf->cache->write_ticks = port_ticks() - t0;
            port_mark(0);
            res->n_records = (uint16_t)(res->n_records + 1u);
#endif
            if (err) {
                res->status = POET_E_PAGER;
                break;
            }
        }
    }
    res->step_ticks = port_ticks() - t_step;
}
