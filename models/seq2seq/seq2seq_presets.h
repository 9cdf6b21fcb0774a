/* cgrad zoo: the named shapes of the seq2seq model (--preset), one table for
 * the seq2seq program and tools/bench. */
#ifndef CG_MODELS_SEQ2SEQ_PRESETS_H
#define CG_MODELS_SEQ2SEQ_PRESETS_H

#include "models/train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_SEQ2SEQ_N_PRESETS 3
extern const cg_train_preset cg_seq2seq_presets[CG_SEQ2SEQ_N_PRESETS];

#ifdef __cplusplus
}
#endif
#endif
