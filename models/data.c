/* cgrad zoo: character corpus (see data.h). */
#include "models/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

uint32_t *cg_read_text_file(const char *path, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cg_set_error("cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    bool err = ferror(f);
    int e = errno;
    fclose(f);
    if (!buf) {
        cg_set_error("out of memory reading '%s'", path);
        return NULL;
    }
    if (err) {
        free(buf);
        cg_set_error("cannot read '%s': %s", path, strerror(e));
        return NULL;
    }
    if (len == 0) {
        free(buf);
        cg_set_error("'%s' is empty", path);
        return NULL;
    }
    uint32_t *cps = cg_utf8_decode(buf, len, path, n);
    free(buf);
    return cps;
}

cg_corpus *cg_corpus_new(const cg_vocab *vocab, const uint32_t *cps, int64_t n)
{
    cg_corpus *c = calloc(1, sizeof *c);
    int64_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!c || !ids) {
        free(c);
        free(ids);
        cg_set_error("out of memory");
        return NULL;
    }
    c->n = n;
    c->ids = ids;
    c->unknown = cg_vocab_encode(vocab, cps, n, ids, &c->first_unknown);
    c->n_train = (int64_t)(0.9 * (double)n); /* Python int(0.9 * len) */
    return c;
}

void cg_corpus_free(cg_corpus *c)
{
    if (!c)
        return;
    free(c->ids);
    free(c);
}

cg_split_view cg_corpus_train(const cg_corpus *c)
{
    return (cg_split_view){c->ids, c->n_train};
}

cg_split_view cg_corpus_val(const cg_corpus *c)
{
    return (cg_split_view){c->ids + c->n_train, c->n - c->n_train};
}

bool cg_get_batch(cg_split_view s, int64_t B, int64_t T, cg_rng *rng, int64_t *x, int64_t *y)
{
    if (s.n <= T) {
        cg_set_error("a split of %lld characters is too short for windows of %lld+1",
                     (long long)s.n, (long long)T);
        return false;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t i = (int64_t)cg_rng_below(rng, (uint64_t)(s.n - T));
        memcpy(x + b * T, s.ids + i, (size_t)T * sizeof *x);
        memcpy(y + b * T, s.ids + i + 1, (size_t)T * sizeof *y);
    }
    return true;
}
