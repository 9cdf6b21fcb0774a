/* cgrad zoo: reading input files and making output directories (see
 * files.h). */
#include "models/util/files.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/utf8.h"

static double meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb > 0)
        return kb * 1024.0;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (double)pages * (double)psz : 1e12;
}

/* CG_MAX_INPUT_MB, when set (a malformed value: refused at start by the
 * programs, cg_env_check) */
static bool env_limit_mb(double *mb) { return cg_env_number("CG_MAX_INPUT_MB", mb) && *mb >= 1; }

size_t cg_input_limit(void)
{
    double mb = 0;
    if (env_limit_mb(&mb))
        return (size_t)mb << 20;
    double avail = meminfo_available();
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (double)rl.rlim_cur < avail)
        avail = (double)rl.rlim_cur;
    FILE *cg = fopen("/sys/fs/cgroup/memory.max", "r");
    double cmax;
    if (cg && fscanf(cg, "%lf", &cmax) == 1 && cmax > 0 && cmax < avail)
        avail = cmax;
    if (cg)
        fclose(cg);
    double lim = avail / 6;
    if (lim < (double)(1 << 20))
        lim = (double)(1 << 20);
    if (lim > (double)SIZE_MAX / 2)
        lim = (double)SIZE_MAX / 2;
    return (size_t)lim;
}

static void fmt_bytes(double b, char *buf, size_t n)
{
    if (b >= 1e9)
        snprintf(buf, n, "%.1f GB", b / 1e9);
    else if (b >= 1e5)
        snprintf(buf, n, "%.1f MB", b / 1e6);
    else
        snprintf(buf, n, "%.0f bytes", b);
}

/* The error for an input larger than max_bytes; given: the caller's limit,
 * not cg_input_limit(). */
static void set_limit_error(const char *path, size_t max_bytes, bool given)
{
    char big[32];
    fmt_bytes((double)max_bytes, big, sizeof big);
    double mb = 0;
    if (given)
        cg_set_error("'%s' is larger than %s, the limit set for this input", path, big);
    else if (env_limit_mb(&mb))
        cg_set_error("'%s' is larger than %s, the input limit set by CG_MAX_INPUT_MB", path, big);
    else
        cg_set_error("'%s' is larger than %s, the input limit (a sixth of the available "
                     "memory; set CG_MAX_INPUT_MB to change it)",
                     path, big);
}

/* Opens path ("-": stdin) and refuses a directory: the descriptor, or -1 +
 * error. *st receives what fstat said. */
static int open_input(const char *path, bool std_in, struct stat *st)
{
    int fd = std_in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        cg_set_error("cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, st) == 0 && S_ISDIR(st->st_mode)) {
        if (!std_in)
            close(fd);
        cg_set_error("'%s' is a directory, not a file", path);
        return -1;
    }
    return fd;
}

/* A file being read whole: its n bytes so far in buf, room for cap (and a
 * NUL after them). */
typedef struct {
    char *buf;
    size_t cap, n;
    bool limit_given; /* max_bytes is the caller's (set_limit_error) */
} read_buf;

/* Makes room in a full r: cap grown by half, up to max_bytes + 1. False +
 * error when the input is already past the limit or memory runs out (r->buf
 * is then still r's, to free). */
static bool grow_read_buf(read_buf *r, const char *path, size_t max_bytes)
{
    if (r->cap > max_bytes) {
        set_limit_error(path, max_bytes, r->limit_given);
        return false;
    }
    size_t nc = r->cap + r->cap / 2;
    if (nc > max_bytes + 1)
        nc = max_bytes + 1;
    char *nb = realloc(r->buf, nc + 1);
    if (!nb) {
        cg_set_error("out of memory reading '%s' (%zu bytes read)", path, r->n);
        return false;
    }
    r->buf = nb;
    r->cap = nc;
    return true;
}

/* Reads fd to its end into r (r->buf allocated here with r->cap, then
 * grown). False + error on a read error, past max_bytes, out of memory, or
 * (text) at the first NUL byte; r->buf is then still r's, to free. */
static bool read_to_end(int fd, const char *path, size_t max_bytes, bool text, read_buf *r)
{
    r->buf = malloc(r->cap + 1);
    if (!r->buf) {
        cg_set_error("out of memory reading '%s' (%zu bytes read)", path, r->n);
        return false;
    }
    for (;;) {
        if (r->n == r->cap && !grow_read_buf(r, path, max_bytes))
            return false;
        ssize_t got = read(fd, r->buf + r->n, r->cap - r->n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            cg_set_error("cannot read '%s': %s", path, strerror(errno));
            return false;
        }
        if (got == 0)
            return true;
        const char *nul = text ? memchr(r->buf + r->n, '\0', (size_t)got) : NULL;
        if (nul) {
            size_t at = r->n + (size_t)(nul - (r->buf + r->n));
            cg_set_error("'%s' holds a NUL byte at offset %zu: not a text file", path, at);
            return false;
        }
        r->n += (size_t)got;
        if (r->n > max_bytes) {
            set_limit_error(path, max_bytes, r->limit_given);
            return false;
        }
    }
}

