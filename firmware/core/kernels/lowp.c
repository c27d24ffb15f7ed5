/* Low-precision kernels: storage casts (fp16, bf16, int8 with a per-tensor scale) and the int8
 * forward kernels of linear and conv2d (int32 accumulate, fp32 result). Conventions in kernels.h.
 *
 * Every conversion is bit manipulation on the binary32 pattern, not a compiler type: the
 * Cortex-M0+ and RV32 builds have no _Float16, and the M4F's FPU has no half-precision
 * arithmetic worth relying on for exact IEEE rounding of subnormals. The integer paths also cost
 * the soft-float boards no library calls, which is the point of storing at half size there. */
#include "conv_taps.h"
#include "kernels.h"

#include <string.h>

/* The smallest normal float, spelled out so nothing needs float.h. */
#define F32_MIN_NORMAL 1.17549435e-38f

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- fp16 (IEEE binary16) ------------------------------------------------------------------- */

uint16_t poet_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;

    if (a >= 0x47800000u) {
        /* 2^16 and up, inf, NaN. NaN stays NaN: quiet bit set, the top payload bits kept (what
         * the x86 F16C and ARM conversion instructions do). Finite values this large are past
         * the halfway point above 65504 and round to inf. */
        if (a > 0x7F800000u)
            return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
        return (uint16_t)(sign | 0x7C00u);
    }
    if (a >= 0x38800000u) {
        /* Normal half (2^-14 and up): rebias the exponent by 15 - 127 and round the 13 dropped
         * mantissa bits to nearest even. A carry out of the mantissa bumps the exponent, which is
         * right, including up to inf from 65520 on. */
        uint32_t odd = (a >> 13) & 1u;
        a += 0xC8000FFFu + odd; /* (15 - 127) << 23 modulo 2^32, plus 0xFFF: half an ulp less one */
        return (uint16_t)(sign | (a >> 13));
    }
    if (a <= 0x33000000u) /* up to 2^-25, half the smallest subnormal: the tie goes to even, 0 */
        return (uint16_t)sign;
    {
        /* Subnormal half: the value in units of 2^-24 is the full mantissa shifted right by
         * 126 - exponent (14..24 here), rounded to nearest even on the bits shifted out. A round
         * up to 0x400 is the smallest normal half, encoded correctly by the same bits. */
        uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
}

float poet_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) /* inf, or NaN with its payload */
        return bits_f32(sign | 0x7F800000u | (m << 13));
    if (e)
        return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (!m)
        return bits_f32(sign);
    /* subnormal half m * 2^-24: normalise, so it is a normal float */
    e = 113u;
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return bits_f32(sign | (e << 23) | ((m & 0x3FFu) << 13));
}

void poet_cast_f32_f16(int n, const float *x, uint16_t *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = poet_f32_to_f16(x[i]);
}

void poet_cast_f16_f32(int n, const uint16_t *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = poet_f16_to_f32(x[i]);
}

/* ---- bf16 (the upper half of binary32) ------------------------------------------------------ */

uint16_t poet_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: truncating could clear every payload bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* round to nearest even on the low 16 bits; a carry reaches the exponent (up to inf) */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float poet_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

void poet_cast_f32_bf16(int n, const float *x, uint16_t *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = poet_f32_to_bf16(x[i]);
}

void poet_cast_bf16_f32(int n, const uint16_t *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = poet_bf16_to_f32(x[i]);
}

/* ---- int8, symmetric per tensor ------------------------------------------------------------- */

/* Whether float arithmetic is a library call here (Cortex-M0+, RV32 without F): then the int8 casts
 * do by integer arithmetic what a hardware FPU does in an instruction or two. Both paths give the
 * same bits (tests/test_kernels_lp.py builds and checks each). */
#ifndef POET_SOFT_FLOAT
#if defined(__SOFTFP__) || defined(__riscv_float_abi_soft)
#define POET_SOFT_FLOAT 1
#else
#define POET_SOFT_FLOAT 0
#endif
#endif

float poet_absmax_scale(int n, const float *x)
{
    int i;
    uint32_t m = 0;
    float s;
    /* On |x|'s bit pattern: non-negative floats order as their patterns do, and inf and NaN
     * (0x7F800000 and up) are skipped, so one bad element does not decide the scale. */
    for (i = 0; i < n; i++) {
        uint32_t a = f32_bits(x[i]) & 0x7FFFFFFFu;
        if (a > m && a < 0x7F800000u)
            m = a;
    }
    s = bits_f32(m) / 127.0f;
    /* an all-zero (or all-tiny) tensor: any scale quantises it to zeros; 1 keeps 1/s finite */
    return s >= F32_MIN_NORMAL ? s : 1.0f;
}

