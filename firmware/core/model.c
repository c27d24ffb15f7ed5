#include "model.h"

#include <string.h>

#include "status.h"
#include "util.h"

#define HDR POET_MODEL_HDR
#define NODE_SZ POET_NODE_SZ

/* Products of attribute values saturate in 64 bits, so a hostile blob cannot wrap them into a
 * size that matches. */
static uint64_t mul(uint64_t a, uint64_t b)
{
    if (a != 0 && b > UINT64_MAX / a)
        return UINT64_MAX;
    return a * b;
}

static uint64_t f32s(uint64_t elems) { return mul(4u, elems); }

static int pos(int32_t v) { return v > 0; }

float poet_attr_f32(int32_t a)
{
    float f;
    memcpy(&f, &a, sizeof f);
    return f;
}

/* NaN and infinity fail: no op of the set has a use for them as a constant. */
static int finite_attr(int32_t a) { return ((uint32_t)a & 0x7F800000u) != 0x7F800000u; }

static int param_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p >= 0 && (uint32_t)p < m->n_params && poet_param_elems(m, (uint16_t)p) == elems;
}

/* Running statistics: both absent (-1) or two distinct frozen tensors of C elements. */
static int stats_ok(const poet_model_t *m, int32_t mean, int32_t var, uint64_t c)
{
    if (mean == -1 && var == -1)
        return 1;
    return mean != var && param_ok(m, mean, c) && param_ok(m, var, c) &&
           poet_param_frozen(m, (uint16_t)mean) && poet_param_frozen(m, (uint16_t)var);
}

/* Optional parameters (a bias, a norm's affine weight) are -1 when absent. */
static int opt_param_ok(const poet_model_t *m, int32_t p, uint64_t elems)
{
    return p == -1 || param_ok(m, p, elems);
}

static uint32_t dep_bytes(const poet_model_t *m, const poet_node_t *n, int k)
{
    return poet_node_bytes(m, n->deps[k]);
}

static int io1(const poet_model_t *m, const poet_node_t *n, uint64_t in, uint64_t out)
{
    return n->n_deps == 1 && dep_bytes(m, n, 0) == in && n->bytes == out;
}

static int io2(const poet_model_t *m, const poet_node_t *n, uint64_t in0, uint64_t in1, uint64_t out)
{
    return n->n_deps == 2 && dep_bytes(m, n, 0) == in0 && dep_bytes(m, n, 1) == in1 &&
           n->bytes == out;
}

/* The element type of node d's output: a cast's a2, fp32 for every other op. */
static int32_t dep_dtype(const poet_model_t *m, const poet_node_t *n, int k)
{
    const uint8_t *p = poet_node_rec(m, n->deps[k]);
    return p[0] == POET_OP_CAST ? (int32_t)poet_rd32(p + 16 + 4 * 2) : POET_DT_F32;
}

/* Bytes of elems elements of type t (0..3, validated by the caller). */
static uint64_t dt_bytes(int32_t t, uint64_t elems)
{
    return t == POET_DT_I8 ? elems : mul(t == POET_DT_F32 ? 4u : 2u, elems);
}

/* An int8 tensor's scale: a 4-byte fp32 made by an absmax node (not any 4-byte tensor, a loss). */
static int is_scale(const poet_model_t *m, uint16_t d) { return poet_node_op(m, d) == POET_OP_ABSMAX; }

/* Products of int8 values are below 127^2 in magnitude, so an int32 sum of up to 2^31 / 127^2 of
 * them cannot overflow: the int8 kernels' reduction length (in, or C/groups k k) is held to that. */
#define POET_I8_MAX_REDUCE 133143u

/* An int8 layer's deps: the quantised input (xe elements) and its scale, the quantised weight (we
 * elements) and its scale; the output is y bytes of fp32. */
