/* cgrad core: strided float32 tensors.
 *
 * A tensor is a view: a pointer to a refcounted storage, an element offset,
 * ndim, shape[] and strides[] (in ELEMENTS, not bytes). Views (transpose,
 * permute, slice, select, expand, reshape of compatible strides) share the
 * storage and copy nothing. Strides may be zero (broadcast), positive, or
 * negative (cg_view_as_strided); every kernel is correct for any strides.
 *
 * Ownership (one rule for the whole library):
 *   - Every function that returns a cg_tensor* returns a NEW reference that
 *     the caller owns and must give back with cg_release().
 *   - Functions never take ownership of their arguments (they cg_retain what
 *     they keep).
 *   - cg_release(NULL) is a no-op.
 * Errors: functions return NULL and record a message (core/error.h); a NULL
 * tensor argument makes a function return NULL, recording "<fn>: input is
 * NULL" only when no message is recorded yet (the root cause of a chain
 * stays; a message is never empty).
 *
 * The autograd fields (requires_grad, grad, node) live in this struct so that
 * one tensor type serves every layer, but core never interprets them: the
 * autograd layer registers a hook (cg_set_node_release_hook) to free its
 * nodes when a tensor dies. */
#ifndef CG_TENSOR_H
#define CG_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "../core/dtype.h"
#include "../core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_MAX_DIMS 8

/* The storage of a tensor and of all its views: bytes, refcounted. */
typedef struct cg_storage {
    void *data;    /* 64-byte aligned */
    size_t nbytes; /* bytes allocated */
    int refcount;
    /* A form derived from the data and kept for reuse (the packed bf16
     * weight of decoding, core/linear.c), or NULL: freed with derived_free
     * when the storage dies or its data is written (cg_tensor_modified).
     * Read and replaced under one lock (core/tensor_impl.h). */
    void *derived;
    void (*derived_free)(void *derived);
    /* The version counter (PyTorch's _version): every in-place write to the
     * data adds one (cg_tensor_modified), and every view of the storage
     * shares it. Autograd records it for each tensor a backward will read
     * and refuses the backward if it changed (autograd/autograd.h). */
    uint64_t version;
} cg_storage;

struct cg_node; /* defined by the autograd layer; opaque here */

typedef struct cg_tensor {
    cg_storage *storage;
    int64_t offset; /* in elements */
    int ndim;       /* 0 .. CG_MAX_DIMS; 0 is a scalar */
    int64_t shape[CG_MAX_DIMS];
    int64_t strides[CG_MAX_DIMS]; /* in elements; 0 = broadcast */
    cg_dtype dtype;
    int refcount;
    /* --- autograd fields: owned by the autograd layer, ignored by core --- */
    bool requires_grad;
    struct cg_tensor *grad; /* leaf gradient, owned by this tensor */
    struct cg_node *node;   /* creator node: a reference (autograd counts them) */
    /* --- scope bookkeeping (core/tensor.c, see cg_scope_begin) --- */
    int held;               /* references held by long-lived owners and graph nodes */
    struct cg_scope *scope; /* the scope this tensor was made in (while open), or NULL */
    int64_t scope_idx;      /* position in that scope's list */
    bool scope_kept;        /* cg_keep: one reference outlives the scope */
    /* --- the checked mode (CG_DEBUG=1, core/lifetime.h) --- */
    uint32_t magic;                /* a live header's word; poisoned once freed */
    struct cg_tensor_debug *debug; /* its name and who freed it (checked mode only) */
} cg_tensor;

/* Shape literal helper: cg_zeros(CG_SHAPE(3, 4)) expands to
 * cg_zeros(2, (const int64_t[]){3, 4}). */
#define CG_SHAPE(...)                                                                  \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) \
    {                                                                                  \
        __VA_ARGS__                                                                    \
    }

/* ------------------------------------------------------------ lifecycle */
cg_tensor *cg_retain(cg_tensor *t); /* returns t */
void cg_release(cg_tensor *t);
/* Release several tensors: cg_release_all(3, a, b, c). */
void cg_release_all(int n, ...);

/* The checked mode's hooks (CG_DEBUG=1; library-internal, defined in
 * core/lifetime.c, see core/lifetime.h), called only when
 * cg_debug_enabled(). enter/leave bracket the outermost freeing call of the
 * thread (cg_release, cg_scope_end, cg_module_free, ...), which a header
 * freed inside it records. release_ok: whether call (NULL: that outermost
 * call) may release a reference to t; false (reported) for a freed header
 * or not a tensor and, with owned (the user's cg_release), when every
 * reference is held by an owner (borrowed). retire: poison a freed header
 * and keep it, instead of free. */
