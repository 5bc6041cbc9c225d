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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include <gradtrace/kwrites.h>
#include <gradtrace/recorder.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "gt_pyrun.h"
#include "gtmap.h"

/* Save and restore the pending exception around bookkeeping (3.11 API). */
typedef struct {
    PyObject *type, *value, *tb;
} excsave;

static excsave exc_save(void)
{
    excsave e;
    PyErr_Fetch(&e.type, &e.value, &e.tb);
    return e;
}

static void exc_restore(excsave e)
{
    PyErr_Restore(e.type, e.value, e.tb);
}

/* Nested lists deeper than this in an op's arguments are not searched for
 * tensors (no aten schema nests more than two). */
#define MAX_NESTING 32

typedef struct gt_vc {
    gt_id id;          /* version counter id: the first tensor seen with it */
    int64_t expected;  /* the value we believe the counter has */
    int64_t bumped_at; /* seq of the op that last predicted a bump on it */
    int refs;
} gt_vc;

struct gt_tensor_ent;

typedef struct gt_storage_ent {
    gt_id id;
    uint64_t key;
    int64_t impl; /* its StorageImpl's address (UntypedStorage._cdata), 0 if unknown */
    int refs;
    int64_t nbytes; /* its row, to write it again after a window cut */
    gt_id device;
    uint64_t epoch;                    /* gt_recorder_cuts when its row was written */
    struct gt_tensor_ent *head, *tail; /* live recorded tensors on it, oldest first */
} gt_storage_ent;

typedef struct gt_tensor_ent {
    PyObject_HEAD struct gt_pyrec *rec; /* NULL once forgotten */
    PyObject *wr;                       /* weakref to the tensor, with this as callback */
    uintptr_t addr; /* the tensor object's address: key in rec->tensors */
    gt_id id;
    gt_vc *vc;
    gt_storage_ent *st;
    struct gt_tensor_ent *st_prev, *st_next;
    gt_id dtype;
    int64_t created_by;
    int64_t last_out; /* seq of the last op that output or mutated it */
    gt_id alias_of;   /* for the tensors row, written later for outputs */
    int shares;
    int written;     /* its tensors row is written */
    uint64_t wepoch; /* gt_recorder_cuts when it was made or its row written */
    int saved;       /* a node saved it: its storage is watched */
    int itemsize;    /* bytes per element when first seen */
    int64_t seen;    /* event seq when it was last seen on its storage */
    int64_t offset;
    int ndim;
    int64_t *geom; /* ndim sizes then ndim strides */
} gt_tensor_ent;

/* How the version counters of an op's written arguments move. */
enum {
    BUMP_AFTER = 0,   /* PyTorch's ADInplaceOrView kernel bumps after we return */
    BUMP_FOREACH = 1, /* a _foreach_ op: its per-tensor ops bump only when no
                       * dispatch mode runs, so the recorder bumps each written
                       * tensor whose version did not move (at the next op) */
    BUMP_NONE = 2,    /* no ADInplaceOrView kernel (fused kernels): PyTorch does
                       * not bump; whatever moved is observed at the next op */
};

typedef struct {
    gt_id name;
    unsigned char *wpos; /* wpos[i]: schema argument i is written (1), or
                          * written though the schema does not say so (2) */
    Py_ssize_t nwpos;
    int bump;            /* BUMP_* */
    int kw;              /* BUMP_NONE writes that moved no counter are kernel
                          * writes (include/gradtrace/kwrites.h) */
    int when;            /* kw: the bool argument the unmarked writes need, or -1 */
    PyObject *when_name; /* its name (for kwargs), or NULL */
    PyObject *wnames;    /* tuple of written argument names (for kwargs) */
    int view_arg;        /* schema position an output aliases, -1 for none */
    int is_detach;       /* aten::detach: maybe a shallow copy (.data) */
    int is_query;        /* a size/stride/layout query (is_metadata_query) */
    PyObject *call;      /* what func(*args, **kwargs) calls: its C++ op, or func */
} gt_opmeta;

typedef struct {
    gt_id name;
    int is_acc;      /* AccumulateGrad */
    int is_custom;   /* a custom autograd.Function's node (saved_tensors) */
    PyObject *saved; /* tuple of (attribute, slot) */
    int pruned;      /* saved has lost the slots that hold no tensors */
} gt_nodetype;

/* A tensor argument or output of an op, found by collect(). */
typedef struct {
    PyObject *t;      /* borrowed from the op's arguments or result */
    gt_tensor_ent *e; /* its entry (borrowed), or NULL when untracked */
    int64_t ver;      /* its version before the op */
    int written;      /* the schema marks it as written */
    int schema_pos;   /* schema position of its argument, -1 for kwargs */
} argref;

typedef struct {
    argref *v;
    size_t n, cap;
} argvec;

/* Scratch space of one op in flight: taken from the recorder's spare list on
 * entry and given back on exit, so that ops of any size (and ops of other
 * threads while the GIL is released inside one) never share it and a steady
 * run allocates nothing. */
typedef struct gt_scratch {
    argvec in, out;
    PyFrameObject **frames; /* capture_stack_from's frames */
    size_t frames_cap;
    struct gt_scratch *next;
} gt_scratch;

/* A torch.utils.checkpoint(use_reentrant=False) call in progress: the nodes
 * made inside it save through saved-tensor hooks (reading them would run the
 * recomputation), and unpacking any of them in backward first unpacks the
 * call's inputs, with PyTorch's version check. */
typedef struct {
    int64_t seq;       /* the call's ops row */
    size_t n;          /* its tensor inputs */
    gt_id *tensors;    /* their tensors.id (0: not recorded) */
    int64_t *versions; /* their versions at the call */
    int64_t *nbytes;
} gt_region;

typedef struct gt_pyrec {
    PyObject_HEAD gt_recorder *r;
    int active;      /* recording ops now */
    int failed;      /* write failure: recording stopped for good */
    int forked;      /* this is a forked child: never touch the handle */
    int busy;        /* ops in flight (inside dispatch, any thread) */
    int in_backward; /* depth of recorded backward calls */
    int has_seqnr;   /* nodes have _sequence_nr() */
    int has_untyped; /* tensors have untyped_storage() */
    int64_t errors;  /* bookkeeping errors cleared */
    PyObject *tensor_type;
    PyObject *op_meta_fn;   /* func -> (name, written positions, wnames, view_arg,
                             * call, bump) */
    PyObject *increment;    /* torch._C._increment_version, or None */
    PyObject *saved_fn;     /* node type -> tuple of (attr, slot) */
    PyObject *grad_enabled; /* torch.is_grad_enabled */
    PyObject *via_autograd; /* () -> True when the op came through autograd */
    PyObject *getline;      /* linecache.getline */
    PyObject *hidden;       /* tuple of path prefixes never put in stacks */
    PyObject *engine;       /* tuple of path prefixes of the engine (torch) */
    PyObject *key;          /* key of our node id in grad_fn.metadata */
    PyObject *keep;         /* list: objects whose address keys a cache */
    PyObject *retry;        /* list of (node, id, op, pairs) to read again */
    PyObject *module_type;  /* torch.nn.Module, or NULL (looked up once) */
    PyObject *current_node; /* torch._C._current_autograd_node or NULL */
    PyObject *last_exec;    /* the node the last backward op ran under */
    int looked_up;          /* module_type and current_node looked up */
    gt_id cur_backward;     /* the innermost recorded backward call */
    gt_id last_exec_id;     /* its last node_execs row's node */
    gt_map byid; /* tensor id -> gt_tensor_ent* (the entries alive, borrowed) */
    gt_map tensors, storages, ops, stacks, frames, codes, dtypes, threads, types;
    gt_map modpaths;         /* (outer module, its modpath, module) -> modpath* */
    struct modpath *modroot; /* "": a module under no other (not cached) */
    uint32_t next_modpath;
    gt_id next_tensor, next_storage, next_node;
    PyFrameObject *last_site, *last_user; /* capture_stack's last answer, held
                                           * only while the frame surely runs */
    uintptr_t last_site_addr;             /* the last op's site, never dereferenced */
    uintptr_t names_miss; /* user frame whose names matched nothing (address
                           * only: holding it would keep its locals alive) */
    int names_miss_lasti;
    int last_lasti;
    gt_id last_stack;
    PyObject **pending; /* owned: outputs and mutated args of the last op */
    Py_ssize_t npending, cappending;
    int64_t pending_seq;
    gt_id pending_thread;
    int flushing;        /* inside flush_pending */
    PyObject *unbumped;  /* list of (tensor, version before) of BUMP_FOREACH ops */
    gt_map done;         /* (node, output_nr) written by the current flush */
    uint64_t *done_keys; /* their keys, to take them out of `done` after it */
    size_t ndone_keys, capdone_keys;
    gt_scratch *spare;  /* scratch of no op in flight */
    int calls;          /* call_begin without call_end yet */
    int check_saved;    /* fingerprint saved tensors (saved_fingerprints) */
    PyObject *fp;       /* dict: node id -> list of (attr, index, saved seq) */
    int quiet;          /* our own reads run ops (unpacking a saved output):
                         * they pass through unrecorded */
    gt_region *regions; /* checkpoint regions, innermost last */
    size_t nregions, capregions;
    /* torch.func: the ops inside a transform reach the mode unwrapped, while
     * the graph and its saved tensors hold functorch's wrappers of them */
    PyObject *ft_wrapped; /* torch._C._functorch.is_functorch_wrapped_tensor */
    PyObject *ft_unwrap;  /* get_unwrapped, or NULL */
    int ft_looked;        /* the two looked up */
    int ft_seen;          /* a transform ran: unwrap saved tensors and names */
    int ft_now;           /* the op in flight writes under a transform */
    int stack_func;       /* the last stack captured runs under a transform */
    PyObject *data_orig;  /* TensorBase's `data` descriptor (watch_data) */
} gt_pyrec;

