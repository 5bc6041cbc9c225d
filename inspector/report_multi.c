/* The report of several traces (report.h's gt_multi_report): the ranks
 * of a distributed run, each diagnosed on its own, then every distinct
 * finding once with the ranks it was found on ("ranks 0-3"), as text or
 * JSON; and the one-row-per-trace summary `gradtrace info A B...` prints
 * (multi.h's gt_multi_info_db). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include <gradtrace/multi.h>
#include <gradtrace/report.h>
#include "strbuf.h"
#include <gradtrace/termtext.h>
#include <gradtrace/trace.h>

/* ---- info ------------------------------------------------------------- */

/* Set s's message (printf, the whole line after "gradtrace: "). */
static void multi_fail(gt_rank_set *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void multi_fail(gt_rank_set *s, const char *fmt, ...)
{
    va_list ap;
    if (s->err.oom)
        gt_strbuf_release(&s->err); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(&s->err);
    va_start(ap, fmt);
    gt_strbuf_vaddf(&s->err, fmt, ap);
    va_end(ap);
}

/* One row per trace, read from the trace itself. */
static const char info_row_sql[] =
    "SELECT r.rank, r.local_rank, r.world_size, r.backend, r.host, r.pid,"
    " CASE WHEN r.status = '" GT_RUN_STATUS_RUNNING "' THEN 'running (killed?)'"
    "      WHEN r.status = '" GT_RUN_STATUS_SIGNAL
    "' THEN 'signal ' || coalesce(r.signal, '?')"
    "      WHEN r.status IN ('" GT_RUN_STATUS_OK "', '" GT_RUN_STATUS_EXCEPTION "')"
    "      AND coalesce(r.exit_code, 0) != 0"
    "      THEN r.status || ' (exit ' || r.exit_code || ')'"
    "      ELSE r.status END,"
    " (SELECT count(*) FROM ops), (SELECT count(*) FROM backward_calls),"
    " (SELECT count(*) FROM errors),"
    " (SELECT s.text || ': ' || substr(e.message, 1, coalesce(nullif(instr(e.message,"
    "  char(10)), 0) - 1, 80)) FROM errors e JOIN strings s ON s.id = e.type"
    "  ORDER BY e.seq LIMIT 1),"
    " r.launcher_run_id"
    " FROM run r";

static const char info_create_sql[] =
    "CREATE TABLE ranks (rank INTEGER, local_rank INTEGER, world_size INTEGER,"
    " backend TEXT, host TEXT, pid INTEGER, status TEXT, ops INTEGER,"
    " backward_calls INTEGER, errors INTEGER, first_error TEXT, bytes INTEGER,"
    " launcher_run_id TEXT, trace TEXT)";

/* Copy trace `path`'s summary row into table ranks of `out`. 0, or 2 after
 * printing why not. */
static int info_row(gt_rank_set *set, sqlite3 *out, const char *path)
{
    gt_trace *t = NULL;
    sqlite3_stmt *st = NULL, *ins = NULL;
    int rc = GT_ENOMEM;
    if ((rc = gt_trace_open(path, &t)) != GT_OK) {
        multi_fail(set, "%s", gt_trace_errmsg(t));
        gt_trace_close(t);
        return rc;
    }
    rc = GT_ECORRUPT;
    sqlite3 *db = gt_trace_db(t);
    int v3 = gt_trace_schema_version(t) >= 3;
    char sql[sizeof info_row_sql + 128];
    snprintf(sql, sizeof sql, "%s", info_row_sql);
    if (!v3) {
        /* columns v3 added: NULL for older traces */
        static const char *const cols[] = {"r.local_rank", "r.world_size", "r.backend",
                                           "r.launcher_run_id"};
        for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
            char *p = strstr(sql, cols[i]);
            size_t n = strlen(cols[i]);
            memcpy(p, "NULL", 4);
            memmove(p + 4, p + n, strlen(p + n) + 1);
        }
    }
    if (gt_trace_prepare(t, sql, &st) != 0 || sqlite3_step(st) != SQLITE_ROW) {
        multi_fail(set, "info: cannot read %s: %s", path, sqlite3_errmsg(db));
        goto out;
    }
    if (gt_db_prepare(out,
                      "INSERT INTO ranks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
                      " ?9, ?10, ?11, ?12, ?13, ?14)",
                      &ins) != SQLITE_OK)
        goto oom;
    for (int i = 0; i < 11; i++)
        sqlite3_bind_value(ins, i + 1, sqlite3_column_value(st, i));
    struct stat fs;
    if (stat(path, &fs) == 0)
        sqlite3_bind_int64(ins, 12, (sqlite3_int64)fs.st_size);
    sqlite3_bind_value(ins, 13, sqlite3_column_value(st, 11));
    sqlite3_bind_text(ins, 14, path, -1, SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE)
        goto oom;
    rc = 0;
    goto out;
oom:
    rc = GT_ENOMEM;
    multi_fail(set, "info: %s", sqlite3_errmsg(out));
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(st);
    gt_trace_close(t);
    return rc;
}

