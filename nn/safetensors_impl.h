/* cgrad nn, INTERNAL: what the safetensors reader (safetensors_read.c:
 * the file, its header and its bytes; safetensors_get.c: tensors of those
 * bytes) and writer (safetensors_write.c) share: the format's byte order
 * and its UTF-8 rule (safetensors_format.c). Not installed. */
#ifndef CG_NN_SAFETENSORS_IMPL_H
#define CG_NN_SAFETENSORS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"

/* True on a little-endian host (the file's byte order). */
bool cg_st_host_is_le(void);
/* Copy n elements of size sz (at most 8) from little-endian src to host
 * order dst (or the reverse: the transformation is its own inverse). dst
 * may be src (in place) but must not overlap it otherwise. */
void cg_st_copy_le(void *dst, const void *src, size_t n, size_t sz);
/* Index of the first byte that makes s[0..n) invalid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid), or n if valid.
 * If json_text, control bytes other than tab/newline/CR are invalid too. */
size_t cg_st_utf8_bad_at(const unsigned char *s, size_t n, bool json_text);
/* A NUL-terminated string that is valid UTF-8. */
bool cg_st_utf8_valid(const char *s);
/* A JSON object's first duplicate member name in *dup (NULL if none); false
 * when out of memory. */
struct cJSON;
bool cg_st_find_duplicate_key(const struct cJSON *obj, const char **dup);
/* A JSON number that is a non-negative integer below CG_ST_JSON_UINT_END
 * (2^53: cJSON holds numbers as doubles, exact below it), into *out. The
 * writer refuses a size at or past it: the file could not be read back. */
#define CG_ST_JSON_UINT_END (INT64_C(1) << 53)
bool cg_st_json_uint(const struct cJSON *v, uint64_t *out);

/* The values of tensor `name`, in host byte order, into dst (as many bytes
 * as its shape and dtype take): copied from cg_st_open_memory's bytes, or
 * read from cg_st_open's file. False + error if it is absent or the read
 * fails (then dst may hold part of the values); fn names the public caller
 * in the messages. */
bool cg_st_read_values(const cg_st_file *f, const char *name, void *dst, const char *fn);
/* The same for count elements from element first (inside the tensor: the
 * caller checks), from the file alone. */
bool cg_st_read_run(const cg_st_file *f, const char *name, uint64_t first, uint64_t count,
                    void *dst, const char *fn);

/* safetensors_file.c: where cg_st_writer_save puts its file. */
/* The directory holding path ("." if none); malloc'd. */
char *cg_st_dir_of(const char *path);
/* Remove "<path>.tmp.<pid>" (or "<path>.tmp.<pid>.<n>") files in dir left
 * by writers that died mid-save (SIGKILL, power loss, a file system
 * without unnamed files): those whose process no longer exists. A file of
 * a live process (another writer of the same path) is left alone; own:
 * this process's names too (a dead process of the same pid left them).
 * Best effort: failures are ignored. */
void cg_st_remove_temps_in(const char *path, const char *dir, bool own);
/* A new file without a name in directory dir (O_TMPFILE), open for
 * writing, or -1 where its file system has none: a save killed before its
 * end leaves nothing of it, not even a temporary file. */
int cg_st_open_unnamed(const char *dir);
/* The unnamed file fd, written whole, named as a temporary file of path
 * (cg_st_create_temp's names; the name into tmp, cap bytes). False + error. */
bool cg_st_link_unnamed(int fd, const char *path, char *tmp, size_t cap);
/* The rename into path made durable (fsync of dir). A directory we cannot
 * open or a file system without directory fsync is tolerated; a real I/O
 * error is reported. */
bool cg_st_sync_dir(const char *path, const char *dir);
/* False + error if path exists and is neither a regular file nor a symlink
 * (replaced, see nn/safetensors.h) nor a directory (the rename fails):
 * renaming over a FIFO or a device (cg_module_save(m, "/dev/null") as root)
 * would put a regular file in its place. */
bool cg_st_target_replaceable(const char *path);

#endif
