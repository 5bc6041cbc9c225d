/* Reading a line of Python source; see pysrc.h. */
#include "pysrc.h"

#include <ctype.h>
#include <string.h>

static int ident_char(int c)
{
    return isalnum((unsigned char)c) || c == '_';
}

int gt__py_mentions(const char *code, const char *name)
{
    size_t n = strlen(name);
    if (!n)
        return 0;
    for (const char *p = code; (p = strstr(p, name)) != NULL; p++) {
        int before = p > code && (ident_char(p[-1]) || p[-1] == '.');
        int after = ident_char(p[n]);
        if (!before && !after)
            return 1;
    }
    return 0;
}

const char *gt__py_call(const char *code, const char *call)
{
    if (!*call)
        return NULL;
    for (const char *p = code; (p = strstr(p, call)) != NULL; p++)
        if (p == code || !ident_char(p[-1]))
            return p;
    return NULL;
}

static void copy_name(const char *start, const char *end, char *buf, size_t len)
{
    size_t n = (size_t)(end - start);
    if (n == 0 || n >= len)
        return;
    memcpy(buf, start, n);
    buf[n] = 0;
}

const char *gt__py_brackets(const char *q, int *depth, int stop)
{
    char quote = 0;
    for (; *q; q++) {
        if (quote) {
            if (*q == '\\' && q[1])
                q++;
            else if (*q == quote)
                quote = 0;
        } else if (*q == '\'' || *q == '"') {
            quote = *q;
        } else if (*q == '#') {
            break;
        } else if (strchr("([{", *q)) {
            ++*depth;
        } else if (strchr(")]}", *q) && --*depth == 0 && stop) {
            break;
        }
    }
    return q;
}

/* A dotted name at p: its end. */
static const char *dotted(const char *p)
{
    if (!isalpha((unsigned char)*p) && *p != '_')
        return p;
    while (ident_char(*p) || (*p == '.' && (isalpha((unsigned char)p[1]) || p[1] == '_')))
        p++;
    return p;
}

/* The first argument of a call whose "(" is at p, when it is a dotted
 * name followed by one of `stops`, into buf; "" otherwise. */
static void call_first_arg(const char *p, const char *stops, char *buf, size_t len)
{
    const char *a = p + 1, *ae;
    while (*a == ' ')
        a++;
    ae = dotted(a);
    if (ae > a && *ae && strchr(stops, *ae))
        copy_name(a, ae, buf, len);
}

/* 1 if p (past the name written, and its subscript if any) is an augmented
 * assignment (`+=`, `**=`, ...), or with subscript a plain one (`w[i] =`). */
static int assigns_at(const char *p, int subscript)
{
    while (*p == ' ')
        p++;
    if (*p && strchr("+-*/%&|^@<>", *p)) {
        const char *q = p + 1;
        if (*q == *p && (*p == '*' || *p == '/' || *p == '<' || *p == '>'))
            q++; /* **= //= <<= >>= */
        return *q == '=' && q[1] != '=';
    }
    return subscript && *p == '=' && p[1] != '='; /* w[...] = ... */
}

void gt__py_target(const char *code, char *buf, size_t len)
{
    const char *p = code, *start, *end, *last_dot = NULL;
    buf[0] = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    start = p;
    if (!isalpha((unsigned char)*p) && *p != '_')
        return;
    while (ident_char(*p) || *p == '.') {
        if (*p == '.')
            last_dot = p;
        p++;
    }
    end = p;
    if (*p == '(' && last_dot && p[-1] == '_') {
        /* torch.relu_(w, ...) / torch.nn.init.zeros_(w): the first argument. */
        if (!strncmp(start, "torch.", 6) || !strncmp(start, "F.", 2) ||
            !strncmp(start, "nn.", 3) || !strncmp(start, "init.", 5))
            call_first_arg(p, ",) ", buf, len);
        else
            copy_name(start, last_dot, buf, len); /* w.add_(...) */
        return;
    }
    if (*p == '(' && strstr(p, "inplace=True")) { /* F.relu(w, inplace=True) */
        call_first_arg(p, ",)", buf, len);
        return;
    }
    int subscript = *p == '[';
    for (int depth = 0; subscript && *p; p++) { /* w[...] */
        if (*p == '[')
            depth++;
        else if (*p == ']' && --depth == 0) {
            p++;
            break;
        }
    }
    if (assigns_at(p, subscript))
        copy_name(start, end, buf, len);
}

