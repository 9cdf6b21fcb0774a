/* seq2seq's training glue: what the seq2seq program's `train` command
 * plugs into the trainer (models/train/program.h cg_train_command). The
 * translator as the trainer sees it (token-bounded batches in the epoch
 * order, the loss, the Noam schedule, the validation losses, the final
 * evaluation with test decoding, the state a checkpoint keeps), and its
 * set-up: data, vocabulary and model, fresh from --preset and the flags or
 * from --resume's checkpoint, and the batch order. Moved here from
 * seq2seq_main.c (issue 35), which keeps the flag tables, the help texts
 * and the commands. */
#include "models/seq2seq/seq2seq_train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/seq2seq/seq2seq_presets.h"
#include "models/util/config_json.h"
#include "models/data/data.h"
#include "models/train/model_common.h"
#include "models/data/pairs.h"
#include "models/text/tokenizer.h"
#include "dist/dist.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PRESETS cg_seq2seq_presets

/* A checkpoint that translate, eval or attention reads (never standard
 * output, their result). False + error (*c freed either way). */
bool ckpt_load(const char *path, const char *base, cg_ckpt_weights w, cg_seq2seq_ckpt *c)
{
    memset(c, 0, sizeof *c);
    if (!cg_out_check_stdout(path, "--ckpt") || !cg_seq2seq_ckpt_load_weights(path, base, w, c))
        return false;
    if (c->averaged)
        cg_prog_note_average(c->file, path);
    return true;
}

static bool mt_batch(void *self, int k, double *weight, double *tokens)
{
    mt_run *r = self;
    return cg_mt_data_next(&r->d, k, weight, tokens);
}

static cg_tensor *mt_loss(void *self, int k, float grad_scale)
{
    mt_run *r = self;
    const cg_batch *b = &r->d.bt[k];
    return cg_seq2seq_forward_loss(r->model, b->src, b->B, b->S, b->tgt_in, b->T, b->tgt_out,
                                   grad_scale);
}

static double mt_lr(void *self, int64_t step)
{
    mt_run *r = self;
    return cg_train_sched_lr(&r->sched, r->t->o->steps, step, &r->t->hist);
}

/* A fresh run's peak rate: --lr, else the Noam curve's (at step warmup) */
static double mt_peak(const mt_run *r, const cg_train_opts *o, const cg_train_recipe *rec,
                      int64_t d)
{
    const cg_train_sched *s = &r->sched;
    return cg_cli_given(o->args, &rec->lr)
               ? rec->lr
               : cg_lr_noam(s->warmup ? s->warmup : 1, d, s->warmup, s->factor);
}

static double mt_momentum(void *self, int64_t step)
{
    mt_run *r = self;
    return cg_train_sched_momentum(&r->sched, r->t->o->steps, step);
}

/* --eval-bleu: the first N validation pairs, greedy or --eval-bleu-beam's
 * beam with --length-penalty, default limits, each
 * rank decoding its share (as fairseq's workers do) and the counts summed
 * over the ranks (exact: integers), so the scores are those of all N
 * pairs. Every rank takes part in the sum even when a signal cut its
 * decoding short: that rank returns false ("interrupted"), the others NaN
 * scores, and the trainer, seeing the cut on any rank, leaves the
 * evaluation out (an error on a rank is a cut for the others too, its
 * rank failing the run). cut: the validation loss was cut short here, so
 * this rank decodes nothing but still takes part in the sum (the others,
 * whose loss finished, are in it: a rank missing it would pair their sum
 * with the trainer's next collective). */
