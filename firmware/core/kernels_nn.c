/* The kernels for the op set beyond the first CNN one: normalisation, the transformer ops,
 * elementwise arithmetic, layout changes and the stateful optimizers. Conventions are in kernels.h. */
#include "kernels.h"

#include <math.h>

/* Written out because C99's math.h has no M_SQRT1_2 / M_2_SQRTPI, and as float literals so
 * nothing is promoted to double (software double on the Cortex-M4F). */
#define INV_SQRT2 0.70710678118654752f   /* 1 / sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143268f /* 1 / sqrt(2 pi), the standard normal density at 0 */
#define SQRT_2_OVER_PI 0.79788456080286536f
#define GELU_TANH_KAPPA 0.044715f

/* ---- pointwise -------------------------------------------------------------------------------- */

void poet_gelu_fwd(int n, int tanh_approx, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++) {
        float v = x[i];
        if (tanh_approx) {
            float inner = SQRT_2_OVER_PI * (v + GELU_TANH_KAPPA * v * v * v);
            y[i] = 0.5f * v * (1.0f + tanhf(inner));
        } else {
            y[i] = v * 0.5f * (1.0f + erff(v * INV_SQRT2));
        }
    }
}

void poet_gelu_bwd(int n, int tanh_approx, const float *g, const float *x, float *gx)
{
    int i;
    for (i = 0; i < n; i++) {
        float v = x[i], d;
        if (tanh_approx) {
            float v2 = v * v;
            float t = tanhf(SQRT_2_OVER_PI * (v + GELU_TANH_KAPPA * v2 * v));
            d = 0.5f * (1.0f + t) +
                0.5f * v * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_KAPPA * v2);
        } else {
            /* d/dx x Phi(x) = Phi(x) + x phi(x) */
            float cdf = 0.5f * (1.0f + erff(v * INV_SQRT2));
            d = cdf + v * INV_SQRT_2PI * expf(-0.5f * v * v);
        }
        gx[i] = g[i] * d;
    }
}

void poet_tanh_fwd(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = tanhf(x[i]);
}

void poet_tanh_bwd(int n, const float *g, const float *y, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = g[i] * (1.0f - y[i] * y[i]);
}

