/* The gt_graph handle, shared by building (graph.c) and rendering
 * (graph_render.c); not part of the inspector's API. */
#ifndef GT_INSPECTOR_GRAPH_INT_H
#define GT_INSPECTOR_GRAPH_INT_H

#include <stddef.h>
#include <stdint.h>

#include <graphviz/cgraph.h>

#include "strbuf.h"

struct gt_graph {
    Agraph_t *g;
    int64_t backward;
    size_t nodes_drawn;
    size_t nodes_total;
    size_t findings_shown;
    size_t layout_limit;
    gt_strbuf err;      /* the last render error, empty after a success */
    gt_strbuf warnings; /* Graphviz's messages of the last render (the first:
                           and the build's), one a line */
    int built_warnings; /* 1 until the first render: warnings are the build's */
};

/* Graphviz's messages (agerr) of this thread from now on into *to, one a
 * line without their level; NULL: to the handler the program set before
 * gradtrace's, or nowhere (graph_msg.c). Installs gradtrace's handler on
 * first use; prints nothing; can't fail (a message that does not fit sets
 * to->oom). */
void gt__graph_messages(gt_strbuf *to);

/* The discipline graph.c opens its graphs with: cgraph's own, except for
 * object IDs (graph_ids.c). cgraph's default makes a name's ID the address
 * of its interned string and walks subgraphs in ID order, so the order of
 * the clusters in a DOT file and in the layout followed the allocator;
 * this one counts, so every object is walked in the order it was made. */
extern Agdisc_t gt__graph_disc;

#endif
