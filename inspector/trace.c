/* Opening a trace for reading; see trace.h. */
#include <gradtrace/trace.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "gtmap.h"
#include "pysrc.h"
#include "rowlog.h"
#include "strbuf.h"
#include "tracelock.h"
#include "gt_indexes_sql.h"
#include "gt_views_sql.h"
#include "trace_int.h"

/* A trace smaller than this is read as it is even without the close-time
 * indexes: its scans are cheap. */
#define GT__INDEX_MIN_BYTES (256 * 1024)

struct gt_trace {
    sqlite3 *db;
    char *path;
    int schema_version;
    int partial;
    int views;           /* 1 once gt_trace_use_views made the TEMP views */
    uint64_t tables;     /* bit i: schema_tables[i] is a table of the file */
    int64_t stopped_seq; /* run.stopped_seq (schema 2), 0 if none */
    char *stopped_reason;
    char *note; /* what opening did beyond reading, NULL if nothing */
    struct {    /* gt_trace_stmt's statements, by SQL address */
        const char *sql;
        sqlite3_stmt *st;
    } * stmts;
    size_t nstmts, capstmts;
    gt_map names;   /* tensor id -> 1 + index in tnames */
    struct tnames { /* gt_trace_names / _json, read once per tensor */
        char **v;
        int *rank; /* per name: 0 its own, d a base d views up, 1000 a tensor
                    * sharing its version counter */
        size_t n;
        char *json; /* the names as a JSON array */
    } * tnames;
    size_t ntnames, captnames;
    struct tsource { /* gt_trace_source: each file read once */
        char *path;
        char **lines; /* NULL when unreadable or changed */
        size_t n;
        int changed; /* it no longer holds a recorded line */
    } * sources;
    size_t nsources, capsources;
    const char **changed; /* the paths of the changed ones, in order found */
    size_t nchanged;
    gt_strbuf err; /* gt_trace_errmsg; oom: "out of memory" */
    int errcode;   /* the GT_E* code that came with it */
};

static int int_query(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* Fold a write-ahead log left by a killed recording into the main file, so
 * a read-only connection sees every committed batch. Loses nothing: only
 * committed frames are copied. */
static void checkpoint_wal(const char *path)
{
    size_t n = strlen(path);
    char *wal = malloc(n + 5);
    if (!wal)
        return;
    memcpy(wal, path, n);
    memcpy(wal + n, "-wal", 5);
    struct stat st;
    int has_wal = stat(wal, &st) == 0;
    free(wal);
    if (!has_wal || access(path, W_OK) != 0)
        return;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 2000);
        sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
    }
    sqlite3_close(db);
}

/* The trace's connection: read-only, and without SQLite's per-connection
 * mutex (SQLite's multi-thread mode): a gt_trace, with its statement cache
 * and message, is one thread's at a time anyway, and the mutex cost a lock
 * and an unlock on every call into SQLite. */
#define TRACE_OPEN_FLAGS (SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX)

/* 1 if the run has not ended (still recording, or killed). */
#define RUNNING_SQL "SELECT count(*) FROM run WHERE status = '" GT_RUN_STATUS_RUNNING "'"

/* The tables of this gradtrace's schema (include/gradtrace/format.h). */
#define GT__TABLE_NAME(name) #name,
static const char *const schema_tables[] = {GT_TABLE_LIST(GT__TABLE_NAME)};
#undef GT__TABLE_NAME

/* What opening needs to know of the file's schema, from one scan of
 * sqlite_schema (which has no index: each lookup by name would scan it
 * again). */
typedef struct schema_scan {
    int has_run;        /* a table named run */
    uint64_t tables;    /* bit i: a row names schema_tables[i] as a table */
    int missing;        /* indexes of schema/indexes.sql the file lacks */
    size_t bad;         /* the first of schema_tables that is not a table, */
    gt_strbuf bad_kind; /* and what it is instead; bad == n_tables if none */
} schema_scan;

#define N_SCHEMA_TABLES (sizeof schema_tables / sizeof *schema_tables)
_Static_assert(N_SCHEMA_TABLES <= 64, "gt_trace.tables holds a bit per table");

/* The next index name of schema/indexes.sql (each created by a line
 * "CREATE INDEX IF NOT EXISTS <name> ON") from *p on: its length, *name
 * set and *p moved past it; 0 when there is no other. */
static size_t next_index_name(const char **p, const char **name)
{
    static const char key[] = "CREATE INDEX IF NOT EXISTS ";
    const char *at = strstr(*p, key);
    if (!at)
        return 0;
    *name = at + sizeof key - 1;
    size_t len = strspn(*name, "abcdefghijklmnopqrstuvwxyz_0123456789");
    *p = *name + len;
    return len;
}

/* Fill *sc from the schema of db (the first row of a name is the one that
 * counts, as for a lookup by name). Returns GT_OK, GT_ENOMEM, or
 * GT_ECORRUPT when SQLite cannot read the schema (a damaged file); the
 * message on t. */
