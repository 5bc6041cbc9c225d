/* Tests of recorder/recorder.c: every event kind round-trips through a
 * trace, seq ordering, run metadata, batching, closing, and the clear
 * errors of bad paths, existing files, caller mistakes, size caps and
 * forked handles. */
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
#include <time.h>
#include <unistd.h>

#define GT_TMPDIR_PREFIX "gt_test_recorder"
#include "tmpdir.h"
#include "sqlquery.h"

static gt_recorder *open_new(const char *name, const gt_recorder_options *o)
{
    char err[256] = "";
    gt_recorder *r = NULL;
    int rc = gt_recorder_open(tpath(name), o, err, sizeof(err), &r);
    if (rc != 0)
        print_error("open %s: %d %s\n", name, rc, err);
    assert_int_equal(rc, 0);
    assert_non_null(r);
    return r;
}

/* A new recording of `name` that has committed one string, `text`. */
static gt_recorder *open_with_string(const char *name, const char *text)
{
    gt_recorder *r = open_new(name, NULL);
    gt_id s;
    assert_int_equal(gt_intern_string(r, text, strlen(text), &s), 0);
    assert_int_equal(gt_recorder_flush(r), 0);
    return r;
}

static sqlite3 *db_open(const char *name)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(tpath(name), &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    return db;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- open / close ------------------------------------------------------ */

static void test_open_creates_schema_and_run(void **state)
{
    (void)state;
    gt_recorder *r = open_new("schema.db", NULL);
    assert_string_equal(gt_recorder_errmsg(r), "");
    assert_int_equal(gt_recorder_failed(r), 0);
    assert_int_equal(gt_recorder_seq(r), 0);

    /* while recording: WAL, user_version, the run row, the views */
    sqlite3 *db = db_open("schema.db");
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "wal");
    assert_int_equal(q_int(db, "PRAGMA user_version"), GT_SCHEMA_VERSION);
    assert_string_equal(q_text(db, "SELECT gradtrace_version FROM run"),
                        GT_VERSION_STRING);
    assert_int_equal(q_int(db, "SELECT schema_version FROM run"), GT_SCHEMA_VERSION);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "running");
    assert_int_equal(q_int(db, "SELECT end_ns IS NULL FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT pid FROM run"), (int64_t)getpid());
    int64_t now_ns = (int64_t)time(NULL) * 1000000000;
    int64_t start = q_int(db, "SELECT start_ns FROM run");
    assert_true(start > now_ns - 60 * 1000000000LL && start < now_ns + 60 * 1000000000LL);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'view'"
                               " AND name = 'op_log'"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM phases"), 3);
    assert_int_equal(q_int(db, "SELECT count(*) FROM roles"), 3);
    /* the inspector's indexes come only at close */
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                               " AND name = 'op_args_written'"),
                     0);
    sqlite3_close(db);

    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(r), 0);

    /* closed: one file, journal_mode=delete, indexes, end_ns */
    assert_false(file_exists(tpath("schema.db-wal")));
    assert_false(file_exists(tpath("schema.db-shm")));
    db = db_open("schema.db");
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                               " AND name = 'op_args_written'"),
                     1);
    assert_int_equal(q_int(db, "SELECT end_ns >= start_ns FROM run"), 1);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    assert_int_equal(q_int(db, "SELECT exit_code FROM run"), 0);
    sqlite3_close(db);
}

static void test_close_null_and_null_handle(void **state)
{
    (void)state;
    assert_int_equal(gt_recorder_close(NULL), 0);
    char msg[16] = "junk";
    assert_int_equal(gt_recorder_close_msg(NULL, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    gt_op_info op = {.name = 1, .thread = 1};
    int64_t seq = -7;
    assert_int_equal(gt_op(NULL, &op, &seq), GT_EINVAL);
    assert_int_equal(seq, -7);
    assert_int_equal(gt_recorder_flush(NULL), GT_EINVAL);
    assert_int_equal(gt_recorder_failed(NULL), 0);
    assert_int_equal(gt_recorder_seq(NULL), 0);
    assert_non_null(gt_recorder_errmsg(NULL));
}

static void test_open_existing_file(void **state)
{
    (void)state;
    FILE *f = fopen(tpath("exists.db"), "w");
    assert_non_null(f);
    fputs("not a trace", f);
    fclose(f);

    char err[256] = "";
    gt_recorder *r = (gt_recorder *)0x1;
    int rc = gt_recorder_open(tpath("exists.db"), NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EEXIST);
    assert_ptr_equal(r, (gt_recorder *)0x1); /* untouched on failure */
    assert_non_null(strstr(err, "cannot create trace"));
    assert_non_null(strstr(err, "exists.db: file exists"));
    /* the existing file is left alone */
    struct stat sb;
    assert_int_equal(stat(tpath("exists.db"), &sb), 0);
    assert_int_equal(sb.st_size, 11);

    /* overwrite replaces it with a trace */
    gt_recorder_options o = {.overwrite = 1};
    r = open_new("exists.db", &o);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("exists.db");
    assert_int_equal(q_int(db, "PRAGMA user_version"), GT_SCHEMA_VERSION);
    sqlite3_close(db);

    /* a directory is never replaced */
    rc = gt_recorder_open(tmpdir, &o, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EIO);
    assert_non_null(strstr(err, "is a directory"));
}

/* A child process that records into `name` and holds it open until told:
 * returns its pid; it writes one byte to *ready once recording and exits
 * (closing the trace) when a byte arrives on *go, or is killed. */
static pid_t live_recorder(const char *name, int *ready, int *go)
{
    int p1[2], p2[2];
    assert_int_equal(pipe(p1), 0);
    assert_int_equal(pipe(p2), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p1[0]);
        close(p2[1]);
        char err[256], c = 'r';
        gt_recorder *r = NULL;
        gt_id s;
        if (gt_recorder_open(tpath(name), NULL, err, sizeof(err), &r) != 0 ||
            gt_intern_string(r, "live", 4, &s) != 0 || gt_recorder_flush(r) != 0)
            _exit(1);
        if (write(p1[1], &c, 1) != 1 || read(p2[0], &c, 1) != 1)
            _exit(2);
        _exit(gt_recorder_close(r) == 0 ? 0 : 3);
    }
    close(p1[1]);
    close(p2[0]);
    *ready = p1[0];
    *go = p2[1];
    char c;
    assert_int_equal(read(*ready, &c, 1), 1);
    return pid;
}

/* overwrite refuses a trace that another process is still recording (it
 * would go on writing to an unlinked file and its recording would be
 * lost), and replaces it once that recording closed or died */
static void test_overwrite_refuses_live_trace(void **state)
{
    (void)state;
    int ready, go, status;
    char err[256];
    gt_recorder *r = NULL;
    gt_recorder_options o = {.overwrite = 1};

    pid_t pid = live_recorder("live.db", &ready, &go);
    int rc = gt_recorder_open(tpath("live.db"), &o, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EEXIST);
    assert_null(r);
    assert_non_null(strstr(err, "live.db: another recording is writing it"));
    assert_int_equal(write(go, "g", 1), 1);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* its recording was not disturbed */
    close(ready);
    close(go);
    sqlite3 *db = db_open("live.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'live'"), 1);
    sqlite3_close(db);
    r = open_new("live.db", &o); /* closed: replaced */
    assert_int_equal(gt_recorder_close(r), 0);

    /* a recording killed with SIGKILL holds nothing */
    pid = live_recorder("dead.db", &ready, &go);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(ready);
    close(go);
    r = open_new("dead.db", &o);
    assert_int_equal(gt_recorder_close(r), 0);
}

