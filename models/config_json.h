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

/* A table-driven reader for a trainer's state object (the "train"
 * metadata of a checkpoint): every field is type- and range-checked before
 * use, so a damaged checkpoint gives one clear message instead of a crash,
 * a hang or a silent default. */
typedef enum {
    CG_JF_I64,    /* whole number in [lo, hi] -> int64_t */
    CG_JF_F64,    /* finite number in [lo, hi] -> double */
    CG_JF_U64STR, /* decimal string (a 64-bit seed or counter) -> uint64_t */
    CG_JF_STR     /* string -> const char * (borrowed from the object) */
} cg_json_field_kind;

typedef struct {
    const char *key;
    cg_json_field_kind kind;
    void *dst;
    double lo, hi;   /* CG_JF_I64 and CG_JF_F64 */
    bool optional;   /* absent: *dst left as it is */
} cg_json_field;

/* Read n fields of object o. False + "<what>: ..." naming the first bad or
 * missing field and its value. */
bool cg_json_read_fields(const cJSON *o, const char *what, const cg_json_field *f, int n);
/* Up to max numbers of the array o[key] into out (linear time); *n gets the
 * count. Absent: *n = 0. False + error when it is not an array of finite
 * numbers or holds more than max. */
bool cg_json_f64_array(const cJSON *o, const char *what, const char *key, double *out, int max,
                       int *n);

#endif
