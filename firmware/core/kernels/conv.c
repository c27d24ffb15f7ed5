/* 2-d convolution (fp32): kh x kw kernels, zero padding, one stride, groups. Conventions are in
 * kernels.h; the specification is reference/conv.c, whose bits these give exactly: each output (and
 * each gradient element) sums the same terms in the same order, and only these two things differ:
 *  - the padding's terms are skipped as ranges of taps (or of outputs) computed once, not tested per
 *    term, so the innermost loops are plain;
 *  - four channels that share their other operand are computed together: one load of it per four
 *    multiply-adds (output channels of one group forward and for the weight gradient, input channels
 *    of one group for the input gradient). A depthwise convolution's forward runs a plane at a time
 *    (depthwise_fwd); its backward runs the one-channel loops. */
#include "conv_taps.h"
#include "kernels.h"

int poet_conv2d_out(int H, int k, int stride, int pad)
{
    return (H + 2 * pad - k) / stride + 1;
}

int poet_conv2d_rows(const poet_conv_t *cv)
{
    return (cv->H + cv->ph + cv->pb - cv->kh) / cv->stride + 1;
}

/* One depthwise output from the taps [ky0, ky1) x [kx0, kx1) of the window at xr (its row ky0, column 0)
 * and wr (the channel's kernel row ky0). */
static inline float dw_one(const float *xr, const float *wr, int W, int kw, int ky0, int ky1, int kx0, int kx1)
{
    float a = 0.0f;
    int ky, kx;
    for (ky = ky0; ky < ky1; ky++, xr += W, wr += kw)
        for (kx = kx0; kx < kx1; kx++)
            a += xr[kx] * wr[kx];
    return a;
}

/* A depthwise convolution (one input and one output channel per group, the MobileNet kind), a plane at a
 * time. Where a 3x3 window lies wholly inside the input (all but the border), its nine taps come from
 * registers and its sum is one straight run; the border outputs sum the taps that reach inside. The
 * terms and their order are the reference's (ky, then kx, ascending; the bias last). */
static void depthwise_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y)
{
    const int C = cv->C, H = cv->H, W = cv->W, kh = cv->kh, kw = cv->kw, stride = cv->stride;
    const int ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    const long HW = (long)H * W, kk = (long)kh * kw;
    int n, c, oy, ox, ky0, ky1, kx0, kx1, lo, hi;
    whole_windows(stride, pw, kw, W, Wo, &lo, &hi); /* the columns whose window is whole */
    for (n = 0; n < cv->B; n++)
        for (c = 0; c < C; c++) {
            const float *xc = x + ((long)n * C + c) * HW, *wc = w + c * kk;
            const float bias = b ? b[c] : 0.0f;
            float *yo = y + ((long)n * C + c) * Ho * Wo;
            for (oy = 0; oy < Ho; oy++, yo += Wo) {
                const float *xrow;
                int whole;
                taps(oy, stride, ph, kh, H, &ky0, &ky1);
                xrow = xc + (long)(oy * stride + ky0 - ph) * W - pw;
                whole = kh == 3 && kw == 3 && ky0 == 0 && ky1 == 3;
                for (ox = 0; ox < Wo; ox++) {
                    const float *xr = xrow + (long)ox * stride;
                    float a;
                    if (whole && ox == lo) { /* the inside of the row, in one run */
                        const float w0 = wc[0], w1 = wc[1], w2 = wc[2], w3 = wc[3], w4 = wc[4], w5 = wc[5];
                        const float w6 = wc[6], w7 = wc[7], w8 = wc[8];
                        for (; ox < hi; ox++, xr += stride) {
                            const float *r1 = xr + W, *r2 = r1 + W;
                            a = 0.0f;
                            a += xr[0] * w0; a += xr[1] * w1; a += xr[2] * w2;
                            a += r1[0] * w3; a += r1[1] * w4; a += r1[2] * w5;
                            a += r2[0] * w6; a += r2[1] * w7; a += r2[2] * w8;
                            yo[ox] = b ? a + bias : a;
                        }
                        if (ox == Wo)
                            break;
                        xr = xrow + (long)ox * stride;
                    }
                    taps(ox, stride, pw, kw, W, &kx0, &kx1);
                    a = dw_one(xr, wc + (long)ky0 * kw, W, kw, ky0, ky1, kx0, kx1);
                    yo[ox] = b ? a + bias : a;
                }
            }
        }
}