#define CG_TENSOR_LIVE 0x726e7374u /* the magic word of a live header */
const char *cg_lifetime_enter(const char *call);
void cg_lifetime_leave(const char *prev);
bool cg_lifetime_release_ok(const cg_tensor *t, const char *call, bool owned);
void cg_lifetime_retire(cg_tensor *t);
/* use_ok: false (reported as "<op>: tensor [2, 3] float32 was already
 * freed (by cg_release)") when t is a freed header, which op must then
 * not read (its storage is gone); true for NULL and a live tensor. Called
 * where the library's functions first look at a tensor argument (the
 * dtype checks, the element accessors, views, elementwise ops, retain,
 * backward), so that a use after free is named rather than a fault. */
bool cg_lifetime_use_ok(const cg_tensor *t, const char *op);

/* Called with t->node when a tensor that still has a node is freed. */
typedef void (*cg_node_release_fn)(struct cg_node *node);
void cg_set_node_release_hook(cg_node_release_fn fn);

/* ------------------------------------------------------------ scopes */
/* A scope (an autorelease pool) frees the tensors made inside it, so that
 * a training step needs no release list:
 *
 *     for (step ...) {
 *         cg_scope *s = cg_scope_begin();
 *         cg_tensor *loss = cg_cross_entropy(model_forward(m, x), y, -100, 0, CG_REDUCTION_MEAN);
 *         cg_backward(loss, NULL, false);
 *         cg_optim_step(opt);
 *         cg_scope_end(s);          // every tensor of the step dies here
 *     }
 *
 * Rules:
 *   - Every reference handed out while a scope is open (a tensor created,
 *     or any function's new reference to an existing tensor, cg_retain
 *     included) is given back by cg_scope_end: a new tensor's by the scope
 *     it was made in (or the one its kept result passed to), a new
 *     reference to an older tensor by the innermost open scope.
 *     References held by graph nodes stay with the node whatever scope the
 *     node's tensor belongs to: a tensor used by a kept result lives as
 *     long as it, and a graph may cross any number of scopes.
 *   - cg_keep(t): one reference to t survives the scope; it passes to the
 *     enclosing scope, or to the caller when none is open (who then
 *     cg_release-s it). Return values of a function with its own scope:
 *     `return cg_keep(y);` before cg_scope_end. Kept graphs stay whole.
 *     To return a tensor the function did not make (an argument, or a
 *     tensor of an outer scope), keep a new reference: cg_keep(cg_retain(x)).
 *   - cg_release inside a scope still works (code written with explicit
 *     releases runs unchanged inside a scope); just never release a
 *     reference twice.
 *   - Containers that store a tensor beyond a scope (modules, optimizers,
 *     gradients, caches) mark that reference with cg_hold (and cg_unhold
 *     before releasing it); the library's own containers do. Models,
 *     optimizers and data may be built inside or outside a scope.
 * Scopes nest and are per thread; cg_scope_end must get the innermost
 * open scope (ending an outer one ends the inner ones first). Refcounting
 * without scopes stays as it was. A tensor made in a scope belongs to its
 * thread until the scope ends; tensors made outside every scope (a
 * model's parameters) may be used by ops on several threads at once, each
 * inside its own scopes: their counts are atomic and no scope writes them. */
typedef struct cg_scope cg_scope;
/* Open a scope (NULL + error when out of memory). */
cg_scope *cg_scope_begin(void);
/* Give back every reference of the scope (see above) and close it. */
void cg_scope_end(cg_scope *s);
/* For an owner that opens a scope and ends it later (nn/data.h's loader),
 * when an outer scope may have ended it meanwhile (ending an outer one
 * ends the inner ones): cg_scope_id names s for good (no later scope has
 * its number, whatever address it gets; NULL: 0), and cg_scope_end_id
 * ends the scope of that number if it is still open on this thread
 * (true), else does nothing (false, no error). */
uint64_t cg_scope_id(const cg_scope *s);
bool cg_scope_end_id(uint64_t id);
/* One reference to t outlives the innermost scope. Returns t. */
cg_tensor *cg_keep(cg_tensor *t);
/* A reference to t is held by a long-lived owner (no scope releases it). */
cg_tensor *cg_hold(cg_tensor *t);
/* cg_hold for an owner that other threads use while the scope that made
 * t is still open (a leaf's .grad, which threads running backwards through
 * one model add into): when every reference to t is then held, t leaves
 * this thread's scope now rather than when it ends, so that the scope never
 * takes a reference another thread has meanwhile for its own. */
