/* Printing the rows of a prepared statement; see table_out.h. */
#include <gradtrace/table_out.h>
#include <gradtrace/trace.h>

#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "strbuf.h"
#include "utf8.h"

typedef gt_strbuf buf;

static int buf_add(buf *b, const char *s, size_t n)
{
    return gt_strbuf_add(b, s, n) ? SQLITE_NOMEM : SQLITE_OK;
}

static int buf_adds(buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* The value of column i as text: NULL for SQL NULL, x'..' for a blob.
 * With `escape`, tabs, newlines and other control characters are written
 * as \t, \n, \r or '?' so a value stays on one line. Returns SQLITE_OK with
 * a malloc'd string (or NULL) in *out, or SQLITE_NOMEM. */
static int cell_text(sqlite3_stmt *st, int i, int escape, char **out)
{
    static const char hex[] = "0123456789abcdef";
    buf b = {0};
    int rc = SQLITE_OK;

    *out = NULL;
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return SQLITE_OK;
    case SQLITE_BLOB: {
        const unsigned char *p = sqlite3_column_blob(st, i);
        int n = sqlite3_column_bytes(st, i);
        rc = buf_adds(&b, "x'");
        for (int k = 0; rc == SQLITE_OK && k < n; k++) {
            char h[2] = {hex[p[k] >> 4], hex[p[k] & 15]};
            rc = buf_add(&b, h, 2);
        }
        if (rc == SQLITE_OK)
            rc = buf_adds(&b, "'");
        break;
    }
    default: {
        const char *s = (const char *)sqlite3_column_text(st, i);
        if (!s)
            return SQLITE_NOMEM;
        if (!escape) {
            rc = buf_adds(&b, s);
            break;
        }
        for (; rc == SQLITE_OK && *s; s++) {
            unsigned char c = (unsigned char)*s;
            if (c == '\n')
                rc = buf_add(&b, "\\n", 2);
            else if (c == '\t')
                rc = buf_add(&b, "\\t", 2);
            else if (c == '\r')
                rc = buf_add(&b, "\\r", 2);
            else if (c < 0x20 || c == 0x7f)
                rc = buf_add(&b, "?", 1);
            else
                rc = buf_add(&b, s, 1);
        }
        if (rc == SQLITE_OK && !b.p)
            rc = buf_add(&b, "", 0);
        break;
    }
    }
    if (rc != SQLITE_OK) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    return SQLITE_OK;
}

/* Cut s to at most w characters, the last three being "..."; in place. */
static void cut(char *s, int w)
{
    if (w <= 0 || gt_utf8_width(s) <= (size_t)w)
        return;
    int keep = w > 3 ? w - 3 : 0;
    size_t n = 0;
    char *p = s;
    for (; *p; p++) {
        if (((unsigned char)*p & 0xC0) != 0x80) {
            if ((int)n == keep)
                break;
            n++;
        }
    }
    strcpy(p, w > 3 ? "..." : "");
}

/* Append s padded with blanks to `width` characters, on the left if
 * `right`. */
static int add_padded(buf *line, const char *s, size_t width, int right)
{
    size_t w = gt_utf8_width(s);
    int rc = SQLITE_OK;
    for (size_t k = w; right && k < width && rc == SQLITE_OK; k++)
        rc = buf_add(line, " ", 1);
    if (rc == SQLITE_OK)
        rc = buf_adds(line, s);
    for (size_t k = w; !right && k < width && rc == SQLITE_OK; k++)
        rc = buf_add(line, " ", 1);
    return rc;
}

/* Print a table line without its trailing blanks, and empty it. */
static void put_line(buf *line, FILE *out)
{
    while (line->len && line->p[line->len - 1] == ' ')
        line->len--;
    fwrite(line->p ? line->p : "", 1, line->len, out);
    fputc('\n', out);
    line->len = 0;
}

/* Table mode: every row is kept, then printed with column widths known. */
static int print_table(sqlite3_stmt *st, const gt_table_opts *o, FILE *out, int64_t *rows)
{
    int ncol = sqlite3_column_count(st);
    size_t *width = calloc((size_t)ncol, sizeof *width);
    int *numeric = calloc((size_t)ncol, sizeof *numeric);
    char **cells = NULL;
    size_t n = 0, cap = 0;
    buf line = {0};
    int rc = SQLITE_NOMEM;

    if (!width || !numeric)
        goto out;
    for (int i = 0; i < ncol; i++) {
        numeric[i] = 1;
        if (o->header)
            width[i] = gt_utf8_width(sqlite3_column_name(st, i));
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(cells, n + (size_t)ncol, cap, (size_t)ncol * 64) != 0) {
            rc = SQLITE_NOMEM;
            goto out;
        }
        for (int i = 0; i < ncol; i++) {
            int type = sqlite3_column_type(st, i);
            if (type != SQLITE_NULL && type != SQLITE_INTEGER && type != SQLITE_FLOAT)
                numeric[i] = 0;
            rc = cell_text(st, i, 1, &cells[n]);
            if (rc != SQLITE_OK) {
                while (i-- > 0)
                    free(cells[--n]);
                goto out;
            }
            if (cells[n]) {
                cut(cells[n], o->max_width);
                size_t w = gt_utf8_width(cells[n]);
                if (w > width[i])
                    width[i] = w;
            }
            n++;
        }
    }
    if (rc != SQLITE_DONE)
        goto out;
    rc = SQLITE_OK;

    for (size_t r = 0; r < n + (o->header ? 2 * (size_t)ncol : 0) && rc == SQLITE_OK;
         r += (size_t)ncol) {
        /* r counts the header and its rule first, then the rows */
        size_t k = o->header ? r - 2 * (size_t)ncol : r;
        for (int i = 0; i < ncol && rc == SQLITE_OK; i++) {
            if (i)
                rc = buf_add(&line, "  ", 2);
            if (rc != SQLITE_OK)
                break;
            if (o->header && r == 0) {
                rc = add_padded(&line, sqlite3_column_name(st, i), width[i], numeric[i]);
            } else if (o->header && r == (size_t)ncol) {
                for (size_t d = 0; d < (width[i] ? width[i] : 1) && rc == SQLITE_OK; d++)
                    rc = buf_add(&line, "-", 1);
            } else {
                const char *c = cells[k + (size_t)i];
                rc = add_padded(&line, c ? c : "", width[i], numeric[i]);
            }
        }
        if (rc == SQLITE_OK)
            put_line(&line, out);
    }
    if (rc != SQLITE_OK)
        goto out;
    if (rows)
        *rows = ncol ? (int64_t)(n / (size_t)ncol) : 0;
