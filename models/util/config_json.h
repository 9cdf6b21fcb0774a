/* cgrad zoo: JSON: typed readers for the fields of an object, the one
 * writer of the programs' JSON lines, and a model's config as one field
 * table (read, written and checked from it).
 *
 * Each reader leaves *out unchanged when the key is absent (the default
 * stays) and records an error "<what>: \"key\" must be ..." when the value
 * has the wrong type. `what` names the config in messages ("charlm config"). */
#ifndef CG_MODELS_CONFIG_JSON_H
#define CG_MODELS_CONFIG_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/layers.h"

/* A whole number (up to 9e15 in magnitude). */
bool cg_json_int(const cJSON *o, const char *what, const char *key, int64_t *out);
bool cg_json_float(const cJSON *o, const char *what, const char *key, float *out);
/* true/false, or the numbers 1/0. */
bool cg_json_bool(const cJSON *o, const char *what, const char *key, bool *out);
/* The string (borrowed from o), NULL when absent; *ok = false on a wrong type. */
const char *cg_json_str(const cJSON *o, const char *what, const char *key, bool *ok);

/* text as one JSON value, with nothing but whitespace after it: a new tree
 * (the caller cJSON_Deletes it), or NULL when text is NULL, is not JSON, has
 * bytes after its value, or memory ran out (no error recorded: the caller
 * says what was damaged). cJSON_Parse stops at the end of the first value,
 * so "{...}x" would read as whole; every JSON text the zoo reads goes
 * through here. */
cJSON *cg_json_parse(const char *text);
/* cg_json_parse, telling a parse that ran out of memory from a text that is
 * not JSON: *no_memory (cJSON allocates with malloc, which sets errno to
 * ENOMEM when it fails) and the error "out of memory" then. */
cJSON *cg_json_parse_mem(const char *text, bool *no_memory);
/* Parse json (as cg_json_parse) into an object (caller cJSON_Deletes it),
 * or NULL + error ("WHAT: out of memory" when the parse ran out of it). */
cJSON *cg_json_parse_object(const char *json, const char *what);
/* The "norm" and "act" strings, when present, parsed into *norm and *act. */
bool cg_json_norm_act(const cJSON *o, const char *what, cg_norm_kind *norm, cg_act *act);

/* The values the writer below is made of (lines are written with
 * cg_json_put_* and cg_json_line, not by hand): cg_json_num formats x with
 * fmt ("%.4f") or writes null when x is NaN or infinite; cg_json_quote
 * writes s as a JSON string literal (quotes and escapes; truncated at a
 * character boundary if buf is too small). Both return buf. The macros
 * give each use its own buffer (a compound literal living to the end of
 * the enclosing block). */
const char *cg_json_num(char *buf, size_t n, const char *fmt, double x);
const char *cg_json_quote(char *buf, size_t n, const char *s);
/* Names (file paths) are bytes; JSON strings are UTF-8. cg_json_quote
 * writes a byte that is not UTF-8 as \udcXX (Python's surrogateescape:
 * os.fsencode(json.loads(line)["checkpoint"]) gives the bytes back).
 * cg_json_add_name puts a name into a cJSON object (for metadata, which
 * must be strict UTF-8): "key" as is when it is UTF-8; otherwise "key" with
 * each bad byte shown as U+FFFD and "key_hex" holding the bytes in hex.
 * cg_json_name_decode, after parsing, puts those bytes back into "key"
 * (false + error naming `what` when "key_hex" is not hex, or when memory
 * runs out). */
bool cg_json_add_name(cJSON *o, const char *key, const char *name);
bool cg_json_name_decode(cJSON *o, const char *key, const char *what);
/* The name of "key" (cg_json_add_name's form) as bytes, malloc'd; NULL when
 * absent, not a string or not hex, or (errno ENOMEM) out of memory. */
char *cg_json_get_name(const cJSON *o, const char *key);
#define CG_JSON_NUM(fmt, x) cg_json_num((char[64]){0}, 64, (fmt), (x))
#define CG_JSON_STR(s) cg_json_quote((char[4200]){0}, 4200, (s))

/* The one writer of the programs' JSON lines (result lines, the metrics
 * log, a checkpoint's "config"): build a cJSON object with these, then
 * print it with cg_json_line. A number keeps the printf format it is given
 * ("%.4f"; null when not finite), a string is written by cg_json_quote (a
 * name's bytes that are not UTF-8 as \udcXX), an integer exactly. Each adds
 * key to o; false + error when out of memory, and o is then refused by
 * cg_json_line (a line is printed whole or not at all). */
bool cg_json_put_num(cJSON *o, const char *key, const char *fmt, double v);
bool cg_json_put_int(cJSON *o, const char *key, int64_t v);
bool cg_json_put_str(cJSON *o, const char *key, const char *s);
bool cg_json_put_bool(cJSON *o, const char *key, bool v);
/* o as one line {"a": 1, "b": "x"} (malloc'd, no newline) or NULL + error
 * (out of memory, now or in a put into o). */
