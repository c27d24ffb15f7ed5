/* Pooling and reductions: 2x2 max pooling and the mean over adjacent dims (kernels/pool.c). */
#include "op_util.h"

/* ---- maxpool2d -------------------------------------------------------------------------------- */

/* x[B, C, H, W] -> y[B, C, H/2, W/2] (2x2 windows, stride 2). */
enum { B = 0, C = 1, H = 2, W = 3 };

/* The backward: dL/dy and the forward's input x in, dL/dx out. */
int op_maxpool2d_check(const poet_model_t *m, const poet_node_t *n)
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

/* ---- mean ------------------------------------------------------------------------------------- */

/* x[outer, r, inner] -> y[outer, inner] */
enum { OUTER = 0, R = 1, INNER = 2 };

int op_mean_check(const poet_model_t *m, const poet_node_t *n)
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
