/* The port interface: everything the portable core needs from a board.
 * A port implements these functions and calls poet_run() (protocol.h) from its entry point. */
#ifndef POET_PORT_H
#define POET_PORT_H

#include <stddef.h>
#include <stdint.h>

/* Bring the board up: its clocks, the tick counter, the serial link. The image's main calls it
 * first: the protocol server's (ports/shared/serve_main.c) or an application's (examples/). The
 * MPS2 stand-ins have it; the other ports still do this in a main of their own. */
void port_init(void);

/* Serial link. port_getc blocks (idling, never spinning) until a byte arrives and returns it
 * (0..255), or -1 when the link is closed for good (the core then returns from poet_run). */
int port_getc(void);
void port_write(const uint8_t *p, size_t n);

/* Free-running up-counting tick counter (wraps at 2^32) and its rate. */
uint32_t port_ticks(void);
uint32_t port_tick_hz(void);

/* Aux storage at a byte offset of the swap area. 0 on success, nonzero on I/O failure. */
int port_pager_open(void);
int port_pager_write(uint32_t offset, const void *src, uint32_t n);
int port_pager_read(uint32_t offset, void *dst, uint32_t n);
/* The aux storage's size: the bytes the pager addresses from offset 0 (the card's or flash region's
 * area for poet); 0xFFFFFFFF where it is a file that grows (the emulated boards' and Linux's card),
 * bounded only by the 32-bit offsets. The protocol refuses a feature cache past it (docs/spec.md 6). */
uint32_t port_pager_bytes(void);

/* What the board is, for HELLO. */
const char *port_board(void);
uint32_t port_ram_bytes(void);

/* Non-volatile, memory-mapped storage the core keeps the model blob, the frozen weights and
 * nothing else in (docs/spec.md 6): on a board, a region of its flash the linker script leaves to
 * poet (NV in linker.ld); on an emulated board, the stand-in's flash region; on Linux, an array.
 * The runtime reads it in place, so a model's node table and frozen weights cost no RAM.
 * port_nv is its first byte (8-byte aligned), port_nv_bytes its size; 0 bytes means the port has
 * none (then no model loads). port_nv_write programs n bytes at offset off, reads back equal
 * afterwards, and returns 0, or nonzero when programming failed. The core's writes are
 * sequential: each upload starts at a page-aligned offset (POET_NV_PAGE) and each write begins
 * where the last one ended, off and n multiples of 4. So a flash port erases a page exactly when
 * a write reaches the page's first byte, and never programs a word twice. */
const uint8_t *port_nv(void);
uint32_t port_nv_bytes(void);
int port_nv_write(uint32_t off, const void *src, uint32_t n);

/* The static pool (model tables, params, grads, staged batch, arena), 8-byte aligned. */
uint8_t *port_pool(void);
uint32_t port_pool_bytes(void);

/* Wait for something to happen (an interrupt) without burning the CPU. */
void port_idle(void);

/* The op marker: drive a pin high (running = 1) while one schedule instruction runs, low
 * otherwise. A power meter's logic input (PPK2 D0) or a logic analyser then sees each op as a
 * pulse on its own clock, which is how its samples are lined up with the trace's records
 * (host: meters/align.events_from_markers). A port without such a pin does nothing. */
void port_mark(int running);

#endif
