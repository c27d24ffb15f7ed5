#include "util.h"

uint32_t poet_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    /* Nibble table: 64 bytes of flash instead of 1 KiB, fast enough for a few KiB per upload. */
    static const uint32_t tab[16] = {
        0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
        0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
        0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu};
    size_t i;
    crc = ~crc;
    for (i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ tab[crc & 15u];
        crc = (crc >> 4) ^ tab[crc & 15u];
    }
    return ~crc;
}

uint64_t poet_fnv1a64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
