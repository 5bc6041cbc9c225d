/* Replay engine: a backward call's graph in engine order; see replay.h. */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/recorder.h>

struct gt_replayer {
    sqlite3 *db;
    sqlite3_stmt *call;
    sqlite3_stmt *roots;
    sqlite3_stmt *node;
    sqlite3_stmt *edges;
    sqlite3_stmt *execs;
    sqlite3_stmt *bumps;
    sqlite3_stmt *argmax;
};

/* ---- hash map ---------------------------------------------------------- */

static size_t imap_slot(int64_t key, size_t cap)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

int gt__imap_get(const gt_imap *m, int64_t key, int64_t *val)
{
    if (m->cap == 0)
        return 0;
    for (size_t i = imap_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
        if (m->keys[i] == 0)
            return 0;
    }
}

static int imap_grow(gt_imap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    int64_t *keys = calloc(cap, sizeof *keys);
    int64_t *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return GT_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        size_t j = imap_slot(m->keys[i], cap);
        while (keys[j] != 0)
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int gt__imap_put(gt_imap *m, int64_t key, int64_t val)
{
    if ((m->len + 1) * 2 > m->cap && imap_grow(m) != 0)
        return GT_ENOMEM;
    size_t i = imap_slot(key, m->cap);
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == 0) {
        m->keys[i] = key;
        m->len++;
    }
    m->vals[i] = val;
    return 0;
}

void gt__imap_clear(gt_imap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- replayer ---------------------------------------------------------- */

static const char sql_call[] =
    "SELECT seq, end_seq, stack, retain_graph, create_graph, status "
    "FROM backward_calls WHERE id = ?1";
static const char sql_roots[] =
    "SELECT node FROM backward_roots WHERE backward = ?1 AND node IS NOT NULL "
    "ORDER BY pos";
static const char sql_node[] =
    "SELECT n.seq, n.op, n.name, n.sequence_nr, n.variable, s.text "
    "FROM nodes n LEFT JOIN strings s ON s.id = n.name WHERE n.id = ?1";
static const char sql_edges[] =
    "SELECT next FROM edges WHERE node = ?1 AND next IS NOT NULL ORDER BY pos";
/* node_execs has no index on backward: its seq range (the call's) keeps the
 * scan to the rows of this call. */
static const char sql_execs[] =
    "SELECT seq, node FROM node_execs WHERE seq > ?1 AND seq <= ?2 AND backward = ?3";
static const char sql_bumps[] =
    "SELECT b.seq, coalesce(b.op, 0), b.tensor, b.version "
    "FROM tensors t JOIN version_bumps b ON b.tensor = t.id "
    "WHERE t.version_counter = ?1 AND b.seq > ?2 AND b.seq < ?3 ORDER BY b.seq";
static const char sql_argmax[] =
    "SELECT max(a.version) FROM tensors t JOIN op_args a ON a.tensor = t.id "
    "WHERE t.version_counter = ?1 AND a.op > ?2 AND a.op < ?3";

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, char *err, size_t errlen)
{
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot read trace: %s", sqlite3_errmsg(db));
        return GT_ECORRUPT;
    }
    return 0;
}

int gt__replayer_new(sqlite3 *db, gt_replayer **out, char *err, size_t errlen)
{
    gt_replayer *rp = calloc(1, sizeof *rp);
    if (!rp) {
        snprintf(err, errlen, "out of memory");
        return GT_ENOMEM;
    }
    rp->db = db;
    int rc;
    if ((rc = prepare(db, sql_call, &rp->call, err, errlen)) ||
        (rc = prepare(db, sql_roots, &rp->roots, err, errlen)) ||
        (rc = prepare(db, sql_node, &rp->node, err, errlen)) ||
        (rc = prepare(db, sql_edges, &rp->edges, err, errlen)) ||
        (rc = prepare(db, sql_execs, &rp->execs, err, errlen)) ||
        (rc = prepare(db, sql_bumps, &rp->bumps, err, errlen)) ||
        (rc = prepare(db, sql_argmax, &rp->argmax, err, errlen))) {
        gt__replayer_free(rp);
        return rc;
    }
    *out = rp;
    return 0;
}

