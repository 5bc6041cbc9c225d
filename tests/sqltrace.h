/*
 * Hand-built traces for the sql and info tests, written through the
 * recorder API (never raw SQL), and helpers that run a gradtrace subcommand
 * with its stdout/stderr captured. Include after <cmocka.h>.
 *
 * The seed trace mirrors examples/seed_class_weights.py: class_weights
 * (float32 [3], storage 1, version counter 1) is saved by NllLossBackward0
 * in slot 'weight' at version 0, then bumped six times through select views
 * (tensors 5, 6, 7, sharing its counter) on line 44 (mul_ then copy_ per
 * class), before loss.backward() on line 47 raises a RuntimeError.
 */
#ifndef GT_TESTS_SQLTRACE_H
#define GT_TESTS_SQLTRACE_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gradtrace/recorder.h>

#define SEED_FILE "examples/seed.py"

typedef struct tb {
    gt_recorder *r;
    gt_id thread;
} tb;

/* What the seed builder recorded, for the tests to compare against. */
typedef struct seed_ids {
    int64_t weight_saved_seq; /* saved_tensors.seq of NllLossBackward0.weight */
    int64_t bump_seq[6];      /* the six version_bumps.seq, in order */
    int64_t bump_op[6];       /* their ops.seq */
    int64_t backward_seq;     /* backward_calls.seq of backward 1 */
    int64_t error_seq;        /* errors.seq */
    int64_t last_seq;         /* the last event seq */
} seed_ids;

static inline void tb_open(tb *b, const char *path)
{
    gt_recorder_options o = {0};
    char err[256];
    o.overwrite = 1;
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof err, &b->r), GT_OK);
    assert_int_equal(gt_intern_thread(b->r, 4242, "MainThread", &b->thread), GT_OK);
}

static inline gt_id tb_str(tb *b, const char *s)
{
    gt_id id;
    assert_int_equal(gt_intern_string(b->r, s, strlen(s), &id), GT_OK);
    return id;
}

/* A stack whose innermost frame is a user line of SEED_FILE. */
static inline gt_id tb_user_stack(tb *b, int line, const char *code)
{
    gt_id f, s;
    assert_int_equal(gt_intern_frame(b->r, SEED_FILE, line, "<module>", code, &f), GT_OK);
    assert_int_equal(gt_intern_stack(b->r, 0, f, f, &s), GT_OK);
    return s;
}

/* The user line plus an engine frame inside it (torch/_tensor.py). */
static inline gt_id tb_engine_stack(tb *b, int line, const char *code)
{
    gt_id uf, ef, us, s;
    assert_int_equal(gt_intern_frame(b->r, SEED_FILE, line, "<module>", code, &uf),
                     GT_OK);
    assert_int_equal(gt_intern_stack(b->r, 0, uf, uf, &us), GT_OK);
    assert_int_equal(gt_intern_frame(b->r, "torch/_tensor.py", 626, "backward",
                                     "torch.autograd.backward(", &ef),
                     GT_OK);
    assert_int_equal(gt_intern_stack(b->r, us, ef, uf, &s), GT_OK);
    return s;
}

static inline int64_t tb_op(tb *b, const char *name, gt_id stack, int phase)
{
    gt_op_info o = {0};
    int64_t seq;
    o.name = tb_str(b, name);
    o.phase = phase;
    o.grad_mode = 1;
    o.thread = b->thread;
    o.stack = stack;
    assert_int_equal(gt_op(b->r, &o, &seq), GT_OK);
    return seq;
}

/* A tensor of `ndim` (0 or 1, 2) sizes d0, d1 on its storage. */
static inline void tb_tensor(tb *b, gt_id id, gt_id storage, const char *dtype, int ndim,
                             int64_t d0, int64_t d1, int64_t created_by, gt_id alias_of,
                             gt_id vc)
{
    int64_t shape[2] = {d0, d1}, strides[2] = {d1 ? d1 : 1, 1};
    gt_tensor_info t = {0};
    t.id = id;
    t.storage = storage;
    t.dtype = tb_str(b, dtype);
    t.ndim = ndim;
    t.shape = shape;
    t.strides = strides;
    t.is_leaf = created_by == 0;
    t.created_by = created_by;
    t.alias_of = alias_of;
    t.shares_version = alias_of != 0;
    t.version_counter = vc;
    assert_int_equal(gt_tensor(b->r, &t), GT_OK);
}

