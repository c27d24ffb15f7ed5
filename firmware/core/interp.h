/* Executes a validated schedule: one training step at the host-chosen arena offsets. */
#ifndef POET_INTERP_H
#define POET_INTERP_H

#include <stdint.h>

#include "model.h"
#include "schedule.h"

enum {
    POET_TRACE_FORWARD = 0,
    POET_TRACE_BACKWARD = 1,
    POET_TRACE_RECOMPUTE = 2,
    POET_TRACE_PAGE_IN = 3,
    POET_TRACE_PAGE_OUT = 4,
    POET_TRACE_OPTIMIZER = 5,
    POET_TRACE_FREE = 6
};

typedef struct {
    uint16_t instr;
    uint16_t node;
    uint8_t kind;
    uint8_t op;
    uint32_t ticks;
    uint32_t bytes;
} poet_trace_t;

/* Where a step's data lives; all pointers point into the pool. */
typedef struct {
    float *params;          /* the trained parameters, at the model's param_off */
    const float *frozen;    /* the frozen ones, in nv storage (read in place) */
    float *grads;           /* one per trained element, at the same offsets as params (none: in_backward) */
    float *opt_state;       /* opt_words per trained element (all first words, then all second) */
    uint32_t *opt_step;     /* optimizer steps taken, counting this one once it runs (Adam, momentum) */
    const float *x;         /* staged inputs */
    const int32_t *labels;  /* staged labels */
    uint8_t *stream;        /* the stream buffer (model stream_bytes): a streamed weight's reads land here */
    uint8_t *arena;
    /* 1: a loss that is not finite ends the step at the loss node, POET_E_DIVERGED, before the
     * backward pass updates anything (the device API; the protocol lets the host judge). */
    int stop_on_bad_loss;
} poet_buffers_t;

typedef struct {
    int status;
    float loss;
    uint32_t peak_live_bytes;
    uint32_t peak_extent_bytes;
    uint32_t step_ticks;
    uint16_t n_records;
} poet_step_result_t;

/* Run one step. ticks (POET_SCHED_MAX_INSTR of them) gets each instruction's duration: the one part
 * of its trace record the schedule and the model do not already say (poet_trace_record). */
void poet_interp_step(const poet_model_t *m, const uint8_t *schedule, const poet_buffers_t *buf,
                      float lr, uint32_t *ticks, poet_step_result_t *res);

/* Instruction i's trace record, rebuilt from the schedule and model it ran with and its ticks: 4
 * bytes a record in RAM rather than 16, so a buffer that held 254 records holds 1019 (and schedules
 * twice as long fit the MCUs at the same RAM). */
void poet_trace_record(const poet_model_t *m, const uint8_t *schedule, uint16_t i, uint32_t ticks,
                       poet_trace_t *r);

#endif
