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
 *   hostile_strings.db        every string (paths, code, names, error type,
 *                             api, op names) ends in quotes, markup, \n \r,
 *                             ESC [31m, a NUL and shell text: printed as it
 *                             was, the text output drove the terminal
 *                             (issue 7; tests/fuzz/make_corpus.py)
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
        snprintf(store[i], sizeof store[i], "%s",
                 strcmp(a, "@") ? a : regress_path(file));
        argv[i] = store[i];
    }
    va_end(ap);
    argv[n] = NULL;
    run_captured(cmd, n, argv, NULL, c);
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
 * writes, so nothing is pinned (a partial result), but no crash, the run's
 * error is still reported (as an unexplained finding: never silent when
 * PyTorch raised), and the damage is: exit 2, "inconsistent" says what. */
static void test_dangling_saved_tensor(void **state)
{
    (void)state;
    captured c;
    run_on(&c, gt_cmd_diagnose, "dangling_saved_tensor.db", 3, "diagnose", "--json", "@");
    assert_int_equal(c.status, 2);
    assert_contains(c.out, "\"findings\":[{\"kind\":\"unexplained\"");
    assert_contains(c.out, "\"type\":\"RuntimeError\"");
    assert_contains(c.out, "\"inconsistent\":\"saved tensors pointing at no tensor: 9\"");
    captured_free(&c);
    run_on(&c, gt_cmd_diagnose, "dangling_saved_tensor.db", 2, "diagnose", "@");
    assert_int_equal(c.status, 2);
    assert_contains(c.out, "note: the trace's rows do not fit together (saved tensors "
                           "pointing at no tensor: 9): a damaged file; what they held is "
                           "not diagnosed\n");
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

/* Every node linked to every other (1738 edges, found by the fuzzer): dot's
 * layout ran for many minutes on it. The default drawing (sized for a
 * screen) holds a few of its nodes and is laid out; with --all, SVG is
 * refused with one line at once; DOT, which needs no layout, is still
 * written. */
static void test_dense_edges(void **state)
{
    (void)state;
    captured c;
    run_on(&c, gt_cmd_graph, "dense_edges.db", 4, "graph", "-o",
           "/tmp/gt_regress_dense.svg", "@");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, " of 44 autograd nodes");
    assert_int_equal(access("/tmp/gt_regress_dense.svg", F_OK), 0);
    unlink("/tmp/gt_regress_dense.svg");
    captured_free(&c);
    run_on(&c, gt_cmd_graph, "dense_edges.db", 5, "graph", "--all", "-o",
           "/tmp/gt_regress_dense.svg", "@");
    assert_int_equal(c.status, 2);
    /* how many edges the drawing holds depends on its grouping: the count
     * is not asserted */
    assert_contains(c.err, "gradtrace: graph: cannot lay out ");
    assert_contains(c.err, " edges between ");
    assert_ptr_equal(strchr(c.err, '\n') + 1, c.err + strlen(c.err)); /* one line */
    assert_int_equal(access("/tmp/gt_regress_dense.svg", F_OK), -1);
    captured_free(&c);
    run_on(&c, gt_cmd_graph, "dense_edges.db", 5, "graph", "--all", "-o",
           "/tmp/gt_regress_dense.dot", "@");
    assert_int_equal(c.status, 0);
    assert_int_equal(access("/tmp/gt_regress_dense.dot", F_OK), 0);
    unlink("/tmp/gt_regress_dense.dot");
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
    run_on(&c, gt_cmd_graph, "truncated.db", 4, "graph", "-o",
           "/tmp/gt_regress_never.dot", "@");
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "database disk image is malformed");
    assert_int_equal(access("/tmp/gt_regress_never.dot", F_OK), -1);
    captured_free(&c);
    run_on(&c, gt_cmd_sql, "truncated.db", 3, "sql", "@", "SELECT 1");
    assert_int_equal(c.status, 2);
    assert_string_equal(c.out, "");
    captured_free(&c);
}

/* No byte of `s` is a control character but '\n', and no C1 control
 * (U+0080..U+009F, UTF-8 c2 80..c2 9f) either. */