static bool eval_bleu_scores(mt_run *r, bool cut, double *bleu, double *chrf)
{
    int64_t n = r->eval_bleu < r->d.split.n_valid ? r->eval_bleu : r->d.split.n_valid, lo, hi;
    (void)cg_dist_share(n, &lo, &hi); /* false: some rank has none, which is fine here */
    cg_bleu_stats b;
    cg_chrf_counts c;
    bool ok =
        !cut && cg_translate_counts(r->model, r->d.tok, &r->d.pairs, r->d.split.valid + lo, hi - lo,
                                    (int)r->eval_beam, r->alpha, true, NULL, &b, &c, NULL);
    enum { NB = 10, NC = 3 * CG_CHRF_ORDER };
    double v[NB + NC + 1] = {0};
    for (int g = 0; ok && g < 4; g++) {
        v[g] = (double)b.matches[g];
        v[4 + g] = (double)b.totals[g];
    }
    for (int g = 0; ok && g < CG_CHRF_ORDER; g++) {
        v[NB + g] = (double)c.hyp[g];
        v[NB + CG_CHRF_ORDER + g] = (double)c.ref[g];
        v[NB + 2 * CG_CHRF_ORDER + g] = (double)c.match[g];
    }
    v[8] = ok ? (double)b.hyp_len : 0;
    v[9] = ok ? (double)b.ref_len : 0;
    v[NB + NC] = !ok;
    if (!cg_dist_allreduce_sum(v, NB + NC + 1))
        return false;
    if (!ok)
        return false; /* "interrupted", or an error the trainer fails the run on */
    *bleu = *chrf = NAN;
    if (v[NB + NC] > 0)
        return true;
    for (int g = 0; g < 4; g++) {
        b.matches[g] = (long long)v[g];
        b.totals[g] = (long long)v[4 + g];
    }
    b.hyp_len = (long long)v[8];
    b.ref_len = (long long)v[9];
    for (int g = 0; g < CG_CHRF_ORDER; g++) {
        c.hyp[g] = (long long)v[NB + g];
        c.ref[g] = (long long)v[NB + CG_CHRF_ORDER + g];
        c.match[g] = (long long)v[NB + 2 * CG_CHRF_ORDER + g];
    }
    cg_bleu_finish(&b);
    *bleu = b.score;
    *chrf = cg_chrf_score(&c);
    return true;
}

static bool mt_evaluate(void *self, int64_t step, cg_eval_result *e)
{
    (void)step;
    mt_run *r = self;
    double nll, ntok, bleu, chrf;
    if (!cg_seq2seq_valid_loss(r->model, &r->d.pairs, &r->d.vbatches, r->d.tok, &e->val, &nll,
                               &ntok)) {
        /* a signal here: --eval-bleu's sum still has this rank's part.
         * It returns false ("interrupted") whatever the sum did, and the
         * trainer stops the run on the signal, this evaluation left out
         * and the checkpoint of the step before kept: a sum that failed
         * changes nothing of that (only its message is not shown). */
        if (r->eval_bleu > 0 && cg_train_interrupted())
            (void)eval_bleu_scores(r, true, &bleu, &chrf);
        return false;
    }
    cg_eval_add(e, "val_nll", "nll", nll, 4);
    cg_eval_add(e, "val_bpc", "bits/char", cg_bits_per_char(nll, ntok, r->d.valid_chars), 4);
    cg_eval_add(e, "epoch", "epoch", (double)r->d.epoch, 0);
    if (r->eval_bleu == 0)
        return true;
    if (!eval_bleu_scores(r, false, &bleu, &chrf))
        return false;
    if (isnan(bleu)) /* cut short on another rank: the trainer leaves it out */
        return true;
    cg_eval_add(e, "val_bleu", "bleu", bleu, 2);
    cg_eval_add(e, "val_chrf", "chrF", chrf, 2);
    const char *m = r->t->o->best_metric;
    e->score = m && !strcmp(m, "bleu") ? bleu : m && !strcmp(m, "chrf") ? chrf : NAN;
    return true;
}

/* --best-metric (the flag's, or a resumed checkpoint's: ckpt its name,
 * else NULL): loss, or bleu or chrf with --eval-bleu. -1 or the exit code
 * (the error printed). */