#if defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4)
/* With a single-precision FPU (the M4F), q8 is VCVTR's round to nearest even (FPSCR's default mode, which
 * poet never changes; NaN converts to 0 and inf saturates) and a clamp: reference/quant.c's bits, which
 * the benchmark image checks on the emulated core (firmware/bench/). */
#define Q8_VCVTR 1
static inline int32_t vcvtr(float v)
{
    float r;
    int32_t q;
    __asm__("vcvtr.s32.f32 %0, %1" : "=t"(r) : "t"(v));
    memcpy(&q, &r, sizeof q);
    return q;
}

int8_t poet_q8(float v)
{
    const int32_t q = vcvtr(v);
    return (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
}
#else
/* The specification's bit-pattern rounding is the kernel (a few integer instructions where float compares
 * and conversions would be library calls) */
#define POET_REF_NAME(f) poet_##f
#define POET_REF_Q8_ONLY
#include "reference/quant.c"
#undef POET_REF_NAME
#endif

void poet_quantize_i8(int n, float scale, const float *x, int8_t *q)
{
    int i;
    /* one division per tensor, a multiply per element: the M0 and RV32 divide in software */
    float inv = 1.0f / scale;
    for (i = 0; i < n; i++)
        q[i] = poet_q8(x[i] * inv);
}

#if POET_SOFT_FLOAT
/* q * scale for a positive normal scale, correctly rounded like the FPU's multiply: |q| times the
 * 24-bit mantissa fits 31 bits, so the product is exact in an integer and only its rounding to 24
 * bits is left. */
static float dq(int8_t q, uint32_t sbits)
{
    uint32_t p, e, sh = 0, rem, half, sign = q < 0 ? 0x80000000u : 0u;
    if (q == 0)
        return 0.0f;
    p = (uint32_t)(q < 0 ? -(int32_t)q : q) * ((sbits & 0x7FFFFFu) | 0x800000u);
    while ((p >> sh) >= 0x1000000u) /* bits beyond 24: 0..7 */
        sh++;
    if (sh) {
        rem = p & ((1u << sh) - 1u);
        half = 1u << (sh - 1u);
        p >>= sh;
        if (rem > half || (rem == half && (p & 1u)))
            p++;
        if (p == 0x1000000u) {
            p >>= 1;
            sh++;
        }
    }
    e = (sbits >> 23) + sh;
    if (e >= 255u)
        return bits_f32(sign | 0x7F800000u);
    return bits_f32(sign | (e << 23) | (p & 0x7FFFFFu));
}
#endif

void poet_dequantize_i8(int n, float scale, const int8_t *q, float *y)
{
    int i;
#if POET_SOFT_FLOAT
    uint32_t sb = f32_bits(scale);
    /* the integer product needs a positive normal scale, which absmax makes; anything else (a
     * hand-made scale) takes the float multiply */
    if (sb >= 0x00800000u && sb < 0x7F800000u) {
        for (i = 0; i < n; i++)
            y[i] = dq(q[i], sb);
        return;
    }
#endif
    for (i = 0; i < n; i++)
        y[i] = (float)q[i] * scale;
}

/* ---- int8 linear and conv2d forward ----------------------------------------------------------- */

#if defined(__ARM_FEATURE_DSP) && !defined(POET_SMALL_CODE)
/* The M4F's DSP extension: SMLAD multiplies two pairs of halfwords and adds both products to an
 * accumulator. Four int8 of a row, loaded as one word, become two pairs with SXTB16 (bytes 0 and 2; the
 * word rotated by 8, bytes 1 and 3): four multiply-adds in two instructions, as CMSIS-NN does it. The sums
 * are exact integers, so their order changes no bit of the result. */
#include <arm_acle.h>
#define SIMD_I8 1

static inline int32_t ld4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v); /* one LDR: the M4 reads unaligned words */
    return v;
}

/* bytes 1 and 3 of v as a halfword pair: SXTB16 with its own rotation, one instruction (GCC 12 does not
 * fold a separate rotate into it) */
static inline int32_t sxtb16_odd(int32_t v)
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}

/* a[j] = sum over k < n of x[k] w_j[k], w_j = w + j ws, for the four rows j that share the input x.
 * Its inner loop is written out: it needs thirteen registers (four sums, the input's two pairs, a weight
 * word and its pair, three pointers with the row stride, the count), and GCC 12, given it in C, spills
 * three pointers each round (33 instructions for 16 multiply-adds; this is 25). */
