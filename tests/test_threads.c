/* One model shared by several threads (issue 33): each thread runs forward
 * and backward steps, in its own scopes, on its own batches, and every
 * gradient accumulates into the shared parameters' .grad (Hogwild-style, as
 * PyTorch allows: reference counts are atomic, and gradient accumulation
 * into a leaf is locked). The gradient sums must equal those of the same
 * work done under a lock. The data and weights are small integers, so
 * every sum is exact in float32 and its order does not matter.
 * Run under ThreadSanitizer too (a meson setup with -Db_sanitize=thread;
 * OpenMP at one thread, since libgomp is not instrumented). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/checkpoint.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/testutil.h"

enum { VOCAB = 5, IN = 6, HID = 8, OUT = 3, ROWS = 4, STEPS = 12, MAX_THREADS = 8, PARAMS = 6 };

/* An embedding and a shared input p besides the two layers: from the
 * second step on their .grad is handed to the backwards that add into it
 * (index_select's, the linear layer's dx: cg_node_grad_acc), under the
 * leaf's lock while other threads add into it too. */
typedef struct {
    cg_module *root;
    cg_embed *emb;
    cg_linear *fc1, *fc2;
    cg_tensor *p;
} model;

/* Integer weights in [-2, 2]. */
static void fill_ints(cg_tensor *t, int seed)
{
    float *p = cg_data(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        p[i] = (float)((i * 7 + seed * 3) % 5 - 2);
    cg_tensor_modified(t);
}

static model model_new(void)
{
    cg_rng rng = cg_rng_new(1);
    model m;
    m.root = cg_module_new("Shared");
    m.fc1 = cg_module_add_child(m.root, "fc1", cg_linear_new(IN, HID, true, &rng));
    m.fc2 = cg_module_add_child(m.root, "fc2", cg_linear_new(HID, OUT, true, &rng));
    m.emb = cg_module_add_child(m.root, "emb", cg_embed_new(VOCAB, IN, &rng));
    cg_tensor *p = cg_zeros(CG_SHAPE(ROWS, IN));
    m.p = cg_module_add_param(m.root, "p", p);
    cg_release(p); /* the module's now */
    fill_ints(m.emb->weight, 5);
    fill_ints(m.p, 6);
    fill_ints(m.fc1->weight, 1);
    fill_ints(m.fc1->bias, 2);
    fill_ints(m.fc2->weight, 3);
    fill_ints(m.fc2->bias, 4);
    return m;
}

typedef struct {
    model *m;
    int id;
    pthread_mutex_t *lock; /* NULL: no lock (the concurrent run) */
    bool ok;
} worker;

/* fc1(p), recomputed in the backward: the gradient p has so far is taken
 * from its .grad into the recomputed block's copy of p (under p's lock
 * while other threads add into it), and comes back with the block's. */
static cg_tensor *fc1_block(void *ctx, cg_tensor *const *in)
{
    return cg_linear_forward(ctx, in[0]);
}

/* One step: sum(fc2(relu(fc1(x + emb(ids))))) + sum(fc1(p)) with x and
 * ids of small integers depending on the thread and the step, fc1(p)
 * checkpointed; its own scope, no release. */
static bool step(model *m, int id, int s)
{
    float xs[ROWS * IN];
    int64_t ids[2 * ROWS];
    for (int i = 0; i < ROWS * IN; i++)
        xs[i] = (float)((i * 5 + id * 11 + s * 3) % 7 - 3);
    for (int i = 0; i < 2 * ROWS; i++)
        ids[i] = (i * 3 + id + s) % VOCAB;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *e = cg_embed_forward(m->emb, cg_from_i64(CG_SHAPE(2, ROWS), ids));
    cg_tensor *x = cg_add(cg_from_data(CG_SHAPE(ROWS, IN), xs), cg_sum(e, 0, NULL, false));
    cg_tensor *h = cg_relu(cg_linear_forward(m->fc1, x));
    cg_tensor *loss = cg_add(cg_sum(cg_linear_forward(m->fc2, h), 0, NULL, false),
                             cg_sum(cg_checkpoint(&(cg_checkpoint_block){
                                        .fn = fc1_block,
                                        .ctx = m->fc1,
                                        .n_inputs = 1,
                                        .inputs = &m->p,
                                        .n_params = 2,
                                        .params = (cg_tensor *[]){m->fc1->weight, m->fc1->bias}}),
                                    0, NULL, false));
    bool ok = loss && cg_backward(loss, NULL, false);
    cg_scope_end(sc);
    return ok;
}

static void *work(void *arg)
{
    worker *w = arg;
    w->ok = true;
    for (int s = 0; s < STEPS; s++) {
        if (w->lock)
            pthread_mutex_lock(w->lock);
        w->ok &= step(w->m, w->id, s);
        if (w->lock)
            pthread_mutex_unlock(w->lock);
    }
    return NULL;
}

/* Runs n threads on a fresh model; copies its gradients into g. */
static void run(int n, bool locked, float *g, int64_t cap)
{
    model m = model_new();
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_t th[MAX_THREADS];
    worker w[MAX_THREADS];
    for (int i = 0; i < n; i++) {
        w[i] = (worker){&m, i, locked ? &lock : NULL, false};
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_msg(w[i].ok, "thread %d: %s", i, cg_last_error());
    }
    const cg_tensor *p[PARAMS] = {m.fc1->weight, m.fc1->bias,   m.fc2->weight,
                                  m.fc2->bias,   m.emb->weight, m.p};
    int64_t off = 0;
    for (int i = 0; i < PARAMS; i++) {
        ck_assert_ptr_nonnull(cg_grad(p[i]));
        ck_assert_int_le(off + cg_numel(p[i]), cap);
        ck_assert(cg_copy_to(cg_grad(p[i]), g + off));
        off += cg_numel(p[i]);
        ck_assert_int_eq(p[i]->refcount, 1); /* every node's reference given back */
    }
    cg_module_free(m.root);
}

START_TEST(test_threads_share_one_model)
{
    int64_t live0 = cg_live_tensors();
    enum { NG = HID * IN + HID + OUT * HID + OUT + VOCAB * IN + ROWS * IN };
    static float free_run[NG], locked_run[NG];
    const int counts[3] = {2, 4, 8};
    for (int c = 0; c < 3; c++) {
        int n = counts[c];
        run(n, false, free_run, NG);
        run(n, true, locked_run, NG);
        ck_assert_msg(memcmp(free_run, locked_run, sizeof free_run) == 0,
                      "%d threads: the gradient sums differ from the locked run's", n);
        bool nonzero = false;
        for (int i = 0; i < NG; i++)
            nonzero |= free_run[i] != 0;
        ck_assert(nonzero);
    }
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* Zeroing the gradients while other threads' backwards add into them
 * (Hogwild's zero_grad beside another thread's step): cg_zero_grad takes
 * the leaf's lock, so an accumulation sees the gradient before or after,
 * never a freed one (it released .grad unlocked: a backward adding into
 * it, handed it by cg_node_grad_acc, wrote freed memory; ASan names it).
 * Nothing leaks, and a last run without the zeroing gives the gradients
 * of the work it did. */
typedef struct {
    model *m;
    atomic_int *stop;
} zero_job;

static void *zero_meanwhile(void *arg)
{
    zero_job *z = arg;
    cg_tensor *p[PARAMS] = {z->m->fc1->weight, z->m->fc1->bias,   z->m->fc2->weight,
                            z->m->fc2->bias,   z->m->emb->weight, z->m->p};
    while (!atomic_load(z->stop))
        for (int i = 0; i < PARAMS; i++)
            cg_zero_grad(p[i]);
    return NULL;
}

START_TEST(test_threads_zero_grad_beside_backwards)
{
    int64_t live0 = cg_live_tensors();
    model m = model_new();
    atomic_int stop = 0;
    zero_job z = {&m, &stop};
    pthread_t th[3], zt;
    worker w[3];
    ck_assert_int_eq(pthread_create(&zt, NULL, zero_meanwhile, &z), 0);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 3; i++) {
            w[i] = (worker){&m, i, NULL, false};
            ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
        }
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(pthread_join(th[i], NULL), 0);
            ck_assert_msg(w[i].ok, "thread %d: %s", i, cg_last_error());
        }
    }
    atomic_store(&stop, 1);
    ck_assert_int_eq(pthread_join(zt, NULL), 0);
    cg_module_zero_grad(m.root);
    ck_assert(step(&m, 0, 0)); /* one step alone: its own gradients */
    float got[HID * IN];
    ck_assert(cg_copy_to(cg_grad(m.fc1->weight), got));
    cg_module_zero_grad(m.root);
    model fresh = model_new();
    ck_assert(step(&fresh, 0, 0));
    float want[HID * IN];
    ck_assert(cg_copy_to(cg_grad(fresh.fc1->weight), want));
    ck_assert(memcmp(got, want, sizeof got) == 0);
    cg_module_free(fresh.root);
    cg_module_free(m.root);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* A leaf's .grad made in one thread's scope and used by another while that
 * scope is still open (a backward that adds into it retains it): closing
 * the scope takes back only the scope's own references (cg_hold_shared),
 * and the gradient outlives both. Barriers order the steps. */
