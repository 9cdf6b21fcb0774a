/* cgrad nn: the safetensors reader. See nn/safetensors.h.
 *
 * cg_st_open reads the header and keeps the file open; a tensor's bytes are
 * read (pread) when it is asked for, straight into the tensor that receives
 * them. cg_st_open_memory keeps a copy of all the bytes instead. Either way
 * every byte of the header and every range are validated before the handle
 * is returned, so the accessors below never need to re-check bounds (a file
 * that shrinks afterwards gives a short read, an error). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/safetensors_impl.h"

/* ------------------------------------------------------------ format */
static int dtype_from_name(const char *s)
{
    for (int i = 0; i < CG_ST_NDTYPES; i++)
        if (strcmp(s, cg_st_dtype_name((cg_st_dtype)i)) == 0)
            return i;
    return -1;
}
static uint64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ================================================================ reading */

typedef struct {
    char *name;
    cg_st_dtype dtype;
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* relative to the data buffer */
} st_entry;

struct cg_st_file {
    char *path;
    int fd;                    /* cg_st_open: the open file; cg_st_open_memory: -1 */
    unsigned char *buf;        /* memory: all the bytes; file: the first 8 + header */
    size_t len;                /* the file's length */
    const unsigned char *data; /* memory: buf + data_at; file: NULL */
    uint64_t data_at;          /* where the data buffer starts: 8 + header */
    size_t data_len;
    st_entry *entries;   /* header order */
    unsigned char **raw; /* file: cg_st_raw's copy of entry i, read on first use */
    int n;
    st_entry **by_name; /* sorted by name, for lookups */
    char **meta_keys, **meta_vals;
    int nmeta;
};

static int cmp_entry_name(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return strcmp(x->name, y->name);
}

void cg_st_close(cg_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++) {
        free(f->entries[i].name);
        if (f->raw)
            free(f->raw[i]);
    }
    if (f->fd >= 0)
        close(f->fd);
    free(f->raw);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->entries);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->buf);
    free(f->path);
    free(f);
}

#define FAIL(...)                  \
    do {                           \
        cg_set_error(__VA_ARGS__); \
        goto fail;                 \
    } while (0)

/* Parse the metadata object into f. */
static bool parse_metadata(cg_st_file *f, const cJSON *meta)
{
    const char *P = f->path;
    if (cJSON_IsNull(meta))
        return true;
    if (!cJSON_IsObject(meta)) {
        cg_set_error("safetensors: %s: __metadata__ is not a JSON object", P);
        return false;
    }
    const char *dup;
    if (!cg_st_find_duplicate_key(meta, &dup)) {
        cg_set_error("safetensors: %s: out of memory", P);
        return false;
    }
    if (dup) {
        cg_set_error("safetensors: %s: duplicate __metadata__ key '%s'", P, dup);
        return false;
    }
    int n = cJSON_GetArraySize(meta);
    f->meta_keys = calloc((size_t)n + 1, sizeof(char *));
    f->meta_vals = calloc((size_t)n + 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals) {
        cg_set_error("safetensors: %s: out of memory", P);
        return false;
    }
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c) || !c->valuestring) {
            cg_set_error("safetensors: %s: __metadata__ value of '%s' is not a string", P,
                         c->string ? c->string : "");
            return false;
        }
        if (f->nmeta >= n)
            break;
        f->meta_keys[f->nmeta] = strdup(c->string ? c->string : "");
        f->meta_vals[f->nmeta] = strdup(c->valuestring);
        f->nmeta++;
        if (!f->meta_keys[f->nmeta - 1] || !f->meta_vals[f->nmeta - 1]) {
            cg_set_error("safetensors: %s: out of memory", P);
            return false;
        }
    }
    return true;
}

/* The entry's dtype into e->dtype. */
static bool entry_dtype(const cg_st_file *f, const cJSON *info, st_entry *e)
{
    const char *P = f->path, *N = e->name;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(info, "dtype");
    if (!dt) {
        cg_set_error("safetensors: %s: tensor '%s': missing dtype", P, N);
        return false;
    }
    if (!cJSON_IsString(dt) || !dt->valuestring) {
        cg_set_error("safetensors: %s: tensor '%s': dtype is not a string", P, N);
        return false;
    }
    int code = dtype_from_name(dt->valuestring);
    if (code < 0) {
        cg_set_error("safetensors: %s: tensor '%s': unknown dtype '%.32s'", P, N, dt->valuestring);
        return false;
    }
    e->dtype = (cg_st_dtype)code;
    return true;
}

