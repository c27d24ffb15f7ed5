/* Schedule blob (PSCH, docs/spec.md section 5): the validator that runs before anything executes. */
#ifndef POET_SCHEDULE_H
#define POET_SCHEDULE_H

#include <stdint.h>

#include "model.h"

#ifndef POET_SCHEDULE_BLOB_MAX
#define POET_SCHEDULE_BLOB_MAX 4096u
#endif
#define POET_SCHED_HDR 24u
#define POET_SCHED_MAX_INSTR ((POET_SCHEDULE_BLOB_MAX - POET_SCHED_HDR - 4u) / 8u)

/* Header flags (byte 5). FORWARD: a forward schedule (predict): it computes the nodes before the
 * model's first loss node, runs the model in evaluation mode (a batch norm with its running
 * statistics, no dropout) and ends with the loss's first dep, the output, resident. */
#define POET_SCHED_FORWARD 0x01u

enum {
    POET_I_COMPUTE = 1,
    POET_I_RECOMPUTE = 2,
    POET_I_PAGE_OUT = 3,
    POET_I_PAGE_IN = 4,
    POET_I_FREE = 5
};
/* An instruction's flags byte (byte 1): a compute or recompute made over its node's dep 0, at the dep's offset,
 * the dep leaving with it (docs/spec.md 1, "In place"); no other flag exists. */
#define POET_I_IN_PLACE 0x01u


/* Validate a schedule blob against the loaded model (NULL if none) and the bytes the pool has
 * left for the arena. Returns the status (0 = OK) and sets *detail to the failing instruction
 * index, or 0xFFFFFFFF for header and end checks (and on success). */
int poet_schedule_validate(const uint8_t *data, uint32_t len, const poet_model_t *m,
                           uint32_t pool_free, uint32_t *detail);

static inline int poet_sched_forward(const uint8_t *data) { return (data[5] & POET_SCHED_FORWARD) != 0; }

static inline uint16_t poet_sched_n_instr(const uint8_t *data)
{
    return (uint16_t)(data[20] | (data[21] << 8));
}

#endif
