/* libFuzzer target: the metrics-log reader used on --resume
 * (models/train/outfile.h cg_metrics_log_keep): whatever bytes the log holds
 * (torn, damaged, hostile), what is kept is a sequence of complete lines,
 * each a JSON object whose "step" is at most the checkpoint's, with steps
 * that never go back within a kind; reading what was kept keeps all of it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/train/outfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the first byte picks the checkpoint's step, the rest is the log */
    int64_t step = size > 0 ? data[0] * 37 : 0;
    const char *log = size > 0 ? (const char *)data + 1 : "";
    size_t len = size > 0 ? size - 1 : 0;
    size_t n = 0;
    int64_t dropped = 0;
    cg_clear_error();
    char *kept = cg_metrics_log_keep(log, len, step, &n, &dropped);
    if (!kept) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        return 0;
    }
    CG_FUZZ_CHECK(n <= len && strlen(kept) == n && dropped >= 0);
    CG_FUZZ_CHECK(n == 0 || kept[n - 1] == '\n');
    int64_t last[2] = {-1, -1};
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(kept + i, '\n', n - i);
        CG_FUZZ_CHECK(nl != NULL);
        size_t l = (size_t)(nl - (kept + i));
        cJSON *j = cJSON_ParseWithLength(kept + i, l);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        CG_FUZZ_CHECK(cJSON_IsObject(j) && cJSON_IsNumber(s));
        int e = cJSON_GetObjectItemCaseSensitive(j, "val_loss") != NULL;
        CG_FUZZ_CHECK(s->valuedouble <= (double)step && s->valuedouble > (double)last[e]);
        last[e] = (int64_t)s->valuedouble;
        cJSON_Delete(j);
        i += l + 1;
    }
    /* what is kept is kept again, whole */
    size_t n2 = 0;
    int64_t d2 = 0;
    char *again = cg_metrics_log_keep(kept, n, step, &n2, &d2);
    CG_FUZZ_CHECK(again && n2 == n && d2 == 0 && memcmp(again, kept, n) == 0);
    free(again);
    free(kept);
    return 0;
}
