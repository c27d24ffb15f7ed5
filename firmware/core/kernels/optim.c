/* Optimizers: one update rule per element, run by the optimizer pass over a stored gradient or by a
 * backward kernel the moment it finishes an element (the update in backward), so both give the same
 * bits. Conventions are in kernels.h. */
#include "kernels.h"

#include <math.h>

/* 1 - p^t for a p just below 1 (Adam's beta2 = 0.999): powf rounds p^t near 1, and 1 - p^t then
 * cancels to a few digits (2e-5 off at t = 2, every update 3e-6 off, ten times PyTorch's own float32
 * error, which computes its bias corrections in double). Through log1p and expm1 it keeps float32's
 * precision; p - 1 is exact for p in [0.5, 2]. */
static float one_minus_pow(float p, float t)
{
    return -expm1f(t * log1pf(p - 1.0f));
}

void poet_update_init(poet_update_t *u, int opt, float lr, float p1, float p2, float p3, uint32_t step)
{
    float t = (float)step;
    u->opt = (uint8_t)opt;
    u->step = step;
    u->lr = lr;
    u->momentum = p1;
    u->beta1 = p1;
    u->beta2 = p2;
    u->eps = p3;
    u->step_size = 0.0f;
    u->bc2_sqrt = 1.0f;
    if (opt == POET_OPT_ADAM) {
        u->step_size = lr / one_minus_pow(p1, t);
        u->bc2_sqrt = sqrtf(one_minus_pow(p2, t));
    }
}

static void rule(const poet_update_t *u, float *w, float *s0, float *s1, float g)
{
    switch (u->opt) {
    case POET_OPT_MOMENTUM:
        /* torch starts the buffer as a copy of the first gradient, not as momentum * 0 + g, so a
         * garbage-filled buffer is harmless on step 1 */
        *s0 = u->step <= 1 ? g : u->momentum * *s0 + g;
        *w -= u->lr * *s0;
        break;
    case POET_OPT_ADAM:
        /* torch's lerp(m, g, 1 - beta1) form, m + (1 - beta1) (g - m), for the same rounding */
        *s0 += (1.0f - u->beta1) * (g - *s0);
        *s1 = *s1 * u->beta2 + (1.0f - u->beta2) * g * g;
        *w -= u->step_size * (*s0 / (sqrtf(*s1) / u->bc2_sqrt + u->eps));
        break;
    default:
        *w -= u->lr * g;
        break;
    }
}

void poet_optimize(const poet_update_t *u, uint32_t n, float *w, float *g, float *s0, float *s1)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        rule(u, w + i, s0 ? s0 + i : 0, s1 ? s1 + i : 0, g[i]);
        g[i] = 0.0f;
    }
}

void poet_grad_apply(const poet_grad_t *d, uint32_t i, float gi)
{
    rule(d->u, d->w + i, d->s0 ? d->s0 + i : 0, d->s1 ? d->s1 + i : 0, gi);
}