static inline void tb_node(tb *b, gt_id id, const char *name, int64_t op,
                           int64_t sequence_nr)
{
    gt_node_info n = {0};
    n.id = id;
    n.name = tb_str(b, name);
    n.op = op;
    n.sequence_nr = sequence_nr;
    n.thread = b->thread;
    assert_int_equal(gt_node(b->r, &n), GT_OK);
}

static inline int64_t tb_saved(tb *b, gt_id node, const char *slot, gt_id tensor,
                               int64_t version, int is_output, int64_t nbytes)
{
    int64_t seq;
    assert_int_equal(gt_saved_tensor(b->r, node, tb_str(b, slot), tensor, version,
                                     is_output, nbytes, &seq),
                     GT_OK);
    return seq;
}

static inline int64_t tb_bump(tb *b, int64_t op, gt_id tensor, int64_t version)
{
    int64_t seq;
    assert_int_equal(gt_version_bump(b->r, op, tensor, version, 0, &seq), GT_OK);
    return seq;
}

static inline gt_id tb_backward(tb *b, gt_id stack, int retain_graph)
{
    gt_backward_info bi = {0};
    gt_id id;
    bi.api = tb_str(b, "Tensor.backward");
    bi.retain_graph = retain_graph;
    bi.thread = b->thread;
    bi.stack = stack;
    assert_int_equal(gt_backward_begin(b->r, &bi, &id), GT_OK);
    return id;
}

static inline void tb_run(tb *b, const char *argv_json)
{
    gt_run_info ri = {0};
    ri.engine = "pytorch";
    ri.engine_version = "2.13.0+cpu";
    ri.python_version = "3.11.7";
    ri.argv_json = argv_json;
    ri.cwd = "/work";
    ri.host = "testhost";
    ri.pid = 4242;
    ri.rank = -1;
    assert_int_equal(gt_run_set(b->r, &ri), GT_OK);
}

/* The seed story (see the top of this file). With `close` 0 the recorder is
 * flushed but left open and the run never ended: a partial trace (call
 * gt_recorder_close on *open_out later). */
