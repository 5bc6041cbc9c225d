/*
 * Several traces at once: the traces of a distributed run's ranks.
 *
 * Naming (the contract with recorder/python/gradtrace/_dist.py): under a
 * launcher that sets RANK, rank N's trace for the path `run.db` is
 * `run.rankN.db` (`.rankN` before the file name's extension), or `{rank}`
 * in the path replaced by N.
 *
 * The multi-trace commands (cmd_multi.c) take trace files and directories;
 * a directory stands for the gradtrace traces directly in it. Traces are
 * ordered by run.rank (traces without a rank last, by name).
 */
#ifndef GT_INSPECTOR_MULTI_H
#define GT_INSPECTOR_MULTI_H

#include <stddef.h>
#include <stdint.h>

/* The path rank N writes for `path`: `{rank}` replaced, else `.rankN`
 * inserted before the file name's extension. Returns a malloc'd string,
 * NULL when out of memory. */
char *gt_rank_path(const char *path, int64_t rank);

/* The path this process writes for `path`: gt_rank_path() with the rank in
 * the environment's RANK (digits only), else a copy of path. NULL when out
 * of memory. */
char *gt_env_rank_path(const char *path);

/* One trace of a set: its path and the rank its run row names. */
typedef struct gt_rank_trace {
    char *path;
    int64_t rank;      /* run.rank; -1 if none */
    int has_rank;
} gt_rank_trace;

typedef struct gt_rank_set {
    size_t n;
    gt_rank_trace *v;  /* ordered by rank, then path */
} gt_rank_set;

/* Expand `paths` (files and directories) into *out, reading each trace's
 * rank. A directory contributes its regular files whose first 16 bytes
 * are the SQLite header (non-recursive). Returns 0, or 2 after printing a
 * one-line error ("gradtrace: cannot read directory runs: ...", "no traces
 * in directory runs") to stderr; *out is written only on success. */
int gt_rank_set_load(int npaths, char **paths, gt_rank_set *out /* OUT */);

/* Free a set's contents; the set itself may be on the stack. */
void gt_rank_set_release(gt_rank_set *s);

/* "0-3", "0, 2", "0-1, 5": the ranks in ranks[0..n) (ascending) as the
 * shortest text of ranges, into buf (always terminated). */
void gt_format_ranks(const int64_t *ranks, size_t n, char *buf, size_t len);

#endif
