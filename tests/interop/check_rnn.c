/* cgrad's RNN, CG_RNN_GRU and CG_RNN_LSTM and their cells (nn/rnn.h) against
 * torch.nn.RNN, CG_RNN_GRU, CG_RNN_LSTM, RNNCell, GRUCell and LSTMCell
 * (tests/interop/rnn.py writes the cases):
 *     check_rnn DIR     exit 0: every case within tolerance; 1: not
 * For each case the module is built, PyTorch's state dict loaded by its
 * own names (cg_module_load_file, strict), x run with the states given
 * (or none), and the output, h_n, c_n, the gradients of x and of the
 * states, and every parameter's gradient of the case's loss matched
 * within 2e-6 (relative to the largest value; PyTorch ran in float64).
 * And PyTorch's default initialisation: `torch.manual_seed(7); nn.CG_RNN_GRU(...)`
 * gives the bits of cg_module_reset_parameters_torch from cg_mt19937
 * seeded 7, every parameter. The cases with lengths run
 * cg_gru_forward_lengths / cg_lstm_forward_lengths against PyTorch's
 * packed sequences (pack_padded_sequence, pad_packed_sequence); the cells
 * are stepped over x's steps as rnn.py steps PyTorch's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "rel_diff.h"

typedef struct {
    const char *name;
    cg_rnn_mode mode;
    bool cell; /* the one-step module, stepped over x */
    int layers;
    bool bias, batch_first, bidirectional, states, lengths;
} rcase;

/* rnn.py's CASES, sizes IN 5, H 6 (lengths: in the io file; a cell's
 * "lengths": its x unbatched) */
static const rcase CASES[] = {
    {"gru", CG_RNN_GRU, false, 2, true, true, false, true, false},
    {"gru_bi", CG_RNN_GRU, false, 2, false, false, true, false, false},
    {"lstm", CG_RNN_LSTM, false, 2, true, false, false, true, false},
    {"lstm_bi", CG_RNN_LSTM, false, 1, true, true, true, false, false},
    {"gru_len", CG_RNN_GRU, false, 2, true, true, true, true, true},
    {"gru_len_short", CG_RNN_GRU, false, 1, true, false, false, false, true},
    {"lstm_len", CG_RNN_LSTM, false, 2, true, false, true, true, true},
    {"rnn_tanh", CG_RNN_TANH, false, 2, true, true, true, true, true},
    {"rnn_relu", CG_RNN_RELU, false, 2, false, false, false, false, false},
    {"rnn_cell", CG_RNN_TANH, true, 1, true, false, false, true, false},
    {"rnn_cell_relu", CG_RNN_RELU, true, 1, false, false, false, false, false},
    {"gru_cell", CG_RNN_GRU, true, 1, true, false, false, true, false},
    {"gru_cell_unb", CG_RNN_GRU, true, 1, true, false, false, false, true},
    {"lstm_cell", CG_RNN_LSTM, true, 1, true, false, false, true, false},
};

static cg_module *build(const rcase *c, cg_rng *rng)
{
    if (c->cell) {
        cg_rnn_cell *m = c->mode == CG_RNN_LSTM ? cg_lstm_cell_new(5, 6, c->bias, rng)
                         : c->mode == CG_RNN_GRU
                             ? cg_gru_cell_new(5, 6, c->bias, rng)
                             : cg_rnn_cell_new(5, 6, c->bias, c->mode == CG_RNN_RELU, rng);
        return CG_MODULE(m);
    }
    cg_rnn_config cfg = CG_RNN_CONFIG(5, 6);
    cfg.num_layers = c->layers;
    cfg.bias = c->bias;
    cfg.batch_first = c->batch_first;
    cfg.bidirectional = c->bidirectional;
    cfg.relu = c->mode == CG_RNN_RELU;
    return CG_MODULE(c->mode == CG_RNN_LSTM  ? cg_lstm_new(&cfg, rng)
                     : c->mode == CG_RNN_GRU ? cg_gru_new(&cfg, rng)
                                             : cg_rnn_new(&cfg, rng));
}

/* The module's output over x (and *hn, *cn): a cell stepped over x's
 * first dim, every h stacked; a module with or without lengths */
