/* The nRF52840 itself (nRF52840 DK / Dongle): UARTE0 with EasyDMA for the serial link, TIMER1
 * as the 16 MHz tick counter, the op marker, nv storage (the model blob and frozen weights) in the
 * chip's flash through the NVMC, and aux storage chosen at build time:
 *   -DPOET_PAGER_SD    SD card in SPI mode on SPIM2 (drivers/sd_spi.c);
 *   -DPOET_PAGER_QSPI  the DK's MX25R6435F 8 MB QSPI flash (drivers/nor_pager.c).
 * and the board's pins chosen at build time too (port.mk: one image per board):
 *   default            the nRF52840 DK (PCA10056): its J-Link VCOM and Arduino header;
 *   -DNRF_DONGLE       the nRF52840 Dongle (PCA10059): pins on its castellated edge, and its GPIO
 *                      supply raised to 3.0 V at the first start (dongle_regout0 below).
 * Register addresses and offsets: nRF52840 Product Specification v1.7 (PS below), cited by
 * chapter and its "Registers" table; each is checked against nrfx's nrf52840.h and
 * nrf52840_bitfields.h by tests/test_port_registers.py. Pins: the boards' user guides unless
 * overridden with -D. Built and size-checked here; nothing in this repository emulates an nRF52, so
 * this code has not run: the qemu-m4 port is the executable stand-in. */
#include <stdint.h>
#include <string.h>

#include "../../core/port.h"
#include "../shared/nv_erased.h"
#include "../../core/protocol.h"

#if defined(POET_PAGER_SD) == defined(POET_PAGER_QSPI)
#error "build with exactly one of -DPOET_PAGER_SD or -DPOET_PAGER_QSPI"
#endif
#ifdef POET_PAGER_SD
#include "../shared/sd_pager.h" /* port_pager_*: ports/shared/sd_pager.c */
#else
#include "../../drivers/millis.h"
#include "../../drivers/nor_pager.h"
#endif

/* Pins as PSEL values: bit 5 = port, bits 0-4 = pin (PS, GPIO chapter, "PSEL" fields). */
#define PIN(port, n) ((port) * 32u + (n))
#ifdef NRF_DONGLE
#ifdef POET_PAGER_QSPI
#error "the nRF52840 Dongle has no QSPI flash: build its image with -DPOET_PAGER_SD"
#endif
/* The Dongle (PCA10059 user guide, "Connector interface"; Zephyr's nrf52840dongle board files):
 * P0.06 and P0.08, the DK's UART pins, drive its LEDs LD1 and LD2 red here, so the serial link
 * takes P0.20 (TX) and P0.24 (RX) on the board's edge, the pins Zephyr's board file gives UART0
 * (nrf52840dongle_nrf52840-pinctrl.dtsi). Wire them to a 3.3 V USB-serial adapter's RX and TX. */
#ifndef UART_TX_PIN
#define UART_TX_PIN PIN(0u, 20u)
#endif
#ifndef UART_RX_PIN
#define UART_RX_PIN PIN(0u, 24u)
#endif
/* The op marker on P1.10, an edge pin nothing on the Dongle uses. */
#ifndef POET_MARK_PIN
#define POET_MARK_PIN PIN(1u, 10u)
#endif
#else
#ifndef UART_TX_PIN
#define UART_TX_PIN PIN(0u, 6u) /* P0.06 -> interface MCU VCOM (DK user guide, "Virtual COM port") */
#endif
#ifndef UART_RX_PIN
#define UART_RX_PIN PIN(0u, 8u) /* P0.08 */
#endif
/* The op marker (port_mark): P1.08 by default, Arduino header D7 on the DK and used by nothing on
 * the board, so a PPK2 logic input (D0) can be wired straight to it. */
#ifndef POET_MARK_PIN
#define POET_MARK_PIN PIN(1u, 8u)
#endif
#endif
#ifndef UART_BAUD
#define UART_BAUD 115200u
#endif
#if POET_MARK_PIN == UART_TX_PIN || POET_MARK_PIN == UART_RX_PIN
#error "POET_MARK_PIN is a UART pin"
#endif

#define REG(a) (*(volatile uint32_t *)(a))

/* CLOCK (PS, "CLOCK - Clock control", registers), base 0x40000000. */
#define CLOCK 0x40000000u
#define CLOCK_TASKS_HFCLKSTART REG(CLOCK + 0x000u)
#define CLOCK_EVENTS_HFCLKSTARTED REG(CLOCK + 0x100u)

/* GPIO P0 at 0x50000000, P1 at 0x50000300 (PS, "GPIO - General purpose input/output"). */
#define GPIO(pin) (0x50000000u + ((pin) >= 32u ? 0x300u : 0u))
#define GPIO_OUTSET(pin) REG(GPIO(pin) + 0x508u)
#define GPIO_OUTCLR(pin) REG(GPIO(pin) + 0x50Cu)
#define GPIO_DIRSET(pin) REG(GPIO(pin) + 0x518u)
#define GPIO_PIN_CNF(pin) REG(GPIO(pin) + 0x700u + 4u * ((pin) & 31u))
#define PIN_CNF_INPUT_PULLUP 0x0Cu /* DIR input, INPUT connected, PULL = pull-up (3 << 2) */
#define PIN_CNF_OUTPUT 0x01u
/* DIR input, input buffer disconnected, no pull, DRIVE = H0H1 (3 << 8): what nrfx_qspi gives every
 * QSPI pin (QSPI_PIN_INIT, "QSPI peripheral expects high drive pin strength"); the peripheral takes
 * the pins over, this sets their drive. */