__attribute__((noinline)) static void dot4_i8(const int8_t *x, const int8_t *w, long ws, int n, int32_t a[4])
{
    const int8_t *p0 = w, *p2 = w + 2 * ws, *xp = x;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, v, xe, xo, t;
    int m = n >> 2, k;
    if (m)
        __asm__("1:\n\t"
                "ldr %[xe], [%[xp]], #4\n\t"
                "sxtb16 %[xo], %[xe], ror #8\n\t"
                "sxtb16 %[xe], %[xe]\n\t"
                "ldr %[v], [%[p0], %[ws]]\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a1], %[xe], %[t], %[a1]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a1], %[xo], %[v], %[a1]\n\t"
                "ldr %[v], [%[p0]], #4\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a0], %[xe], %[t], %[a0]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a0], %[xo], %[v], %[a0]\n\t"
                "ldr %[v], [%[p2], %[ws]]\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a3], %[xe], %[t], %[a3]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a3], %[xo], %[v], %[a3]\n\t"
                "ldr %[v], [%[p2]], #4\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a2], %[xe], %[t], %[a2]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a2], %[xo], %[v], %[a2]\n\t"
                "subs %[m], %[m], #1\n\t"
                "bne 1b"
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [xp] "+r"(xp), [p0] "+r"(p0),
                  [p2] "+r"(p2), [m] "+r"(m), [xe] "=&r"(xe), [xo] "=&r"(xo), [v] "=&r"(v), [t] "=&r"(t)
                : [ws] "r"(ws)
                : "cc", "memory");
    for (k = 0; k < (n & 3); k++) {
        v = xp[k];
        a0 += v * p0[k], a1 += v * p0[ws + k], a2 += v * p2[k], a3 += v * p2[ws + k];
    }
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
}

static int32_t dot1_i8(const int8_t *x, const int8_t *w, int n)
{
    int32_t a = 0, v;
    int k;
    for (k = 0; k + 4 <= n; k += 4) {
        const int32_t xv = ld4(x + k);
        v = ld4(w + k);
        a = __smlad(__sxtb16(xv), __sxtb16(v), a);
        a = __smlad(sxtb16_odd(xv), sxtb16_odd(v), a);
    }
    for (; k < n; k++)
        a += (int32_t)x[k] * w[k];
    return a;
}

/* The input patch of one output pixel, up to this many int8 (3x3 kernels over 128 channels), gathered on
 * the stack so the products run as the dense rows above; larger patches take the plain loops. */
#define PATCH_MAX 1152
#define POET_STR(x) POET_STR_(x)
#define POET_STR_(x) #x
#endif


/* Four outputs that share their input run together (one input load per four multiply-adds), each
 * summed in the reference's order (reference/linear_q.c): the int8 sums are exact anyway, and the
 * int8-weight ones dequantise each weight as the reference does, term by term. */
void poet_linear_i8_fwd(int B, int in, int out, const int8_t *xq, float x_scale, const int8_t *wq,
                        float w_scale, const float *b, float *y)
{
    int i, o, k, j;
    float s = x_scale * w_scale;
    for (i = 0; i < B; i++) {
        const int8_t *xr = xq + (long)i * in;
        float *yr = y + (long)i * out;
        for (o = 0; o < out;) {
            const int8_t *w0 = wq + (long)o * in;
            int32_t a[4] = {0, 0, 0, 0};
            const int n = BLOCKED_INT(o + 4 <= out) ? 4 : 1;
#ifdef SIMD_I8
            if (n == 4)
                dot4_i8(xr, w0, in, in, a);
            else
                a[0] = dot1_i8(xr, w0, in);
            (void)k;
#else
            if (n == 4) {
                const int8_t *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
                int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                for (k = 0; k < in; k++) {
                    int32_t v = xr[k];
                    a0 += v * w0[k]; a1 += v * w1[k]; a2 += v * w2[k]; a3 += v * w3[k];
                }
                a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
            } else {
                for (k = 0; k < in; k++)
                    a[0] += (int32_t)xr[k] * (int32_t)w0[k];
            }
#endif
            /* one rounding for the scale, one for the bias: the reference does the same */
            for (j = 0; j < n; j++, o++)
                yr[o] = b ? (float)a[j] * s + b[o] : (float)a[j] * s;
        }
    }
}

