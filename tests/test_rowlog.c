/* Tests of the row log (common/rowlog.c, options.row_log in recorder.c):
 *   - a closed trace recorded through the log holds exactly the rows the
 *     direct path writes, as one file (no -wal, no -gtlog);
 *   - a writer killed with SIGKILL leaves trace + log; the inspector's open
 *     folds every complete commit (integrity_check ok, log removed);
 *   - a torn last block (the log cut mid-block) folds up to the last
 *     complete commit, never part of one;
 *   - a live recording's log is read through the reader's private copy,
 *     the files untouched;
 *   - a log that is not one, or of a newer format, gives one clear line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rowlog.h"
#include <gradtrace/trace.h>

#define GT_TMPDIR_PREFIX "gt_test_rowlog"
#include "tmpdir.h"
#include "sqlquery.h"

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static const char *side(const char *path, const char *suffix)
{
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s%s", path, suffix);
    return b;
}

static int64_t fsize(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Step i of a run touching every logged row kind: an op with three args, a
 * tensor (with a shape: text columns), a storage, a bump, a node with two
 * edges, an output, a saved tensor, a node execution and a name. Returns 0
 * or the first error. */
static int write_step(gt_recorder *r, int64_t i, gt_id name, gt_id th, gt_id stack,
                      gt_id bw)
{
    gt_op_info op = {.name = name, .grad_mode = 1, .thread = th, .stack = stack};
    int64_t seq, s2;
    int64_t shape[3] = {i % 7 + 1, 3, 4}, strides[3] = {12, 4, 1};
    gt_tensor_info t = {.id = 2 * i,
                        .storage = i,
                        .dtype = name,
                        .ndim = 3,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = 1};
    gt_node_info n = {.id = i, .name = name, .sequence_nr = i, .thread = th};
    int rc;
    if ((rc = gt_storage(r, i, 4 * i, name)) || (rc = gt_tensor(r, &t)) ||
        (rc = gt_op(r, &op, &seq)) || (rc = gt_op_arg(r, seq, 0, 0, 2 * i, 0)) ||
        (rc = gt_op_arg(r, seq, 0, 1, 2 * i + 1, 1)) ||
        (rc = gt_op_arg(r, seq, 2, 0, 2 * i, 0)) ||
        (rc = gt_version_bump(r, seq, 2 * i, 1, 1, NULL)))
        return rc;
    n.op = seq;
    if ((rc = gt_node(r, &n)) || (rc = gt_edge(r, i, 0, i > 1 ? i - 1 : 0, 0)) ||
        (rc = gt_edge(r, i, 1, 0, 0)) || (rc = gt_node_output(r, i, 0, 2 * i)) ||
        (rc = gt_saved_tensor(r, i, name, 2 * i, 0, 0, 48, &s2)) ||
        (rc = gt_node_exec(r, bw, i)) || (rc = gt_name(r, seq, 2 * i, "w")))
        return rc;
    return 0;
}

/* Open a recorder at path (row log or not), intern what write_step needs
 * and begin one backward call. */
static gt_recorder *start(const char *path, int row_log, unsigned batch, gt_id ids[4])
{
    char err[256] = "";
    gt_recorder *r = NULL;
    gt_recorder_options o = {
        .row_log = row_log, .batch_events = batch, .batch_ms = 100000};
    if (gt_recorder_open(path, &o, err, sizeof err, &r) != 0)
        return NULL;
    gt_id frame;
    gt_backward_info b = {.api = 0, .thread = 0};
    if (gt_intern_string(r, "aten::mul_.Tensor", 17, &ids[0]) != 0 ||
        gt_intern_thread(r, 1, "MainThread", &ids[1]) != 0 ||
        gt_intern_frame(r, "train.py", 7, "step", "w.mul_(2)", &frame) != 0 ||
        gt_intern_stack(r, 0, frame, frame, &ids[2]) != 0)
        return NULL;
    b.api = ids[0];
    if (gt_backward_begin(r, &b, &ids[3]) != 0)
        return NULL;
    return r;
}