cg_tensor *cg_hold_shared(cg_tensor *t);
/* Before releasing a reference marked with cg_hold. */
void cg_unhold(cg_tensor *t);
/* Tensors alive in this process (headers not yet freed): for leak tests. */
int64_t cg_live_tensors(void);

/* A new reference held by a long-lived owner from the start: cg_hold(
 * cg_retain(t)) without the scope's bookkeeping. Graph nodes hold their
 * inputs and saved tensors this way, so a scope never counts a node's
 * reference as its own, whichever scope the node's tensor belongs to.
 * cg_release_held gives such a reference back (cg_unhold + cg_release). */
cg_tensor *cg_retain_held(cg_tensor *t);
void cg_release_held(cg_tensor *t);
/* A header with t's dtype, shape, strides and offset and no storage
 * (storage NULL, cg_version 0): what an owner keeps of a tensor whose
 * values it never reads, so that it holds none of its memory. autograd's
 * nodes keep one for each input their backward reads only for its shape
 * (autograd/autograd.h). Its data must not be read. The reference is held
 * from the start, as cg_retain_held's (give it back with cg_release_held);
 * no scope counts it. The autograd fields are the caller's to set. NULL
 * for a NULL t or when out of memory, recording no error: the caller then
 * keeps t itself. */
cg_tensor *cg_meta_held(const cg_tensor *t);

/* The dtype of t (CG_F32 for NULL). */
cg_dtype cg_dtype_of(const cg_tensor *t);

/* ------------------------------------------------------------- creation */
/* Uninitialised contiguous tensor. ndim 0 gives a scalar (one element). */
cg_tensor *cg_empty(int ndim, const int64_t *shape);
cg_tensor *cg_zeros(int ndim, const int64_t *shape);
cg_tensor *cg_ones(int ndim, const int64_t *shape);
cg_tensor *cg_full(int ndim, const int64_t *shape, float value);
cg_tensor *cg_scalar(float value); /* ndim 0 */
/* 1-D [start, start+step, ...) up to (not including) stop: ceil((stop -
 * start) / step) elements (none when stop lies behind start). Refused in
 * one line: a zero step, a NaN or infinite start, stop or step, and a
 * count of 2^62 or more (PyTorch's "invalid size, possible overflow"). */
cg_tensor *cg_arange(double start, double stop, double step);
/* Copies numel(shape) floats from data (row-major). */
cg_tensor *cg_from_data(int ndim, const int64_t *shape, const float *data);
/* The same with a dtype (torch.empty(shape, dtype=...)): cg_empty is
 * cg_empty_dtype(CG_F32, ...). cg_full_dtype converts value as cg_to does;
 * cg_arange_dtype(CG_I64, 0, n, 1) is torch.arange(n). */
cg_tensor *cg_empty_dtype(cg_dtype dt, int ndim, const int64_t *shape);
cg_tensor *cg_zeros_dtype(cg_dtype dt, int ndim, const int64_t *shape);
cg_tensor *cg_full_dtype(cg_dtype dt, int ndim, const int64_t *shape, double value);
cg_tensor *cg_arange_dtype(cg_dtype dt, double start, double stop, double step);
/* From a C array of numel(shape) elements of dt (row-major; bfloat16 and
 * float16 as their 16-bit patterns; bool bytes other than 0 read as 1).
 * The typed forms let the compiler check the array's type: an int32_t
 * array given to cg_from_i64 does not compile silently. */
cg_tensor *cg_from_array(cg_dtype dt, int ndim, const int64_t *shape, const void *data);
cg_tensor *cg_from_i64(int ndim, const int64_t *shape, const int64_t *data);
cg_tensor *cg_from_i32(int ndim, const int64_t *shape, const int32_t *data);
cg_tensor *cg_from_bool(int ndim, const int64_t *shape, const bool *data);
cg_tensor *cg_scalar_i64(int64_t value); /* ndim 0, int64 */
/* Same shape and dtype, uninitialised / zero-filled, contiguous. */
cg_tensor *cg_empty_like(const cg_tensor *t);
cg_tensor *cg_zeros_like(const cg_tensor *t);
/* Uninitialised, t's shape in dtype dt, with t's strides when t is dense
 * (cg_is_dense; torch.empty_like's preserve_format), so that element i of
 * t's run of storage from its offset is element i of the result's;
 * contiguous otherwise. */
