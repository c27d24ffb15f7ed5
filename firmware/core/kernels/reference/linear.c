/* The specification of kernels/linear.c: dense layers and batched matrix products (fp32) as plain
 * loops, one output element at a time. The optimised kernels must give these bits exactly (tests/
 * test_kernels_opt.py); only the host-side kernel library links them. Conventions are in kernels.h. */
#include "../kernels.h"
#include "reference.h"

/* The names these loops are built under: poet_ref_* as the specification; poet_* where linear.c builds
 * them as the kernels themselves (POET_UNTILED). */
#ifndef POET_REF_NAME
#define POET_REF_NAME(f) poet_ref_##f
#endif

void POET_REF_NAME(linear_fwd)(int B, int in, int out, const float *x, const float *w, const float *b,
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

void POET_REF_NAME(linear_bwd)(int B, int in, int out, const float *g, const float *x, const float *w,
                         const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    int i, o, k;
    if (gx) {
        /* gx[i,k] = sum_o g[i,o] W[o,k], first: an update in backward changes W below */
        for (i = 0; i < B; i++) {
            for (k = 0; k < in; k++) {
                float acc = 0.0f;
                for (o = 0; o < out; o++)
                    acc += g[(long)i * out + o] * w[(long)o * in + k];
                gx[(long)i * in + k] = acc;
            }
        }
    }
    /* dW[o,k] = sum_i g[i,o] x[i,k]; none for a frozen weight (dw NULL), as in the conv */
    for (o = 0; o < out; o++) {
        for (k = 0; dw && k < in; k++) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o] * x[(long)i * in + k];
            poet_grad_put(dw, (uint32_t)((long)o * in + k), acc);
        }
        if (db) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o];
            poet_grad_put(db, (uint32_t)o, acc);
        }
    }
}

/* ---- matmul --------------------------------------------------------------------------------- */

void POET_REF_NAME(matmul_fwd)(int batch, int M, int K, int N, const float *a, const float *bm, float *y)
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

void POET_REF_NAME(matmul_bwd_a)(int batch, int M, int K, int N, const float *g, const float *bm, float *ga)
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

void POET_REF_NAME(matmul_bwd_b)(int batch, int M, int K, int N, const float *g, const float *a, float *gb)
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
