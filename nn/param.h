/* cgrad nn: weight reparametrisations, as torch.nn.utils.weight_norm and
 * torch.nn.utils.spectral_norm (PyTorch 1.13) attach them: the parameter
 * is replaced by others in the module's registry, and a forward pre-hook
 * (nn/module.h) recomputes the weight from them before each forward and
 * points the module's own field at it (the field its forward reads, as
 * registered by cg_module_add_param_at: every nn layer's weight), so the
 * gradient flows to the new parameters. Between forwards the field holds
 * the weight of the last one (or of the attach); a load or an optimizer
 * step shows in the next forward. A module with several reparametrised
 * parameters keeps one hook per kind. Names and shapes are PyTorch's, so
 * the state dicts PyTorch writes load (cg_module_load), and saves write
 * PyTorch's keys.
 *
 * Errors: false + one line naming the function (m unchanged). */
#ifndef CG_NN_PARAM_H
#define CG_NN_PARAM_H

#include <limits.h>

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* weight_norm(m, name, dim): m's parameter `name` [*] becomes
 * name_g (its norm over every dim but dim, keeping dim's size and 1
 * elsewhere: norm_except_dim; dim -1: one norm of the whole tensor, a 0-d
 * name_g) and name_v (its values, the parameter's own shape), registered
 * after m's other parameters; the weight is g v / ||v||
 * (torch._weight_norm), recomputed before each forward. PyTorch's default
 * dim is 0. Refused: name not a parameter of m (a local name: no dots),
 * one registered without its field, dim outside [-1, ndim), name already
 * under weight norm. */
bool cg_weight_norm(cg_module *m, const char *name, int dim);
/* remove_weight_norm(m, name): the weight g v / ||v|| (its values now)
 * becomes the parameter `name` again (a new tensor, registered last, as
 * PyTorch's), name_g and name_v and the hook go. Refused: no weight norm
 * of name on m. */
bool cg_remove_weight_norm(cg_module *m, const char *name);

/* The dim of cg_spectral_norm that PyTorch's dim=None chooses: 1 for
 * ConvTranspose1d/2d/3d, else 0. */
#define CG_SPECTRAL_DIM_AUTO INT_MIN
/* spectral_norm(m, name, n_power_iterations, eps, dim): the parameter
 * `name` becomes name_orig (the same tensor), with the persistent buffers
 * name_u [h] and name_v [w] (W as a matrix [h, w]: dim moved first, the
 * others flattened), drawn N(0, 1) from rng (NULL: seeded 0) and
 * normalised. Before each forward in training mode, n_power_iterations
 * steps v = normalize(W^T u), u = normalize(W v) (x / max(||x||, eps))
 * update the buffers in place, without gradient; in both modes the
 * weight is then W / sigma, sigma = u . (W v) with copies of u and v (no
 * gradient through them). Refused: name not a parameter of m (or without
 * its field), n_power_iterations < 1, eps negative or not finite, dim
 * outside [0, ndim) (PyTorch's permute takes no negative dim here), a
 * weight with fewer than 1 dim, name already under spectral norm. */
bool cg_spectral_norm(cg_module *m, const char *name, int n_power_iterations, float eps, int dim,
                      cg_rng *rng);
/* remove_spectral_norm(m, name): the weight W / sigma from the stored u
 * and v (no power iteration) becomes the parameter `name` again (a new
 * tensor, registered last); name_orig, name_u, name_v and the hook go.
 * Refused: no spectral norm of name on m. */
bool cg_remove_spectral_norm(cg_module *m, const char *name);

/* torch.nn.utils.parameters_to_vector(m.parameters()): m's parameters
 * in cg_module_params' order (named_parameters(), each tied tensor once)
 * flattened into one 1-d tensor, a graph op (a concat of views: the
 * gradient flows back to each parameter, as through PyTorch's torch.cat).
 * The parameters must have one dtype (PyTorch's cat promotes); none: a
 * float32 [0]. NULL + error. */
cg_tensor *cg_parameters_to_vector(const cg_module *m);
/* torch.nn.utils.vector_to_parameters(vec, m.parameters()): vec's
 * elements (1-d, any dtype, any strides) copied into m's parameters in
 * the same order, each parameter's numel of them, converted to its dtype,
 * outside the graph (PyTorch replaces each param.data); each parameter
 * marked modified. Refused, m unchanged: vec not 1-d, or of another
 * length than the parameters' total (PyTorch refuses a short vec and
 * ignores the rest of a long one). */
bool cg_vector_to_parameters(const cg_tensor *vec, cg_module *m);

#ifdef __cplusplus
}
#endif
#endif
