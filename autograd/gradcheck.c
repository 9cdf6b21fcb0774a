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
    return (cg_gradcheck_opts){.eps = 1e-3,
                               .atol = 1e-3,
                               .rtol = 1e-2,
                               .seed = 1234,
                               .proj_count = 4,
                               .proj_eps = 1e-2,
                               .proj_rtol = 5e-4,
                               .noise = 4};
}

/* sum(out * R) in double; *abs_sum (if not NULL) gets sum |out * R|. */
static bool weighted_sum(const cg_tensor *out, const float *r, double *res, double *abs_sum)
{
    int64_t n = cg_numel(out);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v || !cg_copy_to(out, v)) {
        free(v);
        return false;
    }
    double s = 0, sa = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)v[i] * (double)r[i];
        sa += fabs((double)v[i] * (double)r[i]);
    }
    free(v);
    *res = s;
    if (abs_sum)
        *abs_sum = sa;
    return true;
}

static bool eval_loss2(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                       int64_t nout, double *res, double *abs_sum)
{
    cg_tensor *out = f(ctx, inputs);
    if (!out)
        return false;
    bool ok = cg_numel(out) == nout && weighted_sum(out, r, res, abs_sum);
    if (cg_numel(out) != nout)
        cg_set_error("gradcheck: the function's output size changed between calls");
    cg_release(out);
    return ok;
}

