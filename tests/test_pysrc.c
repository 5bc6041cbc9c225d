/* Unit tests of inspector/pysrc.c (reading a line of Python) and
 * inspector/pymsg.c (PyTorch's messages, as 2.13 words them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pymsg.h"
#include "pysrc.h"

static void target(const char *code, const char *want)
{
    char buf[64];
    gt__py_target(code, buf, sizeof buf);
    if (strcmp(buf, want) != 0)
        fail_msg("target of '%s': got '%s', want '%s'", code, buf, want);
}

static void test_target(void **state)
{
    (void)state;
    target("w -= lr * g", "w");
    target("    self.w *= 2", "self.w");
    target("w[0] = 1.0", "w");
    target("self.embedding.weight[PAD] = 0.0", "self.embedding.weight");
    target("right.clamp_(min=0)", "right");
    target("x.data.add_(1)", "x.data");
    target("torch.relu_(h)", "h");
    target("F.relu(h, inplace=True)", "h");
    target("nn.init.zeros_(self.fc.bias)", "self.fc.bias");
    target("x **= 2", "x");
    target("y = x + 1", "");
    target("w[0] == 1", "");
    target("x.add(1)", "");
    target("print(x)", "");
    char small[3];
    gt__py_target("longname.add_(1)", small, sizeof small);
    assert_string_equal(small, "");
}

static void written(const char *code, const char *want)
{
    char buf[64];
    gt__py_written(code, buf, sizeof buf);
    if (strcmp(buf, want) != 0)
        fail_msg("written of '%s': got '%s', want '%s'", code, buf, want);
}

static void test_written(void **state)
{
    (void)state;
    /* every form gt__py_target reads, with the subscripts kept */
    written("w -= lr * g", "w");
    written("    self.w *= 2", "self.w");
    written("w[0] = 1.0", "w[0]");
    written("self.embedding.weight[PAD] = 0.0", "self.embedding.weight[PAD]");
    written("right.clamp_(min=0)", "right");
    written("torch.relu_(h)", "h");
    written("F.relu(h, inplace=True)", "h");
    written("nn.init.zeros_(self.fc.bias)", "self.fc.bias");
    /* subscripted receivers and arguments */
    written("v1[0].add_(1)", "v1[0]");
    written("x[:, 1].mul_(2)", "x[:, 1]");
    written("lin.weight[0].zero_()", "lin.weight[0]");
    written("self.layers[2].weight.add_(1)", "self.layers[2].weight");
    written("x[idx[0], (1, 2)].fill_(0)", "x[idx[0], (1, 2)]");
    written("d['a]'].add_(1)", "d['a]']");
    written("torch.relu_(v1[0])", "v1[0]");
    written("F.relu(x[:, 1], inplace=True)", "x[:, 1]");
    written("F.relu(x[:, 1] , inplace=True)", "x[:, 1]");
    written("nn.init.zeros_(self.fc[0].bias)", "self.fc[0].bias");
    written("x[0] += 1", "x[0]");
    written("x[0][1] **= 2", "x[0][1]");
    /* not writes */
    written("y = x + 1", "");
    written("x[0] == 1", "");
    written("x.add(1)", "");
    written("x.__iadd__(1)", "");
    written("print(x[0])", "");
    written("F.relu(x[:, 1])", "");
    written("F.relu(x[0] + 1, inplace=True)", "");
    written("x[0", "");
    char small[4];
    gt__py_written("v1[0].add_(1)", small, sizeof small);
    assert_string_equal(small, "");
}

static void test_shape_fits(void **state)
{
    (void)state;
    assert_true(gt__pymsg_shape_fits("3,4", "3,4", 0));
    assert_false(gt__pymsg_shape_fits("3,4", "4", 0));
    assert_true(gt__pymsg_shape_fits("3,4", "4", 1));   /* vmap, in_dims=0 */
    assert_true(gt__pymsg_shape_fits("4,3", "4", 1));   /* in_dims=1 */
    assert_true(gt__pymsg_shape_fits("2,3,4", "4", 1)); /* nested vmap */
    assert_true(gt__pymsg_shape_fits("3,4", "", 1));    /* a sample's scalar */
    assert_false(gt__pymsg_shape_fits("3,4", "5", 1));
    assert_false(gt__pymsg_shape_fits("3,4", "4,3", 1));
    assert_false(gt__pymsg_shape_fits("4", "3,4", 1));
    assert_false(gt__pymsg_shape_fits("3,x", "3", 1));
}