/* The entry's shape into e->ndim, e->shape and e->numel (whose byte count
 * must fit in int64). */
static bool entry_shape(const cg_st_file *f, const cJSON *info, st_entry *e)
{
    const char *P = f->path, *N = e->name;
    size_t esize = cg_st_dtype_size(e->dtype);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(info, "shape");
    if (!shape) {
        cg_set_error("safetensors: %s: tensor '%s': missing shape", P, N);
        return false;
    }
    if (!cJSON_IsArray(shape)) {
        cg_set_error("safetensors: %s: tensor '%s': shape is not an array", P, N);
        return false;
    }
    int nd = cJSON_GetArraySize(shape);
    if (nd > CG_MAX_DIMS) {
        cg_set_error("safetensors: %s: tensor '%s': shape has %d dimensions, at most %d supported",
                     P, N, nd, CG_MAX_DIMS);
        return false;
    }
    e->ndim = nd;
    bool has_zero = false;
    int i = 0;
    for (const cJSON *c = shape->child; c && i < nd; c = c->next, i++) {
        uint64_t d;
        if (!cg_st_json_uint(c, &d)) {
            cg_set_error("safetensors: %s: tensor '%s': shape[%d] is not a non-negative integer", P,
                         N, i);
            return false;
        }
        e->shape[i] = (int64_t)d;
        if (d == 0)
            has_zero = true;
    }
    /* Element count; the byte count must fit in int64, and so must the
     * product of the nonzero sizes of an empty tensor: a tensor's element
     * count and strides multiply them (the reference refuses such a shape
     * too when its checked product overflows before it reaches the 0). */
    uint64_t numel = 1;
    const uint64_t limit = (uint64_t)INT64_MAX / esize;
    for (i = 0; i < nd; i++) {
        uint64_t d = (uint64_t)e->shape[i];
        if (d != 0 && numel > limit / d) {
            cg_set_error("safetensors: %s: tensor '%s': shape overflows (element count too "
                         "large at dimension %d)",
                         P, N, i);
            return false;
        }
        numel *= d ? d : 1;
    }
    e->numel = has_zero ? 0 : numel;
    return true;
}

/* The entry's data_offsets into e->begin and e->end: inside the data buffer,
 * and as many bytes as its shape and dtype take. */
static bool entry_offsets(const cg_st_file *f, const cJSON *info, st_entry *e)
{
    const char *P = f->path, *N = e->name;
    size_t esize = cg_st_dtype_size(e->dtype);
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(info, "data_offsets");
    if (!offs) {
        cg_set_error("safetensors: %s: tensor '%s': missing data_offsets", P, N);
        return false;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !cg_st_json_uint(offs->child, &b) || !cg_st_json_uint(offs->child->next, &en)) {
        cg_set_error("safetensors: %s: tensor '%s': data_offsets is not two non-negative integers",
                     P, N);
        return false;
    }
    if (b > en) {
        cg_set_error("safetensors: %s: tensor '%s': data_offsets begin %" PRIu64
                     " is after end %" PRIu64,
                     P, N, b, en);
        return false;
    }
    if (en > f->data_len) {
        cg_set_error("safetensors: %s: tensor '%s': data_offsets end %" PRIu64
                     " is beyond the data buffer (%zu bytes)",
                     P, N, en, f->data_len);
        return false;
    }
    if (en - b != e->numel * esize) {
        char sh[160];
        cg_shape_str_n(e->ndim, e->shape, sh, sizeof sh);
        cg_set_error("safetensors: %s: tensor '%s': byte count %" PRIu64 " does not match shape %s"
                     " %s (%" PRIu64 " bytes)",
                     P, N, en - b, sh, cg_st_dtype_name(e->dtype), e->numel * esize);
        return false;
    }
    e->begin = b;
    e->end = en;
    return true;
}

/* Validate one tensor entry and fill e (e->name already set). */
static bool parse_entry(cg_st_file *f, const cJSON *info, st_entry *e)
{
    const char *P = f->path, *N = e->name;
    if (!cJSON_IsObject(info)) {
        cg_set_error("safetensors: %s: tensor '%s': entry is not a JSON object", P, N);
        return false;
    }
    const char *dup;
    if (!cg_st_find_duplicate_key(info, &dup)) {
        cg_set_error("safetensors: %s: out of memory", P);
        return false;
    }
    if (dup) {
        cg_set_error("safetensors: %s: tensor '%s': duplicate key '%s' in its entry", P, N, dup);
        return false;
    }
    return entry_dtype(f, info, e) && entry_shape(f, info, e) && entry_offsets(f, info, e);
}

