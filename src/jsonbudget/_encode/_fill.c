/* The balanced cut of a clean value, compiled: `fill`.
 *
 * Included by _speedups.c (it shares the walk, the caps and the string writer there).
 *
 * fill(obj, budget, caps, count, least) -> (bytes, trs) | False | None is
 * EncodeCall.fit() of render.py for a value of exact dicts, lists, tuples, strs, ints of
 * 64 bits, finite floats, bools and None, with `strategy="balanced"`, text markers and
 * no item, key or field cap (max_depth is in *caps*). It makes the same choices step for
 * step: the members an object shows at their least, the keys it cuts, the water-filling
 * rounds and level, a list's prefix of whole items read 64 and then four times more at a
 * time, its bulk runs and the sizes that steer them, so the output and the reports are
 * byte for byte the renderer's (tests/test_fill.py compares them on random values).
 * False: not even a marker fits. None: the value needs what only the renderer does
 * (another type, a lone surrogate, an int beyond 64 bits, a container at max_depth, a
 * cycle), and the caller renders all of it in Python; what was done here is dropped.
 * *count*, a one-item list or None, gets the nodes this call measured or wrote added to
 * its item (for the complexity tests). *least* is a lower bound of obj's size a walk
 * already found (0 if none ran).
 *
 * Why: render.py spends a few microseconds of Python on each member of a cut object;
 * a balanced cut of a documentation-heavy model writes hundreds of cut objects (a
 * 64 KiB cut of botocore's S3 model: about 800), so it cost 60-200 times the "prefix"
 * cut. Here a value is measured exactly (orjson's own escaping, ints and, through one
 * orjson call, floats) and written straight into one buffer.
 *
 * Sizes are remembered per (container, depth), as render.py remembers them: its exact
 * size once known, else the largest cap it is known to exceed, so asking again with a
 * cap no larger costs nothing. Small containers are not remembered (walking one again
 * costs less than the table); a container asked with a large cap is first bounded by
 * the size walk, whose spine, when it stops, is remembered as render._clean_dumps
 * keeps it. Every container remembered is held (a strong reference) until the call
 * ends. Reports are kept flat and packed, with no Python object per report (see
 * f_report); a Reports object hands them on, and `join_reports` makes them.
 *
 * Measuring and writing a whole value call no Python code: they read exact built-in
 * types, allocate only raw memory and bytes (orjson's, for a float), none of which the
 * garbage collector tracks, so no collection and no finalizer can run in them and they
 * read members borrowed, as the walk in _speedups.c does. Cutting makes the reports,
 * tuples and lists that can start a collection, whose finalizers may change any
 * container: a cut reads its members through a snapshot of strong references, decides
 * from that snapshot alone, and checks the bytes it wrote against its allotment.
 */

#define F_NONE (-1)  /* no rendering fits */
#define F_ABORT (-2) /* the renderer must do it */
#define F_ERROR (-3) /* an exception is set */
#define F_BIG ((Py_ssize_t)1 << 62)
#define F_FIRST_READ 64
#define F_ROUNDS 8
#define F_SHORT_KEY 256
#define F_LEAST_ROOM 80
#define F_REMEMBER 32 /* bytes from which a container's measure is remembered */
#define F_WALK_FIRST 1024 /* caps from which a container is walked before it is sized */
#define F_LOCAL 8 /* members of a cut object whose state fits on the stack */
#define F_SHORT_STR 32 /* characters up to which a plain str is copied whole */

typedef struct {
    PyObject *obj; /* held */
    int depth;
    Py_ssize_t size; /* exact, or -1 */
    Py_ssize_t over; /* a cap it is known to exceed, or -1 */
    Py_ssize_t snap; /* the most members a snapshot of it read (render._snap) */
} Known;

/* A report's kind, which also names its unit ("string" counts chars). */
enum { F_STRING, F_ITEMS, F_KEYS };

/* One report: its pointer is the bytes from the previous report's *end* to its own in
   the paths buffer. */
typedef struct {
    Py_ssize_t end;
    Py_ssize_t omitted;
    int kind;
} Rep;

typedef struct {
    PyObject *out; /* the bytes being written: buf is its storage */
    char *buf;
    Py_ssize_t len, cap;
    Known *known;
    Py_ssize_t nknown, known_cap;
    Py_ssize_t known_first; /* the table's first size */
    int max_depth;
    Caps caps;
    PyObject *active[MAX_STACK + 1]; /* the containers being measured or cut */
    int nactive;
    Py_ssize_t work;
    Rep *reps;       /* the reports so far, see f_report */
    Py_ssize_t nreps, repcap;
    char *rpaths;    /* their relative pointers, UTF-8, back to back */
    Py_ssize_t rplen, rpcap;
    char *path;      /* the pointer of the value being cut, relative, in UTF-8 */
    Py_ssize_t plen, pcap;
} Fill;

static PyObject *s_kind[3], *s_unit[3];
/* 1 for each byte written as it is: ASCII, not '"', backslash or a control character. */
static unsigned char f_plain_byte[256];

/* -- the output buffer ------------------------------------------------------------- */

static int
f_reserve(Fill *f, Py_ssize_t more)
{
    if (f->len + more + 8 <= f->cap) {
        return 0;
    }
    Py_ssize_t want = f->cap * 2;
    if (want < f->len + more + 64) {
        want = f->len + more + 64;
    }
    if (_PyBytes_Resize(&f->out, want) < 0) {
        return -1; /* it freed f->out */
    }
    f->buf = PyBytes_AS_STRING(f->out);
    f->cap = want;
    return 0;
}

/* Starts the output: a bytes object (the result, shrunk to its length at the end, so
   it is never copied), as large as the budget up to 1 MiB: growing it step by step
   copied it twice over. */
static int
f_open(Fill *f, Py_ssize_t budget)
{
    f->cap = budget < 0 ? 64 : budget < (1 << 20) ? budget + 64 : (1 << 20);
    f->out = PyBytes_FromStringAndSize(NULL, f->cap);
    if (f->out == NULL) {
        return -1;
    }
    f->buf = PyBytes_AS_STRING(f->out);
    return 0;
}

static inline int
f_put(Fill *f, const char *s, Py_ssize_t n)
{
    if (f_reserve(f, n) < 0) {
        return -1;
    }
    memcpy(f->buf + f->len, s, (size_t)n);
    f->len += n;
    return 0;
}

static inline int
f_byte(Fill *f, char c)
{
    if (f_reserve(f, 1) < 0) {
        return -1;
    }
    f->buf[f->len++] = c;
    return 0;
}

/* -- what is remembered per (container, depth) -------------------------------------- */

static inline size_t
f_hash(PyObject *o, int depth, Py_ssize_t mask)
{
    size_t h = ((size_t)o >> 4) * 0x9E3779B97F4A7C15ull + (size_t)depth;
    return (size_t)(h >> 17) & (size_t)mask;
}

/* The entry of (o, depth), or NULL when there is none. */
static Known *
f_known_find(const Fill *f, PyObject *o, int depth)
{
    if (f->known_cap == 0) {
        return NULL;
    }
    size_t j = f_hash(o, depth, f->known_cap - 1);
    while (f->known[j].obj != NULL) {
        if (f->known[j].obj == o && f->known[j].depth == depth) {
            return &f->known[j];
        }
        j = (j + 1) & (size_t)(f->known_cap - 1);
    }
    return NULL;
}

/* The entry of (o, depth), made (holding o) if there was none; NULL with an exception. */
static Known *
f_known(Fill *f, PyObject *o, int depth)
{
    if ((f->nknown + 1) * 2 > f->known_cap) {
        Py_ssize_t cap = f->known_cap ? f->known_cap * 2 : f->known_first;
        Known *t = PyMem_Calloc((size_t)cap, sizeof(Known));
        if (t == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < f->known_cap; i++) {
            Known *e = &f->known[i];
            if (e->obj != NULL) {
                size_t j = f_hash(e->obj, e->depth, cap - 1);
                while (t[j].obj != NULL) {
                    j = (j + 1) & (size_t)(cap - 1);
                }
                t[j] = *e;
            }
        }
        PyMem_Free(f->known);
        f->known = t;
        f->known_cap = cap;
    }
    size_t j = f_hash(o, depth, f->known_cap - 1);
    while (f->known[j].obj != NULL) {
        if (f->known[j].obj == o && f->known[j].depth == depth) {
            return &f->known[j];
        }
        j = (j + 1) & (size_t)(f->known_cap - 1);
    }
    Known *e = &f->known[j];
    e->obj = Py_NewRef(o);
    e->depth = depth;
    e->size = -1;
    e->over = -1;
    e->snap = 0;
    f->nknown++;
    return e;
}

/* -- reading a dict ----------------------------------------------------------------- */

/* A dict's pairs in order, borrowed: from its entries array where the walk reads it
   (DIRECT_DICT: a combined table of str keys), else through PyDict_Next. Only where no
   Python code runs until the reading ends. */
typedef struct {
    PyObject *dict;
    Py_ssize_t pos;
#if DIRECT_DICT
    const PyDictUnicodeEntry *entries;
    Py_ssize_t used;
#endif
} Pairs;

static inline void
pairs_start(Pairs *it, PyObject *dict)
{
    it->dict = dict;
    it->pos = 0;
#if DIRECT_DICT
    PyDictObject *mp = (PyDictObject *)dict;
    it->entries = NULL;
    if (mp->ma_values == NULL && DK_IS_UNICODE(mp->ma_keys)) {
        it->entries = DK_UNICODE_ENTRIES(mp->ma_keys);
        it->used = mp->ma_keys->dk_nentries;
    }
#endif
}

