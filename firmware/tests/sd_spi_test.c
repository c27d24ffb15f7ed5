/* Native test of firmware/drivers/sd_spi.c against the SD card model (sd_card_model.c): init of
 * SDHC, SDSC and version 1.x cards, the pager's unaligned byte ranges over raw sectors with the
 * neighbouring bytes preserved, and the error paths. Prints one line per failed check and a
 * final "PASS"/"FAIL" line; exits nonzero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drivers/sd_spi.h"
#include "sd_card_model.h"

#define CARD_BYTES (64u * 1024u)
#define FIRST_SECTOR 8u
#define SWAP_SECTORS 64u

static int checks, failures;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            failures++;                                                                  \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
        }                                                                                \
    } while (0)

static sd_model_t model;
static uint8_t card[CARD_BYTES], ref[CARD_BYTES];
static int absent; /* no card in the slot: MISO pulled up, every byte reads 0xFF */

static void op_select(void *ctx, int on) { sd_model_select((sd_model_t *)ctx, on); }
static uint8_t op_xchg(void *ctx, uint8_t b) { return absent ? 0xFFu : sd_model_xchg((sd_model_t *)ctx, b); }
static uint32_t op_ms(void *ctx) { return sd_model_ms((sd_model_t *)ctx); }
/* Like a board's SPI master: capped at 8 MHz (the nRF52840 SPIM's top rate for SPIM0-2). */
static void op_set_hz(void *ctx, uint32_t hz) { sd_model_set_hz((sd_model_t *)ctx, hz > 8000000u ? 8000000u : hz); }
static void op_xchg_buf(void *ctx, const uint8_t *tx, uint8_t *rx, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        uint8_t r = op_xchg(ctx, tx ? tx[i] : 0xFFu);
        if (rx)
            rx[i] = r;
    }
}

static const sd_spi_ops_t ops = {&model, op_select, op_xchg, op_xchg_buf, op_ms, op_set_hz};
static const sd_spi_ops_t ops_bytewise = {&model, op_select, op_xchg, 0, op_ms, op_set_hz};

static uint32_t rng = 12345u;
static uint8_t rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (uint8_t)(rng >> 24);
}

static void fresh_card(int sdhc)
{
    uint32_t i;
    for (i = 0; i < CARD_BYTES; i++)
        card[i] = ref[i] = rnd();
    sd_model_init(&model, card, CARD_BYTES, sdhc);
    absent = 0;
}

static void test_crc7(void)
{
    /* The spec's worked values: CMD0 with argument 0 ends in 0x95, CMD8 with 0x1AA in 0x87. */
    static const uint8_t cmd0[5] = {0x40, 0, 0, 0, 0}, cmd8[5] = {0x48, 0, 0, 0x01, 0xAA};
    CHECK((sd_model_crc7(cmd0, 5) << 1 | 1) == 0x95, "CMD0 CRC byte 0x%02x", sd_model_crc7(cmd0, 5) << 1 | 1);
    CHECK((sd_model_crc7(cmd8, 5) << 1 | 1) == 0x87, "CMD8 CRC byte 0x%02x", sd_model_crc7(cmd8, 5) << 1 | 1);
}

/* Raw command to the model, bypassing the driver: checks the model itself answers as the spec
 * says, so the driver tests below test against the spec and not against a model built to match. */
static uint8_t raw_cmd(uint8_t idx, uint32_t arg, int good_crc)
{
    uint8_t f[6] = {(uint8_t)(0x40u | idx), (uint8_t)(arg >> 24), (uint8_t)(arg >> 16), (uint8_t)(arg >> 8),
                    (uint8_t)arg, 0};
    uint8_t r = 0xFFu;
    int i;
    f[5] = (uint8_t)(sd_model_crc7(f, 5) << 1 | 1u);
    if (!good_crc)
        f[5] ^= 0x10u;
    sd_model_select(&model, 1);
    for (i = 0; i < 6; i++)
        (void)sd_model_xchg(&model, f[i]);
    for (i = 0; i < 9 && r == 0xFFu; i++)
        r = sd_model_xchg(&model, 0xFFu);
    while (sd_model_xchg(&model, 0xFFu) != 0xFFu || model.out_len) /* drain any R3/R7/data tail */
        ;
    sd_model_select(&model, 0);
    (void)sd_model_xchg(&model, 0xFFu);
    return r;
}

