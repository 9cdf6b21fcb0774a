/* cgrad autograd: the reverse-mode graph over core tensors.
 *
 * An op given an input that requires grad (while grad mode is on) records a
 * node on its output: the op, its inputs, what it saved for the backward,
 * and the backward function. A node holds each input its backward reads
 * (and each leaf that needs a gradient) itself; of any other input it keeps
 * a header without storage: its shape, strides, dtype, requires_grad and
 * the node that made it (where its gradient goes), so that the input's
 * memory dies with its last user, not with the graph (docs/autograd.md,
 * "What a node keeps"). The output tensor holds its node, and so does
 * every such header: a node lives while either does. A node never
 * references its own output, so there are no cycles and dropping the last
 * reference to a loss frees its whole graph (iteratively: a graph of
 * 100,000 nodes does not touch the stack).
 *
 * cg_backward(loss) walks the nodes reachable from loss in reverse
 * topological order (iteratively), accumulates gradients where a tensor is
 * used more than once, reduces broadcast gradients back to each input's
 * shape, and adds the result into the .grad of every leaf that requires
 * grad. Unless retain_graph, the graph is freed as the walk goes: what a
 * node kept goes once its backward has run, as in PyTorch (a second
 * backward through it is an error, from the same root or from another one
 * whose graph shares the freed part).
 *
 * Ownership: as in core/tensor.h, every returned tensor is a new reference.
 * t->grad belongs to t: read it, do not release it (cg_zero_grad clears). */
#ifndef CG_AUTOGRAD_H
#define CG_AUTOGRAD_H

#include "../core/ops.h"
#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- ops */
/* The op table: one row per differentiable op of the library, the only
 * place an op is listed. Columns:
 *   X(ENUM, name, max_inputs, reads, cross)
 *   ENUM        the cg_op value is CG_OP_<ENUM>
 *   name        printed in every message about the op
 *   max_inputs  inputs recorded (0: any number, e.g. concat); recording
 *               with more is an error
 *   reads       the inputs whose VALUES the backward reads, as a bit mask
 *               (CG_IN(i)), or CG_IN_ALL; an input used only for its shape
 *               is not read.
 *               Their version counters are checked by cg_backward, so a
 *               tensor the backward does not read (x in x + 1) may change
 *               in place after the forward without complaint. And the node
 *               keeps no storage of an input it does not read (unless a
 *               leaf that needs a gradient): n->inputs[i] is then a header
 *               without data, so a backward reading it would fault. A
 *               mask must never leave out an input the backward reads.
 *   cross       1: also input 0 is read when input 1 needs a gradient and
 *               input 1 when input 0 does (a product: d(ab)/da = b).
 * Saved tensors (cg_node_save) are always checked. A new op: one row here,
 * its forward and backward side by side in ops*.c, its declaration in
 * ops.h, and its entry in the gradcheck table (tests/test_grad_ops.c,
 * op_checks); a unary elementwise op whose derivative is a function of its
 * input is one row of core/ops.h's CG_UNARY_OPS instead, which makes all
 * of these but the gradcheck (docs/autograd.md, "Adding an op"). */
