/* SD card in SPI mode, modelled byte by byte from the SD Physical Layer Simplified Specification
 * v9.00, chapter 7. Section numbers below refer to it. Only what a block driver uses is modelled:
 * CMD0, CMD8, CMD16, CMD17, CMD24, CMD55/ACMD41, CMD58, CMD59; anything else is answered with
 * the illegal-command bit, as a card does for a command it does not support (7.3.2.1). */
#include "sd_card_model.h"

#include <string.h>

#define R1_IDLE 0x01u
#define R1_CRC 0x08u
#define R1_ILLEGAL 0x04u
#define R1_ADDRESS 0x20u
#define R1_PARAM 0x40u

uint8_t sd_model_crc7(const uint8_t *p, uint32_t n)
{
    /* The message times x^7, divided by the generator 0x89 (x^7 + x^3 + 1, 4.5). */
    uint64_t msg = 0;
    int bit;
    uint32_t i;
    for (i = 0; i < n; i++)
        msg = msg << 8 | p[i];
    msg <<= 7;
    for (bit = (int)(8 * n + 6); bit >= 7; bit--)
        if (msg >> bit & 1u)
            msg ^= (uint64_t)0x89u << (bit - 7);
    return (uint8_t)(msg & 0x7Fu);
}

/* CRC16-CCITT (x^16 + x^12 + x^5 + 1, 4.5) on a data block: sent with every block a card reads
 * out, though a host with CRC off may ignore it. */
static uint16_t crc16(const uint8_t *p, uint32_t n)
{
    uint16_t crc = 0;
    uint32_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000u ? ((unsigned)crc << 1) ^ 0x1021u : (unsigned)crc << 1);
    }
    return crc;
}

void sd_model_init(sd_model_t *m, uint8_t *mem, uint32_t mem_bytes, int sdhc)
{
    memset(m, 0, sizeof *m);
    m->mem = mem;
    m->mem_bytes = mem_bytes;
    m->sdhc = sdhc;
    m->init_polls = 20;
    m->ncr = 2;
    m->nac = 10;
    m->busy_bytes = 40;
    m->hz = 400000u;
    m->idle = 1;
}

void sd_model_set_hz(sd_model_t *m, uint32_t hz) { m->hz = hz; }

uint32_t sd_model_ms(const sd_model_t *m) { return (uint32_t)(m->time_ns / 1000000u); }

static void push(sd_model_t *m, uint8_t b)
{
    if (m->out_len < SDM_OUT)
        m->out[(m->out_head + m->out_len++) % SDM_OUT] = b;
    else
        m->protocol_errors++; /* cannot happen with the sizes above; counted so a test sees it */
}

/* Every response starts N_CR bytes after the command (7.5.1.1). */
static void r1(sd_model_t *m, uint8_t v)
{
    uint32_t i;
    for (i = 0; i < m->ncr; i++)
        push(m, 0xFFu);
    push(m, v);
}

static uint8_t status(const sd_model_t *m) { return m->idle ? R1_IDLE : 0u; }

/* Byte address of a data command, or -1 after answering it with an error. */
static int64_t data_address(sd_model_t *m, uint32_t arg)
{
    uint64_t a = m->sdhc ? (uint64_t)arg * 512u : arg;
    if (!m->sdhc && m->blocklen == 0)
        m->protocol_errors++; /* SDSC: a host should fix the block length with CMD16 first */
    if (!m->sdhc && arg % 512u) {
        r1(m, R1_ADDRESS); /* misaligned for the block length (7.3.2.1) */
        return -1;
    }
    return (int64_t)a;
}

