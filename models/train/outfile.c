/* cgrad zoo: output checks and the writer's lock (see outfile.h). */
#include "models/train/outfile.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/error.h"
#include "nn/safetensors.h"
#include "models/report/plot.h"
#include "models/train/train_common.h"
#include "models/util/files.h"

/* ------------------------------------------------------------ output check */
/* dir, where path is to be written, is a writable directory: false +
 * error naming both. */
static bool dir_writable(const char *path, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        cg_set_error("cannot write '%s': directory '%s': %s", path, dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        cg_set_error("cannot write '%s': '%s' is not a directory", path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        cg_set_error("cannot write '%s': directory '%s' is not writable (%s)", path, dir,
                     strerror(errno));
    else
        return true;
    return false;
}

bool cg_out_check(const char *path, bool create_dir)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0) {
        cg_set_error("output path is empty");
        return false;
    }
    if (path[n - 1] == '/') {
        cg_set_error("'%s' names a directory; give the checkpoint a file name (e.g. "
                     "'%smodel.safetensors')",
                     path, path);
        return false;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        cg_set_error("'%s' names a directory, not a checkpoint file", path);
        return false;
    }
    if (strlen(base) + CG_OUT_SUFFIX_MAX > NAME_MAX) {
        cg_set_error("'%s': the file name is %zu bytes; at most %d fit with the temporary "
                     "suffix (NAME_MAX %d)",
                     path, strlen(base), NAME_MAX - CG_OUT_SUFFIX_MAX, NAME_MAX);
        return false;
    }
    if (n + CG_OUT_SUFFIX_MAX >= PATH_MAX) {
        cg_set_error("'%s': the path is too long (%zu bytes; PATH_MAX %d)", path, n, PATH_MAX);
        return false;
    }
    if (create_dir && !cg_ensure_parent_dir(path))
        return false;
    char *dir = cg_dir_part(path);
    if (!dir) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = dir_writable(path, dir) && cg_out_check_regular(path);
    free(dir);
    return ok;
}

bool cg_out_check_regular(const char *path)
{
    struct stat st, t;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return true;
    /* a symlink is followed: a link to a regular file is fine */
    if (S_ISLNK(st.st_mode) && stat(path, &t) == 0 && S_ISREG(t.st_mode))
        return true;
    const char *kind =
        S_ISLNK(st.st_mode) ? "a symbolic link to no regular file" : cg_st_file_kind(st.st_mode);
    cg_set_error("'%s' is %s; a checkpoint replaces only a regular file (even with --force)", path,
                 kind);
    return false;
}

/* ------------------------------------------------------------ lock */
/* With the lock held no other writer of path runs: temporary files of path,
 * of its loss curve and of its metrics log left by a killed writer go
 * (nn/safetensors.h cg_st_remove_temps_sole_writer: "<name>.tmp.<pid>[.<n>]"
 * of a dead process, or of this pid, which nothing of this run has written
 * yet: a container's program has the same pid at every start; a user's
 * "m.st.tmp.notes" is not ours). */
static void remove_leftover_temps(const char *path)
{
    char *png = cg_loss_png_path(path), *log = cg_ckpt_sibling(path, ".metrics.jsonl"),
         *best = cg_best_path(path);
    cg_st_remove_temps_sole_writer(path);
    if (png)
        cg_st_remove_temps_sole_writer(png);
    if (log)
        cg_st_remove_temps_sole_writer(log);
    if (best)
        cg_st_remove_temps_sole_writer(best);
    free(png);
    free(log);
    free(best);
}

/* A lock file of ours holds nothing or "<pid>\n". */
static bool is_our_lock(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 24)
        return false;
    char buf[32];
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    if (k < 0)
        return false;
    buf[k] = '\0';
    size_t digits = strspn(buf, "0123456789");
    return k == 0 || (digits > 0 && buf[digits] == '\n' && (ssize_t)digits + 1 == k);
}

char *cg_out_lock_path(const char *path) { return cg_ckpt_sibling(path, CG_OUT_LOCK_SUFFIX); }