typedef struct {
    cg_tensor *w;
    pthread_barrier_t *b;
} other_job;

static void *retain_meanwhile(void *arg)
{
    other_job *j = arg;
    pthread_barrier_wait(j->b); /* the gradient is there */
    cg_scope *sc = cg_scope_begin();
    cg_tensor *g = cg_retain(j->w->grad);
    pthread_barrier_wait(j->b); /* the other thread's scope closes */
    pthread_barrier_wait(j->b);
    cg_release(g);
    cg_scope_end(sc);
    return NULL;
}

START_TEST(test_leaf_grad_outlives_its_scope)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *w = cg_requires_grad(cg_ones(CG_SHAPE(3, 4)), true);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    other_job j = {w, &b};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, retain_meanwhile, &j), 0);
    cg_scope *sc = cg_scope_begin();
    ck_assert(cg_backward(cg_sum_all(cg_muls(w, 2.0f)), NULL, false));
    pthread_barrier_wait(&b);
    pthread_barrier_wait(&b);
    cg_scope_end(sc);
    pthread_barrier_wait(&b);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&b);
    ck_assert_int_eq(cg_grad(w)->refcount, 1);
    CG_ASSERT_TENSOR(cg_grad(w), ((float[]){2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}), 0, 0);
    cg_release(w);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* Forward hooks of a module several threads call at once (LoRA's, on a
 * model shared for inference): the count of calls under way was a plain
 * int, so concurrent increments were lost and it stayed above 0 (or went
 * below); a hook removed afterwards was then only marked dead, never
 * dropped, and went on running at every later call. */