static void assert_no_controls(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int bad = (*p < 0x20 && *p != '\n') || *p == 0x7f ||
                  (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f);
        if (bad) {
            printf("control byte 0x%02x at offset %td in:\n%s\n", *p, (const char *)p - s,
                   s);
            fail();
        }
    }
}

/* The hostile strings come out as visible escapes in diagnose's and
 * info's text, and as JSON escapes in their JSON; diagnose's own colours
 * still work with --color always. */
static void test_hostile_strings(void **state)
{
    (void)state;
    static const char tail[] = "]]> & \\\\N \\\\\" {} | \\n\\r\\x1b[31m";
    captured c;

    run_on(&c, gt_cmd_diagnose, "hostile_strings.db", 4, "diagnose", "--color", "never",
           "@");
    assert_int_equal(c.status, 1);
    assert_no_controls(c.out);
    assert_contains(c.out, "1 finding");
    assert_contains(c.out, "the run raised RuntimeError\"; <script>alert(1)</script> ");
    assert_contains(c.out, tail);
    /* (the path is relative only when run from the source directory) */
    assert_contains(c.out, "    saved at    ");
    assert_contains(c.out, "examples/seed_class_weights.py\"; <script>alert(1)</script> "
                           "]]> & \\\\N \\\\\" {} | \\n\\r\\x1b[31m:39  in <module>\"; ");
    assert_contains(c.out, "   39 | loss = F.nll_loss(log_probs, target, "
                           "weight=class_weights)\"; <script>");
    assert_contains(c.out, "                aten::mul_.Tensor\"; <script>");
    captured_free(&c);

    run_on(&c, gt_cmd_diagnose, "hostile_strings.db", 4, "diagnose", "--color", "always",
           "@");
    assert_int_equal(c.status, 1);
    assert_contains(c.out, "\033[1m[1] \033[0m\033[1;31mclass_weights\"; <script>");
    assert_contains(c.out, tail);
    /* every ESC is one of ours: ESC [ digits/; m */
    for (const char *e = strchr(c.out, '\033'); e; e = strchr(e + 1, '\033')) {
        size_t n = strspn(e + 2, "0123456789;");
        assert_int_equal(e[1], '[');
        assert_int_equal(e[2 + n], 'm');
        assert_false(!strncmp(e, "\033[31m", 5)); /* the trace's code is not ours */
    }
    captured_free(&c);

    run_on(&c, gt_cmd_info, "hostile_strings.db", 2, "info", "@");
    assert_int_equal(c.status, 0);
    assert_no_controls(c.out);
    assert_contains(c.out, "status     exception, exit code 1");
    /* a NUL in the text is shown too, with what follows it */
    assert_contains(c.out, "  #1 Tensor.backward\"; <script>");
    assert_contains(
        c.out, "\\x1b[31m\\x00tail $(touch /tmp/gt_pwned) `id` '; DROP TABLE run; --");
    assert_contains(c.out, "  RuntimeError\"; <script>alert(1)</script> ");
    captured_free(&c);

    /* JSON: SQLite's json functions escape control characters already */
    const char *const json_args[][3] = {{"diagnose", "--json", "@"},
                                        {"info", "--json", "@"}};
    int (*cmds[])(int, char **) = {gt_cmd_diagnose, gt_cmd_info};
    for (int i = 0; i < 2; i++) {
        run_on(&c, cmds[i], "hostile_strings.db", 3, json_args[i][0], json_args[i][1],
               json_args[i][2]);
        assert_int_equal(c.status, i == 0 ? 1 : 0);
        assert_null(strchr(c.out, '\033'));
        assert_null(strchr(c.out, '\r'));
        assert_ptr_equal(strchr(c.out, '\n'), c.out + strlen(c.out) - 1);
        assert_contains(c.out, "\\n\\r\\u001b[31m\\u0000tail");
        captured_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_shapes),           cmocka_unit_test(test_stack_cycle),
        cmocka_unit_test(test_dangling_saved_tensor), cmocka_unit_test(test_edge_cycle),
        cmocka_unit_test(test_dense_edges),           cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_hostile_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
