/* Replay engine: a backward call's graph in engine order; see replay.h. */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "intlist.h"
#include "grow.h"
#include "trace_int.h"

#define REPLAY_KEEP       64
#define REPLAY_KEEP_NODES 65536

struct gt_replayer {
    gt_trace *t; /* errors go to its handle (gt_trace_errmsg) */
    sqlite3 *db;
    sqlite3_stmt *call;
    sqlite3_stmt *roots;
    sqlite3_stmt *root_nodes;
    sqlite3_stmt *children;
    sqlite3_stmt *execs;
    sqlite3_stmt *counters;
    sqlite3_stmt *counters_window;
    sqlite3_stmt *counters_size;
    sqlite3_stmt *inputs;
    /* The last calls replayed, oldest first, shared with their callers: a
     * diagnosis replays a failed call again to see what its graph was built
     * from. At most REPLAY_KEEP, and only the last one once they hold more
     * than REPLAY_KEEP_NODES nodes together (a large graph is not kept
     * while the next is built). */
    gt_replay *kept[REPLAY_KEEP];
    size_t nkept;
};

/* ---- id map ------------------------------------------------------------ */

/* The id map is common/gtmap's, keyed by the id alone. */
int gt__imap_get(const gt_imap *m, int64_t key, int64_t *val)
{
    const uint64_t *v = gt_map_get(&m->m, (uint64_t)key, 0, 0);
    if (!v)
        return 0;
    *val = (int64_t)*v;
    return 1;
}

int gt__imap_put(gt_imap *m, int64_t key, int64_t val)
{
    if (gt_map_put(&m->m, (uint64_t)key, 0, 0, (uint64_t)val) != 0)
        return GT_ENOMEM;
    m->len = m->m.len;
    return 0;
}

void gt__imap_clear(gt_imap *m)
{
    gt_map_clear(&m->m);
    m->len = 0;
}

/* ---- replayer ---------------------------------------------------------- */

static const char sql_call[] =
    "SELECT b.seq, b.end_seq, b.stack, b.retain_graph, b.create_graph, b.status, "
    "s.text IN ('torch.autograd.grad', '" GT_API_BY_COMPILER "torch.autograd.grad'), "
    "EXISTS (SELECT 1 FROM backward_inputs i WHERE i.backward = b.id) "
    "FROM backward_calls b LEFT JOIN strings s ON s.id = b.api WHERE b.id = ?1";
/* The graph nodes in JSON array ?1 whose output is an input (inputs=) of
 * call ?2: the grad_fn of a non-leaf input. */
static const char sql_inputs[] =
    "SELECT no.node FROM json_each(?1) j JOIN node_outputs no ON no.node = j.value "
    "WHERE no.tensor IN (SELECT tensor FROM backward_inputs WHERE backward = ?2) "
    "UNION SELECT n.id FROM json_each(?1) j JOIN nodes n ON n.id = j.value "
    "WHERE n.variable IN (SELECT tensor FROM backward_inputs WHERE backward = ?2)";
static const char sql_roots[] =
    "SELECT node FROM backward_roots WHERE backward = ?1 AND node IS NOT NULL "
    "ORDER BY pos";
/* The graph of a call, breadth-first from its roots: the roots with their
 * node rows, then per node its next edges with the targets' node rows (a
 * seek on edges' primary key and one per target; cheaper than a recursive
 * CTE, whose UNION keeps a b-tree of visited ids). */
static const char sql_root_nodes[] =
    "SELECT r.node, n.seq, n.op, n.name, n.sequence_nr, n.variable "
    "FROM backward_roots r LEFT JOIN nodes n ON n.id = r.node "
    "WHERE r.backward = ?1 AND r.node IS NOT NULL";
static const char sql_children[] =
    "SELECT e.next, n.seq, n.op, n.name, n.sequence_nr, n.variable "
    "FROM edges e LEFT JOIN nodes n ON n.id = e.next "
    "WHERE e.node = ?1 AND e.next IS NOT NULL";
/* node_execs has no index on backward: its seq range (the call's) keeps the
 * scan to the rows of this call. */
static const char sql_execs[] =
    "SELECT seq, node FROM node_execs WHERE seq > ?1 AND seq <= ?2 AND backward = ?3";
