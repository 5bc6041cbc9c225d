/*
 * Out-of-memory paths: every allocation of opening a recorder, writing
 * events, closing, opening a trace and diagnosing it is made to fail in
 * turn, and the operation must fail cleanly -- no crash, no leak (run under
 * ASan, LeakSanitizer checks at exit), a message that says what failed, and
 * a recorder that failed stays failed (every later call returns an error,
 * nothing aborts).
 *
 * The countdown: SQLite's allocations go through SQLITE_CONFIG_MALLOC
 * wrappers around its default methods; the libraries' own malloc, calloc,
 * realloc and strdup go through the same countdown when the test is linked
 * with -Wl,--wrap=... (tests/CMakeLists.txt does that where the linker
 * supports it; without it only SQLite's allocations are counted). For
 * N = 1, 2, ... the Nth allocation from the start of the operation fails
 * (once: later ones succeed, so a handle that "recovers" by itself is
 * caught), until N passes the operation's last allocation.
 *
 * When an operation succeeds although one of its allocations failed (SQLite
 * treats some as benign), its result must still be the right one: the
 * findings, the diagnose command's output, byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include <gradtrace/recorder.h>

#include "cmd.h"
#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>

/* ---- the countdown ------------------------------------------------------ */

/* Which allocations the countdown counts and fails: the libraries' own,
 * SQLite's, or every SQLite allocation made while the libraries read a
 * value as text (sqlite3_column_text: converting a number to text
 * allocates; SQLite then gives NULL as for an SQL NULL), counted by call. */
enum { OWN, SQLITE, TEXT };

/* Allocator hooks take no user pointer: the countdown is the one global of
 * this program. */
static struct {
    int armed;    /* counting */
    int cls;      /* the class whose allocations count: OWN or SQLITE */
    long left;    /* allocations of that class until the failing one */
    int fired;    /* the failing one happened */
    long counted; /* allocations of that class seen while armed */
    int wrapped;  /* the libraries' malloc reached __wrap_malloc at least once */
    int in_text;  /* inside the failing sqlite3_column_text call */
} oom;

static sqlite3_mem_methods sqlite_default;

static void arm(int cls, long n)
{
    oom.cls = cls;
    oom.left = n;
    oom.fired = 0;
    oom.counted = 0;
    oom.armed = 1;
}

/* Stop counting; returns 1 if the failing allocation happened. */
static int disarm(void)
{
    oom.armed = 0;
    return oom.fired;
}

static int fail_now(int cls)
{
    if (!oom.armed || cls != oom.cls)
        return 0;
    oom.counted++;
    if (oom.fired || --oom.left > 0)
        return 0;
    oom.fired = 1;
    return 1;
}

/* The values of N to try for a class: every one for the libraries' own
 * allocations (a few per operation); for SQLite's (thousands: opening a
 * trace parses its schema) every GT_OOM_STRIDE-th, default 1 + total/200,
 * so the unit test stays short under ASan; GT_OOM_STRIDE=1 tries them all. */
static long stride(int cls, long total)
{
    if (cls != SQLITE)
        return 1;
    const char *e = getenv("GT_OOM_STRIDE");
    long s = e && atol(e) > 0 ? atol(e) : 1 + total / 200;
    return s;
}

static void *oom_malloc(int n)
{
    return oom.in_text || fail_now(SQLITE) ? NULL : sqlite_default.xMalloc(n);
}

static void *oom_realloc(void *p, int n)
{
    return oom.in_text || fail_now(SQLITE) ? NULL : sqlite_default.xRealloc(p, n);
}

/* The libraries' reads of a value as text (-Wl,--wrap=sqlite3_column_text):
 * in the failing one every SQLite allocation fails. */
const unsigned char *__real_sqlite3_column_text(sqlite3_stmt *st, int i);
const unsigned char *__wrap_sqlite3_column_text(sqlite3_stmt *st, int i);

