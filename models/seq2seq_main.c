/* seq2seq: train and use the encoder-decoder translator over characters or
 * BPE subwords (models/tokenizer.h).
 *
 *   seq2seq train      [--data F --preset tiny|base --steps N ...]
 *   seq2seq translate  --ckpt F [--beam N --length-penalty A --no-cache] [sentences...]
 *   seq2seq eval       --ckpt F [--beam N] [--no-cache]
 *   seq2seq attention  --ckpt F --text S [--out DIR]
 *
 * The training recipe is shared/reference/train_seq2seq.py (see its
 * docstring); the data split and batch order use numpy's RandomState
 * bit-exactly (models/pairs.h). The loop is models/trainer.h's, as are the
 * exit codes and the one-line errors "seq2seq: error: ...". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "models/beam.h"
#include "models/cli.h"
#include "models/config_json.h"
#include "models/data.h"
#include "models/dist.h"
#include "models/metrics.h"
#include "models/pairs.h"
#include "models/plot.h"
#include "models/seq2seq.h"
#include "models/checkpoint.h"
#include "models/tokenizer.h"
#include "models/trainer.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "seq2seq"
#define DEFAULT_DATA "data/en_de_ding.tsv"
#define DEFAULT_CKPT "seq2seq.safetensors"

/* One error line, then exit 1 (every MPI rank). */
#define die(...) cg_prog_die(CG_EXIT_FAIL, __VA_ARGS__)

static void die_lib(const char *what)
{
    const char *e = cg_last_error();
    if (what)
        die("%s: %s", what, e && *e ? e : "unknown error");
    die("%s", e && *e ? e : "unknown error");
}

/* ------------------------------------------------------------ presets */
static const cg_train_preset PRESETS[] = {{"tiny", 128, 4, 0, 2, 2, 512, 0, 0},
                                           {"base", 256, 8, 0, 3, 3, 1024, 0, 0}};

/* ------------------------------------------------------------ checkpoints */
/* models/checkpoint.h: the layout shared with charlm. */
typedef cg_seq2seq_ckpt ckpt;

static void ckpt_load(const char *path, ckpt *c)
{
    if (!cg_seq2seq_ckpt_load(path, c))
        die_lib(NULL);
}

static void ckpt_free(ckpt *c) { cg_seq2seq_ckpt_free(c); }

/* ------------------------------------------------------------ flags */
/* Parse flags; print help and exit 0 on --help, exit 2 on a bad flag. */
static void parse_flags(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help)
{
    int rc = cg_prog_parse(argc, argv, opts, n, help);
    if (rc >= 0)
        exit(rc);
}

/* Split argv into flags (with their values) and positional arguments: an
 * argument starting with "--" is a flag (a value follows unless it is a
 * switch or has "="); "--" ends the flags. Arrays must hold argc entries. */
static void split_args(int argc, char **argv, const cg_cli_opt *opts, int n, char **flags,
                       int *nf, char **pos, int *np)
{
    *nf = *np = 0;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strncmp(a, "--", 2) == 0 || strcmp(a, "-h") == 0)) {
            flags[(*nf)++] = argv[i];
            if (strchr(a, '='))
                continue;
            for (int j = 0; j < n; j++)
                if (strcmp(opts[j].name, a) == 0 && opts[j].kind != CG_CLI_SWITCH &&
                    i + 1 < argc) {
                    flags[(*nf)++] = argv[++i];
                    break;
                }
            continue;
        }
        pos[(*np)++] = argv[i];
    }
}

/* ------------------------------------------------------------ evaluation */
/* The tokenizer as a batch encoder (models/pairs.h cg_batch_make_with). */
static int64_t *tok_encode(const void *tok, const char *s, int64_t *n, int64_t *n_unk)
{
    return cg_tokenizer_encode(tok, s, n, n_unk);
}

/* (label-smoothed loss, cross-entropy) averaged over non-pad targets;
 * *ntok_out (may be NULL): the number of those targets. */
static void valid_loss(cg_seq2seq *m, const cg_pairs *p, const cg_batches *bs,
                       const cg_tokenizer *tok, double *ls_out, double *nll_out,
                       double *ntok_out)
{
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double ls = 0, nll = 0, ntok = 0;
    for (int64_t b = 0; b < bs->n_batches; b++) {
        cg_batch bt;
        if (!cg_batch_make_with(p, bs->idx + bs->start[b], bs->start[b + 1] - bs->start[b],
                                tok_encode, tok, &bt))
            die_lib("validation batch");
        cg_tensor *logits = cg_seq2seq_forward(m, bt.src, bt.B, bt.S, bt.tgt_in, bt.T);
        cg_tensor *l1 = cg_seq2seq_loss(m, logits, bt.tgt_out);
        cg_tensor *l2 = cg_cross_entropy(logits, bt.tgt_out, bt.B * bt.T, CG_PAD, 0.0f);
        if (!l1 || !l2)
            die_lib("validation");
        double n = (double)bt.n_tokens;
        ls += cg_item(l1) * n;
        nll += cg_item(l2) * n;
        ntok += n;
        cg_release_all(3, logits, l1, l2);
        cg_batch_free(&bt);
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), true);
    *ls_out = ntok > 0 ? ls / ntok : NAN;
    *nll_out = ntok > 0 ? nll / ntok : NAN;
    if (ntok_out)
        *ntok_out = ntok;
}

/* Encode sources; returns ids per source (malloc'd) without EOS. */
typedef struct {
    int64_t **ids;
    int64_t *len;
    int64_t n;
} sources;

static void sources_free(sources *s)
{
    for (int64_t i = 0; i < s->n; i++)
        free(s->ids[i]);
    free(s->ids);
    free(s->len);
    memset(s, 0, sizeof *s);
}