/* Every bump of the counters in JSON array ?1 within (?2, ?3): seq, op,
 * tensor, version after; by counter then seq. Bumps the adapter did not
 * predict are recorded as observed ones (observed = 1), so op arguments'
 * versions add nothing and are not read: they are most of the rows.
 * Two plans for one answer: through each tensor of each counter (cheap when
 * the counters have few tensors), or through the window's bumps (cheap
 * when the window is short and a counter has many tensors, like a
 * parameter with a new weight.t() view every step). sql_counters_size
 * tells which. */
static const char sql_counters[] =
    "SELECT t.version_counter, b.seq, coalesce(b.op, 0), b.tensor, b.version, 1 "
    "FROM json_each(?1) j JOIN tensors t ON t.version_counter = j.value "
    "JOIN version_bumps b ON b.tensor = t.id AND b.seq > ?2 AND b.seq < ?3 "
    "ORDER BY 1, 2";
static const char sql_counters_window[] =
    "SELECT t.version_counter, b.seq, coalesce(b.op, 0), b.tensor, b.version, 1 "
    "FROM version_bumps b CROSS JOIN tensors t ON t.id = b.tensor "
    "WHERE b.seq > ?2 AND b.seq < ?3 "
    "AND +t.version_counter IN (SELECT value FROM json_each(?1)) ORDER BY 1, 2";
static const char sql_counters_size[] =
    "SELECT count(*) FROM (SELECT 1 FROM json_each(?1) j JOIN tensors t "
    "ON t.version_counter = j.value LIMIT ?2)";

/* The trace's statement for `sql` (gt_trace_stmt: every replayer of a
 * trace shares them; each use steps one to its end and resets it before
 * returning). */
static int prepare(gt_replayer *rp, const char *sql, sqlite3_stmt **st)
{
    return (*st = gt_trace_stmt(rp->t, sql)) != NULL ? 0 : gt_trace_errcode(rp->t);
}

int gt__replayer_new(gt_trace *t, gt_replayer **out)
{
    gt_replayer *rp = calloc(1, sizeof *rp);
    if (!rp)
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    rp->t = t;
    rp->db = gt_trace_db(t);
    int rc;
    if ((rc = prepare(rp, sql_call, &rp->call)) ||
        (rc = prepare(rp, sql_roots, &rp->roots)) ||
        (rc = prepare(rp, sql_root_nodes, &rp->root_nodes)) ||
        (rc = prepare(rp, sql_children, &rp->children)) ||
        (rc = prepare(rp, sql_execs, &rp->execs)) ||
        (rc = prepare(rp, sql_counters, &rp->counters)) ||
        (rc = prepare(rp, sql_counters_window, &rp->counters_window)) ||
        (rc = prepare(rp, sql_counters_size, &rp->counters_size)) ||
        (rc = prepare(rp, sql_inputs, &rp->inputs))) {
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
    /* the statements are the trace's */
    for (size_t i = 0; i < rp->nkept; i++)
        gt__replay_free(rp->kept[i]);
    free(rp);
}

void gt__replay_free(gt_replay *r)
{
    if (!r)
        return;
    if (r->holders > 1) {
        r->holders--;
        return;
    }
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
    gt_imap index; /* node id -> position in nodes */
    gt_replay_node *nodes;
    size_t n, cap;
    int64_t *efrom, *eto; /* edges as (from, to) positions in nodes while reading */
    size_t ne, ecap;
    size_t *edge_start; /* per node: first edge in `edges` (CSR) */
    size_t *edges;      /* target positions in nodes */
    long *deps;
    char *needed; /* with inputs=: 1 for the nodes the engine runs */
} graph;

static void graph_release(graph *g)
{
    gt__imap_clear(&g->index);
    free(g->nodes);
    free(g->efrom);
    free(g->eto);
    free(g->edge_start);
    free(g->edges);
    free(g->deps);
    free(g->needed);
}

static int sql_fail(gt_replayer *rp)
{
    return gt__trace_fail(rp->t, GT_ECORRUPT, "cannot read trace: %s",
                          sqlite3_errmsg(rp->db));
}

/* Add node `id` (unvisited) if new and return its position; -1 on ENOMEM. */
static long graph_add(graph *g, int64_t id, int *added)
{
    int64_t pos;
    *added = 0;
    if (gt__imap_get(&g->index, id, &pos))
        return (long)pos;
    if (GT_ALLOC_GROW(g->nodes, g->n + 1, g->cap, 64) != 0)
        return -1;
    if (gt__imap_put(&g->index, id, (int64_t)g->n) != 0)
        return -1;
    memset(&g->nodes[g->n], 0, sizeof g->nodes[g->n]);
    g->nodes[g->n].id = id;
    *added = 1;
    return (long)g->n++;
}

static int graph_edge(graph *g, int64_t from, int64_t to)
{
    if (g->ne == g->ecap) {
        size_t cap = g->ecap ? g->ecap * 2 : 128;
        int64_t *f = realloc(g->efrom, cap * sizeof *f);
        if (!f)
            return GT_ENOMEM;
        g->efrom = f;
        int64_t *t = realloc(g->eto, cap * sizeof *t);
        if (!t)
            return GT_ENOMEM;
        g->eto = t;
        g->ecap = cap;
    }
    g->efrom[g->ne] = from;
    g->eto[g->ne] = to;
    g->ne++;
    return 0;
}

/* Fill a node's fields from the graph query's row. */
static void node_from_row(gt_replay_node *nd, sqlite3_stmt *st)
{
    if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
        nd->priority = 0; /* no node row (a damaged or partial trace) */
        return;
    }
    nd->seq = sqlite3_column_int64(st, 1);
    nd->op = sqlite3_column_int64(st, 2);
    nd->name = sqlite3_column_int64(st, 3);
    int acc = sqlite3_column_type(st, 5) != SQLITE_NULL;
    if (acc || sqlite3_column_type(st, 4) == SQLITE_NULL ||
        sqlite3_column_int64(st, 4) < 0)
        nd->priority = UINT64_MAX;
    else
        nd->priority = (uint64_t)sqlite3_column_int64(st, 4);
    nd->accumulate_grad = acc;
}

