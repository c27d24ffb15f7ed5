/* The device API (core/poet.h) driven by commands on stdin, for tests that hold it to the host-driven
 * runtime and cut its power:
 *   device_run BUNDLE STORE_FILE < commands > answers
 * (the samples' store is STORE_FILE.samples)
 * Each command is one byte, then its arguments; each answer starts with an i32 status.
 *   'I'              init again (a reset: the pool is scrambled first)    -> status
 *   'S' x[batch*in] f32, labels[batch] i32   one training step            -> status, f32 loss
 *   'P' u32 n, x[n*in] f32                   predict                      -> status, u32 n*out, n*out f32
 *   'W'                                      the weights                  -> 0, u32 n, n f32
 *   'V' / 'R'                                save / restore               -> status
 *   'K' u32 n                                the power goes after n more bytes reach a store
 *   'X' u32 out                              the card (the pager) is pulled (1) or back (0)
 *   'O'                                      open the samples (STORE_FILE.samples) -> status, u32 count
 *   'A' x[in] f32, i32 label                 add a sample                 -> status
 *   'C'                                      clear the samples            -> status
 *   'E' u32 seed, u32 epoch                  train an epoch over them     -> status, u32 steps,
 *                                                                            u32 diverged, f32 mean loss
 *   'Q' u32 n, u32 seed, u32 epoch           poet_epoch_order for k < n   -> 0, n u32
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
static int card_out;
/* the card: made at the first open (only a bundle that pages or streams opens it), as ASan makes a
 * large calloc cost its whole size at once */
int port_pager_open(void)
{
    if (card_out)
        return 1;
    if (swap == 0) {
        swap_bytes = 16u << 20;
        swap = (uint8_t *)calloc(swap_bytes, 1);
    }
    return swap == 0;
}
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
static long budget = -1;

static int put(FILE *f, uint32_t off, const uint8_t *p, uint32_t n)
{
    uint32_t i;
    if (fseek(f, (long)off, SEEK_SET) != 0)
        return 1;
    for (i = 0; i < n; i++) {
        if (budget == 0) {
            fflush(f);
            _exit(77); /* the power is gone */
        }
        if (budget > 0)
            budget--;
        if (fputc(p[i], f) == EOF)
            return 1;
    }
    return fflush(f) != 0;
}
static int st_read(const poet_store_t *s, uint32_t off, void *dst, uint32_t n)
{
    FILE *f = (FILE *)s->ctx;
    return fseek(f, (long)off, SEEK_SET) != 0 || fread(dst, 1, n, f) != n;
}
static int st_write(const poet_store_t *s, uint32_t off, const void *src, uint32_t n)
{
    return put((FILE *)s->ctx, off, (const uint8_t *)src, n);
}
static int st_erase(const poet_store_t *s, uint32_t off, uint32_t n)
{
    uint8_t ones[256];
    uint32_t k;
    memset(ones, 0xFF, sizeof ones);
    for (k = 0; k < n; k += sizeof ones)
        if (put((FILE *)s->ctx, off + k, ones, n - k < sizeof ones ? n - k : (uint32_t)sizeof ones) != 0)
            return 1;
    return 0;
}

/* A store file, made erased (0xFF) when new: a new board's flash. */
static FILE *open_store(const char *path, uint32_t bytes)
{
    static uint8_t erased[65536];
    FILE *f = fopen(path, "r+b");
    uint32_t k;
    if (f)
        return f;
    memset(erased, 0xFF, sizeof erased);
    f = fopen(path, "w+b");
    for (k = 0; f && k < bytes; k += (uint32_t)sizeof erased)
        if (fwrite(erased, 1, bytes - k < sizeof erased ? bytes - k : sizeof erased, f) == 0)
            return 0;
    return f;
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
    static poet_samples_t samples;
    poet_store_t store = {1u << 20, 4096u, st_read, st_write, st_erase, 0};
    poet_store_t sample_store = {1u << 21, 4096u, st_read, st_write, st_erase, 0};
    char samples_path[4096];
    uint32_t bundle_bytes, pool_bytes, batch = 0, in = 0;
    uint8_t *pool;
    void *bundle;
    int status, c;
    if (argc != 3 || strlen(argv[2]) > sizeof samples_path - 9u)
        return 2;
    bundle = read_all(argv[1], &bundle_bytes);
    sprintf(samples_path, "%s.samples", argv[2]);
    store.ctx = open_store(argv[2], store.bytes);
    sample_store.ctx = open_store(samples_path, sample_store.bytes);
    if (!store.ctx || !sample_store.ctx)
        return 100;
    pool_bytes = poet_bundle_pool_bytes(bundle, bundle_bytes);
    pool = (uint8_t *)malloc(pool_bytes + 8u);
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
            uint32_t floats = n * out_n;
            say(poet_predict(&dev, x, n, out));
            fwrite(&floats, 4, 1, stdout);
            fwrite(out, 4, floats, stdout);
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
        } else if (c == 'X') {
            card_out = rd_u32() != 0;
        } else if (c == 'O') {
            say(poet_samples_open(&samples, &dev, &sample_store));
            fwrite(&samples.count, 4, 1, stdout);
        } else if (c == 'A') {
            float *x = (float *)rd(4u * in);
            int32_t y = (int32_t)rd_u32();
            say(poet_samples_add(&samples, x, y));
            free(x);
        } else if (c == 'C') {
            say(poet_samples_clear(&samples));
        } else if (c == 'E') {
            uint32_t seed = rd_u32(), epoch = rd_u32();
            poet_epoch_info_t e;
            say(poet_train_epoch(&dev, &samples, seed, epoch, &e));
            fwrite(&e.steps, 4, 1, stdout);
            fwrite(&e.diverged, 4, 1, stdout);
            fwrite(&e.mean_loss, 4, 1, stdout);
        } else if (c == 'Q') {
            uint32_t n = rd_u32(), seed = rd_u32(), epoch = rd_u32(), k;
            say(0);
            for (k = 0; k < n; k++) {
                uint32_t v = poet_epoch_order(n, seed, epoch, k);
                fwrite(&v, 4, 1, stdout);
            }
        } else {
            return 102;
        }
        fflush(stdout);
    }
    fclose((FILE *)store.ctx);
    fclose((FILE *)sample_store.ctx);
    free(bundle);
    free(pool);
    free(swap);
    return status;
}
