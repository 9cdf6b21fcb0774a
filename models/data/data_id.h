/* cgrad zoo, data layer: what file a checkpoint was trained on: its
 * absolute path, size and XXH3-64 checksum (libxxhash). Resume and eval
 * compare it with the file they read and refuse a different one, naming
 * the difference; a moved copy with the same bytes is the same data.
 *
 * Errors: false + cg_set_error (core/error.h), one line naming the path. */
#ifndef CG_MODELS_DATA_DATA_ID_H
#define CG_MODELS_DATA_DATA_ID_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char path[4096]; /* absolute (realpath) for a file or FIFO on disk; as given for a pipe */
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

#ifdef __cplusplus
}
#endif
#endif
