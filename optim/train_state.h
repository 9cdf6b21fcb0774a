/* cgrad optim: a whole training state saved and restored in one call, as
 * PyTorch's torch.save / torch.load of a dict:
 *
 *     torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
 *                 "gen": g.get_state(), "step": step}, path)
 *
 * is here a state that names the objects of the run once, then saves them
 * all or loads them all:
 *
 *     cg_train_state *s = cg_train_state_new();
 *     cg_train_state_add_module(s, "model", model);
 *     cg_train_state_add_optim(s, "opt", opt);
 *     cg_train_state_add_rng(s, "gen", &gen);
 *     cg_train_state_add_i64(s, "step", &step);
 *     cg_train_state_save(s, path);  (or cg_train_state_load(s, path))
 *     cg_train_state_free(s);
 *
 * An item is a name and a pointer to the caller's object or variable
 * (borrowed: it must outlive every save and load through the state). Save
 * reads them; load writes them, as load_state_dict would, so the same
 * lines serve both. Items:
 *   module   its parameters and persistent buffers, as cg_module_write
 *            under "<name>." (F32; buffers in their dtypes);
 *   optim    cg_optim_save's state under "<name>" (step counts, buffers,
 *            learning rate and hyper-parameters; not a sharded optimizer);
 *   rng      a cg_rng (seed and counter: the stream continues exactly);
 *   mt19937  a cg_mt19937, PyTorch's generator (its 624 words, position
 *            and the cached normal: get_state / set_state);
 *   i64, u64 64-bit integers, exact (seeds up to 2^64 - 1, counters);
 *   f64      a double, exact (inf and nan included);
 *   str      a NUL-terminated UTF-8 string in a buffer of cap bytes (load
 *            refuses a string that does not fit).
 * Names are non-empty UTF-8 without '.', unique in the state, at most 200
 * bytes.
 *
 * The file is one safetensors file (nn/safetensors.h), written atomically:
 * the modules' and optimizers' tensors under their items' names, and the
 * metadata "train_state", a JSON object {"format": 1, "items": {name:
 * {"kind": ..., ...}}} holding the small values (64-bit integers and
 * doubles as decimal strings, which read back to the same bits).
 *
 * Load is strict and all or nothing: the file must hold exactly the items
 * registered, each of the same kind, every tensor must belong to a module
 * or optimizer item, each module loads as cg_module_load (strict, same
 * shapes) and each optimizer as cg_optim_load (same kind, same
 * parameters). Anything else is refused with one line naming the file and
 * the item, and every object is left as it was. Errors: false +
 * cg_set_error (core/error.h); NULL state or path: false. */
#ifndef CG_OPTIM_TRAIN_STATE_H
#define CG_OPTIM_TRAIN_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/tensor.h"
#include "../nn/module.h"
#include "../optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_train_state cg_train_state;

/* A new empty state owned by the caller, or NULL + error (out of memory). */
cg_train_state *cg_train_state_new(void);
/* Frees the state, not the objects registered in it. NULL is a no-op. */
void cg_train_state_free(cg_train_state *s);

/* Register an item (see the top of this file). False + error for a NULL
 * state or pointer, a bad or repeated name, cap 0. */
bool cg_train_state_add_module(cg_train_state *s, const char *name, cg_module *m);
bool cg_train_state_add_optim(cg_train_state *s, const char *name, cg_optim *o);
bool cg_train_state_add_rng(cg_train_state *s, const char *name, cg_rng *r);
bool cg_train_state_add_mt19937(cg_train_state *s, const char *name, cg_mt19937 *g);
bool cg_train_state_add_i64(cg_train_state *s, const char *name, int64_t *v);
bool cg_train_state_add_u64(cg_train_state *s, const char *name, uint64_t *v);
bool cg_train_state_add_f64(cg_train_state *s, const char *name, double *v);
bool cg_train_state_add_str(cg_train_state *s, const char *name, char *buf, size_t cap);

/* Every item into one file at path (atomic: an old file stays whole on
 * failure). False + error. */
bool cg_train_state_save(const cg_train_state *s, const char *path);
/* Every item from the file at path, or nothing (see the top). False +
 * error. */
bool cg_train_state_load(cg_train_state *s, const char *path);

#ifdef __cplusplus
}
#endif
#endif
