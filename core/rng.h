/* cgrad core (internal): the arithmetic of the counter-based generator
 * (cg_rng), inline for kernels that draw one number per element.
 *
 * Draw i of the stream of seed s is mix64(key(s) ^ (i * K1 + K2)), key(s) =
 * mix64(s + golden ratio), mix64 splitmix64's finaliser; a uniform float is
 * its top 24 bits times 2^-24. A kernel takes the key once and draws in its
 * own loop (vectorised, no call per element), the same bits as
 * cg_rng_uniform, which core/tensor.c computes with these functions too. */
#ifndef CG_CORE_RNG_H
#define CG_CORE_RNG_H

#include <stdint.h>

/* splitmix64's finaliser of z in place: a uint64_t, or a vector of them
 * (GCC's vector extension: the same operations lane by lane, so a kernel
 * drawing eight at a time has these bits) */
#define CG_RNG_MIX64(z)                                 \
    ((z) = ((z) ^ ((z) >> 30)) * 0xbf58476d1ce4e5b9ULL, \
     (z) = ((z) ^ ((z) >> 27)) * 0x94d049bb133111ebULL, (z) ^= (z) >> 31)

static inline uint64_t cg_rng_mix64(uint64_t z)
{
    CG_RNG_MIX64(z);
    return z;
}

/* The per-seed half of every draw. */
static inline uint64_t cg_rng_key(uint64_t seed)
{
    return cg_rng_mix64(seed + 0x9e3779b97f4a7c15ULL);
}

/* Draw i (the counter) of the stream whose key is key. */
#define CG_RNG_K1 0xd1b54a32d192ed03ULL
#define CG_RNG_K2 0x2545f4914f6cdd1dULL
static inline uint64_t cg_rng_draw(uint64_t key, uint64_t i)
{
    return cg_rng_mix64(key ^ (i * CG_RNG_K1 + CG_RNG_K2));
}

/* A draw as a uniform float in [0, 1): its top 24 bits, exact in float
 * (converted from int32, the same value, which vectorises without
 * AVX512DQ's 64-bit conversions). */
static inline float cg_rng_draw_unit(uint64_t b) { return (float)(int32_t)(b >> 40) * 0x1.0p-24f; }

#endif
