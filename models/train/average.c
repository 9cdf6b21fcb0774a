/* cgrad zoo: checkpoint averaging (see average.h). */
#include "models/train/average.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "models/train/checkpoint.h"
#include "models/train/finetune.h"
#include "models/train/outfile.h"
#include "models/train/prog.h"
#include "models/util/config_json.h"

/* One parameter being averaged: its place in the first file, and the sum
 * of its values over the files read so far. */
typedef struct {
    const char *name; /* borrowed from the first file */
    cg_st_dtype dtype;
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
    double *sum;
} avg_param;

typedef struct {
    const cg_avg_model *m;
    const char *first_path;
    cg_st_file *first; /* open until the output is written */
    avg_param *p;
    int np;
    cJSON *files;      /* the identities of the files averaged */
    cg_ckpt_weights w; /* which of each file's weights */
} avg_run;

/* A parameter: neither optimizer state, nor a weight's average, nor the
 * tokenizer. */
static bool is_param(const char *name)
{
    return strncmp(name, "optim.", 6) != 0 && strncmp(name, "ema.", 4) != 0 &&
           strcmp(name, CG_TOKENIZER_TENSOR) != 0;
}

/* Does f keep its weights' average (a run with --ema-decay:
 * models/train/checkpoint.h cg_ckpt_weights)? Then that is what it is used
 * as, and what is averaged. */
static bool keeps_average(const cg_st_file *f) { return cg_st_metadata(f, "ema.updates") != NULL; }

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Open an input: a checkpoint of the model that loads, not an adapter;
 * its identity goes into r->files. NULL + error. */
static cg_st_file *open_input(avg_run *r, const char *path)
{
    cg_st_file *f = cg_ckpt_open(path, r->m->kind);
    if (!f)
        return NULL;
    cg_ft_origin o;
    char *js = NULL;
    cJSON *id = NULL;
    if (cg_ft_is_adapter(f)) {
        cg_set_error("'%s' is a LoRA adapter checkpoint (only the adapters of its base); "
                     "average full checkpoints",
                     path);
    } else if (r->m->loads(path, r->w) && cg_ft_origin_of(path, f, &o) &&
               (js = cg_ft_origin_json(&o)) && (id = cg_json_parse(js))) {
        if (keeps_average(f)) /* whether its average is what was averaged */
            cJSON_AddBoolToObject(id, "ema", r->w == CG_CKPT_AVERAGE);
        cJSON_AddItemToArray(r->files, id);
        free(js);
        return f;
    }
    if (js && !id)
        cg_set_error("out of memory");
    free(js);
    cg_st_close(f);
    return NULL;
}

/* Add the parameters of f (checked against the first file's) to the sums. */
static bool accumulate(avg_run *r, const cg_st_file *f, const char *path)
{
    bool avg = r->w == CG_CKPT_AVERAGE && keeps_average(f);
    for (int k = 0; k < r->np; k++) {
        char name[600]; /* the average of a trainable parameter, else the parameter */
        snprintf(name, sizeof name, "ema.%.590s", r->p[k].name);
        cg_tensor *t = cg_st_get_f32(f, avg && cg_st_has(f, name) ? name : r->p[k].name);
        if (!t) {
            cg_prefix_error("'%s': ", path);
            return false;
        }
        const float *v = cg_data(t);
        for (int64_t i = 0; i < r->p[k].numel; i++)
            r->p[k].sum[i] += (double)v[i];
        cg_release(t);
    }
    return true;
}