static int i8_io(const poet_model_t *m, const poet_node_t *n, uint64_t xe, uint64_t we, uint64_t reduce,
                 uint64_t y)
{
    return n->n_deps == 4 && reduce <= POET_I8_MAX_REDUCE && dep_bytes(m, n, 0) == xe &&
           dep_dtype(m, n, 0) == POET_DT_I8 && is_scale(m, n->deps[1]) && dep_bytes(m, n, 2) == we &&
           dep_dtype(m, n, 2) == POET_DT_I8 && is_scale(m, n->deps[3]) && n->bytes == y;
}

/* A parameterised backward: dep 0 is dL/dy, dep 1 the forward input; the input gradient is the
 * output only if need_grad_input (else 0 bytes). */
static int bwd_ok(const poet_model_t *m, const poet_node_t *n, int32_t need, uint64_t y, uint64_t x)
{
    return (need == 0 || need == 1) && io2(m, n, y, x, need ? x : 0u);
}

static int kind_of(uint8_t op)
{
    switch (op) {
    case POET_OP_INPUT: return POET_KIND_INPUT;
    case POET_OP_CROSS_ENTROPY: return POET_KIND_LOSS;
    case POET_OP_SGD: return POET_KIND_OPTIMIZER;
    default: break;
    }
    if (op <= POET_OP_PERMUTE || (op >= POET_OP_ADD && op <= POET_OP_CONV2D_I8))
        return POET_KIND_FORWARD;
    if ((op >= POET_OP_LINEAR_BWD && op <= POET_OP_PERMUTE_BWD) ||
        (op >= POET_OP_ADD_BWD && op <= POET_OP_BATCHNORM_EVAL_BWD))
        return POET_KIND_BACKWARD;
    return -1;
}

/* a0 the optimizer; momentum (a1) or Adam's betas (a1, a2) in [0, 1), Adam's eps (a3) > 0. */
static int unit_attr(int32_t a) { return finite_attr(a) && poet_attr_f32(a) >= 0.0f && poet_attr_f32(a) < 1.0f; }
static int optimizer_ok(const int32_t *a)
{
    switch (a[0]) {
    case POET_OPT_SGD: return 1;
    case POET_OPT_MOMENTUM: return unit_attr(a[1]);
    case POET_OPT_ADAM: return unit_attr(a[1]) && unit_attr(a[2]) && finite_attr(a[3]) && poet_attr_f32(a[3]) > 0.0f;
    default: return 0;
    }
}

/* Checks that the node's shapes agree with its deps, params and output size, so the kernels
 * can trust every index they compute. */
