#include "protocol.h"

#include <string.h>

#include "interp.h"
#include "model.h"
#include "port.h"
#include "schedule.h"
#include "status.h"
#include "util.h"

#define TRACE_PER_FRAME 60u

static uint8_t model_blob[POET_MODEL_BLOB_MAX];
static uint8_t schedule_blob[POET_SCHEDULE_BLOB_MAX];
static poet_model_t model;
static poet_trace_t trace[POET_SCHED_MAX_INSTR];
static uint8_t rx[POET_FRAME_MAX];
static uint8_t tx[4u + POET_FRAME_MAX + 4u];

/* Which blobs are loaded and valid; a new BEGIN of a blob invalidates it (and what depends on it). */
static struct {
    uint8_t model, weights, batch, schedule;
    uint32_t schedule_len;
    /* the blob being received */
    uint8_t cur;
    uint32_t total, received;
    uint8_t *dst;
} st;

/* Pool layout (docs/spec.md section 6), each region 8-byte aligned: every parameter, the gradients
 * of the trained ones, the optimizer state (a step counter, then opt_words floats per trained
 * element), the staged batch, the arena. host/poet/memory.py lays it out the same way. */
static uint32_t align8(uint32_t n) { return (n + 7u) & ~7u; }
static uint32_t params_bytes(void) { return 4u * model.total_param_elems; }
static uint32_t grads_bytes(void) { return 4u * model.train_elems; }
static uint32_t opt_bytes(void) { return model.opt_words ? 4u + 4u * model.opt_words * model.train_elems : 0u; }
static uint32_t batch_bytes(void) { return 4u * model.x_elems + 4u * model.batch; }
static uint32_t grads_at(void) { return align8(params_bytes()); }
static uint32_t opt_at(void) { return grads_at() + align8(grads_bytes()); }
static uint32_t batch_at(void) { return opt_at() + align8(opt_bytes()); }
static uint32_t fixed_bytes(void) { return batch_at() + align8(batch_bytes()); }
/* The same sum without wrapping, for the fit check: each region fits 32 bits, but together they
 * may not (2^28 parameters with Adam's two state words are 4 GiB), and a wrapped sum would pass. */
static uint64_t layout_bytes(void)
{
    return (uint64_t)align8(params_bytes()) + align8(grads_bytes()) + align8(opt_bytes()) +
           align8(batch_bytes());
}

static uint8_t *pool_params(void) { return port_pool(); }
static uint8_t *pool_grads(void) { return port_pool() + grads_at(); }
static uint8_t *pool_opt(void) { return port_pool() + opt_at(); }
static uint8_t *pool_batch(void) { return port_pool() + batch_at(); }
static uint8_t *pool_arena(void) { return port_pool() + fixed_bytes(); }
/* The step counter the optimizer keeps, and the state after it (4-byte aligned: opt_at is 8). */
static uint32_t *opt_step(void)
{
    static uint32_t none; /* plain SGD keeps no state; the count is still kept, here */
    return model.opt_words ? (uint32_t *)(void *)pool_opt() : &none;
}

static void send(uint8_t type, const uint8_t *payload, uint16_t len)
{
    tx[0] = POET_SYNC;
    tx[1] = type;
    poet_wr16(tx + 2, len);
    if (payload != tx + 4 && len)
        memcpy(tx + 4, payload, len);
    poet_wr32(tx + 4 + len, poet_crc32(0, tx + 1, 3u + len));
    port_write(tx, 8u + len);
}

static void ack(int status, uint32_t detail)
{
    uint8_t p[6];
    poet_wr16(p, (uint16_t)status);
    poet_wr32(p + 2, detail);
    send(POET_MSG_ACK, p, 6);
}

static void hello(void)
{
    uint8_t *p = tx + 4;
    const char *b = port_board();
    size_t i;
    poet_wr16(p, POET_PROTO);
    p[2] = POET_FW_MAJOR;
    p[3] = POET_FW_MINOR;
    poet_wr32(p + 4, port_tick_hz());
    poet_wr32(p + 8, port_ram_bytes());
    poet_wr32(p + 12, port_pool_bytes());
    poet_wr32(p + 16, port_flash_bytes());
    for (i = 0; i < 16; i++) {
        p[20 + i] = (uint8_t)*b;
        if (*b)
            b++;
    }
    send(POET_MSG_HELLO_REPLY, p, 36);
}

/* A new model or new weights start training afresh: no accumulated gradient, no optimizer state. */
static void reset_training(void)
{
    memset(pool_grads(), 0, grads_bytes());
    memset(pool_opt(), 0, opt_bytes());
    *opt_step() = 0;
}

