/* The dense product every fp32 dense kernel is (linear.c): C[m,n] = sum over k of A[m,k] * B[n,k],
 * each element summed over k ascending from 0.0f, one multiply then one add per term, exactly as the
 * reference loops (reference/linear.c) sum it, so a kernel built on it gives the reference's bits
 * whatever the shapes. How it is fast: dense.c. */
#ifndef POET_DENSE_H
#define POET_DENSE_H

/* An operand: element (i, k) at p + i*ld + k (rows = 1: each i a row contiguous in k) or at
 * p + i + k*ld (rows = 0: each k a row contiguous in i). */
typedef struct {
    const float *p;
    long ld;
    int rows;
} poet_operand_t;

/* Where the results go, a block at a time: C[m + r, n + s] = c[4 r + s] for r < nr, s < ns. */
typedef void (*poet_dense_put_t)(void *ctx, int m, int n, int nr, int ns, const float *c);

void poet_dense(int M, int N, int K, poet_operand_t a, poet_operand_t b, poet_dense_put_t put, void *ctx);

#endif
