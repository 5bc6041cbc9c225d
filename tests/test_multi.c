/* Several traces at once (inspector/multi.c, report_multi.c): rank naming, the
 * rank list, and diagnose, info and sql over two hand-built seed traces. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>

#include "cmd.h"
#include <gradtrace/multi.h>
#include "sqltrace.h"
#include "strbuf.h"

static void expect_path(const char *path, int64_t rank, const char *want)
{
    char *got = gt_rank_path(path, rank);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("gt_rank_path(%s, %lld) = %s, want %s", path, (long long)rank, got,
                 want);
    free(got);
}

/* The same names as python/gradtrace/_dist.py rank_path. */
static void test_rank_path(void **state)
{
    (void)state;
    expect_path("run.db", 0, "run.rank0.db");
    expect_path("run.db", 12, "run.rank12.db");
    expect_path("dir.d/run", 3, "dir.d/run.rank3");
    expect_path("a.b.db", 1, "a.b.rank1.db");
    expect_path(".db", 2, ".db.rank2");
    expect_path("/t/..db", 2, "/t/..db.rank2");
    expect_path("traces/{rank}.db", 7, "traces/7.db");
    expect_path("r{rank}/x{rank}.db", 5, "r5/x5.db");
}

static void test_env_rank_path(void **state)
{
    (void)state;
    char *p;
    unsetenv("RANK");
    assert_string_equal(p = gt_env_rank_path("run.db"), "run.db");
    free(p);
    setenv("RANK", "4", 1);
    assert_string_equal(p = gt_env_rank_path("run.db"), "run.rank4.db");
    free(p);
    setenv("RANK", "x", 1); /* not a rank: the path as given */
    assert_string_equal(p = gt_env_rank_path("run.db"), "run.db");
    free(p);
    unsetenv("RANK");
}

static void test_format_ranks(void **state)
{
    (void)state;
    char buf[64];
    const int64_t a[] = {0, 1, 2, 3}, b[] = {0, 2}, c[] = {0, 1, 5, 7, 8}, d[] = {3};
    gt_format_ranks(a, 4, buf, sizeof buf);
    assert_string_equal(buf, "0-3");
    gt_format_ranks(b, 2, buf, sizeof buf);
    assert_string_equal(buf, "0, 2");
    gt_format_ranks(c, 5, buf, sizeof buf);
    assert_string_equal(buf, "0-1, 5, 7-8");
    gt_format_ranks(d, 1, buf, sizeof buf);
    assert_string_equal(buf, "3");
    gt_format_ranks(c, 5, buf, 5); /* cut, still terminated */
    assert_int_equal(strlen(buf), 4);
}

/* No bound on the text (the command's was 256 bytes): every other rank of
 * 400, 200 ranges, 889 bytes in full. */
static void test_format_ranks_many(void **state)
{
    (void)state;
    int64_t r[200];
    char want[2048] = "";
    for (int i = 0; i < 200; i++) {
        r[i] = 2 * i;
        size_t n = strlen(want);
        snprintf(want + n, sizeof want - n, "%s%d", i ? ", " : "", 2 * i);
    }
    gt_strbuf b = GT_STRBUF_INIT;
    assert_int_equal(gt_format_ranks_buf(r, 200, &b), GT_OK);
    assert_string_equal(gt_strbuf_str(&b), want);
    assert_true(strlen(want) > 256);
    gt_strbuf_release(&b);
}

/* Two seed traces in one directory, rank 1 first by name. */
static char dir[64], t0[96], t1[96], junk[96];

