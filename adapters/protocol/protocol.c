/*
 * protocol.c: the Python methods both adapters expose, once (see
 * protocol.h): argument parsing, the checks both make, and what both do the
 * same way (the run row, the `data` descriptor, opening and closing the
 * handle, a forked child); the capture itself through the adapter's hooks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>

#include "gt_pyrun.h"
#include "protocol.h"

#define PROTO(op) ((gt_proto *)(op))

int gt_proto_recording(const gt_proto *p)
{
    return p->r && p->on && p->active && !p->failed && !p->forked &&
           !gt_recorder_failed(p->r);
}

/* rc through the adapter's check hook. Returns rc. */
static int check(gt_proto *p, int rc)
{
    return p->hooks->check ? p->hooks->check(p, rc) : rc;
}

int gt_proto_open(gt_proto *p, const char *path, const gt_recorder_options *opts)
{
    if (p->r) {
        PyErr_SetString(PyExc_RuntimeError, "recorder already open");
        return -1;
    }
    char err[512] = "";
    gt_recorder *r = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    int rc = gt_recorder_open(path, opts, err, sizeof err, &r);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        PyObject *type = rc == GT_EEXIST ? PyExc_FileExistsError : PyExc_OSError;
        if (err[0])
            PyErr_Format(type, "gradtrace: %s", err);
        else
            PyErr_Format(type, "gradtrace: cannot create trace %s: %s", path,
                         gt_strerror(rc));
        return -1;
    }
    p->r = r;
    return 0;
}

/* set_run(**run_info): the run row's fields (gt_py_run_info) */
PyObject *gt_proto_set_run(PyObject *op, PyObject *args, PyObject *kw)
{
    gt_proto *p = PROTO(op);
    gt_run_info ri;
    if (gt_py_run_info(args, kw, &ri) < 0)
        return NULL;
    if (p->r && !p->forked && !p->failed)
        check(p, gt_run_set(p->r, &ri));
    Py_RETURN_NONE;
}

/* set_active(bool): open or close the recorded window */
PyObject *gt_proto_set_active(PyObject *op, PyObject *arg)
{
    gt_proto *p = PROTO(op);
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    p->hooks->set_active(p, on);
    Py_RETURN_NONE;
}

/* backward_begin(api, roots, retain_graph, create_graph, inputs) -> id (0:
 * not recorded) */
PyObject *gt_proto_backward_begin(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    const char *api;
    PyObject *roots, *inputs;
    int retain, create;
    if (!PyArg_ParseTuple(args, "sOppO", &api, &roots, &retain, &create, &inputs))
        return NULL;
    if (!gt_proto_recording(p))
        return PyLong_FromLong(0);
    return p->hooks->backward_begin(p, api, roots, retain, create, inputs);
}

/* backward_end(id, exc_or_None): how backward `id` ended; an exception is
 * written (and committed) before the caller re-raises it */
PyObject *gt_proto_backward_end(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    unsigned long long id;
    PyObject *exc;
    if (!PyArg_ParseTuple(args, "KO", &id, &exc))
        return NULL;
    p->hooks->backward_end(p, id, exc);
    Py_RETURN_NONE;
}

/* call_begin(name, args, region) -> seq (0: not recorded): a Python-level
 * call the engine makes into user code (a custom autograd.Function's
 * apply, a checkpointed function) as an ops row named `name`, with the
 * caller's stack and the tensors of `args` as inputs. region: a
 * non-reentrant checkpoint until call_end(seq). */
PyObject *gt_proto_call_begin(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    PyObject *name, *inputs;
    int region;
    if (!PyArg_ParseTuple(args, "UOp", &name, &inputs, &region))
        return NULL;
    if (!gt_proto_recording(p))
        return PyLong_FromLong(0);
    return p->hooks->call_begin(p, name, inputs, region);
}

/* call_end(seq, result_or_None): the call `seq` returned `result` (None: it
 * raised): its outputs and the nodes they got */
PyObject *gt_proto_call_end(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    unsigned long long seq;
    PyObject *result;
    if (!PyArg_ParseTuple(args, "KO", &seq, &result))
        return NULL;
    if (seq)
        p->hooks->call_end(p, seq, result);
    Py_RETURN_NONE;
}

/* error(exc): record an exception that ends the run, at the innermost
 * frame of its traceback */
PyObject *gt_proto_error(PyObject *op, PyObject *exc)
{
    gt_proto *p = PROTO(op);
    if (p->r && !p->forked)
        p->hooks->error(p, exc);
    Py_RETURN_NONE;
}

/* watch_data(descriptor): the `data` getset descriptor of torch's tensor base
 * class, which data_set forwards to. */
