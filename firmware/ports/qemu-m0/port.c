/* MKR1000 (SAMD21, Cortex-M0+) stand-in on QEMU mps2-an385: the same MPS2 peripherals as the
 * qemu-m4 port (CMSDK UART0 with RX by interrupt, CMSDK timer0 as the tick counter, ARM
 * semihosting as the pager), so this driver code mirrors ports/qemu-m4/port.c; what differs is
 * the board identity, its memory sizes and the pool that fits the SAMD21's 32 KB of RAM.
 * Everything here is ARMv6-M: cpsid/cpsie, wfi and bkpt exist on the M0+, and the code is
 * compiled for Thumb-1 + the few 32-bit ARMv6-M instructions (tests/test_port_m0.py checks). */
#include <stdint.h>

#include "../../core/port.h"
#include "../../core/protocol.h"

/* One place decides how the 32 KB are split: port.mk, which documents the budget. */
#ifndef POOL_BYTES
#error "POOL_BYTES comes from ports/qemu-m0/port.mk"
#endif

#define REG(a) (*(volatile uint32_t *)(a))

#define UART0 0x40004000u
#define UART_DATA REG(UART0 + 0x00u)
#define UART_STATE REG(UART0 + 0x04u)
#define UART_CTRL REG(UART0 + 0x08u)
#define UART_INTCLR REG(UART0 + 0x0Cu)
#define UART_BAUDDIV REG(UART0 + 0x10u)
#define UART_TX_FULL 1u
#define UART_RX_FULL 2u
#define UART_CTRL_TX_EN 1u
#define UART_CTRL_RX_EN 2u
#define UART_CTRL_RX_IE 8u
#define UART_INT_RX 2u

#define TIMER0 0x40000000u
#define TIMER_CTRL REG(TIMER0 + 0x00u)
#define TIMER_VALUE REG(TIMER0 + 0x04u)
#define TIMER_RELOAD REG(TIMER0 + 0x08u)

#define NVIC_ISER0 REG(0xE000E100u)
#define UART0_RX_IRQ 0u

/* 512 B like qemu-m4, for the request bursts the host pipelines; the ring-full path below would
 * keep a smaller ring correct too, but the pool is sized in whole KiB and would not gain. */
#define RING 512u

static union {
    uint64_t align;
    uint8_t bytes[POOL_BYTES];
} pool;

static volatile uint8_t ring[RING];
static volatile uint32_t ring_head, ring_tail; /* head written by the ISR, tail by getc */
static int swap_fd = -1;

/* When the ring is full the ISR leaves the byte in the UART and masks its interrupt; QEMU then
 * holds back further input (the UART can't accept), so nothing is ever dropped. The UART raises
 * its RX interrupt only when a byte arrives, not when the interrupt is unmasked later, so the
 * byte left behind is picked up by port_getc polling RX_FULL once the ring is drained. */
void UART0_RX_IRQHandler(void)
{
    for (;;) {
        UART_INTCLR = UART_INT_RX;
        if (!(UART_STATE & UART_RX_FULL))
            break;
        if (ring_head - ring_tail >= RING) {
            UART_CTRL &= ~UART_CTRL_RX_IE;
            break;
        }
        ring[ring_head % RING] = (uint8_t)UART_DATA;
        ring_head++;
    }
}

int port_getc(void)
{
    for (;;) {
        __asm__ volatile("cpsid i" ::: "memory");
        if (ring_head != ring_tail) {
            int c = ring[ring_tail % RING];
            ring_tail++;
            UART_CTRL |= UART_CTRL_RX_IE;
            __asm__ volatile("cpsie i" ::: "memory");
            return c;
        }
        if (UART_STATE & UART_RX_FULL) { /* the byte the ISR left behind when the ring was full */
            int c = (int)UART_DATA;
            UART_CTRL |= UART_CTRL_RX_IE;
            __asm__ volatile("cpsie i" ::: "memory");
            return c;
        }
        /* WFI wakes on a pending interrupt even with PRIMASK set; no lost-wakeup race. */
        __asm__ volatile("wfi\n\tcpsie i" ::: "memory");
    }
}

void port_write(const uint8_t *p, size_t n)
{
    while (n--) {
        while (UART_STATE & UART_TX_FULL)
            ;
        UART_DATA = *p++;
    }
}

uint32_t port_ticks(void) { return 0xFFFFFFFFu - TIMER_VALUE; }
/* The CMSDK timer counts the MPS2 system clock, 25 MHz in QEMU (source: emulated), not the
 * SAMD21's 48 MHz: ticks are emulator time, and the host converts them with the board's cpi. */
uint32_t port_tick_hz(void) { return 25000000u; }

static int semihost(uint32_t op, void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return (int)r0;
}

int port_pager_open(void)
{
    static const char name[] = "poet-swap.bin";
    uint32_t args[3];
    if (swap_fd >= 0)
        return 0;
    args[0] = (uint32_t)(uintptr_t)name;
    args[1] = 7u; /* "w+b" */
    args[2] = sizeof name - 1u;
    swap_fd = semihost(0x01u, args); /* SYS_OPEN */
    return swap_fd >= 0 ? 0 : -1;
}

static int seek(uint32_t offset)
{
    uint32_t args[2];
    args[0] = (uint32_t)swap_fd;
    args[1] = offset;
    return semihost(0x0Au, args); /* SYS_SEEK: 0 on success */
}

/* SYS_WRITE (0x05) and SYS_READ (0x06) take the same arguments and return the bytes not moved. */
static int transfer(uint32_t op, uint32_t offset, uintptr_t buf, uint32_t n)
{
    uint32_t args[3];
    if (port_pager_open() || seek(offset))
        return -1;
    args[0] = (uint32_t)swap_fd;
    args[1] = (uint32_t)buf;
    args[2] = n;
    return semihost(op, args) == 0 ? 0 : -1;
}

int port_pager_write(uint32_t offset, const void *src, uint32_t n) { return transfer(0x05u, offset, (uintptr_t)src, n); }

int port_pager_read(uint32_t offset, void *dst, uint32_t n) { return transfer(0x06u, offset, (uintptr_t)dst, n); }

/* SAMD21G18A (the MKR1000's MCU): 32 KB SRAM, 256 KB flash. source: datasheet
 * (Microchip SAM D21 family datasheet DS40001882, sec. 2 "Configuration Summary"). */
const char *port_board(void) { return "mkr1000"; }
uint32_t port_ram_bytes(void) { return 32768u; }
uint32_t port_flash_bytes(void) { return 262144u; }
uint8_t *port_pool(void) { return pool.bytes; }
uint32_t port_pool_bytes(void) { return POOL_BYTES; }
void port_idle(void) { __asm__ volatile("wfi"); }

int main(void)
{
    TIMER_CTRL = 0;
    TIMER_RELOAD = 0xFFFFFFFFu;
    TIMER_VALUE = 0xFFFFFFFFu;
    TIMER_CTRL = 1u;

    UART_BAUDDIV = 16u;
    UART_CTRL = UART_CTRL_TX_EN | UART_CTRL_RX_EN | UART_CTRL_RX_IE;
    NVIC_ISER0 = 1u << UART0_RX_IRQ;
    __asm__ volatile("cpsie i" ::: "memory");

    poet_run();
    return 0;
}
