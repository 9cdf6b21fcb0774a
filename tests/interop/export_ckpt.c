/* Writes a checkpoint of each zoo model saved by cgrad, with an input batch
 * and the logits cgrad computes for it, so that check_torch_load.py can load
 * the parameters into the PyTorch reference and compare its logits.
 *
 *   export_ckpt OUTDIR     -> OUTDIR/charlm.safetensors, OUTDIR/seq2seq.safetensors,
 *                             OUTDIR/decode.safetensors
 *
 * decode.safetensors: a translator whose matrices are scaled to N(0, 0.3)
 * (decisive logits: greedy and beam choices far from ties), six sources,
 * and what cgrad decodes for them: greedy (batched, PAD after EOS) and beam
 * search of each source at several beams and length penalties, which
 * check_torch_load.py compares with the reference's greedy_decode and
 * train_seq2seq.beam_search.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/charlm/charlm.h"
#include "models/seq2seq/beam.h"
#include "models/seq2seq/seq2seq.h"
#include "nn/safetensors.h"

static int fail(const char *what)
{
    fprintf(stderr, "export_ckpt: error: %s: %s\n", what, cg_last_error());
    return 1;
}

static bool write_file(cg_module *m, const char *path, const char *model, char *config,
                       int n_inputs, const char *const *names, int64_t *const *ids,
                       const int64_t (*shapes)[2], cg_tensor *logits)
{
    cg_st_writer *w = cg_st_writer_new();
    bool ok = w && cg_module_write(m, w, NULL);
    for (int i = 0; ok && i < n_inputs; i++) {
        cg_tensor *t = cg_from_i64(2, shapes[i], ids[i]);
        ok = cg_st_add(w, names[i], t);
        cg_release(t);
    }
    ok = ok && cg_st_add_f32(w, "expect.logits", logits) && cg_st_set_metadata(w, "model", model) &&
         cg_st_set_metadata(w, "config", config) && cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    free(config);
    return ok;
}

/* ids[0..n) as an int64 tensor [n + 1] ending in -1 (a decode may be empty) */
static bool add_ids(cg_st_writer *w, const char *name, const int64_t *ids, int64_t n)
{
    int64_t *v = malloc((size_t)(n + 1) * sizeof *v);
    if (!v)
        return false;
    memcpy(v, ids, (size_t)n * sizeof *v);
    v[n] = -1;
    int64_t shape[1] = {n + 1};
    cg_tensor *t = cg_from_i64(1, shape, v);
    bool ok = t && cg_st_add(w, name, t);
    cg_release(t);
    free(v);
    return ok;
}

enum { DEC_B = 6, DEC_S = 9, DEC_STEPS = 20 };
static const int DEC_BEAMS[] = {2, 3, 4, 6};
static const double DEC_ALPHAS[] = {0.0, 0.6, 2.0};

/* The translator of decode.safetensors and its decodes (see the top). */
static bool write_decodes(const char *path)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = 12, c.d = 32, c.H = 4, c.d_ff = 64, c.max_len = 24;
    cg_seq2seq *m = cg_seq2seq_new(&c, 5);
    cg_param_list pl = {0};
    if (!m || !cg_module_params(CG_MODULE(m), &pl))
        return false;
    for (int i = 0; i < pl.n; i++)
        for (int64_t k = 0; pl.items[i].tensor->ndim == 2 && k < cg_numel(pl.items[i].tensor); k++)
            cg_data(pl.items[i].tensor)[k] *= 15.0f;
    cg_param_list_free(&pl);
    cg_module_train(CG_MODULE(m), false);
    int64_t src[DEC_B * DEC_S] = {0}, out[DEC_B * DEC_STEPS], lens[DEC_B];
    for (int b = 0; b < DEC_B; b++) {
        for (int k = 0; k < b + 2; k++)
            src[b * DEC_S + k] = 3 + (b * 5 + k * 7) % 9;
        src[b * DEC_S + b + 2] = 2; /* EOS, then PAD */
    }
    cg_st_writer *w = cg_st_writer_new();
    const int64_t ss[2] = {DEC_B, DEC_S}, os[2] = {DEC_B, DEC_STEPS};
    cg_tensor *ts = cg_from_i64(2, ss, src), *to = NULL;
    bool ok = w && ts && cg_module_write(CG_MODULE(m), w, NULL) && cg_st_add(w, "input.src", ts) &&
              cg_greedy_decode(m, src, DEC_B, DEC_S, DEC_STEPS, out, lens, true) &&
              (to = cg_from_i64(2, os, out)) && cg_st_add(w, "expect.greedy", to);
    for (int b = 0; ok && b < DEC_B; b++)
        for (size_t i = 0; ok && i < sizeof DEC_BEAMS / sizeof *DEC_BEAMS; i++)
            for (size_t a = 0; ok && a < sizeof DEC_ALPHAS / sizeof *DEC_ALPHAS; a++) {
                int64_t *ids = NULL, n = 0;
                char name[64];
                snprintf(name, sizeof name, "expect.beam.%d.%d.%g", b, DEC_BEAMS[i], DEC_ALPHAS[a]);
                ok = cg_beam_search(m, src + b * DEC_S, b + 3, DEC_BEAMS[i], DEC_ALPHAS[a],
                                    DEC_STEPS, &ids, &n, NULL, NULL, true) &&
                     add_ids(w, name, ids, n);
                free(ids);
            }
    char *config = cg_seq2seq_config_to_json(&c);
    ok = ok && config && cg_st_set_metadata(w, "model", "seq2seq") &&
         cg_st_set_metadata(w, "config", config) && cg_st_writer_save(w, path);
    free(config);
    cg_release_all(2, ts, to);
    cg_st_writer_free(w);
    cg_seq2seq_free(m);
    return ok;
}