const unsigned char *__wrap_sqlite3_column_text(sqlite3_stmt *st, int i)
{
    oom.in_text = fail_now(TEXT);
    const unsigned char *v = __real_sqlite3_column_text(st, i);
    oom.in_text = 0;
    return v;
}

static void oom_free(void *p)
{
    sqlite_default.xFree(p);
}
static int oom_size(void *p)
{
    return sqlite_default.xSize(p);
}
static int oom_roundup(int n)
{
    return sqlite_default.xRoundup(n);
}
static int oom_init(void *a)
{
    return sqlite_default.xInit(a);
}
static void oom_shutdown(void *a)
{
    sqlite_default.xShutdown(a);
}

/* The libraries' own allocations (-Wl,--wrap=malloc etc.). */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

#define WRAP_FAIL(ret)                                                                   \
    do {                                                                                 \
        oom.wrapped = 1;                                                                 \
        if (fail_now(OWN)) {                                                             \
            errno = ENOMEM;                                                              \
            return ret;                                                                  \
        }                                                                                \
    } while (0)

void *__wrap_malloc(size_t n)
{
    WRAP_FAIL(NULL);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    WRAP_FAIL(NULL);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    WRAP_FAIL(NULL);
    return __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    WRAP_FAIL(NULL);
    return __real_strdup(s);
}

/* The diagnose command, when it succeeds under a countdown, must print the
 * same bytes as without (every N of every class passes since each read
 * tells "no row" from an error: GT_OOM_STRIDE=1 tries them all).
 * GT_OOM_STRICT=0 loosens it to the JSON output's shape, to look past one
 * such failure at others. gt_diagnose's findings, suggestion text
 * included, are compared always. */
static int strict(void)
{
    const char *e = getenv("GT_OOM_STRICT");
    return !e || strcmp(e, "0");
}

/* ---- a trace to write and read ------------------------------------------ */

static char dir[64];

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s.db", dir, name);
}

/* Event calls made while a countdown runs: after the first error every
 * call must fail too, and the handle must say it failed. */
typedef struct writer {
    gt_recorder *r;
    int first; /* the first error, 0 if none */
    int calls;
    int more; /* backward calls after the first: a flight recorder's window
               * is cut when it is written (keepcut.c) */
} writer;

static void step(writer *w, int rc, const char *what)
{
    w->calls++;
    if (w->first) {
        if (rc == 0)
            fail_msg("%s returned 0 after an earlier error (%s)", what,
                     gt_strerror(w->first));
        return;
    }
    if (rc == 0)
        return;
    w->first = rc;
    if (!gt_recorder_failed(w->r))
        fail_msg("%s failed (%s: %s) but the handle does not say it failed", what,
                 gt_strerror(rc), gt_recorder_errmsg(w->r));
    const char *msg = gt_recorder_errmsg(w->r);
    if (!msg || !*msg)
        fail_msg("%s failed (%s) with no message", what, gt_strerror(rc));
}

#define CALL(w, expr) step((w), (expr), #expr)

/* The class_weights scenario of test_diagnose (a weight saved by
 * NllLossBackward0, changed in place three times through views, then a
 * failed backward), written with every kind of event the recorder takes. */
