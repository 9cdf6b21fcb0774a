/* Extra training pairs for the seq2seq model (see pairs.h
 * cg_pairs_add_extra): another file's pairs join the training split, never
 * one that shares a side with a held-out pair. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "models/data/pairs.h"

/* A set of strings (borrowed): open addressing, XXH3-64 of the bytes. */
typedef struct {
    const char **slot;
    uint64_t mask;
} str_set;

static bool set_init(str_set *s, int64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap <<= 1;
    s->slot = calloc(cap, sizeof *s->slot);
    s->mask = cap - 1;
    return s->slot != NULL;
}

/* Is str in s? Added when not and add is set. */
static bool set_has(str_set *s, const char *str, bool add)
{
    uint64_t h = XXH3_64bits(str, strlen(str)) & s->mask;
    for (; s->slot[h]; h = (h + 1) & s->mask)
        if (!strcmp(s->slot[h], str))
            return true;
    if (add)
        s->slot[h] = str;
    return false;
}

/* The indices of the pairs of x that may join: keep[0..*n) in x's order. */
static void extra_select(const cg_pairs *p, const cg_pair_split *sp, const cg_pairs *x,
                         str_set *held, str_set *seen, int64_t *keep, cg_pairs_extra *c)
{
    const int64_t *out[2] = {sp->valid, sp->test}, n_out[2] = {sp->n_valid, sp->n_test};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n_out[k]; i++) {
            set_has(held, p->items[out[k][i]].src, true);
            set_has(held, p->items[out[k][i]].tgt, true);
        }
    for (int64_t i = 0; i < sp->n_train; i++)
        set_has(seen, p->items[sp->train[i]].src, true);
    *c = (cg_pairs_extra){.read = x->n};
    for (int64_t i = 0; i < x->n; i++) {
        const cg_pair *q = &x->items[i];
        if (set_has(held, q->src, false) || set_has(held, q->tgt, false))
            c->held_out++;
        else if (set_has(seen, q->src, true))
            c->duplicates++;
        else
            keep[c->used++] = i;
    }
}

/* p's pairs and x's keep[0..n) with their text in one new buffer (p's
 * items grown to hold them, already); false: out of memory. */
static bool append_text(cg_pairs *p, const cg_pairs *x, const int64_t *keep, int64_t n)
{
    size_t total = 1;
    for (int64_t i = 0; i < p->n + n; i++) {
        const cg_pair *q = i < p->n ? &p->items[i] : &x->items[keep[i - p->n]];
        total += strlen(q->src) + strlen(q->tgt) + 2;
    }
    char *buf = malloc(total), *w = buf;
    if (!buf)
        return false;
    for (int64_t i = 0; i < p->n + n; i++) {
        cg_pair q = i < p->n ? p->items[i] : x->items[keep[i - p->n]];
        size_t ls = strlen(q.src) + 1, lt = strlen(q.tgt) + 1;
        memcpy(w, q.src, ls);
        memcpy(w + ls, q.tgt, lt);
        p->items[i] = (cg_pair){w, w + ls, q.src_len, q.tgt_len, NULL, NULL};
        w += ls + lt;
    }
    free(p->buf);
    p->buf = buf;
    p->n += n;
    return true;
}

bool cg_pairs_add_extra(cg_pairs *p, cg_pair_split *split, const cg_pairs *x, cg_pairs_extra *c)
{
    *c = (cg_pairs_extra){0};
    if (p->ids) {
        cg_set_error("extra pairs: the pairs are tokenized already");
        return false;
    }
    str_set held = {0}, seen = {0};
    int64_t *keep = malloc((size_t)(x->n ? x->n : 1) * sizeof *keep);
    bool ok = keep && set_init(&held, 2 * (split->n_valid + split->n_test)) &&
              set_init(&seen, split->n_train + x->n);
    cg_pairs_extra got = {0};
    if (ok)
        extra_select(p, split, x, &held, &seen, keep, &got);
    int64_t n = got.used;
    cg_pair *items = ok ? realloc(p->items, (size_t)(p->n + n + 1) * sizeof *items) : NULL;
    if (items) {
        p->items = items;
        p->cap = p->n + n + 1;
    }
    int64_t *train =
        items ? realloc(split->train, (size_t)(split->n_train + n + 1) * sizeof *train) : NULL;
    if (train)
        split->train = train;
    ok = train && append_text(p, x, keep, n);
    if (ok) {
        for (int64_t i = 0; i < n; i++)
            split->train[split->n_train + i] = p->n - n + i;
        split->n_train += n;
        *c = got;
    } else {
        cg_set_error("extra pairs: out of memory");
    }
    free(keep);
    free(held.slot);
    free(seen.slot);
    return ok;
}
