/* Check suite "beam_limits": fairseq-generate's decoding limits (nn/sample.h
 * cg_decode_limits: --max-len-a/--max-len-b, --min-len,
 * --no-repeat-ngram-size) in the library and in `seq2seq translate`/`eval`:
 *   - nn: the limits checked, the cap's arithmetic (fairseq's
 *     int(a * src_len + b)), the blocks on a row of scores;
 *   - greedy and beam search (cached and not, --nbest) on rigged
 *     translators (tests/seq2seq_rig.h: logits that follow a table), against
 *     a reference decoder written over the table;
 *   - the caps exactly, per sentence, through cg_translate_all; the
 *     defaults as before (the source's tokens + 50);
 *   - the program: its flags give what the library gives, eval reports
 *     them. The flags' refusals are tests/test_exit_codes.sh's table. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "models/seq2seq/beam.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/translate.h"
#include "nn/sample.h"
#include "tests/seq2seq_rig.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */
/* Whether some n-gram of h[0..len) occurs twice. */
static bool repeats_ngram(const int64_t *h, int64_t len, int64_t n)
{
    for (int64_t i = 0; n > 0 && i + n <= len; i++)
        for (int64_t j = i + 1; j + n <= len; j++)
            if (memcmp(h + i, h + j, (size_t)n * sizeof *h) == 0)
                return true;
    return false;
}

/* Whether appending v to h[0..len) makes an n-gram that h already has:
 * the candidate's n-gram written out and compared with each earlier one. */
static bool would_repeat(const int64_t *h, int64_t len, int64_t v, int64_t n)
{
    if (n < 1 || len + 1 < n)
        return false;
    int64_t last[16];
    ck_assert_int_le(n, 16);
    for (int64_t k = 0; k < n - 1; k++)
        last[k] = h[len - (n - 1) + k];
    last[n - 1] = v;
    for (int64_t i = 0; i + n <= len; i++)
        if (memcmp(h + i, last, (size_t)n * sizeof *h) == 0)
            return true;
    return false;
}

/* Whether the n-gram rule leaves h[0..len) no token but EOS (of TZ_V): the
 * one place where EOS may come before min_len. */
static bool dead_end(const int64_t *h, int64_t len, int64_t n)
{
    for (int64_t v = 0; v < TZ_V; v++)
        if (v != CG_EOS && !would_repeat(h, len, v, n))
            return false;
    return n > 0;
}

/* The reference: greedy decoding of the table rig written over its table
 * z: from BOS, the token of the largest z[last][v] (the lower id first)
 * among those the limits allow (EOS not before min_len tokens, no token
 * that repeats an n-gram; EOS when none is left), at most cap tokens.
 * Returns the tokens' count; *ended: whether EOS ended them. */
static int64_t ref_greedy(const double z[TZ_V][TZ_V], const cg_decode_limits *l, int64_t cap,
                          int64_t *out, bool *ended)
{
    int64_t len = 0;
    *ended = false;
    while (len < cap) {
        const int64_t u = len ? out[len - 1] : CG_BOS;
        int64_t best = -1;
        for (int64_t v = 0; v < TZ_V; v++) {
            bool blocked = (v == CG_EOS && len < l->min_len) ||
                           would_repeat(out, len, v, l->no_repeat_ngram_size);
            if (!blocked && (best < 0 || z[u][v] > z[u][best]))
                best = v;
        }
        if (best < 0 || best == CG_EOS) {
            *ended = true;
            break;
        }
        out[len++] = best;
    }
    return len;
}

/* z[u][v] = 0.3 ((7u + 3v) mod 10): each row's ten values distinct, 0.3
 * apart (the rig follows the table within about 1e-2); PAD, BOS and UNK
 * `special` and 0.3 and 0.6 below it, EOS `eos`. */
static void rig_table(double z[TZ_V][TZ_V], double special, double eos)
{
    for (int u = 0; u < TZ_V; u++) {
        for (int v = 0; v < TZ_V; v++)
            z[u][v] = 0.3 * ((7 * u + 3 * v) % 10);
        z[u][CG_PAD] = special;
        z[u][CG_BOS] = special - 0.3;
        z[u][3] = special - 0.6;
        z[u][CG_EOS] = eos;
    }
}

/* Greedy (one source) and beam search (beam 3, its nbest 3) of m under l,
 * with and without the cache: greedy gives the same tokens both ways, and
 * the reference's when z is given (the table rig's); beam 1 is greedy;
 * cached and recomputed searches give the same hypotheses (scores within
 * 1e-4); every hypothesis keeps l (no repeated n-gram, no EOS before
 * min_len unless the n-gram rule left nothing else, at most the cap's
 * tokens). */
