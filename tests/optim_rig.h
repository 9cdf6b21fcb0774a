/* The optimizer suites' shared rig (test_optim.c, test_optim_state.c,
 * test_optim_lr.c): the fixture parameters of tests/fixtures/optim_expected.h
 * (written by tests/fixtures/make_optim_expected.py from PyTorch), optimizers
 * over them, stepping, state files and their edits, and ZeRO-1 shards. */
#ifndef CG_TESTS_OPTIM_RIG_H
#define CG_TESTS_OPTIM_RIG_H

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "tests/testutil.h"

#include "tests/fixtures/optim_expected.h"

/* ------------------------------------------------------------ helpers */

static char g_dir[1024];

static inline void setup(void)
{
    cg_clear_error();
    cg_test_mkdtemp(g_dir, sizeof g_dir, "cg_optim_test_");
}

static inline void teardown(void) { cg_test_rm_tree(g_dir); }

static inline const char *in_dir(const char *name)
{
    static char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

static inline int64_t offset_of(int j)
{
    int64_t off = 0;
    for (int k = 0; k < j; k++)
        off += cg_numel_shape((int)OPT_SHAPES[k][0], &OPT_SHAPES[k][1]);
    return off;
}

/* The four fixture parameters, fresh copies of OPT_P0. */
static inline void make_params(cg_tensor *ps[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++) {
        ps[j] = cg_from_data((int)OPT_SHAPES[j][0], &OPT_SHAPES[j][1], OPT_P0 + offset_of(j));
        ck_assert_ptr_nonnull(ps[j]);
        cg_requires_grad(ps[j], true);
    }
}

static inline void release_params(cg_tensor *ps[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        cg_release(ps[j]);
}

/* Parameter j's weight decay under cfg: the fixture's, none for Rprop
 * (PyTorch 1.13's takes none; make_optim_expected.py gives it none) */
static inline double param_wd(const cg_optim_config *cfg, int j)
{
    return cfg->type == CG_OPTIM_RPROP ? 0.0 : OPT_WD[j];
}

static inline cg_optim *make_optim(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS])
{
    cg_optim_param spec[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], param_wd(cfg, j)};
    cg_optim *o = cg_optim_new(cfg, OPT_NPARAMS, spec);
    ck_assert_msg(o != NULL, "optim_new: %s", cg_last_error());
    return o;
}

static inline void set_grad(cg_tensor *p, const float *g)
{
    cg_release(p->grad);
    p->grad = g ? cg_from_data(p->ndim, p->shape, g) : NULL;
}

/* Gradients of fixture step k, then one optimizer step at lr. */
static inline void do_step(cg_optim *o, cg_tensor *ps[OPT_NPARAMS], int k, double lr)
{
    cg_optim_zero_grad(o);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[k][j] ? OPT_G[k] + offset_of(j) : NULL);
    cg_optim_set_lr(o, lr);
    ck_assert_msg(cg_optim_step(o), "step %d: %s", k, cg_last_error());
}

static inline void gather(cg_tensor *ps[OPT_NPARAMS], float *out)
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_copy_to(ps[j], out + offset_of(j)));
}

static inline void set_scales(cg_optim *o, const double scales[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert_msg(cg_optim_set_lr_scale(o, j, scales[j]), "%s", cg_last_error());
}

/* The opening of the learning-rate tests: the fixture parameters, fresh,
 * into ps (release_params), and an optimizer over them with cfg and each
 * parameter's learning-rate scale (scales NULL: every scale 1). */
static inline cg_optim *fixture_optim(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS],
                                      const double *scales)
{
    make_params(ps);
    cg_optim *o = make_optim(cfg, ps);
    if (scales)
        set_scales(o, scales);
    return o;
}

/* fixture_optim's closing: the optimizer freed, then its parameters. */
static inline void free_fixture(cg_optim *o, cg_tensor *ps[OPT_NPARAMS])
{
    cg_optim_free(o);
    release_params(ps);
}

/* Run the fixture's steps and compare every parameter after every step;
 * scales: each parameter's learning-rate scale (NULL: none set). */
