/* mmap and MAP_ANONYMOUS for the read-only stand-in of nv storage */
#define _DEFAULT_SOURCE
#include "fuzz_common.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "../core/interp.h"
#include "../core/schedule.h"
#include "../core/util.h"
#include "fuzz_port.h"

/* Every node computed in order at the next free offset, then every arena tensor freed (an input has none: the
 * staged batch, read in place). */
uint32_t fuzz_keep_all(const poet_model_t *m, uint8_t *out, uint32_t cap, uint32_t *arena)
{
    uint32_t n = 0, off = 0, len, i;
    uint8_t *p = out + POET_SCHED_HDR;
    uint64_t end = 0;

    for (i = 0; i < m->n_nodes; i++)
        n += 1u + (poet_arena_bytes(m, (uint16_t)i) > 0);
    len = POET_SCHED_HDR + 8u * n + 4u;
    if (len > cap || n > 0xFFFFu)
        return 0;
    for (i = 0; i < m->n_nodes; i++, p += 8) {
        uint32_t b = poet_arena_bytes(m, (uint16_t)i);
        p[0] = 1; /* COMPUTE */
        p[1] = 0;
        poet_wr16(p + 2, (uint16_t)i);
        poet_wr32(p + 4, b ? off : 0u);
        end = (uint64_t)off + b;
        if (end > 0xFFFFFFFCull)
            return 0;
        if (b)
            off = (uint32_t)end;
    }
    for (i = 0; i < m->n_nodes; i++) {
        if (poet_arena_bytes(m, (uint16_t)i) == 0)
            continue;
        p[0] = 5; /* FREE */
        p[1] = 0;
        poet_wr16(p + 2, (uint16_t)i);
        poet_wr32(p + 4, 0);
        p += 8;
    }
    memcpy(out, "PSCH", 4);
    out[4] = 1;
    out[5] = 0;
    poet_wr16(out + 6, m->n_nodes);
    poet_wr32(out + 8, (uint32_t)m->hash);
    poet_wr32(out + 12, (uint32_t)(m->hash >> 32));
    poet_wr32(out + 16, off);
    poet_wr16(out + 20, (uint16_t)n);
    poet_wr16(out + 22, 0);
    poet_wr32(out + len - 4u, poet_crc32(0, out, len - 4u));
    *arena = off;
    return len;
}

static uint32_t trace[POET_SCHED_MAX_INSTR];

int fuzz_step(const poet_model_t *m, const uint8_t *sched)
{
    uint32_t arena = poet_rd32(sched + 16), params = 4u * (m->train_elems + m->state_elems);
    uint32_t frozen = 4u * m->frozen_words;
    uint32_t grads = 4u * m->train_elems, opt = grads * m->opt_words, opt_step = 0;
    uint32_t xb = 4u * m->x_elems, lb = 4u * m->batch, last = (uint32_t)m->n_nodes - 1u, i;
    /* the swap area, then the aux weights (model.h aux_at): the harness's pager holds both */
    uint64_t swap = m->aux_words ? (uint64_t)m->aux_at + 4u * (uint64_t)m->aux_words
                                 : (uint64_t)m->swap_off[last] + poet_node_bytes(m, (uint16_t)last);
    uint64_t total = (uint64_t)arena + params + frozen + grads + opt + xb + lb + m->stream_bytes;
    poet_buffers_t buf;
    memset(&buf, 0, sizeof buf);
    poet_step_result_t r;
    float *w, *f, *g, *o, *x;
    int32_t *labels;
    uint8_t *a, *s, *st;

    if (total > FUZZ_EXEC_BYTES || swap > FUZZ_EXEC_BYTES)
        return -1;
    /* +!n: malloc(0) may return NULL, and a zero-sized buffer must still be a distinct object */
    w = malloc(params + !params);
    /* nv storage on a board: mapped read-only once filled, so a kernel writing it faults */
    f = mmap(0, frozen + !frozen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    g = calloc(grads + !grads, 1);
    o = calloc(opt + !opt, 1);
    x = malloc(xb);
    labels = malloc(lb);
    a = malloc(arena + !arena);
    s = malloc((size_t)swap + !swap);
    st = malloc(m->stream_bytes + !m->stream_bytes);
    if (f == MAP_FAILED)
        abort();
    if (!w || !f || !g || !o || !x || !labels || !a || !s || !st)
        abort();
    for (i = 0; i < m->train_elems + m->state_elems; i++)
        w[i] = 0.01f * (float)((int)(i % 13u) - 6);
    for (i = 0; i < m->frozen_words; i++)
        f[i] = 0.01f * (float)((int)(i % 11u) - 5);
    if (mprotect(f, frozen + !frozen, PROT_READ))
        abort();
    for (i = 0; i < m->x_elems; i++)
        x[i] = (float)(i % 7u); /* valid token ids for embedding models, plain inputs otherwise */
    for (i = 0; i < m->batch; i++)
        labels[i] = 0; /* every loss has at least one class */
    memset(a, 0xA5, arena);
    for (i = m->aux_at; i < swap; i++)
        s[i] = (uint8_t)(i % 11u); /* aux weights: int8 values and a scale word of whatever bits */
    fuzz_port_swap(s, (uint32_t)swap);
    buf.params = w;
    buf.frozen = f;
    buf.grads = g;
    buf.opt_state = o;
    buf.opt_step = &opt_step;
    buf.x = x;
    buf.labels = labels;
    buf.stream = st;
    buf.arena = a;
    poet_interp_step(m, sched, &buf, 0.01f, trace, &r);
    fuzz_port_swap(0, 0);
    free(w);
    munmap(f, frozen + !frozen);
    free(g);
    free(o);
    free(x);
    free(labels);
    free(a);
    free(s);
    free(st);
    return r.status;
}
