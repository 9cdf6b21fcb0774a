/* cgrad zoo: characters or BPE behind one interface (see tokenizer.h). */
#include "models/text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/safetensors.h"

bool cg_tokenizer_kind_parse(const char *s, cg_tokenizer_kind *out)
{
    if (s && strcmp(s, "char") == 0)
        *out = CG_TOK_CHAR;
    else if (s && strcmp(s, "bpe") == 0)
        *out = CG_TOK_BPE;
    else {
        cg_set_error("unknown tokenizer '%s' (choose char or bpe)", s ? s : "(null)");
        return false;
    }
    return true;
}

const char *cg_tokenizer_kind_name(cg_tokenizer_kind k) { return k == CG_TOK_BPE ? "bpe" : "char"; }

void cg_tokenizer_free(cg_tokenizer *t)
{
    if (!t)
        return;
    cg_pair_vocab_free(&t->pv);
    cg_vocab_free(t->cv);
    cg_spm_free(t->spm);
    free(t);
}

static cg_tokenizer *tok_new(cg_tokenizer_kind kind, bool specials)
{
    cg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cg_set_error("out of memory");
        return NULL;
    }
    t->kind = kind;
    t->specials = specials || kind == CG_TOK_BPE;
    return t;
}

cg_tokenizer *cg_tokenizer_train(cg_tokenizer_kind kind, bool specials,
                                 const char *const *sentences, int64_t n, int64_t vocab_size)
{
    if (!sentences)
        return NULL;
    cg_tokenizer *t = tok_new(kind, specials);
    if (!t)
        return NULL;
    if (kind == CG_TOK_BPE) {
        t->spm = cg_spm_train(sentences, n, vocab_size);
        if (!t->spm)
            goto fail;
        return t;
    }
    /* the characters of the sentences */
    bool ok = cg_pair_vocab_from_texts(sentences, n, &t->pv);
    if (!ok)
        goto fail;
    if (!specials) {
        t->cv = cg_vocab_from_codepoints(t->pv.chars, t->pv.n_chars);
        cg_pair_vocab_free(&t->pv);
        if (!t->cv)
            goto fail;
    }
    return t;
fail:
    cg_tokenizer_free(t);
    return NULL;
}

cg_tokenizer *cg_tokenizer_read(const cg_st_file *f, bool specials)
{
    if (!f)
        return NULL;
    const char *kind = cg_st_metadata(f, "tokenizer");
    cg_tokenizer_kind k = CG_TOK_CHAR;
    if (kind && !cg_tokenizer_kind_parse(kind, &k)) {
        cg_set_error("%s: unknown tokenizer '%.40s' (expected char or bpe)", cg_st_path(f), kind);
        return NULL;
    }
    cg_tokenizer *t = tok_new(k, specials);
    if (!t)
        return NULL;
    if (k == CG_TOK_BPE) {
        t->spm = cg_spm_st_load(f, CG_TOKENIZER_TENSOR);
        if (!t->spm)
            goto fail;
        return t;
    }
    const char *json = cg_st_metadata(f, "vocab");
    bool ok =
        specials ? cg_pair_vocab_from_json(json, &t->pv) : !!(t->cv = cg_vocab_from_json(json));
    if (!ok) {
        cg_prefix_error("%s: ", cg_st_path(f));
        goto fail;
    }
    return t;
fail:
    cg_tokenizer_free(t);
    return NULL;
}

bool cg_tokenizer_write(const cg_tokenizer *t, cg_st_writer *w)
{
    if (!t || !w)
        return false;
    if (t->kind == CG_TOK_BPE)
        return cg_st_set_metadata(w, "tokenizer", "bpe") &&
               cg_spm_st_add(w, CG_TOKENIZER_TENSOR, t->spm);
    char *json = t->specials ? cg_pair_vocab_to_json(&t->pv) : cg_vocab_to_json(t->cv);
    bool ok = json && cg_st_set_metadata(w, "vocab", json);
    free(json);
    return ok;
}

int64_t cg_tokenizer_vocab_size(const cg_tokenizer *t)
{
    if (!t)
        return -1;
    if (t->kind == CG_TOK_BPE)
        return cg_spm_vocab_size(t->spm);
    return t->specials ? cg_pair_vocab_size(&t->pv) : t->cv->n;
}

