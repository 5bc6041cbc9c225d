/* Tests of the engine adapter's fold (adapters/engine/fold.c) fed capture
 * records made by hand through gt_capture.h's structs, without torch: this
 * file plays the capture's side of the lanes (gt_capture_lanes, recycling,
 * weak references) and writes, publishes and links the chunks itself.
 * The cases are the records that continue an earlier one: the text of an
 * error or a variable name in GT_CAP_MORE pieces, a stack in several
 * GT_CAP_STACK records, an op's versions in GT_CAP_VERS records before its
 * GT_CAP_END, and a node's edges in GT_CAP_EDGES records. Each continuation
 * is written after a chunk switch and published after a drain, so it is
 * folded late, after another lane's records of later stamps; some never
 * come before the fold is freed (the drain at close). The rows are read
 * back with SQLite after the recorder closes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include "fold.h"
#include "gt_capture.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_TMPDIR_PREFIX "gt_test_fold"
#include "tmpdir.h"
#include "sqlquery.h"

/* ---- the capture's side ---------------------------------------------------- */

static gt_cap_lane *g_lanes; /* every lane, in order of creation */
static uint64_t g_stamp;     /* the process-wide stamp counter */
static size_t g_chunks;      /* chunks made */
static size_t g_recycled;    /* chunks the fold gave back */

gt_cap_lane *gt_capture_lanes(void)
{
    return g_lanes;
}

void gt_capture_recycle(gt_cap_lane *lane, gt_cap_chunk *c)
{
    (void)lane;
    free(c);
    g_recycled++;
}

int gt_capture_weak_forgettable(const void *impl)
{
    (void)impl;
    return 0;
}

void gt_capture_weak_release(const void *impl)
{
    (void)impl; /* no record here holds one (GT_CAPT_WEAK) */
}

void gt_capture_set_active(int on)
{
    (void)on;
}

/* A lane as its writer sees it: the chunk being filled and how much of it
 * holds records (published or not). */
typedef struct wlane {
    gt_cap_lane *lane;
    gt_cap_chunk *cur;
    size_t used;
} wlane;

static gt_cap_chunk *chunk_new(void)
{
    gt_cap_chunk *c = calloc(1, sizeof *c);
    assert_non_null(c);
    g_chunks++;
    return c;
}

static void lane_new(wlane *w, int64_t tid)
{
    gt_cap_lane *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->os_tid = tid;
    l->read = w->cur = chunk_new();
    w->lane = l;
    w->used = 0;
    gt_cap_lane **at = &g_lanes;
    while (*at)
        at = &(*at)->next_lane;
    __atomic_store_n(at, l, __ATOMIC_RELEASE);
}

/* Make the records written so far readable. */
static void publish(wlane *w)
{
    __atomic_store_n(&w->cur->used, w->used, __ATOMIC_RELEASE);
}

/* Go on in a new chunk (the records so far published first), as the
 * writer does when a record does not fit. */
static void next_chunk(wlane *w)
{
    gt_cap_chunk *c = chunk_new();
    publish(w);
    __atomic_store_n(&w->cur->next, c, __ATOMIC_RELEASE);
    w->cur = c;
    w->used = 0;
}

/* A zeroed record of len bytes (rounded up to 8), not yet published. */
static void *rec(wlane *w, int type, size_t len, uint64_t stamp)
{
    len = (len + 7) & ~(size_t)7;
    assert_true(len <= GT_CAP_CHUNK);
    if (w->used + len > GT_CAP_CHUNK)
        next_chunk(w);
    unsigned char *p = w->cur->data + w->used;
    memset(p, 0, len);
    w->used += len;
    gt_cap_hdr *h = (gt_cap_hdr *)p;
    h->type = (uint16_t)type;
    h->len = (uint32_t)len;
    h->stamp = stamp;
    return p;
}

/* A stamp: one per op or event, from one counter for every lane. */
static uint64_t st(void)
{
    return ++g_stamp;
}

/* Free the lanes and the chunks the fold did not give back: the one each
 * lane's reading is in and any after it. Returns how many. */
