/* The MPS2 board support the Arm stand-ins share (qemu-m4 on mps2-an386, qemu-m0 on mps2-an385):
 * CMSDK UART0 with RX by interrupt, CMSDK timer0 as the tick counter, semihosting for the pager
 * (shared/semihost_pager.c) and for exits. Everything here is ARMv6-M, so the M0+ build runs it too
 * (cpsid/cpsie, wfi and bkpt exist there). What differs between the two boards, their identity, is
 * each port's own port.c; the pool is shared/pool.c's. */
#include <stdint.h>

#include "../../core/port.h"
#include "semihost.h"

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

#define RING 512u
#include "rx_ring.h"

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
        if (ring_full()) {
            UART_CTRL &= ~UART_CTRL_RX_IE;
            break;
        }
        ring_put((uint8_t)UART_DATA);
    }
}

int port_getc(void)
{
    for (;;) {
        int c;
        __asm__ volatile("cpsid i" ::: "memory");
        if ((c = ring_get()) >= 0) {
            UART_CTRL |= UART_CTRL_RX_IE;
            __asm__ volatile("cpsie i" ::: "memory");
            return c;
        }
        if (UART_STATE & UART_RX_FULL) { /* the byte the ISR left behind when the ring was full */
            c = (int)UART_DATA;
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

/* The CMSDK timer counts the MPS2 system clock, 25 MHz in QEMU (source: emulated), not the boards'
 * own clocks: ticks are emulator time, and the host converts them with the board's cpi and clock. */
uint32_t port_tick_hz(void) { return 25000000u; }

int port_semihost(uint32_t op, void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return (int)r0;
}

void port_idle(void) { __asm__ volatile("wfi"); }

/* The vector tables of both stand-ins (their startup.c) point here. A fault ends the emulation
 * (semihosting SYS_EXIT; on ARMv6-M semihosting is `bkpt 0xab` as on v7-M) instead of hanging: the
 * host sees the serial connection close and reports it, rather than waiting for a timeout. Registers
 * only, no call: the fault may be a stack overflow. */
void Fault_Handler(void);
void Default_Handler(void);

void Fault_Handler(void)
{
    register uint32_t r0 __asm__("r0") = 0x18u;    /* SYS_EXIT */
    register uint32_t r1 __asm__("r1") = 0x20023u; /* ADP_Stopped_RunTimeErrorUnknown */
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    for (;;)
        __asm__ volatile("wfi");
}

void Default_Handler(void)
{
    Fault_Handler();
}

void port_init(void)
{
    TIMER_CTRL = 0;
    TIMER_RELOAD = 0xFFFFFFFFu;
    TIMER_VALUE = 0xFFFFFFFFu;
    TIMER_CTRL = 1u;

    UART_BAUDDIV = 16u;
    UART_CTRL = UART_CTRL_TX_EN | UART_CTRL_RX_EN | UART_CTRL_RX_IE;
    NVIC_ISER0 = 1u << UART0_RX_IRQ;
    __asm__ volatile("cpsie i" ::: "memory");
}