/* Is fd the file at path itself (same device and inode, the name not followed)? */
static bool is_file_at(int fd, const char *path)
{
    struct stat held, named;
    return fstat(fd, &held) == 0 && lstat(path, &named) == 0 && held.st_dev == named.st_dev &&
           held.st_ino == named.st_ino;
}

/* The lock file at lock->path, opened: made (never through a link), or
 * the one there when it is a lock of ours; LOCK_GONE when the one there
 * went between the two opens (the caller tries again), -1 + error. */
enum { LOCK_GONE = -2 };
static int lock_open(cg_out_lock *lock)
{
    int fd = open(lock->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        fd = open(lock->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
            return LOCK_GONE;
    }
    if (fd < 0) {
        if (errno == ELOOP)
            cg_set_error("the lock file '%s' is a symbolic link (a lock is never followed); "
                         "remove it",
                         lock->path);
        else
            cg_set_error("cannot create the lock file '%s': %s", lock->path, strerror(errno));
        return -1;
    }
    if (!is_our_lock(fd)) {
        close(fd);
        cg_set_error("'%s' exists and is not a lock file of these programs (a lock holds "
                     "nothing or a process id); remove it or choose another --out",
                     lock->path);
        return -1;
    }
    return fd;
}

/* cg_out_lock_take, without the leftovers' cleanup when !cleanup. A
 * releasing run removes its lock file while it holds it, so a lock taken
 * is good only while the file is still at its name: else (the holder
 * removed it between this open and this flock) it is made again. */
enum { LOCK_TRIES = 64 };
static bool lock_take(const char *path, cg_out_lock *lock, bool cleanup)
{
    lock->fd = -1;
    char *lp = cg_out_lock_path(path);
    if (!lp)
        return false;
    int n = snprintf(lock->path, sizeof lock->path, "%s", lp);
    free(lp);
    if (n >= (int)sizeof lock->path) {
        cg_set_error("'%s': path too long for its lock file", path);
        return false;
    }
    int fd = -1;
    for (int tries = 0; fd < 0; tries++) {
        if (tries == LOCK_TRIES) {
            cg_set_error("cannot lock '%s': the lock file kept going as it was taken", lock->path);
            return false;
        }
        if ((fd = lock_open(lock)) == LOCK_GONE)
            continue;
        if (fd < 0)
            return false;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char buf[32] = "";
            ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
            buf[k > 0 ? k : 0] = '\0';
            buf[strcspn(buf, "\n")] = '\0';
            close(fd);
            if (e == EWOULDBLOCK)
                cg_set_error("'%s' is being written by another run%s%s%s (its lock '%s' is held); "
                             "wait for it or choose another --out",
                             path, buf[0] ? " (pid " : "", buf, buf[0] ? ")" : "", lock->path);
            else
                cg_set_error("cannot lock '%s': %s", lock->path, strerror(e));
            return false;
        }
        if (!is_file_at(fd, lock->path)) { /* removed as its holder released it */
            close(fd);
            fd = -1;
        }
    }
    char pid[32];
    int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k) {
        /* the pid is only for the message: the lock itself is held */
    }
    lock->fd = fd;
    if (cleanup)
        remove_leftover_temps(path);
    return true;
}

bool cg_out_lock_take(const char *path, cg_out_lock *lock) { return lock_take(path, lock, true); }

int cg_out_lock_keep(const char *path, cg_out_lock *lock)
{
    if (!lock || lock->fd < 0 || is_file_at(lock->fd, lock->path))
        return 1;
    /* the run's own temporary files may be live: no cleanup */
    cg_out_lock again;
    if (!cg_ensure_parent_dir(path) || !lock_take(path, &again, false)) {
        char why[512];
        snprintf(why, sizeof why, "%s", cg_last_error());
        cg_set_error("the lock '%s' was moved or removed during the run and cannot be taken "
                     "again (nothing of this save written): %s",
                     lock->path, why);
        return 0;
    }
    close(lock->fd); /* the old lock, wherever it went */
    *lock = again;
    return 2;
}

void cg_out_lock_release(cg_out_lock *lock)
{
    if (!lock || lock->fd < 0)
        return;
    /* the file goes while it is held (a run that opened it meanwhile finds
     * it gone once it has the flock, and makes another); a lock moved away
     * (cg_out_lock_keep) is not followed, nor a file made at its name since */
    if (is_file_at(lock->fd, lock->path))
        unlink(lock->path);
    close(lock->fd); /* releases the flock */
    lock->fd = -1;
}

