/* cgrad zoo: the identity of a data file (see data_id.h). */
#include "models/data/data_id.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "core/error.h"
#include "models/util/config_json.h"

/* ------------------------------------------------------------ data identity */
void cg_data_id_of(const char *path, const void *bytes, size_t len, cg_data_id *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    /* a FIFO's too, so that eval and --resume from another directory find
     * it and refuse it (a pipe: realpath fails on "pipe:[N]", kept as given) */
    char *abs = stat(path, &st) == 0 && (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))
                    ? realpath(path, NULL)
                    : NULL;
    snprintf(out->path, sizeof out->path, "%s", abs ? abs : path);
    free(abs);
    out->size = (uint64_t)len;
    out->hash = (uint64_t)XXH3_64bits(bytes, len);
}

cJSON *cg_data_id_to_json(const cg_data_id *id)
{
    cJSON *o = cJSON_CreateObject();
    char h[24], sz[24];
    snprintf(h, sizeof h, "%016" PRIx64, id->hash);
    snprintf(sz, sizeof sz, "%" PRIu64, id->size);
    if (!o || !cg_json_add_name(o, "path", id->path) || !cJSON_AddStringToObject(o, "size", sz) ||
        !cJSON_AddStringToObject(o, "xxh3", h)) {
        cJSON_Delete(o);
        cg_set_error("out of memory");
        return NULL;
    }
    return o;
}

bool cg_data_id_from_json(const cJSON *o, const char *what, cg_data_id *out)
{
    memset(out, 0, sizeof *out);
    errno = 0;
    char *p = cg_json_get_name(o, "path"); /* the bytes, also of a non-UTF-8 name */
    const bool oom = !p && errno == ENOMEM;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "size");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "xxh3");
    char *e1 = NULL, *e2 = NULL;
    bool ok = p && cJSON_IsString(s) && cJSON_IsString(h) && strlen(p) < sizeof out->path &&
              s->valuestring[0] >= '0' && s->valuestring[0] <= '9' && strlen(h->valuestring) == 16;
    if (ok) {
        errno = 0;
        out->size = strtoull(s->valuestring, &e1, 10);
        out->hash = strtoull(h->valuestring, &e2, 16);
        ok = errno == 0 && *e1 == '\0' && *e2 == '\0';
        snprintf(out->path, sizeof out->path, "%s", p);
    }
    free(p);
    if (oom)
        cg_set_error("%s: out of memory reading the data identity", what);
    else if (!ok)
        cg_set_error("%s: malformed data identity (expected {\"path\": ..., \"size\": \"N\", "
                     "\"xxh3\": \"<16 hex digits>\"})",
                     what);
    return ok;
}

bool cg_data_id_check(const cg_data_id *stored, const cg_data_id *read)
{
    if (read->size != stored->size) {
        cg_set_error("'%s' is not the data this checkpoint was trained on ('%s'): %" PRIu64
                     " bytes, the checkpoint's %" PRIu64,
                     read->path, stored->path, read->size, stored->size);
        return false;
    }
    if (read->hash != stored->hash) {
        cg_set_error("'%s' is not the data this checkpoint was trained on ('%s'): same size "
                     "(%" PRIu64 " bytes) but a different checksum (xxh3 %016" PRIx64 ", the "
                     "checkpoint's %016" PRIx64 "; edited?)",
                     read->path, stored->path, read->size, read->hash, stored->hash);
        return false;
    }
    return true;
}
