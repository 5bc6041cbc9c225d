/* set_run's keywords to a gt_run_info; see gt_pyrun.h. */
#define PY_SSIZE_T_CLEAN
#include "gt_pyrun.h"

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