/* Every node reachable from the call's roots, with its edges (BFS); then
 * the edges as CSR. */
static int build_graph(gt_replayer *rp, graph *g, int64_t backward)
{
    sqlite3_stmt *st = rp->root_nodes;
    int s, added;
    sqlite3_bind_int64(st, 1, backward);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        long pos = graph_add(g, sqlite3_column_int64(st, 0), &added);
        if (pos < 0)
            goto nomem;
        if (added)
            node_from_row(&g->nodes[pos], st);
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE)
        return sql_fail(rp);
    st = rp->children;
    for (size_t i = 0; i < g->n; i++) {
        int64_t id = g->nodes[i].id;
        sqlite3_bind_int64(st, 1, id);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t to = sqlite3_column_int64(st, 0);
            long pos = graph_add(g, to, &added);
            if (pos < 0)
                goto nomem;
            if (added)
                node_from_row(&g->nodes[pos], st);
            /* by position: the CSR below needs no lookup of either end */
            if (graph_edge(g, (int64_t)i, pos) != 0)
                goto nomem;
        }
        sqlite3_reset(st);
        if (s != SQLITE_DONE)
            return sql_fail(rp);
    }

    g->edge_start = calloc(g->n + 1, sizeof *g->edge_start);
    g->edges = malloc((g->ne ? g->ne : 1) * sizeof *g->edges);
    if (!g->edge_start || !g->edges)
        goto nomem;
    for (size_t e = 0; e < g->ne; e++)
        g->edge_start[g->efrom[e] + 1]++;
    for (size_t i = 0; i < g->n; i++)
        g->edge_start[i + 1] += g->edge_start[i];
    size_t *fill = calloc(g->n ? g->n : 1, sizeof *fill);
    if (!fill)
        goto nomem;
    /* Every target is in the graph (added as its edge was read): the rows
     * fill exactly. */
    for (size_t e = 0; e < g->ne; e++) {
        size_t from = (size_t)g->efrom[e];
        g->edges[g->edge_start[from] + fill[from]++] = (size_t)g->eto[e];
    }
    free(fill);
    return 0;
nomem:
    sqlite3_reset(st);
    return gt__trace_fail(rp->t, GT_ENOMEM, "out of memory");
}

/* With inputs= the engine runs only the nodes through which a gradient
 * reaches an input (exec_info): those with a path to an input's node. That
 * node itself runs for Tensor.backward/torch.autograd.backward (it
 * accumulates) but not for torch.autograd.grad (it only captures). The
 * other nodes are skipped, so their saved tensors are never checked. */
