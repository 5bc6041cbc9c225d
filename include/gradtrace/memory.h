/*
 * The memory a backward call holds: every tensor saved for backward by the
 * nodes it can reach, at the moment it starts, with each storage counted
 * once (a storage's bytes, however many views of it were saved).
 *
 * What a call holds: the saved tensors (saved_tensors) of every node
 * reachable from its roots' nodes along edges, less the nodes an earlier
 * backward call ran without retain_graph or create_graph (their saved
 * tensors were freed then). A saved tensor on a storage counts the storage's
 * bytes (storages.nbytes); one with no recorded tensor or storage counts its
 * own nbytes, alone.
 *
 * Attribution: each storage is counted once, with the first saved tensor
 * that holds it (in the order they were saved); the groups (by module, by
 * line, by node type) therefore add up to the total.
 *
 * Modules: the recorder keeps no module objects, so a module path is made
 * from what the trace has. Each forward op's Python stack holds the
 * `Class.forward` frames of the modules it runs in; a parameter or buffer an
 * op reads carries the name the recorder bound at the backward call
 * (`model.layer1.0.conv1.weight`), which names the innermost module
 * (`model.layer1.0.conv1`) and, one component less per frame, the modules
 * around it. A call of a module with no parameter of its own gets its
 * parent's path and the attribute its caller's line calls
 * (`out = self.relu(out)` gives `.relu`), or in a container calling its
 * children by index (nn.Sequential) the number after the previous child's
 * (`model.1` after `model.0`), else its class in angle brackets
 * (`model.<ReLU>`); a module whose path no parameter names is `<Class>`. Ops outside any
 * module's forward have the empty path.
 *
 * Everything is read through the trace's handle; errors follow trace.h (a
 * negative GT_E* code, the message on the trace).
 */
#ifndef GT_INSPECTOR_MEMORY_H
#define GT_INSPECTOR_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <graphviz/cgraph.h>

#include <gradtrace/error.h>

#include "strbuf.h"
#include <gradtrace/trace.h>

/* Rows of each table the text output shows by default (--top). */
#define GT_MEMORY_DEFAULT_TOP 10

typedef struct gt_memory_options {
    int64_t backward; /* a backward_calls.id; 0: the call holding the most */
    int all;          /* 1: every backward call, in call order */
} gt_memory_options;

/* One group of a breakdown (a module path, a line, a node type). */
typedef struct gt_mem_group {
    char *key;         /* module path ("" outside modules), "file:line", node name */
    char *code;        /* by line: the source line; else NULL */
    int64_t bytes;     /* bytes of the storages first held by this group */
    int64_t saved;     /* saved tensors in the group (every one) */
    int64_t first_seq; /* seq of the group's first saved tensor */
} gt_mem_group;

/* One saved tensor: the first holder of its storage. */
typedef struct gt_mem_tensor {
    int64_t seq;     /* saved_tensors.seq */
    int64_t node;    /* nodes.id */
    char *node_name; /* e.g. ConvolutionBackward0 */
    char *slot;      /* input, weight, result ... */
    int64_t tensor;  /* tensors.id, 0 if not matched */
    int64_t storage; /* storages.id, 0 if none */
    int64_t bytes;   /* the storage's bytes (counted), else the tensor's */
    int64_t nbytes;  /* the saved tensor's own bytes (saved_tensors.nbytes), -1 unknown */
    int64_t holders; /* saved tensors of this call holding the storage */
    char *dtype, *shape, *module;
    char *file; /* user line of the node's op (relative to run.cwd when under it) */
    int64_t line;
    char *code;
} gt_mem_tensor;

/* What recomputing one module (activation checkpointing) would free. */
typedef struct gt_mem_module {
    char *path;
    int64_t held;   /* storages any of its nodes hold */
    int64_t kept;   /* ... made outside it (its inputs, parameters): kept */
    int64_t shared; /* ... made inside it but also held by nodes outside it */
    int64_t frees;  /* held - kept - shared: made inside, held only inside */
} gt_mem_module;

/* A point of the forward: after the saved tensor at `seq`, `bytes` held. */
typedef struct gt_mem_point {
    int64_t seq;
    int64_t bytes;
    size_t group; /* index into by_module of that saved tensor's module */
} gt_mem_point;

typedef struct gt_mem_call {
    int64_t id, seq;
    char *api, *status;
    char *file; /* user line of the call */
    int64_t line;
    char *code;
    int64_t bytes;       /* held for this call, storages once */
    int64_t param_bytes; /* ... of storages a leaf requiring grad (a
                            parameter) was seen on */
    int64_t saved;       /* saved tensors */
    int64_t storages;    /* distinct storages (and unmatched saved tensors) */
    int64_t live_bytes;  /* every graph's saved tensors not yet freed at its
                            start (this call's and others'; an upper bound:
                            a graph dropped unused is not recorded) */
    int detailed;        /* 1: the arrays below are filled */
    gt_mem_group *by_module, *by_line, *by_node;
    size_t n_module, n_line, n_node; /* each sorted by bytes, descending */
    gt_mem_tensor *tensors;          /* every storage's first holder, by bytes */
    size_t n_tensors;
    gt_mem_module *modules; /* every module and its parents, by frees */
    size_t n_modules;
    gt_mem_point *timeline; /* one point per saved tensor, in save order */
    size_t n_points;
} gt_mem_call;

typedef struct gt_memory {
    gt_mem_call *calls; /* every backward call, in call order */
    size_t n;
    size_t chosen; /* index of the call asked for (or the largest) */
} gt_memory;

/* Measure the backward calls of t. Every call gets its totals; the one
 * options->backward names (0: the one holding the most bytes, the first of
 * equals), or every one with options->all, gets its breakdowns too
 * (detailed). A trace with no backward call gives n = 0. Returns 0 with
 * *out (free with gt_memory_free), or a negative GT_E* code with the
 * message on t: GT_EINVAL when options->backward names no call. */
GT_WARN_UNUSED int gt_memory_measure(gt_trace *t, const gt_memory_options *options,
                                     gt_memory **out /* OUT */);

/* Free m; accepts NULL. */
void gt_memory_free(gt_memory *m);

/* "864 B", "16.0 KiB", "1.50 MiB", "2.00 GiB" into buf (at least 16
 * bytes); returns buf. Can't fail. */
const char *gt_mem_human(int64_t bytes, char *buf, size_t size);

/* Mark the drawn autograd nodes of graph g (DOT names n<nodes.id>, as
 * gt_graph_build names them) with the bytes their saved tensors hold for
 * backward call `backward` (each distinct storage of the node once): the
 * label gains "holds 16.0 KiB", the fill goes from white to red and the
 * border thickens with the share of the largest node. Returns 0 or a
 * negative GT_E* code with the message on t. */
GT_WARN_UNUSED int gt_memory_paint(gt_trace *t, Agraph_t *g, int64_t backward);

/* m as one JSON object ({"trace", "backward", "calls"}: docs/memory.md),
 * built with SQLite's JSON functions on t's connection, appended to out.
 * Returns 0, or a negative GT_E* code with "cannot write JSON: <why>" on t
 * (memory_json.c). */
GT_WARN_UNUSED int gt_memory_json(gt_trace *t, const gt_memory *m, gt_strbuf *out);

#endif
