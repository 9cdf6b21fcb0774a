/* Check suite "optim_state": an optimizer's state through safetensors
 * files (optim/optim.h cg_optim_save, cg_optim_load): bit-identical resume
 * against the PyTorch fixtures of tests/optim_rig.h, damaged and edited
 * files refused, and ZeRO-1 shards (cg_optim_range) that equal one
 * unsharded optimizer bit for bit and load from its file layout. */

#include "tests/optim_rig.h"

/* ------------------------------------------------------ save / load */

START_TEST(resume_sgd) { resume_case(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD); }
END_TEST

START_TEST(resume_adam) { resume_case(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM); }
END_TEST

START_TEST(resume_adamw) { resume_case(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW); }
END_TEST

/* RMSprop (momentum_buffer, grad_avg), Adagrad (sum from its initial
 * value), amsgrad (max_exp_avg_sq), dampening: bit-identical resume */
START_TEST(resume_more) { resume_case(more_config(_i), more_lrs[_i]); }
END_TEST

/* The new hyper-parameters in the metadata: saved for their types only
 * (amsgrad and dampening when set: an Adam or SGD file without them has
 * the bytes of before), restored by a load, and refused when damaged; the
 * new buffers checked as the moments are. */
START_TEST(load_more_metadata)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", in_dir("r.st"));
    write_state(path, more_config(3)); /* RMSprop centered with momentum */
    cg_st_file *f = cg_st_open(path);
    ck_assert_str_eq(cg_st_metadata(f, "opt.type"), "rmsprop");
    ck_assert_str_eq(cg_st_metadata(f, "opt.alpha"), "0.80000000000000004");
    ck_assert_str_eq(cg_st_metadata(f, "opt.centered"), "true");
    ck_assert_ptr_null(cg_st_metadata(f, "opt.amsgrad"));
    ck_assert_ptr_null(cg_st_metadata(f, "opt.lr_decay"));
    ck_assert(cg_st_has(f, "opt.w.grad_avg") && cg_st_has(f, "opt.w.square_avg") &&
              cg_st_has(f, "opt.w.momentum_buffer"));
    cg_st_close(f);
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config plain = cg_rmsprop_default(1e-3);
    cg_optim *o = make_optim(&plain, ps);
    static const struct {
        const char *key, *value, *msg;
    } bad[] = {
        {"opt.alpha", "x", "metadata 'opt.alpha' = 'x' is not a finite number"},
        {"opt.alpha", "-1", "rmsprop alpha -1 must be finite and >= 0"},
        {"opt.centered", "yes", "metadata 'opt.centered' = 'yes' is not true/false"},
        {"opt.momentum", "nan", "metadata 'opt.momentum' = 'nan' is not a finite number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_steps(path, in_dir("bad.st"), NULL, 0, bad[i].key, bad[i].value);
        f = cg_st_open(in_dir("bad.st"));
        CG_ASSERT_FAILS(cg_optim_load(o, f, "opt") ? (void *)1 : NULL, bad[i].msg);
        cg_st_close(f);
        ck_assert(!cg_optim_get_config(o).centered); /* unchanged */
    }
    /* centered false in the file: its grad_avg is no state of it */
    write_steps(path, in_dir("bad.st"), NULL, 0, "opt.centered", "false");
    f = cg_st_open(in_dir("bad.st"));
    CG_ASSERT_FAILS(cg_optim_load(o, f, "opt") ? (void *)1 : NULL,
                    "'opt.w.grad_avg' is not the rmsprop state of any parameter");
    cg_st_close(f);
    /* a negative square_avg is damage; a negative grad_avg is not */
    write_edited(path, in_dir("bad.st"), "opt.w.square_avg", 2, -1.0f, NULL);
    f = cg_st_open(in_dir("bad.st"));
    CG_ASSERT_FAILS(cg_optim_load(o, f, "opt") ? (void *)1 : NULL,
                    "'opt.w.square_avg' holds -1 at element 2");
    cg_st_close(f);
    write_edited(path, in_dir("bad.st"), "opt.w.grad_avg", 2, -1.0f, NULL);
    f = cg_st_open(in_dir("bad.st"));
    ck_assert_msg(cg_optim_load(o, f, "opt"), "%s", cg_last_error());
    cg_st_close(f);
    /* the file's choices are taken: centered, momentum, alpha */
    cg_optim_config got = cg_optim_get_config(o);
    ck_assert(got.centered && got.momentum == 0.5 && got.alpha == 0.8 && got.eps == 1e-4);
    ck_assert_float_eq(cg_data(cg_optim_state(o, 0, "grad_avg"))[2], -1.0f);
    cg_optim_free(o);

    /* Adagrad's own two; Adam's amsgrad and SGD's dampening when set */
    for (int m = 5; m < N_MORE; m++) {
        const cg_optim_config c = more_config(m);
        write_state(path, c);
        f = cg_st_open(path);
        const char *key = m == 5   ? "opt.initial_accumulator_value"
                          : m == 8 ? "opt.dampening"
                                   : "opt.amsgrad";
        const char *want = m == 5 ? "0.5" : m == 8 ? "0.29999999999999999" : "true";
        ck_assert_msg(cg_st_metadata(f, key) && strcmp(cg_st_metadata(f, key), want) == 0, "%s",
                      key);
        cg_optim_config off = c; /* built without the option: the file's taken */
        off.amsgrad = false;
        off.dampening = 0;
        off.initial_accumulator_value = 0;
        cg_optim *x = make_optim(&off, ps);
        ck_assert_msg(cg_optim_load(x, f, "opt"), "%s", cg_last_error());
        got = cg_optim_get_config(x);
        ck_assert(got.amsgrad == c.amsgrad && got.dampening == c.dampening &&
                  got.initial_accumulator_value == c.initial_accumulator_value);
        cg_st_close(f);
        cg_optim_free(x);
    }
    for (int m = 0; m < 2; m++) { /* without them: no entry, as before they existed */
        write_state(path, m ? cg_sgd_config(0.1, 0.9, false) : cg_adam_default(1e-3));
        f = cg_st_open(path);
        ck_assert_ptr_null(cg_st_metadata(f, "opt.amsgrad"));
        ck_assert_ptr_null(cg_st_metadata(f, "opt.dampening"));
        ck_assert_ptr_null(cg_st_metadata(f, "opt.alpha"));
        ck_assert_int_eq(cg_st_metadata_count(f), 8);
        cg_st_close(f);
    }
    release_params(ps);
}
END_TEST

