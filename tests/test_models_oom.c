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
 * calls from now (all counted together) fails, setting errno to ENOMEM as
 * the C library's do. A sweep arms k = 1, 2, ... until a call makes
 * fewer than k allocations (the k-th never came: the call succeeded).
 * The training state's sweeps (models/train/state.c, agree.c) also hold a
 * call that succeeds to what it gives without a failure, and a failure's
 * message to saying that memory ran out; the ranks' agreement runs as
 * rank 0 of 2 (-Wl,--wrap=cg_dist_size; the one-process collectives). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/sampling.h"
#include "models/data/data.h"
#include "models/report/plot.h"
#include "models/seq2seq/beam.h"
#include "models/train/agree.h"
#include "models/train/average.h"
#include "models/train/finetune.h"
#include "models/train/merge.h"
#include "models/train/state.h"
#include "models/train/trainer.h"
#include "models/util/config_json.h"
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
void *__real_cg_gemm_thread_buffer(size_t bytes);
void *__wrap_cg_gemm_thread_buffer(size_t bytes);

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

/* A failure sets errno to ENOMEM, as the C library's does. */
#define FAILED (errno = ENOMEM, NULL)
void *__wrap_malloc(size_t size) { return fails_now() ? FAILED : __real_malloc(size); }
/* Set: the next packing buffer a product's driver asks for (core/gemm.c's
 * per-thread buffers, mapped outside the heap) is not to be had. */
static atomic_bool fail_next_buffer;
void *__wrap_cg_gemm_thread_buffer(size_t bytes)
{
    return atomic_exchange(&fail_next_buffer, false) ? NULL : __real_cg_gemm_thread_buffer(bytes);
}
void *__wrap_calloc(size_t n, size_t size) { return fails_now() ? FAILED : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t size)
{
    return fails_now() ? FAILED : __real_realloc(p, size);
}
char *__wrap_strdup(const char *s) { return fails_now() ? FAILED : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n)
{
    return fails_now() ? FAILED : __real_strndup(s, n);
}

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

/* Set by sweep_memory: the call's inputs are good, so a failure must say
 * that memory ran out (not that a file is damaged or malformed). */
static bool says_memory;

/* The fp32 products of CG_BLIS_DRIVER=1 or CG_BLIS_DEFAULT=1, or of a CPU
 * without AVX2 and FMA (BLIS's default path), run BLIS's own driver, whose
 * first use allocates its kernel structure and pools and aborts the
 * process when that fails (docs/robustness.md, round fifty-one: left as
 * it is). There BLIS is set up before each sweep, which then holds every
 * allocation after it. Elsewhere the fp32 paths (skx with AVX-512, haswell
 * with AVX2 and FMA: round fifty-two) are our driver, which never enters
 * BLIS's allocator. Told from the CPU and the switches as core/gemm.c's
 * gemm_init tells them, without asking the library: any question would
 * set the products up before the sweep, and hide a set-up that enters
 * BLIS's allocator where it must not (the abort round fifty-one fixed). */
static bool blis_switched(void)
{
    const char *drv = getenv("CG_BLIS_DRIVER"), *def = getenv("CG_BLIS_DEFAULT");
    return (drv && !strcmp(drv, "1")) || (def && !strcmp(def, "1"));
}

static void blis_set_up(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !blis_switched())
        return; /* our driver: BLIS's allocator never entered */
    enum { N = 64 };
    float *a = calloc(3 * N * N, sizeof *a);
    ck_assert_ptr_nonnull(a);
    cg_sgemm(N, N, N, 1.0f, a, N, 1, a + N * N, N, 1, 0.0f, a + 2 * N * N, N, 1);
    free(a);
}

/* Sweep c; returns the number of allocations of the successful call. */
static long sweep(const sweep_case *c)
{
    blis_set_up();
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
        if (getenv("OOM_DEBUG") && !ok)
            fprintf(stderr, "MSG %s: %s\n", c->what, msg);
        ck_assert_msg(ok || failed_one, "%s failed with no allocation failing: '%s'", c->what, msg);
        ck_assert_msg(ok || msg[0], "%s, allocation %ld failing: an empty message", c->what, k);
        ck_assert_msg(ok || !strstr(msg, STALE),
                      "%s, allocation %ld failing: the stale message came back: '%s'", c->what, k,
                      msg);
        ck_assert_msg(ok || !says_memory || strstr(msg, "out of memory") ||
                          strstr(msg, strerror(ENOMEM)),
                      "%s, allocation %ld failing: not a word of memory: '%s'", c->what, k, msg);
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

/* sweep, each failure's message saying that memory ran out. */
static long sweep_memory(const sweep_case *c)
{
    says_memory = true;
    const long n = sweep(c);
    says_memory = false;
    return n;
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
    sweep_memory(&(sweep_case){"cg_ckpt_average", NULL, call_average, remove_out, &f, f.dir});
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
    sweep_memory(&(sweep_case){"cg_ckpt_merge", NULL, call_merge, remove_out, &f, f.dir});
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
    sweep_memory(&(sweep_case){"cg_charlm_ckpt_load (an adapter)", NULL, call_load_adapter,
                               free_loaded, &s, s.f.dir});
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
    sweep_memory(&(sweep_case){"cg_ckpt_save", NULL, call_ckpt_save, put_back, &s, s.f.dir});
    sweep_memory(
        &(sweep_case){"cg_ft_ckpt_save (an average)", NULL, call_ft_save, put_back, &s, s.f.dir});
    sweep_memory(
        &(sweep_case){"cg_charlm_ckpt_save", NULL, call_charlm_save, put_back, &s, s.f.dir});
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
        sweep_memory(&(sweep_case){cache ? "cg_charlm_generate (cached)" : "cg_charlm_generate",
                                   NULL, call_generate, free_generated, &g, NULL});
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
            sweep_memory(
                &(sweep_case){what[beam][cache], NULL, call_decode, free_decoded, &d, NULL});
        }
    cg_seq2seq_free(d.m);
}
END_TEST

