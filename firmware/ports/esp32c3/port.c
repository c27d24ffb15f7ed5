/* The ESP32-C3 itself, bare metal (no ESP-IDF): the serial link on UART0 or on the chip's
 * USB-Serial/JTAG controller (chosen at build time, below), SYSTIMER unit 0 as the 16 MHz tick
 * counter, an SD card in SPI mode as the pager (drivers/sd_spi.c) on bit-banged GPIOs, the
 * op marker (port_mark) on GPIO4, and nv storage (the model blob and frozen weights) in 1 MiB of the
 * SPI flash, written with the ROM's flash functions and read in place through the flash cache.
 *
 * The link, -DPOET_C3_USB=0 or 1 (port.mk: one image each):
 *   0  UART0 on GPIO21 (TX) / GPIO20 (RX), 115200 8N1: boards whose USB connector goes to a USB-UART
 *      bridge on those pins, as the ESP32-C3-DevKitM-1's and DevKitC-02's micro-USB does (their user
 *      guides' block diagrams: USB-to-UART bridge to U0TXD/U0RXD). `make esp32c3`, the default;
 *   1  the USB-Serial/JTAG controller on GPIO18/19 (enumerates as 303a:1001): boards whose USB
 *      connector is wired to the chip itself (Seeed XIAO ESP32C3, ESP32-C3-DevKit-RUST-1, the
 *      "SuperMini" boards). `make esp32c3-usb`.
 *
 * Sources for every address and bit below: ESP32-C3 Technical Reference Manual (TRM), cited by
 * chapter name, cross-checked against ESP-IDF's register headers for the chip
 * (components/soc/esp32c3/{include,register}/soc/<block>_reg.h, reg_base.h, interrupts.h), whose
 * file is named where it is the more precise source; tests/test_port_registers.py checks each
 * against those headers. Built, imaged with esptool and checked statically here
 * (tests/test_port_esp32c3.py); nothing here emulates a C3, so this code has not run: the qemu-rv32
 * port is the executable stand-in (same ISA, same memory sizes). */
#include <stdint.h>
#include <string.h>

#include "../../core/port.h"
#include "../shared/nv_erased.h"
#include "../../core/protocol.h"
#include "../shared/sd_pager.h" /* port_pager_*: ports/shared/sd_pager.c */

#define REG(a) (*(volatile uint32_t *)(uintptr_t)(a))

/* ---- Watchdogs and reset: RTC_CNTL at 0x60008000 (TRM "Watchdog Timers (WDT)" and "Low-power
 * Management"; rtc_cntl_reg.h). The ROM boots with the RTC WDT and TIMG0's MWDT armed in
 * "flash boot" mode (WDT_FLASHBOOT_MOD_EN) and the super watchdog running; a second-stage
 * bootloader would feed or stop them, so this image must. */
#define RTC_CNTL 0x60008000u
#define RTC_CNTL_OPTIONS0 REG(RTC_CNTL + 0x000u)
#define RTC_CNTL_SW_SYS_RST (1u << 31)
#define RTC_CNTL_WDTCONFIG0 REG(RTC_CNTL + 0x090u) /* bit 31 WDT_EN, bit 12 FLASHBOOT_MOD_EN */
#define RTC_CNTL_WDTWPROTECT REG(RTC_CNTL + 0x0A8u)
#define RTC_CNTL_SWD_CONF REG(RTC_CNTL + 0x0ACu)
#define RTC_CNTL_SWD_WPROTECT REG(RTC_CNTL + 0x0B0u)
#define RTC_CNTL_SWD_AUTO_FEED_EN (1u << 31)
#define RTC_CNTL_SWD_DISABLE (1u << 30)
#define WDT_WKEY 0x50D83AA1u /* RTC_CNTL_WDT_WKEY and TIMG_WDT_WKEY: unlocks the WDT registers */
#define SWD_WKEY 0x8F1D312Au /* RTC_CNTL_SWD_WKEY */

/* Timer groups TIMG0 at 0x6001F000, TIMG1 at 0x60020000 (TRM "Timer Group (TIMG)";
 * timer_group_reg.h): WDTCONFIG0 bit 31 WDT_EN, bit 14 FLASHBOOT_MOD_EN, bit 22 CONF_UPDATE_EN
 * (a new configuration takes effect only when this bit is written with it). */
#define TIMG(n) (0x6001F000u + (n) * 0x1000u)
#define TIMG_WDTCONFIG0(n) REG(TIMG(n) + 0x048u)
#define TIMG_WDTWPROTECT(n) REG(TIMG(n) + 0x064u)
#define TIMG_WDT_CONF_UPDATE_EN (1u << 22)

/* ---- SYSTIMER at 0x60023000 (TRM "System Timer (SYSTIMER)"; systimer_reg.h). Its counters run
 * from XTAL_CLK (40 MHz) through a fixed divider of 2.5, i.e. at 16 MHz whatever the CPU clock
 * (ESP-IDF soc_caps.h: SOC_SYSTIMER_FIXED_DIVIDER, 16 ticks per us), and keep counting while the
 * CPU waits in WFI. A read latches the 52-bit value: write UNIT0_UPDATE, wait for VALUE_VALID. */
