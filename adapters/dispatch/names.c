/* names.c: variable names bound to recorded tensors in the user's frames. */
#include "state.h"

static int names_in(gt_pyrec *self, PyObject *dict, int64_t seq, PyObject *t,
                    gt_tensor_ent *te, PyObject *base, gt_tensor_ent *be)
{
    int found = 0;
    if (!dict || !PyDict_Check(dict))
        return 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
            continue;
        PyObject *in = NULL;
        if (v != t && v != base && self->ft_now &&
            PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type)) {
            /* a name inside a torch.func transform holds a wrapper */
            in = gt__ft_inner(self, v);
            if (in && (in == t || (base && in == base)))
                v = in;
        }
        Py_XDECREF(in); /* v stays valid: its wrapper in `dict` holds it */
        if (v == t || (base && v == base)) {
            const char *name = PyUnicode_AsUTF8(k);
            if (!name) {
                swallow(self);
                continue;
            }
            if (v == base && be)
                ck(self, gt_name(self->r, seq, be->id, name));
            ck(self, gt_name(self->r, seq, te->id, name));
            found++;
        }
    }
    return found;
}

/* Names bound to mutated tensor t (or the tensor it is a view of) in the
 * user's frame: locals, then globals. */
void gt__record_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq, PyObject *t,
                      gt_tensor_ent *te)
{
    modstate *ms = STATE(self);
    /* an optimizer step mutates dozens of parameters from one user line
     * whose frame names none of them: after a miss, that line is skipped */
    int lasti = PyFrame_GetLasti(uf);
    if ((uintptr_t)uf == self->names_miss && lasti == self->names_miss_lasti)
        return;
    PyObject *base = NULL;
    gt_tensor_ent *be = NULL;
    PyObject *isv = PyObject_CallMethodNoArgs(t, ms->s_is_view);
    if (isv && PyObject_IsTrue(isv) > 0) {
        base = PyObject_GetAttr(t, ms->s_base);
        if (base && PyObject_TypeCheck(base, (PyTypeObject *)self->tensor_type))
            be = gt__lookup(self, base);
    }
    Py_XDECREF(isv);
    swallow(self);
    PyObject *locals = PyFrame_GetLocals(uf);
    PyObject *globals = PyFrame_GetGlobals(uf);
    int found = names_in(self, locals, seq, t, te, base, be);
    if (globals != locals)
        found += names_in(self, globals, seq, t, te, base, be);
    if (!found) {
        self->names_miss = (uintptr_t)uf;
        self->names_miss_lasti = lasti;
    }
    Py_XDECREF(locals);
    Py_XDECREF(globals);
    Py_XDECREF(base);
    swallow(self);
}

/* Look up, once, what gt__bind_names and gt__note_exec need from torch. */
void gt__lookup_torch(gt_pyrec *self)
{
    if (self->looked_up)
        return;
    self->looked_up = 1;
    self->module_type = gt_py_type_attr("torch.nn", "Module");
    /* missing in older PyTorch (1.13): then no node_execs rows */
    PyObject *c = PyImport_ImportModule("torch._C");
    self->current_node = c ? PyObject_GetAttrString(c, "_current_autograd_node") : NULL;
    Py_XDECREF(c);
    if (self->current_node && !PyCallable_Check(self->current_node))
        Py_CLEAR(self->current_node);
    PyErr_Clear();
}

typedef struct {
    gt_pyrec *self;
    int64_t seq;
} name_ctx;

static int param_known(void *ctx, PyObject *t)
{
    return gt__lookup(((name_ctx *)ctx)->self, t) != NULL;
}

static void name_tensor(void *ctx, PyObject *t, const char *name)
{
    name_ctx *c = ctx;
    gt_pyrec *self = c->self;
    gt_tensor_ent *e = gt__lookup(self, t);
    if (!e && self->ft_seen) {
        PyObject *in = gt__ft_inner(self, t);
        e = in ? gt__lookup(self, in) : NULL;
        Py_XDECREF(in);
    }
    if (e)
        ck(self, gt_name(self->r, c->seq, e->id, name));
}

/* Names of every recorded tensor (and recorded parameter of an nn.Module)
 * bound in the user frame uf, at event seq (gt_py_bind_names). Tensors never
 * recorded get no id here. */
void gt__bind_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq)
{
    if (!uf || !seq || !self->r || self->failed || self->forked)
        return;
    gt__lookup_torch(self);
    name_ctx c = {self, seq};
    gt_py_namer n = {self->tensor_type, self->module_type, param_known, name_tensor, &c};
    self->errors += gt_py_bind_names(&n, uf);
    swallow(self);
}
