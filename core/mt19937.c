/* PyTorch-compatible random initialisation: the Mersenne Twister MT19937
 * (Matsumoto and Nishimura, 1998) seeded as torch.manual_seed does, and
 * torch's CPU normal_ algorithm on top of it.
 *
 * PyTorch (1.x, CPU) fills a contiguous float tensor of 16 or more elements
 * with uniforms u = (32-bit draw & (2^24 - 1)) / 2^24, then turns each block
 * of 16 into normals by Box-Muller, pairing element j with j + 8 (radius
 * from 1 - u[j], angle from u[j + 8], cos into j, sin into j + 8); when the
 * size is not a multiple of 16 the last 16 elements are redrawn and
 * transformed again. Smaller tensors draw each element from a double
 * Box-Muller pair of 53-bit uniforms, keeping the second value for the next
 * draw. We compute log, cos and sin in double, so values may differ from
 * PyTorch's float ones in the last bit; the sample is the same.
 *
 * uniform_ is exact: one draw per element, its low 24 bits scaled to
 * [0, 1), then x * (hi - lo) + lo in float with one rounding (fmaf), which
 * is what PyTorch's kernel compiles to on x86 with FMA (200,000 of 200,000
 * draws equal against python3-torch 1.13; unfused, a rounding differs in
 * about half of them). */
#include <math.h>

#include "core/error.h"
#include "core/tensor.h"

enum { MT_N = 624, MT_M = 397 };

void cg_mt19937_seed(cg_mt19937 *g, uint64_t seed)
{
    if (!g) {
        cg_set_error("cg_mt19937_seed: NULL generator");
        return;
    }
    g->state[0] = (uint32_t)seed;
    for (uint32_t j = 1; j < MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->index = MT_N;
    g->has_next_normal = false;
    g->next_normal = 0.0;
}

static void mt_twist(cg_mt19937 *g)
{
    for (int k = 0; k < MT_N; k++) {
        uint32_t y = (g->state[k] & 0x80000000u) | (g->state[(k + 1) % MT_N] & 0x7fffffffu);
        g->state[k] = g->state[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->index = 0;
}

uint32_t cg_mt19937_next(cg_mt19937 *g)
{
    if (!g) {
        cg_set_error("cg_mt19937_next: NULL generator");
        return 0;
    }
    if (g->index >= MT_N)
        mt_twist(g);
    uint32_t y = g->state[g->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static float uniform24(cg_mt19937 *g)
{
    return (float)((double)(cg_mt19937_next(g) & 0xffffffu) * 0x1.0p-24);
}

static double uniform53(cg_mt19937 *g)
{
    uint64_t hi = cg_mt19937_next(g), lo = cg_mt19937_next(g);
    return (double)(((hi << 32) | lo) & ((1ull << 53) - 1)) * 0x1.0p-53;
}

/* One block of 16 uniforms to normals, in place. */
static void box_muller16(float *d, float mean, float std)
{
    const double two_pi = 6.283185307179586;
    for (int j = 0; j < 8; j++) {
        double u1 = 1.0 - (double)d[j], u2 = (double)d[j + 8];
        double r = sqrt(-2.0 * log(u1)), th = two_pi * u2;
        d[j] = (float)(r * cos(th) * std + mean);
        d[j + 8] = (float)(r * sin(th) * std + mean);
    }
}

static double normal_double(cg_mt19937 *g)
{
    if (g->has_next_normal) {
        g->has_next_normal = false;
        return g->next_normal;
    }
    double u1 = uniform53(g), u2 = uniform53(g);
    double r = sqrt(-2.0 * log1p(-u2)), th = 6.283185307179586 * u1;
    g->next_normal = r * sin(th);
    g->has_next_normal = true;
    return r * cos(th);
}

/* A contiguous float32 tensor to fill, or false + error. */
static bool fillable(const char *op, cg_tensor *t)
{
    if (!cg_check_f32(op, "t", t))
        return false;
    if (!cg_is_contiguous(t)) {
        cg_set_error("%s: tensor must be contiguous", op);
        return false;
    }
    return cg_check_no_history(op, t);
}

bool cg_uniform_torch_(cg_tensor *t, cg_mt19937 *g, float lo, float hi)
{
    if (!t || !g)
        return cg_error_null_input("cg_uniform_torch_");
    if (!(lo <= hi)) {
        cg_set_error("uniform_ (PyTorch generator): need lo <= hi (got %g, %g)", (double)lo,
                     (double)hi);
        return false;
    }
    if (!fillable("uniform_ (PyTorch generator)", t))
        return false;
    float *d = cg_data(t);
    const float span = hi - lo;
    for (int64_t i = 0, n = cg_numel(t); i < n; i++)
        d[i] = fmaf((float)(cg_mt19937_next(g) & 0xffffffu) * 0x1.0p-24f, span, lo);
    cg_tensor_modified(t); /* once written: see cg_tensor_modified */
    return true;
}

bool cg_normal_torch_(cg_tensor *t, cg_mt19937 *g, float mean, float std)
{
    if (!t || !g)
        return cg_error_null_input("cg_normal_torch_");
    if (!fillable("normal_ (PyTorch generator)", t))
        return false;
    float *d = cg_data(t);
    const int64_t n = cg_numel(t);
    if (n < 16) {
        for (int64_t i = 0; i < n; i++)
            d[i] = (float)(normal_double(g) * std + mean);
        cg_tensor_modified(t);
        return true;
    }
    for (int64_t i = 0; i < n; i++)
        d[i] = uniform24(g);
    for (int64_t i = 0; i + 16 <= n; i += 16)
        box_muller16(d + i, mean, std);
    if (n % 16) {
        float *tail = d + n - 16;
        for (int i = 0; i < 16; i++)
            tail[i] = uniform24(g);
        box_muller16(tail, mean, std);
    }
    cg_tensor_modified(t);
    return true;
}