static int cmp_span(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

cJSON *cg_st_metadata_json(const cg_st_file *f, const char *key)
{
    if (!f || !key) {
        cg_set_error("safetensors: cg_st_metadata_json: NULL %s", !f ? "file" : "key");
        return NULL;
    }
    const char *v = cg_st_metadata(f, key);
    if (!v) {
        cg_set_error("safetensors: %s: no metadata '%.64s'", f->path, key);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithOpts(v, NULL, 1);
    if (!j)
        cg_set_error("safetensors: %s: metadata '%.64s' is not JSON ('%.64s')", f->path, key, v);
    return j;
}

bool cg_st_metadata_number(const cg_st_file *f, const char *key, double *out)
{
    cJSON *j = cg_st_metadata_json(f, key);
    bool ok = j && cJSON_IsNumber(j);
    if (ok && out)
        *out = j->valuedouble;
    else if (j)
        cg_set_error("safetensors: %s: metadata '%.64s' is not a number ('%.64s')", f->path, key,
                     cg_st_metadata(f, key));
    cJSON_Delete(j);
    return ok;
}

/* The 8-byte header length, checked against the file; sets f->data and
 * f->data_len and gives the header's length in *hlen. */
static bool split_header(cg_st_file *f, uint64_t *hlen_out)
{
    const char *P = f->path;
    size_t len = f->len;
    if (len < 8)
        FAIL("safetensors: %s: file is %zu bytes, too short for the 8-byte header length", P, len);
    uint64_t hlen = read_le64(f->buf);
    if (hlen > CG_ST_MAX_HEADER)
        FAIL("safetensors: %s: header length %" PRIu64 " is absurd (limit %" PRIu64
             " bytes); corrupt file?",
             P, hlen, CG_ST_MAX_HEADER);
    if (hlen > len - 8)
        FAIL("safetensors: %s: header length %" PRIu64 " does not fit the file (%zu bytes)", P,
             hlen, len);
    f->data_at = 8 + hlen;
    f->data = f->fd < 0 ? f->buf + f->data_at : NULL;
    f->data_len = len - 8 - (size_t)hlen;
    *hlen_out = hlen;
    return true;
fail:
    return false;
}

/* Where the header's first escaped NUL (\u0000) starts, or hlen if none.
 * A backslash is only valid inside a JSON string, and each starts an escape
 * of its own (the next byte, or u and four hex digits), so a pairwise walk
 * sees every escape: a "\\u0000" in the text is a backslash, then "u0000". */
static size_t escaped_nul_at(const unsigned char *hdr, size_t hlen)
{
    for (size_t i = 0; i + 1 < hlen; i++) {
        if (hdr[i] != '\\')
            continue;
        if (hdr[i + 1] == 'u' && i + 6 <= hlen && !memcmp(hdr + i + 2, "0000", 4))
            return i;
        i++; /* the escaped byte */
    }
    return hlen;
}

/* The header hdr[0, hlen) as a JSON object: valid UTF-8 JSON text, no byte
 * order mark, no escaped NUL (a C string ends there: "a\u0000b" would read
 * as 'a'), nothing after the value, no duplicate name. NULL + error. */
static cJSON *parse_header(const cg_st_file *f, const unsigned char *hdr, uint64_t hlen)
{
    const char *P = f->path;
    cJSON *root = NULL;
    size_t bad = cg_st_utf8_bad_at(hdr, (size_t)hlen, true);
    if (bad < hlen)
        FAIL("safetensors: %s: header is not valid JSON text: bad or control byte 0x%02x at "
             "header byte %zu",
             P, hdr[bad], bad);

    if (hlen >= 3 && hdr[0] == 0xEF && hdr[1] == 0xBB && hdr[2] == 0xBF)
        FAIL("safetensors: %s: header is not valid JSON (starts with a UTF-8 byte order mark)", P);
    bad = escaped_nul_at(hdr, (size_t)hlen);
    if (bad < hlen)
        FAIL("safetensors: %s: header holds an escaped NUL (\\u0000) at header byte %zu; cgrad's "
             "tensor names, dtypes and metadata cannot hold one",
             P, bad);
    const char *end = NULL;
    errno = 0; /* malloc's ENOMEM tells a parse out of memory from a bad header */
    root = cJSON_ParseWithLengthOpts((const char *)hdr, (size_t)hlen, &end, 0);
    if (!root && errno == ENOMEM)
        FAIL("safetensors: %s: out of memory reading the header", P);
    if (!root) {
        size_t at = (end && end >= (const char *)hdr && end <= (const char *)hdr + hlen)
                        ? (size_t)(end - (const char *)hdr)
                        : 0;
        FAIL("safetensors: %s: header is not valid JSON (near header byte %zu of %" PRIu64 ")", P,
             at, hlen);
    }
    if (end && end >= (const char *)hdr && end <= (const char *)hdr + hlen) {
        for (const char *p = end; p < (const char *)hdr + hlen; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                FAIL("safetensors: %s: header is not valid JSON (extra data at header byte %zu)", P,
                     (size_t)(p - (const char *)hdr));
    }
    if (!cJSON_IsObject(root))
        FAIL("safetensors: %s: header is not a JSON object", P);

    const char *dup;
    if (!cg_st_find_duplicate_key(root, &dup))
        FAIL("safetensors: %s: out of memory", P);
    if (dup)
        FAIL("safetensors: %s: duplicate name '%s' in the header", P, dup);
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

/* The header's members into f->entries (each checked by parse_entry) and
 * its __metadata__ into f's metadata. */
static bool read_entries(cg_st_file *f, const cJSON *root)
{
    const char *P = f->path;
    int members = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)members + 1, sizeof *f->entries);
    if (!f->entries)
        FAIL("safetensors: %s: out of memory", P);
    for (const cJSON *c = root->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        if (strcmp(name, "__metadata__") == 0) {
            if (!parse_metadata(f, c))
                goto fail;
            continue;
        }
        if (name[0] == '\0')
            FAIL("safetensors: %s: a tensor has an empty name", P);
        if (f->n >= members)
            break;
        st_entry *e = &f->entries[f->n];
        e->name = strdup(name);
        if (!e->name)
            FAIL("safetensors: %s: out of memory", P);
        f->n++;
        if (!parse_entry(f, c, e))
            goto fail;
    }
    return true;
fail:
    return false;
}

/* The ranges must tile the data buffer: sort by (begin, end) and walk. Then
 * f->by_name, sorted by name. */
static bool check_tiling(cg_st_file *f)
{
    const char *P = f->path;
    st_entry **spans = malloc(((size_t)f->n + 1) * sizeof *spans);
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!spans || !f->by_name)
        FAIL("safetensors: %s: out of memory", P);
    for (int i = 0; i < f->n; i++)
        spans[i] = f->by_name[i] = &f->entries[i];
    qsort(spans, (size_t)f->n, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    const st_entry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = spans[i];
        if (e->begin < pos)
            FAIL("safetensors: %s: tensor '%s': data range [%" PRIu64 ", %" PRIu64
                 ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                 P, e->name, e->begin, e->end, prev ? prev->name : "?", prev ? prev->begin : 0,
                 prev ? prev->end : 0);
        if (e->begin > pos)
            FAIL("safetensors: %s: tensor '%s': data range [%" PRIu64 ", %" PRIu64
                 ") leaves a gap of %" PRIu64 " bytes at byte %" PRIu64 " of the data buffer",
                 P, e->name, e->begin, e->end, e->begin - pos, pos);
        pos = e->end;
        prev = e;
    }
    if (pos != f->data_len)
        FAIL("safetensors: %s: %" PRIu64 " trailing bytes after the last tensor (data buffer is "
             "%zu bytes, tensors end at %" PRIu64 ")",
             P, (uint64_t)f->data_len - pos, f->data_len, pos);
    free(spans);
    /* The top-level duplicate check already guarantees unique names. */
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_entry_name);
    return true;
fail:
    free(spans);
    return false;
}

