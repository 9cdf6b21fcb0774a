/* charlm: train, sample from and evaluate the decoder-only character
 * language model (models/charlm/charlm.h), nanoGPT style (commands: MAIN_HELP).
 * The training recipe is shared/reference/train_charlm.py's (vocabulary,
 * 90/10 split, random windows, AdamW with decay on 2-D parameters only,
 * clipping, warmup + cosine, fixed-seed evaluation batches, full validation
 * loss over consecutive windows); the loop is models/train/trainer.h's, as are
 * the exit codes and the one-line errors "charlm: error: ...". */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/charlm/charlm.h"
#include "autograd/ops.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/charlm_presets.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/data/data.h"
#include "models/train/dist.h"
#include "models/report/plot.h"
#include "models/charlm/sampling.h"
#include "models/train/program.h"
#include "models/text/vocab.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "charlm"
#define DEFAULT_DATA "data/moby_dick.txt"
#define DEFAULT_OUT "out/charlm.safetensors"
#define EVAL_BATCHES 20
#define EVAL_SEED 1234
#define WARMUP 100
#define WEIGHT_DECAY 0.1
#define CLIP_NORM 1.0
#define BATCH_SEED_MIX 0xd1b54a32d192ed03ULL /* batch stream != init stream */
#define LORA_SEED_MIX 0x2545f4914f6cdd1dULL  /* the adapters' A != the other streams */

/* Read the corpus once (models/data/data.h cg_corpus_read_tok: any stream, the
 * input limit) through *tok, or through a new tokenizer of kind made into
 * *tok; id gets the identity of the bytes read. */
static cg_corpus *read_corpus(const char *path, cg_tokenizer **tok, cg_tokenizer_kind kind,
                              int64_t vocab_size, cg_data_id *id)
{
    cg_corpus *c = cg_corpus_read_tok(path, tok, kind, vocab_size, id);
    if (!c)
        cg_data_default_hint(path, DEFAULT_DATA);
    return c;
}

/* ------------------------------------------------------------------ train */
static const char TRAIN_HELP[] =
    "usage: charlm train [options]\n"
    "Train the character language model (recipe: shared/reference/train_charlm.py:\n"
    "AdamW betas (0.9, 0.99), weight decay 0.1 on 2-D parameters, clipping at norm 1,\n"
    "100 warmup steps then cosine down to lr/10).\n"
    "charlm's own options and defaults:\n";

#define PRESETS cg_charlm_presets

/* The char LM as the trainer sees it. */
typedef struct {
    cg_trainer *t;
    const char *preset; /* --preset */
    cg_ft_lora lora;    /* --lora-rank and its kin */
    cg_charlm *model;
    cg_tokenizer *tok;
    cg_corpus *corpus;
    cg_split_view tr, va;
    int64_t B, T, r0, r1, steps;
    double lr, label_smoothing;
    cg_rng batch_rng;
    int64_t *x, *y; /* grad_accum batches of B x T */
    double tl, vl;  /* the last evaluation */
} lm_run;

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

static cg_tensor *lm_loss(void *self, int k)
{
    lm_run *r = self;
    int64_t off = k * r->B * r->T + r->r0 * r->T;
    return cg_charlm_forward_loss(r->model, r->x + off, r->r1 - r->r0, r->T, r->y + off,
                                  (float)r->label_smoothing);
}

static double lm_lr(void *self, int64_t step)
{
    lm_run *r = self;
    return cg_lr_warmup_cosine(step - 1, r->t->o->steps, WARMUP, r->lr, r->lr / 10);
}

static bool lm_evaluate(void *self, int64_t step, cg_eval_result *e)
{
    (void)step;
    lm_run *r = self;
    bool ok =
        cg_charlm_sampled_loss(r->model, r->tr, r->B, r->T, EVAL_BATCHES, EVAL_SEED, &r->tl) &&
        cg_charlm_sampled_loss(r->model, r->va, r->B, r->T, EVAL_BATCHES, EVAL_SEED, &r->vl);
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
        {"label_smoothing", CG_JF_F64, &r->label_smoothing, 0, 0.999999, false},
        {"batch_rng_seed", CG_JF_U64STR, &r->batch_rng.seed, 0, 0, false},
        {"batch_rng_counter", CG_JF_U64STR, &r->batch_rng.counter, 0, 0, false},
    };
    return cg_trainer_model_state(r->t, "charlm", o, f, 5);
}

