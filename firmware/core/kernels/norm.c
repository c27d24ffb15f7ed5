/* Normalisation: batch norm (training and frozen statistics), layer norm, softmax and log-softmax.
 * Conventions are in kernels.h. */
#include "kernels.h"

#include <math.h>

/* ---- batch norm ----------------------------------------------------------------------------- */

/* Sums over one channel of x[B, C, HW] go plane by plane into a partial sum first: a two-level sum
 * whose rounding error grows with max(B, HW) instead of B*HW, at no cost. */
static float channel_sum(int B, int C, int HW, int c, const float *x)
{
    int n, i;
    float total = 0.0f;
    for (n = 0; n < B; n++) {
        const float *p = x + ((long)n * C + c) * HW;
        float part = 0.0f;
        for (i = 0; i < HW; i++)
            part += p[i];
        total += part;
    }
    return total;
}

/* Mean and biased variance of channel c, two-pass (a one-pass E[x^2] - E[x]^2 cancels badly in
 * float when the mean is large against the spread). */
static void channel_moments(int B, int C, int HW, int c, const float *x, float *mean, float *var)
{
    int n, i;
    float cnt = (float)B * (float)HW, m = channel_sum(B, C, HW, c, x) / cnt, total = 0.0f;
    for (n = 0; n < B; n++) {
        const float *p = x + ((long)n * C + c) * HW;
        float part = 0.0f;
        for (i = 0; i < HW; i++)
            part += (p[i] - m) * (p[i] - m);
        total += part;
    }
    *mean = m;
    *var = total / cnt;
}

void poet_batchnorm2d_stats(int B, int C, int HW, float eps, const float *x, float *mean,
                            float *rstd)
{
    int c;
    float m, v;
    for (c = 0; c < C; c++) {
        channel_moments(B, C, HW, c, x, &m, &v);
        mean[c] = m;
        rstd[c] = 1.0f / sqrtf(v + eps);
    }
}

/* y = (x - mean) * (rstd * w) + b over channel c. */
static void channel_affine(int B, int C, int HW, int c, float mean, float scale, float shift,
                           const float *x, float *y)
{
    int n, i;
    for (n = 0; n < B; n++) {
        long off = ((long)n * C + c) * HW;
        for (i = 0; i < HW; i++)
            y[off + i] = (x[off + i] - mean) * scale + shift;
    }
}

void poet_batchnorm2d_fwd_train(int B, int C, int HW, float eps, float momentum, const float *x,
                                const float *w, const float *b, float *y, float *save_mean,
                                float *save_rstd, float *run_mean, float *run_var)
{
    int c;
    long cnt = (long)B * HW;
    for (c = 0; c < C; c++) {
        float m, v, r;
        channel_moments(B, C, HW, c, x, &m, &v);
        r = 1.0f / sqrtf(v + eps);
        channel_affine(B, C, HW, c, m, w ? r * w[c] : r, b ? b[c] : 0.0f, x, y);
        if (save_mean)
            save_mean[c] = m;
        if (save_rstd)
            save_rstd[c] = r;
        if (run_mean)
            run_mean[c] = momentum * m + (1.0f - momentum) * run_mean[c];
        if (run_var) {
            /* torch refuses one value per channel in training; keep the biased value rather
             * than divide by zero */
            float unbiased = cnt > 1 ? v * ((float)cnt / (float)(cnt - 1)) : v;
            run_var[c] = momentum * unbiased + (1.0f - momentum) * run_var[c];
        }
    }
}

