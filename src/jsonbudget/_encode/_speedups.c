/* A compiled lower bound of the encoded size of a clean JSON value.
 *
 * Guarantee 5 forbids encoding an input whole to learn that it is too big, and orjson
 * has no bounded mode, so the encoder proves a lower bound of the size before each
 * orjson call. In pure Python that proof costs about what orjson spends encoding; this
 * walk costs a few nanoseconds a value, allocates nothing, runs no Python code (so the
 * containers it holds pointers into cannot change) and stops once the bound passes the
 * cap. `_bound.py` has the same walk in Python for when this module is not built; both
 * give the same numbers (tests/test_speedups.py).
 *
 * bound(obj, cap, depth, max_depth, max_items, max_keys, max_field, scalars) returns
 *   -1   when the value is not clean: it needs markers or cuts (NaN or an infinity, a
 *        non-str key, a container at max_depth, a list or tuple over max_items, a dict
 *        over max_keys, an aware datetime or time whose tzinfo is not the built-in
 *        timezone (orjson would call its Python code mid-walk), a string that might
 *        pass max_field, a cycle, a type other than the exact JSON ones or a subclass
 *        of one in the tuple *scalars*);
 *   n    otherwise, a lower bound of len(orjson.dumps(obj)); once n > cap the walk
 *        stops, so n may be below the true bound but is still above cap.
 * bound_items(items, ...) does the same for the items of a list or tuple, each at
 * *depth*, joined by commas, without brackets: a run of page or list items.
 *
 * clean_dumps(obj, cap, depth, (max_depth, max_items, max_keys, max_field, scalars)) is the
 * encoder's fast path in one call: orjson.dumps(obj) when the bound shows a clean value
 * that may fit and the bytes do fit, else 1 (too big) or 2 (unclean). compact(data)
 * copies bytes out of orjson's oversized buffer. A small object's whole encode used to
 * spend as much in the Python around these as in orjson.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>

/* PyDict_Next costs more than the rest of the walk together. On the CPython this is
   tested on, a dict whose keys are all exact str keeps them with their values in one
   array, which the walk reads directly; anywhere else it uses PyDict_Next. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API)
#define Py_BUILD_CORE 1
#include "internal/pycore_dict.h"
#undef Py_BUILD_CORE
#define DIRECT_DICT 1
#else
#define DIRECT_DICT 0
#endif

#define UNCLEAN (-1)
#define MAX_STACK 256 /* above _limits.MAX_DEPTH, so the ancestors always fit */

typedef struct {
    int max_depth;
    Py_ssize_t max_items; /* items of a list or tuple */
    Py_ssize_t max_keys;  /* members of a dict */
    Py_ssize_t max_chars; /* the longest string that fits max_field even as \u0000s */
    PyObject *scalars;
    int check_cycles;
    PyObject *ancestors[MAX_STACK];
} Walk;

/* Enters container *obj* at *depth*: 0, or UNCLEAN if it is its own ancestor.
 *
 * A cycle is unclean (orjson refuses it, the renderer marks it), and counting its
 * repeats would overstate its size. Scanning the ancestors of every container cost a
 * quarter of the walk, so the first walk skips it: a cycle then nests until max_depth
 * (UNCLEAN, right) or until the bound passes the cap, and only that answer is checked
 * by a second walk with the scan. Both walks stop at the cap, so the cost stays in
 * proportion to it. */
static inline int
enter(Walk *w, int depth, PyObject *obj)
{
    if (w->check_cycles) {
        for (int i = 0; i < depth; i++) {
            if (w->ancestors[i] == obj) {
                return UNCLEAN;
            }
        }
        w->ancestors[depth] = obj;
    }
    return 0;
}

static Py_ssize_t walk_other(Walk *w, PyObject *obj, int depth, Py_ssize_t cap);

/* The bound of an atomic value, or NOT_ATOMIC: inlined into the container loops, where
   almost every value is one. */
