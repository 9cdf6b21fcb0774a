/* seq2seq: train and use the encoder-decoder translator over characters or
 * BPE subwords (models/text/tokenizer.h).
 *
 *   seq2seq train      [--data F --preset tiny|base --steps N ...]
 *   seq2seq translate  --ckpt F [--beam N --length-penalty A --no-cache] [sentences...]
 *   seq2seq eval       --ckpt F [--beam N] [--no-cache]
 *   seq2seq attention  --ckpt F --text S [--out DIR]
 *   seq2seq average    --out F CKPT CKPT...
 *
 * The training recipe is shared/reference/train_seq2seq.py (see its
 * docstring); the data split and batch order use numpy's RandomState
 * bit-exactly (models/data/pairs.h). The loop is models/train/trainer.h's, as are the
 * exit codes and the one-line errors "seq2seq: error: ...". */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/seq2seq_presets.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/data/data.h"
#include "models/data/pairs.h"
#include "models/seq2seq/seq2seq.h"
#include "models/text/tokenizer.h"
#include "models/train/program.h"
#include "models/seq2seq/translate.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "seq2seq"
#define DEFAULT_DATA "data/en_de_ding.tsv"
#define DEFAULT_CKPT "seq2seq.safetensors"

#define PRESETS cg_seq2seq_presets

/* A checkpoint that translate, eval or attention reads (never standard
 * output, their result). False + error (*c freed either way). */
static bool ckpt_load(const char *path, cg_seq2seq_ckpt *c)
{
    memset(c, 0, sizeof *c);
    return cg_out_check_stdout(path, "--ckpt") && cg_seq2seq_ckpt_load(path, c);
}

/* ============================================================ train */
static const char TRAIN_HELP[] =
    "usage: seq2seq train [options]\n"
    "\n"
    "Train the Transformer translator (characters or BPE subwords) with the recipe of\n"
    "shared/reference/train_seq2seq.py: Adam(0.9, 0.98, 1e-9) with the Noam\n"
    "schedule, gradient clipping at 1.0, batches of at most --max-tokens padded\n"
    "tokens from length-sorted pairs. Split: pairs shuffled with numpy\n"
    "RandomState(0); the last --test-size are test, the --valid-size before them\n"
    "validation, the rest train.\n"
    "seq2seq's own options and defaults:\n";

/* The translator as the trainer sees it. */
typedef struct {
    const cg_trainer *t;
    const char *preset;
    int64_t max_tokens, pad_to, warmup, max_len, valid_size, test_size, test_limit, beam, examples;
    double factor, alpha, word_dropout;
    cg_mt_data d;
    cg_seq2seq *model;
} mt_run;

static bool mt_batch(void *self, int k, double *weight, double *tokens)
{
    mt_run *r = self;
    return cg_mt_data_next(&r->d, k, weight, tokens);
}

static cg_tensor *mt_loss(void *self, int k)
{
    mt_run *r = self;
    const cg_batch *b = &r->d.bt[k];
    return cg_seq2seq_forward_loss(r->model, b->src, b->B, b->S, b->tgt_in, b->T, b->tgt_out);
}

static double mt_lr(void *self, int64_t step)
{
    mt_run *r = self;
    return cg_lr_noam(step, r->model->cfg.d, r->warmup, r->factor);
}

static bool mt_evaluate(void *self, int64_t step, cg_eval_result *e)
{
    (void)step;
    mt_run *r = self;
    double nll, ntok;
    if (!cg_seq2seq_valid_loss(r->model, &r->d.pairs, &r->d.vbatches, r->d.tok, &e->val, &nll,
                               &ntok))
        return false;
    cg_eval_add(e, "val_nll", "nll", nll, 4);
    cg_eval_add(e, "val_bpc", "bits/char", cg_bits_per_char(nll, ntok, r->d.valid_chars), 4);
    cg_eval_add(e, "epoch", "epoch", (double)r->d.epoch, 0);
    return true;
}

/* The final evaluation: validation losses (also with every target paired
 * with the next pair's source: does the model translate from its source?)
 * and the test split decoded greedily and with beam search. */
