/* SD card in SPI mode as a raw block device, and a pager over it (no file system).
 *
 * Follows the SD Physical Layer Simplified Specification (v9.00), chapter 7 "SPI Mode". The driver
 * touches hardware only through sd_spi_ops_t, so the same code runs against the board's SPI
 * master and against the C card model in firmware/tests/sd_card_model.c. No dynamic allocation:
 * the pager's partial-sector read-modify-write uses one static 512-byte buffer. */
#ifndef POET_SD_SPI_H
#define POET_SD_SPI_H

#include <stdint.h>

#define SD_SECTOR 512u

typedef struct {
    void *ctx;
    /* Drive the card's chip select: 1 selects (CS low), 0 deselects. */
    void (*select)(void *ctx, int on);
    /* Clock one byte out and return the byte clocked in at the same time. */
    uint8_t (*xchg)(void *ctx, uint8_t out);
    /* Clock n bytes: tx == 0 sends 0xFF each byte, rx == 0 discards what comes in. A port with
     * DMA moves a whole data block here; NULL falls back to xchg one byte at a time. */
    void (*xchg_buf)(void *ctx, const uint8_t *tx, uint8_t *rx, uint32_t n);
    /* Free-running millisecond counter (wraps), for the timeouts the spec states in ms. */
    uint32_t (*ms)(void *ctx);
    /* SPI clock: the card must be initialised at 100-400 kHz (spec 4.4 / 7.2.1), then may go
     * faster (25 MHz default speed). NULL if the port has a single speed. */
    void (*set_hz)(void *ctx, uint32_t hz);
} sd_spi_ops_t;

typedef struct {
    const sd_spi_ops_t *ops;
    uint32_t first_sector; /* the swap area starts here, in 512-byte sectors */
    uint32_t n_sectors;    /* and is this long; accesses past it fail with SD_E_RANGE */
    uint8_t block_addr;    /* 1: SDHC/SDXC (CCS=1), addresses are sector numbers; 0: SDSC, bytes */
    uint8_t ready;
} sd_card_t;

/* Every failure is a distinct negative value, so a test (or a debugger) can tell them apart;
 * the core only needs "nonzero" and reports POET_E_PAGER. */
enum {
    SD_OK = 0,
    SD_E_NO_IDLE = -1,     /* CMD0 never answered with R1 = idle */
    SD_E_CMD8 = -2,        /* CMD8 echo wrong or voltage not accepted */
    SD_E_INIT_TIMEOUT = -3,/* ACMD41 kept the card in idle past the 1 s the spec allows */
    SD_E_OCR = -4,         /* CMD58 failed or power-up status bit clear */
    SD_E_BLOCKLEN = -5,    /* CMD16 rejected */
    SD_E_CMD = -6,         /* R1 with an error bit for CMD17/CMD24 */
    SD_E_TOKEN = -7,       /* no start-block token within the read timeout, or an error token */
    SD_E_WRITE = -8,       /* data response other than "accepted" */
    SD_E_BUSY = -9,        /* card stayed busy past the write timeout */
    SD_E_RANGE = -10,      /* access outside the swap area */
    SD_E_NOT_READY = -11   /* block access before a successful sd_init */
};

/* Initialise the card (power-up clocks, CMD0, CMD8, ACMD41 with HCS, CMD58, CMD16 on SDSC).
 * first_sector/n_sectors place the swap area on the card. */
int sd_init(sd_card_t *c, const sd_spi_ops_t *ops, uint32_t first_sector, uint32_t n_sectors);

/* One 512-byte sector, lba relative to the start of the card. */
int sd_read_sector(sd_card_t *c, uint32_t lba, uint8_t *dst);
int sd_write_sector(sd_card_t *c, uint32_t lba, const uint8_t *src);

/* Byte ranges of the swap area (the port_pager_* contract in core/port.h). */
int sd_pager_read(sd_card_t *c, uint32_t offset, void *dst, uint32_t n);
int sd_pager_write(sd_card_t *c, uint32_t offset, const void *src, uint32_t n);

#endif