static size_t lanes_free(void)
{
    size_t n = 0;
    while (g_lanes) {
        gt_cap_lane *l = g_lanes;
        g_lanes = l->next_lane;
        for (gt_cap_chunk *c = l->read; c; n++) {
            gt_cap_chunk *next = c->next;
            free(c);
            c = next;
        }
        free(l);
    }
    return n;
}

/* ---- records ---------------------------------------------------------------- */

static void op_rec(wlane *w, uint64_t stamp, const char *name, uint32_t stack)
{
    gt_cap_op *r = rec(w, GT_CAP_OP, sizeof *r, stamp);
    r->name = name;
    r->os_tid = w->lane->os_tid;
    r->stack = stack;
    r->grad_mode = 1;
}

/* A float32 vector of 4 at fake addresses derived from `key`. */
static void arg_rec(wlane *w, uint64_t stamp, int role, int pos, uintptr_t key,
                    uint32_t version)
{
    gt_cap_arg *r = rec(w, GT_CAP_ARG, sizeof *r + 2 * sizeof(int64_t), stamp);
    r->role = (uint8_t)role;
    r->pos = pos;
    r->t.impl = (const void *)(key << 8);
    r->t.storage = (const void *)((key << 8) + 1);
    r->t.vc = (const void *)((key << 8) + 2);
    r->t.dtype = "float32";
    r->t.device = "cpu";
    r->t.nbytes = 16;
    r->t.version = version;
    r->t.flags = GT_CAPT_REQGRAD;
    r->t.ndim = 1;
    int64_t geom[2] = {4, 1};
    memcpy(r + 1, geom, sizeof geom);
}

static void versions_rec(wlane *w, uint64_t stamp, int type, uint32_t first, uint32_t n,
                         const uint32_t *after)
{
    gt_cap_end *r = rec(w, type, sizeof *r + 4 * (size_t)n, stamp);
    r->first = first;
    r->n = n;
    memcpy(r + 1, after, 4 * (size_t)n);
}

/* A frame as gt_cap_stack's records carry it, appended to buf at *len. */
static void frame_put(unsigned char *buf, size_t *len, int32_t line, const char *file,
                      const char *func, const char *code)
{
    int32_t kind = 0;
    memcpy(buf + *len, &line, 4);
    memcpy(buf + *len + 4, &kind, 4);
    *len += 8;
    const char *s[3] = {file, func, code};
    for (int i = 0; i < 3; i++) {
        memcpy(buf + *len, s[i], strlen(s[i]) + 1);
        *len += strlen(s[i]) + 1;
    }
    while (*len & 3)
        buf[(*len)++] = 0;
}

/* Stack `id`'s frames first..first + n - 1 (lines 10 * (i + 1), function
 * "f<i>"), flagged GT_CAP_STACKF_MORE if more. */
static void stack_rec(wlane *w, uint64_t stamp, uint32_t id, uint32_t first, uint32_t n,
                      int more)
{
    unsigned char buf[1024];
    size_t len = 0;
    for (uint32_t i = first; i < first + n; i++) {
        char func[16];
        snprintf(func, sizeof func, "f%u", i);
        frame_put(buf, &len, (int32_t)(10 * (i + 1)), "train.py", func, "x = y");
    }
    gt_cap_stack *r = rec(w, GT_CAP_STACK, sizeof *r + len, stamp);
    r->h.flags = more ? GT_CAP_STACKF_MORE : 0;
    r->id = id;
    r->first = first;
    r->nframes = n;
    memcpy(r + 1, buf, len);
}

/* Bytes off..off + k - 1 of a text as a GT_CAP_MORE record (more: others
 * follow), written in a next chunk. */
static void more_rec(wlane *w, uint64_t stamp, const char *text, size_t off, size_t k,
                     int more)
{
    next_chunk(w);
    gt_cap_more *m = rec(w, GT_CAP_MORE, sizeof *m + k, stamp);
    m->h.flags = more ? GT_CAP_TEXTF_MORE : 0;
    m->off = off;
    m->n = k;
    memcpy(m + 1, text + off, k);
}

