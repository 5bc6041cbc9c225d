/*
 * The trace writer: one SQLite connection per handle, a prepared statement
 * per insert, events batched into transactions, the schema compiled in.
 *
 * Life of a handle
 *   open    create the file (O_EXCL), execute schema + views, user_version,
 *           WAL + synchronous=NORMAL, insert the run row, prepare statements.
 *   events  each call takes the handle mutex (unless its thread holds it,
 *           gt_recorder_hold: the engine adapter's fold, over runs of
 *           records; the batch's age is then checked at
 *           gt_recorder_release); the first write of a batch
 *           runs BEGIN; after batch_events rows or batch_ms milliseconds
 *           (monotonic clock, checked at every write) the batch is committed.
 *           The first batches are smaller (1000 rows, doubling up to
 *           batch_events), so that an early end loses little.
 *           Every frequent row kind (ops, op_args, tensors, storages,
 *           version_bumps, nodes, edges, node_outputs, saved_tensors,
 *           node_execs, names) is grouped GT__BUF_ROWS to an INSERT; every
 *           group is written before each COMMIT.
 *   failure the first SQLite error that is not the caller's fault (full
 *           disk, file size limit, i/o error, max_bytes) turns the handle
 *           "failed": the message is kept and every later call returns
 *           GT_EFAILED without touching the file.
 *   cap     with max_bytes set, each commit first adds up the file's pages
 *           and an upper estimate of the indexes close will add (idx_note
 *           counts the bytes of their entries as rows are written); a batch
 *           that would take the closed file past max_bytes is rolled back
 *           and recording stops at the last commit. Batches shrink as the
 *           file nears the cap, so the rolled-back one is small.
 *   close   commit, run.end_ns, indexes.sql, checkpoint the WAL into the
 *           main file and switch back to journal_mode=DELETE, so a closed
 *           trace is one self-contained file; readers holding the file are
 *           waited for (close_wait_ms), and if one still holds it close
 *           fails with GT_EBUSY and a message saying what is where.
 *
 * Cost (bench/bench_rows_ir.py): about 3,700 instructions per row of the
 * engine adapter's mix, 70% of it in sqlite3_step (VDBE, B-tree insert,
 * WITHOUT ROWID seeks for op_args); page size, synchronous and bigger groups
 * (32, 64 rows) were measured and gain nothing worth their cost.
 *
 * Row log (options.row_log; not with keep_last or max_bytes): the groups
 * of the frequent kinds are not inserted during the run. flush_buf encodes
 * each group as a block (common/rowlog.c: its integers, null flags and
 * text arena, XXH3-checked) into r->log; commit() commits the direct rows
 * (strings, frames, stacks, threads, run, backward calls, errors, ...) to
 * SQLite first, then appends the blocks and a commit marker to path-gtlog
 * with one write(2), so a logged row never names an id the file lacks.
 * Close folds the log through the same multi-row INSERTs (gt_rowlog_fold,
 * one transaction, one block in memory at a time), then writes the run's
 * end, the indexes and the one-file finish as without it, and removes the
 * log. A killed run leaves trace + log: the inspector's open folds the
 * complete commits of a log no recording holds (gt_rowlog_on_open). Cost
 * (bench_rows_ir.py): about 480 instructions a row during the run instead
 * of 3,850, and 3,500 a row at close to fold it. max_bytes keeps the
 * direct path: its rule needs the file's real size at every commit.
 *
 * Flight recorder (options.keep_last; "the flight recorder" below): the
 * database is in memory and the file is written whole at times
 * (write_window). Without max_bytes (keep_mem) flush_buf encodes the
 * groups of the frequent kinds as blocks, as the row log does, into
 * r->held instead of inserting them; each window cut (cut_window, at a
 * backward call once keep_last + cut_slack calls are held) picks the kept
 * calls in SQL, cuts the held blocks in C (keepcut.c: cut_sql's rules,
 * re-encoding the kept rows) and the direct tables in SQL; write_window
 * folds the held blocks into the copy it writes (gt_rowlog_fold_mem).
 * Cost (bench_overhead_ir.py, MLP, keep_last 2, 100 steps): 2.91 M
 * instructions a step against 2.79 M for the whole trace with the row log,
 * 5.81 M when every row went through SQLite and cut_sql (an older build);
 * a cut (every 17 calls) is 2.2 M, 2.0 M of it the C cut. With max_bytes every row goes
 * to SQLite and cut_sql cuts it: the cap measures the database's pages.
 *
 * Memory: apart from the interning tables (one entry per distinct string,
 * frame, stack and thread, see intern.h), a handle holds a fixed set of
 * statements and SQLite's page cache (bounded by cache_size), however long
 * the run; the flight recorder holds its window (up to keep_last +
 * cut_slack calls) and the older rows the kept calls reference.
 */
#include "grow.h"
#include "gtmap.h"
#include "intern.h"
#include "intlist.h"
#include "keepcut.h"
#include "rowlog.h"
#include "strbuf.h"
#include "tracelock.h"

#include <gradtrace/recorder.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gt_indexes_sql.h"
#include "gt_schema_sql.h"
#include "gt_views_sql.h"

#define GT__DEFAULT_BATCH_EVENTS  20000
#define GT__DEFAULT_BATCH_MS      250
#define GT__DEFAULT_CLOSE_WAIT_MS 5000
/* The first batch holds at most this many rows, each next one twice as many
 * up to batch_events: what a short run, or one killed or stopped by a size
 * limit early, recorded is committed soon, and long runs get big batches. */
#define GT__FIRST_BATCH 1000
#define GT__BUF_ROWS    16 /* rows per multi-row INSERT */
#define GT__BUF_MAXCOL  13
#define GT__CUT_MAX     48 /* statements of cut_sql (prepared at open) */

/* The indexes of schema/indexes.sql, whose size the cap counts ahead (a
 * new index there needs its entry here and its idx_note calls). */
enum gt__idx {
    I_OP_ARGS_WRITTEN,
    I_TENSORS_STORAGE,
    I_TENSORS_VC,
    I_BUMPS_TENSOR,
    I_NODES_OP,
    I_SAVED_NODE,
    I_SAVED_TENSOR,
    I_EDGES_NEXT,
    I_NAMES_TENSOR,
    GT__NIDX
};

/* Buffered row kinds, in the order of buf_info. */
enum gt__buf {
    B_OP,
    B_OP_ARG,
    B_BUMP,
    B_SAVED,
    B_TENSOR,
    B_TENSOR_AGAIN,
    B_STORAGE,
    B_NODE,
    B_EDGE,
    B_NODE_OUTPUT,
    B_NODE_EXEC,
    B_NAME,
    GT__NBUF
};

/* The buffered kinds are the row log's (common/rowlog.h: their INSERTs,
 * columns and text columns live there, shared with the fold). */
#define buf_info gt_rowlog_kinds
_Static_assert((int)GT__NBUF == (int)GT_RL_NKIND && GT__BUF_ROWS == GT_ROWLOG_GROUP &&
                   GT__BUF_MAXCOL == GT_ROWLOG_MAXCOL,
               "the row buffers are the row log's groups");

struct gt__rowbuf {
    sqlite3_stmt *multi; /* INSERT of GT__BUF_ROWS rows */
    sqlite3_stmt *one;   /* INSERT of one row */
    int n;               /* rows waiting */
    /* rows packed (one copy into a block): row i's column k at i * ncol + k,
     * ncol the kind's; buf_row clears GT__BUF_MAXCOL flags from a row's
     * start, within null for any ncol */
    int64_t val[GT__BUF_ROWS * GT__BUF_MAXCOL];
    unsigned char null[GT__BUF_ROWS * GT__BUF_MAXCOL]; /* 1: bind NULL */
    char *text; /* text columns' bytes, each NUL-terminated */
    size_t text_len, text_cap;
};

/* X(name, sql): every statement the writer uses, prepared once at open. */
#define GT__STMT_MAP(X)                                                                  \
    X(BEGIN, "BEGIN")                                                                    \
    X(COMMIT, "COMMIT")                                                                  \
    X(ROLLBACK, "ROLLBACK")                                                              \
    X(PAGE_COUNT, "SELECT p.page_count - f.freelist_count"                               \
                  " FROM pragma_page_count p, pragma_freelist_count f")                  \
    X(BW_CUTOFF, "SELECT coalesce(end_seq, seq - 1) FROM backward_calls"                 \
                 " WHERE id = ?1")                                                       \
    X(RUN_SET, "UPDATE run SET engine = coalesce(?1, engine),"                           \
               " engine_version = coalesce(?2, engine_version),"                         \
               " python_version = coalesce(?3, python_version),"                         \
               " argv = coalesce(json(?4), argv), cwd = coalesce(?5, cwd),"              \
               " host = coalesce(?6, host),"                                             \
               " options = coalesce(json(?7), options),"                                 \
               " pid = coalesce(?8, pid), rank = ?9, world_size = ?10,"                  \
               " local_rank = ?11, backend = coalesce(?12, backend),"                    \
               " launcher_run_id = coalesce(?13, launcher_run_id) WHERE id = 1")         \
    X(RUN_END, "UPDATE run SET status = ?1, exit_code = ?2, signal = ?3"                 \
               " WHERE id = 1")                                                          \
    X(RUN_CLOSE, "UPDATE run SET end_ns = ?1 WHERE id = 1")                              \
    X(RUN_STOPPED, "UPDATE run SET stopped_seq = ?1, stopped_reason = ?2"                \
                   " WHERE id = 1")                                                      \
    X(STRING, "INSERT INTO strings (id, text) VALUES (?1, ?2)")                          \
    X(FRAME, "INSERT INTO frames (id, file, line, function, code)"                       \
             " VALUES (?1, ?2, ?3, ?4, ?5)")                                             \
    X(STACK, "INSERT INTO stacks (id, parent, frame, user_frame, module)"                \
             " VALUES (?1, ?2, ?3, ?4, ?5)")                                             \
    X(THREAD, "INSERT INTO threads (id, os_tid, name) VALUES (?1, ?2, ?3)")              \
    X(BW_BEGIN, "INSERT INTO backward_calls (id, seq, api, retain_graph,"                \
                " create_graph, thread, stack) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")     \
    X(BW_ROOT, "INSERT INTO backward_roots (backward, pos, tensor, node)"                \
               " VALUES (?1, ?2, ?3, ?4)")                                               \
    X(BW_INPUT, "INSERT INTO backward_inputs (backward, pos, tensor)"                    \
                " VALUES (?1, ?2, ?3)")                                                  \
    X(BW_END, "UPDATE backward_calls SET end_seq = ?2, status = ?3"                      \
              " WHERE id = ?1")                                                          \
    X(ERROR, "INSERT INTO errors (seq, type, message, stack, backward)"                  \
             " VALUES (?1, ?2, ?3, ?4, ?5)")                                             \
    X(SWAP, "INSERT INTO storage_swaps (seq, tensor, old_storage, new_storage, op,"      \
            " backward, last_seen, stack) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")      \
    X(KWRITE, "INSERT OR IGNORE INTO kernel_writes (op, tensor, version, marked)"        \
              " VALUES (?1, ?2, ?3, ?4)")                                                \
    X(EARLIER, "INSERT INTO saved_earlier (saved, saved_seq) VALUES (?1, ?2)")           \
    X(FINGERPRINT, "INSERT INTO saved_fingerprints (seq, saved, at_use, backward,"       \
                   " nbytes, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")

enum gt__stmt {
#define GT__STMT_ENUM(name, sql) ST_##name,
    GT__STMT_MAP(GT__STMT_ENUM)
#undef GT__STMT_ENUM
        ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
#define GT__STMT_SQL(name, sql) sql,
    GT__STMT_MAP(GT__STMT_SQL)
#undef GT__STMT_SQL
};

struct gt_recorder {
    pthread_mutex_t mu;
    /* the thread holding mu through gt_recorder_hold ((uintptr_t)
     * pthread_self()), 0 if none; read without mu (lock) */
    uintptr_t holder;
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    char *path;
    pid_t pid;   /* process that opened the handle */
    int lock_fd; /* the trace file, flock()ed while recording; -1 if none */

    int64_t seq;
    int64_t next_string, next_frame, next_stack, next_thread, next_backward;

    int in_txn;
    unsigned batch_n;       /* rows written in the open transaction */
    int64_t batch_start_ms; /* monotonic ms at its BEGIN */
    unsigned batch_events;
    unsigned batch_cur; /* rows of the current batch: ramps up to batch_events */
    unsigned batch_ms;
    int64_t max_bytes;
    int64_t page_size;
    unsigned close_wait_ms;

    /* The size cap counts the indexes close will create: idx_bytes is an
     * upper estimate of their entries' bytes for the committed rows,
     * idx_pending for the open batch's (see idx_note). */
    int64_t idx_bytes[GT__NIDX], idx_pending[GT__NIDX];
    int64_t idx_rows[GT__NIDX]; /* entries noted (for the flight recorder's cuts) */
    int64_t committed_seq;      /* r->seq at the last commit */
    int64_t rows_committed;     /* rows committed since open */
    int64_t base_bytes;         /* the file's size at open, schema and run row */
    int64_t last_bytes;         /* projected size at the last commit */

    /* Flight recorder (keep_last > 0): the database is in memory; the
     * window is cut at backward calls (cut_window) and written to path
     * (write_window) at open, when due (write_due: an error or the run's
     * end was recorded) at the next flush, at the size cap and at close. */
    unsigned keep_last;
    uint64_t cuts;                     /* window cuts made (read by gt_recorder_cuts) */
    int64_t window_start;              /* the first seq the last cut kept */
    sqlite3_stmt *storage_seq;         /* INSERT OR IGNORE INTO temp.gt_ss */
    sqlite3_stmt *cut_st[GT__CUT_MAX]; /* cut_sql's statements, prepared once */
    int ncut;
    int64_t kept_from; /* first backward call still held (1: none dropped) */
    int write_due;
    /* keep_last without max_bytes (keep_mem): the frequent rows are held as
     * row-log blocks in `held` instead of inserted, cut in C (keepcut.c)
     * and folded into the window's file by write_window. cut_st then holds
     * the SQL before the C cut (ncut_pre statements) and after it. */
    int keep_mem;
    gt_strbuf held;
    gt_map storage_seqs; /* storage id -> r->seq when recorded (temp.gt_ss) */
    int ncut_pre;
    sqlite3_stmt *cut_read[4];    /* the direct rows the C cut needs (cut_read_sql) */
    sqlite3_stmt *cut_drop_saved; /* INSERT INTO temp.gt_sd */

