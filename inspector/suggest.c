/* The fix for each kind of finding, as one line of text; see
 * diagnose_int.h. */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>
#include <gradtrace/kwrites.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* "aten::add_.Tensor" -> "add" (the out-of-place method name), into out
 * (emptied first). */
static void out_of_place(const char *op, gt_strbuf *out)
{
    const char *p = strstr(op, "::");
    p = p ? p + 2 : op;
    size_t n = strcspn(p, ".");
    while (n > 0 && p[n - 1] == '_')
        n--;
    gt_strbuf_reset(out);
    gt_strbuf_add(out, p, n);
}

/* 1 if the n bytes at op name an in-place activation ("aten::relu_",
 * also with an overload ".default"; with aten_prefix 0, "relu_" alone). */
static int activation_span(const char *op, size_t n, int aten_prefix)
{
    static const char *acts[] = {
        "aten::relu_",
        "aten::threshold_",
        "aten::hardtanh_",
        "aten::leaky_relu_",
        "aten::elu_",
        "aten::celu_",
        "aten::selu_",
        "aten::silu_",
        "aten::mish_",
        "aten::hardswish_",
        "aten::hardsigmoid_",
        "aten::rrelu_",
        "aten::relu6_",
        "aten::gelu_",
        "aten::sigmoid_",
        "aten::tanh_",
        "aten::rrelu_with_noise_",
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        const char *a = acts[i] + (aten_prefix ? 0 : 6); /* past "aten::" */
        size_t k = strlen(a);
        if (n >= k && !strncmp(op, a, k) && (n == k || op[k] == '.'))
            return 1;
    }
    return 0;
}

static int is_activation_inplace(const char *op)
{
    return activation_span(op, strlen(op), 1);
}

/* f->suggestion from a format, whole however long the names and lines in
 * it; GT_ENOMEM when out of memory. */
static int set_suggestion(gt__dctx *c, gt_finding *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int set_suggestion(gt__dctx *c, gt_finding *f, const char *fmt, ...)
{
    gt_strbuf b = GT_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    gt_strbuf_vaddf(&b, fmt, ap);
    va_end(ap);
    free(f->suggestion);
    f->suggestion = gt_strbuf_detach(&b);
    return f->suggestion ? 0 : gt__dx_nomem(c);
}

/* The texts the suggestions are built from, on the heap: names and source
 * lines are as long as the user wrote them. One set per gt__dx_suggest,
 * released there; an allocation that failed in any of them fails the
 * diagnosis (c->oom). */
typedef struct sg {
    gt_strbuf name, mname, where, code, mwhere, mcode, oop, act, clone;
    gt__opinfo o;
} sg;

static void sg_release(gt__dctx *c, sg *t)
{
    gt_strbuf *all[] = {&t->name,  &t->mname, &t->where, &t->code, &t->mwhere,
                        &t->mcode, &t->oop,   &t->act,   &t->clone};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i]->oom)
            c->oom = 1;
        gt_strbuf_release(all[i]);
    }
    gt__dx_op_release(&t->o);
}

#define S(b) gt_strbuf_str(&(b))

/* 1 if the tensor has (or had) a grad_fn or is a parameter: an output of
 * a node, a view of one, a tensor an AccumulateGrad node accumulates into,
 * or one recorded as requiring grad. Such tensors are not the "constant
 * updated in place" of the seed story. */
static int has_autograd(gt__dctx *c, int64_t tensor)
{
    int yes = 0;
    for (int depth = 0; tensor && depth < 16 && !yes; depth++) {
        gt__tinfo t;
        if (gt__dx_load_tensor(c, tensor, &t) != 0)
            break;
        int found = t.found, requires_grad = t.requires_grad;
        int64_t base = t.alias_of;
        gt__dx_tinfo_release(&t);
        if (!found)
            break;
        if (requires_grad)
            return 1;
        yes = gt__dx_int(c,
                         "SELECT EXISTS (SELECT 1 FROM node_outputs WHERE tensor = ?1)"
                         " OR EXISTS (SELECT 1 FROM nodes WHERE variable = ?1)",
                         tensor, 0, NULL, 0) != 0;
        tensor = base;
    }
    return yes;
}

/* The torch.nn module built with inplace=True inside which the op at
 * `stack` ran (nn.Dropout, nn.ReLU, nn.Hardtanh, ...: its forward passes
 * self.inplace on), its class name ("Dropout") into cls (emptied first); 0
 * if the op ran in none. */
static int inplace_module(gt__dctx *c, int64_t stack, gt_strbuf *cls)
{
    gt__dx_text(
        c,
        "WITH RECURSIVE up(id, d) AS (SELECT ?1, 0 UNION ALL SELECT s.parent, up.d + 1"
        " FROM stacks s JOIN up ON s.id = up.id WHERE s.parent IS NOT NULL AND up.d < 64)"
        " SELECT substr(fn.text, 1, length(fn.text) - 8) FROM up"
        " JOIN stacks s ON s.id = up.id JOIN frames f ON f.id = s.frame"
        " JOIN strings sf ON sf.id = f.file JOIN strings fn ON fn.id = f.function"
        " JOIN strings sc ON sc.id = f.code WHERE sf.text LIKE '%/torch/nn/modules/%'"
        " AND fn.text LIKE '%_.forward' AND instr(sc.text, 'self.inplace') > 0"
        " ORDER BY up.d LIMIT 1",
        stack, cls);
    return cls->len > 0;
}

/* Does `stack` pass through a frame of a file whose path is LIKE `like`
 * (an optimizer's step runs under torch/optim/optimizer.py, a subclass's
 * too)? */
static int stack_through(gt__dctx *c, int64_t stack, const char *like)
{
    int found =
        gt__dx_int(c,
                   "WITH RECURSIVE up(id, d) AS (SELECT ?1, 0 UNION ALL"
                   " SELECT s.parent, up.d + 1 FROM stacks s JOIN up ON s.id = up.id"
                   " WHERE s.parent IS NOT NULL AND up.d < 256)"
                   " SELECT 1 FROM up JOIN stacks s ON s.id = up.id"
                   " JOIN frames f ON f.id = s.frame JOIN strings sf"
                   " ON sf.id = f.file WHERE sf.text LIKE ?2 LIMIT 1",
                   stack, 0, like, 0) != 0;
    return found;
}

/* The one line of the user's file (that of the innermost user frame of
 * `stack`) that builds an nn.`cls` with inplace=True ("nn.Dropout(0.5,
 * inplace=True)"), read from the source file while it holds what ran
 * (gt__dx_source): its number, and the file
 * into file (as the trace names it, relative to the working directory
 * below it); 0 if there is none or more than one. */
static int64_t built_at(gt__dctx *c, int64_t stack, const char *cls, gt_strbuf *file)
{
    gt_loc l;
    int64_t found = 0;
    gt_strbuf call = GT_STRBUF_INIT;
    gt_strbuf_reset(file);
    int rc = gt_trace_loc(c->t, stack, &l);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    if (rc != 1)
        return 0;
    gt_strbuf_addf(&call, "%s(", cls);
    const char *const *src = NULL; /* as long as it holds what ran */
    size_t nsrc = call.oom ? 0 : gt__dx_source(c, l.file, &src);
    for (size_t i = 0; i < nsrc; i++) {
        char *line = strdup(src[i]);
        if (!line) {
            c->oom = 1;
            break;
        }
        gt__py_strip_comment(line); /* a comment builds nothing */
        const char *p = gt__py_call(line, S(call));
        int hit = p && strstr(p, "inplace=True");
        free(line);
        if (!hit)
            continue;
        if (found) {
            found = 0;
            break; /* two: which one is not known */
        }
        found = (int64_t)i + 1;
    }
    if (found) {
        gt__dx_stack_loc(c, stack, file, NULL, NULL);
        char *colon = file->p ? strrchr(file->p, ':') : NULL;
        if (colon) { /* "path:line" -> "path" */
            *colon = 0;
            file->len = (size_t)(colon - file->p);
        }
    }
    if (call.oom)
        c->oom = 1;
    gt_strbuf_release(&call);
    gt_loc_release(&l);
    return found;
}

/* The out-of-place form of every line that wrote the saved tensor, each
 * line once, into t->oop: "`a = a / (k)`" for one line, "`a = a / (k)`,
 * and at f.py:21 `b = b / (k)`" for several (every write has to go for
 * the backward to find the version it saved). A line's variable is the
 * one it changes (`widths /= k` through a view of the saved tensor), else
 * mn. Empty when a line is of no form out_of_place_line knows. */
