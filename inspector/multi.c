/* Several traces at once: rank naming and rank sets; see multi.h. */
#include <dirent.h>
#include <stdarg.h>
#include <strings.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "grow.h"
#include <gradtrace/multi.h>
#include <gradtrace/trace.h>
#include "strbuf.h"

#define RANK_FIELD "{rank}"

char *gt_rank_path(const char *path, int64_t rank)
{
    char num[32];
    int nn = snprintf(num, sizeof num, "%lld", (long long)rank);
    size_t len = strlen(path);
    const char *field = strstr(path, RANK_FIELD);
    if (field) {
        /* every occurrence, as str.replace does */
        size_t count = 0;
        for (const char *p = field; p; p = strstr(p + 1, RANK_FIELD))
            count++;
        char *out = malloc(len + count * (size_t)nn + 1);
        if (!out)
            return NULL;
        char *o = out;
        for (const char *p = path; *p;) {
            if (!strncmp(p, RANK_FIELD, strlen(RANK_FIELD))) {
                memcpy(o, num, (size_t)nn);
                o += nn;
                p += strlen(RANK_FIELD);
            } else {
                *o++ = *p++;
            }
        }
        *o = '\0';
        return out;
    }
    /* os.path.splitext of the file name: the last dot, not a leading one */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot) {
        const char *p = base;
        while (p < dot && *p == '.')
            p++;
        if (p == dot) /* only dots before it: no extension */
            dot = NULL;
    }
    size_t stem = dot ? (size_t)(dot - path) : len;
    char *out = malloc(len + sizeof ".rank" + (size_t)nn);
    if (!out)
        return NULL;
    sprintf(out, "%.*s.rank%s%s", (int)stem, path, num, dot ? dot : "");
    return out;
}

char *gt_env_rank_path(const char *path)
{
    const char *r = getenv("RANK");
    if (r) {
        while (*r == ' ')
            r++;
    }
    if (r && *r && strspn(r, "0123456789 ") == strlen(r) && strlen(r) < 18)
        return gt_rank_path(path, strtoll(r, NULL, 10));
    return strdup(path);
}

/* ---- rank sets ----------------------------------------------------------- */

