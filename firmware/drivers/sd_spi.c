/* SD card in SPI mode: block driver and raw-sector pager. Section numbers below are from the SD
 * Physical Layer Simplified Specification v9.00 (SD Association), chapter 7 "SPI Mode" unless
 * stated otherwise. */
#include "sd_spi.h"

#include <string.h>

#define CMD0 0u   /* GO_IDLE_STATE */
#define CMD8 8u   /* SEND_IF_COND */
#define CMD16 16u /* SET_BLOCKLEN */
#define CMD17 17u /* READ_SINGLE_BLOCK */
#define CMD24 24u /* WRITE_BLOCK */
#define CMD41 41u /* SD_SEND_OP_COND, as ACMD41 */
#define CMD55 55u /* APP_CMD */
#define CMD58 58u /* READ_OCR */

#define R1_IDLE 0x01u
#define R1_ILLEGAL 0x04u
#define R1_STILL_BUSY 0xFEu /* not a card's R1 (bit 7 set): our own "never got to send it" */
#define TOKEN_START 0xFEu    /* start block token for CMD17/CMD24 (7.3.3.2) */
#define DATA_RESP_MASK 0x1Fu /* data response token xxx0sss1 (7.3.3.1) */
#define DATA_ACCEPTED 0x05u

/* Timeouts the spec states (4.2.3, 4.6.2): ACMD41 initialisation may take up to 1 s; a read's
 * start token comes within 100 ms; a write's busy lasts at most 250 ms (SDSC/SDHC) or 500 ms
 * (SDXC), so we allow the larger. The try and byte caps are backstops in case the ms tick stalls,
 * so no loop here can run forever. */
#define INIT_TIMEOUT_MS 1000u
#define READ_TIMEOUT_MS 100u
#define BUSY_TIMEOUT_MS 500u
#define CMD0_TRIES 10u
#define ACMD41_TRIES 4000u
#define POLL_BYTES_MAX (1u << 20)
#define NCR_MAX 10u /* R1 comes after at most 8 bytes of N_CR (7.5.4, timing table); 2 spare */
#define IO_RETRIES 3u
#define INIT_HZ 400000u      /* identification mode clock: 100-400 kHz (4.4) */
#define FAST_HZ 25000000u    /* default speed mode, 25 MHz (4.4); the port caps it at its SPI's limit */

/* The read-modify-write buffer for partial sectors: the only RAM this driver keeps. */
static uint8_t sector_buf[SD_SECTOR];

/* CRC7 with polynomial x^7 + x^3 + 1 (4.5). Only CMD0 and CMD8 are checked by the card in SPI
 * mode (7.2.2), but sending a right CRC everywhere costs nothing and keeps a card with CRC on
 * (CMD59) working. */
static uint8_t crc7(const uint8_t *p, uint32_t n)
{
    uint8_t crc = 0;
    uint32_t i;
    int b;
    for (i = 0; i < n; i++) {
        uint8_t d = p[i];
        for (b = 0; b < 8; b++) {
            crc = (uint8_t)(crc << 1);
            if ((d ^ crc) & 0x80u)
                crc ^= 0x09u;
            d = (uint8_t)(d << 1);
        }
    }
    return (uint8_t)(crc & 0x7Fu);
}

static uint8_t xchg(const sd_card_t *c, uint8_t b) { return c->ops->xchg(c->ops->ctx, b); }

static void xchg_buf(const sd_card_t *c, const uint8_t *tx, uint8_t *rx, uint32_t n)
{
    uint32_t i;
    if (c->ops->xchg_buf) {
        c->ops->xchg_buf(c->ops->ctx, tx, rx, n);
        return;
    }
    for (i = 0; i < n; i++) {
        uint8_t r = xchg(c, tx ? tx[i] : 0xFFu);
        if (rx)
            rx[i] = r;
    }
}

static uint32_t ms(const sd_card_t *c) { return c->ops->ms(c->ops->ctx); }

static void select_card(const sd_card_t *c) { c->ops->select(c->ops->ctx, 1); }

/* One more byte after CS goes high lets the card release DO (7.5.1.1 and figure 7-2), so the next
 * transaction (or another device on the bus) sees a clean line. */
static void deselect(const sd_card_t *c)
{
    c->ops->select(c->ops->ctx, 0);
    (void)xchg(c, 0xFFu);
}

/* Poll with 0xFF until the card sends something other than `idle`; returns that byte, or `idle`
 * once the timeout (or the backstop byte count) runs out. */
static uint8_t wait_not(const sd_card_t *c, uint8_t idle, uint32_t timeout_ms)
{
    uint32_t t0 = ms(c), n;
    for (n = 0; n < POLL_BYTES_MAX; n++) {
        uint8_t b = xchg(c, 0xFFu);
        if (b != idle)
            return b;
        if (ms(c) - t0 >= timeout_ms)
            break;
    }
    return idle;
}

