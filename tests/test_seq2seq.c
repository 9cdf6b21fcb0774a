/* The seq2seq zoo: pair files, the numpy-exact split and batches, decoding
 * (greedy, beam) on a tiny model trained to overfit, and the seq2seq
 * program's command line (run as a child process). */
#include <check.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "models/seq2seq/beam.h"
#include "models/data/pairs.h"
#include "models/seq2seq/seq2seq.h"
#include "models/data/data.h"
#include "models/train/train_common.h"
#include "models/train/trainer.h"
#include "models/seq2seq/translate.h"
#include "models/report/metrics.h"
#include "models/text/spm.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "testutil.h"
#include "tests/seq2seq_rig.h"

/* ------------------------------------------------------------ helpers */
static char g_tmpdir[PATH_MAX];

static void tmp_setup(void) { cg_test_mkdtemp(g_tmpdir, sizeof g_tmpdir, "cg_test_seq2seq_"); }

static void tmp_teardown(void) { cg_test_rm_tree(g_tmpdir); }

static char *tmp_path(const char *name)
{
    static char buf[4][PATH_MAX + 256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%.255s", g_tmpdir, name); /* NAME_MAX */
    return p;
}

/* text (cap bytes) = n lines of fmt, whose two %d are the line's number:
 * the tab-separated numbered pairs several tests train or split on */
static void numbered_pairs(char *text, size_t cap, int n, const char *fmt)
{
    size_t len = 0;
    text[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(text + len, cap - len, fmt, i, i);
    ck_assert_uint_lt(len, cap);
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    size_t k = fread(b, 1, (size_t)len, f);
    b[k] = '\0';
    fclose(f);
    if (n)
        *n = k;
    return b;
}

/* models/seq2seq/translate.h: the translator's data and its batch order; a resume
 * at the position `steps` steps leave continues the same order. */
START_TEST(test_mt_data_order)
{
    char text[4096] = "";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "%.*s\t%.*s\n", 1 + i % 7, "abcdefgh", 1 + (i * 3) % 5,
                 "xyzuvw");
        strcat(text, line);
    }
    const char *path = tmp_path("p.tsv");
    write_file(path, text, strlen(text));
    enum { STEPS = 5, MORE = 9, ACC = 2 };
    cg_data_id id;
    cg_mt_data a = {0};
    ck_assert(cg_mt_data_load(&a, path, "none", 4, 4, &id));
    ck_assert(cg_mt_data_prepare(&a, path, 10, 12, CG_TOK_CHAR, 0, NULL, NULL, NULL));
    ck_assert_int_gt(a.batches.n_batches, 3);
    ck_assert(cg_mt_data_order(&a, 3, ACC, false, 0, "x"));
    for (int i = 0; i < (STEPS + MORE) * ACC; i++) {
        double w, t;
        ck_assert(cg_mt_data_next(&a, i % ACC, &w, &t));
        ck_assert_double_eq(w, (double)a.bt[i % ACC].n_tokens);
        ck_assert_double_eq(t, w);  /* tokens/s counts target tokens, as bench */
        if (i == STEPS * ACC - 1) { /* the state a checkpoint after STEPS steps keeps */
            cg_mt_data b = {0};
            b.epoch = a.epoch;
            b.pos = a.pos;
            ck_assert(cg_mt_data_load(&b, path, "none", 4, 4, &id));
            ck_assert(cg_mt_data_prepare(&b, path, 10, 12, CG_TOK_CHAR, 0, NULL, NULL, NULL));
            ck_assert(!cg_mt_data_order(&b, 3, ACC, true, STEPS + 1, "ck.st"));
            ck_assert_ptr_nonnull(strstr(cg_last_error(), "ck.st"));
            cg_mt_data_free(&b);
            b.epoch = a.epoch;
            b.pos = a.pos;
            ck_assert(cg_mt_data_load(&b, path, "none", 4, 4, &id));
            ck_assert(cg_mt_data_prepare(&b, path, 10, 12, CG_TOK_CHAR, 0, NULL, NULL, NULL));
            ck_assert(cg_mt_data_order(&b, 3, ACC, true, STEPS, "ck.st"));
            for (int k = 0; k < MORE * ACC; k++) {
                double w, t;
                ck_assert(cg_mt_data_next(&b, k % ACC, &w, &t));
                ck_assert(cg_mt_data_next(&a, k % ACC, &w, &t));
                ck_assert_int_eq(b.bt[k % ACC].B, a.bt[k % ACC].B);
                ck_assert_int_eq(b.bt[k % ACC].tgt_out[0], a.bt[k % ACC].tgt_out[0]);
            }
            cg_mt_data_free(&b);
            break;
        }
    }
    /* no pair fits --max-len 2; a missing default file gets the hint */
    cg_mt_data c = {0};
    ck_assert(cg_mt_data_load(&c, path, "none", 4, 4, &id));
    ck_assert(!cg_mt_data_prepare(&c, path, 2, 12, CG_TOK_CHAR, 0, NULL, NULL, NULL));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "no training pair fits --max-len 2"));
    cg_mt_data_free(&c);
    const char *missing = tmp_path("missing.tsv");
    ck_assert(!cg_mt_data_load(&c, missing, missing, 4, 4, &id));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "scripts/prepare_data.sh"));
    ck_assert(!cg_mt_data_load(&c, path, "none", 30, 20, &id)); /* split too large */
    ck_assert_ptr_nonnull(strstr(cg_last_error(), path));
    cg_mt_data_free(&c);
    cg_mt_data_free(&a);
}
END_TEST

/* Fits: both sides of pair i at most lim of their current lengths. */
static bool pair_fits(const cg_pairs *p, int64_t i, int64_t lim)
{
    return p->items[i].src_len <= lim && p->items[i].tgt_len <= lim;
}

/* With BPE, --max-len drops the training pairs longer than the model takes
 * in tokens, as docs/zoo.md says and as fairseq's --max-source-positions
 * counts, not in characters (a pair of 60 characters and 12 pieces fits
 * --max-len 30); the tokenizer learns from every training pair. A
 * checkpoint of a run before (max_len_chars) keeps its character count. */
START_TEST(test_max_len_counts_bpe_tokens)
{
    if (!cg_spm_available())
        return;
    enum { N = 80, MAX_LEN = 14 };
    /* the split depends on the number of pairs only: long pairs go to
     * training pairs, so that validation fits */
    char text[16384];
    numbered_pairs(text, sizeof text, N, "a%d\tb%d\n");
    const char *path = tmp_path("bpe.tsv");
    write_file(path, text, strlen(text));
    cg_data_id id;
    cg_mt_data d = {0};
    ck_assert(cg_mt_data_load(&d, path, "none", 4, 4, &id));
    bool held[N] = {false};
    for (int64_t k = 0; k < d.split.n_valid; k++)
        held[d.split.valid[k]] = true;
    for (int64_t k = 0; k < d.split.n_test; k++)
        held[d.split.test[k]] = true;
    cg_mt_data_free(&d);
    static const char *const words[2][6] = {{"the", "house", "is", "small", "and", "old"},
                                            {"das", "Haus", "ist", "klein", "und", "alt"}};
    size_t len = 0;
    for (int i = 0; i < N; i++) { /* 2 to 5 words a side (up to 25 characters), or 16 */
        int nw = !held[i] && i % 5 == 0 ? 16 : 2 + i % 4;
        for (int side = 0; side < 2; side++) {
            for (int w = 0; w < nw; w++)
                len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", w ? " " : "",
                                        words[side][(i + w) % 6]);
            len += (size_t)snprintf(text + len, sizeof text - len, side ? "\n" : "\t");
        }
    }
    ck_assert_uint_lt(len, sizeof text - 1);
    write_file(path, text, len);
    for (int chars = 0; chars < 2; chars++) {
        d = (cg_mt_data){.max_len_chars = chars};
        ck_assert(cg_mt_data_load(&d, path, "none", 4, 4, &id));
        int64_t by_chars = 0, n_all = d.split.n_train;
        for (int64_t k = 0; k < n_all; k++)
            by_chars += pair_fits(&d.pairs, d.split.train[k], MAX_LEN - 2);
        ck_assert_msg(cg_mt_data_prepare(&d, path, MAX_LEN, 200, CG_TOK_BPE, 320, NULL, NULL, NULL),
                      "%s", cg_last_error());
        int64_t by_tokens = 0; /* of every training pair, in ids */
        for (int64_t i = 0; i < N; i++)
            by_tokens += !held[i] && pair_fits(&d.pairs, i, MAX_LEN - 2);
        ck_assert_int_gt(by_tokens, by_chars); /* the case this test is about */
        ck_assert_int_lt(by_tokens, n_all);    /* the long pairs are too long even so */
        ck_assert_int_eq(d.n_train, chars ? by_chars : by_tokens);
        for (int64_t k = 0; k < d.n_train; k++) /* what is kept fits the model */
            ck_assert(pair_fits(&d.pairs, d.split.train[k], MAX_LEN - 2));
        cg_mt_data_free(&d);
    }
}
END_TEST

/* An encoder that must not be called: the pairs were tokenized once. */
static int64_t *no_encode(const void *ctx, const char *s, int64_t *n, int64_t *n_unk)
{
    (void)ctx, (void)s, (void)n, (void)n_unk;
    cg_set_error("encoded again");
    return NULL;
}

/* cg_pairs_tokenize keeps the ids: batches copy them (an encoder that
 * fails is never called) and equal the batches that encode the text, the
 * wrong-source pairs included (their sides come from two pairs). */
START_TEST(test_tokenize_once)
{
    const char text[] = "ab\tuvw\nhello\tworld\nc\txy\nlonger one\tz\n";
    cg_pairs p = {0};
    ck_assert(cg_pairs_parse(text, strlen(text), "t.tsv", &p));
    const char *sents[8];
    for (int64_t i = 0; i < p.n; i++)
        sents[2 * i] = p.items[i].src, sents[2 * i + 1] = p.items[i].tgt;
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, sents, 2 * p.n, 0);
    ck_assert_ptr_nonnull(tok);
    const int64_t idx[4] = {3, 0, 2, 1};
    cg_batch want, got;
    ck_assert(cg_batch_make_tok(&p, idx, 4, tok, &want));
    ck_assert_ptr_null(p.ids);
    ck_assert(!cg_batch_make_with(&p, idx, 4, no_encode, NULL, &got));
    ck_assert(cg_pairs_tokenize(&p, tok));
    ck_assert_ptr_nonnull(p.ids);
    ck_assert(cg_pairs_tokenize(&p, tok)); /* again: replaces, no leak */
    ck_assert(cg_batch_make_with(&p, idx, 4, no_encode, NULL, &got));
    ck_assert(got.B == want.B && got.S == want.S && got.T == want.T);
    ck_assert_int_eq(got.n_tokens, want.n_tokens);
    ck_assert_mem_eq(got.src, want.src, (size_t)(got.B * got.S) * sizeof(int64_t));
    ck_assert_mem_eq(got.tgt_in, want.tgt_in, (size_t)(got.B * got.T) * sizeof(int64_t));
    ck_assert_mem_eq(got.tgt_out, want.tgt_out, (size_t)(got.B * got.T) * sizeof(int64_t));
    cg_batch_free(&got);
    cg_batch_free(&want);
    cg_tokenizer_free(tok);
    cg_pairs_free(&p);
}
END_TEST

/* An encoder that gives one id more than the text has characters: not the
 * one that recorded the pairs' lengths. */
static int64_t *one_more(const void *ctx, const char *s, int64_t *n, int64_t *n_unk)
{
    (void)ctx, (void)n_unk;
    *n = (int64_t)strlen(s) + 1;
    int64_t *ids = calloc((size_t)*n, sizeof *ids);
    for (int64_t i = 0; ids && i < *n; i++)
        ids[i] = 4;
    return ids;
}

/* A sentence that encodes to more ids than its recorded length is refused,
 * naming that length, also when a longer pair in its batch leaves room. */
START_TEST(test_batch_longer_than_recorded)
{
    const char text[] = "ab\tuvw\nlonger one\tz\n";
    cg_pairs p = {0};
    ck_assert(cg_pairs_parse(text, strlen(text), "t.tsv", &p));
    const int64_t idx[2] = {0, 1};
    cg_batch got;
    cg_clear_error();
    ck_assert(!cg_batch_make_with(&p, idx, 2, one_more, NULL, &got));
    ck_assert_msg(strstr(cg_last_error(), "encodes to 3 ids, more than its recorded length 2"),
                  "%s", cg_last_error());
    cg_pairs_free(&p);
}
END_TEST

/* The programs' helpers: positional arguments, lines of a stream, a
 * checkpoint's model fields, evaluation figures. */
START_TEST(test_prog_helpers)
{
    int64_t beam = 1;
    bool no_cache = false;
    const cg_cli_opt opts[] = {{"--beam", CG_CLI_I64, &beam, 1, 10, NULL, 0},
                               {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL, 0}};
    char *argv[] = {"--beam", "3", "hello", "--no-cache", "world", "--", "--beam", NULL};
    int np = -1;
    ck_assert_int_eq(cg_prog_parse_pos(7, argv, opts, 2, "help", &np), -1);
    ck_assert_int_eq(np, 3);
    ck_assert_int_eq(beam, 3);
    ck_assert(no_cache);
    ck_assert_str_eq(argv[0], "hello");
    ck_assert_str_eq(argv[1], "world");
    ck_assert_str_eq(argv[2], "--beam");
    char *bad[] = {"x", "--beam", "11"};
    ck_assert_int_eq(cg_prog_parse_pos(3, bad, opts, 2, "help", &np), CG_EXIT_USAGE);

    const char *path = tmp_path("lines.txt");
    write_file(path, "a\r\nb\n\nlast", 10);
    FILE *f = fopen(path, "rb");
    int64_t n = 0;
    char **lines = cg_read_lines(f, "lines", &n, NULL);
    fclose(f);
    ck_assert_ptr_nonnull(lines);
    ck_assert_int_eq(n, 4);
    ck_assert_str_eq(lines[0], "a");
    ck_assert_str_eq(lines[1], "b");
    ck_assert_str_eq(lines[2], "");
    ck_assert_str_eq(lines[3], "last");
    cg_strings_free(lines, n);
    write_file(path, "a\0b\n", 4);
    f = fopen(path, "rb");
    ck_assert_ptr_null(cg_read_lines(f, "lines", &n, NULL));
    fclose(f);

    int64_t v = 500, t = 1000;
    const cg_json_field fl[] = {{"valid_size", CG_JF_I64, &v, 1, 1e9, true},
                                {"test_size", CG_JF_I64, &t, 1, 1e9, true}};
    ck_assert(cg_train_model_fields(NULL, "c.st", "seq2seq", fl, 2));
    ck_assert(cg_train_model_fields("{\"model\": {\"valid_size\": 7}}", "c.st", "seq2seq", fl, 2));
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(t, 1000);
    ck_assert(cg_train_model_fields("{\"test_size\": 3}", "c.st", "seq2seq", fl, 2)); /* old */
    ck_assert_int_eq(t, 3);
    ck_assert(!cg_train_model_fields("{\"model\": {\"valid_size\": 0}}", "c.st", "seq2seq", fl, 2));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'c.st': seq2seq training state"));
    /* the precision decoded in: fp32 when none is recorded; a training state
     * that is there but not JSON (damaged, or its parse out of memory) is an
     * error, not a silent fp32 (translate gave other words, exit 0) */
    cg_precision pr = CG_PRECISION_BF16;
    ck_assert(cg_train_precision(NULL, "c.st", &pr) && pr == CG_PRECISION_FP32);
    ck_assert(cg_train_precision("{\"steps\": 4}", "c.st", &pr) && pr == CG_PRECISION_FP32);
    ck_assert(!cg_train_precision("{\"options\": {\"precision\": \"bf16\"", "c.st", &pr));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'c.st': its training state is damaged"));
    /* JSON, but not an object; options, but not an object */
    cg_clear_error();
    ck_assert(!cg_train_precision("[\"bf16\"]", "c.st", &pr));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "damaged (not a JSON object)"));
    cg_clear_error();
    ck_assert(!cg_train_precision("{\"options\": \"bf16\"}", "c.st", &pr));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "\"options\" is not a JSON object"));
    /* the same for eval's split sizes, data path and data identity (the
     * default data or split taken instead, silently) */
    const char *badst = "{\"data\": \"pairs.tsv\", \"model\": {\"valid_size\": 7}";
    cg_clear_error();
    ck_assert(!cg_train_model_fields(badst, "c.st", "seq2seq", fl, 2));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'c.st': its training state is damaged"));
    cg_clear_error();
    ck_assert_ptr_null(cg_train_data_path(badst, "c.st", NULL, "default.tsv"));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'c.st': its training state is damaged"));
    char *given = cg_train_data_path(badst, "c.st", "given.tsv", "default.tsv");
    ck_assert_str_eq(given, "given.tsv"); /* --data given: the state is not read */
    free(given);
    cg_data_id some = {0};
    cg_clear_error();
    ck_assert(!cg_train_data_check(badst, "c.st", &some));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'c.st': its training state is damaged"));

    cg_eval_result e = {0};
    for (int i = 0; i < 8; i++)
        cg_eval_add(&e, "k", "n", i, 2);
    ck_assert_int_eq(e.n_extra, 6);
    ck_assert_double_eq(e.extra[5].value, 5);
    ck_assert_int_eq(e.extra[5].decimals, 2);
}
END_TEST

/* ------------------------------------------------------------ numpy RNG */
START_TEST(test_mt_matches_numpy)
{
    /* numpy.random.RandomState(0).permutation(20), RandomState(1).permutation(7) */
    const int64_t want0[20] = {18, 1,  19, 8, 10, 17, 6, 13, 4,  2,
                               5,  14, 9,  7, 16, 11, 3, 0,  15, 12};
    const int64_t want1[7] = {6, 2, 1, 0, 4, 3, 5};
    int64_t p[20];
    cg_mt19937 r;
    cg_mt19937_seed(&r, 0);
    cg_mt_permutation(&r, 20, p);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(p[i], want0[i]);
    cg_mt19937_seed(&r, 1);
    cg_mt_permutation(&r, 7, p);
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(p[i], want1[i]);
    /* MT19937 reference output for init_genrand(5489): 3499211612 */
    cg_mt19937_seed(&r, 5489);
    ck_assert_uint_eq(cg_mt19937_next(&r), 3499211612u);
}
END_TEST

