/* module.c: the _gradtrace module: state, init and module-level functions. */
#include "state.h"

static int mod_exec(PyObject *m)
{
    modstate *ms = PyModule_GetState(m);
    ms->recorder_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &gt__rec_spec, NULL);
    if (!ms->recorder_type || PyModule_AddType(m, ms->recorder_type) < 0)
        return -1;
    ms->ent_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &gt__ent_spec, NULL);
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
        gt__kw_module_add(m) < 0)
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