static void test_open_bad_paths(void **state)
{
    (void)state;
    char err[256];
    gt_recorder *r = NULL;

    /* a directory that does not exist */
    int rc = gt_recorder_open(tpath("no/such/dir/t.db"), NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EIO);
    assert_null(r);
    /* library messages carry no program name: the command adds it */
    assert_int_equal(strncmp(err, "cannot create trace ", 20), 0);
    assert_null(strstr(err, "gradtrace:"));
    assert_non_null(strstr(err, "no such file or directory"));

    /* a path under a regular file (root ignores directory permissions, so
     * this is how an unwritable place is made here) */
    FILE *f = fopen(tpath("plain"), "w");
    assert_non_null(f);
    fclose(f);
    rc = gt_recorder_open(tpath("plain/t.db"), NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EIO);
    assert_non_null(strstr(err, "not a directory"));

    /* /proc refuses new files even to root */
    rc = gt_recorder_open("/proc/gt_test_trace.db", NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EIO);
    assert_non_null(strstr(err, "cannot create trace /proc/gt_test_trace.db: "));
    assert_null(r);

    /* no path */
    rc = gt_recorder_open(NULL, NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EINVAL);
    rc = gt_recorder_open("", NULL, err, sizeof(err), &r);
    assert_int_equal(rc, GT_EINVAL);
    assert_non_null(strstr(err, "no path"));
    /* errbuf may be NULL */
    rc = gt_recorder_open(tpath("no/such/dir/t.db"), NULL, NULL, 0, &r);
    assert_int_equal(rc, GT_EIO);
    assert_null(r);
}

static void test_stale_wal_is_not_replayed(void **state)
{
    (void)state;
    /* record a trace, kill-style: copy its -wal aside while open */
    gt_recorder *r = open_with_string("stale_src.db", "stale");
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", tpath("stale_src.db-wal"),
             tpath("stale.db-wal"));
    assert_int_equal(system(cmd), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    /* a new trace of that name must not pick up the stale log */
    r = open_new("stale.db", NULL);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("stale.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings"), 0);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
}

/* ---- round trip -------------------------------------------------------- */

