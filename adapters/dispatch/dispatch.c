/*
 * _gradtrace: the PyTorch adapter's per-op work, in C over gtrecorder.
 *
 * The Python side (gradtrace/_mode.py) is a TorchDispatchMode whose
 * __torch_dispatch__ is one call: gt_pyrec.dispatch(func, args, kwargs). Here
 * that call
 *   1. discovers the autograd nodes created by the previous op: its outputs
 *      (and mutated arguments) got their grad_fn after the dispatch returned,
 *      and no other op ran since, so each new node's saved tensors are read
 *      now at their save-time version;
 *   2. records the op: name, phase, grad mode, thread, interned Python stack;
 *   3. records each tensor argument (flattening tensor lists) with its
 *      version, noticing version changes nobody predicted ("observed");
 *   4. calls func exactly once and returns what it returns (or its
 *      exception), whatever happened to the recording;
 *   5. records the predicted version bump of each argument the schema marks
 *      as written, the variable names bound to it in the user's frame, and
 *      the outputs (views share their input's version counter).
 *
 * Identity: a tensor is identified by its Python object, which PyTorch keeps
 * alive as long as the TensorImpl lives (PyObject preservation); a weakref
 * callback forgets it when it dies, so addresses can be reused but ids never
 * are. A storage is identified by its data pointer while a recorded tensor
 * on it lives. A node is identified by an id stored in its own metadata dict
 * (grad_fn.metadata lives on the C++ node), so a node's Python wrapper may
 * come and go and a freed node's address may be reused.
 *
 * Nothing here raises into the recorded program: bookkeeping errors are
 * cleared; a recorder write failure (size cap, disk full) stops recording
 * with one warning.
 */
#include "state.h"

/* The ops a tensor subclass's Python dispatch answers PyTorch's own
 * questions about its geometry with (PyInterpreter's sizes, strides, dim,
 * layout, ...): autograd asks some of them with the tensor's autograd
 * lock held (a jagged nested tensor's sym_sizes, as its AccumulateGrad is
 * made), so reading any pending output's grad_fn then deadlocked. */
static int is_metadata_query(const char *name)
{
    static const char *const names[] = {
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::size",
        "aten::stride",
        "aten::numel",
        "aten::dim",
        "aten::storage_offset",
        "aten::is_contiguous",
        "aten::is_strides_like_format",
        "aten::is_non_overlapping_and_dense",
        "prim::layout",
        "prim::device",
    };
    size_t n = strcspn(name, ".");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == n && !strncmp(name, names[i], n))
            return 1;
    return 0;
}

static gt_opmeta *op_meta(gt_pyrec *self, PyObject *func)
{
    uint64_t *v = gt_map_get(&self->ops, (uintptr_t)func, 0, 0);
    if (v)
        return (gt_opmeta *)(uintptr_t)*v;
    PyObject *res = PyObject_CallOneArg(self->op_meta_fn, func);
    const char *name;
    PyObject *wpos;
    PyObject *wnames;
    int view_arg;
    PyObject *call = func;
    int bump = BUMP_AFTER;
    PyObject *kw = Py_None;
    if (!res ||
        !PyArg_ParseTuple(res, "sO!O!i|OiO", &name, &PyTuple_Type, &wpos, &PyTuple_Type,
                          &wnames, &view_arg, &call, &bump, &kw) ||
        !PyCallable_Check(call)) {
        Py_XDECREF(res);
        swallow(self);
        return NULL;
    }
    gt_opmeta *m = calloc(1, sizeof *m);
    if (!m) {
        Py_DECREF(res);
        return NULL;
    }
    /* the written positions, as one flag per schema position */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(wpos); i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(wpos, i));
        if (k < 0 || k > 100000)
            continue;
        if (k >= m->nwpos) {
            unsigned char *nw = realloc(m->wpos, (size_t)k + 1);
            if (!nw)
                continue;
            memset(nw + m->nwpos, 0, (size_t)(k + 1 - m->nwpos));
            m->wpos = nw;
            m->nwpos = k + 1;
        }
        m->wpos[k] = 1;
    }
    swallow(self);
    gt__kw_meta(m, kw);
    swallow(self);
    m->bump = bump;
    m->name = gt__intern_str(self, name);
    m->wnames = Py_NewRef(wnames);
    m->view_arg = view_arg;
    m->is_detach = !strcmp(name, "aten::detach");
    m->is_query = is_metadata_query(name);
    m->call = Py_NewRef(call);
    Py_DECREF(res);
    if (gt__keep(self, func) < 0 || gt__keep(self, m->wnames) < 0 ||
        gt_map_put(&self->ops, (uintptr_t)func, 0, 0, (uintptr_t)m) < 0) {
        swallow(self);
        Py_DECREF(m->wnames);
        Py_DECREF(m->call);
        Py_XDECREF(m->when_name);
        free(m->wpos);
        free(m);
        return NULL;
    }
    return m;
}

