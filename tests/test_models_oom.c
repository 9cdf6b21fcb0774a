/* Out of memory in the zoo's library functions (and the optimizer's and
 * the loader's they build on) with an older, unrelated message left in the
 * error slot: each allocation of a call in turn fails, and the call must
 * fail with a message of its own, never the old one (its "out of memory"
 * fallback once looked at cg_has_error(), true from any earlier failure
 * not cleared, instead of at cg_error_serial(): the stale message came
 * back as the reason), leave the files it reads as they were and no file
 * of its own behind, and leak nothing (under AddressSanitizer).
 *
 * Linked with -Wl,--wrap= malloc, calloc, realloc, strdup and strndup, and
 * cJSON's allocations made ours (cJSON_InitHooks: its library is shared,
 * out of the wrap's reach): while fail_at is set, the fail_at-th of those
 * calls from now (all counted together) fails. A sweep arms k = 1, 2, ... until a call makes
 * fewer than k allocations (the k-th never came: the call succeeded). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/sampling.h"
#include "models/data/data.h"
#include "models/report/plot.h"
#include "models/seq2seq/beam.h"
#include "models/train/average.h"
#include "models/train/finetune.h"
#include "models/train/merge.h"
#include "nn/data.h"
#include "optim/ema.h"
#include "tests/testutil.h"

void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
char *__wrap_strndup(const char *s, size_t n);

static atomic_long fail_at;      /* 0: none fails */
static atomic_bool alloc_failed; /* the fail_at-th came */

static bool fails_now(void)
{
    long k = atomic_load(&fail_at);
    while (k > 0 && !atomic_compare_exchange_weak(&fail_at, &k, k - 1))
        ;
    if (k != 1)
        return false;
    atomic_store(&alloc_failed, true);
    return true;
}

void *__wrap_malloc(size_t size) { return fails_now() ? NULL : __real_malloc(size); }
void *__wrap_calloc(size_t n, size_t size) { return fails_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t size) { return fails_now() ? NULL : __real_realloc(p, size); }
char *__wrap_strdup(const char *s) { return fails_now() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fails_now() ? NULL : __real_strndup(s, n); }

#define STALE "stale message of an earlier failure"

/* ------------------------------------------------------------ files */

/* The names and bytes of the files of dir, sorted by name, as one text. */
static char *dir_state(const char *dir)
{
    struct dirent **ents = NULL;
    const int n = scandir(dir, &ents, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    size_t len = 0, cap = 1024;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            FILE *f = fopen(path, "rb");
            ck_assert_msg(f, "%s", path);
            fseek(f, 0, SEEK_END);
            const long size = ftell(f);
            rewind(f);
            while (len + strlen(name) + (size_t)size + 2 > cap)
                s = realloc(s, cap *= 2);
            ck_assert_ptr_nonnull(s);
            memcpy(s + len, name, strlen(name) + 1);
            len += strlen(name) + 1;
            ck_assert_int_eq(fread(s + len, 1, (size_t)size, f), size);
            len += (size_t)size;
            s[len++] = '\n';
            fclose(f);
        }
        free(ents[i]);
    }
    free(ents);
    s = realloc(s, len + 1);
    s[len] = '\0';
    return s;
}

