/* The work of seq2seq's translate, eval and score commands, whose flags
 * and help stay in seq2seq_main.c: translate's sentences checked (one that
 * cannot be translated is reported and stands as an empty line) and
 * translated in order, eval's scores of a split as one JSON line, and
 * score's of a translation file against its references. Moved here from
 * seq2seq_main.c (issue 35). */
#include "models/seq2seq/seq2seq_cmds.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/utf8.h"
#include "models/data/pairs.h"
#include "models/report/metrics.h"
#include "models/seq2seq/seq2seq_train.h" /* PROG, DEFAULT_DATA */
#include "models/text/tokenizer.h"
#include "models/text/vocab.h" /* cg_warn_unknown_chars */
#include "models/util/config_json.h"
#include "models/util/files.h"

/* Can sentence i (text; why: the reason stdin's line could not be read,
 * or NULL) be translated? A sentence that cannot (a NUL byte or over
 * CG_LINE_MAX bytes, not UTF-8, longer than the model takes) is reported,
 * saying what stands for it in the output (stands). */
static bool translatable(const cg_seq2seq_ckpt *c, const char *text, const char *why,
                         const char *what, int64_t i, const char *stands)
{
    size_t bad;
    int64_t k = 0, *ids = NULL, max_len = c->model->cfg.max_len;
    if (why)
        cg_prog_warn("%s %lld: %s: not translated (%s)", what, (long long)i + 1, why, stands);
    else if (cg_utf8_count(text, strlen(text), &bad) < 0)
        cg_prog_warn("%s %lld is not valid UTF-8 (byte %zu): not translated (%s)", what,
                     (long long)i + 1, bad + 1, stands);
    else if (!(ids = cg_tokenizer_encode(c->tok, text, &k, NULL)))
        cg_prog_warn("%s %lld: %s: not translated (%s)", what, (long long)i + 1, cg_last_error(),
                     stands);
    else if (k + 1 > max_len)
        cg_prog_warn("%s %lld has %lld tokens; the model takes at most %lld: not translated (%s)",
                     what, (long long)i + 1, (long long)k, (long long)max_len - 1, stands);
    bool ok = ids && k + 1 <= max_len;
    free(ids);
    if (ok && c->tok->kind == CG_TOK_CHAR)
        cg_pair_vocab_warn_unknown(&c->tok->pv, text, PROG, what, i + 1);
    return ok;
}

/* --sampling's config for c's model (top-k at most the vocabulary: all of
 * it) and the seed of the sentences after `before` translated ones. */
static cg_sample_config sample_config(const cg_seq2seq_ckpt *c, const cg_translate_opts *t,
                                      int64_t before, uint64_t *seed)
{
    cg_sample_config sc = t->sample;
    sc.top_k = sc.top_k < c->model->cfg.vocab ? sc.top_k : c->model->cfg.vocab;
    *seed = cg_sample_seed(t->seed, before, 0);
    return sc;
}

/* The nbest translations of source j of s: beam search's, or the best of
 * --sampling's --beam draws (before: the sentences translated before s's). */
static bool nbest_of(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, const cg_sources *s,
                     int64_t j, int64_t before, int nbest, char **texts, double *scores, int *got)
{
    if (!t->sampling)
        return cg_translate_nbest(c->model, c->tok, s, j, (int)t->beam, t->alpha, !t->no_cache,
                                  &t->lim, nbest, texts, scores, got);
    uint64_t seed;
    cg_sample_config sc = sample_config(c, t, before, &seed);
    return cg_translate_sample_nbest(c->model, c->tok, s, j, &sc, seed, (int)t->beam, t->alpha,
                                     !t->no_cache, &t->lim, nbest, texts, scores, got);
}

/* --nbest: the best translations of every sentence not skipped, as
 * fairseq-generate's lines H-I<TAB>SCORE<TAB>TEXT (I the sentence's index
 * in the input, from 0: first + its index in s's), each sentence's printed
 * once decoded. -1 or the
 * exit code. */
