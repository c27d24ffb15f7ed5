/* The device API (core/poet.h) driven from a file, for tests that hold it to the host-driven runtime:
 *   device_run BUNDLE < requests > answers
 * requests: u32 n_steps, then per step batch x input_elems f32 and batch i32 labels; u32 n_predict,
 * then n_predict x input_elems f32. answers: per step i32 status and f32 loss; u32 n_weights and the
 * weights as f32; then n_predict x output_elems f32 (or, when predict fails, nothing: its status is
 * the exit code). A pool and a pager (RAM) of their own, as an application's port gives them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/poet.h"
#include "../core/port.h"

static uint8_t *swap;
static uint32_t swap_bytes;
int port_pager_open(void) { return swap == 0; }
int port_pager_write(uint32_t off, const void *src, uint32_t n)
{
    if (off > swap_bytes || n > swap_bytes - off)
        return 1;
    memcpy(swap + off, src, n);
    return 0;
}
int port_pager_read(uint32_t off, void *dst, uint32_t n)
{
    if (off > swap_bytes || n > swap_bytes - off)
        return 1;
    memcpy(dst, swap + off, n);
    return 0;
}
uint32_t port_ticks(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint32_t)((uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u);
}
uint32_t port_tick_hz(void) { return 1000000u; }
void port_mark(int running) { (void)running; }

static void *read_all(const char *path, uint32_t *n)
{
    FILE *f = fopen(path, "rb");
    long size;
    void *p;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        exit(100);
    p = malloc((size_t)size + 8u) /* glibc: 16-aligned */;
    if (!p || fread(p, 1, (size_t)size, f) != (size_t)size)
        exit(100);
    fclose(f);
    *n = (uint32_t)size;
    return p;
}

static uint32_t rd_u32(void)
{
    uint32_t v;
    if (fread(&v, 4, 1, stdin) != 1)
        exit(101);
    return v;
}

static void *rd(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p || fread(p, 1, n, stdin) != n)
        exit(101);
    return p;
}

int main(int argc, char **argv)
{
    static poet_device_t dev;
    uint32_t bundle_bytes, pool_bytes, steps, i, n, batch, in, nw;
    void *bundle, *pool;
    int status;
    if (argc != 2)
        return 2;
    bundle = read_all(argv[1], &bundle_bytes);
    pool_bytes = poet_bundle_pool_bytes(bundle, bundle_bytes);
    pool = malloc(pool_bytes + 8u);
    swap_bytes = 64u << 20;
    swap = (uint8_t *)calloc(swap_bytes, 1);
    status = poet_init(&dev, bundle, bundle_bytes, pool, pool_bytes);
    if (status != POET_OK) {
        fprintf(stderr, "poet_init: %d\n", status);
        free(bundle);
        free(pool);
        free(swap);
        return status;
    }
    batch = poet_batch(&dev);
    in = poet_input_elems(&dev);
    steps = rd_u32();
    for (i = 0; i < steps; i++) {
        float *x = (float *)rd(4u * batch * in);
        int32_t *y = (int32_t *)rd(4u * batch);
        poet_step_info_t info;
        int32_t st = poet_train_step(&dev, x, y, &info);
        fwrite(&st, 4, 1, stdout);
        fwrite(&info.loss, 4, 1, stdout);
        free(x);
        free(y);
    }
    {
        const float *w = poet_weights(&dev, &nw);
        fwrite(&nw, 4, 1, stdout);
        fwrite(w, 4, nw, stdout);
    }
    n = rd_u32();
    {
        float *x = (float *)rd(4u * n * in), *out = (float *)malloc(4u * n * poet_output_elems(&dev) + 4u);
        status = poet_predict(&dev, x, n, out);
        if (status == POET_OK)
            fwrite(out, 4, (size_t)n * poet_output_elems(&dev), stdout);
        free(x);
        free(out);
    }
    free(bundle);
    free(pool);
    free(swap);
    return status;
}
