/*
 * gradtrace memory TRACE: the bytes a backward call holds for backward when
 * it starts (memory.h), by module, by line and by node type, the largest
 * saved tensors, how the held bytes grew over the forward, and what
 * recomputing each module (activation checkpointing) would free. Text
 * tables, or one JSON document (--json) built with SQLite's JSON functions.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "cmd.h"
#include "grow.h"
#include <gradtrace/memory.h>
#include "strbuf.h"
#include <gradtrace/termtext.h>
#include <gradtrace/trace.h>

static void usage(FILE *o)
{
    fprintf(o,
            "usage: gradtrace memory [options] TRACE\n"
            "\n"
            "Show the memory a backward call holds for backward when it starts: the\n"
            "tensors its nodes saved, each storage counted once, by module, by source\n"
            "line and by node type; the largest saved tensors; how the held bytes\n"
            "grew as the forward ran; and for each module what recomputing it in\n"
            "backward (activation checkpointing) would free.\n"
            "\n"
            "options:\n"
            "  -c, --call N   the backward call to show (default: the one holding\n"
            "                 the most bytes)\n"
            "  -a, --all      list every backward call, and show each one\n"
            "  -n, --top N    rows of each table (default %d; 0: every row)\n"
            "      --json     print one JSON document (every row of every table)\n"
            "  -h, --help     show this help\n"
            "\n"
            "exit status: 0 shown, 2 usage or input error\n",
            GT_MEMORY_DEFAULT_TOP);
}

/* ---- text ---------------------------------------------------------------- */

/* An aligned table: cells are sanitized copies; numeric columns right-aligned. */
typedef struct table {
    int ncol;
    const char *head[8];
    int right[8];
    char **cell;      /* rows x ncol */
    size_t rows, cap; /* cap: cells */
    int oom;
    int first; /* the output's first section: no blank line before it */
} table;

static void cell_row(table *t, const char *const *v)
{
    if (t->oom)
        return;
    if (GT_ALLOC_GROW(t->cell, (t->rows + 1) * (size_t)t->ncol, t->cap,
                      16 * (size_t)t->ncol) != 0) {
        t->oom = 1;
        return;
    }
    for (int i = 0; i < t->ncol; i++) {
        char *s = gt_term_text(v[i] ? v[i] : "");
        if (s && strlen(s) > 60) /* long source lines and paths: cut */
            strcpy(s + 57, "...");
        t->cell[t->rows * (size_t)t->ncol + (size_t)i] = s;
        t->oom |= !s;
    }
    t->rows++;
}

/* Columns counted in characters (UTF-8 continuation bytes aside). */
static size_t width(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static void table_print(table *t, const char *indent)
{
    size_t w[8] = {0};
    for (int i = 0; i < t->ncol; i++)
        w[i] = width(t->head[i]);
    for (size_t r = 0; r < t->rows; r++)
        for (int i = 0; i < t->ncol; i++) {
            size_t n = width(t->cell[r * (size_t)t->ncol + (size_t)i]);
            if (n > w[i])
                w[i] = n;
        }
    for (size_t r = 0; r <= t->rows; r++) {
        fputs(indent, stdout);
        for (int i = 0; i < t->ncol; i++) {
            const char *s =
                r ? t->cell[(r - 1) * (size_t)t->ncol + (size_t)i] : t->head[i];
            size_t pad = w[i] - width(s);
            int last = i == t->ncol - 1;
            if (t->right[i])
                printf("%*s%s", (int)pad, "", s ? s : "");
            else
                printf("%s%*s", s ? s : "", last ? 0 : (int)pad, "");
            if (!last)
                fputs("  ", stdout);
        }
        fputc('\n', stdout);
    }
}

static void table_release(table *t)
{
    for (size_t i = 0; i < t->rows * (size_t)t->ncol; i++)
        free(t->cell[i]);
    free(t->cell);
}

/* Print table t under title (after a blank line but for the output's
 * first), with "... N more" when cut. 0, or -1 when out of memory. */
static int section(table *t, const char *title, size_t total, size_t shown)
{
    if (t->oom) {
        table_release(t);
        return -1;
    }
    printf("%s%s\n", t->first ? "" : "\n", title);
    table_print(t, "  ");
    if (shown < total)
        printf("  ... %zu more (--top 0 shows every row)\n", total - shown);
    table_release(t);
    return 0;
}

static const char *pct(int64_t part, int64_t whole, char *buf, size_t size)
{
    snprintf(buf, size, "%.1f%%", whole > 0 ? 100.0 * (double)part / (double)whole : 0.0);
    return buf;
}

static const char *num(int64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "%" PRId64, v);
    return buf;
}

