/* cgrad zoo: the files around a training run, checked before any work is
 * done (issues 16 and 25):
 *
 *   data identity   models/data/data_id.h.
 *   output check    the checkpoint's directory exists and is writable, the
 *                   target is a regular file or absent (a device or FIFO is
 *                   never replaced, even with --force), and its name leaves
 *                   room for the temporary suffix.
 *   same file       no file the run writes (checkpoint, loss curve, metrics
 *                   log, lock) is a file it reads (same inode, or the same
 *                   name once directories are resolved).
 *   lock            flock() on a sibling "NAME.cgrad-lock" refuses a second
 *                   writer of the same checkpoint, or of another whose
 *                   files beside it are the same ("m" and
 *                   "m.safetensors": NAME "m"), while the first runs; the
 *                   file goes when the run ends (a killed run's stays).
 *   metrics log     FILE.metrics.jsonl: a new file of the run's own,
 *                   renamed over the old name when the run's first
 *                   checkpoint replaces the old one (a run that ends
 *                   before leaves both as they were); on resume it keeps
 *                   the old log's history up to the checkpoint.
 * Nothing here follows a symbolic link when it creates a file, or writes
 * into a file it did not create.
 *
 * Errors: false + cg_set_error (core/error.h), one line naming the path. */
#ifndef CG_MODELS_OUTFILE_H
#define CG_MODELS_OUTFILE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "models/data/data_id.h"
#include "nn/safetensors.h"
#include "models/util/files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ output check */
/* The longest suffix a writer appends to the checkpoint's name for its
 * temporary files (".tmp.<pid>", ".loss.png.tmp.<pid>" on the stem). */
#define CG_OUT_SUFFIX_MAX 32

/* Check that path can be written as a checkpoint, before any training:
 * not empty and not ending in '/' (a directory, "--out newdir/"); its
 * directory exists (created with every missing parent when create_dir, as
 * the programs' default "out/" is) and is a writable directory; path is absent
 * or a regular file (never a device, FIFO, socket or directory, --force or
 * not); its last component plus CG_OUT_SUFFIX_MAX fits NAME_MAX and the
 * whole path PATH_MAX. The overwrite policy (--force) stays the caller's. */
bool cg_out_check(const char *path, bool create_dir);
/* cg_out_check's rule on what path is: absent or a regular file (a
 * symlink to one too), else false + error naming what it is. */
bool cg_out_check_regular(const char *path);

/* ------------------------------------------------------------ lock */
#define CG_OUT_LOCK_SUFFIX ".cgrad-lock"
typedef struct {
    int fd;          /* -1 when not held */
    char path[4096]; /* "NAME.cgrad-lock" */
} cg_out_lock;

/* The lock of checkpoint path: "NAME.cgrad-lock", NAME being path without
 * ".safetensors", as for the loss curve and the metrics log, which the
 * lock guards too (a lock per checkpoint name let a run with --out m and
 * one with --out m.safetensors write the same m.loss.png, m.metrics.jsonl
 * and m.step*.safetensors at once). Malloc'd; NULL + error. */
char *cg_out_lock_path(const char *path);

/* Take an exclusive lock on cg_out_lock_path(path), the file made if
 * missing. The lock file is never followed (a symbolic link is refused)
 * and an existing file is used only when it is a lock of ours (empty or a
 * process id): any other file is refused, never truncated. False + error
 * "'<path>' is being written by another run (pid N) ..." when another
 * process holds it. The lock dies with the process, so a crash or SIGKILL
 * never leaves a stale lock (its file stays, and the next run takes it).
 * Taking it removes a killed writer's temporary files ("<name>.tmp.<pid>"
 * of the checkpoint, loss curve and metrics log). */
bool cg_out_lock_take(const char *path, cg_out_lock *lock);
/* Release it and remove its file, while it is held and only when the
 * file at its name is still the one held: a run that opened the file
 * before it went finds that out once it has the lock, and makes another
 * (cg_out_lock_take), so no two runs ever hold a lock at one name. */
void cg_out_lock_release(cg_out_lock *lock);