cg_tensor *cg_empty_dense_like(const cg_tensor *t, cg_dtype dt);
/* Copy the elements of t, in row-major order of its shape, to out
 * (cg_numel(t) floats, converted from t's dtype). Returns false (and sets
 * the error) on NULL. cg_copy_to_array writes them in t's own dtype
 * (cg_numel(t) * cg_dtype_size elements' bytes). */
bool cg_copy_to(const cg_tensor *t, float *out);
bool cg_copy_to_array(const cg_tensor *t, void *out);
/* Copy src's elements into dst (same shape; any strides on both sides;
 * converted to dst's dtype as cg_to converts), a
 * raw kernel that records no graph: the values only, whatever src's
 * autograd state. User code calls cg_copy_ (autograd/ops.h), which refuses
 * a source that requires grad instead of detaching it silently. */
bool cg_k_copy_(cg_tensor *dst, const cg_tensor *src);
/* Say that t's elements were written in place: this bumps the version
 * counter of t's storage (shared by every view of it; see cg_version) and
 * drops forms derived from the storage and kept (the packed weights of
 * the weight cache, core/ops.h), remade at their next use. Every in-place function of the library calls it (cg_copy_,
 * cg_fill_, cg_set, the random fills and init functions, the in-place
 * kernels cg_k_*_, optimizer steps and state loads, gradient clipping,
 * safetensors loads), once the elements are written; code that writes
 * through cg_data() must call it after writing and before the tensor is
 * used again, or a backward that reads the old values cannot notice the
 * change and would compute a wrong gradient. After, not before: a product
 * on another thread that packs the weight during the write keeps that
 * copy under the version it read, which this call then leaves behind.
 * (PyTorch users: this is tensor._version += 1.) NULL is a no-op. */
void cg_tensor_modified(cg_tensor *t);
/* The version counter of t's storage: how many in-place writes it has had
 * (0 for NULL). Views of one storage share it. */
uint64_t cg_version(const cg_tensor *t);
/* A deep copy with fresh contiguous storage (no autograd fields: it records
 * nothing). autograd/ops.h has cg_clone, the differentiable one. */
cg_tensor *cg_k_clone(const cg_tensor *t);
/* t converted to dtype dt (torch's t.to(dt)), a new contiguous tensor; a
 * new header over t's storage when t already has dtype dt. Floats to
 * integers truncate toward zero (NaN and values out of range give the
 * type's minimum, as PyTorch on x86); to bool: nonzero (NaN included) is
 * true; to bfloat16/float16: round to nearest even. Raw (records nothing):
 * autograd/ops.h has cg_to, differentiable between float dtypes. */
cg_tensor *cg_k_to(const cg_tensor *t, cg_dtype dt);
/* The first element (row-major) of float tensor t that is finite but
 * would not be in dtype dt (float16 ends at 65504, bfloat16 and float32
 * at about 3.4e38): -1 when every finite one stays finite (t's own
 * infinities and NaNs are t's), -2 on failure (error recorded); its
 * value in *value when value is not NULL. Before a save in a narrower
 * dtype, which would otherwise write inf. */
int64_t cg_k_first_overflow(const cg_tensor *t, cg_dtype dt, double *value);
/* Fill every element of t (any strides, any dtype) with v, converted. */
bool cg_fill_(cg_tensor *t, float v);

/* ----------------------------------------------------------------- RNG */
/* Counter-based generator: value i of a draw depends only on (seed, counter
 * at the draw, i), so results are identical for any thread count and can be
 * saved/restored as two integers. */
typedef struct cg_rng {
    uint64_t seed;
    uint64_t counter;
} cg_rng;

cg_rng cg_rng_new(uint64_t seed);
/* Take n consecutive draws of r: returns the counter of the first and
 * advances r by n, atomically, so that threads sharing a generator (the
 * dropout of a model several threads train) get distinct draws. Every
 * draw of the library goes through it. A NULL r: 0 + error, as below. */
uint64_t cg_rng_take(cg_rng *r, uint64_t n);
/* Uniform [0,1) float / double; normal(0,1). Advance the counter. Every
 * function taking a generator refuses a NULL one (core/error.h): "<fn>: NULL
 * generator" recorded, a draw NaN (cg_rng_below, cg_mt19937_next: 0), a
 * tensor NULL, a fill false. */