static void write_events(writer *w)
{
    gt_recorder *r = w->r;
    gt_id dtype = 0, cpu = 0, thread = 0, frame = 0, stack = 0, s = 0, bw = 0;
    int64_t shape[1] = {3}, strides[1] = {1}, seq = 0;
    gt_run_info run = {.engine = "pytorch",
                       .engine_version = "2.13.0",
                       .argv_json = "[\"train.py\", \"--epochs\", \"1\"]",
                       .cwd = "/src",
                       .pid = 42,
                       .rank = -1};
    CALL(w, gt_run_set(r, &run));
    CALL(w, gt_intern_string(r, "float32", 7, &dtype));
    CALL(w, gt_intern_string(r, "cpu", 3, &cpu));
    CALL(w, gt_intern_thread(r, 1, "main", &thread));
    CALL(w,
         gt_intern_frame(r, "/src/train.py", 37, "<module>",
                         "    loss = F.nll_loss(log_probs, target, weight=class_weights)",
                         &frame));
    CALL(w, gt_intern_stack(r, 0, frame, frame, &stack));
    CALL(w, gt_storage(r, 1, 12, cpu));
    CALL(w, gt_storage(r, 2, 64, cpu));
    gt_tensor_info weights = {.id = 100,
                              .storage = 1,
                              .dtype = dtype,
                              .ndim = 1,
                              .shape = shape,
                              .strides = strides,
                              .is_leaf = 1};
    CALL(w, gt_tensor(r, &weights));
    CALL(w, gt_name(r, gt_recorder_seq(r), 100, "class_weights"));
    gt_tensor_info logp = weights;
    logp.id = 101;
    logp.storage = 2;
    logp.requires_grad = 1;
    logp.is_leaf = 0;
    CALL(w, gt_tensor(r, &logp));
    CALL(w, gt_intern_string(r, "aten::nll_loss_forward", 22, &s));
    gt_op_info op = {.name = s,
                     .phase = GT_PHASE_FORWARD,
                     .grad_mode = 1,
                     .thread = thread,
                     .stack = stack};
    CALL(w, gt_op(r, &op, &seq));
    CALL(w, gt_op_arg(r, seq, GT_ROLE_INPUT, 0, 101, 0));
    CALL(w, gt_op_arg(r, seq, GT_ROLE_INPUT, 1, 100, 0));
    CALL(w, gt_intern_string(r, "NllLossBackward0", 16, &s));
    gt_node_info node = {
        .id = 1, .name = s, .op = seq, .sequence_nr = 5, .thread = thread};
    CALL(w, gt_node(r, &node));
    node.id = 2;
    node.sequence_nr = 4;
    CALL(w, gt_node(r, &node));
    CALL(w, gt_edge(r, 1, 0, 2, 0));
    CALL(w, gt_node_output(r, 1, 0, 101));
    CALL(w, gt_intern_string(r, "weight", 6, &s));
    CALL(w, gt_saved_tensor(r, 1, s, 100, 0, 0, 12, &seq));
    for (int i = 0; i < 3; i++) {
        gt_tensor_info view = weights;
        view.id = 110 + i;
        view.shape = shape;
        view.storage_offset = i;
        view.is_leaf = 0;
        view.alias_of = 100;
        view.shares_version = 1;
        view.version_counter = 100;
        CALL(w, gt_tensor(r, &view));
        char code[64];
        snprintf(code, sizeof code, "        class_weights[%d] *= 1.5", i);
        CALL(w, gt_intern_frame(r, "/src/train.py", 43 + i, "<module>", code, &frame));
        CALL(w, gt_intern_stack(r, 0, frame, frame, &stack));
        CALL(w, gt_intern_string(r, "aten::mul_.Tensor", 17, &s));
        op.name = s;
        op.stack = stack;
        CALL(w, gt_op(r, &op, &seq));
        CALL(w, gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, view.id, i));
        CALL(w, gt_version_bump(r, seq, view.id, i + 1, 0, NULL));
    }
    CALL(w, gt_intern_string(r, "Tensor.backward", 15, &s));
    gt_backward_info bi = {.api = s, .thread = thread, .stack = stack};
    CALL(w, gt_backward_begin(r, &bi, &bw));
    CALL(w, gt_backward_root(r, bw, 0, 0, 1));
    CALL(w, gt_node_exec(r, bw, 1));
    CALL(w, gt_error(r, "RuntimeError",
                     "one of the variables needed for gradient computation has been "
                     "modified by an inplace operation: [torch.FloatTensor [3]] is at "
                     "version 3; expected version 0 instead.",
                     stack, bw, NULL));
    CALL(w, gt_backward_end(r, bw, 0));
    for (int i = 0; i < w->more; i++) {
        /* a new tensor, an op that reads it and the old weights, a node that
         * saves it: the cut keeps what the newer calls name */
        gt_tensor_info t = logp;
        t.id = 200 + i;
        CALL(w, gt_tensor(r, &t));
        CALL(w, gt_intern_string(r, "aten::mul.Tensor", 16, &s));
        op.name = s;
        CALL(w, gt_op(r, &op, &seq));
        CALL(w, gt_op_arg(r, seq, GT_ROLE_INPUT, 0, t.id, 0));
        CALL(w, gt_op_arg(r, seq, GT_ROLE_INPUT, 1, 100, 3));
        CALL(w, gt_intern_string(r, "MulBackward0", 12, &s));
        gt_node_info mul = {.id = 10 + i, .name = s, .op = seq, .thread = thread};
        CALL(w, gt_node(r, &mul));
        CALL(w, gt_edge(r, mul.id, 0, 2, 0));
        CALL(w, gt_intern_string(r, "other", 5, &s));
        CALL(w, gt_saved_tensor(r, mul.id, s, 100, 3, 0, 12, &seq));
        CALL(w, gt_name(r, gt_recorder_seq(r), t.id, "scaled"));
        CALL(w, gt_backward_begin(r, &bi, &bw));
        CALL(w, gt_backward_root(r, bw, 0, t.id, mul.id));
        CALL(w, gt_node_exec(r, bw, mul.id));
        CALL(w, gt_backward_end(r, bw, 1));
    }
    CALL(w, gt_recorder_flush(r));
}