/* One line per table: its row count and a hash of its rows in key order. */
static char *dump(const char *path)
{
    static const char *const sql[] = {
        "SELECT count(*) || ':' || sum(seq * 7 + name + phase + grad_mode + thread +"
        " coalesce(stack, 0)) FROM ops",
        "SELECT count(*) || ':' || sum(op * 31 + role * 7 + pos + tensor + version) FROM"
        " op_args",
        "SELECT count(*) || ':' || sum(id + seq + coalesce(storage, 0) + dtype +"
        " length(shape) + length(strides)) || group_concat(shape, '') FROM tensors",
        "SELECT count(*) || ':' || sum(id + nbytes + device) FROM storages",
        "SELECT count(*) || ':' || sum(seq + op + tensor + version + observed) FROM"
        " version_bumps",
        "SELECT count(*) || ':' || sum(id + seq + name + op + sequence_nr) FROM nodes",
        "SELECT count(*) || ':' || sum(node * 3 + pos + coalesce(next, 0)) FROM edges",
        "SELECT count(*) || ':' || sum(node + output_nr + tensor) FROM node_outputs",
        "SELECT count(*) || ':' || sum(seq + node + slot + tensor + nbytes) FROM"
        " saved_tensors",
        "SELECT count(*) || ':' || sum(seq + backward + node) FROM node_execs",
        "SELECT count(*) || ':' || sum(seq + tensor + name) FROM names",
        "SELECT count(*) FROM strings",
    };
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    size_t cap = 8192, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        const char *v = q_text(db, sql[i]);
        len += (size_t)snprintf(out + len, cap - len, "%s\n", v ? v : "NULL");
        assert_true(len < cap);
    }
    sqlite3_close(db);
    return out;
}

