/* What the fp32 and int8 convolutions (conv.c, lowp.c) share: which taps of a kernel reach inside the
 * input (the padding's terms are skipped as ranges, computed once, not tested per term), and whether
 * four channels run together. */
#ifndef POET_CONV_TAPS_H
#define POET_CONV_TAPS_H

/* A blocked loop's condition, fp32 and integer. POET_UNTILED (the cores without an FPU, linear.c): no
 * fp32 blocks, a float multiply-add being a library call there. POET_SMALL_CODE (the ESP32-C3, whose code
 * runs from the SRAM its pool would have, and its stand-in): no integer blocks either. What is left out
 * is left out as code. */
#ifdef POET_UNTILED
#define BLOCKED(x) ((void)(x), 0)
#else
#define BLOCKED(x) (x)
#endif
#ifdef POET_SMALL_CODE
#define BLOCKED_INT(x) ((void)(x), 0)
#else
#define BLOCKED_INT(x) (x)
#endif
/* Whether four channels from c, all of one group ending before end, run together. */
#define FOUR(c, end) BLOCKED((c) + 4 <= (end))

/* The taps k < K whose input i*stride + k - pad lies in [0, H): [*k0, *k1). */
static inline void taps(int i, int stride, int pad, int K, int H, int *k0, int *k1)
{
    int first = pad - i * stride, end = H + pad - i * stride;
    *k0 = first > 0 ? first : 0;
    *k1 = end < K ? end : K;
    if (*k1 < *k0)
        *k1 = *k0;
}

/* The outputs o < n whose whole window lies inside the input, o*stride - pad >= 0 and o*stride - pad + K <=
 * H: [*o0, *o1) (empty where the input is narrower than the kernel). */
static inline void whole_windows(int stride, int pad, int K, int H, int n, int *o0, int *o1)
{
    const int lo = (pad + stride - 1) / stride, hi = H - K + pad < 0 ? 0 : (H - K + pad) / stride + 1;
    *o0 = lo;
    *o1 = hi > n ? n : hi < lo ? lo : hi;
}

/* The outputs o < n whose input o*stride + k - pad lies in [0, H) for tap k: [*o0, *o1). */
static inline void outputs(int k, int stride, int pad, int H, int n, int *o0, int *o1)
{
    int lo = pad - k, hi = H - 1 + pad - k; /* lo <= o*stride <= hi */
    *o0 = lo <= 0 ? 0 : (lo + stride - 1) / stride;
    *o1 = hi < 0 ? 0 : hi / stride + 1;
    if (*o1 > n)
        *o1 = n;
    if (*o1 < *o0)
        *o1 = *o0;
}

/* The taps k < K that input i feeds, (i + pad - k) = o*stride for an output o < n, ascending with step
 * stride: from the return value while below *end. */
static inline int taps_from(int i, int stride, int pad, int K, int n, int *end)
{
    int t = i + pad, lo = t - (n - 1) * stride, k0 = t % stride;
    if (lo > k0)
        k0 += (lo - k0 + stride - 1) / stride * stride;
    *end = (t < K - 1 ? t : K - 1) + 1;
    return k0;
}

#endif
