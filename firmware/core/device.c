/* The device API (poet.h): training and prediction from a bundle (docs/spec.md section 7), no host.
 * The bundle is read in place (the model's records and the frozen weights stay in flash); the pool
 * holds section 6's regions, the snapshot a diverged step is undone from and the ticks. */
#include "poet.h"

#include <string.h>

#include "device_priv.h"
#include "port.h"
#include "schedule.h"
#include "util.h"

#define HEADER 64u
#define N_SECTIONS 5u
enum { S_MODEL, S_FROZEN, S_WEIGHTS, S_TRAIN, S_FORWARD };
#define BUNDLE_NO_SNAPSHOT 0x01u /* flags: the pool keeps no snapshot (docs/spec.md 7) */

uint32_t *poet_dev_opt_step(device_t *d)
{
    return d->model.opt_words ? (uint32_t *)(void *)(d->pool + d->lay.opt) : &d->sgd_step;
}

uint32_t poet_bundle_pool_bytes(const void *bundle, uint32_t bundle_bytes)
{
    const uint8_t *b = (const uint8_t *)bundle;
    if (b == 0 || bundle_bytes < HEADER + 4u || memcmp(b, "PBDL", 4) != 0 || b[4] != 1)
        return 0;
    return poet_rd32(b + 16);
}

/* The sections of a bundle whose header and CRC have passed: in order, 8-aligned, inside it. */
static int sections_ok(const uint8_t *b, uint32_t total, const uint8_t **at, uint32_t *len)
{
    uint32_t i, end = HEADER;
    for (i = 0; i < N_SECTIONS; i++) {
        uint32_t off = poet_rd32(b + 24u + 8u * i), n = poet_rd32(b + 28u + 8u * i);
        if ((off & 7u) || off < end || off > total - 4u || n > total - 4u - off)
            return 0;
        at[i] = b + off;
        len[i] = n;
        end = off + n;
    }
    return 1;
}

static uint16_t schedule_instrs(const uint8_t *s, uint32_t len)
{
    return len >= POET_SCHED_HDR ? poet_sched_n_instr(s) : 0;
}

int poet_init(poet_device_t *dev, const void *bundle, uint32_t bundle_bytes, void *pool, uint32_t pool_bytes)
{
    device_t *d = priv(dev);
    const uint8_t *b = (const uint8_t *)bundle, *at[N_SECTIONS];
    uint32_t len[N_SECTIONS], tables, detail, k, n_ticks, total;
    poet_node_t loss;
    int status;

    memset(d, 0, sizeof *d);
    if (b == 0 || ((uintptr_t)b & 7u) || bundle_bytes < HEADER + 4u || memcmp(b, "PBDL", 4) != 0 || b[4] != 1 ||
        (b[5] & ~BUNDLE_NO_SNAPSHOT) != 0 || poet_rd16(b + 6) != 0)
        return POET_E_BUNDLE;
    total = poet_rd32(b + 8);
    if (total != bundle_bytes)
        return POET_E_BUNDLE;
    if (poet_crc32(0, b, total - 4u) != poet_rd32(b + total - 4u))
        return POET_E_CRC;
    if (!sections_ok(b, total, at, len))
        return POET_E_BUNDLE;
    if (pool == 0 || ((uintptr_t)pool & 7u))
        return POET_E_RANGE;
    tables = poet_model_table_bytes(at[S_MODEL], len[S_MODEL]);
    if (tables == 0)
        return POET_E_MODEL;
    if (tables > pool_bytes || poet_rd32(b + 16) > pool_bytes)
        return POET_E_TOO_BIG;
    d->pool = (uint8_t *)pool;
    status = poet_model_parse(at[S_MODEL], len[S_MODEL], d->pool, &d->model, &detail);
    if (status != POET_OK)
        return status;
    n_ticks = schedule_instrs(at[S_TRAIN], len[S_TRAIN]);
    if (schedule_instrs(at[S_FORWARD], len[S_FORWARD]) > n_ticks)
        n_ticks = schedule_instrs(at[S_FORWARD], len[S_FORWARD]);
    d->snapshot = (b[5] & BUNDLE_NO_SNAPSHOT) == 0;
    poet_layout(&d->model, tables, d->snapshot, n_ticks, &d->lay);
    if (d->lay.fixed > pool_bytes)
        return POET_E_TOO_BIG;
    if (len[S_FROZEN] != 4u * d->model.frozen_words || len[S_WEIGHTS] != d->lay.params_bytes)
        return POET_E_RANGE;
    for (k = 0; k < 2; k++) {
        const uint8_t *s = at[S_TRAIN + k];
        if (len[S_TRAIN + k] >= POET_SCHED_HDR && poet_sched_forward(s) != (int)k)
            return POET_E_BUNDLE;
        status = poet_schedule_validate(s, len[S_TRAIN + k], &d->model, pool_bytes - d->lay.arena, &detail);
        if (status != POET_OK)
            return status;
        for (detail = 0; detail < poet_sched_n_instr(s); detail++)
            if (s[POET_SCHED_HDR + 8u * detail] == POET_I_PAGE_OUT)
                d->needs_pager = 1;
        d->sched[k] = s;
    }
    d->needs_pager |= d->model.aux_words > 0;
    /* the output predict reads: the first loss node's input (the validator found the loss) */
    for (k = 0; poet_node_kind(&d->model, (uint16_t)k) != POET_KIND_LOSS; k++)
        ;
    poet_node_view(&d->model, (uint16_t)k, &loss);
    d->out_node = loss.deps[0];
    d->out_elems = poet_node_bytes(&d->model, d->out_node) / 4u / d->model.batch;
    d->bundle = b;
    d->frozen = (const float *)(const void *)at[S_FROZEN];
    memcpy(&d->lr, b + 12, 4);
    memcpy(d->pool + d->lay.params, at[S_WEIGHTS], len[S_WEIGHTS]);
    memset(d->pool + d->lay.grads, 0, d->lay.grads_bytes);
    memset(d->pool + d->lay.opt, 0, d->lay.opt_bytes);
    d->ready = 1;
    return POET_OK;
}

