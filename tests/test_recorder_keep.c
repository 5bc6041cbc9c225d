/* Tests of the flight recorder (gt_recorder_options.keep_last, recorder.c's
 * cut_window and write_window): a synthetic training loop whose parameter,
 * its accumulator node and a graph reaching back many steps outlive the
 * window; only the last N backward calls are kept, with every older row they
 * reference; the file is a closed trace at open, after an error, at close
 * and at the size cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GT_TMPDIR_PREFIX "gt_test_recorder_keep"
#include "tmpdir.h"
#include "sqlquery.h"

static gt_recorder *open_keep(const char *name, unsigned keep, int64_t max_bytes)
{
    char err[256] = "";
    gt_recorder *r = NULL;
    gt_recorder_options o = {
        .keep_last = keep, .max_bytes = max_bytes, .batch_events = 500};
    int rc = gt_recorder_open(tpath(name), &o, err, sizeof(err), &r);
    if (rc != 0)
        print_error("open %s: %d %s\n", name, rc, err);
    assert_int_equal(rc, 0);
    return r;
}

static sqlite3 *db_open(const char *name)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(tpath(name), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    return db;
}

static int64_t file_size(const char *name)
{
    struct stat sb;
    assert_int_equal(stat(tpath(name), &sb), 0);
    return (int64_t)sb.st_size;
}

/* The loop's ids: the parameter P (tensor 1, storage 1), its accumulator
 * node 1, and per step k a tensor and a node of ids 1000 + k. At step 5 a
 * tensor Q (500) is saved by node 500, modified in place at step 6; every
 * later step's node has an edge to node 500 (a graph made once and used by
 * every step), so that old node is part of the last backward call. */
typedef struct loop {
    gt_recorder *r;
    gt_id s_mul, s_add, s_self, s_f32, s_cpu, s_api, s_acc, s_mulb, thread, stack;
    int rc; /* first failure */
} loop;

#define CK(l, call)                                                                      \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ && !(l)->rc)                                                             \
            (l)->rc = rc_;                                                               \
    } while (0)

static void str(loop *l, const char *s, gt_id *out)
{
    assert_int_equal(gt_intern_string(l->r, s, strlen(s), out), 0);
}

static void tensor(loop *l, gt_id id, gt_id storage, int64_t created_by)
{
    int64_t shape[1] = {4}, strides[1] = {1};
    gt_tensor_info t = {.id = id,
                        .storage = storage,
                        .dtype = l->s_f32,
                        .ndim = 1,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = 1,
                        .is_leaf = created_by == 0,
                        .created_by = created_by};
    CK(l, gt_storage(l->r, storage, 16, l->s_cpu));
    CK(l, gt_tensor(l->r, &t));
}

static void loop_init(loop *l, gt_recorder *r)
{
    memset(l, 0, sizeof *l);
    l->r = r;
    str(l, "aten::mul.Tensor", &l->s_mul);
    str(l, "aten::add_.Tensor", &l->s_add);
    str(l, "self", &l->s_self);
    str(l, "float32", &l->s_f32);
    str(l, "cpu", &l->s_cpu);
    str(l, "Tensor.backward", &l->s_api);
    str(l, "AccumulateGrad", &l->s_acc);
    str(l, "MulBackward0", &l->s_mulb);
    gt_id file, fn, frame;
    str(l, "train.py", &file);
    str(l, "<module>", &fn);
    assert_int_equal(gt_intern_frame(r, "train.py", 7, "<module>", "y = w * x", &frame),
                     0);
    assert_int_equal(gt_intern_stack(r, 0, frame, frame, &l->stack), 0);
    assert_int_equal(gt_intern_thread(r, 1234, "MainThread", &l->thread), 0);
    tensor(l, 1, 1, 0);
    gt_node_info acc = {.id = 1, .name = l->s_acc, .sequence_nr = -1, .variable = 1};
    CK(l, gt_node(r, &acc));
}

