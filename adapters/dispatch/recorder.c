/* recorder.c: the Recorder type: open, close and the Python methods the package calls. */
#include "state.h"

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
            args, kw, "sOOOOOO!O!UO|pLIppOpI", kwlist, &path, &tt, &om, &sn, &ge, &gl,
            &PyTuple_Type, &hid, &PyTuple_Type, &eng, &key, &via, &overwrite, &max_bytes,
            &batch, &seqnr, &untyped, &inc, &check_saved, &keep_last))
        return -1;
    if (self->r) {
        PyErr_SetString(PyExc_RuntimeError, "recorder already open");
        return -1;
    }
    gt_recorder_options opts = {.max_bytes = max_bytes,
                                .overwrite = overwrite,
                                .batch_events = batch,
                                .keep_last = keep_last,
                                .row_log = 1};
    char err[512] = "";
    gt_recorder *r = NULL;
    int rc = gt_recorder_open(path, &opts, err, sizeof err, &r);
    if (rc < 0) {
        if (err[0])
            PyErr_Format(rc == GT_EEXIST ? PyExc_FileExistsError : PyExc_OSError,
                         "gradtrace: %s", err);
        else
            PyErr_Format(rc == GT_EEXIST ? PyExc_FileExistsError : PyExc_OSError,
                         "gradtrace: cannot create trace %s: %s", path, gt_strerror(rc));
        return -1;
    }
    self->r = r;
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

/* close(status, exit_code, signal) -> None or the recorder's error message */
static PyObject *rec_close(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    int status = GT_RUN_OK, exit_code = 0, sig = 0;
    if (!PyArg_ParseTuple(args, "|iii", &status, &exit_code, &sig))
        return NULL;
    if (!self->r || self->forked)
        Py_RETURN_NONE;
    excsave saved_exc = exc_save();
    if (!self->failed)
        gt__flush_pending(self);
    gt__bump_foreach(self);
    self->active = 0;
    int rc = 0;
    /* even after a stop: at the size cap the recorder still writes the end */
    ck(self, gt_run_end(self->r, status, exit_code, sig));
    if (self->busy) {
        /* called from a signal handler in the middle of an op: commit and
         * leave the handle be (the process is about to die) */
        gt_recorder_flush(self->r);
        swallow(self);
        exc_restore(saved_exc);
        Py_RETURN_NONE;
    }
    gt__clear_pending(self);
    gt_recorder *r = self->r;
    self->r = NULL;
    char msg[512] = "";
    if (self->failed)
        snprintf(msg, sizeof msg, "%s", gt_recorder_errmsg(r));
    char close_msg[512] = "";
    /* writing the last rows and the indexes can take seconds: other
     * threads (gradtrace's "closing the trace" note) run meanwhile; self->r
     * is NULL, so an op they run passes through */
    Py_BEGIN_ALLOW_THREADS rc = gt_recorder_close_msg(r, close_msg, sizeof close_msg);
    Py_END_ALLOW_THREADS free_caches(self);
    swallow(self);
    exc_restore(saved_exc);
    if (rc == GT_EFULL && !self->failed) {
        /* the size cap (or a full disk) stopped the last batch: said as any
         * stop is; the trace is complete up to there */
        PySys_WriteStderr("gradtrace: %s\n", close_msg);
        return PyUnicode_FromString(close_msg);
    }
    if (rc < 0 && !self->failed) {
        /* closing itself failed (the trace is not one finished file):
         * OSError, which Recording.stop reports without raising */
        PyErr_Format(PyExc_OSError, "gradtrace: %s",
                     close_msg[0] ? close_msg : gt_strerror(rc));
        return NULL;
    }
    if (rc < 0 || msg[0])
        return PyUnicode_FromString(msg[0] ? msg : gt_strerror(rc));
    Py_RETURN_NONE;
}

static PyObject *rec_set_run(PyObject *op, PyObject *args, PyObject *kw)
{
    gt_pyrec *self = (gt_pyrec *)op;
    gt_run_info ri;
    if (gt_py_run_info(args, kw, &ri) < 0)
        return NULL;
    if (self->r && !self->forked && !self->failed)
        ck(self, gt_run_set(self->r, &ri));
    Py_RETURN_NONE;
}

