/* charlm's training glue: what the charlm program's `train` command plugs
 * into the trainer (models/train/program.h cg_train_command). The char LM
 * as the trainer sees it (batches of random windows, the loss, the warmup +
 * cosine schedule, the sampled and full evaluations, the state a checkpoint
 * keeps), and its set-up: the config from --preset and the flags, a fresh
 * model, --init-from's base (with LoRA adapters) or --resume's checkpoint,
 * the corpus and its checks against the model. Moved here from charlm_main.c
 * (issue 35), which keeps the flag tables, the help texts and the commands. */
#include "models/charlm/charlm_train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/charlm_presets.h"
#include "models/util/config_json.h"
#include "dist/dist.h"
#include "models/train/model_common.h"
#include "models/train/train_common.h"
#include "optim/optim.h"

#define EVAL_BATCHES 20
#define EVAL_SEED 1234
#define BATCH_SEED_MIX 0xd1b54a32d192ed03ULL /* batch stream != init stream */

#define PRESETS cg_charlm_presets

/* Read the corpus once (models/data/data.h cg_corpus_read_tok: any stream, the
 * input limit) through *tok, or through a new tokenizer of kind made into
 * *tok; id gets the identity of the bytes read. */
cg_corpus *read_corpus(const char *path, cg_tokenizer **tok, cg_tokenizer_kind kind,
                       int64_t vocab_size, cg_data_id *id)
{
    cg_corpus *c = cg_corpus_read_tok(path, tok, kind, vocab_size, id);
    if (!c)
        cg_data_default_hint(path, DEFAULT_DATA);
    return c;
}

static bool lm_batch(void *self, int k, double *weight, double *tokens)
{
    lm_run *r = self;
    int64_t n = r->B * r->T;
    if (!cg_get_batch(r->tr, r->B, r->T, &r->batch_rng, r->x + k * n, r->y + k * n))
        return false;
    *weight = (double)(r->r1 - r->r0);
    *tokens = (double)((r->r1 - r->r0) * r->T);
    return true;
}

static cg_tensor *lm_loss(void *self, int k, float grad_scale)
{
    lm_run *r = self;
    int64_t off = k * r->B * r->T + r->r0 * r->T;
    return cg_charlm_forward_loss(r->model, r->x + off, r->r1 - r->r0, r->T, r->y + off,
                                  (float)r->label_smoothing, grad_scale);
}

static double lm_lr(void *self, int64_t step)
{
    lm_run *r = self;
    return cg_train_sched_lr(&r->sched, r->t->o->steps, step, &r->t->hist);
}

static double lm_momentum(void *self, int64_t step)
{
    lm_run *r = self;
    return cg_train_sched_momentum(&r->sched, r->t->o->steps, step);
}

static bool lm_evaluate(void *self, int64_t step, cg_eval_result *e)
{
    (void)step;
    lm_run *r = self;
    bool ok = cg_charlm_sampled_loss(r->model, r->tr, r->B, r->T, EVAL_BATCHES, EVAL_SEED,
                                     cg_train_interrupted, &r->tl) &&
              cg_charlm_sampled_loss(r->model, r->va, r->B, r->T, EVAL_BATCHES, EVAL_SEED,
                                     cg_train_interrupted, &r->vl);
    e->train = r->tl;
    e->val = r->vl;
    return ok;
}

static bool lm_finish(void *self, const cg_trainer *t, cJSON *j)
{
    (void)t;
    lm_run *r = self;
    double val_loss;
    int64_t nwin;
    if (!cg_charlm_full_loss(r->model, r->va, r->T, &val_loss, &nwin))
        return false;
    fprintf(stderr, PROG ": full validation split: %lld windows of %lld, loss %.4f\n",
            (long long)nwin, (long long)r->T, val_loss);
    cg_json_put_num(j, "train_loss", "%.4f", r->tl);
    cg_json_put_num(j, "val_loss", "%.4f", val_loss);
    cg_json_put_num(j, "val_loss_sampled", "%.4f", r->vl);
    cg_json_put_num(j, "val_bpc", "%.4f", cg_corpus_val_bpc(r->corpus, val_loss));
    cg_json_put_str(j, "tokenizer", cg_tokenizer_kind_name(r->tok->kind));
    return true;
}