float cg_rng_uniform(cg_rng *r);
double cg_rng_uniform_double(cg_rng *r);
float cg_rng_normal(cg_rng *r);
/* Uniform integer in [0, n) (unbiased: rejection sampling). n = 0 has no
 * value to give: 0 + error, and the counter does not move. */
uint64_t cg_rng_below(cg_rng *r, uint64_t n);
/* torch.randperm(n): a random permutation of 0..n-1 (Fisher-Yates with
 * cg_rng_below), malloc'd (free it); n >= 0 (n = 0: a valid 1-element
 * allocation). NULL + error on bad arguments or out of memory. */
int64_t *cg_randperm(cg_rng *r, int64_t n);
/* Fill t (any strides) with U[lo,hi) / N(mean,std). */
bool cg_uniform_(cg_tensor *t, cg_rng *r, float lo, float hi);
bool cg_normal_(cg_tensor *t, cg_rng *r, float mean, float std);
cg_tensor *cg_rand(cg_rng *r, int ndim, const int64_t *shape);  /* U[0,1) */
cg_tensor *cg_randn(cg_rng *r, int ndim, const int64_t *shape); /* N(0,1) */

/* PyTorch's CPU generator (MT19937, seeded as torch.manual_seed(seed)) and
 * its normal_: cg_normal_torch_ draws the values torch.nn.init.normal_
 * draws from the same generator state (to the rounding of log, cos and sin
 * in the last bit), so a model can start from the initial weights a PyTorch
 * script with the same seed starts from. Sequential, not counter-based. */
typedef struct cg_mt19937 {
    uint32_t state[624];
    int index;
    bool has_next_normal; /* PyTorch caches the second of a double pair */
    double next_normal;
} cg_mt19937;

void cg_mt19937_seed(cg_mt19937 *g, uint64_t seed);
uint32_t cg_mt19937_next(cg_mt19937 *g);
/* Contiguous t only (false with an error otherwise). */
bool cg_normal_torch_(cg_tensor *t, cg_mt19937 *g, float mean, float std);
/* PyTorch's uniform_(lo, hi) on the CPU: per element, in order, one 32-bit
 * draw u, x = (u & (2^24 - 1)) * 2^-24 and x * (hi - lo) + lo in float
 * with one rounding (a fused multiply-add, as PyTorch's vectorised build
 * computes it): the same bits as torch.empty(n).uniform_(lo, hi) after
 * the same draws. Contiguous float32 t only; lo <= hi. */
bool cg_uniform_torch_(cg_tensor *t, cg_mt19937 *g, float lo, float hi);

/* --------------------------------------------------------------- queries */
/* The number of elements: of t (NULL: 0 + error), of a shape of ndim
 * sizes (1 for ndim 0, shape may then be NULL; a NULL shape of ndim > 0:
 * 0 + error). */
int64_t cg_numel(const cg_tensor *t);
int64_t cg_numel_shape(int ndim, const int64_t *shape);
bool cg_is_contiguous(const cg_tensor *t);
/* t's elements fill numel consecutive elements of its storage from its
 * offset, in some order of its dims (a contiguous tensor, or a transposed
 * or permuted view of one: split attention heads); no two share one. */
bool cg_is_dense(const cg_tensor *t);
/* Pointer to element 0 of the view (storage data + offset) for a tensor of
 * the accessor's dtype: cg_data reads float32, cg_data_i64 int64, ... Any
 * other dtype, or NULL, gives NULL + an error naming both dtypes, so a
 * bool mask is never read as floats. bfloat16 and float16 elements are
 * their 16-bit patterns (cg_bf16_to_f32). cg_data_ptr: any dtype. */
float *cg_data(const cg_tensor *t);
int64_t *cg_data_i64(const cg_tensor *t);
int32_t *cg_data_i32(const cg_tensor *t);
bool *cg_data_bool(const cg_tensor *t);
uint16_t *cg_data_bf16(const cg_tensor *t);
uint16_t *cg_data_f16(const cg_tensor *t);
void *cg_data_ptr(const cg_tensor *t);
/* The check of every kernel that reads t as float32 (all the float math):
 * false + error "<op>: argument '<arg>' is int64, expected float32" (or
 * "... is NULL") unless t is float32. */