static void begin_blob(const uint8_t *p, uint16_t len)
{
    uint8_t blob;
    uint32_t total, cap = 0;
    if (len != 5) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    blob = p[0];
    total = poet_rd32(p + 1);
    st.cur = 0;
    switch (blob) {
    case POET_BLOB_MODEL:
        st.model = st.weights = st.batch = st.schedule = 0;
        st.dst = model_blob;
        cap = POET_MODEL_BLOB_MAX;
        break;
    case POET_BLOB_SCHEDULE:
        st.schedule = 0;
        st.dst = schedule_blob;
        cap = POET_SCHEDULE_BLOB_MAX;
        break;
    case POET_BLOB_WEIGHTS:
    case POET_BLOB_BATCH:
    case POET_BLOB_OPT_STATE:
        if (!st.model || (blob == POET_BLOB_OPT_STATE && !st.weights)) {
            ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
            return;
        }
        if (blob == POET_BLOB_WEIGHTS) {
            st.weights = 0;
            st.dst = pool_params();
            cap = params_bytes();
        } else if (blob == POET_BLOB_OPT_STATE) {
            /* a resumed run's state replaces the fresh one the weights upload made; it starts
             * from zeros so an upload cut short leaves no mix of two runs' state */
            reset_training();
            st.dst = pool_opt();
            cap = opt_bytes();
        } else {
            st.batch = 0;
            st.dst = pool_batch();
            cap = batch_bytes();
        }
        /* these blobs have exactly one valid size; detail tells the host which */
        if (total != cap) {
            ack(total > cap ? POET_E_TOO_BIG : POET_E_RANGE, cap);
            return;
        }
        break;
    default:
        ack(POET_E_UNKNOWN_MSG, blob);
        return;
    }
    if (total > cap) {
        ack(POET_E_TOO_BIG, cap);
        return;
    }
    st.cur = blob;
    st.total = total;
    st.received = 0;
    ack(POET_OK, 0);
}

static void chunk(const uint8_t *p, uint16_t len)
{
    uint32_t off, n;
    if (len < 5) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    off = poet_rd32(p + 1);
    n = len - 5u;
    if (p[0] != st.cur || st.cur == 0 || off != st.received) {
        ack(POET_E_LINK_ORDER, st.received);
        return;
    }
    if (n > 1000u || off + n > st.total) {
        ack(POET_E_RANGE, st.total);
        return;
    }
    memcpy(st.dst + off, p + 5, n);
    st.received += n;
    ack(POET_OK, 0);
}

static void end_blob(const uint8_t *p, uint16_t len)
{
    uint8_t blob;
    uint32_t detail = POET_NO_DETAIL, i;
    int status = POET_OK;
    if (len != 1) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    blob = p[0];
    if (blob != st.cur || st.cur == 0) {
        ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
        return;
    }
    st.cur = 0;
    if (st.received != st.total) {
        ack(POET_E_RANGE, st.received);
        return;
    }
    switch (blob) {
    case POET_BLOB_MODEL:
        status = poet_model_parse(model_blob, st.total, &model, &detail);
        if (status == POET_OK && layout_bytes() > port_pool_bytes()) {
            status = POET_E_TOO_BIG;
            detail = port_pool_bytes();
        }
        if (status == POET_OK)
            st.model = 1;
        break;
    case POET_BLOB_WEIGHTS:
        st.weights = 1;
        reset_training();
        break;
    case POET_BLOB_OPT_STATE:
        break;
    case POET_BLOB_BATCH: {
        const int32_t *labels = (const int32_t *)(const void *)(pool_batch() + 4u * model.x_elems);
        for (i = 0; i < model.batch; i++) {
            if (labels[i] < 0 || (uint32_t)labels[i] >= model.min_classes) {
                status = POET_E_RANGE;
                detail = i;
                break;
            }
        }
        st.batch = status == POET_OK;
        break;
    }
    case POET_BLOB_SCHEDULE:
        status = poet_schedule_validate(schedule_blob, st.total, st.model ? &model : 0,
                                        st.model ? port_pool_bytes() - fixed_bytes() : 0, &detail);
        st.schedule = status == POET_OK;
        st.schedule_len = st.total;
        break;
    default:
        break;
    }
    ack(status, status == POET_OK ? 0u : detail);
}

static void done(int status, const poet_step_result_t *r)
{
    uint8_t p[20];
    uint32_t bits;
    memcpy(&bits, &r->loss, 4);
    poet_wr16(p, (uint16_t)status);
    poet_wr32(p + 2, bits);
    poet_wr32(p + 6, r->peak_live_bytes);
    poet_wr32(p + 10, r->peak_extent_bytes);
    poet_wr16(p + 14, r->n_records);
    poet_wr32(p + 16, r->step_ticks);
    send(POET_MSG_DONE, p, 20);
}

