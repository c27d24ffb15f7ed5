#include "model.h"

#include <string.h>

#include "ops/ops.h"
#include "status.h"
#include "util.h"

#define HDR POET_MODEL_HDR
#define NODE_SZ POET_NODE_SZ

float poet_attr_f32(int32_t a)
{
    float f;
    memcpy(&f, &a, sizeof f);
    return f;
}

void poet_node_view(const poet_model_t *m, uint16_t i, poet_node_t *n)
{
    const uint8_t *p = poet_node_rec(m, i);
    int k;
    n->op = p[0];
    n->kind = p[1];
    n->n_deps = p[2];
    for (k = 0; k < 4; k++)
        n->deps[k] = poet_rd16(p + 4 + 2 * k);
    n->bytes = poet_rd32(p + 12);
    for (k = 0; k < 10; k++)
        n->a[k] = (int32_t)poet_rd32(p + 16 + 4 * k);
}

static uint32_t align8(uint32_t n) { return (n + 7u) & ~7u; }

/* The header checks every later read of the blob relies on; 0 when they fail. */
static int header_ok(const uint8_t *blob, uint32_t len)
{
    uint32_t nodes, params;
    if (len < HDR || blob[0] != 'P' || blob[1] != 'M' || blob[2] != 'D' || blob[3] != 'L' ||
        blob[4] != 1 || blob[5] != 0)
        return 0;
    nodes = poet_rd16(blob + 6);
    params = poet_rd16(blob + 8);
    return nodes != 0 && nodes <= POET_MAX_NODES && params <= POET_MAX_PARAMS &&
           len == HDR + 4u * params + NODE_SZ * nodes;
}

uint32_t poet_model_table_bytes(const uint8_t *blob, uint32_t len)
{
    if (!header_ok(blob, len))
        return 0;
    /* u32 tables first, so each stays 4-aligned; the flags last */
    return align8(POET_TABLE_PARAM_BYTES * poet_rd16(blob + 8) + POET_TABLE_NODE_BYTES * poet_rd16(blob + 6));
}

/* Validates every node record fully (the runtime later trusts them as read from the blob), but
 * keeps only header fields and prefix sums: the records stay in the blob. */
int poet_model_parse(const uint8_t *blob, uint32_t len, void *tables, poet_model_t *m, uint32_t *detail)
{
    uint32_t i, k, elems;
    uint64_t swap = 0, frozen = 0, ram = 0, state = 0, aux = 0;
    poet_node_t n;

    *detail = POET_NO_DETAIL;
    if (!header_ok(blob, len))
        return POET_E_MODEL;
    m->blob = blob;
    m->n_nodes = poet_rd16(blob + 6);
    m->n_params = poet_rd16(blob + 8);
    m->batch = poet_rd16(blob + 10);
    m->x_elems = poet_rd32(blob + 12);
    if (m->batch == 0 || m->x_elems == 0 || m->x_elems > 0x10000000u)
        return POET_E_MODEL;
    m->recs = blob + HDR + 4u * m->n_params;
    m->param_off = (uint32_t *)tables;
    m->swap_off = m->param_off + m->n_params;
    m->arena_off = m->swap_off + m->n_nodes;
    m->flags = (uint8_t *)(m->arena_off + m->n_nodes);
    for (i = 0; i < m->n_params; i++) {
        uint32_t word = poet_rd32(blob + HDR + 4u * i), kind = word & ~POET_PARAM_ELEMS_MASK;
        uint64_t *area = (kind & POET_PARAM_AUX) ? &aux : (kind & POET_PARAM_FROZEN) ? &frozen : &ram;
        elems = word & POET_PARAM_ELEMS_MASK;
        m->param_off[i] = (uint32_t)*area;
        /* an int8 tensor: its scale's word, then four elements a word */
        *area += kind & POET_PARAM_I8 ? 1u + (elems + 3u) / 4u : elems;
        /* state tensors follow every trained one, so the gradients (at the trained offsets) are
         * one run of train_elems */
        if (elems == 0 ||
            (kind != 0 && kind != POET_PARAM_FROZEN && kind != POET_PARAM_STATE &&
             kind != (POET_PARAM_FROZEN | POET_PARAM_I8) && kind != (POET_PARAM_FROZEN | POET_PARAM_I8 | POET_PARAM_AUX)) ||
            (kind == 0 && state) || frozen + ram > 0x10000000u || aux > 0x10000000u)
            return POET_E_MODEL;
        if (kind == POET_PARAM_STATE)
            state += elems;
    }
    m->frozen_words = (uint32_t)frozen;
    m->aux_words = (uint32_t)aux;
    m->train_elems = (uint32_t)(ram - state);
    m->state_elems = (uint32_t)state;
    /* What the model keeps of particular ops' nodes, each folded in by the op's own check as the
     * node passes it (ops.h poet_check_fn): here the values of a model without such a node. */
    m->x_bytes = 4u * m->x_elems;
    m->stream_bytes = 0;
    m->min_classes = 0xFFFFFFFFu;
    m->opt = 0;
    m->opt_words = 0;
    m->opt_p[0] = m->opt_p[1] = m->opt_p[2] = 0.0f;
    m->in_backward = 0;
    for (i = 0; i < m->n_nodes; i++) {
        const uint8_t *p = poet_node_rec(m, (uint16_t)i);
        *detail = i;
        poet_node_view(m, (uint16_t)i, &n);
        if (n.n_deps > 4 || p[3] != 0)
            return POET_E_MODEL;
        /* deps point backwards only, so dep sizes read by the op's check are of validated nodes */
        for (k = 0; k < 4; k++) {
            if (k < n.n_deps ? n.deps[k] >= i : n.deps[k] != 0xFFFFu)
                return POET_E_MODEL;
        }
        if (!poet_op_check(m, &n, i))
            return POET_E_MODEL;
        m->swap_off[i] = (uint32_t)swap;
        /* each slot starts 4-aligned: an int8 tensor's bytes need not be a multiple of 4 */
        swap += ((uint64_t)n.bytes + 3u) & ~(uint64_t)3u;
        if (swap > 0xFFFFFFFFull)
            return POET_E_MODEL;
    }
    /* the aux weights follow the swap area on the same storage, sector-aligned */
    swap = (swap + 511u) & ~(uint64_t)511u;
    if (swap + 4u * aux > 0xFFFFFFFFull)
        return POET_E_MODEL;
    m->aux_at = (uint32_t)swap;
    *detail = POET_NO_DETAIL;
    /* The last node must be the optimizer (poet_op_check admits one nowhere else, and its check has
     * set the model's update rule): n is the last node, of a validated kind. */
    if (n.kind != POET_KIND_OPTIMIZER)
        return POET_E_MODEL;
    m->hash = poet_fnv1a64(blob, len);
    return POET_OK;
}