    int failed; /* 0, or the GT_E* code of the error that stopped recording */
    int capped; /* 1: stopped by max_bytes; the file is sound, so the run's
                 * end, the indexes and the close are still written */
    int closed; /* 1: used from a forked child; never touch the file again */
    /* the last message: in place, so the pointer gt_recorder_errmsg hands
     * out stays valid whatever thread writes the next one; room for the
     * two paths (PATH_MAX each) a message may name */
    char errmsg[3 * 4096];

    /* Rows of the four most frequent kinds (ops, op_args, version_bumps,
     * saved_tensors) wait here and go GT__BUF_ROWS at a time through one
     * multi-row INSERT: SQLite's per-statement cost is then paid once per
     * group. Every buffer is written before every COMMIT, so a committed
     * batch is complete. */
    struct gt__rowbuf buf[GT__NBUF];

    /* The row log (options.row_log, whole-trace recording without a size
     * cap): groups are encoded into `log` instead of inserted, and written
     * to log_path with one write(2) after each COMMIT; close folds the file
     * into the trace (see "Row log" at the top). */
    int log_on;
    int log_fd;        /* log_path, O_APPEND; -1 if none */
    char *log_path;    /* path + "-gtlog" */
    gt_strbuf log;     /* encoded blocks waiting for the next commit */
    int64_t log_bytes; /* bytes written to log_path */

    gt__strtab strings;
    gt__inttab frames;  /* (file, line, function, code) */
    gt__inttab stacks;  /* (parent, frame, module) -> id, aux = user_frame */
    gt__inttab threads; /* (os_tid) */
};

/* ---- small helpers ------------------------------------------------------ */

/* 1 if the calling thread holds the handle through gt_recorder_hold. Only
 * this thread sets holder to itself (and back to 0 before it lets go of
 * mu), so the answer is exact without the lock. */
static int held_here(const gt_recorder *r)
{
    return __atomic_load_n(&r->holder, __ATOMIC_RELAXED) == (uintptr_t)pthread_self();
}

/* Take the handle's mutex, unless this thread holds it (gt_recorder_hold);
 * unlock gives it back in the same case only. */
static void lock(gt_recorder *r)
{
    if (!held_here(r))
        pthread_mutex_lock(&r->mu);
}

static void unlock(gt_recorder *r)
{
    if (!held_here(r))
        pthread_mutex_unlock(&r->mu);
}

