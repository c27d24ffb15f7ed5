/* Data movement: the input, the reshapes (flatten, reshape: copies; their check is ops.c's
 * op_same_check), permute, select and embedding, forward and backward (kernels/layout.c). */

#include "op_util.h"

/* a0 of every op here but permute: elements (input, the reshapes) or the leading dim. */
enum { N = 0 };

/* ---- input and reshapes ----------------------------------------------------------------------- */

/* The staged batch's x, all of it, as it lies in the pool's staging region: fp32 (a1 0), or int8
 * (a1 1) quantised by the host with the frozen scale parameter a2, for a static-int8 first layer
 * (its input's quantize node folded in). */
enum { I8 = 1, I8_SCALE = 2 };

/* A staged-int8 input sets the staged inputs' bytes (model.h x_bytes) to one a element. */
int op_input_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    if (n->n_deps != 0 || (uint32_t)a[N] != m->x_elems || a[N] <= 0)
        return 0;
    if (a[I8] == 1) {
        if (!q_scale_ok(m, a[I8_SCALE]) || (uint64_t)n->bytes != (uint64_t)m->x_elems)
            return 0;
        m->x_bytes = m->x_elems;
        return 1;
    }
    return a[I8] == 0 && (uint64_t)n->bytes == 4ull * m->x_elems;
}

/* Nothing to do: the input's tensor is the staged batch itself, which its readers read in place
 * (interp.c dep_tensor; docs/spec.md section 1), so it takes no arena bytes and copies nothing. */
void op_input_run(const poet_exec_t *e) { (void)e; }
void op_copy_run(const poet_exec_t *e) { poet_copy(e->a[N], e->in[0], e->out); }

/* ---- permute ---------------------------------------------------------------------------------- */

/* a0..a3 the dims d of x, a4..a7 the permutation p: y = x.permute(p). */
enum { DIMS = 0, PERM = 4 };

int op_permute_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x;
    int k, seen = 0;
    for (k = 0; k < 4; k++) {
        if (!pos(a[DIMS + k]) || a[PERM + k] < 0 || a[PERM + k] > 3)
            return 0;
        seen |= 1 << a[PERM + k];
    }
    x = f32s(mul(mul((uint64_t)a[DIMS], (uint64_t)a[DIMS + 1]), mul((uint64_t)a[DIMS + 2], (uint64_t)a[DIMS + 3])));
    return seen == 0xF && io1(m, n, x, x);
}

static void permute(const poet_exec_t *e, int backward)
{
    int d[4], p[4], k;
    for (k = 0; k < 4; k++) {
        d[k] = e->a[DIMS + k];
        p[k] = e->a[PERM + k];
    }
    if (backward)
        poet_permute4_bwd(d, p, e->in[0], e->out);
    else
        poet_permute4_fwd(d, p, e->in[0], e->out);
}

void op_permute_run(const poet_exec_t *e) { permute(e, 0); }
void op_permute_bwd_run(const poet_exec_t *e) { permute(e, 1); }

/* ---- select ----------------------------------------------------------------------------------- */

/* x[B, S, D] -> y[B, D] = x[:, INDEX] */
enum { S = 1, D = 2, INDEX = 3 };

int op_select_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[N]) || !pos(a[S]) || !pos(a[D]) || a[INDEX] < 0 || a[INDEX] >= a[S])
        return 0;
    x = f32s(mul(mul((uint64_t)a[N], (uint64_t)a[S]), (uint64_t)a[D]));
    y = f32s(mul((uint64_t)a[N], (uint64_t)a[D]));
    return n->op == POET_OP_SELECT ? io1(m, n, x, y) : io1(m, n, y, x);
}

void op_select_run(const poet_exec_t *e)
{
    poet_select_fwd(e->a[N], e->a[S], e->a[D], e->a[INDEX], e->in[0], e->out);
}

void op_select_bwd_run(const poet_exec_t *e)
{
    poet_select_bwd(e->a[N], e->a[S], e->a[D], e->a[INDEX], e->in[0], e->out);
}

/* ---- cat --------------------------------------------------------------------------------------- */

/* a0 OUTER, a1..a4 each dep's row length (0 past n_deps) -> y[OUTER, sum]. The backward, one
 * input's gradient: a0 OUTER, a1 TOTAL (the output's row), a2 OFFSET, a3 LEN; dep 0 is dL/dy. */
enum { OUTER = 0, TOTAL = 1, OFFSET = 2, LEN = 3 };

int op_cat_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t sum = 0;
    int k;
    if (!pos(a[OUTER]))
        return 0;
    if (n->op == POET_OP_CAT_BWD)
        return pos(a[TOTAL]) && pos(a[LEN]) && a[OFFSET] >= 0 && a[OFFSET] <= a[TOTAL] - a[LEN] &&
               io1(m, n, f32s(mul((uint64_t)a[OUTER], (uint64_t)a[TOTAL])),
                   f32s(mul((uint64_t)a[OUTER], (uint64_t)a[LEN])));
    if (n->n_deps < 2)
        return 0;
    for (k = 0; k < 4; k++) {
        if (k < n->n_deps ? !pos(a[1 + k]) || dep_bytes(m, n, k) != f32s(mul((uint64_t)a[OUTER], (uint64_t)a[1 + k]))
                          : a[1 + k] != 0)
            return 0;
        sum += (uint64_t)a[1 + k];
    }
    return sum <= 0x7FFFFFFFu && n->bytes == f32s(mul((uint64_t)a[OUTER], sum));
}

