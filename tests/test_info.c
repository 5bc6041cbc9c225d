/*
 * Tests for `gradtrace info` (cli/cmd_info.c) on traces written
 * through the recorder API: the text summary, the JSON summary, a partial
 * trace, and bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <sys/wait.h>

#include "cmd.h"
#include "sqltrace.h"

static void info_run(captured *c, const char *a1, const char *a2)
{
    char *argv[4] = {"info", (char *)a1, (char *)a2, NULL};
    run_captured(gt_cmd_info, a2 ? 3 : a1 ? 2 : 1, argv, NULL, c);
}

/* Run info with a1, a2; expect the exit status and the text in stdout
 * and/or stderr (NULL: not checked). */
static void info_expect(const char *a1, const char *a2, int status, const char *out_has,
                        const char *err_has)
{
    captured c;
    info_run(&c, a1, a2);
    assert_int_equal(c.status, status);
    if (out_has)
        assert_contains(c.out, out_has);
    if (err_has)
        assert_contains(c.err, err_has);
    captured_free(&c);
}

/* path = /tmp/gt_test_info_<tag>_<pid>.db, holding the closed seed trace. */
static void seed_at(char *path, size_t n, const char *tag)
{
    seed_ids ids;
    snprintf(path, n, "/tmp/gt_test_info_%s_%d.db", tag, (int)getpid());
    build_seed(path, &ids, 1, NULL);
}

static void test_info_text(void **state)
{
    (void)state;
    char path[64];
    captured c;
    seed_at(path, sizeof path, "text");

    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.err, "");
    char head[256];
    snprintf(head, sizeof head,
             "trace      %s (schema %d, written by gradtrace " GT_VERSION_STRING ")\n"
             "engine     pytorch 2.13.0+cpu, python 3.11.7\n"
             "command    examples/seed.py --steps 1\n"
             "cwd        /work\n",
             path, GT_SCHEMA_VERSION);
    assert_memory_equal(c.out, head, strlen(head));
    assert_contains(c.out, ", pid 4242 on testhost\n");
    assert_contains(c.out, "\nstatus     exception, exit code 1, ");
    assert_contains(c.out, "\nevents     33\n");
    assert_contains(c.out, "\n  ops                      11\n");
    assert_contains(c.out, "\n  version_bumps             6\n");
    assert_contains(c.out, "\n  saved_tensors             4\n");
    assert_contains(c.out, "\n  errors                    1\n");
    assert_contains(c.out, "\nbackward calls: 1 (1 error)\n"
                           "  #1 Tensor.backward  error  examples/seed.py:47  "
                           "loss.backward()\n"
                           "      1 root, 0 nodes run\n");
    assert_contains(c.out,
                    "\nerrors\n"
                    "  RuntimeError at examples/seed.py:47 (in backward #1)\n"
                    "    loss.backward()\n"
                    "    one of the variables needed for gradient computation has "
                    "been modified by an inplace operation: [torch.FloatTensor [3]] "
                    "is at version 6; expected version 0 instead.\n"
                    "    Hint: enable anomaly detection\n");
    assert_null(strstr(c.out, "partial"));
    captured_free(&c);
    unlink(path);
}

/* json_extract(doc, path) for each path, as text joined by '|'. */
static void assert_json(const char *doc, const char *const *paths, size_t n,
                        const char *want)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    char got[1024] = "";
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT json_valid(?1), json_extract(?1, ?2)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, paths[i], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(st, 0), 1);
        const char *v = (const char *)sqlite3_column_text(st, 1);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? "|" : "",
                 v ? v : "NULL");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_string_equal(got, want);
}