static void step(const uint8_t *p, uint16_t len)
{
    poet_step_result_t r;
    poet_buffers_t buf;
    uint32_t bits, i, k;
    float lr;

    memset(&r, 0, sizeof r);
    if (len != 4) {
        done(POET_E_FRAME, &r);
        return;
    }
    if (!st.model || !st.weights || !st.batch) {
        done(POET_E_LINK_ORDER, &r);
        return;
    }
    if (!st.schedule) {
        done(POET_E_NO_SCHEDULE, &r);
        return;
    }
    bits = poet_rd32(p);
    memcpy(&lr, &bits, 4);
    buf.params = (float *)(void *)pool_params();
    buf.grads = (float *)(void *)pool_grads();
    buf.opt_state = (float *)(void *)(pool_opt() + 4u);
    buf.opt_step = opt_step();
    buf.x = (const float *)(const void *)pool_batch();
    buf.labels = (const int32_t *)(const void *)(pool_batch() + 4u * model.x_elems);
    buf.arena = pool_arena();
    if (port_pager_open() != 0) {
        done(POET_E_PAGER, &r);
        return;
    }
    poet_interp_step(&model, schedule_blob, &buf, lr, trace, &r);
    /* Trace after the step, so sending it never perturbs the measured ticks. */
    for (i = 0; i < r.n_records; i += TRACE_PER_FRAME) {
        uint32_t n = r.n_records - i < TRACE_PER_FRAME ? r.n_records - i : TRACE_PER_FRAME;
        uint8_t *q = tx + 4;
        for (k = 0; k < n; k++, q += 16) {
            const poet_trace_t *t = &trace[i + k];
            poet_wr16(q, t->instr);
            poet_wr16(q + 2, t->node);
            q[4] = t->kind;
            q[5] = t->op;
            poet_wr16(q + 6, 0);
            poet_wr32(q + 8, t->ticks);
            poet_wr32(q + 12, t->bytes);
        }
        send(POET_MSG_TRACE, tx + 4, (uint16_t)(16u * n));
    }
    done(r.status, &r);
}

static void read_blob(const uint8_t *p, uint16_t len)
{
    uint32_t off, n, size;
    const uint8_t *base;
    if (len != 7) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    if (p[0] != POET_BLOB_WEIGHTS && p[0] != POET_BLOB_OPT_STATE) {
        ack(POET_E_RANGE, POET_NO_DETAIL);
        return;
    }
    if (!st.model || !st.weights) {
        ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
        return;
    }
    base = p[0] == POET_BLOB_WEIGHTS ? pool_params() : pool_opt();
    size = p[0] == POET_BLOB_WEIGHTS ? params_bytes() : opt_bytes();
    off = poet_rd32(p + 1);
    n = poet_rd16(p + 5);
    if (n > 1000u || off > size || n > size - off) {
        ack(POET_E_RANGE, size);
        return;
    }
    send(POET_MSG_DATA, base + off, (uint16_t)n);
}

void poet_handle_frame(uint8_t type, const uint8_t *payload, uint16_t len)
{
    switch (type) {
    case POET_MSG_HELLO: hello(); break;
    case POET_MSG_BEGIN_BLOB: begin_blob(payload, len); break;
    case POET_MSG_CHUNK: chunk(payload, len); break;
    case POET_MSG_END_BLOB: end_blob(payload, len); break;
    case POET_MSG_STEP: step(payload, len); break;
    case POET_MSG_READ: read_blob(payload, len); break;
    default: ack(POET_E_UNKNOWN_MSG, type); break;
    }
}

void poet_run(void)
{
    uint8_t hdr[3], crcb[4];
    int c;
    uint32_t i;
    uint16_t len;

    for (;;) {
        c = port_getc();
        if (c < 0)
            return;
        if (c != POET_SYNC)
            continue;
        /* On any error we go back to hunting from the byte after this sync. A bad frame is
         * dropped silently: the host times out and retries. */
        for (i = 0; i < 3; i++) {
            if ((c = port_getc()) < 0)
                return;
            hdr[i] = (uint8_t)c;
        }
        len = poet_rd16(hdr + 1);
        if (len > POET_FRAME_MAX)
            continue;
        for (i = 0; i < len; i++) {
            if ((c = port_getc()) < 0)
                return;
            rx[i] = (uint8_t)c;
        }
        for (i = 0; i < 4; i++) {
            if ((c = port_getc()) < 0)
                return;
            crcb[i] = (uint8_t)c;
        }
        if (poet_crc32(poet_crc32(0, hdr, 3), rx, len) != poet_rd32(crcb))
            continue;
        poet_handle_frame(hdr[0], rx, len);
    }
}