#define CG_IN(i) (1u << (i))
#define CG_IN_ALL 0x7fffffffu /* every input, however many */
/* clang-format off */
#define CG_OP_TABLE(X)                                                        \
    X(ADD, "add", 2, 0, 0)                                                    \
    X(SUB, "sub", 2, 0, 0)                                                    \
    X(MUL, "mul", 2, 0, 1)                                                    \
    X(DIV, "div", 2, CG_IN(1), 1)                                             \
    X(ADDS, "adds", 1, 0, 0)                                                  \
    X(MULS, "muls", 1, 0, 0)                                                  \
    X(NEG, "neg", 1, 0, 0)                                                    \
    X(EXP, "exp", 1, 0, 0)              /* reads its saved output */          \
    X(LOG, "log", 1, CG_IN(0), 0)                                             \
    X(SQRT, "sqrt", 1, 0, 0)            /* saved output */                    \
    X(RSQRT, "rsqrt", 1, 0, 0)          /* saved output */                    \
    X(POW, "pow", 1, CG_IN(0), 0)                                             \
    X(TANH, "tanh", 1, 0, 0)            /* saved output */                    \
    X(SIGMOID, "sigmoid", 1, 0, 0)      /* saved output */                    \
    CG_UNARY_OPS(CG_OP_UNARY_ROW_, X) /* relu, gelu, ...: core/ops.h */       \
    CG_UNARY_PARAM_OPS(CG_OP_UNARY_PARAM_ROW_, X) /* leaky_relu, elu, softplus */ \
    X(CLAMP, "clamp", 1, CG_IN(0), 0)                                         \
    X(GATED, "gated", 2, CG_IN(0) | CG_IN(1), 0) /* act(a) * b */             \
    X(GATED_HALVES, "gated_halves", 1, CG_IN(0), 0) /* of h's two halves */    \
    X(ROPE, "rope", 1, 0, 0)            /* rotary positions: a rotation */    \
    X(WHERE, "where", 3, CG_IN(0), 0)   /* cond, a, b */                      \
    X(MASKED_FILL, "masked_fill", 2, CG_IN(1), 0)                             \
    X(MAXIMUM, "maximum", 2, CG_IN(0) | CG_IN(1), 0)                          \
    X(MINIMUM, "minimum", 2, CG_IN(0) | CG_IN(1), 0)                          \
    X(SUM, "sum", 1, 0, 0)                                                    \
    X(MEAN, "mean", 1, 0, 0)                                                  \
    X(VAR, "var", 1, CG_IN(0), 0)                                             \
    X(LOGSUMEXP, "logsumexp", 1, CG_IN(0), 0) /* + saved output */            \
    X(MAX, "max", 1, 0, 0)              /* saved argmax */                    \
    X(MIN, "min", 1, 0, 0)              /* saved argmin */                    \
    X(MATMUL, "matmul", 2, 0, 1)                                              \
    X(PERMUTE, "permute", 1, 0, 0)                                            \
    X(SLICE, "slice", 1, 0, 0)                                                \
    X(SELECT, "select", 1, 0, 0)                                              \
    X(EXPAND, "expand", 1, 0, 0)                                              \
    X(RESHAPE, "reshape", 1, 0, 0)                                            \
    X(CONTIGUOUS, "contiguous", 1, 0, 0)                                      \
    X(SOFTMAX, "softmax", 1, 0, 0)      /* saved output */                    \
    X(LOG_SOFTMAX, "log_softmax", 1, 0, 0) /* saved output */                 \
    X(CROSS_ENTROPY, "cross_entropy", 1, CG_IN(0), 0)                         \
    X(LAYER_NORM, "layer_norm", 3, CG_IN(0) | CG_IN(1), 0) /* x, w, b */      \
    X(RMS_NORM, "rms_norm", 2, CG_IN(0) | CG_IN(1), 0)                        \
    X(DROPOUT, "dropout", 1, 0, 0)      /* saved mask */                      \
    X(CONCAT, "concat", 0, 0, 0)                                              \
    X(STACK, "stack", 0, 0, 0)                                                \
    X(INDEX_SELECT, "index_select", 1, 0, 0)                                  \
    X(GATHER, "gather", 1, 0, 0)                                              \
    X(INDEX_ADD, "index_add", 2, 0, 0)  /* input, source; saved index */      \
    X(SCATTER_ADD, "scatter_add", 2, 0, 0) /* input, source; saved index */   \
    X(ATTENTION, "attention", 3, CG_IN(0) | CG_IN(1) | CG_IN(2), 0)           \
    X(LINEAR, "linear", 3, 0, 1)        /* x, w, b */                         \
    X(TRIL, "tril", 1, 0, 0)                                                  \
    X(TRIU, "triu", 1, 0, 0)                                                  \
    X(CUMSUM, "cumsum", 1, 0, 0)                                              \
    X(PAD, "pad", 1, 0, 0)              /* the sizes in ctx */                \
    X(FLIP, "flip", 1, 0, 0)                                                  \
    X(ROLL, "roll", 1, 0, 0)            /* shifts and dims in ctx */          \
    X(REPEAT, "repeat", 1, 0, 0)                                              \
    X(NLL_LOSS, "nll_loss", 1, 0, 0)    /* saved log-probabilities */         \
    X(BCE_WITH_LOGITS, "binary_cross_entropy_with_logits", 2,                 \
      CG_IN(0) | CG_IN(1), 0)                                                 \
    X(L1_LOSS, "l1_loss", 2, CG_IN(0) | CG_IN(1), 0) /* pointwise: ops_loss.c */ \
    X(SMOOTH_L1_LOSS, "smooth_l1_loss", 2, CG_IN(0) | CG_IN(1), 0)            \
    X(HUBER_LOSS, "huber_loss", 2, CG_IN(0) | CG_IN(1), 0)                    \
    X(KL_DIV, "kl_div", 2, CG_IN(0) | CG_IN(1), 0)                            \
    X(NORMALIZE, "normalize", 1, CG_IN(0), 0)                                 \
    X(COSINE_SIMILARITY, "cosine_similarity", 2, CG_IN(0) | CG_IN(1), 0)      \
    X(ADD_LAYER_NORM, "add_layer_norm", 4, CG_IN(2), 0) /* saves x + y */      \
    X(ADD_RMS_NORM, "add_rms_norm", 3, CG_IN(2), 0)                           \
    X(LINEAR_RELU, "linear_relu", 3, 0, 1) /* + saved output */               \
    X(LINEAR_GELU, "linear_gelu", 3, 0, 1) /* + saved pre-activation */       \
    X(CUSTOM, "custom", 0, CG_IN_ALL, 0) /* cg_record_op: see below */       \
    X(CLONE, "clone", 1, 0, 0)                                                \
    X(CHECKPOINT, "checkpoint", 0, CG_IN_ALL, 0) /* autograd/checkpoint.h */ \
    X(TO, "to", 1, 0, 0)                                                      \
    X(LINEAR_CROSS_ENTROPY, "linear_cross_entropy", 3, CG_IN_ALL, 0) /* h, w, b */ \
    X(LINEAR_RESIDUAL, "linear_residual", 4, 0, 1) /* x, w, b?, res?; mask */ \
    X(LINEAR_PAIR, "linear_pair", 5, CG_IN(0) | CG_IN(1) | CG_IN(2), 0) /* x, w1, w2, b1?, b2? */ \
    X(GRU_CELL, "gru_cell", 3, CG_IN(0) | CG_IN(1) | CG_IN(2), 0) /* gi, gh, h */    \
    X(LSTM_CELL, "lstm_cell", 2, CG_IN(0) | CG_IN(1), 0) /* gates, c */      \
    X(MSE_LOSS, "mse_loss", 2, CG_IN(0) | CG_IN(1), 0) /* pointwise: ops_loss.c */ \
    X(MAX_POOL1D, "max_pool1d", 1, 0, 0) /* the indices saved */              \
    X(MAX_POOL2D, "max_pool2d", 1, 0, 0)                                      \
    X(AVG_POOL1D, "avg_pool1d", 1, 0, 0) /* the options in ctx */             \
    X(AVG_POOL2D, "avg_pool2d", 1, 0, 0)                                      \
    X(ADAPTIVE_AVG_POOL1D, "adaptive_avg_pool1d", 1, 0, 0)                    \
    X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", 1, 0, 0)                    \
    X(ADAPTIVE_MAX_POOL1D, "adaptive_max_pool1d", 1, 0, 0)                    \
    X(ADAPTIVE_MAX_POOL2D, "adaptive_max_pool2d", 1, 0, 0)                    \
    X(BATCH_NORM, "batch_norm", 3, CG_IN(0) | CG_IN(1), 0) /* x, w?, b?; mean, invstd saved */ \
    X(CONV, "conv", 3, CG_IN(0) | CG_IN(1), 0) /* x, w, b?; the config in p.i */ \
    X(GROUP_NORM, "group_norm", 3, CG_IN(0) | CG_IN(1), 0) /* x, w?, b?; mean, invstd saved */ \
    X(INSTANCE_NORM, "instance_norm", 3, CG_IN(0) | CG_IN(1), 0) /* as group_norm's */ \
    X(INTERPOLATE, "interpolate", 1, 0, 0) /* the options in ctx */ \
    X(CONV_TRANSPOSE, "conv_transpose", 3, CG_IN(0) | CG_IN(1), 0) /* as conv's */ \
    X(UNFOLD, "unfold", 1, 0, 0) /* the options in p.i; x's shape read */ \
    X(FOLD, "fold", 1, 0, 0) /* the options in p.i */ \
    X(PRELU, "prelu", 2, CG_IN(0), 1) /* x, weight: w read for x's gradient */ \
    X(RRELU, "rrelu", 1, CG_IN(0), 0) /* training: the noise saved, x not read */ \
    X(CONV3D, "conv3d", 3, CG_IN(0) | CG_IN(1), 0) /* as conv's; the config in ctx */ \
    X(CONV_TRANSPOSE3D, "conv_transpose3d", 3, CG_IN(0) | CG_IN(1), 0) /* as conv3d's */ \
    X(MAX_POOL3D, "max_pool3d", 1, 0, 0) /* the indices saved */ \
    X(AVG_POOL3D, "avg_pool3d", 1, 0, 0) /* the options in ctx */ \
    X(ADAPTIVE_AVG_POOL3D, "adaptive_avg_pool3d", 1, 0, 0) \
    X(ADAPTIVE_MAX_POOL3D, "adaptive_max_pool3d", 1, 0, 0) /* the indices saved */ \
    X(MAX_UNPOOL1D, "max_unpool1d", 1, 0, 0) /* the indices saved */ \
    X(MAX_UNPOOL2D, "max_unpool2d", 1, 0, 0) \
    X(MAX_UNPOOL3D, "max_unpool3d", 1, 0, 0) \
    X(BINARY_CROSS_ENTROPY, "binary_cross_entropy", 2, CG_IN(0) | CG_IN(1), 0) /* pointwise: ops_loss.c */ \
    X(MULTI_MARGIN_LOSS, "multi_margin_loss", 1, CG_IN(0), 0) /* target, weight? saved */ \
    X(MULTILABEL_MARGIN_LOSS, "multilabel_margin_loss", 1, CG_IN(0), 0) /* target saved */ \
    X(EMBEDDING_BAG, "embedding_bag", 2, 0, 1) /* weight, per_sample_weights; ids, bags, argmax saved */ \
    X(PROD, "prod", 1, CG_IN(0), 0) /* dim, keepdim in p.i */ \
    X(CUMPROD, "cumprod", 1, CG_IN(0), 0) \
    X(LOGCUMSUMEXP, "logcumsumexp", 1, CG_IN(0), 0) /* + saved output */ \
    X(STD, "std", 1, CG_IN(0), 0) /* + saved output; var's dims in p.i */ \
    X(CTC_LOSS, "ctc_loss", 1, CG_IN(0), 0) /* targets, lengths, nll, log_alpha saved */ \
    X(DIAGONAL, "diagonal", 1, 0, 0) /* a view: offset and dims in p.i */ \
    X(CDIST, "cdist", 2, CG_IN(0) | CG_IN(1), 0) /* x1, x2; the distances saved, p in p.f */ \
    X(ADJOINT, "adjoint", 1, 0, 0) /* a linear op's backward as an op (grad2.c) */ \
    X(FEATURE_DROPOUT, "feature_dropout", 1, 0, 0) /* dropout1d/2d/3d: the noise saved */ \
    X(ALPHA_DROPOUT, "alpha_dropout", 1, 0, 0) /* the noise saved */ \
    X(FEATURE_ALPHA_DROPOUT, "feature_alpha_dropout", 1, 0, 0) /* the noise saved */ \
    X(MASKED_SELECT, "masked_select", 2, CG_IN(1), 0) /* a, mask */ \
    X(MASKED_SCATTER, "masked_scatter", 3, CG_IN(1), 0) /* a, mask, source */ \
    X(NAN_TO_NUM, "nan_to_num", 1, CG_IN(0), 0) \
    X(FMOD, "fmod", 2, CG_IN(0) | CG_IN(1), 0) \
    X(REMAINDER, "remainder", 2, CG_IN(0) | CG_IN(1), 0) \
    X(LERP, "lerp", 3, CG_IN_ALL, 0) /* start, end, weight?; a scalar weight in p.f */ \
    X(CLAMP_TENSOR, "clamp_tensor", 3, CG_IN_ALL, 0) /* x, min?, max?; which in p.i */ \
    X(CROSS, "cross", 2, 0, 1) /* a, b; the dim in p.i */ \
    X(LINALG_SOLVE, "linalg_solve", 2, 0, 0) /* A, B; the factors in ctx (cg_la): no input read */ \
    X(LINALG_INV, "linalg_inv", 1, 0, 0) /* A^-1 in ctx */ \
    X(LINALG_DET, "linalg_det", 1, 0, 0) /* A and det in ctx */ \
    X(LINALG_SLOGDET, "linalg_slogdet", 1, 0, 0) /* packed [sign | logabsdet]; A's LU in ctx */ \
    X(LINALG_CHOLESKY, "linalg_cholesky", 1, 0, 0) /* L in ctx */ \
    X(LINALG_QR, "linalg_qr", 1, 0, 0) /* packed [Q | R]; Q, R in ctx */ \
    X(LINALG_EIGH, "linalg_eigh", 1, 0, 0) /* packed [L | V]; L, V in ctx */ \
    X(LINALG_EIGVALSH, "linalg_eigvalsh", 1, 0, 0) /* L, V in ctx */ \
    X(LINALG_SVD, "linalg_svd", 1, 0, 0) /* packed [U | S | Vh]; U, S, Vh in ctx */ \
    X(LINALG_SVDVALS, "linalg_svdvals", 1, 0, 0) /* U, S, Vh in ctx */ \
    X(LINALG_PINV, "linalg_pinv", 1, 0, 0) /* A, pinv(A) in ctx */ \
    X(LINALG_LSTSQ, "linalg_lstsq", 2, 0, 0) /* A, B; A, B in ctx */ \
    X(LINALG_VECTOR_NORM, "linalg_vector_norm", 1, CG_IN(0), 0) /* ord, dims, keepdim in p.i */