/* A complete trace at `path`, written without a countdown. */
static void write_trace(const char *path)
{
    gt_recorder_options o = {.overwrite = 1};
    char err[256];
    writer w = {0};
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof err, &w.r), 0);
    write_events(&w);
    assert_int_equal(w.first, 0);
    assert_int_equal(gt_run_end(w.r, GT_RUN_EXCEPTION, 1, 0), 0);
    assert_int_equal(gt_recorder_close(w.r), 0);
}

/* Reading whatever a failed recording left must not crash or leak either:
 * the trace opens (with its committed batches) or is refused with a message. */
static void read_back(const char *path)
{
    gt_trace *t = NULL;
    gt_findings *f = NULL;
    if (access(path, F_OK) != 0)
        return;
    if (gt_trace_open(path, &t) != 0) {
        assert_true(gt_trace_errmsg(t)[0] != '\0');
        gt_trace_close(t);
        return;
    }
    if (gt_diagnose(t, NULL, &f) != 0)
        assert_true(gt_trace_errmsg(t)[0] != '\0');
    gt_findings_free(f);
    gt_trace_close(t);
}

static const char *cls_name(int cls)
{
    return cls == OWN ? "own" : cls == SQLITE ? "SQLite's" : "text-read";
}

/* Run `once` with the Nth allocation of each class failing, for the values
 * of N stride() picks, up to the number of allocations the operation makes
 * when none fails (counted by a first run with none failing). */
static void drive(const char *what, void (*once)(void *ctx, int cls, long n), void *ctx)
{
    /* GT_OOM_FROM / GT_OOM_TO: only the values of N in that range (to
     * reproduce one failure: GT_OOM_STRIDE=1 GT_OOM_FROM=N GT_OOM_TO=N) */
    const char *from_e = getenv("GT_OOM_FROM"), *to_e = getenv("GT_OOM_TO");
    long from = from_e && atol(from_e) > 0 ? atol(from_e) : 1;
    long to = to_e && atol(to_e) > 0 ? atol(to_e) : LONG_MAX;
    for (int cls = OWN; cls <= TEXT; cls++) {
        once(ctx, cls, LONG_MAX);
        long total = oom.counted, s = stride(cls, total), tried = 0;
        for (long n = from; n <= total && n <= to; n += s, tried++)
            once(ctx, cls, n);
        printf("  %s: %ld %s allocations, %ld of them made to fail in turn%s\n", what,
               total, cls_name(cls), tried,
               cls == OWN && !oom.wrapped ? " (not linked with --wrap: none counted)"
                                          : "");
    }
}

