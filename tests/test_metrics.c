/* Tests for models/report/metrics.{h,c}: hand-checked BLEU/chrF values and a
 * cross-check against shared/reference/metrics.py on 310 real pairs
 * (tests/data/metrics_*.txt, written by scripts/make_metrics_cases.py).
 * A second suite checks models/report/plot.{h,c}: the PNGs are read back with
 * libpng and their pixels inspected, the SVGs checked as XML and for their
 * labels. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <plplot.h>
#include <png.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/tensor.h"
#include "models/report/metrics.h"
#include "models/report/plot.h"
#include "models/text/vocab.h"
#include "testutil.h"

#define TOL 1e-9

/* ------------------------------------------------------------ test data */

/* Open tests/data/NAME whether the test runs from the build directory, the
 * source root or elsewhere: the environment variable CG_TEST_DATA or the
 * macro CG_TEST_DATA_DIR may name the directory. */
static FILE *open_data(const char *name)
{
    char path[4096];
    const char *env = getenv("CG_TEST_DATA");
#ifdef CG_TEST_DATA_DIR
    if (!env)
        env = CG_TEST_DATA_DIR;
#endif
    if (env) {
        snprintf(path, sizeof path, "%s/%s", env, name);
        return fopen(path, "r");
    }
    /* __FILE__ is this file's path as the compiler saw it */
    const char *file = __FILE__, *slash = strrchr(file, '/');
    int dirlen = slash ? (int)(slash - file) : 1;
    snprintf(path, sizeof path, "%.*s/data/%s", dirlen, slash ? file : ".", name);
    FILE *f = fopen(path, "r");
    const char *guesses[] = {"tests/data", "../tests/data", "../../tests/data", "data"};
    for (size_t i = 0; !f && i < sizeof guesses / sizeof *guesses; i++) {
        snprintf(path, sizeof path, "%s/%s", guesses[i], name);
        f = fopen(path, "r");
    }
    return f;
}

typedef struct {
    int n;
    char **lines;
} lines_t;

static lines_t read_lines(const char *name)
{
    lines_t L = {0, NULL};
    FILE *f = open_data(name);
    ck_assert_msg(f != NULL, "cannot open tests/data/%s (set CG_TEST_DATA)", name);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int cap_lines = 0;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        if (len > 0 && buf[len - 1] == '\n')
            buf[--len] = '\0';
        if (L.n == cap_lines) {
            cap_lines = cap_lines ? 2 * cap_lines : 256;
            L.lines = realloc(L.lines, (size_t)cap_lines * sizeof *L.lines);
            ck_assert_ptr_nonnull(L.lines);
        }
        L.lines[L.n++] = strdup(buf);
    }
    free(buf);
    fclose(f);
    return L;
}

static void free_lines(lines_t *L)
{
    for (int i = 0; i < L->n; i++)
        free(L->lines[i]);
    free(L->lines);
}

/* cases: hyps[i] and refs[i] point into the lines (split at the tab). */
static void split_cases(lines_t *L, const char **hyps, const char **refs)
{
    for (int i = 0; i < L->n; i++) {
        char *tab = strchr(L->lines[i], '\t');
        ck_assert_msg(tab != NULL, "metrics_cases.tsv line %d has no tab", i + 1);
        *tab = '\0';
        hyps[i] = L->lines[i];
        refs[i] = tab + 1;
    }
}

/* ------------------------------------------------------------ 13a */

static void check_tok(const char *in, const char *expect)
{
    char *got = cg_tokenize_13a(in);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, expect);
    free(got);
}

START_TEST(test_tokenize_13a)
{
    check_tok("Hello, world. 3.5 - 4-5", "Hello , world . 3.5 - 4 - 5");
    check_tok("", "");
    check_tok("   ", "");
    check_tok("3,50 Euro, d.h. viel.", "3,50 Euro , d . h . viel .");
    check_tok("A &amp; B &quot;x&quot; &lt;y&gt;", "A & B \" x \" < y >");
    check_tok("a<skipped>b", "ab");
    check_tok("line-\nbreak\nhere", "linebreak here");
    /* ' and - inside words stay, other ASCII punctuation splits */
    check_tok("don't re-enter (now)!", "don't re-enter ( now ) !");
    /* x.5: '.' after a non-digit splits; 10.000,5 stays whole */
    check_tok("x.5 10.000,5", "x . 5 10.000,5");
    /* re.sub does not overlap matches: the second '.' of "a.." is handled by
     * the next rule only */
    check_tok("a..b", "a . . b");
    /* Unicode whitespace splits as in Python; non-ASCII punctuation does not */
    check_tok("Gr\xc3\xb6\xc3\x9f"
              "e\xc2\xa0\xc3\xa4nderte\xe3\x80\x80x",
              "Gr\xc3\xb6\xc3\x9f"
              "e \xc3\xa4nderte x");
    check_tok("\xe2\x80\x9eZitat\xe2\x80\x9c", "\xe2\x80\x9eZitat\xe2\x80\x9c");
    cg_clear_error();
    ck_assert_ptr_null(cg_tokenize_13a(NULL));
    ck_assert(cg_has_error());
    cg_clear_error();
}
END_TEST

/* ------------------------------------------------------------ hand cases */

START_TEST(test_bleu_hand)
{
    const char *same[] = {"The cat sat on the mat.", "Es gibt sie in allen Gr\xc3\xb6\xc3\x9f"
                                                     "en."};
    ck_assert_double_eq_tol(cg_bleu(2, same, same), 100.0, TOL);

    /* the reference minus its last word: all precisions 1, brevity 5/6 */
    const char *h1[] = {"the cat sat on the"}, *r1[] = {"the cat sat on the mat"};
    ck_assert_double_eq_tol(cg_bleu(1, h1, r1), 100.0 * exp(1.0 - 6.0 / 5.0), TOL);

    /* "the cat the cat" vs "the cat sat on the mat":
     * 1-grams the 2/2 + cat 1/2 -> 3/4; 2-grams "the cat" 1 of 2, "cat the"
     * 0 -> 1/3; 3- and 4-grams no match -> 'exp' smoothing 1/(2*2), 1/(4*1);
     * brevity exp(1 - 6/4). */
    const char *h2[] = {"the cat the cat"}, *r2[] = {"the cat sat on the mat"};
    double expect =
        exp(1.0 - 1.5) * exp((log(75.0) + log(100.0 / 3.0) + log(25.0) + log(25.0)) / 4);
    ck_assert_double_eq_tol(cg_bleu(1, h2, r2), expect, TOL);

    /* corpus statistics are summed before the geometric mean: two sentences,
     * one perfect (4 tokens), one with nothing in common (4 tokens) ->
     * p1 = 4/8, p2 = 3/6, p3 = 2/4, p4 = 1/2, no brevity penalty -> 50 */
    const char *h3[] = {"a b c d", "w x y z"}, *r3[] = {"a b c d", "e f g h"};
    ck_assert_double_eq_tol(cg_bleu(2, h3, r3), 50.0, TOL);

    /* a hypothesis shorter than 4 tokens has no 4-grams: BLEU 0 */
    const char *h4[] = {"a b c"}, *r4[] = {"a b c"};
    ck_assert_double_eq(cg_bleu(1, h4, r4), 0.0);

    /* clipping: "the the the the" vs "the cat": 1-grams 1/4, rest smoothed */
    const char *h5[] = {"the the the the"}, *r5[] = {"the cat"};
    expect = exp((log(25.0) + log(100.0 / 6.0) + log(100.0 / 8.0) + log(100.0 / 8.0)) / 4);
    ck_assert_double_eq_tol(cg_bleu(1, h5, r5), expect, TOL);

    /* empty corpus, empty hypotheses */
    ck_assert_double_eq(cg_bleu(0, NULL, NULL), 0.0);
    const char *e[] = {""}, *r6[] = {"a b c d e"};
    ck_assert_double_eq(cg_bleu(1, e, r6), 0.0);
}
END_TEST

START_TEST(test_chrf_hand)
{
    const char *same[] = {"The cat sat on the mat.", "Es gibt sie in allen Gr\xc3\xb6\xc3\x9f"
                                                     "en."};
    ck_assert_double_eq_tol(cg_chrf(2, same, same), 100.0, TOL);

    /* "ab" vs "abc": 1-grams P=2/2 R=2/3, 2-grams P=1/1 R=1/2, 3-grams only
     * in the reference (order skipped) -> P=1, R=7/12, F2 = 5PR/(4P+R) = 7/11 */
    const char *h1[] = {"ab"}, *r1[] = {"abc"};
    ck_assert_double_eq_tol(cg_chrf(1, h1, r1), 700.0 / 11.0, TOL);

    /* whitespace (including U+00A0 and U+3000) is removed before counting */
    const char *h2[] = {"a b\xc2\xa0"
                        "c\xe3\x80\x80"
                        "d"},
               *r2[] = {"abcd"};
    ck_assert_double_eq_tol(cg_chrf(1, h2, r2), 100.0, TOL);

    /* code points, not bytes: "\xc3\xa4" "b" vs "\xc3\xa4" "c": 1-grams 1/2 both ways, 2-grams 0/1
     * -> P = R = (1/2 + 0)/2 = 1/4 -> F = 25 */
    const char *h3[] = {"\xc3\xa4"
                        "b"},
               *r3[] = {"\xc3\xa4"
                        "c"};
    ck_assert_double_eq_tol(cg_chrf(1, h3, r3), 25.0, TOL);

    /* nothing in common; empty sides */
    const char *h4[] = {"xyz"}, *r4[] = {"abc"};
    ck_assert_double_eq(cg_chrf(1, h4, r4), 0.0);
    const char *e[] = {""};
    ck_assert_double_eq(cg_chrf(1, e, r4), 0.0);
    ck_assert_double_eq(cg_chrf(1, h4, e), 0.0);
    ck_assert_double_eq(cg_chrf(0, NULL, NULL), 0.0);

    /* counts are clipped: "aaaa" vs "aa": 1-grams P=2/4 R=2/2, 2-grams P=1/3
     * R=1/1; 3- and 4-grams only in the hypothesis (skipped) -> P=5/12, R=1,
     * F2 = 5PR/(4P+R) = (25/12)/(32/12) = 25/32 */
    const char *h5[] = {"aaaa"}, *r5[] = {"aa"};
    ck_assert_double_eq_tol(cg_chrf(1, h5, r5), 100.0 * 25.0 / 32.0, TOL);
}
END_TEST

