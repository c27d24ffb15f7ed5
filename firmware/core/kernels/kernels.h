/* fp32 reference kernels, forward and backward, for every op of docs/graph.md's op set, one file per
 * family (core/kernels/<family>.c, named in the section titles below; the ops in core/ops/ call them).
 * They follow PyTorch's definitions (first-maximum pooling, log-softmax cross entropy with mean
 * reduction, biased batch variance for normalising and unbiased for the running estimate, ...) and
 * accumulate in float, because the Cortex-M4F has a single-precision FPU only; results track PyTorch
 * fp32 to rounding.
 *
 * Conventions, shared by every kernel:
 *  - tensors are dense, row-major (NCHW for images); sizes are element counts;
 *  - backward kernels WRITE (=) every input gradient (gx, ga, ...) and hand over each element of a
 *    parameter gradient once, finished, through a poet_grad_t (optim.c): added into a gradient
 *    buffer (so several backward nodes can share one) or applied to the parameter at once, the
 *    update in backward that keeps no gradient at all; such a kernel reads every weight element
 *    it needs before it hands over that element's gradient. The embedding and layer norm
 *    backwards, which add into an element once per row, take a plain buffer (+=);
 *  - a NULL gradient pointer means that gradient is not wanted, and the tensors only it would read
 *    may then be NULL too (a frozen conv weight needs no x);
 *  - nothing allocates and nothing needs scratch memory: where a backward needs statistics that the
 *    forward made (batch and layer norm) it takes them, or recomputes them per channel / per row
 *    when given NULL, so the caller chooses between keeping them and recomputing;
 *  - outputs must not alias inputs unless a kernel says it may. */
#ifndef POET_KERNELS_H
#define POET_KERNELS_H

#include <stdint.h>

/* ---- optim.c: optimizers, and how a backward kernel hands over a parameter gradient --------- */

/* Optimizer codes: the optimizer node's a0 (docs/spec.md section 2). */
enum { POET_OPT_SGD = 0, POET_OPT_MOMENTUM = 1, POET_OPT_ADAM = 2 };

/* One step's update rule, as torch.optim applies it to each element (no weight decay, dampening,
 * Nesterov or amsgrad): fixed for the step, made once by poet_update_init. */
typedef struct {
    uint8_t opt;     /* POET_OPT_* */
    uint32_t step;   /* the step being taken, counting from 1 */
    float lr;
    float momentum;  /* POET_OPT_MOMENTUM */
    float beta1, beta2, eps, step_size, bc2_sqrt; /* POET_OPT_ADAM, with its bias corrections */
} poet_update_t;

/* p1..p3: the optimizer node's a1..a3 (momentum; or beta1, beta2, eps). */
void poet_update_init(poet_update_t *u, int opt, float lr, float p1, float p2, float p3, uint32_t step);

/* The optimizer pass over one parameter of n elements: w from its gradient g, then g = 0 for the next
 * step's accumulation. s0, s1: its state (momentum's buffer; Adam's m and v), NULL where the rule has
 * none. SGD: w -= lr g. Momentum: buf = g on step 1 (so buf needs no initialising), momentum buf + g
 * after; w -= lr buf. Adam: m and v zero before step 1, bias-corrected with the step count. */
void poet_optimize(const poet_update_t *u, uint32_t n, float *w, float *g, float *s0, float *s1);

/* Where a backward kernel puts a parameter's gradient, element i at a time, each element once per
 * call and finished: added into g; or, g NULL, applied at once by u to w[i] and its state
 * s0[i], s1[i] (the update in backward: no gradient is kept). A NULL poet_grad_t * means the
 * gradient is not wanted (a frozen parameter). */
typedef struct {
    float *g;
    float *w, *s0, *s1;
    const poet_update_t *u;
} poet_grad_t;

void poet_grad_apply(const poet_grad_t *d, uint32_t i, float gi);
static inline void poet_grad_put(const poet_grad_t *d, uint32_t i, float gi)
{
    if (d->g)
        d->g[i] += gi;
    else
        poet_grad_apply(d, i, gi);
}

/* ---- linear.c: dense layers and matmul ------------------------------------------------------ */

void poet_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                     float *y);
/* gx may be NULL (need_grad_input = 0); db may be NULL (no bias); dw may be NULL (frozen weight). */
void poet_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                     const poet_grad_t *dw, const poet_grad_t *db, float *gx);

