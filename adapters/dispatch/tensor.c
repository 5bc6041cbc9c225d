/* tensor.c: tensor facts and ids: entries, storages, versions, tensors rows. */
#include "state.h"

/* dtype: interned name and item size, cached by dtype object. */
gt_id gt__dtype_of(gt_pyrec *self, PyObject *t, PyObject *dtype, int *itemsize)
{
    uint64_t *v = gt_map_get(&self->dtypes, (uintptr_t)dtype, 0, 0);
    if (v) {
        *itemsize = (int)(*v >> 48);
        return (gt_id)(*v & 0xffffffffffffull);
    }
    PyObject *s = PyObject_Str(dtype);
    const char *name = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!name) {
        Py_XDECREF(s);
        swallow(self);
        *itemsize = 1;
        return 0;
    }
    if (!strncmp(name, "torch.", 6))
        name += 6;
    gt_id id = gt__intern_str(self, name);
    Py_DECREF(s);
    int64_t isz = gt__long_call(t, STATE(self)->s_element_size, 1, self);
    *itemsize = (int)isz;
    if (id && gt__keep(self, dtype) == 0)
        gt_map_put(&self->dtypes, (uintptr_t)dtype, 0, 0,
                   (uint64_t)id | ((uint64_t)isz << 48));
    swallow(self);
    return id;
}