void poet_batchnorm2d_bwd_train(int B, int C, int HW, float eps, const float *g, const float *x,
                                const float *w, const float *mean, const float *rstd, const poet_grad_t *dw,
                                const poet_grad_t *db, float *gx)
{
    int c, n, i;
    float cnt = (float)B * (float)HW;
    for (c = 0; c < C; c++) {
        float m = 0.0f, r = 0.0f, sum_g = channel_sum(B, C, HW, c, g), dot = 0.0f;
        if (db)
            poet_grad_put(db, (uint32_t)c, sum_g);
        if (!dw && !gx)
            continue;
        if (mean && rstd) {
            m = mean[c];
            r = rstd[c];
        } else {
            float v;
            channel_moments(B, C, HW, c, x, &m, &v);
            r = 1.0f / sqrtf(v + eps);
        }
        /* dot = sum g (x - mean): dL/dw is dot * rstd, and the input gradient needs it to take
         * out the part of g that only moved the batch variance */
        for (n = 0; n < B; n++) {
            long off = ((long)n * C + c) * HW;
            float part = 0.0f;
            for (i = 0; i < HW; i++)
                part += g[off + i] * (x[off + i] - m);
            dot += part;
        }
        if (gx) {
            float gmean = sum_g / cnt, proj = r * r * dot / cnt, scale = w ? r * w[c] : r;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                for (i = 0; i < HW; i++)
                    gx[off + i] = (g[off + i] - gmean - (x[off + i] - m) * proj) * scale;
            }
        }
        if (dw) /* after gx read w[c]: an update in backward changes it */
            poet_grad_put(dw, (uint32_t)c, dot * r);
    }
}

/* Channel c's batch statistics and the affine map the batch norm applies: y = (x - m) * scale + shift. */
static void channel_norm(int B, int C, int HW, int c, float eps, const float *x, const float *w, const float *b,
                         float *m, float *v, float *r, float *scale, float *shift)
{
    channel_moments(B, C, HW, c, x, m, v);
    *r = 1.0f / sqrtf(*v + eps);
    *scale = w ? *r * w[c] : *r;
    *shift = b ? b[c] : 0.0f;
}

/* Batch norm with batch statistics, ReLU and the mean over HW: y[B, C], a channel at a time, the
 * normalised map never stored. The running statistics move as in poet_batchnorm2d_fwd_train. */
void poet_bn_relu_mean_fwd(int B, int C, int HW, float eps, float momentum, const float *x, const float *w,
                           const float *b, float *y, float *run_mean, float *run_var)
{
    int c, n, i;
    long cnt = (long)B * HW;
    for (c = 0; c < C; c++) {
        float m, v, r, scale, shift;
        channel_norm(B, C, HW, c, eps, x, w, b, &m, &v, &r, &scale, &shift);
        for (n = 0; n < B; n++) {
            const float *p = x + ((long)n * C + c) * HW;
            float acc = 0.0f;
            for (i = 0; i < HW; i++) {
                float z = (p[i] - m) * scale + shift;
                acc += z > 0.0f ? z : 0.0f;
            }
            y[(long)n * C + c] = acc / (float)HW;
        }
        if (run_mean)
            run_mean[c] = momentum * m + (1.0f - momentum) * run_mean[c];
        if (run_var) {
            float unbiased = cnt > 1 ? v * ((float)cnt / (float)(cnt - 1)) : v;
            run_var[c] = momentum * unbiased + (1.0f - momentum) * run_var[c];
        }
    }
}

/* Its backward from g = dL/dy[B, C]: the mean spreads g[n, c] / HW over the channel's map, the ReLU
 * passes it where the normalised value was positive, and the batch norm's gradients follow as in
 * poet_batchnorm2d_bwd_train, with the statistics recomputed from x. */
