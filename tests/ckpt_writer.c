/* Helper of tests/test_kill.sh: writes and checks checkpoints of two known
 * versions, so that a writer killed at random moments can be checked.
 *
 *   ckpt_writer write PATH [COUNT]  save version A, B, A, B, ... to PATH
 *                                   (atomic cg_st_writer_save), COUNT times
 *                                   (0 or absent: until killed), printing
 *                                   "saved N" after each
 *   ckpt_writer torture DIR KILLS   the test (meson suite 'reliability'): KILLS
 *                                   times, fork a writer saving A/B to
 *                                   DIR/model.safetensors, let it complete a
 *                                   first save, SIGKILL it 0..50 ms later, then
 *                                   check the file (exactly A or B) and that
 *                                   at most one temporary file exists (the
 *                                   killed writer's: the next save removes it);
 *                                   finally one clean save must leave none
 *                                   (DIR is created if missing)
 *   ckpt_writer same A B            exit 0 if the two safetensors files hold
 *                                   the same tensor names with bit-identical
 *                                   bytes (metadata is not compared), else
 *                                   name the first difference and exit 1
 *   ckpt_writer close A B TOL       the same names; F32 tensors within TOL
 *                                   relative to the largest |value| of B's
 *                                   tensor (attention key biases and their
 *                                   optimizer state skipped: their true
 *                                   gradient is 0, see tests/testutil.c),
 *                                   others bit-identical; prints the worst
 *                                   tensor and difference
 *   ckpt_writer poison PATH NAME    rewrite PATH (atomically) with element 0
 *                                   of F32 tensor NAME set to NaN
 *   ckpt_writer setval PATH NAME X  the same with element 0 set to X (e.g. -1, inf)
 *   ckpt_writer setmeta PATH KEY VALUE   rewrite PATH with metadata KEY = VALUE
 *   ckpt_writer getmeta PATH KEY         print metadata KEY (exit 1 if absent)
 *   ckpt_writer addtensor PATH NAME      rewrite PATH with an extra [2] F32
 *                                   tensor NAME
 *   ckpt_writer flipbyte PATH NAME  rewrite PATH with the middle byte of U8
 *                                   tensor NAME flipped (a damaged tokenizer)
 *   ckpt_writer check PATH          print A, B or none (no file); exit 1 with
 *                                   a message if the file does not load or is
 *                                   not exactly A or B (a mixture, a
 *                                   truncated or a corrupted file)
 *
 * The versions: 6 F32 tensors of 96K values each (2.3 MB) and one I64, all
 * computed from the version's seed, plus metadata "version". */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "nn/safetensors.h"

#define NT 6
#define NV (96 * 1024)

static float value(int version, int t, int64_t i)
{
    /* distinct in every tensor and version; exact in float32 */
    return (float)((version * 7919 + t * 104729 + i * 31) % 1000003) - 500000.0f;
}

static cg_st_writer *make_version(int version, float *buf)
{
    cg_st_writer *w = cg_st_writer_new();
    if (!w)
        return NULL;
    char name[32];
    int64_t shape[2] = {96, 1024};
    bool ok = cg_st_set_metadata(w, "version", version ? "B" : "A");
    for (int t = 0; ok && t < NT; t++) {
        for (int64_t i = 0; i < NV; i++)
            buf[i] = value(version, t, i);
        snprintf(name, sizeof name, "layers.%d.weight", t);
        ok = cg_st_add_f32_raw(w, name, 2, shape, buf);
    }
    int64_t step = version ? 2000 : 1000, s1[1] = {1};
    cg_tensor *st = cg_from_i64(1, s1, &step);
    ok = ok && cg_st_add(w, "step", st);
    cg_release(st);
    if (!ok) {
        cg_st_writer_free(w);
        return NULL;
    }
    return w;
}

/* 0 and *version = 0 (A), 1 (B) or -1 (no file); 1 + a message on stderr
 * if the file is damaged. */
