/* Data-parallel training over MPI, built with meson's `mpi` option: starting
 * and stopping MPI, the watchdog, non-root output, and the plain collectives
 * (broadcast, gradient averaging, allreduce, barrier). The reduction during
 * backward is dist_reducer.c, the common part dist.c. See dist.h. */
#include "dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/parse.h"

#include <mpi.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "dist/dist_args.h"
#include "dist/dist_mpi.h"

/* ------------------------------------------------------------ state */
static bool g_inited;
static int g_rank = 0, g_size = 1;
static double g_comm_s;
static int64_t g_comm_bytes;

bool cg_dist_compiled_with_mpi(void) { return true; }

int cg_dist_rank(void) { return g_rank; }
int cg_dist_size(void) { return g_size; }

double cg_dist_comm_seconds(void) { return g_comm_s; }
int64_t cg_dist_comm_bytes(void) { return g_comm_bytes; }
void cg_dist_reset_stats(void)
{
    g_comm_s = 0;
    g_comm_bytes = 0;
}

void cg_dist_count(double seconds, int64_t bytes)
{
    g_comm_s += seconds;
    g_comm_bytes += bytes;
}

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
        if (!g_wd_stop && g_wd_what && cg_now() - g_wd_since > g_timeout) {
            dprintf(g_err_fd,
                    "cgrad dist: rank %d: %s did not finish within %g s (CG_DIST_TIMEOUT): "
                    "another rank probably died, hangs or took a different code path; "
                    "aborting the job\n",
                    g_rank, g_wd_what, g_timeout);
            /* exit: a rank is stuck in a collective; only ending the whole job frees the
             * others. This rank ends without finalizing, which mpirun answers by ending the
             * job (its exit status this one's): MPI_Abort is not called, since MPI was
             * started MPI_THREAD_FUNNELED and this is not the main thread. */
            _exit(124);
        }
    }
    pthread_mutex_unlock(&g_wd_mu);
    return NULL;
}

void cg_dist_wd_begin(const char *what)
{
    if (!g_wd_running)
        return;
    pthread_mutex_lock(&g_wd_mu);
    g_wd_what = what;
    g_wd_since = cg_now();
    pthread_mutex_unlock(&g_wd_mu);
}

void cg_dist_wd_end(void)
{
    if (!g_wd_running)
        return;
    pthread_mutex_lock(&g_wd_mu);
    g_wd_what = NULL;
    pthread_mutex_unlock(&g_wd_mu);
}

bool cg_dist_mpi_ok(int rc, const char *what)
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
bool cg_dist_collective_done(const char *what, int rc)
{
    cg_dist_wd_end();
    return cg_dist_mpi_ok(rc, what);
}
static void dump_log_at_exit(void);

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
    if (!cg_dist_mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank") ||
        !cg_dist_mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &g_size), "MPI_Comm_size"))
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

/* exit: a program's last resort under MPI (prog.c): the other ranks would
 * wait forever in their next collective, so the whole job ends here. */
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

void cg_dist_seg_pack(float *b, float *t, int64_t n, float s)
{
    if (s == 1.0f)
        memcpy(b, t, (size_t)n * sizeof(float));
    else
        for (int64_t k = 0; k < n; k++)
            b[k] = t[k] * s;
}

void cg_dist_seg_unpack(float *b, float *t, int64_t n, float s)
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

bool cg_dist_check_inited(const char *what)
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
    if (!cg_dist_check_inited("broadcast"))
        return false;
    double t0 = cg_now();
    bool ok = true;
    for (size_t done = 0; ok && done < bytes;) {
        size_t chunk = bytes - done > (1u << 30) ? (1u << 30) : bytes - done;
        ok = COLLECTIVE("MPI_Bcast",
                        MPI_Bcast((char *)buf + done, (int)chunk, MPI_BYTE, 0, MPI_COMM_WORLD));
        done += chunk;
    }
    g_comm_s += cg_now() - t0;
    return ok;
}

bool cg_dist_broadcast_tensors(int n, cg_tensor *const *ts)
{
    if (!cg_dist_tensors_ok("broadcast", "tensor", n, ts, true))
        return false;
    if (g_size == 1)
        return true;
    if (!cg_dist_check_inited("broadcast") || !ensure_bucket())
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
    double t0 = cg_now();
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
        bufs[i] = cg_data(ts[i]);
        len[i] = cg_numel(ts[i]);
        total += len[i];
    }
    bool ok = true;
    for (int64_t lo = 0; ok && lo < total; lo += g_bucket_n) {
        int64_t hi = lo + g_bucket_n < total ? lo + g_bucket_n : total;
        if (g_rank == 0)
            for_segments(n, bufs, len, lo, hi, cg_dist_seg_pack, 1.0f);
        ok = COLLECTIVE("MPI_Bcast",
                        MPI_Bcast(g_bucket, (int)(hi - lo), MPI_FLOAT, 0, MPI_COMM_WORLD));
        if (ok && g_rank != 0)
            for_segments(n, bufs, len, lo, hi, cg_dist_seg_unpack, 1.0f);
    }
    for (int i = 0; i < n; i++)
        cg_tensor_modified(ts[i]); /* the broadcast wrote it on every rank but 0 */
    free(bufs);
    free(len);
    g_comm_s += cg_now() - t0;
    return ok;
}

