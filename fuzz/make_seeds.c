/* Writes the generated seed inputs of the fuzz corpora (built with the rest
 * so that it keeps up with the API; run from the repository root):
 *
 *   build/fuzz/make_seeds fuzz/corpus
 *
 * checkpoint/: tiny char-LM checkpoints (layernorm/pre-norm and
 * rmsnorm/post-norm), with and without AdamW state after one step.
 * safetensors/: a file with every dtype the writer emits and metadata.
 * seq2seq_checkpoint/: a tiny seq2seq checkpoint with Adam state and
 * trainer state, one without, and damaged ones (an unknown tensor, a
 * config of 0 encoder layers over its block tensors).
 * train_state/: trainer states (models/train/trainer.h) of both programs, and
 * damaged ones (epoch 0 with pos below the batch count, epoch 1e15, a
 * huge pos, a bad data identity, history arrays of different lengths).
 * spm/: the models of two small BPE tokenizers (spm_seed).
 * lora/: LoRA adapters of the tiny char LM of fuzz/fuzz_lora.c: PEFT's file
 * (the default targets), and a zoo adapter checkpoint (two targets, one by
 * its full path, with their Adam state after one step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "fuzz/lora_base.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/data/pairs.h"
#include "models/text/spm.h"
#include "models/train/finetune.h"
#include "nn/lora.h"

static int fail(void)
{
    fprintf(stderr, "make_seeds: %s\n", cg_last_error());
    return 1;
}

/* One optimizer step of o on a 4-token window of m: the state a
 * checkpoint with optimizer moments holds. */
static bool one_step(cg_charlm *m, cg_optim *o)
{
    int64_t x[4] = {0, 1, 2, 3}, y[4] = {1, 2, 3, 4};
    cg_tensor *logits = o ? cg_charlm_forward(m, x, 1, 4) : NULL;
    cg_tensor *loss = logits ? cg_charlm_loss(m, logits, y) : NULL;
    bool ok = loss && cg_backward(loss, NULL, false) && cg_optim_step(o);
    cg_release(loss);
    cg_release(logits);
    return ok;
}

static int ckpt(const char *dir, const char *name, cg_norm_kind norm, bool pre, bool with_optim)
{
    static const uint32_t text[] = {'a', 'b', 'c', '\n', 0xe9};
    cg_vocab *v = cg_vocab_from_codepoints(text, 5);
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = v->n;
    c.d = 4;
    c.H = 2;
    c.layers = 1;
    c.d_ff = 8;
    c.max_len = 8;
    c.norm = norm;
    c.norm_first = pre;
    cg_charlm *m = cg_charlm_new(&c, 7);
    if (!m)
        return fail();
    cg_optim *o = NULL;
    cg_param_list pl = {0};
    if (with_optim) {
        cg_module_params(CG_MODULE(m), &pl);
        cg_optim_param *op = calloc((size_t)pl.n, sizeof *op);
        for (int i = 0; i < pl.n; i++)
            op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.1};
        cg_optim_config oc = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
        o = cg_optim_new(&oc, pl.n, op);
        free(op);
        if (!one_step(m, o))
            return fail();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint/%s", dir, name);
    bool ok = cg_charlm_ckpt_save(path, m, v, o, with_optim ? 1 : 0,
                                  with_optim ? "{\"rng\": [1, 2], \"best_val\": 2.5, \"history\": "
                                               "{\"step\":[0,10],\"train\":[3.5,2.5],"
                                               "\"val\":[3.5,null],\"dense_every\":10,"
                                               "\"dense_step\":[5.5,15.5],"
                                               "\"dense_loss\":[3.2,2.4],\"dense_acc\":"
                                               "{\"loss\":\"4.5\",\"step\":43,\"n\":2}}}"
                                             : NULL);
    cg_optim_free(o);
    cg_param_list_free(&pl);
    cg_charlm_free(m);
    cg_vocab_free(v);
    return ok ? 0 : fail();
}