START_TEST(test_bad_input)
{
    const char *h[] = {"a", NULL}, *r[] = {"a", "b"};
    cg_clear_error();
    ck_assert_double_eq(cg_bleu(2, h, r), -1.0);
    ck_assert(strstr(cg_last_error(), "hyps[1]") != NULL);
    cg_clear_error();
    ck_assert_double_eq(cg_chrf(2, h, r), -1.0);
    ck_assert(strstr(cg_last_error(), "hyps[1]") != NULL);
    cg_clear_error();
    ck_assert_double_eq(cg_bleu(-1, r, r), -1.0);
    ck_assert(strstr(cg_last_error(), "negative") != NULL);
    cg_clear_error();
    ck_assert_double_eq(cg_chrf(1, NULL, r), -1.0);
    ck_assert(cg_has_error());
    cg_clear_error();
    /* invalid UTF-8 is counted byte by byte, never rejected */
    const char *bad[] = {"ab\xff\xfe"
                         "c"};
    ck_assert_double_eq_tol(cg_chrf(1, bad, bad), 100.0, TOL);
    ck_assert(!cg_has_error());
}
END_TEST

/* ------------------------------------------------------------ reference */

START_TEST(test_reference_tokens)
{
    lines_t cases = read_lines("metrics_cases.tsv");
    lines_t toks = read_lines("metrics_tokens.txt");
    ck_assert_int_eq(cases.n, 310);
    ck_assert_int_eq(toks.n, cases.n);
    const char **hyps = malloc((size_t)cases.n * sizeof *hyps);
    const char **refs = malloc((size_t)cases.n * sizeof *refs);
    split_cases(&cases, hyps, refs);
    for (int i = 0; i < cases.n; i++) {
        char *got = cg_tokenize_13a(hyps[i]);
        ck_assert_ptr_nonnull(got);
        ck_assert_msg(strcmp(got, toks.lines[i]) == 0, "line %d: got '%s', reference '%s'", i + 1,
                      got, toks.lines[i]);
        free(got);
    }
    free(hyps);
    free(refs);
    free_lines(&cases);
    free_lines(&toks);
}
END_TEST

START_TEST(test_reference_scores)
{
    lines_t cases = read_lines("metrics_cases.tsv");
    lines_t exp_ = read_lines("metrics_expected.txt");
    ck_assert_int_eq(cases.n, 310);
    ck_assert_int_ge(exp_.n, cases.n + 6);
    const char **hyps = malloc((size_t)cases.n * sizeof *hyps);
    const char **refs = malloc((size_t)cases.n * sizeof *refs);
    split_cases(&cases, hyps, refs);
    int nonzero_bleu = 0, nonzero_chrf = 0, perfect = 0;
    for (int k = 0; k < exp_.n; k++) {
        int start, count;
        double bleu, chrf;
        ck_assert_int_eq(sscanf(exp_.lines[k], "%d %d %lf %lf", &start, &count, &bleu, &chrf), 4);
        ck_assert(start >= 0 && count >= 0 && start + count <= cases.n);
        double b = cg_bleu(count, hyps + start, refs + start);
        double c = cg_chrf(count, hyps + start, refs + start);
        ck_assert_msg(fabs(b - bleu) <= TOL, "BLEU of lines %d..%d: %.17g, reference %.17g",
                      start + 1, start + count, b, bleu);
        ck_assert_msg(fabs(c - chrf) <= TOL, "chrF of lines %d..%d: %.17g, reference %.17g",
                      start + 1, start + count, c, chrf);
        nonzero_bleu += bleu > 0 && bleu < 100;
        nonzero_chrf += chrf > 0 && chrf < 100;
        perfect += fabs(bleu - 100.0) < 1e-9;
    }
    /* the data is not degenerate */
    ck_assert_int_gt(nonzero_bleu, 100);
    ck_assert_int_gt(nonzero_chrf, 200);
    ck_assert_int_gt(perfect, 10);
    free(hyps);
    free(refs);
    free_lines(&cases);
    free_lines(&exp_);
}
END_TEST

/* The counts of a corpus's parts added are the whole corpus's, and give
 * its scores to the last bit (train --eval-bleu's ranks each count their
 * share): the 310 real pairs cut into 1 to 7 parts, some empty. */
START_TEST(test_counts_add_up)
{
    lines_t cases = read_lines("metrics_cases.tsv");
    ck_assert_int_eq(cases.n, 310);
    const char **hyps = malloc((size_t)cases.n * sizeof *hyps);
    const char **refs = malloc((size_t)cases.n * sizeof *refs);
    split_cases(&cases, hyps, refs);
    const int n = cases.n;
    for (int parts = 1; parts <= 7; parts++) {
        cg_bleu_stats sum = {0}, part;
        cg_chrf_counts csum = {0}, cpart;
        for (int k = 0; k < parts; k++) {
            /* part k: [lo, hi); with 7 parts the first is empty */
            int lo = parts == 7 ? (k == 0 ? 0 : n * (k - 1) / 6) : n * k / parts;
            int hi = parts == 7 ? (k == 0 ? 0 : n * k / 6) : n * (k + 1) / parts;
            ck_assert(cg_bleu_count(hi - lo, hyps + lo, refs + lo, &part));
            ck_assert(cg_chrf_count(hi - lo, hyps + lo, refs + lo, &cpart));
            sum.hyp_len += part.hyp_len;
            sum.ref_len += part.ref_len;
            for (int g = 0; g < 4; g++) {
                sum.matches[g] += part.matches[g];
                sum.totals[g] += part.totals[g];
            }
            for (int g = 0; g < CG_CHRF_ORDER; g++) {
                csum.hyp[g] += cpart.hyp[g];
                csum.ref[g] += cpart.ref[g];
                csum.match[g] += cpart.match[g];
            }
        }
        cg_bleu_stats whole;
        ck_assert(cg_bleu_compute(n, hyps, refs, &whole));
        cg_bleu_finish(&sum);
        ck_assert_msg(sum.score == whole.score && sum.bp == whole.bp && sum.ratio == whole.ratio,
                      "%d parts: BLEU %.17g, whole %.17g", parts, sum.score, whole.score);
        for (int g = 0; g < 4; g++)
            ck_assert(sum.precisions[g] == whole.precisions[g]);
        ck_assert(cg_chrf_score(&csum) == cg_chrf(n, hyps, refs));
        ck_assert(whole.score > 0 && whole.score < 100 && cg_chrf_score(&csum) > 0);
    }
    /* an empty part counts nothing; a bad argument zeroes the counts */
    cg_chrf_counts c = {0};
    c.hyp[0] = 5;
    ck_assert(cg_chrf_count(0, NULL, NULL, &c) && c.hyp[0] == 0 && cg_chrf_score(&c) == 0.0);
    c.hyp[0] = 5;
    ck_assert(!cg_chrf_count(-1, hyps, refs, &c) && c.hyp[0] == 0);
    ck_assert(!cg_chrf_count(1, hyps, refs, NULL));
    cg_bleu_stats st = {.score = 7, .hyp_len = 3};
    ck_assert(cg_bleu_count(0, NULL, NULL, &st) && st.hyp_len == 0);
    cg_bleu_finish(&st);
    ck_assert(st.score == 0.0 && st.ratio == 0.0);
    free(hyps);
    free(refs);
    free_lines(&cases);
}
END_TEST

/* Inputs the 310 real pairs do not hold, each scored against
 * shared/reference/metrics.py (its corpus_bleu and corpus_chrf of the lines
 * decoded with errors="surrogateescape", printed with %.17g): U+001C..U+001F,
 * U+0085, U+200A and U+2028 as whitespace, bytes that are not UTF-8 kept apart (each its
 * own code point, not one U+FFFD for all), "&amp;quot;" unescaped once,
 * "-\n" and "<skipped>" removed before tokenising, '/' split off, a comma
 * after a letter split off before a digit, two
 * tokens in one hash slot of which one is a prefix of the other ("cat",
 * "catz"), and a reference exactly as long as a chrF order. */