/* ------------------------------------------------------------ products */

/* Products on the paths a training step takes (the packed driver, the
 * skinny and one-row products), forward and backward, 2 threads, in fp32
 * and, where the CPU has one, bf16. */
typedef struct {
    cg_tensor *x[3], *w;
} prod_ctx;

static bool call_products(void *ctx)
{
    prod_ctx *p = ctx;
    bool ok = true;
    for (int prec = 0; prec < 2 && ok; prec++) {
        const cg_precision was = cg_autocast_begin(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        if (cg_get_matmul_precision() != (prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32)) {
            cg_autocast_end(was); /* no bf16 product on this CPU */
            break;
        }
        for (int i = 0; i < 3 && ok; i++) {
            cg_tensor *y = cg_matmul(p->x[i], p->w);
            cg_tensor *l = y ? cg_sum(y, 0, NULL, false) : NULL;
            ok = l && cg_backward(l, NULL, false);
            cg_release_all(2, y, l);
        }
        cg_autocast_end(was);
    }
    return ok;
}

START_TEST(test_products_oom)
{
    cg_rng rng = cg_rng_new(7);
    prod_ctx p = {{cg_randn(&rng, CG_SHAPE(70, 256)), cg_randn(&rng, CG_SHAPE(3, 256)),
                   cg_randn(&rng, CG_SHAPE(1, 256))},
                  cg_randn(&rng, CG_SHAPE(256, 96))};
    for (int i = 0; i < 3; i++)
        cg_requires_grad(p.x[i], true);
    cg_requires_grad(p.w, true);
    sweep(&(sweep_case){"products (cg_matmul forward and backward)", NULL, call_products, NULL, &p,
                        NULL});
    cg_release_all(4, p.x[0], p.x[1], p.x[2], p.w);
}
END_TEST

/* An fp32 linear layer's forward and backward, 2 threads: with its dx
 * product's packing buffer not to be had, the backward fails with a word
 * of memory (it once went on, the product's rows unwritten); swept, it
 * fails so or succeeds with the right values. */
enum { LIN_N = 64, LIN_IN = 2048, LIN_OUT = 384 };
typedef struct {
    cg_linear *l;
    cg_tensor *x;
    float *y, *dx; /* y [N, OUT] and dx's one row [IN] (every row's), made by loops here */
} lin_ctx;

static bool close_to(const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-4f * (1.0f + fabsf(want[i]))))
            return false;
    return true;
}

static bool call_linear_fp32(void *ctx)
{
    lin_ctx *c = ctx;
    const cg_precision was = cg_autocast_begin(CG_PRECISION_FP32);
    cg_zero_grad(c->x);
    cg_tensor *y = cg_linear_forward(c->l, c->x);
    cg_tensor *loss = y ? cg_sum(y, 0, NULL, false) : NULL;
    bool ok = loss && cg_backward(loss, NULL, false);
    bool right = ok && c->x->grad && close_to(cg_data(y), c->y, LIN_N * LIN_OUT);
    for (int64_t i = 0; right && i < LIN_N; i++)
        right = close_to(cg_data(c->x->grad) + i * LIN_IN, c->dx, LIN_IN);
    if (ok && !right) {
        cg_set_error("an fp32 linear layer: wrong values");
        ok = false;
    }
    cg_release_all(2, y, loss);
    cg_autocast_end(was);
    return ok;
}

