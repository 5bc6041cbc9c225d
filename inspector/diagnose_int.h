/*
 * What the parts of the diagnosis share, in three layers, each calling
 * only the layers below it (tests/check-cycles checks the files):
 *
 *   gt_diagnose (diagnose.c)    runs the finders, then the suggester
 *   the suggester               suggest.c, suggest_cut.c, suggest_refused.c,
 *                               suggest_ddp.c:
 *                               reads a finding and the trace, writes
 *                               its fix (f->suggestion) and nothing else
 *   the finders                 diagnose.c's replay, raised.c, refused.c,
 *                               cut.c, unused.c, silent.c: append findings
 *                               to c->f
 *   the reading module          dx_read.c: tensors, ops, names, locations,
 *                               errors; the findings' memory
 *
 * Internal to the inspector: the public contract is diagnose.h.
 *
 * Every function returning int returns 0 or a negative GT_E* code with a
 * one-line message kept on the trace handle (gt_trace_errmsg(c->t)); functions returning
 * void cannot fail (a row they cannot read leaves their output empty). Such
 * best-effort lookups read a failure as "not found", except out of memory:
 * they report it through gt__dx_lookup_nomem, and gt_diagnose then fails
 * with GT_ENOMEM rather than return a finding with a wrong name, location
 * or suggestion.
 */
#ifndef GT_INSPECTOR_DIAGNOSE_INT_H
#define GT_INSPECTOR_DIAGNOSE_INT_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include <gradtrace/finding.h>
#include <gradtrace/trace.h>
#include "strbuf.h"
#include "extent.h"
#include "pymsg.h"
#include "replay.h"

/* A tensor row, as the checks read it: any number of dimensions, any
 * dtype text (held on the heap; gt__dx_tinfo_release frees it). */
typedef struct gt__tinfo {
    gt_extent ext;     /* the bytes it covers in its storage */
    const char *dtype; /* "float32", "" when unread; inside text */
    const char *shape; /* "3" or "16,8": sizes without brackets or spaces,
                        * "" when unread; inside text */
    char *text;        /* owns dtype and shape (NULL: both are "") */
    int requires_grad, is_leaf;
    int64_t alias_of;
    int64_t created_by; /* ops.seq that output it, 0 if unknown */
    int found;
} gt__tinfo;

/* An op row. Start from {0}: its name's memory is kept from one
 * gt__dx_load_op to the next and freed by gt__dx_op_release. */
typedef struct gt__opinfo {
    gt_strbuf buf;    /* holds name */
    const char *name; /* "aten::add_.Tensor", "" if none */
    int phase;
    int grad_mode;
    int64_t stack;
} gt__opinfo;

/* The diagnosis of one trace. */
typedef struct gt__dctx {
    sqlite3 *db;
    gt_trace *t; /* the reading layer: locations, names (trace.h) */
    gt_replayer *rp;
    sqlite3_stmt *saved, *silent, *silent_window, *silent_size, *bwerr, *op;
    gt_tensor_row trow; /* gt__dx_load_tensor's row, its memory kept between reads */
    gt_imap freed;      /* node id -> backward call that freed its saved tensors */
    gt_imap tcache;     /* tensor id -> index in tv: tensors read in this backward */
    gt__tinfo *tv;
    size_t tn, tcap;
    gt_findings *f;
    size_t cap;
    int64_t only; /* the backward call asked for, 0 for all */
    int oom;      /* a best-effort lookup ran out of memory */
    char *cwd;    /* the process's working directory, however long: read on
                     first use (cwd_read), NULL if unknown */
    int cwd_read;
} gt__dctx;

/* Errors: set the message, return GT_ECORRUPT / GT_ENOMEM. */
GT_WARN_UNUSED int gt__dx_sql_fail(gt__dctx *c);
GT_WARN_UNUSED int gt__dx_nomem(gt__dctx *c);

/* Call after every prepare and step of a best-effort lookup, with its
 * result `s`: SQLITE_NOMEM (any extended code of it) sets c->oom; anything
 * else, a damaged trace included, leaves the lookup's "not found". */
void gt__dx_lookup_nomem(gt__dctx *c, int s);

/* c->t's cached statement for `sql` (trace.h's gt_trace_stmt: a literal),
 * for a best-effort lookup: NULL when it cannot be prepared (out of memory
 * sets c->oom; anything else reads as "not found"). End the lookup with
 * gt__dx_done. */
sqlite3_stmt *gt__dx_stmt(gt__dctx *c, const char *sql);

/* The text cached `sql` gives for ?1 = a (the first column of its first
 * row: trace.h's gt_trace_text) into out, emptied first: "" when there is
 * none or it cannot be read; out of memory sets c->oom. Returns 1 when out
 * holds a text (even ""), else 0. */
