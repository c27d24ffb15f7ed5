/* Differential-test harness for the schedule validator: reads from stdin
 *   u32 pool_free, u32 model_len, model bytes (model_len 0 = no model loaded),
 *   then any number of (u32 len, schedule bytes)
 * and prints "status detail" per schedule, so Python can compare thousands of cases in one run. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/model.h"
#include "../core/schedule.h"
#include "../core/status.h"
#include "../core/util.h"

/* The model parser links the ops, and a streamed conv reads aux storage; the validator runs no
 * step, so its pager has nothing. */
int port_pager_read(uint32_t offset, void *dst, uint32_t n);
int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    (void)offset;
    (void)dst;
    (void)n;
    return -1;
}

static uint8_t model_blob[1u << 20];
static uint32_t tables[(1u << 20) / 4u];
static uint8_t sched[65536 + 64];
static poet_model_t model;

static int read_u32(uint32_t *v)
{
    uint8_t b[4];
    if (fread(b, 1, 4, stdin) != 4)
        return 0;
    *v = poet_rd32(b);
    return 1;
}

int main(void)
{
    uint32_t pool_free, model_len, len, detail;
    int have_model = 0, st;
    if (!read_u32(&pool_free) || !read_u32(&model_len) || model_len > sizeof model_blob)
        return 2;
    if (model_len) {
        if (fread(model_blob, 1, model_len, stdin) != model_len)
            return 2;
        st = poet_model_table_bytes(model_blob, model_len) > sizeof tables
                 ? POET_E_MODEL
                 : poet_model_parse(model_blob, model_len, tables, &model, &detail);
        if (st != POET_OK) {
            printf("model %d %lu\n", st, (unsigned long)detail);
            return 3;
        }
        have_model = 1;
    }
    while (read_u32(&len)) {
        if (len > sizeof sched || fread(sched, 1, len, stdin) != len)
            return 2;
        st = poet_schedule_validate(sched, len, have_model ? &model : NULL, pool_free, &detail);
        printf("%d %lu\n", st, (unsigned long)detail);
    }
    return 0;
}
