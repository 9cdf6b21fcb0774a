/* torch.nn.GRU and torch.nn.LSTM (nn/rnn.h): a layer and direction at a
 * time, the input's product for every step at once, then per step the
 * hidden product and the fused cell (autograd/ops_rnn.c). */
#include "nn/rnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/ops.h"
#include "nn/init.h"

static const char *kind(const cg_rnn *m) { return m->lstm ? "LSTM" : "GRU"; }
static int gates(const cg_rnn *m) { return m->lstm ? 4 : 3; }

static void rnn_destroy(cg_module *b) { free(((cg_rnn *)b)->w); }

static bool config_ok(const char *op, const cg_rnn_config *c)
{
    if (!c)
        return cg_set_error("%s: config is NULL", op), false;
    if (c->input_size < 1 || c->hidden_size < 1 || c->num_layers < 1) {
        const char *what = c->input_size < 1    ? "input_size"
                           : c->hidden_size < 1 ? "hidden_size"
                                                : "num_layers";
        long long v = c->input_size < 1    ? (long long)c->input_size
                      : c->hidden_size < 1 ? (long long)c->hidden_size
                                           : (long long)c->num_layers;
        cg_set_error("%s: %s must be >= 1 (got %lld)", op, what, v);
        return false;
    }
    if (!(c->dropout >= 0.0f && c->dropout <= 1.0f)) {
        cg_set_error("%s: dropout must be in [0, 1] (got %g)", op, (double)c->dropout);
        return false;
    }
    return true;
}

/* The parameters of layer l, direction d, in PyTorch's order and names,
 * each drawn U(-1/sqrt(H), 1/sqrt(H)) from rng */
static bool add_layer(cg_rnn *m, int l, int d, cg_rng *rng)
{
    static const char *const names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    const int64_t H = m->hidden_size, G = gates(m) * H;
    const int64_t in = l ? m->directions * H : m->input_size;
    const float k = (float)(1.0 / sqrt((double)H));
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && !m->bias)
            break;
        char name[48];
        snprintf(name, sizeof name, "%s_l%d%s", names[i], l, d ? "_reverse" : "");
        cg_tensor *t = i == 0   ? cg_zeros(CG_SHAPE(G, in))
                       : i == 1 ? cg_zeros(CG_SHAPE(G, H))
                                : cg_zeros(CG_SHAPE(G));
        cg_tensor **field = &m->w[4 * (l * m->directions + d) + i];
        bool ok = cg_module_add_param_at(&m->base, name, t, field) &&
                  cg_init_uniform_(*field, rng, -k, k);
        cg_release(t); /* the module holds its own reference */
        if (!ok)
            return false;
    }
    return true;
}

static cg_rnn *rnn_new(const cg_rnn_config *cfg, cg_rng *rng, bool lstm)
{
    const char *op = lstm ? "LSTM" : "GRU";
    if (!config_ok(op, cfg))
        return NULL;
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_rnn *m = (cg_rnn *)cg_module_alloc(sizeof *m, op, rnn_destroy);
    if (!m)
        return NULL;
    m->lstm = lstm;
    m->input_size = cfg->input_size;
    m->hidden_size = cfg->hidden_size;
    m->num_layers = cfg->num_layers;
    m->directions = cfg->bidirectional ? 2 : 1;
    m->bias = cfg->bias;
    m->batch_first = cfg->batch_first;
    m->dropout = cfg->dropout;
    m->own_rng = cg_rng_new(0);
    m->rng = &m->own_rng;
    m->w = calloc((size_t)(4 * m->num_layers * m->directions), sizeof *m->w);
    bool ok = m->w != NULL;
    if (!ok)
        cg_set_error("%s: out of memory", op);
    for (int l = 0; ok && l < m->num_layers; l++)
        for (int d = 0; ok && d < m->directions; d++)
            ok = add_layer(m, l, d, rng);
    if (!ok) {
        cg_module_free(&m->base);
        return NULL;
    }
    return m;
}

cg_gru *cg_gru_new(const cg_rnn_config *cfg, cg_rng *rng) { return rnn_new(cfg, rng, false); }
cg_lstm *cg_lstm_new(const cg_rnn_config *cfg, cg_rng *rng) { return rnn_new(cfg, rng, true); }

/* ------------------------------------------------------------ forward */
/* The state of one forward: x time-major [T, B, in], the states given */
typedef struct {
    cg_rnn *m;
    int64_t T, B;
    bool batch_first;     /* the output's layout (off for an unbatched x) */
    cg_tensor *h0, *c0;   /* [L D, B, H] or NULL */
    cg_tensor **hn, **cn; /* L D each: the last states */
    cg_tensor **hs;       /* T: one direction's h at every step */
} rnn_run;

/* Layer l's direction d over in [T, B, in_l]: its h at every step stacked
 * along dim sd ([T, B, H] or [B, T, H]), the last h and c into the run's
 * hn and cn. NULL + error. */