uint32_t poet_batch(const poet_device_t *dev) { return cpriv(dev)->ready ? cpriv(dev)->model.batch : 0u; }
uint32_t poet_input_elems(const poet_device_t *dev)
{
    return cpriv(dev)->ready ? cpriv(dev)->model.x_elems / cpriv(dev)->model.batch : 0u;
}
uint32_t poet_output_elems(const poet_device_t *dev) { return cpriv(dev)->ready ? cpriv(dev)->out_elems : 0u; }

int poet_has_snapshot(const poet_device_t *dev) { return cpriv(dev)->ready && cpriv(dev)->snapshot; }

uint32_t poet_steps(const poet_device_t *dev)
{
    device_t *d = priv((poet_device_t *)(uintptr_t)dev);
    return d->ready ? *poet_dev_opt_step(d) : 0u;
}

const uint32_t *poet_instr_ticks(const poet_device_t *dev, uint16_t *n)
{
    const device_t *d = cpriv(dev);
    *n = d->ready ? d->n_ticks : 0u;
    return d->ready ? (const uint32_t *)(const void *)(d->pool + d->lay.ticks) : 0;
}

const float *poet_weights(const poet_device_t *dev, uint32_t *n_floats)
{
    const device_t *d = cpriv(dev);
    *n_floats = d->ready ? d->lay.params_bytes / 4u : 0u;
    return d->ready ? (const float *)(const void *)(d->pool + d->lay.params) : 0;
}

/* Sample i's inputs (from element off, n of them) into the staging region: fp32, or int8 with the
 * input's fixed scale as the host quantised them (docs/spec.md 4). Quantising is element-wise, so a
 * sample staged in pieces is the batch quantised at once. */
void poet_dev_stage_part(device_t *d, uint32_t i, uint32_t off, uint32_t n, const float *x)
{
    uint8_t *dst = d->pool + d->lay.batch;
    uint32_t at = d->model.x_elems / d->model.batch * i + off;
    if (d->model.x_bytes == d->model.x_elems) {
        poet_node_t in;
        poet_node_view(&d->model, 0, &in); /* the input node is node 0 (its check admits it nowhere else) */
        poet_quantize_i8((int)n, d->frozen[d->model.param_off[in.a[2]]], x, (int8_t *)(void *)(dst + at));
    } else {
        memcpy(dst + 4u * at, x, 4u * n);
    }
}

/* n samples (n <= batch) into the staging region, the rest zeros. */
static void stage(device_t *d, const float *x, uint32_t n)
{
    uint8_t *dst = d->pool + d->lay.batch;
    uint32_t per = d->model.x_elems / d->model.batch, i, elem = d->model.x_bytes == d->model.x_elems ? 1u : 4u;
    for (i = 0; i < n; i++)
        poet_dev_stage_part(d, i, 0, per, x + (uint64_t)i * per);
    memset(dst + elem * per * n, 0, d->lay.labels - elem * per * n);
}

static void buffers(device_t *d, poet_buffers_t *buf)
{
    buf->params = (float *)(void *)(d->pool + d->lay.params);
    buf->frozen = d->frozen;
    buf->grads = (float *)(void *)(d->pool + d->lay.grads);
    buf->opt_state = (float *)(void *)(d->pool + d->lay.opt + 4u);
    buf->opt_step = poet_dev_opt_step(d);
    buf->x = (const float *)(const void *)(d->pool + d->lay.batch);
    buf->labels = (const int32_t *)(const void *)(d->pool + d->lay.batch + d->lay.labels);
    buf->stream = d->pool + d->lay.stream;
    buf->arena = d->pool + d->lay.arena;
    buf->stop_on_bad_loss = 1;
    buf->cache = 0; /* the feature cache is the protocol's (docs/spec.md 6) */
}