static void check_rig(cg_seq2seq *m, const double z[TZ_V][TZ_V], const cg_decode_limits *l,
                      int64_t cap, const char *what)
{
    const int64_t src[3] = {5, 6, CG_EOS};
    int64_t want[64], got[64], n, L;
    bool ended;
    /* the limits' cap for a source of 3 (its EOS included), at most cap */
    const double lc = floor(l->max_len_a * 3 + (double)l->max_len_b);
    const int64_t eff = lc < (double)cap ? (int64_t)lc : cap;
    ck_assert_msg(cg_greedy_decode_ex(m, src, 1, 3, cap, l, want, &n, true), "%s: %s", what,
                  cg_last_error());
    ended = n < eff;
    for (int64_t i = n + ended; i < cap; i++) /* nothing decoded past its end */
        ck_assert_msg(want[i] == CG_PAD, "%s: id %lld after the end", what, (long long)i);
    if (z) {
        bool ref_ended;
        int64_t rn = ref_greedy(z, l, eff, got, &ref_ended);
        ck_assert_msg(rn == n && memcmp(got, want, (size_t)n * sizeof *got) == 0 &&
                          ref_ended == ended && (!ended || want[n] == CG_EOS),
                      "%s: %lld tokens (ended %d, then %lld), the reference's %lld (ended %d)",
                      what, (long long)n, ended, (long long)(n < cap ? want[n] : -1), (long long)rn,
                      ref_ended);
    }
    cg_hypothesis h[2][3];
    int nh[2];
    for (int cache = 0; cache < 2; cache++) {
        ck_assert(cg_greedy_decode_ex(m, src, 1, 3, cap, l, got, &L, cache));
        ck_assert_msg(L == n && memcmp(got, want, (size_t)n * sizeof *got) == 0,
                      "%s, cache %d: greedy differs", what, cache);
        cg_hypothesis one;
        int n1;
        ck_assert(cg_beam_search_nbest(m, src, 3, 1, 0.6, cap, l, cache, 1, &one, &n1));
        ck_assert_msg(n1 == 1 && one.len == n && memcmp(one.ids, want, (size_t)n * 8) == 0 &&
                          one.finished == ended,
                      "%s, cache %d: beam 1 is not greedy", what, cache);
        cg_hypotheses_free(&one, n1);
        ck_assert_msg(
            cg_beam_search_nbest(m, src, 3, 3, 0.6, cap, l, cache, 3, h[cache], &nh[cache]),
            "%s: %s", what, cg_last_error());
        for (int k = 0; k < nh[cache]; k++) {
            const cg_hypothesis *x = &h[cache][k];
            ck_assert_msg(!repeats_ngram(x->ids, x->len, l->no_repeat_ngram_size) &&
                              x->len <= eff &&
                              (x->len >= l->min_len || !x->finished ||
                               dead_end(x->ids, x->len, l->no_repeat_ngram_size)),
                          "%s, cache %d: hypothesis %d (%lld tokens) breaks the limits", what,
                          cache, k, (long long)x->len);
        }
    }
    ck_assert_int_eq(nh[0], nh[1]);
    for (int k = 0; k < nh[0]; k++) {
        ck_assert_msg(h[0][k].len == h[1][k].len &&
                          memcmp(h[0][k].ids, h[1][k].ids, (size_t)h[0][k].len * 8) == 0,
                      "%s: hypothesis %d differs with the cache", what, k);
        ck_assert_double_eq_tol(h[0][k].score, h[1][k].score, 1e-4);
    }
    cg_hypotheses_free(h[0], nh[0]);
    cg_hypotheses_free(h[1], nh[1]);
}

/* ------------------------------------------------------------ nn */
/* The limits checked; the cap as fairseq computes it; the blocks on rows
 * of scores, and nothing touched when no limit is on. */
