/* Vector table and reset for the Cortex-M4F on QEMU mps2-an386. */
#include <stdint.h>

#include "../shared/cm_reset.h"

extern uint32_t __stack_top;
void Reset_Handler(void);
void Fault_Handler(void); /* Fault_Handler and Default_Handler: shared/mps2.c */
void Default_Handler(void);
void UART0_RX_IRQHandler(void);

/* 16 system exceptions + the mps2-an386 IRQs up to UART0 TX (IRQ 1). */
__attribute__((section(".vectors"), used)) static void (*const vectors[16 + 32])(void) = {
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
    UART0_RX_IRQHandler, /* IRQ 0: UART0 RX (QEMU hw/arm/mps2.c: uartirq[] = {0, 2, 4, 18, 20}) */
    [17 ... 16 + 31] = Default_Handler,
};

/* Reset must not touch the FPU before CPACR enables it, so the copy loops are plain integer code. */
void Reset_Handler(void)
{
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    cm_start();
}