/* ---- the operations ------------------------------------------------------ */

/* ctx: NULL, or the keep_last (flight recorder) to record with */
static void open_once(void *ctx, int cls, long n)
{
    char path[128], err[256] = "";
    path_of(path, sizeof path, "open");
    gt_recorder_options o = {.overwrite = 1, .keep_last = ctx ? *(unsigned *)ctx : 0};
    gt_recorder *r = NULL;
    unlink(path);
    arm(cls, n);
    int rc = gt_recorder_open(path, &o, err, sizeof err, &r);
    int fired = disarm();
    if (rc != 0) {
        if (!fired)
            fail_msg("open failed without an injected failure: %s", err);
        if (r != NULL)
            fail_msg("%s N=%ld: open failed but wrote *out", cls_name(cls), n);
        if (!err[0])
            fail_msg("%s N=%ld: open failed (%s) with no message", cls_name(cls), n,
                     gt_strerror(rc));
        return;
    }
    assert_non_null(r);
    assert_int_equal(gt_recorder_close(r), 0);
}

static void test_recorder_open(void **state)
{
    (void)state;
    drive("gt_recorder_open", open_once, NULL);
    unsigned keep = 1;
    drive("gt_recorder_open (keep_last)", open_once, &keep);
}

/* ctx: NULL, or the keep_last (flight recorder) to record with */
static void write_once(void *ctx, int cls, long n)
{
    char path[128], err[256];
    path_of(path, sizeof path, "write");
    gt_recorder_options o = {.overwrite = 1, .keep_last = ctx ? *(unsigned *)ctx : 0};
    writer w = {.more = o.keep_last ? 2 : 0};
    unlink(path);
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof err, &w.r), 0);
    arm(cls, n);
    write_events(&w);
    int fired = disarm();
    long counted = oom.counted;
    if (w.first && !fired)
        fail_msg("an event failed without an injected failure: %s",
                 gt_recorder_errmsg(w.r));
    if (w.first) {
        /* still failed, and says so, once allocations succeed again */
        gt_id s;
        if (gt_intern_string(w.r, "x", 1, &s) == 0 || !gt_recorder_failed(w.r))
            fail_msg("%s N=%ld: the handle recovered after %s", cls_name(cls), n,
                     gt_strerror(w.first));
    }
    int end = gt_run_end(w.r, GT_RUN_EXCEPTION, 1, 0);
    err[0] = '\0';
    int rc = gt_recorder_close_msg(w.r, err, sizeof err);
    if (w.first) {
        if (end == 0)
            fail_msg("%s N=%ld: gt_run_end returned 0 on a failed handle", cls_name(cls),
                     n);
        if (rc != w.first)
            fail_msg("%s N=%ld: close returned %d (%s), not the cause %d (%s)",
                     cls_name(cls), n, rc, gt_strerror(rc), w.first,
                     gt_strerror(w.first));
        if (!err[0])
            fail_msg("%s N=%ld: close gave no message", cls_name(cls), n);
    } else {
        assert_int_equal(end, 0);
        assert_int_equal(rc, 0);
    }
    read_back(path);
    oom.counted = counted;
}

static void test_recorder_write(void **state)
{
    (void)state;
    drive("writing events", write_once, NULL);
}

static void test_recorder_write_keep_last(void **state)
{
    (void)state;
    unsigned keep = 1;
    drive("writing events (keep_last)", write_once, &keep);
}

