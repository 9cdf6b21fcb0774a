/* Data-parallel training over MPI: see dist.h. */
#include "models/train/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/parse.h"

#ifdef CG_HAVE_MPI
#include <mpi.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#endif

/* ------------------------------------------------------------ state */
static bool g_inited;
static int g_rank = 0, g_size = 1;
static double g_comm_s;
static int64_t g_comm_bytes;

bool cg_dist_compiled_with_mpi(void)
{
#ifdef CG_HAVE_MPI
    return true;
#else
    return false;
#endif
}

int cg_dist_rank(void) { return g_rank; }
int cg_dist_size(void) { return g_size; }
bool cg_dist_is_root(void) { return g_rank == 0; }

bool cg_dist_share(int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = n * g_rank / g_size;
    *hi = n * (g_rank + 1) / g_size;
    return n >= g_size;
}

uint64_t cg_dist_seed_for_rank(uint64_t seed, int rank)
{
    return seed ^ ((uint64_t)rank * 0x9E3779B97F4A7C15ULL);
}

uint64_t cg_dist_rank_seed(uint64_t seed) { return cg_dist_seed_for_rank(seed, g_rank); }

double cg_dist_comm_seconds(void) { return g_comm_s; }
int64_t cg_dist_comm_bytes(void) { return g_comm_bytes; }
void cg_dist_reset_stats(void)
{
    g_comm_s = 0;
    g_comm_bytes = 0;
}

/* Parameter tensors of a module, in cg_module_params() order (malloc'd). */
static cg_tensor **module_tensors(cg_module *m, int *n)
{
    *n = 0;
    if (!m) {
        cg_set_error("dist: module is NULL");
        return NULL;
    }
    cg_param_list l = {0};
    if (!cg_module_params(m, &l))
        return NULL;
    cg_tensor **ts = malloc((size_t)(l.n > 0 ? l.n : 1) * sizeof *ts);
    if (!ts) {
        cg_param_list_free(&l);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    for (int i = 0; i < l.n; i++)
        ts[i] = l.items[i].tensor;
    *n = l.n;
    cg_param_list_free(&l);
    return ts;
}

#ifndef CG_HAVE_MPI
/* ------------------------------------------------ single process */
bool cg_dist_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_inited = true;
    return true;
}
void cg_dist_finalize(void) { g_inited = false; }
bool cg_dist_broadcast_tensors(int n, cg_tensor *const *ts)
{
    for (int i = 0; i < n; i++)
        if (!ts || !ts[i]) {
            cg_set_error("dist: broadcast: tensor %d is NULL", i);
            return false;
        }
    return true;
}
bool cg_dist_broadcast_bytes(void *buf, size_t bytes)
{
    (void)buf;
    (void)bytes;
    return true;
}
bool cg_dist_average_grads_tensors(int n, cg_tensor *const *params, double weight)
{
    if (!(weight >= 0) || !isfinite(weight)) {
        cg_set_error("dist: average_grads: weight %g must be finite and >= 0", weight);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!params || !params[i]) {
            cg_set_error("dist: average_grads: parameter %d is NULL", i);
            return false;
        }
    return true;
}
bool cg_dist_allreduce_sum(double *v, int n)
{
    (void)v;
    (void)n;
    return true;
}
bool cg_dist_allreduce_max(double *v, int n)
{
    (void)v;
    (void)n;
    return true;
}
bool cg_dist_barrier(void) { return true; }
bool cg_dist_quiet_nonroot(void) { return true; }
_Noreturn void cg_dist_abort(int code, const char *msg)
{
    fprintf(stderr, "cgrad dist: rank 0: %s\n", msg ? msg : "aborting");
    exit(code);
}

struct cg_dist_reducer {
    int n;
    int64_t *numel; /* of each parameter: a shard is all of it */
};
cg_dist_reducer *cg_dist_reducer_new(int n, cg_tensor *const *params, double bucket_mb)
{
    (void)bucket_mb;
    if (n < 0 || (n && !params)) {
        cg_set_error("dist: reducer: bad parameter list");
        return NULL;
    }
    cg_dist_reducer *r = calloc(1, sizeof *r);
    int64_t *numel = malloc((size_t)(n ? n : 1) * sizeof *numel);
    if (!r || !numel) {
        free(r);
        free(numel);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            free(r);
            free(numel);
            cg_set_error("dist: reducer: parameter %d is NULL", i);
            return NULL;
        }
        numel[i] = cg_numel(params[i]);
    }
    r->n = n;
    r->numel = numel;
    return r;
}
cg_dist_reducer *cg_dist_reducer_new_zero(int n, cg_tensor *const *params, double bucket_mb)
{
    return cg_dist_reducer_new(n, params, bucket_mb);
}
bool cg_dist_reducer_shards(const cg_dist_reducer *r, cg_optim_range *own)
{
    if (!r || !own) {
        cg_set_error("dist: reducer_shards: NULL argument");
        return false;
    }
    for (int i = 0; i < r->n; i++)
        own[i] = (cg_optim_range){0, r->numel[i]};
    return true;
}
bool cg_dist_reducer_gather_params(cg_dist_reducer *r) { return r != NULL; }
bool cg_dist_gather_optim(const cg_optim *shard, cg_optim *full)
{
    return cg_optim_copy_state(full, shard);
}
bool cg_dist_reducer_prepare(cg_dist_reducer *r, double weight)
{
    (void)weight;
    return r != NULL;
}
bool cg_dist_reducer_finish(cg_dist_reducer *r) { return r != NULL; }
double cg_dist_reducer_exposed_seconds(const cg_dist_reducer *r)
{
    (void)r;
    return 0;
}
int cg_dist_reducer_buckets(const cg_dist_reducer *r)
{
    (void)r;
    return 0;
}
void cg_dist_reducer_free(cg_dist_reducer *r)
{
    if (r)
        free(r->numel);
    free(r);
}