static bool export_models(const char *dir, const char *suffix, bool bias);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: export_ckpt OUTDIR\n");
        return 2;
    }
    for (int nb = 0; nb < 2; nb++) /* with biases, then without (--bias false) */
        if (!export_models(argv[1], nb ? "_nobias" : "", !nb))
            return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/decode.safetensors", argv[1]);
    if (!write_decodes(path))
        return fail(path);
    return 0;
}

/* The two models, NAME.safetensors (charlm, seq2seq) + suffix: their
 * weights, inputs and logits; with biases or not. */
static bool export_models(const char *dir, const char *suffix, bool bias)
{
    char path[4096];
    cg_rng rng = cg_rng_new(11);

    /* CharLM: pre-norm gelu (rmsnorm; layernorm without biases), B=2, T=9 */
    cg_charlm_config cc = cg_charlm_config_default();
    cc.vocab = 23;
    cc.d = 24;
    cc.H = 3;
    cc.layers = 2;
    cc.d_ff = 40;
    cc.max_len = 16;
    cc.norm = bias ? CG_NORM_RMSNORM : CG_NORM_LAYERNORM;
    cc.bias = bias;
    cg_charlm *lm = cg_charlm_new(&cc, 5);
    if (!lm)
        return !fail("charlm");
    int64_t x[18];
    for (int i = 0; i < 18; i++)
        x[i] = (int64_t)cg_rng_below(&rng, 23);
    cg_tensor *logits = cg_charlm_forward(lm, x, 2, 9);
    if (!logits)
        return !fail("charlm forward");
    snprintf(path, sizeof path, "%s/charlm%s.safetensors", dir, suffix);
    const int64_t xs[1][2] = {{2, 9}};
    if (!write_file(CG_MODULE(lm), path, "charlm", cg_charlm_config_to_json(&cc), 1,
                    (const char *[]){"input.x"}, (int64_t *[]){x}, xs, logits))
        return !fail(path);
    cg_release(logits);
    cg_charlm_free(lm);

    /* Seq2Seq: post-norm layernorm relu, padded batch */
    cg_seq2seq_config sc = cg_seq2seq_config_default();
    sc.vocab = 30;
    sc.d = 16;
    sc.H = 2;
    sc.d_ff = 32;
    sc.max_len = 16;
    sc.bias = bias;
    cg_seq2seq *s2s = cg_seq2seq_new(&sc, 6);
    if (!s2s)
        return !fail("seq2seq");
    int64_t src[2 * 7] = {5, 6, 7, 8, 9, 10, 2, 11, 12, 13, 2, 0, 0, 0};
    int64_t tgt[2 * 5] = {1, 14, 15, 16, 17, 1, 18, 19, 0, 0};
    logits = cg_seq2seq_forward(s2s, src, 2, 7, tgt, 5);
    if (!logits)
        return !fail("seq2seq forward");
    snprintf(path, sizeof path, "%s/seq2seq%s.safetensors", dir, suffix);
    const int64_t ss[2][2] = {{2, 7}, {2, 5}};
    if (!write_file(CG_MODULE(s2s), path, "seq2seq", cg_seq2seq_config_to_json(&sc), 2,
                    (const char *[]){"input.src", "input.tgt_in"}, (int64_t *[]){src, tgt}, ss,
                    logits))
        return !fail(path);
    cg_release(logits);
    cg_module_free(CG_MODULE(s2s));
    return true;
}