static int print_nbest(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, const cg_sources *s,
                       const bool *skip, int64_t n, int64_t first, int64_t before)
{
    const int nbest = (int)t->nbest;
    char **texts = malloc((size_t)nbest * sizeof *texts);
    double *scores = malloc((size_t)nbest * sizeof *scores);
    int rc = texts && scores ? -1 : cg_prog_fail("out of memory");
    for (int64_t i = 0, j = 0; rc < 0 && i < n; i++) {
        int got = 0;
        if (skip[i])
            continue;
        if (!nbest_of(c, t, s, j++, before, nbest, texts, scores, &got))
            rc = cg_prog_fail_lib(NULL);
        errno = 0;
        for (int k = 0; k < got; k++) {
            printf("H-%lld\t%.6f\t%s\n", (long long)(first + i), scores[k], texts[k]);
            free(texts[k]);
        }
        if (rc < 0 && !cg_output_flush(stdout)) /* a reader gone: stop */
            rc = cg_prog_fail_lib(NULL);
    }
    free(texts);
    free(scores);
    return rc;
}

/* The translations of s: the argmax, the beam, or --sampling's draws
 * (top-k at most the vocabulary: all of it; before: the sentences of the
 * input translated before s's, for the seeds). */
static char **translate_good(const cg_seq2seq_ckpt *c, const cg_translate_opts *t,
                             const cg_sources *s, int64_t before, FILE *echo)
{
    if (!t->sampling)
        return cg_translate_all(c->model, c->tok, s, (int)t->beam, t->alpha, !t->no_cache, &t->lim,
                                echo);
    /* sentence i of s is the input's (before + i)-th translated: its seed */
    uint64_t seed;
    cg_sample_config sc = sample_config(c, t, before, &seed);
    if (t->beam <= 1)
        return cg_translate_sample(c->model, c->tok, s, &sc, seed, !t->no_cache, &t->lim, echo);
    char **out = calloc((size_t)(s->n ? s->n : 1), sizeof *out);
    bool ok = out != NULL;
    for (int64_t i = 0; ok && i < s->n; i++) { /* the best of --beam draws */
        double score;
        int got;
        ok = nbest_of(c, t, s, i, before, 1, &out[i], &score, &got);
        errno = 0; /* checked at once: a reader gone stops the translation here */
        if (ok && echo) {
            fprintf(echo, "%s\n", out[i]);
            ok = cg_output_flush(echo);
        }
    }
    if (!out)
        cg_set_error("out of memory");
    if (!ok)
        cg_strings_free(out, s->n);
    return ok ? out : NULL;
}

/* --score-reference: the score of reference i (ref) given source j of s,
 * beam search's for that hypothesis (cg_seq2seq_score: its log-probability
 * with EOS over the length penalty); false (warned: no H line) when it
 * cannot be scored. *ok false on an error that ends the command. */
static bool ref_score(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, const cg_sources *s,
                      int64_t j, const char *ref, const char *why, int64_t i, double *score,
                      bool *ok)
{
    size_t bad;
    int64_t k = 0, *ids = NULL, max_len = c->model->cfg.max_len;
    const char *what = "reference";
    if (why)
        cg_prog_warn("%s %lld: %s: not scored (no H line for it)", what, (long long)i + 1, why);
    else if (cg_utf8_count(ref, strlen(ref), &bad) < 0)
        cg_prog_warn("%s %lld is not valid UTF-8 (byte %zu): not scored (no H line for it)", what,
                     (long long)i + 1, bad + 1);
    else if (!(ids = cg_tokenizer_encode(c->tok, ref, &k, NULL)))
        cg_prog_warn("%s %lld: %s: not scored (no H line for it)", what, (long long)i + 1,
                     cg_last_error());
    else if (k + 1 > max_len)
        cg_prog_warn("%s %lld has %lld tokens; the model takes at most %lld: not scored (no H "
                     "line for it)",
                     what, (long long)i + 1, (long long)k, (long long)max_len - 1);
    bool good = ids && k + 1 <= max_len;
    int64_t S = s->len[j] + 1, *src = good ? malloc((size_t)S * sizeof *src) : NULL;
    if (good && !src) {
        cg_set_error("out of memory");
        *ok = false;
    } else if (good) {
        memcpy(src, s->ids[j], (size_t)s->len[j] * sizeof *src);
        src[S - 1] = CG_EOS;
        *score = cg_seq2seq_score(c->model, src, S, ids, k, true, t->alpha);
        *ok = !isnan(*score);
    }
    free(src);
    free(ids);
    return good && *ok;
}

