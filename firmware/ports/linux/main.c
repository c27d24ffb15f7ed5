/* Native Linux port: the protocol on stdin/stdout (binary), or on a pseudo-terminal the host opens
 * like any serial port (--pty); the pager in ./poet-swap.bin. Used on the RPi 4 and Jetson, for fast
 * differential tests against the Python reference, and under sanitizers. The op marker has no pin
 * here: with POET_MARK_LOG=<file> its edges are appended to that file instead, one "<level> <ticks>"
 * line each, which is how tests watch it.
 *
 * The pool and the nv storage are mapped once, before the link starts, and never again, as a
 * microcontroller's are static arrays; only their sizes come later, from the command line (--pool,
 * --nv), since one image serves boards of 1 to 8 GB: poet passes the request's --ram as the pool, and
 * boards/<board>.yaml says how much a board may give. */
#define _XOPEN_SOURCE 600
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../core/port.h"
#include "../../core/protocol.h"
#include "../shared/nv_ram.h"

/* Without --pool / --nv: 4 MiB of pool and 64 MiB of nv storage (port.mk). */
#ifndef POOL_BYTES
#error "POOL_BYTES (the default pool) comes from ports/linux/port.mk"
#endif
#ifndef NV_DEFAULT_BYTES
#error "NV_DEFAULT_BYTES (the default nv storage) comes from ports/linux/port.mk"
#endif

static uint8_t inbuf[4096];
static size_t in_len, in_pos;
static FILE *swap;
static int in_fd = 0, out_fd = 1, on_pty;
static FILE *mark_log;         /* POET_MARK_LOG, or none */
static char mark_buf[1 << 16]; /* its stdio buffer: static, so an edge never allocates */
static uint32_t mark_rise;     /* a rising edge's ticks, written out with its fall (port_mark) */
static int mark_pending;

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

static void mark_flush(void);

void port_write(const uint8_t *p, size_t n)
{
    mark_flush(); /* a host holding a step's DONE finds all of that step's edges in the file */
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

/* Every edge becomes one line, in call order; only a rise's write waits (until the next edge or
 * flush), so the formatting lands between ops rather than between the rise and the op's first tick,
 * and the logged pulse spans its record's ticks within a couple of clock reads. */
void port_mark(int running)
{
    uint32_t t;
    if (!mark_log)
        return;
    t = port_ticks();
    if (mark_pending)
        fprintf(mark_log, "1 %" PRIu32 "\n", mark_rise);
    mark_pending = running != 0;
    if (running)
        mark_rise = t;
    else
        fprintf(mark_log, "0 %" PRIu32 "\n", t);
}

static void mark_flush(void)
{
    if (!mark_log)
        return;
    if (mark_pending)
        fprintf(mark_log, "1 %" PRIu32 "\n", mark_rise);
    mark_pending = 0;
    fflush(mark_log);
}

static void mark_open(void)
{
    const char *path = getenv("POET_MARK_LOG");
    if (!path || !*path)
        return;
    mark_log = fopen(path, "a");
    if (!mark_log || setvbuf(mark_log, mark_buf, _IOFBF, sizeof mark_buf)) {
        fprintf(stderr, "poet: cannot write the op marker log POET_MARK_LOG=%s: %s\n", path, strerror(errno));
        exit(1);
    }
}

int port_pager_open(void)
{
    if (swap)
        return 0;
    swap = fopen("poet-swap.bin", "r+b"); /* kept, as a card keeps its sectors (semihost_pager.c) */
    if (!swap)
        swap = fopen("poet-swap.bin", "w+b");
    /* unbuffered: a card image the host rewrote (a card reader's write) is read as it is now */
    if (swap && setvbuf(swap, 0, _IONBF, 0) != 0) {
        fclose(swap);
        swap = 0;
    }
    return swap ? 0 : -1;
}

/* a file: it grows as it is written, to what 32-bit offsets address */
uint32_t port_pager_bytes(void) { return 0xFFFFFFFFu; }

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
uint32_t port_ram_bytes(void) { return port_pool_bytes(); } /* the pool is the limit, not the host's RAM */
void port_idle(void) {}

static uint8_t *pool;
static uint32_t pool_bytes;
uint8_t *port_pool(void) { return pool; }
uint32_t port_pool_bytes(void) { return pool_bytes; }

/* BOARD: the name HELLO reports (default "linux"); --pty: serve the link on a new pseudo-terminal,
 * printing its path, until killed; --pool, --nv: the sizes of the pool and the nv storage. */
static const char usage[] = "usage: poet [BOARD] [--pty] [--pool SIZE] [--nv SIZE]";

/* A size as poet's command line writes one: bytes, or whole KiB, MiB or GiB (64m). The protocol
 * reports sizes in 32 bits, so a pool or nv store of 4 GiB or more cannot be described to the host. */
static int parse_size(const char *s, uint32_t *out)
{
    unsigned long long v = 0, scale = 1;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return 1;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10u + (unsigned)(*p - '0');
        if (v > 0xFFFFFFFFull)
            return 1;
    }
    if (*p == 'k' || *p == 'K')
        scale = 1ull << 10;
    else if (*p == 'm' || *p == 'M')
        scale = 1ull << 20;
    else if (*p == 'g' || *p == 'G')
        scale = 1ull << 30;
    if (scale > 1)
        p++;
    if (*p || v == 0 || v * scale > 0xFFFFFFFFull)
        return 1;
    *out = (uint32_t)(v * scale);
    return 0;
}