/* ------------------------------------------------------------ pair files */
START_TEST(test_pairs_parse_ok)
{
    const char *t = "Hi.\tHallo.\r\nGrüße!\tGreetings!\nlast\tletzte";
    cg_pairs p;
    ck_assert(cg_pairs_parse(t, strlen(t), "x", &p));
    ck_assert_int_eq(p.n, 3);
    ck_assert_str_eq(p.items[0].src, "Hi.");
    ck_assert_str_eq(p.items[0].tgt, "Hallo.");
    ck_assert_str_eq(p.items[1].src, "Grüße!");
    ck_assert_int_eq(p.items[1].src_len, 6); /* code points, not bytes */
    ck_assert_str_eq(p.items[2].tgt, "letzte");
    cg_pairs_free(&p);
}
END_TEST

static void expect_read_error(const char *name, const char *data, size_t n, const char *needle)
{
    const char *path = tmp_path(name);
    write_file(path, data, n ? n : strlen(data)); /* n == 0: the string's length */
    cg_pairs p;
    cg_clear_error();
    ck_assert_msg(!cg_pairs_read(path, &p, NULL), "%s should fail", name);
    ck_assert_msg(strstr(cg_last_error(), needle) != NULL, "error '%s' lacks '%s'", cg_last_error(),
                  needle);
    ck_assert_msg(strstr(cg_last_error(), path) != NULL, "error '%s' lacks the path",
                  cg_last_error());
    ck_assert_ptr_null(p.items);
}

START_TEST(test_pairs_read_errors)
{
    expect_read_error("empty.tsv", "", 0, "empty");
    expect_read_error("notab.tsv", "a\tb\nno tab here\n", 0, ":2: missing tab");
    expect_read_error("twotabs.tsv", "a\tb\tc\n", 0, ":1: more than one tab");
    expect_read_error("latin1.tsv", "ok\tgut\nGr\xfc\xdf\tx\n", 0, ":2: not valid UTF-8");
    expect_read_error("overlong.tsv", "\xc0\xaf\tx\n", 0, "not valid UTF-8");
    expect_read_error("blank.tsv", "a\tb\n\nc\td\n", 0, ":2: missing tab");
    cg_pairs p;
    cg_clear_error();
    ck_assert(!cg_pairs_read(tmp_path("missing.tsv"), &p, NULL));
    ck_assert(strstr(cg_last_error(), "cannot open") != NULL);
}
END_TEST

/* --extra-data's pairs (cg_pairs_add_extra): 10 pairs split 5/2/3 by
 * RandomState(0).permutation(10) = [2 8 4 9 1 | 6 7 | 3 0 5] */
START_TEST(test_pairs_add_extra)
{
    char text[1024];
    numbered_pairs(text, sizeof text, 10, "en %d\tde %d\n");
    const char *extra = "en 3\tneu\n"    /* the source of test pair 3: held out */
                        "neu 1\tde 6\n"  /* the target of validation pair 6: held out */
                        "de 0\tx\n"      /* test pair 0's target as a source: held out */
                        "en 2\tandere\n" /* a training pair's source: duplicate */
                        "neu 2\tde 2\n"  /* a training pair's target only: used */
                        "neu 3\ty\n"     /* used */
                        "neu 3\tz\n";    /* an earlier extra pair's source: duplicate */
    cg_pairs p, x;
    cg_pair_split s;
    ck_assert(cg_pairs_parse(text, strlen(text), "t", &p));
    ck_assert(cg_pairs_parse(extra, strlen(extra), "x", &x));
    ck_assert(cg_pairs_split(&p, 2, 3, &s));
    int64_t valid[2], test[3];
    memcpy(valid, s.valid, sizeof valid);
    memcpy(test, s.test, sizeof test);
    cg_pairs_extra c;
    ck_assert(cg_pairs_add_extra(&p, &s, &x, &c));
    cg_pairs_free(&x); /* the text was copied */
    ck_assert_int_eq(c.read, 7);
    ck_assert_int_eq(c.held_out, 3);
    ck_assert_int_eq(c.duplicates, 2);
    ck_assert_int_eq(c.used, 2);
    ck_assert_int_eq(p.n, 12);
    ck_assert_int_eq(s.n_train, 7);
    const int64_t train[7] = {2, 8, 4, 9, 1, 10, 11};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(s.train[i], train[i]);
    ck_assert_int_eq(s.n_valid, 2);
    ck_assert_int_eq(s.n_test, 3);
    ck_assert(!memcmp(valid, s.valid, sizeof valid) && !memcmp(test, s.test, sizeof test));
    for (int i = 0; i < 10; i++) { /* the file's pairs keep their place and text */
        char src[16], tgt[16];
        snprintf(src, sizeof src, "en %d", i);
        snprintf(tgt, sizeof tgt, "de %d", i);
        ck_assert_str_eq(p.items[i].src, src);
        ck_assert_str_eq(p.items[i].tgt, tgt);
    }
    ck_assert_str_eq(p.items[10].src, "neu 2");
    ck_assert_str_eq(p.items[10].tgt, "de 2");
    ck_assert_str_eq(p.items[11].src, "neu 3");
    ck_assert_str_eq(p.items[11].tgt, "y");
    ck_assert_int_eq(p.items[11].src_len, 5);
    ck_assert_int_eq(p.items[11].tgt_len, 1);
    /* a file all of whose pairs are dropped leaves the set as it was */
    ck_assert(cg_pairs_parse("en 0\tq\nen 2\tq\n", 14, "y", &x));
    ck_assert(cg_pairs_add_extra(&p, &s, &x, &c));
    ck_assert(c.read == 2 && c.held_out == 1 && c.duplicates == 1 && c.used == 0);
    ck_assert(p.n == 12 && s.n_train == 7);
    cg_pairs_free(&x);
    cg_pair_split_free(&s);
    cg_pairs_free(&p);
}
END_TEST

START_TEST(test_split_and_batches)
{
    /* 10 pairs of known lengths */
    char text[1024] = "";
    for (int i = 0; i < 10; i++) {
        char line[64];
        snprintf(line, sizeof line, "%.*s\t%.*s\n", 1 + i % 4, "aaaaaa", 1 + (9 - i) % 3, "bbbb");
        strcat(text, line);
    }
    cg_pairs p;
    ck_assert(cg_pairs_parse(text, strlen(text), "t", &p));
    cg_pair_split s;
    ck_assert(cg_pairs_split(&p, 2, 3, &s));
    ck_assert_int_eq(s.n_train, 5);
    /* RandomState(0).permutation(10) = [2 8 4 9 1 6 7 3 0 5] */
    const int64_t perm[10] = {2, 8, 4, 9, 1, 6, 7, 3, 0, 5};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s.train[i], perm[i]);
    ck_assert_int_eq(s.valid[0], perm[5]);
    ck_assert_int_eq(s.test[2], perm[9]);
    cg_pair_split bad;
    ck_assert(!cg_pairs_split(&p, 5, 5, &bad));

    /* batches: sorted by (target, source) length, cut at padded size */
    cg_batches b;
    ck_assert(cg_make_batches(&p, NULL, p.n, 12, &b));
    int64_t total = 0;
    for (int64_t k = 0; k < b.n_batches; k++) {
        int64_t n = b.start[k + 1] - b.start[k], S = 0, T = 0;
        ck_assert_int_ge(n, 1);
        for (int64_t i = b.start[k]; i < b.start[k + 1]; i++) {
            const cg_pair *q = &p.items[b.idx[i]];
            S = q->src_len + 1 > S ? q->src_len + 1 : S;
            T = q->tgt_len + 1 > T ? q->tgt_len + 1 : T;
        }
        ck_assert_int_le(n * (S + T), 12);
        total += n;
    }
    ck_assert_int_eq(total, 10);
    for (int64_t i = 1; i < 10; i++) {
        const cg_pair *x = &p.items[b.idx[i - 1]], *y = &p.items[b.idx[i]];
        ck_assert(x->tgt_len < y->tgt_len ||
                  (x->tgt_len == y->tgt_len && x->src_len <= y->src_len));
    }

    /* pairs of equal lengths keep the order they are given in (the
     * reference's sorted() is stable): 0, 2 and 3 are of 1 and 1 characters */
    cg_pairs eqp;
    cg_batches eq;
    ck_assert(cg_pairs_parse("x\ty\nab\tc\nz\tw\nq\tr\n", 17, "eq", &eqp));
    const int64_t order[4] = {3, 1, 0, 2}, sorted[4] = {3, 0, 2, 1};
    ck_assert(cg_make_batches(&eqp, order, 4, 1000, &eq));
    ck_assert_int_eq(eq.n_batches, 1);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(eq.idx[i], sorted[i]);
    cg_batches_free(&eq);
    /* a batch may fill max_tokens exactly: two pairs of 1 + 1 ids and their
     * ends (2 * (2 + 2) = 8 tokens) in one batch of 8, the third in another */
    ck_assert(cg_make_batches(&eqp, (const int64_t[]){0, 2, 3}, 3, 8, &eq));
    ck_assert_int_eq(eq.n_batches, 2);
    ck_assert(eq.start[0] == 0 && eq.start[1] == 2 && eq.start[2] == 3);
    cg_batches_free(&eq);
    cg_pairs_free(&eqp);

    /* tensorize */
    cg_pair_vocab v;
    ck_assert(cg_pair_vocab_build(&p, NULL, p.n, &v));
    ck_assert_int_eq(cg_pair_vocab_size(&v), 6); /* pad bos eos unk a b */
    /* encoding keeps the decoder's error (an offset here; out of memory
     * decoding was reported as "text is not valid UTF-8") */
    int64_t nbad = 0;
    cg_clear_error();
    ck_assert_ptr_null(cg_pair_vocab_encode(&v, "ab\xff", &nbad, NULL));
    ck_assert_str_eq(cg_last_error(), "text is not valid UTF-8 (bad byte 0xff at offset 2)");
    int64_t two[2] = {0, 2}; /* "a"/"b" and "aaa"/"bb" */
    cg_batch bt;
    ck_assert(cg_batch_make(&p, two, 2, &v, &bt));
    ck_assert_int_eq(bt.S, 4);
    ck_assert_int_eq(bt.T, 3);
    const int64_t src[8] = {4, 2, 0, 0, 4, 4, 4, 2};
    const int64_t tin[6] = {1, 5, 0, 1, 5, 5}, tout[6] = {5, 2, 0, 5, 5, 2};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(bt.src[i], src[i]);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(bt.tgt_in[i], tin[i]);
        ck_assert_int_eq(bt.tgt_out[i], tout[i]);
    }
    ck_assert_int_eq(bt.n_tokens, 5);
    char *js = cg_pair_vocab_to_json(&v);
    cg_pair_vocab v2;
    ck_assert(cg_pair_vocab_from_json(js, &v2));
    ck_assert_int_eq(v2.n_chars, 2);
    int64_t ids[3] = {4, 3, 5};
    char *d = cg_pair_vocab_decode(&v2, ids, 3);
    ck_assert_str_eq(d, "ab");
    free(d);
    free(js);
    cg_pair_vocab_free(&v2);
    cg_batch_free(&bt);
    cg_pair_vocab_free(&v);
    cg_batches_free(&b);
    cg_pair_split_free(&s);
    cg_pairs_free(&p);
}
END_TEST

/* ------------------------------------------------------------ overfitting */
static const char *const SRC[] = {"hello.", "good day", "thanks!", "a cat", "yes"};
static const char *const TGT[] = {"hallo.", "guten tag", "danke!", "eine katze", "ja"};
enum { NPAIRS = 5 };

static cg_seq2seq *g_model;
static cg_pair_vocab g_vocab;
static cg_pairs g_pairs;

/* source ids + EOS for pair i (malloc'd), *S its length */
static int64_t *src_ids(const char *s, int64_t *S)
{
    int64_t n;
    int64_t *ids = cg_pair_vocab_encode(&g_vocab, s, &n, NULL);
    ck_assert_ptr_nonnull(ids);
    ids = realloc(ids, (size_t)(n + 1) * sizeof *ids);
    ids[n] = CG_EOS;
    *S = n + 1;
    return ids;
}

static char *greedy_text(const char *s)
{
    int64_t S, L, out[64];
    int64_t *ids = src_ids(s, &S);
    ck_assert(cg_greedy_decode(g_model, ids, 1, S, 40, out, &L, true));
    free(ids);
    return cg_pair_vocab_decode(&g_vocab, out, L);
}

/* Trains a small model on the pairs until greedy decoding reproduces all of
 * them (once, shared by the decoding tests). */
static void overfit_setup(void)
{
    if (g_model)
        return;
    char text[512] = "";
    for (int i = 0; i < NPAIRS; i++) {
        strcat(text, SRC[i]);
        strcat(text, "\t");
        strcat(text, TGT[i]);
        strcat(text, "\n");
    }
    ck_assert(cg_pairs_parse(text, strlen(text), "overfit", &g_pairs));
    ck_assert(cg_pair_vocab_build(&g_pairs, NULL, g_pairs.n, &g_vocab));
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&g_vocab);
    c.d = 32;
    c.H = 2;
    c.enc_layers = 1;
    c.dec_layers = 1;
    c.d_ff = 64;
    c.max_len = 64;
    c.dropout = 0.0f;
    c.label_smoothing = 0.0f;
    g_model = cg_seq2seq_new(&c, 7);
    ck_assert_ptr_nonnull(g_model);
    cg_param_list pl = {0};
    ck_assert(cg_module_params(CG_MODULE(g_model), &pl));
    cg_optim_param *op = malloc((size_t)pl.n * sizeof *op);
    for (int i = 0; i < pl.n; i++)
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.0};
    cg_optim_config oc = cg_adam_config(3e-3, 0.9, 0.98, 1e-9);
    cg_optim *opt = cg_optim_new(&oc, pl.n, op);
    ck_assert_ptr_nonnull(opt);
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_batch bt;
    ck_assert(cg_batch_make(&g_pairs, all, NPAIRS, &g_vocab, &bt));
    bool reproduced = false;
    for (int step = 1; step <= 1500 && !reproduced; step++) {
        cg_tensor *logits = cg_seq2seq_forward(g_model, bt.src, bt.B, bt.S, bt.tgt_in, bt.T);
        cg_tensor *loss = cg_seq2seq_loss(g_model, logits, bt.tgt_out);
        ck_assert_ptr_nonnull(loss);
        cg_optim_zero_grad(opt);
        ck_assert(cg_backward(loss, NULL, false));
        cg_release_all(2, logits, loss);
        ck_assert(cg_optim_clip_grad_norm(opt, 1.0) >= 0);
        ck_assert(cg_optim_step(opt));
        if (step % 50 == 0) {
            cg_module_train(CG_MODULE(g_model), false);
            reproduced = true;
            for (int i = 0; i < NPAIRS && reproduced; i++) {
                char *h = greedy_text(SRC[i]);
                reproduced = strcmp(h, TGT[i]) == 0;
                free(h);
            }
            cg_module_train(CG_MODULE(g_model), true);
        }
    }
    cg_module_train(CG_MODULE(g_model), false);
    cg_batch_free(&bt);
    cg_optim_free(opt);
    free(op);
    cg_param_list_free(&pl);
}

START_TEST(test_overfit_greedy_exact)
{
    for (int i = 0; i < NPAIRS; i++) {
        char *h = greedy_text(SRC[i]);
        ck_assert_str_eq(h, TGT[i]);
        free(h);
    }
    /* batched greedy (padded sources) gives the same */
    int64_t S = 0, lens[NPAIRS], out[NPAIRS * 40];
    for (int i = 0; i < NPAIRS; i++)
        S = g_pairs.items[i].src_len + 1 > S ? g_pairs.items[i].src_len + 1 : S;
    int64_t *src = calloc((size_t)(NPAIRS * S), sizeof *src);
    for (int i = 0; i < NPAIRS; i++) {
        int64_t n, *ids = src_ids(SRC[i], &n);
        memcpy(src + i * S, ids, (size_t)n * sizeof *ids);
        free(ids);
    }
    ck_assert(cg_greedy_decode(g_model, src, NPAIRS, S, 40, out, lens, true));
    for (int i = 0; i < NPAIRS; i++) {
        char *h = cg_pair_vocab_decode(&g_vocab, out + i * 40, lens[i]);
        ck_assert_str_eq(h, TGT[i]);
        free(h);
    }
    free(src);
}
END_TEST

static const char *const PROBES[] = {"hello.", "good day",  "thanks!",    "a cat", "yes",
                                     "a day",  "hello cat", "thanks yes", "no",    "good."};

START_TEST(test_beam1_equals_greedy)
{
    for (size_t k = 0; k < sizeof PROBES / sizeof PROBES[0]; k++) {
        int64_t S, L, out[64], *b = NULL, bl;
        int64_t *ids = src_ids(PROBES[k], &S);
        ck_assert(cg_greedy_decode(g_model, ids, 1, S, 40, out, &L, true));
        ck_assert(cg_beam_search(g_model, ids, S, 1, 0.6, 40, &b, &bl, NULL, NULL, true));
        ck_assert_int_eq(bl, L);
        for (int64_t i = 0; i < L; i++)
            ck_assert_int_eq(b[i], out[i]);
        free(b);
        free(ids);
    }
}
END_TEST

/* --sampling (cg_sample_decode): each row draws from its own generator,
 * so a sentence decoded in a batch gets what it gets alone; each draw is
 * cg_sample of its prefix's logits recomputed without the cache, with the
 * row's generator; temperature 0 and top-k 1 are the argmax. */
static void sample_alone(const int64_t *src, int64_t S, const cg_sample_config *cfg, uint64_t seed,
                         int64_t *out, int64_t *len)
{
    cg_rng r = cg_rng_new(seed);
    ck_assert_msg(cg_sample_decode(g_model, src, 1, S, 20, NULL, cfg, &r, out, len, true), "%s",
                  cg_last_error());
}

