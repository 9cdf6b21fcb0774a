/* cgrad nn: modules and their parameter registry.
 *
 * A module is a struct that embeds a cg_module as its FIRST member, so a
 * pointer to any module converts to cg_module* and back (CG_MODULE(m)).
 * The base holds, in registration order:
 *   - named parameters: (local name, tensor) pairs; each tensor is a leaf
 *     with requires_grad on, owned (one reference) by the module;
 *   - named buffers: (local name, tensor) pairs that are not parameters
 *     (PyTorch's register_buffer: running statistics, masks, counters), of
 *     any dtype, saved with the parameters unless registered as not
 *     persistent (cg_module_add_buffer);
 *   - named children: (local name, module) pairs, owned by the module.
 * Full names are dotted paths, PyTorch style ("blocks.0.attn.q_proj.weight"),
 * and cg_module_params() lists them in the order of PyTorch's
 * model.named_parameters(): a module's own parameters first, then each
 * child's, depth first; a tensor registered twice (tied weights) is listed
 * once, under its first name. cg_module_state_dict lists what a save
 * writes, in the order of PyTorch's state_dict(): per module its
 * parameters, then its persistent buffers, then its children's.
 *
 * Ownership: modules are heap objects freed with cg_module_free(), which
 * frees the children too. Tensors handed to cg_module_add_param() are
 * retained (the caller keeps its own reference); children handed to
 * cg_module_add_child() are owned by the parent from then on (freed by it,
 * also when adding fails). Parameter tensors returned by the lookup
 * functions are borrowed: valid while the module lives.
 *
 * Sharing (PyTorch's shared blocks): a module may be added as a child more
 * than once, under several names of one parent or under several parents.
 * Each parent then holds a reference (cg_module.n_owners counts them) and
 * the module is freed with its last owner. Its parameters are one set:
 * cg_module_params lists each tensor once, under its first name in
 * named_parameters() order (as PyTorch's named_parameters() does), so an
 * optimizer updates it once, cg_module_num_params counts it once, and
 * save writes it under that first name only (PyTorch's state_dict would
 * repeat it under every name); a load reads it once, from whichever of its
 * names the file holds (cg_module_load). Refused with an error:
 * adding a child under a name already used in that parent (the same
 * module twice under one name included), and a cycle (a module added
 * below itself). A module that already has an owner is never freed by a
 * failed add.
 *
 * Errors: functions return NULL/false and record a message (core/error.h);
 * a NULL module gives NULL/false/0, keeping the message already recorded
 * (else "<fn>: input is NULL"; the counts and the void actions record
 * nothing). */
#ifndef CG_NN_MODULE_H
#define CG_NN_MODULE_H

#include <stdbool.h>
#include <stdint.h>

#include "../autograd/autograd.h"
#include "../nn/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_module cg_module;
/* The forward of a module: in[0..n_in) its tensor inputs (borrowed),
 * args whatever else it takes. Returns a new reference or NULL + error. */
typedef cg_tensor *(*cg_forward_fn)(cg_module *m, cg_tensor *const *in, void *args);

typedef struct {
    char *name;        /* local name, owned */
    cg_tensor *tensor; /* one reference owned by the module */
    /* The struct field the module's forward reads this parameter from
     * (&linear->weight), which cg_module_tie rewrites; NULL when unknown
     * (cg_module_add_param), and then the parameter cannot be tied. */
    cg_tensor **field;
} cg_named_tensor;

typedef struct {
    char *name;        /* local name, owned */
    cg_module *module; /* owned */
} cg_named_module;

/* A buffer (cg_module_add_buffer): a tensor the module owns that is not a
 * parameter. */
typedef struct {
    char *name;        /* local name, owned */
    cg_tensor *tensor; /* one reference owned by the module */
    bool persistent;   /* saved and loaded with the parameters */
} cg_named_buffer;

/* The first word of every module made by cg_module_alloc: how
 * cg_module_add_child, which takes any module pointer, tells a module from
 * something else (a tensor, whose first word is a pointer, never 0). */
