/*
 * Tests for the trace views (schema/views.sql), the table printer
 * (inspector/table_out.c), `gradtrace sql` (cli/cmd_sql.c) and the
 * cookbook of schema/SCHEMA.md, on traces written through the recorder API.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>

#include <gradtrace/format.h>

#define GT_XSTR(x) #x
#define GT_STR(x)  GT_XSTR(x) /* a macro's value as a string literal */

#include "cmd.h"
#include <gradtrace/diagnose.h>
#include "strbuf.h"
#include <gradtrace/table_out.h>
#include <gradtrace/trace.h>
#include "sqltrace.h"

typedef struct fixture {
    char path[64];
    seed_ids ids;
    sqlite3 *db;
} fixture;

static int seed_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->path, sizeof f->path, "/tmp/gt_test_sql_%d.db", (int)getpid());
    build_seed(f->path, &f->ids, 1, NULL);
    assert_int_equal(sqlite3_open_v2(f->path, &f->db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    *state = f;
    return 0;
}

static int seed_teardown(void **state)
{
    fixture *f = *state;
    sqlite3_close(f->db);
    unlink(f->path);
    free(f);
    return 0;
}

/* The rows of `sql` on db as text: columns joined by '|', rows ended by
 * '\n', NULL as "NULL". */
static char *rows_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    s[0] = '\0';
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("prepare %s: %s", sql, sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const char *v = (const char *)sqlite3_column_text(st, i);
            size_t need = len + (v ? strlen(v) : 4) + 2;
            while (need + 1 > cap) {
                cap *= 2;
                s = realloc(s, cap);
                assert_non_null(s);
            }
            len += (size_t)sprintf(s + len, "%s%s", i ? "|" : "", v ? v : "NULL");
        }
        s[len++] = '\n';
        s[len] = '\0';
    }
    assert_int_equal(sqlite3_finalize(st), SQLITE_OK);
    return s;
}

static void assert_rows(sqlite3 *db, const char *sql, const char *want)
{
    char *got = rows_of(db, sql);
    if (strcmp(got, want) != 0)
        fail_msg("%s\n--- got:\n%s--- want:\n%s", sql, got, want);
    free(got);
}

