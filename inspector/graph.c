/* Building one backward call's graph with cgraph; see graph.h. Laying it
 * out and rendering it with gvc is graph_render.c. */
#include <gradtrace/graph.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "graph_int.h"
#include "grow.h"
#include "gtmap.h"
#include "modpath.h"
#include "strbuf.h"
#include "utf8.h"
#include "trace_int.h"

#define LABEL_CHARS        60  /* characters of one piece of user text in a label */
#define FILE_CHARS         40  /* characters of a file's base name */
#define NAMES_MAX          3   /* variable names listed per tensor */
#define BIG_GRAPH          300 /* above this many nodes, cheaper layout settings */
#define STAGGER_MIN_LEAVES 9   /* stagger single-edge nodes when this many */
#define WRAP_RANKS         12  /* a long chain wraps into columns this many ranks tall */
#define WRAP_WIDTH         3   /* ... when no rank holds more nodes than this */
#define FOLD_SLOTS         3   /* slots named in a node's "saves ..." line */
#define BREADTH            3   /* neighbours a node of a too-wide ring draws */
#define REPEAT_MAX_BLOCK   512 /* nodes in a block drawn once for its repeats */
#define REPEAT_MIN_HIDDEN  4   /* ... when its repeats hide at least this many */
#define REPEAT_WORK        20000000 /* node comparisons spent finding repeats */

/* ---- label text ------------------------------------------------------- */

/* Append user text escaped for a plain DOT label (graph.h), trimmed of
 * surrounding white space and elided to max_chars characters (0: all). */
static void sb_text(gt_strbuf *b, const char *text, size_t max_chars)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    static const char ellipsis[] = "\xe2\x80\xa6";    /* U+2026 */
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    size_t n = strlen((const char *)s);
    while (n && strchr(" \t\r\n", s[0]))
        s++, n--;
    while (n && strchr(" \t\r\n", s[n - 1]))
        n--;

    size_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        uint32_t cp;
        size_t len = gt_utf8_next(s + i, n - i, &cp);
        i += len ? len : 1;
    }
    size_t keep = chars;
    if (max_chars && chars > max_chars)
        keep = max_chars - 1;

    size_t i = 0;
    for (size_t k = 0; k < keep; k++) {
        uint32_t cp;
        size_t len = gt_utf8_next(s + i, n - i, &cp);
        if (!len) {
            gt_strbuf_adds(b, replacement);
            i++;
            continue;
        }
        if (cp == '\\')
            gt_strbuf_adds(b, "\\\\");
        else if (cp == '&')
            gt_strbuf_adds(b, "&amp;");
        else if (cp == '\n')
            gt_strbuf_adds(b, "\\n");
        else if (cp == '\t')
            gt_strbuf_adds(b, " ");
        else if (cp == '\r' && i + 1 < n && s[i + 1] == '\n')
            ; /* CR LF: the LF makes the break */
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0))
            gt_strbuf_adds(b, replacement);
        else
            gt_strbuf_add(b, (const char *)s + i, len);
        i += len;
    }
    if (keep < chars)
        gt_strbuf_adds(b, ellipsis);
}

char *gt_graph_label_escape(const char *text, size_t max_chars)
{
    gt_strbuf b = {0};
    sb_text(&b, text, max_chars);
    if (b.oom) {
        gt_strbuf_release(&b);
        return NULL;
    }
    if (!b.p)
        return strdup("");
    return b.p;
}

/* A label line break. */
static void sb_br(gt_strbuf *b)
{
    gt_strbuf_adds(b, "\\n");
}

/* "file.py:12" with the file's base name, escaped. */
static void sb_loc(gt_strbuf *b, const char *file, int64_t line)
{
    const char *base = file ? strrchr(file, '/') : NULL;
    sb_text(b, base ? base + 1 : file ? file : "?", FILE_CHARS);
    /* a notebook cell ("In [3]") reads as Jupyter's: "In [3], line 4" */
    gt_strbuf_addf(b, file && !strncmp(file, "In [", 4) ? ", line %lld" : ":%lld",
                   (long long)line);
}

/* ---- the builder ------------------------------------------------------ */

typedef struct gnode {
    int64_t id;
    size_t dist; /* focus distance; (size_t)-1: not reached */
    int root;
    int visible;
    int keep_saved; /* draw its saved tensors even when folding them */
    size_t hidden_in, hidden_out;
    size_t nsaved; /* its saved tensors */
    int64_t frame; /* the user's frame of the op that created it, or 0 */
    int grouped;   /* 1: drawn in the cluster of its frame, label without it */
    int collapsed; /* 1: a repeat of a block drawn once (twin: its copy there),
                      or a leaf only such repeats use (twin: NO_TWIN) */
    size_t twin;   /* the node drawn in its place: itself unless collapsed */
    size_t repeat; /* 1 + index in builder.repeats of the block drawn once it
                      belongs to, or 0 */
    Agnode_t *an;
} gnode;

#define NO_TWIN ((size_t)-1)

/* A block of nodes repeated `count` times in a row, drawn once. */
typedef struct repeat {
    size_t count;  /* repeats the drawn block stands for, itself included */
    size_t size;   /* nodes in the block */
    size_t hidden; /* nodes of the other repeats */
    int64_t frame; /* the one line that made every drawn node of it, or 0 */
    int sited;     /* its cluster's label holds that line */
} repeat;

typedef struct gedge {
    size_t node, next; /* indexes: next feeds node */
} gedge;

enum { Q_EDGES, Q_NODE, Q_TENSOR, Q_SAVED, Q_PLAN, Q_OP, Q_BACKWARD, Q_SIG, Q_COUNT };

static const char *const queries[Q_COUNT] = {
    [Q_EDGES] = "SELECT next FROM edges WHERE node = ?1 AND next IS NOT NULL "
                "ORDER BY pos",
    /* the lines come from the reading layer (gt_trace_user_loc) */
    [Q_NODE] = "SELECT s.text, n.variable, o.stack "
               "FROM nodes n JOIN strings s ON s.id = n.name "
               "LEFT JOIN ops o ON o.seq = n.op WHERE n.id = ?1",
    [Q_TENSOR] = "SELECT d.text, t.shape FROM tensors t "
                 "LEFT JOIN strings d ON d.id = t.dtype WHERE t.id = ?1",
    [Q_SAVED] = "SELECT v.seq, l.text, v.tensor, v.version, v.is_output "
                "FROM saved_tensors v JOIN strings l ON l.id = v.slot "
                "WHERE v.node = ?1 ORDER BY v.seq",
    [Q_PLAN] = "SELECT (SELECT count(*) FROM saved_tensors WHERE node = ?1), "
               "(SELECT k.user_frame FROM nodes n JOIN ops o ON o.seq = n.op "
               "JOIN stacks k ON k.id = o.stack WHERE n.id = ?1)",
    [Q_OP] = "SELECT s.text, o.stack FROM ops o "
             "JOIN strings s ON s.id = o.name WHERE o.seq = ?1",
    [Q_BACKWARD] = "SELECT a.text, b.stack, b.status FROM backward_calls b "
                   "JOIN strings a ON a.id = b.api WHERE b.id = ?1",
    /* the node's name, line, leaf, and the dtypes and shapes of its
     * outputs, saved tensors and leaf variable (same_block) */
    [Q_SIG] = "SELECT n.name, k.user_frame, n.variable, "
              "coalesce((SELECT group_concat(x, ';') FROM (SELECT coalesce(t.dtype, '') "
              " || t.shape AS x FROM node_outputs no JOIN tensors t ON t.id = no.tensor "
              " WHERE no.node = n.id ORDER BY no.output_nr)), '') || '|' || "
              "coalesce((SELECT group_concat(x, ';') FROM (SELECT coalesce(coalesce("
              " t.dtype, '') || t.shape, '?') AS x FROM saved_tensors v "
              " LEFT JOIN tensors t ON t.id = v.tensor "
              " WHERE v.node = n.id ORDER BY v.seq)), '') || '|' || "
              "coalesce((SELECT coalesce(t.dtype, '') || t.shape FROM tensors t "
              " WHERE t.id = n.variable), '') "
              "FROM nodes n LEFT JOIN ops o ON o.seq = n.op "
              "LEFT JOIN stacks k ON k.id = o.stack WHERE n.id = ?1",
};

typedef struct builder {
    gt_trace *trace;
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT];
    const gt_graph_options *opts;
    int64_t backward;
    gnode *nodes;
    size_t nnodes, capnodes;
    gedge *edges;
    size_t nedges, capedges;
    gt_map map;    /* node id -> index in nodes (common/gtmap.h) */
    gt_map locmap; /* stack id -> 1 + index in locs */
    gt_loc *locs;  /* the lines read (site_of), owned */
    size_t nlocs, caplocs;
    Agraph_t *g;
    gt_strbuf lab;       /* scratch for labels */
    gt_strbuf tmp;       /* scratch for names */
    char *cwd;           /* run.cwd, or NULL */
    int hops;            /* the focus radius drawn (adapted to the screen budget) */
    size_t partial_hops; /* rings beyond it drawn in part (BREADTH) */
    int focused;         /* 1: focus hid nodes */
    repeat *repeats;     /* blocks drawn once for repeats (collapse_repeats) */
    size_t nrepeats, caprepeats;
    size_t collapsed;    /* nodes they hide */
    int fold_saved;      /* 1: saved tensors listed in their node's label */
    size_t saved_folded; /* saved tensors not drawn as notes */
    unsigned char *said; /* said[i]: finding i is drawn as one of its group's
                            (opts->finding_lead), not on its own; or NULL */
} builder;               /* errors go to the trace's handle (gt_trace_errmsg) */

static int sql_fail(builder *b)
{
    return gt__trace_fail(b->trace, GT_ESQL, "cannot read trace %s: %s",
                          gt_trace_path(b->trace), sqlite3_errmsg(b->db));
}

static int oom(builder *b)
{
    return gt__trace_fail(b->trace, GT_ENOMEM, "cannot draw %s: out of memory",
                          gt_trace_path(b->trace));
}

/* The statement for `sql`, a string literal, prepared once and kept on
 * the trace (gt_trace_stmt), returned reset with no bindings; the caller
 * resets it when done. NULL when it cannot be prepared, with the message
 * on the trace: out of memory (oom), or the trace's SQLite error
 * (sql_fail). */
static sqlite3_stmt *stmt(builder *b, const char *sql)
{
    sqlite3_stmt *st = gt_trace_stmt(b->trace, sql);
    if (!st && gt_trace_errcode(b->trace) == GT_ENOMEM)
        oom(b);
    else if (!st)
        sql_fail(b);
    return st;
}

/* Column i as text, or NULL; out of memory (gt_column_text) sets the label
 * buffer's sticky flag, which every label's end checks. */
static const char *col_text(builder *b, sqlite3_stmt *st, int i)
{
    int oom = 0;
    const char *v = gt_column_text(st, i, &oom);
    if (oom)
        b->lab.oom = 1;
    return v;
}

/* cgraph's API takes char * for strings it only reads. */
static void set(void *obj, const char *name, const char *value)
{
    agsafeset(obj, (char *)name, (char *)value, (char *)"");
}

static Agnode_t *mknode(Agraph_t *g, const char *name)
{
    return agnode(g, (char *)name, 1);
}

static Agnode_t *findnode(Agraph_t *g, const char *name)
{
    return agnode(g, (char *)name, 0);
}

static Agedge_t *mkedge(Agraph_t *g, Agnode_t *tail, Agnode_t *head)
{
    return agedge(g, tail, head, NULL, 1);
}

/* Index in b->nodes of node id, or (size_t)-1 if it is not there. */
static size_t node_index(const builder *b, int64_t id)
{
    const uint64_t *v = id > 0 ? gt_map_get(&b->map, (uint64_t)id, 0, 0) : NULL;
    return v ? (size_t)*v : (size_t)-1;
}

/* Add node id (if new) to the list; its index in *idx. */
static int add_node(builder *b, int64_t id, size_t *idx)
{
    size_t i = node_index(b, id);
    if (i != (size_t)-1) {
        *idx = i;
        return 0;
    }
    if (GT_ALLOC_GROW(b->nodes, b->nnodes + 1, b->capnodes, 256) != 0)
        return oom(b);
    if (gt_map_put(&b->map, (uint64_t)id, 0, 0, b->nnodes) != 0)
        return oom(b);
    gnode *n = &b->nodes[b->nnodes];
    memset(n, 0, sizeof *n);
    n->id = id;
    n->dist = (size_t)-1;
    n->twin = b->nnodes;
    *idx = b->nnodes++;
    return 0;
}

