/* Peer libraries' versions of the benchmarked kernels, where the bench image is built with them
 * (POET_PEER_CMSIS_DSP, POET_PEER_CMSIS_NN, POET_PEER_AIFES). Each returns 0, or non-zero where the
 * library has no such kernel for the shape (the table then shows none). */
#ifndef POET_BENCH_PEERS_H
#define POET_BENCH_PEERS_H

#include <stdint.h>

#include "../core/kernels/kernels.h"

/* peer_cmsis_dsp.c: CMSIS-DSP's fp32 functions */
void peer_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y);
void peer_linear_gx(int B, int in, int out, const float *g, const float *w, float *gx);
void peer_linear_dw(int B, int in, int out, const float *g, const float *x, float *dw);
void peer_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y);

/* peer_cmsis_nn.c: CMSIS-NN's operators, NHWC */
int peer_nn_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y);
int peer_nn_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y);
int peer_nn_conv2d_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y);
int peer_nn_linear_s8_fwd(int B, int in, int out, const int8_t *x, const int8_t *w, int8_t *y);
int peer_nn_conv2d_s8_fwd(const poet_conv_t *cv, const int8_t *x, const int8_t *w, int8_t *y);
int peer_nn_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y);

/* peer_aifes.c: AIfES's default fp32 math; conv: which 0 forward, 1 grad input, 2 weight and bias gradients */
int peer_aifes_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y);
int peer_aifes_linear_gx(int B, int in, int out, const float *g, const float *w, float *gx);
int peer_aifes_linear_dw(int B, int in, int out, const float *g, const float *x, float *dw, float *db);
int peer_aifes_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y);
int peer_aifes_conv2d(int which, const poet_conv_t *cv, const float *x, const float *w, const float *b,
                      const float *g, float *y, float *dw, float *db);
/* one training step of mlp-digits, batch 16 (aialgo_train_model) */
int peer_aifes_train_step(void);

#endif
