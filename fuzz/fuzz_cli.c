/* libFuzzer target: the flag parser of the programs (models/util/cli.h).
 *
 * The input is split at NUL and newline bytes into argv (at most 64
 * arguments), parsed against a table with one option of every kind, and
 * each number parser is also run on the first argument alone. Accepted
 * values must satisfy the table's ranges. The same argv is split into
 * flags and positional arguments (cg_cli_split, the commands that take
 * both): the two keep argv's order and hold all of it but the "--" that
 * ends the flags, and the flags parse as a command line of flags alone
 * (never "unexpected argument"). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "fuzz/fuzz.h"
#include "models/util/cli.h"

#define MAX_ARGS 64

/* cg_cli_split of argv against opts (n rows), checked. */
static void check_split(int argc, char **argv, const cg_cli_opt *opts, int n)
{
    char *flags[MAX_ARGS + 1], *pos[MAX_ARGS + 1];
    int nf = -1, np = -1;
    cg_cli_split(argc, argv, opts, n, flags, &nf, pos, &np);
    /* argv is flags and positionals interleaved, in order, but for the
     * first "--" outside a flag's value */
    int i = 0, f = 0, q = 0, ends = 0;
    for (; i < argc; i++) {
        if (f < nf && argv[i] == flags[f]) {
            f++;
        } else if (q < np && argv[i] == pos[q]) {
            /* before the end of the flags a positional never looks like one */
            CG_FUZZ_CHECK(ends || (strncmp(argv[i], "--", 2) != 0 && strcmp(argv[i], "-h") != 0));
            q++;
        } else {
            CG_FUZZ_CHECK(!ends && strcmp(argv[i], "--") == 0);
            ends = 1;
        }
    }
    CG_FUZZ_CHECK(f == nf && q == np && nf + np + ends == argc);
    bool help = false;
    flags[nf] = NULL;
    cg_clear_error();
    if (!cg_cli_parse(nf, flags, opts, n, &help))
        CG_FUZZ_CHECK(cg_has_error() && strncmp(cg_last_error(), "unexpected argument", 19) != 0);
    /* no positionals: the flags are argv itself, parsed the same way */
    /* no positionals: the flags are argv itself (same order, checked above) */
    if (np == 0)
        CG_FUZZ_CHECK(nf == argc - ends);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    CG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    char *p = buf, *end = buf + size;
    while (p <= end && argc < MAX_ARGS) {
        char *q = p;
        while (q < end && *q != '\0' && *q != '\n')
            q++;
        *q = '\0';
        argv[argc++] = p;
        p = q + 1;
    }
    argv[argc] = NULL;

    int64_t steps = 7;
    uint64_t seed = 3;
    double lr = 0.5, wide = 0.0;
    bool flag_b = false, sw = false, help = false;
    const char *str = NULL;
    const cg_cli_opt opts[] = {
        {"--steps", CG_CLI_I64, &steps, 1, 1e6, NULL, 0},
        {"--seed", CG_CLI_U64, &seed, 0, 0, NULL, 0},
        {"--lr", CG_CLI_F64, &lr, 0, 10, NULL, 0},
        {"--wide", CG_CLI_F64, &wide, -1e300, 1e300, NULL, 0},
        {"--norm-first", CG_CLI_BOOL, &flag_b, 0, 0, NULL, 0},
        {"--out", CG_CLI_STR, &str, 0, 0, NULL, 0},
        {"--quiet", CG_CLI_SWITCH, &sw, 0, 0, NULL, 0},
    };
    cg_clear_error();
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    bool ok = cg_cli_parse_args(argc, argv, &args, &help);
    bool seen_steps = cg_cli_given(&args, &steps), seen_lr = cg_cli_given(&args, &lr);
    if (!ok) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0' && !help);
    } else {
        CG_FUZZ_CHECK(steps == 7 || (seen_steps && steps >= 1 && steps <= 1000000));
        CG_FUZZ_CHECK(lr == 0.5 || (seen_lr && lr >= 0 && lr <= 10));
        CG_FUZZ_CHECK(isfinite(wide));
        if (str) /* points into argv */
            CG_FUZZ_CHECK(str >= buf && str < buf + size + 1 && *str != '\0');
    }

    /* the number parsers alone, on the first argument */
    int64_t i64;
    uint64_t u64;
    double f64;
    bool b;
    cg_clear_error();
    if (cg_parse_i64("--x", argv[0], -5, 5, &i64))
        CG_FUZZ_CHECK(i64 >= -5 && i64 <= 5);
    else
        CG_FUZZ_CHECK(cg_has_error());
    cg_clear_error();
    if (cg_parse_i64("--x", argv[0], INT64_MIN, INT64_MAX, &i64)) {
        char back[32];
        snprintf(back, sizeof back, "%lld", (long long)i64);
        (void)back;
    } else {
        CG_FUZZ_CHECK(cg_has_error());
    }
    cg_clear_error();
    if (!cg_parse_u64("--x", argv[0], &u64))
        CG_FUZZ_CHECK(cg_has_error());
    cg_clear_error();
    if (cg_parse_f64("--x", argv[0], -1.0, 1.0, &f64))
        CG_FUZZ_CHECK(f64 >= -1.0 && f64 <= 1.0);
    else
        CG_FUZZ_CHECK(cg_has_error());
    cg_clear_error();
    if (!cg_parse_bool("--x", argv[0], &b))
        CG_FUZZ_CHECK(cg_has_error());

    check_split(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    free(buf);
    return 0;
}
