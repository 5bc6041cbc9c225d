/* The memory report as one JSON document (memory.h's gt_memory_json):
 * `gradtrace memory --json` and Trace.memory() print it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include <gradtrace/memory.h>
#include "strbuf.h"
#include <gradtrace/trace.h>
#include "trace_int.h"

typedef struct jw {
    gt_strbuf b;
    sqlite3_stmt *quote; /* SELECT json_quote(?1) */
    sqlite3_stmt *value; /* ?1 as JSON when it is JSON, else as a string */
    int bad;
} jw;

/* Append s through statement st (json_quote, or json): null for NULL. */
static void jput(jw *j, sqlite3_stmt *st, const char *s)
{
    if (!s) {
        gt_strbuf_adds(&j->b, "null");
        return;
    }
    sqlite3_bind_text(st, 1, s, -1, SQLITE_STATIC);
    const char *v;
    if (sqlite3_step(st) == SQLITE_ROW && (v = (const char *)sqlite3_column_text(st, 0)))
        gt_strbuf_adds(&j->b, v);
    else
        j->bad = 1;
    sqlite3_reset(st);
}

/* Append s as a JSON string (null for NULL). */
static void jstr(jw *j, const char *s)
{
    jput(j, j->quote, s);
}

static void jkey(jw *j, const char *k, int first)
{
    gt_strbuf_adds(&j->b, first ? "\"" : ",\"");
    gt_strbuf_adds(&j->b, k);
    gt_strbuf_adds(&j->b, "\":");
}

static void jint(jw *j, const char *k, int64_t v)
{
    jkey(j, k, 0);
    gt_strbuf_addf(&j->b, "%" PRId64, v);
}

static void jtext(jw *j, const char *k, const char *v)
{
    jkey(j, k, 0);
    jstr(j, v);
}

static void jloc(jw *j, const char *file, int64_t line, const char *code)
{
    jkey(j, "location", 0);
    if (!file) {
        gt_strbuf_adds(&j->b, "null");
        return;
    }
    gt_strbuf_adds(&j->b, "{\"file\":");
    jstr(j, file);
    jint(j, "line", line);
    jtext(j, "code", code);
    gt_strbuf_adds(&j->b, "}");
}

static void json_call(jw *j, const gt_mem_call *c, int chosen)
{
    jkey(j, "id", 1);
    gt_strbuf_addf(&j->b, "%" PRId64, c->id);
    jint(j, "seq", c->seq);
    jtext(j, "api", c->api);
    jtext(j, "status", c->status);
    jloc(j, c->file, c->line, c->code);
    jkey(j, "chosen", 0);
    gt_strbuf_adds(&j->b, chosen ? "true" : "false");
    jint(j, "bytes", c->bytes);
    jint(j, "param_bytes", c->param_bytes);
    jint(j, "saved", c->saved);
    jint(j, "storages", c->storages);
    jint(j, "live_bytes", c->live_bytes);
    if (!c->detailed)
        return;
    static const char *names[] = {"by_module", "by_line", "by_node"};
    static const char *keys[] = {"module", "line", "node"};
    const gt_mem_group *gs[] = {c->by_module, c->by_line, c->by_node};
    size_t ns[] = {c->n_module, c->n_line, c->n_node};
    for (int k = 0; k < 3; k++) {
        jkey(j, names[k], 0);
        gt_strbuf_adds(&j->b, "[");
        for (size_t i = 0; i < ns[k]; i++) {
            gt_strbuf_adds(&j->b, i ? ",{" : "{");
            jkey(j, keys[k], 1);
            jstr(j, k == 1 && !*gs[k][i].key ? NULL : gs[k][i].key);
            if (k == 1)
                jtext(j, "code", gs[k][i].code);
            jint(j, "bytes", gs[k][i].bytes);
            jint(j, "saved", gs[k][i].saved);
            jint(j, "first_seq", gs[k][i].first_seq);
            gt_strbuf_adds(&j->b, "}");
        }
        gt_strbuf_adds(&j->b, "]");
    }
    jkey(j, "tensors", 0);
    gt_strbuf_adds(&j->b, "[");
    for (size_t i = 0; i < c->n_tensors; i++) {
        const gt_mem_tensor *x = &c->tensors[i];
        gt_strbuf_adds(&j->b, i ? ",{" : "{");
        jkey(j, "seq", 1);
        gt_strbuf_addf(&j->b, "%" PRId64, x->seq);
        jint(j, "node", x->node);
        jtext(j, "node_name", x->node_name);
        jtext(j, "slot", x->slot);
        jkey(j, "tensor", 0);
        x->tensor ? gt_strbuf_addf(&j->b, "%" PRId64, x->tensor)
                  : gt_strbuf_adds(&j->b, "null");
        jkey(j, "storage", 0);
        x->storage ? gt_strbuf_addf(&j->b, "%" PRId64, x->storage)
                   : gt_strbuf_adds(&j->b, "null");
        jint(j, "bytes", x->bytes);
        jkey(j, "nbytes", 0);
        x->nbytes >= 0 ? gt_strbuf_addf(&j->b, "%" PRId64, x->nbytes)
                       : gt_strbuf_adds(&j->b, "null");
        jint(j, "holders", x->holders);
        jtext(j, "dtype", x->dtype);
        jkey(j, "shape", 0);
        jput(j, j->value, x->shape); /* the trace's JSON array */
        jtext(j, "module", x->module);
        jloc(j, x->file, x->line, x->code);
        gt_strbuf_adds(&j->b, "}");
    }
    gt_strbuf_adds(&j->b, "]");
    jkey(j, "checkpoint", 0);
    gt_strbuf_adds(&j->b, "[");
    for (size_t i = 0; i < c->n_modules; i++) {
        const gt_mem_module *m = &c->modules[i];
        gt_strbuf_adds(&j->b, i ? ",{" : "{");
        jkey(j, "module", 1);
        jstr(j, m->path);
        jint(j, "frees", m->frees);
        jint(j, "held", m->held);
        jint(j, "kept", m->kept);
        jint(j, "shared", m->shared);
        gt_strbuf_adds(&j->b, "}");
    }
    gt_strbuf_adds(&j->b, "]");
    jkey(j, "timeline", 0);
    gt_strbuf_adds(&j->b, "[");
    for (size_t i = 0; i < c->n_points; i++) {
        gt_strbuf_addf(&j->b, "%s{\"seq\":%" PRId64 ",\"bytes\":%" PRId64 ",\"module\":",
                       i ? "," : "", c->timeline[i].seq, c->timeline[i].bytes);
        jstr(j, c->by_module[c->timeline[i].group].key);
        gt_strbuf_adds(&j->b, "}");
    }
    gt_strbuf_adds(&j->b, "]");
}

