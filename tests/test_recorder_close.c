/* Tests of what a closed trace is (recorder/recorder.c):
 *   - one self-contained file whatever readers are open: close waits for a
 *     reader in another process to let go, and if it does not, close fails
 *     with GT_EBUSY and a message saying where the events are;
 *   - at most max_bytes, the indexes close adds included, for caps from
 *     the smallest allowed up, for a mix of every event kind and for rows
 *     of very different sizes; a cap below the smallest trace is refused;
 *   - finished where it was opened, by a relative path too, whatever the
 *     working directory is at close. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GT_TMPDIR_PREFIX "gt_test_recorder_close"
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
    return r;
}

static int64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Copy the file at `from` to `to`, byte for byte (what a user copying the
 * trace alone gets). */
static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* One training-like step: an op reading a tensor and writing another (a
 * mutated argument), a new tensor with a bump, a node with two edges and
 * two saved tensors, a name, a node execution. Every table with a
 * close-time index gets rows. Returns 0 or the first error. */
static int step_events(gt_recorder *r, gt_id name, int64_t i, gt_id bw)
{
    int rc;
    int64_t seq = 0;
    gt_op_info op = {.name = name, .thread = 1};
    int64_t shape[2] = {8, 16}, strides[2] = {16, 1};
    gt_tensor_info t = {.id = 2 * i + 1,
                        .storage = 0,
                        .dtype = name,
                        .ndim = 2,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = 1};
    gt_node_info n = {.id = i + 1, .name = name, .sequence_nr = i, .thread = 1};
    if ((rc = gt_op(r, &op, &seq)) ||
        (rc = gt_op_arg(r, seq, GT_ROLE_INPUT, 0, 2 * i + 1, 0)) ||
        (rc = gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, 2 * i + 1, i)) ||
        (rc = gt_tensor(r, &t)) ||
        (rc = gt_version_bump(r, seq, 2 * i + 1, i + 1, 0, NULL)))
        return rc;
    n.op = seq;
    if ((rc = gt_node(r, &n)) || (rc = gt_edge(r, i + 1, 0, i > 0 ? i : 0, 0)) ||
        (rc = gt_edge(r, i + 1, 1, 0, 0)) ||
        (rc = gt_saved_tensor(r, i + 1, name, 2 * i + 1, i, 0, 512, NULL)) ||
        (rc = gt_saved_tensor(r, i + 1, name, 0, i, 1, -1, NULL)) ||
        (rc = gt_name(r, seq, 2 * i + 1, "weight")) || (rc = gt_node_exec(r, bw, i + 1)))
        return rc;
    return 0;
}

/* ---- readers at close -------------------------------------------------- */

/* How the reader child behaves. */
enum reader_mode {
    READ_UNTIL_DONE, /* read, then poll until the run is 'ok', then close */
    HOLD_TXN,        /* read inside a transaction and keep it open */
    HOLD_LOCK,       /* read, then hold a lock on the file as a connection
                      * in the middle of a rollback-journal read does */
    HOLD_LOCK_TXN,   /* both */
    HOLD_OPEN,       /* read once, keep the connection open outside a
                      * transaction; read again after the go */
};

/* Fork a reader of `path`; it writes one byte to *ready once it has read
 * the trace, and (HOLD_*) waits for a byte on *go before closing. */