static void test_info_json(void **state)
{
    (void)state;
    char path[64];
    captured c;
    seed_at(path, sizeof path, "json");

    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const paths[] = {
        "$.partial",
        "$.run.engine",
        "$.run.engine_version",
        "$.run.argv[2]",
        "$.run.status",
        "$.run.exit_code",
        "$.run.pid",
        "$.events",
        "$.counts.ops",
        "$.counts.version_bumps",
        "$.counts.saved_tensors",
        "$.counts.node_execs",
        "$.backward_calls[0].id",
        "$.backward_calls[0].api",
        "$.backward_calls[0].status",
        "$.backward_calls[0].line",
        "$.backward_calls[0].code",
        "$.backward_calls[0].error_type",
        "$.errors[0].type",
        "$.errors[0].line",
        "$.errors[0].backward",
        "$.errors[1]",
    };
    assert_json(c.out, paths, sizeof paths / sizeof *paths,
                "0|pytorch|2.13.0+cpu|1|exception|1|4242|33|11|6|4|0|1|"
                "Tensor.backward|error|47|loss.backward()|RuntimeError|RuntimeError|47|1|"
                "NULL");
    /* duration is end - start, a number; argv is a JSON array */
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT json_type(?1, '$.run.duration_s'), "
                                        "json_extract(?1, '$.run.end_ns') - "
                                        "json_extract(?1, '$.run.start_ns') >= 0, "
                                        "json_array_length(?1, '$.run.argv'), "
                                        "json_extract(?1, '$.trace')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, c.out, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal(sqlite3_column_text(st, 0), "real");
    assert_int_equal(sqlite3_column_int(st, 1), 1);
    assert_int_equal(sqlite3_column_int(st, 2), 3);
    assert_string_equal(sqlite3_column_text(st, 3), path);
    sqlite3_finalize(st);
    sqlite3_close(db);
    captured_free(&c);
    unlink(path);
}

static void test_info_partial(void **state)
{
    (void)state;
    char path[64];
    seed_ids ids;
    gt_recorder *r = NULL;
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_info_partial_%d.db", (int)getpid());
    build_seed(path, &ids, 0, &r);

    /* the recording is still open: what was flushed is summarised */
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "\nstatus     running\n");
    assert_contains(c.out, "partial trace: the recording did not finish");
    assert_contains(c.out, "\n  version_bumps             6\n");
    captured_free(&c);

    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const paths[] = {"$.partial", "$.run.status", "$.run.duration_s",
                                        "$.counts.version_bumps"};
    assert_json(c.out, paths, 4, "1|running|NULL|6");
    captured_free(&c);

    assert_int_equal(gt_recorder_close(r), GT_OK);
    unlink(path);
}

/* Damage a closed seed trace with `sql` (through a writable connection). */
static void damage(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A recording stopped early at the size cap (run.stopped_seq, schema 2):
 * both summaries say where and why, and the trace counts as partial. */
static void test_info_stopped(void **state)
{
    (void)state;
    char path[64];
    captured c;
    seed_at(path, sizeof path, "stopped");
    damage(path, "UPDATE run SET stopped_seq = 20, "
                 "stopped_reason = 'size cap: 225280 bytes > max_bytes 204800'");

    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "\nstatus     exception, exit code 1, ");
    assert_contains(c.out,
                    "\n           recording stopped early, after event 20 (size cap: "
                    "225280 bytes > max_bytes 204800);\n"
                    "           what came after is not in the trace\n");
    assert_null(strstr(c.out, "did not finish"));
    captured_free(&c);

    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const paths[] = {"$.partial", "$.stopped.seq", "$.stopped.reason",
                                        "$.run.status"};
    assert_json(c.out, paths, 4,
                "1|20|size cap: 225280 bytes > max_bytes 204800|exception");
    captured_free(&c);

    /* not stopped: "stopped" is null */
    damage(path, "UPDATE run SET stopped_seq = NULL, stopped_reason = NULL");
    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const p2[] = {"$.partial"};
    assert_json(c.out, p2, 1, "0");
    assert_contains(c.out, "\"stopped\":null");
    captured_free(&c);
    unlink(path);
}

