/* Dense layers and batched matrix products (fp32). Conventions are in kernels.h; the specification
 * is reference/linear.c, whose bits these give exactly: each is one dense product (dense.h, in
 * register tiles) and a way to store its results. */
#include "kernels.h"

#ifdef POET_UNTILED
/* The cores without an FPU (POET_UNTILED) build the specification itself as their kernels: a float
 * multiply-add is a library call there, and neither tiles nor the dense product's stores would speed it. */
#define POET_REF_NAME(f) poet_##f
#include "reference/linear.c"
#else
#include "dense.h"

/* A row-major output: y[m, n] at y + m*ld + n, plus bias[n] when there is one. */
typedef struct {
    float *y;
    long ld;
    const float *bias;
} store_t;

static void store(void *ctx, int m, int n, int nr, int ns, const float *c)
{
    const store_t *o = (const store_t *)ctx;
    int r, s;
    for (r = 0; r < nr; r++, c += 4) {
        float *y = o->y + (long)(m + r) * o->ld + n;
        if (ns == 4 && o->bias) {
            const float *b = o->bias + n;
            y[0] = c[0] + b[0]; y[1] = c[1] + b[1]; y[2] = c[2] + b[2]; y[3] = c[3] + b[3];
        } else if (ns == 4) {
            y[0] = c[0]; y[1] = c[1]; y[2] = c[2]; y[3] = c[3];
        } else {
            for (s = 0; s < ns; s++)
                y[s] = o->bias ? c[s] + o->bias[n + s] : c[s];
        }
    }
}

/* A parameter gradient [M, ld], each element handed over once (kernels.h, poet_grad_put). */
typedef struct {
    const poet_grad_t *d;
    long ld;
} grad_store_t;

/* The update in backward of ns weights from at: under plain SGD optim.c's rule inline (the same bits), a
 * call per weight for the others. Apart from grad_store, whose stored-gradient loop it would crowd. */
__attribute__((noinline)) static void grad_update(const poet_grad_t *d, uint32_t at, int ns, const float *c)
{
    int s;
    if (d->u->opt == POET_OPT_SGD) {
        float *w = d->w + at;
        const float lr = d->u->lr;
        for (s = 0; s < ns; s++)
            w[s] -= lr * c[s];
    } else {
        for (s = 0; s < ns; s++)
            poet_grad_apply(d, at + (uint32_t)s, c[s]);
    }
}

static void grad_store(void *ctx, int m, int n, int nr, int ns, const float *c)
{
    const grad_store_t *o = (const grad_store_t *)ctx;
    int r, s;
    for (r = 0; r < nr; r++, c += 4) {
        uint32_t at = (uint32_t)((long)(m + r) * o->ld + n);
        if (o->d->g) { /* the common case, without poet_grad_put's test per element */
            float *g = o->d->g + at;
            if (ns == 4) {
                g[0] += c[0]; g[1] += c[1]; g[2] += c[2]; g[3] += c[3];
            } else {
                for (s = 0; s < ns; s++)
                    g[s] += c[s];
            }
        } else {
            grad_update(o->d, at, ns, c);
        }
    }
}

static poet_operand_t rows(const float *p, long ld)
{
    poet_operand_t x = {p, ld, 1};
    return x;
}

static poet_operand_t cols(const float *p, long ld)
{
    poet_operand_t x = {p, ld, 0};
    return x;
}

/* y[i,o] = sum_k x[i,k] w[o,k] (+ b[o]) */
void poet_linear_fwd(int B, int in, int out, const float *x, const float *w, const float *b,
                     float *y)
{
    store_t o = {y, out, b};
    poet_dense(B, out, in, rows(x, in), rows(w, in), store, &o);
}

void poet_linear_bwd(int B, int in, int out, const float *g, const float *x, const float *w,
                     const poet_grad_t *dw, const poet_grad_t *db, float *gx)
{
    int i, o;
    if (gx) { /* gx[i,k] = sum_o g[i,o] w[o,k], first: an update in backward changes w below */
        store_t to = {gx, in, 0};
        poet_dense(B, in, out, rows(g, out), cols(w, in), store, &to);
    }
    if (dw) { /* dW[o,k] = sum_i g[i,o] x[i,k]; none for a frozen weight (dw NULL), as in the conv */
        grad_store_t to = {dw, in};
        poet_dense(out, in, B, cols(g, out), cols(x, in), grad_store, &to);
    }
    if (db)
        for (o = 0; o < out; o++) {
            float acc = 0.0f;
            for (i = 0; i < B; i++)
                acc += g[(long)i * out + o];
            poet_grad_put(db, (uint32_t)o, acc);
        }
}

/* ---- matmul --------------------------------------------------------------------------------- */

/* y[t,i,j] = sum_k a[t,i,k] bm[t,k,j] */
void poet_matmul_fwd(int batch, int M, int K, int N, const float *a, const float *bm, float *y)
{
    int t;
    for (t = 0; t < batch; t++) {
        store_t o = {y + (long)t * M * N, N, 0};
        poet_dense(M, N, K, rows(a + (long)t * M * K, K), cols(bm + (long)t * K * N, N), store, &o);
    }
}

/* ga[t,i,k] = sum_j g[t,i,j] bm[t,k,j] */
void poet_matmul_bwd_a(int batch, int M, int K, int N, const float *g, const float *bm, float *ga)
{
    int t;
    for (t = 0; t < batch; t++) {
        store_t o = {ga + (long)t * M * K, K, 0};
        poet_dense(M, K, N, rows(g + (long)t * M * N, N), rows(bm + (long)t * K * N, N), store, &o);
    }
}

/* gb[t,k,j] = sum_i a[t,i,k] g[t,i,j] */
void poet_matmul_bwd_b(int batch, int M, int K, int N, const float *g, const float *a, float *gb)
{
    int t;
    for (t = 0; t < batch; t++) {
        store_t o = {gb + (long)t * K * N, N, 0};
        poet_dense(K, N, M, cols(a + (long)t * M * K, K), cols(g + (long)t * M * N, N), store, &o);
    }
}

#endif