/* The config of a fresh run from the flags (checked before the data is
 * read; the vocabulary size comes later). */
static int lm_config_from_flags(const cg_cli_args *a, cg_train_recipe *rc, const char *preset_name,
                                cg_charlm_config *cfg, int64_t *Bout)
{
    const cg_train_preset *pr = cg_train_preset_find(PRESETS, CG_CHARLM_N_PRESETS, preset_name);
    *cfg = cg_charlm_config_default(); /* layernorm, gelu */
    if (!pr || !cg_train_shape(a, pr, rc, &cfg->norm, &cfg->act))
        return cg_prog_fail_lib(NULL);
    const cg_train_preset *p = &rc->shape;
    cfg->d = p->d;
    cfg->H = p->H;
    cfg->layers = p->layers;
    cfg->d_ff = p->d_ff;
    cfg->max_len = p->T;
    cfg->norm_first = rc->norm_first;
    cfg->dropout = (float)rc->dropout;
    *Bout = p->B;
    return -1;
}

/* A char LM's architecture as --init-from compares it. */
static cg_train_arch lm_arch(const cg_charlm_config *c)
{
    return (cg_train_arch){
        .shape = {.d = c->d, .H = c->H, .layers = c->layers, .d_ff = c->d_ff, .T = c->max_len},
        .norm = c->norm,
        .act = c->act,
        .norm_first = c->norm_first};
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
 * from --dropout when given, masks from --seed), the flags checked against
 * it, LoRA adapters attached when asked for, and the trainer told. */
static int lm_init_from(lm_run *r, cg_trainer *t, const cg_train_opts *o,
                        const cg_train_recipe *rec, const cg_charlm_config *cfg)
{
    const cg_ft_lora *lora = &r->lora;
    const cg_cli_args *a = o->args;
    cg_charlm_load_opts lo = {.seed = o->seed,
                              .dropout = cg_cli_given(a, &rec->dropout) ? rec->dropout : NAN};
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
        cg_rng g = cg_rng_new(o->seed ^ LORA_SEED_MIX);
        if (lora->rank > 0 &&
            cg_ft_lora_attach(CG_MODULE(r->model), lora, &g, &r->model->dropout_rng) < 0)
            rc = cg_prog_fail("%s", cg_last_error());
        else if (!cg_trainer_set_origin(t, o->init_from, ck.file, lora->rank > 0))
            rc = cg_prog_fail("--init-from: %s", cg_last_error());
    }
    cg_charlm_ckpt_free(&ck);
    return rc;
}

/* --resume: the model and tokenizer from the checkpoint (a LoRA one's
 * base: --base, else the one it records) and the run's state. */
static int lm_resume(lm_run *r, const cg_train_opts *o)
{
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = o->base, .seed = 0, .dropout = NAN};
    if (!cg_charlm_ckpt_load_opts(o->resume, &lo, &ck))
        return cg_prog_fail_lib(NULL);
    if (o->base && !ck.adapter) {
        cg_charlm_ckpt_free(&ck);
        return cg_prog_fail("--base: '%s' is not a LoRA adapter checkpoint (it holds its "
                            "whole model)",
                            o->resume);
    }
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
    int rc = o->resume ? -1 : lm_config_from_flags(o->args, rec, r->preset, &cfg, &r->B);
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
    return (r->model = cg_charlm_new(&cfg, o->seed)) ? -1 : cg_prog_fail_lib(NULL);
}
/* The data's checks against the model, its windows and each rank's share
 * of the batch; the batches' memory. */
