/* cgrad zoo: a Seq2Seq translator over sets of sentences and sentence pairs
 * (shared/reference/train_seq2seq.py's evaluate, greedy, translate): the
 * pairs through a tokenizer (models/text/tokenizer.h), the validation loss over
 * batches, many sentences decoded (greedy in chunks or beam search), and
 * corpus BLEU/chrF of the detokenised translations (models/report/metrics.h).
 *
 * Errors: false / NULL + cg_set_error, one line each. The model is put in
 * eval mode by the decoders and the loss (which restores training mode). */
#ifndef CG_MODELS_TRANSLATE_H
#define CG_MODELS_TRANSLATE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "models/util/cli.h"
#include "models/data/pairs.h"
#include "models/report/metrics.h"
#include "models/seq2seq/beam.h"
#include "models/seq2seq/seq2seq.h"
#include "models/text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cg_batch_make_with through tok (the pairs' lengths are tok's ids). */
bool cg_batch_make_tok(const cg_pairs *p, const int64_t *idx, int64_t n, const cg_tokenizer *tok,
                       cg_batch *out);

/* A tokenizer of kind trained on both sides of pairs idx[0..n) (subwords
 * with the specials; one vocabulary for source and target). */
cg_tokenizer *cg_pairs_train_tokenizer(const cg_pairs *p, const int64_t *idx, int64_t n,
                                       cg_tokenizer_kind kind, int64_t vocab_size);
/* Set every pair's src_len/tgt_len to its length in tok's ids (subwords:
 * --max-len, the batches and the padding then count tokens), and keep the
 * ids (src_ids/tgt_ids, owned by p): the pairs are encoded once, not again
 * for each batch. */
bool cg_pairs_tokenize(cg_pairs *p, const cg_tokenizer *tok);

/* The data of a translator's training run (the reference's recipe): the
 * pairs of a file, split; the training pairs that fit max_len; one
 * tokenizer for both sides; the batches of at most max_tokens padded
 * tokens; and the epoch order of the training batches (a new MT19937
 * permutation of them at the start of each epoch). */
typedef struct {
    cg_pairs pairs;
    cg_pair_split split;
    int64_t n_train;    /* split.train[0..n_train): the pairs that fit */
    double valid_chars; /* validation target characters, an EOS each */
    cg_tokenizer *tok;  /* owned */
    cg_batches batches, vbatches;
    int64_t epoch, pos; /* the epochs begun, the batches taken of this one */
    int64_t *perm;      /* this epoch's order */
    cg_mt19937 order;
    cg_batch *bt; /* the micro-batches of one optimizer step */
    int n_bt;
    /* training batches' S and T rounded up to a multiple of pad_to, at
     * most pad_limit (cg_batch_pad_to; pad_to 0 or 1: as they are) */
    int64_t pad_to, pad_limit;
    /* --max-len drops training pairs by their characters, not their ids:
     * what BPE runs did before 2026-12-01 (their checkpoints lack
     * "max_len_tokens"), kept so that they resume exactly; false (the
     * zeroed default) counts ids */
    bool max_len_chars;
    /* the tokenizer given to cg_mt_data_prepare is used as it is, also a
     * char vocabulary (--init-from's base: the new data's characters
     * outside it are UNK), where a resumed run's must be the data's own */
    bool base_tok;
} cg_mt_data;

/* Read and split the pairs of path (cg_pairs_load) into d, zeroed by the
 * caller (a resumed run's epoch and pos may be set already); a missing
 * default_data gets the hint of models/util/files.h cg_data_default_hint. */
bool cg_mt_data_load(cg_mt_data *d, const char *path, const char *default_data, int64_t n_valid,
                     int64_t n_test, cg_data_id *id);
/* Then (before cg_mt_data_prepare): the pairs of the file path (read as
 * cg_pairs_read reads --data; id gets its identity) join the training
 * split only (models/data/pairs.h cg_pairs_add_extra; *c: the counts). */
bool cg_mt_data_add_extra(cg_mt_data *d, const char *path, cg_data_id *id, cg_pairs_extra *c);
/* The data a checkpoint's translator was trained on, for an evaluation:
 * split with the sizes of its "train" metadata (500 and 1000 when it has
 * none), from the file `given`, else the one it recorded, else
 * default_data (with a hint when that is missing), which must be the data
 * it recorded (models/train/state.h cg_train_data_check). */
bool cg_mt_data_load_ckpt(cg_mt_data *d, const char *train_json, const char *ckpt_path,
                          const char *given, const char *default_data);
/* Then: keep the training pairs whose sides have at most max_len - 2
 * ids (room for BOS and EOS); the tokenizer: *resume_tok (a checkpoint's,
 * taken when it is BPE; a char vocabulary must equal the one trained
 * again) or, when resume_tok is NULL, a new one of kind and vocab_size
 * trained on the training pairs (characters: those kept; BPE: all of them,
 * before the pairs are counted in its pieces, or, with d->max_len_chars,
 * those of at most max_len - 2 characters, as before 2026-12-01); with
 * subwords the pairs' lengths become token counts (max_len, the batches
 * and the padding count tokens); the batches. prog: the warnings' program (unknown characters of
 * the validation and test pairs); path and resume_path name the files in
 * the errors, which name --max-len. */