static void test_roundtrip_every_event_kind(void **state)
{
    (void)state;
    gt_recorder *r = open_new("roundtrip.db", NULL);
    gt_run_info info = {
        .engine = "pytorch",
        .engine_version = "2.13.0+cpu",
        .python_version = "3.11.7",
        .argv_json = "[\"train.py\", \"--lr\", \"0.1\"]",
        .cwd = "/home/u",
        .host = "box",
        .options_json = "{\"stacks\": true}",
        .pid = 4242,
        .rank = 3,
    };
    assert_int_equal(gt_run_set(r, &info), 0);

    gt_id thread, name_mul, dtype, dev, slot_self, slot_other, api, frame, frame2;
    gt_id stack1, stack2;
    assert_int_equal(gt_intern_thread(r, 777, "MainThread", &thread), 0);
    assert_int_equal(gt_intern_string(r, "aten::mul_.Tensor", 17, &name_mul), 0);
    assert_int_equal(gt_intern_string(r, "float32", 7, &dtype), 0);
    assert_int_equal(gt_intern_string(r, "cpu", 3, &dev), 0);
    assert_int_equal(gt_intern_string(r, "self", 4, &slot_self), 0);
    assert_int_equal(gt_intern_string(r, "other", 5, &slot_other), 0);
    assert_int_equal(gt_intern_string(r, "Tensor.backward", 15, &api), 0);
    assert_int_equal(
        gt_intern_frame(r, "train.py", 12, "<module>", "loss = f(x)", &frame), 0);
    assert_int_equal(gt_intern_frame(r, "train.py", 5, "f", "x.mul_(w)", &frame2), 0);
    assert_int_equal(gt_intern_stack(r, 0, frame, frame, &stack1), 0);
    assert_int_equal(gt_intern_stack(r, stack1, frame2, frame2, &stack2), 0);

    assert_int_equal(gt_storage(r, 50, 24, dev), 0);
    int64_t shape[2] = {2, 3}, strides[2] = {3, 1};
    gt_tensor_info t1 = {.id = 1,
                         .storage = 50,
                         .dtype = dtype,
                         .ndim = 2,
                         .shape = shape,
                         .strides = strides,
                         .requires_grad = 1,
                         .is_leaf = 1};
    assert_int_equal(gt_tensor(r, &t1), 0); /* seq 1 */
    int64_t vshape[1] = {6}, vstrides[1] = {1};
    gt_tensor_info t2 = {.id = 2,
                         .storage = 50,
                         .dtype = dtype,
                         .ndim = 1,
                         .shape = vshape,
                         .strides = vstrides,
                         .storage_offset = 0,
                         .requires_grad = 1,
                         .alias_of = 1,
                         .shares_version = 1,
                         .version_counter = 1};
    assert_int_equal(gt_tensor(r, &t2), 0); /* seq 2 */
    gt_tensor_info t3 = {.id = 3,
                         .dtype = dtype,
                         .ndim = 0,
                         .created_by = 3,
                         .alias_of = 1,
                         .shares_version = 0};
    assert_int_equal(gt_tensor(r, &t3), 0); /* seq 3, a .data-like alias */

    gt_op_info op = {.name = name_mul,
                     .phase = GT_PHASE_FORWARD,
                     .grad_mode = 1,
                     .thread = thread,
                     .stack = stack2};
    int64_t seq = 0;
    assert_int_equal(gt_op(r, &op, &seq), 0);
    assert_int_equal(seq, 4);
    assert_int_equal(gt_op_arg(r, seq, GT_ROLE_INPUT, 0, 1, 0), 0);
    assert_int_equal(gt_op_arg(r, seq, GT_ROLE_INPUT, 1, 3, 0), 0);
    assert_int_equal(gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, 1, 0), 0);
    int64_t bseq = 0;
    assert_int_equal(gt_version_bump(r, seq, 1, 1, 0, &bseq), 0);
    assert_int_equal(bseq, 5);
    assert_int_equal(gt_version_bump(r, 0, 2, 3, 1, NULL), 0); /* seq 6 */

    gt_node_info n = {.id = 100,
                      .name = name_mul,
                      .op = seq,
                      .sequence_nr = 9,
                      .thread = thread,
                      .variable = 0};
    assert_int_equal(gt_node(r, &n), 0); /* seq 7 */
    gt_node_info acc = {
        .id = 101, .name = dtype, .op = 0, .sequence_nr = -1, .variable = 1};
    assert_int_equal(gt_node(r, &acc), 0); /* seq 8 */
    assert_int_equal(gt_edge(r, 100, 0, 101, 0), 0);
    assert_int_equal(gt_edge(r, 100, 1, 0, 0), 0);
    assert_int_equal(gt_node_output(r, 100, 0, 1), 0);
    int64_t sseq = 0;
    assert_int_equal(gt_saved_tensor(r, 100, slot_self, 1, 0, 0, 24, &sseq), 0);
    assert_int_equal(sseq, 9);
    assert_int_equal(gt_saved_tensor(r, 100, slot_other, 0, 2, 1, -1, NULL), 0); /* 10 */

    gt_backward_info b = {.api = api,
                          .retain_graph = 1,
                          .create_graph = 0,
                          .thread = thread,
                          .stack = stack1};
    gt_id bw = 0;
    assert_int_equal(gt_backward_begin(r, &b, &bw), 0); /* seq 11 */
    assert_int_equal(bw, 1);
    assert_int_equal(gt_backward_root(r, bw, 0, 1, 100), 0);
    assert_int_equal(gt_backward_root(r, bw, 1, 0, 0), 0);
    assert_int_equal(gt_backward_input(r, bw, 0, 1), 0);
    assert_int_equal(gt_node_exec(r, bw, 100), 0); /* seq 12 */
    int64_t eseq = 0;
    assert_int_equal(
        gt_error(r, "RuntimeError", "one of the variables needed ...", stack2, bw, &eseq),
        0);
    assert_int_equal(eseq, 13);
    assert_int_equal(gt_backward_end(r, bw, 0), 0); /* seq 14 */
    assert_int_equal(gt_name(r, 4, 1, "w"), 0);
    assert_int_equal(gt_name(r, 4, 1, "w"), 0); /* duplicate: ignored */
    assert_int_equal(gt_name(r, 4, 2, "w_view"), 0);
    assert_int_equal(gt_error(r, "ValueError", NULL, 0, 0, NULL), 0); /* seq 15 */
    assert_int_equal(gt_recorder_seq(r), 15);
    assert_int_equal(gt_run_end(r, GT_RUN_EXCEPTION, 1, 0), 0);
    assert_int_equal(gt_recorder_close(r), 0);

    sqlite3 *db = db_open("roundtrip.db");
    /* run */
    assert_string_equal(q_text(db,
                               "SELECT engine || '|' || engine_version || '|' ||"
                               " python_version || '|' || cwd || '|' || host FROM run"),
                        "pytorch|2.13.0+cpu|3.11.7|/home/u|box");
    assert_string_equal(q_text(db, "SELECT argv FROM run"),
                        "[\"train.py\",\"--lr\",\"0.1\"]");
    assert_string_equal(q_text(db, "SELECT argv ->> 2 FROM run"), "0.1");
    assert_string_equal(q_text(db, "SELECT options ->> '$.stacks' FROM run"), "1");
    assert_int_equal(q_int(db, "SELECT pid FROM run"), 4242);
    assert_int_equal(q_int(db, "SELECT rank FROM run"), 3);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "exception");
    assert_int_equal(q_int(db, "SELECT exit_code FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT signal FROM run"), 0);
    /* threads, frames, stacks */
    assert_string_equal(q_text(db, "SELECT os_tid || ':' || name FROM threads"),
                        "777:MainThread");
    assert_string_equal(q_text(db,
                               "SELECT group_concat(x, ';') FROM (SELECT sf.text || ':'"
                               " || f.line || ':' || sfn.text || ':' || sc.text AS x"
                               " FROM frames f JOIN strings sf ON sf.id = f.file"
                               " JOIN strings sfn ON sfn.id = f.function"
                               " JOIN strings sc ON sc.id = f.code ORDER BY f.id)"),
                        "train.py:12:<module>:loss = f(x);train.py:5:f:x.mul_(w)");
    assert_int_equal(q_int(db, "SELECT count(*) FROM stacks"), 2);
    assert_int_equal(q_int(db, "SELECT parent IS NULL FROM stacks WHERE id = 1"), 1);
    assert_int_equal(q_int(db, "SELECT parent FROM stacks WHERE id = 2"), 1);
    assert_int_equal(q_int(db, "SELECT frame FROM stacks WHERE id = 2"), frame2);
    assert_int_equal(q_int(db, "SELECT user_frame FROM stacks WHERE id = 2"), frame2);
    /* storages, tensors */
    assert_string_equal(
        q_text(db, "SELECT id || ':' || nbytes || ':' || device FROM storages"),
        "50:24:3");
    assert_string_equal(q_text(db, "SELECT shape || strides FROM tensors WHERE id = 1"),
                        "[2,3][3,1]");
    assert_int_equal(
        q_int(db, "SELECT json_array_length(shape) FROM tensors WHERE id = 1"), 2);
    assert_string_equal(q_text(db,
                               "SELECT seq || ':' || storage || ':' || dtype || ':' ||"
                               " storage_offset || ':' || requires_grad || ':' || is_leaf"
                               " || ':' || coalesce(created_by, 'N') || ':' ||"
                               " coalesce(alias_of, 'N') || ':' || shares_version || ':'"
                               " || version_counter FROM tensors WHERE id = 1"),
                        "1:50:2:0:1:1:N:N:0:1");
    assert_string_equal(q_text(db,
                               "SELECT seq || ':' || shape || ':' || alias_of || ':' ||"
                               " shares_version || ':' || version_counter"
                               " FROM tensors WHERE id = 2"),
                        "2:[6]:1:1:1");
    assert_string_equal(q_text(db,
                               "SELECT seq || ':' || shape || strides || ':' ||"
                               " coalesce(storage, 'N') || ':' || created_by || ':' ||"
                               " alias_of || ':' || shares_version || ':' ||"
                               " version_counter FROM tensors WHERE id = 3"),
                        "3:[][]:N:3:1:0:3");
    /* ops, op_args */
    assert_string_equal(q_text(db,
                               "SELECT seq || ':' || name || ':' || phase || ':' ||"
                               " grad_mode || ':' || thread || ':' || stack FROM ops"),
                        "4:1:0:1:1:2");
    assert_string_equal(q_text(db,
                               "SELECT group_concat(op || ':' || role || ':' || pos ||"
                               " ':' || tensor || ':' || version, ';') FROM op_args"),
                        "4:0:0:1:0;4:0:1:3:0;4:2:0:1:0");
    /* version bumps */
    assert_string_equal(q_text(db,
                               "SELECT group_concat(seq || ':' || coalesce(op, 'N') ||"
                               " ':' || tensor || ':' || version || ':' || observed, ';')"
                               " FROM version_bumps"),
                        "5:4:1:1:0;6:N:2:3:1");
    /* nodes, edges, outputs, saved tensors */
    assert_string_equal(q_text(db,
                               "SELECT group_concat(id || ':' || seq || ':' || name ||"
                               " ':' || coalesce(op, 'N') || ':' ||"
                               " coalesce(sequence_nr, 'N') || ':' ||"
                               " coalesce(thread, 'N') || ':' || coalesce(variable, 'N'),"
                               " ';') FROM nodes"),
                        "100:7:1:4:9:1:N;101:8:2:N:N:N:1");
    assert_string_equal(q_text(db,
                               "SELECT group_concat(node || ':' || pos || ':' ||"
                               " coalesce(next, 'N') || ':' || coalesce(input_nr, 'N'),"
                               " ';') FROM edges"),
                        "100:0:101:0;100:1:N:N");
    assert_string_equal(q_text(db, "SELECT node || ':' || output_nr || ':' || tensor"
                                   " FROM node_outputs"),
                        "100:0:1");
    assert_string_equal(q_text(db,
                               "SELECT group_concat(seq || ':' || node || ':' || slot ||"
                               " ':' || coalesce(tensor, 'N') || ':' || version || ':' ||"
                               " is_output || ':' || coalesce(nbytes, 'N'), ';')"
                               " FROM saved_tensors"),
                        "9:100:4:1:0:0:24;10:100:5:N:2:1:N");
    /* backward */
    assert_string_equal(q_text(db,
                               "SELECT id || ':' || seq || ':' || end_seq || ':' || api"
                               " || ':' || retain_graph || ':' || create_graph || ':' ||"
                               " thread || ':' || stack || ':' || status"
                               " FROM backward_calls"),
                        "1:11:14:6:1:0:1:1:error");
    assert_string_equal(
        q_text(db, "SELECT group_concat(backward || ':' || pos || ':' ||"
                   " coalesce(tensor, 'N') || ':' || coalesce(node, 'N'), ';')"
                   " FROM backward_roots"),
        "1:0:1:100;1:1:N:N");
    assert_string_equal(q_text(db, "SELECT backward || ':' || pos || ':' || tensor"
                                   " FROM backward_inputs"),
                        "1:0:1");
    assert_string_equal(q_text(db, "SELECT seq || ':' || backward || ':' || node"
                                   " FROM node_execs"),
                        "12:1:100");
    /* errors, names */
    assert_string_equal(q_text(db, "SELECT group_concat(e.seq || ':' || s.text || ':' ||"
                                   " e.message || ':' || coalesce(e.stack, 'N') || ':' ||"
                                   " coalesce(e.backward, 'N'), ';') FROM errors e"
                                   " JOIN strings s ON s.id = e.type"),
                        "13:RuntimeError:one of the variables needed ...:2:1;"
                        "15:ValueError::N:N");
    assert_string_equal(q_text(db,
                               "SELECT group_concat(n.seq || ':' || n.tensor || ':' ||"
                               " s.text, ';') FROM names n JOIN strings s"
                               " ON s.id = n.name"),
                        "4:1:w;4:2:w_view");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    sqlite3_close(db);
}