/* No bound on the sizes compared (it was 64): a vmapped tensor of 101
 * dimensions against the 100 a message shows, and one size off. */
static void test_shape_fits_many_dims(void **state)
{
    (void)state;
    char rec[1024] = "7", shown[1024] = "", off[1024] = "";
    for (int i = 0; i < 100; i++) {
        size_t n = strlen(rec), k = strlen(shown), m = strlen(off);
        snprintf(rec + n, sizeof rec - n, ",%d", 2 + i % 5);
        snprintf(shown + k, sizeof shown - k, "%s%d", i ? "," : "", 2 + i % 5);
        snprintf(off + m, sizeof off - m, "%s%d", i ? "," : "", i == 99 ? 9 : 2 + i % 5);
    }
    assert_true(gt__pymsg_shape_fits(rec, shown, 1));
    assert_false(gt__pymsg_shape_fits(rec, off, 1));
    assert_false(gt__pymsg_shape_fits(shown, rec, 1));
}

static void test_assigns_mentions_comments(void **state)
{
    (void)state;
    assert_true(gt__py_assigns("y = x.exp()", "y"));
    assert_true(gt__py_assigns("a, b = h.chunk(2)", "b"));
    assert_true(gt__py_assigns("(a, b) = t", "a"));
    assert_false(gt__py_assigns("y == x", "y"));
    assert_false(gt__py_assigns("yy = x", "y"));
    assert_false(gt__py_assigns("y += 1", "y"));
    assert_false(gt__py_assigns("f(y=1)", "y"));
    assert_true(gt__py_mentions("loss = f(w, x)", "w"));
    assert_false(gt__py_mentions("loss = f(ww, self.w)", "w"));
    char code[] = "x.add_(1)  # @inplace";
    gt__py_strip_comment(code);
    assert_string_equal(code, "x.add_(1)");
    char code2[] = "s = '# not a comment'  # one";
    gt__py_strip_comment(code2);
    assert_string_equal(code2, "s = '# not a comment'");
    assert_true(gt__py_is_attribute("self.w"));
    assert_false(gt__py_is_attribute("w"));
    /* a call as a whole name: after a dot or at the start, not inside a
     * longer name (a digit continues a name too); the first whole one */
    const char *line = "a = MyDropout(0.1) or nn.Dropout(0.5, inplace=True)";
    assert_ptr_equal(gt__py_call(line, "Dropout("), strstr(line, "nn.") + 3);
    assert_non_null(gt__py_call("ctx.save_for_backward(x)", "save_for_backward("));
    assert_non_null(gt__py_call("Dropout(0.5)", "Dropout("));
    assert_null(gt__py_call("x = Dropout2(0.5) + v2Dropout(1)", "Dropout("));
    assert_null(gt__py_call("x = my_save_for_backward(x)", "save_for_backward("));
    assert_null(gt__py_call("anything", ""));
    /* brackets: a string's and a comment's do not count; stop: at the one
     * that closes the first */
    int depth = 0;
    const char *open = "out = f(0, m, reduce=\"(amax\",  # (";
    assert_ptr_equal(gt__py_brackets(open, &depth, 0), strchr(open, '#'));
    assert_int_equal(depth, 1);
    assert_int_equal(*gt__py_brackets("    include_self=False)", &depth, 0), 0);
    assert_int_equal(depth, 0);
    const char *sub = "w[i, ']'][0] = 1";
    depth = 0;
    assert_ptr_equal(gt__py_brackets(sub + 1, &depth, 1), strchr(sub, ']') + 2);
}

/* Parse into m, releasing what it held. */
static void parse(const char *msg, gt_pymsg *m)
{
    gt__pymsg_release(m);
    assert_int_equal(gt__pymsg_parse(msg, m), 0);
}