int gt_multi_info_db(gt_rank_set *set, sqlite3 **out)
{
    sqlite3 *db = NULL;
    int rc = GT_ENOMEM;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, info_create_sql, NULL, NULL, NULL) != SQLITE_OK) {
        multi_fail(set, "info: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < set->n; i++)
        if ((rc = info_row(set, db, set->v[i].path)) != 0)
            goto fail;
    *out = db;
    return 0;
fail:
    sqlite3_close(db);
    return rc;
}

/* ---- diagnose ------------------------------------------------------------ */

typedef struct group {
    char *key;
    char *doc; /* one finding's JSON (the first rank's) */
    size_t n;
    int64_t *ranks;
} group;

/* The "label file:line  code  (extra)" line of the location at JSON path
 * `path` of finding `doc`; nothing when it has none. Out of memory sets
 * *oom (the line may be missing). */
static void loc_line(FILE *o, sqlite3 *db, const char *doc, const char *path,
                     const char *label, const char *extra, int *oom)
{
    sqlite3_stmt *st = NULL;
    int s = gt_db_prepare(db,
                          "SELECT ?1 -> ?2 ->> '$.file', ?1 -> ?2 ->> '$.line',"
                          " ?1 -> ?2 ->> '$.code'",
                          &st);
    const char *file = NULL, *line = NULL, *code = NULL;
    if (s == SQLITE_OK) {
        sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) {
            file = gt_column_text(st, 0, oom);
            line = gt_column_text(st, 1, oom);
            code = gt_column_text(st, 2, oom);
        }
    }
    if ((s & 0xff) == SQLITE_NOMEM)
        *oom = 1;
    if (file) {
        fprintf(o, "    %-11s ", label);
        gt_term_puts(o, file);
        fprintf(o, ":%s", line ? line : "?");
        if (code) {
            fputs("  ", o);
            gt_term_puts(o, code);
        }
        if (extra && *extra) {
            fputs("  (", o);
            gt_term_puts(o, extra);
            fputc(')', o);
        }
        fputc('\n', o);
    }
    sqlite3_finalize(st);
}

/* A malloc'd copy of what `sql` gives for finding `doc` (?1), "" when it
 * gives NULL or fails; NULL, with *oom set, when out of memory. */
static char *jtext(sqlite3 *db, const char *sql, const char *doc, int *oom)
{
    sqlite3_stmt *st = NULL;
    const char *v = NULL;
    int s = gt_db_prepare(db, sql, &st);
    if (s == SQLITE_OK) {
        sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
        if ((s = sqlite3_step(st)) == SQLITE_ROW)
            v = gt_column_text(st, 0, oom);
    }
    char *r = (s & 0xff) == SQLITE_NOMEM || *oom ? NULL : strdup(v ? v : "");
    sqlite3_finalize(st);
    if (!r)
        *oom = 1;
    return r;
}

/* One group of identical findings, as text. Out of memory sets *oom (the
 * group may be printed in part). */