static inline int
pairs_next(Pairs *it, PyObject **key, PyObject **value)
{
#if DIRECT_DICT
    if (it->entries != NULL) {
        while (it->pos < it->used) {
            const PyDictUnicodeEntry *e = &it->entries[it->pos++];
            if (e->me_value != NULL) { /* else a deleted entry */
                *key = e->me_key;
                *value = e->me_value;
                return 1;
            }
        }
        return 0;
    }
#endif
    return PyDict_Next(it->dict, &it->pos, key, value);
}

/* -- snapshots ----------------------------------------------------------------------- */

/* The first *limit* items of list or tuple *v* (all if fewer), held: *n* of them. */
static PyObject **
f_snap_items(PyObject *v, Py_ssize_t limit, Py_ssize_t *n)
{
    Py_ssize_t size = Py_SIZE(v);
    Py_ssize_t k = size < limit ? size : limit;
    PyObject **out = PyMem_Malloc((size_t)(k > 0 ? k : 1) * sizeof(PyObject *));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *const *src = items_of(v);
    for (Py_ssize_t i = 0; i < k; i++) {
        out[i] = Py_NewRef(src[i]);
    }
    *n = k;
    return out;
}

/* The first *limit* (key, value) pairs of dict *v*, held, as 2*n pointers: in *local*
   (of *nlocal* pointers) when they fit there. */
static PyObject **
f_snap_pairs(PyObject *v, Py_ssize_t limit, Py_ssize_t *n, PyObject **local, Py_ssize_t nlocal)
{
    Py_ssize_t size = PyDict_GET_SIZE(v);
    Py_ssize_t k = size < limit ? size : limit;
    PyObject **out = 2 * k <= nlocal ? local
                                     : PyMem_Malloc((size_t)(k > 0 ? 2 * k : 1) * sizeof(PyObject *));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t i = 0;
    PyObject *key, *val;
    Pairs it;
    pairs_start(&it, v);
    while (i < k && pairs_next(&it, &key, &val)) {
        out[2 * i] = Py_NewRef(key);
        out[2 * i + 1] = Py_NewRef(val);
        i++;
    }
    *n = i;
    return out;
}

/* Lets go of a snapshot of *count* pointers (and its memory, unless it is *local*). */
static void
f_release(PyObject **snap, Py_ssize_t count, PyObject **local)
{
    if (snap == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(snap[i]);
    }
    if (snap != local) {
        PyMem_Free(snap);
    }
}

static inline int
f_is_active(const Fill *f, PyObject *v)
{
    for (int i = 0; i < f->nactive; i++) {
        if (f->active[i] == v) {
            return 1;
        }
    }
    return 0;
}

/* How many members a snapshot of container *v* (of *n*) at *depth* holds when *want*
   are asked: render._snap keeps a snapshot that has at least that many, or all. */
static Py_ssize_t
f_snap_limit(Fill *f, PyObject *v, int depth, Py_ssize_t want, Py_ssize_t n)
{
    if (want >= n) {
        return want; /* all of it, whatever was read before: nothing to remember */
    }
    Known *k = f_known(f, v, depth);
    if (k == NULL) {
        return -1;
    }
    if (k->snap > 0 && (k->snap >= want || k->snap >= n)) {
        return k->snap;
    }
    k->snap = want;
    return want;
}

/* -- exact sizes ------------------------------------------------------------------- */

/* Writes the decimal digits of *u* at *out*; returns their count. */
static inline Py_ssize_t
f_utoa(unsigned long long u, char *out)
{
    char tmp[24];
    Py_ssize_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = tmp[n - 1 - i];
    }
    return n;
}

/* Whether the 8 bytes at *d* are all plain ASCII: none below 0x20, none 0x80 or more,
   no '"' and no backslash (the has-less-than and has-zero-byte word tricks; a false
   alarm only sends the word down the byte-by-byte path). */
static inline int
f_plain8(const Py_UCS1 *d)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w, q, b;
    memcpy(&w, d, 8);
    q = w ^ (ones * '"');
    b = w ^ (ones * '\\');
    uint64_t bad = (w & highs) | ((w - ones * 0x20) & ~w & highs) | ((q - ones) & ~q & highs) |
                   ((b - ones) & ~b & highs);
    return bad == 0;
}

/* Whether the *n* characters of one byte at *d* are all plain ASCII. */
static inline int
f_plain(const Py_UCS1 *d, Py_ssize_t n)
{
    if (n < 8) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!f_plain_byte[d[i]]) {
                return 0;
            }
        }
        return 1;
    }
    for (Py_ssize_t i = 0; i + 8 <= n; i += 8) {
        if (!f_plain8(d + i)) {
            return 0;
        }
    }
    return f_plain8(d + n - 8); /* the last eight, overlapping */
}

/* Bytes of str *s* as orjson writes it, quotes included, counting no further than
   *cap* (then any number above it); F_ABORT for a lone surrogate. */
static Py_ssize_t
f_str_size(PyObject *s, Py_ssize_t cap)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    Py_ssize_t size = n + 2;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = data;
        if (size <= cap && f_plain(d, n)) {
            return size; /* most: nothing to escape, found a word at a time */
        }
        Py_ssize_t i = 0;
        while (i < n && size <= cap) {
            if (i + 8 <= n ? f_plain8(d + i) : n >= 8 && f_plain8(d + n - 8)) {
                /* eight characters of one byte each, counted in n; at the end, the
                   last eight, overlapping plain ones */
                i += 8;
                continue;
            }
            for (Py_ssize_t end = i + 8 < n ? i + 8 : n; i < end; i++) {
                size += d[i] < 0x80 ? ascii_width[d[i]] - 1 : 1;
            }
        }
        return size;
    }
    for (Py_ssize_t i = 0; i < n && size <= cap; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            return F_ABORT;
        }
        size += char_width(c) - 1;
    }
    return size;
}

/* orjson's bytes for a finite float, new, or NULL with an exception set. */
static PyObject *
f_float_bytes(PyObject *v)
{
    PyObject *data = orjson_bytes(v);
    if (data == Py_None) { /* orjson writes every finite float */
        Py_DECREF(data);
        PyErr_SetString(PyExc_TypeError, "orjson.dumps() refused a finite float");
        return NULL;
    }
    return data;
}

/* The decimal digits of an int orjson writes (64 bits, signed or not) into *out*:
   their count, or F_ABORT for a larger int, F_ERROR with an exception set. */
static Py_ssize_t
f_int_text(PyObject *v, char *out)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        return F_ERROR;
    }
    if (!overflow) {
        if (x < 0) {
            *out = '-';
            return 1 + f_utoa(0ull - (unsigned long long)x, out + 1);
        }
        return f_utoa((unsigned long long)x, out);
    }
    if (overflow < 0) {
        return F_ABORT;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* beyond 64 bits: the renderer's marker */
        return F_ABORT;
    }
    return f_utoa(u, out);
}

/* Bytes of scalar *v* as orjson writes it; F_ABORT for anything else. */
static Py_ssize_t
f_scalar_size(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None || v == Py_True) {
        return 4;
    }
    if (v == Py_False) {
        return 5;
    }
    if (t == &PyLong_Type) {
        char digits[24];
        return f_int_text(v, digits);
    }
    if (t == &PyFloat_Type) {
        if (!isfinite(PyFloat_AS_DOUBLE(v))) {
            return F_ABORT;
        }
        PyObject *data = f_float_bytes(v);
        if (data == NULL) {
            return F_ERROR;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(data);
        Py_DECREF(data);
        return n;
    }
    return F_ABORT;
}

static inline int
f_container(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyDict_Type || t == &PyList_Type || t == &PyTuple_Type;
}

static Py_ssize_t f_size(Fill *f, PyObject *v, Py_ssize_t cap, int depth);

