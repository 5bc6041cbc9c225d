/* recorder.c: the Recorder type: open, close and the Python methods the package calls. */
#include "state.h"

#include "fingerprint.h"

static const gt_proto_ops rec_ops; /* below: the methods this adapter implements */

static int rec_init(PyObject *op, PyObject *args, PyObject *kw)
{
    gt_pyrec *self = (gt_pyrec *)op;
    static char *kwlist[] = {"path",
                             "tensor_type",
                             "op_meta",
                             "saved_names",
                             "grad_enabled",
                             "getline",
                             "hidden",
                             "engine",
                             "key",
                             "via_autograd",
                             "overwrite",
                             "max_bytes",
                             "batch_events",
                             "has_sequence_nr",
                             "has_untyped_storage",
                             "increment_version",
                             "check_saved",
                             "keep_last",
                             NULL};
    const char *path;
    PyObject *tt, *om, *sn, *ge, *gl, *hid, *eng, *key, *via, *inc = Py_None;
    int overwrite = 0, seqnr = 0, untyped = 1, check_saved = 0;
    long long max_bytes = 0;
    unsigned int batch = 0, keep_last = 0;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "sOOOOOO!O!UO|pLIppOiI", kwlist, &path, &tt, &om, &sn, &ge, &gl,
            &PyTuple_Type, &hid, &PyTuple_Type, &eng, &key, &via, &overwrite, &max_bytes,
            &batch, &seqnr, &untyped, &inc, &check_saved, &keep_last))
        return -1;
    if (check_saved < GT_FP_OFF || check_saved > GT_FP_FULL) {
        PyErr_SetString(PyExc_ValueError,
                        "check_saved: 0 (off), 1 (sampled) or 2 (full)");
        return -1;
    }
    gt_recorder_options opts = {.max_bytes = max_bytes,
                                .overwrite = overwrite,
                                .batch_events = batch,
                                .keep_last = keep_last,
                                .row_log = 1};
    self->hooks = &rec_ops;
    if (gt_proto_open((gt_proto *)self, path, &opts) < 0)
        return -1;
    Py_XSETREF(self->tensor_type, Py_NewRef(tt));
    Py_XSETREF(self->op_meta_fn, Py_NewRef(om));
    Py_XSETREF(self->saved_fn, Py_NewRef(sn));
    Py_XSETREF(self->grad_enabled, Py_NewRef(ge));
    Py_XSETREF(self->getline, Py_NewRef(gl));
    Py_XSETREF(self->hidden, Py_NewRef(hid));
    Py_XSETREF(self->engine, Py_NewRef(eng));
    Py_XSETREF(self->key, Py_NewRef(key));
    Py_XSETREF(self->via_autograd, Py_NewRef(via));
    Py_XSETREF(self->increment, Py_NewRef(inc));
    self->check_saved = check_saved;
    if (check_saved && !self->fp && !(self->fp = PyDict_New()))
        return -1;
    if (!self->unbumped && !(self->unbumped = PyList_New(0)))
        return -1;
    if (!self->keep && !(self->keep = PyList_New(0)))
        return -1;
    if (!self->retry && !(self->retry = PyList_New(0)))
        return -1;
    self->has_seqnr = seqnr;
    self->has_untyped = untyped;
    self->on = 1;
    self->active = 1;
    return 0;
}

