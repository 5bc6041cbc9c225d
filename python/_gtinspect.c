/*
 * _gtinspect: the inspector, callable from Python (gradtrace.open, the
 * diagnosis printed after a failed run, the pytest plugin, notebooks).
 *
 * Why an extension over the inspector library rather than ctypes: the
 * library is static and internal (no stable ABI to dlopen), and the adapter
 * is already a CPython extension built the same way. Each function calls
 * the library the `gradtrace` command calls (report.h, info.h, history.h,
 * graph.h) and returns what it builds, byte for byte what the command
 * prints. Failures raise OSError (the trace cannot be opened) or ValueError
 * (it cannot be read, or names nothing asked for), the message the
 * command's one line without "gradtrace: ". The GIL is held throughout.
 *
 *   diagnose(path, backward=0, text=False, color=False) -> (status, str)
 *       the `diagnose --json` document (or with text the report a person
 *       reads) and the exit status the command gives (0, 1, 2)
 *   info(path) -> str             the `info --json` document
 *   history(path, what, reads=False, all=False) -> str
 *                                 the `history --json` rows
 *   memory(path, call=0, all=False) -> str
 *                                 the `memory --json` document
 *   graph(path, format, output=None, backward=0, hops=-1, all=False,
 *         legend=True) -> (bytes | None, notes: str)
 *       the drawing (or None once written to output) and what drawing it
 *       noted (Graphviz's messages, a diagnosis that could not run)
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

#include <gradtrace/graph_render.h>
#include <gradtrace/history.h>
#include <gradtrace/info.h>
#include <gradtrace/memory.h>
#include <gradtrace/report.h>
#include <gradtrace/sql_guard.h>
#include <gradtrace/trace.h>

/* Open the trace at path as the commands do (with gradtrace's views when
 * views is set); NULL with OSError set when it cannot be. */
static gt_trace *open_trace(const char *path, int views)
{
    gt_trace *t = NULL;
    if (gt_trace_open(path, &t) != GT_OK || (views && gt_trace_use_views(t) != GT_OK)) {
        PyErr_Format(PyExc_OSError, "%s", gt_trace_errmsg(t));
        gt_trace_close(t);
        return NULL;
    }
    return t;
}

/* A str of text[0..len) (a damaged trace may hold invalid UTF-8: shown,
 * never failing). */
static PyObject *text_of(const char *text, size_t len)
{
    return PyUnicode_DecodeUTF8(text ? text : "", (Py_ssize_t)len, "replace");
}

static PyObject *gtinspect_diagnose(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"path", "backward", "text", "color", NULL};
    const char *path;
    long long backward = 0;
    int text = 0, color = 0;
    gt_report r = {0};
    gt_strbuf out = GT_STRBUF_INIT;
    PyObject *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Lpp:diagnose", kwlist, &path, &backward,
                                     &text, &color))
        return NULL;
    if (backward < 0) {
        PyErr_SetString(PyExc_ValueError, "backward wants a call number (1, 2, ...)");
        return NULL;
    }
    gt_trace *t = open_trace(path, 0);
    if (!t)
        return NULL;
    gt_diagnose_options opts = {.backward = backward};
    if (gt_report_build(t, path, &opts, &r) != 0 ||
        (text && gt_report_text(t, &r, path, color, &out) != 0)) {
        PyErr_Format(PyExc_ValueError, "diagnose %s: %s", path, gt_trace_errmsg(t));
        goto out;
    }
    if (!text &&
        (gt_strbuf_adds(&out, r.doc) != 0 || gt_strbuf_add(&out, "\n", 1) != 0)) {
        PyErr_NoMemory();
        goto out;
    }
    PyObject *str = text_of(gt_strbuf_str(&out), out.len);
    if (str) {
        result = Py_BuildValue("(iN)", r.status, str);
    }
out:
    gt_strbuf_release(&out);
    gt_report_release(&r);
    gt_trace_close(t);
    return result;
}

/* What a library call wrote to a memory stream, as str; f is closed. NULL
 * with an exception set when the stream could not be written. */
static PyObject *stream_text(FILE *f, char **buf, size_t *len)
{
    if (fclose(f) != 0) {
        PyErr_NoMemory();
        return NULL;
    }
    return text_of(*buf, *len);
}

static PyObject *gtinspect_info(PyObject *module, PyObject *args)
{
    (void)module;
    const char *path;
    char *buf = NULL;
    size_t len = 0;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "s:info", &path))
        return NULL;
    gt_trace *t = open_trace(path, 1);
    if (!t)
        return NULL;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    int rc = gt_info_print(t, 1, 0, f);
    PyObject *str = stream_text(f, &buf, &len);
    if (str && rc == SQLITE_OK) {
        result = str;
    } else if (str) {
        Py_DECREF(str);
        PyErr_Format(PyExc_ValueError, "info: cannot read %s: %s", path,
                     rc == SQLITE_CORRUPT ? "no run row"
                     : rc == SQLITE_NOMEM ? "out of memory"
                                          : sqlite3_errmsg(gt_trace_db(t)));
    }
out:
    free(buf);
    gt_trace_close(t);
    return result;
}

