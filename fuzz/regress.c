/* Runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer:
 * the corpus and every saved crash reproducer go through the same code in
 * the normal (gcc) build, so CI exercises them (meson test suite 'fuzz').
 *
 *   regress_<target> DIR_OR_FILE...
 *
 * Directories are read one level deep (hidden files skipped). Exit status 0
 * when every input ran (a bug aborts or crashes the process), 1 when an
 * argument could not be read, 77 (meson's "skipped") when there were no
 * inputs at all. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "regress: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "regress: cannot read '%s'\n", path);
        return -1;
    }
    /* an exact-size copy, so that ASan sees reads past the input's end */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int ran = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            /* a missing directory (e.g. no crashes saved yet) is fine */
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) == 0)
                ran++;
            else
                failed++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "regress: cannot open directory '%s': %s\n", argv[i], strerror(errno));
            failed++;
            continue;
        }
        char **names = NULL;
        size_t nn = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            if (nn == cap) {
                cap = cap ? 2 * cap : 64;
                char **nb = realloc(names, cap * sizeof *names);
                if (!nb)
                    break;
                names = nb;
            }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[nn] = malloc(len);
            if (!names[nn])
                break;
            snprintf(names[nn], len, "%s/%s", argv[i], e->d_name);
            nn++;
        }
        closedir(d);
        qsort(names, nn, sizeof *names, cmp_str); /* a stable order for logs */
        for (size_t k = 0; k < nn; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(names[k]) == 0)
                    ran++;
                else
                    failed++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("regress: %d inputs ran, %d unreadable\n", ran, failed);
    if (failed)
        return 1;
    return ran ? 0 : 77;
}
