/* torch.nn.RNN, torch.nn.GRU and torch.nn.LSTM (nn/rnn.h): a layer and
 * direction at a time, the input's product for every step at once, then
 * per step the hidden product and the cell (cg_rnn_step, which the
 * one-step modules of nn/rnn_cell.c share). */
#include "nn/rnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "nn/init.h"
#include "nn/rnn_impl.h"

const char *cg_rnn_mode_name(cg_rnn_mode mode)
{
    return mode == CG_RNN_LSTM ? "LSTM" : mode == CG_RNN_GRU ? "GRU" : "RNN";
}
int cg_rnn_mode_gates(cg_rnn_mode mode)
{
    return mode == CG_RNN_LSTM ? 4 : mode == CG_RNN_GRU ? 3 : 1;
}

static const char *kind(const cg_rnn *m) { return cg_rnn_mode_name(m->mode); }
static bool is_lstm(const cg_rnn *m) { return m->mode == CG_RNN_LSTM; }

bool cg_rnn_add_weights(cg_module *m, const char *suffix, int64_t G, int64_t in, int64_t H,
                        bool bias, cg_rng *rng, cg_tensor **fields)
{
    static const char *const names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    const float k = (float)(1.0 / sqrt((double)H));
    for (int i = 0; i < (bias ? 4 : 2); i++) {
        char name[48];
        snprintf(name, sizeof name, "%s%s", names[i], suffix);
        cg_tensor *t = i == 0   ? cg_zeros(CG_SHAPE(G, in))
                       : i == 1 ? cg_zeros(CG_SHAPE(G, H))
                                : cg_zeros(CG_SHAPE(G));
        bool ok = cg_module_add_param_at(m, name, t, &fields[i]) &&
                  cg_init_uniform_(fields[i], rng, -k, k);
        cg_release(t); /* the module holds its own reference */
        if (!ok)
            return false;
    }
    return true;
}

cg_tensor *cg_rnn_step(cg_rnn_mode mode, cg_tensor *gi, cg_tensor *h, cg_tensor *c, cg_tensor *w_hh,
                       cg_tensor *b_hh, cg_tensor **c_next)
{
    cg_tensor *next = NULL;
    if (mode == CG_RNN_GRU) {
        cg_tensor *gh = cg_affine(h, w_hh, b_hh);
        next = cg_gru_cell(gi, gh, h);
        cg_release(gh);
        return next;
    }
    /* gi + h W_hh^T + b_hh as the product writes it, then the cell */
    cg_tensor *a = cg_affine_residual(h, w_hh, b_hh, gi, 0.0f, NULL, false);
    if (mode == CG_RNN_LSTM) {
        const int64_t H = w_hh->shape[1];
        cg_tensor *hc = cg_lstm_cell(a, c);
        next = cg_narrow(hc, -1, 0, H), *c_next = cg_narrow(hc, -1, H, H);
        cg_release(hc);
    } else {
        next = mode == CG_RNN_RELU ? cg_relu(a) : cg_tanh(a);
    }
    cg_release(a);
    return next;
}

static void rnn_destroy(cg_module *b) { free(((cg_rnn *)b)->w); }

static bool config_ok(const char *op, const cg_rnn_config *c, cg_rnn_mode mode)
{
    if (!c)
        return cg_set_error("%s: config is NULL", op), false;
    if (c->relu && mode >= CG_RNN_GRU) {
        cg_set_error("%s: relu is nn.RNN's nonlinearity, not an option of the %s", op, op);
        return false;
    }
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
    const int64_t H = m->hidden_size, G = cg_rnn_mode_gates(m->mode) * H;
    const int64_t in = l ? m->directions * H : m->input_size;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "_l%d%s", l, d ? "_reverse" : "");
    return cg_rnn_add_weights(&m->base, suffix, G, in, H, m->bias, rng,
                              &m->w[4 * (l * m->directions + d)]);
}

