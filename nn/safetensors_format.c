/* cgrad nn: the safetensors format shared by the reader and the writer:
 * dtype names and sizes, byte order, UTF-8 (nn/safetensors_impl.h). */
#include <string.h>

#include "core/utf8.h"
#include "nn/safetensors_impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [CG_ST_BOOL] = {"BOOL", 1},       [CG_ST_U8] = {"U8", 1},           [CG_ST_I8] = {"I8", 1},
    [CG_ST_F8_E4M3] = {"F8_E4M3", 1}, [CG_ST_F8_E5M2] = {"F8_E5M2", 1}, [CG_ST_I16] = {"I16", 2},
    [CG_ST_U16] = {"U16", 2},         [CG_ST_F16] = {"F16", 2},         [CG_ST_BF16] = {"BF16", 2},
    [CG_ST_I32] = {"I32", 4},         [CG_ST_U32] = {"U32", 4},         [CG_ST_F32] = {"F32", 4},
    [CG_ST_I64] = {"I64", 8},         [CG_ST_U64] = {"U64", 8},         [CG_ST_F64] = {"F64", 8},
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == CG_ST_NDTYPES,
               "every cg_st_dtype needs a name and a size");

const char *cg_st_dtype_name(cg_st_dtype dt)
{
    return ((unsigned)dt < CG_ST_NDTYPES) ? dtype_table[dt].name : "?";
}

size_t cg_st_dtype_size(cg_st_dtype dt)
{
    return ((unsigned)dt < CG_ST_NDTYPES) ? dtype_table[dt].size : 0;
}

bool cg_st_host_is_le(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Copy n elements of size sz from little-endian src to host order dst (or the
 * reverse: the transformation is its own inverse). dst == src converts in
 * place. */
void cg_st_copy_le(void *dst, const void *src, size_t n, size_t sz)
{
    if (n == 0)
        return;
    if (cg_st_host_is_le() || sz == 1) {
        if (dst != src)
            memcpy(dst, src, n * sz);
        return;
    }
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) {
        unsigned char e[8]; /* one element (sz <= 8), so dst may alias src */
        memcpy(e, s + i * sz, sz);
        for (size_t k = 0; k < sz; k++)
            d[i * sz + k] = e[sz - 1 - k];
    }
}
/* Index of the first byte that makes s[0..n) invalid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid), or n if valid.
 * If json_text, control bytes other than tab/newline/CR are invalid too. */
size_t cg_st_utf8_bad_at(const unsigned char *s, size_t n, bool json_text)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int len = cg_utf8_seq(s + i, n - i, &cp);
        if (len == 0)
            return i;
        if (json_text && cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r')
            return i;
        i += (size_t)len;
    }
    return n;
}

bool cg_st_utf8_valid(const char *s)
{
    size_t n = strlen(s);
    return cg_st_utf8_bad_at((const unsigned char *)s, n, false) == n;
}

/* The file's dtypes that cgrad's tensors have, both ways. */
static const struct {
    cg_st_dtype st;
    cg_dtype dt;
} dtype_pairs[] = {{CG_ST_F32, CG_F32}, {CG_ST_BF16, CG_BF16}, {CG_ST_F16, CG_F16},
                   {CG_ST_I64, CG_I64}, {CG_ST_I32, CG_I32},   {CG_ST_BOOL, CG_BOOL}};

bool cg_st_dtype_cg(cg_st_dtype st, cg_dtype *out)
{
    for (size_t i = 0; i < sizeof dtype_pairs / sizeof dtype_pairs[0]; i++)
        if (dtype_pairs[i].st == st) {
            if (out)
                *out = dtype_pairs[i].dt;
            return true;
        }
    return false;
}

cg_st_dtype cg_st_dtype_of(cg_dtype dt)
{
    for (size_t i = 0; i < sizeof dtype_pairs / sizeof dtype_pairs[0]; i++)
        if (dtype_pairs[i].dt == dt)
            return dtype_pairs[i].st;
    return CG_ST_NDTYPES;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that occurs twice among obj's members (NULL if none). Returns
 * false only when out of memory. */
bool cg_st_find_duplicate_key(const cJSON *obj, const char **dup)
{
    *dup = NULL;
    int n = cJSON_GetArraySize(obj);
    if (n < 2)
        return true;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys)
        return false;
    int k = 0;
    for (const cJSON *c = obj->child; c && k < n; c = c->next)
        keys[k++] = c->string ? c->string : "";
    qsort(keys, (size_t)k, sizeof *keys, cmp_str_ptr);
    for (int i = 1; i < k; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            *dup = keys[i];
            break;
        }
    free(keys);
    return true;
}

/* A JSON number that is a non-negative integer below 2^53 (so exact). */
bool cg_st_json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || !(d < (double)CG_ST_JSON_UINT_END) || d != floor(d))
        return false;
    *out = (uint64_t)d;
    return true;
}
