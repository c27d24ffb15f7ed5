/* Entry, trap vector table and start-up for the ESP32-C3 (rv32imc, machine mode), bare metal.
 *
 * The ROM bootloader loads this image's segments into SRAM (linker.ld) and jumps to _start with
 * its own stack (top of SRAM) and trap vector still in place. So, before anything else: mask
 * interrupts, take our own stack and mtvec, then switch the watchdogs off (port.c) before the
 * slow part, zeroing .bss (the 286 KiB pool). .data needs no copy: the ROM loaded it in place.
 *
 * Vector table: the ESP32-C3's core takes traps in vectored mode (mtvec.MODE = 1), exceptions at
 * the table base and CPU interrupt line n at base + 4n, with the base 256-byte aligned (ESP32-C3
 * TRM, chapter "ESP-RISC-V CPU", interrupt/exception handling; ESP-IDF components/riscv/vectors.S
 * aligns _vector_table to 0x100 and writes mtvec = table | 1). All 32 slots jump to the one C
 * handler, which reads mcause; the slots must be 4-byte `j` instructions, hence norvc. */
    .section .text.vectors, "ax"
    .balign 256
    .global poet_vector_table
    .option push
    .option norvc
poet_vector_table:
    .rept 32
    j trap_handler
    .endr
    .option pop

    .section .text.start, "ax"
    .global _start
_start:
    csrci mstatus, 0x8          /* MIE off: the ROM's vector table is about to be replaced */
    /* gp must not be relaxed against itself: it is not set yet. */
    .option push
    .option norelax
    la gp, __global_pointer$
    .option pop
    la sp, __stack_top
    la t0, poet_vector_table
    ori t0, t0, 1               /* MODE = vectored */
    csrw mtvec, t0
    call c3_early_init          /* watchdogs off; touches no RAM variables */

    /* .tbss and .bss (the ROM loaded .data/.tdata in place, and NOLOAD sections are not in the
     * image, so they hold whatever the ROM or a previous run left) */
    la t1, __bss_start
    la t2, __bss_end
1:  bgeu t1, t2, 2f
    sw zero, 0(t1)
    addi t1, t1, 4
    j 1b
2:  /* picolibc keeps errno thread-local (libm sets it): tp addresses the one TLS block */
    la tp, __tls_base
    call main
3:  wfi
    j 3b