static int best_metric_check(const mt_run *r, const char *metric, const char *ckpt)
{
    bool score = metric && (!strcmp(metric, "bleu") || !strcmp(metric, "chrf"));
    if (!metric || !strcmp(metric, "loss") || (score && r->eval_bleu > 0))
        return -1;
    char why[160];
    if (score)
        snprintf(why, sizeof why,
                 "--best-metric %s needs --eval-bleu N (the validation pairs "
                 "it decodes at each evaluation)",
                 metric);
    else
        snprintf(why, sizeof why, "--best-metric '%.60s' is not one of loss, bleu, chrf", metric);
    if (ckpt)
        cg_prog_fail("'%s': its training state's %s (a damaged checkpoint?)", ckpt, why);
    else
        cg_prog_fail("%s", why);
    return ckpt ? CG_EXIT_FAIL : CG_EXIT_USAGE;
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
    cg_json_put_str(j, "lr_schedule", r->sched.text);
    if (r->sched.kind == CG_SCHED_NOAM)
        cg_json_put_num(j, "factor", "%.4f", r->sched.factor);
    else
        cg_json_put_num(j, "lr", "%.3e", r->sched.lr);
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
        {"factor", CG_JF_F64, &r->sched.factor, 1e-12, 1e3, false},
        {"max_tokens", CG_JF_I64, &r->max_tokens, 2, 1e9, false},
        {"pad_to_multiple", CG_JF_I64, &r->pad_to, 1, 1e6, true}, /* absent before: 1 */
        {"warmup", CG_JF_I64, &r->sched.warmup, 0, 1e9, false},
        /* absent: from before --lr-schedule (noam, which reads factor) */
        {"lr", CG_JF_F64, &r->sched.lr, 0, 10, true},
        {"max_len", CG_JF_I64, &r->max_len, 3, 100000, false},
        {"max_len_tokens", CG_JF_BOOL, &r->max_len_tokens, 0, 0, true}, /* absent before */
        {"valid_size", CG_JF_I64, &r->valid_size, 1, 1e9, false},
        {"test_size", CG_JF_I64, &r->test_size, 1, 1e9, false},
        /* wide: the batch position is checked against the step (mt_setup) */
        {"epoch", CG_JF_I64, &r->d.epoch, 0, 1e15, false},
        {"pos", CG_JF_I64, &r->d.pos, 0, 1e15, false},
    };
    enum { N = (int)(sizeof f / sizeof f[0]) };
    cg_json_field all[N + CG_TRAIN_SCHED_NFIELDS];
    memcpy(all, f, sizeof f);
    if (!cg_trainer_model_state(r->t, "seq2seq", o, all,
                                N + cg_train_sched_fields(&r->sched, all + N)))
        return false;
    const char *extra = r->t->o->extra_data;
    if (!o || !extra)
        return true;
    cJSON *x = cg_data_id_to_json(&r->extra_id);
    if (x && cJSON_AddItemToObject(o, "extra_data_id", x))
        return true;
    cJSON_Delete(x); /* not added (out of memory): still ours */
    return false;
}

/* --extra-data's pairs join the training split; resuming, the checkpoint
 * must have been trained with the same file, or without one as this run. */
static bool mt_extra(mt_run *r, const cg_trainer *t, const char *resume)
{
    const char *what = "training state: \"extra_data_id\"", *extra = t->o->extra_data;
    const cJSON *s =
        resume ? cJSON_GetObjectItemCaseSensitive(t->model_state, "extra_data_id") : NULL;
    cg_data_id stored;
    if (s && !cg_data_id_from_json(s, what, &stored))
        return false;
    if (resume && !s != !extra) {
        if (s)
            cg_set_error("'%s' was trained with --extra-data '%s'; give it again to resume", resume,
                         stored.path);
        else
            cg_set_error("'%s' was trained without --extra-data; drop --extra-data to resume",
                         resume);
        return false;
    }
    if (!extra)
        return true;
    if (!cg_mt_data_add_extra(&r->d, extra, &r->extra_id, &r->extra) ||
        (s && !cg_data_id_check(&stored, &r->extra_id))) {
        cg_prefix_error("--extra-data: ");
        return false;
    }
    return true;
}

/* The config of a fresh run from the preset pr and the flags (seq2seq's
 * defaults: layernorm, relu) for a vocabulary of `vocab` ids, checked.
 * False + error naming the flag or the config's field. */
static bool mt_config_from_flags(const mt_run *r, const cg_train_opts *o, cg_train_recipe *rec,
                                 const cg_train_preset *pr, int64_t vocab, cg_seq2seq_config *out)
{
    cg_seq2seq_config cfg = cg_seq2seq_config_default();
    cfg.vocab = vocab;
    cfg.loss_chunk = cg_train_loss_chunk(cfg.vocab);
    cfg.norm = CG_NORM_LAYERNORM;
    cfg.act = CG_ACT_RELU;
    if (!cg_train_shape(o->args, pr, rec, &cfg.norm, &cfg.act))
        return false;
    const cg_train_preset *p = &rec->shape;
    cfg.d = p->d;
    cfg.H = p->H;
    cfg.enc_layers = p->enc_layers;
    cfg.dec_layers = p->dec_layers;
    cfg.d_ff = p->d_ff;
    cfg.max_len = r->max_len;
    cfg.norm_first = rec->norm_first;
    cfg.bias = rec->bias;
    cfg.dropout = (float)rec->dropout;
    cfg.attn_dropout = (float)rec->attn_dropout;
    cfg.kv_heads = rec->kv_heads;
    cfg.pos_enc = rec->pos;
    cfg.emb_scale = rec->emb_scale;
    cfg.rope_theta = rec->rope_theta;
    cfg.label_smoothing = (float)rec->label_smoothing;
    cfg.word_dropout = (float)r->word_dropout;
    *out = cfg;
    return cg_seq2seq_config_check(&cfg);
}

