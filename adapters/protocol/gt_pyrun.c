/* set_run's keywords to a gt_run_info; see gt_pyrun.h. */
#define PY_SSIZE_T_CLEAN
#include "gt_pyrun.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* 3.11: a frame's fast locals are only reachable through its internal
 * frame (3.12 has PyFrame_GetVar) */
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#elif PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif

#include "grow.h"
#include "gtmap.h"
#include "strbuf.h"

#include <string.h>

int gt_py_run_info(PyObject *args, PyObject *kw, gt_run_info *ri)
{
    static char *kwlist[] = {"engine_version",
                             "python_version",
                             "argv_json",
                             "cwd",
                             "host",
                             "options_json",
                             "pid",
                             "rank",
                             "world_size",
                             "local_rank",
                             "backend",
                             "launcher_run_id",
                             NULL};
    gt_run_info r = {.engine = "pytorch", .rank = -1, .local_rank = -1};
    long long pid = 0, rank = -1, world = 0, local = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzzzzLLLLzz", kwlist, &r.engine_version,
                                     &r.python_version, &r.argv_json, &r.cwd, &r.host,
                                     &r.options_json, &pid, &rank, &world, &local,
                                     &r.backend, &r.launcher_run_id))
        return -1;
    r.pid = pid;
    r.rank = rank;
    r.world_size = world;
    r.local_rank = local;
    *ri = r;
    return 0;
}

PyObject *gt_py_watch_data(PyObject **slot, PyObject *descr)
{
    if (!Py_TYPE(descr)->tp_descr_set) {
        PyErr_SetString(PyExc_TypeError, "watch_data: not a settable descriptor");
        return NULL;
    }
    Py_XSETREF(*slot, Py_NewRef(descr));
    Py_RETURN_NONE;
}

const char *gt_py_text(PyObject *s, gt_strbuf *b)
{
    gt_strbuf_reset(b);
    if (!s || !PyUnicode_Check(s))
        return NULL;
    Py_ssize_t n = 0;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    PyObject *enc = NULL;
    if (!p) { /* lone surrogates: not UTF-8 */
        PyErr_Clear();
        enc = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
        if (!enc) {
            PyErr_Clear();
            return NULL;
        }
        p = PyBytes_AS_STRING(enc);
        n = PyBytes_GET_SIZE(enc);
    }
    const char *nul = memchr(p, 0, (size_t)n);
    if (!nul && !enc)
        return p;
    gt_strbuf_reserve(b, (size_t)n);
    for (const char *q = p, *end = p + n; q < end;) {
        const char *z = memchr(q, 0, (size_t)(end - q));
        gt_strbuf_add(b, q, (size_t)((z ? z : end) - q));
        if (!z)
            break;
        gt_strbuf_add(b, "\\x00", 4);
        q = z + 1;
    }
    Py_XDECREF(enc);
    return b->oom ? NULL : gt_strbuf_str(b);
}

PyObject *gt_py_type_attr(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module);
    PyObject *t = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    if (t && !PyType_Check(t))
        Py_CLEAR(t);
    PyErr_Clear();
    return t;
}

/* ---- names bound in a frame ------------------------------------------------ */

#define MAX_MODULE_PARAMS 10000

/* A parameter to name, found by walk_params: prefix.key. */
typedef struct {
    PyObject *prefix; /* owned: the submodule's dotted path, "" for the root */
    PyObject *key;    /* owned: the parameter's name in its module */
    PyObject *param;  /* owned */
} gt_param;

typedef struct {
    const gt_py_namer *n;
    gt_param *v;
    size_t len, cap;
    size_t total;  /* parameters seen, named or not */
    gt_map mods;   /* modules visited (named_modules' memo) */
    gt_map params; /* parameters seen (named_parameters' memo) */
} gt_walk;

/* Is attribute `name` of type tp the one nn.Module defines (not overridden)? */
static int inherits(const gt_py_namer *n, PyTypeObject *tp, PyObject *name)
{
    PyObject *mine = _PyType_Lookup(tp, name);
    PyObject *base = _PyType_Lookup((PyTypeObject *)n->module_type, name);
    return mine && mine == base;
}

/* The known tensors of one of a module's dicts (_parameters, _buffers),
 * under prefix, into w: -1 when the walk cannot go on. */