START_TEST(test_reference_edges)
{
    static const struct {
        const char *hyp, *ref;
        double bleu, chrf;
    } c[] = {
        {"a\x1c"
         "b c d e",
         "a b c d e", 100.00000000000004, 100},
        {"ab\xff cd ef gh", "ab\xfe cd ef gh", 59.460355750136046, 56.005291005291006},
        {"x &amp;quot; y z w", "x &quot; y z w", 26.269098944241588, 69.605384582127144},
        {"re-\nenter the room now", "reenter the room now", 100.00000000000004, 87.794848195905089},
        {"a<skipped>b c d e", "ab c d e", 100.00000000000004, 39.151543989038537},
        {"a cat b catz", "a catz b catz", 35.35533905932737, 49.477358913609194},
        {"abcd", "abc", 0, 89.843749999999986},
        {"a\tb\x1f"
         "c\xe2\x80\xa8"
         "d e",
         "abcde", 5.3410875799529256, 100},
        {"50 km/h or 1/2", "50 km / h or 1 / 2", 100.00000000000004, 100},
        /* U+0085 and U+200A are whitespace to str.split() */
        {"a\xc2\x85"
         "b\xe2\x80\x8a"
         "c d e",
         "abcde", 5.3410875799529256, 100},
        {"x,5 y z w", "x , 5 y z w", 100.00000000000004, 100}, /* ',' after a letter */
    };
    enum { N = sizeof c / sizeof *c };
    const char *hyps[N], *refs[N];
    for (int i = 0; i < N; i++) {
        hyps[i] = c[i].hyp, refs[i] = c[i].ref;
        double b = cg_bleu(1, &c[i].hyp, &c[i].ref), f = cg_chrf(1, &c[i].hyp, &c[i].ref);
        ck_assert_msg(fabs(b - c[i].bleu) <= TOL, "BLEU of case %d: %.17g, reference %.17g", i, b,
                      c[i].bleu);
        ck_assert_msg(fabs(f - c[i].chrf) <= TOL, "chrF of case %d: %.17g, reference %.17g", i, f,
                      c[i].chrf);
    }
    ck_assert_double_eq_tol(cg_bleu(N, hyps, refs), 61.74483423469734, TOL);
    ck_assert_double_eq_tol(cg_chrf(N, hyps, refs), 76.64658497241876, TOL);
}
END_TEST

/* ------------------------------------------------------------ BLEU's statistics */

/* cg_bleu_compute's st against the values given (precisions to TOL, the
 * counts exactly) and cg_bleu's score bit for bit. */
static void check_stats(int n, const char *const *h, const char *const *r, const double p[4],
                        double bp, long long hyp_len, long long ref_len)
{
    cg_bleu_stats st;
    ck_assert(cg_bleu_compute(n, h, r, &st));
    double b = cg_bleu(n, h, r);
    ck_assert_msg(memcmp(&b, &st.score, sizeof b) == 0, "cg_bleu %.17g, its stats' score %.17g", b,
                  st.score);
    for (int g = 0; g < 4; g++)
        ck_assert_msg(fabs(st.precisions[g] - p[g]) <= TOL, "p%d: %.17g, expected %.17g", g + 1,
                      st.precisions[g], p[g]);
    ck_assert_double_eq_tol(st.bp, bp, TOL);
    ck_assert_int_eq(st.hyp_len, hyp_len);
    ck_assert_int_eq(st.ref_len, ref_len);
    ck_assert_double_eq(st.ratio, ref_len ? (double)hyp_len / (double)ref_len : 0.0);
    ck_assert_int_eq(st.totals[0], hyp_len);
}

START_TEST(test_bleu_stats_hand)
{
    /* test_bleu_hand's: 1-grams 3/4, 2-grams 1/3, 3- and 4-grams smoothed
     * 1/(2*2) and 1/(4*1); 4 tokens against 6 */
    const char *h2[] = {"the cat the cat"}, *r2[] = {"the cat sat on the mat"};
    check_stats(1, h2, r2, (double[]){75.0, 100.0 / 3.0, 25.0, 25.0}, exp(1.0 - 1.5), 4, 6);
    cg_bleu_stats st;
    ck_assert(cg_bleu_compute(1, h2, r2, &st));
    ck_assert(st.matches[0] == 3 && st.matches[1] == 1 && st.matches[2] == 0 && st.matches[3] == 0);
    ck_assert(st.totals[1] == 3 && st.totals[2] == 2 && st.totals[3] == 1);
    ck_assert_double_eq_tol(
        st.score, exp(1.0 - 1.5) * exp((log(75.0) + log(100.0 / 3.0) + log(25.0) + log(25.0)) / 4),
        TOL);
    /* a longer hypothesis: no brevity penalty, ratio above 1 */
    const char *h1[] = {"the cat sat on the mat ."}, *r1[] = {"the cat sat on the mat"};
    check_stats(1, h1, r1, (double[]){600.0 / 7, 500.0 / 6, 400.0 / 5, 300.0 / 4}, 1.0, 7, 6);
    /* no 4-gram in the hypotheses: the score and p4 are 0, p1..p3 kept */
    const char *h4[] = {"a b c"}, *r4[] = {"a b c d"};
    check_stats(1, h4, r4, (double[]){100, 100, 100, 0}, exp(1.0 - 4.0 / 3.0), 3, 4);
    ck_assert(cg_bleu_compute(1, h4, r4, &st) && st.score == 0.0);
    /* empty hypotheses: bp 0 (sacreBLEU's), every precision 0 */
    const char *e[] = {"", ""}, *r6[] = {"a b c d e", "f"};
    check_stats(2, e, r6, (double[]){0, 0, 0, 0}, 0.0, 0, 6);
    /* no sentence, and empty lines on both sides: bp 1, ratio 0 */
    check_stats(0, NULL, NULL, (double[]){0, 0, 0, 0}, 1.0, 0, 0);
    check_stats(2, e, e, (double[]){0, 0, 0, 0}, 1.0, 0, 0);
    /* not one match (metrics.h: sacreBLEU would stop at 0): every order
     * smoothed, 1/(2*4), 1/(4*3), 1/(8*2), 1/(16*1) */
    const char *hx[] = {"a b c d"}, *rx[] = {"e f g h"};
    check_stats(1, hx, rx, (double[]){12.5, 100.0 / 12, 6.25, 6.25}, 1.0, 4, 4);
    /* bad arguments: false, st zero, the error said */
    const char *hn[] = {NULL};
    cg_clear_error();
    st.score = 5;
    ck_assert(!cg_bleu_compute(1, hn, r1, &st));
    ck_assert(strstr(cg_last_error(), "hyps[0]") != NULL);
    ck_assert(st.score == 0 && st.hyp_len == 0 && st.bp == 0);
    cg_clear_error();
    ck_assert(!cg_bleu_compute(1, h1, r1, NULL));
    ck_assert(cg_has_error());
    cg_clear_error();
}
END_TEST

/* On every slice of the 310 real pairs (metrics_expected.txt's): cg_bleu
 * is its stats' score bit for bit, and the precisions, brevity penalty and
 * ratio are what the counts give (sacreBLEU's compute_bleu). */
START_TEST(test_bleu_stats_reference)
{
    lines_t cases = read_lines("metrics_cases.tsv");
    lines_t exp_ = read_lines("metrics_expected.txt");
    const char **hyps = malloc((size_t)cases.n * sizeof *hyps);
    const char **refs = malloc((size_t)cases.n * sizeof *refs);
    split_cases(&cases, hyps, refs);
    int short_ones = 0, smoothed = 0;
    for (int k = 0; k < exp_.n; k++) {
        int start, count;
        ck_assert_int_eq(sscanf(exp_.lines[k], "%d %d", &start, &count), 2);
        cg_bleu_stats st;
        ck_assert(cg_bleu_compute(count, hyps + start, refs + start, &st));
        double b = cg_bleu(count, hyps + start, refs + start);
        ck_assert_msg(memcmp(&b, &st.score, sizeof b) == 0, "lines %d..%d: %.17g against %.17g",
                      start + 1, start + count, b, st.score);
        long long k2 = 1;
        for (int g = 0; g < 4 && st.totals[g] > 0; g++) {
            double p = st.matches[g] ? 100.0 * (double)st.matches[g] / (double)st.totals[g]
                                     : 100.0 / (double)((k2 *= 2) * st.totals[g]);
            ck_assert(st.precisions[g] == p);
            smoothed += st.matches[g] == 0;
        }
        double bp = st.hyp_len >= st.ref_len ? 1.0
                    : st.hyp_len == 0        ? 0.0
                                             : exp(1 - (double)st.ref_len / (double)st.hyp_len);
        ck_assert(st.bp == bp);
        short_ones += st.bp < 1;
    }
    ck_assert_int_gt(short_ones, 10); /* the data has both cases */
    ck_assert_int_gt(smoothed, 5);
    free(hyps);
    free(refs);
    free_lines(&cases);
    free_lines(&exp_);
}
END_TEST

/* ------------------------------------------------------------ plot */

static char plot_dir[PATH_MAX];

static void plot_setup(void) { cg_test_mkdtemp(plot_dir, sizeof plot_dir, "cg_test_plot_"); }

static void plot_teardown(void)
{
    DIR *d = opendir(plot_dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX + 300];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", plot_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(plot_dir);
}

/* Files in the test directory (to see that no temporary file is left). */
static int dir_entries(void)
{
    DIR *d = opendir(plot_dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' || strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

typedef struct {
    int w, h;
    unsigned char *rgb;
} image_t;

static image_t read_png(const char *path)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    ck_assert_msg(png_image_begin_read_from_file(&im, path), "cannot read %s", path);
    im.format = PNG_FORMAT_RGB;
    image_t out = {(int)im.width, (int)im.height, malloc(PNG_IMAGE_SIZE(im))};
    ck_assert_ptr_nonnull(out.rgb);
    ck_assert(png_image_finish_read(&im, NULL, out.rgb, 0, NULL));
    return out;
}

/* Whether two pictures are the same, pixel for pixel */
static bool same_pixels(const image_t *a, const image_t *b)
{
    return a->w == b->w && a->h == b->h &&
           memcmp(a->rgb, b->rgb, (size_t)a->w * (size_t)a->h * 3) == 0;
}

static uint32_t pixel(const image_t *im, int x, int y)
{
    const unsigned char *p = im->rgb + ((size_t)y * (size_t)im->w + (size_t)x) * 3;
    return ((uint32_t)p[0] << 16) | ((uint32_t)p[1] << 8) | p[2];
}

static int count_color(const image_t *im, uint32_t rgb)
{
    int n = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++)
            n += pixel(im, x, y) == rgb;
    return n;
}

