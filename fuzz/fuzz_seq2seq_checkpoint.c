/* libFuzzer target: the seq2seq checkpoint loader (models/train/checkpoint.h
 * cg_seq2seq_ckpt_load): safetensors parsing, the config, the pair
 * vocabulary, the step, every tensor name against the config, the
 * parameters, then the Adam state and the trainer's state,
 * as `seq2seq train --resume` uses them. The input is put in an in-memory
 * file (memfd) opened through /proc/self/fd. A checkpoint that loads must
 * translate a one-token source when the model is small. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/train/checkpoint.h"
#include "models/train/trainer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = cg_fuzz_mem_path(data, size, path, sizeof path);
    if (fd < 0)
        return 0; /* environment problem, not an input problem */
    cg_clear_error();
    cg_seq2seq_ckpt ck;
    if (!cg_seq2seq_ckpt_load(path, &ck)) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        CG_FUZZ_CHECK(ck.model == NULL && ck.file == NULL && ck.tok == NULL);
        close(fd);
        return 0;
    }
    CG_FUZZ_CHECK(ck.model && ck.file && ck.step >= 0);
    CG_FUZZ_CHECK(cg_tokenizer_vocab_size(ck.tok) == ck.model->cfg.vocab);
    /* every tensor is a parameter or an optimizer slot of one */
    CG_FUZZ_CHECK(cg_ckpt_check_tensors(CG_MODULE(ck.model), ck.file, path));
    /* the optimizer state and the trainer's state, as a resumed run reads them */
    cg_trainer_model tm = {.module = CG_MODULE(ck.model),
                           .optim = cg_adam_config(0, 0.9, 0.98, 1e-9)};
    cg_stepper st;
    CG_FUZZ_CHECK(cg_stepper_init(&st, &tm, 1, 0));
    cg_clear_error();
    if (!cg_optim_load(st.opt, ck.file, "optim"))
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    cg_stepper_free(&st);
    const char *tj = cg_st_metadata(ck.file, "train");
    if (tj) {
        cg_train_opts o;
        memset(&o, 0, sizeof o);
        cg_train_opts_init(&o);
        cg_trainer t;
        cg_trainer_init(&t, &o);
        cg_clear_error();
        if (!cg_trainer_restore(&t, tj, path))
            CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        cg_trainer_end(&t);
    }
    /* a small model must run */
    if (cg_module_num_params(CG_MODULE(ck.model)) <= 100000 && ck.model->cfg.d <= 256 &&
        ck.model->cfg.max_len >= 2 && ck.model->cfg.vocab > 3) {
        int64_t src[2] = {3, CG_EOS}, tin[1] = {CG_BOS};
        cg_module_train(CG_MODULE(ck.model), false);
        cg_no_grad_begin();
        cg_tensor *logits = cg_seq2seq_forward(ck.model, src, 1, 2, tin, 1);
        cg_no_grad_end();
        CG_FUZZ_CHECK(logits != NULL);
        cg_release(logits);
    }
    cg_seq2seq_ckpt_free(&ck);
    close(fd);
    return 0;
}
