/* The same kernels as CMSIS-NN runs them (built by benchmarks/kernels_peer.py from a pinned commit, with
 * its own default -Ofast): its fp32 forward operators (fully connected, convolution, depthwise, batch
 * matmul) and its int8 ones (arm_fully_connected_s8, the convolution and depthwise wrappers, which pick
 * its fastest kernel for the shape: SMLAD on the M4F). CMSIS-NN is NHWC where poet is NCHW: the
 * multiply-adds are the same. Its int8 operators requantise to int8 with a fixed-point multiplier where
 * poet's scale in fp32; their outputs differ, the work per multiply-add is what is compared. CMSIS-NN has
 * no backward operators. Only in bench images. */
#include "arm_nnfunctions.h"
#include "peers.h"

static int32_t SCRATCH[32768]; /* its kernels' scratch (im2col, packed weights), 128 KiB */
static int32_t BIAS32[256], MULT[256], SHIFT[256];

static cmsis_nn_dims dims(int32_t n, int32_t h, int32_t w, int32_t c)
{
    cmsis_nn_dims d;
    d.n = n, d.h = h, d.w = w, d.c = c;
    return d;
}

static cmsis_nn_tile tile(int32_t w, int32_t h)
{
    cmsis_nn_tile t;
    t.w = w, t.h = h;
    return t;
}

/* The context for a call whose scratch needs `bytes`; NULL where it does not fit, so the case is left out. */
static const cmsis_nn_context *context(int32_t bytes)
{
    static cmsis_nn_context ctx;
    if (bytes < 0 || (size_t)bytes > sizeof SCRATCH)
        return 0;
    ctx.buf = SCRATCH, ctx.size = bytes;
    return &ctx;
}

static void quant_init(void)
{
    static int done;
    int i;
    if (done)
        return;
    done = 1;
    for (i = 0; i < 256; i++)
        BIAS32[i] = i * 37 - 4000, MULT[i] = 1518500250, SHIFT[i] = -7; /* ~0.0055, as TFLite's tools give */
}

int peer_nn_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    const cmsis_nn_fc_params_f32 p = {{-3.4e38f, 3.4e38f}, ARM_NN_WEIGHT_FORMAT_STANDARD};
    cmsis_nn_dims xd = dims(B, 1, 1, in), wd = dims(in, 1, 1, out), bd = dims(1, 1, 1, out), yd = dims(B, 1, 1, out);
    const cmsis_nn_context *ctx =
        context(arm_fully_connected_f32_get_buffer_size(&p, &xd, &wd, &yd, ARM_NN_LAYOUT_NHWC));
    if (!ctx)
        return -1;
    return arm_fully_connected_f32(ctx, &p, &xd, x, &wd, w, &bd, b, &yd, y, ARM_NN_LAYOUT_NHWC) ==
                   ARM_CMSIS_NN_SUCCESS
               ? 0
               : -1;
}

int peer_nn_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y)
{
    /* its dims: c the rows, w the columns; its native product is lhs [M, K] times rhs stored [N, K]
     * (transposed), the same multiply-adds as poet's bm [K, N] */
    const cmsis_nn_bmm_params_f32 p = {false, false, {-3.4e38f, 3.4e38f}, ARM_NN_WEIGHT_FORMAT_STANDARD};
    cmsis_nn_dims ad = dims(1, 1, K, M), bd = dims(1, 1, K, N), yd = dims(1, 1, N, M);
    const cmsis_nn_context *ctx = context(arm_batch_matmul_f32_get_buffer_size(&p, &ad, &bd, &yd));
    if (!ctx)
        return -1;
    return arm_batch_matmul_f32(ctx, &p, &ad, a, &bd, bm, &yd, y) == ARM_CMSIS_NN_SUCCESS ? 0 : -1;
}

static void conv_dims(const poet_conv_t *cv, cmsis_nn_dims *xd, cmsis_nn_dims *wd, cmsis_nn_dims *bd,
                      cmsis_nn_dims *yd)
{
    int ho = poet_conv2d_out(cv->H, cv->kh, cv->stride, cv->ph);
    int wo = poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    *xd = dims(cv->B, cv->H, cv->W, cv->C);
    *wd = cv->groups == 1 ? dims(cv->O, cv->kh, cv->kw, cv->C) : dims(1, cv->kh, cv->kw, cv->O);
    *bd = dims(1, 1, 1, cv->O);
    *yd = dims(cv->B, ho, wo, cv->O);
}