static char *lm_config(void *self)
{
    return cg_charlm_config_to_json(&((lm_run *)self)->model->cfg);
}

/* The char LM's own state: its recipe and the batch stream, written into o
 * or (o NULL) read back when resuming. */
static bool lm_state(void *self, cJSON *o)
{
    lm_run *r = self;
    const cg_json_field f[] = {
        {"batch_size", CG_JF_I64, &r->B, 1, 1 << 20, false},
        {"lr", CG_JF_F64, &r->lr, 1e-12, 10, false},
        {"label_smoothing", CG_JF_F64, &r->label_smoothing, 0, 1, false},
        {"batch_rng_seed", CG_JF_U64STR, &r->batch_rng.seed, 0, 0, false},
        {"batch_rng_counter", CG_JF_U64STR, &r->batch_rng.counter, 0, 0, false},
    };
    enum { N = (int)(sizeof f / sizeof f[0]) };
    cg_json_field all[N + CG_TRAIN_SCHED_NFIELDS];
    memcpy(all, f, sizeof f);
    return cg_trainer_model_state(r->t, "charlm", o, all,
                                  N + cg_train_sched_fields(&r->sched, all + N));
}

/* The config of a fresh run from the preset and the flags (the vocabulary
 * size, the default's until the data gives it, comes later). False + error
 * naming the flag. */
static bool lm_config_from_flags(const cg_cli_args *a, cg_train_recipe *rc, const char *preset_name,
                                 cg_charlm_config *cfg, int64_t *Bout)
{
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_CHARLM_N_PRESETS, preset_name);
    *cfg = cg_charlm_config_default(); /* layernorm, gelu */
    if (!pr || !cg_train_shape(a, pr, rc, &cfg->norm, &cfg->act))
        return false;
    const cg_train_preset *p = &rc->shape;
    cfg->d = p->d;
    cfg->H = p->H;
    cfg->layers = p->layers;
    cfg->d_ff = p->d_ff;
    cfg->max_len = p->T;
    cfg->norm_first = rc->norm_first;
    cfg->bias = rc->bias;
    cfg->dropout = (float)rc->dropout;
    cfg->attn_dropout = (float)rc->attn_dropout;
    cfg->kv_heads = rc->kv_heads;
    cfg->pos_enc = rc->pos;
    cfg->emb_scale = rc->emb_scale;
    cfg->rope_theta = rc->rope_theta;
    *Bout = p->B;
    return true;
}

/* A char LM's architecture as --init-from compares it. */
static cg_train_arch lm_arch(const cg_charlm_config *c)
{
    return CG_MODEL_TRAIN_ARCH(
        c, {.d = c->d, .H = c->H, .layers = c->layers, .d_ff = c->d_ff, .T = c->max_len});
}

/* --init-from: the flags given (cfg: the config they and the preset make)
 * against the base ck at path (models/train/options.h). */
static int lm_check_base(const cg_cli_args *a, const cg_train_recipe *rec,
                         const char *const *preset, const cg_charlm_config *cfg,
                         const cg_charlm_ckpt *ck, const char *path)
{
    cg_train_arch want = lm_arch(cfg), have = lm_arch(&ck->model->cfg);
    return cg_train_check_base(a, rec, preset, &want, &have, ck->tok, path);
}

/* --init-from: the model and tokenizer from the base checkpoint (dropout
 * from --dropout and --attention-dropout when given, masks from --seed),
 * the flags checked against it, LoRA adapters attached when asked for,
 * and the trainer told. */