static int walk_dict(gt_walk *w, PyObject *d, PyObject *prefix)
{
    const gt_py_namer *n = w->n;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (v == Py_None || gt_map_get(&w->params, (uintptr_t)v, 0, 0))
            continue;
        if (!PyUnicode_Check(k) || gt_map_put(&w->params, (uintptr_t)v, 0, 0, 1) < 0)
            return -1;
        if (++w->total > MAX_MODULE_PARAMS)
            return -1;
        if (!PyObject_TypeCheck(v, (PyTypeObject *)n->tensor_type) ||
            !n->known(n->ctx, v))
            continue;
        if (GT_ALLOC_GROW(w->v, w->len + 1, w->cap, 16) != 0)
            return -1;
        w->v[w->len++] = (gt_param){Py_NewRef(prefix), Py_NewRef(k), Py_NewRef(v)};
    }
    return 0;
}

/* module.named_parameters() of nn.Module, in C, and its buffers (a
 * buffer an op saved is named as one: model.bn.running_mean): the same
 * order and the same duplicate rules (a module or parameter reached twice
 * counts once), without
 * running a Python generator per module. Returns 0, or -1 when it cannot
 * follow Python's walk exactly (overridden named_modules, attributes that are
 * not plain dicts, too deep): then the caller asks Python. */
static int walk_params(gt_walk *w, PyObject *m, PyObject *prefix, int depth)
{
    static PyObject *s_modules, *s_parameters, *s_buffers, *s_named_modules;
    if (!s_modules && (!(s_modules = PyUnicode_InternFromString("_modules")) ||
                       !(s_parameters = PyUnicode_InternFromString("_parameters")) ||
                       !(s_buffers = PyUnicode_InternFromString("_buffers")) ||
                       !(s_named_modules = PyUnicode_InternFromString("named_modules"))))
        return -1;
    const gt_py_namer *n = w->n;
    if (depth > 100 || !PyObject_TypeCheck(m, (PyTypeObject *)n->module_type) ||
        !inherits(n, Py_TYPE(m), s_named_modules))
        return -1;
    if (gt_map_get(&w->mods, (uintptr_t)m, 0, 0))
        return 0;
    if (gt_map_put(&w->mods, (uintptr_t)m, 0, 0, 1) < 0)
        return -1;
    int rc = -1;
    PyObject *params = PyObject_GetAttr(m, s_parameters);
    PyObject *bufs = params ? PyObject_GetAttr(m, s_buffers) : NULL;
    PyObject *mods = bufs ? PyObject_GetAttr(m, s_modules) : NULL;
    if (!mods || !PyDict_CheckExact(params) || !PyDict_CheckExact(bufs) ||
        !PyDict_CheckExact(mods) || walk_dict(w, params, prefix) < 0 ||
        walk_dict(w, bufs, prefix) < 0)
        goto out;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(mods, &pos, &k, &v)) {
        if (v == Py_None)
            continue;
        if (!PyUnicode_Check(k))
            goto out;
        PyObject *sub = PyUnicode_GET_LENGTH(prefix)
                            ? PyUnicode_FromFormat("%U.%U", prefix, k)
                            : Py_NewRef(k);
        int r = sub ? walk_params(w, v, sub, depth + 1) : -1;
        Py_XDECREF(sub);
        if (r < 0)
            goto out;
    }
    rc = 0;
out:
    Py_XDECREF(params);
    Py_XDECREF(bufs);
    Py_XDECREF(mods);
    return rc;
}

/* Name "<var>.<key>" or "<var>.<prefix>.<key>" for t, put together from
 * the strings' UTF-8 (no Python object made: this runs for every parameter
 * at every backward call). */
static void name_param(const gt_py_namer *n, const char *var, PyObject *prefix,
                       PyObject *key, PyObject *t, gt_strbuf *b)
{
    Py_ssize_t plen = 0, klen = 0;
    const char *p = prefix ? PyUnicode_AsUTF8AndSize(prefix, &plen) : "";
    const char *k = p ? PyUnicode_AsUTF8AndSize(key, &klen) : NULL;
    if (!k)
        return;
    gt_strbuf_reset(b); /* the caller's, reused from one name to the next */
    gt_strbuf_add(b, var, strlen(var));
    if (plen) {
        gt_strbuf_add(b, ".", 1);
        gt_strbuf_add(b, p, (size_t)plen);
    }
    gt_strbuf_add(b, ".", 1);
    gt_strbuf_add(b, k, (size_t)klen);
    if (b->p && !b->oom)
        n->name(n->ctx, t, b->p);
}

