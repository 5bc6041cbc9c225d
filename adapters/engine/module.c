/*
 * _gradtrace_engine: the engine adapter's CPython extension.
 *
 * What needs Python stays here: starting and stopping a capture over a
 * recorder handle, the backward-call and exception events (written to the
 * calling thread's lane, so they are ordered with its ops), variable names,
 * and Python stacks. A recorded op asks for its stack key without the GIL
 * (a hash of the thread's frames: code object and instruction); only a key
 * seen for the first time takes the GIL to describe its frames.
 *
 * One capture at a time (the engine's callback is process-wide): the stack
 * hook reaches the running gt_engine through one static pointer, set while a
 * capture is on.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define GT_FAST_FRAMES 1
#define Py_BUILD_CORE  1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

#include <gradtrace/format.h>

#include "fold.h"
#include "grow.h"
#include "gt_pyrun.h"
#include "protocol.h"
#include "gt_capture.h"
#include "gtmap.h"

#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TCACHE 1024

typedef struct {
    GT_PROTO_HEAD; /* r, on (capture running), active, failed, forked, data_orig */
    gt_fold *fold;
    int check_saved;       /* fingerprint saved tensors (saved_fingerprints) */
    PyObject *hidden;      /* tuple of path prefixes never put in stacks */
    PyObject *engine;      /* tuple of path prefixes of the engine (torch) */
    PyObject *getline;     /* linecache.getline */
    PyObject *callnames;   /* call names: their UTF-8 lives as long as the gt_engine */
    PyObject *tensor_type; /* torch.Tensor: looked up by bind_names, once */
    PyObject *module_type; /* torch.nn.Module: looked up at start, never
                            * replaced (stack_key reads it without the GIL) */
    PyObject *s_self;      /* "self", interned: as code objects hold it */
    pthread_mutex_t smu;
    gt_map skeys; /* stack hash -> key id */
    uint32_t next_key;
} gt_engine;

static gt_engine *g_engine; /* the gt_engine whose capture is on, see above */

static int64_t native_tid(void)
{
    return (int64_t)syscall(SYS_gettid);
}

/* ---- stacks ------------------------------------------------------------------ */

static int starts_with_any(PyObject *s, PyObject *prefixes)
{
    Py_ssize_t n = PyTuple_GET_SIZE(prefixes);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r =
            PyUnicode_Tailmatch(s, PyTuple_GET_ITEM(prefixes, i), 0, PY_SSIZE_T_MAX, -1);
        if (r > 0)
            return 1;
        if (r < 0)
            PyErr_Clear();
    }
    return 0;
}

/* 0 user, 1 engine, 2 hidden */
static int code_kind(gt_engine *e, PyCodeObject *co)
{
    if (starts_with_any(co->co_filename, e->hidden))
        return 2;
    if (starts_with_any(co->co_filename, e->engine))
        return 1;
    return 0;
}