static void test_messages(void **state)
{
    (void)state;
    gt_pymsg m = {0};
    parse("one of the variables needed for gradient computation has been modified "
          "by an inplace operation: [torch.FloatTensor [16, 8]], which is output 0 "
          "of AsStridedBackward0, is at version 3; expected version 1 instead. "
          "Hint: ...",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VERSION);
    assert_int_equal(m.has_versions, 1);
    assert_string_equal(m.dtype, "float32");
    assert_string_equal(m.shape, "16,8");
    assert_int_equal(m.version, 3);
    assert_int_equal(m.expected, 1);
    assert_string_equal(m.grad_fn, "AsStridedBackward0");
    parse("Output 1 of Split is a view and is being modified inplace. This view is "
          "the output of a function that returns multiple views. Such functions do "
          "not allow the output views to be modified inplace. You should replace "
          "the inplace operation by an out-of-place one.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_MULTI);
    assert_int_equal(m.output_nr, 1);
    assert_string_equal(m.grad_fn, "Split");
    parse("A view was created in no_grad mode and is being modified inplace with "
          "grad mode enabled. Given that ...",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_NO_GRAD);
    assert_string_equal(m.grad_fn, "");
    parse("Output 0 of Slice is a view of a view which was created in no_grad mode "
          "and is being modified inplace with grad mode enabled.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_NO_GRAD);
    assert_string_equal(m.grad_fn, "Slice");
    parse("A view was created in inference mode and is being modified inplace in "
          "normal mode.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_INFERENCE);
    parse("Output 0 of MyFn is a view and is being modified inplace. This view was "
          "created inside a custom Function (or because an input was returned "
          "as-is) and ...",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_CUSTOM);
    assert_string_equal(m.grad_fn, "MyFn");
    parse("a view of a leaf Variable that requires grad is being used in an "
          "in-place operation.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_OF_LEAF);
    parse("a leaf Variable that requires grad is being used in an in-place "
          "operation.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_LEAF);
    assert_true(gt__pymsg_at_op(m.kind));
    parse("Trying to backward through the graph a second time (or ...", &m);
    assert_int_equal(m.kind, GT_PYMSG_TWICE);
    assert_false(gt__pymsg_at_op(m.kind));
    parse("a leaf Variable that requires grad has been used in an in-place "
          "operation.",
          &m);
    assert_int_equal(m.kind, GT_PYMSG_LEAF_MOVED);
    assert_false(gt__pymsg_at_op(m.kind));
    parse("leaf variable has been moved into the graph interior", &m);
    assert_int_equal(m.kind, GT_PYMSG_LEAF_MOVED);
    parse("CUDA out of memory", &m);
    assert_int_equal(m.kind, GT_PYMSG_OTHER);
    assert_false(gt__pymsg_refused(m.kind));
    parse(NULL, &m);
    assert_int_equal(m.kind, GT_PYMSG_OTHER);
    gt__pymsg_release(&m);
}

/* The in-place ops refused for what the written tensor is (refused.c):
 * each message's kind, and the dtypes and shapes it quotes. */
static void test_messages_refused(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        int kind;
    } kinds[] = {
        {"unsupported operation: more than one element of the written-to tensor refers "
         "to a single memory location. Please clone() the tensor before performing the "
         "operation.",
         GT_PYMSG_OVERLAP},
        {"unsupported operation: some elements of the input tensor and the written-to "
         "tensor refer to a single memory location. Please clone() the tensor before "
         "performing the operation.",
         GT_PYMSG_OVERLAP_INPUT},
        {"Inplace update to inference tensor outside InferenceMode is not allowed.You "
         "can "
         "make a clone to get a normal tensor before doing inplace update.",
         GT_PYMSG_INFERENCE},
        {"Can't detach views in-place. Use detach() instead. If you are using "
         "DistributedDataParallel (DDP) ...",
         GT_PYMSG_DETACH_VIEW},
        {"cannot resize variables that require grad", GT_PYMSG_RESIZE_GRAD},
    };
    gt_pymsg m = {0};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        parse(kinds[i].msg, &m);
        assert_int_equal(m.kind, kinds[i].kind);
        assert_true(gt__pymsg_refused(m.kind));
        assert_false(gt__pymsg_at_op(m.kind));
    }
    parse("result type Float can't be cast to the desired output type Long", &m);
    assert_int_equal(m.kind, GT_PYMSG_DTYPE);
    assert_string_equal(m.result_dtype, "float32");
    assert_string_equal(m.out_dtype, "int64");
    parse("result type ComplexFloat can't be cast to the desired output type Bool", &m);
    assert_string_equal(m.result_dtype, "complex64");
    assert_string_equal(m.out_dtype, "bool");
    /* a type this parser does not know is kept as PyTorch wrote it */
    parse("result type Float8_e5m2 can't be cast to the desired output type Byte", &m);
    assert_string_equal(m.result_dtype, "Float8_e5m2");
    assert_string_equal(m.out_dtype, "uint8");
    parse("output with shape [3] doesn't match the broadcast shape [2, 3]", &m);
    assert_int_equal(m.kind, GT_PYMSG_SHAPE);
    assert_string_equal(m.shape, "3");
    assert_string_equal(m.bshape, "2,3");
    assert_int_equal(m.has_versions, 0);
    parse("output with shape [] doesn't match the broadcast shape [4]", &m);
    assert_string_equal(m.shape, "");
    assert_string_equal(m.bshape, "4");
    /* cut short: the kind stays, what is missing is "" */
    parse("output with shape [1, 5", &m);
    assert_int_equal(m.kind, GT_PYMSG_OTHER);
    parse("result type Float can't be cast to the desired output type ", &m);
    assert_int_equal(m.kind, GT_PYMSG_DTYPE);
    assert_string_equal(m.out_dtype, "");
    gt__pymsg_release(&m);
}

/* No bound on what a message quotes: 300 sizes, a 400-character name. */
static void test_messages_unbounded(void **state)
{
    (void)state;
    enum { NDIM = 300, NAME = 400 };
    char *msg = malloc(NDIM * 8 + NAME + 512), *want = malloc(NDIM * 8),
         *fn = malloc(NAME + 1);
    assert_non_null(msg);
    assert_non_null(want);
    assert_non_null(fn);
    for (int i = 0; i < NAME; i++)
        fn[i] = (char)('A' + i % 26);
    fn[NAME] = 0;
    size_t n =
        (size_t)sprintf(msg, "one of the variables needed for gradient computation "
                             "has been modified by an inplace operation: "
                             "[torch.DoubleTensor [");
    size_t w = 0;
    for (int i = 0; i < NDIM; i++) {
        n += (size_t)sprintf(msg + n, "%s%d", i ? ", " : "", i % 7 + 1);
        w += (size_t)sprintf(want + w, "%s%d", i ? "," : "", i % 7 + 1);
    }
    sprintf(msg + n,
            "]], which is output 0 of %s, is at version 2; expected version 1 "
            "instead.",
            fn);
    gt_pymsg m = {0};
    parse(msg, &m);
    assert_int_equal(m.kind, GT_PYMSG_VERSION);
    assert_int_equal(m.has_versions, 1);
    assert_string_equal(m.dtype, "float64");
    assert_string_equal(m.shape, want);
    assert_string_equal(m.grad_fn, fn);
    sprintf(msg,
            "Output 3 of %s is a view and is being modified inplace. This view is the "
            "output of a function that returns multiple views.",
            fn);
    parse(msg, &m);
    assert_int_equal(m.kind, GT_PYMSG_VIEW_MULTI);
    assert_int_equal(m.output_nr, 3);
    assert_string_equal(m.grad_fn, fn);
    assert_string_equal(m.shape, "");
    gt__pymsg_release(&m);
    free(msg);
    free(want);
    free(fn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target),
        cmocka_unit_test(test_written),
        cmocka_unit_test(test_messages_unbounded),
        cmocka_unit_test(test_shape_fits),
        cmocka_unit_test(test_shape_fits_many_dims),
        cmocka_unit_test(test_assigns_mentions_comments),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_messages_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
