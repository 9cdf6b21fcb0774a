/* cgrad optim: an exponential moving average of a model's weights
 * (PyTorch's torch.optim.swa_utils.AveragedModel with an EMA average
 * function, timm's ModelEmaV2, fairseq's --ema-decay), for evaluating or keeping
 * weights smoother than the last step's:
 *
 *     cg_ema *ema = cg_ema_new(CG_MODULE(model), 0.999);
 *     for (...) {
 *         ... cg_train_step(opt, loss);
 *         cg_ema_update(ema);
 *     }
 *     cg_ema_swap(ema);    the model now holds the average: evaluate it,
 *                          export it (cg_module_save)
 *     cg_ema_swap(ema);    and the trained weights again
 *     cg_ema_free(ema);
 *
 * The average covers the module's trainable parameters (those an optimizer
 * made by cg_optim_from_module steps: requires_grad on, a tied tensor
 * once), float32 leaves, under their dotted names. It starts as a copy of
 * them (timm's; AveragedModel copies at its first update, the same
 * values). Each update moves every element toward its parameter by
 * torch.lerp(avg, param, 1 - decay)'s formula in float32:
 *     w = 1 - decay < 0.5:  avg = avg + w * (param - avg)
 *     otherwise:            avg = param - (param - avg) * (1 - w)
 * without a fused multiply-add: the same bits on every CPU and at any
 * thread count; PyTorch 1.13's torch.lerp differs by at most one float32
 * ulp of the larger operand (its vectorized kernel fuses them; measured
 * over 100,000 elements at decays 0.999, 0.9, 0.3), more in ulps of a
 * result near zero, where the two cancel. decay 1 keeps the first copy; 0
 * follows the parameters. The set of parameters is fixed when the EMA is
 * made: parameters unfrozen or adapters attached later are not averaged
 * (make a new one).
 *
 * The parameters are retained; the averages are the EMA's own. Errors:
 * NULL/false + cg_set_error (core/error.h); never exits. */
#ifndef CG_OPTIM_EMA_H
#define CG_OPTIM_EMA_H

#include <stdbool.h>
#include <stdint.h>

#include "../nn/module.h"
#include "../nn/safetensors.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_ema cg_ema;

/* A new average of m's trainable parameters with decay in [0, 1]. NULL +
 * error for a NULL or freed module, one with no trainable parameter, or a
 * bad decay. */
cg_ema *cg_ema_new(const cg_module *m, double decay);
void cg_ema_free(cg_ema *e); /* NULL is a no-op */

/* ZeRO-1's average (DeepSpeed and fairseq keep it whole on every rank;
 * here it is sharded as the optimizer state is): each rank averages only
 * the run of each parameter that its sharded optimizer `like` updates
 * (optim.h cg_optim_new_sharded over m's trainable parameters; a parameter
 * it does not step is refused), so that N ranks each hold 1/N of the
 * average. Updates are element by element, so the runs hold exactly what
 * an unsharded average holds. A swap exchanges this rank's runs and then
 * calls whole(ctx), which must make every parameter whole again from the
 * ranks' runs (ZeRO's all-gather of the parameters: collective, so every
 * rank swaps together); NULL is allowed only when like is not sharded.
 * cg_ema_save refuses a sharded average: gather the shards into a whole
 * one (cg_ema_copy, the runs of each), or save through a gather
 * (cg_ema_save_gathered); cg_ema_load reads each run alone
 * from the file of a whole one, so a checkpoint resumes with any
 * sharding. cg_ema_average(e, i) is the run, 1-D [hi - lo], unless
 * swapped. */
cg_ema *cg_ema_new_sharded(const cg_module *m, double decay, const cg_optim *like,
                           bool (*whole)(void *ctx), void *ctx);
/* True if some parameter's average is not whole. */
bool cg_ema_is_sharded(const cg_ema *e);
/* The run [lo, hi) of parameter i's flat elements averaged ([0, numel)
 * when unsharded); false + error on a bad index. */
