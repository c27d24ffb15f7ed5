/* nRF52840 stand-in on QEMU mps2-an386: the MPS2 drivers (shared/mps2.c) and the semihosting pager
 * (shared/semihost_pager.c); this file is the board's identity. The pool (port.mk) is what the
 * nRF52840's 256 KB leave after the firmware's static buffers and stack. */
#include <stdint.h>

#include "../../core/port.h"

/* nRF52840 Product Specification v1.7: 256 KB RAM, 1 MB flash. source: datasheet. nv storage
 * (shared/nv_ram.c) is the linker script's NV region, at the nRF52840 image's addresses. */
const char *port_board(void) { return "nrf52840"; }
uint32_t port_ram_bytes(void) { return 262144u; }
