#define CG_TESTUTIL_IMPL /* tcase_create is Check's own here */
#include "tests/testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/parse.h"

/* The tensors of cg_test_ids, held until cg_test_run returns. */
static cg_tensor **g_ids;
static int64_t g_nids, g_capids;

cg_tensor *cg_test_ids_nd(int ndim, const int64_t *shape, const int64_t *ids)
{
    cg_tensor *t = cg_numel_shape(ndim, shape) == 0 || !ids ? cg_zeros_dtype(CG_I64, ndim, shape)
                                                            : cg_from_i64(ndim, shape, ids);
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    if (g_nids == g_capids) {
        g_capids = g_capids ? 2 * g_capids : 64;
        g_ids = realloc(g_ids, (size_t)g_capids * sizeof *g_ids);
        ck_assert(g_ids != NULL);
    }
    g_ids[g_nids++] = cg_hold(t); /* no scope of the test releases it */
    return t;
}

cg_tensor *cg_test_ids(int64_t n, const int64_t *ids) { return cg_test_ids_nd(1, &n, ids); }

/* t held in a slot of the runner's list (t NULL: the test fails) */
static cg_tensor *held_by_runner(cg_tensor *t)
{
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    cg_tensor *ids = cg_test_ids_nd(0, NULL, NULL); /* held: gives the slot */
    cg_unhold(ids);
    cg_release(ids);
    g_ids[g_nids - 1] = cg_hold(t);
    return t;
}

cg_tensor *cg_test_mask(int ndim, const int64_t *shape, const uint8_t *bytes)
{
    return held_by_runner(bytes ? cg_from_array(CG_BOOL, ndim, shape, bytes)
                                : cg_zeros_dtype(CG_BOOL, ndim, shape));
}

cg_tensor *cg_test_scalar(float v) { return held_by_runner(cg_scalar(v)); }

/* ------------------------------------------------ the scratch directory */

static char g_scratch[PATH_MAX];
static pid_t g_scratch_owner; /* the process that made it: forked children leave it */

/* Everything in the directory dfd (depth levels at most below it), by
 * system calls only: the watcher calls it in a child forked from a process
 * that may run threads, where only async-signal-safe calls are sure to
 * work (opendir and readdir allocate). Entries are removed while the
 * directory is read, which may hide some from the reading: passes go on
 * until one removes nothing. */
static void rm_entries(int dfd, int depth)
{
    char buf[4096] __attribute__((aligned(8)));
    for (bool removed = true; removed;) {
        removed = false;
        if (lseek(dfd, 0, SEEK_SET) != 0)
            return;
        ssize_t got;
        while ((got = getdents64(dfd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < got;) {
                const struct dirent64 *e = (const struct dirent64 *)(buf + off);
                off += e->d_reclen;
                const char *nm = e->d_name;
                if (nm[0] == '.' && (nm[1] == 0 || (nm[1] == '.' && nm[2] == 0)))
                    continue;
                if (unlinkat(dfd, nm, 0) == 0) {
                    removed = true;
                    continue;
                }
                if ((errno != EISDIR && errno != EPERM) || depth <= 0)
                    continue;
                int sub = openat(dfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0)
                    continue;
                fchmod(sub, 0700); /* a test's read-only directory */
                rm_entries(sub, depth - 1);
                close(sub);
                removed |= unlinkat(dfd, nm, AT_REMOVEDIR) == 0;
            }
        }
    }
}

void cg_test_assert_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    ck_assert_msg(fa && fb, "cannot open %s", fa ? b : a);
    long at = 0;
    int ca, cb;
    do {
        ca = getc(fa);
        cb = getc(fb);
        at++;
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    ck_assert_msg(ca == cb, "%s and %s differ at byte %ld", a, b, at - 1);
}

void cg_test_rm_tree(const char *path)
{
    if (unlink(path) == 0 || (errno != EISDIR && errno != EPERM))
        return;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    fchmod(fd, 0700);
    rm_entries(fd, 32);
    close(fd);
    rmdir(path);
}

static int g_watch_fd = -1; /* the write end of the watcher's pipe */
static pid_t g_watcher;

static void scratch_remove(void)
{
    if (!g_scratch[0] || getpid() != g_scratch_owner)
        return;
    cg_test_rm_tree(g_scratch);
    g_scratch[0] = 0;
    if (g_watch_fd >= 0) { /* the watcher finds nothing left and ends */
        close(g_watch_fd);
        g_watch_fd = -1;
        waitpid(g_watcher, NULL, 0);
    }
}

/* A process that removes the directory when this one ends however it ends
 * (SIGTERM of meson's timeout, SIGKILL, a crash, a sanitizer's report):
 * it reads a pipe whose write end only this process and its forked
 * children hold. Its own session (a timeout's signal to the test's process
 * group does not reach it) and /dev/null as its standard streams (meson
 * does not wait for it). */
static void scratch_watch(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return; /* no watcher: removed at the end of a run that ends */
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return;
    }
    if (pid == 0) {
        setsid();
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 1024; fd++)
            if (fd != p[0] && fd != null)
                close(fd);
        for (int fd = 0; fd < 3 && null >= 0; fd++)
            dup2(null, fd);
        char c;
        while (read(p[0], &c, 1) < 0 && errno == EINTR)
            ;
        cg_test_rm_tree(g_scratch);
        _exit(0);
    }
    close(p[0]);
    g_watch_fd = p[1];
    g_watcher = pid;
}