#define PIN_CNF_QSPI 0x302u

/* UARTE0, ID 2 (PS, "UARTE - Universal asynchronous receiver/transmitter with EasyDMA"). */
#define UARTE 0x40002000u
#define UARTE_IRQ 2u
#define UARTE_TASKS_STARTRX REG(UARTE + 0x000u)
#define UARTE_TASKS_STARTTX REG(UARTE + 0x008u)
#define UARTE_TASKS_STOPTX REG(UARTE + 0x00Cu)
#define UARTE_EVENTS_ENDRX REG(UARTE + 0x110u)
#define UARTE_EVENTS_ENDTX REG(UARTE + 0x120u)
#define UARTE_EVENTS_ERROR REG(UARTE + 0x124u)
#define UARTE_EVENTS_RXSTARTED REG(UARTE + 0x14Cu)
#define UARTE_SHORTS REG(UARTE + 0x200u)
#define UARTE_INTENSET REG(UARTE + 0x304u)
#define UARTE_ERRORSRC REG(UARTE + 0x480u)
#define UARTE_ENABLE REG(UARTE + 0x500u)
#define UARTE_PSEL_RTS REG(UARTE + 0x508u)
#define UARTE_PSEL_TXD REG(UARTE + 0x50Cu)
#define UARTE_PSEL_CTS REG(UARTE + 0x510u)
#define UARTE_PSEL_RXD REG(UARTE + 0x514u)
#define UARTE_BAUDRATE REG(UARTE + 0x524u)
#define UARTE_RXD_PTR REG(UARTE + 0x534u)
#define UARTE_RXD_MAXCNT REG(UARTE + 0x538u)
#define UARTE_TXD_PTR REG(UARTE + 0x544u)
#define UARTE_TXD_MAXCNT REG(UARTE + 0x548u)
#define UARTE_CONFIG REG(UARTE + 0x56Cu)
#define UARTE_SHORT_ENDRX_STARTRX (1u << 5)
#define UARTE_INT_ENDRX (1u << 4)
#define UARTE_INT_ERROR (1u << 9)
#define UARTE_INT_RXSTARTED (1u << 19)
#define UARTE_ENABLED 8u
#define PSEL_DISCONNECTED 0xFFFFFFFFu
/* UARTE's own BAUDRATE values (PS, UARTE "BAUDRATE"), not UART's: for 115200 the UART table says
 * 0x01D7E000 (actual 115942), the UARTE table 0x01D60000 (actual 115108), both within a USB-serial
 * adapter's tolerance but only the latter is what this peripheral is specified with. */
#if UART_BAUD == 115200u
#define UARTE_BAUD_VALUE 0x01D60000u /* "Baud115200" (actual 115108) */
#elif UART_BAUD == 1000000u
#define UARTE_BAUD_VALUE 0x10000000u /* "Baud1M" */
#else
#error "UART_BAUD: 115200 or 1000000"
#endif

/* TIMER1, ID 9 (PS, "TIMER - Timer/counter"): 16 MHz with PRESCALER 0, 32-bit BITMODE. It runs
 * from HFCLK, which stays on while the CPU sleeps in WFI, so ticks keep counting through idle
 * and pager waits (DWT CYCCNT would stop with the core clock). */
#define TIMER1 0x40009000u
#define TIMER_TASKS_START REG(TIMER1 + 0x000u)
#define TIMER_TASKS_CLEAR REG(TIMER1 + 0x00Cu)
#define TIMER_TASKS_CAPTURE0 REG(TIMER1 + 0x040u)
#define TIMER_MODE REG(TIMER1 + 0x504u)
#define TIMER_BITMODE REG(TIMER1 + 0x508u)
#define TIMER_PRESCALER REG(TIMER1 + 0x510u)
#define TIMER_CC0 REG(TIMER1 + 0x540u)
#define TICK_HZ 16000000u

#define NVIC_ISER0 REG(0xE000E100u)
#define NVIC_ICPR1 REG(0xE000E284u)
#define FPU_IRQ 38u

/* Receive ring: the host sends one frame (<= 1032 bytes, spec section 6) and waits for the
 * reply, so a ring larger than a frame never overflows. */
#define RING 2048u
#include "../shared/rx_ring.h"
/* EasyDMA reads and writes Data RAM only (PS, "EasyDMA"), so bytes to send are staged in RAM. */
#define TX_CHUNK 128u

static volatile uint32_t rx_errors;            /* framing/overrun seen (ERRORSRC), for a debugger */
static uint8_t rx_dma[2];                      /* one byte per EasyDMA transfer, double-buffered */
static volatile uint32_t rx_active;            /* which rx_dma byte the UARTE fills now */
static uint8_t tx_dma[2][TX_CHUNK];
static uint32_t tx_next;                        /* tx_dma buffer to fill next */
static int tx_running;                          /* a TX transfer was started and not yet waited for */

/* RX: EasyDMA transfers of one byte each, with the ENDRX->STARTRX shortcut so the next transfer
 * starts in hardware at once. RXD.PTR is double-buffered (PS, UARTE "Reception"): once
 * RXSTARTED says a transfer began, the ISR points RXD.PTR at the other byte for the next one.
 * One-byte transfers make every byte visible as soon as it lands (AMOUNT is only updated at
 * ENDRX); at 115200 baud there are 87 us per byte, far more than this handler needs. */