typedef struct {
    unsigned char *buf;
    size_t len, cap;
    int oom; /* a put failed: the contents are incomplete */
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (n > SIZE_MAX - b->len || GT_ALLOC_GROW(b->buf, b->len + n, b->cap, 1024) != 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

/* The GT_CAP_STACK records of one stack being written (see gt_cap_stack). */
typedef struct {
    bytes b; /* the frames of the record being filled */
    uint32_t id, first, n;
    int lost; /* a record was not written: the stack is not either */
} stack_out;

/* Write the frames gathered so far as a record; more: others follow. */
static void stack_emit(stack_out *o, int more)
{
    gt_cap_stack *r = NULL;
    if (!o->lost && !o->b.oom)
        r = gt_capture_reserve(GT_CAP_STACK, sizeof *r + o->b.len);
    if (r) {
        r->h.flags = more ? GT_CAP_STACKF_MORE : 0;
        r->id = o->id;
        r->nframes = o->n;
        r->first = o->first;
        r->pad = 0;
        if (o->b.len)
            memcpy(r + 1, o->b.buf, o->b.len);
    } else
        o->lost = 1;
    o->first += o->n;
    o->n = 0;
    o->b.len = 0;
}

/* The length of s cut to at most max bytes, at a character's start. */
static size_t cut_len(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return n;
    while (max && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* Add one frame to the stack's records: a record full before it is
 * written first, flagged as followed by more. module: the path of the
 * frame's `self` (GT_CAP_FRAME_MODULE), or NULL. */
static void stack_frame(stack_out *o, int32_t line, int32_t kind, const char *file,
                        const char *func, const char *code, const char *module)
{
    static const char zero[4] = {0};
    size_t room = GT_CAP_STACK_BYTES - 17; /* line, kind, four NULs, padding */
    size_t lm = module ? cut_len(module, room / 4) : 0;
    if (module)
        kind |= GT_CAP_FRAME_MODULE;
    room -= lm;
    size_t lf = cut_len(file, room);
    size_t lfn = cut_len(func, room - lf);
    size_t lc = cut_len(code, room - lf - lfn);
    size_t size = (8 + lf + lfn + lc + 3 + (module ? lm + 1 : 0) + 3) & ~(size_t)3;
    if (o->n && o->b.len + size > GT_CAP_STACK_BYTES)
        stack_emit(o, 1);
    put(&o->b, &line, 4);
    put(&o->b, &kind, 4);
    put(&o->b, file, lf);
    put(&o->b, zero, 1);
    put(&o->b, func, lfn);
    put(&o->b, zero, 1);
    put(&o->b, code, lc);
    put(&o->b, zero, 1);
    if (module) {
        put(&o->b, module, lm);
        put(&o->b, zero, 1);
    }
    put(&o->b, zero, (4 - (o->b.len & 3)) & 3);
    o->n++;
}

/* The nn.Module that is `self` in frame f of code co (borrowed), or NULL
 * (GIL held); the frames stack_key tells apart by their module. */
static PyObject *frame_module(gt_engine *e, PyFrameObject *f, PyCodeObject *co)
{
    if (!e->module_type || !gt_py_code_self(co))
        return NULL;
    PyObject *o = gt_py_frame_self(f);
    return o && PyObject_TypeCheck(o, (PyTypeObject *)e->module_type) ? o : NULL;
}

/* Describe the stack from frame start outwards (GIL held), every frame of
 * it, into GT_CAP_STACK records of key id `id` on this thread's lane. */
static void describe_stack(gt_engine *e, uint32_t id, PyFrameObject *start)
{
    PyFrameObject **frames = NULL;
    size_t n = 0, cap = 0;
    PyFrameObject *f = (PyFrameObject *)Py_XNewRef(start);
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int kind = code_kind(e, co);
        Py_DECREF(co);
        PyFrameObject *back = PyFrame_GetBack(f);
        if (kind != 2 && GT_ALLOC_GROW(frames, n + 1, cap, 64) == 0)
            frames[n++] = f; /* out of memory: the outermost are dropped */
        else
            Py_DECREF(f);
        f = back;
    }
    stack_out o = {.id = id};
    /* the innermost module called so far, and its path (stacks.module) */
    PyObject *outer = NULL;
    gt_strbuf outer_path = {0}, mpath = {0};
    for (size_t i = n; i-- > 0;) {
        PyCodeObject *co = PyFrame_GetCode(frames[i]);
        PyObject *mod = frame_module(e, frames[i], co);
        const char *module = NULL;
        if (mod &&
            gt_py_module_path(outer, gt_strbuf_str(&outer_path), mod, &mpath) >= 0) {
            module = gt_strbuf_str(&mpath);
            gt_strbuf_reset(&outer_path);
            gt_strbuf_adds(&outer_path, module);
            outer = mod; /* borrowed: frames[j], j > i, hold it */
        }
        int32_t line = PyFrame_GetLineNumber(frames[i]);
        int32_t kind = code_kind(e, co);
        PyObject *qual = PyObject_GetAttrString((PyObject *)co, "co_qualname");
        if (!qual) {
            PyErr_Clear();
            qual = Py_NewRef(co->co_name);
        }
        PyObject *text = PyObject_CallFunction(e->getline, "Oi", co->co_filename, line);
        PyObject *stripped = text ? PyObject_CallMethod(text, "strip", NULL) : NULL;
        gt_strbuf cb = {0}, fb = {0}, qb = {0};
        const char *code = gt_py_text(stripped, &cb);
        const char *file = gt_py_text(co->co_filename, &fb);
        const char *func = gt_py_text(qual, &qb);
        PyErr_Clear();
        stack_frame(&o, line, kind, file ? file : "", func ? func : "", code ? code : "",
                    module);
        gt_strbuf_release(&cb);
        gt_strbuf_release(&fb);
        gt_strbuf_release(&qb);
        Py_XDECREF(stripped);
        Py_XDECREF(text);
        Py_DECREF(qual);
        Py_DECREF(co);
        Py_DECREF(frames[i]);
    }
    stack_emit(&o, 0);
    gt_strbuf_release(&outer_path);
    gt_strbuf_release(&mpath);
    free(o.b.buf);
    free(frames);
}

typedef struct {
    uint64_t hash[TCACHE];
    uint32_t id[TCACHE];
    uint64_t gen;
} tcache;

static _Thread_local tcache t_cache;
static uint64_t g_cache_gen;

static uint32_t stack_slow(gt_engine *e, uint64_t h)
{
    pthread_mutex_lock(&e->smu);
    uint64_t *v = gt_map_get(&e->skeys, h, 0, 0);
    uint32_t id = v ? (uint32_t)*v : 0;
    pthread_mutex_unlock(&e->smu);
    if (id)
        return id;
    /* never hold smu while waiting for the GIL */
    PyGILState_STATE st = PyGILState_Ensure();
    pthread_mutex_lock(&e->smu);
    id = ++e->next_key;
    gt_map_put(&e->skeys, h, 0, 0, id);
    pthread_mutex_unlock(&e->smu);
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyFrameObject *top = PyThreadState_GetFrame(PyThreadState_Get());
    describe_stack(e, id, top);
    Py_XDECREF(top);
    PyErr_Restore(et, ev, etb);
    PyGILState_Release(st);
    return id;
}

/* Stack key of the calling thread's Python stack (no GIL), 0 if none. */
static uint32_t stack_key(void)
{
    gt_engine *e = g_engine;
    if (!e)
        return 0;
    uint64_t h = 1469598103934665603ull;
#ifdef GT_FAST_FRAMES
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (!ts || !ts->cframe)
        return 0;
    int depth = 0;
    for (_PyInterpreterFrame *f = ts->cframe->current_frame; f; f = f->previous) {
        if (_PyFrame_IsIncomplete(f))
            continue;
        h = (h ^ (uintptr_t)f->f_code) * 1099511628211ull;
        h = (h ^ (uintptr_t)f->prev_instr) * 1099511628211ull;
        /* a method of an nn.Module: which module (each block its stack) */
        PyCodeObject *co = f->f_code;
        if (co->co_argcount > 0 && e->s_self && e->module_type &&
            PyTuple_GET_ITEM(co->co_localsplusnames, 0) == e->s_self) {
            PyObject *o = f->localsplus[0];
            if (o && PyCell_Check(o))
                o = PyCell_GET(o);
            if (o && PyObject_TypeCheck(o, (PyTypeObject *)e->module_type))
                h = (h ^ (uintptr_t)o) * 1099511628211ull;
        }
        depth++;
    }
    if (!depth)
        return 0;
#else
    /* no lock-free frame walk on this Python: hash under the GIL */
    PyGILState_STATE st = PyGILState_Ensure();
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    int depth = 0;
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        h = (h ^ (uintptr_t)co) * 1099511628211ull;
        h = (h ^ (uint64_t)PyFrame_GetLasti(f)) * 1099511628211ull;
        PyObject *m = frame_module(e, f, co);
        if (m)
            h = (h ^ (uintptr_t)m) * 1099511628211ull;
        Py_DECREF(co);
        PyFrameObject *b = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = b;
        depth++;
    }
    PyGILState_Release(st);
    if (!depth)
        return 0;
#endif
    /* the hit first, on its own: one __tls_get_addr for t_cache, not two */
    tcache *c = &t_cache;
    size_t i = (size_t)(h >> 7) & (TCACHE - 1);
    if (c->gen == g_cache_gen && c->hash[i] == h && c->id[i])
        return c->id[i];
    if (c->gen != g_cache_gen) {
        memset(c->hash, 0, sizeof c->hash);
        c->gen = g_cache_gen;
    }
    uint32_t id = stack_slow(e, h);
    c->hash[i] = h;
    c->id[i] = id;
    return id;
}

/* Stack key of the current point (GIL held). */
static uint32_t stack_here(void)
{
    return stack_key();
}

/* ---- text records ------------------------------------------------------------ */

/* A record of `type`: head's fields (hsize bytes, header included; its
 * flags kept, the rest of its header set here), then its text, s1 (n1
 * bytes) followed by s2 (n2 bytes): in one record when the text fits in
 * GT_CAP_MORE_BYTES, else in GT_CAP_MORE records after it (gt_cap_more). */
static void put_record(int type, const gt_cap_hdr *head, size_t hsize, const char *s1,
                       size_t n1, const char *s2, size_t n2)
{
    size_t total = n1 + n2;
    int more = total > GT_CAP_MORE_BYTES;
    gt_cap_hdr *r = gt_capture_reserve(type, hsize + (more ? 0 : total));
    if (!r)
        return;
    memcpy(r + 1, head + 1, hsize - sizeof *r);
    r->flags = (uint16_t)(head->flags | (more ? GT_CAP_TEXTF_MORE : 0));
    if (!more) {
        memcpy((char *)r + hsize, s1, n1);
        if (n2)
            memcpy((char *)r + hsize + n1, s2, n2);
        return;
    }
    for (size_t off = 0; off < total;) {
        size_t n = total - off < GT_CAP_MORE_BYTES ? total - off : GT_CAP_MORE_BYTES;
        gt_cap_more *m = gt_capture_reserve(GT_CAP_MORE, sizeof *m + n);
        if (!m)
            return; /* the consumer drops the record */
        m->h.flags = off + n < total ? GT_CAP_TEXTF_MORE : 0;
        m->off = off;
        m->n = n;
        char *p = (char *)(m + 1);
        size_t k = off < n1 ? (n1 - off < n ? n1 - off : n) : 0;
        if (k)
            memcpy(p, s1 + off, k);
        if (k < n)
            memcpy(p + k, s2 + (off + k - n1), n - k);
        off += n;
    }
}

/* ---- names ------------------------------------------------------------------- */

static _Thread_local uint32_t t_names_miss[256];

static int emit_names(PyObject *dict, const gt_cap_tensor *t, const gt_cap_tensor *base)
{
    int found = 0;
    if (!dict || !PyDict_Check(dict))
        return 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        gt_cap_tensor ct;
        if (!PyUnicode_Check(k) || gt_capture_pytensor(v, &ct, NULL) < 0)
            continue;
        int is_t = ct.impl == t->impl, is_b = base && ct.impl == base->impl;
        if (!is_t && !is_b)
            continue;
        Py_ssize_t len;
        const char *name = PyUnicode_AsUTF8AndSize(k, &len);
        if (!name) {
            PyErr_Clear();
            continue;
        }
        for (int i = 0; i < 2; i++) {
            const gt_cap_tensor *x = i ? base : t;
            if (i && !is_b)
                continue;
            gt_cap_name r = {.h.flags = GT_CAP_NAMEF_OP, .impl = x->impl, .vc = x->vc};
            put_record(GT_CAP_NAME, &r.h, sizeof r, name, (size_t)len + 1, NULL, 0);
        }
        found++;
    }
    return found;
}

/* Names bound to what an op wrote (or its base) in the user's frame, as the
 * dispatch adapter records them: locals, then globals. A stack whose user
 * frame named nothing is skipped from then on (an optimizer step writes
 * dozens of parameters from one line that names none of them). */
static void names_hook(uint32_t stack, const gt_cap_tensor *t, const gt_cap_tensor *base)
{
    gt_engine *e = g_engine;
    if (!e || t_names_miss[stack & 255] == stack)
        return;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int kind = code_kind(e, co);
        Py_DECREF(co);
        if (kind == 0)
            break;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    int found = 0;
    if (f) {
        PyObject *locals = PyFrame_GetLocals(f);
        PyObject *globals = PyFrame_GetGlobals(f);
        found = emit_names(locals, t, base);
        if (globals != locals)
            found += emit_names(globals, t, base);
        Py_XDECREF(locals);
        Py_XDECREF(globals);
        Py_DECREF(f);
    }
    if (!found)
        t_names_miss[stack & 255] = stack;
    PyErr_Clear();
    PyErr_Restore(et, ev, etb);
    PyGILState_Release(st);
}

/* ---- events ---------------------------------------------------------------- */

static void put_tensor_event(int type, int pos, PyObject *t)
{
    gt_cap_tensor ct;
    const void *gf = NULL;
    if (gt_capture_pytensor(t, &ct, &gf) < 0) {
        PyErr_Clear();
        return;
    }
    uint64_t node = gf ? gt_capture_node_id(gf) : 0;
    gt_cap_bwd_tensor *r = gt_capture_reserve(type, sizeof *r);
    if (!r)
        return;
    r->pos = pos;
    r->pad = 0;
    r->node = (const void *)(uintptr_t)node;
    r->t = ct;
}

/* A text record of stack `stack`: a then b, NUL-terminated, whole. */
static void put_text(int type, uint32_t stack, const char *a, const char *b)
{
    size_t la = strlen(a) + 1, lb = strlen(b) + 1;
    if (la > UINT32_MAX)
        return; /* alen would not hold it */
    gt_cap_text r = {.os_tid = native_tid(), .stack = stack, .alen = (uint32_t)la};
    put_record(type, &r.h, sizeof r, a, la, b, lb);
}

/* ---- gt_engine object ------------------------------------------------------------ */

static const gt_proto_ops eng_ops; /* below: the methods this adapter implements */

static int eng_init(PyObject *op, PyObject *args, PyObject *kw)
{
    gt_engine *self = (gt_engine *)op;
    static char *kwlist[] = {"path",      "hidden",      "engine",
                             "getline",   "overwrite",   "max_bytes",
                             "keep_last", "check_saved", NULL};
    const char *path;
    PyObject *hidden, *engine, *getline;
    int overwrite = 0;
    long long max_bytes = 0;
    unsigned int keep_last = 0;
    int check_saved = 0;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "sO!O!O|pLIp", kwlist, &path, &PyTuple_Type, &hidden, &PyTuple_Type,
            &engine, &getline, &overwrite, &max_bytes, &keep_last, &check_saved))
        return -1;
    self->check_saved = check_saved;
    gt_recorder_options o = {.overwrite = overwrite,
                             .max_bytes = max_bytes,
                             .batch_ms = 200,
                             .keep_last = keep_last,
                             .row_log = 1};
    self->hooks = &eng_ops;
    if (gt_proto_open((gt_proto *)self, path, &o) < 0)
        return -1;
    if (gt_fold_new(self->r, keep_last > 0, &self->fold) < 0) {
        gt_recorder_close(self->r);
        self->r = NULL;
        PyErr_NoMemory();
        return -1;
    }
    self->hidden = Py_NewRef(hidden);
    self->engine = Py_NewRef(engine);
    self->getline = Py_NewRef(getline);
    self->callnames = PyDict_New();
    if (!self->callnames)
        return -1;
    self->active = 1;
    pthread_mutex_init(&self->smu, NULL);
    return 0;
}

