/* cgrad zoo: a LoRA adapter checkpoint merged into its base (see merge.h). */
#include "models/train/merge.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/text/tokenizer.h"
#include "models/train/finetune.h"
#include "models/train/outfile.h"
#include "models/train/prog.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/util/files.h"
#include "nn/lora.h"

/* "merged": {"adapter": the identity of af, read from path}. */
static bool record_adapter(cg_st_writer *w, const char *path, const cg_st_file *af)
{
    const unsigned long serial = cg_error_serial();
    cg_ft_origin o;
    char *js = cg_ft_origin_of(path, af, &o) ? cg_ft_origin_json(&o) : NULL;
    cJSON *id = js ? cJSON_Parse(js) : NULL, *rec = id ? cJSON_CreateObject() : NULL;
    bool ok = rec && cJSON_AddItemToObject(rec, "adapter", id);
    if (!ok)
        cJSON_Delete(id); /* not taken by rec (or no rec) */
    ok = ok && cg_st_set_metadata_json(w, "merged", rec);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    cJSON_Delete(rec);
    free(js);
    return ok;
}

/* The merged checkpoint: the adapter's record of the run (af, read from
 * path), the base's tokenizer (bf), "merged", and m's parameters. */
static cg_st_writer *merged_writer(const cg_st_file *af, const char *path, const cg_st_file *bf,
                                   const cg_module *m)
{
    static const char *const from_adapter[] = {"model", "config", "step", "train", "init_from"};
    static const char *const from_base[] = {"vocab", "tokenizer"};
    const unsigned long serial = cg_error_serial();
    cg_st_writer *w = cg_st_writer_new_deferred(); /* saved at once: read then */
    bool ok = w != NULL;
    for (size_t i = 0; ok && i < sizeof from_adapter / sizeof *from_adapter; i++) {
        const char *v = cg_st_metadata(af, from_adapter[i]);
        ok = !v || cg_st_set_metadata(w, from_adapter[i], v);
    }
    for (size_t i = 0; ok && i < sizeof from_base / sizeof *from_base; i++) {
        const char *v = cg_st_metadata(bf, from_base[i]);
        ok = !v || cg_st_set_metadata(w, from_base[i], v);
    }
    if (ok && cg_st_has(bf, CG_TOKENIZER_TENSOR)) { /* a BPE model's bytes */
        size_t nb = 0;
        const void *raw = cg_st_raw(bf, CG_TOKENIZER_TENSOR, &nb);
        ok = raw && cg_st_add_u8(w, CG_TOKENIZER_TENSOR, (int64_t)nb, raw);
    }
    ok = ok && record_adapter(w, path, af) && cg_module_write(m, w, NULL);
    return cg_ckpt_writer_filled(w, ok, serial);
}

bool cg_ckpt_merge(const cg_avg_model *m, const char *adapter, const char *base, const char *out,
                   bool force, cg_ckpt_weights w, long long *params, int *adapters)
{
    const char *const given[] = {adapter, base};
    if (!cg_out_check_made(out, force, given, base ? 2 : 1, "merges"))
        return false;
    cg_st_file *af = cg_ckpt_open(adapter, m->kind);
    if (af && !cg_ft_is_adapter(af))
        cg_set_error("'%s' is a full checkpoint (it holds every weight): merge takes a LoRA "
                     "adapter checkpoint (train --init-from BASE --lora-rank R)",
                     adapter);
    char *bp = NULL; /* the base read: --base, or the one the adapter records */
    cg_module *model = af && cg_ft_is_adapter(af) ? m->load_adapted(adapter, base, w, &bp) : NULL;
    if (!model) {
        cg_st_close(af);
        return false;
    }
    bool ok = true, keeps = false;
    if (w == CG_CKPT_AVERAGE && cg_ckpt_keeps_average(af, adapter, &keeps) && keeps)
        cg_prog_note_average(af, adapter); /* the adapters merged are their average */
    if (!bp) { /* (a full checkpoint now: replaced since it was opened) */
        cg_set_error("'%s' is not a LoRA adapter checkpoint", adapter);
        ok = false;
    } else if (cg_same_file(out, bp)) {
        cg_set_error("--out '%s' is the same file as '%s', the base of adapter '%s'; choose "
                     "another --out (nothing was written)",
                     out, bp, adapter);
        ok = false;
    }
    ok = ok && cg_out_check_stdout(bp, "the base checkpoint");
    cg_st_file *bf = ok ? cg_ckpt_open(bp, m->kind) : NULL;
    int n = bf ? cg_lora_unload_all(model, true) : -1;
    cg_st_writer *wr = n >= 0 ? merged_writer(af, adapter, bf, model) : NULL;
    ok = wr && cg_out_save_locked(wr, out);
    if (params)
        *params = (long long)cg_module_num_params(model);
    if (adapters)
        *adapters = n;
    cg_st_writer_free(wr);
    cg_st_close(bf);
    cg_st_close(af);
    cg_module_free(model);
    free(bp);
    return ok;
}

