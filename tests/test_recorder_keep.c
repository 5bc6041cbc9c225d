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
#include <unistd.h>

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

/* A float32 vector of 4 made by op `by` (0: a leaf), no storage yet. */
static gt_tensor_info vec4(gt_id id, gt_id f32, int64_t by)
{
    static const int64_t shape[1] = {4}, strides[1] = {1};
    return (gt_tensor_info){.id = id,
                            .dtype = f32,
                            .ndim = 1,
                            .shape = shape,
                            .strides = strides,
                            .requires_grad = 1,
                            .is_leaf = by == 0,
                            .created_by = by};
}

static void tensor(loop *l, gt_id id, gt_id storage, int64_t created_by)
{
    gt_tensor_info t = vec4(id, l->s_f32, created_by);
    t.storage = storage;
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

/* ---- the C cut against the SQL cut ---------------------------------------- */

/* keep_last alone holds the frequent rows as blocks and cuts them in C
 * (keepcut.c); with max_bytes the window is cut by cut_sql in SQLite. A
 * cap no run here reaches makes the second the reference for the first. */
#define NO_CAP ((int64_t)1 << 40)

size_t gt__recorder_held_bytes(gt_recorder *r);

/* A scripted run, the same calls for the same seed: ops with arguments
 * reaching back over the whole run, views sharing version counters,
 * nodes with edges to old nodes and to the parameters' accumulators,
 * saved tensors (some unmatched, some saved earlier), version bumps by ops
 * and observed, names bound again and again, tensors and storages written
 * again (gt_tensor_again, INSERT OR IGNORE), storage swaps, backward calls
 * left running for a while, roots, inputs, fingerprints and errors. */
typedef struct script {
    gt_recorder *r;
    uint64_t rng;
    gt_id s_op[3], s_slot, s_name[3], s_f32, s_cpu, s_api, s_acc, s_node, s_err;
    gt_id thread, stack;
    int64_t nt, nn, ns, nsaved;
    gt_tensor_info *t; /* [id]: each tensor as first written */
    int64_t *saved;    /* saved_tensors seqs so far */
    gt_id *saved_t;    /* ... and their tensors */
    gt_id open_call;   /* a backward call left running, 0 if none */
    /* dups: write duplicate keys too (script_dup); the previous op, its
     * output, node and storage; held bytes right after each cut */
    int dups;
    int64_t prev_op;
    gt_id prev_out, prev_node, prev_storage;
    size_t *held_at_cut;
    int64_t ncut;
    int rc;
} script;

static unsigned rnd(script *s, unsigned n)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(s->rng >> 33) % n;
}

/* A tensor (node): one of the last ten, else any so far. */
static gt_id pick(script *s, int64_t n)
{
    return rnd(s, 2) && n > 10 ? n - (int64_t)rnd(s, 10)
                               : 1 + (int64_t)rnd(s, (unsigned)n);
}

/* A new tensor made by op `by` (0: a leaf): its own storage, or a view of
 * an older tensor sharing its counter, or one sharing an older tensor's
 * counter without being its view (as detach() does). */
static gt_id new_tensor(script *s, int64_t by)
{
    gt_id id = ++s->nt;
    gt_tensor_info *t = &s->t[id];
    *t = vec4(id, s->s_f32, by);
    if (id > 4 && rnd(s, 4) == 0) {
        gt_id base = pick(s, id - 1);
        t->alias_of = base;
        t->storage = s->t[base].storage;
        t->shares_version = 1;
        t->version_counter =
            s->t[base].version_counter ? s->t[base].version_counter : base;
    } else {
        t->storage = ++s->ns;
        CK(s, gt_storage(s->r, t->storage, 16, s->s_cpu));
        if (s->dups) /* announced twice: the first row (16 bytes) is kept */
            CK(s, gt_storage(s->r, t->storage, 32, s->s_cpu));
        if (id > 4 && rnd(s, 6) == 0)
            t->version_counter = pick(s, id - 1);
    }
    CK(s, gt_tensor(s->r, t));
    return id;
}