bool cg_check_f32(const char *op, const char *arg, const cg_tensor *t);
/* The check of every function that reads t as ids or a mask: false +
 * error naming op, arg and both dtypes unless t has dtype dt. */
bool cg_check_dtype(const char *op, const char *arg, const cg_tensor *t, cg_dtype dt);
/* The check of every function that reads t as ids PyTorch takes in either
 * integer width (index_select, index_add, embedding, embedding_bag; gather,
 * scatter_add and the losses' targets take int64 only, as PyTorch 1.13's):
 * false + error naming op, arg and t's dtype unless t is int64 or int32. */
bool cg_check_ids(const char *op, const char *arg, const cg_tensor *t);
/* Such ids as a contiguous int64 tensor (a new reference: t itself when it
 * is int64 and contiguous, int32 widened), or NULL + error (cg_check_ids's,
 * or no memory). */
cg_tensor *cg_k_ids_i64(const char *op, const char *arg, const cg_tensor *t);
/* The check of every kernel that writes dst in place (copy_, add_,
 * index_add_, ...): false + error naming op when two of dst's elements are
 * one memory location (a broadcast view: stride 0 on a dim of size > 1),
 * as PyTorch refuses it. */
bool cg_check_writable(const char *op, const cg_tensor *dst);
/* The check of every in-place function a user calls (cg_copy_, cg_fill_,
 * cg_set, the random fills): false + error naming op when t has history
 * (t->node: an op's output, or a view an op made). The graph cannot
 * record the write, so an op recorded after it would read the new values
 * while the gradient still went through the old history (PyTorch records
 * it). The raw kernels cg_k_* do not check. Write through cg_detach(t). */
bool cg_check_no_history(const char *op, const cg_tensor *t);
/* What an in-place kernel writing dst reads of src: src itself, or, when
 * src shares memory with dst (x[1:] += x[:-1], x += x[0], x.copy_(x^T),
 * index_add_ of x into x), a contiguous copy of src made before dst is
 * written, into *copy (release it; NULL when src itself is returned).
 * elementwise: the kernel reads element i of src only to write element i
 * of dst (add_, copy_), so src seeing dst's elements where dst has them
 * (x += x) needs no copy. Writing as they read, such calls gave values
 * that depend on the order of the writes (PyTorch refuses them; NumPy
 * copies, as here). NULL + error when out of memory. */
const cg_tensor *cg_k_unaliased(const cg_tensor *dst, const cg_tensor *src, bool elementwise,
                                cg_tensor **copy);
/* Element at a multi-index (ndim entries), PyTorch's x[i, j]: an index may
 * be negative (-1 is the last). Out of range: NAN / false + error. Any
 * dtype, converted to and from float (cg_get_i64: exact for int64; 0 +
 * error out of range). */
float cg_get(const cg_tensor *t, const int64_t *idx);
bool cg_set(cg_tensor *t, const int64_t *idx, float v);
int64_t cg_get_i64(const cg_tensor *t, const int64_t *idx);
/* The element of a one-element tensor (any ndim, any dtype, as a float).
 * NAN + error otherwise. cg_item_i64: exact for integers (floats truncate
 * as cg_to does); 0 + error. */
float cg_item(const cg_tensor *t);
int64_t cg_item_i64(const cg_tensor *t);
/* Print t in PyTorch's layout (tensor([[1, 2], [3, 4]], dtype=torch.int64);
 * rows past 1000 elements summarised with "..."). Not its exact text: every
 * dtype but float32 is named (PyTorch leaves out int64 and bool too), the
 * elements are not padded to one width, and requires_grad / grad_fn are not
 * shown. false + error on NULL. */
bool cg_print(const cg_tensor *t);
bool cg_fprint(FILE *f, const cg_tensor *t);
bool cg_same_shape(const cg_tensor *a, const cg_tensor *b);
/* Writes e.g. "[3, 4]" into buf of n bytes (NUL-terminated, cut short if
 * it does not fit; "(null)" for a NULL t or shape); returns buf. n = 0:
 * nothing is written. buf NULL: NULL + error, nothing written (a message
 * formatting it with %s still prints, "(null)" in its place). */
char *cg_shape_str(const cg_tensor *t, char *buf, size_t n);
char *cg_shape_str_n(int ndim, const int64_t *shape, char *buf, size_t n);
/* Normalise a possibly negative dim against ndim; -1 + error if out of range. */
int cg_norm_dim(const char *op, int dim, int ndim);
/* Broadcast two shapes by NumPy rules into out (CG_MAX_DIMS); returns the
 * result ndim, or -1 with an error naming op and both shapes (or a NULL
 * shape of ndim > 0, a NULL out, an ndim outside [0, CG_MAX_DIMS]). */