static int lm_init_from(lm_run *r, cg_trainer *t, const cg_train_opts *o,
                        const cg_train_recipe *rec, const cg_charlm_config *cfg)
{
    const cg_ft_lora *lora = &r->lora;
    const cg_cli_args *a = o->args;
    cg_charlm_load_opts lo = {.seed = o->seed,
                              .dropout = cg_cli_given(a, &rec->dropout) ? rec->dropout : NAN,
                              .set_attn_dropout = cg_cli_given(a, &rec->attn_dropout),
                              .attn_dropout = rec->attn_dropout,
                              .weights = o->init_no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE};
    cg_charlm_ckpt ck;
    if (!cg_charlm_ckpt_load_opts(o->init_from, &lo, &ck))
        return cg_prog_fail("--init-from: %s", cg_last_error());
    int rc = -1;
    if (ck.adapter)
        rc = cg_prog_fail("--init-from: '%s' is a LoRA adapter checkpoint (of the base '%s'); "
                          "start from a full checkpoint: its base, or a full fine-tune",
                          o->init_from, ck.base_path);
    else
        rc = lm_check_base(a, rec, &r->preset, cfg, &ck, o->init_from);
    /* the batch size: given, else the base's, else the preset's */
    const cg_json_field fb = {"batch_size", CG_JF_I64, &r->B, 1, 1 << 20, true};
    if (rc < 0 && !cg_cli_given(a, &rec->shape.B) &&
        !cg_train_model_fields(cg_charlm_ckpt_train_json(&ck), o->init_from, "charlm", &fb, 1))
        rc = cg_prog_fail_lib(NULL);
    if (rc < 0) {
        r->model = ck.model;
        r->tok = ck.tok;
        ck.model = NULL;
        ck.tok = NULL;
        if (cg_ft_lora_attach_run(CG_MODULE(r->model), lora, o->seed, &r->model->dropout_rng) < 0)
            rc = cg_prog_fail("%s", cg_last_error());
        else if (!cg_trainer_set_origin(t, o->init_from, ck.file, lora->rank > 0))
            rc = cg_prog_fail("--init-from: %s", cg_last_error());
        else if (ck.averaged) /* the weights its evaluations judged (a refusal: only why) */
            cg_prog_note_average(ck.file, o->init_from);
    }
    cg_charlm_ckpt_free(&ck);
    return rc;
}

/* --resume: the model and tokenizer from the checkpoint (a LoRA one's
 * base: --base, else the one it records) and the run's state. */
static int lm_resume(lm_run *r, const cg_train_opts *o)
{
    cg_charlm_ckpt ck;
    /* the trained weights (the average, if any, is the trainer's to read) */
    const cg_charlm_load_opts lo = {
        .base = o->base, .seed = 0, .dropout = NAN, .weights = CG_CKPT_TRAINED};
    if (!cg_charlm_ckpt_load_opts(o->resume, &lo, &ck)) /* refuses --base with a full one */
        return cg_prog_fail_lib(NULL);
    r->model = ck.model;
    r->tok = ck.tok;
    ck.model = NULL;
    ck.tok = NULL;
    cg_charlm_ckpt_free(&ck);
    return lm_state(r, NULL) ? -1 : cg_prog_fail_lib(NULL);
}

/* The corpus (*id: its identity) and the model: resumed, from --init-from's
 * base, or new from the flags. */
