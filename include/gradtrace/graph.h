/*
 * Drawing a trace: one backward call's autograd graph built as a cgraph
 * Agraph_t. Writing it (DOT, or laid out and rendered in-process by gvc as
 * SVG or PNG) is graph_render.h.
 *
 * What the graph holds (DOT node names in brackets, `class` attribute after):
 *   - every autograd node of the backward call [n<nodes.id>] ("gt-node",
 *     plus "gt-leaf" for a node that accumulates into a leaf tensor and
 *     "gt-root" for a backward root): a box labelled with the node's name,
 *     the module path of the forward op that created it (modpath.h:
 *     "layer3.1.conv2", on traces of schema 5 on),
 *     the user's file:line (base name) and source of the forward op that
 *     created it, the leaf's variable names, dtype and shape; its tooltip
 *     holds the file's path, relative to run.cwd when below it;
 *   - an edge from each next function to the node that feeds it (torchviz's
 *     direction: leaves on top, the root at the bottom);
 *   - each saved tensor of a drawn node [s<saved_tensors.seq>] ("gt-saved"),
 *     a note joined to its node by an undirected edge, labelled with slot,
 *     dtype, shape, variable names and saved version; with a finding drawn
 *     (and no `saved`), only the tensors a finding is about, the others
 *     listed in their node's label ("saves input, running_mean, +3");
 *   - for each finding of the backward (findings that say the same,
 *     opts->finding_lead, drawn once: the first to fail among them, its
 *     node labelled "×N in blocks.0–5.mlp"): each mutating op [m<ops.seq>]
 *     ("gt-mutation"), red, with its line and the version it produced, and a
 *     red edge to the saved tensor it invalidated (to the node when the
 *     finding has no saved tensor); the node PyTorch fails on outlined in red
 *     ("gt-fail");
 *   - boundary markers [more_in_<id>, more_out_<id>] ("gt-more") where focus
 *     hid neighbours, and a legend (subgraph cluster_legend, nodes legend_*).
 *
 * Labels are plain (not HTML-like) DOT strings: user text is elided to a
 * maximum length with "…", invalid UTF-8 and control characters become
 * U+FFFD, a backslash is doubled, '&' is written "&amp;" (Graphviz decodes
 * entities in plain labels) and a newline becomes the DOT escape "\n".
 * cgraph quotes '"' itself when it writes the file.
 *
 * Focus: without `all`, only the nodes within `hops` edges (either direction)
 * of a finding's node are drawn; with no finding in the backward, the whole
 * graph if it is small enough to lay out, else the roots' neighbourhood.
 * Without `hops`, a ring too wide for the screen budget is drawn in part:
 * the first 3 neighbours of each drawn node, ring after ring, the rest
 * marked "… N more".
 *
 * Repeats (the default drawing of a graph larger than the budget): a run
 * of consecutive blocks of nodes, in creation order, with the same names
 * made by the same lines and the same edges inside each block (an RNN's
 * time steps, a stack of layers) is drawn once in a cluster
 * [cluster_repeat<k>] ("gt-repeat") labelled "×N"; the hidden repeats'
 * edges are drawn from and to their copies in it, one repeat feeding the
 * next as a dashed edge back ("gt-recur"). A block holding a root or a
 * finding's node is drawn as itself.
 *
 * Fitting a screen (the default drawing: no `all`, no `hops`): at most
 * GT_GRAPH_SCREEN_NODES autograd nodes; when nodes and saved-tensor notes
 * together exceed that, saved tensors are listed in their node's label
 * ("saves input, weight") except on a finding's nodes (`saved` draws them
 * all); the nodes one user line created (a module's call) are grouped in a
 * cluster [cluster_line<frames.id>] ("gt-group") labelled once with the
 * line, except a finding's node; long chains wrap into columns; and the
 * `size` attribute scales what is still larger down to
 * GT_GRAPH_SCREEN_WIDTH x GT_GRAPH_SCREEN_HEIGHT px. The title's last line
 * says what was left out (in repeats, beyond the focus) and the option that
 * shows it.
 */
#ifndef GT_INSPECTOR_GRAPH_H
#define GT_INSPECTOR_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <graphviz/cgraph.h>

#include <gradtrace/error.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>

