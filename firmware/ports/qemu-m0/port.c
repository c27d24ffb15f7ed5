/* MKR1000 (SAMD21, Cortex-M0+) stand-in on QEMU mps2-an385: the MPS2 drivers (shared/mps2.c, all
 * ARMv6-M) and the semihosting pager (shared/semihost_pager.c); this file is the board's identity.
 * The pool that fits the SAMD21's 32 KB of RAM is set in port.mk, which documents the budget. */
#include <stdint.h>

#include "../../core/port.h"

/* SAMD21G18A (the MKR1000's MCU): 32 KB SRAM, 256 KB flash. source: datasheet
 * (Microchip SAM D21 family datasheet DS40001882, sec. 2 "Configuration Summary"). */
const char *port_board(void) { return "mkr1000"; }
uint32_t port_ram_bytes(void) { return 32768u; }
