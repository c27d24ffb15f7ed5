/* Pooling and mean reductions. Conventions are in kernels.h. */
#include "kernels.h"

/* ---- max pooling ---------------------------------------------------------------------------- */

#ifdef POET_SMALL_CODE
/* The ESP32-C3, whose code runs from the SRAM its pool would have, builds the specification itself: the
 * loops below are 540 B larger there. */
#define POET_REF_NAME(f) poet_##f
#include "reference/pool.c"
#else
/* 2x2 windows, stride 2. A window's value and position is its first maximum, as PyTorch picks it (a NaN
 * wins over a number; reference/pool.c, whose bits these are): the four values from a row pair read
 * once, the comparisons inline, pointers walking instead of an index per output. */
static inline int argmax4(float v0, float v1, float v2, float v3, float *m)
{
    int best = 0;
    float b = v0;
#define TAKE(v, j) if (v > b || (v != v && b == b)) b = v, best = j
    TAKE(v1, 1);
    TAKE(v2, 2);
    TAKE(v3, 3);
#undef TAKE
    *m = b;
    return best;
}

void poet_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y)
{
    const int Ho = H / 2, Wo = W / 2;
    int bc, oy, ox;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++, y += Wo) {
            const float *r0 = xc + (long)(2 * oy) * W, *r1 = r0 + W;
            for (ox = 0; ox < Wo; ox++, r0 += 2, r1 += 2)
                (void)argmax4(r0[0], r0[1], r1[0], r1[1], y + ox);
        }
    }
}

/* Each input element lies in at most one window, so the windows' four places are written directly (the
 * maximum's gradient as 0 + g, as the reference accumulates it onto zeros; 0 elsewhere); only odd rows or
 * columns, in no window, need the zero fill first. */
void poet_maxpool2d_bwd(int B, int C, int H, int W, const float *g, const float *x, float *gx)
{
    const int Ho = H / 2, Wo = W / 2;
    int bc, oy, ox;
    if ((H | W) & 1) {
        long i;
        for (i = 0; i < (long)B * C * H * W; i++)
            gx[i] = 0.0f;
    }
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        float *gc = gx + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++, g += Wo) {
            const float *r0 = xc + (long)(2 * oy) * W, *r1 = r0 + W;
            float *q0 = gc + (long)(2 * oy) * W, *q1 = q0 + W;
            for (ox = 0; ox < Wo; ox++, r0 += 2, r1 += 2, q0 += 2, q1 += 2) {
                float m;
                const int a = argmax4(r0[0], r0[1], r1[0], r1[1], &m);
                const float v = 0.0f + g[ox];
                q0[0] = a == 0 ? v : 0.0f;
                q0[1] = a == 1 ? v : 0.0f;
                q1[0] = a == 2 ? v : 0.0f;
                q1[1] = a == 3 ? v : 0.0f;
            }
        }
    }
}
#endif

/* ---- general max pooling ------------------------------------------------------------------- */

int poet_pool_out(int n, int k, int s, int p, int ceil_mode)
{
    int span = n + 2 * p - k, out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (long)(out - 1) * s >= (long)n + p)
        out--;
    return out;
}

/* The offset (within one map) of window (oy, ox)'s first maximum: its in-bounds rows and columns scanned
 * row-major, as the 2x2 kernel picks. Every window holds at least one in-bounds element (padding is at most
 * half the window, and ceil_mode drops a window starting in the padding). */
static long window_max_at(const float *xc, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int oy,
                          int ox)
{
    int y0 = oy * sh - ph, x0 = ox * sw - pw, y1 = y0 + kh, x1 = x0 + kw, i, j;
    long best;
    if (y1 > H)
        y1 = H;
    if (x1 > W)
        x1 = W;
    if (y0 < 0)
        y0 = 0;
    if (x0 < 0)
        x0 = 0;
    best = (long)y0 * W + x0;
    for (i = y0; i < y1; i++)
        for (j = x0; j < x1; j++) {
            float v = xc[(long)i * W + j], b = xc[best];
            if (v > b || (v != v && b == b))
                best = (long)i * W + j;
        }
    return best;
}

void poet_maxpool2d_general_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                                int ceil_mode, const float *x, float *y)
{
    int Ho = poet_pool_out(H, kh, sh, ph, ceil_mode), Wo = poet_pool_out(W, kw, sw, pw, ceil_mode), bc, oy, ox;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++)
                *y++ = xc[window_max_at(xc, H, W, kh, kw, sh, sw, ph, pw, oy, ox)];
    }
}

void poet_maxpool2d_general_bwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                                int ceil_mode, const float *g, const float *x, float *gx)
{
    int Ho = poet_pool_out(H, kh, sh, ph, ceil_mode), Wo = poet_pool_out(W, kw, sw, pw, ceil_mode), bc, oy, ox;
    long i;
    for (i = 0; i < (long)B * C * H * W; i++)
        gx[i] = 0.0f;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        float *gc = gx + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++)
                gc[window_max_at(xc, H, W, kh, kw, sh, sw, ph, pw, oy, ox)] += *g++;
    }
}