static void test_info_empty_trace(void **state)
{
    (void)state;
    char path[64];
    tb b;
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_info_empty_%d.db", (int)getpid());
    tb_open(&b, path);
    assert_int_equal(gt_run_end(b.r, GT_RUN_OK, 0, 0), GT_OK);
    assert_int_equal(gt_recorder_close(b.r), GT_OK);

    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "\nstatus     ok, exit code 0, ");
    assert_contains(c.out, "\nevents     0\n");
    assert_contains(c.out, "\nbackward calls: none\n");
    assert_contains(c.out, "\nerrors: none\n");
    captured_free(&c);

    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const paths[] = {"$.backward_calls", "$.errors", "$.counts.ops",
                                        "$.run.status"};
    assert_json(c.out, paths, 4, "[]|[]|0|ok");
    captured_free(&c);
    unlink(path);
}

static void test_info_bad_input(void **state)
{
    (void)state;
    char path[64];

    info_expect(NULL, NULL, 2, NULL, "gradtrace: info: want exactly one trace");
    info_expect("--nope", "x.db", 2, NULL, "gradtrace: info: unknown option '--nope'");
    info_expect("/nonexistent/x.db", NULL, 2, NULL,
                "gradtrace: cannot open /nonexistent/x.db: ");

    /* a file that is not a trace */
    snprintf(path, sizeof path, "/tmp/gt_test_info_junk_%d.db", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a database at all, just text\n", f);
    fclose(f);
    info_expect(path, NULL, 2, NULL, "not a gradtrace trace");
    unlink(path);

    info_expect("--help", NULL, 0, "usage: gradtrace info", NULL);
}

static void test_info_damaged_trace(void **state)
{
    (void)state;
    char path[64];
    seed_ids ids;
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_info_damaged_%d.db", (int)getpid());

    /* no run row: both outputs fail with a message, exit 2 */
    build_seed(path, &ids, 1, NULL);
    damage(path, "DELETE FROM run");
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "gradtrace: info: cannot read ");
    assert_contains(c.err, ": no run row\n");
    captured_free(&c);
    unlink(path);

    /* The views come from gradtrace, not from the file: one dropped, or
     * replaced by an endless query, changes nothing. */
    build_seed(path, &ids, 1, NULL);
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    char *want = strdup(c.out);
    captured_free(&c);
    damage(path, "DROP VIEW op_log; DROP VIEW backward_log; "
                 "CREATE VIEW backward_log AS WITH RECURSIVE n(x) AS "
                 "(SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS id FROM n");
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, want);
    free(want);
    captured_free(&c);
    unlink(path);

    /* rows that point nowhere: said in both summaries */
    build_seed(path, &ids, 1, NULL);
    info_run(&c, "--json", path);
    assert_contains(c.out, "\"inconsistent\":null");
    captured_free(&c);
    damage(path, "DELETE FROM tensors WHERE id IN (SELECT tensor FROM saved_tensors)");
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.out,
                    "\n           damaged: its rows do not fit together (saved tensors "
                    "pointing at no tensor: 4; ");
    assert_contains(c.out, "; tensors pointing at no version counter: 3)\n");
    captured_free(&c);
    info_expect("--json", path, 0,
                "\"inconsistent\":\"saved tensors pointing at no tensor: 4; ", NULL);
    unlink(path);

    /* a table replaced by a view: not a trace, exit 2 */
    build_seed(path, &ids, 1, NULL);
    damage(path, "ALTER TABLE ops RENAME TO ops_old; "
                 "CREATE VIEW ops AS SELECT * FROM ops_old");
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "not a gradtrace trace (ops is a view, not a table)\n");
    assert_string_equal(c.out, "");
    captured_free(&c);
    info_run(&c, "--json", path);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "not a gradtrace trace (ops is a view, not a table)\n");
    assert_string_equal(c.out, "");
    captured_free(&c);
    unlink(path);
}

/* A run of `n` backward calls on one line; the calls in fail[] (1-based,
 * 0-terminated) raise, the call `running` (0: none) never returns. Each
 * call has one root and runs `nodes` nodes. */
