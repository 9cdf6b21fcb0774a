/* cgrad core: the thread-local error slot.
 *
 * A failing function returns NULL (or a negative/false status) and records a
 * message here: what op, which shapes, why. Functions given a NULL tensor
 * return NULL without overwriting the first message, so a chain of calls can
 * be checked once at the end (with no message recorded yet, they record
 * "<fn>: input is NULL": a failure never leaves the message empty). Nothing in the library calls exit() or abort()
 * on bad input. */
#ifndef CG_ERROR_H
#define CG_ERROR_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The last recorded message, or "" if none. Valid until the next error. */
const char *cg_last_error(void);
/* True if an error has been recorded since the last cg_clear_error(). */
bool cg_has_error(void);
void cg_clear_error(void);
/* Record a message (printf format), replacing any earlier one. The root
 * cause survives a chain of calls because functions given a NULL input
 * return NULL without recording anything. A message over 1,023 bytes (a
 * long path in it) keeps its first 256 bytes and its end, the reason, with
 * " ... " between them. */
void cg_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Put a prefix (printf format, its separator included) before the current
 * message: cg_prefix_error("checkpoint '%s': ", path) turns "bad dtype"
 * into "checkpoint 'x.st': bad dtype". */
void cg_prefix_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Counts cg_set_error calls on this thread: compare it before and after a
 * call to know whether that call recorded a message (cg_has_error() may be
 * true from an older, unrelated failure). */
unsigned long cg_error_serial(void);
/* For a function given a NULL input: records "<fn>: input is NULL" unless a
 * message is already recorded (the root cause of a chain of calls, which
 * stays), so that an error message is never empty. Returns false. */
bool cg_error_null_input(const char *fn);
/* The same for a NULL argument arg of op: "<op>: argument '<arg>' is NULL". */
bool cg_error_null_arg(const char *op, const char *arg);

/* The checked mode (CG_DEBUG=1 in the environment, read once at load as a
 * switch of core/parse.h; core/debug.c):
 * lifetime mistakes (releasing a tensor already freed, by a scope or an
 * earlier release; releasing a reference held by a module, an optimizer or
 * a graph, such as ->weight or cg_grad(w); freeing a module or an optimizer
 * twice; a forward of a freed module, a step or zero_grad of a freed
 * optimizer; a freed module given to nn/module.h's functions (save, load,
 * parameter lists, an optimizer's from_module); a freed tensor given to an
 * op, a view, cg_item, cg_data, cg_copy_to, cg_retain, cg_grad or
 * cg_backward) are reported by the call that makes them, as one line on stderr
 * ("cgrad: CG_DEBUG: ...", also recorded as the error), and the call does
 * nothing. Freed tensor headers, modules and optimizers are kept (poisoned,
 * not reused) so that a later call can name them: memory grows with every
 * free, which is fine for a debugging run. Off: no check costs more than
 * one predictable branch. */
bool cg_debug_enabled(void);
/* Records the message (cg_set_error) and prints it as one line on stderr. */
void cg_debug_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* How many mistakes the checked mode has reported in this process (all
 * threads): a test asserts 0 at its end. */
unsigned long cg_debug_reports(void);

#ifdef __cplusplus
}
#endif
#endif