static PyObject *eng_start(PyObject *op, PyObject *Py_UNUSED(a))
{
    gt_engine *self = (gt_engine *)op;
    if (!self->r || self->on || g_engine) {
        PyErr_SetString(PyExc_RuntimeError, "gradtrace: an engine capture is already on");
        return NULL;
    }
    char err[256] = "";
    gt_capture_opts o = {.stack_key = stack_key,
                         .all_threads = 1,
                         .names = names_hook,
                         .check_saved = self->check_saved};
    memset(t_names_miss, 0, sizeof t_names_miss);
    /* what stacks need to tell the frames of one module from another's */
    if (!self->module_type)
        self->module_type = gt_py_type_attr("torch.nn", "Module");
    if (!self->s_self && !(self->s_self = PyUnicode_InternFromString("self")))
        PyErr_Clear();
    g_engine = self;
    g_cache_gen++;
    if (gt_capture_start(&o, err, sizeof err) < 0) {
        g_engine = NULL;
        PyErr_Format(PyExc_RuntimeError, "gradtrace: %s", err);
        return NULL;
    }
    if (gt_fold_start(self->fold, 50) < 0) {
        gt_capture_stop();
        gt_capture_release();
        g_engine = NULL;
        return PyErr_NoMemory();
    }
    self->on = 1;
    gt_capture_set_active(self->active); /* a window may start closed */
    Py_RETURN_NONE;
}