void UARTE0_UART0_IRQHandler(void)
{
    if (UARTE_EVENTS_ENDRX) {
        UARTE_EVENTS_ENDRX = 0;
        if (!ring_full())
            ring_put(rx_dma[rx_active]);
        rx_active ^= 1u;
    }
    if (UARTE_EVENTS_RXSTARTED) {
        UARTE_EVENTS_RXSTARTED = 0;
        UARTE_RXD_PTR = (uint32_t)(uintptr_t)&rx_dma[rx_active ^ 1u];
    }
    if (UARTE_EVENTS_ERROR) {
        UARTE_EVENTS_ERROR = 0;
        UARTE_ERRORSRC = UARTE_ERRORSRC; /* write 1 to clear */
        rx_errors++;
    }
    /* Read back so the event clears reach the peripheral before the handler returns; otherwise
     * the interrupt can fire again at once (PS, "Peripheral interface", interrupt clearing). */
    (void)UARTE_EVENTS_ENDRX;
}

/* Wait for the TX transfer in flight, if any. */
static void tx_wait(void)
{
    if (tx_running) {
        while (!UARTE_EVENTS_ENDTX)
            ;
        tx_running = 0;
    }
}

/* nRF52840 errata, anomaly 87: an FPU exception flag left set keeps the FPU interrupt pending
 * and wakes the CPU from WFI at once, so sleep would turn into spinning. Clear the flags
 * (FPSCR IOC, DZC, OFC, UFC, IXC, IDC) and the pending FPU IRQ first, as nRF5 SDK's power
 * management does. */
static void sleep_prepare(void)
{
    uint32_t fpscr;
    __asm__ volatile("vmrs %0, fpscr" : "=r"(fpscr));
    fpscr &= ~0x9Fu;
    __asm__ volatile("vmsr fpscr, %0" ::"r"(fpscr) : "memory");
    NVIC_ICPR1 = 1u << (FPU_IRQ - 32u);
    /* A finished transmission leaves the transmitter running (and drawing current) until
     * STOPTX (PS, UARTE "Transmission"). */
    if (tx_running && UARTE_EVENTS_ENDTX) {
        tx_running = 0;
        UARTE_TASKS_STOPTX = 1;
    }
}

int port_getc(void) { return cm_ring_getc(sleep_prepare); }

/* TX with EasyDMA, two staging buffers: the next chunk is copied while the previous one is on
 * the wire. Returns with the last chunk still sending; the next call (or idle) waits for it. */
void port_write(const uint8_t *p, size_t n)
{
    while (n) {
        uint32_t k = n < TX_CHUNK ? (uint32_t)n : TX_CHUNK;
        uint8_t *buf = tx_dma[tx_next];
        memcpy(buf, p, k);
        tx_wait();
        UARTE_EVENTS_ENDTX = 0;
        UARTE_TXD_PTR = (uint32_t)(uintptr_t)buf;
        UARTE_TXD_MAXCNT = k;
        UARTE_TASKS_STARTTX = 1;
        tx_running = 1;
        tx_next ^= 1u;
        p += k;
        n -= k;
    }
}

uint32_t port_ticks(void)
{
    TIMER_TASKS_CAPTURE0 = 1;
    return TIMER_CC0;
}

uint32_t port_tick_hz(void) { return TICK_HZ; }

/* One store each way: the pulse outlasts the record's ticks by a few cycles, under one tick. */
void port_mark(int running)
{
    if (running)
        GPIO_OUTSET(POET_MARK_PIN) = 1u << (POET_MARK_PIN & 31u);
    else
        GPIO_OUTCLR(POET_MARK_PIN) = 1u << (POET_MARK_PIN & 31u);
}

static void mark_init(void)
{
    GPIO_OUTCLR(POET_MARK_PIN) = 1u << (POET_MARK_PIN & 31u); /* low before it drives: no stray pulse */
    GPIO_DIRSET(POET_MARK_PIN) = 1u << (POET_MARK_PIN & 31u);
}

#ifdef POET_PAGER_SD
/* SPIM2, ID 35 (PS, "SPIM - Serial peripheral interface master with EasyDMA"): up to 8 Mbps.
 * SPIM3 would do 32 Mbps, but it is the instance with errata of its own (anomaly 198 among
 * them), and SD's default speed tops out at 25 MHz anyway. */
#define SPIM 0x40023000u
#define SPIM_TASKS_START REG(SPIM + 0x010u)
#define SPIM_EVENTS_END REG(SPIM + 0x118u)
#define SPIM_ENABLE REG(SPIM + 0x500u)
#define SPIM_PSEL_SCK REG(SPIM + 0x508u)
#define SPIM_PSEL_MOSI REG(SPIM + 0x50Cu)
#define SPIM_PSEL_MISO REG(SPIM + 0x510u)
#define SPIM_FREQUENCY REG(SPIM + 0x524u)
#define SPIM_RXD_PTR REG(SPIM + 0x534u)
#define SPIM_RXD_MAXCNT REG(SPIM + 0x538u)
#define SPIM_TXD_PTR REG(SPIM + 0x544u)
#define SPIM_TXD_MAXCNT REG(SPIM + 0x548u)
#define SPIM_CONFIG REG(SPIM + 0x554u)
#define SPIM_ORC REG(SPIM + 0x5C0u)
#define SPIM_ENABLED 7u
#define SPIM_K125 0x02000000u /* FREQUENCY: 125 kbps; each doubling of the value doubles the rate */
#define SPIM_MAX_HZ 8000000u

#ifdef NRF_DONGLE
/* Four neighbouring pins on the Dongle's edge (PCA10059 user guide, "Connector interface"), clear of
 * its LEDs, button, reset (P0.18) and the NFC pins P0.09/P0.10 (which need UICR.NFCPINS changed). */