char *cg_json_line(const cJSON *o);
/* Print o as one line on f, then a newline, and fflush; false + error when
 * out of memory or when the line could not be written ("cannot write the
 * output: Broken pipe": models/util/files.h cg_output_flush). */
bool cg_json_print_line(FILE *f, const cJSON *o);

/* A model's config as one field table, read and written the same way:
 * cg_config_read fills the fields of *cfg present in json (the others keep
 * what they hold; "norm" and "act" by name), false + "<what>: ..." for a
 * bad one; cg_config_write gives {"model": "NAME", "key": value, ...} in
 * table order (floats as "%.9g"), malloc'd, or NULL + error.
 *
 * Two kinds record facts of the architecture that are not fields
 * (docs/architectures.md), so that a checkpoint says what it holds:
 *   CG_CF_CONST  a fact every model of the kind has (the JSON literal
 *                `value`, e.g. "\"sinusoidal\"", "true", "1e-05"): written
 *                as it is; read, it may be absent (older files: the same
 *                meaning) but any other value is refused, naming the key;
 *   CG_CF_SAME   a bool that follows the bool field at offset (ln_f exists
 *                exactly when norm_first): written as that field; read, it
 *                must agree with it;
 *   CG_CF_GELU   PyTorch's approximate= of the GELU of the cg_act field at
 *                offset (nn/layers.h's table: "tanh" for gelu, "none" for
 *                gelu_erf; "tanh" for relu, as configs before gelu_erf
 *                wrote it): written so; read, it must agree with act.
 * And one kind names a choice:
 *   CG_CF_NAME   an int field (an enum) written as its name, `value` the
 *                names in the enum's order, '|' between them
 *                ("sinusoidal|rope"); read, absent keeps the default, a
 *                name not in the list is refused naming the key and the
 *                names. */
typedef enum {
    CG_CF_I64,
    CG_CF_BOOL,
    CG_CF_PROB, /* a float in [0, 1]: a probability as nn.Dropout takes it, label smoothing */
    CG_CF_NORM,
    CG_CF_ACT,
    CG_CF_CONST,
    CG_CF_SAME,
    CG_CF_GELU,
    CG_CF_NAME
} cg_config_kind;
typedef struct {
    const char *key;
    cg_config_kind kind;
    size_t offset;     /* of the field in the config struct: int64_t, bool, float,
                        * cg_norm_kind, cg_act (CG_CF_SAME, CG_CF_GELU: the field
                        * it follows) */
    const char *value; /* CG_CF_CONST: the JSON literal; CG_CF_NAME: the names */
    /* cg_config_check's rules: a range where hi > lo (CG_CF_I64 in [lo, hi]),
     * note added to its message; divides: the key
     * of the CG_CF_I64 field this one must divide ("H" divides "d") */
    double lo, hi;
    const char *note, *divides;
} cg_config_field;
#define CG_CF_NO_MAX 9e15
/* A row: an integer field f of `type` in [lo, hi]. */
#define CG_CF_INT(type, f, lo, hi)                                     \
    {                                                                  \
#f, CG_CF_I64, offsetof(type, f), NULL, (lo), (hi), NULL, NULL \
    }
/* A float field f of `type` in [0, 1] (dropout, label smoothing). */
#define CG_CF_PROBABILITY(type, f)                                \
    {                                                             \
#f, CG_CF_PROB, offsetof(type, f), NULL, 0, 1, NULL, NULL \
    }
/* The fields both zoo models have, in the order they are written: the
 * width and heads (after vocab), then the rest of the block (after the
 * layer counts). */
/* clang-format off */
#define CG_CONFIG_ZOO_WIDTH(type)                                              \
    CG_CF_INT(type, d, 1, CG_CF_NO_MAX),                                       \
    {"H", CG_CF_I64, offsetof(type, H), NULL, 1, CG_CF_NO_MAX, NULL, "d"},     \
    {"kv_heads", CG_CF_I64, offsetof(type, kv_heads), NULL, 0, CG_CF_NO_MAX,   \
     " (0: H)", "H"}
#define CG_CONFIG_ZOO_BLOCK(type)                                              \
    CG_CF_INT(type, d_ff, 1, CG_CF_NO_MAX),                                    \
    CG_CF_INT(type, max_len, 1, CG_CF_NO_MAX),                                 \
    {"norm", CG_CF_NORM, offsetof(type, norm), NULL, 0, 0, NULL, NULL},        \
    {"act", CG_CF_ACT, offsetof(type, act), NULL, 0, 0, NULL, NULL},           \
    {"norm_first", CG_CF_BOOL, offsetof(type, norm_first), NULL, 0, 0, NULL, NULL}, \
    CG_CF_PROBABILITY(type, dropout),                                          \
    CG_CF_PROBABILITY(type, attn_dropout)