#else
/* ------------------------------------------------------------ MPI */
static bool g_own_mpi;     /* we called MPI_Init_thread (and so finalize) */
static bool g_no_mpi;      /* initialised without MPI (not started by a launcher) */
static float *g_bucket;    /* the packing buffer */
static int64_t g_bucket_n; /* its size in floats */

/* Watchdog: the main thread marks the start and end of each collective; the
 * watchdog thread ends the job if one lasts longer than g_timeout. */
static pthread_t g_wd_thread;
static bool g_wd_running;
static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wd_cv = PTHREAD_COND_INITIALIZER;
static bool g_wd_stop;
static const char *g_wd_what; /* NULL when no collective is running */
static double g_wd_since;
static double g_timeout = 300;
static int g_err_fd = 2; /* the rank's real stderr (see cg_dist_quiet_nonroot) */
static int g_log_fd = -1;
static bool g_clean_exit;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_wd_mu);
    while (!g_wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g_wd_cv, &g_wd_mu, &ts);
        if (!g_wd_stop && g_wd_what && now_s() - g_wd_since > g_timeout) {
            dprintf(g_err_fd,
                    "cgrad dist: rank %d: %s did not finish within %g s (CG_DIST_TIMEOUT): "
                    "another rank probably died, hangs or took a different code path; "
                    "aborting the job\n",
                    g_rank, g_wd_what, g_timeout);
            MPI_Abort(MPI_COMM_WORLD, 124);
            _exit(124);
        }
    }
    pthread_mutex_unlock(&g_wd_mu);
    return NULL;
}

static void wd_begin(const char *what)
{
    if (!g_wd_running)
        return;
    pthread_mutex_lock(&g_wd_mu);
    g_wd_what = what;
    g_wd_since = now_s();
    pthread_mutex_unlock(&g_wd_mu);
}

static void wd_end(void)
{
    if (!g_wd_running)
        return;
    pthread_mutex_lock(&g_wd_mu);
    g_wd_what = NULL;
    pthread_mutex_unlock(&g_wd_mu);
}

static bool mpi_ok(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return true;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len] = '\0';
    cg_set_error("dist: %s failed on rank %d of %d: %s", what, g_rank, g_size,
                 len ? msg : "unknown MPI error");
    return false;
}

/* Run one collective under the watchdog. */
static bool collective_done(const char *what, int rc)
{
    wd_end();
    return mpi_ok(rc, what);
}
static void dump_log_at_exit(void);
#define COLLECTIVE(what, call) (wd_begin(what), collective_done((what), (call)))

/* Started by mpirun/mpiexec/srun? (Open MPI, PMIx, MPICH/PMI variables.)
 * A plain start then skips MPI_Init, whose singleton mode costs about a
 * second per run. CG_DIST_MPI=1 forces MPI on, CG_DIST_MPI=0 off. */
static bool launched_by_mpi(void)
{
    const char *f = getenv("CG_DIST_MPI");
    bool force = false;
    if (f && *f && cg_env_flag("CG_DIST_MPI", &force))
        return force;
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

bool cg_dist_init(int *argc, char ***argv)
{
    if (g_inited)
        return true;
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag && !launched_by_mpi()) {
        g_inited = true; /* a plain process: size 1, MPI never started */
        g_no_mpi = true;
        return true;
    }
    if (!flag) {
        int provided = 0;
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            cg_set_error("dist: MPI_Init_thread failed (code %d)", rc);
            return false;
        }
        g_own_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (!mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank") ||
        !mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &g_size), "MPI_Comm_size"))
        return false;

    double bucket_mb = 4.0;
    if (!cg_env_number("CG_DIST_BUCKET_MB", &bucket_mb) ||
        !cg_env_number("CG_DIST_TIMEOUT", &g_timeout))
        return false;
    g_bucket_n = (int64_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    if (g_bucket_n < 1024)
        g_bucket_n = 1024;

    if (g_size > 1 && g_timeout > 0) {
        g_wd_stop = false;
        if (pthread_create(&g_wd_thread, NULL, watchdog_main, NULL) == 0)
            g_wd_running = true;
    }
    g_inited = true;
    return true;
}

void cg_dist_finalize(void)
{
    if (!g_inited)
        return;
    g_clean_exit = true;
    if (g_no_mpi) {
        g_no_mpi = false;
        g_inited = false;
        return;
    }
    if (g_wd_running) {
        pthread_mutex_lock(&g_wd_mu);
        g_wd_stop = true;
        pthread_cond_signal(&g_wd_cv);
        pthread_mutex_unlock(&g_wd_mu);
        pthread_join(g_wd_thread, NULL);
        g_wd_running = false;
    }
    cg_free(g_bucket);
    g_bucket = NULL;
    int fin = 0;
    MPI_Finalized(&fin);
    if (g_own_mpi && !fin)
        MPI_Finalize();
    g_own_mpi = false;
    g_inited = false;
    g_rank = 0;
    g_size = 1;
}

_Noreturn void cg_dist_abort(int code, const char *msg)
{
    fflush(stdout);
    fflush(stderr);
    dump_log_at_exit();
    g_clean_exit = true; /* printed once */
    dprintf(g_err_fd, "cgrad dist: rank %d: %s\n", g_rank, msg ? msg : "aborting");
    int flag = 0, fin = 0;
    MPI_Initialized(&flag);
    MPI_Finalized(&fin);
    if (flag && !fin && g_size > 1 && !g_no_mpi)
        MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code);
}

/* Non-root output: stdout goes to /dev/null, stderr to an unlinked temporary
 * file whose tail is copied to the real stderr if the process exits without
 * cg_dist_finalize (an error path), so that no rank's error is lost. */