void gt__replayer_free(gt_replayer *rp)
{
    if (!rp)
        return;
    sqlite3_finalize(rp->call);
    sqlite3_finalize(rp->roots);
    sqlite3_finalize(rp->node);
    sqlite3_finalize(rp->edges);
    sqlite3_finalize(rp->execs);
    sqlite3_finalize(rp->bumps);
    sqlite3_finalize(rp->argmax);
    free(rp);
}

void gt__replay_free(gt_replay *r)
{
    if (!r)
        return;
    free(r->order);
    free(r);
}

long gt__replay_find(const gt_replay *r, int64_t id)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->order[i].id == id)
            return (long)i;
    return -1;
}

/* ---- graph building ---------------------------------------------------- */

/* Growable arrays used while building one graph. */
typedef struct graph {
    gt_imap index;          /* node id -> position in nodes */
    gt_replay_node *nodes;
    size_t n, cap;
    size_t *edge_start;     /* per node: first edge in `edges` */
    size_t *edge_count;
    size_t *edges;          /* positions in nodes */
    size_t ne, ecap;
    long *deps;
} graph;

static void graph_release(graph *g)
{
    gt__imap_clear(&g->index);
    free(g->nodes);
    free(g->edge_start);
    free(g->edge_count);
    free(g->edges);
    free(g->deps);
}

/* Position of node `id`, adding it (unvisited) if new; -1 on ENOMEM. */
static long graph_add(graph *g, int64_t id)
{
    int64_t pos;
    if (gt__imap_get(&g->index, id, &pos))
        return (long)pos;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        gt_replay_node *nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes)
            return -1;
        g->nodes = nodes;
        size_t *es = realloc(g->edge_start, cap * sizeof *es);
        if (!es)
            return -1;
        g->edge_start = es;
        size_t *ec = realloc(g->edge_count, cap * sizeof *ec);
        if (!ec)
            return -1;
        g->edge_count = ec;
        g->cap = cap;
    }
    if (gt__imap_put(&g->index, id, (int64_t)g->n) != 0)
        return -1;
    memset(&g->nodes[g->n], 0, sizeof g->nodes[g->n]);
    g->nodes[g->n].id = id;
    g->edge_start[g->n] = 0;
    g->edge_count[g->n] = 0;
    return (long)g->n++;
}

static int graph_edge(graph *g, size_t to)
{
    if (g->ne == g->ecap) {
        size_t cap = g->ecap ? g->ecap * 2 : 128;
        size_t *e = realloc(g->edges, cap * sizeof *e);
        if (!e)
            return GT_ENOMEM;
        g->edges = e;
        g->ecap = cap;
    }
    g->edges[g->ne++] = to;
    return 0;
}

static int sql_fail(gt_replayer *rp, char *err, size_t errlen)
{
    snprintf(err, errlen, "cannot read trace: %s", sqlite3_errmsg(rp->db));
    return GT_ECORRUPT;
}

/* Read node row `pos` of g into its gt_replay_node. */
static int load_node(gt_replayer *rp, graph *g, size_t pos, char *err, size_t errlen)
{
    gt_replay_node *nd = &g->nodes[pos];
    sqlite3_stmt *st = rp->node;
    int rc = 0;
    sqlite3_bind_int64(st, 1, nd->id);
    int s = sqlite3_step(st);
    nd->priority = 0;
    if (s == SQLITE_ROW) {
        nd->seq = sqlite3_column_int64(st, 0);
        nd->op = sqlite3_column_int64(st, 1);
        nd->name = sqlite3_column_int64(st, 2);
        const char *name = (const char *)sqlite3_column_text(st, 5);
        int acc = sqlite3_column_type(st, 4) != SQLITE_NULL ||
                  (name && strstr(name, "AccumulateGrad"));
        if (acc || sqlite3_column_type(st, 3) == SQLITE_NULL ||
            sqlite3_column_int64(st, 3) < 0)
            nd->priority = UINT64_MAX;
        else
            nd->priority = (uint64_t)sqlite3_column_int64(st, 3);
        nd->accumulate_grad = acc;
    } else if (s != SQLITE_DONE) {
        rc = sql_fail(rp, err, errlen);
    }
    sqlite3_reset(st);
    return rc;
}