static int scan_schema(gt_trace *t, sqlite3 *db, const char *path, schema_scan *sc)
{
    sqlite3_stmt *st = NULL;
    unsigned char seen[N_SCHEMA_TABLES] = {0};
    unsigned char *found = NULL; /* per index of indexes.sql: in the file */
    size_t nidx = 0, len;
    const char *p = gt_indexes_sql, *name;
    int rc = GT_ENOMEM, s;

    memset(sc, 0, sizeof *sc);
    sc->bad = N_SCHEMA_TABLES;
    while (next_index_name(&p, &name))
        nidx++;
    if (!(found = calloc(nidx + 1, 1)))
        goto fail;
    s = sqlite3_prepare_v2(db, "SELECT name, type FROM sqlite_schema", -1, &st, NULL);
    while (s == SQLITE_OK || s == SQLITE_ROW) {
        if ((s = sqlite3_step(st)) != SQLITE_ROW)
            break;
        int oom = 0;
        const char *n = gt_column_text(st, 0, &oom);
        const char *type = gt_column_text(st, 1, &oom);
        if (oom) {
            s = SQLITE_NOMEM;
            break;
        }
        if (!n)
            continue;
        int is_table = type && !strcmp(type, "table");
        if (is_table && !strcmp(n, "run"))
            sc->has_run = 1;
        if (type && !strcmp(type, "index")) {
            p = gt_indexes_sql;
            for (size_t i = 0; (len = next_index_name(&p, &name)) != 0; i++)
                if (strlen(n) == len && !memcmp(n, name, len))
                    found[i] = 1;
        }
        for (size_t i = 0; i < N_SCHEMA_TABLES; i++) {
            if (strcmp(n, schema_tables[i]))
                continue;
            if (is_table)
                sc->tables |= (uint64_t)1 << i;
            if (seen[i])
                continue;
            seen[i] = 1;
            if (!is_table && i < sc->bad) {
                sc->bad = i;
                gt_strbuf_reset(&sc->bad_kind);
                gt_strbuf_adds(&sc->bad_kind, type ? type : "NULL");
            }
        }
    }
    if (s != SQLITE_DONE) {
        if ((s & 0xff) != SQLITE_NOMEM && (sqlite3_errcode(db) & 0xff) != SQLITE_NOMEM) {
            rc = gt__trace_fail(t, GT_ECORRUPT, "cannot open %s: %s", path,
                                sqlite3_errmsg(db));
        }
        goto fail;
    }
    if (sc->bad_kind.oom)
        goto fail;
    for (size_t i = 0; i < nidx; i++)
        sc->missing += !found[i];
    sqlite3_finalize(st);
    free(found);
    return GT_OK;
fail:
    if (rc == GT_ENOMEM)
        gt__trace_fail(t, rc, "cannot open %s: out of memory", path);
    sqlite3_finalize(st);
    free(found);
    gt_strbuf_release(&sc->bad_kind);
    return rc;
}

/* The views a reader queries are this gradtrace's (schema/views.sql),
 * created as TEMP views, which come first in name lookup: the copies the
 * recorder stored in the file are shadowed, so a crafted file cannot swap a
 * view for something else, and old traces get fixed view definitions.
 * (Compiling the views costs about 4 ms, so only the commands that query
 * them ask for them: gt_trace_use_views.) */
static int own_views(gt_trace *t)
{
    sqlite3 *db = t->db;
    sqlite3_stmt *st = NULL;
    int rc = GT_ENOMEM, oom = 0;
    const char *views;
    if (sqlite3_prepare_v2(db,
                           "SELECT replace(?1, 'CREATE VIEW IF NOT EXISTS ', "
                           "'CREATE TEMP VIEW IF NOT EXISTS ')",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_text(st, 1, gt_views_sql, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && (views = gt_column_text(st, 0, &oom)) != NULL &&
        sqlite3_exec(db, views, NULL, NULL, NULL) == SQLITE_OK)
        rc = GT_OK;
    else
        gt__trace_fail(t, rc, "cannot open %s: %s", t->path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

/* Where and why the recording stopped early (schema 2: run.stopped_seq,
 * run.stopped_reason), into t; the message on t on failure. */
static int read_stop(sqlite3 *db, gt_trace *t, const char *path)
{
    sqlite3_stmt *st = NULL;
    int rc = GT_ECORRUPT;
    if (sqlite3_prepare_v2(
            db,
            "SELECT stopped_seq, coalesce(stopped_reason, 'stopped early') "
            "FROM run WHERE stopped_seq IS NOT NULL",
            -1, &st, NULL) != SQLITE_OK) {
        gt__trace_fail(t, rc, "cannot open %s: trace is damaged: %s", path,
                       sqlite3_errmsg(db));
        goto out;
    }
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        t->stopped_seq = sqlite3_column_int64(st, 0);
        if (t->stopped_seq < 1)
            t->stopped_seq = 1;
        int oom = 0;
        const char *why = gt_column_text(st, 1, &oom);
        if (oom || !why || !(t->stopped_reason = strdup(why))) {
            rc = gt__trace_fail(t, GT_ENOMEM, "cannot open %s: out of memory", path);
            goto out;
        }
    } else if (s != SQLITE_DONE) {
        gt__trace_fail(t, rc, "cannot open %s: trace is damaged: %s", path,
                       sqlite3_errmsg(db));
        goto out;
    }
    rc = GT_OK;
out:
    sqlite3_finalize(st);
    return rc;
}

/* Finish a trace its recording left without the close-time indexes (it was
 * killed): create them in the file, as gt_recorder_close would have, and
 * leave WAL mode. Returns SQLITE_OK or the error; the file is unchanged on
 * error (one transaction). */
static int finish_in_place(const char *path)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 2000);
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, gt_indexes_sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        else
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            sqlite3_exec(db,
                         "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE",
                         NULL, NULL, NULL);
    }
    sqlite3_close(db);
    return rc;
}

/* A private copy of the trace open on *db (a temporary database SQLite
 * deletes on close, spilling to disk rather than memory), with the
 * close-time indexes built in it: for a trace that is still being recorded
 * (or cannot be written), whose file must not change. One consistent
 * snapshot: the backup reads the trace in one read transaction. On
 * success *db is the copy (the original connection closed); on failure
 * *db is untouched. */