static void dump_log_at_exit(void)
{
    if (g_clean_exit || g_log_fd < 0)
        return;
    fflush(stderr);
    off_t end = lseek(g_log_fd, 0, SEEK_END);
    if (end <= 0)
        return;
    off_t from = end > 4096 ? end - 4096 : 0;
    char buf[4096];
    ssize_t n = pread(g_log_fd, buf, (size_t)(end - from), from);
    if (n > 0) {
        dprintf(g_err_fd, "cgrad dist: rank %d exited early; the end of its output:\n", g_rank);
        if (write(g_err_fd, buf, (size_t)n) < 0)
            return;
    }
}

bool cg_dist_quiet_nonroot(void)
{
    if (g_rank == 0 || g_size == 1 || g_err_fd != 2)
        return true;
    bool verbose = false;
    if (!cg_env_flag("CG_DIST_VERBOSE", &verbose))
        return false;
    if (verbose)
        return true;
    fflush(stdout);
    fflush(stderr);
    /* the log (an unlinked file) in $TMPDIR, as Open MPI's own files */
    const char *td = getenv("TMPDIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/cgrad-dist-XXXXXX", td && *td ? td : "/tmp");
    int keep = dup(2), null = open("/dev/null", O_WRONLY), log = mkstemp(path);
    int e = log < 0 ? errno : 0;
    if (log >= 0)
        unlink(path);
    if (keep < 0 || null < 0 || log < 0 || dup2(null, 1) < 0 || dup2(log, 2) < 0) {
        if (!e)
            e = errno;
        if (keep >= 0)
            close(keep);
        if (null >= 0)
            close(null);
        if (log >= 0)
            close(log);
        cg_set_error("dist: could not redirect the output of rank %d to a log in '%s' (%s; set "
                     "TMPDIR to a writable directory, or CG_DIST_VERBOSE=1 to keep every rank's "
                     "output)",
                     g_rank, log < 0 ? path : "/dev/null", strerror(e));
        return false;
    }
    close(null);
    g_err_fd = keep;
    g_log_fd = log;
    atexit(dump_log_at_exit);
    return true;
}

static bool ensure_bucket(void)
{
    if (g_bucket)
        return true;
    g_bucket = cg_alloc((size_t)g_bucket_n * sizeof(float));
    if (!g_bucket)
        cg_set_error("dist: out of memory for a %lld-float bucket", (long long)g_bucket_n);
    return g_bucket != NULL;
}

/* The global flat layout of a list of tensors: element e of tensor i sits at
 * off[i] + e. A bucket covers [lo, hi) of that range. */
typedef void (*seg_fn)(float *bucket, float *tensor, int64_t n, float scale);

static void seg_pack(float *b, float *t, int64_t n, float s)
{
    if (s == 1.0f)
        memcpy(b, t, (size_t)n * sizeof(float));
    else
        for (int64_t k = 0; k < n; k++)
            b[k] = t[k] * s;
}

static void seg_unpack(float *b, float *t, int64_t n, float s)
{
    if (s == 1.0f)
        memcpy(t, b, (size_t)n * sizeof(float));
    else
        for (int64_t k = 0; k < n; k++)
            t[k] = b[k] * s;
}

/* Apply fn to every piece of [lo, hi) (bufs[i] has len[i] floats). */
static void for_segments(int n, float *const *bufs, const int64_t *len, int64_t lo, int64_t hi,
                         seg_fn fn, float scale)
{
    int64_t off = 0;
    for (int i = 0; i < n && off < hi; off += len[i], i++) {
        if (!bufs[i])
            continue;
        int64_t a = lo > off ? lo : off;
        int64_t b = hi < off + len[i] ? hi : off + len[i];
        if (a < b)
            fn(g_bucket + (a - lo), bufs[i] + (a - off), b - a, scale);
    }
}

static bool check_inited(const char *what)
{
    if (!g_inited) {
        cg_set_error("dist: %s before cg_dist_init", what);
        return false;
    }
    return true;
}

bool cg_dist_broadcast_bytes(void *buf, size_t bytes)
{
    if (g_size == 1)
        return true;
    if (!check_inited("broadcast"))
        return false;
    double t0 = now_s();
    bool ok = true;
    for (size_t done = 0; ok && done < bytes;) {
        size_t chunk = bytes - done > (1u << 30) ? (1u << 30) : bytes - done;
        ok = COLLECTIVE("MPI_Bcast",
                        MPI_Bcast((char *)buf + done, (int)chunk, MPI_BYTE, 0, MPI_COMM_WORLD));
        done += chunk;
    }
    g_comm_s += now_s() - t0;
    return ok;
}