static bool eval_loss(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                      int64_t nout, double *res)
{
    return eval_loss2(f, ctx, inputs, r, nout, res, NULL);
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

static void fail(cg_gradcheck_report *rep, const char *why);

/* Set the used elements of the view's storage span to orig + h*v (as
 * stored in float); step[off] receives the step actually taken. */
static void perturb(float *data, const float *orig, const signed char *v, const char *used,
                    int64_t span, double h, double *step)
{
    for (int64_t off = 0; off < span; off++) {
        if (!used[off])
            continue;
        data[off] = (float)(orig[off] + h * v[off]);
        step[off] = (double)data[off] - orig[off];
    }
}

/* Projection check of one input (storage span [lo, lo+span)): returns the
 * worst |error| / tolerance over the directions checked (*n_done, at most
 * o->proj_count; 0 when every one tried crossed a kink), or -1 with the
 * report failed when the function fails. */
static double project(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                      int64_t nout, const cg_gradcheck_opts *o, int k, float *data,
                      const double *ana, const char *used, int64_t span, int *n_done,
                      cg_gradcheck_report *rep)
{
    float *orig = malloc((size_t)span * sizeof *orig);
    signed char *v = malloc((size_t)span);
    double *sp = malloc((size_t)span * sizeof *sp), *sm = malloc((size_t)span * sizeof *sm);
    double worst = 0.0;
    if (!orig || !v || !sp || !sm) {
        worst = -1;
        fail(rep, "out of memory");
        goto out;
    }
    memcpy(orig, data, (size_t)span * sizeof *orig);
    double ss = 0.0, gn = 0.0;
    int64_t cnt = 0;
    for (int64_t off = 0; off < span; off++) {
        if (used[off]) {
            ss += (double)orig[off] * orig[off];
            gn += ana[off] * ana[off];
            cnt++;
        }
    }
    double rms = cnt ? sqrt(ss / (double)cnt) : 0.0;
    double h0 = o->proj_eps * (rms > 1e-2 ? rms : 1e-2);
    gn = sqrt(gn);
    /* The float32 forward rounds the loss by about 2^-24 * sum |out * R| per
     * operation: that, over the step, is the numeric projection's noise. */
    double l0, s0;
    if (!eval_loss2(f, ctx, inputs, r, nout, &l0, &s0)) {
        fail(rep, "the function failed");
        worst = -1;
        goto out;
    }
    double floor = o->noise * 0x1p-24 * s0 / h0;
    cg_rng rng = cg_rng_new(o->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(k + 1)));
    /* Steps h/2, h and 2h: Richardson over (h/2, h) and over (h, 2h) must
     * agree, else the direction crosses a kink (relu at 0, a max changing
     * its winner) and is replaced by another, at most 3 * proj_count tries. */
    int done = 0;
    for (int tries = 0; done < o->proj_count && tries < 3 * o->proj_count; tries++) {
        for (int64_t off = 0; off < span; off++)
            v[off] = cg_rng_below(&rng, 2) ? 1 : -1;
        double err[3], a = 0.0;
        for (int64_t off = 0; off < span; off++)
            if (used[off])
                a += ana[off] * v[off];
        for (int j = 0; j < 3; j++) {
            double h = h0 * (j == 0 ? 0.5 : j == 1 ? 1.0 : 2.0), lp, lm;
            perturb(data, orig, v, used, span, h, sp);
            cg_tensor_modified(inputs[k]); /* written through its data pointer */
            bool ok = eval_loss(f, ctx, inputs, r, nout, &lp);
            perturb(data, orig, v, used, span, -h, sm);
            cg_tensor_modified(inputs[k]);
            ok = ok && eval_loss(f, ctx, inputs, r, nout, &lm);
            memcpy(data, orig, (size_t)span * sizeof *orig);
            cg_tensor_modified(inputs[k]);
            if (!ok) {
                char b[400];
                snprintf(b, sizeof b, "the function failed while perturbing input %d: %s", k,
                         cg_last_error());
                fail(rep, b);
                worst = -1;
                goto out;
            }
            /* the analytic change for the steps actually taken */
            double da = 0.0;
            for (int64_t off = 0; off < span; off++)
                if (used[off])
                    da += ana[off] * (sp[off] - sm[off]);
            err[j] = ((lp - lm) - da) / (2 * h);
        }
        double e_small = (4 * err[0] - err[1]) / 3, e = (4 * err[1] - err[2]) / 3;
        double tol = o->proj_rtol * (fabs(a) + gn) + floor;
        if (fabs(e_small - e) > tol) /* not smooth along v: another direction */
            continue;
        done++;
        /* The error along v, four ways: the difference at h/2, Richardson
         * over (h/2, h) and over (h, 2h), and the value at 0 of the parabola
         * through the three steps, 2 e_small - e. A smooth function's right
         * gradient has all four near 0 and a wrong one all four off by its
         * error, but kinks crossed within the steps spoil some and let the
         * agreement above pass: one between h and 2h spoils only err[2]
         * (e); the relus of a layer, each crossed at its own distance, add
         * a term linear in the step that Richardson keeps (e_small holds a
         * third of it, e two thirds) and the parabola cancels. So the one
         * closest to 0 is the direction's error (tests/test_nn.c's layers
         * with relu failed their right gradients at up to 1.9x the
         * tolerance on 13 of 60 seeds with e alone). NaN anywhere fails. */
        const double est[4] = {err[0], e_small, e, 2 * e_small - e};
        double best = fabs(est[0]);
        for (int j = 1; j < 4; j++)
            best = fabs(est[j]) < best ? fabs(est[j]) : best;
        double ratio = tol > 0 ? best / tol : (best == 0 ? 0 : INFINITY);
        if (isnan(ratio) || isnan(err[0]) || isnan(err[1]) || isnan(err[2]))
            ratio = INFINITY;
        worst = ratio > worst ? ratio : worst;
    }
    *n_done = done;
out:
    free(orig);
    free(v);
    free(sp);
    free(sm);
    return worst;
}

/* The report's message, also recorded as the library's last error. */
static void fail(cg_gradcheck_report *rep, const char *why)
{
    rep->ok = false;
    snprintf(rep->message, sizeof rep->message, "gradcheck: %s", why);
    cg_set_error("%s", rep->message);
}

/* The analytic gradients: out = f(inputs), then backward of sum(out * R)
 * with R uniform in [-1, 1) (seed o->seed) into the inputs' grad. *r
 * (malloc'd, also on failure) receives R, *nout the output's size. False +
 * the report failed when f or backward fails. */
