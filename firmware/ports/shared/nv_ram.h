/* shared/nv_ram.c: nv storage in RAM, for the stand-ins and the Linux runtime. */
#ifndef POET_NV_RAM_H
#define POET_NV_RAM_H

#include <stdint.h>

/* The Linux runtime's region, mapped once at start-up (no allocation after it): bytes of it, read
 * as zeros until programmed. 0 on success, nonzero when the system cannot give that much. Only in
 * a build without NV_BYTES (a static array) on Linux. */
int nv_ram_map(uint32_t bytes);

#endif