static void build_calls(const char *path, int n, const int *fail, int running, int nodes,
                        gt_recorder **open_out)
{
    tb b;
    tb_open(&b, path);
    tb_run(&b, "[\"train.py\"]");
    gt_id st = tb_user_stack(&b, 30, "loss.backward()");
    gt_id name = tb_str(&b, "MulBackward0");
    gt_id node = 1;
    for (int i = 1; i <= n; i++) {
        gt_id bw = tb_backward(&b, st, 0);
        assert_int_equal(bw, i);
        gt_node_info ni = {.id = node, .name = name, .sequence_nr = -1};
        assert_int_equal(gt_node(b.r, &ni), GT_OK);
        assert_int_equal(gt_backward_root(b.r, bw, 0, 0, node), GT_OK);
        for (int k = 0; k < nodes; k++)
            assert_int_equal(gt_node_exec(b.r, bw, node), GT_OK);
        node++;
        int failed = 0;
        for (const int *f = fail; *f; f++)
            failed |= *f == i;
        if (failed) {
            char msg[64];
            snprintf(msg, sizeof msg, "call %d went wrong", i);
            assert_int_equal(gt_error(b.r, "RuntimeError", msg, st, bw, NULL), GT_OK);
        }
        if (i != running)
            assert_int_equal(gt_backward_end(b.r, bw, !failed), GT_OK);
    }
    if (open_out) {
        assert_int_equal(gt_recorder_flush(b.r), GT_OK);
        *open_out = b.r;
        return;
    }
    assert_int_equal(gt_run_end(b.r, GT_RUN_OK, 0, 0), GT_OK);
    assert_int_equal(gt_recorder_close(b.r), GT_OK);
}

/* How many times `needle` occurs in `hay`. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Many backward calls: counted by outcome, the first and last three shown
 * with every call that did not return ok between them (errors in full),
 * and what was left out said; --all shows every call; the JSON has all. */
static void test_info_many_calls(void **state)
{
    (void)state;
    char path[64];
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_info_many_%d.db", (int)getpid());
    static const int fail[] = {2, 17, 18, 40, 0};
    build_calls(path, 40, fail, 25, 2, NULL);

    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.out,
                    "\nbackward calls: 40 (35 ok, 4 error, 1 running)\n"
                    "  #1 Tensor.backward  ok  examples/seed.py:30  loss.backward()\n"
                    "      1 root, 2 nodes run\n"
                    "  #2 Tensor.backward  error  examples/seed.py:30  "
                    "loss.backward()\n"
                    "      1 root, 2 nodes run\n"
                    "  #3 Tensor.backward  ok  ");
    assert_contains(c.out, "      1 root, 2 nodes run\n"
                           "  ... 13 more calls, ok (--all shows every call)\n"
                           "  #17 Tensor.backward  error  ");
    assert_contains(c.out, "  #18 Tensor.backward  error  ");
    assert_contains(c.out, "  ... 6 more calls, ok (--all shows every call)\n"
                           "  #25 Tensor.backward  running  ");
    assert_contains(c.out, "  ... 12 more calls, ok (--all shows every call)\n"
                           "  #38 Tensor.backward  ok  ");
    assert_contains(c.out, "  #40 Tensor.backward  error  ");
    assert_int_equal(count_of(c.out, "Tensor.backward  "), 3 + 2 + 1 + 3); /* #40: last */
    /* every error in full */
    assert_int_equal(count_of(c.out, "went wrong"), 4);
    assert_contains(c.out, "  RuntimeError at examples/seed.py:30 (in backward #18)\n"
                           "    loss.backward()\n"
                           "    call 18 went wrong\n");
    captured_free(&c);

    info_run(&c, "--all", path);
    assert_int_equal(c.status, 0);
    assert_int_equal(count_of(c.out, "Tensor.backward  "), 40);
    assert_null(strstr(c.out, "more call"));
    captured_free(&c);

    info_run(&c, "--json", path);
    assert_int_equal(c.status, 0);
    static const char *const paths[] = {
        "$.backward_counts.total",        "$.backward_counts.ok",
        "$.backward_counts.error",        "$.backward_counts.running",
        "$.backward_calls[39].id",        "$.backward_calls[16].error",
        "$.backward_calls[16].nodes_run", "$.backward_calls[16].roots",
        "$.backward_calls[24].status"};
    assert_json(c.out, paths, sizeof paths / sizeof *paths,
                "40|35|4|1|40|call 17 went wrong|2|1|running");
    captured_free(&c);
    unlink(path);

    /* up to ten calls: all shown, nothing left out */
    build_calls(path, 10, (const int[]){0}, 0, 1, NULL);
    info_run(&c, path, NULL);
    assert_contains(c.out, "\nbackward calls: 10 (10 ok)\n");
    assert_int_equal(count_of(c.out, "Tensor.backward  ok"), 10);
    assert_null(strstr(c.out, "more call"));
    captured_free(&c);
    unlink(path);
}