#define NOT_ATOMIC (-3)
static inline Py_ssize_t
atomic(const Walk *w, PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t == &PyUnicode_Type) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(obj);
        if (n > w->max_chars) {
            return UNCLEAN;
        }
        return n + 2;
    }
    if (t == &PyLong_Type || obj == Py_None || t == &PyBool_Type) {
        return 1;
    }
    if (t == &PyFloat_Type) {
        /* orjson writes NaN and the infinities as null: they need markers. */
        return isfinite(PyFloat_AS_DOUBLE(obj)) ? 1 : UNCLEAN;
    }
    return NOT_ATOMIC;
}

static Py_ssize_t
walk_dict(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    Py_ssize_t n = PyDict_GET_SIZE(obj);
    if (depth >= w->max_depth || n > w->max_keys || enter(w, depth, obj) < 0) {
        return UNCLEAN;
    }
    Py_ssize_t size = 1 + 4 * n; /* braces, quotes, colons and commas */
#if DIRECT_DICT
    PyDictObject *mp = (PyDictObject *)obj;
    if (mp->ma_values == NULL && DK_IS_UNICODE(mp->ma_keys)) {
        /* Nothing here runs Python code, so the table cannot change under us. */
        const PyDictUnicodeEntry *entries = DK_UNICODE_ENTRIES(mp->ma_keys);
        Py_ssize_t used = mp->ma_keys->dk_nentries;
        for (Py_ssize_t i = 0; i < used; i++) {
            PyObject *v = entries[i].me_value;
            if (v == NULL) { /* a deleted entry */
                continue;
            }
            Py_ssize_t sub = atomic(w, v);
            if (sub == NOT_ATOMIC) {
                sub = walk_other(w, v, depth + 1, cap - size);
            }
            if (sub < 0) {
                return sub;
            }
            size += PyUnicode_GET_LENGTH(entries[i].me_key) + sub;
            if (size > cap) {
                break;
            }
        }
        return size;
    }
#endif
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(obj, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) {
            return UNCLEAN;
        }
        Py_ssize_t sub = atomic(w, v);
        if (sub == NOT_ATOMIC) {
            sub = walk_other(w, v, depth + 1, cap - size);
        }
        if (sub < 0) {
            return sub;
        }
        size += PyUnicode_GET_LENGTH(k) + sub;
        if (size > cap) {
            break;
        }
    }
    return size;
}

/* The items of a list or tuple joined by commas, without brackets. */
static Py_ssize_t
walk_items(Walk *w, PyObject *const *items, Py_ssize_t n, int depth, Py_ssize_t cap)
{
    Py_ssize_t size = n ? n - 1 : 0;
    for (Py_ssize_t i = 0; i < n && size <= cap; i++) {
        /* Nothing here runs Python code, so the sequence cannot change under us. */
        Py_ssize_t sub = atomic(w, items[i]);
        if (sub == NOT_ATOMIC) {
            sub = walk_other(w, items[i], depth, cap - size);
        }
        if (sub < 0) {
            return sub;
        }
        size += sub;
    }
    return size;
}

static inline PyObject *const *
items_of(PyObject *seq)
{
    return PyList_CheckExact(seq) ? (PyObject *const *)((PyListObject *)seq)->ob_item
                                  : (PyObject *const *)((PyTupleObject *)seq)->ob_item;
}