static PyObject *gtinspect_history(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"path", "what", "reads", "all", NULL};
    const char *path, *what;
    int reads = 0, all = 0;
    char *buf = NULL;
    size_t len = 0;
    PyObject *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|pp:history", kwlist, &path, &what,
                                     &reads, &all))
        return NULL;
    gt_trace *t = open_trace(path, 1);
    if (!t)
        return NULL;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    int rc = gt_history_print(t, path, what, reads, all, 1, f);
    PyObject *str = stream_text(f, &buf, &len);
    if (str && rc == 0) {
        result = str;
    } else if (str) {
        Py_DECREF(str);
        if (rc == 1)
            PyErr_Format(PyExc_ValueError, "history: %s", gt_trace_errmsg(t));
        else
            PyErr_Format(PyExc_ValueError, "history %s: %s", path, gt_trace_errmsg(t));
    }
out:
    free(buf);
    gt_trace_close(t);
    return result;
}

static PyObject *gtinspect_memory(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"path", "call", "all", NULL};
    const char *path;
    long long call = 0;
    int all = 0;
    gt_memory *m = NULL;
    gt_strbuf out = GT_STRBUF_INIT;
    PyObject *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Lp:memory", kwlist, &path, &call, &all))
        return NULL;
    gt_trace *t = open_trace(path, 0);
    if (!t)
        return NULL;
    gt_memory_options opts = {.backward = call, .all = all};
    if (gt_memory_measure(t, &opts, &m) != 0) {
        PyErr_Format(PyExc_ValueError, "memory %s: %s", path, gt_trace_errmsg(t));
        goto out;
    }
    if (gt_memory_json(t, m, &out) != 0 || gt_strbuf_add(&out, "\n", 1) != 0) {
        PyErr_Format(PyExc_ValueError, "memory: %s", gt_trace_errmsg(t));
        goto out;
    }
    result = text_of(gt_strbuf_str(&out), out.len);
out:
    gt_strbuf_release(&out);
    gt_memory_free(m);
    gt_trace_close(t);
    return result;
}

/* Graphviz's messages, one "graphviz: <line>" line each, appended to b. */
static void add_warnings(gt_strbuf *b, const char *w)
{
    while (*w) {
        const char *nl = strchr(w, '\n');
        int n = nl ? (int)(nl - w) : (int)strlen(w);
        gt_strbuf_addf(b, "graphviz: %.*s\n", n, w);
        w += n + (nl != NULL);
    }
}

static PyObject *gtinspect_graph(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"path", "format", "output", "backward",
                             "hops", "all",    "legend", NULL};
    const char *path, *format_name, *output = NULL;
    long long backward = 0;
    int hops = -1, all = 0, legend = 1, format;
    gt_graph *g = NULL;
    gt_strbuf notes = GT_STRBUF_INIT;
    char *data = NULL;
    size_t len = 0;
    PyObject *result = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|zLipp:graph", kwlist, &path,
                                     &format_name, &output, &backward, &hops, &all,
                                     &legend))
        return NULL;
    if (gt_graph_format_parse(format_name, &format) != 0) {
        PyErr_Format(PyExc_ValueError, "graph: unknown format '%s' (use dot, svg or png)",
                     format_name);
        return NULL;
    }
    gt_trace *t = open_trace(path, 0);
    if (!t)
        return NULL;
    gt_graph_options opts = {
        .backward = backward, .hops = hops, .all = all, .no_legend = !legend};
    if (gt_graph_build_focused(t, &opts, &g, &notes) != 0) {
        PyErr_Format(PyExc_ValueError, "graph: %s", gt_trace_errmsg(t));
        goto out;
    }
    int rc = output ? gt_graph_render(g, format, output)
                    : gt_graph_render_data(g, format, &data, &len);
    add_warnings(&notes, gt_graph_warnings(g));
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "graph: %s", gt_graph_errmsg(g));
        goto out;
    }
    if (notes.oom) {
        PyErr_NoMemory();
        goto out;
    }
    PyObject *drawing =
        output ? Py_NewRef(Py_None)
               : PyBytes_FromStringAndSize(data ? data : "", (Py_ssize_t)len);
    PyObject *said = drawing ? text_of(gt_strbuf_str(&notes), notes.len) : NULL;
    if (said)
        result = PyTuple_Pack(2, drawing, said);
    Py_XDECREF(drawing);
    Py_XDECREF(said);
out:
    free(data);
    gt_strbuf_release(&notes);
    gt_graph_free(g);
    gt_trace_close(t);
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
    if (gt_db_prepare_first(db, sql, &st, &tail) != SQLITE_OK) {
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
    {"diagnose", (PyCFunction)(void (*)(void))gtinspect_diagnose,
     METH_VARARGS | METH_KEYWORDS,
     "diagnose(path, backward=0, text=False, color=False) -> (status, str)"},
    {"info", gtinspect_info, METH_VARARGS, "info(path) -> str: the info --json document"},
    {"history", (PyCFunction)(void (*)(void))gtinspect_history,
     METH_VARARGS | METH_KEYWORDS,
     "history(path, what, reads=False, all=False) -> str: the history --json rows"},
    {"memory", (PyCFunction)(void (*)(void))gtinspect_memory,
     METH_VARARGS | METH_KEYWORDS,
     "memory(path, call=0, all=False) -> str: the memory --json document"},
    {"graph", (PyCFunction)(void (*)(void))gtinspect_graph, METH_VARARGS | METH_KEYWORDS,
     "graph(path, format, output=None, backward=0, hops=-1, all=False, legend=True)"
     " -> (bytes | None, notes)"},
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
