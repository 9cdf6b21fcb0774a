/* cgrad nn: the safetensors writer: tensors collected, then saved
 * atomically (a new file next to the target, fsync'd and renamed).
 * See nn/safetensors.h. */
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

static void write_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* ================================================================ writing */

typedef struct {
    char *name;
    cg_st_dtype dtype;
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    /* a copying writer's bytes, little-endian, from the tensors' allocator
     * (core/alloc.c: they reuse the blocks a training step's activations
     * left cached, issue 35) */
    unsigned char *bytes;
    size_t nbytes;
    /* a deferred writer's tensor instead (bytes NULL): a held reference,
     * read at the save as dtype dt, and its version when added */
    cg_tensor *src;
    cg_dtype dt;
    uint64_t version;
    /* a filled entry's maker instead (cg_st_add_filled): called at each
     * save into a buffer of nbytes, dtype dt, host byte order */
    cg_st_fill_fn fill;
    void *ctx;
    void (*ctx_free)(void *);
} w_entry;

struct cg_st_writer {
    w_entry *e;
    int n, cap;
    char **mkey, **mval;
    int nmeta, mcap;
    bool deferred;
};

cg_st_writer *cg_st_writer_new(void)
{
    cg_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        cg_set_error("safetensors: cg_st_writer_new: out of memory");
    return w;
}

cg_st_writer *cg_st_writer_new_deferred(void)
{
    cg_st_writer *w = cg_st_writer_new();
    if (w)
        w->deferred = true;
    return w;
}

void cg_st_writer_free(cg_st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        free(w->e[i].name);
        cg_free(w->e[i].bytes);
        cg_release_held(w->e[i].src);
        if (w->e[i].ctx_free)
            w->e[i].ctx_free(w->e[i].ctx);
    }
    for (int i = 0; i < w->nmeta; i++) {
        free(w->mkey[i]);
        free(w->mval[i]);
    }
    free(w->e);
    free(w->mkey);
    free(w->mval);
    free(w);
}

/* Checks a new tensor's name and shape; returns the element count or -1. */
static int64_t check_new(cg_st_writer *w, const char *fn, const char *name, int ndim,
                         const int64_t *shape)
{
    if (!w) {
        cg_set_error("safetensors: %s: NULL writer", fn);
        return -1;
    }
    if (!name || !name[0]) {
        cg_set_error("safetensors: %s: %s tensor name", fn, name ? "empty" : "NULL");
        return -1;
    }
    if (strcmp(name, "__metadata__") == 0) {
        cg_set_error("safetensors: %s: '__metadata__' is reserved, not a tensor name", fn);
        return -1;
    }
    if (!cg_st_utf8_valid(name)) {
        cg_set_error("safetensors: %s: tensor name is not valid UTF-8", fn);
        return -1;
    }
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) {
            cg_set_error("safetensors: %s: tensor '%s' was already added", fn, name);
            return -1;
        }
    if (ndim < 0 || ndim > CG_MAX_DIMS || (ndim > 0 && !shape)) {
        cg_set_error("safetensors: %s: tensor '%s': ndim %d out of range [0, %d]", fn, name, ndim,
                     CG_MAX_DIMS);
        return -1;
    }
    int64_t numel = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            cg_set_error("safetensors: %s: tensor '%s': negative size %" PRId64 " at dim %d", fn,
                         name, shape[i], i);
            return -1;
        }
        if (shape[i] >= CG_ST_JSON_UINT_END) { /* only an empty tensor can be so wide */
            cg_set_error("safetensors: %s: tensor '%s': size %" PRId64 " at dim %d is 2^53 or "
                         "more, past what a header's numbers hold exactly",
                         fn, name, shape[i], i);
            return -1;
        }
        empty |= shape[i] == 0;
    }
    for (int i = 0; i < ndim; i++) { /* the nonzero sizes, as the reader counts them */
        if (shape[i] != 0 && numel > (INT64_MAX / 8) / shape[i]) {
            cg_set_error("safetensors: %s: tensor '%s': shape too large", fn, name);
            return -1;
        }
        numel *= shape[i] ? shape[i] : 1;
    }
    return empty ? 0 : numel;
}

/* Append an entry; takes ownership of bytes (freed on failure); or, with
 * bytes NULL and src given, keeps a reference to src (a deferred writer). */