static cg_tensor *forward(const rcase *c, cg_module *mod, cg_tensor *x, const cg_tensor *len,
                          cg_tensor *h0, cg_tensor *c0, cg_tensor **hn, cg_tensor **cn)
{
    if (!c->cell) {
        cg_rnn *m = (cg_rnn *)mod;
        if (c->mode == CG_RNN_LSTM)
            return len ? cg_lstm_forward_lengths(m, x, len, h0, c0, hn, cn)
                       : cg_lstm_forward(m, x, h0, c0, hn, cn);
        if (c->mode == CG_RNN_GRU)
            return len ? cg_gru_forward_lengths(m, x, len, h0, hn) : cg_gru_forward(m, x, h0, hn);
        return len ? cg_rnn_forward_lengths(m, x, len, h0, hn) : cg_rnn_forward(m, x, h0, hn);
    }
    cg_rnn_cell *m = (cg_rnn_cell *)mod;
    const int64_t T = x->shape[0];
    cg_tensor *hs[8] = {0}, *h = cg_retain(h0), *cc = cg_retain(c0);
    bool ok = T <= 8;
    for (int64_t t = 0; ok && t < T; t++) {
        cg_tensor *xt = cg_select(x, 0, t), *c1 = NULL;
        hs[t] = c->mode == CG_RNN_LSTM  ? cg_lstm_cell_forward(m, xt, h, cc, &c1)
                : c->mode == CG_RNN_GRU ? cg_gru_cell_forward(m, xt, h)
                                        : cg_rnn_cell_forward(m, xt, h);
        cg_release_all(3, xt, h, cc);
        h = cg_retain(hs[t]), cc = c1;
        ok = hs[t] != NULL;
    }
    cg_tensor *y = ok ? cg_stack(hs, (int)T, 0) : NULL;
    for (int64_t t = 0; t < T && t < 8; t++)
        cg_release(hs[t]);
    *hn = h;
    if (cn)
        *cn = cc;
    else
        cg_release(cc);
    return y;
}

/* every parameter of m against the file's, bit for bit */
static bool init_matches(const char *dir, const rcase *c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/init_%s.safetensors", dir, c->name);
    cg_module *m = build(c, cg_init_skip());
    cg_mt19937 g;
    cg_mt19937_seed(&g, 7);
    cg_st_file *f = cg_st_open(path);
    bool ok = m && f && cg_module_reset_parameters_torch(m, &g);
    for (int i = 0; ok && i < m->n_params; i++) {
        cg_tensor *want = cg_st_get_f32(f, m->params[i].name);
        const cg_tensor *got = m->params[i].tensor;
        ok = want && cg_numel(want) == cg_numel(got) &&
             !memcmp(cg_data(want), cg_data(got), (size_t)cg_numel(got) * sizeof(float));
        if (!ok)
            fprintf(stderr, "check_rnn: init %s: %s differs from PyTorch's\n", c->name,
                    m->params[i].name);
        cg_release(want);
    }
    if (!m || !f)
        fprintf(stderr, "check_rnn: init %s: %s\n", c->name, cg_last_error());
    printf("init %s: %s\n", c->name, ok ? "same bits ok" : "FAIL");
    cg_st_close(f);
    cg_module_free(m);
    return ok;
}

/* cg_module_init_params_torch(seed 7, std 0.02) of a 2-layer CG_RNN_GRU under a
 * linear head against PyTorch's (rnn.py write_init_params): the CG_RNN_GRU keeps
 * its constructor's uniform draws, bit for bit; the head's weight is a
 * normal draw (the same values, maybe not the last bit: core/tensor.h
 * cg_normal_torch_), its bias 0. */
static bool init_params_matches(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/init_params.safetensors", dir);
    cg_rnn_config cfg = CG_RNN_CONFIG(5, 6);
    cfg.num_layers = 2;
    cg_module *root = cg_module_new("GRUHead");
    cg_rnn *gru = cg_gru_new(&cfg, cg_init_skip());
    cg_linear *head = cg_linear_new(6, 4, true, cg_init_skip());
    cg_st_file *f = cg_st_open(path);
    bool ok = root && gru && head && f && cg_module_add_child(root, "gru", gru) &&
              cg_module_add_child(root, "head", head) &&
              cg_module_init_params_torch(root, 7, 0.02f);
    cg_param_list ps = {0};
    ok = ok && cg_module_params(root, &ps) && ps.n == 10;
    for (int i = 0; ok && i < ps.n; i++) {
        const char *name = ps.items[i].name;
        const cg_tensor *got = ps.items[i].tensor;
        cg_tensor *want = cg_st_get_f32(f, name);
        ok = want && cg_numel(want) == cg_numel(got) &&
             (!strcmp(name, "head.weight")
                  ? rel_diff(got, want) <= 1e-6
                  : !memcmp(cg_data(want), cg_data(got), (size_t)cg_numel(got) * sizeof(float)));
        if (!ok)
            fprintf(stderr, "check_rnn: init_params: %s differs from PyTorch's\n", name);
        cg_release(want);
    }
    if (!ok && !ps.n)
        fprintf(stderr, "check_rnn: init_params: %s\n", cg_last_error());
    printf("init_params gru + head: %s\n", ok ? "same values ok" : "FAIL");
    cg_param_list_free(&ps);
    cg_st_close(f);
    cg_module_free(root);
    return ok;
}