static pid_t start_reader(const char *path, enum reader_mode mode, int *ready_fd,
                          int *go_fd)
{
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
            _exit(10);
        sqlite3_busy_timeout(db, 2000);
        int txn = mode == HOLD_TXN || mode == HOLD_LOCK_TXN;
        if (txn && sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
            _exit(11);
        if (sqlite3_exec(db, "SELECT count(*) FROM strings", NULL, NULL, NULL) !=
            SQLITE_OK)
            _exit(12);
        if (mode == HOLD_LOCK || mode == HOLD_LOCK_TXN) {
            /* SQLite's SHARED lock: a read lock on 510 bytes from
             * PENDING_BYTE + 2 (0x40000002), taken on a descriptor of our
             * own that stays open until exit */
            int fd = open(path, O_RDONLY);
            struct flock fl = {.l_type = F_RDLCK,
                               .l_whence = SEEK_SET,
                               .l_start = 0x40000002,
                               .l_len = 510};
            if (fd < 0 || fcntl(fd, F_SETLK, &fl) != 0)
                _exit(16);
        }
        if (write(ready[1], "r", 1) != 1)
            _exit(13);
        if (mode == READ_UNTIL_DONE) {
            for (int i = 0; i < 3000; i++) { /* at most 30 s */
                sqlite3_stmt *st = NULL;
                int ok = 0;
                if (sqlite3_prepare_v2(db, "SELECT status = 'ok' FROM run", -1, &st,
                                       NULL) == SQLITE_OK &&
                    sqlite3_step(st) == SQLITE_ROW)
                    ok = sqlite3_column_int(st, 0);
                sqlite3_finalize(st);
                if (ok)
                    break;
                usleep(10000);
            }
        } else {
            char c;
            if (read(go[0], &c, 1) != 1)
                _exit(14);
            if (txn && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
                _exit(17);
            {
                /* the trace closed under it: it still reads the whole run */
                sqlite3_stmt *st = NULL;
                if (sqlite3_prepare_v2(db, "SELECT count(*) FROM ops", -1, &st, NULL) !=
                        SQLITE_OK ||
                    sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 500)
                    _exit(15);
                sqlite3_finalize(st);
            }
        }
        sqlite3_close(db);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    *ready_fd = -1;
    *go_fd = go[1];
    return pid;
}

static void end_reader(pid_t pid, int go_fd)
{
    /* a READ_UNTIL_DONE reader may be gone already (SIGPIPE is ignored) */
    (void)!write(go_fd, "g", 1);
    close(go_fd);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A recording of `name` with `n` steps committed. */
static gt_recorder *record_steps(const char *name, int n, unsigned wait_ms)
{
    gt_recorder_options o = {.close_wait_ms = wait_ms};
    gt_recorder *r = open_new(name, &o);
    gt_id op, api, bw;
    assert_int_equal(gt_intern_string(r, "aten::mul_", 10, &op), 0);
    assert_int_equal(gt_intern_string(r, "Tensor.backward", 15, &api), 0);
    gt_backward_info b = {.api = api};
    assert_int_equal(gt_backward_begin(r, &b, &bw), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(step_events(r, op, i, bw), 0);
    assert_int_equal(gt_recorder_flush(r), 0);
    return r;
}

/* A reader that lets go while close waits: close succeeds and the trace is
 * one file in rollback-journal mode. */
static void test_close_waits_for_reader(void **state)
{
    (void)state;
    gt_recorder *r = record_steps("wait.db", 2000, 20000);
    int ready, go;
    pid_t pid = start_reader(tpath("wait.db"), READ_UNTIL_DONE, &ready, &go);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "x";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    end_reader(pid, go);
    assert_int_equal(file_size(tpath("wait.db-wal")), -1);
    /* the file alone holds every event */
    copy_file(tpath("wait.db"), tpath("wait_copy.db"));
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("wait_copy.db"), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 2000);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    sqlite3_close(db);
}

/* A reader inside a read transaction for the whole wait (a query running
 * on the live trace) keeps the checkpoint from finishing, but leaving WAL
 * mode folds the log in all the same: close succeeds, the file alone holds
 * every event, and the reader reads the whole run afterwards. */
static void test_reader_in_transaction_does_not_block_close(void **state)
{
    (void)state;
    gt_recorder *r = record_steps("txn.db", 500, 300);
    int ready, go;
    pid_t pid = start_reader(tpath("txn.db"), HOLD_TXN, &ready, &go);
    /* written after the reader's snapshot */
    gt_id s;
    assert_int_equal(gt_intern_string(r, "late", 4, &s), 0);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "x";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(file_size(tpath("txn.db-wal")), -1);
    copy_file(tpath("txn.db"), tpath("txn_copy.db"));
    end_reader(pid, go);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("txn_copy.db"), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 500);
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'late'"), 1);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    sqlite3_close(db);
}

/* A process holding a lock on the file for the whole wait (as one in the
 * middle of a rollback-journal read does) keeps WAL mode on, with or
 * without a read transaction that keeps the checkpoint from finishing:
 * close writes the finished trace as a new file and renames it over the
 * path. The holder goes on reading the old file; the path is one file. */
static void test_held_file_replaced_by_finished_copy(void **state)
{
    (void)state;
    for (int with_txn = 0; with_txn < 2; with_txn++) {
        const char *name = with_txn ? "held_txn.db" : "held.db";
        char wal[300], copy[64];
        snprintf(wal, sizeof wal, "%s-wal", tpath(name));
        snprintf(copy, sizeof copy, "copy_%s", name);
        gt_recorder *r = record_steps(name, 500, 300);
        int ready, go;
        pid_t pid =
            start_reader(tpath(name), with_txn ? HOLD_LOCK_TXN : HOLD_LOCK, &ready, &go);
        gt_id s;
        assert_int_equal(gt_intern_string(r, "late", 4, &s), 0);
        assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
        char msg[512] = "x";
        assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), 0);
        assert_string_equal(msg, "");
        assert_int_equal(file_size(wal), -1);
        copy_file(tpath(name), tpath(copy));
        end_reader(pid, go); /* it read the whole run, through the old file */
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(tpath(copy), &db), SQLITE_OK);
        assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
        assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
        assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 500);
        assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'late'"),
                         1);
        assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = "
                                   "'index'"),
                         9);
        assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
        sqlite3_close(db);
    }
}

