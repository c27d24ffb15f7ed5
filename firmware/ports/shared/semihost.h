/* Semihosting, as the QEMU stand-ins use it (Arm "Semihosting for AArch32 and AArch64", also what
 * QEMU implements for RISC-V): operation numbers, and the one call each port implements. */
#ifndef POET_SEMIHOST_H
#define POET_SEMIHOST_H

#include <stdint.h>

#define SEMIHOST_SYS_OPEN 0x01u
#define SEMIHOST_SYS_WRITE 0x05u
#define SEMIHOST_SYS_READ 0x06u
#define SEMIHOST_SYS_SEEK 0x0Au
#define SEMIHOST_SYS_EXIT 0x18u

/* The port's trap into the debugger/emulator: op in the first register, arg in the second. */
int port_semihost(uint32_t op, void *arg);

#endif
