/*
 * The row log: the frequent rows of a recording, appended to `<trace>-gtlog`
 * during the run and folded into the trace's SQLite tables at close, or by
 * the first reader that opens a killed run's trace. One module for both
 * sides: the recorder writes blocks (gt_rowlog_put) and folds its own log at
 * close (gt_rowlog_fold); the inspector folds a killed run's log
 * (gt_rowlog_on_open). The format is part of the trace contract
 * (schema/SCHEMA.md, "The row log").
 *
 * Format (little-endian, version GT_ROWLOG_VERSION):
 *   file header, 16 bytes: "GTROWLOG", u32 format version, u32 0
 *   blocks, each: u64 XXH3-64 of the 16 header bytes after it and the
 *   payload; u32 GT_ROWLOG_BLOCK_MAGIC; u16 kind; u16 columns; u32 rows
 *   (1..GT_ROWLOG_GROUP); u32 payload bytes; payload: rows x columns int64
 *   values, rows x columns null flags (1 byte, 1 = NULL), then the text
 *   arena (the text columns' values are offsets of NUL-terminated strings
 *   in it). A commit marker ends the blocks of each commit: kind 0xffff,
 *   0 columns, 0 rows, payload the writer's last event seq (int64).
 * A reader folds the blocks of each commit that is complete (its marker
 * read and good) in file order, up to the end or the first block that is
 * short or fails its hash (a torn tail: the writer was killed while
 * appending); the rows of a commit without its marker are not folded, so
 * a fold never holds part of a commit.
 *
 * Invariants: kinds are numbered as in gt_rowlog_kinds and never renumbered
 * (a new kind takes the next number and a new format version); every table
 * of a kind is one of schema/gradtrace.sql.
 */
#ifndef GT_COMMON_ROWLOG_H
#define GT_COMMON_ROWLOG_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "strbuf.h"

#define GT_ROWLOG_VERSION     1
#define GT_ROWLOG_GROUP       16 /* rows per block at most (one multi-row INSERT) */
#define GT_ROWLOG_MAXCOL      13
#define GT_ROWLOG_HEAD        16          /* file header bytes */
#define GT_ROWLOG_BLOCK_HEAD  24          /* block header bytes */
#define GT_ROWLOG_BLOCK_MAGIC 0x4b4c4247u /* "GBLK" */
#define GT_ROWLOG_SUFFIX      "-gtlog"
#define GT_ROWLOG_COMMIT      0xffff /* kind of a commit marker block */

/* Row kinds, in the order of gt_rowlog_kinds (numbers of the format). */
enum gt_rowlog_kind {
    GT_RL_OP,
    GT_RL_OP_ARG,
    GT_RL_BUMP,
    GT_RL_SAVED,
    GT_RL_TENSOR,
    GT_RL_TENSOR_AGAIN,
    GT_RL_STORAGE,
    GT_RL_NODE,
    GT_RL_EDGE,
    GT_RL_NODE_OUTPUT,
    GT_RL_NODE_EXEC,
    GT_RL_NAME,
    GT_RL_NKIND
};

/* The INSERT (verb, table, columns) of each kind, its column count, the
 * columns bound as text (bit k: column k; the value is an offset into the
 * text arena) and what a message calls a row. */
struct gt_rowlog_kind_info {
    const char *cols;
    int ncol;
    unsigned text;
    const char *what;
};
extern const struct gt_rowlog_kind_info gt_rowlog_kinds[GT_RL_NKIND];

/* Write into buf (of len bytes) the INSERT of `rows` rows of kind `kind`
 * ("... VALUES (?,?),(?,?)"). Returns 0, or -1 if it does not fit. */
int gt_rowlog_insert_sql(int kind, int rows, char *buf, size_t len);

/* Append a commit marker (the writer's last event seq) to out. Returns 0,
 * or -1 when out of memory. */
int gt_rowlog_put_commit(gt_strbuf *out, int64_t seq);

/* Append the file header to out. Returns 0, or -1 when out of memory. */
int gt_rowlog_put_head(gt_strbuf *out);

/* Append one block of n rows (1..GT_ROWLOG_GROUP) of kind `kind` to out:
 * val[i * stride + k] and null[i * stride + k] are row i's column k
 * (stride: the kind's column count, packed rows, copied at once, or more),
 * text the arena (text_len bytes, each string NUL-terminated). hash 0: a
 * block that never leaves this process's memory (the flight recorder's held
 * rows): its hash is not computed, its field is 0 (gt_rowlog_block_at does
 * not check it); never for bytes written to a file. Returns 0, or -1 when
 * out of memory (out's oom flag is then set). */