void poet_sigmoid_fwd(int n, const float *x, float *y)
{
    int i;
    /* expf(-x) overflows to inf for very negative x, and 1 / inf is the right limit, 0 */
    for (i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

void poet_sigmoid_bwd(int n, const float *g, const float *y, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = g[i] * y[i] * (1.0f - y[i]);
}

void poet_hardtanh_fwd(int n, float lo, float hi, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

void poet_hardtanh_bwd(int n, float lo, float hi, const float *g, const float *x, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = (x[i] > lo && x[i] < hi) ? g[i] : 0.0f;
}

/* ---- reductions ------------------------------------------------------------------------------- */

void poet_mean_fwd(int outer, int r, int inner, const float *x, float *y)
{
    int o, j, i;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const float *p = x + (long)o * r * inner + i;
            float acc = 0.0f;
            for (j = 0; j < r; j++)
                acc += p[(long)j * inner];
            y[(long)o * inner + i] = acc / (float)r;
        }
}

void poet_mean_bwd(int outer, int r, int inner, const float *g, float *gx)
{
    int o, j, i;
    for (o = 0; o < outer; o++)
        for (j = 0; j < r; j++)
            for (i = 0; i < inner; i++)
                gx[((long)o * r + j) * inner + i] = g[(long)o * inner + i] / (float)r;
}

void poet_global_avgpool2d_fwd(int B, int C, int HW, const float *x, float *y)
{
    poet_mean_fwd(B * C, HW, 1, x, y);
}

void poet_global_avgpool2d_bwd(int B, int C, int HW, const float *g, float *gx)
{
    poet_mean_bwd(B * C, HW, 1, g, gx);
}

/* ---- batch norm ------------------------------------------------------------------------------- */

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
                                const float *w, const float *mean, const float *rstd, float *dw,
                                float *db, float *gx)
{
    int c, n, i;
    float cnt = (float)B * (float)HW;
    for (c = 0; c < C; c++) {
        float m = 0.0f, r = 0.0f, sum_g = channel_sum(B, C, HW, c, g), dot = 0.0f;
        if (db)
            db[c] += sum_g;
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
        if (dw)
            dw[c] += dot * r;
        if (gx) {
            float gmean = sum_g / cnt, proj = r * r * dot / cnt, scale = w ? r * w[c] : r;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                for (i = 0; i < HW; i++)
                    gx[off + i] = (g[off + i] - gmean - (x[off + i] - m) * proj) * scale;
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

void poet_batchnorm2d_bwd_eval(int B, int C, int HW, float eps, const float *g, const float *x,
                               const float *w, const float *run_mean, const float *run_var,
                               float *dw, float *db, float *gx)
{
    int c, n, i;
    for (c = 0; c < C; c++) {
        float r = 1.0f / sqrtf(run_var[c] + eps);
        if (db)
            db[c] += channel_sum(B, C, HW, c, g);
        if (dw) {
            float dot = 0.0f;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                float part = 0.0f;
                for (i = 0; i < HW; i++)
                    part += g[off + i] * (x[off + i] - run_mean[c]);
                dot += part;
            }
            dw[c] += dot * r;
        }
        if (gx) {
            float scale = w ? r * w[c] : r;
            for (n = 0; n < B; n++) {
                long off = ((long)n * C + c) * HW;
                for (i = 0; i < HW; i++)
                    gx[off + i] = g[off + i] * scale;
            }
        }
    }
}

/* ---- layer norm ------------------------------------------------------------------------------- */

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

/* ---- softmax ---------------------------------------------------------------------------------- */

void poet_softmax_fwd(int rows, int D, const float *x, float *y)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (long)r * D;
        float *yr = y + (long)r * D, mx = xr[0], s = 0.0f, inv;
        /* shifting by the row max keeps expf finite; the result is the same */
        for (j = 1; j < D; j++)
            if (xr[j] > mx)
                mx = xr[j];
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

/* ---- matmul ----------------------------------------------------------------------------------- */

void poet_matmul_fwd(int batch, int M, int K, int N, const float *a, const float *bm, float *y)
{
    int t, i, j, k;
    for (t = 0; t < batch; t++) {
        const float *at = a + (long)t * M * K, *bt = bm + (long)t * K * N;
        float *yt = y + (long)t * M * N;
        for (i = 0; i < M; i++)
            for (j = 0; j < N; j++) {
                float acc = 0.0f;
                for (k = 0; k < K; k++)
                    acc += at[(long)i * K + k] * bt[(long)k * N + j];
                yt[(long)i * N + j] = acc;
            }
    }
}

void poet_matmul_bwd_a(int batch, int M, int K, int N, const float *g, const float *bm, float *ga)
{
    int t, i, j, k;
    for (t = 0; t < batch; t++) {
        const float *gt = g + (long)t * M * N, *bt = bm + (long)t * K * N;
        float *at = ga + (long)t * M * K;
        for (i = 0; i < M; i++)
            for (k = 0; k < K; k++) {
                float acc = 0.0f;
                for (j = 0; j < N; j++)
                    acc += gt[(long)i * N + j] * bt[(long)k * N + j];
                at[(long)i * K + k] = acc;
            }
    }
}

void poet_matmul_bwd_b(int batch, int M, int K, int N, const float *g, const float *a, float *gb)
{
    int t, i, j, k;
    for (t = 0; t < batch; t++) {
        const float *gt = g + (long)t * M * N, *at = a + (long)t * M * K;
        float *bt = gb + (long)t * K * N;
        for (k = 0; k < K; k++)
            for (j = 0; j < N; j++) {
                float acc = 0.0f;
                for (i = 0; i < M; i++)
                    acc += at[(long)i * K + k] * gt[(long)i * N + j];
                bt[(long)k * N + j] = acc;
            }
    }
}

/* ---- elementwise ------------------------------------------------------------------------------ */

void poet_add_fwd(int n, const float *a, const float *b, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void poet_sub_fwd(int n, const float *a, const float *b, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = a[i] - b[i];
}

void poet_mul_fwd(int n, const float *a, const float *b, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

/* Both operand gradients in one loop, so either may alias g: element i of g is read before
 * element i of ga or gb is written, and nothing after reads it. */
static void signed_copy2(int n, const float *g, float *ga, float *gb, float sign_b)
{
    int i;
    for (i = 0; i < n; i++) {
        float v = g[i];
        if (ga)
            ga[i] = v;
        if (gb)
            gb[i] = sign_b * v;
    }
}

void poet_add_bwd(int n, const float *g, float *ga, float *gb)
{
    signed_copy2(n, g, ga, gb, 1.0f);
}

void poet_sub_bwd(int n, const float *g, float *ga, float *gb)
{
    signed_copy2(n, g, ga, gb, -1.0f);
}

void poet_mul_bwd(int n, const float *g, const float *other, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = g[i] * other[i];
}

static void bcast_fwd(int outer, int C, int inner, const float *x, const float *v, float sign,
                      float *y)
{
    int o, c, i;
    for (o = 0; o < outer; o++)
        for (c = 0; c < C; c++) {
            long off = ((long)o * C + c) * inner;
            float s = sign * v[c];
            for (i = 0; i < inner; i++)
                y[off + i] = x[off + i] + s;
        }
}

static void bcast_bwd(int outer, int C, int inner, const float *g, float sign, float *gx,
                      float *gv)
{
    int o, c, i;
    if (gv)
        for (c = 0; c < C; c++) {
            float acc = 0.0f;
            for (o = 0; o < outer; o++) {
                const float *p = g + ((long)o * C + c) * inner;
                for (i = 0; i < inner; i++)
                    acc += p[i];
            }
            gv[c] = sign * acc;
        }
    if (gx && gx != g)
        poet_copy(outer * C * inner, g, gx);
}

void poet_add_bcast_fwd(int outer, int C, int inner, const float *x, const float *v, float *y)
{
    bcast_fwd(outer, C, inner, x, v, 1.0f, y);
}

void poet_sub_bcast_fwd(int outer, int C, int inner, const float *x, const float *v, float *y)
{
    /* x + (-v) is x - v exactly: negation is exact in IEEE arithmetic */
    bcast_fwd(outer, C, inner, x, v, -1.0f, y);
}

void poet_add_bcast_bwd(int outer, int C, int inner, const float *g, float *gx, float *gv)
{
    bcast_bwd(outer, C, inner, g, 1.0f, gx, gv);
}

void poet_sub_bcast_bwd(int outer, int C, int inner, const float *g, float *gx, float *gv)
{
    bcast_bwd(outer, C, inner, g, -1.0f, gx, gv);
}

void poet_scale_fwd(int n, float mul, float add, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i] * mul + add;
}

void poet_scale_bwd(int n, float mul, const float *g, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = g[i] * mul;
}

/* ---- embedding, select, layout ---------------------------------------------------------------- */

void poet_embedding_fwd(int n, int V, int D, const int32_t *ids, const float *w, float *y)
{
    int i, j;
    for (i = 0; i < n; i++) {
        float *yr = y + (long)i * D;
        int32_t id = ids[i];
        if (id < 0 || id >= V) {
            for (j = 0; j < D; j++)
                yr[j] = 0.0f;
            continue;
        }
        for (j = 0; j < D; j++)
            yr[j] = w[(long)id * D + j];
    }
}

void poet_embedding_bwd(int n, int V, int D, const int32_t *ids, const float *g, float *dw)
{
    int i, j;
    for (i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= V)
            continue;
        for (j = 0; j < D; j++)
            dw[(long)id * D + j] += g[(long)i * D + j];
    }
}

void poet_select_fwd(int B, int S, int D, int index, const float *x, float *y)
{
    int b;
    for (b = 0; b < B; b++)
        poet_copy(D, x + ((long)b * S + index) * D, y + (long)b * D);
}

void poet_select_bwd(int B, int S, int D, int index, const float *g, float *gx)
{
    int b, s, j;
    for (b = 0; b < B; b++)
        for (s = 0; s < S; s++) {
            float *p = gx + ((long)b * S + s) * D;
            for (j = 0; j < D; j++)
                p[j] = s == index ? g[(long)b * D + j] : 0.0f;
        }
}

/* Walks y (the permuted layout) in order and x through its strides; the backward is the same walk
 * with the copy reversed, so the inverse permutation never has to be formed. */
static void permute4(const int *d, const int *p, const float *src, float *dst, int backward)
{
    long sx[4], st[4], yo = 0;
    int e[4], i0, i1, i2, i3, j;
    sx[3] = 1;
    for (j = 2; j >= 0; j--)
        sx[j] = sx[j + 1] * d[j + 1];
    for (j = 0; j < 4; j++) {
        e[j] = d[p[j]];
        st[j] = sx[p[j]];
    }
    for (i0 = 0; i0 < e[0]; i0++)
        for (i1 = 0; i1 < e[1]; i1++)
            for (i2 = 0; i2 < e[2]; i2++)
                for (i3 = 0; i3 < e[3]; i3++, yo++) {
                    long xo = i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
                    if (backward)
                        dst[xo] = src[yo];
                    else
                        dst[yo] = src[xo];
                }
}

void poet_permute4_fwd(const int *d, const int *p, const float *x, float *y)
{
    permute4(d, p, x, y, 0);
}

void poet_permute4_bwd(const int *d, const int *p, const float *g, float *gx)
{
    permute4(d, p, g, gx, 1);
}

void poet_transpose_last2_fwd(int b, int m, int n, const float *x, float *y)
{
    int d[4] = {1, b, m, n}, p[4] = {0, 1, 3, 2};
    permute4(d, p, x, y, 0);
}

void poet_transpose_last2_bwd(int b, int m, int n, const float *g, float *gx)
{
    int d[4] = {1, b, m, n}, p[4] = {0, 1, 3, 2};
    permute4(d, p, g, gx, 1);
}

void poet_transpose12_fwd(int d0, int d1, int d2, int d3, const float *x, float *y)
{
    int d[4] = {d0, d1, d2, d3}, p[4] = {0, 2, 1, 3};
    permute4(d, p, x, y, 0);
}

void poet_transpose12_bwd(int d0, int d1, int d2, int d3, const float *g, float *gx)
{
    int d[4] = {d0, d1, d2, d3}, p[4] = {0, 2, 1, 3};
    permute4(d, p, g, gx, 1);
}

/* ---- optimizers ------------------------------------------------------------------------------- */

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