/* A new model from the preset pr and the flags; --lr sets the Noam factor.
 * -1 or the exit code. */
static int mt_new_model(mt_run *r, const cg_train_opts *o, cg_train_recipe *rec,
                        const cg_train_preset *pr)
{
    cg_seq2seq_config cfg;
    if (!mt_config_from_flags(r, o, rec, pr, cg_tokenizer_vocab_size(r->d.tok), &cfg))
        return cg_prog_fail_lib(NULL);
    if (cg_cli_given(o->args, &rec->lr)) /* the Noam peak (at step warmup) is X */
        r->sched.factor = rec->lr * sqrt((double)cfg.d * (double)r->sched.warmup);
    r->model = cg_seq2seq_new(&cfg, o->seed);
    return r->model ? -1 : cg_prog_fail_lib("model");
}

/* A translator's architecture as --init-from compares it (max_len as
 * T: --max-len is checked apart, mt_init_from). */
static cg_train_arch mt_arch(const cg_seq2seq_config *c)
{
    return CG_MODEL_TRAIN_ARCH(c, {.d = c->d,
                                   .H = c->H,
                                   .enc_layers = c->enc_layers,
                                   .dec_layers = c->dec_layers,
                                   .d_ff = c->d_ff,
                                   .T = c->max_len});
}

/* --init-from (fairseq's --restore-file with --reset-optimizer,
 * --reset-dataloader and --reset-lr-scheduler): the base checkpoint's
 * model and tokenizer into *ck (its moving average unless --no-ema; the
 * dropouts, word dropout and label smoothing of the flags when given, the
 * masks from --seed), the flags checked against it, --max-len its
 * max_len, and the trainer told where the run starts from. -1 or the exit
 * code. */
static int mt_init_from(mt_run *r, cg_trainer *t, const cg_train_opts *o, cg_train_recipe *rec,
                        const cg_train_preset *pr, cg_seq2seq_ckpt *ck)
{
    const cg_cli_args *a = o->args;
    const cg_seq2seq_load_opts lo = {
        .seed = o->seed,
        .dropout = cg_cli_given(a, &rec->dropout) ? rec->dropout : NAN,
        .attn_dropout = cg_cli_given(a, &rec->attn_dropout) ? rec->attn_dropout : NAN,
        .label_smoothing = cg_cli_given(a, &rec->label_smoothing) ? rec->label_smoothing : NAN,
        .word_dropout = cg_cli_given(a, &r->word_dropout) ? r->word_dropout : NAN,
        .weights = o->init_no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE};
    if (!cg_seq2seq_ckpt_load_opts(o->init_from, &lo, ck))
        return cg_prog_fail("--init-from: %s", cg_last_error());
    if (ck->adapter)
        return cg_prog_fail("--init-from: '%s' is a LoRA adapter checkpoint (of the base '%s'); "
                            "start from a full checkpoint: its base, or a full fine-tune",
                            o->init_from, ck->base_path);
    const cg_seq2seq_config *have = &ck->model->cfg;
    cg_seq2seq_config want;
    if (!mt_config_from_flags(r, o, rec, pr, have->vocab, &want))
        return cg_prog_fail_lib(NULL);
    cg_train_arch w = mt_arch(&want), h = mt_arch(have);
    w.shape.T = h.shape.T; /* the message's; --max-len is checked below */
    int rc = cg_train_check_base(a, rec, &r->preset, &w, &h, ck->tok, o->init_from);
    if (rc >= 0)
        return rc;
    if (cg_cli_given(a, &r->max_len) && r->max_len != have->max_len)
        return cg_prog_fail("'%s' fixes max_len %lld (its longest sequence); --max-len %lld "
                            "contradicts it (drop it)",
                            o->init_from, (long long)have->max_len, (long long)r->max_len);
    r->max_len = have->max_len;
    if (cg_cli_given(a, &rec->lr)) /* the Noam peak (at step warmup) is X */
        r->sched.factor = rec->lr * sqrt((double)have->d * (double)r->sched.warmup);
    if (cg_ft_lora_attach_run(CG_MODULE(ck->model), &r->lora, o->seed, &ck->model->dropout_rng) < 0)
        return cg_prog_fail("%s", cg_last_error());
    if (!cg_trainer_set_origin(t, o->init_from, ck->file, r->lora.rank > 0))
        return cg_prog_fail("--init-from: %s", cg_last_error());
    if (ck->averaged) /* the weights its evaluations judged (a refusal says only why) */
        cg_prog_note_average(ck->file, o->init_from);
    return -1;
}

