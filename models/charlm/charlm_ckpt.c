/* cgrad zoo: charlm checkpoints (see charlm_ckpt.h). */
#include "models/charlm/charlm_ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

bool cg_charlm_ckpt_save(const char *path, const cg_charlm *model, const cg_vocab *vocab,
                         const cg_optim *optim, int64_t step, const char *train_json)
{
    /* a character tokenizer borrowing vocab (not freed) */
    const cg_tokenizer tok = {.kind = CG_TOK_CHAR, .cv = (cg_vocab *)vocab};
    return cg_ckpt_save_owned(path, "charlm", cg_charlm_config_to_json(&model->cfg), &tok,
                              CG_MODULE(model), optim, step, train_json);
}

void cg_charlm_ckpt_free(cg_charlm_ckpt *c)
{
    if (!c)
        return;
    cg_charlm_free(c->model);
    cg_tokenizer_free(c->tok);
    cg_st_close(c->file);
    free(c->base_path);
    memset(c, 0, sizeof *c);
}

const char *cg_charlm_ckpt_train_json(const cg_charlm_ckpt *c)
{
    return c->file ? cg_st_metadata(c->file, "train") : NULL;
}

static int load_at(const char *path, const cg_charlm_load_opts *o, const char *adapter,
                   cg_charlm_ckpt *out);

/* An adapter checkpoint's base (models/train/finetune.h cg_ft_base_loader):
 * built with the adapter's recipe (cfg's dropouts), masks from seed. */
typedef struct {
    uint64_t seed;
    cg_charlm_config cfg; /* the adapter's */
    cg_charlm_ckpt b;     /* the base loaded */
} lm_base;

static int load_base(void *ctx, const char *base_path, const char *adapter, cg_ft_base *out)
{
    lm_base *x = ctx;
    const cg_charlm_load_opts bo = {.seed = x->seed,
                                    .dropout = x->cfg.dropout,
                                    .set_attn_dropout = true,
                                    .attn_dropout = x->cfg.attn_dropout};
    int got = load_at(base_path, &bo, adapter, &x->b);
    if (got > 0)
        *out = (cg_ft_base){CG_MODULE(x->b.model), x->b.file, &x->b.model->dropout_rng};
    return got;
}

/* An adapter checkpoint (h, open): its base loaded, checked and adapted
 * (cg_ft_adapt, which follows "init_from" one file at most). */
static bool load_adapter(const char *path, const cg_charlm_load_opts *o, const cg_ft_ckpt *h,
                         cg_charlm_ckpt *out)
{
    lm_base x = {.seed = o->seed};
    if (!cg_charlm_config_from_json(cg_st_metadata(h->file, "config"), &x.cfg)) {
        cg_prefix_error("checkpoint '%s': bad config: ", path);
        return false;
    }
    const cg_ft_base_loader l = {cg_charlm_config_same_arch, load_base, &x};
    bool ok = cg_ft_adapt(h, path, o->base, o->weights, &l, &out->averaged, &out->base_path);
    if (ok) {
        out->model = x.b.model;
        out->tok = x.b.tok;
        out->vocab = x.b.vocab;
        x.b.model = NULL;
        x.b.tok = NULL;
    }
    cg_charlm_ckpt_free(&x.b);
    return ok;
}

bool cg_charlm_ckpt_load(const char *path, cg_charlm_ckpt *out)
{
    return cg_charlm_ckpt_load_opts(path, NULL, out);
}

bool cg_charlm_ckpt_load_opts(const char *path, const cg_charlm_load_opts *o, cg_charlm_ckpt *out)
{
    const cg_charlm_load_opts defaults = {.base = NULL, .seed = 0, .dropout = NAN};
    return load_at(path, o ? o : &defaults, NULL, out) > 0;
}

/* Load the checkpoint at path; `adapter`: the adapter checkpoint whose base
 * it is (then it must be a full checkpoint), or NULL. 1: loaded; 0: failed;
 * -1: refused as the base of `adapter` for being an adapter itself. */
static int load_at(const char *path, const cg_charlm_load_opts *o, const char *adapter,
                   cg_charlm_ckpt *out)
{
    memset(out, 0, sizeof *out);
    cg_ft_ckpt h;
    int rc = cg_ft_open(path, "charlm", adapter, o->base, &h);
    if (rc <= 0)
        return rc;
    cg_st_file *f = out->file = h.file;
    out->step = h.step;
    out->origin = h.origin;
    out->has_origin = h.has_origin;
    if ((out->adapter = h.adapter)) {
        if (!load_adapter(path, o, &h, out))
            goto fail;
        return 1;
    }
    cg_charlm_config cfg;
    if (!cg_charlm_config_from_json(cg_st_metadata(f, "config"), &cfg)) {
        cg_prefix_error("checkpoint '%s': bad config: ", path);
        goto fail;
    }
    if (!isnan(o->dropout))
        cfg.dropout = (float)o->dropout;
    if (o->set_attn_dropout)
        cfg.attn_dropout = (float)o->attn_dropout;
    if (cg_st_metadata(f, "tokenizer")) { /* bpe (models/tokenizer.h) */
        if (!(out->tok = cg_tokenizer_read(f, false)))
            goto fail;
    } else if (!(out->tok = calloc(1, sizeof *out->tok)) ||
               !(out->vocab = out->tok->cv = cg_vocab_from_json(cg_st_metadata(f, "vocab")))) {
        if (!out->tok)
            cg_set_error("out of memory");
        cg_prefix_error("checkpoint '%s': ", path);
        goto fail;
    }
    if (cg_tokenizer_vocab_size(out->tok) != cfg.vocab) {
        cg_set_error("checkpoint '%s': %s has %lld %s but the config says %lld", path,
                     out->vocab ? "vocabulary" : "the bpe tokenizer",
                     (long long)cg_tokenizer_vocab_size(out->tok),
                     out->vocab ? "characters" : "ids", (long long)cfg.vocab);
        goto fail;
    }
    double d = (double)cfg.d, ff = (double)cfg.d_ff;
    double b = cfg.bias ? 1 : 0; /* --bias false: no Linear or LayerNorm bias */
    double norm = cfg.norm == CG_NORM_LAYERNORM ? (1 + b) * d : d;
    double block = 2 * norm + 4 * (d * d + b * d) + d * ff + b * ff + ff * d + b * d;
    double need = (double)cfg.vocab * d + (double)cfg.layers * block + (cfg.norm_first ? norm : 0);
    if (!cg_ckpt_config_fits(need, cfg.max_len, cfg.d, f, path))
        goto fail;
    out->model = cg_charlm_new_skip_init(&cfg, o->seed);
    if (!cg_ckpt_load_params(CG_MODULE(out->model), f, path) ||
        (o->weights != CG_CKPT_TRAINED &&
         !cg_ckpt_use_average(CG_MODULE(out->model), f, path, &out->averaged)))
        goto fail;
    return 1;
fail:
    cg_charlm_ckpt_free(out);
    return 0;
}

cg_module *cg_charlm_load_adapted(const char *path, const char *base, cg_ckpt_weights w,
                                  char **base_path)
{
    const cg_charlm_load_opts lo = {.base = base, .seed = 0, .dropout = NAN, .weights = w};
    cg_charlm_ckpt ck;
    if (!cg_charlm_ckpt_load_opts(path, &lo, &ck))
        return NULL;
    cg_module *m = CG_MODULE(ck.model); /* (merge checked it is an adapter's) */
    *base_path = ck.base_path;
    ck.model = NULL;
    ck.base_path = NULL;
    cg_charlm_ckpt_free(&ck);
    return m;
}
