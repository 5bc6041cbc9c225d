/* PyTorch's error messages, parsed; see pymsg.h. */
#include "pymsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where in the message the quoted texts are, before they are copied. */
typedef struct spans {
    const char *shape, *fn; /* NULL: none */
    size_t shape_len, fn_len;
} spans;

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
    static const struct {
        const char *type;
        const char *dtype;
    } types[] = {
        {"FloatTensor", "float32"},
        {"DoubleTensor", "float64"},
        {"HalfTensor", "float16"},
        {"BFloat16Tensor", "bfloat16"},
        {"LongTensor", "int64"},
        {"IntTensor", "int32"},
        {"ShortTensor", "int16"},
        {"CharTensor", "int8"},
        {"ByteTensor", "uint8"},
        {"BoolTensor", "bool"},
        {"ComplexFloatTensor", "complex64"},
        {"ComplexDoubleTensor", "complex128"},
    };
    const char *p, *q;
    if (!(p = strstr(msg, "[torch.")))
        return;
    p += 7;
    if (!strncmp(p, "cuda.", 5))
        p += 5;
    q = strchr(p, ' ');
    if (!q || q[1] != '[')
        return;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if ((size_t)(q - p) == strlen(types[i].type) && !strncmp(p, types[i].type, q - p))
            snprintf(e->dtype, sizeof e->dtype, "%s", types[i].dtype);
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
    m->shape = m->grad_fn = "";
}

/* Copy the quoted texts out of the message (the shape without spaces). */
static int keep_spans(gt_pymsg *e, const spans *sp)
{
    if (!sp->shape && !sp->fn)
        return 0;
    if (!(e->text = malloc(sp->shape_len + sp->fn_len + 2))) {
        gt__pymsg_release(e);
        return -1;
    }
    char *t = e->text;
    e->shape = t;
    for (size_t i = 0; i < sp->shape_len; i++)
        if (sp->shape[i] != ' ')
            *t++ = sp->shape[i];
    *t++ = 0;
    e->grad_fn = t;
    if (sp->fn_len)
        memcpy(t, sp->fn, sp->fn_len);
    t[sp->fn_len] = 0;
    return 0;
}

int gt__pymsg_parse(const char *msg, gt_pymsg *e)
{
    spans sp = {0};
    memset(e, 0, sizeof *e);
    e->shape = e->grad_fn = "";
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
    }
    return keep_spans(e, &sp);
}

int gt__pymsg_at_op(int kind)
{
    return kind == GT_PYMSG_LEAF || kind == GT_PYMSG_VIEW_OF_LEAF ||
           kind == GT_PYMSG_VIEW_MULTI || kind == GT_PYMSG_VIEW_NO_GRAD ||
           kind == GT_PYMSG_VIEW_INFERENCE || kind == GT_PYMSG_VIEW_CUSTOM;
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