/* The names of dir's files, for a message (one of 2 buffers). */
static const char *dir_names(const char *dir)
{
    static char buf[2][2048];
    static int which;
    char *b = buf[which ^= 1];
    b[0] = '\0';
    struct dirent **ents = NULL;
    const int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.')
            snprintf(b + strlen(b), sizeof buf[0] - strlen(b), "%s ", ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    return b;
}

/* ------------------------------------------------------------ the sweep */

typedef struct {
    const char *what;
    void (*setup)(void *ctx); /* NULL, or before each call, with memory */
    bool (*call)(void *ctx);  /* the call swept: true on success */
    void (*done)(void *ctx);  /* NULL, or after each call, with memory: its results freed and
                               * what a successful one wrote put back */
    void *ctx;
    const char *dir; /* NULL, or the directory whose files a call must leave as they were */
} sweep_case;

/* Sweep c; returns the number of allocations of the successful call. */
static long sweep(const sweep_case *c)
{
    char *before = c->dir ? dir_state(c->dir) : NULL;
    char names[2048] = "";
    if (c->dir)
        snprintf(names, sizeof names, "%s", dir_names(c->dir));
    long k = 1;
    for (; k < 200000; k++) {
        if (c->setup)
            c->setup(c->ctx);
        cg_set_error(STALE);
        atomic_store(&alloc_failed, false);
        atomic_store(&fail_at, k);
        const bool ok = c->call(c->ctx);
        atomic_store(&fail_at, 0);
        const bool failed_one = atomic_load(&alloc_failed);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        if (c->done)
            c->done(c->ctx);
        ck_assert_msg(ok || failed_one, "%s failed with no allocation failing: '%s'", c->what, msg);
        ck_assert_msg(ok || msg[0], "%s, allocation %ld failing: an empty message", c->what, k);
        ck_assert_msg(ok || !strstr(msg, STALE),
                      "%s, allocation %ld failing: the stale message came back: '%s'", c->what, k,
                      msg);
        if (c->dir) {
            char *after = dir_state(c->dir);
            ck_assert_msg(strcmp(before, after) == 0,
                          "%s, allocation %ld failing (%s): the directory changed: %s-> %s",
                          c->what, k, ok ? "succeeded" : msg, names, dir_names(c->dir));
            free(after);
        }
        if (!failed_one) /* every allocation of the call has failed once */
            break;
    }
    free(before);
    ck_assert_msg(k < 200000, "%s: no end", c->what);
    ck_assert_int_gt(k, 1);
    return k - 1;
}

/* ------------------------------------------------------------ models */

static const char TEXT[] = "the whale and the sea, the ship and the captain";

static cg_vocab *text_vocab(void)
{
    uint32_t cps[sizeof TEXT];
    int64_t n = 0;
    for (const char *p = TEXT; *p; p++)
        cps[n++] = (uint32_t)*p;
    return cg_vocab_from_codepoints(cps, n);
}

static cg_charlm *tiny_lm(int64_t vocab, uint64_t seed)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = vocab, c.d = 8, c.H = 2, c.layers = 1, c.d_ff = 16, c.max_len = 8;
    cg_charlm *m = cg_charlm_new(&c, seed);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* A charlm checkpoint at path, its weights drawn from seed. */
static void save_lm(const char *path, uint64_t seed)
{
    cg_vocab *v = text_vocab();
    cg_charlm *m = tiny_lm(v->n, seed);
    ck_assert_msg(cg_charlm_ckpt_save(path, m, v, NULL, 3, NULL), "%s", cg_last_error());
    cg_charlm_free(m);
    cg_vocab_free(v);
}

/* A LoRA adapter checkpoint at path of the base at base. */
static void save_adapter(const char *path, const char *base)
{
    cg_charlm_ckpt ck;
    ck_assert_msg(cg_charlm_ckpt_load(base, &ck), "%s", cg_last_error());
    cg_module *m = CG_MODULE(ck.model);
    cg_rng g = cg_rng_new(5);
    const cg_ft_lora l = {1, NAN, 0, "q_proj,fc1"};
    ck_assert_int_eq(cg_ft_lora_attach(m, &l, &g, NULL), 2);
    cg_ft_origin o;
    ck_assert(cg_ft_origin_of(base, ck.file, &o));
    char *from = cg_ft_origin_json(&o), *cfg = cg_charlm_config_to_json(&ck.model->cfg);
    ck_assert(from && cfg);
    const cg_ft_save ft = {.init_from = from, .adapters = true};
    ck_assert_msg(cg_ft_ckpt_save(path, &ft, "charlm", cfg, ck.tok, m, NULL, 4, NULL), "%s",
                  cg_last_error());
    free(from);
    free(cfg);
    cg_charlm_ckpt_free(&ck);
}

static bool lm_loads(const char *path, cg_ckpt_weights w)
{
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.dropout = NAN, .weights = w};
    const bool ok = cg_charlm_ckpt_load_opts(path, &lo, &ck);
    cg_charlm_ckpt_free(&ck);
    return ok;
}

static const cg_avg_model LM = {"charlm", cg_charlm_config_same_arch, lm_loads, NULL,
                                cg_charlm_load_adapted};

