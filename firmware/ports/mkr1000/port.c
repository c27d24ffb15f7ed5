/* The Arduino MKR1000 itself (Microchip ATSAMD21G18A: Cortex-M0+ at 48 MHz, 32 KB SRAM, 256 KB
 * flash), behind Arduino's SAM-BA bootloader:
 *   clock   GCLK0 = DFLL48M in closed loop on the 32.768 kHz crystal (XOSC32K), as Arduino's
 *           SystemInit does; flash at 1 wait state;
 *   serial  SERCOM5 as a UART on Serial1's pins (D14 = PB22 TX, D13 = PB23 RX), 115200 8N1, RX by
 *           interrupt into a ring, TX polling DRE. Serial1 needs a 3.3 V USB-serial adapter: the
 *           board's native USB (a CDC device) would need a USB stack here, which is future work;
 *   ticks   TC4+TC5 as one 32-bit counter on GCLK0 (no prescaler);
 *   pager   SD card in SPI mode on SERCOM1 (the MKR header's MOSI/SCK/MISO) with chip select on D4,
 *           as on the MKR SD Proto Shield, through drivers/sd_spi.c.
 *   marker  the op marker (port_mark) on D0 = PA22;
 *   nv      the model blob and frozen weights (port_nv_*) in the chip's own flash, 0x18000-0x40000
 *           (linker.ld's NV region), programmed through the NVMCTRL.
 *
 * Citations "DS x" are sections of the SAM D21/DA1 Family Data Sheet, DS40001882 revision D
 * (Microchip, 2018). Chapters: 9 Product Mapping (base addresses), 10.3.2 NVM Software Calibration
 * Area Mapping, 11.2.2 Interrupt Line Mapping, 15 GCLK, 16 PM, 17 SYSCTRL, 22 NVMCTRL, 23 PORT,
 * 25 SERCOM, 26 SERCOM USART, 27 SERCOM SPI, 30 TC, 37 Electrical Characteristics. Register
 * offsets and bit positions below were cross-checked against Microchip's CMSIS device headers for
 * the SAMD21 (component/{gclk,pm,sysctrl,nvmctrl,port,sercom,tc}.h, fuses.h). Section numbers
 * were checked against the datasheet's text for 11.2.2 (table 11-3), 22 (NVMCTRL) and 25.6.2.3
 * (table 25-2); the others follow that revision's chapter layout (register n of a chapter's
 * register summary is x.8.n) and are unverified digit by digit: the register and section names
 * are the stable reference. Pins: ArduinoCore-samd variants/mkr1000/variant.cpp (the board's pin
 * table). Built and size-checked here; nothing in
 * this repository emulates a SAM D21, so this code has not run: qemu-m0 is the executable
 * stand-in, with the same pool and blob sizes. */
#include <stdint.h>
#include <string.h>

#include "../../core/port.h"
#include "../shared/nv_erased.h"
#include "../../core/protocol.h"
#include "../shared/sd_pager.h" /* port_pager_*: ports/shared/sd_pager.c */

#define REG8(a) (*(volatile uint8_t *)(a))
#define REG16(a) (*(volatile uint16_t *)(a))
#define REG32(a) (*(volatile uint32_t *)(a))

/* ---- Clock frequencies ---------------------------------------------------------------------- */

/* DFLL48M closed loop: f = DFLLMUL.MUL x f_ref (DS 17.6, DFLL48M "Closed-Loop Operation"). With the
 * 32.768 kHz crystal as reference, MUL = 48 MHz / 32768 Hz = 1464 (rounded down, as Arduino's
 * VARIANT_MCK / VARIANT_MAINOSC does, so the core stays at or under its 48 MHz maximum):
 * 1464 x 32768 = 47 972 352 Hz. This is the CPU clock, and TC4 and both SERCOMs count it. */
#define XOSC32K_HZ 32768u
#define DFLL_MUL 1464u
#define GCLK0_HZ (DFLL_MUL * XOSC32K_HZ)
#define TICK_HZ GCLK0_HZ

/* ---- Peripheral base addresses (DS 9, "Product Mapping") ------------------------------------ */

#define PM 0x40000400u
#define SYSCTRL 0x40000800u
#define GCLK 0x40000C00u
#define NVMCTRL 0x41004000u
#define PORT 0x41004400u
#define SERCOM1 0x42000C00u
#define SERCOM5 0x42001C00u
#define TC4 0x42003000u /* with TC5 (0x42003400) as its 32-bit slave; TC5's registers stay unused */

/* ---- NVMCTRL (DS 22.8) ---------------------------------------------------------------------- */

/* CTRLB.RWS[4:1], read wait states. At VDD 2.7-3.63 V (the MKR1000 runs at 3.3 V) the flash needs
 * 1 wait state above 24 MHz and supports 48 MHz with it (DS 37, "NVM Characteristics", maximum
 * operating frequency table; the table's number is not cited here, unverified). */
#define NVMCTRL_CTRLB REG32(NVMCTRL + 0x04u)
#define NVM_RWS_MASK (0xFu << 1)
#define NVM_RWS(n) ((uint32_t)(n) << 1)
/* CTRLB.MANW: a page is written only by an explicit WP command, never automatically when the last
 * word of the page buffer is loaded. Its reset value is 0, not the 1 the datasheet once gave (SAM
 * D21 errata, reference 13134): set it, as Microchip's and Arduino's start-up code do.
 * CTRLB.CACHEDIS turns the NVM read cache off around NVM commands, as ASF's nvm_execute_command. */