static bool mt_finish(void *self, const cg_trainer *t, cJSON *j)
{
    mt_run *r = self;
    const cg_pairs *P = &r->d.pairs;
    const cg_pair_split *sp = &r->d.split;
    double val_loss, val_nll, val_ntok, wrong_nll;
    if (!cg_seq2seq_valid_loss(r->model, P, &r->d.vbatches, r->d.tok, &val_loss, &val_nll,
                               &val_ntok) ||
        !cg_seq2seq_wrong_source_nll(r->model, P, sp->valid, sp->n_valid, r->max_tokens, r->d.tok,
                                     &wrong_nll))
        return false;
    fprintf(stderr, "valid nll %.4f, with mismatched sources %.4f\n", val_nll, wrong_nll);

    int64_t nt = r->test_limit < sp->n_test ? r->test_limit : sp->n_test;
    cg_translate_test_result tr = {NAN, NAN, NAN, NAN, 0};
    if (nt > 0) {
        fprintf(stderr, "decoding %lld test pairs (greedy, then beam %lld)...\n", (long long)nt,
                (long long)r->beam);
        if (!cg_translate_test(r->model, r->d.tok, P, sp->test, nt, (int)r->beam, r->alpha,
                               r->examples, stdout, &tr))
            return false;
    }
    cg_json_put_int(j, "epochs", r->d.epoch);
    cg_json_put_num(j, "train_loss", "%.4f", cg_trainer_recent_loss(t));
    cg_json_put_num(j, "val_loss", "%.4f", val_loss);
    cg_json_put_num(j, "val_nll", "%.4f", val_nll);
    cg_json_put_num(j, "val_bpc", "%.4f", cg_bits_per_char(val_nll, val_ntok, r->d.valid_chars));
    cg_json_put_num(j, "val_nll_wrong_src", "%.4f", wrong_nll);
    if (nt > 0) {
        cg_json_put_num(j, "bleu_greedy", "%.2f", tr.bleu_greedy);
        cg_json_put_num(j, "bleu_beam", "%.2f", tr.bleu_beam);
        cg_json_put_num(j, "chrf_greedy", "%.2f", tr.chrf_greedy);
        cg_json_put_num(j, "chrf_beam", "%.2f", tr.chrf_beam);
    }
    cg_json_put_num(j, "decode_s", "%.1f", tr.seconds);
    cg_json_put_num(j, "factor", "%.4f", r->factor);
    cg_json_put_str(j, "preset", r->preset);
    cg_json_put_str(j, "tokenizer", cg_tokenizer_kind_name(r->d.tok->kind));
    cg_json_put_int(j, "vocab", cg_tokenizer_vocab_size(r->d.tok));
    cg_json_put_int(j, "test_pairs", nt);
    cg_json_put_int(j, "beam", r->beam);
    return true;
}

static char *mt_config(void *self)
{
    return cg_seq2seq_config_to_json(&((mt_run *)self)->model->cfg);
}

/* The translator's own state: its recipe and its place in the batch order,
 * written into o or (o NULL) read back when resuming. */
static bool mt_state(void *self, cJSON *o)
{
    mt_run *r = self;
    const cg_json_field f[] = {
        {"preset", CG_JF_STR, &r->preset, 0, 0, false},
        {"factor", CG_JF_F64, &r->factor, 1e-12, 1e3, false},
        {"max_tokens", CG_JF_I64, &r->max_tokens, 2, 1e9, false},
        {"pad_to_multiple", CG_JF_I64, &r->pad_to, 1, 1e6, true}, /* absent before: 1 */
        {"warmup", CG_JF_I64, &r->warmup, 1, 1e9, false},
        {"max_len", CG_JF_I64, &r->max_len, 3, 100000, false},
        {"valid_size", CG_JF_I64, &r->valid_size, 1, 1e9, false},
        {"test_size", CG_JF_I64, &r->test_size, 1, 1e9, false},
        /* wide: the batch position is checked against the step (mt_setup) */
        {"epoch", CG_JF_I64, &r->d.epoch, 0, 1e15, false},
        {"pos", CG_JF_I64, &r->d.pos, 0, 1e15, false},
    };
    return cg_trainer_model_state(r->t, "seq2seq", o, f, (int)(sizeof f / sizeof f[0]));
}

/* A new model from the preset pr and the flags (seq2seq's defaults:
 * layernorm, relu); --lr sets the Noam factor. -1 or the exit code. */
