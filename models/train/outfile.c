/* cgrad zoo: output checks and the writer's lock (see outfile.h). */
#include "models/train/outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "models/train/train_common.h"

/* ------------------------------------------------------------ output check */
/* The directory part of path ("." when there is none), malloc'd. */
static char *dir_part(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
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
                     "'%smodel.safetensors')", path, path);
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
                     "suffix (NAME_MAX %d)", path, strlen(base), NAME_MAX - CG_OUT_SUFFIX_MAX,
                     NAME_MAX);
        return false;
    }
    if (n + CG_OUT_SUFFIX_MAX >= PATH_MAX) {
        cg_set_error("'%s': the path is too long (%zu bytes; PATH_MAX %d)", path, n, PATH_MAX);
        return false;
    }
    if (create_dir && !cg_ensure_parent_dir(path))
        return false;
    char *dir = dir_part(path);
    if (!dir) {
        cg_set_error("out of memory");
        return false;
    }
    struct stat st;
    bool ok = true;
    if (stat(dir, &st) != 0) {
        cg_set_error("cannot write '%s': directory '%s': %s", path, dir, strerror(errno));
        ok = false;
    } else if (!S_ISDIR(st.st_mode)) {
        cg_set_error("cannot write '%s': '%s' is not a directory", path, dir);
        ok = false;
    } else if (access(dir, W_OK | X_OK) != 0) {
        cg_set_error("cannot write '%s': directory '%s' is not writable (%s)", path, dir,
                     strerror(errno));
        ok = false;
    } else if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a symlink is followed: a link to a regular file is fine */
        struct stat t;
        bool reg = S_ISLNK(st.st_mode) && stat(path, &t) == 0 && S_ISREG(t.st_mode);
        if (!reg) {
            const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                               : S_ISCHR(st.st_mode)  ? "a character device"
                               : S_ISBLK(st.st_mode)  ? "a block device"
                               : S_ISFIFO(st.st_mode) ? "a FIFO"
                               : S_ISSOCK(st.st_mode) ? "a socket"
                               : S_ISLNK(st.st_mode)  ? "a symbolic link to no regular file"
                                                      : "not a regular file";
            cg_set_error("'%s' is %s; a checkpoint replaces only a regular file (even with "
                         "--force)", path, kind);
            ok = false;
        }
    }
    free(dir);
    return ok;
}

/* ------------------------------------------------------------ lock */
/* With the lock held no other writer of path runs: temporary files of path
 * and of its loss curve are leftovers of a writer that was killed. */
static void remove_leftover_temps(const char *path)
{
    char *dir = dir_part(path);
    char *png = cg_loss_png_path(path);
    if (!dir || !png) {
        free(dir);
        free(png);
        return;
    }
    const char *b1 = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *b2 = strrchr(png, '/') ? strrchr(png, '/') + 1 : png;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *bases[2] = {b1, b2};
        for (int i = 0; i < 2; i++) {
            size_t bl = strlen(bases[i]);
            if (strncmp(e->d_name, bases[i], bl) == 0 && strncmp(e->d_name + bl, ".tmp.", 5) == 0) {
                char full[PATH_MAX];
                if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < (int)sizeof full)
                    (void)unlink(full);
                break;
            }
        }
    }
    if (d)
        closedir(d);
    free(dir);
    free(png);
}

bool cg_out_lock_take(const char *path, cg_out_lock *lock)
{
    lock->fd = -1;
    if (snprintf(lock->path, sizeof lock->path, "%s.lock", path) >= (int)sizeof lock->path) {
        cg_set_error("'%s': path too long for its lock file", path);
        return false;
    }
    int fd = open(lock->path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        cg_set_error("cannot create the lock file '%s': %s", lock->path, strerror(errno));
        return false;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char buf[32] = "";
        ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
        buf[k > 0 ? k : 0] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            cg_set_error("'%s' is being written by another run%s%s%s (its lock '%s' is held); "
                         "wait for it or choose another --out", path, buf[0] ? " (pid " : "",
                         buf, buf[0] ? ")" : "", lock->path);
        else
            cg_set_error("cannot lock '%s': %s", lock->path, strerror(e));
        return false;
    }
    char pid[32];
    int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k) {
        /* the pid is only for the message: the lock itself is held */
    }
    lock->fd = fd;
    remove_leftover_temps(path);
    return true;
}

void cg_out_lock_release(cg_out_lock *lock)
{
    if (!lock || lock->fd < 0)
        return;
    close(lock->fd); /* releases the flock */
    lock->fd = -1;
}