/* ------------------------------------------------------------ average, merge */

typedef struct {
    char dir[1024], a[PATH_MAX], b[PATH_MAX], adapter[PATH_MAX], out[PATH_MAX];
} files;

static void files_make(files *f, const char *prefix)
{
    cg_test_mkdtemp(f->dir, sizeof f->dir, prefix);
    snprintf(f->a, sizeof f->a, "%s/a.safetensors", f->dir);
    snprintf(f->b, sizeof f->b, "%s/b.safetensors", f->dir);
    snprintf(f->adapter, sizeof f->adapter, "%s/adapter.safetensors", f->dir);
    snprintf(f->out, sizeof f->out, "%s/out.safetensors", f->dir);
}

/* A successful call's output removed. */
static void remove_out(void *ctx)
{
    files *f = ctx;
    unlink(f->out);
}

static bool call_average(void *ctx)
{
    files *f = ctx;
    const char *const in[2] = {f->a, f->b};
    long long params = 0;
    return cg_ckpt_average(&LM, in, 2, f->out, false, CG_CKPT_AVERAGE, &params);
}

START_TEST(test_average_oom)
{
    files f;
    files_make(&f, "average");
    save_lm(f.a, 1);
    save_lm(f.b, 2);
    sweep(&(sweep_case){"cg_ckpt_average", NULL, call_average, remove_out, &f, f.dir});
    cg_test_rm_tree(f.dir);
}
END_TEST

static bool call_merge(void *ctx)
{
    files *f = ctx;
    long long params = 0;
    int n = 0;
    return cg_ckpt_merge(&LM, f->adapter, NULL, f->out, false, CG_CKPT_AVERAGE, &params, &n);
}

START_TEST(test_merge_oom)
{
    files f;
    files_make(&f, "merge");
    save_lm(f.a, 1);
    save_adapter(f.adapter, f.a);
    sweep(&(sweep_case){"cg_ckpt_merge", NULL, call_merge, remove_out, &f, f.dir});
    cg_test_rm_tree(f.dir);
}
END_TEST

/* ------------------------------------------------------------ loads, saves */

typedef struct {
    files f;
    cg_charlm_ckpt ck;
    bool loaded;
    cg_optim *opt;
    cg_ema *ema;
    char *cfg, *old; /* the saved checkpoint's bytes */
    size_t n_old;
} save_ctx;

static bool call_load_adapter(void *ctx)
{
    save_ctx *s = ctx;
    s->loaded = cg_charlm_ckpt_load(s->f.adapter, &s->ck);
    return s->loaded;
}

static void free_loaded(void *ctx)
{
    save_ctx *s = ctx;
    if (s->loaded)
        cg_charlm_ckpt_free(&s->ck);
    s->loaded = false;
}