/* y[b] = a[b] @ bm[b], a[batch, M, K], bm[batch, K, N], y[batch, M, N]. */
void poet_matmul_fwd(int batch, int M, int K, int N, const float *a, const float *bm, float *y);
/* ga = g @ bm^T (reads the other operand bm) and gb = a^T @ g (reads a); both written. */
void poet_matmul_bwd_a(int batch, int M, int K, int N, const float *g, const float *bm, float *ga);
void poet_matmul_bwd_b(int batch, int M, int K, int N, const float *g, const float *a, float *gb);

/* ---- conv.c: convolution -------------------------------------------------------------------- */

/* Output height (or width) of a convolution: floor((H + 2 pad - k) / stride) + 1. */
int poet_conv2d_out(int H, int k, int stride, int pad);
/* A convolution's shape: x[B,C,H,W] * w[O, C/groups, kh, kw] -> y[B,O,Ho,Wo], zero padding of ph
 * rows above and below and pw columns left and right, one stride on both axes, no dilation. C and O
 * must be multiples of groups; groups = C = O is a depthwise convolution. ck: the input channels of
 * each group the weight gradient covers, the first ck, or of a depthwise one its first ck channels (a
 * sparse update's share of a layer, as tiny-training updates part of a conv); 0 covers all. dw is the
 * share's gradient, laid out as the share: [O, ck, kh, kw] (a depthwise one's [ck, 1, kh, kw]). */
typedef struct {
    int B, C, H, W, O, kh, kw, stride, ph, pw, groups, ck;
    /* pb: the rows of zero padding below, where they differ from the ph above: a row strip of a stage run
     * patch by patch, whose edges pad only at the image's (the int8 kernels, lowp.c; every other kernel
     * pads ph below, and its callers set pb = ph) */
    int pb;
} poet_conv_t;
/* The output rows of an int8 convolution: (H + ph + pb - kh) / stride + 1. */
int poet_conv2d_rows(const poet_conv_t *cv);
/* y = conv(x, w) (+ b[O]); b may be NULL. */
void poet_conv2d_ex_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y);
/* g is dL/dy [B,O,Ho,Wo]. dw gets dL/dw (may be NULL: then x may be NULL), db dL/db (may be NULL),
 * gx = dL/dx (may be NULL: then w may be NULL). */
void poet_conv2d_ex_bwd(const poet_conv_t *cv, const float *g, const float *x, const float *w,
                        const poet_grad_t *dw, const poet_grad_t *db, float *gx);
/* The input gradient from the output channels o_begin..o_end-1 only, w holding just their weights (C/groups
 * kh kw each): an input channel whose group has none of them is not touched, one whose group has outputs
 * before o_begin adds to what gx holds. Run over ascending blocks that cover every output, it gives
 * poet_conv2d_ex_bwd's gx bit for bit: a weight stored int8 is made fp32 a block at a time (ops/conv.c). */
void poet_conv2d_gx_rows(const poet_conv_t *cv, int o_begin, int o_end, const float *g, const float *w, float *gx);

/* ---- elementwise.c: activations and arithmetic ---------------------------------------------- */

/* relu_bwd reads the output y. */
void poet_relu_fwd(int n, const float *x, float *y);
void poet_relu_bwd(int n, const float *g, const float *y, float *gx);
/* GELU, tanh_approx = 0: x * Phi(x) with the exact erf (torch's default, approximate='none');
 * tanh_approx = 1: torch's approximate='tanh'. The backward reads the INPUT x. */
void poet_gelu_fwd(int n, int tanh_approx, const float *x, float *y);
void poet_gelu_bwd(int n, int tanh_approx, const float *g, const float *x, float *gx);
/* tanh and sigmoid backward read the OUTPUT y (1 - y^2, y (1 - y)). */
void poet_tanh_fwd(int n, const float *x, float *y);
void poet_tanh_bwd(int n, const float *g, const float *y, float *gx);
void poet_sigmoid_fwd(int n, const float *x, float *y);
void poet_sigmoid_bwd(int n, const float *g, const float *y, float *gx);
/* SiLU x sigmoid(x), hardswish x relu6(x + 3) / 6 and hardsigmoid relu6(x + 3) / 6, as PyTorch's
 * CPU kernels compute them; the backwards read the INPUT x, and hardswish's and hardsigmoid's
 * take PyTorch's sides at the corners (hardswish: the slope x / 3 + 1/2 strictly inside (-3, 3), 0
 * at and below -3, 1 at and above 3; hardsigmoid: 1/6 strictly inside, else 0). */
