/*
 * info and diagnose over several traces: the ranks of a distributed run
 * (multi.h). `gradtrace info A B...` prints one line per rank;
 * `gradtrace diagnose A B...` (or a directory) diagnoses each trace as
 * `gradtrace diagnose --json` does, in a child process of its own, then
 * prints each rank's outcome and every distinct finding once, with the
 * ranks it was found on ("ranks 0-3").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "multi.h"
#include "strbuf.h"
#include "table_out.h"
#include "termtext.h"
#include "trace.h"

/* ---- info ------------------------------------------------------------- */

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
static int info_row(sqlite3 *out, const char *path)
{
    gt_trace *t = NULL;
    sqlite3_stmt *st = NULL, *ins = NULL;
    int rc = 2;
    if (gt_trace_open(path, &t) != GT_OK) {
        fprintf(stderr, "gradtrace: %s\n", gt_trace_errmsg(t));
        gt_trace_close(t);
        return 2;
    }
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
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        fprintf(stderr, "gradtrace: info: cannot read %s: %s\n", path,
                sqlite3_errmsg(db));
        goto out;
    }
    if (sqlite3_prepare_v2(out,
                           "INSERT INTO ranks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
                           " ?9, ?10, ?11, ?12, ?13, ?14)",
                           -1, &ins, NULL) != SQLITE_OK)
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
    fprintf(stderr, "gradtrace: info: %s\n", sqlite3_errmsg(out));
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(st);
    gt_trace_close(t);
    return rc;
}

int gt_multi_info(int npaths, char **paths, int json)
{
    gt_rank_set set;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int status = 2;
    if (gt_rank_set_load(&set, npaths, paths) != 0) {
        fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
        gt_rank_set_release(&set);
        return 2;
    }
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, info_create_sql, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: info: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < set.n; i++)
        if (info_row(db, set.v[i].path) != 0)
            goto out;
    if (sqlite3_prepare_v2(db, "SELECT * FROM ranks ORDER BY rowid", -1, &st, NULL) !=
        SQLITE_OK) {
        fprintf(stderr, "gradtrace: info: %s\n", sqlite3_errmsg(db));
        goto out;
    }
    gt_table_opts o = {json ? GT_OUT_JSON : GT_OUT_TABLE, 1, 0};
    if (gt_table_print(st, &o, stdout, NULL) != SQLITE_OK || fflush(stdout) != 0) {
        fprintf(stderr, "gradtrace: info: cannot write the summary\n");
        goto out;
    }
    status = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    gt_rank_set_release(&set);
    return status;
}

/* ---- diagnose ------------------------------------------------------------ */

/* Run `gradtrace diagnose --json [--backward N] path` in a child process;
 * its stdout into *out (malloc'd), its exit status into *status. 0, or -1
 * if the child could not be run. */
