/*
 * gradtrace recorder: the C API an autograd engine calls to write a trace.
 *
 * Invariants
 *   - One handle writes one trace file (schema/gradtrace.sql, version
 *     GT_SCHEMA_VERSION). Nothing here is specific to one engine.
 *   - Every event call takes the next value of one sequence counter shared by
 *     all event kinds, so `seq` is strictly increasing across tables.
 *   - Events are buffered into transactions of at most `batch_events` events
 *     or `batch_ms` milliseconds, whichever comes first. After the process is
 *     killed, every committed batch is readable. (Rows written count as
 *     events here, interned strings/frames/stacks/threads included; the
 *     first batches are smaller, 1000 rows doubling up to batch_events, so
 *     that an early kill or size limit loses little. The clock
 *     is read at each call: a batch is not committed by time alone while no
 *     call comes; call gt_recorder_flush when going idle.)
 *   - On the first write error (full disk, RLIMIT_FSIZE, I/O error, size cap)
 *     the handle turns "failed": the message is kept (gt_recorder_errmsg),
 *     every later event call returns the same error without touching the
 *     file, and the host process keeps running. Nothing here aborts or exits.
 *     (The failing call returns the cause: GT_EFULL for a full disk, a file
 *     size limit or max_bytes, GT_EIO, GT_ENOMEM, GT_ECORRUPT or GT_ESQL;
 *     later calls return GT_EFAILED; gt_recorder_close returns the cause.)
 *     The size cap (max_bytes) is the one stop that leaves the file sound:
 *     the run row gets stopped_seq and stopped_reason at once, and
 *     gt_run_end and gt_recorder_close still write the run's end and the
 *     indexes (close then returns GT_EFULL, the cause).
 *   - max_bytes caps the file the user gets, the close-time indexes
 *     included: before each commit the writer adds to the file's size an
 *     upper estimate of those indexes (from the rows written so far); a
 *     batch that would cross the cap is rolled back and recording stops
 *     there, so the closed file stays at or below max_bytes. Batches shrink
 *     as the file nears the cap, so little is lost to the rollback. A cap
 *     below the size of an empty trace (about 160 KiB) is refused at open.
 *   - A closed trace is one file: close folds the write-ahead log into it
 *     and leaves WAL mode, waiting up to close_wait_ms for other processes
 *     reading the trace to let go. If one still holds it, close returns
 *     GT_EBUSY and says what is left where (the events may still be in the
 *     -wal file beside the trace, or all in the trace but in WAL mode).
 *   - Caller mistakes (a negative id, an unknown role, a duplicate tensor id,
 *     malformed argv JSON) return GT_EINVAL with a message and leave the
 *     handle recording. The frequent row kinds (ops, op_args, tensors,
 *     storages, version_bumps, nodes, edges, node_outputs, saved_tensors,
 *     node_execs, names) are written in groups: a duplicate key among them
 *     is reported by the call that writes its group (a later event call or
 *     gt_recorder_flush), and only the bad row is dropped.
 *   - A file size limit (RLIMIT_FSIZE) raises SIGXFSZ, which kills the
 *     process by default. The library never changes signal dispositions: a
 *     host that may hit such a limit should ignore SIGXFSZ (signal(SIGXFSZ,
 *     SIG_IGN)); the write then fails with EFBIG and the handle fails as
 *     above.
 *   - A handle belongs to the process that opened it. Used in a forked child
 *     it refuses to write (GT_ECLOSED) and gt_recorder_close there frees the
 *     memory without touching the file. Flush before fork().
 *   - Memory: the interning tables grow with the number of distinct strings,
 *     frames, stacks and threads; everything else (statements, SQLite's page
 *     cache of 2 MiB) is bounded, however many events are recorded.
 *   - Ids of tensors, storages and nodes are chosen by the caller (the engine
 *     adapter knows object identity); they must be positive and never reused.
 *     Ids of strings, frames, stacks and threads are assigned here, by
 *     interning: equal input gives the same id.
 *
 * Row log (options.row_log = 1, without keep_last and max_bytes)
 *   - The frequent row kinds above are appended, in their groups, to
 *     `path-gtlog` (format: schema/SCHEMA.md, "The row log") at each commit
 *     instead of being inserted into the trace; the other rows are
 *     committed to the trace as before, each commit before the log's.
 *     gt_recorder_close inserts the log's rows into the trace (one
 *     transaction, memory bounded), writes the indexes, makes the trace one
 *     file and removes the log. A duplicate key among logged rows is
 *     dropped at close without a GT_EINVAL to any caller.
 *   - While recording, the trace file alone lacks the logged rows: readers
 *     go through the inspector (gradtrace, gradtrace.open), which reads a
 *     live trace's log through a private copy. After a kill, trace + log
 *     hold every committed batch; the inspector's open folds the log (its
 *     complete commits) into the trace and removes it.
 *   - A write error on the log (full disk, file size limit) fails the
 *     handle as above (GT_EFULL, GT_EIO); the log is cut back to its last
 *     complete commit, and what it holds is folded by the next reader.
 *
 * Flight recorder (options.keep_last = N > 0)
 *   - Events are held in memory, not written to the file: the frequent row
 *     kinds above as row-log blocks (as the row log's, in memory only),
 *     the others in an in-memory database; with max_bytes every row goes
 *     to that database (its size is what the cap measures). At backward call
 *     boundaries the events older than the last N backward calls are
 *     dropped (in steps: up to N + max(N, 16) calls are held between drops),
 *     except the rows the kept ones reference: tensors, storages, nodes
 *     reachable through edges with their edges, outputs and saved tensors,
 *     the ops that created kept tensors and nodes, the version bumps of
 *     tensors saved by kept nodes after their save (with their ops and
 *     arguments), the latest name of each kept tensor, and every interned
 *     string, frame, stack and thread. A kept tensor's definition is thus
 *     kept while the window uses it; one that no event of the last
 *     N + max(N, 16) calls used is dropped: a writer that names it again
 *     later writes its row again first (gt_tensor_again, when
 *     gt_recorder_cuts has changed since it wrote it), else the later rows
 *     refer to a tensor the trace does not define.
 *     A duplicate key among the held rows (a row SQLite would refuse or
 *     ignore) is dropped, the first row kept, without a GT_EINVAL to any
 *     caller (with max_bytes: GT_EINVAL as without keep_last).
 *   - The window is written to `path` as an ordinary closed trace (indexes
 *     included, one file, renamed over the old one; readers of the old one
 *     keep it) at open (empty), at the first gt_recorder_flush after a
 *     gt_error or gt_run_end (other flushes only commit, in memory), at the
 *     size cap, and at close.
 *     The run row says what was dropped: run.keep_last = N,
 *     run.kept_from_seq and run.kept_from_backward.
 *   - max_bytes caps the in-memory window (its live pages and the index
 *     estimate): over it, the window is first cut to N calls; if it is still
 *     over, recording stops there (stopped_seq) and the trace is written.
 *   - A process killed by SIGKILL loses the window since the last write.
 *
 * Threads: a handle may be shared between threads; every call takes the
 * handle's mutex, unless the calling thread holds it (gt_recorder_hold).
 * gt_recorder_close must not race with other calls.
 *
 * Result codes: 0 on success, a negative GT_E* value on failure (see
 * gt_strerror). Out-parameters come last, marked OUT, and are written only on
 * success. Strings passed in are copied; the caller keeps ownership.
 */
