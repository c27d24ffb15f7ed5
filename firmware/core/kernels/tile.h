/* The 4x4 register tile the dense kernels (linear.c) are built from.
 *
 * c[4r + s] = sum over k of A(r, k) * B(s, k), k ascending from 0.0f, one multiply then one add per
 * term (-std=c99 turns contraction into fused multiply-add off): each element gets exactly the bits
 * of the reference's one-output-at-a-time loop (reference/linear.c), whatever the tiling, so the
 * tiling never changes a plan's results. Why a tile: 16 multiply-adds per 8 operand loads, where a
 * one-output loop loads 2 operands per multiply-add; 16 accumulators and 8 operands fit the M4F's 32
 * single-precision registers.
 *
 * An operand's four rows at step k are either four rows each contiguous in k ("r": p + r*ld + k) or
 * four contiguous values that step by a stride ("c": p + r + k*ld). The "r" loops are unrolled by 4
 * so their loads take immediate offsets and each row pointer moves once per 4 steps. */
#ifndef POET_TILE_H
#define POET_TILE_H

#define TILE_ZERO                                                                                       \
    float c00 = 0.0f, c01 = 0.0f, c02 = 0.0f, c03 = 0.0f, c10 = 0.0f, c11 = 0.0f, c12 = 0.0f,         \
          c13 = 0.0f, c20 = 0.0f, c21 = 0.0f, c22 = 0.0f, c23 = 0.0f, c30 = 0.0f, c31 = 0.0f,         \
          c32 = 0.0f, c33 = 0.0f

/* One step: a0..a3 the four A values, b0..b3 the four B values (expressions, read once each). */
#define TILE_STEP(A0, A1, A2, A3, B0, B1, B2, B3)                                                     \
    do {                                                                                              \
        float a0_ = (A0), a1_ = (A1), a2_ = (A2), a3_ = (A3);                                         \
        float b0_ = (B0), b1_ = (B1), b2_ = (B2), b3_ = (B3);                                         \
        c00 += a0_ * b0_; c01 += a0_ * b1_; c02 += a0_ * b2_; c03 += a0_ * b3_;                       \
        c10 += a1_ * b0_; c11 += a1_ * b1_; c12 += a1_ * b2_; c13 += a1_ * b3_;                       \
        c20 += a2_ * b0_; c21 += a2_ * b1_; c22 += a2_ * b2_; c23 += a2_ * b3_;                       \
        c30 += a3_ * b0_; c31 += a3_ * b1_; c32 += a3_ * b2_; c33 += a3_ * b3_;                       \
    } while (0)

#define TILE_STORE(c)                                                                                 \
    do {                                                                                              \
        (c)[0] = c00; (c)[1] = c01; (c)[2] = c02; (c)[3] = c03;                                       \
        (c)[4] = c10; (c)[5] = c11; (c)[6] = c12; (c)[7] = c13;                                       \
        (c)[8] = c20; (c)[9] = c21; (c)[10] = c22; (c)[11] = c23;                                     \
        (c)[12] = c30; (c)[13] = c31; (c)[14] = c32; (c)[15] = c33;                                   \
    } while (0)

/* A rows, B rows: a + r*lda + k, b + s*ldb + k. */
static inline void tile_rr(int K, const float *a, long lda, const float *b, long ldb, float *c)
{
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
    int k;
    TILE_ZERO;
    for (k = 0; k + 4 <= K; k += 4) {
        TILE_STEP(a0[0], a1[0], a2[0], a3[0], b0[0], b1[0], b2[0], b3[0]);
        TILE_STEP(a0[1], a1[1], a2[1], a3[1], b0[1], b1[1], b2[1], b3[1]);
        TILE_STEP(a0[2], a1[2], a2[2], a3[2], b0[2], b1[2], b2[2], b3[2]);
        TILE_STEP(a0[3], a1[3], a2[3], a3[3], b0[3], b1[3], b2[3], b3[3]);
        a0 += 4; a1 += 4; a2 += 4; a3 += 4;
        b0 += 4; b1 += 4; b2 += 4; b3 += 4;
    }
    for (; k < K; k++)
        TILE_STEP(*a0++, *a1++, *a2++, *a3++, *b0++, *b1++, *b2++, *b3++);
    TILE_STORE(c);
}

/* A rows, B columns: a + r*lda + k, b + s + k*ldb. */
static inline void tile_rc(int K, const float *a, long lda, const float *b, long ldb, float *c)
{
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
    int k;
    TILE_ZERO;
    for (k = 0; k + 4 <= K; k += 4) {
        TILE_STEP(a0[0], a1[0], a2[0], a3[0], b[0], b[1], b[2], b[3]);
        b += ldb;
        TILE_STEP(a0[1], a1[1], a2[1], a3[1], b[0], b[1], b[2], b[3]);
        b += ldb;
        TILE_STEP(a0[2], a1[2], a2[2], a3[2], b[0], b[1], b[2], b[3]);
        b += ldb;
        TILE_STEP(a0[3], a1[3], a2[3], a3[3], b[0], b[1], b[2], b[3]);
        b += ldb;
        a0 += 4; a1 += 4; a2 += 4; a3 += 4;
    }
    for (; k < K; k++, b += ldb)
        TILE_STEP(*a0++, *a1++, *a2++, *a3++, b[0], b[1], b[2], b[3]);
    TILE_STORE(c);
}

/* A columns, B columns: a + r + k*lda, b + s + k*ldb. */
static inline void tile_cc(int K, const float *a, long lda, const float *b, long ldb, float *c)
{
    int k;
    TILE_ZERO;
    for (k = 0; k < K; k++, a += lda, b += ldb)
        TILE_STEP(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    TILE_STORE(c);
}

/* One element the tiles leave over (an edge): sum over k of a[k*sa] * b[k*sb], in the same order. */
static inline float tile_dot(int K, const float *a, long sa, const float *b, long sb)
{
    float acc = 0.0f;
    int k;
    for (k = 0; k < K; k++, a += sa, b += sb)
        acc += *a * *b;
    return acc;
}

#endif