#ifndef SD_SCK_PIN
#define SD_SCK_PIN PIN(0u, 13u)
#endif
#ifndef SD_MOSI_PIN
#define SD_MOSI_PIN PIN(0u, 15u)
#endif
#ifndef SD_MISO_PIN
#define SD_MISO_PIN PIN(0u, 17u)
#endif
#ifndef SD_CS_PIN
#define SD_CS_PIN PIN(0u, 22u)
#endif
#endif
/* The DK's Arduino header (DK user guide, "Arduino Uno R3 compatible header"): D13 SCK = P1.15,
 * D12 MISO = P1.14, D11 MOSI = P1.13, D10 SS = P1.12, as on any SD shield. */
#ifndef SD_SCK_PIN
#define SD_SCK_PIN PIN(1u, 15u)
#endif
#ifndef SD_MISO_PIN
#define SD_MISO_PIN PIN(1u, 14u)
#endif
#ifndef SD_MOSI_PIN
#define SD_MOSI_PIN PIN(1u, 13u)
#endif
#ifndef SD_CS_PIN
#define SD_CS_PIN PIN(1u, 12u)
#endif
#if POET_MARK_PIN == SD_SCK_PIN || POET_MARK_PIN == SD_MISO_PIN || POET_MARK_PIN == SD_MOSI_PIN || \
    POET_MARK_PIN == SD_CS_PIN
#error "POET_MARK_PIN is an SD card pin"
#endif
#define RAM_START 0x20000000u
#define RAM_END 0x20040000u

static uint8_t spim_tx, spim_rx; /* single bytes in RAM for EasyDMA */

static void spim_run(const uint8_t *tx, uint32_t ntx, uint8_t *rx, uint32_t nrx)
{
    SPIM_TXD_PTR = (uint32_t)(uintptr_t)tx;
    SPIM_TXD_MAXCNT = ntx;
    SPIM_RXD_PTR = (uint32_t)(uintptr_t)rx;
    SPIM_RXD_MAXCNT = nrx;
    SPIM_EVENTS_END = 0;
    SPIM_TASKS_START = 1;
    while (!SPIM_EVENTS_END) /* at most 512 bytes at >= 125 kbps: 33 ms */
        ;
}

static void sd_select(void *ctx, int on)
{
    (void)ctx;
    if (on)
        GPIO_OUTCLR(SD_CS_PIN) = 1u << (SD_CS_PIN & 31u);
    else
        GPIO_OUTSET(SD_CS_PIN) = 1u << (SD_CS_PIN & 31u);
}

static uint8_t sd_xchg(void *ctx, uint8_t b)
{
    (void)ctx;
    spim_tx = b;
    spim_run(&spim_tx, 1, &spim_rx, 1);
    return spim_rx;
}

/* With ORC = 0xFF the SPIM clocks out 0xFF once TXD.MAXCNT bytes are sent (PS, SPIM "Master
 * mode pin configuration"/ORC), which is the filler SD wants while it sends data. */
static void sd_xchg_buf(void *ctx, const uint8_t *tx, uint8_t *rx, uint32_t n)
{
    uint32_t i;
    if (tx && ((uintptr_t)tx < RAM_START || (uintptr_t)tx + n > RAM_END)) {
        for (i = 0; i < n; i++) { /* not in RAM, so not for EasyDMA: byte by byte */
            uint8_t r = sd_xchg(ctx, tx[i]);
            if (rx)
                rx[i] = r;
        }
        return;
    }
    spim_run(tx, tx ? n : 0u, rx, rx ? n : 0u);
}

static void sd_set_hz(void *ctx, uint32_t hz)
{
    uint32_t f = SPIM_K125, rate = 125000u;
    (void)ctx;
    while (rate * 2u <= hz && rate * 2u <= SPIM_MAX_HZ) {
        rate *= 2u;
        f <<= 1;
    }
    SPIM_FREQUENCY = f;
}

const sd_spi_ops_t port_sd_ops = {0, sd_select, sd_xchg, sd_xchg_buf, port_sd_ms, sd_set_hz};

static void pager_hw_init(void)
{
    /* Pin directions the SPIM expects (PS, SPIM "Pin configuration"): SCK and MOSI outputs,
     * MISO input, here with a pull-up so an absent card reads 0xFF; CS a GPIO, idle high. */
    GPIO_OUTSET(SD_CS_PIN) = 1u << (SD_CS_PIN & 31u);
    GPIO_PIN_CNF(SD_CS_PIN) = PIN_CNF_OUTPUT;
    GPIO_OUTCLR(SD_SCK_PIN) = 1u << (SD_SCK_PIN & 31u); /* CPOL 0 */
    GPIO_PIN_CNF(SD_SCK_PIN) = PIN_CNF_OUTPUT;
    GPIO_PIN_CNF(SD_MOSI_PIN) = PIN_CNF_OUTPUT;
    GPIO_PIN_CNF(SD_MISO_PIN) = PIN_CNF_INPUT_PULLUP;
    SPIM_PSEL_SCK = SD_SCK_PIN;
    SPIM_PSEL_MOSI = SD_MOSI_PIN;
    SPIM_PSEL_MISO = SD_MISO_PIN;
    SPIM_CONFIG = 0; /* SPI mode 0, MSB first: what SD's SPI mode uses */
    SPIM_ORC = 0xFFu;
    SPIM_FREQUENCY = SPIM_K125 << 1; /* 250 kbps until sd_init picks its own */
    SPIM_ENABLE = SPIM_ENABLED;
}

