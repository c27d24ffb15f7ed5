#include "semihost_files.h"

#include <string.h>

#include "semihost.h"

#define SYS_CLOSE 0x02u
#define SYS_WRITE0 0x04u
#define SYS_FLEN 0x0Cu
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_APPLICATION_EXIT 0x20026u

int sh_open(const char *name, const char *mode)
{
    /* Arm semihosting's fopen modes: "r" 0, "rb" 1, "r+" 2, "r+b" 3, "w" 4, "wb" 5, "w+" 6, "w+b" 7 */
    static const char *const modes[] = {"r", "rb", "r+", "r+b", "w", "wb", "w+", "w+b"};
    uint32_t args[3], m;
    for (m = 0; m < 8u && strcmp(modes[m], mode) != 0; m++)
        ;
    args[0] = (uint32_t)(uintptr_t)name;
    args[1] = m;
    args[2] = (uint32_t)strlen(name);
    return m < 8u ? port_semihost(SEMIHOST_SYS_OPEN, args) : -1;
}

static int seek(int fd, uint32_t off)
{
    uint32_t args[2];
    args[0] = (uint32_t)fd;
    args[1] = off;
    return port_semihost(SEMIHOST_SYS_SEEK, args);
}

static int transfer(uint32_t op, int fd, uint32_t off, uintptr_t buf, uint32_t n)
{
    uint32_t args[3];
    if (fd < 0 || seek(fd, off) != 0)
        return -1;
    args[0] = (uint32_t)fd;
    args[1] = (uint32_t)buf;
    args[2] = n;
    return port_semihost(op, args) == 0 ? 0 : -1; /* the bytes not moved */
}

int sh_read(int fd, uint32_t off, void *dst, uint32_t n) { return transfer(SEMIHOST_SYS_READ, fd, off, (uintptr_t)dst, n); }
int sh_write(int fd, uint32_t off, const void *src, uint32_t n)
{
    return transfer(SEMIHOST_SYS_WRITE, fd, off, (uintptr_t)src, n);
}

int32_t sh_length(int fd)
{
    uint32_t args[1];
    args[0] = (uint32_t)fd;
    return port_semihost(SYS_FLEN, args);
}

void sh_print(const char *s) { port_semihost(SYS_WRITE0, (void *)(uintptr_t)s); }

void sh_print_u32(uint32_t v)
{
    char buf[11];
    int i = 10;
    buf[10] = 0;
    do {
        buf[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    sh_print(buf + i);
}

void sh_exit(int code)
{
    /* SYS_EXIT_EXTENDED: the reason and an exit code, which QEMU exits with */
    uint32_t args[2];
    args[0] = ADP_APPLICATION_EXIT;
    args[1] = (uint32_t)code;
    port_semihost(SYS_EXIT_EXTENDED, args);
    for (;;)
        ;
}

/* ---- the store ---- */

static int32_t cut_budget = -2; /* -2: not read yet; -1: no cut */

static int32_t budget(void)
{
    if (cut_budget == -2) {
        char text[12];
        int fd = sh_open("poet-cut.txt", "rb");
        int32_t n = fd >= 0 ? sh_length(fd) : -1, k;
        cut_budget = -1;
        if (n > 0 && n < (int32_t)sizeof text && sh_read(fd, 0, text, (uint32_t)n) == 0) {
            cut_budget = 0;
            for (k = 0; k < n && text[k] >= '0' && text[k] <= '9'; k++)
                cut_budget = cut_budget * 10 + (text[k] - '0');
        }
    }
    return cut_budget;
}

static int st_write(const poet_store_t *s, uint32_t off, const void *src, uint32_t n)
{
    int fd = (int)(intptr_t)s->ctx;
    int32_t left = budget();
    if (left >= 0 && (uint32_t)left < n) {
        /* the power goes mid-write: the bytes before the cut land, as a flash's words would */
        if (left > 0)
            sh_write(fd, off, src, (uint32_t)left);
        sh_exit(77);
    }
    if (left >= 0)
        cut_budget -= (int32_t)n;
    return sh_write(fd, off, src, n);
}

static int st_read(const poet_store_t *s, uint32_t off, void *dst, uint32_t n)
{
    return sh_read((int)(intptr_t)s->ctx, off, dst, n);
}

static int st_erase(const poet_store_t *s, uint32_t off, uint32_t n)
{
    static const uint32_t ones[64] = {
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    uint32_t k;
    for (k = 0; k < n; k += sizeof ones)
        if (st_write(s, off + k, ones, n - k < sizeof ones ? n - k : (uint32_t)sizeof ones) != 0)
            return 1;
    return 0;
}

int sh_store(poet_store_t *s, const char *name, uint32_t bytes)
{
    int fd = sh_open(name, "r+b");
    if (fd < 0) {
        static const uint32_t erased = 0xFFFFFFFFu;
        uint32_t k;
        fd = sh_open(name, "w+b");
        for (k = 0; fd >= 0 && k < bytes; k += 4u)
            if (sh_write(fd, k, &erased, 4) != 0)
                return -1;
    }
    if (fd < 0 || sh_length(fd) < (int32_t)bytes)
        return -1;
    s->bytes = bytes;
    s->erase_bytes = 4096u;
    s->read = st_read;
    s->write = st_write;
    s->erase = st_erase;
    s->ctx = (void *)(intptr_t)fd;
    return 0;
}
