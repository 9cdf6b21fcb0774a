/* tcn: a character-level language model made of convolutions (a temporal
 * convolutional network, as WaveNet's and Bai et al.'s): an embedding, a
 * 1x1 nn.Conv1d, four residual blocks of a causal nn.Conv1d (kernel 3,
 * dilation 1, 2, 4, 8, padded on the left only: each character sees the
 * 31 before it, none after), nn.BatchNorm1d and ReLU, and a 1x1
 * convolution to the logits; cross-entropy, AdamW and gradient clipping
 * on a paragraph of Moby-Dick (gru.c's), then sampled in eval mode (BatchNorm's
 * running statistics). tcn.py is the same program in PyTorch, and both
 * start from the same weights: the C side draws them from PyTorch's
 * generator (cg_mt19937) in the order torch.manual_seed(1); nn.Embedding;
 * nn.Conv1d ... draws them, so the two print the same losses (the meson
 * test example_tcn_torch compares the first 15 steps).
 *
 *   build/examples/example_tcn [--steps N]      (default 300) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

enum { B = 16, T = 64, E = 32, C = 64, K = 3, NBLOCKS = 4 };

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

/* Under tcn.py's names (emb, inp, blocks.0.conv, blocks.0.bn, ..., head),
 * so that a state dict moves between the two programs as it is. */
typedef struct {
    cg_module base;
    cg_embed *emb;
    cg_conv *inp, *conv[NBLOCKS], *head;
    cg_batchnorm *bn[NBLOCKS];
} char_tcn;

/* Built in PyTorch's order (the embedding, the input convolution, each
 * block's convolution and norm, the head); the constructors draw nothing
 * (cg_init_skip), cg_module_reset_parameters_torch does: N(0, 1) for the
 * embedding, nn.Conv1d's defaults for the convolutions. */
static char_tcn *char_tcn_new(int64_t V, cg_mt19937 *g)
{
    char_tcn *m = (char_tcn *)cg_module_alloc(sizeof *m, "CharTCN", NULL);
    cg_rng *skip = cg_init_skip();
    bool ok =
        (m->emb = cg_module_add_child(&m->base, "emb", cg_embed_new(V, E, skip))) &&
        (m->inp = cg_module_add_child(&m->base, "inp", cg_conv1d_new(E, C, 1, NULL, 1, skip)));
    cg_module *blocks =
        ok ? cg_module_add_child(&m->base, "blocks", cg_module_new("ModuleList")) : NULL;
    for (int b = 0; b < NBLOCKS && (ok = blocks != NULL); b++) {
        cg_conv_cfg cfg = CG_CONV_DEFAULT;
        cfg.dilation[0] = 1 << b; /* 1, 2, 4, 8 */
        cg_module *block = cg_module_append(blocks, cg_module_new("Block"));
        ok = block &&
             (m->conv[b] =
                  cg_module_add_child(block, "conv", cg_conv1d_new(C, C, K, &cfg, 1, skip))) &&
             (m->bn[b] = cg_module_add_child(block, "bn", cg_batchnorm1d_new(C, NULL)));
        if (!ok)
            break;
    }
    ok = ok &&
         (m->head = cg_module_add_child(&m->base, "head", cg_conv1d_new(C, V, 1, NULL, 1, skip)));
    if (!ok || !cg_module_reset_parameters_torch(CG_MODULE(m), g)) {
        cg_module_free(CG_MODULE(m)); /* cg_last_error() says why */
        return NULL;
    }
    return m;
}

/* ids [b, t] -> logits [b, t, V] (the class dim last, as cg_cross_entropy
 * takes it). Called in a scope: the intermediates are not released one
 * by one. */
static cg_tensor *char_tcn_forward(char_tcn *m, cg_tensor *ids)
{
    cg_tensor *h = cg_conv_forward(m->inp, cg_transpose(cg_embed_forward(m->emb, ids), 1, 2));
    for (int b = 0; b < NBLOCKS; b++) {
        /* causal: (K - 1) dilation zeros on the left of the time dim */
        const int64_t pad[2] = {(int64_t)(K - 1) << b, 0};
        cg_tensor *c = cg_conv_forward(m->conv[b], cg_pad(h, 2, pad, CG_PAD_CONSTANT, 0.0f));
        h = cg_add(h, cg_relu(cg_batchnorm_forward(m->bn[b], c)));
    }
    return cg_transpose(cg_conv_forward(m->head, h), 1, 2);
}

int main(int argc, char **argv)
{
    cg_omp_short_spin(); /* OpenMP threads wait 50 us, not 6 ms: many small ops a step */
    char *end = "";
    long steps = argc == 1                                  ? 300
                 : argc == 3 && !strcmp(argv[1], "--steps") ? strtol(argv[2], &end, 10)
                                                            : 0;
    if (steps < 1 || *end)
        return fprintf(stderr, "usage: example_tcn [--steps N (N >= 1, default 300)]\n"), 2;
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
    char_tcn *m = char_tcn_new(V, &g);
    cg_optim *opt = m ? cg_adamw_from_module(CG_MODULE(m), 3e-3) : NULL; /* weight decay 0.01 */
    if (!opt)
        return fprintf(stderr, "error: %s\n", cg_last_error()), 1;
    float loss = 0, first = 0;
    for (long step = 0; step < steps; step++) {
        cg_scope *s = cg_scope_begin();
        /* A fixed walk through the text (tcn.py takes the same windows):
         * row i of step k starts at (k B + i) * 97 mod (n - T). */
        cg_tensor *xs[B], *ys[B];
        for (int i = 0; i < B; i++) {
            int64_t at = (step * B + i) * 97 % (n - T);
            xs[i] = cg_narrow(data, 0, at, T), ys[i] = cg_narrow(data, 0, at + 1, T);
        }
        cg_tensor *l = cg_cross_entropy(char_tcn_forward(m, cg_stack(xs, B, 0)), cg_stack(ys, B, 0),
                                        -100, 0, CG_REDUCTION_MEAN);
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

    /* Sampling in eval mode: the last T characters in, the next one drawn
     * from the last position's logits, no graph. */
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_rng rng = cg_rng_new(1);
    cg_sample_config sc = {.temperature = 0.8, .top_p = 1}; /* top_k 0: off */
    char out[128] = "Call me";
    bool ok = true;
    for (int len = 7; ok && len < 87; len++) {
        cg_scope *s = cg_scope_begin();
        int64_t t = len < T ? len : T, w[T];
        for (int64_t i = 0; i < t; i++)
            w[i] = strchr(chars, out[len - t + i]) - chars;
        cg_tensor *logits = char_tcn_forward(m, cg_from_i64(CG_SHAPE(1, t), w));
        cg_tensor *id = logits ? cg_sample_rows(cg_narrow(logits, 1, t - 1, 1), &sc, &rng) : NULL;
        ok = id != NULL;
        out[len] = ok ? chars[cg_data_i64(id)[0]] : 0;
        cg_scope_end(s);
    }
    cg_no_grad_end();
    printf("sample: %s\n", out);
    if (!ok)
        fprintf(stderr, "error: %s\n", cg_last_error());
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    cg_release(data);
    return ok && loss < first && (steps < 300 || loss < 1.0f) ? 0 : 1;
}