START_TEST(test_decode_limits_nn)
{
    ck_assert(cg_decode_limits_check(NULL));
    ck_assert(cg_decode_limits_check(&(cg_decode_limits){1.2, 10, 3, 2}));
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){-1, 0, 0, 0}), "max_len_a");
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){NAN, 0, 0, 0}), "max_len_a");
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){INFINITY, 0, 0, 0}), "max_len_a");
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){1, -1, 0, 0}), "max_len_b");
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){1, 0, -2, 0}), "min_len is -2");
    CG_ASSERT_REFUSED(!cg_decode_limits_check(&(cg_decode_limits){1, 0, 0, -1}),
                      "no_repeat_ngram_size");
    /* int(a * src_len + b): 1.2 * 10 + 10 is 22 (1.2 * 10 rounds to 12.0) */
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){1.2, 10, 0, 0}, 10, 1000), 22);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){0.5, 0, 0, 0}, 7, 1000), 3);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){1, 49, 0, 0}, 7, 1000), 56);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){1, 49, 0, 0}, 300, 256), 256);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){1e6, 1000000000, 0, 0}, 1e9, 64), 64);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){0, 0, 0, 0}, 7, 64), 0);
    ck_assert_int_eq(cg_decode_max_len(&(cg_decode_limits){1, 5, 0, 0}, 7, 0), 0);
    enum { V = 8 };
    const float row0[V] = {-1, -2, -0.5f, -3, -0.25f, -4, -5, -6};
    float row[V];
    const int64_t hyp[5] = {4, 5, 6, 4, 5};
    memcpy(row, row0, sizeof row);
    ck_assert(!cg_decode_block(&(cg_decode_limits){1, 49, 0, 0}, hyp, 5, CG_EOS, row, V));
    ck_assert(!cg_decode_block(NULL, hyp, 5, CG_EOS, row, V));
    ck_assert_int_eq(memcmp(row, row0, sizeof row), 0);
    /* min_len 3: EOS blocked after 2 tokens, not after 3 */
    ck_assert(cg_decode_block(&(cg_decode_limits){0, 0, 3, 0}, hyp, 2, CG_EOS, row, V));
    ck_assert(row[CG_EOS] == -INFINITY);
    memcpy(row, row0, sizeof row);
    ck_assert(!cg_decode_block(&(cg_decode_limits){0, 0, 3, 0}, hyp, 3, CG_EOS, row, V));
    /* bigrams after 4 5 6 4: 5 would make 4 5 again; trigrams after 4 5 6
     * 4 5: 6; unigrams after 4 5 6: each of them */
    const struct {
        int64_t n, len, banned[3];
    } cases[] = {{2, 4, {5, -1, -1}}, {3, 5, {6, -1, -1}}, {1, 3, {4, 5, 6}}, {4, 3, {-1, -1, -1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(row, row0, sizeof row);
        cg_decode_block(&(cg_decode_limits){0, 0, 0, cases[c].n}, hyp, cases[c].len, CG_EOS, row,
                        V);
        for (int64_t v = 0; v < V; v++) {
            bool b = v == cases[c].banned[0] || v == cases[c].banned[1] || v == cases[c].banned[2];
            ck_assert_msg(b ? row[v] == -INFINITY : row[v] == row0[v], "n %lld: id %lld",
                          (long long)cases[c].n, (long long)v);
        }
    }
    /* every id but EOS used (n 1) while min_len blocks EOS: EOS keeps its
     * score; ids outside the row block nothing */
    const int64_t all[7] = {0, 1, 3, 4, 5, 6, 7}, far[2] = {100, -3};
    memcpy(row, row0, sizeof row);
    ck_assert(cg_decode_block(&(cg_decode_limits){0, 0, 9, 1}, all, 7, CG_EOS, row, V));
    for (int64_t v = 0; v < V; v++)
        ck_assert(v == CG_EOS ? row[v] == row0[v] : row[v] == -INFINITY);
    memcpy(row, row0, sizeof row);
    ck_assert(!cg_decode_block(&(cg_decode_limits){0, 0, 0, 1}, far, 2, CG_EOS, row, V));
    ck_assert_int_eq(memcmp(row, row0, sizeof row), 0);
}
END_TEST

/* ------------------------------------------------------------ the decoders */
/* --no-repeat-ngram-size: the rig's argmax chain cycles, so its plain
 * output repeats every n-gram size tried; under the limit no n-gram
 * repeats and greedy takes, at each step, the reference's token. Pre-norm
 * and post-norm rigs. */
START_TEST(test_no_repeat_ngram)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -2.0, -3.0); /* EOS never the best: the cap ends them */
    for (int nf = 0; nf < 2; nf++) {
        cg_seq2seq *m = table_model(z, nf);
        for (int64_t n = 1; n <= 3; n++) {
            const int64_t src[3] = {5, 6, CG_EOS};
            int64_t plain[16], L;
            ck_assert(cg_greedy_decode(m, src, 1, 3, 16, plain, &L, true));
            ck_assert_msg(L == 16 && repeats_ngram(plain, L, n),
                          "the plain output repeats no %lld-gram: the rig tests nothing",
                          (long long)n);
            const cg_decode_limits l = {0, 16, 0, n};
            char what[64];
            snprintf(what, sizeof what, "norm_first %d, no repeated %lld-gram", nf, (long long)n);
            check_rig(m, z, &l, 16, what);
        }
        cg_seq2seq_free(m);
    }
}
END_TEST

/* --min-len: EOS is every row's best, so the plain output is empty; with
 * min_len N greedy gives N tokens then EOS (the reference's), every
 * finished beam hypothesis has N; a cap below N wins (the output stops
 * there, without EOS). */
START_TEST(test_min_len)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -2.0, 4.0);
    cg_seq2seq *m = table_model(z, false);
    const int64_t src[3] = {5, 6, CG_EOS};
    int64_t out[16], L;
    ck_assert(cg_greedy_decode(m, src, 1, 3, 16, out, &L, true));
    ck_assert(L == 0 && out[0] == CG_EOS);
    for (int64_t n = 1; n <= 12; n += 5) {
        const cg_decode_limits l = {0, 16, n, 0};
        char what[32];
        snprintf(what, sizeof what, "min_len %lld", (long long)n);
        check_rig(m, z, &l, 16, what);
        ck_assert(cg_greedy_decode_ex(m, src, 1, 3, 16, &l, out, &L, false));
        ck_assert_int_eq(L, n);
        cg_hypothesis h[3];
        int nh;
        ck_assert(cg_beam_search_nbest(m, src, 3, 3, 0.6, 16, &l, true, 3, h, &nh));
        for (int k = 0; k < nh; k++)
            ck_assert_msg(h[k].finished && h[k].len == n, "%s: hypothesis %d: %lld tokens", what, k,
                          (long long)h[k].len);
        cg_hypotheses_free(h, nh);
    }
    const cg_decode_limits low = {0, 3, 5, 0};
    check_rig(m, z, &low, 16, "min_len 5 under a cap of 3");
    ck_assert(cg_greedy_decode_ex(m, src, 1, 3, 16, &low, out, &L, true));
    ck_assert_int_eq(L, 3);
    cg_seq2seq_free(m);
}
END_TEST