#define CG_MODULE_TAG 0x6d676363u /* "ccgm" */
/* The tag of a freed module in the checked mode (CG_DEBUG=1), whose struct
 * is kept, poisoned, so that freeing it again is named, not corruption. */
#define CG_MODULE_FREED 0x6d646564u
/* The checked mode's test of a module argument (library-internal): false,
 * reported as "<fn>: module Linear was already freed (by cg_module_free)",
 * for a freed module; true otherwise (NULL included), and always true with
 * the mode off. The functions of this header and the optimizers'
 * from_module call it first, so that a freed model is named rather than
 * read as one without parameters (a save of nothing, an empty optimizer). */
bool cg_module_live(const cg_module *m, const char *fn);

struct cg_module {
    uint32_t tag;     /* CG_MODULE_TAG (set by cg_module_alloc) */
    const char *type; /* static string: "Linear", "LayerNorm", ... */
    cg_named_tensor *params;
    int n_params, cap_params;
    cg_named_module *children;
    int n_children, cap_children;
    bool training; /* train mode (dropout active); default true */
    int n_owners;  /* parents holding it as a child (sharing) */
    /* The first parent that holds it (the checked mode names it). */
    struct cg_module *parent;
    /* Frees what the concrete module owns beyond params and children (may
     * be NULL). Called by cg_module_free before the registry is freed;
     * must not free the struct itself. */
    void (*destroy)(cg_module *m);
    struct cg_module_hooks *hooks; /* forward hooks (NULL: none); see below */
    /* The forward of a module that maps one tensor to one tensor (Linear,
     * norms, Dropout, FeedForward, activations, Sequential, ...), called
     * with in[0] and args NULL by cg_module_forward; NULL for modules that
     * take more (attention, blocks) or none (containers). */
    cg_forward_fn forward;
    cg_named_buffer *buffers; /* in registration order */
    int n_buffers, cap_buffers;
};

#define CG_MODULE(m) ((cg_module *)(m))

/* ------------------------------------------------- building modules */
/* Allocate a zeroed module struct of `size` bytes (>= sizeof(cg_module))
 * whose base is initialised (type, training on, destroy). Free with
 * cg_module_free. */
cg_module *cg_module_alloc(size_t size, const char *type, void (*destroy)(cg_module *m));
/* A plain container module (e.g. a list of layers named "0", "1", ...). */
cg_module *cg_module_new(const char *type);
/* Register t under a local name (no dots; unique among params, buffers
 * and children). Retains t and turns requires_grad on; t must be a leaf,
 * float32 and contiguous (what the optimizers update; a contiguous view at
 * an offset is taken): another dtype or layout is refused now, naming the
 * module and the parameter, not by the optimizer later.
 * Returns t (borrowed) or NULL + error. */
cg_tensor *cg_module_add_param(cg_module *m, const char *name, cg_tensor *t);
/* cg_module_add_param, and *field = t on success, where field is the
 * member of the module's own struct that its forward reads the parameter
 * from (&m->gate): the registry remembers it, so that cg_module_tie can
 * point both at another tensor. field must live as long as the module
 * (a member of its struct). Every nn layer registers its parameters so. */
cg_tensor *cg_module_add_param_at(cg_module *m, const char *name, cg_tensor *t, cg_tensor **field);
/* Weight tying, PyTorch's model.lm_head.weight = model.tok_emb.weight:
 * the parameter at the dotted name `name` becomes the tensor of the
 * parameter `src` (both below m), in the registry and in the struct field
 * the module's forward reads (see cg_module_add_param_at). From then on
 * it is one tensor: both forwards use it, their gradients add up in its
 * .grad, cg_module_params lists it once (under its first name in
 * named_parameters() order), an optimizer built afterwards updates it
 * once, and save writes it under that first name only (as for shared
 * modules above; PyTorch's state_dict writes it under both); a load takes
 * a file with both names, or with either one (cg_module_load).
 * The tensor name held before is released: borrowed pointers to it (an
 * optimizer built earlier: tie first) are stale. What writes the tensor
 * in place writes every use (a LoRA merge into a tied Linear changes the
 * embedding too, as in PyTorch). Tying a parameter to
 * itself, or to the tensor it holds already, does nothing. Refused with
 * one line (m unchanged): a name that is not a parameter, shapes or dtypes
 * that differ (naming both), and a parameter registered without its field
 * (cg_module_add_param), whose forward would go on reading the old tensor.
 * True, or false + error. */
