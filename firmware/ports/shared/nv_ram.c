/* nv storage (port.h) for the stand-ins whose "flash" is RAM: the QEMU boards, whose flash region
 * is the machine's writable SSRAM or DRAM, and the Linux runtime. It behaves as NOR flash does, so
 * a core that broke the write contract would fail here as on a board: a page reads 0xFF after
 * erase, and programming can only clear bits (a word programmed twice without an erase between
 * ends up as the AND of both).
 *
 * The region: NV_BYTES (a static array, Linux) or the linker script's __nv_start/__nv_end (the
 * boards: the same addresses and size as the real board's NV region). NV_ERASE_BYTES is the real
 * board's erase unit (nRF52840 page 4096, SAMD21 row 256). */
#include <stdint.h>
#include <string.h>

#include "../../core/port.h"

#ifndef NV_ERASE_BYTES
#define NV_ERASE_BYTES 4096u
#endif

#ifdef NV_BYTES
/* On Linux the array is read-only except while port_nv_write programs it, as flash is to the CPU's
 * stores on a board: a kernel that wrote through a pointer into nv storage (a frozen tensor, a
 * running statistic) faults here instead of passing on the stand-in and failing on silicon. */
#if defined(__linux__)
#include <sys/mman.h>
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
#if defined(__linux__)
/* Only the pages a write touches change protection (the whole array, tens of MiB, once): changing
 * the whole array's for every chunk made each upload several times slower. */
static int nv_protect(uint32_t off, uint32_t n, int prot)
{
    static int locked;
    uintptr_t lo, hi;
    if (!locked) {
        if (mprotect(nv_array.bytes, NV_BYTES, PROT_READ))
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
#else
#define NV_PROTECT(off, n, prot) 0
extern uint8_t __nv_start[], __nv_end[];
#define NV_BASE (__nv_start)
#define NV_SIZE ((uint32_t)(__nv_end - __nv_start))
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
