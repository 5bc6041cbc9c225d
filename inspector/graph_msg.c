/* Graphviz's messages kept on the graph handle being built or rendered
 * (graph_int.h's gt__graph_messages), shared by graph.c and
 * graph_render.c. */
#include <pthread.h>
#include <string.h>

#include <graphviz/cgraph.h>

#include "graph_int.h"
#include "strbuf.h"

/* Graphviz's own messages (agerr: "Warning: (null): graph is too large
 * for cairo-renderer bitmaps...", the "(null)" being the command name gvc
 * was never given) are kept on the handle being built or rendered, without
 * their level and "(null): " (gt_graph_warnings); the command prints them
 * under its name. cgraph hands a message to the handler in pieces
 * ("Warning", ": ", the text ending in a newline), so they are gathered per
 * thread up to the newline, on the heap (a message quotes names from the
 * trace: it is kept whole). The library never prints: a message outside an
 * operation on a handle (the program's own use of cgraph) goes to the
 * handler the program had set before ours, or nowhere. */
static _Thread_local gt_strbuf gv_msg;
static _Thread_local gt_strbuf *gv_target;
static pthread_once_t gv_errf_once = PTHREAD_ONCE_INIT;
static agusererrf gv_prev_errf; /* set once, before any message reaches us */

/* Pass on one gathered Graphviz message, without its level and "(null): ",
 * and free it. A message that did not fit in memory is lost and sets the
 * target's oom flag. */
static void gv_message_flush(void)
{
    if (gv_msg.oom) {
        if (gv_target)
            gv_target->oom = 1;
        gt_strbuf_release(&gv_msg);
        return;
    }
    if (!gv_target) {
        /* with its newline back */
        if (gv_prev_errf && gt_strbuf_adds(&gv_msg, "\n") == 0)
            gv_prev_errf(gv_msg.p);
        gt_strbuf_release(&gv_msg);
        return;
    }
    const char *m = gt_strbuf_str(&gv_msg);
    if (!strncmp(m, "Warning: ", 9))
        m += 9;
    else if (!strncmp(m, "Error: ", 7))
        m += 7;
    if (!strncmp(m, "(null): ", 8))
        m += 8;
    size_t n = strlen(m);
    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    if (n)
        gt_strbuf_addf(gv_target, "%.*s\n", (int)n, m);
    gt_strbuf_release(&gv_msg);
}

static int gv_message(char *piece)
{
    const char *p = piece;
    for (;;) {
        size_t k = strcspn(p, "\n");
        gt_strbuf_add(&gv_msg, p, k); /* on failure the flag sticks until flushed */
        if (!p[k])
            break;
        gv_message_flush();
        p += k + 1;
    }
    return 0;
}

static void gv_errf_init(void)
{
    gv_prev_errf = agseterrf(gv_message);
}

void gt__graph_messages(gt_strbuf *to)
{
    pthread_once(&gv_errf_once, gv_errf_init);
    gt_strbuf_release(&gv_msg);
    gv_target = to;
}