static const char *module_name(const char *m)
{
    return *m ? m : "(outside modules)";
}

/* The rows a table of n shows: at most top (0: every one). */
static size_t rows_shown(size_t top, size_t n)
{
    return top && top < n ? top : n;
}

/* Call c's heading: where it ran, the bytes held, parameters apart, and
 * how many calls there are (ncalls). Can't fail. */
static void print_heading(const gt_mem_call *c, size_t ncalls)
{
    char a[32], b[32];
    printf("backward call %" PRId64 " (%s", c->id, c->api ? c->api : "?");
    if (c->file) {
        printf(" at ");
        gt_term_puts(stdout, c->file);
        printf(":%" PRId64, c->line);
    }
    printf("): %s held for backward at its start\n", gt_mem_human(c->bytes, a, sizeof a));
    printf("  %" PRId64 " saved tensors on %" PRId64
           " storages, each storage counted once; parameters %s, the rest %s\n",
           c->saved, c->storages, gt_mem_human(c->param_bytes, a, sizeof a),
           gt_mem_human(c->bytes - c->param_bytes, b, sizeof b));
    if (c->live_bytes != c->bytes)
        printf("  with the other graphs not yet freed: %s held at its start\n",
               gt_mem_human(c->live_bytes, a, sizeof a));
    if (ncalls > 1)
        printf("  (%zu backward calls; --call N shows another, --all each)\n", ncalls);
}

/* The breakdowns of a call, as gt_mem_call holds them. */
enum { BY_MODULE, BY_LINE, BY_NODE };

/* Breakdown k's table (by module, line or node type): at most top groups
 * (0: every one), the line's code beside a line. 0, or -1 when out of
 * memory. */
static int print_groups(const gt_mem_call *c, int k, size_t top)
{
    static const struct {
        const char *head, *none, *title;
    } bd[] = {
        [BY_MODULE] = {"module", "(outside modules)",
                       "by module (each storage with the first module that saved it)"},
        [BY_LINE] = {"line", "(no line)", "by line"},
        [BY_NODE] = {"node", NULL, "by node type"},
    };
    const gt_mem_group *v = k == BY_MODULE ? c->by_module
                            : k == BY_LINE ? c->by_line
                                           : c->by_node;
    size_t n = k == BY_MODULE ? c->n_module : k == BY_LINE ? c->n_line : c->n_node;
    size_t lim = rows_shown(top, n);
    char a[32], b[32], d[32];
    table t = {.ncol = k == BY_LINE ? 5 : 4,
               .head = {bd[k].head, "bytes", "share", "saved", "code"},
               .right = {0, 1, 1, 1, 0}};
    for (size_t i = 0; i < lim; i++) {
        const gt_mem_group *g = &v[i];
        const char *cells[] = {*g->key || !bd[k].none ? g->key : bd[k].none,
                               gt_mem_human(g->bytes, a, sizeof a),
                               pct(g->bytes, c->bytes, b, sizeof b),
                               num(g->saved, d, sizeof d), g->code};
        cell_row(&t, cells);
    }
    return section(&t, bd[k].title, n, lim);
}

/* The largest saved tensors' table: at most top (0: every one). 0, or -1
 * when out of memory. */