out:
    for (size_t k = 0; k < n; k++)
        free(cells[k]);
    free(cells);
    free(width);
    free(numeric);
    free(line.p);
    sqlite3_reset(st);
    return rc;
}

static void put_csv(FILE *out, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

/* TSV and CSV: one line per row, streamed. */
static int print_delimited(sqlite3_stmt *st, const gt_table_opts *o, FILE *out,
                           int64_t *rows)
{
    int csv = o->mode == GT_OUT_CSV;
    int ncol = sqlite3_column_count(st);
    int64_t n = 0;
    int rc;

    if (o->header) {
        for (int i = 0; i < ncol; i++) {
            if (i)
                fputc(csv ? ',' : '\t', out);
            if (csv)
                put_csv(out, sqlite3_column_name(st, i));
            else
                fputs(sqlite3_column_name(st, i), out);
        }
        fputc('\n', out);
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < ncol; i++) {
            char *c;
            if (i)
                fputc(csv ? ',' : '\t', out);
            if ((rc = cell_text(st, i, !csv, &c)) != SQLITE_OK)
                goto out;
            if (c && csv)
                put_csv(out, c);
            else if (c)
                fputs(c, out);
            free(c);
        }
        fputc('\n', out);
        n++;
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        if (rows)
            *rows = n;
    }
out:
    sqlite3_reset(st);
    return rc;
}

/* JSON text of one value, by SQLite's json_quote: bind `v` (or `text`),
 * step, append the result to b. */
static int json_of(sqlite3_stmt *q, sqlite3_value *v, const char *text, buf *b)
{
    int rc;
    if (text)
        rc = sqlite3_bind_text(q, 1, text, -1, SQLITE_TRANSIENT);
    else
        rc = sqlite3_bind_value(q, 1, v);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const char *s = (const char *)sqlite3_column_text(q, 0);
        rc = s ? buf_adds(b, s) : SQLITE_NOMEM;
    }
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

static int print_json(sqlite3_stmt *st, FILE *out, int64_t *rows)
{
    sqlite3_stmt *q = NULL;
    int ncol = sqlite3_column_count(st);
    buf *keys = calloc((size_t)ncol, sizeof *keys);
    buf row = {0};
    int64_t n = 0;
    int rc = SQLITE_NOMEM;

    if (!keys)
        goto out;
    rc = gt_db_prepare(sqlite3_db_handle(st), "SELECT json_quote(?1)", &q);
    /* the keys, quoted once: "name": */
    for (int i = 0; i < ncol && rc == SQLITE_OK; i++)
        if ((rc = json_of(q, NULL, sqlite3_column_name(st, i), &keys[i])) == SQLITE_OK)
            rc = buf_add(&keys[i], ":", 1);
    if (rc != SQLITE_OK)
        goto out;
    fputc('[', out);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        row.len = 0;
        rc = buf_adds(&row, n ? ",{" : "{");
        for (int i = 0; i < ncol && rc == SQLITE_OK; i++) {
            if (i && (rc = buf_add(&row, ",", 1)) != SQLITE_OK)
                break;
            if ((rc = buf_add(&row, keys[i].p, keys[i].len)) != SQLITE_OK)
                break;
            if (sqlite3_column_type(st, i) == SQLITE_BLOB) {
                char *hex;
                if ((rc = cell_text(st, i, 0, &hex)) != SQLITE_OK)
                    break;
                rc = json_of(q, NULL, hex, &row);
                free(hex);
            } else {
                rc = json_of(q, sqlite3_column_value(st, i), NULL, &row);
            }
        }
        if (rc == SQLITE_OK)
            rc = buf_add(&row, "}", 1);
        if (rc != SQLITE_OK)
            goto out;
        fwrite(row.p, 1, row.len, out);
        n++;
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        fputs("]\n", out);
        if (rows)
            *rows = n;
    }
out:
    for (int i = 0; keys && i < ncol; i++)
        free(keys[i].p);
    free(keys);
    free(row.p);
    sqlite3_finalize(q);
    sqlite3_reset(st);
    return rc;
}

int gt_table_print(sqlite3_stmt *st, const gt_table_opts *opts, FILE *out, int64_t *rows)
{
    gt_table_opts def = {GT_OUT_TABLE, 1, 0};
    const gt_table_opts *o = opts ? opts : &def;

    if (sqlite3_column_count(st) == 0) {
        /* BEGIN, COMMIT, ...: run it, print nothing. */
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            ;
        sqlite3_reset(st);
        if (rc == SQLITE_DONE && rows)
            *rows = 0;
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    switch (o->mode) {
    case GT_OUT_JSON:
        return print_json(st, out, rows);
    case GT_OUT_TSV:
    case GT_OUT_CSV:
        return print_delimited(st, o, out, rows);
    default:
        return print_table(st, o, out, rows);
    }
}
