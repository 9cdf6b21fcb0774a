/* Tests for models/text/tokenizer.{h,c}: characters (with and without the
 * seq2seq specials) and BPE behind one interface; encode/decode round trips,
 * labels, a checkpoint written and read back (char in the old "vocab"
 * form, bpe as "tokenizer.spm"), a damaged tokenizer tensor rejected, and
 * the bits-per-character definition. The BPE parts check the "unavailable"
 * message in a build without SentencePiece. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/utf8.h"
#include "models/text/tokenizer.h"
#include "nn/safetensors.h"
#include "testutil.h"

static const char *const train_sents[] = {
    "the house is small.", "das Haus ist klein.",         "the house is big.",
    "das Haus ist gross.", "a small cat sat on the mat.", "eine kleine Katze sass auf der Matte.",
    "Übermäßig schön!",    "house houses housing",
};
enum { N_TRAIN = sizeof train_sents / sizeof train_sents[0] };

static char *round_trip(const cg_tokenizer *t, const char *s, int64_t *n_unk)
{
    int64_t n;
    int64_t *ids = cg_tokenizer_encode(t, s, &n, n_unk);
    ck_assert_msg(ids != NULL, "%s", cg_last_error());
    for (int64_t i = 0; i < n; i++)
        ck_assert(ids[i] >= 0 && ids[i] < cg_tokenizer_vocab_size(t));
    char *d = cg_tokenizer_decode(t, ids, n);
    ck_assert_msg(d != NULL, "%s", cg_last_error());
    free(ids);
    return d;
}

/* Create an empty temporary file in the scratch directory; its name into path. */
static void make_temp(char *path, size_t n)
{
    int fd = cg_test_mkstemp(path, n, "cg_test_tok_");
    ck_assert_int_ge(fd, 0);
    close(fd);
}

/* Write t into a safetensors file and read it back. */
static cg_tokenizer *through_file(const cg_tokenizer *t, bool specials, const char *path)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert_ptr_nonnull(w);
    ck_assert_msg(cg_tokenizer_write(t, w), "%s", cg_last_error());
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    cg_tokenizer *r = cg_tokenizer_read(f, specials);
    ck_assert_msg(r != NULL, "%s", cg_last_error());
    cg_st_close(f);
    return r;
}

START_TEST(test_char_pairs)
{
    cg_tokenizer *t = cg_tokenizer_train(CG_TOK_CHAR, true, train_sents, N_TRAIN, 0);
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    ck_assert_int_eq(t->kind, CG_TOK_CHAR);
    /* the same vocabulary as the pair builder's: 4 specials + characters */
    ck_assert_int_eq(cg_tokenizer_vocab_size(t), 4 + t->pv.n_chars);
    int64_t unk;
    char *d = round_trip(t, "das Haus ist klein.", &unk);
    ck_assert_str_eq(d, "das Haus ist klein.");
    ck_assert_int_eq(unk, 0);
    free(d);
    d = round_trip(t, "qxy", &unk); /* q, x, y unseen */
    ck_assert_int_eq(unk, 3);
    free(d);
    int64_t ids[] = {CG_PAIR_BOS, cg_pair_vocab_id(&t->pv, 'a'), CG_PAIR_EOS, CG_PAIR_PAD};
    d = cg_tokenizer_decode(t, ids, 4);
    ck_assert_str_eq(d, "a");
    free(d);
    char *l = cg_tokenizer_label(t, CG_PAIR_EOS);
    ck_assert_str_eq(l, "</s>");
    free(l);
    l = cg_tokenizer_label(t, ids[1]);
    ck_assert_str_eq(l, "a");
    free(l);
    cg_clear_error();
    ck_assert_ptr_null(cg_tokenizer_label(t, 100000));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "outside the vocabulary"));
    int64_t bad = 100000;
    ck_assert_ptr_null(cg_tokenizer_decode(t, &bad, 1));
    /* the edges: <unk> is labelled as a special, the last id decodes, the
     * next is refused (as the pair vocabulary alone drops it silently) */
    l = cg_tokenizer_label(t, CG_PAIR_UNK);
    ck_assert_str_eq(l, "<unk>");
    free(l);
    const int64_t V = cg_tokenizer_vocab_size(t), last[2] = {V - 1, V};
    d = cg_tokenizer_decode(t, last, 1);
    uint32_t cp = 0;
    ck_assert_int_gt(cg_utf8_seq((const unsigned char *)d, strlen(d), &cp), 0);
    ck_assert_int_eq(cg_pair_vocab_id(&t->pv, cp), V - 1);
    free(d);
    CG_ASSERT_FAILS(cg_tokenizer_decode(t, last, 2), "outside the vocabulary");
    d = cg_pair_vocab_decode(&t->pv, last + 1, 1);
    ck_assert_str_eq(d, "");
    free(d);

    char path[PATH_MAX];
    make_temp(path, sizeof path);
    cg_tokenizer *r = through_file(t, true, path);
    ck_assert(cg_tokenizer_equal(t, r));
    /* the old checkpoint form: "vocab" metadata, no "tokenizer" entry */
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(cg_st_metadata(f, "vocab"));
    ck_assert_ptr_null(cg_st_metadata(f, "tokenizer"));
    cg_st_close(f);
    unlink(path);
    cg_tokenizer_free(r);
    cg_tokenizer_free(t);
}
END_TEST