bool cg_ema_shard_range(const cg_ema *e, int i, int64_t *lo, int64_t *hi);
/* Bytes of averages held. */
int64_t cg_ema_bytes(const cg_ema *e);
/* Copy into dst the decay, the update count and every averaged element
 * that both hold (the intersection of their runs, parameter by
 * parameter): gathering shards into a whole dst, or splitting a whole src.
 * Both over the same parameter names and shapes in the same order, neither
 * swapped (false + error otherwise, dst unchanged). */
bool cg_ema_copy(cg_ema *dst, const cg_ema *src);
/* The average of parameter i, borrowed and writable (cg_tensor_modified
 * after writing through cg_data): of a sharded one its run, 1-D. NULL +
 * error on a bad index or while swapped. */
cg_tensor *cg_ema_state(const cg_ema *e, int i);

/* One update from the parameters' current values (after an optimizer
 * step); the averages' readers see the write (cg_tensor_modified). False +
 * error, nothing changed, while swapped (the parameters hold the average
 * then) or if a parameter stopped being contiguous. */
bool cg_ema_update(cg_ema *e);
/* Exchange the values of the parameters and their averages; calling it
 * again exchanges them back. Both sides' readers see the write
 * (cg_tensor_modified: packed copies of the weights are dropped). The swap
 * back is refused (false + error naming it, nothing changed) when a
 * parameter was written while it held the average (an optimizer step, a
 * load, a LoRA merge), which the swap back would undo: do not train while
 * swapped. */
bool cg_ema_swap(cg_ema *e);
/* Whether the parameters hold the average now (an odd number of swaps). */
bool cg_ema_swapped(const cg_ema *e);

/* The decay (a new one applies from the next update: a warm-up, as timm's
 * min(decay, (1 + t) / (10 + t)), sets it before each); false + error for
 * one outside [0, 1], the old one kept. */
bool cg_ema_set_decay(cg_ema *e, double decay);
double cg_ema_decay(const cg_ema *e);
/* Updates made (restored by cg_ema_load). */
int64_t cg_ema_updates(const cg_ema *e);
/* Parameters averaged, and the average of parameter i (borrowed: the
 * EMA's own tensor, or the parameter itself while swapped) or its name;
 * NULL + error on a bad index. */
int cg_ema_count(const cg_ema *e);
const char *cg_ema_name(const cg_ema *e, int i);
const cg_tensor *cg_ema_average(const cg_ema *e, int i);

/* Checkpoint state, beside the model's and the optimizer's:
 *   tensors   <prefix>.<name>  F32, the average of each parameter (where
 *             it is: in the parameter while swapped)
 *   metadata  <prefix>.decay, <prefix>.updates
 * (prefix NULL: "ema"). cg_ema_load reads them back into an EMA over the
 * same parameter names and shapes; every entry is checked before anything
 * changes: a missing or extra <prefix>.* tensor, another shape, a value
 * that is not finite, a decay outside [0, 1] or an update count that is
 * not a whole number in [0, 2^53] is refused with an error naming it.
 * Both refuse while swapped (swap back first): a checkpoint saved then
 * would hold the average twice and the trained weights nowhere. The decay
 * and the count are written exactly (%.17g, a whole number). */
bool cg_ema_save(const cg_ema *e, cg_st_writer *w, const char *prefix);
/* cg_ema_save of a sharded average: the entries a whole one writes, each
 * gathered by g (buffer k 0: optim.h cg_shard_gather) while the writer
 * saves, one at a time. Save w before e's next update. With e unsharded,
 * cg_ema_save (g unused). */
bool cg_ema_save_gathered(const cg_ema *e, cg_st_writer *w, const char *prefix,
                          const cg_shard_gather *g);
bool cg_ema_load(cg_ema *e, const cg_st_file *f, const char *prefix);
/* A file's average (cg_ema_save's) loaded straight into m's trainable
 * parameters, as cg_ema_new + cg_ema_load + cg_ema_swap leave them but
 * without a second copy of the weights: for evaluating or exporting the
 * average. cg_ema_load's checks, each entry checked before any parameter
 * changes (false + error, m unchanged). *updates (NULL: not wanted)
 * receives the file's update count. */
bool cg_ema_load_params(const cg_module *m, const cg_st_file *f, const char *prefix,
                        int64_t *updates);

#ifdef __cplusplus
}
#endif
#endif