START_TEST(test_colormap)
{
    ck_assert_uint_eq(cg_plot_colormap(0.0f), 0x440154);
    ck_assert_uint_eq(cg_plot_colormap(1.0f), 0xFDE725);
    ck_assert_uint_eq(cg_plot_colormap(-3.0f), 0x440154);
    ck_assert_uint_eq(cg_plot_colormap(7.0f), 0xFDE725);
    ck_assert_uint_eq(cg_plot_colormap(NAN), 0x440154);
    /* brightness rises along the scale, so it reads in grey too */
    double last = -1;
    for (int i = 0; i <= 100; i++) {
        uint32_t c = cg_plot_colormap((float)i / 100.0f);
        double lum = 0.299 * (c >> 16) + 0.587 * ((c >> 8) & 0xFF) + 0.114 * (c & 0xFF);
        ck_assert_msg(lum > last, "luminance falls at t = %d/100", i);
        last = lum;
    }
}
END_TEST

/* Pixels within a small distance of rgb (line cores and glyphs are
 * anti-aliased, so exact matches undercount). */
static int count_near(const image_t *im, uint32_t rgb, int tol)
{
    int n = 0;
    for (int y = 0; y < im->h; y++) {
        for (int x = 0; x < im->w; x++) {
            uint32_t p = pixel(im, x, y);
            int d = 0;
            for (int k = 0; k < 24; k += 8) {
                int a = (int)((p >> k) & 0xFF), b = (int)((rgb >> k) & 0xFF);
                d += abs(a - b);
            }
            n += d <= tol;
        }
    }
    return n;
}

/* Dark (text) pixels in the rectangle [x0, x1) x [y0, y1). */
static int count_dark(const image_t *im, int x0, int y0, int x1, int y1)
{
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            uint32_t p = pixel(im, x, y);
            n += (p >> 16) < 0x80 && ((p >> 8) & 0xFF) < 0x80 && (p & 0xFF) < 0x80;
        }
    return n;
}

/* Distinct colours (capped at 1000): a blank or flat picture has very few. */
static int distinct_colors(const image_t *im)
{
    enum { CAP = 1000 };
    uint32_t seen[CAP];
    int n = 0;
    for (int i = 0; i < im->w * im->h && n < CAP; i++) {
        uint32_t p = pixel(im, i % im->w, i / im->w);
        int j = 0;
        while (j < n && seen[j] != p)
            j++;
        if (j == n)
            seen[n++] = p;
    }
    return n;
}

/* Every picture is drawn in a child process (plot.c): an error the child
 * records comes back as the message; a child that dies (here SIGXFSZ,
 * under a file-size limit, in a process of this test's own) is an error
 * naming the signal, its temporary file removed, and the caller lives on. */
START_TEST(test_plot_apart)
{
    float y[4] = {4, 3, 2, 1};
    cg_plot_series s = {"train", NULL, y, 4, 0, 0, 0};
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/no/such/dir/loss.png", plot_dir);
    cg_clear_error();
    ck_assert(!cg_plot_loss_curve(path, "t", 1, &s));
    ck_assert_msg(strstr(cg_last_error(), "cannot create a temporary file next to"), "%s",
                  cg_last_error());
    snprintf(path, sizeof path, "%s/small.png", plot_dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {4096, 4096}; /* the PNG is about 20 KB */
        signal(SIGXFSZ, SIG_DFL);
        setrlimit(RLIMIT_FSIZE, &rl);
        bool ok = cg_plot_loss_curve(path, "t", 1, &s);
        bool named = strstr(cg_last_error(), "died of signal 25") != NULL;
        _exit(!ok && named && dir_entries() == 0 ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    ck_assert_int_eq(dir_entries(), 0);
}
END_TEST

/* A picture of numbers held in tensor buffers (cg_alloc's blocks, which the
 * drawing process does not get: core/tensor.h cg_fork_without_buffers) and
 * labels and names there too: drawn from the plot's own copy, as from
 * malloc'd memory. */
START_TEST(test_plot_from_tensor_memory)
{
    enum { N = 20000, R = 96, C = 96 };
    float *y = cg_alloc(N * sizeof *y), *v = cg_alloc(R * C * sizeof *v);
    char *names = cg_alloc(64 << 10), **labels = cg_alloc((64 << 10) + R * sizeof *labels);
    ck_assert(y && v && names && labels);
    for (int i = 0; i < N; i++)
        y[i] = 4.0f / (1.0f + 0.001f * (float)i);
    for (int i = 0; i < R * C; i++)
        v[i] = (float)(i % C) / C;
    snprintf(names, 64 << 10, "train");
    char *text = (char *)(labels + R);
    for (int r = 0; r < R; r++) {
        labels[r] = text + 4 * r;
        snprintf(labels[r], 4, "%c", 'a' + r % 26);
    }
    cg_plot_series s = {names, NULL, y, N, 0, 0, 0};
    cg_heatmap_panel p = {
        names, R, C, v, (const char *const *)labels, (const char *const *)labels, NULL, NULL};
    char path[PATH_MAX + 64], heat[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/tensor.png", plot_dir);
    snprintf(heat, sizeof heat, "%s/tensor_heat.png", plot_dir);
    ck_assert_msg(cg_plot_loss_curve(path, names, 1, &s), "%s", cg_last_error());
    ck_assert_msg(cg_plot_heatmaps(heat, names, 1, 1, &p, 0, 1), "%s", cg_last_error());
    image_t im = read_png(path), ih = read_png(heat);
    ck_assert_int_eq(im.w, 900);
    ck_assert_int_gt(ih.w, 0);
    free(im.rgb);
    free(ih.rgb);
    cg_free(labels);
    cg_free(names);
    cg_free(v);
    cg_free(y);
}
END_TEST

/* A picture's file mode is the checkpoint's: 0666 less the umask (a fixed
 * 0644 made it 0644 under umask 002, where the checkpoint and the metrics
 * log beside it were 0664), and a picture replaced keeps the old file's
 * mode (0640 became 0644). */
START_TEST(test_plot_file_mode)
{
    float y[4] = {4, 3, 2, 1};
    cg_plot_series s = {"train", NULL, y, 4, 0, 0, 0};
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/mode.png", plot_dir);
    mode_t old_mask = umask(002);
    ck_assert_msg(cg_plot_loss_curve(path, "t", 1, &s), "%s", cg_last_error());
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert_msg((st.st_mode & 0777) == 0664, "mode %o under umask 002", st.st_mode & 0777);
    ck_assert(chmod(path, 0640) == 0);
    ck_assert_msg(cg_plot_loss_curve(path, "t", 1, &s), "%s", cg_last_error());
    ck_assert(stat(path, &st) == 0);
    ck_assert_msg((st.st_mode & 0777) == 0640, "mode %o of a replaced 0640 picture",
                  st.st_mode & 0777);
    umask(old_mask);
    ck_assert(unlink(path) == 0);
}
END_TEST

START_TEST(test_loss_curve_png)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/loss.png", plot_dir);
    enum { N = 500 };
    float x[N], y[N], vy[10], vx[10];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i * 10);
        y[i] = 1.0f + 3.0f * expf(-(float)i / 100.0f);
    }
    for (int i = 0; i < 10; i++) {
        vx[i] = (float)(i * 500);
        vy[i] = 1.5f + 3.0f * expf(-(float)i / 2.0f);
    }
    y[200] = NAN; /* skipped, breaks the line */
    cg_plot_series s[2] = {{"train", x, y, N, 0xFF0000, 0, 0}, {"valid", vx, vy, 10, 0, 0, 0}};
    cg_clear_error();
    ck_assert_msg(cg_plot_loss_curve(path, "Loss \xc3\x9c", 2, s), "%s", cg_last_error());
    ck_assert_int_eq(dir_entries(), 1);
    image_t im = read_png(path);
    ck_assert_int_eq(im.w, 900);
    ck_assert_int_eq(im.h, 560);
    ck_assert_uint_eq(pixel(&im, 0, 0), 0xFFFFFF);
    ck_assert_uint_eq(pixel(&im, im.w - 1, im.h - 1), 0xFFFFFF);
    ck_assert_int_gt(distinct_colors(&im), 50);
    /* the red series and the first palette colour are drawn */
    ck_assert_int_gt(count_near(&im, 0xFF0000, 60), 500);
    ck_assert_int_gt(count_near(&im, 0x1F5FBF, 60), 100);
    /* the title is dark text in the top band, centred */
    ck_assert_int_gt(count_dark(&im, im.w / 3, 0, 2 * im.w / 3, 40), 80);
    ck_assert_int_eq(count_dark(&im, 0, 0, im.w / 4, 25), 0);
    /* tick labels left of the plot and below it */
    ck_assert_int_gt(count_dark(&im, 0, 60, 70, im.h - 80), 100);
    ck_assert_int_gt(count_dark(&im, 100, im.h - 60, im.w - 40, im.h), 100);
    free(im.rgb);

    /* overwriting works, and x = NULL means 0..n-1; explicit log axis */
    cg_plot_opts o = {"log", "x", "y", CG_PLOT_Y_LOG, 400, 300};
    cg_plot_series s2 = {NULL, NULL, y, N, 0x00AA00, 0, 0};
    ck_assert_msg(cg_plot_lines(path, &o, 1, &s2), "%s", cg_last_error());
    im = read_png(path);
    ck_assert_int_eq(im.w, 400);
    ck_assert_int_eq(im.h, 300);
    ck_assert_int_gt(count_near(&im, 0x00AA00, 60), 200);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);

    /* markers: a disc of diameter 9 at each of 5 points (and one in the
     * legend) adds at least 6 x 40 pixels of the colour */
    float mx[5] = {0, 100, 200, 300, 400}, my[5] = {4, 3, 2.5f, 2.2f, 2};
    cg_plot_series m[2] = {{"thin", x, y, N, 0x00AA00, 0.8f, 0},
                           {"marked", mx, my, 5, 0xAA00AA, 1.0f, 0}};
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    int plain = count_near(&im, 0xAA00AA, 60), thin = count_near(&im, 0x00AA00, 60);
    free(im.rgb);
    m[1].marker = 9.0f;
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    int marked = count_near(&im, 0xAA00AA, 60);
    free(im.rgb);
    ck_assert_msg(marked > plain + 6 * 40, "marked %d, plain %d", marked, plain);
    m[0].width = 3.0f; /* a wider line covers more pixels */
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    ck_assert_int_gt(count_near(&im, 0x00AA00, 60), thin + 500);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