void poet_maxpool2d_q_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int ceil_mode,
                          const int8_t *x, int8_t *y)
{
    int Ho = poet_pool_out(H, kh, sh, ph, ceil_mode), Wo = poet_pool_out(W, kw, sw, pw, ceil_mode), bc, oy, ox, i, j;
    for (bc = 0; bc < B * C; bc++) {
        const int8_t *xc = x + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++) {
                int y0 = oy * sh - ph, x0 = ox * sw - pw, y1 = y0 + kh < H ? y0 + kh : H, x1 = x0 + kw < W ? x0 + kw : W;
                int8_t best = -128;
                for (i = y0 > 0 ? y0 : 0; i < y1; i++)
                    for (j = x0 > 0 ? x0 : 0; j < x1; j++)
                        if (xc[(long)i * W + j] > best)
                            best = xc[(long)i * W + j];
                *y++ = best;
            }
    }
}

/* ---- means ---------------------------------------------------------------------------------- */

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

/* ---- average pooling ------------------------------------------------------------------------ */

/* Window (oy, ox)'s in-bounds rows [*y0, *y1) and columns [*x0, *x1), and its divisor: the window
 * within the padded map (count_include_pad) or its in-bounds part, as PyTorch's avg_pool2d. */
static float avg_window(int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int include_pad, int oy,
                        int ox, int *y0, int *y1, int *x0, int *x1)
{
    int hs = oy * sh - ph, ws = ox * sw - pw;
    int he = hs + kh < H + ph ? hs + kh : H + ph, we = ws + kw < W + pw ? ws + kw : W + pw;
    int padded = (he - hs) * (we - ws);
    *y0 = hs > 0 ? hs : 0;
    *x0 = ws > 0 ? ws : 0;
    *y1 = he < H ? he : H;
    *x1 = we < W ? we : W;
    return (float)(include_pad ? padded : (*y1 - *y0) * (*x1 - *x0));
}

void poet_avgpool2d_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                        int include_pad, const float *x, float *y)
{
    int Ho = (H + 2 * ph - kh) / sh + 1, Wo = (W + 2 * pw - kw) / sw + 1, bc, oy, ox, i, j;
    for (bc = 0; bc < B * C; bc++) {
        const float *xc = x + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++) {
                int y0, y1, x0, x1;
                float d = avg_window(H, W, kh, kw, sh, sw, ph, pw, include_pad, oy, ox, &y0, &y1, &x0, &x1);
                float acc = 0.0f;
                for (i = y0; i < y1; i++)
                    for (j = x0; j < x1; j++)
                        acc += xc[(long)i * W + j];
                y[((long)bc * Ho + oy) * Wo + ox] = acc / d;
            }
    }
}

void poet_avgpool2d_bwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                        int include_pad, const float *g, float *gx)
{
    int Ho = (H + 2 * ph - kh) / sh + 1, Wo = (W + 2 * pw - kw) / sw + 1, bc, oy, ox, i, j;
    long n;
    for (n = 0; n < (long)B * C * H * W; n++)
        gx[n] = 0.0f;
    for (bc = 0; bc < B * C; bc++) {
        float *gc = gx + (long)bc * H * W;
        for (oy = 0; oy < Ho; oy++)
            for (ox = 0; ox < Wo; ox++) {
                int y0, y1, x0, x1;
                float d = avg_window(H, W, kh, kw, sh, sw, ph, pw, include_pad, oy, ox, &y0, &y1, &x0, &x1);
                float v = g[((long)bc * Ho + oy) * Wo + ox] / d;
                for (i = y0; i < y1; i++)
                    for (j = x0; j < x1; j++)
                        gc[(long)i * W + j] += v;
            }
    }
}

/* ---- nearest upsampling --------------------------------------------------------------------- */

void poet_upsample_nearest_fwd(int B, int C, int H, int W, int sh, int sw, const float *x, float *y)
{
    int Ho = H * sh, Wo = W * sw, bc, i, j;
    for (bc = 0; bc < B * C; bc++)
        for (i = 0; i < Ho; i++)
            for (j = 0; j < Wo; j++)
                y[((long)bc * Ho + i) * Wo + j] = x[((long)bc * H + i / sh) * W + j / sw];
}

void poet_upsample_nearest_bwd(int B, int C, int H, int W, int sh, int sw, const float *g, float *gx)
{
    int Wo = W * sw, bc, i, j, u, v;
    for (bc = 0; bc < B * C; bc++)
        for (i = 0; i < H; i++)
            for (j = 0; j < W; j++) {
                const float *p = g + ((long)bc * H * sh + (long)i * sh) * Wo + (long)j * sw;
                float acc = 0.0f;
                for (u = 0; u < sh; u++)
                    for (v = 0; v < sw; v++)
                        acc += p[(long)u * Wo + v];
                gx[((long)bc * H + i) * W + j] = acc;
            }
}
