/* libFuzzer target: sentence-pair files of the seq2seq model
 * (models/data/pairs.h): parsing, the RandomState(0) split, length filtering,
 * the vocabulary (and its checkpoint JSON form), token batching, padded
 * batches and their bucketed shapes (cg_batch_pad_to), encode/decode. The first input byte picks the split
 * sizes and max_tokens; the rest is the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/data/pairs.h"

/* Bucketed shapes (cg_batch_pad_to): S and T grow to a multiple (not past
 * the limit unless already longer), the ids stay, the new positions are
 * padding, n_tokens is unchanged. */
static void check_pad_to(const cg_batch *bt, uint8_t knob)
{
    int64_t multiple = 1 + (knob & 7), limit = (knob >> 3) & 7 ? (knob >> 3) * 3 : 0;
    cg_batch b = *bt;
    size_t ns = (size_t)(b.B * b.S), nt = (size_t)(b.B * b.T);
    b.src = malloc(ns * sizeof *b.src);
    b.tgt_in = malloc(nt * sizeof *b.tgt_in);
    b.tgt_out = malloc(nt * sizeof *b.tgt_out);
    CG_FUZZ_CHECK(b.src && b.tgt_in && b.tgt_out);
    memcpy(b.src, bt->src, ns * sizeof *b.src);
    memcpy(b.tgt_in, bt->tgt_in, nt * sizeof *b.tgt_in);
    memcpy(b.tgt_out, bt->tgt_out, nt * sizeof *b.tgt_out);
    CG_FUZZ_CHECK(cg_batch_pad_to(&b, multiple, limit));
    CG_FUZZ_CHECK(b.B == bt->B && b.n_tokens == bt->n_tokens);
    const int64_t olds[2] = {bt->S, bt->T}, news[2] = {b.S, b.T};
    for (int k = 0; k < 2; k++) {
        CG_FUZZ_CHECK(news[k] >= olds[k]);
        if (limit == 0 || olds[k] > limit)
            CG_FUZZ_CHECK(news[k] % multiple == 0 || news[k] == olds[k]);
        else
            CG_FUZZ_CHECK(news[k] <= limit && (news[k] % multiple == 0 || news[k] == limit));
        CG_FUZZ_CHECK(news[k] - olds[k] < multiple);
    }
    for (int64_t i = 0; i < b.B; i++) {
        for (int64_t j = 0; j < b.S; j++)
            CG_FUZZ_CHECK(b.src[i * b.S + j] == (j < bt->S ? bt->src[i * bt->S + j] : CG_PAIR_PAD));
        for (int64_t j = 0; j < b.T; j++) {
            CG_FUZZ_CHECK(b.tgt_in[i * b.T + j] ==
                          (j < bt->T ? bt->tgt_in[i * bt->T + j] : CG_PAIR_PAD));
            CG_FUZZ_CHECK(b.tgt_out[i * b.T + j] ==
                          (j < bt->T ? bt->tgt_out[i * bt->T + j] : CG_PAIR_PAD));
        }
    }
    cg_batch_free(&b);
}