/* Breadth-first from the roots: every reachable node with its edges. */
static int build_graph(gt_replayer *rp, graph *g, const int64_t *roots, size_t nroots,
                       char *err, size_t errlen)
{
    for (size_t i = 0; i < nroots; i++)
        if (graph_add(g, roots[i]) < 0)
            goto nomem;
    for (size_t pos = 0; pos < g->n; pos++) {
        int rc = load_node(rp, g, pos, err, errlen);
        if (rc)
            return rc;
        g->edge_start[pos] = g->ne;
        sqlite3_stmt *st = rp->edges;
        sqlite3_bind_int64(st, 1, g->nodes[pos].id);
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            long to = graph_add(g, sqlite3_column_int64(st, 0));
            if (to < 0 || graph_edge(g, (size_t)to) != 0) {
                sqlite3_reset(st);
                goto nomem;
            }
        }
        sqlite3_reset(st);
        if (s != SQLITE_DONE)
            return sql_fail(rp, err, errlen);
        g->edge_count[pos] = g->ne - g->edge_start[pos];
    }
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
    return GT_ENOMEM;
}

/* ---- ready queue: a binary max-heap of node positions ------------------ */

/* 1 if node a runs before node b. */
static int runs_first(const gt_replay_node *a, const gt_replay_node *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->id < b->id;
}

static void heap_push(size_t *heap, size_t *len, size_t v, const gt_replay_node *nodes)
{
    size_t i = (*len)++;
    heap[i] = v;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!runs_first(&nodes[heap[i]], &nodes[heap[p]]))
            break;
        size_t t = heap[i];
        heap[i] = heap[p];
        heap[p] = t;
        i = p;
    }
}

static size_t heap_pop(size_t *heap, size_t *len, const gt_replay_node *nodes)
{
    size_t top = heap[0];
    heap[0] = heap[--*len];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *len && runs_first(&nodes[heap[l]], &nodes[heap[m]]))
            m = l;
        if (r < *len && runs_first(&nodes[heap[r]], &nodes[heap[m]]))
            m = r;
        if (m == i)
            break;
        size_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

/* ---- replay ------------------------------------------------------------ */

static int load_execs(gt_replayer *rp, graph *g, gt_replay *r, char *err, size_t errlen)
{
    sqlite3_stmt *st = rp->execs;
    sqlite3_bind_int64(st, 1, r->seq);
    sqlite3_bind_int64(st, 2, r->end_seq ? r->end_seq : INT64_MAX);
    sqlite3_bind_int64(st, 3, r->backward);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t pos;
        r->has_execs = 1;
        if (gt__imap_get(&g->index, sqlite3_column_int64(st, 1), &pos) &&
            g->nodes[pos].exec_seq == 0)
            g->nodes[pos].exec_seq = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return s == SQLITE_DONE ? 0 : sql_fail(rp, err, errlen);
}

static int load_call(gt_replayer *rp, gt_replay *r, char *err, size_t errlen)
{
    sqlite3_stmt *st = rp->call;
    sqlite3_bind_int64(st, 1, r->backward);
    int s = sqlite3_step(st), rc = 0;
    if (s == SQLITE_ROW) {
        r->seq = sqlite3_column_int64(st, 0);
        r->end_seq = sqlite3_column_int64(st, 1);
        r->stack = sqlite3_column_int64(st, 2);
        r->retain_graph = sqlite3_column_int(st, 3);
        r->create_graph = sqlite3_column_int(st, 4);
        const char *status = (const char *)sqlite3_column_text(st, 5);
        r->status = !status                  ? GT_BACKWARD_RUNNING
                    : !strcmp(status, "ok")    ? GT_BACKWARD_OK
                    : !strcmp(status, "error") ? GT_BACKWARD_ERROR
                                               : GT_BACKWARD_RUNNING;
    } else if (s == SQLITE_DONE) {
        snprintf(err, errlen, "no backward call %lld in the trace", (long long)r->backward);
        rc = GT_EINVAL;
    } else {
        rc = sql_fail(rp, err, errlen);
    }
    sqlite3_reset(st);
    return rc;
}