static cg_rnn *rnn_new(const cg_rnn_config *cfg, cg_rng *rng, cg_rnn_mode mode)
{
    if (cfg && cfg->relu && mode == CG_RNN_TANH)
        mode = CG_RNN_RELU;
    const char *op = cg_rnn_mode_name(mode);
    if (!config_ok(op, cfg, mode))
        return NULL;
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_rnn *m = (cg_rnn *)cg_module_alloc(sizeof *m, op, rnn_destroy);
    if (!m)
        return NULL;
    m->mode = mode;
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

cg_rnn *cg_rnn_new(const cg_rnn_config *cfg, cg_rng *rng) { return rnn_new(cfg, rng, CG_RNN_TANH); }
cg_gru *cg_gru_new(const cg_rnn_config *cfg, cg_rng *rng) { return rnn_new(cfg, rng, CG_RNN_GRU); }
cg_lstm *cg_lstm_new(const cg_rnn_config *cfg, cg_rng *rng)
{
    return rnn_new(cfg, rng, CG_RNN_LSTM);
}

/* ------------------------------------------------------------ forward */
/* A batch of sequences of different lengths as
 * torch.nn.utils.rnn.pack_padded_sequence(enforce_sorted=False) packs it:
 * the sequences sorted longest first, so that at step t the first bs[t] of
 * them are running; their rows of x, step after step, are the packed
 * input (step t's from row off[t]). */
typedef struct {
    int64_t steps;      /* the longest length */
    int64_t *bs, *off;  /* steps each */
    cg_tensor *order;   /* int64 [B]: the sequences, longest first */
    cg_tensor *unorder; /* int64 [B]: order's inverse */
    cg_tensor *rows;    /* int64 [sum of the lengths]: each packed row's row
                         * of x viewed [-1, input_size] */
} rnn_pack;

/* The state of one forward: x time-major [T, B, in] (or packed), the
 * states given */
typedef struct {
    cg_rnn *m;
    int64_t T, B;         /* T: the steps run (packed: the longest length) */
    bool batch_first;     /* the output's layout (off for an unbatched x) */
    const rnn_pack *pack; /* NULL: every sequence runs all T steps */
    cg_tensor *h0, *c0;   /* [L D, B, H] (packed: sorted) or NULL */
    cg_tensor **hn, **cn; /* L D each: the last states */
    cg_tensor **hs;       /* T: one direction's h at every step */
    cg_tensor **done;     /* B: the packed forward direction's ended rows */
} rnn_run;

/* A state's rows (a prefix of the sorted batch) fitted to the n sequences
 * running at the next step: fewer in the forward direction (the rows past
 * n have ended: their last states go to done[*nd]), more in the reverse
 * one (the sequences starting there: their rows of init). False + error. */
static bool fit_state(cg_tensor **s, cg_tensor *init, int64_t n, cg_tensor **done, int *nd)
{
    const int64_t rows = (*s)->shape[0];
    cg_tensor *next = NULL;
    if (n == rows)
        return true;
    if (n < rows) {
        if (!(done[(*nd)++] = cg_narrow(*s, 0, n, rows - n)))
            return false;
        next = cg_narrow(*s, 0, 0, n);
    } else {
        cg_tensor *add[2] = {*s, cg_narrow(init, 0, rows, n - rows)};
        next = add[1] ? cg_concat(add, 2, 0) : NULL;
        cg_release(add[1]);
    }
    cg_release(*s);
    *s = next;
    return next != NULL;
}

/* The forward direction's last states in the sorted batch's order: s (the
 * longest sequences') above the rows in done, the last to end first. s
 * and done[0..nd) released (done has room for nd + 1); NULL + error. */
static cg_tensor *last_states(cg_tensor *s, cg_tensor **done, int nd)
{
    if (nd && s) {
        for (int i = 0, j = nd - 1; i < j; i++, j--) {
            cg_tensor *t = done[i];
            done[i] = done[j], done[j] = t;
        }
        memmove(done + 1, done, (size_t)nd * sizeof *done);
        done[0] = s;
        s = cg_concat(done, ++nd, 0);
    }
    for (int i = 0; i < nd; i++)
        cg_release(done[i]);
    return s;
}

/* Layer l's direction d over in [T, B, in_l] (or packed [rows, in_l]): its
 * h at every step stacked along dim sd ([T, B, H] or [B, T, H]; packed:
 * step after step [rows, H]), the last h and c into the run's hn and cn.
 * NULL + error. */
static cg_tensor *run_direction(rnn_run *r, int l, int d, cg_tensor *in, int sd)
{
    cg_rnn *m = r->m;
    const rnn_pack *p = r->pack;
    const int64_t H = m->hidden_size, T = r->T;
    const int slot = l * m->directions + d;
    cg_tensor **w = &m->w[4 * slot];
    cg_tensor *gi = cg_affine(in, w[0], w[2]); /* [T, B, G H]: every step's input part */
    cg_tensor *h0 = r->h0 ? cg_select(r->h0, 0, slot) : cg_zeros(CG_SHAPE(r->B, H));
    cg_tensor *c0 = !is_lstm(m) ? NULL
                    : r->c0     ? cg_select(r->c0, 0, slot)
                                : cg_zeros(CG_SHAPE(r->B, H));
    /* the reverse direction starts with the longest sequences alone */
    const int64_t n0 = p && d ? p->bs[T - 1] : r->B;
    cg_tensor *h = n0 < r->B && h0 ? cg_narrow(h0, 0, 0, n0) : cg_retain(h0);
    cg_tensor *c = n0 < r->B && c0 ? cg_narrow(c0, 0, 0, n0) : cg_retain(c0);
    int nh = 0, nc = 0;
    bool ok = gi && h && (!is_lstm(m) || c);
    for (int64_t s = 0; ok && s < T; s++) {
        const int64_t t = d ? T - 1 - s : s;
        if (p && !(fit_state(&h, h0, p->bs[t], r->done, &nh) &&
                   (!c || fit_state(&c, c0, p->bs[t], r->done + r->B, &nc)))) {
            ok = false;
            break;
        }
        cg_tensor *git = p ? cg_narrow(gi, 0, p->off[t], p->bs[t]) : cg_select(gi, 0, t);
        cg_tensor *c1 = NULL, *next = cg_rnn_step(m->mode, git, h, c, w[1], w[3], &c1);
        if (c) {
            cg_release(c);
            c = c1;
        }
        cg_release_all(2, git, h);
        h = next;
        r->hs[t] = cg_retain(h);
        ok = h && (!is_lstm(m) || c);
    }
    cg_tensor *out = !ok ? NULL : p ? cg_concat(r->hs, (int)T, 0) : cg_stack(r->hs, (int)T, sd);
    for (int64_t t = 0; t < T; t++) {
        cg_release(r->hs[t]);
        r->hs[t] = NULL;
    }
    cg_release_all(3, gi, h0, c0);
    r->hn[slot] = last_states(h, r->done, nh);
    r->cn[slot] = last_states(c, r->done + r->B, nc);
    if (!r->hn[slot] || (is_lstm(m) && !r->cn[slot])) {
        cg_release(out);
        return NULL;
    }
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

static bool args_ok(const cg_rnn *m, const char *op, cg_rnn_mode want, const cg_tensor *x,
                    const cg_tensor *h0, const cg_tensor *c0)
{
    if (!m || !x)
        return cg_error_null_input(op), false;                 /* a NULL x: an earlier error */
    if (cg_rnn_mode_name(m->mode) != cg_rnn_mode_name(want)) { /* the RNN's two modes are one */
        cg_set_error("%s: the module is a%s %s", op, m->mode == CG_RNN_GRU ? "" : "n", kind(m));
        return false;
    }
    if (!input_ok(m, x))
        return false;
    if (want == CG_RNN_LSTM && (!h0) != (!c0)) {
        cg_set_error("LSTM: h0 and c0 are both given or both NULL (got %s NULL)", h0 ? "c0" : "h0");
        return false;
    }
    const bool unb = x->ndim == 2;
    const int64_t B = unb ? 1 : x->shape[m->batch_first ? 0 : 1];
    return (!h0 || state_ok(m, "h0", h0, B, unb)) && (!c0 || state_ok(m, "c0", c0, B, unb));
}

/* ------------------------------------------------- a padded batch */
static void pack_free(rnn_pack *p)
{
    free(p->bs);
    free(p->off);
    cg_release_all(3, p->order, p->unorder, p->rows);
}

typedef struct {
    int64_t len, b;
} seq_len;

/* Longest first; among equal lengths the batch's order */
static int by_length(const void *x, const void *y)
{
    const seq_len *a = x, *b = y;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

/* lengths (int64 [B], each in [1, T]) checked, and the batch packed into
 * *p, x's rows in its own layout ([B, T] when batch_first, else [T, B]).
 * False + one line. */
static bool pack_new(const cg_rnn *m, const cg_tensor *lengths, int64_t T, int64_t B, rnn_pack *p)
{
    *p = (rnn_pack){0};
    char a[96];
    if (!cg_check_dtype(kind(m), "lengths", lengths, CG_I64))
        return false;
    if (lengths->ndim != 1 || lengths->shape[0] != B) {
        cg_set_error("%s: lengths is %s, expected [%lld] (one length a sequence of the batch)",
                     kind(m), cg_shape_str(lengths, a, sizeof a), (long long)B);
        return false;
    }
    seq_len *q = malloc((size_t)B * sizeof *q);
    int64_t *ix = malloc((size_t)(2 * B) * sizeof *ix);
    bool ok = q && ix;
    for (int64_t b = 0; ok && b < B; b++) {
        q[b] = (seq_len){cg_get_i64(lengths, &b), b};
        if (q[b].len < 1 || q[b].len > T) {
            cg_set_error("%s: lengths[%lld] is %lld, each must be in [1, %lld] (the input's steps)",
                         kind(m), (long long)b, (long long)q[b].len, (long long)T);
            free(q), free(ix);
            return false;
        }
    }
    if (ok) {
        qsort(q, (size_t)B, sizeof *q, by_length);
        p->steps = q[0].len;
        p->bs = malloc((size_t)p->steps * sizeof *p->bs);
        p->off = malloc((size_t)p->steps * sizeof *p->off);
        ok = p->bs && p->off;
    }
    for (int64_t i = 0; ok && i < B; i++) /* the order and its inverse */
        ix[i] = q[i].b, ix[B + q[i].b] = i;
    ok = ok && (p->order = cg_from_i64(1, &B, ix)) && (p->unorder = cg_from_i64(1, &B, ix + B));
    int64_t n = 0;
    for (int64_t t = 0, run = B; ok && t < p->steps; t++) {
        while (q[run - 1].len <= t)
            run--;
        p->bs[t] = run, p->off[t] = n, n += run;
    }
    int64_t *rows = ok ? malloc((size_t)n * sizeof *rows) : NULL;
    for (int64_t t = 0; rows && t < p->steps; t++)
        for (int64_t i = 0; i < p->bs[t]; i++)
            rows[p->off[t] + i] = m->batch_first ? q[i].b * T + t : t * B + q[i].b;
    ok = rows && (p->rows = cg_from_i64(1, &n, rows));
    if (!ok && (!q || !ix || !p->bs || !p->off || !rows))
        cg_set_error("%s: out of memory", kind(m));
    free(q), free(ix), free(rows);
    if (!ok)
        pack_free(p);
    return ok;
}

/* The packed output [rows, F] as pad_packed_sequence(total_length=T)
 * gives it: [T, B, F] or [B, T, F], zero past each sequence's end */
static cg_tensor *unpack(cg_tensor *out, const rnn_pack *p, int64_t T, int64_t B, bool batch_first)
{
    const int64_t F = out->shape[1];
    cg_tensor *z = cg_zeros(CG_SHAPE(T * B, F));
    cg_tensor *flat = z ? cg_index_add(z, 0, p->rows, out) : NULL;
    cg_tensor *o =
        flat ? cg_reshape(flat, CG_SHAPE(batch_first ? B : T, batch_first ? T : B, F)) : NULL;
    cg_release_all(2, z, flat);
    return o;
}

/* The stack of the L D states st (released) along dim 0, unbatched:
 * squeezed, sorted: into the batch's order (unorder); into *out when out,
 * else released */
static bool give_states(cg_tensor **st, int n, bool unb, const cg_tensor *unorder, cg_tensor **out)
{
    cg_tensor *s = out ? cg_stack(st, n, 0) : NULL;
    for (int i = 0; i < n; i++)
        cg_release(st[i]);
    if (s && (unb || unorder)) {
        cg_tensor *q = unb ? cg_squeeze(s, 1) : cg_index_select(s, 1, unorder);
        cg_release(s);
        s = q;
    }
    if (out)
        *out = s;
    return !out || s;
}

/* x, h0 and c0 as the layers read them into r: time-major [T, B, in] (or
 * packed [rows, in]), [L D, B, H] (packed: sorted). NULL + error. */
static cg_tensor *inputs(rnn_run *r, cg_tensor *x, cg_tensor *h0, cg_tensor *c0, bool unb)
{
    const rnn_pack *p = r->pack;
    if (p) {
        r->h0 = h0 ? cg_index_select(h0, 1, p->order) : NULL;
        r->c0 = c0 ? cg_index_select(c0, 1, p->order) : NULL;
    } else {
        r->h0 = h0 ? (unb ? cg_unsqueeze(h0, 1) : cg_retain(h0)) : NULL;
        r->c0 = c0 ? (unb ? cg_unsqueeze(c0, 1) : cg_retain(c0)) : NULL;
    }
    if ((h0 && !r->h0) || (c0 && !r->c0))
        return NULL;
    if (p) {
        cg_tensor *flat = cg_reshape(x, CG_SHAPE(-1, r->m->input_size));
        cg_tensor *in = flat ? cg_index_select(flat, 0, p->rows) : NULL;
        cg_release(flat);
        return in;
    }
    return unb ? cg_unsqueeze(x, 1) : r->m->batch_first ? cg_transpose(x, 0, 1) : cg_retain(x);
}

static cg_tensor *rnn_forward(cg_rnn *m, const char *op, cg_rnn_mode want, cg_tensor *x,
                              const cg_tensor *lengths, cg_tensor *h0, cg_tensor *c0,
                              cg_tensor **h_n, cg_tensor **c_n)
{
    if (h_n)
        *h_n = NULL;
    if (c_n)
        *c_n = NULL;
    if (!args_ok(m, op, want, x, h0, c0))
        return NULL;
    const bool unb = x->ndim == 2;
    if (lengths && unb) {
        char a[96];
        cg_set_error("%s: lengths need a batched input (x is %s, unbatched)", kind(m),
                     cg_shape_str(x, a, sizeof a));
        return NULL;
    }
    const int LD = m->num_layers * m->directions;
    const int64_t T = x->shape[unb || !m->batch_first ? 0 : 1];
    rnn_pack pack;
    rnn_run r = {.m = m, .batch_first = m->batch_first && !unb, .T = T};
    r.B = unb ? 1 : x->shape[m->batch_first ? 0 : 1];
    if (lengths && !pack_new(m, lengths, T, r.B, &pack))
        return NULL;
    if (lengths)
        r.pack = &pack, r.T = pack.steps;
    r.hn = calloc((size_t)LD, sizeof *r.hn);
    r.cn = calloc((size_t)LD, sizeof *r.cn);
    r.hs = calloc((size_t)r.T, sizeof *r.hs);
    r.done = calloc((size_t)(2 * r.B), sizeof *r.done);
    cg_tensor *xt = NULL, *out = NULL;
    if (!r.hn || !r.cn || !r.hs || !r.done)
        cg_set_error("%s: out of memory", kind(m));
    else if ((xt = inputs(&r, x, h0, c0, unb)))
        out = run_layers(&r, xt);
    if (out && (unb || lengths)) { /* [T, 1, D H] -> [T, D H]; packed -> padded */
        cg_tensor *q = unb ? cg_squeeze(out, 1) : unpack(out, &pack, T, r.B, r.batch_first);
        cg_release(out);
        out = q;
    }
    const cg_tensor *unorder = lengths ? pack.unorder : NULL;
    bool ok = out != NULL;
    if (r.hn)
        ok = give_states(r.hn, LD, unb, unorder, ok ? h_n : NULL) && ok;
    if (r.cn)
        ok = give_states(r.cn, LD, unb, unorder, ok && is_lstm(m) ? c_n : NULL) && ok;
    cg_release_all(3, xt, r.h0, r.c0);
    free(r.hn), free(r.cn), free(r.hs), free(r.done);
    if (lengths)
        pack_free(&pack);
    if (!ok) {
        cg_release(out);
        if (h_n && *h_n)
            cg_release(*h_n), *h_n = NULL;
        return NULL;
    }
    return out;
}

cg_tensor *cg_rnn_forward(cg_rnn *m, cg_tensor *x, cg_tensor *h0, cg_tensor **h_n)
{
    return rnn_forward(m, "cg_rnn_forward", CG_RNN_TANH, x, NULL, h0, NULL, h_n, NULL);
}

cg_tensor *cg_gru_forward(cg_gru *m, cg_tensor *x, cg_tensor *h0, cg_tensor **h_n)
{
    return rnn_forward(m, "cg_gru_forward", CG_RNN_GRU, x, NULL, h0, NULL, h_n, NULL);
}

cg_tensor *cg_lstm_forward(cg_lstm *m, cg_tensor *x, cg_tensor *h0, cg_tensor *c0, cg_tensor **h_n,
                           cg_tensor **c_n)
{
    return rnn_forward(m, "cg_lstm_forward", CG_RNN_LSTM, x, NULL, h0, c0, h_n, c_n);
}

cg_tensor *cg_rnn_forward_lengths(cg_rnn *m, cg_tensor *x, const cg_tensor *lengths, cg_tensor *h0,
                                  cg_tensor **h_n)
{
    return rnn_forward(m, "cg_rnn_forward_lengths", CG_RNN_TANH, x, lengths, h0, NULL, h_n, NULL);
}

cg_tensor *cg_gru_forward_lengths(cg_gru *m, cg_tensor *x, const cg_tensor *lengths, cg_tensor *h0,
                                  cg_tensor **h_n)
{
    return rnn_forward(m, "cg_gru_forward_lengths", CG_RNN_GRU, x, lengths, h0, NULL, h_n, NULL);
}

cg_tensor *cg_lstm_forward_lengths(cg_lstm *m, cg_tensor *x, const cg_tensor *lengths,
                                   cg_tensor *h0, cg_tensor *c0, cg_tensor **h_n, cg_tensor **c_n)
{
    return rnn_forward(m, "cg_lstm_forward_lengths", CG_RNN_LSTM, x, lengths, h0, c0, h_n, c_n);
}
