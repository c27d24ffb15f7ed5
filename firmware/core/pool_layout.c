#include "pool_layout.h"

static uint64_t align8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }

void poet_layout(const poet_model_t *m, uint32_t tables, int snapshot, uint32_t n_ticks, poet_layout_t *l)
{
    uint64_t at = align8(tables), snap;
    l->params_bytes = 4u * (m->train_elems + m->state_elems);
    l->grads_bytes = m->in_backward ? 0u : 4u * m->train_elems;
    l->opt_bytes = m->opt_words ? 4u + 4u * m->opt_words * m->train_elems : 0u;
    l->labels = (m->x_bytes + 3u) & ~3u;
    l->batch_bytes = l->labels + 4u * m->batch;
    snap = snapshot ? align8(l->params_bytes) + align8(l->opt_bytes) : 0u;
    /* offsets wrap harmlessly past 4 GiB: fixed, which does not, is what the caller checks */
    l->params = (uint32_t)at;
    at += align8(l->params_bytes);
    l->grads = (uint32_t)at;
    at += align8(l->grads_bytes);
    l->opt = (uint32_t)at;
    at += align8(l->opt_bytes);
    l->batch = (uint32_t)at;
    at += align8(l->batch_bytes);
    l->stream = (uint32_t)at;
    at += align8(m->stream_bytes);
    l->snapshot = (uint32_t)at;
    at += snap;
    l->ticks = (uint32_t)at;
    at += align8(4ull * n_ticks);
    l->arena = (uint32_t)at;
    l->fixed = at;
}