static int check_version(const char *path, int *version_out)
{
    *version_out = -1;
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return 0;
    fclose(probe);
    cg_st_file *f = cg_st_open(path);
    if (!f) {
        fprintf(stderr, "ckpt_writer: checkpoint does not load: %s\n", cg_last_error());
        return 1;
    }
    const char *v = cg_st_metadata(f, "version");
    if (!v || (strcmp(v, "A") != 0 && strcmp(v, "B") != 0)) {
        fprintf(stderr, "ckpt_writer: bad version metadata\n");
        cg_st_close(f);
        return 1;
    }
    int version = v[0] == 'B'; /* v dies with f */
    int bad = 0;
    if (cg_st_count(f) != NT + 1)
        bad = 1;
    char name[32];
    for (int t = 0; !bad && t < NT; t++) {
        snprintf(name, sizeof name, "layers.%d.weight", t);
        size_t nb = 0;
        const float *d = cg_st_raw(f, name, &nb);
        if (!d || nb != NV * sizeof(float)) {
            bad = 1;
            break;
        }
        for (int64_t i = 0; i < NV; i++)
            if (d[i] != value(version, t, i)) {
                fprintf(stderr, "ckpt_writer: %s[%" PRId64 "] is not version %c's value\n", name, i,
                        version ? 'B' : 'A');
                bad = 1;
                break;
            }
    }
    size_t nb = 0;
    const int64_t *step = bad ? NULL : cg_st_raw(f, "step", &nb);
    if (!bad && (!step || nb != 8 || *step != (version ? 2000 : 1000)))
        bad = 1;
    cg_st_close(f);
    if (bad) {
        fprintf(stderr, "ckpt_writer: checkpoint is not exactly version A or B\n");
        return 1;
    }
    *version_out = version;
    return 0;
}

static int check(const char *path)
{
    int v;
    if (check_version(path, &v))
        return 1;
    printf("%s\n", v < 0 ? "none" : v ? "B" : "A");
    return 0;
}

static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "model.safetensors.tmp.", 22) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Save alternately until killed; one byte on fd after the first save. */
static void writer_loop(cg_st_writer **w, const char *path, int fd)
{
    for (long i = 0;; i++) {
        if (!cg_st_writer_save(w[i % 2], path)) {
            fprintf(stderr, "ckpt_writer: %s\n", cg_last_error());
            _exit(1);
        }
        if (i == 0 && write(fd, "s", 1) != 1)
            _exit(1);
    }
}