/* --score-reference FILE: one H-I<TAB>SCORE<TAB>REFERENCE line for each
 * source not skipped whose reference (the file's line I) can be scored;
 * the file has as many lines as there are sources. -1 or the exit code. */
static int print_ref_scores(const cg_seq2seq_ckpt *c, const cg_translate_opts *t,
                            const cg_sources *s, const bool *skip, int64_t n)
{
    FILE *f = fopen(t->score_ref, "r");
    int64_t nr = 0;
    char **refs = NULL, **why = NULL;
    int rc = -1;
    if (!f)
        rc = cg_prog_fail("--score-reference: cannot open '%s': %s", t->score_ref, strerror(errno));
    else if (!(refs = cg_read_lines(f, t->score_ref, &nr, &why)))
        rc = cg_prog_fail_lib(NULL);
    else if (nr != n)
        rc = cg_prog_fail("--score-reference '%s' has %lld lines for %lld sentences: one "
                          "reference a sentence (nothing was scored)",
                          t->score_ref, (long long)nr, (long long)n);
    if (f)
        fclose(f);
    bool was_training = c->model->base.training; /* scored in eval mode */
    cg_module_train(CG_MODULE(c->model), false);
    bool ok = true;
    for (int64_t i = 0, j = 0; rc < 0 && i < n; i++) {
        double score;
        if (skip[i])
            continue;
        bool scored = ref_score(c, t, s, j++, refs[i], why[i], i, &score, &ok);
        errno = 0;
        if (scored)
            printf("H-%lld\t%.6f\t%s\n", (long long)i, score, refs[i]);
        if (!ok || !cg_output_flush(stdout)) /* an error, or a reader gone: stop */
            rc = cg_prog_fail_lib(NULL);
    }
    cg_module_train(CG_MODULE(c->model), was_training);
    cg_strings_free(refs, nr);
    for (int64_t i = 0; why && i < nr; i++)
        free(why[i]);
    free(why);
    return rc;
}

/* Translate texts[0..n) (why: as translatable's, per line, or NULL) and
 * print one line each, in order (--nbest: print_nbest's lines;
 * --score-reference: print_ref_scores's). -1 or the exit code. */
int translate_texts(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, char *const *texts,
                    char *const *why, int64_t n, const char *what, int64_t first, int64_t *nbad_all)
{
    const char **good = malloc((size_t)(n ? n : 1) * sizeof *good);
    bool *skip = calloc((size_t)(n ? n : 1), sizeof *skip);
    int rc = good && skip ? -1 : cg_prog_fail("out of memory");
    if (rc < 0 && !cg_translate_limits_flags(&t->lim, c->model->cfg.max_len))
        rc = cg_prog_fail_lib(NULL);
    int64_t ngood = 0, nbad = 0;
    const char *stands =
        t->nbest || t->score_ref ? "no H line for it" : "an empty line stands for it";
    for (int64_t i = 0; rc < 0 && i < n; i++) {
        skip[i] = !translatable(c, texts[i], why ? why[i] : NULL, what, first + i, stands);
        nbad += skip[i];
        if (!skip[i])
            good[ngood++] = texts[i];
    }
    cg_sources s = {0};
    char **hyps = NULL;
    if (rc < 0 && !cg_sources_encode(c->tok, good, ngood, c->model->cfg.max_len, &s))
        rc = cg_prog_fail_lib(NULL);
    else if (rc < 0 && t->nbest)
        rc = print_nbest(c, t, &s, skip, n, first, first - *nbad_all);
    else if (rc < 0 && t->score_ref)
        rc = print_ref_scores(c, t, &s, skip, n);
    else if (rc < 0 && !(hyps = translate_good(c, t, &s, first - *nbad_all, nbad ? NULL : stdout)))
        rc = cg_prog_fail_lib(NULL);
    errno = 0;
    for (int64_t i = 0, j = 0; rc < 0 && hyps && nbad && i < n;
         i++) { /* in order, with the empty lines */
        printf("%s\n", skip[i] ? "" : hyps[j++]);
        if (!cg_output_flush(stdout)) /* a reader gone: stop */
            rc = cg_prog_fail_lib(NULL);
    }
    *nbad_all += nbad;
    cg_strings_free(hyps, ngood);
    cg_sources_free(&s);
    free(good);
    free(skip);
    return rc;
}