static bool analytic(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs,
                     const cg_gradcheck_opts *o, float **r, int64_t *nout, cg_gradcheck_report *rep)
{
    unsigned long serial = cg_error_serial();
    cg_tensor *out = f(ctx, inputs);
    if (!out) {
        char b[400];
        snprintf(b, sizeof b, "the function failed: %s",
                 cg_error_serial() != serial ? cg_last_error()
                                             : "it returned NULL and recorded no error");
        fail(rep, b);
        return false;
    }
    *nout = cg_numel(out);
    *r = malloc((size_t)(*nout ? *nout : 1) * sizeof **r);
    cg_rng rng = cg_rng_new(o->seed);
    for (int64_t i = 0; *r && i < *nout; i++)
        (*r)[i] = cg_rng_uniform(&rng) * 2.0f - 1.0f;
    cg_tensor *rt = *r ? cg_from_data(out->ndim, out->shape, *r) : NULL;
    cg_tensor *prod = cg_mul(out, rt);
    cg_tensor *loss = cg_sum_all(prod);
    const bool reached = loss && loss->requires_grad;
    bool bw = reached && cg_backward(loss, NULL, false);
    cg_release_all(4, out, rt, prod, loss);
    if (loss && !reached) {
        fail(rep, "the output does not depend on any input that requires grad");
        return false;
    }
    if (!bw) {
        char b[400];
        snprintf(b, sizeof b, "analytic backward failed: %s", cg_last_error());
        fail(rep, b);
        return false;
    }
    return true;
}

/* The storage offsets x's n > 0 elements span: [*lo, *lo + *span). */
static void storage_span(const cg_tensor *x, int64_t n, int64_t *lo, int64_t *span)
{
    int64_t l = INT64_MAX, h = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = elem_offset(x, i);
        l = off < l ? off : l;
        h = off > h ? off : h;
    }
    *lo = l;
    *span = h - l + 1;
}

/* x's analytic gradient summed per storage offset into ana[span] (zero
 * without a path to the output); used[off] marks the offsets x uses. */
static bool grad_by_offset(const cg_tensor *x, int64_t n, int64_t lo, double *ana, char *used)
{
    float *gv = malloc((size_t)n * sizeof *gv);
    if (!gv)
        return false;
    if (x->grad) {
        /* cannot fail: both pointers are set, and the debug check's freed
         * tensor cannot be a gradient x still holds */
        (void)cg_copy_to(x->grad, gv);
    } else {
        memset(gv, 0, (size_t)n * sizeof *gv); /* no path to the output: zero */
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t off = elem_offset(x, i) - lo;
        ana[off] += gv[i];
        used[off] = 1;
    }
    free(gv);
    return true;
}

/* The element-wise check of input k (its used storage at data[0..span),
 * storage offset lo): a central difference at every used offset against
 * ana, the worst ratio to the tolerance kept in the report. False + the
 * report failed when the function fails. */
static bool check_elements(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                           int64_t nout, const cg_gradcheck_opts *o, double atol, int k,
                           float *data, int64_t lo, const double *ana, const char *used,
                           int64_t span, cg_gradcheck_report *rep)
{
    for (int64_t off = 0; off < span; off++) {
        if (!used[off])
            continue;
        float orig = data[off];
        double lp, lm;
        data[off] = (float)(orig + o->eps);
        cg_tensor_modified(inputs[k]); /* written through its data pointer */
        double hp = (double)data[off] - orig;
        bool e1 = eval_loss(f, ctx, inputs, r, nout, &lp);
        data[off] = (float)(orig - o->eps);
        cg_tensor_modified(inputs[k]);
        double hm = orig - (double)data[off];
        bool e2 = e1 && eval_loss(f, ctx, inputs, r, nout, &lm);
        data[off] = orig;
        cg_tensor_modified(inputs[k]);
        if (!e2) {
            char b[400];
            snprintf(b, sizeof b, "the function failed while perturbing input %d: %s", k,
                     cg_last_error());
            fail(rep, b);
            return false;
        }
        double num = (lp - lm) / (hp + hm); /* the steps as actually stored */
        double a = ana[off];
        double abs_err = fabs(a - num);
        double ratio = abs_err / (atol + o->rtol * fabs(num));
        if (isnan(ratio)) /* a NaN on either side, or both, or inf against inf */
            ratio = INFINITY;
        rep->checked++;
        if (ratio > rep->worst_ratio || rep->worst_input < 0) {
            rep->worst_ratio = ratio;
            rep->worst_input = k;
            rep->worst_index = lo + off - inputs[k]->offset;
            rep->analytic = a;
            rep->numeric = num;
            rep->abs_err = abs_err;
            rep->rel_err = abs_err / (fabs(num) > 1e-12 ? fabs(num) : 1e-12);
        }
    }
    return true;
}

