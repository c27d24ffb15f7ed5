#include "model.h"

#include "status.h"
#include "util.h"

#define HDR 16u
#define NODE_SZ 56u

/* Products of attribute values are computed in 64 bits so a hostile blob cannot wrap them. */
static int pos(int32_t v) { return v > 0; }

static int param_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p >= 0 && (uint32_t)p < m->n_params && m->param_elems[p] == elems;
}

static int bias_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p == -1 || param_ok(m, p, elems);
}

static uint32_t dep_bytes(const poet_model_t *m, const poet_node_t *n, int k)
{
    return m->nodes[n->deps[k]].bytes;
}

/* Checks that the node's shapes agree with its deps, params and output size, so the kernels
 * can trust every index they compute. */
static int node_ok(const poet_model_t *m, uint32_t i)
{
    const poet_node_t *n = &m->nodes[i];
    const int32_t *a = n->a;
    uint64_t xin, yout;
    int32_t ho, wo;
    int kind_expected;

    switch (n->op) {
    case POET_OP_INPUT: kind_expected = POET_KIND_INPUT; break;
    case POET_OP_LINEAR: case POET_OP_CONV2D: case POET_OP_RELU: case POET_OP_MAXPOOL2D:
    case POET_OP_FLATTEN: kind_expected = POET_KIND_FORWARD; break;
    case POET_OP_CROSS_ENTROPY: kind_expected = POET_KIND_LOSS; break;
    case POET_OP_LINEAR_BWD: case POET_OP_CONV2D_BWD: case POET_OP_RELU_BWD:
    case POET_OP_MAXPOOL2D_BWD: case POET_OP_FLATTEN_BWD: case POET_OP_CROSS_ENTROPY_BWD:
        kind_expected = POET_KIND_BACKWARD; break;
    case POET_OP_SGD: kind_expected = POET_KIND_OPTIMIZER; break;
    default: return 0;
    }
    if (n->kind != kind_expected)
        return 0;

    switch (n->op) {
    case POET_OP_INPUT:
        return n->n_deps == 0 && (uint32_t)a[0] == m->x_elems && a[0] > 0 &&
               (uint64_t)n->bytes == 4ull * m->x_elems;
    case POET_OP_LINEAR:
    case POET_OP_LINEAR_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]))
            return 0;
        xin = 4ull * (uint64_t)a[0] * (uint64_t)a[1];
        yout = 4ull * (uint64_t)a[0] * (uint64_t)a[2];
        if (!param_ok(m, a[3], (uint64_t)a[1] * (uint64_t)a[2]) || !bias_ok(m, a[4], (uint64_t)a[2]))
            return 0;
        if (n->op == POET_OP_LINEAR)
            return n->n_deps == 1 && dep_bytes(m, n, 0) == xin && n->bytes == yout;
        if (a[5] != 0 && a[5] != 1)
            return 0;
        return n->n_deps == 2 && dep_bytes(m, n, 0) == yout && dep_bytes(m, n, 1) == xin &&
               n->bytes == (a[5] ? xin : 0u);
    case POET_OP_CONV2D:
    case POET_OP_CONV2D_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]) || !pos(a[4]) || !pos(a[5]) ||
            a[6] < 0 || a[6] > 64 || a[2] > 65535 || a[3] > 65535 || a[5] > 64)
            return 0;
        ho = a[2] + 2 * a[6] - a[5] + 1;
        wo = a[3] + 2 * a[6] - a[5] + 1;
        if (ho <= 0 || wo <= 0)
            return 0;
        xin = 4ull * (uint64_t)a[0] * (uint64_t)a[1] * (uint64_t)a[2] * (uint64_t)a[3];
        yout = 4ull * (uint64_t)a[0] * (uint64_t)a[4] * (uint64_t)ho * (uint64_t)wo;
        if (!param_ok(m, a[7], (uint64_t)a[4] * (uint64_t)a[1] * (uint64_t)a[5] * (uint64_t)a[5]) ||
            !bias_ok(m, a[8], (uint64_t)a[4]))
            return 0;
        if (n->op == POET_OP_CONV2D)
            return n->n_deps == 1 && dep_bytes(m, n, 0) == xin && n->bytes == yout;
        if (a[9] != 0 && a[9] != 1)
            return 0;
        return n->n_deps == 2 && dep_bytes(m, n, 0) == yout && dep_bytes(m, n, 1) == xin &&
               n->bytes == (a[9] ? xin : 0u);
    case POET_OP_RELU:
    case POET_OP_FLATTEN:
        return pos(a[0]) && n->n_deps == 1 && dep_bytes(m, n, 0) == 4ull * (uint64_t)a[0] &&
               n->bytes == 4ull * (uint64_t)a[0];
    case POET_OP_FLATTEN_BWD:
        return pos(a[0]) && n->n_deps == 1 && dep_bytes(m, n, 0) == 4ull * (uint64_t)a[0] &&
               n->bytes == 4ull * (uint64_t)a[0];
    case POET_OP_RELU_BWD:
        return pos(a[0]) && n->n_deps == 2 && dep_bytes(m, n, 0) == 4ull * (uint64_t)a[0] &&
               dep_bytes(m, n, 1) == 4ull * (uint64_t)a[0] && n->bytes == 4ull * (uint64_t)a[0];
    case POET_OP_MAXPOOL2D:
    case POET_OP_MAXPOOL2D_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]) || (a[2] & 1) || (a[3] & 1))
            return 0;
        xin = 4ull * (uint64_t)a[0] * (uint64_t)a[1] * (uint64_t)a[2] * (uint64_t)a[3];
        yout = xin / 4u;
        if (n->op == POET_OP_MAXPOOL2D)
            return n->n_deps == 1 && dep_bytes(m, n, 0) == xin && n->bytes == yout;
        return n->n_deps == 2 && dep_bytes(m, n, 0) == yout && dep_bytes(m, n, 1) == xin &&
               n->bytes == xin;
    case POET_OP_CROSS_ENTROPY:
    case POET_OP_CROSS_ENTROPY_BWD:
        /* labels come from the staged batch, so B must be the model's batch */
        if (!pos(a[0]) || !pos(a[1]) || (uint32_t)a[0] != m->batch)
            return 0;
        xin = 4ull * (uint64_t)a[0] * (uint64_t)a[1];
        return n->n_deps == 1 && dep_bytes(m, n, 0) == xin &&
               n->bytes == (n->op == POET_OP_CROSS_ENTROPY ? 4u : xin);
    case POET_OP_SGD:
        return n->n_deps == 0 && n->bytes == 0 && i + 1u == m->n_nodes;
    default:
        return 0;
    }
}