/* Announce the characters of text (flag) outside c's char vocabulary. */
static void warn_unknown(const cg_seq2seq_ckpt *c, const char *text, const char *flag)
{
    uint32_t first = 0;
    int64_t unk = text && c->tok->kind == CG_TOK_CHAR
                      ? cg_pair_vocab_count_unknown(&c->tok->pv, text, &first)
                      : 0;
    if (unk > 0)
        cg_warn_unknown_chars(PROG, flag, unk, first, "<unk>");
}

bool attention_inputs(const cg_seq2seq_ckpt *c, const char *text, const char *target)
{
    int64_t k = 0, max_len = c->model->cfg.max_len;
    int64_t *ids = cg_tokenizer_encode(c->tok, text, &k, NULL);
    free(ids);
    if (!ids) {
        cg_prefix_error("--text: ");
        return false;
    }
    if (k + 1 > max_len) {
        cg_set_error("--text has %lld tokens; the model takes at most %lld", (long long)k,
                     (long long)max_len - 1);
        return false;
    }
    warn_unknown(c, text, "--text");
    warn_unknown(c, target, "--target");
    return true;
}

/* The decoding limits that are not translate's defaults, into eval's JSON
 * line under fairseq's names (a default run's line is as it was). */
static void put_limits(cJSON *j, const cg_decode_limits *l)
{
    const cg_decode_limits d = cg_translate_limits_default();
    if (l->max_len_a != d.max_len_a || l->max_len_b != d.max_len_b) {
        cg_json_put_num(j, "max_len_a", "%g", l->max_len_a);
        cg_json_put_int(j, "max_len_b", l->max_len_b);
    }
    if (l->min_len != d.min_len)
        cg_json_put_int(j, "min_len", l->min_len);
    if (l->no_repeat_ngram_size != d.no_repeat_ngram_size)
        cg_json_put_int(j, "no_repeat_ngram_size", l->no_repeat_ngram_size);
}

/* eval's scores of c on the split (valid, else test) of its data (the
 * file data, else the one it recorded), as one JSON line: -1 or the exit
 * code. */
