/* The pager of the QEMU stand-ins: a file in QEMU's working directory (poet-swap.bin) reached by
 * semihosting, the emulated SD card. An existing file is kept, as a card keeps its sectors: the aux
 * weights a host wrote onto it (as a card reader would) are verified, not uploaded again. The calls and their argument blocks are the same on Arm and RISC-V (both follow
 * Arm's semihosting specification); only the trap differs, so each port supplies port_semihost(). */
#include <stdint.h>

#include "../../core/port.h"
#include "semihost.h"

static int swap_fd = -1;

int port_pager_open(void)
{
    static const char name[] = "poet-swap.bin";
    uint32_t args[3];
    if (swap_fd >= 0)
        return 0;
    args[0] = (uint32_t)(uintptr_t)name;
    args[1] = 3u; /* "r+b": the card as it is */
    args[2] = sizeof name - 1u;
    swap_fd = port_semihost(SEMIHOST_SYS_OPEN, args);
    if (swap_fd < 0) {
        args[1] = 7u; /* "w+b": no card image yet */
        swap_fd = port_semihost(SEMIHOST_SYS_OPEN, args);
    }
    return swap_fd >= 0 ? 0 : -1;
}

static int seek(uint32_t offset)
{
    uint32_t args[2];
    args[0] = (uint32_t)swap_fd;
    args[1] = offset;
    return port_semihost(SEMIHOST_SYS_SEEK, args); /* 0 on success */
}

/* SYS_WRITE and SYS_READ take the same arguments and return the bytes not moved. */
static int transfer(uint32_t op, uint32_t offset, uintptr_t buf, uint32_t n)
{
    uint32_t args[3];
    if (port_pager_open() || seek(offset))
        return -1;
    args[0] = (uint32_t)swap_fd;
    args[1] = (uint32_t)buf;
    args[2] = n;
    return port_semihost(op, args) == 0 ? 0 : -1;
}

/* a file on the host: it grows as it is written, to what 32-bit offsets address */
uint32_t port_pager_bytes(void) { return 0xFFFFFFFFu; }

int port_pager_write(uint32_t offset, const void *src, uint32_t n)
{
    return transfer(SEMIHOST_SYS_WRITE, offset, (uintptr_t)src, n);
}

int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    return transfer(SEMIHOST_SYS_READ, offset, (uintptr_t)dst, n);
}
