/*
 * What both extensions (_gradtrace, _gradtrace_engine) do the same way with
 * Python objects: the run row's fields from set_run's keywords, the `data`
 * descriptor their data_set forwards to, and the variable names bound in a
 * user's frame.
 */
#ifndef GRADTRACE_PYRUN_H
#define GRADTRACE_PYRUN_H

#include <Python.h>

#include <gradtrace/recorder.h>

#include "strbuf.h"

/* Fill *ri from set_run's keywords (engine_version, python_version,
 * argv_json, cwd, host, options_json, pid, rank, world_size, local_rank,
 * backend, launcher_run_id; all optional). The strings are borrowed from
 * args/kw: use *ri before they go. Returns 0, or -1 with a Python error. */
int gt_py_run_info(PyObject *args, PyObject *kw, gt_run_info *ri /* OUT */);

/* watch_data(descriptor): keep descr (a new reference, replacing *slot's)
 * if it is a settable descriptor: the `data` getset of torch's tensor base
 * class, which data_set forwards to. Returns Py_None (new reference), or
 * NULL with a TypeError. */
PyObject *gt_py_watch_data(PyObject **slot, PyObject *descr);

/* s's text as NUL-terminated UTF-8, whole: the str's own UTF-8 when it holds
 * neither a NUL nor a lone surrogate (no copy; valid while s lives), else a
 * copy in *b in which a NUL reads \x00 and a lone surrogate \udcXX (as
 * Python's backslashreplace writes it), so that a C string carries all of
 * it: an error message with a NUL in it was cut there, and one with a
 * surrogate (undecodable bytes let through by surrogateescape) recorded
 * empty. NULL if s is not a str or memory ran out; no Python error is left
 * set. Release *b (gt_strbuf_release) once the text is used. */
const char *gt_py_text(PyObject *s, gt_strbuf *b);

/* module.name if it is a type (a new reference: torch.Tensor, torch.nn.Module),
 * else NULL; importing the module as needed, no Python error left set. */
PyObject *gt_py_type_attr(const char *module, const char *name);

/* Who names what for gt_py_bind_names. */
typedef struct gt_py_namer {
    PyObject *tensor_type; /* torch.Tensor */
    PyObject *module_type; /* torch.nn.Module, or NULL: no parameter names */
    /* Is parameter t one to name (recorded)? Only these names are built. */
    int (*known)(void *ctx, PyObject *t);
    /* t is bound to name (UTF-8, NUL-terminated) */
    void (*name)(void *ctx, PyObject *t, const char *name);
    void *ctx;
} gt_py_namer;

/* The names bound in frame f, as both adapters record them at a backward
 * call: each tensor under its variable's name, and each nn.Module's
 * parameters as "<var>.<name>" in the order and with the duplicate rules of
 * m.named_parameters() (walked in C unless the module overrides how it
 * lists them; a module with more than 10,000 parameters is not named, every
 * backward call); first the frame's locals, then the globals its code names
 * that no local shadows, for what the locals did not name (`policy` bound at
 * module level, used by the function that calls backward()); then the
 * tensors that no variable or module names here but a list, tuple or dict
 * bound to a variable holds, one level deep: "<var>[<i>]" (laterals[2]),
 * "<var>[<repr(key)>]" for a str or int key (feats['p3']); a container of
 * more than 256 items is not named. Python errors are cleared; returns how
 * many were. */
int gt_py_bind_names(const gt_py_namer *n, PyFrameObject *f);

/* 1 if code co's first argument is named `self` (a method's frame: an
 * nn.Module's forward, its _call_impl), else 0; no Python error is left
 * set. Callers cache the answer per code object. */
int gt_py_code_self(PyCodeObject *co);

/* The object bound to the first argument of frame f now (borrowed: valid
 * while f runs and does not rebind it), for a frame whose code
 * gt_py_code_self says takes `self`; NULL when it is unbound or cannot be
 * read on this Python. Reads the frame's fast locals (no locals dict is
 * made); no Python error is left set. */
PyObject *gt_py_frame_self(PyFrameObject *f);

/* The module path (stacks.module) of a frame whose `self` is module
 * `mod`, given the innermost module `outer` of the frames that called it
 * and outer's path `outer_path` (NULL: no module called it): outer_path
 * when mod is outer; "" when no module called it (mod is the model, the
 * root of the paths); else outer_path joined by "." to the names that lead
 * from outer to mod through registered submodules (`_modules` dicts,
 * breadth first, at most 6 levels and 4096 modules: "layer3" + "1",
 * "" + "blocks.4"); "" when mod is not below outer (a module called
 * from another's code without being its child: it starts its own paths).
 * Written to *path (reset first; read it with gt_strbuf_str). Returns 1
 * when mod is outer or below it, 0 when it starts its own paths (a module
 * being built: its parent does not hold it yet), -1 when out of memory; no
 * Python error is left set. */
int gt_py_module_path(PyObject *outer, const char *outer_path, PyObject *mod,
                      gt_strbuf *path /* OUT */);

/* call_bottom(fn, *args): fn(*args) with no Python frame under fn's, so
 * what `gradtrace record` runs sees the stack python3 gives it: under
 * `python3 script.py` the script's module frame is the bottom one (fn is
 * exec), under `python3 -m module` runpy's _run_module_as_main is (fn is
 * that). Without this, traceback.print_stack, inspect.stack, sys._getframe
 * and anomaly mode's forward traces showed the runner's and runpy's frames.
 * The thread's current frame is put back on return. Returns fn's result,
 * or NULL with its Python error. */
PyObject *gt_py_call_bottom(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* The object weak reference wr refers to (a new reference), or NULL if it
 * is gone: PyWeakref_GetRef where it exists (3.13, which deprecates
 * PyWeakref_GetObject's borrowed reference). */
static inline PyObject *gt_py_weak_get(PyObject *wr)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(wr, &o) < 0)
        PyErr_Clear();
    return o;
#else
    PyObject *o = PyWeakref_GetObject(wr);
    if (!o) {
        PyErr_Clear();
        return NULL;
    }
    return o == Py_None ? NULL : Py_NewRef(o);
#endif
}

#endif
