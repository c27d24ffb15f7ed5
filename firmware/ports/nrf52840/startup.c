/* Vector table and reset for the nRF52840 (Cortex-M4F). IRQ numbers are the peripherals' IDs
 * (nRF52840 PS v1.7, "Memory" chapter, "Instantiation" table: the ID is the IRQ number). */
#include <stdint.h>

#include "../shared/cm_reset.h"

extern uint32_t __stack_top;
void Reset_Handler(void);
void Fault_Handler(void);
void Default_Handler(void);
void UARTE0_UART0_IRQHandler(void);

#define SCB_VTOR (*(volatile uint32_t *)0xE000ED08u)    /* ARMv7-M ARM B3.2.5 */
#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)   /* ARMv7-M ARM B3.2.20 */
#define SCB_AIRCR (*(volatile uint32_t *)0xE000ED0Cu)   /* ARMv7-M ARM B3.2.6 */
#define DHCSR (*(volatile uint32_t *)0xE000EDF0u)       /* ARMv7-M ARM C1.6.2 */

/* 16 system exceptions + 48 nRF52840 IRQs (IDs 0..47; SPIM3 is the last, ID 47). */
__attribute__((section(".vectors"), used)) void (*const poet_vectors[16 + 48])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top,
    Reset_Handler,
    Fault_Handler, /* NMI */
    Fault_Handler, /* HardFault */
    Fault_Handler, /* MemManage */
    Fault_Handler, /* BusFault */
    Fault_Handler, /* UsageFault */
    0, 0, 0, 0,
    Default_Handler, /* SVC */
    Default_Handler, /* DebugMon */
    0,
    Default_Handler, /* PendSV */
    Default_Handler, /* SysTick */
    [16 + 0 ... 16 + 1] = Default_Handler,
    [16 + 2] = UARTE0_UART0_IRQHandler, /* ID 2: UARTE0/UART0 at 0x40002000 */
    [16 + 3 ... 16 + 47] = Default_Handler,
};

/* Reset must not touch the FPU before CPACR enables it, so the copy loops are plain integer code. */
void Reset_Handler(void)
{
    SCB_CPACR |= 0xFu << 20; /* CP10, CP11 full access: the hard-float ABI uses s0-s31 */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    /* Take the interrupts ourselves rather than through the MBR's forwarding table. */
    SCB_VTOR = (uint32_t)(uintptr_t)poet_vectors;
    cm_start();
}

/* With a debugger attached, stop where the fault happened; otherwise reset, so the host sees the
 * board come back (HELLO) instead of a link that hangs until its timeout. */
void Fault_Handler(void)
{
    if (DHCSR & 1u) /* C_DEBUGEN */
        __asm__ volatile("bkpt 0");
    SCB_AIRCR = 0x05FA0004u; /* VECTKEY | SYSRESETREQ */
    for (;;)
        ;
}

void Default_Handler(void)
{
    Fault_Handler();
}
