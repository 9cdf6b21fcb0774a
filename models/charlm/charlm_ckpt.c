/* cgrad zoo: charlm checkpoints (see charlm_ckpt.h). */
#include "models/charlm/charlm_ckpt.h"

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
    memset(c, 0, sizeof *c);
}

const char *cg_charlm_ckpt_train_json(const cg_charlm_ckpt *c)
{
    return c->file ? cg_st_metadata(c->file, "train") : NULL;
}

bool cg_charlm_ckpt_load(const char *path, cg_charlm_ckpt *out)
{
    memset(out, 0, sizeof *out);
    cg_st_file *f = cg_ckpt_open(path, "charlm");
    if (!f)
        return false;
    out->file = f;
    out->step = cg_ckpt_step(f);
    cg_charlm_config cfg;
    if (!cg_charlm_config_from_json(cg_st_metadata(f, "config"), &cfg)) {
        cg_prefix_error("checkpoint '%s': bad config: ", path);
        goto fail;
    }
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
    out->model = cg_charlm_new(&cfg, 0);
    if (!out->model || !cg_ckpt_check_tensors(CG_MODULE(out->model), f, path))
        goto fail;
    if (!cg_module_load(CG_MODULE(out->model), f, NULL)) {
        cg_prefix_error("checkpoint '%s': ", path);
        goto fail;
    }
    return true;
fail:
    cg_charlm_ckpt_free(out);
    return false;
}