START_TEST(test_sample_decode)
{
    enum { N = 4, STEPS = 20 };
    const int64_t V = g_model->cfg.vocab;
    int64_t S = 0, *ids[N], len[N];
    for (int i = 0; i < N; i++) {
        ids[i] = src_ids(PROBES[i], &len[i]);
        S = len[i] > S ? len[i] : S;
    }
    int64_t src[N * 32] = {0}, out[N * STEPS], lens[N], one[STEPS], l1;
    ck_assert(S <= 32);
    for (int i = 0; i < N; i++)
        memcpy(src + i * S, ids[i], (size_t)len[i] * sizeof *src);
    const cg_sample_config cfg = {.temperature = 2.0, .top_k = 0, .top_p = 0.97};
    cg_rng r[N];
    for (int i = 0; i < N; i++)
        r[i] = cg_rng_new(40 + (uint64_t)i);
    ck_assert_msg(cg_sample_decode(g_model, src, N, S, STEPS, NULL, &cfg, r, out, lens, true), "%s",
                  cg_last_error());
    int differs = 0;
    for (int i = 0; i < N; i++) {
        sample_alone(ids[i], len[i], &cfg, 40 + (uint64_t)i, one, &l1);
        ck_assert_int_eq(l1, lens[i]);
        for (int64_t j = 0; j < l1; j++)
            ck_assert_int_eq(one[j], out[i * STEPS + j]);
        /* the draws against the recomputed logits */
        cg_rng rr = cg_rng_new(40 + (uint64_t)i);
        int64_t ys[STEPS + 1] = {CG_BOS};
        int64_t n = lens[i] < STEPS ? lens[i] + 1 : STEPS; /* with the EOS drawn */
        for (int64_t j = 0; j < n; j++) {
            cg_no_grad_begin();
            cg_tensor *l = cg_seq2seq_forward(g_model, ids[i], 1, len[i], ys, j + 1);
            cg_tensor *c = l ? cg_contiguous(l) : NULL;
            cg_no_grad_end();
            ck_assert_ptr_nonnull(c);
            float *row = cg_data(c) + j * V; /* PAD, BOS and UNK: never drawn */
            row[CG_PAD] = row[CG_BOS] = row[CG_UNK] = -INFINITY;
            int64_t id = cg_sample(cg_data(c) + j * V, V, &cfg, &rr);
            cg_release_all(2, l, c);
            ck_assert_int_eq(id, out[i * STEPS + j]);
            ys[j + 1] = id;
        }
        /* and not the argmax */
        int64_t g[STEPS], gl;
        ck_assert(cg_greedy_decode(g_model, ids[i], 1, len[i], STEPS, g, &gl, true));
        differs += gl != lens[i] || memcmp(g, out + i * STEPS, (size_t)gl * sizeof *g) != 0;
        /* temperature 0 and top-k 1: the argmax */
        const cg_sample_config t0 = {.temperature = 0, .top_k = 0, .top_p = 1};
        const cg_sample_config k1 = {.temperature = 1, .top_k = 1, .top_p = 1};
        for (int k = 0; k < 2; k++) {
            sample_alone(ids[i], len[i], k ? &k1 : &t0, 7, one, &l1);
            ck_assert_int_eq(l1, gl);
            for (int64_t j = 0; j < gl; j++)
                ck_assert_int_eq(one[j], g[j]);
        }
    }
    ck_assert_int_gt(differs, 0);
    CG_ASSERT_FAILS(cg_sample_decode(g_model, src, N, S, STEPS, NULL, &cfg, NULL, out, lens, true),
                    "sample decode: no generators");
    for (int i = 0; i < N; i++)
        free(ids[i]);
}
END_TEST

/* Sampling never draws PAD (fairseq-generate's lprobs[:, pad] = -inf), BOS
 * or UNK: at a temperature that makes the draws near uniform, 32 sentences
 * of 20 draws hold none of them before their EOS (they held some: each
 * prints as nothing, so the text scores otherwise than the draw; a PAD is
 * also counted by --min-len, and masks its key from then on). */
START_TEST(test_sample_decode_no_pad)
{
    enum { N = 32, STEPS = 20 };
    int64_t S, *ids = src_ids(PROBES[0], &S), src[N * 32], out[N * STEPS], lens[N];
    ck_assert(S <= 32);
    for (int i = 0; i < N; i++)
        memcpy(src + i * S, ids, (size_t)S * sizeof *src);
    const cg_sample_config cfg = {.temperature = 1e4, .top_k = 0, .top_p = 1};
    for (int cache = 0; cache < 2; cache++) {
        cg_rng r[N];
        for (int i = 0; i < N; i++)
            r[i] = cg_rng_new(7 + (uint64_t)i);
        ck_assert_msg(
            cg_sample_decode(g_model, src, N, S, STEPS, NULL, &cfg, r, out, lens, cache == 1), "%s",
            cg_last_error());
        int64_t drawn = 0;
        for (int i = 0; i < N; i++)
            for (int64_t j = 0; j < lens[i]; j++, drawn++)
                ck_assert_msg(out[i * STEPS + j] != CG_PAD && out[i * STEPS + j] != CG_BOS &&
                                  out[i * STEPS + j] != CG_UNK,
                              "cache %d: sentence %d drew %lld (PAD, BOS or UNK) at step %lld",
                              cache, i, (long long)out[i * STEPS + j], (long long)j);
        ck_assert_int_gt(drawn, 100);
    }
    free(ids);
}
END_TEST

/* models/seq2seq/translate.h over the overfit model: many sentences translated and
 * scored, the losses, the attention pictures. */
START_TEST(test_translate_many)
{
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_tokenizer *tok = cg_pairs_train_tokenizer(&g_pairs, all, NPAIRS, CG_TOK_CHAR, 0);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(cg_tokenizer_vocab_size(tok), cg_pair_vocab_size(&g_vocab));
    double bleu, chrf;
    char **h = NULL;
    ck_assert(cg_translate_score(g_model, tok, &g_pairs, all, NPAIRS, 1, 0.6, true, NULL, &bleu,
                                 &chrf, &h));
    for (int i = 0; i < NPAIRS; i++)
        ck_assert_str_eq(h[i], TGT[i]);
    ck_assert(bleu >= 0); /* no 4-grams in sentences this short: 0 */
    ck_assert_double_eq_tol(chrf, 100.0, 1e-6);
    cg_strings_free(h, NPAIRS);
    /* beam search of each sentence = cg_beam_search; the echo gets each line */
    cg_sources s;
    ck_assert(cg_sources_encode(tok, PROBES, 10, 64, &s));
    FILE *echo = tmpfile();
    ck_assert_ptr_nonnull(echo);
    h = cg_translate_all(g_model, tok, &s, 3, 0.6, true, NULL, echo);
    ck_assert_ptr_nonnull(h);
    rewind(echo);
    int64_t n = 0;
    char **lines = cg_read_lines(echo, "echo", &n, NULL);
    fclose(echo);
    ck_assert_int_eq(n, 10);
    for (int k = 0; k < 10; k++) {
        int64_t S, bl, *b = NULL, *ids = src_ids(PROBES[k], &S);
        ck_assert(cg_beam_search(g_model, ids, S, 3, 0.6, S - 1 + 50, &b, &bl, NULL, NULL, true));
        char *want = cg_pair_vocab_decode(&g_vocab, b, bl);
        ck_assert_str_eq(h[k], want);
        ck_assert_str_eq(lines[k], want);
        free(want);
        free(b);
        free(ids);
    }
    cg_strings_free(lines, n);
    cg_strings_free(h, 10);
    cg_sources_free(&s);
    ck_assert(!cg_sources_encode(tok, PROBES, 10, 5, &s)); /* "hello." + EOS > 5 */
    ck_assert_str_eq(cg_last_error(), "sentence 1 has 6 tokens; the model takes at most 4");
    ck_assert(!cg_sources_encode(tok, PROBES, 1, 6, &s)); /* the boundary: 6 + EOS > 6 */
    ck_assert_str_eq(cg_last_error(), "sentence 1 has 6 tokens; the model takes at most 5");
    ck_assert(cg_sources_encode(tok, PROBES, 1, 7, &s) && s.n == 1 && s.len[0] == 6);
    cg_sources_free(&s);

    /* losses: no label smoothing, so both are the cross-entropy; a wrong
     * source costs more */
    cg_batches bs;
    double ls, nll, ntok, wrong;
    ck_assert(cg_make_batches(&g_pairs, NULL, NPAIRS, 20, &bs));
    ck_assert(cg_seq2seq_valid_loss(g_model, &g_pairs, &bs, tok, &ls, &nll, &ntok));
    ck_assert_double_eq_tol(ls, nll, 1e-6);
    double want_tok = 0;
    for (int i = 0; i < NPAIRS; i++)
        want_tok += g_pairs.items[i].tgt_len + 1;
    ck_assert_double_eq(ntok, want_tok);
    ck_assert(cg_seq2seq_wrong_source_nll(g_model, &g_pairs, all, NPAIRS, 20, tok, &wrong));
    ck_assert(wrong > nll + 1.0);
    cg_batches_free(&bs);
    cg_module_train(CG_MODULE(g_model), false);

    /* the attention pictures; a bad target is refused */
    char dir[PATH_MAX];
    cg_test_mkdtemp(dir, sizeof dir, "cg_test_attn_");
    FILE *list = tmpfile();
    ck_assert(cg_seq2seq_attention_of_text(g_model, tok, "a cat", NULL, "--target", true, dir, list,
                                           NULL));
    rewind(list);
    lines = cg_read_lines(list, "list", &n, NULL);
    fclose(list);
    ck_assert_int_eq(n, 3);
    struct stat st;
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(stat(lines[k], &st), 0);
    ck_assert_ptr_nonnull(strstr(lines[2], "cross.png"));
    cg_strings_free(lines, n);
    ck_assert(!cg_seq2seq_attention_of_text(g_model, tok, "a cat", "\xff", "--target", true, dir,
                                            NULL, NULL));
    ck_assert_str_eq(cg_last_error(), "--target is not valid UTF-8");
    cg_test_rm_tree(dir);
    cg_tokenizer_free(tok);
}
END_TEST

/* A signal the trainer takes (Ctrl-C, SIGTERM, mpirun's SIGUSR1) during
 * train --eval-bleu's decoding cuts it short, as it cuts the validation
 * loss: "interrupted" before the next chunk of sentences (greedy) or the
 * next sentence (beam), so the evaluation is left out and the run saves at
 * once rather than after decoding every pair; the model left in its mode.
 * Released (the final evaluation, the translate and eval commands), it
 * decodes. */
START_TEST(test_translate_interrupted)
{
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_tokenizer *tok = cg_pairs_train_tokenizer(&g_pairs, all, NPAIRS, CG_TOK_CHAR, 0);
    ck_assert_ptr_nonnull(tok);
    cg_module_train(CG_MODULE(g_model), true);
    double bleu, chrf;
    char why[2][128];
    bool done[2];
    cg_train_catch_signals();
    raise(SIGUSR1); /* what mpirun forwards to every rank */
    for (int b = 0; b < 2; b++) {
        done[b] = cg_translate_score(g_model, tok, &g_pairs, all, NPAIRS, b ? 3 : 1, 0.6, true,
                                     NULL, &bleu, &chrf, NULL);
        snprintf(why[b], sizeof why[b], "%s", cg_last_error());
    }
    cg_train_release_signals(); /* before any assertion: the next tests decode */
    for (int b = 0; b < 2; b++)
        ck_assert_msg(!done[b] && !strcmp(why[b], "interrupted"), "beam %d: %s", b ? 3 : 1,
                      done[b] ? "decoded every pair" : why[b]);
    ck_assert(g_model->base.training);
    ck_assert_msg(cg_translate_score(g_model, tok, &g_pairs, all, NPAIRS, 1, 0.6, true, NULL, &bleu,
                                     &chrf, NULL),
                  "%s", cg_last_error());
    ck_assert_double_eq_tol(chrf, 100.0, 1e-6);
    cg_module_train(CG_MODULE(g_model), false);
    cg_tokenizer_free(tok);
}
END_TEST

/* cg_translate_test's report: the greedy and beam scores are those of
 * cg_translate_score at beam 1 and at the beam asked for, and the first
 * `examples` pairs are printed as SRC, REF (the pair's target), GRDY and
 * BEAM lines. The references here are the targets with " und so" added, so
 * that no translation is its reference (chrF weighs recall over precision:
 * hypothesis and reference swapped score otherwise, checked below); the
 * probes outside the training pairs make beam 3 part from greedy decoding
 * for at least one of them (checked too). */
START_TEST(test_translate_test_report)
{
    enum { N = 10 };
    char text[1024] = "";
    for (int i = 0; i < N; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s\t%s und so\n", PROBES[i],
                 TGT[i % NPAIRS]);
    cg_pairs p;
    ck_assert(cg_pairs_parse(text, strlen(text), "report", &p));
    int64_t idx[N];
    for (int i = 0; i < N; i++)
        idx[i] = i;
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_tokenizer *tok = cg_pairs_train_tokenizer(&g_pairs, all, NPAIRS, CG_TOK_CHAR, 0);
    ck_assert_ptr_nonnull(tok);
    double bleu[2], chrf[2];
    char **h[2] = {NULL, NULL};
    const char *refs[N];
    for (int i = 0; i < N; i++)
        refs[i] = p.items[i].tgt;
    for (int b = 0; b < 2; b++) {
        ck_assert(cg_translate_score(g_model, tok, &p, idx, N, b ? 3 : 1, 0.6, true, NULL, &bleu[b],
                                     &chrf[b], &h[b]));
        ck_assert_double_eq_tol(chrf[b], cg_chrf(N, (const char *const *)h[b], refs), 1e-9);
        ck_assert(fabs(chrf[b] - cg_chrf(N, refs, (const char *const *)h[b])) > 1e-3);
    }
    int differ = 0;
    for (int i = 0; i < N; i++)
        differ += strcmp(h[0][i], h[1][i]) != 0;
    ck_assert_msg(differ > 0 && fabs(chrf[0] - chrf[1]) > 1e-6, "greedy and beam agree");
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    cg_translate_test_result res;
    ck_assert(cg_translate_test(g_model, tok, &p, idx, N, 3, 0.6, N - 1, f, &res));
    ck_assert_double_eq_tol(res.bleu_greedy, bleu[0], 1e-9);
    ck_assert_double_eq_tol(res.chrf_greedy, chrf[0], 1e-9);
    ck_assert_double_eq_tol(res.bleu_beam, bleu[1], 1e-9);
    ck_assert_double_eq_tol(res.chrf_beam, chrf[1], 1e-9);
    char want[4096] = "", got[4096] = "";
    for (int i = 0; i < N - 1; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want),
                 "SRC  %s\nREF  %s\nGRDY %s\nBEAM %s\n\n", PROBES[i], refs[i], h[0][i], h[1][i]);
    rewind(f);
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    ck_assert_str_eq(got, want);
    cg_strings_free(h[0], N);
    cg_strings_free(h[1], N);
    cg_pairs_free(&p);
    cg_tokenizer_free(tok);
}
END_TEST

/* cg_beam_search_nbest (translate --nbest, fairseq's): the first is
 * cg_beam_search's answer, bit for bit; the list is best first, of
 * distinct hypotheses, each scored as rescoring it gives; the cached
 * search keeps the recomputing one's list; nbest over the beam refused. */
START_TEST(test_beam_nbest)
{
    for (size_t k = 0; k < sizeof PROBES / sizeof PROBES[0]; k++) {
        int64_t S, *b = NULL, bl;
        double bscore;
        bool fin;
        int64_t *ids = src_ids(PROBES[k], &S);
        cg_hypothesis h[4], hr[4];
        int n = 0, nr = 0;
        ck_assert(cg_beam_search(g_model, ids, S, 4, 0.6, 40, &b, &bl, &bscore, &fin, true));
        ck_assert(cg_beam_search_nbest(g_model, ids, S, 4, 0.6, 40, NULL, true, 4, h, &n));
        ck_assert(cg_beam_search_nbest(g_model, ids, S, 4, 0.6, 40, NULL, false, 4, hr, &nr));
        ck_assert_msg(n == 4 && nr == 4, "'%s': %d and %d hypotheses", PROBES[k], n, nr);
        ck_assert(h[0].len == bl && h[0].score == bscore && h[0].finished == fin);
        ck_assert(bl == 0 || memcmp(h[0].ids, b, (size_t)bl * sizeof *b) == 0);
        for (int i = 0; i < n; i++) {
            double again =
                cg_seq2seq_score(g_model, ids, S, h[i].ids, h[i].len, h[i].finished, 0.6);
            ck_assert_double_eq_tol(again, h[i].score, 1e-3);
            ck_assert(i == 0 || h[i].score <= h[i - 1].score);
            ck_assert(hr[i].len == h[i].len && hr[i].finished == h[i].finished);
            ck_assert(memcmp(hr[i].ids, h[i].ids, (size_t)h[i].len * sizeof *b) == 0);
            ck_assert_double_eq_tol(hr[i].score, h[i].score, 1e-4);
            for (int j = 0; j < i; j++)
                ck_assert(h[j].len != h[i].len ||
                          memcmp(h[j].ids, h[i].ids, (size_t)h[i].len * sizeof *b) != 0);
        }
        cg_hypotheses_free(h, n);
        cg_hypotheses_free(hr, nr);
        free(b);
        free(ids);
    }
    int64_t S, *ids = src_ids("a cat", &S);
    cg_hypothesis h[3];
    int n = 7;
    CG_ASSERT_FAILS(cg_beam_search_nbest(g_model, ids, S, 2, 0.6, 40, NULL, true, 3, h, &n),
                    "nbest=3");
    CG_ASSERT_FAILS(cg_beam_search_nbest(g_model, ids, S, 2, 0.6, 40, NULL, true, 0, h, &n),
                    "nbest=0");
    free(ids);
}
END_TEST