START_TEST(test_linear_fp32_oom)
{
    cg_rng rng = cg_rng_new(11);
    lin_ctx c = {.l = cg_linear_new(LIN_IN, LIN_OUT, true, &rng),
                 .x = cg_randn(&rng, CG_SHAPE(LIN_N, LIN_IN)),
                 .y = calloc(LIN_N * LIN_OUT, sizeof(float)),
                 .dx = calloc(LIN_IN, sizeof(float))};
    ck_assert(c.l && c.x && c.y && c.dx);
    cg_requires_grad(c.x, true);
    const float *w = cg_data(c.l->weight), *x = cg_data(c.x), *b = cg_data(c.l->bias);
    for (int64_t i = 0; i < LIN_N; i++)
        for (int64_t o = 0; o < LIN_OUT; o++) {
            double y = b[o];
            for (int64_t j = 0; j < LIN_IN; j++)
                y += (double)x[i * LIN_IN + j] * w[o * LIN_IN + j];
            c.y[i * LIN_OUT + o] = (float)y;
        }
    for (int64_t j = 0; j < LIN_IN; j++) {
        double s = 0.0;
        for (int64_t o = 0; o < LIN_OUT; o++)
            s += w[o * LIN_IN + j];
        c.dx[j] = (float)s;
    }
    cg_tensor *y = cg_linear_forward(c.l, c.x);
    cg_tensor *loss = y ? cg_sum(y, 0, NULL, false) : NULL;
    ck_assert_msg(loss, "%s", cg_last_error());
    atomic_store(&fail_next_buffer, true);
    const bool back = cg_backward(loss, NULL, false);
    ck_assert_msg(!atomic_load(&fail_next_buffer), "the backward asked for no packing buffer");
    ck_assert_msg(!back, "the backward succeeded without its buffer (dx right: %d)",
                  close_to(cg_data(c.x->grad), c.dx, LIN_IN) &&
                      close_to(cg_data(c.x->grad) + (LIN_N - 1) * LIN_IN, c.dx, LIN_IN));
    ck_assert_msg(strstr(cg_last_error(), "out of memory"), "%s", cg_last_error());
    cg_release_all(2, y, loss);
    /* so with the fused linear cross-entropy's first product (the logits) */
    cg_tensor *t = cg_zeros_dtype(CG_I64, CG_SHAPE(LIN_N));
    ck_assert_ptr_nonnull(t);
    const cg_precision was = cg_autocast_begin(CG_PRECISION_FP32);
    atomic_store(&fail_next_buffer, true);
    cg_tensor *ce = cg_linear_cross_entropy(c.x, c.l->weight, c.l->bias, t, -100, 0.0f,
                                            CG_REDUCTION_MEAN, CG_LCE_EXACT, 1.0f);
    cg_autocast_end(was);
    ck_assert_msg(!atomic_load(&fail_next_buffer), "cross-entropy asked for no packing buffer");
    ck_assert_msg(!ce, "cross-entropy succeeded without its buffer: %g",
                  ce ? (double)cg_data(ce)[0] : 0.0);
    ck_assert_msg(strstr(cg_last_error(), "out of memory"), "%s", cg_last_error());
    cg_release(t);
    sweep_memory(&(sweep_case){"an fp32 linear layer (forward and backward)", NULL,
                               call_linear_fp32, NULL, &c, NULL});
    cg_module_free(&c.l->base);
    cg_release(c.x);
    free(c.y);
    free(c.dx);
}
END_TEST

/* An fp32 linear layer whose weight the cache does not keep packed (more
 * rows than CG_K_LINEAR_PACKED_ROWS: the product reads W itself): its
 * forward, with the product's packing buffer not to be had, fails with a
 * word of memory and gives no output. */
START_TEST(test_linear_fp32_unpacked_oom)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || blis_switched())
        return; /* BLIS's own driver: no buffer of ours */
    cg_rng rng = cg_rng_new(13);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(CG_K_LINEAR_PACKED_ROWS + 44, LIN_IN));
    ck_assert_ptr_nonnull(x);
    const cg_precision was = cg_autocast_begin(CG_PRECISION_FP32);
    for (int bias = 1; bias >= 0; bias--) { /* cg_sgemm_bias_path, then cg_sgemm_path */
        cg_linear *l = cg_linear_new(LIN_IN, LIN_OUT, bias, &rng);
        ck_assert_ptr_nonnull(l);
        atomic_store(&fail_next_buffer, true);
        cg_tensor *y = cg_linear_forward(l, x);
        ck_assert_msg(!atomic_load(&fail_next_buffer), "the forward asked for no packing buffer");
        ck_assert_msg(!y, "the forward (bias %d) succeeded without its buffer", bias);
        ck_assert_msg(strstr(cg_last_error(), "out of memory"), "%s", cg_last_error());
        cg_module_free(&l->base);
    }
    cg_autocast_end(was);
    cg_release(x);
}
END_TEST

/* Attention's products run in its threads' work items: one that cannot
 * get its packing buffer fails the op, forward or backward, with a word of
 * memory (they once went on, the tile's rows unwritten). fp32, where every
 * CPU's products go through our driver's buffers (not with BLIS's own
 * driver asked for). */
static bool attention_refused(cg_tensor *q, cg_tensor *k, cg_tensor *v, bool forward)
{
    cg_tensor *o = forward ? NULL : cg_attention(q, k, v, true, NULL, NULL);
    cg_tensor *l = o ? cg_sum(o, 0, NULL, false) : NULL;
    ck_assert_msg(forward || l, "%s", cg_last_error());
    atomic_store(&fail_next_buffer, true);
    bool ok = forward ? (o = cg_attention(q, k, v, true, NULL, NULL)) != NULL
                      : cg_backward(l, NULL, false);
    ck_assert_msg(!atomic_load(&fail_next_buffer), "attention asked for no packing buffer");
    ck_assert_msg(ok || strstr(cg_last_error(), "out of memory"), "%s", cg_last_error());
    cg_release_all(2, o, l);
    return ok;
}