/* clang-format on */
/* A row of core/ops.h's CG_UNARY_OPS as a row of this table: one input,
 * which the backward reads. */
#define CG_OP_UNARY_ROW_(X, E, name, fwd, bwd) X(E, #name, 1, CG_IN(0), 0)
/* And a row of CG_UNARY_PARAM_OPS: the same (the parameters in the node). */
#define CG_OP_UNARY_PARAM_ROW_(X, E, name, fwd, bwd, ...) X(E, #name, 1, CG_IN(0), 0)

typedef enum {
#define CG_OP_ENUM_(e, name, nin, reads, cross) CG_OP_##e,
    CG_OP_TABLE(CG_OP_ENUM_)
#undef CG_OP_ENUM_
        CG_OP_COUNT
} cg_op;

const char *cg_op_name(cg_op op);

/* ------------------------------------------------------------- nodes */
#define CG_NODE_MAX_SAVED 6

typedef struct cg_node cg_node;

/* Compute the gradient of each input from the output gradient g. gin[i] is
 * NULL on entry; set it (a new reference, in the output's broadcast shape or
 * the input's shape) only where cg_node_needs_grad(n, i). Return false with
 * an error recorded on failure. */
typedef bool (*cg_backward_fn)(cg_node *n, const cg_tensor *g, cg_tensor **gin);