static int add_edge(builder *b, size_t node, size_t next)
{
    if (GT_ALLOC_GROW(b->edges, b->nedges + 1, b->capedges, 256) != 0)
        return oom(b);
    b->edges[b->nedges].node = node;
    b->edges[b->nedges].next = next;
    b->nedges++;
    return 0;
}

/* Does finding f belong to the drawn backward call? */
static int finding_here(const builder *b, const gt_finding *f)
{
    if (b->said && b->said[f - b->opts->findings->v])
        return 0;
    if (f->backward)
        return f->backward == b->backward;
    return f->node && node_index(b, f->node) != (size_t)-1;
}

/* The directory the run started in (run.cwd), to shorten paths below it. */
static int load_cwd(builder *b)
{
    sqlite3_stmt *st = stmt(b, "SELECT cwd FROM run WHERE id = 1");
    int rc = 0;
    if (!st)
        return gt_trace_errcode(b->trace);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW && col_text(b, st, 0)) {
        if (!(b->cwd = strdup(col_text(b, st, 0))))
            rc = oom(b);
    } else if (step != SQLITE_ROW && step != SQLITE_DONE) {
        rc = sql_fail(b);
    }
    sqlite3_reset(st);
    return rc;
}

/* Pick the backward call: the option, else the one with findings (the
 * first to fail first), else the last one with a root node (a run killed
 * as a call began leaves that call without its roots), else the last. 0
 * if the trace has none. Returns 0, GT_EINVAL when the trace has no call
 * numbered as the option asks, or a negative GT_E* code; the message on
 * the trace. */
static int pick_backward(builder *b)
{
    sqlite3_stmt *st =
        stmt(b, "SELECT count(*), coalesce((SELECT max(backward) FROM "
                "backward_roots WHERE node IS NOT NULL), max(id)) FROM backward_calls");
    int64_t want = b->opts->backward, last = 0, count = 0;
    if (!st)
        return gt_trace_errcode(b->trace);
    if (sqlite3_step(st) != SQLITE_ROW) {
        int rc = sql_fail(b);
        sqlite3_reset(st);
        return rc;
    }
    count = sqlite3_column_int64(st, 0);
    last = sqlite3_column_int64(st, 1);
    sqlite3_reset(st);
    if (want) {
        if (!(st = stmt(b, "SELECT 1 FROM backward_calls WHERE id = ?1")))
            return gt_trace_errcode(b->trace);
        sqlite3_bind_int64(st, 1, want);
        int step = sqlite3_step(st), rc = 0;
        if (step == SQLITE_DONE)
            rc = gt__trace_fail(
                b->trace, GT_EINVAL, "trace %s has no backward call %lld (it has %lld)",
                gt_trace_path(b->trace), (long long)want, (long long)count);
        else if (step != SQLITE_ROW)
            rc = sql_fail(b);
        sqlite3_reset(st);
        if (rc == 0)
            b->backward = want;
        return rc;
    }
    const gt_findings *fs = b->opts->findings;
    b->backward = last;
    for (int pass = 0; fs && pass < 2; pass++) {
        for (size_t i = 0; i < fs->n; i++) {
            if (fs->v[i].backward > 0 && (pass == 1 || fs->v[i].first_to_fail)) {
                b->backward = fs->v[i].backward;
                return 0;
            }
        }
    }
    return 0;
}

/* Add node id (if new) to the list as a root of the drawing. Returns 0, or
 * GT_ENOMEM with the message on the trace. */
static int add_root(builder *b, int64_t id)
{
    size_t idx;
    int rc = add_node(b, id, &idx);
    if (rc == 0)
        b->nodes[idx].root = 1;
    return rc;
}

/* The node that made tensor `tensor` (its grad_fn) into *node, 0 if none.
 * Returns 0, or a negative GT_E* code with the message on the trace. */
static int grad_fn_of(builder *b, int64_t tensor, int64_t *node)
{
    sqlite3_stmt *st = stmt(b, "SELECT node FROM node_outputs WHERE tensor = ?1 LIMIT 1");
    int rc = 0;
    *node = 0;
    if (!st)
        return gt_trace_errcode(b->trace);
    sqlite3_bind_int64(st, 1, tensor);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        *node = sqlite3_column_int64(st, 0);
    else if (step != SQLITE_DONE)
        rc = sql_fail(b);
    sqlite3_reset(st);
    return rc;
}

/* Seed the node list with the roots of the backward call (or, without
 * one, every node no edge leads to). Returns 0, or a negative GT_E* code
 * with the message on the trace. */
static int seed_call_roots(builder *b)
{
    sqlite3_stmt *st = stmt(
        b, b->backward ? "SELECT node FROM backward_roots WHERE backward = ?1 AND "
                         "node IS NOT NULL ORDER BY pos"
                       : "SELECT id FROM nodes WHERE id NOT IN "
                         "(SELECT next FROM edges WHERE next IS NOT NULL) ORDER BY id");
    int rc = 0, step;
    if (!st)
        return gt_trace_errcode(b->trace);
    if (b->backward)
        sqlite3_bind_int64(st, 1, b->backward);
    while ((step = sqlite3_step(st)) == SQLITE_ROW)
        if ((rc = add_root(b, sqlite3_column_int64(st, 0))) != 0)
            break;
    if (!rc && step != SQLITE_DONE)
        rc = sql_fail(b);
    sqlite3_reset(st);
    return rc;
}

/* Add the nodes of the call's findings to the list. A root with no
 * grad_fn is drawn from the graph it was cut from (the grad_fn of the
 * tensor the cutting op took), as a root. Returns 0, or a negative GT_E*
 * code with the message on the trace. */
static int seed_findings(builder *b)
{
    const gt_findings *fs = b->opts->findings;
    int rc = 0;
    for (size_t i = 0; fs && i < fs->n && !rc && b->backward; i++) {
        const gt_finding *f = &fs->v[i];
        size_t idx;
        int64_t cut_from = 0;
        if (f->backward != b->backward)
            continue;
        if (f->node > 0 && (rc = add_node(b, f->node, &idx)) != 0)
            break;
        if (f->kind == GT_FINDING_ROOT_WITHOUT_GRAD && f->other > 0 &&
            (rc = grad_fn_of(b, f->other, &cut_from)) == 0 && cut_from)
            rc = add_root(b, cut_from);
    }
    return rc;
}

/* Seed the node list: the call's roots and its findings' nodes. Returns 0,
 * GT_EINVAL when that leaves nothing to draw, or a negative GT_E* code;
 * the message on the trace. */
static int seed_roots(builder *b)
{
    int rc;
    if ((rc = seed_call_roots(b)) != 0 || (rc = seed_findings(b)) != 0)
        return rc;
    if (b->nnodes == 0 && b->backward)
        return gt__trace_fail(b->trace, GT_EINVAL,
                              "backward call %lld of %s has no recorded graph to draw",
                              (long long)b->backward, gt_trace_path(b->trace));
    if (b->nnodes == 0)
        return gt__trace_fail(b->trace, GT_EINVAL,
                              "trace %s holds no autograd graph to draw",
                              gt_trace_path(b->trace));
    return 0;
}

/* Walk next edges from the seeds: every node of the backward's graph. */
static int walk(builder *b)
{
    sqlite3_stmt *st = b->q[Q_EDGES];
    for (size_t i = 0; i < b->nnodes; i++) {
        int64_t id = b->nodes[i].id;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t next = sqlite3_column_int64(st, 0);
            size_t j;
            int rc;
            if (next <= 0)
                continue;
            if ((rc = add_node(b, next, &j)) != 0 || (rc = add_edge(b, i, j)) != 0)
                return rc;
        }
        if (step != SQLITE_DONE)
            return sql_fail(b);
    }
    sqlite3_reset(st);
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The default drawing's node budget: a screen's worth, and room under the
 * layout limit for the notes and markers each node brings. */
static size_t screen_budget(const builder *b)
{
    size_t limit =
        b->opts->layout_limit ? b->opts->layout_limit : GT_GRAPH_DEFAULT_LAYOUT_LIMIT;
    return GT_GRAPH_SCREEN_NODES < limit / 4 ? GT_GRAPH_SCREEN_NODES : limit / 4;
}

/* ---- repeated blocks -------------------------------------------------- */

typedef struct nsig {
    int64_t name, frame; /* strings.id of the node's name; its op's user frame */
    int leaf;            /* accumulates into a leaf tensor */
    uint64_t shash;      /* hash of shapes */
    char *shapes;        /* dtypes and shapes of its tensors (Q_SIG), or NULL */
} nsig;

typedef struct rctx {
    const builder *b;
    size_t *seq;      /* node indexes in creation order (nodes.id) */
    size_t *rank;     /* node index -> position in seq */
    nsig *sig;        /* by position in seq */
    size_t *off, *nx; /* inputs of each node index, in edge order (CSR) */
    size_t work;      /* comparisons left */
} rctx;

static int sig_eq(const rctx *r, size_t x, size_t y)
{
    const nsig *u = &r->sig[x], *v = &r->sig[y];
    return u->name == v->name && u->frame == v->frame && u->leaf == v->leaf &&
           u->shash == v->shash &&
           (u->shapes == v->shapes ||
            (u->shapes && v->shapes && !strcmp(u->shapes, v->shapes)));
}

/* FNV-1a of s ("" for NULL). */
static uint64_t str_hash(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Are the p nodes from position a and those from position c the same
 * block: the same names created by the same lines in the same order, each
 * with as many inputs, an input inside its block at the same place in the
 * other, one outside outside (where: a time step's input differs)? */
static int same_block(rctx *r, size_t a, size_t c, size_t p)
{
    for (size_t j = 0; j < p; j++) {
        size_t x = r->seq[a + j], y = r->seq[c + j];
        if (r->work)
            r->work--;
        if (!sig_eq(r, a + j, c + j) ||
            r->off[x + 1] - r->off[x] != r->off[y + 1] - r->off[y])
            return 0;
        for (size_t k = r->off[x], l = r->off[y]; k < r->off[x + 1]; k++, l++) {
            size_t ix = r->rank[r->nx[k]] - a, iy = r->rank[r->nx[l]] - c;
            int inx = r->rank[r->nx[k]] >= a && ix < p;
            int iny = r->rank[r->nx[l]] >= c && iy < p;
            if (inx != iny || (inx && ix != iy))
                return 0;
        }
    }
    return 1;
}

/* Collapse the run of `count` blocks of p nodes from position start: the
 * blocks holding a root or a finding's node (keep) stay as they are; each
 * stretch of two or more others is drawn once, as its block next to a kept
 * one (the one before it, else the one after), else its first, the others
 * mapped onto it. */
static int collapse_run(builder *b, rctx *r, const unsigned char *keep, size_t start,
                        size_t p, size_t count)
{
    size_t k = 0;
    while (k < count) {
        int kept = 0;
        for (size_t j = 0; j < p && !kept; j++)
            kept = keep[r->seq[start + k * p + j]];
        if (kept) {
            k++;
            continue;
        }
        size_t a = k;
        for (; k < count; k++) {
            kept = 0;
            for (size_t j = 0; j < p && !kept; j++)
                kept = keep[r->seq[start + k * p + j]];
            if (kept)
                break;
        }
        size_t len = k - a;
        if (len < 2 || (len - 1) * p < REPEAT_MIN_HIDDEN)
            continue;
        size_t rep = a == 0 && k < count ? k - 1 : a;
        if (GT_ALLOC_GROW(b->repeats, b->nrepeats + 1, b->caprepeats, 4) != 0)
            return oom(b);
        b->repeats[b->nrepeats] =
            (repeat){.count = len, .size = p, .hidden = (len - 1) * p};
        b->nrepeats++;
        for (size_t m = a; m < k; m++) {
            for (size_t j = 0; j < p; j++) {
                gnode *g = &b->nodes[r->seq[start + m * p + j]];
                if (m == rep) {
                    g->repeat = b->nrepeats;
                    continue;
                }
                g->collapsed = 1;
                g->twin = r->seq[start + rep * p + j];
            }
        }
        b->collapsed += (len - 1) * p;
    }
    return 0;
}

/* Free what the repeat search holds (n: the nodes it was made for);
 * accepts a zeroed one. Can't fail. */
static void rctx_release(rctx *r, size_t n)
{
    free(r->seq);
    free(r->rank);
    for (size_t k = 0; r->sig && k < n; k++)
        free(r->sig[k].shapes);
    free(r->sig);
    free(r->off);
    free(r->nx);
}

/* Put the nodes in creation order, node ids ascending (ids are unique):
 * r->seq and r->rank. Returns 0, or GT_ENOMEM with the message on the
 * trace. */
static int order_by_creation(builder *b, rctx *r)
{
    size_t n = b->nnodes;
    int64_t *ids = malloc(n * sizeof *ids);
    if (!ids)
        return oom(b);
    for (size_t i = 0; i < n; i++)
        ids[i] = b->nodes[i].id;
    qsort(ids, n, sizeof *ids, cmp_i64);
    for (size_t k = 0; k < n; k++) {
        size_t i = node_index(b, ids[k]);
        r->seq[k] = i;
        r->rank[i] = k;
    }
    free(ids);
    return 0;
}

/* Read each node's signature (Q_SIG: name, line, leaf, dtypes and shapes)
 * into r->sig, by position in creation order. Returns 0, or a negative
 * GT_E* code with the message on the trace. */
static int read_signatures(builder *b, rctx *r)
{
    sqlite3_stmt *st = b->q[Q_SIG];
    int rc = 0;
    for (size_t k = 0; k < b->nnodes && !rc; k++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, b->nodes[r->seq[k]].id);
        int step = sqlite3_step(st);
        r->sig[k] = (nsig){0};
        if (step == SQLITE_ROW) {
            int o = 0;
            const char *sh = gt_column_text(st, 3, &o);
            r->sig[k] = (nsig){.name = sqlite3_column_int64(st, 0),
                               .frame = sqlite3_column_int64(st, 1),
                               .leaf = sqlite3_column_int64(st, 2) > 0,
                               .shash = str_hash(sh),
                               .shapes = sh ? strdup(sh) : NULL};
            if ((sh && !r->sig[k].shapes) || o)
                rc = oom(b);
        } else if (step != SQLITE_DONE) {
            rc = sql_fail(b);
        }
    }
    sqlite3_reset(st);
    return rc;
}

/* The inputs of each node index in edge order, in CSR form: those of node
 * i at r->nx[r->off[i] .. r->off[i + 1]). Returns 0, or GT_ENOMEM with the
 * message on the trace. */
static int index_inputs(builder *b, rctx *r)
{
    size_t n = b->nnodes;
    size_t *fill = calloc(n, sizeof *fill);
    if (!fill)
        return oom(b);
    for (size_t e = 0; e < b->nedges; e++)
        r->off[b->edges[e].node + 1]++;
    for (size_t i = 0; i < n; i++)
        r->off[i + 1] += r->off[i];
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->edges[e].node;
        r->nx[r->off[u] + fill[u]++] = b->edges[e].next;
    }
    free(fill);
    return 0;
}

