/* cgrad zoo as a library (see zoo.h): the programs' own loaders, sampler,
 * translator and tokenizer behind one opaque handle, so that what the
 * library computes is what the programs print. */
#include "models/zoo/zoo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/sampling.h"
#include "models/seq2seq/beam.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/train/checkpoint.h"

struct cg_zoo_model {
    bool lm;                /* charlm, else seq2seq */
    cg_charlm_ckpt c;       /* lm */
    cg_seq2seq_ckpt s;      /* !lm */
    cg_tokenizer *tok;      /* borrowed from c or s */
    char *config;           /* this build's config JSON */
    cg_precision precision; /* the checkpoint's training precision */
};

/* "WHAT: NULL model" for a NULL handle (NULL in, NULL out: the error an
 * earlier call recorded is kept when there is one). */
static bool have(const cg_zoo_model *m, const char *what)
{
    if (!m && !cg_has_error())
        cg_set_error("%s: NULL model", what);
    return m != NULL;
}

static bool want_kind(const cg_zoo_model *m, bool lm, const char *what)
{
    if (!have(m, what))
        return false;
    if (m->lm != lm)
        cg_set_error("%s: a %s model has no %s (it is for %s checkpoints)", what, cg_zoo_kind(m),
                     what, lm ? "charlm" : "seq2seq");
    return m->lm == lm;
}

/* The ids of t: an int64 tensor of at least `min` elements, copied out
 * (malloc'd, *n its count) in row-major order. */
static int64_t *ids_of(const cg_tensor *t, const char *what, const char *arg, int64_t min,
                       int64_t *n)
{
    if (!t) {
        if (!cg_has_error())
            cg_set_error("%s: NULL %s", what, arg);
        return NULL;
    }
    if (!cg_check_dtype(what, arg, t, CG_I64))
        return NULL;
    *n = cg_numel(t);
    if (*n < min) {
        cg_set_error("%s: %s has %lld ids, at least %lld needed", what, arg, (long long)*n,
                     (long long)min);
        return NULL;
    }
    cg_tensor *c = cg_contiguous((cg_tensor *)t);
    int64_t *ids = c ? malloc((size_t)(*n ? *n : 1) * sizeof *ids) : NULL;
    if (c && !ids)
        cg_set_error("out of memory");
    if (ids)
        memcpy(ids, cg_data_i64(c), (size_t)*n * sizeof *ids);
    cg_release(c);
    return ids;
}

/* ids_of for one sequence: [n], or [1, n] (nanoGPT's idx) and any other
 * shape whose leading dims are 1; a batch is refused, not read as one
 * sequence. */
static int64_t *seq_of(const cg_tensor *t, const char *what, const char *arg, int64_t min,
                       int64_t *n)
{
    if (t && t->ndim > 1 && cg_numel(t) != t->shape[t->ndim - 1]) {
        char sh[96];
        cg_set_error("%s: %s must be one sequence, [n] or [1, n] ids (got %s)", what, arg,
                     cg_shape_str(t, sh, sizeof sh));
        return NULL;
    }
    return ids_of(t, what, arg, min, n);
}

static char *kind_of(const char *path)
{
    cg_st_file *f = cg_st_open(path);
    const char *kind = f ? cg_st_metadata(f, "model") : NULL;
    char *k = kind ? strdup(kind) : NULL;
    if (f && !kind)
        cg_set_error("'%s' is not a zoo checkpoint (no metadata \"model\")", path);
    else if (kind && !k)
        cg_set_error("out of memory");
    cg_st_close(f);
    return k;
}

cg_zoo_model *cg_zoo_load(const char *path) { return cg_zoo_load_base(path, NULL); }