static void sources_encode(const cg_tokenizer *tok, const char *const *texts, int64_t n,
                           int64_t max_len, sources *out)
{
    out->n = 0;
    out->ids = calloc((size_t)(n ? n : 1), sizeof *out->ids);
    out->len = calloc((size_t)(n ? n : 1), sizeof *out->len);
    if (!out->ids || !out->len)
        die("out of memory");
    for (int64_t i = 0; i < n; i++) {
        int64_t k;
        int64_t *ids = cg_tokenizer_encode(tok, texts[i], &k, NULL);
        if (!ids)
            die("sentence %lld: %s", (long long)i + 1, cg_last_error());
        if (k + 1 > max_len)
            die("sentence %lld has %lld tokens; the model takes at most %lld", (long long)i + 1,
                (long long)k, (long long)max_len - 1);
        out->ids[i] = ids;
        out->len[i] = k;
        out->n++;
    }
}

/* Decode every source: beam <= 1 greedy in chunks of 50 (reference
 * `greedy`), else beam search per sentence. Each output is cut at
 * len(source) + 50 tokens (and at the model's max_len). Returns malloc'd
 * UTF-8 strings; echo (may be NULL) gets each line as soon as it is
 * decoded. use_cache: decode with the key/value cache (else recompute). */
static char **decode_all(cg_seq2seq *m, const cg_tokenizer *tok, const sources *src, int beam,
                         double alpha, bool use_cache, FILE *echo)
{
    cg_module_train(CG_MODULE(m), false);
    char **out = calloc((size_t)(src->n ? src->n : 1), sizeof *out);
    if (!out)
        die("out of memory");
    const int64_t maxT = m->cfg.max_len;
    if (beam <= 1) {
        const int64_t chunk = 50;
        for (int64_t c0 = 0; c0 < src->n; c0 += chunk) {
            int64_t B = src->n - c0 < chunk ? src->n - c0 : chunk, S = 0;
            for (int64_t i = 0; i < B; i++)
                if (src->len[c0 + i] + 1 > S)
                    S = src->len[c0 + i] + 1;
            int64_t steps = S - 1 + 50;
            if (steps > maxT)
                steps = maxT;
            int64_t *ids = calloc((size_t)(B * S), sizeof *ids);
            int64_t *res = malloc((size_t)(B * steps) * sizeof *res);
            int64_t *lens = malloc((size_t)B * sizeof *lens);
            if (!ids || !res || !lens)
                die("out of memory");
            for (int64_t i = 0; i < B; i++) {
                memcpy(ids + i * S, src->ids[c0 + i], (size_t)src->len[c0 + i] * sizeof *ids);
                ids[i * S + src->len[c0 + i]] = CG_EOS;
            }
            if (!cg_greedy_decode(m, ids, B, S, steps, res, lens, use_cache))
                die_lib("greedy decoding");
            for (int64_t i = 0; i < B; i++) {
                int64_t lim = src->len[c0 + i] + 50, L = lens[i] < lim ? lens[i] : lim;
                out[c0 + i] = cg_tokenizer_decode(tok, res + i * steps, L);
                if (!out[c0 + i])
                    die_lib(NULL);
                if (echo)
                    fprintf(echo, "%s\n", out[c0 + i]), fflush(echo);
            }
            free(ids);
            free(res);
            free(lens);
        }
    } else {
        for (int64_t i = 0; i < src->n; i++) {
            int64_t S = src->len[i] + 1;
            int64_t *ids = malloc((size_t)S * sizeof *ids);
            if (!ids)
                die("out of memory");
            memcpy(ids, src->ids[i], (size_t)src->len[i] * sizeof *ids);
            ids[S - 1] = CG_EOS;
            int64_t steps = src->len[i] + 50, *res = NULL, L = 0;
            if (steps > maxT)
                steps = maxT;
            if (!cg_beam_search(m, ids, S, beam, alpha, steps, &res, &L, NULL, NULL, use_cache))
                die_lib("beam search");
            out[i] = cg_tokenizer_decode(tok, res, L);
            if (!out[i])
                die_lib(NULL);
            if (echo)
                fprintf(echo, "%s\n", out[i]), fflush(echo);
            free(res);
            free(ids);
        }
    }
    return out;
}