static void free_caches(gt_pyrec *self)
{
    /* forget every tensor (collect first: forgetting edits the map) */
    size_t n = self->tensors.len, k = 0;
    gt_tensor_ent **all = n ? malloc(sizeof *all * n) : NULL;
    for (size_t i = 0; all && i < self->tensors.cap; i++)
        if (self->tensors.slots[i].used)
            all[k++] = (gt_tensor_ent *)(uintptr_t)self->tensors.slots[i].value;
    for (size_t i = 0; i < k; i++)
        gt__ent_forget(self, all[i]);
    free(all);
    gt_map_clear(&self->tensors);
    gt_map_clear(&self->byid);
    for (size_t i = 0; i < self->storages.cap; i++)
        if (self->storages.slots[i].used)
            free((void *)(uintptr_t)self->storages.slots[i].value);
    gt_map_clear(&self->storages);
    for (size_t i = 0; i < self->ops.cap; i++)
        if (self->ops.slots[i].used) {
            gt_opmeta *m = (gt_opmeta *)(uintptr_t)self->ops.slots[i].value;
            Py_XDECREF(m->wnames);
            Py_XDECREF(m->call);
            Py_XDECREF(m->when_name);
            free(m->wpos);
            free(m);
        }
    gt_map_clear(&self->ops);
    for (size_t i = 0; i < self->types.cap; i++)
        if (self->types.slots[i].used) {
            gt_nodetype *nt = (gt_nodetype *)(uintptr_t)self->types.slots[i].value;
            Py_XDECREF(nt->saved);
            free(nt);
        }
    gt_map_clear(&self->types);
    for (size_t i = 0; i < self->modpaths.cap; i++)
        if (self->modpaths.slots[i].used)
            free((void *)(uintptr_t)self->modpaths.slots[i].value);
    gt_map_clear(&self->modpaths);
    free(self->modroot);
    self->modroot = NULL;
    gt_map_clear(&self->stacks);
    gt_map_clear(&self->frames);
    gt_map_clear(&self->codes);
    gt_map_clear(&self->dtypes);
    gt_map_clear(&self->threads);
    Py_CLEAR(self->last_site);
    Py_CLEAR(self->last_user);
    Py_CLEAR(self->last_exec);
    gt__clear_pending(self);
    if (self->retry)
        PyList_SetSlice(self->retry, 0, PY_SSIZE_T_MAX, NULL);
    free(self->pending);
    self->pending = NULL;
    self->cappending = 0;
    if (self->unbumped)
        PyList_SetSlice(self->unbumped, 0, PY_SSIZE_T_MAX, NULL);
    while (self->nregions)
        gt__region_pop(self, self->regions[self->nregions - 1].seq);
    free(self->regions);
    self->regions = NULL;
    self->capregions = 0;
    if (self->fp)
        PyDict_Clear(self->fp);
    gt_map_clear(&self->done);
    free(self->done_keys);
    self->done_keys = NULL;
    self->ndone_keys = self->capdone_keys = 0;
    gt__scratch_free_all(self);
}

/* close, first part (gt_proto_close): the last op's nodes, the run's end.
 * Returns 1 (leave the handle be) when called from a signal handler in the
 * middle of an op, else 0. */
static int rec_close_begin(gt_proto *p, int status, int exit_code, int sig)
{
    gt_pyrec *self = (gt_pyrec *)p;
    excsave saved_exc = exc_save();
    if (!self->failed)
        gt__flush_pending(self);
    gt__bump_foreach(self);
    self->active = 0;
    /* even after a stop: at the size cap the recorder still writes the end */
    ck(self, gt_run_end(self->r, status, exit_code, sig));
    if (self->busy) {
        /* called from a signal handler in the middle of an op: commit and
         * leave the handle be (the process is about to die) */
        gt_recorder_flush(self->r);
        swallow(self);
        exc_restore(saved_exc);
        return 1;
    }
    gt__clear_pending(self);
    swallow(self);
    exc_restore(saved_exc);
    return 0;
}

/* close, last part: the handle is closed; forget every entry. */
static void rec_close_end(gt_proto *p)
{
    gt_pyrec *self = (gt_pyrec *)p;
    excsave saved_exc = exc_save();
    free_caches(self);
    swallow(self);
    exc_restore(saved_exc);
}

/* The protocol's check hook: ck. */
static int rec_check(gt_proto *p, int rc)
{
    return ck((gt_pyrec *)p, rc);
}

/* flush(): discover pending nodes and commit what was recorded. */
static void rec_flush(gt_proto *p)
{
    gt_pyrec *self = (gt_pyrec *)p;
    excsave saved_exc = exc_save();
    if (recording(self) && !self->busy) {
        gt__flush_pending(self);
        ck(self, gt_recorder_flush(self->r));
    }
    swallow(self);
    exc_restore(saved_exc);
}