int cg_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out);

/* ---------------------------------------------- views (no data copied) */
/* A new header over the same storage with the same layout and no autograd
 * fields. */
cg_tensor *cg_view_alias(const cg_tensor *t);
/* These are the raw, non-recording views; autograd/ has the differentiable
 * versions with the same names minus "_view". */
cg_tensor *cg_view_permute(const cg_tensor *t, const int *perm);
cg_tensor *cg_view_transpose(const cg_tensor *t, int d0, int d1);
/* Elements start, start+step, ... < stop along dim (PyTorch slicing rules:
 * negative start/stop count from the end and are clamped). step >= 1. */
cg_tensor *cg_view_slice(const cg_tensor *t, int dim, int64_t start, int64_t stop, int64_t step);
cg_tensor *cg_view_narrow(const cg_tensor *t, int dim, int64_t start, int64_t len);
/* Removes dim (index may be negative). */
cg_tensor *cg_view_select(const cg_tensor *t, int dim, int64_t index);
/* torch.diagonal(t, offset, dim1, dim2): dims dim1 and dim2 (distinct,
 * negative allowed) removed and their diagonal appended as the last dim,
 * of min(n1, n2 - offset) elements for offset >= 0 (above the main one,
 * along dim2), min(n1 + offset, n2) below; 0 when past the edge. */
cg_tensor *cg_view_diagonal(const cg_tensor *t, int64_t offset, int dim1, int dim2);
/* dim must have size 1 (a 0-d t: dim 0 or -1 gives t, as torch.squeeze) */
cg_tensor *cg_view_squeeze(const cg_tensor *t, int dim);
cg_tensor *cg_view_unsqueeze(const cg_tensor *t, int dim);
/* Broadcast to shape by NumPy rules (stride 0 where expanded); as
 * torch.Tensor.expand, -1 keeps an existing dim and new dims come first. */
cg_tensor *cg_view_expand(const cg_tensor *t, int ndim, const int64_t *shape);
/* t's storage seen with any layout (PyTorch's as_strided): element i of
 * the view is storage element offset + sum(i_d strides[d]). NULL + error
 * when an element would lie outside the storage (or a size is negative). */
cg_tensor *cg_view_as_strided(const cg_tensor *t, int ndim, const int64_t *shape,
                              const int64_t *strides, int64_t offset);
/* A view with a new shape if the strides allow it, else NULL + error. One
 * entry of shape may be -1 (inferred). */
cg_tensor *cg_view_reshape(const cg_tensor *t, int ndim, const int64_t *shape);
/* Raw (they record nothing; autograd/ops.h has the differentiable
 * cg_reshape / cg_reshape_copy and cg_contiguous with PyTorch's meaning):
 * like PyTorch's reshape, a view when possible, otherwise a contiguous
 * copy; t itself (retained) if contiguous, else a contiguous copy. */
cg_tensor *cg_k_reshape(const cg_tensor *t, int ndim, const int64_t *shape);
cg_tensor *cg_k_contiguous(const cg_tensor *t);

/* ------------------------------------------------------------- threads */
/* Threads used by kernels and BLIS (default: OMP's default, i.e. cores,
 * and never more than cg_num_cpus(); an n > 0 is used as given, above the
 * CPUs too); n <= 0 goes back to the default. Never more than
 * OMP_THREAD_LIMIT, the most threads OpenMP gives a team. */
void cg_set_num_threads(int n);
int cg_get_num_threads(void);
/* The CPUs this process may run on (its affinity mask, or under
 * OMP_PROC_BIND the CPUs of all OpenMP's places; at least 1). */
int cg_num_cpus(void);
/* OpenMP's default team size (OMP_NUM_THREADS) is capped at cg_num_cpus()
 * unless cg_set_num_threads chose a count: more threads than CPUs only slow
 * down, and tens of thousands exhaust memory or hang. Call it before the
 * first parallel region (programs do it at start). Returns the count that
 * was asked for when it was lowered (for a warning), else 0. */