/* The data and vocabulary (resuming: ck, the checkpoint, and the run's
 * state read back from it; --init-from: ck, the base, whose tokenizer
 * reads the data), then the model: fresh, resumed or the base's. */
static int mt_data_model(mt_run *r, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec)
{
    cg_seq2seq_ckpt ck = {0};
    /* --max-len counts ids; a checkpoint without the key counted characters */
    r->max_len_tokens = !o->resume;
    if (o->resume && (!ckpt_load(o->resume, o->base, CG_CKPT_TRAINED, &ck) || !mt_state(r, NULL))) {
        cg_seq2seq_ckpt_free(&ck); /* loaded, then its state refused */
        return cg_prog_fail_lib(NULL);
    }
    /* the preset and --seed were checked with the flags (mt_check); a
     * resumed run's seed is its checkpoint's */
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r->preset);
    int rc = pr ? -1 : cg_prog_fail_lib(NULL);
    if (rc < 0 && o->resume && o->seed > 0xffffffffULL)
        rc = cg_prog_fail("'%s': its seed %llu is out of range [0, 4294967295] (numpy's "
                          "RandomState)",
                          o->resume, (unsigned long long)o->seed);
    if (rc < 0 && o->init_from)
        rc = mt_init_from(r, t, o, rec, pr, &ck);
    cg_data_id id;
    r->d.max_len_chars = !r->max_len_tokens;
    r->d.base_tok = o->init_from != NULL;
    if (rc < 0 &&
        (!cg_mt_data_load(&r->d, o->data, DEFAULT_DATA, r->valid_size, r->test_size, &id) ||
         !cg_trainer_set_data(t, &id) || /* resuming: the checkpoint's data */
         !mt_extra(r, t, o->resume) ||
         !cg_mt_data_prepare(&r->d, o->data, r->max_len, r->max_tokens, rec->tokenizer,
                             rec->vocab_size, ck.tok ? &ck.tok : NULL,
                             o->resume ? o->resume : o->init_from, PROG) ||
         /* what decoding at the end and every rank's share need, known now */
         !cg_mt_check_split(&r->d, r->d.tok, false, r->test_limit, r->max_len, o->data) ||
         !cg_mt_check_split(&r->d, r->d.tok, true, r->eval_bleu, r->max_len, o->data) ||
         !cg_mt_check_ranks(&r->d, r->max_tokens, o->resume != NULL)))
        rc = cg_prog_fail_lib(NULL);
    /* the recipe's max_len filtered the pairs; the model's must take them
     * (both are --max-len: only a damaged checkpoint differs) */
    if (rc < 0 && o->resume && ck.model->cfg.max_len != r->max_len)
        rc = cg_prog_fail("'%s': its config's max_len %lld is not its training state's %lld (a "
                          "damaged checkpoint?)",
                          o->resume, (long long)ck.model->cfg.max_len, (long long)r->max_len);
    if (rc < 0 && (o->resume || o->init_from)) {
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
int mt_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec, cg_trainer_model *m)
{
    mt_run *r = self;
    r->t = t;
    int rc = o->resume ? best_metric_check(r, o->best_metric, o->resume) : -1;
    if (rc < 0)
        rc = mt_data_model(r, t, o, rec);
    if (rc >= 0)
        return rc;
    r->d.pad_to = r->pad_to;
    r->d.pad_limit = r->max_len;
    cg_seq2seq_set_recompute(r->model, rec->recompute);
    /* the peak of a kind but noam's: --lr, else the Noam curve's (a resumed
     * run's: recorded) */
    cg_train_sched *sc = &r->sched;
    int64_t d = r->model->cfg.d;
    cg_optim_config opt = cg_train_optim_config(rec, 0.0);
    if (o->resume && (rc = cg_train_sched_check(sc, o, &opt, o->resume)) >= 0)
        return rc; /* a fresh run's: mt_check */
    cg_train_sched_ready(sc, o->resume ? sc->lr : mt_peak(r, o, rec, d), d);
    if (!cg_mt_data_order(&r->d, (uint32_t)o->seed, (int)o->grad_accum, o->resume != NULL, t->start,
                          o->resume))
        return cg_prog_fail_lib(NULL);
    char extra[160] = "", note[128];
    if (o->extra_data)
        snprintf(extra, sizeof extra,
                 " (extra pairs: %lld read, %lld dropped as held-out, %lld dropped as "
                 "duplicates, %lld used)",
                 (long long)r->extra.read, (long long)r->extra.held_out,
                 (long long)r->extra.duplicates, (long long)r->extra.used);
    fprintf(
        stderr,
        "train %lld pairs%s in %lld batches, valid %lld, test %lld, %s vocab %lld, params %lld, "
        "precision %s%s%s\n",
        (long long)r->d.n_train, extra, (long long)r->d.batches.n_batches,
        (long long)r->d.split.n_valid, (long long)r->d.split.n_test,
        cg_tokenizer_kind_name(r->d.tok->kind), (long long)r->model->cfg.vocab,
        (long long)cg_module_num_params(CG_MODULE(r->model)), cg_precision_name(o->precision),
        cg_train_precision_note(o, note, sizeof note),
        o->resume      ? " (resumed)"
        : o->init_from ? (t->adapters ? " (fine-tuning LoRA adapters)" : " (fine-tuning)")
                       : "");
    *m = (cg_trainer_model){.name = "seq2seq",
                            .plot_title = "seq2seq: label-smoothed loss",
                            .module = CG_MODULE(r->model),
                            .dropout_rng = &r->model->dropout_rng,
                            .optim = opt,
                            .weight_decay_2d = rec->weight_decay,
                            .clip_norm = rec->clip_norm,
                            .self = r,
                            .batch = mt_batch,
                            .loss = mt_loss,
                            .lr = mt_lr,
                            .momentum = mt_momentum,
                            .evaluate = mt_evaluate,
                            .finish = mt_finish,
                            .config_json = mt_config,
                            .tok = r->d.tok,
                            .state_save = mt_state};
    return -1;
}

