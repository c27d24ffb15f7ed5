/* libFuzzer harness: the model blob decoder and validator (poet_model_parse).
 * Input: a model blob, as END_BLOB would hand it over. Every model the parser accepts must then
 * be safe to use: its node table walks stay inside the blob, its keep-all schedule passes the
 * schedule validator, and one training step under that schedule (buffers sized exactly as the
 * model declares, under ASan and UBSan) neither faults nor fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/model.h"
#include "../core/schedule.h"
#include "../core/status.h"
#include "fuzz_common.h"

#define CHECK(c)                                                                          \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "fuzz_model: %s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static poet_model_t model;
/* the largest model blob tried: 64 KiB is over 1,100 nodes, past any seed */
#define FUZZ_MODEL_MAX 65536u
static uint8_t sched[POET_SCHEDULE_BLOB_MAX];

static void check_accepted(const poet_model_t *m, const uint8_t *blob, uint32_t len)
{
    uint32_t i, k, swap = 0, elems = 0, arena, slen, detail;
    poet_node_t n;
    int st;

    uint32_t frozen = 0, aux = 0;
    CHECK(m->n_nodes >= 1 && m->n_nodes <= POET_MAX_NODES);
    CHECK(m->recs + POET_NODE_SZ * (uint32_t)m->n_nodes == blob + len);
    for (i = 0; i < m->n_params; i++) {
        /* RAM (trained, then state) and frozen parameters each packed in param order, in their own area */
        uint32_t *area = poet_param_aux(m, (uint16_t)i) ? &aux : poet_param_frozen(m, (uint16_t)i) ? &frozen : &elems;
        CHECK(m->param_off[i] == *area);
        CHECK(!poet_param_trained(m, (uint16_t)i) || m->param_off[i] < m->train_elems);
        *area += poet_param_i8(m, (uint16_t)i) ? 1u + (poet_param_elems(m, (uint16_t)i) + 3u) / 4u
                                               : poet_param_elems(m, (uint16_t)i);
    }
    CHECK(elems == m->train_elems + m->state_elems && frozen == m->frozen_words && aux == m->aux_words);
    for (i = 0; i < m->n_nodes; i++) {
        poet_node_view(m, (uint16_t)i, &n);
        CHECK(n.n_deps <= 4);
        for (k = 0; k < n.n_deps; k++)
            CHECK(n.deps[k] < i);
        CHECK(m->swap_off[i] == swap && swap % 4u == 0);
        swap += (n.bytes + 3u) & ~3u;
        CHECK(n.op != POET_OP_SGD || i + 1u == m->n_nodes);
    }
    /* aux weights past the swap area, sector-aligned, so no page-out can overwrite them */
    CHECK(m->aux_at >= swap && m->aux_at % 512u == 0 && m->aux_at - swap < 512u);
    slen = fuzz_keep_all(m, sched, sizeof sched, &arena);
    CHECK(slen != 0); /* 2 instructions per node always fit the schedule buffer */
    st = poet_schedule_validate(sched, slen, m, arena, &detail);
    if (st != POET_OK) {
        fprintf(stderr, "fuzz_model: keep-all schedule of an accepted model rejected: %d at %u\n", st,
                detail);
        abort();
    }
    st = fuzz_step(m, sched);
    CHECK(st == POET_OK || st == -1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *blob;
    void *tables;
    uint32_t detail, table_bytes;
    int st;

    /* a board refuses a model bigger than its nv storage at BEGIN_BLOB; the fuzzer's bound */
    if (size > FUZZ_MODEL_MAX)
        return -1;
    /* an exact-size copy: ASan flags a read one byte past the blob */
    blob = malloc(size + !size);
    if (!blob)
        abort();
    memcpy(blob, data, size);
    table_bytes = poet_model_table_bytes(blob, (uint32_t)size);
    tables = malloc(table_bytes + !table_bytes); /* exact size, as the pool's first region */
    if (!tables)
        abort();
    st = table_bytes ? poet_model_parse(blob, (uint32_t)size, tables, &model, &detail) : POET_E_MODEL;
    if (!table_bytes)
        detail = POET_NO_DETAIL;
    if (st == POET_OK) {
        CHECK(detail == POET_NO_DETAIL);
        check_accepted(&model, blob, (uint32_t)size);
    } else {
        CHECK(st == POET_E_MODEL);
        CHECK(detail == POET_NO_DETAIL || detail < model.n_nodes);
    }
    free(tables);
    free(blob);
    return 0;
}