static void build_rank(const char *path, int64_t rank)
{
    seed_ids ids;
    gt_recorder *r = NULL;
    build_seed(path, &ids, 0, &r);
    gt_run_info ri = {
        .rank = rank, .world_size = 2, .local_rank = rank, .backend = "gloo"};
    assert_int_equal(gt_run_set(r, &ri), GT_OK);
    assert_int_equal(gt_run_end(r, GT_RUN_EXCEPTION, 1, 0), GT_OK);
    assert_int_equal(gt_recorder_close(r), GT_OK);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/gt_test_multi_%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(t0, sizeof t0, "%s/b.db", dir);
    snprintf(t1, sizeof t1, "%s/a.db", dir);
    snprintf(junk, sizeof junk, "%s/notes.txt", dir);
    build_rank(t0, 0);
    build_rank(t1, 1);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fputs("not a trace\n", f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(t0);
    unlink(t1);
    unlink(junk);
    rmdir(dir);
    return 0;
}

static void test_rank_set(void **state)
{
    (void)state;
    gt_rank_set s;
    char *paths[] = {dir};
    assert_int_equal(gt_rank_set_load(&s, 1, paths), 0);
    assert_int_equal(s.n, 2); /* notes.txt is not an SQLite file */
    assert_string_equal(s.v[0].path, t0);
    assert_int_equal(s.v[0].rank, 0);
    assert_string_equal(s.v[1].path, t1);
    assert_int_equal(s.v[1].rank, 1);
    gt_rank_set_release(&s);
}

/* The library prints nothing: a rank set keeps its error, without the
 * program's name, for the command to print (gt_rank_set_errmsg). */
static void test_rank_set_errors(void **state)
{
    (void)state;
    gt_rank_set s;
    char empty[96], missing[96];
    snprintf(empty, sizeof empty, "%s/empty2", dir);
    mkdir(empty, 0700);
    char *p1[] = {empty};
    assert_int_equal(gt_rank_set_load(&s, 1, p1), GT_EINVAL);
    assert_int_equal(s.n, 0);
    assert_null(s.v);
    assert_non_null(strstr(gt_rank_set_errmsg(&s), "no traces in directory "));
    assert_null(strstr(gt_rank_set_errmsg(&s), "gradtrace"));
    gt_rank_set_release(&s);
    rmdir(empty);

    char *p2[] = {t0, junk};
    assert_true(gt_rank_set_load(&s, 2, p2) < 0);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(gt_rank_set_errmsg(&s), "not a gradtrace trace"));
    assert_true(strncmp(gt_rank_set_errmsg(&s), "gradtrace", 9) != 0);
    gt_rank_set_release(&s);

    snprintf(missing, sizeof missing, "%s/none.db", dir);
    char *p3[] = {missing};
    assert_int_equal(gt_rank_set_load(&s, 1, p3), GT_EIO);
    assert_non_null(strstr(gt_rank_set_errmsg(&s), "cannot open "));
    gt_rank_set_release(&s);

    /* success clears it */
    char *p4[] = {t0, t1};
    assert_int_equal(gt_rank_set_load(&s, 2, p4), 0);
    assert_string_equal(gt_rank_set_errmsg(&s), "");
    assert_int_equal(s.n, 2);
    gt_rank_set_release(&s);
}

/* A rank set's message names a path whole, however long (2,500 bytes and
 * more here): a trace that cannot be opened, an empty directory. */
static void test_rank_set_long_errors(void **state)
{
    (void)state;
    gt_rank_set s;
    gt_strbuf deep = GT_STRBUF_INIT, want = GT_STRBUF_INIT;
    gt_strbuf_adds(&deep, dir);
    for (int i = 0; i < 12; i++) {
        gt_strbuf_adds(&deep, "/");
        for (int k = 0; k < 210; k++)
            gt_strbuf_add(&deep, &"0123456789"[(i + k) % 10], 1);
        assert_false(deep.oom);
        assert_int_equal(mkdir(deep.p, 0700), 0);
    }
    assert_true(deep.len > 2500);

    char *p1[] = {deep.p};
    assert_int_equal(gt_rank_set_load(&s, 1, p1), GT_EINVAL);
    gt_strbuf_addf(&want, "no traces in directory %s", deep.p);
    assert_string_equal(gt_rank_set_errmsg(&s), want.p);
    gt_rank_set_release(&s);

    size_t dir_len = deep.len;
    gt_strbuf_adds(&deep, "/none.db");
    char *p2[] = {deep.p};
    assert_int_equal(gt_rank_set_load(&s, 1, p2), GT_EIO);
    assert_non_null(strstr(gt_rank_set_errmsg(&s), deep.p));
    gt_strbuf_reset(&want);
    gt_strbuf_addf(&want, "%s: %s", deep.p, strerror(ENOENT));
    const char *m = gt_rank_set_errmsg(&s);
    size_t n = strlen(m);
    assert_true(n >= want.len);
    assert_string_equal(m + n - want.len, want.p);
    gt_rank_set_release(&s);

    /* remove the directories, deepest first */
    deep.len = dir_len;
    deep.p[dir_len] = '\0';
    while (deep.len > strlen(dir)) {
        assert_int_equal(rmdir(deep.p), 0);
        char *slash = strrchr(deep.p, '/');
        deep.len = (size_t)(slash - deep.p);
        *slash = '\0';
    }
    gt_strbuf_release(&deep);
    gt_strbuf_release(&want);
}

static void test_multi_errors(void **state)
{
    (void)state;
    captured c;
    char *argv1[] = {"info", t0, junk, NULL};
    run_captured(gt_cmd_info, 3, argv1, NULL, &c);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "notes.txt: not a gradtrace trace (not an SQLite file)");
    captured_free(&c);

    char empty[96];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    mkdir(empty, 0700);
    char *argv2[] = {"diagnose", empty, NULL};
    run_captured(gt_cmd_diagnose, 2, argv2, NULL, &c);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "gradtrace: no traces in directory");
    captured_free(&c);
    rmdir(empty);
}

static void test_multi_info(void **state)
{
    (void)state;
    captured c;
    char *argv[] = {"info", "--json", t1, t0, NULL};
    run_captured(gt_cmd_info, 4, argv, NULL, &c);
    assert_int_equal(c.status, 0);
    /* ordered by rank whatever the argument order */
    assert_contains(
        c.out, "[{\"rank\":0,\"local_rank\":0,\"world_size\":2,\"backend\":\"gloo\"");
    assert_contains(c.out, "\"status\":\"exception (exit 1)\",\"ops\":11,");
    assert_contains(c.out, "\"first_error\":\"RuntimeError: one of the variables needed");
    assert_true(strstr(c.out, "\"rank\":0") < strstr(c.out, "\"rank\":1"));
    captured_free(&c);

    /* one trace: its rank line */
    char *one[] = {"info", t1, NULL};
    run_captured(gt_cmd_info, 2, one, NULL, &c);
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "\nrank       1 of 2 (local 1), backend gloo\nstatus ");
    captured_free(&c);
}