START_TEST(test_attention_buffer_oom)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || blis_switched())
        return; /* BLIS's own driver: no buffer of ours */
    cg_rng rng = cg_rng_new(12);
    cg_tensor *q = cg_randn(&rng, CG_SHAPE(2, 4, 96, 32)),
              *k = cg_randn(&rng, CG_SHAPE(2, 4, 96, 32)),
              *v = cg_randn(&rng, CG_SHAPE(2, 4, 96, 32));
    ck_assert(q && k && v);
    cg_requires_grad(q, true);
    const cg_precision was = cg_autocast_begin(CG_PRECISION_FP32);
    ck_assert_msg(!attention_refused(q, k, v, true), "the forward succeeded without its buffer");
    ck_assert_msg(!attention_refused(q, k, v, false), "the backward succeeded without its buffer");
    cg_autocast_end(was);
    cg_release_all(3, q, k, v);
}
END_TEST

/* The haswell path's fp32 products (AVX2's kernel, the default on CPUs
 * without AVX-512; here forced on any CPU with AVX2 and FMA) on 2 threads,
 * with and without a bias, k in one block and in two: made in a process
 * that has made no product yet (CK_FORK=yes), they allocate nothing from
 * malloc (the call's 2 allocations are its own C's) and so never enter
 * BLIS's allocator, which aborts when malloc fails. */
typedef struct {
    float *a, *b, *bias;
} hsw_ctx;

static bool call_haswell_products(void *ctx)
{
    const hsw_ctx *h = ctx;
    enum { M = 70, N = 96, K = 600 };
    float *c0 = malloc(sizeof(float) * M * N), *c1 = c0 ? malloc(sizeof(float) * M * N) : NULL;
    bool ok = c1 != NULL;
    if (!ok)
        cg_set_error("haswell products: out of memory");
    for (int64_t k = 256; ok && k <= K; k += K - 256)
        ok = cg_sgemm_path(CG_GEMM_HASWELL, 2, M, N, k, 1.0f, h->a, K, 1, h->b, N, 1, 0.0f, c0, N,
                           1) &&
             cg_sgemm_bias_path(CG_GEMM_HASWELL, 2, M, N, k, h->a, 1, M, h->b, 1, K, h->bias, 1, c1,
                                1, M);
    free(c0);
    free(c1);
    return ok;
}