static bool push_entry(cg_st_writer *w, const char *name, cg_st_dtype dt, int ndim,
                       const int64_t *shape, unsigned char *bytes, size_t nbytes,
                       const cg_tensor *src, cg_dtype src_dt)
{
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        w_entry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
        if (!ne)
            goto oom;
        w->e = ne;
        w->cap = cap;
    }
    w_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name)
        goto oom;
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        e->shape[i] = shape[i];
    e->bytes = bytes;
    e->nbytes = nbytes;
    if (src) {
        e->src = cg_retain_held((cg_tensor *)src);
        e->dt = src_dt;
        e->version = cg_version(src);
    }
    w->n++;
    return true;
oom:
    cg_free(bytes);
    cg_set_error("safetensors: tensor '%s': out of memory", name);
    return false;
}

bool cg_st_add_f32_raw(cg_st_writer *w, const char *name, int ndim, const int64_t *shape,
                       const float *data)
{
    int64_t numel = check_new(w, "cg_st_add_f32_raw", name, ndim, shape);
    if (numel < 0)
        return false;
    if (numel > 0 && !data) {
        cg_set_error("safetensors: cg_st_add_f32_raw: tensor '%s': NULL data", name);
        return false;
    }
    size_t nb = (size_t)numel * 4;
    unsigned char *bytes = cg_alloc(nb);
    if (!bytes) {
        cg_set_error("safetensors: tensor '%s': out of memory", name);
        return false;
    }
    cg_st_copy_le(bytes, data, (size_t)numel, 4);
    return push_entry(w, name, CG_ST_F32, ndim, shape, bytes, nb, NULL, CG_F32);
}

bool cg_st_add_as(cg_st_writer *w, const char *name, const cg_tensor *t, cg_dtype dt)
{
    if (!t) { /* keep the root cause of a failed chain if there is one */
        if (!cg_has_error())
            cg_set_error("safetensors: cg_st_add: tensor '%s' is NULL", name ? name : "(null)");
        return false;
    }
    cg_st_dtype sdt = cg_st_dtype_of(dt);
    if (sdt == CG_ST_NDTYPES ||
        (t->dtype != dt && !(cg_dtype_is_float(t->dtype) && cg_dtype_is_float(dt)))) {
        cg_set_error("safetensors: cg_st_add: tensor '%s' is %s and cannot be saved as %s (floats "
                     "convert among float32, bfloat16 and float16; other dtypes are saved as they "
                     "are)",
                     name ? name : "", cg_dtype_name(t->dtype), cg_dtype_name(dt));
        return false;
    }
    int64_t numel = check_new(w, "cg_st_add", name, t->ndim, t->shape);
    if (numel < 0)
        return false;
    size_t esize = cg_dtype_size(dt), nb = (size_t)numel * esize;
    if (w->deferred) /* read at the save */
        return push_entry(w, name, sdt, t->ndim, t->shape, NULL, nb, t, dt);
    cg_tensor *c = t->dtype == dt ? cg_k_contiguous(t) : cg_k_to(t, dt);
    unsigned char *bytes = c ? cg_alloc(nb) : NULL;
    if (!bytes) {
        if (c)
            cg_set_error("safetensors: tensor '%s': out of memory", name);
        cg_release(c);
        return false;
    }
    cg_st_copy_le(bytes, cg_data_ptr(c), (size_t)numel, esize);
    cg_release(c);
    return push_entry(w, name, sdt, t->ndim, t->shape, bytes, nb, NULL, dt);
}

bool cg_st_add_filled(cg_st_writer *w, const char *name, cg_dtype dt, int ndim,
                      const int64_t *shape, cg_st_fill_fn fill, void *ctx, void (*ctx_free)(void *))
{
    cg_st_dtype sdt = cg_st_dtype_of(dt);
    int64_t numel = -1;
    if (!fill)
        cg_set_error("safetensors: cg_st_add_filled: tensor '%s': NULL fill", name ? name : "");
    else if (sdt == CG_ST_NDTYPES)
        cg_set_error("safetensors: cg_st_add_filled: tensor '%s': %s is not a safetensors dtype",
                     name ? name : "", cg_dtype_name(dt));
    else
        numel = check_new(w, "cg_st_add_filled", name, ndim, shape);
    if (numel < 0 ||
        !push_entry(w, name, sdt, ndim, shape, NULL, (size_t)numel * cg_dtype_size(dt), NULL, dt)) {
        if (ctx_free)
            ctx_free(ctx);
        return false;
    }
    w_entry *e = &w->e[w->n - 1];
    e->dt = dt;
    e->fill = fill;
    e->ctx = ctx;
    e->ctx_free = ctx_free;
    return true;
}