START_TEST(test_beam_not_worse_than_greedy)
{
    int n_unfinished = 0;
    for (size_t k = 0; k < sizeof PROBES / sizeof PROBES[0]; k++) {
        for (int beam = 2; beam <= 5; beam += 3) {
            int64_t S, L, out[64], *b = NULL, bl;
            double bscore;
            bool fin;
            int64_t *ids = src_ids(PROBES[k], &S);
            ck_assert(cg_greedy_decode(g_model, ids, 1, S, 40, out, &L, true));
            ck_assert(cg_beam_search(g_model, ids, S, beam, 0.6, 40, &b, &bl, &bscore, &fin, true));
            double gscore = cg_seq2seq_score(g_model, ids, S, out, L, L < 40, 0.6);
            double again = cg_seq2seq_score(g_model, ids, S, b, bl, fin, 0.6);
            ck_assert(isfinite(gscore) && isfinite(bscore));
            /* the beam's own score is what rescoring its output gives */
            ck_assert_double_eq_tol(again, bscore, 1e-3);
            /* The reference stops once `beam` hypotheses have finished and then
             * ranks the live ones too, scored without EOS; such an unfinished
             * winner can score below greedy's finished output (seen here:
             * "good day", beam 5, the same characters as greedy). The
             * property holds for finished winners. */
            if (fin)
                ck_assert_msg(bscore >= gscore - 1e-4, "'%s' beam %d: %f < greedy %f", PROBES[k],
                              beam, bscore, gscore);
            else
                n_unfinished++;
            free(b);
            free(ids);
        }
    }
    ck_assert_int_le(n_unfinished, 15); /* most winners are finished */
    ck_assert_double_eq_tol(cg_length_penalty(1, 0.6), 1.0, 1e-12);
    ck_assert_double_eq_tol(cg_length_penalty(7, 1.0), 2.0, 1e-12);
}
END_TEST

/* Decoding with the key/value cache gives the logits of a full recompute of
 * the prefix (within 1e-5) at every step, through a reorder of the rows as
 * beam search does; greedy decoding and beam search give the same tokens
 * and scores with and without the cache. */
START_TEST(test_cache_matches_recompute)
{
    int64_t S = 0, *pids[NPAIRS], plen[NPAIRS];
    for (int i = 0; i < NPAIRS; i++) {
        pids[i] = src_ids(PROBES[i + 3], &plen[i]);
        S = plen[i] > S ? plen[i] : S;
    }
    int64_t *src = calloc((size_t)(NPAIRS * S), sizeof *src);
    for (int i = 0; i < NPAIRS; i++) {
        int64_t n = plen[i], *ids = pids[i];
        memcpy(src + i * S, ids, (size_t)n * sizeof *ids);
        free(ids);
    }
    cg_seq2seq_memory mem = {0}, sel = {0};
    ck_assert(cg_seq2seq_encode(g_model, src, NPAIRS, S, &mem));
    cg_kv_cache *c = cg_seq2seq_kv_cache_new(g_model);
    ck_assert_ptr_nonnull(c);
    const int64_t V = g_model->cfg.vocab, TMAX = 12;
    int64_t B = NPAIRS, ys[NPAIRS * TMAX], prev[NPAIRS * TMAX], last[NPAIRS];
    for (int64_t b = 0; b < B; b++)
        ys[b * TMAX] = CG_BOS;
    const cg_seq2seq_memory *cur = &mem;
    for (int64_t T = 1; T < TMAX; T++) {
        for (int64_t b = 0; b < B; b++)
            last[b] = ys[b * TMAX + T - 1];
        cg_tensor *lc = cg_seq2seq_decode_step(g_model, last, B, &mem, c);
        ck_assert_msg(lc != NULL, "%s", cg_last_error());
        ck_assert_int_eq(cg_kv_cache_len(c), T);
        int64_t *flat = malloc((size_t)(B * T) * sizeof *flat);
        for (int64_t b = 0; b < B; b++)
            memcpy(flat + b * T, ys + b * TMAX, (size_t)T * sizeof *flat);
        cg_no_grad_begin();
        cg_tensor *lf = cg_seq2seq_decode(g_model, flat, B, T, cur);
        cg_no_grad_end();
        ck_assert_ptr_nonnull(lf);
        float *a = cg_test_values(lc), *f = cg_test_values(lf);
        for (int64_t b = 0; b < B; b++) {
            const float *fr = f + (b * T + T - 1) * V;
            CG_ASSERT_CLOSE(a + b * V, fr, V, 1e-5, 0.0);
            int64_t best = 0; /* the next token: the recompute's argmax */
            for (int64_t v = 1; v < V; v++)
                best = fr[v] > fr[best] ? v : best;
            ys[b * TMAX + T] = best == CG_EOS ? 3 + b % (V - 3) : best;
        }
        free(a), free(f), free(flat);
        cg_release_all(2, lc, lf);
        if (T == 4) { /* rows as beam search would: repeats and drops */
            const int64_t rows[4] = {2, 0, 0, 4};
            ck_assert(cg_kv_cache_reorder(c, cg_test_ids(4, rows)));
            ck_assert(cg_seq2seq_memory_select(&mem, rows, 4, &sel));
            cur = &sel;
            memcpy(prev, ys, sizeof ys);
            for (int64_t r = 0; r < 4; r++)
                memcpy(ys + r * TMAX, prev + rows[r] * TMAX, (size_t)TMAX * sizeof *ys);
            B = 4;
        }
    }
    cg_kv_cache_free(c);
    cg_seq2seq_memory_free(&mem);
    cg_seq2seq_memory_free(&sel);

    /* greedy (batched) and beam search: the same with and without the cache */
    int64_t out1[NPAIRS * 40], out2[NPAIRS * 40], l1[NPAIRS], l2[NPAIRS];
    ck_assert(cg_greedy_decode(g_model, src, NPAIRS, S, 40, out1, l1, true));
    ck_assert(cg_greedy_decode(g_model, src, NPAIRS, S, 40, out2, l2, false));
    ck_assert(memcmp(l1, l2, sizeof l1) == 0 && memcmp(out1, out2, sizeof out1) == 0);
    for (size_t k = 0; k < sizeof PROBES / sizeof PROBES[0]; k++)
        for (int beam = 2; beam <= 4; beam += 2) {
            int64_t Sk, *b1 = NULL, *b2 = NULL, bl1, bl2;
            double s1, s2;
            bool f1, f2;
            int64_t *ids = src_ids(PROBES[k], &Sk);
            ck_assert(cg_beam_search(g_model, ids, Sk, beam, 0.6, 40, &b1, &bl1, &s1, &f1, true));
            ck_assert(cg_beam_search(g_model, ids, Sk, beam, 0.6, 40, &b2, &bl2, &s2, &f2, false));
            ck_assert_int_eq(bl1, bl2);
            ck_assert(f1 == f2 && memcmp(b1, b2, (size_t)bl1 * sizeof *b1) == 0);
            ck_assert_double_eq_tol(s1, s2, 1e-5);
            free(b1), free(b2), free(ids);
        }
    free(src);
}
END_TEST

/* A decoded PAD is a masked key from then on, as in the reference's
 * decode (tgt_in == PAD): cached decoding, which cannot mask a cached key,
 * gives the tokens of the recompute for a model that emits PAD (random
 * weights of std 0.3, so that attention and PAD's logit matter; seed 5 emits
 * PAD in greedy and beam outputs). */
static bool has_pad(const int64_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == CG_PAD)
            return true;
    return false;
}

static cg_seq2seq *pad_model(void)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = 12, c.d = 32, c.H = 4, c.d_ff = 64, c.max_len = 40;
    cg_seq2seq *m = cg_seq2seq_new(&c, 5);
    cg_param_list pl = {0};
    ck_assert(m && cg_module_params(CG_MODULE(m), &pl));
    for (int i = 0; i < pl.n; i++) /* weights N(0, 0.3) */
        for (int64_t k = 0; pl.items[i].tensor->ndim == 2 && k < cg_numel(pl.items[i].tensor); k++)
            cg_data(pl.items[i].tensor)[k] *= 15.0f;
    cg_param_list_free(&pl);
    cg_module_train(CG_MODULE(m), false);
    return m;
}

START_TEST(test_decoded_pad_masked)
{
    cg_seq2seq *m = pad_model();
    enum { B = 6, S = 9, STEPS = 20 };
    int64_t src[B * S] = {0}, o1[B * STEPS], o2[B * STEPS], l1[B], l2[B];
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < b + 2; k++)
            src[b * S + k] = 3 + (b * 5 + k * 7) % 9;
        src[b * S + b + 2] = CG_EOS;
    }
    bool pads = false;
    ck_assert(cg_greedy_decode(m, src, B, S, STEPS, o1, l1, true));
    ck_assert(cg_greedy_decode(m, src, B, S, STEPS, o2, l2, false));
    ck_assert(memcmp(l1, l2, sizeof l1) == 0 && memcmp(o1, o2, sizeof o1) == 0);
    for (int b = 0; b < B; b++)
        for (int beam = 2; beam <= 8; beam++) {
            int64_t *b1 = NULL, *b2 = NULL, n1, n2;
            ck_assert(cg_beam_search(m, src + b * S, b + 3, beam, 0.0, STEPS, &b1, &n1, NULL, NULL,
                                     true));
            ck_assert(cg_beam_search(m, src + b * S, b + 3, beam, 0.0, STEPS, &b2, &n2, NULL, NULL,
                                     false));
            ck_assert_msg(n1 == n2 && memcmp(b1, b2, (size_t)n1 * sizeof *b1) == 0,
                          "source %d beam %d: cached and recomputed beams differ", b, beam);
            pads = pads || has_pad(b2, n2);
            free(b1), free(b2);
        }
    ck_assert_msg(pads, "no beam emitted PAD: the test does not test it");
    cg_seq2seq_free(m);
}
END_TEST

/* A row that ends (EOS) while the cache holds the batch, and then, in a
 * later step where no row ends, another row's PAD: the cache had only been
 * reordered when the first row left, and decoding goes on without it from
 * the memory, which must then be narrowed to the rows still alive. The
 * overfitted model never emits PAD, so PAD's row of the tied table is made
 * 1.01 times a token's: PAD then takes that token's place where its logit
 * is positive. Tokens are tried until two probes, each decoded alone, give
 * such a pair: the first ends before any PAD, the second emits its first
 * PAD after that step and goes on. The pair decoded together gives the
 * same, with the cache and without. */
static int64_t first_pad(const int64_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == CG_PAD)
            return i;
    return -1;
}

START_TEST(test_greedy_pad_after_a_row_ended)
{
    enum { N = sizeof PROBES / sizeof PROBES[0], S = 12, STEPS = 30 };
    float *e = cg_data(g_model->emb->weight);
    const int64_t V = g_model->cfg.vocab, d = g_model->cfg.d;
    float *pad_row = malloc((size_t)d * sizeof *pad_row);
    memcpy(pad_row, e + CG_PAD * d, (size_t)d * sizeof *e);
    int64_t src[N][S] = {{0}}, out[N][STEPS], len[N];
    for (int n = 0; n < N; n++) {
        int64_t k, *ids = src_ids(PROBES[n], &k);
        ck_assert(k <= S);
        memcpy(src[n], ids, (size_t)k * sizeof *ids);
        free(ids);
    }
    int pairs = 0;
    for (int64_t x = 3; x < V && pairs == 0; x++) {
        for (int64_t i = 0; i < d; i++)
            e[CG_PAD * d + i] = 1.01f * e[x * d + i];
        cg_tensor_modified(g_model->emb->weight);
        for (int n = 0; n < N; n++)
            ck_assert(cg_greedy_decode(g_model, src[n], 1, S, STEPS, out[n], &len[n], false));
        for (int a = 0; a < N; a++)
            for (int b = 0; b < N; b++) {
                int64_t pb = first_pad(out[b], len[b]);
                if (a == b || len[a] >= STEPS || first_pad(out[a], len[a]) >= 0 || pb <= len[a] ||
                    pb >= STEPS - 1)
                    continue;
                int64_t two[2 * S], o[2 * STEPS], l[2];
                memcpy(two, src[a], sizeof src[a]);
                memcpy(two + S, src[b], sizeof src[b]);
                for (int cache = 0; cache < 2; cache++) {
                    ck_assert(cg_greedy_decode(g_model, two, 2, S, STEPS, o, l, cache));
                    ck_assert_msg(l[0] == len[a] && l[1] == len[b] &&
                                      memcmp(o, out[a], sizeof out[a]) == 0 &&
                                      memcmp(o + STEPS, out[b], sizeof out[b]) == 0,
                                  "probes %d and %d (PAD as token %lld, cache %d): the pair "
                                  "decodes differently",
                                  a, b, (long long)x, cache);
                }
                pairs++;
            }
    }
    memcpy(e + CG_PAD * d, pad_row, (size_t)d * sizeof *e);
    cg_tensor_modified(g_model->emb->weight);
    free(pad_row);
    ck_assert_msg(pairs > 0, "no probe ends before another emits PAD: the test does not test it");
}
END_TEST

/* Exact ties, decoded as the reference's stable sort and max() take them:
 * with a zero embedding table the tied head gives every token the logit 0,
 * so every candidate of a step has the same score. Each step's top tokens
 * are the lowest ids (the first among equals), candidates keep their order
 * of generation (hypothesis, then token), and the first of the best
 * hypotheses wins: all PAD at beam 2 (whose tokens are PAD and BOS). Greedy
 * decoding takes the first argmax too. */