static void test_close_folds_log_same_rows_one_file(void **state)
{
    (void)state;
    char *a = strdup(tpath("direct.db")), *b = strdup(tpath("logged.db"));
    gt_id ia[4], ib[4];
    gt_recorder *ra = start(a, 0, 300, ia), *rb = start(b, 1, 300, ib);
    assert_non_null(ra);
    assert_non_null(rb);
    for (int64_t i = 1; i <= 3000; i++) {
        assert_int_equal(write_step(ra, i, ia[0], ia[1], ia[2], ia[3]), 0);
        assert_int_equal(write_step(rb, i, ib[0], ib[1], ib[2], ib[3]), 0);
    }
    /* during the run the frequent rows are in the log, not the trace */
    assert_true(fsize(side(b, "-gtlog")) > 3000 * 100);
    assert_int_equal(gt_recorder_close(ra), 0);
    assert_int_equal(gt_recorder_close(rb), 0);
    assert_false(exists(side(b, "-gtlog")));
    assert_false(exists(side(b, "-wal")));
    char *da = dump(a), *db = dump(b);
    assert_string_equal(da, db);
    assert_non_null(strstr(da, "3000:"));
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(b, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_string_equal(q_text(h, "PRAGMA integrity_check"), "ok");
    assert_string_equal(q_text(h, "PRAGMA journal_mode"), "delete");
    assert_int_equal(q_int(h, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                              " AND name NOT LIKE 'sqlite_%'"),
                     9);
    sqlite3_close(h);
    free(da);
    free(db);
    free(a);
    free(b);
}

/* A duplicate key among logged rows is dropped at the fold, the others
 * kept (as the direct path does when it writes the group). */
static void test_duplicate_dropped_at_fold(void **state)
{
    (void)state;
    const char *p = tpath("dup.db");
    gt_id ids[4];
    gt_recorder *r = start(p, 1, 1000, ids);
    assert_non_null(r);
    gt_op_info op = {.name = ids[0], .thread = ids[1]};
    int64_t seq;
    assert_int_equal(gt_op(r, &op, &seq), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(gt_op_arg(r, seq, 0, i == 7 ? 3 : i, 100 + i, 0), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_args"), 19);
    assert_int_equal(q_int(db, "SELECT tensor FROM op_args WHERE pos = 3"), 103);
    sqlite3_close(db);
}

/* The child: records steps forever, flushing every 100 and writing the
 * number of steps flushed to fd after each flush. */
static void killed_child(const char *path, int fd)
{
    gt_id ids[4];
    gt_recorder *r = start(path, 1, 100000, ids);
    if (!r)
        _exit(10);
    for (int64_t i = 1;; i++) {
        if (write_step(r, i, ids[0], ids[1], ids[2], ids[3]) != 0)
            _exit(11);
        if (i % 100 == 0) {
            if (gt_recorder_flush(r) != 0)
                _exit(12);
            if (write(fd, &i, sizeof i) != (ssize_t)sizeof i)
                _exit(13);
        }
    }
}

/* Every step up to `upto` (at least) is whole in the trace, and the steps
 * there form a prefix (a commit may end inside a step: its rows are then
 * split between two commits, as on the direct path). */
static int64_t check_steps(const char *path, int64_t upto)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    int64_t ops = q_int(db, "SELECT count(*) FROM ops");
    assert_true(ops >= upto);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops WHERE name IS NULL"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM tensors WHERE id % 2 = 1 OR"
                               " id / 2 > (SELECT count(*) FROM tensors)"),
                     0);
    int64_t args = q_int(db, "SELECT count(*) FROM op_args");
    assert_true(args >= 3 * (ops - 1) && args <= 3 * ops);
    int64_t tensors = q_int(db, "SELECT count(*) FROM tensors");
    assert_true(tensors == ops || tensors == ops + 1);
    int64_t saved = q_int(db, "SELECT count(*) FROM saved_tensors");
    assert_true(saved == ops || saved == ops - 1);
    /* the seqs of the logged events are gap-free up to the last */
    assert_int_equal(q_int(db,
                           "SELECT (SELECT count(*) FROM ops) + (SELECT count(*) FROM"
                           " tensors) + (SELECT count(*) FROM version_bumps) + (SELECT"
                           " count(*) FROM nodes) + (SELECT count(*) FROM"
                           " saved_tensors) + (SELECT count(*) FROM node_execs) + 1"
                           " - (SELECT max(seq) FROM (SELECT seq FROM ops UNION ALL"
                           " SELECT seq FROM tensors UNION ALL SELECT seq FROM"
                           " version_bumps UNION ALL SELECT seq FROM nodes UNION ALL"
                           " SELECT seq FROM saved_tensors UNION ALL SELECT seq FROM"
                           " node_execs UNION ALL SELECT 1))"),
                     0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM run WHERE status = 'running'"), 1);
    sqlite3_close(db);
    return ops;
}

/* The ops rows of each complete commit of the log at `log`, read with a
 * parser of the format written here from SCHEMA.md: ends[i] is the end
 * offset of the i-th commit marker, ops[i] the op rows up to it. Returns
 * the number of commits. */
static int log_commits(const char *log, int64_t *ends, int64_t *ops, int max)
{
    FILE *f = fopen(log, "rb");
    assert_non_null(f);
    unsigned char h[24];
    int64_t at = 16, nops = 0;
    int n = 0;
    assert_int_equal(fseek(f, 16, SEEK_SET), 0);
    while (n < max && fread(h, 1, 24, f) == 24) {
        uint16_t kind;
        uint32_t rows, len;
        memcpy(&kind, h + 12, 2);
        memcpy(&rows, h + 16, 4);
        memcpy(&len, h + 20, 4);
        at += 24 + len;
        if (kind == 0)
            nops += rows;
        if (kind == 0xffff)
            ends[n] = at, ops[n] = nops, n++;
        assert_int_equal(fseek(f, len, SEEK_CUR), 0);
    }
    fclose(f);
    return n;
}

/* Open through the inspector (as every gradtrace command and
 * gradtrace.open do) and close again. */
static void inspector_open(const char *path, int want)
{
    gt_trace *t = NULL;
    int rc = gt_trace_open(path, &t);
    if (rc != want)
        print_error("open %s: %d %s\n", path, rc, gt_trace_errmsg(t));
    assert_int_equal(rc, want);
    gt_trace_close(t);
}

static void test_kill9_log_folded_on_open(void **state)
{
    (void)state;
    const char *path = tpath("killed.db");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        killed_child(path, fds[1]);
        _exit(15);
    }
    close(fds[1]);
    int64_t flushed = 0, got;
    int reports = 0;
    while (reports < 20 && read(fds[0], &got, sizeof got) == (ssize_t)sizeof got)
        flushed = got, reports++;
    assert_int_equal(reports, 20);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    while (read(fds[0], &got, sizeof got) == (ssize_t)sizeof got)
        flushed = got;
    close(fds[0]);
    assert_true(exists(side(path, "-gtlog")));
    inspector_open(path, GT_OK);
    assert_false(exists(side(path, "-gtlog")));
    int64_t ops = check_steps(path, flushed);
    /* a second open has nothing more to fold */
    inspector_open(path, GT_OK);
    assert_int_equal(check_steps(path, flushed), ops);
}