static int lm_data_model(lm_run *r, cg_trainer *t, const cg_train_opts *o, cg_train_recipe *rec,
                         cg_data_id *id)
{
    cg_charlm_config cfg;
    if (strcmp(r->init, "normal") != 0 && strcmp(r->init, "gpt2") != 0)
        return cg_prog_fail("--init: '%s' is not one of normal, gpt2", r->init), CG_EXIT_USAGE;
    if (o->init_from && cg_cli_given(o->args, &r->init))
        return cg_prog_fail("--init draws a new model's weights; --init-from takes its base's: "
                            "drop --init"),
               CG_EXIT_USAGE;
    int rc = o->resume || lm_config_from_flags(o->args, rec, r->preset, &cfg, &r->B)
                 ? -1
                 : cg_prog_fail_lib(NULL);
    if (rc < 0 && o->init_from)
        rc = lm_init_from(r, t, o, rec, &cfg);
    if (rc < 0 && o->resume)
        rc = lm_resume(r, o);
    if (rc >= 0)
        return rc;
    if (o->resume)
        return (r->corpus = read_corpus(o->data, &r->tok, CG_TOK_CHAR, 0, id))
                   ? -1
                   : cg_prog_fail_lib(NULL);
    if (!(r->corpus = read_corpus(o->data, &r->tok, rec->tokenizer, rec->vocab_size, id)))
        return cg_prog_fail_lib(NULL);
    r->lr = rec->lr;
    r->label_smoothing = rec->label_smoothing;
    r->batch_rng = cg_rng_new(o->seed ^ BATCH_SEED_MIX);
    if (o->init_from) /* the base's model */
        return -1;
    cfg.vocab = cg_tokenizer_vocab_size(r->tok);
    cfg.loss_chunk = cg_train_loss_chunk(cfg.vocab);
    cg_train_vocab_warn(r->tok, rec->vocab_size);
    if (!cg_charlm_config_check(&cfg))
        return cg_prog_fail("%s", cg_last_error());
    if (!(r->model = cg_charlm_new(&cfg, o->seed)))
        return cg_prog_fail_lib(NULL);
    if (!strcmp(r->init, "gpt2"))
        cg_charlm_gpt2_init(r->model);
    return -1;
}
/* The data's checks against the model, its windows and each rank's share
 * of the batch; the batches' memory. */
static int lm_data_checks(lm_run *r, const cg_train_opts *o)
{
    r->tr = cg_corpus_train(r->corpus);
    r->va = cg_corpus_val(r->corpus);
    if (r->corpus->unknown > 0)
        return cg_prog_fail("'%s' has %lld character%s outside the checkpoint's vocabulary "
                            "(first U+%04X)",
                            o->data, (long long)r->corpus->unknown,
                            r->corpus->unknown == 1 ? "" : "s", (unsigned)r->corpus->first_unknown);
    bool bpe = r->tok->kind == CG_TOK_BPE;
    if (r->tr.n <= r->T || r->va.n <= r->T)
        return cg_prog_fail("'%s' is too short: %lld %s give train/val splits of "
                            "%lld/%lld, but windows of %lld+1 are needed (use a longer text or "
                            "a smaller --block-size)",
                            o->data, (long long)r->corpus->n, bpe ? "tokens" : "characters",
                            (long long)r->tr.n, (long long)r->va.n, (long long)r->T);
    /* resumed, the batch is the checkpoint's (--batch-size is refused) */
    const bool split = cg_dist_share(r->B, &r->r0, &r->r1);
    if (!split && o->resume)
        return cg_prog_fail("'%s' trains batches of %lld windows, which cannot be split over %d "
                            "ranks (one window per rank at least): resume on at most %lld rank%s",
                            o->resume, (long long)r->B, cg_dist_size(), (long long)r->B,
                            r->B == 1 ? "" : "s");
    if (!split)
        return cg_prog_fail("--batch-size %lld is smaller than the %d ranks", (long long)r->B,
                            cg_dist_size());
    size_t nb = (size_t)(r->B * r->T * o->grad_accum);
    r->x = malloc(nb * sizeof *r->x);
    r->y = malloc(nb * sizeof *r->y);
    if (!r->x || !r->y)
        return cg_prog_fail("out of memory for batches of %lld x %lld", (long long)r->B,
                            (long long)r->T);
    return -1;
}

