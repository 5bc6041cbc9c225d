/*
 * _gtinspect: the inspector, callable from Python (gradtrace.open, the
 * diagnosis printed after a failed run, the pytest plugin, notebooks).
 *
 * Why an extension over the inspector library rather than ctypes: the
 * library is static and internal (no stable ABI to dlopen), the adapter is
 * already a CPython extension built the same way, and the commands' JSON
 * (diagnose --json, history --json, info --json) is the documented output
 * Python should get, byte for byte the same as the command line's.
 *
 *   run(args) -> (status, stdout: bytes, stderr: bytes)
 *       runs one reading subcommand (diagnose, graph, sql, info, history,
 *       memory)
 *       in this process, as `gradtrace ARGS...` would, with its stdout and
 *       stderr captured in memory. The GIL is held throughout: the commands
 *       use getopt's globals and write to the C library's stdout/stderr,
 *       which are pointed at memory streams for the call. `record` is not
 *       available (it replaces the process).
 *   query(path, sql, params) -> (columns: tuple[str], rows: list[tuple])
 *       one read-only statement on the trace, through the same guard as
 *       `gradtrace sql`; params is a sequence (?, ?NNN) or a mapping
 *       (:name, @name, $name); values are None, int, float, str or bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "sql_guard.h"
#include "trace.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"diagnose", gt_cmd_diagnose}, {"graph", gt_cmd_graph},     {"sql", gt_cmd_sql},
    {"info", gt_cmd_info},         {"history", gt_cmd_history}, {"memory", gt_cmd_memory},
};

/* Free argv[0..argc) and argv; accepts NULL. */
static void argv_free(char **argv, Py_ssize_t argc)
{
    if (!argv)
        return;
    for (Py_ssize_t i = 0; i < argc; i++)
        free(argv[i]);
    free(argv);
}

/* A NULL-terminated, writable copy of a sequence of str (getopt permutes
 * argv and `sql -p` writes into it). NULL with an exception set on error. */
static char **argv_from(PyObject *seq, Py_ssize_t *argc /* OUT */)
{
    PyObject *fast = PySequence_Fast(seq, "args must be a sequence of str");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **argv = calloc((size_t)n + 1, sizeof *argv);
    Py_ssize_t i = 0;
    if (!argv) {
        PyErr_NoMemory();
        goto fail;
    }
    for (; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t len;
        const char *s;
        if (PyUnicode_Check(item)) {
            s = PyUnicode_AsUTF8AndSize(item, &len);
        } else {
            PyErr_SetString(PyExc_TypeError, "args must be a sequence of str");
            goto fail;
        }
        if (!s)
            goto fail;
        if ((Py_ssize_t)strlen(s) != len) {
            PyErr_SetString(PyExc_ValueError, "embedded null character in args");
            goto fail;
        }
        if (!(argv[i] = strdup(s))) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    Py_DECREF(fast);
    *argc = n;
    return argv;
fail:
    argv_free(argv, i);
    Py_DECREF(fast);
    return NULL;
}

static PyObject *gtinspect_run(PyObject *module, PyObject *args_obj)
{
    (void)module;
    Py_ssize_t argc = 0;
    char **argv = argv_from(args_obj, &argc);
    PyObject *result = NULL;
    char *out = NULL, *err = NULL;
    size_t nout = 0, nerr = 0;
    FILE *fout = NULL, *ferr = NULL;
    int (*fn)(int, char **) = NULL;

    if (!argv)
        return NULL;
    for (size_t i = 0; argc > 0 && i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[0], commands[i].name))
            fn = commands[i].run;
    if (!fn) {
        PyErr_Format(PyExc_ValueError, "not a reading gradtrace command: %s",
                     argc > 0 ? argv[0] : "(none)");
        goto out;
    }
    if (!(fout = open_memstream(&out, &nout)) || !(ferr = open_memstream(&err, &nerr))) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    fflush(stdout);
    fflush(stderr);
    FILE *saved_out = stdout, *saved_err = stderr;
    stdout = fout;
    stderr = ferr;
    optind = 0; /* getopt starts over, with its permutation state */
    int status = fn((int)argc, argv);
    stdout = saved_out;
    stderr = saved_err;
    /* closing writes the buffers' final size; out and err stay ours */
    fclose(fout);
    fclose(ferr);
    fout = ferr = NULL;
    result = Py_BuildValue("(iy#y#)", status, out ? out : "", (Py_ssize_t)nout,
                           err ? err : "", (Py_ssize_t)nerr);
out:
    if (fout)
        fclose(fout);
    if (ferr)
        fclose(ferr);
    free(out);
    free(err);
    argv_free(argv, argc);
    return result;
}