/* One step: y_k = P * x (node k saves P), backward(y_k), P.add_ (a bump). */
static void loop_step(loop *l, int k, int last)
{
    gt_recorder *r = l->r;
    int64_t seq = 0;
    gt_op_info op = {
        .name = l->s_mul, .grad_mode = 1, .thread = l->thread, .stack = l->stack};
    CK(l, gt_op(r, &op, &seq));
    CK(l, gt_op_arg(r, seq, GT_ROLE_INPUT, 0, 1, k - 1));
    tensor(l, 1000 + k, 1000 + k, seq);
    CK(l, gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, 1000 + k, 0));
    gt_node_info n = {.id = 1000 + k,
                      .name = l->s_mulb,
                      .op = seq,
                      .sequence_nr = k,
                      .thread = l->thread};
    CK(l, gt_node(r, &n));
    CK(l, gt_edge(r, 1000 + k, 0, 1, 0));
    CK(l, gt_node_output(r, 1000 + k, 0, 1000 + k));
    CK(l, gt_saved_tensor(r, 1000 + k, l->s_self, 1, k - 1, 0, 16, NULL));
    if (k == 5) { /* Q, saved by node 500 */
        tensor(l, 500, 500, seq);
        gt_node_info q = {.id = 500,
                          .name = l->s_mulb,
                          .op = seq,
                          .sequence_nr = 0,
                          .thread = l->thread};
        CK(l, gt_node(r, &q));
        CK(l, gt_saved_tensor(r, 500, l->s_self, 500, 0, 0, 16, NULL));
    }
    if (k == 6) { /* Q modified in place after its save */
        gt_op_info w = {
            .name = l->s_add, .grad_mode = 0, .thread = l->thread, .stack = l->stack};
        int64_t ws = 0;
        CK(l, gt_op(r, &w, &ws));
        CK(l, gt_op_arg(r, ws, GT_ROLE_MUTATED, 0, 500, 0));
        CK(l, gt_version_bump(r, ws, 500, 1, 0, NULL));
    }
    if (k >= 5) /* every graph from step 5 on reaches node 500 */
        CK(l, gt_edge(r, 1000 + k, 1, 500, 0));
    gt_backward_info b = {.api = l->s_api, .thread = l->thread, .stack = l->stack};
    gt_id bid = 0;
    CK(l, gt_backward_begin(r, &b, &bid));
    if (l->rc)
        return;
    assert_int_equal(bid, k);
    CK(l, gt_backward_root(r, bid, 0, 1000 + k, 1000 + k));
    CK(l, gt_name(r, gt_recorder_seq(r), 1, "w"));
    CK(l, gt_node_exec(r, bid, 1000 + k));
    CK(l, gt_node_exec(r, bid, 1));
    CK(l, gt_backward_end(r, bid, !last));
    gt_op_info up = {
        .name = l->s_add, .grad_mode = 0, .thread = l->thread, .stack = l->stack};
    int64_t us = 0;
    CK(l, gt_op(r, &up, &us));
    CK(l, gt_op_arg(r, us, GT_ROLE_MUTATED, 0, 1, k - 1));
    CK(l, gt_version_bump(r, us, 1, k, 0, NULL));
}

static const char *const dangling[] = {
    "SELECT count(*) FROM op_args WHERE tensor NOT IN (SELECT id FROM tensors)",
    "SELECT count(*) FROM saved_tensors WHERE tensor NOT IN (SELECT id FROM tensors)"
    " OR node NOT IN (SELECT id FROM nodes)",
    "SELECT count(*) FROM edges WHERE next NOT IN (SELECT id FROM nodes)",
    "SELECT count(*) FROM node_execs WHERE node NOT IN (SELECT id FROM nodes)"
    " OR backward NOT IN (SELECT id FROM backward_calls)",
    "SELECT count(*) FROM version_bumps WHERE tensor NOT IN (SELECT id FROM tensors)"
    " OR op NOT IN (SELECT seq FROM ops)",
    "SELECT count(*) FROM tensors WHERE storage NOT IN (SELECT id FROM storages)"
    " OR created_by NOT IN (SELECT seq FROM ops)",
    "SELECT count(*) FROM nodes WHERE op NOT IN (SELECT seq FROM ops)"
    " OR variable NOT IN (SELECT id FROM tensors)",
    "SELECT count(*) FROM names WHERE tensor NOT IN (SELECT id FROM tensors)",
    "SELECT count(*) FROM backward_roots WHERE node NOT IN (SELECT id FROM nodes)",
};

static void check_no_dangling(sqlite3 *db)
{
    for (size_t i = 0; i < sizeof dangling / sizeof dangling[0]; i++) {
        int64_t n = q_int(db, dangling[i]);
        if (n)
            print_error("%s: %lld\n", dangling[i], (long long)n);
        assert_int_equal(n, 0);
    }
}

