/* cgrad zoo: command-line parsing helpers (see cli.h). */
#include "models/util/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/tensor.h"
#include "core/utf8.h"
#include "models/util/files.h"

/* A switch: a flag without a value. */
static bool no_value(cg_cli_kind k) { return k == CG_CLI_SWITCH || k == CG_CLI_SWITCH_OFF; }

static bool set_value(const cg_cli_opt *o, const char *v)
{
    switch (o->kind) {
    case CG_CLI_I64:
        return cg_parse_i64(o->name, v, (int64_t)o->lo, (int64_t)o->hi, (int64_t *)o->dst);
    case CG_CLI_U64: return cg_parse_u64(o->name, v, (uint64_t *)o->dst);
    case CG_CLI_F64: return cg_parse_f64(o->name, v, o->lo, o->hi, (double *)o->dst);
    case CG_CLI_BOOL: return cg_parse_bool(o->name, v, (bool *)o->dst);
    case CG_CLI_STR:
    case CG_CLI_TEXT: {
        int64_t n;
        uint32_t *cp = NULL; /* the text decoded only to check it (core/utf8.h's message) */
        if (!*v) {
            cg_set_error("%s: empty value", o->name);
            return false;
        }
        if (o->kind == CG_CLI_TEXT && !(cp = cg_utf8_decode_exact(v, strlen(v), o->name, &n)))
            return false;
        free(cp);
        *(const char **)o->dst = v;
        return true;
    }
    case CG_CLI_SWITCH:
    case CG_CLI_SWITCH_OFF: *(bool *)o->dst = o->kind == CG_CLI_SWITCH; return true;
    }
    return false;
}

/* The parse behind cg_cli_parse and cg_cli_parse_args; given (n entries,
 * zeroed) may be NULL. */
static bool parse(int argc, char **argv, const cg_cli_opt *opts, int n, bool *help, int *given)
{
    *help = false;
    int k = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = true;
            return true;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            cg_set_error("unexpected argument '%s' (try --help)", a);
            return false;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int j = 0;
        while (j < n &&
               !(opts[j].name && strlen(opts[j].name) == len && strncmp(opts[j].name, a, len) == 0))
            j++;
        if (j == n) {
            cg_set_error("unknown option '%.*s' (try --help)", (int)len, a);
            return false;
        }
        const cg_cli_opt *o = &opts[j];
        const char *v;
        if (no_value(o->kind)) {
            if (eq) {
                cg_set_error("%s takes no value", o->name);
                return false;
            }
            v = "";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) {
                cg_set_error("%s needs a value", o->name);
                return false;
            }
            v = argv[++i];
            if (strncmp(v, "--", 2) == 0 && isalpha((unsigned char)v[2])) { /* argparse's rule */
                cg_set_error("%s needs a value, got the option '%s' (a value that starts with "
                             "-- is written %s=VALUE)",
                             o->name, v, o->name);
                return false;
            }
        }
        if (!set_value(o, v))
            return false;
        if (given && !given[j])
            given[j] = ++k;
    }
    return true;
}

bool cg_cli_parse(int argc, char **argv, const cg_cli_opt *opts, int n, bool *help)
{
    return parse(argc, argv, opts, n, help, NULL);
}

bool cg_cli_parse_args(int argc, char **argv, cg_cli_args *a, bool *help)
{
    memset(a->given, 0, sizeof a->given);
    if (a->n > CG_CLI_MAX_OPTS) {
        *help = false;
        cg_set_error("a flag table of %d rows (at most %d)", a->n, CG_CLI_MAX_OPTS);
        return false;
    }
    return parse(argc, argv, a->opts, a->n, help, a->given);
}

bool cg_cli_given(const cg_cli_args *a, const void *dst)
{
    for (int j = 0; a && j < a->n; j++)
        if (a->given[j] && a->opts[j].dst == dst)
            return true;
    return false;
}

bool cg_cli_given_list(const cg_cli_args *a, unsigned flags, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int k = 1; a && k <= a->n; k++) /* command-line order */
        for (int j = 0; j < a->n; j++)
            if (a->given[j] == k && (a->opts[j].flags & flags) == flags)
                snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? ", " : "",
                         a->opts[j].name);
    return buf[0] != '\0';
}

void cg_cli_help(FILE *f, const cg_cli_opt *opts, int n)
{
    for (int j = 0; j < n; j++)
        if (opts[j].help)
            fputs(opts[j].help, f);
}

/* OMP_NUM_THREADS as asked when cg_cli_start lowered it to the CPUs, else 0. */
static int g_env_threads;

void cg_cli_streams(void)
{
    /* A closed fd 0, 1 or 2 would be the number the next open() returns:
     * a lock file would then get the JSON result, a log the progress
     * lines. Each is opened on /dev/null the wrong way round, so that a
     * write to a closed stdout (or a read of a closed stdin) still fails
     * as on a closed descriptor. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int k = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
            if (k >= 0 && k != fd) { /* a lower fd was closed too: it came first */
                dup2(k, fd);
                close(k);
            }
        }
    /* A file-size limit (ulimit -f) raises SIGXFSZ, whose default action
     * ends the process with no message and a temporary file left behind:
     * ignored, the write fails with EFBIG instead and is reported as a full
     * disk is (the temporary file removed, the old checkpoint kept). */
    signal(SIGXFSZ, SIG_IGN);
    /* A reader of the output that went away (`| head`, a closed pipe)
     * raises SIGPIPE, whose default action ends the process (exit 141,
     * a partial write elsewhere): ignored, the write fails with EPIPE and
     * takes the path of any failed write (one line, exit 1). Training
     * goes on to its checkpoint; a stream of output stops at once. */
    signal(SIGPIPE, SIG_IGN);
}

void cg_cli_start(void)
{
    cg_cli_streams();
    cg_omp_short_spin(); /* before any file is touched: the program may start again */
    g_env_threads = cg_cap_default_threads();
}

bool cg_cli_stdout_ok(void)
{
    errno = 0;
    return cg_output_flush(stdout);
}

void cg_cli_set_threads(const char *prog, int64_t n)
{
    if (n > 0) {
        cg_set_num_threads((int)cg_cli_threads(prog, n));
    } else if (g_env_threads > 0) {
        int cpus = cg_num_cpus();
        fprintf(stderr,
                "%s: warning: OMP_NUM_THREADS=%d is more than the %d CPU%s available; "
                "using %d (--threads N sets the count)\n",
                prog ? prog : "cgrad", g_env_threads, cpus, cpus == 1 ? "" : "s", cpus);
        g_env_threads = 0; /* once */
    }
}

int64_t cg_cli_threads(const char *prog, int64_t n)
{
    int cpus = cg_num_cpus();
    if (n <= cpus)
        return n;
    fprintf(stderr, "%s: warning: --threads %lld is more than the %d CPU%s available; using %d\n",
            prog ? prog : "cgrad", (long long)n, cpus, cpus == 1 ? "" : "s", cpus);
    return cpus;
}

void cg_cli_split(int argc, char **argv, const cg_cli_opt *opts, int n, char **flags, int *nf,
                  char **pos, int *np)
{
    *nf = *np = 0;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strncmp(a, "--", 2) == 0 || strcmp(a, "-h") == 0)) {
            flags[(*nf)++] = argv[i];
            if (strchr(a, '='))
                continue;
            for (int j = 0; j < n; j++)
                if (opts[j].name && strcmp(opts[j].name, a) == 0 && !no_value(opts[j].kind) &&
                    i + 1 < argc) {
                    flags[(*nf)++] = argv[++i];
                    break;
                }
            continue;
        }
        pos[(*np)++] = argv[i];
    }
}
