#include "schedule.h"

#include "ops/ops.h"
#include "status.h"
#include "util.h"

int poet_schedule_validate(const uint8_t *data, uint32_t len, const poet_model_t *m,
                           uint32_t pool_free, uint32_t *detail)
{
    /* Per-node scratch in the model's tables (pool RAM sized by the model): no heap, no static
     * array bounding the node count. */
    enum { RESIDENT = 1, COMPUTED = 2, PAGED = 4 };
    uint8_t *flag;
    uint32_t *offset;
    uint32_t n_instr, arena, i, j, n_computes = 0, limit;
    uint16_t n_nodes, out = 0xFFFFu;

    *detail = POET_NO_DETAIL;
    if (len < POET_SCHED_HDR + 4u)
        return POET_E_SHORT;
    if (data[0] != 'P' || data[1] != 'S' || data[2] != 'C' || data[3] != 'H')
        return POET_E_MAGIC;
    if (data[4] != 1 || (data[5] & ~POET_SCHED_FORWARD) != 0)
        return POET_E_VERSION;
    n_instr = poet_rd16(data + 20);
    if (len != POET_SCHED_HDR + 4u + 8u * n_instr)
        return POET_E_LENGTH;
    if (poet_crc32(0, data, len - 4u) != poet_rd32(data + len - 4u))
        return POET_E_CRC;
    if (m == 0 || poet_rd64(data + 8) != m->hash)
        return POET_E_HASH;
    n_nodes = poet_rd16(data + 6);
    if (n_nodes != m->n_nodes)
        return POET_E_NODES;
    arena = poet_rd32(data + 16);
    if (arena > pool_free)
        return POET_E_ARENA;

    /* A forward schedule computes the nodes before the first loss (the forward pass) and ends with
     * the loss's input, the model's output, resident: what predict reads. */
    limit = n_nodes;
    if (data[5] & POET_SCHED_FORWARD) {
        poet_node_t loss;
        for (limit = 0; limit < n_nodes && poet_node_kind(m, (uint16_t)limit) != POET_KIND_LOSS; limit++)
            ;
        if (limit == n_nodes)
            return POET_E_ORDER;
        poet_node_view(m, (uint16_t)limit, &loss);
        out = loss.deps[0];
    }
    flag = m->flags;
    offset = m->arena_off;
    for (j = 0; j < n_nodes; j++) {
        flag[j] = 0;
        offset[j] = 0;
    }
    for (i = 0; i < n_instr; i++) {
        const uint8_t *p = data + POET_SCHED_HDR + 8u * i;
        uint8_t op = p[0];
        uint16_t node = poet_rd16(p + 2);
        uint32_t off = poet_rd32(p + 4);
        poet_node_t n; /* decoded from the blob on the stack; the model keeps no node table */
        uint32_t bytes; /* its arena bytes: none for an input, the staged batch read in place */
        int allocates;
        uint16_t over = 0xFFFFu; /* in place: the dep whose bytes it is made in */

        *detail = i;
        if (op < POET_I_COMPUTE || op > POET_I_FREE || (p[1] & ~POET_I_IN_PLACE) ||
            (p[1] && op != POET_I_COMPUTE && op != POET_I_RECOMPUTE))
            return POET_E_OPCODE;
        if (node >= n_nodes)
            return POET_E_NODE_RANGE;
        poet_node_view(m, node, &n);
        bytes = poet_arena_bytes(m, node);
        if (p[1]) { /* in place: an op that may, over a resident dep 0 as large, read by no other slot, at its offset */
            over = n.deps[0];
            if (!poet_node_in_place(&n) || bytes == 0 || n.n_deps == 0 || poet_arena_bytes(m, over) < bytes ||
                !(flag[over] & RESIDENT) || offset[over] != off)
                return POET_E_OVERLAP;
            for (j = 1; j < n.n_deps; j++)
                if (n.deps[j] == over)
                    return POET_E_OVERLAP;
        }
        if (op == POET_I_COMPUTE && (node != n_computes || node >= limit))
            return POET_E_ORDER;
        if (op == POET_I_RECOMPUTE &&
            ((n.kind != POET_KIND_FORWARD && n.kind != POET_KIND_LOSS) || !(flag[node] & COMPUTED)))
            return POET_E_RECOMPUTE;
        if (op == POET_I_PAGE_IN && !(flag[node] & PAGED))
            return POET_E_NOT_PAGED;
        allocates = (op == POET_I_COMPUTE || op == POET_I_RECOMPUTE || op == POET_I_PAGE_IN) &&
                    bytes > 0;
        if (allocates) {
            if (flag[node] & RESIDENT)
                return POET_E_DOUBLE_ALLOC;
            /* offsets must be 4-aligned: the kernels read fp32 straight from the arena */
            if ((off & 3u) != 0 || (uint64_t)off + bytes > arena)
                return POET_E_BOUNDS;
            for (j = 0; j < n_nodes; j++) {
                if (j != over && (flag[j] & RESIDENT) && off < offset[j] + poet_arena_bytes(m, (uint16_t)j) &&
                    offset[j] < off + bytes)
                    return POET_E_OVERLAP;
            }
        }
        if (op == POET_I_COMPUTE || op == POET_I_RECOMPUTE) {
            for (j = 0; j < n.n_deps; j++) {
                uint16_t d = n.deps[j];
                if (poet_arena_bytes(m, d) > 0 && !(flag[d] & RESIDENT))
                    return POET_E_NOT_RESIDENT;
            }
        }
        if ((op == POET_I_PAGE_OUT || op == POET_I_FREE) && (!(flag[node] & RESIDENT) || bytes == 0))
            return POET_E_NOT_LIVE;

        switch (op) {
        case POET_I_COMPUTE:
            flag[node] |= COMPUTED;
            n_computes++;
            break;
        case POET_I_PAGE_OUT:
            flag[node] |= PAGED;
            break;
        case POET_I_FREE:
            flag[node] &= (uint8_t)~RESIDENT;
            break;
        default:
            break;
        }
        if (over != 0xFFFFu)
            flag[over] &= (uint8_t)~RESIDENT;
        if (allocates) {
            flag[node] |= RESIDENT;
            offset[node] = off;
        }
    }
    *detail = POET_NO_DETAIL;
    if (n_computes != limit)
        return POET_E_ORDER;
    for (j = 0; j < n_nodes; j++)
        if ((flag[j] & RESIDENT) && j != out)
            return POET_E_LEAK;
    if (out != 0xFFFFu && poet_arena_bytes(m, out) > 0 && !(flag[out] & RESIDENT))
        return POET_E_OUTPUT;
    return POET_OK;
}