/* Mark in keep[] the nodes no repeat may hide: the roots and the nodes of
 * the findings drawn here. Can't fail. */
static void mark_kept(const builder *b, unsigned char *keep)
{
    const gt_findings *fs = b->opts->findings;
    for (size_t i = 0; i < b->nnodes; i++)
        keep[i] = b->nodes[i].root != 0;
    for (size_t i = 0; fs && i < fs->n; i++) {
        size_t idx = node_index(b, fs->v[i].node);
        if (finding_here(b, &fs->v[i]) && idx != (size_t)-1)
            keep[idx] = 1;
    }
}

/* The longest run of matching blocks from position i: of every block size
 * p up to REPEAT_MAX_BLOCK (and half the nodes left), the one whose run of
 * two or more same_block copies covers the most nodes, the smallest on a
 * tie, while comparisons are left. Returns the nodes it covers, 0 if none;
 * the block size in *size and the copies in *count. */
static size_t best_run(rctx *r, size_t i, size_t n, size_t *size, size_t *count)
{
    size_t cover = 0;
    size_t pmax = (n - i) / 2 < REPEAT_MAX_BLOCK ? (n - i) / 2 : REPEAT_MAX_BLOCK;
    *size = *count = 0;
    for (size_t p = 1; p <= pmax && r->work; p++) {
        if (!sig_eq(r, i, i + p))
            continue;
        size_t c = 1;
        while (i + (c + 1) * p <= n && same_block(r, i, i + c * p, p))
            c++;
        if (c >= 2 && c * p > cover) {
            cover = c * p;
            *size = p;
            *count = c;
        }
    }
    return cover;
}

/* Find the runs greedily from the first node in creation order (best_run
 * at each position; a block must hold more than leaves) and collapse each
 * (collapse_run). Returns 0, or GT_ENOMEM with the message on the trace. */
static int find_repeats(builder *b, rctx *r, const unsigned char *keep)
{
    size_t n = b->nnodes;
    for (size_t i = 0; i < n && r->work;) {
        size_t size, count, cover = best_run(r, i, n, &size, &count);
        int inner = 0, rc;
        for (size_t j = 0; j < size && !inner; j++)
            inner = !r->sig[i + j].leaf;
        if (!cover || !inner) {
            i++;
            continue;
        }
        if ((rc = collapse_run(b, r, keep, i, size, count)) != 0)
            return rc;
        i += cover;
    }
    return 0;
}

/* Hide the leaves that only hidden repeats use (each layer's own
 * parameters) with them, counted among the hidden nodes of the block that
 * stands for those repeats. Returns 0, or GT_ENOMEM with the message on the
 * trace. */
static int hide_private_leaves(builder *b, const rctx *r, const unsigned char *keep)
{
    size_t n = b->nnodes;
    size_t *users = calloc(n, sizeof *users), *hid = calloc(n, sizeof *hid);
    size_t *via = calloc(n, sizeof *via);
    int rc = 0;
    if (!users || !hid || !via) {
        rc = oom(b);
        goto out;
    }
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->edges[e].node, v = b->edges[e].next;
        users[v]++;
        if (b->nodes[u].collapsed && b->nodes[u].twin != NO_TWIN) {
            hid[v]++;
            via[v] = b->nodes[b->nodes[u].twin].repeat;
        }
    }
    for (size_t i = 0; i < n; i++) {
        gnode *g = &b->nodes[i];
        if (g->collapsed || keep[i] || r->off[i + 1] != r->off[i] || !users[i] ||
            hid[i] != users[i] || !via[i])
            continue;
        g->collapsed = 1;
        g->twin = NO_TWIN;
        b->repeats[via[i] - 1].hidden++;
        b->collapsed++;
    }
out:
    free(users);
    free(hid);
    free(via);
    return rc;
}

/* Repeated structure is drawn once (TensorBoard's series, an unrolled RNN
 * folded back): in the default drawing of a graph larger than the screen
 * budget, nodes are taken in creation order (nodes.id: a loop over time
 * steps or over layers creates one block after another), and a run of two
 * or more consecutive blocks that match (same_block) is drawn as one block
 * in a cluster labelled "×N"; edges of the hidden repeats are drawn from and
 * to their copies in it (one repeat feeding the next: a dashed edge back
 * inside the block). Greedy from the first node: at each position, the
 * block size (up to REPEAT_MAX_BLOCK) whose run covers the most nodes, the
 * smallest on a tie; a block must hold more than leaves, and the repeats
 * hidden at least REPEAT_MIN_HIDDEN nodes. A root's or a finding's node is
 * never collapsed: its repeat is drawn as itself, the repeats on either side
 * folded apart. A leaf that only hidden repeats use (each layer's own
 * parameters) is hidden with them. Returns 0, or a negative GT_E* code
 * with the message on the trace. */
static int collapse_repeats(builder *b)
{
    size_t n = b->nnodes;
    rctx r = {.b = b, .work = REPEAT_WORK};
    unsigned char *keep = NULL;
    int rc = 0;

    if (b->opts->all || b->opts->hops >= 0 || n <= screen_budget(b))
        return 0;
    r.seq = malloc(n * sizeof *r.seq);
    r.rank = malloc(n * sizeof *r.rank);
    r.sig = calloc(n, sizeof *r.sig);
    r.off = calloc(n + 1, sizeof *r.off);
    r.nx = malloc((b->nedges + 1) * sizeof *r.nx);
    keep = calloc(n, 1);
    if (!r.seq || !r.rank || !r.sig || !r.off || !r.nx || !keep) {
        rc = oom(b);
        goto out;
    }
    if ((rc = order_by_creation(b, &r)) != 0 || (rc = read_signatures(b, &r)) != 0 ||
        (rc = index_inputs(b, &r)) != 0)
        goto out;
    mark_kept(b, keep);
    if ((rc = find_repeats(b, &r, keep)) == 0 && b->collapsed)
        rc = hide_private_leaves(b, &r, keep);
out:
    rctx_release(&r, n);
    free(keep);
    return rc;
}

/* The breadth-first walk of focus: the nodes reached, centres first and
 * then by distance, and the undirected adjacency it walks. */
typedef struct fwalk {
    size_t *queue; /* nodes reached: queue[0 .. tail) */
    size_t tail;
    size_t *off, *adj; /* node i's neighbours: adj[off[i] .. off[i + 1]) */
} fwalk;

/* Queue the nodes of the findings drawn here at distance 0, the centres.
 * Returns how many. Can't fail. */
static size_t queue_findings(builder *b, fwalk *w)
{
    const gt_findings *fs = b->opts->findings;
    for (size_t i = 0; fs && i < fs->n; i++) {
        size_t idx = node_index(b, fs->v[i].node);
        if (!finding_here(b, &fs->v[i]) || idx == (size_t)-1 || b->nodes[idx].dist == 0)
            continue;
        b->nodes[idx].dist = 0;
        w->queue[w->tail++] = idx;
    }
    return w->tail;
}

/* Queue the roots not hidden in a repeat at distance 0, the centres. Can't
 * fail. */
static void queue_roots(builder *b, fwalk *w)
{
    for (size_t i = 0; i < b->nnodes; i++) {
        if (b->nodes[i].root && !b->nodes[i].collapsed) {
            b->nodes[i].dist = 0;
            w->queue[w->tail++] = i;
        }
    }
}

/* The undirected adjacency of the nodes in CSR form (w->off, w->adj),
 * repeats drawn once taken as their copy in the block drawn
 * (collapse_repeats). Returns 0, or GT_ENOMEM with the message on the
 * trace. */
static int link_neighbours(builder *b, fwalk *w)
{
    size_t *fill = NULL;
    w->off = calloc(b->nnodes + 1, sizeof *w->off);
    w->adj = malloc((2 * b->nedges + 1) * sizeof *w->adj);
    if (!w->off || !w->adj || !(fill = calloc(b->nnodes, sizeof *fill)))
        return oom(b);
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->nodes[b->edges[e].node].twin, v = b->nodes[b->edges[e].next].twin;
        if (u == NO_TWIN || v == NO_TWIN || u == v)
            continue;
        w->off[u + 1]++;
        w->off[v + 1]++;
    }
    for (size_t i = 0; i < b->nnodes; i++)
        w->off[i + 1] += w->off[i];
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->nodes[b->edges[e].node].twin, v = b->nodes[b->edges[e].next].twin;
        if (u == NO_TWIN || v == NO_TWIN || u == v)
            continue;
        w->adj[w->off[u] + fill[u]++] = v;
        w->adj[w->off[v] + fill[v]++] = u;
    }
    free(fill);
    return 0;
}

/* Walk out from the queued centres, breadth first, to max_dist: each node
 * reached gets its distance and joins the queue. Can't fail. */
static void spread(builder *b, fwalk *w, size_t max_dist)
{
    for (size_t head = 0; head < w->tail;) {
        size_t u = w->queue[head++];
        if (b->nodes[u].dist >= max_dist)
            continue;
        for (size_t k = w->off[u]; k < w->off[u + 1]; k++) {
            size_t v = w->adj[k];
            if (b->nodes[v].dist != (size_t)-1)
                continue;
            b->nodes[v].dist = b->nodes[u].dist + 1;
            w->queue[w->tail++] = v;
        }
    }
}

/* The largest radius whose nodes fit the budget, at least 1 (when a node
 * lies that far), into *radius. Returns 0, or GT_ENOMEM with the message
 * on the trace. */
static int fit_radius(builder *b, const fwalk *w, size_t budget, size_t *radius)
{
    size_t deepest = 0, *per_dist;
    for (size_t k = 0; k < w->tail; k++)
        if (b->nodes[w->queue[k]].dist > deepest)
            deepest = b->nodes[w->queue[k]].dist;
    if (!(per_dist = calloc(deepest + 1, sizeof *per_dist)))
        return oom(b);
    for (size_t k = 0; k < w->tail; k++)
        per_dist[b->nodes[w->queue[k]].dist]++;
    size_t sum = per_dist[0];
    *radius = 0;
    for (size_t d = 1; d <= deepest; d++) {
        sum += per_dist[d];
        if (sum > budget && d > 1)
            break;
        *radius = d;
    }
    free(per_dist);
    return 0;
}