int peer_nn_conv2d_fwd(const poet_conv_t *cv, const float *x, const float *w, const float *b, float *y)
{
    cmsis_nn_dims xd, wd, bd, yd;
    const cmsis_nn_context *ctx;
    const cmsis_nn_activation_f32 act = {-3.4e38f, 3.4e38f};
    conv_dims(cv, &xd, &wd, &bd, &yd);
    if (cv->groups == 1) {
        const cmsis_nn_conv_params_f32 p = {tile(cv->stride, cv->stride), tile(cv->pw, cv->ph), tile(1, 1), act,
                                            ARM_NN_WEIGHT_FORMAT_STANDARD};
        if (!(ctx = context(arm_convolve_wrapper_f32_get_buffer_size(&p, &xd, &wd, &yd))))
            return -1;
        return arm_convolve_wrapper_f32(ctx, &p, &xd, x, &wd, w, &bd, b, &yd, y) == ARM_CMSIS_NN_SUCCESS ? 0 : -1;
    }
    if (cv->groups == cv->C) {
        const cmsis_nn_dw_conv_params_f32 p = {cv->O / cv->C, tile(cv->stride, cv->stride), tile(cv->pw, cv->ph),
                                               tile(1, 1), act};
        if (!(ctx = context(arm_depthwise_conv_wrapper_f32_get_buffer_size(&p, &xd, &wd, &yd))))
            return -1;
        return arm_depthwise_conv_wrapper_f32(ctx, &p, &xd, x, &wd, w, &bd, b, &yd, y) == ARM_CMSIS_NN_SUCCESS ? 0
                                                                                                            : -1;
    }
    return -1; /* no grouped convolution between the two */
}

int peer_nn_linear_s8_fwd(int B, int in, int out, const int8_t *x, const int8_t *w, int8_t *y)
{
    const cmsis_nn_fc_params p = {0, 0, 0, {-128, 127}};
    const cmsis_nn_per_tensor_quant_params q = {MULT[0], SHIFT[0]};
    cmsis_nn_dims xd = dims(B, 1, 1, in), wd = dims(in, 1, 1, out), bd = dims(1, 1, 1, out), yd = dims(B, 1, 1, out);
    const cmsis_nn_context *ctx = context(arm_fully_connected_s8_get_buffer_size(&wd));
    if (!ctx)
        return -1;
    quant_init();
    return arm_fully_connected_s8(ctx, &p, &q, &xd, x, &wd, w, &bd, BIAS32, &yd, y) == ARM_CMSIS_NN_SUCCESS ? 0
                                                                                                        : -1;
}

/* ReLU as the activation range where the benchmark's poet_conv2d_q_fwd has it (all but the 1x1). */
int peer_nn_conv2d_s8_fwd(const poet_conv_t *cv, const int8_t *x, const int8_t *w, int8_t *y)
{
    cmsis_nn_dims xd, wd, bd, yd;
    const cmsis_nn_context *ctx;
    cmsis_nn_per_channel_quant_params q;
    conv_dims(cv, &xd, &wd, &bd, &yd);
    quant_init();
    q.multiplier = MULT, q.shift = SHIFT;
    if (cv->groups == 1) {
        const cmsis_nn_conv_params p = {0, 0, tile(cv->stride, cv->stride), tile(cv->pw, cv->ph), tile(1, 1),
                                        {cv->kh != 1 ? 0 : -128, 127}};
        if (!(ctx = context(arm_convolve_wrapper_s8_get_buffer_size(&p, &xd, &wd, &yd))))
            return -1;
        return arm_convolve_wrapper_s8(ctx, &p, &q, &xd, x, &wd, w, &bd, BIAS32, &yd, y) == ARM_CMSIS_NN_SUCCESS
                   ? 0
                   : -1;
    }
    if (cv->groups == cv->C) {
        const cmsis_nn_dw_conv_params p = {0, 0, cv->O / cv->C, tile(cv->stride, cv->stride), tile(cv->pw, cv->ph),
                                           tile(1, 1), {0, 127}};
        if (!(ctx = context(arm_depthwise_conv_wrapper_s8_get_buffer_size(&p, &xd, &wd, &yd))))
            return -1;
        return arm_depthwise_conv_wrapper_s8(ctx, &p, &q, &xd, x, &wd, w, &bd, BIAS32, &yd, y) ==
                       ARM_CMSIS_NN_SUCCESS
                   ? 0
                   : -1;
    }
    return -1;
}

/* 2x2 max pooling, stride 2 (CMSIS-NN's pooling is forward only). */
int peer_nn_maxpool2d_fwd(int B, int C, int H, int W, const float *x, float *y)
{
    const cmsis_nn_pool_params_f32 p = {{2, 2}, {0, 0}, {-3.4e38f, 3.4e38f}};
    cmsis_nn_dims xd = dims(B, H, W, C), kd = dims(1, 2, 2, 1), yd = dims(B, H / 2, W / 2, C);
    cmsis_nn_context ctx = {0, 0};
    return arm_max_pool_f32(&ctx, &p, &xd, x, &kd, &yd, y) == ARM_CMSIS_NN_SUCCESS ? 0 : -1;
}