static int mark_needed(gt_replayer *rp, graph *g, const gt_replay *r)
{
    int rc = 0, s;
    int64_t *ids = malloc((g->n ? g->n : 1) * sizeof *ids);
    char *target = calloc(g->n ? g->n : 1, 1), *list = NULL;
    size_t *stack = malloc((g->n ? g->n : 1) * sizeof *stack);
    g->needed = calloc(g->n ? g->n : 1, 1);
    if (!ids || !target || !stack || !g->needed)
        goto nomem;
    for (size_t i = 0; i < g->n; i++)
        ids[i] = g->nodes[i].id;
    if (!(list = gt_ints_json(ids, g->n)))
        goto nomem;
    sqlite3_stmt *st = rp->inputs;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->backward);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t pos;
        if (gt__imap_get(&g->index, sqlite3_column_int64(st, 0), &pos))
            target[pos] = 1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE) {
        rc = sql_fail(rp);
        goto out;
    }
    /* needed(v) = v reaches a target through at least one edge, or v is a
     * target the call accumulates into: iterate to a fixed point with a
     * depth-first search per node (memo in `state`: 0 new, 1 open, 2 done). */
    char *state = calloc(g->n ? g->n : 1, 1);
    size_t *iter = malloc((g->n ? g->n : 1) * sizeof *iter);
    if (!state || !iter) {
        free(state);
        free(iter);
        goto nomem;
    }
    for (size_t root = 0; root < g->n; root++) {
        if (state[root])
            continue;
        size_t sp = 0;
        stack[sp++] = root;
        state[root] = 1;
        iter[root] = g->edge_start[root];
        while (sp) {
            size_t v = stack[sp - 1];
            if (iter[v] < g->edge_start[v + 1]) {
                size_t to = g->edges[iter[v]++];
                if (state[to] == 0) {
                    state[to] = 1;
                    iter[to] = g->edge_start[to];
                    stack[sp++] = to;
                } else if (state[to] == 2 && (g->needed[to] || target[to])) {
                    g->needed[v] = 1;
                }
                continue;
            }
            /* v is finished: its children are done (cycles aside). */
            for (size_t e = g->edge_start[v]; e < g->edge_start[v + 1]; e++)
                if (g->needed[g->edges[e]] || target[g->edges[e]])
                    g->needed[v] = 1;
            state[v] = 2;
            sp--;
        }
    }
    for (size_t i = 0; i < g->n; i++)
        if (target[i] && !r->grad_api)
            g->needed[i] = 1;
    free(state);
    free(iter);
    goto out;
nomem:
    rc = gt__trace_fail(rp->t, GT_ENOMEM, "out of memory");
out:
    free(ids);
    free(target);
    free(stack);
    free(list);
    return rc;
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

static int load_execs(gt_replayer *rp, graph *g, gt_replay *r)
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
    return s == SQLITE_DONE ? 0 : sql_fail(rp);
}

static int load_call(gt_replayer *rp, gt_replay *r)
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
        int oom = 0;
        const char *status = gt_column_text(st, 5, &oom);
        if (oom)
            rc = gt__trace_fail(rp->t, GT_ENOMEM, "out of memory");
        r->status = !status                                     ? GT_BACKWARD_RUNNING
                    : !strcmp(status, GT_BACKWARD_STATUS_OK)    ? GT_BACKWARD_OK
                    : !strcmp(status, GT_BACKWARD_STATUS_ERROR) ? GT_BACKWARD_ERROR
                                                                : GT_BACKWARD_RUNNING;
        r->grad_api = sqlite3_column_int(st, 6);
        r->has_inputs = sqlite3_column_int(st, 7);
    } else if (s == SQLITE_DONE) {
        rc = gt__trace_fail(rp->t, GT_EINVAL, "no backward call %lld in the trace",
                            (long long)r->backward);
    } else {
        rc = sql_fail(rp);
    }
    sqlite3_reset(st);
    return rc;
}

/* Nodes of the replays kept. */
static size_t kept_nodes(const gt_replayer *rp)
{
    size_t n = 0;
    for (size_t i = 0; i < rp->nkept; i++)
        n += rp->kept[i]->n;
    return n;
}