static int mt_new_model(mt_run *r, const cg_train_opts *o, cg_train_recipe *rec,
                        const cg_train_preset *pr)
{
    cg_seq2seq_config cfg = cg_seq2seq_config_default();
    cfg.vocab = cg_tokenizer_vocab_size(r->d.tok);
    cfg.loss_chunk = cg_train_loss_chunk(cfg.vocab);
    cfg.norm = CG_NORM_LAYERNORM;
    cfg.act = CG_ACT_RELU;
    if (!cg_train_shape(o->args, pr, rec, &cfg.norm, &cfg.act))
        return cg_prog_fail_lib(NULL);
    const cg_train_preset *p = &rec->shape;
    cfg.d = p->d;
    cfg.H = p->H;
    cfg.enc_layers = p->enc_layers;
    cfg.dec_layers = p->dec_layers;
    cfg.d_ff = p->d_ff;
    cfg.max_len = r->max_len;
    cfg.norm_first = rec->norm_first;
    cfg.dropout = (float)rec->dropout;
    cfg.label_smoothing = (float)rec->label_smoothing;
    cfg.word_dropout = (float)r->word_dropout;
    if (!cg_seq2seq_config_check(&cfg))
        return cg_prog_fail_lib(NULL);
    if (cg_cli_given(o->args, &rec->lr)) /* the Noam peak (at step warmup) is X */
        r->factor = rec->lr * sqrt((double)cfg.d * (double)r->warmup);
    r->model = cg_seq2seq_new(&cfg, o->seed);
    return r->model ? -1 : cg_prog_fail_lib("model");
}

/* The data and vocabulary (resuming: ck, the checkpoint, and the run's
 * state read back from it), then the model, fresh or resumed. */
static int mt_data_model(mt_run *r, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec)
{
    cg_seq2seq_ckpt ck = {0};
    if (o->resume && (!ckpt_load(o->resume, &ck) || !mt_state(r, NULL)))
        return cg_prog_fail_lib(NULL);
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r->preset);
    int rc = pr ? -1 : cg_prog_fail_lib(NULL);
    if (rc < 0 && o->seed > 0xffffffffULL)
        rc = cg_prog_fail("--seed must be below 2^32 (numpy RandomState)");
    cg_data_id id;
    if (rc < 0 &&
        (!cg_mt_data_load(&r->d, o->data, DEFAULT_DATA, r->valid_size, r->test_size, &id) ||
         !cg_trainer_set_data(t, &id) || /* resuming: the checkpoint's data */
         !cg_mt_data_prepare(&r->d, o->data, r->max_len, r->max_tokens, rec->tokenizer,
                             rec->vocab_size, o->resume ? &ck.tok : NULL, o->resume, PROG) ||
         /* what decoding at the end and every rank's share need, known now */
         !cg_mt_check_split(&r->d, r->d.tok, false, r->test_limit, r->max_len, o->data) ||
         !cg_mt_check_ranks(&r->d, r->max_tokens, o->resume != NULL)))
        rc = cg_prog_fail_lib(NULL);
    if (rc < 0 && o->resume) {
        r->model = ck.model;
        ck.model = NULL;
        cg_module_train(CG_MODULE(r->model), true);
    } else if (rc < 0) {
        rc = mt_new_model(r, o, rec, pr);
    }
    cg_seq2seq_ckpt_free(&ck);
    return rc;
}

/* Data, vocabulary, model, batches and batch order (fresh or resumed), and
 * the translator as the trainer sees it. */