/* The end of an expression at p made of a name and its trailers
 * (".name", "[...]" with brackets, parentheses and strings balanced inside),
 * p itself if there is none; *last_dot gets where the last ".name" trailer
 * starts (NULL if the last trailer is a subscript or there is none). */
static const char *trailed(const char *p, const char **last_dot)
{
    *last_dot = NULL;
    if (!isalpha((unsigned char)*p) && *p != '_')
        return p;
    while (ident_char(*p))
        p++;
    for (;;) {
        if (*p == '.' && (isalpha((unsigned char)p[1]) || p[1] == '_')) {
            *last_dot = p++;
            while (ident_char(*p))
                p++;
        } else if (*p == '[') {
            int depth = 0;
            const char *q = gt__py_brackets(p, &depth, 1);
            if (*q != ']')
                return p; /* unbalanced: the expression ends before it */
            p = q + 1;
            *last_dot = NULL;
        } else {
            return p;
        }
    }
}

/* The first argument of the call whose '(' is at p, when it is a name with
 * trailers followed by ',' or ')'. */
static void first_arg(const char *p, char *buf, size_t len)
{
    const char *a = p + 1, *ld, *ae;
    while (*a == ' ')
        a++;
    ae = trailed(a, &ld);
    const char *e = ae;
    while (*e == ' ')
        e++;
    if (ae > a && (*e == ',' || *e == ')'))
        copy_name(a, ae, buf, len);
}

void gt__py_written(const char *code, char *buf, size_t len)
{
    const char *p = code, *start, *end, *ld;
    buf[0] = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    start = p;
    end = trailed(start, &ld);
    if (end == start)
        return;
    p = end;
    if (*p == '(') {
        /* EXPR.method_(...): the receiver; torch.f_(EXPR) / F.f(EXPR, ...,
         * inplace=True): the first argument */
        int method_ = ld && p[-1] == '_' && p[-2] != '_';
        int module_fn = memchr(start, '[', (size_t)(end - start)) == NULL &&
                        (!strncmp(start, "torch.", 6) || !strncmp(start, "F.", 2) ||
                         !strncmp(start, "nn.", 3) || !strncmp(start, "init.", 5));
        if (method_ && !module_fn)
            copy_name(start, ld, buf, len);
        else if ((method_ && module_fn) || strstr(p, "inplace=True"))
            first_arg(p, buf, len);
        return;
    }
    while (*p == ' ')
        p++;
    int ok = 0;
    if (*p && strchr("+-*/%&|^@<>", *p)) {
        const char *q = p + 1;
        if (*q == *p && (*p == '*' || *p == '/' || *p == '<' || *p == '>'))
            q++; /* **= //= <<= >>= */
        ok = *q == '=' && q[1] != '=';
    } else if (*p == '=' && p[1] != '=' && end[-1] == ']') {
        ok = 1; /* EXPR[...] = ... */
    }
    if (ok)
        copy_name(start, end, buf, len);
}

int gt__py_assigns(const char *code, const char *name)
{
    size_t n = strlen(name);
    const char *p = code;
    if (!n)
        return 0;
    while (*p == ' ' || *p == '\t')
        p++;
    /* The targets: names separated by commas (optionally in parentheses),
     * up to a single '='. */
    const char *eq = p;
    while (*eq &&
           !(*eq == '=' && eq[1] != '=' && eq > p && !strchr("=!<>+-*/%&|^@:", eq[-1])))
        eq++;
    if (!*eq)
        return 0;
    for (const char *t = p; t < eq;) {
        while (t < eq && (*t == ' ' || *t == ',' || *t == '(' || *t == '['))
            t++;
        const char *e = dotted(t);
        if (e == t)
            return 0; /* something other than a list of names */
        if ((size_t)(e - t) == n && !strncmp(t, name, n))
            return 1;
        t = e;
        while (t < eq && (*t == ' ' || *t == ')' || *t == ']'))
            t++;
        if (t < eq && *t != ',')
            return 0;
    }
    return 0;
}