START_TEST(test_char_lm)
{
    cg_tokenizer *t = cg_tokenizer_train(CG_TOK_CHAR, false, train_sents, N_TRAIN, 0);
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    ck_assert_ptr_nonnull(t->cv);
    ck_assert_int_eq(cg_tokenizer_vocab_size(t), t->cv->n);
    int64_t n;
    int64_t *ids = cg_tokenizer_encode(t, " .", &n, NULL);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 0); /* the smallest character, no specials */
    free(ids);
    int64_t unk;
    char *d = round_trip(t, "Übermäßig schön!", &unk);
    ck_assert_str_eq(d, "Übermäßig schön!");
    ck_assert_int_eq(unk, 0);
    free(d);
    char path[PATH_MAX];
    make_temp(path, sizeof path);
    cg_tokenizer *r = through_file(t, false, path);
    ck_assert(cg_tokenizer_equal(t, r));
    ck_assert(!cg_tokenizer_equal(t, NULL));
    /* the same characters with and without the specials are two vocabularies;
     * pair vocabularies that differ in their last character differ */
    cg_tokenizer *p = cg_tokenizer_train(CG_TOK_CHAR, true, train_sents, N_TRAIN, 0);
    ck_assert(p && !cg_tokenizer_equal(t, p) && !cg_tokenizer_equal(p, t));
    const char *abc[] = {"abc"}, *abd[] = {"abd"};
    cg_tokenizer *p1 = cg_tokenizer_train(CG_TOK_CHAR, true, abc, 1, 0);
    cg_tokenizer *p2 = cg_tokenizer_train(CG_TOK_CHAR, true, abd, 1, 0);
    ck_assert(p1 && p2 && cg_tokenizer_equal(p1, p1) && !cg_tokenizer_equal(p1, p2));
    cg_tokenizer_free(p);
    cg_tokenizer_free(p1);
    cg_tokenizer_free(p2);
    unlink(path);
    cg_tokenizer_free(r);
    cg_tokenizer_free(t);
}
END_TEST

