/* cgrad zoo: the trainer's state in a checkpoint (see state.h). */
#include "models/train/state.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/parse.h"
#include "models/train/checkpoint.h"
#include "dist/dist.h"
#include "models/train/options.h"
#include "models/train/run.h"
#include "models/util/config_json.h"

/* The data a checkpoint recorded, read again when none is given: false +
 * error if it is there but not a regular file. A run trained on a pipe
 * (--data <(...), a FIFO, standard input '-') recorded its name, and
 * opening it again would wait for a writer for ever. */
static bool recorded_data_ok(const char *path)
{
    if (strcmp(path, "-") == 0) { /* read again, it was the terminal or another pipe */
        cg_set_error("the data this checkpoint recorded is standard input ('-'), which cannot be "
                     "read again: give the data with --data");
        return false;
    }
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return true; /* missing: opening it says so */
    cg_set_error("the data this checkpoint recorded, '%s', is not a regular file (a pipe, a "
                 "device or a directory): give the data with --data",
                 path);
    return false;
}

/* "dropout_rng"'s optional "rank_counters" (cg_trainer): decimal strings,
 * one per rank of the run that saved it. */
static bool rank_counters_restore(cg_trainer *t, const cJSON *dr, const char *what)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(dr, "rank_counters");
    if (!a)
        return true;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0, i = 0;
    uint64_t *v = n > 1 ? malloc((size_t)n * sizeof *v) : NULL;
    for (const cJSON *c = v ? a->child : NULL; c; c = c->next, i++)
        if (!cJSON_IsString(c) || !cg_parse_u64("a rank's dropout counter", c->valuestring, &v[i]))
            break;
    if (!v || i != n) {
        free(v);
        cg_set_error("%s: \"dropout_rng\": bad \"rank_counters\" (%s)", what,
                     n > 1 && !v ? "out of memory" : "decimal strings, one per rank");
        return false;
    }
    free(t->rank_counters);
    t->rank_counters = v;
    t->n_rank_counters = n;
    return true;
}

bool cg_state_put_u64(cJSON *o, const char *key, uint64_t v)
{
    const cg_json_field f = {key, CG_JF_U64STR, &v, 0, 0, false};
    return cg_json_write_fields(o, &f, 1);
}

static bool model_fields(const cJSON *ms, const char *path, const char *kind,
                         const cg_json_field *f, int n)
{
    char what[600];
    snprintf(what, sizeof what, "'%.500s': %s training state", path, kind);
    return cg_json_read_fields(ms, what, f, n);
}

bool cg_train_model_fields(const char *train_json, const char *ckpt_path, const char *kind,
                           const cg_json_field *f, int n)
{
    cJSON *st;
    if (!cg_train_state_read(train_json, ckpt_path, &st))
        return false;
    if (!st)
        return true;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(st, "model");
    bool ok = model_fields(ms ? ms : st, ckpt_path, kind, f, n);
    cJSON_Delete(st);
    return ok;
}

bool cg_trainer_model_state(const cg_trainer *t, const char *kind, cJSON *o, const cg_json_field *f,
                            int n)
{
    if (!o)
        return model_fields(t->model_state, t->o->resume, kind, f, n);
    return cg_json_write_fields(o, f, n);
}

cJSON *cg_train_state_parse(const char *json)
{
    bool oom;
    cJSON *o = cg_json_parse_mem(json, &oom);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        cg_set_error(oom ? "out of memory reading the training state"
                         : "no training state (not a training checkpoint)");
        return NULL;
    }
    return o;
}

/* item added to o as key, or deleted (cJSON_AddItemToObject keeps it when
 * the key's copy fails). */
static bool add_item(cJSON *o, const char *key, cJSON *item)
{
    if (o && item && cJSON_AddItemToObject(o, key, item))
        return true;
    cJSON_Delete(item);
    return false;
}

