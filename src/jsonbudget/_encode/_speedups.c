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
 *        timezone (orjson would call its Python code mid-walk), a string that passes
 *        max_field or holds a lone surrogate, a cycle, a type other than the exact JSON ones, one
 *        of the types in the tuple *scalars* exactly (orjson writes a subclass otherwise)
 *        or, when *scalars* is given, a dataclass instance orjson writes from its
 *        __dict__ (no Enum, which orjson writes by its value), read by a lookup that runs
 *        no Python code (see plain_dict()) of a class whose dicts hold str keys alone (see
 *        str_keyed()), with no empty member name);
 *   n    otherwise, a lower bound of len(orjson.dumps(obj)); once n > cap the walk
 *        stops, so n may be below the true bound but is still above cap.
 * With a list as the optional last argument *spine*, a walk that stops at the cap
 * appends (container, depth, bound) for each container it was inside, deepest first: each
 * bound is a lower bound of that container's own size (see Walk).
 * bound_items(items, ...) does the same for the items of a list or tuple, each at
 * *depth*, joined by commas, without brackets: a run of page or list items.
 *
 * clean_dumps(obj, cap, depth, (max_depth, max_items, max_keys, max_field, scalars)) is the
 * encoder's fast path in one call: orjson.dumps(obj) when the bound shows a clean value
 * that may fit and the bytes do fit, else 1 (too big) or 2 (unclean). compact(data)
 * copies short bytes out of orjson's oversized buffer. A small object's whole encode
 * used to spend as much in the Python around these as in orjson.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>

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
#define FAILED (-2) /* an exception is set */
#define MAX_STACK 256 /* above _limits.MAX_DEPTH, so the ancestors always fit */
#define MAX_SPINE (MAX_STACK + 1)

typedef struct {
    int max_depth;
    Py_ssize_t max_items; /* items of a list or tuple */
    Py_ssize_t max_keys;  /* members of a dict */
    Py_ssize_t max_chars; /* the longest string that fits max_field even as \u0000s */
    Py_ssize_t max_field; /* the field cap: a string's bytes, quotes included */
    PyObject *scalars;
    int check_cycles;
    /* ancestors[d]: the container last entered at depth d. Where the walk stopped at the
       cap, ancestors[0..stop_depth] is the path it stopped on (see enter()). */
    PyObject *ancestors[MAX_STACK];
    int stop_depth;
    /* The spine: the containers the walk was inside when it stopped at the cap, deepest
       first, each with the bound it had reached, which is a lower bound of its own
       size. A renderer that then splits the value learns from it, without a walk, that
       each of them is too big for any smaller room: it would otherwise re-walk the same
       prefix once a level. Borrowed: nothing runs Python code until they are handed out. */
    /* bound_native(): classes whose instances are walked through their __dict__, each
       with the bytes its keys add (dict -> int), and the first class met that is not
       there. NULL otherwise. */
    PyObject *natives;
    PyTypeObject *missing;
    /* The last class entered and its plan (from *natives*, which nothing changes during
       the walk), checked: a list holds one class's instances, and the lookup and the
       checks then run once, not once an instance. */
    PyTypeObject *last_type;
    Py_ssize_t last_keys;   /* its key bytes */
    PyObject *last_slots;   /* its slot descriptors, checked to be its own; or NULL */
    /* The last dataclass found one orjson writes from its plain __dict__ (see
       walk_dataclass()): its instances are not checked again. */
    PyTypeObject *dc_type;
    int record;
    int nspine;
    PyObject *spine[MAX_SPINE];
    int spine_depth[MAX_SPINE];
    Py_ssize_t spine_size[MAX_SPINE];
} Walk;

/* Notes that a container at *depth* ended over its cap: the first one is the deepest
   container of the path the walk stopped on. */
static inline void
stopped(Walk *w, int depth)
{
    if (w->stop_depth < 0) {
        w->stop_depth = depth;
    }
}

/* Notes that container *obj* at *depth* stopped at *size*, over its cap (see stopped());
   each is kept in the spine when the spine is asked for. */
static inline void
note(Walk *w, PyObject *obj, int depth, Py_ssize_t size)
{
    stopped(w, depth);
    if (w->record && w->nspine < MAX_SPINE) {
        w->spine[w->nspine] = obj;
        w->spine_depth[w->nspine] = depth;
        w->spine_size[w->nspine++] = size;
    }
}

/* Enters container *obj* at *depth*: 0, or UNCLEAN if it is its own ancestor.
 *
 * A cycle is unclean (orjson refuses it, the renderer marks it), and counting its
 * repeats would overstate its size. Scanning the ancestors of every container cost a
 * quarter of the walk, so the first walk only writes them down: a cycle then nests
 * until max_depth (UNCLEAN, right) or until the bound passes the cap, inside the cycle.
 * So a walk that stopped at the cap counted a cycle only if the path it stopped on
 * holds a container twice (`stopped_in_cycle`), and only then a second walk with the
 * scan gives the answer. Both walks stop at the cap, so the cost stays in proportion
 * to it. */
static inline int
enter(Walk *w, int depth, PyObject *obj)
{
    if (w->check_cycles) {
        for (int i = 0; i < depth; i++) {
            if (w->ancestors[i] == obj) {
                return UNCLEAN;
            }
        }
    }
    w->ancestors[depth] = obj;
    return 0;
}

/* Whether the path the walk stopped on holds a container twice. After the stop the
   walk only unwinds (nothing is entered), so ancestors[0..stop_depth] is that path. */
static int
stopped_in_cycle(const Walk *w)
{
    for (int i = 1; i <= w->stop_depth; i++) {
        PyObject *obj = w->ancestors[i];
        for (int j = 0; j < i; j++) {
            if (obj != NULL && w->ancestors[j] == obj) {
                return 1;
            }
        }
    }
    return 0;
}

static Py_ssize_t walk_other(Walk *w, PyObject *obj, int depth, Py_ssize_t cap);
static Py_ssize_t f_str_size(PyObject *s, Py_ssize_t cap); /* in _fill.c */

/* Whether str *s*, longer than max_chars, still fits the field cap as orjson writes it.
   A cap set as a guard is mostly not reached: measuring such a string (at most
   max_field bytes of it) keeps the value on the fast path, where treating it as unclean
   sent all of it to the Python renderer. A lone surrogate is unclean (orjson refuses it). */
static int
fits_field(const Walk *w, PyObject *s)
{
    if (PyUnicode_GET_LENGTH(s) + 2 > w->max_field) {
        return 0;
    }
    Py_ssize_t size = f_str_size(s, w->max_field);
    return size >= 0 && size <= w->max_field;
}

/* The bound of an atomic value, or NOT_ATOMIC: inlined into the container loops, where
   almost every value is one. */