static int print_tensors(const gt_mem_call *c, size_t top)
{
    char a[32], d[32], loc[4096];
    size_t lim = rows_shown(top, c->n_tensors);
    table t = {
        .ncol = 7,
        .head = {"bytes", "saved as", "dtype", "shape", "held by", "module", "line"},
        .right = {1, 0, 0, 0, 1, 0, 0}};
    for (size_t i = 0; i < lim; i++) {
        const gt_mem_tensor *x = &c->tensors[i];
        char as[256];
        snprintf(as, sizeof as, "%s.%s", x->node_name ? x->node_name : "?",
                 x->slot ? x->slot : "?");
        if (x->file)
            snprintf(loc, sizeof loc, "%s:%" PRId64, x->file, x->line);
        const char *v[] = {gt_mem_human(x->bytes, a, sizeof a),
                           as,
                           x->dtype,
                           x->shape,
                           num(x->holders, d, sizeof d),
                           module_name(x->module),
                           x->file ? loc : ""};
        cell_row(&t, v);
    }
    return section(
        &t,
        "largest saved tensors (a storage once; held by: how many saved tensors "
        "hold it)",
        c->n_tensors, lim);
}

/* The forward's table: held bytes at the end of each run of one module's
 * saves, at most top of them evenly spread (the last always; 0: every
 * one). 0, or -1 when out of memory. */
static int print_timeline(const gt_mem_call *c, size_t top)
{
    char a[32], d[32];
    size_t runs = 0;
    for (size_t i = 0; i < c->n_points; i++)
        runs += i + 1 == c->n_points || c->timeline[i + 1].group != c->timeline[i].group;
    size_t want = rows_shown(top, runs);
    table t = {.ncol = 3, .head = {"seq", "held", "after module"}, .right = {1, 1, 0}};
    for (size_t i = 0, k = 0; i < c->n_points; i++) {
        if (!(i + 1 == c->n_points || c->timeline[i + 1].group != c->timeline[i].group))
            continue;
        /* run k of runs; show it when it is the last of its share */
        if (k == runs - 1 || (k + 1) * want / runs != (k + 2) * want / runs) {
            const gt_mem_point *p = &c->timeline[i];
            const char *v[] = {num(p->seq, d, sizeof d),
                               gt_mem_human(p->bytes, a, sizeof a),
                               module_name(c->by_module[p->group].key)};
            cell_row(&t, v);
        }
        k++;
    }
    char title[160];
    snprintf(title, sizeof title,
             "held for this call as the forward ran: after %zu of its %zu module runs%s",
             t.rows, runs, t.rows < runs ? " (--top 0 shows each)" : "");
    return section(&t, title, 0, 0);
}

/* The checkpointing table: what recomputing each module would free, at
 * most top (0: every one). 0, or -1 when out of memory. */
static int print_checkpoints(const gt_mem_call *c, size_t top)
{
    char a[32], b[32], d[32], e[32];
    size_t lim = rows_shown(top, c->n_modules);
    table t = {.ncol = 5,
               .head = {"module", "frees", "held", "kept (inputs, params)", "shared"},
               .right = {0, 1, 1, 1, 1}};
    for (size_t i = 0; i < lim; i++) {
        const gt_mem_module *m = &c->modules[i];
        const char *v[] = {m->path, gt_mem_human(m->frees, a, sizeof a),
                           gt_mem_human(m->held, b, sizeof b),
                           gt_mem_human(m->kept, d, sizeof d),
                           gt_mem_human(m->shared, e, sizeof e)};
        cell_row(&t, v);
    }
    return section(
        &t,
        "checkpointing: recomputing a module in backward frees what it made and "
        "only it holds",
        c->n_modules, lim);
}

/* Call c's heading and, when detailed, its tables (at most top rows each;
 * 0: every row); ncalls: the calls of the trace. 0, or -1 when out of
 * memory. */
static int print_call(const gt_mem_call *c, size_t top, size_t ncalls)
{
    print_heading(c, ncalls);
    if (!c->detailed || c->saved == 0)
        return 0;
    for (int k = BY_MODULE; k <= BY_NODE; k++)
        if (print_groups(c, k, top) < 0)
            return -1;
    if (print_tensors(c, top) < 0 || print_timeline(c, top) < 0)
        return -1;
    return print_checkpoints(c, top);
}

