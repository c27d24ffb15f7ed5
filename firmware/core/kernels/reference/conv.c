/* The specification of kernels/conv.c: 2-d convolution (fp32; kh x kw kernels, zero padding, one stride,
 * groups) as plain loops, one output element at a time, the padding tested per term. The optimised kernels
 * must give these bits exactly (tests/test_kernels_opt.py). Conventions are in kernels.h. */
#include "../kernels.h"
#include "reference.h"

/* The loop orders are those of the original stride-1 kernels, so a stride-1 ungrouped convolution
 * rounds exactly as before and schedules stay bit-identical across firmware versions. */
void poet_ref_conv2d_ex_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    int Cg = C / cv->groups, Og = O / cv->groups;
    int n, o, oy, ox, c, ky, kx;
    for (n = 0; n < B; n++)
        for (o = 0; o < O; o++) {
            const float *xg = x + ((long)n * C + (long)(o / Og) * Cg) * H * W;
            for (oy = 0; oy < Ho; oy++)
                for (ox = 0; ox < Wo; ox++) {
                    float acc = 0.0f;
                    for (c = 0; c < Cg; c++) {
                        const float *xc = xg + (long)c * H * W;
                        const float *wc = w + ((long)o * Cg + c) * kh * kw;
                        for (ky = 0; ky < kh; ky++) {
                            int iy = oy * stride + ky - ph;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (kx = 0; kx < kw; kx++) {
                                int ix = ox * stride + kx - pw;
                                if (ix < 0 || ix >= W)
                                    continue;
                                acc += xc[(long)iy * W + ix] * wc[ky * kw + kx];
                            }
                        }
                    }
                    y[(((long)n * O + o) * Ho + oy) * Wo + ox] = b ? acc + b[o] : acc;
                }
        }
}

void poet_ref_conv2d_ex_bwd(const poet_conv_t *cv, const float *g, const float *x, const float *w,
                            const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    int Cg = C / cv->groups, Og = O / cv->groups;
    /* a share (kernels.h ck): the first ck input channels of each group, or a depthwise conv's first ck channels */
    int depthwise = Cg == 1 && Og == 1;
    int Ck = !depthwise && cv->ck > 0 && cv->ck < Cg ? cv->ck : Cg;
    int Ok = depthwise && cv->ck > 0 && cv->ck < O ? cv->ck : O;
    int n, o, oy, ox, c, ky, kx, iy, ix;
    if (gx) /* before the weight gradient, whose update in backward changes w */
        poet_ref_conv2d_gx_rows(cv, 0, O, g, w, gx);
    for (o = 0; o < O; o++) {
        /* dW[o,c,ky,kx] = sum_{n,oy,ox} g[n,o,oy,ox] x[n, group(o) + c, oy s+ky-p, ox s+kx-p] */
        for (c = 0; dw && o < Ok && c < Ck; c++)
            for (ky = 0; ky < kh; ky++)
                for (kx = 0; kx < kw; kx++) {
                    float acc = 0.0f;
                    for (n = 0; n < B; n++) {
                        const float *gn = g + ((long)n * O + o) * Ho * Wo;
                        const float *xc = x + ((long)n * C + (long)(o / Og) * Cg + c) * H * W;
                        for (oy = 0; oy < Ho; oy++) {
                            iy = oy * stride + ky - ph;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (ox = 0; ox < Wo; ox++) {
                                ix = ox * stride + kx - pw;
                                if (ix < 0 || ix >= W)
                                    continue;
                                acc += gn[(long)oy * Wo + ox] * xc[(long)iy * W + ix];
                            }
                        }
                    }
                    poet_grad_put(dw, (uint32_t)((((long)o * Ck + c) * kh + ky) * kw + kx), acc);
                }
        if (db) {
            float acc = 0.0f;
            for (n = 0; n < B; n++) {
                const float *gn = g + ((long)n * O + o) * Ho * Wo;
                for (oy = 0; oy < Ho * Wo; oy++)
                    acc += gn[oy];
            }
            poet_grad_put(db, (uint32_t)o, acc);
        }
    }
}

/* Gathered per input pixel rather than scattered per output pixel, so every gx element is written once
 * from a register and gx needs no zeroing pass: gx[n,c,iy,ix] = sum over o of c's group, ky, kx with
 * (iy - ky + p) = oy s and (ix - kx + p) = ox s of g[n,o,oy,ox] W[o, c mod Cg, ky, kx]; here over the
 * outputs o_begin..o_end-1 only, continuing the sum gx holds when c's group has outputs before them. */
void poet_ref_conv2d_gx_rows(const poet_conv_t *cv, int o_begin, int o_end, const float *g, const float *w,
                             float *gx)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    int Cg = C / cv->groups, Og = O / cv->groups;
    int n, o, oy, ox, c, ky, kx, iy, ix;
    for (n = 0; n < B; n++)
        for (c = 0; c < C; c++) {
            int grp = c / Cg, o0 = grp * Og, o1 = o0 + Og;
            int more = o_begin > o0;
            if (o_begin > o0)
                o0 = o_begin;
            if (o_end < o1)
                o1 = o_end;
            for (iy = 0; o0 < o1 && iy < H; iy++)
                for (ix = 0; ix < W; ix++) {
                    float *out = gx + (((long)n * C + c) * H + iy) * W + ix;
                    float acc = more ? *out : 0.0f;
                    for (o = o0; o < o1; o++) {
                        const float *gn = g + ((long)n * O + o) * Ho * Wo;
                        const float *wc = w + ((long)(o - o_begin) * Cg + (c - grp * Cg)) * kh * kw;
                        for (ky = 0; ky < kh; ky++) {
                            int ty = iy - ky + ph;
                            if (ty < 0 || ty % stride != 0)
                                continue;
                            oy = ty / stride;
                            if (oy >= Ho)
                                continue;
                            for (kx = 0; kx < kw; kx++) {
                                int tx = ix - kx + pw;
                                if (tx < 0 || tx % stride != 0)
                                    continue;
                                ox = tx / stride;
                                if (ox >= Wo)
                                    continue;
                                acc += gn[(long)oy * Wo + ox] * wc[ky * kw + kx];
                            }
                        }
                    }
                    *out = acc;
                }
        }
}