/* Before each save of a run that holds lock for path: is the lock still
 * the file at its name? A lock moved or removed under the run (`mv runs/a
 * runs/b` of its directory, which the save makes again) no longer keeps a
 * second run out; it is taken again at its name, without
 * cg_out_lock_take's cleanup (the run's own temporary files may be live).
 * 1: held as it was (or no lock held); 2: taken again (the caller warns);
 * 0 + error: it cannot be (another run took it meanwhile). */
int cg_out_lock_keep(const char *path, cg_out_lock *lock);

/* ------------------------------------------------------------ same file */
/* (cg_same_file: models/util/files.h) */
/* Check every file a run with checkpoint `out` writes (the checkpoint when
 * with_ckpt, its loss curve, metrics log and lock, and standard output:
 * cg_out_check_stdout) against the file `in`
 * it reads (`what` names it: "--data"): false + error "--data 'x' is the
 * same file as 'y', the checkpoint this run writes; ..." */
bool cg_out_check_reads(const char *out, const char *in, const char *what, bool with_ckpt);

/* The files a run with checkpoint `out` writes beside it, its loss curve
 * and its metrics log, are absent (a link counts, whatever it points to):
 * false + error "'x.metrics.jsonl' exists: the metrics log of checkpoint
 * 'x', which this run writes; pass --force to overwrite it, or choose
 * another --out". The overwrite policy is the checkpoint's: the caller asks
 * only when it would refuse an existing checkpoint (no --force, not
 * resuming into it). The lock stays after every run: never asked. */
bool cg_out_check_siblings(const char *out);

/* Standard output is no file the command reads: false + error "standard
 * output is --ckpt 'x', which this command reads; ..." when fd 1 is the
 * regular file `in` (same device and inode: `eval --ckpt m.st >> m.st`
 * appended the result to the checkpoint, `translate < f >> f` its output to
 * its input, as GNU cat refuses). `in` "/dev/stdin": standard input.
 * cg_out_check_reads checks it too: a run's result line is a file written. */
bool cg_out_check_stdout(const char *in, const char *what);
/* Standard output is no file the command writes or replaces: false + error
 * "standard output is 'x', <what>; send the output elsewhere (nothing was
 * written)" when fd 1 is the file at path (same device and inode; `what`:
 * "the checkpoint this run writes"). `train --force ... >> m.st`
 * appended the result line to the old m.st, which the new checkpoint then
 * replaced: the line was lost (and `>> m.st` without --force made an empty
 * m.st, refused as an existing checkpoint). Checked before the files'
 * other rules, before any work. */
bool cg_out_check_stdout_writes(const char *path, const char *what);
/* The output of a command that writes one checkpoint from others (average,
 * merge), before any input is read: out's name fits (cg_out_check), it is
 * not standard output, not one of the n inputs (the same file: "--out 'a.st'
 * is the same file as the checkpoint 'a.st' it <verb>; choose another --out
 * (nothing was written)"), standard output is none of them, and it does
 * not exist unless force. False + error. */
bool cg_out_check_made(const char *out, bool force, const char *const *inputs, int n,
                       const char *verb);
/* Save w at out (atomically) under out's lock (cg_out_lock_take), as
 * training writes checkpoints; w is not freed. False + error. */
bool cg_out_save_locked(cg_st_writer *w, const char *out);

/* cg_out_check_stdout_writes for every file a run with checkpoint out
 * writes: the checkpoint, its loss curve, metrics log and lock (the kept
 * checkpoints of --keep-last: cg_kept_check). */
bool cg_out_check_stdout_run(const char *out);

/* A picture a command writes (sample --attention, seq2seq attention),
 * checked before the work that makes it: refused when its name is no
 * picture format (models/report/plot.h cg_plot_format), when its directory
 * is no writable directory (make_dir: the caller makes the missing ones,
 * models/util/files.h cg_make_dirs, so the deepest that exists must be),
 * when it is the file `in` the command
 * reads (`what` names it: "--ckpt"), when it exists and is no regular
 * file, when it exists and force is false ("'x' exists; pass --force to
 * overwrite it"), or when it is standard output (cg_out_check_stdout_writes). */
bool cg_out_picture_check(const char *path, bool force, const char *in, const char *what,
                          bool make_dir);

/* ------------------------------------------------------------ kept checkpoints */
/* train --keep-last N keeps each evaluation checkpoint also as
 * "<out without .safetensors>.step<step, 8 digits or more>.safetensors"
 * beside out ("out/charlm.step00000250.safetensors"), malloc'd, or NULL +
 * error. */