cg_zoo_model *cg_zoo_load_base(const char *path, const char *base)
{
    if (!path) {
        cg_set_error("zoo load: NULL path");
        return NULL;
    }
    char *kind = kind_of(path);
    if (!kind)
        return NULL;
    cg_zoo_model *m = calloc(1, sizeof *m);
    bool ok = m != NULL;
    if (!ok)
        cg_set_error("out of memory");
    else if ((m->lm = !strcmp(kind, "charlm"))) {
        const cg_charlm_load_opts o = {.base = base, .seed = 0, .dropout = NAN};
        ok = cg_charlm_ckpt_load_opts(path, &o, &m->c);
        ok = ok && (m->config = cg_charlm_config_to_json(&m->c.model->cfg)) != NULL;
        m->tok = m->c.tok;
    } else if (!strcmp(kind, "seq2seq")) {
        ok = cg_seq2seq_ckpt_load_weights(path, base, CG_CKPT_AVERAGE, &m->s);
        ok = ok && (m->config = cg_seq2seq_config_to_json(&m->s.model->cfg)) != NULL;
        m->tok = m->s.tok;
    } else {
        cg_set_error("'%s' holds a \"%s\" model; the zoo has charlm and seq2seq", path, kind);
        ok = false;
    }
    free(kind);
    /* as sample, translate and eval read it (a LoRA checkpoint: its own) */
    ok = ok && cg_train_precision(m->lm ? cg_charlm_ckpt_train_json(&m->c)
                                        : cg_st_metadata(m->s.file, "train"),
                                  path, &m->precision);
    if (!ok) {
        cg_zoo_free(m);
        return NULL;
    }
    cg_st_close(m->lm ? m->c.file : m->s.file); /* everything is read: close the file */
    m->c.file = m->s.file = NULL;
    cg_module_train(cg_zoo_module(m), false);
    return m;
}

void cg_zoo_free(cg_zoo_model *m)
{
    if (!m)
        return;
    if (m->lm)
        cg_charlm_ckpt_free(&m->c);
    else
        cg_seq2seq_ckpt_free(&m->s);
    free(m->config);
    free(m);
}

cg_precision cg_zoo_precision(const cg_zoo_model *m)
{
    return m ? m->precision : CG_PRECISION_FP32;
}

const char *cg_zoo_kind(const cg_zoo_model *m) { return !m ? NULL : m->lm ? "charlm" : "seq2seq"; }

const char *cg_zoo_config(const cg_zoo_model *m) { return have(m, "config") ? m->config : NULL; }

cg_module *cg_zoo_module(cg_zoo_model *m)
{
    if (!have(m, "module"))
        return NULL;
    return m->lm ? CG_MODULE(m->c.model) : CG_MODULE(m->s.model);
}

/* ------------------------------------------------------------ tokenizer */
int64_t cg_zoo_vocab_size(const cg_zoo_model *m)
{
    return m ? cg_tokenizer_vocab_size(m->tok) : -1;
}

cg_tensor *cg_zoo_encode(const cg_zoo_model *m, const char *text, int64_t *n_unknown)
{
    if (!have(m, "encode"))
        return NULL;
    if (!text) {
        cg_set_error("encode: NULL text");
        return NULL;
    }
    int64_t n = 0, unk = 0;
    int64_t *ids = cg_tokenizer_encode(m->tok, text, &n, &unk);
    cg_tensor *t = ids ? cg_from_i64(1, &n, ids) : NULL;
    free(ids);
    if (t && n_unknown)
        *n_unknown = unk;
    return t;
}

char *cg_zoo_decode(const cg_zoo_model *m, const cg_tensor *ids)
{
    int64_t n;
    int64_t *v = have(m, "decode") ? ids_of(ids, "decode", "ids", 0, &n) : NULL;
    char *s = v ? cg_tokenizer_decode(m->tok, v, n) : NULL;
    free(v);
    return s;
}

