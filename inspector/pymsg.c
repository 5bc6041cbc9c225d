/* PyTorch's error messages, parsed; see pymsg.h. */
#include "pymsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where in the message the quoted texts are, before they are copied. */
typedef struct spans {
    const char *shape, *fn, *bshape; /* NULL: none */
    size_t shape_len, fn_len, bshape_len;
} spans;

/* PyTorch's scalar type names ("Float", as c10::toString prints them and
 * "[torch.FloatTensor" shows them) and their Python dtype names. */
static const struct {
    const char *type;
    const char *dtype;
} types[] = {{"Float", "float32"},
             {"Double", "float64"},
             {"Half", "float16"},
             {"BFloat16", "bfloat16"},
             {"Long", "int64"},
             {"Int", "int32"},
             {"Short", "int16"},
             {"Char", "int8"},
             {"Byte", "uint8"},
             {"Bool", "bool"},
             {"ComplexFloat", "complex64"},
             {"ComplexDouble", "complex128"},
             {"ComplexHalf", "complex32"}};

/* The dtype of type name p[0..n) (n bytes, "Float" or, with suffix
 * "Tensor", "FloatTensor") into out: its Python name, else the name as
 * written when allow_raw; "" if neither. */
static void dtype_of(const char *p, size_t n, const char *suffix, int allow_raw,
                     char *out, size_t len)
{
    size_t k = strlen(suffix);
    out[0] = 0;
    if (n < k || strncmp(p + n - k, suffix, k) != 0)
        return;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (n - k == strlen(types[i].type) && !strncmp(p, types[i].type, n - k)) {
            snprintf(out, len, "%s", types[i].dtype);
            return;
        }
    if (allow_raw && n - k < len)
        snprintf(out, len, "%.*s", (int)(n - k), p);
}

/* "result type Float can't be cast to the desired output type Long" */
static void parse_cast(const char *msg, gt_pymsg *e)
{
    const char *p = strstr(msg, "result type ");
    const char *q = p ? strstr(p, " can't be cast to the desired output type ") : NULL;
    if (!q)
        return;
    p += 12;
    dtype_of(p, (size_t)(q - p), "", 1, e->result_dtype, sizeof e->result_dtype);
    q += 42;
    dtype_of(q, strcspn(q, " .,;\n"), "", 1, e->out_dtype, sizeof e->out_dtype);
}

/* "output with shape [3] doesn't match the broadcast shape [2, 3]" */
static void parse_broadcast(const char *msg, spans *sp)
{
    const char *p = strstr(msg, "output with shape [");
    const char *q = p ? strstr(p, "] doesn't match the broadcast shape [") : NULL;
    if (!q)
        return;
    sp->shape = p + 19;
    sp->shape_len = (size_t)(q - sp->shape);
    sp->bshape = q + 37;
    sp->bshape_len = strcspn(sp->bshape, "]");
}

/* "Output 1 of Split is a view ...": output number and function name. */
static void parse_output_of(const char *msg, gt_pymsg *e, spans *sp)
{
    const char *p = strstr(msg, "Output ");
    char *end;
    if (!p)
        return;
    e->output_nr = strtoll(p + 7, &end, 10);
    if (end == p + 7 || strncmp(end, " of ", 4) != 0)
        return;
    sp->fn = end + 4;
    sp->fn_len = strcspn(sp->fn, " ,");
}

static void parse_versions(const char *msg, gt_pymsg *e, spans *sp)
{
    const char *p, *q;
    if (!(p = strstr(msg, "[torch.")))
        return;
    p += 7;
    if (!strncmp(p, "cuda.", 5))
        p += 5;
    q = strchr(p, ' ');
    if (!q || q[1] != '[')
        return;
    dtype_of(p, (size_t)(q - p), "Tensor", 0, e->dtype, sizeof e->dtype);
    p = q + 2;
    sp->shape = p;
    sp->shape_len = strcspn(p, "]");
    p += sp->shape_len;
    if ((q = strstr(p, "which is output ")) != NULL) {
        char *end;
        e->output_nr = strtoll(q + 16, &end, 10);
        if (!strncmp(end, " of ", 4)) {
            sp->fn = end + 4;
            sp->fn_len = strcspn(sp->fn, ",");
        }
    }
    if (!(p = strstr(p, "is at version ")))
        return;
    e->version = strtoll(p + 14, NULL, 10);
    if (!(p = strstr(p, "expected version ")))
        return;
    e->expected = strtoll(p + 17, NULL, 10);
    e->has_versions = 1;
}

void gt__pymsg_release(gt_pymsg *m)
{
    free(m->text);
    memset(m, 0, sizeof *m);
    m->shape = m->grad_fn = m->bshape = "";
}

/* Copy the quoted texts out of the message (the shapes without spaces). */
static char *copy_span(char *t, const char *p, size_t n, int nospace)
{
    for (size_t i = 0; i < n; i++)
        if (!nospace || p[i] != ' ')
            *t++ = p[i];
    *t++ = 0;
    return t;
}

static int keep_spans(gt_pymsg *e, const spans *sp)
{
    if (!sp->shape && !sp->fn && !sp->bshape)
        return 0;
    if (!(e->text = malloc(sp->shape_len + sp->fn_len + sp->bshape_len + 3))) {
        gt__pymsg_release(e);
        return -1;
    }
    char *t = e->text;
    e->shape = t;
    t = copy_span(t, sp->shape, sp->shape_len, 1);
    e->grad_fn = t;
    t = copy_span(t, sp->fn, sp->fn_len, 0);
    e->bshape = t;
    copy_span(t, sp->bshape, sp->bshape_len, 1);
    return 0;
}

