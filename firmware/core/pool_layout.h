/* The pool's regions before the arena (docs/spec.md 6 and 7), one computation for the protocol
 * server (protocol.c) and the device API (device.c); host/poet/plan/cost/memory.py Pool is its twin. */
#ifndef POET_POOL_LAYOUT_H
#define POET_POOL_LAYOUT_H

#include <stdint.h>

#include "model.h"

/* Byte offsets from the pool's first byte, each region 8-aligned: the model's tables, the trained
 * parameters (then the state ones), their gradients (none when the model updates in backward), the
 * optimizer state (a step counter, then opt_words floats per trained element; none for plain SGD),
 * the staged batch (the inputs, fp32 or int8 padded to a word, then an i32 label per sample), the
 * stream buffer of weights read from aux storage; then what only the device API keeps: the snapshot
 * of parameters and optimizer state a diverged step is undone from, and the instructions' ticks. */
typedef struct {
    uint32_t params, grads, opt, batch, labels, stream, snapshot, ticks, arena;
    uint32_t params_bytes, grads_bytes, opt_bytes, batch_bytes;
    uint64_t fixed; /* bytes before the arena, summed without wrapping (a model may ask for > 4 GiB) */
} poet_layout_t;

/* The layout of model m, whose tables take `tables` bytes, with a snapshot (snapshot != 0) and
 * room for n_ticks instruction ticks. Offsets are meaningful only when fixed fits the pool. */
void poet_layout(const poet_model_t *m, uint32_t tables, int snapshot, uint32_t n_ticks, poet_layout_t *l);

#endif