void poet_silu_fwd(int n, const float *x, float *y);
void poet_silu_bwd(int n, const float *g, const float *x, float *gx);
void poet_hardswish_fwd(int n, const float *x, float *y);
void poet_hardswish_bwd(int n, const float *g, const float *x, float *gx);
void poet_hardsigmoid_fwd(int n, const float *x, float *y);
void poet_hardsigmoid_bwd(int n, const float *g, const float *x, float *gx);
/* clamp(x, lo, hi); ReLU6 is lo = 0, hi = 6. The backward reads the INPUT x and, like torch,
 * passes the gradient only strictly inside (lo, hi). */
void poet_hardtanh_fwd(int n, float lo, float hi, const float *x, float *y);
void poet_hardtanh_bwd(int n, float lo, float hi, const float *g, const float *x, float *gx);
/* An activation's backward from a bit per element (plan/transform/masks.py): bit i of bits[i / 32] is
 * lo < y[i] (and y[i] < hi where bounded), so poet_mask_bwd's gx = g where it is set, else 0, is relu's
 * backward from y (lo 0, unbounded) and hardtanh's from x (y = clamp(x): lo < y < hi exactly where lo < x <
 * hi), bit for bit, from 1/32 of the bytes. gx may be g (in place). */
void poet_act_mask(int n, float lo, float hi, int bounded, const float *y, uint32_t *bits);
void poet_mask_bwd(int n, const float *g, const uint32_t *bits, float *gx);

/* Same-shape a (op) b over n elements. y may alias a or b. */
void poet_add_fwd(int n, const float *a, const float *b, float *y);
void poet_sub_fwd(int n, const float *a, const float *b, float *y);
void poet_mul_fwd(int n, const float *a, const float *b, float *y);
/* add: ga = g, gb = g; sub: ga = g, gb = -g; either may be NULL, and either may alias g. */
void poet_add_bwd(int n, const float *g, float *ga, float *gb);
void poet_sub_bwd(int n, const float *g, float *ga, float *gb);
/* mul's gradient to one operand is g times the other: mul_bwd_a passes b, mul_bwd_b passes a. */
void poet_mul_bwd(int n, const float *g, const float *other, float *gx);
/* y[o, c, i] = x[o, c, i] +/- v[c] for x[outer, C, inner]: a row vector broadcast over leading dims
 * (inner = 1, C = row length) or a per-channel vector of an NCHW tensor (outer = B, inner = H*W).
 * y may alias x. */
void poet_add_bcast_fwd(int outer, int C, int inner, const float *x, const float *v, float *y);
void poet_sub_bcast_fwd(int outer, int C, int inner, const float *x, const float *v, float *y);
/* gx = g (may be NULL or alias g); gv = +/- the sum of g over outer and inner, WRITTEN: in the
 * training graph v is an activation (the tracer refuses parameter operands). */
void poet_add_bcast_bwd(int outer, int C, int inner, const float *g, float *gx, float *gv);
void poet_sub_bcast_bwd(int outer, int C, int inner, const float *g, float *gx, float *gv);
/* The graph's add, sub and mul with b broadcast (docs/spec.md section 2): b[outer, inner] repeated r
 * times over a[outer, r, inner], y[o, j, i] = a[o, j, i] (op) b[o, i]; y may alias a. mul's gradient
 * to a is poet_mul_rep_fwd(g, b); the gradients to b, WRITTEN, are gb[o, i] = +/- the sum over j of
 * g[o, j, i] (add, sub) and of g[o, j, i] * a[o, j, i] (mul). */
void poet_add_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y);
void poet_sub_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y);
void poet_mul_rep_fwd(int outer, int r, int inner, const float *a, const float *b, float *y);
void poet_add_rep_bwd(int outer, int r, int inner, const float *g, float *gb);
void poet_sub_rep_bwd(int outer, int r, int inner, const float *g, float *gb);
void poet_mul_rep_bwd_b(int outer, int r, int inner, const float *g, const float *a, float *gb);
/* y = x * mul + add (the graph's scale: x * s, x / s as mul = 1/s, x + s, s - x); gx = g * mul.
 * y may alias x, gx may alias g. */
