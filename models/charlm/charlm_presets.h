/* cgrad zoo: the named shapes of the charlm model (--preset), one table for
 * the charlm program and tools/bench. */
#ifndef CG_MODELS_CHARLM_PRESETS_H
#define CG_MODELS_CHARLM_PRESETS_H

#include "models/train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_CHARLM_N_PRESETS 3
extern const cg_train_preset cg_charlm_presets[CG_CHARLM_N_PRESETS];

#ifdef __cplusplus
}
#endif
#endif
