/* ent.c: the TensorEntry type, a recorded tensor's entry and weakref callback. */
#include "state.h"

static void vc_release(gt_vc *vc)
{
    if (vc && --vc->refs == 0)
        free(vc);
}

void gt__storage_release(gt_pyrec *self, gt_storage_ent *st)
{
    if (!st || --st->refs > 0)
        return;
    uint64_t *v = gt_map_get(&self->storages, st->key, 0, 0);
    if (v && *v == (uintptr_t)st)
        gt_map_del(&self->storages, st->key, 0, 0);
    free(st);
}

/* Take entry e off its storage's list and release the storage (nothing
 * when it has none). Can't fail. */
void gt__ent_unlink(gt_pyrec *self, gt_tensor_ent *e)
{
    if (!e->st)
        return;
    if (e->st_prev)
        e->st_prev->st_next = e->st_next;
    else
        e->st->head = e->st_next;
    if (e->st_next)
        e->st_next->st_prev = e->st_prev;
    else
        e->st->tail = e->st_prev;
    gt__storage_release(self, e->st);
    e->st = NULL;
    e->st_prev = e->st_next = NULL;
}

/* Forget a tensor entry: out of the map, off its storage, weakref dropped. */
void gt__ent_forget(gt_pyrec *self, gt_tensor_ent *e)
{
    if (!e->rec)
        return;
    e->rec = NULL;
    gt__ent_unlink(self, e);
    vc_release(e->vc);
    e->vc = NULL;
    gt_map_del(&self->byid, (uint64_t)e->id, 0, 0);
    uint64_t *v = gt_map_get(&self->tensors, e->addr, 0, 0);
    int mine = v && *v == (uintptr_t)e;
    if (mine)
        gt_map_del(&self->tensors, e->addr, 0, 0);
    PyObject *wr = e->wr;
    e->wr = NULL;
    Py_XDECREF(wr);
    if (mine)
        Py_DECREF(e); /* the map's reference */
}

/* Weakref callback: the tensor died. */
static PyObject *ent_call(PyObject *op, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    gt_tensor_ent *e = (gt_tensor_ent *)op;
    Py_INCREF(e);
    if (e->rec)
        gt__ent_forget(e->rec, e);
    Py_DECREF(e);
    Py_RETURN_NONE;
}

static void ent_dealloc(PyObject *op)
{
    gt_tensor_ent *e = (gt_tensor_ent *)op;
    PyTypeObject *tp = Py_TYPE(op);
    Py_CLEAR(e->wr);
    free(e->geom);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot ent_slots[] = {
    {Py_tp_call, ent_call},
    {Py_tp_dealloc, ent_dealloc},
    {Py_tp_doc, "a recorded tensor (weakref callback forgetting it)"},
    {0, NULL},
};

PyType_Spec gt__ent_spec = {
    .name = "_gradtrace.TensorEntry",
    .basicsize = sizeof(gt_tensor_ent),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ent_slots,
};