static inline void check_against_torch(cg_optim_config cfg, const double *lrs,
                                       const float expect[OPT_NSTEPS][OPT_N], const double *scales)
{
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, scales);
    float got[OPT_N];
    for (int k = 0; k < OPT_NSTEPS; k++) {
        do_step(o, ps, k, lrs[k]);
        gather(ps, got);
        CG_ASSERT_CLOSE(got, expect[k], OPT_N, 1e-7, 1e-6);
    }
    /* d never had a gradient: untouched, no state; c missed one step. */
    int64_t od = offset_of(3);
    ck_assert(memcmp(got + od, OPT_P0 + od, 2 * sizeof(float)) == 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), OPT_NSTEPS);
    ck_assert_int_eq(cg_optim_param_steps(o, 2), OPT_NSTEPS - 1);
    ck_assert_int_eq(cg_optim_param_steps(o, 3), 0);
    ck_assert_int_eq(cg_optim_steps(o), OPT_NSTEPS);
    free_fixture(o, ps);
}

/* RMSprop, Adagrad, amsgrad and dampening: the configs of
 * make_optim_expected.py's MORE_CONFIGS, in its order. */
static inline cg_optim_config more_config(int i)
{
    cg_optim_config c;
    switch (i) {
    case 0: return cg_rmsprop_default(1e-2);
    case 1: return cg_rmsprop_config(1e-2, 0.9, 1e-8, 0.9, false);
    case 2: return cg_rmsprop_config(1e-2, 0.95, 1e-6, 0.0, true);
    case 3: return cg_rmsprop_config(1e-2, 0.8, 1e-4, 0.5, true);
    case 4: return cg_adagrad_default(0.1);
    case 5: return cg_adagrad_config(0.1, 0.25, 0.5, 1e-6);
    case 6: c = cg_adam_config(1e-2, 0.9, 0.6, 1e-9); break;
    case 7: c = cg_adamw_config(1e-2, 0.8, 0.6, 1e-8); break;
    default: c = cg_sgd_config(0.1, 0.9, false), c.dampening = 0.3; return c;
    }
    c.amsgrad = true;
    return c;
}
#define N_MORE 9

static const double *const more_lrs[N_MORE] = {
    OPT_LR_RMSPROP,          OPT_LR_RMSPROP_MOMENTUM,
    OPT_LR_RMSPROP_CENTERED, OPT_LR_RMSPROP_CENTERED_MOMENTUM,
    OPT_LR_ADAGRAD,          OPT_LR_ADAGRAD_DECAY_INIT,
    OPT_LR_ADAM_AMSGRAD,     OPT_LR_ADAMW_AMSGRAD,
    OPT_LR_SGD_DAMPENING};
static const float (*const more_expect[N_MORE])[OPT_N] = {
    OPT_EXPECT_RMSPROP,          OPT_EXPECT_RMSPROP_MOMENTUM,
    OPT_EXPECT_RMSPROP_CENTERED, OPT_EXPECT_RMSPROP_CENTERED_MOMENTUM,
    OPT_EXPECT_ADAGRAD,          OPT_EXPECT_ADAGRAD_DECAY_INIT,
    OPT_EXPECT_ADAM_AMSGRAD,     OPT_EXPECT_ADAMW_AMSGRAD,
    OPT_EXPECT_SGD_DAMPENING};

/* torch.optim's other first-order optimizers: the configs of
 * make_optim_expected.py's NEW_CONFIGS, in its order (test_optim_more.c) */
static inline cg_optim_config new_config(int i)
{
    switch (i) {
    case 0: return cg_adadelta_default(1.0);
    case 1: return cg_adadelta_config(0.5, 0.5, 1e-4);
    case 2: return cg_adamax_default(2e-2);
    case 3: return cg_adamax_config(1e-2, 0.8, 0.6, 1e-6);
    case 4: return cg_nadam_default(1e-2);
    case 5: return cg_nadam_config(1e-2, 0.8, 0.9, 1e-6, 0.1);
    case 6: return cg_radam_default(1e-2);
    case 7: return cg_radam_config(2e-2, 0.7, 0.9, 1e-6);
    case 8: return cg_asgd_default(1e-2);
    case 9: return cg_asgd_config(0.05, 0.01, 0.5, 0.5);
    case 10: return cg_rprop_default(1e-2);
    default: return cg_rprop_config(0.05, 0.3, 1.5, 0.02, 0.06);
    }
}
#define N_NEW 12

static const double *const new_lrs[N_NEW] = {
    OPT_LR_ADADELTA, OPT_LR_ADADELTA_RHO, OPT_LR_ADAMAX, OPT_LR_ADAMAX_BETAS,
    OPT_LR_NADAM,    OPT_LR_NADAM_DECAY,  OPT_LR_RADAM,  OPT_LR_RADAM_BETAS,
    OPT_LR_ASGD,     OPT_LR_ASGD_AVG,     OPT_LR_RPROP,  OPT_LR_RPROP_BOUNDS};
