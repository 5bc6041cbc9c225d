/* The flight recorder's cut of its held row blocks (keepcut.h). */
#include "keepcut.h"

#include "grow.h"
#include "rowlog.h"

#include <gradtrace/error.h>

#include <stdlib.h>
#include <string.h>

int gt__i64v_push(gt__i64v *v, int64_t x)
{
    if (GT_ALLOC_GROW(v->p, v->n + 1, v->cap, 64) != 0)
        return -1;
    v->p[v->n++] = x;
    return 0;
}

/* A NULL column (every id, seq and op is > 0 or at least > INT64_MIN). */
#define NONE INT64_MIN

/* Row flags. */
#define F_DUP  1u /* a later row of a key already held: SQLite's would be refused */
#define F_KB   2u /* an old version bump kept for a save after it */
#define F_KN   4u /* a node, edge, output or saved tensor of a kept node */
#define F_SEEN 8u /* checked against the earlier rows of its key (first_if_kept) */

/* A hash table from up to three int64 to an int64, for one cut: sized
 * from the rows held (tab_size), grown when three quarters full, freed
 * whole; one probe sequence finds a key or where it goes (gt_map's get and
 * put take two, and its growth from 64 slots rehashed every table at every
 * cut: a third of the cut). */
struct slot {
    int64_t k1, k2, k3, v;
};

/* used[i]: slot i holds a key. Only this byte array is zeroed when a table
 * is made (the slots are not: zeroing them was a quarter of the cut). */
struct tab {
    struct slot *s;
    unsigned char *used;
    size_t cap, len; /* cap: a power of two, 0 before the first put */
};

static size_t slot_of(int64_t k1, int64_t k2, int64_t k3, size_t mask)
{
    uint64_t h = (uint64_t)k1 * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)k2 * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)k3 * 0x165667B19E3779F9ull;
    return (size_t)(h ^ h >> 32) & mask;
}

/* The index of key (k1, k2, k3)'s slot, or of the empty one where it
 * would go. */
static size_t tab_find(const struct tab *t, int64_t k1, int64_t k2, int64_t k3)
{
    size_t mask = t->cap - 1;
    for (size_t i = slot_of(k1, k2, k3, mask);; i = (i + 1) & mask) {
        const struct slot *e = &t->s[i];
        if (!t->used[i] || (e->k1 == k1 && e->k2 == k2 && e->k3 == k3))
            return i;
    }
}

/* Make room for n keys without growing. Returns 0 or -1. */
static int tab_size(struct tab *t, size_t n)
{
    size_t cap = 16;
    while (cap * 3 < n * 4 + 4)
        cap *= 2;
    if (n == 0 || cap <= t->cap)
        return 0;
    struct tab g = {malloc(cap * sizeof *g.s), calloc(cap, 1), cap, t->len};
    if (!g.s || !g.used) {
        free(g.s);
        free(g.used);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->used[i]) {
            size_t j = tab_find(&g, t->s[i].k1, t->s[i].k2, t->s[i].k3);
            g.s[j] = t->s[i];
            g.used[j] = 1;
        }
    free(t->s);
    free(t->used);
    *t = g;
    return 0;
}

/* The value of key (k1, k2, k3), or NULL. */
static int64_t *tab_get(const struct tab *t, int64_t k1, int64_t k2, int64_t k3)
{
    if (!t->cap)
        return NULL;
    size_t i = tab_find(t, k1, k2, k3);
    return t->used[i] ? &t->s[i].v : NULL;
}

/* The value of key (k1, k2, k3), put as v if absent (then *added = 1, else
 * 0). NULL when out of memory. */
static int64_t *tab_put(struct tab *t, int64_t k1, int64_t k2, int64_t k3, int64_t v,
                        int *added)
{
    if ((t->len + 1) * 4 > t->cap * 3 && tab_size(t, t->cap ? t->cap : 1) != 0)
        return NULL;
    size_t i = tab_find(t, k1, k2, k3);
    *added = !t->used[i];
    if (!t->used[i]) {
        t->s[i] = (struct slot){k1, k2, k3, v};
        t->used[i] = 1;
        t->len++;
    }
    return &t->s[i].v;
}

/* One held row: its values and null flags in its block, the block's text
 * arena. */