/* Let the oldest replay kept go. */
static void drop_oldest(gt_replayer *rp)
{
    gt__replay_free(rp->kept[0]);
    memmove(rp->kept, rp->kept + 1, --rp->nkept * sizeof *rp->kept);
}

/* Keep r (one holder more), dropping the oldest past the bounds. */
static void keep(gt_replayer *rp, gt_replay *r)
{
    if (rp->nkept == REPLAY_KEEP)
        drop_oldest(rp);
    r->holders++;
    rp->kept[rp->nkept++] = r;
    while (rp->nkept > 1 && kept_nodes(rp) > REPLAY_KEEP_NODES)
        drop_oldest(rp);
}

int gt__replay_backward(gt_replayer *rp, int64_t backward, gt_replay **out)
{
    for (size_t i = 0; i < rp->nkept; i++)
        if (rp->kept[i]->backward == backward) {
            rp->kept[i]->holders++;
            *out = rp->kept[i];
            return 0;
        }
    if (kept_nodes(rp) > REPLAY_KEEP_NODES)
        drop_oldest(rp); /* the one large graph kept */
    int rc = 0;
    graph g;
    int64_t *roots = NULL;
    size_t nroots = 0, rcap = 0, *heap = NULL;
    gt_replay *r = calloc(1, sizeof *r);
    memset(&g, 0, sizeof g);
    if (!r)
        goto nomem;
    r->backward = backward;
    if ((rc = load_call(rp, r)) != 0)
        goto out;

    sqlite3_stmt *st = rp->roots;
    sqlite3_bind_int64(st, 1, backward);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(roots, nroots + 1, rcap, 8) != 0) {
            sqlite3_reset(st);
            goto nomem;
        }
        roots[nroots++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE) {
        rc = sql_fail(rp);
        goto out;
    }

    if ((rc = build_graph(rp, &g, backward)) != 0)
        goto out;
    if ((rc = load_execs(rp, &g, r)) != 0)
        goto out;
    if (r->has_inputs && (rc = mark_needed(rp, &g, r)) != 0)
        goto out;

    /* Dependencies per edge, the virtual root's edges included. */
    if (g.n) {
        g.deps = calloc(g.n, sizeof *g.deps);
        heap = malloc(g.n * sizeof *heap);
        r->order = malloc(g.n * sizeof *r->order);
        if (!g.deps || !heap || !r->order)
            goto nomem;
    }
    for (size_t e = 0; e < g.edge_start[g.n]; e++)
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
        if (!r->has_inputs || g.needed[v])
            r->order[r->n++] = g.nodes[v];
        for (size_t e = g.edge_start[v]; e < g.edge_start[v + 1]; e++) {
            size_t to = g.edges[e];
            if (--g.deps[to] == 0) {
                g.deps[to] = -1;
                heap_push(heap, &hlen, to, g.nodes);
            }
        }
    }
    /* Nodes left with unmet dependencies sit on a cycle (a damaged trace);
     * they never run, as in the engine. */
    r->holders = 1;
    keep(rp, r);
    *out = r;
    r = NULL;
    goto out;
nomem:
    rc = gt__trace_fail(rp->t, GT_ENOMEM, "out of memory");
out:
    graph_release(&g);
    free(heap);
    free(roots);
    gt__replay_free(r);
    return rc;
}

/* ---- version arithmetic ------------------------------------------------ */

typedef struct vobs {
    int64_t seq; /* bump seq, or the op's seq for an op argument */
    int64_t op;  /* ops.seq that caused it (0 if observed) */
    int64_t tensor;
    int64_t version; /* after the bump, or seen before the op */
    int bump;
} vobs;

struct gt_counters {
    vobs *v; /* by counter, then seq */
    size_t n, cap;
    gt_imap start; /* counter -> first index in v */
    gt_imap end;   /* counter -> one past its last index */
};

int gt__pick_plan(gt_trace *t, sqlite3_stmt *size, const char *list, int64_t from_seq,
                  int64_t to_seq)
{
    /* A seek per tensor against a visit per event of the window (only some
     * events are bumps or writes, each costing about a seek): the window
     * wins once there are more than a quarter as many tensors as events.
     * Counting stops there, so choosing costs less than either plan. */
    int64_t cap = (to_seq - from_seq) / 4 + 1, n = 0;
    sqlite3_bind_text(size, 1, list, -1, SQLITE_STATIC);
    sqlite3_bind_int64(size, 2, cap);
    int s = sqlite3_step(size);
    if (s == SQLITE_ROW)
        n = sqlite3_column_int64(size, 0);
    sqlite3_reset(size);
    sqlite3_clear_bindings(size);
    if (s != SQLITE_ROW)
        return gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s",
                              sqlite3_errmsg(gt_trace_db(t)));
    return n >= cap ? 1 : 0;
}

