/* Whether orjson read a JSON text exactly: a compiled check of the values it returned.
 *
 * orjson reads an integer literal outside [-2**63, 2**64 - 1] as the nearest float
 * instead of refusing it, so a source that parses with orjson must find out whether
 * that happened and read such a text with the exact parser. Any float orjson makes that
 * way is at least 2**63 in magnitude, so a reading that holds no such float is exact.
 * The check used to look in the text for a run of 19 digits, which also matches digits
 * inside strings (a nanosecond timestamp, a snowflake id): every line holding one then
 * went through the pure-Python parser, about 40 times slower. Looking at the values
 * finds only numbers, costs about 1.5 ns a value, runs no Python code and allocates
 * nothing. jsonread.py falls back to the text check where this module is not built.
 *
 * rounded(value) -> bool: whether *value* (what orjson.loads returned) holds a float of
 * magnitude 2**63 or more, or nests deeper than orjson ever does (then it may, unchecked).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

/* orjson refuses documents nested deeper than 1,024 levels; a list of lines adds one. */
#define MAX_NESTING 1025
#define FIRST_INEXACT 9223372036854775808.0 /* 2**63 */

static int
holds_rounded(PyObject *obj, int depth)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t == &PyFloat_Type) {
        return fabs(PyFloat_AS_DOUBLE(obj)) >= FIRST_INEXACT;
    }
    if (t != &PyList_Type && t != &PyDict_Type) {
        return 0; /* a str, an int, a bool or None: read exactly */
    }
    if (depth >= MAX_NESTING) {
        return 1;
    }
    if (t == &PyList_Type) {
        /* Nothing here runs Python code, so the list cannot change under us. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); i++) {
            if (holds_rounded(PyList_GET_ITEM(obj, i), depth + 1)) {
                return 1;
            }
        }
        return 0;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(obj, &pos, &k, &v)) {
        if (holds_rounded(v, depth + 1)) {
            return 1;
        }
    }
    return 0;
}

static PyObject *
rounded(PyObject *module, PyObject *value)
{
    return PyBool_FromLong(holds_rounded(value, 0));
}

static PyMethodDef methods[] = {
    {"rounded", rounded, METH_O,
     "rounded(value) -> bool: whether orjson's *value* holds a float of magnitude 2**63 or "
     "more (where it may have rounded an integer literal)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_numbers", NULL, 0, methods,
};

PyMODINIT_FUNC
PyInit__numbers(void)
{
    return PyModule_Create(&module);
}