void poet_linear_w8_fwd(int B, int in, int out, int o_begin, int o_end, const float *x, const int8_t *wq,
                        float w_scale, const float *b, float *y)
{
    int i, o, k, j;
    for (i = 0; i < B; i++) {
        const float *xr = x + (long)i * in;
        float *yr = y + (long)i * out;
        for (o = o_begin; o < o_end;) {
            const int8_t *w0 = wq + (long)(o - o_begin) * in;
            float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const int n = BLOCKED(o + 4 <= o_end) ? 4 : 1;
            if (n == 4) {
                const int8_t *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
                float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                for (k = 0; k < in; k++) {
                    float v = xr[k];
                    a0 += v * ((float)w0[k] * w_scale); a1 += v * ((float)w1[k] * w_scale);
                    a2 += v * ((float)w2[k] * w_scale); a3 += v * ((float)w3[k] * w_scale);
                }
                a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
            } else {
                for (k = 0; k < in; k++)
                    a[0] += xr[k] * ((float)w0[k] * w_scale);
            }
            for (j = 0; j < n; j++, o++)
                yr[o] = b ? a[j] + b[o] : a[j];
        }
    }
}

void poet_linear_w8_bwd_gx(int B, int in, int out, const float *g, const int8_t *wq, float w_scale, float *gx)
{
    int i, o, k, j;
    for (i = 0; i < B; i++) {
        const float *gr = g + (long)i * out;
        for (k = 0; k < in;) {
            float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const int n = BLOCKED(k + 4 <= in) ? 4 : 1;
            if (n == 4) {
                float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                const int8_t *wc = wq + k;
                for (o = 0; o < out; o++, wc += in) {
                    float v = gr[o];
                    a0 += v * ((float)wc[0] * w_scale); a1 += v * ((float)wc[1] * w_scale);
                    a2 += v * ((float)wc[2] * w_scale); a3 += v * ((float)wc[3] * w_scale);
                }
                a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
            } else {
                for (o = 0; o < out; o++)
                    a[0] += gr[o] * ((float)wq[(long)o * in + k] * w_scale);
            }
            for (j = 0; j < n; j++, k++)
                gx[(long)i * in + k] = a[j];
        }
    }
}

/* A static-int8 layer's output element: v with its activation (relu: 0 none, 1 ReLU, 2 ReLU6, 3 hardswish,
 * 4 hardsigmoid, as poet_hardswish_fwd and poet_hardsigmoid_fwd compute them), then poet_q8(v * inv) into
 * int8 y, or v into fp32 y. Which, the node's attributes decide (q8), never a value read from flash. */
void poet_q_put(void *y, long i, float v, int relu, int i8, float inv)
{
    if (relu >= 3) {
        float r = v + 3.0f;
        r = r < 0.0f ? 0.0f : r > 6.0f ? 6.0f : r;
        v = relu == 3 ? v * r / 6.0f : r / 6.0f;
        relu = 0;
    }
#if defined(Q8_VCVTR) && defined(SIMD_I8)
    /* ReLU after the rounding, as saturation: v < 0 rounds to q <= 0 and NaN to 0, so clamping q to
     * [0, 127] (USAT) gives what rounding 0 would; without ReLU, SSAT to [-128, 127] and -128 raised.
     * ReLU6's top likewise: fp32 products and rounding are monotone, so min(v, 6) rounds to min(q, q(6)). */
    if (i8) {
        int32_t q = vcvtr(v * inv);
        if (relu) {
            q = __usat(q, 7);
            if (relu == 2) {
                int32_t top = __usat(vcvtr(6.0f * inv), 7);
                q = q < top ? q : top;
            }
        } else if ((q = __ssat(q, 8)) < -127)
            q = -127;
        ((int8_t *)y)[i] = (int8_t)q;
        return;
    }
#endif
    if (relu && v < 0.0f)
        v = 0.0f;
    if (relu == 2 && v > 6.0f)
        v = 6.0f;
    if (i8)
        ((int8_t *)y)[i] = poet_q8(v * inv);
    else
        ((float *)y)[i] = v;
}

/* One depthwise output's integer sum over the taps [ky0, ky1) x [kx0, kx1) of the window at xr (its row
 * ky0, column 0) and wr (the channel's kernel row ky0). */
static inline int32_t dw_one_q(const int8_t *xr, const int8_t *wr, int W, int kw, int ky0, int ky1, int kx0, int kx1)
{
    int32_t a = 0;
    int ky, kx;
    for (ky = ky0; ky < ky1; ky++, xr += W, wr += kw)
        for (kx = kx0; kx < kx1; kx++)
            a += (int32_t)xr[kx] * wr[kx];
    return a;
}

