/* cgrad's convolution and transposed convolution (autograd's cg_conv1d /
 * cg_conv2d / cg_conv3d / cg_conv_transpose1d / 2d / 3d, nn/conv.h's
 * modules) against PyTorch's F.conv1d / F.conv2d / F.conv3d /
 * F.conv_transpose1d / 2d / 3d and nn.Conv1d / 2d / 3d and
 * nn.ConvTranspose1d / 2d / 3d (tests/interop/conv.py writes the cases):
 *     check_conv DIR     exit 0: every case within tolerance; 1: not
 * Each case's config is read from its file ("cfg"), the output and the
 * gradients of x, w and b of the loss sum(y * r) matched within 2e-6
 * (relative to the largest value; PyTorch ran in float64 on float32
 * values). The modules: PyTorch's state dict loaded by its names
 * (cg_module_load_file, strict), the output and the gradients of x and of
 * both parameters matched likewise; so are nn.ConvTranspose1d / 2d called
 * with output_size (cg_conv_transpose_forward); the 3-d cases are listed
 * in DIR/cases3d.txt, their modules module3d, tmodule3d and osize3d.
 * F.unfold / F.fold
 * (cg_unfold / cg_fold, DIR/folds.txt): the output and x's gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "rel_diff.h"

#define TOL 2e-6

/* |got - the file's name| within TOL; prints it, *worst the largest */
static bool near(const char *what, const cg_tensor *got, cg_st_file *f, const char *name,
                 double *worst)
{
    cg_tensor *want = cg_st_get_f32(f, name);
    const double e = rel_diff(got, want);
    cg_release(want);
    printf(" %s %.1e", what, e);
    *worst = e > *worst ? e : *worst;
    return e <= TOL;
}

/* sum(y * the file's r) and its backward; false + message */
static bool loss_backward(cg_tensor *y, cg_st_file *f)
{
    cg_tensor *r = cg_st_get_f32(f, "r"), *p = cg_mul(y, r), *s = cg_sum_all(p);
    const bool ok = s && cg_backward(s, NULL, false);
    cg_release_all(3, r, p, s);
    return ok;
}

static bool run_case(const char *dir, const char *name, double *worst)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    cg_st_file *f = cg_st_open(path);
    cg_tensor *cfg = f ? cg_st_get(f, "cfg") : NULL;
    const int64_t nq = cfg ? cg_numel(cfg) : 0;
    if (!cfg || cfg->dtype != CG_I64 || (nq != 9 && nq != 12 && nq != 13 && nq != 17)) {
        fprintf(stderr, "check_conv: %s: %s\n", name, cg_last_error());
        cg_release(cfg);
        cg_st_close(f);
        return false;
    }
    const int64_t *q = cg_data_i64(cfg);
    const bool t = nq == 17 ? q[12] : nq >= 12 && q[9]; /* transposed */
    cg_conv_cfg c = {{q[1], q[2]},
                     {q[3], q[4]},
                     {q[5], q[6]},
                     q[7],
                     (cg_conv_pad)q[8],
                     {t ? q[10] : 0, t ? q[11] : 0},
                     nq == 13 ? (cg_pad_mode)q[12] : CG_PAD_CONSTANT};
    if (nq == 17) /* 3-d: 3 entries each */
        c = (cg_conv_cfg){{q[1], q[2], q[3]}, {q[4], q[5], q[6]},    {q[7], q[8], q[9]}, q[10],
                          (cg_conv_pad)q[11], {q[13], q[14], q[15]}, (cg_pad_mode)q[16]};
    static cg_tensor *(*const fns[2][3])(cg_tensor *, cg_tensor *, cg_tensor *,
                                         const cg_conv_cfg *) = {
        {cg_conv1d, cg_conv2d, cg_conv3d},
        {cg_conv_transpose1d, cg_conv_transpose2d, cg_conv_transpose3d}};
    cg_tensor *x = cg_requires_grad(cg_st_get_f32(f, "x"), true);
    cg_tensor *w = cg_requires_grad(cg_st_get_f32(f, "w"), true);
    cg_tensor *b = cg_st_has(f, "b") ? cg_requires_grad(cg_st_get_f32(f, "b"), true) : NULL;
    cg_tensor *y = q[0] >= 1 && q[0] <= 3 ? fns[t][q[0] - 1](x, w, b, &c) : NULL;
    bool ok = y && loss_backward(y, f);
    if (!ok)
        fprintf(stderr, "check_conv: %s: %s\n", name, cg_last_error());
    printf("%s:", name);
    ok = ok && near("y", y, f, "y", worst) & near("dx", cg_grad(x), f, "grad.x", worst) &
                   near("dw", cg_grad(w), f, "grad.w", worst) &
                   (!b || near("db", cg_grad(b), f, "grad.b", worst));
    printf(" %s\n", ok ? "ok" : "FAIL");
    cg_release_all(5, cfg, x, w, b, y);
    cg_st_close(f);
    return ok;
}