/* The first n test pairs (valid: validation pairs) fit the model: each
 * source encodes (tok) to at most max_len - 1 tokens (EOS makes max_len).
 * Checked at setup by train and eval, so that decoding never fails after
 * training; false + error "PATH:LINE: the test pair on line LINE has a
 * source of K tokens; ...". */
bool cg_mt_check_split(const cg_mt_data *d, const cg_tokenizer *tok, bool valid, int64_t n,
                       int64_t max_len, const char *path);
/* Every training batch can be split over the MPI ranks (at least one pair
 * per rank), checked at setup for every batch of every epoch (the batches
 * are fixed; only their order changes). False + error with advice that can
 * be followed: the smallest --max-tokens that works, or (resumed: the
 * recipe is the checkpoint's) the most ranks that work. */
bool cg_mt_check_ranks(const cg_mt_data *d, int64_t max_tokens, bool resumed);
bool cg_mt_data_prepare(cg_mt_data *d, const char *path, int64_t max_len, int64_t max_tokens,
                        cg_tokenizer_kind kind, int64_t vocab_size, cg_tokenizer **resume_tok,
                        const char *resume_path, const char *prog);
/* The batch order from seed, with room for grad_accum micro-batches per
 * optimizer step: fresh (step 0), or resumed at d->epoch and d->pos, which
 * must be where `steps` steps leave it (cg_train_position_check; path
 * names the checkpoint). */
bool cg_mt_data_order(cg_mt_data *d, uint32_t seed, int grad_accum, bool resumed, int64_t steps,
                      const char *path);
/* The next training batch in the order into d->bt[k], this MPI rank's share
 * of it (dist/dist.h); *weight and *tokens: its target tokens (non-pad:
 * those the loss is taken over; tokens/s counts them, as bench does). */
bool cg_mt_data_next(cg_mt_data *d, int k, double *weight, double *tokens);
void cg_mt_data_free(cg_mt_data *d);

/* Over batches bs of p: *ls the model's (label-smoothed) loss and *nll the
 * plain cross-entropy, both averaged over non-pad targets (NaN when there
 * are none); *ntok (may be NULL) the number of those targets. Stops
 * between batches once a signal is caught (cg_train_interrupted): false,
 * "interrupted". */
bool cg_seq2seq_valid_loss(cg_seq2seq *m, const cg_pairs *p, const cg_batches *bs,
                           const cg_tokenizer *tok, double *ls, double *nll, double *ntok);
/* The cross-entropy of pairs idx[0..n) with every target paired with the
 * next pair's source (does the model translate from its source?), in
 * batches of max_tokens. */
bool cg_seq2seq_wrong_source_nll(cg_seq2seq *m, const cg_pairs *p, const int64_t *idx, int64_t n,
                                 int64_t max_tokens, const cg_tokenizer *tok, double *nll);

/* Translate the sources of pairs idx[0..n) (n >= 1; cg_translate_all, lim
 * as there) and score them against their targets: *bleu and *chrf
 * (sacreBLEU defaults); *hyps (may be NULL) receives the translations
 * (cg_strings_free). A signal the trainer caught (cg_train_interrupted:
 * train --eval-bleu's decoding) stops the decoding between sentences, as
 * it stops cg_seq2seq_valid_loss: false + "interrupted". */
bool cg_translate_score(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                        const int64_t *idx, int64_t n, int beam, double alpha, bool use_cache,
                        const cg_decode_limits *lim, double *bleu, double *chrf, char ***hyps);

/* cg_translate_score's decoding, its counts rather than its scores: the
 * BLEU and chrF counts (models/report/metrics.h) of the translations of
 * pairs idx[0..n), n >= 0 (0: zero counts, nothing decoded), to be added
 * to other parts' (train --eval-bleu's ranks). */
bool cg_translate_counts(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                         const int64_t *idx, int64_t n, int beam, double alpha, bool use_cache,
                         const cg_decode_limits *lim, cg_bleu_stats *bleu, cg_chrf_counts *chrf,
                         char ***hyps);

/* The attention of one pass of m over source src[0..S) (with its EOS) and
 * decoder input tin[0..T) (BOS + the translation) as PNG heatmap grids
 * (models/report/plot.h; a row per layer, a column per head; tok's labels on the
 * axes) in the directory dir (created if needed): dir/encoder_self.png,
 * dir/decoder_self.png and dir/cross.png (rows: decoder input, columns:
 * source), those of the layers m has; each path written is printed as a
 * line on list (may be NULL). */
bool cg_seq2seq_draw_attention(cg_seq2seq *m, const cg_tokenizer *tok, const int64_t *src,
                               int64_t S, const int64_t *tin, int64_t T, const char *dir,
                               FILE *list);