static void print_group(FILE *o, sqlite3 *db, size_t index, const group *g,
                        size_t ntraces, int *oom)
{
    gt_strbuf ranks = GT_STRBUF_INIT;
    if (gt_format_ranks_buf(g->ranks, g->n, &ranks) != GT_OK) {
        gt_strbuf_release(&ranks);
        *oom = 1;
        return;
    }
    char *head = jtext(
        db,
        "SELECT CASE ?1 ->> '$.kind'"
        " WHEN 'inplace_invalidated_saved' THEN"
        "  coalesce((SELECT group_concat(value, ', ') FROM json_each(?1, "
        "'$.saved.names')),"
        "   'a tensor') || ' modified in place after ' || (?1 ->> '$.node.name') ||"
        "  ' saved it as ' || (?1 ->> '$.saved.slot') || ' (version ' ||"
        "  (?1 ->> '$.saved.saved_version') || ' -> ' ||"
        "  (?1 ->> '$.saved.version_at_backward') || ')'"
        " WHEN 'silent_storage_write' THEN"
        "  coalesce((SELECT group_concat(value, ', ') FROM json_each(?1, "
        "'$.saved.names')),"
        "   'a tensor') || ' overwritten by ' ||"
        "  CASE WHEN ?1 ->> '$.mutations[0].op' LIKE 'c10d::%'"
        "   THEN 'the collective ' || (?1 ->> '$.mutations[0].op')"
        "   ELSE 'a write autograd cannot see' END ||"
        "  ' after ' || (?1 ->> '$.node.name') || ' saved it as ' ||"
        "  (?1 ->> '$.saved.slot') || ': gradients are silently wrong'"
        " WHEN 'silent_kernel_write' THEN"
        "  coalesce((SELECT group_concat(value, ', ') FROM json_each(?1, "
        "'$.saved.names')),"
        "   'a tensor') || ' overwritten by ' || (?1 ->> '$.mutations[0].op') ||"
        "  ', which moves no version, after ' || (?1 ->> '$.node.name') ||"
        "  ' saved it as ' || (?1 ->> '$.saved.slot') || ': gradients are silently wrong'"
        " WHEN 'backward_twice' THEN 'backward #' || (?1 ->> '$.backward.index') ||"
        "  ' reached ' || (?1 ->> '$.node.name') || ', whose saved tensors backward #' ||"
        "  (?1 ->> '$.freed_by.index') || ' already freed'"
        " WHEN 'ddp_unused_parameters' THEN 'DistributedDataParallel got no gradient'"
        "  || ' for ' || (SELECT group_concat(value ->> '$.name', ', ') FROM"
        "  json_each(?1, '$.target.parameters')) || coalesce(' in backward #' ||"
        "  (?1 ->> '$.backward.index'), '') || ', so its next forward raised'"
        " ELSE 'in-place operation on ' || coalesce((SELECT group_concat(value, ', ')"
        "  FROM json_each(?1, '$.leaf.names')), 'a leaf') ||"
        "  ', a leaf tensor that requires grad' END || '  [' || (?1 ->> '$.kind') || ']'",
        g->doc, oom);
    if (!head) {
        gt_strbuf_release(&ranks);
        return;
    }
    fprintf(o, "[%zu] %s %s: ", index, g->n == 1 ? "rank" : "ranks",
            gt_strbuf_str(&ranks));
    gt_strbuf_release(&ranks);
    gt_term_puts(o, head);
    fputc('\n', o);
    free(head);
    char *saved = jtext(db,
                        "SELECT (?1 ->> '$.node.name') || ' saved ' ||"
                        " (?1 ->> '$.saved.slot') || coalesce(' at version ' ||"
                        " (?1 ->> '$.saved.saved_version'), ', freed since')",
                        g->doc, oom);
    if (!saved)
        return;
    loc_line(o, db, g->doc, "$.node.location", "saved at", saved, oom);
    free(saved);
    sqlite3_stmt *st = NULL;
    int s = gt_db_prepare(db,
                          "SELECT m.value, m.value ->> '$.op' FROM json_each(?1,"
                          " '$.mutations') m ORDER BY m.key",
                          &st);
    if (s == SQLITE_OK) {
        sqlite3_bind_text(st, 1, g->doc, -1, SQLITE_STATIC);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *m = gt_column_text(st, 0, oom), *op = gt_column_text(st, 1, oom);
            if (m)
                loc_line(o, db, m, "$.location", "written at", op, oom);
        }
    }
    if ((s & 0xff) == SQLITE_NOMEM)
        *oom = 1;
    sqlite3_finalize(st);
    char *bw =
        jtext(db, "SELECT 'backward #' || (?1 ->> '$.backward.index')", g->doc, oom);
    if (!bw)
        return;
    loc_line(o, db, g->doc, "$.backward.location", "needed by", bw, oom);
    free(bw);
    loc_line(o, db, g->doc, "$.location", "at", NULL, oom);
    char *fix = jtext(db, "SELECT ?1 ->> '$.suggestion'", g->doc, oom);
    if (!fix)
        return;
    if (*fix) {
        fprintf(o, "    %-11s ", "fix");
        gt_term_puts(o, fix);
        fputc('\n', o);
    }
    free(fix);
    if (g->n < ntraces)
        fprintf(o, "    %-11s not on the other ranks\n", "");
    fputc('\n', o);
}