/* Bump, as PyTorch would have without a dispatch mode, the version of each
 * tensor a _foreach_ op wrote whose version did not move (see BUMP_FOREACH):
 * the recorded run must fail where the unrecorded one does. */
void gt__bump_foreach(gt_pyrec *self)
{
    PyObject *list = self->unbumped;
    if (!list || !PyList_GET_SIZE(list))
        return;
    self->unbumped = PyList_New(0);
    PyObject *todo = PyList_New(0);
    for (Py_ssize_t i = 0; todo && i < PyList_GET_SIZE(list); i++) {
        PyObject *it = PyList_GET_ITEM(list, i);
        PyObject *t = PyTuple_GET_ITEM(it, 0);
        int64_t before = PyLong_AsLongLong(PyTuple_GET_ITEM(it, 1));
        if (gt__read_version(self, t) == before && PyList_Append(todo, t) < 0)
            swallow(self);
    }
    if (todo && PyList_GET_SIZE(todo) && self->increment && self->increment != Py_None) {
        PyObject *r = PyObject_CallOneArg(self->increment, todo);
        Py_XDECREF(r);
    }
    Py_XDECREF(todo);
    Py_DECREF(list);
    swallow(self);
}

static void add_pending(gt_pyrec *self, PyObject *t)
{
    size_t need = (size_t)self->npending + 1;
    if (GT_ALLOC_GROW(self->pending, need, self->cappending, 16) != 0)
        return;
    self->pending[self->npending++] = Py_NewRef(t);
}

/* Before an op writes under a torch.func transform: record the graph of the
 * wrapped tensors the user's frames (uf and its user callers) name. Their
 * nodes never reach the mode (the transform hands it the unwrapped tensors
 * and builds its graph on the wrappers after the op), and once the write has
 * happened reading what they saved raises the version error. Each node found
 * is attributed to the op that made the tensor it wraps. */
static void ft_scan(gt_pyrec *self, PyFrameObject *uf)
{
    modstate *ms = STATE(self);
    PyFrameObject *f = (PyFrameObject *)Py_XNewRef(uf);
    for (int depth = 0; f && depth < MAX_NESTING && recording(self); depth++) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int kind = gt__code_kind(self, co);
        Py_DECREF(co);
        PyObject *locals = kind == CODE_USER ? PyFrame_GetLocals(f) : NULL;
        PyObject *items = locals && PyDict_Check(locals) ? PyDict_Values(locals) : NULL;
        Py_XDECREF(locals);
        for (Py_ssize_t i = 0; items && i < PyList_GET_SIZE(items); i++) {
            PyObject *v = PyList_GET_ITEM(items, i);
            if (!PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type))
                continue;
            PyObject *in = gt__ft_inner(self, v);
            PyObject *g = in ? PyObject_GetAttr(v, ms->s_grad_fn) : NULL;
            gt_tensor_ent *e = in ? gt__lookup(self, in) : NULL;
            if (g && g != Py_None) {
                int is_new = 0;
                gt_id nid = gt__discover(self, g, e ? e->created_by : 0,
                                         gt__current_thread(self), &is_new);
                if (nid && is_new && e)
                    ck(self, gt_node_output(
                                 self->r, nid,
                                 (int)gt__long_attr(v, ms->s_output_nr, 0, self), e->id));
            }
            Py_XDECREF(g);
            Py_XDECREF(in);
            swallow(self);
        }
        Py_XDECREF(items);
        swallow(self);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
}