/* The test of a trained translator: the sources of pairs idx[0..n)
 * translated greedily and with beam search (beam, alpha; key/value cache;
 * cg_translate_limits_default()),
 * each scored against the targets, and the first `examples` printed to out
 * as SRC/REF/GRDY/BEAM blocks; seconds: the decoding time. */
typedef struct {
    double bleu_greedy, chrf_greedy, bleu_beam, chrf_beam, seconds;
} cg_translate_test_result;
bool cg_translate_test(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                       const int64_t *idx, int64_t n, int beam, double alpha, int64_t examples,
                       FILE *out, cg_translate_test_result *res);

/* cg_seq2seq_draw_attention for the sentence text: its source ids (+ EOS)
 * and, as decoder input, BOS + the ids of target when it is not NULL
 * (target_name names it in messages: "--target is not valid UTF-8"), else
 * BOS + text's greedy translation (use_cache). The decoder input's text is
 * written to log (may be NULL) as "translation: TEXT". */
bool cg_seq2seq_attention_of_text(cg_seq2seq *m, const cg_tokenizer *tok, const char *text,
                                  const char *target, const char *target_name, bool use_cache,
                                  const char *dir, FILE *list, FILE *log);

/* The flags of the commands that translate from a checkpoint (--ckpt --beam
 * --length-penalty --no-cache --precision --threads, the decoding limits
 * --max-len-a --max-len-b --min-len --no-repeat-ngram-size, and --base)
 * with their defaults (default_ckpt, 1, CG_BEAM_ALPHA, off, the
 * checkpoint's, 2, cg_translate_limits_default(), NULL) appended to opts; returns
 * CG_TRANSLATE_N_OPTS. CG_TRANSLATE_HELP(default_ckpt) is their help. */
typedef struct {
    const char *ckpt, *precision;
    const char *base; /* --base: a LoRA checkpoint's base (NULL: the one it recorded) */
    int64_t beam, threads;
    int64_t nbest; /* translate's --nbest (0: not given) */
    double alpha;
    bool no_cache;
    cg_decode_limits lim; /* fairseq-generate's limits (nn/sample.h) */
    /* translate's --sampling (fairseq-generate's; off: the argmax or the
     * beam), its --sampling-topk (0: off), --sampling-topp (1: off),
     * --temperature (1) and --seed (1) */
    bool sampling;
    cg_sample_config sample;
    uint64_t seed;
    /* translate's --score-reference FILE (NULL: off): the references'
     * scores, fairseq-generate's --score-reference */
    const char *score_ref;
    /* translate's --buffer-size: standard input's lines translated (and
     * printed) a buffer of this many at a time (0: 1 from a terminal, 50,
     * the greedy batch, otherwise; all with --score-reference) */
    int64_t buffer;
} cg_translate_opts;
enum { CG_TRANSLATE_N_OPTS = 11 };
int cg_translate_cli_opts(cg_translate_opts *o, const char *default_ckpt, cg_cli_opt *opts);
/* The limits' flags against each other (model_max_len 0: at the parse; a
 * command-line error, exit 2) or against the model's max_len (after the
 * checkpoint is loaded; exit 1): false + error when no translation could
 * have a token (--max-len-a 0 --max-len-b 0) or end (--min-len above
 * every cap: --max-len-b with --max-len-a 0, or the model's max_len). */
bool cg_translate_limits_flags(const cg_decode_limits *l, int64_t model_max_len);
#define CG_TRANSLATE_HELP(default_ckpt)                                                      \
    "  --ckpt FILE          checkpoint (default " default_ckpt ")\n"                         \
    "  --base FILE          a LoRA checkpoint's base (default: the file it recorded)\n"      \
    "  --beam N             beam size; 1 = greedy decoding (default 1)\n"                    \
    "  --length-penalty A   alpha of the beam's ((5+len)/6)^alpha\n"                         \
    "                       (default " CG_BEAM_ALPHA_TEXT ")\n"                              \
    "  --no-cache           recompute the whole prefix at every step (no key/value cache)\n" \
    "  --precision P        fp32 or bf16 matrix products (default: the checkpoint's\n"       \
    "                       training precision)\n"                                           \
    "  --threads N          threads (default 2)\n"                                           \
    "  --max-len-a A        at most floor(A * src_len + B) tokens a translation, as\n"       \
    "  --max-len-b B        fairseq-generate's (src_len: the source's tokens with its\n"     \
    "                       EOS; default " CG_MAX_LEN_A_TEXT " and " CG_MAX_LEN_B_TEXT       \
    ": the source's tokens + 50), never\n"                                                   \
    "                       more than the model's max_len (the positions it has); a\n"       \
    "                       translation the cap stops has no EOS\n"                          \
    "  --min-len N          no EOS before N tokens (default 0; fairseq's is 1); a cap\n"     \
    "                       below N stops the translation first, and EOS is let\n"           \
    "                       through where --no-repeat-ngram-size leaves nothing else\n"      \
    "  --no-repeat-ngram-size N\n"                                                           \
    "                       no N tokens in a row twice in a translation (a token\n"          \
    "                       that would repeat them is never chosen; default 0: off)\n"

#ifdef __cplusplus
}
#endif
#endif
