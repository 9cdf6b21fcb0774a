/* cgrad nn: safetensors files (checkpoints, fixtures, exchange with PyTorch).
 *
 * Format: bytes 0..7 hold N, a little-endian u64; bytes 8..8+N hold a UTF-8
 * JSON object (right-padded with spaces)
 *     {"__metadata__": {"key": "string", ...},                      optional
 *      "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
 * and the rest of the file is the data buffer: each tensor row-major,
 * little-endian, at bytes [b, e) of the buffer. The ranges tile the buffer
 * exactly (no gap, no overlap, no trailing bytes), as in
 * shared/reference/safetensors_io.py and the Rust reference.
 *
 * Reading: cg_st_open() reads the header and validates all of it (every
 * name, dtype, shape and range, and that the ranges tile the rest of the
 * file) before returning, so every accessor afterwards is bounds-safe. The
 * file stays open, and a tensor's bytes are read when it is asked for,
 * straight into the tensor that receives them (as Python's safe_open): a
 * program that loads a model's weights from a training checkpoint never
 * reads the optimizer's moments, two thirds of the file with Adam. A bad
 * file gives NULL and an error (core/error.h) that names the file, the
 * tensor and the numbers that disagree; so does a tensor that can no longer
 * be read (the file was cut short after it was opened). A header whose
 * strings hold an escaped NUL (\u0000, valid JSON) is refused: a C string
 * ends there, and "a\u0000b" would be read as tensor 'a'. A file replaced by
 * a rename (cg_st_writer_save) stays readable through a handle opened
 * before: the handle reads the file it opened. One handle is for one
 * thread at a time.
 *
 * Writing: collect tensors in a cg_st_writer (data is copied when added),
 * then cg_st_writer_save() writes the file atomically: a new file next to
 * the target, fsync, rename over the target, fsync of the directory. On
 * any failure the old file (if any) is left untouched and no temporary file
 * remains. The new file is written without a name (O_TMPFILE: a writer
 * killed mid-save leaves nothing) and named "<path>.tmp.<pid>" once whole,
 * for its rename; where the file system cannot, it is written under that
 * name, and temporary files of writers that died mid-save are removed by
 * the next successful save. One process must not save the same path from
 * two threads at once. A symlink at path is replaced
 * by the new file (its target is not modified); a FIFO, device or socket at
 * path is refused (renamed over, /dev/null would become a regular file). The writer emits the same layout as the Python reference writer:
 * metadata first, tensors in the order added, data in that order, header
 * padded with spaces so that the data starts at a multiple of 8 bytes. */
#ifndef CG_SAFETENSORS_H
#define CG_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types a file may hold. All of them are accepted (and validated) by
 * the reader; F32, BF16, F16, I64, I32 and BOOL read as tensors of their
 * dtype (cg_st_get; cg_st_get_f32 widens the floats to float32); the others
 * are reachable as raw bytes through cg_st_raw(). */
typedef enum {
    CG_ST_BOOL,
    CG_ST_U8,
    CG_ST_I8,
    CG_ST_F8_E4M3,
    CG_ST_F8_E5M2,
    CG_ST_I16,
    CG_ST_U16,
    CG_ST_F16,
    CG_ST_BF16,
    CG_ST_I32,
    CG_ST_U32,
    CG_ST_F32,
    CG_ST_I64,
    CG_ST_U64,
    CG_ST_F64,
    CG_ST_NDTYPES
} cg_st_dtype;

/* "F32", "I64", ... (static string; "?" for an out-of-range value). */
const char *cg_st_dtype_name(cg_st_dtype dt);
/* Bytes per element (0 for an out-of-range value). */
size_t cg_st_dtype_size(cg_st_dtype dt);
/* The file dtypes cgrad's tensors have: F32, BF16, F16, I64, I32 and BOOL
 * are float32, bfloat16, float16, int64, int32 and bool (core/dtype.h).
 * cg_st_dtype_cg: false for the others (U8, I8, F64, ...: raw bytes through
 * cg_st_raw). cg_st_dtype_of: CG_ST_NDTYPES for a cg_dtype with no file
 * dtype. */
