/* fp32 reference kernels, forward and backward, for every op of docs/spec.md section 2.
 * They follow PyTorch's definitions (first-maximum pooling, log-softmax cross entropy with mean
 * reduction) and accumulate in float so results track PyTorch fp32 to rounding. Backward kernels
 * accumulate (+=) into the parameter gradients; none of them allocate. */
#ifndef POET_KERNELS_H
#define POET_KERNELS_H

#include <stdint.h>

void poet_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                     float *y);
/* gx may be NULL (need_grad_input = 0); db may be NULL (no bias). */
void poet_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                     float *dw, float *db, float *gx);
void poet_conv2d_fwd(int B, int C, int H, int W, int O, int k, int pad, const float *x,
                     const float *w, const float *b, float *y);
void poet_conv2d_bwd(int B, int C, int H, int W, int O, int k, int pad, const float *g,
                     const float *x, const float *w, float *dw, float *db, float *gx);
void poet_relu_fwd(int n, const float *x, float *y);
void poet_relu_bwd(int n, const float *g, const float *y, float *gx);
void poet_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y);
void poet_maxpool2d_bwd(int B, int C, int H, int W, const float *g, const float *x, float *gx);
void poet_copy(int n, const float *x, float *y);
float poet_cross_entropy_fwd(int B, int classes, const float *logits, const int32_t *labels);
void poet_cross_entropy_bwd(int B, int classes, const float *logits, const int32_t *labels,
                            float *gx);
/* w -= lr * g, then g = 0. */
void poet_sgd(uint32_t n, float lr, float *w, float *g);

#endif
