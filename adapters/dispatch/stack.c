/* stack.c: interned Python stacks, frames and nn.Module paths of an op's callers. */
#include "state.h"

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
    if (gt__keep(self, (PyObject *)co) < 0 ||
        gt_map_put(&self->codes, (uintptr_t)co, 0, 0, (uint64_t)kind) < 0)
        swallow(self);
    return kind;
}

int gt__code_kind(gt_pyrec *self, PyCodeObject *co)
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
gt_id gt__capture_stack_from(gt_pyrec *self, PyFrameObject *start,
                             PyFrameObject **user /* OUT */)
{
    if (user)
        *user = NULL;
    gt_scratch *sc = gt__scratch_take(self);
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
        if (kind != CODE_HIDDEN &&
            GT_ALLOC_GROW(sc->frames, (size_t)n + 1, sc->frames_cap, 16) == 0)
            sc->frames[n++] = f; /* owned; out of memory: outermost dropped */
        else
            Py_DECREF(f);
        f = back;
    }
    frames = sc->frames;
    gt_id parent = 0;
    uint64_t ufr = 0;
    int user_index = -1;
    gt__lookup_torch(self);
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
        Py_DECREF(co); /* the code object is kept alive by gt__code_kind's keep */
        parent = sid;
    }
    if (user) {
        *user = user_index >= 0 ? frames[user_index] : NULL;
        Py_XINCREF(*user);
    }
    for (int i = 0; i < n; i++)
        Py_DECREF(frames[i]);
    gt__scratch_give(self, sc);
    return parent;
}

/* The innermost frame that is not gradtrace's own (new reference), and its
 * instruction offset in *lasti; NULL if none. */
PyFrameObject *gt__current_site(gt_pyrec *self, int *lasti)
{
    PyFrameObject *f = PyEval_GetFrame();
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int kind = gt__code_kind(self, co);
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
void gt__release_frames(gt_pyrec *self)
{
    Py_CLEAR(self->last_site);
    Py_CLEAR(self->last_user);
}

/* The stack of an op called at `site` (borrowed). Consecutive ops from the
 * same live frame at the same instruction (the ops of one C++ call, all the
 * ops of a backward call) have the same callers: the last answer is reused.
 * We hold the frame while an op or a backward call is in flight (it surely
 * runs then), so its address cannot be reused meanwhile; gt__release_frames
 * lets it go after. Not for generator frames, whose callers change between
 * resumptions. */
gt_id gt__capture_stack(gt_pyrec *self, PyFrameObject *site, int lasti,
                        PyFrameObject **user)
{
    if (site && site == self->last_site && lasti == self->last_lasti) {
        if (user)
            *user = (PyFrameObject *)Py_XNewRef(self->last_user);
        return self->last_stack;
    }
    PyFrameObject *uf = NULL;
    gt_id stack = gt__capture_stack_from(self, site, &uf);
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

gt_id gt__capture_stack_here(gt_pyrec *self, PyFrameObject **user)
{
    int lasti;
    PyFrameObject *site = gt__current_site(self, &lasti);
    gt_id stack = gt__capture_stack(self, site, lasti, user);
    Py_XDECREF(site);
    return stack;
}
