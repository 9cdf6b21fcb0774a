/* torch.einsum and what is made of it (autograd/ops.h): trace, diag,
 * outer, kron, tensordot. No node of its own: each is a chain of the
 * graph's ops (diagonal views, permutes, views, sums, products and
 * cg_matmul), as PyTorch 1.13's einsum is made of its ops, so values and
 * gradients are theirs. An op given NULL returns NULL and keeps the first
 * message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"

/* Labels: 'A'-'Z' are 0-25, 'a'-'z' 26-51 (PyTorch's order: an implicit
 * output sorts them so) */
#define N_LABELS 52
#define ELL (-1)

typedef struct {
    int n;                    /* subscripts, an ellipsis one of them (ELL) */
    int lab[CG_MAX_DIMS + 2]; /* one past its dims and an ellipsis: refused */
    bool ell;
} subs_t;

typedef struct {
    int nops;
    subs_t in[CG_MAX_DIMS * 4];
    int ell_dims;      /* the most dims an ellipsis covers */
    int out_n;         /* the output's dims */
    int n;             /* every dim of the common layout: output, then summed */
    int pos[N_LABELS]; /* a label's dim in that layout (-1: unused) */
    int ell_pos;       /* where the ellipsis dims start */
    int count[N_LABELS];
} plan_t;

static int label_of(char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : -1;
}
static char char_of(int l) { return (char)(l < 26 ? 'A' + l : 'a' + l - 26); }

static bool bad_char(int at)
{
    cg_set_error("einsum: invalid subscript given at index %d in the equation string, "
                 "subscripts must be in [a-zA-Z]",
                 at);
    return false;
}

/* The ellipsis at eq[i] ("..."); false + error naming who */
static bool ellipsis_at(const char *eq, int i, bool *seen, const char *who, int k)
{
    if (strncmp(eq + i, "...", 3) != 0) {
        cg_set_error("einsum: found '.' for %s %d that is not part of any ellipsis", who, k);
        return false;
    }
    if (*seen) {
        cg_set_error("einsum: found '.' for %s %d for which an ellipsis was already found", who, k);
        return false;
    }
    return *seen = true;
}

/* The inputs' subscripts, up to the arrow (or the end): *end */
static bool parse_inputs(const char *eq, int n, cg_tensor *const *ops, plan_t *pl, int *end)
{
    int k = 0, i = 0;
    subs_t *s = &pl->in[0];
    for (; eq[i] && strncmp(eq + i, "->", 2) != 0; i++) {
        const char c = eq[i];
        if (c == ' ')
            continue;
        if (c == ',') {
            if (++k >= n) {
                cg_set_error("einsum: fewer operands were provided than specified in the "
                             "equation (%d given)",
                             n);
                return false;
            }
            s = &pl->in[k];
            continue;
        }
        int l = label_of(c);
        if (c != '.' && l < 0)
            return bad_char(i);
        if (s->n > ops[k]->ndim + 1) { /* more than its dims and an ellipsis */
            cg_set_error("einsum: more subscripts than the %d dims of operand %d", ops[k]->ndim, k);
            return false;
        }
        if (c == '.') {
            if (!ellipsis_at(eq, i, &s->ell, "operand", k))
                return false;
            i += 2;
        }
        s->lab[s->n++] = c == '.' ? ELL : l;
    }
    if (k + 1 != n) {
        cg_set_error("einsum: more operands were provided (%d) than specified in the equation (%d)",
                     n, k + 1);
        return false;
    }
    *end = i;
    return true;
}

/* Each operand's subscripts against its dims; the labels counted */
static bool check_counts(int n, cg_tensor *const *ops, plan_t *pl)
{
    for (int k = 0; k < n; k++) {
        const subs_t *s = &pl->in[k];
        const int labels = s->n - s->ell;
        if (s->ell ? labels > ops[k]->ndim : labels != ops[k]->ndim) {
            cg_set_error("einsum: the number of subscripts in the equation (%d) %s the number of "
                         "dimensions (%d) for operand %d%s",
                         labels, s->ell ? "is more than" : "does not match", ops[k]->ndim, k,
                         s->ell ? "" : " and no ellipsis was given");
            return false;
        }
        if (s->ell && ops[k]->ndim - labels > pl->ell_dims)
            pl->ell_dims = ops[k]->ndim - labels;
        for (int j = 0; j < s->n; j++)
            if (s->lab[j] != ELL)
                pl->count[s->lab[j]]++;
    }
    return true;
}