static int hook_calls, hook_freed;

static bool count_hook(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)ctx, (void)m, (void)n_in, (void)in, (void)out;
    __atomic_add_fetch(&hook_calls, 1, __ATOMIC_RELAXED);
    return true;
}

static void count_free(void *ctx)
{
    (void)ctx;
    hook_freed++;
}

typedef struct {
    cg_linear *l;
    cg_tensor *x;
    bool ok;
} hook_job;

static void *call_hooked(void *arg)
{
    hook_job *j = arg;
    j->ok = true;
    cg_no_grad_begin();
    for (int i = 0; i < 20000 && j->ok; i++) {
        cg_tensor *y = cg_linear_forward(j->l, j->x);
        j->ok = y != NULL;
        cg_release(y);
    }
    cg_no_grad_end();
    return NULL;
}

START_TEST(test_hooks_called_from_threads)
{
    cg_rng rng = cg_rng_new(1);
    cg_linear *l = cg_linear_new(2, 2, false, &rng);
    cg_tensor *x = cg_ones(CG_SHAPE(1, 2));
    for (int round = 0; round < 6; round++) {
        hook_freed = 0;
        cg_hook_handle h = cg_module_register_forward_hook(&l->base, count_hook, NULL, count_free);
        ck_assert_int_ne(h.id, 0);
        enum { N = 4 };
        pthread_t th[N];
        hook_job j[N];
        for (int i = 0; i < N; i++) {
            j[i] = (hook_job){l, x, false};
            ck_assert_int_eq(pthread_create(&th[i], NULL, call_hooked, &j[i]), 0);
        }
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(pthread_join(th[i], NULL), 0);
            ck_assert_msg(j[i].ok, "thread %d: %s", i, cg_last_error());
        }
        ck_assert_int_eq(hook_calls, N * 20000);
        ck_assert(cg_hook_remove(&h));
        ck_assert_int_eq(hook_freed, 1); /* dropped at once: no call under way */
        cg_release(cg_linear_forward(l, x));
        ck_assert_int_eq(hook_calls, N * 20000); /* removed: not called again */
        hook_calls = 0;
    }
    cg_module_free(&l->base);
    cg_release(x);
}
END_TEST