/* Keep the message on the set and return code. */
static int set_fail(gt_rank_set *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_fail(gt_rank_set *s, int code, const char *fmt, ...)
{
    va_list ap;
    if (s->err.oom)
        gt_strbuf_release(&s->err); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(&s->err);
    va_start(ap, fmt); /* a message too long for memory reads "out of memory" */
    gt_strbuf_vaddf(&s->err, fmt, ap);
    va_end(ap);
    return code;
}

const char *gt_rank_set_errmsg(const gt_rank_set *s)
{
    return s->err.oom ? "out of memory" : gt_strbuf_str(&s->err);
}

static int add(gt_rank_set *s, size_t *cap, const char *path)
{
    if (GT_ALLOC_GROW(s->v, s->n + 1, *cap, 8) != 0)
        return -1;
    gt_rank_trace *t = &s->v[s->n];
    memset(t, 0, sizeof *t);
    t->rank = -1;
    if (!(t->path = strdup(path)))
        return -1;
    s->n++;
    return 0;
}

static int is_sqlite_file(const char *path)
{
    struct stat st;
    char head[16];
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    return got == sizeof head && !memcmp(head, "SQLite format 3", 16);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add the SQLite files directly in `dir`, by name. 0, -1 out of memory,
 * -2 with the message (why the directory cannot be read) on `handle`, the
 * caller's set. */
static int add_dir(gt_rank_set *s, size_t *cap, const char *dir, gt_rank_set *handle)
{
    DIR *d = opendir(dir);
    if (!d)
        return set_fail(handle, -2, "cannot read directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, ncap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t need = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(need);
        if (!p) {
            rc = -1;
            break;
        }
        snprintf(p, need, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                 e->d_name);
        if (!is_sqlite_file(p)) {
            free(p);
            continue;
        }
        if (GT_ALLOC_GROW(names, n + 1, ncap, 16) != 0) {
            free(p);
            rc = -1;
            break;
        }
        names[n++] = p;
    }
    closedir(d);
    if (rc == 0 && n == 0)
        rc = set_fail(handle, -2, "no traces in directory %s", dir);
    if (rc == 0)
        qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && add(s, cap, names[i]) < 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

static int cmp_rank(const void *a, const void *b)
{
    const gt_rank_trace *x = a, *y = b;
    if (x->has_rank != y->has_rank)
        return x->has_rank ? -1 : 1;
    if (x->has_rank && x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return strcmp(x->path, y->path);
}

int gt_rank_set_load(gt_rank_set *out, int npaths, char **paths)
{
    gt_rank_set s = {0};
    size_t cap = 0;
    int rc = 0;
    out->n = 0;
    out->v = NULL;
    out->err = (gt_strbuf)GT_STRBUF_INIT;
    for (int i = 0; i < npaths && rc == 0; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = add_dir(&s, &cap, paths[i], out);
        else
            rc = add(&s, &cap, paths[i]);
    }
    if (rc == -1)
        rc = set_fail(out, GT_ENOMEM, "out of memory");
    else if (rc == -2)
        rc = GT_EINVAL;
    for (size_t i = 0; i < s.n && rc == 0; i++) {
        gt_trace *t = NULL;
        if ((rc = gt_trace_open(s.v[i].path, &t)) != GT_OK) {
            set_fail(out, rc, "%s", gt_trace_errmsg(t));
            gt_trace_close(t);
            break;
        }
        sqlite3_stmt *st = gt_trace_stmt(t, "SELECT rank FROM run");
        if (st && sqlite3_step(st) == SQLITE_ROW &&
            sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
            s.v[i].rank = sqlite3_column_int64(st, 0);
            s.v[i].has_rank = 1;
        }
        sqlite3_reset(st);
        gt_trace_close(t);
    }
    if (rc) {
        gt_rank_set_release(&s);
        return rc;
    }
    qsort(s.v, s.n, sizeof *s.v, cmp_rank);
    out->n = s.n;
    out->v = s.v;
    return 0;
}

void gt_rank_set_release(gt_rank_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].path);
    free(s->v);
    s->v = NULL;
    s->n = 0;
    gt_strbuf_release(&s->err);
}

int gt_format_ranks_buf(const int64_t *ranks, size_t n, gt_strbuf *out)
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        if (j > i)
            gt_strbuf_addf(out, "%s%lld-%lld", i ? ", " : "", (long long)ranks[i],
                           (long long)ranks[j]);
        else
            gt_strbuf_addf(out, "%s%lld", i ? ", " : "", (long long)ranks[i]);
        i = j + 1;
    }
    return out->oom ? GT_ENOMEM : GT_OK;
}

void gt_format_ranks(const int64_t *ranks, size_t n, char *buf, size_t len)
{
    gt_strbuf b = GT_STRBUF_INIT;
    if (len == 0)
        return;
    int rc = gt_format_ranks_buf(ranks, n, &b);
    snprintf(buf, len, "%s", rc == GT_OK ? gt_strbuf_str(&b) : "");
    gt_strbuf_release(&b);
}

/* ---- one connection over many traces -------------------------------------- */

#include <ctype.h>

#include "gt_schema_sql.h"
#include "gt_views_sql.h"
#include <gradtrace/termtext.h>

int gt_multi_wanted(int npaths, char **paths)
{
    struct stat st;
    return npaths > 1 || (npaths == 1 && stat(paths[0], &st) == 0 && S_ISDIR(st.st_mode));
}

int gt_multi_max_traces(void)
{
    sqlite3 *db = NULL;
    int n = 10;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK)
        n = sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, -1);
    sqlite3_close(db);
    return n + 1;
}

typedef struct objlist {
    size_t n;
    char **name;
    char **sql; /* views: their CREATE statement; tables: NULL */
} objlist;

static void objlist_clear(objlist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->name[i]);
        free(l->sql[i]);
    }
    free(l->name);
    free(l->sql);
    memset(l, 0, sizeof *l);
}

/* The tables and views of this gradtrace's schema, in creation order, from
 * a scratch in-memory database built from the compiled-in DDL. */
/* A malloc'd copy of column i; NULL for SQL NULL or out of memory (either
 * a failure for the columns read here, never NULL). */
static char *col_dup(sqlite3_stmt *st, int i)
{
    int oom = 0;
    const char *v = gt_column_text(st, i, &oom);
    return v ? strdup(v) : NULL;
}

