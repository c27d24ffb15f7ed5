/* The losses: cross entropy over logits with the staged batch's labels; mean squared and mean
 * absolute error of a prediction against a target tensor (kernels/loss.c). */
#include "op_util.h"

/* logits[B, CLASSES] */
enum { B = 0, CLASSES = 1 };

/* Labels come from the staged batch, so B must be the model's batch. The loss is one fp32; the
 * backward reads the logits (not dL/dloss: the loss is where the backward starts). The model keeps
 * the smallest class count of these nodes (model.h min_classes): a staged label must be below it. */
int op_cross_entropy_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    uint64_t x;
    if (!pos(a[B]) || !pos(a[CLASSES]) || (uint32_t)a[B] != m->batch)
        return 0;
    x = f32s(mul((uint64_t)a[B], (uint64_t)a[CLASSES]));
    if (!io1(m, n, x, n->op == POET_OP_CROSS_ENTROPY ? 4u : x))
        return 0;
    if ((uint32_t)a[CLASSES] < m->min_classes)
        m->min_classes = (uint32_t)a[CLASSES];
    return 1;
}

void op_cross_entropy_run(const poet_exec_t *e)
{
    e->out[0] = poet_cross_entropy_fwd(e->a[B], e->a[CLASSES], e->in[0], e->buf->labels);
    *e->loss = e->out[0];
}

void op_cross_entropy_bwd_run(const poet_exec_t *e)
{
    poet_cross_entropy_bwd(e->a[B], e->a[CLASSES], e->in[0], e->buf->labels, e->out);
}

/* ---- mse, l1: a0 N elements; dep 0 the prediction, dep 1 the target ------------------------------ */

enum { N = 0 };

/* The loss is one fp32; the backward reads the prediction and the target (as cross entropy, not
 * dL/dloss) and gives dL/dprediction. The target gets no gradient: it is the input, or a tensor
 * nothing trains through. */
int op_regression_loss_check(poet_model_t *m, const poet_node_t *n)
{
    uint64_t x = f32s((uint64_t)n->a[N]);
    int fwd = n->op == POET_OP_MSE || n->op == POET_OP_L1;
    return pos(n->a[N]) && io2(m, n, x, x, fwd ? 4u : x);
}

void op_mse_run(const poet_exec_t *e)
{
    e->out[0] = poet_mse_fwd(e->a[N], e->in[0], e->in[1]);
    *e->loss = e->out[0];
}

void op_mse_bwd_run(const poet_exec_t *e) { poet_mse_bwd(e->a[N], e->in[0], e->in[1], e->out); }

void op_l1_run(const poet_exec_t *e)
{
    e->out[0] = poet_l1_fwd(e->a[N], e->in[0], e->in[1]);
    *e->loss = e->out[0];
}

void op_l1_bwd_run(const poet_exec_t *e) { poet_l1_bwd(e->a[N], e->in[0], e->in[1], e->out); }
