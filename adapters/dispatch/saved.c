/* saved.c: the tensors nodes save: matching, fingerprints, checkpoint regions. */
#include "state.h"

#include <xxhash.h>

/* The recorded tensor a saved tensor is: the same object, else the live
 * tensor with the same storage, offset, geometry and dtype (for `result`
 * slots preferring the outputs of the node's op, else the latest seen). */
static gt_id match_saved(gt_pyrec *self, PyObject *v, int is_result, int64_t node_op,
                         int64_t *nbytes, int *is_out /* OUT */,
                         gt_tensor_ent **ent /* OUT */)
{
    *is_out = 0;
    *ent = NULL;
    modstate *ms = STATE(self);
    PyObject *dtype = PyObject_GetAttr(v, ms->s_dtype);
    int itemsize = 1;
    gt_id dt = dtype ? gt__dtype_of(self, v, dtype, &itemsize) : 0;
    Py_XDECREF(dtype);
    swallow(self);
    int ndim = 0;
    int64_t *geom = NULL;
    gt__read_geom(self, v, &ndim, &geom);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= geom[i];
    *nbytes = geom ? numel * itemsize : -1;
    gt_id found = 0;
    gt_tensor_ent *e = gt__lookup(self, v);
    if (e) {
        found = e->id;
        *is_out = node_op && e->last_out == node_op;
        *ent = e;
        goto out;
    }
    if (!geom)
        goto out;
    int64_t offset = gt__long_call(v, ms->s_storage_offset, 0, self);
    uint64_t key = gt__storage_key(self, v, offset, itemsize);
    uint64_t *sv = key ? gt_map_get(&self->storages, key, 0, 0) : NULL;
    if (!sv)
        goto out;
    gt_storage_ent *st = (gt_storage_ent *)(uintptr_t)*sv;
    gt_tensor_ent *best = NULL;
    for (gt_tensor_ent *c = st->head; c; c = c->st_next) {
        if (c->offset != offset || c->ndim != ndim || c->dtype != dt || !c->geom ||
            memcmp(c->geom, geom, sizeof *geom * (size_t)(2 * ndim)))
            continue;
        if (is_result && node_op && c->last_out == node_op) {
            best = c;
            *is_out = 1;
            break;
        }
        best = c; /* later entries are newer */
    }
    if (best)
        found = best->id;
    *ent = best;
out:
    free(geom);
    return found;
}

/* XXH3 of the bytes CPU tensor t spans (from its data pointer over its
 * sizes and strides) into *hash, their count into *len. Returns 0, or -1
 * for a tensor whose bytes cannot be read here (not on the CPU, no data). */
static int fingerprint(gt_pyrec *self, PyObject *t, uint64_t *hash, int64_t *len)
{
    modstate *ms = STATE(self);
    if (gt__long_call(t, ms->s_get_device, 0, self) != -1)
        return -1;
    int64_t dp = gt__long_call(t, ms->s_data_ptr, 0, self);
    PyObject *dtype = PyObject_GetAttr(t, ms->s_dtype);
    int itemsize = 1;
    if (dtype)
        gt__dtype_of(self, t, dtype, &itemsize);
    Py_XDECREF(dtype);
    int ndim = 0;
    int64_t *geom = NULL;
    int ok = gt__read_geom(self, t, &ndim, &geom) == 0;
    swallow(self);
    if (!ok)
        return -1;
    int64_t elems = 1;
    for (int i = 0; i < ndim; i++) {
        if (geom[i] == 0) {
            elems = 0;
            break;
        }
        int64_t st = geom[ndim + i] < 0 ? -geom[ndim + i] : geom[ndim + i];
        elems += (geom[i] - 1) * st;
    }
    free(geom);
    if (elems && !dp)
        return -1;
    *len = elems * itemsize;
    *hash = *len ? XXH3_64bits((const void *)(uintptr_t)dp, (size_t)*len) : 0;
    return 0;
}

/* With check_saved: fingerprint saved tensor v (row `sseq` of node nid,
 * read again as attr[index] of the node when it runs). */
static void fingerprint_saved(gt_pyrec *self, gt_id nid, int64_t sseq, PyObject *v,
                              PyObject *attr, Py_ssize_t index)
{
    uint64_t h;
    int64_t len;
    if (!self->fp || !sseq || !attr || fingerprint(self, v, &h, &len) < 0)
        return;
    ck(self, gt_fingerprint(self->r, sseq, 0, 0, len, h));
    PyObject *key = PyLong_FromLongLong(nid);
    PyObject *list = key ? PyDict_GetItemWithError(self->fp, key) : NULL;
    if (key && !list && !PyErr_Occurred()) {
        list = PyList_New(0);
        if (list && PyDict_SetItem(self->fp, key, list) < 0)
            Py_CLEAR(list);
        Py_XDECREF(list); /* the dict holds it */
    }
    PyObject *it = list ? Py_BuildValue("(OnL)", attr, index, (long long)sseq) : NULL;
    if (it)
        PyList_Append(list, it);
    Py_XDECREF(it);
    Py_XDECREF(key);
    swallow(self);
}