#define NOT_ATOMIC (-3)
static inline Py_ssize_t
atomic(const Walk *w, PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t == &PyUnicode_Type) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(obj);
        if (n > w->max_chars && !fits_field(w, obj)) {
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

/* Whether *k* is a member orjson leaves out of a dataclass: a name that starts with _. */
static inline int
private_name(PyObject *k)
{
    return PyUnicode_GET_LENGTH(k) > 0 && PyUnicode_READ_CHAR(k, 0) == '_';
}

/* The members of dict *obj*, an object at *depth*; with *dataclass* set, only those
   orjson writes for a dataclass instance whose __dict__ this is. */
static Py_ssize_t
walk_members(Walk *w, PyObject *obj, int depth, Py_ssize_t cap, int dataclass)
{
    Py_ssize_t n = PyDict_GET_SIZE(obj);
    if (dataclass) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(obj, &pos, &k, &v)) {
            /* orjson aborts the process on an empty name (it reads its first byte). */
            if (!PyUnicode_CheckExact(k) || PyUnicode_GET_LENGTH(k) == 0) {
                return UNCLEAN;
            }
            n -= private_name(k);
        }
    }
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
            if (v == NULL || (dataclass && private_name(entries[i].me_key))) {
                continue; /* a deleted entry, or a member orjson leaves out */
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
        if (size > cap && !dataclass) {
            note(w, obj, depth, size);
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
        if (dataclass && private_name(k)) {
            continue;
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
    if (size > cap && !dataclass) {
        note(w, obj, depth, size);
    }
    return size;
}

/* Names looked up in a type's own dict, made when the module is loaded. */
static PyObject *str_dataclass_fields, *str_slots, *str_pydantic_fields, *str_attrs;
static PyObject *str_getattribute, *str_dict;

/* enum.Enum, taken when the module is loaded: orjson takes its Enum branch before its
   dataclass one (see walk_dataclass()). */
static PyTypeObject *enum_type;
/* type's own __getattribute__, which a metaclass must keep (see walk_native()). */
static PyObject *type_getattribute;

/* What plain_dict() compares a class with, taken when the module is loaded: object's own
   __getattribute__, the getter of the __dict__ that type() gives a Python class, and
   the tp_getattro of a Python class that defines __getattr__. */
static PyObject *object_getattribute;
static getter default_dict_get;
static getattrofunc hooked_getattro;

/* Whether getattr(instance, "__dict__") on class *t* runs no Python code and gives the
   dict PyObject_GenericGetDict() gives, which is what the walk reads. orjson reads a
   dataclass's members, and pydantic a model's, through that getattr, in the middle of
   writing the containers around it: a Python __getattribute__ or a __dict__ property
   would run there, and code that changes a container being written crashes orjson or
   fill(); a __dict__ other than the walked one would be written unchecked (a NaN as
   null). So: the __getattribute__ found is object's own, tp_getattro is the generic
   one (or the hook of a Python __getattr__, which is called only when that lookup
   fails, and the default __dict__ does not fail), the __dict__ descriptor is the one
   type() made for a Python class the instance's class derives from, and no built-in
   base keeps the dict in a way of its own (that __dict__ then asks the base's getter).
   All of it reads the class, never the instance. */
static int
plain_dict(PyTypeObject *t)
{
    if (t->tp_getattro != PyObject_GenericGetAttr && t->tp_getattro != hooked_getattro) {
        return 0;
    }
    if (_PyType_Lookup(t, str_getattribute) != object_getattribute) {
        return 0;
    }
    PyObject *d = _PyType_Lookup(t, str_dict);
    if (d == NULL || !Py_IS_TYPE(d, &PyGetSetDescr_Type) ||
        ((PyGetSetDescrObject *)d)->d_getset->get != default_dict_get ||
        !PyType_IsSubtype(t, PyDescr_TYPE(d))) {
        return 0;
    }
    for (PyTypeObject *b = t; b->tp_base != NULL; b = b->tp_base) {
        if (b->tp_dictoffset != 0 && !(b->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            return 0;
        }
    }
    return 1;
}

/* Whether dict *d* holds exact str keys only, found without running any code. */
static int
str_keys_only(PyObject *d)
{
#if DIRECT_DICT
    /* A table of exact str keys stays one until another key goes in: one check. */
    if (DK_IS_UNICODE(((PyDictObject *)d)->ma_keys)) {
        return 1;
    }
#endif
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) {
            return 0;
        }
    }
    return 1;
}

/* Whether a name can be looked up in class *t* (its own dict or those of its MRO, as
   _PyType_Lookup does) without running Python code: when every one of those dicts holds
   exact str keys only. A namespace may hold any key (type("A", (), {K(): 1}) keeps K()
   in A.__dict__), and a lookup that meets a key with the name's hash runs that key's
   __eq__, in the middle of a walk holding pointers into the containers around the
   instance (one it clears is then read freed: a segfault). So the walk reads nothing of
   a class before this holds, and takes any other class as unclean: the renderer then
   reads it with references held. Once a class, as the walk caches what it learns of one. */
static int
str_keyed(PyTypeObject *t)
{
    PyObject *mro = t->tp_mro;
    if (t->tp_dict == NULL || !PyDict_Check(t->tp_dict) || !str_keys_only(t->tp_dict) ||
        mro == NULL || !PyTuple_Check(mro)) {
        return 0;
    }
    /* t itself too: a metaclass's mro() may leave it out. */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *b = PyTuple_GET_ITEM(mro, i);
        if (!PyType_Check(b)) {
            return 0;
        }
        PyObject *d = ((PyTypeObject *)b)->tp_dict;
        if (d == NULL && !(((PyTypeObject *)b)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            continue; /* from 3.12 a static built-in type's dict is kept per interpreter */
        }
        if (d == NULL || !PyDict_Check(d) || !str_keys_only(d)) {
            return 0;
        }
    }
    return 1;
}

/* Takes what plain_dict() compares with: 0, or -1 with an exception set. */
static int
init_plain_dict(void)
{
    str_getattribute = PyUnicode_InternFromString("__getattribute__");
    str_dict = PyUnicode_InternFromString("__dict__");
    if (str_getattribute == NULL || str_dict == NULL) {
        return -1;
    }
    /* Looked up as plain_dict() looks it up. Not read from object's tp_dict: a static
       built-in type's is NULL from CPython 3.12 on (its dict is per interpreter), and
       reading it crashed the import there. */
    object_getattribute = _PyType_Lookup(&PyBaseObject_Type, str_getattribute);
    if (object_getattribute == NULL) {
        PyErr_SetString(PyExc_ImportError, "_speedups: object has no __getattribute__");
        return -1;
    }
    Py_INCREF(object_getattribute);
    /* Two throwaway classes, made as a class statement makes them. */
    PyObject *plain = PyObject_CallFunction((PyObject *)&PyType_Type, "s(){}", "_Plain");
    if (plain == NULL) {
        return -1;
    }
    PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)plain)->tp_dict, str_dict);
    if (d != NULL && Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
        default_dict_get = ((PyGetSetDescrObject *)d)->d_getset->get;
    }
    Py_DECREF(plain);
    PyObject *hooked = PyObject_CallFunction((PyObject *)&PyType_Type, "s(){sO}", "_Hooked",
                                             "__getattr__", object_getattribute);
    if (hooked == NULL) {
        return -1;
    }
    hooked_getattro = ((PyTypeObject *)hooked)->tp_getattro;
    Py_DECREF(hooked);
    if (default_dict_get == NULL || hooked_getattro == PyObject_GenericGetAttr) {
        PyErr_SetString(PyExc_ImportError, "_speedups: a class's __dict__ is not as expected");
        return -1;
    }
    return 0;
}

/* The members of instance *obj*'s __dict__ (with *dataclass*, those orjson writes for a
   dataclass): UNCLEAN if it has no dict, FAILED with an exception set on another error.
   An instance may keep its attributes without a dict until asked: making one allocates,
   and a collection then could run finalizers (Python code) while the walk holds
   pointers into containers, so the collector is paused. orjson makes the same dict. */
static Py_ssize_t
walk_instance_dict(Walk *w, PyObject *obj, int depth, Py_ssize_t cap, int dataclass)
{
    int was_enabled = PyGC_Disable();
    PyObject *dict = PyObject_GenericGetDict(obj, NULL);
    if (was_enabled) {
        PyGC_Enable();
    }
    if (dict == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return FAILED;
        }
        PyErr_Clear();
        return UNCLEAN;
    }
    Py_ssize_t size =
        PyDict_CheckExact(dict) ? walk_members(w, dict, depth, cap, dataclass) : UNCLEAN;
    Py_DECREF(dict); /* the instance holds it */
    return size;
}

/* A dataclass instance the way orjson writes it natively: the entries of its __dict__
   whose names do not start with _. Only a class decorated itself (orjson looks in the
   type's own dict) and without __slots__ (orjson then reads fields one by one, running
   descriptors); not a pydantic dataclass or an attrs class, which the renderer writes
   their own way; and no Enum: 3.11 lets @dataclass decorate one, and orjson (whose Enum
   branch comes first) then writes getattr(member, "value"), Python code run while it
   holds pointers into the containers around the member, and a value never walked (a
   NaN in it written as null). The renderer writes any Enum by its value, so every
   subclass of Enum is unclean here, once a class. FAILED with an exception set when the
   dict cannot be made. */
