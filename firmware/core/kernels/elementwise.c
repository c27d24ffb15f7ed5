/* Elementwise kernels: activations, arithmetic between two tensors (or a tensor and a
 * broadcast vector) and the affine scale. Conventions are in kernels.h. */
#include "kernels.h"
#include "../util.h"

#include <math.h>

/* Written out because C99's math.h has no M_SQRT1_2 / M_2_SQRTPI, and as float literals so
 * nothing is promoted to double (software double on the Cortex-M4F). */
#define INV_SQRT2 0.70710678118654752f   /* 1 / sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143268f /* 1 / sqrt(2 pi), the standard normal density at 0 */
#define SQRT_2_OVER_PI 0.79788456080286536f
#define GELU_TANH_KAPPA 0.044715f

/* ---- activations ---------------------------------------------------------------------------- */

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

void poet_silu_fwd(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}

void poet_silu_bwd(int n, const float *g, const float *x, float *gx)
{
    int i;
    for (i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-x[i]));
        gx[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* relu6(x + 3) / 6, the hard sigmoid MobileNetV3 uses */
static float hard_sigmoid(float x)
{
    float r = x + 3.0f;
    r = r < 0.0f ? 0.0f : r > 6.0f ? 6.0f : r;
    return r / 6.0f;
}

void poet_hardswish_fwd(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++) {
        float r = x[i] + 3.0f;
        r = r < 0.0f ? 0.0f : r > 6.0f ? 6.0f : r;
        y[i] = x[i] * r / 6.0f;
    }
}

void poet_hardswish_bwd(int n, const float *g, const float *x, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = x[i] <= -3.0f ? 0.0f : x[i] < 3.0f ? g[i] * (x[i] / 3.0f + 0.5f) : g[i];
}

void poet_hardsigmoid_fwd(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = hard_sigmoid(x[i]);
}

void poet_hardsigmoid_bwd(int n, const float *g, const float *x, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = x[i] > -3.0f && x[i] < 3.0f ? g[i] / 6.0f : 0.0f;
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

void poet_act_mask(int n, float lo, float hi, int bounded, const float *y, uint32_t *bits)
{
    int i, j;
    for (i = 0; i < n; i += 32) {
        uint32_t w = 0;
        for (j = 0; j < 32 && i + j < n; j++)
            if (y[i + j] > lo && (!bounded || y[i + j] < hi))
                w |= 1u << j;
        bits[i >> 5] = w;
    }
}

void poet_mask_bwd(int n, const float *g, const uint32_t *bits, float *gx)
{
    int i;
    for (i = 0; i < n; i++)
        gx[i] = (bits[i >> 5] >> (i & 31)) & 1u ? g[i] : 0.0f;
}

/* ---- arithmetic ----------------------------------------------------------------------------- */

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

static void bcast_sum(int outer, int C, int inner, const float *g, const float *x, float sign, float *gv);

static void bcast_bwd(int outer, int C, int inner, const float *g, float sign, float *gx,
                      float *gv)
{
    if (gv)
        bcast_sum(outer, C, inner, g, 0, sign, gv);
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

static void bcast_mul(int outer, int C, int inner, const float *x, const float *v, float *y)
{
    int o, c, i;
    for (o = 0; o < outer; o++)
        for (c = 0; c < C; c++) {
            long off = ((long)o * C + c) * inner;
            float s = v[c];
            for (i = 0; i < inner; i++)
                y[off + i] = x[off + i] * s;
        }
}

/* gv[c] = the sum over outer and inner of g (x NULL) or of g * x, times sign */
static void bcast_sum(int outer, int C, int inner, const float *g, const float *x, float sign, float *gv)
{
    int o, c, i;
    for (c = 0; c < C; c++) {
        float acc = 0.0f;
        for (o = 0; o < outer; o++) {
            long off = ((long)o * C + c) * inner;
            for (i = 0; i < inner; i++)
                acc += x ? g[off + i] * x[off + i] : g[off + i];
        }
        gv[c] = sign * acc;
    }
}

/* b[outer, inner] over a[outer, r, inner] in the v[C] over x[outer', C, inner'] form of the loops
 * above: one call when inner = 1 (v[outer] over x[outer, r], squeeze-and-excitation's scale over its
 * maps) or outer = 1 (v[inner] over x[r, inner], the trailing-shape case), else one per outer row. */
static void rep_fwd(int outer, int r, int inner, const float *a, const float *b, float sign, int mul_op,
                    float *y)
{
    long o, block = (long)r * inner;
    if (inner == 1) {
        if (mul_op)
            bcast_mul(1, outer, r, a, b, y);
        else
            bcast_fwd(1, outer, r, a, b, sign, y);
        return;
    }
    for (o = 0; o < outer; o++) {
        if (mul_op)
            bcast_mul(r, inner, 1, a + o * block, b + o * inner, y + o * block);
        else
            bcast_fwd(r, inner, 1, a + o * block, b + o * inner, sign, y + o * block);
    }
}

static void rep_sum(int outer, int r, int inner, const float *g, const float *a, float sign, float *gb)
{
    long o, block = (long)r * inner;
    if (inner == 1) {
        bcast_sum(1, outer, r, g, a, sign, gb);
        return;
    }
    for (o = 0; o < outer; o++)
        bcast_sum(r, inner, 1, g + o * block, a ? a + o * block : 0, sign, gb + o * inner);
}

void poet_add_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y)
{
    rep_fwd(outer, r, inner, a, b, 1.0f, 0, y);
}

void poet_sub_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y)
{
    rep_fwd(outer, r, inner, a, b, -1.0f, 0, y);
}

void poet_mul_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y)
{
    rep_fwd(outer, r, inner, a, b, 1.0f, 1, y);
}

void poet_add_rep_bwd(int outer, int r, int inner, const float *g, float *gb)
{
    rep_sum(outer, r, inner, g, 0, 1.0f, gb);
}

void poet_sub_rep_bwd(int outer, int r, int inner, const float *g, float *gb)
{
    rep_sum(outer, r, inner, g, 0, -1.0f, gb);
}

void poet_mul_rep_bwd_b(int outer, int r, int inner, const float *g, const float *a, float *gb)
{
    rep_sum(outer, r, inner, g, a, 1.0f, gb);
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


uint32_t poet_dropout_key(uint32_t salt, uint32_t step)
{
    return poet_mix32(poet_mix32(salt) ^ step);
}

void poet_dropout(int n, uint32_t key, uint32_t threshold, float scale, int row, const float *x, float *y)
{
    int i, end;
    uint32_t draw;
    if (row <= 1) {
        for (i = 0; i < n; i++)
            y[i] = (poet_mix32((uint32_t)i ^ key) >> 8) >= threshold ? x[i] * scale : 0.0f;
        return;
    }
    /* one draw a row: hashed once, applied to the row's elements */
    for (i = 0, draw = 0; i < n; draw++) {
        int kept = (poet_mix32(draw ^ key) >> 8) >= threshold;
        end = n - i > row ? i + row : n;
        for (; i < end; i++)
            y[i] = kept ? x[i] * scale : 0.0f;
    }
}