static cg_tensor *run_direction(rnn_run *r, int l, int d, cg_tensor *in, int sd)
{
    cg_rnn *m = r->m;
    const int64_t H = m->hidden_size, T = r->T;
    const int slot = l * m->directions + d;
    cg_tensor **w = &m->w[4 * slot];
    cg_tensor *gi = cg_affine(in, w[0], w[2]); /* [T, B, G H]: every step's input part */
    cg_tensor *h = r->h0 ? cg_select(r->h0, 0, slot) : cg_zeros(CG_SHAPE(r->B, H));
    cg_tensor *c = !m->lstm ? NULL
                   : r->c0  ? cg_select(r->c0, 0, slot)
                            : cg_zeros(CG_SHAPE(r->B, H));
    bool ok = gi && h && (!m->lstm || c);
    for (int64_t s = 0; ok && s < T; s++) {
        const int64_t t = d ? T - 1 - s : s;
        cg_tensor *git = cg_select(gi, 0, t), *next = NULL;
        if (!m->lstm) {
            cg_tensor *gh = cg_affine(h, w[1], w[3]);
            next = cg_gru_cell(git, gh, h);
            cg_release(gh);
        } else { /* gi_t + h W_hh^T + b_hh as the product writes it, then the cell */
            cg_tensor *a = cg_affine_residual(h, w[1], w[3], git, 0.0f, NULL, false);
            cg_tensor *hc = cg_lstm_cell(a, c);
            cg_release_all(2, a, c);
            next = cg_narrow(hc, -1, 0, H), c = cg_narrow(hc, -1, H, H);
            cg_release(hc);
        }
        cg_release_all(2, git, h);
        h = next;
        r->hs[t] = cg_retain(h);
        ok = h && (!m->lstm || c);
    }
    cg_tensor *out = ok ? cg_stack(r->hs, (int)T, sd) : NULL;
    for (int64_t t = 0; t < T; t++) {
        cg_release(r->hs[t]);
        r->hs[t] = NULL;
    }
    cg_release(gi);
    r->hn[slot] = h;
    r->cn[slot] = c;
    return out;
}

/* Every layer over x (time-major): the output, or NULL + error */
static cg_tensor *run_layers(rnn_run *r, cg_tensor *x)
{
    cg_rnn *m = r->m;
    cg_tensor *in = cg_retain(x);
    for (int l = 0; in && l < m->num_layers; l++) {
        const bool last = l == m->num_layers - 1;
        const int sd = last && r->batch_first ? 1 : 0;
        cg_tensor *dir[2] = {NULL, NULL}, *out = NULL;
        for (int d = 0; d < m->directions; d++)
            if (!(dir[d] = run_direction(r, l, d, in, sd)))
                break;
        if (m->directions == 1)
            out = cg_retain(dir[0]);
        else if (dir[0] && dir[1])
            out = cg_concat(dir, 2, -1);
        cg_release_all(3, dir[0], dir[1], in);
        in = out;
        if (in && !last && m->dropout > 0.0f && m->base.training) {
            out = cg_dropout(in, m->dropout, m->rng, true);
            cg_release(in);
            in = out;
        }
    }
    return in;
}

/* One line about a state tensor of the wrong shape, false; true when s is
 * [L D, B, H] */
static bool state_ok(const cg_rnn *m, const char *what, const cg_tensor *s, int64_t B, bool unb)
{
    const int64_t LD = (int64_t)m->num_layers * m->directions, H = m->hidden_size;
    const bool ok = unb ? s->ndim == 2 && s->shape[0] == LD && s->shape[1] == H
                        : s->ndim == 3 && s->shape[0] == LD && s->shape[1] == B && s->shape[2] == H;
    if (!ok) {
        char a[96];
        if (unb)
            cg_set_error("%s: %s is %s, expected [%lld, %lld] (num_layers * directions, "
                         "hidden_size) for an unbatched input",
                         kind(m), what, cg_shape_str(s, a, sizeof a), (long long)LD, (long long)H);
        else
            cg_set_error("%s: %s is %s, expected [%lld, %lld, %lld] (num_layers * directions, "
                         "batch, hidden_size)",
                         kind(m), what, cg_shape_str(s, a, sizeof a), (long long)LD, (long long)B,
                         (long long)H);
    }
    return ok;
}

/* x's shape against the module's: true, or false + one line */
static bool input_ok(const cg_rnn *m, const cg_tensor *x)
{
    char a[96];
    const char *layout =
        m->batch_first ? "[batch, seq, input_size] (batch_first)" : "[seq, batch, input_size]";
    if (x->ndim != 2 && x->ndim != 3) {
        cg_set_error("%s: input %s must be %s, or [seq, input_size] unbatched", kind(m),
                     cg_shape_str(x, a, sizeof a), layout);
        return false;
    }
    if (x->shape[x->ndim - 1] != m->input_size) {
        cg_set_error("%s: input %s has %lld features in its last dim, expected input_size %lld",
                     kind(m), cg_shape_str(x, a, sizeof a), (long long)x->shape[x->ndim - 1],
                     (long long)m->input_size);
        return false;
    }
    for (int d = 0; d < x->ndim - 1; d++)
        if (x->shape[d] < 1) {
            cg_set_error("%s: input %s is empty (no time steps or no batch)", kind(m),
                         cg_shape_str(x, a, sizeof a));
            return false;
        }
    return true;
}