static int64_t now_ms(void)
{
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void set_errmsg(gt_recorder *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_errmsg(gt_recorder *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
    va_end(ap);
}

static void put_err(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void put_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (!errbuf || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

/* strerror with a lowercase first letter, as house messages are. */
static const char *errno_text(int e, char *buf, size_t len)
{
    snprintf(buf, len, "%s", strerror(e));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

static void bind_id(sqlite3_stmt *st, int i, int64_t v)
{
    if (v == 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

/* Text is bound SQLITE_STATIC, here and for every string parameter: each
 * statement is stepped before the caller's string goes away and rebound
 * before it is stepped again. (SQLITE_TRANSIENT copies, and a copy that
 * ran out of memory left the parameter NULL, unseen: the row was stored
 * with a NULL, or met a NOT NULL constraint reported as a caller mistake.) */
static void bind_str(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

/* ---- the size cap's index estimate --------------------------------------- */

/* Bytes of integer v in an SQLite record (file format 4): 0 and 1 take none
 * (nor NULL, which 0 stands for here), others 1, 2, 3, 4, 6 or 8. */
static int rec_int_bytes(int64_t v)
{
    if (v == 0 || v == 1)
        return 0;
    uint64_t u = v < 0 ? ~(uint64_t)v : (uint64_t)v;
    return u <= 0x7f               ? 1
           : u <= 0x7fff           ? 2
           : u <= 0x7fffff         ? 3
           : u <= 0x7fffffff       ? 4
           : u <= 0x7fffffffffffLL ? 6
                                   : 8;
}

/* Count one entry of close-time index `which` whose record holds the n
 * values v (the indexed columns, then the row's key): its cell pointer (2),
 * payload size (1) and header (1 + one type byte per column), then the
 * values. Rows later rolled back or ignored (INSERT OR IGNORE) only make
 * the estimate larger than the truth, never smaller. */
static void idx_note(gt_recorder *r, enum gt__idx which, int n, const int64_t *v)
{
    if (r->max_bytes <= 0)
        return;
    int64_t b = 4 + n;
    for (int i = 0; i < n; i++)
        b += rec_int_bytes(v[i]);
    r->idx_pending[which] += b;
    r->idx_rows[which]++;
}

/* Upper estimate of the bytes the indexes of indexes.sql add to the file,
 * the open batch's entries included if `pending`: for each index, its
 * leaves filled to at least 90% (CREATE INDEX fills them in key order,
 * nearly full) and at least one (its root while it has one page); once it
 * outgrows a page, an interior root and one interior cell of at most 24
 * bytes per leaf. Then a page for their entries in sqlite_schema. */
static int64_t idx_reserve(const gt_recorder *r, int pending)
{
    int64_t usable = r->page_size - 12, pages = 1;
    for (int i = 0; i < GT__NIDX; i++) {
        int64_t b = r->idx_bytes[i] + (pending ? r->idx_pending[i] : 0);
        int64_t leaves = (b * 10 / 9 + usable - 1) / usable;
        if (leaves < 1)
            leaves = 1;
        pages += leaves + (leaves > 1 ? 1 + leaves * 24 / usable : 0);
    }
    return pages * r->page_size;
}

/* ---- failure ------------------------------------------------------------ */

/* Roll back the open transaction, if any, and forget the open batch: its
 * rows, the rows waiting in the buffers and its index estimate. */
static void drop_batch(gt_recorder *r)
{
    if (r->db && !sqlite3_get_autocommit(r->db)) {
        sqlite3_step(r->st[ST_ROLLBACK]);
        sqlite3_reset(r->st[ST_ROLLBACK]);
    }
    r->in_txn = 0;
    r->batch_n = 0;
    memset(r->idx_pending, 0, sizeof r->idx_pending);
    for (int i = 0; i < GT__NBUF; i++)
        r->buf[i].n = 0, r->buf[i].text_len = 0;
    gt_strbuf_reset(&r->log);
}

/* Turn the handle failed with `code` and the message already in errmsg;
 * roll back the open transaction. Returns code. */
static int fail(gt_recorder *r, int code)
{
    r->failed = code;
    drop_batch(r);
    return code;
}

/* The errno that explains an SQLite i/o error: SQLite's own record of it
 * (often 0 for a failed write), else `err`, the errno seen right after the
 * failed call, if it is one a write can fail with. */
static int full_errno(int sys, int err)
{
    if (sys != 0)
        return sys;
    if (err == EFBIG || err == ENOSPC || err == EDQUOT || err == EIO)
        return err;
    return 0;
}

/* Classify SQLite error `src` met while doing `what`. Errors caused by the
 * caller's values (constraint, bad JSON, ...) return GT_EINVAL and leave the
 * handle working, unless `fatal` is set (a failed COMMIT loses the batch).
 * Every other error stops recording. */
static int sql_error(gt_recorder *r, int src, const char *what, int fatal, int err)
{
    int prim = src & 0xff;
    char eb[128];
    if (!fatal &&
        (prim == SQLITE_CONSTRAINT || prim == SQLITE_MISMATCH || prim == SQLITE_RANGE ||
         prim == SQLITE_TOOBIG || prim == SQLITE_ERROR)) {
        set_errmsg(r, "%s: %s", what, sqlite3_errmsg(r->db));
        return GT_EINVAL;
    }
    int sys = full_errno(sqlite3_system_errno(r->db), err);
    if (prim == SQLITE_FULL ||
        (prim == SQLITE_IOERR && (sys == EFBIG || sys == ENOSPC || sys == EDQUOT))) {
        set_errmsg(r, "recording stopped: disk full or file size limit (%s: %s%s%s)",
                   what, sqlite3_errstr(src), sys ? ": " : "",
                   sys ? errno_text(sys, eb, sizeof(eb)) : "");
        return fail(r, GT_EFULL);
    }
    if (prim == SQLITE_IOERR) {
        set_errmsg(r, "recording stopped: i/o error (%s: %s%s%s)", what,
                   sqlite3_errmsg(r->db), sys ? ": " : "",
                   sys ? errno_text(sys, eb, sizeof(eb)) : "");
        return fail(r, GT_EIO);
    }
    if (prim == SQLITE_NOMEM) {
        set_errmsg(r, "recording stopped: out of memory (%s)", what);
        return fail(r, GT_ENOMEM);
    }
    if (prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB) {
        set_errmsg(r, "recording stopped: trace is damaged (%s: %s)", what,
                   sqlite3_errmsg(r->db));
        return fail(r, GT_ECORRUPT);
    }
    set_errmsg(r, "recording stopped: sqlite error (%s: %s)", what,
               sqlite3_errmsg(r->db));
    return fail(r, GT_ESQL);
}

/* Run a bound statement to completion and reset it. */
static int step(gt_recorder *r, enum gt__stmt which, const char *what, int fatal)
{
    sqlite3_stmt *st = r->st[which];
    errno = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
        sqlite3_reset(st);
        return 0;
    }
    int err = errno;
    rc = sqlite3_reset(st);
    if (rc == SQLITE_OK)
        rc = SQLITE_ERROR;
    return sql_error(r, rc, what, fatal, err);
}

/* sqlite3_exec that also keeps the errno seen right after a failure. */
static int exec_sql(sqlite3 *db, const char *sql, char **emsg, int *err)
{
    errno = 0;
    int rc = sqlite3_exec(db, sql, NULL, NULL, emsg);
    if (rc != SQLITE_OK)
        *err = errno;
    return rc;
}

static void bind_row(sqlite3_stmt *st, int first, const struct gt__rowbuf *b, int row,
                     int which)
{
    const int64_t *val = b->val + row * buf_info[which].ncol;
    const unsigned char *null = b->null + row * buf_info[which].ncol;
    unsigned text = buf_info[which].text;
    for (int k = 0; k < buf_info[which].ncol; k++) {
        if (null[k])
            sqlite3_bind_null(st, first + k);
        else if (text >> k & 1)
            sqlite3_bind_text(st, first + k, b->text + val[k], -1, SQLITE_STATIC);
        else
            sqlite3_bind_int64(st, first + k, val[k]);
    }
}

/* Insert the rows waiting in buffer `which`: GT__BUF_ROWS at once when it is
 * full, else one by one. A caller mistake (only possible for op_args: a
 * duplicate (op, role, pos)) fails the multi-row statement as a whole; the
 * rows are then inserted one by one so that only the bad ones are dropped,
 * and GT_EINVAL is returned with the handle still recording. Other errors
 * stop recording. */
static int flush_buf(gt_recorder *r, int which)
{
    struct gt__rowbuf *b = &r->buf[which];
    int n = b->n, ncol = buf_info[which].ncol, rc, bad = 0;
    if (n == 0)
        return 0;
    size_t text_len = b->text_len;
    b->n = 0;
    b->text_len = 0; /* its bytes stay until the next row is taken */
    if (r->log_on || r->keep_mem) {
        /* held blocks stay in memory: not hashed */
        if (gt_rowlog_put(r->keep_mem ? &r->held : &r->log, which, n, b->val, b->null,
                          ncol, b->text, text_len, !r->keep_mem) != 0) {
            set_errmsg(r, "recording stopped: out of memory (%s)",
                       r->keep_mem ? "window" : "row log");
            return fail(r, GT_ENOMEM);
        }
        return 0;
    }
    if (n == GT__BUF_ROWS) {
        for (int i = 0; i < n; i++)
            bind_row(b->multi, i * ncol + 1, b, i, which);
        errno = 0;
        int src = sqlite3_step(b->multi);
        if (src == SQLITE_DONE) {
            sqlite3_reset(b->multi);
            return 0;
        }
        int err = errno;
        src = sqlite3_reset(b->multi);
        if ((src & 0xff) != SQLITE_CONSTRAINT)
            return sql_error(r, src == SQLITE_OK ? SQLITE_ERROR : src,
                             buf_info[which].what, 1, err);
    }
    for (int i = 0; i < n; i++) {
        bind_row(b->one, 1, b, i, which);
        errno = 0;
        int src = sqlite3_step(b->one);
        if (src == SQLITE_DONE) {
            sqlite3_reset(b->one);
            continue;
        }
        int err = errno;
        src = sqlite3_reset(b->one);
        rc = sql_error(r, src == SQLITE_OK ? SQLITE_ERROR : src, buf_info[which].what, 0,
                       err);
        if (rc != GT_EINVAL)
            return rc;
        bad = 1;
    }
    return bad ? GT_EINVAL : 0;
}

/* Write every buffer; the first GT_EINVAL is returned after all are
 * written, any other error at once. */
static int flush_bufs(gt_recorder *r)
{
    int first = 0;
    for (int i = 0; i < GT__NBUF; i++) {
        int rc = flush_buf(r, i);
        if (rc && rc != GT_EINVAL)
            return rc;
        if (rc && !first)
            first = rc;
    }
    return first;
}

/* Take the next row of buffer `which` (the caller fills it and calls
 * buf_push_done). */
static int64_t *buf_row(gt_recorder *r, int which, unsigned char **null)
{
    struct gt__rowbuf *b = &r->buf[which];
    size_t at = (size_t)b->n * (size_t)buf_info[which].ncol;
    memset(b->null + at, 0, GT__BUF_MAXCOL); /* a constant size: no call */
    *null = b->null + at;
    return b->val + at;
}

/* Room for `need` more bytes in buffer `which`'s text arena. Returns 0, or
 * GT_ENOMEM: out of memory stops recording, as it does inside SQLite. */
static int buf_room(gt_recorder *r, int which, size_t need)
{
    struct gt__rowbuf *b = &r->buf[which];
    if (need > SIZE_MAX - b->text_len ||
        GT_ALLOC_GROW(b->text, b->text_len + need, b->text_cap, 4096) != 0) {
        set_errmsg(r, "recording stopped: out of memory (%s)", buf_info[which].what);
        return fail(r, GT_ENOMEM);
    }
    return 0;
}

/* The n integers at v as "[v0,v1,...]" (gt_ints_format), formatted in place
 * into buffer `which`'s arena; its offset in *off. Returns 0 or GT_ENOMEM. */
static int buf_ints(gt_recorder *r, int which, const int64_t *v, size_t n, int64_t *off)
{
    struct gt__rowbuf *b = &r->buf[which];
    int rc = buf_room(r, which, GT_INTS_ROOM(n));
    if (rc)
        return rc;
    *off = (int64_t)b->text_len;
    b->text_len += gt_ints_format(b->text + b->text_len, v, n) + 1;
    return 0;
}

/* The row taken by buf_row is complete: count it, write the buffer if full,
 * and see whether the batch is due. */
static int end_write(gt_recorder *r);

static int buf_push_done(gt_recorder *r, int which)
{
    if (++r->buf[which].n == GT__BUF_ROWS) {
        int rc = flush_buf(r, which);
        if (rc)
            return rc;
    }
    return end_write(r);
}

/* ---- batching ----------------------------------------------------------- */

/* The next event's seq (r->mu held). Atomic, so gt_recorder_seq reads it
 * without the lock. */
static int64_t next_seq(gt_recorder *r)
{
    return __atomic_add_fetch(&r->seq, 1, __ATOMIC_RELAXED);
}

/* In a forked child, closes the handle with a message and returns 1: a
 * child must not write through its parent's connection. */
static int forked_child(gt_recorder *r)
{
    if (getpid() == r->pid)
        return 0;
    r->closed = 1;
    set_errmsg(r,
               "recorder handle was opened by process %ld, not by this (forked) process",
               (long)r->pid);
    return 1;
}

/* begin_write_as past its common case (a usable handle in a transaction). */
static int begin_write_slow(gt_recorder *r, int run_row)
{
    if (r->closed)
        return GT_ECLOSED;
    if (r->failed && !(run_row && r->capped))
        return GT_EFAILED;
    if (r->in_txn)
        return 0;
    if (forked_child(r))
        return GT_ECLOSED;
    int rc = step(r, ST_BEGIN, "begin", 1);
    if (rc)
        return rc;
    r->in_txn = 1;
    r->batch_n = 0;
    r->batch_start_ms = now_ms();
    return 0;
}

/* Guard of every call that may write: the handle is usable and a
 * transaction is open. `run_row` calls (the run's end) may still write after
 * a size-cap stop. */
static inline int begin_write_as(gt_recorder *r, int run_row)
{
    if (r->in_txn && !r->closed && !r->failed)
        return 0;
    return begin_write_slow(r, run_row);
}

static int begin_write(gt_recorder *r)
{
    return begin_write_as(r, 0);
}

/* Stop recording at the size cap: the open batch would take the closed file
 * to `bytes` > max_bytes, so it is rolled back and every event up to the
 * last commit (r->committed_seq) is what the trace keeps. The run row says
 * where and why (written at once, so a later kill keeps it); the run's end
 * and the close are still written. */
static int write_window(gt_recorder *r);

static int stop_at_cap(gt_recorder *r, int64_t bytes)
{
    char why[160];
    drop_batch(r);
    snprintf(why, sizeof why, "size cap: %" PRId64 " bytes > max_bytes %" PRId64, bytes,
             r->max_bytes);
    sqlite3_stmt *st = r->st[ST_RUN_STOPPED];
    sqlite3_bind_int64(st, 1, r->committed_seq > 0 ? r->committed_seq : 1);
    sqlite3_bind_text(st, 2, why, -1, SQLITE_STATIC);
    int rc = step(r, ST_RUN_STOPPED, "mark the stop", 1);
    if (rc)
        return rc;
    set_errmsg(r,
               "recording stopped: trace reached its size cap (the next batch would "
               "make it %" PRId64 " bytes with its indexes > max_bytes %" PRId64 ")",
               bytes, r->max_bytes);
    r->capped = 1;
    fail(r, GT_EFULL);
    if (r->keep_last) {
        /* the flight recorder's window is written at the cap */
        r->failed = 0;
        rc = write_window(r);
        if (rc)
            return rc;
        r->failed = GT_EFULL;
    }
    return GT_EFULL;
}

/* The size the closed file would have if the open batch were committed:
 * its pages now (the open transaction's included) plus the indexes' upper
 * estimate. 0 and an error code on failure. */
static int live_pages(gt_recorder *r, int64_t *out);

static int projected_bytes(gt_recorder *r, int64_t *out)
{
    int64_t pages = 0;
    int rc = live_pages(r, &pages);
    if (rc)
        return rc;
    *out = pages * r->page_size + idx_reserve(r, 1);
    return 0;
}

/* After a commit of `rows` rows that left the file at `bytes` (projected,
 * `before` at the commit before): the next batch holds at most a quarter of
 * the room left, at the larger of the average bytes per row so far and the
 * last batch's, so that the file approaches the cap in ever smaller steps
 * and a batch of big rows slows it at once. */
static void shrink_batch(gt_recorder *r, int64_t bytes, int64_t before, unsigned rows)
{
    int64_t room = r->max_bytes - bytes;
    int64_t grown = bytes - r->base_bytes;
    if (r->rows_committed <= 0 || grown <= 0)
        return;
    int64_t per_row = grown / r->rows_committed + 1;
    if (rows > 0 && bytes > before && (bytes - before) / rows + 1 > per_row)
        per_row = (bytes - before) / rows + 1;
    int64_t fit = room / 4 / per_row;
    if (fit < GT__BUF_ROWS)
        fit = GT__BUF_ROWS;
    if ((int64_t)r->batch_cur > fit)
        r->batch_cur = (unsigned)fit;
}

static int cut_window(gt_recorder *r, int64_t last, int *cut);

/* Append the blocks encoded since the last commit to the row log file, in
 * one write(2) when it can (a short write is continued). On failure the
 * file is cut back to its last complete commit, recording stops (GT_EFULL
 * for a full disk or file size limit, else GT_EIO) and the rows already in
 * the file stay foldable. */
static int write_log(gt_recorder *r)
{
    const char *p = r->log.p;
    size_t left = r->log.len;
    while (left > 0) {
        ssize_t w = write(r->log_fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            char eb[128];
            (void)!ftruncate(r->log_fd, (off_t)r->log_bytes);
            gt_strbuf_reset(&r->log);
            if (e == ENOSPC || e == EFBIG || e == EDQUOT) {
                set_errmsg(r,
                           "recording stopped: disk full or file size limit (row log "
                           "%s: %s)",
                           r->log_path, errno_text(e, eb, sizeof eb));
                return fail(r, GT_EFULL);
            }
            set_errmsg(r, "recording stopped: i/o error (row log %s: %s)", r->log_path,
                       errno_text(e, eb, sizeof eb));
            return fail(r, GT_EIO);
        }
        p += w;
        left -= (size_t)w;
    }
    r->log_bytes += (int64_t)r->log.len;
    gt_strbuf_reset(&r->log);
    return 0;
}

static int commit(gt_recorder *r)
{
    if (!r->in_txn)
        return 0;
    if (forked_child(r))
        return GT_ECLOSED;
    int args_rc = flush_bufs(r);
    if (args_rc && args_rc != GT_EINVAL)
        return args_rc;
    int64_t bytes = 0;
    int capping = r->max_bytes > 0 && !r->capped;
    if (capping) {
        int rc = projected_bytes(r, &bytes);
        if (rc)
            return rc;
        if (bytes > r->max_bytes && r->keep_last) {
            /* the flight recorder first lets go of the calls it holds
             * beyond keep_last */
            int cut = 0;
            if ((rc = cut_window(r, r->next_backward - 1, &cut)) != 0 ||
                (cut && (rc = projected_bytes(r, &bytes)) != 0))
                return rc;
        }
        if (bytes > r->max_bytes)
            return stop_at_cap(r, bytes);
    }
    unsigned rows = r->batch_n;
    int rc = step(r, ST_COMMIT, "commit", 1);
    r->in_txn = 0;
    r->batch_n = 0;
    if (rc)
        return rc;
    if (r->log_on && r->log.len > 0) {
        /* the commit's blocks, then its marker: a reader folds a commit
         * only whole */
        if (gt_rowlog_put_commit(&r->log, r->seq) != 0) {
            set_errmsg(r, "recording stopped: out of memory (row log)");
            return fail(r, GT_ENOMEM);
        }
        if ((rc = write_log(r)) != 0)
            return rc;
    }
    r->committed_seq = r->seq;
    r->rows_committed += rows;
    for (int i = 0; i < GT__NIDX; i++)
        r->idx_bytes[i] += r->idx_pending[i];
    memset(r->idx_pending, 0, sizeof r->idx_pending);
    if (r->batch_cur < r->batch_events)
        r->batch_cur =
            r->batch_cur > r->batch_events / 2 ? r->batch_events : r->batch_cur * 2;
    if (capping) {
        shrink_batch(r, bytes, r->last_bytes, rows);
        r->last_bytes = bytes;
    }
    return args_rc;
}

/* 1 if the open batch is batch_ms old or older. */
static int batch_old(const gt_recorder *r)
{
    return now_ms() - r->batch_start_ms >= r->batch_ms;
}

/* After a row was written: count it and commit when the batch is full or
 * old enough (its age is checked at gt_recorder_release while a thread
 * holds the handle). */
static int end_write(gt_recorder *r)
{
    if (++r->batch_n >= r->batch_cur ||
        (!__atomic_load_n(&r->holder, __ATOMIC_RELAXED) && batch_old(r)))
        return commit(r);
    return 0;
}

/* ---- the flight recorder (keep_last) ------------------------------------ */

/* Temporary tables of the rows a cut keeps: nodes, tensors, old ops, old
 * version bumps, backward calls. Created at open in keep_last mode. */
static const char cut_tables_sql[] =
    "CREATE TEMP TABLE gt_kn (id INTEGER PRIMARY KEY);"
    "CREATE TEMP TABLE gt_kt (id INTEGER PRIMARY KEY);"
    "CREATE TEMP TABLE gt_ko (seq INTEGER PRIMARY KEY);"
    "CREATE TEMP TABLE gt_kb (seq INTEGER PRIMARY KEY);"
    "CREATE TEMP TABLE gt_kc (id INTEGER PRIMARY KEY);"
    "CREATE TEMP TABLE gt_sd (seq INTEGER PRIMARY KEY);" /* keep_mem: saved dropped */
    /* the seq at which each storage was recorded (storages has none) */
    "CREATE TEMP TABLE gt_ss (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);"
    "CREATE TEMP TABLE gt_cut (c INTEGER, k INTEGER); INSERT INTO gt_cut VALUES (0, 1);";

/* Pieces of the cut shared by its two forms: the kept backward calls (from
 * K on, and any still running or ending after C); a fingerprint taken in a
 * dropped call; the dropped direct events; the dropped calls' rows and
 * what the run row says of the cut. */
#define CUT_CALLS_KEPT_SQL                                                               \
    "INSERT INTO temp.gt_kc SELECT id FROM backward_calls"                               \
    " WHERE id >= (SELECT k FROM temp.gt_cut) OR end_seq IS NULL"                        \
    " OR end_seq > (SELECT c FROM temp.gt_cut);"
#define CUT_FINGERPRINT_CALL_SQL "(backward IS NOT NULL AND backward NOT IN temp.gt_kc);"
#define CUT_OLD_EVENTS_SQL                                                               \
    "DELETE FROM storage_swaps WHERE seq <= (SELECT c FROM temp.gt_cut);"                \
    "DELETE FROM kernel_writes WHERE op <= (SELECT c FROM temp.gt_cut);"                 \
    "DELETE FROM errors WHERE seq <= (SELECT c FROM temp.gt_cut);"
#define CUT_CALLS_SQL                                                                    \
    "DELETE FROM backward_roots WHERE backward NOT IN temp.gt_kc;"                       \
    "DELETE FROM backward_inputs WHERE backward NOT IN temp.gt_kc;"                      \
    "DELETE FROM backward_calls WHERE id NOT IN temp.gt_kc;"                             \
    "UPDATE run SET kept_from_seq = (SELECT c FROM temp.gt_cut) + 1,"                    \
    " kept_from_backward = (SELECT k FROM temp.gt_cut) WHERE id = 1;"

/* The cut, with C (the last dropped seq) and K (the first kept backward
 * call) read from temp.gt_cut: first what is kept, from the events after C outward
 * along the references, then the deletes. See recorder.h for the rules. */
static const char cut_sql[] =
    "DELETE FROM temp.gt_kn; DELETE FROM temp.gt_kt; DELETE FROM temp.gt_ko;"
    "DELETE FROM temp.gt_kb; DELETE FROM temp.gt_kc;" CUT_CALLS_KEPT_SQL
    /* nodes: recorded, run or used after C, and every node their edges reach */
    "INSERT INTO temp.gt_kn WITH RECURSIVE k(id) AS ("
    " SELECT id FROM nodes WHERE seq > (SELECT c FROM temp.gt_cut)"
    " UNION SELECT node FROM node_execs WHERE seq > (SELECT c FROM temp.gt_cut)"
    " UNION SELECT node FROM saved_tensors WHERE seq > (SELECT c FROM temp.gt_cut)"
    " UNION SELECT node FROM backward_roots WHERE node IS NOT NULL"
    "  AND backward IN temp.gt_kc"
    " UNION SELECT e.next FROM edges e JOIN k ON e.node = k.id WHERE e.next IS NOT NULL)"
    " SELECT id FROM k;"
    /* old bumps of a tensor saved by a kept node, after its save */
    "INSERT OR IGNORE INTO temp.gt_kb SELECT b.seq FROM saved_tensors s"
    " JOIN temp.gt_kn n ON n.id = s.node JOIN tensors st ON st.id = s.tensor"
    " JOIN tensors bt ON bt.version_counter = st.version_counter"
    " JOIN version_bumps b ON b.tensor = bt.id"
    " WHERE s.seq <= (SELECT c FROM temp.gt_cut) AND b.seq > s.seq AND b.seq <= (SELECT "
    "c FROM temp.gt_cut);"
    /* old ops: those that made a kept node or a kept old bump */
    "INSERT OR IGNORE INTO temp.gt_ko SELECT op FROM nodes"
    " WHERE id IN temp.gt_kn AND op <= (SELECT c FROM temp.gt_cut)"
    " UNION SELECT op FROM version_bumps WHERE seq IN temp.gt_kb AND op IS NOT NULL;"
    /* tensors: recorded after C or referenced by what is kept */
    "INSERT OR IGNORE INTO temp.gt_kt"
    " SELECT id FROM tensors WHERE seq > (SELECT c FROM temp.gt_cut)"
    " UNION SELECT tensor FROM op_args WHERE op > (SELECT c FROM temp.gt_cut) OR op IN "
    "temp.gt_ko"
    " UNION SELECT tensor FROM saved_tensors WHERE node IN temp.gt_kn"
    "  AND tensor IS NOT NULL"
    " UNION SELECT tensor FROM node_outputs WHERE node IN temp.gt_kn"
    " UNION SELECT variable FROM nodes WHERE id IN temp.gt_kn AND variable IS NOT NULL"
    " UNION SELECT tensor FROM version_bumps WHERE seq > (SELECT c FROM temp.gt_cut) OR "
    "seq IN temp.gt_kb"
    " UNION SELECT tensor FROM backward_roots WHERE tensor IS NOT NULL"
    "  AND backward IN temp.gt_kc"
    " UNION SELECT tensor FROM backward_inputs WHERE backward IN temp.gt_kc"
    " UNION SELECT tensor FROM storage_swaps WHERE seq > (SELECT c FROM temp.gt_cut);"
    /* ... with the bases of views and the tensors named as version counters */
    "INSERT OR IGNORE INTO temp.gt_kt WITH RECURSIVE a(id) AS ("
    " SELECT id FROM temp.gt_kt"
    " UNION SELECT CASE w.k WHEN 0 THEN t.alias_of ELSE t.version_counter END"
    "  FROM a JOIN tensors t ON t.id = a.id"
    "  JOIN (SELECT 0 AS k UNION ALL SELECT 1) w"
    "  WHERE (CASE w.k WHEN 0 THEN t.alias_of ELSE t.version_counter END) IS NOT NULL)"
    " SELECT id FROM a;"
    /* ... and the ops that made them */
    "INSERT OR IGNORE INTO temp.gt_ko SELECT created_by FROM tensors"
    " WHERE id IN temp.gt_kt AND created_by <= (SELECT c FROM temp.gt_cut);"
    "DELETE FROM ops WHERE seq <= (SELECT c FROM temp.gt_cut) AND seq NOT IN temp.gt_ko;"
    "DELETE FROM op_args WHERE op <= (SELECT c FROM temp.gt_cut)"
    " AND (op NOT IN temp.gt_ko OR tensor NOT IN temp.gt_kt);"
    "DELETE FROM version_bumps WHERE seq <= (SELECT c FROM temp.gt_cut) AND seq NOT IN "
    "temp.gt_kb;"
    "DELETE FROM saved_tensors WHERE node NOT IN temp.gt_kn;"
    "DELETE FROM saved_earlier WHERE saved NOT IN (SELECT seq FROM saved_tensors);"
    "DELETE FROM saved_fingerprints WHERE saved NOT IN (SELECT seq FROM saved_tensors)"
    " OR " CUT_FINGERPRINT_CALL_SQL
    /* the dropped nodes' rows, runs before C */
    "DELETE FROM edges WHERE node NOT IN temp.gt_kn;"
    "DELETE FROM node_outputs WHERE node NOT IN temp.gt_kn;"
    "DELETE FROM node_execs WHERE seq <= (SELECT c FROM temp.gt_cut);"
    "DELETE FROM nodes WHERE id NOT IN temp.gt_kn;"
    /* swaps and errors before C */
    CUT_OLD_EVENTS_SQL
    /* names: of kept tensors; before C only the latest of each */
    "DELETE FROM names WHERE tensor NOT IN temp.gt_kt OR (seq <= (SELECT c FROM "
    "temp.gt_cut) AND EXISTS"
    " (SELECT 1 FROM names n WHERE n.tensor = names.tensor AND n.name = names.name"
    "  AND n.seq > names.seq));"
    "DELETE FROM tensors WHERE id NOT IN temp.gt_kt;"
    "DELETE FROM storages WHERE id IN (SELECT id FROM temp.gt_ss"
    " WHERE seq <= (SELECT c FROM temp.gt_cut)) AND id NOT IN (SELECT storage FROM "
    "tensors"
    " WHERE storage IS NOT NULL UNION SELECT old_storage FROM storage_swaps"
    " WHERE old_storage IS NOT NULL UNION SELECT new_storage FROM storage_swaps"
    " WHERE new_storage IS NOT NULL);"
    "DELETE FROM temp.gt_ss WHERE id NOT IN (SELECT id FROM storages);" CUT_CALLS_SQL;

/* The cut when the frequent rows are held as blocks (keep_mem): the kept
 * calls first (cut_pre_sql), then the direct rows the C cut needs
 * (cut_read_sql, in gt__cut_in's order), the C cut (keepcut.c, the rules
 * of cut_sql above), the saved seqs whose row it dropped into temp.gt_sd,
 * and the deletes of the direct tables (cut_post_sql). */
static const char cut_pre_sql[] =
    "DELETE FROM temp.gt_kc; DELETE FROM temp.gt_sd;" CUT_CALLS_KEPT_SQL;

static const char *const cut_read_sql[4] = {
    "SELECT node FROM backward_roots WHERE node IS NOT NULL AND backward IN temp.gt_kc",
    "SELECT tensor FROM backward_roots WHERE tensor IS NOT NULL"
    " AND backward IN temp.gt_kc"
    " UNION ALL SELECT tensor FROM backward_inputs WHERE backward IN temp.gt_kc"
    " UNION ALL SELECT tensor FROM storage_swaps WHERE tensor IS NOT NULL"
    " AND seq > (SELECT c FROM temp.gt_cut)",
    "SELECT old_storage FROM storage_swaps WHERE old_storage IS NOT NULL"
    " AND seq > (SELECT c FROM temp.gt_cut)"
    " UNION ALL SELECT new_storage FROM storage_swaps WHERE new_storage IS NOT NULL"
    " AND seq > (SELECT c FROM temp.gt_cut)",
    "SELECT saved FROM saved_earlier UNION SELECT saved FROM saved_fingerprints",
};

static const char cut_post_sql[] =
    "DELETE FROM saved_earlier WHERE saved IN temp.gt_sd;"
    "DELETE FROM saved_fingerprints WHERE saved IN temp.gt_sd"
    " OR " CUT_FINGERPRINT_CALL_SQL CUT_OLD_EVENTS_SQL CUT_CALLS_SQL;

/* The database's pages in use (its freelist left out: the flight
 * recorder's cuts free pages) in *out. */
static int live_pages(gt_recorder *r, int64_t *out)
{
    sqlite3_stmt *st = r->st[ST_PAGE_COUNT];
    int64_t pages = 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        pages = sqlite3_column_int64(st, 0);
    int rc = sqlite3_reset(st);
    if (rc != SQLITE_OK)
        return sql_error(r, rc, "page_count", 1, 0);
    *out = pages;
    return 0;
}

/* The rows each close-time index will hold an entry for, in enum gt__idx
 * order. */
static const char idx_count_sql[] =
    "SELECT (SELECT count(*) FROM op_args WHERE role = 2), (SELECT count(*) FROM "
    "tensors),"
    " (SELECT count(*) FROM tensors), (SELECT count(*) FROM version_bumps),"
    " (SELECT count(*) FROM nodes), (SELECT count(*) FROM saved_tensors),"
    " (SELECT count(*) FROM saved_tensors), (SELECT count(*) FROM edges),"
    " (SELECT count(*) FROM names)";

/* After a cut: the size cap's index estimate for the rows left, at the
 * average bytes per entry noted so far (the open batch's entries counted
 * as committed: a rollback after a cut only makes the estimate larger). */
static int recount_idx(gt_recorder *r)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(r->db, idx_count_sql, -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < GT__NIDX; i++) {
            int64_t n = sqlite3_column_int64(st, i);
            int64_t b = r->idx_bytes[i] + r->idx_pending[i];
            int64_t per =
                r->idx_rows[i] > 0 ? (b + r->idx_rows[i] - 1) / r->idx_rows[i] : 0;
            r->idx_bytes[i] = per * n;
            r->idx_pending[i] = 0;
            r->idx_rows[i] = n;
        }
    }
    int rc2 = sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = rc2;
    return rc == SQLITE_OK ? 0 : sql_error(r, rc, "window cut", 1, 0);
}

/* Step the cut's statements cut_st[from..to). Returns the SQLite result;
 * *err the errno after the last step. */
static int run_cut_stmts(gt_recorder *r, int from, int to, int *err)
{
    int rc = SQLITE_OK;
    for (int i = from; rc == SQLITE_OK && i < to; i++) {
        errno = 0;
        int src = sqlite3_step(r->cut_st[i]);
        *err = errno;
        rc = sqlite3_reset(r->cut_st[i]);
        if (rc == SQLITE_OK && src != SQLITE_DONE && src != SQLITE_ROW)
            rc = SQLITE_ERROR;
    }
    return rc;
}

/* keep_mem: read the direct rows the C cut needs (cut_read_sql), cut the
 * held blocks (keepcut.c) at C = c, and note the saved seqs whose row it
 * dropped in temp.gt_sd. Returns 0 with the SQLite result in *src, or the
 * error that stopped recording (out of memory). */
static int cut_held(gt_recorder *r, int64_t c, int *src)
{
    gt__cut_in in = {.c = c};
    gt__i64v *lists[4] = {&in.root_nodes, &in.tensors, &in.swap_storages, &in.saved_refs};
    int rc = 0;
    *src = SQLITE_OK;
    for (int q = 0; q < 4 && *src == SQLITE_OK && !rc; q++) {
        sqlite3_stmt *st = r->cut_read[q];
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW && !rc)
            if (gt__i64v_push(lists[q], sqlite3_column_int64(st, 0)) != 0)
                rc = GT_ENOMEM;
        int s2 = sqlite3_reset(st);
        if (!rc && s != SQLITE_DONE)
            *src = s2 != SQLITE_OK ? s2 : SQLITE_ERROR;
    }
    if (!rc && *src == SQLITE_OK)
        rc = gt__cut_held(&r->held, &in, &r->storage_seqs);
    for (size_t i = 0; !rc && *src == SQLITE_OK && i < in.dropped_refs.n; i++) {
        sqlite3_stmt *st = r->cut_drop_saved;
        sqlite3_bind_int64(st, 1, in.dropped_refs.p[i]);
        int s = sqlite3_step(st), s2 = sqlite3_reset(st);
        if (s != SQLITE_DONE)
            *src = s2 != SQLITE_OK ? s2 : SQLITE_ERROR;
    }
    for (int q = 0; q < 4; q++)
        free(lists[q]->p);
    free(in.dropped_refs.p);
    if (rc == GT_ENOMEM)
        set_errmsg(r, "recording stopped: out of memory (window cut)");
    else if (rc)
        set_errmsg(r, "recording stopped: the window's held rows are damaged");
    return rc ? fail(r, rc) : 0;
}

/*
 * Keep backward calls from last - keep_last + 1 on (last: the newest call,
 * the one about to start at gt_backward_begin) and drop what lies before,
 * the rows those calls reference excepted (cut_sql). Runs inside the open
 * transaction, the row buffers written first. The index estimate of the
 * size cap shrinks with the live pages. *cut (may be NULL) is set to 1 if
 * anything was dropped. Returns 0 or an error that stopped recording.
 */
static int cut_window(gt_recorder *r, int64_t last, int *cut)
{
    int64_t first = last - (int64_t)r->keep_last + 1, c = -1;
    if (cut)
        *cut = 0;
    if (first <= r->kept_from)
        return 0;
    int rc = flush_bufs(r);
    if (rc && rc != GT_EINVAL)
        return rc;
    sqlite3_stmt *st = r->st[ST_BW_CUTOFF];
    sqlite3_bind_int64(st, 1, first - 1);
    if (sqlite3_step(st) == SQLITE_ROW)
        c = sqlite3_column_int64(st, 0);
    if ((rc = sqlite3_reset(st)) != SQLITE_OK)
        return sql_error(r, rc, "window cut", 1, 0);
    if (c < 0) { /* that call's row is gone already */
        r->kept_from = first;
        return 0;
    }
    char set[96];
    snprintf(set, sizeof set, "UPDATE temp.gt_cut SET c = %" PRId64 ", k = %" PRId64, c,
             first);
    int err = 0;
    rc = exec_sql(r->db, set, NULL, &err);
    if (rc == SQLITE_OK)
        rc = run_cut_stmts(r, 0, r->keep_mem ? r->ncut_pre : r->ncut, &err);
    if (rc == SQLITE_OK && r->keep_mem) {
        int crc = cut_held(r, c, &rc);
        if (crc)
            return crc;
        if (rc == SQLITE_OK)
            rc = run_cut_stmts(r, r->ncut_pre, r->ncut, &err);
    }
    if (rc != SQLITE_OK)
        return sql_error(r, sqlite3_extended_errcode(r->db), "window cut", 1, err);
    r->kept_from = first;
    __atomic_store_n(&r->window_start, c + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&r->cuts, 1, __ATOMIC_RELEASE);
    if (cut)
        *cut = 1;
    if (r->max_bytes > 0)
        rc = recount_idx(r);
    return rc;
}

/* The window's next cut is due at gt_backward_begin once this many calls
 * beyond keep_last are held: cuts are paid once per that many calls. */
static int64_t cut_slack(const gt_recorder *r)
{
    return r->keep_last > 16 ? r->keep_last : 16;
}

/* Remove path + suffix, if any. */
static void unlink_suffixed(const char *path, const char *suffix)
{
    char *p = sqlite3_mprintf("%s%s", path, suffix);
    if (p)
        (void)unlink(p);
    sqlite3_free(p);
}

/*
 * Write the flight recorder's window to the trace file: commit, cut to the
 * last keep_last calls, copy the database out (VACUUM INTO a file beside
 * the trace), insert the held rows there (keep_mem: gt_rowlog_fold_mem,
 * the blocks stay held), create the indexes, and rename the copy over the
 * trace, whose flock moves to the new file. Readers of the old file keep
 * reading it. Returns 0, or the error (the handle is then failed; the
 * trace file is the one last written).
 */
static int write_window(gt_recorder *r)
{
    int rc = begin_write(r);
    if (rc || (rc = cut_window(r, r->next_backward - 1, NULL)) != 0)
        return rc;
    if ((rc = commit(r)) != 0 && rc != GT_EINVAL)
        return rc;
    char *tmp = sqlite3_mprintf("%s.gt-keep", r->path);
    sqlite3 *out = NULL;
    sqlite3_stmt *st = NULL;
    const char *what = "copy the window";
    int src = SQLITE_NOMEM, err = 0;
    if (!tmp)
        goto fail_copy;
    (void)unlink(tmp);
    unlink_suffixed(tmp, "-journal");
    src = sqlite3_prepare_v2(r->db, "VACUUM INTO ?1", -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(st, 1, tmp, -1, SQLITE_STATIC);
        errno = 0;
        src =
            sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_extended_errcode(r->db);
        err = errno;
    }
    sqlite3_finalize(st);
    if (src != SQLITE_OK)
        goto fail_copy;
    what = "index the window";
    src = sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE, NULL);
    if (src == SQLITE_OK) {
        sqlite3_extended_result_codes(out, 1);
        src = exec_sql(out, "BEGIN", NULL, &err);
        if (src == SQLITE_OK && r->keep_mem) { /* the held rows, into the copy */
            what = "write the window's rows";
            errno = 0;
            src = gt_rowlog_fold_mem(out, r->held.p, r->held.len, NULL);
            err = errno;
        }
        if (src == SQLITE_OK) {
            what = "index the window";
            src = exec_sql(out, gt_indexes_sql, NULL, &err);
        }
        if (src == SQLITE_OK)
            src = exec_sql(out, "COMMIT", NULL, &err);
    }
    if (src != SQLITE_OK) {
        set_errmsg(r, "recording stopped: cannot write the window to %s (%s: %s)",
                   r->path, what, out ? sqlite3_errmsg(out) : sqlite3_errstr(src));
        sqlite3_close(out);
        goto fail_file;
    }
    if (sqlite3_close(out) != SQLITE_OK)
        goto fail_copy;
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        (void)flock(fd, LOCK_EX | LOCK_NB);
    }
    if (rename(tmp, r->path) != 0) {
        char eb[128];
        set_errmsg(r, "recording stopped: cannot write the window to %s (rename: %s)",
                   r->path, errno_text(errno, eb, sizeof eb));
        if (fd >= 0)
            close(fd);
        goto fail_file;
    }
    if (fd >= 0) {
        if (r->lock_fd >= 0)
            close(r->lock_fd);
        r->lock_fd = fd;
    }
    sqlite3_free(tmp);
    r->write_due = 0;
    return 0;

fail_copy : {
    char eb[128];
    int sys = err == ENOSPC || err == EFBIG || err == EDQUOT || err == EIO ? err : 0;
    set_errmsg(r, "recording stopped: cannot write the window to %s (%s: %s%s%s)",
               r->path, what, sqlite3_errstr(src), sys ? ": " : "",
               sys ? errno_text(sys, eb, sizeof eb) : "");
    if (sys == ENOSPC || sys == EFBIG || sys == EDQUOT || (src & 0xff) == SQLITE_FULL)
        src = SQLITE_FULL;
}
fail_file:
    if (tmp) {
        (void)unlink(tmp);
        unlink_suffixed(tmp, "-journal");
    }
    sqlite3_free(tmp);
    return fail(r, (src & 0xff) == SQLITE_FULL ? GT_EFULL
                   : src == SQLITE_NOMEM       ? GT_ENOMEM
                                               : GT_EIO);
}

/* ---- lifecycle ---------------------------------------------------------- */

/* Finalize every statement of the handle (before its connection closes)
 * and free the row buffers' text. */
static void finalize_stmts(gt_recorder *r)
{
    sqlite3_finalize(r->storage_seq);
    for (int i = 0; i < r->ncut; i++)
        sqlite3_finalize(r->cut_st[i]);
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(r->cut_read[i]);
    sqlite3_finalize(r->cut_drop_saved);
    for (int i = 0; i < GT__NBUF; i++) {
        sqlite3_finalize(r->buf[i].multi);
        sqlite3_finalize(r->buf[i].one);
        free(r->buf[i].text);
    }
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(r->st[i]);
}

/* Remove path-wal, path-shm and path-gtlog, if any. */
static void unlink_sidecars(const char *path)
{
    size_t n = strlen(path);
    char *side = malloc(n + sizeof GT_ROWLOG_SUFFIX);
    if (!side)
        return;
    memcpy(side, path, n);
    memcpy(side + n, "-wal", 5);
    unlink(side);
    memcpy(side + n, "-shm", 5);
    unlink(side);
    memcpy(side + n, GT_ROWLOG_SUFFIX, sizeof GT_ROWLOG_SUFFIX);
    unlink(side);
    free(side);
}

static void release(gt_recorder *r)
{
    gt__strtab_release(&r->strings);
    gt__inttab_release(&r->frames);
    gt__inttab_release(&r->stacks);
    gt__inttab_release(&r->threads);
    pthread_mutex_destroy(&r->mu);
    /* closed only once SQLite has closed its own descriptors of the file:
     * closing any descriptor of a file drops the process's POSIX locks on
     * it, SQLite's included */
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    if (r->log_fd >= 0)
        close(r->log_fd);
    gt_strbuf_release(&r->log);
    gt_strbuf_release(&r->held);
    gt_map_clear(&r->storage_seqs);
    free(r->log_path);
    free(r->path);
    free(r);
}

/* Prepare the statements of `sql` (several, ';'-separated) into
 * r->cut_st after those there. Returns 0, or -1 (the error in r->db, or
 * more than GT__CUT_MAX statements). */
static int prepare_cut(gt_recorder *r, const char *sql)
{
    while (sql && *sql) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, &sql) !=
            SQLITE_OK)
            return -1;
        if (!st)
            continue; /* trailing blank */
        if (r->ncut == GT__CUT_MAX) {
            sqlite3_finalize(st);
            return -1;
        }
        r->cut_st[r->ncut++] = st;
    }
    return 0;
}