int eval_split(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, cg_mt_data *ds,
               const char *data, bool valid, int64_t limit)
{
    const char *ck = t->ckpt, *tj = cg_st_metadata(c->file, "train");
    cg_precision prec; /* the products as trained, or as --precision says */
    if (!cg_decode_precision(t->precision, tj, ck, &prec) ||
        !cg_translate_limits_flags(&t->lim, c->model->cfg.max_len) ||
        !cg_mt_data_load_ckpt(ds, tj, ck, data, DEFAULT_DATA))
        return cg_prog_fail_lib(NULL);
    const int64_t *idx = valid ? ds->split.valid : ds->split.test;
    int64_t have = valid ? ds->split.n_valid : ds->split.n_test;
    int64_t nt = limit > 0 && limit < have ? limit : have;
    char *dp = cg_train_data_path(tj, ck, data, DEFAULT_DATA); /* for the message */
    bool fits =
        cg_out_check_stdout(dp, "--data") &&
        cg_mt_check_split(ds, c->tok, valid, nt, c->model->cfg.max_len, dp ? dp : "the data");
    free(dp);
    if (!fits)
        return cg_prog_fail_lib(NULL);
    if (c->tok->kind == CG_TOK_CHAR)
        cg_pairs_warn_unknown(&ds->pairs, idx, nt, &c->tok->pv, PROG,
                              valid ? "the validation pairs" : "the test pairs");
    double bleu, chrf, t0 = cg_now();
    if (!cg_translate_score(c->model, c->tok, &ds->pairs, idx, nt, (int)t->beam, t->alpha,
                            !t->no_cache, &t->lim, &bleu, &chrf, NULL))
        return cg_prog_fail_lib(NULL);
    double dt = cg_now() - t0;
    cJSON *j = cJSON_CreateObject();
    cg_json_put_num(j, "bleu", "%.2f", bleu);
    cg_json_put_num(j, "chrf", "%.2f", chrf);
    cg_json_put_int(j, "beam", t->beam);
    cg_json_put_num(j, "length_penalty", "%g", t->alpha);
    put_limits(j, &t->lim);
    cg_json_put_str(j, "split", valid ? "valid" : "test");
    cg_json_put_int(j, valid ? "valid_pairs" : "test_pairs", nt);
    cg_json_put_num(j, "decode_s", "%.1f", dt);
    cg_json_put_int(j, "step", c->step);
    cg_json_put_str(j, "precision", cg_precision_name(prec));
    if (cg_st_metadata(c->file, "ema.updates")) /* whether it judged the weights' average */
        cg_json_put_bool(j, "ema", c->averaged);
    int rc = cg_json_print_line(stdout, j) ? -1 : cg_prog_fail_lib(NULL);
    cJSON_Delete(j);
    return rc;
}

/* ============================================================ score */

/* An input of score: --ref's or --hyp's file (path NULL: standard input),
 * read once, its lines pointing into it. */
typedef struct {
    const char *flag, *path;
    char *buf;
    const char **lines;
    int64_t n;
} score_text;

/* How messages name t: "--ref 'r.txt'", "standard input (the hypotheses)". */
static const char *input_name(char *buf, size_t n, const score_text *t)
{
    if (t->path)
        snprintf(buf, n, "%s '%s'", t->flag, t->path);
    else
        snprintf(buf, n, "standard input (the %s)",
                 strcmp(t->flag, "--ref") ? "hypotheses" : "references");
    return buf;
}

/* The file t->path (NULL: standard input) read once as text, as the zoo
 * reads its inputs (models/util/files.h cg_read_file_once: a directory, an
 * empty file, a NUL byte or more than the input limit refused), into lines
 * as translate reads its stdin (cg_read_lines: "\n" ends a line, the "\r"s
 * before it dropped, a last line without one counted), each valid UTF-8 as
 * sacreBLEU reads its files: false + error naming t (and the line). */
static bool score_read(score_text *t)
{
    size_t len;
    char name[4200], msg[1024];
    if (!(t->buf = cg_read_file_once(t->path ? t->path : "-", 0, true, &len))) {
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        const char *q = strstr(msg, "'-'"); /* standard input, named */
        if (t->path)
            cg_prefix_error("%s: ", t->flag);
        else if (q)
            cg_set_error("%.*s%s%s", (int)(q - msg), msg, input_name(name, sizeof name, t), q + 3);
        return false;
    }
    int64_t n = t->buf[len - 1] != '\n'; /* a last line without "\n" (len > 0) */
    for (size_t i = 0; i < len; i++)
        n += t->buf[i] == '\n';
    if (!(t->lines = malloc((size_t)n * sizeof *t->lines))) {
        cg_set_error("out of memory reading %s", input_name(name, sizeof name, t));
        return false;
    }
    char *p = t->buf, *end = t->buf + len; /* *end is a NUL */
    for (t->n = 0; t->n < n; t->n++) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        e = e ? e : end;
        *e = '\0';
        size_t ll = (size_t)(e - p), bad = 0;
        while (ll > 0 && p[ll - 1] == '\r')
            p[--ll] = '\0';
        if (cg_utf8_count(p, ll, &bad) < 0) {
            cg_set_error("%s: line %lld is not valid UTF-8 (bad byte 0x%02x at byte %zu)",
                         input_name(name, sizeof name, t), (long long)t->n + 1,
                         (unsigned)(unsigned char)p[bad], bad + 1);
            return false;
        }
        t->lines[t->n] = p;
        p = e + 1;
    }
    return true;
}