void gt__counters_free(gt_counters *c)
{
    if (!c)
        return;
    free(c->v);
    gt__imap_clear(&c->start);
    gt__imap_clear(&c->end);
    free(c);
}

int gt__counters_load(gt_replayer *rp, const int64_t *vcs, size_t n, int64_t from_seq,
                      int64_t to_seq, gt_counters **out)
{
    int rc = 0, s;
    char *list = gt_ints_json(vcs, n);
    gt_counters *c = calloc(1, sizeof *c);
    sqlite3_stmt *st = rp->counters;
    if (!list || !c)
        goto nomem;
    if ((rc = gt__pick_plan(rp->t, rp->counters_size, list, from_seq, to_seq)) < 0)
        goto out;
    if (rc == 1)
        st = rp->counters_window;
    rc = 0;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, from_seq);
    sqlite3_bind_int64(st, 3, to_seq);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(c->v, c->n + 1, c->cap, 64) != 0)
            goto nomem;
        int64_t vc = sqlite3_column_int64(st, 0), dummy;
        vobs *o = &c->v[c->n];
        o->seq = sqlite3_column_int64(st, 1);
        o->op = sqlite3_column_int64(st, 2);
        o->tensor = sqlite3_column_int64(st, 3);
        o->version = sqlite3_column_int64(st, 4);
        o->bump = sqlite3_column_int(st, 5);
        if (!gt__imap_get(&c->start, vc, &dummy) &&
            gt__imap_put(&c->start, vc, (int64_t)c->n) != 0)
            goto nomem;
        c->n++;
        if (gt__imap_put(&c->end, vc, (int64_t)c->n) != 0)
            goto nomem;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE) {
        rc = sql_fail(rp);
        goto out;
    }
    *out = c;
    c = NULL;
    goto out;
nomem:
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    rc = gt__trace_fail(rp->t, GT_ENOMEM, "out of memory");
out:
    free(list);
    gt__counters_free(c);
    return rc;
}

int gt__counters_window(const gt_counters *c, int64_t vc, int64_t from_seq,
                        int64_t from_version, int64_t to_seq, int64_t *version,
                        gt_mutation **bumps, size_t *n)
{
    int64_t lo, hi, cur = from_version;
    gt_mutation *v = NULL;
    size_t len = 0, cap = 0;
    if (!gt__imap_get(&c->start, vc, &lo) || !gt__imap_get(&c->end, vc, &hi))
        lo = hi = 0;
    for (int64_t i = lo; i < hi; i++) {
        const vobs *o = &c->v[i];
        if (o->seq <= from_seq || o->seq >= to_seq)
            continue;
        /* the counter's value is its last bump's: one set back
         * (torch.autograd._unsafe_preserve_version_counter, which FSDP2
         * wraps its all-gather copies in) is observed lower */
        cur = o->version;
        if (!o->bump)
            continue;
        if (GT_ALLOC_GROW(v, len + 1, cap, 8) != 0) {
            free(v);
            return GT_ENOMEM;
        }
        v[len].seq = o->op;
        v[len].bump_seq = o->seq;
        v[len].tensor = o->tensor;
        v[len].version_after = o->version;
        len++;
    }
    *version = cur;
    *bumps = v;
    *n = len;
    return 0;
}

int gt__replay_counter(gt_replayer *rp, int64_t vc, int64_t from_seq,
                       int64_t from_version, int64_t to_seq, int64_t *version,
                       gt_mutation **bumps, size_t *n)
{
    gt_counters *c = NULL;
    int rc = gt__counters_load(rp, &vc, 1, from_seq, to_seq, &c);
    if (rc)
        return rc;
    rc = gt__counters_window(c, vc, from_seq, from_version, to_seq, version, bumps, n);
    if (rc)
        gt__trace_fail(rp->t, rc, "out of memory");
    gt__counters_free(c);
    return rc;
}