static void command(sd_model_t *m)
{
    uint8_t idx = m->cmd[0] & 0x3Fu;
    uint32_t arg = (uint32_t)m->cmd[1] << 24 | (uint32_t)m->cmd[2] << 16 | (uint32_t)m->cmd[3] << 8 | m->cmd[4];
    int crc_ok = (uint8_t)(sd_model_crc7(m->cmd, 5) << 1 | 1u) == m->cmd[5];
    int app = m->app;
    uint32_t i, ocr;
    int64_t a;

    m->n_cmd[idx]++;
    m->app = 0;
    if (!m->spi_mode) {
        /* Still in SD mode: CMD0 with CS low and a valid CRC switches to SPI (7.2.1); before the
         * 74 power-up clocks (6.4.1.1) the card is not ready to take it. */
        if (idx != 0 || !crc_ok || m->clocks_before_cmd0 < 10u) {
            m->protocol_errors++;
            return;
        }
        m->spi_mode = 1;
    }
    /* Identification runs at 100-400 kHz (4.4); the host may speed up once the card is ready. */
    if (m->idle && m->hz > 400000u)
        m->protocol_errors++;
    /* With CRC off, only CMD0 and CMD8 are still checked (7.2.2). */
    if ((idx == 0 || idx == 8) && !crc_ok) {
        r1(m, status(m) | R1_CRC);
        return;
    }
    if (m->idle && idx != 0 && idx != 1 && idx != 8 && idx != 41 && idx != 55 && idx != 58 && idx != 59) {
        r1(m, R1_IDLE | R1_ILLEGAL); /* idle state takes only these (7.2.1) */
        return;
    }
    switch (idx) {
    case 0:
        m->idle = 1;
        m->cmd8_ok = 0;
        m->polls_left = m->init_polls;
        m->blocklen = 0;
        r1(m, R1_IDLE);
        break;
    case 8: /* R7: echo of voltage supplied and check pattern (7.3.2.6) */
        if (m->v1) {
            r1(m, status(m) | R1_ILLEGAL);
            break;
        }
        m->cmd8_ok = 1;
        r1(m, status(m));
        push(m, 0x00u); /* command version 0 */
        push(m, 0x00u);
        push(m, (uint8_t)((arg >> 8 & 0xFu) == 1u ? 1u : 0u)); /* accepts 2.7-3.6 V only */
        push(m, (uint8_t)arg);
        break;
    case 55:
        m->app = 1;
        r1(m, status(m));
        break;
    case 41:
        if (!app) { /* CMD41 is only defined as ACMD41 */
            r1(m, status(m) | R1_ILLEGAL);
            break;
        }
        m->n_acmd41++;
        if (m->polls_left == ~0u) {
            /* never ready */
        } else if (m->polls_left) {
            m->polls_left--;
        } else if (m->sdhc && !(m->cmd8_ok && (arg & (1u << 30)))) {
            /* An SDHC card stays busy unless the host set HCS after a valid CMD8 (4.2.3.1). */
        } else {
            m->idle = 0;
        }
        r1(m, status(m));
        break;
    case 58: /* R3: OCR, bit 31 power-up done, bit 30 CCS (valid once bit 31 is set), 2.7-3.6 V */
        ocr = 0x00FF8000u | (m->idle ? 0u : 1u << 31) | (!m->idle && m->sdhc ? 1u << 30 : 0u);
        r1(m, status(m));
        for (i = 0; i < 4; i++)
            push(m, (uint8_t)(ocr >> (24 - 8 * i)));
        break;
    case 59:
        r1(m, status(m));
        break;
    case 16:
        /* SDHC ignores the block length (512 fixed); this SDSC model supports only 512. */
        if (!m->sdhc && arg != 512u) {
            r1(m, R1_PARAM);
            break;
        }
        if (!m->sdhc)
            m->blocklen = arg;
        r1(m, 0);
        break;
    case 17:
        if ((a = data_address(m, arg)) < 0)
            break;
        r1(m, 0);
        for (i = 0; i < m->nac; i++)
            push(m, 0xFFu);
        if ((uint64_t)a + 512u > m->mem_bytes) {
            push(m, 0x08u); /* data error token, "out of range" (7.3.3.3) */
            break;
        }
        push(m, 0xFEu);
        for (i = 0; i < 512u; i++)
            push(m, m->mem[a + i]);
        push(m, (uint8_t)(crc16(m->mem + a, 512u) >> 8));
        push(m, (uint8_t)crc16(m->mem + a, 512u));
        break;
    case 24:
        if ((a = data_address(m, arg)) < 0)
            break;
        if ((uint64_t)a + 512u > m->mem_bytes) {
            r1(m, R1_PARAM);
            break;
        }
        r1(m, 0);
        m->wr_state = 1;
        m->wr_addr = (uint32_t)a;
        m->wr_n = 0;
        break;
    default:
        r1(m, status(m) | R1_ILLEGAL);
        break;
    }
}

void sd_model_select(sd_model_t *m, int on)
{
    if (!on && m->selected) {
        /* CS high releases DO: a pending response is dropped; programming goes on (7.5.2.2). */
        if (m->wr_state || m->cmd_n)
            m->protocol_errors++;
        m->out_len = 0;
        m->cmd_n = 0;
        m->wr_state = 0;
    }
    m->selected = on;
}

uint8_t sd_model_xchg(sd_model_t *m, uint8_t in)
{
    uint8_t out;
    m->n_bytes++;
    m->time_ns += 8000000000ull / (m->hz ? m->hz : 1u);
    if (!m->selected) {
        if (!m->spi_mode)
            m->clocks_before_cmd0++;
        if (m->busy_left)
            m->busy_left--;
        return 0xFFu;
    }
    if (m->wr_state == 2) { /* the data block and its CRC16 */
        m->wr_buf[m->wr_n++] = in;
        if (m->wr_n == 514u) {
            m->wr_state = 0;
            if (m->reject_writes) {
                push(m, 0x0Du); /* data response "write error" (7.3.3.1) */
            } else {
                memcpy(m->mem + m->wr_addr, m->wr_buf, 512u);
                push(m, 0x05u); /* "data accepted" */
            }
            m->busy_left = m->busy_bytes;
        }
        return 0xFFu;
    }
    if (m->out_len) {
        out = m->out[m->out_head];
        m->out_head = (m->out_head + 1u) % SDM_OUT;
        m->out_len--;
        if (in != 0xFFu)
            m->protocol_errors++; /* the host talked over the card's response */
        return out;
    }
    if (m->busy_left) {
        m->busy_left--;
        if (in != 0xFFu)
            m->protocol_errors++;
        return 0x00u;
    }
    if (m->wr_state == 1) { /* waiting for the start block token; 0xFF is filler (N_WR) */
        if (in == 0xFEu)
            m->wr_state = 2;
        else if (in != 0xFFu)
            m->protocol_errors++;
        return 0xFFu;
    }
    if (m->cmd_n || (in & 0xC0u) == 0x40u) {
        m->cmd[m->cmd_n++] = in;
        if (m->cmd_n == 6u) {
            m->cmd_n = 0;
            command(m);
        }
    } else if (in != 0xFFu) {
        m->protocol_errors++;
    }
    return 0xFFu;
}