/* Bind one Python value to parameter k; 0, or -1 with an exception set. */
static int bind_value(sqlite3_stmt *st, int k, PyObject *v)
{
    int rc;
    if (v == Py_None) {
        rc = sqlite3_bind_null(st, k);
    } else if (PyBool_Check(v) || PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred())
            return -1;
        rc = sqlite3_bind_int64(st, k, x);
    } else if (PyFloat_Check(v)) {
        rc = sqlite3_bind_double(st, k, PyFloat_AS_DOUBLE(v));
    } else if (PyUnicode_Check(v)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(v, &len);
        if (!s)
            return -1;
        rc = sqlite3_bind_text64(st, k, s, (sqlite3_uint64)len, SQLITE_TRANSIENT,
                                 SQLITE_UTF8);
    } else if (PyBytes_Check(v)) {
        rc = sqlite3_bind_blob64(st, k, PyBytes_AS_STRING(v),
                                 (sqlite3_uint64)PyBytes_GET_SIZE(v), SQLITE_TRANSIENT);
    } else {
        PyErr_Format(
            PyExc_TypeError,
            "parameter %d: cannot bind %.100s (want None, int, float, str or bytes)", k,
            Py_TYPE(v)->tp_name);
        return -1;
    }
    if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_ValueError, "parameter %d: %s", k, sqlite3_errstr(rc));
        return -1;
    }
    return 0;
}

/* Bind params (a mapping by name, else a sequence by position) to every
 * parameter of st; 0, or -1 with an exception set. */
