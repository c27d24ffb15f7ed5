/* Milliseconds for the drivers' timeouts, from the port's free-running tick counter. */
#ifndef POET_MILLIS_H
#define POET_MILLIS_H

#include <stdint.h>

/* Call at least once per tick-counter wrap (2^32 ticks) for differences to stay right. */
uint32_t poet_millis(void);

#endif