#define NVM_MANW (1u << 7)
#define NVM_CACHEDIS (1u << 18)
/* The rest of the NVMCTRL registers (DS 22.8) for nv storage (port_nv_write below). */
#define NVMCTRL_CTRLA REG16(NVMCTRL + 0x00u)
#define NVMCTRL_PARAM REG32(NVMCTRL + 0x08u)
#define NVMCTRL_INTFLAG REG8(NVMCTRL + 0x14u)
#define NVMCTRL_STATUS REG16(NVMCTRL + 0x18u)
#define NVMCTRL_ADDR REG32(NVMCTRL + 0x1Cu)
#define NVM_CMDEX_KEY (0xA5u << 8) /* CTRLA.CMDEX: a command runs only with this key */
#define NVM_CMD_ER 0x02u           /* erase the row ADDR points into */
#define NVM_CMD_WP 0x04u           /* write the page buffer to the page ADDR points into */
#define NVM_CMD_PBC 0x44u          /* page buffer clear: all ones */
#define NVM_INTFLAG_READY (1u << 0)
#define NVM_STATUS_ERRORS 0x1Cu    /* PROGE, LOCKE, NVME (bits 2-4); write 1 to clear */
#define NVM_PARAM_PSZ(p) (((p) >> 16) & 7u) /* page size 8 << PSZ bytes */
/* NVM Software Calibration Area at 0x00806020; DFLL48M COARSE CAL is bits 63:58, i.e. bits 31:26
 * of the word at 0x00806024 (DS 10.3.2, table "NVM Software Calibration Area Mapping"; same as
 * CMSIS FUSES_DFLL48M_COARSE_CAL_ADDR/Pos). */
#define NVM_CAL_WORD1 REG32(0x00806024u)
#define NVM_DFLL_COARSE(w) (((w) >> 26) & 0x3Fu)

/* ---- PM (DS 16.8) --------------------------------------------------------------------------- */

#define PM_CPUSEL REG8(PM + 0x08u)
#define PM_APBASEL REG8(PM + 0x09u)
#define PM_APBBSEL REG8(PM + 0x0Au)
#define PM_APBCSEL REG8(PM + 0x0Bu)
#define PM_APBAMASK REG32(PM + 0x18u)
#define PM_APBCMASK REG32(PM + 0x20u)
#define PM_APBAMASK_GCLK (1u << 3)
#define PM_APBCMASK_SERCOM1 (1u << 3)
#define PM_APBCMASK_SERCOM5 (1u << 7)
#define PM_APBCMASK_TC4 (1u << 12)
#define PM_APBCMASK_TC5 (1u << 13)

/* ---- SYSCTRL (DS 17.8) ---------------------------------------------------------------------- */

#define SYSCTRL_PCLKSR REG32(SYSCTRL + 0x0Cu)
#define SYSCTRL_XOSC32K REG16(SYSCTRL + 0x14u)
#define SYSCTRL_DFLLCTRL REG16(SYSCTRL + 0x24u)
#define SYSCTRL_DFLLVAL REG32(SYSCTRL + 0x28u)
#define SYSCTRL_DFLLMUL REG32(SYSCTRL + 0x2Cu)
#define PCLKSR_XOSC32KRDY (1u << 1)
#define PCLKSR_DFLLRDY (1u << 4)
#define PCLKSR_DFLLLCKF (1u << 6)
#define PCLKSR_DFLLLCKC (1u << 7)
#define XOSC32K_ENABLE (1u << 1)
#define XOSC32K_XTALEN (1u << 2) /* a crystal on XIN32/XOUT32, not an external clock */
#define XOSC32K_EN32K (1u << 3)  /* the 32 kHz output (the 1 kHz one stays off) */
/* STARTUP[10:8] = 6: 65536 OSCULP32K cycles, about 2 s (DS 17.8.6, start-up time table); the value
 * Arduino's SystemInit uses on this board, so boot waits as long as an Arduino sketch's does. */
#define XOSC32K_STARTUP(n) ((uint16_t)((n) << 8))
#define DFLLCTRL_ENABLE (1u << 1)
#define DFLLCTRL_MODE (1u << 2)  /* closed loop */
#define DFLLCTRL_QLDIS (1u << 9) /* quick lock off: slower to lock, steadier after (as Arduino) */
#define DFLLVAL_FINE(n) ((uint32_t)(n) << 0)
#define DFLLVAL_COARSE(n) ((uint32_t)(n) << 10)
/* CSTEP and FSTEP at half their range, the largest the datasheet allows (DS 17.6, closed loop). */
#define DFLLMUL_VALUE ((31u << 26) | (511u << 16) | DFLL_MUL)

/* ---- GCLK (DS 15.8) ------------------------------------------------------------------------- */

#define GCLK_CTRL REG8(GCLK + 0x00u)
#define GCLK_STATUS REG8(GCLK + 0x01u)
#define GCLK_CLKCTRL REG16(GCLK + 0x02u)
#define GCLK_GENCTRL REG32(GCLK + 0x04u)
#define GCLK_GENDIV REG32(GCLK + 0x08u)
#define GCLK_CTRL_SWRST (1u << 0)
#define GCLK_STATUS_SYNCBUSY (1u << 7)
#define GENCTRL(gen, src) ((uint32_t)(gen) | ((uint32_t)(src) << 8) | (1u << 16)) /* ID, SRC, GENEN */
#define GENDIV(gen, div) ((uint32_t)(gen) | ((uint32_t)(div) << 8))
#define GCLK_SRC_XOSC32K 0x05u
#define GCLK_SRC_DFLL48M 0x07u
#define CLKCTRL(id, gen) ((uint16_t)((id) | ((gen) << 8) | (1u << 14))) /* ID, GEN, CLKEN */
/* Generic clock channel IDs (DS 15.8.3, CLKCTRL.ID table). */
#define GCLK_ID_DFLL48M_REF 0x00u
#define GCLK_ID_SERCOM1_CORE 0x15u
#define GCLK_ID_SERCOM5_CORE 0x19u
#define GCLK_ID_TC4_TC5 0x1Cu

/* ---- PORT (DS 23.8) ------------------------------------------------------------------------- */