bool cg_st_add(cg_st_writer *w, const char *name, const cg_tensor *t)
{
    return cg_st_add_as(w, name, t, t ? t->dtype : CG_F32);
}

bool cg_st_add_f32(cg_st_writer *w, const char *name, const cg_tensor *t)
{
    return cg_st_add_as(w, name, t, CG_F32);
}

bool cg_st_add_u8(cg_st_writer *w, const char *name, int64_t n, const void *data)
{
    int64_t numel = check_new(w, "cg_st_add_u8", name, 1, &n);
    if (numel < 0)
        return false;
    if (numel > 0 && !data) {
        cg_set_error("safetensors: cg_st_add_u8: tensor '%s': NULL data", name);
        return false;
    }
    unsigned char *bytes = cg_alloc((size_t)numel);
    if (!bytes) {
        cg_set_error("safetensors: tensor '%s': out of memory", name);
        return false;
    }
    if (numel > 0)
        memcpy(bytes, data, (size_t)numel);
    return push_entry(w, name, CG_ST_U8, 1, &n, bytes, (size_t)numel, NULL, CG_F32);
}

bool cg_st_set_metadata(cg_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value) {
        cg_set_error("safetensors: cg_st_set_metadata: NULL %s", !w     ? "writer"
                                                                 : !key ? "key"
                                                                        : "value");
        return false;
    }
    if (!cg_st_utf8_valid(key) || !cg_st_utf8_valid(value)) {
        cg_set_error("safetensors: cg_st_set_metadata: key or value of '%.64s' is not valid UTF-8",
                     key);
        return false;
    }
    char *v = strdup(value);
    if (!v) {
        cg_set_error("safetensors: cg_st_set_metadata: out of memory");
        return false;
    }
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkey[i], key) == 0) {
            free(w->mval[i]);
            w->mval[i] = v;
            return true;
        }
    if (w->nmeta == w->mcap) {
        int cap = w->mcap ? 2 * w->mcap : 8;
        char **nk = realloc(w->mkey, (size_t)cap * sizeof *nk);
        if (nk)
            w->mkey = nk;
        char **nv = nk ? realloc(w->mval, (size_t)cap * sizeof *nv) : NULL;
        if (nv)
            w->mval = nv;
        if (!nk || !nv) {
            free(v);
            cg_set_error("safetensors: cg_st_set_metadata: out of memory");
            return false;
        }
        w->mcap = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        cg_set_error("safetensors: cg_st_set_metadata: out of memory");
        return false;
    }
    w->mkey[w->nmeta] = k;
    w->mval[w->nmeta] = v;
    w->nmeta++;
    return true;
}

bool cg_st_set_metadata_json(cg_st_writer *w, const char *key, const cJSON *value)
{
    if (!w || !key || !value) {
        cg_set_error("safetensors: cg_st_set_metadata_json: NULL %s", !w     ? "writer"
                                                                      : !key ? "key"
                                                                             : "value");
        return false;
    }
    if (cJSON_IsInvalid(value) || (cJSON_IsNumber(value) && !isfinite(value->valuedouble))) {
        cg_set_error("safetensors: metadata '%.64s': %s", key,
                     cJSON_IsInvalid(value) ? "not a JSON value"
                                            : "a number must be finite (JSON has no nan or inf)");
        return false;
    }
    char *text = cJSON_PrintUnformatted(value);
    if (!text) {
        cg_set_error("safetensors: metadata '%.64s': out of memory", key);
        return false;
    }
    bool ok = cg_st_set_metadata(w, key, text);
    cJSON_free(text);
    return ok;
}

bool cg_st_set_metadata_number(cg_st_writer *w, const char *key, double v)
{
    cJSON *n = cJSON_CreateNumber(v);
    if (!n) {
        cg_set_error("safetensors: metadata '%.64s': out of memory", key ? key : "");
        return false;
    }
    bool ok = cg_st_set_metadata_json(w, key, n);
    cJSON_Delete(n);
    return ok;
}

/* --- a growable string for the header */
typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putu(sbuf *b, uint64_t v)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    sb_puts(b, tmp);
}

