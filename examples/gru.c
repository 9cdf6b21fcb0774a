/* gru: a character-level language model that is not a transformer: an
 * embedding, a two-layer GRU written from cgrad's ops one time step at a
 * time (torch.nn.GRU's equations, gate order r, z, n), a linear head and
 * cross-entropy, trained with AdamW and gradient clipping on a paragraph of
 * Moby-Dick, then sampled. gru.py is the same program in PyTorch, and both
 * start from the same weights: the C side draws them from PyTorch's
 * generator (cg_mt19937) in the order torch.manual_seed(1); nn.Embedding;
 * nn.GRU; nn.Linear draws them, so the two print the same losses (the meson
 * test example_gru_torch compares the first 20 steps).
 *
 *   build/examples/example_gru [--steps N]      (default 300) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

enum { B = 16, T = 32, E = 32, H = 64, L = 2 };

static const char *text =
    "Call me Ishmael. Some years ago--never mind how long precisely--having little or no "
    "money in my purse, and nothing particular to interest me on shore, I thought I would "
    "sail about a little and see the watery part of the world. It is a way I have of driving "
    "off the spleen and regulating the circulation. Whenever I find myself growing grim about "
    "the mouth; whenever it is a damp, drizzly November in my soul; whenever I find myself "
    "involuntarily pausing before coffin warehouses, and bringing up the rear of every "
    "funeral I meet; and especially whenever my hypos get such an upper hand of me, that it "
    "requires a strong moral principle to prevent me from deliberately stepping into the "
    "street, and methodically knocking people's hats off--then, I account it high time to "
    "get to sea as soon as I can. This is my substitute for pistol and ball. ";

/* The parameters under torch.nn.GRU's names (gru.weight_ih_l0, ...), so
 * that a state dict moves between the two programs as it is. The GRU is a
 * plain container (cg_module_new) holding its tensors; the struct keeps
 * borrowed pointers to them. */
typedef struct {
    cg_module base;
    cg_embed *emb;
    cg_tensor *w_ih[L], *w_hh[L], *b_ih[L], *b_hh[L]; /* [3H, in], [3H, H], [3H], [3H] */
    cg_linear *head;
} gru_lm;

/* Parameter `kind`_l`l` of the GRU ([3H, cols], or [3H] for cols 0),
 * drawn as nn.GRU.reset_parameters draws it: U(-1/sqrt(H), 1/sqrt(H)) from
 * PyTorch's generator. */
static cg_tensor *gru_param(cg_module *gru, const char *kind, int l, int64_t cols, cg_mt19937 *g)
{
    char name[32];
    snprintf(name, sizeof name, "%s_l%d", kind, l);
    cg_tensor *t = cols ? cg_empty(CG_SHAPE(3 * H, cols)) : cg_empty(CG_SHAPE(3 * H));
    float s = 1.0f / sqrtf(H);
    cg_tensor *p = cg_uniform_torch_(t, g, -s, s) ? cg_module_add_param(gru, name, t) : NULL;
    cg_release(t); /* the module keeps its own reference */
    return p;
}

/* Built in PyTorch's order: the embedding (N(0, 1)), then the GRU's
 * parameters layer by layer, then the head (nn.Linear's defaults); the
 * nn constructors draw nothing (cg_init_skip), the *_torch calls do. A
 * parameter that could not be made is a NULL that the first forward
 * reports (every op passes the first error on). */
static gru_lm *gru_lm_new(int64_t V, cg_mt19937 *g)
{
    gru_lm *m = (gru_lm *)cg_module_alloc(sizeof *m, "CharGRU", NULL);
    m->emb = cg_module_add_child(&m->base, "emb", cg_embed_new(V, E, cg_init_skip()));
    bool ok = cg_module_reset_parameters_torch(CG_MODULE(m->emb), g);
    cg_module *gru = cg_module_add_child(&m->base, "gru", cg_module_new("GRU"));
    for (int l = 0; l < L; l++) {
        m->w_ih[l] = gru_param(gru, "weight_ih", l, l ? H : E, g);
        m->w_hh[l] = gru_param(gru, "weight_hh", l, H, g);
        m->b_ih[l] = gru_param(gru, "bias_ih", l, 0, g);
        m->b_hh[l] = gru_param(gru, "bias_hh", l, 0, g);
    }
    m->head = cg_module_add_child(&m->base, "head", cg_linear_new(H, V, true, cg_init_skip()));
    if (!cg_module_reset_parameters_torch(CG_MODULE(m->head), g) || !ok) {
        cg_module_free(CG_MODULE(m)); /* cg_last_error() says why */
        return NULL;
    }
    return m;
}

/* One step of layer l, torch.nn.GRU's cell. gi = W_ih x_t + b_ih [b, 3H]
 * (computed for every t at once, outside the loop), h [b, H]:
 *   r = sigmoid(gi_r + (W_hh h + b_hh)_r)      (reset gate)
 *   z = sigmoid(gi_z + (W_hh h + b_hh)_z)      (update gate)
 *   n = tanh(gi_n + r * (W_hh h + b_hh)_n)     (candidate)
 *   h' = (1 - z) * n + z * h = n + z * (h - n)
 * The thirds of a [b, 3H] tensor are views (cg_narrow along the last
 * dim); r and z go through one sigmoid over the first two thirds. */