#define SYSTIMER 0x60023000u
#define SYSTIMER_CONF REG(SYSTIMER + 0x00u)
#define SYSTIMER_UNIT0_OP REG(SYSTIMER + 0x04u)
#define SYSTIMER_TARGET0_CONF REG(SYSTIMER + 0x34u)
#define SYSTIMER_UNIT0_VALUE_LO REG(SYSTIMER + 0x44u)
#define SYSTIMER_COMP0_LOAD REG(SYSTIMER + 0x50u)
#define SYSTIMER_INT_ENA REG(SYSTIMER + 0x64u)
#define SYSTIMER_INT_CLR REG(SYSTIMER + 0x6Cu)
#define SYSTIMER_CLK_EN (1u << 31)
#define SYSTIMER_UNIT0_WORK_EN (1u << 30)
#define SYSTIMER_TARGET0_WORK_EN (1u << 24)
#define SYSTIMER_UNIT0_UPDATE (1u << 30)
#define SYSTIMER_UNIT0_VALUE_VALID (1u << 29)
#define SYSTIMER_PERIOD_MODE (1u << 30) /* TARGET0_CONF; bit 31 = 0 compares against unit 0 */
#define SYSTIMER_TARGET0_INT (1u << 0)
#define TICK_HZ 16000000u
/* The idle backstop (see port_getc): a 100 Hz alarm, 160000 ticks, within the 26-bit period. */
#define BACKSTOP_TICKS (TICK_HZ / 100u)

/* ---- Interrupt matrix, INTERRUPT_CORE0 at 0x600C2000 (TRM "Interrupt Matrix (INTERRUPT)";
 * interrupt_core0_reg.h): one map register per peripheral source at 4 * source, holding the CPU
 * interrupt line (1-31) it drives; per-line enable, type (0 = level), priority (1-15, PRI_n at
 * 0x114 + 4n) and a threshold below which lines are masked. Source numbers: periph_defs.h. The
 * core's mie CSR is not used for these lines on the C3 (ESP-IDF's esprv_intc writes only these
 * registers); mstatus.MIE is the global switch. */
#define INTMTX 0x600C2000u
#define INTMTX_MAP(src) REG(INTMTX + 4u * (src))
#define INTMTX_CPU_INT_ENABLE REG(INTMTX + 0x104u)
#define INTMTX_CPU_INT_TYPE REG(INTMTX + 0x108u)
#define INTMTX_CPU_INT_PRI(line) REG(INTMTX + 0x114u + 4u * (line))
#define INTMTX_CPU_INT_THRESH REG(INTMTX + 0x194u)
#define INTMTX_SOURCES 62u          /* ETS_MAX_INTR_SOURCE */
#define SRC_SYSTIMER_TARGET0 37u    /* ETS_SYSTIMER_TARGET0_EDGE_INTR_SOURCE (a level: SOC_SYSTIMER_INT_LEVEL) */
#define LINE_LINK 9u                /* any free line 1-31: nothing else runs here */
#define LINE_TICK 10u
#define MCAUSE_INTERRUPT 0x80000000u
#define MSTATUS_MIE 0x8u

#ifndef POET_C3_USB
#define POET_C3_USB 0
#endif
#if POET_C3_USB
/* ---- USB-Serial/JTAG at 0x60043000 (TRM "USB Serial/JTAG Controller (USB_SERIAL_JTAG)";
 * usb_serial_jtag_reg.h). The CDC-ACM side is handled by the hardware: EP1 is a 64-byte FIFO
 * each way, read/written a byte at a time through USB_SERIAL_JTAG_EP1_REG. */
#define SRC_LINK 26u                /* ETS_USB_SERIAL_JTAG_INTR_SOURCE */
#define USJ 0x60043000u
#define USJ_EP1 REG(USJ + 0x00u)
#define USJ_EP1_CONF REG(USJ + 0x04u)
#define USJ_INT_ENA REG(USJ + 0x10u)
#define USJ_INT_CLR REG(USJ + 0x14u)
#define USJ_WR_DONE (1u << 0)              /* EP1_CONF: hand the IN FIFO's bytes to the host */
#define USJ_IN_EP_DATA_FREE (1u << 1)      /* EP1_CONF: the IN (to host) FIFO has room */
#define USJ_OUT_EP_DATA_AVAIL (1u << 2)    /* EP1_CONF: the OUT (from host) FIFO holds a byte */
#define USJ_INT_SERIAL_OUT_RECV_PKT (1u << 2)
#define USJ_PACKET 64u
#else
/* ---- UART0 at 0x60000000 (TRM "UART Controller (UART)"; uart_reg.h, and ESP-IDF's
 * hal/esp32c3/uart_ll.h for the sequence). The ROM has it running (its boot log goes out there at
 * 115200) with GPIO20/21 on U0RXD/U0TXD in the IO_MUX, so only its clock, rate and interrupt are
 * set here. The core clock is XTAL_CLK (40 MHz on every C3) undivided, not APB, so the baud rate
 * does not depend on the CPU clock the ROM left. 128-byte FIFOs each way (SOC_UART_FIFO_LEN),
 * read and written a byte per 32-bit access at UART_FIFO_REG (uart_ll_read_rxfifo/write_txfifo).
 * UART_ID's HIGH_SPEED bit is set from reset, so register writes take effect without the
 * UART_UPDATE handshake. */
#define SRC_LINK 21u                /* ETS_UART0_INTR_SOURCE */
#define UART0 0x60000000u
#define UART_FIFO REG(UART0 + 0x00u)
#define UART_INT_ENA REG(UART0 + 0x0Cu)
#define UART_INT_CLR REG(UART0 + 0x10u)
#define UART_CLKDIV REG(UART0 + 0x14u)
#define UART_STATUS REG(UART0 + 0x1Cu)
#define UART_CONF0 REG(UART0 + 0x20u)
#define UART_CONF1 REG(UART0 + 0x24u)
#define UART_CLK_CONF REG(UART0 + 0x78u)
#define UART_RXFIFO_FULL_INT (1u << 0)     /* INT_*: RX FIFO holds at least CONF1.RXFIFO_FULL_THRHD bytes */
#define UART_RXFIFO_CNT_MASK 0x3FFu        /* STATUS[9:0] */
#define UART_TXFIFO_CNT_SHIFT 16u          /* STATUS[25:16] */
#define UART_RXFIFO_FULL_THRHD_MASK 0x1FFu /* CONF1[8:0] */
/* CONF0: PARITY_EN (bit 1) off, BIT_NUM[3:2] = 3 (8 data bits), STOP_BIT_NUM[5:4] = 1 (one stop bit):
 * 8N1, as at reset; the other fields (MEM_CLK_EN among them) are kept. */