#else /* POET_PAGER_QSPI */

/* QSPI, ID 41 (PS, "QSPI - Quad serial peripheral interface"). */
#define QSPI 0x40029000u
#define QSPI_TASKS_ACTIVATE REG(QSPI + 0x000u)
#define QSPI_TASKS_READSTART REG(QSPI + 0x004u)
#define QSPI_TASKS_WRITESTART REG(QSPI + 0x008u)
#define QSPI_TASKS_ERASESTART REG(QSPI + 0x00Cu)
#define QSPI_EVENTS_READY REG(QSPI + 0x100u)
#define QSPI_ENABLE REG(QSPI + 0x500u)
#define QSPI_READ_SRC REG(QSPI + 0x504u)
#define QSPI_READ_DST REG(QSPI + 0x508u)
#define QSPI_READ_CNT REG(QSPI + 0x50Cu)
#define QSPI_WRITE_DST REG(QSPI + 0x510u)
#define QSPI_WRITE_SRC REG(QSPI + 0x514u)
#define QSPI_WRITE_CNT REG(QSPI + 0x518u)
#define QSPI_ERASE_PTR REG(QSPI + 0x51Cu)
#define QSPI_ERASE_LEN REG(QSPI + 0x520u)
#define QSPI_PSEL_SCK REG(QSPI + 0x524u)
#define QSPI_PSEL_CSN REG(QSPI + 0x528u)
#define QSPI_PSEL_IO0 REG(QSPI + 0x530u)
#define QSPI_PSEL_IO1 REG(QSPI + 0x534u)
#define QSPI_PSEL_IO2 REG(QSPI + 0x538u)
#define QSPI_PSEL_IO3 REG(QSPI + 0x53Cu)
#define QSPI_IFCONFIG0 REG(QSPI + 0x544u)
#define QSPI_IFCONFIG1 REG(QSPI + 0x600u)
#define QSPI_CINSTRCONF REG(QSPI + 0x634u)
#define QSPI_CINSTRDAT0 REG(QSPI + 0x638u)
#define QSPI_ERASE_4KB 0u
/* IFCONFIG0: READOC = READ4IO (4, opcode 0xEB), WRITEOC = PP4IO (3 << 3, opcode 0x38), 24-bit
 * addresses, 256-byte pages: what the MX25R6435F supports. */
#define QSPI_IFCONFIG0_VALUE (4u | 3u << 3)
/* IFCONFIG1: SCK = 32 MHz / (SCKFREQ + 1) in bits 28-31; 3 -> 8 MHz, the rate Zephyr's
 * nrf52840dk board file uses for this flash. The other fields keep their reset values (PS,
 * IFCONFIG1). */
#define QSPI_SCKFREQ_MASK (0xFu << 28)
#define QSPI_SCKFREQ_8MHZ (3u << 28)
/* CINSTRCONF: opcode, LENGTH (bytes incl. the opcode) << 8, LIO2 << 12, LIO3 << 13, WREN << 15
 * (PS, CINSTRCONF). IO2 and IO3 are the flash's WP# and HOLD#/RESET# while a single-line custom
 * instruction runs, so both are held high: WP# low would block WRSR, HOLD# low would pause it. */
#define CINSTR(op, len) ((uint32_t)(op) | (uint32_t)(len) << 8 | 1u << 12 | 1u << 13)
#define CINSTR_WREN (1u << 15)

/* The DK's QSPI flash pins (DK user guide, "External memory"): P0.19 SCK, P0.17 CSN,
 * P0.20-P0.23 IO0-IO3. */
#define QSPI_SCK_PIN PIN(0u, 19u)
#define QSPI_CSN_PIN PIN(0u, 17u)
#define QSPI_IO0_PIN PIN(0u, 20u)
#define QSPI_IO1_PIN PIN(0u, 21u)
#define QSPI_IO2_PIN PIN(0u, 22u)
#define QSPI_IO3_PIN PIN(0u, 23u)
#if POET_MARK_PIN == QSPI_SCK_PIN || POET_MARK_PIN == QSPI_CSN_PIN || \
    (POET_MARK_PIN >= QSPI_IO0_PIN && POET_MARK_PIN <= QSPI_IO3_PIN)
#error "POET_MARK_PIN is a QSPI flash pin"
#endif

/* MX25R6435F (Macronix datasheet): JEDEC ID C2 28 17, 8 MB, status register bit 0 WIP, bit 6
 * QE (quad enable, needed for READ4IO/PP4IO), RDSR 0x05, WRSR 0x01, RDID 0x9F. Sector erase
 * 4 KB takes up to 240 ms and a 256-byte page program up to 10 ms (datasheet, "Erase and
 * Programming Performance"; the timeouts below leave margin over those). */
#define MX_RDSR 0x05u
#define MX_WRSR 0x01u
#define MX_RDID 0x9Fu
#define MX_SR_WIP 0x01u
#define MX_SR_QE 0x40u
#define MX_JEDEC_ID 0x1728C2u /* bytes C2 28 17 as CINSTRDAT0 holds them, first byte lowest */
#ifndef QSPI_SWAP_BASE
#define QSPI_SWAP_BASE 0u
#endif
#ifndef QSPI_SWAP_BYTES
#define QSPI_SWAP_BYTES (8u * 1024u * 1024u)
#endif
#define WIP_TIMEOUT_MS 500u
#define READY_TIMEOUT_MS 100u