/* The value of a size option, or exit 2 in one line saying what was wrong. */
static uint32_t size_arg(int argc, char **argv, int *i)
{
    uint32_t v;
    const char *opt = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "poet: %s needs a size (bytes, or with k, m or g: 64m); %s\n", opt, usage);
        exit(2);
    }
    ++*i;
    if (parse_size(argv[*i], &v)) {
        fprintf(stderr, "poet: %s %s: not a size from 1 byte to 4 GiB - 1 (bytes, or with k, m or g: 64m)\n", opt,
                argv[*i]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int i;
    uint32_t nv_bytes = NV_DEFAULT_BYTES;
    void *p;
    pool_bytes = POOL_BYTES;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s\n  SIZE: bytes, or with k, m or g (KiB, MiB, GiB), less than 4 GiB; default --pool %" PRIu32
                   " --nv %" PRIu32 "\n", usage, (uint32_t)POOL_BYTES, (uint32_t)NV_DEFAULT_BYTES);
            return 0;
        } else if (!strcmp(argv[i], "--pty"))
            on_pty = 1;
        else if (!strcmp(argv[i], "--pool"))
            pool_bytes = size_arg(argc, argv, &i);
        else if (!strcmp(argv[i], "--nv"))
            nv_bytes = size_arg(argc, argv, &i);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "poet: unknown option %s; %s\n", argv[i], usage);
            return 2;
        } else
            board = argv[i];
    }
    /* Both mapped now, once: nothing is allocated after the link starts. Untouched pages cost nothing,
     * so a pool bigger than a step uses is free until used; one the system cannot give at all is
     * refused here (mmap: the address space limit, or the kernel's overcommit check), not mid-step. */
    p = mmap(0, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "poet: cannot allocate a pool of %" PRIu32 " bytes (--pool): %s; give a smaller one\n",
                pool_bytes, strerror(errno));
        return 1;
    }
    pool = (uint8_t *)p;
    if (nv_ram_map(nv_bytes)) {
        fprintf(stderr, "poet: cannot allocate %" PRIu32 " bytes of nv storage (--nv): %s; give a smaller one\n",
                nv_bytes, strerror(errno));
        return 1;
    }
    /* a host that goes away mid-reply (a resent request answered twice, a closed cable) must not kill
     * the runtime: write() then fails with EPIPE and port_write drops the reply, as its comment says */
    signal(SIGPIPE, SIG_IGN);
    mark_open();
    if (on_pty)
        in_fd = out_fd = open_pty();
    poet_run();
    if (swap)
        fclose(swap);
    if (mark_log) {
        mark_flush();
        fclose(mark_log);
    }
    return 0;
}