/* The exact size of a container at *depth* if it is at most *cap*, else F_NONE. */
static Py_ssize_t
f_container_size(Fill *f, PyObject *v, Py_ssize_t cap, int depth)
{
    if (depth >= f->max_depth || f_is_active(f, v)) {
        return F_ABORT; /* a depth marker or a cycle: the renderer's */
    }
    Known *k = f_known_find(f, v, depth);
    if (k != NULL && k->size >= 0) {
        return k->size <= cap ? k->size : F_NONE;
    }
    if (k != NULL && k->over >= cap) {
        return F_NONE;
    }
    f->work++;
    int is_dict = PyDict_CheckExact(v);
    Py_ssize_t n = is_dict ? PyDict_GET_SIZE(v) : Py_SIZE(v);
    Py_ssize_t size = n ? n + 1 : 2; /* brackets and commas */
    Py_ssize_t out = 0;
    /* No more members than could fit at their least (4 bytes and a comma a member, a
       byte and a comma an item) are read: the rest cannot fit. */
    if (size > cap || n > (is_dict ? cap / 5 + 2 : cap / 2 + 2)) {
        out = F_NONE;
        goto done;
    }
    if (cap >= F_WALK_FIRST) {
        /* The size walk first, as EncodeCall.whole() asks it: a lower bound at a
           fraction of the cost of exact sizes (no escapes looked at, nothing
           remembered), so a value far over its cap is not sized exactly. */
        Walk w;
        start(&w, &f->caps, depth);
        w.record = 1;
        Py_ssize_t lb = bound_of(&w, v, 0, depth, cap);
        if (lb == FAILED) {
            return F_ERROR;
        }
        if (lb > cap) {
            /* Its spine, as render._clean_dumps keeps it: each container the walk
               stopped in is at least as large as its bound there, so asking it again
               with a smaller cap (as the cut goes down that path) walks nothing. */
            for (int i = 0; i < w.nspine; i++) {
                Known *s = f_known(f, w.spine[i], w.spine_depth[i]);
                if (s == NULL) {
                    return F_ERROR;
                }
                if (s->size < 0 && s->over < w.spine_size[i] - 1) {
                    s->over = w.spine_size[i] - 1;
                }
            }
            out = F_NONE;
            goto done;
        }
    }
    /* Members are borrowed: measuring calls no Python code (see the top). */
    PyObject *const *items = is_dict ? NULL : items_of(v);
    Pairs it;
    if (is_dict) {
        pairs_start(&it, v);
    }
    f->active[f->nactive++] = v;
    for (Py_ssize_t i = 0; i < n && out == 0; i++) {
        PyObject *m;
        if (is_dict) {
            PyObject *key;
            if (!pairs_next(&it, &key, &m)) {
                break;
            }
            if (!PyUnicode_CheckExact(key)) {
                out = F_ABORT;
                break;
            }
            Py_ssize_t ks = f_str_size(key, cap - size + 2);
            if (ks < 0) {
                out = ks;
                break;
            }
            size += ks + 1; /* and its colon */
            if (size > cap) {
                out = F_NONE;
                break;
            }
        }
        else {
            m = items[i];
        }
        Py_ssize_t sub = f_size(f, m, cap - size, depth + 1);
        if (sub < 0) {
            out = sub;
            break;
        }
        size += sub;
        if (size > cap) {
            out = F_NONE;
        }
    }
    f->nactive--;
done:
    if (out < F_NONE) {
        return out;
    }
    /* Remembered when re-measuring would cost more than a lookup: a small container is
       walked again, a large one or one that passed a large cap is not. */
    if ((out == F_NONE ? cap : size) < F_REMEMBER && f_known_find(f, v, depth) == NULL) {
        return out == F_NONE ? F_NONE : size;
    }
    k = f_known(f, v, depth); /* found again: the table may have grown meanwhile */
    if (k == NULL) {
        return F_ERROR;
    }
    if (out == F_NONE) {
        if (k->over < cap) {
            k->over = cap;
        }
        return F_NONE;
    }
    k->size = size;
    return size;
}

/* The exact size of *v* as its whole rendering if it is at most *cap*, else F_NONE:
   EncodeCall.whole() for a clean value. */
static Py_ssize_t
f_size(Fill *f, PyObject *v, Py_ssize_t cap, int depth)
{
    if (cap <= 0) {
        return F_NONE;
    }
    PyTypeObject *t = Py_TYPE(v);
    Py_ssize_t s;
    if (t == &PyUnicode_Type) {
        if (PyUnicode_GET_LENGTH(v) + 2 > cap) {
            return F_NONE;
        }
        s = f_str_size(v, cap);
    }
    else if (f_container(v)) {
        return f_container_size(f, v, cap, depth);
    }
    else {
        s = f_scalar_size(v);
    }
    if (s < 0) {
        return s;
    }
    return s <= cap ? s : F_NONE;
}

/* -- writing a whole value ---------------------------------------------------------- */

/* An ASCII str with nothing to escape, quoted: its characters are its bytes. */
static int
f_put_plain(Fill *f, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (f_reserve(f, n + 2) < 0) {
        return -1;
    }
    char *p = f->buf + f->len;
    *p = '"';
    memcpy(p + 1, PyUnicode_DATA(s), (size_t)n);
    p[n + 1] = '"';
    f->len += n + 2;
    return 0;
}

static int
f_write_str(Fill *f, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n <= F_SHORT_STR && PyUnicode_IS_ASCII(s) && f_plain(PyUnicode_DATA(s), n)) {
        /* a short plain str, as most keys: write_prefix is built for long ones, and
           its setup was most of a short one's cost */
        return f_put_plain(f, s);
    }
    /* At most 6 bytes a character, and write_prefix's 8 bytes of slack. */
    if (f_reserve(f, 6 * n + 2) < 0) {
        return -1;
    }
    char *p = f->buf + f->len;
    *p++ = '"';
    Py_ssize_t i = 0, replaced = 0;
    p = write_prefix(p, p + 6 * n, PyUnicode_KIND(s), PyUnicode_DATA(s), n, &i, &replaced);
    *p++ = '"';
    f->len = p - f->buf;
    return 0;
}

/* Writes clean *v* whole (its size was measured: nothing here can abort). */
static int
f_write(Fill *f, PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    f->work++;
    if (t == &PyUnicode_Type) {
        return f_write_str(f, v);
    }
    if (v == Py_None) {
        return f_put(f, "null", 4);
    }
    if (v == Py_True) {
        return f_put(f, "true", 4);
    }
    if (v == Py_False) {
        return f_put(f, "false", 5);
    }
    if (t == &PyLong_Type) {
        char digits[24];
        Py_ssize_t n = f_int_text(v, digits);
        if (n == F_ABORT) { /* measured within 64 bits: unreachable while nothing runs */
            PyErr_SetString(PyExc_RuntimeError, "fill(): an int changed while written");
        }
        return n < 0 ? -1 : f_put(f, digits, n);
    }
    if (t == &PyFloat_Type) {
        PyObject *data = f_float_bytes(v);
        if (data == NULL) {
            return -1;
        }
        int r = f_put(f, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
        Py_DECREF(data);
        return r;
    }
    int is_dict = t == &PyDict_Type;
    if (!is_dict && t != &PyList_Type && t != &PyTuple_Type) {
        /* Measured as a container: only Python code run since (which nothing here may
           run: a bulk run's walk admits no class whose attribute lookup is Python)
           could have put another value here. Never read as what it is not. */
        PyErr_SetString(PyExc_RuntimeError, "fill(): a value changed while it was written");
        return -1;
    }
    /* Members are borrowed: writing calls no Python code (see the top). */
    Py_ssize_t n = is_dict ? PyDict_GET_SIZE(v) : Py_SIZE(v);
    PyObject *const *items = is_dict ? NULL : items_of(v);
    Pairs it;
    if (is_dict) {
        pairs_start(&it, v);
    }
    int r = f_byte(f, is_dict ? '{' : '[');
    for (Py_ssize_t i = 0; i < n && r == 0; i++) {
        PyObject *key, *m;
        if (i) {
            r = f_byte(f, ',');
        }
        if (is_dict) {
            if (!pairs_next(&it, &key, &m)) {
                break;
            }
            if (r == 0 && !PyUnicode_CheckExact(key)) {
                PyErr_SetString(PyExc_RuntimeError, "fill(): a value changed while it was written");
                r = -1;
            }
            r = r == 0 ? f_write_str(f, key) : r;
            r = r == 0 ? f_byte(f, ':') : r;
        }
        else {
            m = items[i];
        }
        if (r == 0) {
            r = f_write(f, m);
        }
    }
    if (r == 0) {
        r = f_byte(f, is_dict ? '}' : ']');
    }
    return r;
}

/* -- markers (text) ------------------------------------------------------------------ */

/* N when key *k* is "…" (0) or "…N" with N in 1..*most* written as Markers.key writes
   it, else -1. */
static Py_ssize_t
f_mkey_number(PyObject *k, Py_ssize_t most)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(k);
    if (n == 0 || n > 21 || PyUnicode_READ_CHAR(k, 0) != 0x2026) {
        return -1;
    }
    if (n > 1 && PyUnicode_READ_CHAR(k, 1) == '0') {
        return -1; /* "…0", "…01": never a candidate */
    }
    Py_ssize_t v = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(k, i);
        if (c < '0' || c > '9') {
            return -1;
        }
        v = v * 10 + (Py_ssize_t)(c - '0');
        if (v > most) {
            return -1;
        }
    }
    return v;
}

/* Key *i* of dict *v*, read on through *it* (started on *v*), or, with *v* NULL, of the
   snapshot *pairs*; NULL past the dict's end. */
static inline PyObject *
f_key_at(PyObject *v, Pairs *it, PyObject **pairs, Py_ssize_t i)
{
    PyObject *k, *val;
    if (v == NULL) {
        return pairs[2 * i];
    }
    return pairs_next(it, &k, &val) ? k : NULL;
}

/* The key of the member that stands for left-out keys: "…", else "…1", "…2", ... the
   first that none of the first *count* keys of dict *v* (or, with *v* NULL, of the
   snapshot *pairs*) is (Markers.key over _short_keys); F_ABORT if one is not a str.
   The answer is at most *count*, so one pass marks the numbers taken. Dict keys are
   borrowed: nothing runs here. */
static Py_ssize_t
f_marker_key_of(PyObject *v, PyObject **pairs, Py_ssize_t count)
{
    char local[64] = {0};
    char *seen = local;
    if (count + 2 > (Py_ssize_t)sizeof local && (seen = PyMem_Calloc((size_t)count + 2, 1)) == NULL) {
        PyErr_NoMemory();
        return F_ERROR;
    }
    Py_ssize_t best = 0;
    PyObject *k;
    Pairs it;
    if (v != NULL) {
        pairs_start(&it, v);
    }
    for (Py_ssize_t i = 0; i < count && (k = f_key_at(v, &it, pairs, i)) != NULL; i++) {
        if (!PyUnicode_CheckExact(k)) {
            best = F_ABORT; /* a key the renderer rewrites */
            goto out;
        }
        if (PyUnicode_IS_ASCII(k)) {
            continue; /* no "…" */
        }
        Py_ssize_t number = f_mkey_number(k, count);
        if (number >= 0) {
            seen[number] = 1;
        }
    }
    while (seen[best]) {
        best++;
    }
out:
    if (seen != local) {
        PyMem_Free(seen);
    }
    return best;
}