void poet_scale_fwd(int n, float mul, float add, const float *x, float *y);
void poet_scale_bwd(int n, float mul, const float *g, float *gx);
/* Dropout with a mask no buffer holds: element i is kept when the top 24 bits of a hash of its draw
 * (i / row; row 0 or 1: i itself) and key are at least threshold (p 2^24, so a share p is dropped),
 * then y = x * scale (1 / (1 - p)), else 0. A row above 1 is stochastic depth: whole rows (samples)
 * kept or dropped together. The forward, its recomputation and the backward (g in, gx out) make the
 * same mask from the same key. y may alias x. */
void poet_dropout(int n, uint32_t key, uint32_t threshold, float scale, int row, const float *x, float *y);
/* The key of one dropout layer (salt: which) in one training step (step: the optimizer's count). */
uint32_t poet_dropout_key(uint32_t salt, uint32_t step);

/* ---- pool.c: pooling and reductions --------------------------------------------------------- */

/* 2x2 window, stride 2, first maximum (NaN wins) as PyTorch. */
void poet_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y);
void poet_maxpool2d_bwd(int B, int C, int H, int W, const float *g, const float *x, float *gx);
/* A pooled extent as PyTorch sizes it: (n + 2p - k) / s + 1, rounded up with ceil_mode, less the last window
 * if it would start in the right padding. The caller has checked k <= n + 2p and s >= 1. */
int poet_pool_out(int n, int k, int s, int p, int ceil_mode);
/* max_pool2d of x[B,C,H,W] with any kh x kw window, stride sh, sw, padding ph, pw (padding never wins) and
 * ceil_mode, y[B,C,Ho,Wo] (poet_pool_out). A window's value is its first maximum in row-major order, a NaN
 * winning over a number, as the 2x2 kernel; the backward adds each g to its window's maximum (windows may
 * overlap), zero elsewhere, finding the maxima again in x. */
void poet_maxpool2d_general_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                                int ceil_mode, const float *x, float *y);
void poet_maxpool2d_general_bwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                                int ceil_mode, const float *g, const float *x, float *gx);
/* Mean over the middle extent of x[outer, r, inner] -> y[outer, inner]: x.mean(dims) over adjacent
 * dims (inner = 1 is a mean over a contiguous inner extent). The backward spreads g / r; it reads
 * nothing else. */
void poet_mean_fwd(int outer, int r, int inner, const float *x, float *y);
void poet_mean_bwd(int outer, int r, int inner, const float *g, float *gx);
/* avg_pool2d of x[B,C,H,W] (PyTorch's, ceil_mode False, no divisor override): kh x kw windows at
 * stride sh, sw over the map zero-padded by ph, pw, y[B,C,Ho,Wo] with Ho = (H + 2ph - kh) / sh + 1;
 * each output is its window's in-bounds sum divided by the window's size within the padded map
 * (include_pad, PyTorch's count_include_pad) or by its in-bounds element count. The backward
 * spreads each g over the same elements with the same divisor, adding where windows overlap. */
void poet_avgpool2d_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                        int include_pad, const float *x, float *y);
void poet_avgpool2d_bwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw,
                        int include_pad, const float *g, float *gx);
/* Nearest upsampling by whole factors: y[B,C,H sh,W sw], y[.., i, j] = x[.., i / sh, j / sw]
 * (F.interpolate mode "nearest"); the backward sums g over each sh x sw block. */
void poet_upsample_nearest_fwd(int B, int C, int H, int W, int sh, int sw, const float *x, float *y);
void poet_upsample_nearest_bwd(int B, int C, int H, int W, int sh, int sw, const float *g, float *gx);
/* adaptive_avg_pool2d(x, 1) of x[B,C,H,W] with HW = H*W -> y[B,C] (= poet_mean(B*C, HW, 1)). */
void poet_global_avgpool2d_fwd(int B, int C, int HW, const float *x, float *y);
void poet_global_avgpool2d_bwd(int B, int C, int HW, const float *g, float *gx);

/* ---- norm.c: normalisation and softmax ------------------------------------------------------ */

/* Batch norm of x[B, C, HW] (BatchNorm2d with HW = H*W, BatchNorm1d with HW = L or 1); w and b
 * (affine) may be NULL. momentum must be a number (torch's momentum=None, a cumulative average, is
 * not supported). */

/* Per-channel batch mean and rstd = 1/sqrt(biased variance + eps), as torch saves them. */
void poet_batchnorm2d_stats(int B, int C, int HW, float eps, const float *x, float *mean,
                            float *rstd);