static int qspi_ready(void)
{
    uint32_t t0 = poet_millis();
    while (!QSPI_EVENTS_READY)
        if (poet_millis() - t0 > READY_TIMEOUT_MS)
            return -1;
    QSPI_EVENTS_READY = 0;
    return 0;
}

/* A custom instruction; its data bytes in CINSTRDAT0, first byte lowest. */
static int qspi_cinstr(uint32_t conf, uint32_t *dat0)
{
    QSPI_EVENTS_READY = 0;
    if (dat0)
        QSPI_CINSTRDAT0 = *dat0;
    QSPI_CINSTRCONF = conf;
    if (qspi_ready())
        return -1;
    if (dat0)
        *dat0 = QSPI_CINSTRDAT0;
    return 0;
}

/* READY after ERASESTART/WRITESTART means the command went out, not that the flash finished;
 * poll WIP so the next operation does not find the flash busy. */
static int wait_wip(void)
{
    uint32_t t0 = poet_millis(), sr;
    do {
        sr = 0;
        if (qspi_cinstr(CINSTR(MX_RDSR, 2u), &sr))
            return -1;
        if (!(sr & MX_SR_WIP))
            return 0;
    } while (poet_millis() - t0 < WIP_TIMEOUT_MS);
    return -1;
}

static int qspi_read(void *ctx, uint32_t addr, void *dst, uint32_t n)
{
    (void)ctx;
    QSPI_READ_SRC = addr;
    QSPI_READ_DST = (uint32_t)(uintptr_t)dst;
    QSPI_READ_CNT = n;
    QSPI_EVENTS_READY = 0;
    QSPI_TASKS_READSTART = 1;
    return qspi_ready();
}

/* The peripheral splits a write into page programs of PPSIZE itself (PS, QSPI "Write"). */
static int qspi_program(void *ctx, uint32_t addr, const void *src, uint32_t n)
{
    (void)ctx;
    QSPI_WRITE_DST = addr;
    QSPI_WRITE_SRC = (uint32_t)(uintptr_t)src;
    QSPI_WRITE_CNT = n;
    QSPI_EVENTS_READY = 0;
    QSPI_TASKS_WRITESTART = 1;
    return qspi_ready() || wait_wip() ? -1 : 0;
}

static int qspi_erase(void *ctx, uint32_t addr)
{
    (void)ctx;
    QSPI_ERASE_PTR = addr;
    QSPI_ERASE_LEN = QSPI_ERASE_4KB;
    QSPI_EVENTS_READY = 0;
    QSPI_TASKS_ERASESTART = 1;
    return qspi_ready() || wait_wip() ? -1 : 0;
}

static const nor_ops_t nor_ops = {0, qspi_read, qspi_program, qspi_erase};
static const nor_pager_t nor = {&nor_ops, QSPI_SWAP_BASE, QSPI_SWAP_BYTES};
static int flash_ready;

static void pager_hw_init(void)
{
    static const uint8_t pins[] = {QSPI_SCK_PIN, QSPI_CSN_PIN, QSPI_IO0_PIN, QSPI_IO1_PIN, QSPI_IO2_PIN, QSPI_IO3_PIN};
    uint32_t i;
    for (i = 0; i < sizeof pins; i++)
        GPIO_PIN_CNF(pins[i]) = PIN_CNF_QSPI;
    QSPI_PSEL_SCK = QSPI_SCK_PIN;
    QSPI_PSEL_CSN = QSPI_CSN_PIN;
    QSPI_PSEL_IO0 = QSPI_IO0_PIN;
    QSPI_PSEL_IO1 = QSPI_IO1_PIN;
    QSPI_PSEL_IO2 = QSPI_IO2_PIN;
    QSPI_PSEL_IO3 = QSPI_IO3_PIN;
    QSPI_IFCONFIG0 = QSPI_IFCONFIG0_VALUE;
    QSPI_IFCONFIG1 = (QSPI_IFCONFIG1 & ~QSPI_SCKFREQ_MASK) | QSPI_SCKFREQ_8MHZ;
    QSPI_ENABLE = 1;
}

/* Activate the interface, check it is the flash we expect, set QE for the quad opcodes. */
int port_pager_open(void)
{
    uint32_t id = 0, sr = 0;
    if (flash_ready)
        return 0;
    QSPI_EVENTS_READY = 0;
    QSPI_TASKS_ACTIVATE = 1;
    if (qspi_ready() || qspi_cinstr(CINSTR(MX_RDID, 4u), &id) || (id & 0xFFFFFFu) != MX_JEDEC_ID)
        return -1;
    if (qspi_cinstr(CINSTR(MX_RDSR, 2u), &sr))
        return -1;
    if (!(sr & MX_SR_QE)) {
        sr = (sr | MX_SR_QE) & 0xFFu;
        if (qspi_cinstr(CINSTR(MX_WRSR, 2u) | CINSTR_WREN, &sr) || wait_wip())
            return -1;
    }
    flash_ready = 1;
    return 0;
}

uint32_t port_pager_bytes(void) { return QSPI_SWAP_BYTES; }

int port_pager_write(uint32_t offset, const void *src, uint32_t n)
{
    return flash_ready && nor_pager_write(&nor, offset, src, n) == NOR_OK ? 0 : -1;
}

int port_pager_read(uint32_t offset, void *dst, uint32_t n)
{
    return flash_ready && nor_pager_read(&nor, offset, dst, n) == NOR_OK ? 0 : -1;
}
#endif

