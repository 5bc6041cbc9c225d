/*
 * libFuzzer harness: the row log reader (common/rowlog.c, gt_rowlog_fold),
 * which every gradtrace command runs on a killed recording's `run.db-gtlog`
 * before it reads the trace. Each input is a log file; it is folded into an
 * empty trace (schema/gradtrace.sql, in memory) inside a transaction that
 * is rolled back, twice: as it is, and with every block's XXH3 hash made
 * right, so that mutations reach the blocks' contents (kinds, counts,
 * offsets into the text arena, values the tables refuse) instead of
 * stopping at the first hash.
 *
 * What counts as a bug: any sanitizer report, a crash, a hang, a leak, or
 * a result gt_rowlog_fold does not document (its return code, the stats
 * past the input's end, a commit count above the block count).
 *
 * Seeds: tests/fuzz/seeds_rowlog/ (logs of recordings killed with
 * SIGKILL, taken before any command folded them).
 */
#include "rowlog.h"

#include <gradtrace/error.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "gt_schema_sql.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sqlite3 *db;
static int fd = -1;
static char path[64];
static unsigned char *fixed;
static size_t fixed_cap;

static void setup(void)
{
    if (sqlite3_open(":memory:", &db) != SQLITE_OK ||
        sqlite3_exec(db, gt_schema_sql, NULL, NULL, NULL) != SQLITE_OK)
        abort();
    fd = memfd_create("gtlog", 0);
    if (fd < 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
}

/* Put data[size] in the file the fold reads. */
static void load(const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
}

static void fold(size_t size, int64_t limit)
{
    gt_rowlog_stats st;
    char err[512];
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    int rc = gt_rowlog_fold(db, path, limit, &st, err, sizeof err);
    if (rc != GT_OK && rc != GT_ENOTTRACE && rc != GT_ENEWER && rc != GT_ESQL &&
        rc != GT_ENOMEM)
        abort();
    if (rc != GT_OK && !err[0])
        abort(); /* an error says what it is */
    if (st.bytes > (int64_t)size || st.commits > st.blocks || st.rows < 0 ||
        st.dropped < 0)
        abort();
    if (sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        abort();
}

/* A copy of data with each block's hash recomputed (blocks as their
 * headers say, up to the first that runs past the end). */
static size_t fix_hashes(const uint8_t *data, size_t size)
{
    if (size > fixed_cap || !fixed) {
        unsigned char *p = realloc(fixed, size ? size : 1);
        if (!p)
            abort();
        fixed = p;
        fixed_cap = size;
    }
    if (size)
        memcpy(fixed, data, size);
    size_t at = GT_ROWLOG_HEAD;
    while (at + GT_ROWLOG_BLOCK_HEAD <= size) {
        uint32_t len;
        memcpy(&len, fixed + at + 20, 4);
        if (len > size - at - GT_ROWLOG_BLOCK_HEAD)
            break;
        uint64_t h = XXH3_64bits(fixed + at + 8, GT_ROWLOG_BLOCK_HEAD - 8 + (size_t)len);
        memcpy(fixed + at, &h, 8);
        at += GT_ROWLOG_BLOCK_HEAD + len;
    }
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!db)
        setup();
    load(data, size);
    fold(size, -1);
    fix_hashes(data, size);
    load(fixed, size);
    fold(size, -1);
    /* a live recording's log, read up to the size it had (the copy path) */
    fold(size, (int64_t)(size / 2));
    return 0;
}