/* The whole document, checked and minified by SQLite's json(). 0, or -1
 * with the message printed. */
int gt_memory_json(gt_trace *t, const gt_memory *m, gt_strbuf *out)
{
    sqlite3 *db = gt_trace_db(t);
    sqlite3_stmt *st = NULL;
    jw j = {0};
    int rc = -1, nomem = 0;
    if (!(j.quote = gt_trace_stmt(t, "SELECT json_quote(?1)")) ||
        !(j.value = gt_trace_stmt(t, "SELECT CASE WHEN json_valid(?1) THEN json(?1)"
                                     " ELSE json_quote(?1) END"))) {
        nomem = gt_trace_errcode(t) == GT_ENOMEM;
        goto out;
    }
    gt_strbuf_adds(&j.b, "{\"trace\":");
    jstr(&j, gt_trace_path(t));
    jkey(&j, "backward", 0);
    if (m->n)
        gt_strbuf_addf(&j.b, "%" PRId64, m->calls[m->chosen].id);
    else
        gt_strbuf_adds(&j.b, "null");
    jkey(&j, "calls", 0);
    gt_strbuf_adds(&j.b, "[");
    for (size_t i = 0; i < m->n; i++) {
        gt_strbuf_adds(&j.b, i ? ",{" : "{");
        json_call(&j, &m->calls[i], i == m->chosen);
        gt_strbuf_adds(&j.b, "}");
    }
    gt_strbuf_adds(&j.b, "]}");
    if (j.bad || j.b.oom)
        goto out;
    if (!(st = gt_trace_stmt(t, "SELECT json(?1)"))) {
        nomem = gt_trace_errcode(t) == GT_ENOMEM;
        goto out;
    }
    sqlite3_bind_text(st, 1, gt_strbuf_str(&j.b), -1, SQLITE_STATIC);
    const char *doc;
    if (sqlite3_step(st) == SQLITE_ROW &&
        (doc = (const char *)sqlite3_column_text(st, 0)) && gt_strbuf_adds(out, doc) == 0)
        rc = 0;
out:
    nomem |= j.b.oom;
    if (rc != 0)
        rc = gt__trace_fail(t, nomem ? GT_ENOMEM : GT_ECORRUPT, "cannot write JSON: %s",
                            nomem ? "out of memory" : sqlite3_errmsg(db));
    sqlite3_reset(st);
    sqlite3_reset(j.quote);
    sqlite3_reset(j.value);
    gt_strbuf_release(&j.b);
    return rc;
}

/* ---- the command --------------------------------------------------------- */