START_TEST(test_decode_ties)
{
    cg_seq2seq *m = pad_model();
    cg_tensor *w = m->emb->weight;
    memset(cg_data(w), 0, (size_t)cg_numel(w) * sizeof(float));
    const int64_t src[3] = {5, 6, CG_EOS};
    int64_t out[6], len;
    ck_assert(cg_greedy_decode(m, src, 1, 3, 6, out, &len, true));
    ck_assert_int_eq(len, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(out[i], CG_PAD);
    for (int cache = 0; cache < 2; cache++) {
        /* beam 2: tokens PAD and BOS, never EOS; beam 3: EOS at once wins */
        int64_t *b = NULL, n = 0;
        double score;
        bool fin = true;
        ck_assert(cg_beam_search(m, src, 3, 2, 0.6, 5, &b, &n, &score, &fin, cache));
        ck_assert_msg(n == 5 && !fin, "%lld ids, finished %d", (long long)n, fin);
        for (int i = 0; i < 5; i++)
            ck_assert_msg(b[i] == CG_PAD, "id %d is %lld", i, (long long)b[i]);
        ck_assert_double_eq_tol(score, 5 * -log(12.0) / cg_length_penalty(5, 0.6), 1e-5);
        free(b);
        ck_assert(cg_beam_search(m, src, 3, 3, 0.6, 5, &b, &n, &score, &fin, cache));
        ck_assert(n == 0 && fin);
        ck_assert_double_eq_tol(score, -log(12.0), 1e-5);
        free(b);
    }
    cg_seq2seq_free(m);
}
END_TEST

/* The reference's beam_search (train_seq2seq.py), written out over full
 * recomputes with log-softmax in double: each live hypothesis expanded by
 * its top `beam` tokens (the lower id first among equals), the candidates
 * taken best first until `beam` continue, one ending in EOS finished and
 * scored sum / ((5 + len) / 6)^alpha (len counting EOS), a stop once `beam`
 * are finished, then the live ones scored without EOS, the first best
 * returned. *gap: the smallest margin a decision of the search rested on
 * (a top-k boundary, two candidates' order, the best against the next), so
 * that a caller can skip a search float noise could turn. */
enum { OB_MAX = 8, OB_W = 24 };
typedef struct {
    int64_t ids[OB_W];
    int64_t n;
    double s;
    bool fin;
} ob_hyp;

static void ob_logp(cg_seq2seq *m, const int64_t *src, int64_t S, const int64_t *ys, int64_t T,
                    double *lp)
{
    const int64_t V = m->cfg.vocab;
    cg_no_grad_begin();
    cg_tensor *l = cg_seq2seq_forward(m, src, 1, S, ys, T);
    cg_tensor *c = l ? cg_contiguous(l) : NULL;
    cg_no_grad_end();
    ck_assert_ptr_nonnull(c);
    const float *d = cg_data(c) + (T - 1) * V;
    double mx = d[0], sum = 0;
    for (int64_t v = 1; v < V; v++)
        mx = d[v] > mx ? d[v] : mx;
    for (int64_t v = 0; v < V; v++)
        sum += exp((double)d[v] - mx);
    for (int64_t v = 0; v < V; v++)
        lp[v] = (double)d[v] - mx - log(sum);
    cg_release_all(2, l, c);
}

static ob_hyp ob_beam(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                      int64_t steps, double *gap, int *n_done)
{
    const int64_t V = m->cfg.vocab;
    ob_hyp live[OB_MAX], next[OB_MAX], done[OB_MAX * OB_W + OB_MAX];
    ob_hyp cand[OB_MAX * OB_MAX];
    int nl = 1, nd = 0;
    double lp[64];
    ck_assert(beam <= OB_MAX && V <= 64 && steps < OB_W);
    live[0] = (ob_hyp){.ids = {CG_BOS}, .n = 1, .s = 0.0};
    *gap = INFINITY;
    for (int64_t step = 0; step < steps; step++) {
        int nc = 0;
        for (int h = 0; h < nl; h++) {
            ob_logp(m, src, S, live[h].ids, live[h].n, lp);
            bool used[64] = {false};
            for (int k = 0; k < beam; k++) { /* the k-th best token, lower id first */
                int64_t best = -1;
                for (int64_t v = 0; v < V; v++)
                    if (!used[v] && (best < 0 || lp[v] > lp[best]))
                        best = v;
                used[best] = true;
                for (int64_t v = 0; v < V; v++) /* the margin to the tokens left out */
                    if (!used[v] && k == beam - 1)
                        *gap = fmin(*gap, lp[best] - lp[v]);
                cand[nc] = live[h];
                cand[nc].ids[cand[nc].n++] = best;
                cand[nc++].s = live[h].s + lp[best];
            }
        }
        for (int i = 1; i < nc; i++) /* stable: by score, then generation order */
            for (int j = i; j > 0 && cand[j].s > cand[j - 1].s; j--) {
                ob_hyp t = cand[j];
                cand[j] = cand[j - 1];
                cand[j - 1] = t;
            }
        int nn = 0;
        for (int c = 0; c < nc; c++) {
            if (c + 1 < nc)
                *gap = fmin(*gap, cand[c].s - cand[c + 1].s);
            if (cand[c].ids[cand[c].n - 1] == CG_EOS) {
                done[nd] = cand[c];
                done[nd].n--;
                done[nd].s = cand[c].s / pow((5.0 + (double)cand[c].n - 1) / 6.0, alpha);
                done[nd++].fin = true;
            } else {
                next[nn++] = cand[c];
            }
            if (nn == beam)
                break;
        }
        memcpy(live, next, (size_t)nn * sizeof *live);
        nl = nn;
        if (n_done) /* the hypotheses finished after each step */
            n_done[step] = nd;
        if (nd >= beam || nl == 0)
            break;
    }
    for (int h = 0; h < nl; h++) {
        done[nd] = live[h];
        done[nd].s = live[h].s / pow((5.0 + (double)live[h].n - 1) / 6.0, alpha);
        done[nd++].fin = false;
    }
    int best = 0;
    for (int i = 1; i < nd; i++)
        if (done[i].s > done[best].s)
            best = i;
    for (int i = 0; i < nd; i++)
        if (i != best)
            *gap = fmin(*gap, done[best].s - done[i].s);
    /* without BOS */
    memmove(done[best].ids, done[best].ids + 1, (size_t)(done[best].n - 1) * sizeof(int64_t));
    done[best].n--;
    return done[best];
}

/* cgrad's beam search against the reference's written out above, on a
 * model whose searches often part from greedy decoding's: beams 2 to 6,
 * alpha 0, 0.6 and 2, cached or not; the same ids, score and finished flag
 * wherever the search's decisions are clear of float noise. The sources'
 * tokens repeat with s modulo 9: all nine are searched (the ninth is the
 * one whose beam of 6 parts from a search that expands each hypothesis by
 * beam + 1 tokens, which the first eight do not show). */
START_TEST(test_beam_matches_reference_search)
{
    cg_seq2seq *m = pad_model();
    cg_param_list pl = {0}; /* weights N(0, 0.1), EOS's row N(0, 2): a flatter */
    ck_assert(cg_module_params(CG_MODULE(m), &pl)); /* model, which often ends */
    for (int i = 0; i < pl.n; i++)
        for (int64_t k = 0; pl.items[i].tensor->ndim == 2 && k < cg_numel(pl.items[i].tensor); k++)
            cg_data(pl.items[i].tensor)[k] /= 3.0f;
    cg_param_list_free(&pl);
    for (int64_t k = 0; k < m->cfg.d; k++)
        cg_data(m->emb->weight)[CG_EOS * m->cfg.d + k] *= 20.0f;
    enum { S = 5, STEPS = 12 };
    int compared = 0, unclear = 0, not_greedy = 0, unfinished = 0;
    for (int s = 0; s < 9; s++) {
        int64_t src[S];
        for (int k = 0; k < S - 1; k++)
            src[k] = 3 + (s * 5 + k * 7 + s * k) % 9;
        src[S - 1] = CG_EOS;
        int64_t g[STEPS], gl;
        ck_assert(cg_greedy_decode(m, src, 1, S, STEPS, g, &gl, true));
        for (int beam = 2; beam <= 6; beam++)
            for (int a = 0; a < 3; a++) {
                const double alpha = a == 0 ? 0.0 : a == 1 ? 0.6 : 2.0;
                double gap;
                ob_hyp want = ob_beam(m, src, S, beam, alpha, STEPS, &gap, NULL);
                if (gap < 1e-3) {
                    unclear++;
                    continue;
                }
                compared++;
                not_greedy += want.n != gl || memcmp(want.ids, g, (size_t)gl * sizeof *g) != 0;
                unfinished += !want.fin;
                for (int cache = 0; cache < 2; cache++) {
                    int64_t *b = NULL, n = 0;
                    double score;
                    bool fin;
                    ck_assert(
                        cg_beam_search(m, src, S, beam, alpha, STEPS, &b, &n, &score, &fin, cache));
                    ck_assert_msg(n == want.n && memcmp(b, want.ids, (size_t)n * sizeof *b) == 0 &&
                                      fin == want.fin,
                                  "source %d beam %d alpha %g cache %d: %lld ids (finished %d), "
                                  "the reference's %lld (finished %d)",
                                  s, beam, alpha, cache, (long long)n, fin, (long long)want.n,
                                  want.fin);
                    ck_assert_double_eq_tol(score, want.s, 1e-4);
                    free(b);
                }
            }
    }
    /* the searches mostly decide clearly, part from greedy's and end both ways */
    ck_assert_msg(compared >= 100 && not_greedy >= 40 && unfinished >= 20 &&
                      compared - unfinished >= 20,
                  "compared %d (unclear %d), not greedy's %d, unfinished %d", compared, unclear,
                  not_greedy, unfinished);
    cg_seq2seq_free(m);
}
END_TEST

/* A search that stops once beam - 1 hypotheses have finished loses the one
 * that finishes next and wins. With alpha 0, beam 3 and tokens A B C D (3 to
 * 6): from BOS, A B C are the three best; A and B then end (p(EOS) about
 * 0.3), C goes on to D (0.9) and D ends (0.9), so that at the second step A
 * EOS and B EOS finish (two of three) while C D lives, and C D EOS (about
 * 0.20) beats A EOS (0.08) at the third. The other entries are small and
 * distinct, so that no decision of the search is near a tie. The rig is
 * checked from the model's own log-probabilities: the reference search has
 * two finished after the second step, none after the first, and returns C D
 * finished. */
START_TEST(test_beam_finishes_past_beam_minus_one)
{
    enum { A = 3, B = 4, C = 5, D = 6 };
    double z[TZ_V][TZ_V];
    for (int u = 0; u < TZ_V; u++) {
        for (int v = 0; v < TZ_V; v++) /* distinct within a row: 5u + 3v mod 11 */
            z[u][v] = 0.02 * ((5 * u + 3 * v) % 11);
        z[u][CG_PAD] = z[u][CG_BOS] = -6.0;
        z[u][CG_EOS] += 2.0; /* every other token: EOS first */
    }
    z[CG_BOS][A] = 2.0, z[CG_BOS][B] = 1.9, z[CG_BOS][C] = 1.8, z[CG_BOS][CG_EOS] = -2.0;
    z[A][CG_EOS] = z[B][CG_EOS] = 1.0;
    z[C][D] = 4.0, z[C][CG_EOS] = -1.0;
    z[D][CG_EOS] = 4.0;
    enum { S = 4, STEPS = 8 };
    const int64_t src[S] = {7, 8, 9, CG_EOS};
    for (int nf = 0; nf < 2; nf++) {
        cg_seq2seq *m = table_model(z, nf);
        double lp[TZ_V], gap;
        const int64_t ys[3] = {CG_BOS, C, D};
        for (int64_t T = 1; T <= 3; T++) { /* the table, read back at each position */
            ob_logp(m, src, S, ys, T, lp);
            const int64_t u = ys[T - 1];
            for (int v = 1; v < TZ_V; v++)
                ck_assert_double_eq_tol(lp[v] - lp[0], z[u][v] - z[u][0], 1e-2);
        }
        int n_done[STEPS] = {0};
        ob_hyp want = ob_beam(m, src, S, 3, 0.0, STEPS, &gap, n_done);
        ck_assert_msg(gap >= 1e-2, "norm_first %d: a decision with a margin of %g", nf, gap);
        ck_assert_msg(n_done[0] == 0 && n_done[1] == 2 && n_done[2] >= 3,
                      "norm_first %d: finished %d, %d, %d after the first steps", nf, n_done[0],
                      n_done[1], n_done[2]);
        ck_assert(want.fin && want.n == 2 && want.ids[0] == C && want.ids[1] == D);
        /* C D scored as the sum of its three log-probabilities */
        double sum = 0;
        for (int64_t T = 1; T <= 3; T++) {
            const int64_t next[3] = {C, D, CG_EOS};
            ob_logp(m, src, S, ys, T, lp);
            sum += lp[next[T - 1]];
        }
        ck_assert_double_eq_tol(want.s, sum, 1e-9);
        for (int cache = 0; cache < 2; cache++) {
            int64_t *b = NULL, n = 0;
            double score;
            bool fin;
            ck_assert(cg_beam_search(m, src, S, 3, 0.0, STEPS, &b, &n, &score, &fin, cache));
            ck_assert_msg(n == 2 && b[0] == C && b[1] == D && fin,
                          "norm_first %d cache %d: %lld ids (finished %d), not C D finished", nf,
                          cache, (long long)n, fin);
            ck_assert_double_eq_tol(score, want.s, 1e-4);
            free(b);
        }
        cg_seq2seq_free(m);
    }
}
END_TEST

/* cg_translate_score's BLEU is the translations' against the references,
 * not the other way: BLEU is not symmetric (the brevity penalty, and counts
 * clipped by the reference's). table_model with a character tokenizer of
 * six characters (ids 4 to 9 in code point order: ' ' , . a b c) chains
 * BOS a ' ' b , c . EOS whatever the source, so every translation is
 * "a b,c.", five 13a tokens ("a b , c ."); the references are "a b,c. b"
 * and "a b,c.". Every n-gram of the translations matches, so BLEU is the
 * brevity penalty alone, 100 exp(1 - 11 / 10) (sacreBLEU's value); the
 * other way round it is 100 (10/11 8/9 6/7 4/5)^(1/4), about 86.3. The rig
 * is checked: the ids the tokenizer gives, the tokenisation, and each
 * translation (greedy and beam 3) the designed sentence. */
START_TEST(test_translate_score_bleu_order)
{
    const char *train[] = {"a b,c."}, *hyp = "a b,c.";
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(cg_tokenizer_vocab_size(tok), TZ_V);
    int64_t n = 0, *ids = cg_tokenizer_encode(tok, hyp, &n, NULL);
    const int64_t chain[6] = {7, 4, 8, 5, 9, 6};
    ck_assert(ids && n == 6 && memcmp(ids, chain, sizeof chain) == 0);
    free(ids);
    double z[TZ_V][TZ_V] = {{0}};
    for (int u = 0; u < TZ_V; u++)
        z[u][CG_PAD] = z[u][CG_BOS] = -6.0;
    z[CG_BOS][chain[0]] = 5.0;
    for (int i = 0; i < 6; i++)
        z[chain[i]][i + 1 < 6 ? chain[i + 1] : CG_EOS] = 5.0;
    cg_seq2seq *m = table_model(z, false);
    char text[] = "abc\ta b,c. b\ncab\ta b,c.\n";
    cg_pairs p;
    ck_assert(cg_pairs_parse(text, strlen(text), "bleu", &p));
    const int64_t idx[2] = {0, 1};
    const char *refs[2] = {p.items[0].tgt, p.items[1].tgt};
    char *t13 = cg_tokenize_13a(hyp);
    ck_assert_ptr_nonnull(t13);
    ck_assert_str_eq(t13, "a b , c .");
    free(t13);
    const double want = 100.0 * exp(1.0 - 11.0 / 10.0);
    for (int beam = 1; beam <= 3; beam += 2) {
        double bleu, chrf;
        char **h = NULL;
        ck_assert_msg(
            cg_translate_score(m, tok, &p, idx, 2, beam, 0.6, true, NULL, &bleu, &chrf, &h), "%s",
            cg_last_error());
        for (int i = 0; i < 2; i++)
            ck_assert_str_eq(h[i], hyp);
        ck_assert_double_eq_tol(cg_bleu(2, (const char *const *)h, refs), want, 1e-9);
        ck_assert_double_eq_tol(cg_bleu(2, refs, (const char *const *)h),
                                100.0 * pow(10.0 / 11 * 8.0 / 9 * 6.0 / 7 * 4.0 / 5, 0.25), 1e-9);
        ck_assert_msg(fabs(bleu - want) < 1e-9, "beam %d: BLEU %.6f, not %.6f", beam, bleu, want);
        cg_strings_free(h, 2);
    }
    cg_pairs_free(&p);
    cg_seq2seq_free(m);
    cg_tokenizer_free(tok);
}
END_TEST

/* A translator that never ends a sentence: the specials' rows of the tied
 * embedding are zero (logit 0) and the characters' rows come in pairs e, -e
 * (one of each pair has a logit >= 0 for any state), so greedy decoding and
 * a beam of 2 (the top two tokens are characters) never emit EOS. With
 * max_len 64, a translation has the reference's length limit: the source's
 * tokens + 50, greedy or beam, whatever the longest source of the chunk. */
static cg_seq2seq *never_eos_model(int64_t V, int64_t max_len)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = V, c.d = 16, c.H = 2, c.d_ff = 32, c.max_len = max_len;
    cg_seq2seq *m = cg_seq2seq_new(&c, 3);
    ck_assert_ptr_nonnull(m);
    float *e = cg_data(m->emb->weight);
    memset(e, 0, 4 * 16 * sizeof *e);
    for (int64_t r = 5; r < V; r += 2)
        for (int k = 0; k < 16; k++)
            e[r * 16 + k] = -e[(r - 1) * 16 + k];
    cg_module_train(CG_MODULE(m), false);
    return m;
}

/* The length of the greedy translation cg_seq2seq_attention_of_text draws
 * for text (from its "translation: " line; one character an id). */
static size_t attention_translation_len(cg_seq2seq *m, const cg_tokenizer *tok, const char *text)
{
    char dir[PATH_MAX], line[512];
    cg_test_mkdtemp(dir, sizeof dir, "cg_test_attn_");
    FILE *log = tmpfile(), *list = tmpfile();
    ck_assert(log && list);
    ck_assert_msg(
        cg_seq2seq_attention_of_text(m, tok, text, NULL, "--target", true, dir, list, log), "%s",
        cg_last_error());
    rewind(log);
    ck_assert(fgets(line, sizeof line, log) && strncmp(line, "translation: ", 13) == 0);
    fclose(log);
    fclose(list);
    cg_test_rm_tree(dir);
    return strlen(line + 13) - 1; /* without the newline */
}