static void scratch_make(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || base[0] != '/')
        base = "/tmp";
    int n = snprintf(g_scratch, sizeof g_scratch, "%s/cg_%s.XXXXXX", base,
                     program_invocation_short_name);
    if (n <= 0 || (size_t)n >= sizeof g_scratch - 64 || !mkdtemp(g_scratch)) {
        fprintf(stderr, "cannot make a scratch directory in %s: %s\n", base, strerror(errno));
        exit(1); /* no test can run */
    }
    g_scratch_owner = getpid();
    scratch_watch();
    static bool registered;
    if (!registered) {
        registered = true;
        atexit(scratch_remove);
    }
}

const char *cg_test_tmpdir(void)
{
    if (!g_scratch[0])
        scratch_make();
    return g_scratch;
}

const char *cg_test_path(const char *name)
{
    static char buf[8][PATH_MAX];
    static int k;
    char *p = buf[k++ % 8];
    int n = snprintf(p, PATH_MAX, "%s/%s", cg_test_tmpdir(), name);
    ck_assert_msg(n > 0 && n < PATH_MAX, "path too long: %s/%s", cg_test_tmpdir(), name);
    return p;
}

void cg_test_mkdtemp(char *buf, size_t n, const char *prefix)
{
    int len = snprintf(buf, n, "%s/%sXXXXXX", cg_test_tmpdir(), prefix);
    ck_assert_msg(len > 0 && (size_t)len < n, "%zu bytes are too few for %s/%sXXXXXX", n,
                  cg_test_tmpdir(), prefix);
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp %s: %s", buf, strerror(errno));
}

int cg_test_mkstemp(char *buf, size_t n, const char *prefix)
{
    int len = snprintf(buf, n, "%s/%sXXXXXX", cg_test_tmpdir(), prefix);
    ck_assert_msg(len > 0 && (size_t)len < n, "%zu bytes are too few for %s/%sXXXXXX", n,
                  cg_test_tmpdir(), prefix);
    int fd = mkstemp(buf);
    ck_assert_msg(fd >= 0, "mkstemp %s: %s", buf, strerror(errno));
    return fd;
}

/* The settings a test may change (cg_test_tcase), as the test found them.
 * The error slot is not among them: each test starts with it clear. */
static struct {
    int threads;
    cg_precision precision;
    bool grad;
    size_t cache_limit;
    char cwd[PATH_MAX];
    mode_t mask;
    char numeric[64];
} g_state;