/* The output's layout: explicit after the arrow at eq[i], else implicit
 * (the ellipsis, then the labels seen once, in label order); then the
 * summed dims (the ellipsis when the output drops it, the other labels) */
static bool parse_output(const char *eq, int i, plan_t *pl)
{
    bool any_ell = false, out_ell = false;
    for (int k = 0; k < pl->nops; k++)
        any_ell |= pl->in[k].ell;
    for (int l = 0; l < N_LABELS; l++)
        pl->pos[l] = -1;
    int n = 0;
    if (eq[i]) { /* "->" */
        for (i += 2; eq[i]; i++) {
            const char c = eq[i];
            const int l = label_of(c);
            if (c == ' ')
                continue;
            if (c == '.') {
                if (!ellipsis_at(eq, i, &out_ell, "output", 0))
                    return false;
                pl->ell_pos = n;
                n += pl->ell_dims;
                i += 2;
                continue;
            }
            if (l < 0)
                return bad_char(i);
            if (!pl->count[l]) {
                cg_set_error("einsum: output subscript %c does not appear in the equation for any "
                             "input operand",
                             c);
                return false;
            }
            if (pl->pos[l] >= 0) {
                cg_set_error("einsum: output subscript %c appears more than once in the output", c);
                return false;
            }
            pl->pos[l] = n++;
        }
    } else {
        out_ell = any_ell;
        pl->ell_pos = 0;
        n = any_ell ? pl->ell_dims : 0;
        for (int l = 0; l < N_LABELS; l++)
            if (pl->count[l] == 1)
                pl->pos[l] = n++;
    }
    pl->out_n = n;
    if (!out_ell) {
        pl->ell_pos = n;
        n += pl->ell_dims;
    }
    for (int l = 0; l < N_LABELS; l++)
        if (pl->count[l] && pl->pos[l] < 0)
            pl->pos[l] = n++;
    if (n > CG_MAX_DIMS) {
        cg_set_error("einsum: the equation has %d distinct dims, more than the %d a tensor takes",
                     n, CG_MAX_DIMS);
        return false;
    }
    pl->n = n;
    return true;
}

/* Dim d of operand k's place in the layout */
static int place(const plan_t *pl, int k, int ndim, int d)
{
    const subs_t *s = &pl->in[k];
    const int ell_here = ndim - (s->n - s->ell); /* the dims its ellipsis covers */
    int j = 0, at = 0;
    for (; j < s->n; j++) {
        const int w = s->lab[j] == ELL ? ell_here : 1;
        if (d < at + w)
            break;
        at += w;
    }
    if (s->lab[j] != ELL)
        return pl->pos[s->lab[j]];
    return pl->ell_pos + pl->ell_dims - ell_here + (d - at); /* aligned right */
}

/* Sizes: a label repeated in an operand of one size; across operands each
 * dim of the layout of one size or 1 (broadcast); into size[] */
static bool check_sizes(const plan_t *pl, cg_tensor *const *ops, int64_t *size)
{
    for (int q = 0; q < pl->n; q++)
        size[q] = 1;
    for (int k = 0; k < pl->nops; k++) {
        int64_t mine[CG_MAX_DIMS];
        for (int q = 0; q < pl->n; q++)
            mine[q] = -1;
        for (int d = 0; d < ops[k]->ndim; d++) {
            const int q = place(pl, k, ops[k]->ndim, d);
            const int64_t z = ops[k]->shape[d];
            char c = '?';
            for (int l = 0; l < N_LABELS; l++)
                if (pl->pos[l] == q)
                    c = char_of(l);
            if (mine[q] >= 0 && mine[q] != z) {
                cg_set_error("einsum: subscript %c is repeated for operand %d but the sizes don't "
                             "match, %lld != %lld",
                             c, k, (long long)mine[q], (long long)z);
                return false;
            }
            mine[q] = z;
            if (z != 1 && size[q] != 1 && size[q] != z) {
                if (q >= pl->ell_pos && q < pl->ell_pos + pl->ell_dims)
                    cg_set_error("einsum: the ellipsis dims of operand %d do not broadcast with "
                                 "the others' (size %lld against %lld)",
                                 k, (long long)z, (long long)size[q]);
                else
                    cg_set_error("einsum: subscript %c has size %lld for operand %d which does "
                                 "not broadcast with previously seen size %lld",
                                 c, (long long)z, k, (long long)size[q]);
                return false;
            }
            if (z != 1)
                size[q] = z;
        }
    }
    return true;
}

