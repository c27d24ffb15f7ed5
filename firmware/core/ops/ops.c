/* The opcode table, the checks every op gets before its own, and the helpers the families share. */
#include "ops.h"

#include "op_util.h"

#include "../port.h"
#include "../status.h"

/* Compile-time checks of the table's rows (C99 has no static_assert: a negative array size is the
 * error): every opcode fits a node record's u8, and every NATTRS fits its ten slots. Two rows of one
 * NUMBER are the designated initialisers below naming one index twice, an error with -Wextra
 * -Werror (-Woverride-init; clang warns by default). */
typedef char poet_opcodes_fit_u8[POET_N_OPCODES <= 256u ? 1 : -1];
#define NATTRS_FIT(name, number, kind, flag, nattrs, check, run) \
    typedef char poet_nattrs_fit_##name[(nattrs) >= 0 && (nattrs) <= POET_N_ATTRS ? 1 : -1];
POET_OP_TABLE(NATTRS_FIT)

#define FNS(name, number, kind, flag, nattrs, check, run) [POET_OP_##name] = {check, run},
const poet_op_t poet_ops[POET_N_OPCODES] = {POET_OP_TABLE(FNS)};

/* The kind of an op's nodes with its POET_OPF_* bits above it, and its attribute count: apart from
 * poet_ops, so that an entry costs a byte each rather than a padded third word. */
#define TRAITS(name, number, kind, flag, nattrs, check, run) \
    [POET_OP_##name] = (uint8_t)(POET_KIND_##kind | POET_OPF_##flag),
static const uint8_t traits[POET_N_OPCODES] = {POET_OP_TABLE(TRAITS)};
#define KIND_MASK 0x0Fu
#define NATTRS(name, number, kind, flag, nattrs, check, run) [POET_OP_##name] = (uint8_t)(nattrs),
static const uint8_t n_attrs[POET_N_OPCODES] = {POET_OP_TABLE(NATTRS)};

int poet_op_check(poet_model_t *m, const poet_node_t *n, uint32_t i)
{
    uint8_t t, kind;
    int k;

    if (n->op >= POET_N_OPCODES || !poet_ops[n->op].check)
        return 0;
    t = traits[n->op];
    kind = (uint8_t)(t & KIND_MASK);
    if (n->kind != kind && !((t & POET_OPF_GRAD_SUM) && n->kind == POET_KIND_BACKWARD))
        return 0;
    /* A slot the op does not read must be 0 (docs/spec.md section 2): then a record written for
     * another op's slot schema, or with a stray value where the op reads nothing, is refused
     * rather than run with attributes it was never meant to have. */
    for (k = n_attrs[n->op]; k < POET_N_ATTRS; k++)
        if (n->a[k] != 0)
            return 0;
    /* Only the low-precision ops read anything but fp32: a narrow tensor's bytes can equal an
     * fp32 tensor's of fewer elements, so sizes alone would not catch an fp32 kernel reading it. */
    if (!(t & POET_OPF_NARROW))
        for (k = 0; k < n->n_deps; k++)
            if (dep_dtype(m, n, k) != POET_DT_F32)
                return 0;
    /* the optimizer updates every parameter from complete gradients: it can only be the last node */
    if (kind == POET_KIND_OPTIMIZER && i + 1u != m->n_nodes)
        return 0;
    return poet_ops[n->op].check(m, n);
}

int poet_node_in_place(const poet_node_t *n)
{
    if (n->op >= POET_N_OPCODES || !(traits[n->op] & POET_OPF_INPLACE))
        return 0;
    /* the convs, only where marked (their checks ask the stream buffer of a channel for it) */
    if (n->op == POET_OP_CONV2D_Q)
        return ((uint32_t)n->a[9] & POET_Q_IN_PLACE) != 0;
    if (n->op == POET_OP_CONV2D)
        return ((uint32_t)n->a[9] & POET_CONV_IN_PLACE) != 0;
    return n->op != POET_OP_CONV2D_BWD || ((uint32_t)n->a[9] & POET_CONV_BWD_IN_PLACE) != 0;
}

/* One input and an output of the same a0 fp32 elements (relu, tanh, sigmoid; the reshapes). */
int op_same_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    return pos(a[0]) && io1(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[0]));
}

/* An fp32 parameter of elems elements (every reader but an int8 layer's weight). */
int param_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p >= 0 && (uint32_t)p < m->n_params && poet_param_elems(m, (uint16_t)p) == elems &&
           !poet_param_i8(m, (uint16_t)p);
}

int opt_param_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p == -1 || param_ok(m, p, elems);
}

uint32_t dep_bytes(const poet_model_t *m, const poet_node_t *n, int k)
{
    return poet_node_bytes(m, n->deps[k]);
}

int32_t dep_dtype(const poet_model_t *m, const poet_node_t *n, int k)
{
    const uint8_t *p = poet_node_rec(m, n->deps[k]);
    if (p[0] == POET_OP_CAST)
        return (int32_t)poet_rd32(p + 16 + 4 * 2);
    if (p[0] == POET_OP_ACT_MASK)
        return POET_DT_BITS;
    return q_scale_of(m, n->deps[k]) >= 0 ? POET_DT_I8 : POET_DT_F32;
}