bool cg_dist_broadcast_tensors(int n, cg_tensor *const *ts)
{
    if (n < 0 || (n > 0 && !ts)) {
        cg_set_error("dist: broadcast: bad tensor list");
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i] || !cg_is_contiguous(ts[i])) {
            cg_set_error("dist: broadcast: tensor %d is %s", i, ts[i] ? "not contiguous" : "NULL");
            return false;
        }
    }
    if (g_size == 1)
        return true;
    if (!check_inited("broadcast") || !ensure_bucket())
        return false;
    /* Check the layout first: every rank compares its shapes with rank 0's
     * and all agree on failing, so a mismatch is an error, not a hang. */
    uint64_t sig[3] = {(uint64_t)n, 0, 0};
    for (int i = 0; i < n; i++) {
        sig[1] += (uint64_t)cg_numel(ts[i]);
        for (int d = 0; d < ts[i]->ndim; d++)
            sig[2] =
                sig[2] * 1000003u + (uint64_t)ts[i]->shape[d] + 17u * (uint64_t)d + (uint64_t)i;
    }
    uint64_t root_sig[3] = {sig[0], sig[1], sig[2]};
    double t0 = now_s();
    if (!COLLECTIVE("MPI_Bcast", MPI_Bcast(root_sig, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD)))
        return false;
    int bad = memcmp(sig, root_sig, sizeof sig) != 0, any_bad = 0;
    if (!COLLECTIVE("MPI_Allreduce",
                    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD)))
        return false;
    if (any_bad) {
        if (bad) /* this rank and rank 0, once each */
            cg_set_error("dist: broadcast: the parameters differ between ranks (rank %d: %lld "
                         "tensors, %lld elements; rank 0: %lld tensors, %lld elements)",
                         g_rank, (long long)sig[0], (long long)sig[1], (long long)root_sig[0],
                         (long long)root_sig[1]);
        else
            cg_set_error("dist: broadcast: the parameters differ between ranks (rank %d: %lld "
                         "tensors, %lld elements, as rank 0; another rank has other shapes)",
                         g_rank, (long long)sig[0], (long long)sig[1]);
        return false;
    }
    float **bufs = malloc((size_t)(n > 0 ? n : 1) * sizeof *bufs);
    int64_t *len = malloc((size_t)(n > 0 ? n : 1) * sizeof *len);
    if (!bufs || !len) {
        free(bufs);
        free(len);
        cg_set_error("dist: out of memory");
        return false;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        cg_tensor_modified(ts[i]); /* the broadcast writes it on every rank but 0 */
        bufs[i] = cg_data(ts[i]);
        len[i] = cg_numel(ts[i]);
        total += len[i];
    }
    bool ok = true;
    for (int64_t lo = 0; ok && lo < total; lo += g_bucket_n) {
        int64_t hi = lo + g_bucket_n < total ? lo + g_bucket_n : total;
        if (g_rank == 0)
            for_segments(n, bufs, len, lo, hi, seg_pack, 1.0f);
        ok = COLLECTIVE("MPI_Bcast",
                        MPI_Bcast(g_bucket, (int)(hi - lo), MPI_FLOAT, 0, MPI_COMM_WORLD));
        if (ok && g_rank != 0)
            for_segments(n, bufs, len, lo, hi, seg_unpack, 1.0f);
    }
    free(bufs);
    free(len);
    g_comm_s += now_s() - t0;
    return ok;
}