/* flush(): discover pending nodes and commit what was recorded. */
static PyObject *rec_flush(PyObject *op, PyObject *Py_UNUSED(a))
{
    gt_pyrec *self = (gt_pyrec *)op;
    excsave saved_exc = exc_save();
    if (recording(self) && !self->busy) {
        gt__flush_pending(self);
        ck(self, gt_recorder_flush(self->r));
    }
    swallow(self);
    exc_restore(saved_exc);
    Py_RETURN_NONE;
}

/* call_begin(name, args, region) -> seq (0: not recorded): a Python-level
 * call the engine makes into user code (a custom autograd.Function's
 * apply, a checkpointed function) as an ops row named `name`, with the
 * caller's stack and the tensors of `args` as inputs. region: a
 * non-reentrant checkpoint (see gt_region) until call_end(seq). */
static PyObject *rec_call_begin(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    const char *name;
    PyObject *inputs;
    int region;
    if (!PyArg_ParseTuple(args, "sOp", &name, &inputs, &region))
        return NULL;
    if (!recording(self))
        return PyLong_FromLong(0);
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
static PyObject *rec_call_end(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    long long seq;
    PyObject *result;
    if (!PyArg_ParseTuple(args, "LO", &seq, &result))
        return NULL;
    if (!seq)
        Py_RETURN_NONE;
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
    Py_RETURN_NONE;
}

/* backward_begin(api, roots, retain_graph, create_graph, inputs) -> id (0:
 * not recorded) */
static PyObject *rec_backward_begin(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    const char *api;
    PyObject *roots, *inputs;
    int retain, create;
    if (!PyArg_ParseTuple(args, "sOppO", &api, &roots, &retain, &create, &inputs))
        return NULL;
    if (!recording(self))
        return PyLong_FromLong(0);
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
static PyObject *rec_backward_end(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    long long id;
    PyObject *exc;
    if (!PyArg_ParseTuple(args, "LO", &id, &exc))
        return NULL;
    if (self->in_backward > 0 && id)
        self->in_backward--;
    if (!self->in_backward && !self->busy)
        gt__release_frames(self);
    if (id && id == self->cur_backward) {
        self->cur_backward = 0;
        Py_CLEAR(self->last_exec);
    }
    if (!id || !self->r || self->forked || self->failed)
        Py_RETURN_NONE;
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
    Py_RETURN_NONE;
}

/* error(exc): record an exception that ends the run, at the innermost
 * frame of its traceback. */
static PyObject *rec_error(PyObject *op, PyObject *exc)
{
    gt_pyrec *self = (gt_pyrec *)op;
    if (!self->r || self->forked || self->failed)
        Py_RETURN_NONE;
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
    Py_RETURN_NONE;
}

static PyObject *rec_set_active(PyObject *op, PyObject *arg)
{
    gt_pyrec *self = (gt_pyrec *)op;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
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
    Py_RETURN_NONE;
}

/* forget(tensor): let go of t's entry and its weak reference
 * (torch.utils.swap_tensors refuses a tensor with one); t is recorded anew
 * when next seen. */
static PyObject *rec_forget(PyObject *op, PyObject *t)
{
    gt_pyrec *self = (gt_pyrec *)op;
    uint64_t *v = gt_map_get(&self->tensors, (uintptr_t)t, 0, 0);
    if (v)
        gt__ent_forget(self, (gt_tensor_ent *)(uintptr_t)*v);
    Py_RETURN_NONE;
}

/* observe_version(tensor): its version counter was set (not bumped) by
 * torch._C._autograd._unsafe_set_version_counter; record the value it has
 * now, before any node runs that checks it. */
static PyObject *rec_observe_version(PyObject *op, PyObject *t)
{
    gt_pyrec *self = (gt_pyrec *)op;
    if (!recording(self))
        Py_RETURN_NONE;
    excsave saved_exc = exc_save();
    gt__flush_pending(self);
    gt_tensor_ent *e = gt__lookup(self, t);
    if (e)
        gt__observe(self, e, gt__read_version(self, t));
    exc_restore(saved_exc);
    Py_RETURN_NONE;
}

/* watch_data(descriptor): the `data` getset descriptor of torch's tensor base
 * class, which data_set forwards to. */
static PyObject *rec_watch_data(PyObject *op, PyObject *descr)
{
    return gt_py_watch_data(&((gt_pyrec *)op)->data_orig, descr);
}

/* data_set(tensor, value): `tensor.data = value`, recorded where it happens.
 * The assignment replaces the tensor's storage without a version bump and
 * without an aten op, so the dispatch mode never sees it: the property the
 * Python side puts on torch.Tensor while recording calls this, which does
 * the assignment through the original descriptor (its result and its error
 * are the user's) and records a storage_swaps row with op and backward NULL
 * and the assigning line's stack. Any tensor counts, saved yet or not: a
 * node that saved it before recording started is found at backward. */
static PyObject *rec_data_set(PyObject *op, PyObject *args)
{
    gt_pyrec *self = (gt_pyrec *)op;
    PyObject *t, *value;
    if (!PyArg_ParseTuple(args, "OO", &t, &value))
        return NULL;
    if (!self->data_orig) {
        PyErr_SetString(PyExc_RuntimeError, "data_set before watch_data");
        return NULL;
    }
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
    int rc = Py_TYPE(self->data_orig)->tp_descr_set(self->data_orig, t, value);
    if (rc == 0 && e && e->rec && recording(self)) {
        excsave saved_exc = exc_save();
        gt_id stack = gt__capture_stack_here(self, NULL);
        gt__check_storage(self, e, t, 0, 0, stack, 1);
        swallow(self);
        exc_restore(saved_exc);
    }
    Py_XDECREF(e);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* forked(): called in a forked child; never touch the parent's trace. */
static PyObject *rec_forked(PyObject *op, PyObject *Py_UNUSED(a))
{
    gt_pyrec *self = (gt_pyrec *)op;
    self->forked = 1;
    self->active = 0;
    self->r = NULL; /* the parent's connection: leaked on purpose */
    Py_RETURN_NONE;
}

static PyObject *rec_get_recording(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(recording((gt_pyrec *)op));
}

static PyObject *rec_get_failed(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((gt_pyrec *)op)->failed);
}

static PyObject *rec_get_seq(PyObject *op, void *c)
{
    (void)c;
    gt_pyrec *self = (gt_pyrec *)op;
    return PyLong_FromLongLong(self->r ? gt_recorder_seq(self->r) : 0);
}

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
    {"dispatch", (PyCFunction)(void (*)(void))gt__rec_dispatch, METH_FASTCALL,
     "dispatch(func, [types,] args, kwargs): record the op and call func(*args, "
     "**kwargs)"},
    {"close", rec_close, METH_VARARGS,
     "close(status=0, exit_code=0, signal=0): end the run and close the trace; returns "
     "the recorder's error message or None"},
    {"set_run", (PyCFunction)(void (*)(void))rec_set_run, METH_VARARGS | METH_KEYWORDS,
     "set_run(**run_info): fill in the run row"},
    {"flush", rec_flush, METH_NOARGS, "discover pending nodes and commit"},
    {"backward_begin", rec_backward_begin, METH_VARARGS,
     "backward_begin(api, roots, retain_graph, create_graph, inputs) -> id"},
    {"backward_end", rec_backward_end, METH_VARARGS, "backward_end(id, exc_or_None)"},
    {"error", rec_error, METH_O, "error(exc): record the exception ending the run"},
    {"call_begin", rec_call_begin, METH_VARARGS,
     "call_begin(name, args, region) -> seq: record a call into user code"},
    {"call_end", rec_call_end, METH_VARARGS,
     "call_end(seq, result_or_None): its outputs and the nodes they got"},
    {"set_active", rec_set_active, METH_O, "set_active(bool): open/close the window"},
    {"watch_data", rec_watch_data, METH_O,
     "watch_data(descriptor): the tensor base class's `data` descriptor"},
    {"data_set", rec_data_set, METH_VARARGS,
     "data_set(tensor, value): `tensor.data = value`, with the swap recorded"},
    {"forget", rec_forget, METH_O,
     "forget(tensor): drop its entry and weak reference (before swap_tensors)"},
    {"observe_version", rec_observe_version, METH_O,
     "observe_version(tensor): record the version its counter was set to"},
    {"forked", rec_forked, METH_NOARGS, "in a forked child: stop without writing"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rec_getset[] = {
    {"recording", rec_get_recording, NULL, "True while ops are being recorded", NULL},
    {"failed", rec_get_failed, NULL, "True once a write failure stopped recording", NULL},
    {"seq", rec_get_seq, NULL, "events recorded so far", NULL},
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