/* ------------------------------------------------------------ same file */

/* Is fd 1 the regular file at path (same device and inode)? */
static bool stdout_is(const char *path)
{
    struct stat o, r;
    return path && fstat(STDOUT_FILENO, &o) == 0 && S_ISREG(o.st_mode) && stat(path, &r) == 0 &&
           o.st_dev == r.st_dev && o.st_ino == r.st_ino;
}

bool cg_out_check_stdout(const char *in, const char *what)
{
    if (!stdout_is(in))
        return true;
    cg_set_error("standard output is %s '%s', which this command reads; send the output "
                 "elsewhere (nothing was written)",
                 what, in);
    return false;
}

bool cg_out_check_stdout_writes(const char *path, const char *what)
{
    if (!stdout_is(path))
        return true;
    cg_set_error("standard output is '%s', %s; send the output elsewhere (nothing was written)",
                 path, what);
    return false;
}

/* The files a run with checkpoint out writes (files[i], malloc'd; kinds[i]
 * names each): the checkpoint, its loss curve, its metrics log and its
 * lock. False + error (out of memory; *files then holds nothing to free). */
#define RUN_FILES 4
static const char *const RUN_KINDS[RUN_FILES] = {"the checkpoint", "its loss curve",
                                                 "its metrics log", "its lock file"};
static bool run_files(const char *out, char *files[RUN_FILES])
{
    files[0] = strdup(out);
    files[1] = cg_loss_png_path(out);
    files[2] = cg_ckpt_sibling(out, ".metrics.jsonl");
    files[3] = cg_out_lock_path(out);
    if (files[0] && files[1] && files[2] && files[3])
        return true;
    for (int i = 0; i < RUN_FILES; i++)
        free(files[i]);
    cg_set_error("out of memory");
    return false;
}

bool cg_out_check_reads(const char *out, const char *in, const char *what, bool with_ckpt)
{
    char *files[RUN_FILES];
    if (!cg_out_check_stdout(in, what) || !run_files(out, files))
        return false;
    bool ok = true;
    for (int i = with_ckpt ? 0 : 1; ok && i < RUN_FILES; i++)
        if (cg_same_file(files[i], in)) {
            cg_set_error("%s '%s' is the same file as '%s', %s this run writes; choose another "
                         "--out (nothing was written)",
                         what, in, files[i], RUN_KINDS[i]);
            ok = false;
        }
    for (int i = 0; i < RUN_FILES; i++)
        free(files[i]);
    return ok;
}

bool cg_out_check_stdout_run(const char *out)
{
    char *files[RUN_FILES];
    if (!run_files(out, files))
        return false;
    bool ok = true;
    char what[64];
    for (int i = 0; ok && i < RUN_FILES; i++) {
        snprintf(what, sizeof what, "%s this run writes", RUN_KINDS[i]);
        ok = cg_out_check_stdout_writes(files[i], what);
    }
    for (int i = 0; i < RUN_FILES; i++)
        free(files[i]);
    return ok;
}

bool cg_out_check_siblings(const char *out)
{
    char *files[2] = {cg_loss_png_path(out), cg_ckpt_sibling(out, ".metrics.jsonl")};
    const char *kinds[2] = {"the loss curve", "the metrics log"};
    bool ok = files[0] && files[1];
    if (!ok)
        cg_set_error("out of memory");
    struct stat st;
    for (int i = 0; ok && i < 2; i++)
        if (lstat(files[i], &st) == 0) {
            cg_set_error("'%s' exists: %s of checkpoint '%s', which this run writes; pass --force "
                         "to overwrite it, or choose another --out",
                         files[i], kinds[i], out);
            ok = false;
        }
    free(files[0]);
    free(files[1]);
    return ok;
}

/* ------------------------------------------------------------ kept checkpoints */
#define KEPT_TAG ".step"
#define KEPT_EXT ".safetensors"

