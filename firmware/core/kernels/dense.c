/* The dense product (dense.h) in register tiles.
 *
 * Why tiles: a one-output loop loads two operands per multiply-add; a 4x4 tile of outputs loads 8
 * per 16 (four of A and four of B at each k), and its 16 accumulators and 8 operands fit the M4F's
 * 32 single-precision registers. Where M or N is not a multiple of 4, a strip of 1x4 tiles (one
 * vector against four) does the edge, and single dot products the corner. Every element is summed
 * over k ascending from 0.0f with a separate multiply and add (-std=c99: no fused multiply-add), so
 * the tiling never changes a bit: the reference loops are the specification.
 *
 * An operand's four vectors at step k are either four rows, each contiguous in k ("r": p + i*ld + k),
 * or four contiguous values that step by ld ("c": p + i + k*ld). The "r" loops are unrolled by 4 so
 * their loads take immediate offsets and each row pointer moves once per 4 steps. */
#include "dense.h"

#define TILE_ZERO                                                                                       \
    float c00 = 0.0f, c01 = 0.0f, c02 = 0.0f, c03 = 0.0f, c10 = 0.0f, c11 = 0.0f, c12 = 0.0f,         \
          c13 = 0.0f, c20 = 0.0f, c21 = 0.0f, c22 = 0.0f, c23 = 0.0f, c30 = 0.0f, c31 = 0.0f,         \
          c32 = 0.0f, c33 = 0.0f

/* One step of a 4x4 tile: the four A values against the four B values (each read once). */
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

/* A rows against B rows. */
static void tile_rr(int K, const float *a, long lda, const float *b, long ldb, float *c)
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

/* A rows against B columns. */
static void tile_rc(int K, const float *a, long lda, const float *b, long ldb, float *c)
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

/* A columns against B columns. */
static void tile_cc(int K, const float *a, long lda, const float *b, long ldb, float *c)
{
    int k;
    TILE_ZERO;
    for (k = 0; k < K; k++, a += lda, b += ldb)
        TILE_STEP(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    TILE_STORE(c);
}

/* One step of a strip: x against the four values B0..B3 (k ascending, as everywhere). */
#define STRIP_STEP(X, B0, B1, B2, B3)                                                                 \
    do {                                                                                              \
        float x_ = (X);                                                                               \
        c0 += x_ * (B0); c1 += x_ * (B1); c2 += x_ * (B2); c3 += x_ * (B3);                           \
    } while (0)

/* One vector (v[k*sv]) against four: rows of b (rows = 1) or columns (rows = 0); c[0..3]. A
 * contiguous vector (sv = 1, batch 1's forward) is unrolled by 4 like the tiles. */
static void strip(int K, const float *v, long sv, const float *b, long ldb, int rows, float *c)
{
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    int k = 0;
    if (rows) {
        const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
        if (sv == 1)
            for (; k + 4 <= K; k += 4, v += 4, b0 += 4, b1 += 4, b2 += 4, b3 += 4) {
                STRIP_STEP(v[0], b0[0], b1[0], b2[0], b3[0]);
                STRIP_STEP(v[1], b0[1], b1[1], b2[1], b3[1]);
                STRIP_STEP(v[2], b0[2], b1[2], b2[2], b3[2]);
                STRIP_STEP(v[3], b0[3], b1[3], b2[3], b3[3]);
            }
        for (; k < K; k++, v += sv)
            STRIP_STEP(*v, *b0++, *b1++, *b2++, *b3++);
    } else {
        if (sv == 1)
            for (; k + 4 <= K; k += 4, v += 4) {
                STRIP_STEP(v[0], b[0], b[1], b[2], b[3]);
                b += ldb;
                STRIP_STEP(v[1], b[0], b[1], b[2], b[3]);
                b += ldb;
                STRIP_STEP(v[2], b[0], b[1], b[2], b[3]);
                b += ldb;
                STRIP_STEP(v[3], b[0], b[1], b[2], b[3]);
                b += ldb;
            }
        for (; k < K; k++, v += sv, b += ldb)
            STRIP_STEP(*v, b[0], b[1], b[2], b[3]);
    }
    c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;
}

/* Vector i of operand x: its first element and its step in k. */
static const float *vec(poet_operand_t x, int i, long *step)
{
    *step = x.rows ? 1 : x.ld;
    return x.rows ? x.p + (long)i * x.ld : x.p + i;
}

/* Four vectors of x from i: the start strip() and the tiles take. */
static const float *four(poet_operand_t x, int i) { return x.rows ? x.p + (long)i * x.ld : x.p + i; }

void poet_dense(int M, int N, int K, poet_operand_t a, poet_operand_t b, poet_dense_put_t put, void *ctx)
{
    int m, n, r, M4 = M & ~3, N4 = N & ~3;
    float c[16], t[16];
    long sv;
    for (m = 0; m < M4; m += 4)
        for (n = 0; n < N4; n += 4) {
            if (a.rows && b.rows) {
                tile_rr(K, four(a, m), a.ld, four(b, n), b.ld, c);
            } else if (a.rows) {
                tile_rc(K, four(a, m), a.ld, four(b, n), b.ld, c);
            } else if (!b.rows) {
                tile_cc(K, four(a, m), a.ld, four(b, n), b.ld, c);
            } else { /* A columns, B rows: B against A, transposed (a product commutes bit for bit) */
                tile_rc(K, four(b, n), b.ld, four(a, m), a.ld, t);
                for (r = 0; r < 16; r++)
                    c[r] = t[4 * (r & 3) + (r >> 2)];
            }
            put(ctx, m, n, 4, 4, c);
        }
    for (m = M4; m < M; m++) /* the bottom edge: row m of A against four of B */
        for (n = 0; n < N4; n += 4) {
            const float *v = vec(a, m, &sv);
            strip(K, v, sv, four(b, n), b.ld, b.rows, c);
            put(ctx, m, n, 1, 4, c);
        }
    for (n = N4; n < N; n++) /* the right edge: four of A against row n of B, as a column */
        for (m = 0; m < M4; m += 4) {
            const float *v = vec(b, n, &sv);
            strip(K, v, sv, four(a, m), a.ld, a.rows, t);
            c[0] = t[0]; c[4] = t[1]; c[8] = t[2]; c[12] = t[3];
            put(ctx, m, n, 4, 1, c);
        }
    for (m = M4; m < M; m++) /* the corner */
        for (n = N4; n < N; n++) {
            long sb;
            const float *x = vec(a, m, &sv), *y = vec(b, n, &sb);
            float acc = 0.0f;
            int k;
            for (k = 0; k < K; k++, x += sv, y += sb)
                acc += *x * *y;
            c[0] = acc;
            put(ctx, m, n, 1, 1, c);
        }
}