START_TEST(test_translation_length_limit)
{
    const char *train[] = {"abcdefgh"}, *texts[] = {"abc", "abcdef"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    ck_assert_ptr_nonnull(tok);
    cg_seq2seq *m = never_eos_model(cg_tokenizer_vocab_size(tok), 64);
    cg_sources src;
    ck_assert(cg_sources_encode(tok, texts, 2, 64, &src));
    for (int beam = 1; beam <= 2; beam++)
        for (int cache = 0; cache < 2; cache++) {
            char **out = cg_translate_all(m, tok, &src, beam, 0.6, cache, NULL, NULL);
            ck_assert_msg(out != NULL, "%s", cg_last_error());
            for (int i = 0; i < 2; i++)
                ck_assert_msg(strlen(out[i]) == strlen(texts[i]) + 50,
                              "beam %d, source %d: %zu characters, not %zu", beam, i,
                              strlen(out[i]), strlen(texts[i]) + 50);
            cg_strings_free(out, 2);
        }
    /* the attention's target: the same limit, and max_len - 1 (BOS's place) */
    ck_assert_uint_eq(attention_translation_len(m, tok, texts[0]), strlen(texts[0]) + 50);
    cg_seq2seq_free(m);
    /* a model of max_len 20 cuts every translation at 20 tokens */
    m = never_eos_model(cg_tokenizer_vocab_size(tok), 20);
    for (int beam = 1; beam <= 2; beam++) {
        char **out = cg_translate_all(m, tok, &src, beam, 0.6, true, NULL, NULL);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        for (int i = 0; i < 2; i++)
            ck_assert_msg(strlen(out[i]) == 20, "beam %d, source %d: %zu characters, not 20", beam,
                          i, strlen(out[i]));
        cg_strings_free(out, 2);
    }
    ck_assert_uint_eq(attention_translation_len(m, tok, texts[0]), 19);
    cg_sources_free(&src);
    cg_seq2seq_free(m);
    cg_tokenizer_free(tok);
}
END_TEST

/* cg_translate_all decodes each source with its EOS, as the reference's
 * batches end it: greedy (a chunk of sources of two lengths) and beam 3
 * give what decoding ids + EOS alone gives, on a model whose output
 * depends on its whole source. */
START_TEST(test_translate_all_sources_end_with_eos)
{
    const char *train[] = {"abcdefgh"}, *texts[] = {"abc", "hgfedcb", "aeh"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_CHAR, true, train, 1, 0);
    ck_assert_ptr_nonnull(tok);
    cg_seq2seq *m = pad_model();
    ck_assert_int_eq(cg_tokenizer_vocab_size(tok), m->cfg.vocab);
    cg_sources src;
    ck_assert(cg_sources_encode(tok, texts, 3, m->cfg.max_len, &src));
    int differ = 0;
    for (int beam = 1; beam <= 3; beam += 2) {
        char **out = cg_translate_all(m, tok, &src, beam, 0.6, true, NULL, NULL);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        for (int i = 0; i < 3; i++) {
            int64_t S = src.len[i] + 1, ids[16], res[64], L, *b = NULL, *noeos = NULL, n2;
            memcpy(ids, src.ids[i], (size_t)src.len[i] * sizeof *ids);
            ids[S - 1] = CG_EOS;
            const int64_t steps = S - 1 + 50 < m->cfg.max_len ? S - 1 + 50 : m->cfg.max_len;
            if (beam == 1)
                ck_assert(cg_greedy_decode(m, ids, 1, S, steps, res, &L, true));
            else {
                ck_assert(cg_beam_search(m, ids, S, beam, 0.6, steps, &b, &L, NULL, NULL, true));
                memcpy(res, b, (size_t)L * sizeof *res);
                free(b);
            }
            char *want = cg_tokenizer_decode(tok, res, L);
            ck_assert_str_eq(out[i], want);
            /* (and the EOS matters to this model) */
            ck_assert(cg_beam_search(m, ids, S - 1, 3, 0.6, steps, &noeos, &n2, NULL, NULL, true));
            char *other = cg_tokenizer_decode(tok, noeos, n2);
            differ += strcmp(other, want) != 0;
            free(other);
            free(noeos);
            free(want);
        }
        cg_strings_free(out, 3);
    }
    ck_assert_int_ge(differ, 1);
    cg_sources_free(&src);
    cg_seq2seq_free(m);
    cg_tokenizer_free(tok);
}
END_TEST

/* Logits that are not finite at the last position only (a token whose
 * embedding is 1e19: finite logits where it is decoded, attention scores
 * past float's range where it is read back) are refused at that step, with
 * the cache or without (without, the check reads the last position of
 * every prefix, not the first). */
START_TEST(test_decode_nonfinite_last_position)
{
    cg_seq2seq *m = pad_model();
    float *e = cg_data(m->emb->weight);
    const int64_t d = m->cfg.d;
    for (int64_t k = 0; k < d; k++) {
        e[4 * d + k] = (k % 3 ? 1e19f : -1e19f);
        e[5 * d + k] = -e[4 * d + k];
    }
    const int64_t src[4] = {6, 7, 8, CG_EOS};
    for (int cache = 0; cache < 2; cache++) {
        int64_t *b = NULL, n = 0, out[8], len;
        cg_clear_error();
        ck_assert(!cg_beam_search(m, src, 4, 2, 0.6, 8, &b, &n, NULL, NULL, cache));
        ck_assert_msg(strstr(cg_last_error(), "beam search: step 1: logit"), "cache %d: %s", cache,
                      cg_last_error());
        cg_clear_error();
        ck_assert(!cg_greedy_decode(m, src, 1, 4, 8, out, &len, cache));
        ck_assert_msg(strstr(cg_last_error(), "greedy decode: step 1: logit"), "cache %d: %s",
                      cache, cg_last_error());
    }
    cg_seq2seq_free(m);
}
END_TEST

START_TEST(test_decode_bad_input)
{
    int64_t out[8], L, *b = NULL, bl, src[2] = {4, CG_EOS}, bad[2] = {999, CG_EOS};
    cg_clear_error();
    ck_assert(!cg_greedy_decode(g_model, bad, 1, 2, 4, out, &L, true));
    ck_assert(strlen(cg_last_error()) > 0);
    ck_assert(!cg_greedy_decode(g_model, src, 1, 2, 1000, out, &L, true)); /* > max_len */
    /* max_len steps fit (the last step's input is position max_len - 1):
     * one more is refused, both decoders naming as many positions */
    const int64_t over = g_model->cfg.max_len + 1;
    char want[128];
    snprintf(want, sizeof want, "%lld steps need %lld positions, the model has max_len %lld",
             (long long)over, (long long)over, (long long)g_model->cfg.max_len);
    ck_assert(!cg_greedy_decode(g_model, src, 1, 2, over, out, &L, true));
    ck_assert_msg(strstr(cg_last_error(), want), "%s", cg_last_error());
    ck_assert(!cg_beam_search(g_model, src, 2, 2, 0.6, over, &b, &bl, NULL, NULL, true));
    ck_assert_msg(strstr(cg_last_error(), want), "%s", cg_last_error());
    ck_assert(!cg_beam_search(g_model, src, 2, 0, 0.6, 4, &b, &bl, NULL, NULL, true));
    ck_assert(!cg_beam_search(g_model, bad, 2, 2, 0.6, 4, &b, &bl, NULL, NULL, true));
    ck_assert_ptr_null(b);
    /* a decoder without layers never reads the source (cross-attention is
     * in its layers; cached decoding had no position): refused; an
     * encoder without layers gives its embeddings as the memory */
    cg_seq2seq_config c = g_model->cfg;
    c.dec_layers = 0;
    ck_assert_ptr_null(cg_seq2seq_new(&c, 1));
    ck_assert(strstr(cg_last_error(), "seq2seq config: dec_layers must be >= 1 (got 0)") != NULL);
    c.dec_layers = 1;
    c.enc_layers = 0;
    cg_seq2seq *m = cg_seq2seq_new(&c, 1);
    ck_assert_ptr_nonnull(m);
    cg_seq2seq_free(m);
}
END_TEST

/* ------------------------------------------------------------ the program */
static char g_prog[PATH_MAX + 32];

static const char *prog_path(void)
{
    if (g_prog[0])
        return g_prog;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(g_prog, sizeof g_prog, "%s/../models/seq2seq/seq2seq", self);
    ck_assert_msg(access(g_prog, X_OK) == 0, "%s not built", g_prog);
    return g_prog;
}

/* Run "seq2seq ARGS" (a shell-quoted string) with stdin from in (may be
 * NULL); returns the exit status, stdout and stderr (malloc'd) through out/err. */
static int run(const char *args, const char *in, char **out, char **err)
{
    char cmd[8192];
    const char *o = tmp_path("stdout.txt"), *e = tmp_path("stderr.txt");
    if (in) {
        const char *ip = tmp_path("stdin.txt");
        write_file(ip, in, strlen(in));
        snprintf(cmd, sizeof cmd, "'%s' %s < '%s' > '%s' 2> '%s'", prog_path(), args, ip, o, e);
    } else {
        snprintf(cmd, sizeof cmd, "'%s' %s < /dev/null > '%s' 2> '%s'", prog_path(), args, o, e);
    }
    int st = system(cmd);
    *out = read_file(o, NULL);
    *err = read_file(e, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The loss history kept in a training checkpoint, as JSON (malloc'd). */
static char *ckpt_history(const char *path)
{
    cg_st_file *f = cg_st_open(path);
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    cJSON *tj = cJSON_Parse(cg_st_metadata(f, "train"));
    char *hj = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tj, "history"));
    ck_assert_ptr_nonnull(hj);
    cJSON_Delete(tj);
    cg_st_close(f);
    return hj;
}

static void expect_cli_error(const char *args, const char *needle)
{
    char *out, *err;
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc != 0, "'%s' exited 0", args);
    ck_assert_msg(count_lines(err) == 1, "'%s': stderr is not one line: %s", args, err);
    ck_assert_msg(strncmp(err, "seq2seq: error: ", 16) == 0, "'%s': %s", args, err);
    if (needle)
        ck_assert_msg(strstr(err, needle) != NULL, "'%s': '%s' lacks '%s'", args, err, needle);
    free(out);
    free(err);
}

START_TEST(test_cli_bad_flags)
{
    char args[PATH_MAX + 64];
    expect_cli_error("", "missing command");
    expect_cli_error("frobnicate", "unknown command");
    expect_cli_error("train --steps abc", "--steps");
    expect_cli_error("train --steps 0", "--steps");
    expect_cli_error("train --bogus 1", "--bogus");
    expect_cli_error("train --preset huge --out /nonexistent/x", "preset");
    expect_cli_error("train --resume /nonexistent.safetensors", "nonexistent");
    expect_cli_error("train --steps", "needs a value");
    expect_cli_error("train --data --steps 4", "--data needs a value, got the option '--steps'");
    expect_cli_error("translate --beam -2 hi", "--beam");
    expect_cli_error("translate --ckpt /nonexistent.safetensors hi", "nonexistent");
    expect_cli_error("eval --ckpt /nonexistent.safetensors", "nonexistent");
    expect_cli_error("attention --ckpt x", "--text");
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s'",
             tmp_path("none.tsv"), tmp_path("c.safetensors"));
    expect_cli_error(args, "cannot open");
    write_file(tmp_path("bad.tsv"), "a\tb\nc d\n", 8);
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s'",
             tmp_path("bad.tsv"), tmp_path("c.safetensors"));
    expect_cli_error(args, "missing tab");
    write_file(tmp_path("junk.safetensors"), "not a checkpoint at all", 23);
    snprintf(args, sizeof args, "translate --ckpt '%s' hi", tmp_path("junk.safetensors"));
    expect_cli_error(args, "junk.safetensors");
    char *out, *err;
    ck_assert_int_eq(run("train --help", NULL, &out, &err), 0);
    ck_assert(strstr(out, "usage: seq2seq train") != NULL);
    free(out);
    free(err);
    ck_assert_int_eq(run("translate --help", NULL, &out, &err), 0);
    ck_assert(strstr(out, "--length-penalty") != NULL);
    free(out);
    free(err);
}
END_TEST

/* The small file of test_cli_end_to_end: 30 pairs. */
static void write_small(const char *path)
{
    char data[4096] = "";
    const char *words[] = {"cat", "dog", "house", "tree", "sun", "moon"};
    const char *worte[] = {"Katze", "Hund", "Haus", "Baum", "Sonne", "Mond"};
    for (int i = 0; i < 30; i++) {
        char line[128];
        snprintf(line, sizeof line, "the %s %d.\tdie %s %d.\n", words[i % 6], i, worte[i % 6], i);
        strcat(data, line);
    }
    write_file(path, data, strlen(data));
}

/* The optimizer's flags: the recipe spelled out trains as the default;
 * --weight-decay makes it AdamW (fairseq's adam), which resumes exactly. */
START_TEST(test_cli_optimizer_flags)
{
    char small[PATH_MAX], args[3 * PATH_MAX], *out, *err;
    snprintf(small, sizeof small, "%s", tmp_path("small.tsv"));
    write_small(small);
    const char *base = "train --tokenizer char --data '%s' --out '%s' --steps 5 --eval-every 2 "
                       "--valid-size 4 --test-size 4 --test-limit 0 --max-tokens 200 "
                       "--threads 1 %s";
    const char *runs[][2] = {{"fresh.safetensors", ""},
                             {"spelled.safetensors",
                              "--beta1 0.9 --beta2 0.98 --adam-eps 1e-9 --clip-norm 1 "
                              "--weight-decay 0"},
                             {"wd.safetensors", "--weight-decay 0.5"},
                             {"wd_half.safetensors", "--weight-decay 0.5 --stop-at 3"}};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, base, small, tmp_path(runs[i][0]), runs[i][1]);
        int rc = run(args, NULL, &out, &err);
        ck_assert_msg(rc == 0, "%s: %s", runs[i][1], err);
        free(out);
        free(err);
    }
    snprintf(args, sizeof args, "train --resume '%s' --threads 1", tmp_path("wd_half.safetensors"));
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "resume failed: %s", err);
    free(out);
    free(err);
    char *h1 = ckpt_history(tmp_path("fresh.safetensors")),
         *h2 = ckpt_history(tmp_path("spelled.safetensors"));
    ck_assert_str_eq(h1, h2);
    char *w1 = ckpt_history(tmp_path("wd.safetensors")),
         *w2 = ckpt_history(tmp_path("wd_half.safetensors"));
    ck_assert_str_eq(w1, w2);
    ck_assert_str_ne(w1, h1);
    free(w1);
    free(w2);
    free(h1);
    free(h2);
    const char *types[][2] = {{"fresh.safetensors", "adam"}, {"wd_half.safetensors", "adamw"}};
    for (int i = 0; i < 2; i++) {
        cg_st_file *tf = cg_st_open(tmp_path(types[i][0]));
        ck_assert_ptr_nonnull(tf);
        ck_assert_str_eq(cg_st_metadata(tf, "optim.type"), types[i][1]);
        cg_st_close(tf);
    }
}
END_TEST

/* train a few steps on a small file, resume, translate, eval, attention */
START_TEST(test_cli_end_to_end)
{
    write_small(tmp_path("small.tsv"));
    char ck[PATH_MAX], small[PATH_MAX];
    snprintf(ck, sizeof ck, "%s", tmp_path("m.safetensors"));
    snprintf(small, sizeof small, "%s", tmp_path("small.tsv"));
    char args[3 * PATH_MAX], *out, *err;
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --steps 5 --stop-at 3 --eval-every 2 "
             "--valid-size 4 "
             "--test-size 4 --test-limit 2 --max-tokens 200 --threads 1",
             small, ck);
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "train failed: %s", err);
    ck_assert_msg(strstr(out, "\"interrupted\": true") != NULL, "%s", out);
    ck_assert(access(ck, F_OK) == 0);
    free(out);
    free(err);
    /* the same command again would overwrite: refused, checkpoint kept */
    size_t n0 = 0, n1 = 0;
    char *before = read_file(ck, &n0);
    ck_assert_ptr_nonnull(before);
    expect_cli_error(args, "exists");
    char *after = read_file(ck, &n1);
    ck_assert_ptr_nonnull(after);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* resume to step 5 */
    snprintf(args, sizeof args, "train --resume '%s' --test-limit 2 --threads 1 --eval-every 2",
             ck);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "resume failed: %s", err);
    ck_assert_msg(strstr(out, "\"step\": 5") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"val_nll\":") != NULL, "%s", out);
    ck_assert(strstr(out, "\"chrf_beam\":") != NULL);
    free(err);
    /* ... which gives exactly what 5 uninterrupted steps give */
    char *resumed = out, *fresh;
    snprintf(
        args, sizeof args,
        "train --tokenizer char --data '%s' --out '%s' --steps 5 --eval-every 2 --valid-size 4 "
        "--test-size 4 --test-limit 0 --max-tokens 200 --threads 1",
        small, tmp_path("fresh.safetensors"));
    rc = run(args, NULL, &fresh, &err);
    ck_assert_msg(rc == 0, "train failed: %s", err);
    free(err);
    const char *keys[] = {"\"train_loss\":", "\"val_nll\":", "\"val_loss\":"};
    for (int i = 0; i < 3; i++) {
        const char *a = strstr(resumed, keys[i]), *b = strstr(fresh, keys[i]);
        ck_assert(a && b);
        size_t la = strcspn(a, ","), lb = strcspn(b, ",");
        ck_assert_msg(la == lb && strncmp(a, b, la) == 0, "resumed %.*s, fresh %.*s", (int)la, a,
                      (int)lb, b);
    }
    free(resumed);
    free(fresh);
    /* ... and the same loss history: evaluations and the per-step training
     * loss (5 steps: a block of the dense series still being filled, across
     * the resume at step 3) */
    char *h1 = ckpt_history(ck), *h2 = ckpt_history(tmp_path("fresh.safetensors"));
    ck_assert_str_eq(h1, h2);
    cg_history h = {0};
    ck_assert_msg(cg_history_from_json(h1, &h), "%s", cg_last_error());
    ck_assert_int_eq(h.n, 3); /* evaluations at 2, 4, 5 */
    ck_assert_int_eq(h.dn, 0);
    ck_assert_int_eq(h.acc_n, 5);
    ck_assert_int_eq(h.acc_step, 1 + 2 + 3 + 4 + 5);
    ck_assert(isfinite(h.acc_loss) && h.acc_loss > 0);
    cg_history_free(&h);
    free(h2);
    free(h1);
    /* --force overwrites an existing checkpoint */
    snprintf(
        args, sizeof args,
        "train --tokenizer char --data '%s' --out '%s' --steps 2 --eval-every 2 --valid-size 4 "
        "--test-size 4 --test-limit 0 --max-tokens 200 --threads 1 --force",
        small, tmp_path("fresh.safetensors"));
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "train --force failed: %s", err);
    free(out);
    free(err);
    cg_st_file *sf = cg_st_open(tmp_path("fresh.safetensors"));
    ck_assert_ptr_nonnull(sf);
    ck_assert_str_eq(cg_st_metadata(sf, "step"), "2");
    cg_st_close(sf);
    /* translate from arguments and from stdin */
    snprintf(args, sizeof args, "translate --ckpt '%s' 'the cat 1.' 'the sun 4.' --threads 1", ck);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "translate failed: %s", err);
    ck_assert_int_eq(count_lines(out), 2);
    free(out);
    free(err);
    snprintf(args, sizeof args, "translate --ckpt '%s' --beam 3 --threads 1", ck);
    rc = run(args, "the dog 2.\nthe tree 3.\nthe moon 5.\n", &out, &err);
    ck_assert_msg(rc == 0, "translate failed: %s", err);
    ck_assert_int_eq(count_lines(out), 3);
    free(out);
    free(err);
    /* a line that is not UTF-8 is reported and stands as an empty line; the
     * others are translated (issue 25: one bad line rejected the input) */
    rc = run(args, "bad \xff input\nthe dog 2.\n", &out, &err);
    ck_assert_msg(rc == 0 && count_lines(out) == 2 && out[0] == '\n' && strstr(err, "UTF-8") &&
                      strstr(err, "line 1") && strstr(err, "1 of 2 lines not translated"),
                  "exit %d: %s", rc, err);
    free(out);
    free(err);
    /* eval */
    snprintf(args, sizeof args, "eval --ckpt '%s' --threads 1", ck);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "eval failed: %s", err);
    ck_assert(strstr(out, "\"bleu\":") && strstr(out, "\"chrf\":"));
    free(out);
    free(err);
    /* attention */
    snprintf(args, sizeof args, "attention --ckpt '%s' --text 'the cat 1.' --out '%s' --threads 1",
             ck, tmp_path("att"));
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "attention failed: %s", err);
    const char *pngs[] = {"att/encoder_self.png", "att/decoder_self.png", "att/cross.png"};
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        char *b = read_file(tmp_path(pngs[i]), &n);
        ck_assert_msg(b && n > 8 && memcmp(b, "\x89PNG", 4) == 0, "%s", pngs[i]);
        free(b);
    }
    free(out);
    free(err);
    /* a truncated checkpoint is refused with one line */
    size_t n = 0;
    char *b = read_file(ck, &n);
    ck_assert_ptr_nonnull(b);
    write_file(tmp_path("trunc.safetensors"), b, n / 2);
    free(b);
    snprintf(args, sizeof args, "translate --ckpt '%s' hi", tmp_path("trunc.safetensors"));
    expect_cli_error(args, "trunc.safetensors");
}
END_TEST

/* Copy checkpoint src to dst with element 0 of tensor `poison` (all of
 * them: all) set to 3e38: finite (a NaN weight is refused at load), but
 * the next loss is NaN. */