/* An error's head record, whole (text inline) or alone (GT_CAP_TEXTF_MORE). */
static void error_rec(wlane *w, uint64_t stamp, const char *type, const char *msg,
                      int alone)
{
    size_t a = strlen(type) + 1, b = strlen(msg) + 1;
    gt_cap_text *r = rec(w, GT_CAP_ERROR, sizeof *r + (alone ? 0 : a + b), stamp);
    if (alone) { /* the struct alone (a multiple of 8 bytes, as the fold wants) */
        r->h.flags = GT_CAP_TEXTF_MORE;
    } else {
        memcpy(r + 1, type, a);
        memcpy((char *)(r + 1) + a, msg, b);
    }
    r->os_tid = w->lane->os_tid;
    r->alen = (uint32_t)a;
}

/* Error type and message as one text (what GT_CAP_MORE records carry). */
static char *error_text(const char *type, const char *msg, size_t *n)
{
    size_t a = strlen(type) + 1, b = strlen(msg) + 1;
    char *t = malloc(a + b);
    assert_non_null(t);
    memcpy(t, type, a);
    memcpy(t + a, msg, b);
    *n = a + b;
    return t;
}

/* A message of n - 1 characters (varied, so a piece out of place shows). */
static char *long_text(size_t n)
{
    char *s = malloc(n);
    assert_non_null(s);
    for (size_t i = 0; i + 1 < n; i++)
        s[i] = (char)('a' + (i * 7 + i / 1000) % 26);
    s[n - 1] = 0;
    return s;
}

_Static_assert(sizeof(gt_cap_text) % 8 == 0 && sizeof(gt_cap_name) % 8 == 0,
               "a text record's struct alone is a whole record");

/* ---- running the fold ------------------------------------------------------- */

typedef struct run {
    gt_recorder *r;
    gt_fold *f;
    wlane a, b;
} run;

