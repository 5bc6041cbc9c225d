/* util.c: attribute readers, interning and per-op scratch of the dispatch adapter. */
#include "state.h"

/* v as an int64_t, v's reference taken; dflt (the Python error swallowed)
 * when v is NULL or not an integer that fits. */
static int64_t long_of(PyObject *v, int64_t dflt, gt_pyrec *self)
{
    if (!v) {
        swallow(self);
        return dflt;
    }
    int64_t x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) {
        swallow(self);
        return dflt;
    }
    return x;
}

int64_t gt__long_attr(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self)
{
    return long_of(PyObject_GetAttr(o, name), dflt, self);
}

int64_t gt__long_call(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self)
{
    return long_of(PyObject_CallMethodNoArgs(o, name), dflt, self);
}

int gt__truth_attr(PyObject *o, PyObject *name, gt_pyrec *self)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) {
        swallow(self);
        return 0;
    }
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (t < 0) {
        swallow(self);
        return 0;
    }
    return t;
}

gt_id gt__intern_str(gt_pyrec *self, const char *s)
{
    gt_id id = 0;
    if (ck(self, gt_intern_string(self->r, s, strlen(s), &id)) < 0)
        return 0;
    return id;
}

int gt__keep(gt_pyrec *self, PyObject *o)
{
    return PyList_Append(self->keep, o);
}

gt_id gt__current_thread(gt_pyrec *self)
{
    unsigned long tid = PyThread_get_thread_native_id();
    uint64_t *v = gt_map_get(&self->threads, tid, 0, 0);
    if (v)
        return (gt_id)*v;
    gt_id id = 0;
    if (ck(self, gt_intern_thread(self->r, (int64_t)tid, NULL, &id)) < 0)
        return 0;
    if (gt_map_put(&self->threads, tid, 0, 0, (uint64_t)id) < 0)
        PyErr_NoMemory(), swallow(self);
    return id;
}

/* A scratch area for one op (or one stack capture): a spare one, else a new
 * one. Returns NULL when out of memory. */
gt_scratch *gt__scratch_take(gt_pyrec *self)
{
    gt_scratch *sc = self->spare;
    if (sc) {
        self->spare = sc->next;
        sc->next = NULL;
        sc->in.n = sc->out.n = 0;
        return sc;
    }
    return calloc(1, sizeof *sc);
}

/* Give a scratch area back for the next op. Accepts NULL. */
void gt__scratch_give(gt_pyrec *self, gt_scratch *sc)
{
    if (!sc)
        return;
    sc->next = self->spare;
    self->spare = sc;
}

void gt__scratch_free_all(gt_pyrec *self)
{
    while (self->spare) {
        gt_scratch *sc = self->spare;
        self->spare = sc->next;
        free(sc->in.v);
        free(sc->out.v);
        free(sc->frames);
        free(sc);
    }
}

int gt__argvec_push(argvec *a, argref r)
{
    if (GT_ALLOC_GROW(a->v, a->n + 1, a->cap, 16) != 0)
        return -1;
    a->v[a->n++] = r;
    return 0;
}