/* Append to `a` every tensor in v: v itself, or the tensors of a list or
 * tuple, at any nesting (Tensor[], Tensor?[], lists of lists). Returns 0, or
 * -1 when out of memory (then `a` holds the tensors found so far). */
int gt__collect(gt_pyrec *self, PyObject *v, int written, int pos, argvec *a, int depth)
{
    if (PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type))
        return gt__argvec_push(a,
                               (argref){.t = v, .written = written, .schema_pos = pos});
    if ((!PyList_Check(v) && !PyTuple_Check(v)) || depth >= MAX_NESTING)
        return 0;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t j = 0; j < m; j++)
        if (gt__collect(self, PySequence_Fast_GET_ITEM(v, j), written, pos, a,
                        depth + 1) < 0)
            return -1;
    return 0;
}

static int is_written(const gt_opmeta *m, Py_ssize_t pos)
{
    return pos < m->nwpos && m->wpos[pos];
}

/* An op dispatch passes through unrecorded (not recording, or our own
 * reads): the bumps a _foreach_ op still owes first, then the op. */
static PyObject *call_unrecorded(gt_pyrec *self, PyObject *func, PyObject *args,
                                 PyObject *kwargs)
{
    if (self->unbumped && PyList_GET_SIZE(self->unbumped)) {
        excsave e = exc_save();
        gt__bump_foreach(self);
        exc_restore(e);
    }
    uint64_t *v = gt_map_get(&self->ops, (uintptr_t)func, 0, 0);
    PyObject *call = v ? ((gt_opmeta *)(uintptr_t)*v)->call : func;
    return PyObject_Call(call, args, kwargs);
}

/* Is the op called at `site` (instruction lasti) one to let through
 * unrecorded: a metadata query, or autograd's own detach of the previous
 * op's output? *shallow gets whether a detach is `.data`'s. */
static int not_users_op(gt_pyrec *self, const gt_opmeta *meta, PyFrameObject *site,
                        int lasti, int *shallow)
{
    if (meta && meta->is_query) {
        /* nothing to record, and no tensor's grad_fn may be read: autograd
         * can be asking with a tensor's autograd lock held */
        return 1;
    }
    if (meta && meta->is_detach && self->via_autograd != Py_None) {
        /* `.data` (and SavedVariable's tensor_data) reach us as a detach
         * that did not come through the autograd kernels: .data gets a
         * version counter of its own */
        PyObject *r = PyObject_CallNoArgs(self->via_autograd);
        *shallow = r == Py_False;
        Py_XDECREF(r);
        swallow(self);
        if (*shallow && site && (uintptr_t)site == self->last_site_addr &&
            lasti == self->last_lasti) {
            /* autograd saving the previous op's output (same frame, same
             * instruction): bookkeeping, not the user's op */
            return 1;
        }
    }
    return 0;
}

/* The op's ops row (name, phase, grad mode, thread, stack) with what it
 * needs first: the graph a torch.func transform hides, the node running it
 * in backward. Returns its seq, 0 when not recorded; *stack gets its stack,
 * *uf a new reference to the innermost user frame (or NULL). */
static int64_t op_row(gt_pyrec *self, const gt_opmeta *meta, PyFrameObject *site,
                      int lasti, gt_id *stack, PyFrameObject **uf /* OUT */)
{
    int64_t seq = 0;
    *stack = gt__capture_stack(self, site, lasti, uf);
    /* (inside the mode functorch's own level stack reads empty) */
    self->ft_now = meta->nwpos && self->stack_func && gt__ft_active(self);
    if (self->ft_now && *uf)
        ft_scan(self, *uf);
    PyObject *ge = PyObject_CallNoArgs(self->grad_enabled);
    int grad = ge == Py_True;
    Py_XDECREF(ge);
    swallow(self);
    if (self->in_backward)
        gt__note_exec(self); /* before the op: the node ran it */
    gt_op_info oi = {.name = meta->name,
                     .phase = self->in_backward ? GT_PHASE_BACKWARD
                              : grad            ? GT_PHASE_FORWARD
                                                : GT_PHASE_OTHER,
                     .grad_mode = grad,
                     .thread = gt__current_thread(self),
                     .stack = *stack};
    if (ck(self, gt_op(self->r, &oi, &seq)) < 0)
        seq = 0;
    self->pending_thread = oi.thread;
    return seq;
}

