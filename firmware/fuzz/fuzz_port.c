/* Port stub for the fuzz harnesses (see fuzz_port.h). */
#include "fuzz_port.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/port.h"
#include "../core/protocol.h"
#include "../core/util.h"

static const uint8_t *in_p;
static size_t in_len, in_pos;
static unsigned steps;
static uint8_t *swap;
static uint32_t swap_len;
static uint32_t ticks;
static uint8_t out_frame[2u * POET_PACKET_MAX]; /* the reply frame being written, COBS-encoded */
static size_t out_len;
static int marked; /* the op marker's level (port_mark) */

static union {
    double align;
    uint8_t bytes[POET_FUZZ_POOL];
} pool;

void fuzz_port_feed(const uint8_t *p, size_t len)
{
    in_p = p;
    in_len = len;
    in_pos = 0;
    steps = 0;
    out_len = 0;
}

void fuzz_port_close(void) { in_pos = in_len; }

unsigned fuzz_port_steps(void) { return steps; }

void fuzz_port_swap(uint8_t *area, uint32_t swap_bytes)
{
    swap = area;
    swap_len = swap_bytes;
}

int port_getc(void)
{
    /* Every STEP runs the same code; more of them per input only make the input slower. */
    if (in_pos >= in_len || steps >= POET_FUZZ_MAX_STEPS)
        return -1;
    return in_p[in_pos++];
}

/* The core writes a frame in pieces (COBS blocks); at each 0x00 the frame collected so far is
 * decoded and checked. A malformed reply is a firmware bug: abort and let libFuzzer keep the input. */
static void check_reply(void)
{
    uint8_t packet[POET_PACKET_MAX];
    size_t i = 0, n = 0;
    while (i < out_len) {
        uint8_t code = out_frame[i];
        if (code == 0 || i + code > out_len || n + code - 1u > sizeof packet) {
            fprintf(stderr, "fuzz_port: reply of %zu bytes is not a COBS frame\n", out_len);
            abort();
        }
        memcpy(packet + n, out_frame + i + 1, code - 1u);
        n += code - 1u;
        i += code;
        if (code != 0xFF && i < out_len) {
            if (n == sizeof packet)
                abort();
            packet[n++] = 0;
        }
    }
    if (n < 6 || poet_crc32(0, packet, n - 4) != poet_rd32(packet + n - 4)) {
        fprintf(stderr, "fuzz_port: malformed reply frame (%zu bytes)\n", n);
        abort();
    }
    if (packet[0] == POET_MSG_DONE)
        steps++;
}

void port_write(const uint8_t *p, size_t n)
{
    size_t k;
    /* Replies go out between steps: a marker still high here is a pulse no op ends, which would
     * shift every later op's energy onto the wrong record. */
    if (marked) {
        fprintf(stderr, "fuzz_port: op marker still high while replying\n");
        abort();
    }
    for (k = 0; k < n; k++) {
        if (p[k] == 0) {
            check_reply();
            out_len = 0;
        } else if (out_len < sizeof out_frame) {
            out_frame[out_len++] = p[k];
        } else {
            fprintf(stderr, "fuzz_port: reply longer than any frame\n");
            abort();
        }
    }
}

uint32_t port_ticks(void) { return ticks++; }
uint32_t port_tick_hz(void) { return 1000000u; }

/* Strictly alternating, as a meter counting pulses per record needs. */
void port_mark(int running)
{
    if ((running != 0) == marked) {
        fprintf(stderr, "fuzz_port: op marker driven %s twice in a row\n", running ? "high" : "low");
        abort();
    }
    marked = running != 0;
}

/* The validated model bounds every pager access to the swap area Σ bytes; no harness-side
 * clipping, so an access outside it is reported, not hidden. */
int port_pager_open(void) { return 0; }

/* The harness's aux storage is its swap buffer: a feature cache the protocol accepts lies inside it. */
uint32_t port_pager_bytes(void) { return swap ? swap_len : 0u; }

int port_pager_write(uint32_t offset, const void *src, uint32_t n)
{
    if (!swap)
        return -1;
    if ((uint64_t)offset + n > swap_len) {
        fprintf(stderr, "fuzz_port: page-out of %u bytes at %u past the swap area (%u)\n", n, offset,
                swap_len);
        abort();
    }
    memcpy(swap + offset, src, n);
    return 0;
}

int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    if (!swap)
        return -1;
    if ((uint64_t)offset + n > swap_len) {
        fprintf(stderr, "fuzz_port: page-in of %u bytes at %u past the swap area (%u)\n", n, offset,
                swap_len);
        abort();
    }
    memcpy(dst, swap + offset, n);
    return 0;
}

const char *port_board(void) { return "fuzz"; }
uint32_t port_ram_bytes(void) { return POET_FUZZ_POOL; }
uint8_t *port_pool(void) { return pool.bytes; }
uint32_t port_pool_bytes(void) { return POET_FUZZ_POOL; }
void port_idle(void) {}
