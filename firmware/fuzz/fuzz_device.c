/* libFuzzer harness: the device API's init and restore (core/poet.h), the two calls that face bytes a
 * device cannot trust: a bundle in flash (a bad image, a half-written update) and a saved state (a
 * torn save, worn flash). Input: u32 bundle length (its top two bits: recompute the bundle's CRC,
 * bit 31, and its schedules' CRCs, bit 30, after the mutation, so damage inside reaches the parsers
 * behind them), the bundle, then the store's bytes as flash holds them (erased past the input). Every status must be one the API documents; a bundle init accepts must
 * then train a step and predict without a fault (ASan, UBSan); a restore that succeeds, and every save,
 * must round trip the weights exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/poet.h"
#include "../core/util.h"
#include "fuzz_port.h"

#define CHECK(c)                                                                                       \
    do {                                                                                               \
        if (!(c)) {                                                                                    \
            fprintf(stderr, "fuzz_device: %s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);     \
            abort();                                                                                   \
        }                                                                                              \
    } while (0)

#define POOL (96u * 1024u)
#define BUNDLE_MAX (32u * 1024u)
#define STORE_BYTES (32u * 1024u)
#define SWAP_BYTES (64u * 1024u)

static poet_device_t dev;
static union {
    uint64_t align;
    uint8_t bytes[POOL];
} pool;
static union {
    uint64_t align;
    uint8_t bytes[BUNDLE_MAX];
} bundle;
static uint8_t flash[STORE_BYTES], swap_area[SWAP_BYTES];

static int st_read(const poet_store_t *s, uint32_t off, void *dst, uint32_t n)
{
    (void)s;
    if (off > STORE_BYTES || n > STORE_BYTES - off)
        return 1;
    memcpy(dst, flash + off, n);
    return 0;
}
static int st_write(const poet_store_t *s, uint32_t off, const void *src, uint32_t n)
{
    uint32_t i;
    (void)s;
    if (off > STORE_BYTES || n > STORE_BYTES - off || (off & 3u) || (n & 3u))
        return 1;
    for (i = 0; i < n; i++)
        flash[off + i] &= ((const uint8_t *)src)[i]; /* flash programs only erased bits */
    return 0;
}
static int st_erase(const poet_store_t *s, uint32_t off, uint32_t n)
{
    (void)s;
    if (off % 4096u || n % 4096u || off > STORE_BYTES || n > STORE_BYTES - off)
        return 1;
    memset(flash + off, 0xFF, n);
    return 0;
}

static int known_init(int st)
{
    return st == POET_OK || (st >= POET_E_SHORT && st <= POET_E_OUTPUT) || st == POET_E_BUNDLE ||
           st == POET_E_MODEL || st == POET_E_TOO_BIG || st == POET_E_RANGE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    poet_store_t store = {STORE_BYTES, 4096u, st_read, st_write, st_erase, 0};
    uint32_t blen, nw, nw2, batch, in, out_n;
    float *x, *out, *saved;
    int32_t *labels;
    const float *w;
    int st, broken = 0;

    if (size < 4)
        return 0;
    blen = poet_rd32(data) & 0x3FFFFFFFu;
    if (blen > size - 4u || blen > BUNDLE_MAX)
        return 0;
    memcpy(bundle.bytes, data + 4, blen);
    if ((data[3] & 0x40u) && blen >= 68u) {
        uint32_t k;
        for (k = 3; k < 5; k++) { /* the training and forward schedules: docs/spec.md 7 */
            uint32_t off = poet_rd32(bundle.bytes + 24u + 8u * k), n = poet_rd32(bundle.bytes + 28u + 8u * k);
            if (n >= 28u && off <= blen && n <= blen - off)
                poet_wr32(bundle.bytes + off + n - 4u, poet_crc32(0, bundle.bytes + off, n - 4u));
        }
    }
    if ((data[3] & 0x80u) && blen >= 68u)
        poet_wr32(bundle.bytes + blen - 4u, poet_crc32(0, bundle.bytes, blen - 4u));
    memset(flash, 0xFF, sizeof flash);
    memcpy(flash, data + 4 + blen, size - 4u - blen < STORE_BYTES ? size - 4u - blen : STORE_BYTES);
    fuzz_port_swap(swap_area, SWAP_BYTES);

    st = poet_init(&dev, bundle.bytes, blen, pool.bytes, POOL);
    CHECK(known_init(st));
    if (st != POET_OK)
        return 0;
    batch = poet_batch(&dev);
    in = poet_input_elems(&dev);
    out_n = poet_output_elems(&dev);
    CHECK(batch > 0 && in > 0);

    st = poet_restore(&dev, &store);
    CHECK(st == POET_OK || st == POET_E_NO_STATE || st == POET_E_STORE);

    /* a step and a prediction on exactly sized buffers, when small enough to keep the fuzzer fast */
    if ((uint64_t)batch * in <= 16384u && (uint64_t)batch * out_n <= 16384u) {
        x = (float *)calloc((size_t)batch * in, sizeof *x);
        labels = (int32_t *)calloc(batch, sizeof *labels);
        out = (float *)malloc((size_t)batch * out_n * sizeof *out + 1u);
        CHECK(x && labels && out);
        st = poet_train_step(&dev, x, labels, 0);
        CHECK(st == POET_OK || st == POET_E_DIVERGED || st == POET_E_PAGER || st == POET_E_RANGE);
        /* a step that failed after updating, with no snapshot to undo it from, leaves the device
         * refusing predictions until a restore (poet.h): DIVERGED then, and only then */
        broken = st != POET_OK && st != POET_E_RANGE && !poet_has_snapshot(&dev);
        st = poet_predict(&dev, x, batch, out);
        CHECK(st == POET_OK || st == POET_E_PAGER || (broken && st == POET_E_DIVERGED));
        broken = st == POET_E_DIVERGED;
        free(x);
        free(labels);
        free(out);
    }

    /* a damaged state is never saved; a save then a restore give back the weights bit for bit */
    if (broken) {
        CHECK(poet_save(&dev, &store) == POET_E_DIVERGED);
    } else if (poet_state_bytes(&dev, &store) <= STORE_BYTES) {
        w = poet_weights(&dev, &nw);
        saved = (float *)malloc(4u * nw + 4u);
        CHECK(saved != 0);
        memcpy(saved, w, 4u * nw);
        CHECK(poet_save(&dev, &store) == POET_OK);
        CHECK(poet_restore(&dev, &store) == POET_OK);
        w = poet_weights(&dev, &nw2);
        CHECK(nw2 == nw && memcmp(saved, w, 4u * nw) == 0);
        free(saved);
    }
    return 0;
}