/* v[0..n) as the array key of o: numbers, or decimal strings (u64). */
static bool add_array(cJSON *o, const char *key, const int64_t *v, const uint64_t *u, int n)
{
    cJSON *a = o ? cJSON_AddArrayToObject(o, key) : NULL;
    bool ok = a != NULL;
    for (int i = 0; ok && i < n; i++) {
        char b[24];
        snprintf(b, sizeof b, "%" PRIu64, u ? u[i] : 0);
        ok = cJSON_AddItemToArray(a, u ? cJSON_CreateString(b) : cJSON_CreateNumber((double)v[i]));
    }
    return ok;
}

/* --keep-last's list: the kept, those being dropped, the out they are
 * beside (rank 0's). */
static bool kept_save(const cg_trainer *t, cJSON *j)
{
    char *ro = cg_out_resolved(t->out);
    bool ok =
        ro && add_array(j, "kept", t->kept, NULL, t->n_kept) &&
        (t->n_dropping == 0 || add_array(j, "kept_dropped", t->dropping, NULL, t->n_dropping)) &&
        cJSON_AddNumberToObject(j, "keep_last", (double)t->o->keep_last) &&
        cg_json_add_name(j, "kept_out", ro);
    free(ro);
    return ok;
}

char *cg_train_state_json(const cg_trainer *t, const cg_trainer_model *m)
{
    const unsigned long serial = cg_error_serial();
    const cg_train_opts *o = t->o;
    cJSON *j = cJSON_CreateObject();
    bool ok = j && cJSON_AddNumberToObject(j, "steps", (double)o->steps) &&
              cJSON_AddNumberToObject(j, "eval_every", (double)o->eval_every) &&
              cJSON_AddNumberToObject(j, "log_every", (double)o->log_every) && /* 0: steps/20 */
              cg_state_put_u64(j, "seed", o->seed) &&
              cJSON_AddNumberToObject(j, "grad_accum", (double)o->grad_accum) &&
              cg_json_add_name(j, "data", t->data_set ? t->data.path : "") &&
              (!t->data_set || add_item(j, "data_id", cg_data_id_to_json(&t->data)));
    cJSON *dr = ok ? cJSON_AddObjectToObject(j, "dropout_rng") : NULL;
    ok = dr && cg_state_put_u64(dr, "seed", m->dropout_rng->seed) &&
         cg_state_put_u64(dr, "counter", m->dropout_rng->counter) &&
         (t->n_rank_counters <= 1 ||
          add_array(dr, "rank_counters", NULL, t->rank_counters, t->n_rank_counters));
    cJSON *r = ok ? cJSON_AddArrayToObject(j, "recent") : NULL;
    ok = r != NULL;
    for (int i = 0; ok && i < t->n_recent; i++)
        ok = cJSON_AddItemToArray(r, cJSON_CreateNumber(t->recent[i]));
    char *hj = ok ? cg_history_to_json(&t->hist) : NULL;
    ok = add_item(j, "history", cg_json_parse(hj)) && ok;
    free(hj);
    ok = ok && cg_train_options_save(o->args, cJSON_AddObjectToObject(j, "options"));
    if (ok && (o->keep_last > 0 || t->n_kept + t->n_dropping > 0) && cg_dist_is_root())
        ok = kept_save(t, j);                       /* --keep-last */
    if (o->ema_decay > 0 && o->ema_update_freq > 1) /* --ema-update-freq's count */
        ok = ok && cJSON_AddNumberToObject(j, "ema_since", (double)t->ema_since);
    if (o->keep_best || o->patience > 0) { /* --keep-best, --patience */
        ok = ok && cJSON_AddBoolToObject(j, "keep_best", o->keep_best) &&
             cJSON_AddNumberToObject(j, "patience", (double)o->patience);
    }
    cJSON *ms = ok ? cJSON_AddObjectToObject(j, "model") : NULL;
    ok = ms && (!m->state_save || m->state_save(m->self, ms));
    char *s = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s && cg_error_serial() == serial)
        cg_set_error("out of memory");
    return s;
}

/* --keep-last of the checkpoint's run: N unless given, and the steps of
 * the evaluation checkpoints it kept, when they were written beside the
 * out of this run (else they are another run's: never removed). */
