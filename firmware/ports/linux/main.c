/* Native Linux port: the protocol on stdin/stdout (binary), the pager in ./poet-swap.bin.
 * Used for fast differential tests against the Python reference and under sanitizers. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "../../core/port.h"
#include "../../core/protocol.h"

#ifndef POOL_BYTES
#define POOL_BYTES (4u * 1024u * 1024u)
#endif

static union {
    double align;
    uint8_t bytes[POOL_BYTES];
} pool;
static uint8_t inbuf[4096];
static size_t in_len, in_pos;
static FILE *swap;

int port_getc(void)
{
    if (in_pos == in_len) {
        ssize_t n;
        do
            n = read(0, inbuf, sizeof inbuf);
        while (n < 0);
        if (n == 0)
            return -1;
        in_len = (size_t)n;
        in_pos = 0;
    }
    return inbuf[in_pos++];
}

void port_write(const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

uint32_t port_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
}

uint32_t port_tick_hz(void) { return 1000000000u; }

int port_pager_open(void)
{
    if (!swap)
        swap = fopen("poet-swap.bin", "w+b");
    return swap ? 0 : -1;
}

int port_pager_write(uint32_t offset, const void *src, uint32_t n)
{
    if (port_pager_open() || fseek(swap, (long)offset, SEEK_SET) || fwrite(src, 1, n, swap) != n)
        return -1;
    return fflush(swap) ? -1 : 0;
}

int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    if (port_pager_open() || fseek(swap, (long)offset, SEEK_SET) || fread(dst, 1, n, swap) != n)
        return -1;
    return 0;
}

/* One runtime serves every Linux board (RPi 4, Jetson, this host): it says which one it stands for. */
static const char *board = "linux";
const char *port_board(void) { return board; }
uint32_t port_ram_bytes(void) { return POOL_BYTES; }
uint32_t port_flash_bytes(void) { return 0; }
uint8_t *port_pool(void) { return pool.bytes; }
uint32_t port_pool_bytes(void) { return POOL_BYTES; }
void port_idle(void) {}

/* usage: poet [BOARD]  (the name HELLO reports; default "linux") */
int main(int argc, char **argv)
{
    if (argc > 1)
        board = argv[1];
    poet_run();
    if (swap)
        fclose(swap);
    return 0;
}