static int lm_data_checks(lm_run *r, const cg_train_opts *o)
{
    r->tr = cg_corpus_train(r->corpus);
    r->va = cg_corpus_val(r->corpus);
    if (r->corpus->unknown > 0)
        return cg_prog_fail("'%s' has %lld characters outside the checkpoint's vocabulary "
                            "(first U+%04X)",
                            o->data, (long long)r->corpus->unknown,
                            (unsigned)r->corpus->first_unknown);
    bool bpe = r->tok->kind == CG_TOK_BPE;
    if (r->tr.n <= r->T || r->va.n <= r->T)
        return cg_prog_fail("'%s' is too short: %lld %s give train/val splits of "
                            "%lld/%lld, but windows of %lld+1 are needed (use a longer text or "
                            "a smaller --block-size)",
                            o->data, (long long)r->corpus->n, bpe ? "tokens" : "characters",
                            (long long)r->tr.n, (long long)r->va.n, (long long)r->T);
    if (!cg_dist_share(r->B, &r->r0, &r->r1))
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
    fprintf(stderr,
            PROG ": %lld chars%s, vocab %lld, train %lld, val %lld, params %lld; %s d=%lld H=%lld "
                 "layers=%lld d_ff=%lld T=%lld B=%lld, %lld steps, precision %s\n",
            (long long)r->corpus->chars, r->tok->kind == CG_TOK_BPE ? " in bpe tokens" : "",
            (long long)cg_tokenizer_vocab_size(r->tok), (long long)r->tr.n, (long long)r->va.n,
            (long long)cg_module_num_params(CG_MODULE(r->model)),
            o->resume      ? "resumed"
            : o->init_from ? "base"
                           : r->preset,
            (long long)c->d, (long long)c->H, (long long)c->layers, (long long)c->d_ff,
            (long long)r->T, (long long)r->B, (long long)o->steps, cg_precision_name(o->precision));
}

/* Corpus, tokenizer and model (fresh, resumed or from a base), checked,
 * and the char LM as the trainer sees it. */
static int lm_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
                    cg_trainer_model *m)
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
    cg_charlm_set_recompute(r->model, rec->recompute);
    if ((rc = lm_data_checks(r, o)) >= 0)
        return rc;
    lm_announce(r, t, o);
    *m = (cg_trainer_model){.name = "charlm",
                            .plot_title = "charlm loss",
                            .module = CG_MODULE(r->model),
                            .dropout_rng = &r->model->dropout_rng,
                            .optim = cg_adamw_config(r->lr, 0.9, 0.99, 1e-8),
                            .weight_decay_2d = WEIGHT_DECAY,
                            .clip_norm = CLIP_NORM,
                            .eval_at_start = true,
                            .self = r,
                            .batch = lm_batch,
                            .loss = lm_loss,
                            .lr = lm_lr,
                            .evaluate = lm_evaluate,
                            .finish = lm_finish,
                            .config_json = lm_config,
                            .tok = r->tok,
                            .state_save = lm_state};
    return -1;
}

/* charlm train's checks of its flags: the LoRA flags and --base. */
static int lm_check(void *self, const cg_train_opts *o, const cg_train_recipe *rec)
{
    (void)rec;
    const cg_ft_lora *lora = &((lm_run *)self)->lora;
    const cg_cli_args *a = o->args;
    const void *lora_opts[] = {&lora->alpha, &lora->dropout, &lora->targets};
    for (int i = 0; i < 3 && !o->resume; i++)
        if (cg_cli_given(a, lora_opts[i]) && !cg_cli_given(a, &lora->rank)) {
            cg_prog_fail("%s needs --lora-rank", cg_train_given_name(a, lora_opts[i]));
            return CG_EXIT_USAGE;
        }
    if (cg_cli_given(a, &lora->rank) && !o->init_from && !o->resume) {
        cg_prog_fail("--lora-rank needs --init-from (adapters fine-tune a trained checkpoint)");
        return CG_EXIT_USAGE;
    }
    if (o->base && !o->resume) {
        cg_prog_fail("--base names the base of a LoRA checkpoint given to --resume (--init-from "
                     "names the checkpoint a new run starts from)");
        return CG_EXIT_USAGE;
    }
    return -1;
}

static void lm_cleanup(void *self)
{
    lm_run *r = self;
    cg_charlm_free(r->model);
    cg_tokenizer_free(r->tok);
    cg_corpus_free(r->corpus);
    free(r->x);
    free(r->y);
}