/* module_names through m.named_parameters() itself (a module that
 * overrides how its parameters are listed). */
static void module_names_py(const gt_py_namer *n, const char *var, PyObject *m)
{
    PyObject *res = PyObject_CallMethod(m, "named_parameters", NULL);
    PyObject *it = res ? PyObject_GetIter(res) : NULL;
    Py_XDECREF(res);
    PyObject *all = it ? PyList_New(0) : NULL;
    PyObject *x;
    while (all && (x = PyIter_Next(it))) {
        int rc = PyList_Append(all, x);
        Py_DECREF(x);
        if (rc < 0 || PyList_GET_SIZE(all) > MAX_MODULE_PARAMS)
            Py_CLEAR(all); /* too big to name on every backward call */
    }
    Py_XDECREF(it);
    gt_strbuf b = {0};
    if (!all || PyErr_Occurred())
        goto out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *pair = PyList_GET_ITEM(all, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)))
            continue;
        PyObject *t = PyTuple_GET_ITEM(pair, 1);
        if (!PyObject_TypeCheck(t, (PyTypeObject *)n->tensor_type) ||
            !n->known(n->ctx, t))
            continue;
        name_param(n, var, NULL, PyTuple_GET_ITEM(pair, 0), t, &b);
        PyErr_Clear();
    }
out:
    gt_strbuf_release(&b);
    Py_XDECREF(all);
}

/* Names "<var>.<parameter name>" (model.0.weight) for the known parameters
 * of module m bound to `var`, as m.named_parameters() names them. */
static void module_names(const gt_py_namer *n, const char *var, PyObject *m)
{
    static PyObject *s_named_parameters;
    if (!s_named_parameters &&
        !(s_named_parameters = PyUnicode_InternFromString("named_parameters")))
        return;
    /* The walk's list, memo maps and name buffer are kept from one call to
     * the next (this runs at every backward call: allocated each time, the
     * maps' slots alone cost 9 k instructions a step on the MLP). Taken with
     * the GIL; a walk that starts while another has them (Python code the
     * walk runs may name again) uses its own. */
    static gt_walk s_w;
    static gt_strbuf s_b;
    static int s_busy;
    gt_walk mine = {0};
    gt_strbuf mine_b = {0};
    int kept = !s_busy;
    gt_walk *w = kept ? &s_w : &mine;
    gt_strbuf *b = kept ? &s_b : &mine_b;
    s_busy = 1;
    w->n = n;
    w->len = w->total = 0;
    PyObject *empty = PyUnicode_FromString("");
    int walked = empty && inherits(n, Py_TYPE(m), s_named_parameters)
                     ? walk_params(w, m, empty, 0)
                     : -1;
    Py_XDECREF(empty);
    if (walked == 0)
        for (size_t i = 0; i < w->len; i++) {
            name_param(n, var, w->v[i].prefix, w->v[i].key, w->v[i].param, b);
            PyErr_Clear();
        }
    for (size_t i = 0; i < w->len; i++) {
        Py_DECREF(w->v[i].prefix);
        Py_DECREF(w->v[i].key);
        Py_DECREF(w->v[i].param);
    }
    size_t total = w->total;
    if (kept) {
        gt_map_reset(&w->mods);
        gt_map_reset(&w->params);
        s_busy = 0;
    } else {
        free(w->v);
        gt_map_clear(&w->mods);
        gt_map_clear(&w->params);
        gt_strbuf_release(b);
    }
    PyErr_Clear();
    if (walked == 0 || total > MAX_MODULE_PARAMS)
        return;
    module_names_py(n, var, m);
}

/* A list, tuple or dict with more items is not named: one that grows every
 * step (losses.append(loss)) would add its whole length at every backward
 * call. */
#define MAX_CONTAINER_ITEMS 256

