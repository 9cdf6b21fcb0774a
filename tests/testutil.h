/* Shared helpers for the Check suites. */
#ifndef CG_TESTUTIL_H
#define CG_TESTUTIL_H

#include <check.h>
#include <limits.h> /* PATH_MAX, for cg_test_path and cg_test_mkdtemp */
#include <stdbool.h>
#include <stdint.h>
#include <string.h> /* strchr, for CG_ASSERT_REFUSED_LINE */

#include "core/tensor.h"
#include "nn/module.h"

/* A passing assertion records nothing. Check's own ck_assert_msg (under
 * ck_assert and every typed ck_assert_*) calls _mark_point when the
 * assertion holds, a write() to Check's pipe each time: suites that check
 * every element of a product made millions of them (test_elementwise 3.3
 * million), most of their time. A failure is reported as Check reports it;
 * a crash in fork mode is placed at the last mark_point() rather than at
 * the last passing assertion (the suites run with CK_FORK=no, where a crash
 * ends the process with the sanitizer's or the debugger's stack). */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
    ((expr)                      \
         ? (void)0               \
         : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

/* Every test case of the suites is made by cg_test_tcase (tcase_create is
 * it): a checked fixture around each test notes the process's settings a
 * test may change (the thread count, this thread's matmul precision,
 * whether gradients are recorded, the weight cache's limit, the working
 * directory, the umask, LC_NUMERIC) and fails the test that leaves one
 * changed, naming it, then puts it back. It also clears the error slot
 * before each test, as a forked test finds it. The suites run with CK_FORK=no,
 * one process for all tests, where such a leak changes what every later
 * test computes, and each test alone (fork mode, CK_RUN_CASE) would hide
 * it. Its teardown runs after the case's own (Check runs teardowns last
 * added first). */
TCase *cg_test_tcase(const char *name);
#ifndef CG_TESTUTIL_IMPL
#define tcase_create(name) cg_test_tcase(name)
#endif

/* Run the given suites with one SRunner; returns the process exit code
 * (non-zero if any check failed). A variant run whose switch changes
 * nothing on this CPU (CG_BF16_EMULATE=1 without AVX512_BF16,
 * CG_AMX_EMULATE=1 where AMX's emulation is not in effect) runs nothing
 * and returns 77, meson's "skipped": it would repeat the plain run. */
int cg_test_run(Suite **suites, int n);
/* Whether the environment variable `name` (one of core/parse.h's table) is
 * given and true, as the library reads it. */
bool cg_test_env_on(const char *name);

/* The suite's scratch directory, $TMPDIR (else /tmp)/cg_PROGRAM.XXXXXX:
 * every file a test writes goes in it (never a fixed name in /tmp, never
 * the working directory). cg_test_run makes it before the first test (so
 * that Check's forked children share it) and removes it, with all it
 * holds, when the tests end, passed or failed: a failed assertion in fork
 * mode leaves the child by _exit, skipping the checked teardown that
 * cleans a test's own files. A process that ends otherwise (meson's
 * timeout, ^C, a crash, a sanitizer's report) has it removed by a watcher
 * process made with it. A program without cg_test_run gets it on first
 * use. */
const char *cg_test_tmpdir(void);
/* "<cg_test_tmpdir()>/name" (one of 8 rotating buffers). */
const char *cg_test_path(const char *name);
/* A fresh directory "<cg_test_tmpdir()>/prefixXXXXXX" made (mkdtemp) into
 * buf (n bytes), or a file made (mkstemp, its descriptor returned). */
void cg_test_mkdtemp(char *buf, size_t n, const char *prefix);
int cg_test_mkstemp(char *buf, size_t n, const char *prefix);
/* Remove path and everything under it (modes restored on the way; no
 * error if it is not there); async-signal-safe. */
void cg_test_rm_tree(const char *path);
/* Assert that files a and b hold the same bytes (a failure names both). */
void cg_test_assert_same_file(const char *a, const char *b);

/* The largest difference between the parameters of a and b (same names and
 * shapes), relative to the largest magnitude of each of b's tensors;
 * attention key biases are left out (their true gradient is 0: the round-off
 * that reaches them is not comparable). The worst tensor's name goes to
 * worst (may be NULL). */
double cg_test_max_rel_diff(cg_module *a, cg_module *b, char *worst, size_t nw);
/* The process's resident set in kB (/proc/self/statm), 0 if unreadable. */
long cg_test_rss_kb(void);
/* Files this process writes stop at `bytes` (RLIMIT_FSIZE) and a write past
 * that fails with EFBIG (SIGXFSZ ignored, which would end the process): a
 * disk that fills mid-write. cg_test_fsize_restore puts the limit and the
 * signal's handler back; the two pair, one limit at a time. */
void cg_test_fsize_limit(long bytes);
void cg_test_fsize_restore(void);
/* Every parameter of m zero but its norms' weights (ln*.weight), 1, each
 * marked modified: a model whose outputs a test designs by then writing a
 * few entries (and marking those tensors modified). */
void cg_test_blank_params(cg_module *m);

/* Max |a[i] - b[i]| / (atol + rtol*|b[i]|) <= 1 over n elements. On failure
 * the message names the first offending index and both values. */
#define CG_ASSERT_CLOSE(a, b, n, atol, rtol) \
    cg_assert_close_impl((a), (b), (n), (atol), (rtol), __FILE__, __LINE__)
void cg_assert_close_impl(const float *a, const float *b, int64_t n, double atol, double rtol,
                          const char *file, int line);
/* Compare a tensor (any strides) against an array of its numel. */
#define CG_ASSERT_TENSOR(t, expect, atol, rtol) \
    cg_assert_tensor_impl((t), (expect), (atol), (rtol), __FILE__, __LINE__)
void cg_assert_tensor_impl(const cg_tensor *t, const float *expect, double atol, double rtol,
                           const char *file, int line);
/* Bad input refused, the library's promise: from a clean error slot, fails
 * (an expression true when the call failed: (f(..) == NULL), !g(..), ...)
 * holds, and the message is not empty and contains needle ("" for any). */
#define CG_ASSERT_REFUSED(fails, needle)                                       \
    do {                                                                       \
        cg_clear_error();                                                      \
        bool failed_ = (fails);                                                \
        cg_assert_refused_impl(failed_, (needle), #fails, __FILE__, __LINE__); \
    } while (0)
void cg_assert_refused_impl(bool failed, const char *needle, const char *expr, const char *file,
                            int line);
/* CG_ASSERT_REFUSED for a call that returns NULL when it refuses, its
 * message one line */
#define CG_ASSERT_REFUSED_LINE(expr, needle)                                             \
    do {                                                                                 \
        CG_ASSERT_REFUSED((expr) == NULL, needle);                                       \
        ck_assert_msg(!strchr(cg_last_error(), '\n'), "two lines: %s", cg_last_error()); \
    } while (0)
/* Assert that the last op failed (got NULL) with a message containing needle. */
#define CG_ASSERT_FAILS(expr, needle) \
    cg_assert_fails_impl((void *)(expr), (needle), #expr, __FILE__, __LINE__)
void cg_assert_fails_impl(void *result, const char *needle, const char *expr, const char *file,
                          int line);
/* An int64 tensor of n ids (1-d) / of the given shape, copied from ids
 * (NULL or no elements: zeros), held by the runner until cg_test_run
 * returns: tests pass them to functions taking ids without releasing. */
cg_tensor *cg_test_ids(int64_t n, const int64_t *ids);
cg_tensor *cg_test_ids_nd(int ndim, const int64_t *shape, const int64_t *ids);
/* A bool mask of the given shape from bytes (nonzero = true; NULL: all
 * false), held the same way. */
cg_tensor *cg_test_mask(int ndim, const int64_t *shape, const uint8_t *bytes);
/* A float32 0-d tensor of v, held the same way. */
cg_tensor *cg_test_scalar(float v);
/* A contiguous copy of t's values (malloc'd; caller frees). */
float *cg_test_values(const cg_tensor *t);
/* The same as doubles (malloc'd; caller frees). */
double *cg_test_doubles(const cg_tensor *t);
/* An op's bfloat16 input handled as the convolution's: yb (of the leaf
 * xb, bfloat16) is float32 with the bits of yf (of xf, xb's float32
 * value, a leaf); after the backwards of both (g the upstream gradient,
 * NULL: of their sums), xb's gradient is bfloat16, xf's rounded. */
void cg_test_bf16_input_same(cg_tensor *yb, cg_tensor *yf, const cg_tensor *xb, const cg_tensor *xf,
                             const cg_tensor *g);
/* run(nt, got) fills got[0..k) with malloc'd values (n[j] floats each)
 * computed at nt threads; run at 1 and 2 threads, each result must have
 * the same bits (freed here). */
void cg_test_same_bits_1_2_threads(void (*run)(int nt, float **got), int k, const int64_t *n);
/* The loss of a thread test over n outputs: the sum over i of (i + 1)
 * sum(t[i]^2); the t[i] released. */
cg_tensor *cg_test_weighted_squares(int n, cg_tensor **t);
/* A thread test's results: the loss's backward run, got[0] its value and
 * got[1 + j] the gradient of in[j] for j < n (malloc'd); the threads back
 * to the default. */
void cg_test_backward_values(cg_tensor *loss, int n, cg_tensor *const *in, float **got);
/* yb (bfloat16) is yf (float32) rounded once, bit for bit (what: the
 * case, for messages). */
void cg_test_assert_bf16_rounded(const cg_tensor *yb, const cg_tensor *yf, const char *what);
/* Non-contiguous test input: a tensor of the given shape whose storage is
 * laid out transposed (last two dims swapped) or with a step-2 slice;
 * values from rng ~ N(0,1). kind: 0 contiguous, 1 transposed, 2 strided
 * (every second element of a larger buffer), 3 broadcast (stride 0 on dim 0,
 * shape[0] copies of one row). */
cg_tensor *cg_test_randn_layout(cg_rng *rng, int ndim, const int64_t *shape, int kind);

/* What a node keeps (issue 32): of an input its backward does not read
 * (CG_OP_TABLE's reads, autograd/autograd.h), a node keeps a header
 * without storage unless the input is a leaf needing a gradient. Runs f
 * (a cg_gradcheck_fn) on in with a fixed upstream gradient, then again
 * with every input that requires grad passed as a non-leaf view of itself
 * (an identity permute), and once per such input k with only k passed so
 * and the others detached (constants, which a node also lets go when
 * unread); the views are released before the backwards, two through the
 * retained graph (a fused op's second one reads its inputs). The gradients
 * must match the leaves' run (what: the case, for messages). A backward
 * that reads an input its op declares unread faults here (no storage). */
void cg_test_check_unread(cg_tensor *(*f)(void *, cg_tensor *const *), void *ctx, int n,
                          cg_tensor *const *in, const char *what);

/* A backward's acc refused (core's cg_check_grad_acc) for an input of
 * shape [rows, cols]: call(ctx, acc, dx) with acc of another dtype, of
 * another shape and a transposed view (dx asked for), then a good one with
 * dx not asked for, must each fail with that check's message naming op,
 * setting none of its outputs (call's to check) and leaving acc as it was
 * (zeros). */
void cg_test_acc_refused(int64_t rows, int64_t cols, const char *op,
                         bool (*call)(void *ctx, cg_tensor *acc, bool dx), void *ctx);

/* Make the process's locale (setlocale LC_ALL) one whose decimal separator
 * is a comma (de_DE.UTF-8, fr_FR.UTF-8, ...), as a host program that called
 * setlocale(LC_ALL, "") in such a country has it; true if one is installed
 * (scripts/setup.sh generates de_DE.UTF-8), false (a note on stderr, the
 * locale left as "C") if none is. cg_test_c_locale() sets "C" back. */
bool cg_test_comma_locale(void);
void cg_test_c_locale(void);

#endif