#define UART_CONF0_FORMAT_MASK 0x3Eu
#define UART_CONF0_8N1 ((3u << 2) | (1u << 4))
/* CLK_CONF: SCLK_SEL[21:20] = 3 (XTAL_CLK), SCLK_DIV_NUM/A/B = 0 (undivided), SCLK_EN (22), TX_SCLK_EN
 * (24), RX_SCLK_EN (25). */
#define UART_CLK_CONF_XTAL ((3u << 20) | (1u << 22) | (1u << 24) | (1u << 25))
#define UART_FIFO_LEN 128u
#define XTAL_HZ 40000000u
#ifndef UART_BAUD
#define UART_BAUD 115200u
#endif
/* CLKDIV: the divider in sixteenths, integer part in [11:0], fraction in [23:20] (uart_ll_set_baudrate):
 * 40 MHz / 115200 = 347.22 -> 347 + 4/16, 115191 baud (-0.008 %). */
#define UART_DIV16 ((16u * XTAL_HZ + UART_BAUD / 2u) / UART_BAUD)
#define UART_CLKDIV_VALUE ((UART_DIV16 >> 4) | ((UART_DIV16 & 15u) << 20))
#endif

/* ---- GPIO at 0x60004000 and IO_MUX at 0x60009000 (TRM "IO MUX and GPIO Matrix (GPIO, IO_MUX)";
 * gpio_struct.h, io_mux_reg.h). A pad is a plain GPIO with IO_MUX MCU_SEL = 1 (PIN_FUNC_GPIO)
 * and, for output, its GPIO matrix output selector set to SIG_GPIO_OUT_IDX (128,
 * gpio_sig_map.h), so GPIO_OUT/GPIO_ENABLE drive it. */
#define GPIO 0x60004000u
#define GPIO_OUT_W1TS REG(GPIO + 0x08u)
#define GPIO_OUT_W1TC REG(GPIO + 0x0Cu)
#define GPIO_ENABLE_W1TS REG(GPIO + 0x24u)
#define GPIO_ENABLE_W1TC REG(GPIO + 0x28u)
#define GPIO_IN REG(GPIO + 0x3Cu)
#define GPIO_FUNC_OUT_SEL_CFG(n) REG(GPIO + 0x554u + 4u * (n))
#define SIG_GPIO_OUT_IDX 128u
#define IO_MUX_GPIO(n) REG(0x60009000u + 4u + 4u * (n))
#define IO_MUX_FUN_WPU (1u << 8)
#define IO_MUX_FUN_IE (1u << 9)
#define IO_MUX_FUN_DRV_DEFAULT (2u << 10) /* drive strength field's reset value */
#define IO_MUX_MCU_SEL_GPIO (1u << 12)

/* SD card pins (GPIO numbers). Defaults: the ESP32-C3-DevKitM-1's header pins that are free of
 * strapping (2, 8, 9), flash (12-17), USB (18, 19) and UART0 (20, 21) duties; SCK/MOSI/CS are
 * the pads IO_MUX gives FSPICLK/FSPID/FSPICS0 (io_mux_reg.h), MISO is GPIO5 rather than FSPIQ's
 * GPIO2, a strapping pin a card could pull low at reset. Override with -DSD_SCK_PIN=... */
#ifndef SD_SCK_PIN
#define SD_SCK_PIN 6u
#endif
#ifndef SD_MOSI_PIN
#define SD_MOSI_PIN 7u
#endif
#ifndef SD_MISO_PIN
#define SD_MISO_PIN 5u
#endif
#ifndef SD_CS_PIN
#define SD_CS_PIN 10u
#endif
/* The op marker (port_mark): GPIO4 by default, a DevKitM-1 header pin clear of the duties above
 * and of the SD pins, for a PPK2 logic input. Override with -DPOET_MARK_PIN=... */
#ifndef POET_MARK_PIN
#define POET_MARK_PIN 4u
#endif
#if POET_MARK_PIN == SD_SCK_PIN || POET_MARK_PIN == SD_MOSI_PIN || POET_MARK_PIN == SD_MISO_PIN || \
    POET_MARK_PIN == SD_CS_PIN || (POET_MARK_PIN >= 12u && POET_MARK_PIN <= 21u) || POET_MARK_PIN > 21u
#error "POET_MARK_PIN: an SD, flash, USB or UART0 pin, or not a GPIO (0-21)"
#endif

/* Receive ring: the host sends one frame (<= 1032 bytes, spec section 6) and waits for the
 * reply, so a ring larger than a frame never overflows; if it did, the ISR would stop taking
 * bytes and the controller would NAK the host until port_getc drains the FIFO. */
#define RING 2048u
#include "../shared/rx_ring.h"

#if POET_C3_USB
static uint32_t tx_in_packet;                  /* bytes in the IN FIFO not yet handed over */
#endif
static uint32_t spi_half_ticks;                /* SCK half period in ticks; 0 = as fast as the GPIOs go */

void c3_early_init(void);
void trap_handler(void);