/* Mark the nodes reached within radius visible. Returns how many. */
static size_t show_within(builder *b, const fwalk *w, size_t radius)
{
    size_t shown = 0;
    for (size_t k = 0; k < w->tail; k++)
        if (b->nodes[w->queue[k]].dist <= radius) {
            b->nodes[w->queue[k]].visible = 1;
            shown++;
        }
    return shown;
}

/* A ring wider than the budget (a loss over a Cat of 39 time steps) would
 * stop the drawing at a node or two: the budget left goes, ring after
 * ring, to the first BREADTH neighbours of each drawn node one ring further
 * out (in the order of its edges: inputs by position), so the drawing
 * still shows a path or three through the model; each hidden set is
 * marked "… N more" on its node. The queue is reused: the frontier at
 * radius first. Returns the nodes now shown (shown before, counted in). */
static size_t show_partial_rings(builder *b, fwalk *w, size_t radius, size_t budget,
                                 size_t shown)
{
    size_t h = 0, t = 0;
    for (size_t k = 0; k < w->tail; k++)
        if (b->nodes[w->queue[k]].dist == radius)
            w->queue[t++] = w->queue[k]; /* the frontier; earlier entries done */
    while (h < t && shown < budget) {
        size_t u = w->queue[h++], taken = 0;
        for (size_t k = w->off[u]; k < w->off[u + 1] && taken < BREADTH && shown < budget;
             k++) {
            size_t v = w->adj[k];
            if (b->nodes[v].visible || b->nodes[v].dist != b->nodes[u].dist + 1)
                continue;
            b->nodes[v].visible = 1;
            w->queue[t++] = v;
            taken++;
            shown++;
            if (b->nodes[v].dist - radius > b->partial_hops)
                b->partial_hops = b->nodes[v].dist - radius;
        }
    }
    return shown;
}

/* Mark the nodes to draw: all, or those within `hops` of the centre.
 *
 * Without --hops the drawing is sized for a screen: at most
 * GT_GRAPH_SCREEN_NODES autograd nodes. A graph with no finding is drawn
 * whole when it is that small, else around its roots; around findings or
 * roots, the radius is the largest (up to the default, or unbounded around
 * roots) whose nodes fit the budget, at least 1. What is hidden is marked
 * on the boundary ("… N more") and counted in the title. The centres'
 * count in *centre_count. Returns 0, or GT_ENOMEM with the message on the
 * trace. */
static int focus(builder *b, size_t *centre_count)
{
    int explicit_hops = b->opts->hops >= 0;
    size_t max_dist = explicit_hops ? (size_t)b->opts->hops : GT_GRAPH_DEFAULT_HOPS;
    size_t budget = screen_budget(b), live = b->nnodes - b->collapsed;
    fwalk w = {0};
    int rc = 0;

    *centre_count = 0;
    b->hops = (int)max_dist;
    if (b->opts->all) {
        for (size_t i = 0; i < b->nnodes; i++)
            b->nodes[i].visible = 1;
        return 0;
    }
    if (!(w.queue = malloc((b->nnodes + 1) * sizeof *w.queue)))
        return oom(b);
    if (queue_findings(b, &w) == 0) {
        /* No finding here: everything if it fits a screen, else the roots. */
        if (live <= budget) {
            for (size_t i = 0; i < b->nnodes; i++)
                b->nodes[i].visible = !b->nodes[i].collapsed;
            goto out;
        }
        if (!explicit_hops)
            max_dist = (size_t)-2; /* as far as the budget allows */
        queue_roots(b, &w);
    }
    *centre_count = w.tail;
    if ((rc = link_neighbours(b, &w)) != 0)
        goto out;
    spread(b, &w, max_dist);
    /* The radius: as given, or the largest that fits the screen budget. */
    size_t radius = max_dist;
    if (!explicit_hops && (rc = fit_radius(b, &w, budget, &radius)) != 0)
        goto out;
    size_t shown = show_within(b, &w, radius);
    b->hops = radius > INT32_MAX ? INT32_MAX : (int)radius;
    b->focused = shown < live;
    if (!explicit_hops && shown < budget) {
        shown = show_partial_rings(b, &w, radius, budget, shown);
        b->focused = shown < live;
    }
out:
    free(w.queue);
    free(w.off);
    free(w.adj);
    return rc;
}

/* Append ", "-joined variable names of tensor (or of its view base: the
 * reading layer's gt_trace_names_nearest) to b->tmp; returns how many, or a
 * negative GT_E* code with the message on the trace. */
static int tensor_names(builder *b, int64_t tensor)
{
    const char *const *v;
    size_t n;
    int rc = gt_trace_names_nearest(b->trace, tensor, 1, &v, &n);
    if (rc < 0)
        return rc == GT_ENOMEM ? oom(b) : rc;
    for (size_t i = 0; i < n; i++) {
        if (i == NAMES_MAX) {
            gt_strbuf_adds(&b->tmp, ", \xe2\x80\xa6");
            break;
        }
        if (i)
            gt_strbuf_adds(&b->tmp, ", ");
        sb_text(&b->tmp, v[i], LABEL_CHARS / 2);
    }
    return n < NAMES_MAX ? (int)n : NAMES_MAX;
}

/* Append "dtype shape" and a line of variable names of a tensor to b->lab. */
static int describe_tensor(builder *b, int64_t tensor)
{
    sqlite3_stmt *st = b->q[Q_TENSOR];
    int rc = 0;
    if (tensor <= 0)
        return 0;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, tensor);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        sb_br(&b->lab);
        sb_text(&b->lab, col_text(b, st, 0) ? col_text(b, st, 0) : "?", LABEL_CHARS / 2);
        gt_strbuf_adds(&b->lab, " ");
        sb_text(&b->lab, col_text(b, st, 1), LABEL_CHARS / 2);
    } else if (step != SQLITE_DONE) {
        rc = sql_fail(b);
    }
    sqlite3_reset(st);
    if (rc)
        return rc;
    gt_strbuf_reset(&b->tmp);
    int names = tensor_names(b, tensor);
    if (names < 0)
        return names;
    if (names > 0) {
        sb_br(&b->lab);
        gt_strbuf_adds(&b->lab, gt_strbuf_str(&b->tmp));
    }
    return 0;
}

/* The user's line of stack `stack` into *l (gt_trace_user_loc; l->frame 0
 * when there is none): a copy of the builder's, read once per stack (the
 * nodes of a line share its stack), which the caller does not release.
 * Returns 0 or a negative GT_E* code with the message on the trace (*l
 * zeroed). */
static int site_of(builder *b, int64_t stack, gt_loc *l)
{
    memset(l, 0, sizeof *l);
    if (stack <= 0)
        return 0;
    const uint64_t *at = gt_map_get(&b->locmap, (uint64_t)stack, 0, 0);
    if (at) {
        *l = b->locs[*at - 1];
        return 0;
    }
    if (GT_ALLOC_GROW(b->locs, b->nlocs + 1, b->caplocs, 16) != 0)
        return oom(b);
    gt_loc got;
    int rc = gt_trace_user_loc(b->trace, stack, &got);
    if (rc < 0)
        return rc == GT_ENOMEM ? oom(b) : rc;
    if (gt_map_put(&b->locmap, (uint64_t)stack, 0, 0, b->nlocs + 1) != 0) {
        gt_loc_release(&got);
        return oom(b);
    }
    b->locs[b->nlocs++] = got;
    *l = got;
    return 0;
}

/* Append the op's user line (file:line, then its source) to sb, after a
 * line break when br. */
static void describe_site_to(gt_strbuf *sb, const gt_loc *l, int br)
{
    if (!l->frame)
        return;
    if (br)
        sb_br(sb);
    sb_loc(sb, l->file, l->line);
    if (l->code && l->code[0]) {
        sb_br(sb);
        sb_text(sb, l->code, LABEL_CHARS);
    }
}

static void describe_site(builder *b, const gt_loc *l)
{
    describe_site_to(&b->lab, l, 1);
}

static void set_tooltip_site(builder *b, void *obj, const gt_loc *l)
{
    if (!l->frame)
        return;
    /* Relative to the run's directory when it is below it. */
    const char *file = gt__path_below(l->file, b->cwd);
    gt_strbuf_reset(&b->tmp);
    sb_text(&b->tmp, file, 0);
    gt_strbuf_addf(&b->tmp, ":%lld", (long long)l->line);
    set(obj, "tooltip", gt_strbuf_str(&b->tmp));
}

/* Decide how saved tensors are drawn. Each one as a note beside its node
 * is what makes a model's graph wide (a batch norm saves six, a convolution
 * three): as torchviz does by default, a large drawing lists them in their
 * node's label instead ("saves input, weight"), except on the nodes of a
 * finding, whose notes carry the story (only the tensors the finding is
 * about: not a batch norm's running statistics). Drawn as notes: with
 * opts->saved, or when no finding is drawn and nodes and notes together
 * fit the screen budget. */
static int plan_saved(builder *b, size_t drawn)
{
    const gt_findings *fs = b->opts->findings;
    sqlite3_stmt *st = b->q[Q_PLAN];
    size_t total = 0;
    for (size_t i = 0; i < b->nnodes; i++) {
        if (!b->nodes[i].visible)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, b->nodes[i].id);
        if (sqlite3_step(st) != SQLITE_ROW) {
            sqlite3_reset(st);
            return sql_fail(b);
        }
        sqlite3_int64 n = sqlite3_column_int64(st, 0);
        b->nodes[i].nsaved = n > 0 ? (size_t)n : 0;
        b->nodes[i].frame = sqlite3_column_int64(st, 1);
        total += b->nodes[i].nsaved;
    }
    sqlite3_reset(st);
    int found = 0;
    for (size_t i = 0; fs && i < fs->n; i++) {
        size_t idx = node_index(b, fs->v[i].node);
        if (finding_here(b, &fs->v[i]) && idx != (size_t)-1)
            b->nodes[idx].keep_saved = found = 1;
    }
    /* with a finding drawn, only what it is about is a note */
    b->fold_saved = !b->opts->saved && (found || drawn + total > GT_GRAPH_SCREEN_NODES);
    return 0;
}

#define SCC_NONE ((size_t)-1)

/* Tarjan's strongly connected components over a graph in CSR form (the
 * edges of vertex v at adj[off[v] .. off[v + 1])), written iteratively: a
 * damaged trace may hold long paths or cycles. */
typedef struct scc {
    size_t *off, *adj;
    size_t *index, *low; /* per vertex: DFS number (SCC_NONE: not seen), low link */
    size_t *stack, sp;   /* the vertices of components not yet closed */
    size_t *call, cs;    /* the DFS path */
    size_t *pos;         /* per vertex on the path: its next edge */
    unsigned char *on;   /* on the stack */
    unsigned char *cyc;  /* in a component of more than one vertex */
    size_t counter;
} scc;

/* Allocate s for n vertices and up to `edges` edges, none seen yet.
 * Returns 0, or -1 when out of memory (scc_release frees what was made). */
static int scc_alloc(scc *s, size_t n, size_t edges)
{
    memset(s, 0, sizeof *s);
    s->off = calloc(n + 1, sizeof *s->off);
    s->adj = malloc((edges + 1) * sizeof *s->adj);
    s->index = malloc(n * sizeof *s->index);
    s->low = malloc(n * sizeof *s->low);
    s->stack = malloc(n * sizeof *s->stack);
    s->call = malloc(n * sizeof *s->call);
    s->pos = malloc(n * sizeof *s->pos);
    s->on = calloc(n, 1);
    s->cyc = calloc(n, 1);
    if (!s->off || !s->adj || !s->index || !s->low || !s->stack || !s->call || !s->pos ||
        !s->on || !s->cyc)
        return -1;
    for (size_t i = 0; i < n; i++)
        s->index[i] = SCC_NONE;
    return 0;
}

/* Free what s holds; accepts a zeroed one. Can't fail. */
static void scc_release(scc *s)
{
    free(s->off);
    free(s->adj);
    free(s->index);
    free(s->low);
    free(s->stack);
    free(s->call);
    free(s->pos);
    free(s->on);
    free(s->cyc);
}

/* Number vertex v, and push it on the stack and on the DFS path. */
static void scc_enter(scc *s, size_t v)
{
    s->index[v] = s->low[v] = s->counter++;
    s->stack[s->sp++] = v;
    s->on[v] = 1;
    s->pos[v] = s->off[v];
    s->call[s->cs++] = v;
}

/* Vertex v's edges are done: leave it, and when it roots a component pop
 * the component, marking it in s->cyc if it holds more than v. */
