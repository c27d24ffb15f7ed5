/* What the harnesses share: a keep-all schedule for any parsed model, and one training step run
 * with every buffer (params, grads, batch, arena, swap) allocated at exactly the size the model
 * and schedule declare, so ASan flags the first byte any kernel or the interpreter touches beyond
 * what the validators accepted. */
#ifndef POET_FUZZ_COMMON_H
#define POET_FUZZ_COMMON_H

#include <stdint.h>

#include "../core/model.h"

/* Largest arena + params + grads + batch the harnesses execute: bigger accepted inputs are only
 * validated, since a step's time grows with its tensors and libFuzzer needs many runs a second. */
#define FUZZ_EXEC_BYTES (64u * 1024u)

/* Write the keep-all schedule (compute every node in order at packed offsets, then free every
 * tensor) for m into out (cap bytes). Returns its length, or 0 if it does not fit. *arena gets
 * the arena it needs. */
uint32_t fuzz_keep_all(const poet_model_t *m, uint8_t *out, uint32_t cap, uint32_t *arena);

/* Run one step of the validated schedule sched on m; returns the step status, or -1 when the
 * buffers would exceed FUZZ_EXEC_BYTES (not run). */
int fuzz_step(const poet_model_t *m, const uint8_t *sched);

#endif