START_TEST(test_bpe)
{
    cg_clear_error();
    cg_tokenizer *t = cg_tokenizer_train(CG_TOK_BPE, true, train_sents, N_TRAIN, 300);
    if (!cg_spm_available()) {
        ck_assert_ptr_null(t);
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "unavailable"));
        return;
    }
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    int64_t V = cg_tokenizer_vocab_size(t);
    ck_assert(V >= CG_SPM_MIN_VOCAB && V <= 300);
    for (int i = 0; i < N_TRAIN; i++) {
        char *d = round_trip(t, train_sents[i], NULL);
        ck_assert_str_eq(d, train_sents[i]);
        free(d);
    }
    int64_t unk = -1; /* unseen characters: byte fallback, nothing unknown */
    char *d = round_trip(t, "zebra \xE2\x82\xAC 5", &unk);
    ck_assert_str_eq(d, "zebra \xE2\x82\xAC 5");
    ck_assert_int_eq(unk, 0);
    free(d);
    /* a word-initial piece is labelled with the visible space mark U+2423 */
    int64_t n;
    int64_t *ids = cg_tokenizer_encode(t, "das Haus", &n, NULL);
    ck_assert(n >= 2);
    bool marked = false;
    for (int64_t i = 0; i < n; i++) {
        char *l = cg_tokenizer_label(t, ids[i]);
        ck_assert_ptr_nonnull(l);
        ck_assert_ptr_null(strstr(l, "\xE2\x96\x81"));
        marked |= strstr(l, "\xE2\x90\xA3") != NULL;
        free(l);
    }
    ck_assert(marked);
    free(ids);
    char *l = cg_tokenizer_label(t, CG_SPM_BOS);
    ck_assert_str_eq(l, "<s>");
    free(l);

    char path[PATH_MAX];
    make_temp(path, sizeof path);
    cg_tokenizer *r = through_file(t, true, path);
    ck_assert(cg_tokenizer_equal(t, r));
    ck_assert_int_eq(r->kind, CG_TOK_BPE);
    cg_tokenizer_free(r);

    /* a damaged tokenizer.spm: rejected, naming the file */
    size_t len;
    unsigned char *blob = cg_spm_blob(t->spm, &len);
    blob[len / 2] ^= 0x40;
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_st_set_metadata(w, "tokenizer", "bpe"));
    ck_assert(cg_st_add_u8(w, CG_TOKENIZER_TENSOR, (int64_t)len, blob));
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    free(blob);
    cg_st_file *f = cg_st_open(path);
    cg_clear_error();
    ck_assert_ptr_null(cg_tokenizer_read(f, true));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), path));
    cg_st_close(f);
    /* an unknown kind */
    w = cg_st_writer_new();
    ck_assert(cg_st_set_metadata(w, "tokenizer", "wordpiece"));
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    f = cg_st_open(path);
    ck_assert_ptr_null(cg_tokenizer_read(f, true));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "wordpiece"));
    cg_st_close(f);
    unlink(path);

    /* BPE has the specials whatever the caller asked (the char LM asks for none) */
    cg_tokenizer *plain = cg_tokenizer_train(CG_TOK_BPE, false, train_sents, N_TRAIN, 300);
    ck_assert_msg(plain != NULL, "%s", cg_last_error());
    ck_assert(plain->specials && cg_tokenizer_equal(plain, t));
    cg_tokenizer_free(plain);

    /* below the smallest vocabulary */
    cg_clear_error();
    ck_assert_ptr_null(cg_tokenizer_train(CG_TOK_BPE, true, train_sents, N_TRAIN, 100));
    ck_assert(cg_has_error());
    cg_tokenizer_free(t);
}
END_TEST

START_TEST(test_kind_and_bpc)
{
    cg_tokenizer_kind k;
    ck_assert(cg_tokenizer_kind_parse("bpe", &k) && k == CG_TOK_BPE);
    ck_assert(cg_tokenizer_kind_parse("char", &k) && k == CG_TOK_CHAR);
    ck_assert(!cg_tokenizer_kind_parse("word", &k));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "char or bpe"));
    ck_assert_str_eq(cg_tokenizer_kind_name(CG_TOK_BPE), "bpe");
    /* char: tokens == characters, so bits = nats / ln 2 */
    ck_assert(fabs(cg_bits_per_char(1.0, 50, 50) - 1.0 / log(2.0)) < 1e-12);
    /* bpe: 20 tokens spelling 50 characters at 2 nats each = 40 nats */
    ck_assert(fabs(cg_bits_per_char(2.0, 20, 50) - 40.0 / 50.0 / log(2.0)) < 1e-12);
    ck_assert(isnan(cg_bits_per_char(1.0, 0, 0)));
    ck_assert(isnan(cg_bits_per_char(1.0, 5, 0))); /* tokens of no text */
    ck_assert_int_eq(cg_tokenizer_vocab_size(NULL), -1);
    ck_assert_ptr_null(cg_tokenizer_decode(NULL, NULL, 0));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_char_pairs);
    tcase_add_test(tc, test_char_lm);
    tcase_add_test(tc, test_bpe);
    tcase_add_test(tc, test_kind_and_bpc);
    suite_add_tcase(s, tc);
    Suite *all[] = {s};
    return cg_test_run(all, 1);
}