/* |a - b| of the named pair within tol; prints it */
static bool near(const char *what, const cg_tensor *got, cg_st_file *io, const char *name,
                 double tol)
{
    cg_tensor *want = cg_st_get_f32(io, name);
    const double e = rel_diff(got, want);
    cg_release(want);
    printf(" %s %.1e", what, e);
    return e <= tol;
}

/* sum(t * the file's weights `rname`) */
static cg_tensor *weighted(cg_tensor *t, cg_st_file *io, const char *rname)
{
    cg_tensor *r = cg_st_get_f32(io, rname), *p = cg_mul(t, r);
    cg_tensor *s = cg_sum_all(p);
    cg_release_all(2, r, p);
    return s;
}

static bool run(const char *dir, const rcase *c, double tol)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    snprintf(io_path, sizeof io_path, "%s/%s.io.safetensors", dir, c->name);
    cg_rng rng = cg_rng_new(5);
    cg_module *m = build(c, &rng);
    cg_st_file *io = cg_st_open(io_path);
    bool ok = m && io && cg_module_load_file(m, path);
    cg_tensor *x = ok ? cg_st_get_f32(io, "x") : NULL, *h0 = NULL, *c0 = NULL;
    cg_tensor *len = x && c->lengths && !c->cell ? cg_st_get_i64(io, "lengths") : NULL;
    cg_tensor *y = NULL, *hn = NULL, *cn = NULL, *loss = NULL;
    if (x && c->states) {
        h0 = cg_requires_grad(cg_st_get_f32(io, "h0"), true);
        c0 = c->mode == CG_RNN_LSTM ? cg_requires_grad(cg_st_get_f32(io, "c0"), true) : NULL;
    }
    if (x) {
        cg_requires_grad(x, true);
        y = forward(c, m, x, len, h0, c0, &hn, c->mode == CG_RNN_LSTM ? &cn : NULL);
        cg_tensor *ly = y ? weighted(y, io, "ry") : NULL, *lh = hn ? weighted(hn, io, "rh") : NULL;
        cg_tensor *lc = cn ? weighted(cn, io, "rc") : NULL;
        cg_tensor *l2 = ly && lh ? cg_add(ly, lh) : NULL;
        loss = l2 && c->mode == CG_RNN_LSTM ? cg_add(l2, lc) : cg_retain(l2);
        ok = loss && cg_backward(loss, NULL, false);
        cg_release_all(4, ly, lh, lc, l2);
    } else {
        ok = false;
    }
    if (!ok) {
        fprintf(stderr, "check_rnn: %s: %s\n", c->name, cg_last_error());
    } else {
        printf("%s:", c->name);
        ok = near("y", y, io, "y", tol) & near("h_n", hn, io, "hn", tol);
        ok = (!cn || near("c_n", cn, io, "cn", tol)) && ok;
        ok = near("grad.x", x->grad, io, "grad.x", tol) && ok;
        ok = (!h0 || near("grad.h0", h0->grad, io, "grad.h0", tol)) && ok;
        ok = (!c0 || near("grad.c0", c0->grad, io, "grad.c0", tol)) && ok;
        for (int i = 0; i < m->n_params; i++) {
            char gn[128];
            snprintf(gn, sizeof gn, "grad.%s", m->params[i].name);
            ok = near(m->params[i].name, m->params[i].tensor->grad, io, gn, tol) && ok;
        }
        printf(ok ? " ok\n" : " FAIL (tolerance %.0e)\n", tol);
    }
    cg_release_all(8, x, len, h0, c0, y, hn, cn, loss);
    cg_st_close(io);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_rnn DIR\n");
        return 2;
    }
    bool ok = true;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ok = run(argv[1], &CASES[i], 2e-6) && ok;
        ok = init_matches(argv[1], &CASES[i]) && ok;
    }
    ok = init_params_matches(argv[1]) && ok;
    return ok ? 0 : 1;
}