void poet_conv2d_ex_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    const int Cg = C / cv->groups, Og = O / cv->groups, pointwise = BLOCKED(kh == 1 && kw == 1 && ph == 0 && pw == 0);
    const long HW = (long)H * W, kk = (long)kh * kw, wo = (long)Cg * kk; /* wo: one output channel's weights */
    int n, o, oy, ox, c, ky, kx, ky0, ky1, kx0, kx1;
    if (BLOCKED(Cg == 1 && Og == 1)) {
        depthwise_fwd(cv, x, w, b, y);
        return;
    }
    for (n = 0; n < B; n++)
        for (o = 0; o < O;) {
            const int grp = o / Og, four = FOUR(o, (grp + 1) * Og);
            const float *xg = x + ((long)n * C + (long)grp * Cg) * HW;
            for (oy = 0; oy < Ho; oy++) {
                taps(oy, stride, ph, kh, H, &ky0, &ky1);
                for (ox = 0; ox < Wo; ox++) {
                    float *yo = y + (((long)n * O + o) * Ho + oy) * Wo + ox;
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                    int whole3;
                    taps(ox, stride, pw, kw, W, &kx0, &kx1);
                    whole3 = kw == 3 && kx0 == 0 && kx1 == 3;
                    if (pointwise) { /* a 1x1 kernel without padding: one plain loop over the channels */
                        const float *xp = xg + (long)oy * stride * W + (long)ox * stride, *w0 = w + (long)o * wo;
                        if (four) {
                            const float *w1 = w0 + wo, *w2 = w1 + wo, *w3 = w2 + wo;
                            for (c = 0; c < Cg; c++, xp += HW) {
                                float v = *xp;
                                a0 += v * w0[c]; a1 += v * w1[c]; a2 += v * w2[c]; a3 += v * w3[c];
                            }
                        } else {
                            for (c = 0; c < Cg; c++, xp += HW)
                                a0 += *xp * w0[c];
                        }
                    }
                    if (four && whole3 && kh == 3 && ky0 == 0 && ky1 == 3) {
                        /* a whole 3x3 window, four channels: its nine taps a channel in one straight run */
                        const float *xr = xg + (long)(oy * stride - ph) * W + ox * stride - pw, *w0 = w + (long)o * wo;
                        for (c = 0; c < Cg; c++, xr += HW, w0 += 9) {
                            const float *w1 = w0 + wo, *w2 = w1 + wo, *w3 = w2 + wo, *r1 = xr + W, *r2 = r1 + W;
                            float v;
#define TAP(r, i, k) (v = r[i], a0 += v * w0[k], a1 += v * w1[k], a2 += v * w2[k], a3 += v * w3[k])
                            TAP(xr, 0, 0), TAP(xr, 1, 1), TAP(xr, 2, 2);
                            TAP(r1, 0, 3), TAP(r1, 1, 4), TAP(r1, 2, 5);
                            TAP(r2, 0, 6), TAP(r2, 1, 7), TAP(r2, 2, 8);
#undef TAP
                        }
                    } else {
                        for (c = 0; !pointwise && c < Cg; c++)
                            for (ky = ky0; ky < ky1; ky++) {
                                const float *xr = xg + c * HW + (long)(oy * stride + ky - ph) * W + ox * stride - pw;
                                const float *w0 = w + (long)o * wo + c * kk + (long)ky * kw;
                                if (four && whole3) { /* a whole row of a 3-wide window, unrolled */
                                    const float *w1 = w0 + wo, *w2 = w1 + wo, *w3 = w2 + wo;
                                    float v = xr[0];
                                    a0 += v * w0[0]; a1 += v * w1[0]; a2 += v * w2[0]; a3 += v * w3[0];
                                    v = xr[1];
                                    a0 += v * w0[1]; a1 += v * w1[1]; a2 += v * w2[1]; a3 += v * w3[1];
                                    v = xr[2];
                                    a0 += v * w0[2]; a1 += v * w1[2]; a2 += v * w2[2]; a3 += v * w3[2];
                                } else if (four) {
                                    const float *w1 = w0 + wo, *w2 = w1 + wo, *w3 = w2 + wo;
                                    for (kx = kx0; kx < kx1; kx++) {
                                        float v = xr[kx];
                                        a0 += v * w0[kx]; a1 += v * w1[kx]; a2 += v * w2[kx]; a3 += v * w3[kx];
                                    }
                                } else {
                                    for (kx = kx0; kx < kx1; kx++)
                                        a0 += xr[kx] * w0[kx];
                                }
                            }
                    }
                    yo[0] = b ? a0 + b[o] : a0;
                    if (four) {
                        const long step = (long)Ho * Wo;
                        yo[step] = b ? a1 + b[o + 1] : a1;
                        yo[2 * step] = b ? a2 + b[o + 2] : a2;
                        yo[3 * step] = b ? a3 + b[o + 3] : a3;
                    }
                }
            }
            o += four ? 4 : 1;
        }
}

