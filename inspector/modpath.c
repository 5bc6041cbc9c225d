/* Module paths of stacks; see modpath.h. */
#include "modpath.h"

#include <stdlib.h>
#include <string.h>
#include "trace_int.h"

/* Walks up from ?1 (bounded: a damaged trace may hold a cycle) to the first
 * row with a module, at or above the location's row when ?2 = 0: the
 * innermost row whose frame is its user frame (none: the innermost row,
 * as GT_USER_FRAME falls back to the innermost frame). */
static const char sql_module[] =
    "WITH RECURSIVE up(id, depth) AS (SELECT ?1, 0 UNION ALL"
    " SELECT s.parent, up.depth + 1 FROM up JOIN stacks s ON s.id = up.id"
    " WHERE s.parent IS NOT NULL AND up.depth < 10000),"
    " at(depth) AS (SELECT CASE WHEN ?2 THEN 0 ELSE coalesce((SELECT min(u.depth) FROM "
    "up u"
    "  JOIN stacks us ON us.id = u.id WHERE us.frame = us.user_frame), 0) END)"
    " SELECT (SELECT text FROM strings WHERE id = s.module)"
    " FROM up JOIN stacks s ON s.id = up.id, at"
    " WHERE s.module IS NOT NULL AND up.depth >= at.depth ORDER BY up.depth LIMIT 1";

int gt_trace_stack_module(gt_trace *t, int64_t stack, int innermost, char **out)
{
    *out = NULL;
    if (!stack || gt_trace_schema_version(t) < 5)
        return 0;
    sqlite3_stmt *st = gt_trace_stmt(t, sql_module);
    if (!st)
        return GT_ESQL;
    sqlite3_bind_int64(st, 1, stack);
    sqlite3_bind_int(st, 2, innermost != 0);
    int s = sqlite3_step(st), rc = 0, oom = 0;
    if (s == SQLITE_ROW) {
        const char *v = gt_column_text(st, 0, &oom);
        if (!oom && v && !(*out = strdup(v)))
            oom = 1;
        if (oom)
            rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
    } else if (s != SQLITE_DONE) {
        rc = gt__trace_fail(t, GT_ESQL, "cannot read module paths: %s",
                            sqlite3_errmsg(gt_trace_db(t)));
    }
    sqlite3_reset(st);
    return rc;
}

int gt_loc_json_add_module(gt_trace *t, int64_t stack, char **json)
{
    char *m = NULL;
    int rc = *json ? gt_trace_stack_module(t, stack, 0, &m) : 0;
    if (rc || !m || !*m) {
        free(m);
        return rc;
    }
    sqlite3_stmt *st = gt_trace_stmt(t, "SELECT json_set(?1, '$.module', ?2)");
    if (!st) {
        free(m);
        return GT_ESQL;
    }
    sqlite3_bind_text(st, 1, *json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, m, -1, SQLITE_STATIC);
    int oom = 0;
    char *with = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *v = gt_column_text(st, 0, &oom);
        if (!oom && v && !(with = strdup(v)))
            oom = 1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    free(m);
    if (oom)
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    if (with) {
        free(*json);
        *json = with;
    }
    return 0;
}

/* The number component `s` (n bytes) holds, or -1 if it is not one. */
static long component_number(const char *s, size_t n)
{
    if (!n || n > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Start and length of component k of path p ("." separated); 0 when p has
 * fewer. */
static int component(const char *p, size_t k, const char **at, size_t *len)
{
    for (size_t i = 0; i < k; i++) {
        p = strchr(p, '.');
        if (!p)
            return 0;
        p++;
    }
    *at = p;
    *len = strcspn(p, ".");
    return 1;
}

static size_t components(const char *p)
{
    size_t n = 1;
    for (; *p; p++)
        n += *p == '.';
    return n;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int gt_module_span(const char *const *paths, size_t n, gt_strbuf *out)
{
    if (!n || !paths[0])
        return 0;
    size_t nc = components(paths[0]), vary = (size_t)-1;
    for (size_t i = 1; i < n; i++)
        if (!paths[i] || components(paths[i]) != nc)
            return 0;
    /* the one component that differs, numeric in every path */
    for (size_t k = 0; k < nc; k++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        component(paths[0], k, &a, &la);
        for (size_t i = 1; i < n; i++) {
            component(paths[i], k, &b, &lb);
            if (la == lb && !memcmp(a, b, la))
                continue;
            if (vary != (size_t)-1 && vary != k)
                return 0;
            vary = k;
            if (component_number(a, la) < 0 || component_number(b, lb) < 0)
                return 0;
        }
    }
    if (vary == (size_t)-1) {
        gt_strbuf_adds(out, paths[0]);
        return 1;
    }
    long *v = malloc(n * sizeof *v);
    if (!v) {
        out->oom = 1;
        return 0;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *a = NULL;
        size_t la = 0;
        component(paths[i], vary, &a, &la);
        v[m++] = component_number(a, la);
    }
    qsort(v, m, sizeof *v, cmp_long);
    size_t d = 0; /* distinct */
    for (size_t i = 0; i < m; i++)
        if (!d || v[d - 1] != v[i])
            v[d++] = v[i];
    const char *a = paths[0];
    size_t la = 0;
    component(paths[0], vary, &a, &la);
    gt_strbuf_add(out, paths[0], (size_t)(a - paths[0]));
    if (d > 1 && v[d - 1] - v[0] == (long)d - 1) {
        gt_strbuf_addf(out, "%ld\xe2\x80\x93%ld", v[0], v[d - 1]);
    } else {
        gt_strbuf_adds(out, "{");
        for (size_t i = 0; i < d; i++)
            gt_strbuf_addf(out, "%s%ld", i ? "," : "", v[i]);
        gt_strbuf_adds(out, "}");
    }
    gt_strbuf_adds(out, a + la);
    free(v);
    return 1;
}