bool cg_module_tie(cg_module *m, const char *name, const char *src);
/* Register a buffer (PyTorch's register_buffer): a tensor the module owns
 * beside its parameters (running statistics, a fixed mask, a step
 * counter), of any dtype, contiguous, that requires no gradient and never
 * will: no optimizer sees it, cg_module_num_params does not count it,
 * cg_module_zero_grad and cg_module_requires_grad leave it alone. A
 * persistent buffer is saved and loaded with the parameters under its
 * dotted name (cg_module_state_dict); persistent = false (PyTorch's
 * persistent=False) keeps it out of files, listed by cg_module_buffers
 * only. The name follows the parameters' rules (unique among the
 * module's parameters, buffers and children). Retains t (the caller
 * keeps its reference). Returns t (borrowed) or NULL + error. */
cg_tensor *cg_module_add_buffer(cg_module *m, const char *name, cg_tensor *t, bool persistent);
/* Register a child (takes ownership: on failure a child that has no owner
 * yet is freed). A child that already has an owner is shared (see above).
 * child is any module pointer (a cg_linear *, your own struct whose first
 * member is a cg_module, a cg_module *): no cast needed; anything else (a
 * tensor meant for cg_module_add_param) is refused ("not a module"): a
 * module's first word is its tag, set by cg_module_alloc (or 0 in a struct
 * the caller allocated zeroed, as older programs do). Returns the child
 * as void *, so it assigns to the child's own type without a cast
 *     m->fc1 = cg_module_add_child(&m->base, "fc1", cg_linear_new(...));
 * or NULL + error. */
void *cg_module_add_child(cg_module *m, const char *name, void *child);
/* Remove m's child `name` (PyTorch's delattr(m, name)): m no longer holds
 * it, and it is freed unless another parent still holds it. Pointers to
 * it (and into it) are then the other parent's, or dangling. False + error
 * when m has no such child. */
bool cg_module_remove_child(cg_module *m, const char *name);
/* PyTorch's del m._parameters[name] / del m._buffers[name]: m's own
 * parameter (buffer) `name` leaves the registry, and the registry's
 * reference passes to the caller (cg_release it). cg_module_remove_param
 * also gives the struct field the parameter was registered with (NULL:
 * none) into *field (field may be NULL); that field still points at the
 * tensor, for the caller to point elsewhere (the parametrisations of
 * nn/param.h). Optimizers built earlier still hold it. NULL + error
 * when m has no such parameter (buffer). */
cg_tensor *cg_module_remove_param(cg_module *m, const char *name, cg_tensor ***field);
cg_tensor *cg_module_remove_buffer(cg_module *m, const char *name);
/* Frees the module, its children and its references to its parameters;
 * a module held by more than one parent is only released by one of them.
 * NULL is a no-op. Only a module no parent holds is yours to free: with
 * CG_DEBUG=1, freeing a child its parent holds, or a module twice, is
 * named in one line and refused (core/error.h). */
void cg_module_free(cg_module *m);

/* ---------------------------------------------------------- queries */
/* (full dotted name, tensor) pairs. Names are owned by the list; tensors
 * are borrowed from the module. */
typedef struct {
    char *name;
    cg_tensor *tensor;
    bool is_buffer; /* a buffer (cg_module_buffers, cg_module_state_dict) */
} cg_param;

typedef struct {
    cg_param *items;
    int n, cap;
} cg_param_list;

/* Append m's parameters to *out (which must be zero-initialised or come
 * from an earlier call) in named_parameters() order. False + error on
 * allocation failure. */