static bool args_ok(const cg_rnn *m, const char *op, bool lstm, const cg_tensor *x,
                    const cg_tensor *h0, const cg_tensor *c0)
{
    if (!m || !x)
        return cg_error_null_input(op), false; /* a NULL x: an earlier error */
    if (m->lstm != lstm) {
        cg_set_error("%s: the module is a%s %s", op, m->lstm ? "n" : "", kind(m));
        return false;
    }
    if (!input_ok(m, x))
        return false;
    if (lstm && (!h0) != (!c0)) {
        cg_set_error("LSTM: h0 and c0 are both given or both NULL (got %s NULL)", h0 ? "c0" : "h0");
        return false;
    }
    const bool unb = x->ndim == 2;
    const int64_t B = unb ? 1 : x->shape[m->batch_first ? 0 : 1];
    return (!h0 || state_ok(m, "h0", h0, B, unb)) && (!c0 || state_ok(m, "c0", c0, B, unb));
}

/* The stack of the L D states st (released) along dim 0, unbatched:
 * squeezed; into *out when out, else released */
static bool give_states(cg_tensor **st, int n, bool unb, cg_tensor **out)
{
    cg_tensor *s = out ? cg_stack(st, n, 0) : NULL;
    for (int i = 0; i < n; i++)
        cg_release(st[i]);
    if (s && unb) {
        cg_tensor *q = cg_squeeze(s, 1);
        cg_release(s);
        s = q;
    }
    if (out)
        *out = s;
    return !out || s;
}

static cg_tensor *rnn_forward(cg_rnn *m, const char *op, bool lstm, cg_tensor *x, cg_tensor *h0,
                              cg_tensor *c0, cg_tensor **h_n, cg_tensor **c_n)
{
    if (h_n)
        *h_n = NULL;
    if (c_n)
        *c_n = NULL;
    if (!args_ok(m, op, lstm, x, h0, c0))
        return NULL;
    const bool unb = x->ndim == 2;
    const int LD = m->num_layers * m->directions;
    rnn_run r = {.m = m, .batch_first = m->batch_first && !unb};
    /* time-major [T, B, in], h0 and c0 [L D, B, H] */
    cg_tensor *xt = unb              ? cg_unsqueeze(x, 1)
                    : m->batch_first ? cg_transpose(x, 0, 1)
                                     : cg_retain(x);
    r.h0 = h0 ? (unb ? cg_unsqueeze(h0, 1) : cg_retain(h0)) : NULL;
    r.c0 = c0 ? (unb ? cg_unsqueeze(c0, 1) : cg_retain(c0)) : NULL;
    r.T = x->shape[unb || !m->batch_first ? 0 : 1];
    r.B = unb ? 1 : x->shape[m->batch_first ? 0 : 1];
    r.hn = calloc((size_t)LD, sizeof *r.hn);
    r.cn = calloc((size_t)LD, sizeof *r.cn);
    r.hs = calloc((size_t)r.T, sizeof *r.hs);
    cg_tensor *out = NULL;
    if (!r.hn || !r.cn || !r.hs)
        cg_set_error("%s: out of memory", kind(m));
    else if (xt && (!h0 || r.h0) && (!c0 || r.c0))
        out = run_layers(&r, xt);
    if (out && unb) { /* [T, 1, D H] -> [T, D H] */
        cg_tensor *q = cg_squeeze(out, 1);
        cg_release(out);
        out = q;
    }
    bool ok = out != NULL;
    if (r.hn)
        ok = give_states(r.hn, LD, unb, ok ? h_n : NULL) && ok;
    if (r.cn)
        ok = give_states(r.cn, LD, unb, ok && m->lstm ? c_n : NULL) && ok;
    cg_release_all(3, xt, r.h0, r.c0);
    free(r.hn);
    free(r.cn);
    free(r.hs);
    if (!ok) {
        cg_release(out);
        if (h_n && *h_n)
            cg_release(*h_n), *h_n = NULL;
        return NULL;
    }
    return out;
}

cg_tensor *cg_gru_forward(cg_gru *m, cg_tensor *x, cg_tensor *h0, cg_tensor **h_n)
{
    return rnn_forward(m, "cg_gru_forward", false, x, h0, NULL, h_n, NULL);
}

cg_tensor *cg_lstm_forward(cg_lstm *m, cg_tensor *x, cg_tensor *h0, cg_tensor *c0, cg_tensor **h_n,
                           cg_tensor **c_n)
{
    return rnn_forward(m, "cg_lstm_forward", true, x, h0, c0, h_n, c_n);
}
