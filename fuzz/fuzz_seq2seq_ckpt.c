/* libFuzzer target: the seq2seq checkpoint loader (models/checkpoint.h
 * cg_seq2seq_ckpt_load): safetensors parsing, the "config" and "vocab"
 * JSON, the step, every tensor name against the config, the parameters,
 * then the Adam state (cg_optim_load) as `seq2seq train --resume` restores
 * it. The input is put in an in-memory file (memfd) opened through
 * /proc/self/fd. A small checkpoint that loads must run a forward pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("cg_fuzz_s2s", 0);
    if (fd < 0)
        return 0;
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return 0;
        }
        off += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    cg_clear_error();
    cg_seq2seq_ckpt ck;
    if (!cg_seq2seq_ckpt_load(path, &ck)) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        CG_FUZZ_CHECK(ck.model == NULL && ck.file == NULL && ck.vocab.chars == NULL);
        close(fd);
        return 0;
    }
    CG_FUZZ_CHECK(ck.model && ck.file && ck.step >= 0);
    CG_FUZZ_CHECK(cg_pair_vocab_size(&ck.vocab) == ck.model->cfg.vocab);
    /* every tensor is a parameter or an optimizer slot of one */
    CG_FUZZ_CHECK(cg_ckpt_check_tensors(CG_MODULE(ck.model), ck.file, path));
    cg_param_list pl = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(ck.model), &pl));
    cg_optim_param *op = calloc((size_t)pl.n + 1, sizeof *op);
    CG_FUZZ_CHECK(op != NULL);
    for (int i = 0; i < pl.n; i++)
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.0};
    cg_optim_config oc = cg_adam_config(0.0, 0.9, 0.98, 1e-9);
    cg_optim *o = cg_optim_new(&oc, pl.n, op);
    CG_FUZZ_CHECK(o != NULL);
    cg_clear_error();
    if (!cg_optim_load(o, ck.file, "optim"))
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    if (cg_module_num_params(CG_MODULE(ck.model)) <= 100000 && ck.model->cfg.d <= 256 &&
        ck.model->cfg.max_len >= 2) {
        int64_t src[2] = {4 < ck.model->cfg.vocab ? 4 : 3, CG_EOS}, tin[1] = {CG_BOS};
        cg_tensor *logits = cg_seq2seq_forward(ck.model, src, 1, 2, tin, 1);
        CG_FUZZ_CHECK(logits != NULL);
        cg_release(logits);
    }
    cg_optim_free(o);
    free(op);
    cg_param_list_free(&pl);
    cg_seq2seq_ckpt_free(&ck);
    close(fd);
    return 0;
}