bool cg_st_dtype_cg(cg_st_dtype st, cg_dtype *out);
cg_st_dtype cg_st_dtype_of(cg_dtype dt);

/* Headers longer than this are rejected as corrupt, and not written: the
 * reference's MAX_HEADER_SIZE, 100,000,000 bytes (not 100 MiB; its reader
 * refuses a longer header with HeaderTooLarge). */
#define CG_ST_MAX_HEADER ((uint64_t)100000000)

/* ------------------------------------------------------------- reading */

typedef struct cg_st_file cg_st_file; /* an open file, its header validated */

/* Open path and validate its header. Returns a new handle owned by the
 * caller (free it with cg_st_close, which closes the file), or NULL +
 * error. Tensors with more than CG_MAX_DIMS dimensions are rejected. */
cg_st_file *cg_st_open(const char *path);
/* Same, from bytes already in memory (copied; the caller keeps buf). name is
 * used in error messages (may be NULL). */
cg_st_file *cg_st_open_memory(const void *buf, size_t len, const char *name);
void cg_st_close(cg_st_file *f); /* NULL is a no-op */

/* The path given to cg_st_open (borrowed, valid until cg_st_close). */
const char *cg_st_path(const cg_st_file *f);
/* All of f's bytes as opened: read from the open file, not its name, so
 * they are the bytes its tensors come from even when another file has been
 * renamed to the name since (a run saving there). For a checksum of what
 * was loaded. Malloc'd (*len bytes; at least one byte allocated), or NULL
 * + error (out of memory, a read error, the file shrank since it was
 * opened). */
void *cg_st_file_bytes(const cg_st_file *f, size_t *len);

/* Tensors in header order, 0 <= i < count. The name is borrowed from f. */
int cg_st_count(const cg_st_file *f);
const char *cg_st_name(const cg_st_file *f, int i);
/* Total elements of the file's float tensors, of every width (F32, BF16,
 * F16, and F64 and F8, which cg_st_get_f32 refuses): a loader's cheap check
 * that a config's parameters can be in the file before building the model,
 * whose load then names a tensor of a dtype it does not read. */
double cg_st_f32_elements(const cg_st_file *f);
bool cg_st_has(const cg_st_file *f, const char *name);

/* dtype, ndim and shape (CG_MAX_DIMS entries) of a tensor; any output may be
 * NULL. False + error if the name is absent. */
bool cg_st_info(const cg_st_file *f, const char *name, cg_st_dtype *dtype, int *ndim,
                int64_t *shape);

/* The raw little-endian bytes of a tensor, borrowed from f (valid until
 * cg_st_close; read from the file at the first call, then kept);
 * *nbytes receives their count. NULL + error if absent or unreadable (a
 * present tensor with zero bytes gives a non-NULL pointer). */
const void *cg_st_raw(const cg_st_file *f, const char *name, size_t *nbytes);

/* A new contiguous tensor (owned by the caller) of the file's dtype and
 * shape, as PyTorch's safetensors.torch.load_file reads it: F32, BF16, F16,
 * I64, I32 or BOOL (a BOOL byte other than 0 or 1 is refused). NULL +
 * error if the name is absent, its dtype is another (cg_st_raw reads
 * those) or its bytes cannot be read. */
cg_tensor *cg_st_get(const cg_st_file *f, const char *name);
/* A new float32 tensor of an F32, BF16 or F16 tensor (the narrower floats
 * widen exactly). NULL + error for any other dtype. */
cg_tensor *cg_st_get_f32(const cg_st_file *f, const char *name);
/* A new int64 tensor of an I64 tensor. NULL + error for any other dtype. */
cg_tensor *cg_st_get_i64(const cg_st_file *f, const char *name);