static int run(device_t *d, int k, poet_step_result_t *res)
{
    poet_buffers_t buf;
    if (d->needs_pager && port_pager_open() != 0)
        return POET_E_PAGER;
    buffers(d, &buf);
    poet_interp_step(&d->model, d->sched[k], &buf, d->lr, (uint32_t *)(void *)(d->pool + d->lay.ticks), res);
    d->n_ticks = res->n_records;
    return res->status;
}

int poet_train_step(poet_device_t *dev, const float *x, const int32_t *labels, poet_step_info_t *info)
{
    device_t *d = priv(dev);
    int32_t *staged;
    uint32_t i;
    if (!d->ready || x == 0)
        return POET_E_LINK_ORDER;
    if (d->broken)
        return POET_E_DIVERGED;
    for (i = 0; labels && i < d->model.batch; i++)
        if (labels[i] < 0 || (uint32_t)labels[i] >= d->model.min_classes)
            return POET_E_RANGE;
    stage(d, x, d->model.batch);
    staged = (int32_t *)(void *)(d->pool + d->lay.batch + d->lay.labels);
    for (i = 0; i < d->model.batch; i++)
        staged[i] = labels ? labels[i] : 0;
    return poet_dev_step_staged(d, info);
}

int poet_dev_step_staged(device_t *d, poet_step_info_t *info)
{
    uint8_t *snap = d->pool + d->lay.snapshot, *params = d->pool + d->lay.params, *opt = d->pool + d->lay.opt;
    uint32_t snap_opt = (d->lay.params_bytes + 7u) & ~7u, i, step_before;
    const float *w = (const float *)(const void *)params;
    poet_step_result_t res;
    int status, stopped_early;

    /* a pager that will not open (a card pulled): nothing has run, so the device stays usable */
    if (d->needs_pager && port_pager_open() != 0)
        return POET_E_PAGER;
    /* the snapshot: what a step that fails or diverges is undone to */
    if (d->snapshot) {
        memcpy(snap, params, d->lay.params_bytes);
        memcpy(snap + snap_opt, opt, d->lay.opt_bytes);
    }
    step_before = *poet_dev_opt_step(d);
    status = run(d, 0, &res);
    /* a loss that is not finite stopped the step at the loss node: nothing was updated */
    stopped_early = status == POET_E_DIVERGED;
    for (i = 0; status == POET_OK && i < d->lay.params_bytes / 4u; i++)
        if (!poet_finite(w[i]))
            status = POET_E_DIVERGED;
    if (status != POET_OK && d->snapshot) {
        memcpy(params, snap, d->lay.params_bytes);
        memcpy(opt, snap + snap_opt, d->lay.opt_bytes);
        *poet_dev_opt_step(d) = step_before;
    } else if (status != POET_OK && !stopped_early) {
        d->broken = 1; /* updated, and no copy to undo it from: poet_restore or poet_init */
    }
    if (status != POET_OK)
        memset(d->pool + d->lay.grads, 0, d->lay.grads_bytes);
    if (info) {
        info->loss = res.loss;
        info->step = *poet_dev_opt_step(d);
        info->ticks = res.step_ticks;
        info->tick_hz = port_tick_hz();
        info->peak_bytes = res.peak_live_bytes;
        info->n_instr = res.n_records;
    }
    return status;
}

int poet_predict(poet_device_t *dev, const float *x, uint32_t n, float *out)
{
    device_t *d = priv(dev);
    uint32_t per = d->model.x_elems / (d->ready ? d->model.batch : 1u), done, k;
    poet_step_result_t res;
    int status;
    if (!d->ready || (n && (x == 0 || out == 0)))
        return POET_E_LINK_ORDER;
    if (d->broken)
        return POET_E_DIVERGED;
    for (done = 0; done < n; done += k) {
        k = n - done < d->model.batch ? n - done : d->model.batch;
        stage(d, x + (uint64_t)done * per, k);
        status = run(d, 1, &res);
        if (status != POET_OK)
            return status;
        /* the output in the arena, or the staged batch itself when the model's output is its input */
        memcpy(out + (uint64_t)done * d->out_elems,
               d->pool + (poet_node_kind(&d->model, d->out_node) == POET_KIND_INPUT
                              ? d->lay.batch
                              : d->lay.arena + d->model.arena_off[d->out_node]),
               4u * k * d->out_elems);
    }
    return POET_OK;
}