static const char S2S_STATE[] =
    "{\"steps\":6,\"eval_every\":100,\"seed\":\"1\",\"grad_accum\":1,\"data\":\"/data/p.tsv\","
    "\"data_id\":{\"path\":\"/data/p.tsv\",\"size\":\"2070\",\"xxh3\":\"0123456789abcdef\"},"
    "\"dropout_rng\":{\"seed\":\"11400714819323198484\",\"counter\":\"360192\"},"
    "\"recent\":[3.22,3.20,3.23],\"history\":{\"step\":[3],\"train\":[3.2],\"val\":[3.1],"
    "\"dense_every\":10,\"dense_step\":[],\"dense_loss\":[],\"dense_acc\":{\"loss\":\"9.6\","
    "\"step\":6,\"n\":3}},\"options\":{\"precision\":\"fp32\"},\"model\":{\"preset\":\"tiny\","
    "\"max_tokens\":200,\"factor\":0.25,\"warmup\":400,\"max_len\":256,\"valid_size\":5,"
    "\"test_size\":5,\"epoch\":1,\"pos\":3}}";

static int s2s_ckpt(const char *dir, const char *name, int damage, bool with_optim)
{
    cg_pairs p;
    if (!cg_pairs_parse("ab c\tba\u00e9\nca\tac\n", 16, "seed", &p))
        return fail();
    cg_pair_vocab v;
    if (!cg_pair_vocab_build(&p, NULL, p.n, &v))
        return fail();
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&v);
    c.d = 4;
    c.H = 2;
    c.enc_layers = 1;
    c.dec_layers = 1;
    c.d_ff = 8;
    c.max_len = 8;
    cg_seq2seq *m = cg_seq2seq_new(&c, 3);
    if (!m)
        return fail();
    cg_optim *o = NULL;
    cg_param_list pl = {0};
    if (with_optim) {
        cg_module_params(CG_MODULE(m), &pl);
        cg_optim_param *op = calloc((size_t)pl.n, sizeof *op);
        for (int i = 0; i < pl.n; i++)
            op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.0};
        cg_optim_config oc = cg_adam_config(1e-3, 0.9, 0.98, 1e-9);
        o = cg_optim_new(&oc, pl.n, op);
        free(op);
        cg_batch b;
        int64_t idx[2] = {0, 1};
        if (!o || !cg_batch_make(&p, idx, 2, &v, &b))
            return fail();
        cg_tensor *logits = cg_seq2seq_forward(m, b.src, b.B, b.S, b.tgt_in, b.T);
        cg_tensor *loss = cg_seq2seq_loss(m, logits, b.tgt_out);
        if (!loss || !cg_backward(loss, NULL, false) || !cg_optim_step(o))
            return fail();
        cg_release(loss);
        cg_release(logits);
        cg_batch_free(&b);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/seq2seq_checkpoint/%s", dir, name);
    const cg_tokenizer tok = {.kind = CG_TOK_CHAR, .specials = true, .pv = v};
    bool ok =
        cg_seq2seq_ckpt_save(path, m, &tok, o, with_optim ? 3 : 0, with_optim ? S2S_STATE : NULL);
    if (ok && damage) { /* rewrite with an extra tensor or a config of 0 layers */
        cg_st_file *f = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        for (int i = 0; ok && i < cg_st_metadata_count(f); i++) {
            const char *k = cg_st_metadata_key(f, i);
            const char *val = cg_st_metadata(f, k);
            if (damage == 2 && strcmp(k, "config") == 0) {
                c.enc_layers = 0; /* (the writer refuses a decoder of 0 layers) */
                char *cj = cg_seq2seq_config_to_json(&c);
                ok = cj && cg_st_set_metadata(w, k, cj);
                free(cj);
            } else {
                ok = cg_st_set_metadata(w, k, val);
            }
        }
        for (int i = 0; ok && i < cg_st_count(f); i++) {
            const char *tn = cg_st_name(f, i);
            cg_st_dtype dt;
            int nd;
            int64_t shape[CG_MAX_DIMS];
            ok = cg_st_info(f, tn, &dt, &nd, shape);
            if (ok && dt == CG_ST_I64) {
                cg_tensor *iv = cg_st_get_i64(f, tn);
                ok = iv && cg_st_add(w, tn, iv);
                cg_release(iv);
            } else if (ok) {
                cg_tensor *t = cg_st_get_f32(f, tn);
                ok = t && cg_st_add_f32(w, tn, t);
                cg_release(t);
            }
        }
        if (ok && damage == 1)
            ok = cg_st_add_f32_raw(w, "decoder.layers.5.ln1.weight", 1, (int64_t[]){4},
                                   (float[]){1, 1, 1, 1});
        ok = ok && cg_st_writer_save(w, path);
        cg_st_writer_free(w);
        cg_st_close(f);
    }
    cg_optim_free(o);
    cg_param_list_free(&pl);
    cg_seq2seq_free(m);
    cg_pair_vocab_free(&v);
    cg_pairs_free(&p);
    return ok ? 0 : fail();
}