/* The same, when no finished copy can be written (its name is taken by a
 * directory): close fails with GT_EBUSY and one line saying where the
 * events are; nothing is lost once the holder is gone. */
static void test_close_fails_loudly_when_it_cannot_finish(void **state)
{
    (void)state;
    char blocker[300], inside[320], wal[300];
    snprintf(blocker, sizeof blocker, "%s.gt-finish", tpath("stuck.db"));
    snprintf(inside, sizeof inside, "%s/x", blocker);
    snprintf(wal, sizeof wal, "%s-wal", tpath("stuck.db"));
    assert_int_equal(mkdir(blocker, 0755), 0);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fclose(f);
    gt_recorder *r = record_steps("stuck.db", 500, 300);
    int ready, go;
    pid_t pid = start_reader(tpath("stuck.db"), HOLD_LOCK_TXN, &ready, &go);
    gt_id s;
    assert_int_equal(gt_intern_string(r, "late", 4, &s), 0);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), GT_EBUSY);
    assert_int_equal(strncmp(msg, "cannot finish trace ", 20), 0);
    assert_non_null(strstr(msg, "stuck.db: another process held it open for 300 ms, and "
                                "writing a finished copy failed ("));
    assert_null(strstr(msg, "gradtrace:"));
    assert_null(strchr(msg, '\n'));
    assert_true(file_size(wal) > 0);
    end_reader(pid, go);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("stuck.db"), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 500);
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'late'"), 1);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    sqlite3_close(db);
}

/* A reader that keeps its connection open (outside a transaction) across
 * close does not hold the trace back: close leaves WAL mode, and the
 * reader reads the closed trace afterwards (it exits non-zero if not). */
static void test_idle_reader_does_not_block_close(void **state)
{
    (void)state;
    gt_recorder *r = record_steps("open.db", 500, 200);
    int ready, go;
    pid_t pid = start_reader(tpath("open.db"), HOLD_OPEN, &ready, &go);
    gt_id s;
    assert_int_equal(gt_intern_string(r, "late", 4, &s), 0);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "x";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(file_size(tpath("open.db-wal")), -1);
    copy_file(tpath("open.db"), tpath("open_copy.db"));
    end_reader(pid, go);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("open_copy.db"), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 500);
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'late'"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"),
                     9);
    sqlite3_close(db);
}

