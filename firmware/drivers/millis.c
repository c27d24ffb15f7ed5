#include "millis.h"

#include "../core/port.h"

/* Whole milliseconds are taken off the tick count and the remainder kept, so differences stay
 * right across the 32-bit tick wrap; a tick rate that is not a whole number of kHz loses its
 * fraction (7 ppm on the MKR1000's 47.97 MHz: for timeouts only). */
uint32_t poet_millis(void)
{
    static uint32_t last, ms;
    uint32_t per_ms = port_tick_hz() / 1000u;
    uint32_t d = (port_ticks() - last) / per_ms;
    last += d * per_ms;
    ms += d;
    return ms;
}