/* The first file's parameters (float dtypes only) and their sums. */
static bool take_first(avg_run *r)
{
    const cg_st_file *f = r->first;
    int n = cg_st_count(f);
    r->p = calloc((size_t)(n ? n : 1), sizeof *r->p);
    if (!r->p) {
        cg_set_error("out of memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        const char *name = cg_st_name(f, i);
        if (!is_param(name))
            continue;
        avg_param *p = &r->p[r->np++];
        p->name = name;
        /* cannot fail: the name is one of f's own (its only failure: absent) */
        (void)cg_st_info(f, name, &p->dtype, &p->ndim, p->shape);
        if (p->dtype != CG_ST_F32 && p->dtype != CG_ST_BF16 && p->dtype != CG_ST_F16) {
            cg_set_error("'%s': tensor '%s' is %s; only float parameters (F32, BF16, F16) are "
                         "averaged",
                         r->first_path, name, cg_st_dtype_name(p->dtype));
            return false;
        }
        p->numel = 1;
        for (int d = 0; d < p->ndim; d++)
            p->numel *= p->shape[d];
        if (!(p->sum = calloc((size_t)(p->numel ? p->numel : 1), sizeof *p->sum))) {
            cg_set_error("out of memory");
            return false;
        }
    }
    return accumulate(r, f, r->first_path);
}

/* f (path) has the first file's architecture and tokenizer. False + error
 * naming both files. Its parameters' names and shapes follow: open_input
 * loaded each file as the model its own config describes, a strict load
 * (no parameter missing, none more, each of its shape), and the configs
 * agree on every field but the probabilities. */
static bool same_model(const avg_run *r, const cg_st_file *f, const char *path)
{
    const cg_st_file *a = r->first;
    const char *pa = r->first_path;
    if (!r->m->same_arch(cg_st_metadata(a, "config"), cg_st_metadata(f, "config"))) {
        cg_prefix_error("'%s' and '%s' are not one architecture: ", pa, path);
        return false;
    }
    size_t na = 0, nb = 0;
    const void *ta =
        cg_st_has(a, CG_TOKENIZER_TENSOR) ? cg_st_raw(a, CG_TOKENIZER_TENSOR, &na) : NULL;
    const void *tb =
        cg_st_has(f, CG_TOKENIZER_TENSOR) ? cg_st_raw(f, CG_TOKENIZER_TENSOR, &nb) : NULL;
    if ((!ta && cg_st_has(a, CG_TOKENIZER_TENSOR)) || (!tb && cg_st_has(f, CG_TOKENIZER_TENSOR)))
        return false; /* unreadable (cg_st_raw's error) */
    if (!same_str(cg_st_metadata(a, "tokenizer"), cg_st_metadata(f, "tokenizer")) ||
        !same_str(cg_st_metadata(a, "vocab"), cg_st_metadata(f, "vocab")) || !ta != !tb ||
        na != nb || (ta && memcmp(ta, tb, na) != 0)) {
        cg_set_error("'%s' and '%s' have different tokenizers (%s); averaging needs one "
                     "tokenizer",
                     pa, path,
                     !same_str(cg_st_metadata(a, "tokenizer"), cg_st_metadata(f, "tokenizer"))
                         ? "one char, one bpe"
                     : ta ? "their BPE models differ"
                          : "their vocabularies differ");
        return false;
    }
    return true;
}

/* x rounded to float by round-to-odd (toward zero, the last bit set when
 * inexact): rounding that float once more to a narrower float (bf16, f16)
 * to nearest even gives x correctly rounded, as one rounding would. */
static float round_to_odd(double x)
{
    float f = (float)x;
    if (!isfinite(f) || (double)f == x)
        return f;
    if (fabs((double)f) > fabs(x))
        f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u |= 1u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Whether t (float32, p's means) holds in dt, p's dtype in the first file,
 * every mean there finite (float16's range ends at 65504); false + error
 * naming the first element that is not. */
static bool means_fit(const avg_run *r, const avg_param *p, const cg_tensor *t, cg_dtype dt)
{
    double v = 0.0;
    const int64_t bad = cg_k_first_overflow(t, dt, &v);
    if (bad >= 0)
        cg_set_error("the mean of tensor '%s' at element %lld (%g) overflows %s, the dtype of '%s' "
                     "(the average keeps the first checkpoint's dtypes: put a float32 one first)",
                     p->name, (long long)bad, v, cg_st_dtype_name(p->dtype), r->first_path);
    return bad == -1;
}

/* The output: the first file's metadata and tokenizer, "averaged", and
 * each parameter's mean in the first file's dtype, in its order. */
static cg_st_writer *write_mean(const avg_run *r, int n)
{
    const unsigned long serial = cg_error_serial();
    const cg_st_file *a = r->first;
    cg_st_writer *w = cg_st_writer_new_deferred(); /* the means, kept until the save */
    bool ok = w != NULL;
    for (int i = 0; ok && i < cg_st_metadata_count(a); i++) {
        const char *key = cg_st_metadata_key(a, i);
        if (strncmp(key, "ema.", 4) != 0) /* the average's: its tensors are not written */
            ok = cg_st_set_metadata(w, key, cg_st_metadata(a, key));
    }
    /* r->files by reference, made here: cJSON_AddItemReferenceToObject
     * leaks its reference when the key's copy fails (cJSON 1.7.15) */
    cJSON *avg = cJSON_CreateObject(),
          *files = avg ? cJSON_CreateArrayReference(r->files->child) : NULL;
    bool added = files && cJSON_AddItemToObject(avg, "files", files);
    if (!added)
        cJSON_Delete(files); /* the reference alone */
    ok = ok && added && cg_st_set_metadata_json(w, "averaged", avg);
    cJSON_Delete(avg);
    for (int i = 0, k = 0; ok && i < cg_st_count(a); i++) {
        const char *name = cg_st_name(a, i);
        size_t nb;
        if (strcmp(name, CG_TOKENIZER_TENSOR) == 0) {
            const void *raw = cg_st_raw(a, name, &nb);
            ok = raw && cg_st_add_u8(w, name, (int64_t)nb, raw);
        }
        if (!is_param(name))
            continue;
        const avg_param *p = &r->p[k++];
        cg_tensor *t = cg_empty(p->ndim, p->shape);
        cg_dtype dt = CG_F32;
        ok = t && cg_st_dtype_cg(p->dtype, &dt);
        for (int64_t e = 0; ok && e < p->numel; e++) {
            double mean = p->sum[e] / n;
            cg_data(t)[e] = p->dtype == CG_ST_F32 ? (float)mean : round_to_odd(mean);
        }
        ok = ok && (dt == CG_F32 || means_fit(r, p, t, dt)) && cg_st_add_as(w, name, t, dt);
        cg_release(t);
    }
    return cg_ckpt_writer_filled(w, ok, serial);
}

bool cg_ckpt_average(const cg_avg_model *m, const char *const *inputs, int n, const char *out,
                     bool force, cg_ckpt_weights weights, long long *params)
{
    if (n < 2) {
        cg_set_error("averaging needs at least 2 checkpoints (got %d)", n);
        return false;
    }
    if (!cg_out_check_made(out, force, inputs, n, "averages"))
        return false;
    const unsigned long serial = cg_error_serial();
    avg_run r = {.m = m, .first_path = inputs[0], .files = cJSON_CreateArray(), .w = weights};
    bool ok = r.files && (r.first = open_input(&r, inputs[0])) && take_first(&r);
    for (int i = 1; ok && i < n; i++) {
        cg_st_file *f = open_input(&r, inputs[i]);
        ok = f && same_model(&r, f, inputs[i]) && accumulate(&r, f, inputs[i]);
        cg_st_close(f);
    }
    cg_st_writer *w = ok ? write_mean(&r, n) : NULL;
    ok = w && cg_out_save_locked(w, out);
    long long count = 0;
    for (int k = 0; k < r.np; k++) {
        count += r.p[k].numel;
        free(r.p[k].sum);
    }
    if (params)
        *params = count;
    cg_st_writer_free(w);
    free(r.p);
    cJSON_Delete(r.files);
    cg_st_close(r.first);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    return ok;
}

int cg_average_command(int argc, char **argv, const cg_avg_model *m)
{
    const char *prog = cg_prog_name(), *out = NULL;
    bool force = false, no_ema = false;
    char help[2000];
    snprintf(help, sizeof help,
             "usage: %s average --out FILE [--force] CKPT CKPT [CKPT...]\n"
             "Average the parameters of two or more %s checkpoints of one architecture and\n"
             "one tokenizer, element by element (fairseq's average_checkpoints.py; e.g. the\n"
             "last evaluation checkpoints kept by train --keep-last N), into a weights-only\n"
             "checkpoint that the other commands read as any other. It keeps the first\n"
             "checkpoint's config, tokenizer and metadata and records the files averaged;\n"
             "values are summed in double and rounded once to the stored dtype (a bf16\n"
             "checkpoint stays bf16). It has no optimizer state: train --resume refuses it%s.\n"
             "  --out FILE   the checkpoint written (never one of the inputs), under the\n"
             "               lock NAME.cgrad-lock (NAME: FILE without .safetensors), as\n"
             "               training takes it\n"
             "  --force      overwrite an existing --out (refused otherwise)\n"
             "  --no-ema     each checkpoint's trained weights, not the moving average a\n"
             "               run with --ema-decay keeps beside them (the default)\n"
             "Refused, nothing written: another model's checkpoint, another architecture or\n"
             "tokenizer, other parameters, a LoRA adapter checkpoint, standard output sent\n"
             "into an input. Prints one JSON line.\n",
             prog, m->kind, m->restart ? m->restart : "");
    const cg_cli_opt opts[] = {
        {"--out", CG_CLI_STR, &out, 0, 0, NULL, 0},
        {"--force", CG_CLI_SWITCH, &force, 0, 0, NULL, 0},
        {"--no-ema", CG_CLI_SWITCH, &no_ema, 0, 0, NULL, 0},
    };
    int np, rc = cg_prog_parse_pos(argc, argv, opts, 3, help, &np);
    if (rc >= 0)
        return rc;
    if (!out || np < 2) {
        if (!out)
            cg_prog_fail("average needs --out FILE (try --help)");
        else
            cg_prog_fail("average needs at least 2 checkpoints (got %d; try --help)", np);
        return CG_EXIT_USAGE;
    }
    long long params = 0;
    const cg_ckpt_weights w = no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE;
    if (!cg_ckpt_average(m, (const char *const *)argv, np, out, force, w, &params))
        return cg_prog_fail_lib(NULL);
    cg_clear_error(); /* the line's own failure, if any, below */
    const unsigned long serial = cg_error_serial();
    cJSON *j = cJSON_CreateObject();
    bool ok = j && cg_json_put_str(j, "checkpoint", out) && cg_json_put_int(j, "averaged", np) &&
              cg_json_put_int(j, "params", params) && cg_json_print_line(stdout, j);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    cJSON_Delete(j);
    fprintf(stderr, "%s: the mean of %d checkpoints written to '%s'\n", prog, np, out);
    return ok ? 0 : cg_prog_fail_lib(NULL); /* written, its line lost (a reader gone) */
}