/* n bytes at byte off of f's file into dst. False + error (naming the
 * tensor, the header when name is NULL, the file when it is "") if the
 * read fails or the file ends first: it shrank after cg_st_open. */
static bool read_at(const cg_st_file *f, void *dst, size_t n, uint64_t off, const char *name)
{
    char what[300] = "header";
    if (name)
        snprintf(what, sizeof what, *name ? "tensor '%.256s'" : "its bytes", name);
    unsigned char *d = dst;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, d + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            cg_set_error("safetensors: %s: %s: read failed at byte %" PRIu64 ": %s", f->path, what,
                         off + got, strerror(errno));
            return false;
        }
        if (r == 0) {
            cg_set_error("safetensors: %s: %s: the file ends at byte %" PRIu64
                         ", but it had %zu bytes when opened (changed since?)",
                         f->path, what, off + got, f->len);
            return false;
        }
        got += (size_t)r;
    }
    return true;
}

/* The header (its length already in f->buf[0, 8) if the file has 8 bytes)
 * and its entries: validate all of it. */
static bool parse_file(cg_st_file *f)
{
    uint64_t hlen = 0;
    if (!split_header(f, &hlen))
        return false;
    if (f->fd >= 0) { /* bring the header in */
        unsigned char *b = realloc(f->buf, (size_t)(8 + hlen));
        if (!b) {
            cg_set_error("safetensors: %s: out of memory reading a %" PRIu64 "-byte header",
                         f->path, hlen);
            return false;
        }
        f->buf = b;
        if (!read_at(f, b + 8, (size_t)hlen, 8, NULL))
            return false;
    }
    cJSON *root = parse_header(f, f->buf + 8, hlen);
    bool ok = root && read_entries(f, root);
    cJSON_Delete(root);
    if (ok && f->fd >= 0 && !(f->raw = calloc((size_t)f->n + 1, sizeof *f->raw))) {
        cg_set_error("safetensors: %s: out of memory", f->path);
        ok = false;
    }
    return ok && check_tiling(f);
}