typedef struct {
    PyTypeObject *recorder_type;
    PyTypeObject *ent_type;
    PyObject *s_version, *s_grad_fn, *s_metadata, *s_next_functions, *s_output_nr,
        *s_data_ptr, *s_storage_offset, *s_shape, *s_stride, *s_dtype, *s_requires_grad,
        *s_is_leaf, *s_is_view, *s_base, *s_variable, *s_sequence_nr, *s_untyped_storage,
        *s_storage, *s_cdata, *s_nbytes, *s_device, *s_element_size, *s_strip,
        *s_get_device, *s_functorch_dir, *s_functorch_src;
} modstate;

static modstate *state_of_type(PyTypeObject *tp)
{
    return (modstate *)PyType_GetModuleState(tp);
}

#define STATE(self) state_of_type(Py_TYPE(self))

/* ---- small helpers ------------------------------------------------------ */

/* Clear a bookkeeping error: it must never reach the recorded program. */
static void swallow(gt_pyrec *self)
{
    if (PyErr_Occurred()) {
        PyErr_Clear();
        self->errors++;
    }
}

/* Check a recorder result; on a write failure stop recording with one
 * warning. Returns rc. */
static int ck(gt_pyrec *self, int rc)
{
    if (rc < 0 && !self->failed && self->r && gt_recorder_failed(self->r)) {
        self->failed = 1;
        self->active = 0;
        /* library messages carry no program name: it is added here, once */
        PySys_WriteStderr("gradtrace: %s\n", gt_recorder_errmsg(self->r));
    }
    return rc;
}

static int recording(gt_pyrec *self)
{
    return self->r && self->active && !self->failed && !self->forked;
}

static int64_t long_attr(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self)
{
    PyObject *v = PyObject_GetAttr(o, name);
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

static int64_t long_call(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self)
{
    PyObject *v = PyObject_CallMethodNoArgs(o, name);
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

static int truth_attr(PyObject *o, PyObject *name, gt_pyrec *self)
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

static gt_id intern_str(gt_pyrec *self, const char *s)
{
    gt_id id = 0;
    if (ck(self, gt_intern_string(self->r, s, strlen(s), &id)) < 0)
        return 0;
    return id;
}

static int keep(gt_pyrec *self, PyObject *o)
{
    return PyList_Append(self->keep, o);
}

static gt_id current_thread(gt_pyrec *self)
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

/* ---- torch.func wrappers ------------------------------------------------ */

/* Look up, once, functorch's helpers (torch._C._functorch, 1.13 too). */
static void ft_lookup(gt_pyrec *self)
{
    if (self->ft_looked)
        return;
    self->ft_looked = 1;
    /* (an attribute of torch._C; 1.13 does not register it as a module) */
    PyObject *c = PyImport_ImportModule("torch._C");
    PyObject *m = c ? PyObject_GetAttrString(c, "_functorch") : NULL;
    Py_XDECREF(c);
    if (m) {
        self->ft_wrapped = PyObject_GetAttrString(m, "is_functorch_wrapped_tensor");
        self->ft_unwrap = PyObject_GetAttrString(m, "get_unwrapped");
        Py_DECREF(m);
    }
    PyErr_Clear();
    if (!self->ft_wrapped || !PyCallable_Check(self->ft_wrapped) || !self->ft_unwrap ||
        !PyCallable_Check(self->ft_unwrap)) {
        Py_CLEAR(self->ft_wrapped);
        Py_CLEAR(self->ft_unwrap);
    }
}

/* Called under a torch.func transform (a frame of torch/_functorch/ is on
 * the stack): can its wrappers be looked through? */
static int ft_active(gt_pyrec *self)
{
    ft_lookup(self);
    if (!self->ft_wrapped)
        return 0;
    self->ft_seen = 1;
    return 1;
}

/* The tensor inside torch.func's wrappers of t (GradTrackingTensor,
 * BatchedTensor, nested as the transforms are): a new reference, or NULL
 * when t wraps nothing. That inner tensor is the one the mode saw in the
 * ops, with the version counter the recorder follows. */
static PyObject *ft_inner(gt_pyrec *self, PyObject *t)
{
    ft_lookup(self);
    if (!self->ft_wrapped)
        return NULL;
    PyObject *cur = NULL;
    for (int depth = 0; depth < MAX_NESTING; depth++) {
        PyObject *x = cur ? cur : t;
        PyObject *r = PyObject_CallOneArg(self->ft_wrapped, x);
        int wrapped = r == Py_True;
        Py_XDECREF(r);
        if (!wrapped)
            break;
        PyObject *in = PyObject_CallOneArg(self->ft_unwrap, x);
        if (!in || in == x ||
            !PyObject_TypeCheck(in, (PyTypeObject *)self->tensor_type)) {
            Py_XDECREF(in);
            break;
        }
        Py_XSETREF(cur, in);
    }
    swallow(self);
    if (cur)
        self->ft_seen = 1;
    return cur;
}

/* ---- scratch ------------------------------------------------------------- */

/* A scratch area for one op (or one stack capture): a spare one, else a new
 * one. Returns NULL when out of memory. */
static gt_scratch *scratch_take(gt_pyrec *self)
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
static void scratch_give(gt_pyrec *self, gt_scratch *sc)
{
    if (!sc)
        return;
    sc->next = self->spare;
    self->spare = sc;
}

static void scratch_free_all(gt_pyrec *self)
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

/* Make room for one more element in an array of `size`-byte elements.
 * Returns 0, or -1 when out of memory (array unchanged). */
static int reserve(void **v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *nv = realloc(*v, size * ncap);
    if (!nv)
        return -1;
    *v = nv;
    *cap = ncap;
    return 0;
}

static int argvec_push(argvec *a, argref r)
{
    if (reserve((void **)&a->v, a->n, &a->cap, sizeof *a->v) < 0)
        return -1;
    a->v[a->n++] = r;
    return 0;
}

/* ---- stacks -------------------------------------------------------------- */

enum { CODE_USER = 1, CODE_ENGINE = 2, CODE_HIDDEN = 3 };

static int starts_with_any(PyObject *s, PyObject *prefixes)
{
    Py_ssize_t n = PyTuple_GET_SIZE(prefixes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyTuple_GET_ITEM(prefixes, i);
        Py_ssize_t r = PyUnicode_Tailmatch(s, p, 0, PY_SSIZE_T_MAX, -1);
        if (r > 0)
            return 1;
        if (r < 0)
            PyErr_Clear();
    }
    return 0;
}

/* CODE_FUNC flags the code of torch.func's transforms (torch/_functorch/;
 * functorch/_src/ in 1.13): a user frame they call runs under a transform.
 * CODE_SELF: the code's first argument is `self` (a method: its frame may
 * run an nn.Module's code, stacks.module). */
enum { CODE_KIND = 0xf, CODE_FUNC = 0x10, CODE_SELF = 0x20 };

/* The CODE_* kind of co, with CODE_FUNC (cached per code object). */
static int code_flags(gt_pyrec *self, PyCodeObject *co)
{
    uint64_t *v = gt_map_get(&self->codes, (uintptr_t)co, 0, 0);
    if (v)
        return (int)*v;
    PyObject *file = co->co_filename;
    int kind = CODE_USER;
    if (starts_with_any(file, self->hidden))
        kind = CODE_HIDDEN;
    else if (starts_with_any(file, self->engine))
        kind = CODE_ENGINE;
    if (kind != CODE_HIDDEN) {
        /* torch.func's (2.x) or the functorch package's (1.13) transforms */
        modstate *ms = STATE(self);
        PyObject *dirs[] = {ms->s_functorch_dir, ms->s_functorch_src};
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
            Py_ssize_t at = PyUnicode_Find(file, dirs[i], 0, PY_SSIZE_T_MAX, 1);
            if (at >= 0)
                /* (1.13's package lies outside torch/: engine code too) */
                kind = CODE_ENGINE | CODE_FUNC;
            else if (at == -2)
                PyErr_Clear();
        }
    }
    if (kind != CODE_HIDDEN && gt_py_code_self(co))
        kind |= CODE_SELF;
    if (keep(self, (PyObject *)co) < 0 ||
        gt_map_put(&self->codes, (uintptr_t)co, 0, 0, (uint64_t)kind) < 0)
        swallow(self);
    return kind;
}

static int code_kind(gt_pyrec *self, PyCodeObject *co)
{
    return code_flags(self, co) & CODE_KIND;
}

static gt_id intern_frame(gt_pyrec *self, PyCodeObject *co, int line)
{
    uint64_t *v = gt_map_get(&self->frames, (uintptr_t)co, (uint64_t)line, 0);
    if (v)
        return (gt_id)*v;
    gt_id id = 0;
    gt_strbuf fb = {0}, qb = {0}, cb = {0};
    const char *file = gt_py_text(co->co_filename, &fb);
    PyObject *qual = PyObject_GetAttrString((PyObject *)co, "co_qualname");
    if (!qual) {
        PyErr_Clear();
        qual = Py_NewRef(co->co_name);
    }
    const char *func = gt_py_text(qual, &qb);
    PyObject *text = PyObject_CallFunction(self->getline, "Oi", co->co_filename, line);
    PyObject *stripped = NULL;
    if (text)
        stripped = PyObject_CallMethodNoArgs(text, STATE(self)->s_strip);
    const char *code = NULL;
    if (stripped && PyUnicode_Check(stripped) && PyUnicode_GET_LENGTH(stripped) > 0)
        code = gt_py_text(stripped, &cb);
    if (!file || !func) {
        swallow(self);
        goto out;
    }
    swallow(self);
    if (ck(self, gt_intern_frame(self->r, file, line, func, code, &id)) < 0) {
        id = 0;
        goto out;
    }
    if (gt_map_put(&self->frames, (uintptr_t)co, (uint64_t)line, 0, (uint64_t)id) < 0)
        PyErr_NoMemory(), swallow(self);
out:
    gt_strbuf_release(&fb);
    gt_strbuf_release(&qb);
    gt_strbuf_release(&cb);
    Py_XDECREF(stripped);
    Py_XDECREF(text);
    Py_XDECREF(qual);
    return id;
}

/* The module path (stacks.module) of a frame whose `self` is module `mod`,
 * called under module `outer` whose path is `op` (NULL, NULL: under none):
 * gt_py_module_path's answer. A path found below outer is cached by the
 * three's addresses for the recorder's life (a module's address is taken
 * as its identity while it lives; one made at the address of a dead one
 * with another place in its model would get the dead one's path); one not
 * found (a module being built, not yet in its parent) is looked for again
 * next time, and is the root's, "". n numbers the paths for the stacks
 * map's key. NULL when out of memory. */
typedef struct modpath {
    uint32_t n;
    char path[]; /* NUL-terminated */
} modpath;

static void lookup_torch(gt_pyrec *self);

static const modpath *module_path(gt_pyrec *self, PyObject *outer, const modpath *op,
                                  PyObject *mod)
{
    uint64_t *v =
        gt_map_get(&self->modpaths, (uintptr_t)outer, (uintptr_t)op, (uintptr_t)mod);
    if (v)
        return (const modpath *)(uintptr_t)*v;
    if (!self->modroot && (self->modroot = malloc(sizeof(modpath) + 1)) != NULL) {
        self->modroot->n = ++self->next_modpath;
        self->modroot->path[0] = 0;
    }
    gt_strbuf b = {0};
    modpath *m = NULL;
    int found = gt_py_module_path(outer, op ? op->path : NULL, mod, &b);
    if (found == 0)
        m = self->modroot;
    else if (found > 0) {
        const char *s = gt_strbuf_str(&b);
        size_t len = strlen(s);
        if ((m = malloc(sizeof *m + len + 1)) != NULL) {
            m->n = ++self->next_modpath;
            memcpy(m->path, s, len + 1);
            if (gt_map_put(&self->modpaths, (uintptr_t)outer, (uintptr_t)op,
                           (uintptr_t)mod, (uint64_t)(uintptr_t)m) < 0) {
                free(m);
                m = NULL;
            }
        }
    }
    gt_strbuf_release(&b);
    return m;
}

/* Intern the current Python stack (without gradtrace's and runpy's frames).
 * Returns the stack id (0 if none); *user gets a new reference to the
 * innermost user frame if user is not NULL. */
static gt_id capture_stack_from(gt_pyrec *self, PyFrameObject *start,
                                PyFrameObject **user /* OUT */)
{
    if (user)
        *user = NULL;
    gt_scratch *sc = scratch_take(self);
    if (!sc)
        return 0;
    PyFrameObject **frames;
    int n = 0;
    PyFrameObject *f = start;
    Py_XINCREF(f);
    self->stack_func = 0;
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int flags = code_flags(self, co);
        int kind = flags & CODE_KIND;
        if (flags & CODE_FUNC)
            self->stack_func = 1;
        Py_DECREF(co);
        PyFrameObject *back = PyFrame_GetBack(f);
        if (kind != CODE_HIDDEN && reserve((void **)&sc->frames, (size_t)n,
                                           &sc->frames_cap, sizeof *sc->frames) == 0)
            sc->frames[n++] = f; /* owned; out of memory: outermost dropped */
        else
            Py_DECREF(f);
        f = back;
    }
    frames = sc->frames;
    gt_id parent = 0;
    uint64_t ufr = 0;
    int user_index = -1;
    lookup_torch(self);
    PyObject *outer = NULL;    /* the innermost module called so far */
    const modpath *omp = NULL; /* its path */
    for (int i = n - 1; i >= 0; i--) {
        PyCodeObject *co = PyFrame_GetCode(frames[i]);
        int lasti = PyFrame_GetLasti(frames[i]);
        int flags = code_flags(self, co);
        int kind = flags & CODE_KIND;
        if (kind == CODE_USER)
            user_index = i;
        const modpath *mp = NULL; /* the frame's self's, if a module */
        if ((flags & CODE_SELF) && self->module_type) {
            PyObject *o = gt_py_frame_self(frames[i]);
            if (o && PyObject_TypeCheck(o, (PyTypeObject *)self->module_type) &&
                (mp = o == outer ? omp : module_path(self, outer, omp, o)) != NULL) {
                outer = o; /* borrowed: frames[j], j >= i, hold it */
                omp = mp;
            }
        }
        uint64_t k3 = (uint64_t)(uint32_t)lasti | (uint64_t)(mp ? mp->n : 0) << 32;
        uint64_t *v = gt_map_get(&self->stacks, (uint64_t)parent, (uintptr_t)co, k3);
        if (v) {
            parent = (gt_id)(*v & 0xffffffffu);
            ufr = *v >> 32;
            Py_DECREF(co);
            continue;
        }
        int line = PyFrame_GetLineNumber(frames[i]);
        gt_id fr = intern_frame(self, co, line);
        if (kind == CODE_USER)
            ufr = (uint64_t)fr;
        gt_id sid = 0;
        if (!fr || ck(self, gt_intern_stack_in(self->r, parent, fr, (gt_id)ufr,
                                               mp ? mp->path : NULL, &sid)) < 0) {
            Py_DECREF(co);
            parent = 0;
            break;
        }
        if (gt_map_put(&self->stacks, (uint64_t)parent, (uintptr_t)co, k3,
                       (uint64_t)sid | (ufr << 32)) < 0)
            PyErr_NoMemory(), swallow(self);
        Py_DECREF(co); /* the code object is kept alive by code_kind's keep */
        parent = sid;
    }
    if (user) {
        *user = user_index >= 0 ? frames[user_index] : NULL;
        Py_XINCREF(*user);
    }
    for (int i = 0; i < n; i++)
        Py_DECREF(frames[i]);
    scratch_give(self, sc);
    return parent;
}