/* ctx: NULL, or the keep_last (flight recorder) to record with */
static void close_once(void *ctx, int cls, long n)
{
    char path[128], err[256];
    path_of(path, sizeof path, "close");
    gt_recorder_options o = {.overwrite = 1, .keep_last = ctx ? *(unsigned *)ctx : 0};
    writer w = {.more = o.keep_last ? 2 : 0};
    unlink(path);
    assert_int_equal(gt_recorder_open(path, &o, err, sizeof err, &w.r), 0);
    write_events(&w);
    assert_int_equal(w.first, 0);
    err[0] = '\0';
    arm(cls, n);
    int end = gt_run_end(w.r, GT_RUN_EXCEPTION, 1, 0);
    int rc = gt_recorder_close_msg(w.r, err, sizeof err);
    int fired = disarm();
    long counted = oom.counted;
    if ((end || rc) && !fired)
        fail_msg("close failed without an injected failure: %s", err);
    if (end && !rc)
        fail_msg("%s N=%ld: gt_run_end failed (%s) but close returned 0", cls_name(cls),
                 n, gt_strerror(end));
    if (rc && !err[0])
        fail_msg("%s N=%ld: close failed (%s) with no message", cls_name(cls), n,
                 gt_strerror(rc));
    read_back(path);
    oom.counted = counted;
}

static void test_recorder_close(void **state)
{
    (void)state;
    drive("gt_run_end + gt_recorder_close", close_once, NULL);
}

static void test_recorder_close_keep_last(void **state)
{
    (void)state;
    unsigned keep = 1;
    drive("gt_run_end + gt_recorder_close (keep_last)", close_once, &keep);
}

static void trace_open_once(void *ctx, int cls, long n)
{
    const char *path = ctx;
    gt_trace *t = NULL;
    arm(cls, n);
    int rc = gt_trace_open(path, &t);
    int fired = disarm();
    if (rc != 0) {
        /* *out: a handle holding only the message (NULL: out of memory) */
        char err[1024];
        snprintf(err, sizeof err, "%s", gt_trace_errmsg(t));
        gt_trace_close(t);
        if (!fired)
            fail_msg("open failed without an injected failure: %s", err);
        if (!err[0])
            fail_msg("%s N=%ld: open failed (%s) with no message", cls_name(cls), n,
                     gt_strerror(rc));
        return;
    }
    assert_int_equal(gt_trace_partial(t), 0);
    gt_trace_close(t);
}

static void test_trace_open(void **state)
{
    (void)state;
    char path[128];
    path_of(path, sizeof path, "read");
    write_trace(path);
    drive("gt_trace_open", trace_open_once, path);
}

/* The findings as one line, to compare a run under a countdown with one
 * without. */
static void describe(const gt_findings *f, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "%zu:", f->n);
    for (size_t i = 0; i < f->n && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, " %d/%lld/%lld/%zu/%d/%d/%s/%s",
                               f->v[i].kind, (long long)f->v[i].node,
                               (long long)f->v[i].tensor, f->v[i].n_mutations,
                               f->v[i].first_to_fail, f->v[i].matches_error,
                               f->v[i].suggestion ? f->v[i].suggestion : "-",
                               f->v[i].name ? f->v[i].name : "-");
}

typedef struct diag_ctx {
    gt_trace *t;
    char want[2048];
} diag_ctx;

static void diagnose_once(void *ctx, int cls, long n)
{
    diag_ctx *d = ctx;
    char got[2048];
    gt_findings *f = NULL;
    arm(cls, n);
    int rc = gt_diagnose(d->t, NULL, &f);
    int fired = disarm();
    const char *err = gt_trace_errmsg(d->t); /* cleared as gt_diagnose starts */
    if (rc != 0) {
        if (!fired)
            fail_msg("diagnose failed without an injected failure: %s", err);
        if (f != NULL)
            fail_msg("%s N=%ld: diagnose failed but wrote *out", cls_name(cls), n);
        if (!err[0])
            fail_msg("%s N=%ld: diagnose failed (%s) with no message", cls_name(cls), n,
                     gt_strerror(rc));
        return;
    }
    describe(f, got, sizeof got);
    gt_findings_free(f);
    if (strcmp(got, d->want))
        fail_msg("%s N=%ld: diagnose succeeded with other findings: %s, not %s",
                 cls_name(cls), n, got, d->want);
}

