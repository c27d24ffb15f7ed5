/* The sample store and epochs over it (poet.h: poet_samples_*, poet_train_epoch). A record is
 * [i32 label][u32 CRC-32 of the label and the inputs][input_elems fp32]; the first erased record
 * (its label and CRC words 0xFFFFFFFF) ends the store. */
#include <string.h>

#include "device_priv.h"
#include "status.h"
#include "util.h"

#define CHUNK 16u /* floats read, checked and staged at a time: on the stack */

/* A 4-round Feistel permutation of 2h-bit numbers, walked until it lands below n: a bijection of
 * 0..n-1 that needs no table (an epoch over thousands of samples costs no RAM). Python's twin is
 * poet.export.order.epoch_order. */
uint32_t poet_epoch_order(uint32_t n, uint32_t seed, uint32_t epoch, uint32_t k)
{
    uint32_t h = 1, mask, x = k, j, key[4];
    if (n < 2 || k >= n)
        return 0;
    while (h < 16 && (1ull << (2u * h)) < n)
        h++;
    mask = (1u << h) - 1u;
    for (j = 0; j < 4; j++)
        key[j] = poet_mix32(seed * 0x9E3779B9u + epoch * 0x85EBCA6Bu + j);
    do {
        uint32_t l = x >> h, r = x & mask, t;
        for (j = 0; j < 4; j++) {
            t = r;
            r = l ^ (poet_mix32(r ^ key[j]) & mask);
            l = t;
        }
        x = (l << h) | r;
    } while (x >= n);
    return x;
}

static uint32_t record_at(const poet_samples_t *s, uint32_t i)
{
    uint32_t pos = i, t;
    for (t = 0; t < s->n_torn; t++) /* torn records, in ascending order, hold no sample */
        if (s->torn[t] <= pos)
            pos++;
    return pos;
}

int poet_samples_open(poet_samples_t *s, const poet_device_t *dev, const poet_store_t *store)
{
    const device_t *d = cpriv(dev);
    uint32_t pos, max;
    memset(s, 0, sizeof *s);
    if (!d->ready)
        return POET_E_LINK_ORDER;
    if (!store || !store->read || !store->write || !store->erase)
        return POET_E_STORE;
    s->store = store;
    s->record_bytes = 8u + 4u * (d->model.x_elems / d->model.batch);
    s->classes = d->model.min_classes;
    max = store->bytes / s->record_bytes;
    for (pos = 0; pos < max; pos++) {
        uint8_t hdr[8], buf[4u * CHUNK];
        uint32_t off, n, crc;
        if (store->read(store, pos * s->record_bytes, hdr, 8) != 0)
            return POET_E_STORE;
        int erased = poet_rd32(hdr) == 0xFFFFFFFFu && poet_rd32(hdr + 4) == 0xFFFFFFFFu;
        crc = poet_crc32(0, hdr, 4);
        for (off = 8; off < s->record_bytes; off += n) {
            uint32_t k;
            n = s->record_bytes - off < sizeof buf ? s->record_bytes - off : (uint32_t)sizeof buf;
            if (store->read(store, pos * s->record_bytes + off, buf, n) != 0)
                return POET_E_STORE;
            crc = poet_crc32(crc, buf, n);
            for (k = 0; erased && k < n; k++)
                erased = buf[k] == 0xFFu;
        }
        if (erased)
            break; /* the end. An erased header over written inputs (a cut inside an add) is torn:
                    * flash cannot program those inputs again */
        if (crc == poet_rd32(hdr + 4) && poet_rd32(hdr) < s->classes) {
            s->count++;
        } else {
            if (s->n_torn == POET_SAMPLES_MAX_TORN)
                return POET_E_STORE;
            s->torn[s->n_torn++] = pos;
        }
    }
    s->next = pos;
    return POET_OK;
}

int poet_samples_add(poet_samples_t *s, const float *x, int32_t label)
{
    uint8_t hdr[8];
    uint32_t at, per, crc, i;
    if (!s->store || !x || label < 0 || (uint32_t)label >= s->classes)
        return POET_E_RANGE;
    per = (s->record_bytes - 8u) / 4u;
    for (i = 0; i < per; i++)
        if (!poet_finite(x[i]))
            return POET_E_RANGE;
    if ((uint64_t)(s->next + 1u) * s->record_bytes > s->store->bytes)
        return POET_E_STORE;
    at = s->next * s->record_bytes;
    poet_wr32(hdr, (uint32_t)label);
    crc = poet_crc32(0, hdr, 4);
    crc = poet_crc32(crc, (const uint8_t *)x, 4u * per);
    poet_wr32(hdr + 4, crc);
    /* the inputs first, the header last: a record is a sample only once its header is written, and
     * one cut before that is passed over by the next open */
    if (s->store->write(s->store, at + 8u, x, 4u * per) != 0 || s->store->write(s->store, at, hdr, 8) != 0)
        return POET_E_STORE;
    s->next++;
    s->count++;
    return POET_OK;
}