/* Training mode: normalise with the batch statistics. save_mean/save_rstd [C] receive them (may be
 * NULL). run_mean/run_var [C] (may be NULL: track_running_stats=False) are updated as torch does:
 * r = (1 - momentum) r + momentum s, with the unbiased variance (B*HW / (B*HW - 1)) for run_var. */
void poet_batchnorm2d_fwd_train(int B, int C, int HW, float eps, float momentum, const float *x,
                                const float *w, const float *b, float *y, float *save_mean,
                                float *save_rstd, float *run_mean, float *run_var);
/* Backward of the training-mode forward, through the batch statistics. mean/rstd are the forward's
 * saved ones, or NULL to recompute them from x (eps is used only then). x is always read when gx
 * or dw is wanted. w NULL means no affine weight (scale 1); dw, db, gx may each be NULL. */
void poet_batchnorm2d_bwd_train(int B, int C, int HW, float eps, const float *g, const float *x,
                                const float *w, const float *mean, const float *rstd, const poet_grad_t *dw,
                                const poet_grad_t *db, float *gx);
/* Frozen statistics (eval mode): normalise with run_mean/run_var, which are not changed. */
void poet_bn_relu_mean_fwd(int B, int C, int HW, float eps, float momentum, const float *x, const float *w,
                           const float *b, float *y, float *run_mean, float *run_var);
void poet_bn_relu_mean_bwd(int B, int C, int HW, float eps, const float *g, const float *x, const float *w,
                           const float *b, const poet_grad_t *dw, const poet_grad_t *db, float *gx);
/* The same in evaluation mode (a forward schedule: predict), with the running statistics. */
void poet_bn_relu_mean_fwd_eval(int B, int C, int HW, float eps, const float *x, const float *w,
                                const float *b, const float *run_mean, const float *run_var, float *y);
void poet_batchnorm2d_fwd_eval(int B, int C, int HW, float eps, const float *x, const float *w,
                               const float *b, const float *run_mean, const float *run_var,
                               float *y);
/* The statistics are constants here, so gx = g * w * rstd; x is read only for dw. */
void poet_batchnorm2d_bwd_eval(int B, int C, int HW, float eps, const float *g, const float *x,
                               const float *w, const float *run_mean, const float *run_var,
                               const poet_grad_t *dw, const poet_grad_t *db, float *gx);

/* Layer norm over the last dimension of x[rows, D]; w, b [D] may be NULL. mean/rstd [rows] receive
 * the per-row statistics torch saves (may be NULL). */
void poet_layernorm_fwd(int rows, int D, float eps, const float *x, const float *w, const float *b,
                        float *y, float *mean, float *rstd);
/* mean/rstd: the forward's, or NULL to recompute them from x with eps. */
void poet_layernorm_bwd(int rows, int D, float eps, const float *g, const float *x, const float *w,
                        const float *mean, const float *rstd, float *dw, float *db, float *gx);

/* Softmax over the last dim of x[rows, D]; the backward reads the OUTPUT y. */
void poet_softmax_fwd(int rows, int D, const float *x, float *y);
void poet_softmax_bwd(int rows, int D, const float *g, const float *y, float *gx);
/* Log-softmax over the last dim: y = x - log(sum(exp(x))); the backward reads the OUTPUT y
 * (dx = g - exp(y) * sum(g)). A tutorial's log_softmax + nll_loss trains as log_softmax +
 * cross entropy, which is the same loss: softmax(log_softmax(x)) = softmax(x). */
void poet_log_softmax_fwd(int rows, int D, const float *x, float *y);
void poet_log_softmax_bwd(int rows, int D, const float *g, const float *y, float *gx);

/* ---- loss.c: cross entropy, mean squared and mean absolute error ----------------------------- */

float poet_cross_entropy_fwd(int B, int classes, const float *logits, const int32_t *labels);
void poet_cross_entropy_bwd(int B, int classes, const float *logits, const int32_t *labels,
                            float *gx);
/* PyTorch's mse_loss and l1_loss of p against t, n elements each, mean reduction. The backwards give
 * dL/dp: 2 (p - t) / n, and sign(p - t) / n (0 where p equals t). */
float poet_mse_fwd(int n, const float *p, const float *t);
void poet_mse_bwd(int n, const float *p, const float *t, float *gp);
float poet_l1_fwd(int n, const float *p, const float *t);
void poet_l1_bwd(int n, const float *p, const float *t, float *gp);