START_TEST(test_haswell_products_oom)
{
    if (!cg_gemm_path_available(CG_GEMM_HASWELL) || blis_switched())
        return; /* no AVX2 here, or BLIS's driver asked for */
    enum { M = 70, N = 96, K = 600 };
    hsw_ctx h = {calloc(M * K, sizeof(float)), calloc(K * N, sizeof(float)),
                 calloc(N, sizeof(float))};
    ck_assert(h.a && h.b && h.bias);
    const long n = sweep(&(sweep_case){"haswell products (cg_sgemm_path)", NULL,
                                       call_haswell_products, NULL, &h, NULL});
    ck_assert_int_eq(n, 2);
    free(h.a);
    free(h.b);
    free(h.bias);
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
    sweep_memory(&(sweep_case){"cg_ema_new", NULL, call_ema_new, free_ema, &x, NULL});
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
        sweep_memory(&(sweep_case){shuffle ? "cg_loader_next (shuffled)" : "cg_loader_next",
                                   make_loader, call_loader_next, free_loader, &l, NULL});
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
    sweep_memory(
        &(sweep_case){"cg_corpus_read_tok (bpe)", NULL, call_corpus_bpe, free_corpus, &x, x.dir});
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

/* ------------------------------------------------------------ training state, agreement */

/* A model's own state (what cg_trainer_model's state_save writes): each
 * kind of field, through cg_trainer_model_state. */
typedef struct {
    const cg_trainer *t;
    int64_t epoch;
    double scale;
    uint64_t stream;
    const char *name;
    bool flag;
} toy_state;

static int toy_fields(toy_state *s, cg_json_field *f)
{
    f[0] = (cg_json_field){"epoch", CG_JF_I64, &s->epoch, 0, 1e9, false};
    f[1] = (cg_json_field){"scale", CG_JF_F64, &s->scale, 0, 10, false};
    f[2] = (cg_json_field){"stream", CG_JF_U64STR, &s->stream, 0, 0, false};
    f[3] = (cg_json_field){"name", CG_JF_STR, &s->name, 0, 0, false};
    f[4] = (cg_json_field){"flag", CG_JF_BOOL, &s->flag, 0, 0, false};
    return 5;
}

static bool toy_state_save(void *self, cJSON *o)
{
    toy_state *s = self;
    cg_json_field f[5];
    return cg_trainer_model_state(s->t, "toy", o, f, toy_fields(s, f));
}

static char *toy_config_json(void *self)
{
    (void)self;
    return strdup("{\"model\":\"toy\",\"d\":8,\"shape\":{\"layers\":2,\"norm\":\"rmsnorm\"},"
                  "\"sizes\":[1,2]}");
}

/* A run as the trainer keeps it at a save: its options parsed from a
 * command line, the data, history, recent losses, every rank's dropout
 * counter, --keep-last's kept and dropped checkpoints, --ema-update-freq's
 * count, --keep-best and --patience, an origin, a model's own state. */
typedef struct {
    char dir[1024], out[PATH_MAX], data[PATH_MAX];
    cg_train_opts *o, o0; /* the parsed options, and a copy of them to restore from */
    cg_train_recipe *rec, rec0;
    cg_trainer t;
    cg_rng rng;
    toy_state ts;
    cg_trainer_model m;
    char *json; /* cg_train_state_json's */
} run_fx;

static void run_fx_make(run_fx *x, cg_train_opts *o, cg_train_recipe *rec, cg_cli_args *a)
{
    cg_test_mkdtemp(x->dir, sizeof x->dir, "state");
    snprintf(x->out, sizeof x->out, "%s/run.safetensors", x->dir);
    snprintf(x->data, sizeof x->data, "%s/data.txt", x->dir);
    FILE *f = fopen(x->data, "w");
    ck_assert(f && fputs(TEXT, f) >= 0 && fclose(f) == 0);
    char *argv[] = {"--precision",
                    "fp32",
                    "--keep-last",
                    "2",
                    "--keep-best",
                    "--patience",
                    "3",
                    "--ema-decay",
                    "0.9",
                    "--ema-update-freq",
                    "4",
                    "--dropout",
                    "0.125",
                    "--grad-accum",
                    "2"};
    bool help = false;
    ck_assert_msg(cg_cli_parse_args((int)(sizeof argv / sizeof argv[0]), argv, a, &help), "%s",
                  cg_last_error());
    o->args = a;
    x->o = o, x->o0 = *o, x->rec = rec, x->rec0 = *rec;
    cg_trainer *t = &x->t;
    cg_trainer_init(t, o);
    t->out = x->out;
    cg_data_id id = {.size = sizeof TEXT - 1, .hash = 0x0123456789abcdefULL};
    snprintf(id.path, sizeof id.path, "%s", x->data);
    ck_assert(cg_trainer_set_data(t, &id));
    for (int64_t s = 1; s <= 24; s++) {
        ck_assert(cg_history_train_step(&t->hist, s, 3.0 - 0.1 * (double)s));
        if (s % 4 == 0)
            ck_assert(cg_history_push(&t->hist, s, 2.5, 2.75 - 0.01 * (double)s));
    }
    for (t->n_recent = 0; t->n_recent < 5; t->n_recent++)
        t->recent[t->n_recent] = 2.0 + 0.125 * t->n_recent;
    t->rank_counters = malloc(2 * sizeof *t->rank_counters);
    ck_assert_ptr_nonnull(t->rank_counters);
    t->rank_counters[0] = 11, t->rank_counters[1] = 12, t->n_rank_counters = 2;
    t->kept[0] = 4, t->kept[1] = 8, t->n_kept = 2;
    t->dropping[0] = 2, t->n_dropping = 1;
    t->ema_since = 2;
    t->from_origin = true;
    t->origin.id = id;
    x->rng = (cg_rng){77, 1234};
    x->ts = (toy_state){t, 3, 0.5, 99, "toy's own", true};
    x->m = (cg_trainer_model){.name = "toy",
                              .dropout_rng = &x->rng,
                              .self = &x->ts,
                              .config_json = toy_config_json,
                              .state_save = toy_state_save};
    x->json = cg_train_state_json(t, &x->m);
    ck_assert_msg(x->json, "%s", cg_last_error());
}

static void run_fx_free(run_fx *x)
{
    free(x->json);
    cg_trainer_end(&x->t);
    cg_test_rm_tree(x->dir);
}

/* What a restore put into t and its options, as one text to compare. */
static char *restored(const cg_trainer *t)
{
    const cg_train_opts *o = t->o;
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    ck_assert_ptr_nonnull(f);
    fprintf(f, "steps %lld/%lld eval %lld log %lld seed %llu accum %lld data %s precision %s\n",
            (long long)o->steps, (long long)t->ckpt_steps, (long long)o->eval_every,
            (long long)o->log_every, (unsigned long long)o->seed, (long long)o->grad_accum,
            o->data ? o->data : "-", o->precision_arg ? o->precision_arg : "-");
    fprintf(f, "keep %lld best %d patience %lld ema %g/%lld since %lld\n", (long long)o->keep_last,
            o->keep_best, (long long)o->patience, o->ema_decay, (long long)o->ema_update_freq,
            (long long)t->ema_since);
    fprintf(f, "rng %d %llu %llu counters", t->dropout_rng_set,
            (unsigned long long)t->dropout_rng.seed, (unsigned long long)t->dropout_rng.counter);
    for (int i = 0; i < t->n_rank_counters; i++)
        fprintf(f, " %llu", (unsigned long long)t->rank_counters[i]);
    fprintf(f, "\nrecent");
    for (int i = 0; i < t->n_recent; i++)
        fprintf(f, " %g", t->recent[i]);
    fprintf(f, "\nkept");
    for (int i = 0; i < t->n_kept; i++)
        fprintf(f, " %lld", (long long)t->kept[i]);
    fprintf(f, " dropping");
    for (int i = 0; i < t->n_dropping; i++)
        fprintf(f, " %lld", (long long)t->dropping[i]);
    fprintf(f, "\nhistory %d %d %lld data %d %s %llu %llx model %d\n", t->hist.n, t->hist.dn,
            (long long)t->hist.acc_n, t->data_stored_set, t->data_stored.path,
            (unsigned long long)t->data_stored.size, (unsigned long long)t->data_stored.hash,
            cJSON_IsObject(t->model_state));
    ck_assert_int_eq(fclose(f), 0);
    return s;
}

typedef struct {
    run_fx *x;
    char *got;        /* a call's text */
    const char *want; /* what the call without failures gave */
    cg_trainer t;     /* restoring */
    cJSON *obj;
    bool ok;
} state_ctx;

/* A call that succeeded under a failing allocation gave what it gives
 * without one (a field left out would be a damaged checkpoint). */
static void same_text(void *ctx)
{
    state_ctx *s = ctx;
    if (s->got && s->want)
        ck_assert_str_eq(s->got, s->want);
    free(s->got);
    s->got = NULL;
}

static bool call_state_json(void *ctx)
{
    state_ctx *s = ctx;
    s->got = cg_train_state_json(&s->x->t, &s->x->m);
    return s->got != NULL;
}

static void new_object(void *ctx)
{
    state_ctx *s = ctx;
    s->obj = cJSON_CreateObject();
    ck_assert_ptr_nonnull(s->obj);
}

/* The object's text when the call succeeded (what a failed one left in it
 * is its caller's to delete). */
static void object_text(void *ctx)
{
    state_ctx *s = ctx;
    s->got = s->ok ? cJSON_PrintUnformatted(s->obj) : NULL;
    ck_assert(s->got || !s->ok);
    cJSON_Delete(s->obj);
    s->obj = NULL;
    same_text(ctx);
}

static bool call_put_u64(void *ctx)
{
    state_ctx *s = ctx;
    return s->ok = cg_state_put_u64(s->obj, "seed", 18446744073709551615ULL);
}

static bool call_model_state_write(void *ctx)
{
    state_ctx *s = ctx;
    cg_json_field f[5];
    return s->ok = cg_trainer_model_state(&s->x->t, "toy", s->obj, f, toy_fields(&s->x->ts, f));
}

/* The state saved, then restored into a fresh trainer over the options
 * as parsed. */
static void fresh_trainer(void *ctx)
{
    state_ctx *s = ctx;
    *s->x->o = s->x->o0;
    *s->x->rec = s->x->rec0;
    cg_trainer_init(&s->t, s->x->o);
    s->t.out = s->x->out;
}

static bool call_restore(void *ctx)
{
    state_ctx *s = ctx;
    const bool ok = cg_trainer_restore(&s->t, s->x->json, s->x->out);
    if (ok)
        s->got = restored(&s->t);
    return ok;
}

static void end_trainer(void *ctx)
{
    state_ctx *s = ctx;
    cg_trainer_end(&s->t);
    same_text(ctx);
}

static bool call_model_fields(void *ctx)
{
    state_ctx *s = ctx;
    toy_state back = {0};
    cg_json_field f[5];
    const bool ok = cg_train_model_fields(s->x->json, s->x->out, "toy", f, toy_fields(&back, f));
    ck_assert(!ok || (back.epoch == 3 && back.scale == 0.5 && back.stream == 99 && back.flag));
    return ok;
}

static bool call_data_check(void *ctx)
{
    state_ctx *s = ctx;
    return cg_train_data_check(s->x->json, s->x->out, &s->x->t.data);
}

static bool call_data_path(void *ctx)
{
    state_ctx *s = ctx;
    s->got = cg_train_data_path(s->x->json, s->x->out, NULL, "default.txt");
    return s->got != NULL;
}

static bool call_data_path_given(void *ctx)
{
    state_ctx *s = ctx;
    s->got = cg_train_data_path(s->x->json, s->x->out, "given.txt", "default.txt");
    return s->got != NULL;
}

static bool call_state_parse(void *ctx)
{
    state_ctx *s = ctx;
    s->obj = cg_train_state_parse(s->x->json);
    return s->ok = s->obj != NULL;
}

/* Every public call of models/train/state.c over one run's state. */
START_TEST(test_train_state_oom)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 20, 4);
    const cg_cli_opt opts[] = {CG_TRAIN_RECIPE_FLAGS(&rec), CG_TRAIN_RUN_FLAGS(&o)};
    cg_cli_args a = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    run_fx x;
    run_fx_make(&x, &o, &rec, &a);
    state_ctx s = {.x = &x, .want = x.json};
    long n[12];
    int i = 0;
    n[i++] = sweep_memory(
        &(sweep_case){"cg_train_state_json", NULL, call_state_json, same_text, &s, x.dir});
    s.want = "{\"seed\":\"18446744073709551615\"}";
    n[i++] = sweep_memory(
        &(sweep_case){"cg_state_put_u64", new_object, call_put_u64, object_text, &s, NULL});
    s.want = "{\"epoch\":3,\"scale\":\"0.5\",\"stream\":\"99\",\"name\":\"toy's own\","
             "\"flag\":true}";
    n[i++] = sweep_memory(&(sweep_case){"cg_trainer_model_state (writing)", new_object,
                                        call_model_state_write, object_text, &s, NULL});
    /* the restore, once without failures: what each one that succeeds gives */
    fresh_trainer(&s);
    ck_assert_msg(call_restore(&s), "%s", cg_last_error());
    char *want = s.got;
    s.got = NULL;
    cg_trainer_end(&s.t);
    ck_assert_msg(strstr(want, "kept 4 8 dropping 2") && strstr(want, "counters 11 12"), "%s",
                  want);
    s.want = want;
    n[i++] = sweep_memory(
        &(sweep_case){"cg_trainer_restore", fresh_trainer, call_restore, end_trainer, &s, x.dir});
    /* reading a model's own state back (resuming) allocates nothing */
    fresh_trainer(&s);
    ck_assert(cg_trainer_restore(&s.t, x.json, x.out));
    toy_state back = {0};
    cg_json_field f[5];
    cg_set_error(STALE);
    atomic_store(&alloc_failed, false);
    atomic_store(&fail_at, 1);
    const bool read = cg_trainer_model_state(&s.t, "toy", NULL, f, toy_fields(&back, f));
    atomic_store(&fail_at, 0);
    ck_assert(read && !atomic_load(&alloc_failed) && back.epoch == 3 && back.stream == 99);
    cg_trainer_end(&s.t);
    s.want = NULL;
    n[i++] = sweep_memory(
        &(sweep_case){"cg_train_model_fields", NULL, call_model_fields, NULL, &s, x.dir});
    n[i++] =
        sweep_memory(&(sweep_case){"cg_train_data_check", NULL, call_data_check, NULL, &s, x.dir});
    s.want = x.data;
    n[i++] = sweep_memory(
        &(sweep_case){"cg_train_data_path (recorded)", NULL, call_data_path, same_text, &s, x.dir});
    s.want = "given.txt";
    n[i++] = sweep_memory(&(sweep_case){"cg_train_data_path (given)", NULL, call_data_path_given,
                                        same_text, &s, x.dir});
    cJSON *whole = cJSON_Parse(x.json);
    char *printed = cJSON_PrintUnformatted(whole);
    cJSON_Delete(whole);
    s.want = printed;
    n[i++] = sweep_memory(
        &(sweep_case){"cg_train_state_parse", NULL, call_state_parse, object_text, &s, x.dir});
    free(printed);
    fprintf(stderr, "allocations swept (state.c):");
    for (int k = 0; k < i; k++)
        fprintf(stderr, " %ld", n[k]);
    fprintf(stderr, "\n");
    free(want);
    run_fx_free(&x);
}
END_TEST

