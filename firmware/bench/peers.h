/* A peer library's version of each benchmarked kernel (peer_cmsis_dsp.c), where the bench image is
 * built with one (POET_BENCH_PEER names it). */
#ifndef POET_BENCH_PEERS_H
#define POET_BENCH_PEERS_H

void peer_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y);
void peer_linear_gx(int B, int in, int out, const float *g, const float *w, float *gx);
void peer_linear_dw(int B, int in, int out, const float *g, const float *x, float *dw);
void peer_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y);

#endif
