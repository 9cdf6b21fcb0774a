/* What the PyTorch twins' checkers share (check_pool.c, check_norm.c):
 * comparisons that print what fails and keep the worst error, reading a
 * case's tensors, a transposed-storage view, and a module's training step
 * against PyTorch's (the module's forward through cg_module_forward). */
#ifndef CG_TESTS_INTEROP_TWIN_H
#define CG_TESTS_INTEROP_TWIN_H

#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/rel_diff.h"

static double twin_worst;

/* got within tol of want (rel_diff); else a line naming what */
static inline bool twin_within(const char *what, const cg_tensor *got, const cg_tensor *want,
                               double tol)
{
    const double e = rel_diff(got, want);
    twin_worst = e > twin_worst ? e : twin_worst;
    if (!(e <= tol))
        printf("  %s: error %.2e over %.0e (%s)\n", what, e, tol, cg_last_error());
    return e <= tol;
}

static inline bool twin_same_i64(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return false;
    cg_tensor *ac = cg_k_contiguous(a), *bc = cg_k_contiguous(b);
    const bool ok = !memcmp(cg_data_i64(ac), cg_data_i64(bc), (size_t)cg_numel(a) * 8);
    cg_release_all(2, ac, bc);
    return ok;
}

/* the tensor named by fmt from i and what ("%d.%s": case i's), or NULL */
static inline cg_tensor *twin_get(cg_st_file *f, const char *fmt, int i, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, fmt, i, what);
    return cg_st_has(f, name) ? cg_st_get(f, name) : NULL;
}

/* x with the same values, its last two dims' storage transposed */
static inline cg_tensor *twin_transposed(cg_tensor *x)
{
    cg_tensor *t = cg_view_transpose(x, -1, -2), *c = cg_k_contiguous(t);
    cg_tensor *v = cg_view_transpose(c, -1, -2);
    cg_release_all(2, t, c);
    return v;
}

/* io's "<name><step>" (step < 0: "<name>") */
static inline cg_tensor *twin_io(cg_st_file *io, const char *name, int step)
{
    char n[128];
    snprintf(n, sizeof n, step >= 0 ? "%s%d" : "%s", name, step);
    return cg_st_has(io, n) ? cg_st_get(io, n) : NULL;
}

/* run(dir, name) for each name of the file dir/list, one a line (blank
 * lines skipped): how many ran (-1: no such file, said), their failures
 * added to *bad */
static inline int twin_each_case(const char *dir, const char *list, int *bad,
                                 bool (*run)(const char *dir, const char *name))
{
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, list);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (*line)
            n++, *bad += !run(dir, line);
    }
    fclose(f);
    return n;
}

/* A training step of m (weight w, bias b, or NULL) on io's step: y and
 * the gradients of sum(y * r) as PyTorch's, within tol */
static inline bool twin_module_step(cg_module *m, cg_tensor *w, cg_tensor *b, cg_st_file *io,
                                    int step, double tol)
{
    cg_tensor *x = cg_requires_grad(twin_io(io, "x", step), true), *r = twin_io(io, "r", step);
    cg_tensor *y = cg_module_forward(m, x), *p = y ? cg_mul(y, r) : NULL;
    cg_tensor *l = p ? cg_sum_all(p) : NULL, *wy = twin_io(io, "y", step);
    cg_tensor *wg = twin_io(io, "gx", step), *ww = twin_io(io, "gw", step),
              *wb = twin_io(io, "gb", step);
    bool ok = l && cg_backward(l, NULL, false);
    ok = twin_within("y", y, wy, tol) && ok;
    ok = twin_within("grad x", ok ? cg_grad(x) : NULL, wg, tol) && ok;
    if (w) {
        ok = twin_within("grad weight", cg_grad(w), ww, tol) && ok;
        ok = twin_within("grad bias", cg_grad(b), wb, tol) && ok;
        cg_zero_grad(w);
        cg_zero_grad(b);
    }
    cg_release_all(9, x, r, y, p, l, wy, wg, ww, wb);
    return ok;
}

/* After the training steps: eval on io's "xe" as "ye", then m's buffers
 * as io's "final.NAME" (float within 1e-6, int64 exactly) */
static inline bool twin_module_eval(cg_module *m, cg_st_file *io, double tol)
{
    cg_module_train(m, false);
    cg_tensor *xe = twin_io(io, "xe", -1), *ye = twin_io(io, "ye", -1);
    cg_tensor *y = cg_module_forward(m, xe);
    bool ok = twin_within("eval y", y, ye, tol);
    cg_release_all(3, xe, ye, y);
    cg_param_list bufs = {0};
    ok = cg_module_buffers(m, &bufs) && ok;
    for (int i = 0; ok && i < bufs.n; i++) {
        char name[96];
        snprintf(name, sizeof name, "final.%s", bufs.items[i].name);
        cg_tensor *want = twin_io(io, name, -1);
        const cg_tensor *got = bufs.items[i].tensor;
        ok = got->dtype == CG_I64 ? twin_same_i64(got, want)
                                  : twin_within(bufs.items[i].name, got, want, 1e-6);
        cg_release(want);
    }
    cg_param_list_free(&bufs);
    return ok;
}

#endif
