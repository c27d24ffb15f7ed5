/* poet_save and poet_restore (poet.h, docs/spec.md 7): the trained state in two slots of the
 * application's store. A save erases the slot not holding the newest whole save, writes the payload
 * and writes the slot's header last: its checksums over the payload and itself make a slot whole.
 * A power cut anywhere leaves the other slot, the newest whole save, as it was. */
#include <string.h>

#include "device_priv.h"
#include "status.h"
#include "util.h"

#define SLOT_HDR 32u
#define SLOT_MAGIC 0x31545350u /* "PST1" */
#define CHUNK 64u              /* bytes read at a time to check a payload: on the stack */

typedef struct {
    uint32_t seq;
    uint32_t payload_bytes, payload_crc;
    uint64_t model_hash;
} slot_t;

/* The payload: the step count, the trained and state parameters, the optimizer state region. */
static uint32_t payload_bytes(const device_t *d) { return 4u + d->lay.params_bytes + d->lay.opt_bytes; }

static uint32_t slot_bytes(const device_t *d, const poet_store_t *s)
{
    uint32_t unit = s->erase_bytes ? s->erase_bytes : 4u;
    uint64_t n = SLOT_HDR + (uint64_t)payload_bytes(d);
    n = (n + unit - 1u) / unit * unit;
    return n > 0x7FFFFFFFu ? 0x7FFFFFFFu : (uint32_t)n;
}

uint32_t poet_state_bytes(const poet_device_t *dev, const poet_store_t *store)
{
    return cpriv(dev)->ready ? 2u * slot_bytes(cpriv(dev), store) : 0u;
}

static int store_ok(const device_t *d, const poet_store_t *s)
{
    return s && s->read && s->write && s->erase && s->erase_bytes % 4u == 0 &&
           (uint64_t)2u * slot_bytes(d, s) <= s->bytes;
}

/* Slot k's header, if it is one this model's whole save could have: 1, else 0 (erased, torn,
 * another model's, another size). Its payload is checked separately (payload_ok). */
static int read_slot(const device_t *d, const poet_store_t *s, uint32_t k, slot_t *out, int *io_err)
{
    uint8_t h[SLOT_HDR];
    if (s->read(s, k * slot_bytes(d, s), h, SLOT_HDR) != 0) {
        *io_err = 1;
        return 0;
    }
    if (poet_rd32(h) != SLOT_MAGIC || poet_crc32(0, h, SLOT_HDR - 4u) != poet_rd32(h + SLOT_HDR - 4u))
        return 0;
    out->seq = poet_rd32(h + 4);
    out->model_hash = poet_rd64(h + 8);
    out->payload_bytes = poet_rd32(h + 16);
    out->payload_crc = poet_rd32(h + 20);
    return out->model_hash == d->model.hash && out->payload_bytes == payload_bytes(d);
}

/* Read slot k's payload into dst (or only check it, dst NULL) and compare its CRC with the header's. */
static int payload_ok(const device_t *d, const poet_store_t *s, uint32_t k, const slot_t *h, uint8_t *dst,
                      int *io_err)
{
    uint8_t buf[CHUNK];
    uint32_t off, n, crc = 0, at = k * slot_bytes(d, s) + SLOT_HDR;
    for (off = 0; off < h->payload_bytes; off += n) {
        n = h->payload_bytes - off < CHUNK ? h->payload_bytes - off : CHUNK;
        if (s->read(s, at + off, dst ? dst + off : buf, n) != 0) {
            *io_err = 1;
            return 0;
        }
        crc = poet_crc32(crc, dst ? dst + off : buf, n);
    }
    return crc == h->payload_crc;
}

/* The newest whole save: its slot (0 or 1), or -1 when neither is whole. */
static int newest(const device_t *d, const poet_store_t *s, slot_t *h, int *io_err)
{
    slot_t cand[2];
    int whole[2], k;
    for (k = 0; k < 2; k++)
        whole[k] = read_slot(d, s, (uint32_t)k, &cand[k], io_err) &&
                   payload_ok(d, s, (uint32_t)k, &cand[k], 0, io_err);
    if (whole[0] && whole[1])
        k = (int32_t)(cand[1].seq - cand[0].seq) > 0; /* serial-number order: wraps after 2^31 saves */
    else
        k = whole[1] ? 1 : whole[0] ? 0 : -1;
    if (k >= 0)
        *h = cand[k];
    return k;
}