#define PORT_GROUP(g) (PORT + 0x80u * (g)) /* group 0 = PA, 1 = PB */
#define PORT_DIRSET(g) REG32(PORT_GROUP(g) + 0x08u)
#define PORT_OUTCLR(g) REG32(PORT_GROUP(g) + 0x14u)
#define PORT_OUTSET(g) REG32(PORT_GROUP(g) + 0x18u)
#define PORT_PMUX(g, pin) REG8(PORT_GROUP(g) + 0x30u + (pin) / 2u) /* even pin: [3:0], odd: [7:4] */
#define PORT_PINCFG(g, pin) REG8(PORT_GROUP(g) + 0x40u + (pin))
#define PINCFG_PMUXEN (1u << 0)
#define PINCFG_PULLEN (1u << 2)
#define PMUX_C 0x2u /* peripheral function C: SERCOM (DS 7.1, I/O multiplexing table) */
#define PMUX_D 0x3u /* peripheral function D: SERCOM-ALT */

/* ---- SERCOM, common to USART and SPI (DS 26.8, 27.8) ----------------------------------------- */

#define SC_CTRLA(s) REG32((s) + 0x00u)
#define SC_CTRLB(s) REG32((s) + 0x04u)
#define SC_BAUD16(s) REG16((s) + 0x0Cu) /* USART: 16 bits */
#define SC_BAUD8(s) REG8((s) + 0x0Cu)   /* SPI: 8 bits */
#define SC_INTENSET(s) REG8((s) + 0x16u)
#define SC_INTFLAG(s) REG8((s) + 0x18u)
#define SC_STATUS(s) REG16((s) + 0x1Au)
#define SC_SYNCBUSY(s) REG32((s) + 0x1Cu)
#define SC_DATA16(s) REG16((s) + 0x28u)
#define SC_DATA32(s) REG32((s) + 0x28u)
#define SC_CTRLA_SWRST (1u << 0)
#define SC_CTRLA_ENABLE (1u << 1)
#define SC_CTRLA_MODE(m) ((uint32_t)(m) << 2) /* 1: USART, internal clock; 3: SPI master */
#define SC_CTRLA_DORD (1u << 30)              /* USART: LSB first; SPI: 0 = MSB first */
#define SC_SYNC_SWRST (1u << 0)
#define SC_SYNC_ENABLE (1u << 1)
#define SC_SYNC_CTRLB (1u << 2)
#define SC_INT_DRE (1u << 0)
#define SC_INT_RXC (1u << 2)
#define SC_CTRLB_RXEN (1u << 17)
#define SC_CTRLB_TXEN (1u << 16) /* USART only */
#define UART_STATUS_ERRORS 0x7u  /* PERR, FERR, BUFOVF (DS 26.8.8); write 1 to clear */

/* USART pads (DS 26.8.1 CTRLA): RXPO[21:20] = 3: RX on PAD[3]; TXPO[17:16] = 1: TX on PAD[2]
 * (XCK would be PAD[3], unused in asynchronous mode). Arduino's Serial1 on this board uses the
 * same (variant.h: PAD_SERIAL1_TX UART_TX_PAD_2, PAD_SERIAL1_RX SERCOM_RX_PAD_3). SAMPR = 0:
 * 16x oversampling, arithmetic baud generation. FORM = 0, CHSIZE = 0, SBMODE = 0: 8N1. */
#define UART_RXPO(p) ((uint32_t)(p) << 20)
#define UART_TXPO(p) ((uint32_t)(p) << 16)
#ifndef UART_BAUD
#define UART_BAUD 115200u
#endif
/* Asynchronous arithmetic mode, S = 16 samples per bit (DS 25.6.2.3, table 25-2):
 *   BAUD = 65536 x (1 - S x f_baud / f_ref), f_ref = GCLK0 = 47 972 352 Hz.
 * For 115200: 65536 x (1 - 16 x 115200 / 47972352) = 63018.0 -> actual 115198.6 baud (-0.001 %).
 * Computed in 64 bits at compile time, rounded to nearest. */
#define UART_BAUD_REG \
    ((uint16_t)(65536u - (uint32_t)((65536ull * 16u * UART_BAUD + GCLK0_HZ / 2u) / GCLK0_HZ)))
#if UART_BAUD * 16u > GCLK0_HZ
#error "UART_BAUD above f_ref / 16"
#endif

/* SPI pads (DS 27.8.1 CTRLA): DIPO[21:20] = 3: MISO on PAD[3]; DOPO[17:16] = 0: MOSI on PAD[0],
 * SCK on PAD[1] (Arduino: PAD_SPI_TX SPI_PAD_0_SCK_1, PAD_SPI_RX SERCOM_RX_PAD_3). CPOL = CPHA = 0
 * (SPI mode 0, what SD's SPI mode uses), 8-bit characters. Synchronous baud (DS 25.6.2.3, table
 * 25-2): f_SCK = f_ref / (2 x (BAUD + 1)). */
#define SPI_DIPO(p) ((uint32_t)(p) << 20)
#define SPI_DOPO(p) ((uint32_t)(p) << 16)
/* 12 MHz (BAUD = 1) is the fastest we ask for: what Arduino's SPI library allows on the SAM D21
 * (SPI_MIN_CLOCK_DIVIDER) and what boards/mkr1000.yaml's paging costs assume. The datasheet's SPI
 * timing table (DS 37) was not checked for a higher limit (unverified). */
#define SPI_MAX_HZ 12000000u

/* ---- TC in 32-bit mode (DS 30.8, COUNT32 register map) -------------------------------------- */

/* COUNT32 pairs an even TC with the next odd one; the even one (TC4) holds the registers, TC5
 * acts as its slave (DS 30.6.2.4, "Counter Mode"). Both need their APB clock. */