static const float (*const new_expect[N_NEW])[OPT_N] = {
    OPT_EXPECT_ADADELTA, OPT_EXPECT_ADADELTA_RHO, OPT_EXPECT_ADAMAX, OPT_EXPECT_ADAMAX_BETAS,
    OPT_EXPECT_NADAM,    OPT_EXPECT_NADAM_DECAY,  OPT_EXPECT_RADAM,  OPT_EXPECT_RADAM_BETAS,
    OPT_EXPECT_ASGD,     OPT_EXPECT_ASGD_AVG,     OPT_EXPECT_RPROP,  OPT_EXPECT_RPROP_BOUNDS};
/* w's state after the steps, PyTorch's: its names (NULL-terminated), its
 * values back to back */
static const char *const *const new_state_names[N_NEW] = {
    OPT_STATE_NAMES_ADADELTA,     OPT_STATE_NAMES_ADADELTA_RHO, OPT_STATE_NAMES_ADAMAX,
    OPT_STATE_NAMES_ADAMAX_BETAS, OPT_STATE_NAMES_NADAM,        OPT_STATE_NAMES_NADAM_DECAY,
    OPT_STATE_NAMES_RADAM,        OPT_STATE_NAMES_RADAM_BETAS,  OPT_STATE_NAMES_ASGD,
    OPT_STATE_NAMES_ASGD_AVG,     OPT_STATE_NAMES_RPROP,        OPT_STATE_NAMES_RPROP_BOUNDS};
static const float *const new_state[N_NEW] = {
    OPT_STATE_ADADELTA, OPT_STATE_ADADELTA_RHO, OPT_STATE_ADAMAX, OPT_STATE_ADAMAX_BETAS,
    OPT_STATE_NADAM,    OPT_STATE_NADAM_DECAY,  OPT_STATE_RADAM,  OPT_STATE_RADAM_BETAS,
    OPT_STATE_ASGD,     OPT_STATE_ASGD_AVG,     OPT_STATE_RPROP,  OPT_STATE_RPROP_BOUNDS};

/* The smallest k (CG_OPTIM_BUF_*) an optimizer with cfg keeps, 0 if none;
 * how many of its parameter's shape it keeps. */
static inline int first_buffer(const cg_optim_config *cfg)
{
    for (int k = 1; k < CG_OPTIM_NBUFS; k++)
        if (cg_optim_keeps(cfg, k))
            return k;
    return 0;
}

static inline int buffers_kept(const cg_optim_config *cfg)
{
    int n = 0;
    for (int k = 1; k < CG_OPTIM_NBUFS; k++)
        n += cg_optim_keeps(cfg, k) && !cg_optim_buffer_is_scalar(k);
    return n;
}

/* ------------------------------------------------------ state files */

/* A file with AdamW state for the fixture params, after two steps. */
static inline void write_state(const char *path, cg_optim_config cfg)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim *o = make_optim(&cfg, ps);
    do_step(o, ps, 0, 1e-2);
    do_step(o, ps, 1, 1e-2);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, "opt"));
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_optim_free(o);
    release_params(ps);
}

static inline void assert_error_has(const char *needle)
{
    ck_assert_msg(strstr(cg_last_error(), needle) != NULL, "error '%s' lacks '%s'", cg_last_error(),
                  needle);
}

/* f's tensors into w: element `at` of F32 tensor `name` set to v (name
 * may be NULL), tensor `drop` left out (may be NULL). */
static inline void copy_tensors(const cg_st_file *f, cg_st_writer *w, const char *name, int64_t at,
                                float v, const char *drop)
{
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *n = cg_st_name(f, i);
        if (drop && strcmp(n, drop) == 0)
            continue;
        cg_st_dtype dt;
        ck_assert(cg_st_info(f, n, &dt, NULL, NULL));
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, n);
            if (name && strcmp(n, name) == 0)
                cg_data(t)[at] = v;
            ck_assert(cg_st_add_f32(w, n, t));
            cg_release(t);
        } else {
            cg_tensor *iv = cg_st_get(f, n);
            ck_assert(cg_st_add(w, n, iv));
            cg_release(iv);
        }
    }
}

/* f's metadata into w, key (may be NULL) set to value. */
static inline void copy_metadata(const cg_st_file *f, cg_st_writer *w, const char *key,
                                 const char *value)
{
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        bool set = key && strcmp(k, key) == 0;
        ck_assert(cg_st_set_metadata(w, k, set ? value : cg_st_metadata(f, k)));
    }
}