static const char TRAIN_NOTES[] =
    "  defaults: --data " DEFAULT_DATA " (made by scripts/prepare_data.sh),\n"
    "  --out " DEFAULT_OUT ", --steps 2000, --eval-every 250, --lr 1e-3,\n"
    "  --dropout 0, --label-smoothing 0, --norm layernorm, --act gelu, --norm-first true,\n"
    "  --tokenizer char\n"
    "\n";

static int cmd_train(int argc, char **argv)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 2000, 250);
    rec.lr = 1e-3;
    lm_run r = {.preset = "tiny", .lora = {.rank = 0, .alpha = NAN, .dropout = 0, .targets = NULL}};
    /* charlm train's flags, one row each (models/train/options.h: how to add
     * one), then the rows both train commands share */
    const cg_cli_opt opts[] = {
        {"--preset", CG_CLI_STR, &r.preset, 0, 0,
         "  --preset NAME      tiny (d 128, H 4, 4 layers, d_ff 512, T 64, B 12; default),\n"
         "                     base (d 384, H 6, 6 layers, d_ff 1536, T 256, B 16) or\n"
         "                     gpt2 (GPT-2 small: d 768, H 12, 12 layers, d_ff 3072, T 256,\n"
         "                     B 4)\n",
         CG_CLI_FIXED},
        {"--layers", CG_CLI_I64, &rec.shape.layers, 0, 1 << 10,
         "  --layers N         transformer blocks (default from the preset)\n", CG_CLI_FIXED},
        {"--block-size", CG_CLI_I64, &rec.shape.T, 1, 1 << 16,
         "  --block-size N     context length T (also --T)\n", CG_CLI_FIXED},
        {"--T", CG_CLI_I64, &rec.shape.T, 1, 1 << 16, NULL, CG_CLI_FIXED},
        {"--batch-size", CG_CLI_I64, &rec.shape.B, 1, 1 << 20,
         "  --batch-size N     windows per batch B (default from the preset)\n", CG_CLI_FIXED},
        {NULL, 0, NULL, 0, 0, TRAIN_NOTES, 0},
        {NULL, 0, NULL, 0, 0, "fine-tuning (nanoGPT's init_from; PEFT's LoRA):\n", 0},
        {"--init-from", CG_CLI_STR, &o.init_from, 0, 0,
         "  --init-from FILE   a new run from this checkpoint's weights, on --data: its\n"
         "                     shape and tokenizer, a fresh optimizer, step 0 (the file is\n"
         "                     only read; the checkpoint records it)\n",
         CG_CLI_FIXED},
        {"--lora-rank", CG_CLI_I64, &r.lora.rank, 1, 1 << 16,
         "  --lora-rank R      with --init-from: freeze the model and train LoRA adapters\n"
         "                     of rank R; the checkpoint holds only the adapters (sample and\n"
         "                     eval load the base with them)\n",
         CG_CLI_FIXED},
        {"--lora-alpha", CG_CLI_F64, &r.lora.alpha, 1e-6, 1e6,
         "  --lora-alpha A     the adapters' scale is A/R (default 2R)\n", CG_CLI_FIXED},
        {"--lora-dropout", CG_CLI_F64, &r.lora.dropout, 0, 0.999999,
         "  --lora-dropout P   dropout on the adapters' input (default 0)\n", CG_CLI_FIXED},
        {"--lora-targets", CG_CLI_STR, &r.lora.targets, 0, 0,
         "  --lora-targets L   the Linears adapted, comma-separated (default\n"
         "                     " CG_FT_LORA_TARGETS ")\n",
         CG_CLI_FIXED},
        {"--base", CG_CLI_STR, &o.base, 0, 0,
         "  --base FILE        with --resume of a LoRA run: its base checkpoint (default:\n"
         "                     the file it recorded)\n\n",
         0},
        CG_TRAIN_RECIPE_FLAGS(&rec),
        CG_TRAIN_RUN_FLAGS(&o),
    };
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    const cg_train_program p = {"charlm", TRAIN_HELP, DEFAULT_OUT, DEFAULT_DATA,
                                lm_check, lm_setup,   lm_cleanup};
    return cg_train_command(argc, argv, &args, &o, &rec, &p, &r);
}

