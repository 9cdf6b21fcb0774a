/* cgrad zoo: charlm's presets (see charlm_presets.h). tiny is nanoGPT's
 * shakespeare_char CPU config; both are shared/bench/torch_peer.py's. */
#include "models/charlm/charlm_presets.h"

/* name, d, H, layers, enc_layers, dec_layers, d_ff, T, B */
const cg_train_preset cg_charlm_presets[CG_CHARLM_N_PRESETS] = {
    {"tiny", 128, 4, 4, 0, 0, 512, 64, 12},
    {"base", 384, 6, 6, 0, 0, 1536, 256, 16},
};