int cg_merge_command(int argc, char **argv, const cg_avg_model *m)
{
    const char *prog = cg_prog_name(), *out = NULL, *base = NULL;
    bool force = false, no_ema = false;
    char help[2000];
    snprintf(help, sizeof help,
             "usage: %s merge --out FILE [--force] [--base FILE] [--no-ema] ADAPTER\n"
             "Merge a LoRA adapter checkpoint (train --lora-rank) into its base, as PEFT's\n"
             "merge_and_unload: each adapted weight becomes W + (alpha/r) B A, and the\n"
             "result is a weights-only %s checkpoint of the fine-tuned model that the\n"
             "other commands read without the base (decoding without the adapters' extra\n"
             "products). It keeps the adapter run's config, step and training record, the\n"
             "base's tokenizer, and records the adapter merged. It has no optimizer state:\n"
             "train --resume refuses it; train --init-from starts a new run from it.\n"
             "  --out FILE   the checkpoint written (never the adapter or its base), under\n"
             "               the lock NAME.cgrad-lock, as training writes\n"
             "  --force      overwrite an existing --out (refused otherwise)\n"
             "  --base FILE  the adapter's base, when it moved (default: the file it recorded)\n"
             "  --no-ema     the adapters' trained weights, not the moving average a run\n"
             "               with --ema-decay keeps beside them (the default)\n"
             "Refused, nothing written: a full checkpoint, another model's, a base missing or\n"
             "not the one the adapter was trained on. Prints one JSON line.\n",
             prog, m->kind);
    const cg_cli_opt opts[] = {
        {"--out", CG_CLI_STR, &out, 0, 0, NULL, 0},
        {"--force", CG_CLI_SWITCH, &force, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &base, 0, 0, NULL, 0},
        {"--no-ema", CG_CLI_SWITCH, &no_ema, 0, 0, NULL, 0},
    };
    int np, rc = cg_prog_parse_pos(argc, argv, opts, 4, help, &np);
    if (rc >= 0)
        return rc;
    if (!out || np != 1) {
        if (!out)
            cg_prog_fail("merge needs --out FILE (try --help)");
        else
            cg_prog_fail("merge takes one adapter checkpoint (got %d; try --help)", np);
        return CG_EXIT_USAGE;
    }
    long long params = 0;
    int n = 0;
    const cg_ckpt_weights w = no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE;
    if (!cg_ckpt_merge(m, argv[0], base, out, force, w, &params, &n))
        return cg_prog_fail_lib(NULL);
    cg_clear_error(); /* the line's own failure, if any, below */
    const unsigned long serial = cg_error_serial();
    cJSON *j = cJSON_CreateObject();
    bool ok = j && cg_json_put_str(j, "checkpoint", out) && cg_json_put_str(j, "merged", argv[0]) &&
              cg_json_put_int(j, "adapters", n) && cg_json_put_int(j, "params", params) &&
              cg_json_print_line(stdout, j);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    cJSON_Delete(j);
    fprintf(stderr, "%s: %d adapters of '%s' merged into its base, written to '%s'\n", prog, n,
            argv[0], out);
    return ok ? 0 : cg_prog_fail_lib(NULL); /* written, its line lost (a reader gone) */
}
