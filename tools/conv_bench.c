/* A convolution's training step: one F.conv1d / F.conv2d / F.conv3d /
 * F.conv_transpose2d / F.conv_transpose3d forward (x, w and b requiring
 * grad), the loss sum(output), the backward, the gradients dropped.
 * tools/conv_peer.py is the same step in PyTorch.
 *
 *   conv_bench [CASE [STEPS [N C O S K]]]
 *
 * CASE: conv1d (default N 32, C 256 -> O 256, L 128, K 3), conv2d (N 16,
 * C 64 -> 64, 32x32, 3x3), depthwise (conv2d, groups C: N 16, C 128 ->
 * 128, 32x32, 3x3) or 1x1 (conv2d, N 16, C 128 -> 128, 32x32); padding
 * K / 2, stride 1; or convt2d (conv_transpose2d, an upsampling layer: N
 * 16, C 64 -> 64, 16x16 -> 32x32, 4x4, stride 2, padding (K - 2) / 2, at
 * least 0); conv3d (N 4, C 32 -> 32, 16x16x16, 3x3x3) or convt3d
 * (conv_transpose3d: N 4, C 32 -> 32, 8^3 -> 16^3, 4x4x4, stride 2). S
 * is L (conv1d) or H = W (= D), K the kernel's size per dim.
 * Prints one JSON line: the median and best step in ms over STEPS timed
 * steps (default 20), after 2 untimed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "core/parse.h"
#include "models/train/prog.h"
#include "models/util/cli.h"

#define USAGE                                                                               \
    "usage: conv_bench [CASE [STEPS [N C O S K]]]   (CASE conv1d, conv2d, depthwise, 1x1, " \
    "convt2d, conv3d or convt3d)\n"
static const char HELP[] =
    USAGE "Default conv1d 20; STEPS in [1, 1000], N, C, O, S, K in [1, 4096].\n"
          "A convolution's training step (forward, sum, backward; x, w and b requiring grad):\n"
          "conv1d N 32, C 256 -> 256, L 128, K 3; conv2d N 16, C 64 -> 64, 32x32, 3x3;\n"
          "depthwise (groups C) N 16, C 128 -> 128, 32x32, 3x3; 1x1 N 16, C 128 -> 128, 32x32;\n"
          "padding K / 2, stride 1 (S: the length, or the height and width); convt2d\n"
          "(conv_transpose2d) N 16, C 64 -> 64, 16x16 -> 32x32, 4x4, stride 2, padding\n"
          "(K - 2) / 2 (at least 0); conv3d N 4, C 32 -> 32, 16x16x16, 3x3x3; convt3d\n"
          "(conv_transpose3d) N 4, C 32 -> 32, 8^3 -> 16^3, 4x4x4, stride 2. One JSON line of\n"
          "the median and best step in ms. Exit status: 0 done, 1 failed, 2 bad command line.\n";

typedef struct {
    const char *name;
    int nd;
    bool depthwise, transposed;
    int64_t N, C, O, S, K;
} bench_case;

static const bench_case CASES[] = {
    {"conv1d", 1, false, false, 32, 256, 256, 128, 3},
    {"conv2d", 2, false, false, 16, 64, 64, 32, 3},
    {"depthwise", 2, true, false, 16, 128, 128, 32, 3},
    {"1x1", 2, false, false, 16, 128, 128, 32, 1},
    {"convt2d", 2, false, true, 16, 64, 64, 16, 4},
    {"conv3d", 3, false, false, 4, 32, 32, 16, 3},
    {"convt3d", 3, false, true, 4, 32, 32, 8, 4},
};

/* t[0..n) sorted in place (insertion: a few steps) */
static void sort_times(double *t, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        for (int64_t k = i; k > 0 && t[k] < t[k - 1]; k--) {
            const double v = t[k];
            t[k] = t[k - 1];
            t[k - 1] = v;
        }
}

