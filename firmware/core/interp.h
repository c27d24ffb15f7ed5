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
    POET_TRACE_FREE = 6,
    POET_TRACE_CACHE_WRITE = 7, /* a KEEP: the kept node's output written to the feature cache */
    POET_TRACE_CACHE_READ = 8   /* a STAGE: the batch's features read from the cache into the staging region */
};

#define POET_NO_KEEP 0xFFFFu

/* The feature cache's work in one step (docs/spec.md 6, FEATURES), armed by the protocol: filled in
 * before the step, its results after. */
typedef struct {
    /* KEEP: right after the COMPUTE of keep_node (its own stage, never a recompute) its whole
     * output is written to aux storage at keep_at. POET_NO_KEEP: none. */
    uint16_t keep_node;
    uint32_t keep_at;
    /* STAGE: before the first instruction, stage_n samples are read into the staging region
     * `stage`, sample r's stage_row bytes into row r from the aux offset that row's first 4 bytes
     * hold (the protocol puts it there: the row is the only RAM it needs). 0: none. */
    uint16_t stage_n;
    uint32_t stage_row;
    uint8_t *stage;
    /* results: whether each ran (its record is in the trace), whether the read succeeded, their
     * ticks, and the instruction the write followed */
    uint8_t read_done, read_ok, write_done;
    uint16_t write_after;
    uint32_t read_ticks, write_ticks;
} poet_cache_t;

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
    poet_cache_t *cache;    /* the feature cache's reads and writes this step, or NULL (none) */
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
 * of its trace record the schedule and the model do not already say (poet_trace_record). n_records
 * counts the instructions run and the cache's records (buf->cache), which keep their own ticks. */
void poet_interp_step(const poet_model_t *m, const uint8_t *schedule, const poet_buffers_t *buf,
                      float lr, uint32_t *ticks, poet_step_result_t *res);

/* Instruction i's trace record, rebuilt from the schedule and model it ran with and its ticks: 4
 * bytes a record in RAM rather than 16, so a buffer that held 254 records holds 1019 (and schedules
 * twice as long fit the MCUs at the same RAM). */
void poet_trace_record(const poet_model_t *m, const uint8_t *schedule, uint16_t i, uint32_t ticks,
                       poet_trace_t *r);

#endif
