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

/* The core writes one whole frame per call; a malformed reply is a firmware bug, so abort and
 * let libFuzzer keep the input. */
void port_write(const uint8_t *p, size_t n)
{
    uint16_t len;
    if (n < 8 || p[0] != POET_SYNC) {
        fprintf(stderr, "fuzz_port: reply of %zu bytes is not a frame\n", n);
        abort();
    }
    len = poet_rd16(p + 2);
    if (len > POET_FRAME_MAX || n != 8u + len ||
        poet_crc32(0, p + 1, 3u + len) != poet_rd32(p + 4 + len)) {
        fprintf(stderr, "fuzz_port: malformed reply frame (type 0x%02x, len %u, %zu bytes)\n", p[1],
                len, n);
        abort();
    }
    if (p[1] == POET_MSG_DONE)
        steps++;
}

uint32_t port_ticks(void) { return ticks++; }
uint32_t port_tick_hz(void) { return 1000000u; }

/* The validated model bounds every pager access to the swap area Σ bytes; no harness-side
 * clipping, so an access outside it is reported, not hidden. */
int port_pager_open(void) { return 0; }

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
uint32_t port_flash_bytes(void) { return 0; }
uint8_t *port_pool(void) { return pool.bytes; }
uint32_t port_pool_bytes(void) { return POET_FUZZ_POOL; }
void port_idle(void) {}
