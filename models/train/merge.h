/* cgrad zoo, train layer: a LoRA adapter checkpoint merged into its base
 * (PEFT's merge_and_unload), one implementation behind `charlm merge` and
 * `seq2seq merge`, driven by each model's loader (average.h cg_avg_model).
 *
 * cg_ckpt_merge loads the adapter checkpoint with its base as every
 * command does (models/train/finetune.h: the base it recorded or --base,
 * checked to be that file; the adapters' moving average when the run kept
 * one, unless CG_CKPT_TRAINED), merges each adapter into its layer's
 * weight, W += (alpha / r) B A, takes the adapters off (nn/lora.h
 * cg_lora_unload_all) and writes a weights-only checkpoint of the merged
 * model (models/train/checkpoint.h): every parameter in float32; the
 * adapter's metadata "model", "config" (the fine-tune's recipe), "step",
 * "train" (its data, precision and history) and "init_from" (the base);
 * the base's tokenizer (metadata and tensor); and
 *   "merged": {"adapter": {"path" (absolute), "size", "xxh3", "step"}}.
 * The other commands read it as any checkpoint, without the base; it has
 * no optimizer state: `train --resume` refuses it (models/train/trainer.h),
 * and a new run starts from its weights with --init-from.
 *
 * Refused (false + one line of error, nothing written): a full checkpoint
 * (nothing to merge), one of another model, a base that is missing or not
 * the one recorded (finetune.h's refusals), --out naming the adapter or its
 * base, an --out that exists unless force, standard output sent into an
 * input (models/train/outfile.h cg_out_check_made). The output is written
 * atomically under the writer's lock (NAME.cgrad-lock). */
#ifndef CG_MODELS_TRAIN_MERGE_H
#define CG_MODELS_TRAIN_MERGE_H

#include <stdbool.h>

#include "models/train/average.h"
#include "models/train/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Merge the adapter checkpoint `adapter` (base: its base instead of the
 * one it records, or NULL) into the checkpoint out (see above). On success
 * *params (may be NULL) gets the number of values written and *adapters
 * (may be NULL) the number of adapters merged. False + error, nothing
 * written. */
bool cg_ckpt_merge(const cg_avg_model *m, const char *adapter, const char *base, const char *out,
                   bool force, cg_ckpt_weights w, long long *params, int *adapters);

/* A zoo program's `merge` command: `PROG merge --out FILE [--force]
 * [--base FILE] [--no-ema] ADAPTER`; prints one JSON line ({"checkpoint",
 * "merged", "adapters", "params"}) and returns the exit code (2 for a bad
 * command line, 1 for a refusal). */
int cg_merge_command(int argc, char **argv, const cg_avg_model *m);

#ifdef __cplusplus
}
#endif
#endif