int gt__dx_text(gt__dctx *c, const char *sql, int64_t a, gt_strbuf *out /* OUT */);

/* End a best-effort lookup on st (NULL accepted) whose last prepare or step
 * returned s (gt__dx_lookup_nomem), and reset st. Can't fail. */
void gt__dx_done(gt__dctx *c, sqlite3_stmt *st, int s);

/* Append a zeroed finding of `kind` (versions -1, matches_error -1); NULL
 * when out of memory (the findings are unchanged). */
gt_finding *gt__dx_add_finding(gt__dctx *c, int kind, int64_t backward);

/* Read tensor `id` into *t (t->found = 0 if there is no such row); t is
 * overwritten, not released: release it with gt__dx_tinfo_release. On
 * failure t holds no memory. */
GT_WARN_UNUSED int gt__dx_load_tensor(gt__dctx *c, int64_t id, gt__tinfo *t /* OUT */);

/* Free what a tensor row holds. Can't fail. */
void gt__dx_tinfo_release(gt__tinfo *t);

/* The first variable name of `tensor` (its own, its base's, or one sharing
 * its version counter) into out (emptied first), a container's item
 * (laterals[2]) not counted; "" if none. Out of memory sets c->oom. */
void gt__dx_first_name(gt__dctx *c, int64_t tensor, gt_strbuf *out /* OUT */);

/* The lines of the user's source file `file` (trace.h's gt_trace_source:
 * only while it holds every line the run recorded of it) at *lines, their
 * count returned; 0 when it cannot be read or changed since the run. Out
 * of memory sets c->oom. */
size_t gt__dx_source(gt__dctx *c, const char *file, const char *const **lines /* OUT */);

/* "file:line" of a stack's innermost user frame (the file relative to the
 * working directory when it lies below it), its code line and frame id;
 * "" / 0 if unknown (where and code are emptied first). code and frame may
 * be NULL. Out of memory sets c->oom. */
void gt__dx_stack_loc(gt__dctx *c, int64_t stack, gt_strbuf *where /* OUT */,
                      gt_strbuf *code /* OUT */, int64_t *frame /* OUT */);

/* Read op `seq` into *o (name "" and all 0 if there is none), reusing the
 * memory o holds. Out of memory sets c->oom. */
void gt__dx_load_op(gt__dctx *c, int64_t seq, gt__opinfo *o /* OUT */);

/* Free what an op row holds and zero it. Can't fail. */
void gt__dx_op_release(gt__opinfo *o);

/* The leaf that requires grad behind tensor `t` (itself or a base it
 * views, at most 16 views deep), 0 if none or unreadable. */
int64_t gt__dx_leaf_of(gt__dctx *c, int64_t t);

/* The latest variable bound at or before event `seq` that `code` names
 * (and `skip`, if not NULL, does not) for which pick(c, its tensor) is not
 * 0: that value, the variable's name into name (if not NULL; emptied
 * first). 0 if none. Out of memory sets c->oom. */
int64_t gt__dx_named_on_line(gt__dctx *c, int64_t seq, const char *code, const char *skip,
                             int64_t (*pick)(gt__dctx *c, int64_t tensor),
                             gt_strbuf *name /* OUT */);

/* Findings for errors PyTorch raised at an in-place op (leaf and view
 * errors), appended to c->f (raised.c). */
GT_WARN_UNUSED int gt__dx_raised_at_op(gt__dctx *c);

/* The errors of the in-place family, in order: seq, message, stack (0 if
 * none), backward (0 if none) (dx_read.c). */
extern const char gt__dx_sql_family[];

/* Call one(c, seq, m, stack, backward) for every error of the in-place
 * family, in order, whose parsed kind want() accepts (stack and backward 0
 * when none); stops at its first non-zero result, returned (dx_read.c). */
GT_WARN_UNUSED int gt__dx_each_error(gt__dctx *c, int (*want)(int kind),
                                     int (*one)(gt__dctx *c, int64_t seq,
                                                const gt_pymsg *m, int64_t stack,
                                                int64_t backward));

/* The write the line of user frame `frame` made last before error
 * `err_seq` (an op of that line with a mutated argument, within 10,000
 * events): *op its ops.seq, *tensor the tensor written; both 0 if none
 * (dx_read.c). */
GT_WARN_UNUSED int gt__dx_write_on_line(gt__dctx *c, int64_t err_seq, int64_t frame,
                                        int64_t *op /* OUT */, int64_t *tensor /* OUT */);

/* The tensor bound to variable `name` in the user's frame at or before
 * event `seq` (the recorder binds a frame's tensors when it records an
 * error), 0 if none (dx_read.c). */
GT_WARN_UNUSED int gt__dx_named_tensor(gt__dctx *c, const char *name, int64_t seq,
                                       int64_t *out /* OUT */);

/* The op that made tensor `t`: its own creator, else that of the nearest
 * base made by a recorded op; 0 if none (dx_read.c). */