/* f_marker_key_of(), where almost every object answers "…" at once: all its keys ASCII
   (no "…N" among them) and exact strs. Only an object with another key pays for the
   pass that marks numbers taken. */
static inline Py_ssize_t
f_marker_key(PyObject *v, PyObject **pairs, Py_ssize_t count)
{
    PyObject *k;
    Pairs it;
    if (v != NULL) {
        pairs_start(&it, v);
    }
    for (Py_ssize_t i = 0; i < count && (k = f_key_at(v, &it, pairs, i)) != NULL; i++) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_IS_ASCII(k)) {
            return f_marker_key_of(v, pairs, count);
        }
    }
    return 0;
}

/* Markers are formatted here by hand: snprintf was a seventh of a cut's time. */

/* The number of decimal digits of *u*. */
static inline Py_ssize_t
f_digits(unsigned long long u)
{
    Py_ssize_t n = 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

/* *head*, then *more* when omitted < 0, else the count and *tail*, at *out*; returns
   the bytes written. With *out* NULL, only counts them: most markers are sized, for
   the room they need, many times more often than written. */
static inline Py_ssize_t
f_counted(char *out, const char *head, size_t nh, Py_ssize_t omitted, const char *tail,
          size_t nt, const char *more, size_t nm)
{
    if (out == NULL) {
        return (Py_ssize_t)nh +
               (omitted < 0 ? (Py_ssize_t)nm
                            : f_digits((unsigned long long)omitted) + (Py_ssize_t)nt);
    }
    char *p = out;
    memcpy(p, head, nh);
    p += nh;
    if (omitted < 0) {
        memcpy(p, more, nm);
        return (p + nm) - out;
    }
    p += f_utoa((unsigned long long)omitted, p);
    memcpy(p, tail, nt);
    return (p + nt) - out;
}

#define F_LIT(s) s, sizeof(s) - 1

/* `"…N":` -- the marker key with its quotes and colon: its bytes into *out*. */
static Py_ssize_t
f_mkey_text(Py_ssize_t mkey, char *out)
{
    return f_counted(out, F_LIT("\"\xe2\x80\xa6"), mkey ? mkey : -1, F_LIT("\":"), F_LIT("\":"));
}

/* Markers.keys(omitted, key) into *out* (room for 96 bytes; NULL: only its size);
   omitted < 0: "more". The other markers below alike. */
static Py_ssize_t
f_keys_marker(Py_ssize_t omitted, Py_ssize_t mkey, char *out)
{
    Py_ssize_t n = f_mkey_text(mkey, out);
    return n + f_counted(out == NULL ? NULL : out + n, F_LIT("\"[omitted: "), omitted, F_LIT(" more keys]\""),
                         F_LIT("more keys]\""));
}

static Py_ssize_t
f_items_marker(Py_ssize_t omitted, char *out)
{
    return f_counted(out, F_LIT("\"\xe2\x80\xa6[omitted: "), omitted, F_LIT(" more items]\""),
                     F_LIT("more items]\""));
}

/* The tail of a cut string's marker (after the content): `…[truncated: N more chars]"`. */
static Py_ssize_t
f_string_tail(Py_ssize_t omitted, char *out)
{
    if (omitted < 0) {
        return f_counted(out, F_LIT("\xe2\x80\xa6[truncated]\""), -1, F_LIT(""), F_LIT(""));
    }
    return f_counted(out, F_LIT("\xe2\x80\xa6[truncated: "), omitted, F_LIT(" more chars]\""),
                     F_LIT(""));
}

/* -- reports -------------------------------------------------------------------------- */

/* Reports are kept flat, one list for the call: each is (pointer, kind, omitted, unit),
   the pointer relative to the value fill() was given, a form EncodeCall.reports()
   joins like the renderer's nested ones. The pointer is built in f->path as a cut
   descends: a push returns the length to pop back to. */

static int
f_path_reserve(Fill *f, Py_ssize_t more)
{
    if (f->plen + more <= f->pcap) {
        return 0;
    }
    Py_ssize_t want = 2 * f->pcap > f->plen + more ? 2 * f->pcap : f->plen + more + 64;
    char *p = PyMem_Realloc(f->path, (size_t)want);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    f->path = p;
    f->pcap = want;
    return 0;
}

/* "/" and *key* with ~ and / escaped (RFC 6901), as render.token() writes it. */
static Py_ssize_t
f_push_key(Fill *f, PyObject *key)
{
    Py_ssize_t old = f->plen, n = PyUnicode_GET_LENGTH(key);
    if (f_path_reserve(f, 1 + 4 * n) < 0) {
        return -1;
    }
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    char *p = f->path + f->plen;
    *p++ = '/';
    if (PyUnicode_IS_ASCII(key) && memchr(data, '~', (size_t)n) == NULL &&
        memchr(data, '/', (size_t)n) == NULL) {
        memcpy(p, data, (size_t)n); /* most keys: their bytes as they are */
        f->plen = (p + n) - f->path;
        return old;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '~' || c == '/') {
            *p++ = '~';
            *p++ = c == '~' ? '0' : '1';
        }
        else if (c < 0x80) {
            *p++ = (char)c;
        }
        else if (c < 0x800) {
            *p++ = (char)(0xC0 | (c >> 6));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
        else if (c < 0x10000) { /* no lone surrogate reaches a cut: the renderer's */
            *p++ = (char)(0xE0 | (c >> 12));
            *p++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
        else {
            *p++ = (char)(0xF0 | (c >> 18));
            *p++ = (char)(0x80 | ((c >> 12) & 0x3F));
            *p++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    f->plen = p - f->path;
    return old;
}

/* *head* and the count *n* (none when n < 0): "/i" for an item's index, "/…" or "/…N"
   for the member that stands for left-out keys. */
static Py_ssize_t
f_push_counted(Fill *f, const char *head, size_t nh, Py_ssize_t n)
{
    Py_ssize_t old = f->plen;
    if (f_path_reserve(f, (Py_ssize_t)nh + 24) < 0) {
        return -1;
    }
    f->plen += f_counted(f->path + f->plen, head, nh, n, F_LIT(""), F_LIT(""));
    return old;
}

static inline Py_ssize_t
f_push_index(Fill *f, Py_ssize_t i)
{
    return f_push_counted(f, F_LIT("/"), i);
}

static inline Py_ssize_t
f_push_mkey(Fill *f, Py_ssize_t mkey)
{
    return f_push_counted(f, F_LIT("/\xe2\x80\xa6"), mkey ? mkey : -1);
}

/* Grows the block *p* (of *cap* elements of *size* bytes) to hold *need*. */
static int
f_grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t size)
{
    if (need <= *cap) {
        return 0;
    }
    Py_ssize_t want = *cap * 2 > need ? *cap * 2 : need + 16;
    void *q = PyMem_Realloc(*p, (size_t)want * size);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = want;
    return 0;
}

/* Appends (the pointer in f->path, *kind*, omitted) to the reports: two copies into
   raw memory, where a tuple, a str and an int per report were a third of a cut. */
static int
f_report(Fill *f, int kind, Py_ssize_t omitted)
{
    if (f_grow((void **)&f->reps, &f->repcap, f->nreps + 1, sizeof(Rep)) < 0 ||
        f_grow((void **)&f->rpaths, &f->rpcap, f->rplen + f->plen, 1) < 0) {
        return -1;
    }
    memcpy(f->rpaths + f->rplen, f->path, (size_t)f->plen);
    f->rplen += f->plen;
    f->reps[f->nreps++] = (Rep){f->rplen, omitted, kind};
    return 0;
}

static inline Py_ssize_t
f_nreps(const Fill *f)
{
    return f->nreps;
}

/* Drops the reports from the *from*th on, those of a cut that was not kept. Returns
   *result*. */
static Py_ssize_t
f_drop_reps(Fill *f, Py_ssize_t from, Py_ssize_t result)
{
    if (f->nreps > from) {
        f->nreps = from;
        f->rplen = from ? f->reps[from - 1].end : 0;
    }
    return result;
}

/* -- the reports handed on ------------------------------------------------------------ */

/* The reports of one fill(), packed: a sequence of (pointer, kind, omitted, unit)
   tuples, made one at a time when read; `join_reports` reads them without the tuples. */
typedef struct {
    PyObject_HEAD
    Rep *reps;
    char *paths;
    Py_ssize_t n;
} Reports;

static void
reports_dealloc(PyObject *self)
{
    Reports *r = (Reports *)self;
    PyMem_Free(r->reps);
    PyMem_Free(r->paths);
    PyObject_Free(self);
}

static Py_ssize_t
reports_len(PyObject *self)
{
    return ((Reports *)self)->n;
}

/* The pointer of report *i*, relative, as a str. */
static PyObject *
reports_path(const Reports *r, Py_ssize_t i)
{
    Py_ssize_t start = i ? r->reps[i - 1].end : 0;
    return PyUnicode_DecodeUTF8(r->paths + start, r->reps[i].end - start, NULL);
}

static PyObject *
reports_item(PyObject *self, Py_ssize_t i)
{
    Reports *r = (Reports *)self;
    if (i < 0 || i >= r->n) {
        PyErr_SetString(PyExc_IndexError, "report index out of range");
        return NULL;
    }
    PyObject *path = reports_path(r, i);
    PyObject *count = PyLong_FromSsize_t(r->reps[i].omitted);
    PyObject *out = path && count ? PyTuple_Pack(4, path, s_kind[r->reps[i].kind], count,
                                                 s_unit[r->reps[i].kind])
                                  : NULL;
    Py_XDECREF(path);
    Py_XDECREF(count);
    return out;
}

static PySequenceMethods reports_as_sequence = {
    .sq_length = reports_len,
    .sq_item = reports_item,
};

static PyTypeObject ReportsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jsonbudget._encode._speedups.Reports",
    .tp_basicsize = sizeof(Reports),
    .tp_dealloc = reports_dealloc,
    .tp_as_sequence = &reports_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The reports of one fill(), packed: (pointer, kind, omitted, unit) when read.",
};

/* f's reports as a Reports object, which takes their memory; () when there are none. */
static PyObject *
f_take_reports(Fill *f)
{
    if (f->nreps == 0) {
        return PyTuple_New(0);
    }
    Reports *r = PyObject_New(Reports, &ReportsType);
    if (r == NULL) {
        return NULL;
    }
    r->reps = f->reps;
    r->paths = f->rpaths;
    r->n = f->nreps;
    f->reps = NULL;
    f->rpaths = NULL;
    return (PyObject *)r;
}

/* -- least ----------------------------------------------------------------------------- */

/* EncodeCall.least(): bytes of the smallest honest rendering of *v*. *whole* is set
   when that is all of *v*, so its size is known exactly. */
static Py_ssize_t
f_least(Fill *f, PyObject *v, int depth, int *whole)
{
    PyTypeObject *t = Py_TYPE(v);
    *whole = 1;
    if (t == &PyUnicode_Type) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        Py_ssize_t marker = 1 + f_string_tail(n, NULL);
        if (n + 2 <= marker) {
            Py_ssize_t s = f_size(f, v, marker, depth);
            if (s != F_NONE) {
                return s;
            }
        }
        *whole = 0;
        return marker;
    }
    if (!f_container(v)) {
        return f_scalar_size(v);
    }
    if (depth >= f->max_depth || f_is_active(f, v)) {
        return F_ABORT;
    }
    Py_ssize_t cut;
    if (t == &PyDict_Type) {
        Py_ssize_t n = PyDict_GET_SIZE(v);
        if (n == 0) {
            return 2;
        }
        Py_ssize_t want = f_snap_limit(f, v, depth, F_LEAST_ROOM / 5 + 2, n);
        if (want < 0) {
            return F_ERROR;
        }
        /* The keys that could show at this room, whatever an earlier read took (the
           renderer's `least` looks at the same ones). */
        Py_ssize_t mkey = f_marker_key(v, NULL, F_LEAST_ROOM / 5 + 2);
        if (mkey < 0) {
            return mkey;
        }
        cut = 2 + f_keys_marker(n, mkey, NULL);
    }
    else {
        Py_ssize_t n = Py_SIZE(v);
        if (f_snap_limit(f, v, depth, 2, n) < 0) {
            return F_ERROR;
        }
        if (n == 0) {
            return 2;
        }
        cut = 2 + f_items_marker(n, NULL);
    }
    Py_ssize_t s = f_size(f, v, cut, depth);
    *whole = s != F_NONE;
    return s == F_NONE ? cut : s;
}

/* -- cuts ------------------------------------------------------------------------------ */

static Py_ssize_t f_cut(Fill *f, PyObject *v, Py_ssize_t allot, int depth);

/* Writes a cut container's marker (*text*, after a comma with *comma*) and reports it
   as *kind* with *omitted* at the pointer its caller pushed (*up*: the length to pop
   back to, or -1 when the push failed). 0, or -1 with an exception set. */
static int
f_marker_member(Fill *f, int comma, const char *text, Py_ssize_t len, Py_ssize_t up, int kind,
                Py_ssize_t omitted)
{
    if (up < 0) {
        return -1;
    }
    int r = (comma && f_byte(f, ',') < 0) || f_put(f, text, len) < 0 ||
                    f_report(f, kind, omitted) < 0
                ? -1
                : 0;
    f->plen = up;
    return r;
}

/* Closes a cut container begun at *start0* with *close*: its size, F_NONE (nothing
   kept) if it passed *allot*, F_ERROR. */
static Py_ssize_t
f_close(Fill *f, char close, Py_ssize_t start0, Py_ssize_t allot)
{
    if (f_byte(f, close) < 0) {
        return F_ERROR;
    }
    if (f->len - start0 > allot) {
        f->len = start0;
        return F_NONE;
    }
    return f->len - start0;
}

/* cut_text(): str *s* cut to *allot* bytes with its marker. */
static Py_ssize_t
f_cut_str(Fill *f, PyObject *s, Py_ssize_t allot)
{
    char tail[64];
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    Py_ssize_t longest = f_string_tail(n, tail);
    Py_ssize_t room = allot - 1 - longest;
    int counted = room >= 0;
    if (!counted) {
        longest = f_string_tail(-1, tail);
        room = allot - 1 - longest;
        if (room < 0) {
            return F_NONE;
        }
    }
    if (f_reserve(f, 1 + room + longest) < 0) {
        return F_ERROR;
    }
    Py_ssize_t start = f->len;
    char *p = f->buf + start;
    *p++ = '"';
    Py_ssize_t kept = 0, replaced = 0;
    p = write_prefix(p, p + room, PyUnicode_KIND(s), PyUnicode_DATA(s), n, &kept, &replaced);
    if (replaced || kept == n) {
        return F_ABORT; /* the renderer reports replacements (and drops a character) */
    }
    Py_ssize_t nt = counted ? f_string_tail(n - kept, tail) : longest;
    memcpy(p, tail, (size_t)nt);
    f->len = (p + nt) - f->buf;
    return f_report(f, F_STRING, n - kept) < 0 ? F_ERROR : f->len - start;
}

/* The walk's lower bound of a run of items (bound_items()), as render.bulk_run asks it. */
static Py_ssize_t
f_run_bound(Fill *f, PyObject **items, Py_ssize_t k, int depth, Py_ssize_t cap)
{
    Walk w;
    start(&w, &f->caps, depth);
    for (;;) {
        w.nspine = 0;
        w.stop_depth = -1;
        Py_ssize_t n = walk_items(&w, items, k, depth, cap);
        if (n <= cap || w.check_cycles || !stopped_in_cycle(&w)) {
            return n;
        }
        w.check_cycles = 1;
    }
}

typedef struct {
    double share;
    double over;
} Runs;

/* orjson's bytes for the *k* items at *items* as one list (new), Py_None (new) where
   orjson refuses them (an int beyond 64 bits, a lone surrogate: the items then go one
   by one, as render.bulk_run leaves them), NULL with another exception set. */
static PyObject *
f_dumps_run(PyObject **items, Py_ssize_t k)
{
    PyObject *run = PyList_New(k);
    if (run == NULL) {
        return NULL;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyList_SET_ITEM(run, j, Py_NewRef(items[j]));
    }
    PyObject *data = orjson_bytes(run);
    Py_DECREF(run);
    return data;
}

static Py_ssize_t
f_cut_list(Fill *f, PyObject *v, Py_ssize_t allot, int depth)
{
    char mark[96];
    Py_ssize_t avail = allot - 2;
    Py_ssize_t n = Py_SIZE(v);
    Py_ssize_t most = (avail > 0 ? avail : 0) / 2 + 1 + 1;
    Py_ssize_t limit = f_snap_limit(f, v, depth, most < F_FIRST_READ ? most : F_FIRST_READ, n);
    Py_ssize_t got = 0;
    PyObject **items = limit < 0 ? NULL : f_snap_items(v, limit, &got);
    if (items == NULL) {
        return F_ERROR;
    }
    Py_ssize_t start0 = f->len, rep0 = f_nreps(f), result = F_ERROR;
    Py_ssize_t total = got;
    int complete = got == n;
    Py_ssize_t marker_room = f_items_marker(n, NULL) + 1;
    if (f_byte(f, '[') < 0) {
        goto done;
    }
    Py_ssize_t size = 1, i = 0;
    Runs runs = {0.9, 2.0};
    while (i < total) {
        int live = runs.share > 0.05;
        Py_ssize_t k = 1;
        if (i && live) {
            k = (Py_ssize_t)((double)(avail - size + 1 - marker_room) * runs.share * (double)i /
                             (double)(size > 1 ? size : 1));
        }
        if (i + k + 1 > got && limit < most && got < n) {
            Py_ssize_t want = 4 * limit > i + k + 1 ? 4 * limit : i + k + 1;
            limit = f_snap_limit(f, v, depth, want < most ? want : most, n);
            f_release(items, got, NULL);
            got = 0;
            if (limit < 0) {
                items = NULL;
                goto done;
            }
            items = f_snap_items(v, limit, &got);
            if (items == NULL) {
                goto done;
            }
            total = got;
            complete = got == n;
            if (i >= total) {
                break;
            }
        }
        int last = complete && i == total - 1;
        if (i && live && total - i >= 2) {
            Py_ssize_t room = avail - size + 1 - marker_room;
            Py_ssize_t rest = total - i - (complete ? 1 : 0);
            if (k > rest) {
                k = rest;
            }
            runs.over = 2.0;
            if (k >= 2) {
                Py_ssize_t lb = f_run_bound(f, items + i, k, depth + 1, room);
                if (lb == FAILED) {
                    goto done;
                }
                if (lb >= 0 && lb + 1 <= room) {
                    /* render.bulk_run: one orjson call for the run, kept if it fits */
                    PyObject *data = f_dumps_run(items + i, k);
                    if (data == NULL) {
                        goto done;
                    }
                    if (data != Py_None) {
                        Py_ssize_t len = PyBytes_GET_SIZE(data);
                        if (len - 1 <= room) {
                            int r = f_byte(f, ',') < 0 ||
                                    f_put(f, PyBytes_AS_STRING(data) + 1, len - 2) < 0;
                            Py_DECREF(data);
                            if (r) {
                                goto done;
                            }
                            size += len - 1;
                            i += k;
                            continue;
                        }
                        runs.over = (double)(len - 1) / (double)(room > 1 ? room : 1);
                    }
                    Py_DECREF(data);
                }
            }
            double o = runs.over * 1.05;
            o = o < 2.0 ? o : 2.0;
            runs.share /= o > 1.05 ? o : 1.05;
        }
        Py_ssize_t sep = i ? 1 : 0;
        Py_ssize_t room = avail - (size - 1) - sep - (last ? 0 : marker_room);
        Py_ssize_t s = f_size(f, items[i], room, depth + 1);
        if (s < F_NONE) {
            result = s;
            goto done;
        }
        if (s == F_NONE && complete && !last) {
            /* _tail: the rest whole, if it fits without the marker's room */
            Py_ssize_t space = avail - (size - 1), used = 0, j;
            for (j = i; j < got; j++) {
                used += j ? 1 : 0;
                Py_ssize_t t = f_size(f, items[j], space - used, depth + 1);
                if (t < F_NONE) {
                    result = t;
                    goto done;
                }
                if (t == F_NONE) {
                    break;
                }
                used += t;
            }
            if (j == got) {
                for (j = i; j < got; j++) {
                    if ((j && f_byte(f, ',') < 0) || f_write(f, items[j]) < 0) {
                        goto done;
                    }
                }
                size += used;
                i = total;
                break;
            }
        }
        int partial = 0;
        Py_ssize_t mark_at = f->len;
        if (s == F_NONE) {
            if (room <= 0 || i) {
                break;
            }
            if (sep && f_byte(f, ',') < 0) {
                goto done;
            }
            Py_ssize_t up = f_push_index(f, i);
            if (up < 0) {
                goto done;
            }
            s = f_cut(f, items[i], room, depth + 1);
            f->plen = up;
            if (s < F_NONE) {
                result = s;
                goto done;
            }
            if (s == F_NONE) {
                f->len = mark_at;
                break;
            }
            partial = 1;
        }
        else {
            if ((sep && f_byte(f, ',') < 0) || f_write(f, items[i]) < 0) {
                goto done;
            }
        }
        size += sep + s;
        i++;
        if (partial) {
            break;
        }
    }
    if (!(complete && i == total)) {
        Py_ssize_t omitted = n - i;
        Py_ssize_t len = f_items_marker(omitted, mark);
        char fallback[96];
        Py_ssize_t flen = f_items_marker(-1, fallback);
        if (size + (i ? 1 : 0) + len + 1 > allot && flen < len) {
            memcpy(mark, fallback, (size_t)flen);
            len = flen;
        }
        if (f_marker_member(f, i > 0, mark, len, f_push_index(f, i), F_ITEMS, omitted) < 0) {
            goto done;
        }
    }
    result = f_close(f, ']', start0, allot);
done:
    f_release(items, got, NULL);
    if (result < 0) {
        f->len = start0;
        result = f_drop_reps(f, rep0, result);
    }
    return result;
}

/* Whether the members' shares at *level*, sum(max(min_i, min(size_i, level))), fit
   *space*; the sum stops as soon as it passes. */
static inline int
f_level_fits(const Py_ssize_t *sizes, const Py_ssize_t *mins, Py_ssize_t count,
             Py_ssize_t space, Py_ssize_t level)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count && total <= space; i++) {
        Py_ssize_t share = sizes[i] < level ? sizes[i] : level;
        total += mins[i] > share ? mins[i] : share;
    }
    return total <= space;
}

