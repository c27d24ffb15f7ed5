/* Vector table and reset for the Cortex-M0+ (ARMv6-M) image, run on QEMU mps2-an385.
 * ARMv6-M has no MemManage/BusFault/UsageFault (every fault escalates to HardFault), no CPACR
 * (there is no FPU to enable) and at most 32 external IRQs; the table is laid out for that. */
#include <stdint.h>

#include "../shared/cm_reset.h"

extern uint32_t __stack_top;
void Reset_Handler(void);
void Fault_Handler(void); /* Fault_Handler and Default_Handler: shared/mps2.c */
void Default_Handler(void);
void UART0_RX_IRQHandler(void);

/* 16 system exceptions + the 32 IRQs an NVIC of ARMv6-M can have. */
__attribute__((section(".vectors"), used)) static void (*const vectors[16 + 32])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top,
    Reset_Handler,
    Fault_Handler, /* NMI */
    Fault_Handler, /* HardFault: the only fault exception on ARMv6-M */
    0, 0, 0, 0, 0, 0, 0, /* reserved on ARMv6-M (MemManage, BusFault, UsageFault on v7-M) */
    Default_Handler, /* SVC */
    0, 0,            /* reserved (DebugMon on v7-M) */
    Default_Handler, /* PendSV */
    Default_Handler, /* SysTick */
    UART0_RX_IRQHandler, /* IRQ 0: UART0 RX (QEMU hw/arm/mps2.c: uartirq[] = {0, 2, 4, 18, 20}) */
    [17 ... 16 + 31] = Default_Handler,
};

/* Soft float: nothing to enable before C code runs, so reset only paints the stack below its own
 * frame, copies .data and clears .bss. */
void Reset_Handler(void)
{
    cm_paint_stack();
    cm_start();
}