int poet_samples_clear(poet_samples_t *s)
{
    uint32_t unit, n;
    if (!s->store)
        return POET_E_RANGE;
    unit = s->store->erase_bytes ? s->store->erase_bytes : 4u;
    n = (uint32_t)(((uint64_t)s->next * s->record_bytes + unit - 1u) / unit * unit);
    if (n > s->store->bytes)
        n = s->store->bytes / unit * unit;
    if (n && s->store->erase(s->store, 0, n) != 0)
        return POET_E_STORE;
    s->count = s->next = s->n_torn = 0;
    return POET_OK;
}

/* Sample i's record, checked again as it is read (the store is the application's and may have
 * changed since open), chunk by chunk into x, or staged as batch slot `slot` of device d. */
static int read_sample(const poet_samples_t *s, uint32_t i, int32_t *label, device_t *d, uint32_t slot, float *x)
{
    uint8_t hdr[8];
    float buf[CHUNK];
    uint32_t at = record_at(s, i) * s->record_bytes, per = (s->record_bytes - 8u) / 4u, off, n, crc;
    if (i >= s->count)
        return POET_E_RANGE;
    if (s->store->read(s->store, at, hdr, 8) != 0)
        return POET_E_STORE;
    crc = poet_crc32(0, hdr, 4);
    for (off = 0; off < per; off += n) {
        n = per - off < CHUNK ? per - off : CHUNK;
        if (s->store->read(s->store, at + 8u + 4u * off, buf, 4u * n) != 0)
            return POET_E_STORE;
        crc = poet_crc32(crc, (const uint8_t *)buf, 4u * n);
        if (x)
            memcpy(x + off, buf, 4u * n);
        else
            poet_dev_stage_part(d, slot, off, n, buf);
    }
    if (crc != poet_rd32(hdr + 4) || poet_rd32(hdr) >= s->classes)
        return POET_E_STORE;
    *label = (int32_t)poet_rd32(hdr);
    return POET_OK;
}

int poet_samples_get(const poet_samples_t *s, uint32_t i, float *x, int32_t *label)
{
    if (!s->store || !x || !label)
        return POET_E_RANGE;
    return read_sample(s, i, label, 0, 0, x);
}

int poet_train_epoch(poet_device_t *dev, const poet_samples_t *s, uint32_t seed, uint32_t epoch,
                     poet_epoch_info_t *info)
{
    device_t *d = priv(dev);
    poet_epoch_info_t e;
    uint32_t t, i, batch;
    double loss = 0.0;
    int status = POET_OK;
    memset(&e, 0, sizeof e);
    if (!d->ready || !s->store)
        return POET_E_LINK_ORDER;
    if (d->broken)
        return POET_E_DIVERGED;
    if (s->record_bytes != 8u + 4u * (d->model.x_elems / d->model.batch))
        return POET_E_RANGE; /* another model's samples */
    batch = d->model.batch;
    for (t = 0; t < s->count / batch && status == POET_OK; t++) {
        int32_t *labels = (int32_t *)(void *)(d->pool + d->lay.batch + d->lay.labels);
        poet_step_info_t step;
        for (i = 0; i < batch && status == POET_OK; i++)
            status = read_sample(s, poet_epoch_order(s->count, seed, epoch, t * batch + i), &labels[i], d, i, 0);
        if (status != POET_OK)
            break;
        status = poet_dev_step_staged(d, &step);
        e.ticks += step.ticks;
        if (status == POET_E_DIVERGED) {
            e.diverged++;
            if (d->broken)
                break; /* updated with no snapshot to undo it: the epoch cannot go on */
            status = POET_OK;
            continue;
        }
        if (status == POET_OK) {
            e.steps++;
            loss += step.loss;
        }
    }
    e.steps += e.diverged;
    e.mean_loss = e.steps > e.diverged ? (float)(loss / (double)(e.steps - e.diverged)) : 0.0f;
    if (info)
        *info = e;
    return status;
}
