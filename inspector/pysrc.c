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

static void copy_name(const char *start, const char *end, char *buf, size_t len)
{
    size_t n = (size_t)(end - start);
    if (n == 0 || n >= len)
        return;
    memcpy(buf, start, n);
    buf[n] = 0;
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

void gt__py_target(const char *code, char *buf, size_t len)
{
    const char *p = code, *start, *end, *last_dot = NULL;
    int ok = 0;
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
        const char *fn = last_dot + 1;
        /* torch.relu_(w, ...) / torch.nn.init.zeros_(w): the first argument. */
        if (!strncmp(start, "torch.", 6) || !strncmp(start, "F.", 2) ||
            !strncmp(start, "nn.", 3) || !strncmp(start, "init.", 5)) {
            const char *a = p + 1, *ae;
            while (*a == ' ')
                a++;
            ae = dotted(a);
            if (ae > a && (*ae == ',' || *ae == ')' || *ae == ' '))
                copy_name(a, ae, buf, len);
            return;
        }
        (void)fn;
        copy_name(start, last_dot, buf, len); /* w.add_(...) */
        return;
    }
    if (*p == '(' && strstr(p, "inplace=True")) { /* F.relu(w, inplace=True) */
        const char *a = p + 1, *ae;
        while (*a == ' ')
            a++;
        ae = dotted(a);
        if (ae > a && (*ae == ',' || *ae == ')'))
            copy_name(a, ae, buf, len);
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
    while (*p == ' ')
        p++;
    if (*p && strchr("+-*/%&|^@<>", *p)) {
        const char *q = p + 1;
        if (*q == *p && (*p == '*' || *p == '/' || *p == '<' || *p == '>'))
            q++; /* **= //= <<= >>= */
        ok = *q == '=' && q[1] != '=';
    } else if (subscript && *p == '=' && p[1] != '=') {
        ok = 1; /* w[...] = ... */
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
    while (*eq && !(*eq == '=' && eq[1] != '=' && eq > p && !strchr("=!<>+-*/%&|^@:", eq[-1])))
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