/* Record the tensor arguments of op `seq` (into `in`): each as an input
 * with its version, the written ones as mutated too; a saved tensor's
 * storage is checked first. */
static void record_inputs(gt_pyrec *self, const gt_opmeta *meta, PyObject *args,
                          PyObject *kwargs, argvec *in, int64_t seq, gt_id stack)
{
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    int oom = 0, when = gt__kw_when(meta, args, kwargs);
    for (Py_ssize_t i = 0; i < na && !oom; i++)
        oom = gt__collect(self, PyTuple_GET_ITEM(args, i),
                          is_written(meta, i) && (when || meta->wpos[i] != 2), (int)i, in,
                          0) < 0;
    if (kwargs && PyDict_Check(kwargs)) {
        PyObject *k, *v;
        Py_ssize_t p = 0;
        while (!oom && PyDict_Next(kwargs, &p, &k, &v)) {
            int w = PySequence_Contains(meta->wnames, k) > 0;
            oom = gt__collect(self, v, w, -1, in, 0) < 0;
        }
    }
    if (oom)
        PyErr_NoMemory(), swallow(self); /* recorded in part */
    int nmut = 0;
    for (size_t i = 0; i < in->n; i++) {
        argref *a = &in->v[i];
        a->e = gt__see_tensor(self, a->t, 0, NULL, &a->ver);
        if (a->e && a->e->saved)
            gt__check_storage(self, a->e, a->t, seq, 0, stack, 1);
        if (a->e)
            ck(self, gt_op_arg(self->r, seq, GT_ROLE_INPUT, (int)i, a->e->id, a->ver));
        if (a->written && a->e)
            ck(self, gt_op_arg(self->r, seq, GT_ROLE_MUTATED, nmut++, a->e->id, a->ver));
    }
}

/* After op `seq` returned: the predicted bumps. The ADInplaceOrView kernel
 * bumps after we return, once per version counter however many written
 * arguments share it; the names bound to what it wrote in the user's frame
 * uf. */
static void record_bumps(gt_pyrec *self, const gt_opmeta *meta, argvec *in, int64_t seq,
                         gt_id stack, PyFrameObject *uf)
{
    for (size_t i = 0; i < in->n; i++) {
        argref *a = &in->v[i];
        if (!a->written || !a->e || !a->e->vc)
            continue;
        if (a->e->vc->bumped_at == seq)
            continue;
        a->e->last_out = seq;
        if (a->e->saved) /* an op's own change (set_): autograd sees it */
            gt__check_storage(self, a->e, a->t, seq, 0, stack, 0);
        if (meta->bump == BUMP_NONE)
            gt__kw_after(self, meta, a, seq);
        if (meta->bump != BUMP_NONE) {
            int64_t after = a->ver + 1;
            a->e->vc->expected = after;
            a->e->vc->bumped_at = seq;
            ck(self, gt_version_bump(self->r, seq, a->e->id, after, 0, NULL));
        }
        if (meta->bump == BUMP_FOREACH) {
            PyObject *it = Py_BuildValue("(OL)", a->t, (long long)a->ver);
            if (!it || !self->unbumped || PyList_Append(self->unbumped, it) < 0)
                swallow(self);
            Py_XDECREF(it);
        }
        if (uf)
            gt__record_names(self, uf, seq, a->t, a->e);
        add_pending(self, a->t);
    }
}

/* The tensors op `seq` returned in `out` (collected into outs): each as an
 * output, a new one recorded (a view of the schema's view argument shares
 * its version counter, unless the op is `.data`'s shallow detach). */