static void oop_of_writes(gt__dctx *c, const gt_finding *f, const char *mn, sg *t)
{
    gt_strbuf one = GT_STRBUF_INIT, where = GT_STRBUF_INIT, code = GT_STRBUF_INIT;
    gt_strbuf seen = GT_STRBUF_INIT; /* "\nfile:line\n" of each line done */
    gt__opinfo o;
    memset(&o, 0, sizeof o);
    o.name = "";
    int ok = 1;
    gt_strbuf_reset(&t->oop);
    gt_strbuf_adds(&seen, "\n");
    for (size_t i = 0; ok && i < f->n_mutations; i++) {
        gt__dx_load_op(c, f->mutations[i].seq, &o);
        gt__dx_stack_loc(c, o.stack, &where, &code, NULL);
        gt__py_trim_code(&code);
        gt_strbuf_reset(&one);
        gt_strbuf_addf(&one, "\n%s\n", S(where));
        if (!S(where)[0] || strstr(S(seen), S(one)))
            continue;
        gt_strbuf_adds(&seen, S(one) + 1);
        size_t room = strlen(S(code)) + 1;
        char *target = malloc(room);
        if (!target) {
            c->oom = 1;
            break;
        }
        gt__py_target(S(code), target, room);
        gt__py_out_of_place_line(S(code), target[0] ? target : mn, &one);
        if (!S(one)[0] && f->mutations[i].tensor == f->tensor) {
            /* `laterals[i - 1] += y` wrote the saved tensor itself, not a
             * view of it: the subscript is a list's (or a dict's), so
             * binding a new tensor to it leaves the saved one alone */
            gt__py_written(S(code), target, room);
            gt__py_out_of_place_line(S(code), target, &one);
        }
        free(target);
        if (!S(one)[0]) {
            ok = 0;
            break;
        }
        if (t->oop.len)
            gt_strbuf_addf(&t->oop, "`, and at %s `", S(where));
        gt_strbuf_adds(&t->oop, S(one));
    }
    if (!ok)
        gt_strbuf_reset(&t->oop);
    gt_strbuf *all[] = {&one, &where, &code, &seen};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i]->oom)
            c->oom = 1;
        gt_strbuf_release(all[i]);
    }
    gt__dx_op_release(&o);
}

/* "path:N" in where, N replaced by line (kept when line is 0). */
static void where_line(gt_strbuf *where, int64_t line)
{
    char *colon = where->p ? strrchr(where->p, ':') : NULL;
    if (!colon || line <= 0)
        return;
    where->len = (size_t)(colon - where->p);
    gt_strbuf_addf(where, ":%lld", (long long)line);
}

/* The line a statement ends on, for a fix said "after" it: a call whose
 * arguments go on over more lines (`out = out.scatter_reduce(0, i, m,\n
 * reduce="amax")`) ends where its brackets close. Read from the source
 * file, as long as it still holds the recorded line; the recorded line
 * when it does not. */
static int64_t statement_end(gt__dctx *c, int64_t stack)
{
    gt_loc l;
    int rc = gt_trace_loc(c->t, stack, &l);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    if (rc != 1)
        return 0;
    int64_t end = l.line;
    const char *const *lines = NULL;
    size_t n = 0;
    /* the shared reader: 0 lines when the file changed since the run */
    rc = l.file && l.line > 0 ? gt_trace_source(c->t, l.file, &lines, &n) : 0;
    if (rc == GT_ENOMEM)
        c->oom = 1;
    int depth = 0;
    for (size_t i = (size_t)l.line - 1; rc > 0 && i < n; i++) {
        const char *line = lines[i];
        const char *e = gt__py_brackets(line, &depth, 0);
        end = (int64_t)i + 1;
        int cont = 0;
        if (!*e) { /* no comment: a backslash at its end goes on */
            while (e > line && isspace((unsigned char)e[-1]))
                e--;
            cont = e > line && e[-1] == '\\';
        }
        if (depth <= 0 && !cont)
            break;
    }
    gt_loc_release(&l);
    return end;
}

/* The dotted name whose in-place method op `op` ("aten::normal_") the line
 * calls inside an expression ("b = m.b + n * self.eps.normal_()" gives
 * "self.eps"), into buf (room: strlen(code) + 1); "" if none. */
static void method_receiver(const char *code, const char *op, char *buf, size_t room)
{
    const char *m = strstr(op, "::");
    m = m ? m + 2 : op;
    size_t mlen = strcspn(m, ".");
    buf[0] = 0;
    for (const char *p = strchr(code, '.'); p; p = strchr(p + 1, '.')) {
        if (strncmp(p + 1, m, mlen) || p[1 + mlen] != '(')
            continue;
        const char *b = p;
        while (b > code &&
               (isalnum((unsigned char)b[-1]) || b[-1] == '_' || b[-1] == '.'))
            b--;
        if (b < p && (size_t)(p - b) < room && !isdigit((unsigned char)*b) && *b != '.') {
            memcpy(buf, b, (size_t)(p - b));
            buf[p - b] = 0;
            return;
        }
    }
}

/* The stack of the op that made node `node`, 0 if unknown. */
static int64_t node_stack(gt__dctx *c, int64_t node)
{
    return gt__dx_int(c,
                      "SELECT coalesce(o.stack, 0) FROM nodes n "
                      "JOIN ops o ON o.seq = n.op WHERE n.id = ?1",
                      node, 0, NULL, 0);
}

/* The clone() alternative to an out-of-place rewrite, said with where it
 * goes, into out: "`x = x.clone()` after f.py:16" when the line that
 * saved x assigns it (a clone there leaves the saved tensor alone, and
 * every view taken later is a view of the clone), else "`v = v.clone()`
 * before f.py:20" for the one line that writes it (mn: its variable),
 * else "" (several lines, no name: nowhere one clone fits). */
static void clone_at(gt__dctx *c, const gt_finding *f, const char *name, const char *mn,
                     gt_strbuf *out)
{
    gt_strbuf where = GT_STRBUF_INIT, code = GT_STRBUF_INIT;
    gt_strbuf_reset(out);
    int64_t stack = name[0] && f->node ? node_stack(c, f->node) : 0;
    if (stack)
        gt__dx_stack_loc(c, stack, &where, &code, NULL);
    if (S(where)[0] && gt__py_assigns(S(code), name)) {
        /* after the statement's last line: "path:N" of its first, N moved */
        where_line(&where, statement_end(c, stack));
        gt_strbuf_addf(out, "`%s = %s.clone()` after %s", name, name, S(where));
    } else if (mn[0] && f->n_mutations) {
        int one = 1;
        gt__opinfo o;
        memset(&o, 0, sizeof o);
        o.name = "";
        gt_strbuf_reset(&where);
        gt_strbuf line = GT_STRBUF_INIT;
        for (size_t i = 0; i < f->n_mutations && one; i++) {
            gt__dx_load_op(c, f->mutations[i].seq, &o);
            gt__dx_stack_loc(c, o.stack, &code, i ? NULL : &line, NULL);
            if (!i)
                gt_strbuf_adds(&where, S(code));
            one = S(code)[0] && !strcmp(S(code), S(where));
        }
        gt__dx_op_release(&o);
        /* no name, but the line writes the saved tensor itself through an
         * expression (`laterals[i - 1] += y`): that expression is rebound */
        char *written = malloc(strlen(S(line)) + 1);
        if (!written)
            c->oom = 1;
        else if (!name[0] && f->mutations[0].tensor == f->tensor)
            gt__py_written(S(line), written, strlen(S(line)) + 1);
        else
            written[0] = 0;
        /* the clone goes before that line: of the name the line writes
         * when mn is not in it (a function's argument: `token += pos` in
         * forward(token), where the caller's name was quant) */
        if (written && !written[0] && !gt__py_mentions(S(line), mn))
            gt__py_target(S(line), written, strlen(S(line)) + 1);
        const char *cn = written && written[0] ? written : mn;
        if (one)
            gt_strbuf_addf(out, "`%s = %s.clone()` before %s", cn, cn, S(where));
        free(written);
        if (line.oom)
            c->oom = 1;
        gt_strbuf_release(&line);
    }
    if (where.oom || code.oom)
        c->oom = 1;
    gt_strbuf_release(&where);
    gt_strbuf_release(&code);
}

/* 1 if node `node` was made by an op of the line "file:line" `where`. */
static int same_line_as_node(gt__dctx *c, int64_t node, const char *where)
{
    gt_strbuf w = GT_STRBUF_INIT;
    gt__dx_stack_loc(c, node_stack(c, node), &w, NULL, NULL);
    int same = !strcmp(S(w), where);
    if (w.oom)
        c->oom = 1;
    gt_strbuf_release(&w);
    return same;
}

/* The variable a line assigns and also reads on its right-hand side
 * ("hidden" of "out, hidden = lstm(x, hidden)"), into name (emptied
 * first); 0 if none. */
static int fed_back_name(const char *code, gt_strbuf *name)
{
    gt_strbuf_reset(name);
    while (*code == ' ' || *code == '\t')
        code++;
    const char *eq = strchr(code, '=');
    if (!eq || eq == code || eq[1] == '=' || strchr("!<>=+-*/%&|^@", eq[-1]))
        return 0;
    for (const char *p = code; p < eq;) {
        while (p < eq && strchr(" ,()[]", *p))
            p++;
        size_t k = 0;
        while (p + k < eq && !strchr(" ,()[]", p[k]))
            k++;
        if (!k)
            break;
        gt_strbuf_reset(name);
        gt_strbuf_add(name, p, k);
        if (!name->oom && gt__py_mentions(eq + 1, S(*name)))
            return 1;
        p += k;
    }
    gt_strbuf_reset(name);
    return 0;
}