/* backward_begin(api, roots, retain_graph, create_graph, inputs) -> 1, while
 * recording (gt_proto_backward_begin); ValueError for an api it does not
 * know */
static PyObject *eng_backward_begin(gt_proto *p, const char *api, PyObject *roots,
                                    int retain, int create, PyObject *inputs)
{
    (void)p;
    /* static: the capture record keeps the pointer; the last three are the
     * calls torch.compile makes while compiling (gradtrace/_mode.py) */
    static const char *apis[] = {
        "Tensor.backward",
        "torch.autograd.backward",
        "torch.autograd.grad",
        GT_API_BY_COMPILER "Tensor.backward",
        GT_API_BY_COMPILER "torch.autograd.backward",
        GT_API_BY_COMPILER "torch.autograd.grad",
    };
    const char *sapi = NULL;
    for (size_t i = 0; i < sizeof apis / sizeof *apis; i++)
        if (!strcmp(api, apis[i]))
            sapi = apis[i];
    if (!sapi) {
        PyErr_SetString(PyExc_ValueError, "unknown backward api");
        return NULL;
    }
    uint32_t stack = stack_here();
    gt_cap_bwd *r = gt_capture_reserve(GT_CAP_BWD_BEGIN, sizeof *r);
    if (r) {
        r->api = sapi;
        r->os_tid = native_tid();
        r->stack = stack;
        r->retain_graph = (uint8_t)retain;
        r->create_graph = (uint8_t)create;
        r->ok = 0;
        r->pad = 0;
    }
    PyObject *seqs[2] = {roots, inputs};
    int types[2] = {GT_CAP_BWD_ROOT, GT_CAP_BWD_INPUT};
    for (int k = 0; k < 2; k++) {
        if (seqs[k] == Py_None)
            continue;
        PyObject *fast = PySequence_Fast(seqs[k], "roots must be a sequence");
        if (!fast) {
            PyErr_Clear();
            continue;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++)
            put_tensor_event(types[k], (int)i, PySequence_Fast_GET_ITEM(fast, i));
        Py_DECREF(fast);
    }
    gt_capture_check_saved(); /* `.data =` swaps since the forward saved them */
    gt_capture_backward_depth(1);
    gt_capture_commit();
    return PyLong_FromLong(1);
}

