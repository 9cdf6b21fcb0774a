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

/* An adapter checkpoint (f, open): its base loaded, checked and adapted. */
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
    const char *base = o->base ? o->base : out->origin.id.path;
    cg_charlm_load_opts bo = {.base = NULL, .seed = o->seed, .dropout = cfg.dropout};
    cg_charlm_ckpt b;
    char why[160];
    if (!cg_charlm_ckpt_load_opts(base, &bo, &b)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("adapter checkpoint '%s' needs its base: %s%s", path, msg,
                     o->base ? "" : " (pass --base FILE if it moved)");
        return false;
    }
    bool ok = true;
    if (b.adapter) {
        cg_set_error("'%s', the base of adapter checkpoint '%s', is itself an adapter "
                     "checkpoint",
                     base, path);
        ok = false;
    } else if (shape_differs(&b.model->cfg, &cfg, why, sizeof why)) {
        cg_set_error("'%s' is not the base checkpoint of adapter '%s': its %s in the adapter's "
                     "base; pass --base with the checkpoint it was trained on ('%s')",
                     base, path, why, out->origin.id.path);
        ok = false;
    } else {
        ok = cg_ft_origin_check(&out->origin, path, base) &&
             cg_ft_read_adapters(CG_MODULE(b.model), f, path, &b.model->dropout_rng) &&
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
    if (!o)
        o = &defaults;
    memset(out, 0, sizeof *out);
    cg_st_file *f = out->file = cg_ckpt_open_at(path, "charlm", &out->step);
    if (!f)
        return false;
    if (!cg_ft_origin_read(f, path, &out->origin, &out->has_origin))
        goto fail;
    if ((out->adapter = cg_ft_is_adapter(f))) {
        if (!load_adapter(path, o, out))
            goto fail;
        return true;
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
    double norm = cfg.norm == CG_NORM_LAYERNORM ? 2 * d : d;
    double block = 2 * norm + 4 * (d * d + d) + d * ff + ff + ff * d + d;
    double need = (double)cfg.vocab * d + (double)cfg.layers * block + (cfg.norm_first ? norm : 0);
    if (!cg_ckpt_config_fits(need, cfg.max_len, cfg.d, f, path))
        goto fail;
    out->model = cg_charlm_new(&cfg, o->seed);
    if (!cg_ckpt_load_params(CG_MODULE(out->model), f, path))
        goto fail;
    return true;
fail:
    cg_charlm_ckpt_free(out);
    return false;
}