static Py_ssize_t
walk_dataclass(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t != w->dc_type) {
        PyObject *own = t->tp_dict;
        /* str_keyed() first: each lookup below could run a key's __eq__ otherwise. */
        if (own == NULL || !str_keyed(t) ||
            PyDict_GetItemWithError(own, str_dataclass_fields) == NULL ||
            PyDict_GetItemWithError(own, str_slots) != NULL ||
            PyDict_GetItemWithError(own, str_pydantic_fields) != NULL ||
            _PyType_Lookup(t, str_attrs) != NULL || PyType_IsSubtype(t, enum_type) ||
            !plain_dict(t)) {
            return PyErr_Occurred() ? FAILED : UNCLEAN;
        }
        /* Nothing the walk does runs Python code, so the class stays as checked. */
        w->dc_type = t;
    }
    Py_ssize_t size = walk_instance_dict(w, obj, depth, cap, 1);
    if (size > cap) {
        note(w, obj, depth, size);
    }
    return size;
}

/* Reads the plan of class *t* into w->last_*: the key bytes, and for a slot plan, (key
   bytes, slot descriptors in field order), the descriptors checked to be object slots of
   *t*. 0, or FAILED with an exception set. */
static int
learn_plan(Walk *w, PyTypeObject *t, PyObject *plan)
{
    PyObject *keys = plan, *slots = NULL;
    if (PyTuple_CheckExact(plan)) {
        if (PyTuple_GET_SIZE(plan) != 2 || !PyTuple_CheckExact(PyTuple_GET_ITEM(plan, 1))) {
            PyErr_SetString(PyExc_TypeError, "bound_native(): a slot plan is (int, slots)");
            return FAILED;
        }
        keys = PyTuple_GET_ITEM(plan, 0);
        slots = PyTuple_GET_ITEM(plan, 1);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots); i++) {
            PyObject *d = PyTuple_GET_ITEM(slots, i);
            if (!Py_IS_TYPE(d, &PyMemberDescr_Type) ||
                ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
                !PyType_IsSubtype(t, ((PyDescrObject *)d)->d_type)) {
                PyErr_SetString(PyExc_TypeError, "bound_native(): not an object slot of the class");
                return FAILED;
            }
        }
    }
    Py_ssize_t n = PyLong_AsSsize_t(keys);
    if (n == -1 && PyErr_Occurred()) {
        return FAILED;
    }
    w->last_type = t;
    w->last_keys = n;
    w->last_slots = slots;
    return 0;
}

/* An instance whose fields are object slots (a msgspec Struct), the descriptors *slots*
   checked by learn_plan: bounded as the items of an array (brackets and commas, as braces
   and commas would be), plus *keys* bytes; a field left empty is unclean. */
static Py_ssize_t
walk_slots(Walk *w, PyObject *obj, PyObject *slots, Py_ssize_t keys, int depth, Py_ssize_t cap)
{
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    if (depth >= w->max_depth || n > w->max_keys || n > w->max_items ||
        enter(w, depth, obj) < 0) {
        return UNCLEAN;
    }
    Py_ssize_t size = 2 + keys + (n ? n - 1 : 0); /* brackets, keys, commas */
    for (Py_ssize_t i = 0; i < n && size <= cap; i++) {
        PyMemberDescrObject *d = (PyMemberDescrObject *)PyTuple_GET_ITEM(slots, i);
        PyObject *v = *(PyObject **)((char *)obj + d->d_member->offset);
        if (v == NULL) {
            return UNCLEAN; /* a field left empty */
        }
        Py_ssize_t sub = atomic(w, v);
        if (sub == NOT_ATOMIC) {
            sub = walk_other(w, v, depth + 1, cap - size);
        }
        if (sub < 0) {
            return sub;
        }
        size += sub;
    }
    if (size > cap) {
        stopped(w, depth); /* a Struct is never in the spine */
    }
    return size;
}

/* Whether metaclass *m* reads its classes' attributes as type does: its __getattribute__
   is type's own, and its tp_getattro is type's or the hook of a Python __getattr__
   (pydantic's own metaclass has one), which runs only when type's lookup fails. Reads
   the metaclass, runs nothing: its dicts hold str keys alone (str_keyed()) before a
   name is looked up in them. */
static int
type_reads_plain(PyTypeObject *m)
{
    if (m == &PyType_Type) {
        return 1;
    }
    return (m->tp_getattro == PyType_Type.tp_getattro || m->tp_getattro == hooked_getattro) &&
           str_keyed(m) && _PyType_Lookup(m, str_getattribute) == type_getattribute;
}

/* An instance of a class in w->natives: the members of its __dict__, plus the bytes its
   keys add. A class not there is noted in w->missing (the caller learns it and walks
   again) and is unclean. Only classes whose metaclass hashes and compares as type does:
   the lookup then runs no Python code. And only classes whose metaclass reads attributes
   as type does (see type_reads_plain()): a list of models is written by one call whose
   serializer is read from the class after this walk, and a metaclass __getattribute__
   could change the models there (put a NaN in them, written as null). */
static Py_ssize_t
walk_native(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t != w->last_type) {
        if (Py_TYPE(t)->tp_hash != PyType_Type.tp_hash ||
            Py_TYPE(t)->tp_richcompare != PyType_Type.tp_richcompare ||
            !type_reads_plain(Py_TYPE(t))) {
            return UNCLEAN;
        }
        PyObject *plan = PyDict_GetItemWithError(w->natives, (PyObject *)t);
        if (plan == NULL) {
            if (PyErr_Occurred()) {
                return FAILED;
            }
            if (w->missing == NULL) {
                w->missing = t;
            }
            return UNCLEAN;
        }
        /* pydantic reads a model's members by getattr(model, "__dict__") (msgspec reads
           a Struct's slots directly): only a class whose read runs no Python code and
           gives the dict walked here, so that what was walked is what pydantic writes
           (a __dict__ property could hold a NaN it writes as null). str_keyed() first:
           plain_dict()'s lookups could run a key's __eq__ otherwise. */
        if (!PyTuple_CheckExact(plan) && (!str_keyed(t) || !plain_dict(t))) {
            return UNCLEAN;
        }
        if (learn_plan(w, t, plan) < 0) {
            return FAILED;
        }
    }
    Py_ssize_t keys = w->last_keys;
    if (w->last_slots != NULL) {
        return walk_slots(w, obj, w->last_slots, keys, depth, cap);
    }
    Py_ssize_t size = walk_instance_dict(w, obj, depth, cap - keys, 0);
    return size < 0 ? size : size + keys;
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

static PyObject *str_utcoffset;

/* Whether orjson writes the offset of built-in timezone *tz* as it is: one in whole
   minutes. orjson drops the seconds of another (Paris's before 1911, +00:09:21, comes
   out +00:09) with no mark; the renderer writes them. The timezone's utcoffset() is
   C code that returns the offset it holds: nothing runs that could change a container.
   1, 0, or -1 with an exception set. */
static int
whole_minutes(PyObject *tz)
{
    PyObject *offset = PyObject_CallMethodOneArg(tz, str_utcoffset, Py_None);
    if (offset == NULL) {
        return -1;
    }
    int whole = PyDelta_Check(offset) && PyDateTime_DELTA_GET_SECONDS(offset) % 60 == 0 &&
                PyDateTime_DELTA_GET_MICROSECONDS(offset) == 0;
    Py_DECREF(offset);
    return whole;
}