struct row {
    const unsigned char *val, *null;
    const char *text;
    uint8_t kind, flags;
};

/* A group of kept rows of one kind, re-encoded when full. */
struct group {
    int n;
    int64_t val[GT_ROWLOG_GROUP][GT_ROWLOG_MAXCOL];
    unsigned char null[GT_ROWLOG_GROUP][GT_ROWLOG_MAXCOL];
    gt_strbuf text;
};

struct cut {
    int64_t c;
    struct row *rows;
    size_t nrows, cap;         /* cap: the rows held, counted first */
    size_t count[GT_RL_NKIND]; /* rows of each kind */
    int64_t *next;             /* next row of the same adjacency list, -1 at the end */
    /* the first row of each key: tensors, nodes, storages by id; edges by
     * (node, pos); node_outputs by (node, output_nr); op_args by (op, role,
     * pos); names by (seq, tensor, name) */
    struct tab tensor, node, storage, edge, output, arg, name;
    /* heads of the adjacency lists: edges and saved tensors by node */
    struct tab by_node_edge, by_node_saved;
    /* the kept sets, the latest seq of each (tensor, name), the first save
     * at or before C of each version counter, storages named by kept rows,
     * kept saved seqs */
    struct tab kn, kt, ko, namemax, vcsave, sref, ksaved;
    gt__i64v nodes, tensors; /* kn and kt in the order found: the walks */
    gt__i64v bumps;          /* the version bumps' rows */
    /* op_kept's last answer: op, kept or not, ko's size then */
    int64_t memo_op;
    int memo_kept;
    size_t memo_len;
    gt__i64v drop_storages;
    struct group *groups; /* GT_RL_NKIND of them */
    gt_strbuf out;
};

/* Column col of row r, NONE if NULL. */
static inline int64_t get(const struct cut *x, size_t r, int col)
{
    const struct row *w = &x->rows[r];
    if (w->null[col])
        return NONE;
    int64_t val;
    memcpy(&val, w->val + (size_t)col * 8, 8);
    return val;
}

static int has(const struct tab *m, int64_t k1, int64_t k2)
{
    return tab_get(m, k1, k2, 0) != NULL;
}

/* Put key (k1, k2, k3) -> v if absent. Returns 1 if put, 0 if present, -1
 * when out of memory. */
static int put_new(struct tab *m, int64_t k1, int64_t k2, int64_t k3, int64_t v)
{
    int added;
    return tab_put(m, k1, k2, k3, v, &added) ? added : -1;
}

/* Row r is the first of its key in map m (else it is flagged F_DUP).
 * Returns 1, 0 or -1 as put_new. */
static int first_of(struct cut *x, struct tab *m, size_t r, int64_t k1, int64_t k2,
                    int64_t k3)
{
    int rc = put_new(m, k1, k2, k3, (int64_t)r);
    if (rc == 0)
        x->rows[r].flags |= F_DUP;
    return rc;
}

/* Prepend row r to the list of key k in m. Returns 0 or -1. */
static int link_row(struct cut *x, struct tab *m, int64_t k, size_t r)
{
    int added;
    int64_t *head = tab_put(m, k, 0, 0, (int64_t)r, &added);
    if (!head)
        return -1;
    x->next[r] = added ? -1 : *head;
    *head = (int64_t)r;
    return 0;
}

/* The first row of key k in m, or -1. */
static int64_t row_of(const struct tab *m, int64_t k)
{
    int64_t *v = tab_get(m, k, 0, 0);
    return v ? *v : -1;
}

/* Keep in m the largest (dir 1) or smallest (dir -1) seq of key (k1, k2).
 * Returns 0 or -1. */
static int latest(struct tab *m, int64_t k1, int64_t k2, int64_t seq, int dir)
{
    int added;
    int64_t *v = tab_put(m, k1, k2, 0, seq, &added);
    if (v && (dir > 0 ? *v < seq : *v > seq))
        *v = seq;
    return v ? 0 : -1;
}

/* Add id to a kept set (and its walk list). Returns 0 or -1. */
static int keep_id(struct tab *set, gt__i64v *walk, int64_t id)
{
    int rc = put_new(set, id, 0, 0, 1);
    return rc < 0 || (rc == 1 && walk && gt__i64v_push(walk, id) != 0) ? -1 : 0;
}

