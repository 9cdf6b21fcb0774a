/* cgrad zoo: char-LM checkpoints (see checkpoint.h). */
#include "models/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

bool cg_charlm_ckpt_save(const char *path, const cg_charlm *model, const cg_vocab *vocab,
                         const cg_optim *optim, int64_t step, const char *train_json)
{
    cg_st_writer *w = cg_st_writer_new();
    char *cfg = cg_charlm_config_to_json(&model->cfg);
    char *voc = cg_vocab_to_json(vocab);
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
    bool ok = w && cfg && voc && cg_st_set_metadata(w, "model", "charlm") &&
              cg_st_set_metadata(w, "config", cfg) && cg_st_set_metadata(w, "vocab", voc) &&
              cg_st_set_metadata(w, "step", stepbuf) &&
              (!train_json || cg_st_set_metadata(w, "train", train_json)) &&
              cg_module_write(CG_MODULE(model), w, NULL) &&
              (!optim || cg_optim_save(optim, w, "optim")) && cg_st_writer_save(w, path);
    if (!ok && !cg_has_error())
        cg_set_error("cannot save checkpoint '%s'", path);
    free(cfg);
    free(voc);
    cg_st_writer_free(w);
    return ok;
}

void cg_charlm_ckpt_free(cg_charlm_ckpt *c)
{
    if (!c)
        return;
    cg_charlm_free(c->model);
    cg_vocab_free(c->vocab);
    cg_st_close(c->file);
    memset(c, 0, sizeof *c);
}

const char *cg_charlm_ckpt_train_json(const cg_charlm_ckpt *c)
{
    return c->file ? cg_st_metadata(c->file, "train") : NULL;
}

/* A corrupt or hostile config ("d": 100000) must not make the loader
 * allocate gigabytes before it finds that the parameters do not match: the
 * parameters the config implies must be present in the file (which is
 * already in memory), and the positions table (max_len x d, not stored)
 * must be of a plausible size. */
static bool config_fits_file(const cg_charlm_config *c, const cg_st_file *f, const char *path)
{
    double have = cg_st_f32_elements(f);
    double d = (double)c->d, ff = (double)c->d_ff;
    double norm = c->norm == CG_NORM_LAYERNORM ? 2 * d : d;
    double block = 2 * norm + 4 * (d * d + d) + d * ff + ff + ff * d + d;
    double need = (double)c->vocab * d + (double)c->layers * block + (c->norm_first ? norm : 0);
    if (need > have) {
        cg_set_error("checkpoint '%s': its config needs %.0f parameter values but the file "
                     "holds %.0f; corrupt file?", path, need, have);
        return false;
    }
    if ((double)c->max_len * d > 4 * have + (double)(1 << 24)) {
        cg_set_error("checkpoint '%s': max_len=%lld with d=%lld is implausibly large for a "
                     "model of %.0f values; corrupt file?", path, (long long)c->max_len,
                     (long long)c->d, have);
        return false;
    }
    return true;
}

bool cg_charlm_ckpt_load(const char *path, cg_charlm_ckpt *out)
{
    memset(out, 0, sizeof *out);
    cg_st_file *f = cg_st_open(path);
    if (!f)
        return false;
    out->file = f;
    const char *kind = cg_st_metadata(f, "model");
    if (!kind || strcmp(kind, "charlm") != 0) {
        cg_set_error("'%s' is not a charlm checkpoint (its model is %s%s%s)", path,
                     kind ? "'" : "", kind ? kind : "not recorded", kind ? "'" : "");
        goto fail;
    }
    const char *cfg_json = cg_st_metadata(f, "config");
    const char *voc_json = cg_st_metadata(f, "vocab");
    if (!cfg_json || !voc_json) {
        cg_set_error("checkpoint '%s' lacks its %s metadata", path, cfg_json ? "vocab" : "config");
        goto fail;
    }
    cg_charlm_config cfg;
    if (!cg_charlm_config_from_json(cfg_json, &cfg)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("checkpoint '%s': bad config: %s", path, msg);
        goto fail;
    }
    out->vocab = cg_vocab_from_json(voc_json);
    if (!out->vocab) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("checkpoint '%s': %s", path, msg);
        goto fail;
    }
    if (out->vocab->n != cfg.vocab) {
        cg_set_error("checkpoint '%s': vocabulary has %lld characters but the config says %lld",
                     path, (long long)out->vocab->n, (long long)cfg.vocab);
        goto fail;
    }
    const char *step = cg_st_metadata(f, "step");
    if (step) {
        char *end;
        long long v = strtoll(step, &end, 10);
        if (*step == '\0' || *end != '\0' || v < 0) {
            cg_set_error("checkpoint '%s': bad step '%s'", path, step);
            goto fail;
        }
        out->step = v;
    }
    if (!config_fits_file(&cfg, f, path))
        goto fail;
    out->model = cg_charlm_new(&cfg, 0);
    if (!out->model)
        goto fail;
    if (!cg_module_load(CG_MODULE(out->model), f, NULL)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("checkpoint '%s': %s", path, msg);
        goto fail;
    }
    return true;
fail:
    cg_charlm_ckpt_free(out);
    return false;
}
