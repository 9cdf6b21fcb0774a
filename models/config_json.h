/* cgrad zoo: typed readers for the fields of a model config JSON object.
 *
 * Each reader leaves *out unchanged when the key is absent (the default
 * stays) and records an error "<what>: \"key\" must be ..." when the value
 * has the wrong type. `what` names the config in messages ("charlm config"). */
#ifndef CG_MODELS_CONFIG_JSON_H
#define CG_MODELS_CONFIG_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "nn/layers.h"

/* A whole number (up to 9e15 in magnitude). */
bool cg_json_int(const cJSON *o, const char *what, const char *key, int64_t *out);
bool cg_json_float(const cJSON *o, const char *what, const char *key, float *out);
/* true/false, or the numbers 1/0. */
bool cg_json_bool(const cJSON *o, const char *what, const char *key, bool *out);
/* The string (borrowed from o), NULL when absent; *ok = false on a wrong type. */
const char *cg_json_str(const cJSON *o, const char *what, const char *key, bool *ok);

/* Parse json into an object (caller cJSON_Deletes it), or NULL + error. */
cJSON *cg_json_parse_object(const char *json, const char *what);
/* The "norm" and "act" strings, when present, parsed into *norm and *act. */
bool cg_json_norm_act(const cJSON *o, const char *what, cg_norm_kind *norm, cg_act *act);

#endif