int gt__pymsg_parse(const char *msg, gt_pymsg *e)
{
    spans sp = {0};
    memset(e, 0, sizeof *e);
    e->shape = e->grad_fn = e->bshape = "";
    if (!msg)
        return 0;
    if (strstr(msg, "modified by an inplace operation")) {
        e->kind = GT_PYMSG_VERSION;
        parse_versions(msg, e, &sp);
    } else if (strstr(msg, "backward through the graph a second time")) {
        e->kind = GT_PYMSG_TWICE;
    } else if (strstr(msg,
                      "a view of a leaf Variable that requires grad is being used in "
                      "an in-place operation")) {
        e->kind = GT_PYMSG_VIEW_OF_LEAF;
    } else if (strstr(msg,
                      "leaf Variable that requires grad is being used in an in-place "
                      "operation")) {
        e->kind = GT_PYMSG_LEAF;
    } else if (strstr(msg,
                      "leaf Variable that requires grad has been used in an in-place "
                      "operation") ||
               strstr(msg, "leaf variable has been moved into the graph interior")) {
        e->kind = GT_PYMSG_LEAF_MOVED;
    } else if (strstr(msg, "is the output of a function that returns multiple views")) {
        e->kind = GT_PYMSG_VIEW_MULTI;
        parse_output_of(msg, e, &sp);
    } else if (strstr(msg, "created inside a custom Function")) {
        e->kind = GT_PYMSG_VIEW_CUSTOM;
        parse_output_of(msg, e, &sp);
    } else if (strstr(msg, "created in no_grad mode and is being modified inplace")) {
        e->kind = GT_PYMSG_VIEW_NO_GRAD;
        parse_output_of(msg, e, &sp);
    } else if (strstr(msg, "created in inference mode and is being modified inplace")) {
        e->kind = GT_PYMSG_VIEW_INFERENCE;
        parse_output_of(msg, e, &sp);
    } else if (strstr(msg, "that would mutate a captured Tensor")) {
        e->kind = GT_PYMSG_CAPTURED;
    } else if (strstr(msg, "more than one element of the written-to tensor refers to a "
                           "single memory location")) {
        e->kind = GT_PYMSG_OVERLAP;
    } else if (strstr(msg, "some elements of the input tensor and the written-to tensor "
                           "refer to a single memory location")) {
        e->kind = GT_PYMSG_OVERLAP_INPUT;
    } else if (strstr(msg, "Inplace update to inference tensor outside InferenceMode")) {
        e->kind = GT_PYMSG_INFERENCE;
    } else if (strstr(msg, "can't be cast to the desired output type")) {
        e->kind = GT_PYMSG_DTYPE;
        parse_cast(msg, e);
    } else if (strstr(msg, "doesn't match the broadcast shape")) {
        e->kind = GT_PYMSG_SHAPE;
        parse_broadcast(msg, &sp);
    } else if (strstr(msg, "Can't detach views in-place")) {
        e->kind = GT_PYMSG_DETACH_VIEW;
    } else if (strstr(msg, "cannot resize variables that require grad")) {
        e->kind = GT_PYMSG_RESIZE_GRAD;
    } else if (strstr(msg, "does not require grad and does not have a grad_fn")) {
        e->kind = GT_PYMSG_NO_GRAD_FN;
    } else if (strstr(msg, "differentiated Tensor") &&
               strstr(msg, "appears to not have been used in the graph")) {
        const char *p = strstr(msg, "differentiated Tensor at index ");
        e->kind = GT_PYMSG_GRAD_UNUSED;
        e->output_nr = p ? strtoll(p + 31, NULL, 10) : -1;
    } else if (strstr(msg, "differentiated Tensor") &&
               strstr(msg, "does not require grad")) {
        e->kind = GT_PYMSG_GRAD_NO_REQ;
    }
    return keep_spans(e, &sp);
}

int gt__pymsg_at_op(int kind)
{
    return kind == GT_PYMSG_LEAF || kind == GT_PYMSG_VIEW_OF_LEAF ||
           kind == GT_PYMSG_VIEW_MULTI || kind == GT_PYMSG_VIEW_NO_GRAD ||
           kind == GT_PYMSG_VIEW_INFERENCE || kind == GT_PYMSG_VIEW_CUSTOM;
}

int gt__pymsg_refused(int kind)
{
    return kind >= GT_PYMSG_OVERLAP && kind <= GT_PYMSG_RESIZE_GRAD;
}

/* The next size of "16,8" from *s on, into *x: 1, 0 at the end, -1 if
 * malformed. */
static int next_size(const char **s, long long *x)
{
    char *end;
    if (!**s)
        return 0;
    *x = strtoll(*s, &end, 10);
    if (end == *s || (*end && *end != ','))
        return -1;
    *s = *end ? end + 1 : end;
    return 1;
}

/* The number of sizes of "16,8", -1 if malformed. */
static long count_sizes(const char *s)
{
    long n = 0;
    long long x;
    int r;
    while ((r = next_size(&s, &x)) == 1)
        n++;
    return r < 0 ? -1 : n;
}

int gt__pymsg_shape_fits(const char *recorded, const char *shown, int batched)
{
    if (!strcmp(recorded, shown))
        return 1;
    if (!batched)
        return 0;
    /* read as they come, however many sizes: no copy, no bound */
    long nr = count_sizes(recorded), nw = count_sizes(shown);
    if (nr < 0 || nw < 0 || nw >= nr)
        return 0;
    long j = 0; /* the shown sizes, in order, among the recorded ones */
    long long r, w = 0;
    const char *ws = shown;
    if (nw > 0 && next_size(&ws, &w) != 1)
        return 0;
    while (j < nw && next_size(&recorded, &r) == 1)
        if (r == w && ++j < nw && next_size(&ws, &w) != 1)
            return 0;
    return j == nw;
}