static bool kept_restore(cg_trainer *t, cg_train_opts *o, const char *what)
{
    int64_t keep = 0;
    const cg_json_field f = {"keep_last", CG_JF_I64, &keep, 0, CG_TRAIN_KEEP_MAX, true};
    double steps[CG_TRAIN_KEEP_MAX], drop[CG_TRAIN_KEEP_MAX + 1];
    int n = 0, nd = 0;
    if (!cg_json_read_fields(t->state, what, &f, 1) ||
        !cg_json_f64_array(t->state, what, "kept", steps, CG_TRAIN_KEEP_MAX, &n) ||
        !cg_json_f64_array(t->state, what, "kept_dropped", drop, CG_TRAIN_KEEP_MAX + 1, &nd) ||
        !cg_json_name_decode(t->state, "kept_out", what))
        return false;
    if (!cg_cli_given(o->args, &o->keep_last))
        o->keep_last = keep;
    const cJSON *ko = cJSON_GetObjectItemCaseSensitive(t->state, "kept_out");
    /* no out (a restore that writes nothing): no kept checkpoint is ours */
    errno = 0;
    char *ro = n + nd > 0 && t->out ? cg_out_resolved(t->out) : NULL;
    if (n + nd > 0 && t->out && !ro && errno == ENOMEM)
        return false; /* not "out's directory is not there": the kept would be forgotten */
    const bool ours = ro && cJSON_IsString(ko) && strcmp(ko->valuestring, ro) == 0;
    t->n_kept = t->n_dropping = 0;
    for (int i = 0; ours && i < n + nd; i++) { /* the kept, then those its save dropped */
        double s = i < n ? steps[i] : drop[i - n];
        if (s >= 0 && s <= 1e15 && s == (double)(int64_t)s) {
            if (i < n)
                t->kept[t->n_kept++] = (int64_t)s;
            else
                t->dropping[t->n_dropping++] = (int64_t)s;
        }
    }
    if (n + nd > 0 && !ro) /* out's directory is not there yet: nothing of ours beside it */
        cg_clear_error();
    free(ro);
    return true;
}

/* --keep-best and --patience of the checkpoint's run, unless given (a
 * checkpoint written without them has neither). */
static bool best_restore(const cg_trainer *t, cg_train_opts *o, const char *what)
{
    bool keep = false;
    int64_t patience = 0;
    const cg_json_field f[] = {{"keep_best", CG_JF_BOOL, &keep, 0, 0, true},
                               {"patience", CG_JF_I64, &patience, 0, CG_TRAIN_BIG, true}};
    if (!cg_json_read_fields(t->state, what, f, 2))
        return false;
    if (!cg_cli_given(o->args, &o->keep_best))
        o->keep_best = keep;
    if (!cg_cli_given(o->args, &o->patience))
        o->patience = patience;
    return true;
}

/* The optimizer updates since the average last moved (--ema-update-freq;
 * absent: 0, a checkpoint of a run that moves it at every one), below the
 * run's --ema-update-freq. */
static bool ema_restore(cg_trainer *t, const cg_train_opts *o, const char *what)
{
    t->ema_since = 0;
    const cg_json_field f = {"ema_since", CG_JF_I64, &t->ema_since, 0, CG_TRAIN_BIG, true};
    if (!cg_json_read_fields(t->state, what, &f, 1))
        return false;
    if (t->ema_since < o->ema_update_freq)
        return true;
    cg_set_error("%s: \"ema_since\" = %lld is not below its --ema-update-freq %lld (the updates "
                 "since the weights' average last moved): a damaged checkpoint?",
                 what, (long long)t->ema_since, (long long)o->ema_update_freq);
    return false;
}

/* The resumed run's precision: the checkpoint's (had, restored into
 * o->precision_arg with the other options), whatever auto would choose
 * here, or the one a given --precision fp32 or bf16 switches to (weights
 * and moments are float32 either way, as under PyTorch's autocast; then
 * o->precision_was names the checkpoint's when it differs). False + error. */
