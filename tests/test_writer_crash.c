/* Crash and write-failure tests of the recorder, each in a forked child:
 *   - a child killed with SIGKILL mid-write leaves a trace that opens, passes
 *     PRAGMA integrity_check and holds every batch it reported committed;
 *   - a tiny RLIMIT_FSIZE (with SIGXFSZ ignored, as the header asks of the
 *     host) makes writes fail with EFBIG: the handle reports it once, later
 *     calls get GT_EFAILED and the child keeps running to a normal exit;
 *   - the same limit hit while creating the trace fails the open cleanly. */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GT_TMPDIR_PREFIX "gt_test_crash"
#include "tmpdir.h"
#include "sqlquery.h"

/* The trace at `path`, opened after its writer died or exited: it must
 * pass PRAGMA integrity_check. */
static sqlite3 *open_sound(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    return db;
}

/* Run child(path) in a forked process, which must exit with status 0 (else
 * the status is the child's first failed check). */
static void run_child(int (*child)(const char *path), const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child(path));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        print_error("child killed by signal %d\n", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- kill -9 mid-write ------------------------------------------------- */

/* The child: records ops (each with 3 args and a bump) forever in batches
 * of 500 rows, and after each explicit flush writes the number of ops
 * committed so far to `fd`. */
static void killed_child(const char *path, int fd)
{
    char err[256];
    gt_recorder *r = NULL;
    gt_recorder_options o = {.batch_events = 500, .batch_ms = 100000};
    if (gt_recorder_open(path, &o, err, sizeof(err), &r) != 0)
        _exit(10);
    gt_id name, th, frame, stack;
    if (gt_intern_string(r, "aten::mul_.Tensor", 17, &name) != 0 ||
        gt_intern_thread(r, 1, "MainThread", &th) != 0 ||
        gt_intern_frame(r, "train.py", 7, "step", "w.mul_(2)", &frame) != 0 ||
        gt_intern_stack(r, 0, frame, frame, &stack) != 0)
        _exit(11);
    for (int64_t i = 1;; i++) {
        gt_op_info op = {.name = name, .grad_mode = 1, .thread = th, .stack = stack};
        int64_t seq;
        if (gt_op(r, &op, &seq) != 0 || gt_op_arg(r, seq, 0, 0, i, 0) != 0 ||
            gt_op_arg(r, seq, 0, 1, i + 1, 1) != 0 ||
            gt_op_arg(r, seq, 2, 0, i, 0) != 0 ||
            gt_version_bump(r, seq, i, 1, 0, NULL) != 0)
            _exit(12);
        if (i % 1000 == 0) {
            if (gt_recorder_flush(r) != 0)
                _exit(13);
            if (write(fd, &i, sizeof(i)) != (ssize_t)sizeof(i))
                _exit(14);
        }
    }
}

static void test_kill9_leaves_committed_batches(void **state)
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
    int64_t committed = 0, got;
    int reports = 0;
    while (reports < 8 && read(fds[0], &got, sizeof(got)) == (ssize_t)sizeof(got)) {
        committed = got;
        reports++;
    }
    assert_int_equal(reports, 8);
    /* the child is in the middle of its next batches */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    /* read whatever it managed to report before dying */
    while (read(fds[0], &got, sizeof(got)) == (ssize_t)sizeof(got))
        committed = got;
    close(fds[0]);
    assert_true(committed >= 8000);

    sqlite3 *db = open_sound(path);
    int64_t ops = q_int(db, "SELECT count(*) FROM ops");
    assert_true(ops >= committed);
    /* ops are a gap-free prefix 1..n of seqs 1,3,5...: op i has seq 2i-1
     * (the bump takes 2i) */
    assert_int_equal(q_int(db, "SELECT max(seq) FROM ops"), 2 * ops - 1);
    assert_true(q_int(db, "SELECT count(*) FROM op_args") >= 3 * committed);
    assert_true(q_int(db, "SELECT count(*) FROM version_bumps") >= committed);
    /* every op up to the last reported one has its three arguments */
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM op_args WHERE op <= %lld",
             (long long)(2 * committed - 1));
    assert_int_equal(q_int(db, sql), 3 * committed);
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings"), 4);
    assert_int_equal(q_int(db, "SELECT count(*) FROM run WHERE status = 'running'"
                               " AND end_ns IS NULL"),
                     1);
    /* views were created with the schema, so a killed trace has them */
    assert_true(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'view'") >= 1);
    sqlite3_close(db);
}

/* ---- RLIMIT_FSIZE ------------------------------------------------------ */

