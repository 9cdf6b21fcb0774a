/* cgrad zoo: the files around a training run, checked before any work is
 * done (issue 16):
 *
 *   data identity   what file a checkpoint was trained on: its absolute
 *                   path, size and XXH3-64 checksum (libxxhash). Resume and
 *                   eval compare it with the file they read and refuse a
 *                   different one, naming the difference; a moved copy
 *                   with the same bytes is the same data.
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

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ data identity */
typedef struct {
    char path[4096]; /* absolute (realpath) for a file on disk; as given for a stream */
    uint64_t size;   /* bytes */
    uint64_t hash;   /* XXH3-64 of the bytes */
} cg_data_id;

/* The identity of the bytes read from path (cg_read_file_once). */
void cg_data_id_of(const char *path, const void *bytes, size_t len, cg_data_id *out);
/* {"path": "...", "size": N, "xxh3": "<16 hex digits>"} (a new object; the
 * caller adds it to its state or deletes it) or NULL + error. */
cJSON *cg_data_id_to_json(const cg_data_id *id);
/* Read what cg_data_id_to_json wrote; false + error naming `what`. */
bool cg_data_id_from_json(const cJSON *o, const char *what, cg_data_id *out);
/* True when the data read (cg_data_id_of) is the stored data (same size
 * and checksum; the path may differ: a moved copy). Otherwise false + error:
 * "'<path>' is not the data this checkpoint was trained on ('<stored
 * path>'): size N bytes, the checkpoint's M" or "...: same size but a
 * different checksum (edited?)". */
bool cg_data_id_check(const cg_data_id *stored, const cg_data_id *read);

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