/* The run's lines on stderr before training. */
static void lm_announce(const lm_run *r, const cg_trainer *t, const cg_train_opts *o)
{
    const cg_charlm_config *c = &r->model->cfg;
    if (t->from_origin)
        fprintf(stderr, PROG ": fine-tuning '%s' (step %lld)%s\n", t->origin.id.path,
                (long long)t->origin.step, t->adapters ? " with LoRA adapters" : "");
    char note[128];
    fprintf(stderr,
            PROG ": %lld chars%s, vocab %lld, train %lld, val %lld, params %lld; %s d=%lld H=%lld "
                 "layers=%lld d_ff=%lld T=%lld B=%lld, %lld steps, precision %s%s\n",
            (long long)r->corpus->chars, r->tok->kind == CG_TOK_BPE ? " in bpe tokens" : "",
            (long long)cg_tokenizer_vocab_size(r->tok), (long long)r->tr.n, (long long)r->va.n,
            (long long)cg_module_num_params(CG_MODULE(r->model)),
            o->resume      ? "resumed"
            : o->init_from ? "base"
                           : r->preset,
            (long long)c->d, (long long)c->H, (long long)c->layers, (long long)c->d_ff,
            (long long)r->T, (long long)r->B, (long long)o->steps, cg_precision_name(o->precision),
            cg_train_precision_note(o, note, sizeof note));
}

/* Corpus, tokenizer and model (fresh, resumed or from a base), checked,
 * and the char LM as the trainer sees it. */
int lm_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec, cg_trainer_model *m)
{
    lm_run *r = self;
    r->t = t;
    cg_data_id id;
    int rc = lm_data_model(r, t, o, rec, &id);
    if (rc >= 0)
        return rc;
    if (!cg_trainer_set_data(t, &id))
        return cg_prog_fail_lib(NULL);
    r->T = r->model->cfg.max_len;
    cg_optim_config opt = cg_train_optim_config(rec, r->lr);
    r->sched.lr = r->lr; /* the checkpoint's: checked as recorded (a fresh run's in lm_check) */
    if (o->resume && (rc = cg_train_sched_check(&r->sched, o, &opt, o->resume)) >= 0)
        return rc;
    cg_train_sched_ready(&r->sched, r->lr, r->model->cfg.d);
    cg_charlm_set_recompute(r->model, rec->recompute);
    if ((rc = lm_data_checks(r, o)) >= 0)
        return rc;
    lm_announce(r, t, o);
    cg_train_sched_note(&r->sched, o->resume, t->ckpt_steps, o->steps, t->start, &t->hist);
    *m = (cg_trainer_model){.name = "charlm",
                            .plot_title = "charlm loss",
                            .module = CG_MODULE(r->model),
                            .dropout_rng = &r->model->dropout_rng,
                            .optim = opt,
                            .weight_decay_2d = rec->weight_decay,
                            .clip_norm = rec->clip_norm,
                            .eval_at_start = true,
                            .self = r,
                            .batch = lm_batch,
                            .loss = lm_loss,
                            .lr = lm_lr,
                            .momentum = lm_momentum,
                            .evaluate = lm_evaluate,
                            .finish = lm_finish,
                            .config_json = lm_config,
                            .tok = r->tok,
                            .state_save = lm_state};
    return -1;
}

/* charlm train's checks of its flags, before any file is read: the
 * preset, the model they make (a fresh run: d divisible by H, ...), the
 * LoRA flags and --base. */
int lm_check(void *self, const cg_train_opts *o, cg_train_recipe *rec)
{
    lm_run *r = self;
    const cg_cli_args *a = o->args;
    cg_charlm_config cfg;
    int64_t B;
    if (!o->resume && (!lm_config_from_flags(a, rec, r->preset, &cfg, &B) ||
                       (!o->init_from && !cg_charlm_config_check(&cfg)))) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    int rc = cg_train_check_lora(o, &r->lora);
    if (rc >= 0 || o->resume)
        return rc; /* resuming: the checkpoint's schedule (lm_setup) */
    cg_optim_config opt = cg_train_optim_config(rec, rec->lr);
    r->sched.lr = rec->lr;
    return cg_train_sched_check(&r->sched, o, &opt, NULL);
}

void lm_cleanup(void *self)
{
    lm_run *r = self;
    cg_charlm_free(r->model);
    cg_tokenizer_free(r->tok);
    cg_corpus_free(r->corpus);
    free(r->x);
    free(r->y);
}
