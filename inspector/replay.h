/*
 * Replay engine: rebuilds one backward call from a trace and orders its
 * nodes the way PyTorch's autograd engine runs them. Internal to the
 * inspector (diagnose.c and the unit tests use it); the public contract is
 * diagnose.h.
 *
 * Invariants
 *   - The graph of a backward call is every node reachable from its roots
 *     (backward_roots.node) along edges (edges.next); several roots behave
 *     like PyTorch's GraphRoot: one virtual node with an edge to each root.
 *   - Dependencies are counted per edge, as the engine does: a node becomes
 *     ready when every edge into it from the graph has been executed.
 *   - With inputs= (backward_inputs), only the nodes the engine runs are in
 *     the order: those with a path to an input's node (and that node unless
 *     the call is torch.autograd.grad).
 *   - Among ready nodes the one with the higher sequence_nr runs first;
 *     AccumulateGrad nodes (sequence_nr UINT64_MAX in the engine, which
 *     does not fit the column: stored as NULL, or recognised by `variable`)
 *     come first; ties go to the lower node id, so the order is
 *     deterministic.
 *   - Version counters only grow: the value of a counter at event seq P is
 *     the largest value it had at the save or after a bump (predicted or
 *     observed) of any tensor sharing it before P.
 *
 * Only the rows of the graph being replayed are read: memory does not grow
 * with the rest of the trace. Queries use the indexes of schema/indexes.sql
 * when present and still work (more slowly) on a killed trace without them.
 */
#ifndef GT_INSPECTOR_REPLAY_H
#define GT_INSPECTOR_REPLAY_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include <gradtrace/format.h> /* enum gt_backward_status */

#include <gradtrace/finding.h>
#include <gradtrace/trace.h>
#include "gtmap.h"

typedef struct gt_replay_node {
    int64_t id;          /* nodes.id */
    int64_t seq;         /* nodes.seq, 0 if the node row is missing */
    int64_t op;          /* nodes.op (forward op that created it), 0 if unknown */
    int64_t name;        /* nodes.name (strings.id), 0 if unknown */
    uint64_t priority;   /* sequence_nr as the engine compares it */
    int64_t exec_seq;    /* node_execs.seq in this backward, 0 if not recorded */
    int accumulate_grad; /* 1 for a node with `variable` (AccumulateGrad) */
} gt_replay_node;

typedef struct gt_replay {
    int64_t backward; /* backward_calls.id */
    int64_t seq;      /* backward_calls.seq */
    int64_t end_seq;  /* backward_calls.end_seq, 0 if it never ended */
    int64_t stack;    /* backward_calls.stack, 0 if none */
    int retain_graph;
    int create_graph;
    int status;     /* enum gt_backward_status */
    int has_execs;  /* 1 if node_execs rows exist for this call */
    int has_inputs; /* 1 if the call has inputs= (backward_inputs): only
                     * the nodes leading to them are in `order` */
    int grad_api;   /* 1 for torch.autograd.grad (captures, does not
                     * run the inputs' own nodes) */
    size_t n;       /* nodes in engine order */
    gt_replay_node *order;
    size_t holders; /* who frees it: the caller and the replayer's cache */
} gt_replay;

/* A reusable replay context over one trace connection: holds the prepared
 * statements. Not thread-safe; one per connection user. */
typedef struct gt_replayer gt_replayer;

/* Prepare a replayer on trace `t`'s connection. Returns 0, or a negative
 * GT_E* code with the message on t (gt_trace_errmsg) and *out untouched.
 * Every later call of the replayer reports its errors on t too. */
GT_WARN_UNUSED int gt__replayer_new(gt_trace *t, gt_replayer **out /* OUT */);

/* Free; accepts NULL. */
void gt__replayer_free(gt_replayer *rp);

/* Rebuild backward call `backward` and compute its engine order into *out
 * (free with gt__replay_free; read-only: the replayer keeps the last ones
 * and hands them out again for the same call). Returns 0, GT_EINVAL if there
 * is no such backward call, or another negative GT_E* code, with the
 * message on the replayer's trace. */
GT_WARN_UNUSED int gt__replay_backward(gt_replayer *rp, int64_t backward,
                                       gt_replay **out /* OUT */);

/* Free a replay; accepts NULL. */
void gt__replay_free(gt_replay *r);

/* Index of node `id` in r->order, or -1 if the backward does not reach it. */
long gt__replay_find(const gt_replay *r, int64_t id);

/* Version arithmetic for version counter `vc` (tensors.version_counter):
 * starting from `from_version` at event `from_seq` (a save), collect every
 * bump of any tensor sharing the counter with from_seq < seq < to_seq, in
 * seq order, into *bumps and *n (malloc'd, NULL when none; the caller
 * frees), and the counter's value just before `to_seq` into *version: the
 * largest of from_version and those bumps. Returns 0 or a negative GT_E*
 * code with the message on the replayer's trace; the out-parameters are
 * written only on success. */
GT_WARN_UNUSED int gt__replay_counter(gt_replayer *rp, int64_t vc, int64_t from_seq,
                                      int64_t from_version, int64_t to_seq,
                                      int64_t *version /* OUT */,
                                      gt_mutation **bumps /* OUT */, size_t *n /* OUT */);

/* The bumps of many version counters over one
 * window of events, read in one query: the batch form of the arithmetic
 * above, used by diagnose for all the saved tensors of a backward call. */
typedef struct gt_counters gt_counters;

/* Load every observation of the `n` counters `vcs` with from_seq < seq <
 * to_seq. Returns 0 or a negative GT_E* code with the message on the
 * replayer's trace. */
GT_WARN_UNUSED int gt__counters_load(gt_replayer *rp, const int64_t *vcs, size_t n,
                                     int64_t from_seq, int64_t to_seq,
                                     gt_counters **out /* OUT */);

/* gt__replay_counter over loaded observations; the window must lie within
 * the loaded one. Returns 0 or GT_ENOMEM (out-parameters untouched). */
GT_WARN_UNUSED int gt__counters_window(const gt_counters *c, int64_t vc, int64_t from_seq,
                                       int64_t from_version, int64_t to_seq,
                                       int64_t *version /* OUT */,
                                       gt_mutation **bumps /* OUT */,
                                       size_t *n /* OUT */);

/* Free; accepts NULL. */
void gt__counters_free(gt_counters *c);

/* Choose between reading rows through each of the tensors counted by the
 * prepared statement `size` (JSON array `list` bound as ?1, a count limit
 * as ?2) and scanning
 * the events of the window (from_seq, to_seq) of trace t: 1 for the window
 * scan, 0 for the per-tensor plan, or GT_ECORRUPT with the message on t. */
GT_WARN_UNUSED int gt__pick_plan(gt_trace *t, sqlite3_stmt *size, const char *list,
                                 int64_t from_seq, int64_t to_seq);

/* ---- an int64 -> int64 map (any key, 0 included), shared with diagnose.c */

typedef struct gt_imap {
    gt_map m;   /* common/gtmap.h: one id map for the whole code */
    size_t len; /* keys held */
} gt_imap;

/* Look `key` up; returns 1 and writes *val if present, else 0. */
int gt__imap_get(const gt_imap *m, int64_t key, int64_t *val /* OUT */);

/* Insert or replace. Returns 0 or GT_ENOMEM (map unchanged). */
GT_WARN_UNUSED int gt__imap_put(gt_imap *m, int64_t key, int64_t val);

/* Free the slots; the map is empty and reusable afterwards. */
void gt__imap_clear(gt_imap *m);

#endif
