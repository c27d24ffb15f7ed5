/* Dense layers and batched matrix products (fp32). Conventions are in kernels.h; the specification
 * is reference/linear.c, whose bits these give exactly: every output element is summed in the
 * reference's order, 4x4 of them at a time in registers (tile.h), the edges one at a time. */
#include "kernels.h"
#include "tile.h"

/* How much of n the tiles cover: all but n % 4. POET_UNTILED (the ESP32-C3, whose code runs from
 * the SRAM the pool would have, and which has no FPU for the tiles to feed) leaves everything to
 * the one-at-a-time edge loops: the reference's loops, 4.6 KB less code. */
#ifdef POET_UNTILED
#define TILED(n) 0
#else
#define TILED(n) ((n) & ~3)
#endif

/* y[i,o] = sum_k x[i,k] w[o,k] (+ b[o]) */
void poet_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                     float *y)
{
    int i, o, B4 = TILED(B), out4 = TILED(out);
    float c[16];
    for (i = 0; i < B4; i += 4)
        for (o = 0; o < out4; o += 4) {
            int r, s;
            tile_rr(in, x + (long)i * in, in, w + (long)o * in, in, c);
            for (r = 0; r < 4; r++)
                for (s = 0; s < 4; s++)
                    y[(long)(i + r) * out + o + s] = b ? c[4 * r + s] + b[o + s] : c[4 * r + s];
        }
    for (i = 0; i < B; i++)
        for (o = i < B4 ? out4 : 0; o < out; o++) {
            float acc = tile_dot(in, x + (long)i * in, 1, w + (long)o * in, 1);
            y[(long)i * out + o] = b ? acc + b[o] : acc;
        }
}

void poet_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                     const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    int i, o, k, B4 = TILED(B), in4 = TILED(in), out4 = TILED(out);
    float c[16];
    if (gx) {
        /* gx[i,k] = sum_o g[i,o] w[o,k], first: an update in backward changes w below */
        for (i = 0; i < B4; i += 4)
            for (k = 0; k < in4; k += 4) {
                int r, s;
                tile_rc(out, g + (long)i * out, out, w + k, in, c);
                for (r = 0; r < 4; r++)
                    for (s = 0; s < 4; s++)
                        gx[(long)(i + r) * in + k + s] = c[4 * r + s];
            }
        for (i = 0; i < B; i++)
            for (k = i < B4 ? in4 : 0; k < in; k++)
                gx[(long)i * in + k] = tile_dot(out, g + (long)i * out, 1, w + k, in);
    }
    /* dW[o,k] = sum_i g[i,o] x[i,k]; none for a frozen weight (dw NULL), as in the conv */
    if (dw) {
        for (o = 0; o < out4; o += 4)
            for (k = 0; k < in4; k += 4) {
                int r, s;
                tile_cc(B, g + o, out, x + k, in, c);
                for (r = 0; r < 4; r++)
                    for (s = 0; s < 4; s++)
                        poet_grad_put(dw, (uint32_t)((long)(o + r) * in + k + s), c[4 * r + s]);
            }
        for (o = 0; o < out; o++)
            for (k = o < out4 ? in4 : 0; k < in; k++)
                poet_grad_put(dw, (uint32_t)((long)o * in + k), tile_dot(B, g + o, out, x + k, in));
    }
    if (db)
        for (o = 0; o < out; o++) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o];
            poet_grad_put(db, (uint32_t)o, acc);
        }
}

/* ---- matmul --------------------------------------------------------------------------------- */

/* y[t,i,j] = sum_k a[t,i,k] bm[t,k,j] */
void poet_matmul_fwd(int batch, int M, int K, int N, const float *a, const float *bm, float *y)
{
    int t, i, j, M4 = TILED(M), N4 = TILED(N);
    float c[16];
    for (t = 0; t < batch; t++) {
        const float *at = a + (long)t * M * K, *bt = bm + (long)t * K * N;
        float *yt = y + (long)t * M * N;
        for (i = 0; i < M4; i += 4)
            for (j = 0; j < N4; j += 4) {
                int r, s;
                tile_rc(K, at + (long)i * K, K, bt + j, N, c);
                for (r = 0; r < 4; r++)
                    for (s = 0; s < 4; s++)
                        yt[(long)(i + r) * N + j + s] = c[4 * r + s];
            }
        for (i = 0; i < M; i++)
            for (j = i < M4 ? N4 : 0; j < N; j++)
                yt[(long)i * N + j] = tile_dot(K, at + (long)i * K, 1, bt + j, N);
    }
}

/* ga[t,i,k] = sum_j g[t,i,j] bm[t,k,j] */
void poet_matmul_bwd_a(int batch, int M, int K, int N, const float *g, const float *bm, float *ga)
{
    int t, i, k, M4 = TILED(M), K4 = TILED(K);
    float c[16];
    for (t = 0; t < batch; t++) {
        const float *gt = g + (long)t * M * N, *bt = bm + (long)t * K * N;
        float *at = ga + (long)t * M * K;
        for (i = 0; i < M4; i += 4)
            for (k = 0; k < K4; k += 4) {
                int r, s;
                tile_rr(N, gt + (long)i * N, N, bt + (long)k * N, N, c);
                for (r = 0; r < 4; r++)
                    for (s = 0; s < 4; s++)
                        at[(long)(i + r) * K + k + s] = c[4 * r + s];
            }
        for (i = 0; i < M; i++)
            for (k = i < M4 ? K4 : 0; k < K; k++)
                at[(long)i * K + k] = tile_dot(N, gt + (long)i * N, 1, bt + (long)k * N, 1);
    }
}

/* gb[t,k,j] = sum_i a[t,i,k] g[t,i,j] */
void poet_matmul_bwd_b(int batch, int M, int K, int N, const float *g, const float *a, float *gb)
{
    int t, k, j, K4 = TILED(K), N4 = TILED(N);
    float c[16];
    for (t = 0; t < batch; t++) {
        const float *gt = g + (long)t * M * N, *at = a + (long)t * M * K;
        float *bt = gb + (long)t * K * N;
        for (k = 0; k < K4; k += 4)
            for (j = 0; j < N4; j += 4) {
                int r, s;
                tile_cc(M, at + k, K, gt + j, N, c);
                for (r = 0; r < 4; r++)
                    for (s = 0; s < 4; s++)
                        bt[(long)(k + r) * N + j + s] = c[4 * r + s];
            }
        for (k = 0; k < K; k++)
            for (j = k < K4 ? N4 : 0; j < N; j++)
                bt[(long)k * N + j] = tile_dot(M, at + k, K, gt + j, N);
    }
}