static bool precision_restore(cg_train_opts *o, const char *had, const char *given,
                              const char *what)
{
    o->precision_was = given && strcmp(had, given) != 0 ? had : NULL;
    o->precision_arg = given ? given : had;
    if (!cg_precision_parse(o->precision_arg, &o->precision)) {
        /* the checkpoint's bf16 on a CPU without a bf16 path (a given
         * --precision bf16 was refused as the flag was parsed) */
        cg_set_error("%s: trained in bf16, which needs a CPU with AVX512_BF16, or with AVX2 and "
                     "FMA; this one has neither (--precision fp32 continues the run in fp32)",
                     what);
        return false;
    }
    return true;
}

/* Restore the shared state of a checkpoint into t and o: every field type-
 * and range-checked (models/util/config_json.h), the first bad one named. */
static bool state_restore(cg_trainer *t, cg_train_opts *o, const char *path)
{
    const cJSON *s = t->state;
    int64_t steps, eval_every, accum, log_every = 0;
    uint64_t seed;
    const char *data;
    char what[600];
    snprintf(what, sizeof what, "'%.500s': training state", path);
    const cg_json_field f[] = {
        {"steps", CG_JF_I64, &steps, 1, 1e12, false},
        {"eval_every", CG_JF_I64, &eval_every, 1, 1e12, false},
        {"seed", CG_JF_U64STR, &seed, 0, 0, false},
        {"grad_accum", CG_JF_I64, &accum, 1, 1 << 16, false},
        {"data", CG_JF_STR, &data, 0, 0, false},
        {"log_every", CG_JF_I64, &log_every, 0, 1e12, true}, /* absent before: 0 (auto) */
    };
    const cg_json_field fr[] = {
        {"seed", CG_JF_U64STR, &t->dropout_rng.seed, 0, 0, false},
        {"counter", CG_JF_U64STR, &t->dropout_rng.counter, 0, 0, false},
    };
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(s, "dropout_rng");
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(s, "history");
    t->model_state = cJSON_GetObjectItemCaseSensitive(s, "model");
    cJSON *idj = cJSON_GetObjectItemCaseSensitive(t->state, "data_id");
    if (!cg_json_name_decode(t->state, "data", what) || /* names are bytes */
        (cJSON_IsObject(idj) && !cg_json_name_decode(idj, "path", what)))
        return false;
    if (!cg_json_read_fields(s, what, f, (int)(sizeof f / sizeof f[0])) ||
        !cg_json_read_fields(dr, "training state: \"dropout_rng\"", fr, 2) ||
        !rank_counters_restore(t, dr, what) ||
        !cg_json_f64_array(s, what, "recent", t->recent, CG_TRAIN_RECENT, &t->n_recent))
        return false;
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(s, "options");
    /* --resume keeps the checkpoint's precision (precision_restore) */
    const char *given = cg_cli_given(o->args, &o->precision_arg) ? o->precision_arg : NULL;
    o->precision_auto = NULL;
    if (!cJSON_IsObject(t->model_state) || (opts && !cJSON_IsObject(opts))) {
        cg_set_error("%s: bad or missing \"%s\"", what,
                     cJSON_IsObject(t->model_state) ? "options" : "model");
        return false;
    }
    /* the recorded precision checked first, named when damaged (given
     * --precision too: it is what the run switches from) */
    const char *had = cg_train_precision_recorded(opts, what);
    char owhat[640];
    snprintf(owhat, sizeof owhat, "%s: \"options\"", what);
    if (!had || !cg_train_options_restore(o->args, opts, owhat) || /* names the field */
        !precision_restore(o, had, given, what))
        return false;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "data_id");
    if (id && !cg_data_id_from_json(id, what, &t->data_stored))
        return false;
    t->data_stored_set = id != NULL; /* absent: written before identities */
    if (hist && !cg_history_from_cjson(hist, &t->hist)) {
        cg_prefix_error("'%s': ", path);
        return false;
    }
    if (!kept_restore(t, o, what) || !best_restore(t, o, what) || !ema_restore(t, o, what))
        return false;
    t->dropout_rng_set = true;
    o->seed = seed;
    o->grad_accum = accum;
    t->ckpt_steps = steps;
    if (!cg_cli_given(o->args, &o->steps))
        o->steps = steps;
    if (!cg_cli_given(o->args, &o->eval_every))
        o->eval_every = eval_every;
    if (!cg_cli_given(o->args, &o->log_every)) /* the metrics log's cadence goes on */
        o->log_every = log_every;
    if (!cg_cli_given(o->args, &o->data)) {
        if (data && !recorded_data_ok(data))
            return false;
        o->data = data;
    }
    return true;
}