static int mt_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
                    cg_trainer_model *m)
{
    mt_run *r = self;
    r->t = t;
    int rc = mt_data_model(r, t, o, rec);
    if (rc >= 0)
        return rc;
    r->d.pad_to = r->pad_to;
    r->d.pad_limit = r->max_len;
    cg_seq2seq_set_recompute(r->model, rec->recompute);
    if (!cg_mt_data_order(&r->d, (uint32_t)o->seed, (int)o->grad_accum, o->resume != NULL, t->start,
                          o->resume))
        return cg_prog_fail_lib(NULL);
    fprintf(stderr,
            "train %lld pairs in %lld batches, valid %lld, test %lld, %s vocab %lld, params %lld, "
            "precision %s%s\n",
            (long long)r->d.n_train, (long long)r->d.batches.n_batches,
            (long long)r->d.split.n_valid, (long long)r->d.split.n_test,
            cg_tokenizer_kind_name(r->d.tok->kind), (long long)r->model->cfg.vocab,
            (long long)cg_module_num_params(CG_MODULE(r->model)), cg_precision_name(o->precision),
            o->resume ? " (resumed)" : "");
    *m = (cg_trainer_model){.name = "seq2seq",
                            .plot_title = "seq2seq: label-smoothed loss",
                            .module = CG_MODULE(r->model),
                            .dropout_rng = &r->model->dropout_rng,
                            .optim = cg_adam_config(0.0, 0.9, 0.98, 1e-9),
                            .clip_norm = 1.0,
                            .self = r,
                            .batch = mt_batch,
                            .loss = mt_loss,
                            .lr = mt_lr,
                            .evaluate = mt_evaluate,
                            .finish = mt_finish,
                            .config_json = mt_config,
                            .tok = r->d.tok,
                            .state_save = mt_state};
    return -1;
}

/* seq2seq train's checks of its flags (before any file is read). */
static int mt_check(void *self, const cg_train_opts *o, const cg_train_recipe *rec)
{
    mt_run *r = self;
    if (!o->resume && cg_cli_given(o->args, &rec->lr) && cg_cli_given(o->args, &r->factor))
        return cg_prog_fail("--lr and --factor both set the learning rate; give one");
    if (!o->resume && !cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r->preset))
        return cg_prog_fail_lib(NULL);
    return -1;
}

static void mt_cleanup(void *self)
{
    mt_run *r = self;
    cg_seq2seq_free(r->model);
    cg_mt_data_free(&r->d);
}

static const char TRAIN_NOTES[] =
    "  --tokenizer          (shared, below): one vocabulary for source and target\n"
    "  defaults: --data " DEFAULT_DATA ", --out " DEFAULT_CKPT ",\n"
    "  --tokenizer bpe --vocab-size 4000 --dropout 0.3 (the best of char and bpe at\n"
    "  equal wall time; the reference's recipe is --tokenizer char --dropout 0.1\n"
    "  --steps 5000), --steps 9430 (11 minutes of steps on 2 threads of an AMD EPYC\n"
    "  Zen 5 in fp32, then the test decoding; the progress line estimates it on\n"
    "  yours), --eval-every 1000, --label-smoothing 0.1, --norm layernorm,\n"
    "  --act relu, --norm-first false\n"
    "The final JSON line has val_nll (plain cross-entropy over non-pad validation\n"
    "targets, nats per token), val_bpc (the same in bits per target character:\n"
    "val_nll x target tokens / target characters / ln 2, each EOS one token and\n"
    "one character, so char and bpe compare) and chrF/BLEU of greedy and beam\n"
    "decoding (of the detokenised text) on the test split.\n"
    "\n";

