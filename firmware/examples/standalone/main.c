/* A device that trains itself: the standalone example built from a `poet export` folder. No host,
 * no serial protocol: it collects samples (here from sensor.bin, through semihosting, standing in for
 * a sensor) into a sample store, fine-tunes for POET_APP_EPOCHS epochs saving after each, and reports
 * its accuracy on test.bin computed on the device with predict. After a reset or a power cut it
 * restores the last save and goes on from the epoch that save ended; a run that finished restores,
 * trains no more, and reports the same accuracy.
 *
 * Files (QEMU's working directory): sensor.bin and test.bin, records of [i32 label][fp32 inputs];
 * poet-state.bin and poet-samples.bin, the stand-in's flash for the saves and the samples (made when
 * missing); weights.bin, the trained weights as the device has them (fp32, param-table order). */
#include <stdint.h>

#include "bundle.h"
#include "poet.h"
#include "port.h"
#include "semihost_files.h"

#ifndef POET_APP_EPOCHS
#define POET_APP_EPOCHS 3u
#endif
#ifndef POET_APP_SEED
#define POET_APP_SEED 0u
#endif
#ifndef POET_APP_X_FLOATS
#define POET_APP_X_FLOATS 4096u /* the largest predict group's inputs; at least one sample's */
#endif
#define SAMPLES_BYTES (1u << 20)

static poet_device_t dev;
static union {
    uint64_t align;
    uint8_t bytes[POET_BUNDLE_POOL_BYTES];
} pool;
static float x[POET_APP_X_FLOATS];
static float out[POET_APP_X_FLOATS];

static void fail(const char *what, int status)
{
    sh_print("poet standalone: ");
    sh_print(what);
    sh_print(" failed, status ");
    sh_print_u32((uint32_t)status);
    sh_print("\n");
    sh_exit(1);
}

static void line(const char *a, uint32_t v, const char *b)
{
    sh_print(a);
    sh_print_u32(v);
    sh_print(b);
}

/* FNV-1a of the trained weights: what the log says a save and a restore hold. */
static uint32_t weights_fnv(void)
{
    uint32_t nw, i, h = 2166136261u;
    const uint8_t *w = (const uint8_t *)poet_weights(&dev, &nw);
    for (i = 0; i < 4u * nw; i++)
        h = (h ^ w[i]) * 16777619u;
    return h;
}

/* Record k of a samples file: its label and inputs into x. 0 when there is one. */
static int record(int fd, uint32_t k, uint32_t in, int32_t *label)
{
    uint32_t size = 4u + 4u * in;
    return sh_read(fd, k * size, label, 4) == 0 && sh_read(fd, k * size + 4u, x, 4u * in) == 0;
}

int main(void)
{
    poet_store_t state, store, probe = {0, 0, 0, 0, 0, 0};
    poet_samples_t samples;
    poet_epoch_info_t e;
    uint32_t in, outs, batch, per_epoch, epoch, k, correct = 0, total = 0, group;
    int32_t label, labels[64];
    int fd, status;

    port_init();
    status = poet_init(&dev, poet_bundle, poet_bundle_bytes, pool.bytes, sizeof pool.bytes);
    if (status != POET_OK)
        fail("init", status);
    in = poet_input_elems(&dev);
    outs = poet_output_elems(&dev);
    batch = poet_batch(&dev);
    if (in > POET_APP_X_FLOATS || outs > POET_APP_X_FLOATS)
        fail("a sample larger than POET_APP_X_FLOATS:", (int)in);
    probe.erase_bytes = 4096u; /* the stand-in flash's page, as sh_store gives it */
    if (sh_store(&state, "poet-state.bin", poet_state_bytes(&dev, &probe)) != 0 ||
        sh_store(&store, "poet-samples.bin", SAMPLES_BYTES) != 0)
        fail("opening the stores", 0);
    status = poet_restore(&dev, &state);
    if (status == POET_OK) {
        line("restored the save after step ", poet_steps(&dev), "");
        line(", weights ", weights_fnv(), "\n");
    }
    else if (status != POET_E_NO_STATE)
        fail("restore", status);
    status = poet_samples_open(&samples, &dev, &store);
    if (status != POET_OK)
        fail("opening the samples", status);
    if (samples.count == 0) { /* a first boot: collect what the sensor gives */
        fd = sh_open("sensor.bin", "rb");
        for (k = 0; fd >= 0 && record(fd, k, in, &label); k++) {
            status = poet_samples_add(&samples, x, label);
            if (status != POET_OK)
                fail("storing a sample", status);
        }
        line("collected ", samples.count, " samples\n");
    }
    per_epoch = samples.count / batch;
    if (per_epoch == 0)
        fail("training: fewer samples than a batch", (int)samples.count);
    for (epoch = poet_steps(&dev) / per_epoch; epoch < POET_APP_EPOCHS; epoch++) {
        status = poet_train_epoch(&dev, &samples, POET_APP_SEED, epoch, &e);
        if (status != POET_OK)
            fail("training", status);
        status = poet_save(&dev, &state);
        if (status != POET_OK)
            fail("save", status);
        line("epoch ", epoch + 1u, "");
        line("/", POET_APP_EPOCHS, ": ");
        line("", e.steps, " steps");
        line(" (", e.diverged, " undone), mean loss x1e4 ");
        line("", (uint32_t)(e.mean_loss * 1e4f), ", ");
        line("", (uint32_t)(e.ticks / 1000u), " kticks; saved step ");
        line("", poet_steps(&dev), "");
        line(", weights ", weights_fnv(), "\n");
    }
    /* accuracy on the device: predict in groups, argmax against the label */
    group = POET_APP_X_FLOATS / in < batch ? POET_APP_X_FLOATS / in : batch;
    group = group > 64u ? 64u : group;
    if (outs * group > POET_APP_X_FLOATS)
        group = POET_APP_X_FLOATS / outs;
    fd = sh_open("test.bin", "rb");
    for (k = 0; fd >= 0;) {
        uint32_t n = 0, i, j;
        static float staged[POET_APP_X_FLOATS];
        while (n < group && record(fd, k + n, in, &labels[n])) {
            for (j = 0; j < in; j++)
                staged[n * in + j] = x[j];
            n++;
        }
        if (n == 0)
            break;
        status = poet_predict(&dev, staged, n, out);
        if (status != POET_OK)
            fail("predict", status);
        for (i = 0; i < n; i++) {
            uint32_t best = 0;
            for (j = 1; j < outs; j++)
                if (out[i * outs + j] > out[i * outs + best])
                    best = j;
            correct += (int32_t)best == labels[i];
        }
        total += n;
        k += n;
    }
    line("accuracy on the device: ", correct, "");
    line("/", total, "\n");
    {
        uint32_t nw;
        const float *w = poet_weights(&dev, &nw);
        fd = sh_open("weights.bin", "w+b");
        if (fd < 0 || sh_write(fd, 0, w, 4u * nw) != 0)
            fail("writing weights.bin", 0);
    }
    sh_exit(0);
    return 0;
}