static void put_error(PyObject *exc, uint32_t stack)
{
    PyObject *tname = PyObject_GetAttrString((PyObject *)Py_TYPE(exc), "__name__");
    PyObject *msg = PyObject_Str(exc);
    gt_strbuf ab = {0}, bb = {0};
    const char *a = gt_py_text(tname, &ab);
    const char *b = gt_py_text(msg, &bb);
    PyErr_Clear();
    put_text(GT_CAP_ERROR, stack, a ? a : "Exception", b ? b : "");
    gt_strbuf_release(&ab);
    gt_strbuf_release(&bb);
    Py_XDECREF(tname);
    Py_XDECREF(msg);
}

/* The stack key of the innermost frame of exc's traceback (GIL held). */
static uint32_t exc_stack(PyObject *exc)
{
    PyObject *tb = PyException_GetTraceback(exc);
    if (!tb)
        return stack_here();
    PyObject *t = Py_NewRef(tb);
    for (;;) {
        PyObject *next = PyObject_GetAttrString(t, "tb_next");
        if (!next || next == Py_None) {
            Py_XDECREF(next);
            break;
        }
        Py_SETREF(t, next);
    }
    PyErr_Clear();
    PyFrameObject *fr = (PyFrameObject *)PyObject_GetAttrString(t, "tb_frame");
    uint32_t id = 0;
    if (fr && PyFrame_Check(fr) && g_engine) {
        /* a traceback's frame may be gone from the thread's stack: describe
         * it under a key of its own */
        pthread_mutex_lock(&g_engine->smu);
        id = ++g_engine->next_key;
        pthread_mutex_unlock(&g_engine->smu);
        describe_stack(g_engine, id, fr);
    }
    PyErr_Clear();
    Py_XDECREF(fr);
    Py_DECREF(t);
    Py_DECREF(tb);
    return id;
}