static int node_ok(const poet_model_t *m, const poet_node_t *n, uint32_t i)
{
    const int32_t *a = n->a;
    uint64_t x, y, t;
    int32_t ho, wo, s, gr;
    int k, seen, q;

    k = kind_of(n->op);
    /* gradient sums are adds in the backward pass */
    if (k < 0 || (n->kind != k && !(n->op == POET_OP_ADD && n->kind == POET_KIND_BACKWARD)))
        return 0;
    /* Only the low-precision ops read anything but fp32: a narrow tensor's bytes can equal an
     * fp32 tensor's of fewer elements, so sizes alone would not catch an fp32 kernel reading it. */
    if (n->op != POET_OP_CAST && n->op != POET_OP_LINEAR_I8 && n->op != POET_OP_CONV2D_I8)
        for (k = 0; k < n->n_deps; k++)
            if (dep_dtype(m, n, k) != POET_DT_F32)
                return 0;

    switch (n->op) {
    case POET_OP_INPUT:
        return n->n_deps == 0 && (uint32_t)a[0] == m->x_elems && a[0] > 0 &&
               (uint64_t)n->bytes == 4ull * m->x_elems;
    case POET_OP_LINEAR:
    case POET_OP_LINEAR_BWD:
    case POET_OP_LINEAR_I8:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]))
            return 0;
        x = f32s(mul((uint64_t)a[0], (uint64_t)a[1]));
        y = f32s(mul((uint64_t)a[0], (uint64_t)a[2]));
        if (!param_ok(m, a[3], mul((uint64_t)a[1], (uint64_t)a[2])) || !opt_param_ok(m, a[4], (uint64_t)a[2]))
            return 0;
        if (n->op == POET_OP_LINEAR_I8)
            return i8_io(m, n, x / 4u, mul((uint64_t)a[1], (uint64_t)a[2]), (uint64_t)a[1], y);
        return n->op == POET_OP_LINEAR ? io1(m, n, x, y) : bwd_ok(m, n, a[5], y, x);
    case POET_OP_CONV2D:
    case POET_OP_CONV2D_BWD:
    case POET_OP_CONV2D_I8:
        s = POET_CONV_STRIDE(a[6]);
        gr = POET_CONV_GROUPS(a[6]);
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]) || !pos(a[4]) || !pos(a[5]) ||
            a[6] < 0 || POET_CONV_PAD(a[6]) > 64 || s > 64 || a[2] > 65535 || a[3] > 65535 ||
            a[5] > 64 || a[1] % gr || a[4] % gr)
            return 0;
        ho = (a[2] + 2 * POET_CONV_PAD(a[6]) - a[5]) / s + 1;
        wo = (a[3] + 2 * POET_CONV_PAD(a[6]) - a[5]) / s + 1;
        if (a[2] + 2 * POET_CONV_PAD(a[6]) < a[5] || a[3] + 2 * POET_CONV_PAD(a[6]) < a[5])
            return 0;
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), mul((uint64_t)a[2], (uint64_t)a[3])));
        y = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[4]), mul((uint64_t)ho, (uint64_t)wo)));
        t = mul(mul((uint64_t)a[4], (uint64_t)(a[1] / gr)), mul((uint64_t)a[5], (uint64_t)a[5]));
        if (!param_ok(m, a[7], t) || !opt_param_ok(m, a[8], (uint64_t)a[4]))
            return 0;
        if (n->op == POET_OP_CONV2D_I8)
            return i8_io(m, n, x / 4u, t, mul((uint64_t)(a[1] / gr), mul((uint64_t)a[5], (uint64_t)a[5])), y);
        return n->op == POET_OP_CONV2D ? io1(m, n, x, y) : bwd_ok(m, n, a[9], y, x);
    case POET_OP_RELU:
    case POET_OP_FLATTEN:
    case POET_OP_RESHAPE:
    case POET_OP_TANH:
    case POET_OP_SIGMOID:
    case POET_OP_FLATTEN_BWD:
    case POET_OP_RESHAPE_BWD:
        return pos(a[0]) && io1(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[0]));
    case POET_OP_GELU:
        return pos(a[0]) && (a[1] == 0 || a[1] == 1) && io1(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[0]));
    case POET_OP_HARDTANH:
    case POET_OP_SCALE:
    case POET_OP_SCALE_BWD:
        return pos(a[0]) && finite_attr(a[1]) && finite_attr(a[2]) &&
               io1(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[0]));
    case POET_OP_RELU_BWD:
    case POET_OP_TANH_BWD:
    case POET_OP_SIGMOID_BWD:
    case POET_OP_MUL_BWD_A:
    case POET_OP_MUL_BWD_B:
        x = f32s((uint64_t)a[0]);
        return pos(a[0]) && (n->op < POET_OP_MUL_BWD_A || a[1] == a[0]) && io2(m, n, x, x, x);
    case POET_OP_GELU_BWD:
    case POET_OP_HARDTANH_BWD:
        x = f32s((uint64_t)a[0]);
        return pos(a[0]) && (n->op == POET_OP_GELU_BWD ? (a[1] == 0 || a[1] == 1)
                                                        : (finite_attr(a[1]) && finite_attr(a[2]))) &&
               io2(m, n, x, x, x);
    case POET_OP_MAXPOOL2D:
    case POET_OP_MAXPOOL2D_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]) || (a[2] & 1) || (a[3] & 1))
            return 0;
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), mul((uint64_t)a[2], (uint64_t)a[3])));
        y = x / 4u;
        return n->op == POET_OP_MAXPOOL2D ? io1(m, n, x, y) : io2(m, n, y, x, x);
    case POET_OP_CROSS_ENTROPY:
    case POET_OP_CROSS_ENTROPY_BWD:
        /* labels come from the staged batch, so B must be the model's batch */
        if (!pos(a[0]) || !pos(a[1]) || (uint32_t)a[0] != m->batch)
            return 0;
        x = f32s(mul((uint64_t)a[0], (uint64_t)a[1]));
        return io1(m, n, x, n->op == POET_OP_CROSS_ENTROPY ? 4u : x);
    case POET_OP_BATCHNORM:
    case POET_OP_BATCHNORM_BWD:
    case POET_OP_BATCHNORM_EVAL:
    case POET_OP_BATCHNORM_EVAL_BWD:
        /* B*HW > 1: the batch variance of a single value is undefined (torch raises); frozen
         * statistics (eval) need the running statistics they normalise with */
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || mul((uint64_t)a[0], (uint64_t)a[2]) < 2u ||
            !finite_attr(a[3]) || !(poet_attr_f32(a[3]) > 0.0f) || !finite_attr(a[4]) ||
            !opt_param_ok(m, a[5], (uint64_t)a[1]) || !opt_param_ok(m, a[6], (uint64_t)a[1]) ||
            !stats_ok(m, a[7], a[8], (uint64_t)a[1]) ||
            ((n->op == POET_OP_BATCHNORM_EVAL || n->op == POET_OP_BATCHNORM_EVAL_BWD) && a[7] < 0))
            return 0;
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), (uint64_t)a[2]));
        return (n->op == POET_OP_BATCHNORM || n->op == POET_OP_BATCHNORM_EVAL) ? io1(m, n, x, x)
                                                                                : bwd_ok(m, n, a[9], x, x);
    case POET_OP_LAYERNORM:
    case POET_OP_LAYERNORM_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !finite_attr(a[2]) || !(poet_attr_f32(a[2]) > 0.0f) ||
            !opt_param_ok(m, a[3], (uint64_t)a[1]) || !opt_param_ok(m, a[4], (uint64_t)a[1]))
            return 0;
        x = f32s(mul((uint64_t)a[0], (uint64_t)a[1]));
        return n->op == POET_OP_LAYERNORM ? io1(m, n, x, x) : bwd_ok(m, n, a[5], x, x);
    case POET_OP_MEAN:
    case POET_OP_MEAN_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]))
            return 0;
        y = f32s(mul((uint64_t)a[0], (uint64_t)a[2]));
        x = mul(y, (uint64_t)a[1]);
        return n->op == POET_OP_MEAN ? io1(m, n, x, y) : io1(m, n, y, x);
    case POET_OP_PERMUTE:
    case POET_OP_PERMUTE_BWD:
        seen = 0;
        for (k = 0; k < 4; k++) {
            if (!pos(a[k]) || a[4 + k] < 0 || a[4 + k] > 3)
                return 0;
            seen |= 1 << a[4 + k];
        }
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), mul((uint64_t)a[2], (uint64_t)a[3])));
        return seen == 0xF && io1(m, n, x, x);
    case POET_OP_ADD:
    case POET_OP_SUB:
    case POET_OP_MUL:
        /* b broadcasts over a's leading dims: m divides n (mul: same shapes only) */
        if (!pos(a[0]) || !pos(a[1]) || a[0] % a[1] || (n->op == POET_OP_MUL && a[0] != a[1]))
            return 0;
        return io2(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[1]), f32s((uint64_t)a[0]));
    case POET_OP_ADD_BWD:
    case POET_OP_SUB_BWD:
        if (!pos(a[0]) || !pos(a[1]) || a[0] % a[1])
            return 0;
        return io1(m, n, f32s((uint64_t)a[0]), f32s((uint64_t)a[1]));
    case POET_OP_MATMUL:
    case POET_OP_MATMUL_BWD_A:
    case POET_OP_MATMUL_BWD_B:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || !pos(a[3]))
            return 0;
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), (uint64_t)a[2])); /* a [batch, M, K] */
        t = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[2]), (uint64_t)a[3])); /* b [batch, K, N] */
        y = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), (uint64_t)a[3])); /* y [batch, M, N] */
        if (n->op == POET_OP_MATMUL)
            return io2(m, n, x, t, y);
        return n->op == POET_OP_MATMUL_BWD_A ? io2(m, n, y, t, x) : io2(m, n, y, x, t);
    case POET_OP_SOFTMAX:
    case POET_OP_SOFTMAX_BWD:
        if (!pos(a[0]) || !pos(a[1]))
            return 0;
        x = f32s(mul((uint64_t)a[0], (uint64_t)a[1]));
        return n->op == POET_OP_SOFTMAX ? io1(m, n, x, x) : io2(m, n, x, x, x);
    case POET_OP_EMBEDDING:
    case POET_OP_EMBEDDING_BWD:
        /* ids: 0 = dep (staged as fp32, exact below 2^24), 1 = arange(n), 2 = zeros(n) */
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || a[1] > (1 << 24) || a[3] < 0 || a[3] > 2 ||
            (a[3] == 1 && a[0] > a[1]) || !param_ok(m, a[4], mul((uint64_t)a[1], (uint64_t)a[2])))
            return 0;
        x = f32s((uint64_t)a[0]);
        y = f32s(mul((uint64_t)a[0], (uint64_t)a[2]));
        if (n->op == POET_OP_EMBEDDING)
            return a[3] == 0 ? io1(m, n, x, y) : (n->n_deps == 0 && n->bytes == y);
        /* no input gradient: ids are not differentiable */
        if (a[5] != 0 || n->bytes != 0 || n->n_deps != (a[3] == 0 ? 2 : 1) || dep_bytes(m, n, 0) != y)
            return 0;
        return a[3] != 0 || dep_bytes(m, n, 1) == x;
    case POET_OP_SELECT:
    case POET_OP_SELECT_BWD:
        if (!pos(a[0]) || !pos(a[1]) || !pos(a[2]) || a[3] < 0 || a[3] >= a[1])
            return 0;
        x = f32s(mul(mul((uint64_t)a[0], (uint64_t)a[1]), (uint64_t)a[2]));
        y = f32s(mul((uint64_t)a[0], (uint64_t)a[2]));
        return n->op == POET_OP_SELECT ? io1(m, n, x, y) : io1(m, n, y, x);
    case POET_OP_CAST:
        /* a1 -> a2: fp32 to or from one narrow type; a3 a parameter to read instead of dep 0 (an
         * fp32 weight being quantised) or -1. Deps: the source (unless a3), then for int8 the scale. */
        if (!pos(a[0]) || a[1] < POET_DT_F32 || a[1] > POET_DT_I8 || a[2] < POET_DT_F32 ||
            a[2] > POET_DT_I8 || a[1] == a[2] || (a[1] != POET_DT_F32 && a[2] != POET_DT_F32) ||
            (a[3] != -1 && (a[1] != POET_DT_F32 || !param_ok(m, a[3], (uint64_t)a[0]))))
            return 0;
        q = a[1] == POET_DT_I8 || a[2] == POET_DT_I8;
        if (n->n_deps != (a[3] == -1) + q || n->bytes != dt_bytes(a[2], (uint64_t)a[0]))
            return 0;
        if (a[3] == -1 &&
            (dep_bytes(m, n, 0) != dt_bytes(a[1], (uint64_t)a[0]) || dep_dtype(m, n, 0) != a[1]))
            return 0;
        return !q || is_scale(m, n->deps[n->n_deps - 1]);
    case POET_OP_ABSMAX:
        /* the scale of a0 fp32 elements: of dep 0, or of parameter a1 (then no deps) */
        if (!pos(a[0]) || a[1] < -1 || n->bytes != 4u)
            return 0;
        if (a[1] >= 0)
            return n->n_deps == 0 && param_ok(m, a[1], (uint64_t)a[0]);
        return n->n_deps == 1 && dep_bytes(m, n, 0) == f32s((uint64_t)a[0]);
    case POET_OP_SGD:
        return n->n_deps == 0 && n->bytes == 0 && i + 1u == m->n_nodes && optimizer_ok(a);
    default:
        return 0;
    }
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