static int64_t int_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("prepare %s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The invalidations view and gt_diagnose must name the same saved tensors
 * with the same mutations: compare "backward|saved_seq|node|tensor|saved
 * version|version at backward|bump seq|op seq|version after" lines, sorted.
 * Returns the number of lines. */
static int agrees_with_diagnose(const char *path)
{
    gt_trace *t;
    gt_findings *fs;
    assert_int_equal(gt_trace_open(path, &t), GT_OK);
    assert_int_equal(gt_trace_use_views(t), GT_OK);
    assert_int_equal(gt_diagnose(t, NULL, &fs), GT_OK);

    sqlite3 *mem;
    assert_int_equal(sqlite3_open(":memory:", &mem), SQLITE_OK);
    assert_int_equal(sqlite3_exec(mem, "CREATE TABLE d (line TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_stmt *ins;
    assert_int_equal(sqlite3_prepare_v2(mem, "INSERT INTO d VALUES (?1)", -1, &ins, NULL),
                     SQLITE_OK);
    int n = 0;
    for (size_t i = 0; i < fs->n; i++) {
        const gt_finding *f = &fs->v[i];
        if (f->kind != GT_FINDING_INPLACE_INVALIDATED_SAVED)
            continue;
        for (size_t k = 0; k < f->n_mutations || (k == 0 && f->n_mutations == 0); k++) {
            char line[256];
            const gt_mutation *m = f->n_mutations ? &f->mutations[k] : NULL;
            snprintf(line, sizeof line, "%lld|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%lld",
                     (long long)f->backward, (long long)f->saved_seq, (long long)f->node,
                     (long long)f->tensor, (long long)f->saved_version,
                     (long long)f->version_at_backward, m ? (long long)m->bump_seq : 0,
                     m ? (long long)m->seq : 0, m ? (long long)m->version_after : 0);
            sqlite3_bind_text(ins, 1, line, -1, SQLITE_TRANSIENT);
            assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
            sqlite3_reset(ins);
            n++;
        }
    }
    sqlite3_finalize(ins);
    char *want = rows_of(mem, "SELECT line FROM d ORDER BY line");
    char *got =
        rows_of(gt_trace_db(t),
                "SELECT backward || '|' || saved_seq || '|' || node || '|' || "
                "tensor || '|' || saved_version || '|' || version_at_backward || "
                "'|' || coalesce(mutation_seq, 0) || '|' || coalesce(op_seq, 0) || "
                "'|' || coalesce(version_after, 0) AS line "
                "FROM invalidations ORDER BY line");
    if (strcmp(got, want) != 0)
        fail_msg("%s: invalidations view:\n%s--- gt_diagnose:\n%s", path, got, want);
    free(got);
    free(want);
    sqlite3_close(mem);
    gt_findings_free(fs);
    gt_trace_close(t);
    return n;
}

/* ---- views on the seed trace ---------------------------------------- */

static void test_views_exist(void **state)
{
    fixture *f = *state;
    assert_rows(
        f->db, "SELECT name FROM sqlite_schema WHERE type = 'view' ORDER BY name",
        "backward_log\nbackward_reach\nerror_log\nevents\ngraph_edges\n"
        "invalidations\nlocations\nmutations\nop_log\nsaved\nsaved_bytes\nsaved_memory\n"
        "stack_frames\n"
        "tensor_history\ntensor_info\nvariables\nwrites\n");
    /* v3's writes: the seed's six in-place writes, each with its bump */
    assert_rows(f->db,
                "SELECT op, bumped, count(*), min(version_after), max(version_after) "
                "FROM writes GROUP BY 1, 2 ORDER BY 1",
                "aten::copy_|1|3|2|6\naten::mul_.Tensor|1|3|1|5\n");
    assert_rows(f->db, "SELECT DISTINCT line, names FROM writes", "44|class_weights\n");
}

static void test_op_log(void **state)
{
    fixture *f = *state;
    assert_int_equal(int_of(f->db, "SELECT count(*) FROM op_log"), 11);
    assert_rows(
        f->db,
        "SELECT seq, op, phase, grad_mode, file, line, function, code FROM op_log "
        "WHERE seq <= 7 ORDER BY seq",
        "3|aten::_log_softmax|forward|1|examples/seed.py|37|<module>|"
        "log_probs = F.log_softmax(model(x), dim=1)\n"
        "7|aten::nll_loss_forward|forward|1|examples/seed.py|38|<module>|"
        "loss = F.nll_loss(log_probs, target, weight=class_weights)\n");
    assert_rows(f->db,
                "SELECT op, count(*) FROM op_log WHERE line = 44 GROUP BY op ORDER BY op",
                "aten::copy_|3\naten::mul_.Tensor|3\naten::select.int|3\n");
}

static void test_mutations(void **state)
{
    fixture *f = *state;
    assert_rows(
        f->db,
        "SELECT seq, op_seq, op, tensor, storage, version_counter, version_before, "
        "version_after, observed, line, names FROM mutations ORDER BY seq",
        "16|15|aten::mul_.Tensor|5|1|1|0|1|0|44|class_weights\n"
        "18|17|aten::copy_|5|1|1|1|2|0|44|class_weights\n"
        "22|21|aten::mul_.Tensor|6|1|1|2|3|0|44|class_weights\n"
        "24|23|aten::copy_|6|1|1|3|4|0|44|class_weights\n"
        "28|27|aten::mul_.Tensor|7|1|1|4|5|0|44|class_weights\n"
        "30|29|aten::copy_|7|1|1|5|6|0|44|class_weights\n");
    for (int i = 0; i < 6; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT op_seq FROM mutations WHERE seq = %lld",
                 (long long)f->ids.bump_seq[i]);
        assert_int_equal(int_of(f->db, sql), f->ids.bump_op[i]);
    }
}

static void test_saved(void **state)
{
    fixture *f = *state;
    assert_rows(f->db,
                "SELECT seq, node, node_name, slot, tensor, dtype, shape, nbytes, "
                "saved_version, is_output, storage, version_counter, op, names, line "
                "FROM saved ORDER BY seq",
                "6|1|LogSoftmaxBackward0|result|2|float32|[16,3]|192|0|1|2|2|"
                "aten::_log_softmax|log_probs|37\n"
                "10|2|NllLossBackward0|self|2|float32|[16,3]|192|0|0|2|2|"
                "aten::nll_loss_forward|log_probs|38\n"
                "11|2|NllLossBackward0|target|3|int64|[16]|128|0|0|3|3|"
                "aten::nll_loss_forward|target|38\n"
                "12|2|NllLossBackward0|weight|1|float32|[3]|12|0|0|1|1|"
                "aten::nll_loss_forward|class_weights|38\n");
    assert_int_equal(int_of(f->db, "SELECT seq FROM saved WHERE slot = 'weight'"),
                     f->ids.weight_saved_seq);
}

static void test_invalidations(void **state)
{
    fixture *f = *state;
    assert_rows(
        f->db,
        "SELECT backward, backward_line, node, node_name, saved_seq, slot, tensor, "
        "names, saved_version, version_at_backward, saved_line, mutation_seq, op, "
        "mutated_tensor, version_after, file, line, code "
        "FROM invalidations ORDER BY mutation_seq",
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|16|"
        "aten::mul_.Tensor|5|1|examples/seed.py|44|class_weights[i] *= 1.0 + share\n"
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|18|"
        "aten::copy_|5|2|examples/seed.py|44|class_weights[i] *= 1.0 + share\n"
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|22|"
        "aten::mul_.Tensor|6|3|examples/seed.py|44|class_weights[i] *= 1.0 + share\n"
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|24|"
        "aten::copy_|6|4|examples/seed.py|44|class_weights[i] *= 1.0 + share\n"
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|28|"
        "aten::mul_.Tensor|7|5|examples/seed.py|44|class_weights[i] *= 1.0 + share\n"
        "1|47|2|NllLossBackward0|12|weight|1|class_weights|0|6|38|30|"
        "aten::copy_|7|6|examples/seed.py|44|class_weights[i] *= 1.0 + share\n");
    assert_int_equal(agrees_with_diagnose(f->path), 6);
}

static void test_tensor_history(void **state)
{
    fixture *f = *state;
    /* class_weights itself: created, named, read twice... */
    assert_rows(f->db,
                "SELECT seq, kind, op, version, detail, line FROM tensor_history "
                "WHERE tensor = 1 ORDER BY seq, kind",
                "1|created|NULL|NULL|NULL|NULL\n"
                "1|name|NULL|NULL|class_weights|NULL\n"
                "7|read|aten::nll_loss_forward|0|NULL|38\n"
                "12|saved|NllLossBackward0|0|weight|38\n"
                "13|read|aten::select.int|0|NULL|44\n"
                "19|read|aten::select.int|2|NULL|44\n"
                "25|read|aten::select.int|4|NULL|44\n");
    /* ... and its first view: created by select, written twice, bumped twice */
    assert_rows(f->db,
                "SELECT seq, kind, op, version FROM tensor_history WHERE tensor = 5 "
                "ORDER BY seq, kind",
                "14|created|aten::select.int|NULL\n15|written|aten::mul_.Tensor|0\n"
                "16|bump|aten::mul_.Tensor|1\n17|written|aten::copy_|1\n"
                "18|bump|aten::copy_|2\n");
    /* loss is the root of backward 1 */
    assert_rows(f->db,
                "SELECT seq, kind, op, detail, line FROM tensor_history WHERE tensor = 4 "
                "AND kind = 'root'",
                "31|root|Tensor.backward|backward 1|47\n");
    assert_int_equal(int_of(f->db, "SELECT count(*) FROM tensor_history "
                                   "WHERE version_counter = 1"),
                     22);
}

static void test_other_views(void **state)
{
    fixture *f = *state;
    assert_rows(f->db, "SELECT * FROM saved_memory ORDER BY node_name",
                "LogSoftmaxBackward0|1|1|1|192|192\nNllLossBackward0|1|3|3|332|192\n");
    assert_rows(
        f->db,
        "SELECT id, seq, end_seq, api, status, retain_graph, create_graph, roots, "
        "inputs, nodes_run, error_type, substr(error, 1, 20), file, line, code "
        "FROM backward_log",
        "1|31|33|Tensor.backward|error|0|0|1|0|0|RuntimeError|"
        "one of the variables|examples/seed.py|47|loss.backward()\n");
    assert_rows(f->db,
                "SELECT seq, type, backward, file, line, function, code, "
                "instr(message, 'version 6; expected version 0') > 0 FROM error_log",
                "32|RuntimeError|1|examples/seed.py|47|<module>|loss.backward()|1\n");
    assert_rows(f->db,
                "SELECT depth, file, line, function, code, is_user FROM stack_frames "
                "WHERE stack = (SELECT stack FROM error_log) ORDER BY depth",
                "0|torch/_tensor.py|626|backward|torch.autograd.backward(|0\n"
                "1|examples/seed.py|47|<module>|loss.backward()|1\n");
    assert_rows(f->db,
                "SELECT name, tensor, version_counter, storage, dtype, shape "
                "FROM variables ORDER BY tensor",
                "class_weights|1|1|1|float32|[3]\nlog_probs|2|2|2|float32|[16,3]\n"
                "target|3|3|3|int64|[16]\nloss|4|4|4|float32|[]\n");
    assert_rows(f->db,
                "SELECT tensor, dtype, shape, storage, device, storage_nbytes, is_leaf, "
                "alias_of, shares_version, version_counter, created_by_op, names, line "
                "FROM tensor_info WHERE tensor IN (1, 6) ORDER BY tensor",
                "1|float32|[3]|1|cpu|12|1|NULL|0|1|NULL|class_weights|NULL\n"
                "6|float32|[]|1|cpu|12|0|1|1|1|aten::select.int|class_weights|44\n");
    assert_rows(f->db, "SELECT * FROM graph_edges ORDER BY node, pos",
                "2|NllLossBackward0|0|1|LogSoftmaxBackward0|0\n"
                "2|NllLossBackward0|1|NULL|NULL|NULL\n");
    assert_rows(f->db, "SELECT * FROM backward_reach ORDER BY node",
                "1|1|LogSoftmaxBackward0|1\n1|2|NllLossBackward0|0\n");
    /* events: one row per seq, seqs 1..last without a hole */
    assert_int_equal(int_of(f->db, "SELECT count(*) FROM events"), f->ids.last_seq);
    assert_int_equal(int_of(f->db, "SELECT count(DISTINCT seq) FROM events"),
                     f->ids.last_seq);
    assert_int_equal(int_of(f->db, "SELECT max(seq) FROM events"), f->ids.last_seq);
    assert_rows(f->db, "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind",
                "backward|1\nbackward_end|1\nbump|6\nerror|1\nnode|2\nop|11\nsaved|4\n"
                "tensor|7\n");
    assert_rows(f->db,
                "SELECT seq, kind, what, line FROM events WHERE kind = 'backward_end'",
                "33|backward_end|error|47\n");
    assert_rows(f->db,
                "SELECT seq, kind, what, tensor, node, line FROM events "
                "WHERE seq IN (12, 31, 32) ORDER BY seq",
                "12|saved|NllLossBackward0.weight|1|2|38\n"
                "31|backward|Tensor.backward|NULL|NULL|47\n"
                "32|error|RuntimeError|NULL|NULL|47\n");
}

/* ---- invalidations: retain_graph, freed graphs, node executions ------- */

/* x (tensor 1, leaf) -> y = x.mul(2) saves x in MulBackward0 (node 1),
 * z = y.sum() (node 2, edge to node 1). Returns the recorder, still open. */
static void build_chain(tb *b, const char *path)
{
    tb_open(b, path);
    tb_run(b, "[\"chain.py\"]");
    gt_id cpu = tb_str(b, "cpu");
    assert_int_equal(gt_storage(b->r, 1, 16, cpu), GT_OK);
    assert_int_equal(gt_storage(b->r, 2, 16, cpu), GT_OK);
    assert_int_equal(gt_storage(b->r, 3, 4, cpu), GT_OK);
    tb_tensor(b, 1, 1, "float32", 1, 4, 0, 0, 0, 0);
    assert_int_equal(gt_name(b->r, 1, 1, "x"), GT_OK);
    int64_t op = tb_op(b, "aten::mul.Tensor", tb_user_stack(b, 10, "y = x.mul(2)"), 0);
    assert_int_equal(gt_op_arg(b->r, op, GT_ROLE_INPUT, 0, 1, 0), GT_OK);
    tb_tensor(b, 2, 2, "float32", 1, 4, 0, op, 0, 0);
    tb_node(b, 1, "MulBackward0", op, 1);
    tb_saved(b, 1, "self", 1, 0, 0, 16);
    op = tb_op(b, "aten::sum", tb_user_stack(b, 11, "z = y.sum()"), 0);
    tb_tensor(b, 3, 3, "float32", 0, 0, 0, op, 0, 0);
    tb_node(b, 2, "SumBackward0", op, 2);
    assert_int_equal(gt_edge(b->r, 2, 0, 1, 0), GT_OK);
}

/* x.add_(1) on line `line`: the counter of x goes to `version`. */
static void mutate_x(tb *b, int line, int64_t version)
{
    int64_t op = tb_op(b, "aten::add_.Tensor", tb_user_stack(b, line, "x.add_(1)"), 0);
    assert_int_equal(gt_op_arg(b->r, op, GT_ROLE_MUTATED, 0, 1, version - 1), GT_OK);
    tb_bump(b, op, 1, version);
}

static void backward_z(tb *b, int line, int retain, int ok, int execs)
{
    gt_id bw = tb_backward(b, tb_user_stack(b, line, "z.backward()"), retain);
    assert_int_equal(gt_backward_root(b->r, bw, 0, 3, 2), GT_OK);
    if (execs) {
        assert_int_equal(gt_node_exec(b->r, bw, 2), GT_OK);
        assert_int_equal(gt_node_exec(b->r, bw, 1), GT_OK);
    }
    assert_int_equal(gt_backward_end(b->r, bw, ok), GT_OK);
}

static void test_invalidations_retain_graph(void **state)
{
    (void)state;
    char path[64];
    tb b;
    sqlite3 *db;
    snprintf(path, sizeof path, "/tmp/gt_test_sql_retain_%d.db", (int)getpid());
    build_chain(&b, path);
    backward_z(&b, 12, 1, 1, 1); /* retain_graph=True: x still saved, at version 0 */
    mutate_x(&b, 13, 1);
    backward_z(&b, 14, 0, 0, 0); /* sees version 1: invalidated */
    assert_int_equal(gt_recorder_close(b.r), GT_OK);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_rows(db,
                "SELECT backward, backward_line, node_name, slot, names, saved_version, "
                "version_at_backward, op, line FROM invalidations",
                "2|14|MulBackward0|self|x|0|1|aten::add_.Tensor|13\n");
    sqlite3_close(db);
    assert_int_equal(agrees_with_diagnose(path), 1);
    unlink(path);
}

static void test_invalidations_freed_graph(void **state)
{
    (void)state;
    char path[64];
    tb b;
    sqlite3 *db;
    snprintf(path, sizeof path, "/tmp/gt_test_sql_freed_%d.db", (int)getpid());
    build_chain(&b, path);
    backward_z(&b, 12, 0, 1, 0); /* frees the graph's saved tensors */
    mutate_x(&b, 13, 1);
    backward_z(&b, 14, 0, 0, 0); /* "backward a second time", not in-place */
    assert_int_equal(gt_recorder_close(b.r), GT_OK);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(int_of(db, "SELECT count(*) FROM invalidations"), 0);
    /* but the mutation is there, and both calls reached MulBackward0 */
    assert_int_equal(int_of(db, "SELECT count(*) FROM mutations WHERE line = 13"), 1);
    assert_int_equal(int_of(db, "SELECT count(*) FROM backward_reach WHERE node = 1"), 2);
    sqlite3_close(db);
    assert_int_equal(agrees_with_diagnose(path), 0);
    unlink(path);
}

static void test_invalidations_after_node_ran(void **state)
{
    (void)state;
    char path[64];
    tb b;
    sqlite3 *db;
    snprintf(path, sizeof path, "/tmp/gt_test_sql_exec_%d.db", (int)getpid());
    build_chain(&b, path);
    /* A backward call during which x is changed (by a hook) after
     * MulBackward0 ran: the node had its value already, nothing is stale. */
    gt_id bw = tb_backward(&b, tb_user_stack(&b, 20, "z.backward()"), 1);
    assert_int_equal(gt_backward_root(b.r, bw, 0, 3, 2), GT_OK);
    assert_int_equal(gt_node_exec(b.r, bw, 2), GT_OK);
    assert_int_equal(gt_node_exec(b.r, bw, 1), GT_OK);
    mutate_x(&b, 21, 1);
    assert_int_equal(gt_backward_end(b.r, bw, 1), GT_OK);
    /* A second call (graph retained) during which x changes before
     * MulBackward0 runs: stale. */
    bw = tb_backward(&b, tb_user_stack(&b, 22, "z.backward()"), 1);
    assert_int_equal(gt_backward_root(b.r, bw, 0, 3, 2), GT_OK);
    assert_int_equal(gt_node_exec(b.r, bw, 2), GT_OK);
    mutate_x(&b, 23, 2);
    assert_int_equal(gt_node_exec(b.r, bw, 1), GT_OK);
    assert_int_equal(gt_backward_end(b.r, bw, 0), GT_OK);
    assert_int_equal(gt_recorder_close(b.r), GT_OK);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_rows(db,
                "SELECT backward, node_name, saved_version, version_at_backward, "
                "version_after, line FROM invalidations ORDER BY mutation_seq",
                "2|MulBackward0|0|2|1|21\n2|MulBackward0|0|2|2|23\n");
    sqlite3_close(db);
    assert_int_equal(agrees_with_diagnose(path), 2);
    unlink(path);
}

static void test_no_invalidation_without_mutation(void **state)
{
    (void)state;
    char path[64];
    tb b;
    sqlite3 *db;
    snprintf(path, sizeof path, "/tmp/gt_test_sql_clean_%d.db", (int)getpid());
    build_chain(&b, path);
    backward_z(&b, 12, 0, 1, 1);
    mutate_x(&b, 13, 1); /* after the only backward: harmless */
    assert_int_equal(gt_recorder_close(b.r), GT_OK);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(int_of(db, "SELECT count(*) FROM invalidations"), 0);
    assert_rows(db, "SELECT version_before, version_after, names FROM mutations",
                "0|1|x\n");
    sqlite3_close(db);
    assert_int_equal(agrees_with_diagnose(path), 0);
    unlink(path);
}

/* ---- table_out ------------------------------------------------------ */

static char *print_to_string(sqlite3 *db, const char *sql, int mode, int header,
                             int width, int64_t *rows)
{
    sqlite3_stmt *st;
    gt_table_opts o = {mode, header, width};
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(gt_table_print(st, &o, out, rows), SQLITE_OK);
    sqlite3_finalize(st);
    fclose(out);
    return buf;
}

static void assert_printed(sqlite3 *db, const char *sql, int mode, int header, int width,
                           const char *want)
{
    char *got = print_to_string(db, sql, mode, header, width, NULL);
    if (strcmp(got, want) != 0)
        fail_msg("%s\n--- got:\n%s--- want:\n%s", sql, got, want);
    free(got);
}

static void test_table_modes(void **state)
{
    (void)state;
    sqlite3 *db;
    int64_t rows = -1;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    const char *q = "SELECT 1 AS n, 'ab' AS s, 2.5 AS r UNION ALL "
                    "SELECT 123, NULL, NULL UNION ALL SELECT 7, 'x,\"y\"' || char(10) || "
                    "'z' || char(9), -1";
    assert_printed(db, q, GT_OUT_TABLE, 1, 0,
                   "  n  s             r\n"
                   "---  ----------  ---\n"
                   "  1  ab          2.5\n"
                   "123\n"
                   "  7  x,\"y\"\\nz\\t   -1\n");
    assert_printed(db, q, GT_OUT_TABLE, 0, 5, "  1  ab     2.5\n123\n  7  x,...   -1\n");
    assert_printed(db, q, GT_OUT_TSV, 1, 0,
                   "n\ts\tr\n1\tab\t2.5\n123\t\t\n7\tx,\"y\"\\nz\\t\t-1\n");
    assert_printed(db, q, GT_OUT_CSV, 1, 0,
                   "n,s,r\n1,ab,2.5\n123,,\n7,\"x,\"\"y\"\"\nz\t\",-1\n");
    char *got = print_to_string(db, q, GT_OUT_CSV, 0, 0, &rows);
    assert_string_equal(got, "1,ab,2.5\n123,,\n7,\"x,\"\"y\"\"\nz\t\",-1\n");
    assert_int_equal(rows, 3);
    free(got);
    /* UTF-8 counts as characters when aligning */
    assert_printed(db, "SELECT 'é' AS a, 1 AS b UNION ALL SELECT 'abc', 2", GT_OUT_TABLE,
                   1, 0, "a    b\n---  -\né    1\nabc  2\n");
    /* a statement without columns prints nothing */
    assert_printed(db, "BEGIN", GT_OUT_TABLE, 1, 0, "");
    assert_printed(db, "COMMIT", GT_OUT_JSON, 1, 0, "");
    /* no rows: header only, or an empty JSON array */
    assert_printed(db, "SELECT 1 AS a WHERE 0", GT_OUT_TABLE, 1, 0, "a\n-\n");
    assert_printed(db, "SELECT 1 AS a WHERE 0", GT_OUT_JSON, 1, 0, "[]\n");
    sqlite3_close(db);
}

static void test_json_output(void **state)
{
    (void)state;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    char *got = print_to_string(db,
                                "SELECT 1 AS i, 2.5 AS r, NULL AS n, x'00ff' AS b, "
                                "'q\"b\\s' || char(10) || char(1) || 'é' AS t, "
                                "'[1, 2]' AS shape",
                                GT_OUT_JSON, 1, 0, NULL);
    /* valid JSON, and every value reads back as it went in */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT json_valid(?1), json_array_length(?1), "
                                        "json_extract(?1, '$[0].i'), "
                                        "json_extract(?1, '$[0].r'), "
                                        "json_type(?1, '$[0].n'), "
                                        "json_extract(?1, '$[0].b'), "
                                        "json_extract(?1, '$[0].t') = "
                                        "'q\"b\\s' || char(10) || char(1) || 'é', "
                                        "json_extract(?1, '$[0].shape')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, got, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    assert_int_equal(sqlite3_column_int(st, 1), 1);
    assert_int_equal(sqlite3_column_int(st, 2), 1);
    assert_true(sqlite3_column_double(st, 3) == 2.5);
    assert_string_equal(sqlite3_column_text(st, 4), "null");
    assert_string_equal(sqlite3_column_text(st, 5), "x'00ff'");
    assert_int_equal(sqlite3_column_int(st, 6), 1);
    assert_string_equal(sqlite3_column_text(st, 7), "[1, 2]");
    sqlite3_finalize(st);
    assert_int_equal(got[strlen(got) - 1], '\n');
    free(got);
    sqlite3_close(db);
}

static void test_table_print_error(void **state)
{
    (void)state;
    sqlite3 *db;
    sqlite3_stmt *st;
    gt_table_opts o = {GT_OUT_TABLE, 1, 0};
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    /* an error at the second row: SQLite's code and message come back */
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "WITH t(x) AS (VALUES (1), (2)) "
                                        "SELECT CASE x WHEN 2 THEN json('not json') "
                                        "ELSE x END FROM t",
                                        -1, &st, NULL),
                     SQLITE_OK);
    for (int mode = GT_OUT_TABLE; mode <= GT_OUT_JSON; mode++) {
        FILE *out = open_memstream(&buf, &len);
        o.mode = mode;
        assert_int_equal(gt_table_print(st, &o, out, NULL), SQLITE_ERROR);
        assert_string_equal(sqlite3_errmsg(db), "malformed JSON");
        fclose(out);
        free(buf);
        buf = NULL;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* ---- gradtrace sql -------------------------------------------------- */

/* Run `gradtrace sql` with the given arguments (NULL-terminated). */
static void sql_run(captured *c, const char *input, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    argv[argc++] = "sql";
    va_start(ap, input);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = strdup(a); /* cmd_sql may cut -p NAME=VALUE in place */
    va_end(ap);
    argv[argc] = NULL;
    run_captured(gt_cmd_sql, argc, argv, input, c);
    for (int i = 1; i < argc; i++)
        free(argv[i]);
}

static void test_sql_outputs(void **state)
{
    fixture *f = *state;
    captured c;
    const char *q = "SELECT seq, op, line FROM op_log WHERE seq IN (3, 7) ORDER BY seq";

    sql_run(&c, NULL, f->path, q, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "seq\top\tline\n3\taten::_log_softmax\t37\n"
                               "7\taten::nll_loss_forward\t38\n");
    assert_string_equal(c.err, "");
    captured_free(&c);

    sql_run(&c, NULL, "--table", f->path, q, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "seq  op                      line\n"
                               "---  ----------------------  ----\n"
                               "  3  aten::_log_softmax        37\n"
                               "  7  aten::nll_loss_forward    38\n");
    captured_free(&c);

    sql_run(&c, NULL, "--csv", "--no-header", f->path,
            "SELECT line, code FROM op_log WHERE seq = 7", NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "38,\"loss = F.nll_loss(log_probs, target, "
                               "weight=class_weights)\"\n");
    captured_free(&c);

    sql_run(&c, NULL, "--json", f->path, "SELECT type, line, message FROM error_log",
            NULL);
    assert_int_equal(c.status, 0);
    assert_non_null(strstr(c.out, "[{\"type\":\"RuntimeError\",\"line\":47,\"message\":"
                                  "\"one of the variables"));
    assert_non_null(strstr(c.out, "instead.\\nHint: enable anomaly detection\"}]\n"));
    captured_free(&c);
}

static void test_sql_stdin_and_params(void **state)
{
    fixture *f = *state;
    captured c;

    /* several statements from stdin, comments and blanks between them */
    sql_run(&c,
            "-- how many ops?\nSELECT count(*) AS n FROM ops;\n\n"
            "SELECT op FROM mutations WHERE version_after = :v;  -- the last\n  \n",
            "--no-header", "-p", "v=6", f->path, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "11\naten::copy_\n");
    captured_free(&c);

    /* '-' reads stdin too; text parameters; @ and $ prefixes */
    sql_run(&c, "SELECT count(*) FROM variables WHERE name = @name AND tensor = $t",
            "--no-header", "-p", "name=class_weights", "-p", "t=1", f->path, "-", NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "1\n");
    captured_free(&c);

    /* a real number; words that strtod would take stay text */
    sql_run(&c, NULL, "--no-header", "-p", "x=2.5", "-p", "n=nan", "-p", "h=0x10", "-p",
            "e=", f->path, "SELECT :x * 2, typeof(:n), :h, typeof(:e)", NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "5.0\ttext\t0x10\ttext\n");
    captured_free(&c);

    /* a parameter without a value */
    sql_run(&c, NULL, f->path, "SELECT :missing", NULL);
    assert_int_equal(c.status, 2);
    assert_string_equal(c.err, "gradtrace: sql: no value for parameter :missing: "
                               "give it with -p missing=VALUE\n");
    captured_free(&c);
}

static void test_sql_errors(void **state)
{
    fixture *f = *state;
    captured c;

    sql_run(&c, NULL, f->path, "SELECT * FROM nosuch", NULL);
    assert_int_equal(c.status, 2);
    assert_string_equal(c.out, "");
    assert_string_equal(c.err, "gradtrace: sql: no such table: nosuch\n");
    captured_free(&c);

    /* a run-time error after a good statement: the first is printed (and,
     * streamed, the header of the second) */
    sql_run(&c, "SELECT 1 AS a; SELECT json('nope') AS b;", f->path, NULL);
    assert_int_equal(c.status, 2);
    assert_string_equal(c.out, "a\n1\nb\n");
    assert_string_equal(c.err, "gradtrace: sql: malformed JSON\n");
    captured_free(&c);

    sql_run(&c, NULL, "/nonexistent/t.db", "SELECT 1", NULL);
    assert_int_equal(c.status, 2);
    assert_non_null(strstr(c.err, "gradtrace: cannot open /nonexistent/t.db: "));
    captured_free(&c);

    sql_run(&c, NULL, "--bogus", f->path, "SELECT 1", NULL);
    assert_int_equal(c.status, 2);
    assert_non_null(strstr(c.err, "gradtrace: sql: unknown option '--bogus'"));
    captured_free(&c);

    sql_run(&c, NULL, "-p", "novalue", f->path, "SELECT 1", NULL);
    assert_int_equal(c.status, 2);
    assert_non_null(strstr(c.err, "bad --param 'novalue': want NAME=VALUE"));
    captured_free(&c);

    sql_run(&c, NULL, NULL);
    assert_int_equal(c.status, 2);
    captured_free(&c);

    sql_run(&c, NULL, "--help", NULL);
    assert_int_equal(c.status, 0);
    assert_non_null(strstr(c.out, "usage: gradtrace sql"));
    captured_free(&c);
}

static void test_sql_refuses_writes(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *sql;
        const char *why;
    } refused[] = {
        {"INSERT INTO strings VALUES (9999, 'x')",
         "refused: the trace is read-only: INSERT into strings is not allowed"},
        {"UPDATE run SET status = 'ok'",
         "refused: the trace is read-only: UPDATE of run is not allowed"},
        {"DELETE FROM ops",
         "refused: the trace is read-only: DELETE from ops is not allowed"},
        {"DROP VIEW op_log", "refused: the trace is read-only: changing the schema"},
        {"CREATE TABLE t (x)", "refused: the trace is read-only: changing the schema"},
        {"CREATE TEMP VIEW v AS SELECT 1", "refused: the trace is read-only"},
        {"CREATE INDEX i ON ops (name)", "refused: the trace is read-only"},
        {"ALTER TABLE ops ADD COLUMN x", "refused: the trace is read-only"},
        {"UPDATE sqlite_master SET sql = ''", "sqlite_master may not be modified"},
        {"ATTACH '/tmp/gt_test_sql_attached.db' AS other",
         "refused: ATTACH and DETACH are not allowed"},
        {"DETACH main", "refused: ATTACH and DETACH are not allowed"},
        {"PRAGMA user_version = 7", "refused: PRAGMA user_version = 7 would change"},
        {"PRAGMA query_only = 0", "refused: PRAGMA query_only = 0 would change"},
        {"PRAGMA journal_mode = WAL", "refused: PRAGMA journal_mode = WAL would change"},
        {"PRAGMA writable_schema = ON",
         "refused: PRAGMA writable_schema = ON would change"},
        {"PRAGMA optimize", "refused: PRAGMA optimize would change"},
        {"PRAGMA wal_checkpoint", "refused: PRAGMA wal_checkpoint would change"},
        {"VACUUM", "refused: the trace is read-only and this statement would write"},
        {"VACUUM INTO '/tmp/gt_test_sql_copy.db'",
         "refused: the trace is read-only and this statement would write"},
        {"REINDEX", "refused: the trace is read-only: REINDEX"},
        {"ANALYZE", "refused: the trace is read-only"},
        {"SELECT 1; DELETE FROM ops", "DELETE from ops is not allowed"},
    };
    size_t len0, len1;
    char *before = slurp_file(f->path, &len0);
    struct stat st0, st1;
    assert_int_equal(stat(f->path, &st0), 0);

    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        captured c;
        sql_run(&c, NULL, f->path, refused[i].sql, NULL);
        if (c.status != 2 || !strstr(c.err, refused[i].why))
            fail_msg("%s: status %d, stderr: %s", refused[i].sql, c.status, c.err);
        captured_free(&c);
    }
    /* from stdin too */
    captured c;
    sql_run(&c, "SELECT 1;\nDELETE FROM ops;\n", f->path, NULL);
    assert_int_equal(c.status, 2);
    assert_non_null(strstr(c.err, "DELETE from ops is not allowed"));
    captured_free(&c);

    /* the trace is byte-identical, nothing was created next to it */
    char *after = slurp_file(f->path, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    assert_int_equal(stat(f->path, &st1), 0);
    assert_int_equal(st0.st_mtime, st1.st_mtime);
    assert_int_equal(access("/tmp/gt_test_sql_copy.db", F_OK), -1);
    assert_int_equal(access("/tmp/gt_test_sql_attached.db", F_OK), -1);
    free(before);
    free(after);
}

/* The refusal names what the user wrote whole, however long: a 400-byte
 * pragma name, a 1,000-byte pragma value. */
static void test_sql_refusal_long_names(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *sql, *pragma; /* %s: the long text, in both */
        size_t len;
    } cases[] = {
        {"PRAGMA %s = 1", "%s = 1", 400},
        {"PRAGMA journal_mode = x%s", "journal_mode = x%s", 1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gt_strbuf name = GT_STRBUF_INIT, q = GT_STRBUF_INIT, want = GT_STRBUF_INIT;
        for (size_t k = 0; k < cases[i].len; k++)
            gt_strbuf_add(&name, &"abcdefghijklmnopqrstuvwxyz"[k % 26], 1);
        gt_strbuf_addf(&q, cases[i].sql, name.p);
        gt_strbuf_adds(&want, "refused: PRAGMA ");
        gt_strbuf_addf(&want, cases[i].pragma, name.p);
        gt_strbuf_adds(&want, " would change the trace or the connection; only reading "
                              "pragmas are allowed\n");
        assert_false(q.oom || want.oom);
        captured c;
        sql_run(&c, NULL, f->path, q.p, NULL);
        if (c.status != 2 || !strstr(c.err, want.p))
            fail_msg("status %d, stderr: %s", c.status, c.err);
        captured_free(&c);
        gt_strbuf_release(&name);
        gt_strbuf_release(&q);
        gt_strbuf_release(&want);
    }
}

static void test_sql_allows_reads(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *sql;
        const char *out;
    } allowed[] = {
        {"PRAGMA user_version", GT_STR(GT_SCHEMA_VERSION) "\n"},
        {"PRAGMA table_info(storages)", "0\tid\tINTEGER\t0\t\t1\n1\tnbytes\tINTEGER\t1\t"
                                        "\t0\n2\tdevice\tINTEGER\t1\t\t0\n"},
        {"SELECT count(*) FROM pragma_table_info('run')", "26\n"},
        {"SELECT group_concat(j.value, 'x') FROM saved, json_each(saved.shape) j "
         "WHERE seq = 6",
         "16x3\n"},
        {"BEGIN; SELECT count(*) FROM errors; COMMIT", "1\n"},
        {"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) "
         "SELECT sum(i) FROM n",
         "6\n"},
        {"PRAGMA integrity_check", "ok\n"},
    };
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) {
        captured c;
        sql_run(&c, NULL, "--no-header", f->path, allowed[i].sql, NULL);
        if (c.status != 0 || strcmp(c.out, allowed[i].out) != 0)
            fail_msg("%s: status %d, stdout: %s, stderr: %s", allowed[i].sql, c.status,
                     c.out, c.err);
        captured_free(&c);
    }
}

