/* The reference kernels: the plain loops each optimised kernel of core/kernels/ must match bit for
 * bit (same arguments and conventions as kernels.h, named poet_ref_*). They are the specification,
 * kept beside the optimised twins as TFLM keeps reference_ops; the firmware images do not link them. */
#ifndef POET_REFERENCE_H
#define POET_REFERENCE_H

#include "../kernels.h"

void poet_ref_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                         float *y);
void poet_ref_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                         const poet_grad_t *dw, const poet_grad_t *db, float *gx);
void poet_ref_matmul_fwd(int batch, int M, int K, int N, const float *a, const float *bm, float *y);
void poet_ref_matmul_bwd_a(int batch, int M, int K, int N, const float *g, const float *bm, float *ga);
void poet_ref_matmul_bwd_b(int batch, int M, int K, int N, const float *g, const float *a, float *gb);
void poet_ref_conv2d_ex_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y);
void poet_ref_conv2d_ex_bwd(const poet_conv_t *cv, const float *g, const float *x, const float *w,
                            const poet_grad_t *dw, const poet_grad_t *db, float *gx);
void poet_ref_conv2d_gx_rows(const poet_conv_t *cv, int o_begin, int o_end, const float *g, const float *w,
                             float *gx);
void poet_ref_conv2d_q_fwd_rows(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float x_scale,
                                const int8_t *wq, float w_scale, const float *b, int relu, const float *y_scale,
                                void *y);
void poet_ref_linear_i8_fwd(int B, int in, int out, const int8_t *xq, float x_scale, const int8_t *wq,
                            float w_scale, const float *b, float *y);
void poet_ref_linear_w8_fwd(int B, int in, int out, int o_begin, int o_end, const float *x, const int8_t *wq,
                            float w_scale, const float *b, float *y);
void poet_ref_linear_w8_bwd_gx(int B, int in, int out, const float *g, const int8_t *wq, float w_scale,
                               float *gx);
void poet_ref_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y);
void poet_ref_maxpool2d_bwd(int B, int C, int H, int W, const float *g, const float *x, float *gx);
int8_t poet_ref_q8(float v);
void poet_ref_q_put(void *y, long i, float v, int relu, int i8, float inv);
void poet_ref_quantize_i8(int n, float scale, const float *x, int8_t *q);

#endif