#define TC_CTRLA REG16(TC4 + 0x00u)
#define TC_READREQ REG16(TC4 + 0x02u)
#define TC_STATUS REG8(TC4 + 0x0Fu)
#define TC_COUNT REG32(TC4 + 0x10u)
#define TC_CTRLA_SWRST (1u << 0)
#define TC_CTRLA_ENABLE (1u << 1)
#define TC_CTRLA_COUNT32 (2u << 2) /* MODE; WAVEGEN = 0 (NFRQ: wraps at 2^32), PRESCALER = 0 (/1) */
#define TC_READREQ_RREQ (1u << 15)
#define TC_READREQ_COUNT 0x10u /* ADDR: the COUNT register's offset */
#define TC_STATUS_SYNCBUSY (1u << 7)

/* ---- Cortex-M0+ system registers (ARMv6-M ARM, B3) ------------------------------------------ */

#define SYST_CSR REG32(0xE000E010u)   /* B3.3.3: SysTick control */
#define NVIC_ISER REG32(0xE000E100u)  /* B3.4: set-enable */
#define NVIC_ICER REG32(0xE000E180u)  /* clear-enable */
#define NVIC_ICPR REG32(0xE000E280u)  /* clear-pending */
#define SERCOM5_IRQ 14u                /* DS 11.2.2, table 11-3 */

/* ---- Pins (ArduinoCore-samd variants/mkr1000/variant.cpp) ----------------------------------- */

#define PA 0u
#define PB 1u
#define UART_TX_PIN 22u /* PB22, D14 "TX", SERCOM5/PAD[2], function D */
#define UART_RX_PIN 23u /* PB23, D13 "RX", SERCOM5/PAD[3], function D */
#define SPI_MOSI_PIN 16u /* PA16, D8 "MOSI", SERCOM1/PAD[0], function C */
#define SPI_SCK_PIN 17u  /* PA17, D9 "SCK",  SERCOM1/PAD[1], function C */
#define SPI_MISO_PIN 19u /* PA19, D10 "MISO", SERCOM1/PAD[3], function C */
/* Chip select: D4 by default, where the MKR SD Proto Shield wires its card's CS; on the MKR1000
 * D4 is PB10 (variant.cpp row 04), not PA07 (that is A6). Override for other wiring with
 * -DSD_CS_GROUP=... -DSD_CS_PIN=... */
#ifndef SD_CS_GROUP
#define SD_CS_GROUP PB
#endif
#ifndef SD_CS_PIN
#define SD_CS_PIN 10u
#endif
/* The op marker (port_mark): D0 = PA22 by default (variant.cpp row 00), a header pin neither the
 * UART (PB22/PB23) nor the SD card (PA16/PA17/PA19, CS) uses, for a PPK2 logic input.
 * -DPOET_MARK_GROUP=... -DPOET_MARK_PIN=... for another. */
#ifndef POET_MARK_GROUP
#define POET_MARK_GROUP PA
#endif
#ifndef POET_MARK_PIN
#define POET_MARK_PIN 22u
#endif
#if (POET_MARK_GROUP == PB && (POET_MARK_PIN == UART_TX_PIN || POET_MARK_PIN == UART_RX_PIN)) || \
    (POET_MARK_GROUP == PA && (POET_MARK_PIN == SPI_MOSI_PIN || POET_MARK_PIN == SPI_SCK_PIN || \
                               POET_MARK_PIN == SPI_MISO_PIN)) || \
    (POET_MARK_GROUP == SD_CS_GROUP && POET_MARK_PIN == SD_CS_PIN)
#error "POET_MARK_PIN is a UART or SD card pin"
#endif

/* Bounds on the clock set-up's busy-waits, in loop passes. At reset the core runs at 1 MHz (OSC8M
 * with its reset prescaler /8, DS 17.8 OSC8M.PRESC; the bootloader's own delay loops assume it)
 * and a pass takes a few cycles, so 10^6 passes are several seconds: more than the crystal's 2 s
 * start-up, and only reached when the crystal or the DFLL is broken, which must not hang the board
 * for good. */
#define CLOCK_POLLS 1000000u

/* 512 B like qemu-m0 (the same RAM budget). The host sends one request and waits for the reply, so
 * bytes queue here only while the core is between reads of one frame; a full ring drops the byte
 * (Serial1 has no flow control), and the frame's CRC check then rejects that request. */
#define RING 512u
#include "../shared/rx_ring.h"

/* For a debugger: receive errors (framing, overflow) and bytes dropped with the ring full, and
 * whether the DFLL runs in closed loop (0: the crystal did not start; open loop, ~48 MHz +- a few %). */
static volatile uint32_t rx_errors, rx_dropped;
static volatile uint32_t clock_closed_loop;

static void gclk_sync(void)
{
    while (GCLK_STATUS & GCLK_STATUS_SYNCBUSY)
        ;
}

static void dfll_sync(void)
{
    uint32_t i;
    for (i = 0; i < CLOCK_POLLS && !(SYSCTRL_PCLKSR & PCLKSR_DFLLRDY); i++)
        ;
}

/* GCLK0 (the CPU, buses, TC4 and the SERCOMs) = DFLL48M locked to XOSC32K, the sequence of
 * Arduino's SystemInit (cores/arduino/startup.c), which the datasheet's closed-loop procedure
 * describes (DS 17.6, DFLL48M "Closed-Loop Operation"). The bootloader jumps to us before it
 * configures any clock (bootloaders/zero/main.c: check_start_application runs before board_init),
 * so we start from the reset state, 1 MHz on OSC8M; the code does not rely on that either (a SAM-BA
 * "G" command, or a debugger, may start it with clocks set up). */
