/* What a walk of cg_autograd_grad runs (engine.c): the nodes whose
 * backward leads to a target, and their live edges. */
#include <stdint.h>
#include <stdlib.h>

#include "autograd/engine_impl.h"

/* Sorted arrays of pointers, searched by address. */
int cg_ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}
bool cg_ptr_in(const void *const *v, size_t n, const void *p)
{
    return n && bsearch(&p, v, n, sizeof *v, cg_ptr_cmp);
}

/* ------------------------------------------------ the part that runs */
/* cg_autograd_grad computes only what reaches its inputs (its targets),
 * as PyTorch's engine does: a node's backward runs when one of its input
 * edges is live (it leads to a target: a target leaf, or a node that is a
 * target's or runs), and only its live edges need a gradient (in_needs is
 * cleared on the others for the walk, and given back after). */

static int node_pos_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const cg_node_pos *)a)->node,
              y = (uintptr_t)((const cg_node_pos *)b)->node;
    return x < y ? -1 : x > y;
}
static bool pos_of(const cg_walk_plan *p, const cg_node *c, size_t *pos)
{
    cg_node_pos key = {c, 0};
    const cg_node_pos *f = bsearch(&key, p->index, p->n, sizeof key, node_pos_cmp);
    if (f)
        *pos = f->pos;
    return f != NULL;
}
static bool live_edge(const cg_walk_plan *p, const cg_tensor *in)
{
    size_t j;
    if (!in)
        return false;
    if (!in->node)
        return cg_ptr_in(p->tleaf, p->ntleaf, in);
    return !in->node->freed && pos_of(p, in->node, &j) && (p->target[j] || p->run[j]);
}
void cg_plan_free(cg_walk_plan *p)
{
    free(p->index);
    free(p->run);
    free(p->target);
    free(p->needs);
    free(p->nin);
    free((void *)p->tleaf);
    *p = (cg_walk_plan){0};
}
bool cg_plan_make(cg_walk_plan *p, cg_node *const *nodes, size_t count, int nt,
                  cg_tensor *const *targets)
{
    *p = (cg_walk_plan){0};
    size_t total = 0, nleaf = 0;
    for (size_t k = 0; k < count; k++)
        total += (size_t)nodes[k]->n_inputs;
    for (int t = 0; t < nt; t++)
        nleaf += !targets[t]->node;
    p->n = count;
    p->index = malloc((count ? count : 1) * sizeof *p->index);
    p->run = calloc(count + 1, sizeof *p->run);
    p->target = calloc(count + 1, sizeof *p->target);
    p->needs = malloc(total + 1);
    p->nin = malloc((count + 1) * sizeof *p->nin);
    p->tleaf = malloc((nleaf + 1) * sizeof *p->tleaf);
    const void **tnode = malloc(((size_t)nt + 1) * sizeof *tnode);
    if (!p->index || !p->run || !p->target || !p->needs || !p->nin || !p->tleaf || !tnode) {
        free(tnode);
        cg_plan_free(p);
        return cg_set_error("backward: out of memory planning the walk"), false;
    }
    size_t ntnode = 0;
    for (int t = 0; t < nt; t++) {
        if (targets[t]->node)
            tnode[ntnode++] = targets[t]->node;
        else
            p->tleaf[p->ntleaf++] = targets[t];
    }
    qsort(tnode, ntnode, sizeof *tnode, cg_ptr_cmp);
    qsort((void *)p->tleaf, p->ntleaf, sizeof *p->tleaf, cg_ptr_cmp);
    for (size_t k = 0; k < count; k++)
        p->index[k] = (cg_node_pos){nodes[k], k};
    qsort(p->index, count, sizeof *p->index, node_pos_cmp);
    size_t j = 0;
    for (size_t k = 0; k < count; k++) { /* inputs before their users */
        cg_node *n = nodes[k];
        p->target[k] = cg_ptr_in(tnode, ntnode, n);
        p->nin[k] = n->n_inputs;
        for (int i = 0; i < n->n_inputs; i++) {
            p->needs[j++] = n->in_needs[i];
            p->run[k] |= cg_node_needs_grad(n, i) && live_edge(p, n->inputs[i]);
        }
    }
    free(tnode);
    for (size_t k = 0; k < count; k++) {
        cg_node *n = nodes[k];
        for (int i = 0; p->run[k] && i < n->n_inputs; i++)
            if (n->in_needs[i] && !live_edge(p, n->inputs[i]))
                n->in_needs[i] = false;
    }
    return true;
}
void cg_plan_restore(const cg_walk_plan *p, cg_node *const *nodes, size_t count)
{
    size_t j = 0;
    for (size_t k = 0; p->needs && k < count; k++)
        for (int i = 0; i < p->nin[k]; i++, j++)
            nodes[k]->in_needs[i] = p->needs[j];
}
