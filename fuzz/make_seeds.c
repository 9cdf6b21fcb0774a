/* Writes the generated seed inputs of the fuzz corpora (not built by
 * default; run from the repository root after `ninja -C build fuzz/make_seeds`):
 *
 *   build/fuzz/make_seeds fuzz/corpus
 *
 * checkpoint/: tiny char-LM checkpoints (layernorm/pre-norm and
 * rmsnorm/post-norm), with and without AdamW state after one step.
 * safetensors/: a file with every dtype the writer emits and metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/error.h"
#include "models/checkpoint.h"

static int fail(void)
{
    fprintf(stderr, "make_seeds: %s\n", cg_last_error());
    return 1;
}

static int ckpt(const char *dir, const char *name, cg_norm_kind norm, bool pre, bool with_optim)
{
    static const uint32_t text[] = {'a', 'b', 'c', '\n', 0xe9};
    cg_vocab *v = cg_vocab_from_codepoints(text, 5);
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = v->n;
    c.d = 4;
    c.H = 2;
    c.layers = 1;
    c.d_ff = 8;
    c.max_len = 8;
    c.norm = norm;
    c.norm_first = pre;
    cg_charlm *m = cg_charlm_new(&c, 7);
    if (!m)
        return fail();
    cg_optim *o = NULL;
    cg_param_list pl = {0};
    if (with_optim) {
        cg_module_params(CG_MODULE(m), &pl);
        cg_optim_param *op = calloc((size_t)pl.n, sizeof *op);
        for (int i = 0; i < pl.n; i++)
            op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.1};
        cg_optim_config oc = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
        o = cg_optim_new(&oc, pl.n, op);
        free(op);
        int64_t x[4] = {0, 1, 2, 3}, y[4] = {1, 2, 3, 4};
        cg_tensor *logits = cg_charlm_forward(m, x, 1, 4);
        cg_tensor *loss = cg_charlm_loss(m, logits, y);
        if (!o || !loss || !cg_backward(loss, NULL, false) || !cg_optim_step(o))
            return fail();
        cg_release(loss);
        cg_release(logits);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint/%s", dir, name);
    bool ok = cg_charlm_ckpt_save(path, m, v, o, with_optim ? 1 : 0,
                                  with_optim ? "{\"rng\": [1, 2], \"best_val\": 2.5, \"history\": "
                                               "{\"step\":[0,10],\"train\":[3.5,2.5],"
                                               "\"val\":[3.5,null],\"dense_every\":10,"
                                               "\"dense_step\":[5.5,15.5],"
                                               "\"dense_loss\":[3.2,2.4],\"dense_acc\":"
                                               "{\"loss\":\"4.5\",\"step\":43,\"n\":2}}}"
                                             : NULL);
    cg_optim_free(o);
    cg_param_list_free(&pl);
    cg_charlm_free(m);
    cg_vocab_free(v);
    return ok ? 0 : fail();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (ckpt(dir, "tiny_ln_pre_adamw.safetensors", CG_NORM_LAYERNORM, true, true) ||
        ckpt(dir, "tiny_rms_post.safetensors", CG_NORM_RMSNORM, false, false))
        return 1;
    cg_st_writer *w = cg_st_writer_new();
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    int64_t i[3] = {-1, 0, 1LL << 40};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s0[1] = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/safetensors/mixed.safetensors", dir);
    if (!cg_st_add_f32_raw(w, "a.weight", 2, s23, f) || !cg_st_add_i64(w, "ids", 1, s3, i) ||
        !cg_st_add_f32_raw(w, "empty", 1, s0, f) || !cg_st_add_f32_raw(w, "scalar", 0, NULL, f) ||
        !cg_st_set_metadata(w, "format", "pt") || !cg_st_set_metadata(w, "note", "\xc3\xa9\"\\") ||
        !cg_st_writer_save(w, path))
        return fail();
    cg_st_writer_free(w);
    return 0;
}
