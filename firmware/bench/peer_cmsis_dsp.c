/* The same kernels as CMSIS-DSP would run them (its fp32 functions, built from the PyPI sdist's
 * sources by benchmarks/kernels_peer.py): forward as one arm_dot_prod_f32 per output, the grad input
 * as arm_mat_mult_f32, the weight gradient as a transpose and arm_mat_mult_f32 (the bias gradient is
 * left out: CMSIS-DSP has no column sum), the matmul as arm_mat_mult_f32. Only in bench images. */
#include "arm_math.h"
#include "peers.h"

static float T[16 * 256]; /* the transposed gradient */

void peer_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    int i, o;
    for (i = 0; i < B; i++)
        for (o = 0; o < out; o++) {
            float acc;
            arm_dot_prod_f32(x + (long)i * in, w + (long)o * in, (uint32_t)in, &acc);
            y[(long)i * out + o] = acc + b[o];
        }
}

static arm_matrix_instance_f32 mat(int rows, int cols, const float *p)
{
    arm_matrix_instance_f32 m;
    arm_mat_init_f32(&m, (uint16_t)rows, (uint16_t)cols, (float32_t *)(uintptr_t)p);
    return m;
}

void peer_linear_gx(int B, int in, int out, const float *g, const float *w, float *gx)
{
    arm_matrix_instance_f32 a = mat(B, out, g), bm = mat(out, in, w), y = mat(B, in, gx);
    arm_mat_mult_f32(&a, &bm, &y);
}

void peer_linear_dw(int B, int in, int out, const float *g, const float *x, float *dw)
{
    arm_matrix_instance_f32 gm = mat(B, out, g), gt = mat(out, B, T), xm = mat(B, in, x), y = mat(out, in, dw);
    arm_mat_trans_f32(&gm, &gt);
    arm_mat_mult_f32(&gt, &xm, &y);
}

void peer_matmul_fwd(int M, int K, int N, const float *a, const float *bm, float *y)
{
    arm_matrix_instance_f32 am = mat(M, K, a), b = mat(K, N, bm), ym = mat(M, N, y);
    arm_mat_mult_f32(&am, &b, &ym);
}
