/* cgrad fuzz: the tiny char LM fuzz_lora reads adapters onto, and
 * make_seeds writes its adapter seeds for (they must agree). */
#ifndef CG_FUZZ_LORA_BASE_H
#define CG_FUZZ_LORA_BASE_H

#include "models/charlm/charlm.h"

static inline cg_charlm_config cg_fuzz_lora_base_config(void)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = 5;
    c.d = 4;
    c.H = 2;
    c.layers = 1;
    c.d_ff = 8;
    c.max_len = 8;
    return c;
}

#endif
