/* cgrad zoo: the trainer's state in a checkpoint's "train" metadata: written
 * at every save, restored exactly by --resume, read by eval.
 *
 * Checkpoint layout (both models; models/train/checkpoint.h writes it):
 *   metadata "model" (charlm|seq2seq), "config", the tokenizer ("vocab", or
 *   "tokenizer": "bpe" with the tensor "tokenizer.spm"), "step", and
 *   "train": {"steps", "eval_every", "log_every", "seed" (string), "grad_accum", "data",
 *             "dropout_rng": {"seed","counter"} (strings),
 *             "recent": [last training losses], "history": {...},
 *             "options": {the CG_CLI_SAVED flags, see options.h},
 *             "model": {the model's own state: batch stream, epoch, ...}}
 *   tensors: the parameters and the optimizer state under "optim.".
 */
#ifndef CG_MODELS_TRAIN_STATE_H
#define CG_MODELS_TRAIN_STATE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/data/data_id.h"
#include "models/util/config_json.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_trainer cg_trainer;             /* run.h */
typedef struct cg_trainer_model cg_trainer_model; /* run.h */

/* The checkpoint's "train" metadata of t's run with model m (malloc'd
 * JSON) or NULL + error. */
char *cg_train_state_json(const cg_trainer *t, const cg_trainer_model *m);
/* Restore the shared state of a checkpoint's "train" metadata into t and
 * t->o, every field range-checked (what --resume does; path names the file
 * in messages). False + error. */
bool cg_trainer_restore(cg_trainer *t, const char *train_json, const char *path);
/* The same check for a checkpoint's "train" metadata (eval): true when it
 * recorded no identity or id is the same data; false + error otherwise. */
bool cg_train_data_check(const char *train_json, const char *ckpt_path, const cg_data_id *id);
/* The data an eval reads: `given` when not NULL, else the path that a
 * checkpoint's "train" metadata recorded (refused when it is there but not
 * a regular file: a pipe the run was trained from), else default_data; a
 * malloc'd copy or NULL + error. */
char *cg_train_data_path(const char *train_json, const char *ckpt_path, const char *given,
                         const char *default_data);
/* Fields of a training state (JSON objects in the checkpoint): 64-bit
 * integers and doubles are kept exactly as decimal strings; they are read
 * back, range-checked, with cg_json_read_fields (models/util/config_json.h:
 * CG_JF_U64STR, CG_JF_F64). */
bool cg_state_put_u64(cJSON *o, const char *key, uint64_t v);
/* A model's own state through one field table: written into o (CG_JF_I64
 * as a number, CG_JF_F64 and CG_JF_U64STR as exact decimal strings,
 * CG_JF_STR as a string) when o is not NULL, else read back from
 * t->model_state (resuming; false + error "'FILE': KIND training state:
 * ..."). */
bool cg_trainer_model_state(const cg_trainer *t, const char *kind, cJSON *o, const cg_json_field *f,
                            int n);

/* Read fields of a model's own state from a checkpoint's "train" metadata
 * (its "model" object; the top level in checkpoints written before the one
 * trainer), as eval needs them: true without reading when train_json is
 * NULL; false + error "'FILE': KIND training state: ..." for a bad field,
 * or cg_train_state_read's when it is not JSON. */
bool cg_train_model_fields(const char *train_json, const char *ckpt_path, const char *kind,
                           const cg_json_field *f, int n);
/* Parse a checkpoint's "train" metadata into a cJSON object (caller
 * deletes it) or NULL + error. */
cJSON *cg_train_state_parse(const char *json);

#ifdef __cplusplus
}
#endif
#endif
