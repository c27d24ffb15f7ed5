/* The pool (params, grads, staged batch, arena) of every microcontroller port: one static array, so
 * its size is fixed at link time and the link fails when RAM cannot hold it. How large is the port's
 * choice, POOL_BYTES in its port.mk, where its RAM budget is written down. (The Linux runtime maps
 * its pool at start-up instead, sized on its command line: ports/linux/main.c.) */
#include <stdint.h>

#include "../../core/port.h"

#ifndef POOL_BYTES
#error "POOL_BYTES comes from the port's port.mk"
#endif

/* The union gives the 8-byte alignment port.h promises. */
static union {
    uint64_t align;
    uint8_t bytes[POOL_BYTES];
} pool;

uint8_t *port_pool(void) { return pool.bytes; }
uint32_t port_pool_bytes(void) { return POOL_BYTES; }