#ifndef GRADTRACE_RECORDER_H
#define GRADTRACE_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include <gradtrace/error.h>  /* GT_E* result codes, gt_strerror */
#include <gradtrace/format.h> /* GT_SCHEMA_VERSION, roles, phases, run statuses */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_recorder gt_recorder;
typedef int64_t gt_id;

/* Options for gt_recorder_open. Zero-initialise, then set what you need;
 * zero fields take the defaults. */
typedef struct gt_recorder_options {
    unsigned batch_events;  /* commit after this many events (default 20000) */
    unsigned batch_ms;      /* ... or after this many ms (default 250) */
    int64_t max_bytes;      /* cap on the closed file's size; 0 = none */
    int overwrite;          /* 1: replace an existing file; 0: GT_EEXIST */
    unsigned close_wait_ms; /* how long close waits for readers (default 5000) */
    unsigned keep_last;     /* flight recorder: keep only the last N backward
                             * calls' events, in memory (see below); 0 = all */
    int row_log;            /* 1: the frequent rows go to a row log during the
                             * run, folded in at close (see "Row log" below);
                             * ignored with keep_last or max_bytes, or when
                             * the environment has GRADTRACE_ROW_LOG=0 */
} gt_recorder_options;

/* Run metadata (table run). Any pointer may be NULL. */
typedef struct gt_run_info {
    const char *engine;         /* e.g. "pytorch" */
    const char *engine_version; /* e.g. "2.13.0+cpu" */
    const char *python_version;
    const char *argv_json; /* JSON array of strings, inserted as JSON */
    const char *cwd;
    const char *host;
    const char *options_json; /* JSON object of recording options */
    int64_t pid;
    int64_t rank; /* < 0: no rank */
    /* Distributed runs (v3). world_size <= 0: not distributed, and then
     * local_rank is not recorded either. */
    int64_t world_size;
    int64_t local_rank;          /* < 0: none */
    const char *backend;         /* e.g. "gloo"; NULL: unknown (kept if set) */
    const char *launcher_run_id; /* e.g. TORCHELASTIC_RUN_ID; NULL: kept */
} gt_run_info;