/* The innermost frame that is not gradtrace's own (new reference), and its
 * instruction offset in *lasti; NULL if none. */
static PyFrameObject *current_site(gt_pyrec *self, int *lasti)
{
    PyFrameObject *f = PyEval_GetFrame();
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int kind = code_kind(self, co);
        Py_DECREF(co);
        if (kind != CODE_HIDDEN)
            break;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    *lasti = f ? PyFrame_GetLasti(f) : -1;
    return f;
}

/* Outside a backward call nothing says the last op's frames still run once
 * the op returned: holding them would keep their locals alive after they
 * return (a guard object of Tensor.__repr__, a step's activations), which
 * changes what the program does (torch 1.13's functorch then still sees its
 * keys excluded). Their addresses stay, for comparison only. */
static void release_frames(gt_pyrec *self)
{
    Py_CLEAR(self->last_site);
    Py_CLEAR(self->last_user);
}

/* The stack of an op called at `site` (borrowed). Consecutive ops from the
 * same live frame at the same instruction (the ops of one C++ call, all the
 * ops of a backward call) have the same callers: the last answer is reused.
 * We hold the frame while an op or a backward call is in flight (it surely
 * runs then), so its address cannot be reused meanwhile; release_frames
 * lets it go after. Not for generator frames, whose callers change between
 * resumptions. */
static gt_id capture_stack(gt_pyrec *self, PyFrameObject *site, int lasti,
                           PyFrameObject **user)
{
    if (site && site == self->last_site && lasti == self->last_lasti) {
        if (user)
            *user = (PyFrameObject *)Py_XNewRef(self->last_user);
        return self->last_stack;
    }
    PyFrameObject *uf = NULL;
    gt_id stack = capture_stack_from(self, site, &uf);
    PyCodeObject *co = site ? PyFrame_GetCode(site) : NULL;
    int gen = co && (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR));
    Py_XDECREF(co);
    if (site && !gen && (self->busy || self->in_backward)) {
        Py_XSETREF(self->last_site, (PyFrameObject *)Py_NewRef(site));
        Py_XSETREF(self->last_user, (PyFrameObject *)Py_XNewRef(uf));
        self->last_site_addr = (uintptr_t)site;
        self->last_lasti = lasti;
        self->last_stack = stack;
    } else {
        Py_CLEAR(self->last_site);
        Py_CLEAR(self->last_user);
        self->last_site_addr = (uintptr_t)site;
        self->last_lasti = lasti;
    }
    if (user)
        *user = uf;
    else
        Py_XDECREF(uf);
    return stack;
}