PyObject *gt_proto_watch_data(PyObject *op, PyObject *descr)
{
    return gt_py_watch_data(&PROTO(op)->data_orig, descr);
}

int gt_proto_data_assign(gt_proto *p, PyObject *t, PyObject *value)
{
    return Py_TYPE(p->data_orig)->tp_descr_set(p->data_orig, t, value);
}

/* data_set(tensor, value): `tensor.data = value`, recorded where it happens.
 * The assignment replaces the tensor's storage without a version bump and
 * without an aten op, so no op capture sees it: the property the Python side
 * puts on torch.Tensor while recording calls this, which does the
 * assignment through the original descriptor (its result and its error are
 * the user's) and has the adapter record a storage swap at the assigning
 * line's stack. */
PyObject *gt_proto_data_set(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    PyObject *t, *value;
    if (!PyArg_ParseTuple(args, "OO", &t, &value))
        return NULL;
    if (!p->data_orig) {
        PyErr_SetString(PyExc_RuntimeError, "data_set before watch_data");
        return NULL;
    }
    if (p->hooks->data_set(p, t, value) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* forget(tensor): let go of t's entry (torch.utils.swap_tensors refuses a
 * tensor with a weak reference); t is recorded anew when next seen */
PyObject *gt_proto_forget(PyObject *op, PyObject *t)
{
    gt_proto *p = PROTO(op);
    p->hooks->forget(p, t);
    Py_RETURN_NONE;
}

/* observe_version(tensor): its version counter was set (not bumped) by
 * torch._C._autograd._unsafe_set_version_counter; record the value it has
 * now, before any node runs that checks it */
PyObject *gt_proto_observe_version(PyObject *op, PyObject *t)
{
    gt_proto *p = PROTO(op);
    p->hooks->observe_version(p, t);
    Py_RETURN_NONE;
}

/* flush(): commit what was recorded */
PyObject *gt_proto_flush(PyObject *op, PyObject *Py_UNUSED(unused))
{
    gt_proto *p = PROTO(op);
    if (p->r && !p->forked)
        p->hooks->flush(p);
    Py_RETURN_NONE;
}

/* close(status, exit_code, signal) -> None or the recorder's error message:
 * the adapter stops and writes the run's end (close_begin), the handle is
 * closed with the GIL released (writing the last rows and the indexes can
 * take seconds; other threads run meanwhile, and with r NULL an op they run
 * passes through), then the adapter frees what it kept (close_end). */
PyObject *gt_proto_close(PyObject *op, PyObject *args)
{
    gt_proto *p = PROTO(op);
    int status = GT_RUN_OK, exit_code = 0, sig = 0;
    if (!PyArg_ParseTuple(args, "|iii", &status, &exit_code, &sig))
        return NULL;
    if (!p->r || p->forked)
        Py_RETURN_NONE;
    if (p->hooks->close_begin(p, status, exit_code, sig) > 0)
        Py_RETURN_NONE;
    gt_recorder *r = p->r;
    p->r = NULL;
    char msg[512] = "";
    if (p->failed)
        snprintf(msg, sizeof msg, "%s", gt_recorder_errmsg(r));
    char close_msg[512] = "";
    PyThreadState *ts = PyEval_SaveThread();
    int rc = gt_recorder_close_msg(r, close_msg, sizeof close_msg);
    PyEval_RestoreThread(ts);
    if (p->hooks->close_end)
        p->hooks->close_end(p);
    if (rc == GT_EFULL && !p->failed) {
        /* the size cap (or a full disk) stopped the last batch: said as any
         * stop is; the trace is complete up to there */
        PySys_WriteStderr("gradtrace: %s\n", close_msg);
        return PyUnicode_FromString(close_msg);
    }
    if (rc < 0 && !p->failed) {
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

/* forked(): called in a forked child; never touch the parent's trace. */
PyObject *gt_proto_forked(PyObject *op, PyObject *Py_UNUSED(unused))
{
    gt_proto *p = PROTO(op);
    p->forked = 1;
    p->active = 0;
    if (p->hooks->forked)
        p->hooks->forked(p);
    p->on = 0;
    p->r = NULL; /* the parent's connection: leaked on purpose */
    Py_RETURN_NONE;
}

PyObject *gt_proto_get_recording(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(gt_proto_recording(PROTO(op)));
}

PyObject *gt_proto_get_failed(PyObject *op, void *c)
{
    (void)c;
    gt_proto *p = PROTO(op);
    return PyBool_FromLong(p->failed || (p->r && gt_recorder_failed(p->r)));
}

PyObject *gt_proto_get_seq(PyObject *op, void *c)
{
    (void)c;
    gt_proto *p = PROTO(op);
    return PyLong_FromLongLong(p->r ? gt_recorder_seq(p->r) : 0);
}