struct cg_node {
    cg_op op;
    char *name; /* a user-defined op's name (owned), else NULL */
    cg_backward_fn backward;
    int n_inputs;
    /* Retained. An input the backward does not read (bit i of reads off)
     * and that is not a leaf needing a gradient is a header without
     * storage (core/tensor.h cg_meta_held): its shape, strides, dtype and
     * requires_grad, and the node that made it (held). */
    cg_tensor **inputs;
    cg_tensor *saved[CG_NODE_MAX_SAVED]; /* retained; NULL where unused */
    union {                              /* small op parameters */
        float f[4];
        int64_t i[CG_MAX_DIMS + 2];
    } p;
    void *ctx; /* op-owned heap data, freed with ctx_free */
    void (*ctx_free)(void *);
    cg_tensor *grad; /* output gradient while backward runs */
    int out_ndim;    /* output shape, to check gradients */
    int64_t out_shape[CG_MAX_DIMS];
    uint64_t mark; /* topological sort bookkeeping */
    bool freed;    /* inputs already released */
    /* Version checks (see cg_backward): bit i of reads says the backward
     * reads input i's values (bit 63 stands for every input from 63 on);
     * in_version[i] and saved_version[i] are the version counters
     * (cg_version) of input i and saved[i] when they were recorded. */
    uint64_t reads;
    uint64_t *in_version; /* n_inputs entries (owned) */
    /* in_needs[i]: input i required grad when it was recorded (n_inputs
     * entries, in in_version's block, freed with it). Its gradient goes only where it would have gone then, as in
     * PyTorch: a constant made to require grad afterwards gets none (the
     * node may have let go of what its gradient needs). */
    bool *in_needs;
    uint64_t saved_version[CG_NODE_MAX_SAVED];
    /* References to the node (atomic): its output tensor's, and one per
     * header of an input that the nodes of its users keep. */
    int refs;
    /* The thread whose backward walks the node (a token of it, atomic),
     * or NULL: a backward keeps its state in the nodes (mark, grad), so
     * another thread's backward through the node is refused meanwhile. */
    const void *walker;
    /* The backward composes differentiable ops (cg_node_set_backward_
     * differentiable): a backward with create_graph runs it as it is. */
    bool bw_composes;
};

