/* PyTorch's nn.Transformer* state-dict names (nn/torch_names.h).
 *
 * Save and load go through a temporary module whose parameters carry
 * PyTorch's names: the model's own tensors where a name maps to one, and a
 * packed [3d, ...] tensor for each in_proj. cg_module_write and
 * cg_module_load_ex then do the rest (strictness, shapes, dtypes, finite
 * values, a failed load changing nothing); a loaded in_proj is copied into
 * its q, k and v projections afterwards. */
#include "nn/torch_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"

/* Local names that change, by the type of the module holding the child.
 * to "" flattens the child (a layer's FeedForward: ff.fc1 is linear1). */
static const struct {
    const char *parent, *from, *to;
} rules[] = {
    {"TransformerEncoderLayer", "ln1", "norm1"},
    {"TransformerEncoderLayer", "ln2", "norm2"},
    {"TransformerEncoderLayer", "ff", ""},
    {"TransformerDecoderLayer", "ln1", "norm1"},
    {"TransformerDecoderLayer", "ln2", "norm2"},
    {"TransformerDecoderLayer", "ln3", "norm3"},
    {"TransformerDecoderLayer", "cross_attn", "multihead_attn"},
    {"TransformerDecoderLayer", "ff", ""},
    {"LMBlock", "ln1", "norm1"},
    {"LMBlock", "ln2", "norm2"},
    {"LMBlock", "attn", "self_attn"},
    {"LMBlock", "ff", ""},
    {"FeedForward", "fc1", "linear1"}, /* only below a layer (flattened) */
    {"FeedForward", "fc2", "linear2"},
    {"FeedForward", "fc3", "linear3"}, /* a gated act's up projection (swiglu, geglu) */
    {"MultiHeadAttention", "o_proj", "out_proj"},
    {"TransformerEncoder", "ln_f", "norm"},
    {"TransformerDecoder", "ln_f", "norm"},
};

static bool is_layer_or_stack(const char *type)
{
    return !strcmp(type, "TransformerEncoderLayer") || !strcmp(type, "TransformerDecoderLayer") ||
           !strcmp(type, "LMBlock") || !strcmp(type, "TransformerEncoder") ||
           !strcmp(type, "TransformerDecoder");
}

/* PyTorch's class of a layer or stack type: an LMBlock's names are a
 * TransformerEncoderLayer's. */
static const char *torch_class(const char *type)
{
    return !strcmp(type, "LMBlock") ? "TransformerEncoderLayer" : type;
}

static const cg_module *child_named(const cg_module *m, const char *name, size_t len)
{
    for (int i = 0; i < m->n_children; i++)
        if (strlen(m->children[i].name) == len && !strncmp(m->children[i].name, name, len))
            return m->children[i].module;
    return NULL;
}

static bool append(char *buf, size_t cap, const char *s, size_t len)
{
    size_t n = strlen(buf);
    if (n + len + 2 > cap)
        return false;
    if (n && len)
        buf[n++] = '.';
    memcpy(buf + n, s, len);
    buf[n + len] = 0;
    return true;
}

/* PyTorch's name of the parameter at cgrad's full name; *part is the q/k/v
 * row block of an in_proj (0, 1, 2) or -1. False + error. */
