/* The row log: format, writer helpers and the fold into SQLite (rowlog.h). */
#include "rowlog.h"

#include <gradtrace/error.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* The plain XXH3 (SSE2 on x86-64), not libxxhash's runtime dispatch
 * (xxh_x86dispatch.h): the dispatch halves the instructions of a block's
 * hash, but on a CPU with AVX-512 it made a 400-step MLP trace's close
 * 100-108 ms -> 114-123 ms of CPU (three interleaved runs of five), the
 * wide vector units costing more than they save at 1-2 KB a block. */
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the row log is written in host order, which must be little-endian"
#endif

/* A block's payload above this is not one the writer made (16 rows of 13
 * columns and their text: shapes of at most 4096 dimensions). */
#define MAX_PAYLOAD (64u << 20)

const struct gt_rowlog_kind_info gt_rowlog_kinds[GT_RL_NKIND] = {
    {"INSERT INTO ops (seq, name, phase, grad_mode, thread, stack)", 6, 0, "op"},
    {"INSERT INTO op_args (op, role, pos, tensor, version)", 5, 0, "op argument"},
    {"INSERT INTO version_bumps (seq, op, tensor, version, observed)", 5, 0,
     "version bump"},
    {"INSERT INTO saved_tensors (seq, node, slot, tensor, version, is_output, nbytes)", 7,
     0, "saved tensor"},
    {"INSERT INTO tensors (id, seq, storage, dtype, shape, strides, storage_offset,"
     " requires_grad, is_leaf, created_by, alias_of, shares_version, version_counter)",
     13, 1u << 4 | 1u << 5, "tensor"},
    {"INSERT OR IGNORE INTO tensors (id, seq, storage, dtype, shape, strides,"
     " storage_offset, requires_grad, is_leaf, created_by, alias_of, shares_version,"
     " version_counter)",
     13, 1u << 4 | 1u << 5, "tensor"},
    {"INSERT OR IGNORE INTO storages (id, nbytes, device)", 3, 0, "storage"},
    {"INSERT INTO nodes (id, seq, name, op, sequence_nr, thread, variable)", 7, 0,
     "node"},
    {"INSERT INTO edges (node, pos, next, input_nr)", 4, 0, "edge"},
    {"INSERT INTO node_outputs (node, output_nr, tensor)", 3, 0, "node output"},
    {"INSERT INTO node_execs (seq, backward, node)", 3, 0, "node execution"},
    {"INSERT OR IGNORE INTO names (seq, tensor, name)", 3, 0, "name"},
};