bool cg_trainer_restore(cg_trainer *t, const char *train_json, const char *path)
{
    bool oom;
    t->state = cg_json_parse_mem(train_json, &oom);
    if (!cJSON_IsObject(t->state)) {
        cJSON_Delete(t->state);
        t->state = NULL;
    }
    if (!t->state && oom)
        cg_set_error("'%s': out of memory reading its training state", path);
    else if (!t->state && train_json) /* there, but not a JSON object */
        cg_set_error("'%s': its training state is damaged (not a JSON object); it cannot be "
                     "resumed",
                     path);
    else if (!t->state)
        cg_set_error("'%s' holds no training state (it cannot be resumed; use it for inference)",
                     path);
    if (!t->state)
        return false;
    /* The first layout (charlm from 1d498fa, seq2seq from 1381bc1, until
     * the one trainer of 1a6b625 and ac41b05 on 2026-11-23): the dropout
     * generator flat in the object, no "dropout_rng", no "grad_accum". Its
     * weights load as they are; its run cannot be continued exactly. */
    static const char *const flat[][2] = {
        {"dropout_rng_seed", "sample, eval, average and train --init-from"}, /* charlm */
        {"dropout_seed", "translate, eval and average"}};                    /* seq2seq */
    for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(t->state, flat[i][0]) &&
            !cJSON_GetObjectItemCaseSensitive(t->state, "dropout_rng")) {
            cg_set_error("'%s' was written by an earlier cgrad (2026-11-23 or before: its "
                         "training state has \"%s\", not \"dropout_rng\"), whose run --resume "
                         "cannot continue; its model still loads: %s read it",
                         path, flat[i][0], flat[i][1]);
            return false;
        }
    return state_restore(t, t->o, path);
}

bool cg_train_data_check(const char *train_json, const char *ckpt_path, const cg_data_id *id)
{
    cJSON *s;
    if (!cg_train_state_read(train_json, ckpt_path, &s))
        return false;
    cJSON *j = cJSON_GetObjectItemCaseSensitive(s, "data_id");
    cg_data_id stored;
    char what[600];
    snprintf(what, sizeof what, "'%.500s': training state", ckpt_path);
    bool ok = !j || (cJSON_IsObject(j) && cg_json_name_decode(j, "path", what) &&
                     cg_data_id_from_json(j, what, &stored) && cg_data_id_check(&stored, id));
    cJSON_Delete(s);
    return ok;
}

char *cg_train_data_path(const char *train_json, const char *ckpt_path, const char *given,
                         const char *default_data)
{
    cJSON *s = NULL;
    if (!given && !cg_train_state_read(train_json, ckpt_path, &s))
        return NULL;
    if (s && !cg_json_name_decode(s, "data", "training state")) {
        cJSON_Delete(s);
        return NULL;
    }
    const cJSON *dj = cJSON_GetObjectItemCaseSensitive(s, "data");
    const bool recorded = !given && cJSON_IsString(dj);
    if (recorded && !recorded_data_ok(dj->valuestring)) {
        cJSON_Delete(s);
        return NULL;
    }
    char *p = strdup(given ? given : recorded ? dj->valuestring : default_data);
    cJSON_Delete(s);
    if (!p)
        cg_set_error("out of memory");
    return p;
}