/* ---- layout.c: copies, gathers, permutes ---------------------------------------------------- */

/* torch.cat of k tensors along one dim: each viewed as x_i[outer, len_i] (len_i = its size along the
 * dim times the elements after it), y[outer, sum len] their rows side by side. The backward gives
 * one input's gradient, g[outer, total]'s columns offset .. offset + len. */
void poet_cat_fwd(int outer, int k, const int *len, const float *const *x, float *y);
void poet_cat_bwd(int outer, int total, int offset, int len, const float *g, float *gx);
/* One piece of a split (chunk, split, unbind) is poet_cat_bwd of x; its backward writes the whole of
 * gx[outer, total]: g[outer, len] in the columns offset .. offset + len, zeros elsewhere. */
void poet_slice_bwd(int outer, int total, int offset, int len, const float *g, float *gx);
/* y[i, :] = w[ids[i], :] for w[V, D]; an id outside [0, V) (torch raises) gives a zero row in the
 * forward and is skipped in the backward, so a bad batch cannot write outside the weights. */
void poet_embedding_fwd(int n, int V, int D, const int32_t *ids, const float *w, float *y);
/* dw[ids[i], :] += g[i, :] (scatter-add: repeated ids sum). */
void poet_embedding_bwd(int n, int V, int D, const int32_t *ids, const float *g, float *dw);
/* x[:, index] of x[B, S, D] -> y[B, D]; the backward writes all of gx (zeros off index). */
void poet_select_fwd(int B, int S, int D, int index, const float *x, float *y);
void poet_select_bwd(int B, int S, int D, int index, const float *g, float *gx);
/* General 4-d permute: x has dims d[0..3], y = x.permute(p) has dims d[p[0]], ..., d[p[3]].
 * The backward takes the forward's d and p and writes gx (shape d) from g (shape of y). */
void poet_permute4_fwd(const int *d, const int *p, const float *x, float *y);
void poet_permute4_bwd(const int *d, const int *p, const float *g, float *gx);
/* x[b, m, n] -> y[b, n, m] (x.transpose(-1, -2)); gx[b, m, n] from g[b, n, m]. */
void poet_transpose_last2_fwd(int b, int m, int n, const float *x, float *y);
void poet_transpose_last2_bwd(int b, int m, int n, const float *g, float *gx);
/* x[d0, d1, d2, d3] -> y[d0, d2, d1, d3] (x.transpose(1, 2), attention's head split and merge);
 * gx [d0, d1, d2, d3] from g [d0, d2, d1, d3]. */
void poet_transpose12_fwd(int d0, int d1, int d2, int d3, const float *x, float *y);
void poet_transpose12_bwd(int d0, int d1, int d2, int d3, const float *g, float *gx);
void poet_copy(int n, const float *x, float *y);

/* ---- lowp.c: low precision ------------------------------------------------------------------ */

/* Storage casts. fp16 is IEEE binary16, bf16 the upper half of binary32; both round to nearest
 * even from fp32 (overflow to inf, subnormals exact), keep inf, and keep NaN a NaN of the same
 * sign (quiet, top payload bits kept). Widening back to fp32 is exact. Computed on the bit
 * patterns, so the result is the same on every port, with or without an FPU. */
uint16_t poet_f32_to_f16(float f);
float poet_f16_to_f32(uint16_t h);
uint16_t poet_f32_to_bf16(float f);
float poet_bf16_to_f32(uint16_t h);
void poet_cast_f32_f16(int n, const float *x, uint16_t *y);
void poet_cast_f16_f32(int n, const uint16_t *x, float *y);
void poet_cast_f32_bf16(int n, const float *x, uint16_t *y);
void poet_cast_bf16_f32(int n, const uint16_t *x, float *y);

/* int8, symmetric, zero point 0, one scale per tensor. The scale is m / 127 with m the largest
 * finite |x| (NaN and inf are skipped), or 1 when that is below the smallest normal float (an
 * all-zero tensor). */
float poet_absmax_scale(int n, const float *x);
/* v rounded half to even and saturated to [-127, 127] (inf saturates), NaN -> 0. */
int8_t poet_q8(float v);
/* q = poet_q8(x * (1 / scale)). */
void poet_quantize_i8(int n, float scale, const float *x, int8_t *q);
/* y = q * scale. */
void poet_dequantize_i8(int n, float scale, const int8_t *q, float *y);