bool cg_dist_average_grads_tensors(int n, cg_tensor *const *params, double weight)
{
    if (n < 0 || (n > 0 && !params)) {
        cg_set_error("dist: average_grads: bad parameter list");
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!params[i]) {
            cg_set_error("dist: average_grads: parameter %d is NULL", i);
            return false;
        }
    if (!(weight >= 0) || !isfinite(weight)) {
        cg_set_error("dist: average_grads: weight %g must be finite and >= 0", weight);
        return false;
    }
    if (g_size == 1)
        return true;
    if (!check_inited("average_grads") || !ensure_bucket())
        return false;
    double t0 = now_s();

    /* Which parameters have a gradient anywhere, and the weights. */
    double *mx = malloc((size_t)(n + 2) * sizeof *mx);
    float **bufs = malloc((size_t)(n > 0 ? n : 1) * sizeof *bufs);
    int64_t *len = malloc((size_t)(n > 0 ? n : 1) * sizeof *len);
    if (!mx || !bufs || !len) {
        free(mx);
        free(bufs);
        free(len);
        cg_set_error("dist: out of memory");
        return false;
    }
    mx[0] = weight;
    mx[1] = -weight;
    for (int i = 0; i < n; i++)
        mx[2 + i] = params[i]->grad ? 1.0 : 0.0;
    double wsum = weight;
    bool ok =
        COLLECTIVE("MPI_Allreduce",
                   MPI_Allreduce(MPI_IN_PLACE, mx, n + 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) &&
        COLLECTIVE("MPI_Allreduce",
                   MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    if (ok && !(wsum > 0)) {
        cg_set_error("dist: average_grads: the weights of all ranks sum to 0");
        ok = false;
    }
    /* Equal weights: sum, then scale by 1/size. Otherwise scale each rank's
     * gradient by its weight, sum, then divide by the total weight. */
    bool equal = ok && mx[0] == -mx[1];
    float pre = equal ? 1.0f : (float)weight;
    float post = equal ? (float)(1.0 / g_size) : (float)(1.0 / wsum);

    int64_t total = 0;
    for (int i = 0; ok && i < n; i++) {
        cg_tensor *p = params[i];
        bufs[i] = NULL;
        len[i] = 0;
        if (mx[2 + i] == 0)
            continue; /* no gradient on any rank: stays NULL */
        cg_tensor *g = p->grad;
        if (!g) {
            g = cg_zeros_like(p);
        } else if (!cg_is_contiguous(g) || g->storage->refcount != 1 || g->refcount != 1 ||
                   g->node) {
            g = cg_k_clone(g); /* own a contiguous copy before writing in place */
        } else {
            g = NULL;
        }
        if (g) {
            cg_release(p->grad);
            p->grad = g;
        }
        if (!p->grad) {
            ok = false;
            break;
        }
        if (cg_numel(p->grad) != cg_numel(p)) {
            cg_set_error("dist: average_grads: parameter %d has a gradient of %lld elements "
                         "for %lld values",
                         i, (long long)cg_numel(p->grad), (long long)cg_numel(p));
            ok = false;
            break;
        }
        bufs[i] = cg_data(p->grad);
        len[i] = cg_numel(p->grad);
        total += len[i];
    }
    for (int64_t lo = 0; ok && lo < total; lo += g_bucket_n) {
        int64_t hi = lo + g_bucket_n < total ? lo + g_bucket_n : total;
        for_segments(n, bufs, len, lo, hi, seg_pack, pre);
        ok = COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, g_bucket, (int)(hi - lo),
                                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        if (ok)
            for_segments(n, bufs, len, lo, hi, seg_unpack, post);
        g_comm_bytes += (hi - lo) * (int64_t)sizeof(float);
    }
    free(mx);
    free(bufs);
    free(len);
    g_comm_s += now_s() - t0;
    return ok;
}

/* ------------------------------------------ reduction during backward */
/* PyTorch DDP's reducer (torch/csrc/distributed/c10d/reducer.cpp) in
 * small: parameters in reverse order (the order backward finishes them)
 * fill buckets of about bucket_mb; a bucket holds whole parameters and,
 * after them, one float per parameter saying whether this rank had a
 * gradient for it. A parameter's gradient-ready hook (autograd.h) packs it,
 * scaled by `pre`, into its bucket; a bucket whose parameters are all
 * packed starts its MPI_Iallreduce, buckets strictly in index order (the
 * same order on every rank). Every hook also calls MPI_Testall, so the
 * reductions progress while backward goes on. finish() packs what no hook
 * packed (no gradient here: zeros), starts the rest, waits, and unpacks
 * scaled by `post`: the arithmetic of cg_dist_average_grads_tensors (pre,
 * post and the sums over ranks per element are the same). */
typedef struct {
    int first, count; /* parameters r->order[first .. first+count) */
    int64_t floats;   /* their elements + count flags */
    float *buf;
    int packed;
    MPI_Request req;
    bool started;
} rd_bucket;

struct cg_dist_reducer {
    int n;
    bool zero;            /* ZeRO-1: reduce-scatter, every rank owns a run of each bucket */
    int *counts, *displs; /* zero: bucket j's run of rank r at [j * size + r] */
    float *flags;         /* zero: has-gradient flags (by parameter index) */
    cg_optim_range *own;  /* zero: this rank's range of each parameter */
    cg_tensor **params;   /* as given */
    int *order;           /* parameter indices, reverse order */
    int *bucket_of;       /* by parameter index */
    int64_t *offset;      /* element offset of each parameter in its bucket */
    bool *done;           /* packed this step */
    int nb, next;         /* buckets; the next one to start */
    rd_bucket *b;
    bool armed;
    float pre, post;
    double exposed; /* seconds in finish (waiting for what backward did not hide) */
};

static int rd_find(const cg_dist_reducer *r, const cg_tensor *t)
{
    for (int i = 0; i < r->n; i++)
        if (r->params[i] == t)
            return i;
    return -1;
}

static void rd_start_ready(cg_dist_reducer *r)
{
    while (r->next < r->nb && r->b[r->next].packed == r->b[r->next].count) {
        int j = r->next++;
        rd_bucket *b = &r->b[j];
        /* zero: in place, this rank's run of sums lands at the buffer's start */
        int rc = r->zero ? MPI_Ireduce_scatter(MPI_IN_PLACE, b->buf, r->counts + j * g_size,
                                               MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &b->req)
                         : MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->floats, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD, &b->req);
        b->started = rc == MPI_SUCCESS;
        if (!b->started)
            mpi_ok(rc, r->zero ? "MPI_Ireduce_scatter" : "MPI_Iallreduce");
        g_comm_bytes += b->floats * (int64_t)sizeof(float);
    }
}

static void rd_progress(cg_dist_reducer *r)
{
    MPI_Request reqs[64];
    for (int lo = 0; lo < r->next; lo += 64) {
        int k = 0;
        for (int i = lo; i < r->next && k < 64; i++)
            reqs[k++] = r->b[i].req;
        int flag = 0;
        MPI_Testall(k, reqs, &flag, MPI_STATUSES_IGNORE);
        for (int i = lo, j = 0; j < k; i++, j++)
            r->b[i].req = reqs[j];
    }
}

static void rd_pack(cg_dist_reducer *r, int i)
{
    rd_bucket *b = &r->b[r->bucket_of[i]];
    cg_tensor *p = r->params[i];
    int64_t n = cg_numel(p);
    float *dst = b->buf + r->offset[i];
    int slot = 0;
    while (!r->zero && r->order[b->first + slot] != i)
        slot++;
    const cg_tensor *g = p->grad;
    if (g && cg_numel(g) == n && cg_is_contiguous(g)) {
        seg_pack(dst, cg_data((cg_tensor *)g), n, r->pre);
    } else if (g && cg_numel(g) == n) {
        cg_copy_to(g, dst);
        if (r->pre != 1.0f)
            for (int64_t k = 0; k < n; k++)
                dst[k] *= r->pre;
    } else {
        memset(dst, 0, (size_t)n * sizeof *dst);
    }
    if (r->zero)
        r->flags[i] = g ? 1.0f : 0.0f;
    else
        b->buf[b->floats - b->count + slot] = g ? 1.0f : 0.0f;
    r->done[i] = true;
    b->packed++;
}

static void rd_hook(void *ctx, cg_tensor *t)
{
    cg_dist_reducer *r = ctx;
    if (!r->armed)
        return;
    int i = rd_find(r, t);
    if (i < 0 || r->done[i])
        return;
    rd_pack(r, i);
    rd_start_ready(r);
    rd_progress(r);
}

static cg_dist_reducer *reducer_new(int n, cg_tensor *const *params, double bucket_mb, bool zero)
{
    if (n < 0 || (n && !params) || !(bucket_mb > 0)) {
        cg_set_error("dist: reducer: bad parameter list or bucket size %g MB", bucket_mb);
        return NULL;
    }
    cg_dist_reducer *r = calloc(1, sizeof *r);
    size_t m = (size_t)(n ? n : 1);
    if (r) {
        r->n = n;
        r->params = calloc(m, sizeof *r->params);
        r->order = malloc(m * sizeof *r->order);
        r->bucket_of = malloc(m * sizeof *r->bucket_of);
        r->offset = malloc(m * sizeof *r->offset);
        r->done = calloc(m, sizeof *r->done);
        r->b = calloc(m, sizeof *r->b);
        r->zero = zero;
        if (zero) {
            r->counts = malloc(m * (size_t)g_size * sizeof *r->counts);
            r->displs = malloc(m * (size_t)g_size * sizeof *r->displs);
            r->flags = calloc(m, sizeof *r->flags);
            r->own = calloc(m, sizeof *r->own);
        }
    }
    if (!r || !r->params || !r->order || !r->bucket_of || !r->offset || !r->done || !r->b ||
        (zero && (!r->counts || !r->displs || !r->flags || !r->own))) {
        cg_dist_reducer_free(r);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    int64_t cap = (int64_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    for (int k = 0; k < n; k++) {
        int i = n - 1 - k;
        if (!params[i]) {
            cg_dist_reducer_free(r);
            cg_set_error("dist: reducer: parameter %d is NULL", i);
            return NULL;
        }
        r->params[i] = params[i];
        r->order[k] = i;
        int64_t len = cg_numel(params[i]);
        rd_bucket *b = r->nb ? &r->b[r->nb - 1] : NULL;
        if (!b || (b->floats > 0 && b->floats + len > cap)) {
            b = &r->b[r->nb++];
            b->first = k;
        }
        r->bucket_of[i] = (int)(b - r->b);
        r->offset[i] = b->floats;
        b->floats += len;
        b->count++;
    }
    for (int j = 0; j < r->nb; j++) {
        if (!zero)
            r->b[j].floats += r->b[j].count; /* the has-gradient flags */
        else if (r->b[j].floats > INT32_MAX) {
            cg_dist_reducer_free(r);
            cg_set_error("dist: reducer: a bucket of %lld floats is too large for MPI",
                         (long long)r->b[j].floats);
            return NULL;
        }
        r->b[j].buf = cg_alloc((size_t)r->b[j].floats * sizeof(float));
        r->b[j].req = MPI_REQUEST_NULL;
        if (!r->b[j].buf) {
            cg_dist_reducer_free(r);
            cg_set_error("dist: out of memory for the gradient buckets");
            return NULL;
        }
    }
    for (int j = 0; zero && j < r->nb; j++) { /* equal runs of each bucket */
        int64_t f = r->b[j].floats;
        for (int q = 0; q < g_size; q++) {
            r->displs[j * g_size + q] = (int)(f * q / g_size);
            r->counts[j * g_size + q] = (int)(f * (q + 1) / g_size - f * q / g_size);
        }
        int64_t a = f * g_rank / g_size, z = f * (g_rank + 1) / g_size;
        for (int s = 0; s < r->b[j].count; s++) {
            int i = r->order[r->b[j].first + s];
            int64_t o = r->offset[i], len = cg_numel(params[i]);
            int64_t lo = a > o ? a - o : 0, hi = z < o + len ? z - o : len;
            if (lo > len)
                lo = len;
            r->own[i] = (cg_optim_range){lo, hi > lo ? hi : lo};
        }
    }
    for (int i = 0; i < n; i++)
        if (!cg_grad_ready_hook_add(params[i], rd_hook, r)) {
            cg_dist_reducer_free(r);
            return NULL;
        }
    return r;
}

cg_dist_reducer *cg_dist_reducer_new(int n, cg_tensor *const *params, double bucket_mb)
{
    return reducer_new(n, params, bucket_mb, false);
}

cg_dist_reducer *cg_dist_reducer_new_zero(int n, cg_tensor *const *params, double bucket_mb)
{
    return reducer_new(n, params, bucket_mb, true);
}

bool cg_dist_reducer_shards(const cg_dist_reducer *r, cg_optim_range *own)
{
    if (!r || !own || !r->zero) {
        cg_set_error("dist: reducer_shards: %s",
                     !r || !own ? "NULL argument" : "not a ZeRO reducer (new_zero)");
        return false;
    }
    memcpy(own, r->own, (size_t)r->n * sizeof *own);
    return true;
}

bool cg_dist_reducer_prepare(cg_dist_reducer *r, double weight)
{
    if (!r)
        return false;
    if (!(weight >= 0) || !isfinite(weight)) {
        cg_set_error("dist: reducer: weight %g must be finite and >= 0", weight);
        return false;
    }
    r->armed = false;
    if (g_size == 1)
        return true;
    if (!check_inited("reducer"))
        return false;
    double mx[2] = {weight, -weight}, wsum = weight, t0 = now_s();
    bool ok = COLLECTIVE("MPI_Allreduce",
                         MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) &&
              COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_DOUBLE, MPI_SUM,
                                                        MPI_COMM_WORLD));
    r->exposed = now_s() - t0;
    g_comm_s += r->exposed;
    if (ok && !(wsum > 0)) {
        cg_set_error("dist: average_grads: the weights of all ranks sum to 0");
        ok = false;
    }
    if (!ok)
        return false;
    bool equal = mx[0] == -mx[1];
    r->pre = equal ? 1.0f : (float)weight;
    r->post = equal ? (float)(1.0 / g_size) : (float)(1.0 / wsum);
    memset(r->done, 0, (size_t)r->n * sizeof *r->done);
    for (int j = 0; j < r->nb; j++) {
        r->b[j].packed = 0;
        r->b[j].started = false;
        r->b[j].req = MPI_REQUEST_NULL;
    }
    r->next = 0;
    r->armed = true;
    return true;
}

bool cg_dist_reducer_finish(cg_dist_reducer *r)
{
    if (!r)
        return false;
    if (g_size == 1)
        return true;
    if (!r->armed) {
        cg_set_error("dist: reducer: finish without prepare");
        return false;
    }
    double t0 = now_s();
    r->armed = false;
    for (int k = 0; k < r->n; k++)
        if (!r->done[r->order[k]])
            rd_pack(r, r->order[k]);
    rd_start_ready(r);
    bool ok = true;
    for (int j = 0; j < r->nb; j++)
        ok &= r->b[j].started;
    if (r->zero && r->n > 0) /* which parameters have a gradient on some rank */
        ok = COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, r->flags, r->n, MPI_FLOAT,
                                                       MPI_MAX, MPI_COMM_WORLD)) &&
             ok;
    wd_begin("MPI_Waitall");
    for (int j = 0; j < r->nb; j++) {
        int rc = MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        if (ok && rc != MPI_SUCCESS)
            ok = mpi_ok(rc, "MPI_Wait (gradient bucket)");
    }
    wd_end();
    for (int j = 0; ok && j < r->nb; j++) {
        rd_bucket *b = &r->b[j];
        for (int s = 0; ok && s < b->count; s++) {
            int i = r->order[b->first + s];
            cg_tensor *p = r->params[i];
            if ((r->zero ? r->flags[i] : b->buf[b->floats - b->count + s]) == 0)
                continue; /* no gradient on any rank: stays NULL */
            cg_tensor *g = p->grad;
            if (!g) {
                g = cg_hold(cg_zeros_like(p));
            } else if (!cg_is_contiguous(g) || g->storage->refcount != 1 || g->refcount != 1 ||
                       g->node) {
                g = cg_hold(cg_k_clone(g));
            } else {
                g = NULL;
            }
            if (g) {
                cg_unhold(p->grad);
                cg_release(p->grad);
                p->grad = g;
            }
            if (!p->grad) {
                ok = false;
                break;
            }
            if (r->zero) /* the owned run: its sums sit at the buffer's start */
                seg_unpack(b->buf + r->offset[i] + r->own[i].lo - r->displs[j * g_size + g_rank],
                           cg_data(p->grad) + r->own[i].lo, r->own[i].hi - r->own[i].lo, r->post);
            else
                seg_unpack(b->buf + r->offset[i], cg_data(p->grad), cg_numel(p), r->post);
            cg_tensor_modified(p->grad);
        }
    }
    double dt = now_s() - t0;
    r->exposed += dt;
    g_comm_s += dt;
    return ok;
}

