/* The receive ring of the ports with an interrupt-driven serial link: the link's interrupt handler
 * puts bytes in, port_getc takes them out with that interrupt masked. One producer and one
 * consumer: only the handler writes ring_head and only port_getc writes ring_tail; both count
 * freely (wrapping at 2^32), so head - tail is the fill level as long as RING, which the port
 * defines before including this, is a power of two. */
#ifndef POET_RX_RING_H
#define POET_RX_RING_H

#include <stdint.h>

#ifndef RING
#error "define RING, the receive ring's size in bytes (a power of two), before including rx_ring.h"
#endif

static volatile uint8_t ring[RING];
static volatile uint32_t ring_head, ring_tail;

static inline int ring_full(void) { return ring_head - ring_tail >= RING; }

/* For the interrupt handler, and only when !ring_full(): what to do with a byte that does not fit
 * is the port's choice (drop it, or leave it in the peripheral and mask the interrupt). */
static inline void ring_put(uint8_t b)
{
    ring[ring_head % RING] = b;
    ring_head++;
}

/* For port_getc, with the handler masked: the oldest byte, or -1 when the ring is empty. */
static inline int ring_get(void)
{
    int c;
    if (ring_head == ring_tail)
        return -1;
    c = ring[ring_tail % RING];
    ring_tail++;
    return c;
}

#if defined(__arm__)
/* port_getc of a Cortex-M port with nothing to do but take from the ring. before_sleep (may be
 * NULL) runs with interrupts masked before each WFI. */
static inline int cm_ring_getc(void (*before_sleep)(void))
{
    for (;;) {
        int c;
        __asm__ volatile("cpsid i" ::: "memory");
        if ((c = ring_get()) >= 0) {
            __asm__ volatile("cpsie i" ::: "memory");
            return c;
        }
        if (before_sleep)
            before_sleep();
        /* WFI wakes on a pending interrupt even with PRIMASK set; no lost-wakeup race. */
        __asm__ volatile("wfi\n\tcpsie i" ::: "memory");
    }
}
#endif

#endif