/* path, absolute: the process may change its working directory while it
 * records (hydra does), and the close renames and reopens files by this
 * name (the row log, the finished file). Malloc'd; path as given when the
 * working directory cannot be read; NULL when out of memory. */
static char *absolute_path(const char *path)
{
    char *cwd = path[0] == '/' ? NULL : getcwd(NULL, 0);
    if (!cwd)
        return strdup(path);
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", cwd, path);
    free(cwd);
    return p;
}

/* Where gt_recorder_open reports a failure: the path as the caller gave it
 * (messages name it; the file is created and, on failure, removed by it)
 * and the caller's buffer for the message. */
struct open_err {
    const char *path;
    char *buf;
    size_t len;
};

/* A step of opening that SQLite refused: put "cannot create trace PATH:
 * STAGE: MESSAGE" (emsg, from sqlite3_exec, else the connection's message)
 * and free emsg; err is the errno seen with the failure. Returns the
 * error code: GT_EFULL, GT_ENOMEM, GT_EIO, or GT_ESQL for anything else. */
static int open_sql_error(gt_recorder *r, const struct open_err *e, const char *stage,
                          char *emsg, int err)
{
    int rc;
    put_err(e->buf, e->len, "cannot create trace %s: %s: %s", e->path, stage,
            emsg ? emsg : sqlite3_errmsg(r->db));
    int prim = sqlite3_errcode(r->db) & 0xff;
    int sys = full_errno(sqlite3_system_errno(r->db), err);
    if (prim == SQLITE_FULL ||
        (prim == SQLITE_IOERR && (sys == EFBIG || sys == ENOSPC || sys == EDQUOT)))
        rc = GT_EFULL;
    else if (prim == SQLITE_NOMEM)
        rc = GT_ENOMEM;
    else if (prim == SQLITE_IOERR || prim == SQLITE_CANTOPEN)
        rc = GT_EIO;
    else
        rc = GT_ESQL;
    sqlite3_free(emsg);
    return rc;
}