bool cg_dist_reducer_gather_params(cg_dist_reducer *r)
{
    if (!r || !r->zero) {
        cg_set_error("dist: gather_params: %s", !r ? "reducer is NULL" : "not a ZeRO reducer");
        return false;
    }
    if (g_size == 1)
        return true;
    double t0 = now_s();
    bool ok = true;
    for (int j = 0; j < r->nb; j++) { /* every bucket's own run, in the bucket layout */
        rd_bucket *b = &r->b[j];
        for (int s = 0; s < b->count; s++) {
            int i = r->order[b->first + s];
            int64_t lo = r->own[i].lo, hi = r->own[i].hi;
            if (hi > lo)
                memcpy(b->buf + r->offset[i] + lo, cg_data(r->params[i]) + lo,
                       (size_t)(hi - lo) * sizeof(float));
        }
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, r->counts + j * g_size,
                                 r->displs + j * g_size, MPI_FLOAT, MPI_COMM_WORLD, &b->req);
        b->started = rc == MPI_SUCCESS;
        if (!b->started)
            ok = mpi_ok(rc, "MPI_Iallgatherv");
        g_comm_bytes += b->floats * (int64_t)sizeof(float);
    }
    wd_begin("MPI_Waitall (parameter all-gather)");
    for (int j = 0; j < r->nb; j++) {
        if (!r->b[j].started)
            continue;
        int rc = MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        r->b[j].started = false;
        if (ok && rc != MPI_SUCCESS)
            ok = mpi_ok(rc, "MPI_Wait (parameter all-gather)");
    }
    wd_end();
    for (int j = 0; ok && j < r->nb; j++) {
        rd_bucket *b = &r->b[j];
        for (int s = 0; s < b->count; s++) {
            int i = r->order[b->first + s];
            cg_tensor *p = r->params[i];
            memcpy(cg_data(p), b->buf + r->offset[i], (size_t)cg_numel(p) * sizeof(float));
            cg_tensor_modified(p);
        }
    }
    double dt = now_s() - t0;
    r->exposed += dt;
    g_comm_s += dt;
    return ok;
}