/* --min-len beside --no-repeat-ngram-size 1 on 10 ids: after the 9 that
 * are not EOS, nothing is left, and EOS is let through before min_len (14),
 * greedy and beam alike: the hypothesis ends instead of breaking a limit. */
START_TEST(test_min_len_gives_way)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -2.0, 4.0);
    cg_seq2seq *m = table_model(z, true);
    const cg_decode_limits l = {0, 16, 14, 1};
    check_rig(m, z, &l, 16, "min_len 14, no repeated token");
    const int64_t src[3] = {5, 6, CG_EOS};
    int64_t out[16], L;
    ck_assert(cg_greedy_decode_ex(m, src, 1, 3, 16, &l, out, &L, true));
    ck_assert(L == 9 && out[9] == CG_EOS);
    cg_hypothesis h[2];
    int nh;
    ck_assert(cg_beam_search_nbest(m, src, 3, 2, 0.6, 16, &l, false, 2, h, &nh));
    ck_assert(nh >= 1 && h[0].finished && h[0].len == 9);
    cg_hypotheses_free(h, nh);
    cg_seq2seq_free(m);
}
END_TEST

/* Bad limits are refused by every entry point, naming the field. */
START_TEST(test_limits_refused)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -2.0, 0.0);
    cg_seq2seq *m = table_model(z, false);
    const int64_t src[3] = {5, 6, CG_EOS};
    int64_t out[8], L;
    cg_hypothesis h;
    int nh;
    const cg_decode_limits neg = {-0.5, 3, 0, 0}, nan_a = {NAN, 3, 0, 0}, bad = {1, 3, -1, 0};
    CG_ASSERT_REFUSED(!cg_greedy_decode_ex(m, src, 1, 3, 8, &neg, out, &L, true),
                      "greedy decode: decode limits: max_len_a is -0.5");
    CG_ASSERT_REFUSED(!cg_beam_search_nbest(m, src, 3, 2, 0.6, 8, &nan_a, true, 1, &h, &nh),
                      "beam search: decode limits: max_len_a is nan");
    const char *train[] = {"abcdef"}, *texts[] = {"abc"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    cg_sources s;
    ck_assert(tok && cg_sources_encode(tok, texts, 1, 16, &s));
    CG_ASSERT_REFUSED(!cg_translate_all(m, tok, &s, 1, 0.6, true, &bad, NULL),
                      "translate: decode limits: min_len is -1");
    char *t[2];
    double sc[2];
    int n = 0;
    CG_ASSERT_REFUSED(!cg_translate_nbest(m, tok, &s, 0, 2, 0.6, true, &neg, 2, t, sc, &n),
                      "max_len_a");
    ck_assert_int_eq(n, 0);
    cg_sources_free(&s);
    cg_tokenizer_free(tok);
    cg_seq2seq_free(m);
}
END_TEST

/* A random translator (its outputs end anywhere, PAD included): under
 * each set of limits, greedy and beam search (nbest) give the same tokens
 * cached and recomputed, beam 1 is greedy, and the limits hold. */
START_TEST(test_limits_random_model)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = TZ_V, c.d = 16, c.H = 2, c.d_ff = 32, c.max_len = 16;
    c.enc_layers = 1, c.dec_layers = 1;
    const cg_decode_limits ls[] = {
        {0, 16, 3, 2}, {0, 16, 0, 1}, {0, 10, 4, 3}, {1, 2, 2, 2}, {0, 12, 12, 0}};
    int ended_early = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        cg_seq2seq *m = cg_seq2seq_new(&c, seed);
        ck_assert_ptr_nonnull(m);
        cg_module_train(CG_MODULE(m), false);
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
            char what[64];
            snprintf(what, sizeof what, "seed %llu, limits %zu", (unsigned long long)seed, i);
            check_rig(m, NULL, &ls[i], 16, what);
        }
        const int64_t src[3] = {5, 6, CG_EOS};
        int64_t out[16], L;
        ck_assert(cg_greedy_decode(m, src, 1, 3, 16, out, &L, true));
        ended_early += L < 12;
        cg_seq2seq_free(m);
    }
    /* min_len 12 then changes what some of them say */
    ck_assert_int_ge(ended_early, 1);
}
END_TEST

/* cg_translate_all of the three sources s under l (NULL: the defaults),
 * beam and cache: sentence i has want[i] characters (case: the caller's
 * row, -1 for the defaults). */
