/* rope: a user-defined differentiable op, written against the installed
 * library only (cc rope.c $(pkg-config --cflags --libs cgrad)).
 *
 * (The library has rotary embeddings built in, in Hugging Face's
 * rotate-half pairing: cg_rope and cg_mha_set_rope, which also decode with
 * a key/value cache. This example keeps RoFormer's interleaved pairs to
 * show how a user adds an op of their own.)
 *
 * Rotary position embeddings (RoFormer, Su et al. 2021): along the last
 * dimension D (even) of x [..., T, D], each pair (x[2i], x[2i+1]) at
 * position t is rotated by the angle t * base^(-2i/D). The backward of a
 * rotation is the rotation by the opposite angle. This program checks the
 * forward against values worked out by hand, runs cg_gradcheck on the op
 * (on a transposed view too), shows the op's name in an error, and plugs
 * the op into MultiHeadAttention's q/k hook, checked by gradcheck through a
 * whole attention layer. Exit status 0 when every check passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

/* out = rotate(x, sign * angle) for contiguous x [rows, T, D]. */
static void rotate(const float *x, float *out, int64_t rows, int64_t T, int64_t D, double base,
                   double sign)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < D / 2; i++) {
                double a = sign * (double)t * pow(base, -2.0 * (double)i / (double)D);
                double c = cos(a), s = sin(a);
                const float *p = x + (r * T + t) * D + 2 * i;
                float *q = out + (r * T + t) * D + 2 * i;
                q[0] = (float)(c * p[0] - s * p[1]);
                q[1] = (float)(s * p[0] + c * p[1]);
            }
}

/* A rotated copy of any tensor [..., T, D]; sign -1 undoes the rotation. */
static cg_tensor *rope_apply(const cg_tensor *x, double base, double sign)
{
    int64_t T = x->shape[x->ndim - 2], D = x->shape[x->ndim - 1];
    cg_tensor *xc = cg_contiguous(x); /* any strides in, contiguous out */
    cg_tensor *out = xc ? cg_empty_like(xc) : NULL;
    if (out)
        rotate(cg_data(xc), cg_data(out), cg_numel(xc) / (T * D > 0 ? T * D : 1), T, D, base, sign);
    cg_release(xc);
    return out;
}

static bool rope_backward(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = rope_apply(g, n->p.f[0], -1.0); /* the inverse rotation */
    return gin[0] != NULL;
}

/* The op: y = rope(x), differentiable in x. */
static cg_tensor *rope(cg_tensor *x, float base)
{
    if (!x)
        return NULL;
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2) {
        char b[96];
        cg_set_error("rope: x %s needs at least 2 dims and an even last dim",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    cg_tensor *out = rope_apply(x, base, 1.0);
    cg_node *node;
    cg_record_status st = cg_record_op(out, "rope", 1, &x, rope_backward, &node);
    if (st == CG_RECORD_FAILED) {
        cg_release(out);
        return NULL;
    }
    if (st == CG_RECORD_OK)
        node->p.f[0] = base; /* what the backward needs */
    return out;
}

static cg_tensor *rope_fn(void *ctx, cg_tensor *const *in) { return rope(in[0], *(float *)ctx); }

/* The MultiHeadAttention hook: rotate q and k, [B, H, T, dh], alike. */
static cg_tensor *rope_hook(void *ctx, cg_tensor *x, bool is_key)
{
    (void)is_key;
    return rope(x, *(float *)ctx);
}

static cg_tensor *attn_fn(void *ctx, cg_tensor *const *in)
{
    return cg_mha_forward(ctx, in[0], in[0], true, NULL, NULL, NULL);
}

static int failures;
static void check(bool ok, const char *what)
{
    printf("%-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok) {
        failures++;
        if (cg_has_error())
            printf("  (%s)\n", cg_last_error());
    }
}

int main(void)
{
    float base = 10000.0f;
    /* forward by hand: x [1, 2, 4] = all ones; position 0 is unchanged, at
     * position 1 pair 0 turns by 1 rad and pair 1 by 10000^(-1/2) = 0.01 rad */
    cg_tensor *ones = cg_ones(CG_SHAPE(1, 2, 4));
    cg_tensor *y = rope(ones, base);
    const float want[8] = {1,
                           1,
                           1,
                           1,
                           (float)(cos(1.0) - sin(1.0)),
                           (float)(sin(1.0) + cos(1.0)),
                           (float)(cos(0.01) - sin(0.01)),
                           (float)(sin(0.01) + cos(0.01))};
    bool same = y != NULL;
    for (int i = 0; same && i < 8; i++)
        same = fabsf(cg_data(y)[i] - want[i]) < 1e-6f;
    check(same, "forward equals the rotation worked out by hand");
    cg_release_all(2, ones, y);

    /* gradcheck: contiguous [2, 3, 5, 8] and a transposed view [2, 5, 3, 8] */
    cg_rng rng = cg_rng_new(1);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 3, 5, 8)), true);
    cg_gradcheck_report rep;
    check(cg_gradcheck(rope_fn, &base, 1, &x, NULL, &rep), "gradcheck of rope on [2, 3, 5, 8]");
    cg_tensor *xt = cg_transpose(x, 1, 2);
    cg_tensor *xtd = cg_requires_grad(cg_detach(xt), true);
    check(cg_gradcheck(rope_fn, &base, 1, &xtd, NULL, &rep),
          "gradcheck of rope on a transposed view [2, 5, 3, 8]");
    cg_release_all(2, xt, xtd);

    /* in attention: causal self-attention with rotary q and k */
    cg_mha *mha = cg_mha_new(16, 2, &rng);
    mha->qk_hook = rope_hook;
    mha->qk_hook_ctx = &base;
    cg_tensor *h = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 6, 16)), true);
    check(cg_gradcheck(attn_fn, mha, 1, &h, NULL, &rep),
          "gradcheck of MultiHeadAttention with rope on q and k");
    cg_release(h);
    cg_module_free(CG_MODULE(mha));

    /* the op's name in errors */
    cg_tensor *odd = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *bad = rope(odd, base);
    check(!bad && strstr(cg_last_error(), "rope:"), "an odd last dim is refused, naming rope");
    cg_release(odd);
    printf("%s\n", failures ? "rope: FAILED" : "rope: all checks passed");
    cg_release(x);
    return failures ? 1 : 0;
}
