/* LAPACK, loaded when torch.linalg is first used (core/lapack.h says
 * why it is not linked): liblapack.so.3 opened once, its eight routines
 * looked up; where that fails, stubs that answer info = -1000 stand in,
 * and cg_lapack says why in one line. */
#include "core/lapack.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "core/error.h"

#define STUB_INFO (-1000)
static void s_getrf(const CG_LA_INT *m, const CG_LA_INT *n, double *a, const CG_LA_INT *lda,
                    CG_LA_INT *ipiv, CG_LA_INT *info)
{
    *info = STUB_INFO;
}
static void s_getrs(const char *t, const CG_LA_INT *n, const CG_LA_INT *nrhs, const double *a,
                    const CG_LA_INT *lda, const CG_LA_INT *ipiv, double *b, const CG_LA_INT *ldb,
                    CG_LA_INT *info, size_t l)
{
    *info = STUB_INFO;
}
static void s_potrf(const char *u, const CG_LA_INT *n, double *a, const CG_LA_INT *lda,
                    CG_LA_INT *info, size_t l)
{
    *info = STUB_INFO;
}
static void s_geqrf(const CG_LA_INT *m, const CG_LA_INT *n, double *a, const CG_LA_INT *lda,
                    double *tau, double *work, const CG_LA_INT *lwork, CG_LA_INT *info)
{
    work[0] = 1; /* a workspace query's answer: sizes stay sane */
    *info = STUB_INFO;
}
static void s_orgqr(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *k, double *a,
                    const CG_LA_INT *lda, const double *tau, double *work, const CG_LA_INT *lwork,
                    CG_LA_INT *info)
{
    work[0] = 1;
    *info = STUB_INFO;
}
static void s_syevd(const char *j, const char *u, const CG_LA_INT *n, double *a,
                    const CG_LA_INT *lda, double *w, double *work, const CG_LA_INT *lwork,
                    CG_LA_INT *iwork, const CG_LA_INT *liwork, CG_LA_INT *info, size_t l1,
                    size_t l2)
{
    work[0] = 1;
    iwork[0] = 1;
    *info = STUB_INFO;
}
static void s_gesdd(const char *j, const CG_LA_INT *m, const CG_LA_INT *n, double *a,
                    const CG_LA_INT *lda, double *s, double *u, const CG_LA_INT *ldu, double *vt,
                    const CG_LA_INT *ldvt, double *work, const CG_LA_INT *lwork, CG_LA_INT *iwork,
                    CG_LA_INT *info, size_t l)
{
    work[0] = 1;
    *info = STUB_INFO;
}
static void s_gelsy(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *nrhs, double *a,
                    const CG_LA_INT *lda, double *b, const CG_LA_INT *ldb, CG_LA_INT *jpvt,
                    const double *rcond, CG_LA_INT *rank, double *work, const CG_LA_INT *lwork,
                    CG_LA_INT *info)
{
    work[0] = 1;
    *info = STUB_INFO;
}

static cg_lapack_fns g_fns = {s_getrf, s_getrs, s_potrf, s_geqrf,
                              s_orgqr, s_syevd, s_gesdd, s_gelsy};
static char g_why[256]; /* empty: loaded */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *h = dlopen("liblapack.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_why, sizeof g_why, "%s", dlerror());
        return;
    }
    cg_lapack_fns f;
    static const char *const names[8] = {"dgetrf_", "dgetrs_", "dpotrf_", "dgeqrf_",
                                         "dorgqr_", "dsyevd_", "dgesdd_", "dgelsy_"};
    void **slot = (void **)&f;
    for (int i = 0; i < 8; i++) {
        if (!(slot[i] = dlsym(h, names[i]))) {
            snprintf(g_why, sizeof g_why, "liblapack.so.3 has no %s", names[i]);
            return;
        }
    }
    g_fns = f;
}

const cg_lapack_fns *cg_lapack_table(void)
{
    pthread_once(&g_once, load);
    return &g_fns;
}

const cg_lapack_fns *cg_lapack(const char *op)
{
    const cg_lapack_fns *f = cg_lapack_table();
    if (!g_why[0])
        return f;
    cg_set_error("%s: LAPACK could not be loaded (%s); install liblapack3", op, g_why);
    return NULL;
}
