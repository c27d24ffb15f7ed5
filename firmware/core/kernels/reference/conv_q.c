/* The specification of kernels/lowp.c's int8 convolution: one output element at a time, the padding
 * tested per term. Integer sums are exact in any order, so the optimised kernel must give these bits
 * whatever its order (tests/test_kernels_opt.py). Conventions are in kernels.h. */
#include "../kernels.h"
#include "reference.h"

void poet_ref_conv2d_q_fwd_rows(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float x_scale,
                                const int8_t *wq, float w_scale, const float *b, int relu, const float *y_scale,
                                void *y)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    int Ho = poet_conv2d_rows(cv), Wo = poet_conv2d_out(W, kw, stride, pw);
    int Cg = C / cv->groups, Og = O / cv->groups;
    int n, o, oy, ox, c, ky, kx;
    float s = x_scale * w_scale, inv = y_scale ? 1.0f / *y_scale : 0.0f;
    for (n = 0; n < B; n++)
        for (o = o_begin; o < o_end; o++) {
            const int8_t *xg = xq + ((long)n * C + (long)(o / Og) * Cg) * H * W;
            for (oy = 0; oy < Ho; oy++)
                for (ox = 0; ox < Wo; ox++) {
                    int32_t acc = 0;
                    float v;
                    for (c = 0; c < Cg; c++) {
                        const int8_t *xc = xg + (long)c * H * W;
                        const int8_t *wc = wq + ((long)(o - o_begin) * Cg + c) * kh * kw;
                        for (ky = 0; ky < kh; ky++) {
                            int iy = oy * stride + ky - ph;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (kx = 0; kx < kw; kx++) {
                                int ix = ox * stride + kx - pw;
                                if (ix < 0 || ix >= W)
                                    continue;
                                acc += (int32_t)xc[(long)iy * W + ix] * (int32_t)wc[ky * kw + kx];
                            }
                        }
                    }
                    /* one rounding for the scale, one for the bias: the reference does the same */
                    v = (float)acc * s;
                    if (b)
                        v = v + b[o];
                    poet_ref_q_put(y, (((long)n * O + o) * Ho + oy) * Wo + ox, v, relu, y_scale != 0, inv);
                }
        }
}

