// Out of memory inside SentencePiece's trainer (models/text/spm.cc): its
// worker threads (the sentences' normalization) throw std::bad_alloc where
// no catch of cg_spm_train can reach, which ended the process with SIGABRT
// ("terminate called after throwing an instance of 'std::bad_alloc'"). Now
// one line and exit 1. This program replaces the global operator new: while
// armed, every allocation through it outside the main thread throws. The
// training runs in a forked child, whose exit status and stderr are checked.
// Also: an allocation failing while the trainer's options are parsed.
#include <check.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "core/error.h"
#include "models/text/spm.h"

static std::atomic<bool> g_armed(false);
static pthread_t g_main;
static std::atomic<size_t> g_fail_size(0); /* non-zero: new of this size fails */

void *operator new(std::size_t n)
{
    if (g_armed.load() && !pthread_equal(pthread_self(), g_main))
        throw std::bad_alloc();
    if (g_fail_size.load() && n == g_fail_size.load())
        throw std::bad_alloc();
    void *p = std::malloc(n ? n : 1);
    if (!p)
        throw std::bad_alloc();
    return p;
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

START_TEST(test_trainer_thread_oom_is_one_line)
{
    if (!cg_spm_available())
        return; /* a build without SentencePiece: nothing to train */
    static const char *const sents[] = {"the cat sat on the mat", "die katze sass", "a dog ran",
                                        "ein hund lief"};
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* the child: train with the worker threads' allocations failing */
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        g_main = pthread_self();
        g_armed = true;
        cg_spm *t = cg_spm_train(sents, 4, 300);
        g_armed = false;
        /* here only if the failure came back to the caller (as an error) */
        _exit(t ? 3 : 4);
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;)
        err.append(buf, (size_t)r);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(!WIFSIGNALED(status), "the child ended by signal %d; stderr: %s",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0, err.c_str());
    ck_assert_msg(WIFEXITED(status), "the child did not exit");
    /* 4: the trainer gave the error back (also right); 1: the handler's line */
    ck_assert_msg(WEXITSTATUS(status) == 1 || WEXITSTATUS(status) == 4, "exit %d; stderr: %s",
                  WEXITSTATUS(status), err.c_str());
    if (WEXITSTATUS(status) == 1) {
        ck_assert_msg(err.find("error: training the BPE tokenizer: out of memory\n") !=
                          std::string::npos,
                      "stderr: '%s'", err.c_str());
        ck_assert_msg(err.find('\n') == err.size() - 1, "more than one line: '%s'", err.c_str());
    }
}
END_TEST

/* An allocation failing while SentencePiece parses the trainer's options
 * (its stringstream asks for 57 bytes, a std::string's 32 reserved in the
 * old ABI, to read a number) read as 'cannot parse "1.0" as int.': the
 * options are the zoo's own, so that is out of memory. */
START_TEST(test_trainer_option_oom_is_out_of_memory)
{
    if (!cg_spm_available())
        return;
    static const char *const sents[] = {"the cat sat on the mat", "die katze sass"};
    g_fail_size = 57;
    cg_spm *t = cg_spm_train(sents, 2, 300);
    g_fail_size = 0;
    if (t) { /* another libstdc++: no allocation of that size on the way */
        cg_spm_free(t);
        return;
    }
    ck_assert_msg(strstr(cg_last_error(), "out of memory") &&
                      !strstr(cg_last_error(), "cannot parse"),
                  "'%s'", cg_last_error());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spm_oom");
    TCase *tc = tcase_create("trainer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_trainer_thread_oom_is_one_line);
    tcase_add_test(tc, test_trainer_option_oom_is_out_of_memory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
