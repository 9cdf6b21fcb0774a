/* Tests of the module registry's newer parts (nn/module.h): what
 * cg_module_add_param refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/testutil.h"

static void assert_ok(const void *p)
{
    ck_assert_msg(p != NULL, "unexpected failure: %s", cg_last_error());
}

/* ------------------------------------------------- add_param validation */
START_TEST(test_add_param_refusals)
{
    cg_module *m = cg_module_new("Net");
    cg_tensor *bf = cg_zeros_dtype(CG_BF16, CG_SHAPE(2, 3));
    cg_tensor *ids = cg_zeros_dtype(CG_I64, CG_SHAPE(3));
    cg_tensor *base = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *tr = cg_transpose(base, 0, 1); /* a non-contiguous view */
    cg_tensor *row = cg_select(base, 0, 1);   /* a contiguous view at an offset: taken */
    CG_ASSERT_FAILS(cg_module_add_param(m, "w", bf), "module Net: parameter 'w' is bfloat16");
    CG_ASSERT_FAILS(cg_module_add_param(m, "ids", ids), "parameter 'ids' is int64");
    CG_ASSERT_FAILS(cg_module_add_param(m, "t", tr), "parameter 't' is not contiguous");
    ck_assert(!bf->requires_grad && !tr->requires_grad && !base->requires_grad);
    ck_assert_int_eq(m->n_params, 0);
    assert_ok(cg_module_add_param(m, "row", row));
    ck_assert_int_eq(m->n_params, 1);
    /* a parameter built by a module is one the optimizer takes */
    cg_optim *opt = cg_sgd_from_module(m, 0.1);
    assert_ok(opt);
    cg_optim_free(opt);
    cg_release_all(5, bf, ids, base, tr, row);
    cg_module_free(m);
}
END_TEST

static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_add_param_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {registry_suite()};
    return cg_test_run(s, 1);
}