/* The bound of a value that is not atomic: a container, a bounded scalar, or unclean. */
static Py_ssize_t
walk_other(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    Py_ssize_t size;
    PyTypeObject *t = Py_TYPE(obj);
    if (t == &PyDict_Type) {
        return walk_members(w, obj, depth, cap, 0);
    }
    if (t == w->last_type) {
        return walk_native(w, obj, depth, cap); /* the class just entered, again */
    }
    if (t == &PyList_Type || t == &PyTuple_Type) {
        Py_ssize_t n = Py_SIZE(obj);
        if (depth >= w->max_depth || n > w->max_items) {
            return UNCLEAN;
        }
        if (n + 1 > cap) {
            w->ancestors[depth] = obj; /* on the path, not entered */
            note(w, obj, depth, n + 1);
            return n + 1;
        }
        if (enter(w, depth, obj) < 0) {
            return UNCLEAN;
        }
        size = walk_items(w, items_of(obj), n, depth + 1, cap - 2);
        if (size < 0) {
            return size;
        }
        if (size + 2 > cap) {
            note(w, obj, depth, size + 2);
        }
        return size + 2;
    }
    if (w->scalars != NULL) {
        /* By type alone: isinstance() may look up __class__, which can run Python code,
           and the walk holds pointers into the containers it is in. */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(w->scalars); i++) {
            /* The exact type only, as orjson: it writes a subclass decorated with
               @dataclass as a dataclass (read through getattr, maybe Python code, with
               members never walked), and refuses any other. Neither is this scalar. */
            if ((PyObject *)t == PyTuple_GET_ITEM(w->scalars, i)) {
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
                if (tz != Py_None && tz != PyDateTime_TimeZone_UTC) {
                    int whole = whole_minutes(tz);
                    if (whole <= 0) {
                        return whole == 0 ? UNCLEAN : FAILED;
                    }
                }
                return 10; /* datetimes, dates, times and UUIDs: at least this long */
            }
        }
        return w->natives != NULL ? walk_native(w, obj, depth, cap)
                                  : walk_dataclass(w, obj, depth, cap);
    }
    return UNCLEAN;
}

static Py_ssize_t
walk(Walk *w, PyObject *obj, int depth, Py_ssize_t cap)
{
    Py_ssize_t size = atomic(w, obj);
    return size == NOT_ATOMIC ? walk_other(w, obj, depth, cap) : size;
}

/* The caps of a walk, as read from (max_depth, max_items, max_keys, max_field, scalars). */
typedef struct {
    int max_depth;
    Py_ssize_t max_items;
    Py_ssize_t max_keys;
    Py_ssize_t max_chars;
    Py_ssize_t max_field;
    PyObject *scalars; /* borrowed from the caller's arguments, or NULL */
} Caps;

/* Reads the five caps at *args* into *c*; -1 with an exception set on bad ones. */
static int
read_caps(Caps *c, const char *name, PyObject *const *args)
{
    Py_ssize_t max_depth = PyLong_AsSsize_t(args[0]);
    c->max_items = PyLong_AsSsize_t(args[1]);
    c->max_keys = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_field = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (max_depth < 0 || max_depth >= MAX_STACK) {
        PyErr_Format(PyExc_ValueError, "%s(): depth out of range", name);
        return -1;
    }
    c->max_depth = (int)max_depth;
    /* A character encodes to at most 6 bytes (\u0000): under a field cap a string that
       fits even then is clean without measuring it (see fits_field()). */
    c->max_chars = max_field < 2 ? -1 : (max_field - 2) / 6;
    c->max_field = max_field;
    if (args[4] != Py_None && !PyTuple_Check(args[4])) {
        PyErr_Format(PyExc_TypeError, "%s(): scalars must be a tuple of types or None", name);
        return -1;
    }
    c->scalars = args[4] == Py_None ? NULL : args[4];
    return 0;
}

/* Makes *w* a fresh walk from *depth* under caps *c*. */
static void
start(Walk *w, const Caps *c, int depth)
{
    w->max_depth = c->max_depth;
    w->max_items = c->max_items;
    w->max_keys = c->max_keys;
    w->max_chars = c->max_chars;
    w->max_field = c->max_field;
    w->scalars = c->scalars;
    /* Ancestors above *depth* belong to the caller, which checked them already. */
    for (int i = 0; i < depth; i++) {
        w->ancestors[i] = NULL;
    }
    w->check_cycles = 0;
    w->record = 0;
    w->natives = NULL;
    w->missing = NULL;
    w->last_type = NULL;
    w->last_keys = 0;
    w->last_slots = NULL;
    w->dc_type = NULL;
}

/* Reads cap, depth and the caps into *w*; -1 with an exception set on bad ones. */
static int
setup(Walk *w, const char *name, PyObject *const *args, Py_ssize_t *cap, int *depth)
{
    /* args: cap, depth, max_depth, max_items, max_keys, max_field, scalars */
    Caps c;
    *cap = PyLong_AsSsize_t(args[0]);
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred() || read_caps(&c, name, args + 2) < 0) {
        return -1;
    }
    if (d < 0 || d > c.max_depth) {
        PyErr_Format(PyExc_ValueError, "%s(): depth out of range", name);
        return -1;
    }
    *depth = (int)d;
    start(w, &c, *depth);
    return 0;
}

/* Appends the spine to list *out* as (container, depth, bound) pairs: 0, or -1 on an error. */
static int
hand_out(const Walk *w, PyObject *out)
{
    /* The spine is borrowed, and each pair is an allocation that may start a
       collection, whose finalizers could free a container not yet handed out (one
       cleared out of its parent): the collector waits until all are held. */
    int collecting = PyGC_Disable();
    int r = 0;
    for (int i = 0; i < w->nspine && r == 0; i++) {
        PyObject *pair = Py_BuildValue("(Oin)", w->spine[i], w->spine_depth[i], w->spine_size[i]);
        r = pair == NULL || PyList_Append(out, pair) < 0 ? -1 : 0;
        Py_XDECREF(pair);
    }
    if (collecting) {
        PyGC_Enable();
    }
    return r;
}

/* The list the spine goes to: args[i] when given and not None, else NULL (not asked). */
static int
spine_arg(Walk *w, const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t i,
          PyObject **out)
{
    *out = NULL;
    if (nargs > i && args[i] != Py_None) {
        if (!PyList_CheckExact(args[i])) {
            PyErr_Format(PyExc_TypeError, "%s(): spine must be a list or None", name);
            return -1;
        }
        *out = args[i];
        w->record = 1;
    }
    return 0;
}

/* The bound of *obj*, or of the items of the list or tuple *obj* when *items* is set. */
static Py_ssize_t
bound_of(Walk *w, PyObject *obj, int items, int depth, Py_ssize_t cap)
{
    for (;;) {
        w->nspine = 0;
        w->stop_depth = -1;
        Py_ssize_t n = items ? walk_items(w, items_of(obj), Py_SIZE(obj), depth, cap)
                             : walk(w, obj, depth, cap);
        if (n <= cap || w->check_cycles || !stopped_in_cycle(w)) {
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
    PyObject *spine;
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "bound() takes 8 or 9 arguments");
        return NULL;
    }
    if (setup(&w, "bound", args + 1, &cap, &depth) < 0 ||
        spine_arg(&w, "bound", args, nargs, 8, &spine) < 0) {
        return NULL;
    }
    Py_ssize_t n = bound_of(&w, args[0], 0, depth, cap);
    if (n == FAILED || (spine != NULL && n > cap && hand_out(&w, spine) < 0)) {
        return NULL;
    }
    return PyLong_FromSsize_t(n);
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
    Py_ssize_t n = bound_of(&w, args[0], 1, depth, cap);
    return n == FAILED ? NULL : PyLong_FromSsize_t(n);
}

/* bound_native(obj, cap, depth, caps, natives) -> (n, missing): bound() of a value whose
   parts may be instances of the classes in dict *natives* instead of dataclasses: walked
   through their __dict__ plus the int a class maps to (the bytes its keys add), or, for
   a class that maps to (int, slot descriptors), through those slots. *missing* is None,
   or the first class met that is not in *natives*, when that made n unclean. A third
   item, *run*, is the class of every item when *obj* is a list of one native class's
   instances, else None. */
