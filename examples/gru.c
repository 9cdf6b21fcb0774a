/* gru: a character-level language model that is not a transformer: an
 * embedding, a two-layer GRU (cg_gru, nn/rnn.h: torch.nn.GRU, one fused
 * cell op a time step), a linear head and
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

/* The GRU is cgrad's nn.GRU (nn/rnn.h), its parameters under torch.nn.GRU's
 * names (gru.weight_ih_l0, ...), so that a state dict moves between the
 * two programs as it is. */
typedef struct {
    cg_module base;
    cg_embed *emb;
    cg_gru *gru; /* batch_first: [b, t, E] -> [b, t, H] */
    cg_linear *head;
} gru_lm;

/* Built in PyTorch's order: the embedding (N(0, 1)), then the GRU's
 * parameters layer by layer (U(-1/sqrt(H), 1/sqrt(H))), then the head
 * (nn.Linear's defaults); the nn constructors draw nothing
 * (cg_init_skip), cg_module_reset_parameters_torch does. */
static gru_lm *gru_lm_new(int64_t V, cg_mt19937 *g)
{
    gru_lm *m = (gru_lm *)cg_module_alloc(sizeof *m, "CharGRU", NULL);
    cg_rnn_config cfg = CG_RNN_CONFIG(E, H);
    cfg.num_layers = L;
    cfg.batch_first = true;
    m->emb = cg_module_add_child(&m->base, "emb", cg_embed_new(V, E, cg_init_skip()));
    m->gru = cg_module_add_child(&m->base, "gru", cg_gru_new(&cfg, cg_init_skip()));
    m->head = cg_module_add_child(&m->base, "head", cg_linear_new(H, V, true, cg_init_skip()));
    if (!m->emb || !m->gru || !m->head || !cg_module_reset_parameters_torch(CG_MODULE(m), g)) {
        cg_module_free(CG_MODULE(m)); /* cg_last_error() says why */
        return NULL;
    }
    return m;
}

/* ids [b, t] -> logits [b, t, V]; *h is the GRU's state [L, b, H], read
 * and replaced (NULL: zeros, nn.GRU's default h0). Called in a scope: the
 * intermediates are not released one by one. */
static cg_tensor *gru_lm_forward(gru_lm *m, cg_tensor *ids, cg_tensor **h)
{
    cg_tensor *y = cg_gru_forward(m->gru, cg_embed_forward(m->emb, ids), *h, h);
    return cg_linear_forward(m->head, y);
}

int main(int argc, char **argv)
{
    cg_omp_short_spin(); /* OpenMP threads wait 50 us, not 6 ms: many small ops a step */
    char *end = "";
    long steps = argc == 1                                  ? 300
                 : argc == 3 && !strcmp(argv[1], "--steps") ? strtol(argv[2], &end, 10)
                                                            : 0;
    if (steps < 1 || *end)
        return fprintf(stderr, "usage: example_gru [--steps N (N >= 1, default 300)]\n"), 2;
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
        cg_tensor *xs[B], *ys[B], *h = NULL;
        for (int i = 0; i < B; i++) {
            int64_t at = (step * B + i) * 97 % (n - T);
            xs[i] = cg_narrow(data, 0, at, T), ys[i] = cg_narrow(data, 0, at + 1, T);
        }
        cg_tensor *logits = gru_lm_forward(m, cg_stack(xs, B, 0), &h);
        cg_tensor *l = cg_cross_entropy(logits, cg_stack(ys, B, 0), -100, 0,
                                        CG_REDUCTION_MEAN); /* class dim last */
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
    cg_tensor *h = NULL;
    cg_tensor *id = cg_from_i64(CG_SHAPE(1, 1), (int64_t[]){strchr(chars, 'C') - chars});
    printf("sample: C");
    for (int i = 0; i < 80 && id; i++) {
        id = cg_sample_rows(gru_lm_forward(m, id, &h), &sc, &rng); /* [1, 1] */
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