static gt_id capture_stack_here(gt_pyrec *self, PyFrameObject **user)
{
    int lasti;
    PyFrameObject *site = current_site(self, &lasti);
    gt_id stack = capture_stack(self, site, lasti, user);
    Py_XDECREF(site);
    return stack;
}

/* ---- tensors and storages ------------------------------------------------ */

static void vc_release(gt_vc *vc)
{
    if (vc && --vc->refs == 0)
        free(vc);
}

static void storage_release(gt_pyrec *self, gt_storage_ent *st)
{
    if (!st || --st->refs > 0)
        return;
    uint64_t *v = gt_map_get(&self->storages, st->key, 0, 0);
    if (v && *v == (uintptr_t)st)
        gt_map_del(&self->storages, st->key, 0, 0);
    free(st);
}

/* Forget a tensor entry: out of the map, off its storage, weakref dropped. */
static void ent_forget(gt_pyrec *self, gt_tensor_ent *e)
{
    if (!e->rec)
        return;
    e->rec = NULL;
    if (e->st) {
        if (e->st_prev)
            e->st_prev->st_next = e->st_next;
        else
            e->st->head = e->st_next;
        if (e->st_next)
            e->st_next->st_prev = e->st_prev;
        else
            e->st->tail = e->st_prev;
        storage_release(self, e->st);
        e->st = NULL;
    }
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
        ent_forget(e->rec, e);
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

static PyType_Spec ent_spec = {
    .name = "_gradtrace.TensorEntry",
    .basicsize = sizeof(gt_tensor_ent),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ent_slots,
};

/* dtype: interned name and item size, cached by dtype object. */
static gt_id dtype_of(gt_pyrec *self, PyObject *t, PyObject *dtype, int *itemsize)
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
    gt_id id = intern_str(self, name);
    Py_DECREF(s);
    int64_t isz = long_call(t, STATE(self)->s_element_size, 1, self);
    *itemsize = (int)isz;
    if (id && keep(self, dtype) == 0)
        gt_map_put(&self->dtypes, (uintptr_t)dtype, 0, 0,
                   (uint64_t)id | ((uint64_t)isz << 48));
    swallow(self);
    return id;
}

static int read_geom(gt_pyrec *self, PyObject *t, int *ndim, int64_t **geom)
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

static int64_t read_version(gt_pyrec *self, PyObject *t)
{
    /* inference tensors have no version counter: report 0 */
    return long_attr(t, STATE(self)->s_version, 0, self);
}