static void check_lengths(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *s, int beam,
                          bool cache, const cg_decode_limits *l, const size_t want[3], int cs)
{
    char **out = cg_translate_all(m, tok, s, beam, 0.6, cache, l, NULL);
    ck_assert_msg(out, "case %d: %s", cs, cg_last_error());
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strlen(out[i]) == want[i],
                      "case %d, beam %d, cache %d, sentence %d: %zu characters, not %zu", cs, beam,
                      cache, i, strlen(out[i]), want[i]);
    cg_strings_free(out, 3);
}

/* --max-len-a/--max-len-b through cg_translate_all: a rig that never ends
 * (EOS and the specials far below the characters) gives each sentence
 * exactly min(floor(a * (n + 1) + b), max_len) characters, n its own (one
 * token each; + 1 its EOS), whatever the others of its greedy chunk:
 * greedy and beam 2, cached and not; a cap of 0 is an empty line. NULL is
 * the default, {1, 49}: the source's tokens + 50, as before the limits. */
START_TEST(test_max_len_caps)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -6.0, -6.0);
    cg_seq2seq *m = table_model_len(z, false, 64);
    const char *train[] = {"abcdef"}, *texts[] = {"a", "abc", "abcdef"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(cg_tokenizer_vocab_size(tok), TZ_V);
    cg_sources s;
    ck_assert(cg_sources_encode(tok, texts, 3, 64, &s));
    const struct {
        cg_decode_limits l;
        size_t want[3];
    } cases[] = {{{1, 49, 0, 0}, {51, 53, 56}},  {{0.5, 2, 0, 0}, {3, 4, 5}},
                 {{1.5, 0, 0, 0}, {3, 6, 10}},   {{0.4, 0, 0, 0}, {0, 1, 2}},
                 {{0, 100, 0, 0}, {64, 64, 64}}, {{0, 0, 0, 0}, {0, 0, 0}}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int beam = 1; beam <= 2; beam++)
            for (int cache = 0; cache < 2; cache++)
                check_lengths(m, tok, &s, beam, cache, &cases[k].l, cases[k].want, (int)k);
    const size_t plus50[3] = {strlen(texts[0]) + 50, strlen(texts[1]) + 50, strlen(texts[2]) + 50};
    for (int beam = 1; beam <= 2; beam++)
        check_lengths(m, tok, &s, beam, true, NULL, plus50, -1);
    /* the longest first: the chunk's steps are its longest cap, not its
     * last sentence's */
    const char *backwards[] = {"abcdef", "abc", "a"};
    cg_sources b;
    ck_assert(cg_sources_encode(tok, backwards, 3, 64, &b));
    const size_t back[2][3] = {{10, 6, 3}, {56, 53, 51}};
    for (int k = 0; k < 2; k++)
        check_lengths(m, tok, &b, 1, true, &cases[k ? 0 : 2].l, back[k], 100 + k);
    cg_sources_free(&b);
    const cg_decode_limits def = cg_translate_limits_default();
    ck_assert(def.max_len_a == CG_MAX_LEN_A && def.max_len_b == CG_MAX_LEN_B && def.min_len == 0 &&
              def.no_repeat_ngram_size == 0);
    ck_assert(strtod(CG_MAX_LEN_A_TEXT, NULL) == CG_MAX_LEN_A &&
              strtoll(CG_MAX_LEN_B_TEXT, NULL, 10) == CG_MAX_LEN_B);
    cg_sources_free(&s);
    cg_tokenizer_free(tok);
    cg_seq2seq_free(m);
}
END_TEST

/* ------------------------------------------------------------ the program */
static const char *prog_path(void)
{
    static char path[PATH_MAX + 64];
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(path, sizeof path, "%s/../models/seq2seq/seq2seq", self);
    ck_assert_msg(access(path, X_OK) == 0, "%s not built", path);
    return path;
}

/* A file's text (malloc'd), "" when it cannot be read. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *b = calloc(1, 1 << 16);
    ck_assert_ptr_nonnull(b);
    if (f) {
        size_t n = fread(b, 1, (1 << 16) - 1, f);
        b[n] = '\0';
        fclose(f);
    }
    return b;
}

/* "seq2seq ARGS" (shell words): its exit status, its stdout (malloc'd). */
static int run(const char *args, char **out)
{
    char cmd[8192];
    const char *o = cg_test_path("stdout.txt"), *e = cg_test_path("stderr.txt");
    snprintf(cmd, sizeof cmd, "'%s' %s < /dev/null > '%s' 2> '%s'", prog_path(), args, o, e);
    int st = system(cmd);
    *out = slurp(o);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    if (rc != 0) {
        char *err = slurp(e);
        fprintf(stderr, "seq2seq %s: exit %d: %s", args, rc, err);
        free(err);
    }
    return rc;
}

/* A tiny char translator trained for 4 steps in fp32 (the precision
 * translate then decodes in, as the library does by default). */