/* The tensors a loop carries from one iteration into the next through the
 * graph: made by a node before the earlier backward call `before` (event
 * seq), then taken as inputs, with grad mode on, by ops between that call
 * and the failing one `until`, on the same source line that made them
 * (`out, (h, c) = lstm(x, (h, c))`): a recurrent state fed back without
 * detach(), so the new loss's backward goes on into the earlier
 * iteration's graph. The line that detaches them all goes into code
 * ("hx = hx.detach()", "h, c = h.detach(), c.detach()") and the
 * "file:line" that made them into where; 0 if there is none (or none has
 * a name). */
static int carried_state(gt__dctx *c, int64_t before, int64_t until, gt_strbuf *code,
                         gt_strbuf *where)
{
    sqlite3_stmt *st = NULL;
    gt_strbuf use = GT_STRBUF_INIT, made = GT_STRBUF_INIT, name = GT_STRBUF_INIT;
    gt_strbuf seen = GT_STRBUF_INIT, rhs = GT_STRBUF_INIT, key = GT_STRBUF_INIT;
    gt_strbuf unnamed = GT_STRBUF_INIT, line = GT_STRBUF_INIT;
    int n = 0;
    gt_strbuf_reset(code);
    gt_strbuf_reset(where);
    gt_strbuf_adds(&seen, "\n");
    st = gt__dx_stmt(c, "SELECT a.tensor, coalesce(o.stack, 0), "
                        "coalesce((SELECT stack FROM ops WHERE seq = t.created_by), 0) "
                        "FROM op_args a JOIN ops o ON o.seq = a.op "
                        "JOIN tensors t ON t.id = a.tensor "
                        "WHERE a.role = 0 AND a.op > ?1 AND a.op < ?2 "
                        "AND o.grad_mode = 1 AND t.created_by < ?1 "
                        "AND EXISTS (SELECT 1 FROM node_outputs n "
                        "WHERE n.tensor = a.tensor) ORDER BY a.op, a.pos");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, before);
        sqlite3_bind_int64(st, 2, until);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            gt__dx_stack_loc(c, sqlite3_column_int64(st, 1), &use, NULL, NULL);
            gt__dx_stack_loc(c, sqlite3_column_int64(st, 2), &made, NULL, NULL);
            if (!S(use)[0] || strcmp(S(use), S(made)) != 0 ||
                (n && strcmp(S(made), S(*where)) != 0))
                continue;
            gt__dx_first_name(c, sqlite3_column_int64(st, 0), &name);
            if (!S(name)[0] && !unnamed.len)
                gt__dx_stack_loc(c, sqlite3_column_int64(st, 2), &unnamed, &line, NULL);
            gt_strbuf_reset(&key);
            gt_strbuf_addf(&key, "\n%s\n", S(name));
            if (!S(name)[0] || strstr(S(seen), S(key)))
                continue;
            gt_strbuf_adds(&seen, S(key) + 1);
            if (!n++)
                gt_strbuf_adds(where, S(made));
            gt_strbuf_addf(code, "%s%s", n > 1 ? ", " : "", S(name));
            gt_strbuf_addf(&rhs, "%s%s.detach()", n > 1 ? ", " : "", S(name));
        }
        if (s == SQLITE_DONE)
            s = SQLITE_OK;
    }
    gt__dx_done(c, st, s);
    if (n)
        gt_strbuf_addf(code, " = %s", S(rhs));
    else if (unnamed.len && fed_back_name(S(line), &name)) {
        /* no tensor variable holds the state: a tuple does ((h, c) of
         * nn.LSTM, `out, hidden = lstm(x, hidden)`) */
        n = 1;
        gt_strbuf_adds(where, S(unnamed));
        gt_strbuf_addf(code, "%s = tuple(s.detach() for s in %s)", S(name), S(name));
    }
    gt_strbuf *all[] = {&use, &made, &name, &seen, &rhs, &key, &unnamed, &line};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i]->oom)
            c->oom = 1;
        gt_strbuf_release(all[i]);
    }
    return n > 0;
}

/* The fix when carried_state found the state: detach it where it is made. */
static int suggest_detach_carried(gt__dctx *c, gt_finding *f, const char *code,
                                  const char *where, const char *why)
{
    return set_suggestion(
        c, f,
        "detach the state the loop carries into the next iteration: `%s` after %s, "
        "the line that makes it and takes it back in the next iteration; without it "
        "the new loss's backward() goes on into the earlier iteration's graph, %s",
        code, where, why);
}

/* The one target a line assigns as a whole, a name or an attribute path
 * ("self.scale" of "self.scale = torch.exp(w)"), into name (emptied
 * first); "" if the line is no such assignment. */
static void assigned_name(const char *code, gt_strbuf *name)
{
    gt_strbuf_reset(name);
    while (*code == ' ' || *code == '\t')
        code++;
    size_t n = 0;
    while (code[n] == '_' || code[n] == '.' || (code[n] >= 'a' && code[n] <= 'z') ||
           (code[n] >= 'A' && code[n] <= 'Z') || (n && code[n] >= '0' && code[n] <= '9'))
        n++;
    const char *p = code + n;
    while (*p == ' ')
        p++;
    if (n && code[0] != '.' && code[n - 1] != '.' && p[0] == '=' && p[1] != '=')
        gt_strbuf_add(name, code, n);
}

/* A tensor with a graph, made before the earlier backward call (event
 * seq `before`) and taken again, with grad mode on, by an op between that
 * call and the failing one (`until`): the new loss reuses it, so its
 * backward goes on into a graph the earlier call freed (a value computed
 * once before the loop, or in __init__; log-probabilities kept from an
 * earlier update). The one whose graph reaches node `node` (the freed
 * one) if any, else the first. Its name into name (may be ""), the
 * "file:line" and function of the line that made it into where and fn,
 * the names of the leaves its graph leads to (", "-joined, at most 4) into
 * leaves, that line's code into code. 0 if there is none. */
static int reused_graph(gt__dctx *c, int64_t before, int64_t until, int64_t node,
                        gt_strbuf *name, gt_strbuf *where, gt_strbuf *fn,
                        gt_strbuf *leaves, gt_strbuf *code)
{
    sqlite3_stmt *st = NULL;
    int64_t pick = 0, pick_stack = 0, pick_node = 0;
    gt_strbuf_reset(name);
    gt_strbuf_reset(where);
    gt_strbuf_reset(fn);
    gt_strbuf_reset(leaves);
    st = gt__dx_stmt(
        c,
        "SELECT a.tensor, coalesce((SELECT stack FROM ops WHERE seq = t.created_by), 0),"
        " (SELECT min(n.node) FROM node_outputs n WHERE n.tensor = a.tensor),"
        " ?3 IN (WITH RECURSIVE r(id) AS (SELECT (SELECT min(n.node) FROM node_outputs n"
        "  WHERE n.tensor = a.tensor) UNION SELECT e.next FROM edges e"
        "  JOIN r ON e.node = r.id WHERE e.next IS NOT NULL LIMIT 100000) SELECT id FROM "
        "r)"
        " FROM op_args a JOIN ops o ON o.seq = a.op JOIN tensors t ON t.id = a.tensor"
        " WHERE a.role = 0 AND a.op > ?1 AND a.op < ?2 AND o.grad_mode = 1"
        " AND o.phase != 1 AND t.created_by < ?1 AND EXISTS (SELECT 1 FROM node_outputs n"
        " WHERE n.tensor = a.tensor) ORDER BY a.op, a.pos LIMIT 64");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, before);
        sqlite3_bind_int64(st, 2, until);
        sqlite3_bind_int64(st, 3, node);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            int reaches = sqlite3_column_int(st, 3);
            if (!pick || reaches) {
                pick = sqlite3_column_int64(st, 0);
                pick_stack = sqlite3_column_int64(st, 1);
                pick_node = sqlite3_column_int64(st, 2);
            }
            if (reaches)
                break;
        }
        if (s == SQLITE_DONE)
            s = SQLITE_OK;
    }
    gt__dx_done(c, st, s);
    st = NULL;
    if (!pick)
        return 0;
    gt__dx_first_name(c, pick, name);
    gt__dx_stack_loc(c, pick_stack, where, code, NULL);
    if (!S(*name)[0])
        assigned_name(S(*code), name); /* `self.scale = torch.exp(...)` */
    gt_loc l;
    int r = gt_trace_loc(c->t, pick_stack, &l);
    if (r == GT_ENOMEM)
        c->oom = 1;
    if (r == 1 && l.function)
        gt_strbuf_adds(fn, l.function);
    gt_loc_release(&l);
    st = gt__dx_stmt(c,
                     "WITH RECURSIVE r(id) AS (SELECT ?1 UNION SELECT e.next FROM edges e"
                     " JOIN r ON e.node = r.id WHERE e.next IS NOT NULL LIMIT 100000)"
                     " SELECT DISTINCT n.variable FROM r JOIN nodes n ON n.id = r.id"
                     " WHERE n.variable IS NOT NULL ORDER BY n.variable LIMIT 4");
    s = SQLITE_OK;
    if (st) {
        gt_strbuf one = GT_STRBUF_INIT;
        sqlite3_bind_int64(st, 1, pick_node);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            gt__dx_first_name(c, sqlite3_column_int64(st, 0), &one);
            if (S(one)[0])
                gt_strbuf_addf(leaves, "%s%s", leaves->len ? ", " : "", S(one));
        }
        if (s == SQLITE_DONE)
            s = SQLITE_OK;
        if (one.oom)
            c->oom = 1;
        gt_strbuf_release(&one);
    }
    gt__dx_done(c, st, s);
    if (name->oom || where->oom || fn->oom || leaves->oom)
        c->oom = 1;
    return 1;
}