static void test_model(void)
{
    int i;
    fresh_card(1);
    sd_model_select(&model, 1);
    CHECK(raw_cmd(0, 0, 1) == 0xFFu, "CMD0 before the 74 power-up clocks must go unanswered");
    for (i = 0; i < 10; i++)
        (void)sd_model_xchg(&model, 0xFFu);
    CHECK(raw_cmd(0, 0, 0) == 0xFFu, "CMD0 with a bad CRC in SD mode must go unanswered");
    CHECK(raw_cmd(0, 0, 1) == 0x01u, "CMD0 -> R1 idle");
    CHECK(raw_cmd(8, 0x1AAu, 0) == 0x09u, "CMD8 with a bad CRC -> idle | CRC error");
    CHECK(raw_cmd(17, 0, 1) == 0x05u, "CMD17 in idle state -> idle | illegal");
    CHECK(raw_cmd(41, 0x40000000u, 1) == 0x05u, "CMD41 without CMD55 -> illegal");
    CHECK(raw_cmd(16, 512, 0) == 0x05u, "CMD16 in idle, CRC ignored -> illegal only");
    CHECK(raw_cmd(8, 0x1AAu, 1) == 0x01u, "CMD8 -> R7 starting with idle");
    model.init_polls = 0;
    model.polls_left = 0;
    CHECK(raw_cmd(55, 0, 1) == 0x01u && raw_cmd(41, 0, 1) == 0x01u, "SDHC with HCS = 0 stays idle");
    CHECK(raw_cmd(55, 0, 1) == 0x01u && raw_cmd(41, 0x40000000u, 1) == 0x00u, "ACMD41 with HCS -> ready");
    CHECK(raw_cmd(12, 0, 1) == 0x04u, "unsupported CMD12 -> illegal command");
    CHECK(raw_cmd(17, 0, 0) == 0x00u, "CMD17 with a bad CRC: CRC is off in SPI mode -> accepted");
    CHECK(model.protocol_errors == 2u, "only the two unanswered CMD0s are host errors: %u", model.protocol_errors);
}

static void init_ok(sd_card_t *c, const char *what, int sdhc, int v1, const sd_spi_ops_t *o)
{
    int err;
    fresh_card(sdhc);
    model.v1 = v1;
    err = sd_init(c, o, FIRST_SECTOR, SWAP_SECTORS);
    CHECK(err == SD_OK, "%s: sd_init = %d", what, err);
    CHECK(c->block_addr == (sdhc ? 1 : 0), "%s: block addressing %d", what, c->block_addr);
    CHECK(model.clocks_before_cmd0 >= 10u, "%s: %u bytes of power-up clocks", what, model.clocks_before_cmd0);
    CHECK(model.n_cmd[16] == (sdhc ? 0u : 1u), "%s: CMD16 sent %u times", what, model.n_cmd[16]);
    CHECK(model.n_acmd41 == model.init_polls + 1u, "%s: %u ACMD41s", what, model.n_acmd41);
    CHECK(model.hz == 8000000u, "%s: clock after init %u Hz", what, model.hz);
    CHECK(model.protocol_errors == 0, "%s: %u protocol errors", what, model.protocol_errors);
}

/* Writes and reads at unaligned offsets that start, end or span sector boundaries, mirrored into
 * ref; after every write the whole card must equal ref, so bytes around the range survived. */
static void test_pager(const char *what, int sdhc, int v1, const sd_spi_ops_t *o)
{
    static const uint32_t ranges[][2] = {
        {0, 1}, {100, 1000}, {511, 2}, {1024, 512}, {3000, 5000}, {512 * 63 + 7, 505}, {777, 4}, {0, 512 * 64},
        {12345, 3}, {2047, 1025},
    };
    static uint8_t buf[512 * 64], got[512 * 64];
    sd_card_t c;
    uint32_t r, i, base = FIRST_SECTOR * 512u;
    int err;
    init_ok(&c, what, sdhc, v1, o);
    for (r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        uint32_t off = ranges[r][0], n = ranges[r][1];
        for (i = 0; i < n; i++)
            buf[i] = ref[base + off + i] = rnd();
        err = sd_pager_write(&c, off, buf, n);
        CHECK(err == SD_OK, "%s: write [%u, +%u) = %d", what, off, n, err);
        CHECK(memcmp(card, ref, CARD_BYTES) == 0, "%s: card differs from reference after write [%u, +%u)", what, off, n);
        memset(got, 0, n);
        err = sd_pager_read(&c, off, got, n);
        CHECK(err == SD_OK && memcmp(got, buf, n) == 0, "%s: read back [%u, +%u) = %d", what, off, n, err);
    }
    /* Reads over ranges other than those written: the pager must stitch sectors the same way. */
    for (r = 0; r < 50; r++) {
        uint32_t off = (uint32_t)rnd() * 100u % (SWAP_SECTORS * 512u - 1u), n = 1u + (uint32_t)rnd() * 37u;
        if (off + n > SWAP_SECTORS * 512u)
            n = SWAP_SECTORS * 512u - off;
        err = sd_pager_read(&c, off, got, n);
        CHECK(err == SD_OK && memcmp(got, ref + base + off, n) == 0, "%s: read [%u, +%u) = %d", what, off, n, err);
    }
    /* Past the swap area: refused before touching the card. */
    err = sd_pager_write(&c, SWAP_SECTORS * 512u - 4u, buf, 5);
    CHECK(err == SD_E_RANGE, "%s: write past the swap area = %d", what, err);
    err = sd_pager_read(&c, 0xFFFFFFF0u, got, 32);
    CHECK(err == SD_E_RANGE, "%s: read with a wrapping offset = %d", what, err);
    CHECK(memcmp(card, ref, CARD_BYTES) == 0, "%s: card changed by refused writes", what);
    CHECK(model.protocol_errors == 0, "%s: %u protocol errors", what, model.protocol_errors);
}