static void state_note(void)
{
    /* a fresh slot, as a forked test finds it: a message an earlier test
       left (CK_FORK=no) must not answer this test's cg_last_error() */
    cg_clear_error();
    g_state.threads = cg_get_num_threads();
    g_state.precision = cg_get_matmul_precision();
    g_state.grad = cg_grad_enabled();
    g_state.cache_limit = cg_weight_cache_stats().limit;
    if (!getcwd(g_state.cwd, sizeof g_state.cwd))
        g_state.cwd[0] = '\0';
    g_state.mask = umask(0);
    umask(g_state.mask);
    const char *num = setlocale(LC_NUMERIC, NULL);
    snprintf(g_state.numeric, sizeof g_state.numeric, "%s", num ? num : "");
}

/* Each setting found changed is put back and named; the test fails. */
static void state_check(void)
{
    char what[512] = "";
    size_t len = 0;
#define CHANGED(...) \
    len += (size_t)snprintf(what + len, len < sizeof what ? sizeof what - len : 0, __VA_ARGS__)
    int threads = cg_get_num_threads();
    if (threads != g_state.threads) {
        CHANGED(" the thread count (%d, was %d)", threads, g_state.threads);
        cg_set_num_threads(g_state.threads);
    }
    cg_precision p = cg_get_matmul_precision();
    if (p != g_state.precision) {
        CHANGED(" the matmul precision (%s, was %s)", cg_precision_name(p),
                cg_precision_name(g_state.precision));
        cg_set_matmul_precision(g_state.precision);
    }
    bool grad = cg_grad_enabled();
    if (grad != g_state.grad) {
        CHANGED(" gradient recording (%s, was %s: a cg_no_grad_begin without its end?)",
                grad ? "on" : "off", g_state.grad ? "on" : "off");
        while (!cg_grad_enabled())
            cg_no_grad_end();
    }
    size_t limit = cg_weight_cache_stats().limit;
    if (limit != g_state.cache_limit) {
        CHANGED(" the weight cache's limit (%zu, was %zu)", limit, g_state.cache_limit);
        cg_weight_cache_limit(g_state.cache_limit);
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    if (strcmp(cwd, g_state.cwd) != 0) {
        CHANGED(" the working directory (%s, was %s)", cwd, g_state.cwd);
        if (g_state.cwd[0] && chdir(g_state.cwd) != 0)
            CHANGED(" (cannot go back: %s)", strerror(errno));
    }
    mode_t mask = umask(g_state.mask);
    if (mask != g_state.mask)
        CHANGED(" the umask (%03o, was %03o)", (unsigned)mask, (unsigned)g_state.mask);
    const char *num = setlocale(LC_NUMERIC, NULL);
    if (strcmp(num ? num : "", g_state.numeric) != 0) {
        CHANGED(" LC_NUMERIC (%s, was %s)", num ? num : "", g_state.numeric);
        setlocale(LC_NUMERIC, g_state.numeric);
    }
#undef CHANGED
    ck_assert_msg(len == 0, "the test left changed:%s", what);
}

TCase *cg_test_tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, state_note, state_check);
    return tc;
}

bool cg_test_env_on(const char *name)
{
    bool on = false;
    cg_env_flag(name, &on);
    return on;
}

/* The variant runs of a suite (tests/meson.build) whose switch changes
 * nothing on this CPU would repeat the plain run test for test: the name
 * of the switch, or NULL. CG_BF16_EMULATE=1 forces the emulated bf16
 * kernel, which a CPU without AVX512_BF16 (cg_cpu_has_avx512_bf16) runs
 * anyway; CG_AMX_EMULATE=1 emulates AMX's tiles only where the CPU has
 * AVX512_BF16 (cg_bf16_amx_emulated()). */
static const char *variant_repeats_plain_run(void)
{
    if (cg_test_env_on("CG_BF16_EMULATE") && !cg_cpu_has_avx512_bf16())
        return "CG_BF16_EMULATE=1 (the CPU has no AVX512_BF16: its bf16 is emulated anyway)";
    if (cg_test_env_on("CG_AMX_EMULATE") && !cg_bf16_amx_emulated())
        return "CG_AMX_EMULATE=1 (AMX's emulation needs AVX512_BF16, and CG_BF16_AMX not 0)";
    return NULL;
}

