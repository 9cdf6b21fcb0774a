/* libFuzzer target: the trainer's state parser (models/train/trainer.h
 * cg_trainer_restore): a checkpoint's "train" metadata as `--resume` reads
 * it, with its loss history, recent losses and data identity (models/train/outfile.h).
 * Whatever loads must be in
 * range; whatever is refused must say why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/train/trainer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = malloc(size + 1);
    if (!json)
        return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    cg_train_opts o;
    memset(&o, 0, sizeof o);
    cg_train_opts_init(&o);
    cg_trainer t;
    cg_trainer_init(&t, &o);
    cg_clear_error();
    if (cg_trainer_restore(&t, json, "fuzz")) {
        CG_FUZZ_CHECK(o.steps >= 1 && o.eval_every >= 1 && o.grad_accum >= 1);
        CG_FUZZ_CHECK(t.n_recent >= 0 && t.n_recent <= CG_TRAIN_RECENT);
        CG_FUZZ_CHECK(t.hist.dn < CG_HISTORY_DENSE_MAX && t.hist.acc_n < cg_history_every(&t.hist));
        CG_FUZZ_CHECK(t.model_state != NULL && o.data != NULL);
        if (t.data_stored_set) { /* the identity round-trips */
            cJSON *back = cg_data_id_to_json(&t.data_stored);
            cg_data_id d;
            CG_FUZZ_CHECK(back && cg_data_id_from_json(back, "fuzz", &d));
            CG_FUZZ_CHECK(d.size == t.data_stored.size && d.hash == t.data_stored.hash &&
                          !strcmp(d.path, t.data_stored.path));
            cJSON_Delete(back);
        }
        char *hj = cg_history_to_json(&t.hist);
        CG_FUZZ_CHECK(hj != NULL);
        free(hj);
    } else {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    }
    cg_trainer_end(&t);
    free(json);
    return 0;
}
