/* The same kernels as AIfES for Arduino runs them (built by benchmarks/kernels_peer.py from a pinned
 * commit): its default fp32 math, as its dense and Conv2D layers call it. Linear forward: x W + b with W
 * stored [in, out] (aimath_f32_default_linear); grad input: g W^T (mat_mul_bt); weight gradient: x^T g
 * (mat_mul_at) and the bias's as a channel sum; matmul: mat_mul; conv2d, channels first: conv2d_fwd,
 * conv2d_bwd_full (grad input), conv2d_bwd (weight gradient; its layer adds the bias's as a channel sum,
 * done here too). AIfES has no grouped convolution. And one whole training step of mlp-digits (64-32-32-32-10,
 * ReLU, softmax cross-entropy, SGD, a batch of 16) by aialgo_train_model. Only in bench images. */
#include "aifes.h"
#include "peers.h"

static aitensor_t t2(uint16_t *shape, int rows, int cols, const float *data)
{
    aitensor_t t = AITENSOR_2D_F32(shape, data);
    shape[0] = (uint16_t)rows, shape[1] = (uint16_t)cols;
    return t;
}

static aitensor_t t1(uint16_t *shape, int n, const float *data)
{
    aitensor_t t = {aif32, 1, shape, 0, (void *)(uintptr_t)data};
    shape[0] = (uint16_t)n;
    return t;
}

static aitensor_t t4(uint16_t *shape, int n, int c, int h, int w, const float *data)
{
    aitensor_t t = AITENSOR_4D_F32(shape, data);
    shape[0] = (uint16_t)n, shape[1] = (uint16_t)c, shape[2] = (uint16_t)h, shape[3] = (uint16_t)w;
    return t;
}

int peer_aifes_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    uint16_t sx[2], sw[2], sb[1], sy[2];
    aitensor_t xt = t2(sx, B, in, x), wt = t2(sw, in, out, w), bt = t1(sb, out, b), yt = t2(sy, B, out, y);
    aimath_f32_default_linear(&xt, &wt, &bt, &yt);
    return 0;
}

int peer_aifes_linear_gx(int B, int in, int out, const float *g, const float *w, float *gx)
{
    uint16_t sg[2], sw[2], sy[2];
    aitensor_t gt = t2(sg, B, out, g), wt = t2(sw, in, out, w), yt = t2(sy, B, in, gx);
    aimath_f32_default_mat_mul_bt(&gt, &wt, &yt);
    return 0;
}

int peer_aifes_linear_dw(int B, int in, int out, const float *g, const float *x, float *dw, float *db)
{
    uint16_t sx[2], sg[2], sw[2], sb[1];
    aitensor_t xt = t2(sx, B, in, x), gt = t2(sg, B, out, g), wt = t2(sw, in, out, dw), bt = t1(sb, out, db);
    aimath_f32_default_mat_mul_at(&xt, &gt, &wt);
    aimath_f32_default_sum_channelwise(&gt, 1, &bt);
    return 0;
}

int peer_aifes_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y)
{
    uint16_t sa[2], sb[2], sy[2];
    aitensor_t at = t2(sa, M, K, a), bt = t2(sb, K, N, bm), yt = t2(sy, M, N, y);
    aimath_f32_default_mat_mul(&at, &bt, &yt);
    return 0;
}

/* conv: 0 forward, 1 grad input, 2 weight and bias gradients */
int peer_aifes_conv2d(int which, const poet_conv_t *cv, const float *x, const float *w, const float *b,
                      const float *g, float *y, float *dw, float *db)
{
    uint16_t sx[4], sw[4], sb[1], sy[4];
    uint16_t stride[2], dilation[2] = {1, 1}, padding[2];
    const int ho = poet_conv2d_out(cv->H, cv->kh, cv->stride, cv->ph);
    const int wo = poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    aitensor_t xt, wt, bt, yt;
    if (cv->groups != 1 || cv->ph != cv->pw)
        return -1;
    stride[0] = stride[1] = (uint16_t)cv->stride, padding[0] = padding[1] = (uint16_t)cv->ph;
    wt = t4(sw, cv->O, cv->C, cv->kh, cv->kw, which == 2 ? dw : w);
    if (which == 0) {
        xt = t4(sx, cv->B, cv->C, cv->H, cv->W, x), bt = t1(sb, cv->O, b), yt = t4(sy, cv->B, cv->O, ho, wo, y);
        aimath_f32_default_conv2d_fwd(&xt, stride, dilation, padding, &wt, &bt, 1, 0, &yt);
    } else if (which == 1) {
        yt = t4(sy, cv->B, cv->O, ho, wo, g), xt = t4(sx, cv->B, cv->C, cv->H, cv->W, y);
        aimath_f32_default_conv2d_bwd_full(&yt, stride, dilation, padding, &wt, 1, 0, &xt);
    } else {
        xt = t4(sx, cv->B, cv->C, cv->H, cv->W, x), yt = t4(sy, cv->B, cv->O, ho, wo, g), bt = t1(sb, cv->O, db);
        aimath_f32_default_conv2d_bwd(&xt, stride, dilation, padding, &yt, 1, 0, &wt);
        aimath_f32_default_sum_channelwise(&yt, 1, &bt);
    }
    return 0;
}