static int diagnose_child(const char *path, long long backward, char **out, int *status)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(2);
        close(fds[1]);
        char bw[32];
        snprintf(bw, sizeof bw, "%lld", backward);
        char *av[] = {"diagnose", "--json", "--backward", bw, (char *)path, NULL};
        char *av_all[] = {"diagnose", "--json", (char *)path, NULL};
        int rc = backward ? gt_cmd_diagnose(5, av) : gt_cmd_diagnose(3, av_all);
        fflush(NULL);
        _exit(rc);
    }
    close(fds[1]);
    gt_strbuf b = {0};
    char buf[65536];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        gt_strbuf_add(&b, buf, (size_t)n);
    }
    close(fds[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 2;
    if (b.oom) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : strdup("");
    return *out ? 0 : -1;
}

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
    int s = sqlite3_prepare_v2(db,
                               "SELECT ?1 -> ?2 ->> '$.file', ?1 -> ?2 ->> '$.line',"
                               " ?1 -> ?2 ->> '$.code'",
                               -1, &st, NULL);
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
    int s = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
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
    int s = sqlite3_prepare_v2(db,
                               "SELECT m.value, m.value ->> '$.op' FROM json_each(?1,"
                               " '$.mutations') m ORDER BY m.key",
                               -1, &st, NULL);
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
    if (!rl.oom && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
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

int gt_multi_diagnose(int npaths, char **paths, int json, long long backward)
{
    gt_rank_set set;
    sqlite3 *db = NULL;
    sqlite3_stmt *kst = NULL, *fst = NULL;
    group *groups = NULL;
    note_group *notes = NULL;
    size_t ngroups = 0, nnotes = 0;
    char **docs = NULL;
    int *codes = NULL;
    int status = 2, any_findings = 0, any_error = 0;
    if (gt_rank_set_load(&set, npaths, paths) != 0) {
        fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
        gt_rank_set_release(&set);
        return 2;
    }
    docs = calloc(set.n, sizeof *docs);
    codes = calloc(set.n, sizeof *codes);
    if (!docs || !codes) {
        fprintf(stderr, "gradtrace: diagnose: out of memory\n");
        goto out;
    }
    /* every trace first, in children that inherit nothing of ours to free */
    for (size_t i = 0; i < set.n; i++) {
        if (diagnose_child(set.v[i].path, backward, &docs[i], &codes[i]) < 0) {
            fprintf(stderr, "gradtrace: diagnose: cannot run for %s: %s\n", set.v[i].path,
                    strerror(errno));
            goto out;
        }
        if (codes[i] == 1)
            any_findings = 1;
        else if (codes[i] != 0 || !docs[i][0])
            any_error = 1;
    }
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, gt_finding_key_sql, -1, &kst, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT value FROM json_each(?1, '$.findings') ORDER BY key",
                           -1, &fst, NULL) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: diagnose: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < set.n; i++) {
        if (codes[i] > 1 || !docs[i][0])
            continue;
        /* group its findings */
        sqlite3_bind_text(fst, 1, docs[i], -1, SQLITE_STATIC);
        while (sqlite3_step(fst) == SQLITE_ROW) {
            int oom = 0;
            const char *f = gt_column_text(fst, 0, &oom);
            if (!f)
                goto oom; /* a finding is an object, never NULL but out of memory */
            sqlite3_bind_text(kst, 1, f, -1, SQLITE_STATIC);
            if (sqlite3_step(kst) != SQLITE_ROW) {
                sqlite3_reset(kst);
                continue;
            }
            const char *key = gt_column_text(kst, 0, &oom);
            if (!key)
                goto oom; /* a grouping key is never NULL but out of memory */
            size_t g = 0;
            while (g < ngroups && strcmp(groups[g].key, key) != 0)
                g++;
            if (g == ngroups) {
                group *ng = realloc(groups, (ngroups + 1) * sizeof *ng);
                if (!ng)
                    goto oom;
                groups = ng;
                memset(&groups[g], 0, sizeof groups[g]);
                ngroups++;
                if (!(groups[g].key = strdup(key)) || !(groups[g].doc = strdup(f)))
                    goto oom;
            }
            int64_t r = set.v[i].has_rank ? set.v[i].rank : (int64_t)i;
            if (!groups[g].n || groups[g].ranks[groups[g].n - 1] != r) {
                int64_t *nr = realloc(groups[g].ranks, (groups[g].n + 1) * sizeof *nr);
                if (!nr)
                    goto oom;
                groups[g].ranks = nr;
                nr[groups[g].n++] = r;
            }
            sqlite3_reset(kst);
        }
        sqlite3_reset(fst);
    }
    if (group_notes(db, &set, docs, codes, &notes, &nnotes) < 0)
        goto oom;
    int any_outside = 0;
    for (size_t g = 0; g < nnotes; g++)
        any_outside |= notes[g].kind == GT_NOTE_OUTSIDE;

    if (json) {
        /* {"traces": [{rank, path, status, diagnosis}], "groups": [{ranks, finding}],
         * "notes": [{ranks, kind, text}]} */
        gt_strbuf b = {0};
        gt_strbuf_add(&b, "{\"traces\":[", 11);
        for (size_t i = 0; i < set.n; i++) {
            char *row = NULL;
            sqlite3_stmt *st = NULL;
            if (sqlite3_prepare_v2(db,
                                   "SELECT json_object('rank', ?1, 'path', ?2, 'status',"
                                   " ?3, 'diagnosis', json(nullif(?4, '')))",
                                   -1, &st, NULL) == SQLITE_OK) {
                if (set.v[i].has_rank)
                    sqlite3_bind_int64(st, 1, set.v[i].rank);
                sqlite3_bind_text(st, 2, set.v[i].path, -1, SQLITE_STATIC);
                sqlite3_bind_int(st, 3, codes[i]);
                sqlite3_bind_text(st, 4, codes[i] > 1 ? "" : docs[i], -1, SQLITE_STATIC);
                int oom = 0;
                const char *j =
                    sqlite3_step(st) == SQLITE_ROW ? gt_column_text(st, 0, &oom) : NULL;
                row = j ? strdup(j) : NULL;
            }
            sqlite3_finalize(st);
            if (!row) {
                free(b.p);
                goto oom;
            }
            if (i)
                gt_strbuf_add(&b, ",", 1);
            gt_strbuf_add(&b, row, strlen(row));
            free(row);
        }
        gt_strbuf_add(&b, "],\"groups\":[", 12);
        for (size_t g = 0; g < ngroups; g++)
            if (add_ranked(
                    &b, db, "SELECT json_object('ranks', json(?1), 'finding', json(?2))",
                    g == 0, groups[g].ranks, groups[g].n, groups[g].doc, NULL) < 0) {
                free(b.p);
                goto oom;
            }
        gt_strbuf_add(&b, "],\"notes\":[", 11);
        for (size_t g = 0; g < nnotes; g++)
            if (add_ranked(
                    &b, db,
                    "SELECT json_object('ranks', json(?1), 'kind', ?2, 'text', ?3)",
                    g == 0, notes[g].ranks, notes[g].n, note_kind_name(notes[g].kind),
                    notes[g].text) < 0) {
                free(b.p);
                goto oom;
            }
        gt_strbuf_add(&b, "]}\n", 3);
        if (b.oom) {
            free(b.p);
            goto oom;
        }
        fputs(b.p, stdout);
        free(b.p);
    } else {
        int64_t *all = malloc((set.n ? set.n : 1) * sizeof *all);
        if (!all)
            goto oom;
        for (size_t i = 0; i < set.n; i++)
            all[i] = set.v[i].has_rank ? set.v[i].rank : (int64_t)i;
        printf("%zu traces\n", set.n);
        for (size_t i = 0; i < set.n; i++) {
            printf("  %s %-4" PRId64 " ", set.v[i].has_rank ? "rank" : "#   ", all[i]);
            gt_term_puts(stdout, set.v[i].path);
            if (codes[i] > 1 || !docs[i][0]) {
                printf(": not diagnosed (see the error above)\n");
                continue;
            }
            int oom = 0;
            char *partial = jtext(db, "SELECT ?1 ->> '$.partial'", docs[i], &oom);
            char *err = jtext(db,
                              "SELECT (?1 ->> '$.error.type') || ': ' ||"
                              " substr(?1 ->> '$.error.message', 1, coalesce(nullif("
                              " instr(?1 ->> '$.error.message', char(10)), 0) - 1, 100))",
                              docs[i], &oom);
            char *nf =
                jtext(db, "SELECT json_array_length(?1, '$.findings')", docs[i], &oom);
            if (oom) {
                free(partial);
                free(err);
                free(nf);
                free(all);
                goto oom;
            }
            printf(": %s finding%s", nf, strcmp(nf, "1") ? "s" : "");
            if (!strcmp(partial, "1"))
                printf("; partial trace (the process was killed or is still running)");
            if (*err) {
                printf("; the run raised ");
                gt_term_puts(stdout, err);
            }
            putchar('\n');
            free(partial);
            free(err);
            free(nf);
        }
        if (nnotes)
            putchar('\n');
        for (size_t g = 0; g < nnotes; g++) {
            gt_strbuf ranks = GT_STRBUF_INIT;
            if (gt_format_ranks_buf(notes[g].ranks, notes[g].n, &ranks) != GT_OK) {
                gt_strbuf_release(&ranks);
                free(all);
                goto oom;
            }
            printf("note: %s %s: %s\n", notes[g].n == 1 ? "rank" : "ranks",
                   gt_strbuf_str(&ranks), notes[g].text);
            gt_strbuf_release(&ranks);
        }
        if (ngroups == 0) {
            printf("\nno findings on any rank: no saved tensor %s modified before the "
                   "backward that needed it\n",
                   any_outside ? "the recording saw was" : "was");
        } else {
            printf("\n%zu distinct finding%s\n\n", ngroups, ngroups == 1 ? "" : "s");
            int oom = 0;
            for (size_t g = 0; g < ngroups && !oom; g++)
                print_group(stdout, db, g + 1, &groups[g], set.n, &oom);
            if (oom) {
                free(all);
                goto oom;
            }
        }
        free(all);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "gradtrace: diagnose: cannot write output\n");
        goto out;
    }
    status = any_findings ? 1 : any_error ? 2 : 0;
    goto out;
oom:
    fprintf(stderr, "gradtrace: diagnose: out of memory\n");
out:
    for (size_t g = 0; g < ngroups; g++) {
        free(groups[g].key);
        free(groups[g].doc);
        free(groups[g].ranks);
    }
    free(groups);
    note_groups_free(notes, nnotes);
    for (size_t i = 0; docs && i < set.n; i++)
        free(docs[i]);
    free(docs);
    free(codes);
    sqlite3_finalize(kst);
    sqlite3_finalize(fst);
    sqlite3_close(db);
    gt_rank_set_release(&set);
    return status;
}