static void test_seq_strictly_increasing(void **state)
{
    (void)state;
    gt_recorder *r = open_new("seq.db", NULL);
    gt_id name, th, slot, api;
    assert_int_equal(gt_intern_string(r, "aten::add", 9, &name), 0);
    assert_int_equal(gt_intern_string(r, "self", 4, &slot), 0);
    assert_int_equal(gt_intern_string(r, "Tensor.backward", 15, &api), 0);
    assert_int_equal(gt_intern_thread(r, 1, NULL, &th), 0);
    int64_t last = 0;
    for (int i = 1; i <= 50; i++) {
        int64_t s = 0;
        gt_op_info op = {.name = name, .thread = th};
        assert_int_equal(gt_op(r, &op, &s), 0);
        assert_true(s > last);
        last = s;
        gt_tensor_info t = {.id = i, .dtype = name, .created_by = s};
        assert_int_equal(gt_tensor(r, &t), 0);
        assert_int_equal(gt_version_bump(r, s, i, 1, 0, &s), 0);
        assert_true(s > last);
        last = s;
        gt_node_info n = {.id = i, .name = name, .op = s, .sequence_nr = i};
        assert_int_equal(gt_node(r, &n), 0);
        assert_int_equal(gt_saved_tensor(r, i, slot, i, 0, 0, 4, &s), 0);
        assert_true(s > last);
        last = s;
        if (i % 10 == 0) {
            gt_backward_info b = {.api = api};
            gt_id bw;
            assert_int_equal(gt_backward_begin(r, &b, &bw), 0);
            assert_int_equal(gt_node_exec(r, bw, i), 0);
            assert_int_equal(gt_error(r, "E", "m", 0, bw, &s), 0);
            assert_true(s > last);
            last = s;
            assert_int_equal(gt_backward_end(r, bw, 1), 0);
        }
    }
    assert_int_equal(gt_recorder_seq(r), 50 * 5 + 5 * 4);
    assert_int_equal(gt_recorder_close(r), 0);

    sqlite3 *db = db_open("seq.db");
    const char *all =
        "SELECT seq FROM ops UNION ALL SELECT seq FROM tensors"
        " UNION ALL SELECT seq FROM version_bumps UNION ALL SELECT seq FROM nodes"
        " UNION ALL SELECT seq FROM saved_tensors"
        " UNION ALL SELECT seq FROM backward_calls"
        " UNION ALL SELECT end_seq FROM backward_calls"
        " UNION ALL SELECT seq FROM node_execs UNION ALL SELECT seq FROM errors";
    char sql[1200];
    /* every seq 1..N is used exactly once across event kinds */
    snprintf(sql, sizeof(sql),
             "SELECT count(*) || ':' || count(DISTINCT seq) || ':' ||"
             " min(seq) || ':' || max(seq) FROM (%s)",
             all);
    assert_string_equal(q_text(db, sql), "270:270:1:270");
    /* within the op loop the kinds come in call order */
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops o JOIN tensors t"
                               " ON t.created_by = o.seq WHERE t.seq <> o.seq + 1"),
                     0);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM backward_calls WHERE end_seq <= seq"), 0);
    sqlite3_close(db);
}