/* call_begin(name, args, region) -> seq (0: not recorded), while recording
 * (gt_proto_call_begin): the call as an ops row named `name` with the
 * caller's stack and the tensors of `args` as inputs. region: a
 * non-reentrant checkpoint (see gt_region) until call_end(seq). */
static PyObject *rec_call_begin(gt_proto *p, PyObject *pyname, PyObject *inputs,
                                int region)
{
    gt_pyrec *self = (gt_pyrec *)p;
    const char *name = PyUnicode_AsUTF8(pyname);
    if (!name)
        return NULL;
    excsave saved_exc = exc_save();
    gt__flush_pending(self);
    gt_scratch *sc = gt__scratch_take(self);
    PyObject *ge = PyObject_CallNoArgs(self->grad_enabled);
    int grad = ge == Py_True;
    Py_XDECREF(ge);
    swallow(self);
    gt_op_info oi = {.name = gt__intern_str(self, name),
                     .phase = self->in_backward ? GT_PHASE_BACKWARD
                              : grad            ? GT_PHASE_FORWARD
                                                : GT_PHASE_OTHER,
                     .grad_mode = grad,
                     .thread = gt__current_thread(self),
                     .stack = gt__capture_stack_here(self, NULL)};
    int64_t seq = 0;
    if (!sc || !oi.name || ck(self, gt_op(self->r, &oi, &seq)) < 0)
        seq = 0;
    if (seq) {
        if (gt__collect(self, inputs, 0, 0, &sc->in, 0) < 0)
            PyErr_NoMemory(), swallow(self);
        for (size_t i = 0; i < sc->in.n; i++) {
            argref *a = &sc->in.v[i];
            a->e = gt__see_tensor(self, a->t, 0, NULL, &a->ver);
            if (a->e)
                ck(self,
                   gt_op_arg(self->r, seq, GT_ROLE_INPUT, (int)i, a->e->id, a->ver));
        }
        if (region)
            gt__region_push(self, seq, &sc->in);
        self->calls++;
    }
    gt__scratch_give(self, sc);
    swallow(self);
    exc_restore(saved_exc);
    return PyLong_FromLongLong(seq);
}

/* call_end(seq, result_or_None): the call `seq` returned `result`: its
 * tensors are the call's outputs, and the nodes they got (a custom
 * Function's node) are recorded now, attributed to the call, while what
 * they saved is still unmodified. Closes the call's checkpoint region. */
static void rec_call_end(gt_proto *p, unsigned long long useq, PyObject *result)
{
    gt_pyrec *self = (gt_pyrec *)p;
    int64_t seq = (int64_t)useq;
    if (self->calls > 0)
        self->calls--;
    excsave saved_exc = exc_save();
    self->quiet++;
    gt_scratch *sc = recording(self) && result != Py_None ? gt__scratch_take(self) : NULL;
    if (sc) {
        modstate *ms = STATE(self);
        gt_id thread = gt__current_thread(self);
        if (gt__collect(self, result, 0, 0, &sc->out, 0) < 0)
            PyErr_NoMemory(), swallow(self);
        for (size_t j = 0; j < sc->out.n && recording(self); j++) {
            PyObject *t = sc->out.v[j].t;
            int64_t ver = 0;
            gt_tensor_ent *e = gt__see_tensor(self, t, 0, NULL, &ver);
            if (!e)
                continue;
            ck(self, gt_op_arg(self->r, seq, GT_ROLE_OUTPUT, (int)j, e->id, ver));
            e->last_out = seq;
            PyObject *g = PyObject_GetAttr(t, ms->s_grad_fn);
            if (g && g != Py_None) {
                int is_new = 0;
                gt_id nid = gt__discover(self, g, seq, thread, &is_new);
                if (nid && is_new)
                    ck(self, gt_node_output(
                                 self->r, nid,
                                 (int)gt__long_attr(t, ms->s_output_nr, 0, self), e->id));
            }
            Py_XDECREF(g);
            swallow(self);
        }
    }
    gt__scratch_give(self, sc);
    if (recording(self))
        gt__flush_pending(self); /* the last inner op's nodes, still in the region */
    gt__region_pop(self, seq);
    self->quiet--;
    swallow(self);
    exc_restore(saved_exc);
}

