/* NOR flash pager: byte ranges of the swap area onto 4 KB-erase flash through a DMA engine that
 * moves only whole, aligned 32-bit words. See nor_pager.h for the RAM cost. */
#include "nor_pager.h"

#include <string.h>

/* Sector image for read-modify-write, and bounce buffer for unaligned transfers. Word-aligned
 * because the DMA requires it (nRF52840 PS v1.7, QSPI chapter, READ.DST/WRITE.SRC: word aligned). */
static uint32_t sector_words[NOR_SECTOR / 4u];
#define SECTOR_BUF ((uint8_t *)sector_words)

static int aligned(uint32_t a, const void *p, uint32_t n) { return ((a | (uint32_t)(uintptr_t)p | n) & 3u) == 0; }

static int in_range(const nor_pager_t *p, uint32_t offset, uint32_t n) { return (uint64_t)offset + n <= p->bytes; }

int nor_pager_read(const nor_pager_t *p, uint32_t offset, void *dst, uint32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    if (!in_range(p, offset, n))
        return NOR_E_RANGE;
    while (n) {
        uint32_t addr = p->base + offset, k;
        if (aligned(addr, d, n & ~3u ? 4u : n)) {
            /* Straight into the tensor: as many whole words as we have, a sector at a time. */
            k = (n & ~3u) < NOR_SECTOR ? (n & ~3u) : NOR_SECTOR;
            if (k && p->ops->read(p->ops->ctx, addr, d, k))
                return NOR_E_IO;
        } else {
            k = 0;
        }
        if (!k) {
            /* Bounce: read the aligned words that cover the next piece, copy out the bytes. */
            uint32_t a0 = addr & ~3u, skip = addr - a0;
            uint32_t span = (skip + n + 3u) & ~3u;
            if (span > NOR_SECTOR)
                span = NOR_SECTOR;
            k = span - skip < n ? span - skip : n;
            if (p->ops->read(p->ops->ctx, a0, SECTOR_BUF, span))
                return NOR_E_IO;
            memcpy(d, SECTOR_BUF + skip, k);
        }
        d += k;
        offset += k;
        n -= k;
    }
    return NOR_OK;
}

int nor_pager_write(const nor_pager_t *p, uint32_t offset, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    if (!in_range(p, offset, n) || p->base % NOR_SECTOR)
        return NOR_E_RANGE;
    while (n) {
        uint32_t addr = p->base + offset, sec = addr & ~(NOR_SECTOR - 1u), at = addr - sec;
        uint32_t k = NOR_SECTOR - at < n ? NOR_SECTOR - at : n;
        const uint8_t *image = SECTOR_BUF;
        if (k == NOR_SECTOR) {
            if (aligned(0, s, 0))
                image = s; /* a whole, aligned sector: program straight from the tensor */
            else
                memcpy(SECTOR_BUF, s, NOR_SECTOR);
        } else {
            /* Part of a sector: its other bytes belong to other tensors and must survive the erase. */
            if (p->ops->read(p->ops->ctx, sec, SECTOR_BUF, NOR_SECTOR))
                return NOR_E_IO;
            memcpy(SECTOR_BUF + at, s, k);
        }
        if (p->ops->erase(p->ops->ctx, sec) || p->ops->program(p->ops->ctx, sec, image, NOR_SECTOR))
            return NOR_E_IO;
        s += k;
        offset += k;
        n -= k;
    }
    return NOR_OK;
}