/* Every rank's owned runs of each state buffer into rank 0's full one. */
bool cg_dist_gather_optim(const cg_optim *shard, cg_optim *full)
{
    if (!shard) {
        cg_set_error("dist: gather_optim: the shard is NULL");
        return false;
    }
    if (g_size == 1)
        return cg_optim_copy_state(full, shard);
    if (!check_inited("gather_optim"))
        return false;
    /* rank 0 without a full optimizer (out of memory) still takes part in
     * the first gather, so that every rank learns of the failure */
    int n = cg_optim_count(shard);
    int64_t *mine = malloc((size_t)(2 * n + 1) * sizeof *mine);
    int64_t *all = g_rank == 0 ? malloc((size_t)(2 * n + 1) * (size_t)g_size * sizeof *all) : NULL;
    int *counts = calloc((size_t)g_size, sizeof *counts); /* zeros until set */
    int *displs = calloc((size_t)g_size, sizeof *displs);
    bool ok = mine && counts && displs && (g_rank != 0 || all);
    for (int i = 0; ok && i < n; i++)
        ok = cg_optim_shard_range(shard, i, &mine[2 * i], &mine[2 * i + 1]);
    if (mine)
        mine[2 * n] = ok ? 1 : 0;
    /* every rank's ranges (and whether it is fine) on rank 0 */
    bool sent =
        mine && COLLECTIVE("MPI_Gather", MPI_Gather(mine, 2 * n + 1, MPI_INT64_T, all, 2 * n + 1,
                                                    MPI_INT64_T, 0, MPI_COMM_WORLD));
    if (g_rank == 0 && sent) {
        if (ok && !full) {
            cg_set_error("dist: gather_optim: rank 0 has no optimizer to gather into");
            ok = false;
        }
        ok = ok && cg_optim_copy_state(full, shard);
        for (int q = 1; ok && q < g_size; q++)
            if (all[q * (2 * n + 1) + 2 * n] != 1) {
                cg_set_error("dist: gather_optim: rank %d could not read its shard", q);
                ok = false;
            }
    }
    /* rank 0's verdict: every rank goes on with the gathers, or none */
    double v = g_rank == 0 && sent && ok ? 1 : 0;
    bool go = sent && cg_dist_broadcast_bytes(&v, sizeof v) && v == 1;
    if (sent && v != 1 && g_rank != 0 && ok)
        cg_set_error("dist: gather_optim: rank 0 could not gather the optimizer state");
    static const char *const what[3] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    for (int i = 0; go && i < n; i++) {
        for (int k = 0; k < 3; k++) {
            cg_tensor *src = cg_optim_state(shard, i, what[k]);
            if (!src) {
                cg_clear_error(); /* this type has no such buffer (the same on every rank) */
                continue;
            }
            float *dst = NULL;
            if (g_rank == 0) {
                cg_tensor *d = cg_optim_state(full, i, what[k]);
                ok = d != NULL;
                dst = ok ? cg_data(d) : NULL;
                for (int q = 0; ok && q < g_size; q++) {
                    int64_t lo = all[q * (2 * n + 1) + 2 * i],
                            hi = all[q * (2 * n + 1) + 2 * i + 1];
                    displs[q] = (int)lo;
                    counts[q] = (int)(hi - lo);
                }
                if (d)
                    cg_tensor_modified(d);
            }
            ok = COLLECTIVE("MPI_Gatherv",
                            MPI_Gatherv(cg_data(src), (int)cg_numel(src), MPI_FLOAT, dst, counts,
                                        displs, MPI_FLOAT, 0, MPI_COMM_WORLD)) &&
                 ok;
        }
    }
    free(mine);
    free(all);
    free(counts);
    free(displs);
    return go && ok;
}