/* Copy the tensor `name` into dst (any strides), which must have exactly its
 * shape: a float tensor (F32, BF16, F16) into a float dst of any width
 * (bfloat16 into a float32 parameter widens; float32 into bfloat16 rounds
 * to nearest even), an int or bool one into a dst of its dtype. A
 * contiguous dst of the file's dtype receives the bytes straight from the
 * file. False + error naming the tensor and both shapes or dtypes
 * otherwise, or if the bytes cannot be read (then dst may hold part of
 * them). */
bool cg_st_load_into(const cg_st_file *f, const char *name, cg_tensor *dst);
/* Elements [first, first + numel(dst)) of the tensor `name`, in its
 * row-major order, into the contiguous dst, read from the file alone (a
 * rank's run of a sharded optimizer's state: ZeRO): of the file's dtype,
 * or of another float width (converted as cg_st_load_into's). False +
 * error naming the tensor if the dtypes differ otherwise, dst is not
 * contiguous, the run is not inside the tensor, or the bytes cannot be
 * read. */
bool cg_st_load_range(const cg_st_file *f, const char *name, int64_t first, cg_tensor *dst);

/* Metadata ("__metadata__" string map). Values and keys are borrowed from f.
 * cg_st_metadata returns NULL (and records no error) when key is absent. */
const char *cg_st_metadata(const cg_st_file *f, const char *key);
int cg_st_metadata_count(const cg_st_file *f);
const char *cg_st_metadata_key(const cg_st_file *f, int i);

/* Metadata with numbers and nested JSON. The format's __metadata__ is a
 * string-to-string map (Python's safetensors refuses anything else), so a
 * number or a JSON value is stored as its JSON text: "0.0003", "64",
 * "{\"d\":64,\"layers\":[1,2]}" (as Hugging Face stores configs). Any
 * reader sees a string; these functions turn it back into the value.
 * cg_st_metadata_number: the value of key as a number. False + error if the
 * key is absent or its value is not exactly a JSON number (*out unchanged).
 * cg_st_metadata_json: the value of key parsed as JSON (object, array,
 * number, true/false/null, quoted string): a new cJSON tree owned by the
 * caller (cJSON_Delete; <cjson/cJSON.h>), or NULL + error if absent or not
 * JSON. A plain string value (cg_st_set_metadata(w, "k", "hello")) is not
 * JSON: read it with cg_st_metadata. */
struct cJSON;
bool cg_st_metadata_number(const cg_st_file *f, const char *key, double *out);
struct cJSON *cg_st_metadata_json(const cg_st_file *f, const char *key);

/* ------------------------------------------------------------- writing */

typedef struct cg_st_writer cg_st_writer;

/* A new empty writer owned by the caller (free with cg_st_writer_free). */
cg_st_writer *cg_st_writer_new(void);
/* A writer that reads its tensors when it saves (torch.save's and
 * safetensors' save_file's way): cg_st_add* keep a reference to the tensor
 * instead of copying its values, so a checkpoint's save holds no second
 * copy of the model and its optimizer state (one tensor's, converted or
 * made contiguous, at a time). The tensors may die before the save (the
 * writer holds them) but must keep their values: one written after it was
 * added (its version moved: core/tensor.h cg_version) makes
 * cg_st_writer_save fail naming it, with nothing written. For a writer
 * saved right after its tensors are added, as the library's own savers
 * are. The raw adds (cg_st_add_f32_raw, cg_st_add_u8) copy in both. */
cg_st_writer *cg_st_writer_new_deferred(void);
void cg_st_writer_free(cg_st_writer *w); /* NULL is a no-op */

/* Add a tensor. The values are copied now (row-major, whatever t's strides),
 * so the source may change or die afterwards (a deferred writer: read at
 * the save, above). Names must be non-empty, valid
 * UTF-8, not "__metadata__", and unique within the writer. False + error.
 *   cg_st_add: in t's own dtype (any of cg_st_dtype_cg's);
 *   cg_st_add_as: converted to dt first, between float dtypes only
 *     (cg_st_add_as(w, name, weight, CG_BF16) halves a float32 weight);
 *   cg_st_add_f32: as float32 (a bfloat16 or float16 t widens);
 *   cg_st_add_f32_raw: ndim/shape float32 values from a C array. */