void op_cat_run(const poet_exec_t *e)
{
    int len[4], k;
    const float *x[4];
    for (k = 0; k < e->n_deps; k++) {
        len[k] = e->a[1 + k];
        x[k] = e->in[k];
    }
    poet_cat_fwd(e->a[OUTER], e->n_deps, len, x, e->out);
}

void op_cat_bwd_run(const poet_exec_t *e)
{
    poet_cat_bwd(e->a[OUTER], e->a[TOTAL], e->a[OFFSET], e->a[LEN], e->in[0], e->out);
}

/* ---- slice: one piece of a split ---------------------------------------------------------------- */

/* a0 OUTER, a1 TOTAL, a2 OFFSET, a3 LEN as cat_bwd's: the forward is cat_bwd's copy of x's columns
 * (its run is op_cat_bwd_run); the backward writes all of x's gradient, zeros outside the piece. */
int op_slice_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t whole, piece;
    if (!pos(a[OUTER]) || !pos(a[TOTAL]) || !pos(a[LEN]) || a[OFFSET] < 0 || a[OFFSET] > a[TOTAL] - a[LEN])
        return 0;
    whole = f32s(mul((uint64_t)a[OUTER], (uint64_t)a[TOTAL]));
    piece = f32s(mul((uint64_t)a[OUTER], (uint64_t)a[LEN]));
    return n->op == POET_OP_SLICE ? io1(m, n, whole, piece) : io1(m, n, piece, whole);
}

void op_slice_bwd_run(const poet_exec_t *e)
{
    poet_slice_bwd(e->a[OUTER], e->a[TOTAL], e->a[OFFSET], e->a[LEN], e->in[0], e->out);
}

/* ---- embedding -------------------------------------------------------------------------------- */

/* N ids -> y[N, EMB_D] = table[ids], table[V, EMB_D] the parameter TABLE. IDS says where the ids
 * come from: 0 dep 0 (staged as fp32, exact below 2^24), 1 arange(N), 2 zeros(N). */
enum { V = 1, EMB_D = 2, IDS = 3, TABLE = 4, EMB_NEED_GX = 5 };

/* The backward's deps: dL/dy, then the ids if they are a dep; no input gradient (ids are not
 * differentiable). */
int op_embedding_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x, y;
    if (!pos(a[N]) || !pos(a[V]) || !pos(a[EMB_D]) || a[V] > (1 << 24) || a[IDS] < 0 || a[IDS] > 2 ||
        (a[IDS] == 1 && a[N] > a[V]) || !param_ok(m, a[TABLE], mul((uint64_t)a[V], (uint64_t)a[EMB_D])))
        return 0;
    x = f32s((uint64_t)a[N]); /* the ids, staged as fp32 */
    y = f32s(mul((uint64_t)a[N], (uint64_t)a[EMB_D]));
    if (n->op == POET_OP_EMBEDDING)
        return a[IDS] == 0 ? io1(m, n, x, y) : (n->n_deps == 0 && n->bytes == y);
    if (a[EMB_NEED_GX] != 0 || n->bytes != 0 || !grad_buf_ok(m, a[TABLE]) || n->n_deps != (a[IDS] == 0 ? 2 : 1) || dep_bytes(m, n, 0) != y)
        return 0;
    return a[IDS] != 0 || dep_bytes(m, n, 1) == x;
}

/* Token ids are staged as fp32 (docs/spec.md section 4), and arange/zeros ids exist nowhere, so
 * each row's id is made here and the kernel is run one row at a time: no id buffer is needed. An
 * id outside [0, V) (including NaN) becomes -1, which the kernels turn into a zero row / no update. */
static void embedding_rows(const int32_t *a, const float *ids, const float *w, const float *g,
                           float *y, float *dw)
{
    int32_t r, id;
    for (r = 0; r < a[N]; r++) {
        if (a[IDS] == 1)
            id = r;
        else if (a[IDS] == 2)
            id = 0;
        else
            id = (ids[r] >= 0.0f && ids[r] < (float)a[V]) ? (int32_t)ids[r] : -1;
        if (y)
            poet_embedding_fwd(1, a[V], a[EMB_D], &id, w, y + (long)r * a[EMB_D]);
        else
            poet_embedding_bwd(1, a[V], a[EMB_D], &id, g + (long)r * a[EMB_D], dw);
    }
}

void op_embedding_run(const poet_exec_t *e)
{
    embedding_rows(e->a, e->in[0], param(e, e->a[TABLE]), 0, e->out, 0);
}

void op_embedding_bwd_run(const poet_exec_t *e)
{
    float *dw = grad_buf(e, e->a[TABLE]);
    if (dw) /* a frozen table has nothing to accumulate */
        embedding_rows(e->a, e->in[1], 0, e->in[0], 0, dw);
}