static void scc_leave(scc *s, size_t v)
{
    s->cs--;
    if (s->cs && s->low[v] < s->low[s->call[s->cs - 1]])
        s->low[s->call[s->cs - 1]] = s->low[v];
    if (s->low[v] != s->index[v])
        return;
    size_t size = 0, top = s->sp;
    do
        s->on[s->stack[--top]] = 0, size++;
    while (s->stack[top] != v);
    for (size_t k = top; size > 1 && k < s->sp; k++)
        s->cyc[s->stack[k]] = 1;
    s->sp = top;
}

/* The depth-first search of Tarjan's algorithm from vertex r, not seen
 * yet. Can't fail. */
static void scc_from(scc *s, size_t r)
{
    scc_enter(s, r);
    while (s->cs) {
        size_t v = s->call[s->cs - 1];
        if (s->pos[v] == s->off[v + 1]) {
            scc_leave(s, v);
            continue;
        }
        size_t w = s->adj[s->pos[v]++];
        if (s->index[w] == SCC_NONE)
            scc_enter(s, w);
        else if (s->on[w] && s->index[w] < s->low[v])
            s->low[v] = s->index[w];
    }
}

/* rep[i]: the first node of node i's group (its frame's, within its
 * block drawn once), or i itself when not grouped. Can't fail. */
static void group_heads(const builder *b, size_t *rep)
{
    for (size_t i = 0; i < b->nnodes; i++) {
        rep[i] = i;
        if (!b->nodes[i].grouped)
            continue;
        for (size_t j = 0; j < i; j++) {
            if (b->nodes[j].grouped && b->nodes[j].frame == b->nodes[i].frame &&
                b->nodes[j].repeat == b->nodes[i].repeat) {
                rep[i] = j;
                break;
            }
        }
    }
}

/* The graph of the groups into s's CSR arrays: an edge between the heads
 * (rep) of each edge's ends, from input to user, where both are drawn and
 * in different groups. s->pos is the scratch. Can't fail. */
static void link_groups(const builder *b, const size_t *rep, scc *s)
{
    size_t n = b->nnodes;
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->edges[e].next, v = b->edges[e].node;
        if (b->nodes[u].visible && b->nodes[v].visible && rep[u] != rep[v])
            s->off[rep[u] + 1]++;
    }
    for (size_t i = 0; i < n; i++)
        s->off[i + 1] += s->off[i];
    memcpy(s->pos, s->off, n * sizeof *s->pos);
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->edges[e].next, v = b->edges[e].node;
        if (b->nodes[u].visible && b->nodes[v].visible && rep[u] != rep[v])
            s->adj[s->pos[rep[u]]++] = rep[v];
    }
}

/* A group is drawn as one box over a range of ranks, so the groups must
 * not form a cycle once each is taken as one node: a Python loop's lines
 * (`y = conv(h)` then `h = act(bn(y))`, ten times) interleave, and dot
 * would turn edges upwards to keep each box whole. Groups in a strongly
 * connected component of that quotient graph (Tarjan's algorithm, scc)
 * are ungrouped; what remains is acyclic, since splitting groups cannot
 * make a cycle that did not pass through one of them. Returns 0, or
 * GT_ENOMEM with the message on the trace. */
static int ungroup_cycles(builder *b)
{
    size_t n = b->nnodes, *rep = NULL;
    scc s = {0};
    int rc = 0;
    if (!n)
        return 0;
    if (!(rep = malloc(n * sizeof *rep)) || scc_alloc(&s, n, b->nedges) != 0) {
        rc = oom(b);
        goto out;
    }
    group_heads(b, rep);
    link_groups(b, rep, &s);
    for (size_t r = 0; r < n; r++)
        if (rep[r] == r && b->nodes[r].visible && s.index[r] == SCC_NONE)
            scc_from(&s, r);
    for (size_t i = 0; i < n; i++)
        if (s.cyc[rep[i]])
            b->nodes[i].grouped = 0;
out:
    free(rep);
    scc_release(&s);
    return rc;
}

/* A block drawn once whose nodes one line made (a module's call in a
 * loop) is labelled with that line itself, its nodes with their names:
 * each repeat's frame becomes that line, or 0 when its drawn nodes come
 * from several (a leaf has no line). Can't fail. */
static void site_repeats(builder *b)
{
    for (size_t r = 0; r < b->nrepeats; r++)
        b->repeats[r].frame = -1; /* no node seen yet */
    for (size_t i = 0; i < b->nnodes; i++) {
        gnode *g = &b->nodes[i];
        if (!g->visible || !g->repeat || g->frame <= 0)
            continue;
        repeat *v = &b->repeats[g->repeat - 1];
        if (v->frame == -1)
            v->frame = g->frame > 0 ? g->frame : 0;
        else if (v->frame != g->frame)
            v->frame = 0;
    }
    for (size_t r = 0; r < b->nrepeats; r++)
        if (b->repeats[r].frame < 0)
            b->repeats[r].frame = 0;
}

/* 1 if node g may join its line's group: drawn, made by a line, not a
 * finding's node, and not in a block labelled with its line already. */
static int groupable(const builder *b, const gnode *g)
{
    return g->visible && g->frame > 0 && !g->keep_saved &&
           !(g->repeat && b->repeats[g->repeat - 1].frame);
}

/* Group the groupable nodes whose line made two or more of them. Returns
 * 0, or GT_ENOMEM with the message on the trace. */
static int group_by_line(builder *b)
{
    int64_t *frames = malloc((b->nnodes ? b->nnodes : 1) * sizeof *frames);
    size_t n = 0;
    if (!frames)
        return oom(b);
    for (size_t i = 0; i < b->nnodes; i++)
        if (groupable(b, &b->nodes[i]))
            frames[n++] = b->nodes[i].frame;
    qsort(frames, n, sizeof *frames, cmp_i64);
    for (size_t i = 0; i < b->nnodes; i++) {
        gnode *g = &b->nodes[i];
        if (!groupable(b, g))
            continue;
        int64_t *hit = bsearch(&g->frame, frames, n, sizeof *frames, cmp_i64);
        /* the first and the last of the run of equal frames */
        g->grouped = hit && ((hit > frames && hit[-1] == g->frame) ||
                             (hit + 1 < frames + n && hit[1] == g->frame));
    }
    free(frames);
    return 0;
}

/* A line's nodes inside a block drawn once for repeats and outside it
 * make two groups (one inside the block's cluster); one node alone in
 * either keeps its full label. Can't fail. */
static void ungroup_single(builder *b)
{
    for (size_t i = 0; i < b->nnodes && b->collapsed; i++) {
        gnode *g = &b->nodes[i];
        size_t same = 0;
        for (size_t j = 0; j < b->nnodes && g->grouped && same < 2; j++)
            same += b->nodes[j].grouped && b->nodes[j].frame == g->frame &&
                    b->nodes[j].repeat == g->repeat;
        if (g->grouped && same < 2)
            g->grouped = 2; /* ungrouped below, once every count is made */
    }
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i].grouped == 2)
            b->nodes[i].grouped = 0;
}

/* Group the nodes one line of the user's code created (a module's call:
 * `output, hidden = self.rnn(emb, hidden)` makes dozens), as TensorBoard
 * groups a name scope: a cluster labelled once with the line and its
 * source, holding nodes labelled with their names only. A line with a
 * single drawn node, and a finding's node, keep their full labels; groups
 * that would form a cycle are undone (ungroup_cycles). Returns 0, or
 * GT_ENOMEM with the message on the trace. */
static int plan_groups(builder *b)
{
    int rc;
    site_repeats(b);
    if ((rc = group_by_line(b)) != 0)
        return rc;
    ungroup_single(b);
    return ungroup_cycles(b);
}

/* The cluster of the block drawn once for repeats number r (1-based),
 * labelled "×N", and with the line that made it (l, a node's)
 * when one line made every node drawn in it. NULL when out of memory. */
static Agraph_t *repeat_cluster(builder *b, size_t r, const gt_loc *l)
{
    char name[48];
    repeat *v = &b->repeats[r - 1];
    int has_line = l->frame != 0;
    snprintf(name, sizeof name, "cluster_repeat%zu", r);
    Agraph_t *sub = agsubg(b->g, name, 0);
    if (sub && (!v->frame || v->sited || !has_line))
        return sub;
    if (!sub) {
        if (!(sub = agsubg(b->g, name, 1)))
            return NULL;
        set(sub, "style", "bold,rounded");
        set(sub, "color", "steelblue");
        set(sub, "fontcolor", "steelblue4");
        set(sub, "fontsize", "14");
        set(sub, "labeljust", "l");
        set(sub, "class", "gt-repeat");
    }
    /* the label, with the line once a node that has one comes (the
     * block's first node may be a leaf) */
    gt_strbuf_reset(&b->tmp);
    gt_strbuf_addf(&b->tmp, "\xc3\x97%zu", v->count);
    sb_br(&b->tmp);
    gt_strbuf_addf(&b->tmp, "%zu nodes drawn once for %zu repeats (%zu hidden)", v->size,
                   v->count, v->hidden);
    if (v->frame && has_line) {
        describe_site_to(&b->tmp, l, 1);
        v->sited = 1;
    }
    if (b->tmp.oom)
        return NULL;
    set(sub, "label", gt_strbuf_str(&b->tmp));
    return sub;
}

/* The cluster of node i's frame, made on first use and labelled from the
 * node's line l. NULL when out of memory. */
static Agraph_t *group_of(builder *b, size_t i, const gt_loc *l)
{
    char name[64];
    Agraph_t *parent = b->g;
    if (b->nodes[i].repeat) {
        snprintf(name, sizeof name, "cluster_line%lld_repeat%zu",
                 (long long)b->nodes[i].frame, b->nodes[i].repeat);
        if (!(parent = repeat_cluster(b, b->nodes[i].repeat, l)))
            return NULL;
    } else {
        snprintf(name, sizeof name, "cluster_line%lld", (long long)b->nodes[i].frame);
    }
    Agraph_t *sub = agsubg(parent, name, 0);
    if (sub)
        return sub;
    if (!(sub = agsubg(parent, name, 1)))
        return NULL;
    gt_strbuf_reset(&b->tmp);
    describe_site_to(&b->tmp, l, 0);
    if (b->tmp.oom)
        return NULL;
    set(sub, "label", gt_strbuf_str(&b->tmp));
    set(sub, "style", "dashed,rounded");
    set(sub, "color", "grey50");
    set(sub, "fontname", "monospace");
    set(sub, "fontsize", "10");
    set(sub, "labeljust", "l");
    set(sub, "class", "gt-group");
    return sub;
}

/* Append "saves slot, slot, +N" to b->lab: node i's folded saved tensors. */
static int describe_folded(builder *b, size_t i)
{
    sqlite3_stmt *st = b->q[Q_SAVED];
    size_t k = 0, shown = 0;
    int step;
    sb_br(&b->lab);
    gt_strbuf_adds(&b->lab, "saves ");
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b->nodes[i].id);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (k++ < FOLD_SLOTS) {
            if (shown++)
                gt_strbuf_adds(&b->lab, ", ");
            sb_text(&b->lab, col_text(b, st, 1), LABEL_CHARS / 4);
        }
    }
    sqlite3_reset(st);
    if (step != SQLITE_DONE)
        return sql_fail(b);
    if (k > shown)
        gt_strbuf_addf(&b->lab, ", +%zu", k - shown);
    b->saved_folded += k;
    return 0;
}

/* Is saved tensor `seq` (saved_tensors.seq) one a finding drawn here is
 * about? A finding's node notes only those unless opts->saved: a batch
 * norm's running statistics, a convolution's weight are no part of it. */
static int finding_saved(const builder *b, int64_t seq)
{
    const gt_findings *fs = b->opts->findings;
    for (size_t i = 0; fs && i < fs->n; i++)
        if (fs->v[i].saved_seq == seq && finding_here(b, &fs->v[i]))
            return 1;
    return 0;
}

/* Does node i save a tensor no finding is about, while one is (the others
 * are then listed in its label, not drawn)? */
static int saves_others(builder *b, size_t i)
{
    if (b->opts->saved || !b->nodes[i].keep_saved)
        return 0;
    sqlite3_stmt *st = b->q[Q_SAVED];
    int mine = 0, others = 0;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b->nodes[i].id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (finding_saved(b, sqlite3_column_int64(st, 0)))
            mine = 1;
        else
            others = 1;
    }
    sqlite3_reset(st);
    return mine && others;
}

/* Append a line with the module path of the op's stack (modpath.h: the
 * innermost module, "layer3.1.conv2") to b->lab, when it has one. */