bool cg_st_add(cg_st_writer *w, const char *name, const cg_tensor *t);
bool cg_st_add_as(cg_st_writer *w, const char *name, const cg_tensor *t, cg_dtype dt);
bool cg_st_add_f32(cg_st_writer *w, const char *name, const cg_tensor *t);
bool cg_st_add_f32_raw(cg_st_writer *w, const char *name, int ndim, const int64_t *shape,
                       const float *data);
/* A tensor whose values are made when the writer saves, by fill(ctx, dst):
 * its elements, row-major, dtype dt in the host's byte order, into dst
 * (a buffer of this one tensor's size). A save calls each fill once, in
 * the order the tensors were added, while it writes the file; a save that
 * fails before an entry (the disk, an earlier fill) calls no more of them.
 * A fill that returns false fails the save with its error, nothing
 * written. An empty tensor's fill is not called. The writer owns ctx:
 * ctx_free(ctx) when it is freed, or at once when the add fails (NULL:
 * never). For values that are not in this process's memory as a whole: a
 * sharded optimizer's state gathered from other processes one tensor at a
 * time (optim/optim.h cg_optim_save_gathered). */
typedef bool (*cg_st_fill_fn)(void *ctx, void *dst);
bool cg_st_add_filled(cg_st_writer *w, const char *name, cg_dtype dt, int ndim,
                      const int64_t *shape, cg_st_fill_fn fill, void *ctx,
                      void (*ctx_free)(void *));
/* A 1-D U8 tensor of n bytes (opaque data such as a serialized tokenizer;
 * read it back with cg_st_raw). */
bool cg_st_add_u8(cg_st_writer *w, const char *name, int64_t n, const void *data);
/* Set (or replace) a metadata entry; key and value are copied (valid UTF-8). */
bool cg_st_set_metadata(cg_st_writer *w, const char *key, const char *value);
/* Set (or replace) a metadata entry holding a number (finite; written as
 * the shortest text that reads back to the same double) or any JSON value
 * (a cJSON tree, not consumed; written compact). Read them back with
 * cg_st_metadata_number / cg_st_metadata_json. A JSON text you already
 * have goes in with cg_st_set_metadata. False + error. */
bool cg_st_set_metadata_number(cg_st_writer *w, const char *key, double v);
bool cg_st_set_metadata_json(cg_st_writer *w, const char *key, const struct cJSON *value);

/* Remove "<path>.tmp.<pid>" and "<path>.tmp.<pid>.<n>" files of writers that no longer run (killed
 * mid-save); cg_st_writer_save does it after each save. Best effort. Any
 * writer of temporary files named so may use it (the loss curve does). */
void cg_st_remove_stale_temps(const char *path);
/* The same, and this process's own names too: for a caller that holds a
 * lock no other writer of path can hold and has written none of them yet
 * (the zoo's trainer once it holds its lock). A process whose pid is the
 * same at every start (a container's) removes what its killed
 * predecessor left. */
void cg_st_remove_temps_sole_writer(const char *path);
/* A new temporary file for path, open for writing (mode 0666 less the
 * umask): "<path>.tmp.<pid>", or "<path>.tmp.<pid>.<n>" when that name is
 * taken (another thread's save of path, or what a killed process of the
 * same pid left). Never an existing file, never through a symbolic link.
 * Its name goes into tmp (cap bytes: strlen(path) + 48 is enough). The
 * fd, or -1 + error naming path and tmp. cg_st_writer_save's, and any
 * writer's that renames a file into place (the metrics log, pictures). */
int cg_st_create_temp(const char *path, char *tmp, size_t cap);
/* What a file of st_mode mode is, for a message: "a directory", "a FIFO",
 * "a character device", ... ("a file of another kind" for none of those).
 * The writer names so a target it will not replace; any writer of files may. */
const char *cg_st_file_kind(unsigned mode);

/* Write everything to path atomically (see the top of this file). The writer
 * is not consumed: it can be saved again. False + error on failure. */
bool cg_st_writer_save(cg_st_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif
