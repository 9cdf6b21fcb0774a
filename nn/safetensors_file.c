/* cgrad nn: where the safetensors writer puts its file: a new file beside
 * the target (unnamed while it is written, where the file system can),
 * its name, the rename's durability, and the temporary files writers that
 * died left. See nn/safetensors.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/safetensors_impl.h"

char *cg_st_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

static void remove_temps_of(const char *path, bool own)
{
    char *dir = cg_st_dir_of(path);
    if (!dir)
        return;
    cg_st_remove_temps_in(path, dir, own);
    free(dir);
}

void cg_st_remove_stale_temps(const char *path) { remove_temps_of(path, false); }

void cg_st_remove_temps_sole_writer(const char *path) { remove_temps_of(path, true); }

void cg_st_remove_temps_in(const char *path, const char *dir, bool own)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0)
            continue;
        const char *digits = n + blen + 5;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (*end == '.') { /* "<pid>.<n>": one of several temporaries of a process */
            const char *q = end + 1;
            while (*q >= '0' && *q <= '9')
                q++;
            if (q > end + 1 && *q == '\0')
                end = (char *)q;
        }
        if (*digits < '1' || *digits > '9' || *end != '\0' || errno || pid <= 0 ||
            (pid == (long)getpid() && !own))
            continue;
        if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
            continue; /* alive, or not ours */
        size_t len = strlen(dir) + strlen(n) + 2;
        char *full = malloc(len);
        if (!full)
            break;
        snprintf(full, len, "%s/%s", dir, n);
        (void)unlink(full);
        free(full);
    }
    closedir(d);
}

/* The name of try `tries` for a temporary file of path into tmp: false +
 * error when it does not fit. */
static bool temp_name(const char *path, int tries, char *tmp, size_t cap)
{
    static _Atomic unsigned long seq; /* this process's names after the first */
    int k = tries == 0 ? snprintf(tmp, cap, "%s.tmp.%ld", path, (long)getpid())
                       : snprintf(tmp, cap, "%s.tmp.%ld.%lu", path, (long)getpid(), ++seq);
    if (k < 0 || (size_t)k >= cap) {
        cg_set_error("safetensors: %s: path too long for a temporary file", path);
        return false;
    }
    return true;
}

int cg_st_create_temp(const char *path, char *tmp, size_t cap)
{
    for (int tries = 0; tries < 1000; tries++) {
        if (!temp_name(path, tries, tmp, cap))
            return -1;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            break;
    }
    int e = errno; /* kept for the caller */
    cg_set_error("safetensors: %s: cannot create temporary file %s: %s", path, tmp, strerror(e));
    errno = e;
    return -1;
}

int cg_st_open_unnamed(const char *dir)
{
#ifdef O_TMPFILE
    return open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
    (void)dir;
    return -1;
#endif
}

bool cg_st_link_unnamed(int fd, const char *path, char *tmp, size_t cap)
{
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int e = 0;
    for (int tries = 0; tries < 1000; tries++) {
        if (!temp_name(path, tries, tmp, cap))
            return false;
        if (linkat(AT_FDCWD, self, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0)
            return true;
        e = errno;
        if (e == ENOENT && linkat(fd, "", AT_FDCWD, tmp, AT_EMPTY_PATH) == 0) /* no /proc */
            return true;
        if (e != EEXIST)
            break;
    }
    cg_set_error("safetensors: %s: cannot name the written file %s: %s", path, tmp, strerror(e));
    return false;
}

bool cg_st_sync_dir(const char *path, const char *dir)
{
    bool ok = true;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS) {
            cg_set_error("safetensors: %s: written, but fsync of directory %s failed: %s", path,
                         dir, strerror(errno));
            ok = false;
        }
        close(dfd);
    }
    return ok;
}

bool cg_st_target_replaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode))
        return true;
    cg_set_error("safetensors: %s: exists and is not a regular file (%s); not replaced", path,
                 cg_st_file_kind(st.st_mode));
    return false;
}

const char *cg_st_file_kind(unsigned mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISLNK(mode)  ? "a symbolic link"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
                            : "a file of another kind";
}