/* t released, next returned: a chain's step */
static cg_tensor *then(cg_tensor *t, cg_tensor *next)
{
    cg_release(t);
    return next;
}

/* Operand k in the layout: its repeated labels' diagonals taken, its dims
 * permuted into the layout's order, 1 where it has none */
static cg_tensor *aligned(const plan_t *pl, int k, cg_tensor *x)
{
    int tgt[CG_MAX_DIMS], nd = x->ndim;
    for (int d = 0; d < nd; d++)
        tgt[d] = place(pl, k, nd, d);
    cg_tensor *t = cg_retain(x);
    for (int d = 0; d < nd && t; d++)
        for (int e = d + 1; e < nd && t; e++)
            if (tgt[d] == tgt[e]) {
                t = then(t, cg_diagonal(t, 0, d, e)); /* d and e go, the diagonal last */
                const int v = tgt[d];
                int m = 0;
                for (int q = 0; q < nd; q++)
                    if (q != d && q != e)
                        tgt[m++] = tgt[q];
                tgt[m++] = v;
                nd = m;
                d = -1; /* again from the start */
                break;
            }
    int perm[CG_MAX_DIMS];
    bool moved = false;
    for (int q = 0; q < nd; q++) {
        perm[q] = q;
        for (int j = q; j > 0 && tgt[perm[j - 1]] > tgt[perm[j]]; j--) {
            const int s = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = s;
            moved = true;
        }
    }
    if (moved && t)
        t = then(t, cg_permute(t, perm));
    int64_t shape[CG_MAX_DIMS];
    for (int q = 0; q < pl->n; q++)
        shape[q] = 1;
    for (int q = 0; q < nd && t; q++)
        shape[tgt[perm[q]]] = t->shape[q];
    return t && nd != pl->n ? then(t, cg_view(t, pl->n, shape)) : t;
}

/* a permuted by perm, then reshaped to shape (nd dims); a released */
static cg_tensor *permute_reshape(cg_tensor *a, const int *perm, int nd, const int64_t *shape)
{
    cg_tensor *p = a ? cg_permute(a, perm) : NULL, *out = p ? cg_reshape(p, nd, shape) : NULL;
    cg_release_all(2, a, p);
    return out;
}

/* PyTorch's sumproduct_pair: l and r of one number of dims, summed over
 * the dims sum[] marks (dropped) and multiplied; one batched cg_matmul of
 * [batch, l's own, summed] @ [batch, summed, r's own], then its dims put
 * back in order. l and r are released. */
