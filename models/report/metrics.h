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
 * memory runs out. n == 0 gives 0.0. */
#ifndef CG_METRICS_H
#define CG_METRICS_H

#ifdef __cplusplus
extern "C" {
#endif

double cg_bleu(int n, const char *const *hyps, const char *const *refs);
double cg_chrf(int n, const char *const *hyps, const char *const *refs);

/* The 13a tokenisation of one line, tokens joined by single spaces, e.g.
 * "Hello, world. 3.5 - 4-5" -> "Hello , world . 3.5 - 4 - 5".
 * Returns a malloc'd string the caller frees, or NULL with an error set. */
char *cg_tokenize_13a(const char *line);

#ifdef __cplusplus
}
#endif
#endif
