/* cgrad zoo: checkpoints (see checkpoint.h). */
#include "models/train/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/tensor.h"
#include "models/train/train_common.h"
#include "models/util/config_json.h"
#include "optim/ema.h"

cg_st_writer *cg_ckpt_writer(const char *kind, const char *config_json, const cg_tokenizer *tok,
                             const cg_module *module, const cg_optim *optim, int64_t step,
                             const char *train_json)
{
    /* The writer reads the parameters and the optimizer state when it
     * saves, without copying them first: a save adds one tensor's
     * conversion at most to the program's memory (it copied them all until
     * 2026-12-05, into blocks the allocator's cache was trimmed for: issue
     * 35) */
    if (!config_json) { /* a failed cg_X_config_to_json's: its message, the root cause, stays */
        cg_error_null_arg("cg_ckpt_writer", "config_json");
        return NULL;
    }
    const unsigned long serial = cg_error_serial();
    cg_st_writer *w = cg_st_writer_new_deferred();
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
    bool ok = w && cg_st_set_metadata(w, "model", kind) &&
              cg_st_set_metadata(w, "config", config_json) &&
              (!tok || cg_tokenizer_write(tok, w)) && cg_st_set_metadata(w, "step", stepbuf) &&
              (!train_json || cg_st_set_metadata(w, "train", train_json)) &&
              (!module || cg_module_write(module, w, NULL)) &&
              (!optim || cg_optim_save(optim, w, "optim"));
    return cg_ckpt_writer_filled(w, ok, serial);
}

cg_st_writer *cg_ckpt_writer_filled(cg_st_writer *w, bool ok, unsigned long serial)
{
    if (ok)
        return w;
    if (cg_error_serial() == serial)
        cg_set_error("out of memory");
    cg_st_writer_free(w);
    return NULL;
}

bool cg_ckpt_writer_save(cg_st_writer *w, const char *path)
{
    if (!w) /* the writer's making failed: its message, the root cause, stays */
        return cg_error_null_arg("cg_ckpt_writer_save", "w");
    const unsigned long serial = cg_error_serial();
    bool ok = cg_ensure_parent_dir(path) && cg_st_writer_save(w, path);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("cannot save checkpoint '%s'", path);
    cg_st_writer_free(w);
    return ok;
}

bool cg_ckpt_save(const char *path, const char *kind, const char *config_json,
                  const cg_tokenizer *tok, const cg_module *module, const cg_optim *optim,
                  int64_t step, const char *train_json)
{
    if (!tok || !module) {
        cg_set_error("cannot save checkpoint '%s': no %s", path, tok ? "model" : "tokenizer");
        return false;
    }
    return cg_ckpt_writer_save(
        cg_ckpt_writer(kind, config_json, tok, module, optim, step, train_json), path);
}

cg_st_file *cg_ckpt_open(const char *path, const char *kind)
{
    if (access(path, F_OK) != 0) {
        cg_set_error("checkpoint '%s': %s", path, strerror(errno));
        return NULL;
    }
    cg_st_file *f = cg_st_open(path);
    if (!f)
        return NULL;
    const char *k = cg_st_metadata(f, "model");
    const char *cfg = cg_st_metadata(f, "config"), *voc = cg_st_metadata(f, "vocab");
    if (!voc)
        voc = cg_st_metadata(f, "tokenizer");
    if (!voc) /* an adapter checkpoint: the tokenizer is its base's */
        voc = cg_st_metadata(f, "adapter_config");
    const char *step = cg_st_metadata(f, "step");
    if (!k || strcmp(k, kind) != 0) {
        cg_set_error("'%s' is not a %s checkpoint (its model is %s%s%s)", path, kind, k ? "'" : "",
                     k ? k : "not recorded", k ? "'" : "");
        goto fail;
    }
    if (!cfg || !voc) {
        cg_set_error("checkpoint '%s' lacks its %s metadata", path, cfg ? "vocab" : "config");
        goto fail;
    }
    if (step) {
        char *end;
        errno = 0;
        long long v = strtoll(step, &end, 10);
        if (*step < '0' || *step > '9' || *end != '\0' || errno || v < 0 ||
            v > 1000000000000000LL) {
            cg_set_error("checkpoint '%s': bad step '%.40s' (expected an integer in [0, 1e15])",
                         path, step);
            goto fail;
        }
    }
    return f;
fail:
    cg_st_close(f);
    return NULL;
}

int64_t cg_ckpt_step(const cg_st_file *f)
{
    const char *s = cg_st_metadata(f, "step");
    return s ? (int64_t)strtoll(s, NULL, 10) : 0;
}

/* A corrupt or hostile config ("d": 100000) must not make the loader
 * allocate gigabytes before it finds that the parameters do not match: the
 * parameters the config implies (need, a lower bound) must be present in
 * the file (which is already in memory), and the positions table
 * (max_len x d, not stored) must be of a plausible size. */