/* A long trace its recording left without the close-time indexes (killed:
 * status 'running', no recorder holding it) is finished in place once,
 * with a note; one still being recorded is read from a private copy and
 * left as it is. Either way the answers are those of the finished trace.
 * The recording runs in a forked child, which dies without closing. */
static void test_info_unfinished_long_trace(void **state)
{
    (void)state;
    char path[64], wal[80];
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_info_long_%d.db", (int)getpid());
    snprintf(wal, sizeof wal, "%s-wal", path);
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gt_recorder *r = NULL;
        /* big enough (> 256 KiB) for the indexes to matter */
        build_calls(path, 3000, (const int[]){1500, 0}, 0, 3, &r);
        char ch = 'r';
        if (write(ready[1], &ch, 1) != 1 || read(go[0], &ch, 1) != 1)
            _exit(1);
        _exit(0); /* killed: never closed */
    }
    char ch;
    assert_int_equal(read(ready[0], &ch, 1), 1);

    /* live: answered from a copy, the file not touched */
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.err, "");
    assert_contains(c.out, "\nbackward calls: 3000 (2999 ok, 1 error)\n");
    assert_contains(c.out, "  #1500 Tensor.backward  error  ");
    assert_contains(c.out, "      1 root, 3 nodes run\n");
    captured_free(&c);
    sqlite3 *db;
    sqlite3_stmt *st;
    const char *count_idx = "SELECT count(*) FROM sqlite_schema WHERE type = 'index' "
                            "AND name NOT LIKE 'sqlite_%'";
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, count_idx, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* killed */
    assert_int_equal(write(go[1], "g", 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_contains(c.err, "gradtrace: note: ");
    assert_contains(c.err,
                    " was left unfinished by its recording (killed?): created its 9 "
                    "missing indexes, as closing it would have\n");
    assert_int_equal(count_of(c.err, "\n"), 1);
    assert_contains(c.out, "\nbackward calls: 3000 (2999 ok, 1 error)\n");
    assert_contains(c.out, "partial trace: the recording did not finish");
    captured_free(&c);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, count_idx, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 9);
    sqlite3_finalize(st);
    sqlite3_close(db);
    struct stat sb;
    assert_false(stat(wal, &sb) == 0 && sb.st_size > 0);

    /* finished once: the next command says nothing more */
    info_run(&c, path, NULL);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.err, "");
    captured_free(&c);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_text),
        cmocka_unit_test(test_info_json),
        cmocka_unit_test(test_info_partial),
        cmocka_unit_test(test_info_stopped),
        cmocka_unit_test(test_info_empty_trace),
        cmocka_unit_test(test_info_bad_input),
        cmocka_unit_test(test_info_damaged_trace),
        cmocka_unit_test(test_info_many_calls),
        cmocka_unit_test(test_info_unfinished_long_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