/* Called from _start before .bss is zeroed: uses no RAM variables. */
void c3_early_init(void)
{
    uint32_t n;
    RTC_CNTL_WDTWPROTECT = WDT_WKEY;
    RTC_CNTL_WDTCONFIG0 = 0; /* WDT_EN and FLASHBOOT_MOD_EN off */
    RTC_CNTL_WDTWPROTECT = 0;
    for (n = 0; n < 2u; n++) {
        TIMG_WDTWPROTECT(n) = WDT_WKEY;
        TIMG_WDTCONFIG0(n) = TIMG_WDT_CONF_UPDATE_EN; /* all stages off, WDT_EN 0, latched */
        TIMG_WDTWPROTECT(n) = 0;
    }
    /* The super watchdog cannot be stopped through WDTCONFIG0; ESP-IDF's bootloader sets
     * AUTO_FEED_EN (bootloader_super_wdt_auto_feed), DISABLE is the TRM's off switch: both. */
    RTC_CNTL_SWD_WPROTECT = SWD_WKEY;
    RTC_CNTL_SWD_CONF |= RTC_CNTL_SWD_AUTO_FEED_EN | RTC_CNTL_SWD_DISABLE;
    RTC_CNTL_SWD_WPROTECT = 0;
}

#if POET_C3_USB
/* USB RX: clear the "packet received" flag first, then drain the FIFO, so a packet landing
 * during the drain raises it again. When the ring is full the rest stays in the FIFO (the host
 * is NAKed meanwhile) and the interrupt is masked; port_getc then reads the FIFO itself. */
static void link_rx(void)
{
    USJ_INT_CLR = USJ_INT_SERIAL_OUT_RECV_PKT;
    while (USJ_EP1_CONF & USJ_OUT_EP_DATA_AVAIL) {
        if (ring_full()) {
            USJ_INT_ENA = 0;
            return;
        }
        ring_put((uint8_t)USJ_EP1);
    }
}

/* A byte still in the controller's FIFO (left there when the ring was full), or -1. */
static int link_fifo_getc(void)
{
    return (USJ_EP1_CONF & USJ_OUT_EP_DATA_AVAIL) ? (int)(USJ_EP1 & 0xFFu) : -1;
}

static void link_rx_on(void) { USJ_INT_ENA = USJ_INT_SERIAL_OUT_RECV_PKT; }
#else
/* UART RX, the same way: the flag cleared first, then the FIFO drained into the ring (a byte landing
 * after the last check raises the flag again, whether the hardware latches it on arrival or holds it
 * while the FIFO is at the threshold). With the ring full the interrupt is masked and the bytes wait
 * in the 128-byte FIFO, where port_getc reads them; the UART has no flow control, so a host that kept
 * sending past that would lose bytes, which the protocol's stop-and-wait never does. */
static void link_rx(void)
{
    UART_INT_CLR = UART_RXFIFO_FULL_INT;
    while (UART_STATUS & UART_RXFIFO_CNT_MASK) {
        if (ring_full()) {
            UART_INT_ENA = 0;
            return;
        }
        ring_put((uint8_t)UART_FIFO);
    }
}

static int link_fifo_getc(void)
{
    return (UART_STATUS & UART_RXFIFO_CNT_MASK) ? (int)(UART_FIFO & 0xFFu) : -1;
}

static void link_rx_on(void) { UART_INT_ENA = UART_RXFIFO_FULL_INT; }
#endif

/* Every trap comes here (all 32 vector slots, startup.S). Interrupts: mcause = bit 31 | line.
 * An exception is a bug: reset the chip (RTC_CNTL_SW_SYS_RST), so the ROM boots this image
 * again and the host sees the board come back (HELLO) instead of a link that hangs. */
__attribute__((interrupt("machine"))) void trap_handler(void)
{
    uint32_t cause;
    __asm__ volatile("csrr %0, mcause" : "=r"(cause));
    if (!(cause & MCAUSE_INTERRUPT)) {
        RTC_CNTL_OPTIONS0 = RTC_CNTL_SW_SYS_RST;
        for (;;)
            ;
    }
    switch (cause & 0x1Fu) {
    case LINE_LINK:
        link_rx();
        break;
    case LINE_TICK:
        SYSTIMER_INT_CLR = SYSTIMER_TARGET0_INT; /* nothing else to do: it only ends a WFI */
        break;
    default:
        break;
    }
}

/* WFI with mstatus.MIE clear wakes on a pending interrupt by the RISC-V privileged spec, but
 * whether the C3's interrupt matrix wakes a WFI whose interrupt cannot be taken is not
 * documented (unverified), so this does not rely on it: MIE on, then WFI. A byte that arrives
 * between the empty check and the WFI is taken by the ISR just before the WFI, which then
 * sleeps until the next interrupt; the 100 Hz SYSTIMER alarm bounds that to 10 ms. */
