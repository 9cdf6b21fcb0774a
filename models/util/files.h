/* cgrad zoo, util layer: input files read once (whatever their kind) and
 * the parent directory of an output file.
 *
 * Errors: NULL/false/-2 + cg_set_error (core/error.h) naming the file. */
#ifndef CG_MODELS_UTIL_FILES_H
#define CG_MODELS_UTIL_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest input file the programs accept, in bytes: CG_MAX_INPUT_MB
 * from the environment when set (a positive integer), else a sixth of the
 * memory available to this process (the smallest of MemAvailable, the
 * address-space rlimit and the cgroup's memory.max; a corpus needs about 5
 * bytes per byte of text while it is decoded). At least 1 MB. */
size_t cg_input_limit(void);

/* Read a whole file ONCE, from any kind of file: a regular file, a FIFO, a
 * pipe (--data <(cat x)), /dev/stdin ("-" is stdin too). Returns a malloc'd
 * buffer with a NUL after the *len bytes. NULL + error naming path when it
 * cannot be opened, is a directory, a read fails (reported, never taken for
 * the end of input), it holds more than max_bytes (0: cg_input_limit()),
 * or, with text = true, it is empty or holds a NUL byte (refused as soon as
 * one is read, so /dev/zero fails at once). */
char *cg_read_file_once(const char *path, size_t max_bytes, bool text, size_t *len);

/* After reading path failed: when it could not be opened and it is the
 * program's default data file, the error gets how to make it ("...;
 * create it with scripts/prepare_data.sh (or pass --data FILE)"). */
void cg_data_default_hint(const char *path, const char *default_path);

/* One line of f, like getline(3) (*buf grown as needed, *cap its size) but
 * without the "\n": returns its length, -1 at the end of input, -3 + error
 * for a bad line ("a NUL byte at byte 5 (not text)", "longer than max_len
 * bytes"), which is read to its end and dropped so that the next call
 * reads the next line, -2 + error ("name: read error: ...", out of memory,
 * or a bad line with no end within CG_LINE_SKIP_MAX(max_len) bytes, as
 * /dev/zero): a read error is never taken for the end of input. */
#define CG_LINE_MAX ((size_t)1 << 20)
#define CG_LINE_SKIP_MAX(max_len) ((max_len)*64)
long long cg_read_line(char **buf, size_t *cap, FILE *f, const char *name, size_t max_len);
/* Every line of f (cg_read_line with CG_LINE_MAX, a trailing "\r" cut too)
 * as n malloc'd strings in a malloc'd array (free each and the array), or
 * NULL + error. why NULL: a bad line fails the whole input ("name: line 3:
 * a NUL byte ..."); else a bad line is "" in the array and *why receives n
 * entries (malloc'd, as the lines): NULL for a good line, the reason for a
 * bad one. */
char **cg_read_lines(FILE *f, const char *name, int64_t *n, char ***why);
/* cg_read_lines stopping after max lines (max <= 0: all): *n < max only
 * at the end of f (a next call then gives 0 lines). */
char **cg_read_lines_upto(FILE *f, const char *name, int64_t max, int64_t *n, char ***why);

/* Write len bytes of buf to fd, going on after EINTR and short writes.
 * Returns the bytes written: len, or fewer with errno set (EIO for a write
 * that wrote nothing). */
size_t cg_write_all(int fd, const void *buf, size_t len);

/* Flush f, a program's output, and check every write to it so far: false +
 * "cannot write the output: <reason>" (a full disk, a closed stdout,
 * "Broken pipe": its reader went away; the programs ignore SIGPIPE,
 * models/util/cli.h cg_cli_streams), the reason from errno (set errno to 0
 * before the writes this checks). A stream of output (sample's text,
 * translate's lines) calls it after each piece and stops at the first
 * failure; cg_cli_stdout_ok at a program's end. */
bool cg_output_flush(FILE *f);

/* Read a whole file as UTF-8 code points (malloc'd). NULL + error if it is
 * missing, unreadable, empty, too large, or not valid UTF-8. */
uint32_t *cg_read_text_file(const char *path, int64_t *n);

/* Create dir and every missing directory above it (as mkdir -p). false +
 * error when one cannot be made or a file stands in its place; the
 * directories this call made are then removed again. */
bool cg_make_dirs(const char *dir);

/* cg_make_dirs for the directory part of path (none: nothing to do). */
bool cg_ensure_parent_dir(const char *path);

/* The directory part of path ("." when there is none), malloc'd (NULL: out
 * of memory). */
char *cg_dir_part(const char *path);
/* path with its directory resolved (the file itself need not exist):
 * "<realpath(dir)>/<name>", malloc'd; NULL when the directory does not
 * resolve. */
char *cg_resolved_name(const char *path);
/* True when writing `written` (which may not exist yet) could change the
 * regular file `read`: the same inode (links followed), or the same name
 * once both directories are resolved. False for a read path that is no
 * regular file (a stream). */
bool cg_same_file(const char *written, const char *read);

#ifdef __cplusplus
}
#endif
#endif