bool cg_module_params(const cg_module *m, cg_param_list *out);
/* m's buffers, persistent or not, in PyTorch's named_buffers() order (a
 * module's own first, then each child's, depth first; a buffer of a shared
 * child once, under its first name). As cg_module_params. */
bool cg_module_buffers(const cg_module *m, cg_param_list *out);
/* What a save writes and a load reads, in PyTorch's state_dict() order: per
 * module its parameters, then its persistent buffers, then each child's,
 * depth first; each tensor once, under its first name (is_buffer tells
 * them apart). As cg_module_params. */
bool cg_module_state_dict(const cg_module *m, cg_param_list *out);
/* PyTorch's state_dict() with all its keys: as cg_module_state_dict, but a
 * tensor reachable under several names (tied weights, a shared module's
 * parameters and buffers) is listed under each of them, in state_dict()
 * order; its first entry is the one cg_module_state_dict gives. These are
 * the names a load accepts (cg_module_load). As cg_module_params. */
bool cg_module_state_dict_all(const cg_module *m, cg_param_list *out);
/* Free the names and the array; the list is zeroed and may be reused. */
void cg_param_list_free(cg_param_list *l);
/* Total number of parameter elements (each tied tensor counted once). */
int64_t cg_module_num_params(const cg_module *m);
/* Number of parameter tensors (tied tensors counted once). */
int cg_module_num_param_tensors(const cg_module *m);
/* The parameter with this full dotted name (borrowed) or NULL + error. */
cg_tensor *cg_module_get_param(const cg_module *m, const char *name);
/* The buffer with this full dotted name (borrowed) or NULL + error. */
cg_tensor *cg_module_get_buffer(const cg_module *m, const char *name);
/* The descendant module at a dotted path ("layers.0.self_attn"); "" is m
 * itself. Borrowed, or NULL + error. */
cg_module *cg_module_get_child(const cg_module *m, const char *path);

/* ---------------------------------------------------------- actions */
/* Drop every parameter's gradient (grad becomes NULL). */
void cg_module_zero_grad(cg_module *m);
/* Set train (true) or eval (false) mode on m and all its descendants. */
void cg_module_train(cg_module *m, bool training);
/* Freeze (false) or unfreeze (true) every parameter of m and its
 * descendants (PyTorch's module.requires_grad_(on)). A frozen parameter
 * gets no gradient and is left out of the optimizers built from a module
 * (cg_optim_from_module and friends). Dropping a frozen parameter's
 * gradient is the caller's business (cg_module_zero_grad). */
void cg_module_requires_grad(cg_module *m, bool on);

/* ---------------------------------------------------- forward hooks */
/* PyTorch's register_forward_pre_hook / register_forward_hook. Every nn
 * module's forward (Linear, Embedding, norms, Dropout, positions,
 * FeedForward, MultiHeadAttention and its cached form, the transformer
 * layers and stacks) goes through cg_module_call, which runs the module's
 * hooks around it; a module of your own does the same (docs/own_module.md).
 *
 * The tensor inputs of a call are an array in[0..n_in) (Linear: x;
 * MultiHeadAttention: xq, xkv; a decoder layer: x, memory; Embedding: its
 * int64 ids, n_in = 1, as PyTorch's hooks see them); entries may be NULL
 * (xkv of a cached step).
 *   pre hook:  may replace in[i]: release the tensor there and store a new
 *              reference (e.g. cg_muls(in[0], 2) after cg_release(in[0])).
 *   post hook: sees the inputs and the output *out; may replace *out the
 *              same way (release it, store a new reference). To keep the
 *              output, leave it. (Leaving NULL there fails the call:
 *              "forward hook K left no output".)
 * Both return false (+ cg_set_error) to fail the call: the forward then
 * returns NULL. Hooks run in registration order, pre hooks before the
 * forward, post hooks after it, in train and eval mode, with or without
 * gradients. A call runs the hooks its module had when it started, as
 * PyTorch does: a hook may remove itself or another hook of the module
 * (a one-shot hook), and the call's other hooks still run; a hook added
 * during a call runs from the next one. ctx is handed to the hook;
 * free_ctx (may be NULL) is called on it when the hook is removed (when
 * the call ends, for a removal during it) or the module is freed. */
