/* What every Cortex-M port's Reset_Handler ends with, once it has set the core up: RAM laid out as
 * the linker script says (.data copied from its load image, .bss zeroed), then main. The copy loops
 * are plain integer code, so they are safe before an M4F port's CPACR write has enabled the FPU. */
#ifndef POET_CM_RESET_H
#define POET_CM_RESET_H

#include <stdint.h>

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_bottom;
extern int main(void);

/* Every stack word not yet in use gets this pattern, so the deepest the stack went can be read
 * afterwards (a debugger, or QEMU's monitor): on the 32 KB boards the margin is worth measuring. */
#define STACK_PAINT 0x57A0C0DEu

/* Paints the stack from its bottom to 64 B below the caller's frame, which stays unpainted. */
static inline void cm_paint_stack(void)
{
    uint32_t *dst;
    uintptr_t sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (dst = &__stack_bottom; (uintptr_t)dst < sp - 64u;)
        *dst++ = STACK_PAINT;
}

static inline void cm_start(void)
{
    uint32_t *src, *dst;
    for (src = &__data_load, dst = &__data_start; dst < &__data_end;)
        *dst++ = *src++;
    for (dst = &__bss_start; dst < &__bss_end;)
        *dst++ = 0;
    main();
    for (;;)
        __asm__ volatile("wfi");
}

#endif
