/* Building frozen, slotted dataclasses without their __init__, in C.
 *
 * Results, pages and cursor states are made on every call. A frozen dataclass's __init__
 * sets each field through object.__setattr__, and even calling the slot descriptors from
 * Python costs about 150 ns a field: on a small result that was more than orjson spent
 * encoding it. maker(cls, slots) takes the class and its slot descriptors in field
 * order, and returns a callable that allocates an instance of cls and stores its
 * positional arguments where the descriptors would. _frozen.py keeps a Python twin for
 * when this module is not built.
 *
 * An instance whose values are all atomic (str, bytes, int, None, tuples of them, and
 * such instances: nothing the cycle collector tracks, nor can later) cannot be part of a
 * reference cycle, so it is taken out of the collector's sight, as CPython does for
 * tuples of atomic values. An untracked dict is not atomic: CPython tracks it again once
 * a container is stored in it, and the record holding it would then hide a cycle (a
 * cursor state's position dict that a caller changed leaked so). A turn that
 * keeps thousands of results otherwise had each collection walk all of them again:
 * keeping a result cost three times making it. Only where the slots filled are all the
 * class has and it has no __dict__: nothing can later be stored in it except through
 * object.__setattr__ on a frozen value, which the records refuse.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

#define MAX_FIELDS 16

/* The classes whose makers untrack their instances: such an instance, once untracked,
   holds atomic values for good (its slots are all filled and it is frozen). */
static PyObject *untracked_classes;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t n;
    int untrack; /* the slots filled are every slot of cls, and it has no __dict__ */
    Py_ssize_t offsets[MAX_FIELDS];
} Maker;

/* Whether *value* cannot be part of a cycle, now or later: CPython's own test for a
   tuple's items (not a container, or an untracked tuple), and an untracked record. */
static int
is_atomic(PyObject *value)
{
    if (!PyObject_IS_GC(value)) {
        return 1;
    }
    if (PyObject_GC_IsTracked(value)) {
        return 0;
    }
    return PyTuple_CheckExact(value) ||
           PySet_Contains(untracked_classes, (PyObject *)Py_TYPE(value)) == 1;
}

static PyObject *
maker_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *self = (Maker *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != self->n || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "%s(...) takes exactly %zd positional arguments",
                     self->cls->tp_name, self->n);
        return NULL;
    }
    PyObject *obj = self->cls->tp_alloc(self->cls, 0);
    if (obj == NULL) {
        return NULL;
    }
    int atomic = self->untrack;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        /* A fresh instance: every slot is NULL, nothing to release. */
        *(PyObject **)((char *)obj + self->offsets[i]) = Py_NewRef(args[i]);
        atomic = atomic && is_atomic(args[i]);
    }
    if (atomic && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    return obj;
}

/* How many object slots *cls* and its bases declare. */
static Py_ssize_t
object_slots(PyTypeObject *cls)
{
    Py_ssize_t count = 0;
    PyObject *mro = cls->tp_mro;
    for (Py_ssize_t i = 0; mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        for (PyMemberDef *m = t->tp_members; m != NULL && m->name != NULL; m++) {
            count += m->type == T_OBJECT_EX;
        }
    }
    return count;
}

static void
maker_dealloc(PyObject *op)
{
    Py_XDECREF(((Maker *)op)->cls);
    Py_TYPE(op)->tp_free(op);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jsonbudget._fastnew.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_dealloc = maker_dealloc,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A positional constructor that fills slots directly (see maker()).",
};

static PyObject *
maker(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1]) ||
        PyTuple_GET_SIZE(args[1]) > MAX_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "maker() takes a class and a tuple of its slots");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    Py_ssize_t n = PyTuple_GET_SIZE(args[1]);
    Py_ssize_t offsets[MAX_FIELDS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(args[1], i);
        /* Only a slot of this class (or a base) that holds any object: what its
           descriptor's __set__ would store, with nothing else to check. */
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            !PyType_IsSubtype(cls, ((PyDescrObject *)d)->d_type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            (((PyMemberDescrObject *)d)->d_member->flags & READONLY)) {
            PyErr_SetString(PyExc_TypeError, "maker(): not a writable object slot of the class");
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    int untrack = cls->tp_dictoffset == 0 && object_slots(cls) == n;
    if (untrack && PySet_Add(untracked_classes, (PyObject *)cls) < 0) {
        return NULL;
    }
    Maker *self = PyObject_New(Maker, &MakerType);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = maker_call;
    self->cls = (PyTypeObject *)Py_NewRef(cls);
    self->n = n;
    self->untrack = untrack;
    memcpy(self->offsets, offsets, sizeof(Py_ssize_t) * (size_t)n);
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"maker", (PyCFunction)(void (*)(void))maker, METH_FASTCALL,
     "maker(cls, slots) -> callable\n\n"
     "A constructor taking one positional argument per slot descriptor and storing "
     "each in its slot of a new instance of cls."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastnew", "Building slotted instances without __init__.", 0,
    methods,
};

PyMODINIT_FUNC
PyInit__fastnew(void)
{
    if (PyType_Ready(&MakerType) < 0) {
        return NULL;
    }
    untracked_classes = PySet_New(NULL);
    if (untracked_classes == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