/* A new handle with the options applied and the absolute path, no file or
 * database yet, into *out. Returns 0, or GT_ENOMEM (nothing left
 * allocated, *out untouched). */
static int new_handle(const gt_recorder_options *opts, const struct open_err *e,
                      gt_recorder **out)
{
    gt_recorder *r = calloc(1, sizeof(*r));
    if (!r) {
        put_err(e->buf, e->len, "cannot create trace %s: out of memory", e->path);
        return GT_ENOMEM;
    }
    r->lock_fd = -1;
    r->log_fd = -1;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        put_err(e->buf, e->len, "cannot create trace %s: mutex init failed", e->path);
        return GT_ENOMEM;
    }
    gt__strtab_init(&r->strings);
    gt__inttab_init(&r->frames, 4);
    gt__inttab_init(&r->stacks, 3);
    gt__inttab_init(&r->threads, 1);
    r->batch_events =
        opts && opts->batch_events ? opts->batch_events : GT__DEFAULT_BATCH_EVENTS;
    r->batch_cur = r->batch_events < GT__FIRST_BATCH ? r->batch_events : GT__FIRST_BATCH;
    r->batch_ms = opts && opts->batch_ms ? opts->batch_ms : GT__DEFAULT_BATCH_MS;
    r->max_bytes = opts ? opts->max_bytes : 0;
    r->close_wait_ms =
        opts && opts->close_wait_ms ? opts->close_wait_ms : GT__DEFAULT_CLOSE_WAIT_MS;
    r->keep_last = opts ? opts->keep_last : 0;
    r->kept_from = 1;
    r->pid = getpid();
    r->next_string = r->next_frame = r->next_stack = r->next_thread = 1;
    r->next_backward = 1;
    r->path = absolute_path(e->path);
    if (!r->path) {
        put_err(e->buf, e->len, "cannot create trace %s: out of memory", e->path);
        release(r);
        return GT_ENOMEM;
    }
    *out = r;
    return 0;
}

/* Create the trace file ourselves, its flock held in r->lock_fd: O_EXCL
 * refuses an existing trace and the errno says why a path is unusable; with
 * opts->overwrite a file there (not a directory, not a live recording's) is
 * removed first. Returns 0, or GT_EEXIST or GT_EIO with nothing created. */
static int create_file(gt_recorder *r, const gt_recorder_options *opts,
                       const struct open_err *e)
{
    const char *path = e->path;
    char eb[128];
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!(opts && opts->overwrite)) {
            put_err(e->buf, e->len, "cannot create trace %s: file exists", path);
            return GT_EEXIST;
        }
        if (S_ISDIR(sb.st_mode)) {
            put_err(e->buf, e->len, "cannot create trace %s: is a directory", path);
            return GT_EIO;
        }
        if (gt_trace_is_live(path)) {
            put_err(e->buf, e->len,
                    "cannot replace trace %s: another recording "
                    "is writing it",
                    path);
            return GT_EEXIST;
        }
        if (unlink(path) != 0) {
            put_err(e->buf, e->len, "cannot replace trace %s: %s", path,
                    errno_text(errno, eb, sizeof(eb)));
            return GT_EIO;
        }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int err = errno;
        put_err(e->buf, e->len, "cannot create trace %s: %s", path,
                errno_text(err, eb, sizeof(eb)));
        return err == EEXIST ? GT_EEXIST : GT_EIO;
    }
    /* Held for the handle's life: a later overwrite of this path sees that
     * a recording is live (flock locks are apart from SQLite's POSIX locks).
     * A file system without flock just goes without. */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    r->lock_fd = fd;
    /* a stale write-ahead log of an earlier file of that name would be
     * replayed into the new one */
    unlink_sidecars(path);
    return 0;
}

/* Open the connection into r->db: the file, or memory for the flight
 * recorder, which holds its window there (write_window). Returns 0, or
 * GT_ENOMEM or GT_EIO; r->db may then hold a handle to close. */
static int open_db(gt_recorder *r, const struct open_err *e)
{
    int rc = sqlite3_open_v2(r->keep_last ? ":memory:" : e->path, &r->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        put_err(e->buf, e->len, "cannot open trace %s: %s", e->path,
                r->db ? sqlite3_errmsg(r->db) : sqlite3_errstr(rc));
        return rc == SQLITE_NOMEM ? GT_ENOMEM : GT_EIO;
    }
    sqlite3_extended_result_codes(r->db, 1);
    /* a reader checkpointing the live trace may hold the log briefly: wait
     * for it rather than failing the recording */
    sqlite3_busy_timeout(r->db, 5000);
    return 0;
}

/* Insert the run row (version, schema, start time, pid, keep_last).
 * Returns SQLITE_OK, or the SQLite error with the errno seen in *err. */
static int insert_run(gt_recorder *r, int *err)
{
    sqlite3_stmt *st = NULL;
    int rc =
        sqlite3_prepare_v2(r->db,
                           "INSERT INTO run (id, gradtrace_version, schema_version,"
                           " start_ns, pid, keep_last) VALUES (1, ?1, ?2, ?3, ?4, ?5)",
                           -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, GT_VERSION_STRING, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, GT_SCHEMA_VERSION);
        sqlite3_bind_int64(st, 3, wall_ns());
        sqlite3_bind_int64(st, 4, (int64_t)r->pid);
        bind_id(st, 5, r->keep_last);
        errno = 0;
        rc = sqlite3_step(st);
        *err = errno;
        rc = rc == SQLITE_DONE ? SQLITE_OK : sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Set the pragmas (WAL, synchronous, the schema version) and create the
 * schema, the views and the run row in one transaction. Returns 0, or an
 * error code from open_sql_error. */
static int create_schema(gt_recorder *r, const struct open_err *e)
{
    char pragmas[160];
    char *emsg = NULL;
    int err = 0;
    snprintf(pragmas, sizeof(pragmas),
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
             " PRAGMA user_version = %d;",
             GT_SCHEMA_VERSION);
    if (exec_sql(r->db, pragmas, &emsg, &err) != SQLITE_OK)
        return open_sql_error(r, e, "set up", emsg, err);
    if (exec_sql(r->db, "BEGIN", &emsg, &err) != SQLITE_OK ||
        exec_sql(r->db, gt_schema_sql, &emsg, &err) != SQLITE_OK)
        return open_sql_error(r, e, "create schema", emsg, err);
    if (exec_sql(r->db, gt_views_sql, &emsg, &err) != SQLITE_OK)
        return open_sql_error(r, e, "create views", emsg, err);
    if (insert_run(r, &err) != SQLITE_OK ||
        exec_sql(r->db, "COMMIT", &emsg, &err) != SQLITE_OK)
        return open_sql_error(r, e, "insert run", emsg, err);
    return 0;
}

/* Prepare the statement table (r->st) and each row buffer's one-row and
 * multi-row inserts, once for the handle's life, and read the page size.
 * Returns 0, or GT_ESQL (the statements prepared so far are
 * finalize_stmts's). */
static int prepare_stmts(gt_recorder *r, const struct open_err *e)
{
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(r->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &r->st[i], NULL) != SQLITE_OK) {
            put_err(e->buf, e->len, "cannot create trace %s: prepare %s: %s", e->path,
                    stmt_sql[i], sqlite3_errmsg(r->db));
            return GT_ESQL;
        }
    }
    for (int w = 0; w < GT__NBUF; w++) {
        char sql[320 + GT__BUF_ROWS * (GT__BUF_MAXCOL * 2 + 3)];
        for (int rows = 1; rows <= GT__BUF_ROWS; rows += GT__BUF_ROWS - 1) {
            (void)gt_rowlog_insert_sql(w, rows, sql, sizeof sql);
            sqlite3_stmt **st = rows == 1 ? &r->buf[w].one : &r->buf[w].multi;
            if (sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) !=
                SQLITE_OK) {
                put_err(e->buf, e->len, "cannot create trace %s: prepare %s: %s", e->path,
                        sql, sqlite3_errmsg(r->db));
                return GT_ESQL;
            }
        }
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "PRAGMA page_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        r->page_size = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (r->page_size <= 0)
        r->page_size = 4096;
    return 0;
}

