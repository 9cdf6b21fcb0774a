/* cgrad zoo: every MPI rank started with the same run (see agree.h). */
#include "models/train/agree.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/dist.h"
#include "models/train/state.h"
#include "models/util/config_json.h"

/* The leaves of o as flat["a.b.c"] = the leaf's JSON text. */
static bool flatten(const cJSON *o, const char *prefix, cJSON *flat)
{
    bool ok = true;
    for (const cJSON *c = o ? o->child : NULL; ok && c; c = c->next) {
        char key[512];
        snprintf(key, sizeof key, "%s%s", prefix, c->string ? c->string : "?");
        if (cJSON_IsObject(c)) {
            char sub[520];
            snprintf(sub, sizeof sub, "%s.", key);
            ok = flatten(c, sub, flat);
        } else {
            char *v = cJSON_PrintUnformatted(c);
            ok = v && cJSON_AddStringToObject(flat, key, v);
            free(v);
        }
    }
    return ok;
}

/* A file's identity (cg_data_id_to_json) without its path, which is per
 * machine. */
static void drop_path(cJSON *id)
{
    cJSON_DeleteItemFromObjectCaseSensitive(id, "path");
    cJSON_DeleteItemFromObjectCaseSensitive(id, "path_hex");
}

/* The error for rank 0's leaf c ("key": its JSON text) that differs on
 * some rank (NULL: a rank has a leaf rank 0 has not), naming the flag; of
 * a resumed run (where auto is the checkpoint's on every rank) when
 * resumed. */
static void ranks_differ(const cJSON *c, bool resumed)
{
    const char *why = "every rank needs the same data and flags";
    if (!c) {
        cg_set_error("the ranks were not started with the same run: a rank was given a setting "
                     "rank 0 was not; %s",
                     why);
        return;
    }
    const char *key = c->string, *leaf = strrchr(key, '.');
    leaf = leaf ? leaf + 1 : key;
    char flag[256];
    if (!strncmp(key, "data_id.", 8))
        snprintf(flag, sizeof flag, "--data (the file's content)");
    else if (!strncmp(key, "model.extra_data_id.", 20))
        snprintf(flag, sizeof flag, "--extra-data (the file's content)");
    else if (!strncmp(key, "init_from", 9))
        snprintf(flag, sizeof flag, "--init-from (the base checkpoint's content)");
    else if (!strncmp(key, "history.", 8) || !strcmp(key, "recent"))
        snprintf(flag, sizeof flag, "the checkpoint resumed");
    else {
        snprintf(flag, sizeof flag, "--%s", leaf);
        for (char *p = flag; *p; p++)
            if (*p == '_')
                *p = '-';
    }
    if (!strcmp(key, "options.precision"))
        why = resumed ? "--precision given to --resume switches the run: give every rank the "
                        "same --precision, or none"
                      : "--precision auto chooses by each rank's CPU: give every rank --precision "
                        "fp32 or bf16";
    cg_set_error("the ranks were not started with the same run: %s differs between ranks "
                 "(rank 0: %s = %s); %s",
                 flag, key, c->valuestring, why);
}

bool cg_trainer_ranks_agree(const cg_trainer *t, const cg_trainer_model *m)
{
    if (cg_dist_size() <= 1)
        return true;
    const unsigned long serial = cg_error_serial();
    char *sj = cg_train_state_json(t, m), *cj = sj ? m->config_json(m->self) : NULL;
    cJSON *s = cj ? cg_json_parse(sj) : NULL, *cfg = s ? cg_json_parse(cj) : NULL;
    cJSON *flat = cfg ? cJSON_CreateObject() : NULL, *run = flat ? cJSON_CreateObject() : NULL;
    free(sj);
    free(cj);
    bool ok = run != NULL;
    if (ok) {
        cJSON_DeleteItemFromObjectCaseSensitive(s, "data"); /* paths: per machine */
        cJSON_DeleteItemFromObjectCaseSensitive(s, "data_hex");
        drop_path(cJSON_GetObjectItemCaseSensitive(s, "data_id"));
        drop_path(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "model"),
                                                   "extra_data_id")); /* seq2seq --extra-data */
        /* --keep-last's files and their list: rank 0's alone (state.c) */
        static const char *const root_only[] = {"kept", "kept_dropped", "keep_last", "kept_out",
                                                "kept_out_hex"};
        for (size_t i = 0; i < sizeof root_only / sizeof *root_only; i++)
            cJSON_DeleteItemFromObjectCaseSensitive(s, root_only[i]);
        const cg_train_opts *o = t->o;
        /* the base's content (its path is per machine too), "none" without */
        cJSON *b = t->from_origin ? cg_data_id_to_json(&t->origin.id) : cJSON_CreateString("none");
        drop_path(b);
        ok = cJSON_AddNumberToObject(run, "stop_at", (double)o->stop_at) &&
             cJSON_AddNumberToObject(run, "max_minutes", o->max_minutes) &&
             cJSON_AddBoolToObject(run, "skip_nonfinite", o->skip_nonfinite) &&
             cJSON_AddNumberToObject(run, "zero", (double)o->zero) && b &&
             cJSON_AddItemToObject(run, "init_from", b);
        if (!ok) /* (not added: still ours) */
            cJSON_Delete(b);
        ok = ok && flatten(s, "", flat) && flatten(cfg, "config.", flat) && flatten(run, "", flat);
    }
    /* rank 0's list to every rank: its length, then its bytes */
    char *mine = ok ? cJSON_PrintUnformatted(flat) : NULL;
    uint64_t len = mine ? strlen(mine) + 1 : 0;
    ok = mine && cg_dist_broadcast_bytes(&len, sizeof len);
    char *root = ok ? malloc(len) : NULL;
    if (root && cg_dist_is_root())
        memcpy(root, mine, len);
    ok = root && cg_dist_broadcast_bytes(root, len);
    cJSON *rf = ok ? cg_json_parse(root) : NULL;
    /* the first of rank 0's leaves that differs here */
    int idx = 0, first = -1;
    for (const cJSON *c = rf ? rf->child : NULL; c && first < 0; c = c->next, idx++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(flat, c->string);
        if (!cJSON_IsString(v) || strcmp(v->valuestring, c->valuestring) != 0)
            first = idx;
    }
    if (rf && first < 0 && cJSON_GetArraySize(flat) != cJSON_GetArraySize(rf))
        first = idx;                             /* leaves rank 0 does not have */
    double worst = first >= 0 ? 1e9 - first : 0; /* the lowest index over the ranks */
    bool sent = ok && cg_dist_allreduce_max(&worst, 1);
    if (sent && worst > 0) {
        ranks_differ(rf ? cJSON_GetArrayItem(rf, (int)(1e9 - worst)) : NULL, t->o->resume != NULL);
        ok = false;
    } else if (!sent) {
        ok = false;
    }
    free(mine);
    free(root);
    cJSON_Delete(rf);
    cJSON_Delete(s);
    cJSON_Delete(cfg);
    cJSON_Delete(flat);
    cJSON_Delete(run);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("out of memory");
    return ok;
}
