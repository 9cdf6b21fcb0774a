/* Typed readers for model config JSON fields (see config_json.h). */
#include "models/config_json.h"

#include <math.h>

#include "core/error.h"

bool cg_json_int(const cJSON *o, const char *what, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9e15) {
        cg_set_error("%s: \"%s\" must be an integer", what, key);
        return false;
    }
    *out = (int64_t)v->valuedouble;
    return true;
}

bool cg_json_float(const cJSON *o, const char *what, const char *key, float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (!cJSON_IsNumber(v)) {
        cg_set_error("%s: \"%s\" must be a number", what, key);
        return false;
    }
    *out = (float)v->valuedouble;
    return true;
}

bool cg_json_bool(const cJSON *o, const char *what, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
    } else if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) {
        *out = v->valuedouble != 0;
    } else {
        cg_set_error("%s: \"%s\" must be true or false", what, key);
        return false;
    }
    return true;
}

const char *cg_json_str(const cJSON *o, const char *what, const char *key, bool *ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return NULL;
    if (!cJSON_IsString(v)) {
        cg_set_error("%s: \"%s\" must be a string", what, key);
        *ok = false;
        return NULL;
    }
    return v->valuestring;
}

cJSON *cg_json_parse_object(const char *json, const char *what)
{
    if (!json) {
        cg_set_error("%s: NULL argument", what);
        return NULL;
    }
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cg_set_error("%s: not a JSON object", what);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

bool cg_json_norm_act(const cJSON *o, const char *what, cg_norm_kind *norm, cg_act *act)
{
    bool ok = true;
    const char *s = cg_json_str(o, what, "norm", &ok);
    if (ok && s)
        ok = cg_norm_kind_parse(s, norm);
    if (ok) {
        s = cg_json_str(o, what, "act", &ok);
        if (ok && s)
            ok = cg_act_parse(s, act);
    }
    return ok;
}
