/* Losses: cross entropy over logits (log-softmax, mean reduction), mean squared and mean absolute
 * error. Conventions are in kernels.h. */
#include "kernels.h"

#include <math.h>

/* Row max and log of the shifted exp-sum: log_softmax(x)_j = x_j - mx - lse, as PyTorch. */
static void row_lse(int classes, const float *row, float *mx, float *lse)
{
    int j;
    float m = row[0], s = 0.0f;
    for (j = 1; j < classes; j++)
        if (row[j] > m)
            m = row[j];
    for (j = 0; j < classes; j++)
        s += expf(row[j] - m);
    *mx = m;
    *lse = logf(s);
}

float poet_cross_entropy_fwd(int B, int classes, const float *logits, const int32_t *labels)
{
    int i;
    float total = 0.0f, mx, lse;
    for (i = 0; i < B; i++) {
        const float *row = logits + (long)i * classes;
        row_lse(classes, row, &mx, &lse);
        total += -((row[labels[i]] - mx) - lse);
    }
    return total / (float)B;
}

void poet_cross_entropy_bwd(int B, int classes, const float *logits, const int32_t *labels,
                            float *gx)
{
    int i, j;
    float mx, lse, inv = 1.0f / (float)B;
    for (i = 0; i < B; i++) {
        const float *row = logits + (long)i * classes;
        float *grow = gx + (long)i * classes;
        row_lse(classes, row, &mx, &lse);
        for (j = 0; j < classes; j++) {
            float p = expf((row[j] - mx) - lse);
            /* same rounding as PyTorch's log_softmax backward: g - exp(logp) * sum(g) */
            grow[j] = (j == labels[i] ? -inv : 0.0f) + p * inv;
        }
    }
}

/* ---- regression losses ---------------------------------------------------------------------- */

float poet_mse_fwd(int n, const float *p, const float *t)
{
    int i;
    float acc = 0.0f;
    for (i = 0; i < n; i++) {
        float d = p[i] - t[i];
        acc += d * d;
    }
    return acc / (float)n;
}

void poet_mse_bwd(int n, const float *p, const float *t, float *gp)
{
    int i;
    float norm = 2.0f / (float)n;
    for (i = 0; i < n; i++)
        gp[i] = norm * (p[i] - t[i]);
}

float poet_l1_fwd(int n, const float *p, const float *t)
{
    int i;
    float acc = 0.0f;
    for (i = 0; i < n; i++)
        acc += fabsf(p[i] - t[i]);
    return acc / (float)n;
}

void poet_l1_bwd(int n, const float *p, const float *t, float *gp)
{
    int i;
    float norm = 1.0f / (float)n;
    for (i = 0; i < n; i++) {
        float d = p[i] - t[i];
        gp[i] = d > 0.0f ? norm : d < 0.0f ? -norm : 0.0f;
    }
}
