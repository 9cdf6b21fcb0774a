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
    memset(c, 0, sizeof *c);
}

bool cg_seq2seq_ckpt_load(const char *path, cg_seq2seq_ckpt *out)
{
    return cg_seq2seq_ckpt_load_weights(path, CG_CKPT_AVERAGE, out);
}

bool cg_seq2seq_ckpt_load_weights(const char *path, cg_ckpt_weights w, cg_seq2seq_ckpt *out)
{
    const cg_seq2seq_load_opts o = {0, NAN, NAN, NAN, NAN, w};
    return cg_seq2seq_ckpt_load_opts(path, &o, out);
}

bool cg_seq2seq_ckpt_load_opts(const char *path, const cg_seq2seq_load_opts *o,
                               cg_seq2seq_ckpt *out)
{
    const cg_ckpt_weights w = o->weights;
    memset(out, 0, sizeof *out);
    cg_st_file *f = out->file = cg_ckpt_open_at(path, "seq2seq", &out->step);
    if (!f)
        return false;
    cg_seq2seq_config cfg;
    if (cg_ft_is_adapter(f)) { /* models/train/finetune.h: charlm's alone */
        cg_set_error("'%s' is a LoRA adapter checkpoint, which seq2seq does not read", path);
        goto fail;
    }
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
    return true;
fail:
    cg_seq2seq_ckpt_free(out);
    return false;
}
