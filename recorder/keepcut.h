/*
 * The flight recorder's cut of the rows it holds as blocks (keep_last
 * without max_bytes, recorder.c): the frequent row kinds (ops, op_args,
 * tensors, storages, version_bumps, nodes, edges, node_outputs,
 * saved_tensors, node_execs, names) are not inserted into the in-memory
 * database during the run but appended, in row-log blocks
 * (common/rowlog.h), to one buffer; each window cut runs here in C over
 * those rows, with the keep rules of recorder.c's cut_sql, and re-encodes
 * the kept rows into a fresh buffer. The direct tables (backward calls,
 * roots, inputs, storage swaps, saved_earlier, saved_fingerprints, ...)
 * stay in SQLite, cut there with what this cut hands back.
 *
 * Rules (C = the last dropped seq), the same as cut_sql's on the rows the
 * tables would hold (the first row of each key: a later duplicate is one
 * SQLite would have refused or ignored, and is dropped here):
 *   nodes kept: recorded, run (node_execs) or saved (saved_tensors) after
 *     C, the nodes of the kept calls' roots, and every node their edges
 *     reach; their edges, outputs and saved tensors;
 *   old bumps kept: bumps at or before C of a tensor sharing the version
 *     counter of a tensor saved at or before C by a kept node, after the
 *     save;
 *   ops kept: after C, the op of a kept node or kept old bump, the op that
 *     made a kept tensor;
 *   tensors kept: recorded after C, named by a kept op's arguments (ops
 *     after C, or kept for a node or a bump), a kept node's saved tensors,
 *     outputs and variable, a kept bump, the direct rows (in->tensors);
 *     then the bases of views and the version counters they name;
 *   op_args: of ops after C; of older kept ops, those naming kept tensors;
 *   node_execs: after C; names: of kept tensors, before C only the latest
 *     of each (tensor, name);
 *   storages: dropped if recorded (storage_seq) at or before C and named
 *     by no kept tensor or kept storage swap.
 * Cost: one pass to read the rows and a few over them, hash maps, no
 * quadratic step: proportional to the rows held. Duplicates of node
 * outputs, op_args and names are looked for only among the rows that may
 * be kept (the rows of one key are kept or dropped together), so the
 * dropped ops' args are never hashed. Measured (bench_overhead_ir.py, 100
 * steps, keep_last 2): 1.96 M instructions a cut on the MLP (about 7 k
 * rows held, ~280 a row), 1.76 M on the CNN.
 */
#ifndef GT_RECORDER_KEEPCUT_H
#define GT_RECORDER_KEEPCUT_H

#include <stddef.h>
#include <stdint.h>

#include "gtmap.h"
#include "strbuf.h"

/* A growable list of int64. Start from {0}; free(p) when done. */
typedef struct gt__i64v {
    int64_t *p;
    size_t n, cap;
} gt__i64v;

/* Append x. Returns 0, or -1 when out of memory (v unchanged). */
int gt__i64v_push(gt__i64v *v, int64_t x);

/* What the cut needs from the direct tables (read by recorder.c after it
 * picked the kept backward calls). */
typedef struct gt__cut_in {
    int64_t c;              /* the last dropped seq */
    gt__i64v root_nodes;    /* nodes of the kept calls' roots */
    gt__i64v tensors;       /* tensors of the kept roots, inputs and swaps */
    gt__i64v swap_storages; /* old and new storages of the kept swaps */
    gt__i64v saved_refs;    /* saved seqs saved_earlier and fingerprints name */
    gt__i64v dropped_refs;  /* OUT: those of saved_refs no kept row has */
} gt__cut_in;

/*
 * Cut the blocks in *held (as flush_buf appends them) to the rows the
 * rules keep: *held is replaced by a buffer of the kept rows, each kind
 * in its order, re-encoded in full groups; storage_seq (storage id -> the
 * seq at which it was recorded) loses the dropped storages;
 * in->dropped_refs gets the saved_refs whose saved_tensors row is not kept.
 * Returns 0, GT_ENOMEM (then *held is unchanged) or GT_ECORRUPT (*held
 * holds bytes that are no block: a bug).
 */
int gt__cut_held(gt_strbuf *held, gt__cut_in *in, gt_map *storage_seq);

#endif