static inline void build_seed(const char *path, seed_ids *ids, int close,
                              gt_recorder **open_out)
{
    tb b;
    int64_t seq;
    tb_open(&b, path);
    tb_run(&b, "[\"examples/seed.py\", \"--steps\", \"1\"]");
    gt_id cpu = tb_str(&b, "cpu");
    assert_int_equal(gt_storage(b.r, 1, 12, cpu), GT_OK);
    assert_int_equal(gt_storage(b.r, 2, 192, cpu), GT_OK);
    assert_int_equal(gt_storage(b.r, 3, 128, cpu), GT_OK);
    assert_int_equal(gt_storage(b.r, 4, 4, cpu), GT_OK);

    tb_tensor(&b, 1, 1, "float32", 1, 3, 0, 0, 0, 0); /* class_weights */
    assert_int_equal(gt_name(b.r, 1, 1, "class_weights"), GT_OK);
    tb_tensor(&b, 3, 3, "int64", 1, 16, 0, 0, 0, 0); /* target */
    assert_int_equal(gt_name(b.r, 2, 3, "target"), GT_OK);

    gt_id s37 = tb_user_stack(&b, 37, "log_probs = F.log_softmax(model(x), dim=1)");
    seq = tb_op(&b, "aten::_log_softmax", s37, GT_PHASE_FORWARD);
    tb_tensor(&b, 2, 2, "float32", 2, 16, 3, seq, 0, 0); /* log_probs */
    tb_node(&b, 1, "LogSoftmaxBackward0", seq, 10);
    tb_saved(&b, 1, "result", 2, 0, 1, 192);
    assert_int_equal(gt_name(b.r, seq, 2, "log_probs"), GT_OK);

    gt_id s38 = tb_user_stack(
        &b, 38, "loss = F.nll_loss(log_probs, target, weight=class_weights)");
    seq = tb_op(&b, "aten::nll_loss_forward", s38, GT_PHASE_FORWARD);
    assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_INPUT, 0, 2, 0), GT_OK);
    assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_INPUT, 1, 3, 0), GT_OK);
    assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_INPUT, 2, 1, 0), GT_OK);
    tb_tensor(&b, 4, 4, "float32", 0, 0, 0, seq, 0, 0); /* loss */
    tb_node(&b, 2, "NllLossBackward0", seq, 11);
    assert_int_equal(gt_edge(b.r, 2, 0, 1, 0), GT_OK);
    assert_int_equal(gt_edge(b.r, 2, 1, 0, 0), GT_OK);
    assert_int_equal(gt_node_output(b.r, 2, 0, 4), GT_OK);
    tb_saved(&b, 2, "self", 2, 0, 0, 192);
    tb_saved(&b, 2, "target", 3, 0, 0, 128);
    ids->weight_saved_seq = tb_saved(&b, 2, "weight", 1, 0, 0, 12);
    assert_int_equal(gt_name(b.r, seq, 4, "loss"), GT_OK);

    gt_id s44 = tb_user_stack(&b, 44, "class_weights[i] *= 1.0 + share");
    int64_t v = 0;
    for (int i = 0; i < 3; i++) {
        seq = tb_op(&b, "aten::select.int", s44, GT_PHASE_FORWARD);
        assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_INPUT, 0, 1, v), GT_OK);
        tb_tensor(&b, 5 + i, 1, "float32", 0, 0, 0, seq, 1, 1);
        seq = tb_op(&b, "aten::mul_.Tensor", s44, GT_PHASE_FORWARD);
        assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_MUTATED, 0, 5 + i, v), GT_OK);
        ids->bump_op[2 * i] = seq;
        ids->bump_seq[2 * i] = tb_bump(&b, seq, 5 + i, ++v);
        seq = tb_op(&b, "aten::copy_", s44, GT_PHASE_FORWARD);
        assert_int_equal(gt_op_arg(b.r, seq, GT_ROLE_MUTATED, 0, 5 + i, v), GT_OK);
        ids->bump_op[2 * i + 1] = seq;
        ids->bump_seq[2 * i + 1] = tb_bump(&b, seq, 5 + i, ++v);
    }

    gt_id s47 = tb_engine_stack(&b, 47, "loss.backward()");
    gt_id bw = tb_backward(&b, s47, 0);
    assert_int_equal(bw, 1);
    ids->backward_seq = gt_recorder_seq(b.r);
    assert_int_equal(gt_backward_root(b.r, bw, 0, 4, 2), GT_OK);
    assert_int_equal(
        gt_error(b.r, "RuntimeError",
                 "one of the variables needed for gradient computation has "
                 "been modified by an inplace operation: "
                 "[torch.FloatTensor [3]] is at version 6; expected version 0 "
                 "instead.\nHint: enable anomaly detection",
                 s47, bw, &ids->error_seq),
        GT_OK);
    assert_int_equal(gt_backward_end(b.r, bw, 0), GT_OK);
    ids->last_seq = gt_recorder_seq(b.r);
    if (close) {
        assert_int_equal(gt_run_end(b.r, GT_RUN_EXCEPTION, 1, 0), GT_OK);
        assert_int_equal(gt_recorder_close(b.r), GT_OK);
    } else {
        assert_int_equal(gt_recorder_flush(b.r), GT_OK);
        *open_out = b.r;
    }
}

/* For a test file whose tests share one finished seed trace: seed_path
 * (/tmp/gt_<prefix>_<pid>.db), its seed_ids `seed`, and the cmocka group
 * fixtures setup_seed (builds it) and teardown_seed (removes it). */
#define SQLTRACE_SEED_FIXTURE(prefix)                                                    \
    static char seed_path[64];                                                           \
    static seed_ids seed;                                                                \
    static int setup_seed(void **state)                                                  \
    {                                                                                    \
        (void)state;                                                                     \
        snprintf(seed_path, sizeof seed_path, "/tmp/gt_" prefix "_%d.db",                \
                 (int)getpid());                                                         \
        build_seed(seed_path, &seed, 1, NULL);                                           \
        return 0;                                                                        \
    }                                                                                    \
    static int teardown_seed(void **state)                                               \
    {                                                                                    \
        (void)state;                                                                     \
        unlink(seed_path);                                                               \
        return 0;                                                                        \
    }

#include "captured.h"

#endif
