/* Central finite differences against the analytic gradient. */
#include "autograd/gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"

cg_gradcheck_opts cg_gradcheck_defaults(void)
{
    return (cg_gradcheck_opts){.eps = 1e-3, .atol = 1e-3, .rtol = 1e-2, .seed = 1234};
}

/* sum(out * R) in double. */
static bool weighted_sum(const cg_tensor *out, const float *r, double *res)
{
    int64_t n = cg_numel(out);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v || !cg_copy_to(out, v)) {
        free(v);
        return false;
    }
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)v[i] * (double)r[i];
    free(v);
    *res = s;
    return true;
}

static bool eval_loss(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                      int64_t nout, double *res)
{
    cg_tensor *out = f(ctx, inputs);
    if (!out)
        return false;
    bool ok = cg_numel(out) == nout && weighted_sum(out, r, res);
    if (cg_numel(out) != nout)
        cg_set_error("gradcheck: the function's output size changed between calls");
    cg_release(out);
    return ok;
}

/* Storage offset of logical element i (row-major) of t. */
static int64_t elem_offset(const cg_tensor *t, int64_t i)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t k = i % t->shape[d];
        i /= t->shape[d];
        off += k * t->strides[d];
    }
    return off;
}

static void fail(cg_gradcheck_report *rep, const char *why)
{
    rep->ok = false;
    snprintf(rep->message, sizeof rep->message, "gradcheck: %s", why);
}

bool cg_gradcheck(cg_gradcheck_fn f, void *ctx, int n_inputs, cg_tensor *const *inputs,
                  const cg_gradcheck_opts *opts, cg_gradcheck_report *report)
{
    cg_gradcheck_report local;
    cg_gradcheck_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    rep->worst_input = -1;
    cg_gradcheck_opts o = opts ? *opts : cg_gradcheck_defaults();

    /* keep the callers' gradients */
    cg_tensor **old = calloc((size_t)n_inputs, sizeof *old);
    if (!old) {
        fail(rep, "out of memory");
        return false;
    }
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i]) {
            old[i] = inputs[i]->grad;
            inputs[i]->grad = NULL;
        }
    }

    bool ok = false;
    float *r = NULL;
    cg_tensor *out = f(ctx, inputs);
    if (!out) {
        char b[400];
        snprintf(b, sizeof b, "the function failed: %s", cg_last_error());
        fail(rep, b);
        goto done;
    }
    int64_t nout = cg_numel(out);
    r = malloc((size_t)(nout ? nout : 1) * sizeof *r);
    cg_rng rng = cg_rng_new(o.seed);
    for (int64_t i = 0; r && i < nout; i++)
        r[i] = cg_rng_uniform(&rng) * 2.0f - 1.0f;
    cg_tensor *rt = r ? cg_from_data(out->ndim, out->shape, r) : NULL;
    cg_tensor *prod = cg_mul(out, rt);
    cg_tensor *loss = cg_sum_all(prod);
    bool bw = loss && loss->requires_grad && cg_backward(loss, NULL, false);
    cg_release_all(4, out, rt, prod, loss);
    if (!bw) {
        char b[400];
        snprintf(b, sizeof b, "analytic backward failed: %s",
                 cg_has_error() ? cg_last_error() : "output does not require grad");
        fail(rep, b);
        goto done;
    }

    ok = true;
    cg_no_grad_begin();
    for (int k = 0; k < n_inputs && ok; k++) {
        cg_tensor *x = inputs[k];
        if (!x || !x->requires_grad)
            continue;
        int64_t n = cg_numel(x);
        if (n == 0)
            continue;
        /* analytic gradient summed per storage offset */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t i = 0; i < n; i++) {
            int64_t off = elem_offset(x, i);
            lo = off < lo ? off : lo;
            hi = off > hi ? off : hi;
        }
        int64_t span = hi - lo + 1;
        double *ana = calloc((size_t)span, sizeof *ana);
        char *used = calloc((size_t)span, 1);
        float *gv = malloc((size_t)n * sizeof *gv);
        if (!ana || !used || !gv) {
            free(ana);
            free(used);
            free(gv);
            fail(rep, "out of memory");
            ok = false;
            break;
        }
        if (x->grad) {
            cg_copy_to(x->grad, gv);
        } else {
            memset(gv, 0, (size_t)n * sizeof *gv); /* no path to the output: zero */
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t off = elem_offset(x, i) - lo;
            ana[off] += gv[i];
            used[off] = 1;
        }
        float *data = x->storage->data;
        for (int64_t off = 0; off < span && ok; off++) {
            if (!used[off])
                continue;
            float orig = data[lo + off];
            double lp, lm;
            data[lo + off] = (float)(orig + o.eps);
            double hp = (double)data[lo + off] - orig;
            bool e1 = eval_loss(f, ctx, inputs, r, nout, &lp);
            data[lo + off] = (float)(orig - o.eps);
            double hm = orig - (double)data[lo + off];
            bool e2 = e1 && eval_loss(f, ctx, inputs, r, nout, &lm);
            data[lo + off] = orig;
            if (!e2) {
                char b[400];
                snprintf(b, sizeof b, "the function failed while perturbing input %d: %s", k,
                         cg_last_error());
                fail(rep, b);
                ok = false;
                break;
            }
            double num = (lp - lm) / (hp + hm); /* the steps as actually stored */
            double a = ana[off];
            double abs_err = fabs(a - num);
            double ratio = abs_err / (o.atol + o.rtol * fabs(num));
            if (isnan(a) != isnan(num) || (isnan(ratio) && !(isnan(a) && isnan(num))))
                ratio = INFINITY;
            rep->checked++;
            if (ratio > rep->worst_ratio || rep->worst_input < 0) {
                rep->worst_ratio = ratio;
                rep->worst_input = k;
                rep->worst_index = lo + off - x->offset;
                rep->analytic = a;
                rep->numeric = num;
                rep->abs_err = abs_err;
                rep->rel_err = abs_err / (fabs(num) > 1e-12 ? fabs(num) : 1e-12);
            }
        }
        free(ana);
        free(used);
        free(gv);
        cg_zero_grad(x);
    }
    cg_no_grad_end();
    if (ok) {
        rep->ok = rep->worst_ratio <= 1.0;
        snprintf(rep->message, sizeof rep->message,
                 "gradcheck %s: %lld elements; worst at input %d offset %lld: analytic %.8g, "
                 "numeric %.8g (abs err %.3g, rel err %.3g, %.2fx the tolerance)",
                 rep->ok ? "passed" : "FAILED", (long long)rep->checked, rep->worst_input,
                 (long long)rep->worst_index, rep->analytic, rep->numeric, rep->abs_err,
                 rep->rel_err, rep->worst_ratio);
        ok = rep->ok;
    }
done:
    free(r);
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i]) {
            cg_zero_grad(inputs[i]);
            inputs[i]->grad = old[i];
        }
    }
    free(old);
    return ok;
}