static void train_tiny(const char *data, const char *ck)
{
    FILE *f = fopen(data, "w");
    ck_assert_ptr_nonnull(f);
    const char *w[] = {"cat", "dog", "sun"}, *wo[] = {"Katze", "Hund", "Sonne"};
    for (int i = 0; i < 30; i++)
        fprintf(f, "the %s %d.\tdie %s %d.\n", w[i % 3], i, wo[i % 3], i);
    fclose(f);
    char args[3 * PATH_MAX], *out;
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --steps 4 --valid-size 4 "
             "--test-size 4 --test-limit 0 --max-tokens 200 --d 16 --H 2 --enc-layers 1 "
             "--dec-layers 1 --d-ff 32 --max-len 40 --precision fp32 --threads 1",
             data, ck);
    ck_assert_int_eq(run(args, &out), 0);
    free(out);
}

/* translate's flags give what the library gives under the same limits
 * (greedy and beam, cached and not, --nbest's H lines), the defaults
 * spelled out give the default output, and eval's JSON line names the
 * limits that are not the defaults. */
START_TEST(test_cli_limits)
{
    char ck[PATH_MAX], args[3 * PATH_MAX], *out;
    snprintf(ck, sizeof ck, "%s", cg_test_path("tiny.st"));
    train_tiny(cg_test_path("small.tsv"), ck);
    cg_seq2seq_ckpt c;
    ck_assert_msg(cg_seq2seq_ckpt_load(ck, &c), "%s", cg_last_error());
    const char *texts[] = {"the cat 3.", "the dog 12.", "the sun 7."};
    cg_sources s;
    ck_assert(cg_sources_encode(c.tok, texts, 3, c.model->cfg.max_len, &s));
    const struct {
        const char *flags;
        int beam;
        bool cache;
        cg_decode_limits l;
    } cases[] = {
        {"", 1, true, {1, 49, 0, 0}},
        {"--max-len-a 1 --max-len-b 49", 1, true, {1, 49, 0, 0}},
        {"--max-len-a 0 --max-len-b 3 --min-len 3", 1, true, {0, 3, 3, 0}},
        {"--beam 3 --no-repeat-ngram-size 1", 3, true, {1, 49, 0, 1}},
        {"--max-len-a 0.5 --max-len-b 1 --no-cache --min-len 2", 1, false, {0.5, 1, 2, 0}},
        {"--beam 2 --min-len 6 --no-repeat-ngram-size 2 --no-cache", 2, false, {1, 49, 6, 2}},
    };
    char *first = NULL;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(args, sizeof args, "translate --ckpt '%s' --threads 1 %s '%s' '%s' '%s'", ck,
                 cases[k].flags, texts[0], texts[1], texts[2]);
        ck_assert_int_eq(run(args, &out), 0);
        char **want = cg_translate_all(c.model, c.tok, &s, cases[k].beam, CG_BEAM_ALPHA,
                                       cases[k].cache, &cases[k].l, NULL);
        ck_assert_msg(want, "%s", cg_last_error());
        char expect[4096] = "";
        for (int i = 0; i < 3; i++)
            snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s\n", want[i]);
        ck_assert_msg(strcmp(out, expect) == 0, "'%s': '%s', the library's '%s'", cases[k].flags,
                      out, expect);
        cg_strings_free(want, 3);
        if (k == 0)
            first = out; /* the default, against the defaults spelled out */
        else {
            ck_assert(k != 1 || strcmp(out, first) == 0);
            free(out);
        }
    }
    free(first);
    /* --nbest: each sentence's H lines, the library's texts and scores */
    snprintf(args, sizeof args,
             "translate --ckpt '%s' --threads 1 --beam 3 --nbest 2 --min-len 4 --max-len-a 0 "
             "--max-len-b 6 '%s' '%s' '%s'",
             ck, texts[0], texts[1], texts[2]);
    ck_assert_int_eq(run(args, &out), 0);
    char expect[4096] = "";
    const cg_decode_limits nl = {0, 6, 4, 0};
    for (int i = 0; i < 3; i++) {
        char *t[2];
        double sc[2];
        int n;
        ck_assert(
            cg_translate_nbest(c.model, c.tok, &s, i, 3, CG_BEAM_ALPHA, true, &nl, 2, t, sc, &n));
        for (int k = 0; k < n; k++) {
            snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "H-%d\t%.6f\t%s\n", i,
                     sc[k], t[k]);
            free(t[k]);
        }
    }
    ck_assert_msg(strcmp(out, expect) == 0, "--nbest: '%s', the library's '%s'", out, expect);
    free(out);
    /* eval: the limits given are in its line, a default line has none */
    const char *keys[] = {"\"max_len_a\": 0,", "\"max_len_b\": 5,", "\"min_len\": 2,",
                          "\"no_repeat_ngram_size\": 2,"};
    snprintf(args, sizeof args,
             "eval --ckpt '%s' --threads 1 --test-limit 2 --max-len-a 0 --max-len-b 5 "
             "--min-len 2 --no-repeat-ngram-size 2",
             ck);
    ck_assert_int_eq(run(args, &out), 0);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(strstr(out, keys[k]), "eval's line lacks %s: %s", keys[k], out);
    free(out);
    snprintf(args, sizeof args, "eval --ckpt '%s' --threads 1 --test-limit 2", ck);
    ck_assert_int_eq(run(args, &out), 0);
    ck_assert_msg(strstr(out, "\"bleu\"") && !strstr(out, "max_len") && !strstr(out, "min_len"),
                  "%s", out);
    free(out);
    cg_sources_free(&s);
    cg_seq2seq_ckpt_free(&c);
}
END_TEST