char *cg_kept_path(const char *out, int64_t step)
{
    char suffix[64];
    snprintf(suffix, sizeof suffix, KEPT_TAG "%08lld" KEPT_EXT, (long long)step);
    return cg_ckpt_sibling(out, suffix);
}

char *cg_best_path(const char *out) { return cg_ckpt_sibling(out, ".best" KEPT_EXT); }

char *cg_out_resolved(const char *path)
{
    char *r = cg_resolved_name(path);
    const int e = errno; /* kept for the caller: ENOENT (not there yet), ENOMEM, ... */
    if (!r)
        cg_set_error("cannot resolve the directory of '%s': %s", path, strerror(e));
    errno = e;
    return r;
}

/* The step of a kept checkpoint called name (a file name) beside the
 * checkpoint whose name without ".safetensors" is stem; -1 for another. */
static int64_t kept_step(const char *name, const char *stem)
{
    size_t n = strlen(stem), t = strlen(KEPT_TAG), e = strlen(KEPT_EXT), len = strlen(name);
    if (len <= n + t + e || strncmp(name, stem, n) != 0 || strncmp(name + n, KEPT_TAG, t) != 0 ||
        strcmp(name + len - e, KEPT_EXT) != 0)
        return -1;
    int64_t step = 0;
    for (size_t i = n + t; i < len - e; i++) {
        if (name[i] < '0' || name[i] > '9' || step > 100000000000000LL)
            return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

bool cg_kept_check(const char *out, const int64_t *kept, int n, bool force,
                   const char *const *reads, const char *const *what, int nr)
{
    char *stem_path = cg_ckpt_sibling(out, ""), *dir = cg_dir_part(out);
    const char *stem = stem_path ? strrchr(stem_path, '/') : NULL;
    stem = stem ? stem + 1 : stem_path;
    DIR *d = stem && dir ? opendir(dir) : NULL;
    bool ok = d != NULL || (stem && dir && errno == ENOENT); /* no directory yet: none there */
    if (!ok)
        cg_set_error("cannot list the directory of '%s': %s", out, strerror(errno));
    for (struct dirent *e; ok && d && (e = readdir(d));) {
        int64_t step = kept_step(e->d_name, stem);
        char *p = step >= 0 ? cg_kept_path(out, step) : NULL;
        const char *base = p && strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        if (p && strcmp(base, e->d_name) != 0) { /* "step0250": not a name we write */
            free(p);
            p = NULL;
        }
        bool ours = false;
        for (int i = 0; i < n; i++)
            ours = ours || kept[i] == step;
        if (ok && p &&
            !cg_out_check_stdout_writes(p, "an evaluation checkpoint that --keep-last replaces or "
                                           "removes"))
            ok = false; /* the output would be lost */
        for (int i = 0; p && i < nr; i++)
            if (reads[i] && cg_same_file(p, reads[i])) {
                cg_set_error("%s '%s' is the evaluation checkpoint '%s' that --keep-last would "
                             "write; choose another --out (nothing was written)",
                             what[i], reads[i], p);
                ok = false;
            }
        if (ok && p && !force && !ours) {
            cg_set_error("'%s' exists: an evaluation checkpoint this run did not write; pass "
                         "--force to overwrite it, or choose another --out",
                         p);
            ok = false;
        }
        free(p);
    }
    if (d)
        closedir(d);
    free(stem_path);
    free(dir);
    return ok;
}

/* ------------------------------------------------------------ metrics log */
/* One line of a metrics log: a JSON object with an integral "step"; *eval
 * when it is an evaluation line (it has "val_loss"). */
static bool log_line_step(const char *s, size_t n, int64_t *step, bool *eval)
{
    if (n == 0 || memchr(s, '\0', n))
        return false;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
    bool ok = cJSON_IsObject(j) && end == s + n;
    const cJSON *st = ok ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
    ok = ok && cJSON_IsNumber(st) && st->valuedouble >= 0 && st->valuedouble <= 1e15 &&
         st->valuedouble == (double)(int64_t)st->valuedouble;
    if (ok) {
        *step = (int64_t)st->valuedouble;
        *eval = cJSON_GetObjectItemCaseSensitive(j, "val_loss") != NULL;
    }
    cJSON_Delete(j);
    return ok;
}

char *cg_metrics_log_keep(const char *bytes, size_t len, int64_t step, size_t *out_len,
                          int64_t *dropped)
{
    *out_len = 0;
    *dropped = 0;
    char *out = malloc(len + 1);
    if (!out) {
        cg_set_error("out of memory");
        return NULL;
    }
    int64_t last[2] = {-1, -1}; /* the last step kept: training lines, evaluation lines */
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(bytes + i, '\n', len - i);
        if (!nl) { /* a torn last line (the writer was killed) */
            (*dropped)++;
            break;
        }
        size_t n = (size_t)(nl - (bytes + i));
        int64_t s;
        bool eval;
        if (log_line_step(bytes + i, n, &s, &eval) && s <= step && s > last[eval]) {
            memcpy(out + k, bytes + i, n);
            out[k + n] = '\n';
            k += n + 1;
            last[eval] = s;
        } else {
            (*dropped)++;
        }
        i += n + 1;
    }
    out[k] = '\0';
    *out_len = k;
    return out;
}

/* The bytes of an existing log (a regular file, never through a link), at
 * most `max` of them; NULL with *len 0 when there is none. */
static char *read_old_log(const char *path, size_t max, size_t *len)
{
    *len = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t want = (size_t)st.st_size < max ? (size_t)st.st_size : max;
    char *buf = malloc(want + 1);
    size_t got = 0;
    while (buf && got < want) {
        ssize_t k = read(fd, buf + got, want - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    *len = got;
    return buf;
}

bool cg_metrics_log_open(cg_metrics_log *log, const char *path, int64_t resume_step,
                         int64_t *dropped)
{
    *log = (cg_metrics_log){0};
    *dropped = 0;
    size_t old_len = 0, keep_len = 0;
    char *old = resume_step >= 0 ? read_old_log(path, (size_t)1 << 30, &old_len) : NULL;
    char *keep = old ? cg_metrics_log_keep(old, old_len, resume_step, &keep_len, dropped) : NULL;
    bool lost = old && !keep;
    free(old);
    if (lost)
        return false;
    log->path = strdup(path);
    log->tmp = malloc(strlen(path) + 48);
    if (!log->path || !log->tmp) {
        free(keep);
        free(log->path);
        free(log->tmp);
        *log = (cg_metrics_log){0};
        cg_set_error("out of memory");
        return false;
    }
    /* a new file of ours, renamed over the old name later: never written
     * through a link or into a file (a hard link) that is not ours */
    int fd = cg_st_create_temp(path, log->tmp, strlen(path) + 48);
    bool ok = fd >= 0;
    struct stat st; /* the old log's mode kept, as a checkpoint's is */
    if (ok && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        (void)fchmod(fd, st.st_mode & 07777);
    for (size_t done = 0; ok && done < keep_len;) {
        ssize_t k = write(fd, keep + done, keep_len - done);
        ok = k > 0;
        done += k > 0 ? (size_t)k : 0;
    }
    int e = ok ? 0 : errno;
    log->f = ok ? fdopen(fd, "a") : NULL;
    if (!log->f) {
        e = ok ? errno : e;
        if (fd >= 0) { /* ours: removed (a name that existed is not) */
            close(fd);
            (void)unlink(log->tmp);
        }
        free(log->tmp);
        log->tmp = NULL;
        /* no file open (f NULL) and none to remove: this only frees the
         * path, and cannot fail (its one failure is fclose's) */
        (void)cg_metrics_log_close(log);
        cg_set_error("cannot write the metrics log '%s': %s", path, strerror(e));
    }
    free(keep);
    return log->f != NULL;
}

bool cg_metrics_log_publish(cg_metrics_log *log)
{
    if (!log->tmp)
        return true;
    if (rename(log->tmp, log->path) != 0) {
        cg_set_error("cannot replace the metrics log '%s': %s", log->path, strerror(errno));
        return false;
    }
    free(log->tmp);
    log->tmp = NULL;
    return true;
}

bool cg_metrics_log_close(cg_metrics_log *log)
{
    int e = log->f && fclose(log->f) != 0 ? errno : 0;
    if (log->tmp) /* never published: the old log stays the log */
        (void)unlink(log->tmp);
    free(log->tmp);
    free(log->path);
    *log = (cg_metrics_log){0};
    if (e)
        cg_set_error("cannot write the metrics log: %s", strerror(e));
    return e == 0;
}

bool cg_metrics_log_append(FILE *f, const char *line, uint64_t reserve)
{
    int fd = fileno(f);
    size_t len = strlen(line) + 1;
    char *buf = malloc(len);
    off_t at = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    struct statvfs v;
    if (!buf || at < 0) {
        int e = buf ? errno : ENOMEM;
        free(buf);
        cg_set_error("cannot write the metrics log: %s", strerror(e));
        errno = e;
        return false;
    }
    memcpy(buf, line, len - 1);
    buf[len - 1] = '\n';
    /* free space (root may use the blocks kept back from other users) */
    if (reserve > 0 && fstatvfs(fd, &v) == 0 && v.f_blocks > 0) {
        uint64_t free_b = (uint64_t)(geteuid() == 0 ? v.f_bfree : v.f_bavail) * v.f_frsize;
        if (free_b < reserve + len) {
            free(buf);
            cg_set_error("cannot write the metrics log: %s (%" PRIu64 " bytes free, the "
                         "checkpoint needs about %" PRIu64 ")",
                         strerror(ENOSPC), free_b, reserve);
            errno = ENOSPC;
            return false;
        }
    }
    size_t done = cg_write_all(fd, buf, len);
    int e = done < len ? errno : 0;
    free(buf);
    if (!e)
        return true;
    bool cut = done == 0 || ftruncate(fd, at) == 0; /* a torn line: cut it off */
    cg_set_error("cannot write the metrics log: %s%s", strerror(e),
                 cut ? "" : " (its last line is torn)");
    errno = e;
    return false;
}

bool cg_out_picture_check(const char *path, bool force, const char *in, const char *what,
                          bool make_dir)
{
    struct stat st;
    if (!cg_plot_format(path) || !cg_out_check_stdout_writes(path, "a picture this command draws"))
        return false;
    /* its directory or, where the caller makes the missing ones, the
     * deepest that exists */
    char *dir = cg_dir_part(path);
    while (make_dir && dir && stat(dir, &st) != 0 && errno == ENOENT) {
        char *up = cg_dir_part(dir);
        bool top = up && strcmp(up, dir) == 0; /* "." or "/" missing: stop there */
        free(dir);
        dir = up;
        if (top)
            break;
    }
    if (!dir) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = dir_writable(path, dir);
    free(dir);
    if (!ok)
        return false;
    if (in && cg_same_file(path, in)) {
        cg_set_error("'%s' is the same file as %s '%s', which this command reads", path, what, in);
        return false;
    }
    if (lstat(path, &st) != 0)
        return true;
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        cg_set_error("'%s' exists and is not a regular file", path);
        return false;
    }
    if (!force) {
        cg_set_error("'%s' exists; pass --force to overwrite it", path);
        return false;
    }
    return true;
}

bool cg_out_check_made(const char *out, bool force, const char *const *inputs, int n,
                       const char *verb)
{
    if (!cg_out_check(out, false) ||
        !cg_out_check_stdout_writes(out, "the checkpoint this command writes"))
        return false;
    for (int i = 0; i < n; i++)
        if (cg_same_file(out, inputs[i])) {
            cg_set_error("--out '%s' is the same file as the checkpoint '%s' it %s; choose "
                         "another --out (nothing was written)",
                         out, inputs[i], verb);
            return false;
        }
    for (int i = 0; i < n; i++)
        if (!cg_out_check_stdout(inputs[i], "the checkpoint"))
            return false;
    if (access(out, F_OK) == 0 && !force) {
        cg_set_error("'%s' exists; pass --force to overwrite it", out);
        return false;
    }
    return true;
}

bool cg_out_save_locked(cg_st_writer *w, const char *out)
{
    cg_out_lock lock;
    if (!w || !cg_out_lock_take(out, &lock))
        return false;
    bool ok = cg_st_writer_save(w, out);
    cg_out_lock_release(&lock);
    return ok;
}
