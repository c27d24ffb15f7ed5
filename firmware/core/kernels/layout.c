/* Data movement: copies, gathers (embedding, select) and permutes. Conventions are in kernels.h. */
#include "kernels.h"

void poet_copy(int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; i++)
        y[i] = x[i];
}

/* ---- embedding and select ------------------------------------------------------------------- */

void poet_embedding_fwd(int n, int V, int D, const int32_t *ids, const float *w, float *y)
{
    int i, j;
    for (i = 0; i < n; i++) {
        float *yr = y + (long)i * D;
        int32_t id = ids[i];
        if (id < 0 || id >= V) {
            for (j = 0; j < D; j++)
                yr[j] = 0.0f;
            continue;
        }
        for (j = 0; j < D; j++)
            yr[j] = w[(long)id * D + j];
    }
}

void poet_embedding_bwd(int n, int V, int D, const int32_t *ids, const float *g, float *dw)
{
    int i, j;
    for (i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= V)
            continue;
        for (j = 0; j < D; j++)
            dw[(long)id * D + j] += g[(long)i * D + j];
    }
}

void poet_select_fwd(int B, int S, int D, int index, const float *x, float *y)
{
    int b;
    for (b = 0; b < B; b++)
        poet_copy(D, x + ((long)b * S + index) * D, y + (long)b * D);
}

void poet_select_bwd(int B, int S, int D, int index, const float *g, float *gx)
{
    int b, s, j;
    for (b = 0; b < B; b++)
        for (s = 0; s < S; s++) {
            float *p = gx + ((long)b * S + s) * D;
            for (j = 0; j < D; j++)
                p[j] = s == index ? g[(long)b * D + j] : 0.0f;
        }
}

/* ---- concatenation ------------------------------------------------------------------------- */

void poet_cat_fwd(int outer, int k, const int *len, const float *const *x, float *y)
{
    int o, i;
    for (o = 0; o < outer; o++)
        for (i = 0; i < k; i++) {
            poet_copy(len[i], x[i] + (long)o * len[i], y);
            y += len[i];
        }
}

void poet_cat_bwd(int outer, int total, int offset, int len, const float *g, float *gx)
{
    int o;
    for (o = 0; o < outer; o++)
        poet_copy(len, g + (long)o * total + offset, gx + (long)o * len);
}

void poet_slice_bwd(int outer, int total, int offset, int len, const float *g, float *gx)
{
    int o, j;
    for (o = 0; o < outer; o++) {
        float *row = gx + (long)o * total;
        for (j = 0; j < offset; j++)
            row[j] = 0.0f;
        poet_copy(len, g + (long)o * len, row + offset);
        for (j = offset + len; j < total; j++)
            row[j] = 0.0f;
    }
}

/* ---- permutes ------------------------------------------------------------------------------- */

/* Walks y (the permuted layout) in order and x through its strides; the backward is the same walk
 * with the copy reversed, so the inverse permutation never has to be formed. */
static void permute4(const int *d, const int *p, const float *src, float *dst, int backward)
{
    long sx[4], st[4], yo = 0;
    int e[4], i0, i1, i2, i3, j;
    sx[3] = 1;
    for (j = 2; j >= 0; j--)
        sx[j] = sx[j + 1] * d[j + 1];
    for (j = 0; j < 4; j++) {
        e[j] = d[p[j]];
        st[j] = sx[p[j]];
    }
    for (i0 = 0; i0 < e[0]; i0++)
        for (i1 = 0; i1 < e[1]; i1++)
            for (i2 = 0; i2 < e[2]; i2++)
                for (i3 = 0; i3 < e[3]; i3++, yo++) {
                    long xo = i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
                    if (backward)
                        dst[xo] = src[yo];
                    else
                        dst[yo] = src[xo];
                }
}

void poet_permute4_fwd(const int *d, const int *p, const float *x, float *y)
{
    permute4(d, p, x, y, 0);
}

void poet_permute4_bwd(const int *d, const int *p, const float *g, float *gx)
{
    permute4(d, p, g, gx, 1);
}

void poet_transpose_last2_fwd(int b, int m, int n, const float *x, float *y)
{
    int d[4] = {1, b, m, n}, p[4] = {0, 1, 3, 2};
    permute4(d, p, x, y, 0);
}

void poet_transpose_last2_bwd(int b, int m, int n, const float *g, float *gx)
{
    int d[4] = {1, b, m, n}, p[4] = {0, 1, 3, 2};
    permute4(d, p, g, gx, 1);
}

void poet_transpose12_fwd(int d0, int d1, int d2, int d3, const float *x, float *y)
{
    int d[4] = {d0, d1, d2, d3}, p[4] = {0, 2, 1, 3};
    permute4(d, p, x, y, 0);
}

void poet_transpose12_bwd(int d0, int d1, int d2, int d3, const float *g, float *gx)
{
    int d[4] = {d0, d1, d2, d3}, p[4] = {0, 2, 1, 3};
    permute4(d, p, g, gx, 1);
}