/* With check_saved, when node nid runs in backward: fingerprint again what
 * it saved. */
void gt__fingerprint_use(gt_pyrec *self, PyObject *node, gt_id nid)
{
    if (!self->fp)
        return;
    PyObject *key = PyLong_FromLongLong(nid);
    PyObject *list = key ? PyDict_GetItemWithError(self->fp, key) : NULL;
    Py_XINCREF(list);
    if (list)
        PyDict_DelItem(self->fp, key);
    Py_XDECREF(key);
    for (Py_ssize_t i = 0; list && i < PyList_GET_SIZE(list); i++) {
        PyObject *it = PyList_GET_ITEM(list, i);
        PyObject *v = PyObject_GetAttr(node, PyTuple_GET_ITEM(it, 0));
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(it, 1));
        if (v && index >= 0 && (PyTuple_Check(v) || PyList_Check(v))) {
            PyObject *x = index < PySequence_Fast_GET_SIZE(v)
                              ? Py_NewRef(PySequence_Fast_GET_ITEM(v, index))
                              : NULL;
            Py_SETREF(v, x);
        }
        uint64_t h;
        int64_t len;
        if (v && PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type) &&
            fingerprint(self, v, &h, &len) == 0)
            ck(self, gt_fingerprint(self->r, PyLong_AsLongLong(PyTuple_GET_ITEM(it, 2)),
                                    1, self->cur_backward, len, h));
        Py_XDECREF(v);
        swallow(self);
    }
    Py_XDECREF(list);
    swallow(self);
}

/* custom: the node of a custom autograd.Function, whose saved_tensors may
 * be its own outputs (unpacked as new tensor objects on the same storage and
 * version counter): the outputs of its call (node op) are preferred. */
static void record_saved(gt_pyrec *self, gt_id nid, int64_t op, PyObject *slot,
                         PyObject *v, int custom, PyObject *attr, Py_ssize_t index)
{
    const char *s = PyUnicode_AsUTF8(slot);
    if (!s) {
        swallow(self);
        return;
    }
    int is_result = !strncmp(s, "result", 6);
    /* under torch.func the node saved a wrapper of the tensor the ops saw */
    PyObject *inner = self->ft_seen ? gt__ft_inner(self, v) : NULL;
    if (inner)
        v = inner;
    int64_t nbytes = -1;
    int is_out = 0;
    gt_tensor_ent *ent = NULL;
    gt_id tid = match_saved(self, v, is_result || custom, op, &nbytes, &is_out, &ent);
    if (ent && gt__lookup(self, v) == ent) {
        /* the saved tensor is the recorded object itself (not an output
         * unpacked anew): `.data =` on it changes what backward reads. It is
         * watched from the storage it is on now (unwatched, an earlier swap
         * went unnoticed) */
        gt__check_storage(self, ent, v, 0, 0, 0, 0);
        ent->saved = 1;
    }
    int64_t ver = gt__read_version(self, v);
    int64_t sseq = 0;
    if (ck(self, gt_saved_tensor(self->r, nid, gt__intern_str(self, s), tid, ver,
                                 custom ? is_out : is_result, nbytes, &sseq)) == 0 &&
        self->check_saved)
        fingerprint_saved(self, nid, sseq, v, attr, index);
    Py_XDECREF(inner);
}

/* Record the tensors node `nid` saved, reading the (attribute, slot) pairs
 * of `pairs`. Returns a new tuple of the pairs that gave nothing (None or an
 * error), or NULL if none did: an output is saved after the node is attached
 * to it, so a slot may only be filled one op later. */
PyObject *gt__record_saved_all(gt_pyrec *self, gt_id nid, int64_t op, PyObject *node,
                               PyObject *pairs, gt_nodetype *nt)
{
    PyObject *missing = NULL;
    /* the first node of a class shows which _saved_ slots hold sizes,
     * scalars and flags rather than tensors: later nodes skip them */
    PyObject *useful = nt && !nt->pruned ? PyList_New(0) : NULL;
    gt_nodetype *ntype = nt ? nt : gt__node_type(self, Py_TYPE(node));
    int custom = ntype && ntype->is_custom;
    Py_ssize_t n = PyTuple_GET_SIZE(pairs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        PyObject *attr = PyTuple_GET_ITEM(pair, 0), *slot = PyTuple_GET_ITEM(pair, 1);
        PyObject *v = PyObject_GetAttr(node, attr);
        if (!v || v == Py_None) {
            /* not saved yet; or freed by an earlier backward, or modified
             * already: then the engine will say so itself if it matters */
            Py_XDECREF(v);
            swallow(self);
            if (!missing)
                missing = PyList_New(0);
            if (missing && PyList_Append(missing, pair) < 0)
                swallow(self);
            if (useful && PyList_Append(useful, pair) < 0)
                swallow(self);
            continue;
        }
        if (PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type)) {
            record_saved(self, nid, op, slot, v, custom, attr, -1);
            if (useful && PyList_Append(useful, pair) < 0)
                swallow(self);
        } else if (PyTuple_Check(v) || PyList_Check(v)) {
            Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
            int has = m == 0;
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *x = PySequence_Fast_GET_ITEM(v, j);
                if (x == Py_None)
                    has = 1;
                if (!PyObject_TypeCheck(x, (PyTypeObject *)self->tensor_type))
                    continue;
                has = 1;
                PyObject *sl = PyUnicode_FromFormat("%U[%zd]", slot, j);
                if (sl)
                    record_saved(self, nid, op, sl, x, custom, attr, j);
                Py_XDECREF(sl);
            }
            if (has && useful && PyList_Append(useful, pair) < 0)
                swallow(self);
        }
        Py_DECREF(v);
        swallow(self);
    }
    if (useful) {
        PyObject *t = PyList_AsTuple(useful);
        if (t) {
            Py_SETREF(nt->saved, t);
            nt->pruned = 1;
        }
        Py_DECREF(useful);
        swallow(self);
    }
    if (!missing)
        return NULL;
    PyObject *t = PyList_AsTuple(missing);
    Py_DECREF(missing);
    swallow(self);
    return t;
}

