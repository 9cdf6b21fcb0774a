/* cgrad zoo: the files around a training run, checked before any work is
 * done (issue 16):
 *
 *   data identity   models/data/data_id.h.
 *   output check    the checkpoint's directory exists and is writable, the
 *                   target is a regular file or absent (a device or FIFO is
 *                   never replaced, even with --force), and its name leaves
 *                   room for the temporary suffix.
 *   lock            flock() on a sibling "<out>.lock" refuses a second
 *                   writer of the same checkpoint while the first runs.
 *
 * Errors: false + cg_set_error (core/error.h), one line naming the path. */
#ifndef CG_MODELS_OUTFILE_H
#define CG_MODELS_OUTFILE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/data/data_id.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ output check */
/* The longest suffix a writer appends to the checkpoint's name for its
 * temporary files (".tmp.<pid>", ".loss.png.tmp.<pid>" on the stem). */
#define CG_OUT_SUFFIX_MAX 32

/* Check that path can be written as a checkpoint, before any training:
 * not empty and not ending in '/' (a directory, "--out newdir/"); its
 * directory exists (created one level deep when create_dir, as the
 * programs' default "out/" is) and is a writable directory; path is absent
 * or a regular file (never a device, FIFO, socket or directory, --force or
 * not); its last component plus CG_OUT_SUFFIX_MAX fits NAME_MAX and the
 * whole path PATH_MAX. The overwrite policy (--force) stays the caller's. */
bool cg_out_check(const char *path, bool create_dir);

/* ------------------------------------------------------------ lock */
typedef struct {
    int fd;          /* -1 when not held */
    char path[4096]; /* "<checkpoint>.lock" */
} cg_out_lock;

/* Take an exclusive lock on "<path>.lock" (created if missing, kept after
 * the run: removing it would race with a waiting writer). False + error
 * "'<path>' is being written by another run (pid N) ..." when another
 * process holds it. The lock dies with the process, so a crash or SIGKILL
 * never leaves a stale lock. */
bool cg_out_lock_take(const char *path, cg_out_lock *lock);
void cg_out_lock_release(cg_out_lock *lock);

#ifdef __cplusplus
}
#endif
#endif