/* A new handle named path (copied) that takes buf, whatever happens; fd
 * (-1 for none) is closed by cg_st_close. NULL + error. */
static cg_st_file *new_file(const char *path, int fd, unsigned char *buf, size_t len)
{
    cg_st_file *f = calloc(1, sizeof *f);
    char *p = f ? strdup(path) : NULL;
    if (!p) {
        cg_set_error("safetensors: %s: out of memory", path);
        free(f);
        free(buf);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    f->path = p;
    f->fd = fd;
    f->buf = buf;
    f->len = len;
    return f;
}

cg_st_file *cg_st_open(const char *path)
{
    if (!path || !path[0]) {
        cg_set_error("safetensors: cg_st_open: %s path", path ? "empty" : "NULL");
        return NULL;
    }
    /* O_NONBLOCK: opening a FIFO must not hang; it is then refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        cg_set_error("safetensors: %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        cg_set_error("safetensors: %s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        cg_set_error("safetensors: %s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        cg_set_error("safetensors: %s: file too large (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    cg_st_file *f = new_file(path, fd, malloc(8), (size_t)st.st_size);
    if (f && !f->buf)
        cg_set_error("safetensors: %s: out of memory", path);
    if (!f || !f->buf || (f->len >= 8 && !read_at(f, f->buf, 8, 0, NULL)) || !parse_file(f)) {
        cg_st_close(f);
        return NULL;
    }
    return f;
}

cg_st_file *cg_st_open_memory(const void *data, size_t len, const char *name)
{
    if (!name)
        name = "<memory>";
    if (!data && len) {
        cg_set_error("safetensors: %s: NULL buffer of %zu bytes", name, len);
        return NULL;
    }
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) {
        cg_set_error("safetensors: %s: out of memory (%zu bytes)", name, len);
        return NULL;
    }
    if (len)
        memcpy(buf, data, len);
    cg_st_file *f = new_file(name, -1, buf, len);
    if (f && !parse_file(f)) {
        cg_st_close(f);
        return NULL;
    }
    return f;
}

const char *cg_st_path(const cg_st_file *f) { return f ? f->path : NULL; }

int cg_st_count(const cg_st_file *f) { return f ? f->n : 0; }

const char *cg_st_name(const cg_st_file *f, int i)
{
    if (!f)
        return NULL;
    if (i < 0 || i >= f->n) {
        cg_set_error("safetensors: %s: tensor index %d out of range [0, %d)", f->path, i, f->n);
        return NULL;
    }
    return f->entries[i].name;
}

void *cg_st_file_bytes(const cg_st_file *f, size_t *len)
{
    *len = 0;
    if (!f) {
        cg_error_null_input("cg_st_file_bytes");
        return NULL;
    }
    unsigned char *b = malloc(f->len ? f->len : 1);
    if (!b) {
        cg_set_error("safetensors: %s: out of memory for its %zu bytes", f->path, f->len);
        return NULL;
    }
    if (f->fd < 0)
        memcpy(b, f->buf, f->len);
    else if (!read_at(f, b, f->len, 0, "")) {
        free(b);
        return NULL;
    }
    *len = f->len;
    return b;
}

static const st_entry *lookup(const cg_st_file *f, const char *name)
{
    if (!f || !name || f->n == 0)
        return NULL;
    st_entry key = {.name = (char *)name};
    const st_entry *kp = &key;
    st_entry **hit = bsearch(&kp, f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_entry_name);
    return hit ? *hit : NULL;
}

/* lookup, recording an error when absent. */
static const st_entry *need(const cg_st_file *f, const char *name, const char *fn)
{
    if (!f) {
        cg_error_null_input(fn);
        return NULL;
    }
    if (!name) {
        cg_set_error("safetensors: %s: %s: NULL tensor name", f->path, fn);
        return NULL;
    }
    const st_entry *e = lookup(f, name);
    if (!e)
        cg_set_error("safetensors: %s: no tensor named '%s' (%d tensors in file)", f->path, name,
                     f->n);
    return e;
}

bool cg_st_has(const cg_st_file *f, const char *name) { return lookup(f, name) != NULL; }

bool cg_st_info(const cg_st_file *f, const char *name, cg_st_dtype *dtype, int *ndim,
                int64_t *shape)
{
    const st_entry *e = need(f, name, "cg_st_info");
    if (!e)
        return false;
    if (dtype)
        *dtype = e->dtype;
    if (ndim)
        *ndim = e->ndim;
    if (shape)
        for (int i = 0; i < e->ndim; i++)
            shape[i] = e->shape[i];
    return true;
}

const void *cg_st_raw(const cg_st_file *f, const char *name, size_t *nbytes)
{
    const st_entry *e = need(f, name, "cg_st_raw");
    if (!e)
        return NULL;
    size_t n = (size_t)(e->end - e->begin);
    if (nbytes)
        *nbytes = n;
    if (f->fd < 0)
        return f->data + e->begin;
    unsigned char **copy = &f->raw[e - f->entries];
    if (!*copy) {
        unsigned char *b = malloc(n ? n : 1);
        if (!b) {
            cg_set_error("safetensors: %s: tensor '%s': out of memory (%zu bytes)", f->path,
                         e->name, n);
            return NULL;
        }
        if (!read_at(f, b, n, f->data_at + e->begin, e->name)) {
            free(b);
            return NULL;
        }
        *copy = b;
    }
    return *copy;
}

/* count elements of entry e from element first into dst */
static bool read_entry_run(const cg_st_file *f, const st_entry *e, uint64_t first, uint64_t count,
                           void *dst)
{
    size_t sz = cg_st_dtype_size(e->dtype), n = (size_t)count * sz;
    uint64_t at = e->begin + first * sz;
    /* the bytes in memory (cg_st_open_memory's, or cg_st_raw's copy), else the file's */
    const unsigned char *src = f->fd < 0 ? f->data + at : f->raw[e - f->entries];
    if (src && f->fd >= 0)
        src += first * sz;
    if (!src && !read_at(f, dst, n, f->data_at + at, e->name))
        return false;
    cg_st_copy_le(dst, src ? src : dst, count, sz);
    return true;
}

bool cg_st_read_values(const cg_st_file *f, const char *name, void *dst, const char *fn)
{
    const st_entry *e = need(f, name, fn);
    return e && read_entry_run(f, e, 0, (e->end - e->begin) / cg_st_dtype_size(e->dtype), dst);
}

bool cg_st_read_run(const cg_st_file *f, const char *name, uint64_t first, uint64_t count,
                    void *dst, const char *fn)
{
    const st_entry *e = need(f, name, fn);
    return e && read_entry_run(f, e, first, count, dst);
}

const char *cg_st_metadata(const cg_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}

int cg_st_metadata_count(const cg_st_file *f) { return f ? f->nmeta : 0; }

const char *cg_st_metadata_key(const cg_st_file *f, int i)
{
    if (!f)
        return NULL;
    if (i < 0 || i >= f->nmeta) {
        cg_set_error("safetensors: %s: metadata index %d out of range [0, %d)", f->path, i,
                     f->nmeta);
        return NULL;
    }
    return f->meta_keys[i];
}