char *cg_kept_path(const char *out, int64_t step);
/* train --keep-best keeps the checkpoint of the lowest validation loss as
 * "<out without .safetensors>.best.safetensors" beside out, malloc'd, or
 * NULL + error. */
char *cg_best_path(const char *out);
/* path with its directory resolved ("/abs/dir/name"; the file need not
 * exist), malloc'd, or NULL + error when the directory does not resolve. */
char *cg_out_resolved(const char *path);
/* Before a run that keeps its evaluation checkpoints beside out: every
 * kept checkpoint of out that exists (found by name in out's directory)
 * must be one of kept[0..n) (the steps the run being resumed wrote), or
 * force given ("'x' exists: an evaluation checkpoint this run did not
 * write; pass --force to overwrite it, or choose another --out"); none may
 * be a file the run reads (reads[0..nr), NULL entries skipped; what[i]
 * names each: "--data"), even with force, nor standard output
 * (cg_out_check_stdout_writes). Nothing there (no directory yet) is fine.
 * False + error. */
bool cg_kept_check(const char *out, const int64_t *kept, int n, bool force,
                   const char *const *reads, const char *const *what, int nr);

/* ------------------------------------------------------------ metrics log */
/* The part of a metrics log (one JSON object per line, each with an
 * integral "step") that a run resumed at `step` keeps, so that the log
 * holds one history: every complete line that parses, with a step no later
 * than the checkpoint's and above the last kept line of its kind
 * (evaluation lines, with "val_loss", and training lines each never go
 * back). A torn last line, garbage, NUL bytes, and what a killed run logged
 * after its last checkpoint are dropped (*dropped counts the lines).
 * Returns the kept bytes (malloc'd, NUL-terminated, *out_len of them) or
 * NULL + error (out of memory). */
char *cg_metrics_log_keep(const char *bytes, size_t len, int64_t step, size_t *out_len,
                          int64_t *dropped);
/* A run's metrics log: lines go to a new file of its own,
 * "<path>.tmp.<pid>" (O_EXCL, never through a link), which replaces the
 * log at path only once the run's first checkpoint has replaced the old
 * checkpoint (cg_metrics_log_publish): until then the old log still tells
 * the history of the old checkpoint, and a run that fails or is killed
 * before its first save leaves both as they were (its temporary log is
 * removed by cg_metrics_log_close, or, killed, by the next writer's lock:
 * cg_out_lock_take). */
typedef struct {
    FILE *f;    /* appended to (cg_metrics_log_append); NULL once closed */
    char *path; /* FILE.metrics.jsonl */
    char *tmp;  /* the new log until it is published; then NULL */
} cg_metrics_log;
/* Open the metrics log `path` for appending: a fresh run (resume_step < 0)
 * starts it empty, a resumed run with what cg_metrics_log_keep keeps of the
 * old one (*dropped lines dropped; the old log is read only when it is a
 * regular file, never through a link). False + error when it cannot be
 * written (*log then holds nothing to close). */
bool cg_metrics_log_open(cg_metrics_log *log, const char *path, int64_t resume_step,
                         int64_t *dropped);
/* The new log renamed over path (once; lines appended after go to it
 * too). False + error, the new log kept for a later try. */
bool cg_metrics_log_publish(cg_metrics_log *log);
/* Close the log (log->f NULL: already closed) and remove it when it was
 * never published; *log emptied. False + error when its last lines could
 * not be written. */
bool cg_metrics_log_close(cg_metrics_log *log);
/* Append `line` and a newline to the metrics log f (a cg_metrics_log's f;
 * never written through stdio) in one piece, or not at
 * all: a write that fails part-way is cut off again, so that every line of
 * the log parses. `reserve` is the room the disk must keep beside the line
 * (the checkpoint still to be saved): with less free space the line is not
 * written and the call fails as a full disk does. False + error ("...: No
 * space left on device"), errno kept (ENOSPC, EDQUOT, EFBIG under a
 * file-size limit, ...). */
bool cg_metrics_log_append(FILE *f, const char *line, uint64_t reserve);

#ifdef __cplusplus
}
#endif
#endif