/* Record a node on out if grad mode is on and any input requires grad.
 * Returns the node (owned by out) or NULL when nothing was recorded or on
 * error (then out is left as it is; check cg_has_error() if it matters).
 * The library's ops use this; user-defined ops use cg_record_op below. */
cg_node *cg_record(cg_tensor *out, cg_op op, int n_inputs, cg_tensor *const *inputs,
                   cg_backward_fn backward);
/* Did cg_record fail? True when it returned n == NULL although it should
 * have recorded (grad mode on and an input requires grad): out of memory,
 * the error is set. An op then releases its output and returns NULL, never
 * a result silently detached from the graph. */
bool cg_record_failed(const cg_node *n, int n_inputs, cg_tensor *const *inputs);

/* ------------------------------------------------ user-defined ops */
/* A new differentiable op, written outside the library (the worked example
 * is examples/rope.c, rotary position embeddings):
 *
 *   1. forward: compute the output with kernels (core/ops.h) or plain loops
 *      into a tensor you have just made (cg_empty_like, cg_k_*), never into
 *      an input;
 *   2. cg_record_op(out, "my_op", n, inputs, my_backward, &node): when it
 *      returns CG_RECORD_OK, save what the backward needs on the node
 *      (cg_node_save for tensors, node->p for a few numbers, node->ctx +
 *      ctx_free for anything else);
 *   3. my_backward(node, g, gin): g has the output's shape; set gin[i] (a
 *      new tensor, the input's shape or broadcast to the output's) where
 *      cg_node_needs_grad(node, i); on failure cg_set_error and return false.
 *      A gradient is a float tensor of any float dtype (the engine rounds it
 *      to the input's; an int or bool one is refused, naming the op);
 *      compute it with raw kernels (cg_k_*) or under cg_no_grad_begin():
 *      grad mode is as the caller of cg_backward left it;
 *   4. test it with cg_gradcheck (autograd/gradcheck.h).
 *
 * The name (copied) appears in every message about the node: errors in its
 * backward, a gradient of the wrong shape, a missing gradient. */
