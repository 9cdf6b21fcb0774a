/* cgrad zoo: the one trainer behind `charlm train` and `seq2seq train`, and
 * (through the part headers below) the conventions every zoo program
 * shares.
 *
 * The trainer holds the training loop and everything around it once:
 *   - the output rules: an existing checkpoint is kept unless --force or
 *     --resume into it, checked before anything is trained;
 *   - --resume: the checkpoint's state (position, RNG streams, optimizer,
 *     loss history, recipe) restored exactly; flags that would change the
 *     recipe are refused with one message naming them; a run already at its
 *     --steps is refused;
 *   - MPI (dist/dist.h): parameters from rank 0, gradients averaged with
 *     each rank's weight (rows or target tokens), every rank stopping at the
 *     same step, rank 0 alone writing;
 *   - the step: --grad-accum micro-batches, loss and gradients checked for
 *     NaN/Inf (stop naming the step and the parameter, or --skip-nonfinite),
 *     clipping, the model's learning-rate schedule, the optimizer;
 *   - the progress line with tokens/s and time left, evaluation, checkpoint
 *     and loss-curve cadence (--eval-every), SIGINT/SIGTERM (save, exit 0),
 *     --stop-at, --max-minutes, the final JSON line (null for a non-finite
 *     number).
 * A model plugs in what is its own through cg_trainer_model: its batches
 * and loss, its evaluation, its learning rate, and the state it saves.
 *
 * The parts, one concern each (this header includes them all but program.h
 * and agree.h):
 *   program.h  the program's shape: main(), the command dispatch, a train
 *              command (parse, check, set up, run, report, clean up)
 *   prog.h     program plumbing: messages, exit codes, flag parsing
 *   options.h  the train commands' flags: run options, shared recipe rows,
 *              what a checkpoint fixes and saves (how to add a flag: there)
 *   state.h    the trainer's state in a checkpoint, saved and restored
 *   stepper.h  one optimizer step, in order (cg_stepper_step)
 *   run.h      what a model plugs in, and the trainer's record of a run
 *   agree.h    every MPI rank started with the same run
 *   trainer_begin.c  the set-up (this header): the output rules checked
 *              before any training, --resume's checkpoint read
 *   trainer.c  the loop (this header); one iteration, in order: iteration(). */
#ifndef CG_MODELS_TRAINER_H
#define CG_MODELS_TRAINER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tensor.h"
#include "models/text/tokenizer.h"
#include "dist/dist.h"
#include "models/train/options.h"
#include "models/train/outfile.h"
#include "models/train/prog.h"
#include "models/train/run.h"
#include "models/train/state.h"
#include "models/train/stepper.h"
#include "models/train/train_common.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Start a training command (o as cg_train_parse left it): threads, the
 * output rules (an existing --out is refused unless --force or resuming
 * into it), and with --resume: refuse the flags a checkpoint fixes that
 * were given (o->args, CG_CLI_FIXED: one message naming them), open the
 * checkpoint (its "model" must be kind), restore the shared state into t
 * and *o (steps unless given, eval_every unless given, seed, data unless
 * given, the saved options, ...) and refuse a run already at its --steps.
 * Returns -1 to go on, else an exit code (the error is printed). */
int cg_trainer_begin(cg_trainer *t, cg_train_opts *o, const char *kind, const char *default_out);
/* An empty trainer over options o (cg_trainer_begin calls it). */
void cg_trainer_init(cg_trainer *t, cg_train_opts *o);
/* Record the data read (its identity from cg_corpus_read/cg_pairs_read:
 * absolute path, size, XXH3), kept in the checkpoint's "data" and
 * "data_id", so that eval and --resume find it from any directory and
 * know it again. Resuming a checkpoint that recorded an identity, the data
 * must be the same bytes (a moved copy named by --data is fine): false +
 * error naming the difference otherwise. */
bool cg_trainer_set_data(cg_trainer *t, const cg_data_id *id);
/* A fine-tuning run (--init-from, models/train/finetune.h): it starts from
 * the checkpoint at path (f: that file, open), which its checkpoints
 * record; with adapters, the module's trainable parameters are LoRA
 * adapters and the checkpoints hold only them. (Resuming, the trainer
 * reads both from the checkpoint.) False + error. */
bool cg_trainer_set_origin(cg_trainer *t, const char *path, const cg_st_file *f, bool adapters);
/* Train from t->start to o->steps (or a stop), then finish: save, the
 * model's final evaluation, the JSON line. Returns the exit code. */
int cg_trainer_run(cg_trainer *t, const cg_trainer_model *m);
/* Mean of the recent training losses (NaN if none). */
double cg_trainer_recent_loss(const cg_trainer *t);
void cg_trainer_end(cg_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