/* 1 if the line adds onto `name` in place ("loss += loss_t",
 * "total -= x"), else 0. */
static int accumulates(const char *code, const char *name)
{
    size_t n = strlen(name);
    while (*code == ' ' || *code == '\t')
        code++;
    if (!n || strncmp(code, name, n))
        return 0;
    code += n;
    while (*code == ' ')
        code++;
    return (code[0] == '+' || code[0] == '-') && code[1] == '=';
}

/* The subscript of `name` the right-hand side of an assignment reads
 * ("f[i] = f[i - 1] * x" and "f" give "f[i - 1]") into buf, a buffer of
 * strlen(code) + 1 bytes; "" if the line has none. */
static void read_subscript(const char *code, const char *name, char *buf)
{
    size_t n = strlen(name);
    const char *p = code;
    buf[0] = 0;
    for (int depth = 0; *p; p++) { /* the first top-level plain `=` */
        if (*p == '[' || *p == '(')
            depth++;
        else if (*p == ']' || *p == ')')
            depth--;
        else if (*p == '=' && !depth && p[1] != '=' && p > code &&
                 !strchr("=<>!+-*/%&|^@", p[-1]))
            break;
    }
    if (!*p || !n)
        return;
    for (p++; (p = strstr(p, name)) != NULL; p += n) {
        int before =
            p > code && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.');
        if (before || p[n] != '[')
            continue;
        const char *e = p + n;
        int depth = 0;
        do {
            depth += *e == '[';
            depth -= *e == ']';
            e++;
        } while (*e && depth);
        if (depth)
            return;
        memcpy(buf, p, (size_t)(e - p));
        buf[e - p] = 0;
        return;
    }
}

/* The one integer `sql` gives for ?1 = a and ?2 = b, 0 if none. */
static int64_t int_of(gt__dctx *c, const char *sql, int64_t a, int64_t b)
{
    return gt__dx_int(c, sql, a, b, NULL, 0);
}

/* event seq of backward call `id`, 0 if none */
static int64_t backward_seq(gt__dctx *c, int64_t id)
{
    return int_of(c, "SELECT seq FROM backward_calls WHERE id = ?1", id, 0);
}

/* The first line before the writing line at `stack`, in its block (same
 * indentation, back to the line that opens the block), that changes `name`
 * in place too, after the op of node `node` saved it: a loop that writes
 * a tensor again on each pass (`x.detach_()` then `x.copy_(v)`; detach_
 * moves no version) needs its copy before the first of them. Read from the
 * source file (gt_trace_source: as long as it holds what ran); 0 if none. */
static int64_t earlier_write(gt__dctx *c, int64_t stack, int64_t node, const char *name)
{
    gt_loc l, sl;
    memset(&sl, 0, sizeof sl);
    int rc = gt_trace_loc(c->t, stack, &l);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    if (rc != 1)
        return 0;
    int64_t sstack = int_of(c,
                            "SELECT o.stack FROM nodes n JOIN ops o ON o.seq = n.op "
                            "WHERE n.id = ?1",
                            node, 0);
    int src = sstack ? gt_trace_loc(c->t, sstack, &sl) : 0;
    if (src == GT_ENOMEM)
        c->oom = 1;
    /* saved on an earlier line of the file: only the lines after it are
     * later; saved below (or elsewhere): an earlier pass saved it */
    int64_t lo =
        src == 1 && sl.file && l.file && !strcmp(sl.file, l.file) && sl.line < l.line
            ? sl.line
            : 0;
    const char *const *lines = NULL;
    size_t n = 0;
    int64_t first = 0;
    /* the shared reader: 0 lines when the file changed since the run */
    int got = l.file && l.line > 1 ? gt_trace_source(c->t, l.file, &lines, &n) : 0;
    if (got == GT_ENOMEM)
        c->oom = 1;
    if (got > 0 && (int64_t)n >= l.line) {
        size_t ind = strspn(lines[l.line - 1], " \t");
        char *t = NULL;
        for (int64_t k = l.line - 1; k > lo; k--) {
            const char *x = lines[k - 1];
            size_t xi = strspn(x, " \t");
            if (!x[xi] || x[xi] == '#' || xi > ind)
                continue; /* blank, comment, nested */
            if (xi < ind)
                break; /* the line that opens the block */
            free(t);
            if (!(t = malloc(strlen(x) + 1))) {
                c->oom = 1;
                break;
            }
            gt__py_target(x, t, strlen(x) + 1);
            if (!strcmp(t, name))
                first = k;
        }
        free(t);
    }
    gt_loc_release(&l);
    if (src == 1)
        gt_loc_release(&sl);
    return first;
}

/* The last backward call that ran after node `node` was made and before
 * backward call `id` (a call with retain_graph=True that went through the
 * graph before): its event seq, 0 if none. */
static int64_t backward_between(gt__dctx *c, int64_t node, int64_t id)
{
    return int_of(c,
                  "SELECT max(b.seq) FROM backward_calls b WHERE b.id < ?2 AND b.seq > "
                  "(SELECT seq FROM nodes WHERE id = ?1)",
                  node, id);
}

/* Returned by a part of suggest_inplace that has no fix for the finding:
 * the next part tries. */
#define NOT_HERE 1

/* An in-place activation (or a module built with inplace=True) overwrote
 * the saved tensor: inplace=False. */
static int inplace_activation(gt__dctx *c, gt_finding *f, sg *t, const char *name,
                              const char *nm)
{
    gt__opinfo *o = &t->o;
    const char *where;
    for (size_t i = 0; i < f->n_mutations; i++) {
        gt__dx_load_op(c, f->mutations[i].seq, o);
        gt__dx_stack_loc(c, o->stack, &t->where, NULL, NULL);
        where = S(t->where);
        if (!is_activation_inplace(o->name) && inplace_module(c, o->stack, &t->act))
        /* a module built with inplace=True whose op is no activation's
         * (nn.Dropout's mul_) */
        {
            int64_t at = built_at(c, o->stack, S(t->act), &t->mcode);
            return set_suggestion(
                c, f,
                "use inplace=False: the nn.%s called%s%s was built with "
                "inplace=True%s%s%s%.0lld, so its %s overwrote %s, which the backward "
                "needs; build it with inplace=False (nn.%s(..., inplace=False))",
                S(t->act), where[0] ? " at " : "", where, at ? " at " : "",
                at ? S(t->mcode) : "", at ? ":" : "", (long long)at, o->name,
                name[0] ? name : "the tensor it saved", S(t->act));
        }
        if (is_activation_inplace(o->name)) {
            /* the layer's class and the line that built it, when a module
             * ran it */
            int64_t at = inplace_module(c, o->stack, &t->clone)
                             ? built_at(c, o->stack, S(t->clone), &t->mcode)
                             : 0;
            out_of_place(o->name, &t->act);
            return set_suggestion(
                c, f,
                "use inplace=False: the in-place %s%s%s overwrote %s, "
                "which the backward needs; build the layer with "
                "inplace=False (e.g. nn.ReLU(inplace=False)%s%s%s%s%s%.0lld) or call the "
                "out-of-place torch.%s",
                o->name, where[0] ? " at " : "", where, nm, at ? ": the nn." : "",
                at ? S(t->clone) : "", at ? " built at " : "", at ? S(t->mcode) : "",
                at ? ":" : "", (long long)at, S(t->act));
        }
    }
    return NOT_HERE;
}

/* An optimizer's step, or a parameter changed by hand outside it: move the
 * update after the backward() that needs the graph. */