int poet_model_parse(const uint8_t *blob, uint32_t len, poet_model_t *m, uint32_t *detail)
{
    uint32_t i, k, off;
    uint64_t swap = 0, total = 0;

    *detail = POET_NO_DETAIL;
    if (len < HDR || blob[0] != 'P' || blob[1] != 'M' || blob[2] != 'D' || blob[3] != 'L' ||
        blob[4] != 1 || blob[5] != 0)
        return POET_E_MODEL;
    m->n_nodes = poet_rd16(blob + 6);
    m->n_params = poet_rd16(blob + 8);
    m->batch = poet_rd16(blob + 10);
    m->x_elems = poet_rd32(blob + 12);
    if (m->n_nodes == 0 || m->n_nodes > POET_MAX_NODES || m->n_params > POET_MAX_PARAMS ||
        m->batch == 0 || m->x_elems == 0 || m->x_elems > 0x10000000u ||
        len != HDR + 4u * m->n_params + NODE_SZ * m->n_nodes)
        return POET_E_MODEL;
    for (i = 0; i < m->n_params; i++) {
        m->param_elems[i] = poet_rd32(blob + HDR + 4u * i);
        m->param_off[i] = (uint32_t)total;
        total += m->param_elems[i];
        if (m->param_elems[i] == 0 || total > 0x10000000u)
            return POET_E_MODEL;
    }
    m->total_param_elems = (uint32_t)total;
    m->min_classes = 0xFFFFFFFFu;
    off = HDR + 4u * m->n_params;
    for (i = 0; i < m->n_nodes; i++, off += NODE_SZ) {
        poet_node_t *n = &m->nodes[i];
        const uint8_t *p = blob + off;
        *detail = i;
        n->op = p[0];
        n->kind = p[1];
        n->n_deps = p[2];
        if (n->n_deps > 4 || p[3] != 0)
            return POET_E_MODEL;
        for (k = 0; k < 4; k++) {
            n->deps[k] = poet_rd16(p + 4 + 2 * k);
            if (k < n->n_deps ? n->deps[k] >= i : n->deps[k] != 0xFFFFu)
                return POET_E_MODEL;
        }
        n->bytes = poet_rd32(p + 12);
        for (k = 0; k < 10; k++)
            n->a[k] = (int32_t)poet_rd32(p + 16 + 4 * k);
        if (!node_ok(m, i))
            return POET_E_MODEL;
        if ((n->op == POET_OP_CROSS_ENTROPY || n->op == POET_OP_CROSS_ENTROPY_BWD) &&
            (uint32_t)n->a[1] < m->min_classes)
            m->min_classes = (uint32_t)n->a[1];
        m->swap_off[i] = (uint32_t)swap;
        swap += n->bytes;
        if (swap > 0xFFFFFFFFull)
            return POET_E_MODEL;
    }
    *detail = POET_NO_DETAIL;
    m->hash = poet_fnv1a64(blob, len);
    return POET_OK;
}