/* backward_end(id, exc_or_None): backward call id (0: not recorded) ended */
static void eng_backward_end(gt_proto *p, unsigned long long id, PyObject *exc)
{
    gt_engine *self = (gt_engine *)p;
    if (!self->on || !id)
        return;
    gt_capture_backward_depth(-1);
    if (exc != Py_None)
        put_error(exc, exc_stack(exc));
    gt_cap_bwd *r = gt_capture_reserve(GT_CAP_BWD_END, sizeof *r);
    if (r) {
        memset((char *)r + sizeof r->h, 0, sizeof *r - sizeof r->h);
        r->ok = exc == Py_None;
    }
    gt_capture_commit();
    if (exc != Py_None) {
        /* the error is in the file before the caller re-raises it */
        Py_BEGIN_ALLOW_THREADS gt_fold_drain(self->fold);
        gt_recorder_flush(self->r);
        Py_END_ALLOW_THREADS
    }
}

/* call_begin(name, args, region) -> stamp (0: not recorded): a call the
 * engine makes into user code (a custom autograd.Function's apply, a
 * checkpointed function), recorded as an op named `name` with the caller's
 * stack and the tensors of args as inputs; region: a non-reentrant
 * checkpoint, whose nodes save through hooks (see fold.c). */
static PyObject *eng_call_begin(gt_proto *p, PyObject *name, PyObject *inputs, int region)
{
    gt_engine *self = (gt_engine *)p;
    PyObject *kept = PyDict_SetDefault(self->callnames, name, name);
    const char *cname = kept ? PyUnicode_AsUTF8(kept) : NULL;
    if (!cname) {
        PyErr_Clear();
        return PyLong_FromLong(0);
    }
    uint32_t stack = stack_here();
    uint64_t stamp = gt_capture_call_begin(cname, stack, region, inputs);
    return PyLong_FromUnsignedLongLong(stamp);
}

/* call_end(stamp, result_or_None): the call returned result (None: it
 * raised); its outputs and the nodes they got are recorded now */
static void eng_call_end(gt_proto *p, unsigned long long stamp, PyObject *result)
{
    if (p->on)
        gt_capture_call_end(stamp, result == Py_None ? NULL : result);
}

/* error(exc): an exception that ends the run */
static void eng_error(gt_proto *p, PyObject *exc)
{
    if (!p->on)
        return;
    put_error(exc, exc_stack(exc));
    gt_capture_commit();
}

/* `name` is bound to tensor t in the user's frame */
static void put_name(PyObject *t, const char *name, Py_ssize_t len)
{
    gt_cap_tensor ct;
    if (gt_capture_pytensor(t, &ct, NULL) < 0 || (ct.flags & GT_CAPT_UNDEF))
        return;
    gt_cap_name r = {.impl = ct.impl, .vc = ct.vc};
    put_record(GT_CAP_NAME, &r.h, sizeof r, name, (size_t)len + 1, NULL, 0);
}

static int param_known(void *ctx, PyObject *t)
{
    (void)ctx;
    (void)t;
    return 1; /* the fold drops the names of tensors it does not know */
}

static void name_tensor(void *ctx, PyObject *t, const char *name)
{
    (void)ctx;
    put_name(t, name, (Py_ssize_t)strlen(name));
}

/* bind_names(frame): the names of the tensors and nn.Module parameters bound
 * in frame (gt_py_bind_names; None: nothing), as the dispatch adapter records them at
 * a backward call */
static PyObject *eng_bind_names(PyObject *op, PyObject *frame)
{
    gt_engine *self = (gt_engine *)op;
    if (!self->on || frame == Py_None)
        Py_RETURN_NONE;
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "bind_names: a frame or None");
        return NULL;
    }
    if (!self->tensor_type) {
        self->tensor_type = gt_py_type_attr("torch", "Tensor");
        if (!self->tensor_type)
            Py_RETURN_NONE;
        if (!self->module_type)
            self->module_type = gt_py_type_attr("torch.nn", "Module");
    }
    gt_py_namer n = {self->tensor_type, self->module_type, param_known, name_tensor,
                     NULL};
    gt_py_bind_names(&n, (PyFrameObject *)frame);
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* While capturing, describe tensor t in ct and commit what this thread
 * captured before (what the fold then does to t comes after it): 1, or 0
 * if not capturing or t is no defined tensor. */