/* A host program that set a locale with a decimal comma (setlocale(LC_ALL,
 * "") in Germany) wrote "0,01" into the state's metadata, which a program
 * in the "C" locale (charlm --resume) refused, and the other way round: the
 * numbers are written and read with a decimal point whatever the locale. */
START_TEST(state_locale_independent)
{
    if (!cg_test_comma_locale())
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s", in_dir("de.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(cg_st_metadata(f, "opt.lr"), "0.01");
    ck_assert_str_eq(cg_st_metadata(f, "opt.beta2"), "0.98999999999999999");
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adamw_config(5e-3, 0.8, 0.9, 1e-7);
    for (int pass = 0; pass < 2; pass++) { /* read under the comma locale, then under "C" */
        if (pass == 1)
            cg_test_c_locale();
        cg_optim *o = make_optim(&cfg, ps);
        ck_assert_msg(cg_optim_load(o, f, "opt"), "%s", cg_last_error());
        cg_optim_config got = cg_optim_get_config(o);
        ck_assert(got.lr == 1e-2 && got.beta1 == 0.9 && got.beta2 == 0.99 && got.eps == 1e-8);
        cg_optim_free(o);
    }
    cg_st_close(f);
    release_params(ps);
}
END_TEST

START_TEST(load_errors)
{
    char path[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);

    /* w with the transposed shape: names the entry and both shapes; nothing changes */
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_tensor *wt = cg_zeros(CG_SHAPE(4, 3));
    cg_optim_param spec[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], j == 0 ? wt : ps[j], OPT_WD[j]};
    cg_optim_config cfg = cg_adamw_config(5e-3, 0.8, 0.9, 1e-7);
    cg_optim *o = cg_optim_new(&cfg, OPT_NPARAMS, spec);
    ck_assert_ptr_nonnull(o);
    cg_clear_error();
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.exp_avg' is F32 [3, 4], but parameter 'w' is F32 [4, 3]");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 1), 0);
    ck_assert(cg_optim_lr(o) == 5e-3 && cg_optim_get_config(o).beta1 == 0.8);
    cg_optim_free(o);
    cg_release(wt);
    /* w wider: the shapes differ in the last dim alone */
    wt = cg_zeros(CG_SHAPE(3, 5));
    spec[0].tensor = wt;
    o = cg_optim_new(&cfg, OPT_NPARAMS, spec);
    ck_assert(o && !cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.exp_avg' is F32 [3, 4], but parameter 'w' is F32 [3, 5]");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    cg_optim_free(o);

    /* a different optimizer type */
    cg_optim_config adam = cg_adam_config(1e-3, 0.9, 0.99, 1e-8);
    o = make_optim(&adam, ps);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("holds adamw state, the optimizer is adam");
    cg_optim_free(o);

    /* wrong prefix */
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    o = make_optim(&aw, ps);
    ck_assert(!cg_optim_load(o, f, "optim"));
    assert_error_has("no optimizer state under 'optim'");
    ck_assert(cg_optim_load(o, f, "opt"));
    ck_assert_int_eq(cg_optim_steps(o), 2);
    cg_optim_free(o);

    /* a parameter the file does not know */
    spec[0] = (cg_optim_param){"w2", ps[0], 0.1};
    for (int j = 1; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
    o = cg_optim_new(&aw, OPT_NPARAMS, spec);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.");
    cg_optim_free(o);

    /* the file holds state for a parameter the optimizer lacks */
    o = cg_optim_new(&aw, OPT_NPARAMS - 1, spec + 1);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' is not the adamw state of any parameter");
    cg_optim_free(o);
    cg_st_close(f);

    /* an SGD momentum buffer in an AdamW file: not AdamW state */
    {
        char odd[4096]; /* in_dir's buffer is reused */
        snprintf(odd, sizeof odd, "%s", in_dir("odd.safetensors"));
        cg_st_file *g = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(g && w);
        copy_tensors(g, w, NULL, 0, 0, NULL);
        copy_metadata(g, w, NULL, NULL);
        cg_tensor *mb = cg_zeros(CG_SHAPE(3, 4));
        ck_assert(cg_st_add_f32(w, "opt.w.momentum_buffer", mb));
        cg_release(mb);
        ck_assert(cg_st_writer_save(w, odd));
        cg_st_writer_free(w);
        cg_st_close(g);
        g = cg_st_open(odd);
        o = make_optim(&aw, ps);
        ck_assert(!cg_optim_load(o, g, "opt"));
        assert_error_has("'opt.w.momentum_buffer' is not the adamw state of any parameter");
        ck_assert_int_eq(cg_optim_steps(o), 0);
        cg_optim_free(o);
        cg_st_close(g);
    }

    /* a parameter missing from the file */
    cg_tensor *extra = cg_zeros(CG_SHAPE(2));
    cg_optim_param spec5[OPT_NPARAMS + 1];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec5[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
    spec5[OPT_NPARAMS] = (cg_optim_param){"e", extra, 0};
    o = cg_optim_new(&aw, OPT_NPARAMS + 1, spec5);
    f = cg_st_open(path);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("has no 'opt.e.step' (no state for parameter 'e')");
    cg_optim_free(o);
    cg_st_close(f);

    /* a truncated state: exp_avg_sq of c missing */
    char cut[4096]; /* in_dir's buffer is reused */
    snprintf(cut, sizeof cut, "%s", in_dir("cut.safetensors"));
    write_edited(path, cut, NULL, 0, 0, "opt.c.exp_avg_sq");
    f = cg_st_open(in_dir("cut.safetensors"));
    o = make_optim(&aw, ps);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("has no 'opt.c.exp_avg_sq'");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    cg_optim_free(o);
    cg_st_close(f);

    cg_release_all(2, wt, extra);
    release_params(ps);
}
END_TEST

/* Issue 25: a negative exp_avg_sq was reported at the next step as a
 * non-finite gradient of another tensor. Damaged values are refused at
 * load, naming the entry, and nothing changes. */
START_TEST(load_damaged_values)
{
    char path[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    static const struct {
        const char *name;
        float v;
        const char *msg;
    } cases[] = {
        {"opt.c.exp_avg_sq", -1.0f, "'opt.c.exp_avg_sq' holds -1 at element 0"},
        {"opt.w.exp_avg_sq", INFINITY, "'opt.w.exp_avg_sq' holds inf at element 0"},
        {"opt.w.exp_avg", NAN, "'opt.w.exp_avg' holds nan at element 0"},
    };
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        write_edited(path, bad, cases[k].name, 0, cases[k].v, NULL);
        cg_st_file *f = cg_st_open(bad);
        cg_optim *o = make_optim(&aw, ps);
        cg_clear_error();
        ck_assert(!cg_optim_load(o, f, "opt"));
        assert_error_has(cases[k].msg);
        ck_assert_int_eq(cg_optim_steps(o), 0);
        cg_optim_free(o);
        cg_st_close(f);
    }
    release_params(ps);
}
END_TEST

/* A step count that no run reaches (INT64_MAX: the next step overflowed
 * it, and AdamW's bias correction at step -2^63 made every weight NaN) is
 * refused at load like any damaged value, per parameter and overall;
 * 2^53, the last count a double holds exactly, loads and steps. Damaged
 * metadata and step entries of other kinds are refused likewise, each
 * named, the optimizer unchanged. */
START_TEST(load_damaged_steps_and_metadata)
{
    char path[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    cg_optim *o = make_optim(&aw, ps);
    write_steps(path, bad, "opt.w.step", INT64_MAX, NULL, NULL);
    cg_st_file *f = cg_st_open(bad);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' = 9223372036854775807 is not a step count");
    cg_st_close(f);
    write_steps(path, bad, NULL, 0, "opt.step", "9223372036854775807");
    f = cg_st_open(bad);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.step' = '9223372036854775807' is not a step count");
    cg_st_close(f);
    /* other damaged metadata and step entries, each named, nothing changed */
    static const struct {
        const char *key, *value, *msg;
    } meta[] = {
        {"opt.nesterov", "yes", "metadata 'opt.nesterov' = 'yes' is not true/false"},
        {"opt.eps", "1e-999", "metadata 'opt.eps' = '1e-999' is not a finite number"},
        {"opt.beta2", "0.99x", "metadata 'opt.beta2' = '0.99x' is not a finite number"},
    };
    for (size_t k = 0; k < sizeof meta / sizeof *meta; k++) {
        write_steps(path, bad, NULL, 0, meta[k].key, meta[k].value);
        f = cg_st_open(bad);
        ck_assert(f && !cg_optim_load(o, f, "opt"));
        assert_error_has(meta[k].msg);
        cg_st_close(f);
    }
    write_steps(path, bad, "opt.w.step", -1, NULL, NULL);
    f = cg_st_open(bad);
    ck_assert(f && !cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' = -1 is not a step count (0 to 2^53)");
    cg_st_close(f);
    for (int kind = 0; kind < 2; kind++) { /* a float step, two steps */
        cg_st_file *g = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(g && w);
        copy_tensors(g, w, NULL, 0, 0, "opt.w.step");
        copy_metadata(g, w, NULL, NULL);
        cg_st_close(g);
        cg_tensor *t = kind ? cg_zeros_dtype(CG_I64, CG_SHAPE(2)) : cg_zeros(0, NULL);
        ck_assert(cg_st_add(w, "opt.w.step", t));
        cg_release(t);
        ck_assert(cg_st_writer_save(w, bad));
        cg_st_writer_free(w);
        g = cg_st_open(bad);
        ck_assert(g && !cg_optim_load(o, g, "opt"));
        assert_error_has(kind ? "'opt.w.step' is I64 [2], expected one I64"
                              : "'opt.w.step' is F32 [], expected one I64");
        cg_st_close(g);
    }
    cg_optim_config got = cg_optim_get_config(o);
    ck_assert(cg_optim_steps(o) == 0 && got.lr == 1e-3 && !got.nesterov && got.eps == 1e-8);
    write_steps(path, bad, "opt.w.step", INT64_C(1) << 53, NULL, NULL);
    f = cg_st_open(bad);
    ck_assert_msg(cg_optim_load(o, f, "opt"), "%s", cg_last_error());
    cg_st_close(f);
    do_step(o, ps, 2, 1e-2);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), (INT64_C(1) << 53) + 1);
    float w[12];
    ck_assert(cg_copy_to(ps[0], w));
    for (int i = 0; i < 12; i++)
        ck_assert(isfinite(w[i]));
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* SGD without momentum keeps no buffers; its state is the step counts. */
/* The saved hyperparameters come back exactly, as PyTorch's
 * load_state_dict restores its param_groups' floats: a rate or beta
 * rounded in the file (%.6g) changed a resumed step that does not set the
 * rate again (the other tests set it before every step). */
START_TEST(state_config_exact)
{
    const cg_optim_config cfgs[2] = {
        cg_adamw_config(1e-2 / 3, 0.9 + 0x1p-40, 0.999 - 0x1p-30, 1e-8 / 3),
        cg_sgd_config(0.1 / 3, 0.9 - 0x1p-40, true)};
    for (int k = 0; k < 2; k++) {
        cg_tensor *ps[OPT_NPARAMS];
        make_params(ps);
        cg_optim *o = make_optim(&cfgs[k], ps);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(cg_optim_save(o, w, "opt") && cg_st_writer_save(w, in_dir("cfg.safetensors")));
        cg_st_writer_free(w);
        cg_optim_config other = k == 0 ? cg_adamw_default(1.0) : cg_sgd_config(1.0, 0.5, false);
        cg_optim *r = make_optim(&other, ps);
        cg_st_file *f = cg_st_open(in_dir("cfg.safetensors"));
        ck_assert_msg(f && cg_optim_load(r, f, "opt"), "%s", cg_last_error());
        cg_st_close(f);
        cg_optim_config a = cg_optim_get_config(o), b = cg_optim_get_config(r);
        ck_assert_msg(a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
                          a.momentum == b.momentum && a.nesterov == b.nesterov,
                      "%d: lr %.17g/%.17g beta1 %.17g/%.17g beta2 %.17g/%.17g eps %.17g/%.17g "
                      "momentum %.17g/%.17g",
                      k, a.lr, b.lr, a.beta1, b.beta1, a.beta2, b.beta2, a.eps, b.eps, a.momentum,
                      b.momentum);
        cg_optim_free(r);
        cg_optim_free(o);
        release_params(ps);
    }
}
END_TEST

START_TEST(state_sgd_plain)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_sgd_config(0.1, 0, false);
    cg_optim *o = make_optim(&cfg, ps);
    do_step(o, ps, 0, 0.1);
    cg_clear_error();
    ck_assert_ptr_null(cg_optim_state(o, 0, "momentum_buffer"));
    assert_error_has("no buffers");
    ck_assert_ptr_null(cg_optim_state(o, 9, "exp_avg"));
    assert_error_has("no parameter 9");
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, NULL));
    ck_assert(cg_st_writer_save(w, in_dir("s.safetensors")));
    cg_st_writer_free(w);
    cg_st_file *f = cg_st_open(in_dir("s.safetensors"));
    ck_assert_int_eq(cg_st_count(f), OPT_NPARAMS);
    ck_assert_str_eq(cg_st_metadata(f, "optim.type"), "sgd");
    ck_assert_str_eq(cg_st_metadata(f, "optim.step"), "1");
    cg_optim *o2 = make_optim(&cfg, ps);
    ck_assert(cg_optim_load(o2, f, NULL));
    ck_assert_int_eq(cg_optim_param_steps(o2, 0), 1);
    ck_assert_int_eq(cg_optim_param_steps(o2, 3), 0);
    cg_st_close(f);
    cg_optim_free(o);
    cg_optim_free(o2);
    release_params(ps);
}
END_TEST

