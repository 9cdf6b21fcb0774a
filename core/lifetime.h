/* cgrad core: the checked mode's lifetime bookkeeping (CG_DEBUG=1; the
 * switch and the promise are in core/error.h; core/lifetime.c).
 *
 * Library-internal (not installed). Every function here is called only
 * when cg_debug_enabled() is true, behind one branch, so that the release
 * build pays that branch and nothing else:
 *   - a tensor header carries a magic word (CG_TENSOR_LIVE, set at
 *     creation); a freed header is poisoned (CG_TENSOR_FREED, no storage,
 *     no count) and kept in a quarantine, never returned to malloc, so a
 *     second release reads the poison instead of reused memory (ASan's
 *     quarantine, for our own headers). Its shape, dtype and name stay, to
 *     name it; the storage's data is freed as usual;
 *   - a release checks the header (freed? a tensor at all?) and, for the
 *     user's cg_release, that the caller owns a reference: a release that
 *     would take a reference held by a module, an optimizer, a gradient
 *     slot or a graph node (cg_hold: refcount <= held) is refused. That is
 *     c10's intrusive_ptr rule (a borrowed reference, its
 *     weak/unowned form, never decrements) checked at run time;
 *   - modules and optimizers (nn/, optim/) have their own tag word, poison
 *     it when freed and quarantine the struct with cg_lifetime_quarantine.
 * A refused call prints one line (cg_debug_report), records it as the
 * error and does nothing, so no memory is freed twice. */
#ifndef CG_LIFETIME_H
#define CG_LIFETIME_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

/* cg_lifetime_enter/leave, cg_lifetime_release_ok and cg_lifetime_retire,
 * which core/tensor.c calls, are declared in core/tensor.h (so that the
 * tensor module includes nothing of this one). */
#define CG_TENSOR_FREED 0xdeadc0deu /* a quarantined header */
/* Name t (a parameter's dotted name; copied); an earlier name is replaced
 * only when replace is true. */
void cg_lifetime_set_name(const cg_tensor *t, const char *name, bool replace);
/* Mark a tensor handed out borrowed by an accessor: g, the gradient of t
 * returned by cg_grad, is named "<t's name>.grad" or, when t has none,
 * described as coming from the accessor. */
void cg_lifetime_borrowed_grad(const cg_tensor *g, const cg_tensor *t);
/* "tensor 'fc1.weight' [64, 2] float32" (or without the name; " (from
 * cg_grad)" for an unnamed gradient) into buf; returns buf. */
char *cg_lifetime_describe(const cg_tensor *t, char *buf, size_t n);
/* Keep a freed block (a module's or an optimizer's struct, already
 * poisoned by its owner) for the rest of the process. */
void cg_lifetime_quarantine(void *block);
/* Blocks kept so far (tensor headers included): 0 with the mode off. */
int64_t cg_lifetime_quarantined(void);

#endif