static void strings_free(char **s, int64_t n)
{
    if (!s)
        return;
    for (int64_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* ------------------------------------------------------------ data set */
typedef struct {
    cg_pairs pairs;
    cg_pair_split split;
} dataset;

/* Read the pairs once (id: the identity of the bytes read) and split them. */
static void dataset_load(const char *path, int64_t n_valid, int64_t n_test, dataset *d,
                         cg_data_id *id)
{
    if (!cg_pairs_read(path, &d->pairs, id)) {
        cg_data_default_hint(path, DEFAULT_DATA);
        die_lib(NULL);
    }
    if (!cg_pairs_split(&d->pairs, n_valid, n_test, &d->split))
        die("%s: %s", path, cg_last_error());
}

static void dataset_free(dataset *d)
{
    cg_pairs_free(&d->pairs);
    cg_pair_split_free(&d->split);
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
    "seq2seq's own options and defaults:\n"
    "  --preset NAME        tiny (d 128, 4 heads, 2+2 layers, d_ff 512; default) or\n"
    "                       base (d 256, 8 heads, 3+3 layers, d_ff 1024)\n"
    "  --enc-layers N --dec-layers N   encoder and decoder layers (from the preset)\n"
    "  --max-tokens N       padded tokens per batch (default 3000)\n"
    "  --factor F           Noam factor (default 0.25; --lr X sets the peak instead:\n"
    "                       factor = X * sqrt(d * warmup))\n"
    "  --warmup N           Noam warmup steps (default 400)\n"
    "  --max-len N          longest sequence; longer training pairs are dropped (256)\n"
    "  --valid-size N       validation pairs (default 500)\n"
    "  --test-size N        test pairs (default 1000)\n"
    "  --test-limit N       decode only this many test pairs at the end (default\n"
    "                       1000; 0 skips test decoding)\n"
    "  --beam N             beam size for the final test (default 4)\n"
    "  --length-penalty A   alpha of ((5+len)/6)^alpha (default 0.6)\n"
    "  --examples N         test examples to print (default 3)\n"
    "  --tokenizer          (shared, below): one vocabulary for source and target\n"
    "  defaults: --data " DEFAULT_DATA ", --out " DEFAULT_CKPT ",\n"
    "  --steps 16000 (about 15 minutes on 2 threads of the development machine; the\n"
    "  reference's recipe is 5000), --eval-every 1000, --dropout 0.1,\n"
    "  --label-smoothing 0.1, --norm layernorm, --act relu, --norm-first false\n"
    "The final JSON line has val_nll (plain cross-entropy over non-pad validation\n"
    "targets, nats per token), val_bpc (the same in bits per target character:\n"
    "val_nll x target tokens / target characters / ln 2, each EOS one token and\n"
    "one character, so char and bpe compare) and chrF/BLEU of greedy and beam\n"
    "decoding (of the detokenised text) on the test split.\n"
    "\n";

/* The translator as the trainer sees it. */
typedef struct {
    const cg_trainer *t;
    const char *preset;
    int64_t max_tokens, warmup, max_len, valid_size, test_size, test_limit, beam, examples;
    double factor, alpha;
    dataset ds;
    int64_t n_train;
    cg_tokenizer *tok;
    double valid_chars;      /* validation target characters, an EOS each */
    cg_seq2seq *model;
    cg_batches batches, vbatches;
    cg_mt19937 order;
    int64_t epoch, pos, *perm;
    cg_batch *bt; /* grad_accum micro-batches */
    int n_bt;
} mt_run;

static bool mt_batch(void *self, int k, double *weight, double *tokens)
{
    mt_run *r = self;
    if (r->pos >= r->batches.n_batches) {
        r->epoch++;
        cg_mt_permutation(&r->order, r->batches.n_batches, r->perm);
        r->pos = 0;
    }
    int64_t bi = r->perm[r->pos++];
    int64_t nb = r->batches.start[bi + 1] - r->batches.start[bi], b0, b1;
    if (!cg_dist_share(nb, &b0, &b1)) {
        cg_set_error("a batch of %lld pairs cannot be split over %d ranks (raise --max-tokens)",
                     (long long)nb, cg_dist_size());
        return false;
    }
    cg_batch_free(&r->bt[k]);
    if (!cg_batch_make_with(&r->ds.pairs, r->batches.idx + r->batches.start[bi] + b0, b1 - b0,
                            tok_encode, r->tok, &r->bt[k]))
        return false;
    const cg_batch *b = &r->bt[k];
    int64_t ntok = b->n_tokens;
    for (int64_t i = 0; i < b->B * b->S; i++)
        ntok += b->src[i] != CG_PAD;
    *weight = (double)b->n_tokens;
    *tokens = (double)ntok;
    return true;
}

static cg_tensor *mt_loss(void *self, int k)
{
    mt_run *r = self;
    const cg_batch *b = &r->bt[k];
    cg_tensor *logits = cg_seq2seq_forward(r->model, b->src, b->B, b->S, b->tgt_in, b->T);
    cg_tensor *loss = cg_seq2seq_loss(r->model, logits, b->tgt_out);
    cg_release(logits);
    return loss;
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
    valid_loss(r->model, &r->ds.pairs, &r->vbatches, r->tok, &e->val, &nll, &ntok);
    e->n_extra = 3;
    e->extra[0].key = "val_nll", e->extra[0].name = "nll", e->extra[0].value = nll;
    e->extra[0].decimals = 4;
    e->extra[1].key = "val_bpc", e->extra[1].name = "bits/char";
    e->extra[1].value = cg_bits_per_char(nll, ntok, r->valid_chars);
    e->extra[1].decimals = 4;
    e->extra[2].key = "epoch", e->extra[2].name = "epoch", e->extra[2].value = (double)r->epoch;
    e->extra[2].decimals = 0;
    return true;
}

/* The final evaluation: validation losses (also with every target paired
 * with the next pair's source: does the model translate from its source?)
 * and the test split decoded greedily and with beam search. */
static bool mt_finish(void *self, const cg_trainer *t, cg_jline *j)
{
    mt_run *r = self;
    const cg_pairs *P = &r->ds.pairs;
    const cg_pair_split *sp = &r->ds.split;
    double val_loss, val_nll, val_ntok, wrong_nll, dummy;
    valid_loss(r->model, P, &r->vbatches, r->tok, &val_loss, &val_nll, &val_ntok);
    cg_pairs wp = {0};
    wp.n = wp.cap = sp->n_valid;
    wp.items = malloc((size_t)wp.n * sizeof *wp.items);
    if (!wp.items)
        die("out of memory");
    for (int64_t i = 0; i < wp.n; i++) {
        const cg_pair *a = &P->items[sp->valid[(i + 1) % wp.n]], *b = &P->items[sp->valid[i]];
        wp.items[i] = (cg_pair){a->src, b->tgt, a->src_len, b->tgt_len};
    }
    cg_batches wb;
    if (!cg_make_batches(&wp, NULL, wp.n, r->max_tokens, &wb))
        die_lib(NULL);
    valid_loss(r->model, &wp, &wb, r->tok, &dummy, &wrong_nll, NULL);
    cg_batches_free(&wb);
    free(wp.items);
    fprintf(stderr, "valid nll %.4f, with mismatched sources %.4f\n", val_nll, wrong_nll);

    int64_t nt = r->test_limit < sp->n_test ? r->test_limit : sp->n_test;
    double bleu_g = NAN, bleu_b = NAN, chrf_g = NAN, chrf_b = NAN, decode_s = 0;
    if (nt > 0) {
        const char **srcs = malloc((size_t)nt * sizeof *srcs);
        const char **refs = malloc((size_t)nt * sizeof *refs);
        if (!srcs || !refs)
            die("out of memory");
        for (int64_t i = 0; i < nt; i++) {
            srcs[i] = P->items[sp->test[i]].src;
            refs[i] = P->items[sp->test[i]].tgt;
        }
        sources s;
        sources_encode(r->tok, srcs, nt, r->model->cfg.max_len, &s);
        fprintf(stderr, "decoding %lld test pairs (greedy, then beam %lld)...\n", (long long)nt,
                (long long)r->beam);
        double t0 = cg_now();
        char **hg = decode_all(r->model, r->tok, &s, 1, r->alpha, true, NULL);
        char **hb = decode_all(r->model, r->tok, &s, (int)r->beam, r->alpha, true, NULL);
        decode_s = cg_now() - t0;
        bleu_g = cg_bleu((int)nt, (const char *const *)hg, refs);
        bleu_b = cg_bleu((int)nt, (const char *const *)hb, refs);
        chrf_g = cg_chrf((int)nt, (const char *const *)hg, refs);
        chrf_b = cg_chrf((int)nt, (const char *const *)hb, refs);
        for (int64_t i = 0; i < nt && i < r->examples; i++)
            printf("SRC  %s\nREF  %s\nGRDY %s\nBEAM %s\n\n", srcs[i], refs[i], hg[i], hb[i]);
        strings_free(hg, nt);
        strings_free(hb, nt);
        sources_free(&s);
        free(srcs);
        free(refs);
    }
    cg_jline_int(j, "epochs", r->epoch);
    cg_jline_num(j, "train_loss", cg_trainer_recent_loss(t), 4);
    cg_jline_num(j, "val_loss", val_loss, 4);
    cg_jline_num(j, "val_nll", val_nll, 4);
    cg_jline_num(j, "val_bpc", cg_bits_per_char(val_nll, val_ntok, r->valid_chars), 4);
    cg_jline_num(j, "val_nll_wrong_src", wrong_nll, 4);
    if (nt > 0) {
        cg_jline_num(j, "bleu_greedy", bleu_g, 2);
        cg_jline_num(j, "bleu_beam", bleu_b, 2);
        cg_jline_num(j, "chrf_greedy", chrf_g, 2);
        cg_jline_num(j, "chrf_beam", chrf_b, 2);
    }
    cg_jline_num(j, "decode_s", decode_s, 1);
    cg_jline_num(j, "factor", r->factor, 4);
    cg_jline_str(j, "preset", r->preset);
    cg_jline_str(j, "tokenizer", cg_tokenizer_kind_name(r->tok->kind));
    cg_jline_int(j, "vocab", cg_tokenizer_vocab_size(r->tok));
    cg_jline_int(j, "test_pairs", nt);
    cg_jline_int(j, "beam", r->beam);
    return true;
}

static char *mt_config(void *self) { return cg_seq2seq_config_to_json(&((mt_run *)self)->model->cfg); }
static const cg_tokenizer *mt_tokenizer(void *self) { return ((mt_run *)self)->tok; }

/* The translator's own state: its recipe and its place in the batch order,
 * written into o or (o NULL) read back when resuming. */
static bool mt_state(void *self, cJSON *o)
{
    mt_run *r = self;
    const cg_json_field f[] = {
        {"preset", CG_JF_STR, &r->preset, 0, 0, false},
        {"factor", CG_JF_F64, &r->factor, 0, 1e3, false},
        {"max_tokens", CG_JF_I64, &r->max_tokens, 2, 1e9, false},
        {"warmup", CG_JF_I64, &r->warmup, 1, 1e9, false},
        {"max_len", CG_JF_I64, &r->max_len, 3, 100000, false},
        {"valid_size", CG_JF_I64, &r->valid_size, 1, 1e9, false},
        {"test_size", CG_JF_I64, &r->test_size, 1, 1e9, false},
        /* wide: the batch position is checked against the step (mt_setup) */
        {"epoch", CG_JF_I64, &r->epoch, 0, 1e15, false},
        {"pos", CG_JF_I64, &r->pos, 0, 1e15, false},
    };
    return cg_trainer_model_state(r->t, "seq2seq", o, f, (int)(sizeof f / sizeof f[0]));
}

/* The tokenizer: trained on the (filtered) training pairs, both sides, or
 * the checkpoint's when resuming (a char vocabulary must equal the one the
 * data gives). With subwords the pairs' lengths become token counts, so the
 * --max-len checks, the token-count batches and the padding count tokens. */
static void setup_tokenizer(mt_run *r, cg_seq2seq_ckpt *ck, const char *data)
{
    const cg_pairs *P = &r->ds.pairs;
    cg_tokenizer_kind kind = ck ? ck->tok->kind : r->t->o->tokenizer;
    int64_t vocab_size = r->t->o->vocab_size;
    if (ck && kind == CG_TOK_BPE) {
        r->tok = ck->tok;
        ck->tok = NULL;
    } else {
        int64_t n = 2 * r->n_train;
        const char **sents = malloc((size_t)(n ? n : 1) * sizeof *sents);
        if (!sents)
            die("out of memory");
        for (int64_t i = 0; i < r->n_train; i++) {
            sents[2 * i] = P->items[r->ds.split.train[i]].src;
            sents[2 * i + 1] = P->items[r->ds.split.train[i]].tgt;
        }
        if (kind == CG_TOK_BPE)
            fprintf(stderr, "training a BPE tokenizer of %lld ids on %lld training pairs...\n",
                    (long long)vocab_size, (long long)r->n_train);
        r->tok = cg_tokenizer_train(kind, true, sents, n, vocab_size);
        free(sents);
        if (!r->tok)
            die_lib(data);
        if (ck && !cg_tokenizer_equal(ck->tok, r->tok))
            die("%s: the vocabulary of %s differs from the checkpoint's (data changed?)",
                r->t->o->resume, data);
    }
    if (r->tok->kind == CG_TOK_CHAR) {
        cg_pairs_warn_unknown(P, r->ds.split.valid, r->ds.split.n_valid, &r->tok->pv, PROG,
                              "the validation pairs");
        cg_pairs_warn_unknown(P, r->ds.split.test, r->ds.split.n_test, &r->tok->pv, PROG,
                              "the test pairs");
        return;
    }
    for (int64_t i = 0; i < P->n; i++) {
        cg_pair *q = &P->items[i];
        int64_t ns, nt;
        int64_t *a = cg_tokenizer_encode(r->tok, q->src, &ns, NULL);
        int64_t *b = a ? cg_tokenizer_encode(r->tok, q->tgt, &nt, NULL) : NULL;
        free(a);
        free(b);
        if (!b)
            die_lib(data);
        q->src_len = (int32_t)ns;
        q->tgt_len = (int32_t)nt;
    }
}

/* Data, vocabulary, model, batches and batch order (fresh or resumed). */
static void mt_setup(mt_run *r, cg_train_opts *o, cg_trainer *t)
{
    cg_seq2seq_ckpt ck = {0};
    if (o->resume) {
        ckpt_load(o->resume, &ck);
        if (!mt_state(r, NULL))
            die_lib(NULL);
    }
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, 2, r->preset);
    if (!pr)
        die_lib(NULL);
    if (o->seed > 0xffffffffULL)
        die("--seed must be below 2^32 (numpy RandomState)");
    cg_data_id id;
    dataset_load(o->data, r->valid_size, r->test_size, &r->ds, &id);
    if (!cg_trainer_set_data(t, &id)) /* resuming: the checkpoint's data */
        die_lib(NULL);
    const cg_pairs *P = &r->ds.pairs;
    r->n_train = cg_pairs_filter(P, r->ds.split.train, r->ds.split.n_train, r->max_len - 2);
    if (r->n_train == 0)
        die("%s: no training pair fits --max-len %lld (both sides at most %lld character%s, "
            "leaving room for BOS and EOS)",
            o->data, (long long)r->max_len, (long long)r->max_len - 2,
            r->max_len - 2 == 1 ? "" : "s");
    r->valid_chars = 0;
    for (int64_t i = 0; i < r->ds.split.n_valid; i++)
        r->valid_chars += P->items[r->ds.split.valid[i]].tgt_len + 1;
    setup_tokenizer(r, o->resume ? &ck : NULL, o->data);
    for (int64_t i = 0; i < r->ds.split.n_valid; i++) {
        const cg_pair *q = &P->items[r->ds.split.valid[i]];
        if (q->src_len + 1 > r->max_len || q->tgt_len + 1 > r->max_len)
            die("%s: a validation pair is longer than --max-len %lld", o->data,
                (long long)r->max_len);
    }
    if (o->resume) {
        r->model = ck.model;
        ck.model = NULL;
        cg_module_train(CG_MODULE(r->model), true);
    } else {
        cg_seq2seq_config cfg = cg_seq2seq_config_default();
        cfg.vocab = cg_tokenizer_vocab_size(r->tok);
        cg_train_preset p;
        cfg.norm = CG_NORM_LAYERNORM;
        cfg.act = CG_ACT_RELU;
        if (!cg_train_shape(o, pr, &p, &cfg.norm, &cfg.act))
            die_lib(NULL);
        cfg.d = p.d;
        cfg.H = p.H;
        cfg.enc_layers = p.enc_layers;
        cfg.dec_layers = p.dec_layers;
        cfg.d_ff = p.d_ff;
        cfg.max_len = r->max_len;
        cfg.norm_first = o->norm_first;
        cfg.dropout = (float)o->dropout;
        cfg.label_smoothing = (float)o->label_smoothing;
        if (!cg_seq2seq_config_check(&cfg))
            die_lib(NULL);
        if (o->lr_seen) /* the Noam peak (at step warmup) is X */
            r->factor = o->lr * sqrt((double)cfg.d * (double)r->warmup);
        r->model = cg_seq2seq_new(&cfg, o->seed);
        if (!r->model)
            die_lib("model");
    }
    cg_seq2seq_ckpt_free(&ck);
    if (!cg_make_batches(P, r->ds.split.train, r->n_train, r->max_tokens, &r->batches) ||
        !cg_make_batches(P, r->ds.split.valid, r->ds.split.n_valid, r->max_tokens, &r->vbatches))
        die_lib(NULL);
    int64_t nb = r->batches.n_batches;
    r->perm = malloc((size_t)nb * sizeof *r->perm);
    r->n_bt = (int)o->grad_accum;
    r->bt = calloc((size_t)r->n_bt, sizeof *r->bt);
    if (!r->perm || !r->bt)
        die("out of memory");
    cg_mt19937_seed(&r->order, (uint32_t)o->seed);
    if (!o->resume) {
        r->epoch = 0;
        r->pos = nb;
    } else {
        /* grad_accum batches per step: the position must be exactly where
         * t->start steps leave it (a bound on the replay too) */
        if (!cg_train_position_check(r->epoch, r->pos, nb, t->start * o->grad_accum, o->resume))
            die_lib(NULL);
        for (int64_t e = 0; e < r->epoch; e++) /* replay the batch order so far */
            cg_mt_permutation(&r->order, nb, r->perm);
    }
    fprintf(stderr,
            "train %lld pairs in %lld batches, valid %lld, test %lld, %s vocab %lld, params %lld, "
            "precision %s%s\n",
            (long long)r->n_train, (long long)nb, (long long)r->ds.split.n_valid,
            (long long)r->ds.split.n_test, cg_tokenizer_kind_name(r->tok->kind),
            (long long)r->model->cfg.vocab,
            (long long)cg_module_num_params(CG_MODULE(r->model)), cg_precision_name(o->precision),
            o->resume ? " (resumed)" : "");
}

static int cmd_train(int argc, char **argv)
{
    cg_train_opts o;
    memset(&o, 0, sizeof o);
    cg_train_opts_init(&o);
    o.steps = 16000;
    o.eval_every = 1000;
    o.seed = 1;
    o.norm_first = false;
    o.dropout = 0.1;
    o.label_smoothing = 0.1;
    mt_run r = {.preset = "tiny", .max_tokens = 3000, .warmup = 400, .max_len = 256,
                .valid_size = 500, .test_size = 1000, .test_limit = 1000, .beam = 4,
                .examples = 3, .factor = 0.25, .alpha = 0.6};
    bool factor_seen = false;
    cg_cli_opt opts[CG_TRAIN_MAX_OPTS + 14] = {
        {"--preset", CG_CLI_STR, &r.preset, 0, 0, NULL},
        {"--max-tokens", CG_CLI_I64, &r.max_tokens, 2, 1e9, NULL},
        {"--factor", CG_CLI_F64, &r.factor, 0, 1e3, &factor_seen},
        {"--warmup", CG_CLI_I64, &r.warmup, 1, 1e9, NULL},
        {"--max-len", CG_CLI_I64, &r.max_len, 3, 100000, NULL},
        {"--valid-size", CG_CLI_I64, &r.valid_size, 1, 1e9, NULL},
        {"--test-size", CG_CLI_I64, &r.test_size, 1, 1e9, NULL},
        {"--test-limit", CG_CLI_I64, &r.test_limit, 0, 1e9, NULL},
        {"--beam", CG_CLI_I64, &r.beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &r.alpha, -100, 100, NULL},
        {"--examples", CG_CLI_I64, &r.examples, 0, 1e9, NULL},
    };
    int n = 11 + cg_train_cli_opts(&o, CG_TRAIN_FLAGS_ENC_DEC, opts + 11);
    int rc = cg_train_parse(argc, argv, opts, n, TRAIN_HELP);
    if (rc >= 0)
        return rc;
    if (!o.resume && o.lr_seen && factor_seen)
        die("--lr and --factor both set the learning rate; give one");
    if (!o.resume && !cg_train_preset_find(PRESETS, 2, r.preset))
        die_lib(NULL);
    if (!o.data)
        o.data = DEFAULT_DATA;
    cg_trainer t;
    rc = cg_trainer_begin(&t, &o, "seq2seq", DEFAULT_CKPT,
                          "--preset --max-tokens --factor --warmup --max-len --valid-size "
                          "--test-size",
                          argc, argv, opts, n);
    if (rc < 0) {
        r.t = &t;
        mt_setup(&r, &o, &t);
        cg_trainer_model m = {
            .name = "seq2seq", .plot_title = "seq2seq: label-smoothed loss",
            .module = CG_MODULE(r.model), .dropout_rng = &r.model->dropout_rng,
            .optim = cg_adam_config(0.0, 0.9, 0.98, 1e-9), .clip_norm = 1.0, .self = &r,
            .batch = mt_batch, .loss = mt_loss, .lr = mt_lr, .evaluate = mt_evaluate,
            .finish = mt_finish, .config_json = mt_config, .tokenizer = mt_tokenizer,
            .state_save = mt_state};
        rc = cg_trainer_run(&t, &m);
    }
    cg_trainer_end(&t);
    for (int k = 0; k < r.n_bt; k++)
        cg_batch_free(&r.bt[k]);
    free(r.bt);
    free(r.perm);
    cg_batches_free(&r.batches);
    cg_batches_free(&r.vbatches);
    cg_tokenizer_free(r.tok);
    cg_seq2seq_free(r.model);
    dataset_free(&r.ds);
    return rc;
}

/* ============================================================ translate */
static const char TRANSLATE_HELP[] =
    "usage: seq2seq translate --ckpt FILE [options] [sentence ...]\n"
    "\n"
    "Translate each sentence given as an argument, or else each line of stdin;\n"
    "prints one translation per line.\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --beam N             beam size; 1 = greedy decoding (default 1)\n"
    "  --length-penalty A   alpha of the beam's ((5+len)/6)^alpha (default 0.6)\n"
    "  --no-cache           recompute the whole prefix at every step (no key/value cache)\n"
    "  --precision P        fp32 or bf16 matrix products (default: the checkpoint's\n"
    "                       training precision)\n"
    "  --threads N          threads (default 2)\n";

static int cmd_translate(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT;
    int64_t beam = 1, threads = 2;
    double alpha = 0.6;
    bool no_cache = false;
    const char *precision = NULL;
    const cg_cli_opt opts[] = {
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--beam", CG_CLI_I64, &beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &alpha, -100, 100, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--precision", CG_CLI_STR, &precision, 0, 0, NULL},
    };
    char **flags = malloc((size_t)(argc + 1) * sizeof *flags);
    char **pos = malloc((size_t)(argc + 1) * sizeof *pos);
    int nf, np;
    if (!flags || !pos)
        die("out of memory");
    const int nopt = (int)(sizeof opts / sizeof *opts);
    split_args(argc, argv, opts, nopt, flags, &nf, pos, &np);
    parse_flags(nf, flags, opts, nopt, TRANSLATE_HELP);
    cg_cli_set_threads(PROG, threads);
    cg_precision prec;
    ckpt c;
    ckpt_load(ck, &c);
    if (!cg_decode_precision(precision, cg_st_metadata(c.file, "train"), ck, &prec))
        die_lib(NULL);

    /* the sentences */
    char **texts = NULL;
    int64_t n = 0, cap = 0;
    if (np > 0) {
        texts = malloc((size_t)np * sizeof *texts);
        if (!texts)
            die("out of memory");
        for (int i = 0; i < np; i++)
            if (!(texts[n++] = strdup(pos[i])))
                die("out of memory");
    } else {
        char *line = NULL;
        size_t lcap = 0;
        ssize_t k;
        while ((k = (ssize_t)cg_read_line(&line, &lcap, stdin, "stdin", CG_LINE_MAX)) >= 0) {
            while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
                line[--k] = '\0';
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **t = realloc(texts, (size_t)cap * sizeof *t);
                if (!t)
                    die("out of memory");
                texts = t;
            }
            if (!(texts[n++] = strdup(line)))
                die("out of memory");
        }
        free(line);
        if (k == -2)
            die_lib(NULL);
    }
    for (int64_t i = 0; i < n; i++) {
        size_t bad;
        if (cg_utf8_count(texts[i], strlen(texts[i]), &bad) < 0)
            die("sentence %lld is not valid UTF-8 (byte %zu)", (long long)i + 1, bad + 1);
        if (c.tok->kind == CG_TOK_CHAR)
            cg_pair_vocab_warn_unknown(&c.tok->pv, texts[i], PROG, "sentence", i + 1);
    }
    sources s;
    sources_encode(c.tok, (const char *const *)texts, n, c.model->cfg.max_len, &s);
    char **hyps = decode_all(c.model, c.tok, &s, (int)beam, alpha, !no_cache, stdout);
    strings_free(hyps, n);
    sources_free(&s);
    strings_free(texts, n);
    free(flags);
    free(pos);
    ckpt_free(&c);
    return 0;
}