/* The storage key of t (data pointer of its storage), 0 if it has none. */
static uint64_t storage_key(gt_pyrec *self, PyObject *t, int64_t offset, int itemsize)
{
    int64_t dp = long_call(t, STATE(self)->s_data_ptr, 0, self);
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
    int64_t impl = s ? long_attr(s, STATE(self)->s_cdata, 0, self) : 0;
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
    int64_t nbytes = s ? long_call(s, ms->s_nbytes, 0, self) : 0;
    st->impl = s ? long_attr(s, ms->s_cdata, 0, self) : 0;
    Py_XDECREF(s);
    swallow(self);
    /* device name, cached by get_device() (-1: cpu) */
    int64_t dix = long_call(t, ms->s_get_device, -1, self);
    uint64_t *dv = gt_map_get(&self->dtypes, 0, (uint64_t)dix, 1);
    gt_id did = dv ? (gt_id)*dv : 0;
    if (!did) {
        PyObject *dev = PyObject_GetAttr(t, ms->s_device);
        PyObject *devs = dev ? PyObject_Str(dev) : NULL;
        const char *dname = devs ? PyUnicode_AsUTF8(devs) : NULL;
        did = intern_str(self, dname ? dname : "unknown");
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

static void write_tensor(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int is_leaf);

/* e (tensor t) is named by a row written now: its row is written again if
 * a flight recorder's window cut may have dropped it since (a row still
 * there is left as it is). */
static void touch(gt_pyrec *self, gt_tensor_ent *e, PyObject *t)
{
    if (e->written && e->wepoch != gt_recorder_cuts(self->r))
        write_tensor(self, e, t, -1);
}

/* The entry of tensor t, if recorded; touched (a caller names it). */
static gt_tensor_ent *lookup(gt_pyrec *self, PyObject *t)
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
static void observe(gt_pyrec *self, gt_tensor_ent *e, int64_t version)
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
static void write_tensor(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int is_leaf)
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
        .requires_grad = truth_attr(t, ms->s_requires_grad, self),
        .is_leaf = is_leaf >= 0 ? is_leaf : truth_attr(t, ms->s_is_leaf, self),
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
static gt_tensor_ent *see_tensor(gt_pyrec *self, PyObject *t, int64_t created_by,
                                 gt_tensor_ent *via, int64_t *version)
{
    modstate *ms = STATE(self);
    gt_tensor_ent *e = lookup(self, t);
    /* a fresh output of an op starts at version 0 (a view's is its base's) */
    int64_t ver = !e && created_by ? 0 : read_version(self, t);
    if (version)
        *version = ver;
    if (e) {
        observe(self, e, ver);
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
    e->dtype = dtype ? dtype_of(self, t, dtype, &itemsize) : 0;
    e->itemsize = itemsize;
    Py_XDECREF(dtype);
    swallow(self);
    e->offset = long_call(t, ms->s_storage_offset, 0, self);
    if (read_geom(self, t, &e->ndim, &e->geom) < 0) {
        e->ndim = 0;
        e->geom = NULL;
    }
    uint64_t key = storage_key(self, t, e->offset, itemsize);
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
                gt_tensor_ent *b = see_tensor(self, base, 0, NULL, NULL);
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
     * dispatch returns: its row is written at the next op (flush_pending) */
    if (!created_by)
        write_tensor(self, e, t, -1);
    if (shares && !via)
        observe(self, e, ver);
    return e;
}

/* see_tensor for a tensor met outside an op (a backward root or input, a
 * leaf's variable): a torch.func wrapper is the tensor it wraps. */
static gt_tensor_ent *see_inner(gt_pyrec *self, PyObject *t, int64_t *version)
{
    PyObject *in = ft_inner(self, t);
    gt_tensor_ent *e = see_tensor(self, in ? in : t, 0, NULL, version);
    Py_XDECREF(in);
    return e;
}

/* ---- op metadata --------------------------------------------------------- */

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

/* ---- kernel writes (include/gradtrace/kwrites.h) ---------------------------
 * A write that moves no version: op_meta (gradtrace/_mode.py) names, for an
 * op without an ADInplaceOrView kernel (BUMP_NONE), its kernel writes as
 * kw = None or (when, when_name, unmarked positions): the written arguments
 * whose counter did not move once the op returned are kernel_writes rows;
 * the unmarked ones (the kernel-write list's) are written only when the
 * bool argument `when` is true (when >= 0). */

/* m's kw fields from op_meta's kw. Can't fail (a malformed kw is none). */
static void kw_meta(gt_opmeta *m, PyObject *kw)
{
    Py_ssize_t when = -1;
    PyObject *name = NULL, *unmarked = NULL;
    m->when = -1;
    if (kw == Py_None ||
        !PyArg_ParseTuple(kw, "nUO!", &when, &name, &PyTuple_Type, &unmarked))
        return;
    m->kw = 1;
    m->when = when >= 0 && when < 100000 ? (int)when : -1;
    m->when_name = PyUnicode_GET_LENGTH(name) ? Py_NewRef(name) : NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(unmarked); i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(unmarked, i));
        if (k >= 0 && k < m->nwpos && m->wpos[k])
            m->wpos[k] = 2;
    }
}

/* 1 if the op's unmarked writes happen with these arguments: no condition,
 * or its bool argument is True (positional, else by name in kwargs). */
static int kw_when(const gt_opmeta *m, PyObject *args, PyObject *kwargs)
{
    if (!m->kw || m->when < 0)
        return 1;
    if (m->when < PyTuple_GET_SIZE(args))
        return PyTuple_GET_ITEM(args, m->when) == Py_True;
    PyObject *v = kwargs && m->when_name && PyDict_Check(kwargs)
                      ? PyDict_GetItemWithError(kwargs, m->when_name)
                      : NULL;
    return v == Py_True;
}

/* After op `seq` returned: a kernel write of written argument a if its
 * version did not move. */
static void kw_after(gt_pyrec *self, const gt_opmeta *m, const argref *a, int64_t seq)
{
    if (!m->kw || !a->e || read_version(self, a->t) != a->ver)
        return;
    int marked =
        a->schema_pos < 0 || a->schema_pos >= m->nwpos || m->wpos[a->schema_pos] == 1;
    ck(self, gt_kernel_write(self->r, seq, a->e->id, a->ver, marked));
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
    kw_meta(m, kw);
    swallow(self);
    m->bump = bump;
    m->name = intern_str(self, name);
    m->wnames = Py_NewRef(wnames);
    m->view_arg = view_arg;
    m->is_detach = !strcmp(name, "aten::detach");
    m->is_query = is_metadata_query(name);
    m->call = Py_NewRef(call);
    Py_DECREF(res);
    if (keep(self, func) < 0 || keep(self, m->wnames) < 0 ||
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

/* ---- autograd nodes ------------------------------------------------------ */

static gt_nodetype *node_type(gt_pyrec *self, PyTypeObject *tp)
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
    nt->name = intern_str(self, name);
    nt->is_acc = !strcmp(name, "AccumulateGrad");
    nt->saved = saved;
    if (PyTuple_GET_SIZE(saved) == 1) {
        PyObject *attr = PyTuple_GET_ITEM(PyTuple_GET_ITEM(saved, 0), 0);
        nt->is_custom = PyUnicode_Check(attr) &&
                        PyUnicode_CompareWithASCIIString(attr, "saved_tensors") == 0;
    }
    if (keep(self, (PyObject *)tp) < 0 ||
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

/* Compare the storage a watched tensor t (entry e) is on with the one it was
 * seen on; when they differ, move e to the new storage and, if `report`,
 * write a storage_swaps row (noticed by op `op` or by the start of backward
 * call `bid`, at `stack`). */
static void check_storage(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int64_t op,
                          gt_id bid, gt_id stack, int report)
{
    modstate *ms = STATE(self);
    /* a dtype changed by `.data =` gives another key too: reported alike */
    int64_t offset = long_call(t, ms->s_storage_offset, 0, self);
    uint64_t key = storage_key(self, t, offset, e->itemsize);
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
    if (e->st) {
        if (e->st_prev)
            e->st_prev->st_next = e->st_next;
        else
            e->st->head = e->st_next;
        if (e->st_next)
            e->st_next->st_prev = e->st_prev;
        else
            e->st->tail = e->st_prev;
        storage_release(self, e->st);
        e->st = NULL;
        e->st_prev = e->st_next = NULL;
    }
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
    if (read_geom(self, t, &ndim, &geom) == 0) {
        free(e->geom);
        e->geom = geom;
        e->ndim = ndim;
    }
    e->seen = gt_recorder_seq(self->r);
}

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
    gt_id dt = dtype ? dtype_of(self, v, dtype, &itemsize) : 0;
    Py_XDECREF(dtype);
    swallow(self);
    int ndim = 0;
    int64_t *geom = NULL;
    read_geom(self, v, &ndim, &geom);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= geom[i];
    *nbytes = geom ? numel * itemsize : -1;
    gt_id found = 0;
    gt_tensor_ent *e = lookup(self, v);
    if (e) {
        found = e->id;
        *is_out = node_op && e->last_out == node_op;
        *ent = e;
        goto out;
    }
    if (!geom)
        goto out;
    int64_t offset = long_call(v, ms->s_storage_offset, 0, self);
    uint64_t key = storage_key(self, v, offset, itemsize);
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
    if (long_call(t, ms->s_get_device, 0, self) != -1)
        return -1;
    int64_t dp = long_call(t, ms->s_data_ptr, 0, self);
    PyObject *dtype = PyObject_GetAttr(t, ms->s_dtype);
    int itemsize = 1;
    if (dtype)
        dtype_of(self, t, dtype, &itemsize);
    Py_XDECREF(dtype);
    int ndim = 0;
    int64_t *geom = NULL;
    int ok = read_geom(self, t, &ndim, &geom) == 0;
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
static void fingerprint_use(gt_pyrec *self, PyObject *node, gt_id nid)
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
    PyObject *inner = self->ft_seen ? ft_inner(self, v) : NULL;
    if (inner)
        v = inner;
    int64_t nbytes = -1;
    int is_out = 0;
    gt_tensor_ent *ent = NULL;
    gt_id tid = match_saved(self, v, is_result || custom, op, &nbytes, &is_out, &ent);
    if (ent && lookup(self, v) == ent) {
        /* the saved tensor is the recorded object itself (not an output
         * unpacked anew): `.data =` on it changes what backward reads. It is
         * watched from the storage it is on now (unwatched, an earlier swap
         * went unnoticed) */
        check_storage(self, ent, v, 0, 0, 0, 0);
        ent->saved = 1;
    }
    int64_t ver = read_version(self, v);
    int64_t sseq = 0;
    if (ck(self, gt_saved_tensor(self->r, nid, intern_str(self, s), tid, ver,
                                 custom ? is_out : is_result, nbytes, &sseq)) == 0 &&
        self->check_saved)
        fingerprint_saved(self, nid, sseq, v, attr, index);
    Py_XDECREF(inner);
}

/* Record the tensors node `nid` saved, reading the (attribute, slot) pairs
 * of `pairs`. Returns a new tuple of the pairs that gave nothing (None or an
 * error), or NULL if none did: an output is saved after the node is attached
 * to it, so a slot may only be filled one op later. */
static PyObject *record_saved_all(gt_pyrec *self, gt_id nid, int64_t op, PyObject *node,
                                  PyObject *pairs, gt_nodetype *nt)
{
    PyObject *missing = NULL;
    /* the first node of a class shows which _saved_ slots hold sizes,
     * scalars and flags rather than tensors: later nodes skip them */
    PyObject *useful = nt && !nt->pruned ? PyList_New(0) : NULL;
    gt_nodetype *ntype = nt ? nt : node_type(self, Py_TYPE(node));
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
static void region_saved(gt_pyrec *self, gt_region *rg, gt_id nid)
{
    for (size_t i = 0; i < rg->n; i++) {
        char slot[48];
        snprintf(slot, sizeof slot, "checkpoint_input[%zu]", i);
        ck(self, gt_saved_tensor_at(self->r, nid, intern_str(self, slot), rg->tensors[i],
                                    rg->versions[i], 0, rg->nbytes[i], rg->seq, NULL));
    }
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
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        gt_work *nw = realloc(*work, sizeof *nw * ncap);
        if (!nw)
            return 0;
        *work = nw;
        *cap = ncap;
    }
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
static gt_id discover(gt_pyrec *self, PyObject *root, int64_t op, gt_id thread,
                      int *is_new)
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
        gt_nodetype *nt = node_type(self, Py_TYPE(node));
        gt_node_info ni = {.id = nid,
                           .name = nt ? nt->name : intern_str(self, "?"),
                           .op = nop,
                           .sequence_nr = -1,
                           .thread = thread};
        if (self->has_seqnr && !(nt && nt->is_acc))
            ni.sequence_nr = long_call(node, ms->s_sequence_nr, -1, self);
        if (nt && nt->is_acc) {
            PyObject *var = PyObject_GetAttr(node, ms->s_variable);
            if (var && PyObject_TypeCheck(var, (PyTypeObject *)self->tensor_type)) {
                gt_tensor_ent *ve = see_inner(self, var, NULL);
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
                region_saved(self, rg, nid);
        } else if (nt) {
            missing = record_saved_all(self, nid, nop, node, nt->saved, nt);
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

static void clear_pending(gt_pyrec *self)
{
    for (Py_ssize_t i = 0; i < self->npending; i++)
        Py_DECREF(self->pending[i]);
    self->npending = 0;
}

/* Bump, as PyTorch would have without a dispatch mode, the version of each
 * tensor a _foreach_ op wrote whose version did not move (see BUMP_FOREACH):
 * the recorded run must fail where the unrecorded one does. */
static void bump_foreach(gt_pyrec *self)
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
        if (read_version(self, t) == before && PyList_Append(todo, t) < 0)
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

/* Discover the nodes the last op's outputs got, then forget them. */
static void flush_pending(gt_pyrec *self)
{
    if (self->flushing)
        return; /* an op run by our own bookkeeping */
    bump_foreach(self);
    if (!self->npending && !(self->retry && PyList_GET_SIZE(self->retry)))
        return;
    self->flushing = 1;
    modstate *ms = STATE(self);
    if (self->retry && PyList_GET_SIZE(self->retry)) {
        PyObject *retry = self->retry;
        self->retry = PyList_New(0);
        for (Py_ssize_t i = 0; self->retry && i < PyList_GET_SIZE(retry); i++) {
            PyObject *it = PyList_GET_ITEM(retry, i);
            PyObject *still =
                record_saved_all(self, (gt_id)PyLong_AsLongLong(PyTuple_GET_ITEM(it, 1)),
                                 PyLong_AsLongLong(PyTuple_GET_ITEM(it, 2)),
                                 PyTuple_GET_ITEM(it, 0), PyTuple_GET_ITEM(it, 3), NULL);
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
        gt_tensor_ent *te = lookup(self, t);
        if (te && !te->written) /* a leaf is a tensor without grad_fn */
            write_tensor(self, te, t, g ? g == Py_None : -1);
        if (!g || g == Py_None) {
            Py_XDECREF(g);
            swallow(self);
            continue;
        }
        if (self->calls) {
            /* inside apply: a custom Function's node is recorded when apply
             * returns (call_end), once its saved tensors are in place */
            gt_nodetype *nt = node_type(self, Py_TYPE(g));
            if (nt && nt->is_custom) {
                Py_DECREF(g);
                continue;
            }
        }
        gt_id nid = discover(self, g, op, self->pending_thread, NULL);
        Py_DECREF(g);
        if (!nid || nid <= known)
            continue; /* an older node: its outputs were recorded with it */
        int64_t nr = long_attr(t, ms->s_output_nr, 0, self);
        gt_tensor_ent *e = lookup(self, t);
        if (!e || gt_map_get(&self->done, (uint64_t)nid, (uint64_t)nr, 0))
            continue;
        if (reserve((void **)&self->done_keys, self->ndone_keys, &self->capdone_keys,
                    2 * sizeof *self->done_keys) < 0 ||
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
    clear_pending(self);
    self->flushing = 0;
}

static void add_pending(gt_pyrec *self, PyObject *t)
{
    if (self->npending == self->cappending) {
        Py_ssize_t ncap = self->cappending ? self->cappending * 2 : 16;
        PyObject **np = realloc(self->pending, sizeof *np * (size_t)ncap);
        if (!np)
            return;
        self->pending = np;
        self->cappending = ncap;
    }
    self->pending[self->npending++] = Py_NewRef(t);
}

/* ---- names --------------------------------------------------------------- */

static int names_in(gt_pyrec *self, PyObject *dict, int64_t seq, PyObject *t,
                    gt_tensor_ent *te, PyObject *base, gt_tensor_ent *be)
{
    int found = 0;
    if (!dict || !PyDict_Check(dict))
        return 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
            continue;
        PyObject *in = NULL;
        if (v != t && v != base && self->ft_now &&
            PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type)) {
            /* a name inside a torch.func transform holds a wrapper */
            in = ft_inner(self, v);
            if (in && (in == t || (base && in == base)))
                v = in;
        }
        Py_XDECREF(in); /* v stays valid: its wrapper in `dict` holds it */
        if (v == t || (base && v == base)) {
            const char *name = PyUnicode_AsUTF8(k);
            if (!name) {
                swallow(self);
                continue;
            }
            if (v == base && be)
                ck(self, gt_name(self->r, seq, be->id, name));
            ck(self, gt_name(self->r, seq, te->id, name));
            found++;
        }
    }
    return found;
}

/* Names bound to mutated tensor t (or the tensor it is a view of) in the
 * user's frame: locals, then globals. */
static void record_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq, PyObject *t,
                         gt_tensor_ent *te)
{
    modstate *ms = STATE(self);
    /* an optimizer step mutates dozens of parameters from one user line
     * whose frame names none of them: after a miss, that line is skipped */
    int lasti = PyFrame_GetLasti(uf);
    if ((uintptr_t)uf == self->names_miss && lasti == self->names_miss_lasti)
        return;
    PyObject *base = NULL;
    gt_tensor_ent *be = NULL;
    PyObject *isv = PyObject_CallMethodNoArgs(t, ms->s_is_view);
    if (isv && PyObject_IsTrue(isv) > 0) {
        base = PyObject_GetAttr(t, ms->s_base);
        if (base && PyObject_TypeCheck(base, (PyTypeObject *)self->tensor_type))
            be = lookup(self, base);
    }
    Py_XDECREF(isv);
    swallow(self);
    PyObject *locals = PyFrame_GetLocals(uf);
    PyObject *globals = PyFrame_GetGlobals(uf);
    int found = names_in(self, locals, seq, t, te, base, be);
    if (globals != locals)
        found += names_in(self, globals, seq, t, te, base, be);
    if (!found) {
        self->names_miss = (uintptr_t)uf;
        self->names_miss_lasti = lasti;
    }
    Py_XDECREF(locals);
    Py_XDECREF(globals);
    Py_XDECREF(base);
    swallow(self);
}

/* Look up, once, what bind_names and note_exec need from torch. */
static void lookup_torch(gt_pyrec *self)
{
    if (self->looked_up)
        return;
    self->looked_up = 1;
    self->module_type = gt_py_type_attr("torch.nn", "Module");
    /* missing in older PyTorch (1.13): then no node_execs rows */
    PyObject *c = PyImport_ImportModule("torch._C");
    self->current_node = c ? PyObject_GetAttrString(c, "_current_autograd_node") : NULL;
    Py_XDECREF(c);
    if (self->current_node && !PyCallable_Check(self->current_node))
        Py_CLEAR(self->current_node);
    PyErr_Clear();
}

typedef struct {
    gt_pyrec *self;
    int64_t seq;
} name_ctx;

static int param_known(void *ctx, PyObject *t)
{
    return lookup(((name_ctx *)ctx)->self, t) != NULL;
}

static void name_tensor(void *ctx, PyObject *t, const char *name)
{
    name_ctx *c = ctx;
    gt_pyrec *self = c->self;
    gt_tensor_ent *e = lookup(self, t);
    if (!e && self->ft_seen) {
        PyObject *in = ft_inner(self, t);
        e = in ? lookup(self, in) : NULL;
        Py_XDECREF(in);
    }
    if (e)
        ck(self, gt_name(self->r, c->seq, e->id, name));
}

/* Names of every recorded tensor (and recorded parameter of an nn.Module)
 * bound in the user frame uf, at event seq (gt_py_bind_names). Tensors never
 * recorded get no id here. */
static void bind_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq)
{
    if (!uf || !seq || !self->r || self->failed || self->forked)
        return;
    lookup_torch(self);
    name_ctx c = {self, seq};
    gt_py_namer n = {self->tensor_type, self->module_type, param_known, name_tensor, &c};
    self->errors += gt_py_bind_names(&n, uf);
    swallow(self);
}

/* During a recorded backward call: the node whose apply() is running this
 * op (torch._C._current_autograd_node), written to node_execs once per run
 * of consecutive ops. Only nodes already recorded are written (never a new
 * node here). A node that runs no aten op (an AccumulateGrad that just moves
 * the incoming gradient into .grad, a node whose gradient is undefined)
 * never shows here; nor does any node on PyTorch without
 * _current_autograd_node (1.13). */
static void note_exec(gt_pyrec *self)
{
    if (!self->cur_backward)
        return;
    lookup_torch(self);
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
            fingerprint_use(self, node, nid);
    }
    swallow(self);
}

/* ---- dispatch ------------------------------------------------------------ */

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
        int kind = code_kind(self, co);
        Py_DECREF(co);
        PyObject *locals = kind == CODE_USER ? PyFrame_GetLocals(f) : NULL;
        PyObject *items = locals && PyDict_Check(locals) ? PyDict_Values(locals) : NULL;
        Py_XDECREF(locals);
        for (Py_ssize_t i = 0; items && i < PyList_GET_SIZE(items); i++) {
            PyObject *v = PyList_GET_ITEM(items, i);
            if (!PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type))
                continue;
            PyObject *in = ft_inner(self, v);
            PyObject *g = in ? PyObject_GetAttr(v, ms->s_grad_fn) : NULL;
            gt_tensor_ent *e = in ? lookup(self, in) : NULL;
            if (g && g != Py_None) {
                int is_new = 0;
                gt_id nid = discover(self, g, e ? e->created_by : 0, current_thread(self),
                                     &is_new);
                if (nid && is_new && e)
                    ck(self, gt_node_output(self->r, nid,
                                            (int)long_attr(v, ms->s_output_nr, 0, self),
                                            e->id));
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
static int collect(gt_pyrec *self, PyObject *v, int written, int pos, argvec *a,
                   int depth)
{
    if (PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type))
        return argvec_push(a, (argref){.t = v, .written = written, .schema_pos = pos});
    if ((!PyList_Check(v) && !PyTuple_Check(v)) || depth >= MAX_NESTING)
        return 0;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t j = 0; j < m; j++)
        if (collect(self, PySequence_Fast_GET_ITEM(v, j), written, pos, a, depth + 1) < 0)
            return -1;
    return 0;
}

static int is_written(const gt_opmeta *m, Py_ssize_t pos)
{
    return pos < m->nwpos && m->wpos[pos];
}

static PyObject *rec_dispatch(PyObject *op, PyObject *const *argv, Py_ssize_t argc)
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
    if (!recording(self) || self->quiet) {
        if (self->unbumped && PyList_GET_SIZE(self->unbumped)) {
            excsave e = exc_save();
            bump_foreach(self);
            exc_restore(e);
        }
        uint64_t *v = gt_map_get(&self->ops, (uintptr_t)func, 0, 0);
        PyObject *call = v ? ((gt_opmeta *)(uintptr_t)*v)->call : func;
        return PyObject_Call(call, args, kwargs);
    }

    /* the caller's exception state must survive our bookkeeping */
    excsave saved_exc = exc_save();
    gt_opmeta *meta = op_meta(self, func);
    int lasti = -1;
    PyFrameObject *site = current_site(self, &lasti);
    int shallow = 0;
    if (meta && meta->is_query) {
        /* nothing to record, and no tensor's grad_fn may be read: autograd
         * can be asking with a tensor's autograd lock held */
        Py_XDECREF(site);
        exc_restore(saved_exc);
        return PyObject_Call(meta->call, args, kwargs);
    }
    if (meta && meta->is_detach && self->via_autograd != Py_None) {
        /* `.data` (and SavedVariable's tensor_data) reach us as a detach
         * that did not come through the autograd kernels: .data gets a
         * version counter of its own */
        PyObject *r = PyObject_CallNoArgs(self->via_autograd);
        shallow = r == Py_False;
        Py_XDECREF(r);
        swallow(self);
        if (shallow && site && (uintptr_t)site == self->last_site_addr &&
            lasti == self->last_lasti) {
            /* autograd saving the previous op's output (same frame, same
             * instruction): bookkeeping, not the user's op */
            Py_DECREF(site);
            exc_restore(saved_exc);
            return PyObject_Call(meta->call, args, kwargs);
        }
    }
    self->busy++;
    flush_pending(self);

    PyFrameObject *uf = NULL;
    gt_id stack = 0;
    int64_t seq = 0;
    int grad = 0;
    gt_scratch *sc = scratch_take(self);
    if (!sc)
        PyErr_NoMemory(), swallow(self);
    if (meta && sc && recording(self)) {
        stack = capture_stack(self, site, lasti, &uf);
        /* (inside the mode functorch's own level stack reads empty) */
        self->ft_now = meta->nwpos && self->stack_func && ft_active(self);
        if (self->ft_now && uf)
            ft_scan(self, uf);
        PyObject *ge = PyObject_CallNoArgs(self->grad_enabled);
        grad = ge == Py_True;
        Py_XDECREF(ge);
        swallow(self);
        if (self->in_backward)
            note_exec(self); /* before the op: the node ran it */
        gt_op_info oi = {.name = meta->name,
                         .phase = self->in_backward ? GT_PHASE_BACKWARD
                                  : grad            ? GT_PHASE_FORWARD
                                                    : GT_PHASE_OTHER,
                         .grad_mode = grad,
                         .thread = current_thread(self),
                         .stack = stack};
        if (ck(self, gt_op(self->r, &oi, &seq)) < 0)
            seq = 0;
        self->pending_thread = oi.thread;
    }
    argvec *in = sc ? &sc->in : NULL;
    if (seq) {
        Py_ssize_t na = PyTuple_GET_SIZE(args);
        int oom = 0, when = kw_when(meta, args, kwargs);
        for (Py_ssize_t i = 0; i < na && !oom; i++)
            oom = collect(self, PyTuple_GET_ITEM(args, i),
                          is_written(meta, i) && (when || meta->wpos[i] != 2), (int)i, in,
                          0) < 0;
        if (kwargs && PyDict_Check(kwargs)) {
            PyObject *k, *v;
            Py_ssize_t p = 0;
            while (!oom && PyDict_Next(kwargs, &p, &k, &v)) {
                int w = PySequence_Contains(meta->wnames, k) > 0;
                oom = collect(self, v, w, -1, in, 0) < 0;
            }
        }
        if (oom)
            PyErr_NoMemory(), swallow(self); /* recorded in part */
        int nmut = 0;
        for (size_t i = 0; i < in->n; i++) {
            argref *a = &in->v[i];
            a->e = see_tensor(self, a->t, 0, NULL, &a->ver);
            if (a->e && a->e->saved)
                check_storage(self, a->e, a->t, seq, 0, stack, 1);
            if (a->e)
                ck(self,
                   gt_op_arg(self->r, seq, GT_ROLE_INPUT, (int)i, a->e->id, a->ver));
            if (a->written && a->e)
                ck(self,
                   gt_op_arg(self->r, seq, GT_ROLE_MUTATED, nmut++, a->e->id, a->ver));
        }
    }
    swallow(self);
    exc_restore(saved_exc);

    /* the op itself, exactly once: through its C++ operator when calling
     * func would only forward to it */
    PyObject *out = PyObject_Call(meta ? meta->call : func, args, kwargs);

    if (seq && recording(self)) {
        saved_exc = exc_save();
        /* predicted bumps: the ADInplaceOrView kernel bumps after we return,
         * once per version counter however many written arguments share it */
        for (size_t i = 0; i < in->n; i++) {
            argref *a = &in->v[i];
            if (!a->written || !a->e || !a->e->vc || !out)
                continue;
            if (a->e->vc->bumped_at == seq)
                continue;
            a->e->last_out = seq;
            if (a->e->saved) /* an op's own change (set_): autograd sees it */
                check_storage(self, a->e, a->t, seq, 0, stack, 0);
            if (meta->bump == BUMP_NONE)
                kw_after(self, meta, a, seq);
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
                record_names(self, uf, seq, a->t, a->e);
            add_pending(self, a->t);
        }
        if (out) {
            argvec *outs = &sc->out;
            if (collect(self, out, 0, 0, outs, 0) < 0)
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
                gt_tensor_ent *e = lookup(self, t);
                if (e) {
                    ver = e->vc ? e->vc->expected : 0;
                } else {
                    e = see_tensor(self, t, seq, via, &ver);
                    if (e)
                        add_pending(self, t);
                }
                if (e)
                    ck(self, gt_op_arg(self->r, seq, GT_ROLE_OUTPUT, (int)j, e->id, ver));
            }
        }
        self->pending_seq = seq;
        swallow(self);
        exc_restore(saved_exc);
    }
    self->ft_now = 0;
    Py_XDECREF(uf);
    Py_XDECREF(site);
    scratch_give(self, sc);
    self->busy--;
    if (!self->busy && !self->in_backward)
        release_frames(self);
    return out;
}

/* ---- Python API ---------------------------------------------------------- */

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

static void region_pop(gt_pyrec *self, int64_t seq);

static void free_caches(gt_pyrec *self)
{
    /* forget every tensor (collect first: forgetting edits the map) */
    size_t n = self->tensors.len, k = 0;
    gt_tensor_ent **all = n ? malloc(sizeof *all * n) : NULL;
    for (size_t i = 0; all && i < self->tensors.cap; i++)
        if (self->tensors.slots[i].used)
            all[k++] = (gt_tensor_ent *)(uintptr_t)self->tensors.slots[i].value;
    for (size_t i = 0; i < k; i++)
        ent_forget(self, all[i]);
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
    clear_pending(self);
    if (self->retry)
        PyList_SetSlice(self->retry, 0, PY_SSIZE_T_MAX, NULL);
    free(self->pending);
    self->pending = NULL;
    self->cappending = 0;
    if (self->unbumped)
        PyList_SetSlice(self->unbumped, 0, PY_SSIZE_T_MAX, NULL);
    while (self->nregions)
        region_pop(self, self->regions[self->nregions - 1].seq);
    free(self->regions);
    self->regions = NULL;
    self->capregions = 0;
    if (self->fp)
        PyDict_Clear(self->fp);
    gt_map_clear(&self->done);
    free(self->done_keys);
    self->done_keys = NULL;
    self->ndone_keys = self->capdone_keys = 0;
    scratch_free_all(self);
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
        flush_pending(self);
    bump_foreach(self);
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
    clear_pending(self);
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
        flush_pending(self);
        ck(self, gt_recorder_flush(self->r));
    }
    swallow(self);
    exc_restore(saved_exc);
    Py_RETURN_NONE;
}

