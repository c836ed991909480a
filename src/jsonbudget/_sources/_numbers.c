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
 *
 * The module also builds the SQL sources' row dicts (rows_to_dicts, below), joins a
 * chunk of JSON Lines into one array when it holds one value a line (lines_array,
 * below), and finds where a JSON value's text ends without parsing it (value_end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* rows_to_dicts(columns, rows, start, flags_at, n_flags, long_at, longest) -> (dicts, stop)
 *
 * The SQL sources' rows as dicts: {columns[j]: row[j]} for rows[start:], up to the first
 * row that is not an exact tuple, whose n_flags columns from flags_at are not all None
 * (a cut cell's length), or whose column at an index of long_at holds bytes longer
 * than longest (a cut cell that carries its length in its value): Python builds that
 * row. A database row is read once, by the batch; building its dict in Python was
 * about a fifth of a page's time.
 */
/* The indices in tuple *long_at* as a new array (free it with PyMem_Free), each checked
   to lie in [0, *below*) (no upper bound where *below* is negative), and the largest of
   them in *widest* (-1 if none). NULL with an exception set, naming *name*, otherwise. */
static Py_ssize_t *
read_indices(const char *name, PyObject *long_at, Py_ssize_t below, Py_ssize_t *widest)
{
    Py_ssize_t n_long = PyTuple_GET_SIZE(long_at);
    Py_ssize_t *at = PyMem_New(Py_ssize_t, n_long ? n_long : 1);
    if (at == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *widest = -1;
    for (Py_ssize_t k = 0; k < n_long; k++) {
        at[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(long_at, k));
        if (at[k] == -1 && PyErr_Occurred()) {
            PyMem_Free(at);
            return NULL;
        }
        if (at[k] < 0 || (below >= 0 && at[k] >= below)) {
            PyMem_Free(at);
            PyErr_Format(PyExc_ValueError, "%s(): long_at out of range", name);
            return NULL;
        }
        *widest = at[k] > *widest ? at[k] : *widest;
    }
    return at;
}

static PyObject *
rows_to_dicts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyTuple_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyTuple_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "rows_to_dicts(columns: tuple, rows: list, start, flags_at, n_flags, "
                        "long_at: tuple, longest)");
        return NULL;
    }
    PyObject *columns = args[0], *rows = args[1], *long_at = args[5];
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    Py_ssize_t flags_at = PyLong_AsSsize_t(args[3]);
    Py_ssize_t n_flags = PyLong_AsSsize_t(args[4]);
    Py_ssize_t longest = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(columns);
    Py_ssize_t n_long = PyTuple_GET_SIZE(long_at);
    if (start < 0 || flags_at < width || n_flags < 0 || longest < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "rows_to_dicts(): start, flags_at, n_flags or longest out of range");
        return NULL;
    }
    Py_ssize_t widest;
    Py_ssize_t *at = read_indices("rows_to_dicts", long_at, width, &widest);
    if (at == NULL) {
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyMem_Free(at);
        return NULL;
    }
    Py_ssize_t i = start;
    /* Each row is held while it is read: making its dict allocates a tracked object,
       which may start a collection whose finalizers and gc callbacks run Python code
       that can take the row out of *rows* (and free it and its cells). *rows* is read
       again each time round, as it may have changed. */
    for (; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) < flags_at + n_flags) {
            break;
        }
        int flagged = 0;
        for (Py_ssize_t j = flags_at; j < flags_at + n_flags; j++) {
            if (PyTuple_GET_ITEM(row, j) != Py_None) {
                flagged = 1;
                break;
            }
        }
        for (Py_ssize_t k = 0; k < n_long && !flagged; k++) {
            PyObject *v = PyTuple_GET_ITEM(row, at[k]);
            flagged = PyBytes_Check(v) && PyBytes_GET_SIZE(v) > longest;
        }
        if (flagged) {
            break;
        }
        Py_INCREF(row);
        PyObject *d = _PyDict_NewPresized(width);
        if (d == NULL) {
            Py_DECREF(row);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < width; j++) {
            if (PyDict_SetItem(d, PyTuple_GET_ITEM(columns, j), PyTuple_GET_ITEM(row, j)) < 0) {
                Py_DECREF(row);
                Py_DECREF(d);
                goto fail;
            }
        }
        Py_DECREF(row);
        int appended = PyList_Append(out, d);
        Py_DECREF(d);
        if (appended < 0) {
            goto fail;
        }
    }
    PyMem_Free(at);
    return Py_BuildValue("(Nn)", out, i);