/* The text side's own contracts (models/seq2seq/beam_text.c), on the rig
 * that never ends: every draw of every sentence its own generator (no two
 * of 64 sentences' 16 draws share a seed); n-best lists as long as the
 * search's (a cap of 0 leaves it one hypothesis); draws stopped at their
 * cap scored without an EOS they never had, as cg_seq2seq_score scores
 * their tokens; the model's training mode kept; an error's prefix. */
START_TEST(test_translate_text_side)
{
    uint64_t seeds[64 * 16];
    for (int64_t i = 0; i < 64; i++)
        for (int j = 0; j < 16; j++)
            seeds[i * 16 + j] = cg_sample_seed(7, i, j);
    for (int a = 0; a < 64 * 16; a++)
        for (int b = a + 1; b < 64 * 16; b++)
            ck_assert_msg(seeds[a] != seeds[b], "draws %d and %d share a seed", a, b);
    double z[TZ_V][TZ_V];
    rig_table(z, -6.0, -6.0);
    cg_seq2seq *m = table_model_len(z, false, 64);
    const char *train[] = {"abcdef"}, *texts[] = {"abc", "fed"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    cg_sources s;
    ck_assert(tok && cg_sources_encode(tok, texts, 2, 64, &s));
    cg_module_train(CG_MODULE(m), true);
    char *t[4];
    double sc[4];
    int n = -1, got = -1;
    const cg_decode_limits cap0 = {0, 0, 0, 0}, cap3 = {0, 3, 0, 0};
    ck_assert(cg_translate_nbest(m, tok, &s, 1, 3, CG_BEAM_ALPHA, true, &cap0, 3, t, sc, &n));
    ck_assert(m->base.training);
    cg_hypothesis h[3];
    const int64_t src[4] = {s.ids[1][0], s.ids[1][1], s.ids[1][2], CG_EOS};
    cg_module_train(CG_MODULE(m), false);
    ck_assert(cg_beam_search_nbest(m, src, 4, 3, CG_BEAM_ALPHA, 1, &cap0, true, 3, h, &got));
    ck_assert_int_lt(got, 3);
    ck_assert_int_eq(n, got);
    for (int k = 0; k < n; k++) {
        ck_assert_str_eq(t[k], "");
        ck_assert(sc[k] == h[k].score);
        free(t[k]);
    }
    cg_hypotheses_free(h, got);
    cg_module_train(CG_MODULE(m), true);
    const cg_sample_config cfg = cg_sample_default();
    ck_assert(cg_translate_sample_nbest(m, tok, &s, 1, &cfg, 5, 4, CG_BEAM_ALPHA, true, &cap3, 4, t,
                                        sc, &n));
    ck_assert(m->base.training && n == 4);
    for (int k = 0; k < 4; k++) {
        int64_t len, *ids = cg_tokenizer_encode(tok, t[k], &len, NULL);
        ck_assert_msg(ids && len == 3, "draw %d: '%s'", k, t[k]);
        double want = cg_seq2seq_score(m, src, 4, ids, len, false, CG_BEAM_ALPHA);
        ck_assert_msg(sc[k] == want, "draw %d '%s': %.9g, not %.9g", k, t[k], sc[k], want);
        ck_assert(k == 0 || sc[k] <= sc[k - 1]);
        free(ids);
        free(t[k]);
    }
    cg_set_error("disk full");
    cg_seq2seq_prefix_error("out.txt");
    ck_assert_str_eq(cg_last_error(), "out.txt: disk full");
    cg_clear_error();
    cg_seq2seq_prefix_error("out.txt");
    ck_assert_str_eq(cg_last_error(), "out.txt: unknown error");
    cg_clear_error();
    cg_sources_free(&s);
    cg_tokenizer_free(tok);
    cg_seq2seq_free(m);
}
END_TEST

/* cg_translate_sample_nbest's ranking, its ties included: a blank
 * translator (every logit 0, so every token's log-probability the same
 * and draws of one length and ending tie exactly) draws 8 translations of
 * up to 3 tokens; ranked, they are draws 0..7 decoded one at a time from
 * their generators (cg_sample_seed) and scored by cg_seq2seq_score, best
 * score first and the earlier draw first among equal scores. */
START_TEST(test_sample_nbest_ties)
{
    enum { DRAWS = 8 };
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = TZ_V, c.d = 32, c.H = 2, c.d_ff = TZ_V, c.max_len = 64;
    c.enc_layers = 0, c.dec_layers = 1;
    cg_seq2seq *m = cg_seq2seq_new(&c, 1);
    ck_assert_ptr_nonnull(m);
    cg_test_blank_params(CG_MODULE(m));
    cg_module_train(CG_MODULE(m), false);
    const char *train[] = {"abcdef"}, *texts[] = {"abc", "fed"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    cg_sources s;
    ck_assert(tok && cg_sources_encode(tok, texts, 2, 64, &s));
    const cg_decode_limits cap3 = {0, 3, 0, 0};
    const cg_sample_config cfg = cg_sample_default();
    const int64_t src[4] = {s.ids[1][0], s.ids[1][1], s.ids[1][2], CG_EOS};
    char *want[DRAWS];
    double score[DRAWS];
    int order[DRAWS];
    for (int j = 0; j < DRAWS; j++) {
        cg_rng rng = cg_rng_new(cg_sample_seed(9, 1, j));
        int64_t res[3], len = 0;
        ck_assert(cg_sample_decode(m, src, 1, 4, 3, &cap3, &cfg, &rng, res, &len, true));
        score[j] = cg_seq2seq_score(m, src, 4, res, len, len < 3, CG_BEAM_ALPHA);
        want[j] = cg_tokenizer_decode(tok, res, len);
        ck_assert(want[j] && !isnan(score[j]));
        int k = j; /* insertion: a later draw after the equal scores */
        for (; k > 0 && score[order[k - 1]] < score[j]; k--)
            order[k] = order[k - 1];
        order[k] = j;
    }
    int ties = 0;
    for (int k = 1; k < DRAWS; k++)
        ties += score[order[k]] == score[order[k - 1]] &&
                strcmp(want[order[k]], want[order[k - 1]]) != 0;
    ck_assert_int_gt(ties, 0); /* two different texts of one score */
    char *t[DRAWS];
    double sc[DRAWS];
    int n = 0;
    ck_assert(cg_translate_sample_nbest(m, tok, &s, 1, &cfg, 9, DRAWS, CG_BEAM_ALPHA, true, &cap3,
                                        DRAWS, t, sc, &n));
    ck_assert_int_eq(n, DRAWS);
    for (int k = 0; k < DRAWS; k++) {
        ck_assert_msg(strcmp(t[k], want[order[k]]) == 0 && sc[k] == score[order[k]],
                      "place %d: '%s' %.9g, not draw %d's '%s' %.9g", k, t[k], sc[k], order[k],
                      want[order[k]], score[order[k]]);
        free(t[k]);
    }
    for (int j = 0; j < DRAWS; j++)
        free(want[j]);
    cg_sources_free(&s);
    cg_tokenizer_free(tok);
    cg_seq2seq_free(m);
}
END_TEST

/* Fails a forward over more than one position (a hypothesis scored whole;
 * the cached decoding's steps have one). */
static bool fail_whole(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)ctx, (void)m;
    if (n_in > 0 && in[0] && in[0]->shape[1] > 1) {
        cg_set_error("planted: scoring failed");
        return false;
    }
    return true;
}

/* A draw that cannot be scored (cg_seq2seq_score's NaN and error) fails
 * cg_translate_sample_nbest with that error, not a ranking of NaNs. */
START_TEST(test_sample_nbest_score_fails)
{
    double z[TZ_V][TZ_V];
    rig_table(z, -6.0, -6.0);
    cg_seq2seq *m = table_model_len(z, false, 64);
    const char *train[] = {"abcdef"}, *texts[] = {"abc"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    cg_sources s;
    ck_assert(tok && cg_sources_encode(tok, texts, 1, 64, &s));
    const cg_decode_limits cap3 = {0, 3, 0, 0};
    const cg_sample_config cfg = cg_sample_default();
    cg_hook_handle h =
        cg_module_register_forward_pre_hook(CG_MODULE(m->decoder), fail_whole, NULL, NULL);
    char *t[2];
    double sc[2];
    int n = -1;
    CG_ASSERT_REFUSED(!cg_translate_sample_nbest(m, tok, &s, 0, &cfg, 3, 2, CG_BEAM_ALPHA, true,
                                                 &cap3, 2, t, sc, &n),
                      "planted: scoring failed");
    ck_assert_int_eq(n, 0); /* nothing to free */
    cg_hook_remove(&h);
    cg_sources_free(&s);
    cg_tokenizer_free(tok);
    cg_seq2seq_free(m);
}
END_TEST

static Suite *beam_limits_suite(void)
{
    Suite *s = suite_create("beam_limits");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_decode_limits_nn);
    tcase_add_test(tc, test_no_repeat_ngram);
    tcase_add_test(tc, test_min_len);
    tcase_add_test(tc, test_min_len_gives_way);
    tcase_add_test(tc, test_limits_refused);
    tcase_add_test(tc, test_limits_random_model);
    tcase_add_test(tc, test_max_len_caps);
    tcase_add_test(tc, test_translate_text_side);
    tcase_add_test(tc, test_sample_nbest_ties);
    tcase_add_test(tc, test_sample_nbest_score_fails);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cli_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {beam_limits_suite()};
    return cg_test_run(s, 1);
}
