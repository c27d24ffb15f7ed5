/* poet.h: a device that trains itself. The public API of an exported build (`poet export`): train
 * and predict from a bundle (docs/spec.md section 7) in a RAM pool the application gives, with no
 * host attached. C99; includable from C++ (an Arduino sketch). No dynamic allocation: everything the
 * runtime keeps is in the pool and in the poet_device_t the application declares.
 *
 *     static poet_device_t dev;
 *     static uint8_t pool[POET_BUNDLE_POOL_BYTES];            (bundle.h, written by poet export)
 *     if (poet_init(&dev, poet_bundle, poet_bundle_bytes, pool, sizeof pool) != POET_OK) ...
 *     poet_train_step(&dev, x, labels, &info);                 (batch samples from your buffers)
 *     poet_predict(&dev, x, n, out);                           (forward only, eval mode)
 */
#ifndef POET_H
#define POET_H

#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Statuses besides status.h's (the schedule validator's and the link's codes also reach the
 * application: a bundle's schedule refused at init returns the validator's code). */
enum {
    POET_E_BUNDLE = 40,   /* not a bundle this runtime reads, or its sections out of place */
    POET_E_DIVERGED = 41  /* the step's loss or weights were not finite: undone, nothing changed */
};

/* The runtime's state: declare one (static storage is fine) and hand it to every call. Its fields
 * are private: storage sized for a 64-bit host, enough for any 32-bit board. */
typedef struct {
    uint64_t opaque[48];
} poet_device_t;

typedef struct {
    float loss;            /* the step's loss */
    uint32_t step;         /* optimizer steps taken, this one included */
    uint32_t ticks;        /* the step's duration, in ticks of tick_hz a second */
    uint32_t tick_hz;
    uint32_t peak_bytes;   /* the arena's peak of resident bytes */
    uint16_t n_instr;      /* instructions run; poet_instr_ticks gives each one's ticks */
} poet_step_info_t;

/* Validate the bundle (read in place: it must stay where it is, in flash or RAM) and lay out the
 * pool (8-aligned, at least the bundle's pool_bytes: POET_BUNDLE_POOL_BYTES in bundle.h). Loads
 * the initial weights; the step count starts at 0. */
int poet_init(poet_device_t *dev, const void *bundle, uint32_t bundle_bytes, void *pool, uint32_t pool_bytes);

/* The pool a bundle needs, from its header alone; 0 when it is not a bundle. */
uint32_t poet_bundle_pool_bytes(const void *bundle, uint32_t bundle_bytes);

/* Samples per training step, fp32 inputs per sample, floats predict writes per sample. */
uint32_t poet_batch(const poet_device_t *dev);
uint32_t poet_input_elems(const poet_device_t *dev);
uint32_t poet_output_elems(const poet_device_t *dev);

/* One training step on poet_batch samples: x holds batch x input_elems floats (NCHW per sample as
 * the model was traced), labels batch class indices (NULL for a loss without classes). info may be
 * NULL. POET_E_DIVERGED: the weights are as they were before the call. */
int poet_train_step(poet_device_t *dev, const float *x, const int32_t *labels, poet_step_info_t *info);

/* The model's output for n samples (x: n x input_elems floats; out: n x output_elems floats), with
 * the weights as trained so far, in evaluation mode (batch norms with their running statistics, no
 * dropout). Changes no weight. */
int poet_predict(poet_device_t *dev, const float *x, uint32_t n, float *out);

/* Optimizer steps taken since init. */
uint32_t poet_steps(const poet_device_t *dev);

/* The last run's (step or predict) per-instruction ticks, *n of them: the energy account's input. */
const uint32_t *poet_instr_ticks(const poet_device_t *dev, uint16_t *n);

/* The trained and state parameters in the model's param-table order, fp32 (docs/spec.md 3). */
const float *poet_weights(const poet_device_t *dev, uint32_t *n_floats);

#ifdef __cplusplus
}
#endif

#endif