int64_t *cg_tokenizer_encode(const cg_tokenizer *t, const char *text, int64_t *n, int64_t *n_unk)
{
    if (!t || !text)
        return NULL;
    if (n_unk)
        *n_unk = 0;
    if (t->kind == CG_TOK_BPE)
        return cg_spm_encode(t->spm, text, n);
    if (t->specials)
        return cg_pair_vocab_encode(&t->pv, text, n, n_unk);
    return cg_vocab_encode_text(t->cv, text, "text", n, n_unk, NULL);
}

char *cg_tokenizer_decode(const cg_tokenizer *t, const int64_t *ids, int64_t n)
{
    if (!t || (!ids && n > 0))
        return NULL;
    if (t->kind == CG_TOK_BPE)
        return cg_spm_decode(t->spm, ids, n);
    if (!t->specials)
        return cg_vocab_decode(t->cv, ids, n);
    int64_t V = cg_pair_vocab_size(&t->pv);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            cg_set_error("token id %lld is outside the vocabulary [0, %lld)", (long long)ids[i],
                         (long long)V);
            return NULL;
        }
    return cg_pair_vocab_decode(&t->pv, ids, n); /* drops the specials */
}

char *cg_tokenizer_label(const cg_tokenizer *t, int64_t id)
{
    if (!t)
        return NULL;
    static const char *const special[4] = {"<pad>", "<s>", "</s>", "<unk>"};
    int64_t V = cg_tokenizer_vocab_size(t);
    if (id < 0 || id >= V) {
        cg_set_error("token id %lld is outside the vocabulary [0, %lld)", (long long)id,
                     (long long)V);
        return NULL;
    }
    const char *s = t->specials && id < 4 ? special[id] : NULL;
    if (s || t->kind == CG_TOK_CHAR) {
        char *l = s ? strdup(s) : cg_tokenizer_decode(t, &id, 1);
        if (!l && s)
            cg_set_error("out of memory");
        return l;
    }
    const char *piece = cg_spm_piece(t->spm, id);
    if (!piece)
        return NULL;
    /* U+2581 (E2 96 81) -> U+2423 (E2 90 A3): the same length */
    char *l = strdup(piece);
    if (!l) {
        cg_set_error("out of memory");
        return NULL;
    }
    for (char *p = l; (p = strstr(p, "\xE2\x96\x81")) != NULL; p += 3)
        memcpy(p, "\xE2\x90\xA3", 3);
    return l;
}

char **cg_tokenizer_labels(const cg_tokenizer *t, const int64_t *ids, int64_t n)
{
    char **l = calloc((size_t)(n > 0 ? n : 1), sizeof *l);
    if (!l)
        cg_set_error("out of memory");
    for (int64_t i = 0; l && i < n; i++)
        if (!(l[i] = cg_tokenizer_label(t, ids[i]))) {
            while (i > 0)
                free(l[--i]);
            free(l);
            l = NULL;
        }
    return l;
}

bool cg_tokenizer_equal(const cg_tokenizer *a, const cg_tokenizer *b)
{
    if (!a || !b || a->kind != b->kind || a->specials != b->specials)
        return false;
    if (a->kind == CG_TOK_BPE) {
        size_t la, lb;
        const unsigned char *pa = cg_spm_model_proto(a->spm, &la);
        const unsigned char *pb = cg_spm_model_proto(b->spm, &lb);
        return pa && pb && la == lb && memcmp(pa, pb, la) == 0;
    }
    if (a->specials)
        return a->pv.n_chars == b->pv.n_chars &&
               memcmp(a->pv.chars, b->pv.chars, (size_t)a->pv.n_chars * sizeof(uint32_t)) == 0;
    return a->cv->n == b->cv->n &&
           memcmp(a->cv->chars, b->cv->chars, (size_t)a->cv->n * sizeof(uint32_t)) == 0;
}

double cg_bits_per_char(double nats_per_token, double tokens, double chars)
{
    if (!(chars > 0))
        return NAN;
    return nats_per_token * tokens / chars / log(2.0);
}