static void run_open(run *x, const char *name)
{
    memset(x, 0, sizeof *x);
    char err[256] = "";
    gt_recorder_options o = {.overwrite = 1};
    int rc = gt_recorder_open(tpath(name), &o, err, sizeof err, &x->r);
    if (rc)
        print_error("open: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(gt_fold_new(x->r, 0, &x->f), 0);
    lane_new(&x->a, 101);
    lane_new(&x->b, 102);
}

static void drain(run *x)
{
    publish(&x->a);
    publish(&x->b);
    assert_int_equal(gt_fold_drain(x->f), 0);
}

/* Publish lane w alone and drain: the other lane's records written since
 * its last publish come later, after records of later stamps. */
static void drain_lane(run *x, wlane *w)
{
    publish(w);
    assert_int_equal(gt_fold_drain(x->f), 0);
}

/* Free the fold (its last drain) and close the recorder; the trace. */
static sqlite3 *run_close(run *x, const char *name)
{
    publish(&x->a);
    publish(&x->b);
    gt_fold_free(x->f);
    /* every chunk read to its end was given back, the last of each lane not */
    size_t left = lanes_free();
    assert_int_equal(left, 2);
    assert_int_equal(g_recycled + left, g_chunks);
    g_recycled = g_chunks = 0;
    assert_int_equal(gt_recorder_close(x->r), 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(tpath(name), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    return db;
}

/* An op of lane w: its stamp, one input (key in) and one output (key out). */
static void simple_op(wlane *w, uint64_t stamp, const char *name, uintptr_t in,
                      uintptr_t out)
{
    op_rec(w, stamp, name, 0);
    arg_rec(w, stamp, GT_CAP_IN, 0, in, 0);
    uint32_t after = 0;
    versions_rec(w, stamp, GT_CAP_END, 0, 1, &after);
    arg_rec(w, stamp, GT_CAP_OUT, 0, out, 0);
}

/* Whether the text of the first column of the first row of sql is s (n
 * bytes, any length). */
static int q_text_is(sqlite3 *db, const char *sql, const char *s, size_t n)
{
    sqlite3_stmt *st = q_row(db, sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    int same = t && (size_t)sqlite3_column_bytes(st, 0) == n && !memcmp(t, s, n);
    sqlite3_finalize(st);
    return same;
}

/* ---- tests -------------------------------------------------------------------- */

/* An error whose text comes in three GT_CAP_MORE records and a name in
 * two, each piece in a next chunk and folded at a later drain than the one
 * before, lane b's ops of later stamps folded in between: one errors row
 * with the whole message, one names row at its op, with the whole name. */
static void test_text_continued_late(void **state)
{
    (void)state;
    run x;
    run_open(&x, "text.db");
    simple_op(&x.a, st(), "aten::mul", 1, 2);
    /* an error of 150 kB: head alone, then pieces of 64 kB */
    char *msg = long_text(150000);
    size_t n = 0;
    char *text = error_text("RuntimeError", msg, &n);
    error_rec(&x.a, st(), "RuntimeError", "", 1);
    for (size_t off = 0; off < n; off += 65536) {
        /* the piece's stamp is taken before lane b's op, but the piece is
         * published after it: folded after a record of a later stamp */
        uint64_t ps = st();
        simple_op(&x.b, st(), "aten::add", 50 + off / 65536, 60 + off / 65536);
        size_t k = n - off < 65536 ? n - off : 65536;
        more_rec(&x.a, ps, text, off, k, off + k < n);
        drain_lane(&x, &x.b);
        drain(&x);
    }
    /* a name of 100 kB for the op's output (GT_CAP_NAMEF_OP), in two pieces */
    simple_op(&x.a, st(), "aten::relu", 2, 3);
    char *name = long_text(100000);
    gt_cap_name *nr = rec(&x.a, GT_CAP_NAME, sizeof *nr, st());
    nr->h.flags = GT_CAP_NAMEF_OP | GT_CAP_TEXTF_MORE;
    nr->impl = (const void *)((uintptr_t)3 << 8);
    nr->vc = (const void *)(((uintptr_t)3 << 8) + 2);
    drain(&x);
    uint64_t ps = st();
    simple_op(&x.b, st(), "aten::add", 70, 71);
    more_rec(&x.a, ps, name, 0, 60000, 1);
    drain_lane(&x, &x.b);
    drain(&x);
    ps = st();
    simple_op(&x.b, st(), "aten::add", 72, 73);
    drain_lane(&x, &x.b);
    more_rec(&x.a, ps, name, 60000, 40000, 0);
    simple_op(&x.b, st(), "aten::add", 74, 75);
    sqlite3 *db = run_close(&x, "text.db");
    assert_int_equal(q_int(db, "SELECT count(*) FROM errors"), 1);
    assert_true(q_text_is(db, "SELECT message FROM errors", msg, 150000 - 1));
    assert_int_equal(q_int(db, "SELECT count(*) FROM errors e JOIN strings s ON s.id ="
                               " e.type WHERE s.text = 'RuntimeError'"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM names"), 1);
    assert_true(q_text_is(db,
                          "SELECT s.text FROM names n JOIN strings s ON s.id = n.name",
                          name, 100000 - 1));
    /* at the relu's seq, bound to its output */
    assert_int_equal(q_int(db, "SELECT count(*) FROM names n JOIN ops o ON o.seq = n.seq"
                               " JOIN strings s ON s.id = o.name JOIN op_args a ON"
                               " a.op = o.seq AND a.role = 1 AND a.tensor = n.tensor"
                               " WHERE s.text = 'aten::relu'"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 2 + 6);
    sqlite3_close(db);
    free(msg);
    free(text);
    free(name);
}

/* Texts that never end: an error's pieces cut short by a whole error on
 * the same lane (then an error in a piece, written whole), a
 * name whose piece is out of place (then the right one, too late), an
 * error whose last piece never comes before the fold is freed: the errors
 * that came whole are written, no cut or merged text. */
static void test_text_truncated(void **state)
{
    (void)state;
    run x;
    run_open(&x, "trunc.db");
    simple_op(&x.a, st(), "aten::mul", 1, 2);
    size_t n = 0;
    char *msg = long_text(100000);
    char *text = error_text("RuntimeError", msg, &n);
    error_rec(&x.a, st(), "RuntimeError", "", 1);
    more_rec(&x.a, st(), text, 0, 65536, 1);
    drain(&x);
    error_rec(&x.a, st(), "ValueError", "short", 0); /* the one before never ended */
    drain(&x);
    /* an error in one piece after it: put together from its own head */
    size_t tn = 0;
    char *tt = error_text("TypeError", "in pieces", &tn);
    error_rec(&x.a, st(), "TypeError", "", 1);
    more_rec(&x.a, st(), tt, 0, tn, 0);
    free(tt);
    /* lane b: a name's first piece at the wrong offset, then the right one */
    simple_op(&x.b, st(), "aten::add", 10, 11);
    gt_cap_name *nr = rec(&x.b, GT_CAP_NAME, sizeof *nr, st());
    nr->h.flags = GT_CAP_NAMEF_OP | GT_CAP_TEXTF_MORE;
    nr->impl = (const void *)((uintptr_t)11 << 8);
    nr->vc = (const void *)(((uintptr_t)11 << 8) + 2);
    more_rec(&x.b, st(), "weight\0", 1, 6, 0);
    drain(&x);
    more_rec(&x.b, st(), "weight\0", 0, 7, 0);
    /* lane a: an error whose last piece never comes */
    error_rec(&x.a, st(), "RuntimeError", "", 1);
    more_rec(&x.a, st(), text, 0, 65536, 1);
    sqlite3 *db = run_close(&x, "trunc.db");
    assert_string_equal(q_text(db, "SELECT group_concat(t, ', ') FROM (SELECT s.text ||"
                                   " ': ' || e.message AS t FROM errors e JOIN strings s"
                                   " ON s.id = e.type ORDER BY e.seq)"),
                        "ValueError: short, TypeError: in pieces");
    assert_int_equal(q_int(db, "SELECT count(*) FROM names"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops"), 2);
    sqlite3_close(db);
    free(msg);
    free(text);
}

/* The stack of the first op named `op` as "function:line/..." from the
 * outermost frame, "-" for none. */
static const char *stack_of(sqlite3 *db, const char *op)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE c(sid, d) AS (SELECT (SELECT o.stack FROM ops o JOIN"
             " strings n ON n.id = o.name WHERE n.text = '%s' ORDER BY o.seq LIMIT 1), 0"
             " UNION ALL SELECT s.parent, d + 1 FROM c JOIN stacks s ON s.id = c.sid"
             " WHERE s.parent IS NOT NULL)"
             " SELECT coalesce(group_concat(fs.text || ':' || f.line, '/'), '-') FROM"
             " (SELECT * FROM c ORDER BY d DESC) c JOIN stacks s ON s.id = c.sid JOIN"
             " frames f ON f.id = s.frame JOIN strings fs ON fs.id = f.function",
             op);
    return q_text(db, sql);
}

/* Stacks in several GT_CAP_STACK records, the later ones in a next chunk
 * folded at a later drain, lane b's records between: a stack whose
 * records all came is the ops' stack, on either lane; one whose last
 * record never came, or one with a record lost between, is no stack (the
 * op's stack is NULL, never a part of it); an op of another lane naming a
 * stack still being described has it or none, never a wrong one. */
static void test_stack_continued_late(void **state)
{
    (void)state;
    run x;
    run_open(&x, "stack.db");
    stack_rec(&x.a, st(), 7, 0, 2, 1);
    drain(&x);
    uint64_t last7 = st(); /* the last record's stamp, taken first */
    simple_op(&x.b, st(), "aten::add", 10, 11);
    op_rec(&x.b, st(), "aten::early7", 7); /* folded before stack 7 is whole */
    next_chunk(&x.a);
    stack_rec(&x.a, last7, 7, 2, 1, 0);
    drain_lane(&x, &x.b);
    op_rec(&x.a, st(), "aten::a7", 7);
    drain(&x);
    op_rec(&x.b, st(), "aten::b7", 7);
    /* 8: its last record never comes */
    stack_rec(&x.a, st(), 8, 0, 2, 1);
    op_rec(&x.a, st(), "aten::a8", 8);
    /* 9: frames 2..3 lost, 4 comes */
    stack_rec(&x.b, st(), 9, 0, 2, 1);
    drain(&x);
    next_chunk(&x.b);
    stack_rec(&x.b, st(), 9, 4, 1, 0);
    op_rec(&x.b, st(), "aten::b9", 9);
    /* 11: in three records, lane a's op between each */
    stack_rec(&x.b, st(), 11, 0, 1, 1);
    drain(&x);
    op_rec(&x.a, st(), "aten::a_between", 0);
    drain(&x);
    next_chunk(&x.b);
    stack_rec(&x.b, st(), 11, 1, 1, 1);
    drain(&x);
    op_rec(&x.a, st(), "aten::a_between2", 0);
    next_chunk(&x.b);
    stack_rec(&x.b, st(), 11, 2, 2, 0);
    op_rec(&x.b, st(), "aten::b11", 11);
    op_rec(&x.a, st(), "aten::a11", 11);
    /* 13 described whole between 12's two records on the same lane (a
     * stack first seen while another is being described) */
    stack_rec(&x.a, st(), 12, 0, 1, 1);
    stack_rec(&x.a, st(), 13, 0, 2, 0);
    drain(&x);
    next_chunk(&x.a);
    stack_rec(&x.a, st(), 12, 1, 2, 0);
    op_rec(&x.a, st(), "aten::a12", 12);
    op_rec(&x.b, st(), "aten::b13", 13);
    sqlite3 *db = run_close(&x, "stack.db");
    assert_string_equal(stack_of(db, "aten::a7"), "f0:10/f1:20/f2:30");
    assert_string_equal(stack_of(db, "aten::b7"), "f0:10/f1:20/f2:30");
    const char *early = stack_of(db, "aten::early7");
    int early_none = !strcmp(early, "-");
    if (!early_none)
        assert_string_equal(early, "f0:10/f1:20/f2:30");
    assert_string_equal(stack_of(db, "aten::a8"), "-");
    assert_string_equal(stack_of(db, "aten::b9"), "-");
    assert_string_equal(stack_of(db, "aten::b11"), "f0:10/f1:20/f2:30/f3:40");
    assert_string_equal(stack_of(db, "aten::a11"), "f0:10/f1:20/f2:30/f3:40");
    assert_string_equal(stack_of(db, "aten::a12"), "f0:10/f1:20/f2:30");
    assert_string_equal(stack_of(db, "aten::b13"), "f0:10/f1:20");
    assert_int_equal(q_int(db, "SELECT count(*) FROM ops WHERE stack IS NULL"),
                     5 + early_none); /* add, a8, b9, the two a_between */
    sqlite3_close(db);
}

/* An op of three inputs whose versions come in a GT_CAP_VERS record and,
 * after a drain and lane b's op, a GT_CAP_END; its node's edges in its
 * GT_CAP_NODE record and, later still, a GT_CAP_EDGES one; then an op
 * whose GT_CAP_END and a node whose GT_CAP_EDGES never come. */
static void test_versions_edges_continued_late(void **state)
{
    (void)state;
    run x;
    run_open(&x, "vers.db");
    uint64_t cat = st();
    op_rec(&x.a, cat, "aten::cat", 0);
    arg_rec(&x.a, cat, GT_CAP_IN, 0, 1, 0);
    arg_rec(&x.a, cat, GT_CAP_IN, 1, 2, 5);
    arg_rec(&x.a, cat, GT_CAP_IN, 2, 3, 0);
    versions_rec(&x.a, cat, GT_CAP_VERS, 0, 2, (const uint32_t[]){1, 5});
    drain(&x);
    simple_op(&x.b, st(), "aten::add", 10, 11);
    drain(&x);
    next_chunk(&x.a);
    versions_rec(&x.a, cat, GT_CAP_END, 2, 1, (const uint32_t[]){2});
    arg_rec(&x.a, cat, GT_CAP_OUT, 0, 4, 0);
    gt_cap_node *nd = rec(&x.a, GT_CAP_NODE, sizeof *nd + 2 * sizeof(gt_cap_edge), cat);
    nd->h.flags = GT_CAP_NODEF_OF_OP;
    nd->id = 77;
    nd->name = "CatBackward0";
    nd->sequence_nr = 3;
    nd->os_tid = 101;
    nd->nedges = 2;
    gt_cap_edge *e = (gt_cap_edge *)(nd + 1);
    e[0] = (gt_cap_edge){0, 0, 0};
    e[1] = (gt_cap_edge){5, 1, 0};
    gt_cap_node_out *no = rec(&x.a, GT_CAP_NODE_OUT, sizeof *no, cat);
    no->node = 77;
    no->impl = (const void *)((uintptr_t)4 << 8);
    no->vc = (const void *)(((uintptr_t)4 << 8) + 2);
    drain(&x);
    simple_op(&x.b, st(), "aten::add", 12, 13);
    drain(&x);
    next_chunk(&x.a);
    gt_cap_edges *ed = rec(&x.a, GT_CAP_EDGES, sizeof *ed + 2 * sizeof(gt_cap_edge), cat);
    ed->node = 77;
    ed->first = 2;
    ed->n = 2;
    e = (gt_cap_edge *)(ed + 1);
    e[0] = (gt_cap_edge){6, 0, 0};
    e[1] = (gt_cap_edge){7, 2, 0};
    /* an op whose GT_CAP_END never comes, a node whose edges stop short */
    uint64_t stk = st();
    op_rec(&x.a, stk, "aten::stack", 0);
    arg_rec(&x.a, stk, GT_CAP_IN, 0, 1, 1);
    arg_rec(&x.a, stk, GT_CAP_IN, 1, 3, 2);
    versions_rec(&x.a, stk, GT_CAP_VERS, 0, 1, (const uint32_t[]){3});
    drain(&x);
    uint64_t add = st();
    simple_op(&x.b, add, "aten::add", 14, 15);
    nd = rec(&x.b, GT_CAP_NODE, sizeof *nd + sizeof(gt_cap_edge), add);
    nd->id = 78;
    nd->name = "AddBackward0";
    nd->sequence_nr = 4;
    nd->os_tid = 102;
    nd->nedges = 1;
    ((gt_cap_edge *)(nd + 1))[0] = (gt_cap_edge){77, 0, 0};
    sqlite3 *db = run_close(&x, "vers.db");
    /* the cat's bumps: inputs 0 and 2 (not 1, unchanged), from both records */
    assert_string_equal(q_text(db, "SELECT group_concat(a.pos || ':' || b.version, ' ')"
                                   " FROM (SELECT * FROM version_bumps ORDER BY tensor) b"
                                   " JOIN op_args a ON a.op = b.op AND a.tensor ="
                                   " b.tensor AND a.role = 0 JOIN ops o ON o.seq = b.op"
                                   " JOIN strings s ON s.id = o.name"
                                   " WHERE s.text = 'aten::cat' AND b.observed = 0"),
                        "0:1 2:2");
    /* the stack's: its first input's, from the record that came */
    assert_string_equal(q_text(db, "SELECT group_concat(a.pos || ':' || b.version, ' ')"
                                   " FROM version_bumps b JOIN op_args a ON a.op = b.op"
                                   " AND a.tensor = b.tensor AND a.role = 0 JOIN ops o ON"
                                   " o.seq = b.op JOIN strings s ON s.id = o.name"
                                   " WHERE s.text = 'aten::stack' AND b.observed = 0"),
                        "0:3");
    assert_string_equal(
        q_text(db, "SELECT group_concat(pos || '>' || coalesce(next, '-')"
                   " || '.' || coalesce(input_nr, '-'), ' ') FROM (SELECT * FROM edges"
                   " WHERE node = 77 ORDER BY pos)"),
        "0>-.- 1>5.1 2>6.0 3>7.2");
    assert_int_equal(q_int(db, "SELECT count(*) FROM edges WHERE node = 78"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM nodes n JOIN ops o ON o.seq = n.op"
                               " JOIN strings s ON s.id = o.name WHERE n.id = 77 AND"
                               " s.text = 'aten::cat'"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM node_outputs o JOIN op_args a ON"
                               " a.tensor = o.tensor AND a.role = 1 WHERE o.node = 77"),
                     1);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_continued_late),
        cmocka_unit_test(test_text_truncated),
        cmocka_unit_test(test_stack_continued_late),
        cmocka_unit_test(test_versions_edges_continued_late),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
