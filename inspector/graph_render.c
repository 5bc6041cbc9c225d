/* Laying out and rendering a built graph in-process with gvc (Graphviz's
 * dot layout, its svg renderer, cairo's png), and the output formats; see
 * graph_render.h. Building the graph is graph.c. */
#include <gradtrace/graph_render.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <graphviz/gvc.h>
#include <graphviz/gvcommon.h>
#include <graphviz/gvplugin.h>

#include <gradtrace/error.h>

#include "graph_int.h"
#include "strbuf.h"

/* The Debian package that holds Graphviz's layout and render plugins
 * (libgvplugin_core, _dot_layout, _pango: svg, and png through cairo). */
#define GV_PACKAGE "libgvc6"

/* No error on g. Can't fail. */
static void clear_err(gt_graph *g)
{
    if (g->err.oom)
        gt_strbuf_release(&g->err); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(&g->err);
}

/* Keep a one-line message on the handle, however long (one that does not
 * fit in memory reads "out of memory": gt_graph_errmsg); returns rc. */
static int seterr(gt_graph *g, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int seterr(gt_graph *g, int rc, const char *fmt, ...)
{
    va_list ap;
    clear_err(g);
    va_start(ap, fmt);
    gt_strbuf_vaddf(&g->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- formats ----------------------------------------------------------- */

static const struct {
    const char *name;
    int format;
} format_names[] = {
    {"dot", GT_GRAPH_DOT},
    {"gv", GT_GRAPH_DOT},
    {"svg", GT_GRAPH_SVG},
    {"png", GT_GRAPH_PNG},
};

int gt_graph_format_parse(const char *name, int *out)
{
    for (size_t i = 0; name && i < sizeof format_names / sizeof format_names[0]; i++) {
        if (!strcasecmp(name, format_names[i].name)) {
            *out = format_names[i].format;
            return 0;
        }
    }
    return GT_EINVAL;
}

int gt_graph_format_from_path(const char *path, int *out)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    if (!dot)
        return GT_EINVAL;
    return gt_graph_format_parse(dot + 1, out);
}

const char *gt_graph_format_name(int format)
{
    switch (format) {
    case GT_GRAPH_DOT:
        return "dot";
    case GT_GRAPH_SVG:
        return "svg";
    case GT_GRAPH_PNG:
        return "png";
    }
    return "?";
}

/* ---- rendering --------------------------------------------------------- */

/* The one Graphviz context of the process. Graphviz 2.42's pango plugin
 * keeps a static pointer to the last font name, which gvFreeContext frees:
 * the first text measured under a second context reads freed memory
 * (valgrind shows it). So all graphs share one context, made on first use
 * and kept for the life of the process; what its plugins offer is looked
 * up once (gvPluginList also leaks the duplicates it skips). */
static struct {
    pthread_once_t once;
    GVC_t *gvc;
    int cairo, png, svg, dot; /* the plugins found */
} gv = {.once = PTHREAD_ONCE_INIT};

/* 1 if `name` is in Graphviz's list of plugins of `kind`. */
static int has_plugin(GVC_t *gvc, const char *kind, const char *name)
{
    int n = 0, found = 0;
    char **list = gvPluginList(gvc, kind, &n, NULL);
    for (int i = 0; i < n; i++) {
        if (list[i] && !strcmp(list[i], name))
            found = 1;
        free(list[i]);
    }
    free(list);
    return found;
}

#ifdef GT_GRAPHVIZ_BUILTIN_PLUGINS
/* A self-contained build (the binary wheel, cmake/graphviz_plugins.cmake)
 * links the plugins it uses (dot layout; core: dot and svg; pango: png
 * through cairo) and hands them to gvc as built-ins, as Graphviz's own
 * static `dot` does: no plugin directory, config6 file or GVBINDIR is read. */
extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;
extern gvplugin_library_t gvplugin_pango_LTX_library;
static const lt_symlist_t builtin_plugins[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
    {"gvplugin_pango_LTX_library", &gvplugin_pango_LTX_library},
    {NULL, NULL},
};
#endif

static void gv_init(void)
{
#ifdef GT_GRAPHVIZ_BUILTIN_PLUGINS
    gv.gvc = gvContextPlugins(builtin_plugins, 0);
#else
    gv.gvc = gvContext();
#endif
    if (!gv.gvc)
        return;
    /* The command name plugins print before the messages they write
     * straight to stderr, not through agerr (cairo's "graph is too large
     * for cairo-renderer bitmaps"): "(null)" unless set. Those cannot be
     * kept on the handle, so they are the one place the library speaks
     * under the command's name, as the command prints the others.
     * gvParseArgs would set it but also takes it for a layout engine's
     * name; a GVC_t starts with its public GVCOMMON_t (gvcommon.h). */
    ((GVCOMMON_t *)gv.gvc)->cmdname = (char *)"gradtrace: graph: graphviz";
    gv.cairo = has_plugin(gv.gvc, "render", "cairo");
    gv.svg = has_plugin(gv.gvc, "render", "svg");
    gv.png = gv.cairo || has_plugin(gv.gvc, "render", "gd");
    gv.dot = has_plugin(gv.gvc, "layout", "dot");
}

/* Labels stay legible: a layout larger than the graph's `size` (the
 * default drawing's screen) is scaled down to fit it, but never below
 * GT_GRAPH_MIN_SCALE, at which the smallest label (10 pt) is still
 * GT_GRAPH_MIN_FONT_PX pixels high; a layout that would need more is drawn
 * larger than the screen instead. Can't fail. */
static void keep_legible(Agraph_t *g)
{
    const char *size = agget(g, (char *)"size");
    if (!size || !*size || !GD_drawing(g))
        return;
    double bw = GD_bb(g).UR.x - GD_bb(g).LL.x, bh = GD_bb(g).UR.y - GD_bb(g).LL.y;
    pointf *sz = &GD_drawing(g)->size; /* points */
    if (bw <= 0 || bh <= 0 || sz->x <= 0 || sz->y <= 0)
        return;
    double s = sz->x / bw < sz->y / bh ? sz->x / bw : sz->y / bh;
    if (s >= GT_GRAPH_MIN_SCALE)
        return;
    sz->x = bw * GT_GRAPH_MIN_SCALE;
    sz->y = bh * GT_GRAPH_MIN_SCALE;
}

/* Check size and plugins and lay g out; *device: the gvc format to render
 * with. */
static int layout(gt_graph *g, int format, const char **device /* OUT */)
{
    size_t n = (size_t)agnnodes(g->g);
    if (n > g->layout_limit)
        return seterr(g, GT_EINVAL,
                      "cannot lay out %zu nodes as %s (the limit is %zu): write --format "
                      "dot instead, or draw fewer nodes (no --all, or a smaller --hops)",
                      n, gt_graph_format_name(format), g->layout_limit);
    /* Autograd graphs have about one edge per node; a damaged or crafted
     * trace can hold a dense one (every node to every other), on which
     * dot's crossing minimisation runs for many minutes even with 44 nodes
     * (tests/regress/dense_edges.db, found by the fuzzer). */
    size_t e = (size_t)agnedges(g->g);
    if (e > 4 * n + 100)
        return seterr(g, GT_EINVAL,
                      "cannot lay out %zu edges between %zu nodes as %s (the limit is 4 "
                      "per node, plus 100): write --format dot instead",
                      e, n, gt_graph_format_name(format));
    pthread_once(&gv.once, gv_init);
    if (!gv.gvc)
        return seterr(g, GT_ENOMEM, "cannot render: graphviz context: out of memory");
    if (format == GT_GRAPH_PNG)
        *device = gv.cairo ? "png:cairo" : "png";
    else
        *device = "svg";
    if ((format == GT_GRAPH_PNG ? !gv.png : !gv.svg) || !gv.dot)
        return seterr(g, GT_EIO,
                      "cannot render %s: graphviz has no %s plugin here: install the "
                      "debian package %s, which holds and registers graphviz's dot "
                      "layout, svg and cairo png plugins (or write --format dot)",
                      gt_graph_format_name(format),
                      !gv.dot                  ? "dot layout"
                      : format == GT_GRAPH_PNG ? "png (cairo)"
                                               : "svg",
                      GV_PACKAGE);
    if (gvLayout(gv.gvc, g->g, "dot") != 0)
        return seterr(g, GT_EIO,
                      "cannot lay out the graph: graphviz's dot layout failed");
    keep_legible(g->g);
    return 0;
}

/* Start an operation on g: no error, no messages yet (but the build's
 * before the first render), and Graphviz's messages of this thread kept on
 * g until render_end. */
static void render_begin(gt_graph *g)
{
    clear_err(g);
    if (!g->built_warnings) /* the build's are kept for the first render */
        gt_strbuf_reset(&g->warnings);
    g->built_warnings = 0;
    gt__graph_messages(&g->warnings);
}

static int render_end(gt_graph *g, int rc)
{
    gt__graph_messages(NULL);
    if (rc == 0 && g->warnings.oom)
        return seterr(g, GT_ENOMEM, "cannot keep graphviz's messages: out of memory");
    return rc;
}

/* Write g to f. gvRender(FILE *) rather than gvRenderData keeps us off
 * gvRenderData's length type, unsigned int * up to Graphviz 2.4x and
 * size_t * later. */
static int render_to(gt_graph *g, int format, FILE *f)
{
    const char *device = NULL;
    int rc;
    if (format == GT_GRAPH_DOT) {
        if (agwrite(g->g, f) != 0 || ferror(f))
            return seterr(g, GT_EIO, "cannot write dot: %s",
                          strerror(errno ? errno : EIO));
        return 0;
    }
    if ((rc = layout(g, format, &device)) != 0)
        return rc;
    rc = gvRender(gv.gvc, g->g, device, f);
    gvFreeLayout(gv.gvc, g->g);
    if (rc != 0 || ferror(f))
        return seterr(g, GT_EIO, "cannot render %s: graphviz's %s renderer failed",
                      gt_graph_format_name(format), device);
    return 0;
}

int gt_graph_layout_only(gt_graph *g)
{
    const char *device = NULL;
    render_begin(g);
    int rc = layout(g, GT_GRAPH_SVG, &device);
    if (rc == 0)
        gvFreeLayout(gv.gvc, g->g);
    return render_end(g, rc);
}

/* Write g to path through a temporary file renamed on success. */
static int render_file(gt_graph *g, int format, const char *path)
{
    char *tmp = NULL;
    FILE *f = NULL;
    int fd = -1, rc = 0;

    if (!strcmp(path, "-")) {
        rc = render_to(g, format, stdout);
        if (rc == 0 && fflush(stdout) != 0)
            rc =
                seterr(g, GT_EIO, "cannot write to standard output: %s", strerror(errno));
        return rc;
    }
    size_t n = strlen(path) + 32;
    if (!(tmp = malloc(n)))
        return seterr(g, GT_ENOMEM, "cannot write %s: out of memory", path);
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 || !(f = fdopen(fd, "wb"))) {
        rc = seterr(g, GT_EIO, "cannot write %s: %s", path, strerror(errno));
        goto fail_open;
    }
    fd = -1;
    errno = 0;
    if ((rc = render_to(g, format, f)) != 0)
        goto fail_render;
    if (fclose(f) != 0) {
        f = NULL;
        rc = seterr(g, GT_EIO, "cannot write %s: %s", path, strerror(errno));
        goto fail_render;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        rc = seterr(g, GT_EIO, "cannot write %s: %s", path, strerror(errno));
        goto fail_render;
    }
    free(tmp);
    return 0;
fail_render:
    if (f)
        fclose(f);
    unlink(tmp);
fail_open:
    if (fd >= 0)
        close(fd);
    free(tmp);
    return rc;
}

int gt_graph_render(gt_graph *g, int format, const char *path)
{
    render_begin(g);
    return render_end(g, render_file(g, format, path));
}

int gt_graph_render_data(gt_graph *g, int format, char **data /* OUT */,
                         size_t *len /* OUT */)
{
    char *buf = NULL;
    size_t size = 0;
    render_begin(g);
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return render_end(g, seterr(g, GT_ENOMEM, "cannot render %s: out of memory",
                                    gt_graph_format_name(format)));
    int rc = render_to(g, format, f);
    if (fclose(f) != 0 && rc == 0)
        rc = seterr(g, GT_ENOMEM, "cannot render %s: out of memory",
                    gt_graph_format_name(format));
    rc = render_end(g, rc);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *data = buf;
    *len = size;
    return 0;
}