/* One op (table ops). */
typedef struct gt_op_info {
    gt_id name;    /* interned string id of the op name */
    int phase;     /* enum gt_phase */
    int grad_mode; /* 1 if grad mode is on */
    gt_id thread;  /* from gt_intern_thread */
    gt_id stack;   /* from gt_intern_stack, 0 for none */
} gt_op_info;

/* One tensor, recorded the first time it is seen (table tensors). */
typedef struct gt_tensor_info {
    gt_id id;      /* caller-chosen, > 0, never reused */
    gt_id storage; /* storage id, 0 for none */
    gt_id dtype;   /* interned string id */
    int ndim;
    const int64_t *shape;   /* ndim sizes */
    const int64_t *strides; /* ndim strides, in elements */
    int64_t storage_offset;
    int requires_grad;
    int is_leaf;
    int64_t created_by;    /* op seq that output it, 0 for unknown */
    gt_id alias_of;        /* tensor id it aliases, 0 for none */
    int shares_version;    /* 1 if it shares alias_of's version counter */
    gt_id version_counter; /* counter id; 0 means "its own" (= id) */
} gt_tensor_info;

/* One autograd node (table nodes). */
typedef struct gt_node_info {
    gt_id id;            /* caller-chosen, > 0, never reused */
    gt_id name;          /* interned string id, e.g. "MulBackward0" */
    int64_t op;          /* op seq that created it, 0 for unknown */
    int64_t sequence_nr; /* engine's node sequence number, < 0 for none */
    gt_id thread;        /* 0 for unknown */
    gt_id variable;      /* leaf tensor it accumulates into, 0 for none */
} gt_node_info;

/* One backward call (table backward_calls). */
typedef struct gt_backward_info {
    gt_id api; /* interned string id, e.g. "Tensor.backward" */
    int retain_graph;
    int create_graph;
    gt_id thread;
    gt_id stack;
} gt_backward_info;

/* ---- lifecycle ------------------------------------------------------- */

/* Create a trace at `path` and return a handle in *out. Fails with
 * GT_EEXIST if the file exists and opts->overwrite is 0, or if overwrite is
 * set but another handle (in any process) is still recording that file (the
 * handle holds a flock(2) on it until closed), GT_EIO if it cannot be
 * created. opts may be NULL for defaults. On failure *out is untouched and
 * a message is written to errbuf (if not NULL, at most errlen bytes). */
GT_WARN_UNUSED int gt_recorder_open(const char *path, const gt_recorder_options *opts,
                                    char *errbuf, size_t errlen,
                                    gt_recorder **out /* OUT */);

/* Mark how the run ended, commit every pending event, create the indexes
 * the inspector uses, and close the file as one self-contained file (see
 * the invariants: readers are waited for up to close_wait_ms, a trace still
 * held is replaced by a finished copy). Frees the handle; accepts NULL.
 * If the run was never ended with gt_run_end the status stays 'running'.
 * Returns the handle's first error, if any (GT_EFULL after a size-cap stop:
 * the file is complete all the same), GT_EBUSY if the trace could not be
 * made one file (the message says where the events are), else 0. */
int gt_recorder_close(gt_recorder *r);

/* gt_recorder_close, and the handle's last message (what made it fail, ""
 * if nothing did) copied to errbuf (if not NULL, at most errlen bytes), since
 * gt_recorder_errmsg cannot be called after the handle is freed. */
int gt_recorder_close_msg(gt_recorder *r, char *errbuf, size_t errlen);

