/* Optimizers: each updates w from g, then zeroes g for the next step's accumulation. Conventions are in kernels.h. */
#include "kernels.h"

#include <math.h>

void poet_sgd(uint32_t n, float lr, float *w, float *g)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        w[i] -= lr * g[i];
        g[i] = 0.0f;
    }
}

void poet_sgd_momentum(uint32_t n, float lr, float momentum, uint32_t step, float *w, float *g,
                       float *buf)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        /* torch starts the buffer as a copy of the first gradient, not as momentum * 0 + g, so a
         * garbage-filled buffer is harmless on step 1 */
        buf[i] = step <= 1 ? g[i] : momentum * buf[i] + g[i];
        w[i] -= lr * buf[i];
        g[i] = 0.0f;
    }
}

void poet_adam(uint32_t n, float lr, float beta1, float beta2, float eps, uint32_t step, float *w,
               float *g, float *m, float *v)
{
    uint32_t i;
    float t = (float)step;
    float step_size = lr / (1.0f - powf(beta1, t));
    float bc2_sqrt = sqrtf(1.0f - powf(beta2, t));
    for (i = 0; i < n; i++) {
        float gi = g[i];
        /* torch's lerp(m, g, 1 - beta1) form, m + (1 - beta1) (g - m), for the same rounding */
        m[i] += (1.0f - beta1) * (gi - m[i]);
        v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        w[i] -= step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
        g[i] = 0.0f;
    }
}