char *cg_read_file_once(const char *path, size_t max_bytes, bool text, size_t *len)
{
    *len = 0;
    bool given = max_bytes != 0;
    if (!given)
        max_bytes = cg_input_limit();
    bool std_in = strcmp(path, "-") == 0;
    struct stat st;
    int fd = open_input(path, std_in, &st);
    if (fd < 0)
        return NULL;
    /* a regular file: one exact allocation; a stream: grow by half */
    read_buf r = {.buf = NULL, .n = 0, .limit_given = given};
    r.cap = S_ISREG(st.st_mode) && st.st_size >= 0 && (uint64_t)st.st_size < max_bytes
                ? (size_t)st.st_size + 1
                : (size_t)1 << 16;
    bool ok = read_to_end(fd, path, max_bytes, text, &r);
    if (!std_in)
        close(fd);
    if (!ok) {
        free(r.buf);
        return NULL;
    }
    if (text && r.n == 0) {
        free(r.buf);
        cg_set_error("'%s' is empty", path);
        return NULL;
    }
    if (r.n + 1 < r.cap) { /* give back what a stream's growth left over */
        char *nb = realloc(r.buf, r.n + 1);
        if (nb)
            r.buf = nb;
    }
    r.buf[r.n] = '\0';
    *len = r.n;
    return r.buf;
}

void cg_data_default_hint(const char *path, const char *default_path)
{
    if (strcmp(path, default_path) == 0 && strstr(cg_last_error(), "cannot open")) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("%s; create it with scripts/prepare_data.sh (or pass --data FILE)", msg);
    }
}

/* The rest of a bad line (`why` it is bad) read and dropped: true at its end
 * ('\n' or the end of input), false + error after a read error or `limit`
 * bytes without one. */
static bool skip_line(FILE *f, const char *name, const char *why, size_t limit)
{
    for (size_t k = 0; k <= limit; k++) {
        int c = getc(f);
        if (c == '\n' || (c == EOF && !ferror(f)))
            return true;
        if (c == EOF && errno == EINTR) {
            clearerr(f);
            continue;
        }
        if (c == EOF) {
            cg_set_error("%s: read error: %s", name, strerror(errno));
            return false;
        }
    }
    cg_set_error("%s: %s, and no end of line within %zu bytes", name, why, limit);
    return false;
}

long long cg_read_line(char **buf, size_t *cap, FILE *f, const char *name, size_t max_len)
{
    int c;
    size_t n = 0;
    for (;;) {
        c = getc(f);
        if (c == EOF) {
            if (ferror(f)) {
                if (errno == EINTR) {
                    clearerr(f);
                    continue;
                }
                cg_set_error("%s: read error: %s", name, strerror(errno));
                return -2;
            }
            break;
        }
        if (c == '\n')
            break;
        if (c == '\0' || n >= max_len) { /* a bad line: dropped up to its end */
            char why[96];
            if (c == '\0')
                snprintf(why, sizeof why, "a NUL byte at byte %zu (not text)", n + 1);
            else
                snprintf(why, sizeof why, "longer than %zu bytes", max_len);
            if (!skip_line(f, name, why, CG_LINE_SKIP_MAX(max_len)))
                return -2;
            cg_set_error("%s", why);
            return -3;
        }
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = realloc(*buf, nc);
            if (!nb) {
                cg_set_error("%s: out of memory", name);
                return -2;
            }
            *buf = nb;
            *cap = nc;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && n == 0)
        return -1;
    if (!*buf) {
        *buf = malloc(1);
        if (!*buf) {
            cg_set_error("%s: out of memory", name);
            return -2;
        }
        *cap = 1;
    }
    (*buf)[n] = '\0';
    return (long long)n;
}

char **cg_read_lines(FILE *f, const char *name, int64_t *n, char ***why)
{
    return cg_read_lines_upto(f, name, 0, n, why);
}