/* The detailed message of the handle's last error ("" if none); owned by
 * the handle, valid until the next call on it. */
const char *gt_recorder_errmsg(gt_recorder *r);

/* 1 once a write error stopped recording, else 0. */
int gt_recorder_failed(gt_recorder *r);

/* Commit pending events now (e.g. before a fork or at an exception). */
int gt_recorder_flush(gt_recorder *r);

/* Hold the handle's mutex across the calls this thread makes until
 * gt_recorder_release, which then skip taking it: for a writer making many
 * calls in a row (the engine adapter's fold). Other threads' calls wait
 * meanwhile: hold for a bounded run of calls. While held, the open batch's
 * age (batch_ms) is checked at gt_recorder_release rather than at each
 * call (its size still at each). Not nested; release before
 * gt_recorder_close. Returns 0, or GT_EINVAL (r NULL, or this thread holds
 * it already). */
int gt_recorder_hold(gt_recorder *r);

/* Let go of a hold (gt_recorder_hold), first committing the open batch if
 * it is batch_ms old. Returns 0, that commit's error, or GT_EINVAL (this
 * thread holds no hold on r). */
int gt_recorder_release(gt_recorder *r);

/* Number of events recorded so far (the last seq handed out). */
int64_t gt_recorder_seq(gt_recorder *r);

/* Number of window cuts the flight recorder (keep_last) has made so far; 0
 * without keep_last. A cut drops the rows no kept event references, the
 * storage of a tensor still alive included: a writer that records a
 * storage once and refers to it by id later writes its row again (it is
 * INSERT OR IGNORE) when this number has changed since. */
uint64_t gt_recorder_cuts(const gt_recorder *r);

/* The first event seq the flight recorder's last window cut kept (events
 * before it are gone unless a kept event references them); 0 before any
 * cut. */
int64_t gt_recorder_window_start(const gt_recorder *r);

/* ---- run ------------------------------------------------------------- */

/* Fill in run metadata; may be called again to update. */
int gt_run_set(gt_recorder *r, const gt_run_info *info);

/* Record how the run ended: status, exit code (or -1), signal (or 0). */
int gt_run_end(gt_recorder *r, int status, int exit_code, int signal);

/* ---- interning (ids assigned here, equal input -> equal id) ----------- */

/* Intern `len` bytes of UTF-8 text. */
int gt_intern_string(gt_recorder *r, const char *s, size_t len, gt_id *out /* OUT */);

/* Intern a source frame. code may be NULL (unknown), other strings not. */
int gt_intern_frame(gt_recorder *r, const char *file, int line, const char *function,
                    const char *code, gt_id *out /* OUT */);

/* Intern a stack: `parent` (0 for outermost) plus innermost `frame`.
 * user_frame: the innermost user frame of the whole stack, 0 if none. */
int gt_intern_stack(gt_recorder *r, gt_id parent, gt_id frame, gt_id user_frame,
                    gt_id *out /* OUT */);

/* gt_intern_stack for a frame whose `self` is an nn.Module: module is its
 * path (stacks.module: "layer3.1", "" for the outermost module), interned
 * here; NULL for none, as gt_intern_stack. Stacks that differ only in their
 * module are different stacks. */
int gt_intern_stack_in(gt_recorder *r, gt_id parent, gt_id frame, gt_id user_frame,
                       const char *module, gt_id *out /* OUT */);

/* Intern a thread by OS thread id; name may be NULL. */
int gt_intern_thread(gt_recorder *r, int64_t os_tid, const char *name,
                     gt_id *out /* OUT */);

/* ---- events (each takes the next seq unless said otherwise) ----------- */

/* Record an op; its seq is returned in *seq. */
int gt_op(gt_recorder *r, const gt_op_info *op, int64_t *seq /* OUT */);

/* Record a tensor argument of op `seq` (no seq of its own). */
int gt_op_arg(gt_recorder *r, int64_t seq, int role, int pos, gt_id tensor,
              int64_t version);

/* Record a storage the first time it is seen (no seq of its own). */
int gt_storage(gt_recorder *r, gt_id id, int64_t nbytes, gt_id device);

/* Record a tensor the first time it is seen; takes a seq. */
int gt_tensor(gt_recorder *r, const gt_tensor_info *t);

/* Write t's row again if a flight recorder's window cut dropped it
 * (gt_recorder_cuts changed since it was written): a row still there is left
 * as it is (INSERT OR IGNORE). Takes a seq. */
