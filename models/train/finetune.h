/* cgrad zoo, train layer: fine-tuning from a trained checkpoint (nanoGPT's
 * init_from), in full or with LoRA adapters (nn/lora.h, PEFT's behaviour).
 *
 * `train --init-from BASE` starts a new run (step 0, a fresh optimizer, a
 * new loss history) from BASE's weights; the model's shape and tokenizer
 * are BASE's. Every checkpoint of such a run records where it came from:
 * metadata "init_from" = {"path" (absolute), "size", "xxh3" (of BASE's
 * bytes), "step" (BASE's step)} (cg_ft_origin).
 *
 * With LoRA (--lora-rank R) the base is frozen, adapters are attached to
 * the target Linears (cg_ft_lora_attach) and only they train. The run's
 * checkpoint is an adapter checkpoint: it holds ONLY the adapters,
 *   tensors   base_model.model.<path>.lora_A.weight [r, in] and
 *             ....lora_B.weight [out, r] (PEFT's names, cg_lora_write), and
 *             their optimizer state optim.<path>.lora_{A,B}.weight.<slot>
 *             (optim/optim.h cg_optim_save; the optimizer holds only them);
 *   metadata  "model", "config" (the base's), "step", "train" (as every
 *             checkpoint, models/train/checkpoint.h), "init_from" (the base's
 *             identity), "adapter_config" (PEFT's adapter_config.json) and
 *             "format": "pt"; no tokenizer: it is the base's.
 * Loading one (every command that reads a checkpoint: sample, eval,
 * --resume) loads the base first, from the recorded path or the one given
 * (--base), checks that it is that file (size and XXH3 checksum:
 * cg_ft_origin_check), then attaches the adapters and fills them
 * (cg_ft_read_adapters). The base file is only ever read, and must be a
 * full checkpoint (cg_ft_base_path, cg_ft_base_is_full): no load follows
 * "init_from" further than one file.
 *
 * Errors: false/NULL/-1 + cg_set_error (core/error.h), one line. */
#ifndef CG_MODELS_TRAIN_FINETUNE_H
#define CG_MODELS_TRAIN_FINETUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "models/data/data_id.h"
#include "models/train/checkpoint.h"
#include "models/text/tokenizer.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/ema.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Linears that get adapters unless told otherwise: the attention's
 * four projections and every Linear of the feed-forward, fc3 being a gated
 * one's up projection (--act swiglu, geglu; a model without it simply has
 * none: only given targets must each name a Linear). nn/attention.h,
 * nn/transformer.h names; PEFT's target_modules, as LLaMA's recipes list
 * q, k, v, o, gate, up and down. */
#define CG_FT_LORA_TARGETS "q_proj,k_proj,v_proj,o_proj,fc1,fc2,fc3"

/* Is f an adapter checkpoint (it has "adapter_config" metadata)? */
bool cg_ft_is_adapter(const cg_st_file *f);

/* The identity of a base checkpoint. */
typedef struct {
    cg_data_id id; /* absolute path, size, XXH3-64 of the file's bytes */
    int64_t step;  /* its "step" */
} cg_ft_origin;

/* The identity of the checkpoint at path, f being that file opened: its
 * step, and the size and checksum of f's bytes (read from the open file:
 * those of the weights loaded from it, whatever is at path now). False +
 * error. */
bool cg_ft_origin_of(const char *path, const cg_st_file *f, cg_ft_origin *out);
/* {"path": ..., "size": "N", "xxh3": "...", "step": N} (malloc'd) or NULL. */
char *cg_ft_origin_json(const cg_ft_origin *o);
/* The "init_from" metadata of f (path: the file, in messages). *present
 * says whether it has one; false + error when it is malformed. */
bool cg_ft_origin_read(const cg_st_file *f, const char *path, cg_ft_origin *out, bool *present);
/* The base that adapter checkpoint `adapter` needs (recorded in *want) is
 * bf, the file opened at base_path whose weights were loaded: same size
 * and checksum (a moved copy is fine). False + error "'B' is not the base
 * checkpoint of adapter 'A' (it was trained on 'B0', N bytes): ..."
 * otherwise. */
bool cg_ft_origin_check(const cg_ft_origin *want, const char *adapter, const char *base_path,
                        const cg_st_file *bf);

/* The base that loading adapter checkpoint `path` (its "init_from" in o)
 * reads: `base` when given (--base), else the path o records. NULL + error
 * when that is `path` itself (the same device and inode, or the same name
 * once directories are resolved: an adapter renamed over its base, or a
 * base overwritten by a copy of its adapter), which no load could end:
 * "adapter checkpoint 'b.st' names itself as its base ('/d/b.st'); ...",
 * or, given as `base`, "--base 'b.st' is the adapter checkpoint 'b.st'
 * itself; pass --base with the checkpoint it was trained on ('/d/a.st', ...)". */
const char *cg_ft_base_path(const char *path, const cg_ft_origin *o, const char *base);
/* Whether bf (opened from base_path), the base of adapter checkpoint
 * `path`, holds every weight. A base is loaded only then: following
 * "init_from" never goes past one file, so a chain of adapters, or two
 * naming each other, ends here. False + error "'B', the base of adapter
 * checkpoint 'A', is itself an adapter checkpoint [whose base is 'A' (the
 * two name each other)]; ..." otherwise. */
bool cg_ft_base_is_full(const cg_st_file *bf, const char *base_path, const char *path);

/* ------------------------------------------------ loading a checkpoint */
/* What every zoo loader reads first of a checkpoint (cg_ft_open). */
typedef struct {
    cg_st_file *file; /* owned, open */
    int64_t step;     /* 0 if absent */
    bool adapter;     /* an adapter checkpoint */
    bool has_origin;  /* it records "init_from" (then in origin) */
    cg_ft_origin origin;
} cg_ft_ckpt;