/* Start the row log beside the trace when opts asks for it (not with a
 * window or a size cap, nor with GRADTRACE_ROW_LOG=0, kept for
 * comparisons): created empty (its header), replaced if stale. Returns 0,
 * or GT_ENOMEM, GT_EFULL, GT_EIO or write_log's code (release closes
 * r->log_fd; unlink_sidecars removes the file). */
static int open_row_log(gt_recorder *r, const gt_recorder_options *opts,
                        const struct open_err *e)
{
    const char *log_env = getenv("GRADTRACE_ROW_LOG");
    char eb[128];
    int rc;
    if (!(opts && opts->row_log) || r->keep_last || r->max_bytes > 0 ||
        (log_env && !strcmp(log_env, "0")))
        return 0;
    size_t n = strlen(r->path);
    r->log_path = malloc(n + sizeof GT_ROWLOG_SUFFIX);
    if (r->log_path) {
        memcpy(r->log_path, r->path, n);
        memcpy(r->log_path + n, GT_ROWLOG_SUFFIX, sizeof GT_ROWLOG_SUFFIX);
    }
    if (!r->log_path || gt_rowlog_put_head(&r->log) != 0) {
        put_err(e->buf, e->len, "cannot create trace %s: out of memory", e->path);
        return GT_ENOMEM;
    }
    r->log_fd =
        open(r->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (r->log_fd < 0) {
        int err = errno;
        put_err(e->buf, e->len, "cannot create trace %s: row log %s: %s", e->path,
                r->log_path, errno_text(err, eb, sizeof eb));
        return err == ENOSPC || err == EFBIG || err == EDQUOT ? GT_EFULL : GT_EIO;
    }
    r->log_on = 1;
    if ((rc = write_log(r)) != 0) {
        put_err(e->buf, e->len, "cannot create trace %s: %s", e->path, r->errmsg);
        return rc;
    }
    return 0;
}

/* With a size cap (r->max_bytes), measure the smallest closed trace (the
 * schema, the run row, the empty indexes) and size the first batches to a
 * quarter of the room left. Returns 0, GT_EINVAL when the cap is below the
 * smallest trace with room for a first batch, or projected_bytes' code. */
static int fit_size_cap(gt_recorder *r, const struct open_err *e)
{
    int64_t least = 0;
    int rc;
    if (r->max_bytes <= 0)
        return 0;
    if ((rc = projected_bytes(r, &least)) != 0) {
        put_err(e->buf, e->len, "cannot create trace %s: %s", e->path, r->errmsg);
        return rc;
    }
    r->base_bytes = r->last_bytes = least;
    /* first batches: a quarter of the room at a guessed 256 bytes per
     * row (later ones go by what was measured, shrink_batch) */
    int64_t fit = (r->max_bytes - least) / 4 / 256;
    if (fit < (int64_t)r->batch_cur)
        r->batch_cur = fit < GT__BUF_ROWS ? GT__BUF_ROWS : (unsigned)fit;
    least += 4 * r->page_size;
    if (r->max_bytes < least) {
        put_err(e->buf, e->len,
                "cannot create trace %s: a size cap of %" PRId64
                " bytes is below the smallest trace (%" PRId64 " bytes)",
                e->path, r->max_bytes, least);
        return GT_EINVAL;
    }
    return 0;
}

/* Prepare the window's cut statements, parsed once rather than at every
 * cut: keep_mem's before and after its C cut, else cut_sql. Returns
 * SQLITE_OK, or not (the error on r->db; finalize_stmts finalizes). */
static int prepare_window(gt_recorder *r)
{
    if (!r->keep_mem) {
        if (sqlite3_prepare_v3(r->db, "INSERT OR IGNORE INTO temp.gt_ss VALUES (?1, ?2)",
                               -1, SQLITE_PREPARE_PERSISTENT, &r->storage_seq,
                               NULL) != SQLITE_OK ||
            prepare_cut(r, cut_sql) != 0)
            return SQLITE_ERROR;
        return SQLITE_OK;
    }
    if (prepare_cut(r, cut_pre_sql) != 0)
        return SQLITE_ERROR;
    r->ncut_pre = r->ncut;
    if (prepare_cut(r, cut_post_sql) != 0)
        return SQLITE_ERROR;
    for (int i = 0; i < 4; i++)
        if (sqlite3_prepare_v3(r->db, cut_read_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &r->cut_read[i], NULL) != SQLITE_OK)
            return SQLITE_ERROR;
    if (sqlite3_prepare_v3(r->db, "INSERT OR IGNORE INTO temp.gt_sd VALUES (?1)", -1,
                           SQLITE_PREPARE_PERSISTENT, &r->cut_drop_saved,
                           NULL) != SQLITE_OK)
        return SQLITE_ERROR;
    return SQLITE_OK;
}

/* For the flight recorder (r->keep_last): create the window's tables,
 * prepare its cut and write the empty trace the file holds until the window
 * is first written. Returns 0, or open_sql_error's or write_window's
 * code. */
static int open_window(gt_recorder *r, const struct open_err *e)
{
    char *emsg = NULL;
    int err = 0, rc;
    if (!r->keep_last)
        return 0;
    if (exec_sql(r->db, cut_tables_sql, &emsg, &err) != SQLITE_OK)
        return open_sql_error(r, e, "set up the window", emsg, err);
    r->keep_mem = r->max_bytes <= 0;
    if (prepare_window(r) != SQLITE_OK)
        return open_sql_error(r, e, "set up the window", NULL, err);
    if ((rc = write_window(r)) != 0) {
        put_err(e->buf, e->len, "cannot create trace %s: %s", e->path, r->errmsg);
        return rc;
    }
    return 0;
}

/* Acquired in this order, and on failure unwound in reverse: the handle,
 * the file, the connection, the schema and the statements (with the row
 * log, the size cap's measure and the window, whose statements too are
 * finalize_stmts's). */
int gt_recorder_open(const char *path, const gt_recorder_options *opts, char *errbuf,
                     size_t errlen, gt_recorder **out)
{
    struct open_err e = {path, errbuf, errlen};
    gt_recorder *r = NULL;
    int rc;

    if (!path || !*path || !out) {
        put_err(errbuf, errlen, "cannot create trace: no path given");
        return GT_EINVAL;
    }
    if ((rc = new_handle(opts, &e, &r)) != 0)
        return rc;
    if ((rc = create_file(r, opts, &e)) != 0)
        goto fail_alloc;
    if ((rc = open_db(r, &e)) != 0)
        goto fail_db;
    if ((rc = create_schema(r, &e)) != 0 || (rc = prepare_stmts(r, &e)) != 0 ||
        (rc = open_row_log(r, opts, &e)) != 0 || (rc = fit_size_cap(r, &e)) != 0 ||
        (rc = open_window(r, &e)) != 0)
        goto fail_stmts;
    *out = r;
    return 0;

fail_stmts:
    finalize_stmts(r);
fail_db:
    sqlite3_close(r->db);
    unlink(path);
    unlink_sidecars(path);
fail_alloc:
    release(r);
    return rc;
}

/* Sleep about ms milliseconds. */
static void nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Fold the write-ahead log into the trace and leave WAL mode, so the
 * closed trace is one file. A reader in a read transaction keeps a
 * checkpoint from finishing (SQLITE_BUSY), and another process holding a
 * lock on the file keeps WAL mode on: wait for them, up to close_wait_ms,
 * through SQLite's busy handler and retries. Whether it worked is judged
 * after the connection is closed (check_one_file): leaving WAL mode folds
 * in what a busy checkpoint could not. Returns 0 when the trace left WAL
 * mode, 1 when it is still in WAL mode at the deadline, or an SQLite error
 * other than busy (the handle is then failed). */
static int finish_file(gt_recorder *r)
{
    int64_t deadline = now_ms() + r->close_wait_ms;
    int rc;
    for (;;) {
        int64_t left = deadline - now_ms();
        sqlite3_busy_timeout(r->db, left > 0 ? (int)left : 0);
        errno = 0;
        rc = sqlite3_wal_checkpoint_v2(r->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL,
                                       NULL);
        if (rc == SQLITE_OK || now_ms() >= deadline)
            break;
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
            return sql_error(r, rc, "checkpoint", 1, errno);
        nap(20);
    }
    for (;;) {
        sqlite3_stmt *st = NULL;
        int64_t left = deadline - now_ms();
        sqlite3_busy_timeout(r->db, left > 0 ? (int)left : 0);
        int wal = 1;
        rc = sqlite3_prepare_v2(r->db, "PRAGMA journal_mode = DELETE", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) {
                wal = !strcmp((const char *)sqlite3_column_text(st, 0), "wal");
                rc = SQLITE_OK;
            }
            int rc2 = sqlite3_finalize(st);
            if (rc == SQLITE_OK)
                rc = rc2;
        }
        if (rc == SQLITE_OK && !wal)
            return 0;
        if (now_ms() >= deadline)
            return 1;
        if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
            return sql_error(r, rc, "leave WAL mode", 1, 0);
        nap(20);
    }
}

/* The trace is still in WAL mode because another process holds it (a read
 * transaction that never ends, a lock): write the finished trace as a new
 * file beside it (VACUUM INTO: one file, rollback-journal mode, compact),
 * drop the old -wal and -shm names, and rename the new file over the old
 * one. The holder keeps reading the old file through its open descriptors;
 * whoever opens the path next gets the finished trace. The -wal name goes
 * before the rename: a -wal beside the new file would be replayed into it.
 * Returns 0, or GT_EBUSY with a message (the old trace is left as it was). */
static int replace_with_copy(gt_recorder *r)
{
    size_t n = strlen(r->path);
    char *side = malloc(2 * n + 32), *tmp;
    if (!side)
        return 0;
    tmp = side + n + 8;
    snprintf(tmp, n + 24, "%s.gt-finish", r->path);
    (void)unlink(tmp);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(r->db, "VACUUM INTO ?1", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, tmp, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(r->db);
    }
    if (rc != SQLITE_OK) {
        set_errmsg(r,
                   "cannot finish trace %s: another process held it open for %u ms, "
                   "and writing a finished copy failed (%s)",
                   r->path, r->close_wait_ms, sqlite3_errmsg(r->db));
        sqlite3_finalize(st);
        (void)unlink(tmp);
        free(side);
        r->failed = GT_EBUSY;
        return GT_EBUSY;
    }
    sqlite3_finalize(st);
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    memcpy(side, r->path, n);
    memcpy(side + n, "-wal", 5);
    (void)unlink(side);
    memcpy(side + n, "-shm", 5);
    (void)unlink(side);
    char eb[128];
    if (rename(tmp, r->path) != 0) {
        set_errmsg(r,
                   "cannot finish trace %s: another process held it open for %u ms, "
                   "and replacing it with a finished copy failed (%s); the copy is %s",
                   r->path, r->close_wait_ms, errno_text(errno, eb, sizeof eb), tmp);
        free(side);
        r->failed = GT_EBUSY;
        return GT_EBUSY;
    }
    free(side);
    return 0;
}

/* After the connection is closed: is the trace one file? Not if a -wal
 * file with frames is beside it (events may be only there), nor if the
 * file is still in WAL mode (its header's format bytes are 2). Returns 0,
 * or GT_EBUSY with the message saying what is where. */
static int check_one_file(gt_recorder *r)
{
    size_t n = strlen(r->path);
    char *wal = malloc(n + 5);
    if (!wal)
        return 0;
    memcpy(wal, r->path, n);
    memcpy(wal + n, "-wal", 5);
    struct stat sb;
    int64_t wal_bytes = stat(wal, &sb) == 0 ? (int64_t)sb.st_size : 0;
    unsigned char head[20] = {0};
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, head, sizeof head) != (ssize_t)sizeof head)
            head[18] = 0;
        close(fd);
    }
    int rc = 0;
    if (wal_bytes > 0) {
        set_errmsg(r,
                   "cannot finish trace %s: another process held it open for %u ms, "
                   "so %" PRId64 " bytes of the run are still only in %s; keep that "
                   "file beside the trace (a gradtrace command on the trace folds it "
                   "in once that process is gone)",
                   r->path, r->close_wait_ms, wal_bytes, wal);
        rc = GT_EBUSY;
    } else if (head[18] == 2) {
        set_errmsg(r,
                   "cannot finish trace %s: another process held it open for %u ms, "
                   "so it stays in WAL mode; every event is in the trace itself, but "
                   "a reader of a copy needs write access to it",
                   r->path, r->close_wait_ms);
        rc = GT_EBUSY;
    }
    free(wal);
    return rc;
}

/* Close: insert the row log's rows into the trace (one transaction,
 * through the same multi-row INSERTs) and remove the log. On failure the
 * handle is failed and the log stays beside the trace, whole: the next
 * gradtrace command that opens the trace folds it. */
static int fold_log(gt_recorder *r)
{
    close(r->log_fd);
    r->log_fd = -1;
    r->log_on = 0;
    int rc = begin_write(r);
    if (rc)
        return rc;
    size_t whylen = strlen(r->log_path) + 1024; /* its messages name the log */
    char *why = malloc(whylen);
    if (!why) {
        set_errmsg(r, "recording stopped: cannot fold the row log: out of memory");
        return fail(r, GT_ENOMEM);
    }
    errno = 0;
    int frc = gt_rowlog_fold(r->db, r->log_path, r->log_bytes, NULL, why, whylen);
    int err = errno;
    if (frc != GT_OK && frc != GT_ESQL)
        set_errmsg(r, "recording stopped: %s", why);
    free(why);
    if (frc == GT_ESQL)
        return sql_error(r, sqlite3_extended_errcode(r->db), "fold the row log", 1, err);
    if (frc != GT_OK)
        return fail(r, frc == GT_ENOMEM ? GT_ENOMEM : GT_EIO);
    if ((rc = commit(r)) != 0)
        return rc;
    (void)unlink(r->log_path);
    return 0;
}

int gt_recorder_close(gt_recorder *r)
{
    return gt_recorder_close_msg(r, NULL, 0);
}