char **cg_read_lines_upto(FILE *f, const char *name, int64_t max, int64_t *n, char ***why)
{
    char **lines = NULL, **bad = NULL, *line = NULL;
    size_t lcap = 0;
    int64_t cap = 0;
    long long k = 0;
    bool ok = true;
    int64_t half = 0; /* 1: entry *n stored in part when memory ran out */
    *n = 0;
    while (ok && (max <= 0 || *n < max) &&
           (k = cg_read_line(&line, &lcap, f, name, CG_LINE_MAX)) != -1 && k != -2) {
        if (k == -3 && !why) {
            cg_prefix_error("%s: line %lld: ", name, (long long)*n + 1);
            k = -2;
            break;
        }
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
            line[--k] = '\0';
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **t = realloc(lines, (size_t)cap * sizeof *t);
            lines = t ? t : lines;
            char **u = t && why ? realloc(bad, (size_t)cap * sizeof *u) : NULL;
            bad = u ? u : bad;
            if (!(ok = t && (u || !why)))
                break;
        }
        if (why)
            bad[*n] = k == -3 ? strdup(cg_last_error()) : NULL;
        lines[*n] = strdup(k == -3 ? "" : line);
        half = 1;
        if (!(ok = lines[*n] && (k != -3 || bad[*n])))
            break;
        half = 0;
        (*n)++;
    }
    free(line);
    if (!ok)
        cg_set_error("out of memory");
    if (ok && k != -2 && !lines) {
        lines = malloc(sizeof *lines);
        bad = why ? malloc(sizeof *bad) : NULL;
        ok = lines && (bad || !why);
        if (!ok)
            cg_set_error("out of memory");
    }
    if (!ok || k == -2) {
        int64_t m = *n + half;
        for (int64_t i = 0; i < m && lines; i++)
            free(lines[i]);
        for (int64_t i = 0; i < m && bad; i++)
            free(bad[i]);
        free(lines);
        free(bad);
        return NULL;
    }
    if (why)
        *why = bad;
    return lines;
}

size_t cg_write_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = write(fd, (const char *)buf + done, len - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            break;
        }
        done += (size_t)k;
    }
    return done;
}

bool cg_output_flush(FILE *f)
{
    errno = 0; /* a value left by something else is not this stream's */
    if (fflush(f) == 0 && !ferror(f))
        return true;
    /* a write that failed before, with nothing left for fflush to try
     * again (the stream drops what it could not write): its errno is
     * gone. A pipe whose reader went away says so (POLLERR on Linux). */
    struct pollfd p = {.fd = fileno(f), .events = POLLOUT};
    if (errno == 0 && p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLERR))
        errno = EPIPE;
    cg_set_error("cannot write the output: %s", errno ? strerror(errno) : "write error");
    return false;
}

uint32_t *cg_read_text_file(const char *path, int64_t *n)
{
    size_t len;
    char *buf = cg_read_file_once(path, 0, true, &len);
    if (!buf)
        return NULL;
    uint32_t *cps = cg_utf8_decode(buf, len, path, n);
    free(buf);
    return cps;
}

bool cg_make_dirs(const char *dir)
{
    char *d = strdup(dir);
    if (!d) {
        cg_set_error("out of memory");
        return false;
    }
    /* each prefix that ends a component, from the top down; made_from: the
     * end of the first one this call made (none yet: past the end) */
    size_t n = strlen(d), made_from = n + 1;
    bool ok = true;
    for (size_t i = 1; i <= n && ok; i++) {
        if (i < n && (d[i] != '/' || d[i - 1] == '/'))
            continue;
        char keep = d[i];
        d[i] = '\0';
        struct stat st;
        if (stat(d, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                cg_set_error("'%s' is not a directory", d);
                ok = false;
            }
        } else if (mkdir(d, 0777) == 0) {
            if (made_from > n)
                made_from = i;
        } else if (errno != EEXIST) {
            cg_set_error("cannot create directory '%s': %s", d, strerror(errno));
            ok = false;
        }
        d[i] = keep;
    }
    /* a failure below: remove what this call made, deepest first (empty) */
    for (size_t i = n; !ok && made_from <= n && i >= made_from; i--) {
        if (i < n && (d[i] != '/' || d[i - 1] == '/'))
            continue;
        d[i] = '\0';
        rmdir(d);
    }
    free(d);
    return ok;
}

bool cg_ensure_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return true;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = cg_make_dirs(dir);
    free(dir);
    return ok;
}

char *cg_dir_part(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    while (slash > path && slash[-1] == '/') /* "dir//name": "dir", as dirname(3) */
        slash--;
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* path with its directory resolved (the file itself need not exist):
 * "<realpath(dir)>/<name>", malloc'd; NULL when the directory does not
 * resolve. */
char *cg_resolved_name(const char *path)
{
    char *dir = cg_dir_part(path);
    char *rd = dir ? realpath(dir, NULL) : NULL;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char *out = rd ? malloc(strlen(rd) + strlen(base) + 2) : NULL;
    if (out)
        sprintf(out, "%s/%s", strcmp(rd, "/") == 0 ? "" : rd, base);
    free(dir);
    free(rd);
    return out;
}

bool cg_same_file(const char *written, const char *read)
{
    struct stat a, b;
    if (!written || !read || stat(read, &b) != 0 || !S_ISREG(b.st_mode))
        return false; /* a stream (--data -) or nothing: nothing to destroy */
    if (stat(written, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return true;
    /* not yet there (or replaced by a rename): the same name once resolved */
    char *w = cg_resolved_name(written), *r = realpath(read, NULL), *rn = cg_resolved_name(read);
    bool same = w && ((r && strcmp(w, r) == 0) || (rn && strcmp(w, rn) == 0));
    free(w);
    free(r);
    free(rn);
    return same;
}
