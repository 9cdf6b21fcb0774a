/* cgrad zoo, train layer: checkpoint averaging (fairseq's
 * scripts/average_checkpoints.py; the Transformer paper averages its last
 * checkpoints), one implementation behind `charlm average` and `seq2seq
 * average`, driven by each model's config comparison.
 *
 * Each file contributes the weights it is used with: those of a run with
 * --ema-decay are their moving average ("ema.*", models/train/checkpoint.h
 * cg_ckpt_weights; its "averaged" entry says "ema": true), the others'
 * their parameters; with CG_CKPT_TRAINED (--no-ema) every file's trained
 * weights (the entry of a file that keeps an average says "ema": false).
 * The output keeps no average of its own.
 *
 * cg_ckpt_average averages the parameters of two or more checkpoints of
 * one model, one architecture and one tokenizer, element by element: every
 * value is widened to double, summed, divided by the count and rounded
 * once to the dtype the first checkpoint stores it in (a bf16-stored
 * checkpoint stays bf16). The result is a weights-only checkpoint
 * (models/train/checkpoint.h): the parameters, the first checkpoint's
 * metadata (model, config, tokenizer, step, training state) and its
 * tokenizer tensor, plus the metadata
 *   "averaged": {"files": [{"path" (absolute), "size", "xxh3", "step"}, ...]}
 * naming the files averaged, in the order given. No optimizer state is
 * written: `train --resume` refuses such a checkpoint (the trainer), and a
 * new run starts from its weights with `charlm train --init-from`.
 *
 * Refused (false + one line of error, nothing written): fewer than 2
 * inputs; a file that is not a checkpoint of the model (or does not load as
 * one); a LoRA adapter checkpoint; a config of another architecture; another
 * tokenizer (its metadata and bytes compared); other parameter names or
 * shapes; --out naming one of the inputs (the same file: device and inode,
 * or the same resolved name), an --out that exists unless force, or one
 * that is no regular file (models/train/outfile.h cg_out_check); standard
 * output, where the command's line goes, being one of the inputs
 * (cg_out_check_stdout: `average ... a.st >> a.st`). The output
 * is written atomically (temporary file + rename) under the writer's lock
 * (NAME.cgrad-lock, as training takes it). */
#ifndef CG_MODELS_TRAIN_AVERAGE_H
#define CG_MODELS_TRAIN_AVERAGE_H

#include <stdbool.h>

#include "models/train/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the commands that make a checkpoint of others need of a model:
 * average (below) and merge (models/train/merge.h). */
typedef struct {
    const char *kind; /* the checkpoints' "model": "charlm", "seq2seq" */
    /* Do two "config" JSON texts describe one architecture? False + error
     * naming the first field that differs (cg_charlm_config_same_arch). */
    bool (*same_arch)(const char *config_a, const char *config_b);
    /* Does the checkpoint at path load as this model (its parameters those
     * its config describes), with the weights w (its average, when it keeps
     * one, or its trained weights)? False + error. */
    bool (*loads)(const char *path, cg_ckpt_weights w);
    /* The help's word on starting a new run from an average's weights
     * (charlm: "train --init-from ..."), or NULL when the model has no
     * such way. */
    const char *restart;
    /* merge: the LoRA adapter checkpoint at path loaded with its base (base:
     * --base, NULL: the one it recorded; models/train/finetune.h) and the
     * weights w: the model with its adapters attached (the caller frees
     * it: cg_module_free) and, in *base_path (malloc'd), the base read.
     * NULL + error. */
    cg_module *(*load_adapted)(const char *path, const char *base, cg_ckpt_weights w,
                               char **base_path);
} cg_avg_model;

/* Average the weights w of inputs[0..n) into the checkpoint out (see
 * above). force: an existing out may be replaced. On success *params (may
 * be NULL) gets the number of values averaged. False + error, nothing
 * written. */
bool cg_ckpt_average(const cg_avg_model *m, const char *const *inputs, int n, const char *out,
                     bool force, cg_ckpt_weights w, long long *params);

/* A zoo program's `average` command: `PROG average --out FILE [--force]
 * [--no-ema] CKPT CKPT...`; prints one JSON line ({"checkpoint", "averaged",
 * "params"}) and returns the exit code (2 for a bad command line: no
 * --out, fewer than 2 checkpoints; 1 for a refusal). */
int cg_average_command(int argc, char **argv, const cg_avg_model *m);

#ifdef __cplusplus
}
#endif
#endif
