/* functorch.c: looking through torch.func's wrapped tensors. */
#include "state.h"

/* Look up, once, functorch's helpers (torch._C._functorch, 1.13 too). */
static void ft_lookup(gt_pyrec *self)
{
    if (self->ft_looked)
        return;
    self->ft_looked = 1;
    /* (an attribute of torch._C; 1.13 does not register it as a module) */
    PyObject *c = PyImport_ImportModule("torch._C");
    PyObject *m = c ? PyObject_GetAttrString(c, "_functorch") : NULL;
    Py_XDECREF(c);
    if (m) {
        self->ft_wrapped = PyObject_GetAttrString(m, "is_functorch_wrapped_tensor");
        self->ft_unwrap = PyObject_GetAttrString(m, "get_unwrapped");
        Py_DECREF(m);
    }
    PyErr_Clear();
    if (!self->ft_wrapped || !PyCallable_Check(self->ft_wrapped) || !self->ft_unwrap ||
        !PyCallable_Check(self->ft_unwrap)) {
        Py_CLEAR(self->ft_wrapped);
        Py_CLEAR(self->ft_unwrap);
    }
}

/* Called under a torch.func transform (a frame of torch/_functorch/ is on
 * the stack): can its wrappers be looked through? */
int gt__ft_active(gt_pyrec *self)
{
    ft_lookup(self);
    if (!self->ft_wrapped)
        return 0;
    self->ft_seen = 1;
    return 1;
}

/* The tensor inside torch.func's wrappers of t (GradTrackingTensor,
 * BatchedTensor, nested as the transforms are): a new reference, or NULL
 * when t wraps nothing. That inner tensor is the one the mode saw in the
 * ops, with the version counter the recorder follows. */
PyObject *gt__ft_inner(gt_pyrec *self, PyObject *t)
{
    ft_lookup(self);
    if (!self->ft_wrapped)
        return NULL;
    PyObject *cur = NULL;
    for (int depth = 0; depth < MAX_NESTING; depth++) {
        PyObject *x = cur ? cur : t;
        PyObject *r = PyObject_CallOneArg(self->ft_wrapped, x);
        int wrapped = r == Py_True;
        Py_XDECREF(r);
        if (!wrapped)
            break;
        PyObject *in = PyObject_CallOneArg(self->ft_unwrap, x);
        if (!in || in == x ||
            !PyObject_TypeCheck(in, (PyTypeObject *)self->tensor_type)) {
            Py_XDECREF(in);
            break;
        }
        Py_XSETREF(cur, in);
    }
    swallow(self);
    if (cur)
        self->ft_seen = 1;
    return cur;
}
