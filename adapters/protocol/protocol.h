/*
 * The protocol both adapters implement: the Python methods the package
 * (python/gradtrace/_recording.py, _mode.py, _dist.py) calls on whichever
 * recorder object is active, written once here over a head both objects
 * start with (GT_PROTO_HEAD, as PyObject_HEAD is shared). What differs, the
 * adapter's capture, it hands over as hooks (gt_proto_ops).
 *
 * Invariants: r is NULL before open, after close and in a forked child;
 * forked is set once, in a forked child, and then nothing touches r (the
 * parent's connection, leaked on purpose); failed, once set, stays set.
 * Every method runs with the GIL held; every hook too. Nothing a hook does
 * may raise into the recorded program except where its comment says so.
 *
 * The methods (GT_PROTO_METHODS, GT_PROTO_GETSET), as Python sees them:
 *
 *   set_run(**run_info)          fill in the run row
 *   set_active(bool)             open/close the recorded window
 *   backward_begin(api, roots, retain_graph, create_graph, inputs) -> id
 *   backward_end(id, exc_or_None)
 *   call_begin(name, args, region) -> seq    a call into user code
 *   call_end(seq, result_or_None)
 *   error(exc)                   the exception ending the run
 *   watch_data(descriptor)       the `data` descriptor data_set forwards to
 *   data_set(tensor, value)      `tensor.data = value`, the swap recorded
 *   forget(tensor)               drop its entry (before swap_tensors)
 *   observe_version(tensor)      record the version its counter was set to
 *   flush()                      commit what was recorded
 *   close(status=0, exit_code=0, signal=0) -> None or the error message
 *   forked()                     in a forked child: stop without writing
 *   recording, failed, seq       getters
 */
#ifndef GRADTRACE_PROTOCOL_H
#define GRADTRACE_PROTOCOL_H

#include <Python.h>

#include <gradtrace/recorder.h>

typedef struct gt_proto gt_proto;

/* What an adapter does its own way. Each hook gets the object (a gt_proto
 * head) and the arguments the method parsed; a hook that returns PyObject *
 * returns a new reference, or NULL with a Python error. NULL hooks: none. */
typedef struct gt_proto_ops {
    /* rc of a recorder call: stop recording on a write failure (the
     * dispatch adapter warns here); returns rc */
    int (*check)(gt_proto *p, int rc);
    /* called only while gt_proto_recording: record the backward call's
     * start; returns its id (an int, 0: not recorded) */
    PyObject *(*backward_begin)(gt_proto *p, const char *api, PyObject *roots,
                                int retain_graph, int create_graph, PyObject *inputs);
    /* how backward call id (0: not recorded) ended; exc: None or what it
     * raised */
    void (*backward_end)(gt_proto *p, unsigned long long id, PyObject *exc);
    /* called only while gt_proto_recording: record a call into user code;
     * returns its seq (an int, 0: not recorded) */
    PyObject *(*call_begin)(gt_proto *p, PyObject *name, PyObject *inputs, int region);
    /* call seq (never 0) returned result (None: it raised) */
    void (*call_end)(gt_proto *p, unsigned long long seq, PyObject *result);
    /* called only while r is open and not forked: the exception ending
     * the run */
    void (*error)(gt_proto *p, PyObject *exc);
    /* commit what was recorded */
    void (*flush)(gt_proto *p);
    /* let go of tensor t's entry */
    void (*forget)(gt_proto *p, PyObject *t);
    /* t's version counter was set: record the value it has */
    void (*observe_version)(gt_proto *p, PyObject *t);
    /* open (on) or close the recorded window */
    void (*set_active)(gt_proto *p, int on);
    /* `t.data = value`: do it with gt_proto_data_assign and record the
     * swap; returns 0, or -1 with the assignment's Python error */
    int (*data_set)(gt_proto *p, PyObject *t, PyObject *value);
    /* close, first part (r open, not forked): stop capturing and write the
     * run's end (gt_run_end). Returns 0 to close the handle, 1 to leave it
     * be (close called from a signal handler inside an op) */
    int (*close_begin)(gt_proto *p, int status, int exit_code, int sig);
    /* close, last part: the handle is closed (r is NULL); free what the
     * adapter kept for it */
    void (*close_end)(gt_proto *p);
    /* in a forked child, before r is dropped: let go of the capture */
    void (*forked)(gt_proto *p);
} gt_proto_ops;

/* The head both recorder objects start with (written `GT_PROTO_HEAD;`). */
#define GT_PROTO_HEAD                                                                    \
    PyObject_HEAD gt_recorder *r;                                                        \
    const gt_proto_ops *hooks;                                                           \
    int on;             /* the adapter captures (dispatch: open; engine: started) */     \
    int active;         /* inside the recorded window */                                 \
    int failed;         /* a write failure stopped recording for good */                 \
    int forked;         /* a forked child: never touch r */                              \
    PyObject *data_orig /* the `data` descriptor data_set forwards to (owned) */

