/* Native test of firmware/drivers/nor_pager.c against a NOR flash model with the rules the
 * nRF52840 QSPI and the MX25R6435F impose: every DMA transfer word-aligned in flash address, RAM
 * pointer and length (nRF52840 PS v1.7, QSPI chapter); programming only clears bits, erase works
 * on whole 4 KB sectors and sets them to 0xFF (MX25R6435F datasheet, SE command). A pager that
 * forgot an erase, or clobbered a neighbour, leaves the flash different from the reference. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../drivers/nor_pager.h"

#define FLASH_BYTES (64u * 1024u)
#define BASE (2u * NOR_SECTOR)
#define AREA (12u * NOR_SECTOR)

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

static uint8_t flash[FLASH_BYTES], ref[FLASH_BYTES];
static uint32_t misaligned, erases, programs, fail_after = ~0u;

static int dma_ok(uint32_t addr, const void *p, uint32_t n)
{
    if ((addr | (uint32_t)(uintptr_t)p | n) & 3u || n == 0 || n > NOR_SECTOR || addr + n > FLASH_BYTES) {
        misaligned++;
        return 0;
    }
    return 1;
}

static int f_read(void *ctx, uint32_t addr, void *dst, uint32_t n)
{
    (void)ctx;
    if (!dma_ok(addr, dst, n))
        return -1;
    memcpy(dst, flash + addr, n);
    return 0;
}

static int f_program(void *ctx, uint32_t addr, const void *src, uint32_t n)
{
    uint32_t i;
    (void)ctx;
    if (!dma_ok(addr, src, n) || programs++ >= fail_after)
        return -1;
    for (i = 0; i < n; i++)
        flash[addr + i] &= ((const uint8_t *)src)[i]; /* NOR: a program can only clear bits */
    return 0;
}

static int f_erase(void *ctx, uint32_t addr)
{
    (void)ctx;
    if (addr % NOR_SECTOR || addr >= FLASH_BYTES) {
        misaligned++;
        return -1;
    }
    erases++;
    memset(flash + addr, 0xFF, NOR_SECTOR);
    return 0;
}

static const nor_ops_t ops = {0, f_read, f_program, f_erase};

static uint32_t rng = 99u;
static uint8_t rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (uint8_t)(rng >> 24);
}

int main(void)
{
    /* Offsets and lengths chosen to hit every case: inside one sector, across one or several
     * sector boundaries, whole sectors, odd lengths, and odd RAM pointers (the +1 below). */
    static const uint32_t ranges[][3] = {
        {0, 4, 0}, {3, 1, 0}, {100, 1000, 1}, {4095, 2, 0}, {4096, 4096, 0}, {4096, 4096, 1},
        {5000, 9000, 0}, {8191, 8194, 3}, {0, AREA, 0}, {AREA - 5, 5, 2}, {12345, 6, 1},
    };
    static uint32_t words[(AREA + 16u) / 4u], gotw[(AREA + 16u) / 4u];
    uint8_t *buf = (uint8_t *)words, *got = (uint8_t *)gotw;
    nor_pager_t p = {&ops, BASE, AREA};
    uint32_t r, i;
    int err;

    for (i = 0; i < FLASH_BYTES; i++)
        flash[i] = ref[i] = rnd();
    for (r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        uint32_t off = ranges[r][0], n = ranges[r][1], skew = ranges[r][2];
        for (i = 0; i < n; i++)
            buf[skew + i] = ref[BASE + off + i] = rnd();
        err = nor_pager_write(&p, off, buf + skew, n);
        CHECK(err == NOR_OK, "write [%u, +%u) skew %u = %d", off, n, skew, err);
        CHECK(memcmp(flash, ref, FLASH_BYTES) == 0, "flash differs from reference after write [%u, +%u)", off, n);
        memset(got, 0, n + 4u);
        err = nor_pager_read(&p, off, got + skew, n);
        CHECK(err == NOR_OK && memcmp(got + skew, buf + skew, n) == 0, "read back [%u, +%u) skew %u = %d", off, n, skew,
              err);
    }
    for (r = 0; r < 200; r++) {
        uint32_t off = ((uint32_t)rnd() << 8 | rnd()) % AREA, n = 1u + ((uint32_t)rnd() << 5 | rnd()) % 9000u,
                 skew = rnd() & 3u;
        if (off + n > AREA)
            n = AREA - off;
        err = nor_pager_read(&p, off, got + skew, n);
        CHECK(err == NOR_OK && memcmp(got + skew, ref + BASE + off, n) == 0, "read [%u, +%u) skew %u = %d", off, n, skew,
              err);
    }
    CHECK(misaligned == 0, "%u DMA transfers or erases the QSPI peripheral would refuse", misaligned);
    CHECK(erases > 0, "no erases at all");

    err = nor_pager_write(&p, AREA - 3u, buf, 4);
    CHECK(err == NOR_E_RANGE, "write past the area = %d", err);
    err = nor_pager_read(&p, 0xFFFFFFFCu, got, 8);
    CHECK(err == NOR_E_RANGE, "read with a wrapping offset = %d", err);
    fail_after = programs;
    err = nor_pager_write(&p, 10, buf, 10);
    CHECK(err == NOR_E_IO, "program failure = %d", err);
    CHECK(memcmp(flash + BASE + NOR_SECTOR, ref + BASE + NOR_SECTOR, FLASH_BYTES - BASE - NOR_SECTOR) == 0,
          "a failed write touched other sectors");

    printf("nor_pager_test: %d checks, %d failed\n%s\n", checks, failures, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