fail:
    PyMem_Free(at);
    Py_DECREF(out);
    return NULL;
}

/* Whether str *s* takes more than *longest* bytes in UTF-8 (a surrogate counted as 3). */
static int
utf8_over(PyObject *s, Py_ssize_t longest)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n > longest) {
        return 1;
    }
    if (PyUnicode_IS_ASCII(s)) {
        return 0;
    }
    int kind = PyUnicode_KIND(s);
    Py_ssize_t most = kind == PyUnicode_1BYTE_KIND ? 2 : kind == PyUnicode_2BYTE_KIND ? 3 : 4;
    if (n * most <= longest) {
        return 0;
    }
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        size += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (size > longest) {
            return 1;
        }
    }
    return 0;
}

/* first_over(rows, start, long_at, longest) -> int
 *
 * The index of the first row from *start* that is not an exact tuple long enough for
 * long_at, or whose cell at an index of *long_at* is bytes, or a str in UTF-8, longer
 * than *longest*; len(rows) if none. A bare read under SQLite's length limit can let a
 * value a little over it through (the limit is checked only where SQLite grows a
 * buffer): this finds those rows, once a query, without a Python step a cell.
 */
static PyObject *
first_over(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "first_over(rows: list, start, long_at: tuple, longest)");
        return NULL;
    }
    PyObject *rows = args[0], *long_at = args[2];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t longest = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0 || longest < 0) {
        PyErr_SetString(PyExc_ValueError, "first_over(): start or longest out of range");
        return NULL;
    }
    Py_ssize_t n_long = PyTuple_GET_SIZE(long_at), widest;
    Py_ssize_t *at = read_indices("first_over", long_at, -1, &widest);
    if (at == NULL) {
        return NULL;
    }
    /* Nothing below runs Python code, so *rows* cannot change under us. */
    Py_ssize_t i = start;
    for (; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) <= widest) {
            break;
        }
        int over = 0;
        for (Py_ssize_t k = 0; k < n_long && !over; k++) {
            PyObject *v = PyTuple_GET_ITEM(row, at[k]);
            if (PyBytes_Check(v)) {
                over = PyBytes_GET_SIZE(v) > longest;
            }
            else if (PyUnicode_Check(v)) {
                over = utf8_over(v, longest);
            }
        }
        if (over) {
            break;
        }
    }
    PyMem_Free(at);
    return PyLong_FromSsize_t(i < PyList_GET_SIZE(rows) ? i : PyList_GET_SIZE(rows));
}

/* text_bytes(rows, start) -> int
 *
 * The characters of the str cells and the bytes of the bytes cells of the rows from
 * *start* (a row that is not an exact tuple counts nothing): what a fetch of them
 * brought, without a Python step a cell (`_Chunks` reads a query on while it is small).
 */
static PyObject *
text_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "text_bytes(rows: list, start)");
        return NULL;
    }
    PyObject *rows = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "text_bytes(): start out of range");
        return NULL;
    }
    /* Nothing below runs Python code, so *rows* cannot change under us. */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = start; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row)) {
            continue;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(row); j++) {
            PyObject *v = PyTuple_GET_ITEM(row, j);
            if (PyUnicode_Check(v)) {
                total += PyUnicode_GET_LENGTH(v);
            }
            else if (PyBytes_Check(v)) {
                total += PyBytes_GET_SIZE(v);
            }
        }
    }
    return PyLong_FromSsize_t(total);
}

/* lines_array works on 64 bytes at a time, as simdjson's first stage does: a bit a byte
 * for the quotes, the backslashes, the line breaks and the bytes that shape the
 * structure (brackets, commas, line breaks). */
typedef struct {
    uint64_t quote, backslash, newline, structure;
} Block;

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>

