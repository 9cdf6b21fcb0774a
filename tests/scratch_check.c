/* The suites' scratch directory (testutil.h, cg_test_tmpdir) against the
 * ways a test ends: each case writes files, a subdirectory and a read-only
 * directory in it, then passes, fails an assertion, waits to be killed or
 * crashes. tests/test_scratch.sh runs each case (CK_RUN_CASE) in fork mode
 * and CK_FORK=no with TMPDIR a fresh directory, which must be empty after. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testutil.h"

static void litter(void)
{
    char dir[4096];
    cg_test_mkdtemp(dir, sizeof dir, "case_");
    char path[4200];
    snprintf(path, sizeof path, "%s/m.safetensors.tmp.%ld.2", dir, (long)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("partial", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/ro", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/ro/kept", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/ro", dir);
    ck_assert_int_eq(chmod(path, 0500), 0); /* a test of a read-only directory */
    int fd = open(cg_test_path("m.cgrad-lock"), O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    printf("scratch: %s\n", cg_test_tmpdir());
    fflush(stdout);
}

START_TEST(passes) { litter(); }
END_TEST

START_TEST(fails)
{
    litter();
    ck_assert_msg(0, "failed on purpose");
}
END_TEST

START_TEST(waits)
{
    litter();
    printf("waiting %ld\n", (long)getpid()); /* in fork mode, Check's child */
    fflush(stdout);
    for (;;)
        pause(); /* the caller's signal ends it */
}
END_TEST

START_TEST(crashes)
{
    litter();
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scratch");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {{"passes", passes}, {"fails", fails}, {"waits", waits}, {"crashes", crashes}};
    for (int i = 0; i < 4; i++) { /* one TCase each: CK_RUN_CASE picks one */
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 0); /* no limit: the caller ends "waits" */
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return cg_test_run(&s, 1);
}