static int cmd_train(int argc, char **argv)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 9430, 1000);
    rec.tokenizer_arg = "bpe"; /* README: char against bpe at equal wall time */
    rec.norm_first = false;
    rec.dropout = 0.3;
    rec.label_smoothing = 0.1;
    mt_run r = {.preset = "tiny",
                .max_tokens = 3000,
                .pad_to = 1,
                .warmup = 400,
                .max_len = 256,
                .valid_size = 500,
                .test_size = 1000,
                .test_limit = 1000,
                .beam = 4,
                .examples = 3,
                .factor = 0.25,
                .alpha = 0.6};
    /* seq2seq train's flags, one row each (models/train/options.h: how to add
     * one), then the rows both train commands share */
    const cg_cli_opt opts[] = {
        {"--preset", CG_CLI_STR, &r.preset, 0, 0,
         "  --preset NAME        tiny (d 128, 4 heads, 2+2 layers, d_ff 512; default),\n"
         "                       base (d 256, 8 heads, 3+3 layers, d_ff 1024) or paper\n"
         "                       (the Transformer base: d 512, 8 heads, 6+6 layers, d_ff 2048)\n",
         CG_CLI_FIXED},
        {"--enc-layers", CG_CLI_I64, &rec.shape.enc_layers, 0, 1 << 10,
         "  --enc-layers N --dec-layers N   encoder and decoder layers (from the preset)\n",
         CG_CLI_FIXED},
        {"--dec-layers", CG_CLI_I64, &rec.shape.dec_layers, 0, 1 << 10, NULL, CG_CLI_FIXED},
        {"--max-tokens", CG_CLI_I64, &r.max_tokens, 2, 1e9,
         "  --max-tokens N       padded tokens per batch (default 3000)\n", CG_CLI_FIXED},
        {"--pad-to-multiple", CG_CLI_I64, &r.pad_to, 1, 1e6,
         "  --pad-to-multiple N  pad batch lengths up to a multiple of N (at most --max-len)\n",
         CG_CLI_FIXED},
        {"--factor", CG_CLI_F64, &r.factor, 1e-12, 1e3,
         "  --factor F           Noam factor (default 0.25; --lr X sets the peak instead:\n"
         "                       factor = X * sqrt(d * warmup))\n",
         CG_CLI_FIXED},
        {"--warmup", CG_CLI_I64, &r.warmup, 1, 1e9,
         "  --warmup N           Noam warmup steps (default 400)\n", CG_CLI_FIXED},
        {"--word-dropout", CG_CLI_F64, &r.word_dropout, 0, 0.999999,
         "  --word-dropout P     zero each token's embedding in training with probability P\n",
         CG_CLI_FIXED},
        {"--max-len", CG_CLI_I64, &r.max_len, 3, 100000,
         "  --max-len N          longest sequence; longer training pairs are dropped (256)\n",
         CG_CLI_FIXED},
        {"--valid-size", CG_CLI_I64, &r.valid_size, 1, 1e9,
         "  --valid-size N       validation pairs (default 500)\n", CG_CLI_FIXED},
        {"--test-size", CG_CLI_I64, &r.test_size, 1, 1e9,
         "  --test-size N        test pairs (default 1000)\n", CG_CLI_FIXED},
        {"--test-limit", CG_CLI_I64, &r.test_limit, 0, 1e9,
         "  --test-limit N       decode only this many test pairs at the end (default\n"
         "                       1000; 0 skips test decoding)\n",
         0},
        {"--beam", CG_CLI_I64, &r.beam, 1, 1000,
         "  --beam N             beam size for the final test (default 4)\n", 0},
        {"--length-penalty", CG_CLI_F64, &r.alpha, -100, 100,
         "  --length-penalty A   alpha of ((5+len)/6)^alpha (default 0.6)\n", 0},
        {"--examples", CG_CLI_I64, &r.examples, 0, 1e9,
         "  --examples N         test examples to print (default 3)\n", 0},
        {NULL, 0, NULL, 0, 0, TRAIN_NOTES, 0},
        CG_TRAIN_RECIPE_FLAGS(&rec),
        CG_TRAIN_RUN_FLAGS(&o),
    };
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    const cg_train_program p = {"seq2seq", TRAIN_HELP, DEFAULT_CKPT, DEFAULT_DATA,
                                mt_check,  mt_setup,   mt_cleanup};
    return cg_train_command(argc, argv, &args, &o, &rec, &p, &r);
}

/* ============================================================ translate */
static const char TRANSLATE_HELP[] =
    "usage: seq2seq translate --ckpt FILE [options] [sentence ...]\n"
    "\n"
    "Translate each sentence given as an argument, or else each line of stdin;\n"
    "prints one translation per line. A sentence that cannot be translated (not\n"
    "UTF-8, or longer than the model takes) is reported on stderr and printed as an\n"
    "empty line, so that the output stays line for line with the input.\n"
    "\n"
    "options:\n" CG_TRANSLATE_HELP(DEFAULT_CKPT);

/* Can sentence i (text; why: the reason stdin's line could not be read,
 * or NULL) be translated? A sentence that cannot (a NUL byte or over
 * CG_LINE_MAX bytes, not UTF-8, longer than the model takes) is reported
 * and stands as an empty line. */
