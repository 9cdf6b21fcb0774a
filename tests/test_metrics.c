/* Tests for models/metrics.{h,c}: hand-checked BLEU/chrF values and a
 * cross-check against shared/reference/metrics.py on 310 real pairs
 * (tests/data/metrics_*.txt, written by scripts/make_metrics_cases.py).
 * A second suite checks models/plot.{h,c}: the PNGs are read back and their
 * pixels inspected. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "models/metrics.h"
#include "models/plot.h"
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

/* ------------------------------------------------------------ plot */

static char plot_dir[256];

static void plot_setup(void)
{
    snprintf(plot_dir, sizeof plot_dir, "/tmp/cg_test_plot_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(plot_dir));
}

static void plot_teardown(void)
{
    DIR *d = opendir(plot_dir);
    if (d) {
        struct dirent *e;
        char p[600];
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

START_TEST(test_loss_curve_png)
{
    char path[512];
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
    /* the red series and the first palette colour are drawn (line cores) */
    ck_assert_int_gt(count_color(&im, 0xFF0000), 300);
    ck_assert_int_gt(count_color(&im, 0x1F5FBF), 50);
    /* the title is black text in the top band */
    int black = 0;
    for (int yy = 0; yy < 40; yy++)
        for (int xx = 0; xx < im.w; xx++)
            black += pixel(&im, xx, yy) == 0x000000;
    ck_assert_int_gt(black, 50);
    free(im.rgb);

    /* overwriting works, and x = NULL means 0..n-1; explicit log axis */
    cg_plot_opts o = {"log", "x", "y", CG_PLOT_Y_LOG, 400, 300};
    cg_plot_series s2 = {NULL, NULL, y, N, 0x00AA00, 0, 0};
    ck_assert_msg(cg_plot_lines(path, &o, 1, &s2), "%s", cg_last_error());
    im = read_png(path);
    ck_assert_int_eq(im.w, 400);
    ck_assert_int_eq(im.h, 300);
    ck_assert_int_gt(count_color(&im, 0x00AA00), 100);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);

    /* markers: a dot of diameter 9 at each of 5 points over a thin line
     * (the legend shows one more) */
    float mx[5] = {0, 100, 200, 300, 400}, my[5] = {4, 3, 2.5f, 2.2f, 2};
    cg_plot_series m[2] = {{"thin", x, y, N, 0x00AA00, 0.8f, 0},
                           {"marked", mx, my, 5, 0xAA00AA, 1.0f, 0}};
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    int plain = count_color(&im, 0xAA00AA), thin = count_color(&im, 0x00AA00);
    free(im.rgb);
    m[1].marker = 9.0f;
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    int marked = count_color(&im, 0xAA00AA);
    free(im.rgb);
    ck_assert_msg(marked > plain + 6 * 40, "marked %d, plain %d", marked, plain);
    m[0].width = 3.0f; /* a wider line covers more pixels in full */
    ck_assert(cg_plot_loss_curve(path, NULL, 2, m));
    im = read_png(path);
    ck_assert_int_gt(count_color(&im, 0x00AA00), thin + 500);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

START_TEST(test_heatmap_png)
{
    char path[512];
    snprintf(path, sizeof path, "%s/attn.png", plot_dir);
    float v[4] = {0.0f, 1.0f, NAN, 0.5f};
    const char *rows[] = {"a", " "};
    const uint32_t cols[] = {0xE4, 'b'};
    cg_heatmap_panel p[2] = {{"head 0", 2, 2, v, rows, NULL, NULL, cols}, {0}};
    ck_assert_msg(cg_plot_heatmaps(path, "attention", 1, 2, p, 0.0f, 1.0f), "%s", cg_last_error());
    image_t im = read_png(path);
    /* cells are 18 x 18 at this size: each colour fills at least one cell */
    ck_assert_int_ge(count_color(&im, 0x440154), 18 * 18);
    ck_assert_int_ge(count_color(&im, 0xFDE725), 18 * 18);
    ck_assert_int_ge(count_color(&im, cg_plot_colormap(0.5f)), 18 * 18);
    ck_assert_int_ge(count_color(&im, 0xC8C8C8), 18 * 18); /* NaN */
    free(im.rgb);
    /* automatic range: the same picture when the data spans [0, 1] */
    ck_assert(cg_plot_heatmaps(path, NULL, 1, 1, p, 0.0f, 0.0f));
    im = read_png(path);
    ck_assert_int_ge(count_color(&im, 0xFDE725), 18 * 18);
    free(im.rgb);
    ck_assert_int_eq(dir_entries(), 1);
}
END_TEST

START_TEST(test_plot_bad_input)
{
    char path[512];
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
    ck_assert_int_eq(dir_entries(), 0);
    /* a directory that does not exist: false, a message, nothing written */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir.png", plot_dir);
    ck_assert(!cg_plot_loss_curve(missing, "t", 1, &s));
    ck_assert(strstr(cg_last_error(), "no/such") != NULL);
    cg_clear_error();
    ck_assert(!cg_plot_heatmaps(missing, "t", 1, 1, &p, 0, 1));
    cg_clear_error();
    /* an empty chart is still a valid picture */
    ck_assert(cg_plot_loss_curve(path, NULL, 0, NULL));
    ck_assert_int_eq(dir_entries(), 1);
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

static Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("png");
    tcase_add_checked_fixture(tc, plot_setup, plot_teardown);
    tcase_add_test(tc, test_colormap);
    tcase_add_test(tc, test_loss_curve_png);
    tcase_add_test(tc, test_heatmap_png);
    tcase_add_test(tc, test_plot_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {metrics_suite(), plot_suite()};
    return cg_test_run(s, 2);
}
