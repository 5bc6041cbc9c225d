/*
 * The run row's fields from Python keywords: the one parser of set_run that
 * both extensions (_gradtrace, _gradtrace_engine) use.
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

#endif