static void test_diagnose(void **state)
{
    (void)state;
    char path[128];
    diag_ctx d = {0};
    gt_findings *f = NULL;
    path_of(path, sizeof path, "diag");
    write_trace(path);
    assert_int_equal(gt_trace_open(path, &d.t), 0);
    assert_int_equal(gt_diagnose(d.t, NULL, &f), 0);
    assert_true(f->n > 0);
    describe(f, d.want, sizeof d.want);
    gt_findings_free(f);
    drive("gt_diagnose", diagnose_once, &d);
    gt_trace_close(d.t);
}

/* Run the command `fn` (gt_cmd_diagnose: `gradtrace diagnose ARGS`) with
 * stdout into `out` and stderr into `errf`; returns its exit status. */
static int run_cmd(int (*fn)(int, char **), int argc, const char *const *args,
                   const char *out, const char *errf)
{
    char *argv[8], store[8][256];
    for (int i = 0; i < argc; i++) {
        snprintf(store[i], sizeof store[i], "%s", args[i]);
        argv[i] = store[i];
    }
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int so = dup(STDOUT_FILENO), se = dup(STDERR_FILENO);
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, STDOUT_FILENO);
    dup2(fe, STDERR_FILENO);
    int st = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, STDOUT_FILENO);
    dup2(se, STDERR_FILENO);
    close(so);
    close(se);
    close(fo);
    close(fe);
    return st;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The command, text and JSON: under a countdown it exits 2 with one line
 * on stderr, or `ok` (diagnose: 1, findings) with exactly the output it
 * gives without. */
typedef struct cmd_ctx {
    int (*fn)(int, char **);
    const char *name;
    int ok;
    int argc;
    const char *const *args;
    char out[128], errf[128];
    char *want;
} cmd_ctx;

/* With GT_OOM_STRICT=0: the JSON output is whole -- as many lines as
 * without a countdown, and JSON that parses; the text output is not
 * compared. */