static gt_id node_of(gt_pyrec *self, PyObject *t)
{
    PyObject *g = PyObject_GetAttr(t, STATE(self)->s_grad_fn);
    gt_id nid = 0;
    if (g && g != Py_None)
        nid = discover(self, g, 0, current_thread(self), NULL);
    Py_XDECREF(g);
    swallow(self);
    return nid;
}

static void region_pop(gt_pyrec *self, int64_t seq)
{
    if (!self->nregions || self->regions[self->nregions - 1].seq != seq)
        return;
    gt_region *rg = &self->regions[--self->nregions];
    free(rg->tensors);
    free(rg->versions);
    free(rg->nbytes);
}

/* Open a checkpoint region for call `seq` over the tensors of `in`. */
static void region_push(gt_pyrec *self, int64_t seq, argvec *in)
{
    if (reserve((void **)&self->regions, self->nregions, &self->capregions,
                sizeof *self->regions) < 0)
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
                dtype_of(self, a->t, dt, &isz);
            Py_XDECREF(dt);
            swallow(self);
            rg.nbytes[i] = numel * isz;
        }
    }
    self->regions[self->nregions++] = rg;
}

/* At the start of backward call bid: check the storage of every live tensor
 * a node saved (see check_storage). */
static void watch_all(gt_pyrec *self, gt_id bid, gt_id stack)
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
            check_storage(self, e, t, 0, bid, stack, 1);
            Py_DECREF(t);
        }
        Py_DECREF(e);
    }
    free(all);
    swallow(self);
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
    flush_pending(self);
    gt_scratch *sc = scratch_take(self);
    PyObject *ge = PyObject_CallNoArgs(self->grad_enabled);
    int grad = ge == Py_True;
    Py_XDECREF(ge);
    swallow(self);
    gt_op_info oi = {.name = intern_str(self, name),
                     .phase = self->in_backward ? GT_PHASE_BACKWARD
                              : grad            ? GT_PHASE_FORWARD
                                                : GT_PHASE_OTHER,
                     .grad_mode = grad,
                     .thread = current_thread(self),
                     .stack = capture_stack_here(self, NULL)};
    int64_t seq = 0;
    if (!sc || !oi.name || ck(self, gt_op(self->r, &oi, &seq)) < 0)
        seq = 0;
    if (seq) {
        if (collect(self, inputs, 0, 0, &sc->in, 0) < 0)
            PyErr_NoMemory(), swallow(self);
        for (size_t i = 0; i < sc->in.n; i++) {
            argref *a = &sc->in.v[i];
            a->e = see_tensor(self, a->t, 0, NULL, &a->ver);
            if (a->e)
                ck(self,
                   gt_op_arg(self->r, seq, GT_ROLE_INPUT, (int)i, a->e->id, a->ver));
        }
        if (region)
            region_push(self, seq, &sc->in);
        self->calls++;
    }
    scratch_give(self, sc);
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
    gt_scratch *sc = recording(self) && result != Py_None ? scratch_take(self) : NULL;
    if (sc) {
        modstate *ms = STATE(self);
        gt_id thread = current_thread(self);
        if (collect(self, result, 0, 0, &sc->out, 0) < 0)
            PyErr_NoMemory(), swallow(self);
        for (size_t j = 0; j < sc->out.n && recording(self); j++) {
            PyObject *t = sc->out.v[j].t;
            int64_t ver = 0;
            gt_tensor_ent *e = see_tensor(self, t, 0, NULL, &ver);
            if (!e)
                continue;
            ck(self, gt_op_arg(self->r, seq, GT_ROLE_OUTPUT, (int)j, e->id, ver));
            e->last_out = seq;
            PyObject *g = PyObject_GetAttr(t, ms->s_grad_fn);
            if (g && g != Py_None) {
                int is_new = 0;
                gt_id nid = discover(self, g, seq, thread, &is_new);
                if (nid && is_new)
                    ck(self, gt_node_output(self->r, nid,
                                            (int)long_attr(t, ms->s_output_nr, 0, self),
                                            e->id));
            }
            Py_XDECREF(g);
            swallow(self);
        }
    }
    scratch_give(self, sc);
    if (recording(self))
        flush_pending(self); /* the last inner op's nodes, still in the region */
    region_pop(self, seq);
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
    flush_pending(self);
    PyFrameObject *uf = NULL;
    gt_backward_info bi = {.api = intern_str(self, api),
                           .retain_graph = retain,
                           .create_graph = create,
                           .thread = current_thread(self),
                           .stack = capture_stack_here(self, &uf)};
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
        gt_tensor_ent *e = see_inner(self, t, NULL);
        ck(self, gt_backward_root(self->r, id, (int)i, e ? e->id : 0, node_of(self, t)));
    }
    Py_XDECREF(seq);
    watch_all(self, id, bi.stack);
    if (inputs != Py_None) {
        seq = PySequence_Fast(inputs, "inputs");
        for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyObject_TypeCheck(t, (PyTypeObject *)self->tensor_type))
                continue;
            gt_tensor_ent *e = see_inner(self, t, NULL);
            if (e)
                ck(self, gt_backward_input(self->r, id, (int)i, e->id));
        }
        Py_XDECREF(seq);
    }
    swallow(self);
    /* every recorded tensor and module parameter the user's frame names */
    bind_names(self, uf, gt_recorder_seq(self->r));
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
        release_frames(self);
    if (id && id == self->cur_backward) {
        self->cur_backward = 0;
        Py_CLEAR(self->last_exec);
    }
    if (!id || !self->r || self->forked || self->failed)
        Py_RETURN_NONE;
    excsave saved_exc = exc_save();
    if (exc != Py_None) {
        PyFrameObject *uf = NULL;
        record_error(self, exc, capture_stack_here(self, &uf), id);
        bind_names(self, uf, gt_recorder_seq(self->r));
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
    flush_pending(self);
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
        stack = capture_stack_from(self, f, &uf);
    }
    Py_XDECREF(f);
    record_error(self, exc, stack, 0);
    bind_names(self, uf, gt_recorder_seq(self->r));
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
        flush_pending(self);
    if (!on && !self->busy)
        bump_foreach(self);
    if (!on) {
        clear_pending(self);
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
        ent_forget(self, (gt_tensor_ent *)(uintptr_t)*v);
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
    flush_pending(self);
    gt_tensor_ent *e = lookup(self, t);
    if (e)
        observe(self, e, read_version(self, t));
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
        flush_pending(self);
        e = see_tensor(self, t, 0, NULL, NULL); /* on its old storage */
        if (e)
            Py_INCREF(e);
        self->busy--;
        swallow(self);
        exc_restore(saved_exc);
    }
    int rc = Py_TYPE(self->data_orig)->tp_descr_set(self->data_orig, t, value);
    if (rc == 0 && e && e->rec && recording(self)) {
        excsave saved_exc = exc_save();
        gt_id stack = capture_stack_here(self, NULL);
        check_storage(self, e, t, 0, 0, stack, 1);
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
    {"dispatch", (PyCFunction)(void (*)(void))rec_dispatch, METH_FASTCALL,
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

static PyType_Spec rec_spec = {
    .name = "_gradtrace.Recorder",
    .basicsize = sizeof(gt_pyrec),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = rec_slots,
};

/* ---- module -------------------------------------------------------------- */

/* Module constants KERNEL_WRITES, the kernel-write list as a tuple of
 * (op, "argument,argument", when, reason), and WRITES_NO_ELEMENT, a tuple of op
 * names (include/gradtrace/kwrites.h). Returns 0, or -1 with an exception. */
static int add_kernel_writes(PyObject *m)
{
#define GT__KW_TUPLE(op, args, when, reason) "(ssss)"
#define GT__KW_ARGS(op, args, when, reason)  op, args, when, reason,
    PyObject *list = Py_BuildValue("(" GT_KERNEL_WRITES(GT__KW_TUPLE) ")",
                                   GT_KERNEL_WRITES(GT__KW_ARGS) NULL);
#undef GT__KW_TUPLE
#undef GT__KW_ARGS
#define GT__KW_FMT(op)  "s"
#define GT__KW_NAME(op) op,
    PyObject *none = Py_BuildValue("(" GT_WRITES_NO_ELEMENT(GT__KW_FMT) ")",
                                   GT_WRITES_NO_ELEMENT(GT__KW_NAME) NULL);
#undef GT__KW_FMT
#undef GT__KW_NAME
    int rc = list && none && PyModule_AddObjectRef(m, "KERNEL_WRITES", list) == 0 &&
                     PyModule_AddObjectRef(m, "WRITES_NO_ELEMENT", none) == 0
                 ? 0
                 : -1;
    Py_XDECREF(list);
    Py_XDECREF(none);
    return rc;
}

static int mod_exec(PyObject *m)
{
    modstate *ms = PyModule_GetState(m);
    ms->recorder_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &rec_spec, NULL);
    if (!ms->recorder_type || PyModule_AddType(m, ms->recorder_type) < 0)
        return -1;
    ms->ent_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &ent_spec, NULL);
    if (!ms->ent_type)
        return -1;
#define INTERN(field, text)                                                              \
    if (!(ms->field = PyUnicode_InternFromString(text)))                                 \
        return -1;
    INTERN(s_version, "_version")
    INTERN(s_grad_fn, "grad_fn")
    INTERN(s_metadata, "metadata")
    INTERN(s_next_functions, "next_functions")
    INTERN(s_output_nr, "output_nr")
    INTERN(s_data_ptr, "data_ptr")
    INTERN(s_storage_offset, "storage_offset")
    INTERN(s_shape, "shape")
    INTERN(s_stride, "stride")
    INTERN(s_dtype, "dtype")
    INTERN(s_requires_grad, "requires_grad")
    INTERN(s_is_leaf, "is_leaf")
    INTERN(s_is_view, "_is_view")
    INTERN(s_base, "_base")
    INTERN(s_variable, "variable")
    INTERN(s_sequence_nr, "_sequence_nr")
    INTERN(s_untyped_storage, "untyped_storage")
    INTERN(s_storage, "storage")
    INTERN(s_nbytes, "nbytes")
    INTERN(s_cdata, "_cdata")
    INTERN(s_device, "device")
    INTERN(s_element_size, "element_size")
    INTERN(s_strip, "strip")
    INTERN(s_get_device, "get_device")
    INTERN(s_functorch_dir, "/torch/_functorch/")
    INTERN(s_functorch_src, "/functorch/_src/")
#undef INTERN
    if (PyModule_AddStringConstant(m, "version", GT_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(m, "schema_version", GT_SCHEMA_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "RUN_OK", GT_RUN_OK) < 0 ||
        PyModule_AddIntConstant(m, "RUN_EXCEPTION", GT_RUN_EXCEPTION) < 0 ||
        PyModule_AddIntConstant(m, "RUN_SIGNAL", GT_RUN_SIGNAL) < 0 ||
        add_kernel_writes(m) < 0)
        return -1;
    return 0;
}

static int mod_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *ms = PyModule_GetState(m);
    Py_VISIT(ms->recorder_type);
    Py_VISIT(ms->ent_type);
    return 0;
}