START_TEST(test_heatmap_png)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/attn.png", plot_dir);
    float v[4] = {0.0f, 1.0f, NAN, 0.5f};
    const char *rows[] = {"a", " "};
    const uint32_t cols[] = {0xE4, 'b'};
    cg_heatmap_panel p[2] = {{"head 0", 2, 2, v, rows, NULL, NULL, cols}, {0}};
    ck_assert_msg(cg_plot_heatmaps(path, "attention", 1, 2, p, 0.0f, 1.0f), "%s", cg_last_error());
    image_t im = read_png(path);
    ck_assert_uint_eq(pixel(&im, 0, 0), 0xFFFFFF);
    /* cells are 18 x 18 pixels at this size: the inside of each (its edges
     * are anti-aliased) has exactly the colour of its value */
    ck_assert_int_ge(count_color(&im, 0x440154), 15 * 15);
    ck_assert_int_ge(count_color(&im, 0xFDE725), 15 * 15);
    ck_assert_int_ge(count_color(&im, cg_plot_colormap(0.5f)), 15 * 15);
    ck_assert_int_ge(count_color(&im, 0xC8C8C8), 15 * 15); /* NaN */
    /* the colour bar shows the whole scale */
    ck_assert_int_gt(count_near(&im, cg_plot_colormap(0.25f), 30), 10);
    ck_assert_int_gt(count_near(&im, cg_plot_colormap(0.75f), 30), 10);
    free(im.rgb);
    /* automatic range: the same picture when the data spans [0, 1] */
    ck_assert(cg_plot_heatmaps(path, NULL, 1, 1, p, 0.0f, 0.0f));
    im = read_png(path);
    ck_assert_int_ge(count_color(&im, 0xFDE725), 15 * 15);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

/* Pixels near rgb (count_near's distance) in columns [x0, x1). */
static int count_near_box(const image_t *im, uint32_t rgb, int tol, int x0, int x1)
{
    int n = 0;
    for (int y = 0; y < im->h; y++) {
        for (int x = x0; x < x1; x++) {
            uint32_t p = pixel(im, x, y);
            int d = 0;
            for (int k = 0; k < 24; k += 8)
                d += abs((int)((p >> k) & 0xFF) - (int)((rgb >> k) & 0xFF));
            n += d <= tol;
        }
    }
    return n;
}

/* The bounding box of the pixels of exactly rgb in columns [x0, x1). */
static void color_box(const image_t *im, uint32_t rgb, int x0, int x1, int box[4])
{
    box[0] = box[1] = INT32_MAX;
    box[2] = box[3] = -1;
    for (int y = 0; y < im->h; y++)
        for (int x = x0; x < x1; x++)
            if (pixel(im, x, y) == rgb) {
                box[0] = x < box[0] ? x : box[0];
                box[1] = y < box[1] ? y : box[1];
                box[2] = x > box[2] ? x : box[2];
                box[3] = y > box[3] ? y : box[3];
            }
}

/* Panels of one token (a one-character prompt, an empty translation's
 * decoder): the one cell is filled with its colour (PLplot filled nothing
 * of a cell widened past the map on both sides), and the last panel's
 * title, wider than its map, stays clear of the colour bar (it ran over
 * it by the width of the row labels). */
START_TEST(test_heatmap_one_cell)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/one.png", plot_dir);
    float v[2] = {1.0f, 1.0f};
    const char *lab[] = {"\xe2\x96\x81Stra\xc3\x9f"
                         "e"};
    ck_assert_msg(cg_plot_attention(path, "t", 1, 2, 1, 1, v, lab, lab), "%s", cg_last_error());
    image_t im = read_png(path);
    ck_assert_int_ge(count_color(&im, 0xFDE725), 2 * 15 * 15);
    /* the two maps (the first in the left third of the picture) */
    int a[4], b[4];
    color_box(&im, 0xFDE725, 0, im.w / 3, a);
    color_box(&im, 0xFDE725, a[2] + 1, im.w, b);
    ck_assert_int_ge(a[2], 0);
    ck_assert_int_ge(b[2], 0);
    /* the colour bar right of them: its first column */
    int bar = b[2] + 1;
    while (bar < im.w && count_near_box(&im, cg_plot_colormap(0.5f), 30, bar, bar + 1) == 0)
        bar++;
    ck_assert_int_lt(bar, im.w);
    /* the title band above the maps: no title over the colour bar */
    ck_assert_msg(count_dark(&im, bar - 2, a[1] - 16, bar + 16, a[1] - 1) == 0,
                  "a panel title runs over the colour bar (at x = %d)", bar);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

/* ------------------------------------------------------------ SVG */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A small XML well-formedness check (elements nest and close in order,
 * attributes are quoted, character references are valid) that also
 * collects the text of every <text> element, character references decoded,
 * one string per element, into texts (joined with '\n'). Returns the number
 * of elements, or -1 with a reason in err. */
static int xml_check(const char *s, char *texts, size_t tcap, char *err, size_t ecap)
{
    char stack[64][32];
    int depth = 0, elements = 0, in_text = 0;
    size_t tn = 0;
    texts[0] = '\0';
    for (const char *p = s; *p;) {
        if (*p != '<') {
            if (*p == '&') {
                unsigned long c;
                char *end;
                if (p[1] == '#' && p[2] == 'x')
                    c = strtoul(p + 3, &end, 16);
                else if (p[1] == '#')
                    c = strtoul(p + 2, &end, 10);
                else {
                    end = strchr((char *)p, ';');
                    c = end ? '?' : 0;
                }
                if (!end || *end != ';' || c == 0 || c > 0x10FFFF) {
                    snprintf(err, ecap, "bad reference at %ld", (long)(p - s));
                    return -1;
                }
                if (in_text && tn + 5 < tcap) {
                    char u[5] = {0};
                    tn += (size_t)cg_utf8_put((uint32_t)c, u);
                    strcat(texts, u);
                }
                p = end + 1;
            } else {
                if (in_text && tn + 2 < tcap && *p != '\n') {
                    texts[tn++] = *p;
                    texts[tn] = '\0';
                }
                p++;
            }
            continue;
        }
        if (strncmp(p, "<?", 2) == 0 || strncmp(p, "<!", 2) == 0) {
            const char *e = strchr(p, '>');
            if (!e) {
                snprintf(err, ecap, "unterminated declaration");
                return -1;
            }
            p = e + 1;
            continue;
        }
        bool closing = p[1] == '/';
        const char *n = p + 1 + closing;
        size_t k = strcspn(n, " \t\r\n/>");
        if (k == 0 || k >= 32) {
            snprintf(err, ecap, "bad tag name at %ld", (long)(p - s));
            return -1;
        }
        /* attributes: name="value" pairs up to > or /> */
        const char *q = n + k;
        char quote = 0;
        while (*q && (quote || *q != '>')) {
            if (quote && *q == quote)
                quote = 0;
            else if (!quote && (*q == '"' || *q == '\''))
                quote = *q;
            else if (!quote && *q == '<') {
                snprintf(err, ecap, "'<' inside a tag at %ld", (long)(q - s));
                return -1;
            }
            q++;
        }
        if (!*q) {
            snprintf(err, ecap, "unterminated tag at %ld", (long)(p - s));
            return -1;
        }
        bool self = q[-1] == '/';
        if (closing) {
            if (depth == 0 || strlen(stack[depth - 1]) != k ||
                strncmp(stack[depth - 1], n, k) != 0) {
                snprintf(err, ecap, "</%.*s> does not close <%s>", (int)k, n,
                         depth ? stack[depth - 1] : "(none)");
                return -1;
            }
            depth--;
            if (k == 4 && strncmp(n, "text", 4) == 0) {
                in_text = 0;
                if (tn + 2 < tcap) {
                    texts[tn++] = '\n';
                    texts[tn] = '\0';
                }
            }
        } else {
            elements++;
            if (!self) {
                if (depth == 64) {
                    snprintf(err, ecap, "nested too deep");
                    return -1;
                }
                memcpy(stack[depth], n, k);
                stack[depth++][k] = '\0';
                if (k == 4 && strncmp(n, "text", 4) == 0)
                    in_text = 1;
            }
        }
        p = q + 1;
    }
    if (depth != 0) {
        snprintf(err, ecap, "<%s> is not closed", stack[depth - 1]);
        return -1;
    }
    return elements;
}

