/* Little-endian field access and checksums used by every wire format. */
#ifndef POET_UTIL_H
#define POET_UTIL_H

#include <stddef.h>
#include <stdint.h>

static inline uint16_t poet_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t poet_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t poet_rd64(const uint8_t *p)
{
    return (uint64_t)poet_rd32(p) | ((uint64_t)poet_rd32(p + 4) << 32);
}
static inline void poet_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void poet_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Whether f is a number: neither infinite nor NaN, read from its bits (no libm, no fast-math
 * assumptions). */
static inline int poet_finite(float f)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return (v.u & 0x7F800000u) != 0x7F800000u;
}

/* murmur3's 32-bit finaliser: each input bit flips each output bit with probability about 1/2, so
 * consecutive inputs give independent-looking words (dropout's masks, the epochs' sample order;
 * poet.graph.dropout.mix32 computes the same). */
static inline uint32_t poet_mix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

/* IEEE CRC-32 as zlib.crc32: pass crc = 0 for a fresh checksum, or a previous result to continue. */
uint32_t poet_crc32(uint32_t crc, const uint8_t *p, size_t n);
/* FNV-1a 64 over a byte string (the model hash). */
uint64_t poet_fnv1a64(const uint8_t *p, size_t n);

#endif