/* ---- nv storage (core/port.h): the NV region of linker.ld, 768 KiB of the chip's own flash from
 * 0x20000 (__nv_start/__nv_end), programmed through the NVMC (PS, "NVMC - Non-volatile memory
 * controller", base 0x4001E000; offsets from its "Registers" table).
 *
 * Why the firmware programs these pages itself, as a bootloader would, rather than having the
 * model and the weights linked into the image: then changing the model, the weights or the
 * schedule never rebuilds or reflashes the firmware (no toolchain, no J-Link, no DFU round), and
 * the upload is the serial protocol's BEGIN/CHUNK/END that already carries them.
 *
 * The core's writes are sequential, 4-byte multiples, each upload starting on a POET_NV_PAGE
 * (4096) boundary (core/port.h). So a page is erased exactly when a write reaches its first byte
 * (the flash page is 4 kB, PS "Memory": FICR.CODEPAGESIZE), skipped when it already reads erased,
 * and no word is ever programmed twice between erases (PS NVMC "Writing to flash": n_WRITE).
 *
 * Interrupts and the serial link: this code runs from flash, and the CPU is halted while the NVMC
 * writes a word (t_WRITE, 41 us max) or erases a page (t_ERASEPAGE, 85 ms max) when it executes
 * from flash (PS NVMC, "Writing to flash", "Erasing a page in flash" and its "Electrical
 * specification"). The UARTE's EasyDMA keeps receiving, but this port receives one byte per
 * transfer and UARTE0_UART0_IRQHandler points RXD.PTR at the next byte: while the CPU is halted the
 * ENDRX->STARTRX shortcut restarts transfers into a buffer nobody empties, so of the bytes that
 * arrive during an erase all but the first one or two are lost (a word write is shorter than one
 * byte at 115200 baud; at 1 Mbaud it can cost one). Nothing should arrive then: the core programs
 * flash inside the CHUNK handler, before it sends that chunk's ACK (core/protocol.c, chunk()), and
 * the host sends nothing while it waits for an ACK (host/poet/device/link.py: stop-and-wait). The
 * exception is the host's retransmission: it resends a request unanswered after its retransmission
 * timeout (from measured round trips, 5 ms to 2 s), which a CHUNK that includes an 85 ms erase can
 * outlast. That copy then arrives damaged and is dropped by its CRC (the core answers with a NAK);
 * the host takes the first copy's ACK (same seq), resends whatever the leftover bytes spoil, and
 * the core answers a repeated seq without running it again. An erase can cost a retransmission,
 * never data. (NVMC partial erase, ERASEPAGEPARTIAL, would not help: each slice still halts the
 * CPU for longer than a byte.) */
#define NVMC 0x4001E000u
#define NVMC_READY REG(NVMC + 0x400u)     /* bit 0: 1 = ready, no write or erase in progress */
#define NVMC_CONFIG REG(NVMC + 0x504u)    /* WEN field: 0 Ren (read only), 1 Wen (write), 2 Een (erase) */
#define NVMC_ERASEPAGE REG(NVMC + 0x508u) /* write a page's first address to erase it (with Een) */
#define NVMC_REN 0u
#define NVMC_WEN 1u
#define NVMC_EEN 2u
#define NV_ERASE_PAGE 4096u

extern const uint8_t __nv_start[], __nv_end[];

const uint8_t *port_nv(void) { return __nv_start; }
uint32_t port_nv_bytes(void) { return (uint32_t)(__nv_end - __nv_start); }

static void nvmc_wait(void)
{
    while (!(NVMC_READY & 1u))
        ;
}

/* The sequence of nrfx_nvmc (page erase, word write): CONFIG before the operation, READY polled
 * after it, back to read-only at the end so a stray store cannot program flash. The data may sit
 * at any alignment (the core passes a received frame's payload), so words are assembled with
 * memcpy; all-ones words are the erased state and need no write. */
int port_nv_write(uint32_t off, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    uint32_t addr = (uint32_t)(uintptr_t)__nv_start + off, i;
    if (((off | n) & 3u) || off > port_nv_bytes() || n > port_nv_bytes() - off)
        return 1;
    for (i = 0; i < n; i += 4u) {
        uint32_t a = addr + i, w;
        if (a % NV_ERASE_PAGE == 0u && !nv_unit_erased((const volatile uint32_t *)a, NV_ERASE_PAGE)) {
            nvmc_wait();
            NVMC_CONFIG = NVMC_EEN;
            NVMC_ERASEPAGE = a;
            nvmc_wait();
            NVMC_CONFIG = NVMC_REN;
        }
        memcpy(&w, s + i, 4u);
        if (w != 0xFFFFFFFFu) {
            nvmc_wait();
            NVMC_CONFIG = NVMC_WEN;
            *(volatile uint32_t *)a = w;
            __asm__ volatile("dmb" ::: "memory");
            nvmc_wait();
            NVMC_CONFIG = NVMC_REN;
        }
    }
    __asm__ volatile("dsb" ::: "memory");
    return memcmp(__nv_start + off, s, n) != 0; /* reads back equal, as port.h promises */
}