int cg_cap_default_threads(void);
/* libgomp spins a waiting thread 300,000 rounds (about 6 ms on Zen 5)
 * before it sleeps, so that on a 2-CPU machine where other processes hold
 * a CPU a 2-thread step ran 5-30x slower than 1 thread (docs/performance.md,
 * issue 33). libgomp reads GOMP_SPINCOUNT when it loads, before main, so
 * this function, called first in main (the programs call it), starts the
 * program again (exec of /proc/self/exe with the same arguments) with
 * GOMP_SPINCOUNT=cg_omp_spin_count(), which its children inherit: rounds
 * worth about CG_OMP_SPIN_US microseconds on this CPU. A round is one
 * `pause`, whose cost differs from CPU to CPU (about 11 ns on the Intel
 * Xeon family 6 model 0xA7, 20 on Zen 5), so a fixed count is a different
 * wait on each: 1000 rounds (11 us) made a 2-thread seq2seq tiny bf16 step
 * on the Xeon 20% slower than libgomp's default on an idle machine (the
 * worker slept between most regions and paid a wake-up at each), while
 * 50 us keeps a loaded machine's step within noise of 1000's and 10 us
 * more than that already cost it (docs/performance.md, Intel Xeon,
 * 2026-11-25 18:10). It returns without doing anything when
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (yours are kept:
 * OMP_WAIT_POLICY=active or GOMP_SPINCOUNT=300000 brings libgomp's
 * spinning back, OMP_WAIT_POLICY=passive never spins), for one thread
 * (OMP_NUM_THREADS=1, one CPU), under valgrind, when the OpenMP runtime
 * is not libgomp (LLVM's libomp, which clang links, keeps its own
 * KMP_BLOCKTIME), or when the exec fails. */
#define CG_OMP_SPIN_US 50
/* The spin count worth CG_OMP_SPIN_US on this CPU, from the fastest of a
 * few timed runs of `pause` (under a millisecond), within
 * [CG_OMP_SPIN_MIN, CG_OMP_SPIN_MAX]. */
#define CG_OMP_SPIN_MIN 1000
#define CG_OMP_SPIN_MAX 20000
long cg_omp_spin_count(void);
void cg_omp_short_spin(void);

/* ----------------------------------------------------------- utilities */
/* The allocator of tensor buffers (core/alloc.c): 64-byte aligned memory
 * with 64 bytes of readable slack past the end. Large blocks are cached on
 * size-class free lists and reused, so a training step's resident set stays
 * flat; the first allocation also sets glibc's mmap and trim thresholds
 * for the process (mallopt, see docs/api.md); CG_MALLOC_DEFAULT=1 in the
 * environment uses plain malloc instead and leaves malloc's settings,
 * CG_ALLOC_CACHE_MB=N caps the cached bytes (default: the cache holds what
 * keeps the mapped total, live and cached, within twice the peak of live
 * bytes).
 * Thread-safe. cg_free(NULL) is a no-op. */
void *cg_alloc(size_t bytes);
/* The same, all zero (calloc's counterpart): a fresh mapping is the
 * kernel's zero pages, left untouched (not resident) until written, as
 * glibc's calloc leaves them; a reused block is cleared. */
void *cg_alloc_zeroed(size_t bytes);
void cg_free(void *p);
/* Unmaps every cached block; returns the bytes released. */
size_t cg_alloc_trim(void);
/* fork() for a child that needs none of the tensor buffers, such as one
 * that draws a picture from copies of a few numbers (models/report/plot.c):
 * the blocks of 32 KB and more that cg_alloc mapped, live or cached, are
 * left out of the child (madvise MADV_DONTFORK, undone in the parent once
 * the child exists; the child faults on touching one, and must not free
 * one). Leaving them out is what makes it fast: a plain fork makes the
 * parent's pages copy-on-write, and the parent then faults once on every
 * page of its resident set it writes again (charlm base, 650 MB: a step
 * after a save took 2.2x the time of the others, on a virtual machine).
 * Holds the allocator's lock across the fork, so no block is mapped, moved
 * or unmapped meanwhile. With CG_MALLOC_DEFAULT=1, a plain fork. Returns
 * as fork() does (-1 + errno on failure). */
pid_t cg_fork_without_buffers(void);
/* Bytes in blocks handed out (live), kept for reuse (cached), and the peak of
 * live bytes; blocks from malloc (small ones, CG_MALLOC_DEFAULT) not counted. */
typedef struct {
    size_t live_bytes, cached_bytes, peak_live_bytes;
} cg_alloc_stats;
cg_alloc_stats cg_alloc_get_stats(void);

#ifdef __cplusplus
}
#endif
#endif
