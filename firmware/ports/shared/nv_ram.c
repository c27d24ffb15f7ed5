/* nv storage (port.h) for the stand-ins whose "flash" is RAM: the QEMU boards, whose flash region
 * is the machine's writable SSRAM or DRAM, and the Linux runtime. It behaves as NOR flash does, so
 * a core that broke the write contract would fail here as on a board: a page reads 0xFF after
 * erase, and programming can only clear bits (a word programmed twice without an erase between
 * ends up as the AND of both).
 *
 * The region: NV_BYTES (a static array: the fuzz harnesses), mapped at start-up by nv_ram_map (the
 * Linux runtime, sized by its command line: ports/linux/main.c), or the linker script's
 * __nv_start/__nv_end (the boards: the same addresses and size as the real board's NV region).
 * NV_ERASE_BYTES is the real board's erase unit (nRF52840 page 4096, SAMD21 row 256). */
#if defined(__linux__)
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#endif
#include "nv_ram.h"

#include <stdint.h>
#include <string.h>

#include "../../core/port.h"

#ifndef NV_ERASE_BYTES
#define NV_ERASE_BYTES 4096u
#endif

#if defined(__linux__)
#include <sys/mman.h>
#endif

#ifdef NV_BYTES
#if defined(__linux__)
#define NV_ALIGN __attribute__((aligned(4096)))
#else
#define NV_ALIGN
#endif
static union {
    uint64_t align;
    uint8_t bytes[NV_BYTES];
} nv_array NV_ALIGN;
#define NV_BASE (nv_array.bytes)
#define NV_SIZE ((uint32_t)(NV_BYTES))
#elif defined(__linux__)
static uint8_t *nv_base;
static uint32_t nv_size;
#define NV_BASE (nv_base)
#define NV_SIZE (nv_size)

int nv_ram_map(uint32_t bytes)
{
    /* read-only from the start, as flash is to the CPU's stores; untouched pages cost no memory */
    void *p = mmap(0, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    nv_base = (uint8_t *)p;
    nv_size = bytes;
    return 0;
}
#else
extern uint8_t __nv_start[], __nv_end[];
#define NV_BASE (__nv_start)
#define NV_SIZE ((uint32_t)(__nv_end - __nv_start))
#endif

#if defined(__linux__)
/* On Linux the region is read-only except while port_nv_write programs it, as flash is to the CPU's
 * stores on a board: a kernel that wrote through a pointer into nv storage (a frozen tensor, a
 * running statistic) faults here instead of passing on the stand-in and failing on silicon. Only
 * the pages a write touches change protection (the whole region, tens of MiB, once): changing the
 * whole region's for every chunk made each upload several times slower. */
static int nv_protect(uint32_t off, uint32_t n, int prot)
{
    static int locked;
    uintptr_t lo, hi;
    if (!locked) {
        if (mprotect(NV_BASE, NV_SIZE, PROT_READ))
            return 1;
        locked = 1;
    }
    lo = (uintptr_t)(NV_BASE + off) & ~(uintptr_t)4095u;
    hi = ((uintptr_t)(NV_BASE + off + n) + 4095u) & ~(uintptr_t)4095u;
    return hi > lo && mprotect((void *)lo, hi - lo, prot) != 0;
}
#define NV_PROTECT(off, n, prot) nv_protect((off), (n), (prot))
#else
#define NV_PROTECT(off, n, prot) 0
#endif

const uint8_t *port_nv(void) { return NV_BASE; }
uint32_t port_nv_bytes(void) { return NV_SIZE; }

int port_nv_write(uint32_t off, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    uint32_t i;
    if (off > NV_SIZE || n > NV_SIZE - off || (off & 3u) || (n & 3u))
        return 1;
    if (NV_PROTECT(off, n, PROT_READ | PROT_WRITE))
        return 1;
    for (i = 0; i < n; i++) {
        if ((off + i) % NV_ERASE_BYTES == 0)
            memset(NV_BASE + off + i, 0xFF, NV_ERASE_BYTES <= NV_SIZE - (off + i) ? NV_ERASE_BYTES : NV_SIZE - (off + i));
        NV_BASE[off + i] &= s[i];
    }
    return NV_PROTECT(off, n, PROT_READ) != 0;
}