int gt__py_is_attribute(const char *name)
{
    return strchr(name, '.') != NULL;
}

void gt__py_strip_comment(char *code)
{
    char quote = 0;
    for (char *p = code; *p; p++) {
        if (quote) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == quote)
                quote = 0;
        } else if (*p == '\'' || *p == '"') {
            quote = *p;
        } else if (*p == '#') {
            while (p > code && (p[-1] == ' ' || p[-1] == '\t'))
                p--;
            *p = 0;
            return;
        }
    }
}

/* See pysrc.h. */
void gt__py_trim_code(gt_strbuf *code)
{
    if (!code->p || code->oom)
        return;
    char *p = code->p;
    while (*p == ' ' || *p == '\t')
        p++;
    memmove(code->p, p, strlen(p) + 1);
    gt__py_strip_comment(code->p);
    code->len = strlen(code->p);
}

/* See pysrc.h. */
void gt__py_out_of_place_line(const char *code, const char *name, gt_strbuf *out)
{
    size_t n = strlen(name);
    gt_strbuf_reset(out);
    if (!n || strncmp(code, name, n) != 0)
        return;
    const char *p = code + n;
    if (*p == '.') {
        const char *u = strchr(p, '(');
        if (!u || u[-1] != '_' || u - p < 3)
            return;
        gt_strbuf_addf(out, "%s = %s%.*s%s", name, name, (int)(u - 1 - p), p, u);
        return;
    }
    while (*p == ' ')
        p++;
    static const char *ops[] = {
        "**=", "//=", "<<=", ">>=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@="};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t k = strlen(ops[i]);
        if (!strncmp(p, ops[i], k)) {
            const char *rhs = p + k;
            while (*rhs == ' ')
                rhs++;
            gt_strbuf_addf(out, "%s = %s %.*s (%s)", name, name, (int)(k - 1), ops[i],
                           rhs);
            return;
        }
    }
}

/* See pysrc.h. */
const char *gt__py_without_alias(const char *code, gt_strbuf *out)
{
    static const char *const cut[] = {".detach()", ".data"};
    gt_strbuf_reset(out);
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(cut[i]);
        for (const char *p = strstr(code, cut[i]); p; p = strstr(p + 1, cut[i])) {
            char next = p[n];
            if (i == 1 && (next == '_' || (next >= 'a' && next <= 'z') ||
                           (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9')))
                continue;
            gt_strbuf_addf(out, "%.*s%s", (int)(p - code), code, p + n);
            return i ? ".data" : "detach()";
        }
    }
    return NULL;
}

/* See pysrc.h. */
int gt__py_ddp_fixed_line(const char *code, gt_strbuf *out)
{
    gt_strbuf_reset(out);
    const char *call = strstr(code, "DistributedDataParallel(");
    if (!call)
        call = strstr(code, "DDP(");
    size_t n = strlen(code);
    while (n && (code[n - 1] == ' ' || code[n - 1] == '\t'))
        n--;
    if (!call || !n || code[n - 1] != ')' || strstr(code, "find_unused_parameters"))
        return -1;
    gt_strbuf_addf(out, "%.*s, find_unused_parameters=True)", (int)(n - 1), code);
    return out->oom ? -1 : 0;
}

/* See pysrc.h. */
void gt__py_module_of(const char *name, gt_strbuf *out)
{
    const char *dot = name ? strrchr(name, '.') : NULL;
    gt_strbuf_reset(out);
    if (dot)
        gt_strbuf_add(out, name, (size_t)(dot - name));
}