static int tensor_now(gt_engine *self, PyObject *t, gt_cap_tensor *ct)
{
    if (!self->on || !self->fold || gt_capture_pytensor(t, ct, NULL) < 0 ||
        (ct->flags & GT_CAPT_UNDEF))
        return 0;
    gt_capture_commit();
    return 1;
}

static void eng_forget(gt_proto *p, PyObject *t)
{
    gt_engine *self = (gt_engine *)p;
    gt_cap_tensor ct;
    if (!tensor_now(self, t, &ct))
        return;
    const void *impl = ct.impl;
    gt_capture_forget(impl);
    Py_BEGIN_ALLOW_THREADS gt_fold_forget_tensor(self->fold, impl);
    Py_END_ALLOW_THREADS
}

/* observe_version(tensor): its counter was set to the value it has now. */
static void eng_observe_version(gt_proto *p, PyObject *t)
{
    gt_engine *self = (gt_engine *)p;
    gt_cap_tensor ct;
    if (!tensor_now(self, t, &ct))
        return;
    Py_BEGIN_ALLOW_THREADS gt_fold_observe_version(self->fold, ct.impl, ct.vc,
                                                   ct.version);
    Py_END_ALLOW_THREADS
}

typedef struct {
    gt_proto *p;
    PyObject *t, *value;
} data_assignment;

static int data_assign(void *ctx)
{
    data_assignment *a = ctx;
    return gt_proto_data_assign(a->p, a->t, a->value);
}

/* data_set(tensor, value) (gt_proto_data_set): the assignment moves the
 * tensor to other memory with no aten op and no version bump, which no
 * callback sees; when the tensor moved, a storage swap is recorded with the
 * assigning line's stack (see gt_capture_data_set). Returns the
 * assignment's 0 or -1 (its Python error). */
static int eng_data_set(gt_proto *p, PyObject *t, PyObject *value)
{
    data_assignment a = {p, t, value};
    int on = gt_proto_recording(p);
    uint32_t stack = on ? stack_here() : 0;
    return on ? gt_capture_data_set(t, stack, data_assign, &a) : data_assign(&a);
}

static void eng_set_active(gt_proto *p, int on)
{
    p->active = on;
    gt_capture_set_active(p->active && p->r && !gt_recorder_failed(p->r));
}

static void eng_flush(gt_proto *p)
{
    gt_engine *self = (gt_engine *)p;
    if (!self->on)
        return;
    gt_capture_commit();
    Py_BEGIN_ALLOW_THREADS gt_fold_drain(self->fold);
    gt_recorder_flush(self->r);
    Py_END_ALLOW_THREADS
}

static void stop_capture(gt_engine *self)
{
    if (!self->on)
        return;
    self->on = 0;
    gt_capture_stop();
    Py_BEGIN_ALLOW_THREADS gt_fold_free(
        self->fold); /* stops its thread, drains the lanes */
    Py_END_ALLOW_THREADS self->fold = NULL;
    gt_capture_release();
    g_engine = NULL;
}

/* close, first part (gt_proto_close): stop capturing (the fold drains what
 * was captured) and write the run's end. A failure before it is the one
 * close reports. Returns 0. */
static int eng_close_begin(gt_proto *p, int status, int code, int sig)
{
    gt_engine *self = (gt_engine *)p;
    stop_capture(self);
    gt_fold_free(self->fold);
    self->fold = NULL;
    if (gt_recorder_failed(p->r))
        p->failed = 1;
    PyThreadState *ts = PyEval_SaveThread();
    gt_run_end(p->r, status, code, sig);
    PyEval_RestoreThread(ts);
    return 0;
}

/* forked(): in a forked child. The parent's fold thread may have held the
 * handle's mutex at fork(): the handle is never touched here (its memory
 * stays with the child). */
static void eng_forked(gt_proto *p)
{
    gt_engine *self = (gt_engine *)p;
    self->on = 0;
    gt_capture_forked();
    gt_fold_forget(self->fold);
    self->fold = NULL;
    g_engine = NULL;
}

/* What the protocol (gt_proto_*) leaves to this adapter. */
static const gt_proto_ops eng_ops = {
    .backward_begin = eng_backward_begin,
    .backward_end = eng_backward_end,
    .call_begin = eng_call_begin,
    .call_end = eng_call_end,
    .error = eng_error,
    .flush = eng_flush,
    .forget = eng_forget,
    .observe_version = eng_observe_version,
    .set_active = eng_set_active,
    .data_set = eng_data_set,
    .close_begin = eng_close_begin,
    .forked = eng_forked,
};