double cg_dist_reducer_exposed_seconds(const cg_dist_reducer *r) { return r ? r->exposed : 0; }
int cg_dist_reducer_buckets(const cg_dist_reducer *r) { return r ? r->nb : 0; }

void cg_dist_reducer_free(cg_dist_reducer *r)
{
    if (!r)
        return;
    for (int j = 0; r->b && j < r->nb; j++) {
        if (r->b[j].started && r->b[j].req != MPI_REQUEST_NULL)
            MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        cg_free(r->b[j].buf);
    }
    for (int i = 0; r->params && i < r->n; i++)
        if (r->params[i])
            cg_grad_ready_hook_remove(r->params[i]);
    free(r->counts);
    free(r->displs);
    free(r->flags);
    free(r->own);
    free(r->params);
    free(r->order);
    free(r->bucket_of);
    free(r->offset);
    free(r->done);
    free(r->b);
    free(r);
}

static bool allreduce_d(double *v, int n, MPI_Op op)
{
    if (g_size == 1 || n <= 0)
        return true;
    if (!v) {
        cg_set_error("dist: allreduce: NULL buffer");
        return false;
    }
    if (!check_inited("allreduce"))
        return false;
    return COLLECTIVE("MPI_Allreduce",
                      MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, op, MPI_COMM_WORLD));
}

bool cg_dist_allreduce_sum(double *v, int n) { return allreduce_d(v, n, MPI_SUM); }
bool cg_dist_allreduce_max(double *v, int n) { return allreduce_d(v, n, MPI_MAX); }

bool cg_dist_barrier(void)
{
    if (g_size == 1)
        return true;
    if (!check_inited("barrier"))
        return false;
    return COLLECTIVE("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
}
#endif /* CG_HAVE_MPI */

/* ------------------------------------------------ module wrappers */
bool cg_dist_broadcast_module(cg_module *m)
{
    int n = 0;
    cg_tensor **ts = module_tensors(m, &n);
    if (!ts)
        return false;
    bool ok = cg_dist_broadcast_tensors(n, ts);
    free(ts);
    return ok;
}

bool cg_dist_average_grads(cg_module *m, double weight)
{
    int n = 0;
    cg_tensor **ts = module_tensors(m, &n);
    if (!ts)
        return false;
    bool ok = cg_dist_average_grads_tensors(n, ts, weight);
    free(ts);
    return ok;
}

/* ------------------------------------------------ ZeRO-1: global checks */
double cg_dist_clip_grad_norm(cg_optim *shard, double max_norm)
{
    if (!shard || !(max_norm >= 0)) {
        cg_set_error("dist: clip_grad_norm: %s",
                     !shard ? "optimizer is NULL" : "max_norm must be >= 0");
        return -1;
    }
    double ss = cg_optim_grad_sqsum(shard);
    /* the sum of squares and whether some rank failed, on every rank */
    double v[2] = {ss >= 0 ? ss : 0, ss < 0 ? 1 : 0};
    if (!cg_dist_allreduce_sum(v, 2))
        return -1;
    if (v[1] > 0) {
        if (ss >= 0)
            cg_set_error("dist: clip_grad_norm: another rank could not read its gradients");
        return -1;
    }
    double total = sqrt(v[0]);
    if (max_norm > 0 && !cg_optim_clip_grads_by(shard, total, max_norm))
        return -1;
    return total;
}

bool cg_dist_grads_finite(const cg_optim *shard)
{
    int n = cg_optim_count(shard), bad = -1;
    bool fine = cg_optim_grads_finite(shard, &bad);
    char mine[512] = "";
    if (!fine)
        snprintf(mine, sizeof mine, "%s", cg_last_error());
    /* the first culprit in optimizer order over all ranks: the largest n - bad */
    double first = fine ? 0 : (double)(n - bad);
    if (!cg_dist_allreduce_max(&first, 1))
        return false;
    if (first == 0)
        return true;
    int culprit = n - (int)first;
    if (!fine && bad == culprit)
        cg_set_error("%s (on rank %d)", mine, cg_dist_rank());
    else
        cg_set_error("non-finite gradient: '%s' has a NaN or Inf in another rank's shard",
                     cg_optim_param_name(shard, culprit));
    return false;
}