static void test_window_of_last_calls(void **state)
{
    (void)state;
    gt_recorder *r = open_keep("keep.db", 3, 0);
    /* the file is an empty closed trace from the start */
    sqlite3 *db = db_open("keep.db");
    assert_int_equal(q_int(db, "SELECT keep_last FROM run"), 3);
    assert_int_equal(q_int(db, "SELECT count(*) FROM backward_calls"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                               " AND name = 'op_args_written'"),
                     1);
    sqlite3_close(db);

    loop l;
    loop_init(&l, r);
    for (int k = 1; k <= 100; k++)
        loop_step(&l, k, k == 100);
    assert_int_equal(l.rc, 0);
    /* an error makes the window due: the next flush writes it */
    assert_int_equal(gt_error(r, "RuntimeError", "modified by an inplace operation",
                              l.stack, 100, NULL),
                     0);
    assert_int_equal(gt_recorder_flush(r), 0);
    db = db_open("keep.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM errors"), 1);
    assert_int_equal(q_int(db, "SELECT min(id) FROM backward_calls"), 98);
    sqlite3_close(db);

    assert_int_equal(gt_run_end(r, GT_RUN_EXCEPTION, 1, 0), 0);
    assert_int_equal(gt_recorder_close(r), 0);

    db = db_open("keep.db");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_string_equal(q_text(db, "PRAGMA journal_mode"), "delete");
    assert_string_equal(q_text(db, "SELECT status FROM run"), "exception");
    assert_int_equal(q_int(db, "SELECT end_ns IS NOT NULL FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT group_concat(id) = '98,99,100' FROM"
                               " (SELECT id FROM backward_calls ORDER BY id)"),
                     1);
    assert_int_equal(q_int(db, "SELECT kept_from_backward FROM run"), 98);
    /* events from the end of call 97 on are whole */
    assert_int_equal(q_int(db,
                           "SELECT kept_from_seq > 0 AND kept_from_seq <"
                           " (SELECT seq FROM backward_calls WHERE id = 98) FROM run"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM node_execs"), 6);
    assert_int_equal(q_int(db, "SELECT count(*) FROM node_execs WHERE seq <"
                               " (SELECT kept_from_seq FROM run)"),
                     0);
    /* the parameter and its accumulator (recorded before everything), the
     * window's tensors and nodes, and the old graph the last one reaches */
    assert_string_equal(q_text(db, "SELECT group_concat(id) FROM (SELECT id FROM nodes"
                                   " ORDER BY id)"),
                        "1,500,1098,1099,1100");
    /* (1005 is an argument of the op that made node 500) */
    assert_string_equal(q_text(db, "SELECT group_concat(id) FROM (SELECT id FROM tensors"
                                   " ORDER BY id)"),
                        "1,500,1005,1098,1099,1100");
    /* the old node's saved tensor and the write after its save, with its op */
    assert_int_equal(q_int(db, "SELECT count(*) FROM saved_tensors WHERE node = 500"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM version_bumps b JOIN op_args a"
                               " ON a.op = b.op AND a.role = 2 WHERE b.tensor = 500"),
                     1);
    /* P's bumps: only the window's, from the update after call 97 on */
    assert_int_equal(q_int(db, "SELECT count(*) FROM version_bumps WHERE tensor = 1"), 4);
    /* one name row per (tensor, name) before the window, the window's own */
    assert_int_equal(q_int(db, "SELECT count(*) FROM names WHERE seq <"
                               " (SELECT kept_from_seq FROM run)"),
                     0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM names"), 3);
    /* the ops that made the kept old tensors and nodes */
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops WHERE seq <"
                               " (SELECT kept_from_seq FROM run)"),
                     2);
    /* every string, frame, stack and thread */
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings WHERE text = 'train.py'"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM stacks"), 1);
    /* the dropped calls' storages went with their tensors */
    assert_int_equal(q_int(db, "SELECT count(*) FROM storages"), 6);
    check_no_dangling(db);
    sqlite3_close(db);
}

/* With a cap the last calls fit in, the calls held beyond keep_last are let
 * go first and recording never stops; with a cap they do not fit in, it
 * stops there and the window is written, under the cap. */
static void test_size_cap(void **state)
{
    (void)state;
    gt_recorder *r = open_keep("capfit.db", 2, 400 * 1024);
    loop l;
    loop_init(&l, r);
    for (int k = 1; k <= 3000; k++)
        loop_step(&l, k, 0);
    if (l.rc)
        print_error("%s\n", gt_recorder_errmsg(r));
    assert_int_equal(l.rc, 0);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(r), 0);
    sqlite3 *db = db_open("capfit.db");
    assert_int_equal(q_int(db, "SELECT stopped_seq IS NULL FROM run"), 1);
    assert_string_equal(q_text(db, "SELECT group_concat(id) FROM backward_calls"),
                        "2999,3000");
    sqlite3_close(db);
    assert_true(file_size("capfit.db") <= 400 * 1024);

    r = open_keep("capstop.db", 100000, 300 * 1024);
    loop_init(&l, r);
    int k;
    for (k = 1; k <= 100000 && !l.rc; k++)
        loop_step(&l, k, 0);
    assert_int_equal(l.rc, GT_EFULL);
    assert_true(k > 50);
    assert_non_null(strstr(gt_recorder_errmsg(r), "size cap"));
    /* written at the cap, before the close */
    db = db_open("capstop.db");
    assert_int_equal(q_int(db, "SELECT stopped_seq IS NOT NULL FROM run"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) > 50 FROM backward_calls"), 1);
    sqlite3_close(db);
    assert_true(file_size("capstop.db") <= 300 * 1024);
    assert_int_equal(gt_run_end(r, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(r), GT_EFULL);
    db = db_open("capstop.db");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    assert_string_equal(q_text(db, "SELECT status FROM run"), "ok");
    check_no_dangling(db);
    sqlite3_close(db);
    assert_true(file_size("capstop.db") <= 300 * 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_of_last_calls),
        cmocka_unit_test(test_size_cap),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