/* ---- the cookbook of schema/SCHEMA.md ------------------------------- */

typedef struct recipe {
    char *title;
    char *sql;
} recipe;

static char *schema_md(void)
{
    const char *src = getenv("GT_SOURCE_DIR");
    char path[1024];
    if (src) {
        snprintf(path, sizeof path, "%s/schema/SCHEMA.md", src);
    } else {
        /* __FILE__ is tests/test_sql.c under the source dir */
        snprintf(path, sizeof path, "%s", __FILE__);
        char *slash = strrchr(path, '/');
        assert_non_null(slash);
        strcpy(slash, "/../schema/SCHEMA.md");
    }
    return slurp_file(path, NULL);
}

/* The "### title" + ```sql block pairs of the "## Cookbook" section. */
static size_t parse_cookbook(char *md, recipe *out, size_t max)
{
    char *p = strstr(md, "\n## Cookbook\n");
    size_t n = 0;
    assert_non_null(p);
    p += 13;
    char *end = strstr(p, "\n## ");
    if (end)
        *end = '\0';
    while ((p = strstr(p, "\n### ")) != NULL && n < max) {
        p += 5;
        char *eol = strchr(p, '\n');
        assert_non_null(eol);
        *eol = '\0';
        out[n].title = p;
        char *code = strstr(eol + 1, "```sql\n");
        assert_non_null(code);
        code += 7;
        char *close = strstr(code, "```");
        assert_non_null(close);
        *close = '\0';
        out[n].sql = code;
        n++;
        p = close + 3;
    }
    return n;
}

