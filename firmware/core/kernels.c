#include "kernels.h"

#include <math.h>

void poet_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                     float *y)
{
    int i, o, k;
    for (i = 0; i < B; i++) {
        const float *xr = x + (long)i * in;
        for (o = 0; o < out; o++) {
            const float *wr = w + (long)o * in;
            float acc = 0.0f;
            for (k = 0; k < in; k++)
                acc += xr[k] * wr[k];
            y[(long)i * out + o] = b ? acc + b[o] : acc;
        }
    }
}

void poet_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                     float *dw, float *db, float *gx)
{
    int i, o, k;
    /* dW[o,k] += sum_i g[i,o] x[i,k]; none for a frozen weight (dw NULL), as in the conv */
    for (o = 0; o < out; o++) {
        for (k = 0; dw && k < in; k++) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o] * x[(long)i * in + k];
            dw[(long)o * in + k] += acc;
        }
        if (db) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o];
            db[o] += acc;
        }
    }
    if (gx) {
        /* gx[i,k] = sum_o g[i,o] W[o,k] */
        for (i = 0; i < B; i++) {
            for (k = 0; k < in; k++) {
                float acc = 0.0f;
                for (o = 0; o < out; o++)
                    acc += g[(long)i * out + o] * w[(long)o * in + k];
                gx[(long)i * in + k] = acc;
            }
        }
    }
}

int poet_conv2d_out(int H, int k, int stride, int pad)
{
    return (H + 2 * pad - k) / stride + 1;
}

/* The loop orders are those of the original stride-1 kernels, so a stride-1 ungrouped convolution
 * rounds exactly as before and schedules stay bit-identical across firmware versions. */
void poet_conv2d_ex_fwd(int B, int C, int H, int W, int O, int k, int stride, int pad, int groups,
                        const float *x, const float *w, const float *b, float *y)
{
    int Ho = poet_conv2d_out(H, k, stride, pad), Wo = poet_conv2d_out(W, k, stride, pad);
    int Cg = C / groups, Og = O / groups;
    int n, o, oy, ox, c, ky, kx;
    for (n = 0; n < B; n++)
        for (o = 0; o < O; o++) {
            const float *xg = x + ((long)n * C + (long)(o / Og) * Cg) * H * W;
            for (oy = 0; oy < Ho; oy++)
                for (ox = 0; ox < Wo; ox++) {
                    float acc = 0.0f;
                    for (c = 0; c < Cg; c++) {
                        const float *xc = xg + (long)c * H * W;
                        const float *wc = w + ((long)o * Cg + c) * k * k;
                        for (ky = 0; ky < k; ky++) {
                            int iy = oy * stride + ky - pad;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (kx = 0; kx < k; kx++) {
                                int ix = ox * stride + kx - pad;
                                if (ix < 0 || ix >= W)
                                    continue;
                                acc += xc[(long)iy * W + ix] * wc[ky * k + kx];
                            }
                        }
                    }
                    y[(((long)n * O + o) * Ho + oy) * Wo + ox] = b ? acc + b[o] : acc;
                }
        }
}

