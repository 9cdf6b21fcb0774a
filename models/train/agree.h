/* cgrad zoo: before an MPI run trains, every rank was started with the same
 * run (what cg_trainer_run checks at its set-up). */
#ifndef CG_MODELS_TRAIN_AGREE_H
#define CG_MODELS_TRAIN_AGREE_H

#include <stdbool.h>

#include "models/train/run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank was started with the same run: the same data and the same
 * --init-from base (size and checksum; their paths may differ between
 * machines), model, recipe and per-run flags as rank 0. A difference is an
 * error naming the flag, on every rank, before anything is trained (false +
 * error; true at once with one process). Collective: every rank calls it. */
bool cg_trainer_ranks_agree(const cg_trainer *t, const cg_trainer_model *m);

#ifdef __cplusplus
}
#endif
#endif