static void test_slow_card(void)
{
    /* Long waits for the read token and a long programming busy still work. */
    sd_card_t c;
    uint8_t buf[700], got[700];
    uint32_t i;
    int err;
    init_ok(&c, "slow card", 1, 0, &ops);
    model.nac = 700;
    model.ncr = 8;
    model.busy_bytes = 5000;
    for (i = 0; i < sizeof buf; i++)
        buf[i] = rnd();
    err = sd_pager_write(&c, 300, buf, sizeof buf);
    CHECK(err == SD_OK, "slow card: write = %d", err);
    err = sd_pager_read(&c, 300, got, sizeof got);
    CHECK(err == SD_OK && memcmp(got, buf, sizeof buf) == 0, "slow card: read back = %d", err);
    CHECK(model.protocol_errors == 0, "slow card: %u protocol errors", model.protocol_errors);
}

static void test_errors(void)
{
    sd_card_t c;
    uint8_t buf[600] = {1, 2, 3};
    uint32_t t0, ms;
    int err;

    /* A card never initialised (zeroed, as a static would be): refused, not dereferenced. */
    memset(&c, 0, sizeof c);
    c.n_sectors = SWAP_SECTORS;
    err = sd_pager_read(&c, 0, buf, 4);
    CHECK(err == SD_E_NOT_READY, "uninitialised card: read = %d", err);

    /* A card that never leaves idle: init gives up after the spec's 1 s, with bounded tries. */
    fresh_card(1);
    model.init_polls = ~0u;
    t0 = sd_model_ms(&model);
    err = sd_init(&c, &ops, FIRST_SECTOR, SWAP_SECTORS);
    ms = sd_model_ms(&model) - t0;
    CHECK(err == SD_E_INIT_TIMEOUT, "never ready: sd_init = %d", err);
    CHECK(model.n_acmd41 > 1u && model.n_acmd41 <= 4000u, "never ready: %u ACMD41s", model.n_acmd41);
    CHECK(ms >= 1000u && ms < 1100u, "never ready: gave up after %u ms of bus time", ms);
    err = sd_pager_write(&c, 0, buf, 4);
    CHECK(err == SD_E_NOT_READY, "never ready: write after failed init = %d", err);
    CHECK(memcmp(card, ref, CARD_BYTES) == 0, "never ready: card changed");

    /* An SDHC card asked without HCS never gets ready either (4.2.3.1); a v1 card answers CMD8
     * illegal, so this is what the driver would do if it misread CMD8: covered by the model. */

    /* No card: nothing answers CMD0. */
    fresh_card(1);
    absent = 1;
    err = sd_init(&c, &ops, FIRST_SECTOR, SWAP_SECTORS);
    CHECK(err == SD_E_NO_IDLE, "no card: sd_init = %d", err);

    /* Every data block rejected: the write fails after a bounded number of tries, card intact. */
    init_ok(&c, "rejecting card", 1, 0, &ops);
    model.reject_writes = 1;
    err = sd_pager_write(&c, 10, buf, 600);
    CHECK(err == SD_E_WRITE, "rejected write = %d", err);
    CHECK(model.n_cmd[24] == 3u, "rejected write: %u CMD24s (bounded retries)", model.n_cmd[24]);
    CHECK(memcmp(card, ref, CARD_BYTES) == 0, "rejected write changed the card");

    /* A card that stays busy forever after a block: the write times out. */
    init_ok(&c, "stuck busy", 1, 0, &ops);
    model.busy_bytes = ~0u;
    t0 = sd_model_ms(&model);
    err = sd_write_sector(&c, 0, buf);
    CHECK(err == SD_E_BUSY, "stuck busy: write = %d", err);
    CHECK(sd_model_ms(&model) - t0 < 3u * 600u, "stuck busy: %u ms", sd_model_ms(&model) - t0);

    /* A sector past the card's end: R1 is fine, then the data error token "out of range". */
    init_ok(&c, "out of range", 1, 0, &ops);
    err = sd_read_sector(&c, CARD_BYTES / 512u, buf);
    CHECK(err == SD_E_TOKEN, "read past the card: %d", err);
    init_ok(&c, "out of range sdsc", 0, 0, &ops);
    err = sd_write_sector(&c, CARD_BYTES / 512u, buf);
    CHECK(err == SD_E_CMD, "SDSC write past the card: %d", err);
}

int main(void)
{
    sd_card_t c;
    test_crc7();
    test_model();
    init_ok(&c, "SDHC", 1, 0, &ops);
    init_ok(&c, "SDSC v2", 0, 0, &ops);
    init_ok(&c, "SDSC v1", 0, 1, &ops);
    test_pager("SDHC pager", 1, 0, &ops);
    test_pager("SDSC pager", 0, 0, &ops);
    test_pager("SDSC v1 pager", 0, 1, &ops);
    test_pager("SDHC pager, bytewise ops", 1, 0, &ops_bytewise);
    test_slow_card();
    test_errors();
    printf("sd_spi_test: %d checks, %d failed\n%s\n", checks, failures, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