static void check_split_and_batches(const cg_pairs *p, uint8_t knob)
{
    int64_t n_valid = knob & 3, n_test = (knob >> 2) & 3;
    int64_t max_tokens = 1 + (knob >> 4) * 7;
    cg_pair_split s;
    cg_clear_error();
    if (!cg_pairs_split(p, n_valid, n_test, &s)) {
        CG_FUZZ_CHECK(p->n <= n_valid + n_test && cg_has_error());
        return;
    }
    CG_FUZZ_CHECK(s.n_train + s.n_valid + s.n_test == p->n);
    CG_FUZZ_CHECK(s.n_valid == n_valid && s.n_test == n_test);
    /* every index once */
    char *seen = calloc((size_t)p->n, 1);
    CG_FUZZ_CHECK(seen != NULL);
    const int64_t *parts[3] = {s.train, s.valid, s.test};
    int64_t counts[3] = {s.n_train, s.n_valid, s.n_test};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < counts[k]; i++) {
            int64_t j = parts[k][i];
            CG_FUZZ_CHECK(j >= 0 && j < p->n && !seen[j]);
            seen[j] = 1;
        }
    free(seen);

    int64_t n_tr = cg_pairs_filter(p, s.train, s.n_train, 1 + (knob >> 4));
    CG_FUZZ_CHECK(n_tr >= 0 && n_tr <= s.n_train);
    int64_t *idx = s.train;
    int64_t n_idx = n_tr;
    if (n_idx == 0) { /* nothing short enough: use the validation pairs */
        idx = s.valid;
        n_idx = s.n_valid;
    }
    cg_pair_vocab v;
    cg_clear_error();
    if (!cg_pair_vocab_build(p, idx, n_idx, &v)) {
        CG_FUZZ_CHECK(cg_has_error());
        cg_pair_split_free(&s);
        return;
    }
    for (int64_t i = 1; i < v.n_chars; i++)
        CG_FUZZ_CHECK(v.chars[i - 1] < v.chars[i]);
    /* the checkpoint form round-trips (an empty vocabulary, from pairs
     * whose both sides are empty, is refused with a message) */
    cg_clear_error();
    char *j = cg_pair_vocab_to_json(&v);
    if (!j) {
        CG_FUZZ_CHECK(v.n_chars == 0 && cg_has_error());
    } else {
        cg_pair_vocab v2;
        CG_FUZZ_CHECK(cg_pair_vocab_from_json(j, &v2));
        CG_FUZZ_CHECK(v2.n_chars == v.n_chars &&
                      memcmp(v2.chars, v.chars, (size_t)v.n_chars * sizeof *v.chars) == 0);
        cg_pair_vocab_free(&v2);
        free(j);
    }

    cg_batches b;
    cg_clear_error();
    if (cg_make_batches(p, idx, n_idx, max_tokens, &b)) {
        CG_FUZZ_CHECK(b.n_batches >= 0);
        CG_FUZZ_CHECK(b.n_batches == 0 || (b.start[0] == 0 && b.start[b.n_batches] == n_idx));
        for (int64_t k = 0; k < b.n_batches && k < 64; k++) {
            int64_t lo = b.start[k], hi = b.start[k + 1];
            CG_FUZZ_CHECK(hi > lo);
            cg_batch bt;
            CG_FUZZ_CHECK(cg_batch_make(p, b.idx + lo, hi - lo, &v, &bt));
            CG_FUZZ_CHECK(bt.B == hi - lo && bt.S >= 1 && bt.T >= 1);
            int64_t V = cg_pair_vocab_size(&v);
            for (int64_t e = 0; e < bt.B * bt.S; e++)
                CG_FUZZ_CHECK(bt.src[e] >= 0 && bt.src[e] < V);
            for (int64_t e = 0; e < bt.B * bt.T; e++)
                CG_FUZZ_CHECK(bt.tgt_in[e] >= 0 && bt.tgt_in[e] < V && bt.tgt_out[e] >= 0 &&
                              bt.tgt_out[e] < V);
            CG_FUZZ_CHECK(bt.n_tokens >= bt.B && bt.n_tokens <= bt.B * bt.T);
            check_pad_to(&bt, knob);
            cg_batch_free(&bt);
        }
        cg_batches_free(&b);
    } else {
        CG_FUZZ_CHECK(cg_has_error());
    }

    /* encode / decode of every target in the first pairs */
    for (int64_t i = 0; i < p->n && i < 16; i++) {
        int64_t n = -1, unk = -1;
        int64_t *ids = cg_pair_vocab_encode(&v, p->items[i].tgt, &n, &unk);
        CG_FUZZ_CHECK(ids && n == p->items[i].tgt_len && unk >= 0 && unk <= n);
        char *t = cg_pair_vocab_decode(&v, ids, n);
        CG_FUZZ_CHECK(t != NULL);
        if (unk == 0)
            CG_FUZZ_CHECK(strcmp(t, p->items[i].tgt) == 0);
        free(t);
        free(ids);
    }
    cg_pair_vocab_free(&v);
    cg_pair_split_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t knob = data[0];
    cg_pairs p;
    cg_clear_error();
    if (!cg_pairs_parse((const char *)data + 1, size - 1, "fuzz", &p)) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        CG_FUZZ_CHECK(p.n == 0 && p.items == NULL && p.buf == NULL);
        return 0;
    }
    CG_FUZZ_CHECK(p.n >= 1);
    for (int64_t i = 0; i < p.n; i++) {
        const cg_pair *q = &p.items[i];
        CG_FUZZ_CHECK(q->src && q->tgt && q->src_len >= 0 && q->tgt_len >= 0);
        CG_FUZZ_CHECK(cg_utf8_count(q->src, strlen(q->src), NULL) == q->src_len);
        CG_FUZZ_CHECK(cg_utf8_count(q->tgt, strlen(q->tgt), NULL) == q->tgt_len);
        CG_FUZZ_CHECK(strchr(q->src, '\t') == NULL && strchr(q->tgt, '\t') == NULL);
    }
    check_split_and_batches(&p, knob);
    cg_pairs_free(&p);
    return 0;
}