/* seq2seq train's checks of its flags, before any file is read: --lr or
 * --factor, --seed's 32 bits, the preset and the model they make (d
 * divisible by H, ...; the vocabulary, which the data gives, the
 * default's). */
int mt_check(void *self, const cg_train_opts *o, cg_train_recipe *rec)
{
    mt_run *r = self;
    const cg_cli_args *a = o->args;
    int rc = cg_train_check_lora(o, &r->lora);
    if (rc >= 0 || o->resume)
        return rc; /* resuming: the checkpoint's model and recipe (cg_trainer_begin) */
    rc = best_metric_check(r, o->best_metric, NULL);
    if (rc >= 0)
        return rc;
    if (cg_cli_given(a, &r->eval_beam) && r->eval_bleu == 0) {
        cg_prog_fail(
            "--eval-bleu-beam is the beam of --eval-bleu N's decoding: give --eval-bleu N");
        return CG_EXIT_USAGE;
    }
    if (cg_cli_given(a, &r->sched.factor) && strcmp(r->sched.text, "noam") != 0) {
        cg_prog_fail("--factor is noam's: give --lr (the peak) to --lr-schedule %.60s",
                     r->sched.text);
        return CG_EXIT_USAGE;
    }
    if (cg_cli_given(a, &rec->lr) && cg_cli_given(a, &r->sched.factor)) {
        cg_prog_fail("--lr and --factor both set the learning rate; give one");
        return CG_EXIT_USAGE;
    }
    if (o->seed > 0xffffffffULL) {
        cg_prog_fail("--seed: %llu is out of range [0, 4294967295] (the data's order is numpy's "
                     "RandomState(seed), 32 bits)",
                     (unsigned long long)o->seed);
        return CG_EXIT_USAGE;
    }
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_SEQ2SEQ_N_PRESETS, r->preset);
    cg_seq2seq_config cfg;
    if (!pr || !mt_config_from_flags(r, o, rec, pr, cg_seq2seq_config_default().vocab, &cfg)) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    cg_optim_config opt = cg_train_optim_config(rec, 0.0);
    r->sched.lr = mt_peak(r, o, rec, cfg.d); /* the flags' width (a base's may differ) */
    return cg_train_sched_check(&r->sched, o, &opt, NULL);
}

void mt_cleanup(void *self)
{
    mt_run *r = self;
    cg_seq2seq_free(r->model);
    cg_mt_data_free(&r->d);
}