static bool torch_name(const cg_module *root, const char *name, char *out, size_t cap, int *part)
{
    const cg_module *cur = root;
    bool in_ff = false; /* below a layer's flattened FeedForward */
    *out = 0;
    *part = -1;
    for (const char *s = name;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        const char *to = NULL;
        if (!dot && *part >= 0) { /* weight / bias of q_proj, k_proj, v_proj */
            char packed[32];
            snprintf(packed, sizeof packed, "in_proj_%.*s", (int)len, s);
            return append(out, cap, packed, strlen(packed));
        }
        const cg_module *child = dot ? child_named(cur, s, len) : NULL;
        if (child && !strcmp(child->type, "RMSNorm") && is_layer_or_stack(cur->type)) {
            cg_set_error("torch names: '%.*s' is an RMSNorm: PyTorch's %s has LayerNorm only",
                         (int)(s - name + len), name, torch_class(cur->type));
            return false;
        }
        bool in_mha = child && !strcmp(cur->type, "MultiHeadAttention");
        if (in_mha && ((const cg_mha *)cur)->H_kv != ((const cg_mha *)cur)->H) {
            cg_set_error("torch names: '%s' is in a grouped-query attention (%lld key/value heads "
                         "for %lld): nn.MultiheadAttention has none (save under cgrad's names)",
                         name, (long long)((const cg_mha *)cur)->H_kv,
                         (long long)((const cg_mha *)cur)->H);
            return false;
        }
        if ((in_mha || (child && in_ff)) && strchr(dot + 1, '.')) {
            cg_set_error("torch names: '%s' is below %s projection (an adapter?): %s has no "
                         "equivalent",
                         name, in_mha ? "an attention" : "a feed-forward",
                         in_mha ? "nn.MultiheadAttention" : "a layer's linear1 or linear2");
            return false;
        }
        if (in_mha && len == 6 && !strncmp(s + 1, "_proj", 5) && strchr("qkv", s[0]))
            *part = s[0] == 'q' ? 0 : s[0] == 'k' ? 1 : 2;
        for (size_t r = 0; child && *part < 0 && r < sizeof rules / sizeof *rules; r++)
            if (!strcmp(cur->type, rules[r].parent) && strlen(rules[r].from) == len &&
                !strncmp(s, rules[r].from, len) && (strcmp(cur->type, "FeedForward") || in_ff))
                to = rules[r].to;
        in_ff = child && to && !*to;
        if (*part < 0 && !append(out, cap, to ? to : s, to ? strlen(to) : len)) {
            cg_set_error("torch names: '%s' is too long", name);
            return false;
        }
        if (!dot)
            return true;
        cur = child ? child : cur;
        s = dot + 1;
    }
}

static bool push(cg_torch_names *l, const char *tname, int part, const char *name, cg_tensor *t)
{
    cg_torch_entry *e = NULL;
    for (int i = 0; part > 0 && i < l->n; i++)
        if (!strcmp(l->items[i].torch_name, tname))
            e = &l->items[i];
    if (!e) {
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 16;
            cg_torch_entry *p = realloc(l->items, (size_t)cap * sizeof *p);
            if (!p)
                return false;
            l->items = p;
            l->cap = cap;
        }
        e = &l->items[l->n++];
        memset(e, 0, sizeof *e);
        if (!(e->torch_name = strdup(tname)))
            return false;
        e->n_parts = part < 0 ? 1 : 3;
    }
    int k = part < 0 ? 0 : part;
    e->params[k] = t;
    return (e->names[k] = strdup(name)) != NULL;
}

void cg_torch_names_free(cg_torch_names *l)
{
    for (int i = 0; l && i < l->n; i++) {
        free(l->items[i].torch_name);
        for (int k = 0; k < 3; k++)
            free(l->items[i].names[k]);
    }
    if (l) {
        free(l->items);
        memset(l, 0, sizeof *l);
    }
}

bool cg_torch_names_of(const cg_module *m, cg_torch_names *out)
{
    if (!m || !out) {
        cg_error_null_input("cg_torch_names_of");
        return false;
    }
    cg_param_list pl = {0};
    bool ok = cg_module_params(m, &pl);
    for (int i = 0; ok && i < pl.n; i++) {
        char tname[512];
        int part;
        ok = torch_name(m, pl.items[i].name, tname, sizeof tname, &part);
        if (ok && !push(out, tname, part, pl.items[i].name, pl.items[i].tensor)) {
            cg_set_error("torch names: out of memory");
            ok = false;
        }
    }
    for (int i = 0; ok && i < out->n; i++)
        for (int k = 0; ok && k < out->items[i].n_parts; k++)
            if (!out->items[i].params[k]) {
                cg_set_error("torch names: '%s' lacks its %c projection (shared with another "
                             "module?): it cannot be packed",
                             out->items[i].torch_name, "qkv"[k]);
                ok = false;
            }
    cg_param_list_free(&pl);
    if (!ok)
        cg_torch_names_free(out);
    return ok;
}

/* Add t to root under a dotted name, making plain containers on the way:
 * a parameter, or a persistent buffer. */
static bool add_at(cg_module *root, const char *name, cg_tensor *t, bool buffer)
{
    cg_module *cur = root;
    for (const char *s = name, *dot; (dot = strchr(s, '.')); s = dot + 1) {
        size_t len = (size_t)(dot - s);
        cg_module *c = (cg_module *)child_named(cur, s, len);
        if (!c) {
            char *seg = strndup(s, len);
            if (!seg)
                cg_set_error("torch names: out of memory");
            c = seg ? cg_module_add_child(cur, seg, cg_module_new("TorchNames")) : NULL;
            free(seg);
        }
        if (!(cur = c))
            return false;
    }
    const char *local = strrchr(name, '.') ? strrchr(name, '.') + 1 : name;
    return buffer ? cg_module_add_buffer(cur, local, t, true) != NULL
                  : cg_module_add_param(cur, local, t) != NULL;
}