static int inplace_update(gt__dctx *c, gt_finding *f, sg *t, const char *name)
{
    gt__opinfo *o = &t->o;
    const char *where, *code;
    int rc;
    for (size_t i = 0; i < f->n_mutations; i++) {
        gt__dx_load_op(c, f->mutations[i].seq, o);
        gt__dx_stack_loc(c, o->stack, &t->where, &t->code, NULL);
        where = S(t->where);
        code = S(t->code);
        /* an optimizer's step: its frames are under torch/optim (a
         * subclass's step too, through Optimizer's wrapper); a _foreach_ op
         * with no Python stack is taken for one. A _foreach_ op the user
         * calls (an EMA's torch._foreach_lerp_) is an update by hand. */
        int foreach = strstr(o->name, "::_foreach_") != NULL;
        int step = strstr(code, ".step(") ||
                   (o->stack ? stack_through(c, o->stack, "%/torch/optim/%") : foreach);
        if (!step && o->phase == GT_PHASE_OTHER &&
            gt__dx_leaf_of(c, f->mutations[i].tensor)) {
            /* a parameter changed by hand outside the optimizer (weight
             * clipping, a no_grad renormalisation) */
            gt__py_trim_code(&t->code);
            code = S(t->code);
            return set_suggestion(
                c, f,
                "move the in-place update of %s (%s%s%s) after the last "
                "backward() that uses this graph, or recompute the forward "
                "after it: it changed %s after the forward saved it",
                name[0] ? name : "the parameter", code[0] ? code : o->name,
                where[0] ? " at " : "", where, name[0] ? name : "a parameter");
        }
        if (step) {
            /* where the forward saved it and which backward() needs it:
             * with two optimizers (a GAN's, an actor's and a critic's) the
             * step belongs after that backward(), or the forward after the
             * step */
            gt_strbuf_reset(&t->mwhere);
            gt_strbuf_reset(&t->mcode);
            gt__dx_stack_loc(c,
                             int_of(c,
                                    "SELECT o.stack FROM nodes n JOIN ops o ON o.seq = "
                                    "n.op WHERE n.id = ?1",
                                    f->node, 0),
                             &t->mwhere, NULL, NULL);
            gt_strbuf bwcode = GT_STRBUF_INIT;
            gt__dx_stack_loc(c,
                             int_of(c, "SELECT stack FROM backward_calls WHERE id = ?1",
                                    f->backward, 0),
                             &t->mcode, &bwcode, NULL);
            gt__py_trim_code(&t->code);
            gt__py_trim_code(&bwcode);
            const char *fwd = S(t->mwhere), *bw = S(t->mcode);
            /* with an optimizer per loss, the order of the updates: the
             * loss that needs these weights is backpropagated (and its
             * step taken) before the step that changes them */
            int order = bw[0] && where[0] && S(bwcode)[0] && S(t->code)[0];
            rc = set_suggestion(
                c, f,
                "move optimizer.step() after the last backward() that uses "
                "this graph, or recompute the forward after the step: the "
                "step%s%s updated %s in place after the forward%s%s saved it%s%s%s"
                "%s%s%s%s%s%s%s%s",
                where[0] ? " at " : "", where, name[0] ? name : "a parameter",
                fwd[0] ? " at " : "", fwd, bw[0] ? ", and the backward() at " : "", bw,
                bw[0] ? " needs it" : "",
                order ? "; with an optimizer per loss, order the updates: `" : "",
                order ? S(bwcode) : "", order ? "` at " : "", order ? bw : "",
                order ? " and its step first, then `" : "", order ? S(t->code) : "",
                order ? "` at " : "", order ? where : "");
            if (bwcode.oom)
                c->oom = 1;
            gt_strbuf_release(&bwcode);
            return rc;
        }
    }
    return NOT_HERE;
}

/* The seed story: a plain tensor (no grad_fn, not a parameter) that an op
 * saved, then updated in place (o: its first write): update a copy. */
static int inplace_plain(gt__dctx *c, gt_finding *f, sg *t, const char *name)
{
    gt__opinfo *o = &t->o;
    int rc;
    /* the line that changes it calls it by another name (a module's
     * buffer, self.buf in forward(), mod.buf where backward() ran):
     * the copy is of that name, said before that line */
    gt__dx_stack_loc(c, o->stack, &t->mwhere, &t->mcode, NULL);
    size_t room = strlen(S(t->mcode)) + 1;
    char *target = malloc(room);
    if (!target)
        return gt__dx_nomem(c);
    gt__py_target(S(t->mcode), target, room);
    if (!target[0])
        method_receiver(S(t->mcode), o->name, target, room);
    rc = target[0] && S(t->mwhere)[0] && !gt__py_mentions(S(t->mcode), name)
             ? set_suggestion(c, f,
                              "update a copy: `%s = %s.clone()` before %s, the line "
                              "that changes %s in place (%s), or move the update "
                              "after backward()",
                              target, target, S(t->mwhere), name, o->name)
             : set_suggestion(c, f,
                              "update a copy: %s = %s.clone().detach() before "
                              "changing it, or move the update after backward()",
                              name, name);
    free(target);
    return rc;
}

/* Any other in-place op o (the first write): its out-of-place form, or a
 * copy of the tensor written (mn, as the line names it). */
static int inplace_op(gt__dctx *c, gt_finding *f, sg *t, const char *name, const char *mn)
{
    gt__opinfo *o = &t->o;
    int rc;
    out_of_place(o->name, &t->act);
    const char *meth = S(t->act);
    /* copy_, fill_ and zero_ have no out-of-place method (x.copy(y)
     * does not exist); index_put_ and masked_fill_ have one, but they
     * are mostly written as an assignment (x[mask] = 0) */
    int no_method =
        !strcmp(meth, "copy") || !strcmp(meth, "fill") || !strcmp(meth, "zero");
    gt__dx_stack_loc(c, o->stack, &t->mwhere, &t->mcode, NULL);
    gt__py_trim_code(&t->mcode);
    gt_strbuf_reset(&t->oop);
    if (!no_method)
        oop_of_writes(c, f, mn, t);
    const char *mwhere = S(t->mwhere), *oop = S(t->oop);
    if (no_method && f->node && mwhere[0] && same_line_as_node(c, f->node, mwhere)) {
        /* `b[:, 1] = f(b[:, 0])`: the op saves a view of b and the
         * assignment writes b on one line, so no clone of b fits
         * between them: the op must read a copy. */
        char *view = malloc(strlen(S(t->mcode)) + 1);
        if (!view)
            return gt__dx_nomem(c);
        read_subscript(S(t->mcode), mn, view);
        rc = set_suggestion(c, f,
                            "give the op that saved %s a copy: the line at %s passes "
                            "it a view of %s and writes its result into %s (%s), so "
                            "append .clone() to the argument it reads (`%s%s.clone()`), "
                            "or write the result into a new tensor",
                            mn, mwhere, mn, mn, o->name, view[0] ? view : mn,
                            view[0] ? "" : "[...]");
        free(view);
        return rc;
    }
    if (no_method ||
        (!oop[0] && (!strcmp(meth, "index_put") || !strcmp(meth, "masked_fill")))) {
        /* the copy is of the variable the first writing line changes,
         * bound before that line: every later write then goes to it */
        size_t room = strlen(S(t->mcode)) + 1;
        char *target = malloc(room);
        if (!target)
            return gt__dx_nomem(c);
        gt__py_target(S(t->mcode), target, room);
        int64_t first =
            mwhere[0] ? earlier_write(c, o->stack, f->node, target[0] ? target : mn) : 0;
        where_line(&t->mwhere, first);
        mwhere = S(t->mwhere);
        rc = mwhere[0] ? set_suggestion(c, f,
                                        "modify a copy: %s = %s.clone() before %s, the "
                                        "first line that %s%s%s, or build the new value "
                                        "out of place (e.g. torch.where)",
                                        target[0] ? target : mn, target[0] ? target : mn,
                                        mwhere,
                                        first ? "changes it in place after the op that "
                                                "saved it"
                                              : "writes it (",
                                        first ? "" : o->name, first ? "" : ")")
                       : set_suggestion(c, f,
                                        "modify a copy: %s = %s.clone() before the "
                                        "assignment (%s), or build the new value out of "
                                        "place (e.g. torch.where)",
                                        mn, mn, o->name);
        free(target);
        return rc;
    }
    clone_at(c, f, name, mn, &t->clone);
    if (oop[0] && t->clone.len)
        return set_suggestion(c, f,
                              "replace the in-place %s%s%s by its out-of-place form: "
                              "`%s`, or clone it once: %s",
                              o->name, mwhere[0] ? " at " : "", mwhere, oop, S(t->clone));
    if (oop[0])
        return set_suggestion(c, f,
                              "replace the in-place %s%s%s by its out-of-place form: "
                              "`%s`, or clone() %s before modifying it",
                              o->name, mwhere[0] ? " at " : "", mwhere, oop, mn);
    return set_suggestion(c, f,
                          "replace the in-place %s with an out-of-place version "
                          "(%s = %s.%s(...)), or clone() %s before modifying it",
                          o->name, mn, mn, meth, mn);
}

static int suggest_inplace(gt__dctx *c, gt_finding *f, sg *t)
{
    int rc;
    gt__opinfo *o = &t->o;
    gt__dx_first_name(c, f->tensor, &t->name);
    gt_strbuf_reset(&t->mname);
    if (f->n_mutations)
        gt__dx_first_name(c, f->mutations[0].tensor, &t->mname);
    const char *name = S(t->name);
    const char *nm = name[0] ? name : "the tensor";
    const char *mn = S(t->mname)[0] ? S(t->mname) : nm;

    /* A graph an earlier backward(retain_graph=True) went through, reached
     * again by a new loss through a state the loop fed back. */
    int64_t before =
        f->node && f->backward ? backward_between(c, f->node, f->backward) : 0;
    if (before &&
        carried_state(c, before, backward_seq(c, f->backward), &t->oop, &t->mwhere))
        return suggest_detach_carried(
            c, f, S(t->oop), S(t->mwhere),
            "whose saved tensors have changed since (retain_graph=True only keeps that "
            "graph alive); with the detach, drop retain_graph=True too");

    if ((rc = inplace_activation(c, f, t, name, nm)) != NOT_HERE ||
        (rc = inplace_update(c, f, t, name)) != NOT_HERE)
        return rc;
    gt__dx_load_op(c, f->n_mutations ? f->mutations[0].seq : 0, o);
    if (name[0] && !has_autograd(c, f->tensor))
        return inplace_plain(c, f, t, name);
    if (o->name[0])
        return inplace_op(c, f, t, name, mn);
    return set_suggestion(c, f,
                          "replace the in-place change of %s with an out-of-place "
                          "version (x = x.op(...)), or clone() it before modifying it",
                          nm);
}

