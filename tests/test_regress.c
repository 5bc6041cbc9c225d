/*
 * Regression tests for the files the fuzzer (tests/fuzz) found problems
 * with, committed under tests/regress/. Each runs the file through the
 * commands in-process, as tests/fuzz/fuzz_trace.c does, and checks the
 * answer: a correct (partial) result, or exit 2 with a one-line error.
 *
 * All are the seed trace (examples/seed_class_weights.py: class_weights
 * saved by NllLossBackward0, then bumped to version 6) damaged one way:
 *   huge_shapes.db            shapes/offsets/nbytes near INT64_MAX: signed
 *                             overflow in diagnose's extent arithmetic
 *                             (UBSan; fixed in ceb9a75)
 *   dangling_saved_tensor.db  saved_tensors.tensor points at no tensor: a
 *                             heap overflow in gt__json_ints (ASan; fixed in
 *                             e194462)
 *   edge_cycle.db             every node has an edge back to the root
 *   stack_cycle.db            stacks.parent of the first and last stacks
 *                             point at each other
 *   truncated.db              the file cut in half
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cmd.h"
#include "sqltrace.h"

static char *regress_path(const char *name)
{
    const char *src = getenv("GT_SOURCE_DIR");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/regress/%s", src ? src : ".", name);
    return buf;
}

/* Run one subcommand on a regression file; args after the command name,
 * "@" standing for the file's path. */
static void run_on(captured *c, int (*cmd)(int, char **), const char *file, int n, ...)
{
    char *argv[16];
    char store[16][4096];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 15; i++) {
        const char *a = va_arg(ap, const char *);
        snprintf(store[i], sizeof store[i], "%s", strcmp(a, "@") ? a : regress_path(file));
        argv[i] = store[i];
    }
    va_end(ap);
    argv[n] = NULL;
    run_captured(cmd, n, argv, NULL, c);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        printf("expected to find: %s\nin:\n%s\n", needle, hay);
        fail();
    }
}

static const char *const SEED_FINDING =
    "class_weights modified in place after NllLossBackward0 saved it as weight "
    "(version 0 -> 6)";

/* The seed's finding survives a damaged stack tree or absurd tensor
 * geometry: both only affect what is printed around it. */
static void check_seed_finding(const char *file)
{
    captured c;
    run_on(&c, gt_cmd_diagnose, file, 4, "diagnose", "--color", "never", "@");
    assert_int_equal(c.status, 1);
    assert_contains(c.out, "1 finding");
    assert_contains(c.out, SEED_FINDING);
    assert_contains(c.out, "examples/seed_class_weights.py:46");
    captured_free(&c);

    run_on(&c, gt_cmd_diagnose, file, 3, "diagnose", "--json", "@");
    assert_int_equal(c.status, 1);
    assert_contains(c.out, "\"kind\":\"inplace_invalidated_saved\"");
    captured_free(&c);
}

static void check_graph_sql_info(const char *file, const char *count_invalidations)
{
    captured c;
    char dot[] = "/tmp/gt_regress_XXXXXX.dot";
    int fd = mkstemps(dot, 4);
    assert_true(fd >= 0);
    close(fd);
    run_on(&c, gt_cmd_graph, file, 4, "graph", "-o", dot, "@");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "backward call 1, ");
    size_t len;
    char *s = slurp_file(dot, &len);
    assert_contains(s, "digraph");
    assert_contains(s, "NllLossBackward0");
    free(s);
    unlink(dot);
    captured_free(&c);

    run_on(&c, gt_cmd_sql, file, 5, "sql", "--tsv", "--no-header", "@",
           "SELECT count(*) FROM invalidations");
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, count_invalidations);
    captured_free(&c);

    run_on(&c, gt_cmd_info, file, 2, "info", "@");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "status     exception, exit code 1");
    assert_contains(c.out, "RuntimeError at ");
    captured_free(&c);
}

static void test_huge_shapes(void **state)
{
    (void)state;
    check_seed_finding("huge_shapes.db");
    check_graph_sql_info("huge_shapes.db", "6\n");
}

static void test_stack_cycle(void **state)
{
    (void)state;
    check_seed_finding("stack_cycle.db");
    check_graph_sql_info("stack_cycle.db", "6\n");
    /* (not the stack_frames view: it follows the cycle for ever, even
     * under a LIMIT -- reported to the views' owner) */
}

/* The saved tensor points nowhere: nothing links the saved value to the
 * writes, so no finding (a partial result), but no crash and the run's
 * error is still reported. */
static void test_dangling_saved_tensor(void **state)
{
    (void)state;
    captured c;
    run_on(&c, gt_cmd_diagnose, "dangling_saved_tensor.db", 3, "diagnose", "--json", "@");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "\"findings\":[]");
    assert_contains(c.out, "\"type\":\"RuntimeError\"");
    captured_free(&c);
    check_graph_sql_info("dangling_saved_tensor.db", "0\n");
}

/* A cycle through the root: the replay must end (it does: the nodes on the
 * cycle never become ready) and the graph must still be drawn. */
static void test_edge_cycle(void **state)
{
    (void)state;
    captured c;
    run_on(&c, gt_cmd_diagnose, "edge_cycle.db", 3, "diagnose", "--json", "@");
    assert_true(c.status == 0 || c.status == 1);
    assert_contains(c.out, "\"type\":\"RuntimeError\"");
    captured_free(&c);
    check_graph_sql_info("edge_cycle.db", "6\n");
    run_on(&c, gt_cmd_sql, "edge_cycle.db", 5, "sql", "--tsv", "--no-header", "@",
           "SELECT count(*) FROM graph_edges");
    assert_int_equal(c.status, 0);
    assert_string_equal(c.out, "22\n");
    captured_free(&c);
}

/* Cut in half: every command refuses it with exit 2 and one line. */
static void test_truncated(void **state)
{
    (void)state;
    captured c;
    int (*cmds[])(int, char **) = {gt_cmd_diagnose, gt_cmd_info};
    const char *names[] = {"diagnose", "info"};
    for (int i = 0; i < 2; i++) {
        run_on(&c, cmds[i], "truncated.db", 2, names[i], "@");
        assert_int_equal(c.status, 2);
        assert_string_equal(c.out, "");
        assert_contains(c.err, "gradtrace: cannot open ");
        assert_contains(c.err, "truncated.db: database disk image is malformed\n");
        assert_ptr_equal(strchr(c.err, '\n') + 1, c.err + strlen(c.err)); /* one line */
        captured_free(&c);
    }
    run_on(&c, gt_cmd_graph, "truncated.db", 4, "graph", "-o", "/tmp/gt_regress_never.dot",
           "@");
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "database disk image is malformed");
    assert_int_equal(access("/tmp/gt_regress_never.dot", F_OK), -1);
    captured_free(&c);
    run_on(&c, gt_cmd_sql, "truncated.db", 3, "sql", "@", "SELECT 1");
    assert_int_equal(c.status, 2);
    assert_string_equal(c.out, "");
    captured_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_shapes),
        cmocka_unit_test(test_stack_cycle),
        cmocka_unit_test(test_dangling_saved_tensor),
        cmocka_unit_test(test_edge_cycle),
        cmocka_unit_test(test_truncated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