int gt__read_geom(gt_pyrec *self, PyObject *t, int *ndim, int64_t **geom)
{
    modstate *ms = STATE(self);
    PyObject *shape = PyObject_GetAttr(t, ms->s_shape);
    PyObject *stride = shape ? PyObject_CallMethodNoArgs(t, ms->s_stride) : NULL;
    int rc = -1;
    if (!shape || !stride || !PyTuple_Check(shape) || !PyTuple_Check(stride) ||
        PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(stride))
        goto out;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    int64_t *g = malloc(sizeof *g * (size_t)(2 * n + 1));
    if (!g)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        g[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        g[n + i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) {
        free(g);
        goto out;
    }
    *ndim = (int)n;
    *geom = g;
    rc = 0;
out:
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    swallow(self);
    return rc;
}

int64_t gt__read_version(gt_pyrec *self, PyObject *t)
{
    /* inference tensors have no version counter: report 0 */
    return gt__long_attr(t, STATE(self)->s_version, 0, self);
}

/* The storage key of t (data pointer of its storage), 0 if it has none. */
uint64_t gt__storage_key(gt_pyrec *self, PyObject *t, int64_t offset, int itemsize)
{
    int64_t dp = gt__long_call(t, STATE(self)->s_data_ptr, 0, self);
    if (!dp)
        return 0;
    return (uint64_t)(dp - offset * itemsize);
}

/* t's storage object (new reference), NULL if none. */
static PyObject *storage_of_tensor(gt_pyrec *self, PyObject *t)
{
    modstate *ms = STATE(self);
    return PyObject_CallMethodNoArgs(t, self->has_untyped ? ms->s_untyped_storage
                                                          : ms->s_storage);
}

/* The address of t's StorageImpl, 0 if unknown. */
static int64_t storage_impl(gt_pyrec *self, PyObject *t)
{
    PyObject *s = storage_of_tensor(self, t);
    int64_t impl = s ? gt__long_attr(s, STATE(self)->s_cdata, 0, self) : 0;
    Py_XDECREF(s);
    swallow(self);
    return impl;
}

static gt_storage_ent *storage_for(gt_pyrec *self, PyObject *t, uint64_t key)
{
    uint64_t *v = gt_map_get(&self->storages, key, 0, 0);
    if (v)
        return (gt_storage_ent *)(uintptr_t)*v;
    modstate *ms = STATE(self);
    gt_storage_ent *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->id = ++self->next_storage;
    st->key = key;
    PyObject *s = storage_of_tensor(self, t);
    int64_t nbytes = s ? gt__long_call(s, ms->s_nbytes, 0, self) : 0;
    st->impl = s ? gt__long_attr(s, ms->s_cdata, 0, self) : 0;
    Py_XDECREF(s);
    swallow(self);
    /* device name, cached by get_device() (-1: cpu) */
    int64_t dix = gt__long_call(t, ms->s_get_device, -1, self);
    uint64_t *dv = gt_map_get(&self->dtypes, 0, (uint64_t)dix, 1);
    gt_id did = dv ? (gt_id)*dv : 0;
    if (!did) {
        PyObject *dev = PyObject_GetAttr(t, ms->s_device);
        PyObject *devs = dev ? PyObject_Str(dev) : NULL;
        const char *dname = devs ? PyUnicode_AsUTF8(devs) : NULL;
        did = gt__intern_str(self, dname ? dname : "unknown");
        Py_XDECREF(devs);
        Py_XDECREF(dev);
        swallow(self);
        if (did)
            gt_map_put(&self->dtypes, 0, (uint64_t)dix, 1, (uint64_t)did);
    }
    st->nbytes = nbytes;
    st->device = did;
    st->epoch = gt_recorder_cuts(self->r);
    ck(self, gt_storage(self->r, st->id, nbytes, did));
    if (gt_map_put(&self->storages, key, 0, 0, (uintptr_t)st) < 0) {
        free(st);
        return NULL;
    }
    return st;
}

/* e (tensor t) is named by a row written now: its row is written again if
 * a flight recorder's window cut may have dropped it since (a row still
 * there is left as it is). */
static void touch(gt_pyrec *self, gt_tensor_ent *e, PyObject *t)
{
    if (e->written && e->wepoch != gt_recorder_cuts(self->r))
        gt__write_tensor(self, e, t, -1);
}

/* The entry of tensor t, if recorded; touched (a caller names it). */
gt_tensor_ent *gt__lookup(gt_pyrec *self, PyObject *t)
{
    uint64_t *v = gt_map_get(&self->tensors, (uintptr_t)t, 0, 0);
    gt_tensor_ent *e = v ? (gt_tensor_ent *)(uintptr_t)*v : NULL;
    if (e)
        touch(self, e, t);
    return e;
}

/* id (a tensor a row written now names) if its row is there: an entry
 * alive is touched; a dead one's row may be gone after a cut (0). */
static gt_id named(gt_pyrec *self, gt_id id)
{
    uint64_t *v = id ? gt_map_get(&self->byid, (uint64_t)id, 0, 0) : NULL;
    if (v) {
        gt_tensor_ent *e = (gt_tensor_ent *)(uintptr_t)*v;
        PyObject *t = e->wr ? gt_py_weak_get(e->wr) : NULL;
        if (t) {
            touch(self, e, t);
            Py_DECREF(t);
            return id;
        }
    }
    return !id || !gt_recorder_cuts(self->r) ? id : 0;
}

/* Compare a tensor's version with what we expect; record an observed bump
 * when it differs. */
void gt__observe(gt_pyrec *self, gt_tensor_ent *e, int64_t version)
{
    if (e->vc && version != e->vc->expected) {
        ck(self, gt_version_bump(self->r, 0, e->id, version, 1, NULL));
        e->vc->expected = version;
    }
}

/* Write the tensors row of e (tensor t); is_leaf < 0: read it. Written
 * again (INSERT OR IGNORE) after a window cut dropped it; if a cut came
 * since e was made or written, what the row names may be gone: its
 * storage's row is written again, its base named only if its row is
 * there, the op that made it only if the window kept it. */
void gt__write_tensor(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int is_leaf)
{
    modstate *ms = STATE(self);
    uint64_t epoch = gt_recorder_cuts(self->r);
    int again = e->written, cut = e->wepoch != epoch;
    e->wepoch = epoch; /* first: a chain of bases ends here */
    e->written = 1;
    gt_id alias_of = e->alias_of;
    int64_t created_by = e->created_by;
    if (cut) {
        if (e->st && e->st->epoch != epoch) {
            ck(self, gt_storage(self->r, e->st->id, e->st->nbytes, e->st->device));
            e->st->epoch = epoch;
        }
        alias_of = named(self, alias_of);
        if (created_by > 0 && created_by < gt_recorder_window_start(self->r))
            created_by = 0;
    }
    static const int64_t none[1] = {0};
    gt_tensor_info ti = {
        .id = e->id,
        .storage = e->st ? e->st->id : 0,
        .dtype = e->dtype,
        .ndim = e->ndim,
        .shape = e->geom ? e->geom : none,
        .strides = e->geom ? e->geom + e->ndim : none,
        .storage_offset = e->offset,
        .requires_grad = gt__truth_attr(t, ms->s_requires_grad, self),
        .is_leaf = is_leaf >= 0 ? is_leaf : gt__truth_attr(t, ms->s_is_leaf, self),
        .created_by = created_by,
        .alias_of = alias_of,
        .shares_version = e->shares,
        .version_counter = e->vc ? e->vc->id : e->id,
    };
    ck(self, again ? gt_tensor_again(self->r, &ti) : gt_tensor(self->r, &ti));
}

/* Find or record tensor t. created_by: op seq for an op's output, else 0.
 * via: the tensor it is a view of per the op schema (shares its version
 * counter), or NULL. *version gets t's version now. Returns a borrowed entry
 * or NULL (untracked). */
gt_tensor_ent *gt__see_tensor(gt_pyrec *self, PyObject *t, int64_t created_by,
                              gt_tensor_ent *via, int64_t *version)
{
    modstate *ms = STATE(self);
    gt_tensor_ent *e = gt__lookup(self, t);
    /* a fresh output of an op starts at version 0 (a view's is its base's) */
    int64_t ver = !e && created_by ? 0 : gt__read_version(self, t);
    if (version)
        *version = ver;
    if (e) {
        gt__observe(self, e, ver);
        return e;
    }
    e = PyObject_New(gt_tensor_ent, ms->ent_type);
    if (!e) {
        swallow(self);
        return NULL;
    }
    e->rec = NULL;
    e->wr = NULL;
    e->addr = (uintptr_t)t;
    e->vc = NULL;
    e->st = NULL;
    e->st_prev = e->st_next = NULL;
    e->geom = NULL;
    e->ndim = 0;
    e->id = ++self->next_tensor;
    e->wepoch = gt_recorder_cuts(self->r);
    e->written = 0;
    e->saved = 0;
    e->seen = 0;
    e->created_by = created_by;
    e->last_out = created_by;
    e->wr = PyWeakref_NewRef(t, (PyObject *)e);
    if (!e->wr) {
        swallow(self);
        Py_DECREF(e);
        return NULL;
    }
    if (gt_map_put(&self->tensors, (uintptr_t)t, 0, 0, (uintptr_t)e) < 0) {
        Py_DECREF(e); /* drops the weakref too */
        return NULL;
    }
    if (gt_map_put(&self->byid, (uint64_t)e->id, 0, 0, (uintptr_t)e) < 0)
        swallow(self);
    e->rec = self; /* the map owns our reference from here on */

    PyObject *dtype = PyObject_GetAttr(t, ms->s_dtype);
    int itemsize = 1;
    e->dtype = dtype ? gt__dtype_of(self, t, dtype, &itemsize) : 0;
    e->itemsize = itemsize;
    Py_XDECREF(dtype);
    swallow(self);
    e->offset = gt__long_call(t, ms->s_storage_offset, 0, self);
    if (gt__read_geom(self, t, &e->ndim, &e->geom) < 0) {
        e->ndim = 0;
        e->geom = NULL;
    }
    uint64_t key = gt__storage_key(self, t, e->offset, itemsize);
    if (key) {
        e->st = storage_for(self, t, key);
        if (e->st)
            e->st->refs++;
    }
    gt_id alias_of = 0;
    int shares = 0;
    if (via && via->vc) {
        /* inside __torch_dispatch__ a view output does not share its base's
         * counter yet (ADInplaceOrView sets that up after we return): take
         * the base's version */
        alias_of = via->id;
        shares = 1;
        e->vc = via->vc;
        ver = via->vc->expected;
        if (version)
            *version = ver;
    }
    if (!shares && !created_by) {
        /* (an output's view metadata is set only after the dispatch) */
        PyObject *isv = PyObject_CallMethodNoArgs(t, ms->s_is_view);
        int is_view = isv ? PyObject_IsTrue(isv) : 0;
        Py_XDECREF(isv);
        swallow(self);
        if (is_view > 0) {
            PyObject *base = PyObject_GetAttr(t, ms->s_base);
            if (base && PyObject_TypeCheck(base, (PyTypeObject *)self->tensor_type)) {
                gt_tensor_ent *b = gt__see_tensor(self, base, 0, NULL, NULL);
                if (b && b->vc) {
                    alias_of = b->id;
                    shares = 1;
                    e->vc = b->vc;
                }
            }
            Py_XDECREF(base);
            swallow(self);
        }
    }
    if (!shares && e->st && e->st->head)
        alias_of = e->st->head->id;
    if (shares) {
        e->vc->refs++;
    } else {
        e->vc = calloc(1, sizeof *e->vc);
        if (e->vc) {
            e->vc->id = e->id;
            e->vc->expected = ver;
            e->vc->refs = 1;
        }
    }
    if (e->st) {
        e->st_prev = e->st->tail;
        if (e->st->tail)
            e->st->tail->st_next = e;
        else
            e->st->head = e;
        e->st->tail = e;
    }
    e->alias_of = alias_of;
    e->shares = shares;
    e->written = 0;
    /* an op's output gets requires_grad and its grad_fn only after the
     * dispatch returns: its row is written at the next op (gt__flush_pending) */
    if (!created_by)
        gt__write_tensor(self, e, t, -1);
    if (shares && !via)
        gt__observe(self, e, ver);
    return e;
}

/* gt__see_tensor for a tensor met outside an op (a backward root or input, a
 * leaf's variable): a torch.func wrapper is the tensor it wraps. */
gt_tensor_ent *gt__see_inner(gt_pyrec *self, PyObject *t, int64_t *version)
{
    PyObject *in = gt__ft_inner(self, t);
    gt_tensor_ent *e = gt__see_tensor(self, in ? in : t, 0, NULL, version);
    Py_XDECREF(in);
    return e;
}

/* Compare the storage a watched tensor t (entry e) is on with the one it was
 * seen on; when they differ, move e to the new storage and, if `report`,
 * write a storage_swaps row (noticed by op `op` or by the start of backward
 * call `bid`, at `stack`). */
void gt__check_storage(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int64_t op,
                       gt_id bid, gt_id stack, int report)
{
    modstate *ms = STATE(self);
    /* a dtype changed by `.data =` gives another key too: reported alike */
    int64_t offset = gt__long_call(t, ms->s_storage_offset, 0, self);
    uint64_t key = gt__storage_key(self, t, offset, e->itemsize);
    swallow(self);
    uint64_t was = e->st ? e->st->key : 0;
    if (key == was) {
        e->seen = gt_recorder_seq(self->r);
        return;
    }
    gt_storage_ent *st = key ? storage_for(self, t, key) : NULL;
    if (report && e->st && e->st->impl && storage_impl(self, t) == e->st->impl)
        report = 0; /* the same storage resized (FSDP2 frees and refills a
                     * parameter's with resize_): its memory moved, the
                     * tensor did not; autograd reads it where it is */
    if (report) {
        gt_swap_info si = {.tensor = e->id,
                           .old_storage = e->st ? e->st->id : 0,
                           .new_storage = st ? st->id : 0,
                           .op = op,
                           .backward = bid,
                           .last_seen = e->seen,
                           .stack = stack};
        ck(self, gt_storage_swap(self->r, &si));
    }
    gt__ent_unlink(self, e);
    if (st) {
        st->refs++;
        e->st = st;
        e->st_prev = st->tail;
        if (st->tail)
            st->tail->st_next = e;
        else
            st->head = e;
        st->tail = e;
    }
    e->offset = offset;
    int ndim = 0;
    int64_t *geom = NULL;
    if (gt__read_geom(self, t, &ndim, &geom) == 0) {
        free(e->geom);
        e->geom = geom;
        e->ndim = ndim;
    }
    e->seen = gt_recorder_seq(self->r);
}