/* What every rank agrees on before averaging: mx[2 + i] becomes 1 when
 * parameter i has a gradient on some rank (mx: n + 2 doubles), and the
 * scales: equal weights sum, then scale by 1/size (*pre 1, *post 1/size);
 * otherwise each rank's gradient is scaled by its weight, summed, then
 * divided by the total weight. False + error (a failed collective, or
 * weights that sum to 0). */
static bool agree_weights(int n, cg_tensor *const *params, double weight, double *mx, float *pre,
                          float *post)
{
    mx[0] = weight;
    mx[1] = -weight;
    for (int i = 0; i < n; i++)
        mx[2 + i] = params[i]->grad ? 1.0 : 0.0;
    double wsum = weight;
    if (!COLLECTIVE("MPI_Allreduce",
                    MPI_Allreduce(MPI_IN_PLACE, mx, n + 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) ||
        !COLLECTIVE("MPI_Allreduce",
                    MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)))
        return false;
    if (!(wsum > 0)) {
        cg_set_error("dist: average_grads: the weights of all ranks sum to 0");
        return false;
    }
    bool equal = mx[0] == -mx[1];
    *pre = equal ? 1.0f : (float)weight;
    *post = equal ? (float)(1.0 / g_size) : (float)(1.0 / wsum);
    return true;
}

/* (dist_mpi.h) */
bool cg_dist_own_grad(cg_tensor *p)
{
    cg_tensor *g = p->grad;
    if (g && cg_is_contiguous(g) && g->storage->refcount == 1 && g->refcount == 1 && !g->node)
        return true;
    g = g ? cg_k_clone(g) : cg_zeros_like(p);
    if (!g)
        return false;
    cg_release_held(p->grad);
    p->grad = cg_hold(g);
    return true;
}

/* Every parameter whose gradient exists on some rank (has[i] != 0) gets a
 * contiguous gradient of its own to reduce in place (zeros where this rank
 * has none); bufs[i] and len[i] say where it is (NULL and 0 for the
 * others), *total adds their elements. False + error. */
static bool own_grads(int n, cg_tensor *const *params, const double *has, float **bufs,
                      int64_t *len, int64_t *total)
{
    for (int i = 0; i < n; i++) {
        cg_tensor *p = params[i];
        bufs[i] = NULL;
        len[i] = 0;
        if (has[i] == 0)
            continue; /* no gradient on any rank: stays NULL */
        if (!cg_dist_own_grad(p))
            return false;
        if (cg_numel(p->grad) != cg_numel(p)) {
            cg_set_error("dist: average_grads: parameter %d has a gradient of %lld elements "
                         "for %lld values",
                         i, (long long)cg_numel(p->grad), (long long)cg_numel(p));
            return false;
        }
        bufs[i] = cg_data(p->grad);
        len[i] = cg_numel(p->grad);
        *total += len[i];
    }
    return true;
}

bool cg_dist_average_grads_tensors(int n, cg_tensor *const *params, double weight)
{
    if (!cg_dist_tensors_ok("average_grads", "parameter", n, params, false) ||
        !cg_dist_weight_ok("average_grads", weight))
        return false;
    if (g_size == 1)
        return true;
    if (!cg_dist_check_inited("average_grads") || !ensure_bucket())
        return false;
    double t0 = cg_now();

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
    float pre = 1.0f, post = 1.0f;
    int64_t total = 0;
    bool ok = agree_weights(n, params, weight, mx, &pre, &post) &&
              own_grads(n, params, mx + 2, bufs, len, &total);
    for (int64_t lo = 0; ok && lo < total; lo += g_bucket_n) {
        int64_t hi = lo + g_bucket_n < total ? lo + g_bucket_n : total;
        for_segments(n, bufs, len, lo, hi, cg_dist_seg_pack, pre);
        ok = COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, g_bucket, (int)(hi - lo),
                                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        if (ok)
            for_segments(n, bufs, len, lo, hi, cg_dist_seg_unpack, post);
        g_comm_bytes += (hi - lo) * (int64_t)sizeof(float);
    }
    free(mx);
    free(bufs);
    free(len);
    g_comm_s += cg_now() - t0;
    return ok;
}

bool cg_dist_wait_for_root(void)
{
    if (g_size == 1)
        return true;
    if (!cg_dist_check_inited("wait_for_root"))
        return false;
    unsigned char token = 1; /* not under the watchdog: rank 0 takes its time */
    return cg_dist_mpi_ok(MPI_Bcast(&token, 1, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
}

static bool allreduce_d(double *v, int n, MPI_Op op)
{
    if (g_size == 1 || n <= 0)
        return true;
    if (!v) {
        cg_set_error("dist: allreduce: NULL buffer");
        return false;
    }
    if (!cg_dist_check_inited("allreduce"))
        return false;
    return COLLECTIVE("MPI_Allreduce",
                      MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, op, MPI_COMM_WORLD));
}

bool cg_dist_allreduce_sum(double *v, int n) { return allreduce_d(v, n, MPI_SUM); }
bool cg_dist_allreduce_max(double *v, int n) { return allreduce_d(v, n, MPI_MAX); }