int poet_save(poet_device_t *dev, const poet_store_t *store)
{
    device_t *d = priv(dev);
    slot_t last;
    uint8_t h[SLOT_HDR], step[4];
    uint32_t k, at, crc;
    int io_err = 0, latest;
    if (!d->ready)
        return POET_E_LINK_ORDER;
    if (d->broken)
        return POET_E_DIVERGED; /* never a save of non-finite weights */
    if (!store_ok(d, store))
        return POET_E_STORE;
    latest = newest(d, store, &last, &io_err);
    if (io_err)
        return POET_E_STORE;
    k = latest == 0 ? 1u : 0u;
    at = k * slot_bytes(d, store);
    poet_wr32(step, *poet_dev_opt_step(d));
    crc = poet_crc32(0, step, 4);
    crc = poet_crc32(crc, d->pool + d->lay.params, d->lay.params_bytes);
    crc = poet_crc32(crc, d->pool + d->lay.opt, d->lay.opt_bytes);
    memset(h, 0, sizeof h);
    poet_wr32(h, SLOT_MAGIC);
    poet_wr32(h + 4, latest < 0 ? 1u : last.seq + 1u);
    poet_wr32(h + 8, (uint32_t)d->model.hash);
    poet_wr32(h + 12, (uint32_t)(d->model.hash >> 32));
    poet_wr32(h + 16, payload_bytes(d));
    poet_wr32(h + 20, crc);
    poet_wr32(h + SLOT_HDR - 4u, poet_crc32(0, h, SLOT_HDR - 4u));
    if (store->erase(store, at, slot_bytes(d, store)) != 0 ||
        store->write(store, at + SLOT_HDR, step, 4) != 0 ||
        (d->lay.params_bytes && store->write(store, at + SLOT_HDR + 4u, d->pool + d->lay.params, d->lay.params_bytes) != 0) ||
        (d->lay.opt_bytes &&
         store->write(store, at + SLOT_HDR + 4u + d->lay.params_bytes, d->pool + d->lay.opt, d->lay.opt_bytes) != 0) ||
        store->write(store, at, h, SLOT_HDR) != 0) /* last: the slot is whole from here on */
        return POET_E_STORE;
    return POET_OK;
}

int poet_restore(poet_device_t *dev, const poet_store_t *store)
{
    device_t *d = priv(dev);
    slot_t h;
    uint8_t *snap = d->pool + d->lay.snapshot;
    uint8_t step[4];
    uint32_t snap_opt = (d->lay.params_bytes + 7u) & ~7u;
    int io_err = 0, k;
    if (!d->ready)
        return POET_E_LINK_ORDER;
    if (!store_ok(d, store))
        return POET_E_STORE;
    k = newest(d, store, &h, &io_err);
    if (io_err)
        return POET_E_STORE;
    if (k < 0)
        return POET_E_NO_STATE;
    /* into the snapshot region first when there is one, checked again as it lands: the store may
     * change under us and a torn read must not reach the weights. Without one, straight into place:
     * the CRC checked it a moment ago, and a restore that fails leaves the device refusing to run
     * (broken) until a restore succeeds. */
    {
        uint8_t *params = d->snapshot ? snap : d->pool + d->lay.params;
        uint8_t *opt = d->snapshot ? snap + snap_opt : d->pool + d->lay.opt;
        uint32_t at = (uint32_t)k * slot_bytes(d, store) + SLOT_HDR, crc;
        if (store->read(store, at, step, 4) != 0 ||
            (d->lay.params_bytes && store->read(store, at + 4u, params, d->lay.params_bytes) != 0) ||
            (d->lay.opt_bytes && store->read(store, at + 4u + d->lay.params_bytes, opt, d->lay.opt_bytes) != 0)) {
            d->broken |= !d->snapshot;
            return POET_E_STORE;
        }
        crc = poet_crc32(0, step, 4);
        crc = poet_crc32(crc, params, d->lay.params_bytes);
        crc = poet_crc32(crc, opt, d->lay.opt_bytes);
        if (crc != h.payload_crc) {
            d->broken |= !d->snapshot;
            return POET_E_NO_STATE;
        }
        if (d->snapshot) {
            memcpy(d->pool + d->lay.params, snap, d->lay.params_bytes);
            memcpy(d->pool + d->lay.opt, snap + snap_opt, d->lay.opt_bytes);
        }
    }
    *poet_dev_opt_step(d) = poet_rd32(step);
    memset(d->pool + d->lay.grads, 0, d->lay.grads_bytes);
    d->broken = 0;
    return POET_OK;
}