/* An adapter checkpoint's load (models/train/finetune.h cg_ft_adapt). */
START_TEST(test_adapter_load_oom)
{
    save_ctx s = {0};
    files_make(&s.f, "adapted");
    save_lm(s.f.a, 1);
    save_adapter(s.f.adapter, s.f.a);
    sweep(&(sweep_case){"cg_charlm_ckpt_load (an adapter)", NULL, call_load_adapter, free_loaded,
                        &s, s.f.dir});
    cg_test_rm_tree(s.f.dir);
}
END_TEST

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*n ? *n : 1);
    ck_assert(b && fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

/* The file a successful save replaced put back. */
static void put_back(void *ctx)
{
    save_ctx *s = ctx;
    FILE *f = fopen(s->f.a, "wb");
    ck_assert(f && fwrite(s->old, 1, s->n_old, f) == s->n_old && fclose(f) == 0);
}

static bool call_ckpt_save(void *ctx)
{
    save_ctx *s = ctx;
    return cg_ckpt_save(s->f.a, "charlm", s->cfg, s->ck.tok, CG_MODULE(s->ck.model), s->opt, 9,
                        "{\"note\": 1}");
}

static bool call_ft_save(void *ctx)
{
    save_ctx *s = ctx;
    const cg_ft_save ft = {.ema = s->ema};
    return cg_ft_ckpt_save(s->f.a, &ft, "charlm", s->cfg, s->ck.tok, CG_MODULE(s->ck.model), s->opt,
                           9, NULL);
}

static bool call_charlm_save(void *ctx)
{
    save_ctx *s = ctx;
    return cg_charlm_ckpt_save(s->f.a, s->ck.model, s->ck.vocab, s->opt, 9, NULL);
}

/* A checkpoint saved over an older one (cg_ckpt_writer, cg_ckpt_writer_save;
 * charlm's saver also makes the config JSON): on failure the older one
 * stays. */
START_TEST(test_ckpt_save_oom)
{
    save_ctx s = {0};
    files_make(&s.f, "save");
    save_lm(s.f.a, 1);
    ck_assert(cg_charlm_ckpt_load(s.f.a, &s.ck));
    s.cfg = cg_charlm_config_to_json(&s.ck.model->cfg);
    s.opt = cg_adamw_from_module(CG_MODULE(s.ck.model), 1e-3);
    s.ema = cg_ema_new(CG_MODULE(s.ck.model), 0.9);
    ck_assert(s.cfg && s.opt && s.ema);
    s.old = read_all(s.f.a, &s.n_old);
    sweep(&(sweep_case){"cg_ckpt_save", NULL, call_ckpt_save, put_back, &s, s.f.dir});
    sweep(&(sweep_case){"cg_ft_ckpt_save (an average)", NULL, call_ft_save, put_back, &s, s.f.dir});
    sweep(&(sweep_case){"cg_charlm_ckpt_save", NULL, call_charlm_save, put_back, &s, s.f.dir});
    free(s.old);
    free(s.cfg);
    cg_ema_free(s.ema);
    cg_optim_free(s.opt);
    cg_charlm_ckpt_free(&s.ck);
    cg_test_rm_tree(s.f.dir);
}
END_TEST

/* cg_ckpt_writer_filled's "out of memory" when nothing was recorded since
 * the serial its caller took (an older message does not count), and the
 * message recorded since when one was. */
START_TEST(test_writer_filled_message)
{
    cg_set_error(STALE);
    unsigned long serial = cg_error_serial();
    ck_assert_ptr_null(cg_ckpt_writer_filled(cg_st_writer_new_deferred(), false, serial));
    ck_assert_str_eq(cg_last_error(), "out of memory");
    serial = cg_error_serial();
    cg_set_error("its own reason");
    ck_assert_ptr_null(cg_ckpt_writer_filled(cg_st_writer_new_deferred(), false, serial));
    ck_assert_str_eq(cg_last_error(), "its own reason");
}
END_TEST

/* A save given what a failed call returned (a config JSON, a writer: NULL)
 * keeps that call's message, the root cause, rather than saying "out of
 * memory" or "cannot save": a model whose config does not pass its check
 * is refused for it, and nothing is written. */
START_TEST(test_ckpt_save_keeps_root_cause)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", cg_test_path("root_cause.safetensors"));
    cg_vocab *v = text_vocab();
    cg_charlm *m = tiny_lm(v->n, 1);
    m->cfg.H = 3; /* d 8 */
    cg_clear_error();
    ck_assert(!cg_charlm_ckpt_save(path, m, v, NULL, 1, NULL));
    ck_assert_msg(strstr(cg_last_error(), "charlm config: "), "'%s'", cg_last_error());
    ck_assert(access(path, F_OK) != 0);
    m->cfg.H = 2;
    const cg_tokenizer tok = {.kind = CG_TOK_CHAR, .cv = v};
    cg_set_error("the config's reason");
    ck_assert(!cg_ckpt_save(path, "charlm", NULL, &tok, CG_MODULE(m), NULL, 1, NULL));
    ck_assert_str_eq(cg_last_error(), "the config's reason");
    cg_set_error("the writer's reason");
    ck_assert(!cg_ckpt_writer_save(NULL, path));
    ck_assert_str_eq(cg_last_error(), "the writer's reason");
    ck_assert(access(path, F_OK) != 0);
    cg_charlm_free(m);
    cg_vocab_free(v);
}
END_TEST

/* ------------------------------------------------------------ decoding */

typedef struct {
    cg_charlm *lm;
    bool cache;
    int64_t *got;
} gen_ctx;

