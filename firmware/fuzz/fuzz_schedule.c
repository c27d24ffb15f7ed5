/* libFuzzer harness: the schedule blob validator (poet_schedule_validate), then the interpreter
 * on every schedule it accepts.
 * Input: one mode byte, then the schedule blob.
 *   bits 0-2  which fixed model (seed_models.h) is loaded
 *   bit 3     rewrite the CRC trailer so the mutation reaches the checks behind it
 *   bit 4     write the model's hash into the header, likewise
 *   bit 5     pool_free = 1 MiB (else 4 KiB, so ARENA rejections happen too)
 * An accepted schedule must run one step, with every buffer allocated at exactly its declared
 * size, without a fault and with status OK: the validator's acceptance is what the interpreter
 * trusts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/model.h"
#include "../core/schedule.h"
#include "../core/status.h"
#include "../core/util.h"
#include "fuzz_common.h"
#include "seed_models.h"

static poet_model_t models[FUZZ_N_MODELS];
static void *tables[FUZZ_N_MODELS];
static int parsed;

static void load_models(void)
{
    uint32_t i, detail;
    for (i = 0; i < FUZZ_N_MODELS; i++) {
        uint32_t n = poet_model_table_bytes(fuzz_models[i], fuzz_model_lens[i]);
        tables[i] = malloc(n + !n);
        if (!tables[i] || poet_model_parse(fuzz_models[i], fuzz_model_lens[i], tables[i], &models[i], &detail) != POET_OK) {
            fprintf(stderr, "fuzz_schedule: built-in model %u rejected at node %u\n", i, detail);
            abort();
        }
    }
    parsed = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const poet_model_t *m;
    uint8_t mode, *s;
    uint32_t len, detail, pool_free;
    int st;

    if (!parsed)
        load_models();
    /* the firmware refuses a bigger schedule at BEGIN_BLOB, before the validator sees it */
    if (size < 1 || size - 1u > POET_SCHEDULE_BLOB_MAX)
        return -1;
    mode = data[0];
    len = (uint32_t)size - 1u;
    m = &models[(mode & 7u) % FUZZ_N_MODELS];
    pool_free = (mode & 0x20u) ? (1u << 20) : 4096u;
    s = malloc(len + !len); /* exact size: ASan flags a read past the blob */
    if (!s)
        abort();
    memcpy(s, data + 1, len);
    if ((mode & 0x10u) && len >= 16u) {
        poet_wr32(s + 8, (uint32_t)m->hash);
        poet_wr32(s + 12, (uint32_t)(m->hash >> 32));
    }
    if ((mode & 0x08u) && len >= 4u)
        poet_wr32(s + len - 4u, poet_crc32(0, s, len - 4u));
    st = poet_schedule_validate(s, len, m, pool_free, &detail);
    if (st == POET_OK) {
        st = fuzz_step(m, s);
        if (st != POET_OK && st != -1) {
            fprintf(stderr, "fuzz_schedule: accepted schedule failed its step: status %d\n", st);
            abort();
        }
    } else if (st < POET_E_SHORT || st > POET_E_OUTPUT ||
               !(detail == POET_NO_DETAIL || (len >= POET_SCHED_HDR && detail < poet_sched_n_instr(s)))) {
        fprintf(stderr, "fuzz_schedule: status %d detail %u out of range\n", st, detail);
        abort();
    }
    free(s);
    return 0;
}
