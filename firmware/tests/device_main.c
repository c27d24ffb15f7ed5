/* The device API (core/poet.h) driven by commands on stdin, for tests that hold it to the host-driven
 * runtime and cut its power:
 *   device_run BUNDLE STORE_FILE < commands > answers
 * Each command is one byte, then its arguments; each answer starts with an i32 status.
 *   'I'              init again (a reset: the pool is scrambled first)    -> status
 *   'S' x[batch*in] f32, labels[batch] i32   one training step            -> status, f32 loss
 *   'P' u32 n, x[n*in] f32                   predict                      -> status, n*out f32
 *   'W'                                      the weights                  -> 0, u32 n, n f32
 *   'V' / 'R'                                save / restore               -> status
 *   'K' u32 n                                the power goes after n more bytes reach the store
 * The store is the file, with flash semantics (erase writes 0xFF; write programs bytes as given),
 * every byte on disk as it is written, so a cut leaves the file as a board's flash would be. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ---- the store: a file, cut after `budget` bytes when armed ---- */
static FILE *store_file;
static long budget = -1;

static int put(uint32_t off, const uint8_t *p, uint32_t n)
{
    uint32_t i;
    if (fseek(store_file, (long)off, SEEK_SET) != 0)
        return 1;
    for (i = 0; i < n; i++) {
        if (budget == 0) {
            fflush(store_file);
            _exit(77); /* the power is gone */
        }
        if (budget > 0)
            budget--;
        if (fputc(p[i], store_file) == EOF)
            return 1;
    }
    return fflush(store_file) != 0;
}
static int st_read(const poet_store_t *s, uint32_t off, void *dst, uint32_t n)
{
    (void)s;
    return fseek(store_file, (long)off, SEEK_SET) != 0 || fread(dst, 1, n, store_file) != n;
}
static int st_write(const poet_store_t *s, uint32_t off, const void *src, uint32_t n)
{
    (void)s;
    return put(off, (const uint8_t *)src, n);
}
static int st_erase(const poet_store_t *s, uint32_t off, uint32_t n)
{
    uint8_t ones[256];
    uint32_t k;
    (void)s;
    memset(ones, 0xFF, sizeof ones);
    for (k = 0; k < n; k += sizeof ones)
        if (put(off + k, ones, n - k < sizeof ones ? n - k : (uint32_t)sizeof ones) != 0)
            return 1;
    return 0;
}

static void *read_all(const char *path, uint32_t *n)
{
    FILE *f = fopen(path, "rb");
    long size;
    void *p;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        exit(100);
    p = malloc((size_t)size + 8u); /* glibc: 16-aligned */
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

static void say(int32_t status) { fwrite(&status, 4, 1, stdout); }

int main(int argc, char **argv)
{
    static poet_device_t dev;
    poet_store_t store = {1u << 20, 4096u, st_read, st_write, st_erase, 0};
    uint32_t bundle_bytes, pool_bytes, batch = 0, in = 0;
    uint8_t *pool;
    void *bundle;
    int status, c;
    if (argc != 3)
        return 2;
    bundle = read_all(argv[1], &bundle_bytes);
    store_file = fopen(argv[2], "r+b");
    if (!store_file) { /* a new board: its flash erased */
        uint32_t k;
        store_file = fopen(argv[2], "w+b");
        for (k = 0; store_file && k < store.bytes; k++)
            fputc(0xFF, store_file);
    }
    if (!store_file)
        return 100;
    pool_bytes = poet_bundle_pool_bytes(bundle, bundle_bytes);
    pool = (uint8_t *)malloc(pool_bytes + 8u);
    swap_bytes = 64u << 20;
    swap = (uint8_t *)calloc(swap_bytes, 1);
    status = poet_init(&dev, bundle, bundle_bytes, pool, pool_bytes);
    say(status);
    if (status == POET_OK) {
        batch = poet_batch(&dev);
        in = poet_input_elems(&dev);
    }
    while (status == POET_OK && (c = getchar()) != EOF) {
        if (c == 'I') {
            memset(pool, 0xA5, pool_bytes);
            say(poet_init(&dev, bundle, bundle_bytes, pool, pool_bytes));
        } else if (c == 'S') {
            float *x = (float *)rd(4u * batch * in);
            int32_t *y = (int32_t *)rd(4u * batch);
            poet_step_info_t info;
            say(poet_train_step(&dev, x, y, &info));
            fwrite(&info.loss, 4, 1, stdout);
            free(x);
            free(y);
        } else if (c == 'P') {
            uint32_t n = rd_u32(), out_n = poet_output_elems(&dev);
            float *x = (float *)rd(4u * n * in), *out = (float *)calloc((size_t)n * out_n + 1u, 4);
            say(poet_predict(&dev, x, n, out));
            fwrite(out, 4, (size_t)n * out_n, stdout);
            free(x);
            free(out);
        } else if (c == 'W') {
            uint32_t nw;
            const float *w = poet_weights(&dev, &nw);
            say(0);
            fwrite(&nw, 4, 1, stdout);
            fwrite(w, 4, nw, stdout);
        } else if (c == 'V') {
            say(poet_save(&dev, &store));
        } else if (c == 'R') {
            say(poet_restore(&dev, &store));
        } else if (c == 'K') {
            budget = (long)rd_u32();
        } else {
            return 102;
        }
        fflush(stdout);
    }
    fclose(store_file);
    free(bundle);
    free(pool);
    free(swap);
    return status;
}
