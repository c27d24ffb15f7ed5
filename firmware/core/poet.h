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

/* Statuses: status.h. The API's own are POET_E_BUNDLE (40), POET_E_DIVERGED (41), POET_E_NO_STATE
 * (42) and POET_E_STORE (43); the schedule validator's codes reach the application too (a bundle's
 * schedule refused at init returns the validator's code). */

/* Non-volatile storage the application gives poet, by byte offset: for the saved state (poet_save,
 * poet_restore) and for collected samples (poet_samples_*). Flash semantics: erase sets whole units
 * of erase_bytes to 0xFF; write programs bytes that are erased (offsets and sizes multiples of 4).
 * A store that writes in place (a file, FRAM, an SD card) says erase_bytes 4 and may make erase a
 * write of 0xFF. Each function returns 0 on success. ctx is the application's. */
typedef struct poet_store {
    uint32_t bytes;
    uint32_t erase_bytes;
    int (*read)(const struct poet_store *s, uint32_t off, void *dst, uint32_t n);
    int (*write)(const struct poet_store *s, uint32_t off, const void *src, uint32_t n);
    int (*erase)(const struct poet_store *s, uint32_t off, uint32_t n);
    void *ctx;
} poet_store_t;

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
 * NULL. POET_E_DIVERGED: the loss or the weights were not finite. A loss that is not finite stops
 * the step before any update, so nothing changed. Weights that turn non-finite are undone from the
 * pool's snapshot when the bundle has one (poet_has_snapshot; poet export gives it one when --ram
 * holds it); without one the device refuses every call but poet_restore and poet_init until one of
 * them brings whole weights back, so a damaged state is never trained on, predicted with or saved.
 * x and labels are copied into the pool's staging region (quantised there for an input staged int8)
 * before anything runs, and the step reads its input there in place, as its input tensor, for the
 * whole step (docs/spec.md section 1): the caller's buffers may change once the call returns, and
 * nothing may write the pool while it runs (no other call on the device from an interrupt). */
int poet_train_step(poet_device_t *dev, const float *x, const int32_t *labels, poet_step_info_t *info);

/* The model's output for n samples (x: n x input_elems floats; out: n x output_elems floats), with
 * the weights as trained so far, in evaluation mode (batch norms with their running statistics, no
 * dropout). Changes no weight. Each group of up to poet_batch samples is staged as poet_train_step
 * stages a batch, and read there. */
int poet_predict(poet_device_t *dev, const float *x, uint32_t n, float *out);

/* Save the trained weights, the optimizer state and the step count (docs/spec.md 7): two slots,
 * each written whole (erase, payload, then its header with the checksums) over the older one, so a
 * reset or power cut at any moment leaves the last complete save readable. The store needs
 * poet_state_bytes of room. */
int poet_save(poet_device_t *dev, const poet_store_t *store);

/* Load the newest complete save of this model (a damaged or partial slot is passed over). On any
 * failure the device's state is as it was: POET_E_NO_STATE when no slot holds a whole save of
 * this model, POET_E_STORE when the store fails. */
int poet_restore(poet_device_t *dev, const poet_store_t *store);

/* The store bytes poet_save needs for this model: two slots, each a whole number of erase units. */
uint32_t poet_state_bytes(const poet_device_t *dev, const poet_store_t *store);

/* The samples a device collects (a sensor's readings and their labels), appended to a store of
 * their own: each record its label, a CRC and its fp32 inputs; an erased record ends them. A record
 * torn by a power cut is passed over (up to POET_SAMPLES_MAX_TORN of them; clear the store past
 * that). Fine-tuning visits its data more than once: poet_train_epoch. */
#define POET_SAMPLES_MAX_TORN 8
typedef struct {
    const poet_store_t *store;
    uint32_t record_bytes;   /* 8 + 4 x input elems */
    uint32_t count;          /* whole samples */
    uint32_t next;           /* the record the next sample goes to */
    uint32_t n_torn;
    uint32_t torn[POET_SAMPLES_MAX_TORN];
    uint32_t classes;        /* labels must be below it (0xFFFFFFFF: any) */
} poet_samples_t;

/* Find the samples already in store (after a reset, they are all still there). */
int poet_samples_open(poet_samples_t *s, const poet_device_t *dev, const poet_store_t *store);
/* Append one sample: input_elems floats and its label. POET_E_STORE when the store is full. */
int poet_samples_add(poet_samples_t *s, const float *x, int32_t label);
/* Sample i (0 <= i < count) into x and *label. */
int poet_samples_get(const poet_samples_t *s, uint32_t i, float *x, int32_t *label);
/* Erase every sample. */
int poet_samples_clear(poet_samples_t *s);

typedef struct {
    uint32_t steps;          /* steps that ran: count / batch (a last partial batch is left out) */
    uint32_t diverged;       /* of them, undone (POET_E_DIVERGED) */
    float mean_loss;         /* over the steps that were kept */
    uint64_t ticks;          /* their duration, in ticks of tick_hz */
} poet_epoch_info_t;

/* One epoch over the samples: full batches in an order fixed by (seed, epoch) alone (a permutation
 * the host computes alike: poet.export.order), each a training step. A diverged step that changed
 * nothing (or was undone from the snapshot) is counted and the epoch goes on; one that left the
 * weights non-finite with no snapshot, or any other failure, stops it with that status. */
/* Each step's samples are read from the store into the pool's staging region, the step's input. */
int poet_train_epoch(poet_device_t *dev, const poet_samples_t *s, uint32_t seed, uint32_t epoch,
                     poet_epoch_info_t *info);

/* Sample index k of epoch `epoch`'s order over n samples (a bijection of 0..n-1). */
uint32_t poet_epoch_order(uint32_t n, uint32_t seed, uint32_t epoch, uint32_t k);

/* 1 when the pool keeps a snapshot that undoes a diverged step (the bundle's flags, docs/spec.md 7). */
int poet_has_snapshot(const poet_device_t *dev);

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