/* ranks_agree with one process pretending to be rank 0 of two
 * (-Wl,--wrap=cg_dist_size): the one-process collectives (dist_single.c)
 * leave rank 0's list as it is, so every rank agrees with it. */
static atomic_int fake_size; /* 0: the real one */
int __real_cg_dist_size(void);
int __wrap_cg_dist_size(void);
int __wrap_cg_dist_size(void)
{
    const int n = atomic_load(&fake_size);
    return n ? n : __real_cg_dist_size();
}

/* The list rank 0 sends (the one-process broadcast sends nothing: its
 * bytes, kept here) must be the one it sends without failures: the other
 * ranks compare theirs with it. */
static char *sent_list;
bool __real_cg_dist_broadcast_bytes(void *buf, size_t bytes);
bool __wrap_cg_dist_broadcast_bytes(void *buf, size_t bytes);
bool __wrap_cg_dist_broadcast_bytes(void *buf, size_t bytes)
{
    if (bytes > sizeof(uint64_t) && atomic_load(&fake_size)) { /* the list, not its length */
        free(sent_list);
        sent_list = __real_strndup(buf, bytes);
    }
    return __real_cg_dist_broadcast_bytes(buf, bytes);
}

typedef struct {
    run_fx *x;
    bool ok;
    char *want; /* the list sent without failures */
} agree_ctx;