static void script_init(script *s, gt_recorder *r, int steps)
{
    memset(s, 0, sizeof *s);
    s->r = r;
    s->rng = 42;
    s->t = calloc((size_t)steps * 16 + 16, sizeof *s->t);
    s->saved = calloc((size_t)steps * 16 + 16, sizeof *s->saved);
    s->saved_t = calloc((size_t)steps * 16 + 16, sizeof *s->saved_t);
    s->held_at_cut = calloc((size_t)steps + 1, sizeof *s->held_at_cut);
    assert_non_null(s->saved_t);
    assert_non_null(s->held_at_cut);
    assert_non_null(s->t);
    assert_non_null(s->saved);
    static const char *const strs[] = {"aten::mul",
                                       "aten::add_",
                                       "aten::view",
                                       "self",
                                       "w",
                                       "b",
                                       "x",
                                       "float32",
                                       "cpu",
                                       "backward",
                                       "AccumulateGrad",
                                       "MulBackward0",
                                       "RuntimeError"};
    gt_id *dst[] = {&s->s_op[0],   &s->s_op[1],   &s->s_op[2], &s->s_slot, &s->s_name[0],
                    &s->s_name[1], &s->s_name[2], &s->s_f32,   &s->s_cpu,  &s->s_api,
                    &s->s_acc,     &s->s_node,    &s->s_err};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        assert_int_equal(gt_intern_string(r, strs[i], strlen(strs[i]), dst[i]), 0);
    gt_id frame;
    assert_int_equal(gt_intern_frame(r, "train.py", 3, "step", "loss.backward()", &frame),
                     0);
    assert_int_equal(gt_intern_stack(r, 0, frame, frame, &s->stack), 0);
    assert_int_equal(gt_intern_thread(r, 99, "MainThread", &s->thread), 0);
    for (int p = 0; p < 3; p++) { /* parameters and their accumulators */
        gt_id t = new_tensor(s, 0);
        gt_node_info acc = {
            .id = ++s->nn, .name = s->s_acc, .sequence_nr = -1, .variable = t};
        CK(s, gt_node(r, &acc));
    }
}

/* A tensor other than the one a row names, for its duplicate: an old one,
 * picked without the generator (the runs with and without duplicates make
 * the same calls otherwise). */
static gt_id other_tensor(const script *s, int k)
{
    return 1 + (gt_id)((uint64_t)k * 7919u % (uint64_t)s->nt);
}

static void script_op(script *s, int k)
{
    gt_recorder *r = s->r;
    int64_t seq = 0, bs = 0;
    gt_op_info op = {.name = s->s_op[rnd(s, 3)],
                     .grad_mode = 1,
                     .thread = s->thread,
                     .stack = rnd(s, 2) ? s->stack : 0};
    CK(s, gt_op(r, &op, &seq));
    int nin = (int)rnd(s, 3);
    for (int i = 0; i < nin; i++)
        CK(s, gt_op_arg(r, seq, GT_ROLE_INPUT, i, pick(s, s->nt), rnd(s, 5)));
    if (s->dups && nin) /* the same input position twice */
        CK(s, gt_op_arg(r, seq, GT_ROLE_INPUT, 0, other_tensor(s, k), 77));
    gt_id out = new_tensor(s, seq);
    CK(s, gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, out, 0));
    if (s->dups)
        CK(s, gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, other_tensor(s, k + 1), 78));
    if (rnd(s, 2) == 0) { /* in place: a bump by the op, often of one saved lately */
        gt_id m = s->nsaved && rnd(s, 4)
                      ? s->saved_t[s->nsaved - 1 - rnd(s, 4) % s->nsaved]
                      : 0;
        m = m ? m : pick(s, s->nt);
        CK(s, gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, m, k));
        CK(s, gt_version_bump(r, seq, m, k + 1, 0, NULL));
    }
    gt_node_info n = {.id = ++s->nn,
                      .name = s->s_node,
                      .op = rnd(s, 5) ? seq : 0,
                      .sequence_nr = k,
                      .thread = s->thread};
    CK(s, gt_node(r, &n));
    int nedge = 1 + (int)rnd(s, 3);
    for (int e = 0; e < nedge; e++) {
        gt_id next = rnd(s, 6) == 0   ? 0
                     : rnd(s, 3) == 0 ? 1 + rnd(s, 3)
                                      : pick(s, s->nn - 1);
        CK(s, gt_edge(r, n.id, e, next, 0));
    }
    CK(s, gt_node_output(r, n.id, 0, out));
    if (s->dups) /* the same node output twice */
        CK(s, gt_node_output(r, n.id, 0, other_tensor(s, k + 2)));
    s->prev_op = seq;
    s->prev_out = out;
    s->prev_node = n.id;
    s->prev_storage = s->ns;
    int nsave = (int)rnd(s, 3);
    for (int i = 0; i < nsave; i++) {
        gt_id t = rnd(s, 6) == 0 ? 0 : pick(s, s->nt);
        if (s->nsaved > 0 && rnd(s, 5) == 0)
            CK(s, gt_saved_tensor_at(r, n.id, s->s_slot + i, t, k, 0, 16,
                                     s->saved[rnd(s, (unsigned)s->nsaved)], &bs));
        else
            CK(s, gt_saved_tensor(r, n.id, s->s_slot + i, t, k, i == 1, 16, &bs));
        s->saved_t[s->nsaved] = t;
        s->saved[s->nsaved++] = bs;
    }
    if (s->nn > 4 && rnd(s, 4) == 0) /* a save found later, of an older node */
        CK(s, gt_saved_tensor(r, pick(s, s->nn - 1), s->s_slot, pick(s, s->nt), k, 0, 16,
                              NULL));
    if (rnd(s, 4) == 0) /* a bump seen later */
        CK(s, gt_version_bump(r, 0, pick(s, s->nt), k + 2, 1, NULL));
}