typedef bool (*cg_forward_pre_hook)(void *ctx, cg_module *m, int n_in, cg_tensor **in);
typedef bool (*cg_forward_hook)(void *ctx, cg_module *m, int n_in, cg_tensor *const *in,
                                cg_tensor **out);

/* What removes a hook (PyTorch's RemovableHandle). id 0: no hook. */
typedef struct {
    cg_module *module;
    int64_t id;
} cg_hook_handle;

/* Register a hook; the handle has id 0 + error on failure (NULL module or
 * function, out of memory; free_ctx is then called on ctx). */
cg_hook_handle cg_module_register_forward_pre_hook(cg_module *m, cg_forward_pre_hook fn, void *ctx,
                                                   void (*free_ctx)(void *ctx));
cg_hook_handle cg_module_register_forward_hook(cg_module *m, cg_forward_hook fn, void *ctx,
                                               void (*free_ctx)(void *ctx));
/* Remove the hook (its free_ctx runs) and zero the handle. False if it is
 * no longer there (already removed). The module must still be alive:
 * freeing a module removes its hooks. */
bool cg_hook_remove(cg_hook_handle *h);
/* The ctx of m's first hook whose function is fn (pre or post), or NULL. */
void *cg_module_find_hook(const cg_module *m, const void *fn);

#define CG_MAX_FORWARD_INPUTS 8
/* Run fn(m, in, args) with m's hooks around it: the one dispatch point of
 * every module forward. Without hooks it is the plain call. n_in <=
 * CG_MAX_FORWARD_INPUTS, with or without hooks (more is refused: NULL +
 * error naming the module's type). */
cg_tensor *cg_module_call(cg_module *m, cg_forward_fn fn, int n_in, cg_tensor *const *in,
                          void *args);
/* Removes every hook of m (cg_module_free calls it). */
void cg_module_hooks_free(cg_module *m);

/* ------------------------------------------- containers (nn/container.c) */
/* m(x) for a module with a one-tensor forward (m->forward), hooks
 * included: PyTorch's module(x). NULL + error for a module without one. */
cg_tensor *cg_module_forward(cg_module *m, cg_tensor *x);
/* Add child under the next index as its name ("0", "1", ...: PyTorch's
 * ModuleList.append); list is typically cg_module_new("ModuleList").
 * Ownership as cg_module_add_child. Returns the child (as void *, so it
 * assigns to the child's own type) or NULL + error. */
void *cg_module_append(cg_module *list, void *child);
/* PyTorch's nn.Sequential(m0, m1, ...): n modules (any module pointers,
 * each with a one-tensor forward) as children "0".."n-1", applied in
 * order by cg_module_forward. Takes ownership of them all (also on
 * failure). NULL + error. */
cg_module *cg_sequential(int n, ...);
/* model.load_state_dict(torch.load(path)): cg_module_load of the file at
 * path, no prefix (nn/container.c). False + error. */
bool cg_module_load_file(cg_module *m, const char *path);

/* ---------------------------------------------------- save and load */
/* Add every parameter to w as F32 under prefix + full name (prefix may be
 * NULL), and every persistent buffer in its own dtype, in state_dict order
 * (cg_module_state_dict). The values are copied now. cg_module_write_as:
 * parameters as the float dtype dt instead (CG_BF16 or CG_F16 halve the
 * file), and float buffers too, as PyTorch's model.to(torch.bfloat16)
 * before save_file converts them; int and bool buffers keep their dtype. */