/* backward_begin(api, roots, retain_graph, create_graph, inputs) -> id (0:
 * not recorded), while recording (gt_proto_backward_begin) */
static PyObject *rec_backward_begin(gt_proto *p, const char *api, PyObject *roots,
                                    int retain, int create, PyObject *inputs)
{
    gt_pyrec *self = (gt_pyrec *)p;
    gt__flush_pending(self);
    PyFrameObject *uf = NULL;
    gt_backward_info bi = {.api = gt__intern_str(self, api),
                           .retain_graph = retain,
                           .create_graph = create,
                           .thread = gt__current_thread(self),
                           .stack = gt__capture_stack_here(self, &uf)};
    gt_id id = 0;
    if (ck(self, gt_backward_begin(self->r, &bi, &id)) < 0) {
        Py_XDECREF(uf);
        return PyLong_FromLong(0);
    }
    PyObject *seq = PySequence_Fast(roots, "roots");
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(t, (PyTypeObject *)self->tensor_type))
            continue;
        gt_tensor_ent *e = gt__see_inner(self, t, NULL);
        ck(self,
           gt_backward_root(self->r, id, (int)i, e ? e->id : 0, gt__node_of(self, t)));
    }
    Py_XDECREF(seq);
    gt__watch_all(self, id, bi.stack);
    if (inputs != Py_None) {
        seq = PySequence_Fast(inputs, "inputs");
        for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyObject_TypeCheck(t, (PyTypeObject *)self->tensor_type))
                continue;
            gt_tensor_ent *e = gt__see_inner(self, t, NULL);
            if (e)
                ck(self, gt_backward_input(self->r, id, (int)i, e->id));
        }
        Py_XDECREF(seq);
    }
    swallow(self);
    /* every recorded tensor and module parameter the user's frame names */
    gt__bind_names(self, uf, gt_recorder_seq(self->r));
    Py_XDECREF(uf);
    self->in_backward++;
    self->cur_backward = id;
    self->last_exec_id = 0;
    Py_CLEAR(self->last_exec);
    return PyLong_FromLongLong(id);
}

static void record_error(gt_pyrec *self, PyObject *exc, gt_id stack, gt_id bid)
{
    PyObject *msg = PyObject_Str(exc);
    gt_strbuf mb = {0};
    const char *m = gt_py_text(msg, &mb);
    const char *tname = _PyType_Name(Py_TYPE(exc));
    ck(self, gt_error(self->r, tname, m ? m : "", stack, bid, NULL));
    gt_strbuf_release(&mb);
    Py_XDECREF(msg);
    swallow(self);
}

/* backward_end(id, exc_or_None): record how backward `id` ended; an
 * exception is written (and committed) before the caller re-raises it. */
static void rec_backward_end(gt_proto *p, unsigned long long uid, PyObject *exc)
{
    gt_pyrec *self = (gt_pyrec *)p;
    gt_id id = (gt_id)uid;
    if (self->in_backward > 0 && id)
        self->in_backward--;
    if (!self->in_backward && !self->busy)
        gt__release_frames(self);
    if (id && id == self->cur_backward) {
        self->cur_backward = 0;
        Py_CLEAR(self->last_exec);
    }
    if (!id || !self->r || self->forked || self->failed)
        return;
    excsave saved_exc = exc_save();
    if (exc != Py_None) {
        PyFrameObject *uf = NULL;
        record_error(self, exc, gt__capture_stack_here(self, &uf), id);
        gt__bind_names(self, uf, gt_recorder_seq(self->r));
        Py_XDECREF(uf);
    }
    ck(self, gt_backward_end(self->r, id, exc == Py_None));
    if (exc != Py_None)
        ck(self, gt_recorder_flush(self->r));
    swallow(self);
    exc_restore(saved_exc);
}

/* error(exc): record an exception that ends the run, at the innermost
 * frame of its traceback. */