/* Duplicates of the previous step's rows, written in this one: after the
 * cut at its backward call, if one came, of rows the cut kept (held). */
static void script_dup(script *s, int k)
{
    if (!s->dups || !s->prev_op)
        return;
    CK(s, gt_op_arg(s->r, s->prev_op, GT_ROLE_OUTPUT, 0, other_tensor(s, k + 3), 79));
    CK(s, gt_node_output(s->r, s->prev_node, 0, other_tensor(s, k + 4)));
    CK(s, gt_storage(s->r, s->prev_storage, 48, s->s_cpu));
}

static void script_step(script *s, int k)
{
    gt_recorder *r = s->r;
    script_dup(s, k);
    int nops = 1 + (int)rnd(s, 3);
    for (int i = 0; i < nops; i++)
        script_op(s, k);
    if (rnd(s, 3) == 0) /* written again, as after a cut */
        CK(s, gt_tensor_again(r, &s->t[pick(s, s->nt)]));
    if (rnd(s, 4) == 0)
        CK(s, gt_storage(r, 1 + rnd(s, (unsigned)s->ns), 16, s->s_cpu));
    if (rnd(s, 2) == 0) /* the same few names, bound again and again */
        CK(s, gt_name(r, gt_recorder_seq(r), rnd(s, 2) ? 1 + rnd(s, 3) : pick(s, s->nt),
                      rnd(s, 2) ? "w" : "x"));
    if (rnd(s, 8) == 0) {
        gt_swap_info sw = {.tensor = pick(s, s->nt),
                           .old_storage = 1 + rnd(s, (unsigned)s->ns),
                           .new_storage = 1 + rnd(s, (unsigned)s->ns),
                           .stack = s->stack};
        CK(s, gt_storage_swap(r, &sw));
    }
    gt_backward_info b = {.api = s->s_api, .thread = s->thread, .stack = s->stack};
    gt_id bid = 0;
    uint64_t cuts = gt_recorder_cuts(r);
    CK(s, gt_backward_begin(r, &b, &bid));
    if (s->rc)
        return;
    if (gt_recorder_cuts(r) != cuts) /* cut at that call's start: what it left held */
        s->held_at_cut[s->ncut++] = gt__recorder_held_bytes(r);
    CK(s, gt_backward_root(r, bid, 0, s->nt, s->nn));
    if (rnd(s, 3) == 0)
        CK(s, gt_backward_root(r, bid, 1, pick(s, s->nt), 0));
    if (rnd(s, 3) == 0)
        CK(s, gt_backward_input(r, bid, 0, pick(s, s->nt)));
    CK(s, gt_node_exec(r, bid, s->nn));
    CK(s, gt_node_exec(r, bid, pick(s, s->nn)));
    if (s->nsaved > 0 && rnd(s, 3) == 0)
        CK(s, gt_fingerprint(r, s->saved[rnd(s, (unsigned)s->nsaved)], 1,
                             rnd(s, 2) ? bid : 0, 16, s->rng));
    if (rnd(s, 10) == 0)
        CK(s, gt_error(r, "RuntimeError", "boom", s->stack, bid, NULL));
    if (s->open_call && rnd(s, 3) == 0) {
        CK(s, gt_backward_end(r, s->open_call, 1));
        s->open_call = 0;
    }
    if (!s->open_call && rnd(s, 12) == 0)
        s->open_call = bid; /* still running over the next calls */
    else
        CK(s, gt_backward_end(r, bid, 1));
}