static int describe_module(builder *b, int64_t stack)
{
    char *m = NULL;
    int rc = gt_trace_stack_module(b->trace, stack, 1, &m);
    if (rc)
        return rc; /* the message is on the trace */
    if (m && *m) {
        sb_br(&b->lab);
        sb_text(&b->lab, m, LABEL_CHARS);
    }
    free(m);
    return 0;
}

/* Draw autograd node i. */
static int draw_node(builder *b, size_t i)
{
    gnode *n = &b->nodes[i];
    sqlite3_stmt *st = b->q[Q_NODE];
    char name[48];
    int64_t variable = 0;
    int rc = 0;

    snprintf(name, sizeof name, "n%lld", (long long)n->id);
    n->an = mknode(b->g, name);
    if (!n->an)
        return oom(b);
    gt_strbuf_reset(&b->lab);
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, n->id);
    int step = sqlite3_step(st);
    gt_loc l = {0};
    if (step == SQLITE_ROW) {
        sb_text(&b->lab, col_text(b, st, 0), LABEL_CHARS);
        variable = sqlite3_column_int64(st, 1);
        rc = describe_module(b, sqlite3_column_int64(st, 2));
        if (rc == 0)
            rc = site_of(b, sqlite3_column_int64(st, 2), &l);
    }
    if (step == SQLITE_ROW && rc == 0) {
        if (n->grouped) {
            Agraph_t *sub = group_of(b, i, &l);
            if (!sub || !agsubnode(sub, n->an, 1))
                rc = oom(b);
        } else {
            if (n->repeat) {
                Agraph_t *sub = repeat_cluster(b, n->repeat, &l);
                if (!sub || !agsubnode(sub, n->an, 1))
                    rc = oom(b);
            }
            if (!n->repeat || !b->repeats[n->repeat - 1].frame)
                describe_site(b, &l);
        }
        set_tooltip_site(b, n->an, &l);
    } else if (step == SQLITE_DONE) {
        gt_strbuf_addf(&b->lab, "(node %lld not recorded)", (long long)n->id);
    } else if (step != SQLITE_ROW) {
        rc = sql_fail(b);
    }
    sqlite3_reset(st);
    if (rc)
        return rc;
    if (variable > 0 && (rc = describe_tensor(b, variable)) != 0)
        return rc;
    if (((b->fold_saved && !n->keep_saved && n->nsaved) || saves_others(b, i)) &&
        (rc = describe_folded(b, i)) != 0)
        return rc;
    if (n->root) {
        sb_br(&b->lab);
        gt_strbuf_adds(&b->lab, "(backward root)");
    }
    if (b->lab.oom)
        return oom(b);
    set(n->an, "label", gt_strbuf_str(&b->lab));
    const char *cls = n->root
                          ? (variable > 0 ? "gt-node gt-leaf gt-root" : "gt-node gt-root")
                          : (variable > 0 ? "gt-node gt-leaf" : "gt-node");
    set(n->an, "class", cls);
    if (variable > 0)
        set(n->an, "fillcolor", "lightblue");
    else if (n->root)
        set(n->an, "fillcolor", "darkolivegreen1");
    return 0;
}

/* Draw the saved tensors of autograd node i. */
static int draw_saved(builder *b, size_t i)
{
    sqlite3_stmt *st = b->q[Q_SAVED];
    int rc = 0;
    int step;
    if (b->fold_saved && !b->nodes[i].keep_saved)
        return 0;
    /* Q_SAVED stays stepped while describe_tensor uses other statements. */
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b->nodes[i].id);
    int only_found = saves_others(b, i);
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b->nodes[i].id);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        char name[48];
        if (only_found && !finding_saved(b, sqlite3_column_int64(st, 0)))
            continue;
        snprintf(name, sizeof name, "s%lld", (long long)sqlite3_column_int64(st, 0));
        Agnode_t *s = mknode(b->g, name);
        if (!s) {
            rc = oom(b);
            break;
        }
        gt_strbuf_reset(&b->lab);
        sb_text(&b->lab, col_text(b, st, 1), LABEL_CHARS / 2);
        gt_strbuf_adds(&b->lab,
                       sqlite3_column_int(st, 4) ? " (saved output)" : " (saved)");
        if ((rc = describe_tensor(b, sqlite3_column_int64(st, 2))) != 0)
            break;
        sb_br(&b->lab);
        gt_strbuf_addf(&b->lab, "saved at version %lld",
                       (long long)sqlite3_column_int64(st, 3));
        if (b->lab.oom) {
            rc = oom(b);
            break;
        }
        set(s, "label", gt_strbuf_str(&b->lab));
        set(s, "shape", "note");
        set(s, "fillcolor", "orange");
        set(s, "class", "gt-saved");
        Agedge_t *e = mkedge(b->g, s, b->nodes[i].an);
        if (!e) {
            rc = oom(b);
            break;
        }
        set(e, "dir", "none");
        set(e, "class", "gt-saves");
    }
    if (!rc && step != SQLITE_DONE)
        rc = sql_fail(b);
    sqlite3_reset(st);
    return rc;
}

/* Findings that say the same (opts->finding_lead: the same line in each of
 * six blocks) are drawn once: b->said marks all of a group but the one
 * drawn, the first to fail among them, else the group's first. Returns 0,
 * or GT_ENOMEM with the message on the trace. */
static int plan_said(builder *b)
{
    const gt_findings *fs = b->opts->findings;
    const size_t *lead = b->opts->finding_lead;
    if (!fs || !lead || !fs->n)
        return 0;
    if (!(b->said = calloc(fs->n, 1)))
        return gt__trace_fail(b->trace, GT_ENOMEM, "out of memory");
    for (size_t i = 0; i < fs->n; i++) {
        if (lead[i] >= fs->n)
            continue;
        size_t pick = lead[i];
        for (size_t j = 0; j < fs->n; j++)
            if (lead[j] == lead[i] && fs->v[j].first_to_fail) {
                pick = j;
                break;
            }
        b->said[i] = pick != i;
    }
    return 0;
}

/* Finding i drawn for its group: "×N in blocks.0–5.mlp" (gt_module_span
 * of the modules that made the group's nodes) added to its node's label
 * when the group has more than one. */
static int label_said(builder *b, size_t i)
{
    const gt_findings *fs = b->opts->findings;
    const size_t *lead = b->opts->finding_lead;
    size_t idx = node_index(b, fs->v[i].node);
    if (!lead || lead[i] >= fs->n || idx == (size_t)-1 || !b->nodes[idx].an)
        return 0;
    const char **paths = calloc(fs->n, sizeof *paths);
    size_t n = 0, count = 0;
    int rc = paths ? 0 : gt__trace_fail(b->trace, GT_ENOMEM, "out of memory");
    sqlite3_stmt *st =
        rc ? NULL
           : gt_trace_stmt(b->trace, "SELECT o.stack FROM nodes n JOIN ops o"
                                     " ON o.seq = n.op WHERE n.id = ?1");
    if (!rc && !st)
        rc = GT_ESQL;
    for (size_t j = 0; !rc && j < fs->n; j++) {
        if (lead[j] != lead[i] || fs->v[j].backward != fs->v[i].backward)
            continue;
        count++;
        sqlite3_bind_int64(st, 1, fs->v[j].node);
        int64_t stack = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_reset(st);
        char *m = NULL;
        if ((rc = gt_trace_stack_module(b->trace, stack, 0, &m)) == 0 && m)
            paths[n++] = m;
    }
    if (!rc && count > 1) {
        Agnode_t *an = b->nodes[idx].an;
        gt_strbuf_reset(&b->lab);
        gt_strbuf_adds(&b->lab, agget(an, (char *)"label"));
        sb_br(&b->lab);
        gt_strbuf_addf(&b->lab, "\xc3\x97%zu", count);
        gt_strbuf_reset(&b->tmp);
        if (n == count && gt_module_span(paths, n, &b->tmp)) {
            gt_strbuf_adds(&b->lab, " in ");
            sb_text(&b->lab, gt_strbuf_str(&b->tmp), LABEL_CHARS);
        }
        gt_strbuf_adds(&b->lab, ": the same finding in each");
        if (b->lab.oom || b->tmp.oom)
            rc = oom(b);
        else
            set(an, "label", gt_strbuf_str(&b->lab));
    }
    for (size_t j = 0; j < n; j++)
        free((char *)paths[j]);
    free(paths);
    return rc;
}

/* Draw finding f: its mutations, what they invalidated, where it fails. */
static int draw_finding(builder *b, const gt_finding *f)
{
    char name[48];
    size_t idx = node_index(b, f->node);
    Agnode_t *node = idx == (size_t)-1 ? NULL : b->nodes[idx].an;
    Agnode_t *target = node, *saved = NULL;
    int rc = 0;

    if (f->saved_seq > 0) {
        snprintf(name, sizeof name, "s%lld", (long long)f->saved_seq);
        saved = findnode(b->g, name);
        if (saved)
            target = saved;
    }
    if (!target)
        return 0;
    if (saved) {
        gt_strbuf_reset(&b->lab);
        gt_strbuf_adds(&b->lab, agget(saved, (char *)"label"));
        sb_br(&b->lab);
        gt_strbuf_addf(&b->lab, "version %lld when backward ran",
                       (long long)f->version_at_backward);
        if (b->lab.oom)
            return oom(b);
        set(saved, "label", gt_strbuf_str(&b->lab));
        set(saved, "color", "red");
        set(saved, "penwidth", "2");
        set(saved, "class", "gt-saved gt-invalidated");
    }
    if (node && f->first_to_fail) {
        set(node, "color", "red");
        set(node, "penwidth", "3");
        gt_strbuf_reset(&b->lab);
        gt_strbuf_adds(&b->lab, agget(node, (char *)"label"));
        sb_br(&b->lab);
        gt_strbuf_adds(&b->lab, "backward fails here");
        if (b->lab.oom)
            return oom(b);
        set(node, "label", gt_strbuf_str(&b->lab));
        gt_strbuf_reset(&b->lab);
        gt_strbuf_adds(&b->lab, agget(node, (char *)"class"));
        gt_strbuf_adds(&b->lab, " gt-fail");
        set(node, "class", gt_strbuf_str(&b->lab));
    }
    Agnode_t *prev = NULL;
    for (size_t k = 0; k < f->n_mutations; k++) {
        const gt_mutation *m = &f->mutations[k];
        sqlite3_stmt *st = b->q[Q_OP];
        snprintf(name, sizeof name, "m%lld", (long long)m->seq);
        Agnode_t *mn = findnode(b->g, name);
        if (!mn) {
            if (!(mn = mknode(b->g, name)))
                return oom(b);
            gt_strbuf_reset(&b->lab);
            sqlite3_reset(st);
            sqlite3_bind_int64(st, 1, m->seq);
            int step = sqlite3_step(st);
            if (step == SQLITE_ROW) {
                gt_loc l;
                sb_text(&b->lab, col_text(b, st, 0), LABEL_CHARS);
                if ((rc = site_of(b, sqlite3_column_int64(st, 1), &l)) == 0) {
                    describe_site(b, &l);
                    set_tooltip_site(b, mn, &l);
                }
            } else if (step == SQLITE_DONE) {
                gt_strbuf_addf(&b->lab, "op %lld", (long long)m->seq);
            } else {
                rc = sql_fail(b);
            }
            sqlite3_reset(st);
            if (rc)
                return rc;
            sb_br(&b->lab);
            if (m->bump_seq > 0 && m->version_after >= 0)
                gt_strbuf_addf(&b->lab, "\xe2\x86\x92 version %lld",
                               (long long)m->version_after);
            else
                gt_strbuf_adds(&b->lab, "writes without a version bump");
            if (b->lab.oom)
                return oom(b);
            set(mn, "label", gt_strbuf_str(&b->lab));
            set(mn, "fillcolor", "#ffd6d6");
            set(mn, "color", "red");
            set(mn, "fontcolor", "red3");
            set(mn, "class", "gt-mutation");
        }
        Agedge_t *e = mkedge(b->g, mn, target);
        if (!e)
            return oom(b);
        set(e, "color", "red");
        set(e, "penwidth", "1.5");
        set(e, "class", "gt-invalidates");
        /* Stack the mutations in order, one rank each, rather than in a
         * wide row: an invisible edge from the previous one. */
        if (prev && prev != mn && !agedge(b->g, prev, mn, NULL, 0)) {
            Agedge_t *order = mkedge(b->g, prev, mn);
            if (!order)
                return oom(b);
            set(order, "style", "invis");
            set(order, "class", "gt-order");
        }
        prev = mn;
    }
    return 0;
}