static bool call_ranks_agree(void *ctx)
{
    agree_ctx *g = ctx;
    return g->ok = cg_trainer_ranks_agree(&g->x->t, &g->x->m);
}

static void same_list(void *ctx)
{
    agree_ctx *g = ctx;
    if (g->ok)
        ck_assert_str_eq(sent_list ? sent_list : "(none)", g->want);
    free(sent_list);
    sent_list = NULL;
}

START_TEST(test_ranks_agree_oom)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 20, 4);
    const cg_cli_opt opts[] = {CG_TRAIN_RECIPE_FLAGS(&rec), CG_TRAIN_RUN_FLAGS(&o)};
    cg_cli_args a = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    run_fx x;
    run_fx_make(&x, &o, &rec, &a);
    /* one process: true at once, nothing allocated */
    cg_set_error(STALE);
    atomic_store(&alloc_failed, false);
    atomic_store(&fail_at, 1);
    ck_assert(cg_trainer_ranks_agree(&x.t, &x.m));
    atomic_store(&fail_at, 0);
    ck_assert(!atomic_load(&alloc_failed));
    atomic_store(&fake_size, 2);
    ck_assert_msg(cg_trainer_ranks_agree(&x.t, &x.m), "%s", cg_last_error());
    agree_ctx g = {&x, false, sent_list};
    sent_list = NULL;
    ck_assert_msg(g.want && strstr(g.want, "\"config.shape.norm\":\"\\\"rmsnorm\\\"\"") &&
                      strstr(g.want, "\"zero\":\"0\"") && strstr(g.want, "\"init_from.size\""),
                  "%s", g.want ? g.want : "(none)");
    const long n = sweep_memory(&(sweep_case){"cg_trainer_ranks_agree (rank 0 of 2)", NULL,
                                              call_ranks_agree, same_list, &g, x.dir});
    free(g.want);
    fprintf(stderr, "allocations swept (agree.c): %ld\n", n);
    atomic_store(&fake_size, 0);
    run_fx_free(&x);
}
END_TEST