int gt_tensor_again(gt_recorder *r, const gt_tensor_info *t);

/* Record that `tensor`'s version counter reached `version` because of op
 * `op` (0 if not known: observed = 1). */
int gt_version_bump(gt_recorder *r, int64_t op, gt_id tensor, int64_t version,
                    int observed, int64_t *seq /* OUT, may be NULL */);

/* Record an autograd node; takes a seq. */
int gt_node(gt_recorder *r, const gt_node_info *n);

/* Record next edge `pos` of `node`: to `next` (0 for an empty edge). */
int gt_edge(gt_recorder *r, gt_id node, int pos, gt_id next, int input_nr);

/* Record that output `output_nr` of `node` is `tensor`. */
int gt_node_output(gt_recorder *r, gt_id node, int output_nr, gt_id tensor);

/* Record a tensor saved by `node` in `slot` (interned) at `version`.
 * tensor 0: could not be matched to a recorded tensor. nbytes < 0: unknown. */
int gt_saved_tensor(gt_recorder *r, gt_id node, gt_id slot, gt_id tensor, int64_t version,
                    int is_output, int64_t nbytes, int64_t *seq /* OUT, may be NULL */);

/* gt_saved_tensor, for a tensor the engine saved at an earlier event
 * `saved_seq` (> 0) than now: a checkpoint's input, saved by the call and
 * recorded as each node of the region is found (saved_tensors.saved_seq). */
int gt_saved_tensor_at(gt_recorder *r, gt_id node, gt_id slot, gt_id tensor,
                       int64_t version, int is_output, int64_t nbytes, int64_t saved_seq,
                       int64_t *seq /* OUT, may be NULL */);

/* A recorded tensor found on another storage than before (storage_swaps):
 * fields as the table's columns, 0 for NULL. */
typedef struct gt_swap_info {
    gt_id tensor;
    gt_id old_storage, new_storage;
    int64_t op;     /* ops.seq that noticed it, or 0 */
    gt_id backward; /* backward call whose start noticed it, or 0 */
    int64_t last_seen;
    gt_id stack;
} gt_swap_info;

/* Record a storage swap; takes a seq. */
int gt_storage_swap(gt_recorder *r, const gt_swap_info *s);

/* Op `op` wrote `tensor` without moving its version counter, which was
 * `version` before and after it (kernel_writes): marked 1 if the op's
 * schema marks the argument written, 0 if not (include/gradtrace/kwrites.h,
 * a c10d collective). A second row for the same op and tensor is ignored.
 * Takes no seq. Returns 0, GT_EINVAL for a bad argument, or a write error. */
int gt_kernel_write(gt_recorder *r, int64_t op, gt_id tensor, int64_t version,
                    int marked);

/* A fingerprint of the bytes of saved tensor `saved` (saved_tensors.seq):
 * at_use 0 at save, 1 when its node ran in backward call `backward`. */
int gt_fingerprint(gt_recorder *r, int64_t saved, int at_use, gt_id backward,
                   int64_t nbytes, uint64_t hash);

/* Start a backward call; its 1-based index is returned in *id. */
int gt_backward_begin(gt_recorder *r, const gt_backward_info *b, gt_id *id /* OUT */);

/* Root `pos` of backward `id`: a tensor and its grad_fn node (0 if none). */
int gt_backward_root(gt_recorder *r, gt_id id, int pos, gt_id tensor, gt_id node);

/* Input `pos` of backward `id` (torch.autograd.grad's inputs=). */
int gt_backward_input(gt_recorder *r, gt_id id, int pos, gt_id tensor);

/* End backward `id`: ok = 1 if it returned, 0 if it raised. */
int gt_backward_end(gt_recorder *r, gt_id id, int ok);

/* The engine ran `node` during backward `id`. */
int gt_node_exec(gt_recorder *r, gt_id backward, gt_id node);

/* An exception: type name (interned here), message, stack, and the backward
 * call during which it was raised (0 if none). */
int gt_error(gt_recorder *r, const char *type, const char *message, gt_id stack,
             gt_id backward, int64_t *seq /* OUT, may be NULL */);

/* The user's variable `name` (interned here) was bound to `tensor` at event
 * `seq`. Duplicate triples are ignored. */
int gt_name(gt_recorder *r, int64_t seq, gt_id tensor, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* GRADTRACE_RECORDER_H */