/* CASE, STEPS and the sizes: -1 to go on, else the exit code */
static int parse_args(int argc, char **argv, bench_case *c, int64_t *steps)
{
    int np, rc = cg_prog_parse_pos(argc - 1, argv + 1, NULL, 0, HELP, &np);
    if (rc >= 0)
        return rc;
    if (np != 0 && np != 1 && np != 2 && np != 7)
        return cg_prog_fail("%d arguments, expected 0, 1, 2 or 7 (try --help)", np), CG_EXIT_USAGE;
    *c = CASES[0];
    if (np > 0) {
        size_t i = 0;
        while (i < sizeof CASES / sizeof *CASES && strcmp(argv[1], CASES[i].name))
            i++;
        if (i == sizeof CASES / sizeof *CASES)
            return cg_prog_fail("CASE '%s' is not conv1d, conv2d, depthwise, 1x1, convt2d, "
                                "conv3d or convt3d",
                                argv[1]),
                   CG_EXIT_USAGE;
        *c = CASES[i];
    }
    if (np > 1 && !cg_parse_i64("STEPS", argv[2], 1, 1000, steps))
        return cg_prog_fail_lib(NULL), CG_EXIT_USAGE;
    int64_t *v[5] = {&c->N, &c->C, &c->O, &c->S, &c->K};
    static const char *const names[5] = {"N", "C", "O", "S", "K"};
    for (int i = 0; np == 7 && i < 5; i++)
        if (!cg_parse_i64(names[i], argv[3 + i], 1, 4096, v[i]))
            return cg_prog_fail_lib(NULL), CG_EXIT_USAGE;
    if (c->depthwise && c->O % c->C)
        return cg_prog_fail("depthwise: O (%lld) must be a multiple of C (%lld)", (long long)c->O,
                            (long long)c->C),
               CG_EXIT_USAGE;
    return -1;
}

/* One step's seconds, or -1 + error */
static double step(const bench_case *c, const cg_conv_cfg *cfg, cg_tensor *const in[3])
{
    static cg_tensor *(*const fns[2][3])(cg_tensor *, cg_tensor *, cg_tensor *,
                                         const cg_conv_cfg *) = {
        {cg_conv1d, cg_conv2d, cg_conv3d},
        {cg_conv_transpose1d, cg_conv_transpose2d, cg_conv_transpose3d}};
    const double t0 = cg_now();
    cg_tensor *y = fns[c->transposed][c->nd - 1](in[0], in[1], in[2], cfg);
    cg_tensor *l = y ? cg_sum_all(y) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    cg_release_all(2, y, l);
    for (int i = 0; i < 3; i++)
        cg_zero_grad(in[i]);
    return ok ? cg_now() - t0 : -1.0;
}

int main(int argc, char **argv)
{
    bench_case c;
    int64_t steps = 20;
    cg_prog_set_name("conv_bench");
    cg_cli_streams();
    int rc = cg_env_check() ? parse_args(argc, argv, &c, &steps)
                            : (cg_prog_fail_lib(NULL), CG_EXIT_USAGE);
    if (rc == CG_EXIT_USAGE)
        fputs(USAGE, stderr);
    if (rc >= 0)
        return rc;
    const int64_t G = c.depthwise ? c.C : 1, s = c.transposed ? 2 : 1;
    const int64_t p = !c.transposed ? c.K / 2 : c.K > 2 ? (c.K - 2) / 2 : 0;
    const cg_conv_cfg cfg = {{s, s, s},           {p, p, p}, {1, 1, 1},      G,
                             CG_CONV_PAD_NUMBERS, {0, 0, 0}, CG_PAD_CONSTANT};
    cg_rng r = cg_rng_new(1);
    cg_tensor *in[3];
    /* x [N, C, S (nd times)], w [C, O / G, K...] transposed, else [O, C / G, K...] */
    int64_t xs[5] = {c.N, c.C, c.S, c.S, c.S}, ws[5] = {c.O, c.C / G, c.K, c.K, c.K};
    if (c.transposed)
        ws[0] = c.C, ws[1] = c.O / G;
    in[0] = cg_randn(&r, 2 + c.nd, xs);
    in[1] = cg_randn(&r, 2 + c.nd, ws);
    in[2] = cg_randn(&r, CG_SHAPE(c.O));
    for (int i = 0; i < 3; i++)
        cg_requires_grad(in[i], true);
    double *t = malloc((size_t)steps * sizeof *t);
    bool ok = in[0] && in[1] && in[2] && t;
    for (int64_t s = -2; ok && s < steps; s++) {
        const double dt = step(&c, &cfg, in);
        ok = dt >= 0;
        if (s >= 0)
            t[s] = dt;
    }
    if (ok) {
        sort_times(t, steps);
        printf("{\"bench\": \"conv\", \"impl\": \"cgrad\", \"case\": \"%s\", \"nd\": %d, "
               "\"n\": %lld, \"c\": %lld, \"o\": %lld, \"size\": %lld, \"k\": %lld, "
               "\"groups\": %lld, \"threads\": %d, \"steps\": %lld, \"step_ms_median\": %.3f, "
               "\"step_ms_best\": %.3f}\n",
               c.name, c.nd, (long long)c.N, (long long)c.C, (long long)c.O, (long long)c.S,
               (long long)c.K, (long long)G, cg_get_num_threads(), (long long)steps,
               t[steps / 2] * 1e3, t[0] * 1e3);
    }
    free(t);
    cg_release_all(3, in[0], in[1], in[2]);
    if (!ok)
        return cg_prog_fail_lib(NULL);
    return cg_cli_stdout_ok() ? 0 : cg_prog_fail_lib(NULL);
}
