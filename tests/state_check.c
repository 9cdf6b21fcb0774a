/* The state guard of testutil.h (cg_test_tcase), checked: a test that
 * leaves one of the process's settings changed fails, naming it, and the
 * next test finds the setting as it was. Run by meson as 'state_guard',
 * with CK_FORK=no as the suites (and in fork mode too: the guard works in
 * the child). Exit 0 when the guard did all that. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "testutil.h"

static int g_threads;
static size_t g_limit;
static char g_cwd[PATH_MAX];

START_TEST(leak_threads) { cg_set_num_threads(g_threads + 1); }
END_TEST
START_TEST(leak_precision) { cg_set_matmul_precision(CG_PRECISION_BF16); }
END_TEST
START_TEST(leak_no_grad) { cg_no_grad_begin(); }
END_TEST
START_TEST(leak_cache_limit) { cg_weight_cache_limit(12345); }
END_TEST
START_TEST(leak_cwd) { ck_assert_int_eq(chdir(cg_test_tmpdir()), 0); }
END_TEST
START_TEST(leak_umask) { umask(077); }
END_TEST
START_TEST(leak_locale)
{
    if (!setlocale(LC_NUMERIC, "C.UTF-8"))
        setlocale(LC_NUMERIC, "POSIX");
}
END_TEST
/* Passes: leaving a message in the error slot is what a test of a refusal
 * does. */
START_TEST(leave_error) { cg_set_error("left by leave_error"); }
END_TEST
/* Runs after the leaks: everything as it was, and the error slot clear. */
START_TEST(all_restored)
{
    ck_assert_int_eq(cg_get_num_threads(), g_threads);
    ck_assert(cg_get_matmul_precision() == CG_PRECISION_FP32);
    ck_assert(cg_grad_enabled());
    ck_assert_uint_eq(cg_weight_cache_stats().limit, g_limit);
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_str_eq(cwd, g_cwd);
    mode_t m = umask(022);
    ck_assert_uint_eq(m, 022);
    ck_assert_str_eq(setlocale(LC_NUMERIC, NULL), "C");
    ck_assert_msg(!cg_has_error(), "the error slot holds '%s'", cg_last_error());
    ck_assert_str_eq(cg_last_error(), "");
}
END_TEST

int main(void)
{
    static const struct {
        const char *test, *named;
    } expect[] = {{"leak_threads", "the thread count"},
                  {"leak_precision", "the matmul precision (bf16, was fp32)"},
                  {"leak_no_grad", "gradient recording (off, was on"},
                  {"leak_cache_limit", "the weight cache's limit (12345"},
                  {"leak_cwd", "the working directory (/"},
                  {"leak_umask", "the umask (077, was 022)"},
                  {"leak_locale", "LC_NUMERIC ("}};
    cg_test_tmpdir(); /* leak_cwd's directory, made (and removed at exit) here */
    g_threads = cg_get_num_threads();
    g_limit = cg_weight_cache_stats().limit;
    umask(022);
    if (!getcwd(g_cwd, sizeof g_cwd))
        return 1;
    Suite *s = suite_create("state");
    TCase *tc = tcase_create("leaks");
    tcase_add_test(tc, leak_threads);
    tcase_add_test(tc, leak_precision);
    tcase_add_test(tc, leak_no_grad);
    tcase_add_test(tc, leak_cache_limit);
    tcase_add_test(tc, leak_cwd);
    tcase_add_test(tc, leak_umask);
    tcase_add_test(tc, leak_locale);
    tcase_add_test(tc, leave_error);
    tcase_add_test(tc, all_restored);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_SILENT);
    int n = srunner_ntests_run(sr), bad = 0;
    TestResult **r = srunner_results(sr);
    size_t ne = sizeof expect / sizeof expect[0];
    if (n != (int)ne + 2) {
        fprintf(stderr, "state_check: %d tests ran, expected %zu\n", n, ne + 2);
        bad = 1;
    }
    for (int i = 0; i < n && i < (int)ne + 2; i++) {
        const char *msg = tr_msg(r[i]);
        if (i < (int)ne) {
            if (tr_rtype(r[i]) == CK_PASS || !strstr(msg, "the test left changed:") ||
                !strstr(msg, expect[i].named)) {
                fprintf(stderr, "state_check: %s: '%s', expected it to fail naming '%s'\n",
                        expect[i].test, msg, expect[i].named);
                bad = 1;
            }
        } else if (tr_rtype(r[i]) != CK_PASS) {
            fprintf(stderr, "state_check: %s: %s (line %d)\n",
                    i == (int)ne ? "leave_error" : "all_restored", msg, tr_lno(r[i]));
            bad = 1;
        }
    }
    free(r);
    srunner_free(sr);
    if (!bad)
        printf("state_check: each leak failed its test, named; the next test found all restored\n");
    return bad;
}