int gt_rowlog_insert_sql(int kind, int rows, char *buf, size_t len)
{
    if (kind < 0 || kind >= GT_RL_NKIND || rows < 1)
        return -1;
    int ncol = gt_rowlog_kinds[kind].ncol;
    size_t k = (size_t)snprintf(buf, len, "%s VALUES ", gt_rowlog_kinds[kind].cols);
    for (int i = 0; i < rows && k < len; i++) {
        k += (size_t)snprintf(buf + k, len - k, "%s(?", i ? "," : "");
        for (int c = 1; c < ncol && k < len; c++)
            k += (size_t)snprintf(buf + k, len - k, ",?");
        if (k < len)
            k += (size_t)snprintf(buf + k, len - k, ")");
    }
    return k < len ? 0 : -1;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint16_t get_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

int gt_rowlog_put_head(gt_strbuf *out)
{
    unsigned char h[GT_ROWLOG_HEAD];
    memcpy(h, "GTROWLOG", 8);
    put_u32(h + 8, GT_ROWLOG_VERSION);
    put_u32(h + 12, 0);
    return gt_strbuf_add(out, (const char *)h, sizeof h);
}

int gt_rowlog_put_commit(gt_strbuf *out, int64_t seq)
{
    unsigned char b[GT_ROWLOG_BLOCK_HEAD + 8];
    put_u32(b + 8, GT_ROWLOG_BLOCK_MAGIC);
    uint16_t kc[2] = {GT_ROWLOG_COMMIT, 0};
    memcpy(b + 12, kc, 4);
    put_u32(b + 16, 0);
    put_u32(b + 20, 8);
    memcpy(b + GT_ROWLOG_BLOCK_HEAD, &seq, 8);
    uint64_t h = XXH3_64bits(b + 8, sizeof b - 8);
    memcpy(b, &h, 8);
    return gt_strbuf_add(out, (const char *)b, sizeof b);
}

int gt_rowlog_put(gt_strbuf *out, int kind, int n, const int64_t *val,
                  const unsigned char *null, int stride, const char *text,
                  size_t text_len, int hash)
{
    int ncol = gt_rowlog_kinds[kind].ncol;
    size_t nv = (size_t)n * (size_t)ncol;
    size_t payload = nv * 9 + text_len;
    size_t start = out->len;
    /* grow once: reserve the block, then fill it in place */
    if (gt_strbuf_reserve(out, GT_ROWLOG_BLOCK_HEAD + payload) != 0)
        return -1;
    unsigned char *b = (unsigned char *)out->p + start;
    put_u32(b + 8, GT_ROWLOG_BLOCK_MAGIC);
    uint16_t kc[2] = {(uint16_t)kind, (uint16_t)ncol};
    memcpy(b + 12, kc, 4);
    put_u32(b + 16, (uint32_t)n);
    put_u32(b + 20, (uint32_t)payload);
    unsigned char *v = b + GT_ROWLOG_BLOCK_HEAD;
    if (stride == ncol) { /* packed: the values, then the flags, at once */
        memcpy(v, val, nv * 8);
        memcpy(v + nv * 8, null, nv);
        v += nv * 9;
    } else {
        for (int i = 0; i < n; i++, v += (size_t)ncol * 8)
            memcpy(v, val + (size_t)i * (size_t)stride, (size_t)ncol * 8);
        for (int i = 0; i < n; i++, v += ncol)
            memcpy(v, null + (size_t)i * (size_t)stride, (size_t)ncol);
    }
    if (text_len)
        memcpy(v, text, text_len);
    uint64_t h = hash ? XXH3_64bits(b + 8, GT_ROWLOG_BLOCK_HEAD - 8 + payload) : 0;
    memcpy(b, &h, 8);
    out->len = start + GT_ROWLOG_BLOCK_HEAD + payload;
    out->p[out->len] = '\0';
    return 0;
}

/* ---- reading blocks ------------------------------------------------------ */

/* A block header's fields. */
struct head {
    int kind, ncol, marker;
    uint32_t n, len;
};

/* Read the block header at bh (GT_ROWLOG_BLOCK_HEAD bytes; its hash is not
 * checked here) into h. Returns 1 if it is one the writer makes (a block of
 * a known kind, or a commit marker), else 0. */
static int read_head(const unsigned char *bh, struct head *h)
{
    h->n = get_u32(bh + 16);
    h->len = get_u32(bh + 20);
    h->kind = get_u16(bh + 12);
    h->ncol = get_u16(bh + 14);
    h->marker = h->kind == GT_ROWLOG_COMMIT && h->ncol == 0 && h->n == 0 && h->len == 8;
    if (get_u32(bh + 8) != GT_ROWLOG_BLOCK_MAGIC)
        return 0;
    return h->marker ||
           (h->kind < GT_RL_NKIND && h->ncol == gt_rowlog_kinds[h->kind].ncol &&
            h->n >= 1 && h->n <= GT_ROWLOG_GROUP && h->len <= MAX_PAYLOAD &&
            h->len >= (size_t)h->n * (size_t)h->ncol * 9);
}

int gt_rowlog_block_at(const void *p, size_t len, gt_rowlog_block *b)
{
    const unsigned char *u = p;
    struct head h;
    if (len == 0)
        return 0;
    if (len < GT_ROWLOG_BLOCK_HEAD || !read_head(u, &h) || h.marker ||
        len - GT_ROWLOG_BLOCK_HEAD < h.len)
        return -1;
    size_t nv = (size_t)h.n * (size_t)h.ncol;
    b->kind = h.kind;
    b->ncol = h.ncol;
    b->n = (int)h.n;
    b->val = u + GT_ROWLOG_BLOCK_HEAD;
    b->null = b->val + nv * 8;
    b->text = (const char *)b->null + nv;
    b->text_len = h.len - nv * 9;
    b->size = GT_ROWLOG_BLOCK_HEAD + (size_t)h.len;
    return 1;
}

/* ---- the fold ------------------------------------------------------------ */

struct fold {
    sqlite3 *db;
    sqlite3_stmt *multi[GT_RL_NKIND], *one[GT_RL_NKIND];
    gt_rowlog_stats st;
};

/* Does the multi-row INSERT of kind k stop at a conflict keeping the rows
 * before it (OR FAIL)? A plain INSERT of several rows may ABORT, so SQLite
 * gives each such statement a statement journal: a copy of every page it
 * changes that was there before it (the tables' last pages), written to a
 * temporary file. Folding a 400-step MLP trace's log wrote 61 MB there
 * (14,895 pages) for a 4.2 MB trace. OR FAIL needs none; fold_block
 * skips the rows it kept (sqlite3_changes) and retries the others one by
 * one, which leaves the same rows as ABORT did. */
static int fails_keeping(int k)
{
    return strncmp(gt_rowlog_kinds[k].cols, "INSERT INTO ", 12) == 0;
}

/* The statement of `rows` (1 or GT_ROWLOG_GROUP) rows of kind k, prepared
 * on first use. NULL on error (in db). */
static sqlite3_stmt *stmt_for(struct fold *f, int k, int rows)
{
    sqlite3_stmt **st = rows == 1 ? &f->one[k] : &f->multi[k];
    if (!*st) {
        enum { LEN = 320 + GT_ROWLOG_GROUP * (GT_ROWLOG_MAXCOL * 2 + 3) };
        char sql[LEN + 8];
        /* "INSERT" then " OR FAIL" then the rest, for a plain INSERT */
        int fail = rows > 1 && fails_keeping(k);
        if (gt_rowlog_insert_sql(k, rows, sql + (fail ? 8 : 0), LEN) != 0)
            return NULL;
        if (fail) {
            memcpy(sql, "INSERT", 6);
            memcpy(sql + 6, " OR FAIL", 8);
        }
        if (sqlite3_prepare_v2(f->db, sql, -1, st, NULL) != SQLITE_OK)
            return NULL;
    }
    return *st;
}

static void bind_row(sqlite3_stmt *st, int first, int k, const int64_t *val,
                     const unsigned char *null, const char *text)
{
    int ncol = gt_rowlog_kinds[k].ncol;
    unsigned tx = gt_rowlog_kinds[k].text;
    for (int c = 0; c < ncol; c++) {
        if (null[c])
            sqlite3_bind_null(st, first + c);
        else if (tx >> c & 1)
            sqlite3_bind_text(st, first + c, text + val[c], -1, SQLITE_STATIC);
        else
            sqlite3_bind_int64(st, first + c, val[c]);
    }
}

/* Insert one checked block. Returns SQLITE_OK or the error. */
static int fold_block(struct fold *f, int k, int n, const unsigned char *payload,
                      size_t text_len)
{
    int ncol = gt_rowlog_kinds[k].ncol;
    int64_t val[GT_ROWLOG_GROUP][GT_ROWLOG_MAXCOL];
    const unsigned char *nulls = payload + (size_t)n * ncol * 8;
    const char *text = (const char *)nulls + (size_t)n * ncol;
    for (int i = 0; i < n; i++)
        memcpy(val[i], payload + (size_t)i * ncol * 8, (size_t)ncol * 8);
    /* text offsets must point inside the arena, whose last byte is a NUL */
    unsigned tx = gt_rowlog_kinds[k].text;
    for (int i = 0; tx && i < n; i++)
        for (int c = 0; c < ncol; c++)
            if ((tx >> c & 1) && !nulls[i * ncol + c] &&
                (val[i][c] < 0 || (uint64_t)val[i][c] >= text_len ||
                 text[text_len - 1] != '\0'))
                return SQLITE_CORRUPT;
    int done = 0; /* rows inserted by the multi-row statement that failed */
    if (n == GT_ROWLOG_GROUP) {
        sqlite3_stmt *st = stmt_for(f, k, n);
        if (!st)
            return sqlite3_errcode(f->db);
        for (int i = 0; i < n; i++)
            bind_row(st, i * ncol + 1, k, val[i], nulls + i * ncol, text);
        int rc = sqlite3_step(st);
        int rc2 = sqlite3_reset(st);
        if (rc == SQLITE_DONE) {
            f->st.rows += n;
            return SQLITE_OK;
        }
        if ((rc2 & 0xff) != SQLITE_CONSTRAINT)
            return rc2 != SQLITE_OK ? rc2 : SQLITE_ERROR;
        if (fails_keeping(k)) { /* the rows before the conflict are in */
            done = sqlite3_changes(f->db);
            f->st.rows += done;
        }
    }
    sqlite3_stmt *st = stmt_for(f, k, 1);
    if (!st)
        return sqlite3_errcode(f->db);
    for (int i = done; i < n; i++) {
        bind_row(st, 1, k, val[i], nulls + i * ncol, text);
        int rc = sqlite3_step(st);
        int rc2 = sqlite3_reset(st);
        if (rc == SQLITE_DONE)
            f->st.rows++;
        else if ((rc2 & 0xff) == SQLITE_CONSTRAINT)
            f->st.dropped++;
        else
            return rc2 != SQLITE_OK ? rc2 : SQLITE_ERROR;
    }
    return SQLITE_OK;
}

/* Finalize the fold's statements. */
static void fold_end(struct fold *f)
{
    for (int k = 0; k < GT_RL_NKIND; k++) {
        sqlite3_finalize(f->multi[k]);
        sqlite3_finalize(f->one[k]);
    }
}

int gt_rowlog_fold_mem(sqlite3 *db, const void *p, size_t len, gt_rowlog_stats *stats)
{
    struct fold f = {.db = db};
    gt_rowlog_block b;
    size_t at = 0;
    int got, rc = SQLITE_OK;
    while (rc == SQLITE_OK && at < len &&
           (got = gt_rowlog_block_at((const char *)p + at, len - at, &b)) != 0) {
        rc = got < 0 ? SQLITE_CORRUPT : fold_block(&f, b.kind, b.n, b.val, b.text_len);
        at += got > 0 ? b.size : 0;
        f.st.blocks += rc == SQLITE_OK;
    }
    f.st.bytes = (int64_t)at;
    fold_end(&f);
    if (stats)
        *stats = f.st;
    return rc;
}

static void put_err(char *err, size_t len, const char *fmt, const char *a, const char *b)
{
    if (err && len)
        snprintf(err, len, fmt, a, b);
}

int gt_rowlog_fold(sqlite3 *db, const char *log_path, int64_t limit,
                   gt_rowlog_stats *stats, char *err, size_t errlen)
{
    struct fold f = {.db = db};
    int rc = GT_OK;
    unsigned char *buf = NULL;
    size_t cap = 0;
    FILE *in = fopen(log_path, "rb");
    if (!in) {
        put_err(err, errlen, "cannot read row log %s: %s", log_path, strerror(errno));
        rc = GT_EIO;
        goto out;
    }
    unsigned char head[GT_ROWLOG_HEAD] = {0};
    size_t got = fread(head, 1, sizeof head, in);
    if (got < 8 && memcmp(head, "GTROWLOG", got) == 0) {
        /* a writer killed before its header reached the file: nothing logged */
        f.st.torn = got > 0;
        goto out;
    }
    if (memcmp(head, "GTROWLOG", 8) != 0) {
        put_err(err, errlen, "%s is not a gradtrace row log%s", log_path, " (bad magic)");
        rc = GT_ENOTTRACE;
        goto out;
    }
    if (got < sizeof head) {
        f.st.torn = 1;
        goto out;
    }
    if (get_u32(head + 8) > GT_ROWLOG_VERSION) {
        char v[48];
        snprintf(v, sizeof v, "%u", (unsigned)get_u32(head + 8));
        put_err(err, errlen,
                "row log %s has format version %s, newer than this gradtrace's "
                "(reads up to 1); upgrade gradtrace",
                log_path, v);
        rc = GT_ENEWER;
        goto out;
    }
    f.st.bytes = GT_ROWLOG_HEAD;
    int64_t at = GT_ROWLOG_HEAD; /* the end of the last block read */
    if (sqlite3_exec(db, "SAVEPOINT gt_rowlog", NULL, NULL, NULL) != SQLITE_OK) {
        put_err(err, errlen, "cannot fold row log %s: %s", log_path, sqlite3_errmsg(db));
        rc = GT_ESQL;
        goto out;
    }
    int64_t pend_rows = 0, pend_dropped = 0, pend_blocks = 0;
    for (;;) {
        unsigned char bh[GT_ROWLOG_BLOCK_HEAD];
        if (limit >= 0 && at + GT_ROWLOG_BLOCK_HEAD > limit) {
            f.st.torn = at < limit;
            break;
        }
        got = fread(bh, 1, sizeof bh, in);
        if (got < sizeof bh) {
            f.st.torn = got > 0;
            break;
        }
        struct head hd = {0};
        int ok = read_head(bh, &hd);
        uint32_t n = hd.n, len = hd.len;
        int k = hd.kind, ncol = hd.ncol, marker = hd.marker;
        if (!ok || (limit >= 0 && at + GT_ROWLOG_BLOCK_HEAD + (int64_t)len > limit)) {
            f.st.torn = 1;
            break;
        }
        if (cap < GT_ROWLOG_BLOCK_HEAD + (size_t)len) {
            size_t want = GT_ROWLOG_BLOCK_HEAD + (size_t)len + 4096;
            unsigned char *p = realloc(buf, want);
            if (!p) {
                put_err(err, errlen, "cannot read row log %s: %s", log_path,
                        "out of memory");
                rc = GT_ENOMEM;
                goto out;
            }
            buf = p;
            cap = want;
        }
        memcpy(buf, bh, sizeof bh);
        if (fread(buf + sizeof bh, 1, len, in) != len) {
            f.st.torn = 1;
            break;
        }
        uint64_t want_h, h = XXH3_64bits(buf + 8, GT_ROWLOG_BLOCK_HEAD - 8 + (size_t)len);
        memcpy(&want_h, buf, 8);
        if (h != want_h) {
            f.st.torn = 1;
            break;
        }
        at += GT_ROWLOG_BLOCK_HEAD + len;
        if (marker) { /* a commit is complete: keep its rows */
            if (sqlite3_exec(db, "RELEASE gt_rowlog; SAVEPOINT gt_rowlog", NULL, NULL,
                             NULL) != SQLITE_OK) {
                put_err(err, errlen, "cannot fold row log %s: %s", log_path,
                        sqlite3_errmsg(db));
                rc = GT_ESQL;
                goto out;
            }
            memcpy(&f.st.seq, buf + sizeof bh, 8);
            f.st.commits++;
            f.st.blocks += pend_blocks + 1;
            f.st.bytes = at;
            pend_blocks = pend_rows = pend_dropped = 0;
            continue;
        }
        size_t text_len = len - (size_t)n * ncol * 9;
        int64_t rows0 = f.st.rows, dropped0 = f.st.dropped;
        int src = fold_block(&f, k, (int)n, buf + sizeof bh, text_len);
        if (src == SQLITE_CORRUPT) { /* a hash-valid block the writer never made */
            f.st.torn = 1;
            break;
        }
        if (src != SQLITE_OK) {
            put_err(err, errlen, "cannot fold row log %s: %s", log_path,
                    sqlite3_errmsg(db));
            rc = GT_ESQL;
            goto out;
        }
        pend_blocks++;
        pend_rows += f.st.rows - rows0;
        pend_dropped += f.st.dropped - dropped0;
    }
    /* the rows after the last complete commit are not kept */
    if (rc == GT_OK) {
        f.st.rows -= pend_rows;
        f.st.dropped -= pend_dropped;
        f.st.torn |= pend_blocks > 0;
        if (sqlite3_exec(db, "ROLLBACK TO gt_rowlog; RELEASE gt_rowlog", NULL, NULL,
                         NULL) != SQLITE_OK) {
            put_err(err, errlen, "cannot fold row log %s: %s", log_path,
                    sqlite3_errmsg(db));
            rc = GT_ESQL;
        }
    }
    if (ferror(in)) {
        put_err(err, errlen, "cannot read row log %s: %s", log_path, strerror(errno));
        rc = GT_EIO;
    }
out:
    fold_end(&f);
    if (in)
        fclose(in);
    free(buf);
    if (stats)
        *stats = f.st;
    return rc;
}

int gt_rowlog_on_open(const char *path, int live, int64_t *copy_bytes, char *err,
                      size_t errlen)
{
    *copy_bytes = -1;
    size_t n = strlen(path);
    char *log = malloc(n + sizeof GT_ROWLOG_SUFFIX);
    if (!log) {
        put_err(err, errlen, "cannot open %s: %s", path, "out of memory");
        return GT_ENOMEM;
    }
    memcpy(log, path, n);
    memcpy(log + n, GT_ROWLOG_SUFFIX, sizeof GT_ROWLOG_SUFFIX);
    struct stat sb;
    int rc = GT_OK;
    char *why = NULL;
    if (stat(log, &sb) != 0)
        goto out;
    if (live || access(path, W_OK) != 0) {
        *copy_bytes = (int64_t)sb.st_size;
        goto out;
    }
    sqlite3 *db = NULL;
    /* its messages name the log: room for the path, whatever its length */
    size_t whylen = n + 1024;
    why = malloc(whylen);
    if (!why) {
        put_err(err, errlen, "cannot open %s: %s", path, "out of memory");
        rc = GT_ENOMEM;
        goto out;
    }
    why[0] = '\0';
    int src = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (src == SQLITE_OK) {
        sqlite3_busy_timeout(db, 2000);
        src = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    }
    if (src != SQLITE_OK) {
        put_err(err, errlen, "cannot fold its row log into %s: %s", path,
                db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        rc = GT_EIO;
        goto out;
    }
    rc = gt_rowlog_fold(db, log, -1, NULL, why, whylen);
    if (rc == GT_OK && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        put_err(why, whylen, "cannot fold row log %s: %s", log, sqlite3_errmsg(db));
        rc = GT_ESQL;
    }
    if (rc != GT_OK) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        put_err(err, errlen, "cannot open %s: %s", path, why);
        if (rc == GT_ENOTTRACE && err && strlen(err) + 60 < errlen)
            strcat(err, " (move it away to read the trace without it)");
    }
    sqlite3_close(db);
    if (rc == GT_OK)
        (void)unlink(log);
out:
    free(why);
    free(log);
    return rc;
}

int gt_rowlog_fold_copy(sqlite3 *db, const char *path, int64_t limit)
{
    char *log = sqlite3_mprintf("%s" GT_ROWLOG_SUFFIX, path);
    if (!log)
        return SQLITE_NOMEM;
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        int frc = gt_rowlog_fold(db, log, limit, NULL, NULL, 0);
        rc = frc == GT_OK     ? sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)
             : frc == GT_ESQL ? sqlite3_extended_errcode(db)
                              : SQLITE_CORRUPT;
        if (rc != SQLITE_OK)
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    }
    sqlite3_free(log);
    return rc;
}