/* _water_level(): the largest level L <= space with sum(max(min_i, min(size_i, L))) <=
   space (0 when even the mins do not fit). The sum never falls as L grows, so a binary
   search finds it: about log2(space) passes over the members, and no sort. It starts
   from *fits*, a level known to fit (0: none is). */
static Py_ssize_t
f_water_level(const Py_ssize_t *sizes, const Py_ssize_t *mins, Py_ssize_t count,
              Py_ssize_t space, Py_ssize_t fits)
{
    if (fits == 0 && (space < 0 || !f_level_fits(sizes, mins, count, space, 0))) {
        return 0;
    }
    /* Each value of unknown size takes at least the level, so u of them bound it by
       space / u; with none, a level that fits at *space* is the answer. */
    Py_ssize_t unknown = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        unknown += sizes[i] == F_BIG;
    }
    if (unknown == 0 && f_level_fits(sizes, mins, count, space, space)) {
        return space;
    }
    Py_ssize_t lo = fits, hi = unknown ? space / unknown : space;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo + 1) / 2;
        if (f_level_fits(sizes, mins, count, space, mid)) {
            lo = mid;
        }
        else {
            hi = mid - 1;
        }
    }
    return lo;
}

/* The bytes of `…[key truncated: N more chars]`. */
static Py_ssize_t
f_key_tail(Py_ssize_t omitted)
{
    char tail[64];
    return f_counted(tail, F_LIT("\xe2\x80\xa6[key truncated: "), omitted, F_LIT(" more chars]"),
                     F_LIT(""));
}