/* ------------------------------------------------------------ forward */
cg_tensor *cg_zoo_forward(cg_zoo_model *m, const cg_tensor *x, const cg_tensor *tgt_in)
{
    if (!have(m, "forward"))
        return NULL;
    int64_t n, nt = 0;
    int64_t *xs = ids_of(x, "forward", "x", 1, &n), *ts = NULL;
    if (xs && x->ndim != 2) {
        cg_set_error("forward: x must be [B, T] ids (got %d dimensions)", x->ndim);
    } else if (xs && m->lm && tgt_in) {
        cg_set_error("forward: a charlm model takes no tgt_in (pass NULL)");
    } else if (xs && !m->lm && (ts = ids_of(tgt_in, "forward", "tgt_in", 1, &nt)) &&
               (tgt_in->ndim != 2 || tgt_in->shape[0] != x->shape[0])) {
        cg_set_error("forward: tgt_in must be [B, T] ids with x's B = %lld",
                     (long long)x->shape[0]);
    } else if (xs && (m->lm || ts)) {
        cg_tensor *l = m->lm ? cg_charlm_forward(m->c.model, xs, x->shape[0], x->shape[1])
                             : cg_seq2seq_forward(m->s.model, xs, x->shape[0], x->shape[1], ts,
                                                  tgt_in->shape[1]);
        free(xs);
        free(ts);
        return l;
    }
    free(xs);
    free(ts);
    return NULL;
}

/* The mean loss of x -> x[1:] over windows of min(max_len, n - 1). */
static double charlm_score(cg_charlm *lm, const int64_t *x, int64_t n)
{
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) {
        cg_set_error("out of memory");
        return NAN;
    }
    for (int64_t i = 0; i < n; i++) /* any id outside [0, V) is refused by the forward */
        ids[i] = x[i] < 0 || x[i] > INT32_MAX ? -1 : (int32_t)x[i];
    int64_t T = n - 1 < lm->cfg.max_len ? n - 1 : lm->cfg.max_len, nwin;
    double loss = NAN;
    if (!cg_charlm_full_loss(lm, (cg_split_view){ids, n}, T, &loss, &nwin))
        loss = NAN;
    free(ids);
    return loss;
}

/* The plain cross-entropy of BOS + y -> y + EOS given x + EOS. */
static double seq2seq_score(cg_seq2seq *s, const int64_t *x, int64_t S, const int64_t *y, int64_t T)
{
    int64_t *src = malloc((size_t)(S + 1) * sizeof *src);
    int64_t *tin = malloc((size_t)(T + 1) * sizeof *tin);
    int64_t *tout = malloc((size_t)(T + 1) * sizeof *tout);
    double loss = NAN;
    if (src && tin && tout) {
        memcpy(src, x, (size_t)S * sizeof *src);
        src[S] = CG_EOS;
        tin[0] = CG_BOS;
        memcpy(tin + 1, y, (size_t)T * sizeof *tin);
        memcpy(tout, y, (size_t)T * sizeof *tout);
        tout[T] = CG_EOS;
        bool was_training = s->base.training;
        cg_module_train(CG_MODULE(s), false);
        cg_no_grad_begin();
        cg_tensor *logits = cg_seq2seq_forward(s, src, 1, S + 1, tin, T + 1);
        cg_tensor *t = logits ? cg_from_i64(CG_SHAPE(1, T + 1), tout) : NULL;
        cg_tensor *l = t ? cg_cross_entropy(logits, t, CG_PAD, 0.0f, CG_REDUCTION_MEAN) : NULL;
        if (l)
            loss = cg_item(l);
        cg_release_all(3, logits, t, l);
        cg_no_grad_end();
        cg_module_train(CG_MODULE(s), was_training);
    } else {
        cg_set_error("out of memory");
    }
    free(src);
    free(tin);
    free(tout);
    return loss;
}