static uint32_t clock_init(void)
{
    uint32_t i, coarse, closed;

    /* Wait states first: flash must be slowed down before the clock goes above 24 MHz. Manual page
     * writes (MANW) from here on, before anything could store into the flash's address space. */
    NVMCTRL_CTRLB = (NVMCTRL_CTRLB & ~NVM_RWS_MASK) | NVM_RWS(1u) | NVM_MANW;
    PM_APBAMASK |= PM_APBAMASK_GCLK; /* on after reset; set in case someone turned it off */

    /* Back to the reset clocking (GCLK0 = OSC8M) so the DFLL can be reconfigured while nothing
     * runs from it. SWRST and SYNCBUSY both clear when the reset is done (DS 15.8.1 CTRL,
     * 15.8.2 STATUS). */
    GCLK_CTRL = GCLK_CTRL_SWRST;
    while ((GCLK_CTRL & GCLK_CTRL_SWRST) || (GCLK_STATUS & GCLK_STATUS_SYNCBUSY))
        ;

    /* XOSC32K: configure, then enable in a second write (DS 17.6.3, the order Arduino follows).
     * Left alone if it already runs (a clock-configured start). */
    if (!(SYSCTRL_PCLKSR & PCLKSR_XOSC32KRDY)) {
        SYSCTRL_XOSC32K = XOSC32K_STARTUP(6u) | XOSC32K_XTALEN | XOSC32K_EN32K;
        SYSCTRL_XOSC32K = XOSC32K_STARTUP(6u) | XOSC32K_XTALEN | XOSC32K_EN32K | XOSC32K_ENABLE;
        for (i = 0; i < CLOCK_POLLS && !(SYSCTRL_PCLKSR & PCLKSR_XOSC32KRDY); i++)
            ;
    }
    closed = (SYSCTRL_PCLKSR & PCLKSR_XOSC32KRDY) ? 1u : 0u;

    if (closed) {
        /* Generator 1 = XOSC32K, undivided, and it feeds the DFLL's reference channel. */
        GCLK_GENDIV = GENDIV(1u, 0u);
        gclk_sync();
        GCLK_GENCTRL = GENCTRL(1u, GCLK_SRC_XOSC32K);
        gclk_sync();
        GCLK_CLKCTRL = CLKCTRL(GCLK_ID_DFLL48M_REF, 1u);
        gclk_sync();
    }

    /* SAM D21 erratum 9905 (DFLL48M): a write to DFLLVAL or DFLLMUL while the DFLL is not running can
     * freeze the device. The workaround, as in Arduino's SystemInit (cores/arduino/startup.c, "Remove
     * the OnDemand mode, Bug ... 9905") and ASF's _system_clock_source_dfll_set_config_errata_9905
     * (sam0/drivers/system/clock/clock_samd21_r21/clock.c): ONDEMAND cleared and the DFLL enabled
     * (open loop) before those registers are touched, each write followed by DFLLRDY. Nothing runs
     * from the DFLL yet (GCLK0 is back on OSC8M since the GCLK reset), so restarting it is harmless. */
    SYSCTRL_DFLLCTRL = DFLLCTRL_ENABLE;
    dfll_sync();
    /* Start from the factory coarse calibration (DS 10.3.2) and the middle fine value, so the open
     * loop is near 48 MHz and the closed loop locks sooner. 0x3F is an unprogrammed row. */
    coarse = NVM_DFLL_COARSE(NVM_CAL_WORD1);
    if (coarse == 0x3Fu)
        coarse = 0x1Fu;
    SYSCTRL_DFLLVAL = DFLLVAL_COARSE(coarse) | DFLLVAL_FINE(512u);
    dfll_sync();
    if (closed) {
        SYSCTRL_DFLLMUL = DFLLMUL_VALUE;
        dfll_sync();
        /* Closed loop on the running DFLL: Arduino's `DFLLCTRL |= MODE | WAITLOCK | QLDIS` as one write.
         * WAITLOCK (output gated until lock) is left out: nothing is switched to the DFLL before the
         * lock flags below are seen. */
        SYSCTRL_DFLLCTRL = DFLLCTRL_MODE | DFLLCTRL_QLDIS | DFLLCTRL_ENABLE;
        dfll_sync();
        /* Coarse then fine lock (PCLKSR.DFLLLCKC/F) before the CPU switches to it. */
        for (i = 0; i < CLOCK_POLLS && (SYSCTRL_PCLKSR & (PCLKSR_DFLLLCKC | PCLKSR_DFLLLCKF)) !=
                                           (PCLKSR_DFLLLCKC | PCLKSR_DFLLLCKF); i++)
            ;
    }
    /* else: the DFLL stays in open loop on its factory calibration */

    /* Generator 0 (GCLK_MAIN) = DFLL48M, undivided; CPU and APB buses undivided (DS 16.8). */
    GCLK_GENDIV = GENDIV(0u, 0u);
    gclk_sync();
    GCLK_GENCTRL = GENCTRL(0u, GCLK_SRC_DFLL48M);
    gclk_sync();
    PM_CPUSEL = 0;
    PM_APBASEL = 0;
    PM_APBBSEL = 0;
    PM_APBCSEL = 0;

    /* The peripherals we use: APB clocks (PM) and their core clocks from generator 0 (GCLK). */
    PM_APBCMASK |= PM_APBCMASK_SERCOM1 | PM_APBCMASK_SERCOM5 | PM_APBCMASK_TC4 | PM_APBCMASK_TC5;
    GCLK_CLKCTRL = CLKCTRL(GCLK_ID_SERCOM1_CORE, 0u);
    gclk_sync();
    GCLK_CLKCTRL = CLKCTRL(GCLK_ID_SERCOM5_CORE, 0u);
    gclk_sync();
    GCLK_CLKCTRL = CLKCTRL(GCLK_ID_TC4_TC5, 0u);
    gclk_sync();
    return closed;
}

/* ---- Ticks ---------------------------------------------------------------------------------- */

static void tc_sync(void)
{
    while (TC_STATUS & TC_STATUS_SYNCBUSY)
        ;
}

/* A free-running 32-bit up-counter at GCLK0 (47.97 MHz, wraps every 89.5 s). A peripheral counter
 * rather than the core's SysTick (24 bits) keeps counting while the core sleeps in WFI, and needs
 * no interrupt to extend it. */