bool cg_ckpt_config_fits(double need, int64_t max_len, int64_t d, const cg_st_file *f,
                         const char *path)
{
    double have = cg_st_f32_elements(f);
    if (need > have) {
        cg_set_error("checkpoint '%s': its config needs %.0f parameter values but the file "
                     "holds %.0f; corrupt file?",
                     path, need, have);
        return false;
    }
    if ((double)max_len * (double)d > 4 * have + (double)(1 << 24)) {
        cg_set_error("checkpoint '%s': max_len=%lld with d=%lld is implausibly large for a "
                     "model of %.0f values; corrupt file?",
                     path, (long long)max_len, (long long)d, have);
        return false;
    }
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_param(char **sorted, int n, const char *name, size_t len)
{
    char key[512];
    if (len >= sizeof key)
        return false;
    memcpy(key, name, len);
    key[len] = '\0';
    const char *k = key;
    return bsearch(&k, sorted, (size_t)n, sizeof *sorted, cmp_str) != NULL;
}

/* adapter: the file is an adapter checkpoint (models/train/finetune.h):
 * its tensors are the trainable parameters under PEFT's prefix and their
 * optimizer state, and nothing else. */
static bool check_tensors(const cg_module *m, const cg_st_file *f, const char *path, bool adapter)
{
    if (!m || !f)
        return false;
    cg_param_list l = {0}; /* a full checkpoint holds the persistent buffers too */
    if (!(adapter ? cg_module_params(m, &l) : cg_module_state_dict(m, &l))) {
        cg_param_list_free(&l); /* what was listed before the failure */
        return false;
    }
    char **names = malloc((size_t)(l.n ? l.n : 1) * sizeof *names);
    if (!names) {
        cg_param_list_free(&l);
        cg_set_error("out of memory");
        return false;
    }
    int n = 0;
    for (int i = 0; i < l.n; i++)
        if (!adapter || l.items[i].tensor->requires_grad)
            names[n++] = l.items[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    static const char peft[] = "base_model.model.";
    const size_t pl = sizeof peft - 1;
    bool ok = true;
    for (int i = 0; ok && i < cg_st_count(f); i++) {
        const char *t = cg_st_name(f, i);
        size_t tl = strlen(t);
        bool known =
            adapter ? tl > pl && strncmp(t, peft, pl) == 0 && is_param(names, n, t + pl, tl - pl)
                    : is_param(names, n, t, tl) || strcmp(t, CG_TOKENIZER_TENSOR) == 0;
        if (!known && strncmp(t, "ema.", 4) == 0) /* an average (optim/ema.h) */
            known = is_param(names, n, t + 4, tl - 4);
        if (!known && strncmp(t, "optim.", 6) == 0) {
            /* ".step" (k 0) and every buffer an optimizer may keep */
            for (int k = 0; !known && k < CG_OPTIM_NBUFS; k++) {
                const char *slot = k ? cg_optim_buffer_name(k) : "step";
                size_t sl = strlen(slot);
                known = tl > 7 + sl && t[tl - sl - 1] == '.' && strcmp(t + tl - sl, slot) == 0 &&
                        is_param(names, n, t + 6, tl - 7 - sl);
            }
        }
        if (!known) {
            cg_set_error("checkpoint '%s': tensor '%.200s' is not a%s parameter of the model its "
                         "config describes (%d parameters); corrupt file?",
                         path, t, adapter ? "n adapter" : "", n);
            ok = false;
        }
    }
    free(names);
    cg_param_list_free(&l);
    return ok;
}

bool cg_ckpt_check_tensors(const cg_module *m, const cg_st_file *f, const char *path)
{
    return check_tensors(m, f, path, false);
}

bool cg_ckpt_check_adapter_tensors(const cg_module *m, const cg_st_file *f, const char *path)
{
    return check_tensors(m, f, path, true);
}

/* cg_ckpt_save with the config JSON it frees. */
bool cg_ckpt_save_owned(const char *path, const char *kind, char *cfg, const cg_tokenizer *tok,
                        const cg_module *module, const cg_optim *optim, int64_t step,
                        const char *train_json)
{
    bool ok = cg_ckpt_save(path, kind, cfg, tok, module, optim, step, train_json);
    free(cfg);
    return ok;
}

cg_st_file *cg_ckpt_open_at(const char *path, const char *kind, int64_t *step)
{
    cg_st_file *f = cg_ckpt_open(path, kind);
    *step = f ? cg_ckpt_step(f) : 0;
    return f;
}

bool cg_ckpt_load_params(cg_module *m, cg_st_file *f, const char *path)
{
    if (!m || !cg_ckpt_check_tensors(m, f, path))
        return false;
    if (!cg_module_load_ex(m, f, &CG_CKPT_LOAD_OPTIONS)) {
        cg_prefix_error("checkpoint '%s': ", path);
        return false;
    }
    return true;
}

bool cg_ckpt_keeps_average(const cg_st_file *f, const char *path, bool *keeps)
{
    *keeps = cg_st_metadata(f, "ema.updates") != NULL;
    const char *part = *keeps || !cg_st_metadata(f, "ema.decay") ? NULL : "ema.decay";
    for (int i = 0; !*keeps && !part && i < cg_st_count(f); i++)
        if (strncmp(cg_st_name(f, i), "ema.", 4) == 0)
            part = cg_st_name(f, i);
    if (!part)
        return true;
    cg_set_error("checkpoint '%s': %s '%.200s' is a part of a weights' average (--ema-decay), but "
                 "there is no metadata 'ema.updates': a damaged file?",
                 path, strcmp(part, "ema.decay") == 0 ? "metadata" : "tensor", part);
    return false;
}

/* The average f keeps into e (cg_ema_load), at most one update a step. */
static bool load_average(cg_ema *e, const cg_st_file *f)
{
    if (!cg_ema_load(e, f, "ema"))
        return false;
    int64_t steps = cg_ckpt_step(f);
    if (cg_ema_updates(e) <= steps)
        return true;
    cg_set_error("'ema.updates' = %lld is more than its %lld steps (one update a step at most)",
                 (long long)cg_ema_updates(e), (long long)steps);
    return false;
}

bool cg_ckpt_resume_average(cg_ema *e, const cg_st_file *f, const char *path, double decay)
{
    bool keeps;
    if (!cg_ckpt_keeps_average(f, path, &keeps))
        return false;
    if (!e && keeps)
        cg_set_error("'%s' keeps a weights' average (ema.*) but its run has no --ema-decay: a "
                     "damaged checkpoint?",
                     path);
    else if (e && !load_average(e, f))
        cg_prefix_error("'%s': ", path);
    else if (e && cg_ema_decay(e) != decay)
        cg_set_error("'%s': its average's 'ema.decay' = %.15g is not its run's --ema-decay %.15g: "
                     "a damaged checkpoint?",
                     path, cg_ema_decay(e), decay);
    else
        return true;
    return false;
}

bool cg_ckpt_use_average(cg_module *m, const cg_st_file *f, const char *path, bool *used)
{
    bool keeps;
    if (used)
        *used = false;
    if (!cg_ckpt_keeps_average(f, path, &keeps))
        return false;
    if (!keeps) /* a run without --ema-decay */
        return true;
    /* straight into the parameters (no copy of the weights beside them),
     * its update count checked first: a refusal leaves m as it was */
    double updates;
    int64_t steps = cg_ckpt_step(f);
    bool ok = true;
    if (cg_st_metadata_number(f, "ema.updates", &updates) && updates > (double)steps) {
        cg_set_error("'ema.updates' = %.17g is more than its %lld steps (one update a step at "
                     "most)",
                     updates, (long long)steps);
        ok = false;
    }
    ok = ok && cg_ema_load_params(m, f, "ema", NULL);
    if (!ok) {
        cg_prefix_error("checkpoint '%s': its weights' average: ", path);
        return false;
    }
    if (used)
        *used = true;
    return true;
}

bool cg_train_state_read(const char *train_json, const char *ckpt_path, cJSON **out)
{
    bool oom;
    *out = cg_json_parse_mem(train_json, &oom);
    if (train_json && !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        if (oom)
            cg_set_error("'%s': out of memory reading its training state", ckpt_path);
        else
            cg_set_error("'%s': its training state is damaged (not a JSON object)", ckpt_path);
        return false;
    }
    return true;
}

const char *cg_train_precision_recorded(const cJSON *options, const char *what)
{
    const cJSON *p = options ? cJSON_GetObjectItemCaseSensitive(options, "precision") : NULL;
    if (!p) /* absent: a checkpoint written before options */
        return "fp32";
    const char *v = cJSON_IsString(p) ? p->valuestring : "";
    if (!strcmp(v, "fp32") || !strcmp(v, "bf16"))
        return v[0] == 'b' ? "bf16" : "fp32";
    char *text = cJSON_PrintUnformatted(p);
    cg_set_error("%s: \"options\": \"precision\" is %.60s, not \"fp32\" or \"bf16\"", what,
                 text ? text : "not a name");
    free(text);
    return NULL;
}

bool cg_train_precision(const char *train_json, const char *ckpt_path, cg_precision *out)
{
    cJSON *s;
    *out = CG_PRECISION_FP32;
    if (!cg_train_state_read(train_json, ckpt_path, &s)) /* not "none recorded": no guess */
        return false;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(s, "options");
    char what[600];
    snprintf(what, sizeof what, "'%.500s': training state", ckpt_path);
    const char *name = NULL;
    if (j && !cJSON_IsObject(j))
        cg_set_error("%s: \"options\" is not a JSON object", what);
    else
        name = cg_train_precision_recorded(j, what);
    /* the name's error, or the CPU's (bf16 needs AVX512_BF16 or AVX2) */
    bool ok = name && cg_precision_parse(name, out);
    cJSON_Delete(s);
    return ok;
}