/* The depthwise case (one input and one output channel per group) a plane at a time, as conv.c's
 * depthwise_fwd: a whole 3x3 window's nine taps from registers, the border's taps as ranges. */
static void depthwise_q_rows(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float s,
                             const int8_t *wq, const float *b, int relu, int i8, float inv, void *y)
{
    const int C = cv->C, H = cv->H, W = cv->W, kh = cv->kh, kw = cv->kw, stride = cv->stride;
    const int ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_rows(cv), Wo = poet_conv2d_out(W, kw, stride, pw);
    const long HW = (long)H * W, kk = (long)kh * kw;
    int n, c, oy, ox, ky0, ky1, kx0, kx1, lo, hi;
    whole_windows(stride, pw, kw, W, Wo, &lo, &hi); /* the columns whose window is whole */
    for (n = 0; n < cv->B; n++)
        for (c = o_begin; c < o_end; c++) {
            const int8_t *xc = xq + ((long)n * C + c) * HW, *wc = wq + (long)(c - o_begin) * kk;
            long at = ((long)n * C + c) * Ho * Wo;
            for (oy = 0; oy < Ho; oy++, at += Wo) {
                const int8_t *xrow;
                int whole;
                taps(oy, stride, ph, kh, H, &ky0, &ky1);
                xrow = xc + (long)(oy * stride + ky0 - ph) * W - pw;
                whole = kh == 3 && kw == 3 && ky0 == 0 && ky1 == 3;
                for (ox = 0; ox < Wo; ox++) {
                    const int8_t *xr = xrow + (long)ox * stride;
                    int32_t a;
                    float v;
                    if (whole && ox == lo) {
                        const int32_t w0 = wc[0], w1 = wc[1], w2 = wc[2], w3 = wc[3], w4 = wc[4], w5 = wc[5];
                        const int32_t w6 = wc[6], w7 = wc[7], w8 = wc[8];
                        for (; ox < hi; ox++, xr += stride) {
                            const int8_t *r1 = xr + W, *r2 = r1 + W;
                            a = xr[0] * w0 + xr[1] * w1 + xr[2] * w2 + r1[0] * w3 + r1[1] * w4 + r1[2] * w5 +
                                r2[0] * w6 + r2[1] * w7 + r2[2] * w8;
                            /* one rounding for the scale, one for the bias: the reference does the same */
                            v = (float)a * s;
                            if (b)
                                v = v + b[c];
                            poet_q_put(y, at + ox, v, relu, i8, inv);
                        }
                        if (ox == Wo)
                            break;
                        xr = xrow + (long)ox * stride;
                    }
                    taps(ox, stride, pw, kw, W, &kx0, &kx1);
                    a = dw_one_q(xr, wc + (long)ky0 * kw, W, kw, ky0, ky1, kx0, kx1);
                    v = (float)a * s;
                    if (b)
                        v = v + b[c];
                    poet_q_put(y, at + ox, v, relu, i8, inv);
                }
            }
        }
}

#ifdef SIMD_I8
/* Two pixels' dot products with two weight rows: a[2 i + j] = sum over k < n of patch_i[k] w_j[k], the
 * pixels' patches at x and x + PATCH_MAX, the rows at w and w + ws. Each weight word then serves two pixels
 * and each patch word two rows: 22 instructions for 16 multiply-adds. Written out for the register count
 * (fourteen: all the M4 has free) as dot4_i8. */