int gt_recorder_close_msg(gt_recorder *r, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!r)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    if (r->closed || getpid() != r->pid) {
        /* A forked child's copy: closing the connection here could
         * checkpoint or delete the parent's write-ahead log. Leak it. */
        put_err(errbuf, errlen, "%s", r->errmsg);
        pthread_mutex_unlock(&r->mu);
        release(r);
        return GT_ECLOSED;
    }
    int stop = r->failed; /* the cause, kept as the result after a cap stop */
    int finishing = 0;    /* 1: the file was to be made one file */
    if (!r->failed)
        commit(r); /* the last events: this may still stop at the cap */
    if (!r->failed && r->log_on)
        fold_log(r);
    if (r->capped) {
        /* the file is sound: its end and indexes are written all the same */
        if (!stop)
            stop = r->failed;
        r->failed = 0;
    }
    if (!r->failed) {
        if (begin_write(r) == 0) {
            sqlite3_stmt *st = r->st[ST_RUN_CLOSE];
            sqlite3_bind_int64(st, 1, wall_ns());
            step(r, ST_RUN_CLOSE, "close run", 1);
        }
        if (!r->failed)
            commit(r);
        if (!r->failed && r->keep_last)
            write_window(r); /* one self-contained file already */
        else if (!r->failed) {
            char *emsg = NULL;
            int err = 0;
            if (exec_sql(r->db, "BEGIN", &emsg, &err) != SQLITE_OK ||
                exec_sql(r->db, gt_indexes_sql, &emsg, &err) != SQLITE_OK ||
                exec_sql(r->db, "COMMIT", &emsg, &err) != SQLITE_OK) {
                sql_error(r, sqlite3_extended_errcode(r->db), "create indexes", 1, err);
            }
            sqlite3_free(emsg);
        }
        if (!r->failed && !r->keep_last) {
            int held = finish_file(r);
            if (held == 1)
                held = replace_with_copy(r);
            finishing = held == 0;
        }
    }
    rc = r->failed ? r->failed : stop;
    finalize_stmts(r);
    if (sqlite3_close(r->db) != SQLITE_OK && rc == 0) {
        set_errmsg(r, "cannot close trace %s: %s", r->path, sqlite3_errmsg(r->db));
        rc = GT_ESQL;
    }
    if (finishing) {
        int one = check_one_file(r);
        if (one)
            rc = one;
    }
    if (rc)
        put_err(errbuf, errlen, "%s", r->errmsg);
    pthread_mutex_unlock(&r->mu);
    release(r);
    return rc;
}

const char *gt_recorder_errmsg(gt_recorder *r)
{
    if (!r)
        return "no recorder handle";
    return r->errmsg;
}

int gt_recorder_failed(gt_recorder *r)
{
    if (!r)
        return 0;
    lock(r);
    int failed = r->failed != 0;
    unlock(r);
    return failed;
}

int gt_recorder_flush(gt_recorder *r)
{
    if (!r)
        return GT_EINVAL;
    lock(r);
    int rc = r->closed                            ? GT_ECLOSED
             : r->failed                          ? GT_EFAILED
             : r->write_due && getpid() == r->pid ? write_window(r)
                                                  : commit(r);
    unlock(r);
    return rc;
}