static bool has_line(const char *texts, const char *want)
{
    size_t k = strlen(want);
    for (const char *p = texts; (p = strstr(p, want)); p++)
        if ((p == texts || p[-1] == '\n') && p[k] == '\n')
            return true;
    return false;
}

START_TEST(test_svg)
{
    char path[PATH_MAX + 64], err[200];
    static char texts[1 << 16];
    size_t len;
    snprintf(path, sizeof path, "%s/loss.SVG", plot_dir);
    float y[4] = {3, 2.5f, 2.2f, 2}, vy[2] = {2.8f, 2.1f}, vx[2] = {0, 3};
    cg_plot_series s[2] = {{"train <all> & \xe2\x96\x81", NULL, y, 4, 0, 0, 0},
                           {"valid", vx, vy, 2, 0, 2, 6}};
    ck_assert_msg(cg_plot_loss_curve(path, "Verlust \xc3\x9c #1", 2, s), "%s", cg_last_error());
    char *b = read_all(path, &len);
    ck_assert(strncmp(b, "<?xml", 5) == 0);
    ck_assert_ptr_nonnull(strstr(b, "<svg"));
    ck_assert_ptr_nonnull(strstr(b, "width=\"900"));
    int n = xml_check(b, texts, sizeof texts, err, sizeof err);
    ck_assert_msg(n > 20, "%s", err);
    ck_assert_msg(has_line(texts, "Verlust \xc3\x9c #1"), "texts: %s", texts);
    ck_assert(has_line(texts, "train <all> & \xe2\x96\x81"));
    ck_assert(has_line(texts, "valid"));
    ck_assert(has_line(texts, "step") && has_line(texts, "loss"));
    free(b);

    /* attention of subword tokens: every label is in the picture */
    snprintf(path, sizeof path, "%s/attn.svg", plot_dir);
    const char *src[] = {"\xe2\x96\x81The", "\xe2\x96\x81house", "</s>"};
    const char *tgt[] = {"<s>",
                         "\xe2\x96\x81"
                         "Das",
                         "\xe2\x96\x81"
                         "Haus",
                         "\xc3\x9f#"};
    float w[2 * 3 * 4 * 3];
    for (int i = 0; i < 2 * 3 * 4 * 3; i++)
        w[i] = (float)(i % 7) / 6.0f;
    ck_assert_msg(cg_plot_attention(path, "cross-attention", 2, 3, 4, 3, w, tgt, src), "%s",
                  cg_last_error());
    b = read_all(path, &len);
    n = xml_check(b, texts, sizeof texts, err, sizeof err);
    ck_assert_msg(n > 6 * 12, "%s", err);
    ck_assert(has_line(texts, "cross-attention"));
    ck_assert(has_line(texts, "layer 1 head 2"));
    for (int i = 0; i < 3; i++)
        ck_assert_msg(has_line(texts, src[i]), "%s missing from %s", src[i], texts);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(has_line(texts, tgt[i]), "%s missing", tgt[i]);
    free(b);
    ck_assert_int_eq(dir_entries(), 2);
}
END_TEST

/* Tick labels that differ by less than 3 significant digits: a flat loss
 * (a model that learns nothing: ln V with float noise) or steps past 10^7
 * read "2.3" or "1e+09" at every tick. Each tick's label is its own. */
START_TEST(test_tick_labels_distinct)
{
    char path[PATH_MAX + 64], err[200];
    static char texts[1 << 16];
    size_t len;
    snprintf(path, sizeof path, "%s/flat.svg", plot_dir);
    enum { N = 50 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = 1e9f + 64.0f * (float)i; /* steps of a long run, 64 apart in float */
        y[i] = 2.302585f + (float)(i % 3) * 1e-6f;
    }
    cg_plot_series s = {"train", x, y, N, 0, 0, 0};
    ck_assert_msg(cg_plot_loss_curve(path, NULL, 1, &s), "%s", cg_last_error());
    char *b = read_all(path, &len);
    ck_assert_msg(xml_check(b, texts, sizeof texts, err, sizeof err) > 10, "%s", err);
    /* the labels: every text but the axis names and the legend */
    const char *lab[64];
    int n = 0, ny = 0, nx = 0;
    for (char *p = texts, *e; *p && n < 64; p = e + 1) {
        e = strchr(p, '\n');
        ck_assert_ptr_nonnull(e);
        *e = '\0';
        if (strcmp(p, "step") && strcmp(p, "loss") && strcmp(p, "train") && *p) {
            ny += strncmp(p, "2.3", 3) == 0;
            nx += strncmp(p, "1", 1) == 0;
            lab[n++] = p;
        }
    }
    ck_assert_int_ge(ny, 3);
    ck_assert_int_ge(nx, 3);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(lab[i], lab[j]) != 0, "two ticks are labelled '%s'", lab[i]);
    free(b);
}
END_TEST

/* One axis, one style of tick label: the steps of a 20,000-step run read
 * "0 2500 5000 7500 10k 12500 15k 17500 20k" (the thousands of a tick
 * decided by its own value); those of 50 million "1e+07". */
START_TEST(test_tick_labels_one_style)
{
    static const struct {
        float xmax;
        const char *want;
    } cases[] = {{20000, "0|2.5k|5k|7.5k|10k|12.5k|15k|17.5k|20k|"},
                 {11000, "0|2k|4k|6k|8k|10k|12k|"},
                 {5e7f, "0|10M|20M|30M|40M|50M|"}};
    char path[PATH_MAX + 64], err[200];
    static char texts[1 << 16];
    size_t len;
    snprintf(path, sizeof path, "%s/steps.svg", plot_dir);
    enum { N = 100 };
    for (int c = 0; c < 3; c++) {
        float x[N], y[N];
        for (int i = 0; i < N; i++) {
            x[i] = cases[c].xmax * (float)i / (N - 1);
            y[i] = 2.0f + 1.0f / (float)(1 + i);
        }
        cg_plot_series s = {"train", x, y, N, 0, 0, 0};
        ck_assert_msg(cg_plot_loss_curve(path, NULL, 1, &s), "%s", cg_last_error());
        char *b = read_all(path, &len);
        ck_assert_msg(xml_check(b, texts, sizeof texts, err, sizeof err) > 10, "%s", err);
        /* the x tick labels come first, then the y axis's 2.0 */
        char got[256] = "";
        for (char *p = texts, *e; (e = strchr(p, '\n')) && strncmp(p, "2.0", 3); p = e + 1)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%.*s|", (int)(e - p), p);
        ck_assert_str_eq(got, cases[c].want);
        free(b);
    }
}
END_TEST

/* A log axis over more than 8 decades labels every k-th power of ten from
 * a multiple of k: from 2 to 3e38 the ticks were 10000, 1e+09, ..., so the
 * decade of the data (all but one point near 2) had no label. */
START_TEST(test_log_ticks_aligned)
{
    char path[PATH_MAX + 64], err[200];
    static char texts[1 << 16];
    size_t len;
    snprintf(path, sizeof path, "%s/spike.svg", plot_dir);
    float y[20];
    for (int i = 0; i < 20; i++)
        y[i] = i == 10 ? 3e38f : 2.0f + 1.0f / (float)(1 + i);
    cg_plot_series s = {"train", NULL, y, 20, 0, 0, 0};
    ck_assert_msg(cg_plot_loss_curve(path, NULL, 1, &s), "%s", cg_last_error());
    char *b = read_all(path, &len);
    ck_assert_msg(xml_check(b, texts, sizeof texts, err, sizeof err) > 10, "%s", err);
    ck_assert_msg(has_line(texts, "1") && has_line(texts, "1e+10") && !has_line(texts, "10000"),
                  "ticks: %s", texts);
    free(b);
}
END_TEST

/* PLplot keeps global state: many pictures in one process (more than its
 * 100 streams), the caller's stream left current, nothing printed on
 * stdout or stderr, and two threads drawing at once. */
static char draw_err[2][512]; /* each thread's message on failure */
/* Both threads start drawing once both exist: a fork while a thread is
 * being created leaves ASan's (GCC 12) thread registry locked in the
 * child, which then hangs creating pango's thread. */
static pthread_barrier_t draw_start;
__attribute__((unused)) static void *draw_some(void *arg)
{
    const char *dir = plot_dir;
    pthread_barrier_wait(&draw_start);
    char path[PATH_MAX + 64];
    float y[3] = {1, 2, 3};
    cg_plot_series s = {"s", NULL, y, 3, 0, 0, 0};
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "%s/t%d.%s", dir, i % 2, i % 2 ? "svg" : "png");
        if (!cg_plot_loss_curve(path, "t", 1, &s)) {
            snprintf(arg, sizeof draw_err[0], "%s", cg_last_error());
            return (void *)1;
        }
    }
    return NULL;
}