/* ============================================================ eval */
static const char EVAL_HELP[] =
    "usage: seq2seq eval --ckpt FILE [options]\n"
    "\n"
    "Corpus BLEU and chrF (sacreBLEU defaults) of the model's translations of the\n"
    "test split, as one JSON line.\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --data FILE          pairs (default: the file the checkpoint was trained on)\n"
    "  --beam N             beam size; 1 = greedy decoding (default 1)\n"
    "  --length-penalty A   alpha of ((5+len)/6)^alpha (default 0.6)\n"
    "  --test-limit N       decode only the first N test pairs (default: all)\n"
    "  --no-cache           recompute the whole prefix at every step (no key/value cache)\n"
    "  --precision P        fp32 or bf16 matrix products (default: the checkpoint's\n"
    "                       training precision)\n"
    "  --threads N          threads (default 2)\n";

static int cmd_eval(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *data = NULL;
    int64_t beam = 1, threads = 2, limit = -1;
    double alpha = 0.6;
    bool no_cache = false;
    const char *precision = NULL;
    const cg_cli_opt opts[] = {
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--data", CG_CLI_STR, &data, 0, 0, NULL},
        {"--beam", CG_CLI_I64, &beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &alpha, -100, 100, NULL},
        {"--test-limit", CG_CLI_I64, &limit, 1, 1e9, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
        {"--precision", CG_CLI_STR, &precision, 0, 0, NULL},
    };
    parse_flags(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), EVAL_HELP);
    cg_cli_set_threads(PROG, threads);
    ckpt c;
    ckpt_load(ck, &c);
    int64_t n_valid = 500, n_test = 1000;
    const char *tj = cg_st_metadata(c.file, "train");
    cg_precision prec; /* the products as trained, or as --precision says */
    if (!cg_decode_precision(precision, tj, ck, &prec))
        die_lib(NULL);
    cJSON *st = tj ? cJSON_Parse(tj) : NULL;
    if (st) { /* models/trainer.h: the split sizes are the model's own state
               * (top-level in checkpoints written before the one trainer) */
        const cJSON *x, *ms = cJSON_GetObjectItemCaseSensitive(st, "model");
        if (!ms)
            ms = st;
        if (!data && cJSON_IsString(x = cJSON_GetObjectItemCaseSensitive(st, "data")))
            data = x->valuestring;
        const cg_json_field f[] = {
            {"valid_size", CG_JF_I64, &n_valid, 1, 1e9, true},
            {"test_size", CG_JF_I64, &n_test, 1, 1e9, true},
        };
        char what[600];
        snprintf(what, sizeof what, "'%.500s': seq2seq training state", ck);
        if (!cg_json_read_fields(ms, what, f, 2))
            die_lib(NULL);
    }
    if (!data)
        data = DEFAULT_DATA;
    dataset ds = {0};
    cg_data_id id;
    dataset_load(data, n_valid, n_test, &ds, &id);
    if (!cg_train_data_check(tj, ck, &id))
        die_lib(NULL);
    int64_t nt = limit > 0 && limit < ds.split.n_test ? limit : ds.split.n_test;
    if (c.tok->kind == CG_TOK_CHAR)
        cg_pairs_warn_unknown(&ds.pairs, ds.split.test, nt, &c.tok->pv, PROG, "the test pairs");
    const char **srcs = malloc((size_t)nt * sizeof *srcs);
    const char **refs = malloc((size_t)nt * sizeof *refs);
    if (!srcs || !refs)
        die("out of memory");
    for (int64_t i = 0; i < nt; i++) {
        srcs[i] = ds.pairs.items[ds.split.test[i]].src;
        refs[i] = ds.pairs.items[ds.split.test[i]].tgt;
    }
    sources s;
    sources_encode(c.tok, srcs, nt, c.model->cfg.max_len, &s);
    double t0 = cg_now();
    char **hyps = decode_all(c.model, c.tok, &s, (int)beam, alpha, !no_cache, NULL);
    double dt = cg_now() - t0;
    double bleu = cg_bleu((int)nt, (const char *const *)hyps, refs);
    double chrf = cg_chrf((int)nt, (const char *const *)hyps, refs);
    if (bleu < 0 || chrf < 0)
        die_lib("metrics");
    printf("{\"bleu\": %s, \"chrf\": %s, \"beam\": %lld, \"test_pairs\": %lld, "
           "\"decode_s\": %s, \"step\": %lld, \"precision\": %s}\n",
           CG_JSON_NUM("%.2f", bleu), CG_JSON_NUM("%.2f", chrf), (long long)beam, (long long)nt,
           CG_JSON_NUM("%.1f", dt), (long long)c.step, CG_JSON_STR(cg_precision_name(prec)));
    strings_free(hyps, nt);
    sources_free(&s);
    free(srcs);
    free(refs);
    if (st)
        cJSON_Delete(st);
    dataset_free(&ds);
    ckpt_free(&c);
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
    "  --threads N          threads (default 2)\n";

/* labels: one string per id (subword pieces readable, models/tokenizer.h) */
static char **id_labels(const cg_tokenizer *tok, const int64_t *ids, int64_t n)
{
    char **l = cg_tokenizer_labels(tok, ids, n);
    if (!l)
        die_lib("labels");
    return l;
}

static void draw(const char *dir, const char *file, const char *title, int layers,
                 cg_mha *const *mods, int64_t Tq, int64_t Tk, char **rl, char **cl)
{
    size_t plen = strlen(dir) + strlen(file) + 2;
    char *path = malloc(plen);
    if (!path)
        die("out of memory");
    snprintf(path, plen, "%s/%s", dir, file);
    if (!cg_plot_attention_of(path, title, layers, mods, (int)Tq, (int)Tk,
                              (const char *const *)rl, (const char *const *)cl))
        die("%s: %s", path, cg_last_error());
    printf("%s\n", path);
    free(path);
}

static int cmd_attention(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *text = NULL, *target = NULL, *dir = "attention";
    int64_t threads = 2;
    bool no_cache = false;
    const cg_cli_opt opts[] = {
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--text", CG_CLI_STR, &text, 0, 0, NULL},
        {"--target", CG_CLI_STR, &target, 0, 0, NULL},
        {"--out", CG_CLI_STR, &dir, 0, 0, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
    };
    parse_flags(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), ATTENTION_HELP);
    if (!text)
        die("attention needs --text (try --help)");
    cg_cli_set_threads(PROG, threads);
    ckpt c;
    ckpt_load(ck, &c);
    cg_seq2seq *m = c.model;
    cg_module_train(CG_MODULE(m), false);
    const char *one[1] = {text};
    sources s;
    sources_encode(c.tok, one, 1, m->cfg.max_len, &s);
    int64_t S = s.len[0] + 1;
    int64_t *src = malloc((size_t)S * sizeof *src);
    if (!src)
        die("out of memory");
    memcpy(src, s.ids[0], (size_t)s.len[0] * sizeof *src);
    src[S - 1] = CG_EOS;
    /* decoder input: BOS + translation */
    int64_t *out_ids = NULL, L = 0;
    if (target) {
        if (cg_utf8_count(target, strlen(target), NULL) < 0)
            die("--target is not valid UTF-8");
        out_ids = cg_tokenizer_encode(c.tok, target, &L, NULL);
        if (!out_ids)
            die_lib("--target");
    } else {
        int64_t steps = S - 1 + 50 < m->cfg.max_len - 1 ? S - 1 + 50 : m->cfg.max_len - 1;
        out_ids = malloc((size_t)steps * sizeof *out_ids);
        if (!out_ids || !cg_greedy_decode(m, src, 1, S, steps, out_ids, &L, !no_cache))
            die_lib("greedy decoding");
    }
    int64_t T = L + 1;
    if (T > m->cfg.max_len)
        die("the target is longer than the model's max_len %lld", (long long)m->cfg.max_len);
    int64_t *tin = malloc((size_t)T * sizeof *tin);
    if (!tin)
        die("out of memory");
    tin[0] = CG_BOS;
    memcpy(tin + 1, out_ids, (size_t)L * sizeof *tin);
    char *trans = cg_tokenizer_decode(c.tok, out_ids, L);
    fprintf(stderr, "translation: %s\n", trans ? trans : "");
    free(trans);

    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        die("cannot create %s: %s", dir, strerror(errno));
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_no_grad_begin();
    cg_tensor *logits = cg_seq2seq_forward(m, src, 1, S, tin, T);
    cg_no_grad_end();
    if (!logits)
        die_lib("forward");
    cg_release(logits);

    char **sl = id_labels(c.tok, src, S), **tl = id_labels(c.tok, tin, T);
    int ne = m->encoder->n_layers, nd = m->decoder->n_layers;
    cg_mha **mods = malloc((size_t)(ne + nd + 1) * sizeof *mods);
    if (!mods)
        die("out of memory");
    if (ne > 0) {
        for (int i = 0; i < ne; i++)
            mods[i] = m->encoder->layers[i]->self_attn;
        draw(dir, "encoder_self.png", "encoder self-attention", ne, mods, S, S, sl, sl);
    }
    if (nd > 0) {
        for (int i = 0; i < nd; i++)
            mods[i] = m->decoder->layers[i]->self_attn;
        draw(dir, "decoder_self.png", "decoder self-attention", nd, mods, T, T, tl, tl);
        for (int i = 0; i < nd; i++)
            mods[i] = m->decoder->layers[i]->cross_attn;
        draw(dir, "cross.png", "cross-attention (rows: decoder input, columns: source)", nd,
             mods, T, S, tl, sl);
    }
    strings_free(sl, S);
    strings_free(tl, T);
    free(mods);
    free(tin);
    free(out_ids);
    free(src);
    sources_free(&s);
    ckpt_free(&c);
    return 0;
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
    "Exit status: 0 done, 1 failed, 2 bad command line.\n";

int main(int argc, char **argv)
{
    const cg_prog_command cmds[] = {{"train", cmd_train},
                                    {"translate", cmd_translate},
                                    {"eval", cmd_eval},
                                    {"attention", cmd_attention}};
    return cg_prog_main(argc, argv, PROG, MAIN_HELP, cmds, 4);
}
