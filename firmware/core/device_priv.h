/* The device API's private state (poet.h's poet_device_t, opened), shared by its files: device.c
 * (init, step, predict), device_state.c (save, restore), device_samples.c (the sample store). */
#ifndef POET_DEVICE_PRIV_H
#define POET_DEVICE_PRIV_H

#include <stdint.h>
#include <string.h>

#include "interp.h"
#include "model.h"
#include "poet.h"
#include "pool_layout.h"
#include "util.h"

typedef struct {
    const uint8_t *bundle;
    uint8_t *pool;
    poet_model_t model;
    poet_layout_t lay;
    const uint8_t *sched[2]; /* training, forward */
    const float *frozen;
    float lr;
    uint32_t sgd_step;       /* the step count when the optimizer keeps no state (plain SGD); the
                              * optimizer node counts it, as it counts Adam's in its state */
    uint32_t out_elems;      /* floats of the output per sample */
    uint16_t out_node;
    uint16_t n_ticks;        /* the last run's */
    uint8_t needs_pager, ready;
    uint8_t snapshot; /* the pool keeps one (bundle flag): a diverged step is undone */
    uint8_t broken;   /* weights turned non-finite with no snapshot: only restore or init go on */
} device_t;

/* C99's static assertion: the private state fits the storage poet.h gives it. */
typedef char poet_device_fits[sizeof(device_t) <= sizeof(poet_device_t) ? 1 : -1];

static inline device_t *priv(poet_device_t *d) { return (device_t *)(void *)d; }
static inline const device_t *cpriv(const poet_device_t *d) { return (const device_t *)(const void *)d; }

/* Where the step count lives: the optimizer state's first word, or sgd_step. */
uint32_t *poet_dev_opt_step(device_t *d);

/* One training step on the batch already staged in the pool (inputs and labels), undone from the
 * snapshot when it fails or diverges. */
int poet_dev_step_staged(device_t *d, poet_step_info_t *info);

/* Elements off..off+n of sample i's inputs into the staging region, from fp32 x: as they are, or
 * quantised with the input's fixed scale (element-wise, so a sample may come in pieces). */
void poet_dev_stage_part(device_t *d, uint32_t i, uint32_t off, uint32_t n, const float *x);

#endif
