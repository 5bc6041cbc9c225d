/* node.c: autograd nodes: discovery, the last op's pending outputs, node_execs. */
#include "state.h"

gt_nodetype *gt__node_type(gt_pyrec *self, PyTypeObject *tp)
{
    uint64_t *v = gt_map_get(&self->types, (uintptr_t)tp, 0, 0);
    if (v)
        return (gt_nodetype *)(uintptr_t)*v;
    PyObject *saved = PyObject_CallOneArg(self->saved_fn, (PyObject *)tp);
    if (!saved || !PyTuple_Check(saved)) {
        Py_XDECREF(saved);
        swallow(self);
        return NULL;
    }
    gt_nodetype *nt = calloc(1, sizeof *nt);
    if (!nt) {
        Py_DECREF(saved);
        return NULL;
    }
    const char *name = strrchr(tp->tp_name, '.');
    name = name ? name + 1 : tp->tp_name;
    nt->name = gt__intern_str(self, name);
    nt->is_acc = !strcmp(name, "AccumulateGrad");
    nt->saved = saved;
    if (PyTuple_GET_SIZE(saved) == 1) {
        PyObject *attr = PyTuple_GET_ITEM(PyTuple_GET_ITEM(saved, 0), 0);
        nt->is_custom = PyUnicode_Check(attr) &&
                        PyUnicode_CompareWithASCIIString(attr, "saved_tensors") == 0;
    }
    if (gt__keep(self, (PyObject *)tp) < 0 ||
        gt_map_put(&self->types, (uintptr_t)tp, 0, 0, (uintptr_t)nt) < 0) {
        swallow(self);
        Py_DECREF(saved);
        free(nt);
        return NULL;
    }
    return nt;
}

/* The id stored in the node's metadata, 0 if it has none. *md gets a new
 * reference to the metadata dict (NULL if the node has none). */
static gt_id node_known(gt_pyrec *self, PyObject *node, PyObject **md)
{
    *md = PyObject_GetAttr(node, STATE(self)->s_metadata);
    if (!*md || !PyDict_Check(*md)) {
        Py_CLEAR(*md);
        swallow(self);
        return 0;
    }
    PyObject *v = PyDict_GetItemWithError(*md, self->key);
    if (!v) {
        swallow(self);
        return 0;
    }
    return (gt_id)PyLong_AsLongLong(v);
}

/* A node found but not yet recorded: discover's worklist entry (owned). */
typedef struct {
    PyObject *node;
    gt_id id;
    int64_t op;
} gt_work;

/* Give node a fresh id in its metadata dict md and push it on the worklist.
 * Returns the id, 0 on failure. */
static gt_id push_new_node(gt_pyrec *self, PyObject *node, PyObject *md, int64_t op,
                           gt_work **work, size_t *n, size_t *cap)
{
    if (GT_ALLOC_GROW(*work, *n + 1, *cap, 16) != 0)
        return 0;
    gt_id id = self->next_node + 1;
    PyObject *idobj = PyLong_FromLongLong(id);
    if (!idobj || PyDict_SetItem(md, self->key, idobj) < 0) {
        Py_XDECREF(idobj);
        return 0;
    }
    Py_DECREF(idobj);
    self->next_node = id;
    (*work)[(*n)++] = (gt_work){Py_NewRef(node), id, op};
    return id;
}

/* Record node `root` (attributed to op seq `op`) and every node reachable
 * from it that is not yet known. Returns root's id (0 on failure). */