static cg_tensor *gru_cell(gru_lm *m, int l, cg_tensor *gi, cg_tensor *h)
{
    cg_tensor *gh = cg_affine(h, m->w_hh[l], m->b_hh[l]);
    cg_tensor *rz = cg_sigmoid(cg_add(cg_narrow(gi, -1, 0, 2 * H), cg_narrow(gh, -1, 0, 2 * H)));
    cg_tensor *r = cg_narrow(rz, -1, 0, H), *z = cg_narrow(rz, -1, H, H);
    cg_tensor *n =
        cg_tanh(cg_add(cg_narrow(gi, -1, 2 * H, H), cg_mul(r, cg_narrow(gh, -1, 2 * H, H))));
    return cg_add(n, cg_mul(z, cg_sub(h, n)));
}

/* ids [b, t] -> logits [b, t, V]; h[l] is layer l's state [b, H], read
 * and replaced (NULL: zeros, nn.GRU's default h0). Called in a scope: the
 * intermediates are not released one by one. */
static cg_tensor *gru_lm_forward(gru_lm *m, cg_tensor *ids, cg_tensor **h)
{
    cg_tensor *x = cg_embed_forward(m->emb, ids), *hs[T];
    int64_t steps = ids ? ids->shape[1] : 0;
    for (int l = 0; l < L; l++) {
        h[l] = h[l] ? h[l] : cg_zeros(CG_SHAPE(ids ? ids->shape[0] : 0, H));
        cg_tensor *gi = cg_affine(x, m->w_ih[l], m->b_ih[l]); /* [b, t, 3H], every step */
        for (int64_t t = 0; t < steps; t++)
            hs[t] = h[l] = gru_cell(m, l, cg_select(gi, 1, t), h[l]);
        x = cg_stack(hs, (int)steps, 1); /* [b, t, H]: the next layer's input */
    }
    return cg_linear_forward(m->head, x);
}

int main(int argc, char **argv)
{
    cg_omp_short_spin(); /* OpenMP threads wait 50 us, not 6 ms: many small ops a step */
    long steps = argc == 3 && !strcmp(argv[1], "--steps") ? strtol(argv[2], NULL, 10) : 300;
    int64_t n = (int64_t)strlen(text), ids[2048], V = 0;
    char chars[128] = "";
    for (int c = 1; c < 128; c++) /* the sorted set of characters */
        if (strchr(text, c))
            chars[V++] = (char)c;
    for (int64_t i = 0; i < n; i++)
        ids[i] = strchr(chars, text[i]) - chars;
    cg_tensor *data = cg_from_i64(1, &n, ids);
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1); /* torch.manual_seed(1) */
    gru_lm *m = gru_lm_new(V, &g);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 3e-3); /* weight decay 0.01 */
    float loss = 0, first = 0;
    for (long step = 0; step < steps && opt; step++) {
        cg_scope *s = cg_scope_begin();
        /* A fixed walk through the text (gru.py takes the same windows):
         * row i of step k starts at (k B + i) * 97 mod (n - T). */
        cg_tensor *xs[B], *ys[B], *h[L] = {0};
        for (int i = 0; i < B; i++) {
            int64_t at = (step * B + i) * 97 % (n - T);
            xs[i] = cg_narrow(data, 0, at, T), ys[i] = cg_narrow(data, 0, at + 1, T);
        }
        cg_tensor *logits = gru_lm_forward(m, cg_stack(xs, B, 0), h);
        cg_tensor *l = cg_cross_entropy(logits, cg_stack(ys, B, 0), -100, 0); /* class dim last */
        if (!cg_backward(l, NULL, false) || cg_optim_clip_grad_norm(opt, 1.0) < 0 ||
            !cg_optim_step(opt))
            return fprintf(stderr, "error: %s\n", cg_last_error()), 1;
        cg_optim_zero_grad(opt);
        loss = cg_item(l);
        first = step ? first : loss;
        if (step < 20 || step % 50 == 0 || step == steps - 1)
            printf("step %3ld loss %.6f\n", step, loss);
        cg_scope_end(s);
    }

    /* Sampling: one character at a time, the state carried from step to
     * step, no graph. */
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    cg_rng rng = cg_rng_new(1);
    cg_sample_config sc = {.temperature = 0.8, .top_p = 1}; /* top_k 0: off */
    cg_tensor *h[L] = {0};
    cg_tensor *id = cg_from_i64(CG_SHAPE(1, 1), (int64_t[]){strchr(chars, 'C') - chars});
    printf("sample: C");
    for (int i = 0; i < 80 && id; i++) {
        id = cg_sample_rows(gru_lm_forward(m, id, h), &sc, &rng); /* [1, 1] */
        if (id)
            putchar(chars[cg_data_i64(id)[0]]);
    }
    printf("\n");
    bool ok = id != NULL;
    cg_scope_end(s);
    cg_no_grad_end();
    if (!ok || !opt)
        fprintf(stderr, "error: %s\n", cg_last_error());
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    cg_release(data);
    return ok && opt && loss < first && (steps < 300 || loss < 1.0f) ? 0 : 1;
}