START_TEST(sharded_adamw) { sharded_case(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW); }
END_TEST

/* each new buffer sharded and gathered: the unsharded optimizer's bits */
START_TEST(sharded_more) { sharded_case(more_config(_i), more_lrs[_i]); }
END_TEST

START_TEST(sharded_adam_sgd)
{
    sharded_case(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM);
    sharded_case(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD);
}
END_TEST

/* The shards' sums of squares add up to the global one; clipping each
 * shard by the global norm gives its elements the unsharded clip's values;
 * the NaN check sees the owned elements only; bad ranges are refused; whole
 * ranges make a plain optimizer. */
/* Adam's moments stored BF16 or F16 (a checkpoint written by a tool that
 * keeps state in half precision) load widened to float32, as PyTorch's
 * load_state_dict casts state to its parameter's dtype: whole, and as a
 * shard's run of them; an integer moment is still refused. */
START_TEST(load_half_precision_moments)
{
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    char path[4096], half[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(half, sizeof half, "%s", in_dir("half.safetensors"));
    write_state(path, cfg);
    const cg_dtype dts[] = {CG_BF16, CG_F16, CG_I32};
    for (int d = 0; d < 3; d++) {
        /* the copy, its moments in dts[d]; want: them widened back */
        cg_st_file *f = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(f && w);
        for (int i = 0; i < cg_st_count(f); i++) {
            const char *n = cg_st_name(f, i);
            cg_tensor *t = cg_st_get(f, n);
            cg_tensor *h = strstr(n, ".exp_avg") ? cg_to(t, dts[d]) : cg_retain(t);
            ck_assert(h && cg_st_add(w, n, h));
            cg_release_all(2, t, h);
        }
        copy_metadata(f, w, NULL, NULL);
        cg_st_close(f);
        ck_assert(cg_st_writer_save(w, half));
        cg_st_writer_free(w);
        f = cg_st_open(half);
        ck_assert_ptr_nonnull(f);
        cg_tensor *ps[OPT_NPARAMS];
        make_params(ps);
        cg_optim *o = make_optim(&cfg, ps);
        cg_clear_error();
        const bool ok = cg_optim_load(o, f, "opt");
        if (dts[d] == CG_I32) {
            ck_assert(!ok);
            assert_error_has("'opt.w.exp_avg' is I32 [3, 4], but parameter 'w' is F32 [3, 4]");
            ck_assert_int_eq(cg_optim_steps(o), 0);
        } else {
            ck_assert_msg(ok, "%s", cg_last_error());
            for (int j = 0; j < OPT_NPARAMS; j++)
                for (int s = 0; s < 2; s++) {
                    char key[64];
                    snprintf(key, sizeof key, "opt.%s.%s", OPT_NAMES[j],
                             s ? "exp_avg_sq" : "exp_avg");
                    cg_tensor *stored = cg_st_get(f, key), *wide = cg_to(stored, CG_F32);
                    cg_tensor *got = cg_optim_state(o, j, s ? "exp_avg_sq" : "exp_avg");
                    ck_assert_int_eq(got->dtype, CG_F32);
                    ck_assert_int_eq(cg_numel(got), cg_numel(wide));
                    ck_assert_msg(memcmp(cg_data(got), cg_data(wide),
                                         (size_t)cg_numel(got) * sizeof(float)) == 0,
                                  "%s: not the stored values widened", key);
                    cg_release_all(2, stored, wide);
                }
            /* each shard reads its run of the half-precision moments */
            for (int k = 0; k < NSHARD; k++) {
                cg_tensor *q[OPT_NPARAMS];
                make_params(q);
                cg_optim *shard = make_shard(&cfg, q, k), *split = make_shard(&cfg, q, k);
                ck_assert_msg(cg_optim_load(shard, f, "opt"), "shard %d: %s", k, cg_last_error());
                ck_assert(cg_optim_copy_state(split, o));
                assert_same_state(shard, split, cfg);
                cg_optim_free(shard);
                cg_optim_free(split);
                release_params(q);
            }
        }
        cg_optim_free(o);
        release_params(ps);
        cg_st_close(f);
    }
}
END_TEST

START_TEST(sharded_clip_and_checks)
{
    cg_optim_config cfg = cg_adamw_default(1e-3);
    cg_tensor *a[OPT_NPARAMS], *s[NSHARD][OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a), *os[NSHARD];
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(a[j], OPT_G[0] + offset_of(j));
    double sq = 0;
    for (int k = 0; k < NSHARD; k++) {
        make_params(s[k]);
        os[k] = make_shard(&cfg, s[k], k);
        for (int j = 0; j < OPT_NPARAMS; j++)
            set_grad(s[k][j], OPT_G[0] + offset_of(j));
        sq += cg_optim_grad_sqsum(os[k]);
    }
    double ss = cg_optim_grad_sqsum(oa), total = sqrt(ss);
    ck_assert(fabs(sq - ss) <= 1e-12 * ss && ss > 0);
    ck_assert(cg_optim_clip_grad_norm(oa, 0.5 * total) == total);
    for (int k = 0; k < NSHARD; k++) {
        ck_assert(cg_optim_clip_grads_by(os[k], total, 0.5 * total));
        for (int j = 0; j < OPT_NPARAMS; j++) {
            cg_optim_range r = shard_of(k, j);
            for (int64_t e = r.lo; e < r.hi; e++)
                ck_assert(cg_data(s[k][j]->grad)[e] == cg_data(a[j]->grad)[e]);
            for (int64_t e = 0; e < cg_numel(a[j]); e++) /* the others' elements: untouched */
                ck_assert((e >= r.lo && e < r.hi) ||
                          cg_data(s[k][j]->grad)[e] == OPT_G[0][offset_of(j) + e]);
        }
    }
    ck_assert(!cg_optim_clip_grads_by(os[0], total, -1));
    /* a non-finite total leaves the gradients unscaled (an inf one made the
     * factor 0 and would wipe them) */
    float before[12];
    ck_assert(cg_copy_to(s[0][0]->grad, before));
    ck_assert(cg_optim_clip_grads_by(os[0], INFINITY, 1.0));
    ck_assert(cg_optim_clip_grads_by(os[0], NAN, 1.0));
    ck_assert(memcmp(cg_data(s[0][0]->grad), before, sizeof before) == 0);
    /* a shard's own cg_optim_clip_grad_norm: the norm of its elements, and
     * those clipped by it as cg_optim_clip_grads_by clips them */
    {
        cg_tensor *q[OPT_NPARAMS], *r[OPT_NPARAMS];
        make_params(q);
        make_params(r);
        cg_optim *oq = make_shard(&cfg, q, 2), *ob = make_shard(&cfg, r, 2);
        for (int j = 0; j < OPT_NPARAMS; j++) {
            set_grad(q[j], OPT_G[0] + offset_of(j));
            set_grad(r[j], OPT_G[0] + offset_of(j));
        }
        const double own = sqrt(cg_optim_grad_sqsum(oq));
        ck_assert(own > 0 && own < total);
        ck_assert(cg_optim_clip_grad_norm(oq, 0.5 * own) == own);
        ck_assert(cg_optim_clip_grads_by(ob, own, 0.5 * own));
        for (int j = 0; j < OPT_NPARAMS; j++)
            ck_assert(memcmp(cg_data(q[j]->grad), cg_data(r[j]->grad),
                             (size_t)cg_numel(q[j]) * sizeof(float)) == 0);
        ck_assert(cg_data(q[0]->grad)[8] != OPT_G[0][8]); /* clipped */
        cg_optim_free(oq);
        cg_optim_free(ob);
        release_params(q);
        release_params(r);
    }

    /* element 5 of "w" is shard 1's */
    cg_data(s[0][0]->grad)[5] = NAN;
    ck_assert(cg_optim_grads_finite(os[0], NULL));
    cg_data(s[2][0]->grad)[0] = NAN; /* before shard 2's run [8, 12) */
    ck_assert_msg(cg_optim_grads_finite(os[2], NULL), "%s", cg_last_error());
    cg_data(s[1][0]->grad)[5] = INFINITY;
    int bad = 0;
    ck_assert(!cg_optim_grads_finite(os[1], &bad));
    ck_assert_int_eq(bad, 0);
    assert_error_has("'w' has inf at element 5");

    cg_optim_param spec = {"w", a[0], 0};
    CG_ASSERT_FAILS(cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){3, 13}),
                    "[3, 13) is not inside it");
    CG_ASSERT_FAILS(cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){4, 3}), "not inside");
    cg_optim *whole = cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){0, 12});
    ck_assert(whole && !cg_optim_is_sharded(whole));
    ck_assert_int_eq(cg_optim_state(whole, 0, "exp_avg")->ndim, 2);
    int64_t lo, hi;
    ck_assert(cg_optim_shard_range(os[2], 0, &lo, &hi) && lo == 8 && hi == 12);
    ck_assert(!cg_optim_shard_range(os[2], 9, &lo, &hi));
    ck_assert_int_eq(cg_optim_state(os[2], 0, "exp_avg")->ndim, 1);
    /* copy_state needs the same parameters */
    CG_ASSERT_FAILS(cg_optim_copy_state(whole, oa) ? (void *)1 : NULL, "parameters");
    /* and their shapes, not only their sizes: a [4, 3] 'w' is not the [3, 4] one */
    cg_tensor *wt = cg_zeros(CG_SHAPE(4, 3));
    cg_requires_grad(wt, true);
    cg_optim *turned = cg_optim_new(&cfg, 1, &(cg_optim_param){"w", wt, 0});
    CG_ASSERT_FAILS(cg_optim_copy_state(turned, whole) ? (void *)1 : NULL, "[4, 3]");
    cg_optim_free(turned);
    cg_release(wt);
    cg_optim_free(whole);
    for (int k = 0; k < NSHARD; k++) {
        cg_optim_free(os[k]);
        release_params(s[k]);
    }
    cg_optim_free(oa);
    release_params(a);
}
END_TEST