static void rec_error(gt_proto *p, PyObject *exc)
{
    gt_pyrec *self = (gt_pyrec *)p;
    if (self->failed)
        return;
    excsave saved_exc = exc_save();
    gt__flush_pending(self);
    PyObject *tb = PyException_GetTraceback(exc);
    PyFrameObject *f = NULL;
    while (tb && tb != Py_None) {
        PyObject *next = PyObject_GetAttrString(tb, "tb_next");
        if (!next || next == Py_None) {
            Py_XDECREF(next);
            f = (PyFrameObject *)PyObject_GetAttrString(tb, "tb_frame");
            break;
        }
        Py_SETREF(tb, next);
    }
    Py_XDECREF(tb);
    swallow(self);
    gt_id stack = 0;
    PyFrameObject *uf = NULL;
    if (f && PyFrame_Check(f)) {
        /* the traceback's line, not the frame's current one, is what we want;
         * for an uncaught exception they agree */
        stack = gt__capture_stack_from(self, f, &uf);
    }
    Py_XDECREF(f);
    record_error(self, exc, stack, 0);
    gt__bind_names(self, uf, gt_recorder_seq(self->r));
    Py_XDECREF(uf);
    ck(self, gt_recorder_flush(self->r));
    swallow(self);
    exc_restore(saved_exc);
}

/* set_active(on): opening the window, or closing it (the last op's nodes
 * first). */
static void rec_set_active(gt_proto *p, int on)
{
    gt_pyrec *self = (gt_pyrec *)p;
    if (!on && self->active && recording(self) && !self->busy)
        gt__flush_pending(self);
    if (!on && !self->busy)
        gt__bump_foreach(self);
    if (!on) {
        gt__clear_pending(self);
        Py_CLEAR(self->last_site);
        Py_CLEAR(self->last_user);
    }
    self->active = on && !self->failed;
}

/* forget(tensor): let go of t's entry and its weak reference
 * (torch.utils.swap_tensors refuses a tensor with one); t is recorded anew
 * when next seen. */
static void rec_forget(gt_proto *p, PyObject *t)
{
    gt_pyrec *self = (gt_pyrec *)p;
    uint64_t *v = gt_map_get(&self->tensors, (uintptr_t)t, 0, 0);
    if (v)
        gt__ent_forget(self, (gt_tensor_ent *)(uintptr_t)*v);
}

/* observe_version(tensor): its version counter was set (not bumped) by
 * torch._C._autograd._unsafe_set_version_counter; record the value it has
 * now, before any node runs that checks it. */
static void rec_observe_version(gt_proto *p, PyObject *t)
{
    gt_pyrec *self = (gt_pyrec *)p;
    if (!recording(self))
        return;
    excsave saved_exc = exc_save();
    gt__flush_pending(self);
    gt_tensor_ent *e = gt__lookup(self, t);
    if (e)
        gt__observe(self, e, gt__read_version(self, t));
    exc_restore(saved_exc);
}

/* data_set(tensor, value) (gt_proto_data_set): the assignment, and a
 * storage_swaps row with op and backward NULL and the assigning line's
 * stack. Any tensor counts, saved yet or not: a node that saved it before
 * recording started is found at backward. Returns the assignment's 0 or -1
 * (its Python error). */
static int rec_data_set(gt_proto *p, PyObject *t, PyObject *value)
{
    gt_pyrec *self = (gt_pyrec *)p;
    gt_tensor_ent *e = NULL;
    if (recording(self) && !self->busy &&
        PyObject_TypeCheck(t, (PyTypeObject *)self->tensor_type)) {
        excsave saved_exc = exc_save();
        self->busy++;
        gt__flush_pending(self);
        e = gt__see_tensor(self, t, 0, NULL, NULL); /* on its old storage */
        if (e)
            Py_INCREF(e);
        self->busy--;
        swallow(self);
        exc_restore(saved_exc);
    }
    int rc = gt_proto_data_assign(p, t, value);
    if (rc == 0 && e && e->rec && recording(self)) {
        excsave saved_exc = exc_save();
        gt_id stack = gt__capture_stack_here(self, NULL);
        gt__check_storage(self, e, t, 0, 0, stack, 1);
        swallow(self);
        exc_restore(saved_exc);
    }
    Py_XDECREF(e);
    return rc;
}