/* ---- the size cap ------------------------------------------------------ */

/* Record steps until the cap stops it (or `limit` steps), close, and
 * return the closed file's size; *steps gets the steps recorded whole. */
static int64_t record_to_cap(const char *name, int64_t cap, int big_rows, int64_t *steps)
{
    gt_recorder_options o = {.max_bytes = cap};
    gt_recorder *r = open_new(name, &o);
    gt_id op, api, bw;
    assert_int_equal(gt_intern_string(r, "aten::mul_", 10, &op), 0);
    assert_int_equal(gt_intern_string(r, "Tensor.backward", 15, &api), 0);
    gt_backward_info b = {.api = api};
    assert_int_equal(gt_backward_begin(r, &b, &bw), 0);
    char *big = malloc(20000);
    assert_non_null(big);
    int rc = 0;
    int64_t i;
    for (i = 0; i < 2000000 && rc == 0; i++) {
        rc = step_events(r, op, i, bw);
        if (rc == 0 && big_rows && i % 50 == 49) {
            /* a long, distinct message: rows far bigger than the average */
            memset(big, 'a' + (int)(i % 26), 19999);
            big[19999] = '\0';
            snprintf(big, 32, "step %ld", (long)i);
            big[strlen(big)] = ' ';
            rc = gt_error(r, "RuntimeError", big, 0, 0, NULL);
        }
    }
    free(big);
    assert_int_equal(rc, GT_EFULL);
    assert_non_null(strstr(gt_recorder_errmsg(r),
                           "recording stopped: trace reached its size"
                           " cap"));
    print_message("  %s\n", gt_recorder_errmsg(r));
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(r), GT_EFULL);
    *steps = i;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath(name), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"),
                     9);
    /* what was kept ends at the stop and is whole up to it */
    int64_t stopped = q_int(db, "SELECT stopped_seq FROM run");
    assert_int_equal(q_int(db, "SELECT max(seq) FROM (SELECT seq FROM ops UNION ALL "
                               "SELECT seq FROM tensors UNION ALL SELECT seq FROM "
                               "node_execs UNION ALL SELECT seq FROM saved_tensors UNION "
                               "ALL SELECT seq FROM errors UNION ALL SELECT seq FROM "
                               "version_bumps UNION ALL SELECT seq FROM nodes UNION ALL "
                               "SELECT seq FROM backward_calls)"),
                     stopped);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    sqlite3_close(db);
    return file_size(tpath(name));
}

static void test_cap_counts_close_time_indexes(void **state)
{
    (void)state;
    static const int64_t caps[] = {200 * 1024, 300 * 1024, 1024 * 1024, 4 * 1024 * 1024,
                                   20 * 1024 * 1024};
    for (size_t k = 0; k < sizeof caps / sizeof *caps; k++) {
        for (int big = 0; big < 2; big++) {
            char name[64];
            snprintf(name, sizeof name, "cap_%zu_%d.db", k, big);
            int64_t steps = 0;
            int64_t size = record_to_cap(name, caps[k], big, &steps);
            print_message("cap %" PRId64 "%s: closed file %" PRId64 " bytes (%.1f%%), "
                          "%" PRId64 " steps\n",
                          caps[k], big ? " (big rows)" : "", size,
                          100.0 * (double)size / (double)caps[k], steps);
            assert_true(size > 0);
            assert_true(size <= caps[k]);
            /* and it did not stop absurdly early: at least half the room
             * above the smallest trace is used */
            assert_true(size - 200 * 1024 >= (caps[k] - 200 * 1024) / 2 || k == 0);
            assert_true(steps > 10);
        }
    }
}

/* The cap met by the batch close commits (no commit came before it): that
 * batch is rolled back as any other, and the closed file is complete,
 * marked and within the cap; close returns GT_EFULL. */