/* The projections' directions over all the inputs, for the message */
typedef struct {
    int dirs;        /* directions checked */
    int rough;       /* inputs along which every direction tried crossed a kink */
    int first_rough; /* the first of them */
} proj_tally;

/* Input k checked element by element, then along random directions
 * (project); its gradient zeroed after. False + the report failed when the
 * function fails or memory runs out. */
static bool check_input(cg_gradcheck_fn f, void *ctx, cg_tensor *const *inputs, const float *r,
                        int64_t nout, const cg_gradcheck_opts *o, double atol, int k,
                        proj_tally *pt, cg_gradcheck_report *rep)
{
    cg_tensor *x = inputs[k];
    int64_t n = cg_numel(x), lo, span;
    storage_span(x, n, &lo, &span);
    double *ana = calloc((size_t)span, sizeof *ana);
    char *used = calloc((size_t)span, 1);
    bool ok = ana && used && grad_by_offset(x, n, lo, ana, used);
    if (!ok) {
        free(ana);
        free(used);
        fail(rep, "out of memory");
        return false;
    }
    float *data = (float *)x->storage->data + lo;
    ok = check_elements(f, ctx, inputs, r, nout, o, atol, k, data, lo, ana, used, span, rep);
    if (ok && o->proj_count > 0) {
        int done = 0;
        double pr = project(f, ctx, inputs, r, nout, o, k, data, ana, used, span, &done, rep);
        pt->dirs += done;
        if (pr < 0) {
            ok = false;
        } else if (done == 0) { /* nothing checked: not a worst of 0 */
            pt->first_rough = pt->rough++ ? pt->first_rough : k;
        } else if (pr > rep->worst_proj_ratio || rep->worst_proj_input < 0) {
            rep->worst_proj_ratio = pr;
            rep->worst_proj_input = k;
        }
    }
    free(ana);
    free(used);
    cg_zero_grad(x);
    return ok;
}

/* The projections' part of the message, from offset len */
static void proj_message(cg_gradcheck_report *rep, const proj_tally *pt, int proj_count, int len)
{
    if (proj_count == 0 || len < 0 || (size_t)len >= sizeof rep->message)
        return;
    char *m = rep->message + len;
    size_t room = sizeof rep->message - (size_t)len;
    int n = pt->dirs ? snprintf(m, room,
                                "; projections: %d directions, worst at input %d, %.2fx "
                                "the tolerance",
                                pt->dirs, rep->worst_proj_input, rep->worst_proj_ratio)
                     : snprintf(m, room, "; projections: none checked");
    if (pt->rough && n >= 0 && (size_t)n < room)
        snprintf(m + n, room - (size_t)n,
                 " (along %d input%s, the first input %d, every direction crossed a kink)",
                 pt->rough, pt->rough > 1 ? "s" : "", pt->first_rough);
}