/* What gt_py_bind_names named so far (tensor object -> 1): a tensor a local
 * variable or module names gets no global's name, and one any variable or
 * module names gets no container's. */
typedef struct {
    const gt_py_namer *n;
    gt_map named;
    int skip_named; /* name only what is not named yet */
} gt_bound;

static void name_bound(void *ctx, PyObject *t, const char *name)
{
    gt_bound *b = ctx;
    if (b->skip_named && gt_map_get(&b->named, (uintptr_t)t, 0, 0))
        return;
    if (gt_map_put(&b->named, (uintptr_t)t, 0, 0, 1) < 0)
        PyErr_NoMemory();
    b->n->name(b->n->ctx, t, name);
}

static int known_bound(void *ctx, PyObject *t)
{
    const gt_bound *b = ctx;
    return b->n->known(b->n->ctx, t);
}

/* Names "<var>[<i>]" for t, item i of a list or tuple (key NULL), or
 * "<var>[<repr(key)>]" for a dict's value; nothing if b named t already. */
static void name_item(const gt_bound *b, const char *var, Py_ssize_t i, PyObject *key,
                      PyObject *t)
{
    const gt_py_namer *n = b->n;
    if (!PyObject_TypeCheck(t, (PyTypeObject *)n->tensor_type) ||
        gt_map_get(&b->named, (uintptr_t)t, 0, 0))
        return;
    PyObject *r = key ? PyObject_Repr(key) : NULL;
    Py_ssize_t rlen = 0;
    const char *rs = r ? PyUnicode_AsUTF8AndSize(r, &rlen) : NULL;
    if (key && !rs) {
        Py_XDECREF(r);
        return;
    }
    gt_strbuf s = {0};
    gt_strbuf_adds(&s, var);
    if (rs) {
        gt_strbuf_adds(&s, "[");
        gt_strbuf_add(&s, rs, (size_t)rlen);
        gt_strbuf_adds(&s, "]");
    } else {
        gt_strbuf_addf(&s, "[%zd]", i);
    }
    if (s.p && !s.oom)
        n->name(n->ctx, t, s.p);
    gt_strbuf_release(&s);
    Py_XDECREF(r);
}

/* The tensors held by container c bound to `var`, one level deep: a list's
 * or a tuple's items (laterals[2]), a dict's values under str or int keys
 * (feats['p3']). Reads the objects' own storage: no user code runs (a
 * subclass's __iter__ or __getitem__ is not called). */
static void container_names(const gt_bound *b, const char *var, PyObject *c)
{
    if (PyList_Check(c) || PyTuple_Check(c)) {
        if (Py_SIZE(c) > MAX_CONTAINER_ITEMS)
            return;
        /* the size is read again at each item: naming runs no Python code,
         * but a list cannot be trusted to stay as it was */
        for (Py_ssize_t i = 0; i < Py_SIZE(c); i++) {
            PyObject *t = Py_NewRef(PyList_Check(c) ? PyList_GET_ITEM(c, i)
                                                    : PyTuple_GET_ITEM(c, i));
            name_item(b, var, i, NULL, t);
            Py_DECREF(t);
        }
    } else if (PyDict_Check(c)) {
        if (PyDict_GET_SIZE(c) > MAX_CONTAINER_ITEMS)
            return;
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(c, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k))
                continue;
            Py_INCREF(k);
            Py_INCREF(v);
            name_item(b, var, 0, k, v);
            Py_DECREF(k);
            Py_DECREF(v);
        }
    }
}

/* The (name, value) pairs a frame's code sees by name: its locals, then the
 * globals its code names (co_names) that no local shadows (a function that
 * calls backward() on a model bound at module level: `policy`); for code
 * run at module level, whose locals are its globals, the locals. A new
 * list of pairs, *nlocals of them the locals', or NULL with a Python
 * error. */