/* The dropout of a model several threads train (Hogwild): every thread
 * draws from the module's one generator. The draws were read from its
 * counter and the counter advanced after the mask was made, so two
 * threads that started together drew the same mask (and raced on the
 * counter). Each dropout now takes its draws from the generator at once,
 * so the two masks are the generator's first two, in some order. */
enum { DROP_N = 1 << 20 };

typedef struct {
    cg_drop *d;
    cg_tensor *x;
    pthread_barrier_t *b;
    cg_tensor *y;
} drop_job;

static void *drop_once(void *arg)
{
    drop_job *j = arg;
    pthread_barrier_wait(j->b);
    j->y = cg_drop_forward(j->d, j->x);
    return NULL;
}

static bool same_mask(const cg_tensor *a, const cg_tensor *b)
{
    const float *p = cg_data((cg_tensor *)a), *q = cg_data((cg_tensor *)b);
    for (int64_t i = 0; i < DROP_N; i++)
        if ((p[i] == 0) != (q[i] == 0))
            return false;
    return true;
}

START_TEST(test_shared_dropout_draws)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *x = cg_ones(CG_SHAPE(DROP_N));
    cg_drop *ref = cg_drop_new(0.5f, NULL);
    cg_tensor *r0 = cg_drop_forward(ref, x), *r1 = cg_drop_forward(ref, x);
    ck_assert(r0 && r1 && !same_mask(r0, r1));
    for (int round = 0; round < 8; round++) {
        cg_drop *d = cg_drop_new(0.5f, NULL);
        pthread_barrier_t b;
        pthread_barrier_init(&b, NULL, 2);
        pthread_t th[2];
        drop_job j[2];
        for (int i = 0; i < 2; i++) {
            j[i] = (drop_job){d, x, &b, NULL};
            ck_assert_int_eq(pthread_create(&th[i], NULL, drop_once, &j[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        pthread_barrier_destroy(&b);
        ck_assert(j[0].y && j[1].y);
        ck_assert_msg((same_mask(j[0].y, r0) && same_mask(j[1].y, r1)) ||
                          (same_mask(j[0].y, r1) && same_mask(j[1].y, r0)),
                      "round %d: the two threads' masks are not the generator's first two "
                      "(the same mask twice: %d)",
                      round, same_mask(j[0].y, j[1].y));
        ck_assert_int_eq(d->own_rng.counter, 2 * DROP_N);
        cg_release_all(2, j[0].y, j[1].y);
        cg_module_free(&d->base);
    }
    cg_release_all(3, x, r0, r1);
    cg_module_free(&ref->base);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* Two threads backward at once through one graph's shared part (h made
 * once, two losses on it, retain_graph): the engine keeps a backward's
 * state in the nodes (marks, the gradient arriving), so the second walk
 * freed what the first read (a segfault in mul's backward). Such a
 * backward is refused in one line, the gradients as they were; one that
 * does not overlap another runs, and the sum is that of the backwards
 * that ran. */
enum { SHARED_ROUNDS = 300 };

typedef struct {
    cg_tensor *h;
    float k;
    pthread_barrier_t *b;
    int ran, refused;
    bool other_error;
} shared_job;

static void *backward_shared(void *arg)
{
    shared_job *j = arg;
    cg_scope *sc = cg_scope_begin();
    cg_tensor *loss = cg_sum_all(cg_muls(cg_exp(j->h), j->k));
    pthread_barrier_wait(j->b);
    for (int i = 0; i < SHARED_ROUNDS; i++) {
        if (cg_backward(loss, NULL, true))
            j->ran++;
        else if (strstr(cg_last_error(), "another thread"))
            j->refused++;
        else
            j->other_error = true;
    }
    cg_scope_end(sc);
    return NULL;
}

START_TEST(test_backward_through_shared_graph)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *w = cg_requires_grad(cg_full(CG_SHAPE(64), 0.5f), true);
    cg_tensor *h = cg_mul(w, w);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    pthread_t th[2];
    shared_job j[2];
    for (int i = 0; i < 2; i++) {
        j[i] = (shared_job){h, (float)(i + 1), &b, 0, 0, false};
        ck_assert_int_eq(pthread_create(&th[i], NULL, backward_shared, &j[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&b);
    for (int i = 0; i < 2; i++) {
        ck_assert(!j[i].other_error);
        ck_assert_int_eq(j[i].ran + j[i].refused, SHARED_ROUNDS);
    }
    /* d/dw sum(k exp(w^2)) = 2 k w exp(w^2), summed over the backwards that ran */
    const double one = 2.0 * 0.5 * exp(0.25);
    const double want = one * (1.0 * j[0].ran + 2.0 * j[1].ran);
    for (int64_t i = 0; i < 64; i++)
        ck_assert_double_eq_tol(cg_data((cg_tensor *)cg_grad(w))[i], want, 1e-4 * want);
    cg_release_all(2, w, h);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* Inference on one model from several threads (the packed weights of the
 * weight cache, core/weight_cache.c): each thread's no-grad products, in
 * fp32 (the fp32 driver's panels) or, every second thread where the CPU
 * has a bf16 product, in bf16 precision (the bf16 copy), while another
 * thread lowers and raises the cache's limit and reads its counts. Every
 * output has the bits of the same product run alone. */
enum { INF_THREADS = 4, INF_ROUNDS = 6, INF_IN = 70, INF_OUT = 40, INF_ROWS = 16 };
typedef struct {
    cg_linear *l;
    cg_tensor *x;
    const float *want[2]; /* fp32, bf16 */
    bool bf16, ok;
    atomic_bool *stop;
} infer_job;

static void *infer_work(void *arg)
{
    infer_job *j = arg;
    j->ok = true;
    if (j->bf16)
        cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_no_grad_begin();
    for (int r = 0; r < INF_ROUNDS; r++) {
        cg_tensor *y = cg_linear_forward(j->l, j->x);
        j->ok &= y && !memcmp(cg_data(y), j->want[j->bf16], sizeof(float) * INF_ROWS * INF_OUT);
        cg_release(y);
    }
    cg_no_grad_end();
    return NULL;
}

static void *limit_work(void *arg)
{
    atomic_bool *stop = arg;
    for (int r = 0; !atomic_load(stop); r++) {
        cg_weight_cache_limit(r % 2 ? (size_t)1 << 30 : 0);
        (void)cg_weight_cache_stats();
    }
    cg_weight_cache_limit((size_t)1 << 30);
    return NULL;
}

START_TEST(test_threads_share_packed_weights)
{
    cg_rng rng = cg_rng_new(3);
    cg_linear *l = cg_linear_new(INF_IN, INF_OUT, true, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(INF_ROWS, INF_IN));
    ck_assert(l && x && cg_normal_(l->bias, &rng, 0.0f, 1.0f));
    const bool bf16 =
        cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
    cg_tensor *want[2] = {NULL, NULL};
    for (int p = 0; p < 1 + bf16; p++) { /* alone, with no copy kept */
        cg_weight_cache_limit(0);
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_no_grad_begin();
        want[p] = cg_linear_forward(l, x);
        cg_no_grad_end();
        ck_assert_ptr_nonnull(want[p]);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_weight_cache_limit((size_t)1 << 30);
    atomic_bool stop = false;
    pthread_t th[INF_THREADS], lt;
    infer_job j[INF_THREADS];
    for (int i = 0; i < INF_THREADS; i++) {
        j[i] = (infer_job){
            l,     x,    {cg_data(want[0]), want[1] ? cg_data(want[1]) : NULL}, bf16 && i % 2,
            false, &stop};
        ck_assert_int_eq(pthread_create(&th[i], NULL, infer_work, &j[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&lt, NULL, limit_work, &stop), 0);
    for (int i = 0; i < INF_THREADS; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_msg(j[i].ok, "thread %d (%s): %s", i, j[i].bf16 ? "bf16" : "fp32",
                      cg_last_error());
    }
    atomic_store(&stop, true);
    ck_assert_int_eq(pthread_join(lt, NULL), 0);
    cg_release_all(3, want[0], want[1], x);
    cg_module_free(CG_MODULE(l));
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
}
END_TEST

/* Writes announced while other threads read the weight's kept forms
 * (Hogwild's optimizer steps beside their products, or inference beside a
 * training thread): each of two threads, in turn, runs a product on W's
 * packed copy (bf16 where the CPU has it, else fp32's panels), takes t's
 * bf16 operand copy, and announces a write to W and to t
 * (cg_tensor_modified, the values unchanged). Every output must keep the
 * bits of the same product run alone, and nothing may be freed twice or
 * read after it was freed: cg_tensor_modified took a storage's kept form
 * out and freed it without the lock the caches read it under, so that two
 * threads freed one slot (glibc: "double free or corruption"), or a
 * product read one being freed. */
enum { MOD_THREADS = 2, MOD_ROUNDS = 10000, MOD_ROWS = 8, MOD_IN = 64, MOD_OUT = 48 };
typedef struct {
    cg_tensor *w, *b, *x, *t;
    const cg_tensor *want, *want16;
    bool bf16, ok;
} modify_job;

static void *modify_work(void *arg)
{
    modify_job *j = arg;
    j->ok = true;
    if (j->bf16)
        cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int r = 0; r < MOD_ROUNDS && j->ok; r++) {
        cg_tensor *y = cg_k_linear_packed(j->x, j->w, j->b);
        cg_tensor *c = cg_k_bf16_operand(j->t);
        j->ok =
            y && c && !memcmp(cg_data(y), cg_data(j->want), sizeof(float) * MOD_ROWS * MOD_OUT) &&
            !memcmp(cg_data_bf16(c), cg_data_bf16(j->want16), sizeof(uint16_t) * MOD_ROWS * MOD_IN);
        cg_release_all(2, y, c);
        cg_tensor_modified(j->w);
        cg_tensor_modified(j->t);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    return NULL;
}

START_TEST(test_threads_write_kept_weights)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(MOD_OUT, MOD_IN)),
              *b = cg_randn(&rng, CG_SHAPE(MOD_OUT));
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(MOD_ROWS, MOD_IN));
    cg_tensor *t = cg_randn(&rng, CG_SHAPE(MOD_ROWS, MOD_IN));
    const bool bf16 =
        cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
    if (bf16)
        cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_weight_cache_limit(0); /* alone, no copy kept */
    cg_tensor *want = cg_k_linear_packed(x, w, b);
    cg_weight_cache_limit((size_t)1 << 30);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *want16 = cg_k_bf16_operand(t); /* kept as t's copy: let go below */
    cg_tensor_modified(t);
    ck_assert(want && want16);
    pthread_t th[MOD_THREADS];
    modify_job j[MOD_THREADS];
    for (int i = 0; i < MOD_THREADS; i++) {
        j[i] = (modify_job){w, b, x, t, want, want16, bf16, false};
        ck_assert_int_eq(pthread_create(&th[i], NULL, modify_work, &j[i]), 0);
    }
    for (int i = 0; i < MOD_THREADS; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_msg(j[i].ok, "thread %d: an output differs from the product run alone (%s)", i,
                      cg_last_error());
    }
    cg_release_all(6, w, b, x, t, want, want16);
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
}
END_TEST

/* An optimizer step while another thread runs products on the weight
 * (inference beside training, or Hogwild's forwards beside a step): the
 * products during the step may read the weight half written (the
 * caller's race, as in PyTorch), but once the step has returned the
 * weight's kept copy must be the new weight's. The step announced its
 * write before making it, so that a copy packed during the update was
 * kept under the new version and read, half old and half new, by every
 * product after the step (about half the trials, on a 1024 x 1024 W). */
enum { STEP_N = 16, STEP_IN = 1024, STEP_OUT = 1024, STEP_TRIALS = 12 };
typedef struct {
    cg_linear *l;
    cg_tensor *x;
    bool bf16;
    atomic_bool go, stop;
} beside_job;

static void *products_beside(void *arg)
{
    beside_job *j = arg;
    if (j->bf16)
        cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_no_grad_begin();
    atomic_store(&j->go, true);
    while (!atomic_load(&j->stop))
        cg_release(cg_linear_forward(j->l, j->x));
    cg_no_grad_end();
    cg_set_matmul_precision(CG_PRECISION_FP32);
    return NULL;
}

/* l(x) without a graph, cached (limit as it is) or not (limit 0) */
static float *nograd_out(cg_linear *l, cg_tensor *x, bool cached)
{
    const size_t limit = cg_weight_cache_stats().limit;
    if (!cached)
        cg_weight_cache_limit(0);
    cg_no_grad_begin();
    cg_tensor *y = cg_linear_forward(l, x);
    cg_no_grad_end();
    cg_weight_cache_limit(limit);
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    float *v = cg_test_values(y);
    cg_release(y);
    return v;
}

/* Trials of a write to l's weight while another thread runs products on
 * it: an optimizer step (copy false) or cg_copy_ of a new weight (a hot
 * reload, an EMA update); the trials after which the kept copy differs
 * from the weight. */
static int stale_after_writes(bool copy)
{
    cg_rng rng = cg_rng_new(6);
    cg_linear *l = cg_linear_new(STEP_IN, STEP_OUT, true, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(STEP_N, STEP_IN));
    cg_tensor *next = cg_randn(&rng, CG_SHAPE(STEP_OUT, STEP_IN));
    cg_tensor *y = cg_linear_forward(l, x), *loss = cg_sum_all(y);
    ck_assert(loss && cg_backward(loss, NULL, false));
    cg_release_all(2, y, loss);
    cg_optim *o = cg_sgd_from_module(CG_MODULE(l), 0.01);
    beside_job j = {.l = l, .x = x};
    j.bf16 = cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
    if (j.bf16)
        cg_set_matmul_precision(CG_PRECISION_BF16);
    int stale = 0;
    for (int t = 0; t < STEP_TRIALS; t++) {
        atomic_store(&j.go, false);
        atomic_store(&j.stop, false);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, products_beside, &j), 0);
        while (!atomic_load(&j.go))
            ;
        if (copy) {
            ck_assert(cg_k_muls_(next, 1.5f)); /* another weight each time */
            cg_no_grad_begin();
            ck_assert_msg(cg_copy_(l->weight, next), "%s", cg_last_error());
            cg_no_grad_end();
        } else {
            ck_assert_msg(cg_optim_step(o), "%s", cg_last_error());
        }
        atomic_store(&j.stop, true);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        float *kept = nograd_out(l, x, true), *fresh = nograd_out(l, x, false);
        stale += memcmp(kept, fresh, sizeof(float) * STEP_N * STEP_OUT) != 0;
        free(kept);
        free(fresh);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_optim_free(o);
    cg_release_all(2, x, next);
    cg_module_free(CG_MODULE(l));
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
    return stale;
}

START_TEST(test_threads_step_beside_products)
{
    int stale = stale_after_writes(false);
    ck_assert_msg(stale == 0, "%d of %d steps left a stale copy of the weight in the cache", stale,
                  STEP_TRIALS);
}
END_TEST

/* The same for core's writes (cg_copy_ here; fills, cg_set and the
 * in-place kernels announce the same way): announced before writing,
 * 9 of 30 such copies left a stale kept copy. */
START_TEST(test_threads_copy_beside_products)
{
    int stale = stale_after_writes(true);
    ck_assert_msg(stale == 0, "%d of %d copies left a stale copy of the weight in the cache", stale,
                  STEP_TRIALS);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_threads_share_one_model);
    tcase_add_test(tc, test_leaf_grad_outlives_its_scope);
    tcase_add_test(tc, test_hooks_called_from_threads);
    tcase_add_test(tc, test_shared_dropout_draws);
    tcase_add_test(tc, test_backward_through_shared_graph);
    tcase_add_test(tc, test_threads_share_packed_weights);
    tcase_add_test(tc, test_threads_write_kept_weights);
    tcase_add_test(tc, test_threads_step_beside_products);
    tcase_add_test(tc, test_threads_copy_beside_products);
    tcase_add_test(tc, test_threads_zero_grad_beside_backwards);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {threads_suite()};
    return cg_test_run(s, 1);
}
