/* cgrad core, INTERNAL: the LAPACK routines core/linalg*.c call,
 * as their Fortran symbols (LAPACK 3, 32-bit integers: Debian's
 * liblapack3 and the libraries that replace it, OpenBLAS among them).
 * Matrices are column-major; every argument is a pointer; a character
 * argument's hidden length (gfortran's ABI: a size_t after the others,
 * one per character argument, in order) is passed, always 1. The
 * products and triangular solves of the backwards are core/linalg.c's own
 * loops, not BLAS: the static BLIS that libcgrad links also exports
 * BLAS's names, and its allocator ends the process when malloc fails.
 * The calls go through cg_lapack()'s table: la->dgetrf(...). Not
 * installed. */
#ifndef CG_CORE_LAPACK_H
#define CG_CORE_LAPACK_H

#include <stddef.h>

typedef int cg_lapack_int;
#define CG_LA_INT cg_lapack_int

/* LU with partial pivoting, and solves with it */
typedef void cg_la_dgetrf_fn(const CG_LA_INT *m, const CG_LA_INT *n, double *a,
                             const CG_LA_INT *lda, CG_LA_INT *ipiv, CG_LA_INT *info);
typedef void cg_la_dgetrs_fn(const char *trans, const CG_LA_INT *n, const CG_LA_INT *nrhs,
                             const double *a, const CG_LA_INT *lda, const CG_LA_INT *ipiv,
                             double *b, const CG_LA_INT *ldb, CG_LA_INT *info, size_t);
/* Cholesky */
typedef void cg_la_dpotrf_fn(const char *uplo, const CG_LA_INT *n, double *a, const CG_LA_INT *lda,
                             CG_LA_INT *info, size_t);
/* QR: Householder reflectors, then Q made from them */
typedef void cg_la_dgeqrf_fn(const CG_LA_INT *m, const CG_LA_INT *n, double *a,
                             const CG_LA_INT *lda, double *tau, double *work,
                             const CG_LA_INT *lwork, CG_LA_INT *info);
typedef void cg_la_dorgqr_fn(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *k, double *a,
                             const CG_LA_INT *lda, const double *tau, double *work,
                             const CG_LA_INT *lwork, CG_LA_INT *info);
/* symmetric eigenvalues (divide and conquer) */
typedef void cg_la_dsyevd_fn(const char *jobz, const char *uplo, const CG_LA_INT *n, double *a,
                             const CG_LA_INT *lda, double *w, double *work, const CG_LA_INT *lwork,
                             CG_LA_INT *iwork, const CG_LA_INT *liwork, CG_LA_INT *info, size_t,
                             size_t);
/* SVD (divide and conquer, PyTorch's default driver gesdd) */
typedef void cg_la_dgesdd_fn(const char *jobz, const CG_LA_INT *m, const CG_LA_INT *n, double *a,
                             const CG_LA_INT *lda, double *s, double *u, const CG_LA_INT *ldu,
                             double *vt, const CG_LA_INT *ldvt, double *work,
                             const CG_LA_INT *lwork, CG_LA_INT *iwork, CG_LA_INT *info, size_t);
/* least squares by complete orthogonal factorisation (PyTorch's CPU
 * default driver gelsy) */
typedef void cg_la_dgelsy_fn(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *nrhs,
                             double *a, const CG_LA_INT *lda, double *b, const CG_LA_INT *ldb,
                             CG_LA_INT *jpvt, const double *rcond, CG_LA_INT *rank, double *work,
                             const CG_LA_INT *lwork, CG_LA_INT *info);

/* The routines, loaded when torch.linalg is first used (core/lapack.c):
 * never linked, so that a program that uses no linear algebra never loads
 * liblapack.so.3 and whatever provides it (OpenBLAS, where Debian's
 * alternatives point there, starts its threads and maps its buffers when
 * loaded, and under an address-space limit never returns). */
typedef struct {
    cg_la_dgetrf_fn *dgetrf;
    cg_la_dgetrs_fn *dgetrs;
    cg_la_dpotrf_fn *dpotrf;
    cg_la_dgeqrf_fn *dgeqrf;
    cg_la_dorgqr_fn *dorgqr;
    cg_la_dsyevd_fn *dsyevd;
    cg_la_dgesdd_fn *dgesdd;
    cg_la_dgelsy_fn *dgelsy;
} cg_lapack_fns;
/* The table, loaded once (thread-safe); NULL + error naming op when
 * liblapack.so.3 or one of the routines cannot be loaded. */
const cg_lapack_fns *cg_lapack(const char *op);
/* The table whatever happened (a routine that could not be loaded is a
 * stub answering info = -1000): what the call sites below go through,
 * after cg_la_new or cg_la_batch has checked cg_lapack. */
const cg_lapack_fns *cg_lapack_table(void);
#define dgetrf_ (cg_lapack_table()->dgetrf)
#define dgetrs_ (cg_lapack_table()->dgetrs)
#define dpotrf_ (cg_lapack_table()->dpotrf)
#define dgeqrf_ (cg_lapack_table()->dgeqrf)
#define dorgqr_ (cg_lapack_table()->dorgqr)
#define dsyevd_ (cg_lapack_table()->dsyevd)
#define dgesdd_ (cg_lapack_table()->dgesdd)
#define dgelsy_ (cg_lapack_table()->dgelsy)

#endif
