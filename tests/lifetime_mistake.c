/* One lifetime mistake per run, for tests/test_lifetime.sh (issue 33,
 * finding 6): `lifetime_mistake CASE`. With CG_DEBUG=1 the mistaken call
 * prints one line naming the tensor (or module, optimizer) and the call,
 * and does nothing; the program then goes on using what the mistake would
 * have freed and frees everything the right way, so a freed-twice block or
 * a use after free shows (glibc's abort, ASan's report) if the mistaken
 * call did anything. Exit 0 when the mistake was refused (the error slot
 * holds a message) and everything after it worked; 1 otherwise. Without
 * the mode (as on main before it) each case is the heap corruption it
 * names. `correct` makes no mistake: it prints its losses, for the
 * comparison of the mode off and on. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "core/lifetime.h"

static int g_failed;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stdout, "FAIL: %s (%s)\n", what, cg_last_error());
        g_failed = 1;
    }
}

/* The mistaken call was refused: it recorded a message. */
static void refused(unsigned long serial)
{
    check(cg_error_serial() != serial && cg_has_error(), "the mistaken call was not refused");
    cg_clear_error();
}

/* A model "MLP" with one child "fc1" (Linear 2 -> 3) and its optimizer. */
static cg_module *model(cg_linear **fc1)
{
    cg_rng rng = cg_rng_new(7);
    cg_module *root = cg_module_new("MLP");
    *fc1 = cg_module_add_child(root, "fc1", cg_linear_new(2, 3, true, &rng));
    check(root && *fc1, "model");
    return root;
}

/* One forward and backward of the model on fixed data; the loss. */
static float step(cg_module *root, cg_linear *fc1)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = cg_from_data(CG_SHAPE(2, 2), (float[]){1, 2, 3, 4});
    cg_tensor *loss =
        cg_mean(cg_mul(cg_linear_forward(fc1, x), cg_linear_forward(fc1, x)), 0, NULL, false);
    bool ok = loss && cg_backward(loss, NULL, false);
    check(ok, "forward and backward");
    float v = ok ? cg_item(loss) : 0;
    cg_scope_end(s);
    (void)root;
    return v;
}

static void scope_then_release(void)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *t = cg_zeros(CG_SHAPE(2, 3)); /* the scope's: it dies at the end */
    cg_scope_end(s);
    unsigned long serial = cg_error_serial();
    cg_release(t); /* the mistake */
    refused(serial);
}

static void release_twice(void)
{
    cg_tensor *t = cg_ones(CG_SHAPE(4));
    cg_release(t);
    unsigned long serial = cg_error_serial();
    cg_release(t); /* the mistake */
    refused(serial);
}

/* Released twice while a graph node still holds it: the second release
 * would take the node's reference (freed at the backward's end, again). */
static void release_twice_graph(void)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(3)), true);
    cg_tensor *x2 = cg_muls(x, 2.0f);
    cg_tensor *y = cg_sum(x2, 0, NULL, false);
    cg_release_all(2, x2, x);
    unsigned long serial = cg_error_serial();
    cg_release(x); /* the mistake */
    refused(serial);
    check(cg_backward(y, NULL, false), "backward after the refused release");
    cg_release(y);
}

static void release_weight(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    unsigned long serial = cg_error_serial();
    cg_release(fc1->weight); /* the mistake: borrowed from the module */
    refused(serial);
    step(root, fc1);
    cg_module_free(root);
}

/* A tensor tied under two names is reported by its first */
static void release_tied(void)
{
    cg_module *m = cg_module_new("Tied");
    cg_tensor *t = cg_zeros(CG_SHAPE(2));
    check(m && t && cg_module_add_param(m, "first", t) && cg_module_add_param(m, "second", t),
          "tied");
    cg_release(t); /* the caller's own reference */
    unsigned long serial = cg_error_serial();
    cg_release(t); /* the mistake: borrowed from the module */
    refused(serial);
    cg_module_free(m);
}

static void release_grad(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    step(root, fc1);
    unsigned long serial = cg_error_serial();
    cg_release((cg_tensor *)cg_grad(fc1->weight)); /* the mistake: borrowed */
    refused(serial);
    cg_module_zero_grad(root);
    cg_module_free(root);
}