static void poison_copy(const char *src, const char *dst, const char *poison, bool all)
{
    cg_st_file *f = cg_st_open(src);
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    cg_st_writer *w = cg_st_writer_new();
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        ck_assert(cg_st_set_metadata(w, k, cg_st_metadata(f, k)));
    }
    bool found = false;
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        ck_assert(cg_st_info(f, name, &dt, &nd, shape));
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, name);
            if (!strcmp(name, poison)) {
                for (int64_t j = 0; j < (all ? cg_numel(t) : 1); j++)
                    cg_data(t)[j] = 3e38f;
                found = true;
            }
            ck_assert(cg_st_add_f32(w, name, t));
            cg_release(t);
        } else {
            cg_tensor *v = cg_st_get(f, name);
            ck_assert_ptr_nonnull(v);
            ck_assert(cg_st_add(w, name, v));
            cg_release(v);
        }
    }
    ck_assert_msg(found, "no tensor '%s'", poison);
    ck_assert(cg_st_writer_save(w, dst));
    cg_st_writer_free(w);
    cg_st_close(f);
}

/* True if the model parameters (not the optimizer state) of two checkpoints
 * are bit-identical. */
static bool same_params(const char *a, const char *b)
{
    cg_st_file *fa = cg_st_open(a), *fb = cg_st_open(b);
    ck_assert(fa && fb);
    bool same = true;
    for (int i = 0; i < cg_st_count(fa); i++) {
        const char *name = cg_st_name(fa, i);
        if (!strncmp(name, "optim.", 6))
            continue;
        size_t na = 0, nb = 0;
        const void *ra = cg_st_raw(fa, name, &na), *rb = cg_st_raw(fb, name, &nb);
        same = same && ra && rb && na == nb && memcmp(ra, rb, na) == 0;
    }
    cg_st_close(fa);
    cg_st_close(fb);
    return same;
}

/* seq2seq evaluates no step 0: a run stopped before its first evaluation
 * has only the training loss (a point of 10 steps), and draws it */
START_TEST(test_cli_curve_before_first_evaluation)
{
    char data[4096];
    numbered_pairs(data, sizeof data, 30, "a small %d.\tein kleines %d.\n");
    write_file(tmp_path("small.tsv"), data, strlen(data));
    char ck[PATH_MAX], args[3 * PATH_MAX], *out, *err;
    snprintf(ck, sizeof ck, "%s", tmp_path("early.safetensors"));
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --steps 40 --stop-at 12 "
             "--eval-every 20 --valid-size 4 --test-size 4 --test-limit 0 --max-tokens 200 "
             "--d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --threads 1",
             tmp_path("small.tsv"), ck);
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0 && strstr(out, "\"interrupted\": true") && !strstr(err, "val loss"),
                  "exit %d: %s%s", rc, out, err);
    free(out);
    free(err);
    struct stat sb;
    ck_assert_msg(stat(tmp_path("early.loss.png"), &sb) == 0 && sb.st_size > 0,
                  "no loss curve before the first evaluation");
    /* resumed to its first evaluation: the training loss beside the
     * validation loss is the recent steps' (seq2seq evaluates none) */
    snprintf(args, sizeof args, "train --resume '%s' --stop-at 20 --test-limit 0 --threads 1", ck);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0 && strstr(err, "step 20: train loss ") && !strstr(err, "train loss nan"),
                  "exit %d: %s", rc, err);
    free(out);
    free(err);
    size_t n = 0;
    char *log = read_file(tmp_path("early.metrics.jsonl"), &n);
    const char *line = log ? strstr(log, "{\"step\": 20, \"train_loss\": ") : NULL;
    ck_assert_msg(line && line[strlen("{\"step\": 20, \"train_loss\": ")] != 'n', "%s", log);
    free(log);
}
END_TEST

/* A char model trained on small.tsv (written first) into ck, with flags
 * (the steps) after the shared ones. */
static void train_small_char(const char *ck, const char *flags)
{
    char args[3 * PATH_MAX], *out, *err;
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --valid-size 4 --test-size 4 "
             "--test-limit 0 --max-tokens 200 --threads 1 %s",
             tmp_path("small.tsv"), ck, flags);
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "train failed: %s", err);
    free(out);
    free(err);
}

/* A NaN stops training naming the step and the tensor, and keeps the
 * checkpoint; with --skip-nonfinite such steps are skipped with a warning
 * each (as charlm train does) */
START_TEST(test_cli_nonfinite)
{
    char data[4096];
    numbered_pairs(data, sizeof data, 30, "a small %d.\tein kleines %d.\n");
    write_file(tmp_path("small.tsv"), data, strlen(data));
    char ck[PATH_MAX], bad[PATH_MAX], args[3 * PATH_MAX], *out, *err;
    snprintf(ck, sizeof ck, "%s", tmp_path("good.safetensors"));
    snprintf(bad, sizeof bad, "%s", tmp_path("bad.safetensors"));
    train_small_char(ck, "--steps 8 --stop-at 2 --eval-every 4");
    int rc;
    poison_copy(ck, bad, "emb.weight", false);
    size_t n0 = 0, n1 = 0;
    char *before = read_file(bad, &n0);
    /* without the flag: stop at the first step, naming it and a tensor */
    snprintf(args, sizeof args, "train --resume '%s' --test-limit 0 --threads 1", bad);
    rc = run(args, NULL, &out, &err);
    const char *e = strstr(err, "seq2seq: error: ");
    ck_assert_msg(rc == 1 && e && count_lines(e) == 1 &&
                      strstr(e, "seq2seq: error: loss is nan at step 3") &&
                      strstr(err, "non-finite gradient: '") && strstr(err, "left as it was"),
                  "exit %d: %s", rc, err);
    free(out);
    free(err);
    char *after = read_file(bad, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* with it: steps 3, 4, 5 skipped (and the evaluation at 4, a NaN, kept) */
    snprintf(args, sizeof args,
             "train --resume '%s' --test-limit 0 --threads 1 --skip-nonfinite --stop-at 5", bad);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    int warnings = 0;
    for (const char *p = err; (p = strstr(p, "seq2seq: warning: skipping step ")); p++)
        warnings++;
    ck_assert_msg(warnings == 3, "%d warnings: %s", warnings, err);
    /* NaN's sign is no information: "nan" whatever the sum's sign bit */
    ck_assert_msg(strstr(err, "skipping step 3: loss nan, non-finite gradient: '"), "%s", err);
    ck_assert_msg(strstr(err, "3 step(s) skipped"), "%s", err);
    /* no step of this run had a loss: the result names the last evaluation's
     * training loss (the recent steps' of the run it resumed), not null */
    const char *tl = strstr(out, "\"train_loss\": ");
    ck_assert_msg(tl && strchr("0123456789", tl[strlen("\"train_loss\": ")]), "%s", out);
    free(out);
    free(err);
    poison_copy(ck, tmp_path("ref.safetensors"), "emb.weight", false);
    ck_assert(same_params(bad, tmp_path("ref.safetensors"))); /* no update was made */
    /* ... and that checkpoint (with a NaN in its history) resumes */
    snprintf(args, sizeof args,
             "train --resume '%s' --test-limit 0 --threads 1 --skip-nonfinite --stop-at 6", bad);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0 && strstr(err, "skipping step 6") && strstr(err, "1 step(s) skipped"),
                  "exit %d: %s", rc, err);
    free(out);
    free(err);
    ck_assert(run("train --help", NULL, &out, &err) == 0 && strstr(out, "--skip-nonfinite"));
    free(out);
    free(err);
    /* a model whose logits are not finite is not decoded (an argmax or a
     * beam over NaN picks tokens that mean nothing): greedy and beam
     * translation, eval and the attention pictures each stop naming it */
    poison_copy(ck, bad, "emb.weight", true);
    const char *decoders[] = {"translate --ckpt '%s' --beam 1 'a small 3.'",
                              "translate --ckpt '%s' --beam 3 'a small 3.'",
                              "eval --ckpt '%s' --data '%s' --test-limit 2 --beam 1",
                              "eval --ckpt '%s' --data '%s' --test-limit 2 --beam 2",
                              "attention --ckpt '%s' --text 'a small 3.' --out '%s'",
                              "translate --ckpt '%s' --beam 3 --nbest 2 'a small 3.'"};
    const char *named[] = {"greedy decode: step 0: logit ", "beam search: step 0: logit ",
                           "greedy decode: step 0: logit ", "beam search: step 0: logit ",
                           "greedy decode: step 0: logit ", "beam search: step 0: logit "};
    for (int i = 0; i < 6; i++) {
        snprintf(args, sizeof args, decoders[i], bad,
                 i == 4 ? tmp_path("pictures") : tmp_path("small.tsv"));
        expect_cli_error(args, named[i]);
        expect_cli_error(args, "(a diverged model?)");
    }
    ck_assert(access(tmp_path("pictures"), F_OK) != 0);
}
END_TEST

/* translate --nbest N: fairseq-generate's H-I<TAB>SCORE<TAB>TEXT lines,
 * N a sentence, best first (the first is plain translate's line), I its
 * index among the input lines: a line that cannot be translated has none
 * and the next keeps its own index; N over the beam is refused. */
START_TEST(test_cli_translate_nbest)
{
    write_small(tmp_path("small.tsv"));
    char ck[PATH_MAX], args[3 * PATH_MAX], *out, *err, *plain;
    snprintf(ck, sizeof ck, "%s", tmp_path("nbest.safetensors"));
    train_small_char(ck, "--steps 3");
    int rc;
    snprintf(args, sizeof args, "translate --ckpt '%s' --beam 3 --threads 1", ck);
    ck_assert(run(args, "the dog 2.\nthe moon 5.\n", &plain, &err) == 0);
    free(err);
    snprintf(args, sizeof args, "translate --ckpt '%s' --beam 3 --nbest 2 --threads 1", ck);
    rc = run(args, "bad \xff input\nthe dog 2.\nthe moon 5.\n", &out, &err);
    ck_assert_msg(rc == 0 && strstr(err, "line 1") && strstr(err, "no H line"), "%d: %s", rc, err);
    ck_assert_int_eq(count_lines(out), 4);
    char *line = out, *want = plain;
    double prev = 0;
    for (int i = 0; i < 4; i++) {
        char head[8], *tab2, *end = strchr(line, '\n');
        snprintf(head, sizeof head, "H-%d\t", 1 + i / 2);
        ck_assert_msg(strncmp(line, head, 4) == 0, "line %d: %s", i, line);
        double score = strtod(line + 4, &tab2);
        ck_assert(*tab2 == '\t' && isfinite(score) && score <= 0);
        ck_assert(i % 2 == 0 || score <= prev);
        if (i % 2 == 0) { /* the best is plain translate's line */
            size_t len = (size_t)(strchr(want, '\n') - want);
            ck_assert(end - (tab2 + 1) == (ptrdiff_t)len && strncmp(tab2 + 1, want, len) == 0);
            want += len + 1;
        }
        prev = score;
        line = end + 1;
    }
    free(out);
    free(err);
    free(plain);
    snprintf(args, sizeof args, "translate --ckpt '%s' --beam 3 --nbest 4 hi", ck);
    expect_cli_error(args, "--beam 4");
    snprintf(args, sizeof args, "translate --ckpt '%s' --nbest 2 hi", ck);
    expect_cli_error(args, "--beam 2");
}
END_TEST

/* --grad-accum (models/train/trainer.h cg_stepper): 4 micro-batches of different
 * target-token counts take the step of one batch holding all their pairs
 * (the loss is the mean over every target token), 20 Adam steps with label
 * smoothing and clipping, within 1e-5 relative. */
typedef struct {
    cg_seq2seq *m;
    cg_batch *bt;
    bool untold; /* the loss is not told its grad_scale (the fused head computes twice) */
} accum_model;

static bool accum_batch(void *self, int k, double *weight, double *tokens)
{
    accum_model *a = self;
    *weight = (double)a->bt[k].n_tokens;
    *tokens = *weight;
    return true;
}

static cg_tensor *accum_loss(void *self, int k, float grad_scale)
{
    accum_model *a = self;
    const cg_batch *b = &a->bt[k];
    return cg_seq2seq_forward_loss(a->m, b->src, b->B, b->S, b->tgt_in, b->T, b->tgt_out,
                                   a->untold ? 1.0f : grad_scale);
}

static double accum_lr(void *self, int64_t step)
{
    (void)self;
    return 1e-3 * (double)(step < 10 ? step + 1 : 10) / 10.0;
}

/* The trainer's view of an accumulation test's model: Adam, clipping at 1. */
static cg_trainer_model accum_trainer(cg_seq2seq *m, accum_model *am)
{
    return (cg_trainer_model){.module = CG_MODULE(m),
                              .dropout_rng = &m->dropout_rng,
                              .optim = cg_adam_config(0.0, 0.9, 0.98, 1e-9),
                              .clip_norm = 1.0,
                              .self = am,
                              .batch = accum_batch,
                              .loss = accum_loss,
                              .lr = accum_lr};
}

/* Bucketed shapes: a batch padded to multiples of 8 (and to the model's
 * longest sequence) keeps its ids, pads the rest, and gives the loss and
 * the gradients of the unpadded batch: the padding is masked exactly. */
START_TEST(test_pad_to_multiple)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&g_vocab);
    c.d = 32, c.H = 2, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 64, c.max_len = 64;
    c.dropout = 0.0f, c.label_smoothing = 0.1f;
    cg_seq2seq *m = cg_seq2seq_new(&c, 11);
    ck_assert_ptr_nonnull(m);
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_batch b[3];
    for (int k = 0; k < 3; k++)
        ck_assert(cg_batch_make(&g_pairs, all, NPAIRS, &g_vocab, &b[k]));
    ck_assert(b[0].S % 8 != 0 || b[0].T % 8 != 0);
    CG_ASSERT_FAILS(cg_batch_pad_to(&b[1], 0, 0), "pad to a multiple of 0");
    ck_assert(cg_batch_pad_to(&b[1], 8, 0));
    ck_assert(cg_batch_pad_to(&b[2], 1000, c.max_len)); /* not past the longest sequence */
    ck_assert(b[2].S == c.max_len && b[2].T == c.max_len);
    ck_assert(b[1].S % 8 == 0 && b[1].T % 8 == 0 && b[1].S >= b[0].S && b[1].T >= b[0].T);
    float *grad[3] = {0};
    float loss[3];
    for (int k = 0; k < 3; k++) {
        ck_assert(b[k].B == b[0].B && b[k].n_tokens == b[0].n_tokens);
        for (int64_t i = 0; i < b[0].B; i++) {
            for (int64_t j = 0; j < b[k].S; j++)
                ck_assert(b[k].src[i * b[k].S + j] ==
                          (j < b[0].S ? b[0].src[i * b[0].S + j] : CG_PAIR_PAD));
            for (int64_t j = 0; j < b[k].T; j++) {
                ck_assert(b[k].tgt_in[i * b[k].T + j] ==
                          (j < b[0].T ? b[0].tgt_in[i * b[0].T + j] : CG_PAIR_PAD));
                ck_assert(b[k].tgt_out[i * b[k].T + j] ==
                          (j < b[0].T ? b[0].tgt_out[i * b[0].T + j] : CG_PAIR_PAD));
            }
        }
        cg_module_zero_grad(CG_MODULE(m));
        cg_tensor *logits = cg_seq2seq_forward(m, b[k].src, b[k].B, b[k].S, b[k].tgt_in, b[k].T);
        cg_tensor *l = cg_seq2seq_loss(m, logits, b[k].tgt_out);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        loss[k] = cg_item(l);
        cg_tensor *g = m->emb->weight->grad;
        grad[k] = cg_test_values(g);
        if (k > 0) {
            ck_assert_msg(loss[k] == loss[0], "padded loss %.9g, unpadded %.9g", loss[k], loss[0]);
            for (int64_t i = 0; i < cg_numel(g); i++)
                ck_assert_msg(fabsf(grad[k][i] - grad[0][i]) <= 1e-6f + 1e-5f * fabsf(grad[0][i]),
                              "embedding gradient %lld: %g vs %g", (long long)i, grad[k][i],
                              grad[0][i]);
        }
        cg_release_all(2, logits, l);
    }
    for (int k = 0; k < 3; k++) {
        free(grad[k]);
        cg_batch_free(&b[k]);
    }
    cg_seq2seq_free(m);
}
END_TEST

/* The loss of batch b in training mode, from the model's dropout stream as
 * it is at *rng0 (so that two calls draw the same masks). */
static float loss_from(cg_seq2seq *m, const cg_batch *b, const int64_t *src, cg_rng rng0)
{
    m->dropout_rng = rng0;
    cg_tensor *logits = cg_seq2seq_forward(m, src, b->B, b->S, b->tgt_in, b->T);
    cg_tensor *loss = cg_seq2seq_loss(m, logits, b->tgt_out);
    ck_assert(loss);
    float v = cg_data(loss)[0];
    cg_release(logits);
    cg_release(loss);
    return v;
}

/* --word-dropout: a dropped token's embedding is zero (only its position
 * reaches the model), on both sides, in training only; 0 draws nothing. */
