/* cgrad core: a linear layer's activation as its product's epilogue runs
 * it (cg_k_act_run) and its gradient as the backward's pass takes it
 * (cg_k_act_grad_run), ReLU's mask and its backward, and cg_k_map_runs
 * (declared in core/ops.h). The activations' definitions are
 * core/elementwise_impl.h's, the elementwise ops' too. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/elementwise_impl.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/shares.h"

/* ReLU's mask and its backward from the mask (one byte an element instead
 * of the four of its input or output), and conversions like the mask's
 * (cg_k_map_runs), in runs split among threads. */
#define MAP_RUN 16384
EW_CLONES static void mask_run(int64_t n, const float *a, uint8_t *m)
{
    for (int64_t i = 0; i < n; i++)
        m[i] = a[i] > 0.0f;
}

/* What cg_k_map_runs's runs read and write */
typedef struct {
    void (*conv)(int64_t n, const float *x, void *y);
    const float *src;
    char *dst;
    size_t es; /* bytes of an element of dst */
} map_job;

static void map_run(int64_t b, int64_t e, int thread, const void *job)
{
    const map_job *j = job;
    j->conv(e - b, j->src + b, j->dst + (size_t)b * j->es);
}

cg_tensor *cg_k_map_runs(const cg_tensor *x, cg_dtype dt,
                         void (*conv)(int64_t n, const float *x, void *y))
{
    /* a dense x (split attention heads) is mapped as its run of storage
     * into a result of its strides: no contiguous copy first */
    cg_tensor *xc = cg_is_dense(x) ? cg_retain((cg_tensor *)x) : cg_k_contiguous(x);
    cg_tensor *y = xc ? cg_empty_dense_like(xc, dt) : NULL;
    if (y) {
        const int64_t n = cg_numel(x);
        map_job job = {conv, cg_data(xc), cg_data_ptr(y), cg_dtype_size(dt)};
        cg_shares_run(n, MAP_RUN, cg_shares_team(n > MAP_RUN), map_run, &job);
    }
    cg_release(xc);
    return y;
}

static void mask_of(int64_t n, const float *a, void *m) { mask_run(n, a, m); }

cg_tensor *cg_k_relu_mask(const cg_tensor *a)
{
    if (!a)
        return cg_error_null_input("cg_k_relu_mask"), NULL;
    if (!cg_check_f32("relu_mask", "a", a))
        return NULL;
    return cg_k_map_runs(a, CG_BOOL, mask_of);
}

/* A linear layer's activation over `runs` runs of n of its outputs, ld
 * apart (core/linear.c runs it on each block of the product once the
 * block is final, while it is in cache): h16 (if not NULL) gets h rounded
 * as the bf16 products round it; then relu: h = relu(h) in place
 * (cg_k_relu_'s bits) and m (if not NULL) its mask (cg_k_relu_mask's); the GELUs: a =
 * act(h) (cg_k_gelu's, cg_k_gelu_erf's bits), in place when a is NULL;
 * then a16 (if not NULL) the output rounded. */
EW_CLONES static void k_act_run(cg_k_act act, int64_t n, int64_t runs, int64_t ld, float *h,
                                float *a, uint8_t *m, uint16_t *h16, uint16_t *a16)
{
    if (h16)
        cg_bf16_round_runs(n, runs, ld, h, ld, h16);
    for (int64_t r = 0; r < runs; r++) {
        if (act == CG_K_ACT_RELU && m) {
            float *restrict hr = h + r * ld;
            uint8_t *restrict mr = m + r * ld;
            for (int64_t i = 0; i < n; i++) { /* f_relu, with no branch */
                const float v = hr[i];
                const bool pos = v > 0.0f;
                hr[i] = (pos | (v != v)) ? v : 0.0f;
                mr[i] = pos;
            }
        } else if (act == CG_K_ACT_RELU) {
            float *restrict hr = h + r * ld;
            for (int64_t i = 0; i < n; i++) {
                const float v = hr[i];
                hr[i] = ((v > 0.0f) | (v != v)) ? v : 0.0f;
            }
        } else {
            /* in place over h, or into a (each element read before its
             * write, at the same index: no restrict on out) */
            float *out = a ? a + r * ld : h + r * ld;
            const float *x = h + r * ld;
            if (act == CG_K_ACT_GELU)
                gelu_run(n, x, NULL, out);
            else
                for (int64_t i = 0; i < n; i++)
                    out[i] = f_gelu_erf(x[i]);
        }
    }
    if (a16)
        cg_bf16_round_runs(n, runs, ld, a ? a : h, ld, a16);
}

void cg_k_act_run(cg_k_act act, int64_t n, int64_t runs, int64_t ld, float *h, float *a, uint8_t *m,
                  uint16_t *h16, uint16_t *a16)
{
    k_act_run(act, n, runs, ld, h, a, m, h16, a16); /* the clones: EW_CLONES, core/vmath.h */
}