/* F.unfold / F.fold: the options from the file's "cfg" */
static bool run_fold(const char *dir, const char *name, double *worst)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    cg_st_file *f = cg_st_open(path);
    cg_tensor *cfg = f ? cg_st_get(f, "cfg") : NULL;
    if (!cfg || cfg->dtype != CG_I64 || cg_numel(cfg) != 11) {
        fprintf(stderr, "check_conv: %s: %s\n", name, cg_last_error());
        cg_release(cfg);
        cg_st_close(f);
        return false;
    }
    const int64_t *q = cg_data_i64(cfg);
    const cg_fold_cfg c = {{q[1], q[2]}, {q[3], q[4]}, {q[5], q[6]}, {q[7], q[8]}};
    cg_tensor *x = cg_requires_grad(cg_st_get_f32(f, "x"), true);
    cg_tensor *y = q[0] ? cg_fold(x, q[9], q[10], &c) : cg_unfold(x, &c);
    bool ok = y && loss_backward(y, f);
    if (!ok)
        fprintf(stderr, "check_conv: %s: %s\n", name, cg_last_error());
    printf("%s:", name);
    ok = ok && near("y", y, f, "y", worst) & near("dx", cg_grad(x), f, "grad.x", worst);
    printf(" %s\n", ok ? "ok" : "FAIL");
    cg_release_all(3, cfg, x, y);
    cg_st_close(f);
    return ok;
}

/* nn.Conv1d(4, 6, 3, stride 2, padding 1, groups 2) and nn.Conv2d(4, 6,
 * (3, 2), stride (2, 1), padding (1, 0), dilation (1, 2), groups 2), as
 * conv.py builds them, nn.Conv3d(4, 6, (3, 2, 2)) with the 2-d one's
 * numbers and padding 1 in the width; t: nn.ConvTranspose1d / 2d / 3d
 * with those and output_padding 1 in the first spatial dim; osize:
 * conv.py's write_osize modules called with output_size */
static bool run_module(const char *dir, int nd, bool t, bool osize, double *worst)
{
    char path[4096], io_path[4096];
    const char *pre = osize ? "osize" : t ? "tmodule" : "module";
    snprintf(path, sizeof path, "%s/%s%dd.safetensors", dir, pre, nd);
    snprintf(io_path, sizeof io_path, "%s/%s%dd.io.safetensors", dir, pre, nd);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.groups = 2;
    c.stride[0] = 2;
    c.padding[0] = 1;
    c.output_padding[0] = t;
    if (nd >= 2)
        c.dilation[1] = 2;
    if (nd == 3)
        c.padding[2] = 1;
    if (osize) /* 3 -> 4 channels, stride (3, 2), padding (1, 0), dilation (1, 2) */
        c = CG_CONV_DEFAULT, c.stride[0] = 3, c.stride[1] = 2, c.padding[0] = 1, c.dilation[1] = 2;
    const int64_t in = osize ? 3 : 4, out = osize ? 4 : 6;
    cg_conv *m =
        nd == 1   ? (t ? cg_conv_transpose1d_new : cg_conv1d_new)(in, out, 3, &c, true, NULL)
        : nd == 2 ? (t ? cg_conv_transpose2d_new : cg_conv2d_new)(in, out, 3, 2, &c, true, NULL)
                  : (t ? cg_conv_transpose3d_new : cg_conv3d_new)(in, out, 3, 2, 2, &c, true, NULL);
    cg_st_file *io = cg_st_open(io_path);
    bool ok = m && io && cg_module_load_file(CG_MODULE(m), path);
    cg_tensor *x = ok ? cg_requires_grad(cg_st_get_f32(io, "x"), true) : NULL;
    cg_tensor *size = ok && osize ? cg_st_get(io, "size") : NULL;
    cg_tensor *y = !ok      ? NULL
                   : !osize ? cg_conv_forward(m, x)
                   : size && size->dtype == CG_I64
                       ? cg_conv_transpose_forward(m, x, (int)cg_numel(size), cg_data_i64(size))
                       : NULL;
    ok = y && loss_backward(y, io);
    if (!ok)
        fprintf(stderr, "check_conv: %s%dd: %s\n", pre, nd, cg_last_error());
    printf("%s%dd (state dict loaded):", pre, nd);
    ok = ok && near("y", y, io, "y", worst) & near("dx", cg_grad(x), io, "grad.x", worst) &
                   near("dweight", cg_grad(m->weight), io, "grad.weight", worst) &
                   near("dbias", cg_grad(m->bias), io, "grad.bias", worst);
    printf(" %s\n", ok ? "ok" : "FAIL");
    cg_release_all(3, x, y, size);
    cg_module_free(CG_MODULE(m));
    cg_st_close(io);
    return ok;
}

/* run on each name DIR/file lists: the count (-1: no list), *bad the
 * failures added */
static int run_list(const char *dir, const char *file,
                    bool (*run)(const char *, const char *, double *), int *bad, double *worst)
{
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *list = fopen(path, "r");
    if (!list) {
        fprintf(stderr, "check_conv: cannot open %s\n", path);
        return -1;
    }
    int n = 0;
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\n")] = 0;
        if (*line)
            n++, *bad += !run(dir, line, worst);
    }
    fclose(list);
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = argc == 2 ? argv[1] : NULL;
    if (!dir)
        return fprintf(stderr, "usage: check_conv DIR\n"), 2;
    int bad = 0;
    double worst = 0;
    const int n = run_list(dir, "cases.txt", run_case, &bad, &worst);
    const int n3 = run_list(dir, "cases3d.txt", run_case, &bad, &worst);
    for (int k = 0; k < 9; k++) /* 1-d, 2-d, 3-d: a module, a transposed one, with output_size */
        bad += !run_module(dir, k % 3 + 1, k >= 3, k >= 6, &worst);
    const int nf = run_list(dir, "folds.txt", run_fold, &bad, &worst);
    printf("check_conv: %d cases, %d 3-d cases, 9 modules and %d unfold/fold cases, %d failed; "
           "worst %.1e (tolerance %.0e)\n",
           n, n3, nf, bad, worst, TOL);
    return bad || n <= 0 || n3 <= 0 || nf <= 0 ? 1 : 0;
}