static int bind_params(sqlite3_stmt *st, PyObject *params)
{
    int count = sqlite3_bind_parameter_count(st);
    if (params == Py_None) {
        if (count) {
            PyErr_Format(PyExc_ValueError,
                         "the query has %d parameter%s and no values "
                         "were given",
                         count, count == 1 ? "" : "s");
            return -1;
        }
        return 0;
    }
    if (PyMapping_Check(params) && !PySequence_Check(params)) {
        for (int k = 1; k <= count; k++) {
            const char *name = sqlite3_bind_parameter_name(st, k);
            if (!name || !strchr(":@$", name[0])) {
                PyErr_Format(PyExc_ValueError,
                             "parameter %d has no name: give the "
                             "values as a sequence",
                             k);
                return -1;
            }
            PyObject *v = PyMapping_GetItemString(params, name + 1);
            if (!v) {
                if (PyErr_ExceptionMatches(PyExc_KeyError)) {
                    PyErr_Clear();
                    PyErr_Format(PyExc_ValueError, "no value for parameter %s", name);
                }
                return -1;
            }
            int rc = bind_value(st, k, v);
            Py_DECREF(v);
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    PyObject *fast = PySequence_Fast(params, "params must be a sequence or a mapping");
    if (!fast)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != count) {
        PyErr_Format(PyExc_ValueError, "the query has %d parameter%s, %zd values given",
                     count, count == 1 ? "" : "s", PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    for (int k = 1; k <= count; k++) {
        if (bind_value(st, k, PySequence_Fast_GET_ITEM(fast, k - 1)) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* Column i of the current row as a new Python object, or NULL. */
static PyObject *column_value(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return PyLong_FromLongLong(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return PyFloat_FromDouble(sqlite3_column_double(st, i));
    case SQLITE_TEXT: {
        const char *s = (const char *)sqlite3_column_text(st, i);
        /* a damaged trace may hold invalid UTF-8: show it, never fail */
        return PyUnicode_DecodeUTF8(s ? s : "", sqlite3_column_bytes(st, i), "replace");
    }
    case SQLITE_BLOB: {
        const void *b = sqlite3_column_blob(st, i);
        return PyBytes_FromStringAndSize(b ? b : "", sqlite3_column_bytes(st, i));
    }
    default:
        Py_RETURN_NONE;
    }
}

static PyObject *gtinspect_query(PyObject *module, PyObject *args)
{
    (void)module;
    const char *path, *sql;
    PyObject *params = Py_None;
    gt_trace *t = NULL;
    sqlite3_stmt *st = NULL;
    gt_sql_guard g = GT_SQL_GUARD_INIT;
    PyObject *columns = NULL, *rows = NULL, *result = NULL;

    if (!PyArg_ParseTuple(args, "ss|O:query", &path, &sql, &params))
        return NULL;
    if (gt_trace_open(path, &t) != GT_OK || gt_trace_use_views(t) != GT_OK) {
        PyErr_Format(PyExc_OSError, "%s", gt_trace_errmsg(t));
        goto out;
    }
    sqlite3 *db = gt_trace_db(t);
    if (gt_sql_guard_connection(db, &g) != SQLITE_OK) {
        PyErr_Format(PyExc_OSError, "cannot make %s read-only: %s", path,
                     sqlite3_errmsg(db));
        goto out;
    }
    const char *tail = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, &tail) != SQLITE_OK) {
        const char *why = gt_sql_guard_why(&g);
        PyErr_Format(PyExc_ValueError, "%s%s", why[0] ? "refused: " : "",
                     why[0] ? why : sqlite3_errmsg(db));
        goto out;
    }
    if (!st) {
        PyErr_SetString(PyExc_ValueError, "no SQL statement in the query");
        goto out;
    }
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';' ||
                    *tail == '\r'))
        tail++;
    if (tail && *tail) {
        PyErr_SetString(PyExc_ValueError, "one statement at a time: the query goes on "
                                          "after its first statement");
        goto out;
    }
    if (!sqlite3_stmt_readonly(st)) {
        PyErr_Format(PyExc_ValueError,
                     "refused: the trace is read-only and this statement "
                     "would write: %s",
                     sqlite3_sql(st));
        goto out;
    }
    if (bind_params(st, params) < 0)
        goto out;
    int ncol = sqlite3_column_count(st);
    if (!(columns = PyTuple_New(ncol)) || !(rows = PyList_New(0)))
        goto out;
    for (int i = 0; i < ncol; i++) {
        const char *name = sqlite3_column_name(st, i);
        PyObject *s =
            PyUnicode_DecodeUTF8(name ? name : "", name ? strlen(name) : 0, "replace");
        if (!s)
            goto out;
        PyTuple_SET_ITEM(columns, i, s);
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        PyObject *row = PyTuple_New(ncol);
        if (!row)
            goto out;
        for (int i = 0; i < ncol; i++) {
            PyObject *v = column_value(st, i);
            if (!v) {
                Py_DECREF(row);
                goto out;
            }
            PyTuple_SET_ITEM(row, i, v);
        }
        int added = PyList_Append(rows, row);
        Py_DECREF(row);
        if (added < 0)
            goto out;
    }
    if (rc != SQLITE_DONE) {
        PyErr_Format(PyExc_ValueError, "%s", sqlite3_errmsg(db));
        goto out;
    }
    result = PyTuple_Pack(2, columns, rows);
out:
    Py_XDECREF(columns);
    Py_XDECREF(rows);
    sqlite3_finalize(st);
    gt_trace_close(t);
    gt_sql_guard_release(&g);
    return result;
}

static PyMethodDef gtinspect_methods[] = {
    {"run", gtinspect_run, METH_O,
     "run(args) -> (status, stdout, stderr): run a reading gradtrace command in process"},
    {"query", gtinspect_query, METH_VARARGS,
     "query(path, sql, params=None) -> (columns, rows): one read-only statement"},
    {NULL, NULL, 0, NULL},
};

static int gtinspect_exec(PyObject *m)
{
    if (PyModule_AddStringConstant(m, "VERSION", GT_VERSION_STRING) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "SCHEMA_VERSION", GT_SCHEMA_VERSION);
}

static PyModuleDef_Slot gtinspect_slots[] = {
    {Py_mod_exec, gtinspect_exec},
    {0, NULL},
};

static struct PyModuleDef gtinspect_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_gtinspect",
    .m_doc = "gradtrace's trace inspector, in process (see gradtrace.open)",
    .m_size = 0,
    .m_methods = gtinspect_methods,
    .m_slots = gtinspect_slots,
};

PyMODINIT_FUNC PyInit__gtinspect(void)
{
    return PyModuleDef_Init(&gtinspect_module);
}
