/* zoo_generate: text from a `charlm train` checkpoint through the installed
 * library (models/zoo/zoo.h; docs/architectures.md says what it computes):
 *     cc zoo_generate.c $(pkg-config --cflags --libs cgrad-zoo)
 *     ./zoo_generate --ckpt out/charlm.safetensors --prompt "Call me" --length 300 --top-k 5
 * The checkpoint's tokenizer turns the prompt into ids and the ids back into
 * text; the output equals `charlm sample` with the same flags (its
 * defaults too: prompt a newline, 500 ids, temperature 1, all ids, seed 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"
#include "models/zoo/zoo.h"

static const char USAGE[] = "usage: zoo_generate --ckpt FILE [--prompt TEXT] [--length N] "
                            "[--temperature X] [--top-k K] [--top-p P] [--seed N]\n";

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *prompt = "\n";
    int64_t length = 500;
    uint64_t seed = 1;
    cg_sample_config s = cg_sample_default(); /* temperature 1, top_k 0 (all), top_p 1 */
    bool ok = true;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "zoo_generate: error: %s needs a value (or is unknown)\n%s", flag,
                    USAGE);
            return 2;
        }
        if (!strcmp(flag, "--ckpt"))
            ckpt = v;
        else if (!strcmp(flag, "--prompt"))
            prompt = v;
        else if (!strcmp(flag, "--length"))
            ok = cg_parse_i64(flag, v, 0, 10000000, &length);
        else if (!strcmp(flag, "--temperature"))
            ok = cg_parse_f64(flag, v, 0, 1e6, &s.temperature);
        else if (!strcmp(flag, "--top-k"))
            ok = cg_parse_i64(flag, v, 0, 1 << 30, &s.top_k);
        else if (!strcmp(flag, "--top-p"))
            ok = cg_parse_f64(flag, v, 1e-9, 1, &s.top_p);
        else if (!strcmp(flag, "--seed"))
            ok = cg_parse_u64(flag, v, &seed);
        else {
            fprintf(stderr, "zoo_generate: error: unknown flag '%s'\n%s", flag, USAGE);
            return 2;
        }
    }
    if (!ok || !ckpt) {
        fprintf(stderr, "zoo_generate: error: %s\n%s",
                ok ? "--ckpt FILE is required" : cg_last_error(), USAGE);
        return 2;
    }
    cg_zoo_model *m = cg_zoo_load(ckpt);             /* config, tokenizer, weights */
    cg_set_matmul_precision(cg_zoo_precision(m));    /* as trained, as the programs decode */
    cg_tensor *ids = cg_zoo_encode(m, prompt, NULL); /* int64 [n] */
    cg_tensor *out = cg_zoo_generate(m, ids, length, &s, seed); /* int64 [n + length] */
    char *text = cg_zoo_decode(m, out);                         /* the prompt and the sample */
    if (text)
        printf("%s\n", text);
    else
        fprintf(stderr, "zoo_generate: error: %s\n", cg_last_error());
    free(text);
    cg_release(ids);
    cg_release(out);
    cg_zoo_free(m);
    return text ? 0 : 1;
}