/* ---- caller mistakes leave the handle working -------------------------- */

static void test_invalid_arguments(void **state)
{
    (void)state;
    gt_recorder *r = open_new("inval.db", NULL);
    gt_id s = 0, out = -5;
    int64_t seq = -5;
    assert_int_equal(gt_intern_string(r, "x", 1, &s), 0);
    gt_op_info bad_op = {.name = 0, .thread = 1};
    assert_int_equal(gt_op(r, &bad_op, &seq), GT_EINVAL);
    assert_int_equal(seq, -5);
    assert_int_equal(gt_op(r, NULL, &seq), GT_EINVAL);
    assert_int_equal(gt_op_arg(r, 1, 7, 0, 1, 0), GT_EINVAL); /* role */
    assert_int_equal(gt_op_arg(r, 1, 0, 0, 0, 0), GT_EINVAL); /* tensor 0 */
    assert_int_equal(gt_intern_stack(r, 0, 0, 0, &out), GT_EINVAL);
    assert_int_equal(out, -5);
    assert_int_equal(gt_intern_frame(r, NULL, 1, "f", NULL, &out), GT_EINVAL);
    assert_int_equal(gt_intern_string(r, NULL, 3, &out), GT_EINVAL);
    gt_tensor_info t = {.id = 0, .dtype = s};
    assert_int_equal(gt_tensor(r, &t), GT_EINVAL);
    gt_tensor_info t_noshape = {.id = 1, .dtype = s, .ndim = 2};
    assert_int_equal(gt_tensor(r, &t_noshape), GT_EINVAL);
    assert_int_equal(gt_run_end(r, 9, 0, 0), GT_EINVAL);
    assert_int_equal(gt_backward_end(r, 1, 1), GT_EINVAL); /* no such call */
    assert_non_null(strstr(gt_recorder_errmsg(r), "no backward call 1"));

    /* a duplicate tensor id: GT_EINVAL with the constraint in the message,
     * from the call that writes its group (here the flush) */
    gt_tensor_info t1 = {.id = 1, .dtype = s};
    assert_int_equal(gt_tensor(r, &t1), 0);
    assert_int_equal(gt_tensor(r, &t1), 0);
    assert_int_equal(gt_recorder_flush(r), GT_EINVAL);
    assert_non_null(
        strstr(gt_recorder_errmsg(r), "UNIQUE constraint failed: tensors.id"));
    assert_int_equal(gt_recorder_failed(r), 0);
    /* bad JSON in run metadata */
    gt_run_info info = {.argv_json = "[not json", .rank = -1};
    assert_int_equal(gt_run_set(r, &info), GT_EINVAL);
    assert_non_null(strstr(gt_recorder_errmsg(r), "malformed JSON"));
    /* a second storage with the same id is ignored, the first stays */
    assert_int_equal(gt_storage(r, 9, 100, s), 0);
    assert_int_equal(gt_storage(r, 9, 200, s), 0);

    /* a duplicate op argument (op, role, pos): reported, perhaps by a later
     * call or the flush (op_args are written in groups), and dropped; the
     * others are kept */
    gt_op_info op = {.name = s, .thread = 1};
    int64_t opseq;
    assert_int_equal(gt_op(r, &op, &opseq), 0);
    int einval = 0;
    for (int i = 0; i < 20; i++) {
        int rc = gt_op_arg(r, opseq, GT_ROLE_INPUT, i == 7 ? 3 : i, 100 + i, 0);
        if (rc == GT_EINVAL)
            einval++;
        else
            assert_int_equal(rc, 0);
    }
    int rc = gt_recorder_flush(r);
    if (rc == GT_EINVAL)
        einval++;
    else
        assert_int_equal(rc, 0);
    assert_int_equal(einval, 1);
    assert_non_null(strstr(gt_recorder_errmsg(r), "UNIQUE constraint failed: op_args"));
    assert_int_equal(gt_recorder_failed(r), 0);

    /* still recording */
    assert_int_equal(gt_op(r, &op, &seq), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("inval.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM tensors"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 2);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_args"), 19);
    assert_int_equal(q_int(db, "SELECT tensor FROM op_args WHERE pos = 3"), 103);
    assert_int_equal(q_int(db, "SELECT sum(tensor) FROM op_args"), 19 * 100 + 190 - 7);
    assert_int_equal(q_int(db, "SELECT nbytes FROM storages WHERE id = 9"), 100);
    assert_int_equal(q_int(db, "SELECT rank IS NULL FROM run"), 1);
    sqlite3_close(db);
}

static void test_run_set_keeps_earlier_fields(void **state)
{
    (void)state;
    gt_recorder *r = open_new("runset.db", NULL);
    gt_run_info a = {.engine = "pytorch", .host = "h1", .pid = 10, .rank = -1};
    gt_run_info b = {.engine_version = "2.13.0", .rank = 0};
    assert_int_equal(gt_run_set(r, &a), 0);
    assert_int_equal(gt_run_set(r, &b), 0);
    assert_int_equal(gt_run_end(r, GT_RUN_SIGNAL, -1, 15), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("runset.db");
    assert_string_equal(q_text(db,
                               "SELECT engine || ':' || engine_version || ':' || host ||"
                               " ':' || pid || ':' || rank || ':' || status || ':' ||"
                               " exit_code || ':' || signal FROM run"),
                        "pytorch:2.13.0:h1:10:0:signal:-1:15");
    sqlite3_close(db);
}

/* v3: a distributed run's rank, local rank, world size, backend and launcher
 * run id; the backend and run id are kept by a later call without them,
 * world_size 0 leaves local_rank NULL. */
static void test_run_set_distributed(void **state)
{
    (void)state;
    gt_recorder *r = open_new("rundist.db", NULL);
    gt_run_info a = {
        .rank = 3, .world_size = 4, .local_rank = 1, .launcher_run_id = "job-7"};
    gt_run_info b = {.rank = 3, .world_size = 4, .local_rank = 1, .backend = "gloo"};
    assert_int_equal(gt_run_set(r, &a), 0);
    assert_int_equal(gt_run_set(r, &b), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("rundist.db");
    assert_string_equal(q_text(db,
                               "SELECT rank || ':' || local_rank || ':' || world_size ||"
                               " ':' || backend || ':' || launcher_run_id FROM run"),
                        "3:1:4:gloo:job-7");
    sqlite3_close(db);

    r = open_new("runsolo.db", NULL);
    gt_run_info c = {.rank = -1, .local_rank = 0};
    assert_int_equal(gt_run_set(r, &c), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    db = db_open("runsolo.db");
    assert_int_equal(q_int(db, "SELECT (rank IS NULL) + (local_rank IS NULL) +"
                               " (world_size IS NULL) + (backend IS NULL) +"
                               " (launcher_run_id IS NULL) FROM run"),
                     5);
    sqlite3_close(db);
}

/* ---- batching ---------------------------------------------------------- */

static void test_batch_events_boundary(void **state)
{
    (void)state;
    gt_recorder_options o = {.batch_events = 10, .batch_ms = 600000};
    gt_recorder *r = open_new("batch.db", &o);
    gt_id name;
    sqlite3 *db = db_open("batch.db");
    /* the string row starts batch 1 */
    assert_int_equal(gt_intern_string(r, "op", 2, &name), 0);
    for (int i = 0; i < 24; i++) {
        gt_op_info op = {.name = name, .thread = 1};
        int64_t seq;
        assert_int_equal(gt_op(r, &op, &seq), 0);
    }
    /* 25 rows written: two batches of 10 committed, 5 pending */
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 19);
    assert_int_equal(gt_recorder_flush(r), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 24);
    assert_int_equal(gt_recorder_flush(r), 0); /* nothing pending: no-op */
    sqlite3_close(db);
    assert_int_equal(gt_recorder_close(r), 0);
}

/* With the default batch_events the first batches are small (1000 rows,
 * then 2000, 4000 ...), so an early end loses little. */
static void test_first_batches_ramp_up(void **state)
{
    (void)state;
    gt_recorder_options o = {.batch_ms = 600000};
    gt_recorder *r = open_new("ramp.db", &o);
    sqlite3 *db = db_open("ramp.db");
    gt_id name;
    assert_int_equal(gt_intern_string(r, "op", 2, &name), 0); /* row 1 */
    gt_op_info op = {.name = name, .thread = 1};
    int64_t seq;
    int64_t seen[4];
    int k = 0;
    for (int rows = 2; rows <= 7001; rows++) {
        assert_int_equal(gt_op(r, &op, &seq), 0);
        if (rows == 999 || rows == 1000 || rows == 2999 || rows == 3000)
            seen[k++] = q_int(db, "SELECT count(*) FROM ops");
    }
    assert_int_equal(seen[0], 0);   /* 999 rows: nothing committed yet */
    assert_int_equal(seen[1], 999); /* row 1000 closed the first batch */
    assert_int_equal(seen[2], 999); /* the second holds 2000 rows */
    assert_int_equal(seen[3], 2999);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 6999); /* then 4000 */
    sqlite3_close(db);
    assert_int_equal(gt_recorder_close(r), 0);
}

static void test_batch_ms_boundary(void **state)
{
    (void)state;
    gt_recorder_options o = {.batch_events = 1000000, .batch_ms = 5};
    gt_recorder *r = open_new("batchms.db", &o);
    gt_id name;
    assert_int_equal(gt_intern_string(r, "op", 2, &name), 0);
    gt_op_info op = {.name = name, .thread = 1};
    int64_t seq;
    assert_int_equal(gt_op(r, &op, &seq), 0); /* op A */
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    /* op B: either A's own call closed a batch older than 5 ms, or the batch
     * holding A is now 20 ms old and B's call commits it. Both ways A is
     * committed, however slow the machine (a sanitizer build, a loaded
     * CI box) — the batch count (1,000,000) alone would commit nothing. */
    assert_int_equal(gt_op(r, &op, &seq), 0);
    sqlite3 *db = db_open("batchms.db");
    assert_true(q_int(db, "SELECT count(*) FROM ops") >= 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings"), 1);
    sqlite3_close(db);
    assert_int_equal(gt_recorder_close(r), 0);
}

/* ---- failure states ---------------------------------------------------- */

static void test_max_bytes_stops_recording(void **state)
{
    (void)state;
    gt_recorder_options o = {.batch_events = 100, .max_bytes = 256 * 1024};
    gt_recorder *r = open_new("cap.db", &o);
    gt_id name;
    assert_int_equal(gt_intern_string(r, "aten::something_long_enough", 27, &name), 0);
    int rc = 0;
    long i;
    int64_t seq = 0;
    for (i = 0; i < 1000000 && rc == 0; i++) {
        gt_op_info op = {.name = name, .thread = 1};
        rc = gt_op(r, &op, &seq);
        if (rc == 0)
            rc = gt_op_arg(r, seq, 0, 0, i + 1, 0);
    }
    assert_int_equal(rc, GT_EFULL);
    assert_true(i > 1000); /* it did record a while */
    assert_int_equal(gt_recorder_failed(r), 1);
    assert_non_null(strstr(gt_recorder_errmsg(r),
                           "recording stopped: trace reached its size"
                           " cap"));
    /* later calls fail without touching the file */
    gt_op_info op = {.name = name, .thread = 1};
    int64_t before = gt_recorder_seq(r);
    assert_int_equal(gt_op(r, &op, &seq), GT_EFAILED);
    gt_id id;
    assert_int_equal(gt_intern_string(r, "new", 3, &id), GT_EFAILED);
    assert_int_equal(gt_recorder_flush(r), GT_EFAILED);
    assert_int_equal(gt_recorder_seq(r), before);
    assert_non_null(strstr(gt_recorder_errmsg(r), "size cap"));

    /* the run row says where it stopped, at once (a kill now keeps it) */
    sqlite3 *db = db_open("cap.db");
    int64_t ops = q_int(db, "SELECT count(*) FROM ops");
    assert_true(ops > 1000 && ops <= before);
    assert_int_equal(q_int(db, "SELECT max(seq) FROM ops"), ops);
    assert_int_equal(q_int(db, "SELECT stopped_seq FROM run"), ops);
    /* the batch that would have crossed the cap was rolled back whole */
    assert_true(q_int(db, "SELECT max(op) FROM op_args") <= ops);
    assert_int_equal(q_int(db, "SELECT stopped_reason GLOB 'size cap: [0-9]* bytes > "
                               "max_bytes 262144' FROM run"),
                     1);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "running");
    sqlite3_close(db);

    /* the file is sound: the run's end, the indexes and the close are
     * still written; close returns the cause */
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "x";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof(msg)), GT_EFULL);
    assert_non_null(strstr(msg, "recording stopped: trace reached its size cap"));
    assert_false(file_exists(tpath("cap.db-wal")));
    db = db_open("cap.db");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), ops);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    assert_int_equal(q_int(db, "SELECT end_ns >= start_ns FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT stopped_seq FROM run"), ops);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                               " AND name = 'op_args_written'"),
                     1);
    sqlite3_close(db);
}