static void tick_init(void)
{
    TC_CTRLA = TC_CTRLA_SWRST;
    while ((TC_CTRLA & TC_CTRLA_SWRST) || (TC_STATUS & TC_STATUS_SYNCBUSY))
        ;
    TC_CTRLA = TC_CTRLA_COUNT32; /* enable-protected fields first, ENABLE in a second write */
    tc_sync();
    TC_CTRLA = TC_CTRLA_COUNT32 | TC_CTRLA_ENABLE;
    tc_sync();
}

/* COUNT lives in the TC's clock domain: a read request synchronises it into the readable register,
 * done when STATUS.SYNCBUSY clears (DS 30.6, "Synchronization"; READREQ, DS 30.8.2). */
uint32_t port_ticks(void)
{
    TC_READREQ = TC_READREQ_RREQ | TC_READREQ_COUNT;
    tc_sync();
    return TC_COUNT;
}

uint32_t port_tick_hz(void) { return TICK_HZ; }

/* OUTSET/OUTCLR: one store each way, so the pulse outlasts the record's ticks by a few cycles. */
void port_mark(int running)
{
    if (running)
        PORT_OUTSET(POET_MARK_GROUP) = 1u << POET_MARK_PIN;
    else
        PORT_OUTCLR(POET_MARK_GROUP) = 1u << POET_MARK_PIN;
}

/* PINCFG cleared (PMUXEN off) in case whatever started us routed the pin to a peripheral: then
 * OUT drives it. */
static void mark_init(void)
{
    PORT_OUTCLR(POET_MARK_GROUP) = 1u << POET_MARK_PIN; /* low before it drives: no stray pulse */
    PORT_PINCFG(POET_MARK_GROUP, POET_MARK_PIN) = 0;
    PORT_DIRSET(POET_MARK_GROUP) = 1u << POET_MARK_PIN;
}

/* ---- Serial: SERCOM5 USART ------------------------------------------------------------------ */

/* RXC is set while a received byte waits in DATA (a two-deep FIFO); reading DATA pops it. STATUS
 * holds the errors of the byte at the head, so it is read first (DS 26.6.2.6, 26.8.8). */
void SERCOM5_Handler(void)
{
    while (SC_INTFLAG(SERCOM5) & SC_INT_RXC) {
        uint16_t st = SC_STATUS(SERCOM5);
        uint8_t b = (uint8_t)SC_DATA16(SERCOM5);
        if (st & UART_STATUS_ERRORS) {
            SC_STATUS(SERCOM5) = st & UART_STATUS_ERRORS;
            rx_errors++;
        }
        if (!ring_full())
            ring_put(b);
        else
            rx_dropped++;
    }
}

int port_getc(void) { return cm_ring_getc(0); }

/* DRE: DATA can take the next byte (the transmitter is double-buffered). 87 us per byte at 115200. */
void port_write(const uint8_t *p, size_t n)
{
    while (n--) {
        while (!(SC_INTFLAG(SERCOM5) & SC_INT_DRE))
            ;
        SC_DATA16(SERCOM5) = *p++;
    }
}

static void sercom_reset(uint32_t s)
{
    SC_CTRLA(s) = SC_CTRLA_SWRST;
    while ((SC_CTRLA(s) & SC_CTRLA_SWRST) || (SC_SYNCBUSY(s) & SC_SYNC_SWRST))
        ;
}

static void sercom_enable(uint32_t s, int on)
{
    if (on)
        SC_CTRLA(s) |= SC_CTRLA_ENABLE;
    else
        SC_CTRLA(s) &= ~SC_CTRLA_ENABLE;
    while (SC_SYNCBUSY(s) & SC_SYNC_ENABLE)
        ;
}

static void uart_init(void)
{
    /* PB22/PB23 to SERCOM5 (function D): one PMUX byte holds the pair, even pin low nibble. */
    PORT_PMUX(PB, UART_TX_PIN) = (uint8_t)(PMUX_D | (PMUX_D << 4));
    PORT_PINCFG(PB, UART_TX_PIN) = PINCFG_PMUXEN;
    PORT_PINCFG(PB, UART_RX_PIN) = PINCFG_PMUXEN;

    sercom_reset(SERCOM5);
    SC_CTRLA(SERCOM5) = SC_CTRLA_MODE(1u) | UART_RXPO(3u) | UART_TXPO(1u) | SC_CTRLA_DORD;
    SC_CTRLB(SERCOM5) = SC_CTRLB_TXEN | SC_CTRLB_RXEN;
    while (SC_SYNCBUSY(SERCOM5) & SC_SYNC_CTRLB)
        ;
    SC_BAUD16(SERCOM5) = UART_BAUD_REG;
    SC_INTENSET(SERCOM5) = SC_INT_RXC;
    sercom_enable(SERCOM5, 1);
    NVIC_ICPR = 1u << SERCOM5_IRQ;
    NVIC_ISER = 1u << SERCOM5_IRQ;
}

/* ---- Pager: SD card on SERCOM1 SPI ---------------------------------------------------------- */

static uint8_t spi_xchg(uint8_t out)
{
    while (!(SC_INTFLAG(SERCOM1) & SC_INT_DRE))
        ;
    SC_DATA32(SERCOM1) = out;
    while (!(SC_INTFLAG(SERCOM1) & SC_INT_RXC))
        ;
    return (uint8_t)SC_DATA32(SERCOM1);
}

static void sd_select(void *ctx, int on)
{
    (void)ctx;
    if (on)
        PORT_OUTCLR(SD_CS_GROUP) = 1u << SD_CS_PIN;
    else
        PORT_OUTSET(SD_CS_GROUP) = 1u << SD_CS_PIN;
}

static uint8_t sd_xchg(void *ctx, uint8_t b)
{
    (void)ctx;
    return spi_xchg(b);
}