struct gt_proto {
    GT_PROTO_HEAD;
};

/* Are ops being recorded now: open, capturing, inside the window, neither
 * failed nor forked. Can't fail. */
int gt_proto_recording(const gt_proto *p);

/* Open the trace at path into p->r. Returns 0, or -1 with FileExistsError
 * (the file is there and opts->overwrite is 0) or OSError, worded
 * "gradtrace: <what failed>". */
int gt_proto_open(gt_proto *p, const char *path, const gt_recorder_options *opts);

/* The assignment data_set records: `t.data = value` through the original
 * descriptor. Returns 0, or -1 with its Python error (the user's). */
int gt_proto_data_assign(gt_proto *p, PyObject *t, PyObject *value);

/* The methods and getters, for the adapters' tables. */
PyObject *gt_proto_set_run(PyObject *op, PyObject *args, PyObject *kw);
PyObject *gt_proto_set_active(PyObject *op, PyObject *arg);
PyObject *gt_proto_backward_begin(PyObject *op, PyObject *args);
PyObject *gt_proto_backward_end(PyObject *op, PyObject *args);
PyObject *gt_proto_call_begin(PyObject *op, PyObject *args);
PyObject *gt_proto_call_end(PyObject *op, PyObject *args);
PyObject *gt_proto_error(PyObject *op, PyObject *exc);
PyObject *gt_proto_watch_data(PyObject *op, PyObject *descr);
PyObject *gt_proto_data_set(PyObject *op, PyObject *args);
PyObject *gt_proto_forget(PyObject *op, PyObject *t);
PyObject *gt_proto_observe_version(PyObject *op, PyObject *t);
PyObject *gt_proto_flush(PyObject *op, PyObject *unused);
PyObject *gt_proto_close(PyObject *op, PyObject *args);
PyObject *gt_proto_forked(PyObject *op, PyObject *unused);
PyObject *gt_proto_get_recording(PyObject *op, void *c);
PyObject *gt_proto_get_failed(PyObject *op, void *c);
PyObject *gt_proto_get_seq(PyObject *op, void *c);

/* The protocol's entries of a PyMethodDef table: put first in each
 * adapter's table, its own methods after. */
#define GT_PROTO_METHODS                                                                 \
    {"set_run", (PyCFunction)(void (*)(void))gt_proto_set_run,                           \
     METH_VARARGS | METH_KEYWORDS, "set_run(**run_info): fill in the run row"},          \
        {"set_active", gt_proto_set_active, METH_O,                                      \
         "set_active(bool): open/close the window"},                                     \
        {"backward_begin", gt_proto_backward_begin, METH_VARARGS,                        \
         "backward_begin(api, roots, retain_graph, create_graph, inputs) -> id"},        \
        {"backward_end", gt_proto_backward_end, METH_VARARGS,                            \
         "backward_end(id, exc_or_None)"},                                               \
        {"call_begin", gt_proto_call_begin, METH_VARARGS,                                \
         "call_begin(name, args, region) -> seq: record a call into user code"},         \
        {"call_end", gt_proto_call_end, METH_VARARGS,                                    \
         "call_end(seq, result_or_None): its outputs and the nodes they got"},           \
        {"error", gt_proto_error, METH_O,                                                \
         "error(exc): record the exception ending the run"},                             \
        {"watch_data", gt_proto_watch_data, METH_O,                                      \
         "watch_data(descriptor): the tensor base class's `data` descriptor"},           \
        {"data_set", gt_proto_data_set, METH_VARARGS,                                    \
         "data_set(tensor, value): `tensor.data = value`, with the swap recorded"},      \
        {"forget", gt_proto_forget, METH_O,                                              \
         "forget(tensor): drop its entry and weak reference (before swap_tensors)"},     \
        {"observe_version", gt_proto_observe_version, METH_O,                            \
         "observe_version(tensor): record the version its counter was set to"},          \
        {"flush", gt_proto_flush, METH_NOARGS, "commit what was recorded"},              \
        {"close", gt_proto_close, METH_VARARGS,                                          \
         "close(status=0, exit_code=0, signal=0): end the run and close the trace; "     \
         "returns the recorder's error message or None"},                                \
    {                                                                                    \
        "forked", gt_proto_forked, METH_NOARGS,                                          \
            "in a forked child: stop without writing"                                    \
    }

/* The protocol's entries of a PyGetSetDef table. */
#define GT_PROTO_GETSET                                                                  \
    {"recording", gt_proto_get_recording, NULL, "True while ops are being recorded",     \
     NULL},                                                                              \
        {"failed", gt_proto_get_failed, NULL,                                            \
         "True once a write failure stopped recording", NULL},                           \
    {                                                                                    \
        "seq", gt_proto_get_seq, NULL, "events recorded so far", NULL                    \
    }

#endif
