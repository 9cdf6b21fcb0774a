/* cgrad nn: LoRA adapters on Linear layers (Hu et al. 2021; the behaviour
 * of PyTorch's PEFT library, peft/tuners/lora).
 *
 * cg_lora_attach(l, r, alpha, dropout, rng) adds to the Linear l two
 * children, "lora_A" (a Linear in -> r, no bias) and "lora_B" (r -> out, no
 * bias), and "lora_dropout" (a Dropout, p = dropout), and a forward hook
 * (nn/module.h), so that l's forward, wherever it is called from, gives
 *     y = x @ W^T + b + scale * lora_B(lora_A(dropout(x))),  scale = alpha / r.
 * Nothing of the layer is swapped: its weight and bias stay where they are,
 * frozen (requires_grad off); A and B are the trainable parameters.
 * Initialisation as PEFT's default: A ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's
 * kaiming_uniform_ with a = sqrt(5), drawn from rng: NULL is a generator
 * seeded with 0), B = 0, so a fresh adapter changes nothing.
 *
 * Names: the children make the parameters "<path>.lora_A.weight" and
 * "<path>.lora_B.weight" in cg_module_params, as in PEFT. A full
 * cg_module_save writes them with the rest; cg_lora_save writes only them,
 * under PEFT's names. Attach adapters after loading the base weights (a
 * base checkpoint has no lora_* tensors).
 *
 * Merge (PEFT's merge): W += scale * B @ A, and the hook then adds nothing;
 * unmerge subtracts it again (the weight comes back up to float rounding,
 * as in PEFT). Train with the adapter unmerged.
 *
 * Errors: NULL/false/-1 + cg_set_error. */
#ifndef CG_NN_LORA_H
#define CG_NN_LORA_H

#include "../nn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cg_linear *base;   /* the adapted layer (borrowed) */
    cg_linear *lora_A; /* [r, in], child "lora_A" of base (borrowed) */
    cg_linear *lora_B; /* [out, r], child "lora_B" (borrowed) */
    cg_drop *dropout;  /* child "lora_dropout" (borrowed) */
    int r;
    float alpha, scale; /* scale = alpha / r */
    bool merged;
    cg_hook_handle hook;
} cg_lora;

/* Attach an adapter of rank r >= 1 to l (one per layer). The adapter is
 * owned by l's hook and freed with l. Returns it (borrowed) or NULL + error. */
cg_lora *cg_lora_attach(cg_linear *l, int r, float alpha, float dropout, cg_rng *rng);
/* l's adapter (borrowed), or NULL (no error) if it has none. */
cg_lora *cg_lora_of(const cg_linear *l);
/* W += scale * B @ A / W -= scale * B @ A. False + error when already
 * merged / not merged. */
bool cg_lora_merge(cg_lora *a);
bool cg_lora_unmerge(cg_lora *a);

/* PEFT's LoraConfig. */
typedef struct {
    int r;
    float alpha;   /* lora_alpha */
    float dropout; /* lora_dropout */
    int n_targets;
    const char *const *targets; /* target_modules (cg_lora_target_matches) */
} cg_lora_config;

/* Does target_modules entry `target` name the module at `path` (its dotted
 * path below the root)? PEFT's rule for a list: the whole path, or its
 * end after a dot: "q_proj" names every q_proj, "cross_attn.q_proj" every
 * cross-attention's, "decoder.layers.0.cross_attn.q_proj" one. */
bool cg_lora_target_matches(const char *target, const char *path);

/* Freeze every parameter of root, then attach an adapter to every Linear
 * below it that one of cfg->targets names (cg_lora_target_matches; PEFT's
 * get_peft_model). Returns the number of adapters attached; 0 matches is
 * an error (-1) naming the targets. */
int cg_lora_attach_all(cg_module *root, const cg_lora_config *cfg, cg_rng *rng);
/* Merge / unmerge every adapter below root; returns how many, -1 + error. */
int cg_lora_merge_all(cg_module *root);
int cg_lora_unmerge_all(cg_module *root);
/* Take adapter a off its layer (PEFT's merge_and_unload with merge_first,
 * its unload without): its B @ A merged into the weight first (or, when it
 * was merged, taken out again: the base's weight back up to float
 * rounding), then its children and its hook removed and a freed. The layer
 * is a plain Linear again, its weight and bias still frozen
 * (cg_module_requires_grad to train them). False + error (a stays). */
bool cg_lora_unload(cg_lora *a, bool merge_first);
/* cg_lora_unload on every adapter below root, all merged (unmerged) before
 * any is removed; returns how many, -1 + error. */
int cg_lora_unload_all(cg_module *root, bool merge_first);

/* Save only the adapters below root to a safetensors file, as PEFT's
 * save_pretrained writes adapter_model.safetensors:
 *     base_model.model.<path>.lora_A.weight   [r, in]
 *     base_model.model.<path>.lora_B.weight   [out, r]
 * with metadata "format" = "pt" and "adapter_config" = the JSON of PEFT's
 * adapter_config.json: {"peft_type": "LORA", "r": .., "lora_alpha": ..,
 * "lora_dropout": .., "target_modules": [..]}: the adapted Linears' local
 * names, or their full paths when those names would also take Linears
 * without an adapter (adapters attached by full path), so that a load
 * attaches to the same Linears. All adapters must share r, alpha and dropout. Merged adapters are saved as they are (A and B). */
bool cg_lora_save(const cg_module *root, const char *path);
/* cg_lora_save's tensors and metadata added to w, for a file that holds more
 * (the zoo's adapter checkpoints add their optimizer state and training
 * state: models/train/finetune.h). False + error. */
bool cg_lora_write(const cg_module *root, cg_st_writer *w);
/* Read such a file onto a model built without adapters (base weights
 * loaded): attaches adapters by its adapter_config (as cg_lora_attach_all)
 * and copies A and B. Strict, and checked before any adapter is attached
 * (an adapter's size comes from the config's r, so it is only allocated
 * for tensors the file holds): a file tensor that no adapter takes, or an
 * adapter tensor the file does not hold, is an error listing them; one of
 * another shape is an error naming it. On a later error (values that are
 * not finite) the model may have adapters attached with their fresh
 * values. */
bool cg_lora_load(cg_module *root, const char *path);
/* cg_lora_load from an open file f (path names it in messages), strict
 * among the tensors under "base_model.model." only: the others are the
 * caller's (a zoo adapter checkpoint's "optim.*"). */
bool cg_lora_read(cg_module *root, const cg_st_file *f, const char *path);

#ifdef __cplusplus
}
#endif
#endif