static cg_tensor *sumproduct(cg_tensor *l, cg_tensor *r, const bool *sum)
{
    const int nd = l && r ? l->ndim : 0;
    int lp[CG_MAX_DIMS], rp[CG_MAX_DIMS], kept[CG_MAX_DIMS], nk = 0;
    int both[CG_MAX_DIMS], lo[CG_MAX_DIMS], ro[CG_MAX_DIMS], sd[CG_MAX_DIMS];
    int nb = 0, nl = 0, nr = 0, ns = 0;
    int64_t bsz = 1, lsz = 1, rsz = 1, ssz = 1, dsz[CG_MAX_DIMS];
    for (int i = 0; i < nd && l && r; i++) {
        const bool sl = l->shape[i] > 1, sr = r->shape[i] > 1;
        dsz[i] = sl ? l->shape[i] : r->shape[i];
        if (sum[i]) {
            sd[ns++] = i;
            if (sl && sr)
                ssz *= l->shape[i];
            else if (sl)
                l = then(l, cg_sum(l, 1, &i, true));
            else if (sr)
                r = then(r, cg_sum(r, 1, &i, true));
        } else if (sl && sr) {
            both[nb++] = i;
            bsz *= dsz[i];
        } else if (sl) {
            lo[nl++] = i;
            lsz *= dsz[i];
        } else {
            ro[nr++] = i;
            rsz *= dsz[i];
        }
    }
    if (!l || !r) {
        cg_release_all(2, l, r);
        return NULL;
    }
    /* l: [both, lo, summed, ro], r: [both, summed, ro, lo]; o: [both, lo, ro] */
    const int *lparts[4] = {both, lo, sd, ro}, *rparts[4] = {both, sd, ro, lo};
    const int lnum[4] = {nb, nl, ns, nr}, rnum[4] = {nb, ns, nr, nl};
    for (int part = 0, a = 0, b = 0; part < 4; part++) {
        for (int j = 0; j < lnum[part]; j++)
            lp[a++] = lparts[part][j];
        for (int j = 0; j < rnum[part]; j++)
            rp[b++] = rparts[part][j];
    }
    l = permute_reshape(l, lp, 3, (int64_t[]){bsz, lsz, ssz});
    r = permute_reshape(r, rp, 3, (int64_t[]){bsz, ssz, rsz});
    cg_tensor *o = l && r ? cg_matmul(l, r) : NULL;
    cg_release_all(2, l, r);
    int64_t shape[CG_MAX_DIMS];
    const int *oparts[3] = {both, lo, ro}, onum[3] = {nb, nl, nr};
    for (int part = 0; part < 3; part++)
        for (int j = 0; j < onum[part]; j++)
            kept[nk++] = oparts[part][j];
    for (int j = 0; j < nk; j++)
        shape[j] = dsz[kept[j]];
    int back[CG_MAX_DIMS], m = 0; /* the kept dims in their order */
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nk; j++)
            if (kept[j] == i)
                back[m++] = j;
    cg_tensor *v = o ? cg_view(o, nk, shape) : NULL;
    cg_release(o);
    return v ? then(v, cg_permute(v, back)) : NULL;
}

/* Dim q of t (one of its n dims, listed in at[]) summed away (keep
 * false) or squeezed */
static cg_tensor *drop(cg_tensor *t, int q, bool summed, int *at, int *n)
{
    cg_tensor *out = t ? summed ? cg_sum(t, 1, &q, false) : cg_squeeze(t, q) : NULL;
    cg_release(t);
    if (at) {
        memmove(at + q, at + q + 1, sizeof(int) * (size_t)(*n - q - 1));
        (*n)--;
    }
    return out;
}

/* The contraction, left to right as PyTorch 1.13's: a summed dim goes with
 * the last operand where its size is not 1 (last[]): summed out of the
 * running result before, squeezed from the operands after; ops released */
static cg_tensor *contract(const plan_t *pl, cg_tensor **ops)
{
    int last[CG_MAX_DIMS] = {0}, at[CG_MAX_DIMS], n = pl->n;
    for (int k = 0; k < pl->nops; k++)
        for (int q = 0; q < pl->n; q++)
            if (ops[k] && ops[k]->shape[q] != 1)
                last[q] = k;
    for (int q = 0; q < n; q++)
        at[q] = q;
    cg_tensor *res = ops[0];
    ops[0] = NULL;
    for (int q = pl->out_n; q < n && res;)
        if (last[at[q]] == 0)
            res = drop(res, q, res->shape[q] != 1, at, &n);
        else
            q++;
    for (int k = 1; k < pl->nops && res; k++) {
        cg_tensor *o = ops[k];
        ops[k] = NULL;
        for (int q = pl->n - 1; q >= pl->out_n && o; q--) /* the dims res has summed */
            if (last[q] < k)
                o = drop(o, q, false, NULL, NULL);
        bool sum[CG_MAX_DIMS] = {false}, any = false;
        int keep_at[CG_MAX_DIMS], nk = 0;
        for (int q = 0; q < n && o && res;) {
            if (q < pl->out_n || last[at[q]] != k) {
                keep_at[nk] = at[q];
                sum[nk++] = false;
                q++;
            } else if (res->shape[q] == 1) {
                o = drop(o, q, true, NULL, NULL);
                res = drop(res, q, false, at, &n);
            } else if (o->shape[q] == 1) {
                res = drop(res, q, true, NULL, NULL);
                o = drop(o, q, false, at, &n);
            } else {
                keep_at[nk] = at[q];
                sum[nk++] = any = true;
                q++;
            }
        }
        if (!any) {
            cg_tensor *p = o && res ? cg_mul(res, o) : NULL;
            cg_release_all(2, res, o);
            res = p;
            continue;
        }
        res = sumproduct(res, o, sum);
        n = 0;
        for (int j = 0; j < nk; j++)
            if (!sum[j])
                at[n++] = keep_at[j];
    }
    for (int k = 0; k < pl->nops; k++)
        cg_release(ops[k]); /* left by a failure */
    return res;
}