static void release_grad_unnamed(void)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(5)), true);
    cg_tensor *x3 = cg_muls(x, 3.0f);
    cg_tensor *y = cg_sum(x3, 0, NULL, false);
    cg_release(x3);
    check(cg_backward(y, NULL, false), "backward");
    unsigned long serial = cg_error_serial();
    cg_release((cg_tensor *)cg_grad(x)); /* the mistake */
    refused(serial);
    check(cg_data(cg_grad(x)) && cg_data(cg_grad(x))[0] == 3.0f, "the gradient survived");
    cg_release_all(2, y, x);
}

static void module_twice(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_module_free(root);
    unsigned long serial = cg_error_serial();
    cg_module_free(root); /* the mistake */
    refused(serial);
}

static void optim_twice(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_optim *opt = cg_adamw_from_module(root, 1e-2);
    check(opt != NULL, "optimizer");
    cg_optim_free(opt);
    unsigned long serial = cg_error_serial();
    cg_optim_free(opt); /* the mistake */
    refused(serial);
    cg_module_free(root);
}

static void child_of_parent(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    unsigned long serial = cg_error_serial();
    cg_module_free(CG_MODULE(fc1)); /* the mistake: root owns it */
    refused(serial);
    step(root, fc1);
    cg_module_free(root); /* frees fc1 once */
}

/* A forward of a module freed with its parent: named, NULL, nothing read. */
static void forward_after_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_module_free(root);
    cg_tensor *x = cg_ones(CG_SHAPE(1, 2));
    unsigned long serial = cg_error_serial();
    cg_tensor *y = cg_linear_forward(fc1, x); /* the mistake */
    check(y == NULL, "the forward returned NULL");
    refused(serial);
    cg_release(x);
}

/* The same through the fused residual path, which calls no hooks. */
static void residual_after_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_module_free(root);
    cg_tensor *x = cg_ones(CG_SHAPE(1, 2)), *res = cg_zeros(CG_SHAPE(1, 3));
    cg_residual r = {res, 0.0f, NULL, false};
    unsigned long serial = cg_error_serial();
    cg_tensor *y = cg_linear_forward_residual(fc1, x, &r); /* the mistake */
    check(y == NULL, "the forward returned NULL");
    refused(serial);
    cg_release_all(2, x, res);
}

static void optim_step_after_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_optim *opt = cg_adamw_from_module(root, 1e-2);
    step(root, fc1);
    cg_optim_free(opt);
    unsigned long serial = cg_error_serial();
    check(!cg_optim_step(opt), "the step returned false"); /* the mistake */
    refused(serial);
    cg_module_free(root);
}

/* Uses (not releases) of what was freed: each names the tensor or module
 * and the call, returns its failure value and reads nothing. */
static void item_after_scope(void)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *loss = cg_sum(cg_ones(CG_SHAPE(2, 3)), 0, NULL, false);
    cg_scope_end(s);
    unsigned long serial = cg_error_serial();
    check(isnan(cg_item(loss)), "cg_item returned NaN"); /* the mistake: the scope freed it */
    refused(serial);
}

static void op_after_release(void)
{
    cg_tensor *t = cg_ones(CG_SHAPE(4));
    cg_release(t);
    unsigned long serial = cg_error_serial();
    check(cg_add(t, t) == NULL, "the op returned NULL"); /* the mistake */
    refused(serial);
}

/* A batch made in a scope that ended, given to a module's forward. */
static void forward_of_freed_input(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_scope *s = cg_scope_begin();
    cg_tensor *x = cg_ones(CG_SHAPE(4, 2));
    cg_scope_end(s);
    unsigned long serial = cg_error_serial();
    check(cg_linear_forward(fc1, x) == NULL, "the forward returned NULL"); /* the mistake */
    refused(serial);
    cg_module_free(root);
}

static void weight_after_module_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_tensor *w = fc1->weight; /* borrowed: dies with the module */
    cg_module_free(root);
    unsigned long serial = cg_error_serial();
    check(cg_sum(w, 0, NULL, false) == NULL, "the op returned NULL"); /* the mistake */
    refused(serial);
}