/* clang-format on */
/* The facts both zoo models share (docs/architectures.md), as entries of a
 * table over the config struct `type`: norms with eps 1e-5; the form of
 * the GELU act names (gelu: PyTorch's nn.GELU(approximate="tanh"),
 * gelu_erf: nn.GELU(), approximate="none"); a final norm ln_f
 * exactly when pre-norm; token embeddings times sqrt(d) plus sinusoidal
 * positions (not learnt, not stored); the output head tied to the
 * embedding; and (a field, not a fact: true unless --bias false) biases in
 * every Linear and LayerNorm. */
/* clang-format off */
#define CG_CF_FACT(key, json) {(key), CG_CF_CONST, 0, (json), 0, 0, NULL, NULL}
#define CG_CONFIG_ZOO_FACTS(type, pos_names)                                           \
    CG_CF_FACT("norm_eps", "1e-05"),                                                   \
    {"gelu_approximate", CG_CF_GELU, offsetof(type, act), NULL, 0, 0, NULL, NULL},     \
    {"final_norm", CG_CF_SAME, offsetof(type, norm_first), NULL, 0, 0, NULL, NULL},    \
    {"emb_scale", CG_CF_NAME, offsetof(type, emb_scale), "sqrt_d|none", 0, 0, NULL, NULL}, \
    {"pos_enc", CG_CF_NAME, offsetof(type, pos_enc), (pos_names), 0, 0, NULL, NULL},   \
    CG_CF_INT(type, rope_theta, 2, 1e12),                                              \
    CG_CF_FACT("tied_head", "true"),                                                   \
    {"bias", CG_CF_BOOL, offsetof(type, bias), NULL, 0, 0, NULL, NULL}
/* clang-format on */
bool cg_config_read(const char *json, const char *what, const cg_config_field *f, int n, void *cfg);
char *cg_config_write(const char *model, const cg_config_field *f, int n, const void *cfg);
/* Do the configs *a and *b (of one table) describe one architecture, so
 * that their parameters mean the same (checkpoint averaging)? Every field
 * is compared except the floats (CG_CF_PROB: dropout, label
 * smoothing, the training recipe). False + error naming the first field that differs
 * ("d is 128 in one and 64 in the other") otherwise. */
bool cg_config_same_arch(const cg_config_field *f, int n, const void *a, const void *b);

/* A model's config as a whole: its name ("charlm": the JSON "model" and
 * messages "charlm config: ..."), its field table, the size of its struct
 * and its defaults. What each model's cg_X_config_check, _from_json,
 * _to_json and _same_arch are made of:
 *   cg_config_check     every rule of the table, in table order (ranges,
 *                       divides, a norm and act of nn's tables): false +
 *                       "charlm config: d=30 is not divisible by H=4";
 *   cg_config_parse     the defaults, then the fields present in json, then
 *                       the check, into *out (unchanged on failure);
 *   cg_config_to_json   checked, then written (cg_config_write);
 *   cg_config_same_arch_json  both parsed, then cg_config_same_arch. */
typedef struct {
    const char *model;
    const cg_config_field *fields;
    int n;
    size_t size;
    const void *defaults;
} cg_config_model;
bool cg_config_check(const cg_config_model *m, const void *cfg);
bool cg_config_parse(const cg_config_model *m, const char *json, void *out);
char *cg_config_to_json(const cg_config_model *m, const void *cfg);
bool cg_config_same_arch_json(const cg_config_model *m, const char *json_a, const char *json_b);

/* A table-driven reader for a trainer's state object (the "train"
 * metadata of a checkpoint): every field is type- and range-checked before
 * use, so a damaged checkpoint gives one clear message instead of a crash,
 * a hang or a silent default. */
typedef enum {
    CG_JF_I64,    /* whole number in [lo, hi] -> int64_t */
    CG_JF_F64,    /* finite number in [lo, hi], or its decimal string -> double */
    CG_JF_U64STR, /* decimal string (a 64-bit seed or counter) -> uint64_t */
    CG_JF_STR,    /* string -> const char * (borrowed from the object) */
    CG_JF_BOOL    /* true or false -> bool */
} cg_json_field_kind;

typedef struct {
    const char *key;
    cg_json_field_kind kind;
    void *dst;
    double lo, hi; /* CG_JF_I64 and CG_JF_F64 */
    bool optional; /* absent: *dst left as it is */
} cg_json_field;

/* Read n fields of object o. False + "<what>: ..." naming the first bad or
 * missing field and its value. */
bool cg_json_read_fields(const cJSON *o, const char *what, const cg_json_field *f, int n);
/* Write n fields into object o, as cg_json_read_fields reads them back
 * exactly: CG_JF_I64 as a number, CG_JF_F64 ("%.17g") and CG_JF_U64STR as
 * decimal strings, CG_JF_STR as a string, CG_JF_BOOL as true/false. False +
 * error. */
bool cg_json_write_fields(cJSON *o, const cg_json_field *f, int n);
/* Up to max numbers of the array o[key] into out (linear time); *n gets the
 * count. Absent: *n = 0. False + error when it is not an array of finite
 * numbers or holds more than max. */
bool cg_json_f64_array(const cJSON *o, const char *what, const char *key, double *out, int max,
                       int *n);

#endif