/* Wide rows stay readable: dot puts every leaf (a parameter's
 * AccumulateGrad, a saved tensor's note, a "more" marker) hanging off one
 * rank into one row, which is what makes a model's graph thousands of
 * pixels wide. As Graphviz's `unflatten -l 3` does, the edges of nodes with
 * a single edge get lengths 1, 2, 3 in turn, so such a row becomes three
 * rows a third as wide. Done only when there are enough leaves to matter. */
static int stagger_leaves(builder *b)
{
    size_t leaves = 0, k = 0;
    for (Agnode_t *n = agfstnode(b->g); n; n = agnxtnode(b->g, n))
        if (agdegree(b->g, n, 1, 1) == 1)
            leaves++;
    if (leaves < STAGGER_MIN_LEAVES)
        return 0;
    for (Agnode_t *n = agfstnode(b->g); n; n = agnxtnode(b->g, n)) {
        if (agdegree(b->g, n, 1, 1) != 1)
            continue;
        Agedge_t *e = agfstout(b->g, n);
        if (!e)
            e = agfstin(b->g, n);
        const char *style = agget(e, (char *)"style");
        if (style && !strcmp(style, "invis"))
            continue;
        char len[4] = {(char)('1' + k++ % 3), '\0'};
        if (agsafeset(e, (char *)"minlen", len, (char *)"1") != 0)
            return oom(b);
    }
    return 0;
}

/* Long chains wrap into columns. A deep and narrow graph (an RNN, a deep
 * stack of layers: at most WRAP_WIDTH nodes side by side) laid out by dot is
 * one column thousands of pixels tall that drifts to the right with its
 * saved-tensor notes. Its autograd nodes are cut into columns of WRAP_RANKS
 * ranks (rank: the longest path from an input): edges between columns stop
 * constraining the ranks (constraint=false), so each column starts again
 * at the top beside the previous one, and the nodes of a column share a
 * `group`, which keeps it straight. The cut edges stay drawn (dashed). */
static int wrap_chains(builder *b)
{
    size_t *depth = NULL, *width = NULL, maxd = 0;
    unsigned char *inner = NULL; /* 1: has a drawn input (not a leaf) */
    int rc = 0, changed = 1;

    if (!(depth = calloc(b->nnodes ? b->nnodes : 1, sizeof *depth)) ||
        !(inner = calloc(b->nnodes ? b->nnodes : 1, 1))) {
        rc = oom(b);
        goto out;
    }
    for (size_t e = 0; e < b->nedges; e++)
        if (b->nodes[b->edges[e].next].visible && b->edges[e].next != b->edges[e].node)
            inner[b->edges[e].node] = 1;
    /* longest path, by relaxation (the graph is a DAG; bounded passes keep
     * a damaged trace's cycle from looping forever) */
    for (size_t pass = 0; changed && pass <= b->nnodes; pass++) {
        changed = 0;
        for (size_t e = 0; e < b->nedges; e++) {
            size_t u = b->edges[e].next, v = b->edges[e].node;
            if (!b->nodes[u].visible || !b->nodes[v].visible || u == v)
                continue;
            if (depth[v] < depth[u] + 1 && depth[u] + 1 <= b->nnodes) {
                depth[v] = depth[u] + 1;
                changed = 1;
            }
        }
    }
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i].visible && depth[i] > maxd)
            maxd = depth[i];
    if (!(width = calloc(maxd + 1, sizeof *width))) {
        rc = oom(b);
        goto out;
    }
    /* Leaves (a parameter's AccumulateGrad) hang beside the node they feed
     * and do not make the graph wide; the inner nodes do. */
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i].visible && inner[i] && ++width[depth[i]] > WRAP_WIDTH)
            goto out; /* wide: wrapping would tangle it */
    for (size_t i = 0; i < b->nnodes; i++) {
        if (!b->nodes[i].visible || !inner[i])
            continue;
        /* one column (straight, not drifting aside with its notes) when it
         * fits, else columns of WRAP_RANKS ranks */
        char group[32];
        snprintf(group, sizeof group, "column%zu",
                 maxd + 1 > WRAP_RANKS ? depth[i] / WRAP_RANKS : 0);
        set(b->nodes[i].an, "group", group);
    }
    for (size_t e = 0; e < b->nedges; e++) {
        size_t u = b->edges[e].next, v = b->edges[e].node;
        if (maxd + 1 <= WRAP_RANKS || !b->nodes[u].visible || !b->nodes[v].visible ||
            !inner[u] || depth[u] / WRAP_RANKS == depth[v] / WRAP_RANKS)
            continue;
        Agedge_t *ae = agedge(b->g, b->nodes[u].an, b->nodes[v].an, NULL, 0);
        if (!ae)
            continue;
        set(ae, "constraint", "false");
        set(ae, "style", "dashed");
    }
out:
    free(depth);
    free(width);
    free(inner);
    return rc;
}

/* Markers where focus hid neighbours of node i. */
static int draw_more(builder *b, size_t i)
{
    gnode *n = &b->nodes[i];
    char name[64];
    for (int dir = 0; dir < 2; dir++) {
        size_t count = dir == 0 ? n->hidden_in : n->hidden_out;
        if (!count)
            continue;
        snprintf(name, sizeof name, "%s%lld", dir == 0 ? "more_in_n" : "more_out_n",
                 (long long)n->id);
        Agnode_t *m = mknode(b->g, name);
        if (!m)
            return oom(b);
        gt_strbuf_reset(&b->lab);
        gt_strbuf_addf(&b->lab, "\xe2\x8b\xaf %zu more %s", count,
                       dir == 0 ? (count == 1 ? "input" : "inputs")
                                : (count == 1 ? "user" : "users"));
        set(m, "label", gt_strbuf_str(&b->lab));
        set(m, "shape", "plaintext");
        set(m, "style", "");
        set(m, "fontcolor", "grey40");
        set(m, "class", "gt-more");
        Agedge_t *e = dir == 0 ? mkedge(b->g, m, n->an) : mkedge(b->g, n->an, m);
        if (!e)
            return oom(b);
        set(e, "style", "dashed");
        set(e, "color", "grey60");
        set(e, "class", "gt-more");
    }
    return 0;
}

/* The legend: the kinds of box the drawing holds (saved tensors, mutations
 * and the failing node only when drawn). */
static int draw_legend(builder *b, int saved_notes, size_t findings)
{
    static const struct {
        const char *name, *label, *shape, *fill, *color, *penwidth;
    } items[] = {
        {"legend_node", "autograd node\\nforward op's file:line", "box", "lightgrey",
         "black", "1"},
        {"legend_leaf", "AccumulateGrad (leaf)\\nparameter name", "box", "lightblue",
         "black", "1"},
        {"legend_root", "backward root", "box", "darkolivegreen1", "black", "1"},
        {"legend_saved", "saved tensor: slot, dtype, shape,\\nnames, saved version",
         "note", "orange", "black", "1"},
        {"legend_mutation", "in-place op that changed it:\\nline, version it produced",
         "box", "#ffd6d6", "red", "1"},
        {"legend_fail", "node the backward fails on", "box", "lightgrey", "red", "3"},
    };
    Agraph_t *sub = agsubg(b->g, (char *)"cluster_legend", 1);
    if (!sub)
        return oom(b);
    set(sub, "label", "legend");
    set(sub, "style", "dashed");
    set(sub, "color", "grey60");
    Agnode_t *prev = NULL;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if ((!saved_notes && !strcmp(items[i].name, "legend_saved")) ||
            (!findings && (!strcmp(items[i].name, "legend_mutation") ||
                           !strcmp(items[i].name, "legend_fail"))))
            continue;
        Agnode_t *n = mknode(sub, items[i].name);
        if (!n)
            return oom(b);
        set(n, "label", items[i].label);
        set(n, "shape", items[i].shape);
        set(n, "fillcolor", items[i].fill);
        set(n, "color", items[i].color);
        set(n, "penwidth", items[i].penwidth);
        set(n, "class", "gt-legend");
        if (!strcmp(items[i].name, "legend_mutation"))
            set(n, "fontcolor", "red3");
        if (prev) {
            Agedge_t *e = mkedge(sub, prev, n);
            if (!e)
                return oom(b);
            set(e, "style", "invis");
        }
        prev = n;
    }
    return 0;
}

/* The title's first line into b->lab: the backward call drawn, the
 * trace's file, the call's API and line, and whether it raised; without a
 * call, that none was recorded. Returns 0, or a negative GT_E* code with
 * the message on the trace. */
static int title_call(builder *b)
{
    sqlite3_stmt *st = b->q[Q_BACKWARD];
    const char *path = gt_trace_path(b->trace);
    const char *base = strrchr(path, '/');
    int rc = 0;

    if (!b->backward) {
        gt_strbuf_adds(&b->lab, "autograd graph of ");
        sb_text(&b->lab, base ? base + 1 : path, FILE_CHARS);
        gt_strbuf_adds(&b->lab, " (no backward call recorded)");
        return 0;
    }
    gt_strbuf_addf(&b->lab, "backward call %lld of ", (long long)b->backward);
    sb_text(&b->lab, base ? base + 1 : path, FILE_CHARS);
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b->backward);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        gt_strbuf_adds(&b->lab, ": ");
        gt_loc l;
        sb_text(&b->lab, col_text(b, st, 0), LABEL_CHARS / 2);
        if ((rc = site_of(b, sqlite3_column_int64(st, 1), &l)) == 0 && l.frame) {
            gt_strbuf_adds(&b->lab, " at ");
            sb_loc(&b->lab, l.file, l.line);
        }
        if (col_text(b, st, 2) && !strcmp(col_text(b, st, 2), "error"))
            gt_strbuf_adds(&b->lab, " (raised)");
    } else if (step != SQLITE_DONE) {
        rc = sql_fail(b);
    }
    sqlite3_reset(st);
    return rc;
}

/* The title's second line into b->lab: how many nodes are drawn, and
 * around what (centre: focus's count of centres), and the findings drawn.
 * Can't fail (b->lab's sticky flag). */
static void title_extent(builder *b, size_t drawn, size_t centre, size_t findings)
{
    int hops = b->hops;
    if (drawn == b->nnodes)
        gt_strbuf_addf(&b->lab, "all %zu autograd nodes", b->nnodes);
    else if (!b->focused)
        gt_strbuf_addf(&b->lab, "%zu of %zu autograd nodes", drawn, b->nnodes);
    else
        gt_strbuf_addf(&b->lab, "%zu of %zu autograd nodes: %d %s around %zu %s", drawn,
                       b->nnodes, hops, hops == 1 ? "hop" : "hops", centre,
                       findings ? (centre == 1 ? "finding node" : "finding nodes")
                                : (centre == 1 ? "root" : "roots"));
    if (b->focused && b->partial_hops)
        gt_strbuf_addf(&b->lab, ", then %d of each node's neighbours %zu %s further",
                       BREADTH, b->partial_hops, b->partial_hops == 1 ? "hop" : "hops");
    if (findings)
        gt_strbuf_addf(&b->lab, ", %zu %s", findings,
                       findings == 1 ? "finding" : "findings");
    else
        gt_strbuf_adds(&b->lab, ", no findings");
}

/* The title's last line into b->lab, when something was left out: the
 * nodes hidden (by the focus, in repeats drawn once), the saved tensors
 * listed in their nodes, and the option that shows each. Can't fail
 * (b->lab's sticky flag). */
static void title_hidden(builder *b, size_t drawn)
{
    if (drawn == b->nnodes && !b->saved_folded)
        return;
    sb_br(&b->lab);
    if (drawn < b->nnodes && !b->collapsed)
        gt_strbuf_addf(&b->lab, "%zu %s hidden (--all or a larger --hops draws them)",
                       b->nnodes - drawn, b->nnodes - drawn == 1 ? "node" : "nodes");
    if (b->collapsed) {
        gt_strbuf_addf(&b->lab, "%zu nodes hidden (--all draws them): %zu in repeats of ",
                       b->nnodes - drawn, b->collapsed);
        gt_strbuf_adds(&b->lab, b->nrepeats == 1 ? "a block" : "blocks");
        gt_strbuf_adds(&b->lab, " drawn once (");
        for (size_t r = 0; r < b->nrepeats && r < 4; r++)
            gt_strbuf_addf(&b->lab, "%s\xc3\x97%zu", r ? ", " : "", b->repeats[r].count);
        gt_strbuf_adds(&b->lab, b->nrepeats > 4 ? ", \xe2\x80\xa6)" : ")");
        if (drawn + b->collapsed < b->nnodes)
            gt_strbuf_addf(&b->lab, ", %zu beyond the focus",
                           b->nnodes - drawn - b->collapsed);
    }
    if (drawn < b->nnodes && b->saved_folded)
        gt_strbuf_adds(&b->lab, "; ");
    if (b->saved_folded)
        gt_strbuf_addf(&b->lab, "%zu saved %s listed in %s (--saved draws them)",
                       b->saved_folded, b->saved_folded == 1 ? "tensor" : "tensors",
                       b->saved_folded == 1 ? "its node" : "their nodes");
}