/* --all's first table: every backward call, the bytes it holds and its
 * line. 0, or -1 when out of memory. */
static int print_call_list(const gt_memory *m)
{
    table tb = {.ncol = 5,
                .head = {"call", "held", "saved", "with other graphs", "line"},
                .right = {1, 1, 1, 1, 0},
                .first = 1};
    for (size_t i = 0; i < m->n; i++) {
        const gt_mem_call *k = &m->calls[i];
        char a[32], b[32], d[32], e[32], loc[4096];
        if (k->file)
            snprintf(loc, sizeof loc, "%s:%" PRId64, k->file, k->line);
        const char *row[] = {num(k->id, a, sizeof a), gt_mem_human(k->bytes, b, sizeof b),
                             num(k->saved, d, sizeof d),
                             gt_mem_human(k->live_bytes, e, sizeof e),
                             k->file ? loc : ""};
        cell_row(&tb, row);
    }
    return section(&tb, "backward calls", m->n, m->n);
}

/* The JSON document (memory.h's gt_memory_json) and a newline on stdout. */
static int print_json(gt_trace *t, const gt_memory *m)
{
    gt_strbuf b = GT_STRBUF_INIT;
    int rc = gt_memory_json(t, m, &b);
    if (rc == 0)
        puts(gt_strbuf_str(&b));
    else
        fprintf(stderr, "gradtrace: memory: %s\n", gt_trace_errmsg(t));
    gt_strbuf_release(&b);
    return rc ? -1 : 0;
}

static int parse_count(const char *s, long long min, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

int gt_cmd_memory(int argc, char **argv)
{
    enum { OPT_JSON = 256 };
    static const struct option longopts[] = {
        {"call", required_argument, NULL, 'c'}, {"all", no_argument, NULL, 'a'},
        {"top", required_argument, NULL, 'n'},  {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    gt_memory_options opts = {0};
    long long v, top = GT_MEMORY_DEFAULT_TOP;
    int json = 0, c, status = 2;
    gt_trace *t = NULL;
    gt_memory *m = NULL;

    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:an:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (parse_count(optarg, 1, &v) != 0)
                return gt_usage_error("memory", usage,
                                      "--call wants a positive number, not '%s'", optarg);
            opts.backward = v;
            break;
        case 'a':
            opts.all = 1;
            break;
        case 'n':
            if (parse_count(optarg, 0, &v) != 0)
                return gt_usage_error("memory", usage,
                                      "--top wants a number >= 0, not '%s'", optarg);
            top = v;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return gt_usage_error("memory", usage, "option '%s' needs a value",
                                  argv[optind - 1]);
        default:
            return gt_usage_error("memory", usage, "unknown option '%s'",
                                  argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return gt_usage_error("memory", usage,
                              argc - optind ? "want one trace" : "missing TRACE");
    const char *path = argv[optind];
    if (gt_cmd_open(GT_CMD_TRACE, path, &t) != 0)
        return 2;
    if (gt_memory_measure(t, &opts, &m) != 0) {
        fprintf(stderr, "gradtrace: memory %s: %s\n", path, gt_trace_errmsg(t));
        goto out;
    }
    if (json) {
        if (print_json(t, m) != 0)
            goto out;
    } else if (m->n == 0) {
        printf("no backward call in ");
        gt_term_puts(stdout, path);
        printf(": nothing is held for backward\n");
    } else {
        int bad = opts.all && print_call_list(m) < 0;
        for (size_t i = 0; !bad && i < m->n; i++) {
            if (!opts.all && i != m->chosen)
                continue;
            fputs(opts.all || i ? "\n" : "", stdout);
            bad = print_call(&m->calls[i], (size_t)top, opts.all ? 1 : m->n) < 0;
        }
        if (bad) {
            fprintf(stderr, "gradtrace: memory: out of memory\n");
            goto out;
        }
    }
    status = 0;
out:
    if (fflush(stdout) != 0 && status == 0) {
        fprintf(stderr, "gradtrace: memory: cannot write output\n");
        status = 2;
    }
    gt_memory_free(m);
    gt_trace_close(t);
    return status;
}