void poet_conv2d_ex_bwd(int B, int C, int H, int W, int O, int k, int stride, int pad, int groups,
                        const float *g, const float *x, const float *w, float *dw, float *db,
                        float *gx)
{
    int Ho = poet_conv2d_out(H, k, stride, pad), Wo = poet_conv2d_out(W, k, stride, pad);
    int Cg = C / groups, Og = O / groups;
    int n, o, oy, ox, c, ky, kx, iy, ix;
    for (o = 0; o < O; o++) {
        /* dW[o,c,ky,kx] += sum_{n,oy,ox} g[n,o,oy,ox] x[n, group(o) + c, oy s+ky-p, ox s+kx-p] */
        for (c = 0; dw && c < Cg; c++)
            for (ky = 0; ky < k; ky++)
                for (kx = 0; kx < k; kx++) {
                    float acc = 0.0f;
                    for (n = 0; n < B; n++) {
                        const float *gn = g + ((long)n * O + o) * Ho * Wo;
                        const float *xc = x + ((long)n * C + (long)(o / Og) * Cg + c) * H * W;
                        for (oy = 0; oy < Ho; oy++) {
                            iy = oy * stride + ky - pad;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (ox = 0; ox < Wo; ox++) {
                                ix = ox * stride + kx - pad;
                                if (ix < 0 || ix >= W)
                                    continue;
                                acc += gn[(long)oy * Wo + ox] * xc[(long)iy * W + ix];
                            }
                        }
                    }
                    dw[(((long)o * Cg + c) * k + ky) * k + kx] += acc;
                }
        if (db) {
            float acc = 0.0f;
            for (n = 0; n < B; n++) {
                const float *gn = g + ((long)n * O + o) * Ho * Wo;
                for (oy = 0; oy < Ho * Wo; oy++)
                    acc += gn[oy];
            }
            db[o] += acc;
        }
    }
    if (!gx)
        return;
    /* Gathered per input pixel rather than scattered per output pixel, so every gx element is
     * written once from a register and gx needs no zeroing pass:
     * gx[n,c,iy,ix] = sum over o of c's group, ky, kx with (iy - ky + p) = oy s and
     * (ix - kx + p) = ox s of g[n,o,oy,ox] W[o, c mod Cg, ky, kx]. */
    for (n = 0; n < B; n++)
        for (c = 0; c < C; c++) {
            int grp = c / Cg, o0 = grp * Og;
            for (iy = 0; iy < H; iy++)
                for (ix = 0; ix < W; ix++) {
                    float acc = 0.0f;
                    for (o = o0; o < o0 + Og; o++) {
                        const float *gn = g + ((long)n * O + o) * Ho * Wo;
                        const float *wc = w + ((long)o * Cg + (c - grp * Cg)) * k * k;
                        for (ky = 0; ky < k; ky++) {
                            int ty = iy - ky + pad;
                            if (ty < 0 || ty % stride != 0)
                                continue;
                            oy = ty / stride;
                            if (oy >= Ho)
                                continue;
                            for (kx = 0; kx < k; kx++) {
                                int tx = ix - kx + pad;
                                if (tx < 0 || tx % stride != 0)
                                    continue;
                                ox = tx / stride;
                                if (ox >= Wo)
                                    continue;
                                acc += gn[(long)oy * Wo + ox] * wc[ky * k + kx];
                            }
                        }
                    }
                    gx[(((long)n * C + c) * H + iy) * W + ix] = acc;
                }
        }
}

void poet_conv2d_fwd(int B, int C, int H, int W, int O, int k, int pad, const float *x,
                     const float *w, const float *b, float *y)
{
    poet_conv2d_ex_fwd(B, C, H, W, O, k, 1, pad, 1, x, w, b, y);
}

void poet_conv2d_bwd(int B, int C, int H, int W, int O, int k, int pad, const float *g,
                     const float *x, const float *w, float *dw, float *db, float *gx)
{
    poet_conv2d_ex_bwd(B, C, H, W, O, k, 1, pad, 1, g, x, w, dw, db, gx);
}

void poet_relu_fwd(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void poet_relu_bwd(int n, const float *g, const float *y, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

/* Index (within the window, row-major) of the first maximum, as PyTorch picks it. */
static int window_argmax(const float *xc, int W, int oy, int ox)
{
    const float *p = xc + (long)(2 * oy) * W + 2 * ox;
    float v[4];
    int best = 0, j;
    v[0] = p[0];
    v[1] = p[1];
    v[2] = p[W];
    v[3] = p[W + 1];
    for (j = 1; j < 4; j++)
        if (v[j] > v[best] || (v[j] != v[j] && v[best] == v[best]))
            best = j;
    return best;
}

void poet_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y)
{
    int Ho = H / 2, Wo = W / 2, bc, oy, ox;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++) {
                int a = window_argmax(xc, W, oy, ox);
                y[((long)bc * Ho + oy) * Wo + ox] = xc[(long)(2 * oy + a / 2) * W + 2 * ox + a % 2];
            }
    }
}

void poet_maxpool2d_bwd(int B, int C, int H, int W, const float *g, const float *x, float *gx)
{
    int Ho = H / 2, Wo = W / 2, bc, oy, ox;
    long i;
    for (i = 0; i < (long)B * C * H * W; i++)
        gx[i] = 0.0f;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        float *gc = gx + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++) {
                int a = window_argmax(xc, W, oy, ox);
                gc[(long)(2 * oy + a / 2) * W + 2 * ox + a % 2] += g[((long)bc * Ho + oy) * Wo + ox];
            }
    }
}

void poet_copy(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i];
}

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

void poet_sgd(uint32_t n, float lr, float *w, float *g)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        w[i] -= lr * g[i];
        g[i] = 0.0f;
    }
}