/* Send a command frame (7.3.1.1) and return R1, or 0xFF if the card never answered. */
static uint8_t command(const sd_card_t *c, uint8_t cmd, uint32_t arg)
{
    uint8_t f[6];
    uint32_t i;
    f[0] = (uint8_t)(0x40u | cmd);
    f[1] = (uint8_t)(arg >> 24);
    f[2] = (uint8_t)(arg >> 16);
    f[3] = (uint8_t)(arg >> 8);
    f[4] = (uint8_t)arg;
    f[5] = (uint8_t)((crc7(f, 5) << 1) | 1u);
    /* A card still programming the last block holds DO low; a command sent now would be lost,
     * and the busy bytes would read as R1 = 0 (7.5.2.2). Also gives the gap byte some cards want
     * between CS low and the command. */
    if (wait_not(c, 0x00u, BUSY_TIMEOUT_MS) == 0x00u)
        return R1_STILL_BUSY;
    for (i = 0; i < 6; i++)
        (void)xchg(c, f[i]);
    for (i = 0; i < NCR_MAX; i++) {
        uint8_t r = xchg(c, 0xFFu);
        if (!(r & 0x80u))
            return r;
    }
    return 0xFFu;
}

/* A whole command transaction with R1 only. */
static uint8_t command_r1(const sd_card_t *c, uint8_t cmd, uint32_t arg)
{
    uint8_t r;
    select_card(c);
    r = command(c, cmd, arg);
    deselect(c);
    return r;
}

/* CMD55 then the app command (7.3.1.3: ACMDs are preceded by APP_CMD). */
static uint8_t app_command(const sd_card_t *c, uint8_t cmd, uint32_t arg)
{
    uint8_t r = command_r1(c, CMD55, 0);
    if (r & (uint8_t)~R1_IDLE)
        return r;
    return command_r1(c, cmd, arg);
}

/* R3/R7: R1 and four more bytes, big-endian (7.3.2.4, 7.3.2.6). */
static uint8_t command_r7(const sd_card_t *c, uint8_t cmd, uint32_t arg, uint32_t *tail)
{
    uint8_t r, b[4];
    select_card(c);
    r = command(c, cmd, arg);
    if (!(r & 0x80u) && !(r & R1_ILLEGAL)) {
        xchg_buf(c, 0, b, 4);
        *tail = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    }
    deselect(c);
    return r;
}

int sd_init(sd_card_t *c, const sd_spi_ops_t *ops, uint32_t first_sector, uint32_t n_sectors)
{
    uint32_t i, t0, r7 = 0, ocr = 0, hcs = 0;
    uint8_t r = 0xFFu;

    c->ops = ops;
    c->first_sector = first_sector;
    c->n_sectors = n_sectors;
    c->block_addr = 0;
    c->ready = 0;
    if (ops->set_hz)
        ops->set_hz(ops->ctx, INIT_HZ);

    /* Power-up: at least 74 clocks with CS high before the first command (6.4.1.1). */
    ops->select(ops->ctx, 0);
    for (i = 0; i < 10; i++)
        (void)xchg(c, 0xFFu);

    for (i = 0; i < CMD0_TRIES && r != R1_IDLE; i++)
        r = command_r1(c, CMD0, 0);
    if (r != R1_IDLE)
        return SD_E_NO_IDLE;

    /* CMD8: 2.7-3.6 V (VHS = 1) and check pattern 0xAA (7.3.1.3, 4.3.13). A version 1.x card
     * calls it illegal; it is then SDSC and must not be asked for HCS. */
    r = command_r7(c, CMD8, 0x1AAu, &r7);
    if (r == R1_IDLE) {
        if ((r7 & 0xFFFu) != 0x1AAu)
            return SD_E_CMD8;
        hcs = 1u << 30;
    } else if (r != (R1_IDLE | R1_ILLEGAL)) {
        return SD_E_CMD8;
    }

    t0 = ms(c);
    r = R1_IDLE;
    for (i = 0; i < ACMD41_TRIES && r == R1_IDLE && ms(c) - t0 < INIT_TIMEOUT_MS; i++)
        r = app_command(c, CMD41, hcs);
    if (r != 0)
        return r == R1_IDLE ? SD_E_INIT_TIMEOUT : SD_E_NO_IDLE;

    /* OCR bit 31: power-up done; bit 30 (CCS): SDHC/SDXC, block addressed (5.1, 7.2.1). */
    r = command_r7(c, CMD58, 0, &ocr);
    if (r != 0 || !(ocr & (1u << 31)))
        return SD_E_OCR;
    c->block_addr = hcs && (ocr & (1u << 30)) ? 1u : 0u;

    /* SDSC reads and writes in units of the block length, which CMD16 fixes at 512 (7.2.3). */
    if (!c->block_addr && command_r1(c, CMD16, SD_SECTOR) != 0)
        return SD_E_BLOCKLEN;

    if (ops->set_hz)
        ops->set_hz(ops->ctx, FAST_HZ);
    c->ready = 1;
    return SD_OK;
}