/* A JSON string literal (s is valid UTF-8, passed through unescaped). */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_putn(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            sb_puts(b, "\\\"");
        else if (c == '\\')
            sb_puts(b, "\\\\");
        else if (c < 0x20) {
            char tmp[8];
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            sb_puts(b, tmp);
        } else
            sb_putn(b, p, 1);
    }
    sb_putn(b, "\"", 1);
}

static bool write_all(FILE *fp, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, fp) == n;
}

/* The header: metadata first, then tensors in the order added, padded so
 * that the data starts at a multiple of 8. False + error (h freed). */
static bool build_header(const cg_st_writer *w, const char *path, sbuf *h)
{
    sb_puts(h, "{");
    bool first = true;
    if (w->nmeta > 0) {
        sb_puts(h, "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            if (i)
                sb_puts(h, ",");
            sb_json_str(h, w->mkey[i]);
            sb_puts(h, ":");
            sb_json_str(h, w->mval[i]);
        }
        sb_puts(h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const w_entry *e = &w->e[i];
        if (!first)
            sb_puts(h, ",");
        first = false;
        sb_json_str(h, e->name);
        sb_puts(h, ":{\"dtype\":");
        sb_json_str(h, cg_st_dtype_name(e->dtype));
        sb_puts(h, ",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d)
                sb_puts(h, ",");
            sb_putu(h, (uint64_t)e->shape[d]);
        }
        sb_puts(h, "],\"data_offsets\":[");
        sb_putu(h, off);
        sb_puts(h, ",");
        off += e->nbytes;
        sb_putu(h, off);
        sb_puts(h, "]}");
    }
    sb_puts(h, "}");
    while (!h->oom && (8 + h->len) % 8 != 0) /* a failed sb_puts adds nothing */
        sb_puts(h, " ");
    if (h->oom) {
        free(h->s);
        cg_set_error("safetensors: %s: out of memory building the header", path);
        return false;
    }
    if ((uint64_t)h->len > CG_ST_MAX_HEADER) {
        cg_set_error("safetensors: %s: header would be %zu bytes, over the %" PRIu64
                     "-byte limit readers accept",
                     path, h->len, CG_ST_MAX_HEADER);
        free(h->s);
        return false;
    }
    return true;
}

/* A deferred entry's bytes: its tensor as dtype dt, contiguous (a copy
 * of this one tensor when it is not, or converts) and little-endian (in
 * runs of 8192 elements on a big-endian host). 1 written, 0 a write
 * failed (errno), -1 out of memory (error set). */
static int write_src(FILE *fp, const w_entry *e)
{
    cg_tensor *c = e->src->dtype == e->dt ? cg_k_contiguous(e->src) : cg_k_to(e->src, e->dt);
    if (!c)
        return -1;
    const unsigned char *p = cg_data_ptr(c);
    size_t esize = cg_dtype_size(e->dt), n = e->nbytes / esize;
    int r = 1;
    if (cg_st_host_is_le() || esize == 1) {
        r = write_all(fp, p, e->nbytes);
    } else {
        enum { RUN = 8192 };
        unsigned char *buf = malloc(RUN * esize);
        if (!buf) {
            cg_set_error("out of memory");
            r = -1;
        }
        for (size_t i = 0; r == 1 && i < n; i += RUN) {
            size_t k = n - i < RUN ? n - i : RUN;
            cg_st_copy_le(buf, p + i * esize, k, esize);
            r = write_all(fp, buf, k * esize);
        }
        free(buf);
    }
    cg_release(c);
    return r;
}

/* A filled entry's bytes: made by its fill into a buffer of its size,
 * then written little-endian. 1 written, 0 a write failed (errno), -1 the
 * fill failed or out of memory (error set, naming the tensor). */
static int write_filled(FILE *fp, const w_entry *e)
{
    if (e->nbytes == 0)
        return 1;
    unsigned char *buf = cg_alloc(e->nbytes);
    if (!buf) {
        cg_set_error("tensor '%s': out of memory", e->name);
        return -1;
    }
    int r = -1;
    if (e->fill(e->ctx, buf)) {
        size_t esize = cg_dtype_size(e->dt);
        cg_st_copy_le(buf, buf, e->nbytes / esize, esize); /* in place; nothing on a LE host */
        r = write_all(fp, buf, e->nbytes);
    } else {
        cg_prefix_error("tensor '%s': ", e->name);
    }
    cg_free(buf);
    return r;
}

/* A deferred writer's tensors as they were added: none written since. */
static bool sources_unchanged(const cg_st_writer *w, const char *path)
{
    for (int i = 0; i < w->n; i++)
        if (w->e[i].src && cg_version(w->e[i].src) != w->e[i].version) {
            cg_set_error("safetensors: %s: tensor '%s' was written after it was added (version "
                         "%" PRIu64 ", added at %" PRIu64 "): a deferred writer reads its "
                         "tensors when it saves; nothing written",
                         path, w->e[i].name, cg_version(w->e[i].src), w->e[i].version);
            return false;
        }
    return true;
}

/* The length, the header and the tensors' bytes into a new file (with the
 * permissions of an existing path), flushed, fsync'd, then named tmp
 * (written unnamed where the file system can) and closed. *created: tmp
 * exists. False + error. */
static bool write_temp(const cg_st_writer *w, const char *path, const char *dir, char *tmp,
                       size_t tmp_cap, const sbuf *h, bool *created)
{
    FILE *fp = NULL;
    int fd = cg_st_open_unnamed(dir);
    bool unnamed = fd >= 0;
    if (unnamed)
        snprintf(tmp, tmp_cap, "its unnamed new file in %s", dir);
    else
        fd = cg_st_create_temp(path, tmp, tmp_cap);
    if (fd < 0)
        return false;
    *created = !unnamed;
    struct stat old;
    if (stat(path, &old) == 0 && S_ISREG(old.st_mode))
        (void)fchmod(fd, old.st_mode & 07777); /* keep the old file's permissions */
    fp = fdopen(fd, "wb");
    if (!fp) {
        cg_set_error("safetensors: %s: fdopen failed: %s", tmp, strerror(errno));
        close(fd);
        return false;
    }
    unsigned char lenbuf[8];
    write_le64(lenbuf, (uint64_t)h->len);
    bool wok = write_all(fp, lenbuf, 8) && write_all(fp, h->s, h->len);
    int r = 1;
    for (int i = 0; wok && r == 1 && i < w->n; i++)
        if (w->e[i].src)
            r = write_src(fp, &w->e[i]);
        else if (w->e[i].fill)
            r = write_filled(fp, &w->e[i]);
        else
            wok = write_all(fp, w->e[i].bytes, w->e[i].nbytes);
    if (r == -1) { /* a copy or conversion out of memory, or a fill failed */
        cg_prefix_error("safetensors: %s: writing tensor data: ", path);
        fclose(fp);
        return false;
    }
    wok = wok && r == 1;
    if (!wok || fflush(fp) != 0) {
        cg_set_error("safetensors: %s: write to %s failed: %s", path, tmp, strerror(errno));
        fclose(fp);
        return false;
    }
    if (fsync(fileno(fp)) != 0) {
        cg_set_error("safetensors: %s: fsync of %s failed: %s", path, tmp, strerror(errno));
        fclose(fp);
        return false;
    }
    if (unnamed && !cg_st_link_unnamed(fileno(fp), path, tmp, tmp_cap)) {
        fclose(fp);
        return false;
    }
    *created = true;
    if (fclose(fp) != 0) {
        cg_set_error("safetensors: %s: closing %s failed: %s", path, tmp, strerror(errno));
        return false;
    }
    return true;
}

bool cg_st_writer_save(cg_st_writer *w, const char *path)
{
    if (!w) {
        cg_set_error("safetensors: cg_st_writer_save: NULL writer");
        return false;
    }
    if (!path || !path[0]) {
        cg_set_error("safetensors: cg_st_writer_save: %s path", path ? "empty" : "NULL");
        return false;
    }
    if (!cg_st_target_replaceable(path) || !sources_unchanged(w, path))
        return false;
    sbuf h = {0};
    if (!build_header(w, path, &h))
        return false;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 48);
    char *dir = cg_st_dir_of(path);
    if (!tmp || !dir) {
        free(h.s);
        free(tmp);
        free(dir);
        cg_set_error("safetensors: %s: out of memory", path);
        return false;
    }
    bool ok = false, created = false;
    if (write_temp(w, path, dir, tmp, plen + 48, &h, &created)) {
        if (rename(tmp, path) != 0) {
            cg_set_error("safetensors: %s: cannot rename %s over it: %s", path, tmp,
                         strerror(errno));
        } else {
            created = false; /* the temporary file is now the target */
            cg_st_remove_temps_in(path, dir, false);
            ok = cg_st_sync_dir(path, dir);
        }
    }
    if (created)
        unlink(tmp);
    free(h.s);
    free(tmp);
    free(dir);
    return ok;
}