static bool translatable(const cg_seq2seq_ckpt *c, const char *text, const char *why,
                         const char *what, int64_t i)
{
    size_t bad;
    int64_t k = 0, *ids = NULL, max_len = c->model->cfg.max_len;
    if (why)
        cg_prog_warn("%s %lld: %s: not translated (an empty line stands for it)", what,
                     (long long)i + 1, why);
    else if (cg_utf8_count(text, strlen(text), &bad) < 0)
        cg_prog_warn("%s %lld is not valid UTF-8 (byte %zu): not translated (an empty line "
                     "stands for it)",
                     what, (long long)i + 1, bad + 1);
    else if (!(ids = cg_tokenizer_encode(c->tok, text, &k, NULL)))
        cg_prog_warn("%s %lld: %s: not translated (an empty line stands for it)", what,
                     (long long)i + 1, cg_last_error());
    else if (k + 1 > max_len)
        cg_prog_warn("%s %lld has %lld tokens; the model takes at most %lld: not translated "
                     "(an empty line stands for it)",
                     what, (long long)i + 1, (long long)k, (long long)max_len - 1);
    bool ok = ids && k + 1 <= max_len;
    free(ids);
    if (ok && c->tok->kind == CG_TOK_CHAR)
        cg_pair_vocab_warn_unknown(&c->tok->pv, text, PROG, what, i + 1);
    return ok;
}

/* Translate texts[0..n) (why: as translatable's, per line, or NULL) and
 * print one line each, in order. -1 or the exit code. */
static int translate_texts(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, char *const *texts,
                           char *const *why, int64_t n, const char *what)
{
    const char **good = malloc((size_t)(n ? n : 1) * sizeof *good);
    bool *skip = calloc((size_t)(n ? n : 1), sizeof *skip);
    int rc = good && skip ? -1 : cg_prog_fail("out of memory");
    int64_t ngood = 0, nbad = 0;
    for (int64_t i = 0; rc < 0 && i < n; i++) {
        skip[i] = !translatable(c, texts[i], why ? why[i] : NULL, what, i);
        nbad += skip[i];
        if (!skip[i])
            good[ngood++] = texts[i];
    }
    cg_sources s = {0};
    char **hyps = NULL;
    if (rc < 0 && (!cg_sources_encode(c->tok, good, ngood, c->model->cfg.max_len, &s) ||
                   !(hyps = cg_translate_all(c->model, c->tok, &s, (int)t->beam, t->alpha,
                                             !t->no_cache, nbad ? NULL : stdout))))
        rc = cg_prog_fail_lib(NULL);
    for (int64_t i = 0, j = 0; rc < 0 && nbad && i < n; i++) /* in order, with the empty lines */
        printf("%s\n", skip[i] ? "" : hyps[j++]);
    if (rc < 0 && nbad)
        cg_prog_warn("%lld of %lld %ss not translated", (long long)nbad, (long long)n, what);
    cg_strings_free(hyps, ngood);
    cg_sources_free(&s);
    free(good);
    free(skip);
    return rc;
}

static int cmd_translate(int argc, char **argv)
{
    cg_translate_opts t;
    cg_cli_opt opts[6];
    int np, rc = cg_prog_parse_pos(argc, argv, opts, cg_translate_cli_opts(&t, DEFAULT_CKPT, opts),
                                   TRANSLATE_HELP, &np);
    if (rc >= 0 || (rc = cg_precision_flag(t.precision, NULL)) >= 0)
        return rc;
    cg_cli_set_threads(PROG, t.threads);
    cg_precision prec;
    cg_seq2seq_ckpt c;
    /* the sentences: the arguments, else the lines of stdin */
    int64_t n = np;
    char **texts = NULL, **why = NULL; /* stdin: the reason a line could not be read, or NULL */
    if (!ckpt_load(t.ckpt, &c) ||
        !cg_decode_precision(t.precision, cg_st_metadata(c.file, "train"), t.ckpt, &prec) ||
        (np == 0 && !cg_out_check_stdout("/dev/stdin", "standard input")) ||
        !(texts = np > 0 ? argv : cg_read_lines(stdin, "stdin", &n, &why)))
        rc = cg_prog_fail_lib(NULL);
    else
        rc = translate_texts(&c, &t, texts, why, n, np > 0 ? "sentence" : "line");
    if (np == 0 && texts) {
        cg_strings_free(texts, n);
        for (int64_t i = 0; i < n; i++)
            free(why[i]);
        free(why);
    }
    cg_seq2seq_ckpt_free(&c);
    return rc < 0 ? 0 : rc;
}

