#include "protocol.h"

#include <string.h>

#include "interp.h"
#include "pool_layout.h"
#include "model.h"
#include "port.h"
#include "schedule.h"
#include "status.h"
#include "util.h"

static uint8_t schedule_blob[POET_SCHEDULE_BLOB_MAX];
static poet_model_t model;
static uint32_t trace_ticks[POET_SCHED_MAX_INSTR]; /* the records' ticks; the rest is rebuilt to send */
static uint8_t rx[POET_PACKET_MAX];
static uint8_t tx[POET_PACKET_MAX]; /* [type][seq] payload [crc32], COBS-encoded as it is written */

/* The COBS decoder's state: bytes left in the current block, whether the block's code was 0xFF
 * (no zero follows it), and whether the frame has overflowed rx (then it is dropped at its end). */
static struct {
    uint32_t len;
    uint8_t left, full_block, started, overflow;
} dec;

/* The request being answered (its seq goes into every reply) and the last one handled: a request
 * that arrives again with the same seq and type is a retransmission (its reply was lost) and gets
 * the same answer without being executed twice. */
static uint8_t cur_seq;
static struct {
    uint8_t valid, seq, type;
    uint16_t status;
    uint32_t detail;
} last;

/* The last step's outcome, kept so a retransmitted STEP replays its trace and DONE. */
static poet_step_result_t step_res;
static int step_status;
static uint16_t trace_per_frame = POET_TRACE_PER_FRAME_MAX;
static uint32_t steps_done; /* since the weights were loaded: HELLO reports it for resynchronising */

/* The feature cache (FEATURES): what the next STEP writes (KEEP) and reads (STAGE), and after it
 * what it did, for its trace. A STAGE's offsets wait in the staging rows they fill (interp.h). */