/* int8 forward kernels: the products summed exactly in int32 (the caller keeps the reduction length,
 * in or C/groups * kh * kw, at most 133143 = 2^31 / 127^2, so the sum cannot overflow), then
 * y = acc * (x_scale * w_scale) (+ b) in fp32, in that order. Weights are quantised per tensor
 * (w_scale is one number). Layouts, geometry and b (NULL: none) as poet_linear_fwd and
 * poet_conv2d_ex_fwd. */
void poet_linear_i8_fwd(int B, int in, int out, const int8_t *xq, float x_scale, const int8_t *wq,
                        float w_scale, const float *b, float *y);

/* fp32 linear layers whose frozen weight is stored int8 (weight-only: w = (float)q * w_scale, made as
 * each element is read): the loops and roundings of poet_linear_fwd and of poet_linear_bwd's input
 * gradient on that dequantised weight, bit for bit. No weight gradient: the weight is frozen. */
/* The forward computes output features o_begin..o_end-1 (all: 0..out), wq holding just their rows (in weights
 * each): a layer whose weight streams from aux storage runs it on each read (ops/linear.c), and every
 * output element comes out as the whole layer's would. */
void poet_linear_w8_fwd(int B, int in, int out, int o_begin, int o_end, const float *x, const int8_t *wq,
                        float w_scale, const float *b, float *y);
void poet_linear_w8_bwd_gx(int B, int in, int out, const float *g, const int8_t *wq, float w_scale, float *gx);
void poet_conv2d_i8_fwd(const poet_conv_t *cv, const int8_t *xq, float x_scale, const int8_t *wq,
                        float w_scale, const float *b, float *y);

/* Static int8 (a frozen prefix, scales fixed on the host): the int8 conv above with its epilogue,
 * v = acc * (x_scale * w_scale) (+ b), then ReLU if relu, then y fp32 (y_scale NULL) or int8
 * q8(v * (1 / *y_scale)). add: v = a * a_scale + b * b_scale (each product rounded), same epilogue. */
void poet_conv2d_q_fwd(const poet_conv_t *cv, const int8_t *xq, float x_scale, const int8_t *wq,
                       float w_scale, const float *b, int relu, const float *y_scale, void *y);
/* That epilogue for one element: v with ReLU if relu, then poet_q8(v * inv) into int8 y[i] (i8), or v
 * into fp32 y[i]. */
void poet_q_put(void *y, long i, float v, int relu, int i8, float inv);
/* The same for output channels o_begin..o_end-1 only, wq holding just their weights (C/groups kh kw
 * each): a layer whose weights stream from aux storage runs this on each read (ops/quant.c), and
 * every output element comes out as the whole layer's would. */
void poet_conv2d_q_fwd_rows(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float x_scale,
                            const int8_t *wq, float w_scale, const float *b, int relu, const float *y_scale,
                            void *y);
/* poet_maxpool2d_general_fwd over int8 values: the output keeps the input's scale. */
void poet_maxpool2d_q_fwd(int B, int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int ceil_mode,
                          const int8_t *x, int8_t *y);
/* The mean over r of int8 x[outer, r, inner] at x_scale: v = ((float)(integer sum) / r) * x_scale, the
 * epilogue as poet_add_q_fwd's. r is at most 2^16, so the sum is exact in fp32. */
void poet_mean_q_fwd(int outer, int r, int inner, const int8_t *x, float x_scale, int relu, const float *y_scale,
                     void *y);
/* int8 a[outer, r, inner] at a_scale times int8 b[outer, inner] at b_scale repeated over r: v = (a a_scale) *
 * (b b_scale), each product rounded, the epilogue as poet_add_q_fwd's. */
void poet_mul_q_fwd(int outer, int r, int inner, const int8_t *a, float a_scale, const int8_t *b, float b_scale,
                    int relu, const float *y_scale, void *y);
/* int8 slice and cat (a stage run in row strips: poet.plan.transform.patches), the scale unchanged: y[outer, len] =
 * the columns offset..offset+len-1 of x[outer, total]; y[outer, sum of len] = the k inputs' rows side by side. */
void poet_slice_i8(int outer, int total, int offset, int len, const int8_t *x, int8_t *y);
void poet_cat_i8(int outer, int k, const int *len, const int8_t *const *x, int8_t *y);
void poet_add_q_fwd(int n, const int8_t *a, float a_scale, const int8_t *b, float b_scale, int relu,
                    const float *y_scale, void *y);

#endif
