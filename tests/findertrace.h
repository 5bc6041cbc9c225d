/*
 * Events of a hand-built trace for the diagnosis's unit tests (after
 * tracebuilder.h): tensors, ops, nodes, saves, in-place writes, backward
 * calls, names and errors, and diagnose() which runs gt_diagnose on the
 * file and prints each finding. Define TB_PATH_PREFIX and TB_SOURCE_FILE
 * and include <cmocka.h> first.
 */
#ifndef GT_TESTS_FINDERTRACE_H
#define GT_TESTS_FINDERTRACE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <gradtrace/recorder.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>
#include "tracebuilder.h"

/* A float32 1-d tensor of n elements at `offset` in `storage`. */
static inline void tb_tensor(tb *b, gt_id id, gt_id storage, int64_t n, int64_t offset,
                             int rg, int leaf, gt_id alias_of, int shares, gt_id vc)
{
    tb_tensor_1d(b,
                 (gt_tensor_info){.id = id,
                                  .storage = storage,
                                  .storage_offset = offset,
                                  .requires_grad = rg,
                                  .is_leaf = leaf,
                                  .alias_of = alias_of,
                                  .shares_version = shares,
                                  .version_counter = vc},
                 n);
}

static inline int64_t tb_op(tb *b, const char *name, int phase, int line,
                            const char *code)
{
    return tb_op_at(b, name, phase, tb_stack(b, line, code));
}

static inline void tb_node(tb *b, gt_id id, const char *name, int64_t op, int64_t seqnr)
{
    tb_node_named(b, (gt_node_info){.id = id, .op = op, .sequence_nr = seqnr}, name);
}

static inline int64_t tb_save(tb *b, gt_id node, const char *slot, gt_id tensor,
                              int64_t version)
{
    int64_t seq;
    assert_int_equal(
        gt_saved_tensor(b->r, node, tb_str(b, slot), tensor, version, 0, 12, &seq), 0);
    return seq;
}

/* An in-place op at `line` writing `tensor`, bumping its counter to `v`. */
static inline int64_t tb_mutate(tb *b, const char *op, int line, const char *code,
                                gt_id tensor, int64_t v)
{
    int64_t seq = tb_op(b, op, GT_PHASE_FORWARD, line, code);
    assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_MUTATED, 0, tensor, v - 1), 0);
    assert_int_equal(gt_version_bump(b->r, seq, tensor, v, 0, NULL), 0);
    return seq;
}

static inline gt_id tb_backward(tb *b, gt_id root, int retain, int line)
{
    return tb_backward_from(b, "Tensor.backward", retain,
                            tb_stack(b, line, "loss.backward()"), 1, &root);
}

/* Name `tensor` as the user's variable `name`, seen at the latest event. */
static inline void tb_name(tb *b, gt_id tensor, const char *name)
{
    assert_int_equal(gt_name(b->r, gt_recorder_seq(b->r), tensor, name), 0);
}

/* Backward call `bw` raised a RuntimeError `msg` at `line` (`code`): the
 * error, then the end of the failed call. */
static inline void tb_backward_error(tb *b, gt_id bw, int line, const char *code,
                                     const char *msg)
{
    assert_int_equal(
        gt_error(b->r, "RuntimeError", msg, tb_stack(b, line, code), bw, NULL), 0);
    assert_int_equal(gt_backward_end(b->r, bw, 0), 0);
}

static inline void tb_close(tb *b, int ended)
{
    if (ended) {
        tb_end(b, GT_RUN_EXCEPTION, 1);
        return;
    }
    assert_int_equal(gt_recorder_close(b->r), 0); /* a killed recording */
    b->r = NULL;
}

static inline gt_findings *diagnose(const char *path, int64_t backward, int partial)
{
    gt_trace *t;
    gt_findings *f = NULL;
    gt_diagnose_options o = {.backward = backward};
    assert_int_equal(gt_trace_open(path, &t), 0);
    assert_int_equal(gt_trace_partial(t), partial);
    int rc = gt_diagnose(t, &o, &f);
    if (rc)
        printf("  gt_diagnose: %s\n", gt_trace_errmsg(t));
    assert_int_equal(rc, 0);
    gt_trace_close(t);
    for (size_t i = 0; i < f->n; i++)
        printf("  finding %zu: %s node %lld tensor %lld v%lld->v%lld (%zu writes) ftf %d "
               "match %d: %s\n",
               i, gt_finding_kind_name(f->v[i].kind), (long long)f->v[i].node,
               (long long)f->v[i].tensor, (long long)f->v[i].saved_version,
               (long long)f->v[i].version_at_backward, f->v[i].n_mutations,
               f->v[i].first_to_fail, f->v[i].matches_error, f->v[i].suggestion);
    return f;
}

#endif