static int own_objects(objlist *tables, objlist *views)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, gt_schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, gt_views_sql, NULL, NULL, NULL) != SQLITE_OK ||
        gt_db_prepare(db,
                      "SELECT type, name, sql FROM sqlite_schema "
                      "WHERE type IN ('table', 'view') ORDER BY rowid",
                      &st) != SQLITE_OK)
        goto out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int oom = 0;
        const char *type = gt_column_text(st, 0, &oom);
        if (!type)
            goto out;
        int is_view = !strcmp(type, "view");
        objlist *l = is_view ? views : tables;
        char **nn = realloc(l->name, (l->n + 1) * sizeof *nn);
        if (!nn)
            goto out;
        l->name = nn;
        char **ns = realloc(l->sql, (l->n + 1) * sizeof *ns);
        if (!ns)
            goto out;
        l->sql = ns;
        l->name[l->n] = col_dup(st, 1);
        l->sql[l->n] = is_view ? col_dup(st, 2) : NULL;
        l->n++;
        if (!l->name[l->n - 1] || (is_view && !l->sql[l->n - 1]))
            goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

static int in_objlist(const objlist *l, const char *s, size_t n)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->name[i]) == n && !strncasecmp(l->name[i], s, n))
            return (int)i;
    return -1;
}

static void addf(gt_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void addf(gt_strbuf *b, const char *fmt, ...)
{
    va_list ap; /* any length: a name from the trace is not cut (nor refused) */
    va_start(ap, fmt);
    if (gt_strbuf_vaddf(b, fmt, ap) != 0)
        b->oom = 1; /* a format error too: the statement would be wrong */
    va_end(ap);
}

/* Append view `name`'s CREATE statement `sql` (our own views.sql text) as
 * TEMP view _gt<idx>_<name> over trace schema `schema`: each table named
 * after FROM or JOIN becomes "schema".table, each view temp._gt<idx>_view. */
static void rewrite_view(gt_strbuf *b, const char *sql, const char *name, int idx,
                         const char *schema, const objlist *tables, const objlist *views)
{
    const char *p = sql;
    char prev[8] = "";
    int header = 1;
    while (*p) {
        const char *s = p;
        if (isspace((unsigned char)*p)) {
            while (isspace((unsigned char)*p))
                p++;
            gt_strbuf_add(b, s, (size_t)(p - s));
            continue;
        }
        if (p[0] == '-' && p[1] == '-') {
            while (*p && *p != '\n')
                p++;
            gt_strbuf_add(b, s, (size_t)(p - s));
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
            gt_strbuf_add(b, s, (size_t)(p - s));
            continue;
        }
        if (*p == '\'' || *p == '"' || *p == '`' || *p == '[') {
            char close = *p == '[' ? ']' : *p;
            p++;
            while (*p && !(*p == close && p[1] != close))
                p += *p == close ? 2 : 1;
            if (*p)
                p++;
            gt_strbuf_add(b, s, (size_t)(p - s));
            snprintf(prev, sizeof prev, "%s", "");
            continue;
        }
        if (isalpha((unsigned char)*p) || *p == '_') {
            while (isalnum((unsigned char)*p) || *p == '_' || *p == '$')
                p++;
            size_t n = (size_t)(p - s);
            if (header) {
                /* CREATE VIEW [IF NOT EXISTS] name AS */
                if (n == strlen(name) && !strncasecmp(s, name, n)) {
                    addf(b, "CREATE TEMP VIEW \"_gt%d_%s\"", idx, name);
                    header = 0;
                }
                continue;
            }
            const char *q = p;
            while (isspace((unsigned char)*q))
                q++;
            int t = -1, v = -1;
            if ((!strcasecmp(prev, "FROM") || !strcasecmp(prev, "JOIN")) && *q != '.' &&
                *q != '(') {
                t = in_objlist(tables, s, n);
                if (t < 0)
                    v = in_objlist(views, s, n);
            }
            if (t >= 0)
                addf(b, "\"%s\".\"%s\"", schema, tables->name[t]);
            else if (v >= 0)
                addf(b, "temp.\"_gt%d_%s\"", idx, views->name[v]);
            else
                gt_strbuf_add(b, s, n);
            snprintf(prev, sizeof prev, "%.*s", n < sizeof prev ? (int)n : 0, s);
            continue;
        }
        p++;
        if (!header)
            gt_strbuf_add(b, s, 1);
        prev[0] = *s;
        prev[1] = '\0';
    }
    gt_strbuf_add(b, ";\n", 2);
}

/* 1 if trace schema `schema` has column `col` in `table`. */
static int has_column(sqlite3 *db, const char *schema, const char *table, const char *col)
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM \"%s\".pragma_table_info(?1) WHERE name = ?2", schema);
    if (gt_db_prepare(db, sql, &st) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return found;
}