static PyObject *
bound_native(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk w;
    Py_ssize_t cap;
    int depth;
    /* A dict subclass too (values.NATIVE_KEYS answers `in` for an unhashable class):
       its table is read directly, never through its methods. */
    if (nargs != 5 || !PyTuple_CheckExact(args[3]) || PyTuple_GET_SIZE(args[3]) != 5 ||
        !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "bound_native() takes obj, cap, depth, a 5-tuple of caps and a dict");
        return NULL;
    }
    PyObject *a[7] = {args[1], args[2]};
    for (int i = 0; i < 5; i++) {
        a[2 + i] = PyTuple_GET_ITEM(args[3], i);
    }
    if (setup(&w, "bound_native", a, &cap, &depth) < 0) {
        return NULL;
    }
    if (w.scalars == NULL) {
        PyErr_SetString(PyExc_TypeError, "bound_native() needs the scalars");
        return NULL;
    }
    w.natives = args[4];
    Py_ssize_t n = bound_of(&w, args[0], 0, depth, cap);
    if (n == FAILED) {
        return NULL;
    }
    PyObject *missing = n == UNCLEAN && w.missing != NULL ? (PyObject *)w.missing : Py_None;
    /* A list of one native class's instances is written by one call of its library. */
    PyObject *run = Py_None;
    PyObject *obj = args[0];
    if (n >= 0 && PyList_CheckExact(obj) && PyList_GET_SIZE(obj) > 0) {
        PyTypeObject *t = Py_TYPE(PyList_GET_ITEM(obj, 0));
        Py_ssize_t i = 1;
        while (i < PyList_GET_SIZE(obj) && Py_TYPE(PyList_GET_ITEM(obj, i)) == t) {
            i++;
        }
        /* Every item passed the walk, so t hashes as type does (see walk_native). */
        if (i == PyList_GET_SIZE(obj) && PyDict_GetItemWithError(args[4], (PyObject *)t)) {
            run = (PyObject *)t;
        }
        else if (PyErr_Occurred()) {
            return NULL;
        }
    }
    return Py_BuildValue("(nOO)", n, missing, run);
}

/* orjson's bytes keep at least 4 KiB of capacity: a shorter result is handed out as a
   copy that holds only its length (a longer one wastes little, and copying it would
   not). compact_copy() takes the caller's reference to *data*. */
#define COMPACT_BELOW 8192
static PyObject *compact_copy(PyObject *data);

/* orjson.dumps and orjson.JSONEncodeError, taken when the module is loaded. */
static PyObject *orjson_dumps;
static PyObject *orjson_error;
static PyObject *zero; /* the int 0: a walk's depth from the top */

/* orjson.dumps(obj): new bytes; Py_None (new) where orjson refuses *obj* (ints beyond
   64 bits and lone surrogates, which the walk lets through); NULL with any other
   exception set, which is not ours to hide. */
static PyObject *
orjson_bytes(PyObject *obj)
{
    /* The collector waits: orjson allocates objects it tracks (a bound method, asking a
       built-in timezone whether it has dst()), and a collection started there runs
       finalizers and gc callbacks, Python code that may change a container orjson is
       writing through pointers it does not hold (a segfault). */
    int collecting = PyGC_Disable();
    PyObject *data = PyObject_Vectorcall(orjson_dumps, &obj, 1, NULL);
    if (collecting) {
        PyGC_Enable();
    }
    if (data == NULL) {
        if (!PyErr_ExceptionMatches(orjson_error)) {
            return NULL;
        }
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    if (!PyBytes_Check(data)) {
        Py_DECREF(data);
        PyErr_SetString(PyExc_TypeError, "orjson.dumps() returned no bytes");
        return NULL;
    }
    return data;
}

/* The outcomes of clean_dumps() besides bytes: _bound.TOO_BIG and _bound.UNCLEAN. */
#define OUT_TOO_BIG 1
#define OUT_UNCLEAN 2

static PyObject *walked_dumps(Walk *w, PyObject *obj, Py_ssize_t cap, int depth,
                              PyObject *spine);

/* The caps tuple last read by dumps_if_clean() (held, so its address is not reused while
   it is here; a tuple cannot change) and what was read from it. The interpreter lock
   keeps these two in step. */
static PyObject *last_caps;
static Caps last_read;

/* clean_dumps() for *obj* at *depth* under the 5-tuple *caps*: bytes, an outcome as an
   int, or NULL with an exception set. */
static PyObject *
dumps_if_clean(PyObject *obj, PyObject *cap_obj, PyObject *depth_obj, PyObject *caps,
               PyObject *spine_obj)
{
    Walk w;
    Py_ssize_t cap;
    int depth;
    PyObject *spine;
    PyObject *sp[1] = {spine_obj};
    if (caps == last_caps && depth_obj == zero) {
        /* The caps an owner passes on every call: read once (reading them again cost
           about 30 ns, a fortieth of a 1 KiB result's whole pass). */
        cap = PyLong_AsSsize_t(cap_obj);
        if (cap == -1 && PyErr_Occurred()) {
            return NULL;
        }
        depth = 0;
        start(&w, &last_read, 0);
    }
    else {
        PyObject *a[7] = {cap_obj, depth_obj};
        for (int i = 0; i < 5; i++) {
            a[2 + i] = PyTuple_GET_ITEM(caps, i);
        }
        if (setup(&w, "clean_dumps", a, &cap, &depth) < 0) {
            return NULL;
        }
        if (read_caps(&last_read, "clean_dumps", a + 2) < 0) {
            return NULL; /* not reached: setup() read the same caps */
        }
        Py_XSETREF(last_caps, Py_NewRef(caps));
    }
    if (spine_arg(&w, "clean_dumps", sp, spine_obj == NULL ? 0 : 1, 0, &spine) < 0) {
        return NULL;
    }
    return walked_dumps(&w, obj, cap, depth, spine);
}

/* The rest of dumps_if_clean() once *w* is set up: the walk, then orjson. */
static PyObject *
walked_dumps(Walk *w, PyObject *obj, Py_ssize_t cap, int depth, PyObject *spine)
{
    Py_ssize_t n = bound_of(w, obj, 0, depth, cap);
    if (n == FAILED || (spine != NULL && n > cap && hand_out(w, spine) < 0)) {
        return NULL;
    }
    if (n < 0 || n > cap) {
        return PyLong_FromLong(n < 0 ? OUT_UNCLEAN : OUT_TOO_BIG);
    }
    PyObject *data = orjson_bytes(obj);
    if (data == NULL) {
        return NULL;
    }
    if (data == Py_None) {
        Py_DECREF(data);
        return PyLong_FromLong(OUT_UNCLEAN);
    }
    if (PyBytes_GET_SIZE(data) > cap) {
        Py_DECREF(data);
        return PyLong_FromLong(OUT_TOO_BIG);
    }
    return data;
}

static PyObject *
clean_dumps(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 6 || !PyTuple_CheckExact(args[3]) ||
        PyTuple_GET_SIZE(args[3]) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "clean_dumps() takes obj, cap, depth, a 5-tuple of caps, a spine and "
                        "whether to compact");
        return NULL;
    }
    PyObject *data = dumps_if_clean(args[0], args[1], args[2], args[3], nargs >= 5 ? args[4] : NULL);
    if (data != NULL && nargs == 6 && args[5] == Py_True && PyBytes_Check(data)) {
        return compact_copy(data); /* a result handed on as it is: see compact_copy */
    }
    return data;
}

/* clean_result(obj, cap, caps, types, make, kind): a guard's pass-through in one call.
   When type(obj) is in the frozenset *types* and obj is clean under *caps* and fits
   *cap*: make(its compact bytes, kind, their length, None, None), the guard's result record;
   else None, and the guard's own path decides. The Python around these steps (the type
   check, the outcome's check, the length and the record's call) cost as much as the
   walk on a 1 KiB result. */
