/* A pager over NOR flash with 4 KB erase sectors behind a word-aligned DMA engine (the nRF52840
 * QSPI peripheral and the DK's MX25R6435F; any SPI NOR with a 4 KB sector erase fits).
 *
 * NOR programming can only clear bits, so a sector must be erased before it is written again; a
 * page-out that covers part of a sector reads the sector into one static 4 KB buffer, merges the
 * tensor's bytes, erases and programs the whole sector back. The same buffer bounces transfers
 * the DMA cannot do directly (addresses, RAM pointers or lengths not multiples of 4). RAM cost:
 * 4096 bytes, nothing else. */
#ifndef POET_NOR_PAGER_H
#define POET_NOR_PAGER_H

#include <stdint.h>

#define NOR_SECTOR 4096u

typedef struct {
    void *ctx;
    /* addr, the RAM pointer and n are all multiples of 4; n <= NOR_SECTOR. 0 on success. */
    int (*read)(void *ctx, uint32_t addr, void *dst, uint32_t n);
    int (*program)(void *ctx, uint32_t addr, const void *src, uint32_t n);
    /* Erase the 4 KB sector at addr (a multiple of NOR_SECTOR) to 0xFF. */
    int (*erase)(void *ctx, uint32_t addr);
} nor_ops_t;

typedef struct {
    const nor_ops_t *ops;
    uint32_t base;  /* flash address of the swap area, a multiple of NOR_SECTOR */
    uint32_t bytes; /* its size */
} nor_pager_t;

enum { NOR_OK = 0, NOR_E_RANGE = -1, NOR_E_IO = -2 };

int nor_pager_read(const nor_pager_t *p, uint32_t offset, void *dst, uint32_t n);
int nor_pager_write(const nor_pager_t *p, uint32_t offset, const void *src, uint32_t n);

#endif