/* Read the blocks into x->rows. Returns 0, GT_ENOMEM or GT_ECORRUPT. */
static int read_rows(struct cut *x, const gt_strbuf *held)
{
    gt_rowlog_block b;
    int got = 0;
    /* count the rows first: one array of their size (growing it by
     * doubling copied it over and over, a twentieth of the cut) */
    for (size_t at = 0; at < held->len &&
                        (got = gt_rowlog_block_at(held->p + at, held->len - at, &b)) == 1;
         at += b.size) {
        x->count[b.kind] += (size_t)b.n;
        x->cap += (size_t)b.n;
    }
    if (got < 0)
        return GT_ECORRUPT;
    x->rows = malloc((x->cap ? x->cap : 1) * sizeof *x->rows);
    x->next = malloc((x->cap ? x->cap : 1) * sizeof *x->next);
    if (!x->rows || !x->next)
        return GT_ENOMEM;
    for (size_t at = 0; at < held->len; at += b.size) {
        gt_rowlog_block_at(held->p + at, held->len - at, &b);
        for (int i = 0; i < b.n; i++)
            x->rows[x->nrows++] = (struct row){b.val + (size_t)i * (size_t)b.ncol * 8,
                                               b.null + (size_t)i * (size_t)b.ncol,
                                               b.text, (uint8_t)b.kind, 0};
    }
    return 0;
}

/* Size the tables for the rows read (the kept sets for the rows that may
 * seed them; they grow if more come). Returns 0 or -1. */