__attribute__((noinline)) static void dot2x2_i8(const int8_t *x, const int8_t *w, long ws, int n, int32_t a[4])
{
    const int8_t *xp = x, *p0 = w;
    int32_t a00 = 0, a01 = 0, a10 = 0, a11 = 0, w0e, w0o, w1e, w1o, v, t;
    int m = n >> 2, k;
    if (m)
        __asm__("1:\n\t"
                "ldr %[v], [%[p0], %[ws]]\n\t"
                "sxtb16 %[w1e], %[v]\n\t"
                "sxtb16 %[w1o], %[v], ror #8\n\t"
                "ldr %[v], [%[p0]], #4\n\t"
                "sxtb16 %[w0e], %[v]\n\t"
                "sxtb16 %[w0o], %[v], ror #8\n\t"
                "ldr %[v], [%[xp], #" POET_STR(PATCH_MAX) "]\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a10], %[t], %[w0e], %[a10]\n\t"
                "smlad %[a11], %[t], %[w1e], %[a11]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a10], %[v], %[w0o], %[a10]\n\t"
                "smlad %[a11], %[v], %[w1o], %[a11]\n\t"
                "ldr %[v], [%[xp]], #4\n\t"
                "sxtb16 %[t], %[v]\n\t"
                "smlad %[a00], %[t], %[w0e], %[a00]\n\t"
                "smlad %[a01], %[t], %[w1e], %[a01]\n\t"
                "sxtb16 %[v], %[v], ror #8\n\t"
                "smlad %[a00], %[v], %[w0o], %[a00]\n\t"
                "smlad %[a01], %[v], %[w1o], %[a01]\n\t"
                "subs %[m], %[m], #1\n\t"
                "bne 1b"
                : [a00] "+r"(a00), [a01] "+r"(a01), [a10] "+r"(a10), [a11] "+r"(a11), [xp] "+r"(xp),
                  [p0] "+r"(p0), [m] "+r"(m), [w0e] "=&r"(w0e), [w0o] "=&r"(w0o), [w1e] "=&r"(w1e),
                  [w1o] "=&r"(w1o), [v] "=&r"(v), [t] "=&r"(t)
                : [ws] "r"(ws)
                : "cc", "memory");
    for (k = 0; k < (n & 3); k++) {
        const int32_t x0 = xp[k], x1 = xp[PATCH_MAX + k], u0 = p0[k], u1 = p0[ws + k];
        a00 += x0 * u0, a01 += x0 * u1, a10 += x1 * u0, a11 += x1 * u1;
    }
    a[0] = a00, a[1] = a01, a[2] = a10, a[3] = a11;
}

/* The input patch of output pixel (oy, ox) into p: its group's channels, kh x kw taps each, zeros where the
 * window leaves the input (the weights' own order). Element by element, not as memset and memcpy calls
 * (which GCC would make of plain row loops: dearer than these few bytes). */
static void gather(const poet_conv_t *cv, const int8_t *xg, int oy, int ox, int8_t *p)
{
    const int H = cv->H, W = cv->W, kh = cv->kh, kw = cv->kw, stride = cv->stride, Cg = cv->C / cv->groups;
    const long HW = (long)H * W;
    const int8_t *xw = xg + (long)(oy * stride - cv->ph) * W + ox * stride - cv->pw; /* tap (0, 0) */
    int c, ky, kx, ky0, ky1, kx0, kx1;
    taps(oy, stride, cv->ph, kh, H, &ky0, &ky1);
    taps(ox, stride, cv->pw, kw, W, &kx0, &kx1);
    if (kh == 1 && kw == 1 && kx1 > kx0 && ky1 > ky0) {
        for (c = 0; c < Cg; c++, xw += HW)
            *p++ = *xw;
    } else if (kw == 3 && kx0 == 0 && kx1 == 3) {
        for (c = 0; c < Cg; c++)
            for (ky = 0; ky < kh; ky++, p += 3) {
                const int8_t *xr = xw + c * HW + (long)ky * W;
                const int in = ky >= ky0 && ky < ky1;
                p[0] = in ? xr[0] : 0, p[1] = in ? xr[1] : 0, p[2] = in ? xr[2] : 0;
            }
    } else {
        for (c = 0; c < Cg; c++)
            for (ky = 0; ky < kh; ky++, p += kw) {
                const int8_t *xr = xw + c * HW + (long)ky * W;
                const int in = ky >= ky0 && ky < ky1;
                for (kx = 0; kx < kw; kx++)
                    p[kx] = in && kx >= kx0 && kx < kx1 ? xr[kx] : 0;
            }
    }
}

/* The convolution as dense rows (SIMD_I8): the input patches of two output pixels gathered on the stack,
 * then every output channel of the group as dot products with them, two channels at a time (a lone last
 * pixel: four channels at a time with its one patch). */