/* A copy of path with element `at` of F32 tensor `name` set to v (name may
 * be NULL) and without tensor `drop` (may be NULL). */
static inline void write_edited(const char *path, const char *out, const char *name, int64_t at,
                                float v, const char *drop)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(f && w);
    copy_tensors(f, w, name, at, v, drop);
    copy_metadata(f, w, NULL, NULL);
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, out));
    cg_st_writer_free(w);
}

/* A copy of path with the I64 step count `name` set to step (name may be
 * NULL) and metadata key (may be NULL) set to value. */
static inline void write_steps(const char *path, const char *out, const char *name, int64_t step,
                               const char *key, const char *value)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(f && w);
    copy_tensors(f, w, NULL, 0, 0, name);
    cg_tensor *t = name ? cg_scalar_i64(step) : NULL;
    ck_assert(!name || cg_st_add(w, name, t));
    cg_release(t);
    copy_metadata(f, w, key, value);
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, out));
    cg_st_writer_free(w);
}

/* ------------------------------------------------------ sharded (ZeRO-1) */
#define NSHARD 3

/* Shard k's range of parameter j: thirds, except that shard 1 owns nothing
 * of "b" (shard 0 takes its first half, shard 2 the rest). */
static inline cg_optim_range shard_of(int k, int j)
{
    int64_t n = cg_numel_shape((int)OPT_SHAPES[j][0], &OPT_SHAPES[j][1]);
    if (j == 1)
        return k == 0   ? (cg_optim_range){0, n / 2}
               : k == 1 ? (cg_optim_range){n / 2, n / 2}
                        : (cg_optim_range){n / 2, n};
    return (cg_optim_range){n * k / NSHARD, n * (k + 1) / NSHARD};
}

static inline cg_optim *make_shard(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS], int k)
{
    cg_optim_param spec[OPT_NPARAMS];
    cg_optim_range own[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++) {
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], param_wd(cfg, j)};
        own[j] = shard_of(k, j);
    }
    cg_optim *o = cg_optim_new_sharded(cfg, OPT_NPARAMS, spec, own);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    ck_assert(cg_optim_is_sharded(o));
    return o;
}

/* Every shard's own elements into every replica (what an all-gather does). */
static inline void share_owned(cg_tensor *s[NSHARD][OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        for (int k = 0; k < NSHARD; k++) {
            cg_optim_range r = shard_of(k, j);
            for (int m = 0; m < NSHARD; m++)
                if (m != k)
                    memcpy(cg_data(s[m][j]) + r.lo, cg_data(s[k][j]) + r.lo,
                           (size_t)(r.hi - r.lo) * sizeof(float));
        }
}

static inline void assert_same_state(cg_optim *a, cg_optim *b, cg_optim_config cfg)
{
    ck_assert_int_eq(cg_optim_steps(a), cg_optim_steps(b));
    for (int j = 0; j < OPT_NPARAMS; j++) {
        ck_assert_int_eq(cg_optim_param_steps(a, j), cg_optim_param_steps(b, j));
        for (int k = 1; k < CG_OPTIM_NBUFS; k++) { /* every buffer cfg keeps */
            if (!cg_optim_keeps(&cfg, k))
                continue;
            const char *what = cg_optim_buffer_name(k);
            float x[12], y[12];
            cg_tensor *ta = cg_optim_state(a, j, what), *tb = cg_optim_state(b, j, what);
            ck_assert_msg(ta && tb, "%s: %s", what, cg_last_error());
            ck_assert_int_eq(cg_numel(ta), cg_numel(tb));
            ck_assert(cg_copy_to(ta, x) && cg_copy_to(tb, y));
            ck_assert_msg(memcmp(x, y, (size_t)cg_numel(ta) * sizeof(float)) == 0, "%s of %d", what,
                          j);
        }
    }
}

/* ------------------------------------------------ cases for every type */

/* N steps straight == N/2 steps, save params + state, a new optimizer over
 * the reloaded params loads the state, N/2 steps: bit-identical. */
static inline void resume_case(cg_optim_config cfg, const double *lrs)
{
    cg_tensor *a[OPT_NPARAMS], *b[OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a);
    for (int k = 0; k < OPT_NSTEPS; k++)
        do_step(oa, a, k, lrs[k]);

    make_params(b);
    cg_optim *ob = make_optim(&cfg, b);
    for (int k = 0; k < OPT_NSTEPS / 2; k++)
        do_step(ob, b, k, lrs[k]);
    cg_st_writer *w = cg_st_writer_new();
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_st_add_f32(w, OPT_NAMES[j], b[j]));
    ck_assert_msg(cg_optim_save(ob, w, NULL), "%s", cg_last_error());
    ck_assert_msg(cg_st_writer_save(w, in_dir("ckpt.safetensors")), "%s", cg_last_error());
    cg_st_writer_free(w);
    cg_optim_free(ob);
    release_params(b);

    cg_st_file *f = cg_st_open(in_dir("ckpt.safetensors"));
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    for (int j = 0; j < OPT_NPARAMS; j++) {
        b[j] = cg_st_get_f32(f, OPT_NAMES[j]);
        ck_assert_ptr_nonnull(b[j]);
        cg_requires_grad(b[j], true);
    }
    cg_optim_config other = cfg;
    other.lr = 123; /* restored from the file */
    ob = make_optim(&other, b);
    ck_assert_msg(cg_optim_load(ob, f, "optim"), "%s", cg_last_error());
    cg_st_close(f);
    ck_assert(cg_optim_lr(ob) == lrs[OPT_NSTEPS / 2 - 1]);
    ck_assert_int_eq(cg_optim_steps(ob), OPT_NSTEPS / 2);
    ck_assert_int_eq(cg_optim_param_steps(ob, 2), OPT_NSTEPS / 2 - 1);
    for (int k = OPT_NSTEPS / 2; k < OPT_NSTEPS; k++)
        do_step(ob, b, k, lrs[k]);

    float va[OPT_N], vb[OPT_N];
    gather(a, va);
    gather(b, vb);
    ck_assert(memcmp(va, vb, sizeof va) == 0);
    assert_same_state(oa, ob, cfg); /* every buffer the type keeps */
    ck_assert_int_eq(cg_optim_steps(ob), OPT_NSTEPS);
    cg_optim_free(oa);
    cg_optim_free(ob);
    release_params(a);
    release_params(b);
}

