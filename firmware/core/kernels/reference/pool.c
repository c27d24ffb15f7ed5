/* The specification of kernels/pool.c's max pooling (2x2 windows, stride 2): one output at a time, the
 * gradient scattered onto zeros. The optimised kernels must give these bits exactly (tests/
 * test_kernels_opt.py). Conventions are in kernels.h. */
#include "../kernels.h"
#include "reference.h"

/* The names these loops are built under: poet_ref_* as the specification; poet_* where pool.c builds them as
 * the kernels themselves (POET_SMALL_CODE). */
#ifndef POET_REF_NAME
#define POET_REF_NAME(f) poet_ref_##f
#endif

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

void POET_REF_NAME(maxpool2d_fwd)(int B, int C, int H, int W, const float *x, float *y)
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

void POET_REF_NAME(maxpool2d_bwd)(int B, int C, int H, int W, const float *g, const float *x, float *gx)
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