/* The printf format of x that reads back as x: the shortest of %.15g,
 * %.16g and %.17g (as cJSON's and Python's repr). */
static const char *exact_fmt(double x)
{
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    char b[40];
    for (int i = 0; i < 2; i++) {
        cg_snprintf_c(b, sizeof b, fmts[i], x);
        if (cg_strtod_c(b, NULL) == x)
            return fmts[i];
    }
    return fmts[2];
}

/* sacreBLEU's signatures of the settings (BLEU(), CHRF()); "impl:cgrad":
 * models/report/metrics.c computed them, not sacreBLEU */
#define SCORE_IMPL "|impl:cgrad|compat:sacrebleu-2.x"
#define BLEU_SIGNATURE "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" SCORE_IMPL
#define CHRF_SIGNATURE "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no" SCORE_IMPL

/* score's JSON line of the hypotheses h against the references r (as
 * many lines): -1 or the exit code. */
static int score_print(const score_text *r, const score_text *h)
{
    cg_bleu_stats st;
    double chrf = 0;
    const int n = (int)r->n;
    if (!cg_bleu_compute(n, h->lines, r->lines, &st) || (chrf = cg_chrf(n, h->lines, r->lines)) < 0)
        return cg_prog_fail_lib(NULL);
    char prec[200];
    const double *p = st.precisions;
    snprintf(prec, sizeof prec, "[%s, %s, %s, %s]", CG_JSON_NUM(exact_fmt(p[0]), p[0]),
             CG_JSON_NUM(exact_fmt(p[1]), p[1]), CG_JSON_NUM(exact_fmt(p[2]), p[2]),
             CG_JSON_NUM(exact_fmt(p[3]), p[3]));
    cJSON *j = cJSON_CreateObject();
    cg_json_put_num(j, "bleu", exact_fmt(st.score), st.score);
    cg_json_put_num(j, "chrf", exact_fmt(chrf), chrf);
    bool ok = j && cJSON_AddRawToObject(j, "precisions", prec);
    cg_json_put_num(j, "bp", exact_fmt(st.bp), st.bp);
    cg_json_put_num(j, "ratio", exact_fmt(st.ratio), st.ratio);
    cg_json_put_int(j, "hyp_len", st.hyp_len);
    cg_json_put_int(j, "ref_len", st.ref_len);
    cg_json_put_int(j, "sentences", r->n);
    cg_json_put_str(j, "bleu_signature", BLEU_SIGNATURE);
    cg_json_put_str(j, "chrf_signature", CHRF_SIGNATURE);
    int rc = !ok                             ? cg_prog_fail("out of memory")
             : cg_json_print_line(stdout, j) ? -1
                                             : cg_prog_fail_lib(NULL);
    cJSON_Delete(j);
    return rc;
}

/* The checks before anything is read, each input in its own right (a file,
 * or standard input: at most one, not a terminal) and against standard
 * output: -1 or the exit code. */
static int score_inputs_ok(const score_text *r, const score_text *h)
{
    char name[4200];
    const score_text *in = !r->path ? r : !h->path ? h : NULL;
    if (!r->path && !h->path) {
        cg_prog_fail("--ref - and the hypotheses cannot both be standard input: give --hyp FILE");
        return CG_EXIT_USAGE;
    }
    if (in && isatty(STDIN_FILENO)) {
        cg_prog_fail("%s is a terminal: give %s FILE, or pipe them in",
                     input_name(name, sizeof name, in), in->flag);
        return CG_EXIT_USAGE;
    }
    for (const score_text *t = r; t; t = t == r ? h : NULL)
        if (!cg_out_check_stdout(t->path ? t->path : "/dev/stdin",
                                 t->path ? t->flag : "standard input"))
            return cg_prog_fail_lib(NULL);
    return -1;
}