/* The temporary module of PyTorch's names over l: each in_proj is a new
 * tensor, the concatenation of its q, k and v (what a save writes, and what
 * a non-strict load that misses it copies back). Registering turns
 * requires_grad on: restore_grad puts it back. */
static cg_module *torch_view(const cg_torch_names *l)
{
    cg_module *v = cg_module_new("TorchNames");
    for (int i = 0; v && i < l->n; i++) {
        const cg_torch_entry *e = &l->items[i];
        cg_tensor *t = e->params[0];
        bool ok;
        if (e->n_parts == 1) {
            ok = add_at(v, e->torch_name, t, false);
        } else {
            cg_tensor *p = cg_k_concat(e->params, 3, 0);
            ok = p && add_at(v, e->torch_name, p, false);
            cg_release(p);
        }
        if (!ok) {
            cg_module_free(v);
            v = NULL;
        }
    }
    return v;
}

/* Whether l (torch names of m's parameters) holds t unpacked (n_parts 1). */
static bool unpacked(const cg_torch_names *l, const cg_tensor *t)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i].n_parts == 1 && l->items[i].params[0] == t)
            return true;
    return false;
}

/* An alias name of an in_proj (an attention shared by two parents): the
 * packed tensor of its first name, registered in v under that name too, so
 * that cg_module_load_ex loads it once and compares the copies. t is part
 * `part` of it; every part of one name must come from one packed tensor. */
static bool add_packed_alias(const cg_torch_names *l, cg_module *v, const char *tname, int part,
                             const cg_tensor *t)
{
    const cg_tensor *p = NULL;
    for (int i = 0; !p && i < l->n; i++)
        if (l->items[i].n_parts == 3 && l->items[i].params[part] == t)
            p = cg_module_get_param(v, l->items[i].torch_name);
    const cg_tensor *have = cg_module_get_param(v, tname);
    if (p && have == p)
        return true;
    if (!p || have) {
        cg_set_error("torch names: '%s' packs q, k and v projections of different attentions "
                     "(shared separately?): it cannot be packed",
                     tname);
        return false;
    }
    return add_at(v, tname, (cg_tensor *)p, false);
}

/* m's persistent buffers into v under PyTorch's names (the same tensors:
 * a load writes them in place). With aliases (a load), also every further
 * name of a tied or shared tensor, as the same tensor, since PyTorch's
 * state_dict lists them all (cg_module_load_ex then takes any of them); a
 * further name of a tensor packed into an in_proj is the packed tensor's
 * (add_packed_alias). */
static bool add_buffers(const cg_module *m, const cg_torch_names *l, cg_module *v, bool aliases)
{
    cg_param_list a = {0};
    bool ok = cg_module_state_dict_all(m, &a);
    for (int i = 0; ok && i < a.n; i++) {
        char tname[512];
        int part;
        const cg_param *e = &a.items[i];
        bool again = false;
        for (int k = 0; !again && k < i; k++)
            again = a.items[k].tensor == e->tensor;
        if (again ? !aliases : !e->is_buffer)
            continue; /* a parameter's first name: torch_view's */
        ok = torch_name(m, e->name, tname, sizeof tname, &part);
        if (ok && part >= 0 && e->is_buffer) {
            cg_set_error("torch names: buffer '%s' sits in a q/k/v projection, which PyTorch "
                         "packs: it has no name there",
                         e->name);
            ok = false;
        }
        if (ok && part >= 0 && !e->is_buffer)
            ok = add_packed_alias(l, v, tname, part, e->tensor);
        else if (ok && (e->is_buffer || unpacked(l, e->tensor)))
            ok = add_at(v, tname, e->tensor, e->is_buffer);
    }
    cg_param_list_free(&a);
    return ok;
}

static bool *save_grad_flags(const cg_torch_names *l)
{
    bool *g = calloc((size_t)(l->n ? l->n : 1), sizeof *g);
    for (int i = 0; g && i < l->n; i++)
        g[i] = l->items[i].params[0]->requires_grad;
    if (!g)
        cg_set_error("torch names: out of memory");
    return g;
}