START_TEST(test_word_dropout)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&g_vocab);
    c.d = 32, c.H = 2, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 64, c.max_len = 64;
    c.dropout = 0.0f, c.word_dropout = 1.0f; /* every token dropped (p = 1: nn.Dropout's range) */
    cg_seq2seq *m = cg_seq2seq_new(&c, 5);
    ck_assert(m);
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    cg_batch b;
    ck_assert(cg_batch_make(&g_pairs, all, NPAIRS, &g_vocab, &b));
    int64_t *other = malloc((size_t)(b.B * b.S) * sizeof *other); /* another source, same pads */
    ck_assert(other);
    for (int64_t i = 0; i < b.B * b.S; i++)
        other[i] = b.src[i] == CG_PAD ? CG_PAD : 3 + (b.src[i] + 1) % (c.vocab - 3);
    cg_rng rng0 = m->dropout_rng;
    cg_module_train(CG_MODULE(m), true);
    /* every token dropped: the loss cannot tell the sources apart */
    ck_assert_float_eq(loss_from(m, &b, b.src, rng0), loss_from(m, &b, other, rng0));
    ck_assert(m->dropout_rng.counter != rng0.counter);
    /* in evaluation nothing is dropped */
    cg_module_train(CG_MODULE(m), false);
    ck_assert_float_ne(loss_from(m, &b, b.src, rng0), loss_from(m, &b, other, rng0));
    /* off: the sources differ again, and the stream is not touched */
    cg_module_train(CG_MODULE(m), true);
    m->cfg.word_dropout = 0.0f;
    ck_assert_float_ne(loss_from(m, &b, b.src, rng0), loss_from(m, &b, other, rng0));
    ck_assert_uint_eq(m->dropout_rng.counter, rng0.counter);
    /* the config keeps it, and refuses what is above 1 */
    char *js = cg_seq2seq_config_to_json(&c);
    cg_seq2seq_config back;
    ck_assert(js && cg_seq2seq_config_from_json(js, &back));
    ck_assert_float_eq(back.word_dropout, c.word_dropout);
    free(js);
    c.word_dropout = 1.5f;
    ck_assert(!cg_seq2seq_config_check(&c));
    ck_assert_str_eq(cg_last_error(), "seq2seq config: word_dropout must be in [0, 1] (got 1.5)");
    c.word_dropout = 0.0f, c.dropout = 1.0f; /* the model's dropout too */
    ck_assert_msg(cg_seq2seq_config_check(&c), "%s", cg_last_error());
    c.dropout = 1.001f;
    ck_assert(!cg_seq2seq_config_check(&c));
    ck_assert_str_eq(cg_last_error(), "seq2seq config: dropout must be in [0, 1] (got 1.001)");
    free(other);
    cg_batch_free(&b);
    cg_module_free(CG_MODULE(m));
}
END_TEST

START_TEST(test_grad_accum_per_token)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&g_vocab);
    c.d = 32, c.H = 2, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 64, c.max_len = 64;
    c.dropout = 0.0f, c.label_smoothing = 0.1f;
    cg_seq2seq *m[2] = {cg_seq2seq_new(&c, 11), cg_seq2seq_new(&c, 11)};
    ck_assert(m[0] && m[1]);
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    const int64_t start[5] = {0, 1, 2, 3, 5}; /* micro-batches {0} {1} {2} {3, 4} */
    cg_batch micro[4], whole;
    for (int k = 0; k < 4; k++)
        ck_assert(
            cg_batch_make(&g_pairs, all + start[k], start[k + 1] - start[k], &g_vocab, &micro[k]));
    ck_assert(cg_batch_make(&g_pairs, all, NPAIRS, &g_vocab, &whole));
    ck_assert(micro[0].n_tokens != micro[3].n_tokens);
    accum_model am[2] = {{m[0], micro, false}, {m[1], &whole, false}};
    cg_stepper st[2];
    for (int i = 0; i < 2; i++) {
        static cg_trainer_model keep[2];
        keep[i] = accum_trainer(m[i], &am[i]);
        ck_assert_msg(cg_stepper_init(&st[i], &keep[i], i == 0 ? 4 : 1, 0), "%s", cg_last_error());
    }
    for (int64_t s = 1; s <= 20; s++) {
        double l[2], tok[2];
        for (int i = 0; i < 2; i++)
            ck_assert_msg(cg_stepper_step(&st[i], s, &l[i], &tok[i]) == CG_STEP_OK, "%s",
                          cg_last_error());
        ck_assert_msg(fabs(l[0] - l[1]) <= 1e-5 * fabs(l[1]), "step %lld: loss %.9g vs %.9g",
                      (long long)s, l[0], l[1]);
        ck_assert(tok[0] == tok[1]);
    }
    char worst[128] = "";
    double rel = cg_test_max_rel_diff(CG_MODULE(m[0]), CG_MODULE(m[1]), worst, sizeof worst);
    ck_assert_msg(rel <= 1e-5, "parameters differ by %.3g (relative) in %s", rel, worst);
    for (int i = 0; i < 2; i++) {
        cg_stepper_free(&st[i]);
        cg_seq2seq_free(m[i]);
    }
    for (int k = 0; k < 4; k++)
        cg_batch_free(&micro[k]);
    cg_batch_free(&whole);
}
END_TEST

/* --grad-accum with the exact fused head (issue 37): the trainer tells
 * each micro-batch's loss its share of the step (grad_scale), so the head
 * computes its chunks once a micro-batch (the kernel's run count: 4 a step,
 * against 8 for a loss not told, whose backward computes them again), with
 * the same bits: loss, every gradient and the parameters after 3 steps, in
 * fp32 and bf16. */
static void same_bits(cg_module *a, cg_module *b, bool grads)
{
    cg_param_list pa = {0}, pb = {0};
    ck_assert(cg_module_params(a, &pa) && cg_module_params(b, &pb) && pa.n == pb.n);
    for (int i = 0; i < pa.n; i++) {
        const cg_tensor *ta = pa.items[i].tensor, *tb = pb.items[i].tensor;
        if (grads)
            ta = cg_grad(ta), tb = cg_grad(tb);
        ck_assert_msg(ta && tb, "%s has no gradient", pa.items[i].name);
        float *x = cg_test_values(ta), *y = cg_test_values(tb);
        ck_assert_msg(memcmp(x, y, sizeof(float) * (size_t)cg_numel(ta)) == 0, "%s: %s differ",
                      pa.items[i].name, grads ? "the gradients" : "the values");
        free(x);
        free(y);
    }
    cg_param_list_free(&pa);
    cg_param_list_free(&pb);
}

START_TEST(test_grad_accum_fused_head_once)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = cg_pair_vocab_size(&g_vocab);
    c.d = 32, c.H = 2, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 64, c.max_len = 64;
    c.dropout = 0.0f, c.label_smoothing = 0.1f, c.loss_chunk = CG_LCE_EXACT;
    int64_t all[NPAIRS] = {0, 1, 2, 3, 4};
    const int64_t start[5] = {0, 1, 2, 3, 5}; /* micro-batches {0} {1} {2} {3, 4} */
    cg_batch micro[4];
    for (int k = 0; k < 4; k++)
        ck_assert(
            cg_batch_make(&g_pairs, all + start[k], start[k + 1] - start[k], &g_vocab, &micro[k]));
    for (int prec = 0; prec < 2; prec++) {
        cg_set_matmul_precision(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_seq2seq *m[2] = {cg_seq2seq_new(&c, 11), cg_seq2seq_new(&c, 11)};
        ck_assert(m[0] && m[1]);
        accum_model am[2] = {{m[0], micro, false}, {m[1], micro, true}};
        static cg_trainer_model tm[2];
        cg_stepper st[2];
        for (int i = 0; i < 2; i++) {
            tm[i] = accum_trainer(m[i], &am[i]);
            ck_assert_msg(cg_stepper_init(&st[i], &tm[i], 4, 0), "%s", cg_last_error());
        }
        for (int64_t s = 1; s <= 3; s++) {
            double l[2], tok[2];
            for (int i = 0; i < 2; i++) {
                uint64_t runs = cg_k_linear_cross_entropy_runs();
                ck_assert_msg(cg_stepper_step(&st[i], s, &l[i], &tok[i]) == CG_STEP_OK, "%s",
                              cg_last_error());
                const uint64_t want = i == 0 ? 4 : 8; /* a micro-batch: once, or twice */
                ck_assert_uint_eq(cg_k_linear_cross_entropy_runs() - runs, want);
            }
            ck_assert_msg(memcmp(&l[0], &l[1], sizeof l[0]) == 0, "step %lld: loss %.9g vs %.9g",
                          (long long)s, l[0], l[1]);
            same_bits(CG_MODULE(m[0]), CG_MODULE(m[1]), true);
        }
        same_bits(CG_MODULE(m[0]), CG_MODULE(m[1]), false);
        for (int i = 0; i < 2; i++) {
            cg_stepper_free(&st[i]);
            cg_seq2seq_free(m[i]);
        }
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    for (int k = 0; k < 4; k++)
        cg_batch_free(&micro[k]);
}
END_TEST

/* Copy checkpoint src to dst with the trainer state's model.<key> set to v. */
static void edit_state_copy(const char *src, const char *dst, const char *key, double v)
{
    cg_st_file *f = cg_st_open(src);
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    cg_st_writer *w = cg_st_writer_new();
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        if (strcmp(k, "train") != 0) {
            ck_assert(cg_st_set_metadata(w, k, cg_st_metadata(f, k)));
            continue;
        }
        cJSON *o = cJSON_Parse(cg_st_metadata(f, k));
        cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
        ck_assert(cJSON_IsObject(m));
        cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber(v));
        char *j = cJSON_PrintUnformatted(o);
        ck_assert(cg_st_set_metadata(w, k, j));
        free(j);
        cJSON_Delete(o);
    }
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        ck_assert(cg_st_info(f, name, &dt, &nd, shape));
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, name);
            ck_assert(t && cg_st_add_f32(w, name, t));
            cg_release(t);
        } else {
            cg_tensor *v = cg_st_get(f, name);
            ck_assert(v && cg_st_add(w, name, v));
            cg_release(v);
        }
    }
    ck_assert(cg_st_writer_save(w, dst));
    cg_st_writer_free(w);
    cg_st_close(f);
}

/* Issue 16: resume refuses every flag that would change the recipe, in one
 * message naming them; a damaged batch position is refused, not replayed
 * (epoch 0 with a position inside it crashed; epoch 1e15 hung); the output
 * is checked before any training. */
START_TEST(test_cli_resume_and_output_rules)
{
    char data[4096];
    numbered_pairs(data, sizeof data, 30, "a small %d.\tein kleines %d.\n");
    write_file(tmp_path("small.tsv"), data, strlen(data));
    char ck[PATH_MAX], args[3 * PATH_MAX], *out, *err;
    snprintf(ck, sizeof ck, "%s", tmp_path("r.safetensors"));
    const char *common = "--valid-size 4 --test-size 4 --test-limit 0 --max-tokens 200 "
                         "--threads 1 --enc-layers 1 --dec-layers 1 --d 32 --H 2 --d-ff 64";
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --steps 6 --stop-at 2 %s",
             tmp_path("small.tsv"), ck, common);
    int rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "train failed: %s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args,
             "train --resume '%s' --preset base --max-tokens 100 --seed 3 --factor 1 --warmup 5 "
             "--max-len 50 --valid-size 3 --test-size 3 --lr 1e-3 --d 64",
             ck);
    expect_cli_error(args, "drop --preset, --max-tokens, --seed, --factor, --warmup, --max-len, "
                           "--valid-size, --test-size, --lr, --d");
    /* --pad-to-multiple is recorded (absent in older checkpoints: 1) and
     * resumed: 2 + 4 steps equal 6 straight (dropout's draws follow the
     * padded shapes, so a resume without it would differ, as does a run
     * without it) */
    char pk[PATH_MAX], pstraight[PATH_MAX];
    snprintf(pk, sizeof pk, "%s", tmp_path("p.safetensors"));
    snprintf(pstraight, sizeof pstraight, "%s", tmp_path("p6.safetensors"));
    for (int k = 0; k < 2; k++) {
        snprintf(
            args, sizeof args,
            "train --tokenizer char --data '%s' --out '%s' --steps 6 %s --pad-to-multiple 8 %s",
            tmp_path("small.tsv"), k ? pstraight : pk, k ? "" : "--stop-at 2", common);
        rc = run(args, NULL, &out, &err);
        ck_assert_msg(rc == 0, "train failed: %s", err);
        free(out);
        free(err);
    }
    cg_st_file *pf = cg_st_open(pk);
    ck_assert(pf);
    cJSON *tj = cJSON_Parse(cg_st_metadata(pf, "train"));
    cJSON *pm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"),
                                                 "pad_to_multiple");
    ck_assert(cJSON_IsNumber(pm) && pm->valuedouble == 8);
    cJSON_Delete(tj);
    cg_st_close(pf);
    snprintf(args, sizeof args, "train --resume '%s' --pad-to-multiple 4", pk);
    expect_cli_error(args, "drop --pad-to-multiple");
    snprintf(args, sizeof args, "train --resume '%s' --test-limit 0 --threads 1", pk);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "resume failed: %s", err);
    free(out);
    free(err);
    ck_assert(same_params(pk, pstraight));
    /* and it takes effect: the same 6 steps unpadded end elsewhere */
    char punpadded[PATH_MAX];
    snprintf(punpadded, sizeof punpadded, "%s", tmp_path("p1.safetensors"));
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s' --steps 6 %s",
             tmp_path("small.tsv"), punpadded, common);
    rc = run(args, NULL, &out, &err);
    ck_assert_msg(rc == 0, "train failed: %s", err);
    free(out);
    free(err);
    ck_assert_msg(!same_params(punpadded, pstraight), "--pad-to-multiple 8 changed nothing");
    snprintf(args, sizeof args,
             "train --tokenizer char --data '%s' --out '%s' --pad-to-multiple 0 %s",
             tmp_path("small.tsv"), tmp_path("p0.st"), common);
    expect_cli_error(args, "--pad-to-multiple");
    /* damaged positions */
    const struct {
        const char *key;
        double v;
    } bad[] = {{"epoch", 0}, {"pos", 0}, {"epoch", 1e15}, {"pos", 1e9}, {"epoch", -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        edit_state_copy(ck, tmp_path("bad.safetensors"), bad[i].key, bad[i].v);
        if (i == 1) /* epoch 0 with a position inside it */
            edit_state_copy(tmp_path("bad.safetensors"), tmp_path("bad.safetensors"), "epoch", 0);
        snprintf(args, sizeof args, "train --resume '%s' --test-limit 0 --threads 1",
                 tmp_path("bad.safetensors"));
        expect_cli_error(args, "bad.safetensors");
    }
    /* pairs of empty sides: refused while the pairs are read, before any
     * training (models/data/pairs.c; every save would fail) */
    char empty[64 * 2 + 1] = "";
    for (int i = 0; i < 64; i++)
        strcat(empty, "\t\n");
    write_file(tmp_path("empty.tsv"), empty, strlen(empty));
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s' %s",
             tmp_path("empty.tsv"), tmp_path("e.st"), common);
    expect_cli_error(args, "empty source");
    /* the output, before any training */
    snprintf(args, sizeof args, "train --data '%s' --out '%s/' %s", tmp_path("small.tsv"),
             tmp_path("newdir"), common);
    expect_cli_error(args, "names a directory");
    snprintf(args, sizeof args, "train --data '%s' --out '%s/x.st' %s", tmp_path("small.tsv"),
             tmp_path("small.tsv"), common);
    expect_cli_error(args, "not a directory");
    ck_assert_int_eq(mkfifo(tmp_path("fifo"), 0600), 0);
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s' --force %s",
             tmp_path("small.tsv"), tmp_path("fifo"), common);
    expect_cli_error(args, "a checkpoint replaces only a regular file");
    char longname[300];
    memset(longname, 'x', 250);
    strcpy(longname + 250, ".st");
    snprintf(args, sizeof args, "train --tokenizer char --data '%s' --out '%s' %s",
             tmp_path("small.tsv"), tmp_path(longname), common);
    expect_cli_error(args, "at most");
}
END_TEST

static Suite *seq2seq_suite(void)
{
    Suite *s = suite_create("seq2seq");
    TCase *tc = tcase_create("data");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_mt_matches_numpy);
    tcase_add_test(tc, test_pairs_parse_ok);
    tcase_add_test(tc, test_pairs_read_errors);
    tcase_add_test(tc, test_split_and_batches);
    tcase_add_test(tc, test_pairs_add_extra);
    tcase_add_test(tc, test_mt_data_order);
    tcase_add_test(tc, test_max_len_counts_bpe_tokens);
    tcase_add_test(tc, test_tokenize_once);
    tcase_add_test(tc, test_batch_longer_than_recorded);
    tcase_add_test(tc, test_prog_helpers);
    suite_add_tcase(s, tc);
    tc = tcase_create("decode");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, overfit_setup, NULL);
    tcase_add_test(tc, test_overfit_greedy_exact);
    tcase_add_test(tc, test_beam1_equals_greedy);
    tcase_add_test(tc, test_sample_decode);
    tcase_add_test(tc, test_sample_decode_no_pad);
    tcase_add_test(tc, test_translate_many);
    tcase_add_test(tc, test_translate_interrupted);
    tcase_add_test(tc, test_translate_test_report);
    tcase_add_test(tc, test_beam_not_worse_than_greedy);
    tcase_add_test(tc, test_beam_nbest);
    tcase_add_test(tc, test_cache_matches_recompute);
    tcase_add_test(tc, test_decode_bad_input);
    tcase_add_test(tc, test_decoded_pad_masked);
    tcase_add_test(tc, test_greedy_pad_after_a_row_ended);
    tcase_add_test(tc, test_decode_ties);
    tcase_add_test(tc, test_beam_matches_reference_search);
    tcase_add_test(tc, test_beam_finishes_past_beam_minus_one);
    tcase_add_test(tc, test_translate_score_bleu_order);
    tcase_add_test(tc, test_translation_length_limit);
    tcase_add_test(tc, test_translate_all_sources_end_with_eos);
    tcase_add_test(tc, test_decode_nonfinite_last_position);
    tcase_add_test(tc, test_grad_accum_per_token);
    tcase_add_test(tc, test_grad_accum_fused_head_once);
    tcase_add_test(tc, test_pad_to_multiple);
    tcase_add_test(tc, test_word_dropout);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_cli_bad_flags);
    tcase_add_test(tc, test_cli_end_to_end);
    tcase_add_test(tc, test_cli_translate_nbest);
    tcase_add_test(tc, test_cli_optimizer_flags);
    tcase_add_test(tc, test_cli_nonfinite);
    tcase_add_test(tc, test_cli_curve_before_first_evaluation);
    tcase_add_test(tc, test_cli_resume_and_output_rules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {seq2seq_suite()};
    int rc = cg_test_run(s, 1);
    cg_seq2seq_free(g_model);
    cg_pair_vocab_free(&g_vocab);
    cg_pairs_free(&g_pairs);
    return rc;
}