int64_t gt__dx_view_origin(gt__dctx *c, int64_t t);

/* Give f the write PyTorch refused, like every kind lists its writes: the
 * recorded op if there is one, else the raising line's stack (dx_read.c). */
GT_WARN_UNUSED int gt__dx_add_attempt(gt__dctx *c, gt_finding *f, int64_t op,
                                      int64_t stack);

/* Findings for in-place ops PyTorch refused for what the written tensor
 * is (overlap, inference tensor, dtype, shape, detach_ of a view, resize_
 * of a tensor that requires grad), appended to c->f (refused.c). */
GT_WARN_UNUSED int gt__dx_refused(gt__dctx *c);

/* The integer the first column of `sql`'s first row gives with ?1 = a and
 * ?2 = b (the text b_text instead when not NULL); dflt when there is no
 * row or it is NULL. A best-effort lookup (dx_read.c). */
int64_t gt__dx_int(gt__dctx *c, const char *sql, int64_t a, int64_t b, const char *b_text,
                   int64_t dflt);

/* 1 if op `op`'s name (ops.seq) starts with `want` ("aten::detach"); 0
 * for none. A best-effort lookup (dx_read.c). */
int gt__dx_op_is(gt__dctx *c, int64_t op, const char *want);

/* The first op before event `before` that had tensor t as an argument,
 * 0 if none (dx_read.c). */
int64_t gt__dx_first_op(gt__dctx *c, int64_t t, int64_t before);

/* The op that made tensor t as the user sees it: gt__dx_view_origin, else
 * the first op before `before` that took it (torch.tensor's lift_fresh),
 * and not a dispatch mode's own aten::detach after a factory but the op
 * whose output it detached (dx_read.c). 0 if none. */
int64_t gt__dx_made_at(gt__dctx *c, int64_t t, int64_t before);

/* Findings for backward calls that raised because a root has no grad_fn:
 * where the graph was cut, or what it comes from (cut.c); backward call
 * c->only alone when set. */
GT_WARN_UNUSED int gt__dx_cut(gt__dctx *c);

/* f->suggestion = what b holds, taken from it (dx_read.c); GT_ENOMEM
 * when b ran out of memory. */
GT_WARN_UNUSED int gt__dx_take_suggestion(gt__dctx *c, gt_finding *f, gt_strbuf *b);

/* Set f->suggestion for a root_without_grad or grad_input_unreachable
 * finding (suggest_cut.c). */
GT_WARN_UNUSED int gt__dx_suggest_cut(gt__dctx *c, gt_finding *f);

/* Set f->suggestion for a finding of gt__dx_refused's kinds
 * (suggest_refused.c). */
GT_WARN_UNUSED int gt__dx_suggest_refused(gt__dctx *c, gt_finding *f);

/* The code of the line at stack `stack` without its indentation and
 * comment ("" if unknown) into code, its "file:line" into where
 * (dx_read.c). */
void gt__dx_raising_code(gt__dctx *c, int64_t stack, gt_strbuf *where, gt_strbuf *code);

/* Append an `unexplained` finding for every error of the in-place family
 * that no finding from `first` on explains (raised.c). */
GT_WARN_UNUSED int gt__dx_unexplained(gt__dctx *c, size_t first);

/* Findings for DistributedDataParallel's unused-parameter errors,
 * appended to c->f (unused.c). */
GT_WARN_UNUSED int gt__dx_ddp_unused(gt__dctx *c);

/* Set f->suggestion for a ddp_unused_parameters finding (suggest_ddp.c). */
GT_WARN_UNUSED int gt__dx_suggest_ddp(gt__dctx *c, gt_finding *f);

/* Set f->suggestion: the fix for the finding (suggest.c). */
GT_WARN_UNUSED int gt__dx_suggest(gt__dctx *c, gt_finding *f);

/* silent.c: append the findings of writes PyTorch cannot see (storage
 * swaps) for backward call `only` (0: all) to f, growing f->v to exactly its
 * new size: call it after every other finding is added. Returns 0 or a
 * negative GT_E* code with the message on t (f then holds what was added). */
GT_WARN_UNUSED int gt__diagnose_silent(gt_trace *t, int64_t only, gt_findings *f);

/* 1 if the node that saved row `saved_seq` (saved_tensors.seq) never reads
 * it in its backward (BatchNorm's running statistics in training mode), so
 * a write to it is no silent write (silent.c). Out of memory sets c->oom. */
int gt__dx_slot_unread(gt__dctx *c, int64_t saved_seq);

/* 1 if tensor `tensor` (tensors.id) was made under torch.func's vmap, whose
 * messages show one sample's shape (silent.c). Out of memory sets c->oom. */
int gt__dx_under_vmap(gt__dctx *c, int64_t tensor);

#endif