void poet_bn_relu_mean_bwd(int B, int C, int HW, float eps, const float *g, const float *x, const float *w,
                           const float *b, const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    int c, n, i;
    float cnt = (float)B * (float)HW;
    for (c = 0; c < C; c++) {
        float m, v, r, scale, shift, sum_g = 0.0f, dot = 0.0f;
        channel_norm(B, C, HW, c, eps, x, w, b, &m, &v, &r, &scale, &shift);
        for (n = 0; n < B; n++) {
            const float *p = x + ((long)n * C + c) * HW;
            float gn = g[(long)n * C + c] / (float)HW, part_g = 0.0f, part_dot = 0.0f;
            for (i = 0; i < HW; i++)
                if ((p[i] - m) * scale + shift > 0.0f) {
                    part_g += gn;
                    part_dot += gn * (p[i] - m);
                }
            sum_g += part_g;
            dot += part_dot;
        }
        /* w[c] and b[c] were read into scale and shift: an update in backward may change them now */
        if (db)
            poet_grad_put(db, (uint32_t)c, sum_g);
        if (dw)
            poet_grad_put(dw, (uint32_t)c, dot * r);
        if (gx) {
            float gmean = sum_g / cnt, proj = r * r * dot / cnt;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                float gn = g[(long)n * C + c] / (float)HW;
                for (i = 0; i < HW; i++) {
                    float xc = x[off + i] - m, gz = xc * scale + shift > 0.0f ? gn : 0.0f;
                    gx[off + i] = (gz - gmean - xc * proj) * scale;
                }
            }
        }
    }
}

void poet_batchnorm2d_fwd_eval(int B, int C, int HW, float eps, const float *x, const float *w,
                               const float *b, const float *run_mean, const float *run_var,
                               float *y)
{
    int c;
    for (c = 0; c < C; c++) {
        float r = 1.0f / sqrtf(run_var[c] + eps);
        channel_affine(B, C, HW, c, run_mean[c], w ? r * w[c] : r, b ? b[c] : 0.0f, x, y);
    }
}

/* bn_relu_mean in evaluation mode: the running statistics normalise, nothing is updated. */
void poet_bn_relu_mean_fwd_eval(int B, int C, int HW, float eps, const float *x, const float *w,
                                const float *b, const float *run_mean, const float *run_var, float *y)
{
    int c, n, i;
    for (c = 0; c < C; c++) {
        float r = 1.0f / sqrtf(run_var[c] + eps);
        float scale = w ? r * w[c] : r, shift = b ? b[c] : 0.0f;
        for (n = 0; n < B; n++) {
            const float *p = x + ((long)n * C + c) * HW;
            float acc = 0.0f;
            for (i = 0; i < HW; i++) {
                float z = (p[i] - run_mean[c]) * scale + shift;
                acc += z > 0.0f ? z : 0.0f;
            }
            y[(long)n * C + c] = acc / (float)HW;
        }
    }
}

void poet_batchnorm2d_bwd_eval(int B, int C, int HW, float eps, const float *g, const float *x,
                               const float *w, const float *run_mean, const float *run_var,
                               const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    int c, n, i;
    for (c = 0; c < C; c++) {
        float r = 1.0f / sqrtf(run_var[c] + eps);
        if (gx) {
            float scale = w ? r * w[c] : r;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                for (i = 0; i < HW; i++)
                    gx[off + i] = g[off + i] * scale;
            }
        }
        if (db)
            poet_grad_put(db, (uint32_t)c, channel_sum(B, C, HW, c, g));
        if (dw) { /* after gx read w[c]: an update in backward changes it */
            float dot = 0.0f;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                float part = 0.0f;
                for (i = 0; i < HW; i++)
                    part += g[off + i] * (x[off + i] - run_mean[c]);
                dot += part;
            }
            poet_grad_put(dw, (uint32_t)c, dot * r);
        }
    }
}

/* ---- layer norm ----------------------------------------------------------------------------- */

static void row_moments(int D, const float *row, float eps, float *mean, float *rstd)
{
    int j;
    float s = 0.0f, m, v = 0.0f;
    for (j = 0; j < D; j++)
        s += row[j];
    m = s / (float)D;
    for (j = 0; j < D; j++)
        v += (row[j] - m) * (row[j] - m);
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)D + eps);
}

void poet_layernorm_fwd(int rows, int D, float eps, const float *x, const float *w, const float *b,
                        float *y, float *mean, float *rstd)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (long)r * D;
        float *yr = y + (long)r * D, m, s;
        row_moments(D, xr, eps, &m, &s);
        for (j = 0; j < D; j++) {
            float h = (xr[j] - m) * s;
            yr[j] = (w ? h * w[j] : h) + (b ? b[j] : 0.0f);
        }
        if (mean)
            mean[r] = m;
        if (rstd)
            rstd[r] = s;
    }
}