gt_id gt__discover(gt_pyrec *self, PyObject *root, int64_t op, gt_id thread, int *is_new)
{
    modstate *ms = STATE(self);
    PyObject *md = NULL;
    gt_id rid = node_known(self, root, &md);
    if (is_new)
        *is_new = 0;
    if (rid || !md) {
        Py_XDECREF(md);
        return rid;
    }
    if (is_new)
        *is_new = 1;
    gt_work *work = NULL;
    size_t nwork = 0, capwork = 0;
    rid = push_new_node(self, root, md, op, &work, &nwork, &capwork);
    Py_DECREF(md);
    if (!rid) {
        free(work);
        swallow(self);
        return 0;
    }
    while (nwork > 0) {
        gt_work it = work[--nwork];
        PyObject *node = it.node;
        gt_id nid = it.id;
        int64_t nop = it.op;
        gt_nodetype *nt = gt__node_type(self, Py_TYPE(node));
        gt_node_info ni = {.id = nid,
                           .name = nt ? nt->name : gt__intern_str(self, "?"),
                           .op = nop,
                           .sequence_nr = -1,
                           .thread = thread};
        if (self->has_seqnr && !(nt && nt->is_acc))
            ni.sequence_nr = gt__long_call(node, ms->s_sequence_nr, -1, self);
        if (nt && nt->is_acc) {
            PyObject *var = PyObject_GetAttr(node, ms->s_variable);
            if (var && PyObject_TypeCheck(var, (PyTypeObject *)self->tensor_type)) {
                gt_tensor_ent *ve = gt__see_inner(self, var, NULL);
                if (ve)
                    ni.variable = ve->id;
            }
            Py_XDECREF(var);
            swallow(self);
        }
        gt_region *rg = self->nregions ? &self->regions[self->nregions - 1] : NULL;
        if (rg && nop && !(nt && nt->is_acc))
            ni.op = rg->seq; /* made by the checkpointed call */
        ck(self, gt_node(self->r, &ni));
        PyObject *missing = NULL;
        if (rg && !(nt && nt->is_acc)) {
            /* never read a hooked saved tensor: that would recompute */
            if (nt && PyTuple_GET_SIZE(nt->saved) > 0)
                gt__region_saved(self, rg, nid);
        } else if (nt) {
            missing = gt__record_saved_all(self, nid, nop, node, nt->saved, nt);
        }
        if (missing) {
            PyObject *retry =
                Py_BuildValue("(OLLO)", node, (long long)nid, (long long)nop, missing);
            if (!retry || PyList_Append(self->retry, retry) < 0)
                swallow(self);
            Py_XDECREF(retry);
            Py_DECREF(missing);
        }
        PyObject *nf = PyObject_GetAttr(node, ms->s_next_functions);
        if (nf && PyTuple_Check(nf)) {
            for (Py_ssize_t pos = 0; pos < PyTuple_GET_SIZE(nf); pos++) {
                PyObject *pair = PyTuple_GET_ITEM(nf, pos);
                if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
                    continue;
                PyObject *nx = PyTuple_GET_ITEM(pair, 0);
                int input_nr = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
                gt_id xid = 0;
                if (nx != Py_None) {
                    PyObject *xmd = NULL;
                    xid = node_known(self, nx, &xmd);
                    if (!xid && xmd) {
                        /* a CopySlices reached from a fresh node was made by
                         * the same in-place-through-a-view op */
                        const char *tn = Py_TYPE(nx)->tp_name;
                        int64_t xop = strstr(tn, "CopySlices") ? op : 0;
                        xid = push_new_node(self, nx, xmd, xop, &work, &nwork, &capwork);
                    }
                    Py_XDECREF(xmd);
                    swallow(self);
                }
                ck(self, gt_edge(self->r, nid, (int)pos, xid, input_nr));
            }
        }
        Py_XDECREF(nf);
        swallow(self);
        Py_DECREF(node);
    }
    free(work);
    return rid;
}

void gt__clear_pending(gt_pyrec *self)
{
    for (Py_ssize_t i = 0; i < self->npending; i++)
        Py_DECREF(self->pending[i]);
    self->npending = 0;
}