static PyObject *
clean_result(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyTuple_CheckExact(args[2]) || PyTuple_GET_SIZE(args[2]) != 5 ||
        !PyFrozenSet_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "clean_result() takes obj, a cap, a 5-tuple of caps, a frozenset of "
                        "types, a constructor and a kind");
        return NULL;
    }
    /* Only a class that hashes and compares as type does is looked up: another one's
       metaclass may make it unhashable (an __eq__ without __hash__) or run code, and
       *types* holds no such class. The guard's own path then decides. */
    PyTypeObject *t = Py_TYPE(args[0]);
    if (Py_TYPE(t)->tp_hash != PyType_Type.tp_hash ||
        Py_TYPE(t)->tp_richcompare != PyType_Type.tp_richcompare) {
        return Py_NewRef(Py_None);
    }
    int known = PySet_Contains(args[3], (PyObject *)t);
    if (known <= 0) {
        return known < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *data = dumps_if_clean(args[0], args[1], zero, args[2], NULL);
    if (data == NULL || !PyBytes_Check(data)) {
        Py_XDECREF(data);
        return data == NULL ? NULL : Py_NewRef(Py_None); /* too big or unclean */
    }
    data = compact_copy(data);
    PyObject *size = data == NULL ? NULL : PyLong_FromSsize_t(PyBytes_GET_SIZE(data));
    PyObject *out = NULL;
    if (size != NULL) {
        PyObject *made[5] = {data, args[5], size, Py_None, Py_None};
        out = PyObject_Vectorcall(args[4], made, 5, NULL);
    }
    Py_XDECREF(data);
    Py_XDECREF(size);
    return out;
}

static PyObject *
compact(PyObject *module, PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "compact() needs bytes");
        return NULL;
    }
    return compact_copy(Py_NewRef(data));
}

static PyObject *
compact_copy(PyObject *data)
{
    if (PyBytes_GET_SIZE(data) >= COMPACT_BELOW) {
        return data;
    }
    PyObject *copy = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
    Py_DECREF(data);
    return copy;
}

/* A front door for a one-call verb: a call that gives the value and max_bytes alone, an
   int in range, is answered here when the value is clean and fits (one walk, one orjson
   call, no Python frame); any other call goes to the verb's Python function with the
   same arguments, which decides everything else. A call the walk answered TOO_BIG or
   UNCLEAN goes to *known*(obj, max_bytes, outcome) where given: the verb's function
   would walk the value again, and encode it again where orjson's bytes were too big. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    PyObject *caps;
    PyObject *finish; /* applied to the bytes (the verb's result type), or None */
    PyObject *finish_args; /* a tuple of up to 3 more arguments for finish */
    PyObject *known;  /* called with the walk's outcome when it is not bytes, or None */
    Caps walk_caps;   /* *caps* read once: reading them cost a tenth of a small call */
    Py_ssize_t min_bytes;
    Py_ssize_t max_bytes;
    PyObject *dict;
} Front;

static PyObject *str_max_bytes;

static PyObject *
front_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Front *self = (Front *)op;
    if (PyVectorcall_NARGS(nargsf) == 1 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        PyObject *budget = args[1];
        if ((name == str_max_bytes || PyUnicode_Compare(name, str_max_bytes) == 0) &&
            PyLong_CheckExact(budget)) {
            int overflow;
            long long cap = PyLong_AsLongLongAndOverflow(budget, &overflow);
            if (!overflow && cap >= self->min_bytes && cap <= self->max_bytes) {
                Walk w;
                start(&w, &self->walk_caps, 0);
                PyObject *data = walked_dumps(&w, args[0], (Py_ssize_t)cap, 0, NULL);
                if (data == NULL) {
                    return NULL;
                }
                if (PyBytes_Check(data)) {
                    data = compact_copy(data);
                    if (data == NULL || self->finish == Py_None) {
                        return data;
                    }
                    /* finish(data, *finish_args), called from here: a Python function
                       in between cost a tenth of a small encode(). */
                    PyObject *stack[4] = {data};
                    Py_ssize_t more = PyTuple_GET_SIZE(self->finish_args);
                    for (Py_ssize_t i = 0; i < more; i++) {
                        stack[1 + i] = PyTuple_GET_ITEM(self->finish_args, i);
                    }
                    PyObject *out = PyObject_Vectorcall(self->finish, stack, 1 + more, NULL);
                    Py_DECREF(data);
                    return out;
                }
                if (self->known != Py_None) {
                    PyObject *stack[3] = {args[0], budget, data};
                    PyObject *out = PyObject_Vectorcall(self->known, stack, 3, NULL);
                    Py_DECREF(data);
                    return out;
                }
                Py_DECREF(data); /* too big or unclean: the verb renders it */
            }
        }
        else if (PyErr_Occurred()) {
            return NULL;
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static void
front_dealloc(PyObject *op)
{
    Front *self = (Front *)op;
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->caps);
    Py_XDECREF(self->finish);
    Py_XDECREF(self->finish_args);
    Py_XDECREF(self->known);
    Py_XDECREF(self->dict);
    Py_TYPE(op)->tp_free(op);
}

/* Pickled by name, as the function it stands for is: pickle finds it in its module. */
static PyObject *
front_reduce(PyObject *op, PyObject *unused)
{
    return PyObject_GetAttrString(op, "__qualname__");
}

static PyMethodDef front_methods[] = {
    {"__reduce__", front_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef front_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jsonbudget._encode._speedups.Front",
    .tp_basicsize = sizeof(Front),
    .tp_dealloc = front_dealloc,
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A one-call verb's compiled front door (see front()).",
    .tp_getset = front_getset,
    .tp_methods = front_methods,
    .tp_dictoffset = offsetof(Front, dict),
};

static PyObject *
front(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 5 || nargs > 7 || !PyCallable_Check(args[0]) ||
        !PyTuple_CheckExact(args[1]) || PyTuple_GET_SIZE(args[1]) != 5 ||
        (args[4] != Py_None && !PyCallable_Check(args[4])) ||
        (nargs >= 6 && (!PyTuple_CheckExact(args[5]) || PyTuple_GET_SIZE(args[5]) > 3)) ||
        (nargs == 7 && args[6] != Py_None && !PyCallable_Check(args[6]))) {
        PyErr_SetString(PyExc_TypeError,
                        "front() takes a function, a 5-tuple of caps, min_bytes, max_bytes, "
                        "a finish callable or None, a tuple of up to 3 more arguments "
                        "for finish, and a known callable or None");
        return NULL;
    }
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]);
    Py_ssize_t hi = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *extra = nargs >= 6 ? Py_NewRef(args[5]) : PyTuple_New(0);
    if (extra == NULL) {
        return NULL;
    }
    Front *self = PyObject_New(Front, &FrontType);
    if (self == NULL) {
        Py_DECREF(extra);
        return NULL;
    }
    self->vectorcall = front_call;
    self->fallback = Py_NewRef(args[0]);
    self->caps = Py_NewRef(args[1]);
    self->finish = Py_NewRef(args[4]);
    self->finish_args = extra;
    self->known = Py_NewRef(nargs == 7 ? args[6] : Py_None);
    self->min_bytes = lo;
    self->max_bytes = hi;
    self->dict = NULL;
    PyObject *caps[5];
    for (int i = 0; i < 5; i++) {
        caps[i] = PyTuple_GET_ITEM(args[1], i);
    }
    /* The scalars stay borrowed from self->caps, which the door holds. */
    if (read_caps(&self->walk_caps, "front", caps) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* -- string prefixes ------------------------------------------------------------------
 *
 * cut_string(s, room, mark, head_room, tail_room) -> (bytes, kept, replaced): the
 * longest prefix of str *s* whose JSON string content fits *room* bytes, escaped
 * exactly as orjson escapes it (" and backslash, the two-character escapes \b \t \n
 * \f \r, \u00xx for the other control characters, everything else as UTF-8), each
 * lone surrogate written as U+FFFD and counted in *replaced*. mark(kept) returns the
 * (head, tail) bytes around the content, at most *head_room* and *tail_room* long: they
 * may depend on the count. The result is head + content + tail, written once into one
 * buffer and shrunk to fit: the memory is the output, and the cost follows *room*, not
 * len(s). orjson escapes in SIMD but reserves several bytes per character for each call
 * and must be called on slices; this is one pass.
 */

/* Bytes each ASCII character takes in a JSON string: 1, 2 (\n) or 6 (\u001f); and the
   letter after the backslash of a two-byte escape. */
static unsigned char ascii_width[128];
static char escape_letter[128];

static void
init_ascii_width(void)
{
    for (int c = 0; c < 128; c++) {
        ascii_width[c] = c < 0x20 ? 6 : 1;
    }
    ascii_width['"'] = ascii_width['\\'] = 2;
    ascii_width['\b'] = ascii_width['\t'] = ascii_width['\n'] = 2;
    ascii_width['\f'] = ascii_width['\r'] = 2;
    escape_letter['"'] = '"';
    escape_letter['\\'] = '\\';
    escape_letter['\b'] = 'b';
    escape_letter['\t'] = 't';
    escape_letter['\n'] = 'n';
    escape_letter['\f'] = 'f';
    escape_letter['\r'] = 'r';
}

static inline Py_ssize_t
char_width(Py_UCS4 c)
{
    if (c < 0x80) {
        return ascii_width[c];
    }
    return c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; /* a surrogate: U+FFFD, 3 bytes */
}

/* A character of 0x80 or more that is not a surrogate, as UTF-8: writes 4 bytes and
   advances by the character's width. (Selecting the word by masks instead of branches
   measured slower: 5 ns a character against 3.3 in multibyte text.) */
static inline char *
write_wide(char *p, Py_UCS4 c)
{
    uint32_t b2 = (0xC0 | (c >> 6)) | ((0x80 | (c & 0x3F)) << 8);
    uint32_t b3 = (0xE0 | (c >> 12)) | ((0x80 | ((c >> 6) & 0x3F)) << 8) |
                  ((0x80 | (c & 0x3F)) << 16);
    uint32_t b4 = (0xF0 | (c >> 18)) | ((0x80 | ((c >> 12) & 0x3F)) << 8) |
                  ((0x80 | ((c >> 6) & 0x3F)) << 16) | ((uint32_t)(0x80 | (c & 0x3F)) << 24);
    uint32_t v = c < 0x800 ? b2 : c < 0x10000 ? b3 : b4;
#if PY_LITTLE_ENDIAN
    memcpy(p, &v, 4);
#else
    for (int k = 0; k < 4; k++) {
        p[k] = (char)(v >> (8 * k));
    }
#endif
    return p + 2 + (c >= 0x800) + (c >= 0x10000);
}

/* *c* as JSON string content: itself, an escape, U+FFFD for a lone surrogate, or UTF-8.
   A wide character's store is a whole word: up to 2 bytes past its width (see the
   slack in cut_string). */
static inline char *
write_char(char *p, Py_UCS4 c)
{
    static const char hex[] = "0123456789abcdef";
    if (c < 0x80) {
        switch (ascii_width[c]) {
        case 1:
            *p++ = (char)c;
            return p;
        case 2:
            p[0] = '\\';
            p[1] = escape_letter[c];
            return p + 2;
        default:
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 15];
            return p + 6;
        }
    }
    return write_wide(p, c >= 0xD800 && c <= 0xDFFF ? 0xFFFD : c);
}

