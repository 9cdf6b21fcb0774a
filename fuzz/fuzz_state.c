/* libFuzzer target: the trainer's state parser, the "train" metadata of a
 * checkpoint as `train --resume` reads it: the fields of both programs'
 * states through the table-driven reader (models/config_json.h), the recent
 * losses, the data identity (models/outfile.h), the loss history
 * (models/train_common.h) and the seq2seq batch position. An input is
 * either refused with a message or every value read is in its range. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/config_json.h"
#include "models/outfile.h"
#include "models/train_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    CG_FUZZ_CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    cJSON *o = cJSON_Parse(s);
    int64_t steps = -1, epoch = -1, pos = -1, B = -1, max_len = -1;
    double lr = -1, elapsed = -1;
    uint64_t seed = 0, counter = 0;
    const char *data_path = NULL;
    const cg_json_field f[] = {
        {"steps", CG_JF_I64, &steps, 1, 1e9, false},
        {"epoch", CG_JF_I64, &epoch, 0, 1e9, true},
        {"pos", CG_JF_I64, &pos, 0, 1e9, true},
        {"batch_size", CG_JF_I64, &B, 1, 1e6, true},
        {"max_len", CG_JF_I64, &max_len, 3, 100000, true},
        {"lr", CG_JF_F64, &lr, 0, 10, true},
        {"elapsed", CG_JF_F64, &elapsed, 0, 1e12, true},
        {"seed", CG_JF_U64STR, &seed, 0, 0, true},
        {"dropout_counter", CG_JF_U64STR, &counter, 0, 0, true},
        {"data", CG_JF_STR, &data_path, 0, 0, true},
    };
    cg_clear_error();
    if (cg_json_read_fields(o, "state", f, (int)(sizeof f / sizeof f[0]))) {
        CG_FUZZ_CHECK(steps >= 1 && steps <= 1000000000);
        CG_FUZZ_CHECK(epoch == -1 || (epoch >= 0 && epoch <= 1000000000));
        CG_FUZZ_CHECK(lr == -1 || (lr >= 0 && lr <= 10));
        if (epoch >= 0 && pos >= 0)
            for (int64_t nb = 1; nb <= 4; nb++)
                if (cg_train_position_check(epoch, pos, nb, steps, "state"))
                    CG_FUZZ_CHECK(pos <= nb && (epoch == 0 || (epoch - 1) * nb + pos == steps));
    } else {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    }
    double recent[250];
    int n = -1;
    cg_clear_error();
    if (cg_json_f64_array(o, "state", "recent", recent, 250, &n)) {
        CG_FUZZ_CHECK(n >= 0 && n <= 250);
        for (int i = 0; i < n; i++)
            CG_FUZZ_CHECK(isfinite(recent[i]));
    } else {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "data_id");
    if (id) {
        cg_data_id d;
        cg_clear_error();
        if (cg_data_id_from_json(id, "state", &d)) {
            cJSON *back = cg_data_id_to_json(&d);
            cg_data_id d2;
            CG_FUZZ_CHECK(back && cg_data_id_from_json(back, "state", &d2));
            CG_FUZZ_CHECK(d2.size == d.size && d2.hash == d.hash && !strcmp(d2.path, d.path));
            cJSON_Delete(back);
        } else {
            CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        }
    }
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "history");
    char *hj = hist ? cJSON_PrintUnformatted(hist) : NULL;
    if (hj) {
        cg_history h = {0};
        cg_clear_error();
        if (cg_history_from_json(hj, &h))
            CG_FUZZ_CHECK(h.dn < CG_HISTORY_DENSE_MAX && h.acc_n < cg_history_every(&h));
        else
            CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        cg_history_free(&h);
        free(hj);
    }
    cJSON_Delete(o);
    free(s);
    return 0;
}
