/*
 * Writing a built graph (graph.h): as DOT through cgraph, or laid out with
 * Graphviz's dot layout and rendered as SVG or PNG, in-process through gvc
 * (never a shelled-out `dot`). All graphs of the process share one gvc
 * context (Graphviz 2.42's pango plugin keeps a static pointer into the
 * last context it ran under).
 *
 * Error model: a function returns 0 or a negative GT_E* code and keeps its
 * one-line message (no program name) on the handle, gt_graph_errmsg(g);
 * Graphviz's own messages during the call are kept as gt_graph_warnings(g).
 * Out-parameters come last and are written only on success.
 */
#ifndef GT_INSPECTOR_GRAPH_RENDER_H
#define GT_INSPECTOR_GRAPH_RENDER_H

#include <stddef.h>

#include <gradtrace/error.h>

#include <gradtrace/graph.h>

enum gt_graph_format {
    GT_GRAPH_DOT = 0, /* cgraph's agwrite, no layout */
    GT_GRAPH_SVG = 1, /* gvLayout "dot" + gvc's svg renderer */
    GT_GRAPH_PNG = 2, /* gvLayout "dot" + the cairo png renderer */
};

/* Parse a format name ("dot", "gv", "svg", "png", any case). Returns 0 and
 * writes *out, or GT_EINVAL and leaves *out untouched. */
GT_WARN_UNUSED int gt_graph_format_parse(const char *name, int *out /* OUT */);

/* The format named by a path's extension (".dot", ".gv", ".svg", ".png",
 * any case). Returns 0 and writes *out, or GT_EINVAL. */
GT_WARN_UNUSED int gt_graph_format_from_path(const char *path, int *out /* OUT */);

/* The format's name ("dot", "svg", "png"); "?" for an unknown value. Can't
 * fail. */
const char *gt_graph_format_name(int format);

/* Write g to `path` ("-" for stdout) in `format`. The file is written to a
 * temporary name beside it and renamed on success, so a failed render leaves
 * no partial file. Returns 0, or a negative GT_E* code with the message in
 * gt_graph_errmsg(g): GT_EINVAL when the graph is too large to lay out (the
 * message suggests --format dot or focus), GT_EIO when the file cannot be
 * written or Graphviz lacks the renderer (the message names the Debian
 * package to install), GT_ENOMEM. */
GT_WARN_UNUSED int gt_graph_render(gt_graph *g, int format, const char *path);

/* Render g into memory: *data (NUL-terminated, free with free()) and *len
 * are written only on success. Errors as gt_graph_render. */
GT_WARN_UNUSED int gt_graph_render_data(gt_graph *g, int format, char **data /* OUT */,
                                        size_t *len /* OUT */);

/* Lay out g with dot and free the layout again, without rendering: the
 * anchor the benchmark compares rendering with. Errors as gt_graph_render. */
GT_WARN_UNUSED int gt_graph_layout_only(gt_graph *g);

#endif
