/* Rigged translators shared by the decoding suites (test_seq2seq.c,
 * test_beam_limits.c): models whose outputs a test designs. */
#ifndef CG_TESTS_SEQ2SEQ_RIG_H
#define CG_TESTS_SEQ2SEQ_RIG_H

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/seq2seq/seq2seq.h"
#include "tests/testutil.h"

/* A translator whose next-token logits from token u are the row z[u] of a
 * table (up to a constant per row, within about 1e-2), whatever the source,
 * the position and the tokens before: one decoder layer, no encoder layer,
 * the attentions' output projections zero, every norm's weight 1 and bias 0.
 * Token u's embedding is 10 in dimension u (read by the feed-forward) and 10
 * in dimension V + u (read by the tied head); the feed-forward's unit u fires
 * on dimension u alone and writes 1e5 times z[u] into dimensions V..2V-1,
 * with dimension 2V holding what makes every row's centred norm the same N:
 * the last norm then gives sqrt(d) * (row - mean) / N, and the head's 10 per
 * dimension gives z[u] + a constant. Post-norm the last norm is ln3, pre-norm
 * ln_f; the sinusoidal positions (norm 4) are small beside the spikes,
 * at any max_len. */
enum { TZ_V = 10 };

static inline cg_seq2seq *table_model_len(const double z[TZ_V][TZ_V], bool norm_first,
                                          int64_t max_len)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = TZ_V, c.d = 32, c.H = 2, c.d_ff = TZ_V, c.max_len = max_len;
    c.enc_layers = 0, c.dec_layers = 1, c.norm_first = norm_first;
    cg_seq2seq *m = cg_seq2seq_new(&c, 1);
    ck_assert_ptr_nonnull(m);
    const int64_t d = c.d, V = TZ_V;
    const double N = 10.0 * sqrt((double)d);
    cg_test_blank_params(CG_MODULE(m));
    cg_dec_layer *l = m->decoder->layers[0];
    float *e = cg_data(m->emb->weight), *w1 = cg_data(l->ff->fc1->weight),
          *b1 = cg_data(l->ff->fc1->bias), *w2 = cg_data(l->ff->fc2->weight);
    for (int64_t u = 0; u < V; u++) {
        e[u * d + u] = e[u * d + V + u] = 10.0f;
        w1[u * d + u] = 1.0f; /* [d_ff, d]: about 3.9 on u's own input, < 0 elsewhere */
        b1[u] = -2.0f;
        double s1 = 0, s2 = 0; /* t solves s2 + t^2 - (s1 + t)^2 / d = N^2 */
        for (int64_t v = 0; v < V; v++)
            s1 += z[u][v], s2 += z[u][v] * z[u][v];
        const double a = 1.0 - 1.0 / (double)d, b = -2.0 * s1 / (double)d,
                     cc = s2 - s1 * s1 / (double)d - N * N;
        const double t = (-b + sqrt(b * b - 4 * a * cc)) / (2 * a);
        for (int64_t v = 0; v < V; v++) /* fc2 [d, d_ff] */
            w2[(V + v) * V + u] = (float)(1e5 * z[u][v]);
        w2[2 * V * V + u] = (float)(1e5 * t);
    }
    cg_tensor_modified(m->emb->weight);
    cg_tensor_modified(l->ff->fc1->weight);
    cg_tensor_modified(l->ff->fc1->bias);
    cg_tensor_modified(l->ff->fc2->weight);
    cg_module_train(CG_MODULE(m), false);
    return m;
}

/* table_model_len of max_len 16. */
static inline cg_seq2seq *table_model(const double z[TZ_V][TZ_V], bool norm_first)
{
    return table_model_len(z, norm_first, 16);
}

#endif