/* ============================================================ eval */
static const char EVAL_HELP[] =
    "usage: seq2seq eval --ckpt FILE [options]\n"
    "\n"
    "Corpus BLEU and chrF (sacreBLEU defaults) of the model's translations of the\n"
    "test split (or the validation split), as one JSON line.\n"
    "\n"
    "options:\n"
    "  --data FILE          pairs (default: the file the checkpoint was trained on)\n"
    "  --split S            test (default) or valid: the validation pairs, to tune\n"
    "                       decoding (--beam, --length-penalty) without the test set\n"
    "  --test-limit N       decode only the first N pairs of the split (default: "
    "all)\n" CG_TRANSLATE_HELP(DEFAULT_CKPT);

/* eval's scores of c on the split (valid, else test) of its data (the
 * file data, else the one it recorded), as one JSON line: -1 or the exit
 * code. */
static int eval_split(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, cg_mt_data *ds,
                      const char *data, bool valid, int64_t limit)
{
    const char *ck = t->ckpt, *tj = cg_st_metadata(c->file, "train");
    cg_precision prec; /* the products as trained, or as --precision says */
    if (!cg_decode_precision(t->precision, tj, ck, &prec) ||
        !cg_mt_data_load_ckpt(ds, tj, ck, data, DEFAULT_DATA))
        return cg_prog_fail_lib(NULL);
    const int64_t *idx = valid ? ds->split.valid : ds->split.test;
    int64_t have = valid ? ds->split.n_valid : ds->split.n_test;
    int64_t nt = limit > 0 && limit < have ? limit : have;
    char *dp = cg_train_data_path(tj, data, DEFAULT_DATA); /* for the message */
    bool fits =
        cg_out_check_stdout(dp, "--data") &&
        cg_mt_check_split(ds, c->tok, valid, nt, c->model->cfg.max_len, dp ? dp : "the data");
    free(dp);
    if (!fits)
        return cg_prog_fail_lib(NULL);
    if (c->tok->kind == CG_TOK_CHAR)
        cg_pairs_warn_unknown(&ds->pairs, idx, nt, &c->tok->pv, PROG,
                              valid ? "the validation pairs" : "the test pairs");
    double bleu, chrf, t0 = cg_now();
    if (!cg_translate_score(c->model, c->tok, &ds->pairs, idx, nt, (int)t->beam, t->alpha,
                            !t->no_cache, &bleu, &chrf, NULL))
        return cg_prog_fail_lib(NULL);
    double dt = cg_now() - t0;
    cJSON *j = cJSON_CreateObject();
    cg_json_put_num(j, "bleu", "%.2f", bleu);
    cg_json_put_num(j, "chrf", "%.2f", chrf);
    cg_json_put_int(j, "beam", t->beam);
    cg_json_put_num(j, "length_penalty", "%g", t->alpha);
    cg_json_put_str(j, "split", valid ? "valid" : "test");
    cg_json_put_int(j, valid ? "valid_pairs" : "test_pairs", nt);
    cg_json_put_num(j, "decode_s", "%.1f", dt);
    cg_json_put_int(j, "step", c->step);
    cg_json_put_str(j, "precision", cg_precision_name(prec));
    int rc = cg_json_print_line(stdout, j) ? -1 : cg_prog_fail_lib(NULL);
    cJSON_Delete(j);
    return rc;
}