/* ----------------------------------------------------------------- sample */
/* sample's and eval's checkpoint, loaded; standard output (their result) is
 * neither it nor the base it loads. False + error. */
static bool load_for_stdout(const char *ckpt, const cg_charlm_load_opts *lo, cg_charlm_ckpt *ck)
{
    if (!cg_out_check_stdout(ckpt, "--ckpt") || !cg_charlm_ckpt_load_opts(ckpt, lo, ck))
        return false;
    if (!ck->base_path || cg_out_check_stdout(ck->base_path, "its base"))
        return true;
    cg_charlm_ckpt_free(ck);
    return false;
}

static const char *SAMPLE_HELP =
    "usage: charlm sample [options]\n"
    "Generate text from a trained checkpoint (key/value-cached decoding).\n"
    "  --ckpt FILE         checkpoint (default " DEFAULT_OUT ")\n"
    "  --base FILE         a LoRA checkpoint's base (default: the file it recorded)\n"
    "  --prompt TEXT       start of the text (default a newline); characters not in\n"
    "                      the vocabulary are replaced, with a warning\n"
    "  --length N          characters (bpe: tokens) to generate (default 500)\n" CG_SAMPLE_HELP
    "  --no-cache          recompute the whole context at every step\n"
    "  --precision P       fp32 or bf16 matrix products (bf16 weights: about twice\n"
    "                      the speed); default: the checkpoint's training precision\n"
    "  --attention FILE    also draw the attention of every layer and head over the\n"
    "                      last (up to 32) characters or tokens as a PNG heatmap grid\n"
    "  --force             overwrite an existing --attention FILE (refused otherwise)\n"
    "  --threads N         threads for kernels\n"
    "Prints the prompt followed by the generated text.\n";

/* Attention heatmaps (layer x head) of a full forward over ids[0..n),
 * labelled with the tokenizer's pieces. */
static bool write_attention_png(cg_charlm *m, const cg_tokenizer *tok, const int64_t *ids,
                                int64_t n, const char *path)
{
    cg_mha **mods = malloc((size_t)(m->cfg.layers + 1) * sizeof *mods);
    if (!mods) {
        cg_set_error("out of memory");
        return false;
    }
    for (int64_t l = 0; l < m->cfg.layers; l++)
        mods[l] = m->block[l]->attn;
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *logits = cg_charlm_forward(m, ids, 1, n);
    cg_no_grad_end();
    bool ok =
        logits && cg_plot_attention_ids(path,
                                        "charlm attention (rows: queries, columns: "
                                        "keys)",
                                        (int)m->cfg.layers, mods, tok, ids, (int)n, ids, (int)n);
    cg_release(logits);
    cg_module_keep_attention_weights(CG_MODULE(m), false);
    free(mods);
    return ok;
}

/* sample's flags. */
typedef struct {
    const char *ckpt, *prompt, *attn_png, *base, *precision;
    int64_t length, threads;
    uint64_t seed;
    bool no_cache, force;
    cg_sample_opts so;
} sample_args;

/* Print the prompt, then each piece as it is generated from ck, the speed
 * line, and the attention picture when asked for: -1 or the exit code. */
