/* Vector table and reset for the ATSAMD21G18A (Cortex-M0+, ARMv6-M) behind Arduino's SAM-BA
 * bootloader. IRQ numbers: SAM D21/DA1 datasheet DS40001882D, sec. 11.2.2 "Interrupt Line Mapping",
 * table 11-3 (SERCOM5 is line 14), and the device's own CMSIS header, samd21g18a.h: 28 lines, 0..27
 * (PERIPH_COUNT_IRQn; the family's table has lines this part lacks; tests/test_port_registers.py
 * checks both numbers against the header). ARMv6-M has only HardFault for faults, no
 * CPACR (no FPU), and VTOR as an option the SAM D21 implements (the bootloader writes it). */
#include <stdint.h>

#include "../shared/cm_reset.h"

extern uint32_t __stack_top;
void Reset_Handler(void);
void Fault_Handler(void);
void Default_Handler(void);
void SERCOM5_Handler(void);

#define SCB_VTOR (*(volatile uint32_t *)0xE000ED08u)  /* ARMv6-M ARM B3.2.5 */
#define SCB_AIRCR (*(volatile uint32_t *)0xE000ED0Cu) /* ARMv6-M ARM B3.2.6 */
#define AIRCR_SYSRESETREQ 0x05FA0004u                  /* VECTKEY 0x05FA | SYSRESETREQ (bit 2) */
#define SERCOM5_IRQ 14u                                /* DS40001882D table 11-3; SERCOM5_IRQn */
#define N_IRQ 28u                                      /* PERIPH_COUNT_IRQn: lines 0..27 */

/* 16 system exceptions + the ATSAMD21G18A's 28 IRQ lines. Not static: the test finds it by name. */
__attribute__((section(".vectors"), used)) void (*const poet_vectors[16 + N_IRQ])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top,
    Reset_Handler,
    Fault_Handler,       /* NMI (EIC NMI pin; nothing here enables it) */
    Fault_Handler,       /* HardFault: the only fault exception on ARMv6-M */
    0, 0, 0, 0, 0, 0, 0, /* reserved on ARMv6-M */
    Default_Handler,     /* SVC */
    0, 0,                /* reserved */
    Default_Handler,     /* PendSV */
    Default_Handler,     /* SysTick */
    [16 ... 16 + SERCOM5_IRQ - 1] = Default_Handler,
    [16 + SERCOM5_IRQ] = SERCOM5_Handler, /* Serial1 (PB22/PB23) RX */
    [16 + SERCOM5_IRQ + 1 ... 16 + N_IRQ - 1] = Default_Handler,
};

/* The bootloader already set MSP and VTOR (bootloaders/zero/main.c); VTOR is set again so the image
 * also works when started some other way (a debugger loading it at 0x2000 and resetting into the
 * bootloader, or the SAM-BA "G" command). Soft float: nothing to enable before C code runs. */
void Reset_Handler(void)
{
    __asm__ volatile("cpsid i" ::: "memory"); /* main enables interrupts once the peripherals are set */
    SCB_VTOR = (uint32_t)(uintptr_t)poet_vectors;
    __asm__ volatile("dsb" ::: "memory");
    cm_paint_stack(); /* read back with a debugger (SWD), as on qemu-m0 */
    cm_start();
}

/* A fault resets the chip (through the bootloader, which starts the image again), so the host sees
 * the board come back and answer HELLO instead of a link that hangs until its timeout. No `bkpt`
 * for an attached debugger as on the nrf52840: on ARMv6-M, whether software may read DHCSR to know
 * is implementation defined, and a bkpt with no debugger inside HardFault locks the core up. */
void Fault_Handler(void)
{
    __asm__ volatile("dsb" ::: "memory");
    SCB_AIRCR = AIRCR_SYSRESETREQ;
    __asm__ volatile("dsb" ::: "memory");
    for (;;)
        ;
}

void Default_Handler(void)
{
    Fault_Handler();
}