/* gx[n,c,iy,ix] = sum over o of c's group, ky, kx with (iy - ky + ph) = oy s and (ix - kx + pw) = ox s of
 * g[n,o,oy,ox] w[o, c mod Cg, ky, kx]: gathered per input pixel, so every element is written once. Only the
 * outputs o_begin..o_end-1 (w holding their weights): a channel whose group has none is left alone, and one
 * whose group has earlier outputs continues the sum gx holds, in the same order (kernels.h). */
void poet_conv2d_gx_rows(const poet_conv_t *cv, int o_begin, int o_end, const float *g, const float *w, float *gx)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    const int Cg = C / cv->groups, Og = O / cv->groups;
    const long HoWo = (long)Ho * Wo, kk = (long)kh * kw, HW = (long)H * W;
    int n, c, o, iy, ix, ky, kx, ky0, ky1, kx0, kx1;
    for (n = 0; n < B; n++)
        for (c = 0; c < C;) {
            const int grp = c / Cg, four = FOUR(c, (grp + 1) * Cg);
            const int o0 = grp * Og > o_begin ? grp * Og : o_begin, o1 = grp * Og + Og < o_end ? grp * Og + Og : o_end;
            const int more = o0 > grp * Og; /* the sum so far is in gx */
            if (o0 >= o1) {
                c += four ? 4 : 1;
                continue;
            }
            for (iy = 0; iy < H; iy++) {
                ky0 = taps_from(iy, stride, ph, kh, Ho, &ky1);
                for (ix = 0; ix < W; ix++) {
                    float *gxo = gx + (((long)n * C + c) * H + iy) * W + ix;
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                    if (more) {
                        a0 = gxo[0];
                        if (four)
                            a1 = gxo[HW], a2 = gxo[2 * HW], a3 = gxo[3 * HW];
                    }
                    kx0 = taps_from(ix, stride, pw, kw, Wo, &kx1);
                    for (o = o0; o < o1; o++) {
                        /* each tap step moves the output a row (a column) back: no division per term */
                        const float *gr = g + ((long)n * O + o) * HoWo + (long)((iy - ky0 + ph) / stride) * Wo +
                                          (ix - kx0 + pw) / stride;
                        const float *wr = w + ((long)(o - o_begin) * Cg + (c - grp * Cg)) * kk + (long)ky0 * kw;
                        for (ky = ky0; ky < ky1; ky += stride, gr -= Wo, wr += (long)stride * kw) {
                            const float *gv = gr;
                            if (four) {
                                for (kx = kx0; kx < kx1; kx += stride, gv--) {
                                    float v = *gv;
                                    a0 += v * wr[kx]; a1 += v * wr[kx + kk]; a2 += v * wr[kx + 2 * kk];
                                    a3 += v * wr[kx + 3 * kk];
                                }
                            } else {
                                for (kx = kx0; kx < kx1; kx += stride, gv--)
                                    a0 += *gv * wr[kx];
                            }
                        }
                    }
                    gxo[0] = a0;
                    if (four) {
                        gxo[HW] = a1;
                        gxo[2 * HW] = a2;
                        gxo[3 * HW] = a3;
                    }
                }
            }
            c += four ? 4 : 1;
        }
}

