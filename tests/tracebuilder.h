/*
 * The start of a tiny trace builder for tests that write traces by hand
 * through the recorder API (findertrace.h's finder tests, test_replay,
 * test_memory, test_unused): a recorder handle with float32, cpu and one
 * thread interned, helpers to intern a string and a one-frame user stack,
 * and the events every such trace has (a 1-d tensor, a forward op, a node,
 * a backward call, the run's end) with what they share filled in. Each
 * test file adds the shapes of events it needs on top.
 *
 * Define before including (after <cmocka.h>):
 *   TB_PATH_PREFIX  trace files are /tmp/<prefix>_<pid>_<name>.db
 *   TB_SOURCE_FILE  the file name of every user frame, e.g. "model.py"
 */
#ifndef GT_TESTS_TRACEBUILDER_H
#define GT_TESTS_TRACEBUILDER_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/recorder.h>

#if !defined(TB_PATH_PREFIX) || !defined(TB_SOURCE_FILE)
#error "define TB_PATH_PREFIX and TB_SOURCE_FILE before including tracebuilder.h"
#endif

typedef struct tb {
    gt_recorder *r;
    char path[256];
    gt_id dtype, thread, cpu;
} tb;

/* Create the trace for `name` (overwriting) and intern float32, cpu and
 * thread 1 "main". */
static inline void tb_open(tb *b, const char *name)
{
    gt_recorder_options o = {.overwrite = 1};
    char err[256];
    snprintf(b->path, sizeof b->path, "/tmp/" TB_PATH_PREFIX "_%d_%s.db", (int)getpid(),
             name);
    assert_int_equal(gt_recorder_open(b->path, &o, err, sizeof err, &b->r), 0);
    assert_int_equal(gt_intern_string(b->r, "float32", 7, &b->dtype), 0);
    assert_int_equal(gt_intern_string(b->r, "cpu", 3, &b->cpu), 0);
    assert_int_equal(gt_intern_thread(b->r, 1, "main", &b->thread), 0);
}

static inline gt_id tb_str(tb *b, const char *s)
{
    gt_id id;
    assert_int_equal(gt_intern_string(b->r, s, strlen(s), &id), 0);
    return id;
}

/* A stack of one user frame: TB_SOURCE_FILE:line in <module>. */
static inline gt_id tb_stack(tb *b, int line, const char *code)
{
    gt_id f, s;
    assert_int_equal(gt_intern_frame(b->r, TB_SOURCE_FILE, line, "<module>", code, &f),
                     0);
    assert_int_equal(gt_intern_stack(b->r, 0, f, f, &s), 0);
    return s;
}

/* Tensor t, float32 and 1-d of n elements (t's dtype, ndim, shape and
 * strides are filled in). */
static inline void tb_tensor_1d(tb *b, gt_tensor_info t, int64_t n)
{
    int64_t shape[1] = {n}, strides[1] = {1};
    t.dtype = b->dtype;
    t.ndim = 1;
    t.shape = shape;
    t.strides = strides;
    assert_int_equal(gt_tensor(b->r, &t), 0);
}

/* An op named `name` in `phase`, grad mode on, at `stack`; its seq. */
static inline int64_t tb_op_at(tb *b, const char *name, int phase, gt_id stack)
{
    gt_op_info o = {.name = tb_str(b, name),
                    .phase = phase,
                    .grad_mode = 1,
                    .thread = b->thread,
                    .stack = stack};
    int64_t seq;
    assert_int_equal(gt_op(b->r, &o, &seq), 0);
    return seq;
}

/* Node n named `name` (its name and thread are filled in). */
static inline void tb_node_named(tb *b, gt_node_info n, const char *name)
{
    n.name = tb_str(b, name);
    n.thread = b->thread;
    assert_int_equal(gt_node(b->r, &n), 0);
}

/* A backward call through `api` (retain_graph `retain`) at `stack` from
 * the n roots, begun and not ended; its id. */
static inline gt_id tb_backward_from(tb *b, const char *api, int retain, gt_id stack,
                                     int n, const gt_id *roots)
{
    gt_backward_info bi = {.api = tb_str(b, api),
                           .retain_graph = retain,
                           .thread = b->thread,
                           .stack = stack};
    gt_id id;
    assert_int_equal(gt_backward_begin(b->r, &bi, &id), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(gt_backward_root(b->r, id, i, 0, roots[i]), 0);
    return id;
}

/* End the run (`status`, GT_RUN_*, and the exit code) and close the
 * recorder. */
static inline void tb_end(tb *b, int status, int exit_code)
{
    assert_int_equal(gt_run_end(b->r, status, exit_code, 0), 0);
    assert_int_equal(gt_recorder_close(b->r), 0);
    b->r = NULL;
}

#endif
