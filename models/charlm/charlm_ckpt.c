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

/* The first shape field in which a and b differ, as "d=16 against 32", or
 * false when they agree (dropout is a recipe, not a shape). */
static bool shape_differs(const cg_charlm_config *a, const cg_charlm_config *b, char *buf,
                          size_t cap)
{
    const struct {
        const char *name;
        int64_t x, y;
    } f[] = {{"vocab", a->vocab, b->vocab},
             {"d", a->d, b->d},
             {"H", a->H, b->H},
             {"layers", a->layers, b->layers},
             {"d_ff", a->d_ff, b->d_ff},
             {"max_len", a->max_len, b->max_len},
             {"norm", a->norm, b->norm},
             {"act", a->act, b->act},
             {"norm_first", a->norm_first, b->norm_first}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].x != f[i].y) {
            snprintf(buf, cap, "%s=%lld against %lld", f[i].name, (long long)f[i].x,
                     (long long)f[i].y);
            return true;
        }
    return false;
}

static int load_at(const char *path, const cg_charlm_load_opts *o, const char *adapter,
                   cg_charlm_ckpt *out);

/* An adapter checkpoint (f, open): its base loaded, checked and adapted.
 * The base is loaded as a base (load_at with `adapter` set), which
 * refuses an adapter before following its "init_from": one level, never
 * a recursion that cycles (finetune.h cg_ft_base_path, cg_ft_base_is_full). */
static bool load_adapter(const char *path, const cg_charlm_load_opts *o, cg_charlm_ckpt *out)
{
    cg_st_file *f = out->file;
    cg_charlm_config cfg;
    if (!out->has_origin) {
        cg_set_error("adapter checkpoint '%s' does not record its base (no \"init_from\"); "
                     "corrupt file?",
                     path);
        return false;
    }
    if (!cg_charlm_config_from_json(cg_st_metadata(f, "config"), &cfg)) {
        cg_prefix_error("checkpoint '%s': bad config: ", path);
        return false;
    }
    const char *base = cg_ft_base_path(path, &out->origin, o->base);
    if (!base)
        return false;
    cg_charlm_load_opts bo = {.base = NULL,
                              .seed = o->seed,
                              .dropout = cfg.dropout,
                              .set_attn_dropout = true,
                              .attn_dropout = cfg.attn_dropout};
    cg_charlm_ckpt b;
    char why[160];
    int got = load_at(base, &bo, path, &b);
    if (got <= 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        if (got == 0) /* (-1: the base is an adapter, said in full) */
            cg_set_error("adapter checkpoint '%s' needs its base: %s%s", path, msg,
                         o->base ? "" : " (pass --base FILE if it moved)");
        return false;
    }
    bool ok = true;
    if (shape_differs(&b.model->cfg, &cfg, why, sizeof why)) {
        cg_set_error("'%s' is not the base checkpoint of adapter '%s': its %s in the adapter's "
                     "base; pass --base with the checkpoint it was trained on ('%s')",
                     base, path, why, out->origin.id.path);
        ok = false;
    } else {
        ok = cg_ft_origin_check(&out->origin, path, base, b.file) &&
             cg_ft_read_adapters(CG_MODULE(b.model), f, path, &b.model->dropout_rng) &&
             (o->weights == CG_CKPT_TRAINED ||
              cg_ckpt_use_average(CG_MODULE(b.model), f, path, &out->averaged)) &&
             (out->base_path = strdup(base)) != NULL;
        if (!ok && !cg_has_error())
            cg_set_error("out of memory");
    }
    if (ok) {
        out->model = b.model;
        out->tok = b.tok;
        out->vocab = b.vocab;
        b.model = NULL;
        b.tok = NULL;
    }
    cg_charlm_ckpt_free(&b);
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
    cg_st_file *f = out->file = cg_ckpt_open_at(path, "charlm", &out->step);
    if (!f)
        return 0;
    if (adapter && !cg_ft_base_is_full(f, path, adapter)) {
        cg_charlm_ckpt_free(out);
        return -1;
    }
    if (!cg_ft_origin_read(f, path, &out->origin, &out->has_origin))
        goto fail;
    if ((out->adapter = cg_ft_is_adapter(f))) {
        if (!load_adapter(path, o, out))
            goto fail;
        return 1;
    }
    if (o->base) { /* never ignored: the user meant some other file */
        cg_set_error("--base %s names the base of a LoRA adapter checkpoint, but '%s' is a full "
                     "checkpoint (it holds every weight; drop --base)",
                     o->base, path);
        goto fail;
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