static int mod_clear(PyObject *m)
{
    modstate *ms = PyModule_GetState(m);
    Py_CLEAR(ms->recorder_type);
    Py_CLEAR(ms->ent_type);
    PyObject **names[] = {
        &ms->s_version,         &ms->s_grad_fn,
        &ms->s_metadata,        &ms->s_next_functions,
        &ms->s_output_nr,       &ms->s_data_ptr,
        &ms->s_storage_offset,  &ms->s_shape,
        &ms->s_stride,          &ms->s_dtype,
        &ms->s_requires_grad,   &ms->s_is_leaf,
        &ms->s_is_view,         &ms->s_base,
        &ms->s_variable,        &ms->s_sequence_nr,
        &ms->s_untyped_storage, &ms->s_storage,
        &ms->s_nbytes,          &ms->s_cdata,
        &ms->s_device,          &ms->s_element_size,
        &ms->s_strip,           &ms->s_get_device,
        &ms->s_functorch_dir,   &ms->s_functorch_src,
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        Py_CLEAR(*names[i]);
    return 0;
}

static void mod_free(void *m)
{
    mod_clear((PyObject *)m);
}

static PyModuleDef_Slot mod_slots[] = {
    {Py_mod_exec, mod_exec},
    {0, NULL},
};

static PyMethodDef mod_methods[] = {
    {"call_bottom", (PyCFunction)(void (*)(void))gt_py_call_bottom, METH_FASTCALL,
     "call_bottom(fn, *args): fn(*args) with no Python frame under fn's"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_gradtrace",
    .m_methods = mod_methods,
    .m_doc = "gradtrace's PyTorch adapter: per-op recording in C over gtrecorder",
    .m_size = sizeof(modstate),
    .m_slots = mod_slots,
    .m_traverse = mod_traverse,
    .m_clear = mod_clear,
    .m_free = mod_free,
};

PyMODINIT_FUNC PyInit__gradtrace(void)
{
    return PyModuleDef_Init(&mod_def);
}