typedef enum {
    CG_RECORD_FAILED = -1, /* error recorded (e.g. out already has a node) */
    CG_RECORD_NONE = 0,    /* nothing to record: grad mode off or no input needs grad */
    CG_RECORD_OK = 1,      /* *node_out is the new node, owned by out */
} cg_record_status;
cg_record_status cg_record_op(cg_tensor *out, const char *name, int n_inputs,
                              cg_tensor *const *inputs, cg_backward_fn backward,
                              cg_node **node_out);
/* The node's op name: a user-defined op's own name, else cg_op_name(op). */
const char *cg_node_name(const cg_node *n);
/* Whether the backward of n reads the values of input i (on, the default
 * for a user-defined op: every input) or only its shape or nothing (off).
 * cg_backward refuses to run when an input it reads, or a tensor saved with
 * cg_node_save, was written in place after it was recorded (its version
 * counter moved, core/tensor.h cg_version): say off for inputs your
 * backward does not read, so that changing them afterwards stays legal.
 * Off also lets the input's memory go: the node keeps only its shape,
 * strides, dtype, requires_grad and where its gradient goes (a leaf that
 * needs a gradient stays whole), so the backward must not read its data.
 * It cannot be turned on again once the values are gone: that is refused
 * (an error is recorded, the bit stays off). */