/* The notes of the ranks' diagnoses besides their findings (compiled code
 * ran eagerly, backward calls that ran nodes from before recording:
 * gt_diagnose_notes), each distinct note once with the ranks it is on. */
typedef struct note_group {
    int kind; /* GT_NOTE_* */
    char *text;
    size_t n;
    int64_t *ranks;
} note_group;

static const char *note_kind_name(int kind)
{
    return kind == GT_NOTE_COMPILED ? "compiled_ran_eagerly" : "outside_recording";
}

static void note_groups_free(note_group *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].text);
        free(v[i].ranks);
    }
    free(v);
}

/* Group the notes of every diagnosed trace (docs[i], codes[i] < 2) into
 * *out, *nout. 0, or -1 when out of memory (*out then holds what was
 * grouped, for note_groups_free). */
static int group_notes(sqlite3 *db, const gt_rank_set *set, char **docs, const int *codes,
                       note_group **out, size_t *nout)
{
    static const int kinds[] = {GT_NOTE_COMPILED, GT_NOTE_OUTSIDE};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (size_t i = 0; i < set->n; i++) {
            if (codes[i] > 1 || !docs[i][0])
                continue;
            char **lines = NULL;
            size_t nl = 0;
            if (gt_diagnose_notes(db, docs[i], kinds[k], &lines, &nl) < 0)
                return -1;
            int64_t r = set->v[i].has_rank ? set->v[i].rank : (int64_t)i;
            for (size_t l = 0; l < nl; l++) {
                size_t g = 0;
                while (g < *nout && ((*out)[g].kind != kinds[k] ||
                                     strcmp((*out)[g].text, lines[l]) != 0))
                    g++;
                if (g == *nout) {
                    note_group *ng = realloc(*out, (*nout + 1) * sizeof *ng);
                    if (!ng)
                        goto oom;
                    *out = ng;
                    ng[g] = (note_group){.kind = kinds[k], .text = lines[l]};
                    lines[l] = NULL;
                    ++*nout;
                }
                note_group *gr = &(*out)[g];
                if (!gr->n || gr->ranks[gr->n - 1] != r) {
                    int64_t *nr = realloc(gr->ranks, (gr->n + 1) * sizeof *nr);
                    if (!nr)
                        goto oom;
                    gr->ranks = nr;
                    nr[gr->n++] = r;
                }
            }
            gt_diagnose_notes_free(lines, nl);
            continue;
        oom:
            gt_diagnose_notes_free(lines, nl);
            return -1;
        }
    }
    return 0;
}

