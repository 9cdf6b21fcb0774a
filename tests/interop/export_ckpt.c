/* Writes a checkpoint of each zoo model saved by cgrad, with an input batch
 * and the logits cgrad computes for it, so that check_torch_load.py can load
 * the parameters into the PyTorch reference and compare its logits.
 *
 *   export_ckpt OUTDIR     -> OUTDIR/charlm.safetensors, OUTDIR/seq2seq.safetensors
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/charlm/charlm.h"
#include "models/seq2seq/seq2seq.h"
#include "nn/safetensors.h"

static int fail(const char *what)
{
    fprintf(stderr, "export_ckpt: error: %s: %s\n", what, cg_last_error());
    return 1;
}

static bool write_file(cg_module *m, const char *path, const char *model, char *config,
                       int n_inputs, const char *const *names, int64_t *const *ids,
                       const int64_t (*shapes)[2], cg_tensor *logits)
{
    cg_st_writer *w = cg_st_writer_new();
    bool ok = w && cg_module_write(m, w, NULL);
    for (int i = 0; ok && i < n_inputs; i++) {
        cg_tensor *t = cg_from_i64(2, shapes[i], ids[i]);
        ok = cg_st_add(w, names[i], t);
        cg_release(t);
    }
    ok = ok && cg_st_add_f32(w, "expect.logits", logits) && cg_st_set_metadata(w, "model", model) &&
         cg_st_set_metadata(w, "config", config) && cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    free(config);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: export_ckpt OUTDIR\n");
        return 2;
    }
    char path[4096];
    cg_rng rng = cg_rng_new(11);

    /* CharLM: pre-norm rmsnorm gelu, B=2, T=9 */
    cg_charlm_config cc = cg_charlm_config_default();
    cc.vocab = 23;
    cc.d = 24;
    cc.H = 3;
    cc.layers = 2;
    cc.d_ff = 40;
    cc.max_len = 16;
    cc.norm = CG_NORM_RMSNORM;
    cg_charlm *lm = cg_charlm_new(&cc, 5);
    if (!lm)
        return fail("charlm");
    int64_t x[18];
    for (int i = 0; i < 18; i++)
        x[i] = (int64_t)cg_rng_below(&rng, 23);
    cg_tensor *logits = cg_charlm_forward(lm, x, 2, 9);
    if (!logits)
        return fail("charlm forward");
    snprintf(path, sizeof path, "%s/charlm.safetensors", argv[1]);
    const int64_t xs[1][2] = {{2, 9}};
    if (!write_file(CG_MODULE(lm), path, "charlm", cg_charlm_config_to_json(&cc), 1,
                    (const char *[]){"input.x"}, (int64_t *[]){x}, xs, logits))
        return fail(path);
    cg_release(logits);
    cg_charlm_free(lm);

    /* Seq2Seq: post-norm layernorm relu, padded batch */
    cg_seq2seq_config sc = cg_seq2seq_config_default();
    sc.vocab = 30;
    sc.d = 16;
    sc.H = 2;
    sc.d_ff = 32;
    sc.max_len = 16;
    cg_seq2seq *s2s = cg_seq2seq_new(&sc, 6);
    if (!s2s)
        return fail("seq2seq");
    int64_t src[2 * 7] = {5, 6, 7, 8, 9, 10, 2, 11, 12, 13, 2, 0, 0, 0};
    int64_t tgt[2 * 5] = {1, 14, 15, 16, 17, 1, 18, 19, 0, 0};
    logits = cg_seq2seq_forward(s2s, src, 2, 7, tgt, 5);
    if (!logits)
        return fail("seq2seq forward");
    snprintf(path, sizeof path, "%s/seq2seq.safetensors", argv[1]);
    const int64_t ss[2][2] = {{2, 7}, {2, 5}};
    if (!write_file(CG_MODULE(s2s), path, "seq2seq", cg_seq2seq_config_to_json(&sc), 2,
                    (const char *[]){"input.src", "input.tgt_in"}, (int64_t *[]){src, tgt}, ss,
                    logits))
        return fail(path);
    cg_release(logits);
    cg_module_free(CG_MODULE(s2s));
    return 0;
}
