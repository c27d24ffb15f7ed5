/* Reset and the semihosting trap for the ESP32-C3 stand-in (rv32imc, machine mode) on QEMU virt.
 * With -bios none QEMU's reset vector jumps to the start of DRAM, so _start is linked first there. */
    .section .text.start, "ax"
    .global _start
_start:
    /* gp must not be relaxed against itself: it is not set yet. */
    .option push
    .option norelax
    la gp, __global_pointer$
    .option pop
    la sp, __stack_top
    la t0, trap_handler
    csrw mtvec, t0              /* direct mode: trap_handler is 4-byte aligned */

    /* .data (and .tdata) from their load image in "flash" to RAM */
    la t0, __data_load
    la t1, __data_start
    la t2, __data_end
1:  bgeu t1, t2, 2f
    lw t3, 0(t0)
    sw t3, 0(t1)
    addi t0, t0, 4
    addi t1, t1, 4
    j 1b
2:  /* .tbss and .bss */
    la t1, __bss_start
    la t2, __bss_end
3:  bgeu t1, t2, 4f
    sw zero, 0(t1)
    addi t1, t1, 4
    j 3b
4:  /* picolibc keeps errno thread-local (libm sets it): tp addresses the one TLS block */
    la tp, __tls_base
    call main
5:  wfi
    j 5b

/* int port_semihost(uint32_t op, void *arg): QEMU recognises a semihosting call by this exact
 * three-instruction sequence, uncompressed and within one page, hence norvc and the alignment. */
    .section .text.port_semihost, "ax"
    .global port_semihost
    .balign 16
    .option push
    .option norvc
port_semihost:
    slli x0, x0, 0x1f
    ebreak
    srai x0, x0, 7
    ret
    .option pop
