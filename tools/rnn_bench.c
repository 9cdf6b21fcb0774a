/* The recurrent modules' training step at PyTorch's word_language_model
 * sizes (examples/word_language_model: 2 layers, bptt 35, batch 20; the
 * medium model's 650 units): one forward of x [35, 20, H] through a
 * 2-layer nn.LSTM (or nn.GRU, nn.RNN), the loss sum(output), the backward,
 * the gradients zeroed. tools/rnn_peer.py is the same step in PyTorch.
 *
 *   rnn_bench [KIND [H [STEPS]]]   (default lstm 650 20; KIND lstm, gru or rnn)
 *
 * Prints one JSON line: the median and best step in ms over STEPS timed
 * steps, after 2 untimed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "core/parse.h"
#include "models/train/prog.h"
#include "models/util/cli.h"

static const char HELP[] =
    "usage: rnn_bench [KIND [H [STEPS]]]   (default lstm 650 20; KIND lstm, gru or rnn;\n"
    "H in [1, 4096], STEPS in [1, 1000])\n"
    "A 2-layer recurrent module's training step (forward, sum, backward) over\n"
    "x [35, 20, H], as PyTorch's word_language_model; one JSON line of the median\n"
    "and best step in ms. Exit status: 0 done, 1 failed, 2 bad command line.\n";

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* KIND, H, STEPS: -1 to go on, else the exit code */
static int parse_args(int argc, char **argv, cg_rnn_mode *mode, int64_t *h, int64_t *steps)
{
    int np;
    cg_prog_set_name("rnn_bench");
    cg_cli_streams();
    if (!cg_env_check()) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    int rc = cg_prog_parse_pos(argc - 1, argv + 1, NULL, 0, HELP, &np);
    if (rc >= 0)
        return rc;
    if (np > 3)
        return cg_prog_fail("unexpected argument '%s' (try --help)", argv[4]), CG_EXIT_USAGE;
    if (np > 0) {
        const char *k = argv[1];
        if (strcmp(k, "lstm") && strcmp(k, "gru") && strcmp(k, "rnn"))
            return cg_prog_fail("KIND '%s' is not lstm, gru or rnn", k), CG_EXIT_USAGE;
        *mode = !strcmp(k, "lstm") ? CG_RNN_LSTM : !strcmp(k, "gru") ? CG_RNN_GRU : CG_RNN_TANH;
    }
    if ((np > 1 && !cg_parse_i64("H", argv[2], 1, 4096, h)) ||
        (np > 2 && !cg_parse_i64("STEPS", argv[3], 1, 1000, steps)))
        return cg_prog_fail_lib(NULL), CG_EXIT_USAGE;
    return -1;
}

/* One step's seconds, or -1 + error */
static double step(cg_rnn *m, cg_tensor *x)
{
    const double t0 = cg_now();
    cg_tensor *hn = NULL, *cn = NULL;
    cg_tensor *y = m->mode == CG_RNN_LSTM  ? cg_lstm_forward(m, x, NULL, NULL, &hn, &cn)
                   : m->mode == CG_RNN_GRU ? cg_gru_forward(m, x, NULL, &hn)
                                           : cg_rnn_forward(m, x, NULL, &hn);
    cg_tensor *l = y ? cg_sum_all(y) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    cg_release_all(4, y, hn, cn, l);
    cg_module_zero_grad(CG_MODULE(m));
    return ok ? cg_now() - t0 : -1.0;
}

int main(int argc, char **argv)
{
    cg_rnn_mode mode = CG_RNN_LSTM;
    int64_t H = 650, steps = 20;
    int rc = parse_args(argc, argv, &mode, &H, &steps);
    if (rc >= 0)
        return rc;
    cg_rnn_config cfg = CG_RNN_CONFIG(H, H);
    cfg.num_layers = 2;
    cg_rng r = cg_rng_new(1);
    cg_rnn *m = mode == CG_RNN_LSTM  ? cg_lstm_new(&cfg, &r)
                : mode == CG_RNN_GRU ? cg_gru_new(&cfg, &r)
                                     : cg_rnn_new(&cfg, &r);
    cg_tensor *x = m ? cg_randn(&r, CG_SHAPE(35, 20, H)) : NULL;
    double *t = malloc((size_t)steps * sizeof *t);
    bool ok = x && t;
    for (int64_t s = -2; ok && s < steps; s++) {
        const double dt = step(m, x);
        ok = dt >= 0;
        if (s >= 0)
            t[s] = dt;
    }
    if (ok) {
        qsort(t, (size_t)steps, sizeof *t, cmp_double);
        printf("{\"bench\": \"rnn\", \"impl\": \"cgrad\", \"kind\": \"%s\", \"hidden\": %lld, "
               "\"layers\": 2, \"seq\": 35, \"batch\": 20, \"threads\": %d, \"steps\": %lld, "
               "\"step_ms_median\": %.3f, \"step_ms_best\": %.3f}\n",
               argc > 1 ? argv[1] : "lstm", (long long)H, cg_get_num_threads(), (long long)steps,
               t[steps / 2] * 1e3, t[0] * 1e3);
    }
    free(t);
    cg_release(x);
    cg_module_free(CG_MODULE(m));
    if (!ok)
        return cg_prog_fail_lib(NULL);
    return cg_cli_stdout_ok() ? 0 : cg_prog_fail_lib(NULL);
}
