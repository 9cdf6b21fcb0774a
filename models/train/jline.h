/* cgrad zoo: one-line JSON objects (the programs' result lines and the
 * metrics log), built field by field. */
#ifndef CG_MODELS_TRAIN_JLINE_H
#define CG_MODELS_TRAIN_JLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A one-line JSON object built field by field ({"a": 1, "b": "x"}); a
 * non-finite number is written as null. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} cg_jline;

void cg_jline_num(cg_jline *j, const char *key, double v, int decimals);
void cg_jline_int(cg_jline *j, const char *key, int64_t v);
void cg_jline_str(cg_jline *j, const char *key, const char *v);
void cg_jline_bool(cg_jline *j, const char *key, bool v);
/* The finished line (borrowed, valid until cg_jline_free) or NULL. */
const char *cg_jline_end(cg_jline *j);
void cg_jline_free(cg_jline *j);

#ifdef __cplusplus
}
#endif
#endif