int gt_rowlog_put(gt_strbuf *out, int kind, int n, const int64_t *val,
                  const unsigned char *null, int stride, const char *text,
                  size_t text_len, int hash);

/* One block of a run of blocks in memory (as gt_rowlog_put appends them). */
typedef struct gt_rowlog_block {
    int kind, ncol, n;         /* n rows of ncol columns of kind `kind` */
    const unsigned char *val;  /* n x ncol int64, row-major (not aligned) */
    const unsigned char *null; /* n x ncol flags, 1 = NULL */
    const char *text;          /* the text arena */
    size_t text_len;
    size_t size; /* the block's bytes, header included: the next is there */
} gt_rowlog_block;

/* Read the block at p, len bytes before the end of the run, into b (its
 * hash is not checked: memory of this process). Returns 1, 0 at the end
 * (len 0), or -1 if p holds no whole block of a known kind. */
int gt_rowlog_block_at(const void *p, size_t len, gt_rowlog_block *b);

/* Column c of row i of block b (NULL or not: see gt_rowlog_null). */
static inline int64_t gt_rowlog_val(const gt_rowlog_block *b, int i, int c)
{
    int64_t v;
    memcpy(&v, b->val + ((size_t)i * (size_t)b->ncol + (size_t)c) * 8, 8);
    return v;
}

static inline int gt_rowlog_null(const gt_rowlog_block *b, int i, int c)
{
    return b->null[(size_t)i * (size_t)b->ncol + (size_t)c] != 0;
}

/* What a fold did. */
typedef struct gt_rowlog_stats {
    int64_t blocks;  /* blocks folded */
    int64_t commits; /* complete commits folded */
    int64_t seq;     /* the last folded commit's seq (0: none) */
    int64_t rows;    /* rows inserted */
    int64_t dropped; /* rows refused by a constraint (a duplicate key) */
    int64_t bytes;   /* bytes of the log read, up to the end of the last good block */
    int torn;        /* 1: stopped at a short or damaged block before the end */
} gt_rowlog_stats;

/*
 * Insert the rows of the complete commits of the log at log_path into db
 * (which has the schema), through the multi-row INSERTs, inside the
 * caller's transaction (one savepoint per commit); at most
 * `limit` bytes of the file are read (-1: all). A group whose multi-row
 * INSERT meets a constraint is inserted row by row and the bad rows are
 * dropped (counted in st->dropped). Memory: one block at a time. Returns
 * GT_OK, GT_ENOTTRACE (not a row log), GT_ENEWER (a newer format), GT_EIO
 * (cannot read it), or GT_ESQL with the SQLite error in db (then the
 * caller rolls back); on error the message is in err (without the
 * "gradtrace: " prefix). st (may be NULL) is filled in any case.
 */
int gt_rowlog_fold(sqlite3 *db, const char *log_path, int64_t limit, gt_rowlog_stats *st,
                   char *err, size_t errlen);

/* Insert the rows of the blocks at p (len bytes, blocks only: no file
 * header, no commit markers; the flight recorder's held rows) into db
 * through the same INSERTs as gt_rowlog_fold, inside the caller's
 * transaction; a duplicate key is dropped as there. Returns SQLITE_OK, or
 * an SQLite error code (its message in db; SQLITE_CORRUPT for bytes that
 * are no block). st (may be NULL) is filled in any case. */
int gt_rowlog_fold_mem(sqlite3 *db, const void *p, size_t len, gt_rowlog_stats *st);

/*
 * A reader opening the trace at `path` (before it opens the trace itself):
 * if path-gtlog exists and `live` is 0 (no recording holds the trace) and
 * the trace can be written, fold the log into the trace in one
 * transaction and remove it; *copy_bytes = -1. If the log exists but the
 * trace is live or read-only, leave both alone and set *copy_bytes to the
 * log's size now (fold that much into a private copy of the trace, taken
 * after this call: gt_rowlog_fold with limit *copy_bytes). No log: GT_OK,
 * *copy_bytes = -1. Errors as gt_rowlog_fold (the trace is unchanged),
 * the message naming the log.
 */
int gt_rowlog_on_open(const char *path, int live, int64_t *copy_bytes, char *err,
                      size_t errlen);

/* Fold the first `limit` bytes of path-gtlog (a live recording's log, as
 * gt_rowlog_on_open measured it) into db, a private copy of the trace, in
 * one transaction. Returns SQLITE_OK, or an SQLite error code (the copy
 * unchanged; a log that is not one, or newer, gives SQLITE_CORRUPT). */
int gt_rowlog_fold_copy(sqlite3 *db, const char *path, int64_t limit);

#endif