static void test_multi_diagnose(void **state)
{
    (void)state;
    captured c;
    char *argv[] = {"diagnose", dir, NULL};
    run_captured(gt_cmd_diagnose, 2, argv, NULL, &c);
    assert_int_equal(c.status, 1);
    assert_contains(c.out, "2 traces\n");
    assert_contains(c.out, "1 distinct finding\n");
    assert_contains(c.out, "[1] ranks 0-1: class_weights modified in place after "
                           "NllLossBackward0 saved it as weight (version 0 -> 6)");
    assert_contains(c.out, "the run raised RuntimeError: one of the variables");
    captured_free(&c);

    char *jargv[] = {"diagnose", "--json", t0, t1, NULL};
    run_captured(gt_cmd_diagnose, 4, jargv, NULL, &c);
    assert_int_equal(c.status, 1);
    assert_contains(c.out, "\"groups\":[{\"ranks\":[0,1],\"finding\":{\"kind\":"
                           "\"inplace_invalidated_saved\"");
    captured_free(&c);
}

static void test_multi_sql(void **state)
{
    (void)state;
    captured c;
    char *argv[] = {"sql",
                    "--no-header",
                    t0,
                    t1,
                    "SELECT rank, count(*) FROM op_log GROUP BY rank;"
                    " SELECT rank, backend FROM run ORDER BY rank;"
                    " SELECT rank, count(*) FROM invalidations GROUP BY rank;"
                    " SELECT rank, schema FROM traces ORDER BY rank",
                    NULL};
    run_captured(gt_cmd_sql, 5, argv, NULL, &c);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "0\t11\n1\t11\n"
                               "0\tgloo\n1\tgloo\n"
                               "0\t6\n1\t6\n" /* as on each alone: one row per bump */
                               "0\tmain\n1\tt1\n");
    captured_free(&c);

    /* still read-only: ATTACH and writes are refused */
    char *wargv[] = {"sql", t0, t1, "DELETE FROM main.ops", NULL};
    run_captured(gt_cmd_sql, 4, wargv, NULL, &c);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "refused");
    captured_free(&c);

    /* the query from stdin when every argument is a trace */
    char *sargv[] = {"sql", "--no-header", t0, t1, NULL};
    run_captured(gt_cmd_sql, 4, sargv, "SELECT count(*) FROM traces", &c);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "2\n");
    captured_free(&c);
}

/* More traces than SQLite can attach: sql says so; info and diagnose, which
 * read one trace at a time, take them all. */
static void test_many_traces(void **state)
{
    (void)state;
    int n = gt_multi_max_traces() + 1;
    char many[96];
    snprintf(many, sizeof many, "%s/many", dir);
    assert_int_equal(mkdir(many, 0700), 0);
    for (int i = 0; i < n; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/r%02d.db", many, i);
        build_rank(p, i);
    }
    captured c;
    char *sargv[] = {"sql", many, "SELECT count(*) FROM run", NULL};
    run_captured(gt_cmd_sql, 3, sargv, NULL, &c);
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "can be read at once (SQLite's limit on attached databases)");
    captured_free(&c);

    char *iargv[] = {"info", "--json", many, NULL};
    run_captured(gt_cmd_info, 3, iargv, NULL, &c);
    assert_int_equal(c.status, 0);
    char last[64];
    snprintf(last, sizeof last, "{\"rank\":%d,", n - 1);
    assert_contains(c.out, last);
    captured_free(&c);

    char *dargv[] = {"diagnose", many, NULL};
    run_captured(gt_cmd_diagnose, 2, dargv, NULL, &c);
    assert_int_equal(c.status, 1);
    char ranks[64];
    snprintf(ranks, sizeof ranks, "[1] ranks 0-%d: class_weights modified in place",
             n - 1);
    assert_contains(c.out, ranks);
    captured_free(&c);

    for (int i = 0; i < n; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/r%02d.db", many, i);
        unlink(p);
    }
    rmdir(many);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_path),
        cmocka_unit_test(test_env_rank_path),
        cmocka_unit_test(test_format_ranks),
        cmocka_unit_test(test_format_ranks_many),
        cmocka_unit_test(test_rank_set),
        cmocka_unit_test(test_rank_set_errors),
        cmocka_unit_test(test_rank_set_long_errors),
        cmocka_unit_test(test_multi_errors),
        cmocka_unit_test(test_multi_info),
        cmocka_unit_test(test_multi_diagnose),
        cmocka_unit_test(test_multi_sql),
        cmocka_unit_test(test_many_traces),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