static void test_forked_child_gets_closed_handle(void **state)
{
    (void)state;
    gt_recorder *r = open_new("fork.db", NULL);
    gt_id name;
    assert_int_equal(gt_intern_string(r, "op", 2, &name), 0);
    assert_int_equal(gt_recorder_flush(r), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gt_op_info op = {.name = name, .thread = 1};
        int64_t seq;
        int code = 0;
        if (gt_op(r, &op, &seq) != GT_ECLOSED)
            code |= 1;
        if (!strstr(gt_recorder_errmsg(r), "forked"))
            code |= 2;
        if (gt_op(r, &op, &seq) != GT_ECLOSED)
            code |= 4;
        if (gt_recorder_close(r) != GT_ECLOSED)
            code |= 8;
        _exit(code);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the parent's handle is unharmed */
    gt_op_info op = {.name = name, .thread = 1};
    int64_t seq;
    assert_int_equal(gt_op(r, &op, &seq), 0);
    assert_int_equal(seq, 1);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("fork.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 1);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
}

size_t gt__recorder_intern_bytes(gt_recorder *r); /* recorder.c, internal */

/* Memory does not grow with the number of events, only with distinct
 * interned values: once SQLite's page cache (cache_size, 2 MiB by default)
 * is warm, its heap and the intern tables stay put while many more events
 * are recorded. */
static void test_memory_bounded(void **state)
{
    (void)state;
    gt_recorder_options o = {.batch_events = 5000};
    gt_recorder *r = open_new("memory.db", &o);
    gt_id name, frame, stack;
    assert_int_equal(gt_intern_string(r, "aten::add", 9, &name), 0);
    assert_int_equal(gt_intern_frame(r, "m.py", 1, "f", "x + 1", &frame), 0);
    assert_int_equal(gt_intern_stack(r, 0, frame, frame, &stack), 0);
    int64_t mem[3];
    size_t intern[3];
    long n = 0;
    for (int phase = 0; phase < 3; phase++) {
        for (long i = 0; i < 100000; i++, n++) {
            gt_op_info op = {.name = name, .thread = 1, .stack = stack};
            int64_t seq;
            assert_int_equal(gt_op(r, &op, &seq), 0);
            assert_int_equal(gt_op_arg(r, seq, 0, 0, n + 1, 0), 0);
            gt_id again;
            assert_int_equal(gt_intern_stack(r, 0, frame, frame, &again), 0);
            assert_int_equal(again, stack);
        }
        assert_int_equal(gt_recorder_flush(r), 0);
        mem[phase] = sqlite3_memory_used();
        intern[phase] = gt__recorder_intern_bytes(r);
    }
    print_message("sqlite heap after 100k/200k/300k ops: %lld %lld %lld bytes\n",
                  (long long)mem[0], (long long)mem[1], (long long)mem[2]);
    assert_true(mem[2] < 4 * 1024 * 1024);
    assert_true(mem[2] - mem[1] < 256 * 1024);
    assert_int_equal(intern[2], intern[0]);
    assert_int_equal(gt_recorder_close(r), 0);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(gt_strerror(GT_OK), "success");
    assert_string_equal(gt_strerror(GT_EFAILED),
                        "recording stopped after an earlier error");
    assert_string_equal(gt_strerror(GT_EFULL), "disk full or size limit reached");
    assert_string_equal(gt_strerror(12345), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_creates_schema_and_run),
        cmocka_unit_test(test_close_null_and_null_handle),
        cmocka_unit_test(test_open_existing_file),
        cmocka_unit_test(test_overwrite_refuses_live_trace),
        cmocka_unit_test(test_open_bad_paths),
        cmocka_unit_test(test_stale_wal_is_not_replayed),
        cmocka_unit_test(test_roundtrip_every_event_kind),
        cmocka_unit_test(test_seq_strictly_increasing),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_run_set_keeps_earlier_fields),
        cmocka_unit_test(test_run_set_distributed),
        cmocka_unit_test(test_batch_events_boundary),
        cmocka_unit_test(test_first_batches_ramp_up),
        cmocka_unit_test(test_batch_ms_boundary),
        cmocka_unit_test(test_max_bytes_stops_recording),
        cmocka_unit_test(test_forked_child_gets_closed_handle),
        cmocka_unit_test(test_memory_bounded),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