static int text_seed(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/train_state/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* s with the first occurrence of a replaced by b (static buffer). */
static const char *subst(const char *s, const char *a, const char *b)
{
    static char out[4096];
    const char *at = strstr(s, a);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - s), s, b, at + strlen(a));
    return out;
}

/* spm/: a knob byte (0: the header left intact) and the model of a small
 * BPE tokenizer trained on a few sentences, alone (fuzz/fuzz_spm.c writes
 * the header). Nothing when the build lacks SentencePiece. */
static int spm_seed(const char *dir, const char *name, int64_t vocab)
{
    static const char *const sents[] = {"Ein B\xc3\xa4r l\xc3\xa4uft.",
                                        "Die Katze l\xc3\xa4uft schnell.", "a b c d e f",
                                        "\xe4\xb8\xad\xe6\x96\x87 text 123"};
    if (!cg_spm_available())
        return 0;
    cg_spm *t = cg_spm_train(sents, 4, vocab);
    size_t len;
    const unsigned char *m = t ? cg_spm_model_proto(t, &len) : NULL;
    if (!m)
        return fail();
    char path[4096];
    snprintf(path, sizeof path, "%s/spm/%s", dir, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fputc(0, f) == 0 && fwrite(m, 1, len, f) == len;
    ok = f && !fclose(f) && ok;
    cg_spm_free(t);
    if (!ok)
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
    return ok ? 0 : 1;
}

/* lora/NAME: adapters on fuzz/fuzz_lora.c's base (targets NULL: the
 * default ones), B drawn so that they do something; with_optim: the zoo's
 * adapter checkpoint tensors (Adam state after one step). */
static int lora_seed(const char *dir, const char *name, const char *targets, bool with_optim)
{
    const cg_charlm_config c = cg_fuzz_lora_base_config();
    cg_charlm *m = cg_charlm_new(&c, 7);
    cg_rng rng = cg_rng_new(3);
    cg_ft_lora l = {.rank = 2, .alpha = 8, .dropout = 0.1, .targets = targets};
    if (!m || cg_ft_lora_attach(CG_MODULE(m), &l, &rng, &m->dropout_rng) < 1)
        return fail();
    cg_param_list pl = {0};
    cg_module_params(CG_MODULE(m), &pl);
    for (int i = 0; i < pl.n; i++)
        if (strstr(pl.items[i].name, ".lora_B."))
            cg_init_normal_(pl.items[i].tensor, &rng, 0, 0.1f);
    cg_param_list_free(&pl);
    cg_optim *o = NULL;
    if (with_optim) {
        o = cg_adam_from_module(CG_MODULE(m), 1e-3);
        if (!one_step(m, o))
            return fail();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/lora/%s", dir, name);
    cg_st_writer *w = cg_st_writer_new();
    bool ok = w && cg_lora_write(CG_MODULE(m), w) && (!o || cg_optim_save(o, w, "optim")) &&
              cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    cg_optim_free(o);
    cg_charlm_free(m);
    return ok ? 0 : fail();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (lora_seed(dir, "peft_default.safetensors", NULL, false) ||
        lora_seed(dir, "zoo_adam.safetensors", "q_proj,blocks.0.ff.fc2", true))
        return 1;
    if (ckpt(dir, "tiny_ln_pre_adamw.safetensors", CG_NORM_LAYERNORM, true, true) ||
        ckpt(dir, "tiny_rms_post.safetensors", CG_NORM_RMSNORM, false, false))
        return 1;
    cg_st_writer *w = cg_st_writer_new();
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    int64_t i[3] = {-1, 0, 1LL << 40};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s0[1] = {0};
    cg_tensor *ids = cg_from_i64(1, s3, i);
    char path[4096];
    snprintf(path, sizeof path, "%s/safetensors/mixed.safetensors", dir);
    if (!cg_st_add_f32_raw(w, "a.weight", 2, s23, f) || !cg_st_add(w, "ids", ids) ||
        !cg_st_add_f32_raw(w, "empty", 1, s0, f) || !cg_st_add_f32_raw(w, "scalar", 0, NULL, f) ||
        !cg_st_set_metadata(w, "format", "pt") || !cg_st_set_metadata(w, "note", "\xc3\xa9\"\\") ||
        !cg_st_writer_save(w, path))
        return fail();
    cg_st_writer_free(w);
    cg_release(ids);
    if (s2s_ckpt(dir, "tiny_adam.safetensors", 0, true) ||
        s2s_ckpt(dir, "tiny_params.safetensors", 0, false) ||
        s2s_ckpt(dir, "extra_tensor.safetensors", 1, true) ||
        s2s_ckpt(dir, "zero_layers.safetensors", 2, false))
        return 1;
    const char *lm_state =
        "{\"steps\":40,\"eval_every\":10,\"seed\":\"3\",\"grad_accum\":1,\"data\":\"/data/"
        "tiny.txt\","
        "\"data_id\":{\"path\":\"/data/tiny.txt\",\"size\":\"1566\",\"xxh3\":\"fd8acfe1cd267e4f\"},"
        "\"dropout_rng\":{\"seed\":\"5\",\"counter\":\"99\"},\"recent\":[3.1,3.0],"
        "\"history\":{\"step\":[10,20],\"train\":[3.1,2.9],\"val\":[3.2,null],\"dense_every\":10,"
        "\"dense_step\":[5.5,15.5],\"dense_loss\":[3.0,2.8],\"dense_acc\":{\"loss\":\"0\","
        "\"step\":0,\"n\":0}},\"options\":{\"precision\":\"fp32\"},\"model\":{\"batch_size\":4,"
        "\"lr\":\"0.001\",\"label_smoothing\":\"0\",\"batch_rng_seed\":\"3\","
        "\"batch_rng_counter\":\"160\"}}";
    if (text_seed(dir, "seq2seq_full.json", S2S_STATE) ||
        text_seed(dir, "charlm_full.json", lm_state) ||
        text_seed(dir, "epoch0.json", subst(S2S_STATE, "\"epoch\":1,", "\"epoch\":0,")) ||
        text_seed(dir, "epoch1e15.json", subst(S2S_STATE, "\"epoch\":1,", "\"epoch\":1e15,")) ||
        text_seed(dir, "huge_int.json", subst(S2S_STATE, "\"pos\":3}", "\"pos\":1e300}")) ||
        text_seed(dir, "bad_id.json", subst(S2S_STATE, "\"size\":\"2070\"", "\"size\":-1")) ||
        text_seed(dir, "history_mismatch.json",
                  subst(lm_state, "\"val\":[3.2,null]", "\"val\":[3.2]")))
        return 1;
    if (spm_seed(dir, "bpe_290.model", 290) || spm_seed(dir, "bpe_340.model", 340))
        return 1;
    return 0;
}