/* Rows of each table in one trace and not the other (both ways). */
static const char *const compared[] = {"ops",
                                       "op_args",
                                       "version_bumps",
                                       "saved_tensors",
                                       "tensors",
                                       "storages",
                                       "nodes",
                                       "edges",
                                       "node_outputs",
                                       "node_execs",
                                       "names",
                                       "backward_calls",
                                       "backward_roots",
                                       "backward_inputs",
                                       "errors",
                                       "storage_swaps",
                                       "saved_earlier",
                                       "saved_fingerprints",
                                       "strings",
                                       "frames",
                                       "stacks",
                                       "threads"};

/* Compare the tables of traces a and b; add to old[] a's rows of ops,
 * version_bumps and names before its window (kept for it). */
static void check_same(const char *a, const char *b, int64_t old[3])
{
    sqlite3 *db = db_open(a);
    char sql[256];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS o", tpath(b));
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    int64_t total = 0;
    for (size_t i = 0; i < sizeof compared / sizeof compared[0]; i++) {
        const char *t = compared[i];
        snprintf(sql, sizeof sql,
                 "SELECT (SELECT count(*) FROM (SELECT * FROM main.%s EXCEPT"
                 " SELECT * FROM o.%s)) + (SELECT count(*) FROM (SELECT * FROM o.%s"
                 " EXCEPT SELECT * FROM main.%s))",
                 t, t, t, t);
        int64_t diff = q_int(db, sql);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM main.%s", t);
        int64_t n = q_int(db, sql);
        total += n;
        if (diff)
            print_error("%s: %lld rows differ (%lld in %s)\n", t, (long long)diff,
                        (long long)n, a);
        assert_int_equal(diff, 0);
    }
    assert_true(total > 50);
    assert_int_equal(q_int(db, "SELECT (SELECT kept_from_seq FROM main.run) IS"
                               " (SELECT kept_from_seq FROM o.run) AND (SELECT"
                               " kept_from_backward FROM main.run) IS (SELECT"
                               " kept_from_backward FROM o.run)"),
                     1);
    static const char *const before[3] = {"ops", "version_bumps", "names"};
    for (int i = 0; i < 3; i++) {
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM main.%s WHERE seq < (SELECT kept_from_seq"
                 " FROM main.run)",
                 before[i]);
        old[i] += q_int(db, sql);
    }
    sqlite3_close(db);
}

static void script_free(script *s)
{
    free(s->t);
    free(s->saved);
    free(s->saved_t);
    free(s->held_at_cut);
}

/* The same scripted run cut in C (a.db) and by cut_sql (b.db): the windows
 * written every 20 calls (at an error) and at close hold the same rows. */