/* Every view of the trace is documented in SCHEMA.md's "## Views" section
 * with exactly its columns, in order: a "### name" heading and a table
 * whose first cells list the columns ("a, b" for several). */
static void test_views_documented(void **state)
{
    fixture *f = *state;
    char *md = schema_md();
    char *p = strstr(md, "\n## Views\n");
    assert_non_null(p);
    char *end = strstr(p + 1, "\n## ");
    assert_non_null(end);
    *end = '\0';
    int views = 0;
    while ((p = strstr(p, "\n### ")) != NULL) {
        char name[64], doc[2048] = "", sql[128];
        p += 5;
        size_t n = strcspn(p, "\n");
        assert_true(n < sizeof name);
        memcpy(name, p, n);
        name[n] = '\0';
        /* the table rows up to the next heading */
        char *next = strstr(p, "\n### ");
        for (char *row = strstr(p, "\n| "); row && (!next || row < next);
             row = strstr(row + 1, "\n| ")) {
            char *cell = row + 3;
            size_t len = strcspn(cell, "|");
            while (len && cell[len - 1] == ' ')
                len--;
            if (len == 6 && !strncmp(cell, "column", 6))
                continue;
            /* "a, b" -> "a\nb\n" */
            for (size_t k = 0; k < len; k++) {
                size_t at = strlen(doc);
                if (cell[k] == ',') {
                    doc[at] = '\n';
                    doc[at + 1] = '\0';
                    k++; /* the blank after the comma */
                } else {
                    doc[at] = cell[k];
                    doc[at + 1] = '\0';
                }
            }
            strcat(doc, "\n");
        }
        snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid",
                 name);
        char *cols = rows_of(f->db, sql);
        if (strcmp(cols, doc) != 0)
            fail_msg("view %s: columns:\n%s--- SCHEMA.md documents:\n%s", name, cols,
                     doc);
        free(cols);
        views++;
        p += n;
    }
    assert_int_equal(views, int_of(f->db, "SELECT count(*) FROM sqlite_schema "
                                          "WHERE type = 'view'"));
    free(md);
}