int32_t q_scale_of(const poet_model_t *m, uint16_t d)
{
    const uint8_t *p = poet_node_rec(m, d);
    switch (p[0]) {
    case POET_OP_QUANTIZE:
        return (int32_t)poet_rd32(p + 16 + 4 * 1);
    case POET_OP_INPUT: /* staged int8: a1 1, its scale a2 */
        return poet_rd32(p + 16 + 4 * 1) == 1u ? (int32_t)poet_rd32(p + 16 + 4 * 2) : -1;
    case POET_OP_ADD_Q:
        return q_epi_scale((int32_t)poet_rd32(p + 16 + 4 * 1));
    case POET_OP_CONV2D_Q:
        return q_epi_scale((int32_t)poet_rd32(p + 16 + 4 * 9));
    case POET_OP_MEAN_Q:
    case POET_OP_MUL_Q:
        return q_epi_scale((int32_t)poet_rd32(p + 16 + 4 * 3));
    case POET_OP_MAXPOOL2D_Q: /* its input's scale, a8 */
        return (int32_t)poet_rd32(p + 16 + 4 * 8);
    case POET_OP_SLICE_Q: /* its input's, a4 */
        return (int32_t)poet_rd32(p + 16 + 4 * 4);
    case POET_OP_CAT_Q: /* its inputs', a5 */
        return (int32_t)poet_rd32(p + 16 + 4 * 5);
    default:
        return -1;
    }
}

int q_scale_ok(const poet_model_t *m, int32_t p)
{
    return param_ok(m, p, 1u) && poet_param_frozen(m, (uint16_t)p);
}

int pool_window_ok(const int32_t *a, int ceil, uint64_t *in, uint64_t *out)
{
    int32_t ph = POET_POOL_PAD_H(a[6]), pw = POET_POOL_PAD_W(a[6]);
    uint64_t bc;
    if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]) || !pos(a[4]) || !pos(a[5]) || a[2] > 0xFFFF ||
        a[3] > 0xFFFF || a[4] > a[2] + 2 * ph || a[5] > a[3] + 2 * pw || 2 * ph > a[4] || 2 * pw > a[5] ||
        (a[7] != 0 && a[7] != 1))
        return 0;
    bc = mul((uint64_t)a[0], (uint64_t)a[1]);
    *in = mul(bc, mul((uint64_t)a[2], (uint64_t)a[3]));
    *out = mul(bc, mul((uint64_t)poet_pool_out(a[2], a[4], POET_POOL_STRIDE_H(a[6]), ph, ceil),
                       (uint64_t)poet_pool_out(a[3], a[5], POET_POOL_STRIDE_W(a[6]), pw, ceil)));
    return 1;
}

int q_epi_ok(const poet_model_t *m, int32_t epi)
{
    return epi >= 0 && (epi >> 19) == 0 && Q_RELU(epi) <= 4 && (q_epi_scale(epi) < 0 || q_scale_ok(m, q_epi_scale(epi)));
}

int q_weight_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p >= 0 && (uint32_t)p < m->n_params && poet_param_elems(m, (uint16_t)p) == elems &&
           poet_param_i8(m, (uint16_t)p);
}

int q_bias_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p == -1 || (param_ok(m, p, elems) && poet_param_frozen(m, (uint16_t)p));
}

int q_dep_ok(const poet_model_t *m, const poet_node_t *n, int k) { return q_scale_of(m, n->deps[k]) >= 0; }

int is_scale(const poet_model_t *m, uint16_t d) { return poet_node_op(m, d) == POET_OP_ABSMAX; }

int io1(const poet_model_t *m, const poet_node_t *n, uint64_t in, uint64_t out)
{
    return n->n_deps == 1 && dep_bytes(m, n, 0) == in && n->bytes == out;
}

int io2(const poet_model_t *m, const poet_node_t *n, uint64_t in0, uint64_t in1, uint64_t out)
{
    return n->n_deps == 2 && dep_bytes(m, n, 0) == in0 && dep_bytes(m, n, 1) == in1 &&
           n->bytes == out;
}

int bwd_ok(const poet_model_t *m, const poet_node_t *n, int32_t need, uint64_t y, uint64_t x)
{
    return (need == 0 || need == 1) && io2(m, n, y, x, need ? x : 0u);
}

int weighted_bwd_ok(const poet_model_t *m, const poet_node_t *n, int32_t need, uint64_t y, uint64_t x,
                    int32_t weight)
{
    if (n->n_deps == 1 && !poet_param_trained(m, (uint16_t)weight))
        return (need == 0 || need == 1) && io1(m, n, y, need ? x : 0u);
    return bwd_ok(m, n, need, y, x);
}