/* write_char(), counting a lone surrogate (written as U+FFFD) into *replaced*. */
static inline char *
write_counted(char *p, Py_UCS4 c, Py_ssize_t *replaced)
{
    *replaced += c >= 0xD800 && c <= 0xDFFF;
    return write_char(p, c);
}

/* How many of the 16 characters at *d* are plain ASCII before the first that is not
   (16 if all are); they are written at *p*, which has room for 16 bytes (bytes past the
   count are written too, and overwritten next). */
#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>

static inline int
plain_bytes16(char *p, __m128i v)
{
    /* Signed compares: bytes of 0x80 and more are negative, so below 0x20 too. */
    __m128i bad = _mm_or_si128(
        _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
    _mm_storeu_si128((__m128i *)p, v);
    unsigned m = (unsigned)_mm_movemask_epi8(bad);
    return m ? __builtin_ctz(m) : 16;
}

static inline int
plain16_1(char *p, const Py_UCS1 *d)
{
    return plain_bytes16(p, _mm_loadu_si128((const __m128i *)d));
}

/* Saturating packs keep every character of 0x80 or more flagged: 0x100-0x7FFF become
   0xFF, 0x8000-0xFFFF (negative as int16) become 0x00, and UCS-4 characters are first
   saturated to 0x7FFF. */
static inline int
plain16_2(char *p, const Py_UCS2 *d)
{
    const __m128i *q = (const __m128i *)d;
    return plain_bytes16(p, _mm_packus_epi16(_mm_loadu_si128(q), _mm_loadu_si128(q + 1)));
}

static inline int
plain16_4(char *p, const Py_UCS4 *d)
{
    const __m128i *q = (const __m128i *)d;
    __m128i lo = _mm_packs_epi32(_mm_loadu_si128(q), _mm_loadu_si128(q + 1));
    __m128i hi = _mm_packs_epi32(_mm_loadu_si128(q + 2), _mm_loadu_si128(q + 3));
    return plain_bytes16(p, _mm_packus_epi16(lo, hi));
}
#else
#define PLAIN16(NAME, T)                                                                    \
    static inline int NAME(char *p, const T *d)                                            \
    {                                                                                       \
        int k = 0;                                                                          \
        while (k < 16 && d[k] < 0x80 && ascii_width[d[k]] == 1) {                           \
            p[k] = (char)d[k];                                                              \
            k++;                                                                            \
        }                                                                                   \
        return k;                                                                           \
    }
PLAIN16(plain16_1, Py_UCS1)
PLAIN16(plain16_2, Py_UCS2)
PLAIN16(plain16_4, Py_UCS4)
#endif

#define PLAIN(c) ((c) < 0x80 && ascii_width[(c)] == 1)

/* Writes s[*i:] from *data* (of kind *kind*) at *p*, until it ends or the next
   character would pass *end*; advances *i*, counts lone surrogates into *replaced*.
   Far from *end* there is no bounds check per character (none takes over 6 bytes, and
   the buffer has 8 bytes of slack past *end* for whole-word stores); runs of plain
   ASCII go 16 characters at a time, tried where two plain characters start one. */
#define WRITE_RUN(T, PLAIN16)                                                               \
    do {                                                                                    \
        const T *d = (const T *)data;                                                       \
        while (*i < n) {                                                                    \
            Py_ssize_t safe = (end - p) / 6;                                                \
            if (safe > 0) {                                                                 \
                Py_ssize_t stop = *i + safe < n ? *i + safe : n;                            \
                Py_ssize_t j = *i;                                                          \
                while (j < stop) {                                                          \
                    Py_UCS4 c = d[j];                                                       \
                    if (!PLAIN(c)) {                                                        \
                        p = write_counted(p, c, replaced);                                  \
                    }                                                                       \
                    else if (j + 16 <= stop && PLAIN(d[j + 1])) {                           \
                        int k = PLAIN16(p, d + j);                                          \
                        p += k;                                                             \
                        j += k;                                                             \
                        if (k == 16) {                                                      \
                            continue;                                                       \
                        }                                                                   \
                        /* d[j] is the character that stopped the run, before stop */       \
                        p = write_counted(p, d[j], replaced);                               \
                    }                                                                       \
                    else {                                                                  \
                        *p++ = (char)c;                                                     \
                    }                                                                       \
                    j++;                                                                    \
                }                                                                           \
                *i = stop;                                                                  \
                continue;                                                                   \
            }                                                                               \
            Py_UCS4 c = d[*i];                                                              \
            if (char_width(c) > end - p) {                                                  \
                break;                                                                      \
            }                                                                               \
            p = write_counted(p, c, replaced);                                              \
            (*i)++;                                                                         \
        }                                                                                   \
    } while (0)

static char *
write_prefix(char *p, char *end, int kind, const void *data, Py_ssize_t n, Py_ssize_t *i,
             Py_ssize_t *replaced)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        WRITE_RUN(Py_UCS1, plain16_1);
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        WRITE_RUN(Py_UCS2, plain16_2);
    }
    else {
        WRITE_RUN(Py_UCS4, plain16_4);
    }
    return p;
}