START_TEST(test_plot_repeated_quiet)
{
    char path[PATH_MAX + 64], log[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/r.png", plot_dir);
    snprintf(log, sizeof log, "%s/out.log", plot_dir);
    fflush(stdout);
    fflush(stderr);
    int keep1 = dup(1), keep2 = dup(2);
    FILE *lf = fopen(log, "w");
    ck_assert_ptr_nonnull(lf);
    dup2(fileno(lf), 1);
    dup2(fileno(lf), 2);
    PLINT before;
    plgstrm(&before);
    float y[3] = {1, 2, 3}, v[4] = {0, 0.5f, 1, NAN};
    cg_plot_series s = {"s", NULL, y, 3, 0, 0, 6};
    cg_heatmap_panel p = {"p", 2, 2, v, NULL, NULL, NULL, NULL};
    bool ok = true;
    for (int i = 0; i < 110 && ok; i++)
        ok = i % 2 ? cg_plot_loss_curve(path, "t", 1, &s)
                   : cg_plot_heatmaps(path, "h", 1, 1, &p, 0, 1);
    PLINT after;
    plgstrm(&after);
    void *r0 = NULL, *r1 = NULL;
#if !defined(__SANITIZE_ADDRESS__)
    /* Two threads at once. Not under AddressSanitizer: GCC 12's ASan keeps
     * internal locks that a fork from a process with several threads can
     * copy taken, and the drawing child (models/report/plot.c forks one per
     * picture) then hangs creating pango's thread until its 300 s bound (CI,
     * 2026-11-25). The release build runs this part. */
    pthread_t th[2];
    pthread_barrier_init(&draw_start, NULL, 3);
    pthread_create(&th[0], NULL, draw_some, draw_err[0]);
    pthread_create(&th[1], NULL, draw_some, draw_err[1]);
    pthread_barrier_wait(&draw_start);
    pthread_join(th[0], &r0);
    pthread_join(th[1], &r1);
    pthread_barrier_destroy(&draw_start);
#endif
    fflush(stdout);
    fflush(stderr);
    dup2(keep1, 1);
    dup2(keep2, 2);
    close(keep1);
    close(keep2);
    fclose(lf);
    ck_assert_msg(ok, "%s", cg_last_error());
    ck_assert_msg(r0 == NULL && r1 == NULL, "%s / %s", draw_err[0], draw_err[1]);
    ck_assert_int_eq(before, after);
    struct stat st;
    ck_assert_int_eq(stat(log, &st), 0);
    ck_assert_msg(st.st_size == 0, "plotting printed %lld bytes", (long long)st.st_size);
    image_t im = read_png(path);
    ck_assert_int_gt(distinct_colors(&im), 20);
    free(im.rgb);
}
END_TEST

START_TEST(test_plot_bad_input)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/x.png", plot_dir);
    float y[3] = {1, 2, 3}, v[1] = {0};
    cg_plot_series s = {"s", NULL, y, 3, 0, 0, 0};
    cg_plot_series bad = {"s", NULL, NULL, 3, 0, 0, 0};
    cg_clear_error();
    ck_assert(!cg_plot_loss_curve(NULL, "t", 1, &s));
    ck_assert(cg_has_error());
    cg_clear_error();
    ck_assert(!cg_plot_loss_curve(path, "t", -1, &s));
    cg_clear_error();
    ck_assert(!cg_plot_loss_curve(path, "t", 1, &bad));
    ck_assert(strstr(cg_last_error(), "series 0") != NULL);
    cg_clear_error();
    float neg[2] = {-1, 0};
    cg_plot_series sn = {"n", NULL, neg, 2, 0, 0, 0};
    cg_plot_opts o = {NULL, NULL, NULL, CG_PLOT_Y_LOG, 0, 0};
    ck_assert(!cg_plot_lines(path, &o, 1, &sn));
    ck_assert(strstr(cg_last_error(), "log") != NULL);
    cg_clear_error();
    cg_heatmap_panel p = {NULL, 1, 1, NULL, NULL, NULL, NULL, NULL};
    ck_assert(!cg_plot_heatmaps(path, "t", 1, 1, &p, 0, 1));
    cg_clear_error();
    p.values = v;
    ck_assert(!cg_plot_heatmaps(path, "t", 0, 1, &p, 0, 1));
    cg_clear_error();
    ck_assert(!cg_plot_attention(path, "t", 1, 1, 0, 1, v, NULL, NULL));
    cg_clear_error();
    /* the format comes from the name */
    char jpg[PATH_MAX + 64];
    snprintf(jpg, sizeof jpg, "%s/x.jpg", plot_dir);
    ck_assert(!cg_plot_loss_curve(jpg, "t", 1, &s));
    ck_assert(strstr(cg_last_error(), ".png or .svg") != NULL);
    cg_clear_error();
    ck_assert_int_eq(dir_entries(), 0);
    /* a directory that does not exist: false, a message, nothing written */
    char missing[PATH_MAX + 64];
    snprintf(missing, sizeof missing, "%s/no/such/dir.png", plot_dir);
    ck_assert(!cg_plot_loss_curve(missing, "t", 1, &s));
    ck_assert(strstr(cg_last_error(), "no/such") != NULL);
    cg_clear_error();
    ck_assert(!cg_plot_heatmaps(missing, "t", 1, 1, &p, 0, 1));
    cg_clear_error();
    /* an empty chart is still a valid picture */
    ck_assert(cg_plot_loss_curve(path, NULL, 0, NULL));
    ck_assert_int_eq(dir_entries(), 1);
    image_t im = read_png(path);
    ck_assert_int_eq(im.w, 900);
    free(im.rgb);
}
END_TEST

/* The bounds of cg_plot_lines and cg_plot_heatmaps, each refused with its
 * message and nothing written: more than 1000 series, a series of n < 0,
 * an unknown y_scale, a side over 10000 pixels, a panel over 4096 cells,
 * a picture over 1e8 pixels, panels all empty (round thirty: each was
 * taken before). */
START_TEST(test_plot_limits)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/big.png", plot_dir);
    float y[3] = {1, 2, 3};
    cg_plot_series *many = calloc(1001, sizeof *many);
    ck_assert_ptr_nonnull(many);
    cg_clear_error();
    ck_assert(!cg_plot_loss_curve(path, "t", 1001, many));
    ck_assert_msg(strstr(cg_last_error(), "n_series = 1001") != NULL, "%s", cg_last_error());
    free(many);
    cg_plot_series neg = {"s", NULL, y, -1, 0, 0, 0};
    ck_assert(!cg_plot_loss_curve(path, "t", 1, &neg));
    ck_assert_msg(strstr(cg_last_error(), "series 0 has n = -1") != NULL, "%s", cg_last_error());
    cg_plot_series s = {"s", NULL, y, 3, 0, 0, 0};
    cg_plot_opts o = {NULL, NULL, NULL, CG_PLOT_Y_LOG + 1, 0, 0};
    ck_assert(!cg_plot_lines(path, &o, 1, &s));
    ck_assert_msg(strstr(cg_last_error(), "unknown y_scale 3") != NULL, "%s", cg_last_error());
    cg_plot_opts wide = {NULL, NULL, NULL, CG_PLOT_Y_AUTO, 10001, 0};
    ck_assert(!cg_plot_lines(path, &wide, 1, &s));
    ck_assert_msg(strstr(cg_last_error(), "size 10001 x 560 is outside") != NULL, "%s",
                  cg_last_error());
    /* a panel of 4097 rows; 8 x 64 panels of 1 x 4096 cells of 2 pixels:
     * 65806 x 1546 pixels */
    float *v = calloc(4097, sizeof *v);
    ck_assert_ptr_nonnull(v);
    cg_heatmap_panel tall = {NULL, 4097, 1, v, NULL, NULL, NULL, NULL};
    ck_assert(!cg_plot_heatmaps(path, NULL, 1, 1, &tall, 0, 1));
    ck_assert_msg(strstr(cg_last_error(), "panel 0 is 4097 x 1") != NULL, "%s", cg_last_error());
    cg_heatmap_panel *p = calloc(64 * 8, sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 64 * 8; i++)
        p[i] = (cg_heatmap_panel){NULL, 1, 4096, v, NULL, NULL, NULL, NULL};
    ck_assert(!cg_plot_heatmaps(path, NULL, 64, 8, p, 0, 1));
    ck_assert_msg(strstr(cg_last_error(), "the picture would be 65806 x 1546 pixels") != NULL, "%s",
                  cg_last_error());
    free(p);
    free(v);
    cg_heatmap_panel empty = {0};
    ck_assert(!cg_plot_heatmaps(path, NULL, 1, 1, &empty, 0, 1));
    ck_assert_msg(strstr(cg_last_error(), "every panel is empty") != NULL, "%s", cg_last_error());
    ck_assert_int_eq(dir_entries(), 0);
}
END_TEST

/* Points with no neighbour (one point, or between NaNs) and no marker are
 * drawn, as small diamonds of the line's width (round thirty: a chart of
 * them was blank under a mutant). */
START_TEST(test_plot_lone_points)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/lone.png", plot_dir);
    float y[5] = {1, NAN, 2, NAN, 3}, one[1] = {2};
    cg_plot_series s[2] = {{NULL, NULL, y, 5, 0xAA00AA, 0, 0},
                           {NULL, NULL, one, 1, 0x00AA00, 0, 0}};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(cg_plot_loss_curve(path, NULL, 1, &s[k]), "%s", cg_last_error());
        image_t im = read_png(path);
        int n = count_near(&im, s[k].color, 60);
        free(im.rgb);
        ck_assert_msg(n >= 3 * (k ? 1 : 3), "series %d: %d pixels of its colour", k, n);
    }
}
END_TEST

/* Draws the series s (opts o) with its values *slots[0, n_slots) set to
 * NaN, then to each of gaps[0, n_gaps), and asks that each picture be the
 * NaN's, pixel for pixel: a value the chart cannot place is a gap, as a
 * NaN is. */
static void assert_drawn_as_nan(const char *name, const cg_plot_opts *o, const cg_plot_series *s,
                                float *const *slots, int n_slots, const float *gaps, int n_gaps)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.png", plot_dir, name);
    image_t nan = {0};
    for (int k = -1; k < n_gaps; k++) {
        for (int i = 0; i < n_slots; i++)
            *slots[i] = k < 0 ? NAN : gaps[k];
        ck_assert_msg(cg_plot_lines(path, o, 1, s), "%s", cg_last_error());
        image_t im = read_png(path);
        if (k < 0) {
            nan = im;
            ck_assert_int_gt(count_near(&nan, s->color, 60), 100);
            continue;
        }
        const bool same = same_pixels(&im, &nan);
        free(im.rgb);
        ck_assert_msg(same, "%s: %g drawn unlike a NaN", name, (double)gaps[k]);
    }
    free(nan.rgb);
}