/* The GELUs' derivatives at every bf16 value, indexed by its 16 bits: a
 * bf16 pre-activation (what a linear layer keeps for its backward in bf16)
 * takes one of 65,536 values, so its derivative is looked up, not computed
 * again (each entry is f_gelu_grad's, f_gelu_erf_grad's, of the widened
 * value: the same bits). Made at the first use of each, 256 KB. */
static float g_gelu_grad16[2][1 << 16];
static pthread_once_t g_gelu_grad16_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void make_gelu_grad16(int form)
{
    float x[256];
    for (int64_t u0 = 0; u0 < (1 << 16); u0 += 256) {
        uint16_t h[256];
        for (int i = 0; i < 256; i++)
            h[i] = (uint16_t)(u0 + i);
        bf16_widen(256, h, x);
        float *t = g_gelu_grad16[form] + u0;
        for (int i = 0; i < 256; i++)
            t[i] = form == 0 ? f_gelu_grad(x[i]) : f_gelu_erf_grad(x[i]);
    }
}
static void make_gelu_grad16_tanh(void) { make_gelu_grad16(0); }
static void make_gelu_grad16_erf(void) { make_gelu_grad16(1); }

static const float *gelu_grad16(cg_k_act act)
{
    const int form = act == CG_K_ACT_GELU ? 0 : 1;
    pthread_once(&g_gelu_grad16_once[form],
                 form == 0 ? make_gelu_grad16_tanh : make_gelu_grad16_erf);
    return g_gelu_grad16[form];
}

/* The gradient through the activation of n outputs: out = g act'(h)
 * (cg_k_<act>_backward's bits), h floats or (hbf) bf16 elements, whose
 * derivatives are looked up (gelu_grad16); relu from its mask m (h
 * unread). */
EW_CLONES static void k_act_grad_run(cg_k_act act, int64_t n, const void *h, bool hbf,
                                     const uint8_t *restrict m, const float *restrict g,
                                     float *restrict out)
{
    if (act == CG_K_ACT_RELU) {
        for (int64_t i = 0; i < n; i++)
            out[i] = m[i] ? g[i] : 0.0f;
        return;
    }
    if (hbf) {
        const float *restrict d = gelu_grad16(act);
        const uint16_t *restrict x = h;
        for (int64_t i = 0; i < n; i++)
            out[i] = g[i] * d[x[i]];
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t b = n - i0 < 256 ? n - i0 : 256;
        const float *x = (const float *)h + i0;
        if (act == CG_K_ACT_GELU)
            gelu_run(b, x, g + i0, out + i0);
        else
            for (int64_t i = 0; i < b; i++)
                out[i0 + i] = g[i0 + i] * f_gelu_erf_grad(x[i]);
    }
}

void cg_k_act_grad_run(cg_k_act act, int64_t n, const void *h, bool hbf, const uint8_t *restrict m,
                       const float *restrict g, float *restrict out)
{
    k_act_grad_run(act, n, h, hbf, m, g, out); /* the clones: EW_CLONES, core/vmath.h */
}

/* What cg_k_relu_mask_backward's runs read and write */
typedef struct {
    const uint8_t *m;
    const float *g;
    float *out;
} mask_grad_job;

static void mask_grad_run(int64_t b, int64_t e, int thread, const void *job)
{
    const mask_grad_job *j = job;
    cg_k_act_grad_run(CG_K_ACT_RELU, e - b, NULL, false, j->m + b, j->g + b, j->out + b);
}

cg_tensor *cg_k_relu_mask_backward(const cg_tensor *mask, const cg_tensor *g)
{
    if (!mask || !g)
        return cg_error_null_input("cg_k_relu_mask_backward"), NULL;
    if (!cg_check_f32("relu_mask_backward", "g", g))
        return NULL;
    if (mask->dtype != CG_BOOL || !cg_same_shape(mask, g)) {
        char b1[96], b2[96];
        cg_set_error("relu_mask_backward: need a bool mask and a float32 gradient of one "
                     "shape, got %s %s and %s",
                     cg_dtype_name(mask->dtype), cg_shape_str(mask, b1, sizeof b1),
                     cg_shape_str(g, b2, sizeof b2));
        return NULL;
    }
    cg_tensor *mc = cg_k_contiguous(mask), *gc = cg_k_contiguous(g);
    cg_tensor *out = mc && gc ? cg_empty(g->ndim, g->shape) : NULL;
    if (out) {
        const int64_t n = cg_numel(g);
        mask_grad_job job = {cg_data_ptr(mc), cg_data(gc), cg_data(out)};
        cg_shares_run(n, MAP_RUN, cg_shares_team(n > MAP_RUN), mask_grad_run, &job);
    }
    cg_release_all(2, mc, gc);
    return out;
}