static int same_shape(const char *got, const cmd_ctx *c)
{
    if (c->fn != gt_cmd_diagnose || c->argc != 3)
        return 1; /* the text output: not compared */
    size_t lines_got = 0, lines_want = 0;
    for (const char *p = got; *p; p++)
        lines_got += *p == '\n';
    for (const char *p = c->want; *p; p++)
        lines_want += *p == '\n';
    if (lines_got != lines_want)
        return 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int ok =
        sqlite3_open(":memory:", &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT json_valid(?1)", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_text(st, 1, got, -1, SQLITE_STATIC) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

static void command_once(void *ctx, int cls, long n)
{
    cmd_ctx *c = ctx;
    arm(cls, n);
    int st = run_cmd(c->fn, c->argc, c->args, c->out, c->errf);
    int fired = disarm();
    long counted = oom.counted;
    char *got = slurp(c->out), *msg = slurp(c->errf);
    if (st == 2) {
        if (!fired)
            fail_msg("%s exited 2 without an injected failure: %s", c->name, msg);
        if (strncmp(msg, "gradtrace: ", 11) || !strchr(msg, '\n'))
            fail_msg("%s N=%ld: %s exited 2 without a 'gradtrace: ...' line: '%s'",
                     cls_name(cls), n, c->name, msg);
    } else if (st != c->ok || (strict() || cls == TEXT ? strcmp(got, c->want) != 0
                                                       : !same_shape(got, c))) {
        /* (a text read that failed must fail the command, never print
         * as a missing value: always compared byte for byte) */
        /* where they part: a line (or 160 bytes of JSON) of each */
        size_t at = 0, from;
        while (got[at] && got[at] == c->want[at])
            at++;
        for (from = at; from > 0 && got[from - 1] != '\n' && at - from < 80; from--)
            ;
        fail_msg("%s N=%ld: %s exited %d (stderr: '%s'), its output differs at byte "
                 "%zu:\n  got:  %.160s\n  want: %.160s",
                 cls_name(cls), n, c->name, st, msg, at, got + from, c->want + from);
    }
    free(got);
    free(msg);
    oom.counted = counted;
}

static void command(const char *mode)
{
    char path[128], what[64];
    cmd_ctx c;
    path_of(path, sizeof path, "cmd");
    path_of(c.out, sizeof c.out, "cmd-out");
    path_of(c.errf, sizeof c.errf, "cmd-err");
    write_trace(path);
    /* each mode: the command, its exit status without a countdown, its
     * arguments */
    const struct {
        const char *mode;
        int (*fn)(int, char **);
        int ok, argc;
        const char *args[4];
    } modes[] = {
        {"text", gt_cmd_diagnose, 1, 4, {"diagnose", "--color", "never", path}},
        {"json", gt_cmd_diagnose, 1, 3, {"diagnose", "--json", path}},
        {"info", gt_cmd_info, 0, 3, {"info", "--all", path}},
        {"memory", gt_cmd_memory, 0, 3, {"memory", "--json", path}},
    };
    size_t m = 0;
    while (strcmp(modes[m].mode, mode))
        m++;
    c.fn = modes[m].fn;
    c.name = modes[m].args[0];
    c.ok = modes[m].ok;
    c.argc = modes[m].argc;
    c.args = modes[m].args;
    assert_int_equal(run_cmd(c.fn, c.argc, c.args, c.out, c.errf), c.ok);
    c.want = slurp(c.out);
    snprintf(what, sizeof what, "gradtrace %s (%s)", c.name, mode);
    drive(what, command_once, &c);
    free(c.want);
    unlink(c.out);
    unlink(c.errf);
}

static void test_diagnose_command_text(void **state)
{
    (void)state;
    command("text");
}

static void test_diagnose_command_json(void **state)
{
    (void)state;
    command("json");
}

/* `gradtrace info` reads the trace's texts (version, engine, call statuses,
 * error messages): a conversion that ran out of memory fails it, never
 * prints as an empty value. */
static void test_info_command(void **state)
{
    (void)state;
    command("info");
}

/* `gradtrace memory --json`: module paths, breakdowns and the document
 * built under a countdown exit 2 with one line, or print it whole. */
static void test_memory_command(void **state)
{
    (void)state;
    command("memory");
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gt_test_oom.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"open", "write", "close",   "read",
                           "diag", "cmd",   "cmd-out", "cmd-err"};
    char path[160];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
        for (size_t k = 0; k < 4; k++) {
            snprintf(path, sizeof path, "%s/%s.db%s", dir, names[i], suffix[k]);
            unlink(path);
        }
    }
    rmdir(dir);
    return 0;
}

int main(void)
{
    /* before SQLite initialises: its allocations go through the countdown */
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &sqlite_default) != SQLITE_OK)
        return 1;
    sqlite3_mem_methods m = sqlite_default;
    m.xMalloc = oom_malloc;
    m.xRealloc = oom_realloc;
    m.xFree = oom_free;
    m.xSize = oom_size;
    m.xRoundup = oom_roundup;
    m.xInit = oom_init;
    m.xShutdown = oom_shutdown;
    if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorder_open),
        cmocka_unit_test(test_recorder_write),
        cmocka_unit_test(test_recorder_close),
        cmocka_unit_test(test_recorder_write_keep_last),
        cmocka_unit_test(test_recorder_close_keep_last),
        cmocka_unit_test(test_trace_open),
        cmocka_unit_test(test_diagnose),
        cmocka_unit_test(test_diagnose_command_text),
        cmocka_unit_test(test_diagnose_command_json),
        cmocka_unit_test(test_info_command),
        cmocka_unit_test(test_memory_command),
    };
    /* GT_OOM_TEST=PATTERN: only the tests it names (cmocka's filter) */
    if (getenv("GT_OOM_TEST"))
        cmocka_set_test_filter(getenv("GT_OOM_TEST"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