int port_getc(void)
{
    for (;;) {
        int c;
        __asm__ volatile("csrc mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
        c = ring_get();
        if (c < 0)
            c = link_fifo_getc(); /* left behind when the ring was full */
        if (c >= 0) {
            link_rx_on(); /* the ring has room again */
            __asm__ volatile("csrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
            return c;
        }
        __asm__ volatile("csrs mstatus, %0\n\twfi" ::"r"(MSTATUS_MIE) : "memory");
    }
}

#if POET_C3_USB
static void usb_wait_free(void)
{
    /* Blocks while the host is not reading (the port not open): the core only writes replies
     * to requests, so a host is there; if it went away mid-reply, the write resumes when it
     * reads again and the host resynchronises on the next frame's sync byte. */
    while (!(USJ_EP1_CONF & USJ_IN_EP_DATA_FREE))
        ;
}

/* TX: fill the 64-byte IN FIFO, hand each full packet over with WR_DONE, and the last partial
 * one at the end of the call. A write ending on a full packet gets a zero-length packet after
 * it, so a host whose bulk read is larger than 64 bytes (Linux cdc-acm reads 128) completes the
 * transfer instead of waiting for more (USB 2.0 spec 5.8.3). That WR_DONE on an empty FIFO sends
 * a zero-length packet is unverified; if it sends nothing, this costs nothing either. */
void port_write(const uint8_t *p, size_t n)
{
    if (!n)
        return;
    while (n--) {
        usb_wait_free();
        USJ_EP1 = *p++;
        if (++tx_in_packet == USJ_PACKET) {
            USJ_EP1_CONF = USJ_WR_DONE;
            tx_in_packet = 0;
        }
    }
    usb_wait_free();
    USJ_EP1_CONF = USJ_WR_DONE; /* the partial packet, or the ZLP after a full one */
    tx_in_packet = 0;
}

static void link_init(void)
{
    /* The USB-Serial/JTAG controller is on and enumerated since reset (the ROM uses it); its
     * FIFO is not flushed, as the host may have sent its first request already. */
    USJ_INT_CLR = USJ_INT_SERIAL_OUT_RECV_PKT;
    USJ_INT_ENA = USJ_INT_SERIAL_OUT_RECV_PKT;
}
#else
static uint32_t uart_tx_count(void) { return (UART_STATUS >> UART_TXFIFO_CNT_SHIFT) & 0x3FFu; }

/* TX: into the 128-byte FIFO as it drains, 87 us a byte at 115200. Returns with the last bytes still
 * going out, which the next write (or nothing) follows. */
void port_write(const uint8_t *p, size_t n)
{
    while (n--) {
        while (uart_tx_count() >= UART_FIFO_LEN)
            ;
        UART_FIFO = *p++;
    }
}

static void link_init(void)
{
    uint32_t i;
    /* The ROM's boot log may still be leaving the FIFO at the ROM's rate: let it go out before the
     * rate is set (128 bytes at 115200 take 11 ms; the bound only keeps a stuck TX from hanging). */
    for (i = 0; i < 1000000u && uart_tx_count(); i++)
        ;
    UART_CLK_CONF = UART_CLK_CONF_XTAL;
    UART_CLKDIV = UART_CLKDIV_VALUE;
    UART_CONF0 = (UART_CONF0 & ~UART_CONF0_FORMAT_MASK) | UART_CONF0_8N1;
    UART_CONF1 = (UART_CONF1 & ~UART_RXFIFO_FULL_THRHD_MASK) | 1u; /* an interrupt per byte */
    /* Not flushed: the host may have sent its first request already. */
    UART_INT_CLR = UART_RXFIFO_FULL_INT;
    UART_INT_ENA = UART_RXFIFO_FULL_INT;
}
#endif

/* The low word of the 52-bit counter is itself a free-running counter wrapping at 2^32, which
 * is all the core asks for. */
uint32_t port_ticks(void)
{
    SYSTIMER_UNIT0_OP = SYSTIMER_UNIT0_UPDATE;
    while (!(SYSTIMER_UNIT0_OP & SYSTIMER_UNIT0_VALUE_VALID))
        ;
    return SYSTIMER_UNIT0_VALUE_LO;
}

uint32_t port_tick_hz(void) { return TICK_HZ; }

/* ---- SD card over bit-banged SPI (mode 0, MSB first, the SD spec's SPI mode). GPSPI2 through
 * the GPIO matrix would be faster, but its routing and clock set-up cannot be checked without a
 * board; plain GPIO writes are simple enough to get right blind. The pager's rate is then set
 * by GPIO access time (a few Mbit/s at most, unmeasured), not by the 20 MHz the board file's
 * aux_storage model assumes: profile the board before trusting paging costs. */
static void spi_delay(void)
{
    uint32_t t0;
    if (!spi_half_ticks)
        return;
    t0 = port_ticks();
    while (port_ticks() - t0 < spi_half_ticks)
        ;
}

static void sd_select(void *ctx, int on)
{
    (void)ctx;
    if (on)
        GPIO_OUT_W1TC = 1u << SD_CS_PIN;
    else
        GPIO_OUT_W1TS = 1u << SD_CS_PIN;
}

/* The card samples MOSI on SCK's rising edge and shifts MISO out after the falling edge, so
 * MISO is read just before the falling edge: the latest point its bit is still valid, which
 * leaves the GPIO input synchroniser (2 APB clocks) the most time. */
static uint8_t sd_xchg(void *ctx, uint8_t out)
{
    uint32_t i, in = 0;
    (void)ctx;
    for (i = 0; i < 8u; i++) {
        if (out & 0x80u)
            GPIO_OUT_W1TS = 1u << SD_MOSI_PIN;
        else
            GPIO_OUT_W1TC = 1u << SD_MOSI_PIN;
        out = (uint8_t)(out << 1);
        spi_delay();
        GPIO_OUT_W1TS = 1u << SD_SCK_PIN;
        spi_delay();
        in = in << 1 | ((GPIO_IN >> SD_MISO_PIN) & 1u);
        GPIO_OUT_W1TC = 1u << SD_SCK_PIN;
    }
    return (uint8_t)in;
}

/* Initialisation needs 100-400 kHz (SD spec 4.4): a half period of TICK_HZ / (2 hz) ticks, 20
 * at 400 kHz; the timer reads add to it, so the clock comes out below 400 kHz, as required. At
 * data-transfer speed no delay is added. */
static void sd_set_hz(void *ctx, uint32_t hz)
{
    (void)ctx;
    spi_half_ticks = hz >= 1000000u ? 0u : TICK_HZ / (2u * hz);
}

const sd_spi_ops_t port_sd_ops = {0, sd_select, sd_xchg, 0, port_sd_ms, sd_set_hz};

static void gpio_output(uint32_t pin, int level)
{
    if (level)
        GPIO_OUT_W1TS = 1u << pin;
    else
        GPIO_OUT_W1TC = 1u << pin;
    IO_MUX_GPIO(pin) = IO_MUX_MCU_SEL_GPIO | IO_MUX_FUN_DRV_DEFAULT;
    GPIO_FUNC_OUT_SEL_CFG(pin) = SIG_GPIO_OUT_IDX;
    GPIO_ENABLE_W1TS = 1u << pin;
}

/* W1TS/W1TC: one store each way, so the pulse outlasts the record's ticks by a few cycles. */
void port_mark(int running)
{
    if (running)
        GPIO_OUT_W1TS = 1u << POET_MARK_PIN;
    else
        GPIO_OUT_W1TC = 1u << POET_MARK_PIN;
}

static void pager_hw_init(void)
{
    gpio_output(SD_CS_PIN, 1);   /* deselected */
    gpio_output(SD_SCK_PIN, 0);  /* CPOL 0 */
    gpio_output(SD_MOSI_PIN, 1); /* the card sees 0xFF filler while idle */
    /* MISO an input with the pad's pull-up, so an absent card reads 0xFF. */
    GPIO_ENABLE_W1TC = 1u << SD_MISO_PIN;
    IO_MUX_GPIO(SD_MISO_PIN) = IO_MUX_MCU_SEL_GPIO | IO_MUX_FUN_DRV_DEFAULT | IO_MUX_FUN_IE | IO_MUX_FUN_WPU;
    sd_set_hz(0, 400000u);
}

/* ---- nv storage (core/port.h): 1 MiB of the SPI flash at offset 0x300000, read in place at
 * 0x3C000000 through the flash cache, written with the ROM's SPI flash functions.
 *
 * The core keeps the model blob and the frozen weights there and reads them in place, so they cost
 * no SRAM. The firmware writes them itself, as a bootloader writes flash, rather than having them
 * flashed with the image: a new model, new weights or a new schedule then never rebuild or reflash
 * the firmware, and they arrive by the serial protocol's uploads.
 *
 * Where: linker.ld (NV_FLASH, NV_BYTES, and the ROM addresses used below, from ESP-IDF's
 * components/esp_rom/esp32c3/ld/esp32c3.rom.ld). Flash offset 0x300000 is the last MiB of the
 * 4 MB flash the image header declares (port.mk: -fs 4MB; the ESP32-C3FN4 in the DevKitM-1's
 * ESP32-C3-MINI-1), far above the image at offset 0 (it fits SRAM, under 400 KB), and a multiple
 * of the MMU's 64 KiB page; 1 MiB is 16 MMU pages, the qemu-rv32 stand-in's NV.
 *
 * This image runs from SRAM and the ROM maps no flash for it (linker.ld), so nv_init does what
 * ESP-IDF does between the ROM and the first flash mapping when an app is booted into RAM by the
 * ROM (CONFIG_APP_BUILD_TYPE_RAM: esp_system/port/cpu_start.c ram_app_init ->
 * bootloader_flash_hardware_init, in bootloader_support/bootloader_flash/src/
 * bootloader_flash_config_esp32c3.c, and what the second-stage bootloader does in the same state):
 *   1. cache and MMU (hal/cache_hal.c cache_hal_init, hal/mmu_hal.c mmu_hal_init): ICache on,
 *      its IBUS and DBUS opened (EXTMEM_ICACHE_CTRL1 SHUT_IBUS/SHUT_DBUS cleared), the ROM's
 *      ROM_Boot_Cache_Init (ESP_ROM_RAM_APP_NEEDS_MMU_INIT on the C3), every MMU entry invalid;
 *   2. SPI0 (the cache's) and SPI1 (the ROM functions') as bootloader_init_spi_flash leaves them:
 *      dummy-phase output levels driven (bootloader_flash_set_dummy_out) and CS hold/setup
 *      (bootloader_flash_cs_timing_config);
 *   3. the ROM driver's flash geometry (esp_rom_spiflash_config_param, update_flash_config):
 *      4 MB, 64 KiB blocks, 4 KiB sectors, 256 B pages (the ROM functions check addresses against
 *      the size and split writes at the pages);
 *   4. the mapping, with the cache off while the MMU changes (bootloader_mmap): entries 0-15,
 *      virtual 0x3C000000-0x3C0FFFFF on the data bus, to flash pages 0x30-0x3F (hal/mmu_ll.h: an
 *      entry is the 64 KiB flash page number, bit 8 = invalid).
 * Left out of ESP-IDF's sequence: esp_rom_spiflash_attach (the ROM attached the flash to boot this
 * image from it), pad drive strengths (the ROM booted at the reset ones), the XMC flash start-up
 * flow, the flash "resume" command (nothing here suspends an erase), clearing the status
 * register's protection bits (a protected flash fails the write's read-back: an error, not
 * corruption; ESP-IDF's bootloader clears them on every boot, so a chip that ran an ESP-IDF app is
 * unprotected), and the SPI mode and clock (the ROM sets them from this
 * image's header, DIO at 80 MHz, as it does for a second-stage bootloader, which keeps them; the
 * ROM's boot log reports them, "mode:DIO, clock div:1"). Then a check:
 * 32 bytes at flash offset 0 (this image's header, magic 0xE9) read once with the ROM's
 * esp_rom_spiflash_read on SPI1 and once through the cache, by an MMU entry mapped to flash page 0
 * for the purpose; if they differ the mapping is not trusted and port_nv_bytes() is 0 (no model
 * loads; HELLO says so). -DPOET_C3_NV=0 leaves the cache and MMU alone altogether.
 *
 * Writes: a 4 KiB sector is erased when a write reaches its first byte (skipped if it reads
 * erased), then the bytes are programmed with esp_rom_spiflash_write from an aligned RAM copy (the
 * core's data sits at any alignment; the ROM function takes words); the ICache is suspended around
 * each ROM call, as ESP-IDF's flash driver does (cache_hal_suspend/resume), the cache lines of
 * every sector touched are invalidated afterwards (Cache_Invalidate_Addr, as
 * spi_flash_check_and_flush_cache), and the result is read back through the cache. Interrupts stay
 * on: the USB handler and everything it touches are in SRAM, and the USB-Serial/JTAG controller
 * NAKs the host when its FIFO is full, so no byte is lost during a sector erase (tens of ms). */
#ifndef POET_C3_NV
#define POET_C3_NV 1
#endif
#define EXTMEM 0x600C4000u /* DR_REG_EXTMEM_BASE (reg_base.h); extmem_reg.h */
#define EXTMEM_ICACHE_CTRL1 REG(EXTMEM + 0x004u)
#define EXTMEM_ICACHE_SHUT_IBUS (1u << 0)
#define EXTMEM_ICACHE_SHUT_DBUS (1u << 1)
#define MMU_TABLE ((volatile uint32_t *)0x600C5000u) /* DR_REG_MMU_TABLE: 128 entries (ext_mem_defs.h) */
#define MMU_ENTRIES 128u
#define MMU_INVALID (1u << 8)        /* SOC_MMU_INVALID; a valid flash entry is the page number */
#define MMU_PAGE 0x10000u
/* SPI0 (cache) at 0x60003000, SPI1 at 0x60002000 (soc.h REG_SPI_MEM_BASE; spi_mem_reg.h). */
#define SPI_MEM(i) (0x60003000u - 0x1000u * (i))
#define SPI_MEM_CTRL(i) REG(SPI_MEM(i) + 0x008u)
#define SPI_MEM_CTRL2(i) REG(SPI_MEM(i) + 0x010u)
#define SPI_MEM_USER(i) REG(SPI_MEM(i) + 0x018u)
#define SPI_MEM_FDUMMY_OUT (1u << 3)
#define SPI_MEM_Q_POL (1u << 18)
#define SPI_MEM_D_POL (1u << 19)
#define SPI_MEM_CS_HOLD (1u << 6)
#define SPI_MEM_CS_SETUP (1u << 7)
#define SPI_MEM_CS_TIMES(hold, setup) ((uint32_t)(hold) << 5 | (uint32_t)(setup)) /* CTRL2 [9:5], [4:0] */
#define SPI_MEM_CS_TIMES_MASK 0x3FFu
#define FLASH_BYTES 0x400000u /* the image header's 4 MB (port.mk) */
#define NV_SECTOR 4096u

/* ROM functions (addresses in linker.ld; prototypes as ESP-IDF's esp_rom_spiflash.h and
 * esp32c3/rom/cache.h). The esp_rom_spiflash_* ones return 0 on success. */
int esp_rom_spiflash_config_param(uint32_t device_id, uint32_t chip_size, uint32_t block_size,
                                  uint32_t sector_size, uint32_t page_size, uint32_t status_mask);
int esp_rom_spiflash_erase_sector(uint32_t sector);
int esp_rom_spiflash_write(uint32_t dest, const uint32_t *src, int32_t len);
int esp_rom_spiflash_read(uint32_t src, uint32_t *dest, int32_t len);
void ROM_Boot_Cache_Init(void);
void Cache_Enable_ICache(uint32_t autoload);
uint32_t Cache_Disable_ICache(void);
uint32_t Cache_Suspend_ICache(void);
void Cache_Resume_ICache(uint32_t autoload);
int Cache_Invalidate_Addr(uint32_t vaddr, uint32_t size);
/* The ROM's flash chip parameters (esp_rom_spiflash_chip_t, the first member of what this pointer
 * points to: ESP-IDF esp_rom_spiflash.h, esp_rom_spiflash_legacy_data_t). */
struct rom_flash_chip {
    uint32_t device_id, chip_size, block_size, sector_size, page_size, status_mask;
};
extern struct rom_flash_chip *rom_spiflash_legacy_data;

extern const uint8_t __nv_start[], __nv_end[], __nv_flash[];
#define NV_VADDR ((uint32_t)(uintptr_t)__nv_start)
#define NV_FLASH ((uint32_t)(uintptr_t)__nv_flash)
#define NV_BYTES ((uint32_t)(__nv_end - __nv_start))

static uint32_t nv_size;  /* 0 until nv_init has mapped the region and checked the mapping */
static uint32_t nv_buf[64]; /* word-aligned copy of what esp_rom_spiflash_write programs */

const uint8_t *port_nv(void) { return __nv_start; }
uint32_t port_nv_bytes(void) { return nv_size; }

static void nv_init(void)
{
#if POET_C3_NV
    uint32_t i, rom[8], autoload;
    const volatile uint32_t *win = (const volatile uint32_t *)(NV_VADDR + NV_BYTES);
    int ok;
    /* 1. cache_hal_init, mmu_hal_init (autoload, the ICache's preloading, stays off) */
    Cache_Enable_ICache(0);
    EXTMEM_ICACHE_CTRL1 &= ~(EXTMEM_ICACHE_SHUT_IBUS | EXTMEM_ICACHE_SHUT_DBUS);
    ROM_Boot_Cache_Init();
    for (i = 0; i < MMU_ENTRIES; i++)
        MMU_TABLE[i] = MMU_INVALID;
    /* 2. bootloader_flash_set_dummy_out, bootloader_flash_cs_timing_config */
    SPI_MEM_CTRL(0) |= SPI_MEM_FDUMMY_OUT | SPI_MEM_D_POL | SPI_MEM_Q_POL;
    SPI_MEM_CTRL(1) |= SPI_MEM_FDUMMY_OUT | SPI_MEM_D_POL | SPI_MEM_Q_POL;
    SPI_MEM_USER(0) |= SPI_MEM_CS_HOLD | SPI_MEM_CS_SETUP;
    SPI_MEM_CTRL2(0) = (SPI_MEM_CTRL2(0) & ~SPI_MEM_CS_TIMES_MASK) | SPI_MEM_CS_TIMES(0u, 0u);
    SPI_MEM_USER(1) |= SPI_MEM_CS_HOLD | SPI_MEM_CS_SETUP;
    SPI_MEM_CTRL2(1) = (SPI_MEM_CTRL2(1) & ~SPI_MEM_CS_TIMES_MASK) | SPI_MEM_CS_TIMES(1u, 0u);
    if (!rom_spiflash_legacy_data)
        return;
    /* 3. update_flash_config and 4. bootloader_mmap, both with the cache off; one more entry maps
     * flash page 0 (this image's header) for the check below */
    Cache_Disable_ICache();
    ok = esp_rom_spiflash_config_param(rom_spiflash_legacy_data->device_id, FLASH_BYTES, 0x10000u, NV_SECTOR,
                                       0x100u, 0xFFFFu) == 0;
    for (i = 0; i < NV_BYTES / MMU_PAGE; i++)
        MMU_TABLE[i] = NV_FLASH / MMU_PAGE + i;
    MMU_TABLE[NV_BYTES / MMU_PAGE] = 0u;
    Cache_Enable_ICache(0);
    /* The check: 32 bytes at flash offset 0 over SPI1 (cache suspended, as bootloader_flash_read
     * does) and through the cache must agree, and be this image's header. */
    autoload = Cache_Suspend_ICache();
    ok = ok && esp_rom_spiflash_read(0u, rom, (int32_t)sizeof rom) == 0 && (rom[0] & 0xFFu) == 0xE9u;
    Cache_Resume_ICache(autoload);
    for (i = 0; i < 8u; i++)
        ok = ok && win[i] == rom[i];
    Cache_Disable_ICache(); /* unmap the check's page (disabling also empties the cache) */
    MMU_TABLE[NV_BYTES / MMU_PAGE] = MMU_INVALID;
    Cache_Enable_ICache(0);
    nv_size = ok ? NV_BYTES : 0u;
#endif
}

int port_nv_write(uint32_t off, const void *src, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)src;
    uint32_t pos = off, end = off + n, first, last, autoload;
    int err = 0;
    if (((off | n) & 3u) || off > nv_size || n > nv_size - off)
        return 1;
    while (pos < end && !err) {
        uint32_t m = end - pos;
        if (pos % NV_SECTOR == 0u && !nv_unit_erased((const volatile uint32_t *)(NV_VADDR + pos), NV_SECTOR)) {
            autoload = Cache_Suspend_ICache();
            err = esp_rom_spiflash_erase_sector((NV_FLASH + pos) / NV_SECTOR) != 0;
            Cache_Resume_ICache(autoload);
            if (err)
                break;
        }
        /* up to the next sector start (erased first) and at most the buffer */
        if (m > NV_SECTOR - pos % NV_SECTOR)
            m = NV_SECTOR - pos % NV_SECTOR;
        if (m > sizeof nv_buf)
            m = sizeof nv_buf;
        memcpy(nv_buf, s, m);
        autoload = Cache_Suspend_ICache();
        err = esp_rom_spiflash_write(NV_FLASH + pos, nv_buf, (int32_t)m) != 0;
        Cache_Resume_ICache(autoload);
        pos += m;
        s += m;
    }
    /* every sector touched: the erased ones were read by nv_erased, so their old bytes are cached */
    first = off - off % NV_SECTOR;
    last = end + (NV_SECTOR - end % NV_SECTOR) % NV_SECTOR;
    if (last > first)
        Cache_Invalidate_Addr(NV_VADDR + first, last - first);
    return err || memcmp(__nv_start + off, src, n) != 0; /* reads back equal, as port.h promises */
}

const char *port_board(void) { return "esp32c3"; }
/* ESP32-C3 Series Datasheet: 400 KB SRAM, 16 KB of it the flash cache (sec. 3.1.5 "Cache");
 * 4 MB in-package flash (ESP32-C3FN4/FH4, as in the DevKitM-1's module). As boards/esp32c3.yaml says. */
uint32_t port_ram_bytes(void) { return 393216u; }
void port_idle(void) { __asm__ volatile("wfi"); }

static void interrupts_init(void)
{
    uint32_t src;
    /* Whatever the ROM routed goes to line 0, which is never enabled, away from our lines. */
    INTMTX_CPU_INT_ENABLE = 0;
    for (src = 0; src < INTMTX_SOURCES; src++)
        INTMTX_MAP(src) = 0;
    INTMTX_MAP(SRC_LINK) = LINE_LINK;
    INTMTX_MAP(SRC_SYSTIMER_TARGET0) = LINE_TICK;
    INTMTX_CPU_INT_TYPE = 0; /* both sources are levels */
    INTMTX_CPU_INT_PRI(LINE_LINK) = 1u;
    INTMTX_CPU_INT_PRI(LINE_TICK) = 1u;
    INTMTX_CPU_INT_THRESH = 1u; /* lines with priority >= 1 are taken (ESP-IDF's default) */
    INTMTX_CPU_INT_ENABLE = 1u << LINE_LINK | 1u << LINE_TICK;
}

static void systimer_init(void)
{
    SYSTIMER_CONF |= SYSTIMER_CLK_EN | SYSTIMER_UNIT0_WORK_EN;
    /* Target 0 in period mode against unit 0: COMP0_LOAD takes the new period, then enable. */
    SYSTIMER_CONF &= ~SYSTIMER_TARGET0_WORK_EN;
    SYSTIMER_TARGET0_CONF = SYSTIMER_PERIOD_MODE | BACKSTOP_TICKS;
    SYSTIMER_COMP0_LOAD = 1u;
    SYSTIMER_CONF |= SYSTIMER_TARGET0_WORK_EN;
    SYSTIMER_INT_CLR = SYSTIMER_TARGET0_INT;
    SYSTIMER_INT_ENA |= SYSTIMER_TARGET0_INT;
}

int main(void)
{
    systimer_init();
    link_init();
    interrupts_init();
    gpio_output(POET_MARK_PIN, 0);
    pager_hw_init();
    nv_init();
    __asm__ volatile("csrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");

    poet_run();
    return 0;
}