/* NSHARD sharded optimizers, each on its own replica of the parameters,
 * with their owned elements shared after every step, equal one unsharded
 * optimizer bit for bit (parameters, then the state gathered with
 * cg_optim_copy_state); the state splits back and loads from the
 * unsharded file layout. */
static inline void sharded_case(cg_optim_config cfg, const double *lrs)
{
    cg_tensor *a[OPT_NPARAMS], *s[NSHARD][OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a), *os[NSHARD];
    int64_t bytes = 0;
    for (int k = 0; k < NSHARD; k++) {
        make_params(s[k]);
        os[k] = make_shard(&cfg, s[k], k);
        bytes += cg_optim_state_bytes(os[k]);
    }
    ck_assert_int_eq(bytes, cg_optim_state_bytes(oa));
    ck_assert_int_eq(cg_optim_state_bytes(oa), buffers_kept(&cfg) * OPT_N * 4);
    float va[OPT_N], vs[OPT_N];
    for (int step = 0; step < OPT_NSTEPS; step++) {
        do_step(oa, a, step, lrs[step]);
        for (int k = 0; k < NSHARD; k++)
            do_step(os[k], s[k], step, lrs[step]);
        share_owned(s);
        gather(a, va);
        for (int k = 0; k < NSHARD; k++) {
            gather(s[k], vs);
            ck_assert_msg(memcmp(va, vs, sizeof va) == 0, "step %d, shard %d differs", step, k);
        }
    }
    cg_tensor *f[OPT_NPARAMS];
    make_params(f);
    cg_optim *full = make_optim(&cfg, f);
    for (int k = 0; k < NSHARD; k++)
        ck_assert_msg(cg_optim_copy_state(full, os[k]), "%s", cg_last_error());
    assert_same_state(full, oa, cfg);
    cg_optim *back = make_optim(&cfg, f); /* each shard copies its own run only: any order */
    for (int k = NSHARD - 1; k >= 0; k--)
        ck_assert_msg(cg_optim_copy_state(back, os[k]), "%s", cg_last_error());
    assert_same_state(back, oa, cfg);
    cg_optim_free(back);

    /* a sharded optimizer does not save; the gathered one does, and a shard
     * loads its part of that file (and splits from an unsharded one) */
    cg_st_writer *w = cg_st_writer_new();
    CG_ASSERT_FAILS(cg_optim_save(os[0], w, "opt") ? (void *)1 : NULL, "shard");
    ck_assert(cg_optim_save(full, w, "opt"));
    ck_assert(cg_st_writer_save(w, in_dir("full.st")));
    cg_st_writer_free(w);
    cg_st_file *file = cg_st_open(in_dir("full.st"));
    ck_assert_ptr_nonnull(file);
    for (int k = 0; k < NSHARD; k++) {
        cg_tensor *q[OPT_NPARAMS];
        make_params(q);
        cg_optim *loaded = make_shard(&cfg, q, k), *split = make_shard(&cfg, q, k);
        ck_assert_msg(cg_optim_load(loaded, file, "opt"), "%s", cg_last_error());
        ck_assert(cg_optim_copy_state(split, oa));
        assert_same_state(loaded, split, cfg);
        assert_same_state(loaded, os[k], cfg);
        cg_optim_free(loaded);
        cg_optim_free(split);
        release_params(q);
    }
    cg_st_close(file);
    /* a damaged value is named by its element in the whole tensor, by the
     * shard whose run holds it (the others read theirs alone) */
    if (cfg.type != CG_OPTIM_SGD) {
        char full_path[4096];
        snprintf(full_path, sizeof full_path, "%s", in_dir("full.st"));
        const int64_t n = cg_numel_shape((int)OPT_SHAPES[0][0], &OPT_SHAPES[0][1]);
        char entry[64];
        snprintf(entry, sizeof entry, "opt.w.%s", cg_optim_buffer_name(first_buffer(&cfg)));
        write_edited(full_path, in_dir("damaged.st"), entry, n - 1, NAN, NULL);
        file = cg_st_open(in_dir("damaged.st"));
        ck_assert_ptr_nonnull(file);
        char msg[160];
        snprintf(msg, sizeof msg, "'%s' holds nan at element %lld", entry, (long long)(n - 1));
        for (int k = 0; k < NSHARD; k++) {
            cg_tensor *q[OPT_NPARAMS];
            make_params(q);
            cg_optim *loaded = make_shard(&cfg, q, k);
            cg_clear_error();
            const bool ok = cg_optim_load(loaded, file, "opt");
            ck_assert_msg(ok == (k < NSHARD - 1), "shard %d: %s", k, cg_last_error());
            if (!ok)
                assert_error_has(msg);
            cg_optim_free(loaded);
            release_params(q);
        }
        cg_st_close(file);
    }
    cg_optim_free(full);
    release_params(f);
    for (int k = 0; k < NSHARD; k++) {
        cg_optim_free(os[k]);
        release_params(s[k]);
    }
    cg_optim_free(oa);
    release_params(a);
}

