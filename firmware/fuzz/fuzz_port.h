/* The port stub the fuzz harnesses link against (fuzz_port.c): the serial link reads from a byte
 * buffer the harness sets, every reply frame is checked and counted, the pager is a bounded
 * in-memory swap area, and the pool is a global array of exactly POET_FUZZ_POOL bytes so ASan's
 * redzone after it catches any write past the pool's end. */
#ifndef POET_FUZZ_PORT_H
#define POET_FUZZ_PORT_H

#include <stddef.h>
#include <stdint.h>

/* port_getc reports the link closed after this many STEP replies. */
#define POET_FUZZ_MAX_STEPS 4u

/* nv storage: model blob and frozen weights (shared/nv_ram.c, sized by fuzz.mk's NV_BYTES) */
#define POET_FUZZ_NV NV_BYTES
#ifndef POET_FUZZ_POOL
#define POET_FUZZ_POOL (64u * 1024u)
#endif

/* What port_getc serves next; it returns -1 once len bytes are read. */
void fuzz_port_feed(const uint8_t *p, size_t len);
/* Make port_getc report the link closed from now on (the next poet_run returns). */
void fuzz_port_close(void);
/* DONE frames (answers to STEP) written since the last feed. */
unsigned fuzz_port_steps(void);
/* The swap area: node i at its prefix-sum offset, never past swap_bytes (checked, aborts). */
void fuzz_port_swap(uint8_t *area, uint32_t swap_bytes);

#endif