/* The code of the line that raised, without its indentation and comment
 * ("" if unknown), into code; where gets its "file:line". */
static void raising_code(gt__dctx *c, const gt_finding *f, gt_strbuf *where,
                         gt_strbuf *code)
{
    gt__dx_stack_loc(c, f->stack, where, code, NULL);
    gt__py_trim_code(code);
}

/* Indentation of a line: its leading spaces and tabs. */
static size_t indent_len(const char *l)
{
    return strspn(l, " \t");
}

/* The lines right after the one at `stack` that change the same variable
 * in place (gt__py_target) at the same indentation, up to the first that
 * does not: the run stopped at the first, so they never ran, and a fix of
 * that line alone stops at the next. Read from the source file, as long as
 * it still holds the recorded line there. Each is appended to `more` as
 * "; <code>" (comment and indentation cut); returns the last one's line
 * number, 0 if none. Out of memory sets c->oom. */
static int64_t writes_after(gt__dctx *c, int64_t stack, gt_strbuf *more)
{
    gt_loc l;
    int64_t last = 0;
    gt_strbuf_reset(more);
    int rc = gt_trace_loc(c->t, stack, &l);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    if (rc != 1)
        return 0;
    const char *const *src = NULL; /* as long as it holds what ran */
    size_t nsrc = l.code && l.line > 0 ? gt__dx_source(c, l.file, &src) : 0;
    char *line = NULL, *target = NULL, *t2 = NULL;
    size_t ind = 0;
    int64_t no = l.line - 1;
    for (; no >= 0 && (size_t)no < nsrc; free(line), line = NULL) {
        if (!(line = strdup(src[no++]))) {
            c->oom = 1;
            break;
        }
        if (no == l.line) {
            ind = indent_len(line);
            if (!(target = malloc(strlen(line) + 1))) {
                c->oom = 1;
                break;
            }
            gt__py_target(line, target, strlen(line) + 1);
            if (!target[0])
                break;
            continue;
        }
        if (indent_len(line) != ind)
            break;
        char *grown = realloc(t2, strlen(line) + 1);
        if (!grown) {
            c->oom = 1;
            break;
        }
        t2 = grown;
        gt__py_target(line, t2, strlen(line) + 1);
        if (strcmp(t2, target) != 0)
            break;
        gt__py_strip_comment(line);
        gt_strbuf_addf(more, "; %s", line + ind);
        last = no;
    }
    if (more->oom)
        c->oom = 1;
    free(line);
    free(target);
    free(t2);
    gt_loc_release(&l);
    return last;
}

/* The in-place activation ("relu_") the innermost frame of `stack` calls
 * (F.relu(x, inplace=True) runs `torch.relu_(input)`), into act (emptied
 * first); 0 if that frame calls none. */
static int stack_activation_inplace(gt__dctx *c, int64_t stack, gt_strbuf *act)
{
    int found = 0;
    gt_strbuf line = GT_STRBUF_INIT;
    gt_strbuf_reset(act);
    if (gt__dx_text(c,
                    "SELECT (SELECT text FROM strings WHERE id = f.code) "
                    "FROM stacks s JOIN frames f ON f.id = s.frame WHERE s.id = ?1",
                    stack, &line)) {
        const char *code = gt_strbuf_str(&line);
        for (const char *p = strchr(code, '('); p && !found; p = strchr(p + 1, '(')) {
            const char *b = p;
            while (b > code && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') ||
                                (b[-1] >= '0' && b[-1] <= '9')))
                b--;
            if (p > b && p[-1] == '_' && activation_span(b, (size_t)(p - b), 0)) {
                gt_strbuf_add(act, b, (size_t)(p - b));
                found = 1;
            }
        }
    }
    gt_strbuf_release(&line);
    return found;
}

/* has_autograd for gt__dx_named_on_line */
static int64_t carries_grad(gt__dctx *c, int64_t tensor)
{
    return has_autograd(c, tensor);
}

/* leaf_inplace raised by a reentrant checkpoint's recomputation: the
 * function changes its own input, a detached leaf when backward reruns it. */
static int leaf_in_checkpoint(gt__dctx *c, gt_finding *f, sg *t, const char *name,
                              const char *code)
{
    int64_t call_op =
        gt__dx_int(c, "SELECT op FROM nodes WHERE id = ?1", f->node, 0, NULL, 0);
    gt__dx_load_op(c, call_op, &t->o);
    gt__dx_stack_loc(c, t->o.stack, &t->mwhere, NULL, NULL);
    const char *nm = name[0] ? name : "x", *call = S(t->mwhere);
    gt__py_out_of_place_line(code, nm, &t->oop);
    const char *fix = S(t->oop);
    return set_suggestion(c, f,
                          "the checkpointed function%s%s changes its input %s in place; "
                          "backward reruns it on a detached copy of %s (a leaf that "
                          "requires grad), where that is refused: use the out-of-place "
                          "form inside the function%s%s%s, or %s = %s.clone() at its "
                          "start",
                          call[0] ? " called at " : "", call, nm, nm, fix[0] ? " (`" : "",
                          fix, fix[0] ? "`)" : "", nm, nm);
}

/* A module's parameter: the attribute cannot be rebound to a plain
 * tensor (a Parameter attribute only takes a Parameter), so the fix is
 * to make the update invisible to autograd. */
static int leaf_parameter(gt__dctx *c, gt_finding *f, sg *t, const char *name,
                          const char *code)
{
    int64_t last = code[0] ? writes_after(c, f->stack, &t->mcode) : 0;
    if (strstr(name, "embed") && strchr(code, '['))
        return set_suggestion(
            c, f,
            "initialise the parameter under torch.no_grad(): `with "
            "torch.no_grad(): %s%s`%s%s%s%.0lld; for a padding row, nn.Embedding("
            "..., padding_idx=PAD) zeroes it and keeps its gradient "
            "at zero",
            code[0] ? code : "...", S(t->mcode), last ? " in place of lines " : "",
            last ? S(t->where) : "", last ? "-" : "", (long long)last);
    if (last)
        return set_suggestion(c, f,
                              "change the parameter under torch.no_grad(), as "
                              "optimizers and nn.init do, on every line that writes it: "
                              "`with torch.no_grad(): %s%s` in place of lines %s-%lld",
                              code, S(t->mcode), S(t->where), (long long)last);
    return set_suggestion(c, f,
                          "change the parameter under torch.no_grad(), as optimizers "
                          "and nn.init do: `with torch.no_grad(): %s`",
                          code[0] ? code : "...");
}

static int suggest_leaf(gt__dctx *c, gt_finding *f, sg *t)
{
    gt__dx_first_name(c, f->tensor, &t->name);
    if (f->name && (!S(t->name)[0] || gt__py_is_attribute(f->name))) {
        gt_strbuf_reset(&t->name);
        gt_strbuf_adds(&t->name, f->name);
    }
    raising_code(c, f, &t->where, &t->code);
    const char *name = S(t->name), *code = S(t->code);
    if (f->node)
        return leaf_in_checkpoint(c, f, t, name, code);
    /* An in-place activation applied to the leaf itself (nn.ReLU(inplace=
     * True) on a parameter): under no_grad the parameter would be clipped
     * and get no gradient, so the fix is the out-of-place activation. */
    if (stack_activation_inplace(c, f->stack, &t->act))
        return set_suggestion(
            c, f,
            "use inplace=False: the in-place %s%s%s would overwrite the "
            "leaf; build the layer with inplace=False (e.g. "
            "nn.ReLU(inplace=False)) or apply it to a copy (%s.clone())",
            S(t->act), code[0] ? " in " : "", code,
            f->written ? f->written
            : name[0]  ? name
                       : "x");
    if (gt__py_is_attribute(name) || (f->written && gt__py_is_attribute(f->written)) ||
        strstr(code, "self."))
        return leaf_parameter(c, f, t, name, code);
    /* A view of the leaf: the copy to change is the view's. */
    /* Otherwise the expression the line writes, as written: rebinding it
     * (`v1[0] = v1[0].clone()`) is what the line then changes. */
    const char *nm = f->view_op && f->name       ? f->name
                     : f->written && !f->view_op ? f->written
                     : name[0]                   ? name
                                                 : "x";
    /* A tensor made a leaf by requires_grad_() (an activation, not a
     * parameter) that takes a value carrying a gradient: under no_grad that
     * value would get none, so the fix is the out-of-place form. */
    if (code[0] && f->error_seq &&
        gt__dx_named_on_line(c, f->error_seq, code, f->written ? f->written : nm,
                             carries_grad, &t->mname)) {
        gt__py_out_of_place_line(code, nm, &t->oop);
        const char *oop = S(t->oop), *src = S(t->mname);
        if (oop[0])
            return set_suggestion(
                c, f,
                "build the new value out of place: `%s` (under torch.no_grad() %s would "
                "get no gradient), or change a copy instead: %s = %s.clone() before it",
                oop, src, nm, nm);
        return set_suggestion(c, f,
                              "change a copy instead: `%s = %s.clone()` before it (under "
                              "torch.no_grad() %s would get no gradient), or build the "
                              "new value out of place (e.g. torch.where)",
                              nm, nm, src);
    }
    int64_t last = code[0] ? writes_after(c, f->stack, &t->mcode) : 0;
    if (last)
        return set_suggestion(
            c, f,
            "wrap the updates in `with torch.no_grad():` (as optimizers "
            "do), every line that writes it: `with torch.no_grad(): %s%s` "
            "in place of lines %s-%lld, or change a copy instead: %s = "
            "%s.clone() before them",
            code, S(t->mcode), S(t->where), (long long)last, nm, nm);
    return set_suggestion(
        c, f,
        "wrap the update in `with torch.no_grad():` (as optimizers do): "
        "`with torch.no_grad(): %s`, or change a copy instead: %s = "
        "%s.clone() before it",
        code[0] ? code : "...", nm, nm);
}