/* A whole data block without an indirect call per byte. One byte in flight at a time: simple, and
 * RX can never overflow; at 12 MHz the byte's 0.67 us on the wire dominates the loop anyway. */
static void sd_xchg_buf(void *ctx, const uint8_t *tx, uint8_t *rx, uint32_t n)
{
    uint32_t i;
    (void)ctx;
    for (i = 0; i < n; i++) {
        uint8_t r = spi_xchg(tx ? tx[i] : 0xFFu);
        if (rx)
            rx[i] = r;
    }
}

/* The highest f_SCK = f_ref / (2 (BAUD + 1)) not above hz: BAUD = ceil(f_ref / (2 hz)) - 1, at
 * least 1 (SPI_MAX_HZ). BAUD is enable-protected (DS 27.8.3), so the SERCOM is stopped around it. */
static void sd_set_hz(void *ctx, uint32_t hz)
{
    uint32_t baud;
    (void)ctx;
    if (hz > SPI_MAX_HZ)
        hz = SPI_MAX_HZ;
    baud = (GCLK0_HZ + 2u * hz - 1u) / (2u * hz) - 1u;
    if (baud < 1u)
        baud = 1u;
    if (baud > 255u)
        baud = 255u;
    sercom_enable(SERCOM1, 0);
    SC_BAUD8(SERCOM1) = (uint8_t)baud;
    sercom_enable(SERCOM1, 1);
}

const sd_spi_ops_t port_sd_ops = {0, sd_select, sd_xchg, sd_xchg_buf, port_sd_ms, sd_set_hz};

static void spi_init(void)
{
    /* CS: a GPIO output, high (card deselected) before the pins go to the SERCOM. */
    PORT_OUTSET(SD_CS_GROUP) = 1u << SD_CS_PIN;
    PORT_DIRSET(SD_CS_GROUP) = 1u << SD_CS_PIN;

    /* PA16/PA17 share PMUX[8]; PA19 is the odd half of PMUX[9] (PA18 keeps its setting). */
    PORT_PMUX(PA, SPI_MOSI_PIN) = (uint8_t)(PMUX_C | (PMUX_C << 4));
    PORT_PMUX(PA, SPI_MISO_PIN) = (uint8_t)((PORT_PMUX(PA, SPI_MISO_PIN) & 0x0Fu) | (PMUX_C << 4));
    PORT_PINCFG(PA, SPI_MOSI_PIN) = PINCFG_PMUXEN;
    PORT_PINCFG(PA, SPI_SCK_PIN) = PINCFG_PMUXEN;
    /* MISO pulled up (OUT = 1 selects up) so an absent card reads 0xFF, as the SD driver expects.
     * Whether PULLEN still acts while the SERCOM owns the pin is not stated where we looked in
     * DS 23 (unverified); harmless if not, and SD shields usually pull MISO up themselves. */
    PORT_OUTSET(PA) = 1u << SPI_MISO_PIN;
    PORT_PINCFG(PA, SPI_MISO_PIN) = PINCFG_PMUXEN | PINCFG_PULLEN;

    sercom_reset(SERCOM1);
    SC_CTRLA(SERCOM1) = SC_CTRLA_MODE(3u) | SPI_DIPO(3u) | SPI_DOPO(0u);
    SC_CTRLB(SERCOM1) = SC_CTRLB_RXEN;
    while (SC_SYNCBUSY(SERCOM1) & SC_SYNC_CTRLB)
        ;
    SC_BAUD8(SERCOM1) = (uint8_t)(GCLK0_HZ / (2u * 250000u)); /* ~250 kHz until sd_init picks its own */
    sercom_enable(SERCOM1, 1);
}

/* ---- nv storage: the chip's flash, NVMCTRL (DS 22) ------------------------------------------ */

/* The core keeps the model blob and the frozen weights in nv storage (core/port.h) and reads them in
 * place. Here it is linker.ld's NV region, 160 KiB of the chip's own flash from 0x18000, which the
 * firmware programs itself, as a bootloader would: a new model, new weights or a new schedule then
 * never rebuild or reflash the firmware, and they arrive by the serial protocol's uploads.
 *
 * The NVM (DS 22.6.4, "NVM Read/Write"; 22.8 registers): rows of 4 pages of 64 bytes (PARAM.PSZ =
 * 3 on this chip, checked below); erase by row (ER), write by page (WP) from the page buffer, which
 * is loaded by 16- or 32-bit stores into the flash's address space and cleared to all ones by PBC.
 * "Before writing the page to memory, the accessed row must be erased" (DS 22.6.4.3, "NVM Write").
 * ADDR takes 16-bit word addresses (byte address / 2), as ASF's nvm_execute_command writes it.
 *
 * The core writes sequentially, in multiples of 4 bytes, each upload from a 4096-byte boundary
 * (core/port.h); a write may end inside a page and the next one continue it. A page can only be
 * written whole from the page buffer, and the datasheet allows a write only into an erased row, so
 * writing the same page a second time (its programmed bytes left at 0xFF in the buffer) is not
 * something it allows. (Its electrical characteristics, DS 37 "NVM Characteristics", do say "a
 * max number of 8 consecutive write is allowed per row", which suggests partial rewrites work, but
 * the NVMCTRL chapter does not describe them.) So no page is written twice between erases:
 *   - a write starting on a row boundary erases the row (skipped when it already reads erased);
 *   - a write starting on a page boundary inside a row programs pages the row's erase left blank;
 *   - a write starting inside a page (the previous one ended there) copies the row's bytes written
 *     so far into a 256-byte RAM buffer, erases the row and writes it again from the buffer with the
 *     new bytes: one extra row erase per such write, about one per CHUNK of an upload (1000-byte
 *     chunks end mid-page), each on a different row, well inside the flash's 25k erase cycles
 *     (DS 37, "Flash Endurance").
 * Each page write programs only what the write covers; the rest of the page stays erased (the
 * buffer is all ones after PBC) for the next write.
 *
 * The CPU, which runs from this flash, stalls while the NVM erases a row or writes a page (no
 * read-while-write on the main array), up to a few ms each (DS 37, "NVM Characteristics": page
 * programming and row erase times, table number unverified), and SERCOM5's interrupt waits with it:
 * the USART's two-level receive buffer (DS 26.6.2.6) overflows if more bytes than that arrive, and
 * they are lost. None should: the core programs nv inside the CHUNK handler, before it sends the
 * ACK (core/protocol.c), and the host sends nothing while waiting for it (stop-and-wait), except a
 * retransmission after its timeout, which then fails its CRC and is recovered by the protocol
 * (resent; a repeated seq is answered, not run again). */