/* The graph's title: which backward call and what part of it (title_call,
 * title_extent, title_hidden). Returns 0, or a negative GT_E* code with
 * the message on the trace. */
static int draw_title(builder *b, size_t drawn, size_t centre, size_t findings)
{
    int rc;
    gt_strbuf_reset(&b->lab);
    if ((rc = title_call(b)) != 0)
        return rc;
    sb_br(&b->lab);
    title_extent(b, drawn, centre, findings);
    title_hidden(b, drawn);
    if (b->lab.oom)
        return oom(b);
    agattr(b->g, AGRAPH, (char *)"label", (char *)gt_strbuf_str(&b->lab));
    return 0;
}

static void declare_defaults(Agraph_t *g)
{
    static const char *const graph_attrs[][2] = {
        {"labelloc", "t"},   {"fontname", "Helvetica"}, {"fontsize", "12"},
        {"nodesep", "0.25"}, {"ranksep", "0.3"},        {"style", ""},
        {"color", "black"},
    };
    static const char *const node_attrs[][2] = {
        {"shape", "box"},
        {"style", "filled"},
        {"fillcolor", "lightgrey"},
        {"color", "black"},
        {"fontcolor", "black"},
        {"penwidth", "1"},
        {"fontname", "monospace"},
        {"fontsize", "10"},
        {"height", "0.2"},
        {"label", ""},
        {"tooltip", ""},
        {"class", ""},
    };
    static const char *const edge_attrs[][2] = {
        {"color", "black"}, {"style", "solid"},   {"dir", "forward"},
        {"penwidth", "1"},  {"arrowsize", "0.7"}, {"class", ""},
    };
    for (size_t i = 0; i < sizeof graph_attrs / sizeof graph_attrs[0]; i++)
        agattr(g, AGRAPH, (char *)graph_attrs[i][0], (char *)graph_attrs[i][1]);
    for (size_t i = 0; i < sizeof node_attrs / sizeof node_attrs[0]; i++)
        agattr(g, AGNODE, (char *)node_attrs[i][0], (char *)node_attrs[i][1]);
    for (size_t i = 0; i < sizeof edge_attrs / sizeof edge_attrs[0]; i++)
        agattr(g, AGEDGE, (char *)edge_attrs[i][0], (char *)edge_attrs[i][1]);
}

/* Draw the edges between drawn nodes, from input to user, and count on
 * each drawn node the edges to nodes the focus hid (draw_more marks them).
 * Returns 0, or GT_ENOMEM with the message on the trace. */
static int draw_edges(builder *b)
{
    for (size_t e = 0; e < b->nedges; e++) {
        gnode *node = &b->nodes[b->edges[e].node], *next = &b->nodes[b->edges[e].next];
        if (node->collapsed || next->collapsed)
            continue;
        if (node->visible && next->visible) {
            if (!mkedge(b->g, next->an, node->an))
                return oom(b);
        } else if (node->visible) {
            node->hidden_in++;
        } else if (next->visible) {
            next->hidden_out++;
        }
    }
    return 0;
}

/* The edges of repeats drawn once, from and to their copies, once each;
 * one repeat feeding the next is an edge back inside the block (or a loop
 * on a one-node block), dashed and not ranking it. Returns 0, or GT_ENOMEM
 * with the message on the trace. */
static int draw_repeat_edges(builder *b)
{
    for (size_t e = 0; e < b->nedges && b->collapsed; e++) {
        gnode *node = &b->nodes[b->edges[e].node], *next = &b->nodes[b->edges[e].next];
        if ((!node->collapsed && !next->collapsed) || node->twin == NO_TWIN ||
            next->twin == NO_TWIN)
            continue;
        node = &b->nodes[node->twin];
        next = &b->nodes[next->twin];
        if (!node->visible || !next->visible || agedge(b->g, next->an, node->an, NULL, 0))
            continue;
        Agedge_t *ae = mkedge(b->g, next->an, node->an);
        if (!ae)
            return oom(b);
        if (node->repeat && node->repeat == next->repeat) {
            set(ae, "style", "dashed");
            set(ae, "color", "steelblue");
            set(ae, "constraint", "false");
            set(ae, "class", "gt-recur");
        }
    }
    return 0;
}

/* Draw the findings whose node is drawn; their count, one per group of
 * findings that say the same (opts->finding_lead), into *findings.
 * Returns 0, or a negative GT_E* code with the message on the trace. */
static int draw_findings(builder *b, size_t *findings)
{
    const gt_findings *fs = b->opts->findings;
    const size_t *lead = b->opts->finding_lead;
    unsigned char *counted = fs && lead ? calloc(fs->n ? fs->n : 1, 1) : NULL;
    int rc = 0;
    *findings = 0;
    if (fs && lead && !counted)
        return oom(b);
    for (size_t i = 0; fs && i < fs->n; i++) {
        const gt_finding *f = &fs->v[i];
        size_t idx = node_index(b, f->node);
        if (!finding_here(b, f) || idx == (size_t)-1 || !b->nodes[idx].visible)
            continue;
        if ((rc = draw_finding(b, f)) != 0 || (rc = label_said(b, i)) != 0)
            break;
        /* one that says what a drawn one said is not one more */
        if (!counted || (lead[i] < fs->n && !counted[lead[i]]++))
            ++*findings;
    }
    free(counted);
    return rc;
}

/* 1 if a saved tensor is drawn as a note (the legend then shows one). */
static int draws_saved_notes(builder *b)
{
    for (Agnode_t *n = agfstnode(b->g); n; n = agnxtnode(b->g, n))
        if (!strncmp(agget(n, (char *)"class"), "gt-saved", 8))
            return 1;
    return 0;
}

/* The layout's graph attributes: the screen's size for the default
 * drawing, and bounded iterations for a big graph. Can't fail. */
static void set_layout(builder *b)
{
    /* The default drawing fits a screen: Graphviz scales a larger layout
     * down to `size` (inches at 72 pt; a viewer shows 1 pt as 4/3 px, cairo
     * renders PNG at 96 dpi). The focus, the folded saved tensors and the
     * groups keep that scale near 1 on real models, so labels stay
     * legible; --all and --hops ask for more, drawn at full size. */
    if (!b->opts->all && b->opts->hops < 0) {
        char size[64];
        snprintf(size, sizeof size, "%g,%g", GT_GRAPH_SCREEN_WIDTH / 96.0,
                 GT_GRAPH_SCREEN_HEIGHT / 96.0);
        agattr(b->g, AGRAPH, (char *)"size", size);
    }
    if ((size_t)agnnodes(b->g) > BIG_GRAPH) {
        /* Bound the dot layout's iterations on big graphs. */
        agattr(b->g, AGRAPH, (char *)"nslimit", (char *)"2");
        agattr(b->g, AGRAPH, (char *)"nslimit1", (char *)"2");
        agattr(b->g, AGRAPH, (char *)"mclimit", (char *)"0.2");
        agattr(b->g, AGRAPH, (char *)"searchsize", (char *)"20");
    }
}

/* Draw the nodes marked visible into a new cgraph graph b->g: the
 * autograd nodes (grouped by line), their edges and those of repeats drawn
 * once, the saved tensors, the "… N more" markers, the findings, the
 * legend and the title. The nodes drawn in *drawn, the findings in
 * *findings (centre: focus's count of centres, for the title). Returns 0,
 * or a negative GT_E* code with the message on the trace. */
static int draw(builder *b, size_t centre, size_t *drawn, size_t *findings)
{
    int rc;

    b->g = agopen((char *)"gradtrace", Agdirected, &gt__graph_disc);
    if (!b->g)
        return oom(b);
    declare_defaults(b->g);
    *drawn = 0;
    for (size_t i = 0; i < b->nnodes; i++)
        *drawn += b->nodes[i].visible != 0;
    if ((rc = plan_saved(b, *drawn)) != 0 || (rc = plan_groups(b)) != 0)
        return rc;
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i].visible && (rc = draw_node(b, i)) != 0)
            return rc;
    if ((rc = draw_edges(b)) != 0 || (rc = draw_repeat_edges(b)) != 0 ||
        (rc = wrap_chains(b)) != 0)
        return rc;
    for (size_t i = 0; i < b->nnodes; i++) {
        if (!b->nodes[i].visible)
            continue;
        if ((rc = draw_saved(b, i)) != 0 || (rc = draw_more(b, i)) != 0)
            return rc;
    }
    if ((rc = draw_findings(b, findings)) != 0)
        return rc;
    if (!b->opts->no_legend &&
        (rc = draw_legend(b, draws_saved_notes(b), *findings)) != 0)
        return rc;
    if ((rc = draw_title(b, *drawn, centre, *findings)) != 0 ||
        (rc = stagger_leaves(b)) != 0)
        return rc;
    set_layout(b);
    return 0;
}

int gt_graph_build(gt_trace *t, const gt_graph_options *opts, gt_graph **out)
{
    static const gt_graph_options defaults = {.hops = -1};
    builder b = {0};
    gt_graph *gr = NULL;
    size_t centre = 0, drawn = 0, findings = 0;
    int rc = 0;

    gt_strbuf warnings = GT_STRBUF_INIT;
    gt__graph_messages(&warnings); /* kept on the graph, never printed */
    gt__trace_clear(t);
    b.trace = t;
    b.db = gt_trace_db(t);
    b.opts = opts ? opts : &defaults;
    if ((rc = plan_said(&b)) != 0)
        goto out;
    for (int i = 0; i < Q_COUNT; i++) {
        if (!(b.q[i] = stmt(&b, queries[i]))) {
            rc = gt_trace_errcode(t);
            goto out;
        }
    }
    if ((rc = load_cwd(&b)) != 0 || (rc = pick_backward(&b)) != 0 ||
        (rc = seed_roots(&b)) != 0 || (rc = walk(&b)) != 0 ||
        (rc = collapse_repeats(&b)) != 0 || (rc = focus(&b, &centre)) != 0 ||
        (rc = draw(&b, centre, &drawn, &findings)) != 0)
        goto out;
    gr = calloc(1, sizeof *gr);
    if (!gr) {
        rc = oom(&b);
        goto out;
    }
    gr->g = b.g;
    b.g = NULL;
    gr->backward = b.backward;
    gr->nodes_drawn = drawn;
    gr->nodes_total = b.nnodes;
    gr->findings_shown = findings;
    gr->layout_limit =
        b.opts->layout_limit ? b.opts->layout_limit : GT_GRAPH_DEFAULT_LAYOUT_LIMIT;
    gr->warnings = warnings;
    warnings = (gt_strbuf)GT_STRBUF_INIT;
    gr->built_warnings = 1;
    gt__trace_clear(t);
    *out = gr;
out:
    gt__graph_messages(NULL);
    gt_strbuf_release(&warnings);
    for (int i = 0; i < Q_COUNT; i++)
        if (b.q[i])
            sqlite3_reset(b.q[i]); /* the trace's (stmt): left reset, not finalized */
    if (b.g)
        agclose(b.g);
    free(b.nodes);
    free(b.edges);
    free(b.repeats);
    gt_map_clear(&b.map);
    for (size_t i = 0; i < b.nlocs; i++)
        gt_loc_release(&b.locs[i]);
    free(b.locs);
    free(b.said);
    gt_map_clear(&b.locmap);
    gt_strbuf_release(&b.lab);
    gt_strbuf_release(&b.tmp);
    free(b.cwd);
    return rc;
}

Agraph_t *gt_graph_agraph(gt_graph *g)
{
    return g->g;
}
int64_t gt_graph_backward(const gt_graph *g)
{
    return g->backward;
}
size_t gt_graph_nodes_drawn(const gt_graph *g)
{
    return g->nodes_drawn;
}
size_t gt_graph_nodes_total(const gt_graph *g)
{
    return g->nodes_total;
}
size_t gt_graph_findings_shown(const gt_graph *g)
{
    return g->findings_shown;
}

const char *gt_graph_errmsg(const gt_graph *g)
{
    return !g || g->err.oom ? "out of memory" : gt_strbuf_str(&g->err);
}

const char *gt_graph_warnings(const gt_graph *g)
{
    return g && g->warnings.p ? g->warnings.p : "";
}

void gt_graph_free(gt_graph *g)
{
    if (!g)
        return;
    if (g->g)
        agclose(g->g);
    gt_strbuf_release(&g->warnings);
    gt_strbuf_release(&g->err);
    free(g);
}
