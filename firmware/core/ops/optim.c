/* The optimizer node (docs/spec.md section 2): the last node of every model. It counts the step and
 * updates every trained parameter from its gradient once the backward pass is done (kernels/optim.c),
 * unless the model updates in backward (model.h in_backward): then the backward nodes have applied
 * the same rule already, element by element, and there is no gradient left to apply. Which optimizer,
 * its settings and state words per element, and whether it updates in backward are the model's: this
 * node's check sets them (model.h opt, opt_p, opt_words, in_backward). */
#include "op_util.h"

/* OPT: POET_OPT_*; MOMENTUM for momentum; BETA1, BETA2, EPS for Adam (all f32); IN_BACKWARD 0 or 1. */
enum { OPT = 0, MOMENTUM = 1, BETA1 = 1, BETA2 = 2, EPS = 3, IN_BACKWARD = 4 };

/* momentum and Adam's betas in [0, 1), Adam's eps > 0. */
static int unit_attr(int32_t a) { return finite_attr(a) && poet_attr_f32(a) >= 0.0f && poet_attr_f32(a) < 1.0f; }

static int settings_ok(const int32_t *a)
{
    switch (a[OPT]) {
    case POET_OPT_SGD: return 1;
    case POET_OPT_MOMENTUM: return unit_attr(a[MOMENTUM]);
    case POET_OPT_ADAM:
        return unit_attr(a[BETA1]) && unit_attr(a[BETA2]) && finite_attr(a[EPS]) && poet_attr_f32(a[EPS]) > 0.0f;
    default: return 0;
    }
}

/* poet_op_check admits this node only as the model's last, so it sets the model's update rule once. */
int op_optimizer_check(poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    int k;
    if (n->n_deps != 0 || n->bytes != 0 || (a[IN_BACKWARD] != 0 && a[IN_BACKWARD] != 1) || !settings_ok(a))
        return 0;
    m->opt = (uint8_t)a[OPT];
    for (k = 0; k < 3; k++)
        m->opt_p[k] = poet_attr_f32(a[1 + k]);
    m->opt_words = (uint8_t)(a[OPT] == POET_OPT_ADAM ? 2u : a[OPT] == POET_OPT_MOMENTUM ? 1u : 0u);
    m->in_backward = (uint8_t)a[IN_BACKWARD];
    return 1;
}

int optimizer_in_backward(const poet_model_t *m)
{
    const uint8_t *p = poet_node_rec(m, (uint16_t)(m->n_nodes - 1u));
    return p[0] == POET_OP_SGD && poet_rd32(p + 16 + 4 * IN_BACKWARD) == 1u;
}

void op_optimizer_run(const poet_exec_t *e)
{
    const poet_model_t *m = e->m;
    const poet_buffers_t *buf = e->buf;
    uint16_t p;
    *buf->opt_step = e->upd->step;
    for (p = 0; !m->in_backward && p < m->n_params; p++) {
        uint32_t g = m->param_off[p];
        if (poet_param_trained(m, p))
            poet_optimize(e->upd, poet_param_elems(m, p), buf->params + g, buf->grads + g,
                          m->opt_words > 0 ? buf->opt_state + g : 0,
                          m->opt_words > 1 ? buf->opt_state + m->train_elems + g : 0);
    }
}