static poet_cache_t cache = {POET_NO_KEEP, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
static uint16_t staged; /* samples a STAGE has given so far; the batch's count arms the next STEP */

/* Which blobs are loaded and valid; a new BEGIN of a blob invalidates it (and what depends on it). */
static struct {
    uint8_t model, frozen, aux, weights, batch, schedule;
    uint32_t schedule_len;
    uint32_t model_len, tables; /* the model blob's bytes; its tables' at the pool's start */
    /* the blob being received: into RAM at dst, or into nv storage at nv_at */
    uint8_t cur, to_nv;
    uint32_t total, received;
    uint8_t *dst;
    uint32_t nv_at;
} st;

/* nv writes go out in whole words (port.h): the bytes of a chunk past the last whole word wait
 * here for the next chunk, or for END, which pads them with erased-flash 0xFF. */
static struct {
    uint8_t tail[4];
    uint32_t n_tail, written; /* bytes in tail; bytes programmed since the upload began */
} nvw;

/* The pool's layout for the loaded model (layout.h): computed once the model parses. */
static poet_layout_t lay;
static uint32_t nv_align(uint32_t n) { return (n + POET_NV_PAGE - 1u) & ~(POET_NV_PAGE - 1u); }
static uint32_t params_bytes(void) { return lay.params_bytes; }
static uint32_t grads_bytes(void) { return lay.grads_bytes; }
static uint32_t opt_bytes(void) { return lay.opt_bytes; }
static uint32_t labels_at(void) { return lay.labels; }
static uint32_t batch_bytes(void) { return lay.batch_bytes; }
static uint32_t fixed_bytes(void) { return lay.arena; }
/* Where the frozen weights start in nv storage, and how many bytes they are. */
static uint32_t frozen_at(void) { return nv_align(st.model_len); }
static uint32_t frozen_bytes(void) { return 4u * model.frozen_words; }
static uint32_t aux_bytes(void) { return 4u * model.aux_words; }

static uint8_t *pool_params(void) { return port_pool() + lay.params; }
static uint8_t *pool_grads(void) { return port_pool() + lay.grads; }
static uint8_t *pool_opt(void) { return port_pool() + lay.opt; }
static uint8_t *pool_batch(void) { return port_pool() + lay.batch; }
static uint8_t *pool_arena(void) { return port_pool() + lay.arena; }
/* The step counter the optimizer keeps, and the state after it (4-byte aligned: opt_at is 8). */
static uint32_t *opt_step(void)
{
    static uint32_t none; /* plain SGD keeps no state; the count is still kept, here */
    return model.opt_words ? (uint32_t *)(void *)pool_opt() : &none;
}

/* COBS (Cheshire & Baker 1999): every 0x00 of the packet becomes a block length, so 0x00 only ever
 * marks a frame's end and a receiver resynchronises at the next one whatever was lost. Written
 * block by block straight from the packet: no second buffer. */
static void write_cobs(const uint8_t *p, uint32_t n)
{
    static const uint8_t end = 0;
    uint32_t i = 0;
    for (;;) {
        uint32_t run = 0;
        uint8_t code;
        while (i + run < n && p[i + run] != 0 && run < 254u)
            run++;
        code = (uint8_t)(run + 1u);
        port_write(&code, 1);
        port_write(p + i, run);
        i += run;
        if (i == n)
            break;
        if (run == 254u) /* a full block: no zero was taken */
            continue;
        i++; /* the zero this block's code stands for */
        if (i == n) {
            code = 1; /* the packet ended with that zero: an empty last block */
            port_write(&code, 1);
            break;
        }
    }
    port_write(&end, 1);
}

static void send(uint8_t type, const uint8_t *payload, uint16_t len)
{
    tx[0] = type;
    tx[1] = cur_seq;
    if (payload != tx + 2 && len)
        memcpy(tx + 2, payload, len);
    poet_wr32(tx + 2 + len, poet_crc32(0, tx, 2u + len));
    write_cobs(tx, 6u + len);
}

static void ack(int status, uint32_t detail)
{
    uint8_t p[6];
    last.status = (uint16_t)status;
    last.detail = detail;
    poet_wr16(p, (uint16_t)status);
    poet_wr32(p + 2, detail);
    send(POET_MSG_ACK, p, 6);
}

static void hello(void)
{
    uint8_t *p = tx + 2;
    const char *b = port_board();
    size_t i;
    poet_wr16(p, POET_PROTO);
    p[2] = POET_FW_MAJOR;
    p[3] = POET_FW_MINOR;
    poet_wr32(p + 4, port_tick_hz());
    poet_wr32(p + 8, port_ram_bytes());
    poet_wr32(p + 12, port_pool_bytes());
    poet_wr32(p + 16, port_nv_bytes());
    for (i = 0; i < 16; i++) {
        p[20 + i] = (uint8_t)*b;
        if (*b)
            b++;
    }
    /* what is loaded, so a host reconnecting after a reset or a lost cable knows what to resend */
    p[36] = (uint8_t)(st.model | st.weights << 1 | st.batch << 2 | st.schedule << 3 |
                          (st.frozen && model.frozen_words) << 4 | (st.aux && model.aux_words) << 5);
    poet_wr32(p + 37, steps_done);
    send(POET_MSG_HELLO_REPLY, p, 41);
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
    st.to_nv = 0;
    switch (blob) {
    case POET_BLOB_MODEL:
        /* everything depends on the model, and its nv pages are about to be rewritten; the feature
         * cache on aux storage stays, but nothing is armed for a model that is going */
        st.model = st.frozen = st.aux = st.weights = st.batch = st.schedule = 0;
        cache.keep_node = POET_NO_KEEP;
        staged = 0;
        st.to_nv = 1;
        st.nv_at = 0;
        cap = port_nv_bytes();
        break;
    case POET_BLOB_SCHEDULE:
        st.schedule = 0;
        st.dst = schedule_blob;
        cap = POET_SCHEDULE_BLOB_MAX;
        break;
    case POET_BLOB_WEIGHTS:
    case POET_BLOB_BATCH:
    case POET_BLOB_OPT_STATE:
    case POET_BLOB_FROZEN:
    case POET_BLOB_AUX:
        if (!st.model || (blob == POET_BLOB_OPT_STATE && !st.weights)) {
            ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
            return;
        }
        if (blob == POET_BLOB_FROZEN) {
            /* the frozen weights' size is fixed by the model; whether nv storage holds them was
             * checked when the model ended */
            st.frozen = 0;
            st.to_nv = 1;
            st.nv_at = frozen_at();
            cap = frozen_bytes();
        } else if (blob == POET_BLOB_AUX) {
            /* written through the pager, past the swap area; a resent chunk rewrites the same bytes */
            st.aux = 0;
            cap = aux_bytes();
            if (port_pager_open() != 0) {
                ack(POET_E_PAGER, POET_NO_DETAIL);
                return;
            }
        } else if (blob == POET_BLOB_WEIGHTS) {
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
            staged = 0; /* a batch uploaded replaces a STAGE given for the next step */
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
    nvw.n_tail = nvw.written = 0;
    ack(POET_OK, 0);
}

/* Program the bytes of an nv upload that follow those already taken, in whole words. */
static int nv_put(const uint8_t *src, uint32_t n)
{
    while (n > 0) {
        uint32_t whole;
        if (nvw.n_tail > 0 || n < 4u) {
            nvw.tail[nvw.n_tail++] = *src++;
            n--;
            if (nvw.n_tail == 4u) {
                if (port_nv_write(st.nv_at + nvw.written, nvw.tail, 4u) != 0)
                    return POET_E_PAGER;
                nvw.written += 4u;
                nvw.n_tail = 0;
            }
            continue;
        }
        whole = n & ~3u;
        if (port_nv_write(st.nv_at + nvw.written, src, whole) != 0)
            return POET_E_PAGER;
        nvw.written += whole;
        src += whole;
        n -= whole;
    }
    return POET_OK;
}

/* END of an nv upload: the last partial word, padded as erased flash reads. */
static int nv_finish(void)
{
    if (nvw.n_tail == 0)
        return POET_OK;
    while (nvw.n_tail < 4u)
        nvw.tail[nvw.n_tail++] = 0xFFu;
    nvw.n_tail = 0;
    if (port_nv_write(st.nv_at + nvw.written, nvw.tail, 4u) != 0)
        return POET_E_PAGER;
    nvw.written += 4u;
    return POET_OK;
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
    /* No gap: a chunk starts at or before the bytes received so far. One starting before is the
     * host resending, in smaller pieces, data whose acknowledgement it lost: the same bytes. */
    if (p[0] != st.cur || st.cur == 0 || off > st.received) {
        ack(POET_E_LINK_ORDER, st.received);
        return;
    }
    if (n > 1000u || n > st.total || off > st.total - n) {
        ack(POET_E_RANGE, st.total);
        return;
    }
    if (st.to_nv) {
        /* flash is programmed once per erase: only the bytes past those already received (a
         * resent chunk carries the same bytes again) */
        if (off + n > st.received) {
            int status = nv_put(p + 5 + (st.received - off), off + n - st.received);
            if (status != POET_OK) {
                st.cur = 0; /* the blob cannot be completed: BEGIN again */
                ack(status, st.received);
                return;
            }
        }
    } else if (st.cur == POET_BLOB_AUX) {
        if (port_pager_write(model.aux_at + off, p + 5, n) != 0) {
            st.cur = 0;
            ack(POET_E_PAGER, st.received);
            return;
        }
    } else {
        memcpy(st.dst + off, p + 5, n);
    }
    if (off + n > st.received)
        st.received = off + n;
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
    if (st.to_nv && nv_finish() != POET_OK) {
        ack(POET_E_PAGER, st.received);
        return;
    }
    switch (blob) {
    case POET_BLOB_MODEL: {
        const uint8_t *blob_nv = port_nv();
        uint32_t tables = poet_model_table_bytes(blob_nv, st.total);
        if (tables == 0 || tables > port_pool_bytes()) {
            status = tables == 0 ? POET_E_MODEL : POET_E_TOO_BIG;
            detail = tables == 0 ? POET_NO_DETAIL : port_pool_bytes();
            break;
        }
        status = poet_model_parse(blob_nv, st.total, port_pool(), &model, &detail);
        if (status == POET_OK)
            poet_layout(&model, tables, 0, 0, &lay);
        /* the pool must hold the tables and the trained side; nv storage the frozen weights */
        if (status == POET_OK && lay.fixed > port_pool_bytes()) {
            status = POET_E_TOO_BIG;
            detail = port_pool_bytes();
        }
        if (status == POET_OK && (uint64_t)nv_align(st.total) + 4u * (uint64_t)model.frozen_words > port_nv_bytes()) {
            status = POET_E_TOO_BIG;
            detail = port_nv_bytes();
        }
        if (status == POET_OK) {
            st.model = 1;
            st.model_len = st.total;
            st.tables = tables;
            st.frozen = model.frozen_words == 0; /* nothing to upload */
            st.aux = model.aux_words == 0;
        }
        break;
    }
    case POET_BLOB_FROZEN:
        st.frozen = 1;
        break;
    case POET_BLOB_AUX:
        st.aux = 1;
        break;
    case POET_BLOB_WEIGHTS:
        st.weights = 1;
        steps_done = 0;
        reset_training();
        break;
    case POET_BLOB_OPT_STATE:
        break;
    case POET_BLOB_BATCH: {
        const int32_t *labels = (const int32_t *)(const void *)(pool_batch() + labels_at());
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

/* Record r of the last step, in the order things happened: a STAGE's read first, a KEEP's write right
 * after the compute it follows, each instruction's record in between; instr is the record's index. */
static void step_record(uint32_t r, poet_trace_t *t)
{
    uint32_t i = r - cache.read_done;
    if (cache.read_done && r == 0) {
        t->node = 0;
        while (t->node + 1u < model.n_nodes && poet_node_kind(&model, t->node) != POET_KIND_INPUT)
            t->node++;
        t->kind = POET_TRACE_CACHE_READ;
        t->ticks = cache.read_ticks;
        t->bytes = model.x_bytes;
    } else if (cache.write_done && i == cache.write_after + 1u) {
        /* the kept node's: the compute it follows */
        poet_trace_record(&model, schedule_blob, cache.write_after, cache.write_ticks, t);
        t->kind = POET_TRACE_CACHE_WRITE;
    } else {
        if (cache.write_done && i > cache.write_after)
            i--;
        poet_trace_record(&model, schedule_blob, (uint16_t)i, trace_ticks[i], t);
    }
    t->op = poet_node_op(&model, t->node);
    t->instr = (uint16_t)r;
}

/* The step's trace (trace_per_frame records per frame, as the host asked) and DONE; sent again,
 * unchanged, when the STEP is retransmitted. */
static void send_step_result(void)
{
    uint32_t i, k;
    for (i = 0; i < step_res.n_records; i += trace_per_frame) {
        uint32_t n = step_res.n_records - i < trace_per_frame ? step_res.n_records - i : trace_per_frame;
        uint8_t *q = tx + 2;
        for (k = 0; k < n; k++, q += 16) {
            /* the model and schedule the step ran with: any upload in between would have been the
             * last request, so a STEP after it is a new step, not a retransmission replayed here */
            poet_trace_t rec, *t = &rec;
            step_record(i + k, t);
            poet_wr16(q, t->instr);
            poet_wr16(q + 2, t->node);
            q[4] = t->kind;
            q[5] = t->op;
            poet_wr16(q + 6, 0);
            poet_wr32(q + 8, t->ticks);
            poet_wr32(q + 12, t->bytes);
        }
        send(POET_MSG_TRACE, tx + 2, (uint16_t)(16u * n));
    }
    done(step_status, &step_res);
}

static void step_fail(int status)
{
    memset(&step_res, 0, sizeof step_res);
    step_status = status;
    done(status, &step_res);
}

static void step(const uint8_t *p, uint16_t len)
{
    poet_buffers_t buf;
    uint32_t bits;
    float lr;
    int stage;

    if (len != 6 || poet_rd16(p + 4) == 0 || poet_rd16(p + 4) > POET_TRACE_PER_FRAME_MAX) {
        step_fail(POET_E_FRAME);
        return;
    }
    stage = st.model && staged == model.batch;
    if (!st.model || !st.frozen || !st.aux || !st.weights || !(st.batch || stage)) {
        step_fail(POET_E_LINK_ORDER);
        return;
    }
    if (!st.schedule) {
        step_fail(POET_E_NO_SCHEDULE);
        return;
    }
    /* the cache's records follow the instructions' in the trace, whose count is a u16 */
    if ((uint32_t)poet_sched_n_instr(schedule_blob) + stage + (cache.keep_node != POET_NO_KEEP) > 0xFFFFu) {
        step_fail(POET_E_TOO_BIG);
        return;
    }
    trace_per_frame = poet_rd16(p + 4);
    bits = poet_rd32(p);
    memcpy(&lr, &bits, 4);
    buf.params = (float *)(void *)pool_params();
    buf.frozen = (const float *)(const void *)(port_nv() + frozen_at());
    buf.grads = (float *)(void *)pool_grads();
    buf.opt_state = (float *)(void *)(pool_opt() + 4u);
    buf.opt_step = opt_step();
    buf.x = (const float *)(const void *)pool_batch();
    buf.labels = (const int32_t *)(const void *)(pool_batch() + labels_at());
    buf.stream = port_pool() + lay.stream;
    buf.arena = pool_arena();
    buf.stop_on_bad_loss = 0; /* the host judges a step's loss */
    cache.stage_n = stage ? model.batch : 0;
    cache.stage_row = model.x_bytes / model.batch;
    cache.stage = pool_batch();
    buf.cache = &cache;
    if (port_pager_open() != 0) {
        step_fail(POET_E_PAGER);
        return;
    }
    /* Accepted: the host now knows the step runs and waits for it rather than retransmitting. */
    ack(POET_OK, 0);
    poet_interp_step(&model, schedule_blob, &buf, lr, trace_ticks, &step_res);
    /* each arms one step; the staged features are then the batch, as an uploaded one is */
    cache.keep_node = POET_NO_KEEP;
    if (stage) {
        staged = 0;
        st.batch = cache.read_ok;
    }
    step_status = step_res.status;
    steps_done++;
    /* Trace after the step, so sending it never perturbs the measured ticks. */
    send_step_result();
}

static void read_blob(const uint8_t *p, uint16_t len)
{
    uint32_t off, n, size;
    const uint8_t *base;
    if (len != 7) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    if (p[0] != POET_BLOB_WEIGHTS && p[0] != POET_BLOB_OPT_STATE && p[0] != POET_BLOB_FROZEN) {
        ack(POET_E_RANGE, POET_NO_DETAIL);
        return;
    }
    if (!st.model || (p[0] == POET_BLOB_FROZEN ? !st.frozen : !st.weights)) {
        ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
        return;
    }
    if (p[0] == POET_BLOB_FROZEN) {
        base = port_nv() + frozen_at();
        size = frozen_bytes();
    } else {
        base = p[0] == POET_BLOB_WEIGHTS ? pool_params() : pool_opt();
        size = p[0] == POET_BLOB_WEIGHTS ? params_bytes() : opt_bytes();
    }
    off = poet_rd32(p + 1);
    n = poet_rd16(p + 5);
    if (n > 1000u || off > size || n > size - off) {
        ack(POET_E_RANGE, size);
        return;
    }
    send(POET_MSG_DATA, base + off, (uint16_t)n);
}

/* VERIFY: the aux storage may already hold the model's aux weights (a card written by a card reader,
 * or by an earlier run with the same weights): their CRC-32 equal to the host's marks them loaded,
 * so megabytes need not cross the serial link again. The reads go through tx, which the ACK then
 * overwrites. */
static void verify(const uint8_t *p, uint16_t len)
{
    uint32_t crc = 0, off, n;
    if (len != 5 || p[0] != POET_BLOB_AUX) {
        ack(len != 5 ? POET_E_FRAME : POET_E_RANGE, POET_NO_DETAIL);
        return;
    }
    if (!st.model || st.cur == POET_BLOB_AUX) {
        ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
        return;
    }
    if (port_pager_open() != 0) {
        ack(POET_E_PAGER, POET_NO_DETAIL);
        return;
    }
    for (off = 0; off < aux_bytes(); off += n) {
        n = aux_bytes() - off < POET_FRAME_MAX ? aux_bytes() - off : POET_FRAME_MAX;
        if (port_pager_read(model.aux_at + off, tx, n) != 0) {
            ack(POET_E_PAGER, off);
            return;
        }
        crc = poet_crc32(crc, tx, n);
    }
    st.aux = crc == poet_rd32(p + 1);
    ack(st.aux ? POET_OK : POET_E_RANGE, crc);
}

/* The first aux byte a feature cache may use: past the swap area and the aux weights of the model
 * loaded (the host keeps it past every model's it uploads, so a new model never overwrites it). */
static uint32_t cache_from(void) { return model.aux_at + aux_bytes(); }

/* RANGE's detail for n cache bytes at off, or POET_OK when they fit the aux storage past cache_from. */
static int cache_fits(uint32_t off, uint32_t n, uint32_t *detail)
{
    if (off < cache_from()) {
        *detail = cache_from();
        return POET_E_RANGE;
    }
    if ((uint64_t)off + n > port_pager_bytes()) {
        *detail = port_pager_bytes();
        return POET_E_RANGE;
    }
    return POET_OK;
}

/* FEATURES: arm the next STEP to write a node's output to the feature cache (KEEP), or to read its
 * batch from it (STAGE, in one or more requests of consecutive samples). Everything is checked
 * before anything changes: a refused request leaves what was uploaded or armed as it was. */
static void features(const uint8_t *p, uint16_t len)
{
    uint32_t detail = POET_NO_DETAIL, row, i, n, first;
    int status;
    if (len < 1u || (p[0] == POET_FEATURES_KEEP && len != 7u) ||
        (p[0] == POET_FEATURES_STAGE && (len < 5u || (len - 5u) % 8u != 0))) {
        ack(POET_E_FRAME, POET_NO_DETAIL);
        return;
    }
    if (p[0] != POET_FEATURES_KEEP && p[0] != POET_FEATURES_STAGE) {
        ack(POET_E_UNKNOWN_MSG, p[0]);
        return;
    }
    if (!st.model) {
        ack(POET_E_LINK_ORDER, POET_NO_DETAIL);
        return;
    }
    if (p[0] == POET_FEATURES_KEEP) {
        uint16_t node = poet_rd16(p + 1);
        if (node >= model.n_nodes || poet_node_kind(&model, node) != POET_KIND_FORWARD ||
            poet_arena_bytes(&model, node) == 0) {
            ack(POET_E_RANGE, node);
            return;
        }
        status = cache_fits(poet_rd32(p + 3), poet_node_bytes(&model, node), &detail);
        if (status == POET_OK) {
            cache.keep_node = node;
            cache.keep_at = poet_rd32(p + 3);
        }
        ack(status, status == POET_OK ? 0u : detail);
        return;
    }
    /* STAGE: u16 count (the batch), u16 first sample, then (u32 offset, i32 label) per sample */
    first = poet_rd16(p + 3);
    n = (len - 5u) / 8u;
    row = model.x_bytes / model.batch;
    if (poet_rd16(p + 1) != model.batch || model.x_bytes % model.batch != 0 || row < 4u) {
        ack(POET_E_RANGE, model.batch); /* a row holds its offset until the step reads it (interp.h) */
        return;
    }
    if (first > staged) { /* consecutive, as CHUNKs: a repeat may cover samples already given */
        ack(POET_E_LINK_ORDER, staged);
        return;
    }
    if (n > model.batch - first) {
        ack(POET_E_RANGE, model.batch);
        return;
    }
    for (i = 0; i < n; i++) {
        int32_t label = (int32_t)poet_rd32(p + 9 + 8u * i);
        if (label < 0 || (uint32_t)label >= model.min_classes ||
            cache_fits(poet_rd32(p + 5 + 8u * i), row, &detail) != POET_OK) {
            ack(POET_E_RANGE, first + i);
            return;
        }
    }
    if (first == 0) {
        /* the staging region is the next step's batch from now on; its int8 padding is zeros */
        st.batch = 0;
        staged = 0;
        memset(pool_batch() + model.x_bytes, 0, labels_at() - model.x_bytes);
    }
    for (i = 0; i < n; i++) {
        poet_wr32(pool_batch() + (first + i) * row, poet_rd32(p + 5 + 8u * i));
        memcpy(pool_batch() + labels_at() + 4u * (first + i), p + 9 + 8u * i, 4);
    }
    if (first + n > staged)
        staged = (uint16_t)(first + n);
    ack(POET_OK, 0);
}

void poet_handle_frame(uint8_t type, uint8_t seq, const uint8_t *payload, uint16_t len)
{
    cur_seq = seq;
    if (last.valid && seq == last.seq && type == last.type) {
        switch (type) {
        case POET_MSG_HELLO:
        case POET_MSG_READ:
        case POET_MSG_VERIFY:
            break; /* change nothing but what they check: answered afresh */
        case POET_MSG_STEP:
            send_step_result();
            return;
        default:
            ack(last.status, last.detail); /* the verdict already given; nothing runs twice */
            return;
        }
    }
    last.valid = 1;
    last.seq = seq;
    last.type = type;
    switch (type) {
    case POET_MSG_HELLO: hello(); break;
    case POET_MSG_BEGIN_BLOB: begin_blob(payload, len); break;
    case POET_MSG_CHUNK: chunk(payload, len); break;
    case POET_MSG_END_BLOB: end_blob(payload, len); break;
    case POET_MSG_STEP: step(payload, len); break;
    case POET_MSG_READ: read_blob(payload, len); break;
    case POET_MSG_VERIFY: verify(payload, len); break;
    case POET_MSG_FEATURES: features(payload, len); break;
    default: ack(POET_E_UNKNOWN_MSG, type); break;
    }
}

static void rx_put(uint8_t c)
{
    if (dec.len < sizeof rx)
        rx[dec.len++] = c;
    else
        dec.overflow = 1;
}

void poet_rx_byte(uint8_t c)
{
    if (c == 0) {
        /* A frame ends. Drop it if a block was cut short, it overflowed, or the CRC fails: the
         * host retransmits what it gets no answer to. */
        if (dec.started && !dec.left && !dec.overflow && dec.len >= 6u &&
            poet_crc32(0, rx, dec.len - 4u) == poet_rd32(rx + dec.len - 4u)) {
            poet_handle_frame(rx[0], rx[1], rx + 2, (uint16_t)(dec.len - 6u));
        } else if (dec.started) {
            /* Say so at once: the host resends now rather than after its timeout. seq 0 is no
             * request's (hosts number them 1..255). */
            cur_seq = 0;
            send(POET_MSG_NAK, 0, 0);
        }
        memset(&dec, 0, sizeof dec);
        return;
    }
    if (dec.left) {
        rx_put(c);
        dec.left--;
        return;
    }
    if (dec.started && !dec.full_block)
        rx_put(0); /* the zero the previous block's code stood for */
    dec.started = 1;
    dec.full_block = c == 0xFFu;
    dec.left = (uint8_t)(c - 1u);
}

void poet_run(void)
{
    int c;
    memset(&dec, 0, sizeof dec);
    while ((c = port_getc()) >= 0)
        poet_rx_byte((uint8_t)c);
}
