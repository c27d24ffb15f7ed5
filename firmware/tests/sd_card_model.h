/* A C model of an SD card in SPI mode, for testing firmware/drivers/sd_spi.c natively. It is
 * written from the SD Physical Layer Simplified Specification v9.00 chapter 7 ("SPI Mode"), not
 * from the driver, and is strict where the driver could be wrong: it wants the power-up clocks,
 * a right CRC on CMD0 and CMD8, the 100-400 kHz clock until initialisation is done, aligned SDSC
 * addresses, and counts anything a host should not do in protocol_errors. */
#ifndef POET_SD_CARD_MODEL_H
#define POET_SD_CARD_MODEL_H

#include <stdint.h>

#define SDM_OUT 2048u

typedef struct {
    /* configuration, set before use */
    uint8_t *mem;          /* the card's contents */
    uint32_t mem_bytes;    /* capacity, a multiple of 512 */
    int sdhc;              /* CCS = 1: block addressing; else SDSC, byte addressing */
    int v1;                /* a version 1.x card: CMD8 is an illegal command */
    uint32_t init_polls;   /* ACMD41s answered "still idle" before the card is ready; ~0u = never */
    int reject_writes;     /* answer every data block with "write error" (0x0D) */
    uint32_t ncr;          /* 0xFF bytes before R1 (N_CR, 1..8) */
    uint32_t nac;          /* 0xFF bytes before a read's start token (N_AC) */
    uint32_t busy_bytes;   /* 0x00 bytes of programming busy after a write */

    /* state */
    uint32_t hz;           /* SPI clock the host set: drives virtual time */
    uint64_t time_ns;      /* virtual time: 8 bits per byte at hz */
    int selected;
    int spi_mode;          /* entered by CMD0 with CS low */
    int idle;              /* in idle state (R1 bit 0) */
    int app;               /* the previous command was CMD55 */
    int cmd8_ok;           /* a valid CMD8 was received since CMD0 */
    uint32_t polls_left;
    uint32_t blocklen;     /* SDSC: set by CMD16; 0 until then */
    uint32_t clocks_before_cmd0; /* bytes clocked with CS high before the first CMD0 */
    uint8_t cmd[6];
    uint32_t cmd_n;
    uint8_t out[SDM_OUT];  /* bytes the card will send next */
    uint32_t out_head, out_len;
    uint32_t busy_left;
    int wr_state;          /* 0 none, 1 waiting for the start token, 2 receiving the block */
    uint32_t wr_addr, wr_n;
    uint8_t wr_buf[514];

    /* what happened, for the test to check */
    uint32_t n_cmd[64];
    uint32_t n_acmd41;
    uint32_t n_bytes;
    uint32_t protocol_errors;
} sd_model_t;

void sd_model_init(sd_model_t *m, uint8_t *mem, uint32_t mem_bytes, int sdhc);
void sd_model_select(sd_model_t *m, int on);
uint8_t sd_model_xchg(sd_model_t *m, uint8_t in);
void sd_model_set_hz(sd_model_t *m, uint32_t hz);
uint32_t sd_model_ms(const sd_model_t *m);
/* CRC7 of a command's first five bytes, computed the long-division way (independent of the
 * driver's shift loop), for checking against the spec's worked values. */
uint8_t sd_model_crc7(const uint8_t *p, uint32_t n);

#endif