/* ranks[0..n) as a JSON array into b. */
static void ranks_json(gt_strbuf *b, const int64_t *ranks, size_t n)
{
    gt_strbuf_add(b, "[", 1);
    for (size_t k = 0; k < n; k++)
        gt_strbuf_addf(b, "%s%" PRId64, k ? "," : "", ranks[k]);
    gt_strbuf_add(b, "]", 1);
}

/* Append to b, after a comma unless first, the object sql (a one-row
 * SELECT json_object(...)) makes of ?1 = ranks[0..n) as a JSON array and the
 * texts ?2 = a and ?3 = c (NULL: not bound). 0, or -1 out of memory. */
static int add_ranked(gt_strbuf *b, sqlite3 *db, const char *sql, int first,
                      const int64_t *ranks, size_t n, const char *a, const char *c)
{
    char *row = NULL;
    sqlite3_stmt *st = NULL;
    gt_strbuf rl = {0};
    ranks_json(&rl, ranks, n);
    if (!rl.oom && gt_db_prepare(db, sql, &st) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, rl.p, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, a, -1, SQLITE_STATIC);
        if (c)
            sqlite3_bind_text(st, 3, c, -1, SQLITE_STATIC);
        int oom = 0; /* the row is never NULL but out of memory */
        const char *v =
            sqlite3_step(st) == SQLITE_ROW ? gt_column_text(st, 0, &oom) : NULL;
        row = v ? strdup(v) : NULL;
    }
    sqlite3_finalize(st);
    free(rl.p);
    if (!row)
        return -1;
    if (!first)
        gt_strbuf_add(b, ",", 1);
    gt_strbuf_add(b, row, strlen(row));
    free(row);
    return 0;
}

/* The state of one multi-rank report. */
typedef struct mreport {
    FILE *o;
    sqlite3 *db;
    sqlite3_stmt *kst, *fst; /* a finding's identity; a document's findings */
    const gt_rank_set *set;
    char **docs;
    const int *codes;
    group *groups;
    size_t ngroups;
    note_group *notes;
    size_t nnotes;
} mreport;

/* Group the findings of every diagnosed trace by identity
 * (gt_finding_key_sql), each group with the ranks it is on. 0, or -1 when
 * out of memory (m->groups then holds what was grouped). */
static int group_findings(mreport *m)
{
    for (size_t i = 0; i < m->set->n; i++) {
        if (m->codes[i] > 1 || !m->docs[i][0])
            continue;
        /* group its findings */
        sqlite3_bind_text(m->fst, 1, m->docs[i], -1, SQLITE_STATIC);
        while (sqlite3_step(m->fst) == SQLITE_ROW) {
            int oom = 0;
            const char *f = gt_column_text(m->fst, 0, &oom);
            if (!f)
                return -1; /* a finding is an object, never NULL but out of memory */
            sqlite3_bind_text(m->kst, 1, f, -1, SQLITE_STATIC);
            if (sqlite3_step(m->kst) != SQLITE_ROW) {
                sqlite3_reset(m->kst);
                continue;
            }
            const char *key = gt_column_text(m->kst, 0, &oom);
            if (!key)
                return -1; /* a grouping key is never NULL but out of memory */
            size_t g = 0;
            while (g < m->ngroups && strcmp(m->groups[g].key, key) != 0)
                g++;
            if (g == m->ngroups) {
                group *ng = realloc(m->groups, (m->ngroups + 1) * sizeof *ng);
                if (!ng)
                    return -1;
                m->groups = ng;
                memset(&m->groups[g], 0, sizeof m->groups[g]);
                m->ngroups++;
                if (!(m->groups[g].key = strdup(key)) || !(m->groups[g].doc = strdup(f)))
                    return -1;
            }
            int64_t r = m->set->v[i].has_rank ? m->set->v[i].rank : (int64_t)i;
            if (!m->groups[g].n || m->groups[g].ranks[m->groups[g].n - 1] != r) {
                int64_t *nr =
                    realloc(m->groups[g].ranks, (m->groups[g].n + 1) * sizeof *nr);
                if (!nr)
                    return -1;
                m->groups[g].ranks = nr;
                nr[m->groups[g].n++] = r;
            }
            sqlite3_reset(m->kst);
        }
        sqlite3_reset(m->fst);
    }
    return 0;
}