int conv_geometry_ok(const int32_t *a, uint64_t *x_elems, uint64_t *y_elems, uint64_t *reduce)
{
    poet_conv_t cv = conv_shape(a);
    int k;
    for (k = 0; k < 5; k++)
        if (!pos(a[k]))
            return 0;
    if (a[5] < 0 || a[6] < 0 || cv.kh < 1 || cv.kw < 1 || cv.kh > 64 || cv.kw > 64 || cv.ph > 64 || cv.pb > 64 ||
        cv.pw > 64 || cv.stride > 64 || cv.H > 65535 || cv.W > 65535 || cv.C % cv.groups || cv.O % cv.groups ||
        cv.H + cv.ph + cv.pb < cv.kh || cv.W + 2 * cv.pw < cv.kw)
        return 0;
    *x_elems = mul(mul((uint64_t)cv.B, (uint64_t)cv.C), mul((uint64_t)cv.H, (uint64_t)cv.W));
    *y_elems = mul(mul((uint64_t)cv.B, (uint64_t)cv.O),
                   mul((uint64_t)poet_conv2d_rows(&cv), (uint64_t)poet_conv2d_out(cv.W, cv.kw, cv.stride, cv.pw)));
    *reduce = mul((uint64_t)(cv.C / cv.groups), mul((uint64_t)cv.kh, (uint64_t)cv.kw));
    return 1;
}

poet_conv_t conv_shape(const int32_t *a)
{
    poet_conv_t cv;
    cv.B = a[0];
    cv.C = a[1];
    cv.H = a[2];
    cv.W = a[3];
    cv.O = a[4];
    cv.kh = POET_CONV_KH(a[5]);
    cv.kw = POET_CONV_KW(a[5]);
    cv.pw = POET_CONV_PAD_W(a[5]);
    cv.ph = POET_CONV_PAD_H(a[6]);
    cv.pb = POET_CONV_PAD_B(a[5], cv.ph);
    cv.stride = POET_CONV_STRIDE(a[6]);
    cv.groups = POET_CONV_GROUPS(a[6]);
    /* ck is left unset: only conv2d_bwd reads it, and sets it (ops/conv.c); a store here would run on every
     * streamed row block of every int8 conv (a ResNet-18 step makes thousands) */
    return cv;
}

int grad_buf_ok(const poet_model_t *m, int32_t p)
{
    return !optimizer_in_backward(m) || p < 0 || !poet_param_trained(m, (uint16_t)p);
}

/* An int8 layer reads its weight quantised by the step (deps 2 and 3: a cast and an absmax node of
 * the fp32 parameter) or, with two deps, stored int8 in nv storage (a frozen POET_PARAM_I8 one). */
int w8_weight_ok(const poet_model_t *m, int32_t p, uint64_t elems, int aux)
{
    return p >= 0 && (uint32_t)p < m->n_params && poet_param_elems(m, (uint16_t)p) == elems &&
           poet_param_i8(m, (uint16_t)p) && !poet_param_aux(m, (uint16_t)p) == !aux &&
           !poet_param_trained(m, (uint16_t)p);
}

uint64_t mul(uint64_t a, uint64_t b)
{
    if (a != 0 && b > UINT64_MAX / a)
        return UINT64_MAX;
    return a * b;
}

int streams(poet_model_t *m, uint32_t row)
{
    if (row > m->stream_bytes)
        m->stream_bytes = row;
    return 1;
}

void int8_rows(const poet_exec_t *e, int32_t p, uint32_t row, int32_t rows, rows_fn run)
{
    uint32_t at = e->m->aux_at + 4u * e->m->param_off[p], per = e->m->stream_bytes / row;
    int32_t o, n;
    float ws;
    if (!poet_param_aux(e->m, (uint16_t)p)) {
        const int8_t *wq = i8_weight(e, p, &ws);
        run(e, 0, rows, wq, ws);
        return;
    }
    if (port_pager_read(at, &ws, 4u) != 0) {
        *e->err = POET_E_PAGER;
        return;
    }
    for (o = 0; o < rows; o += n) {
        n = rows - o < (int32_t)per ? rows - o : (int32_t)per;
        if (port_pager_read(at + 4u + (uint32_t)o * row, e->buf->stream, (uint32_t)n * row) != 0) {
            *e->err = POET_E_PAGER;
            return;
        }
        run(e, o, o + n, (const int8_t *)e->buf->stream, ws);
    }
}

int i8_weight_ok(const poet_model_t *m, const poet_node_t *n, int32_t p, uint64_t elems)
{
    if (n->n_deps != 2)
        return param_ok(m, p, elems);
    return p >= 0 && (uint32_t)p < m->n_params && poet_param_elems(m, (uint16_t)p) == elems &&
           poet_param_i8(m, (uint16_t)p) && !poet_param_aux(m, (uint16_t)p); /* read in place: not streamed */
}

int i8_io(const poet_model_t *m, const poet_node_t *n, uint64_t xe, uint64_t we, uint64_t reduce,
          uint64_t y)
{
    if (n->n_deps != 2 && n->n_deps != 4)
        return 0;
    return reduce <= POET_I8_MAX_REDUCE && dep_bytes(m, n, 0) == xe && dep_dtype(m, n, 0) == POET_DT_I8 &&
           is_scale(m, n->deps[1]) && n->bytes == y &&
           (n->n_deps == 2 || (dep_bytes(m, n, 2) == we && dep_dtype(m, n, 2) == POET_DT_I8 &&
                               is_scale(m, n->deps[3])));
}
