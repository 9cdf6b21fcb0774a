/* cgrad zoo: seq2seq checkpoints (see seq2seq_ckpt.h). */
#include "models/seq2seq/seq2seq_ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/train/finetune.h"

/* ------------------------------------------------------------ seq2seq */
bool cg_seq2seq_ckpt_save(const char *path, const cg_seq2seq *model, const cg_tokenizer *tok,
                          const cg_optim *optim, int64_t step, const char *train_json)
{
    return cg_ckpt_save_owned(path, "seq2seq", cg_seq2seq_config_to_json(&model->cfg), tok,
                              CG_MODULE(model), optim, step, train_json);
}

void cg_seq2seq_ckpt_free(cg_seq2seq_ckpt *c)
{
    if (!c)
        return;
    cg_seq2seq_free(c->model);
    cg_tokenizer_free(c->tok);
    cg_st_close(c->file);
    free(c->base_path);
    memset(c, 0, sizeof *c);
}

bool cg_seq2seq_ckpt_load(const char *path, cg_seq2seq_ckpt *out)
{
    return cg_seq2seq_ckpt_load_weights(path, NULL, CG_CKPT_AVERAGE, out);
}

bool cg_seq2seq_ckpt_load_weights(const char *path, const char *base, cg_ckpt_weights w,
                                  cg_seq2seq_ckpt *out)
{
    const cg_seq2seq_load_opts o = {.seed = 0,
                                    .dropout = NAN,
                                    .attn_dropout = NAN,
                                    .label_smoothing = NAN,
                                    .word_dropout = NAN,
                                    .weights = w,
                                    .base = base};
    return cg_seq2seq_ckpt_load_opts(path, &o, out);
}

static int load_at(const char *path, const cg_seq2seq_load_opts *o, const char *adapter,
                   cg_seq2seq_ckpt *out);

/* An adapter checkpoint's base (models/train/finetune.h cg_ft_base_loader):
 * built with the adapter's recipe (cfg's dropouts and label smoothing),
 * masks from seed. */
typedef struct {
    uint64_t seed;
    cg_seq2seq_config cfg; /* the adapter's */
    cg_seq2seq_ckpt b;     /* the base loaded */
} mt_base;

static int load_base(void *ctx, const char *base_path, const char *adapter, cg_ft_base *out)
{
    mt_base *x = ctx;
    const cg_seq2seq_load_opts bo = {.seed = x->seed,
                                     .dropout = x->cfg.dropout,
                                     .attn_dropout = x->cfg.attn_dropout,
                                     .label_smoothing = x->cfg.label_smoothing,
                                     .word_dropout = x->cfg.word_dropout,
                                     .weights = CG_CKPT_AVERAGE,
                                     .base = NULL};
    int got = load_at(base_path, &bo, adapter, &x->b);
    if (got > 0)
        *out = (cg_ft_base){CG_MODULE(x->b.model), x->b.file, &x->b.model->dropout_rng};
    return got;
}

/* An adapter checkpoint (h, open): its base loaded, checked and adapted. */
static bool load_adapter(const char *path, const cg_seq2seq_load_opts *o, const cg_ft_ckpt *h,
                         cg_seq2seq_ckpt *out)
{
    mt_base x = {.seed = o->seed};
    if (!cg_seq2seq_config_from_json(cg_st_metadata(h->file, "config"), &x.cfg)) {
        cg_prefix_error("checkpoint '%s': ", path);
        return false;
    }
    const cg_ft_base_loader l = {cg_seq2seq_config_same_arch, load_base, &x};
    bool ok = cg_ft_adapt(h, path, o->base, o->weights, &l, &out->averaged, &out->base_path);
    if (ok) {
        out->model = x.b.model;
        out->tok = x.b.tok;
        x.b.model = NULL;
        x.b.tok = NULL;
    }
    cg_seq2seq_ckpt_free(&x.b);
    return ok;
}

bool cg_seq2seq_ckpt_load_opts(const char *path, const cg_seq2seq_load_opts *o,
                               cg_seq2seq_ckpt *out)
{
    return load_at(path, o, NULL, out) > 0;
}

/* Load the checkpoint at path; `adapter`: the adapter checkpoint whose base
 * it is (then it must be a full checkpoint), or NULL. 1: loaded; 0: failed;
 * -1: refused as the base of `adapter` for being an adapter itself. */
static int load_at(const char *path, const cg_seq2seq_load_opts *o, const char *adapter,
                   cg_seq2seq_ckpt *out)
{
    const cg_ckpt_weights w = o->weights;
    memset(out, 0, sizeof *out);
    cg_ft_ckpt h;
    int rc = cg_ft_open(path, "seq2seq", adapter, o->base, &h);
    if (rc <= 0)
        return rc;
    cg_st_file *f = out->file = h.file;
    out->step = h.step;
    if ((out->adapter = h.adapter)) {
        if (!load_adapter(path, o, &h, out))
            goto fail;
        return 1;
    }
    cg_seq2seq_config cfg;
    if (!cg_seq2seq_config_from_json(cg_st_metadata(f, "config"), &cfg)) {
        cg_prefix_error("checkpoint '%s': ", path);
        goto fail;
    }
    cfg.dropout = isnan(o->dropout) ? cfg.dropout : (float)o->dropout;
    cfg.attn_dropout = isnan(o->attn_dropout) ? cfg.attn_dropout : (float)o->attn_dropout;
    cfg.label_smoothing =
        isnan(o->label_smoothing) ? cfg.label_smoothing : (float)o->label_smoothing;
    cfg.word_dropout = isnan(o->word_dropout) ? cfg.word_dropout : (float)o->word_dropout;
    if (!(out->tok = cg_tokenizer_read(f, true))) /* names the file */
        goto fail;
    if (cg_tokenizer_vocab_size(out->tok) != cfg.vocab) {
        cg_set_error("checkpoint '%s': the %s tokenizer has %lld ids but the config's vocab "
                     "is %lld",
                     path, cg_tokenizer_kind_name(out->tok->kind),
                     (long long)cg_tokenizer_vocab_size(out->tok), (long long)cfg.vocab);
        goto fail;
    }
    double d = (double)cfg.d, ff = (double)cfg.d_ff;
    double need = (double)cfg.vocab * d + (double)cfg.enc_layers * (4 * d * d + 2 * d * ff) +
                  (double)cfg.dec_layers * (8 * d * d + 2 * d * ff);
    if (!cg_ckpt_config_fits(need, cfg.max_len, cfg.d, f, path))
        goto fail;
    out->model = cg_seq2seq_new_skip_init(&cfg, o->seed);
    if (!cg_ckpt_load_params(CG_MODULE(out->model), f, path) ||
        (w != CG_CKPT_TRAINED &&
         !cg_ckpt_use_average(CG_MODULE(out->model), f, path, &out->averaged)))
        goto fail;
    return 1;
fail:
    cg_seq2seq_ckpt_free(out);
    return 0;
}

cg_module *cg_seq2seq_load_adapted(const char *path, const char *base, cg_ckpt_weights w,
                                   char **base_path)
{
    cg_seq2seq_ckpt ck;
    if (!cg_seq2seq_ckpt_load_weights(path, base, w, &ck))
        return NULL;
    cg_module *m = CG_MODULE(ck.model); /* (merge checked it is an adapter's) */
    *base_path = ck.base_path;
    ck.model = NULL;
    ck.base_path = NULL;
    cg_seq2seq_ckpt_free(&ck);
    return m;
}