static void test_cookbook(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *title;
        const char *out;
    } want[] = {
        {"Which lines mutate tensors most?",
         "examples/seed.py\t44\tclass_weights[i] *= 1.0 + share\t6\n"},
        {"Which saved tensors were invalidated, and by which lines?",
         "1\tNllLossBackward0\tweight\tclass_weights\t0\t6\t6\t44\n"},
        {"What wrote to the storage of a variable?",
         "16\taten::mul_.Tensor\t5\t1\t44\tclass_weights[i] *= 1.0 + share\n"
         "18\taten::copy_\t5\t2\t44\tclass_weights[i] *= 1.0 + share\n"
         "22\taten::mul_.Tensor\t6\t3\t44\tclass_weights[i] *= 1.0 + share\n"
         "24\taten::copy_\t6\t4\t44\tclass_weights[i] *= 1.0 + share\n"
         "28\taten::mul_.Tensor\t7\t5\t44\tclass_weights[i] *= 1.0 + share\n"
         "30\taten::copy_\t7\t6\t44\tclass_weights[i] *= 1.0 + share\n"},
        {"Which saved tensors hold the most memory?",
         "LogSoftmaxBackward0\tresult\t2\tfloat32\t[16,3]\t192\t37\n"
         "NllLossBackward0\tself\t2\tfloat32\t[16,3]\t192\t38\n"
         "NllLossBackward0\ttarget\t3\tint64\t[16]\t128\t38\n"
         "NllLossBackward0\tweight\t1\tfloat32\t[3]\t12\t38\n"},
        {"Memory held by saved tensors, per node type",
         "NllLossBackward0\t1\t3\t332\nLogSoftmaxBackward0\t1\t1\t192\n"},
        /* LogSoftmaxBackward0's result is NllLossBackward0's self: once */
        {"Bytes a backward call holds for backward, each storage once", "332\n"},
        {"How many ops ran in each phase?", "forward\t11\t5\n"},
        {"The full stack of one event",
         "0\ttorch/_tensor.py\t626\tbackward\t0\n1\texamples/seed.py\t47\t<module>\t1\n"},
        {"Everything that happened on one source line",
         "13\top\taten::select.int\t\t\n14\ttensor\tfloat32[]\t5\t\n"
         "15\top\taten::mul_.Tensor\t\t\n16\tbump\taten::mul_.Tensor\t5\t\n"
         "17\top\taten::copy_\t\t\n18\tbump\taten::copy_\t5\t\n"
         "19\top\taten::select.int\t\t\n20\ttensor\tfloat32[]\t6\t\n"
         "21\top\taten::mul_.Tensor\t\t\n22\tbump\taten::mul_.Tensor\t6\t\n"
         "23\top\taten::copy_\t\t\n24\tbump\taten::copy_\t6\t\n"
         "25\top\taten::select.int\t\t\n26\ttensor\tfloat32[]\t7\t\n"
         "27\top\taten::mul_.Tensor\t\t\n28\tbump\taten::mul_.Tensor\t7\t\n"
         "29\top\taten::copy_\t\t\n30\tbump\taten::copy_\t7\t\n"},
        {"The history of a variable, views included",
         "1\t1\tcreated\t\t\t\t\n1\t1\tname\t\t\tclass_weights\t\n"
         "7\t1\tread\taten::nll_loss_forward\t0\t\t38\n"
         "12\t1\tsaved\tNllLossBackward0\t0\tweight\t38\n"
         "13\t1\tread\taten::select.int\t0\t\t44\n"
         "14\t5\tcreated\taten::select.int\t\t\t44\n"
         "15\t5\twritten\taten::mul_.Tensor\t0\t\t44\n"
         "16\t5\tbump\taten::mul_.Tensor\t1\t\t44\n"
         "17\t5\twritten\taten::copy_\t1\t\t44\n"
         "18\t5\tbump\taten::copy_\t2\t\t44\n"
         "19\t1\tread\taten::select.int\t2\t\t44\n"
         "20\t6\tcreated\taten::select.int\t\t\t44\n"
         "21\t6\twritten\taten::mul_.Tensor\t2\t\t44\n"
         "22\t6\tbump\taten::mul_.Tensor\t3\t\t44\n"
         "23\t6\twritten\taten::copy_\t3\t\t44\n"
         "24\t6\tbump\taten::copy_\t4\t\t44\n"
         "25\t1\tread\taten::select.int\t4\t\t44\n"
         "26\t7\tcreated\taten::select.int\t\t\t44\n"
         "27\t7\twritten\taten::mul_.Tensor\t4\t\t44\n"
         "28\t7\tbump\taten::mul_.Tensor\t5\t\t44\n"
         "29\t7\twritten\taten::copy_\t5\t\t44\n"
         "30\t7\tbump\taten::copy_\t6\t\t44\n"},
        {"Which backward calls failed, and why?",
         "1\tTensor.backward\t47\tloss.backward()\tRuntimeError\t"
         "one of the variables needed for gradient computation has bee\n"},
        {"What a backward call reaches, and what those nodes saved",
         "0\t2\tNllLossBackward0\t3\t332\n1\t1\tLogSoftmaxBackward0\t1\t192\n"},
    };
    const size_t nwant = sizeof want / sizeof *want;
    recipe r[32];
    char *md = schema_md();
    size_t n = parse_cookbook(md, r, 32);
    char seq[32];
    snprintf(seq, sizeof seq, "seq=%lld", (long long)f->ids.error_seq);

    assert_true(n >= 8);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) {
        captured c;
        assert_string_equal(r[i].title, want[i].title);
        sql_run(&c, NULL, "--no-header", "-p", "name=class_weights", "-p", seq, "-p",
                "file=seed.py", "-p", "line=44", "-p", "backward=1", f->path, r[i].sql,
                NULL);
        if (c.status != 0 || strcmp(c.out, want[i].out) != 0)
            fail_msg("cookbook '%s': status %d\n--- got:\n%s--- want:\n%s--- stderr:\n%s",
                     r[i].title, c.status, c.out, want[i].out, c.err);
        captured_free(&c);
    }
    free(md);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_views_exist, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_op_log, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_mutations, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_saved, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_invalidations, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_tensor_history, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_other_views, seed_setup, seed_teardown),
        cmocka_unit_test(test_invalidations_retain_graph),
        cmocka_unit_test(test_invalidations_freed_graph),
        cmocka_unit_test(test_invalidations_after_node_ran),
        cmocka_unit_test(test_no_invalidation_without_mutation),
        cmocka_unit_test(test_table_modes),
        cmocka_unit_test(test_json_output),
        cmocka_unit_test(test_table_print_error),
        cmocka_unit_test_setup_teardown(test_sql_outputs, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_sql_stdin_and_params, seed_setup,
                                        seed_teardown),
        cmocka_unit_test_setup_teardown(test_sql_errors, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_sql_refuses_writes, seed_setup,
                                        seed_teardown),
        cmocka_unit_test_setup_teardown(test_sql_refusal_long_names, seed_setup,
                                        seed_teardown),
        cmocka_unit_test_setup_teardown(test_sql_allows_reads, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_views_documented, seed_setup, seed_teardown),
        cmocka_unit_test_setup_teardown(test_cookbook, seed_setup, seed_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