static int torture(const char *dir, long kills, cg_st_writer **w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    long seen[2] = {0, 0}, mid_save = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ckpt_writer: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    unlink(path);
    int max_tmp = 0;
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long k = 1; k <= kills; k++) {
        int pfd[2];
        if (pipe(pfd) != 0) {
            perror("ckpt_writer: pipe");
            return 1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("ckpt_writer: fork");
            return 1;
        }
        if (pid == 0) {
            close(pfd[0]);
            writer_loop(w, path, pfd[1]);
        }
        close(pfd[1]);
        char c;
        ssize_t got = read(pfd[0], &c, 1); /* first save done (or the child died) */
        close(pfd[0]);
        if (got == 1) {
            struct timespec d = {0, (long)(rand() % 50000) * 1000L}; /* 0..50 ms */
            nanosleep(&d, NULL);
        }
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
            fprintf(stderr, "ckpt_writer: kill %ld: the writer failed before the kill\n", k);
            return 1;
        }
        int v;
        if (check_version(path, &v) || v < 0) {
            fprintf(stderr, "ckpt_writer: kill %ld: the checkpoint is damaged or missing\n", k);
            return 1;
        }
        seen[v]++;
        int nt = count_temps(dir);
        mid_save += nt > 0;
        if (nt > max_tmp)
            max_tmp = nt;
        if (nt > 1) {
            fprintf(stderr, "ckpt_writer: kill %ld: %d temporary files accumulated\n", k, nt);
            return 1;
        }
    }
    if (!cg_st_writer_save(w[0], path) || count_temps(dir) != 0) {
        fprintf(stderr, "ckpt_writer: temporary files left after a clean save\n");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("kill test: %ld SIGKILLs (%ld mid-save): checkpoint always loaded as exactly A (%ld) "
           "or B (%ld); temp files <= %d, 0 after a clean save; %.1f s\n",
           kills, mid_save, seen[0], seen[1], max_tmp,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}

/* tol < 0: bit-identical; otherwise the relative bound of `close` */
static int compare(const char *a, const char *b, double tol)
{
    cg_st_file *fa = cg_st_open(a), *fb = fa ? cg_st_open(b) : NULL;
    int rc = 0;
    if (!fa || !fb) {
        fprintf(stderr, "ckpt_writer: %s\n", cg_last_error());
        rc = 1;
    } else if (cg_st_count(fa) != cg_st_count(fb)) {
        fprintf(stderr, "ckpt_writer: %d tensors vs %d\n", cg_st_count(fa), cg_st_count(fb));
        rc = 1;
    }
    double worst = 0;
    char wname[256] = "";
    for (int i = 0; rc == 0 && i < cg_st_count(fa); i++) {
        const char *name = cg_st_name(fa, i);
        size_t na, nb;
        const void *da = cg_st_raw(fa, name, &na);
        const void *db = cg_st_has(fb, name) ? cg_st_raw(fb, name, &nb) : NULL;
        cg_st_dtype dt;
        bool f32 = db && cg_st_info(fa, name, &dt, NULL, NULL) && dt == CG_ST_F32;
        if (tol >= 0 && f32 && na == nb) {
            if (strstr(name, "k_proj.bias"))
                continue;
            const float *x = da, *y = db;
            double d = 0, ymax = 0;
            for (size_t k = 0; k < na / sizeof(float); k++) {
                d = fmax(d, fabs((double)x[k] - y[k]));
                ymax = fmax(ymax, fabs((double)y[k]));
            }
            double rel = d / fmax(ymax, 1e-30);
            if (!(rel <= worst)) {
                worst = rel;
                snprintf(wname, sizeof wname, "%s", name);
            }
            continue;
        }
        if (!db || na != nb || memcmp(da, db, na) != 0) {
            fprintf(stderr, "ckpt_writer: tensor '%s' differs between %s and %s\n", name, a, b);
            rc = 1;
        }
    }
    if (rc == 0 && tol >= 0) {
        printf("max rel diff %.3g (%s)\n", worst, wname[0] ? wname : "every tensor equal");
        if (!(worst <= tol)) {
            fprintf(stderr, "ckpt_writer: %s and %s differ by %g relative in '%s' (bound %g)\n", a,
                    b, worst, wname, tol);
            rc = 1;
        }
    }
    cg_st_close(fa);
    cg_st_close(fb);
    return rc;
}

static int same(const char *a, const char *b) { return compare(a, b, -1); }

/* Rewrite path with one change: poison or setval (target: an F32 tensor; NaN
 * or value), setmeta
 * (metadata target = value), addtensor (a [2] F32 tensor named target) or
 * flipbyte (target: a U8 tensor). */
static int rewrite(const char *path, const char *mode, const char *target, const char *value)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    bool flip = strcmp(mode, "flipbyte") == 0;
    bool setval = strcmp(mode, "setval") == 0;
    bool ok = f && w, found = strcmp(mode, "poison") != 0 && !setval && !flip;
    for (int i = 0; ok && i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        ok = cg_st_set_metadata(w, k, cg_st_metadata(f, k));
    }
    if (ok && strcmp(mode, "setmeta") == 0)
        ok = cg_st_set_metadata(w, target, value);
    if (ok && strcmp(mode, "addtensor") == 0)
        ok = cg_st_add_f32_raw(w, target, 1, (int64_t[]){2}, (float[]){1.0f, 2.0f});
    for (int i = 0; ok && i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        ok = cg_st_info(f, name, &dt, &nd, shape);
        if (ok && dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, name);
            if (t && !found && strcmp(name, target) == 0 && cg_numel(t) > 0) {
                cg_data(t)[0] = setval ? strtof(value, NULL) : NAN;
                found = true;
            }
            ok = t && cg_st_add_f32(w, name, t);
            cg_release(t);
        } else if (ok && dt == CG_ST_I64) {
            cg_tensor *v = cg_st_get(f, name);
            ok = v && cg_st_add(w, name, v);
            cg_release(v);
        } else if (ok && dt == CG_ST_U8 && nd == 1) {
            size_t len;
            const unsigned char *raw = cg_st_raw(f, name, &len);
            unsigned char *v = raw ? malloc(len ? len : 1) : NULL;
            ok = v != NULL;
            if (ok) {
                memcpy(v, raw, len);
                if (flip && !found && strcmp(name, target) == 0 && len > 0) {
                    v[len / 2] ^= 0x40;
                    found = true;
                }
                ok = cg_st_add_u8(w, name, (int64_t)len, v);
            }
            free(v);
        } else if (ok) {
            cg_set_error("tensor '%s': dtype %s not supported", name, cg_st_dtype_name(dt));
            ok = false;
        }
    }
    if (ok && !found) {
        cg_set_error("no %s tensor '%s' with elements in %s", flip ? "U8" : "F32", target, path);
        ok = false;
    }
    ok = ok && cg_st_writer_save(w, path);
    if (!ok)
        fprintf(stderr, "ckpt_writer: %s\n", cg_last_error());
    cg_st_writer_free(w);
    cg_st_close(f);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "same") == 0)
        return same(argv[2], argv[3]);
    if (argc >= 5 && strcmp(argv[1], "close") == 0)
        return compare(argv[2], argv[3], atof(argv[4]));
    if (argc >= 4 && strcmp(argv[1], "poison") == 0)
        return rewrite(argv[2], "poison", argv[3], NULL);
    if (argc >= 5 && strcmp(argv[1], "setval") == 0)
        return rewrite(argv[2], "setval", argv[3], argv[4]);
    if (argc >= 5 && strcmp(argv[1], "setmeta") == 0)
        return rewrite(argv[2], "setmeta", argv[3], argv[4]);
    if (argc >= 4 && strcmp(argv[1], "flipbyte") == 0)
        return rewrite(argv[2], "flipbyte", argv[3], NULL);
    if (argc >= 4 && strcmp(argv[1], "addtensor") == 0)
        return rewrite(argv[2], "addtensor", argv[3], NULL);
    if (argc >= 4 && strcmp(argv[1], "getmeta") == 0) {
        cg_st_file *f = cg_st_open(argv[2]);
        const char *v = f ? cg_st_metadata(f, argv[3]) : NULL;
        if (v)
            puts(v);
        cg_st_close(f);
        return v ? 0 : 1;
    }
    if (argc >= 3 && strcmp(argv[1], "check") == 0)
        return check(argv[2]);
    bool tort = argc >= 4 && strcmp(argv[1], "torture") == 0;
    if (!tort && (argc < 3 || strcmp(argv[1], "write") != 0)) {
        fprintf(stderr, "usage: ckpt_writer write PATH [COUNT] | check PATH | "
                        "torture DIR KILLS | same A B | poison PATH NAME\n");
        return 2;
    }
    long count = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
    float *buf = malloc(NV * sizeof *buf);
    cg_st_writer *w[2] = {buf ? make_version(0, buf) : NULL, buf ? make_version(1, buf) : NULL};
    free(buf);
    if (!w[0] || !w[1]) {
        fprintf(stderr, "ckpt_writer: %s\n", cg_last_error());
        return 1;
    }
    if (tort) {
        int rc = torture(argv[2], count, w);
        cg_st_writer_free(w[0]);
        cg_st_writer_free(w[1]);
        return rc;
    }
    for (long i = 0; count <= 0 || i < count; i++) {
        if (!cg_st_writer_save(w[i % 2], argv[2])) {
            fprintf(stderr, "ckpt_writer: %s\n", cg_last_error());
            return 1;
        }
        printf("saved %ld\n", i + 1); /* the test waits for the first one */
        fflush(stdout);
    }
    cg_st_writer_free(w[0]);
    cg_st_writer_free(w[1]);
    return 0;
}