/* The report as JSON: {"traces": [{rank, path, status, diagnosis}],
 * "groups": [{ranks, finding}], "notes": [{ranks, kind, text}]}. 0, or -1
 * when out of memory. */
static int write_json(mreport *m)
{
    gt_strbuf b = {0};
    gt_strbuf_add(&b, "{\"traces\":[", 11);
    for (size_t i = 0; i < m->set->n; i++) {
        char *row = NULL;
        sqlite3_stmt *st = NULL;
        if (gt_db_prepare(m->db,
                          "SELECT json_object('rank', ?1, 'path', ?2, 'status',"
                          " ?3, 'diagnosis', json(nullif(?4, '')))",
                          &st) == SQLITE_OK) {
            if (m->set->v[i].has_rank)
                sqlite3_bind_int64(st, 1, m->set->v[i].rank);
            sqlite3_bind_text(st, 2, m->set->v[i].path, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 3, m->codes[i]);
            sqlite3_bind_text(st, 4, m->codes[i] > 1 ? "" : m->docs[i], -1,
                              SQLITE_STATIC);
            int oom = 0;
            const char *j =
                sqlite3_step(st) == SQLITE_ROW ? gt_column_text(st, 0, &oom) : NULL;
            row = j ? strdup(j) : NULL;
        }
        sqlite3_finalize(st);
        if (!row) {
            free(b.p);
            return -1;
        }
        if (i)
            gt_strbuf_add(&b, ",", 1);
        gt_strbuf_add(&b, row, strlen(row));
        free(row);
    }
    gt_strbuf_add(&b, "],\"groups\":[", 12);
    for (size_t g = 0; g < m->ngroups; g++)
        if (add_ranked(
                &b, m->db, "SELECT json_object('ranks', json(?1), 'finding', json(?2))",
                g == 0, m->groups[g].ranks, m->groups[g].n, m->groups[g].doc, NULL) < 0) {
            free(b.p);
            return -1;
        }
    gt_strbuf_add(&b, "],\"notes\":[", 11);
    for (size_t g = 0; g < m->nnotes; g++)
        if (add_ranked(&b, m->db,
                       "SELECT json_object('ranks', json(?1), 'kind', ?2, 'text', ?3)",
                       g == 0, m->notes[g].ranks, m->notes[g].n,
                       note_kind_name(m->notes[g].kind), m->notes[g].text) < 0) {
            free(b.p);
            return -1;
        }
    gt_strbuf_add(&b, "]}\n", 3);
    if (b.oom) {
        free(b.p);
        return -1;
    }
    fputs(b.p, m->o);
    free(b.p);
    return 0;
}

/* The report as text: each rank's outcome, the notes, then every distinct
 * finding once. 0, or -1 when out of memory. */
