/*
 * kwrites.c: kernel writes, the writes that move no version
 * (include/gradtrace/kwrites.h, table kernel_writes). op_meta
 * (gradtrace/_mode.py) names, for an op whose written arguments PyTorch does
 * not bump (BUMP_NONE), its kernel writes as kw = None or (when, when_name,
 * unmarked positions): a written argument whose version did not move once
 * the op returned is a kernel_writes row; the unmarked ones (the
 * kernel-write list's) are written only when the bool argument `when` is
 * true (when >= 0). The module hands the list itself to Python
 * (KERNEL_WRITES, WRITES_NO_ELEMENT), which _mode.py reads.
 */
#include "state.h"

#include <gradtrace/kwrites.h>

void gt__kw_meta(gt_opmeta *m, PyObject *kw)
{
    Py_ssize_t when = -1;
    PyObject *name = NULL, *unmarked = NULL;
    m->when = -1;
    if (kw == Py_None ||
        !PyArg_ParseTuple(kw, "nUO!", &when, &name, &PyTuple_Type, &unmarked))
        return;
    m->kw = 1;
    m->when = when >= 0 && when < 100000 ? (int)when : -1;
    m->when_name = PyUnicode_GET_LENGTH(name) ? Py_NewRef(name) : NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(unmarked); i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(unmarked, i));
        if (k >= 0 && k < m->nwpos && m->wpos[k])
            m->wpos[k] = 2;
    }
}

int gt__kw_when(const gt_opmeta *m, PyObject *args, PyObject *kwargs)
{
    if (!m->kw || m->when < 0)
        return 1;
    if (m->when < PyTuple_GET_SIZE(args))
        return PyTuple_GET_ITEM(args, m->when) == Py_True;
    PyObject *v = kwargs && m->when_name && PyDict_Check(kwargs)
                      ? PyDict_GetItemWithError(kwargs, m->when_name)
                      : NULL;
    return v == Py_True;
}

void gt__kw_after(gt_pyrec *self, const gt_opmeta *m, const argref *a, int64_t seq)
{
    if (!m->kw || !a->e || gt__read_version(self, a->t) != a->ver)
        return;
    int marked =
        a->schema_pos < 0 || a->schema_pos >= m->nwpos || m->wpos[a->schema_pos] == 1;
    ck(self, gt_kernel_write(self->r, seq, a->e->id, a->ver, marked));
}

int gt__kw_module_add(PyObject *m)
{
#define GT__KW_TUPLE(op, args, when, reason) "(ssss)"
#define GT__KW_ARGS(op, args, when, reason)  op, args, when, reason,
    PyObject *list = Py_BuildValue("(" GT_KERNEL_WRITES(GT__KW_TUPLE) ")",
                                   GT_KERNEL_WRITES(GT__KW_ARGS) NULL);
#undef GT__KW_TUPLE
#undef GT__KW_ARGS
#define GT__KW_FMT(op)  "s"
#define GT__KW_NAME(op) op,
    PyObject *none = Py_BuildValue("(" GT_WRITES_NO_ELEMENT(GT__KW_FMT) ")",
                                   GT_WRITES_NO_ELEMENT(GT__KW_NAME) NULL);
#undef GT__KW_FMT
#undef GT__KW_NAME
    int rc = list && none && PyModule_AddObjectRef(m, "KERNEL_WRITES", list) == 0 &&
                     PyModule_AddObjectRef(m, "WRITES_NO_ELEMENT", none) == 0
                 ? 0
                 : -1;
    Py_XDECREF(list);
    Py_XDECREF(none);
    return rc;
}