static void restore_grad(const cg_torch_names *l, const bool *g)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i].n_parts == 1)
            cg_requires_grad(l->items[i].params[0], g[i]);
}

bool cg_torch_save(const cg_module *m, const char *path)
{
    cg_st_writer *w = cg_st_writer_new_deferred(); /* saved at once: read then */
    bool ok = w && cg_torch_write(m, w, NULL) && cg_st_set_metadata(w, "format", "pt") &&
              cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    return ok;
}

/* Copy each loaded in_proj of v into its q, k and v projections. */
static bool unpack(const cg_torch_names *l, cg_module *v)
{
    bool ok = true;
    cg_no_grad_begin();
    for (int i = 0; ok && i < l->n; i++) {
        const cg_torch_entry *e = &l->items[i];
        if (e->n_parts == 1)
            continue;
        cg_tensor *p = cg_module_get_param(v, e->torch_name);
        int64_t row = 0;
        for (int k = 0; ok && k < 3; row += e->params[k]->shape[0], k++) {
            cg_tensor *s = cg_narrow(p, 0, row, e->params[k]->shape[0]);
            ok = s && cg_copy_(e->params[k], s);
            cg_release(s);
        }
    }
    cg_no_grad_end();
    return ok;
}

/* Write m's parameters to w (f NULL), or load f into them, through the
 * temporary module of PyTorch's names. */
static bool through_view(const cg_module *m, cg_st_writer *w, const char *prefix,
                         const cg_st_file *f, const cg_load_options *opt)
{
    cg_torch_names l = {0};
    if (!cg_torch_names_of(m, &l))
        return false;
    bool *g = save_grad_flags(&l);
    cg_module *v = g ? torch_view(&l) : NULL;
    bool ok = v && add_buffers(m, &l, v, f != NULL) &&
              (f ? cg_module_load_ex(v, f, opt) && unpack(&l, v) : cg_module_write(v, w, prefix));
    cg_module_free(v);
    if (g)
        restore_grad(&l, g);
    free(g);
    cg_torch_names_free(&l);
    return ok;
}

bool cg_torch_write(const cg_module *m, cg_st_writer *w, const char *prefix)
{
    if (!w) {
        cg_error_null_input("cg_torch_write");
        return false;
    }
    return through_view(m, w, prefix, NULL, NULL);
}

bool cg_torch_load(cg_module *m, const cg_st_file *f, const cg_load_options *opt)
{
    if (opt && opt->keys)
        memset(opt->keys, 0, sizeof *opt->keys);
    if (!f) {
        cg_error_null_input("cg_torch_load");
        return false;
    }
    return through_view(m, NULL, NULL, f, opt);
}

bool cg_torch_load_file(cg_module *m, const char *path)
{
    cg_st_file *f = path ? cg_st_open(path) : NULL;
    if (!path)
        cg_error_null_input("cg_torch_load_file");
    bool ok = f && cg_torch_load(m, f, NULL);
    cg_st_close(f);
    return ok;
}

bool cg_tf_config_from_torch(const cg_torch_layer_args *a, cg_tf_config *out)
{
    if (!a || !out) {
        cg_error_null_input("cg_tf_config_from_torch");
        return false;
    }
    const char *act = a->activation ? a->activation : "relu";
    double eps = a->layer_norm_eps ? a->layer_norm_eps : 1e-5;
    if (eps != 1e-5) {
        cg_set_error("torch layer: layer_norm_eps=%g has no equivalent (cgrad's norms use 1e-5)",
                     eps);
        return false;
    }
    if (strcmp(act, "relu") && strcmp(act, "gelu")) {
        cg_set_error("torch layer: activation '%s' has no equivalent (\"relu\" or \"gelu\")", act);
        return false;
    }
    cg_tf_config c = {.d = a->d_model,
                      .H = a->nhead,
                      .d_ff = a->dim_feedforward,
                      .norm = CG_NORM_LAYERNORM,
                      .act = strcmp(act, "relu") ? CG_ACT_GELU_ERF : CG_ACT_RELU,
                      .norm_first = a->norm_first,
                      .dropout = a->dropout,
                      .no_bias = a->no_bias};
    if (!cg_tf_config_check(&c))
        return false;
    *out = c;
    return true;
}