/* The columns of `table` in this gradtrace's schema, into cols (malloc'd
 * names, *n of them). 0 or -1. */
static int own_columns(const char *table, char ***cols, size_t *n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = -1;
    *cols = NULL;
    *n = 0;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, gt_schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
        gt_db_prepare(db, "SELECT name FROM pragma_table_info(?1) ORDER BY cid", &st) !=
            SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
        char **v = realloc(*cols, (*n + 1) * sizeof *v);
        if (!v)
            goto out;
        *cols = v;
        if (!(v[*n] = col_dup(st, 0)))
            goto out;
        (*n)++;
    }
    rc = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

int gt_multi_connect(gt_rank_set *s, sqlite3 **out)
{
    sqlite3 *db = NULL;
    objlist tables = {0}, views = {0};
    gt_strbuf b = {0};
    char **schemas = NULL;
    int64_t *ranks = NULL;
    int rc = GT_EIO;
    char *emsg = NULL;

    if (s->n == 0 || s->n > (size_t)gt_multi_max_traces())
        return set_fail(s, GT_EINVAL,
                        "%zu traces given, at most %d can be read at once "
                        "(SQLite's limit on attached databases); query fewer, or see "
                        "SCHEMA.md for DuckDB over any number",
                        s->n, gt_multi_max_traces());
    schemas = calloc(s->n, sizeof *schemas);
    ranks = calloc(s->n, sizeof *ranks);
    if (!schemas || !ranks || own_objects(&tables, &views) < 0)
        goto nomem;
    if (sqlite3_open_v2(s->v[0].path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        set_fail(s, rc, "cannot open %s: %s", s->v[0].path,
                 db ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        ranks[i] = s->v[i].has_rank ? s->v[i].rank : (int64_t)i;
        char name[32];
        snprintf(name, sizeof name, i ? "t%zu" : "main", i);
        if (!(schemas[i] = strdup(name)))
            goto nomem;
        if (i == 0)
            continue;
        sqlite3_stmt *st = NULL;
        char sql[64];
        snprintf(sql, sizeof sql, "ATTACH ?1 AS %s", name);
        int ok = gt_db_prepare(db, sql, &st) == SQLITE_OK &&
                 sqlite3_bind_text(st, 1, s->v[i].path, -1, SQLITE_STATIC) == SQLITE_OK &&
                 sqlite3_step(st) == SQLITE_DONE;
        sqlite3_finalize(st);
        if (!ok) {
            set_fail(s, rc, "cannot open %s: %s", s->v[i].path, sqlite3_errmsg(db));
            goto out;
        }
    }

    /* the list of traces */
    addf(&b, "CREATE TEMP TABLE traces (rank INTEGER, schema TEXT, path TEXT);\n");
    /* every table, across the traces; run's own rank column is the rank */
    for (size_t t = 0; t < tables.n; t++) {
        char **cols;
        size_t nc;
        if (own_columns(tables.name[t], &cols, &nc) < 0)
            goto nomem;
        addf(&b, "CREATE TEMP VIEW \"%s\" AS ", tables.name[t]);
        for (size_t i = 0; i < s->n; i++) {
            addf(&b, "%sSELECT %lld AS rank", i ? " UNION ALL " : "",
                 (long long)ranks[i]);
            for (size_t c = 0; c < nc; c++) {
                if (!strcmp(tables.name[t], "run") && !strcmp(cols[c], "rank"))
                    continue;
                if (has_column(db, schemas[i], tables.name[t], cols[c]))
                    addf(&b, ", \"%s\"", cols[c]);
                else
                    addf(&b, ", NULL AS \"%s\"", cols[c]);
            }
            addf(&b, " FROM \"%s\".\"%s\"", schemas[i], tables.name[t]);
        }
        gt_strbuf_add(&b, ";\n", 2);
        for (size_t c = 0; c < nc; c++)
            free(cols[c]);
        free(cols);
    }
    /* every view: our definition per trace, then across them */
    for (size_t v = 0; v < views.n; v++)
        for (size_t i = 0; i < s->n; i++)
            rewrite_view(&b, views.sql[v], views.name[v], (int)i, schemas[i], &tables,
                         &views);
    for (size_t v = 0; v < views.n; v++) {
        addf(&b, "CREATE TEMP VIEW \"%s\" AS ", views.name[v]);
        for (size_t i = 0; i < s->n; i++)
            addf(&b, "%sSELECT %lld AS rank, * FROM temp.\"_gt%zu_%s\"",
                 i ? " UNION ALL " : "", (long long)ranks[i], i, views.name[v]);
        gt_strbuf_add(&b, ";\n", 2);
    }
    if (b.oom)
        goto nomem;
    if (sqlite3_exec(db, b.p, NULL, NULL, &emsg) != SQLITE_OK) {
        rc = set_fail(s, GT_ECORRUPT, "cannot join the traces: %s",
                      emsg ? emsg : sqlite3_errmsg(db));
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        sqlite3_stmt *st = NULL;
        int ok = gt_db_prepare(db, "INSERT INTO temp.traces VALUES (?1, ?2, ?3)", &st) ==
                 SQLITE_OK;
        if (ok) {
            sqlite3_bind_int64(st, 1, ranks[i]);
            sqlite3_bind_text(st, 2, schemas[i], -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, s->v[i].path, -1, SQLITE_STATIC);
            ok = sqlite3_step(st) == SQLITE_DONE;
        }
        sqlite3_finalize(st);
        if (!ok) {
            rc = set_fail(s, GT_ECORRUPT, "cannot join the traces: %s",
                          sqlite3_errmsg(db));
            goto out;
        }
    }
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    *out = db;
    db = NULL;
    rc = 0;
    goto out;
nomem:
    rc = set_fail(s, GT_ENOMEM, "out of memory");
out:
    sqlite3_free(emsg);
    sqlite3_close(db);
    free(b.p);
    objlist_clear(&tables);
    objlist_clear(&views);
    for (size_t i = 0; schemas && i < s->n; i++)
        free(schemas[i]);
    free(schemas);
    free(ranks);
    return rc;
}

int gt_sql_count_traces(int npos, char **pos)
{
    struct stat st;
    if (npos <= 1)
        return npos;
    if (!strcmp(pos[npos - 1], "-") || stat(pos[npos - 1], &st) != 0)
        return npos - 1;
    return npos;
}

void gt_print_rank_line(FILE *out, gt_trace *t)
{
    /* v3 columns when the trace has them (an older one has rank only) */
    sqlite3_stmt *st = gt_trace_stmt(t, "SELECT rank, world_size, local_rank, backend,"
                                        " launcher_run_id FROM run WHERE id = 1");
    int v3 = st != NULL;
    if (!v3 && !(st = gt_trace_stmt(t, "SELECT rank FROM run WHERE id = 1")))
        return;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        fprintf(out, "rank       %lld", (long long)sqlite3_column_int64(st, 0));
        if (v3 && sqlite3_column_type(st, 1) != SQLITE_NULL)
            fprintf(out, " of %lld", (long long)sqlite3_column_int64(st, 1));
        if (v3 && sqlite3_column_type(st, 2) != SQLITE_NULL)
            fprintf(out, " (local %lld)", (long long)sqlite3_column_int64(st, 2));
        if (v3 && sqlite3_column_type(st, 3) != SQLITE_NULL) {
            fputs(", backend ", out);
            gt_term_puts(out, (const char *)sqlite3_column_text(st, 3));
        }
        if (v3 && sqlite3_column_type(st, 4) != SQLITE_NULL) {
            fputs(", launcher run id ", out);
            gt_term_puts(out, (const char *)sqlite3_column_text(st, 4));
        }
        fputc('\n', out);
    }
    sqlite3_reset(st);
}