static bool call_generate(void *ctx)
{
    gen_ctx *g = ctx;
    const int64_t prompt[3] = {1, 2, 3};
    const cg_sample_opts o = {.temperature = 1.0, .top_k = 0, .top_p = 1.0};
    cg_rng rng = cg_rng_new(4);
    g->got = cg_charlm_generate(g->lm, prompt, 3, 10, &o, &rng, g->cache, NULL, NULL);
    return g->got != NULL;
}

static void free_generated(void *ctx)
{
    gen_ctx *g = ctx;
    free(g->got);
    g->got = NULL;
}

START_TEST(test_generate_oom)
{
    gen_ctx g = {tiny_lm(12, 3), false, NULL};
    for (int cache = 0; cache < 2; cache++) {
        g.cache = cache;
        sweep(&(sweep_case){cache ? "cg_charlm_generate (cached)" : "cg_charlm_generate", NULL,
                            call_generate, free_generated, &g, NULL});
    }
    cg_charlm_free(g.lm);
}
END_TEST

typedef struct {
    cg_seq2seq *m;
    bool cache;
    int beam; /* 0: greedy */
    int64_t *best;
} dec_ctx;

static bool call_decode(void *ctx)
{
    dec_ctx *d = ctx;
    const int64_t src[2 * 4] = {5, 6, 7, CG_EOS, 8, 9, CG_EOS, CG_PAD};
    if (!d->beam) {
        int64_t out[2 * 6], lens[2];
        return cg_greedy_decode(d->m, src, 2, 4, 6, out, lens, d->cache);
    }
    int64_t len = 0;
    return cg_beam_search(d->m, src, 4, d->beam, 1.0, 6, &d->best, &len, NULL, NULL, d->cache);
}

static void free_decoded(void *ctx)
{
    dec_ctx *d = ctx;
    free(d->best);
    d->best = NULL;
}

START_TEST(test_decode_oom)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = 12, c.d = 8, c.H = 2, c.d_ff = 16, c.max_len = 16;
    c.enc_layers = 1, c.dec_layers = 1;
    dec_ctx d = {cg_seq2seq_new(&c, 2), false, 0, NULL};
    ck_assert_ptr_nonnull(d.m);
    cg_module_train(CG_MODULE(d.m), false);
    static const char *const what[2][2] = {{"cg_greedy_decode", "cg_greedy_decode (cached)"},
                                           {"cg_beam_search", "cg_beam_search (cached)"}};
    for (int beam = 0; beam < 2; beam++)
        for (int cache = 0; cache < 2; cache++) {
            d.beam = beam ? 3 : 0;
            d.cache = cache;
            sweep(&(sweep_case){what[beam][cache], NULL, call_decode, free_decoded, &d, NULL});
        }
    cg_seq2seq_free(d.m);
}
END_TEST

/* ------------------------------------------------------------ ema, loader, corpus, plot */

typedef struct {
    cg_charlm *lm;
    cg_ema *e;
} ema_ctx;

static bool call_ema_new(void *ctx)
{
    ema_ctx *x = ctx;
    x->e = cg_ema_new(CG_MODULE(x->lm), 0.99);
    return x->e != NULL;
}

static void free_ema(void *ctx)
{
    ema_ctx *x = ctx;
    cg_ema_free(x->e);
    x->e = NULL;
}

START_TEST(test_ema_new_oom)
{
    ema_ctx x = {tiny_lm(12, 3), NULL};
    sweep(&(sweep_case){"cg_ema_new", NULL, call_ema_new, free_ema, &x, NULL});
    cg_charlm_free(x.lm);
}
END_TEST

typedef struct {
    cg_tensor *x, *y;
    cg_rng rng;
    bool shuffle;
    cg_loader *ld;
} loader_ctx;

static void make_loader(void *ctx)
{
    loader_ctx *l = ctx;
    l->rng = cg_rng_new(6);
    l->ld = cg_loader_new(l->x, l->y, 2, l->shuffle ? &l->rng : NULL);
    ck_assert_ptr_nonnull(l->ld);
}

/* The first batch: the epoch's start (its order) and the batch. */
static bool call_loader_next(void *ctx)
{
    loader_ctx *l = ctx;
    const bool got = cg_loader_next(l->ld);
    ck_assert(got || l->ld->failed);
    return got;
}