int cg_test_run(Suite **suites, int n)
{
    const char *same = variant_repeats_plain_run();
    if (same) { /* meson's SKIP */
        printf("skipped: %s changes nothing on this CPU; the plain run has run these tests\n",
               same);
        return 77;
    }
    cg_test_tmpdir(); /* made here: forked children share it */
    SRunner *sr = srunner_create(suites[0]);
    for (int i = 1; i < n; i++)
        srunner_add_suite(sr, suites[i]);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int64_t i = 0; i < g_nids; i++) {
        cg_unhold(g_ids[i]);
        cg_release(g_ids[i]);
    }
    free(g_ids);
    g_ids = NULL;
    g_nids = g_capids = 0;
    scratch_remove();             /* whatever a failed test left */
    if (cg_debug_reports() > 0) { /* CG_DEBUG=1 runs: no lifetime mistake anywhere */
        fprintf(stderr, "the checked mode (CG_DEBUG) reported %lu lifetime mistake(s)\n",
                cg_debug_reports());
        return 1;
    }
    return failed == 0 ? 0 : 1;
}

void cg_assert_close_impl(const float *a, const float *b, int64_t n, double atol, double rtol,
                          const char *file, int line)
{
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        bool ok =
            (isnan(x) && isnan(y)) || (isinf(x) && x == y) || fabs(x - y) <= atol + rtol * fabs(y);
        if (!ok)
            ck_assert_msg(0, "%s:%d: element %lld: got %.9g, expected %.9g (atol %g, rtol %g)",
                          file, line, (long long)i, x, y, atol, rtol);
    }
}

float *cg_test_values(const cg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    int64_t n = cg_numel(t);
    float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
    ck_assert(cg_copy_to(t, v));
    return v;
}

double *cg_test_doubles(const cg_tensor *t)
{
    const int64_t n = cg_numel(t);
    float *f = cg_test_values(t);
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    return d;
}

void cg_test_bf16_input_same(cg_tensor *yb, cg_tensor *yf, const cg_tensor *xb, const cg_tensor *xf,
                             const cg_tensor *g)
{
    ck_assert_msg(yb && yf && yb->dtype == CG_F32, "%s", cg_last_error());
    float *vb = cg_test_values(yb), *vf = cg_test_values(yf);
    ck_assert(!memcmp(vb, vf, sizeof(float) * (size_t)cg_numel(yb)));
    free(vb);
    free(vf);
    cg_tensor *sb = g ? cg_retain(yb) : cg_sum_all(yb), *sf = g ? cg_retain(yf) : cg_sum_all(yf);
    ck_assert(cg_backward(sb, g, false) && cg_backward(sf, g, false));
    ck_assert_int_eq(cg_grad(xb)->dtype, CG_BF16);
    cg_tensor *want = cg_k_to(cg_grad(xf), CG_BF16);
    ck_assert(!memcmp(cg_data_bf16(want), cg_data_bf16(cg_grad(xb)), 2 * (size_t)cg_numel(want)));
    cg_release_all(3, sb, sf, want);
}

void cg_test_same_bits_1_2_threads(void (*run)(int nt, float **got), int k, const int64_t *n)
{
    float *one[8], *two[8];
    ck_assert(k <= 8);
    run(1, one);
    run(2, two);
    for (int j = 0; j < k; j++) {
        ck_assert_msg(!memcmp(one[j], two[j], (size_t)n[j] * sizeof(float)),
                      "result %d differs between 1 and 2 threads", j);
        free(one[j]);
        free(two[j]);
    }
}

cg_tensor *cg_test_weighted_squares(int n, cg_tensor **t)
{
    cg_tensor *sum = NULL;
    for (int i = 0; i < n; i++) {
        cg_tensor *m = cg_muls(t[i], (float)(i + 1)), *sq = cg_mul(m, t[i]), *s = cg_sum_all(sq);
        cg_tensor *acc = sum ? cg_add(sum, s) : cg_retain(s);
        cg_release_all(5, m, sq, s, sum, t[i]);
        sum = acc;
    }
    return sum;
}