static void test_cap_met_at_close(void **state)
{
    (void)state;
    gt_recorder_options o = {.max_bytes = 400 * 1024, .batch_ms = 600000};
    gt_recorder *r = open_new("cap_close.db", &o);
    char *big = malloc(20001);
    assert_non_null(big);
    for (int i = 0; i < 20; i++) {
        memset(big, 'a' + i, 20000);
        big[20000] = '\0';
        assert_int_equal(gt_error(r, "RuntimeError", big, 0, 0, NULL), 0);
    }
    free(big);
    assert_int_equal(gt_recorder_failed(r), 0); /* nothing committed yet */
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "";
    assert_int_equal(gt_recorder_close_msg(r, msg, sizeof msg), GT_EFULL);
    assert_non_null(strstr(msg, "recording stopped: trace reached its size cap"));
    assert_true(file_size(tpath("cap_close.db")) <= 400 * 1024);
    assert_int_equal(file_size(tpath("cap_close.db-wal")), -1);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("cap_close.db"), &db), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_int_equal(q_int(db, "SELECT count(*) FROM errors"), 0);
    assert_int_equal(q_int(db, "SELECT stopped_seq IS NOT NULL FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT end_ns IS NOT NULL FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"),
                     9);
    sqlite3_close(db);
}

/* A trace opened by a relative path while the process then changes its
 * working directory (hydra does): close still folds the row log into it
 * and finishes it where it was opened (the row log was reopened by the
 * relative path: "cannot read row log"). */
static void test_relative_path_survives_chdir(void **state)
{
    (void)state;
    char *home = getcwd(NULL, 0);
    assert_non_null(home);
    assert_int_equal(chdir(tpath("")), 0);
    gt_recorder_options o = {.row_log = 1, .close_wait_ms = 2000};
    char err[256] = "";
    gt_recorder *r = NULL;
    assert_int_equal(gt_recorder_open("rel.db", &o, err, sizeof err, &r), 0);
    gt_id op, api, bw;
    assert_int_equal(gt_intern_string(r, "aten::mul_", 10, &op), 0);
    assert_int_equal(gt_intern_string(r, "Tensor.backward", 15, &api), 0);
    gt_backward_info b = {.api = api};
    assert_int_equal(gt_backward_begin(r, &b, &bw), 0);
    for (int i = 0; i < 50; i++)
        assert_int_equal(step_events(r, op, i, bw), 0);
    assert_int_equal(chdir("/"), 0);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    char msg[512] = "x";
    int rc = gt_recorder_close_msg(r, msg, sizeof msg);
    assert_int_equal(chdir(home), 0);
    free(home);
    assert_string_equal(msg, "");
    assert_int_equal(rc, 0);
    assert_int_equal(file_size(tpath("rel.db-gtlog")), -1);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("rel.db"), &db), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 50);
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    sqlite3_close(db);
}

static void test_cap_below_smallest_trace_refused(void **state)
{
    (void)state;
    gt_recorder_options o = {.max_bytes = 64 * 1024};
    char err[256] = "";
    gt_recorder *r = (gt_recorder *)0x1;
    assert_int_equal(gt_recorder_open(tpath("tiny.db"), &o, err, sizeof err, &r),
                     GT_EINVAL);
    assert_ptr_equal(r, (gt_recorder *)0x1);
    assert_non_null(strstr(err,
                           "tiny.db: a size cap of 65536 bytes is below the smallest "
                           "trace ("));
    assert_int_equal(file_size(tpath("tiny.db")), -1);
    assert_int_equal(file_size(tpath("tiny.db-wal")), -1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_waits_for_reader),
        cmocka_unit_test(test_reader_in_transaction_does_not_block_close),
        cmocka_unit_test(test_held_file_replaced_by_finished_copy),
        cmocka_unit_test(test_close_fails_loudly_when_it_cannot_finish),
        cmocka_unit_test(test_idle_reader_does_not_block_close),
        cmocka_unit_test(test_cap_counts_close_time_indexes),
        cmocka_unit_test(test_cap_met_at_close),
        cmocka_unit_test(test_cap_below_smallest_trace_refused),
        cmocka_unit_test(test_relative_path_survives_chdir),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