int gt_recorder_hold(gt_recorder *r)
{
    if (!r || held_here(r))
        return GT_EINVAL;
    pthread_mutex_lock(&r->mu);
    __atomic_store_n(&r->holder, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
    return 0;
}

int gt_recorder_release(gt_recorder *r)
{
    if (!r || !held_here(r))
        return GT_EINVAL;
    /* the batch's age, not checked at the rows written while held */
    int rc = r->in_txn && !r->closed && !r->failed && batch_old(r) ? commit(r) : 0;
    __atomic_store_n(&r->holder, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int64_t gt_recorder_window_start(const gt_recorder *r)
{
    return r ? __atomic_load_n(&r->window_start, __ATOMIC_ACQUIRE) : 0;
}

uint64_t gt_recorder_cuts(const gt_recorder *r)
{
    return r ? __atomic_load_n(&r->cuts, __ATOMIC_ACQUIRE) : 0;
}

int64_t gt_recorder_seq(gt_recorder *r)
{
    /* no lock: seq only grows, each step atomic (next_seq); a fold asks it
     * at every tensor it sees */
    return r ? __atomic_load_n(&r->seq, __ATOMIC_RELAXED) : 0;
}

/* ---- run ---------------------------------------------------------------- */

int gt_run_set(gt_recorder *r, const gt_run_info *info)
{
    if (!r || !info)
        return GT_EINVAL;
    lock(r);
    int rc = begin_write(r);
    if (rc)
        goto out;
    sqlite3_stmt *st = r->st[ST_RUN_SET];
    bind_str(st, 1, info->engine);
    bind_str(st, 2, info->engine_version);
    bind_str(st, 3, info->python_version);
    bind_str(st, 4, info->argv_json);
    bind_str(st, 5, info->cwd);
    bind_str(st, 6, info->host);
    bind_str(st, 7, info->options_json);
    bind_id(st, 8, info->pid > 0 ? info->pid : 0);
    if (info->rank >= 0)
        sqlite3_bind_int64(st, 9, info->rank);
    else
        sqlite3_bind_null(st, 9);
    if (info->world_size > 0) {
        sqlite3_bind_int64(st, 10, info->world_size);
        if (info->local_rank >= 0)
            sqlite3_bind_int64(st, 11, info->local_rank);
    }
    bind_str(st, 12, info->backend);
    bind_str(st, 13, info->launcher_run_id);
    rc = step(r, ST_RUN_SET, "run metadata", 0);
    sqlite3_clear_bindings(st);
    if (rc)
        goto out;
    rc = end_write(r);
out:
    unlock(r);
    return rc;
}

int gt_run_end(gt_recorder *r, int status, int exit_code, int signal)
{
    const char *name = gt_run_status_name(status); /* format.h */
    if (!r || !name)
        return GT_EINVAL;
    lock(r);
    int rc = begin_write_as(r, 1);
    if (rc)
        goto out;
    sqlite3_stmt *st = r->st[ST_RUN_END];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, exit_code);
    sqlite3_bind_int(st, 3, signal);
    rc = step(r, ST_RUN_END, "run end", 0);
    if (rc)
        goto out;
    r->write_due = r->keep_last > 0;
    rc = end_write(r);
out:
    unlock(r);
    return rc;
}

/* ---- interning ---------------------------------------------------------- */

/* 0 if the handle may be used, else why not: GT_ECLOSED or GT_EFAILED. */
static int usable(const gt_recorder *r)
{
    return r->closed ? GT_ECLOSED : r->failed ? GT_EFAILED : 0;
}

/* Record that interning ran out of memory: the handle is failed, its open
 * batch rolled back. Returns GT_ENOMEM. */
static int intern_oom(gt_recorder *r, const char *what)
{
    set_errmsg(r, "recording stopped: out of memory (%s)", what);
    return fail(r, GT_ENOMEM);
}

/* Write the row of a newly interned value with statement `which`: ?1 is
 * bound here to `id`, the caller has bound the other parameters. Returns 0
 * or the error of begin_write / step. */
static int intern_write(gt_recorder *r, enum gt__stmt which, const char *what, int64_t id)
{
    int rc = begin_write(r);
    if (rc)
        return rc;
    sqlite3_bind_int64(r->st[which], 1, id);
    return step(r, which, what, 0);
}

/*
 * Intern key[0..t->nkey) absent from table t: write its row (intern_write,
 * the caller has bound ?2...), remember key -> (id, aux) in t and advance
 * *next, the counter ids are taken from. *out gets the id on success; on
 * failure t and *next are unchanged (after GT_ENOMEM the handle is failed).
 */
static int intern_insert(gt_recorder *r, enum gt__stmt which, const char *what,
                         gt__inttab *t, const int64_t *key, int64_t aux, int64_t *next,
                         gt_id *out)
{
    int64_t id = *next;
    int rc = intern_write(r, which, what, id);
    if (rc)
        return rc;
    if (gt__inttab_add(t, key, id, aux) != 0)
        return intern_oom(r, what);
    *next = id + 1;
    *out = id;
    return end_write(r);
}

/* 1 and the id in *out if key is in table t, else 0 (*out untouched). */
static int intern_found(const gt__inttab *t, const int64_t *key, gt_id *out)
{
    int64_t id = gt__inttab_find(t, key, NULL);
    if (id)
        *out = id;
    return id != 0;
}

static int intern_string_locked(gt_recorder *r, const char *s, size_t len, gt_id *out)
{
    uint64_t h = gt__strhash(s, len);
    int64_t id = gt__strtab_find(&r->strings, s, len, h);
    if (id) {
        *out = id;
        return 0;
    }
    if (len > INT32_MAX) {
        set_errmsg(r, "string of %zu bytes is too long", len);
        return GT_EINVAL;
    }
    id = r->next_string;
    sqlite3_stmt *st = r->st[ST_STRING];
    sqlite3_bind_text(st, 2, len ? s : "", (int)len, SQLITE_STATIC);
    int rc = intern_write(r, ST_STRING, "intern string", id);
    sqlite3_bind_null(st, 2);
    if (rc)
        return rc;
    if (gt__strtab_add(&r->strings, s, len, h, id) != 0)
        return intern_oom(r, "intern string");
    r->next_string++;
    *out = id;
    return end_write(r);
}

int gt_intern_string(gt_recorder *r, const char *s, size_t len, gt_id *out)
{
    if (!r || (!s && len) || !out)
        return GT_EINVAL;
    lock(r);
    int rc = usable(r);
    if (rc == 0)
        rc = intern_string_locked(r, s ? s : "", len, out);
    unlock(r);
    return rc;
}

int gt_intern_frame(gt_recorder *r, const char *file, int line, const char *function,
                    const char *code, gt_id *out)
{
    if (!r || !file || !function || !out)
        return GT_EINVAL;
    lock(r);
    gt_id fid, fnid, cid = 0;
    int rc = usable(r);
    if (rc || (rc = intern_string_locked(r, file, strlen(file), &fid)) != 0 ||
        (rc = intern_string_locked(r, function, strlen(function), &fnid)) != 0 ||
        (code && (rc = intern_string_locked(r, code, strlen(code), &cid)) != 0))
        goto out;
    int64_t key[4] = {fid, line, fnid, cid};
    if (intern_found(&r->frames, key, out))
        goto out;
    sqlite3_stmt *st = r->st[ST_FRAME];
    sqlite3_bind_int64(st, 2, fid);
    sqlite3_bind_int(st, 3, line);
    sqlite3_bind_int64(st, 4, fnid);
    bind_id(st, 5, cid);
    rc = intern_insert(r, ST_FRAME, "intern frame", &r->frames, key, 0, &r->next_frame,
                       out);
out:
    unlock(r);
    return rc;
}

int gt_intern_stack(gt_recorder *r, gt_id parent, gt_id frame, gt_id user_frame,
                    gt_id *out)
{
    return gt_intern_stack_in(r, parent, frame, user_frame, NULL, out);
}

int gt_intern_stack_in(gt_recorder *r, gt_id parent, gt_id frame, gt_id user_frame,
                       const char *module, gt_id *out)
{
    if (!r || !out || frame <= 0 || parent < 0 || user_frame < 0)
        return GT_EINVAL;
    lock(r);
    gt_id mid = -1; /* key: -1 for no module ("" is a module path) */
    int rc = usable(r);
    if (rc == 0 && module)
        rc = intern_string_locked(r, module, strlen(module), &mid);
    int64_t key[3] = {parent, frame, mid};
    if (rc == 0 && !intern_found(&r->stacks, key, out)) {
        sqlite3_stmt *st = r->st[ST_STACK];
        bind_id(st, 2, parent);
        sqlite3_bind_int64(st, 3, frame);
        bind_id(st, 4, user_frame);
        if (module)
            sqlite3_bind_int64(st, 5, mid);
        else
            sqlite3_bind_null(st, 5);
        rc = intern_insert(r, ST_STACK, "intern stack", &r->stacks, key, user_frame,
                           &r->next_stack, out);
    }
    unlock(r);
    return rc;
}

int gt_intern_thread(gt_recorder *r, int64_t os_tid, const char *name, gt_id *out)
{
    if (!r || !out)
        return GT_EINVAL;
    int64_t key[1] = {os_tid};
    lock(r);
    int rc = usable(r);
    if (rc == 0 && !intern_found(&r->threads, key, out)) {
        sqlite3_bind_int64(r->st[ST_THREAD], 2, os_tid);
        bind_str(r->st[ST_THREAD], 3, name);
        rc = intern_insert(r, ST_THREAD, "intern thread", &r->threads, key, 0,
                           &r->next_thread, out);
    }
    unlock(r);
    return rc;
}

/* ---- events ------------------------------------------------------------- */

#define LOCKED_BEGIN(r)                                                                  \
    lock(r);                                                                             \
    int rc = begin_write(r);                                                             \
    if (rc)                                                                              \
    goto out

#define LOCKED_END(r, what)                                                              \
    if ((rc = step(r, st_id, what, 0)) != 0)                                             \
        goto out;                                                                        \
    rc = end_write(r);                                                                   \
    out:                                                                                 \
    unlock(r);                                                                           \
    return rc

/* The frame of an event written through a row buffer (ops, op_args,
 * version_bumps, saved_tensors): lock, begin, and take the buffer's next row
 * as `v` (values) and `null` (1 = bind NULL); BUF_END counts the row and
 * unlocks. */
#define BUF_BEGIN(r, which)                                                              \
    unsigned char *null;                                                                 \
    int64_t *v;                                                                          \
    lock(r);                                                                             \
    int rc = begin_write(r);                                                             \
    if (rc)                                                                              \
        goto out;                                                                        \
    v = buf_row((r), (which), &null)

#define BUF_END(r, which)                                                                \
    rc = buf_push_done((r), (which));                                                    \
    out:                                                                                 \
    unlock(r);                                                                           \
    return rc

int gt_op(gt_recorder *r, const gt_op_info *op, int64_t *seq)
{
    if (!r || !op || !seq || op->name <= 0 || op->stack < 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_OP);
    int64_t s = next_seq(r);
    v[0] = s;
    v[1] = op->name;
    v[2] = op->phase;
    v[3] = op->grad_mode ? 1 : 0;
    v[4] = op->thread;
    v[5] = op->stack;
    null[5] = op->stack == 0;
    *seq = s;
    BUF_END(r, B_OP);
}

int gt_op_arg(gt_recorder *r, int64_t seq, int role, int pos, gt_id tensor,
              int64_t version)
{
    if (!r || seq <= 0 || role < GT_ROLE_INPUT || role > GT_ROLE_MUTATED || tensor <= 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_OP_ARG);
    if (role == GT_ROLE_MUTATED) /* op_args_written: (tensor, op, role, pos) */
        idx_note(r, I_OP_ARGS_WRITTEN, 4, (int64_t[]){tensor, seq, role, pos});
    v[0] = seq;
    v[1] = role;
    v[2] = pos;
    v[3] = tensor;
    v[4] = version;
    BUF_END(r, B_OP_ARG);
}

int gt_storage(gt_recorder *r, gt_id id, int64_t nbytes, gt_id device)
{
    if (!r || id <= 0 || device <= 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_STORAGE);
    if (r->keep_mem) { /* the seq of its first row */
        int added;
        uint64_t *at = gt_map_upsert(&r->storage_seqs, (uint64_t)id, 0, 0, &added);
        if (!at) {
            set_errmsg(r, "recording stopped: out of memory (storage)");
            rc = fail(r, GT_ENOMEM);
            goto out;
        }
        if (added)
            *at = (uint64_t)r->seq;
    }
    if (r->storage_seq) {
        sqlite3_bind_int64(r->storage_seq, 1, id);
        sqlite3_bind_int64(r->storage_seq, 2, r->seq);
        if ((rc = sqlite3_step(r->storage_seq)) != SQLITE_DONE) {
            rc = sql_error(r, sqlite3_reset(r->storage_seq), "storage", 1, 0);
            goto out;
        }
        sqlite3_reset(r->storage_seq);
    }
    v[0] = id;
    v[1] = nbytes;
    v[2] = device;
    BUF_END(r, B_STORAGE);
}

/* A tensors row through row buffer `which` (B_TENSOR, or B_TENSOR_AGAIN:
 * INSERT OR IGNORE, gt_tensor_again). */
static int tensor_row(gt_recorder *r, const gt_tensor_info *t, int which)
{
    if (!r || !t || t->id <= 0 || t->dtype <= 0 || t->ndim < 0 || t->ndim > 4096 ||
        (t->ndim > 0 && (!t->shape || !t->strides)) || t->storage < 0)
        return GT_EINVAL;
    unsigned char *null;
    int64_t *v;
    lock(r);
    int rc = begin_write(r);
    if (rc)
        goto out;
    v = buf_row(r, which, &null);
    /* shape and strides as text, formatted into the arena */
    if ((rc = buf_ints(r, which, t->shape, (size_t)t->ndim, &v[4])) != 0 ||
        (rc = buf_ints(r, which, t->strides, (size_t)t->ndim, &v[5])) != 0)
        goto out;
    v[0] = t->id;
    v[1] = next_seq(r);
    v[2] = t->storage;
    null[2] = t->storage == 0;
    v[3] = t->dtype;
    v[6] = t->storage_offset;
    v[7] = t->requires_grad ? 1 : 0;
    v[8] = t->is_leaf ? 1 : 0;
    v[9] = t->created_by;
    null[9] = t->created_by <= 0;
    v[10] = t->alias_of;
    null[10] = t->alias_of <= 0;
    v[11] = t->alias_of > 0 && t->shares_version ? 1 : 0;
    v[12] = t->version_counter > 0 ? t->version_counter : t->id;
    /* tensors_storage (storage, id), tensors_vc (version_counter, id) */
    idx_note(r, I_TENSORS_STORAGE, 2, (int64_t[]){t->storage, t->id});
    idx_note(r, I_TENSORS_VC, 2, (int64_t[]){v[12], t->id});
    rc = buf_push_done(r, which);
out:
    unlock(r);
    return rc;
}

int gt_tensor(gt_recorder *r, const gt_tensor_info *t)
{
    return tensor_row(r, t, B_TENSOR);
}

int gt_tensor_again(gt_recorder *r, const gt_tensor_info *t)
{
    return tensor_row(r, t, B_TENSOR_AGAIN);
}

int gt_version_bump(gt_recorder *r, int64_t op, gt_id tensor, int64_t version,
                    int observed, int64_t *seq)
{
    if (!r || tensor <= 0 || op < 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_BUMP);
    int64_t s = next_seq(r);
    idx_note(r, I_BUMPS_TENSOR, 3, (int64_t[]){tensor, s, s});
    v[0] = s;
    v[1] = op;
    null[1] = op == 0;
    v[2] = tensor;
    v[3] = version;
    v[4] = observed ? 1 : 0;
    if (seq)
        *seq = s;
    BUF_END(r, B_BUMP);
}

int gt_node(gt_recorder *r, const gt_node_info *n)
{
    if (!r || !n || n->id <= 0 || n->name <= 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_NODE);
    v[0] = n->id;
    v[1] = next_seq(r);
    v[2] = n->name;
    v[3] = n->op;
    null[3] = n->op <= 0;
    v[4] = n->sequence_nr;
    null[4] = n->sequence_nr < 0;
    v[5] = n->thread;
    null[5] = n->thread <= 0;
    v[6] = n->variable;
    null[6] = n->variable <= 0;
    idx_note(r, I_NODES_OP, 2, (int64_t[]){n->op > 0 ? n->op : 0, n->id});
    BUF_END(r, B_NODE);
}

int gt_edge(gt_recorder *r, gt_id node, int pos, gt_id next, int input_nr)
{
    if (!r || node <= 0 || next < 0 || pos < 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_EDGE);
    v[0] = node;
    v[1] = pos;
    v[2] = next;
    null[2] = next == 0;
    v[3] = input_nr;
    null[3] = next <= 0;
    idx_note(r, I_EDGES_NEXT, 3, (int64_t[]){next, node, pos});
    BUF_END(r, B_EDGE);
}

int gt_node_output(gt_recorder *r, gt_id node, int output_nr, gt_id tensor)
{
    if (!r || node <= 0 || tensor <= 0 || output_nr < 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_NODE_OUTPUT);
    v[0] = node;
    v[1] = output_nr;
    v[2] = tensor;
    BUF_END(r, B_NODE_OUTPUT);
}

int gt_saved_tensor(gt_recorder *r, gt_id node, gt_id slot, gt_id tensor, int64_t version,
                    int is_output, int64_t nbytes, int64_t *seq)
{
    if (!r || node <= 0 || slot <= 0 || tensor < 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_SAVED);
    int64_t s = next_seq(r);
    idx_note(r, I_SAVED_NODE, 2, (int64_t[]){node, s});
    idx_note(r, I_SAVED_TENSOR, 2, (int64_t[]){tensor, s});
    v[0] = s;
    v[1] = node;
    v[2] = slot;
    v[3] = tensor;
    null[3] = tensor == 0;
    v[4] = version;
    v[5] = is_output ? 1 : 0;
    v[6] = nbytes;
    null[6] = nbytes < 0;
    if (seq)
        *seq = s;
    BUF_END(r, B_SAVED);
}

int gt_saved_tensor_at(gt_recorder *r, gt_id node, gt_id slot, gt_id tensor,
                       int64_t version, int is_output, int64_t nbytes, int64_t saved_seq,
                       int64_t *seq)
{
    if (!r || saved_seq <= 0)
        return GT_EINVAL;
    int64_t s = 0;
    int saved_rc = gt_saved_tensor(r, node, slot, tensor, version, is_output, nbytes, &s);
    if (saved_rc < 0)
        return saved_rc;
    const enum gt__stmt st_id = ST_EARLIER;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, s);
    sqlite3_bind_int64(st, 2, saved_seq);
    if (seq)
        *seq = s;
    LOCKED_END(r, "saved tensor");
}

int gt_fingerprint(gt_recorder *r, int64_t saved, int at_use, gt_id backward,
                   int64_t nbytes, uint64_t hash)
{
    if (!r || saved <= 0 || backward < 0 || nbytes < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_FINGERPRINT;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, next_seq(r));
    sqlite3_bind_int64(st, 2, saved);
    sqlite3_bind_int(st, 3, at_use ? 1 : 0);
    bind_id(st, 4, backward);
    sqlite3_bind_int64(st, 5, nbytes);
    sqlite3_bind_int64(st, 6, (int64_t)hash);
    LOCKED_END(r, "fingerprint");
}

int gt_kernel_write(gt_recorder *r, int64_t op, gt_id tensor, int64_t version, int marked)
{
    if (!r || op <= 0 || tensor <= 0 || version < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_KWRITE;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, op);
    sqlite3_bind_int64(st, 2, tensor);
    sqlite3_bind_int64(st, 3, version);
    sqlite3_bind_int(st, 4, marked ? 1 : 0);
    LOCKED_END(r, "kernel write");
}

int gt_storage_swap(gt_recorder *r, const gt_swap_info *s)
{
    if (!r || !s || s->tensor <= 0 || s->old_storage < 0 || s->new_storage < 0 ||
        s->op < 0 || s->backward < 0 || s->last_seen < 0 || s->stack < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_SWAP;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, next_seq(r));
    sqlite3_bind_int64(st, 2, s->tensor);
    bind_id(st, 3, s->old_storage);
    bind_id(st, 4, s->new_storage);
    bind_id(st, 5, s->op);
    bind_id(st, 6, s->backward);
    bind_id(st, 7, s->last_seen);
    bind_id(st, 8, s->stack);
    LOCKED_END(r, "storage swap");
}

int gt_backward_begin(gt_recorder *r, const gt_backward_info *b, gt_id *id)
{
    if (!r || !b || !id || b->api <= 0 || b->stack < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_BW_BEGIN;
    int64_t bid;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    bid = r->next_backward;
    if (r->keep_last && bid - r->kept_from >= (int64_t)r->keep_last + cut_slack(r) &&
        (rc = cut_window(r, bid, NULL)) != 0)
        goto out;
    sqlite3_bind_int64(st, 1, bid);
    sqlite3_bind_int64(st, 2, next_seq(r));
    sqlite3_bind_int64(st, 3, b->api);
    sqlite3_bind_int(st, 4, b->retain_graph ? 1 : 0);
    sqlite3_bind_int(st, 5, b->create_graph ? 1 : 0);
    bind_id(st, 6, b->thread > 0 ? b->thread : 0);
    bind_id(st, 7, b->stack);
    if ((rc = step(r, st_id, "backward call", 0)) != 0)
        goto out;
    r->next_backward++;
    *id = bid;
    rc = end_write(r);
out:
    unlock(r);
    return rc;
}

int gt_backward_root(gt_recorder *r, gt_id id, int pos, gt_id tensor, gt_id node)
{
    if (!r || id <= 0 || pos < 0 || tensor < 0 || node < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_BW_ROOT;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, pos);
    bind_id(st, 3, tensor);
    bind_id(st, 4, node);
    LOCKED_END(r, "backward root");
}

int gt_backward_input(gt_recorder *r, gt_id id, int pos, gt_id tensor)
{
    if (!r || id <= 0 || pos < 0 || tensor <= 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_BW_INPUT;
    LOCKED_BEGIN(r);
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, pos);
    sqlite3_bind_int64(st, 3, tensor);
    LOCKED_END(r, "backward input");
}

int gt_backward_end(gt_recorder *r, gt_id id, int ok)
{
    if (!r || id <= 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_BW_END;
    LOCKED_BEGIN(r);
    if (id >= r->next_backward) {
        set_errmsg(r, "backward end: no backward call %" PRId64, id);
        rc = GT_EINVAL;
        goto out;
    }
    sqlite3_stmt *st = r->st[st_id];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, next_seq(r));
    sqlite3_bind_text(st, 3,
                      gt_backward_status_name(ok ? GT_BACKWARD_OK : GT_BACKWARD_ERROR),
                      -1, SQLITE_STATIC);
    LOCKED_END(r, "backward end");
}

int gt_node_exec(gt_recorder *r, gt_id backward, gt_id node)
{
    if (!r || backward <= 0 || node <= 0)
        return GT_EINVAL;
    BUF_BEGIN(r, B_NODE_EXEC);
    v[0] = next_seq(r);
    v[1] = backward;
    v[2] = node;
    BUF_END(r, B_NODE_EXEC);
}

int gt_error(gt_recorder *r, const char *type, const char *message, gt_id stack,
             gt_id backward, int64_t *seq)
{
    if (!r || !type || stack < 0 || backward < 0)
        return GT_EINVAL;
    const enum gt__stmt st_id = ST_ERROR;
    gt_id tid;
    int64_t s;
    LOCKED_BEGIN(r);
    if ((rc = intern_string_locked(r, type, strlen(type), &tid)) != 0)
        goto out;
    if ((rc = begin_write(r)) != 0) /* the interning may have committed */
        goto out;
    sqlite3_stmt *st = r->st[st_id];
    s = next_seq(r);
    sqlite3_bind_int64(st, 1, s);
    sqlite3_bind_int64(st, 2, tid);
    sqlite3_bind_text(st, 3, message ? message : "", -1, SQLITE_STATIC);
    bind_id(st, 4, stack);
    bind_id(st, 5, backward);
    if ((rc = step(r, st_id, "error", 0)) != 0)
        goto out;
    r->write_due = r->keep_last > 0; /* written at the next flush */
    if (seq)
        *seq = s;
    rc = end_write(r);
out:
    unlock(r);
    return rc;
}

int gt_name(gt_recorder *r, int64_t seq, gt_id tensor, const char *name)
{
    if (!r || !name || seq < 0 || tensor <= 0)
        return GT_EINVAL;
    gt_id nid;
    unsigned char *null;
    int64_t *v;
    lock(r);
    int rc = begin_write(r);
    if (rc || (rc = intern_string_locked(r, name, strlen(name), &nid)) != 0)
        goto out;
    if ((rc = begin_write(r)) != 0) /* the interning may have committed */
        goto out;
    v = buf_row(r, B_NAME, &null);
    v[0] = seq;
    v[1] = tensor;
    v[2] = nid;
    idx_note(r, I_NAMES_TENSOR, 3, (int64_t[]){tensor, seq, nid});
    rc = buf_push_done(r, B_NAME);
out:
    unlock(r);
    return rc;
}

/* ---- internal, for tests and the benchmark ------------------------------ */

size_t gt__recorder_intern_bytes(gt_recorder *r);

size_t gt__recorder_intern_bytes(gt_recorder *r)
{
    lock(r);
    size_t n = gt__strtab_bytes(&r->strings) + gt__inttab_bytes(&r->frames) +
               gt__inttab_bytes(&r->stacks) + gt__inttab_bytes(&r->threads);
    unlock(r);
    return n;
}

size_t gt__recorder_held_bytes(gt_recorder *r);

size_t gt__recorder_held_bytes(gt_recorder *r)
{
    lock(r);
    size_t n = r->held.len;
    unlock(r);
    return n;
}
