/*
 * What both extensions (_gradtrace, _gradtrace_engine) do the same way with
 * Python objects: the run row's fields from set_run's keywords, and the
 * `data` descriptor their data_set forwards to.
 */
#ifndef GRADTRACE_PYRUN_H
#define GRADTRACE_PYRUN_H

#include <Python.h>

#include <gradtrace/recorder.h>

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

#endif
