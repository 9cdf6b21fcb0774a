/* cgrad core: strict parsing of numbers and switches, for the programs'
 * flags and for every environment variable cgrad reads.
 *
 * A value is parsed whole: "12x", "", " 3", "0x10", "1e999" and values out
 * of range are errors. Every parser returns false and records a message
 * (cg_set_error) naming `what` (a flag or a variable) and the bad text,
 * changing nothing. */
#ifndef CG_PARSE_H
#define CG_PARSE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A decimal integer in [lo, hi]. */
bool cg_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* A non-negative decimal integer (up to 2^64-1), e.g. a seed. */
bool cg_parse_u64(const char *what, const char *s, uint64_t *out);
/* A finite decimal number (no hexadecimal, inf or nan) in [lo, hi]. */
bool cg_parse_f64(const char *what, const char *s, double lo, double hi, double *out);
/* true/false, 1/0, yes/no, on/off (any case). */
bool cg_parse_bool(const char *what, const char *s, bool *out);

/* strtod and snprintf as in the "C" locale, whatever locale the process
 * (a host program's setlocale(LC_ALL, "")) or the calling thread has: a
 * decimal point, never a comma, so that numbers cgrad writes into files,
 * metadata and JSON read back under any locale. cg_parse_f64 reads with
 * cg_strtod_c; the optimizer state, cg_train_state and the zoo's JSON write
 * with cg_snprintf_c. errno is strtod's / vsnprintf's. */
double cg_strtod_c(const char *s, char **end);
int cg_snprintf_c(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int cg_vsnprintf_c(char *buf, size_t n, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* The environment variables cgrad reads, each with its kind and range in
 * one table (core/parse.c): CG_MALLOC_DEFAULT, CG_ALLOC_CACHE_MB,
 * CG_BF16_EMULATE, CG_BF16_AMX, CG_AMX_EMULATE, CG_ATTN_AMX,
 * CG_BLIS_DRIVER, CG_BLIS_DEFAULT, CG_MAX_INPUT_MB, CG_DIST_MPI,
 * CG_DIST_TIMEOUT, CG_DIST_BUCKET_MB, CG_DIST_OVERLAP, CG_DIST_VERBOSE,
 * CG_DEBUG (fuzz/fuzz_env.c holds the same list). Unset or empty means "not
 * given".
 *
 * cg_env_number / cg_env_flag: *out is left as it is when the variable is
 * not given, set when it is valid; false + "environment variable NAME: ..."
 * when it is malformed or out of range (*out unchanged), or when NAME is
 * not in the table (or not of that kind). */
bool cg_env_number(const char *name, double *out);
bool cg_env_flag(const char *name, bool *out);
/* Every variable of the table: false + the message of the first malformed
 * one. The programs call it first and refuse to start on a bad value; the
 * library, which cannot fail where it reads some of them (the allocator,
 * the matmul set-up), keeps their defaults then. */
bool cg_env_check(void);

#ifdef __cplusplus
}
#endif
#endif
