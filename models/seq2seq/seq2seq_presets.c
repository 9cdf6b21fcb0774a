/* cgrad zoo: seq2seq's presets (see seq2seq_presets.h), as
 * shared/bench/torch_peer.py's. T and B are bench's batch (source and
 * target length T, B pairs); the program batches by --max-tokens. */
#include "models/seq2seq/seq2seq_presets.h"

/* name, d, H, layers, enc_layers, dec_layers, d_ff, T, B */
const cg_train_preset cg_seq2seq_presets[CG_SEQ2SEQ_N_PRESETS] = {
    {"tiny", 128, 4, 0, 2, 2, 512, 48, 32, 96},
    {"base", 256, 8, 0, 3, 3, 1024, 96, 32, 96},
    /* the paper's Transformer base (6+6 layers, d 512, 8 heads, d_ff 2048) with
     * the WMT14 recipe's shared 37,000-token BPE vocabulary, a 1,024-target-token
     * step */
    {"paper", 512, 8, 0, 6, 6, 2048, 64, 16, 37000},
};