static PyObject *frame_bindings(PyFrameObject *f, Py_ssize_t *nlocals /* OUT */)
{
    PyObject *locals = PyFrame_GetLocals(f);
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *globals = PyFrame_GetGlobals(f);
#else
    PyObject *globals = Py_XNewRef(f->f_globals);
#endif
    PyCodeObject *code = PyFrame_GetCode(f);
    PyObject *names = code ? PyObject_GetAttrString((PyObject *)code, "co_names") : NULL;
    PyObject *items = NULL;
    if (!locals || !globals || !names || !PyDict_Check(globals) || !PyTuple_Check(names))
        goto out;
    /* a dict, or (3.13's function frames) a mapping over the fast locals */
    items = PyMapping_Items(locals);
    *nlocals = items ? PyList_GET_SIZE(items) : 0;
    for (Py_ssize_t i = 0; items && globals != locals && i < PyTuple_GET_SIZE(names);
         i++) {
        PyObject *k = PyTuple_GET_ITEM(names, i);
        PyObject *v = Py_XNewRef(PyDict_GetItemWithError(globals, k));
        int shadowed = v ? PySequence_Contains(locals, k) : 1;
        PyErr_Clear(); /* a name not looked up is not named */
        if (shadowed) {
            Py_XDECREF(v);
            continue;
        }
        PyObject *kv = PyTuple_Pack(2, k, v);
        Py_DECREF(v);
        if (!kv || PyList_Append(items, kv) < 0)
            Py_CLEAR(items);
        Py_XDECREF(kv);
    }
out:
    Py_XDECREF(locals);
    Py_XDECREF(globals);
    Py_XDECREF((PyObject *)code);
    Py_XDECREF(names);
    return items;
}

int gt_py_bind_names(const gt_py_namer *n, PyFrameObject *f)
{
    int errors = 0;
    gt_bound b = {.n = n};
    const gt_py_namer bn = {n->tensor_type, n->module_type, known_bound, name_bound, &b};
    /* a snapshot of the bindings: Python code (named_parameters) may run
     * while they are named */
    Py_ssize_t nlocals = 0;
    PyObject *items = frame_bindings(f, &nlocals);
    /* what locals name, then globals, then what containers hold */
    for (int pass = 0; pass < 3; pass++)
        for (Py_ssize_t i = 0; items && i < PyList_GET_SIZE(items); i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            PyObject *k = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
            if (!PyUnicode_Check(k) || (pass < 2 && (i < nlocals) != (pass == 0)))
                continue;
            b.skip_named = pass > 0;
            const char *var = NULL;
            if (pass == 2) {
                if ((PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v)) &&
                    (var = PyUnicode_AsUTF8(k)) != NULL)
                    container_names(&b, var, v);
            } else if (PyObject_TypeCheck(v, (PyTypeObject *)n->tensor_type)) {
                if ((var = PyUnicode_AsUTF8(k)) != NULL)
                    name_bound(&b, v, var);
            } else if (n->module_type &&
                       PyObject_TypeCheck(v, (PyTypeObject *)n->module_type)) {
                if ((var = PyUnicode_AsUTF8(k)) != NULL)
                    module_names(&bn, var, v);
            }
            if (PyErr_Occurred()) {
                PyErr_Clear();
                errors++;
            }
        }
    if (!items) {
        PyErr_Clear();
        errors++;
    }
    Py_XDECREF(items);
    gt_map_clear(&b.named);
    return errors;
}

PyObject *gt_py_call_bottom(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1 || !PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "call_bottom(fn, *args): fn must be callable");
        return NULL;
    }
    PyThreadState *ts = PyThreadState_Get();
    /* the frame fn's frame links back to is the thread's current one when
     * the eval loop enters it: none, as at python3's start */
#if PY_VERSION_HEX >= 0x030D0000
    struct _PyInterpreterFrame *under = ts->current_frame;
    ts->current_frame = NULL;
#elif PY_VERSION_HEX >= 0x030B0000
    struct _PyInterpreterFrame *under = ts->cframe->current_frame;
    ts->cframe->current_frame = NULL;
#else
    PyFrameObject *under = ts->frame;
    ts->frame = NULL;
#endif
    PyObject *r = PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), NULL);
#if PY_VERSION_HEX >= 0x030D0000
    ts->current_frame = under;
#elif PY_VERSION_HEX >= 0x030B0000
    ts->cframe->current_frame = under;
#else
    ts->frame = under;
#endif
    return r;
}

/* ---- module paths ------------------------------------------------------- */

