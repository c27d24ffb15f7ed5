/* The optimizer node (docs/spec.md section 2): the last node of every model, it updates every
 * trained parameter from its gradient once the backward pass is done (kernels/optim.c). Which
 * optimizer and its state words per element are the model's (model.c reads them from this node). */
#include "op_util.h"

/* OPT: POET_OPT_*; MOMENTUM for momentum; BETA1, BETA2, EPS for Adam (all f32). */
enum { OPT = 0, MOMENTUM = 1, BETA1 = 1, BETA2 = 2, EPS = 3 };

/* momentum and Adam's betas in [0, 1), Adam's eps > 0. */
static int unit_attr(int32_t a) { return finite_attr(a) && poet_attr_f32(a) >= 0.0f && poet_attr_f32(a) < 1.0f; }

int op_optimizer_check(const poet_model_t *m, const poet_node_t *n)
{
    const int32_t *a = n->a;
    (void)m;
    if (n->n_deps != 0 || n->bytes != 0)
        return 0;
    switch (a[OPT]) {
    case POET_OPT_SGD: return 1;
    case POET_OPT_MOMENTUM: return unit_attr(a[MOMENTUM]);
    case POET_OPT_ADAM:
        return unit_attr(a[BETA1]) && unit_attr(a[BETA2]) && finite_attr(a[EPS]) && poet_attr_f32(a[EPS]) > 0.0f;
    default: return 0;
    }
}

void op_optimizer_run(const poet_exec_t *e)
{
    const poet_model_t *m = e->m;
    const poet_buffers_t *buf = e->buf;
    const int32_t *a = e->a;
    uint16_t p;
    uint32_t step = ++*buf->opt_step;
    for (p = 0; p < m->n_params; p++) {
        uint32_t g = m->param_off[p], n = poet_param_elems(m, p);
        float *w = buf->params + g;
        if (!poet_param_trained(m, p))
            continue;
        if (m->opt == POET_OPT_ADAM)
            poet_adam(n, e->lr, poet_attr_f32(a[BETA1]), poet_attr_f32(a[BETA2]), poet_attr_f32(a[EPS]), step,
                      w, buf->grads + g, buf->opt_state + g, buf->opt_state + m->train_elems + g);
        else if (m->opt == POET_OPT_MOMENTUM)
            poet_sgd_momentum(n, e->lr, poet_attr_f32(a[MOMENTUM]), step, w, buf->grads + g, buf->opt_state + g);
        else
            poet_sgd(n, e->lr, w, buf->grads + g);
    }
}
