/* zoo_translate: sentences translated by a `seq2seq train` checkpoint
 * through the installed library (models/zoo/zoo.h):
 *     cc zoo_translate.c $(pkg-config --cflags --libs cgrad-zoo)
 *     ./zoo_translate --ckpt seq2seq.safetensors --beam 4 "Where is the station?"
 * (--base FILE: a LoRA checkpoint's base, when it moved: cg_zoo_load_base)
 * One translation a line, as `seq2seq translate` prints them (greedy by
 * default; --beam N with --length-penalty A, default CG_ZOO_LENGTH_PENALTY). */
#include <stdio.h>
#include <string.h>

#include "core/parse.h"
#include "models/zoo/zoo.h"

static const char USAGE[] =
    "usage: zoo_translate --ckpt FILE [--base FILE] [--beam N] [--length-penalty A] [--]\n"
    "       SENTENCE...\n";

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *base = NULL;
    int64_t beam = 1;
    double alpha = CG_ZOO_LENGTH_PENALTY;
    int first = 1; /* the first sentence: the first argument that is not a flag */
    bool ok = true;
    for (; ok && first < argc && !strncmp(argv[first], "-", 1); first += 2) {
        const char *flag = argv[first], *v = first + 1 < argc ? argv[first + 1] : NULL;
        if (!strcmp(flag, "--")) { /* the sentences follow, even one starting with '-' */
            first++;
            break;
        }
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (strcmp(flag, "--ckpt") && strcmp(flag, "--base") && strcmp(flag, "--beam") &&
            strcmp(flag, "--length-penalty")) {
            fprintf(stderr, "zoo_translate: error: unknown flag '%s'\n%s", flag, USAGE);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "zoo_translate: error: %s needs a value\n%s", flag, USAGE);
            return 2;
        }
        if (!strcmp(flag, "--ckpt"))
            ckpt = v;
        else if (!strcmp(flag, "--base"))
            base = v;
        else if (!strcmp(flag, "--beam"))
            ok = cg_parse_i64(flag, v, 1, 1000, &beam);
        else
            ok = cg_parse_f64(flag, v, 0, 100, &alpha);
    }
    if (!ok || !ckpt || first >= argc) {
        fprintf(stderr, "zoo_translate: error: %s\n%s",
                !ok     ? cg_last_error()
                : !ckpt ? "--ckpt FILE is required"
                        : "no sentence given",
                USAGE);
        return 2;
    }
    int64_t n = argc - first;
    cg_zoo_model *m = cg_zoo_load_base(ckpt, base);
    cg_set_matmul_precision(cg_zoo_precision(m)); /* as trained, as the programs decode */
    char **out = cg_zoo_translate(m, (const char *const *)argv + first, n, (int)beam, alpha);
    for (int64_t i = 0; out && i < n; i++)
        printf("%s\n", out[i]);
    if (!out)
        fprintf(stderr, "zoo_translate: error: %s\n", cg_last_error());
    cg_zoo_strings_free(out, n);
    cg_zoo_free(m);
    return out ? 0 : 1;
}