/* Child exit codes: 0 all as expected, otherwise the first failed check. */
static int fsize_child(const char *path)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 512 * 1024, .rlim_max = 512 * 1024};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 20;
    char err[256];
    gt_recorder *r = NULL;
    gt_recorder_options o = {.batch_events = 200};
    if (gt_recorder_open(path, &o, err, sizeof(err), &r) != 0)
        return 21;
    gt_id name;
    if (gt_intern_string(r, "aten::add.Tensor", 16, &name) != 0)
        return 22;
    int rc = 0;
    int64_t i, seq = 0;
    for (i = 1; i < 10000000 && rc == 0; i++) {
        gt_op_info op = {.name = name, .thread = 1};
        rc = gt_op(r, &op, &seq);
        if (rc == 0)
            rc = gt_op_arg(r, seq, 0, 0, i, 0);
    }
    if (rc != GT_EFULL) {
        fprintf(stderr, "child: rc %d: %s\n", rc, gt_recorder_errmsg(r));
        return 23;
    }
    if (i < 1000)
        return 24;
    if (!gt_recorder_failed(r))
        return 25;
    const char *msg = gt_recorder_errmsg(r);
    if (!strstr(msg, "recording stopped: disk full or file size limit") ||
        !strstr(msg, "file too large"))
        return 26;
    gt_op_info op = {.name = name, .thread = 1};
    if (gt_op(r, &op, &seq) != GT_EFAILED || gt_recorder_flush(r) != GT_EFAILED)
        return 27;
    if (!strstr(gt_recorder_errmsg(r), "file size limit"))
        return 28;
    if (gt_recorder_close(r) != GT_EFULL)
        return 29;
    return 0;
}

static void test_fsize_limit_fails_handle_not_process(void **state)
{
    (void)state;
    const char *path = tpath("fsize.db");
    run_child(fsize_child, path);

    /* what was committed before the limit is a sound trace */
    sqlite3 *db = open_sound(path);
    int64_t ops = q_int(db, "SELECT count(*) FROM ops");
    assert_true(ops > 500);
    assert_int_equal(q_int(db, "SELECT max(seq) FROM ops"), ops);
    sqlite3_close(db);
}

static int fsize_open_child(const char *path)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 2048, .rlim_max = 2048};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 30;
    char err[256] = "";
    gt_recorder *r = NULL;
    int rc = gt_recorder_open(path, NULL, err, sizeof(err), &r);
    if (rc != GT_EFULL) {
        fprintf(stderr, "child: rc %d: %s\n", rc, err);
        return 31;
    }
    if (r != NULL)
        return 32;
    if (strncmp(err, "cannot create trace", 19) || !strstr(err, "fsize_open.db") ||
        strstr(err, "gradtrace:"))
        return 33;
    return 0;
}

static void test_fsize_limit_at_open(void **state)
{
    (void)state;
    const char *path = tpath("fsize_open.db");
    run_child(fsize_open_child, path);
    /* nothing half-made is left behind */
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    char side[600];
    snprintf(side, sizeof(side), "%s-wal", path);
    assert_int_not_equal(stat(side, &sb), 0);
}

/* A write failure while closing (the indexes or the checkpoint need the
 * files to grow past the limit): close reports it, the child keeps running,
 * and every event flushed before is in the trace. */
static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

static int close_fail_child(const char *path)
{
    signal(SIGXFSZ, SIG_IGN);
    char err[256];
    gt_recorder *r = NULL;
    if (gt_recorder_open(path, NULL, err, sizeof(err), &r) != 0)
        return 40;
    gt_id name;
    if (gt_intern_string(r, "aten::add.Tensor", 16, &name) != 0)
        return 41;
    for (int64_t i = 1; i <= 20000; i++) {
        gt_op_info op = {.name = name, .thread = 1};
        int64_t seq;
        if (gt_op(r, &op, &seq) != 0 || gt_op_arg(r, seq, 0, 0, i, 0) != 0)
            return 42;
    }
    if (gt_recorder_flush(r) != 0)
        return 43;
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    long long db = file_size(path), lg = file_size(wal);
    long long limit = db > lg ? db : lg;
    struct rlimit rl = {.rlim_cur = (rlim_t)limit, .rlim_max = (rlim_t)limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 44;
    char msg[512];
    int rc = gt_recorder_close_msg(r, msg, sizeof(msg));
    if (rc != GT_EFULL) {
        fprintf(stderr, "child: close returned %d\n", rc);
        return 45;
    }
    if (!strstr(msg, "recording stopped: disk full or file size limit") ||
        !strstr(msg, "file too large")) {
        fprintf(stderr, "child: close message: %s\n", msg);
        return 46;
    }
    return 0;
}

static void test_fsize_limit_at_close(void **state)
{
    (void)state;
    const char *path = tpath("fsize_close.db");
    run_child(close_fail_child, path);
    sqlite3 *db = open_sound(path);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 20000);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_args"), 20000);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_leaves_committed_batches),
        cmocka_unit_test(test_fsize_limit_fails_handle_not_process),
        cmocka_unit_test(test_fsize_limit_at_open),
        cmocka_unit_test(test_fsize_limit_at_close),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