void cg_node_set_reads(cg_node *n, int i, bool reads);
/* Whether input i of n needs a gradient. */
bool cg_node_needs_grad(const cg_node *n, int i);
/* Save a tensor on the node (retained). Returns slot index or -1. */
int cg_node_save(cg_node *n, cg_tensor *t);
/* A header aliasing t's storage with no autograd fields: for saving an
 * op's own output on its node without a reference cycle. */
cg_tensor *cg_alias(const cg_tensor *t);
/* Adding into the gradient an input already has, from inside n's backward
 * (one pass over memory fewer than returning a new tensor that the engine
 * adds): the gradient that earlier backwards gave input i, when the engine
 * can hand it over, else NULL (then return a new tensor as usual). It is
 * offered while n's backward runs, when it is contiguous, has the input's
 * shape and dtype, nothing else holds it or its storage, no other input of
 * n is the same tensor, and no cg_set_backward_hook is set (the hook sees
 * each backward's own gradients). A leaf's .grad is offered too (a tied
 * embedding's, or the last micro-batch's), with the leaf's lock held until
 * the backward returns (threads that share the leaf wait), one leaf a
 * backward: ask for the leaf input once, and run no backward, cg_zero_grad
 * or optimizer step inside (they take leaves' locks too). A
 * backward that takes it adds its gradient into it in place, every element
 * acc + its own value rounded once (cg_k_add_'s bits, so the sums are the
 * ones the engine would make), and sets gin[i] = cg_retain(acc); the
 * engine then adds nothing. */
cg_tensor *cg_node_grad_acc(const cg_node *n, int i);

/* ------------------------------------------------------------ engine */
/* Gradients of every leaf that requires grad, from root (any shape) with
 * upstream gradient grad_root (NULL: ones, i.e. d root/d root; root must
 * then have one element). Returns false with an error on failure.
 *
 * Before computing anything it checks the version counter of every tensor
 * a backward of the graph will read (the inputs each op reads, see
 * CG_OP_TABLE, and every saved tensor): if one was written in place after
 * the op recorded it (a cg_*_ function, cg_fill_, cg_copy_, an optimizer
 * step, clipping, a load, a write through a view sharing its storage, or
 * cg_tensor_modified after a raw write), the gradient would be wrong, so
 * backward refuses with one line naming the op and the tensor, e.g.
 *   backward: input 1 of 'mul' (a leaf [4, 3]) was modified in place after
 *   it was saved (version 3, saved at 2)
 * and every .grad stays exactly as it was. So is a graph that reaches a
 * part an earlier backward without retain_graph freed (two losses sharing
 * a trunk, each backwarded once): one line naming the freed node and the
 * node that reaches it, and every .grad as it was. */
bool cg_backward(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph);

/* Gradients of gradients (torch.autograd.grad and create_graph).
 *
 * cg_autograd_grad(n_out, outputs, grad_outputs, n_in, inputs, &opts,
 * grads) is torch.autograd.grad: the gradient of the outputs (each with
 * its grad_outputs[k], NULL for ones: then it must have one element; the
 * array itself may be NULL) with respect to each of the inputs, into
 * grads[i] (new references). No .grad is touched and no hook runs. An
 * input may be any tensor of the graph that requires grad, a leaf or
 * not; only the part of the graph between the outputs and the inputs is
 * computed (a weight's gradient is not, when only the input's is asked
 * for). An input the outputs do not depend on is refused (PyTorch's
 * "appears to not have been used in the graph"), or with allow_unused
 * gets NULL.
 *
 * With create_graph the gradients are computed by differentiable ops, so
 * they have a graph of their own: a gradient penalty, a Hessian-vector
 * product or a meta-learning step differentiates them again. The graph
 * is then always kept (retain_graph is implied: the new graph reads the
 * old). Every op has a backward that can be differentiated but those
 * this message names: "backward with create_graph: 'conv' has no
 * differentiable backward yet", refused before anything is computed
 * (docs/autograd.md, "Gradients of gradients", lists them). A
 * user-defined op takes part when its backward composes differentiable
 * ops (cg_node_set_backward_differentiable). The gradients are computed
 * in float32 from the values the forward kept, as the first-order ones. */