static int size_tabs(struct cut *x, const gt__cut_in *in)
{
    const size_t *n = x->count;
    size_t tensors = n[GT_RL_TENSOR] + n[GT_RL_TENSOR_AGAIN];
    struct {
        struct tab *t;
        size_t n;
    } want[] = {
        {&x->tensor, tensors},
        {&x->node, n[GT_RL_NODE]},
        {&x->storage, n[GT_RL_STORAGE]},
        {&x->edge, n[GT_RL_EDGE]},
        {&x->output, n[GT_RL_NODE_OUTPUT]},
        {&x->arg, n[GT_RL_OP_ARG]},
        {&x->name, n[GT_RL_NAME]},
        {&x->namemax, n[GT_RL_NAME]},
        {&x->by_node_edge, n[GT_RL_EDGE]},
        {&x->by_node_saved, n[GT_RL_SAVED]},
        {&x->kn, n[GT_RL_NODE] + in->root_nodes.n},
        {&x->kt, tensors + in->tensors.n},
        {&x->ko, n[GT_RL_NODE] + n[GT_RL_BUMP]},
        {&x->sref, tensors + in->swap_storages.n},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (tab_size(want[i].t, want[i].n) != 0)
            return -1;
    return 0;
}

/* Flag duplicates, index the rows by key and build the adjacency lists;
 * keep the nodes recorded, run or saved after C (keep_nodes goes on from
 * them) and list the bumps. Returns 0 or -1. */
static int index_rows(struct cut *x)
{
    for (size_t r = 0; r < x->nrows; r++) {
        int rc = 0;
        x->next[r] = -1;
        switch (x->rows[r].kind) {
        case GT_RL_TENSOR:
        case GT_RL_TENSOR_AGAIN:
            rc = first_of(x, &x->tensor, r, get(x, r, 0), 0, 0);
            break;
        case GT_RL_NODE: /* recorded after C: kept */
            rc = first_of(x, &x->node, r, get(x, r, 0), 0, 0);
            if (rc == 1 && get(x, r, 1) > x->c)
                rc = keep_id(&x->kn, &x->nodes, get(x, r, 0));
            break;
        case GT_RL_NODE_EXEC: /* its node, run after C: kept */
            if (get(x, r, 0) > x->c)
                rc = keep_id(&x->kn, &x->nodes, get(x, r, 2));
            break;
        case GT_RL_BUMP:
            rc = gt__i64v_push(&x->bumps, (int64_t)r);
            break;
        case GT_RL_STORAGE:
            rc = first_of(x, &x->storage, r, get(x, r, 0), 0, 0);
            break;
        case GT_RL_EDGE:
            rc = first_of(x, &x->edge, r, get(x, r, 0), get(x, r, 1), 0);
            if (rc == 1)
                rc = link_row(x, &x->by_node_edge, get(x, r, 0), r);
            break;
        case GT_RL_SAVED: /* its node, saving after C: kept */
            rc = link_row(x, &x->by_node_saved, get(x, r, 1), r);
            if (rc == 0 && get(x, r, 0) > x->c)
                rc = keep_id(&x->kn, &x->nodes, get(x, r, 1));
            break;
        case GT_RL_NAME: /* a duplicate has the same seq: no matter here */
            rc = latest(&x->namemax, get(x, r, 1), get(x, r, 2), get(x, r, 0), 1);
            break;
        default:
            break;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The kept nodes: those index_rows kept (recorded, run or saved after C),
 * the kept calls' root nodes, then every node their edges reach. Returns 0
 * or -1. */
static int keep_nodes(struct cut *x, const gt__cut_in *in)
{
    for (size_t i = 0; i < in->root_nodes.n; i++)
        if (keep_id(&x->kn, &x->nodes, in->root_nodes.p[i]) != 0)
            return -1;
    for (size_t i = 0; i < x->nodes.n; i++)
        for (int64_t e = row_of(&x->by_node_edge, x->nodes.p[i]); e >= 0;
             e = x->next[e]) {
            int64_t next = get(x, (size_t)e, 2);
            if (next != NONE && keep_id(&x->kn, &x->nodes, next) != 0)
                return -1;
        }
    return 0;
}

/* Column col of the first row of key id in m (tensors, nodes), or NONE. */
static int64_t col_of(const struct cut *x, const struct tab *m, int64_t id, int col)
{
    int64_t r = row_of(m, id);
    return r < 0 ? NONE : get(x, (size_t)r, col);
}

/* The old bumps kept for the saves before them, and the old ops of kept
 * nodes and bumps. Returns 0 or -1. */
static int keep_old_bumps(struct cut *x)
{
    /* the earliest save at or before C by a kept node, per version counter:
     * a bump of that counter after it and at or before C is kept */
    for (size_t i = 0; i < x->nodes.n; i++)
        for (int64_t s = row_of(&x->by_node_saved, x->nodes.p[i]); s >= 0;
             s = x->next[s]) {
            int64_t seq = get(x, (size_t)s, 0), t = get(x, (size_t)s, 3);
            int64_t vc = t == NONE || seq > x->c ? NONE : col_of(x, &x->tensor, t, 12);
            if (vc == NONE)
                continue;
            if (latest(&x->vcsave, vc, 0, seq, -1) != 0)
                return -1;
        }
    for (size_t b = 0; b < x->bumps.n; b++) {
        size_t r = (size_t)x->bumps.p[b];
        int64_t seq = get(x, r, 0),
                vc = seq > x->c ? NONE : col_of(x, &x->tensor, get(x, r, 2), 12);
        int64_t *m = vc == NONE ? NULL : tab_get(&x->vcsave, vc, 0, 0);
        if (!m || seq <= *m)
            continue;
        x->rows[r].flags |= F_KB;
        int64_t op = get(x, r, 1);
        if (op != NONE && keep_id(&x->ko, NULL, op) != 0)
            return -1;
    }
    for (size_t i = 0; i < x->nodes.n; i++) {
        int64_t op = col_of(x, &x->node, x->nodes.p[i], 3);
        if (op != NONE && op <= x->c && keep_id(&x->ko, NULL, op) != 0)
            return -1;
    }
    return 0;
}

/* Flag row r F_KN if it is a node's row (node, edge, output, saved) of a
 * kept node: the kept nodes are all known, the flag saves kept() a probe. */
static void mark_node_row(struct cut *x, size_t r)
{
    struct row *w = &x->rows[r];
    int col = w->kind == GT_RL_SAVED ? 1 : 0;
    if ((w->kind == GT_RL_NODE || w->kind == GT_RL_EDGE || w->kind == GT_RL_NODE_OUTPUT ||
         w->kind == GT_RL_SAVED) &&
        has(&x->kn, get(x, r, col), 0))
        w->flags |= F_KN;
}

/* Whether op is after C or kept (in ko). An op's args are written
 * together: the answer for the last op is kept until ko grows (it only
 * grows), saving the probe of most op_args. */
static int op_kept(struct cut *x, int64_t op)
{
    if (op > x->c)
        return 1;
    if (x->memo_len != x->ko.len + 1 || x->memo_op != op) {
        x->memo_op = op;
        x->memo_kept = has(&x->ko, op, 0);
        x->memo_len = x->ko.len + 1; /* 0: no answer yet */
    }
    return x->memo_kept;
}

/* Rows whose duplicates matter only if they may be kept are checked late,
 * and only those: node outputs of kept nodes, op_args of ops after C or
 * kept, names kept (once kt is final: `final`). The rows of one key share
 * what decides it (node; op; tensor and seq), so the first of those checked
 * is the first of all. */
static inline int check_late(struct cut *x, size_t r, int final)
{
    const struct row *w = &x->rows[r];
    if (w->flags & F_SEEN)
        return 0;
    switch (w->kind) {
    case GT_RL_NODE_OUTPUT:
        return (w->flags & F_KN) != 0;
    case GT_RL_OP_ARG:
        return op_kept(x, get(x, r, 0));
    case GT_RL_NAME: { /* (seq, tensor, name): of a kept tensor, after C or the latest */
        if (!final)
            return 0;
        int64_t seq = get(x, r, 0), t = get(x, r, 1);
        int64_t *m_seq = tab_get(&x->namemax, t, get(x, r, 2), 0);
        return has(&x->kt, t, 0) && (seq > x->c || (m_seq && *m_seq == seq));
    }
    default:
        return 0;
    }
}

/* If check_late says so, check row r against the earlier rows of its key:
 * sets F_SEEN, and F_DUP on a duplicate. Returns 0 or -1. */
static int first_if_kept_(struct cut *x, size_t r, int final)
{
    if (!check_late(x, r, final))
        return 0;
    struct row *w = &x->rows[r];
    int out = w->kind == GT_RL_NODE_OUTPUT;
    struct tab *m = out ? &x->output : w->kind == GT_RL_OP_ARG ? &x->arg : &x->name;
    w->flags |= F_SEEN;
    return first_of(x, m, r, get(x, r, 0), get(x, r, 1), out ? 0 : get(x, r, 2)) < 0 ? -1
                                                                                     : 0;
}

#define LATE_KINDS (1u << GT_RL_NODE_OUTPUT | 1u << GT_RL_OP_ARG | 1u << GT_RL_NAME)

/* first_if_kept_ for the rows it may check (the others, most rows, return
 * here). */
static inline int first_if_kept(struct cut *x, size_t r, int final)
{
    const struct row *w = &x->rows[r];
    if (!(LATE_KINDS >> w->kind & 1) || (w->flags & F_SEEN) ||
        (w->kind == GT_RL_NODE_OUTPUT && !(w->flags & F_KN)) ||
        (w->kind == GT_RL_NAME && !final) ||
        (w->kind == GT_RL_OP_ARG && !op_kept(x, get(x, r, 0))))
        return 0;
    return first_if_kept_(x, r, final);
}

/* The tensor a row names for the kept set, or NONE. */
static int64_t tensor_named(const struct cut *x, size_t r)
{
    const struct row *w = &x->rows[r];
    switch (w->kind) {
    case GT_RL_TENSOR:
    case GT_RL_TENSOR_AGAIN:
        return get(x, r, 1) > x->c ? get(x, r, 0) : NONE;
    case GT_RL_OP_ARG:
        return w->flags & F_SEEN ? get(x, r, 3) : NONE;
    case GT_RL_NODE_OUTPUT:
        return w->flags & F_KN ? get(x, r, 2) : NONE;
    case GT_RL_NODE:
        return w->flags & F_KN ? get(x, r, 6) : NONE;
    case GT_RL_BUMP:
        return get(x, r, 0) > x->c || (w->flags & F_KB) ? get(x, r, 2) : NONE;
    case GT_RL_SAVED:
        return w->flags & F_KN ? get(x, r, 3) : NONE;
    default:
        return NONE;
    }
}

/* The kept tensors, with the bases of views and the version counters they
 * name; then the old ops that made them. Returns 0 or -1. */
static int keep_tensors(struct cut *x, const gt__cut_in *in)
{
    for (size_t r = 0; r < x->nrows; r++) {
        if (x->rows[r].flags & F_DUP)
            continue;
        mark_node_row(x, r);
        if (first_if_kept(x, r, 0) != 0)
            return -1;
        if (x->rows[r].flags & F_DUP)
            continue;
        int64_t t = tensor_named(x, r);
        if (t != NONE && keep_id(&x->kt, &x->tensors, t) != 0)
            return -1;
    }
    for (size_t i = 0; i < in->tensors.n; i++)
        if (keep_id(&x->kt, &x->tensors, in->tensors.p[i]) != 0)
            return -1;
    /* each kept tensor (the list grows as bases and counters join it): its
     * base, its counter, the old op that made it, its storage */
    for (size_t i = 0; i < x->tensors.n; i++) {
        int64_t tr = row_of(&x->tensor, x->tensors.p[i]);
        if (tr < 0)
            continue;
        int64_t alias = get(x, (size_t)tr, 10), vc = get(x, (size_t)tr, 12);
        int64_t by = get(x, (size_t)tr, 9), st = get(x, (size_t)tr, 2);
        if ((alias != NONE && keep_id(&x->kt, &x->tensors, alias) != 0) ||
            (vc != NONE && keep_id(&x->kt, &x->tensors, vc) != 0) ||
            (by != NONE && by <= x->c && keep_id(&x->ko, NULL, by) != 0) ||
            (st != NONE && keep_id(&x->sref, NULL, st) != 0))
            return -1;
    }
    return 0;
}

/* Whether row r is kept (not a duplicate), by the rules. */
static int kept(struct cut *x, size_t r, const gt_map *storage_seq)
{
    const struct row *w = &x->rows[r];
    int64_t c = x->c;
    switch (w->kind) {
    case GT_RL_OP:
        return op_kept(x, get(x, r, 0));
    case GT_RL_OP_ARG:
        return (w->flags & F_SEEN) && (get(x, r, 0) > c || has(&x->kt, get(x, r, 3), 0));
    case GT_RL_BUMP:
        return get(x, r, 0) > c || (w->flags & F_KB);
    case GT_RL_SAVED:
    case GT_RL_NODE:
    case GT_RL_EDGE:
    case GT_RL_NODE_OUTPUT:
        return (w->flags & F_KN) != 0;
    case GT_RL_TENSOR:
    case GT_RL_TENSOR_AGAIN:
        return has(&x->kt, get(x, r, 0), 0);
    case GT_RL_STORAGE: {
        int64_t id = get(x, r, 0);
        uint64_t *seq = gt_map_get(storage_seq, (uint64_t)id, 0, 0);
        return !seq || (int64_t)*seq > c || has(&x->sref, id, 0);
    }
    case GT_RL_NODE_EXEC:
        return get(x, r, 0) > c;
    case GT_RL_NAME:
        return (w->flags & F_SEEN) != 0;
    default:
        return 1;
    }
}

/* Append kept row r to its kind's group, writing the group out when full.
 * Returns 0 or -1. */
static int emit(struct cut *x, size_t r)
{
    const struct row *w = &x->rows[r];
    const struct gt_rowlog_kind_info *k = &gt_rowlog_kinds[w->kind];
    struct group *g = &x->groups[w->kind];
    size_t ncol = (size_t)k->ncol;
    const char *text = w->text;
    memcpy(g->val[g->n], w->val, ncol * 8);
    memcpy(g->null[g->n], w->null, ncol);
    for (size_t c = 0; c < ncol; c++) {
        if (!(k->text >> c & 1) || g->null[g->n][c])
            continue;
        const char *s = text + g->val[g->n][c];
        g->val[g->n][c] = (int64_t)g->text.len;
        if (gt_strbuf_add(&g->text, s, strlen(s) + 1) != 0)
            return -1;
    }
    if (++g->n < GT_ROWLOG_GROUP)
        return 0;
    /* held in memory: not hashed (hash 0) */
    int rc = gt_rowlog_put(&x->out, w->kind, g->n, &g->val[0][0], &g->null[0][0],
                           GT_ROWLOG_MAXCOL, g->text.p, g->text.len, 0);
    g->n = 0;
    gt_strbuf_reset(&g->text);
    return rc;
}

/* Decide every row, re-encode the kept ones into x->out, list the storages
 * dropped and the saved refs whose row is gone. Returns 0 or -1. */
static int keep_rows(struct cut *x, gt__cut_in *in, const gt_map *storage_seq)
{
    for (size_t r = 0; r < x->nrows; r++) {
        struct row *w = &x->rows[r];
        if (!(w->flags & F_DUP) && first_if_kept(x, r, 1) != 0)
            return -1;
        if (!(w->flags & F_DUP) && kept(x, r, storage_seq)) {
            if (emit(x, r) != 0)
                return -1;
            if (w->kind == GT_RL_SAVED && in->saved_refs.n &&
                keep_id(&x->ksaved, NULL, get(x, r, 0)) != 0)
                return -1;
        } else if (w->kind == GT_RL_STORAGE && !(w->flags & F_DUP) &&
                   gt__i64v_push(&x->drop_storages, get(x, r, 0)) != 0) {
            return -1;
        }
    }
    for (int k = 0; k < GT_RL_NKIND; k++) {
        struct group *g = &x->groups[k];
        if (g->n && gt_rowlog_put(&x->out, k, g->n, &g->val[0][0], &g->null[0][0],
                                  GT_ROWLOG_MAXCOL, g->text.p, g->text.len, 0) != 0)
            return -1;
    }
    for (size_t i = 0; i < in->saved_refs.n; i++)
        if (!has(&x->ksaved, in->saved_refs.p[i], 0) &&
            gt__i64v_push(&in->dropped_refs, in->saved_refs.p[i]) != 0)
            return -1;
    return 0;
}

static void cut_free(struct cut *x)
{
    struct tab *maps[] = {&x->tensor,        &x->node,   &x->storage, &x->edge,
                          &x->output,        &x->arg,    &x->name,    &x->by_node_edge,
                          &x->by_node_saved, &x->kn,     &x->kt,      &x->ko,
                          &x->namemax,       &x->vcsave, &x->sref,    &x->ksaved};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        free(maps[i]->s);
        free(maps[i]->used);
    }
    for (int k = 0; x->groups && k < GT_RL_NKIND; k++)
        gt_strbuf_release(&x->groups[k].text);
    free(x->groups);
    free(x->rows);
    free(x->next);
    free(x->nodes.p);
    free(x->tensors.p);
    free(x->bumps.p);
    free(x->drop_storages.p);
    gt_strbuf_release(&x->out);
}

int gt__cut_held(gt_strbuf *held, gt__cut_in *in, gt_map *storage_seq)
{
    struct cut x = {.c = in->c};
    in->dropped_refs.n = 0;
    int rc = read_rows(&x, held);
    if (rc) {
        cut_free(&x);
        return rc;
    }
    if (size_tabs(&x, in) != 0)
        goto oom;
    for (size_t i = 0; i < in->swap_storages.n; i++)
        if (keep_id(&x.sref, NULL, in->swap_storages.p[i]) != 0)
            goto oom;
    /* the groups' values are written before they are read: only their
     * counts and arenas start empty (calloc zeroed 23 kB at every cut) */
    x.groups = malloc(GT_RL_NKIND * sizeof *x.groups);
    for (int k = 0; x.groups && k < GT_RL_NKIND; k++) {
        x.groups[k].n = 0;
        x.groups[k].text = (gt_strbuf){0};
    }
    /* the kept rows' buffer becomes *held: room for as much as it holds
     * now, so neither it nor the window growing again after the cut moves
     * its bytes (each doubling copied them, every cut) */
    if (!x.groups || gt_strbuf_reserve(&x.out, held->len) != 0 || index_rows(&x) != 0 ||
        keep_nodes(&x, in) != 0 || keep_old_bumps(&x) != 0 || keep_tensors(&x, in) != 0 ||
        keep_rows(&x, in, storage_seq) != 0)
        goto oom;
    for (size_t i = 0; i < x.drop_storages.n; i++)
        gt_map_del(storage_seq, (uint64_t)x.drop_storages.p[i], 0, 0);
    gt_strbuf t = *held;
    *held = x.out;
    x.out = t; /* freed with the rest */
    cut_free(&x);
    return 0;
oom:
    cut_free(&x);
    return GT_ENOMEM;
}