void cg_test_backward_values(cg_tensor *loss, int n, cg_tensor *const *in, float **got)
{
    ck_assert_msg(loss && cg_backward(loss, NULL, false), "%s", cg_last_error());
    got[0] = cg_test_values(loss);
    for (int j = 0; j < n; j++)
        got[1 + j] = cg_test_values(cg_grad(in[j]));
    cg_set_num_threads(0);
}

void cg_test_assert_bf16_rounded(const cg_tensor *yb, const cg_tensor *yf, const char *what)
{
    ck_assert_msg(yb && yb->dtype == CG_BF16 && yf, "%s: %s", what, cg_last_error());
    cg_tensor *yr = cg_k_to(yb, CG_F32), *want = cg_k_to(yf, CG_BF16), *wr = cg_k_to(want, CG_F32);
    float *a = cg_test_values(yr), *b = cg_test_values(wr);
    ck_assert_msg(!memcmp(a, b, (size_t)cg_numel(yr) * sizeof(float)), "%s", what);
    free(a);
    free(b);
    cg_release_all(3, yr, want, wr);
}

void cg_assert_tensor_impl(const cg_tensor *t, const float *expect, double atol, double rtol,
                           const char *file, int line)
{
    if (!t)
        ck_assert_msg(0, "%s:%d: tensor is NULL: %s", file, line, cg_last_error());
    float *v = cg_test_values(t);
    cg_assert_close_impl(v, expect, cg_numel(t), atol, rtol, file, line);
    free(v);
}

void cg_assert_refused_impl(bool failed, const char *needle, const char *expr, const char *file,
                            int line)
{
    const char *msg = cg_last_error();
    ck_assert_msg(failed, "%s:%d: %s was accepted", file, line, expr);
    ck_assert_msg(msg[0] != '\0', "%s:%d: %s: empty error message", file, line, expr);
    ck_assert_msg(strstr(msg, needle), "%s:%d: %s failed with '%s', expected '%s' in it", file,
                  line, expr, msg, needle);
}

void cg_assert_fails_impl(void *result, const char *needle, const char *expr, const char *file,
                          int line)
{
    if (result)
        ck_assert_msg(0, "%s:%d: expected %s to fail, it returned a value", file, line, expr);
    if (needle && !strstr(cg_last_error(), needle))
        ck_assert_msg(0, "%s:%d: %s failed with '%s', expected the message to contain '%s'", file,
                      line, expr, cg_last_error(), needle);
}

cg_tensor *cg_test_randn_layout(cg_rng *rng, int ndim, const int64_t *shape, int kind)
{
    int64_t s[CG_MAX_DIMS];
    memcpy(s, shape, (size_t)ndim * sizeof(int64_t));
    if (kind == 1 && ndim >= 2) {
        s[ndim - 1] = shape[ndim - 2];
        s[ndim - 2] = shape[ndim - 1];
        cg_tensor *base = cg_randn(rng, ndim, s);
        cg_tensor *v = cg_view_transpose(base, -1, -2);
        cg_release(base);
        return v;
    }
    if (kind == 2 && ndim >= 1) {
        s[ndim - 1] = shape[ndim - 1] * 2;
        cg_tensor *base = cg_randn(rng, ndim, s);
        cg_tensor *v = cg_view_slice(base, ndim - 1, 1, s[ndim - 1], 2);
        cg_release(base);
        return v;
    }
    if (kind == 3 && ndim >= 1) {
        s[0] = 1;
        cg_tensor *base = cg_randn(rng, ndim, s);
        cg_tensor *v = cg_view_expand(base, ndim, shape);
        cg_release(base);
        return v;
    }
    return cg_randn(rng, ndim, shape);
}

long cg_test_rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static struct rlimit g_fsize_old;
static void (*g_fsize_was)(int);

void cg_test_fsize_limit(long bytes)
{
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &g_fsize_old), 0);
    struct rlimit lim = g_fsize_old;
    lim.rlim_cur = (rlim_t)bytes;
    g_fsize_was = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
}

void cg_test_fsize_restore(void)
{
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &g_fsize_old), 0);
    signal(SIGXFSZ, g_fsize_was);
}

