/* cgrad zoo: fine-tuning from a trained checkpoint (see finetune.h). */
#include "models/train/finetune.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/train/checkpoint.h"
#include "models/train/outfile.h"
#include "models/util/files.h"
#include "models/util/config_json.h"
#include "nn/lora.h"

bool cg_ft_is_adapter(const cg_st_file *f)
{
    return f && cg_st_metadata(f, "adapter_config") != NULL;
}

/* ------------------------------------------------------------ the origin */
/* The identity of the bytes of the file at path. */
/* The identity of f's bytes as opened (not of what is at path now: a run
 * may have renamed another file there since the weights were read). */
static bool file_id(const char *path, const cg_st_file *f, cg_data_id *out)
{
    size_t len;
    void *bytes = cg_st_file_bytes(f, &len);
    if (!bytes)
        return false;
    cg_data_id_of(path, bytes, len, out);
    free(bytes);
    return true;
}

bool cg_ft_origin_of(const char *path, const cg_st_file *f, cg_ft_origin *out)
{
    memset(out, 0, sizeof *out);
    out->step = cg_ckpt_step(f);
    return file_id(path, f, &out->id);
}

char *cg_ft_origin_json(const cg_ft_origin *o)
{
    cJSON *j = cg_data_id_to_json(&o->id);
    char *s =
        j && cJSON_AddNumberToObject(j, "step", (double)o->step) ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s)
        cg_set_error("out of memory");
    return s;
}