/* Discover the nodes the last op's outputs got, then forget them. */
void gt__flush_pending(gt_pyrec *self)
{
    if (self->flushing)
        return; /* an op run by our own bookkeeping */
    gt__bump_foreach(self);
    if (!self->npending && !(self->retry && PyList_GET_SIZE(self->retry)))
        return;
    self->flushing = 1;
    modstate *ms = STATE(self);
    if (self->retry && PyList_GET_SIZE(self->retry)) {
        PyObject *retry = self->retry;
        self->retry = PyList_New(0);
        for (Py_ssize_t i = 0; self->retry && i < PyList_GET_SIZE(retry); i++) {
            PyObject *it = PyList_GET_ITEM(retry, i);
            PyObject *still = gt__record_saved_all(
                self, (gt_id)PyLong_AsLongLong(PyTuple_GET_ITEM(it, 1)),
                PyLong_AsLongLong(PyTuple_GET_ITEM(it, 2)), PyTuple_GET_ITEM(it, 0),
                PyTuple_GET_ITEM(it, 3), NULL);
            Py_XDECREF(still); /* one retry only: a slot may really be empty */
        }
        Py_DECREF(retry);
        swallow(self);
    }
    /* node ids only grow: the nodes first recorded in this flush are those
     * above `known` */
    gt_id known = self->next_node;
    int64_t op = self->pending_seq;
    self->ndone_keys = 0;
    for (Py_ssize_t i = 0; i < self->npending && recording(self); i++) {
        PyObject *t = self->pending[i];
        PyObject *g = PyObject_GetAttr(t, ms->s_grad_fn);
        gt_tensor_ent *te = gt__lookup(self, t);
        if (te && !te->written) /* a leaf is a tensor without grad_fn */
            gt__write_tensor(self, te, t, g ? g == Py_None : -1);
        if (!g || g == Py_None) {
            Py_XDECREF(g);
            swallow(self);
            continue;
        }
        if (self->calls) {
            /* inside apply: a custom Function's node is recorded when apply
             * returns (call_end), once its saved tensors are in place */
            gt_nodetype *nt = gt__node_type(self, Py_TYPE(g));
            if (nt && nt->is_custom) {
                Py_DECREF(g);
                continue;
            }
        }
        gt_id nid = gt__discover(self, g, op, self->pending_thread, NULL);
        Py_DECREF(g);
        if (!nid || nid <= known)
            continue; /* an older node: its outputs were recorded with it */
        int64_t nr = gt__long_attr(t, ms->s_output_nr, 0, self);
        gt_tensor_ent *e = gt__lookup(self, t);
        if (!e || gt_map_get(&self->done, (uint64_t)nid, (uint64_t)nr, 0))
            continue;
        /* pairs of keys: an item is two of them */
        if (gt_alloc_grow(&self->done_keys, self->ndone_keys + 1, &self->capdone_keys,
                          2 * sizeof *self->done_keys, 16) != 0 ||
            gt_map_put(&self->done, (uint64_t)nid, (uint64_t)nr, 0, 1) < 0)
            continue;
        self->done_keys[2 * self->ndone_keys] = (uint64_t)nid;
        self->done_keys[2 * self->ndone_keys + 1] = (uint64_t)nr;
        self->ndone_keys++;
        ck(self, gt_node_output(self->r, nid, (int)nr, e->id));
    }
    /* emptied, not freed: the next flush reuses its slots */
    for (size_t k = 0; k < self->ndone_keys; k++)
        gt_map_del(&self->done, self->done_keys[2 * k], self->done_keys[2 * k + 1], 0);
    self->ndone_keys = 0;
    gt__clear_pending(self);
    self->flushing = 0;
}

/* During a recorded backward call: the node whose apply() is running this
 * op (torch._C._current_autograd_node), written to node_execs once per run
 * of consecutive ops. Only nodes already recorded are written (never a new
 * node here). A node that runs no aten op (an AccumulateGrad that just moves
 * the incoming gradient into .grad, a node whose gradient is undefined)
 * never shows here; nor does any node on PyTorch without
 * _current_autograd_node (1.13). */
void gt__note_exec(gt_pyrec *self)
{
    if (!self->cur_backward)
        return;
    gt__lookup_torch(self);
    if (!self->current_node)
        return;
    PyObject *node = PyObject_CallNoArgs(self->current_node);
    if (!node || node == Py_None || node == self->last_exec) {
        Py_XDECREF(node);
        swallow(self);
        return;
    }
    Py_XSETREF(self->last_exec, node);
    PyObject *md = NULL;
    gt_id nid = node_known(self, node, &md);
    Py_XDECREF(md);
    if (nid && nid != self->last_exec_id) {
        self->last_exec_id = nid;
        ck(self, gt_node_exec(self->r, self->cur_backward, nid));
        if (self->check_saved)
            gt__fingerprint_use(self, node, nid);
    }
    swallow(self);
}

gt_id gt__node_of(gt_pyrec *self, PyObject *t)
{
    PyObject *g = PyObject_GetAttr(t, STATE(self)->s_grad_fn);
    gt_id nid = 0;
    if (g && g != Py_None)
        nid = gt__discover(self, g, 0, gt__current_thread(self), NULL);
    Py_XDECREF(g);
    swallow(self);
    return nid;
}