static int write_text(mreport *m, int any_outside)
{
    int64_t *all = malloc((m->set->n ? m->set->n : 1) * sizeof *all);
    if (!all)
        return -1;
    for (size_t i = 0; i < m->set->n; i++)
        all[i] = m->set->v[i].has_rank ? m->set->v[i].rank : (int64_t)i;
    fprintf(m->o, "%zu traces\n", m->set->n);
    for (size_t i = 0; i < m->set->n; i++) {
        fprintf(m->o, "  %s %-4" PRId64 " ", m->set->v[i].has_rank ? "rank" : "#   ",
                all[i]);
        gt_term_puts(m->o, m->set->v[i].path);
        if (m->codes[i] > 1 || !m->docs[i][0]) {
            fprintf(m->o, ": not diagnosed (see the error above)\n");
            continue;
        }
        int oom = 0;
        char *partial = jtext(m->db, "SELECT ?1 ->> '$.partial'", m->docs[i], &oom);
        char *err = jtext(m->db,
                          "SELECT (?1 ->> '$.error.type') || ': ' ||"
                          " substr(?1 ->> '$.error.message', 1, coalesce(nullif("
                          " instr(?1 ->> '$.error.message', char(10)), 0) - 1, 100))",
                          m->docs[i], &oom);
        char *nf =
            jtext(m->db, "SELECT json_array_length(?1, '$.findings')", m->docs[i], &oom);
        if (oom) {
            free(partial);
            free(err);
            free(nf);
            free(all);
            return -1;
        }
        fprintf(m->o, ": %s finding%s", nf, strcmp(nf, "1") ? "s" : "");
        if (!strcmp(partial, "1"))
            fprintf(m->o, "; partial trace (the process was killed or is still running)");
        if (*err) {
            fprintf(m->o, "; the run raised ");
            gt_term_puts(m->o, err);
        }
        fputc('\n', m->o);
        free(partial);
        free(err);
        free(nf);
    }
    if (m->nnotes)
        fputc('\n', m->o);
    for (size_t g = 0; g < m->nnotes; g++) {
        gt_strbuf ranks = GT_STRBUF_INIT;
        if (gt_format_ranks_buf(m->notes[g].ranks, m->notes[g].n, &ranks) != GT_OK) {
            gt_strbuf_release(&ranks);
            free(all);
            return -1;
        }
        fprintf(m->o, "note: %s %s: %s\n", m->notes[g].n == 1 ? "rank" : "ranks",
                gt_strbuf_str(&ranks), m->notes[g].text);
        gt_strbuf_release(&ranks);
    }
    if (m->ngroups == 0) {
        fprintf(m->o,
                "\nno findings on any rank: no saved tensor %s modified before the "
                "backward that needed it\n",
                any_outside ? "the recording saw was" : "was");
    } else {
        fprintf(m->o, "\n%zu distinct finding%s\n\n", m->ngroups,
                m->ngroups == 1 ? "" : "s");
        int oom = 0;
        for (size_t g = 0; g < m->ngroups && !oom; g++)
            print_group(m->o, m->db, g + 1, &m->groups[g], m->set->n, &oom);
        if (oom) {
            free(all);
            return -1;
        }
    }
    free(all);
    return 0;
}

/* Group the findings and notes of every diagnosed trace and write the
 * report into o. 0, or GT_ENOMEM (o then holds a part). */
static int multi_report(FILE *o, const gt_rank_set *set, char **docs, const int *codes,
                        int json)
{
    mreport m = {.o = o, .set = set, .docs = docs, .codes = codes};
    int rc = GT_ENOMEM;
    if (sqlite3_open_v2(":memory:", &m.db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        gt_db_prepare(m.db, gt_finding_key_sql, &m.kst) != SQLITE_OK ||
        gt_db_prepare(m.db, "SELECT value FROM json_each(?1, '$.findings') ORDER BY key",
                      &m.fst) != SQLITE_OK)
        goto out;
    if (group_findings(&m) < 0 ||
        group_notes(m.db, set, docs, codes, &m.notes, &m.nnotes) < 0)
        goto out;
    int any_outside = 0;
    for (size_t g = 0; g < m.nnotes; g++)
        any_outside |= m.notes[g].kind == GT_NOTE_OUTSIDE;
    if ((json ? write_json(&m) : write_text(&m, any_outside)) == 0)
        rc = 0;
out:
    for (size_t g = 0; g < m.ngroups; g++) {
        free(m.groups[g].key);
        free(m.groups[g].doc);
        free(m.groups[g].ranks);
    }
    free(m.groups);
    note_groups_free(m.notes, m.nnotes);
    sqlite3_finalize(m.kst);
    sqlite3_finalize(m.fst);
    sqlite3_close(m.db);
    return rc;
}

int gt_multi_report(const gt_rank_set *set, char **docs, const int *codes, int json,
                    gt_strbuf *out)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    int rc = m ? multi_report(m, set, docs, codes, json) : GT_ENOMEM;
    if (m && fclose(m) != 0)
        rc = GT_ENOMEM;
    if (rc == 0 && gt_strbuf_add(out, text ? text : "", len) != 0)
        rc = GT_ENOMEM;
    free(text);
    return rc;
}