/* The bound of a value that is not atomic: a container, a bounded scalar, or unclean. */
static Py_ssize_t
walk_other(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    Py_ssize_t size;
    PyTypeObject *t = Py_TYPE(obj);
    if (t == &PyDict_Type) {
        return walk_dict(w, obj, depth, cap);
    }
    if (t == &PyList_Type || t == &PyTuple_Type) {
        Py_ssize_t n = Py_SIZE(obj);
        if (depth >= w->max_depth || n > w->max_items) {
            return UNCLEAN;
        }
        if (n + 1 > cap) {
            return n + 1;
        }
        if (enter(w, depth, obj) < 0) {
            return UNCLEAN;
        }
        size = walk_items(w, items_of(obj), n, depth + 1, cap - 2);
        return size < 0 ? size : size + 2;
    }
    if (w->scalars != NULL) {
        /* By type alone: isinstance() may look up __class__, which can run Python code,
           and the walk holds pointers into the containers it is in. */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(w->scalars); i++) {
            PyObject *cls = PyTuple_GET_ITEM(w->scalars, i);
            if (PyType_Check(cls) && PyType_IsSubtype(t, (PyTypeObject *)cls)) {
                /* orjson asks an aware value's tzinfo for its offset: a tzinfo written in
                   Python could change the containers orjson is walking, so only the
                   built-in fixed-offset timezone is clean. */
                PyObject *tz = Py_None;
                if (PyDateTime_Check(obj)) {
                    tz = PyDateTime_DATE_GET_TZINFO(obj);
                }
                else if (PyTime_Check(obj)) {
                    tz = PyDateTime_TIME_GET_TZINFO(obj);
                }
                if (tz != Py_None && Py_TYPE(tz) != Py_TYPE(PyDateTime_TimeZone_UTC)) {
                    return UNCLEAN;
                }
                return 10; /* datetimes, dates, times and UUIDs: at least this long */
            }
        }
    }
    return UNCLEAN;
}

static Py_ssize_t
walk(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    Py_ssize_t size = atomic(w, obj);
    return size == NOT_ATOMIC ? walk_other(w, obj, depth, cap) : size;
}

/* Reads cap, depth and the caps into *w*; -1 with an exception set on bad ones. */
static int
setup(Walk *w, const char *name, PyObject *const *args, Py_ssize_t *cap, int *depth)
{
    /* args: cap, depth, max_depth, max_items, max_keys, max_field, scalars */
    *cap = PyLong_AsSsize_t(args[0]);
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_depth = PyLong_AsSsize_t(args[2]);
    w->max_items = PyLong_AsSsize_t(args[3]);
    w->max_keys = PyLong_AsSsize_t(args[4]);
    Py_ssize_t max_field = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (d < 0 || max_depth < 0 || max_depth >= MAX_STACK || d > max_depth) {
        PyErr_Format(PyExc_ValueError, "%s(): depth out of range", name);
        return -1;
    }
    *depth = (int)d;
    w->max_depth = (int)max_depth;
    /* A character encodes to at most 6 bytes (\u0000): under a field cap only a string
       that fits even then is clean without encoding it. */
    w->max_chars = max_field < 2 ? -1 : (max_field - 2) / 6;
    if (args[6] != Py_None && !PyTuple_Check(args[6])) {
        PyErr_Format(PyExc_TypeError, "%s(): scalars must be a tuple of types or None", name);
        return -1;
    }
    w->scalars = args[6] == Py_None ? NULL : args[6];
    /* Ancestors above *depth* belong to the caller, which checked them already. */
    for (int i = 0; i < *depth; i++) {
        w->ancestors[i] = NULL;
    }
    w->check_cycles = 0;
    return 0;
}

/* The bound of *obj*, or of the items of the list or tuple *obj* when *items* is set. */
static Py_ssize_t
bound_of(Walk *w, PyObject *obj, int items, int depth, Py_ssize_t cap)
{
    for (;;) {
        Py_ssize_t n = items ? walk_items(w, items_of(obj), Py_SIZE(obj), depth, cap)
                             : walk(w, obj, depth, cap);
        if (n <= cap || w->check_cycles) {
            return n;
        }
        w->check_cycles = 1; /* a cycle may have been counted: see enter() */
    }
}

static PyObject *
bound(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk w;
    Py_ssize_t cap;
    int depth;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bound() takes exactly 8 arguments");
        return NULL;
    }
    if (setup(&w, "bound", args + 1, &cap, &depth) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(bound_of(&w, args[0], 0, depth, cap));
}