/* The bias, freed after the weight: the whole of cg_module_free is named,
 * not only up to the weight's release inside it */
static void bias_after_module_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_tensor *b = fc1->bias;
    cg_module_free(root);
    unsigned long serial = cg_error_serial();
    check(cg_sum(b, 0, NULL, false) == NULL, "the op returned NULL"); /* the mistake */
    refused(serial);
}

static void backward_after_release(void)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(3)), true);
    cg_tensor *y = cg_sum(x, 0, NULL, false);
    cg_release(y);
    unsigned long serial = cg_error_serial();
    check(!cg_backward(y, NULL, false), "the backward returned false"); /* the mistake */
    refused(serial);
    check(cg_grad(x) == NULL, "no gradient");
    cg_release(x);
}

static void grad_after_release(void)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(3)), true);
    cg_tensor *y = cg_sum(x, 0, NULL, false);
    check(cg_backward(y, NULL, false), "backward");
    cg_release_all(2, y, x);
    unsigned long serial = cg_error_serial();
    check(cg_grad(x) == NULL, "cg_grad returned NULL"); /* the mistake */
    refused(serial);
}

static void save_after_module_free(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_module_free(root);
    remove("lifetime_saved.safetensors");
    unsigned long serial = cg_error_serial();
    check(!cg_module_save(root, "lifetime_saved.safetensors", 0, NULL), /* the mistake */
          "the save returned false");
    refused(serial);
    FILE *f = fopen("lifetime_saved.safetensors", "rb");
    check(f == NULL, "no file written");
    if (f)
        fclose(f);
}

static void optim_of_freed_module(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_module_free(root);
    unsigned long serial = cg_error_serial();
    check(cg_adamw_from_module(root, 1e-2) == NULL, "no optimizer"); /* the mistake */
    refused(serial);
}

/* No mistake: ten AdamW steps; the losses to 9 digits. */
static void correct(void)
{
    cg_linear *fc1;
    cg_module *root = model(&fc1);
    cg_optim *opt = cg_adamw_from_module(root, 1e-2);
    for (int i = 0; i < 10; i++) {
        printf("%.9g\n", step(root, fc1));
        check(cg_optim_step(opt), "optimizer step");
        cg_optim_zero_grad(opt);
    }
    cg_optim_free(opt);
    cg_module_free(root);
    printf("checked %d, quarantined %s\n", cg_debug_enabled(),
           cg_lifetime_quarantined() > 0 ? "some" : "none");
}

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {
    {"scope_then_release", scope_then_release},
    {"release_twice", release_twice},
    {"release_twice_graph", release_twice_graph},
    {"release_weight", release_weight},
    {"release_grad", release_grad},
    {"release_grad_unnamed", release_grad_unnamed},
    {"release_tied", release_tied},
    {"module_twice", module_twice},
    {"optim_twice", optim_twice},
    {"child_of_parent", child_of_parent},
    {"forward_after_free", forward_after_free},
    {"residual_after_free", residual_after_free},
    {"optim_step_after_free", optim_step_after_free},
    {"item_after_scope", item_after_scope},
    {"op_after_release", op_after_release},
    {"forward_of_freed_input", forward_of_freed_input},
    {"weight_after_module_free", weight_after_module_free},
    {"bias_after_module_free", bias_after_module_free},
    {"backward_after_release", backward_after_release},
    {"grad_after_release", grad_after_release},
    {"save_after_module_free", save_after_module_free},
    {"optim_of_freed_module", optim_of_freed_module},
    {"correct", correct},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++) {
        if (!strcmp(argv[1], cases[i].name)) {
            cases[i].run();
            check(cg_live_tensors() == 0, "every tensor freed once");
            /* the checked mode counts its reports (a checked test run fails
             * on any): this run's one mistake, or none */
            const unsigned long want = cg_debug_enabled() && strcmp(argv[1], "correct") ? 1 : 0;
            check(cg_debug_reports() == want, "one report counted per mistake");
            return g_failed;
        }
    }
    fprintf(stderr, "usage: lifetime_mistake CASE (see tests/test_lifetime.sh)\n");
    return 2;
}
