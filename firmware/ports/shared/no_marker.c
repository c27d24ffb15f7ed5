/* port_mark for the QEMU stand-ins (qemu-m4, qemu-m0, qemu-rv32): an emulated pin has no meter on the
 * other end, and their op times come from the trace's ticks alone, so there is nothing to drive. */
#include "../../core/port.h"

void port_mark(int running) { (void)running; }
