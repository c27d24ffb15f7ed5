/* port_pager_* on an SD card (see sd_pager.h): the swap area is raw sectors of the card. */
#include "sd_pager.h"

#include "../../core/port.h"
#include "../../drivers/millis.h"

/* The swap area: raw sectors from the 1 MiB mark, where partitioning tools put the first
 * partition, so the card's partition table survives (its file system does not). 32 MiB. */
#ifndef SD_FIRST_SECTOR
#define SD_FIRST_SECTOR 2048u
#endif
#ifndef SD_SECTORS
#define SD_SECTORS 65536u
#endif

static sd_card_t card;

uint32_t port_sd_ms(void *ctx)
{
    (void)ctx;
    return poet_millis();
}

/* Initialise on the first use, and again after a failure (a card inserted late). */
int port_pager_open(void)
{
    if (card.ready)
        return 0;
    return sd_init(&card, &port_sd_ops, SD_FIRST_SECTOR, SD_SECTORS) ? -1 : 0;
}

uint32_t port_pager_bytes(void)
{
    uint64_t n = (uint64_t)SD_SECTORS * 512u;
    return n > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)n;
}

int port_pager_write(uint32_t offset, const void *src, uint32_t n)
{
    return sd_pager_write(&card, offset, src, n) ? -1 : 0;
}

int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    return sd_pager_read(&card, offset, dst, n) ? -1 : 0;
}