/* Gradients in bfloat16 and float16 (a low-precision leaf's .grad, as
 * autograd makes it): the norm is their values' (widened exactly to
 * float32, summed in double as float32 ones), clipping scales them in
 * float32 and rounds into their dtype, the NaN check finds theirs; a
 * gradient of no float dtype, and one not of its parameter's float32 in an
 * optimizer (which updates float32 only), are refused in one line. */
START_TEST(clip_low_precision_grads)
{
    const float gv[4] = {3.0f, -4.0f, 1.5f, 0.25f}; /* exact in both */
    const double norm = sqrt(9.0 + 16.0 + 2.25 + 0.0625);
    for (int d = 0; d < 2; d++) {
        const cg_dtype dt = d ? CG_F16 : CG_BF16;
        cg_tensor *f = cg_from_data(CG_SHAPE(2, 2), gv);
        cg_tensor *p = cg_requires_grad(cg_to(f, dt), true);
        cg_tensor *y = cg_mul(p, f), *l = cg_sum_all(y); /* dl/dp = f */
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_int_eq(p->grad->dtype, dt);
        ck_assert(cg_grad_norm(1, &p) == norm);
        ck_assert_int_eq(cg_first_nonfinite_grad(1, &p, NULL), -1);
        ck_assert(cg_clip_grad_norm(1, &p, 1.0) == norm);
        ck_assert_int_eq(p->grad->dtype, dt);
        cg_tensor *g32 = cg_to(p->grad, CG_F32);
        const float coef = (1.0f / ((float)norm + 1e-6f)) * 1.0f;
        for (int i = 0; i < 4; i++) {
            cg_tensor *one = cg_from_data(CG_SHAPE(1), &(float){gv[i] * coef});
            cg_tensor *r = cg_to(one, dt), *w = cg_to(r, CG_F32); /* rounded to dt */
            ck_assert_msg(cg_data(g32)[i] == cg_data(w)[0], "%d: %g %g", i, (double)cg_data(g32)[i],
                          (double)cg_data(w)[0]);
            cg_release_all(3, one, r, w);
        }
        /* a strided low-precision gradient: its values in its order */
        cg_tensor *t = cg_view_transpose(p->grad, 0, 1);
        cg_tensor *keep = p->grad;
        p->grad = t;
        ck_assert(fabs(cg_grad_norm(1, &p) - 1.0) < 1e-2);
        p->grad = keep;
        cg_release(t);
        cg_tensor *nan = cg_from_data(CG_SHAPE(2, 2), (const float[]){1, 2, NAN, 4});
        ck_assert(cg_copy_(p->grad, nan));
        int64_t el = -1;
        ck_assert_int_eq(cg_first_nonfinite_grad(1, &p, &el), 0);
        ck_assert_int_eq(el, 2);
        ck_assert(isnan(cg_clip_grad_norm(1, &p, 1.0)));
        cg_release_all(5, f, p, y, l, g32);
        cg_release(nan);
    }
    /* a gradient of no float dtype */
    cg_tensor *q = cg_requires_grad(cg_zeros(CG_SHAPE(3)), true);
    q->grad = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    CG_ASSERT_FAILS(cg_grad_norm(1, &q) < 0 ? NULL : (void *)1,
                    "grad_norm: gradient of parameter 0 is int64, expected a float dtype");
    CG_ASSERT_FAILS(cg_clip_grad_norm(1, &q, 1.0) < 0 ? NULL : (void *)1,
                    "clip_grad_norm: gradient of parameter 0 is int64");
    ck_assert_int_eq(cg_first_nonfinite_grad(1, &q, NULL), -1);
    /* an optimizer's float32 parameter given a bfloat16 gradient */
    cg_release(q->grad);
    cg_tensor *z = cg_zeros(CG_SHAPE(3));
    q->grad = cg_to(z, CG_BF16);
    cg_release(z);
    cg_optim_config cfg = cg_adamw_default(1e-3);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"q", q, 0});
    cg_optim *os =
        cg_optim_new_sharded(&cfg, 1, &(cg_optim_param){"q", q, 0}, &(cg_optim_range){1, 3});
    ck_assert(o && os && cg_optim_is_sharded(os));
    const char *want = "gradient of 'q' is bfloat16, expected float32 (its parameter's dtype)";
    CG_ASSERT_FAILS(cg_optim_grad_sqsum(os) < 0 ? NULL : (void *)1, want);
    CG_ASSERT_FAILS(cg_optim_clip_grads_by(os, 10.0, 1.0) ? (void *)1 : NULL, want);
    CG_ASSERT_FAILS(cg_optim_grads_finite(os, NULL) ? (void *)1 : NULL, want);
    CG_ASSERT_FAILS(cg_optim_step(o) ? (void *)1 : NULL, want);
    cg_optim_free(o);
    cg_optim_free(os);
    cg_release(q);
}
END_TEST