static int generate(cg_charlm_ckpt *ck, const sample_args *a, cg_precision prec)
{
    int rc = -1;
    int64_t n = 0, *outp = NULL, unknown = 0, length = a->length;
    uint32_t first = 0;
    int64_t *ids =
        ck->vocab ? cg_vocab_encode_text(ck->vocab, a->prompt, "--prompt", &n, &unknown, &first)
                  : cg_tokenizer_encode(ck->tok, a->prompt, &n, NULL);
    if (ck->vocab)
        cg_vocab_warn_unknown(ck->vocab, PROG, "the prompt", unknown, first);
    cg_rng rng = cg_rng_new(a->seed);
    double t_gen = cg_now(), c_gen = cg_cpu_now();
    fputs(a->prompt, stdout); /* the prompt as given */
    fflush(stdout);
    if (!ids || !(outp = cg_charlm_generate_text(ck->model, ck->tok, ids, n, length, &a->so, &rng,
                                                 !a->no_cache, stdout)))
        rc = cg_prog_fail_lib(NULL);
    t_gen = cg_now() - t_gen;
    c_gen = cg_cpu_now() - c_gen;
    const char *unit = ck->vocab ? "characters" : "tokens";
    if (rc < 0) {
        fputc('\n', stdout); /* end the sample's line before the speed line on stderr */
        fflush(stdout);
        /* CPU time too: on a shared machine it moves less than the wall time */
        fprintf(stderr, PROG ": %lld %s in %.2f s (%.1f %s/s, %.2f CPU s, %s, %s)\n",
                (long long)length, unit, t_gen, t_gen > 0 ? (double)length / t_gen : 0.0, unit,
                c_gen, a->no_cache ? "full recompute" : "key/value cache", cg_precision_name(prec));
    }
    if (rc < 0 && a->attn_png) {
        int64_t total = n + length, w = total < 32 ? total : 32;
        if (w > ck->model->cfg.max_len)
            w = ck->model->cfg.max_len;
        if (!write_attention_png(ck->model, ck->tok, outp + total - w, w, a->attn_png))
            rc = cg_prog_fail("--attention: %s", cg_last_error());
        else
            fprintf(stderr, PROG ": attention heatmaps written to '%s'\n", a->attn_png);
    }
    fflush(stdout);
    free(ids);
    free(outp);
    return rc;
}

static int cmd_sample(int argc, char **argv)
{
    sample_args a = {.ckpt = DEFAULT_OUT, .prompt = "\n", .length = 500};
    cg_cli_opt opts[16] = {
        {"--force", CG_CLI_SWITCH, &a.force, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &a.base, 0, 0, NULL, 0},
        {"--ckpt", CG_CLI_STR, &a.ckpt, 0, 0, NULL, 0},
        {"--prompt", CG_CLI_STR, &a.prompt, 0, 0, NULL, 0},
        {"--precision", CG_CLI_STR, &a.precision, 0, 0, NULL, 0},
        {"--length", CG_CLI_I64, &a.length, 0, 10000000, NULL, 0},
        {"--no-cache", CG_CLI_SWITCH, &a.no_cache, 0, 0, NULL, 0},
        {"--attention", CG_CLI_STR, &a.attn_png, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &a.threads, 1, 1024, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, 9 + cg_sample_cli_opts(&a.so, &a.seed, opts + 9),
                           SAMPLE_HELP);
    if (rc >= 0 || (rc = cg_precision_flag(a.precision, NULL)) >= 0)
        return rc;
    if (a.attn_png && !cg_out_picture_check(a.attn_png, a.force, a.ckpt, "--ckpt"))
        return cg_prog_fail("--attention: %s", cg_last_error());
    cg_cli_set_threads(PROG, a.threads);
    cg_precision prec;
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = a.base, .seed = 0, .dropout = NAN};
    if (!load_for_stdout(a.ckpt, &lo, &ck))
        return cg_prog_fail_lib(NULL);
    /* the picture is no base the adapter loaded either (its other checks: above) */
    if (a.attn_png && ck.base_path &&
        !cg_out_picture_check(a.attn_png, true, ck.base_path, "its base"))
        rc = cg_prog_fail("--attention: %s", cg_last_error());
    else if (!cg_decode_precision(a.precision, cg_charlm_ckpt_train_json(&ck), a.ckpt, &prec))
        rc = cg_prog_fail_lib(NULL);
    else
        rc = generate(&ck, &a, prec);
    cg_charlm_ckpt_free(&ck);
    return rc < 0 ? 0 : rc;
}

/* ------------------------------------------------------------------- eval */
static const char *EVAL_HELP =
    "usage: charlm eval [options]\n"
    "Loss, perplexity and bits per character of a checkpoint on the validation\n"
    "split (last 10%) of a text, over consecutive windows of the model's context.\n"
    "  --ckpt FILE     checkpoint (default " DEFAULT_OUT ")\n"
    "  --base FILE     a LoRA checkpoint's base (default: the file it recorded)\n"
    "  --data FILE     text (default: the one the checkpoint was trained on, else\n"
    "                  " DEFAULT_DATA ")\n"
    "  --threads N     threads for kernels\n"
    "Prints one JSON line.\n";