/* mlp-digits as an AIfES model, compiled and given its memory once. */
#define STEP_B 16
static uint16_t in_shape[2] = {STEP_B, 64};
static ailayer_input_f32_t input_layer = AILAYER_INPUT_F32_A(2, in_shape);
static ailayer_dense_f32_t dense[4] = {AILAYER_DENSE_F32_A(32), AILAYER_DENSE_F32_A(32), AILAYER_DENSE_F32_A(32),
                                       AILAYER_DENSE_F32_A(10)};
static ailayer_relu_f32_t relu[3] = {AILAYER_RELU_F32_A(), AILAYER_RELU_F32_A(), AILAYER_RELU_F32_A()};
static ailayer_softmax_f32_t softmax = AILAYER_SOFTMAX_F32_A();
static ailoss_crossentropy_f32_t loss;
static aimodel_t model;
static aiopti_sgd_f32_t sgd = AIOPTI_SGD_F32(0.01f);
static aiopti_t *opti;
static uint8_t params[32768] __attribute__((aligned(8))), train_mem[65536] __attribute__((aligned(8)));
static uint16_t xs[2] = {STEP_B, 64}, ts[2] = {STEP_B, 10};
static float xdata[STEP_B * 64], tdata[STEP_B * 10];

int peer_aifes_train_step(void)
{
    static int ready;
    uint32_t need;
    if (!ready) {
        ailayer_t *l;
        int i;
        model.input_layer = ailayer_input_f32_default(&input_layer);
        l = model.input_layer;
        for (i = 0; i < 4; i++) {
            l = ailayer_dense_f32_default(&dense[i], l);
            l = i < 3 ? ailayer_relu_f32_default(&relu[i], l) : ailayer_softmax_f32_default(&softmax, l);
        }
        model.output_layer = l;
        model.loss = ailoss_crossentropy_f32_default(&loss, model.output_layer);
        aialgo_compile_model(&model);
        if ((need = aialgo_sizeof_parameter_memory(&model)) > sizeof params)
            return -1;
        aialgo_distribute_parameter_memory(&model, params, need);
        for (i = 0; i < 4; i++) { /* fixed weights, not AIfES's rand()-based initialisers */
            float *wd = (float *)dense[i].weights.data, *bd = (float *)dense[i].bias.data;
            uint32_t k, n = (uint32_t)dense[i].weights.shape[0] * dense[i].weights.shape[1];
            for (k = 0; k < n; k++)
                wd[k] = (float)((int)(k * 37u % 61u) - 30) * 0.01f;
            for (k = 0; k < dense[i].bias.shape[0]; k++)
                bd[k] = 0.0f;
        }
        opti = aiopti_sgd_f32_default(&sgd);
        if ((need = aialgo_sizeof_training_memory(&model, opti)) > sizeof train_mem)
            return -1;
        aialgo_schedule_training_memory(&model, opti, train_mem, need);
        aialgo_init_model_for_training(&model, opti);
        for (i = 0; i < STEP_B * 64; i++)
            xdata[i] = (float)(i % 17) / 16.0f;
        for (i = 0; i < STEP_B; i++)
            tdata[i * 10 + i % 10] = 1.0f;
        ready = 1;
    }
    {
        aitensor_t x = AITENSOR_2D_F32(xs, xdata), t = AITENSOR_2D_F32(ts, tdata);
        return aialgo_train_model(&model, &x, &t, opti, STEP_B) == 0 ? 0 : -1;
    }
}