int score_files(const char *ref, const char *hyp)
{
    score_text r = {.flag = "--ref", .path = strcmp(ref, "-") ? ref : NULL},
               h = {.flag = "--hyp", .path = hyp && strcmp(hyp, "-") ? hyp : NULL};
    char rn[4200], hn[4200];
    int rc = score_inputs_ok(&r, &h);
    if (rc < 0 && (!score_read(&r) || !score_read(&h)))
        rc = cg_prog_fail_lib(NULL);
    else if (rc < 0 && h.n != r.n)
        rc = cg_prog_fail("%s has %lld lines and %s %lld: one hypothesis per reference line "
                          "(nothing was scored)",
                          input_name(hn, sizeof hn, &h), (long long)h.n,
                          input_name(rn, sizeof rn, &r), (long long)r.n);
    else if (rc < 0 && r.n > INT32_MAX)
        rc = cg_prog_fail("%s has %lld lines; score takes at most %d",
                          input_name(rn, sizeof rn, &r), (long long)r.n, (int)INT32_MAX);
    if (rc < 0 && cg_same_file(h.path ? h.path : "/dev/stdin", r.path ? r.path : "/dev/stdin"))
        cg_prog_warn("%s is %s's file: the references are scored against themselves",
                     input_name(hn, sizeof hn, &h), r.path ? "--ref" : "standard input");
    if (rc < 0)
        rc = score_print(&r, &h);
    free(r.buf);
    free(r.lines);
    free(h.buf);
    free(h.lines);
    return rc;
}

/* Standard input, read as the sentences, is not the checkpoint loaded:
 * `translate --ckpt m.st <m.st` translated the checkpoint's bytes. */
bool stdin_not_ckpt(const char *ckpt)
{
    if (!cg_same_file(ckpt, "/dev/stdin"))
        return true;
    cg_set_error("standard input is --ckpt '%s', the checkpoint this command loads; give the "
                 "sentences as arguments or on another standard input (nothing was translated)",
                 ckpt);
    return false;
}

/* --sampling's flags against the others: -1, or the exit code (2). */
int translate_flag_rules(const cg_translate_opts *t)
{
    const cg_sample_config d = cg_sample_default();
    const char *why = NULL;
    if (!t->sampling && (t->sample.top_k != d.top_k || t->sample.top_p != d.top_p ||
                         t->sample.temperature != d.temperature || t->seed != 1))
        why = "--sampling-topk, --sampling-topp, --temperature and --seed are --sampling's: "
              "give --sampling";
    else if (t->sample.top_p <= 0)
        why = "--sampling-topp: 0 keeps no token; give P in (0, 1]";
    else if (t->score_ref && (t->sampling || t->beam > 1 || t->nbest))
        why = "--score-reference scores the references given, decoding nothing: drop --beam, "
              "--nbest and --sampling";
    else if (t->score_ref && t->buffer)
        why = "--score-reference reads every line before scoring (its file has one a line): "
              "drop --buffer-size";
    if (!why)
        return -1;
    cg_prog_fail("%s", why);
    return CG_EXIT_USAGE;
}

int translate_stdin(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, int64_t *total,
                    int64_t *nbad)
{
    const int64_t size = t->score_ref ? 0 : t->buffer ? t->buffer : isatty(STDIN_FILENO) ? 1 : 50;
    int rc = -1;
    *total = 0;
    for (bool more = true; rc < 0 && more;) {
        int64_t n = 0;
        char **why = NULL, **texts = cg_read_lines_upto(stdin, "stdin", size, &n, &why);
        if (!texts)
            return cg_prog_fail_lib(NULL);
        /* the first buffer always (an empty input still checks the flags) */
        if (n > 0 || *total == 0)
            rc = translate_texts(c, t, texts, why, n, "line", *total, nbad);
        *total += n;
        more = size > 0 && n == size;
        cg_strings_free(texts, n);
        for (int64_t i = 0; i < n; i++)
            free(why[i]);
        free(why);
    }
    return rc;
}