/* On a log axis a y <= 0 has no place: the line breaks there as at a NaN,
 * and the picture is the NaN's pixel for pixel. Round thirty's PL7 joined
 * such points in (log10's -inf or NaN): PLplot leaves out the segments to
 * them, but the point between two of them, a lone point to be drawn as a
 * dot, was then a line of three points and vanished. */
START_TEST(test_plot_log_gap)
{
    cg_plot_opts o = {NULL, NULL, NULL, CG_PLOT_Y_LOG, 400, 300};
    float y[7] = {1.0f, 0.5f, 0.0f, 2.0f, 0.0f, 0.25f, 1.0f};
    cg_plot_series s = {NULL, NULL, y, 7, 0x00AA00, 0, 0};
    const float gaps[2] = {0.0f, -1.0f};
    assert_drawn_as_nan("log_gap", &o, &s, (float *const[]){&y[2], &y[4]}, 2, gaps, 2);
}
END_TEST

/* An infinite x is left out of the axes' range as a NaN is (round
 * thirty-one: the range ran to infinity, and the picture lost the line). */
START_TEST(test_plot_inf_x)
{
    cg_plot_opts o = {NULL, NULL, NULL, CG_PLOT_Y_LINEAR, 400, 300};
    float x[5] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}, y[5] = {1.0f, 3.0f, 2.0f, 4.0f, 2.0f};
    cg_plot_series s = {NULL, x, y, 5, 0x00AA00, 0, 0};
    const float gaps[2] = {INFINITY, -INFINITY};
    assert_drawn_as_nan("inf_x", &o, &s, (float *const[]){&x[2]}, 1, gaps, 2);
}
END_TEST

/* Series without names draw no legend: the plot's top right corner, where
 * a legend stands, stays background; a named series' legend covers it
 * (round thirty-one's PL10 drew an empty framed box there). */
START_TEST(test_plot_no_names_no_legend)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/legend.png", plot_dir);
    cg_plot_opts o = {NULL, NULL, NULL, CG_PLOT_Y_LINEAR, 400, 300};
    float y[5] = {1.0f, 3.0f, 2.0f, 4.0f, 2.0f};
    const char *names[2] = {NULL, "named"};
    for (int k = 0; k < 2; k++) {
        cg_plot_series s = {names[k], NULL, y, 5, 0x00AA00, 0, 0};
        ck_assert_msg(cg_plot_lines(path, &o, 1, &s), "%s", cg_last_error());
        image_t im = read_png(path);
        int other = 0;
        for (int yy = 23; yy < 45; yy++)
            for (int x = im.w - 60; x < im.w - 31; x++)
                other += pixel(&im, x, yy) != 0xFFFFFF;
        free(im.rgb);
        if (k == 0)
            ck_assert_msg(other == 0, "unnamed: %d pixels drawn where a legend stands", other);
        else
            ck_assert_msg(other > 20, "named: the legend not in the corner (%d pixels)", other);
    }
}
END_TEST

/* The automatic y axis is logarithmic from a ratio of 10 between the
 * largest and the smallest y (round thirty): from 2 to 20 its ticks are
 * 2, 5, 10, 20, not the linear 0, 5, 10, 15, 20. */
START_TEST(test_plot_auto_log_ratio)
{
    char path[PATH_MAX + 64], err[200];
    static char texts[1 << 16];
    size_t len;
    snprintf(path, sizeof path, "%s/ratio.svg", plot_dir);
    float x[10], y[10];
    for (int i = 0; i < 10; i++) {
        x[i] = (float)(100 * (i + 1));
        y[i] = 20.0f / powf(10.0f, (float)i / 9.0f);
    }
    y[9] = 2.0f;
    cg_plot_series s = {"train", x, y, 10, 0, 0, 0};
    ck_assert_msg(cg_plot_loss_curve(path, NULL, 1, &s), "%s", cg_last_error());
    char *b = read_all(path, &len);
    ck_assert_msg(xml_check(b, texts, sizeof texts, err, sizeof err) > 5, "%s", err);
    ck_assert_msg(has_line(texts, "2") && has_line(texts, "5") && !has_line(texts, "15"),
                  "ticks: %s", texts);
    free(b);
}
END_TEST

/* cg_plot_attention_of draws the last `rows` queries over the last `cols`
 * keys of each layer's kept weights [1, H, R, C] (charlm sample's last 32
 * characters of a longer window): weights of 1 in the last 2 x 2 corner
 * of a 4 x 4, 0 elsewhere, draw as weights of 1 everywhere do (round
 * thirty's PH8 drew the first rows and columns: the zeros). */
START_TEST(test_attention_last_rows)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/last.png", plot_dir);
    cg_rng rng = cg_rng_new(1);
    cg_mha *m = cg_mha_new(4, 1, &rng);
    ck_assert_ptr_nonnull(m);
    float corner[16] = {0};
    corner[10] = corner[11] = corner[14] = corner[15] = 1.0f;
    const int64_t shape[4] = {1, 1, 4, 4};
    image_t im[2];
    for (int k = 0; k < 2; k++) {
        cg_tensor *w = k == 0 ? cg_from_data(4, shape, corner) : cg_full(4, shape, 1.0f);
        ck_assert_ptr_nonnull(w);
        cg_release(m->weights);
        m->weights = w;
        ck_assert_msg(cg_plot_attention_of(path, "a", 1, &m, 2, 2, NULL, NULL), "%s",
                      cg_last_error());
        im[k] = read_png(path);
    }
    ck_assert_msg(same_pixels(&im[0], &im[1]), "the picture is not of the last rows and columns");
    free(im[0].rgb);
    free(im[1].rgb);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* Values all equal, on the automatic scale: the cells take the scale's
 * bottom colour and the colour bar spans [v, v + 1]; all NaN: [0, 1]
 * (round thirty: with no width, or no finite value, the bar was not
 * drawn). */
START_TEST(test_heatmap_constant)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/flat.png", plot_dir);
    float v[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    cg_heatmap_panel p = {"c", 2, 2, v, NULL, NULL, NULL, NULL};
    ck_assert_msg(cg_plot_heatmaps(path, NULL, 1, 1, &p, 0.0f, 0.0f), "%s", cg_last_error());
    image_t im = read_png(path);
    ck_assert_int_ge(count_color(&im, cg_plot_colormap(0.0f)), 4 * 15 * 15);
    ck_assert_int_gt(count_near(&im, cg_plot_colormap(0.5f), 30), 10);
    ck_assert_int_gt(count_near(&im, cg_plot_colormap(0.9f), 30), 10);
    free(im.rgb);
    /* values all NaN: grey cells, the scale [0, 1] */
    for (int i = 0; i < 4; i++)
        v[i] = NAN;
    ck_assert_msg(cg_plot_heatmaps(path, NULL, 1, 1, &p, 0.0f, 0.0f), "%s", cg_last_error());
    im = read_png(path);
    ck_assert_int_ge(count_color(&im, 0xC8C8C8), 4 * 15 * 15);
    ck_assert_int_gt(count_near(&im, cg_plot_colormap(0.5f), 30), 10);
    free(im.rgb);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("hand");
    tcase_add_test(tc, test_tokenize_13a);
    tcase_add_test(tc, test_bleu_hand);
    tcase_add_test(tc, test_chrf_hand);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_bleu_stats_hand);
    suite_add_tcase(s, tc);
    tc = tcase_create("reference");
    tcase_add_test(tc, test_reference_tokens);
    tcase_add_test(tc, test_reference_scores);
    tcase_add_test(tc, test_counts_add_up);
    tcase_add_test(tc, test_reference_edges);
    tcase_add_test(tc, test_bleu_stats_reference);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("png");
    /* 126 pictures: beyond Check's 4 s on a loaded machine when run
     * directly (forked; meson's CK_FORK=no runs without a limit) */
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, plot_setup, plot_teardown);
    tcase_add_test(tc, test_colormap);
    tcase_add_test(tc, test_plot_repeated_quiet); /* first: PLplot's start-up is quiet too */
    tcase_add_test(tc, test_plot_apart);
    tcase_add_test(tc, test_loss_curve_png);
    tcase_add_test(tc, test_plot_file_mode);
    tcase_add_test(tc, test_plot_from_tensor_memory);
    tcase_add_test(tc, test_heatmap_png);
    tcase_add_test(tc, test_heatmap_one_cell);
    tcase_add_test(tc, test_svg);
    tcase_add_test(tc, test_tick_labels_distinct);
    tcase_add_test(tc, test_tick_labels_one_style);
    tcase_add_test(tc, test_log_ticks_aligned);
    tcase_add_test(tc, test_plot_bad_input);
    tcase_add_test(tc, test_plot_limits);
    tcase_add_test(tc, test_plot_lone_points);
    tcase_add_test(tc, test_plot_auto_log_ratio);
    tcase_add_test(tc, test_plot_log_gap);
    tcase_add_test(tc, test_plot_inf_x);
    tcase_add_test(tc, test_plot_no_names_no_legend);
    tcase_add_test(tc, test_attention_last_rows);
    tcase_add_test(tc, test_heatmap_constant);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {metrics_suite(), plot_suite()};
    return cg_test_run(s, 2);
}