static PyObject *
cut_string(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "cut_string() takes a str, a room, a mark callable, a head room and "
                        "a tail room");
        return NULL;
    }
    PyObject *s = args[0];
    Py_ssize_t room = PyLong_AsSsize_t(args[1]);
    Py_ssize_t head_room = PyLong_AsSsize_t(args[3]);
    Py_ssize_t tail_room = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (room < 0 || head_room < 0 || tail_room < 0) {
        PyErr_SetString(PyExc_ValueError, "cut_string(): a negative room");
        return NULL;
    }
    /* One buffer as large as the longest result: the content is written once, after
       room for the longest head, then moved up to the real head and shrunk to fit. The
       8 bytes of slack take write_prefix's whole-word stores at the room's end. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, head_room + room + tail_room + 8);
    if (out == NULL) {
        return NULL;
    }
    char *base = PyBytes_AS_STRING(out);
    Py_ssize_t kept = 0, replaced = 0;
    char *stop = write_prefix(base + head_room, base + head_room + room, PyUnicode_KIND(s),
                              PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s), &kept, &replaced);
    Py_ssize_t used = stop - (base + head_room);
    PyObject *marks = PyObject_CallFunction(args[2], "n", kept);
    if (marks == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *head, *tail;
    if (!PyTuple_Check(marks) || PyTuple_GET_SIZE(marks) != 2 ||
        !PyBytes_Check(head = PyTuple_GET_ITEM(marks, 0)) ||
        !PyBytes_Check(tail = PyTuple_GET_ITEM(marks, 1)) ||
        PyBytes_GET_SIZE(head) > head_room || PyBytes_GET_SIZE(tail) > tail_room) {
        Py_DECREF(marks);
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError,
                        "cut_string(): mark() must return (head, tail) bytes within their rooms");
        return NULL;
    }
    /* mark() ran Python code, but the buffer is ours alone and *s* is immutable. */
    Py_ssize_t nh = PyBytes_GET_SIZE(head), nt = PyBytes_GET_SIZE(tail);
    base = PyBytes_AS_STRING(out);
    memmove(base + nh, base + head_room, (size_t)used);
    memcpy(base, PyBytes_AS_STRING(head), (size_t)nh);
    memcpy(base + nh + used, PyBytes_AS_STRING(tail), (size_t)nt);
    Py_DECREF(marks);
    if (_PyBytes_Resize(&out, nh + used + nt) < 0) {
        return NULL;
    }
    return Py_BuildValue("(Nnn)", out, kept, replaced);
}

/* The balanced cut of a clean value: fill(), in its own file for its length. */
#include "_fill.c"

static PyMethodDef methods[] = {
    {"bound", (PyCFunction)(void (*)(void))bound, METH_FASTCALL,
     "bound(obj, cap, depth, max_depth, max_items, max_keys, max_field, scalars, spine=None) -> int\n\n"
     "A lower bound of len(orjson.dumps(obj)) for a clean value, -1 otherwise; "
     "stops early once the bound passes cap, and then appends (container, depth, bound) to "
     "the list spine for each container it stopped in."},
    {"bound_items", (PyCFunction)(void (*)(void))bound_items, METH_FASTCALL,
     "bound_items(items, cap, depth, max_depth, max_items, max_keys, max_field, scalars) -> int\n\n"
     "bound() of the items of a list or tuple, each at *depth*, joined by commas and "
     "without brackets."},
    {"clean_dumps", (PyCFunction)(void (*)(void))clean_dumps, METH_FASTCALL,
     "clean_dumps(obj, cap, depth, (max_depth, max_items, max_keys, max_field, scalars), spine=None, compact=False) -> bytes | int\n\n"
     "orjson.dumps(obj) if obj is clean and that fits cap, else 1 (too big) or 2 (unclean); "
     "spine as for bound(); with compact, a short result is copied out of orjson's buffer."},
    {"front", (PyCFunction)(void (*)(void))front, METH_FASTCALL,
     "front(fallback, caps, min_bytes, max_bytes, finish, finish_args=(), known=None) -> callable\n\n"
     "A callable that answers fallback(obj, max_bytes=n) itself when n is an int in "
     "[min_bytes, max_bytes] and obj is clean under caps and fits: "
     "finish(bytes, *finish_args), or "
     "the bytes if finish is None; known(obj, n, outcome) where the walk said TOO_BIG or "
     "UNCLEAN and known is given; fallback for every other call or outcome."},
    {"bound_native", (PyCFunction)(void (*)(void))bound_native, METH_FASTCALL,
     "bound_native(obj, cap, depth, caps, natives) -> (int, type | None, type | None)\n\n"
     "bound() where instances of the classes in natives are walked through their "
     "__dict__ plus natives[cls] bytes; the class that made it unclean, if one did."},
    {"cut_string", (PyCFunction)(void (*)(void))cut_string, METH_FASTCALL,
     "cut_string(s, room, mark, head_room, tail_room) -> (bytes, kept, replaced)\n\n"
     "head + the escaped content of the longest prefix of s that fits room bytes + tail, "
     "where (head, tail) = mark(kept); lone surrogates become U+FFFD and are counted."},
    {"join_reports", (PyCFunction)(void (*)(void))join_reports, METH_FASTCALL,
     "join_reports(trs, base, into, make) -> None\n\n"
     "EncodeCall.reports(): appends make(base + tokens, kind, omitted, unit) to the list "
     "into for each report of the relative reports trs."},
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(obj, budget, caps, count, least) -> (bytes, trs) | False | None\n\n"
     "EncodeCall.fit() of a clean value with the balanced strategy, text markers and no "
     "item, key or field cap: its bytes and relative reports (packed: a sequence of "
     "(pointer, kind, omitted, unit) that join_reports reads), False when not even a "
     "marker fits, None when the renderer must do it. count: a one-item list the nodes "
     "measured or written are added to, or None; least: a lower bound of obj's size "
     "already known (0 if none)."},
    {"clean_result", (PyCFunction)(void (*)(void))clean_result, METH_FASTCALL,
     "clean_result(obj, cap, caps, types, make, kind) -> object | None\n\n"
     "make(data, kind, len(data), None, None) where type(obj) is in the frozenset types and "
     "clean_dumps(obj, cap, 0, caps, None, True) gives bytes data; else None."},
    {"compact", compact, METH_O,
     "compact(data) -> bytes\n\nA copy of data that holds its length and no more, if data "
     "is shorter than 8 KiB; else data itself."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Compiled helpers for the encoder.", 0, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    str_dataclass_fields = PyUnicode_InternFromString("__dataclass_fields__");
    str_slots = PyUnicode_InternFromString("__slots__");
    str_pydantic_fields = PyUnicode_InternFromString("__pydantic_fields__");
    str_attrs = PyUnicode_InternFromString("__attrs_attrs__");
    str_utcoffset = PyUnicode_InternFromString("utcoffset");
    init_ascii_width();
    if (init_fill() < 0 || init_plain_dict() < 0) {
        return NULL;
    }
    str_max_bytes = PyUnicode_InternFromString("max_bytes");
    zero = PyLong_FromLong(0);
    if (str_max_bytes == NULL || zero == NULL || PyType_Ready(&FrontType) < 0) {
        return NULL;
    }
    if (!str_dataclass_fields || !str_slots || !str_pydantic_fields || !str_attrs ||
        !str_utcoffset) {
        return NULL;
    }
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    PyObject *enum_module = PyImport_ImportModule("enum");
    if (enum_module == NULL) {
        return NULL;
    }
    enum_type = (PyTypeObject *)PyObject_GetAttrString(enum_module, "Enum");
    Py_DECREF(enum_module);
    if (enum_type == NULL) {
        return NULL;
    }
    if (!PyType_Check(enum_type)) {
        PyErr_SetString(PyExc_ImportError, "_speedups: enum.Enum is not a class");
        return NULL;
    }
    type_getattribute = _PyType_Lookup(&PyType_Type, str_getattribute);
    if (type_getattribute == NULL) {
        return NULL;
    }
    Py_INCREF(type_getattribute);
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