/* What is wrong with o, or NULL: tolerances below 0 would pass anything */
static const char *opts_problem(const cg_gradcheck_opts *o)
{
    return !(o->eps > 0 && o->eps < INFINITY)      ? "opts.eps must be finite and > 0"
           : !(o->atol >= 0 && o->atol < INFINITY) ? "opts.atol must be finite and >= 0"
           : !(o->rtol >= 0 && o->rtol < INFINITY) ? "opts.rtol must be finite and >= 0"
           : o->proj_count < 0                     ? "opts.proj_count must be >= 0"
           : o->proj_count > 0 && !(o->proj_eps > 0 && o->proj_eps < INFINITY)
               ? "opts.proj_eps must be finite and > 0"
           : !(o->proj_rtol >= 0 && o->proj_rtol < INFINITY)
               ? "opts.proj_rtol must be finite and >= 0"
           : !(o->noise >= 0 && o->noise < INFINITY) ? "opts.noise must be finite and >= 0"
                                                     : NULL;
}

bool cg_gradcheck(cg_gradcheck_fn f, void *ctx, int n_inputs, cg_tensor *const *inputs,
                  const cg_gradcheck_opts *opts, cg_gradcheck_report *report)
{
    cg_gradcheck_report local;
    cg_gradcheck_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    rep->worst_input = -1;
    rep->worst_proj_input = -1;
    cg_gradcheck_opts o = opts ? *opts : cg_gradcheck_defaults();
    const char *bad = !f                        ? "NULL function"
                      : !inputs || n_inputs < 1 ? "no inputs (n_inputs < 1 or a NULL array)"
                                                : opts_problem(&o);
    if (bad) {
        fail(rep, bad);
        return false;
    }
    /* the inputs checked: float32 ones (their steps are float values
     * written into the storage); others may have any dtype */
    bool any = false;
    for (int i = 0; i < n_inputs; i++) {
        const cg_tensor *x = inputs[i];
        if (!x || !x->requires_grad)
            continue;
        if (x->dtype != CG_F32) {
            char b[200];
            snprintf(b, sizeof b,
                     "input %d is %s; its steps are float32 values (check the op on float32 "
                     "inputs)",
                     i, cg_dtype_name(x->dtype));
            fail(rep, b);
            return false;
        }
        any = true;
    }
    if (!any) {
        fail(rep, "no input requires grad (cg_requires_grad the inputs to check)");
        return false;
    }

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

    float *r = NULL;
    int64_t nout = 0;
    proj_tally pt = {0};
    bool ok = analytic(f, ctx, inputs, &o, &r, &nout, rep);
    if (ok) {
        cg_no_grad_begin();
        /* the element-wise absolute tolerance, at least the loss's rounding noise */
        double l0, s0 = 0;
        if (!eval_loss2(f, ctx, inputs, r, nout, &l0, &s0)) {
            fail(rep, "the function failed");
            ok = false;
        }
        double noise_atol = o.noise * 0x1p-24 * s0 / o.eps;
        double atol = o.atol > noise_atol ? o.atol : noise_atol;
        for (int k = 0; k < n_inputs && ok; k++)
            if (inputs[k] && inputs[k]->requires_grad && cg_numel(inputs[k]) > 0)
                ok = check_input(f, ctx, inputs, r, nout, &o, atol, k, &pt, rep);
        cg_no_grad_end();
    }
    if (ok) {
        rep->ok = rep->worst_ratio <= 1.0 && rep->worst_proj_ratio <= 1.0;
        int len = snprintf(rep->message, sizeof rep->message,
                           "gradcheck %s: %lld elements; worst at input %d offset %lld: analytic "
                           "%.8g, numeric %.8g (abs err %.3g, rel err %.3g, %.2fx the tolerance)",
                           rep->ok ? "passed" : "FAILED", (long long)rep->checked, rep->worst_input,
                           (long long)rep->worst_index, rep->analytic, rep->numeric, rep->abs_err,
                           rep->rel_err, rep->worst_ratio);
        proj_message(rep, &pt, o.proj_count, len);
        ok = rep->ok;
        if (!ok)
            cg_set_error("%s", rep->message);
    }
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