#define NV_PAGE 64u
#define NV_ROW 256u

extern const uint8_t __nv_start[], __nv_end[];

/* The row being rewritten (see above). 256 B of .bss, out of the stack's share (linker.ld). */
static uint32_t nv_row[NV_ROW / 4u];

const uint8_t *port_nv(void) { return __nv_start; }
uint32_t port_nv_bytes(void) { return (uint32_t)(__nv_end - __nv_start); }

static void nvm_wait(void)
{
    while (!(NVMCTRL_INTFLAG & NVM_INTFLAG_READY))
        ;
}

/* One NVMCTRL command on the row or page at byte address addr; nonzero on a programming, lock or
 * NVM error (STATUS), e.g. a region locked by the user row's lock bits. The sequence is ASF's
 * nvm_execute_command: cache off, errors cleared, ADDR, command with the key, READY. */
static int nvm_command(uint32_t cmd, uint32_t addr)
{
    uint32_t ctrlb = NVMCTRL_CTRLB;
    int err;
    NVMCTRL_CTRLB = ctrlb | NVM_CACHEDIS;
    nvm_wait();
    NVMCTRL_STATUS = NVM_STATUS_ERRORS;
    NVMCTRL_ADDR = addr / 2u;
    NVMCTRL_CTRLA = (uint16_t)(NVM_CMDEX_KEY | cmd);
    nvm_wait();
    err = (NVMCTRL_STATUS & NVM_STATUS_ERRORS) != 0;
    NVMCTRL_CTRLB = ctrlb;
    return err;
}

/* Program n bytes (a multiple of 4) from src at a, a page boundary in an erased row: page by page,
 * each loaded into the cleared page buffer with 32-bit stores and written by WP. src may sit at any
 * alignment (the core passes a received frame's payload), hence memcpy into a word. */
static int nv_program(uint32_t a, const uint8_t *src, uint32_t n)
{
    while (n) {
        uint32_t k = n < NV_PAGE ? n : NV_PAGE, i, w;
        if (nvm_command(NVM_CMD_PBC, a))
            return 1;
        for (i = 0; i < k; i += 4u) {
            memcpy(&w, src + i, 4u);
            *(volatile uint32_t *)(a + i) = w;
        }
        if (nvm_command(NVM_CMD_WP, a))
            return 1;
        a += k;
        src += k;
        n -= k;
    }
    return 0;
}

int port_nv_write(uint32_t off, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    uint32_t a = (uint32_t)(uintptr_t)__nv_start + off, end;
    if (((off | n) & 3u) || off > port_nv_bytes() || n > port_nv_bytes() - off)
        return 1;
    if (NVM_PARAM_PSZ(NVMCTRL_PARAM) != 3u) /* 64-byte pages, as this code assumes */
        return 1;
    end = a + n;
    while (a < end) {
        uint32_t row = a & ~(NV_ROW - 1u), k = row + NV_ROW - a;
        if (k > end - a)
            k = end - a;
        if (a % NV_PAGE != 0u) {
            /* The previous write ended inside this page: rewrite the row with what it holds. */
            uint32_t kept = a - row;
            memcpy(nv_row, (const void *)row, kept);
            memcpy((uint8_t *)nv_row + kept, s, k);
            if (nvm_command(NVM_CMD_ER, row) || nv_program(row, (const uint8_t *)nv_row, kept + k) ||
                memcmp((const void *)row, nv_row, kept + k) != 0)
                return 1;
        } else {
            if (a == row && !nv_unit_erased((const volatile uint32_t *)row, NV_ROW) && nvm_command(NVM_CMD_ER, row))
                return 1;
            if (nv_program(a, s, k))
                return 1;
        }
        a += k;
        s += k;
    }
    return memcmp(__nv_start + off, src, n) != 0; /* reads back equal, as port.h promises */
}

/* ---- Identity, idle, entry ------------------------------------------------------------------ */

/* ATSAMD21G18A: 32 KB SRAM, 256 KB flash (DS 2, "Configuration Summary"). Flash is the chip's,
 * of which the bootloader keeps 8 KB and nv storage 160 KiB. */
const char *port_board(void) { return "mkr1000"; }
uint32_t port_ram_bytes(void) { return 32768u; }

/* WFI with SCR.SLEEPDEEP = 0 and PM.SLEEP.IDLE = 0 (reset values) is IDLE 0: only the CPU clock
 * stops; GCLK0, TC4 and the SERCOMs keep running (DS 16.6, "Sleep Mode Controller", sleep mode
 * table). */
void port_idle(void) { __asm__ volatile("wfi"); }

int main(void)
{
    /* Whatever a previous owner of the chip left running (the bootloader's SysTick and USB
     * interrupt when started by its "G" command) must not reach our Default_Handler. */
    SYST_CSR = 0;
    NVIC_ICER = 0xFFFFFFFFu;
    NVIC_ICPR = 0xFFFFFFFFu;

    clock_closed_loop = clock_init();
    tick_init();
    mark_init();
    uart_init();
    spi_init();
    __asm__ volatile("cpsie i" ::: "memory");

    poet_run();
    return 0;
}