static int cmd_eval(int argc, char **argv)
{
    const char *ckpt = DEFAULT_OUT, *data = NULL, *base = NULL;
    int64_t threads = 0;
    cg_cli_opt opts[] = {
        {"--ckpt", CG_CLI_STR, &ckpt, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &base, 0, 0, NULL, 0},
        {"--data", CG_CLI_STR, &data, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL, 0},
    };
    int prc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), EVAL_HELP);
    if (prc >= 0)
        return prc;
    cg_cli_set_threads(PROG, threads);
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = base, .seed = 0, .dropout = NAN};
    if (!load_for_stdout(ckpt, &lo, &ck))
        return cg_prog_fail_lib(NULL);
    const char *tj = cg_charlm_ckpt_train_json(&ck);
    cg_precision prec; /* the products as trained */
    cg_corpus *corpus = NULL;
    char *path = cg_train_data_path(tj, data, DEFAULT_DATA);
    cg_data_id id;
    double loss;
    int64_t nwin, T = ck.model->cfg.max_len;
    int rc = path && cg_out_check_stdout(path, "--data") && cg_train_precision(tj, ckpt, &prec) &&
                     (corpus = read_corpus(path, &ck.tok, ck.tok->kind, 0, &id)) &&
                     cg_train_data_check(tj, ckpt, &id)
                 ? -1
                 : cg_prog_fail_lib(NULL);
    if (rc < 0) {
        if (ck.vocab)
            cg_vocab_warn_unknown(ck.vocab, PROG, path, corpus->unknown, corpus->first_unknown);
        cg_set_matmul_precision(prec);
        if (!cg_charlm_full_loss(ck.model, cg_corpus_val(corpus), T, &loss, &nwin))
            rc = cg_prog_fail("'%s': %s", path, cg_last_error());
    }
    cJSON *j = rc < 0 ? cJSON_CreateObject() : NULL;
    if (j) {
        cg_json_put_num(j, "val_loss", "%.4f", loss);
        cg_json_put_num(j, "perplexity", "%.4f", exp(loss));
        cg_json_put_num(j, "bits_per_char", "%.4f", cg_corpus_val_bpc(corpus, loss));
        cg_json_put_int(j, "windows", nwin);
        cg_json_put_int(j, "T", T);
        cg_json_put_int(j, "step", ck.step);
        cg_json_put_str(j, "precision", cg_precision_name(prec));
        cg_json_put_str(j, "tokenizer", cg_tokenizer_kind_name(ck.tok->kind));
        if (!cg_json_print_line(stdout, j))
            rc = cg_prog_fail_lib(NULL);
    } else if (rc < 0) {
        rc = cg_prog_fail("out of memory");
    }
    cJSON_Delete(j);
    fflush(stdout);
    free(path);
    cg_corpus_free(corpus);
    cg_charlm_ckpt_free(&ck);
    return rc < 0 ? 0 : rc;
}

/* ---------------------------------------------------------------- average */
/* Does the checkpoint at path load as a char LM? (average's check) */
static bool lm_loads(const char *path)
{
    cg_charlm_ckpt ck;
    bool ok = cg_charlm_ckpt_load(path, &ck);
    cg_charlm_ckpt_free(&ck);
    return ok;
}

/* ------------------------------------------------------------------- main */
static const char MAIN_HELP[] =
    "usage: charlm COMMAND [options]\n"
    "The zoo's decoder-only character language model.\n"
    "  train    train a model on a text (default " DEFAULT_DATA ")\n"
    "  sample   generate text from a checkpoint\n"
    "  eval     validation loss, perplexity and bits per character\n"
    "  average  average the weights of checkpoints (e.g. those of train --keep-last)\n"
    "Run 'charlm COMMAND --help' for a command's options. Exit status: 0 done,\n"
    "1 failed, 2 bad command line.\n";

int main(int argc, char **argv)
{
    static const cg_prog_command cmds[] = {
        {"train", cmd_train}, {"sample", cmd_sample}, {"eval", cmd_eval}};
    static const cg_program p = {
        PROG, MAIN_HELP, cmds, 3, {"charlm", cg_charlm_config_same_arch, lm_loads}};
    return cg_program_main(argc, argv, &p);
}
