/* Tests for models/metrics.{h,c}: hand-checked BLEU/chrF values and a
 * cross-check against shared/reference/metrics.py on 310 real pairs
 * (tests/data/metrics_*.txt, written by scripts/make_metrics_cases.py). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/metrics.h"
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
    check_tok("Gr\xc3\xb6\xc3\x9f" "e\xc2\xa0\xc3\xa4nderte\xe3\x80\x80x", "Gr\xc3\xb6\xc3\x9f" "e \xc3\xa4nderte x");
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
    const char *same[] = {"The cat sat on the mat.", "Es gibt sie in allen Gr\xc3\xb6\xc3\x9f" "en."};
    ck_assert_double_eq_tol(cg_bleu(2, same, same), 100.0, TOL);

    /* the reference minus its last word: all precisions 1, brevity 5/6 */
    const char *h1[] = {"the cat sat on the"}, *r1[] = {"the cat sat on the mat"};
    ck_assert_double_eq_tol(cg_bleu(1, h1, r1), 100.0 * exp(1.0 - 6.0 / 5.0), TOL);

    /* "the cat the cat" vs "the cat sat on the mat":
     * 1-grams the 2/2 + cat 1/2 -> 3/4; 2-grams "the cat" 1 of 2, "cat the"
     * 0 -> 1/3; 3- and 4-grams no match -> 'exp' smoothing 1/(2*2), 1/(4*1);
     * brevity exp(1 - 6/4). */
    const char *h2[] = {"the cat the cat"}, *r2[] = {"the cat sat on the mat"};
    double expect = exp(1.0 - 1.5) * exp((log(75.0) + log(100.0 / 3.0) + log(25.0) + log(25.0)) / 4);
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
    const char *same[] = {"The cat sat on the mat.", "Es gibt sie in allen Gr\xc3\xb6\xc3\x9f" "en."};
    ck_assert_double_eq_tol(cg_chrf(2, same, same), 100.0, TOL);

    /* "ab" vs "abc": 1-grams P=2/2 R=2/3, 2-grams P=1/1 R=1/2, 3-grams only
     * in the reference (order skipped) -> P=1, R=7/12, F2 = 5PR/(4P+R) = 7/11 */
    const char *h1[] = {"ab"}, *r1[] = {"abc"};
    ck_assert_double_eq_tol(cg_chrf(1, h1, r1), 700.0 / 11.0, TOL);

    /* whitespace (including U+00A0 and U+3000) is removed before counting */
    const char *h2[] = {"a b\xc2\xa0" "c\xe3\x80\x80" "d"}, *r2[] = {"abcd"};
    ck_assert_double_eq_tol(cg_chrf(1, h2, r2), 100.0, TOL);

    /* code points, not bytes: "\xc3\xa4" "b" vs "\xc3\xa4" "c": 1-grams 1/2 both ways, 2-grams 0/1
     * -> P = R = (1/2 + 0)/2 = 1/4 -> F = 25 */
    const char *h3[] = {"\xc3\xa4" "b"}, *r3[] = {"\xc3\xa4" "c"};
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
    const char *bad[] = {"ab\xff\xfe" "c"};
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
        ck_assert_msg(fabs(b - bleu) <= TOL, "BLEU of lines %d..%d: %.17g, reference %.17g", start + 1,
                      start + count, b, bleu);
        ck_assert_msg(fabs(c - chrf) <= TOL, "chrF of lines %d..%d: %.17g, reference %.17g", start + 1,
                      start + count, c, chrf);
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

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("hand");
    tcase_add_test(tc, test_tokenize_13a);
    tcase_add_test(tc, test_bleu_hand);
    tcase_add_test(tc, test_chrf_hand);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    tc = tcase_create("reference");
    tcase_add_test(tc, test_reference_tokens);
    tcase_add_test(tc, test_reference_scores);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {metrics_suite()};
    return cg_test_run(s, 1);
}