/* Three steps of cfg on a [200, 301] parameter (past the threshold and
 * one chunk) at 1 and 2 threads: the parameter and every buffer the same
 * bits. */
static inline void thread_case(const cg_optim_config cfg)
{
    enum { R = 200, C = 301 };
    float *out[2][CG_OPTIM_NBUFS] = {{NULL}};
    int64_t len[CG_OPTIM_NBUFS] = {R * C};
    int saved = cg_get_num_threads();
    for (int r = 0; r < 2; r++) {
        cg_set_num_threads(r + 1);
        cg_rng rng = cg_rng_new(11);
        cg_tensor *p = cg_randn(&rng, CG_SHAPE(R, C));
        cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"p", p, param_wd(&cfg, 0)});
        ck_assert_ptr_nonnull(o);
        for (int k = 0; k < 3; k++) {
            cg_zero_grad(p);
            p->grad = cg_randn(&rng, CG_SHAPE(R, C));
            ck_assert(cg_optim_step(o));
        }
        out[r][0] = cg_test_values(p);
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            if (cg_optim_keeps(&cfg, k)) {
                cg_tensor *b = cg_optim_state(o, 0, cg_optim_buffer_name(k));
                out[r][k] = cg_test_values(b);
                len[k] = cg_numel(b); /* a scalar's 1 */
            }
        cg_optim_free(o);
        cg_release(p);
    }
    cg_set_num_threads(saved);
    for (int k = 0; k < CG_OPTIM_NBUFS; k++) {
        ck_assert((out[0][k] == NULL) == (out[1][k] == NULL));
        if (out[0][k])
            ck_assert_msg(memcmp(out[0][k], out[1][k], (size_t)len[k] * sizeof(float)) == 0,
                          "buffer %d", k);
        free(out[0][k]);
        free(out[1][k]);
    }
}

#endif