static void record_outputs(gt_pyrec *self, const gt_opmeta *meta, argvec *in,
                           argvec *outs, PyObject *out, int64_t seq, int shallow)
{
    if (gt__collect(self, out, 0, 0, outs, 0) < 0)
        PyErr_NoMemory(), swallow(self);
    gt_tensor_ent *via = NULL;
    if (meta->view_arg >= 0 && !shallow)
        for (size_t i = 0; i < in->n; i++)
            if (in->v[i].schema_pos == meta->view_arg && !in->v[i].written) {
                via = in->v[i].e;
                break;
            }
    for (size_t j = 0; j < outs->n; j++) {
        int64_t ver = 0;
        PyObject *t = outs->v[j].t;
        gt_tensor_ent *e = gt__lookup(self, t);
        if (e) {
            ver = e->vc ? e->vc->expected : 0;
        } else {
            e = gt__see_tensor(self, t, seq, via, &ver);
            if (e)
                add_pending(self, t);
        }
        if (e)
            ck(self, gt_op_arg(self->r, seq, GT_ROLE_OUTPUT, (int)j, e->id, ver));
    }
}

/* dispatch(func, [types,] args, kwargs): the steps at the top of this file.
 * Returns what func returns, or NULL with its exception. */
PyObject *gt__rec_dispatch(PyObject *op, PyObject *const *argv, Py_ssize_t argc)
{
    gt_pyrec *self = (gt_pyrec *)op;
    PyObject *shifted[3];
    if (argc == 5 || argc == 4) {
        /* bound as the mode's method: ([mode,] func, types, args, kwargs) */
        Py_ssize_t k = argc - 4;
        shifted[0] = argv[k];
        shifted[1] = argv[k + 2];
        shifted[2] = argv[k + 3];
        argv = shifted;
        argc = 3;
    }
    if (argc != 3 || !PyTuple_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "dispatch(func, [types,] args, kwargs)");
        return NULL;
    }
    PyObject *func = argv[0], *args = argv[1], *kwargs = argv[2];
    if (kwargs == Py_None)
        kwargs = NULL;
    if (!recording(self) || self->quiet)
        return call_unrecorded(self, func, args, kwargs);

    /* the caller's exception state must survive our bookkeeping */
    excsave saved_exc = exc_save();
    gt_opmeta *meta = op_meta(self, func);
    int lasti = -1;
    PyFrameObject *site = gt__current_site(self, &lasti);
    int shallow = 0;
    if (not_users_op(self, meta, site, lasti, &shallow)) {
        Py_XDECREF(site);
        exc_restore(saved_exc);
        return PyObject_Call(meta->call, args, kwargs);
    }
    self->busy++;
    gt__flush_pending(self);

    PyFrameObject *uf = NULL;
    gt_id stack = 0;
    int64_t seq = 0;
    gt_scratch *sc = gt__scratch_take(self);
    if (!sc)
        PyErr_NoMemory(), swallow(self);
    if (meta && sc && recording(self))
        seq = op_row(self, meta, site, lasti, &stack, &uf);
    argvec *in = sc ? &sc->in : NULL;
    if (seq)
        record_inputs(self, meta, args, kwargs, in, seq, stack);
    swallow(self);
    exc_restore(saved_exc);

    /* the op itself, exactly once: through its C++ operator when calling
     * func would only forward to it */
    PyObject *out = PyObject_Call(meta ? meta->call : func, args, kwargs);

    if (seq && recording(self)) {
        saved_exc = exc_save();
        if (out) {
            record_bumps(self, meta, in, seq, stack, uf);
            record_outputs(self, meta, in, &sc->out, out, seq, shallow);
        }
        self->pending_seq = seq;
        swallow(self);
        exc_restore(saved_exc);
    }
    self->ft_now = 0;
    Py_XDECREF(uf);
    Py_XDECREF(site);
    gt__scratch_give(self, sc);
    self->busy--;
    if (!self->busy && !self->in_backward)
        gt__release_frames(self);
    return out;
}
