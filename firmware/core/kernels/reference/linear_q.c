/* The specification of kernels/lowp.c's int8 and int8-weight dense kernels: one output element at a
 * time. The optimised kernels must give these bits exactly (tests/test_kernels_opt.py). Conventions
 * are in kernels.h. */
#include "../kernels.h"
#include "reference.h"

void poet_ref_linear_i8_fwd(int B, int in, int out, const int8_t *xq, float x_scale, const int8_t *wq,
                            float w_scale, const float *b, float *y)
{
    int i, o, k;
    float s = x_scale * w_scale;
    for (i = 0; i < B; i++) {
        const int8_t *xr = xq + (long)i * in;
        for (o = 0; o < out; o++) {
            const int8_t *wr = wq + (long)o * in;
            int32_t acc = 0;
            for (k = 0; k < in; k++)
                acc += (int32_t)xr[k] * (int32_t)wr[k];
            /* one rounding for the scale, one for the bias: the reference does the same */
            y[(long)i * out + o] = b ? (float)acc * s + b[o] : (float)acc * s;
        }
    }
}

void poet_ref_linear_w8_fwd(int B, int in, int out, int o_begin, int o_end, const float *x, const int8_t *wq,
                            float w_scale, const float *b, float *y)
{
    int i, o, k;
    for (i = 0; i < B; i++) {
        const float *xr = x + (long)i * in;
        for (o = o_begin; o < o_end; o++) {
            const int8_t *wr = wq + (long)(o - o_begin) * in;
            float acc = 0.0f;
            for (k = 0; k < in; k++)
                acc += xr[k] * ((float)wr[k] * w_scale);
            y[(long)i * out + o] = b ? acc + b[o] : acc;
        }
    }
}

void poet_ref_linear_w8_bwd_gx(int B, int in, int out, const float *g, const int8_t *wq, float w_scale,
                               float *gx)
{
    int i, o, k;
    for (i = 0; i < B; i++)
        for (k = 0; k < in; k++) {
            float acc = 0.0f;
            for (o = 0; o < out; o++)
                acc += g[(long)i * out + o] * ((float)wq[(long)o * in + k] * w_scale);
            gx[(long)i * in + k] = acc;
        }
}