cg_tensor *cg_einsum(const char *equation, int n, cg_tensor *const *operands)
{
    if (!equation || !operands || n < 1) {
        cg_set_error("einsum: expected an equation and at least one operand, got %s and %d "
                     "operands",
                     equation ? "one" : "NULL", n);
        return NULL;
    }
    plan_t *pl = calloc(1, sizeof *pl);
    if (!pl || n > (int)(sizeof pl->in / sizeof pl->in[0])) {
        free(pl);
        cg_set_error(pl ? "einsum: %d operands, more than the %d it takes"
                        : "einsum: out of memory (%d operands of %d)",
                     n, (int)(sizeof pl->in / sizeof pl->in[0]));
        return NULL;
    }
    pl->nops = n;
    for (int k = 0; k < n; k++)
        if (!operands[k]) {
            free(pl);
            cg_error_null_input("einsum");
            return NULL;
        }
    int end = 0;
    int64_t size[CG_MAX_DIMS];
    cg_tensor *res = NULL;
    if (parse_inputs(equation, n, operands, pl, &end) && check_counts(n, operands, pl) &&
        parse_output(equation, end, pl) && check_sizes(pl, operands, size)) {
        for (int k = 0; k < n; k++)
            if (cg_numel(operands[k]) == 0) { /* PyTorch's zeros, no graph */
                const int out_n = pl->out_n;
                free(pl);
                return cg_zeros_dtype(operands[0]->dtype, out_n, size);
            }
        cg_tensor *ops[sizeof pl->in / sizeof pl->in[0]] = {NULL};
        bool ok = true;
        for (int k = 0; k < n && ok; k++)
            ok = (ops[k] = aligned(pl, k, operands[k])) != NULL;
        if (ok)
            res = contract(pl, ops);
        else
            for (int k = 0; k < n; k++)
                cg_release(ops[k]);
    }
    free(pl);
    return res;
}