#define GT_GRAPH_DEFAULT_HOPS 2
/* Without --hops, the default drawing holds at most this many autograd
 * nodes (a screen's worth): see `focus` in graph.c. */
#define GT_GRAPH_SCREEN_NODES 40
/* ... and is scaled down, when larger, to fit a screen of this many pixels
 * (at 96 px an inch: SVG viewers show 1 pt as 4/3 px, PNG renders at 96
 * dpi). */
#define GT_GRAPH_SCREEN_WIDTH  1920
#define GT_GRAPH_SCREEN_HEIGHT 1200
/* ... but never scaled below this: the smallest label, 10 pt (13.3 px at
 * 96 dpi), stays at least GT_GRAPH_MIN_FONT_PX pixels high; a layout that
 * does not fit at this scale is drawn larger than the screen. */
#define GT_GRAPH_MIN_FONT_PX 11
/* (11 / 13.3 = 0.825, rounded up: an SVG states its scale to 2 decimals) */
#define GT_GRAPH_MIN_SCALE 0.85
/* Graphs with more drawn nodes than this are not laid out (SVG, PNG): the
 * dot layout's time grows much faster than linearly. DOT output has no
 * limit. */
#define GT_GRAPH_DEFAULT_LAYOUT_LIMIT 2500

typedef struct gt_graph_options {
    int64_t backward;            /* backward_calls.id; 0: the one with
                                    findings, else the last */
    int hops;                    /* focus radius; < 0: the default */
    int all;                     /* 1: draw the whole graph, no focus */
    const gt_findings *findings; /* from gt_diagnose, or NULL for none */
    const size_t *finding_lead;  /* NULL, or for each finding the index of
                                    the first that says the same (diagnose's
                                    "repeated N times"): all are highlighted,
                                    each such group counted once */
    size_t layout_limit;         /* 0: GT_GRAPH_DEFAULT_LAYOUT_LIMIT */
    int no_legend;               /* 1: leave the legend out */
    int saved;                   /* 1: every saved tensor as a note; 0: listed
                                    in its node's label when the drawing is
                                    large (not on a finding's nodes) */
} gt_graph_options;

typedef struct gt_graph gt_graph;

/* Build the graph of one backward call of `t` (see the top of this file).
 * opts may be NULL for defaults. Returns 0, or a negative GT_E* code with a
 * one-line message on t, gt_trace_errmsg(t) (GT_EINVAL: no such backward
 * call, or nothing to draw); *out is written only on success. The graph
 * does not keep `t` or opts->findings. */
GT_WARN_UNUSED int gt_graph_build(gt_trace *t, const gt_graph_options *opts,
                                  gt_graph **out /* OUT */);

/* The cgraph graph, owned by g. */
Agraph_t *gt_graph_agraph(gt_graph *g);

/* The backward call drawn (0 when the trace has none and every root-less
 * node was taken as a root). */
int64_t gt_graph_backward(const gt_graph *g);

/* Autograd nodes drawn / in the backward call's whole graph. */
size_t gt_graph_nodes_drawn(const gt_graph *g);
size_t gt_graph_nodes_total(const gt_graph *g);

/* Findings of the backward call that the graph shows, those that say the
 * same (opts->finding_lead) once. */
size_t gt_graph_findings_shown(const gt_graph *g);

/* The one-line message of the last failed operation on g (rendering, see
 * graph_render.h), without the program's name; "" after a success. Owned by
 * g, valid until its next operation. NULL g: "out of memory". */
const char *gt_graph_errmsg(const gt_graph *g);

/* Graphviz's own messages during g's last render (a graph too large for
 * cairo's bitmaps, say; the first render's after those of g's build), one a
 * line without "Warning: (null): ", each ending in a newline; "" when none.
 * Owned by g. The library never prints them. */
const char *gt_graph_warnings(const gt_graph *g);

/* `text` as gt_graph_build puts it into a label (see above): at most
 * max_chars characters (0: no limit), escaped for a plain DOT label.
 * Returns a new string (free with free()), or NULL when out of memory. */
char *gt_graph_label_escape(const char *text, size_t max_chars);

/* Free the graph and its Graphviz context; accepts NULL. */
void gt_graph_free(gt_graph *g);

#endif