static void conv_q_patches(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float s,
                           const int8_t *wq, const float *b, int relu, int i8, float inv, void *y)
{
    const int C = cv->C, O = cv->O, Ho = poet_conv2d_rows(cv);
    const int Wo = poet_conv2d_out(cv->W, cv->kw, cv->stride, cv->pw);
    const int Cg = C / cv->groups, Og = O / cv->groups, L = Cg * cv->kh * cv->kw;
    const long HoWo = (long)Ho * Wo;
    int8_t patch[2 * PATCH_MAX];
    int n, g, q, o, j, two;
    for (n = 0; n < cv->B; n++)
        for (g = o_begin / Og; g * Og < o_end; g++) {
            const int8_t *xg = xq + ((long)n * C + (long)g * Cg) * cv->H * cv->W;
            const int o0 = g * Og > o_begin ? g * Og : o_begin, o1 = (g + 1) * Og < o_end ? (g + 1) * Og : o_end;
            for (q = 0; q < HoWo; q += two ? 2 : 1) { /* the output pixel, row by row */
                const long at = (long)n * O * HoWo + q;
                two = q + 1 < HoWo;
                gather(cv, xg, q / Wo, q % Wo, patch);
                if (two)
                    gather(cv, xg, (q + 1) / Wo, (q + 1) % Wo, patch + PATCH_MAX);
                for (o = o0; o < o1;) {
                    int32_t a[4];
                    const int nch = two ? (o + 2 <= o1 ? 2 : 1) : (o + 4 <= o1 ? 4 : 1);
                    const int8_t *wr = wq + (long)(o - o_begin) * L;
                    if (two && nch == 2)
                        dot2x2_i8(patch, wr, L, L, a);
                    else if (two)
                        a[0] = dot1_i8(patch, wr, L), a[2] = dot1_i8(patch + PATCH_MAX, wr, L);
                    else if (nch == 4)
                        dot4_i8(patch, wr, L, L, a);
                    else
                        a[0] = dot1_i8(patch, wr, L);
                    for (j = 0; j < nch; j++, o++) {
                        /* one rounding for the scale, one for the bias: the reference does the same */
                        float v = (float)a[j] * s, v1 = (float)a[2 + j] * s;
                        if (b)
                            v = v + b[o], v1 = v1 + b[o];
                        poet_q_put(y, at + (long)o * HoWo, v, relu, i8, inv);
                        if (two)
                            poet_q_put(y, at + (long)o * HoWo + 1, v1, relu, i8, inv);
                    }
                }
            }
        }
}
#endif

/* The fp32 convolution's loops (conv.c: tap ranges instead of a test per term, four output channels of
 * a group per input load), and a 1x1 kernel without padding as one plain loop over the channels.
 * Integer sums are exact, so the order only matters for speed; the epilogue is the reference's
 * (reference/conv_q.c), so are the bits. */
void poet_conv2d_q_fwd_rows(const poet_conv_t *cv, int o_begin, int o_end, const int8_t *xq, float x_scale,
                            const int8_t *wq, float w_scale, const float *b, int relu, const float *y_scale,
                            void *y)
{
    const int B = cv->B, C = cv->C, H = cv->H, W = cv->W, O = cv->O, kh = cv->kh, kw = cv->kw;
    const int stride = cv->stride, ph = cv->ph, pw = cv->pw;
    const int Ho = poet_conv2d_rows(cv), Wo = poet_conv2d_out(W, kw, stride, pw);
    const int Cg = C / cv->groups, Og = O / cv->groups;
    const int pointwise = BLOCKED_INT(kh == 1 && kw == 1 && ph == 0 && cv->pb == 0 && pw == 0);
    const long HW = (long)H * W, kk = (long)kh * kw, wo = (long)Cg * kk, HoWo = (long)Ho * Wo;
    const float s = x_scale * w_scale, inv = y_scale ? 1.0f / *y_scale : 0.0f;
    int n, o, oy, ox, c, ky, kx, ky0, ky1, kx0, kx1, j;
    if (BLOCKED_INT(Cg == 1 && Og == 1)) {
        depthwise_q_rows(cv, o_begin, o_end, xq, s, wq, b, relu, y_scale != 0, inv, y);
        return;
    }
#ifdef SIMD_I8
    if (wo <= PATCH_MAX) {
        conv_q_patches(cv, o_begin, o_end, xq, s, wq, b, relu, y_scale != 0, inv, y);
        return;
    }
#endif
    for (n = 0; n < B; n++)
        for (o = o_begin; o < o_end;) {
            const int grp = o / Og, end = (grp + 1) * Og < o_end ? (grp + 1) * Og : o_end;
            const int four = BLOCKED_INT(o + 4 <= end), nch = four ? 4 : 1;
            const int8_t *xg = xq + ((long)n * C + (long)grp * Cg) * HW;
            const int8_t *w0 = wq + (long)(o - o_begin) * wo, *w1 = w0 + wo, *w2 = w1 + wo, *w3 = w2 + wo;
            for (oy = 0; oy < Ho; oy++) {
                taps(oy, stride, ph, kh, H, &ky0, &ky1);
                for (ox = 0; ox < Wo; ox++) {
                    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                    long at = (((long)n * O + o) * Ho + oy) * Wo + ox;
                    if (pointwise) {
                        const int8_t *xp = xg + (long)oy * stride * W + (long)ox * stride;
                        if (four) {
                            for (c = 0; c < Cg; c++, xp += HW) {
                                int32_t v = *xp;
                                a0 += v * w0[c]; a1 += v * w1[c]; a2 += v * w2[c]; a3 += v * w3[c];
                            }
                        } else {
                            for (c = 0; c < Cg; c++, xp += HW)
                                a0 += (int32_t)*xp * w0[c];
                        }
                    } else {
                        taps(ox, stride, pw, kw, W, &kx0, &kx1);
                        for (c = 0; c < Cg; c++)
                            for (ky = ky0; ky < ky1; ky++) {
                                const int8_t *xr = xg + c * HW + (long)(oy * stride + ky - ph) * W + ox * stride - pw;
                                const long wk = c * kk + (long)ky * kw;
                                if (four) {
                                    for (kx = kx0; kx < kx1; kx++) {
                                        int32_t v = xr[kx];
                                        a0 += v * w0[wk + kx]; a1 += v * w1[wk + kx];
                                        a2 += v * w2[wk + kx]; a3 += v * w3[wk + kx];
                                    }
                                } else {
                                    for (kx = kx0; kx < kx1; kx++)
                                        a0 += (int32_t)xr[kx] * w0[wk + kx];
                                }
                            }
                    }
                    for (j = 0; j < nch; j++) {
                        /* one rounding for the scale, one for the bias: the reference does the same */
                        float v = (float)(j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : a3) * s;
                        if (b)
                            v = v + b[o + j];
                        poet_q_put(y, at + j * HoWo, v, relu, y_scale != 0, inv);
                    }
                }
            }
            o += nch;
        }
}

