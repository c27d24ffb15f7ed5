/* ESP32-C3 stand-in on QEMU virt (rv32imc, machine mode, no FPU): NS16550A UART with RX by
 * interrupt through the PLIC, the CLINT's mtime as the tick counter, RISC-V semihosting as the
 * pager. What is emulated is the core's ISA and the C3's memory sizes; the C3's own peripherals
 * (UART0/USB-Serial-JTAG, SYSTIMER, SPI SD card) are not: virt's stand in for them. */
#include <stdint.h>

#include "../../core/port.h"
#include "../shared/semihost.h" /* port_semihost: startup.S */

#define REG8(a) (*(volatile uint8_t *)(a))
#define REG32(a) (*(volatile uint32_t *)(a))

/* QEMU hw/riscv/virt.c: UART0 at 0x10000000 on PLIC source 10, registers one byte apart. */
#define UART0 0x10000000u
#define UART_RBR REG8(UART0 + 0u) /* read */
#define UART_THR REG8(UART0 + 0u) /* write */
#define UART_IER REG8(UART0 + 1u)
#define UART_LSR REG8(UART0 + 5u)
#define UART_IER_RX 0x01u
#define UART_LSR_DR 0x01u
#define UART_LSR_THRE 0x20u
#define UART0_IRQ 10u

/* PLIC context 0 is hart 0's machine mode on virt. */
#define PLIC 0x0C000000u
#define PLIC_PRIORITY(irq) REG32(PLIC + 4u * (irq))
#define PLIC_ENABLE0 REG32(PLIC + 0x2000u)
#define PLIC_THRESHOLD0 REG32(PLIC + 0x200000u)
#define PLIC_CLAIM0 REG32(PLIC + 0x200004u)

/* CLINT mtime, 10 MHz on virt (RISCV_ACLINT_DEFAULT_TIMEBASE_FREQ). */
#define MTIME_LO REG32(0x0200BFF8u)

#define MSTATUS_MIE 0x8u
#define MIE_MEIE 0x800u
#define MCAUSE_MEXT 0x8000000Bu

#define RING 512u
#include "../shared/rx_ring.h"

static void semihost_exit(void)
{
    port_semihost(SEMIHOST_SYS_EXIT, (void *)(uintptr_t)0x20023u); /* SYS_EXIT, ADP_Stopped_RunTimeErrorUnknown */
}

/* When the ring is full the handler leaves the byte in the UART and masks the UART's RX
 * interrupt; QEMU then holds back further input (the UART can't accept), so nothing is dropped.
 * port_getc takes the byte left behind by polling LSR once the ring is drained. */
static void uart_rx(void)
{
    while (UART_LSR & UART_LSR_DR) {
        if (ring_full()) {
            UART_IER = 0;
            return;
        }
        ring_put(UART_RBR);
    }
}

/* Any exception (not an interrupt) is a bug: end the emulation so the host sees the serial line
 * close at once instead of waiting for a timeout. */
__attribute__((interrupt("machine"), aligned(4))) void trap_handler(void)
{
    uint32_t cause, irq;
    __asm__ volatile("csrr %0, mcause" : "=r"(cause));
    if (cause != MCAUSE_MEXT) {
        semihost_exit();
        for (;;)
            __asm__ volatile("wfi");
    }
    while ((irq = PLIC_CLAIM0) != 0u) {
        if (irq == UART0_IRQ)
            uart_rx();
        PLIC_CLAIM0 = irq; /* complete */
    }
}

int port_getc(void)
{
    for (;;) {
        int c;
        __asm__ volatile("csrc mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
        if ((c = ring_get()) >= 0) {
            UART_IER = UART_IER_RX;
            __asm__ volatile("csrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
            return c;
        }
        if (UART_LSR & UART_LSR_DR) { /* a byte the handler left behind when the ring was full */
            c = UART_RBR;
            UART_IER = UART_IER_RX;
            __asm__ volatile("csrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
            return c;
        }
        /* WFI wakes on a pending enabled interrupt even with mstatus.MIE clear, so a byte that
         * arrives between the checks above and the WFI is not missed; it is taken after csrs. */
        __asm__ volatile("wfi\n\tcsrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
    }
}

void port_write(const uint8_t *p, size_t n)
{
    while (n--) {
        while (!(UART_LSR & UART_LSR_THRE))
            ;
        UART_THR = *p++;
    }
}

/* The low word of the 64-bit mtime is itself a free-running counter wrapping at 2^32, which is
 * all the core asks for, so there is no high/low tearing to guard against. */
uint32_t port_ticks(void) { return MTIME_LO; }
uint32_t port_tick_hz(void) { return 10000000u; }

const char *port_board(void) { return "esp32c3"; }
/* ESP32-C3 Series Datasheet: 400 KB SRAM, 16 KB of it the flash cache (sec. 3.1.5 "Cache"). */
uint32_t port_ram_bytes(void) { return 393216u; }
void port_idle(void) { __asm__ volatile("wfi"); }

void port_init(void)
{
    /* The FIFOs stay off as reset left them: enabling them flushes the receiver, and the host may
     * have sent its first bytes already (QEMU starts the guest when the host connects). */
    UART_IER = UART_IER_RX;
    PLIC_PRIORITY(UART0_IRQ) = 1u;
    PLIC_THRESHOLD0 = 0u;
    PLIC_ENABLE0 = 1u << UART0_IRQ;
    __asm__ volatile("csrs mie, %0" ::"r"(MIE_MEIE));
    __asm__ volatile("csrs mstatus, %0" ::"r"(MSTATUS_MIE) : "memory");
}
