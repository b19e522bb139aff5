/*
 * rng: the engine's deterministic random numbers (xoshiro256** seeded by
 * splitmix64). Header-only; a struct gpt_rng is owned by whoever embeds it
 * and is not shared between threads. Its state is saved in snapshots so a
 * resumed run draws the same numbers.
 */
#ifndef GPT_RNG_H
#define GPT_RNG_H

#include <math.h>
#include <stdint.h>

struct gpt_rng {
    uint64_t s[4];
};

static inline uint64_t gpt_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seeds from one 64-bit value; the same seed gives the same stream. */
static inline void gpt_rng_seed(struct gpt_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = gpt_splitmix64(&seed);
}

static inline uint64_t gpt_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t gpt_rng_u64(struct gpt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = gpt_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gpt_rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static inline double gpt_rng_uniform(struct gpt_rng *r)
{
    return (double)(gpt_rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, bias < 2^-64 * n). */
static inline uint64_t gpt_rng_below(struct gpt_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)gpt_rng_u64(r) * n) >> 64);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double gpt_rng_normal(struct gpt_rng *r)
{
    double u1 = gpt_rng_uniform(r), u2 = gpt_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A stateless hash of (a, b, c) for per-sample randomness (shuffles,
 * synthetic problems) that does not depend on call order. */
static inline uint64_t gpt_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ gpt_rng_rotl(b, 21) ^ gpt_rng_rotl(c, 42);
    (void)gpt_splitmix64(&x);
    return gpt_splitmix64(&x);
}

#endif