int gt__replay_backward(gt_replayer *rp, int64_t backward, gt_replay **out, char *err,
                        size_t errlen)
{
    int rc = 0;
    graph g;
    int64_t *roots = NULL;
    size_t nroots = 0, rcap = 0, *heap = NULL;
    gt_replay *r = calloc(1, sizeof *r);
    memset(&g, 0, sizeof g);
    if (!r)
        goto nomem;
    r->backward = backward;
    if ((rc = load_call(rp, r, err, errlen)) != 0)
        goto out;

    sqlite3_stmt *st = rp->roots;
    sqlite3_bind_int64(st, 1, backward);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (nroots == rcap) {
            rcap = rcap ? rcap * 2 : 8;
            int64_t *nr = realloc(roots, rcap * sizeof *nr);
            if (!nr) {
                sqlite3_reset(st);
                goto nomem;
            }
            roots = nr;
        }
        roots[nroots++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE) {
        rc = sql_fail(rp, err, errlen);
        goto out;
    }

    if ((rc = build_graph(rp, &g, roots, nroots, err, errlen)) != 0)
        goto out;
    if ((rc = load_execs(rp, &g, r, err, errlen)) != 0)
        goto out;

    /* Dependencies per edge, the virtual root's edges included. */
    if (g.n) {
        g.deps = calloc(g.n, sizeof *g.deps);
        heap = malloc(g.n * sizeof *heap);
        r->order = malloc(g.n * sizeof *r->order);
        if (!g.deps || !heap || !r->order)
            goto nomem;
    }
    for (size_t e = 0; e < g.ne; e++)
        g.deps[g.edges[e]]++;
    /* The virtual root (PyTorch's GraphRoot, or the single root itself) runs
     * first: a root is ready once no edge from the graph still feeds it. */
    size_t hlen = 0;
    for (size_t i = 0; i < nroots; i++) {
        int64_t pos;
        gt__imap_get(&g.index, roots[i], &pos);
        if (g.deps[pos] == 0) {
            g.deps[pos] = -1; /* queued */
            heap_push(heap, &hlen, (size_t)pos, g.nodes);
        }
    }
    while (hlen) {
        size_t v = heap_pop(heap, &hlen, g.nodes);
        r->order[r->n++] = g.nodes[v];
        for (size_t e = g.edge_start[v]; e < g.edge_start[v] + g.edge_count[v]; e++) {
            size_t to = g.edges[e];
            if (--g.deps[to] == 0) {
                g.deps[to] = -1;
                heap_push(heap, &hlen, to, g.nodes);
            }
        }
    }
    /* Nodes left with unmet dependencies sit on a cycle (a damaged trace);
     * they never run, as in the engine. */
    *out = r;
    r = NULL;
    goto out;
nomem:
    snprintf(err, errlen, "out of memory");
    rc = GT_ENOMEM;
out:
    graph_release(&g);
    free(heap);
    free(roots);
    gt__replay_free(r);
    return rc;
}

/* ---- version arithmetic ------------------------------------------------ */

int gt__replay_counter(gt_replayer *rp, int64_t vc, int64_t from_seq, int64_t from_version,
                       int64_t to_seq, int64_t *version, gt_mutation **bumps, size_t *n,
                       char *err, size_t errlen)
{
    gt_mutation *v = NULL;
    size_t len = 0, cap = 0;
    int64_t cur = from_version;
    sqlite3_stmt *st = rp->bumps;
    int s;

    sqlite3_bind_int64(st, 1, vc);
    sqlite3_bind_int64(st, 2, from_seq);
    sqlite3_bind_int64(st, 3, to_seq);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            cap = cap ? cap * 2 : 8;
            gt_mutation *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                sqlite3_reset(st);
                free(v);
                snprintf(err, errlen, "out of memory");
                return GT_ENOMEM;
            }
            v = nv;
        }
        gt_mutation *m = &v[len++];
        m->bump_seq = sqlite3_column_int64(st, 0);
        m->seq = sqlite3_column_int64(st, 1);
        m->tensor = sqlite3_column_int64(st, 2);
        m->version_after = sqlite3_column_int64(st, 3);
        if (m->version_after > cur)
            cur = m->version_after;
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE) {
        free(v);
        return sql_fail(rp, err, errlen);
    }

    st = rp->argmax;
    sqlite3_bind_int64(st, 1, vc);
    sqlite3_bind_int64(st, 2, from_seq);
    sqlite3_bind_int64(st, 3, to_seq);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int64(st, 0) > cur)
        cur = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (s != SQLITE_ROW) {
        free(v);
        return sql_fail(rp, err, errlen);
    }
    *version = cur;
    *bumps = v;
    *n = len;
    return 0;
}