static int indexed_copy(sqlite3 **db, const char *path, int64_t logged)
{
    sqlite3 *copy = NULL;
    int rc =
        sqlite3_open_v2("", &copy, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_backup *b = sqlite3_backup_init(copy, "main", *db, "main");
        if (!b) {
            rc = sqlite3_errcode(copy);
        } else {
            rc = sqlite3_backup_step(b, -1);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
            int rc2 = sqlite3_backup_finish(b);
            if (rc == SQLITE_OK)
                rc = rc2;
        }
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(copy, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK && logged >= 0) /* a live run's row log, as far as it was */
        rc = gt_rowlog_fold_copy(copy, path, logged);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(copy, gt_indexes_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(copy);
        return rc;
    }
    sqlite3_close(*db);
    *db = copy;
    return SQLITE_OK;
}

/* gt_trace_open's checks, filling the zeroed handle t; on failure the
 * message is on t (and t holds what to free: trace_keep_message). */
static int open_trace(gt_trace *t, const char *path)
{
    int rc = GT_OK;
    sqlite3 *db = NULL;
    struct stat st;
    char head[16];
    FILE *f;

    if (stat(path, &st) != 0) {
        return gt__trace_fail(t, GT_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        return gt__trace_fail(t, GT_EINVAL, "cannot open %s: is a directory", path);
    }
    if (st.st_size == 0) {
        return gt__trace_fail(t, GT_ENOTTRACE,
                              "cannot open %s: empty file, not a gradtrace trace", path);
    }
    f = fopen(path, "rb");
    if (!f) {
        return gt__trace_fail(t, GT_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got < sizeof head || memcmp(head, "SQLite format 3", 16) != 0) {
        return gt__trace_fail(
            t, GT_ENOTTRACE, "cannot open %s: not a gradtrace trace (not an SQLite file)",
            path);
    }

    /* a live trace's log is the recorder's to fold in; a killed one's is
     * folded in here */
    int live = gt_trace_is_live(path);
    int64_t logged = -1; /* bytes of a row log to read into a copy (rowlog.h) */
    size_t errlen = 2 * strlen(path) + 1024; /* names the trace and its log */
    char *err = malloc(errlen);
    if (!err)
        return gt__trace_fail(t, GT_ENOMEM, "cannot open %s: out of memory", path);
    err[0] = 0;
    rc = gt_rowlog_on_open(path, live, &logged, err, errlen);
    if (rc != GT_OK)
        gt__trace_fail(t, rc, "%s", err);
    free(err);
    if (rc != GT_OK)
        return rc;
    if (!live)
        checkpoint_wal(path);
    if (sqlite3_open_v2(path, &db, TRACE_OPEN_FLAGS, NULL) != SQLITE_OK) {
        rc = gt__trace_fail(t, GT_EIO, "cannot open %s: %s", path,
                            db ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }

    /* A name of a table of this gradtrace's schema must not be anything
     * but a table in the file: a crafted file could hold a view under a
     * table's name that makes any query run without end. (A missing table
     * is left to the readers, which report "no such table" and read what
     * they can.) */
    int version = 0;
    schema_scan sc;
    if (int_query(db, "PRAGMA user_version", &version) != SQLITE_OK) {
        rc = gt__trace_fail(
            t, (sqlite3_errcode(db) & 0xff) == SQLITE_NOMEM ? GT_ENOMEM : GT_ECORRUPT,
            "cannot open %s: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    if ((rc = scan_schema(t, db, path, &sc)) != GT_OK)
        goto out;
    if (version == 0 || !sc.has_run) {
        rc = gt__trace_fail(t, GT_ENOTTRACE, "cannot open %s: not a gradtrace trace",
                            path);
    } else if (version > GT_SCHEMA_VERSION) {
        rc = gt__trace_fail(t, GT_ENEWER,
                            "cannot open %s: trace schema version %d is newer than this "
                            "gradtrace (reads up to %d); upgrade gradtrace",
                            path, version, GT_SCHEMA_VERSION);
    } else if (sc.bad < N_SCHEMA_TABLES) {
        rc = gt__trace_fail(
            t, GT_ENOTTRACE,
            "cannot open %s: not a gradtrace trace (%s is a %s, not a table)", path,
            schema_tables[sc.bad], sc.bad_kind.p);
    }
    gt_strbuf_release(&sc.bad_kind);
    if (rc != GT_OK)
        goto out;
    int missing = sc.missing, running = 0, pages = 0, page_size = 0;
    t->tables = sc.tables;
    if (logged >= 0 ||
        (missing > 0 && int_query(db, "PRAGMA page_count", &pages) == SQLITE_OK &&
         int_query(db, "PRAGMA page_size", &page_size) == SQLITE_OK &&
         (int64_t)pages * page_size >= GT__INDEX_MIN_BYTES)) {
        /* Without the close-time indexes the readers' lookups are scans:
         * a killed recording's trace is finished in place (once, and said
         * so); a live one, or one that cannot be written, is read from an
         * indexed private copy (its file does not change). */
        int_query(db, RUNNING_SQL, &running);
        int finished = 0;
        if (!live && running && logged < 0 && access(path, W_OK) == 0) {
            /* alone on the file, so that it can leave WAL mode */
            sqlite3_close(db);
            db = NULL;
            finished = finish_in_place(path) == SQLITE_OK;
            if (sqlite3_open_v2(path, &db, TRACE_OPEN_FLAGS, NULL) != SQLITE_OK) {
                rc = gt__trace_fail(t, GT_EIO, "cannot open %s: %s", path,
                                    db ? sqlite3_errmsg(db) : "out of memory");
                goto out;
            }
        }
        gt_strbuf note = GT_STRBUF_INIT;
        if (finished &&
            (gt_strbuf_addf(&note,
                            "%s was left unfinished by its recording (killed?): "
                            "created its %d missing indexes, as closing it would have",
                            path, missing) != 0 ||
             !(t->note = gt_strbuf_detach(&note)))) {
            gt_strbuf_release(&note);
            rc = gt__trace_fail(t, GT_ENOMEM, "cannot open %s: out of memory", path);
            goto out;
        }
        if (!finished)
            indexed_copy(&db, path, logged);
    }
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    int partial = 0;
    if (int_query(db, RUNNING_SQL, &partial) != SQLITE_OK) {
        rc = gt__trace_fail(t, GT_ECORRUPT, "cannot open %s: trace is damaged: %s", path,
                            sqlite3_errmsg(db));
        goto out;
    }
    if (!(t->path = strdup(path))) {
        rc = gt__trace_fail(t, GT_ENOMEM, "cannot open %s: out of memory", path);
        goto out;
    }
    if (version >= 2 && (rc = read_stop(db, t, path)) != GT_OK)
        goto out;
    t->db = db;
    t->schema_version = version;
    t->partial = partial > 0 || t->stopped_seq > 0;
    db = NULL;
out:
    sqlite3_close(db);
    return rc;
}

int gt_trace_open(const char *path, gt_trace **out)
{
    gt_trace *t = calloc(1, sizeof *t);
    if (!t) {
        *out = NULL;
        return GT_ENOMEM;
    }
    int rc = open_trace(t, path);
    if (rc != GT_OK) {
        /* SQLite's way (sqlite3_open): a handle that holds only the message */
        free(t->path);
        free(t->stopped_reason);
        free(t->note);
        t->path = t->stopped_reason = t->note = NULL;
        t->stopped_seq = 0;
    }
    *out = t;
    return rc;
}

void gt_trace_close(gt_trace *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nstmts; i++)
        sqlite3_finalize(t->stmts[i].st);
    free(t->stmts);
    for (size_t i = 0; i < t->ntnames; i++) {
        for (size_t k = 0; k < t->tnames[i].n; k++)
            free(t->tnames[i].v[k]);
        free(t->tnames[i].v);
        free(t->tnames[i].rank);
        free(t->tnames[i].json);
    }
    free(t->tnames);
    gt_map_clear(&t->names);
    for (size_t i = 0; i < t->nsources; i++) {
        for (size_t k = 0; k < t->sources[i].n; k++)
            free(t->sources[i].lines[k]);
        free(t->sources[i].lines);
        free(t->sources[i].path);
    }
    free(t->sources);
    free(t->changed);
    sqlite3_close(t->db);
    free(t->stopped_reason);
    free(t->path);
    free(t->note);
    gt_strbuf_release(&t->err);
    free(t);
}

sqlite3 *gt_trace_db(gt_trace *t)
{
    return t->db;
}
const char *gt_trace_path(gt_trace *t)
{
    return t->path;
}
const char *gt_trace_note(gt_trace *t)
{
    return t->note;
}
int gt_trace_schema_version(gt_trace *t)
{
    return t->schema_version;
}
int gt_trace_partial(gt_trace *t)
{
    return t->partial;
}
int64_t gt_trace_stopped_seq(gt_trace *t)
{
    return t->stopped_seq;
}
const char *gt_trace_stopped_reason(gt_trace *t)
{
    return t->stopped_reason;
}

/* Rows that point at rows the trace does not have: each check counts the
 * rows of `table` that do. */
static const struct {
    const char *table, *what, *sql;
} link_checks[] = {
    {"saved_tensors", "saved tensors pointing at no tensor",
     "SELECT count(*) FROM saved_tensors s WHERE s.tensor IS NOT NULL AND NOT EXISTS "
     "(SELECT 1 FROM tensors t WHERE t.id = s.tensor)"},
    {"saved_tensors", "saved tensors pointing at no node",
     "SELECT count(*) FROM saved_tensors s WHERE NOT EXISTS "
     "(SELECT 1 FROM nodes n WHERE n.id = s.node)"},
    {"edges", "edges pointing at no node",
     "SELECT count(*) FROM edges e WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = "
     "e.node) OR (e.next IS NOT NULL AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = "
     "e.next))"},
    {"version_bumps", "version bumps pointing at no tensor",
     "SELECT count(*) FROM version_bumps b WHERE NOT EXISTS "
     "(SELECT 1 FROM tensors t WHERE t.id = b.tensor)"},
    {"tensors", "tensors pointing at no version counter",
     "SELECT count(*) FROM tensors t WHERE NOT EXISTS "
     "(SELECT 1 FROM tensors v WHERE v.id = t.version_counter)"},
    {"backward_roots", "backward roots pointing at no node",
     "SELECT count(*) FROM backward_roots r WHERE r.node IS NOT NULL AND NOT EXISTS "
     "(SELECT 1 FROM nodes n WHERE n.id = r.node)"},
    {"node_execs", "node executions pointing at no node",
     "SELECT count(*) FROM node_execs x WHERE NOT EXISTS "
     "(SELECT 1 FROM nodes n WHERE n.id = x.node)"},
    {"stacks", "stacks pointing at no frame or parent",
     "SELECT count(*) FROM stacks s WHERE NOT EXISTS (SELECT 1 FROM frames f WHERE f.id "
     "= "
     "s.frame) OR (s.parent IS NOT NULL AND NOT EXISTS (SELECT 1 FROM stacks p WHERE "
     "p.id = "
     "s.parent))"},
};

#define N_LINK_CHECKS (sizeof link_checks / sizeof *link_checks)

/* Every check's count in one statement (one prepare instead of one per
 * check): 1 and counts[] filled, 0 if it cannot run (a table is missing:
 * the checks then run one by one to say which), GT_ENOMEM. */
static int link_counts(gt_trace *t, int64_t *counts)
{
    gt_strbuf b = GT_STRBUF_INIT;
    sqlite3_stmt *st = NULL;
    int rc = 0;
    gt_strbuf_adds(&b, "SELECT ");
    for (size_t i = 0; i < N_LINK_CHECKS; i++)
        gt_strbuf_addf(&b, "%s(%s)", i ? ", " : "", link_checks[i].sql);
    if (b.oom) {
        gt_strbuf_release(&b);
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    }
    int s = sqlite3_prepare_v2(t->db, b.p, -1, &st, NULL);
    if (s == SQLITE_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
        for (size_t i = 0; i < N_LINK_CHECKS; i++)
            counts[i] = sqlite3_column_int64(st, (int)i);
        rc = 1;
    } else if ((s & 0xff) == SQLITE_NOMEM) {
        rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
    }
    sqlite3_finalize(st);
    gt_strbuf_release(&b);
    return rc;
}

int gt_trace_check_links(gt_trace *t, gt_strbuf *what)
{
    int problems = 0;
    int64_t counts[N_LINK_CHECKS];
    gt_strbuf one = GT_STRBUF_INIT;
    if (what->oom)
        gt_strbuf_release(what); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(what);
    int all = link_counts(t, counts);
    if (all < 0)
        return all;
    for (size_t i = 0; all && i < N_LINK_CHECKS; i++) {
        if (counts[i] == 0)
            continue;
        problems++;
        gt_strbuf_addf(what, "%s%s: %" PRId64, what->len ? "; " : "", link_checks[i].what,
                       counts[i]);
    }
    for (size_t i = 0; !all && i < N_LINK_CHECKS; i++) {
        sqlite3_stmt *st = NULL;
        int64_t count = 1;
        gt_strbuf_reset(&one);
        int s = sqlite3_prepare_v2(t->db, link_checks[i].sql, -1, &st, NULL);
        if (s == SQLITE_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
            count = sqlite3_column_int64(st, 0);
            gt_strbuf_addf(&one, "%s: %" PRId64, link_checks[i].what, count);
        } else if ((s & 0xff) == SQLITE_NOMEM) {
            /* not a damaged trace: a check that could not run */
            sqlite3_finalize(st);
            problems = -1;
            break;
        } else {
            gt_strbuf_addf(&one, "cannot read %s: %s", link_checks[i].table,
                           sqlite3_errmsg(t->db));
        }
        sqlite3_finalize(st);
        /* one missing table, said once */
        if (count == 0 || (what->len && strstr(what->p, gt_strbuf_str(&one))))
            continue;
        problems++;
        gt_strbuf_addf(what, "%s%s", what->len ? "; " : "", gt_strbuf_str(&one));
    }
    if (problems < 0 || one.oom || what->oom) {
        gt_strbuf_release(&one);
        gt_strbuf_release(what);
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    }
    gt_strbuf_release(&one);
    return problems;
}

int gt_trace_use_views(gt_trace *t)
{
    gt__trace_clear(t);
    if (t->views)
        return GT_OK;
    /* TEMP objects are writes as far as query_only is concerned; the file
     * itself stays read-only (SQLITE_OPEN_READONLY) meanwhile */
    sqlite3_exec(t->db, "PRAGMA query_only = 0", NULL, NULL, NULL);
    int rc = own_views(t);
    sqlite3_exec(t->db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    if (rc == GT_OK)
        t->views = 1;
    return rc;
}

/* ---- the reading layer -------------------------------------------------- */

const char *gt_trace_errmsg(const gt_trace *t)
{
    return !t || t->err.oom ? "out of memory" : gt_strbuf_str(&t->err);
}

int gt_trace_errcode(const gt_trace *t)
{
    return t ? t->errcode : GT_ENOMEM;
}

int gt__trace_fail(gt_trace *t, int code, const char *fmt, ...)
{
    va_list ap;
    gt__trace_clear(t);
    va_start(ap, fmt); /* a message too long for memory reads "out of memory" */
    gt_strbuf_vaddf(&t->err, fmt, ap);
    va_end(ap);
    t->errcode = code;
    return code;
}

void gt__trace_clear(gt_trace *t)
{
    if (t->err.oom)
        gt_strbuf_release(&t->err); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(&t->err);
    t->errcode = 0;
}

int gt__trace_has_table(gt_trace *t, const char *name)
{
    for (size_t i = 0; i < N_SCHEMA_TABLES; i++)
        if (!strcmp(name, schema_tables[i]))
            return (t->tables >> i) & 1;
    sqlite3_stmt *q = NULL;
    int found = 0;
    if (sqlite3_prepare_v2(
            t->db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1", -1,
            &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
        found = sqlite3_step(q) == SQLITE_ROW;
    }
    sqlite3_finalize(q);
    return found;
}

/* A failed step or prepare: out of memory, or a trace SQLite cannot read. */
static int sql_fail(gt_trace *t, int s)
{
    if ((s & 0xff) == SQLITE_NOMEM)
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    return gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s", sqlite3_errmsg(t->db));
}

sqlite3_stmt *gt_trace_stmt(gt_trace *t, const char *sql)
{
    for (size_t i = 0; i < t->nstmts; i++)
        if (t->stmts[i].sql == sql) {
            sqlite3_reset(t->stmts[i].st);
            sqlite3_clear_bindings(t->stmts[i].st);
            return t->stmts[i].st;
        }
    sqlite3_stmt *st = NULL;
    int s = sqlite3_prepare_v3(t->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (s != SQLITE_OK) {
        sqlite3_finalize(st);
        sql_fail(t, s);
        return NULL;
    }
    if (t->nstmts == t->capstmts) {
        size_t cap = t->capstmts ? t->capstmts * 2 : 16;
        void *v = realloc(t->stmts, cap * sizeof *t->stmts);
        if (!v) {
            sqlite3_finalize(st);
            gt__trace_fail(t, GT_ENOMEM, "out of memory");
            return NULL;
        }
        t->stmts = v;
        t->capstmts = cap;
    }
    t->stmts[t->nstmts].sql = sql;
    t->stmts[t->nstmts++].st = st;
    return st;
}

int gt_trace_prepare(gt_trace *t, const char *sql, sqlite3_stmt **out)
{
    sqlite3_stmt *st = NULL;
    int s = sqlite3_prepare_v2(t->db, sql, -1, &st, NULL);
    *out = NULL;
    if (s != SQLITE_OK) {
        sqlite3_finalize(st);
        return sql_fail(t, s);
    }
    *out = st;
    return GT_OK;
}

int gt_db_prepare_first(sqlite3 *db, const char *sql, sqlite3_stmt **out,
                        const char **tail)
{
    *out = NULL;
    int s = sqlite3_prepare_v2(db, sql, -1, out, tail);
    if (s != SQLITE_OK) {
        sqlite3_finalize(*out);
        *out = NULL;
    }
    return s;
}

int gt_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out)
{
    return gt_db_prepare_first(db, sql, out, NULL);
}

/* Step cached `sql` once with ?1 = a and ?2 = b: 1 on a row whose first
 * column is not NULL (st left on it), 0 on none (st reset), or a negative
 * GT_E* code (st reset). */
static int first_row(gt_trace *t, const char *sql, int64_t a, int64_t b,
                     sqlite3_stmt **stp)
{
    sqlite3_stmt *st = gt_trace_stmt(t, sql);
    if (!(*stp = st))
        return t->errcode;
    /* SQLITE_RANGE when sql has fewer parameters: nothing to bind */
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        return 1;
    sqlite3_reset(st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : sql_fail(t, s);
}

int gt_trace_int(gt_trace *t, const char *sql, int64_t a, int64_t b, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = first_row(t, sql, a, b, &st);
    *out = rc == 1 ? sqlite3_column_int64(st, 0) : 0;
    if (rc == 1)
        sqlite3_reset(st);
    return rc;
}

int gt_trace_text(gt_trace *t, const char *sql, int64_t a, int64_t b, gt_strbuf *out)
{
    sqlite3_stmt *st;
    gt_strbuf_reset(out);
    int rc = first_row(t, sql, a, b, &st);
    if (rc != 1)
        return rc;
    int oom = 0;
    const char *v = gt_column_text(st, 0, &oom);
    if (v)
        gt_strbuf_adds(out, v);
    sqlite3_reset(st);
    if (oom || out->oom) {
        gt_strbuf_reset(out);
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    }
    return 1;
}

const char *gt_column_text(sqlite3_stmt *st, int i, int *oom)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    /* sqlite3_step set the error code to SQLITE_ROW; only a failed
     * allocation of this row's conversions makes it SQLITE_NOMEM */
    if (!v && (sqlite3_errcode(sqlite3_db_handle(st)) & 0xff) == SQLITE_NOMEM)
        *oom = 1;
    return v;
}

char *gt_column_dup(sqlite3_stmt *st, int i, int *oom)
{
    const char *v = gt_column_text(st, i, oom);
    if (!v)
        return NULL;
    char *p = strdup(v);
    if (!p)
        *oom = 1;
    return p;
}

/* The location of stack ?1 at the frame `frame` names (an SQL expression
 * over stacks s): one query, two choices of frame. */
#define LOC_SQL(frame)                                                                   \
    "SELECT f.id, f.line, sf.text, sfn.text, sc.text, json_object('file', sf.text, "     \
    "'line', f.line, 'function', sfn.text, 'code', sc.text) "                            \
    "FROM stacks s JOIN frames f ON f.id = " frame " "                                   \
    "LEFT JOIN strings sf ON sf.id = f.file LEFT JOIN strings sfn ON sfn.id = "          \
    "f.function LEFT JOIN strings sc ON sc.id = f.code WHERE s.id = ?1"

static const char sql_loc[] = LOC_SQL(GT_USER_FRAME("s"));
static const char sql_user_loc[] = LOC_SQL("s.user_frame");

void gt_loc_release(gt_loc *l)
{
    free(l->file);
    free(l->function);
    free(l->code);
    free(l->json);
    memset(l, 0, sizeof *l);
}

/* 1 if `line`, a line read from a source file, is the recorded line
 * `code` (indentation, trailing blanks and line ending aside). */
static int source_line_is(const char *line, const char *code)
{
    const char *a = line + strspn(line, " \t"), *b = code + strspn(code, " \t");
    size_t na = strlen(a), nb = strlen(b);
    while (na && strchr(" \t\r\n", a[na - 1]))
        na--;
    while (nb && strchr(" \t\r\n", b[nb - 1]))
        nb--;
    return na == nb && strncmp(a, b, na) == 0;
}

/* Read `path` into e->lines ('\n' cut: lines[i] is line i + 1): 1, 0 if it
 * cannot be opened, GT_ENOMEM. */
static int source_read(const char *path, struct tsource *e)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    char *line = NULL;
    size_t cap = 0, have = 0;
    ssize_t len;
    int rc = 1;
    while ((len = getline(&line, &cap, fp)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (e->n == have) {
            size_t more = have ? 2 * have : 64;
            char **grown = realloc(e->lines, more * sizeof *grown);
            if (!grown) {
                rc = GT_ENOMEM;
                break;
            }
            e->lines = grown;
            have = more;
        }
        if (!(e->lines[e->n] = strdup(line))) {
            rc = GT_ENOMEM;
            break;
        }
        e->n++;
    }
    free(line);
    fclose(fp);
    return rc;
}

/* Does e (read) still hold every line the trace recorded of its file? 1,
 * 0, or a negative GT_E* code. */
static int source_current(gt_trace *t, struct tsource *e)
{
    sqlite3_stmt *st = gt_trace_stmt(
        t, "SELECT f.line, sc.text FROM strings sf JOIN frames f ON f.file = sf.id"
           " JOIN strings sc ON sc.id = f.code WHERE sf.text = ?1 AND f.line > 0");
    if (!st)
        return t->errcode;
    sqlite3_bind_text(st, 1, e->path, -1, SQLITE_STATIC);
    int s, same = 1;
    while (same && (s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t no = sqlite3_column_int64(st, 0);
        const char *code = (const char *)sqlite3_column_text(st, 1);
        if (!code && sqlite3_errcode(t->db) == SQLITE_NOMEM) {
            sqlite3_reset(st);
            return gt__trace_fail(t, GT_ENOMEM, "out of memory");
        }
        same = code && (uint64_t)no <= e->n && source_line_is(e->lines[no - 1], code);
    }
    if (same && s != SQLITE_DONE) {
        sqlite3_reset(st);
        return sql_fail(t, s);
    }
    sqlite3_reset(st);
    return same;
}

/* Drop the lines e holds. */
static void source_drop(struct tsource *e)
{
    for (size_t k = 0; k < e->n; k++)
        free(e->lines[k]);
    free(e->lines);
    e->lines = NULL;
    e->n = 0;
}

int gt_trace_source(gt_trace *t, const char *file, const char *const **lines, size_t *n)
{
    *lines = NULL;
    *n = 0;
    if (!file)
        return 0;
    struct tsource *e = NULL;
    for (size_t i = 0; i < t->nsources && !e; i++)
        if (!strcmp(t->sources[i].path, file))
            e = &t->sources[i];
    if (!e) {
        if (t->nsources == t->capsources) {
            size_t cap = t->capsources ? 2 * t->capsources : 8;
            struct tsource *v = realloc(t->sources, cap * sizeof *v);
            const char **c = v ? realloc(t->changed, cap * sizeof *c) : NULL;
            if (v)
                t->sources = v;
            if (!c)
                return gt__trace_fail(t, GT_ENOMEM, "out of memory");
            t->changed = c;
            t->capsources = cap;
        }
        e = &t->sources[t->nsources];
        memset(e, 0, sizeof *e);
        if (!(e->path = strdup(file)))
            return gt__trace_fail(t, GT_ENOMEM, "out of memory");
        t->nsources++;
        int rc = source_read(file, e);
        if (rc == 1 && (rc = source_current(t, e)) == 0) {
            e->changed = 1;
            t->changed[t->nchanged++] = e->path;
        }
        if (rc != 1)
            source_drop(e);
        if (rc < 0) { /* asked again, it is read again */
            free(e->path);
            t->nsources--;
            return rc == GT_ENOMEM ? gt__trace_fail(t, GT_ENOMEM, "out of memory") : rc;
        }
    }
    *lines = (const char *const *)e->lines;
    *n = e->n;
    return e->lines != NULL;
}

size_t gt_trace_sources_changed(gt_trace *t, const char *const **files)
{
    *files = t->changed;
    return t->nchanged;
}

/* 1 for a line of nothing but blanks or a comment */
static int blank_line(const char *l)
{
    l += strspn(l, " \t");
    return !*l || *l == '#';
}

int64_t gt_loc_find_in_function(gt_trace *t, const gt_loc *l, const char *call,
                                char **code)
{
    *code = NULL;
    if (!l->file || l->line <= 0 || !call || !*call)
        return 0;
    const char *const *lines;
    size_t nl;
    int rc = gt_trace_source(t, l->file, &lines, &nl);
    if (rc != 1)
        return rc == GT_ENOMEM ? GT_ENOMEM : 0;
    int64_t found = 0;
    size_t at = (size_t)l->line - 1, def = 0, ind = 0;
    int has_def = 0;
    if (at < nl) {
        /* up to the `def` indented less than every line between */
        size_t cur = strspn(lines[at], " \t");
        for (size_t i = at; i-- > 0;) {
            const char *s = lines[i];
            size_t in = strspn(s, " \t");
            if (blank_line(s) || in >= cur)
                continue;
            cur = in;
            if (!strncmp(s + in, "def ", 4) || !strncmp(s + in, "async def ", 10)) {
                has_def = 1;
                def = i;
                ind = in;
                break;
            }
        }
    }
    char *hit = NULL; /* the line found, comment cut */
    for (size_t i = def + 1; has_def && i < nl; i++) {
        const char *s = lines[i];
        if (blank_line(s))
            continue;
        if (strspn(s, " \t") <= ind)
            break; /* the body ended */
        char *one = strdup(s + strspn(s, " \t"));
        if (!one) {
            free(hit);
            return GT_ENOMEM;
        }
        gt__py_strip_comment(one);
        if (!gt__py_call(one, call)) {
            free(one);
            continue;
        }
        free(hit);
        hit = one;
        if (found) {
            found = 0; /* two: which one is not known */
            break;
        }
        found = (int64_t)i + 1;
    }
    if (found)
        *code = hit;
    else
        free(hit);
    return found;
}

static int read_loc(gt_trace *t, const char *sql, int64_t stack, gt_loc *out)
{
    memset(out, 0, sizeof *out);
    if (!stack)
        return 0;
    sqlite3_stmt *st = gt_trace_stmt(t, sql);
    if (!st)
        return t->errcode;
    sqlite3_bind_int64(st, 1, stack);
    int s = sqlite3_step(st), rc = 0, oom = 0;
    if (s == SQLITE_ROW) {
        out->frame = sqlite3_column_int64(st, 0);
        out->line = sqlite3_column_int64(st, 1);
        out->file = gt_column_dup(st, 2, &oom);
        out->function = gt_column_dup(st, 3, &oom);
        out->code = gt_column_dup(st, 4, &oom);
        out->json = gt_column_dup(st, 5, &oom);
        rc = 1;
        if (oom || !out->json) {
            gt_loc_release(out);
            rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
        }
    } else if (s != SQLITE_DONE) {
        rc = sql_fail(t, s);
    }
    sqlite3_reset(st);
    return rc;
}

int gt_trace_loc(gt_trace *t, int64_t stack, gt_loc *out)
{
    return read_loc(t, sql_loc, stack, out);
}

int gt_trace_user_loc(gt_trace *t, int64_t stack, gt_loc *out)
{
    return read_loc(t, sql_user_loc, stack, out);
}

int gt_trace_stack_parent(gt_trace *t, int64_t stack, int64_t *out)
{
    sqlite3_stmt *st = gt_trace_stmt(t, "SELECT parent FROM stacks WHERE id = ?1");
    if (!st)
        return t->errcode;
    sqlite3_bind_int64(st, 1, stack);
    int s = sqlite3_step(st), rc = 0;
    *out = 0;
    if (s == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = 1;
    } else if (s != SQLITE_DONE) {
        rc = sql_fail(t, s);
    }
    sqlite3_reset(st);
    return rc;
}

/* Empty x's numbers and texts, keeping its buffer. */
static void tensor_clear(gt_tensor_row *x)
{
    gt_strbuf buf = x->buf;
    *x = (gt_tensor_row)GT_TENSOR_ROW_INIT;
    x->buf = buf;
    gt_strbuf_reset(&x->buf);
}

int gt_trace_tensor(gt_trace *t, int64_t id, gt_tensor_row *out)
{
    tensor_clear(out);
    sqlite3_stmt *st =
        gt_trace_stmt(t, "SELECT t.storage, t.storage_offset, t.version_counter,"
                         " coalesce(t.alias_of, 0), coalesce(t.created_by, 0),"
                         " t.requires_grad, t.is_leaf, coalesce(s.text, ''), t.shape,"
                         " t.strides FROM tensors t LEFT JOIN strings s ON s.id = t.dtype"
                         " WHERE t.id = ?1");
    if (!st)
        return t->errcode;
    sqlite3_bind_int64(st, 1, id);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW) {
        sqlite3_reset(st);
        return s == SQLITE_DONE ? 0 : sql_fail(t, s);
    }
    out->storage = sqlite3_column_int64(st, 0);
    out->storage_offset = sqlite3_column_int64(st, 1);
    out->version_counter = sqlite3_column_int64(st, 2);
    out->alias_of = sqlite3_column_int64(st, 3);
    out->created_by = sqlite3_column_int64(st, 4);
    out->requires_grad = sqlite3_column_int(st, 5);
    out->is_leaf = sqlite3_column_int(st, 6);
    /* the texts one after another in buf, each ended by its NUL: their
     * places are known once buf stops moving */
    size_t at[3];
    int has[3], oom = 0;
    for (int i = 0; i < 3; i++) {
        const char *v = gt_column_text(st, 7 + i, &oom);
        at[i] = out->buf.len;
        has[i] = v != NULL;
        gt_strbuf_add(&out->buf, v ? v : "", (v ? strlen(v) : 0) + 1);
    }
    sqlite3_reset(st);
    if (oom || out->buf.oom) {
        tensor_clear(out);
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    }
    const char **text[3] = {&out->dtype, &out->shape, &out->strides};
    for (int i = 0; i < 3; i++)
        *text[i] = has[i] || !i ? out->buf.p + at[i] : NULL;
    return 1;
}

void gt_tensor_row_release(gt_tensor_row *x)
{
    gt_strbuf_release(&x->buf);
    *x = (gt_tensor_row)GT_TENSOR_ROW_INIT;
}

/* The names of tensor ?1, in order (see gt_trace_names). A tensor sharing
 * its version counter that is a view of it or of one of its bases (its own
 * views, its siblings) lends no name: a view's name is not the base's; nor
 * is a name bound at the same event to the view and to a base of it (the
 * base's: `v = x[:2]` seen with x's name on v too). */
#define NAMES_SQL                                                                        \
    "WITH RECURSIVE base(id, depth) AS ("                                                \
    " SELECT ?1, 0 UNION ALL SELECT t.alias_of, base.depth + 1 FROM tensors t"           \
    " JOIN base ON t.id = base.id WHERE t.alias_of IS NOT NULL AND base.depth < 16"      \
    "), fam(id, rank) AS ("                                                              \
    " SELECT id, min(depth) FROM (SELECT id, depth FROM base UNION ALL"                  \
    " SELECT t.id, 1000 FROM tensors t WHERE t.version_counter ="                        \
    " (SELECT version_counter FROM tensors WHERE id = ?1) AND NOT EXISTS ("              \
    "  WITH RECURSIVE up(id, depth) AS (SELECT t.alias_of, 1 UNION ALL"                  \
    "  SELECT u.alias_of, up.depth + 1 FROM tensors u JOIN up ON u.id = up.id"           \
    "  WHERE u.alias_of IS NOT NULL AND up.depth < 16)"                                  \
    "  SELECT 1 FROM up JOIN base ON base.id = up.id)) GROUP BY id) "                    \
    "SELECT s.text, json_quote(s.text), min(fam.rank) FROM names n"                      \
    " JOIN fam ON fam.id = n.tensor"                                                     \
    " JOIN strings s ON s.id = n.name WHERE NOT EXISTS (SELECT 1 FROM names n2"          \
    "  JOIN base b2 ON b2.id = n2.tensor WHERE n2.seq = n.seq AND n2.name = n.name"      \
    "  AND b2.depth > fam.rank AND fam.rank < 1000) GROUP BY s.text"                     \
    " ORDER BY min(fam.rank), min(n.seq)"

/* each name, its JSON value (the elements of gt_trace_names_json) and its
 * rank */
static const char sql_names[] = NAMES_SQL;

/* The cache entry of tensor `tensor`, added empty (n = 0, json NULL,
 * v NULL) with *fresh = 1 if there was none; NULL when out of memory. */
static struct tnames *names_entry(gt_trace *t, int64_t tensor, int *fresh)
{
    uint64_t *at = gt_map_get(&t->names, (uint64_t)tensor, 0, 0);
    *fresh = 0;
    if (at)
        return &t->tnames[*at - 1];
    if (t->ntnames == t->captnames) {
        size_t cap = t->captnames ? t->captnames * 2 : 16;
        struct tnames *v = realloc(t->tnames, cap * sizeof *v);
        if (!v)
            return NULL;
        t->tnames = v;
        t->captnames = cap;
    }
    if (gt_map_put(&t->names, (uint64_t)tensor, 0, 0, t->ntnames + 1) != 0)
        return NULL;
    struct tnames *e = &t->tnames[t->ntnames++];
    memset(e, 0, sizeof *e);
    *fresh = 1;
    return e;
}

/* Read the names of `tensor` into e (empty on entry). */
static int read_names(gt_trace *t, int64_t tensor, struct tnames *e)
{
    sqlite3_stmt *st = gt_trace_stmt(t, sql_names);
    size_t cap = 0;
    int s = SQLITE_DONE, oom = 0, rc = 0;
    if (!st)
        return t->errcode;
    gt_strbuf json = GT_STRBUF_INIT;
    sqlite3_bind_int64(st, 1, tensor);
    gt_strbuf_adds(&json, "[");
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (e->n == cap) {
            cap = cap ? cap * 2 : 4;
            char **nv = realloc(e->v, cap * sizeof *nv);
            if (nv)
                e->v = nv;
            int *nr = nv ? realloc(e->rank, cap * sizeof *nr) : NULL;
            if (!nr) {
                oom = 1;
                break;
            }
            e->rank = nr;
        }
        /* json_group_array's shape: elements joined by "," */
        const char *q = gt_column_text(st, 1, &oom);
        if (!q) {
            oom = 1;
            break;
        }
        gt_strbuf_adds(&json, json.len > 1 ? "," : "");
        gt_strbuf_adds(&json, q);
        char *one = gt_column_dup(st, 0, &oom);
        if (oom)
            break;
        if (one) {
            e->rank[e->n] = sqlite3_column_int(st, 2);
            e->v[e->n++] = one;
        }
    }
    gt_strbuf_adds(&json, "]");
    sqlite3_reset(st);
    if (!oom && s == SQLITE_DONE && !(e->json = gt_strbuf_detach(&json)))
        oom = 1;
    gt_strbuf_release(&json);
    if (oom)
        rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
    else if (s != SQLITE_DONE && s != SQLITE_ROW)
        rc = sql_fail(t, s);
    return rc;
}

/* Drop the entry just added for a tensor whose names could not be read. */
static void names_forget(gt_trace *t, int64_t tensor, struct tnames *e)
{
    for (size_t k = 0; k < e->n; k++)
        free(e->v[k]);
    free(e->v);
    free(e->rank);
    free(e->json);
    gt_map_del(&t->names, (uint64_t)tensor, 0, 0);
    t->ntnames--; /* it is the last one */
}

int gt_trace_names(gt_trace *t, int64_t tensor, const char *const **out, size_t *n)
{
    int fresh, rc;
    struct tnames *e = names_entry(t, tensor, &fresh);
    if (!e)
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    if (fresh && (rc = read_names(t, tensor, e)) != 0) {
        names_forget(t, tensor, e);
        return rc;
    }
    *out = (const char *const *)e->v;
    *n = e->n;
    return e->n > 0;
}

int gt_trace_names_nearest(gt_trace *t, int64_t tensor, int max_depth,
                           const char *const **out, size_t *n)
{
    const char *const *v;
    size_t all, k = 0;
    int rc = gt_trace_names(t, tensor, &v, &all);
    if (rc < 0)
        return rc;
    int fresh;
    const struct tnames *e = names_entry(t, tensor, &fresh); /* cached: found */
    /* ordered by rank: the nearest tensor's names come first */
    if (all && e->rank[0] <= max_depth)
        while (k < all && e->rank[k] == e->rank[0])
            k++;
    *out = v;
    *n = k;
    return k > 0;
}

int gt_trace_names_json(gt_trace *t, int64_t tensor, char **out)
{
    const char *const *v;
    size_t n;
    int rc = gt_trace_names(t, tensor, &v, &n);
    if (rc < 0)
        return rc;
    int fresh;
    struct tnames *e = names_entry(t, tensor, &fresh);
    if (!(*out = strdup(e->json)))
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    return 0;
}