static inline void
classify(const unsigned char *p, Block *b)
{
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i newline = _mm_set1_epi8('\n'), comma = _mm_set1_epi8(',');
    /* '[' | 0x20 == '{' and ']' | 0x20 == '}': one comparison finds both of a pair. */
    const __m128i lower = _mm_set1_epi8(0x20), open = _mm_set1_epi8('{');
    const __m128i close = _mm_set1_epi8('}');
    b->quote = b->backslash = b->newline = b->structure = 0;
    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + 16 * k));
        __m128i nl = _mm_cmpeq_epi8(v, newline), folded = _mm_or_si128(v, lower);
        __m128i st = _mm_or_si128(_mm_or_si128(nl, _mm_cmpeq_epi8(v, comma)),
                                  _mm_or_si128(_mm_cmpeq_epi8(folded, open),
                                               _mm_cmpeq_epi8(folded, close)));
        int shift = 16 * k;
        b->quote |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) << shift;
        b->backslash |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash))
                        << shift;
        b->newline |= (uint64_t)(uint16_t)_mm_movemask_epi8(nl) << shift;
        b->structure |= (uint64_t)(uint16_t)_mm_movemask_epi8(st) << shift;
    }
}
#else
static inline void
classify(const unsigned char *p, Block *b)
{
    b->quote = b->backslash = b->newline = b->structure = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t bit = (uint64_t)1 << i;
        unsigned char c = p[i], folded = c | 0x20;
        b->quote |= c == '"' ? bit : 0;
        b->backslash |= c == '\\' ? bit : 0;
        b->newline |= c == '\n' ? bit : 0;
        b->structure |= (c == '\n' || c == ',' || folded == '{' || folded == '}') ? bit : 0;
    }
}
#endif

/* Bit i set: an odd number of the quotes at or before i are set (inside a string). */
static inline uint64_t
prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

#define ODD_BITS 0xAAAAAAAAAAAAAAAAULL

/* The index of the lowest set bit of *x*, which is not 0. */
static inline int
lowest_bit(uint64_t x)
{
#if defined(__GNUC__)
    return __builtin_ctzll(x);
#else
    int i = 0;
    while (!(x & 1)) {
        x >>= 1;
        i++;
    }
    return i;
#endif
}

/* lines_array(chunk) -> bytes | None: b"[" + the lines of *chunk* (split at b"\n", a
 * last line break ending the last line) joined by commas + b"]", when every line
 * closes the strings and containers it opens and holds no comma outside them and no
 * backslash outside a string; None otherwise.
 *
 * The JSON Lines source reads a chunk with one orjson call instead of one a line, as
 * the items of this array. Those items are the lines' own values only when no value
 * spans a line break and no line holds two values, which the check proves: a string or
 * container left open at a line's end, or a comma at its top level, gives None. Only
 * the structure is checked; orjson checks the rest (a backslash outside a string is
 * refused there anyway; refusing it here lets escapes be found for a whole block at
 * once, as if every backslash were in a string). The bytes are copied once and checked
 * in the copy, 64 at a time with bit masks (simdjson's method); only the bytes that
 * shape the structure outside strings are visited one by one, each line break made a
 * comma there. For 300 lines of 200 bytes this takes about 12 us: a byte-at-a-time walk
 * that crossed strings a word at a time took 27 us, plus 8 us for bytes.replace and the
 * concatenation, and searching sixteen bytes at a time for the next byte that matters
 * measured slower still. */