static int suggest_view(gt__dctx *c, gt_finding *f, sg *t)
{
    gt__opinfo *vo = &t->o;
    if (f->name)
        gt_strbuf_adds(&t->name, f->name);
    else
        gt__dx_first_name(c, f->tensor, &t->name);
    raising_code(c, f, &t->where, &t->code);
    const char *name = S(t->name), *code = S(t->code);
    gt__py_out_of_place_line(code, name, &t->oop);
    gt__dx_load_op(c, f->view_op, vo);
    gt__dx_stack_loc(c, vo->stack, &t->mwhere, NULL, NULL);
    const char *nm = name[0] ? name : "the view", *oop = S(t->oop);
    const char *vwhere = S(t->mwhere);
    switch (f->kind) {
    case GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE: {
        /* No name: the line changes an element of the tuple the function
         * returned (`v1[0].mul_(2)`); a tuple cannot take the copy back, so
         * the copies go into a list. */
        size_t n = strcspn(code, "[");
        if (!f->name && code[n] && n && n <= INT_MAX &&
            strspn(code, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "_0123456789") == n)
            return set_suggestion(
                c, f,
                "change copies of the views: `%.*s = [v.clone() for v in "
                "%.*s]`%s%s, or build the new value out of place (e.g. "
                "torch.stack of the changed pieces)",
                (int)n, code, (int)n, code, vwhere[0] ? " after " : "", vwhere);
    }
        if (oop[0])
            return set_suggestion(c, f,
                                  "replace the in-place change by its out-of-place form: "
                                  "`%s`; or clone the view first (%s = %s.clone())",
                                  oop, nm, nm);
        return set_suggestion(
            c, f,
            "clone the view before changing it in place: %s = %s.clone()"
            "%s%s, or build the new value out of place (e.g. torch.where)",
            nm, nm, vwhere[0] ? " after " : "", vwhere);
    case GT_FINDING_VIEW_NO_GRAD_INPLACE:
    case GT_FINDING_VIEW_INFERENCE_INPLACE: {
        const char *block = f->kind == GT_FINDING_VIEW_NO_GRAD_INPLACE
                                ? "torch.no_grad()"
                                : "torch.inference_mode()";
        return set_suggestion(
            c, f,
            "make the view and the in-place change agree: create %s outside "
            "the %s block%s%s%s if the change should be tracked by "
            "autograd, or move `%s` inside that block if it should not",
            nm, block, vwhere[0] ? " (at " : "", vwhere, vwhere[0] ? ")" : "",
            code[0] ? code : "the in-place change");
    }
    default: {
        /* The clone goes after the line that called the Function (its
         * `.apply(` frame), not after the view's line inside forward. */
        int64_t apply =
            gt__dx_int(c,
                       "WITH RECURSIVE up(id, frame, parent, depth) AS ("
                       "SELECT id, frame, parent, 0 FROM stacks WHERE id = ?1 "
                       "UNION ALL SELECT s.id, s.frame, s.parent, depth + 1 "
                       "FROM stacks s JOIN up ON s.id = up.parent "
                       "WHERE depth < 256) "
                       "SELECT up.id FROM up JOIN frames f ON f.id = up.frame "
                       "WHERE (SELECT text FROM strings WHERE id = f.code) "
                       "LIKE '%.apply(%' ORDER BY depth LIMIT 1",
                       vo->stack, 0, NULL, 0);
        if (apply) /* else mwhere stays as it was */
            gt__dx_stack_loc(c, apply, &t->mwhere, NULL, NULL);
        vwhere = S(t->mwhere);
        return set_suggestion(
            c, f,
            "clone the custom Function's output before changing it in "
            "place: %s = %s.clone()%s%s, or return a new tensor from its "
            "forward (e.g. x.clone() instead of x or a view of x)",
            nm, nm, vwhere[0] ? " after " : "", vwhere);
    }
    }
}

/* torch.func's refusal of an in-place op on a tensor the transformed
 * function captured from outside: the fix is to pass it in. 1 if the
 * finding's error is that one (and the suggestion is set or failed). */
static int suggest_captured(gt__dctx *c, gt_finding *f, sg *t, int *rc)
{
    int64_t stack = 0;
    int captured = 0;
    sqlite3_stmt *st = gt__dx_stmt(c, "SELECT message, coalesce(stack, 0) FROM errors "
                                      "WHERE seq = ?1");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, f->error_seq);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) {
            gt_pymsg m;
            if (gt__pymsg_parse(gt_column_text(st, 0, &c->oom), &m) != 0)
                c->oom = 1;
            captured = m.kind == GT_PYMSG_CAPTURED;
            gt__pymsg_release(&m);
            stack = sqlite3_column_int64(st, 1);
        }
    }
    gt__dx_done(c, st, s);
    if (!captured)
        return 0;
    gt__dx_stack_loc(c, stack, &t->where, &t->code, NULL);
    const char *where = S(t->where), *code = S(t->code);
    *rc =
        set_suggestion(c, f,
                       "a function transformed by torch.func (grad, vjp, jacrev, vmap) "
                       "changes in place a tensor it captured from outside%s%s%s%s: pass "
                       "that tensor to the function as an argument and return its new "
                       "value, or change a copy made inside the function (t = t.clone() "
                       "first), or build the new value out of place",
                       where[0] ? " at " : "", where, code[0] ? ": " : "", code);
    return 1;
}

static int suggest_unexplained(gt__dctx *c, gt_finding *f, sg *t)
{
    gt__opinfo *o = &t->o;
    const char *name, *where;
    int rc = 0;
    if (f->error_seq && suggest_captured(c, f, t, &rc))
        return rc;
    if (f->outside_recording) {
        const char *start =
            "the forward that built this graph ran before recording "
            "started, so its saved tensors are not in the trace: start "
            "recording before the forward (gradtrace.record() around both "
            "forward and backward, or `gradtrace record` for the whole "
            "script) and diagnose again";
        if (f->n_mutations == 1 && f->n_candidates == 1) {
            gt__dx_first_name(c, f->mutations[0].tensor, &t->name);
            gt__dx_load_op(c, f->mutations[0].seq, o);
            gt__dx_stack_loc(c, o->stack, &t->where, NULL, NULL);
            name = S(t->name);
            where = S(t->where);
            return set_suggestion(
                c, f,
                "%s; the likely cause: %s%s%s changed %s, the one tensor "
                "that matches PyTorch's message (change a copy instead: "
                "%s = %s.clone() before the change)",
                start, o->name[0] ? o->name : "a write", where[0] ? " at " : "", where,
                name[0] ? name : "the tensor", name[0] ? name : "x",
                name[0] ? name : "x");
        }
        return set_suggestion(c, f, "%s", start);
    }
    if (f->n_mutations == 1 && f->n_candidates == 1) {
        gt__dx_first_name(c, f->mutations[0].tensor, &t->name);
        gt__dx_load_op(c, f->mutations[0].seq, o);
        gt__dx_stack_loc(c, o->stack, &t->where, NULL, NULL);
        name = S(t->name);
        where = S(t->where);
        const char *nm = name[0] ? name : "the tensor";
        return set_suggestion(
            c, f,
            "%s is the one tensor that matches PyTorch's message: %s%s%s "
            "changed it after the forward saved it (through a path the "
            "replay does not follow); change a copy (%s = %s.clone() before the change) "
            "or move the change after backward()",
            nm, o->name[0] ? o->name : "a write", where[0] ? " at " : "", where, nm, nm);
    }
    if (f->n_candidates)
        return set_suggestion(
            c, f,
            "one of the candidates above is the tensor PyTorch names: the "
            "last write listed for it changed it after the forward saved "
            "it; change a copy (x = x.clone()) before that write, or move "
            "the write after backward()");
    return set_suggestion(c, f,
                          "the write that changed the tensor PyTorch names is not in the "
                          "trace: record the whole run (without --backward-calls or "
                          "--max-size) and diagnose again");
}