int gt_py_code_self(PyCodeObject *co)
{
    if (co->co_argcount < 1)
        return 0;
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *names = PyCode_GetVarnames(co);
#else
    PyObject *names = Py_XNewRef(co->co_varnames);
#endif
    int is = names && PyTuple_Check(names) && PyTuple_GET_SIZE(names) > 0 &&
             PyUnicode_Check(PyTuple_GET_ITEM(names, 0)) &&
             PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, 0), "self") == 0;
    Py_XDECREF(names);
    PyErr_Clear();
    return is;
}

PyObject *gt_py_frame_self(PyFrameObject *f)
{
    PyObject *o = NULL;
#if PY_VERSION_HEX >= 0x030C0000
    static PyObject *s_self;
    if (!s_self && !(s_self = PyUnicode_InternFromString("self"))) {
        PyErr_Clear();
        return NULL;
    }
    o = PyFrame_GetVar(f, s_self); /* a new reference: the frame holds one */
    if (!o) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(o);
#elif PY_VERSION_HEX >= 0x030B0000
    o = f->f_frame->localsplus[0];
    if (o && PyCell_Check(o)) /* a closure inside the method uses self */
        o = PyCell_GET(o);
#else
    o = f->f_localsplus[0]; /* NULL when a closure made it a cell */
#endif
    return o;
}

/* Append to *path the names from `outer` down to `mod` (see
 * gt_py_module_path): 1 found, 0 not, -1 out of memory. */
static int child_path(PyObject *outer, PyObject *mod, gt_strbuf *path)
{
    enum { MAX_DEPTH = 6, MAX_VISITS = 4096 };
    static PyObject *s_modules;
    if (!s_modules && !(s_modules = PyUnicode_InternFromString("_modules")))
        return -1;
    /* breadth first: (module, its path below outer) pairs, level by level */
    PyObject *level = Py_BuildValue("[(Os)]", outer, "");
    int found = 0, visits = 0;
    for (int depth = 0; level && !found && depth < MAX_DEPTH; depth++) {
        PyObject *next = PyList_New(0);
        for (Py_ssize_t i = 0; next && !found && i < PyList_GET_SIZE(level); i++) {
            PyObject *m = PyTuple_GET_ITEM(PyList_GET_ITEM(level, i), 0);
            PyObject *pre = PyTuple_GET_ITEM(PyList_GET_ITEM(level, i), 1);
            /* the instance's own dict: no __getattr__ of the user's runs */
            PyObject *mods = PyObject_GenericGetAttr(m, s_modules);
            if (!mods || !PyDict_Check(mods)) {
                PyErr_Clear();
                Py_XDECREF(mods);
                continue;
            }
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (!found && PyDict_Next(mods, &pos, &k, &v)) {
                if (v == Py_None || !PyUnicode_Check(k) || ++visits > MAX_VISITS)
                    continue;
                PyObject *sub = PyUnicode_GET_LENGTH(pre)
                                    ? PyUnicode_FromFormat("%U.%U", pre, k)
                                    : Py_NewRef(k);
                if (sub && v == mod) {
                    Py_ssize_t n = 0;
                    const char *u = PyUnicode_AsUTF8AndSize(sub, &n);
                    if (u) {
                        if (path->len)
                            gt_strbuf_adds(path, ".");
                        gt_strbuf_add(path, u, (size_t)n);
                        found = 1;
                    }
                } else if (sub) {
                    PyObject *pair = PyTuple_Pack(2, v, sub);
                    if (!pair || PyList_Append(next, pair) < 0)
                        Py_CLEAR(next);
                    Py_XDECREF(pair);
                }
                Py_XDECREF(sub);
                if (!next)
                    break;
            }
            Py_DECREF(mods);
        }
        Py_SETREF(level, next);
    }
    Py_XDECREF(level);
    PyErr_Clear();
    if (path->oom)
        return -1;
    return found;
}

int gt_py_module_path(PyObject *outer, const char *outer_path, PyObject *mod,
                      gt_strbuf *path)
{
    gt_strbuf_reset(path);
    if (outer && outer_path)
        gt_strbuf_adds(path, outer_path);
    int r = outer != NULL;
    if (outer && mod != outer && (r = child_path(outer, mod, path)) == 0)
        gt_strbuf_reset(path); /* not below it: mod starts its own paths */
    return r < 0 || path->oom ? -1 : r;
}