static void free_loader(void *ctx)
{
    loader_ctx *l = ctx;
    cg_loader_free(l->ld);
    l->ld = NULL;
}

START_TEST(test_loader_epoch_oom)
{
    loader_ctx l = {.x = cg_arange_dtype(CG_F32, 0, 6, 1), .y = cg_arange_dtype(CG_I64, 0, 6, 1)};
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        l.shuffle = shuffle;
        sweep(&(sweep_case){shuffle ? "cg_loader_next (shuffled)" : "cg_loader_next", make_loader,
                            call_loader_next, free_loader, &l, NULL});
    }
    cg_release_all(2, l.x, l.y);
}
END_TEST

typedef struct {
    char dir[1024], path[PATH_MAX];
    cg_tokenizer *tok;
    cg_corpus *c;
} corpus_ctx;

static bool call_corpus_bpe(void *ctx)
{
    corpus_ctx *x = ctx;
    cg_tokenizer *t = x->tok;
    x->c = cg_corpus_read_tok(x->path, &t, CG_TOK_BPE, 300, NULL);
    ck_assert_ptr_eq(t, x->tok);
    return x->c != NULL;
}

static void free_corpus(void *ctx)
{
    corpus_ctx *x = ctx;
    cg_corpus_free(x->c);
    x->c = NULL;
}

/* A text encoded by a BPE tokenizer given (models/data/data.c corpus_bpe). */
START_TEST(test_corpus_bpe_oom)
{
    corpus_ctx x = {0};
    cg_test_mkdtemp(x.dir, sizeof x.dir, "corpus");
    snprintf(x.path, sizeof x.path, "%s/text.txt", x.dir);
    FILE *f = fopen(x.path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 20; i++)
        fprintf(f, "%s %d\n", TEXT, i);
    ck_assert_int_eq(fclose(f), 0);
    const char *lines[4] = {TEXT, "the ship and the sea 0123456789", "a whale, a captain",
                            "and the sea"};
    x.tok = cg_tokenizer_train(CG_TOK_BPE, true, lines, 4, 300);
    if (!x.tok && strstr(cg_last_error(), "SentencePiece")) { /* built without it */
        cg_test_rm_tree(x.dir);
        return;
    }
    ck_assert_msg(x.tok, "%s", cg_last_error());
    sweep(&(sweep_case){"cg_corpus_read_tok (bpe)", NULL, call_corpus_bpe, free_corpus, &x, x.dir});
    cg_tokenizer_free(x.tok);
    cg_test_rm_tree(x.dir);
}
END_TEST

/* Attention weights that a module did not record, with an older message in
 * the slot: the failure says so (not the older message), and no picture is
 * drawn. */
START_TEST(test_plot_attention_unrecorded)
{
    cg_charlm *lm = tiny_lm(12, 3);
    cg_mha *mods[1] = {lm->block[0]->attn};
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", cg_test_path("attention.png"));
    cg_set_error(STALE);
    ck_assert(!cg_plot_attention_of(path, "t", 1, mods, 2, 2, NULL, NULL));
    ck_assert_str_eq(cg_last_error(), "attention weights of layer 0 were not recorded");
    ck_assert(access(path, F_OK) != 0);
    cg_charlm_free(lm);
}
END_TEST

int main(void)
{
    cJSON_Hooks hooks = {__wrap_malloc, free};
    cJSON_InitHooks(&hooks);
    Suite *s = suite_create("models_oom");
    TCase *tc = tcase_create("oom");
    tcase_add_test(tc, test_average_oom);
    tcase_add_test(tc, test_merge_oom);
    tcase_add_test(tc, test_adapter_load_oom);
    tcase_add_test(tc, test_ckpt_save_oom);
    tcase_add_test(tc, test_writer_filled_message);
    tcase_add_test(tc, test_ckpt_save_keeps_root_cause);
    tcase_add_test(tc, test_generate_oom);
    tcase_add_test(tc, test_decode_oom);
    tcase_add_test(tc, test_ema_new_oom);
    tcase_add_test(tc, test_loader_epoch_oom);
    tcase_add_test(tc, test_corpus_bpe_oom);
    tcase_add_test(tc, test_plot_attention_unrecorded);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