/* silent_storage_write: write a copy, or after backward. */
static int suggest_silent_write(gt__dctx *c, gt_finding *f, sg *t)
{
    gt__opinfo *o = &t->o;
    const char *name;
    gt__dx_first_name(c, f->tensor, &t->name);
    name = S(t->name);
    gt__dx_load_op(c, f->n_mutations ? f->mutations[0].seq : 0, o);
    if (!strncmp(o->name, "c10d::", 6)) {
        const char *nm = name[0] ? name : "the tensor", *v = name[0] ? name : "t";
        const char *verb = strstr(o->name, "reduce") ? "reduce" : "communicate";
        return set_suggestion(c, f,
                              "%s wrote %s in place without bumping its version, so "
                              "backward used the collective's result instead of the "
                              "saved value: %s a copy (%s_synced = %s.clone(), then pass "
                              "%s_synced to the collective), or %s %s before the forward "
                              "that saves it",
                              o->name, nm, verb, v, v, v, verb, nm);
    }
    return set_suggestion(c, f,
                          "this write bypasses autograd (an alias with its own version "
                          "counter, such as .data), so the gradients are silently wrong: "
                          "modify %s only after backward(), under torch.no_grad() on the "
                          "tensor itself, or write to a clone()",
                          name[0] ? name : "the tensor");
}

/* silent_kernel_write: an op that writes without moving the version
 * (kernel_writes): a BatchNorm forward in training mode, a fused
 * optimizer's step, or another of the kernel-write list (its reason; the
 * *_stats ops update running statistics in any mode). */
static int suggest_kernel_write(gt__dctx *c, gt_finding *f, sg *t)
{
    gt__opinfo *o = &t->o;
    gt__dx_first_name(c, f->tensor, &t->name);
    const char *name = S(t->name)[0] ? S(t->name) : "the tensor";
    gt__dx_load_op(c, f->n_mutations ? f->mutations[0].seq : 0, o);
    if (strstr(o->name, "batch_norm") && !strstr(o->name, "_stats"))
        return set_suggestion(
            c, f,
            "%s updated %s in place in training mode, which moves no version, after a "
            "forward in eval mode saved it, so backward used the new statistics: call "
            "backward() before the next training-mode forward of the module, or run the "
            "eval-mode forward under torch.no_grad() if it needs no gradient",
            o->name, name);
    if (strstr(o->name, "::_fused_"))
        return set_suggestion(
            c, f,
            "the fused optimizer step %s wrote %s in place without moving "
            "its version after a forward saved it, so backward used the "
            "updated values: call optimizer.step() after backward() "
            "(without fused=True PyTorch raises here instead)",
            o->name, name);
    const char *why = gt_kernel_write_reason(o->name);
    return set_suggestion(
        c, f,
        "%s wrote %s in place without moving its version%s%s%s, after a "
        "forward saved it, so backward used the new values: run it after "
        "backward(), or give it a clone()",
        o->name, name, why ? " (" : "", why ? why : "", why ? ")" : "");
}

/* backward_twice where the new loss reuses a value made before the earlier
 * backward() (reused_graph has filled t): make it again, or without a
 * graph. `where` is that backward()'s line. */
static int suggest_reused(gt__dctx *c, gt_finding *f, sg *t, const char *where)
{
    /* a new loss, through a value made before the earlier backward */
    const char *rn = S(t->name), *made = S(t->mcode), *mfn = S(t->act);
    const char *lv = S(t->clone);
    if (where[0] && made[0] && accumulates(S(t->code), rn)) {
        /* `loss += loss_t` goes on adding onto the sum the earlier
         * backward() backpropagated: the sum is what is reused */
        gt__py_trim_code(&t->code);
        return set_suggestion(
            c, f,
            "start a new sum for each backward(): `%s = 0` after %s, the "
            "backward() that freed its graph; `%s` at %s adds each new "
            "loss onto the sum of the losses before it, so the next "
            "backward() goes back into their freed graph too "
            "(retain_graph=True would backpropagate those old losses again)",
            rn, where, S(t->code), made);
    }
    size_t k = strlen(mfn);
    int init = k >= 9 && !strcmp(mfn + k - 9, ".__init__");
    gt_strbuf_reset(&t->oop);
    if (rn[0] && made[0])
        gt_strbuf_addf(&t->oop, "`%s = %s.detach()` after %s, or ", rn, rn, made);
    gt_strbuf_reset(&t->mwhere);
    if (init)
        gt_strbuf_adds(&t->mwhere, "compute it in forward(), not in __init__()");
    else if (made[0])
        gt_strbuf_addf(&t->mwhere, "move %s into the loop", made);
    return set_suggestion(
        c, f,
        "the new loss reuses %s, made%s%s before the backward()%s%s freed its "
        "graph: make it again for each backward()%s%s%s or, if no gradient "
        "should "
        "flow back through it%s%s, make it without a graph (%sunder "
        "torch.no_grad()); retain_graph=True would backpropagate into the old "
        "graph again, and fail once the optimizer changes what it saved",
        rn[0] ? rn : "a value with a graph", made[0] ? " at " : "", made,
        where[0] ? " at " : "", where, t->mwhere.len ? " (" : "", S(t->mwhere),
        t->mwhere.len ? ")" : "", lv[0] ? " to " : "", lv, S(t->oop));
}

/* backward_twice: recompute the forward, keep the graph, or detach what a
 * loop carries from one backward() to the next. */
static int suggest_twice(gt__dctx *c, gt_finding *f, sg *t)
{
    static const char stack_sql[] =
        "SELECT coalesce(stack, 0) FROM backward_calls WHERE id = ?1";
    const char *where;
    gt__dx_stack_loc(c, gt__dx_int(c, stack_sql, f->other_backward, 0, NULL, 0),
                     &t->where, NULL, NULL);
    /* The same backward() line twice: a loop calls backward() on a loss
     * whose forward ran once, before the loop. */
    gt__dx_stack_loc(c, gt__dx_int(c, stack_sql, f->backward, 0, NULL, 0), &t->mwhere,
                     NULL, NULL);
    where = S(t->where);
    if (carried_state(c, backward_seq(c, f->other_backward), backward_seq(c, f->backward),
                      &t->oop, &t->code))
        return suggest_detach_carried(
            c, f, S(t->oop), S(t->code),
            "which the earlier backward() freed (retain_graph=True would keep every "
            "earlier "
            "iteration's graph alive and fail once the optimizer changes the "
            "weights it saved)");
    if (reused_graph(c, backward_seq(c, f->other_backward), backward_seq(c, f->backward),
                     f->node, &t->name, &t->mcode, &t->act, &t->clone, &t->code))
        return suggest_reused(c, f, t, where);
    if (where[0] && !strcmp(where, S(t->mwhere)))
        return set_suggestion(c, f,
                              "recompute the forward pass before each backward(): the "
                              "backward() at %s runs again (in a loop) on a graph its "
                              "first run freed, so move the lines that compute the loss "
                              "inside the loop (retain_graph=True would only "
                              "backpropagate the same old loss again)",
                              where);
    return set_suggestion(c, f,
                          "pass retain_graph=True to the earlier backward()%s%s if the "
                          "graph must be backpropagated twice, or recompute the forward "
                          "pass before the second backward()",
                          where[0] ? " at " : "", where);
}

static int suggest(gt__dctx *c, gt_finding *f, sg *t)
{
    switch (f->kind) {
    case GT_FINDING_INPLACE_INVALIDATED_SAVED:
        return suggest_inplace(c, f, t);
    case GT_FINDING_SILENT_STORAGE_WRITE:
        return suggest_silent_write(c, f, t);
    case GT_FINDING_SILENT_KERNEL_WRITE:
        return suggest_kernel_write(c, f, t);
    case GT_FINDING_BACKWARD_TWICE:
        return suggest_twice(c, f, t);
    case GT_FINDING_LEAF_INPLACE:
        return suggest_leaf(c, f, t);
    case GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE:
    case GT_FINDING_VIEW_NO_GRAD_INPLACE:
    case GT_FINDING_VIEW_INFERENCE_INPLACE:
    case GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE:
        return suggest_view(c, f, t);
    case GT_FINDING_UNEXPLAINED:
        return suggest_unexplained(c, f, t);
    case GT_FINDING_INPLACE_OVERLAP:
    case GT_FINDING_INPLACE_INPUT_OVERLAP:
    case GT_FINDING_INPLACE_INFERENCE_TENSOR:
    case GT_FINDING_INPLACE_DTYPE:
    case GT_FINDING_INPLACE_SHAPE:
    case GT_FINDING_DETACH_VIEW_INPLACE:
    case GT_FINDING_RESIZE_REQUIRES_GRAD:
        return gt__dx_suggest_refused(c, f);
    case GT_FINDING_ROOT_WITHOUT_GRAD:
    case GT_FINDING_GRAD_INPUT_UNREACHABLE:
        return gt__dx_suggest_cut(c, f);
    case GT_FINDING_DDP_UNUSED_PARAMETERS:
        return gt__dx_suggest_ddp(c, f);
    }
    return 0;
}

int gt__dx_suggest(gt__dctx *c, gt_finding *f)
{
    sg t;
    memset(&t, 0, sizeof t);
    t.o.name = "";
    int rc = suggest(c, f, &t);
    sg_release(c, &t);
    return rc;
}