#ifdef NRF_DONGLE
/* The Dongle is powered from USB into VDDH (the chip's high-voltage mode), and then its GPIO run at
 * what REG0 puts out, set by UICR.REGOUT0: erased (0xFFFFFFFF), VOUT reads DEFAULT, 1.8 V (PS,
 * "POWER", "Main supply"; "UICR", REGOUT0). A 3.3 V USB-serial adapter need not read 1.8 V as high,
 * nor an SD card take it. Nordic's board support (nRF5 SDK components/boards/boards.c,
 * gpio_output_voltage_setup, for BOARD_PCA10059) and
 * Zephyr's board code (boards/nordic/nrf52840dongle/board.c, board_nrf52840dongle_nrf52840_init)
 * program REGOUT0 to 3.0 V when they find it at its default in high-voltage mode, then reset, since
 * REG0 reads it at reset only: the same here, once per chip (UICR keeps it; a debugger's full erase
 * clears it). A Dongle whose REGOUT0 was already set is left alone, whatever the value. The write
 * goes through the NVMC like any flash word (UICR is flash: only 1 -> 0 bits, 7 -> 4 is such). */
#define POWER 0x40000000u /* POWER shares its base and ID with CLOCK (PS, "Instantiation") */
#define POWER_MAINREGSTATUS REG(POWER + 0x640u)
#define MAINREGSTATUS_HIGH 1u /* VDDH supplies the chip */
#define UICR 0x10001000u
#define UICR_REGOUT0 REG(UICR + 0x304u)
#define REGOUT0_VOUT_MASK 7u
#define REGOUT0_VOUT_DEFAULT 7u /* 1.8 V */
#define REGOUT0_VOUT_3V0 4u
#define SCB_AIRCR REG(0xE000ED0Cu)     /* ARMv7-M ARM B3.2.6 */
#define AIRCR_SYSRESETREQ 0x05FA0004u /* VECTKEY | SYSRESETREQ */

static void dongle_regout0(void)
{
    if (!(POWER_MAINREGSTATUS & MAINREGSTATUS_HIGH) || (UICR_REGOUT0 & REGOUT0_VOUT_MASK) != REGOUT0_VOUT_DEFAULT)
        return;
    nvmc_wait();
    NVMC_CONFIG = NVMC_WEN;
    UICR_REGOUT0 = (UICR_REGOUT0 & ~REGOUT0_VOUT_MASK) | REGOUT0_VOUT_3V0;
    nvmc_wait();
    NVMC_CONFIG = NVMC_REN;
    nvmc_wait();
    __asm__ volatile("dsb" ::: "memory");
    SCB_AIRCR = AIRCR_SYSRESETREQ; /* REG0 takes the new voltage at reset */
    for (;;)
        ;
}
#endif

const char *port_board(void) { return "nrf52840"; }
uint32_t port_ram_bytes(void) { return 262144u; } /* PS, "Memory": 256 KB RAM */

void port_idle(void)
{
    sleep_prepare();
    __asm__ volatile("wfi");
}

static void uart_init(void)
{
    /* TXD an output driven high (idle line) and RXD an input, so the pins hold their levels
     * when the UARTE is disabled (PS, UARTE "Pin configuration"). */
    GPIO_OUTSET(UART_TX_PIN) = 1u << (UART_TX_PIN & 31u);
    GPIO_PIN_CNF(UART_TX_PIN) = PIN_CNF_OUTPUT;
    /* Pulled up, as Zephyr's nRF52840 DK and Dongle board files configure RX (bias-pull-up in
     * their pinctrl; nrfx's own driver leaves it floating): until the J-Link's VCOM (or an adapter)
     * drives the line, a floating RX reads noise as start bits, junk bytes before HELLO. */
    GPIO_PIN_CNF(UART_RX_PIN) = PIN_CNF_INPUT_PULLUP;
    UARTE_PSEL_TXD = UART_TX_PIN;
    UARTE_PSEL_RXD = UART_RX_PIN;
    UARTE_PSEL_RTS = PSEL_DISCONNECTED;
    UARTE_PSEL_CTS = PSEL_DISCONNECTED;
    UARTE_BAUDRATE = UARTE_BAUD_VALUE;
    UARTE_CONFIG = 0; /* 8N1, no flow control */
    UARTE_ENABLE = UARTE_ENABLED;
    UARTE_SHORTS = UARTE_SHORT_ENDRX_STARTRX;
    UARTE_INTENSET = UARTE_INT_ENDRX | UARTE_INT_RXSTARTED | UARTE_INT_ERROR;
    rx_active = 0;
    UARTE_RXD_PTR = (uint32_t)(uintptr_t)&rx_dma[0];
    UARTE_RXD_MAXCNT = 1;
    NVIC_ISER0 = 1u << UARTE_IRQ;
    UARTE_TASKS_STARTRX = 1;
}

int main(void)
{
    uint32_t i;
#ifdef NRF_DONGLE
    dongle_regout0(); /* returns at once, but on a Dongle's first start: then it resets */
#endif
    /* The crystal (HFXO), not the RC oscillator, clocks TIMER1 and the UART: the tick rate is
     * then good to the crystal's tens of ppm, and 1 Mbaud stays in tolerance (PS, CLOCK, HFCLK
     * accuracy). HFXO start-up is specified in well under 1 ms; the loop bound only avoids a
     * hang on a board without the crystal (the RC oscillator is kept then). */
    CLOCK_EVENTS_HFCLKSTARTED = 0;
    CLOCK_TASKS_HFCLKSTART = 1;
    for (i = 0; i < 1000000u && !CLOCK_EVENTS_HFCLKSTARTED; i++)
        ;

    TIMER_MODE = 0;     /* timer */
    TIMER_BITMODE = 3u; /* 32 bit */
    TIMER_PRESCALER = 0; /* 16 MHz / 2^0 */
    TIMER_TASKS_CLEAR = 1;
    TIMER_TASKS_START = 1;

    mark_init();
    uart_init();
    pager_hw_init();
    __asm__ volatile("cpsie i" ::: "memory");

    poet_run();
    return 0;
}
