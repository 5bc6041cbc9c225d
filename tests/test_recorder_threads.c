/* One recorder handle shared by several threads (the header allows it: one
 * mutex per handle). Each thread interns shared and private values and
 * records ops, arguments, tensors and bumps; afterwards every row is there
 * once, seqs are unique, each thread saw its own seqs increase, and the
 * threads agree on the ids of shared strings, frames and stacks. The same
 * with half the threads holding the handle (gt_recorder_hold) over runs of
 * calls, as the engine adapter's fold does. Also run under ThreadSanitizer
 * (-DGT_TSAN=ON). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NTHREADS 4
#define NOPS     3000
#define DEPTH    8
#define HOLD_RUN 50

#define GT_TMPDIR_PREFIX "gt_test_threads"
#include "tmpdir.h"
#include "sqlquery.h"

struct worker {
    gt_recorder *r;
    int index;
    int hold;           /* hold the handle over runs of HOLD_RUN ops */
    int failures;       /* calls that did not return 0 */
    int non_monotonic;  /* seqs that did not increase within the thread */
    gt_id shared_name;  /* id of the string every thread interns */
    gt_id stack[DEPTH]; /* ids of the chain every thread interns */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    gt_recorder *r = w->r;
    gt_id th, own, dtype, frames[DEPTH];
    char buf[64];
    if (gt_intern_thread(r, 1000 + w->index, "worker", &th) != 0 ||
        gt_intern_string(r, "aten::mul.Tensor", 16, &w->shared_name) != 0 ||
        gt_intern_string(r, "float32", 7, &dtype) != 0)
        w->failures++;
    snprintf(buf, sizeof(buf), "aten::private_%d", w->index);
    if (gt_intern_string(r, buf, strlen(buf), &own) != 0)
        w->failures++;
    for (int d = 0; d < DEPTH; d++) {
        snprintf(buf, sizeof(buf), "f%d", d);
        if (gt_intern_frame(r, "model.py", 10 + d, buf, "x = f(x)", &frames[d]) != 0)
            w->failures++;
    }
    int64_t last = 0;
    for (int i = 0; i < NOPS; i++) {
        if (w->hold && i % HOLD_RUN == 0 &&
            ((i && gt_recorder_release(r) != 0) || gt_recorder_hold(r) != 0))
            w->failures++;
        gt_id parent = 0;
        for (int d = 0; d < DEPTH; d++) {
            if (gt_intern_stack(r, parent, frames[d], frames[d], &parent) != 0)
                w->failures++;
            if (i == 0)
                w->stack[d] = parent;
        }
        gt_op_info op = {.name = i % 2 ? own : w->shared_name,
                         .grad_mode = 1,
                         .thread = th,
                         .stack = parent};
        int64_t seq = 0;
        gt_id tensor = (gt_id)(w->index + 1) * 1000000 + i + 1;
        gt_tensor_info t = {.id = tensor, .dtype = dtype};
        if (gt_op(r, &op, &seq) != 0)
            w->failures++;
        if (seq <= last)
            w->non_monotonic++;
        last = seq;
        t.created_by = seq;
        if (gt_tensor(r, &t) != 0 ||
            gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, tensor, 0) != 0 ||
            gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, tensor, 0) != 0)
            w->failures++;
        if (gt_version_bump(r, seq, tensor, 1, 0, &seq) != 0)
            w->failures++;
        if (seq <= last)
            w->non_monotonic++;
        last = seq;
        if (i % 500 == 0 && gt_recorder_flush(r) != 0)
            w->failures++;
        if (i % 97 == 0)
            (void)gt_recorder_seq(r);
    }
    if (w->hold && gt_recorder_release(r) != 0)
        w->failures++;
    return NULL;
}

static void share_one_handle(int hold)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/threads%d.db", tmpdir, hold);
    gt_recorder *r = NULL;
    gt_recorder_options o = {.batch_events = 700};
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof(err), &r), 0);

    struct worker w[NTHREADS];
    pthread_t tid[NTHREADS];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < NTHREADS; i++) {
        w[i].r = r;
        w[i].index = i;
        w[i].hold = hold && i % 2;
        assert_int_equal(pthread_create(&tid[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(tid[i], NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].non_monotonic, 0);
        assert_int_equal(w[i].shared_name, w[0].shared_name);
        assert_memory_equal(w[i].stack, w[0].stack, sizeof(w[0].stack));
    }
    /* per op: op, tensor, bump */
    assert_int_equal(gt_recorder_seq(r), NTHREADS * NOPS * 3);
    assert_string_equal(gt_recorder_errmsg(r), "");
    assert_int_equal(gt_recorder_close(r), 0);

    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), NTHREADS * NOPS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM tensors"), NTHREADS * NOPS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM op_args"), 2 * NTHREADS * NOPS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM version_bumps"), NTHREADS * NOPS);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM (SELECT seq FROM ops UNION"
                  " SELECT seq FROM tensors UNION SELECT seq FROM version_bumps)"),
        3 * NTHREADS * NOPS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM threads"), NTHREADS);
    /* each op's rows belong together: the tensor created by an op is the
     * one its arguments and bump name */
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops o JOIN tensors t"
                               " ON t.created_by = o.seq JOIN version_bumps b"
                               " ON b.op = o.seq AND b.tensor = t.id"),
                     NTHREADS * NOPS);
    /* shared strings once: the shared op, float32, file, code, 8 functions,
     * plus one private op name per thread */
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings"), 4 + DEPTH + NTHREADS);
    assert_int_equal(q_int(db, "SELECT count(*) FROM frames"), DEPTH);
    assert_int_equal(q_int(db, "SELECT count(*) FROM stacks"), DEPTH);
    assert_int_equal(q_int(db, "SELECT count(DISTINCT stack) FROM ops"), 1);
    sqlite3_close(db);
}

static void test_threads_share_one_handle(void **state)
{
    (void)state;
    share_one_handle(0);
}

static void test_threads_share_one_handle_held(void **state)
{
    (void)state;
    share_one_handle(1);
}

/* A hold is not nested and is let go of by its thread; the batch's age is
 * checked at the release: rows written while held, the batch old enough
 * meanwhile, are committed by gt_recorder_release (a reader sees them). */
static void test_hold_release(void **state)
{
    (void)state;
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/hold.db", tmpdir);
    gt_recorder *r = NULL;
    gt_recorder_options o = {.batch_events = 100000, .batch_ms = 20};
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof(err), &r), 0);
    assert_int_equal(gt_recorder_release(r), GT_EINVAL);
    assert_int_equal(gt_recorder_hold(r), 0);
    assert_int_equal(gt_recorder_hold(r), GT_EINVAL);
    gt_id name = 0;
    int64_t seq = 0;
    assert_int_equal(gt_intern_string(r, "aten::add", 9, &name), 0);
    gt_op_info op = {.name = name};
    assert_int_equal(gt_op(r, &op, &seq), 0);
    usleep(40 * 1000); /* the batch is now older than batch_ms */
    assert_int_equal(gt_op(r, &op, &seq), 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 0);
    assert_int_equal(gt_recorder_release(r), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 2);
    assert_int_equal(gt_recorder_release(r), GT_EINVAL);
    sqlite3_close(db);
    assert_int_equal(gt_recorder_close(r), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_one_handle),
        cmocka_unit_test(test_threads_share_one_handle_held),
        cmocka_unit_test(test_hold_release),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