static PyObject *
lines_array(PyObject *module, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "lines_array() takes bytes, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(arg);
    const char *src = PyBytes_AS_STRING(arg);
    if (size > 0 && src[size - 1] == '\n') {
        size--; /* the last line's own break, not a line of its own */
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size + 2);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(out) + 1;
    start[-1] = '[';
    memcpy(start, src, (size_t)size);
    start[size] = ']';
    Py_ssize_t depth = 0;
    uint64_t escaped_next = 0; /* the first byte of the next block is escaped */
    uint64_t in_string = 0;    /* all ones: the next block starts inside a string */
    unsigned char tail[64];
    for (Py_ssize_t at = 0; at < size; at += 64) {
        unsigned char *p = start + at;
        if (size - at < 64) { /* the last, short block: padded with bytes that do nothing */
            memset(tail, ' ', sizeof tail);
            memcpy(tail, p, (size_t)(size - at));
            p = tail;
        }
        Block b;
        classify(p, &b);
        /* Escaped bytes: each odd-length backslash run, from its start, escapes the
         * byte after it (simdjson's json_escape_scanner). */
        uint64_t escaped;
        if (b.backslash == 0) {
            escaped = escaped_next;
            escaped_next = 0;
        }
        else {
            uint64_t potential = b.backslash & ~escaped_next;
            uint64_t code = (((potential << 1) | ODD_BITS) - potential) ^ ODD_BITS;
            escaped = code ^ (b.backslash | escaped_next);
            escaped_next = (code & b.backslash) >> 63;
        }
        /* Inside a string: from its opening quote up to, not including, its closing one. */
        uint64_t inside = prefix_xor(b.quote & ~escaped) ^ in_string;
        in_string = (uint64_t)((int64_t)inside >> 63);
        if ((b.newline & inside) || (b.backslash & ~inside)) {
            goto refused; /* a line break in a string, a backslash outside one */
        }
        for (uint64_t bits = b.structure & ~inside; bits; bits &= bits - 1) {
            int i = lowest_bit(bits);
            switch (p[i]) {
            case '[':
            case '{':
                depth++;
                break;
            case ']':
            case '}':
                if (--depth < 0) {
                    goto refused;
                }
                break;
            case ',':
                if (depth == 0) {
                    goto refused;
                }
                break;
            default: /* a line break: the end of a line's value */
                if (depth != 0) {
                    goto refused;
                }
                start[at + i] = ',';
                break;
            }
        }
    }
    if (depth == 0 && in_string == 0) {
        return out;
    }
refused:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* value_end(data, start, state) -> (end, state)
 *
 * Where a JSON value ends, without parsing it: the index in *data* (a str or bytes)
 * just after the value, or -1 when it goes on past *data*, and the state to carry into
 * the next piece of its text. Only strings, their escapes and bracket depth are
 * followed; the text is not validated ("[" closed by "}" passes). The file sources
 * find where a long array item ends this way before parsing it once (or, past
 * max_item_bytes, instead of parsing it): the regex walk that did it (files.py's
 * value_end_py, the twin) took a Python step a bracket, 5 s for 16 MB of "{},".
 *
 * *state* is VE_ESCAPED | VE_STRING | depth * VE_DEPTH: a backslash ended the last
 * piece (the next character is escaped), the walk is inside a string, and how many
 * brackets are open. 0 is a scalar (a number or a literal), which ends before the first
 * whitespace, comma or closing bracket; a value that ends gives state 0 too. A str is
 * walked a code point at a time, bytes a byte at a time: in UTF-8 every byte of a
 * character past ASCII is 0x80 or more, so the two agree, byte for character.
 */
#define VE_ESCAPED 1
#define VE_STRING 2
#define VE_DEPTH 4

/* One walk a code unit width: the UCS1 one also walks bytes. *depth* is a long long so
   that bytes passed over (up to a file's size) cannot wrap it. */
#define VALUE_END_WALK(NAME, T)                                                        \
    static Py_ssize_t NAME(const T *p, Py_ssize_t i, Py_ssize_t n, long long *state)   \
    {                                                                                  \
        long long depth = *state / VE_DEPTH;                                           \
        int string = (*state & VE_STRING) != 0, escaped = (*state & VE_ESCAPED) != 0;  \
        if (*state == 0) {                                                             \
            for (; i < n; i++) {                                                       \
                T c = p[i];                                                            \
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' ||     \
                    c == ']' || c == '}') {                                            \
                    return i;                                                          \
                }                                                                      \
            }                                                                          \
            return -1;                                                                 \
        }                                                                              \
        while (i < n) {                                                                \
            if (escaped) {                                                             \
                escaped = 0;                                                           \
                i++;                                                                   \
            }                                                                          \
            else if (string) {                                                         \
                while (i < n && p[i] != '"' && p[i] != '\\') {                         \
                    i++;                                                               \
                }                                                                      \
                if (i == n) {                                                          \
                    break;                                                             \
                }                                                                      \
                if (p[i] == '\\') {                                                    \
                    if (i + 1 == n) { /* the escaped character is in the next piece */ \
                        escaped = 1;                                                   \
                        break;                                                         \
                    }                                                                  \
                    i += 2;                                                            \
                    continue;                                                          \
                }                                                                      \
                i++;                                                                   \
                string = 0;                                                            \
                if (depth == 0) {                                                      \
                    *state = 0;                                                        \
                    return i;                                                          \
                }                                                                      \
            }                                                                          \
            else {                                                                     \
                while (i < n && p[i] != '"' && (p[i] | 0x20) != '{' &&                 \
                       (p[i] | 0x20) != '}') {                                         \
                    i++;                                                               \
                }                                                                      \
                if (i == n) {                                                          \
                    break;                                                             \
                }                                                                      \
                T c = p[i++];                                                          \
                if (c == '"') {                                                        \
                    string = 1;                                                        \
                }                                                                      \
                else if ((c | 0x20) == '{') {                                          \
                    depth++;                                                           \
                }                                                                      \
                else if (--depth == 0) {                                               \
                    *state = 0;                                                        \
                    return i;                                                          \
                }                                                                      \
            }                                                                          \
        }                                                                              \
        *state = depth * VE_DEPTH + (string ? VE_STRING : 0) + escaped;                \
        return -1;                                                                     \
    }

VALUE_END_WALK(value_end_ucs1, Py_UCS1)
VALUE_END_WALK(value_end_ucs2, Py_UCS2)
VALUE_END_WALK(value_end_ucs4, Py_UCS4)

/* Below this many code units the GIL is kept: releasing it costs more than the walk. */
#define VE_RELEASE_GIL 65536

static PyObject *
value_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !(PyUnicode_Check(args[0]) || PyBytes_Check(args[0]))) {
        PyErr_SetString(PyExc_TypeError, "value_end(data: str | bytes, start, state)");
        return NULL;
    }
    PyObject *data = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long state = PyLong_AsLongLong(args[2]);
    if (state == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int kind = PyUnicode_1BYTE_KIND;
    const void *p;
    Py_ssize_t n;
    if (PyBytes_Check(data)) {
        p = PyBytes_AS_STRING(data);
        n = PyBytes_GET_SIZE(data);
    }
    else {
        kind = PyUnicode_KIND(data);
        p = PyUnicode_DATA(data);
        n = PyUnicode_GET_LENGTH(data);
    }
    if (start < 0 || start > n || state < 0 || (state & VE_ESCAPED && !(state & VE_STRING))) {
        PyErr_SetString(PyExc_ValueError, "value_end(): start or state out of range");
        return NULL;
    }
    Py_ssize_t end;
    /* *data* is immutable and held by the caller: the walk needs no Python. */
    PyThreadState *saved = n - start > VE_RELEASE_GIL ? PyEval_SaveThread() : NULL;
    if (kind == PyUnicode_1BYTE_KIND) {
        end = value_end_ucs1((const Py_UCS1 *)p, start, n, &state);
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        end = value_end_ucs2((const Py_UCS2 *)p, start, n, &state);
    }
    else {
        end = value_end_ucs4((const Py_UCS4 *)p, start, n, &state);
    }
    if (saved != NULL) {
        PyEval_RestoreThread(saved);
    }
    return Py_BuildValue("(nL)", end, state);
}

static PyMethodDef methods[] = {
    {"first_over", (PyCFunction)(void (*)(void))first_over, METH_FASTCALL,
     "first_over(rows, start, long_at, longest) -> int: the first row from *start* that is "
     "not a tuple or holds, at an index of *long_at*, bytes or a str longer than *longest* "
     "bytes; len(rows) if none."},
    {"lines_array", lines_array, METH_O,
     "lines_array(chunk) -> bytes | None: b'[' + the lines of *chunk* joined by commas + "
     "b']', when every line closes the strings and containers it opens and holds no comma "
     "outside them and no backslash outside a string; None otherwise."},
    {"rounded", rounded, METH_O,
     "rounded(value) -> bool: whether orjson's *value* holds a float of magnitude 2**63 or "
     "more (where it may have rounded an integer literal)."},
    {"text_bytes", (PyCFunction)(void (*)(void))text_bytes, METH_FASTCALL,
     "text_bytes(rows, start) -> int: the characters of the str cells and the bytes of the "
     "bytes cells of the tuples in *rows* from *start*."},
    {"value_end", (PyCFunction)(void (*)(void))value_end, METH_FASTCALL,
     "value_end(data, start, state) -> (end, state): the index in *data* (str or bytes) "
     "just after the JSON value whose text it continues (-1: it goes on past *data*) and "
     "the state to carry on with; only strings, escapes and brackets are followed."},
    {"rows_to_dicts", (PyCFunction)(void (*)(void))rows_to_dicts, METH_FASTCALL,
     "rows_to_dicts(columns, rows, start, flags_at, n_flags, long_at, longest) -> "
     "(dicts, stop): the rows from *start* as dicts, up to the first that is not a tuple, "
     "has a flag set or holds a tagged cut cell."},
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
