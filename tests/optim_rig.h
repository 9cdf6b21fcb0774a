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

static inline cg_optim *make_optim(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS])
{
    cg_optim_param spec[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
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

/* The smallest k (CG_OPTIM_BUF_*) an optimizer with cfg keeps, 0 if none;
 * how many it keeps. */
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
        n += cg_optim_keeps(cfg, k);
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
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
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

#endif
