/* libFuzzer target: the char-LM checkpoint loader (models/train/checkpoint.h):
 * safetensors parsing, the "config" JSON, the "vocab" JSON, the step, the
 * model parameters, then the AdamW state (cg_optim_load) and the "train"
 * metadata with its loss history, as `charlm train --resume` uses them.
 *
 * The loader takes a path, so the input is put in an in-memory file
 * (memfd) and opened through /proc/self/fd. A checkpoint that loads must
 * run a forward pass on a one-token batch when the model is small. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/train/state.h"
#include "models/train/train_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = cg_fuzz_mem_path(data, size, path, sizeof path);
    if (fd < 0)
        return 0; /* environment problem, not an input problem */
    cg_clear_error();
    cg_charlm_ckpt ck;
    if (!cg_charlm_ckpt_load(path, &ck)) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        CG_FUZZ_CHECK(ck.model == NULL && ck.tok == NULL && ck.vocab == NULL && ck.file == NULL);
        close(fd);
        return 0;
    }
    CG_FUZZ_CHECK(ck.model && ck.tok && ck.file && ck.step >= 0);
    CG_FUZZ_CHECK(cg_tokenizer_vocab_size(ck.tok) == ck.model->cfg.vocab);
    CG_FUZZ_CHECK(!ck.vocab || ck.vocab == ck.tok->cv); /* a char tokenizer's vocabulary */

    /* the optimizer state, as a resumed run restores it */
    cg_param_list pl = {0};
    CG_FUZZ_CHECK(cg_module_params(CG_MODULE(ck.model), &pl));
    cg_optim_param *op = calloc((size_t)pl.n + 1, sizeof *op);
    CG_FUZZ_CHECK(op != NULL);
    for (int i = 0; i < pl.n; i++)
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.1};
    cg_optim_config oc = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    cg_optim *o = cg_optim_new(&oc, pl.n, op);
    CG_FUZZ_CHECK(o != NULL);
    cg_clear_error();
    if (!cg_optim_load(o, ck.file, "optim"))
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    const char *tj = cg_charlm_ckpt_train_json(&ck);
    if (tj) {
        CG_FUZZ_CHECK(strlen(tj) < size);
        /* the loss history: loads, or fails with a message; what loads
         * writes back as JSON that loads to the same history */
        cJSON *tjo = cg_train_state_parse(tj); /* as the trainer reads it */
        const cJSON *hist = cJSON_GetObjectItemCaseSensitive(tjo, "history");
        char *hj = hist ? cJSON_PrintUnformatted(hist) : NULL;
        if (hj) {
            cg_history h = {0}, h2 = {0};
            cg_clear_error();
            if (cg_history_from_json(hj, &h)) {
                CG_FUZZ_CHECK(h.dn < CG_HISTORY_DENSE_MAX && h.acc_n < cg_history_every(&h));
                char *j = cg_history_to_json(&h);
                CG_FUZZ_CHECK(j && cg_history_from_json(j, &h2) && h2.n == h.n && h2.dn == h.dn);
                free(j);
            } else {
                CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
            }
            cg_history_free(&h);
            cg_history_free(&h2);
            free(hj);
        }
        cJSON_Delete(tjo);
    }

    /* a small model must run */
    if (cg_module_num_params(CG_MODULE(ck.model)) <= 100000 && ck.model->cfg.d <= 256) {
        int64_t id = 0;
        cg_tensor *logits = cg_charlm_forward(ck.model, &id, 1, 1);
        CG_FUZZ_CHECK(logits != NULL);
        cg_release(logits);
    }
    cg_optim_free(o);
    free(op);
    cg_param_list_free(&pl);
    cg_charlm_ckpt_free(&ck);
    close(fd);
    return 0;
}
