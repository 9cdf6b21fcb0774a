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
#include "models/train/average.h"
#include "models/train/trainer.h"
#include "models/seq2seq/translate.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "seq2seq"
#define DEFAULT_DATA "data/en_de_ding.tsv"
#define DEFAULT_CKPT "seq2seq.safetensors"

/* One error line, then exit 1 (every MPI rank). */
#define die(...) cg_prog_die(CG_EXIT_FAIL, __VA_ARGS__)

/* ------------------------------------------------------------ presets */
#define PRESETS cg_seq2seq_presets

/* ------------------------------------------------------------ checkpoints */
static void ckpt_load(const char *path, cg_seq2seq_ckpt *c)
{
    if (!cg_out_check_stdout(path, "--ckpt") || !cg_seq2seq_ckpt_load(path, c))
        cg_prog_die_lib(NULL);
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
        cg_prog_die_lib(NULL);
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
        cg_prog_die_lib(NULL);
    fprintf(stderr, "valid nll %.4f, with mismatched sources %.4f\n", val_nll, wrong_nll);

    int64_t nt = r->test_limit < sp->n_test ? r->test_limit : sp->n_test;
    cg_translate_test_result tr = {NAN, NAN, NAN, NAN, 0};
    if (nt > 0) {
        fprintf(stderr, "decoding %lld test pairs (greedy, then beam %lld)...\n", (long long)nt,
                (long long)r->beam);
        if (!cg_translate_test(r->model, r->d.tok, P, sp->test, nt, (int)r->beam, r->alpha,
                               r->examples, stdout, &tr))
            cg_prog_die_lib(NULL);
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
static const cg_tokenizer *mt_tokenizer(void *self) { return ((mt_run *)self)->d.tok; }

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

/* Data, vocabulary, model, batches and batch order (fresh or resumed). */
static void mt_setup(mt_run *r, cg_train_opts *o, cg_train_recipe *rec, cg_trainer *t)
{
    cg_seq2seq_ckpt ck = {0};
    if (o->resume) {
        ckpt_load(o->resume, &ck);
        if (!mt_state(r, NULL))
            cg_prog_die_lib(NULL);
    }
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r->preset);
    if (!pr)
        cg_prog_die_lib(NULL);
    if (o->seed > 0xffffffffULL)
        die("--seed must be below 2^32 (numpy RandomState)");
    cg_data_id id;
    if (!cg_mt_data_load(&r->d, o->data, DEFAULT_DATA, r->valid_size, r->test_size, &id) ||
        !cg_trainer_set_data(t, &id) || /* resuming: the checkpoint's data */
        !cg_mt_data_prepare(&r->d, o->data, r->max_len, r->max_tokens, rec->tokenizer,
                            rec->vocab_size, o->resume ? &ck.tok : NULL, o->resume, PROG) ||
        /* what decoding at the end and every rank's share need, known now */
        !cg_mt_check_split(&r->d, r->d.tok, false, r->test_limit, r->max_len, o->data) ||
        !cg_mt_check_ranks(&r->d, r->max_tokens, o->resume != NULL))
        cg_prog_die_lib(NULL);
    if (o->resume) {
        r->model = ck.model;
        ck.model = NULL;
        cg_module_train(CG_MODULE(r->model), true);
    } else {
        cg_seq2seq_config cfg = cg_seq2seq_config_default();
        cfg.vocab = cg_tokenizer_vocab_size(r->d.tok);
        cfg.loss_chunk = cg_train_loss_chunk(cfg.vocab);
        cfg.norm = CG_NORM_LAYERNORM;
        cfg.act = CG_ACT_RELU;
        if (!cg_train_shape(o->args, pr, rec, &cfg.norm, &cfg.act))
            cg_prog_die_lib(NULL);
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
            cg_prog_die_lib(NULL);
        if (cg_cli_given(o->args, &rec->lr)) /* the Noam peak (at step warmup) is X */
            r->factor = rec->lr * sqrt((double)cfg.d * (double)r->warmup);
        r->model = cg_seq2seq_new(&cfg, o->seed);
        if (!r->model)
            cg_prog_die_lib("model");
    }
    cg_seq2seq_ckpt_free(&ck);
    r->d.pad_to = r->pad_to;
    r->d.pad_limit = r->max_len;
    cg_seq2seq_set_recompute(r->model, rec->recompute);
    if (!cg_mt_data_order(&r->d, (uint32_t)o->seed, (int)o->grad_accum, o->resume != NULL, t->start,
                          o->resume))
        cg_prog_die_lib(NULL);
    fprintf(stderr,
            "train %lld pairs in %lld batches, valid %lld, test %lld, %s vocab %lld, params %lld, "
            "precision %s%s\n",
            (long long)r->d.n_train, (long long)r->d.batches.n_batches,
            (long long)r->d.split.n_valid, (long long)r->d.split.n_test,
            cg_tokenizer_kind_name(r->d.tok->kind), (long long)r->model->cfg.vocab,
            (long long)cg_module_num_params(CG_MODULE(r->model)), cg_precision_name(o->precision),
            o->resume ? " (resumed)" : "");
}

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
        {NULL, 0, NULL, 0, 0,
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
         "\n",
         0},
        CG_TRAIN_RECIPE_FLAGS(&rec),
        CG_TRAIN_RUN_FLAGS(&o),
    };
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    int rc = cg_train_parse(argc, argv, &args, TRAIN_HELP, &o, &rec);
    if (rc >= 0)
        return rc;
    if (!o.resume && cg_cli_given(&args, &rec.lr) && cg_cli_given(&args, &r.factor))
        die("--lr and --factor both set the learning rate; give one");
    if (!o.resume && !cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r.preset))
        cg_prog_die_lib(NULL);
    if (!o.data)
        o.data = DEFAULT_DATA;
    cg_trainer t;
    rc = cg_trainer_begin(&t, &o, "seq2seq", DEFAULT_CKPT);
    if (rc < 0) {
        r.t = &t;
        mt_setup(&r, &o, &rec, &t);
        cg_trainer_model m = {.name = "seq2seq",
                              .plot_title = "seq2seq: label-smoothed loss",
                              .module = CG_MODULE(r.model),
                              .dropout_rng = &r.model->dropout_rng,
                              .optim = cg_adam_config(0.0, 0.9, 0.98, 1e-9),
                              .clip_norm = 1.0,
                              .self = &r,
                              .batch = mt_batch,
                              .loss = mt_loss,
                              .lr = mt_lr,
                              .evaluate = mt_evaluate,
                              .finish = mt_finish,
                              .config_json = mt_config,
                              .tokenizer = mt_tokenizer,
                              .state_save = mt_state};
        rc = cg_trainer_run(&t, &m);
    }
    cg_trainer_end(&t);
    cg_seq2seq_free(r.model);
    cg_mt_data_free(&r.d);
    return rc;
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