/* What the protocol (gt_proto_*) leaves to this adapter. */
static const gt_proto_ops rec_ops = {
    .check = rec_check,
    .backward_begin = rec_backward_begin,
    .backward_end = rec_backward_end,
    .call_begin = rec_call_begin,
    .call_end = rec_call_end,
    .error = rec_error,
    .flush = rec_flush,
    .forget = rec_forget,
    .observe_version = rec_observe_version,
    .set_active = rec_set_active,
    .data_set = rec_data_set,
    .close_begin = rec_close_begin,
    .close_end = rec_close_end,
};

static PyObject *rec_get_internal_errors(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLongLong(((gt_pyrec *)op)->errors);
}

static int rec_traverse(PyObject *op, visitproc visit, void *arg)
{
    gt_pyrec *self = (gt_pyrec *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->op_meta_fn);
    Py_VISIT(self->saved_fn);
    Py_VISIT(self->grad_enabled);
    Py_VISIT(self->getline);
    Py_VISIT(self->hidden);
    Py_VISIT(self->engine);
    Py_VISIT(self->key);
    Py_VISIT(self->via_autograd);
    Py_VISIT(self->increment);
    Py_VISIT(self->fp);
    Py_VISIT(self->unbumped);
    Py_VISIT(self->keep);
    Py_VISIT(self->retry);
    Py_VISIT(self->last_site);
    Py_VISIT(self->last_user);
    Py_VISIT(self->module_type);
    Py_VISIT(self->current_node);
    Py_VISIT(self->ft_wrapped);
    Py_VISIT(self->ft_unwrap);
    Py_VISIT(self->last_exec);
    Py_VISIT(self->data_orig);
    return 0;
}

static int rec_clear(PyObject *op)
{
    gt_pyrec *self = (gt_pyrec *)op;
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->op_meta_fn);
    Py_CLEAR(self->saved_fn);
    Py_CLEAR(self->grad_enabled);
    Py_CLEAR(self->getline);
    Py_CLEAR(self->hidden);
    Py_CLEAR(self->engine);
    Py_CLEAR(self->key);
    Py_CLEAR(self->via_autograd);
    Py_CLEAR(self->increment);
    Py_CLEAR(self->fp);
    Py_CLEAR(self->unbumped);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->retry);
    Py_CLEAR(self->last_site);
    Py_CLEAR(self->last_user);
    Py_CLEAR(self->module_type);
    Py_CLEAR(self->current_node);
    Py_CLEAR(self->ft_wrapped);
    Py_CLEAR(self->ft_unwrap);
    Py_CLEAR(self->last_exec);
    Py_CLEAR(self->data_orig);
    return 0;
}

static void rec_dealloc(PyObject *op)
{
    gt_pyrec *self = (gt_pyrec *)op;
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (self->r && !self->forked)
        gt_recorder_close(self->r);
    self->r = NULL;
    free_caches(self);
    rec_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef rec_methods[] = {
    GT_PROTO_METHODS,
    {"dispatch", (PyCFunction)(void (*)(void))gt__rec_dispatch, METH_FASTCALL,
     "dispatch(func, [types,] args, kwargs): record the op and call func(*args, "
     "**kwargs)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rec_getset[] = {
    GT_PROTO_GETSET,
    {"internal_errors", rec_get_internal_errors, NULL,
     "bookkeeping errors cleared (for tests)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot rec_slots[] = {
    {Py_tp_init, rec_init},
    {Py_tp_dealloc, rec_dealloc},
    {Py_tp_traverse, rec_traverse},
    {Py_tp_clear, rec_clear},
    {Py_tp_methods, rec_methods},
    {Py_tp_getset, rec_getset},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_doc, "Recorder(path, ...): writes one gradtrace trace"},
    {0, NULL},
};

PyType_Spec gt__rec_spec = {
    .name = "_gradtrace.Recorder",
    .basicsize = sizeof(gt_pyrec),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = rec_slots,
};