static void run_both(unsigned keep, int steps)
{
    script sa, sb;
    gt_recorder *a = open_keep("a.db", keep, 0), *b = open_keep("b.db", keep, NO_CAP);
    script_init(&sa, a, steps);
    script_init(&sb, b, steps);
    size_t held_max = 0;
    int64_t old[3] = {0, 0, 0};
    for (int k = 1; k <= steps; k++) {
        script_step(&sa, k);
        script_step(&sb, k);
        if (k % 20 == 0) { /* written at the next flush */
            assert_int_equal(gt_error(a, "RuntimeError", "mid", 0, 0, NULL), 0);
            assert_int_equal(gt_error(b, "RuntimeError", "mid", 0, 0, NULL), 0);
            assert_int_equal(gt_recorder_flush(a), 0);
            assert_int_equal(gt_recorder_flush(b), 0);
            check_same("a.db", "b.db", old);
        }
        size_t held = gt__recorder_held_bytes(a);
        held_max = held > held_max ? held : held_max;
        /* the frequent rows are held as blocks, not in SQLite */
        assert_int_equal(gt__recorder_held_bytes(b), 0);
    }
    if (sa.rc || sb.rc)
        print_error("%s / %s\n", gt_recorder_errmsg(a), gt_recorder_errmsg(b));
    assert_int_equal(sa.rc, 0);
    assert_int_equal(sb.rc, 0);
    assert_true(held_max > 0);
    assert_int_equal(gt_recorder_cuts(a), gt_recorder_cuts(b));
    assert_true(gt_recorder_cuts(a) >= 3);
    assert_int_equal(gt_run_end(a, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_run_end(b, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(a), 0);
    assert_int_equal(gt_recorder_close(b), 0);
    check_same("a.db", "b.db", old);
    sqlite3 *db = db_open("a.db");
    assert_string_equal(q_text(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
    /* the windows reached back: old ops, bumps and names kept for them */
    for (int i = 0; i < 3; i++)
        assert_true(old[i] > 0);
    script_free(&sa);
    script_free(&sb);
    unlink(tpath("a.db"));
    unlink(tpath("b.db"));
}

static void test_c_cut_is_sql_cut(void **state)
{
    (void)state;
    run_both(2, 400);
    run_both(20, 400);
}

/* Rows of table t in trace a that trace b lacks. */
static int64_t rows_missing(const char *a, const char *b, const char *t)
{
    sqlite3 *db = db_open(a);
    char sql[256];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS o", tpath(b));
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT * FROM main.%s EXCEPT SELECT * FROM o.%s)", t,
             t);
    int64_t n = q_int(db, sql);
    sqlite3_close(db);
    return n;
}

/* Duplicate keys in the C cut (keepcut.c): the scripted run writes each
 * op_arg output position, some input positions, each node output and each
 * new storage twice in one window, and the previous op's output, node
 * output and storage again at the next step, across the cut at its
 * backward call when one came. The rule (recorder.h, keep_last): a
 * duplicate among the held rows is dropped, the first row kept. So the run
 * with duplicates (a.db) holds, right after each cut, exactly the bytes the
 * same run without them (b.db) holds, and its windows are b's; and its
 * rows are those of the whole run without keep_last (c.db, row log: the
 * first row of a key kept), the duplicates' marks (versions 77..79,
 * storages of 32 and 48 bytes) nowhere. A duplicate the cut kept would
 * stay held (b's bytes exceeded) or keep its tensor in the window. */
static void run_dups(unsigned keep, int steps)
{
    script sa, sb, sc;
    gt_recorder *a = open_keep("a.db", keep, 0), *b = open_keep("b.db", keep, 0),
                *c = NULL;
    char err[256] = "";
    gt_recorder_options o = {.row_log = 1, .batch_events = 500};
    assert_int_equal(gt_recorder_open(tpath("c.db"), &o, err, sizeof err, &c), 0);
    script_init(&sa, a, steps);
    script_init(&sb, b, steps);
    script_init(&sc, c, steps);
    sa.dups = sc.dups = 1;
    int64_t old[3] = {0, 0, 0}, flush_cuts = 0;
    for (int k = 1; k <= steps; k++) {
        script_step(&sa, k);
        script_step(&sb, k);
        script_step(&sc, k);
        if (k % 20 == 0) { /* written at the next flush, cut first */
            uint64_t ca = gt_recorder_cuts(a), cb = gt_recorder_cuts(b);
            assert_int_equal(gt_error(a, "RuntimeError", "mid", 0, 0, NULL), 0);
            assert_int_equal(gt_error(b, "RuntimeError", "mid", 0, 0, NULL), 0);
            assert_int_equal(gt_error(c, "RuntimeError", "mid", 0, 0, NULL), 0);
            assert_int_equal(gt_recorder_flush(a), 0);
            assert_int_equal(gt_recorder_flush(b), 0);
            assert_int_equal(gt_recorder_cuts(a) - ca, gt_recorder_cuts(b) - cb);
            if (gt_recorder_cuts(a) != ca) {
                assert_int_equal(gt__recorder_held_bytes(a), gt__recorder_held_bytes(b));
                flush_cuts++;
            }
            check_same("a.db", "b.db", old);
        }
    }
    if (sa.rc || sb.rc || sc.rc)
        print_error("%s / %s / %s\n", gt_recorder_errmsg(a), gt_recorder_errmsg(b),
                    gt_recorder_errmsg(c));
    assert_int_equal(sa.rc, 0);
    assert_int_equal(sb.rc, 0);
    assert_int_equal(sc.rc, 0);
    assert_int_equal(sa.ncut, sb.ncut);
    assert_true(sa.ncut + flush_cuts >= 10); /* held bytes compared at 10 cuts or more */
    for (int64_t i = 0; i < sa.ncut; i++) {
        if (sa.held_at_cut[i] != sb.held_at_cut[i])
            print_error("cut %lld: %zu bytes held with duplicates, %zu without\n",
                        (long long)i + 1, sa.held_at_cut[i], sb.held_at_cut[i]);
        assert_int_equal(sa.held_at_cut[i], sb.held_at_cut[i]);
    }
    assert_int_equal(gt_run_end(a, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_run_end(b, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_run_end(c, GT_RUN_OK, 0, 0), 0);
    assert_int_equal(gt_recorder_close(a), 0);
    assert_int_equal(gt_recorder_close(b), 0);
    assert_int_equal(gt_recorder_close(c), 0);
    check_same("a.db", "b.db", old);
    static const char *const dup_tables[] = {"op_args", "node_outputs", "storages"};
    for (size_t i = 0; i < sizeof dup_tables / sizeof dup_tables[0]; i++) {
        int64_t n = rows_missing("a.db", "c.db", dup_tables[i]);
        if (n)
            print_error("%s: %lld rows of the window not in the whole run\n",
                        dup_tables[i], (long long)n);
        assert_int_equal(n, 0);
    }
    sqlite3 *db = db_open("a.db");
    assert_true(q_int(db, "SELECT count(*) FROM op_args") > 0);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM op_args WHERE version BETWEEN 77 AND 79"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM storages WHERE nbytes <> 16"), 0);
    sqlite3_close(db);
    script_free(&sa);
    script_free(&sb);
    script_free(&sc);
    unlink(tpath("a.db"));
    unlink(tpath("b.db"));
    unlink(tpath("c.db"));
}

static void test_c_cut_drops_duplicates(void **state)
{
    (void)state;
    run_dups(2, 400);
    run_dups(20, 400);
}

/* Memory: the rows held stay those of the window (2 to 2 + 16 calls) and
 * the old rows it references, however long the run: the most held over
 * calls 4001..5000 is no more than over calls 1..1000 (a held row not cut
 * would make it five times as much). */
static void test_held_bounded(void **state)
{
    (void)state;
    gt_recorder *r = open_keep("long.db", 2, 0);
    loop l;
    loop_init(&l, r);
    size_t early = 0, late = 0;
    for (int k = 1; k <= 5000; k++) {
        loop_step(&l, k, 0);
        size_t held = gt__recorder_held_bytes(r);
        size_t *most = k <= 1000 ? &early : k > 4000 ? &late : NULL;
        if (most && held > *most)
            *most = held;
    }
    assert_int_equal(l.rc, 0);
    assert_true(early > 0);
    if (late > early)
        print_error("held %zu bytes at most late, %zu early\n", late, early);
    assert_true(late <= early);
    assert_int_equal(gt_recorder_close(r), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_of_last_calls),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_c_cut_is_sql_cut),
        cmocka_unit_test(test_c_cut_drops_duplicates),
        cmocka_unit_test(test_held_bounded),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