/* Open the checkpoint of model `kind` at path (models/train/checkpoint.h
 * cg_ckpt_open_at) and read its "init_from" and whether it is an adapter
 * checkpoint. adapter: the adapter checkpoint whose base this is, which
 * must then hold every weight (cg_ft_base_is_full), or NULL. base (--base,
 * or NULL) is refused for a full checkpoint: the user meant another file.
 * 1: opened; 0: failed; -1: refused as the base of `adapter` for being an
 * adapter itself (said in full). On failure nothing stays open. */
int cg_ft_open(const char *path, const char *kind, const char *adapter, const char *base,
               cg_ft_ckpt *out);

/* An adapter checkpoint's base, as its model's loader hands it over. */
typedef struct {
    cg_module *module;      /* the base's model with its weights (the loader owns it) */
    const cg_st_file *file; /* the base's file, open */
    cg_rng *dropout_rng;    /* the model's dropout stream (the adapters' masks) */
} cg_ft_base;

/* What loading an adapter checkpoint needs of its model. */
typedef struct {
    /* Do two "config" JSON texts describe one architecture? (the model's
     * cg_X_config_same_arch, as models/train/average.h's) */
    bool (*same_arch)(const char *config_a, const char *config_b);
    /* Load the full checkpoint at base_path as the base of adapter
     * checkpoint `adapter` (cg_ft_open with adapter set), its model built
     * with the adapter's recipe (its dropouts), its weights its average
     * when it keeps one (those the adapters were trained on). 1, 0 or -1,
     * as cg_ft_open. */
    int (*load_base)(void *ctx, const char *base_path, const char *adapter, cg_ft_base *out);
    void *ctx;
} cg_ft_base_loader;

/* The model of adapter checkpoint c (opened from path by cg_ft_open): its
 * base loaded by l (from base, --base, else the path c records:
 * cg_ft_base_path), of the adapter's architecture, the very file recorded
 * (cg_ft_origin_check), then the adapters attached and filled from c
 * (cg_ft_read_adapters) and, unless w is CG_CKPT_TRAINED, their average
 * used when c keeps one (*averaged). *base_path: the base read
 * (malloc'd). False + one line naming the adapter and its base; what
 * l->load_base made is the caller's to free either way. */
bool cg_ft_adapt(const cg_ft_ckpt *c, const char *path, const char *base, cg_ckpt_weights w,
                 const cg_ft_base_loader *l, bool *averaged, char **base_path);

/* LoRA options (train --lora-rank, --lora-alpha, --lora-dropout,
 * --lora-targets). */
typedef struct {
    int64_t rank;        /* r >= 1; 0: full fine-tuning */
    double alpha;        /* scale = alpha / r; a NaN: 2 r */
    double dropout;      /* on the adapters' input, in [0, 1] */
    const char *targets; /* comma-separated local names or paths; NULL: CG_FT_LORA_TARGETS */
} cg_ft_lora;

/* Freeze every parameter of root and attach an adapter to each Linear that
 * a target names (cg_lora_attach_all): A drawn from rng, the adapters'
 * dropout masks from dropout_rng (the model's stream, which a trainer
 * saves; NULL: each adapter's own). Refused: a target that names no Linear
 * (the targets that exist are listed), and a rank larger than the smaller
 * side of a target layer. Returns the number of adapters, or -1 + error. */
int cg_ft_lora_attach(cg_module *root, const cg_ft_lora *l, cg_rng *rng, cg_rng *dropout_rng);
/* A new run's adapters (train --init-from with --lora-rank; l->rank 0:
 * none, 0 returned): cg_ft_lora_attach with A drawn from a generator of
 * the run's seed that no other stream of the run uses. */
int cg_ft_lora_attach_run(cg_module *root, const cg_ft_lora *l, uint64_t seed, cg_rng *dropout_rng);

/* Attach the adapters of the adapter checkpoint f (path: in messages) onto
 * root, which holds the base's weights, and fill them: every tensor of f
 * must be an adapter (base_model.model.<path>.lora_{A,B}.weight) or an
 * adapter's optimizer state; dropout masks from dropout_rng (may be
 * NULL). False + error; root may then hold adapters (free it). */
bool cg_ft_read_adapters(cg_module *root, const cg_st_file *f, const char *path,
                         cg_rng *dropout_rng);

/* What a run adds to its checkpoints: where it started from (the
 * "init_from" JSON, NULL for a run from scratch), whether it saves only
 * its adapters, the moving average of its trainable weights (--ema-decay;
 * NULL: none), saved as "ema.*" (models/train/checkpoint.h
 * cg_ckpt_weights); and under ZeRO the gathers of a sharded optimizer's
 * state and average (dist/dist.h cg_dist_stream; NULL: they are
 * whole). */
typedef struct {
    const char *init_from;
    bool adapters;
    const cg_ema *ema;
    const cg_shard_gather *optim_gather, *ema_gather;
} cg_ft_save;

/* Save a training checkpoint (models/train/checkpoint.h cg_ckpt_save) of a
 * run described by ft (NULL: a plain run, cg_ckpt_save's file): a full
 * checkpoint with "init_from", or the adapter checkpoint above (tok is
 * then not written; optim holds only the adapters). False + error. */
bool cg_ft_ckpt_save(const char *path, const cg_ft_save *ft, const char *kind,
                     const char *config_json, const cg_tokenizer *tok, const cg_module *module,
                     const cg_optim *optim, int64_t step, const char *train_json);

#ifdef __cplusplus
}
#endif
#endif