/* A child that flushes `commits` commits of 100 steps, then leaves without
 * closing (as a killed writer would). */
static void abandon(const char *path, int commits)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gt_id ids[4];
        gt_recorder *r = start(path, 1, 100000, ids);
        if (!r)
            _exit(10);
        for (int64_t i = 1; i <= 100 * commits; i++) {
            if (write_step(r, i, ids[0], ids[1], ids[2], ids[3]) != 0)
                _exit(11);
            if (i % 100 == 0 && gt_recorder_flush(r) != 0)
                _exit(12);
        }
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_torn_tail_folds_whole_commits(void **state)
{
    (void)state;
    /* cut in the last commit's marker, in its blocks, in a block header,
     * far back, and exactly at a marker's end */
    static const int cut[] = {1, 20, 40, 3000, 33, 60000, 0};
    for (size_t k = 0; k < sizeof cut / sizeof cut[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "torn%zu.db", k);
        const char *path = tpath(name);
        abandon(path, 5);
        const char *log = side(path, "-gtlog");
        int64_t size = fsize(log), ends[64], ops[64];
        int n = log_commits(log, ends, ops, 64);
        assert_true(n >= 5);
        assert_int_equal(ends[n - 1], size);
        int64_t keep = size - cut[k], want = 0;
        for (int i = 0; i < n; i++)
            if (ends[i] <= keep)
                want = ops[i];
        assert_int_equal(truncate(log, keep), 0);
        inspector_open(path, GT_OK);
        assert_false(exists(log));
        assert_int_equal(check_steps(path, 0), want);
        if (cut[k] < 3000)
            assert_true(want >= 400);
    }
    /* a damaged byte inside the third commit: the first two are folded */
    const char *path = tpath("flipped.db");
    abandon(path, 5);
    const char *log = side(path, "-gtlog");
    FILE *f = fopen(log, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, fsize(log) * 5 / 10, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -1, SEEK_CUR), 0);
    fputc(c ^ 0x40, f);
    fclose(f);
    int64_t ends[64], ops[64], want = 0;
    int n = log_commits(log, ends, ops, 64);
    for (int i = 0; i < n; i++)
        if (ends[i] <= fsize(log) * 5 / 10)
            want = ops[i];
    inspector_open(path, GT_OK);
    assert_int_equal(check_steps(path, 0), want);
    assert_true(want >= 100 && want < 400);
}

static void test_live_log_read_through_copy(void **state)
{
    (void)state;
    const char *path = tpath("live.db");
    gt_id ids[4];
    gt_recorder *r = start(path, 1, 100000, ids);
    assert_non_null(r);
    for (int64_t i = 1; i <= 300; i++)
        assert_int_equal(write_step(r, i, ids[0], ids[1], ids[2], ids[3]), 0);
    assert_int_equal(gt_recorder_flush(r), 0);
    int64_t before = fsize(side(path, "-gtlog"));
    gt_trace *t = NULL;
    assert_int_equal(gt_trace_open(path, &t), GT_OK);
    assert_int_equal(q_int(gt_trace_db(t), "SELECT count(*) FROM ops"), 300);
    assert_int_equal(q_int(gt_trace_db(t), "SELECT count(*) FROM op_args"), 900);
    gt_trace_close(t);
    /* the recording's files are untouched and it goes on */
    assert_int_equal(fsize(side(path, "-gtlog")), before);
    assert_int_equal(write_step(r, 301, ids[0], ids[1], ids[2], ids[3]), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    assert_false(exists(side(path, "-gtlog")));
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 301);
    sqlite3_close(db);
}

