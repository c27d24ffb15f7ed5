/* Vector table and reset for the Cortex-M4F on QEMU mps2-an386. */
#include <stdint.h>

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
extern int main(void);
void Reset_Handler(void);
void Fault_Handler(void);
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
    uint32_t *src, *dst;
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    for (src = &__data_load, dst = &__data_start; dst < &__data_end;)
        *dst++ = *src++;
    for (dst = &__bss_start; dst < &__bss_end;)
        *dst++ = 0;
    main();
    for (;;)
        __asm__ volatile("wfi");
}

/* A fault ends the emulation (semihosting SYS_EXIT) instead of hanging: the host sees the
 * serial connection close and reports it, rather than waiting for a timeout. */
void Fault_Handler(void)
{
    register uint32_t r0 __asm__("r0") = 0x18u;       /* SYS_EXIT */
    register uint32_t r1 __asm__("r1") = 0x20023u;    /* ADP_Stopped_RunTimeErrorUnknown */
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    for (;;)
        __asm__ volatile("wfi");
}

void Default_Handler(void)
{
    Fault_Handler();
}