static PyObject *eng_get_errmsg(PyObject *op, void *c)
{
    (void)c;
    gt_engine *self = (gt_engine *)op;
    return PyUnicode_FromString(self->r ? gt_recorder_errmsg(self->r) : "");
}

static void eng_dealloc(PyObject *op)
{
    gt_engine *self = (gt_engine *)op;
    PyTypeObject *tp = Py_TYPE(op);
    if (self->r && !self->forked) {
        stop_capture(self);
        gt_fold_free(self->fold);
        gt_recorder_close(self->r);
    }
    if (self->hidden)
        pthread_mutex_destroy(&self->smu);
    gt_map_clear(&self->skeys);
    Py_XDECREF(self->hidden);
    Py_XDECREF(self->engine);
    Py_XDECREF(self->getline);
    Py_XDECREF(self->callnames);
    Py_XDECREF(self->data_orig);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->module_type);
    Py_XDECREF(self->s_self);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef eng_methods[] = {
    GT_PROTO_METHODS,
    {"start", eng_start, METH_NOARGS, "start capturing"},
    {"bind_names", eng_bind_names, METH_O, "the names bound in a frame's locals"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef eng_getset[] = {
    GT_PROTO_GETSET,
    {"errmsg", eng_get_errmsg, NULL, "the recorder's last message", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot eng_slots[] = {
    {Py_tp_init, eng_init},         {Py_tp_dealloc, eng_dealloc},
    {Py_tp_methods, eng_methods},   {Py_tp_getset, eng_getset},
    {Py_tp_new, PyType_GenericNew}, {0, NULL},
};

static PyType_Spec eng_spec = {
    .name = "_gradtrace_engine.Engine",
    .basicsize = sizeof(gt_engine),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = eng_slots,
};

/* selftest(torch_version) -> None, or the reason it failed */
static PyObject *mod_selftest(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *v = PyUnicode_AsUTF8(arg);
    if (!v)
        return NULL;
    char err[256] = "";
    if (gt_capture_selftest(v, err, sizeof err) < 0)
        return PyUnicode_FromString(err);
    Py_RETURN_NONE;
}

/* wrapper_check(wrapper, inner) -> bool: see gt_capture_wrapper_check */
static PyObject *mod_wrapper_check(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *w, *in;
    if (!PyArg_ParseTuple(args, "OO", &w, &in))
        return NULL;
    return PyBool_FromLong(gt_capture_wrapper_check(w, in) == 0);
}

/* schema_writes(schema) -> str: see gt_capture_schema_writes (for tests) */
static PyObject *mod_schema_writes(PyObject *m, PyObject *arg)
{
    (void)m;
    Py_ssize_t len;
    const char *schema = PyUnicode_AsUTF8AndSize(arg, &len);
    if (!schema)
        return NULL;
    /* an argument takes more than two bytes of its schema */
    char *out = malloc((size_t)len + 1);
    if (!out)
        return PyErr_NoMemory();
    int n = gt_capture_schema_writes(schema, out, (size_t)len + 1);
    PyObject *r = n < 0 ? NULL : PyUnicode_FromStringAndSize(out, n);
    free(out);
    if (n < 0)
        PyErr_Format(PyExc_ValueError, "not a function schema: %s", schema);
    return r;
}

static PyObject *mod_built_for(PyObject *m, PyObject *Py_UNUSED(a))
{
    (void)m;
    return PyUnicode_FromString(gt_capture_built_for());
}

static int mod_exec(PyObject *m)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, &eng_spec, NULL);
    if (!tp)
        return -1;
    int rc = PyModule_AddObjectRef(m, "Engine", tp);
    Py_DECREF(tp);
    if (rc < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "RUN_OK", GT_RUN_OK) < 0 ||
        PyModule_AddIntConstant(m, "RUN_EXCEPTION", GT_RUN_EXCEPTION) < 0 ||
        PyModule_AddIntConstant(m, "RUN_SIGNAL", GT_RUN_SIGNAL) < 0)
        return -1;
    return 0;
}

static PyMethodDef mod_methods[] = {
    {"selftest", mod_selftest, METH_O, "check the shim against the running torch"},
    {"built_for", mod_built_for, METH_NOARGS, "torch version the shim was built for"},
    {"schema_writes", mod_schema_writes, METH_O,
     "the arguments an operator of this schema writes, as the shim reads it (tests)"},
    {"wrapper_check", mod_wrapper_check, METH_VARARGS,
     "check reading a torch.func wrapper's tensor (and turn it on)"},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot mod_slots[] = {
    {Py_mod_exec, mod_exec},
    {0, NULL},
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_gradtrace_engine",
    .m_doc = "gradtrace's engine adapter (at::RecordFunction capture)",
    .m_methods = mod_methods,
    .m_slots = mod_slots,
};

PyMODINIT_FUNC PyInit__gradtrace_engine(void)
{
    return PyModuleDef_Init(&mod_def);
}