/* A closed trace beside which a file named like its log is written. */
static const char *trace_with_log(const char *name, const void *log, size_t len)
{
    const char *path = tpath(name);
    gt_id ids[4];
    gt_recorder *r = start(path, 1, 1000, ids);
    assert_non_null(r);
    assert_int_equal(write_step(r, 1, ids[0], ids[1], ids[2], ids[3]), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    FILE *f = fopen(side(path, "-gtlog"), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(log, 1, len, f), len);
    fclose(f);
    return path;
}

static void test_bad_logs_one_line(void **state)
{
    (void)state;
    const char *path = trace_with_log("garbage.db", "hello, not a log at all\n", 24);
    gt_trace *t = NULL;
    assert_int_equal(gt_trace_open(path, &t), GT_ENOTTRACE);
    const char *msg = gt_trace_errmsg(t);
    assert_non_null(strstr(msg, "is not a gradtrace row log"));
    assert_non_null(strstr(msg, "-gtlog"));
    assert_null(strchr(msg, '\n'));
    gt_trace_close(t);
    assert_true(exists(side(path, "-gtlog"))); /* left for the user to judge */

    unsigned char newer[GT_ROWLOG_HEAD] = "GTROWLOG";
    newer[8] = 99;
    path = trace_with_log("newer.db", newer, sizeof newer);
    assert_int_equal(gt_trace_open(path, &t), GT_ENEWER);
    msg = gt_trace_errmsg(t);
    assert_non_null(strstr(msg, "format version 99, newer than this gradtrace"));
    assert_null(strchr(msg, '\n'));
    gt_trace_close(t);

    /* an empty log, or one cut inside its header: nothing to fold */
    path = trace_with_log("empty.db", "GTROW", 5);
    inspector_open(path, GT_OK);
    assert_false(exists(side(path, "-gtlog")));
    path = trace_with_log("empty2.db", "", 0);
    inspector_open(path, GT_OK);
    /* blocks of garbage after a good header: a torn tail, nothing folded */
    unsigned char junk[GT_ROWLOG_HEAD + 200];
    memcpy(junk, "GTROWLOG\1\0\0\0\0\0\0\0", GT_ROWLOG_HEAD);
    for (size_t i = GT_ROWLOG_HEAD; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 37);
    path = trace_with_log("junk.db", junk, sizeof junk);
    inspector_open(path, GT_OK);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 1);
    sqlite3_close(db);
}

/* A bad log under a long path (two 200-byte directories; SQLite opens no
 * path of over 512 bytes): the message names the log whole (it was cut at
 * 400 bytes inside the fold). */
static void test_bad_log_long_path(void **state)
{
    (void)state;
    char seg[201], name[1024];
    memset(seg, 'd', 200);
    seg[200] = '\0';
    snprintf(name, sizeof name, "%s", seg);
    assert_int_equal(mkdir(tpath(name), 0700), 0);
    snprintf(name, sizeof name, "%s/%s", seg, seg);
    assert_int_equal(mkdir(tpath(name), 0700), 0);
    snprintf(name, sizeof name, "%s/%s/garbage.db", seg, seg);
    const char *path = trace_with_log(name, "hello, not a log at all\n", 24);
    gt_trace *t = NULL;
    assert_int_equal(gt_trace_open(path, &t), GT_ENOTTRACE);
    const char *msg = gt_trace_errmsg(t);
    assert_true(strlen(path) > 400);
    assert_non_null(strstr(msg, side(path, "-gtlog is not a gradtrace row log")));
    assert_non_null(strstr(msg, "(move it away to read the trace without it)"));
    gt_trace_close(t);
}

/* gt_rowlog_fold reads one block at a time and stops at `limit`. */
static void test_fold_limit(void **state)
{
    (void)state;
    const char *path = tpath("limit.db");
    abandon(path, 3);
    const char *log = side(path, "-gtlog");
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    gt_rowlog_stats st;
    char err[256] = "";
    assert_int_equal(gt_rowlog_fold(db, log, fsize(log) * 2 / 3, &st, err, sizeof err),
                     GT_OK);
    int64_t ends[64], ops[64], want = 0, commits = 0;
    int n = log_commits(log, ends, ops, 64);
    for (int i = 0; i < n; i++)
        if (ends[i] <= fsize(log) * 2 / 3)
            want = ops[i], commits = i + 1;
    assert_int_equal(st.commits, commits);
    assert_int_equal(st.bytes, ends[commits - 1]);
    assert_int_equal(st.torn, 1);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), want);
    assert_true(st.rows >= 14 * want - 13 && st.rows <= 14 * want + 13);
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_folds_log_same_rows_one_file),
        cmocka_unit_test(test_duplicate_dropped_at_fold),
        cmocka_unit_test(test_kill9_log_folded_on_open),
        cmocka_unit_test(test_torn_tail_folds_whole_commits),
        cmocka_unit_test(test_live_log_read_through_copy),
        cmocka_unit_test(test_bad_logs_one_line),
        cmocka_unit_test(test_bad_log_long_path),
        cmocka_unit_test(test_fold_limit),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