static int cmd_translate(int argc, char **argv)
{
    cg_translate_opts t;
    cg_cli_opt opts[6];
    int np, prc = cg_prog_parse_pos(argc, argv, opts, cg_translate_cli_opts(&t, DEFAULT_CKPT, opts),
                                    TRANSLATE_HELP, &np);
    if (prc >= 0 || (prc = cg_precision_flag(t.precision, NULL)) >= 0)
        return prc;
    cg_cli_set_threads(PROG, t.threads);
    cg_precision prec;
    cg_seq2seq_ckpt c;
    ckpt_load(t.ckpt, &c);
    if (!cg_decode_precision(t.precision, cg_st_metadata(c.file, "train"), t.ckpt, &prec))
        cg_prog_die_lib(NULL);
    /* the sentences: the arguments, else the lines of stdin */
    int64_t n = np;
    char **why = NULL; /* stdin: the reason a line could not be read, or NULL */
    if (np == 0 && !cg_out_check_stdout("/dev/stdin", "standard input"))
        cg_prog_die_lib(NULL);
    char **texts = np > 0 ? argv : cg_read_lines(stdin, "stdin", &n, &why);
    if (!texts)
        cg_prog_die_lib(NULL);
    /* a sentence that cannot be translated (a NUL byte or over CG_LINE_MAX
     * bytes, not UTF-8, longer than the model takes) is reported and stands
     * as an empty line; the others are translated */
    const char *what = np > 0 ? "sentence" : "line";
    const char **good = malloc((size_t)(n ? n : 1) * sizeof *good);
    bool *skip = calloc((size_t)(n ? n : 1), sizeof *skip);
    if (!good || !skip)
        die("out of memory");
    int64_t ngood = 0, nbad = 0, max_len = c.model->cfg.max_len;
    for (int64_t i = 0; i < n; i++) {
        size_t bad;
        int64_t k = 0, *ids = NULL;
        if (why && why[i])
            cg_prog_warn("%s %lld: %s: not translated (an empty line stands for it)", what,
                         (long long)i + 1, why[i]);
        else if (cg_utf8_count(texts[i], strlen(texts[i]), &bad) < 0)
            cg_prog_warn("%s %lld is not valid UTF-8 (byte %zu): not translated (an empty line "
                         "stands for it)",
                         what, (long long)i + 1, bad + 1);
        else if (!(ids = cg_tokenizer_encode(c.tok, texts[i], &k, NULL)))
            cg_prog_warn("%s %lld: %s: not translated (an empty line stands for it)", what,
                         (long long)i + 1, cg_last_error());
        else if (k + 1 > max_len)
            cg_prog_warn("%s %lld has %lld tokens; the model takes at most %lld: not translated "
                         "(an empty line stands for it)",
                         what, (long long)i + 1, (long long)k, (long long)max_len - 1);
        skip[i] = !ids || k + 1 > max_len;
        free(ids);
        nbad += skip[i];
        if (skip[i])
            continue;
        if (c.tok->kind == CG_TOK_CHAR)
            cg_pair_vocab_warn_unknown(&c.tok->pv, texts[i], PROG, what, i + 1);
        good[ngood++] = texts[i];
    }
    cg_sources s;
    char **hyps = NULL;
    if (!cg_sources_encode(c.tok, good, ngood, max_len, &s) ||
        !(hyps = cg_translate_all(c.model, c.tok, &s, (int)t.beam, t.alpha, !t.no_cache,
                                  nbad ? NULL : stdout)))
        cg_prog_die_lib(NULL);
    for (int64_t i = 0, j = 0; nbad && i < n; i++) /* in order, with the empty lines */
        printf("%s\n", skip[i] ? "" : hyps[j++]);
    if (nbad)
        cg_prog_warn("%lld of %lld %ss not translated", (long long)nbad, (long long)n, what);
    cg_strings_free(hyps, ngood);
    cg_sources_free(&s);
    free(good);
    free(skip);
    if (np == 0) {
        cg_strings_free(texts, n);
        for (int64_t i = 0; i < n; i++)
            free(why[i]);
        free(why);
    }
    cg_seq2seq_ckpt_free(&c);
    return 0;
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
    int prc = cg_prog_parse(argc, argv, opts, 3 + cg_translate_cli_opts(&t, DEFAULT_CKPT, opts + 3),
                            EVAL_HELP);
    if (prc >= 0 || (prc = cg_precision_flag(t.precision, NULL)) >= 0)
        return prc;
    bool valid = strcmp(split, "valid") == 0;
    if (!valid && strcmp(split, "test") != 0) {
        fprintf(stderr, "%s: --split must be test or valid (got '%s')\n", PROG, split);
        return 2;
    }
    cg_cli_set_threads(PROG, t.threads);
    const char *ck = t.ckpt;
    cg_seq2seq_ckpt c;
    ckpt_load(ck, &c);
    const char *tj = cg_st_metadata(c.file, "train");
    cg_precision prec; /* the products as trained, or as --precision says */
    cg_mt_data ds = {0};
    if (!cg_decode_precision(t.precision, tj, ck, &prec) ||
        !cg_mt_data_load_ckpt(&ds, tj, ck, data, DEFAULT_DATA))
        cg_prog_die_lib(NULL);
    const int64_t *idx = valid ? ds.split.valid : ds.split.test;
    int64_t have = valid ? ds.split.n_valid : ds.split.n_test;
    int64_t nt = limit > 0 && limit < have ? limit : have;
    char *dp = cg_train_data_path(tj, data, DEFAULT_DATA); /* for the message */
    bool fits =
        cg_out_check_stdout(dp, "--data") &&
        cg_mt_check_split(&ds, c.tok, valid, nt, c.model->cfg.max_len, dp ? dp : "the data");
    free(dp);
    if (!fits)
        cg_prog_die_lib(NULL);
    if (c.tok->kind == CG_TOK_CHAR)
        cg_pairs_warn_unknown(&ds.pairs, idx, nt, &c.tok->pv, PROG,
                              valid ? "the validation pairs" : "the test pairs");
    double bleu, chrf, t0 = cg_now();
    if (!cg_translate_score(c.model, c.tok, &ds.pairs, idx, nt, (int)t.beam, t.alpha, !t.no_cache,
                            &bleu, &chrf, NULL))
        cg_prog_die_lib(NULL);
    double dt = cg_now() - t0;
    cJSON *j = cJSON_CreateObject();
    cg_json_put_num(j, "bleu", "%.2f", bleu);
    cg_json_put_num(j, "chrf", "%.2f", chrf);
    cg_json_put_int(j, "beam", t.beam);
    cg_json_put_num(j, "length_penalty", "%g", t.alpha);
    cg_json_put_str(j, "split", split);
    cg_json_put_int(j, valid ? "valid_pairs" : "test_pairs", nt);
    cg_json_put_num(j, "decode_s", "%.1f", dt);
    cg_json_put_int(j, "step", c.step);
    cg_json_put_str(j, "precision", cg_precision_name(prec));
    if (!cg_json_print_line(stdout, j))
        cg_prog_die_lib(NULL);
    cJSON_Delete(j);
    cg_mt_data_free(&ds);
    cg_seq2seq_ckpt_free(&c);
    return 0;
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
    int prc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), ATTENTION_HELP);
    if (prc >= 0)
        return prc;
    if (!text)
        die("attention needs --text (try --help)");
    /* the pictures: never over a file without --force, never the checkpoint */
    const char *pics[] = {"encoder_self.png", "decoder_self.png", "cross.png"};
    for (int i = 0; i < 3; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, pics[i]);
        if (!cg_out_picture_check(path, force, ck, "--ckpt"))
            cg_prog_die_lib(NULL);
    }
    cg_cli_set_threads(PROG, threads);
    cg_seq2seq_ckpt c;
    ckpt_load(ck, &c);
    if (!cg_seq2seq_attention_of_text(c.model, c.tok, text, target, "--target", !no_cache, dir,
                                      stdout, stderr))
        cg_prog_die_lib(NULL);
    cg_seq2seq_ckpt_free(&c);
    return 0;
}

/* ============================================================ average */
static bool mt_loads(const char *path)
{
    cg_seq2seq_ckpt c;
    bool ok = cg_seq2seq_ckpt_load(path, &c);
    cg_seq2seq_ckpt_free(&c);
    return ok;
}

static int cmd_average(int argc, char **argv)
{
    const cg_avg_model m = {"seq2seq", cg_seq2seq_config_same_arch, mt_loads};
    return cg_average_command(argc, argv, &m); /* models/train/average.h */
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
    const cg_prog_command cmds[] = {{"train", cmd_train},
                                    {"translate", cmd_translate},
                                    {"eval", cmd_eval},
                                    {"attention", cmd_attention},
                                    {"average", cmd_average}};
    return cg_prog_main(argc, argv, PROG, MAIN_HELP, cmds, 5);
}