static int cmd_eval(int argc, char **argv)
{
    const char *data = NULL, *split = "test";
    int64_t limit = -1;
    cg_translate_opts t;
    cg_cli_opt opts[9] = {
        {"--data", CG_CLI_STR, &data, 0, 0, NULL, 0},
        {"--test-limit", CG_CLI_I64, &limit, 1, 1e9, NULL, 0},
        {"--split", CG_CLI_STR, &split, 0, 0, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, 3 + cg_translate_cli_opts(&t, DEFAULT_CKPT, opts + 3),
                           EVAL_HELP);
    if (rc >= 0 || (rc = cg_precision_flag(t.precision, NULL)) >= 0)
        return rc;
    bool valid = strcmp(split, "valid") == 0;
    if (!valid && strcmp(split, "test") != 0) {
        fprintf(stderr, "%s: --split must be test or valid (got '%s')\n", PROG, split);
        return CG_EXIT_USAGE;
    }
    cg_cli_set_threads(PROG, t.threads);
    cg_seq2seq_ckpt c;
    cg_mt_data ds = {0};
    rc = ckpt_load(t.ckpt, &c) ? eval_split(&c, &t, &ds, data, valid, limit)
                               : cg_prog_fail_lib(NULL);
    cg_mt_data_free(&ds);
    cg_seq2seq_ckpt_free(&c);
    return rc < 0 ? 0 : rc;
}

/* ============================================================ attention */
static const char ATTENTION_HELP[] =
    "usage: seq2seq attention --ckpt FILE --text S [options]\n"
    "\n"
    "Translate S greedily (or take --target) and draw the attention weights of\n"
    "that pass as PNG heatmaps, one panel per layer (rows) and head (columns),\n"
    "tokens (characters or subwords) on the axes: DIR/encoder_self.png, DIR/decoder_self.png,\n"
    "DIR/cross.png (rows: decoder inputs, columns: source).\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --text S             source sentence (required)\n"
    "  --target S           decoder input instead of the greedy translation\n"
    "  --out DIR            output directory (default attention)\n"
    "  --no-cache           greedy translation without the key/value cache\n"
    "  --force              overwrite existing pictures (refused otherwise)\n"
    "  --threads N          threads (default 2)\n";

static int cmd_attention(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *text = NULL, *target = NULL, *dir = "attention";
    int64_t threads = 2;
    bool no_cache = false, force = false;
    const cg_cli_opt opts[] = {
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL, 0},
        {"--force", CG_CLI_SWITCH, &force, 0, 0, NULL, 0},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL, 0},
        {"--text", CG_CLI_STR, &text, 0, 0, NULL, 0},
        {"--target", CG_CLI_STR, &target, 0, 0, NULL, 0},
        {"--out", CG_CLI_STR, &dir, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), ATTENTION_HELP);
    if (rc >= 0)
        return rc;
    if (!text)
        return cg_prog_fail("attention needs --text (try --help)");
    /* the pictures: never over a file without --force, never the checkpoint */
    const char *pics[] = {"encoder_self.png", "decoder_self.png", "cross.png"};
    for (int i = 0; i < 3; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, pics[i]);
        if (!cg_out_picture_check(path, force, ck, "--ckpt"))
            return cg_prog_fail_lib(NULL);
    }
    cg_cli_set_threads(PROG, threads);
    cg_seq2seq_ckpt c;
    rc = ckpt_load(ck, &c) && cg_seq2seq_attention_of_text(c.model, c.tok, text, target, "--target",
                                                           !no_cache, dir, stdout, stderr)
             ? 0
             : cg_prog_fail_lib(NULL);
    cg_seq2seq_ckpt_free(&c);
    return rc;
}

/* ============================================================ average */
/* Does the checkpoint at path load as a translator? (average's check) */
static bool mt_loads(const char *path)
{
    cg_seq2seq_ckpt c;
    bool ok = cg_seq2seq_ckpt_load(path, &c);
    cg_seq2seq_ckpt_free(&c);
    return ok;
}

/* ============================================================ main */
static const char MAIN_HELP[] =
    "usage: seq2seq <command> [options]   (seq2seq <command> --help for each)\n"
    "\n"
    "A Transformer translator over characters or BPE subwords (English -> German by\n"
    "default).\n"
    "\n"
    "commands:\n"
    "  train      train a model on tab-separated sentence pairs\n"
    "  translate  translate sentences (arguments or stdin lines)\n"
    "  eval       BLEU and chrF on the test split, one JSON line\n"
    "  attention  PNG heatmaps of every attention layer and head for one sentence\n"
    "  average    average the weights of checkpoints (e.g. those of train --keep-last)\n"
    "Exit status: 0 done, 1 failed, 2 bad command line.\n";

int main(int argc, char **argv)
{
    static const cg_prog_command cmds[] = {{"train", cmd_train},
                                           {"translate", cmd_translate},
                                           {"eval", cmd_eval},
                                           {"attention", cmd_attention}};
    static const cg_program p = {
        PROG, MAIN_HELP, cmds, 4, {"seq2seq", cg_seq2seq_config_same_arch, mt_loads}};
    return cg_program_main(argc, argv, &p);
}