/* cg_optim_copy_state between whole optimizers: the configuration, the
 * step counts and the buffers come across; it refuses another type, the
 * other use of momentum, and a parameter of another name even with the
 * same shape, and a refusal changes nothing. */
START_TEST(copy_state_whole)
{
    cg_tensor *w = cg_zeros(CG_SHAPE(3, 4)), *v = cg_zeros(CG_SHAPE(3, 4));
    cg_requires_grad(w, true);
    cg_requires_grad(v, true);
    cg_optim_config mom = cg_sgd_config(0.1, 0.9, false), plain = cg_sgd_config(0.5, 0, false);
    cg_optim_config adam = cg_adam_config(0.1, 0.9, 0.99, 1e-8);
    cg_optim *a = cg_optim_new(&mom, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *b = cg_optim_new(&mom, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *p = cg_optim_new(&plain, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *n = cg_optim_new(&mom, 1, &(cg_optim_param){"v", v, 0});
    cg_optim *d = cg_optim_new(&adam, 1, &(cg_optim_param){"w", w, 0});
    ck_assert(a && b && p && n && d);
    for (int step = 0; step < 2; step++) {
        cg_release(w->grad);
        w->grad = cg_full(CG_SHAPE(3, 4), 1.0f + (float)step);
        ck_assert(cg_optim_step(a));
    }
    cg_optim_set_lr(b, 0.25);
    ck_assert_msg(cg_optim_copy_state(b, a), "%s", cg_last_error());
    ck_assert(cg_optim_lr(b) == 0.1 && cg_optim_steps(b) == 2 && cg_optim_param_steps(b, 0) == 2);
    const cg_tensor *ma = cg_optim_state(a, 0, "momentum_buffer");
    const cg_tensor *mb = cg_optim_state(b, 0, "momentum_buffer");
    ck_assert(ma && mb && memcmp(cg_data((cg_tensor *)ma), cg_data((cg_tensor *)mb), 12 * 4) == 0);
    CG_ASSERT_FAILS(cg_optim_copy_state(p, a) ? (void *)1 : NULL,
                    "sgd optimizer of 1 parameters into sgd of 1 (the type, momentum use");
    CG_ASSERT_FAILS(cg_optim_copy_state(a, p) ? (void *)1 : NULL, "momentum use");
    CG_ASSERT_FAILS(cg_optim_copy_state(d, a) ? (void *)1 : NULL, "into adam of 1");
    CG_ASSERT_FAILS(cg_optim_copy_state(n, a) ? (void *)1 : NULL,
                    "parameter 0 is 'w' [3, 4] in src, 'v' [3, 4] in dst");
    ck_assert(cg_optim_lr(p) == 0.5 && cg_optim_steps(p) == 0 && cg_optim_steps(n) == 0);
    cg_optim *all[] = {a, b, p, n, d};
    for (int i = 0; i < 5; i++)
        cg_optim_free(all[i]);
    cg_release_all(2, w, v);
}
END_TEST

/* An SGD optimizer of one parameter "w" saved under "opt", with extra
 * tensors: another optimizer's state under "opt2" (its own prefix, not
 * this one's), and a tensor named stray (NULL: none). Loaded back into an
 * optimizer of cfg: the result, the error in the message. */
static bool load_with_extra(cg_optim_config cfg, const char *stray)
{
    cg_tensor *w = cg_zeros(CG_SHAPE(3, 4));
    cg_requires_grad(w, true);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"w", w, 0});
    cg_optim_config other = cg_adam_config(0.1, 0.9, 0.99, 1e-8);
    cg_optim *o2 = cg_optim_new(&other, 1, &(cg_optim_param){"u", w, 0});
    cg_st_writer *wr = cg_st_writer_new();
    ck_assert(o && o2 && wr && cg_optim_save(o, wr, "opt") && cg_optim_save(o2, wr, "opt2"));
    cg_tensor *z = cg_zeros(CG_SHAPE(3, 4));
    ck_assert(!stray || cg_st_add_f32(wr, stray, z));
    const char *path = in_dir("extra.safetensors");
    ck_assert_msg(cg_st_writer_save(wr, path), "%s", cg_last_error());
    cg_st_writer_free(wr);
    cg_st_file *f = cg_st_open(path);
    ck_assert(f);
    bool ok = cg_optim_load(o, f, "opt");
    ck_assert(!ok || cg_optim_load(o2, f, "opt2"));
    cg_st_close(f);
    cg_optim_free(o);
    cg_optim_free(o2);
    cg_release_all(2, w, z);
    return ok;
}

/* The state a load takes: another prefix's tensors are not strays; a
 * moment of another optimizer's kind is, per kind (SGD with momentum has
 * no exp_avg, plain SGD no momentum_buffer). */
START_TEST(load_strays_by_kind)
{
    cg_optim_config mom = cg_sgd_config(0.1, 0.9, false), plain = cg_sgd_config(0.1, 0, false);
    ck_assert_msg(load_with_extra(mom, NULL), "%s", cg_last_error());
    ck_assert_msg(load_with_extra(plain, NULL), "%s", cg_last_error());
    CG_ASSERT_FAILS(load_with_extra(mom, "opt.w.exp_avg") ? (void *)1 : NULL,
                    "'opt.w.exp_avg' is not the sgd state of any parameter");
    CG_ASSERT_FAILS(load_with_extra(plain, "opt.w.momentum_buffer") ? (void *)1 : NULL,
                    "'opt.w.momentum_buffer' is not the sgd state of any parameter");
    CG_ASSERT_FAILS(load_with_extra(plain, "opt.w.exp_avg_sq") ? (void *)1 : NULL,
                    "'opt.w.exp_avg_sq' is not the sgd state");
}
END_TEST

static Suite *optim_state_suite(void)
{
    Suite *s = suite_create("optim_state");
    TCase *tc = tcase_create("state");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, resume_sgd);
    tcase_add_test(tc, resume_adam);
    tcase_add_test(tc, resume_adamw);
    tcase_add_loop_test(tc, resume_more, 0, N_MORE);
    tcase_add_loop_test(tc, sharded_more, 0, N_MORE);
    tcase_add_test(tc, load_more_metadata);
    tcase_add_test(tc, load_errors);
    tcase_add_test(tc, state_locale_independent);
    tcase_add_test(tc, load_damaged_values);
    tcase_add_test(tc, load_damaged_steps_and_metadata);
    tcase_add_test(tc, state_sgd_plain);
    tcase_add_test(tc, state_config_exact);
    tcase_add_test(tc, sharded_adamw);
    tcase_add_test(tc, sharded_adam_sgd);
    tcase_add_test(tc, sharded_clip_and_checks);
    tcase_add_test(tc, load_half_precision_moments);
    tcase_add_test(tc, copy_state_whole);
    tcase_add_test(tc, load_strays_by_kind);
    tcase_add_test(tc, clip_low_precision_grads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = optim_state_suite();
    return cg_test_run(&s, 1);
}
