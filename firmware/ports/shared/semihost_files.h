/* Files, console and exit through semihosting: what a standalone application on a QEMU stand-in
 * has instead of a sensor, flash that outlives the emulator, and a screen. */
#ifndef POET_SEMIHOST_FILES_H
#define POET_SEMIHOST_FILES_H

#include <stdint.h>

#include "../../core/poet.h"

/* A file in QEMU's working directory: its handle, or -1. mode as fopen's: "rb", "r+b", "w+b". */
int sh_open(const char *name, const char *mode);
/* 0 when all n bytes moved at byte offset off. */
int sh_read(int fd, uint32_t off, void *dst, uint32_t n);
int sh_write(int fd, uint32_t off, const void *src, uint32_t n);
/* The file's length, or -1. */
int32_t sh_length(int fd);
void sh_print(const char *s);
void sh_print_u32(uint32_t v);
void sh_exit(int code);

/* A poet_store_t over a file (a stand-in's flash that outlives the emulator), made erased (0xFF)
 * to `bytes` when new, with flash semantics: erase writes 0xFF over whole 4 KiB pages. The stand-in's
 * power switch: a file poet-cut.txt holding a decimal count N makes the emulator stop dead (exit 77)
 * when the (N+1)th byte would be written, as a power cut would stop a board mid-write. */
int sh_store(poet_store_t *s, const char *name, uint32_t bytes);

#endif