/* ------------------------------------------------------------ names */

/* A name that is not UTF-8 (cg_json_add_name's "key" and "key_hex"), put
 * back into "key" by cg_json_name_decode: out of memory says so, not that
 * the hex is bad. */
typedef struct {
    const char *text;
    cJSON *o;
} name_ctx;

static void parse_name(void *ctx)
{
    name_ctx *n = ctx;
    n->o = cJSON_Parse(n->text);
    ck_assert_ptr_nonnull(n->o);
}

static bool call_name_decode(void *ctx)
{
    return cg_json_name_decode(((name_ctx *)ctx)->o, "path", "name test");
}

/* "path" after a call: the bytes when it succeeded; when not, the shown
 * text as it was, or no "path" when the text had none */
static void name_back(void *ctx)
{
    static const char bytes[] = {'a', (char)0xff, 'b', 0};
    static const char shown[] = {'a', (char)0xef, (char)0xbf, (char)0xbd, 'b', 0};
    name_ctx *n = ctx;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(n->o, "path");
    if (p)
        ck_assert(cJSON_IsString(p) &&
                  (strcmp(p->valuestring, bytes) == 0 || strcmp(p->valuestring, shown) == 0));
    else
        ck_assert(!strstr(n->text, "\"path\""));
    cJSON_Delete(n->o);
    n->o = NULL;
}

START_TEST(test_name_decode_oom)
{
    /* the shown text replaced in place (only the bytes allocated) */
    name_ctx n = {"{\"path\": \"a\\ufffdb\", \"path_hex\": \"61ff62\"}", NULL};
    const sweep_case c = {"cg_json_name_decode", parse_name, call_name_decode, name_back, &n, NULL};
    ck_assert_int_eq(sweep_memory(&c), 1);
    /* "path" made anew: the bytes, the string, its key */
    n.text = "{\"path_hex\": \"61ff62\"}";
    ck_assert_int_ge(sweep_memory(&c), 3);
    /* and a text that is not hex is still called so */
    cJSON *o = cJSON_Parse("{\"path\": \"x\", \"path_hex\": \"6g\"}");
    ck_assert(!cg_json_name_decode(o, "path", "name test"));
    ck_assert_str_eq(cg_last_error(), "name test: \"path_hex\" is not the hex digits of a name");
    cJSON_Delete(o);
}
END_TEST

/* A checkpoint's character vocabulary, read from its JSON string. */
static bool call_vocab_json(void *ctx)
{
    cg_vocab **v = ctx;
    return (*v = cg_vocab_from_json("\" aehlw\"")) != NULL;
}

static void free_vocab(void *ctx)
{
    cg_vocab **v = ctx;
    ck_assert(!*v || (*v)->n == 6); /* " aehlw" */
    cg_vocab_free(*v);
    *v = NULL;
}

START_TEST(test_vocab_json_oom)
{
    cg_vocab *v = NULL;
    const sweep_case c = {"cg_vocab_from_json", NULL, call_vocab_json, free_vocab, &v, NULL};
    ck_assert_int_ge(sweep_memory(&c), 2);
}
END_TEST

int main(void)
{
    cJSON_Hooks hooks = {__wrap_malloc, free};
    cJSON_InitHooks(&hooks);
    Suite *s = suite_create("models_oom");
    /* First, so that its first test runs in a process that has made no
     * product yet (and each does with CK_FORK=yes: test_models_oom_fork):
     * GEMM's setup once went into BLIS's allocator, which aborts the
     * process when malloc fails (docs/robustness.md, round fifty-one). */
    TCase *tf = tcase_create("fresh");
    tcase_add_test(tf, test_decode_oom);
    tcase_add_test(tf, test_products_oom);
    tcase_add_test(tf, test_haswell_products_oom);
    tcase_add_test(tf, test_linear_fp32_oom);
    tcase_add_test(tf, test_linear_fp32_unpacked_oom);
    tcase_add_test(tf, test_attention_buffer_oom);
    tcase_set_timeout(tf, 600);
    suite_add_tcase(s, tf);
    TCase *tc = tcase_create("oom");
    tcase_add_test(tc, test_average_oom);
    tcase_add_test(tc, test_merge_oom);
    tcase_add_test(tc, test_adapter_load_oom);
    tcase_add_test(tc, test_ckpt_save_oom);
    tcase_add_test(tc, test_writer_filled_message);
    tcase_add_test(tc, test_ckpt_save_keeps_root_cause);
    tcase_add_test(tc, test_generate_oom);
    tcase_add_test(tc, test_ema_new_oom);
    tcase_add_test(tc, test_loader_epoch_oom);
    tcase_add_test(tc, test_corpus_bpe_oom);
    tcase_add_test(tc, test_plot_attention_unrecorded);
    tcase_add_test(tc, test_name_decode_oom);
    tcase_add_test(tc, test_vocab_json_oom);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("state"); /* models/train/state.c, agree.c */
    tcase_add_test(ts, test_train_state_oom);
    tcase_add_test(ts, test_ranks_agree_oom);
    tcase_set_timeout(ts, 600);
    suite_add_tcase(s, ts);
    return cg_test_run(&s, 1);
}