bool cg_ft_origin_read(const cg_st_file *f, const char *path, cg_ft_origin *out, bool *present)
{
    memset(out, 0, sizeof *out);
    const char *js = cg_st_metadata(f, "init_from");
    *present = js != NULL;
    if (!js)
        return true;
    char what[600];
    snprintf(what, sizeof what, "checkpoint '%.500s': \"init_from\"", path);
    bool no_memory;
    cJSON *j = cg_json_parse_mem(js, &no_memory);
    if (no_memory) {
        cg_set_error("%s: out of memory", what);
        return false;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
    bool ok = cJSON_IsObject(j) && cJSON_IsNumber(st) && st->valuedouble >= 0 &&
              st->valuedouble <= 1e15 && st->valuedouble == floor(st->valuedouble);
    if (!ok)
        cg_set_error("%s: malformed (expected {\"path\", \"size\", \"xxh3\", \"step\"})", what);
    else
        ok = cg_data_id_from_json(j, what, &out->id);
    if (ok)
        out->step = (int64_t)st->valuedouble;
    cJSON_Delete(j);
    return ok;
}

bool cg_ft_origin_check(const cg_ft_origin *want, const char *adapter, const char *base_path,
                        const cg_st_file *bf)
{
    cg_data_id got;
    if (!file_id(base_path, bf, &got))
        return false;
    if (got.size == want->id.size && got.hash == want->id.hash)
        return true;
    char why[160];
    if (got.size != want->id.size)
        snprintf(why, sizeof why, "it has %" PRIu64 " bytes", got.size);
    else
        snprintf(why, sizeof why,
                 "same size but a different checksum (xxh3 %016" PRIx64 ", expected %016" PRIx64
                 "; trained further or replaced?)",
                 got.hash, want->id.hash);
    cg_set_error("'%s' is not the base checkpoint of adapter '%s' (it was trained on '%s', "
                 "%" PRIu64 " bytes, step %" PRId64 "): %s; pass --base with that file",
                 base_path, adapter, want->id.path, want->id.size, want->step, why);
    return false;
}

const char *cg_ft_base_path(const char *path, const cg_ft_origin *o, const char *base)
{
    const char *b = base ? base : o->id.path;
    if (!cg_same_file(b, path))
        return b;
    if (base) /* the flag is wrong, not the file: the base it records is given */
        cg_set_error("--base '%s' is the adapter checkpoint '%s' itself; pass --base with the "
                     "checkpoint it was trained on ('%s', %" PRIu64 " bytes, step %" PRId64 ")",
                     base, path, o->id.path, o->id.size, o->step);
    else
        cg_set_error(
            "adapter checkpoint '%s' names itself as its base ('%s'; renamed over its base, "
            "or the base overwritten by a copy of it?); pass --base with the checkpoint it "
            "was trained on (%" PRIu64 " bytes, step %" PRId64 ")",
            path, b, o->id.size, o->step);
    return NULL;
}

bool cg_ft_base_is_full(const cg_st_file *bf, const char *base_path, const char *path)
{
    if (!cg_ft_is_adapter(bf))
        return true;
    cg_ft_origin o;
    bool has = false;
    char back[700] = "";
    if (cg_ft_origin_read(bf, base_path, &o, &has) && has && cg_same_file(o.id.path, path))
        snprintf(back, sizeof back, " whose base is '%.500s' (the two name each other)", path);
    else if (has && cg_same_file(o.id.path, base_path))
        snprintf(back, sizeof back, " that names itself as its base");
    cg_clear_error();
    cg_set_error("'%s', the base of adapter checkpoint '%s', is itself an adapter checkpoint%s; "
                 "a base must hold every weight: pass --base with the full checkpoint it was "
                 "trained on",
                 base_path, path, back);
    return false;
}

/* ------------------------------------------------ loading a checkpoint */
int cg_ft_open(const char *path, const char *kind, const char *adapter, const char *base,
               cg_ft_ckpt *out)
{
    memset(out, 0, sizeof *out);
    cg_st_file *f = out->file = cg_ckpt_open_at(path, kind, &out->step);
    if (!f)
        return 0;
    int rc = 1;
    if (adapter && !cg_ft_base_is_full(f, path, adapter))
        rc = -1;
    else if (!cg_ft_origin_read(f, path, &out->origin, &out->has_origin))
        rc = 0;
    else if (!(out->adapter = cg_ft_is_adapter(f)) && base) {
        cg_set_error("--base %s names the base of a LoRA adapter checkpoint, but '%s' is a full "
                     "checkpoint (it holds every weight; drop --base)",
                     base, path);
        rc = 0;
    }
    if (rc <= 0) {
        cg_st_close(f);
        out->file = NULL;
    }
    return rc;
}

bool cg_ft_adapt(const cg_ft_ckpt *c, const char *path, const char *base, cg_ckpt_weights w,
                 const cg_ft_base_loader *l, bool *averaged, char **base_path)
{
    if (!c->has_origin) {
        cg_set_error("adapter checkpoint '%s' does not record its base (no \"init_from\"); "
                     "corrupt file?",
                     path);
        return false;
    }
    const char *bp = cg_ft_base_path(path, &c->origin, base);
    if (!bp)
        return false;
    cg_ft_base b = {0};
    int got = l->load_base(l->ctx, bp, path, &b);
    char why[1024];
    if (got <= 0) {
        snprintf(why, sizeof why, "%s", cg_last_error());
        if (got == 0) /* (-1: the base is an adapter, said in full) */
            cg_set_error("adapter checkpoint '%s' needs its base: %s%s", path, why,
                         base ? "" : " (pass --base FILE if it moved)");
        return false;
    }
    if (!l->same_arch(cg_st_metadata(b.file, "config"), cg_st_metadata(c->file, "config"))) {
        snprintf(why, sizeof why, "%s", cg_last_error());
        cg_set_error("'%s' is not the base checkpoint of adapter '%s' (its config against the "
                     "adapter's: %s); pass --base with the checkpoint it was trained on ('%s')",
                     bp, path, why, c->origin.id.path);
        return false;
    }
    const unsigned long serial = cg_error_serial();
    bool ok = cg_ft_origin_check(&c->origin, path, bp, b.file) &&
              cg_ft_read_adapters(b.module, c->file, path, b.dropout_rng) &&
              (w == CG_CKPT_TRAINED || cg_ckpt_use_average(b.module, c->file, path, averaged)) &&
              (*base_path = strdup(bp)) != NULL;
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    return ok;
}

/* ------------------------------------------------------------ adapters */
typedef bool (*adapter_fn)(void *ctx, const char *path, cg_lora *a);

/* Every adapter below root with its layer's path ("blocks.0.attn.q_proj"),
 * found through its lora_A parameter. */
static bool each_adapter(cg_module *root, adapter_fn fn, void *ctx)
{
    static const char tail[] = ".lora_A.weight";
    const size_t tl = sizeof tail - 1;
    cg_param_list l = {0};
    if (!cg_module_params(root, &l)) {
        cg_param_list_free(&l); /* what was listed before the failure */
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < l.n; i++) {
        const char *nm = l.items[i].name;
        size_t n = strlen(nm);
        if (n <= tl || strcmp(nm + n - tl, tail) != 0)
            continue;
        char *path = strndup(nm, n - tl);
        cg_module *m = path ? cg_module_get_child(root, path) : NULL;
        cg_lora *a = m && !strcmp(m->type, "Linear") ? cg_lora_of((cg_linear *)m) : NULL;
        ok = a ? fn(ctx, path, a) : true; /* a Linear's own child named lora_A: not ours */
        if (!path)
            cg_set_error("out of memory");
        ok = ok && path;
        free(path);
    }
    cg_param_list_free(&l);
    return ok;
}

static bool set_dropout_rng(void *ctx, const char *path, cg_lora *a)
{
    (void)path;
    if (ctx)
        a->dropout->rng = ctx;
    return true;
}

/* A fresh adapter's rank against its layer (ctx: the options). */
static bool check_rank(void *ctx, const char *path, cg_lora *a)
{
    const cg_ft_lora *l = ctx;
    int64_t in = a->base->in_features, out = a->base->out_features;
    int64_t side = in < out ? in : out;
    if (l->rank > side) {
        cg_set_error("--lora-rank %lld is larger than '%s' allows (a %lld x %lld layer: at most "
                     "%lld)",
                     (long long)l->rank, path, (long long)out, (long long)in, (long long)side);
        return false;
    }
    return true;
}

/* The local names of the Linears below m, each once, ", "-separated. */
static void linear_names(const cg_module *m, char *buf, size_t cap)
{
    for (int i = 0; i < m->n_children; i++) {
        const cg_module *c = m->children[i].module;
        const char *nm = m->children[i].name;
        if (!strcmp(c->type, "Linear") && strncmp(nm, "lora_", 5) != 0) {
            char have[1100], key[100];
            snprintf(have, sizeof have, ", %s, ", buf);
            snprintf(key, sizeof key, ", %s, ", nm);
            if (!strstr(have, key))
                snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", *buf ? ", " : "", nm);
        }
        linear_names(c, buf, cap);
    }
}

/* Does target name a Linear below m, m's path being path (nn/lora.h
 * cg_lora_target_matches; an adapter's own lora_* Linears are none)? */
static bool names_linear(const cg_module *m, const char *path, const char *target)
{
    for (int i = 0; i < m->n_children; i++) {
        const cg_module *c = m->children[i].module;
        const char *nm = m->children[i].name;
        if (!strcmp(m->type, "Linear") && !strncmp(nm, "lora_", 5))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", nm);
        if ((!strcmp(c->type, "Linear") && cg_lora_target_matches(target, p)) ||
            names_linear(c, p, target))
            return true;
    }
    return false;
}

int cg_ft_lora_attach(cg_module *root, const cg_ft_lora *l, cg_rng *rng, cg_rng *dropout_rng)
{
    if (!root || !l)
        return -1;
    char *list = strdup(l->targets ? l->targets : CG_FT_LORA_TARGETS);
    int cap = 1;
    for (const char *p = list; p && *p; p++)
        cap += *p == ',';
    char **targets = list ? calloc((size_t)cap, sizeof *targets) : NULL;
    if (!targets) {
        free(list);
        cg_set_error("out of memory");
        return -1;
    }
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        targets[n++] = t;
    bool ok = n > 0;
    if (!ok)
        cg_set_error("--lora-targets: no module names given");
    else if ((ok = l->rank >= 1 && l->rank <= INT32_MAX) == false)
        cg_set_error("--lora-rank %lld: need at least 1", (long long)l->rank);
    /* each target given names a Linear (the default's fc3: a gated one's only) */
    for (int i = 0; ok && l->targets && i < n; i++)
        if (!(ok = names_linear(root, "", targets[i]))) {
            char names[512] = "";
            linear_names(root, names, sizeof names);
            cg_set_error("--lora-targets: '%s' names no Linear of the %s (its Linears: %s)",
                         targets[i], root->type, names);
        }
    int got = -1;
    if (ok) {
        double alpha = isnan(l->alpha) ? 2.0 * (double)l->rank : l->alpha;
        cg_lora_config cfg = {.r = (int)l->rank,
                              .alpha = (float)alpha,
                              .dropout = (float)l->dropout,
                              .n_targets = n,
                              .targets = (const char *const *)targets};
        if ((got = cg_lora_attach_all(root, &cfg, rng)) > 0 && /* 0 matches: -1 */
            !(each_adapter(root, check_rank, (void *)l) &&
              each_adapter(root, set_dropout_rng, dropout_rng)))
            got = -1;
    }
    free(targets);
    free(list);
    return got;
}

/* the adapters' A != the run's other streams (its weights, masks, batches) */
#define LORA_SEED_MIX 0x2545f4914f6cdd1dULL

int cg_ft_lora_attach_run(cg_module *root, const cg_ft_lora *l, uint64_t seed, cg_rng *dropout_rng)
{
    if (l->rank <= 0)
        return 0;
    cg_rng g = cg_rng_new(seed ^ LORA_SEED_MIX);
    return cg_ft_lora_attach(root, l, &g, dropout_rng);
}

bool cg_ft_read_adapters(cg_module *root, const cg_st_file *f, const char *path,
                         cg_rng *dropout_rng)
{
    return cg_lora_read(root, f, path) && cg_ckpt_check_adapter_tensors(root, f, path) &&
           each_adapter(root, set_dropout_rng, dropout_rng);
}

/* ------------------------------------------------------------ saving */
bool cg_ft_ckpt_save(const char *path, const cg_ft_save *ft, const char *kind,
                     const char *config_json, const cg_tokenizer *tok, const cg_module *module,
                     const cg_optim *optim, int64_t step, const char *train_json)
{
    if (!ft || (!ft->init_from && !ft->ema && !ft->optim_gather))
        return cg_ckpt_save(path, kind, config_json, tok, module, optim, step, train_json);
    bool adapters = ft->init_from && ft->adapters;
    /* the optimizer's entries where cg_ckpt_writer puts them: last */
    cg_st_writer *w = cg_ckpt_writer(kind, config_json, adapters ? NULL : tok,
                                     adapters ? NULL : module, NULL, step, train_json);
    bool ok = w && (!optim || cg_optim_save_gathered(optim, w, "optim", ft->optim_gather)) &&
              (!ft->init_from || cg_st_set_metadata(w, "init_from", ft->init_from)) &&
              (!adapters || cg_lora_write(module, w)) &&
              (!ft->ema || cg_ema_save_gathered(ft->ema, w, "ema", ft->ema_gather));
    if (!ok) {
        cg_st_writer_free(w);
        return false;
    }
    return cg_ckpt_writer_save(w, path);
}