void cg_test_blank_params(cg_module *m)
{
    cg_param_list pl = {0};
    ck_assert(cg_module_params(m, &pl));
    for (int i = 0; i < pl.n; i++) {
        cg_tensor *t = pl.items[i].tensor;
        const bool norm = strstr(pl.items[i].name, "ln") && strstr(pl.items[i].name, "weight");
        for (int64_t k = 0; k < cg_numel(t); k++)
            cg_data(t)[k] = norm ? 1.0f : 0.0f;
        cg_tensor_modified(t);
    }
    cg_param_list_free(&pl);
}

double cg_test_max_rel_diff(cg_module *a, cg_module *b, char *worst, size_t nw)
{
    cg_param_list la = {0}, lb = {0};
    ck_assert(cg_module_params(a, &la) && cg_module_params(b, &lb));
    ck_assert_int_eq(la.n, lb.n);
    double worst_rel = 0;
    for (int i = 0; i < la.n; i++) {
        int64_t n = cg_numel(la.items[i].tensor);
        ck_assert_int_eq(n, cg_numel(lb.items[i].tensor));
        const float *x = cg_data(la.items[i].tensor), *y = cg_data(lb.items[i].tensor);
        double dmax = 0, ymax = 0;
        for (int64_t k = 0; k < n; k++) {
            dmax = fmax(dmax, fabs((double)x[k] - (double)y[k]));
            ymax = fmax(ymax, fabs((double)y[k]));
        }
        double rel = dmax / fmax(ymax, 1e-12);
        /* A key projection's bias shifts every score of a query by the same
         * amount, which softmax ignores: its true gradient is exactly 0 and
         * what reaches it is round-off noise, which Adam's normalisation
         * turns into +-lr steps that depend on summation order. It cannot
         * be compared (nor does it change the model's outputs). */
        size_t ln = strlen(la.items[i].name);
        if (ln >= 11 && strcmp(la.items[i].name + ln - 11, "k_proj.bias") == 0)
            continue;
        if (getenv("CG_TEST_VERBOSE"))
            fprintf(stderr, "  %-40s %.3g\n", la.items[i].name, rel);
        if (rel > worst_rel || i == 0) {
            worst_rel = fmax(worst_rel, rel);
            if (worst)
                snprintf(worst, nw, "%s", la.items[i].name);
        }
    }
    cg_param_list_free(&la);
    cg_param_list_free(&lb);
    return worst_rel;
}

/* ------------------------------------------------ what a node keeps */
typedef cg_tensor *(*unread_fn)(void *, cg_tensor *const *);
enum { UNREAD_MAX = 8 };

/* f(args), args released after the forward, then two backwards with a
 * fixed upstream gradient; got[k]: a copy of leaves[k]'s gradient (NULL:
 * none), which is then cleared. False when f gave nothing to
 * differentiate. */
static bool unread_run(unread_fn f, void *ctx, int n, cg_tensor **args, cg_tensor *const *leaves,
                       cg_tensor **got, const char *what)
{
    cg_tensor *y = f(ctx, args);
    for (int k = 0; k < n; k++)
        cg_release(args[k]);
    ck_assert_msg(y != NULL, "%s: %s", what, cg_last_error());
    bool run = y->requires_grad && y->dtype == CG_F32;
    if (run) {
        cg_tensor *g = cg_empty(y->ndim, y->shape);
        float *p = cg_data(g);
        for (int64_t i = 0; i < cg_numel(g); i++)
            p[i] = 0.25f * (float)(i % 7) - 0.625f;
        /* twice through the retained graph: a fused op's second backward
         * recomputes from its inputs what its first took from the forward */
        ck_assert_msg(cg_backward(y, g, true) && cg_backward(y, g, false), "%s: %s", what,
                      cg_last_error());
        cg_release(g);
    }
    cg_release(y);
    for (int k = 0; k < n; k++) {
        got[k] = leaves[k] && leaves[k]->grad ? cg_k_clone(leaves[k]->grad) : NULL;
        if (leaves[k])
            cg_zero_grad(leaves[k]);
    }
    return run;
}

