/* Pooling and reductions: 2x2 and general max pooling, average pooling, and the mean over adjacent dims
 * (kernels/pool.c). */
#include "op_util.h"

/* ---- maxpool2d -------------------------------------------------------------------------------- */

/* x[B, C, H, W] -> y[B, C, H/2, W/2] (2x2 windows, stride 2). */
enum { B = 0, C = 1, H = 2, W = 3 };

/* The backward: dL/dy and the forward's input x in, dL/dx out. */
int op_maxpool2d_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[B]) || !pos(a[C]) || !pos(a[H]) || !pos(a[W]) || (a[H] & 1) || (a[W] & 1))
        return 0;
    x = f32s(mul(mul((uint64_t)a[B], (uint64_t)a[C]), mul((uint64_t)a[H], (uint64_t)a[W])));
    y = x / 4u;
    return n->op == POET_OP_MAXPOOL2D ? io1(m, n, x, y) : io2(m, n, y, x, x);
}

void op_maxpool2d_run(const poet_exec_t *e)
{
    poet_maxpool2d_fwd(e->a[B], e->a[C], e->a[H], e->a[W], e->in[0], e->out);
}

void op_maxpool2d_bwd_run(const poet_exec_t *e)
{
    poet_maxpool2d_bwd(e->a[B], e->a[C], e->a[H], e->a[W], e->in[0], e->in[1], e->out);
}

/* ---- avgpool2d ---------------------------------------------------------------------------------- */

/* a0..a3 B, C, H, W as maxpool2d; a4 KH, a5 KW; a6 padding and strides (POET_POOL_* in model.h);
 * a7 count_include_pad. The backward reads dL/dy alone. */
enum { KH = 4, KW = 5, PGEOM = 6, INCLUDE_PAD = 7 };

int op_avgpool2d_check(poet_model_t *m, const poet_node_t *n)
{
    uint64_t x, y;
    if (!pool_window_ok(n->a, 0, &x, &y))
        return 0;
    x = f32s(x);
    y = f32s(y);
    return n->op == POET_OP_AVGPOOL2D ? io1(m, n, x, y) : io1(m, n, y, x);
}

static void avgpool2d(const poet_exec_t *e, int bwd)
{
    const int32_t *a = e->a;
    int g = a[PGEOM];
    if (bwd)
        poet_avgpool2d_bwd(a[B], a[C], a[H], a[W], a[KH], a[KW], POET_POOL_STRIDE_H(g), POET_POOL_STRIDE_W(g),
                           POET_POOL_PAD_H(g), POET_POOL_PAD_W(g), a[INCLUDE_PAD], e->in[0], e->out);
    else
        poet_avgpool2d_fwd(a[B], a[C], a[H], a[W], a[KH], a[KW], POET_POOL_STRIDE_H(g), POET_POOL_STRIDE_W(g),
                           POET_POOL_PAD_H(g), POET_POOL_PAD_W(g), a[INCLUDE_PAD], e->in[0], e->out);
}

void op_avgpool2d_run(const poet_exec_t *e) { avgpool2d(e, 0); }
void op_avgpool2d_bwd_run(const poet_exec_t *e) { avgpool2d(e, 1); }

/* ---- maxpool2d_general ------------------------------------------------------------------------ */

/* a0..a6 as avgpool2d; a7 ceil_mode (0/1). The backward: dL/dy and the forward's input x in, dL/dx out. */
enum { CEIL = 7 };

int op_maxpool2d_general_check(poet_model_t *m, const poet_node_t *n)
{
    uint64_t x, y;
    if (!pool_window_ok(n->a, n->a[CEIL], &x, &y))
        return 0;
    x = f32s(x);
    y = f32s(y);
    return n->op == POET_OP_MAXPOOL2D_GENERAL ? io1(m, n, x, y) : io2(m, n, y, x, x);
}

void op_maxpool2d_general_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    int g = a[PGEOM];
    poet_maxpool2d_general_fwd(a[B], a[C], a[H], a[W], a[KH], a[KW], POET_POOL_STRIDE_H(g), POET_POOL_STRIDE_W(g),
                               POET_POOL_PAD_H(g), POET_POOL_PAD_W(g), a[CEIL], e->in[0], e->out);
}

void op_maxpool2d_general_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    int g = a[PGEOM];
    poet_maxpool2d_general_bwd(a[B], a[C], a[H], a[W], a[KH], a[KW], POET_POOL_STRIDE_H(g), POET_POOL_STRIDE_W(g),
                               POET_POOL_PAD_H(g), POET_POOL_PAD_W(g), a[CEIL], e->in[0], e->in[1], e->out);
}

/* ---- upsample (nearest) ------------------------------------------------------------------------ */

/* a0..a3 B, C, H, W of the input; a4 SH, a5 SW the whole factors. The backward reads dL/dy alone. */
enum { SH = 4, SW = 5 };

int op_upsample_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[B]) || !pos(a[C]) || !pos(a[H]) || !pos(a[W]) || !pos(a[SH]) || !pos(a[SW]) || a[SH] > 0xFFFF ||
        a[SW] > 0xFFFF || mul((uint64_t)a[H], (uint64_t)a[SH]) > 0x7FFFFFFFu ||
        mul((uint64_t)a[W], (uint64_t)a[SW]) > 0x7FFFFFFFu)
        return 0;
    x = f32s(mul(mul((uint64_t)a[B], (uint64_t)a[C]), mul((uint64_t)a[H], (uint64_t)a[W])));
    y = mul(x, mul((uint64_t)a[SH], (uint64_t)a[SW]));
    return n->op == POET_OP_UPSAMPLE ? io1(m, n, x, y) : io1(m, n, y, x);
}

void op_upsample_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_upsample_nearest_fwd(a[B], a[C], a[H], a[W], a[SH], a[SW], e->in[0], e->out);
}

void op_upsample_bwd_run(const poet_exec_t *e)
{
    const int32_t *a = e->a;
    poet_upsample_nearest_bwd(a[B], a[C], a[H], a[W], a[SH], a[SW], e->in[0], e->out);
}

/* ---- mean ------------------------------------------------------------------------------------- */

/* x[outer, r, inner] -> y[outer, inner] */
enum { OUTER = 0, R = 1, INNER = 2 };

int op_mean_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[OUTER]) || !pos(a[R]) || !pos(a[INNER]))
        return 0;
    y = f32s(mul((uint64_t)a[OUTER], (uint64_t)a[INNER]));
    x = mul(y, (uint64_t)a[R]);
    return n->op == POET_OP_MEAN ? io1(m, n, x, y) : io1(m, n, y, x);
}

void op_mean_run(const poet_exec_t *e) { poet_mean_fwd(e->a[OUTER], e->a[R], e->a[INNER], e->in[0], e->out); }
void op_mean_bwd_run(const poet_exec_t *e) { poet_mean_bwd(e->a[OUTER], e->a[R], e->a[INNER], e->in[0], e->out); }