bool cg_module_write(const cg_module *m, cg_st_writer *w, const char *prefix);
bool cg_module_write_as(const cg_module *m, cg_st_writer *w, const char *prefix, cg_dtype dt);
/* Write m's parameters to a safetensors file (atomically). meta holds
 * n_meta (key, value) pairs as 2*n_meta strings: key0, value0, key1, ...
 * (meta may be NULL when n_meta is 0). cg_module_save_as: in dt (F32 for
 * cg_module_save); a file of any float dtype loads into float32 parameters
 * (cg_module_load converts). A finite value the narrower dtype cannot hold
 * (float16 above 65504) is refused, naming it, rather than saved as inf
 * (PyTorch's model.half() makes it inf; cg_module_load refuses an inf
 * parameter). */
bool cg_module_save(const cg_module *m, const char *path, int n_meta, const char *const *meta);
bool cg_module_save_as(const cg_module *m, const char *path, cg_dtype dt, int n_meta,
                       const char *const *meta);
/* PyTorch's model.load_state_dict(sd) (strict): copy the values of
 * prefix + name for every parameter of m from f into the existing tensors.
 * Strict: the file must hold every parameter of m, and every tensor of the
 * file must be one of m's; otherwise it fails with ONE message listing the
 * missing and the unexpected names (the first 8 of each, "... and N more").
 * With a prefix, only the file's tensors whose names start with it are
 * considered (loading one part of a bigger file, as PyTorch users filter
 * a state dict by prefix): the others are neither loaded nor unexpected.
 * Each loaded tensor must have a float dtype (F32, BF16 or F16, converted
 * to the parameter's dtype), exactly the parameter's shape and finite
 * values. Persistent buffers load the same way, by name (non-persistent
 * ones are neither read nor expected: a file holding one is unexpected,
 * as in PyTorch): a float buffer from any float dtype, an int or bool one
 * from exactly its dtype; a buffer may hold inf or nan (an additive mask).
 * A tensor with several names (tied weights, a shared module: every name
 * of cg_module_state_dict_all, as PyTorch's state_dict lists them) is
 * expected under any one of them and loaded once, from the first the file
 * holds; none is unexpected; the file may hold several only with the same
 * dtype, shape and bytes (else one line naming both). A missing one is
 * named by its first name. Everything is checked before anything is
 * copied, so on failure m is unchanged. A file that also holds tensors the caller
 * expects (a checkpoint's optimizer state, a tokenizer) is loaded with
 * cg_module_load_ex and .ignore, naming them. */
bool cg_module_load(cg_module *m, const cg_st_file *f, const char *prefix);

/* The keys a load did not match (PyTorch's load_state_dict return value):
 * full file names, owned by the struct; free with cg_load_keys_free. */
typedef struct {
    char **missing; /* parameters and persistent buffers of m the file lacks */
    int n_missing;
    char **unexpected; /* file tensors that are not m's (nor ignored) */
    int n_unexpected;
} cg_load_keys;
void cg_load_keys_free(cg_load_keys *k); /* zeroes it; NULL is a no-op */

/* Options of cg_module_load_ex. A zeroed struct is cg_module_load's strict
 * load without prefix. */
typedef struct {
    const char *prefix; /* file name = prefix + parameter name (NULL: none) */
    /* PyTorch's strict=False: missing parameters keep their values and
     * unexpected tensors are skipped (listed in *keys). Shape, dtype and
     * non-finite values still fail. */
    bool non_strict;
    /* File tensors expected beside the parameters, never unexpected (the
     * zoo's checkpoints: {"optim.*", "tokenizer.spm"}): exact names, or
     * prefixes written with a final '*'. n_ignore entries. */
    int n_ignore;
    const char *const *ignore;
    /* If not NULL: receives the missing and unexpected keys, after a
     * success and after a strict load refused for them (zeroed on other
     * failures). The caller frees it with cg_load_keys_free. */
    cg_load_keys *keys;
} cg_load_options;

/* cg_module_load with options (opt NULL: as cg_module_load(m, f, NULL)).
 * False + error. */
bool cg_module_load_ex(cg_module *m, const cg_st_file *f, const cg_load_options *opt);

#ifdef __cplusplus
}
#endif
#endif