/* EncodeCall._key() for a key that alone passes *room* (its colon included): the key
   cut like a string, `prefix…[key truncated: N more chars]`, made unique against
   *taken* (the snapshot's short keys and the keys rewritten so far) and, when long,
   every key of the snapshot. Sets *text* (new) and *omitted*; returns its bytes with
   the colon, F_NONE when not even the marker fits, F_ABORT, F_ERROR. */
static Py_ssize_t
f_cut_key(PyObject *k, Py_ssize_t room, PyObject *taken, PyObject **pairs, Py_ssize_t got,
          PyObject **text, Py_ssize_t *omitted)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(k);
    Py_ssize_t r = room - 3 - f_key_tail(n);
    if (r < 0) {
        return F_NONE; /* the marker alone does not fit */
    }
    char *tmp = PyMem_Malloc((size_t)r + 16);
    if (tmp == NULL) {
        PyErr_NoMemory();
        return F_ERROR;
    }
    Py_ssize_t kept = 0, replaced = 0;
    write_prefix(tmp, tmp + r, PyUnicode_KIND(k), PyUnicode_DATA(k), n, &kept, &replaced);
    PyMem_Free(tmp);
    if (replaced) {
        return F_ABORT;
    }
    PyObject *head = PyUnicode_Substring(k, 0, kept);
    PyObject *base = head == NULL ? NULL
                                  : PyUnicode_FromFormat("%U%c[key truncated: %zd more chars]", head,
                                                         0x2026, n - kept);
    Py_XDECREF(head);
    if (base == NULL) {
        return F_ERROR;
    }
    PyObject *t = Py_NewRef(base);
    for (Py_ssize_t i = 1;; i++) {
        int clash = PySet_Contains(taken, t);
        if (clash == 0 && PyUnicode_GET_LENGTH(t) > F_SHORT_KEY) {
            for (Py_ssize_t p = 0; p < got && clash == 0; p++) {
                clash = PyUnicode_Compare(pairs[2 * p], t) == 0;
            }
        }
        if (clash < 0) {
            Py_DECREF(t);
            Py_DECREF(base);
            return F_ERROR;
        }
        if (!clash) {
            break;
        }
        Py_DECREF(t);
        t = PyUnicode_FromFormat("%U%zd", base, i);
        if (t == NULL) {
            Py_DECREF(base);
            return F_ERROR;
        }
    }
    Py_DECREF(base);
    Py_ssize_t size = f_str_size(t, F_BIG);
    if (size + 1 > room) {
        Py_DECREF(t);
        return F_NONE;
    }
    if (PySet_Add(taken, t) < 0) {
        Py_DECREF(t);
        return F_ERROR;
    }
    *text = t;
    *omitted = n - kept;
    return size + 1;
}

/* The snapshot's short keys (render._short_keys), as a new set. */
static PyObject *
f_short_keys(PyObject **pairs, Py_ssize_t got)
{
    PyObject *set = PySet_New(NULL);
    for (Py_ssize_t i = 0; set != NULL && i < got; i++) {
        if (PyUnicode_GET_LENGTH(pairs[2 * i]) <= F_SHORT_KEY && PySet_Add(set, pairs[2 * i]) < 0) {
            Py_CLEAR(set);
        }
    }
    return set;
}

/* _rest_fits(): 1 if members *start* on of the snapshot, each with its key whole and
   its value at its least, and the marker of the keys past the snapshot fit *space*
   bytes, else 0 (F_ABORT, F_ERROR). Each least measured goes into *least* and *sizes*
   (as f_cut_map keeps them), and *ahead* past it. */
static Py_ssize_t
f_rest_fits(Fill *f, PyObject **pairs, Py_ssize_t start, Py_ssize_t got, Py_ssize_t n,
            Py_ssize_t mkey, Py_ssize_t space, Py_ssize_t *least, Py_ssize_t *sizes,
            Py_ssize_t *ahead, int depth)
{
    Py_ssize_t need = n == got ? 0 : f_keys_marker(n - got, mkey, NULL) + 1;
    for (Py_ssize_t i = start; i < got; i++) {
        PyObject *k = pairs[2 * i];
        if (need + PyUnicode_GET_LENGTH(k) + 3 > space) {
            return 0;
        }
        Py_ssize_t ks = f_str_size(k, F_BIG);
        if (ks == F_ABORT) {
            return 0; /* a lone surrogate: the key is rewritten */
        }
        if (ks < 0) {
            return ks;
        }
        need += (i > start ? 1 : 0) + ks + 1;
        if (i >= *ahead) {
            int whole;
            Py_ssize_t m = f_least(f, pairs[2 * i + 1], depth + 1, &whole);
            if (m < 0) {
                return m;
            }
            least[i] = m;
            sizes[i] = whole ? m : F_BIG;
            *ahead = i + 1;
        }
        need += least[i];
        if (need > space) {
            return 0;
        }
    }
    return 1;
}

