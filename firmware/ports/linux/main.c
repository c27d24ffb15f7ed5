/* Native Linux port: the protocol on stdin/stdout (binary), or on a pseudo-terminal the host opens
 * like any serial port (--pty); the pager in ./poet-swap.bin. Used on the RPi 4 and Jetson, for fast
 * differential tests against the Python reference, and under sanitizers. */
#define _XOPEN_SOURCE 600

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static int in_fd = 0, out_fd = 1, on_pty;

int port_getc(void)
{
    if (in_pos == in_len) {
        ssize_t n;
        for (;;) {
            n = read(in_fd, inbuf, sizeof inbuf);
            if (n > 0)
                break;
            if (n == 0 && !on_pty)
                return -1;
            if (on_pty && (n == 0 || errno == EIO)) {
                /* nobody has the terminal open (the host closed it: a pulled cable): like a board,
                 * keep everything loaded and wait for the next connection */
                struct timespec ts = {0, 20000000L};
                nanosleep(&ts, 0);
                continue;
            }
            if (errno != EINTR && errno != EAGAIN)
                return -1;
        }
        in_len = (size_t)n;
        in_pos = 0;
    }
    return inbuf[in_pos++];
}

void port_write(const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(out_fd, p, n);
        if (w <= 0)
            return; /* no reader: the reply is lost, as on a board whose cable was pulled */
        p += w;
        n -= (size_t)w;
    }
}

/* The master side of a new pseudo-terminal; its slave's path goes to stdout for the host to open. */
static int open_pty(void)
{
    int fd = posix_openpt(O_RDWR | O_NOCTTY);
    if (fd < 0 || grantpt(fd) || unlockpt(fd) || !ptsname(fd)) {
        fprintf(stderr, "poet: cannot make a pseudo-terminal: %s\n", strerror(errno));
        exit(1);
    }
    printf("%s\n", ptsname(fd));
    fflush(stdout);
    return fd;
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

/* usage: poet [BOARD] [--pty]  (BOARD: the name HELLO reports, default "linux"; --pty: serve the
 * link on a new pseudo-terminal, printing its path, until killed) */
int main(int argc, char **argv)
{
    int i;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pty"))
            on_pty = 1;
        else
            board = argv[i];
    }
    if (on_pty)
        in_fd = out_fd = open_pty();
    poet_run();
    if (swap)
        fclose(swap);
    return 0;
}