double cg_zoo_score(cg_zoo_model *m, const cg_tensor *x, const cg_tensor *y)
{
    if (!have(m, "score"))
        return NAN;
    int64_t n, ny = 0;
    int64_t *xs = seq_of(x, "score", "x", m->lm ? 2 : 1, &n), *ys = NULL;
    double loss = NAN;
    if (xs && m->lm && y)
        cg_set_error("score: a charlm model scores one sequence (pass y = NULL)");
    else if (xs && m->lm)
        loss = charlm_score(m->c.model, xs, n);
    else if (xs && (ys = seq_of(y, "score", "y", 0, &ny)))
        loss = seq2seq_score(m->s.model, xs, n, ys, ny);
    free(xs);
    free(ys);
    return loss;
}

/* ------------------------------------------------------------ decoding */
cg_tensor *cg_zoo_generate(cg_zoo_model *m, const cg_tensor *prompt, int64_t n_new,
                           const cg_sample_config *s, uint64_t seed)
{
    return cg_zoo_generate_ex(m, prompt, n_new, s, NULL, seed);
}

cg_tensor *cg_zoo_generate_ex(cg_zoo_model *m, const cg_tensor *prompt, int64_t n_new,
                              const cg_sample_config *s, const cg_logit_rules *rules, uint64_t seed)
{
    if (!want_kind(m, true, "generate"))
        return NULL;
    int64_t n;
    int64_t *p = seq_of(prompt, "generate", "prompt", 1, &n);
    if (p && n_new < 0)
        cg_set_error("generate: n_new is %lld, must be >= 0", (long long)n_new);
    const cg_sample_config def = cg_sample_default();
    cg_rng rng = cg_rng_new(seed);
    int64_t *ids = p && n_new >= 0 ? cg_charlm_generate_ex(m->c.model, p, n, n_new, s ? s : &def,
                                                           rules, &rng, true, NULL, NULL)
                                   : NULL;
    int64_t total = ids ? n + n_new : 0; /* refused above when it would overflow */
    cg_tensor *t = ids ? cg_from_i64(1, &total, ids) : NULL;
    free(p);
    free(ids);
    return t;
}

char **cg_zoo_translate(cg_zoo_model *m, const char *const *texts, int64_t n, int beam,
                        double alpha)
{
    return cg_zoo_translate_ex(m, texts, n, beam, alpha, NULL);
}

/* The sentences texts[0..n) of a translator encoded into *src: false +
 * error (a NULL array or sentence, text the model cannot take). */
static bool zoo_sources(const cg_zoo_model *m, const char *const *texts, int64_t n, cg_sources *src)
{
    if (!want_kind(m, false, "translate"))
        return false;
    if (!texts || n < 0) {
        cg_set_error("translate: needs an array of n >= 0 sentences");
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        if (!texts[i]) {
            cg_set_error("translate: sentence %lld is NULL", (long long)i + 1);
            return false;
        }
    return cg_sources_encode(m->tok, texts, n, m->s.model->cfg.max_len, src);
}

char **cg_zoo_translate_ex(cg_zoo_model *m, const char *const *texts, int64_t n, int beam,
                           double alpha, const cg_decode_limits *lim)
{
    cg_sources src;
    if (!zoo_sources(m, texts, n, &src))
        return NULL;
    char **out = cg_translate_all(m->s.model, m->tok, &src, beam, alpha, true, lim, NULL);
    cg_sources_free(&src);
    return out;
}

char **cg_zoo_translate_sample(cg_zoo_model *m, const char *const *texts, int64_t n,
                               const cg_sample_config *s, uint64_t seed,
                               const cg_decode_limits *lim)
{
    cg_sources src;
    if (!zoo_sources(m, texts, n, &src))
        return NULL;
    cg_sample_config c = s ? *s : cg_sample_default();
    if (c.top_k > m->s.model->cfg.vocab) /* all of them */
        c.top_k = m->s.model->cfg.vocab;
    char **out = cg_translate_sample(m->s.model, m->tok, &src, &c, seed, true, lim, NULL);
    cg_sources_free(&src);
    return out;
}

void cg_zoo_strings_free(char **s, int64_t n) { cg_strings_free(s, n); }