/* dW[o,c,ky,kx] = sum over n, oy, ox of g[n,o,oy,ox] x[n, group(o) + c, oy s + ky - ph, ox s + kx - pw] */
static void conv_grad_weight(const poet_conv_t *cv, const float *g, const float *x, const poet_grad_t *dw)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_out(H, kh, stride, ph), Wo = poet_conv2d_out(W, kw, stride, pw);
    const int Cg = C / cv->groups, Og = O / cv->groups;
    const int Ck = cv->ck > 0 && cv->ck < Cg ? cv->ck : Cg;
    const long HoWo = (long)Ho * Wo, HW = (long)H * W, wo = (long)Ck * kh * kw; /* dw is the share's (kernels.h) */
    const int Ok = cv->ck > 0 && cv->ck < O && Cg == 1 && Og == 1 ? cv->ck : O; /* a depthwise one's share */
    int n, o, c, ky, kx, oy, ox, oy0, oy1, ox0, ox1;
    for (o = 0; o < Ok;) {
        const int grp = o / Og, four = FOUR(o, (grp + 1) * Og);
        for (c = 0; c < Ck; c++)
            for (ky = 0; ky < kh; ky++) {
                outputs(ky, stride, ph, H, Ho, &oy0, &oy1);
                for (kx = 0; kx < kw; kx++) {
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                    uint32_t at = (uint32_t)((((long)o * Ck + c) * kh + ky) * kw + kx);
                    outputs(kx, stride, pw, W, Wo, &ox0, &ox1);
                    for (n = 0; n < B; n++) {
                        const float *xc = x + ((long)n * C + (long)grp * Cg + c) * HW + kx - pw;
                        const float *gn = g + ((long)n * O + o) * HoWo;
                        for (oy = oy0; oy < oy1; oy++) {
                            const float *xr = xc + (long)(oy * stride + ky - ph) * W;
                            const float *g0 = gn + (long)oy * Wo;
                            if (four) {
                                const float *g1 = g0 + HoWo, *g2 = g1 + HoWo, *g3 = g2 + HoWo;
                                for (ox = ox0; ox < ox1; ox++) {
                                    float v = xr[ox * stride];
                                    a0 += g0[ox] * v; a1 += g1[ox] * v; a2 += g2[ox] * v; a3 += g3[ox] * v;
                                }
                            } else {
                                for (ox = ox0; ox < ox1; ox++)
                                    a0 += g0[ox] * xr[ox * stride];
                            }
                        }
                    }
                    poet_grad_put(dw, at, a0);
                    if (four) {
                        poet_grad_put(dw, at + (uint32_t)wo, a1);
                        poet_grad_put(dw, at + 2u * (uint32_t)wo, a2);
                        poet_grad_put(dw, at + 3u * (uint32_t)wo, a3);
                    }
                }
            }
        o += four ? 4 : 1;
    }
}

void poet_conv2d_ex_bwd(const poet_conv_t *cv, const float *g, const float *x, const float *w,
                        const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    const int O = cv->O, HoWo = poet_conv2d_out(cv->H, cv->kh, cv->stride, cv->ph) *
                                poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    int n, o, i;
    if (gx) /* before the weight gradient, whose update in backward changes w */
        poet_conv2d_gx_rows(cv, 0, O, g, w, gx);
    if (dw)
        conv_grad_weight(cv, g, x, dw);
    for (o = 0; db && o < O; o++) {
        float acc = 0.0f;
        for (n = 0; n < cv->B; n++) {
            const float *gn = g + ((long)n * O + o) * HoWo;
            for (i = 0; i < HoWo; i++)
                acc += gn[i];
        }
        poet_grad_put(db, (uint32_t)o, acc);
    }
}
