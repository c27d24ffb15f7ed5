/* The specification of kernels/lowp.c's int8 rounding: q8 on the binary32 pattern, the static-int8
 * epilogue and the quantisation of a tensor. Conventions are in kernels.h. */
#include <string.h>

#include "../kernels.h"
#include "reference.h"

/* The names these are built under: poet_ref_* as the specification; poet_* where lowp.c builds q8 as the
 * kernel itself (the cores without a single-precision FPU). */
#ifndef POET_REF_NAME
#define POET_REF_NAME(f) poet_ref_##f
#endif

/* v rounded half to even and saturated to [-127, 127]; NaN gives 0. Done on v's bit pattern (its
 * mantissa shifted to the binary point), which is exact, independent of the rounding mode, and
 * a few integer instructions where float compares and conversions are library calls. */
int8_t POET_REF_NAME(q8)(float v)
{
    uint32_t u, a, m, s, q, rem, half;
    memcpy(&u, &v, sizeof u);
    a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN */
        return 0;
    if (a >= 0x42FE0000u) /* |v| >= 127, inf included */
        return (int8_t)(u >> 31 ? -127 : 127);
    s = 150u - (a >> 23); /* |v| = m 2^-s, m the 24-bit mantissa; s >= 17 here */
    if (s > 24u)          /* |v| < 0.5: rounds to 0 (exactly 0.5 is s = 24) */
        return 0;
    m = (a & 0x7FFFFFu) | 0x800000u;
    q = m >> s;
    rem = m & ((1u << s) - 1u);
    half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (int8_t)(u >> 31 ? -(int32_t)q : (int32_t)q);
}

#ifndef POET_REF_Q8_ONLY
void poet_ref_q_put(void *y, long i, float v, int relu, int i8, float inv)
{
    if (relu && v < 0.0f)
        v = 0.0f;
    if (i8)
        ((int8_t *)y)[i] = poet_ref_q8(v * inv);
    else
        ((float *)y)[i] = v;
}

void poet_ref_quantize_i8(int n, float scale, const float *x, int8_t *q)
{
    int i;
    float inv = 1.0f / scale;
    for (i = 0; i < n; i++)
        q[i] = poet_ref_q8(x[i] * inv);
}
#endif