/* Validates every node record fully (the runtime later trusts them as read from the blob), but
 * keeps only header fields and prefix sums: the records stay in the blob. */
int poet_model_parse(const uint8_t *blob, uint32_t len, poet_model_t *m, uint32_t *detail)
{
    uint32_t i, k, elems;
    uint64_t swap = 0, total = 0, train = 0;
    poet_node_t n;

    *detail = POET_NO_DETAIL;
    if (len < HDR || blob[0] != 'P' || blob[1] != 'M' || blob[2] != 'D' || blob[3] != 'L' ||
        blob[4] != 1 || blob[5] != 0)
        return POET_E_MODEL;
    m->blob = blob;
    m->n_nodes = poet_rd16(blob + 6);
    m->n_params = poet_rd16(blob + 8);
    m->batch = poet_rd16(blob + 10);
    m->x_elems = poet_rd32(blob + 12);
    if (m->n_nodes == 0 || m->n_nodes > POET_MAX_NODES || m->n_params > POET_MAX_PARAMS ||
        m->batch == 0 || m->x_elems == 0 || m->x_elems > 0x10000000u ||
        len != HDR + 4u * m->n_params + NODE_SZ * m->n_nodes)
        return POET_E_MODEL;
    m->recs = blob + HDR + 4u * m->n_params;
    for (i = 0; i < m->n_params; i++) {
        uint32_t word = poet_rd32(blob + HDR + 4u * i);
        elems = word & POET_PARAM_ELEMS_MASK;
        m->param_off[i] = (uint32_t)total;
        m->grad_off[i] = (word & POET_PARAM_FROZEN) ? POET_NO_GRAD : (uint32_t)train;
        total += elems;
        if (!(word & POET_PARAM_FROZEN))
            train += elems;
        if (elems == 0 || (word & ~(POET_PARAM_FROZEN | POET_PARAM_ELEMS_MASK)) || total > 0x10000000u)
            return POET_E_MODEL;
    }
    m->total_param_elems = (uint32_t)total;
    m->train_elems = (uint32_t)train;
    m->min_classes = 0xFFFFFFFFu;
    for (i = 0; i < m->n_nodes; i++) {
        const uint8_t *p = poet_node_rec(m, (uint16_t)i);
        *detail = i;
        poet_node_view(m, (uint16_t)i, &n);
        if (n.n_deps > 4 || p[3] != 0)
            return POET_E_MODEL;
        /* deps point backwards only, so dep sizes read during node_ok are of validated nodes */
        for (k = 0; k < 4; k++) {
            if (k < n.n_deps ? n.deps[k] >= i : n.deps[k] != 0xFFFFu)
                return POET_E_MODEL;
        }
        if (!node_ok(m, &n, i))
            return POET_E_MODEL;
        if ((n.op == POET_OP_CROSS_ENTROPY || n.op == POET_OP_CROSS_ENTROPY_BWD) &&
            (uint32_t)n.a[1] < m->min_classes)
            m->min_classes = (uint32_t)n.a[1];
        m->swap_off[i] = (uint32_t)swap;
        swap += n.bytes;
        if (swap > 0xFFFFFFFFull)
            return POET_E_MODEL;
    }
    *detail = POET_NO_DETAIL;
    if (n.op != POET_OP_SGD) /* the last node: node_ok made sure an SGD node can only be last */
        return POET_E_MODEL;
    m->opt = (uint8_t)n.a[0];
    m->opt_words = (uint8_t)(n.a[0] == POET_OPT_ADAM ? 2u : n.a[0] == POET_OPT_MOMENTUM ? 1u : 0u);
    m->hash = poet_fnv1a64(blob, len);
    return POET_OK;
}