static uint32_t card_addr(const sd_card_t *c, uint32_t lba) { return c->block_addr ? lba : lba * SD_SECTOR; }

static int read_once(const sd_card_t *c, uint32_t lba, uint8_t *dst)
{
    int err = SD_OK;
    uint8_t r;
    select_card(c);
    if ((r = command(c, CMD17, card_addr(c, lba))) != 0) {
        err = r == R1_STILL_BUSY ? SD_E_BUSY : SD_E_CMD;
    } else if (wait_not(c, 0xFFu, READ_TIMEOUT_MS) != TOKEN_START) {
        err = SD_E_TOKEN; /* still 0xFF: timeout; 000xxxxx: a data error token (7.3.3.3) */
    } else {
        xchg_buf(c, 0, dst, SD_SECTOR);
        xchg_buf(c, 0, 0, 2); /* CRC16, not checked: CRC is off in SPI mode by default (7.2.2) */
    }
    deselect(c);
    return err;
}

static int write_once(const sd_card_t *c, uint32_t lba, const uint8_t *src)
{
    int err = SD_OK;
    uint32_t i;
    uint8_t resp = 0xFFu, r;
    select_card(c);
    if ((r = command(c, CMD24, card_addr(c, lba))) != 0) {
        deselect(c);
        return r == R1_STILL_BUSY ? SD_E_BUSY : SD_E_CMD;
    }
    (void)xchg(c, 0xFFu); /* N_WR: at least one byte before the start token (7.5.2.2) */
    (void)xchg(c, TOKEN_START);
    xchg_buf(c, src, 0, SD_SECTOR);
    (void)xchg(c, 0xFFu); /* CRC16, ignored by the card with CRC off */
    (void)xchg(c, 0xFFu);
    for (i = 0; i < NCR_MAX && resp == 0xFFu; i++)
        resp = xchg(c, 0xFFu);
    if ((resp & DATA_RESP_MASK) != DATA_ACCEPTED)
        err = SD_E_WRITE;
    /* Busy: DO held low while the card programs; also after a rejected block (7.5.2.2). */
    if (wait_not(c, 0x00u, BUSY_TIMEOUT_MS) == 0x00u && err == SD_OK)
        err = SD_E_BUSY;
    deselect(c);
    return err;
}

/* A sector transfer is retried a bounded number of times: a glitch on a long SPI wire is common,
 * a card that fails three times in a row is not going to recover mid-step. */
int sd_read_sector(sd_card_t *c, uint32_t lba, uint8_t *dst)
{
    uint32_t i;
    int err = SD_E_NOT_READY;
    for (i = 0; c->ready && i < IO_RETRIES; i++)
        if ((err = read_once(c, lba, dst)) == SD_OK)
            break;
    return err;
}

int sd_write_sector(sd_card_t *c, uint32_t lba, const uint8_t *src)
{
    uint32_t i;
    int err = SD_E_NOT_READY;
    for (i = 0; c->ready && i < IO_RETRIES; i++)
        if ((err = write_once(c, lba, src)) == SD_OK)
            break;
    return err;
}

static int in_range(const sd_card_t *c, uint32_t offset, uint32_t n)
{
    return (uint64_t)offset + n <= (uint64_t)c->n_sectors * SD_SECTOR;
}

int sd_pager_read(sd_card_t *c, uint32_t offset, void *dst, uint32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    int err;
    if (!in_range(c, offset, n))
        return SD_E_RANGE;
    while (n) {
        uint32_t lba = c->first_sector + offset / SD_SECTOR, at = offset % SD_SECTOR;
        uint32_t k = SD_SECTOR - at < n ? SD_SECTOR - at : n;
        if (k == SD_SECTOR) {
            err = sd_read_sector(c, lba, d); /* whole sector: straight into the tensor */
        } else {
            err = sd_read_sector(c, lba, sector_buf);
            if (err == SD_OK)
                memcpy(d, sector_buf + at, k);
        }
        if (err)
            return err;
        d += k;
        offset += k;
        n -= k;
    }
    return SD_OK;
}

int sd_pager_write(sd_card_t *c, uint32_t offset, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    int err;
    if (!in_range(c, offset, n))
        return SD_E_RANGE;
    while (n) {
        uint32_t lba = c->first_sector + offset / SD_SECTOR, at = offset % SD_SECTOR;
        uint32_t k = SD_SECTOR - at < n ? SD_SECTOR - at : n;
        if (k == SD_SECTOR) {
            err = sd_write_sector(c, lba, s);
        } else {
            /* Partial sector: keep the neighbours' bytes (other tensors live there). */
            err = sd_read_sector(c, lba, sector_buf);
            if (err == SD_OK) {
                memcpy(sector_buf + at, s, k);
                err = sd_write_sector(c, lba, sector_buf);
            }
        }
        if (err)
            return err;
        s += k;
        offset += k;
        n -= k;
    }
    return SD_OK;
}