typedef struct {
    bool retain_graph; /* keep the graph for another backward */
    bool create_graph; /* gradients with a graph of their own (keeps the graph) */
    bool allow_unused; /* an input the outputs do not reach gets NULL, not an error */
} cg_grad_opts;
bool cg_autograd_grad(int n_out, cg_tensor *const *outputs, cg_tensor *const *grad_outputs,
                      int n_in, cg_tensor *const *inputs, const cg_grad_opts *opts,
                      cg_tensor **grads);
/* loss.backward(create_graph=True): cg_backward whose gradients, added
 * into each leaf's .grad, have a graph (opts NULL: cg_backward's
 * defaults). allow_unused has no meaning here. */
bool cg_backward_ex(cg_tensor *root, const cg_tensor *grad_root, const cg_grad_opts *opts);
/* A user-defined op whose backward is written with differentiable ops
 * (cg_add, cg_mul, ...) rather than raw kernels: a backward with
 * create_graph runs it with grad mode on, so its gradients are
 * differentiable too. */
void cg_node_set_backward_differentiable(cg_node *n, bool on);

/* Grad mode: ops record nodes only while it is on (the default). Scopes
 * nest: cg_no_grad_begin() ... cg_no_grad_end(). */
void cg_no_grad_begin(void);
void cg_no_grad_end(void);
bool cg_grad_enabled(void);
/* torch.enable_grad(): grad mode on from cg_enable_grad_begin() to its
 * cg_enable_grad_end(), inside a no-grad scope too (a gradient penalty
 * computed where the caller turned grad mode off); the end puts back what
 * the begin found. Nested up to 64 deep per thread (deeper: refused, one
 * line, grad mode as it was). */
bool cg_enable_grad_begin(void);
void cg_enable_grad_end(void);

/* Mark a leaf as requiring gradient (false: stop). Returns t. A tensor
 * produced by an op cannot be changed, nor can an int or bool tensor be
 * made to require grad (error, returns NULL). */
cg_tensor *cg_requires_grad(cg_tensor *t, bool on);
/* A new tensor sharing t's storage, outside any graph. */
cg_tensor *cg_detach(const cg_tensor *t);
/* Drop t's accumulated gradient (t->grad becomes NULL), under the lock
 * that backwards on other threads take to add into it. */
void cg_zero_grad(cg_tensor *t);
/* t's gradient (borrowed; NULL if none yet). */
const cg_tensor *cg_grad(const cg_tensor *t);
/* Number of nodes reachable from t (for tests and debugging). */
int64_t cg_graph_size(const cg_tensor *t);
/* Debugging and testing: fn (if not NULL) is called after every node's
 * backward on this thread with the node and the input gradients it
 * computed (gin[i] may be NULL; fn may replace them: release the old one).
 * tests/test_gradcheck.c plants errors with it. NULL removes it. */
typedef void (*cg_backward_hook_fn)(void *ctx, cg_node *n, cg_tensor **gin);
void cg_set_backward_hook(cg_backward_hook_fn fn, void *ctx);

/* Gradient-ready hooks (PyTorch's post-accumulate-grad hook): fn(ctx, t)
 * is called during cg_backward as soon as leaf t's .grad is final for this
 * backward, i.e. every node of the graph that passes t a gradient has run
 * (t->grad may be read, and updated in place, from fn; fn must not run a
 * backward itself). Leaves in graphs of recomputed blocks
 * (autograd/checkpoint.h) count as used by the block: their hook runs
 * after the block's recomputed backward. Called at most once per leaf per
 * backward, and only when t has a gradient (NULL: none reached it). A
 * leaf has at most one hook (adding again replaces it); hooks are per
 * thread (set them on the thread that runs backward) and hold no
 * reference: remove t's hook before t is freed. With no hooks set,
 * backward costs nothing more. False + error on a NULL t or fn, or out of
 * memory. */
typedef void (*cg_grad_ready_fn)(void *ctx, cg_tensor *t);
bool cg_grad_ready_hook_add(cg_tensor *t, cg_grad_ready_fn fn, void *ctx);
/* Remove t's hook (no-op when it has none). */
void cg_grad_ready_hook_remove(const cg_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
