/* cgrad zoo: corpus-level translation metrics, computed as sacreBLEU 2.x does
 * with its defaults (the reference is shared/reference/metrics.py).
 *
 * BLEU: 13a tokenisation, n-grams 1..4 with clipped counts summed over the
 * corpus, 'exp' smoothing for an order with no match, brevity penalty, x100.
 * chrF: character n-grams 1..6 over each sentence with its whitespace removed,
 * counts summed over the corpus, precision and recall averaged over the orders
 * present on both sides, F-beta with beta = 2, x100.
 *
 * Strings are UTF-8 and are handled as Unicode code points, as Python's str
 * is: "whitespace" is what Python's str.split() splits on (including U+00A0,
 * U+2000..U+200A, U+3000, ...). A byte that is not valid UTF-8 counts as a
 * code point of its own (as Python's 'surrogateescape' would decode it).
 *
 * One reference per hypothesis. Both functions return a score in [0, 100],
 * or -1.0 with a message (cg_last_error) when an argument is NULL, n < 0 or
 * memory runs out. n == 0 gives 0.0.
 *
 * One difference from sacreBLEU 2.x, shared with metrics.py: a corpus with
 * no matching n-gram of any order (not one token of the hypotheses in their
 * references) scores the 'exp'-smoothed value, where sacreBLEU stops at 0.0
 * (its "early stop", issue #141). Any other corpus scores as sacreBLEU's. */
#ifndef CG_METRICS_H
#define CG_METRICS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

double cg_bleu(int n, const char *const *hyps, const char *const *refs);
double cg_chrf(int n, const char *const *hyps, const char *const *refs);

/* What sacreBLEU's BLEU line shows beside the score (its BLEUScore):
 * "score p1/p2/p3/p4 (BP = bp ratio = ratio hyp_len = .. ref_len = ..)". */
typedef struct {
    /* cg_bleu's value, bit for bit */
    double score;
    /* 1- to 4-gram precisions x100, an order without a match 'exp'-smoothed;
     * 0 from the first order the hypotheses have no n-gram of (the score is
     * then 0) */
    double precisions[4];
    /* brevity penalty: 1 when hyp_len >= ref_len, else exp(1 - ref_len /
     * hyp_len); 0 for hyp_len 0 */
    double bp;
    double ratio;                    /* hyp_len / ref_len (0 when ref_len is 0) */
    long long hyp_len, ref_len;      /* 13a tokens over the corpus */
    long long matches[4], totals[4]; /* clipped n-gram matches; hypothesis n-grams */
} cg_bleu_stats;

/* Corpus BLEU with its statistics into *st (cg_bleu is its score): true, or
 * false + error as cg_bleu's -1.0 (*st then zero). */
bool cg_bleu_compute(int n, const char *const *hyps, const char *const *refs, cg_bleu_stats *st);

/* Both metrics are ratios of counts summed over the corpus's sentences, so
 * the counts of its parts (e.g. each MPI rank's share of the sentences)
 * added give the whole corpus's, and its score to the last bit:
 *   cg_bleu_count each part into its own cg_bleu_stats, add their matches,
 *   totals, hyp_len and ref_len, then cg_bleu_finish the sum;
 *   cg_chrf_count each part, add the three arrays, then cg_chrf_score. */
bool cg_bleu_count(int n, const char *const *hyps, const char *const *refs, cg_bleu_stats *st);
void cg_bleu_finish(cg_bleu_stats *st); /* score, precisions, bp, ratio from the counts */

enum { CG_CHRF_ORDER = 6 };
typedef struct {
    /* per character n-gram order 1..6: hypothesis n-grams, reference
     * n-grams, matches (whitespace removed) */
    long long hyp[CG_CHRF_ORDER], ref[CG_CHRF_ORDER], match[CG_CHRF_ORDER];
} cg_chrf_counts;

/* chrF's counts of hyps[0..n) against refs[0..n) into *c (set, not added):
 * true, or false + error (as cg_chrf's -1.0; *c then zero). */
bool cg_chrf_count(int n, const char *const *hyps, const char *const *refs, cg_chrf_counts *c);
double cg_chrf_score(const cg_chrf_counts *c); /* in [0, 100]; cg_chrf's value, bit for bit */

/* The 13a tokenisation of one line, tokens joined by single spaces, e.g.
 * "Hello, world. 3.5 - 4-5" -> "Hello , world . 3.5 - 4 - 5".
 * Returns a malloc'd string the caller frees, or NULL with an error set. */
char *cg_tokenize_13a(const char *line);

#ifdef __cplusplus
}
#endif
#endif