void poet_conv2d_q_fwd(const poet_conv_t *cv, const int8_t *xq, float x_scale, const int8_t *wq, float w_scale,
                       const float *b, int relu, const float *y_scale, void *y)
{
    poet_conv2d_q_fwd_rows(cv, 0, cv->O, xq, x_scale, wq, w_scale, b, relu, y_scale, y);
}

void poet_conv2d_i8_fwd(const poet_conv_t *cv, const int8_t *xq, float x_scale, const int8_t *wq, float w_scale,
                        const float *b, float *y)
{
    poet_conv2d_q_fwd(cv, xq, x_scale, wq, w_scale, b, 0, 0, y);
}

void poet_mean_q_fwd(int outer, int r, int inner, const int8_t *x, float x_scale, int relu, const float *y_scale,
                     void *y)
{
    int o, j, i;
    float inv = y_scale ? 1.0f / *y_scale : 0.0f;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *p = x + (long)o * r * inner + i;
            int32_t acc = 0;
            for (j = 0; j < r; j++)
                acc += p[(long)j * inner];
            poet_q_put(y, (long)o * inner + i, (float)acc / (float)r * x_scale, relu, y_scale != 0, inv);
        }
}

void poet_mul_q_fwd(int outer, int r, int inner, const int8_t *a, float a_scale, const int8_t *b, float b_scale,
                    int relu, const float *y_scale, void *y)
{
    int o, j, i;
    long k = 0;
    float inv = y_scale ? 1.0f / *y_scale : 0.0f;
    for (o = 0; o < outer; o++)
        for (j = 0; j < r; j++)
            for (i = 0; i < inner; i++, k++)
                poet_q_put(y, k, ((float)a[k] * a_scale) * ((float)b[(long)o * inner + i] * b_scale), relu,
                           y_scale != 0, inv);
}

void poet_slice_i8(int outer, int total, int offset, int len, const int8_t *x, int8_t *y)
{
    int o, j;
    for (o = 0; o < outer; o++)
        for (j = 0; j < len; j++)
            *y++ = x[(long)o * total + offset + j];
}

void poet_cat_i8(int outer, int k, const int *len, const int8_t *const *x, int8_t *y)
{
    int o, i, j;
    for (o = 0; o < outer; o++)
        for (i = 0; i < k; i++)
            for (j = 0; j < len[i]; j++)
                *y++ = x[i][(long)o * len[i] + j];
}

void poet_add_q_fwd(int n, const int8_t *a, float a_scale, const int8_t *b, float b_scale, int relu,
                    const float *y_scale, void *y)
{
    int i;
    float inv = y_scale ? 1.0f / *y_scale : 0.0f;
    for (i = 0; i < n; i++) {
        float va = (float)a[i] * a_scale, vb = (float)b[i] * b_scale;
        poet_q_put(y, i, va + vb, relu, y_scale != 0, inv);
    }
}