void poet_layernorm_bwd(int rows, int D, float eps, const float *g, const float *x, const float *w,
                        const float *mean, const float *rstd, float *dw, float *db, float *gx)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (long)r * D, *gr = g + (long)r * D;
        float m, s;
        if (db)
            for (j = 0; j < D; j++)
                db[j] += gr[j];
        if (!dw && !gx)
            continue;
        if (mean && rstd) {
            m = mean[r];
            s = rstd[r];
        } else {
            row_moments(D, xr, eps, &m, &s);
        }
        if (dw)
            for (j = 0; j < D; j++)
                dw[j] += gr[j] * (xr[j] - m) * s;
        if (gx) {
            /* with gh = g w, the gradient through the row's mean and variance is
             * gx = rstd (gh - mean(gh) - xhat mean(gh xhat)) */
            float sum_gh = 0.0f, sum_ghx = 0.0f, inv_d = 1.0f / (float)D;
            float *gxr = gx + (long)r * D;
            for (j = 0; j < D; j++) {
                float gh = w ? gr[j] * w[j] : gr[j];
                sum_gh += gh;
                sum_ghx += gh * (xr[j] - m) * s;
            }
            for (j = 0; j < D; j++) {
                float gh = w ? gr[j] * w[j] : gr[j];
                gxr[j] = s * (gh - sum_gh * inv_d - (xr[j] - m) * s * (sum_ghx * inv_d));
            }
        }
    }
}

/* ---- softmax -------------------------------------------------------------------------------- */

/* Softmax and log-softmax shift a row by its max: expf stays finite, the result is the same. */
static float row_max(const float *xr, int D)
{
    float mx = xr[0];
    int j;
    for (j = 1; j < D; j++)
        if (xr[j] > mx)
            mx = xr[j];
    return mx;
}

void poet_softmax_fwd(int rows, int D, const float *x, float *y)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (long)r * D;
        float *yr = y + (long)r * D, mx = row_max(xr, D), s = 0.0f, inv;
        for (j = 0; j < D; j++) {
            yr[j] = expf(xr[j] - mx);
            s += yr[j];
        }
        inv = 1.0f / s;
        for (j = 0; j < D; j++)
            yr[j] *= inv;
    }
}

void poet_softmax_bwd(int rows, int D, const float *g, const float *y, float *gx)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *gr = g + (long)r * D, *yr = y + (long)r * D;
        float *gxr = gx + (long)r * D, dot = 0.0f;
        for (j = 0; j < D; j++)
            dot += gr[j] * yr[j];
        for (j = 0; j < D; j++)
            gxr[j] = yr[j] * (gr[j] - dot);
    }
}

/* ---- log-softmax ---------------------------------------------------------------------------- */

void poet_log_softmax_fwd(int rows, int D, const float *x, float *y)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (long)r * D;
        float *yr = y + (long)r * D, mx = row_max(xr, D), s = 0.0f, lse;
        for (j = 0; j < D; j++)
            s += expf(xr[j] - mx);
        /* (x - max) - log(s), not x - (max + log(s)): the shifted values are small, so the
         * subtraction does not lose the low bits of a large max */
        lse = logf(s);
        for (j = 0; j < D; j++)
            yr[j] = (xr[j] - mx) - lse;
    }
}

void poet_log_softmax_bwd(int rows, int D, const float *g, const float *y, float *gx)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *gr = g + (long)r * D, *yr = y + (long)r * D;
        float *gxr = gx + (long)r * D, sum = 0.0f;
        for (j = 0; j < D; j++)
            sum += gr[j];
        for (j = 0; j < D; j++)
            gxr[j] = gr[j] - expf(yr[j]) * sum;
    }
}
