/* cgrad zoo: charlm's presets (see charlm_presets.h). tiny is nanoGPT's
 * shakespeare_char CPU config; all three are shared/bench/torch_peer.py's. */
#include "models/charlm/charlm_presets.h"

/* name, d, H, layers, enc_layers, dec_layers, d_ff, T, B, V (bench's) */
const cg_train_preset cg_charlm_presets[CG_CHARLM_N_PRESETS] = {
    {"tiny", 128, 4, 4, 0, 0, 512, 64, 12, 65},
    {"base", 384, 6, 6, 0, 0, 1536, 256, 16, 65},
    /* GPT-2 small's shape (124M parameters with its 50,257-token vocabulary), a
     * 1,024-token step */
    {"gpt2", 768, 12, 12, 0, 0, 3072, 256, 4, 50257},
};