/* _cut_map() (balanced) with _share(). */
static Py_ssize_t
f_cut_map(Fill *f, PyObject *v, Py_ssize_t allot, int depth)
{
    char tmp[96];
    /* A small object (most cut ones) keeps its snapshot and per-member state on the
       stack: three allocations each were a tenth of a documentation-heavy cut. */
    PyObject *pairs_local[2 * F_LOCAL], *ktext_local[F_LOCAL + 1] = {NULL};
    Py_ssize_t arr_local[7 * F_LOCAL + 1];
    Py_ssize_t avail = allot - 2;
    Py_ssize_t n = PyDict_GET_SIZE(v);
    Py_ssize_t got = 0;
    Py_ssize_t want = f_snap_limit(f, v, depth, (avail > 0 ? avail : 0) / 5 + 1 + 1, n);
    PyObject **pairs =
        want < 0 ? NULL : f_snap_pairs(v, want, &got, pairs_local, 2 * F_LOCAL);
    if (pairs == NULL) {
        return F_ERROR;
    }
    Py_ssize_t start0 = f->len, rep0 = f_nreps(f), result = F_ERROR;
    PyObject *taken = NULL;
    /* per member: key bytes (with colon), least, size, min, asked, a cut key's omitted
       count; a cut key's text */
    int small = got <= F_LOCAL;
    Py_ssize_t *arr =
        small ? arr_local : PyMem_Malloc((size_t)(7 * got + 1) * sizeof(Py_ssize_t));
    PyObject **ktext = small ? ktext_local : PyMem_Calloc((size_t)got + 1, sizeof(PyObject *));
    if (arr == NULL || ktext == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t *kb = arr, *least = arr + got, *sizes = arr + 2 * got, *mins = arr + 3 * got,
               *asked = arr + 4 * got, *kcut = arr + 5 * got,
               *used = arr + 6 * got; /* used: got + 1 entries */
    for (Py_ssize_t i = 0; i < got; i++) {
        if (!PyUnicode_CheckExact(pairs[2 * i])) {
            result = F_ABORT;
            goto done;
        }
    }
    int everything = n == got;
    /* The marker's key avoids the keys that could show at this room (no more members
       fit it), whatever an earlier read of the object took: the renderer's `_members`
       looks at the same ones, so both choose one key. */
    Py_ssize_t could_show = (avail > 0 ? avail : 0) / 5 + 1 + 1;
    Py_ssize_t mkey = f_marker_key(NULL, pairs, got < could_show ? got : could_show);
    if (mkey < 0) {
        result = mkey;
        goto done;
    }
    Py_ssize_t j = 0, ahead = 0; /* ahead: members whose least f_rest_fits measured */
    int settled = 0;
    used[0] = 0;
    for (Py_ssize_t i = 0; i < got; i++) {
        PyObject *k = pairs[2 * i];
        Py_ssize_t sep = i ? 1 : 0;
        Py_ssize_t room = avail - used[j] - sep - 1;
        Py_ssize_t nk = PyUnicode_GET_LENGTH(k);
        if (!settled && i + 1 < n && nk + 3 > room - 40) {
            Py_ssize_t fits =
                f_rest_fits(f, pairs, i, got, n, mkey, room + 1, least, sizes, &ahead, depth);
            if (fits < 0) {
                result = fits;
                goto done;
            }
            settled = (int)fits;
            if (!settled) {
                room -= f_keys_marker(n - i - 1, mkey, NULL) + 1;
            }
        }
        int cut = nk + 3 > room;
        if (!cut) {
            Py_ssize_t ks = f_str_size(k, F_BIG);
            if (ks < 0) {
                result = ks;
                goto done;
            }
            if (ks + 1 <= room) {
                kb[i] = ks + 1;
            }
            else {
                cut = 1;
            }
        }
        if (cut && room - 3 - f_key_tail(nk) < 0) {
            break; /* not even the cut key's marker fits: f_cut_key's first answer */
        }
        if (cut) {
            if (taken == NULL && (taken = f_short_keys(pairs, got)) == NULL) {
                goto done;
            }
            Py_ssize_t ks = f_cut_key(k, room, taken, pairs, got, &ktext[i], &kcut[i]);
            if (ks == F_NONE) {
                break; /* not even the cut key fits */
            }
            if (ks < 0) {
                result = ks;
                goto done;
            }
            kb[i] = ks;
        }
        int whole;
        Py_ssize_t m;
        if (ktext[i] == NULL && i < ahead) {
            m = least[i];
            whole = sizes[i] != F_BIG;
        }
        else {
            m = f_least(f, pairs[2 * i + 1], depth + 1, &whole);
        }
        if (m < 0) {
            result = m;
            goto done;
        }
        if (ktext[i] != NULL && kb[i] + m > room + 1) {
            /* as in _cut_map: *room* kept one byte for the value, which needs m */
            if (PySet_Discard(taken, ktext[i]) < 0) {
                goto done;
            }
            Py_CLEAR(ktext[i]);
            Py_ssize_t ks = f_cut_key(k, room + 1 - m, taken, pairs, got, &ktext[i], &kcut[i]);
            if (ks == F_NONE) {
                break;
            }
            if (ks < 0) {
                result = ks;
                goto done;
            }
            kb[i] = ks;
        }
        Py_ssize_t cost = used[j] + sep + kb[i] + m;
        if (cost > avail) {
            break;
        }
        least[i] = m;
        /* a value whose least is all of it needs no measure in the rounds below: asked
           there with a cap of at least m, it would measure m */
        sizes[i] = whole ? m : F_BIG;
        j++;
        used[j] = cost;
    }
    Py_ssize_t reserve = 0, said = -1, omitted = 0;
    if (!(everything && j == got)) {
        for (;;) {
            omitted = said = n - j;
            reserve = f_keys_marker(said, mkey, NULL) + (j ? 1 : 0);
            if (used[j] + reserve <= avail || j == 0) {
                break;
            }
            j--;
        }
        if (used[j] + reserve > avail) {
            said = -1;
            reserve = f_keys_marker(-1, mkey, NULL);
            if (reserve > avail) {
                result = F_NONE;
                goto done;
            }
        }
    }
    Py_ssize_t space = avail - reserve;
    for (Py_ssize_t i = 0; i < j; i++) {
        space -= (i ? 1 : 0) + kb[i];
    }
    /* _share: water-fill *space* among the j values */
    Py_ssize_t level = 0;
    if (j) {
        int presized = 0;
        for (Py_ssize_t i = 0; i < j; i++) {
            mins[i] = least[i];
            asked[i] = -1;
            presized |= sizes[i] != F_BIG;
        }
        level = space > 0 ? space / j : 0;
        for (int round = 0; round < F_ROUNDS; round++) {
            int changed = round == 0 && presized; /* as if measured in this round */
            for (Py_ssize_t i = 0; i < j; i++) {
                Py_ssize_t cap = level > least[i] ? level : least[i];
                if (sizes[i] == F_BIG && asked[i] < cap) {
                    asked[i] = cap;
                    Py_ssize_t s = f_size(f, pairs[2 * i + 1], cap, depth + 1);
                    if (s < F_NONE) {
                        result = s;
                        goto done;
                    }
                    if (s >= 0) {
                        sizes[i] = s;
                        if (s < mins[i]) {
                            mins[i] = s;
                        }
                        changed = 1;
                    }
                }
            }
            /* sizes and mins only fall from round to round, so the last level
               still fits */
            level = f_water_level(sizes, mins, j, space, round ? level : 0);
            if (!changed) {
                break;
            }
        }
    }
    if (f_byte(f, '{') < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < j; i++) {
        PyObject *k = ktext[i] != NULL ? ktext[i] : pairs[2 * i], *val = pairs[2 * i + 1];
        if (i && f_byte(f, ',') < 0) {
            goto done;
        }
        /* A key measured above with nothing to escape needs no second look. */
        int plain = ktext[i] == NULL && PyUnicode_IS_ASCII(k) &&
                    kb[i] == PyUnicode_GET_LENGTH(k) + 3;
        if ((plain ? f_put_plain(f, k) : f_write_str(f, k)) < 0 || f_byte(f, ':') < 0) {
            goto done;
        }
        Py_ssize_t share = sizes[i] < level ? sizes[i] : level;
        share = mins[i] > share ? mins[i] : share;
        int whole = sizes[i] != F_BIG && sizes[i] <= share;
        if (whole && ktext[i] == NULL) {
            if (f_write(f, val) < 0) {
                goto done;
            }
            continue;
        }
        Py_ssize_t up = f_push_key(f, k);
        if (up < 0 || (ktext[i] != NULL && f_report(f, F_STRING, kcut[i]) < 0)) {
            goto done;
        }
        Py_ssize_t s = whole ? (f_write(f, val) < 0 ? F_ERROR : 0)
                             : f_cut(f, val, share, depth + 1);
        f->plen = up;
        if (s < 0) {
            result = s == F_NONE ? F_ABORT : s; /* the renderer raises for this */
            goto done;
        }
    }
    if (reserve) {
        Py_ssize_t len = f_keys_marker(said, mkey, tmp);
        if (f_marker_member(f, j > 0, tmp, len, f_push_mkey(f, mkey), F_KEYS, omitted) < 0) {
            goto done;
        }
    }
    result = f_close(f, '}', start0, allot);
done:
    if (ktext != NULL) {
        for (Py_ssize_t i = 0; i < got; i++) {
            Py_XDECREF(ktext[i]);
        }
    }
    if (!small) {
        PyMem_Free(ktext);
        PyMem_Free(arr);
    }
    Py_XDECREF(taken);
    f_release(pairs, 2 * got, pairs_local);
    if (result < 0) {
        f->len = start0;
        result = f_drop_reps(f, rep0, result);
    }
    return result;
}

/* EncodeCall.cut() of a clean value: written at the end of the buffer, its reports
   appended under f->path (and dropped again if it does not fit). */
static Py_ssize_t
f_cut(Fill *f, PyObject *v, Py_ssize_t allot, int depth)
{
    if (allot <= 0) {
        return F_NONE;
    }
    f->work++;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        return f_cut_str(f, v, allot);
    }
    if (!f_container(v)) {
        Py_ssize_t s = f_scalar_size(v);
        if (s < 0) {
            return s;
        }
        if (s > allot) {
            return F_NONE;
        }
        return f_write(f, v) < 0 ? F_ERROR : s;
    }
    if (depth >= f->max_depth || f_is_active(f, v)) {
        return F_ABORT;
    }
    f->active[f->nactive++] = v;
    Py_ssize_t r = t == &PyDict_Type ? f_cut_map(f, v, allot, depth)
                                     : f_cut_list(f, v, allot, depth);
    f->nactive--;
    return r;
}