/* ------------------------------------------------- made of einsum */
cg_tensor *cg_trace(cg_tensor *x)
{
    if (x && x->ndim != 2) {
        char b[96];
        cg_set_error("trace: expected a matrix, got %s", cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    cg_tensor *d = cg_diagonal(x, 0, 0, 1), *out = d ? cg_sum_all(d) : NULL; /* min(n, m) */
    cg_release(d);
    return out;
}

cg_tensor *cg_outer(cg_tensor *a, cg_tensor *b)
{
    if (a && b && (a->ndim != 1 || b->ndim != 1)) {
        char sa[96], sb[96];
        cg_set_error("outer: expected two 1-d tensors, got %s and %s",
                     cg_shape_str(a, sa, sizeof sa), cg_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    return cg_einsum("i,j->ij", 2, (cg_tensor *[]){a, b});
}

cg_tensor *cg_diag(cg_tensor *x, int64_t offset)
{
    if (!x) {
        cg_error_null_input("diag");
        return NULL;
    }
    if (x->ndim == 2)
        return cg_diagonal(x, offset, 0, 1);
    if (x->ndim != 1) {
        char b[96];
        cg_set_error("diag: expected a 1-d or 2-d tensor, got %s", cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    /* x scattered into zeros [n * n] at the flat places of the diagonal */
    const int64_t m = x->shape[0], k = offset < 0 ? -offset : offset, n = m + k;
    cg_tensor *idx = cg_empty_dtype(CG_I64, CG_SHAPE(m));
    for (int64_t i = 0; idx && i < m; i++)
        cg_data_i64(idx)[i] = i * (n + 1) + (offset >= 0 ? k : k * n);
    cg_tensor *z = idx ? cg_zeros_dtype(x->dtype, CG_SHAPE(n * n)) : NULL;
    cg_tensor *flat = z ? cg_scatter_add(z, 0, idx, x) : NULL;
    cg_tensor *out = flat ? cg_view(flat, 2, (int64_t[]){n, n}) : NULL;
    cg_release_all(3, idx, z, flat);
    return out;
}

cg_tensor *cg_kron(cg_tensor *a, cg_tensor *b)
{
    if (!a || !b) {
        cg_error_null_input("kron");
        return NULL;
    }
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (2 * nd > CG_MAX_DIMS) {
        cg_set_error("kron: %d dims each, more than the %d that cgrad's interleaving takes", nd,
                     CG_MAX_DIMS / 2);
        return NULL;
    }
    /* a [a0, 1, a1, 1, ...] times b [1, b0, 1, b1, ...], then [a0 b0, ...],
     * the dims aligned right (PyTorch's kron) */
    int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS], so[CG_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        const int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        sa[2 * i] = ia >= 0 ? a->shape[ia] : 1;
        sb[2 * i + 1] = ib >= 0 ? b->shape[ib] : 1;
        sa[2 * i + 1] = sb[2 * i] = 1;
        so[i] = sa[2 * i] * sb[2 * i + 1];
    }
    cg_tensor *va = cg_reshape(a, 2 * nd, sa), *vb = va ? cg_reshape(b, 2 * nd, sb) : NULL;
    cg_tensor *p = vb ? cg_mul(va, vb) : NULL, *out = p ? cg_reshape(p, nd, so) : NULL;
    cg_release_all(3, va, vb, p);
    return out;
}

cg_tensor *cg_tensordot(cg_tensor *a, cg_tensor *b, int ndims, const int *dims_a, const int *dims_b)
{
    if (!a || !b) {
        cg_error_null_input("tensordot");
        return NULL;
    }
    if (ndims < 0 || ndims > a->ndim || ndims > b->ndim || (!dims_a != !dims_b)) {
        cg_set_error("tensordot: %d dims to contract of %d and %d (and both dim lists or neither)",
                     ndims, a->ndim, b->ndim);
        return NULL;
    }
    /* a's dims labelled a, b, ...; b's contracted dims take their partner's
     * label, its others the next ones; the output: a's free, then b's */
    int la[CG_MAX_DIMS], lb[CG_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        la[i] = i;
    for (int i = 0; i < b->ndim; i++)
        lb[i] = -1;
    for (int j = 0; j < ndims; j++) {
        const int da = dims_a ? cg_norm_dim("tensordot", dims_a[j], a->ndim) : a->ndim - ndims + j;
        const int db = dims_b ? cg_norm_dim("tensordot", dims_b[j], b->ndim) : j;
        if (da < 0 || db < 0)
            return NULL;
        if (la[da] < 0 || lb[db] >= 0) {
            cg_set_error("tensordot: dim %d of a or %d of b appears twice in the dims", da, db);
            return NULL;
        }
        if (a->shape[da] != b->shape[db] && a->shape[da] != 1 && b->shape[db] != 1) {
            cg_set_error("tensordot: contracted dimensions need to match, but first has size "
                         "%lld in dim %d and second has size %lld in dim %d",
                         (long long)a->shape[da], da, (long long)b->shape[db], db);
            return NULL;
        }
        lb[db] = la[da];
        la[da] = -1 - la[da]; /* contracted: its label is -1 - the label */
    }
    char eq[4 * CG_MAX_DIMS + 8], *w = eq, out[2 * CG_MAX_DIMS + 1], *o = out;
    int next = a->ndim;
    for (int i = 0; i < a->ndim; i++) {
        *w++ = (char)('a' + (la[i] < 0 ? -1 - la[i] : la[i]));
        if (la[i] >= 0)
            *o++ = w[-1];
    }
    *w++ = ',';
    for (int i = 0; i < b->ndim; i++) {
        if (lb[i] < 0) {
            *w++ = (char)('a' + next++);
            *o++ = w[-1];
        } else
            *w++ = (char)('a' + lb[i]);
    }
    *o = '\0';
    snprintf(w, sizeof eq - (size_t)(w - eq), "->%s", out);
    return cg_einsum(eq, 2, (cg_tensor *[]){a, b});
}