/* Record, as saved by node nid, the inputs of checkpoint region rg: the
 * tensors its unpacking checks (slot checkpoint_input[i]). */
void gt__region_saved(gt_pyrec *self, gt_region *rg, gt_id nid)
{
    for (size_t i = 0; i < rg->n; i++) {
        char slot[48];
        snprintf(slot, sizeof slot, "checkpoint_input[%zu]", i);
        ck(self,
           gt_saved_tensor_at(self->r, nid, gt__intern_str(self, slot), rg->tensors[i],
                              rg->versions[i], 0, rg->nbytes[i], rg->seq, NULL));
    }
}

void gt__region_pop(gt_pyrec *self, int64_t seq)
{
    if (!self->nregions || self->regions[self->nregions - 1].seq != seq)
        return;
    gt_region *rg = &self->regions[--self->nregions];
    free(rg->tensors);
    free(rg->versions);
    free(rg->nbytes);
}

/* Open a checkpoint region for call `seq` over the tensors of `in`. */
void gt__region_push(gt_pyrec *self, int64_t seq, argvec *in)
{
    if (GT_ALLOC_GROW(self->regions, self->nregions + 1, self->capregions, 16) != 0)
        return;
    size_t n = in->n ? in->n : 1;
    gt_region rg = {.seq = seq,
                    .n = in->n,
                    .tensors = calloc(n, sizeof(gt_id)),
                    .versions = calloc(n, sizeof(int64_t)),
                    .nbytes = calloc(n, sizeof(int64_t))};
    if (!rg.tensors || !rg.versions || !rg.nbytes) {
        free(rg.tensors);
        free(rg.versions);
        free(rg.nbytes);
        return;
    }
    for (size_t i = 0; i < in->n; i++) {
        argref *a = &in->v[i];
        rg.tensors[i] = a->e ? a->e->id : 0;
        rg.versions[i] = a->ver;
        rg.nbytes[i] = -1;
        if (a->e && a->e->geom) {
            int64_t numel = 1;
            for (int d = 0; d < a->e->ndim; d++)
                numel *= a->e->geom[d];
            int isz = 1;
            PyObject *dt = PyObject_GetAttr(a->t, STATE(self)->s_dtype);
            if (dt)
                gt__dtype_of(self, a->t, dt, &isz);
            Py_XDECREF(dt);
            swallow(self);
            rg.nbytes[i] = numel * isz;
        }
    }
    self->regions[self->nregions++] = rg;
}

/* At the start of backward call bid: check the storage of every live tensor
 * a node saved (see gt__check_storage). */
void gt__watch_all(gt_pyrec *self, gt_id bid, gt_id stack)
{
    size_t n = 0;
    for (size_t i = 0; i < self->tensors.cap; i++)
        if (self->tensors.slots[i].used &&
            ((gt_tensor_ent *)(uintptr_t)self->tensors.slots[i].value)->saved)
            n++;
    if (!n)
        return;
    gt_tensor_ent **all = malloc(sizeof *all * n);
    size_t k = 0;
    for (size_t i = 0; all && i < self->tensors.cap && k < n; i++) {
        gt_tensor_ent *e = (gt_tensor_ent *)(uintptr_t)self->tensors.slots[i].value;
        if (self->tensors.slots[i].used && e->saved) {
            Py_INCREF(e);
            all[k++] = e;
        }
    }
    for (size_t i = 0; i < k; i++) {
        gt_tensor_ent *e = all[i];
        PyObject *t = e->rec && e->wr ? gt_py_weak_get(e->wr) : NULL;
        if (t) {
            gt__check_storage(self, e, t, 0, bid, stack, 1);
            Py_DECREF(t);
        }
        Py_DECREF(e);
    }
    free(all);
    swallow(self);
}