static PyObject *
bound_items(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk w;
    Py_ssize_t cap;
    int depth;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bound_items() takes exactly 8 arguments");
        return NULL;
    }
    if (setup(&w, "bound_items", args + 1, &cap, &depth) < 0) {
        return NULL;
    }
    if (!PyList_CheckExact(args[0]) && !PyTuple_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bound_items() needs a list or a tuple");
        return NULL;
    }
    return PyLong_FromSsize_t(bound_of(&w, args[0], 1, depth, cap));
}

/* orjson.dumps and orjson.JSONEncodeError, taken when the module is loaded. */
static PyObject *orjson_dumps;
static PyObject *orjson_error;

/* The outcomes of clean_dumps() besides bytes: _bound.TOO_BIG and _bound.UNCLEAN. */
#define OUT_TOO_BIG 1
#define OUT_UNCLEAN 2

static PyObject *
clean_dumps(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk w;
    Py_ssize_t cap;
    int depth;
    if (nargs != 4 || !PyTuple_CheckExact(args[3]) || PyTuple_GET_SIZE(args[3]) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "clean_dumps() takes obj, cap, depth and a 5-tuple of caps");
        return NULL;
    }
    PyObject *a[7] = {args[1], args[2]};
    for (int i = 0; i < 5; i++) {
        a[2 + i] = PyTuple_GET_ITEM(args[3], i);
    }
    if (setup(&w, "clean_dumps", a, &cap, &depth) < 0) {
        return NULL;
    }
    PyObject *obj = args[0];
    Py_ssize_t n = bound_of(&w, obj, 0, depth, cap);
    if (n < 0 || n > cap) {
        return PyLong_FromLong(n < 0 ? OUT_UNCLEAN : OUT_TOO_BIG);
    }
    PyObject *data = PyObject_Vectorcall(orjson_dumps, &obj, 1, NULL);
    if (data == NULL) {
        /* ints beyond 64 bits and lone surrogates; anything else is not ours to hide */
        if (!PyErr_ExceptionMatches(orjson_error)) {
            return NULL;
        }
        PyErr_Clear();
        return PyLong_FromLong(OUT_UNCLEAN);
    }
    if (!PyBytes_Check(data)) {
        Py_DECREF(data);
        PyErr_SetString(PyExc_TypeError, "orjson.dumps() returned no bytes");
        return NULL;
    }
    if (PyBytes_GET_SIZE(data) > cap) {
        Py_DECREF(data);
        return PyLong_FromLong(OUT_TOO_BIG);
    }
    return data;
}

static PyObject *
compact(PyObject *module, PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "compact() needs bytes");
        return NULL;
    }
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
}

static PyMethodDef methods[] = {
    {"bound", (PyCFunction)(void (*)(void))bound, METH_FASTCALL,
     "bound(obj, cap, depth, max_depth, max_items, max_keys, max_field, scalars) -> int\n\n"
     "A lower bound of len(orjson.dumps(obj)) for a clean value, -1 otherwise; "
     "stops early once the bound passes cap."},
    {"bound_items", (PyCFunction)(void (*)(void))bound_items, METH_FASTCALL,
     "bound_items(items, cap, depth, max_depth, max_items, max_keys, max_field, scalars) -> int\n\n"
     "bound() of the items of a list or tuple, each at *depth*, joined by commas and "
     "without brackets."},
    {"clean_dumps", (PyCFunction)(void (*)(void))clean_dumps, METH_FASTCALL,
     "clean_dumps(obj, cap, depth, (max_depth, max_items, max_keys, max_field, scalars)) -> bytes | int\n\n"
     "orjson.dumps(obj) if obj is clean and that fits cap, else 1 (too big) or 2 (unclean)."},
    {"compact", compact, METH_O,
     "compact(data) -> bytes\n\nA copy of data that holds its length and no more."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled helpers for the encoder.", 0, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL) {
        return NULL;
    }
    orjson_dumps = PyObject_GetAttrString(orjson, "dumps");
    orjson_error = PyObject_GetAttrString(orjson, "JSONEncodeError");
    Py_DECREF(orjson);
    if (orjson_dumps == NULL || orjson_error == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
