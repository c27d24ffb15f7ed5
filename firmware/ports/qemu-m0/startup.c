/* Vector table and reset for the Cortex-M0+ (ARMv6-M) image, run on QEMU mps2-an385.
 * ARMv6-M has no MemManage/BusFault/UsageFault (every fault escalates to HardFault), no CPACR
 * (there is no FPU to enable) and at most 32 external IRQs; the table is laid out for that. */
#include <stdint.h>

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_bottom, __stack_top;
extern int main(void);
void Reset_Handler(void);
void Fault_Handler(void);
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

/* Every stack word not yet in use gets this pattern, so the deepest the stack ever went can be read
 * from RAM afterwards (a debugger or QEMU's monitor): with 32 KB the margin is worth measuring. */
#define STACK_PAINT 0x57A0C0DEu

/* Soft float: nothing to enable before C code runs, so reset only copies .data, clears .bss and
 * paints the stack below its own frame. */
void Reset_Handler(void)
{
    uint32_t *src, *dst;
    uintptr_t sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (dst = &__stack_bottom; (uintptr_t)dst < sp - 64u;) /* 64 B below our frame stay unpainted */
        *dst++ = STACK_PAINT;
    for (src = &__data_load, dst = &__data_start; dst < &__data_end;)
        *dst++ = *src++;
    for (dst = &__bss_start; dst < &__bss_end;)
        *dst++ = 0;
    main();
    for (;;)
        __asm__ volatile("wfi");
}

/* A fault ends the emulation (semihosting SYS_EXIT; on ARMv6-M semihosting is `bkpt 0xab` as on
 * v7-M) instead of hanging: the host sees the serial connection close and reports it. */
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