/* A non-leaf view of x with x's layout (an identity permute). */
static cg_tensor *unread_view(cg_tensor *x)
{
    int perm[CG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        perm[i] = i;
    cg_tensor *v = cg_permute(x, perm);
    ck_assert_msg(v && v->node, "permute: %s", cg_last_error());
    return v;
}

void cg_test_check_unread(unread_fn f, void *ctx, int n, cg_tensor *const *in, const char *what)
{
    ck_assert(n >= 1 && n <= UNREAD_MAX);
    cg_tensor *old[UNREAD_MAX], *ref[UNREAD_MAX], *got[UNREAD_MAX], *args[UNREAD_MAX];
    for (int k = 0; k < n; k++) {
        old[k] = in[k] ? in[k]->grad : NULL;
        if (in[k])
            in[k]->grad = NULL;
        args[k] = cg_retain(in[k]);
    }
    bool run = unread_run(f, ctx, n, args, in, ref, what);
    for (int only = -1; run && only < n; only++) {
        if (only >= 0 && !(in[only] && in[only]->requires_grad))
            continue;
        for (int k = 0; k < n; k++) {
            bool grad = in[k] && in[k]->requires_grad;
            args[k] = !grad                   ? cg_retain(in[k])
                      : only < 0 || only == k ? unread_view(in[k])
                                              : cg_detach(in[k]);
        }
        unread_run(f, ctx, n, args, in, got, what);
        for (int k = 0; k < n; k++) {
            if ((only < 0 || only == k) && ref[k]) {
                ck_assert_msg(got[k], "%s: no gradient for input %d (%s)", what, k,
                              only < 0 ? "every input a non-leaf" : "only it needing one");
                float *a = cg_test_values(got[k]), *b = cg_test_values(ref[k]);
                cg_assert_close_impl(a, b, cg_numel(ref[k]), 1e-6, 1e-5, what, k);
                free(a);
                free(b);
            }
            cg_release(got[k]);
        }
    }
    for (int k = n; k-- > 0;) { /* backwards: an input given twice gets its first slot's */
        cg_release(ref[k]);
        if (in[k])
            in[k]->grad = old[k];
    }
}

void cg_test_acc_refused(int64_t rows, int64_t cols, const char *op,
                         bool (*call)(void *ctx, cg_tensor *acc, bool dx), void *ctx)
{
    cg_tensor *bad[] = {cg_zeros_dtype(CG_BF16, CG_SHAPE(rows, cols)),
                        cg_zeros(CG_SHAPE(cols, rows)), cg_zeros(CG_SHAPE(cols, rows)),
                        cg_zeros(CG_SHAPE(rows, cols))};
    cg_tensor *view = cg_view_transpose(bad[2], 0, 1);
    cg_tensor *use[] = {bad[0], bad[1], view, bad[3]};
    for (int i = 0; i < 4; i++) {
        cg_clear_error();
        ck_assert(!call(ctx, use[i], i < 3));
        const char *want = i < 3 ? "dx is added into a contiguous float32 tensor of the input's"
                                 : "a tensor to add dx into, but dx not asked for";
        ck_assert_msg(strstr(cg_last_error(), op) && strstr(cg_last_error(), want), "%s",
                      cg_last_error());
        float *u = cg_test_values(use[i]);
        for (int64_t j = 0; j < rows * cols; j++)
            ck_assert(u[j] == 0.0f);
        free(u);
    }
    cg_release_all(5, bad[0], bad[1], bad[2], bad[3], view);
}

bool cg_test_comma_locale(void)
{
    static const char *names[] = {"de_DE.UTF-8", "de_DE.utf8",  "fr_FR.UTF-8", "fr_FR.utf8",
                                  "nl_NL.UTF-8", "es_ES.UTF-8", "it_IT.UTF-8", "ru_RU.UTF-8"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (setlocale(LC_ALL, names[i]) && strcmp(localeconv()->decimal_point, ",") == 0)
            return true;
    setlocale(LC_ALL, "C");
    fprintf(stderr, "note: no locale with a decimal comma is installed (locale-gen "
                    "de_DE.UTF-8); the locale part of this test is skipped\n");
    return false;
}

void cg_test_c_locale(void) { setlocale(LC_ALL, "C"); }