/* -- joining reports ------------------------------------------------------------------ */

/* EncodeCall.reports(): each (token, kind, omitted, unit) under *base* becomes
   make(base + tokens, kind, omitted, unit), appended to *into*; (token, sub) nests. */
/* f_join() of a fill()'s packed reports. */
static int
f_join_packed(const Reports *r, PyObject *base, PyObject *into, PyObject *make)
{
    for (Py_ssize_t i = 0; i < r->n; i++) {
        PyObject *rel = reports_path(r, i);
        PyObject *path = rel == NULL || PyUnicode_GET_LENGTH(base) == 0
                             ? Py_XNewRef(rel)
                             : PyUnicode_Concat(base, rel);
        Py_XDECREF(rel);
        PyObject *count = path == NULL ? NULL : PyLong_FromSsize_t(r->reps[i].omitted);
        PyObject *made = NULL;
        if (count != NULL) {
            PyObject *args[4] = {path, s_kind[r->reps[i].kind], count, s_unit[r->reps[i].kind]};
            made = PyObject_Vectorcall(make, args, 4, NULL);
        }
        Py_XDECREF(path);
        Py_XDECREF(count);
        int bad = made == NULL || PyList_Append(into, made) < 0;
        Py_XDECREF(made);
        if (bad) {
            return -1;
        }
    }
    return 0;
}

static int
f_join(PyObject *trs, PyObject *base, PyObject *into, PyObject *make)
{
    if (Py_IS_TYPE(trs, &ReportsType)) {
        return f_join_packed((Reports *)trs, base, into, make);
    }
    if (!PyTuple_Check(trs)) {
        PyErr_SetString(PyExc_TypeError, "join_reports() takes tuples of reports");
        return -1;
    }
    if (Py_EnterRecursiveCall(" joining reports")) {
        return -1;
    }
    int r = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(trs) && r == 0; i++) {
        PyObject *entry = PyTuple_GET_ITEM(trs, i);
        Py_ssize_t n = PyTuple_Check(entry) ? PyTuple_GET_SIZE(entry) : 0;
        if (n != 2 && n != 4) {
            PyErr_SetString(PyExc_TypeError, "a report is a 2- or 4-tuple");
            r = -1;
            break;
        }
        PyObject *path = PyUnicode_Concat(base, PyTuple_GET_ITEM(entry, 0));
        if (path == NULL) {
            r = -1;
            break;
        }
        if (n == 2) {
            r = f_join(PyTuple_GET_ITEM(entry, 1), path, into, make);
        }
        else {
            PyObject *args[4] = {path, PyTuple_GET_ITEM(entry, 1), PyTuple_GET_ITEM(entry, 2),
                                 PyTuple_GET_ITEM(entry, 3)};
            PyObject *made = PyObject_Vectorcall(make, args, 4, NULL);
            r = made == NULL ? -1 : PyList_Append(into, made);
            Py_XDECREF(made);
        }
        Py_DECREF(path);
    }
    Py_LeaveRecursiveCall();
    return r;
}

static PyObject *
join_reports(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyUnicode_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "join_reports() takes trs, a str base, a list and "
                                         "a callable");
        return NULL;
    }
    return f_join(args[0], args[1], args[2], args[3]) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
fill(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyTuple_CheckExact(args[2]) || PyTuple_GET_SIZE(args[2]) != 5 ||
        (args[3] != Py_None && !(PyList_CheckExact(args[3]) && PyList_GET_SIZE(args[3]) == 1))) {
        PyErr_SetString(PyExc_TypeError,
                        "fill() takes obj, a budget, a 5-tuple of caps, a one-item list or "
                        "None, and a lower bound of obj's size");
        return NULL;
    }
    Py_ssize_t budget = PyLong_AsSsize_t(args[1]);
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t least = PyLong_AsSsize_t(args[4]);
    if (least == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *capv[5];
    for (int i = 0; i < 5; i++) {
        capv[i] = PyTuple_GET_ITEM(args[2], i);
    }
    Fill f = {0};
    if (read_caps(&f.caps, "fill", capv) < 0) {
        return NULL;
    }
    f.max_depth = f.caps.max_depth;
    /* A slot per 32 bytes of budget (at most 8192): a cut remembers about that many
       containers, and growing the table there step by step zeroed and rehashed as much
       again. */
    f.known_first = 256;
    while (f.known_first < 8192 && f.known_first * 32 < budget) {
        f.known_first *= 2;
    }
    PyObject *obj = args[0];
    PyObject *out = NULL;
    if (f_open(&f, budget) < 0) {
        return NULL;
    }
    /* No Python code may run between a value's measure and its write: writing trusts
       the measure (exact types, sizes). A collection started by an allocation here (a
       report's tuple, a bulk run's list) would run finalizers and weakref callbacks,
       which can put anything into a container already measured: a set read as a tuple
       crashed. So the collector waits until this call ends (it runs no Python code of
       its own, and other threads need the GIL it holds). Nor does orjson run any for a
       bulk run: the walk admits no class whose attribute lookup is Python code
       (plain_dict() in _speedups.c), which orjson would call to read a dataclass. */
    int collecting = PyGC_Disable();
    /* A size walk that already passed the budget (least > budget) is not repeated. */
    Py_ssize_t r = least > budget ? F_NONE : f_size(&f, obj, budget, 0);
    if (r >= 0) {
        r = f_write(&f, obj) < 0 ? F_ERROR : r;
    }
    if (r >= 0 && f.len > budget) {
        r = F_ABORT; /* a finalizer changed a container between its measure and its write */
    }
    else if (r == F_NONE) {
        r = f_cut(&f, obj, budget, 0);
    }
    if (r >= 0 && _PyBytes_Resize(&f.out, f.len) < 0) {
        r = F_ERROR; /* it freed f.out and set MemoryError: no answer without it */
    }
    if (r >= 0) {
        PyObject *tup = f_take_reports(&f);
        out = tup != NULL ? PyTuple_Pack(2, f.out, tup) : NULL;
        Py_XDECREF(tup);
    }
    else if (r != F_ERROR) {
        out = Py_NewRef(r == F_NONE ? Py_False : Py_None);
    }
    PyMem_Free(f.reps);
    PyMem_Free(f.rpaths);
    PyMem_Free(f.path);
    if (out != NULL && args[3] != Py_None) {
        PyObject *cell = args[3];
        Py_ssize_t before = PyLong_AsSsize_t(PyList_GET_ITEM(cell, 0));
        /* an item that is no int raised: no result may go back with it set */
        PyObject *sum = before == -1 && PyErr_Occurred() ? NULL
                                                         : PyLong_FromSsize_t(before + f.work);
        if (sum == NULL || PyList_SetItem(cell, 0, sum) < 0) {
            Py_CLEAR(out);
        }
    }
    for (Py_ssize_t i = 0; i < f.known_cap; i++) {
        Py_XDECREF(f.known[i].obj);
    }
    PyMem_Free(f.known);
    Py_XDECREF(f.out);
    if (collecting) {
        PyGC_Enable();
    }
    return out;
}

static int
init_fill(void)
{
    s_kind[F_STRING] = PyUnicode_InternFromString("string");
    s_unit[F_STRING] = PyUnicode_InternFromString("chars");
    s_kind[F_ITEMS] = s_unit[F_ITEMS] = PyUnicode_InternFromString("items");
    s_kind[F_KEYS] = s_unit[F_KEYS] = PyUnicode_InternFromString("keys");
    for (int i = 0; i < 3; i++) {
        if (s_kind[i] == NULL || s_unit[i] == NULL) {
            return -1;
        }
    }
    for (int c = 0; c < 0x80; c++) {
        f_plain_byte[c] = ascii_width[c] == 1;
    }
    return PyType_Ready(&ReportsType);
}
