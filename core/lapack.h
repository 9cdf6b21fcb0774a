/* cgrad core, INTERNAL: the LAPACK routines core/linalg*.c call,
 * as their Fortran symbols (LAPACK 3, 32-bit integers: Debian's
 * liblapack3 and the libraries that replace it, OpenBLAS among them).
 * Matrices are column-major; every argument is a pointer; a character
 * argument's hidden length (gfortran's ABI: a size_t after the others,
 * one per character argument, in order) is passed, always 1. The
 * products and triangular solves of the backwards are core/linalg.c's own
 * loops, not BLAS: the static BLIS that libcgrad links also exports
 * BLAS's names, and its allocator ends the process when malloc fails.
 * Not installed. */
#ifndef CG_CORE_LAPACK_H
#define CG_CORE_LAPACK_H

#include <stddef.h>

typedef int cg_lapack_int;
#define CG_LA_INT cg_lapack_int

/* LU with partial pivoting, and solves with it */
void dgetrf_(const CG_LA_INT *m, const CG_LA_INT *n, double *a, const CG_LA_INT *lda,
             CG_LA_INT *ipiv, CG_LA_INT *info);
void dgetrs_(const char *trans, const CG_LA_INT *n, const CG_LA_INT *nrhs, const double *a,
             const CG_LA_INT *lda, const CG_LA_INT *ipiv, double *b, const CG_LA_INT *ldb,
             CG_LA_INT *info, size_t);
/* Cholesky */
void dpotrf_(const char *uplo, const CG_LA_INT *n, double *a, const CG_LA_INT *lda, CG_LA_INT *info,
             size_t);
/* QR: Householder reflectors, then Q made from them */
void dgeqrf_(const CG_LA_INT *m, const CG_LA_INT *n, double *a, const CG_LA_INT *lda, double *tau,
             double *work, const CG_LA_INT *lwork, CG_LA_INT *info);
void dorgqr_(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *k, double *a,
             const CG_LA_INT *lda, const double *tau, double *work, const CG_LA_INT *lwork,
             CG_LA_INT *info);
/* symmetric eigenvalues (divide and conquer) */
void dsyevd_(const char *jobz, const char *uplo, const CG_LA_INT *n, double *a,
             const CG_LA_INT *lda, double *w, double *work, const CG_LA_INT *lwork,
             CG_LA_INT *iwork, const CG_LA_INT *liwork, CG_LA_INT *info, size_t, size_t);
/* SVD (divide and conquer, PyTorch's default driver gesdd) */
void dgesdd_(const char *jobz, const CG_LA_INT *m, const CG_LA_INT *n, double *a,
             const CG_LA_INT *lda, double *s, double *u, const CG_LA_INT *ldu, double *vt,
             const CG_LA_INT *ldvt, double *work, const CG_LA_INT *lwork, CG_LA_INT *iwork,
             CG_LA_INT *info, size_t);
/* least squares by complete orthogonal factorisation (PyTorch's CPU
 * default driver gelsy) */
void dgelsy_(const CG_LA_INT *m, const CG_LA_INT *n, const CG_LA_INT *nrhs, double *a,
             const CG_LA_INT *lda, double *b, const CG_LA_INT *ldb, CG_LA_INT *jpvt,
             const double *rcond, CG_LA_INT *rank, double *work, const CG_LA_INT *lwork,
             CG_LA_INT *info);

#endif
