/* Storage types: cast (fp32 to or from fp16, bf16, int8) and absmax, the scale an int8 tensor is
 * quantised with (kernels/lowp.c). The int8 layers that read them are in linear.c and conv.c. */
#include "op_util.h"

/* ---- cast ------------------------------------------------------------------------------------- */

/* N elements from type FROM to type TO (POET_DT_*); SRC a parameter to read instead of dep 0 (an
 * fp32 weight being quantised) or -1. Deps: the source (unless SRC), then for int8 the scale. */
enum { N = 0, FROM = 1, TO = 2, SRC = 3 };

/* Bytes of elems elements of type t (0..3, validated by the caller). */
static uint64_t dt_bytes(int32_t t, uint64_t elems)
{
    return t == POET_DT_I8 ? elems : mul(t == POET_DT_F32 ? 4u : 2u, elems);
}

/* fp32 to or from one narrow type. */
int op_cast_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    int q;
    if (!pos(a[N]) || a[FROM] < POET_DT_F32 || a[FROM] > POET_DT_I8 || a[TO] < POET_DT_F32 ||
        a[TO] > POET_DT_I8 || a[FROM] == a[TO] || (a[FROM] != POET_DT_F32 && a[TO] != POET_DT_F32) ||
        (a[SRC] != -1 && (a[FROM] != POET_DT_F32 || !param_ok(m, a[SRC], (uint64_t)a[N]))))
        return 0;
    q = a[FROM] == POET_DT_I8 || a[TO] == POET_DT_I8;
    if (n->n_deps != (a[SRC] == -1) + q || n->bytes != dt_bytes(a[TO], (uint64_t)a[N]))
        return 0;
    if (a[SRC] == -1 &&
        (dep_bytes(m, n, 0) != dt_bytes(a[FROM], (uint64_t)a[N]) || dep_dtype(m, n, 0) != a[FROM]))
        return 0;
    return !q || is_scale(m, n->deps[n->n_deps - 1]);
}

/* Narrow tensors sit in the arena like fp32 ones (4-byte aligned offsets), so the pointers are only
 * reinterpreted. */
void op_cast_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    const void *src = a[SRC] >= 0 ? param(e, a[SRC]) : e->in[0];
    const float *scale = e->n_deps ? e->in[e->n_deps - 1] : 0;
    void *out = e->out;
    switch (a[FROM] * 4 + a[TO]) {
    case POET_DT_F32 * 4 + POET_DT_F16:
        poet_cast_f32_f16(a[N], (const float *)src, (uint16_t *)out);
        break;
    case POET_DT_F16 * 4 + POET_DT_F32:
        poet_cast_f16_f32(a[N], (const uint16_t *)src, (float *)out);
        break;
    case POET_DT_F32 * 4 + POET_DT_BF16:
        poet_cast_f32_bf16(a[N], (const float *)src, (uint16_t *)out);
        break;
    case POET_DT_BF16 * 4 + POET_DT_F32:
        poet_cast_bf16_f32(a[N], (const uint16_t *)src, (float *)out);
        break;
    case POET_DT_F32 * 4 + POET_DT_I8:
        poet_quantize_i8(a[N], scale[0], (const float *)src, (int8_t *)out);
        break;
    case POET_DT_I8 * 4 + POET_DT_F32:
        poet_dequantize_i8(a[N], scale[0], (const int8_t *)src, (float *)out);
        break;
    default: /* op_cast_check admits no other pair */
        break;
    }
}

/* ---- absmax ----------------------------------------------------------------------------------- */

/* The scale of N fp32 elements: of dep 0, or of the parameter ABS_SRC (then no deps). */
enum { ABS_SRC = 1 };

int op_absmax_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (!pos(a[N]) || a[ABS_SRC] < -1 || n->bytes != 4u)
        return 0;
    if (a[ABS_SRC] >= 0)
        return n->n_deps == 0 && param_ok(m, a[ABS_SRC], (uint64_t)a[N]);
    return n->n_deps == 1 && dep_bytes(m, n, 0) == f32s((uint64_t)a[N]);
}

void op_absmax_run(const poet_exec_t *e)
{
    e->out[0] = poet_absmax_scale(e->a[N], e->a[ABS_SRC] >= 0 ? param(e, e->a[ABS_SRC]) : e->in[0]);
}
