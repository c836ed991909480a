"""The renderer: one encode call's fitting of a value that the fast path did not take.

Two questions are asked of a value, and each answer is kept for the rest of the call:

* `EncodeCall.whole` -- its *full* rendering (every cap marker in place: ``max_items``,
  ``max_keys``, ``max_field_bytes``, depth, unencodable values) if that fits a cap, else
  None. A clean value is one compiled walk plus one orjson call. For a container the
  answer is remembered by identity and depth: its exact rendering once known, else the
  largest cap it is known to exceed, so asking again with a cap no larger costs nothing
  and asking with a larger one re-walks only the members that were not settled.
* `EncodeCall.cut` -- a rendering cut to fit an allotment, each cut marked. It is asked
  once per node of the output, top down. ``balanced`` shares an object's room among its
  members by water-filling over their remembered sizes (small members whole, large ones
  cut to a common level); lists keep a prefix of whole items; ``prefix`` fills in
  document order.

Every container is read into a snapshot bounded by the room it could fill (at most
``room // 2 + 2`` items or ``room // 5 + 2`` members; a list 64 items first and on as
they fit), and every comma and bracket is written from that snapshot: a container that
changes while it is encoded (a ``default`` hook, a lying ``__len__``, another thread)
cannot make the output invalid. Truncation reports are kept relative to their node and
joined into pointers once, at the end, so a shared subtree's rendering is reused
wherever it appears.

Work: each node is rendered by `cut` at most once, and `whole` re-walks a node only when
asked with a larger cap than any it was asked before; the nodes visited are bounded by
the budget (every visited member adds at least one byte to a walk that stops at its
cap) plus the one-item look-ahead. A native value's library output, kept whether it fit
or not, says the size of each native value inside it (`_Layout`): going down into it,
no level has the library write any of it again to learn whether it fits, so a model's
serializers run a few times a call however deep it sits. `work` counts the calls of
`whole` and `cut`, for tests.
"""

from __future__ import annotations

import datetime as _dt
import enum
import gc
import re
import reprlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, islice
from operator import is_ as _is
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeGuard

import orjson

from ..errors import DecodeError, EncodeError, JsonBudgetError
from . import bound as _bound
from . import values as _values
from .bound import BOUNDED_SCALARS as _BOUNDED_SCALARS
from .bound import TOO_BIG as _TOO_BIG
from .markers import Markers
from .strings import SURROGATE, cut_string, prefix, replaced_note

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = [
    "EncodeCall",
    "Mark",
    "Out",
    "RunSizer",
    "Stream",
    "Trs",
    "cut_text",
    "pointer",
    "reports_itself",
    "token",
]

#: Relative truncation reports: leaves ``(pointer suffix, kind, omitted, unit)`` and
#: branches ``(pointer suffix, Trs)``; `EncodeCall.reports` joins them into pointers.
#: The renderer's are tuples; the compiled cut's are packed (a sequence of leaves).
Trs: TypeAlias = Sequence[Any]
Out: TypeAlias = tuple[bytes, Trs]

_dumps = orjson.dumps
_loads = orjson.loads
#: orjson's bytes keep about a KiB of capacity whatever their length: a short one the
#: renderer holds (a marker, a member's rendering) is copied out, or each held 40 times
#: its length.
_compact = _bound.compact
_chain = chain.from_iterable
_JSONError = orjson.JSONEncodeError
_NONE: Trs = ()
#: `Stream.pending` holding no item.
_NO_ITEM: Final = object()
_BIG = 1 << 62
_SCALARS = (int, float, *_BOUNDED_SCALARS)  # bool is an int
#: From this many items on, a run of list items is bounded and encoded at once.
_BULK_MIN = 2
#: How far a field cap's cut may come out below the cap: a character's longest escape
#: (6 bytes) and a count's digits (`_whole_clip`).
_FIELD_SLACK = 32
#: Items a cut list reads before it knows how many fit; it reads four times more at a time.
_FIRST_READ = 64
#: orjson calls `default` up to 255 times in a row (its Recursive(254) test passes).
_DEFAULT_CHAIN = 255
#: Water-filling rounds per object; each costs about the object's room, and a few settle it.
_ROUNDS = 8
#: Keys longer than this never collide with a marker or a rewritten key's text.
_SHORT_KEY = 256
#: The room of an object's smallest rendering, `{` its marker member `}`, at most (a
#: structured marker under a numbered key with a 13-digit count is about 60 bytes).
_LEAST_ROOM = 80
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40
_KEY_REPR = 40
#: An int key of more bits is shown by its bit count: no str() of thousands of digits.
_KEY_INT_BITS = 128
#: Below this share of the room left, runs stop (`RunSizer.live`).
_LEAST_RUN_SHARE = 0.05
_COMMA = 0x2C  # ","
#: tzinfo types whose offset orjson reads without running Python code.
_SAFE_TZ = (type(None), _dt.timezone)
#: The JSON containers whose library call (`values.whole`) writes the native values they hold.
_PLAIN = frozenset({dict, list, tuple})
_REPRLIB_TYPES = frozenset({tuple, frozenset, bytes, str, int, float, bool, type(None)})
#: A JSON string; then a JSON text up to and including its next bracket, brace or
#: comma: strings (whose brackets are text) and scalars are passed over in C, never
#: backtracked into, and so in `_STRUCTURE` is a whole container that holds none.
_STRING_RE = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_STRING = re.compile(_STRING_RE)
_TOKEN = re.compile(rb"(?:[^\"\[\]{},]++|" + _STRING_RE + rb")*+[\[\]{},]")
_FLAT_RE = rb"(?:[^\"\[\]{}]++|" + _STRING_RE + rb")*+"
_STRUCTURE = re.compile(
    rb"(?:[^\"\[\]{},]++|"
    + _STRING_RE
    + rb"|\{"
    + _FLAT_RE
    + rb"\}|\["
    + _FLAT_RE
    + rb"\])*+[\[\]{},]"
)
#: An array's items have no key (`_Part`).
_ITEM: Any = object()
#: A marker's report, one object for every marker of its kind (a list of NaN reports
#: each of them).
_UNENCODABLE_TRS: Trs = (("", "unencodable", None, "bytes"),)
_DEPTH_TRS: Trs = (("", "depth", None, "bytes"),)


def pointer(parent: str, key: str | int) -> str:
    """Extend an RFC 6901 JSON Pointer by one reference token."""
    return parent + token(key)


def token(key: str | int) -> str:
    """One RFC 6901 reference token with its leading slash."""
    if type(key) is int:
        return f"/{key}"
    # str's own __str__: a subclass's may lie or raise, and the token is the key's text.
    return "/" + str.__str__(key).replace("~", "~0").replace("/", "~1")


class RunSizer:
    """How many items the next bulk run of a list or page takes (one orjson call a run).

    A run aims at a share of the room left, sized by the bytes per item so far; each run
    that does not fit halves the share, and below 5% the caller goes item by item.
    """

    __slots__ = ("share",)

    def __init__(self) -> None:
        self.share = 0.9

    @property
    def live(self) -> bool:
        """Whether runs are still worth trying."""
        return self.share > _LEAST_RUN_SHARE

    def size(self, room: int, done: int, done_bytes: int) -> int:
        """Items in the next run, given *done* items took *done_bytes* bytes so far."""
        return int(room * self.share * done / max(done_bytes, 1))

    def missed(self, over: float = 2.0) -> None:
        """The last run did not fit: aim lower, by *over* (its size / the room) if known.

        A run whose encoding came out larger than the room (its bound was below the
        room) was encoded for nothing: aiming just under the room makes the next one fit
        without halving the run.
        """
        self.share /= max(min(over * 1.05, 2.0), 1.05)


class Stream:
    """A lazily consumed iterator, pulled only as far as the budget needs.

    What it pulled stays here: the pages a `Paginator` builds keep their streams for
    whichever page meets the same iterator again (see `_pages.builder._Pulled`), so no
    pulled value is lost. Kept between those pages it is `park`ed: it holds no
    reference to the iterator, which (and all it holds) lives only as long as its owner
    keeps it.
    """

    __slots__ = ("done", "failed", "it", "items", "lock", "pending", "source")

    def __init__(self, it: Iterator[Any], source: Iterator[Any] | None = None) -> None:
        self.it = it
        # The iterator it stands for, which finds it again: *it* itself, or the one a
        # `values.Converted` reads (made anew each time its value is converted).
        self.source = it if source is None else source
        self.items: list[Any] = []
        self.done = False
        # What the iterator raised: raised again at every later read. A generator that
        # raised is finished, and read again it ends, so a retried page served the item
        # short under complete (and a spill wrote it short) with no marker. A
        # `BaseException` too (KeyboardInterrupt, a timeout): it finishes a generator alike.
        self.failed: BaseException | None = None
        # An item pulled that `items` could not take (its append ran out of memory): the
        # iterator gave it and will not again, so the next read takes it first.
        self.pending: Any = _NO_ITEM
        # Pages in other threads meet the same stream: one pulls at a time, or a
        # generator raises "already executing" (reentrant: an iterator that pages its
        # own stream gets that error, not a deadlock).
        self.lock = threading.RLock()

    def park(self) -> tuple[Iterator[Any], Iterator[Any]]:
        """Let go of the iterator while no page reads it; `unpark` gives it back.

        Returns what it held, for the caller to drop where running what that may run (a
        generator's ``finally``, a ``__del__``: its last reference may be this) is safe.
        """
        held = self.it, self.source
        self.it = self.source = None  # type: ignore[assignment]
        return held

    def unpark(self, it: Iterator[Any], source: Iterator[Any]) -> None:
        """Read *it* again (as `__init__` takes them), for a page that met *source*."""
        self.source = source
        self.it = it

    def pull(self, count: int, room: int, caps: Any, where: Any) -> None:
        """Pull until *count* items are held, the iterator ends, or they pass *room* bytes.

        A clean item counts its exact size and any other a lower bound from the walk
        (a value it cannot size counts one byte), commas between them included: so
        what is pulled is what can show in *room*, plus one item (more only where an
        item's markers make it larger than its bound).
        """
        items = self.items
        size = -1  # no comma before the first item
        for x in items:
            size += _pulled_size(x, room - size, caps) + 1
        while len(items) < count and not self.done and size <= room:
            if self._next(where):
                size += _pulled_size(items[-1], room - size, caps) + 1

    def _next(self, where: Any) -> bool:
        """Pull one item into `items`; False (and `done`) where the iterator ended."""
        try:
            with self.lock:
                failed = self.failed
                if isinstance(failed, Exception) and not isinstance(failed, MemoryError):
                    raise failed
                if failed is not None:
                    # Raised as it was where it was met (a KeyboardInterrupt stops the
                    # program, a MemoryError says memory ran out); a later read is neither,
                    # only a failed item.
                    raise EncodeError(
                        f"iterator raised {type(failed).__name__}", path=_path(where)
                    ) from failed
                pending = self.pending
                if pending is not _NO_ITEM:
                    self.items.append(pending)
                    self.pending = _NO_ITEM
                    return True
                if self.done:
                    return False
                try:
                    item = next(self.it)
                except StopIteration:
                    raise
                except BaseException as exc:
                    # Whatever raised it (a MemoryError too): the iterator may have ended
                    # or dropped an item, and read again it would end early.
                    self.failed = exc
                    raise
                try:
                    self.items.append(item)
                except MemoryError:
                    # The library's own list ran out, not the iterator: not failed, and
                    # the item it gave is held for the next read.
                    self.pending = item
                    raise
        except StopIteration:
            self.done = True
            return False
        except MemoryError:
            raise  # as itself, whatever raised it: an EncodeError would blame the iterator
        except Exception as exc:
            if reports_itself(exc):
                raise  # it already says what failed and where (a source's DecodeError)
            raise EncodeError(f"iterator raised {type(exc).__name__}", path=_path(where)) from exc
        return True

    def replay(self, where: Any) -> Iterator[Any]:
        """Every item: those pulled so far, then the rest, each pulled through this stream
        (kept in `items`, under its lock), so whichever reader meets it later, in this
        thread or another, sees all of them and no two readers pull one generator."""
        items = self.items
        i = 0
        while True:
            while i < len(items):
                yield items[i]
                i += 1
            # Another reader may have pulled the last items and ended it meanwhile.
            if not self._next(where) and i >= len(items):
                return

    def more(self, count: int, where: Any) -> bool:
        """Whether it holds more than *count* items; pulls at most one to learn it."""
        if len(self.items) > count:
            return True
        if not self.done and len(self.items) == count:
            self._next(where)
        return len(self.items) > count


def _pulled_size(item: Any, cap: int, caps: Any) -> int:
    """*item*'s size as it shows, if clean, else a lower bound; either costs at most *cap*.

    A lower bound alone (a byte for `1`) let a stream of small numbers be pulled about
    twice as far as it showed: those items were consumed from the caller's iterator.
    """
    cap = max(cap, 0)
    data = _bound.clean_dumps(item, cap, 0, caps)
    if type(data) is bytes:
        return len(data)
    if data == _bound.TOO_BIG:
        return cap + 1
    n = _bound.bound(item, cap, 0, *caps)
    return n if n > 0 else 1


#: What the dispatch hands on unchanged: orjson's exact types, the subclasses orjson
#: writes as their base (str, int, dict, list), and native values' views. Anything else
#: (a float or tuple subclass, a non-dict Mapping) meets `default` first, as in orjson.
_WALKED = frozenset(
    {str, int, float, bool, type(None), dict, list, tuple, Stream, *_BOUNDED_SCALARS}
)
_WALKED_BASES = (str, int, dict, list, *_values.WALKABLE)


def exact_text(s: str, most: int) -> str | _values.Clip:
    """A str subclass's text as an exact str, or as a `Clip` of its first *most*
    characters when it holds more (it cannot show whole; the copy stays bounded).

    Only str's own methods read it: a subclass's ``__len__``, ``__getitem__`` or
    ``__str__`` may lie or raise, and orjson, which writes its text, calls none of them.
    """
    n = str.__len__(s)
    if n <= most:
        return str.__str__(s)
    return _values.Clip(str.__getitem__(s, slice(0, most)), n, "chars", b64=False)


class LongKey(str):
    """The first characters of a str subclass's key too long to show whole, with the
    key's length (`total`): it is cut like any long key, its marker counting from it."""

    total: int


class RepeatedKey(str):
    """A key a mapping yielded again (a user's items() or iteration may): written
    rewritten, with a marker, so that no object holds a key twice."""

    __slots__ = ()


def exact_key(k: str, most: int) -> str:
    """A str subclass's key as an exact str (or a `LongKey` past *most* characters)."""
    n = str.__len__(k)
    if n <= most:
        return str.__str__(k)
    key = LongKey(str.__getitem__(k, slice(0, most)))
    key.total = n
    return key


class _Taken(set[str]):
    """The texts an object's rewritten keys must not repeat: its snapshot's short keys
    and the keys rewritten so far. Many keys may be rewritten to one text (tuples that
    reprlib shortens alike, a key a mapping yields again): each remembers where its
    search for a free suffix stopped, and a long text is looked up, not compared with
    every key, so each key costs about the same however many share its text.

    Made for every object cut and needed by few: what it remembers is made on first use.
    """

    #: per text, the suffix its last search stopped at: every lower one is taken (a key
    #: is taken back, `_cut_map`, only right after its search chose it)
    free: dict[str, int] | None = None
    of: list[Any] | None = None
    long: set[str]  # the long keys of `of`'s first `read` pairs
    read = 0

    def repeats(self, text: str, pairs: list[Any]) -> bool:
        """Whether a long chosen key repeats a key of *pairs* (a snapshot may read on)."""
        if self.of is not pairs:
            self.of, self.read, self.long = pairs, 0, set()
        if self.read < len(pairs):
            self.long.update(
                k for k, _ in islice(pairs, self.read, None) if _is_str(k) and len(k) > _SHORT_KEY
            )
            self.read = len(pairs)
        return text in self.long


class Mark:
    """A value the dispatch replaced by a marker."""

    __slots__ = ("kind", "what")

    def __init__(self, kind: str, what: str) -> None:
        self.kind = kind
        self.what = what


#: Members that are never a container: no `_Part` is noted for them.
_LEAVES: frozenset[type] = frozenset((
    str, int, float, bool, type(None), Mark, *_BOUNDED_SCALARS,
    _values.Raw, _values.Clip, _values.Blob, _values.Unencodable,
))  # fmt: skip


class _Snap:
    """A container read once: its members (pairs for a mapping), and how many it has.

    ``n`` is the count the container holds, None when unknown (an iterator not yet
    ended, a sequence whose ``__len__`` disagrees with what iterating it gave).
    """

    __slots__ = ("it", "limit", "members", "n")

    def __init__(
        self, members: list[Any], n: int | None, limit: int, it: Iterator[Any] | None = None
    ) -> None:
        self.members = members
        self.n = n
        self.limit = limit
        self.it = it  # where a container read by iteration goes on, so no item is read twice

    @property
    def whole(self) -> bool:
        """Whether every member the container holds is here."""
        return self.n is not None and len(self.members) >= self.n


class _Seen:
    """What one call knows about one container at one depth."""

    __slots__ = ("depth", "exact", "obj", "over", "size", "snap", "span", "spread", "value")

    def __init__(self, obj: Any, value: Any, depth: int) -> None:
        self.obj = obj  # held, so its id is not reused during the call
        self.value = value
        self.depth = depth
        self.snap: _Snap | None = None
        self.exact: Out | None = None  # the full rendering, when rendered in Python
        self.size = -1  # its length, when known
        self.over = -1  # a cap the full rendering is known to exceed
        # Where its full rendering is in a library's output that passed its room (its
        # own, or a container's holding it), and how many members have their part of it.
        self.span: tuple[_Layout, int] | None = None
        self.spread = 0


class _Part:
    """Member *i* of the container at *start* in *layout*, noted by its parent's read
    (*key* its key, `_ITEM` in an array; *n* the parent's count); *begin*, where its
    value starts there, is -1 until `EncodeCall._locate` looks (-2: not there); *size*,
    its full rendering's, where its library writes it (`values.written_alike`)."""

    __slots__ = ("begin", "i", "key", "layout", "n", "obj", "size", "start")

    def __init__(self, obj: Any, layout: _Layout, start: int, i: int, *, key: Any, n: int) -> None:
        self.obj = obj  # held, so its id is not reused during the call
        self.layout = layout
        self.start = start
        self.i = i
        self.key = key
        self.n = n
        self.begin = -1
        self.size = -1


class _Layout:
    """A library's full rendering of a value that did not fit its room, read for where
    each container in it starts, ends and has its commas.

    Cutting the value, the renderer asks each member it reaches whether it fits whole:
    a member its own library writes (`values.written_alike`) is its part of these
    bytes, so its size is known without writing it again. Without this, each level of
    a cut tree of models wrote all of the tree under it once more (the serializers of
    a model 12 levels down ran about 30 times).

    The text is read once, from the start and only as far as the members asked for
    end: a Python step a bracket or comma, of which there are no more than the size
    walk counted bytes before the library was asked to write it.
    """

    __slots__ = ("_nodes", "_opened", "_pos", "_tokens", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._tokens: Iterator[re.Match[bytes]] | None = None  # made when first read
        self._pos = 0  # where `_tokens` goes on
        # Each container read into so far, by where it starts: [where it ends (-1 while
        # open), where its own commas are]. One holding no container is read as one
        # token, and into only if asked (`_flat`).
        self._nodes: dict[int, list[Any]] = {}
        self._opened: list[list[Any]] = []

    def member(self, start: int, i: int) -> tuple[int, int, bool] | None:
        """Where member *i* (``"key":value`` in an object) of the container at *start*
        begins and ends (exclusive), and whether it is the last; None if it has none."""
        nodes = self._nodes
        node = nodes.get(start)
        if node is None and start < self._pos:
            node = self._flat(start)
        elif node is None or (node[0] < 0 and len(node[1]) <= i):
            data, opened = self.data, self._opened
            tokens = self._tokens
            if tokens is None:
                tokens = self._tokens = _STRUCTURE.finditer(data)
            m = None
            for m in tokens:
                j = m.end() - 1
                c = data[j]
                if c == _COMMA:
                    if opened:
                        top = opened[-1]
                        top[1].append(j)
                        if top is node and len(top[1]) > i:
                            break
                elif c in b"{[":
                    top = nodes[j] = [-1, []]
                    opened.append(top)
                    if j == start:
                        node = top
                elif opened:
                    top = opened.pop()
                    top[0] = j
                    if top is node:
                        break
                if node is None and j > start:
                    break  # passed over as one token: it holds no container
            if m is not None:
                self._pos = m.end()
            if node is None:
                if start >= self._pos:
                    return None
                node = self._flat(start)
        if node is None:
            return None
        end, commas = node
        if i > len(commas):
            return None
        begin = start + 1 if i == 0 else commas[i - 1] + 1
        if i < len(commas):
            return begin, commas[i], False
        if end > start + 1:
            return begin, end, True
        return None

    def _flat(self, start: int) -> list[Any] | None:
        """The node of the container at *start* that `_STRUCTURE` passed over whole."""
        data = self.data
        if data[start : start + 1] not in (b"{", b"["):
            return None
        commas: list[int] = []
        for m in _TOKEN.finditer(data, start + 1):
            j = m.end() - 1
            c = data[j]
            if c == _COMMA:
                commas.append(j)
                continue
            if c in b"{[":
                return None  # it holds a container: it was not passed over whole
            node = self._nodes[start] = [j, commas]
            return node
        return None


def _path(where: Any) -> str:
    """The JSON Pointer of a ``(parent, key or index)`` chain ending in a root pointer."""
    parts = []
    while type(where) is tuple:
        where, name = where
        parts.append(token(name))
    return str(where) + "".join(reversed(parts))


def _is_str(key: Any) -> bool:
    """Whether *key* is a str, by its type alone: ``isinstance`` would read a proxy's
    ``__class__``, which may raise, or claim str for an object str's own methods refuse.
    Any other key, a proxy's too, is written as a non-string key."""
    return issubclass(type(key), str)


def _proxy(obj: Any) -> bool:
    """Whether *obj* says it is of a class it is not (its ``__class__`` lies)."""
    try:
        return obj.__class__ is not type(obj)
    except MemoryError:
        raise  # the interpreter's: taken for a proxy, a good value was marked unencodable
    except Exception:  # noqa: BLE001 - a __class__ that raises says nothing true either
        return True


def _describe(obj: Any) -> str:
    """Say what stood where a marker now stands, at a bounded cost, without its content."""
    # The compiled counts: a subclass's own __len__ may lie or raise. A subclass whose
    # own items() or iteration gives other members than it stores is written as they
    # give it: its count is not known without reading them (they may never end).
    t = type(obj)
    if isinstance(obj, dict):
        if t is not dict and not _values.reads_stored(t):
            return "object"
        return f"object with {dict.__len__(obj)} keys"
    if isinstance(obj, _values.MapView):
        return f"object with {len(obj)} keys"  # a view counts its own members
    if isinstance(obj, Mapping):
        return "object"  # a Mapping's own __len__ may lie or raise
    if (
        isinstance(obj, list | tuple)
        and not _values.has_class(t, _PLAIN)
        and not _values.reads_stored(t)
    ):
        return "list"
    if isinstance(obj, list):
        return f"list of {list.__len__(obj)} items"
    if isinstance(obj, tuple):
        return f"list of {tuple.__len__(obj)} items"
    if isinstance(obj, _values.SeqView):
        return f"list of {len(obj)} items"
    if isinstance(obj, set):
        return f"{type(obj).__name__} of {set.__len__(obj)} items"
    if isinstance(obj, frozenset):
        return f"{type(obj).__name__} of {frozenset.__len__(obj)} items"
    if isinstance(obj, memoryview):
        return f"memoryview of {obj.nbytes} bytes"  # len() counts only its first dimension
    if isinstance(obj, bytes | bytearray):
        return f"{type(obj).__name__} of {len(obj)} bytes"
    if isinstance(obj, float):
        return float.__repr__(obj)
    if isinstance(obj, int):
        return "int beyond 64 bits"
    if isinstance(obj, Iterator | Stream):
        return "iterator"
    return type(obj).__name__[:40]


class EncodeCall:
    """State of one encode call (or one page): options, memory of sizes, pulled streams."""

    __slots__ = (
        "active",
        "caps",
        "changed",
        "converted",
        "cycles",
        "default",
        "error_on_unencodable",
        "fills",
        "known",
        "max_depth",
        "max_field",
        "max_items",
        "max_keys",
        "mk",
        "most",
        "over",
        "prefix",
        "seen",
        "spans",
        "spine",
        "streams",
        "values",
        "walked",
        "work",
    )

    def __init__(self, enc: Encoder, streams: dict[int, Stream] | None = None) -> None:
        self.caps = enc._caps
        self.max_depth, self.max_items, self.max_keys, self.max_field, _ = self.caps
        self.prefix = enc.strategy == "prefix"
        self.mk: Markers = enc._mk
        # The compiled balanced cut (`bound.fill`) makes the same choices as this renderer
        # for clean values, where no item, key or field cap and no structured marker
        # enters them; it hands back anything else (another type, a marker of its own).
        self.fills = (
            not self.prefix
            and not self.mk.structured
            and self.max_items == self.max_keys == self.max_field == _BIG
        )
        self.default = enc.default
        self.error_on_unencodable = enc.unencodable == "error"
        self.active: set[int] = set()  # containers being rendered: a repeat is a cycle
        self.cycles = 0  # cycle markers written; a rendering holding one is not kept
        self.seen: dict[tuple[int, int], _Seen] = {}
        # (id, depth) of a clean container -> (it, a lower bound of its size), from the
        # spines of walks that stopped at their cap (see `bound`): splitting a value then
        # does not re-walk the same prefix once a level.
        self.known: dict[tuple[int, int], tuple[Any, int]] = {}
        self.spine: list[tuple[Any, int, int]] = []
        self.converted: dict[int, tuple[Any, Any]] = {}
        # What the size walks made of the native values they met (`values.whole`), so
        # that the walk of each level of a tree converts none of them again.
        self.walked: dict[int, tuple[Any, Any]] = {}
        # (id, depth) of a member of a library output that did not fit -> where it is
        # there, found when the member is reached (see `_Layout`).
        self.spans: dict[tuple[int, int], _Part] = {}
        self.values: _values.Options = enc._values
        self.streams: dict[int, Stream] = {} if streams is None else streams
        self.work = 0
        # No text longer than the budget shows whole: a str subclass is copied no further.
        self.most = enc.limits.max_bytes
        self.over = 2.0  # how far the last bulk run passed its room (see `RunSizer`)
        # A view whose source changed while read: it cannot be rendered whole.
        self.changed: _values.SeqView | None = None

    # -- entry points ----------------------------------------------------------------

    def too_big(self, obj: Any, cap: int) -> None:
        """Note that the size walk found *obj* (at depth 0) too big for *cap*."""
        self.known[id(obj), 0] = (obj, cap + 1)

    def fit(self, obj: Any, budget: int, where: Any) -> Out | None:
        """*obj* whole if it fits *budget*, else cut to fit; None if not even a marker does."""
        fill = _bound.fill
        if self.fills and fill is not None:
            walked = self.known.get((id(obj), 0))  # the walk's lower bound, if it ran
            least = walked[1] if walked is not None and walked[0] is obj else 0
            out = fill(obj, budget, self.caps, None, least)
            if out is not None:
                return None if isinstance(out, bool) else out  # False: no marker fits
        try:
            out = self.whole(obj, budget, where, 0)
            return out if out is not None else self.cut(obj, budget, where, 0)
        except RecursionError as exc:
            raise _stack_error(where) from exc

    def render_whole(self, obj: Any, cap: int, where: Any) -> Out | None:
        """`whole` at the top: the full rendering of *obj* if it fits *cap*, else None."""
        try:
            return self.whole(obj, cap, where, 0)
        except RecursionError as exc:
            raise _stack_error(where) from exc

    def reports(self, trs: Trs, base: str, into: list[Any], make: Callable[..., Any]) -> None:
        """Join relative reports into ``make(pointer, kind, omitted, unit)``, appended to *into*."""
        _bound.join_reports(trs, base, into, make)

    def bulk_run(self, run: list[Any] | tuple[Any, ...], room: int, depth: int) -> bytes | None:
        """orjson's encoding of the items *run* (a slice the caller keeps) if all are
        clean and fit.

        *room* includes a comma before the run; the result keeps orjson's brackets. When
        the run was encoded and did not fit, `over` says by how much.
        """
        self.over = 2.0
        if len(run) < _BULK_MIN:
            return None
        n = _bound.bound_items(run, room, depth, *self.caps)
        if n < 0 or n + 1 > room:
            return None
        try:
            data = _bound.paused_dumps(run)  # no finalizer changes the run mid-write
        except _JSONError:  # ints beyond 64 bits, lone surrogates
            return None
        if len(data) - 1 > room:
            self.over = (len(data) - 1) / max(room, 1)
            return None
        return data

    # -- the type dispatch -----------------------------------------------------------

    def dispatch(self, obj: Any, where: Any) -> Any:
        """The type dispatch: what *obj* is encoded as.

        Returns a str, a scalar (int, float, bool, None, a bounded scalar), a `Mapping`,
        a list or tuple, a native value's view, `Raw` or `Clip`, a `Stream`, or a `Mark`.
        Every other type is converted here, once per object per call (so `default` runs
        once per object): enums by value, native values (see `values.adapt`), iterators
        as streams, then ``default``, then `values.fallback`; what is left is unencodable.
        """
        # Its type's bases, not isinstance: a proxy passes that as what it wraps.
        t = type(obj)
        try:
            if t in _WALKED or (issubclass(t, _WALKED_BASES) and not issubclass(t, str)):
                return obj
        except MemoryError:
            raise  # the interpreter's (see `_values.has_class`)
        except Exception:  # noqa: BLE001 - an unhashable class: `_convert` decides
            pass
        hit = self.converted.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        out = self._convert(obj, where)
        self.converted[id(obj)] = (obj, out)  # holding obj keeps its id from being reused
        return out

    def _convert(self, obj: Any, where: Any) -> Any:
        for _ in range(_DEFAULT_CHAIN + 1):  # the last round only checks
            if not _values.hashable_class(type(obj)):
                # Its metaclass makes it unhashable or its hash raise: every table of
                # classes, and every ABC's isinstance() (which caches classes), would
                # raise that bare. Only the checks that hash nothing, by its bases: as
                # orjson, a str, int, dict or list subclass as its base, an Enum by its
                # value, else `default`, else unencodable.
                t = type(obj)
                if issubclass(t, str):
                    return exact_text(obj, self.most)
                if issubclass(t, int | dict | list):
                    return obj
                if issubclass(t, enum.Enum):
                    obj = obj.value
                    continue
                if self.default is not None:
                    obj = self._default(obj, where)
                    continue
                return self._unknown(t.__name__, where)
            if _proxy(obj):
                # It passes isinstance as what it wraps (wrapt's ObjectProxy, werkzeug's
                # LocalProxy, a Mock with a spec), but that type's own methods refuse
                # it: only `default` may read it, else it is unencodable.
                if self.default is None:
                    return self._unknown(type(obj).__name__, where)
                obj = self._default(obj, where)
                continue
            if isinstance(obj, str):
                return exact_text(obj, self.most) if type(obj) is not str else obj
            if _values.has_class(type(obj), _WALKED) or isinstance(obj, _WALKED_BASES):
                return obj
            if isinstance(obj, enum.Enum):
                obj = obj.value
                continue
            t = type(obj)
            # Models, Structs, attrs, Decimal, NumPy, Fragment, dataclasses (their fields
            # as orjson selects them): as their own library writes them.
            try:
                native = _values.adapt(obj, self.values)
            except MemoryError:
                raise  # as itself, whatever raised it: not bad data (see encoder.md)
            except Exception as exc:  # noqa: BLE001 - re-raised as EncodeError, chained
                err = _library_error(exc, obj, where)
                raise err from err.__cause__
            if native is not _values.UNKNOWN:
                if type(native) is _values.Unencodable:
                    return self._unknown(native.what, where)
                if type(native) is _values.Again:
                    obj = native.value
                    continue
                return native
            if isinstance(obj, Iterator):
                source = obj.it if type(obj) is _values.Converted else obj
                stream = self.streams.get(id(source))
                if stream is None or stream.source is not source:
                    self.streams[id(source)] = Stream(obj, source)
                    # Read back: a page's streams keep the stream another thread's page
                    # made for this iterator since `get` missed (`_pages.builder._Pulled`),
                    # and this page must pull through that one, not beside it.
                    stream = self.streams[id(source)]
                return stream
            if self.default is not None:
                obj = self._default(obj, where)
                continue
            # Where orjson would raise: a subclass as its base, a Mapping or Sequence walked.
            try:
                native = _values.fallback(obj)
            except MemoryError:
                raise  # the interpreter's, not the value's
            except Exception as exc:  # a subclass's own code, as it was read
                raise EncodeError(
                    f"{t.__name__} raised {type(exc).__name__} while read", path=_path(where)
                ) from exc
            if native is not _values.UNKNOWN:
                return native
            return self._unknown(_describe(obj), where)
        raise EncodeError("default kept returning unencodable values", path=_path(where))

    def _default(self, obj: Any, where: Any) -> Any:
        assert self.default is not None
        try:
            return self.default(obj)
        except MemoryError:
            raise  # as itself, whatever raised it: the encoder's rule (see encoder.md)
        except Exception as exc:
            # Chained, not swallowed: the caller sees the hook's own error.
            raise EncodeError(
                f"default raised {type(exc).__name__} for {type(obj).__name__}",
                path=_path(where),
            ) from exc

    def _unknown(self, what: str, where: Any) -> Mark:
        if self.error_on_unencodable:
            raise EncodeError(f"cannot encode {what}", path=_path(where))
        return Mark("unencodable", what)

    # -- whole -----------------------------------------------------------------------

    def whole(self, obj: Any, cap: int, where: Any, depth: int) -> Out | None:
        """The full rendering of *obj* if it fits *cap* bytes, else None."""
        self.work += 1
        if cap <= 0:
            return None
        t = type(obj)
        if t is str:
            return self._whole_str(obj, cap, where)
        if t is dict or t is list or t is tuple:
            return self._whole_container(obj, obj, cap, where, depth)
        data = self._clean_dumps(obj, cap, depth)
        if type(data) is bytes:
            return data, _NONE
        if data == _TOO_BIG:
            return None
        if _values.has_class(t, _values.NATIVE_KEYS):  # a flat model or Struct: no view
            native = _values.native_whole(obj, cap, depth, self.caps, longer=True)
            if native is not None:
                if len(native) <= cap:
                    return native, _NONE
                self._failed(obj, self.dispatch(obj, where), depth, native)
                return None
        v = self.dispatch(obj, where)
        if isinstance(v, str):
            return self._whole_str(v, cap, where)
        if v is None or isinstance(v, _SCALARS):
            return self._scalar(v, cap, where, shorten=False)
        if type(v) is Mark:
            return self._marker(v.kind, v.what, cap, shorten=False)
        if type(v) is _values.Raw:
            return (v.data, _NONE) if len(v.data) <= cap else None
        if type(v) is _values.Clip:
            return self._whole_clip(v, cap)
        if type(v) is _values.Blob:
            return self._whole_blob(v, cap)
        return self._whole_container(obj, v, cap, where, depth)

    def _known_larger(self, obj: Any, depth: int, cap: int) -> bool:
        """Whether a walk already found *obj* (at *depth*) larger than *cap*."""
        key = (id(obj), depth)
        if self.spans and key in self.spans:
            self._locate(key)  # a member of a library output: its size is there
        known = self.known.get(key)
        return known is not None and known[0] is obj and known[1] > cap

    def _clean_dumps(self, obj: Any, cap: int, depth: int) -> bytes | int:
        """`bound.clean_dumps`, skipped for a container already known too big for *cap*."""
        if self._known_larger(obj, depth, cap):
            return _TOO_BIG
        spine = self.spine
        data = _bound.clean_dumps(obj, cap, depth, self.caps, spine, True)
        if spine:
            for o, d, size in spine:
                self.known[id(o), d] = (o, size)
            spine.clear()
        return data

    def _entry(self, obj: Any, v: Any, depth: int) -> _Seen:
        key = (id(obj), depth)
        ent = self.seen.get(key)
        if ent is None or ent.obj is not obj:
            ent = self.seen[key] = _Seen(obj, v, depth)
            if self.spans and key in self.spans:
                part = self._locate(key)
                if part is not None:
                    ent.span = part.layout, part.begin
                    ent.size = part.size
                self.spans.pop(key, None)
        return ent

    def _wrote(self, ent: _Seen, data: bytes) -> None:
        """Keep *data*, the library's output of *ent*'s value (its full rendering): the
        value is rendered as it, and cut, finds its members' sizes in it (`_Layout`)."""
        ent.exact, ent.size = (data, _NONE), len(data)
        if ent.span is None:
            ent.span, ent.spread = (_Layout(data), 0), 0

    def _exact(self, obj: Any, depth: int) -> int:
        """The length of *obj*'s full rendering (at *depth*) where it is known without
        rendering it (a library output it is part of says it), else -1."""
        key = (id(obj), depth)
        ent = self.seen.get(key)
        if ent is not None and ent.obj is obj:
            return ent.size
        if self.spans and key in self.spans:
            part = self._locate(key)
            if part is not None:
                return part.size
        return -1

    def _failed(self, obj: Any, v: Any, depth: int, data: bytes) -> None:
        """Keep what *data*, the library's output of *obj* (its view *v*) that passed
        its room, says: its size, and where each value inside it is (`_Layout`)."""
        ent = self._entry(obj, v, depth)
        ent.exact, ent.size = (data, _NONE), len(data)
        ent.span, ent.spread = (_Layout(data), 0), 0
        self.known[id(obj), depth] = (obj, len(data))

    def _spread(self, ent: _Seen, snap: _Snap) -> None:
        """Note, for each member of *ent* read into *snap* since the last call, that it
        is a member of the library output *ent* has a span in (`_locate` finds where)."""
        assert ent.span is not None
        layout, start = ent.span
        members, n = snap.members, snap.n
        if n is None:
            ent.span = None  # a count not known: no member is placed by its position
            return
        pairs = isinstance(ent.value, Mapping)
        depth = ent.depth + 1
        spans, seen = self.spans, self.seen
        for i in range(ent.spread, len(members)):
            k, x = members[i] if pairs else (_ITEM, members[i])
            try:
                leaf = type(x) in _LEAVES
            except MemoryError:
                raise  # the interpreter's (see `_values.has_class`)
            except Exception:  # noqa: BLE001 - an unhashable class (`_values.has_class`)
                leaf = False
            if leaf:
                continue  # nothing in it is reached as a container or measured
            key = (id(x), depth)
            reached = seen.get(key)
            if reached is not None and reached.obj is x:
                # Reached already (the same object twice): a value its library writes
                # is the same bytes wherever it is.
                if reached.span is None and reached.size < 0:
                    part = spans[key] = _Part(x, layout, start, i, key=k, n=n)
                    if self._locate(key) is part:
                        reached.span, reached.spread = (layout, part.begin), 0
                        reached.size = part.size
                    spans.pop(key, None)
            elif key not in spans or spans[key].obj is not x:
                spans[key] = _Part(x, layout, start, i, key=k, n=n)
        ent.spread = len(members)

    def _locate(self, key: tuple[int, int]) -> _Part | None:
        """Where the member noted under *key* is in its library output (read as far as
        the member's end), its size kept in `known` if its library writes it; None if
        the output's container does not hold it there (then nothing is learnt)."""
        part = self.spans[key]
        if part.begin == -1:
            part.begin = -2
            layout, i, n = part.layout, part.i, part.n
            found = layout.member(part.start, i)
            # The output's container has as many members as this one, in this order.
            if found is None or found[2] != (i == n - 1):
                return None
            begin, end, _ = found
            data = layout.data
            if part.key is not _ITEM:
                name = _STRING.match(data, begin)
                if (
                    name is None
                    or data[name.end() : name.end() + 1] != b":"
                    or _loads(data[begin : name.end()]) != part.key
                ):
                    return None
                begin = name.end() + 1
            if data[begin] not in b"{[":
                return None  # not a container there
            part.begin = begin
            x = part.obj
            if _values.written_alike(x):
                part.size = end - begin
                had = self.known.get(key)
                if had is None or had[0] is not x or had[1] < part.size:
                    self.known[key] = (x, part.size)
        return part if part.begin >= 0 else None

    def _whole_container(self, obj: Any, v: Any, cap: int, where: Any, depth: int) -> Out | None:
        if self._known_larger(obj, depth, cap):
            return None  # a walk of a native value around it found it larger (`_values.whole`)
        ent = self._entry(obj, v, depth)
        if ent.size >= 0:
            if ent.size > cap:
                return None
            if ent.exact is not None:
                return ent.exact
        elif ent.over >= cap:
            return None
        if type(v) is not Stream and type(v) is not Mark:
            data = self._clean_dumps(v, cap, depth)
            if type(data) is bytes:
                ent.size = len(data)
                return data, _NONE
            if data == _TOO_BIG:
                ent.over = cap
                if 0 <= ent.size <= cap:
                    ent.size = -1  # measured before the value changed (a hook, a thread)
                return None
            # A native value's own library writes it when all of it fits (byte identity).
            try:
                # A value at the top is walked once: what its walk makes is kept only
                # for the walks of values inside it, which the walks above them met.
                walked = self.walked if depth else None
                measured = ent.span is not None and ent.size >= 0
                native = _values.whole(
                    v, cap, depth, self.caps, self.known,
                    views=walked, longer=True, measured=measured,
                )  # fmt: skip
            except MemoryError:
                raise  # not the value's, nor a reason to render it member by member
            except Exception as exc:  # noqa: BLE001 - re-raised as EncodeError, chained
                if v is not obj or not _values.has_class(type(v), _PLAIN):
                    err = _library_error(exc, obj, where)
                    raise err from err.__cause__
                # A plain container's library call wrote the native values inside it and
                # cannot say which one raised: its members are rendered one by one below,
                # and the value that raises again is named at its own path.
                native = None
            if native is not None:
                if len(native) > cap:
                    # The full rendering, as long as a Python one: it does not fit.
                    self._failed(obj, v, depth, native)
                    return None
                self._wrote(ent, native)
                return ent.exact
        if type(v) is Mark:
            return self._marker(v.kind, v.what, cap, shorten=False)
        ident = id(v)
        if ident in self.active:
            return self._cycle(cap, where, shorten=False)
        if depth >= self.max_depth:
            return self._marker("depth", _describe(v), cap, shorten=False)
        cycles = self.cycles
        self.active.add(ident)
        try:
            if isinstance(v, Mapping):
                out = self._whole_map(ent, cap, where, depth)
            else:
                out = self._whole_list(ent, cap, where, depth)
        finally:
            self.active.discard(ident)
        if self.cycles == cycles:  # a rendering holding a cycle marker depends on the path
            if out is None:
                ent.over = max(ent.over, cap)
            else:
                ent.exact, ent.size = out, len(out[0])
        return out

    def _snap(self, ent: _Seen, limit: int, where: Any, *, room: int = 0) -> _Snap:
        """*ent*'s container read once, at least *limit* members of it where it has them;
        a stream only as far as its items could show in *room* bytes (0: two a member)."""
        snap = self._read(ent, limit, where, room=room)
        if ent.span is not None and ent.spread < len(snap.members):
            self._spread(ent, snap)
        return snap

    def _read(self, ent: _Seen, limit: int, where: Any, *, room: int) -> _Snap:
        snap = ent.snap
        if snap is not None and (snap.limit >= limit or snap.whole):
            return snap
        v = ent.value
        t = type(v)
        it: Iterator[Any] | None = None
        fresh = -1  # where the pairs read by this call start; -1: not pairs
        try:
            if t is dict or t is list:
                # Read whole up to *limit* each time: a reading that does not go on from
                # what the snapshot holds (the container changed since: a hook, a
                # finalizer, another thread) is not taken, as sizes were measured of it.
                members: list[Any] = _dict_items(v, limit) if t is dict else v[:limit]
                # A count past what was read is a second reading: it may be of a later
                # state, and one that disagrees with the first (shrunk) is not known.
                n: int | None = len(members) if len(members) < limit else len(v)
                if n is not None and n < len(members):
                    n = None
                if snap is not None:
                    if not _goes_on(snap, members, n, pairs=t is dict):
                        snap.limit = _BIG  # no reading is taken from it again
                        return snap
                    if t is list:
                        done = snap.members
                        done += members[len(done) :]
                        members = done  # the list its readers hold grows
                if t is dict:
                    fresh = 0
            elif _counted(v):
                # A tuple does not change; a SeqView whose source changed ends at its
                # snapshot, short of the count it measured (noted in `changed`). Read on
                # from where the last read stopped: a cut list reads a few items first
                # and more as they fit.
                if snap is None:
                    members = list(v[:limit])
                else:
                    members = snap.members
                    members += v[len(members) : limit]
                n = len(v)
                if len(members) < min(limit, n):
                    self.changed = v
            elif t is Stream:
                v.pull(limit, room or 2 * limit, self.caps, where)
                members = v.items[:limit]
                n = len(v.items) if v.done else None
            else:  # its len (or its items()) may not be the truth: it is iterated
                if snap is None:
                    members, it = [], iter(v.items() if isinstance(v, Mapping) else v)
                else:
                    members, it = snap.members, snap.it
                assert it is not None  # kept by this branch's first read
                fresh = len(members) if isinstance(v, Mapping) else -1
                members += islice(it, limit - len(members))
                n = len(members) if len(members) < limit else None
                if n is None and isinstance(v, _values.MapView):
                    n = len(v)  # a view counts its own members
        except MemoryError:
            # The interpreter's, not the container's (a plain dict's read allocates):
            # blamed on the value it would send the caller looking for a fault in data.
            # (A RecursionError is the container's own: reading one does not recurse.)
            raise
        except Exception as exc:
            if reports_itself(exc):
                # It already says what failed (a source's DecodeError); one that could not
                # know where (a computed field) gets the container's path.
                err = _placed(exc, where)
                raise err from err.__cause__
            # chained: the container's own error, with its path
            raise EncodeError(
                f"{type(v).__name__} raised {type(exc).__name__} while read", path=_path(where)
            ) from exc
        if fresh >= 0:
            members[fresh:] = self._pairs(v, members, fresh, where)
        ent.snap = snap = _Snap(members, n, limit, it)
        return snap

    def _pairs(self, v: Any, members: list[Any], fresh: int, where: Any) -> list[Any]:
        """*members* from *fresh* on as read from mapping *v*, each an exact ``(key,
        value)`` tuple, a key that subclasses str made exact (`exact_key`) and a str key
        read before made a `RepeatedKey`: what the renderer reads after."""
        pairs = members[fresh:]
        if type(v) is dict and all(type(k) is str or not _is_str(k) for k, _ in pairs):
            return pairs  # a dict's items are tuples, its exact str keys each once
        out = list(pairs)
        # The keys read before these, by an earlier read of the same snapshot.
        seen = {k for k, _ in members[:fresh] if type(k) is str}
        for i, p in enumerate(pairs):
            # A user's items() may yield anything; a tuple subclass is read as a tuple.
            n = tuple.__len__(p) if isinstance(p, tuple) else -1
            if n != 2:  # noqa: PLR2004 - a (key, value) pair
                what = f"tuple of {n}" if n >= 0 else type(p).__name__
                raise EncodeError(
                    f"{type(v).__name__}.items() yielded a {what}, not a (key, value) pair",
                    path=_path(where),
                )
            k, x = tuple.__getitem__(p, 0), tuple.__getitem__(p, 1)
            if type(k) is not str and _is_str(k):
                k = exact_key(k, self.most)  # two subclass keys may make one str
            if type(k) is str:
                if k in seen:
                    k = RepeatedKey(k)
                else:
                    seen.add(k)
            out[i] = (k, x)
        return out

    def _read_on(
        self, ent: _Seen, snap: _Snap, need: int, most: int, where: Any, *, room: int
    ) -> _Snap:
        """*snap* read on to hold *need* items or four times as many, at most *most*."""
        return self._snap(ent, min(most, max(4 * snap.limit, need)), where, room=room)

    def _whole_list(self, ent: _Seen, cap: int, where: Any, depth: int) -> Out | None:
        mk = self.mk
        limit = self.max_items
        most = min(limit, cap // 2 + 1) + 1  # more items than this cannot fit at two bytes
        # Read a few items first, and on as they fit: a long list's snapshot would
        # otherwise touch every item that could show at two bytes each.
        pulls = max(cap - 2, 0)  # a stream's items fill the brackets at most
        snap = self._snap(ent, min(most, _FIRST_READ), where, room=pulls)
        items, n = snap.members, snap.n
        if n is not None and n > limit and most <= limit:
            return None  # its first `limit` items overflow the cap at two bytes each
        # Room for the marker is kept only where the count is known to pass the cap; a
        # container read by iteration is written first and measured whole at the end.
        reserve = len(mk.items(n - limit)) + 1 if n is not None and n > limit else 0
        avail = cap - 2 - reserve
        # One buffer, not a list of parts: an item's bytes object and its two slots
        # cost more than a short item's text.
        buf = bytearray(b"[")
        size = 1  # bytes in buf
        trs: list[Any] = []
        i = 0
        runs = RunSizer()
        while i < limit:
            upto = limit if n is None else min(n, limit)
            bulk = i and runs.live and upto - i >= _BULK_MIN
            k = min(runs.size(avail - size + 1, i, size), upto - i) if bulk else 1
            if i + max(k, 1) > len(items) and not snap.whole:
                snap = self._read_on(ent, snap, i + max(k, 1), most, where, room=pulls)
                items, n = snap.members, snap.n
            if i >= len(items):
                break  # read on, it holds no more items
            k = min(k, len(items) - i)
            if bulk:
                step = self.bulk_run(items[i : i + k], avail - size + 1, depth + 1)
                if step is not None:
                    buf += b","
                    buf += memoryview(step)[1:-1]
                    size += len(step) - 1
                    i += k
                    continue
                runs.missed(self.over)
            sep = 1 if i else 0
            out = self.whole(items[i], avail - (size - 1) - sep, (where, i), depth + 1)
            if out is None:
                return None
            if sep:
                buf += b","
            buf += out[0]
            size += sep + len(out[0])
            if out[1]:
                trs.append(_under(f"/{i}", out[1]))
            i += 1
        shown = i
        if shown < limit:
            if not snap.whole:
                return None  # read on, it holds fewer items than it said
            capped = False
        else:
            if len(items) <= limit and not snap.whole:
                snap = self._read_on(ent, snap, limit + 1, limit + 1, where, room=pulls)
                items, n = snap.members, snap.n
            if n is None and len(items) <= limit and type(ent.value) is Stream:
                # A stream pulls by size, so that read may not have asked for one more.
                capped = ent.value.more(limit, where)
                n = None if capped else limit
            else:
                capped = len(items) > limit or n is None or n > limit
        omitted = None if n is None else n - limit
        if capped:
            if shown:
                buf += b","
            buf += mk.items(omitted)
            trs.append((f"/{shown}", "items", omitted, "items"))
        buf += b"]"
        return (bytes(buf), tuple(trs)) if len(buf) <= cap else None

    def _whole_map(self, ent: _Seen, cap: int, where: Any, depth: int) -> Out | None:
        limit = self.max_keys
        snap = self._snap(ent, min(limit, cap // 5 + 1) + 1, where)
        pairs, n = snap.members, snap.n
        shown = min(len(pairs), limit)
        capped = n is None or n > limit
        if capped and len(pairs) <= limit:
            return None  # the snapshot stopped at the cap: that many members overflow it
        if n is not None and len(pairs) < n <= limit:
            return None  # it changed after a shorter read, the one it is written from
        taken = self._short_keys(pairs)
        mkey = self.mk.key(taken) if capped else ""
        omitted = None if n is None else n - limit
        avail = cap - 2 - (len(self.mk.keys(omitted, mkey)) + (1 if shown else 0) if capped else 0)
        buf = bytearray(b"{")
        trs: list[Any] = []
        for i in range(shown):
            k, v = pairs[i]
            sep = 1 if i else 0
            room = avail - (len(buf) - 1) - sep
            key = self._key(k, room - 1, pairs, taken, where, whole=True)
            if key is None:
                return None
            kb, tok, ktr = key
            out = self.whole(v, room - len(kb), (where, tok), depth + 1)
            if out is None:
                return None
            if sep:
                buf += b","
            buf += kb
            buf += out[0]
            if ktr:
                trs += ktr
            if out[1]:
                trs.append(_under(token(tok), out[1]))
        if capped:
            if shown:
                buf += b","
            buf += self.mk.keys(omitted, mkey)
            trs.append((token(mkey), "keys", omitted, "keys"))
        buf += b"}"
        return (bytes(buf), tuple(trs)) if len(buf) <= cap else None

    # -- cut -------------------------------------------------------------------------

    def cut(self, obj: Any, allot: int, where: Any, depth: int) -> Out | None:
        """*obj* cut to fit *allot* bytes, every cut marked; None if not even a marker fits.

        The caller asked `whole` first: this is the rendering of a value that does not
        fit whole, or of one whose fit is unknown (then it may come out whole).
        """
        if allot <= 0:
            return None
        self.work += 1
        v = self.dispatch(obj, where)
        if isinstance(v, str):
            return self.cut_str(v, allot)
        if v is None or isinstance(v, _SCALARS):
            return self._scalar(v, allot, where)
        if type(v) is Mark:
            return self._marker(v.kind, v.what, allot)
        if type(v) is _values.Raw:
            if len(v.data) <= allot:
                return v.data, _NONE
            return self._marker("unencodable", v.what, allot)
        if type(v) is _values.Clip:
            return self._cut_clip(v, allot)
        if type(v) is _values.Blob:
            return self._cut_blob(v, allot)
        ident = id(v)
        if ident in self.active:
            return self._cycle(allot, where)
        if depth >= self.max_depth:
            return self._marker("depth", _describe(v), allot)
        ent = self._entry(obj, v, depth)
        self.active.add(ident)
        try:
            if isinstance(v, Mapping):
                if self.prefix:
                    return self._cut_map_prefix(ent, allot, where, depth)
                return self._cut_map(ent, allot, where, depth)
            return self._cut_list(ent, allot, where, depth)
        finally:
            self.active.discard(ident)

    def _uncut(self, obj: Any, where: Any) -> bool:
        """Whether *obj* has no cut but a marker (a number its library writes): a list
        counts it with the items left out instead of naming it unencodable."""
        return type(self.dispatch(obj, where)) is _values.Raw

    def least(self, obj: Any, where: Any, depth: int) -> int:
        """Bytes of the smallest honest rendering of *obj*: a marker, or *obj* whole.

        `cut` with this allotment always gives a rendering.
        """
        v = self.dispatch(obj, where)
        mk = self.mk
        if isinstance(v, str):
            head, tail = mk.string(len(v))
            marker = len(head) + len(tail)
            if len(v) + 2 <= marker:
                out = self.whole(v, marker, where, depth)
                if out is not None:
                    return len(out[0])
            return marker
        # A marker that replaces a value is sized as its kind alone: where its details
        # do not fit, `_marker` writes that, and a member sized with the details was
        # dropped from an object whose room held it.
        if v is None or isinstance(v, _SCALARS):
            out = self._scalar(v, _BIG, where)
            if out is None:
                return 0
            # a marker's reports: NaN, an int beyond 64 bits
            return len(mk.value("unencodable", "")) if out[1] else len(out[0])
        if type(v) is Mark:
            return len(mk.value(v.kind, ""))
        if type(v) is _values.Raw:
            return min(len(v.data), len(mk.value("unencodable", "")))
        if type(v) is _values.Clip:
            head, tail = mk.string(v.total, v.unit)  # what `_cut_clip` keeps at least
            return len(head) + len(tail)
        if type(v) is _values.Blob:  # as its base64 string's (above)
            head, tail = mk.string(v.chars)
            return min(v.chars + 2, len(head) + len(tail))
        if id(v) in self.active:
            return len(mk.value("unencodable", ""))
        if depth >= self.max_depth:
            return len(mk.value("depth", ""))
        ent = self._entry(obj, v, depth)
        if isinstance(v, Mapping):
            # Read as far as `_cut_map` reads for a room this small, so that both choose
            # the same marker key (it must not repeat a key read).
            limit = min(self.max_keys, _LEAST_ROOM // 5 + 1) + 1
            snap = self._snap(ent, limit, where)
            if not snap.members:
                return 2
            key = mk.key(self._short_keys(snap.members[:limit]))
            cut = 2 + len(mk.keys(snap.n, key))
        else:
            snap = self._snap(ent, 2, where)
            if not snap.members:
                return 2
            cut = 2 + len(mk.items(snap.n))
        # A short container may be smaller whole (`[null]`) than cut to its marker.
        cycles = self.cycles
        out = self.whole(obj, cut, where, depth)
        if out is None:
            return cut
        if self.cycles == cycles and ent.exact is None:
            # Kept: it is what a cut to this size writes should the value change before
            # then (a cut reads on from the live container; `_share`).
            ent.exact, ent.size = out, len(out[0])
        return len(out[0])

    def _cut_list(self, ent: _Seen, allot: int, where: Any, depth: int) -> Out | None:
        """A prefix of whole items; only the first may be cut ("prefix": the last shown)."""
        mk = self.mk
        avail = allot - 2
        limit = self.max_items
        # Read a few items first and more as they fit: a long list's snapshot would
        # otherwise touch every item that could show at two bytes each (a 64 KiB cut of
        # 200,000 rows shows 249 of 32,769 read).
        most = min(limit, max(avail, 0) // 2 + 1) + 1
        # A stream being cut has not ended: its items show beside the "more" marker.
        pulls = max(avail - len(mk.items(None)) - 1, 0)
        snap = self._snap(ent, min(most, _FIRST_READ), where, room=pulls)
        items, n = snap.members, snap.n
        total = min(len(items), limit)
        complete = n is not None and n <= limit and len(items) == n  # every item is here
        marker_room = len(mk.items(n)) + 1
        buf = bytearray(b"[")  # one buffer, as in `_whole_list`
        size = 1  # bytes in buf
        trs: list[Any] = []
        i = 0
        runs = RunSizer()
        while i < total:
            k = runs.size(avail - size + 1 - marker_room, i, size) if i and runs.live else 1
            if i + k + 1 > len(items) and snap.limit < most and not snap.whole:
                snap = self._read_on(ent, snap, i + k + 1, most, where, room=pulls)
                items, n = snap.members, snap.n
                total = min(len(items), limit)
                complete = n is not None and n <= limit and len(items) == n
                marker_room = len(mk.items(n)) + 1
                if i >= total:
                    break  # read again, the container holds fewer items than were shown
            last = complete and i == total - 1
            if i and runs.live and total - i >= _BULK_MIN:
                room = avail - size + 1 - marker_room
                k = min(k, total - i - (1 if complete else 0))
                step = self.bulk_run(items[i : i + k], room, depth + 1)
                if step is not None:
                    buf += b","
                    buf += memoryview(step)[1:-1]
                    size += len(step) - 1
                    i += k
                    continue
                runs.missed(self.over)
            sep = 1 if i else 0
            room = avail - (size - 1) - sep - (0 if last else marker_room)
            here = (where, i)
            out = self.whole(items[i], room, here, depth + 1)
            if out is None and complete and not last:
                # The room kept for a marker may be all that the rest lacks: a list is
                # cut only when its whole rest does not fit.
                tail = self._tail(items, i, avail - (size - 1), where, depth)
                if tail is not None:
                    buf += tail[0]
                    size += len(tail[0])
                    trs += tail[1]
                    i = total
                    break
            partial = False
            if out is None:
                # Only the first item may be cut to fit ("prefix" cuts any): a list of
                # whole items followed by a count reads better than a ragged last item.
                if room <= 0 or (i and not self.prefix) or self._uncut(items[i], here):
                    break
                out = self.cut(items[i], room, here, depth + 1)
                if out is None:
                    break
                partial = True
            if sep:
                buf += b","
            buf += out[0]
            size += sep + len(out[0])
            if out[1]:
                trs.append(_under(f"/{i}", out[1]))
            i += 1
            if partial:
                break
        stream = ent.value
        if n is None and i == len(items) and type(stream) is Stream:
            # Every item pulled shows (the last cut): one more pull, the look-ahead, tells
            # whether the stream has more, so the marker claims only what it saw. (An
            # earlier cut of it may have pulled it: the snapshot's count is then stale.)
            if not stream.done and len(stream.items) == i:
                stream._next(where)
            if stream.done and len(stream.items) == i:
                n = i
                complete = i <= limit
        if not (complete and i == total):
            omitted = None if n is None else n - i
            marker = mk.items(omitted)
            fallback = mk.items(None)
            if size + (1 if i else 0) + len(marker) + 1 > allot and len(fallback) < len(marker):
                # A long exact count; "more" is shorter. The report keeps the count.
                marker = fallback
            if i:
                buf += b","
            buf += marker
            trs.append((f"/{i}", "items", omitted, "items"))
        buf += b"]"
        return (bytes(buf), tuple(trs)) if len(buf) <= allot else None

    def _tail(self, items: list[Any], start: int, space: int, where: Any, depth: int) -> Out | None:
        """Items *start* to the end, whole, comma-led, if they fit *space* bytes."""
        buf = bytearray()
        trs: list[Any] = []
        for i in range(start, len(items)):
            if i:
                buf += b","
            out = self.whole(items[i], space - len(buf), (where, i), depth + 1)
            if out is None:
                return None
            buf += out[0]
            if out[1]:
                trs.append(_under(f"/{i}", out[1]))
        return bytes(buf), tuple(trs)

    def _members(
        self, ent: _Seen, avail: int, where: Any
    ) -> tuple[list[Any], int | None, _Taken, int]:
        """The snapshot's pairs, its count, its short keys, and how many may show."""
        limit = self.max_keys
        # No more members than these fit the room (each takes 5 bytes or more): the
        # marker's key avoids their keys, whatever an earlier read of the object took,
        # as the compiled cut does, so both choose one key.
        could_show = min(limit, max(avail, 0) // 5 + 1) + 1
        snap = self._snap(ent, could_show, where)
        taken = self._short_keys(snap.members[:could_show])
        return snap.members, snap.n, taken, min(len(snap.members), limit)

    def _cut_map(self, ent: _Seen, allot: int, where: Any, depth: int) -> Out | None:
        """Balanced: as many members as fit at their least, in order; water-fill the room."""
        mk = self.mk
        avail = allot - 2
        pairs, n, taken, total = self._members(ent, avail, where)
        everything = n is not None and n == total  # no member is cut by max_keys or unread
        mkey = mk.key(taken)
        chosen: list[tuple[bytes, str, Trs, Any, int]] = []
        used: list[int] = [0]  # bytes of the first j members at their least, commas included
        leasts: dict[int, int] = {}  # members' least, measured ahead by `_rest_fits`
        settled = False  # every member left fits whole-keyed at its least
        for i in range(total):
            k, v = pairs[i]
            sep = 1 if i else 0
            room = avail - used[-1] - sep - 1
            if (
                not settled
                and _is_str(k)
                and i + 1 < (n or total + 1)
                and (
                    len(k) + 3 > room - 40
                    # Lone surrogates are written as U+FFFD: 3 bytes each.
                    or (3 * len(k) + 3 > room - 40 and SURROGATE.search(k) is not None)
                )
            ):
                settled = self._rest_fits(
                    pairs, i, room + 1, total=total, n=n, mkey=mkey, leasts=leasts,
                    where=where, depth=depth,
                )  # fmt: skip
                if not settled:
                    # A key about to be cut leaves room for the member that says how
                    # many keys were left out, or it would take the room and be dropped
                    # itself; not where every member left fits at its least, key whole.
                    room -= len(mk.keys(None if n is None else n - i - 1, mkey)) + 1
            key = self._key(k, room, pairs, taken, where, whole=False)
            if key is None:
                break
            kb, tok, ktr = key
            m = leasts.get(i) if not ktr else None
            if m is None:
                m = self.least(v, (where, tok), depth + 1)
            if ktr and len(kb) + m > room + 1:
                # A rewritten key kept one byte for its value, which needs more: the
                # key is cut further rather than the member dropped.
                taken.discard(tok)  # added by `_key`, and by no other member
                key = self._key(k, room + 1 - m, pairs, taken, where, whole=False)
                if key is None:
                    break
                kb, tok, ktr = key
            cost = used[-1] + sep + len(kb) + m
            if cost > avail:
                break
            chosen.append((kb, tok, ktr, v, m))
            used.append(cost)
        j = len(chosen)
        reserve = 0
        if not (everything and j == total):
            # Leave room for the member that says how many were left out.
            while True:
                omitted = said = None if n is None else n - j
                reserve = len(mk.keys(said, mkey)) + (1 if j else 0)
                if used[j] + reserve <= avail or j == 0:
                    break
                j -= 1
            if used[j] + reserve > avail:
                said = None  # "more" is shorter than the count; the report keeps the count
                reserve = len(mk.keys(None, mkey))
                if reserve > avail:
                    return None  # the smallest object marker fits MIN_BYTES: nested only
        kept = chosen[:j]
        space = avail - reserve - sum((1 if i else 0) + len(c[0]) for i, c in enumerate(kept))
        outs = self._share(kept, space, where, depth)
        # Joined once: a member may be most of the output, and each level copies it.
        parts = [b"{"]
        trs: list[Any] = []
        for i, ((kb, tok, ktr, _, _), (data, tr)) in enumerate(zip(kept, outs, strict=True)):
            if i:
                parts.append(b",")
            parts.append(kb)
            parts.append(data)
            if ktr:
                trs += ktr
            if tr:
                trs.append(_under(token(tok), tr))
        if reserve:
            if j:
                parts.append(b",")
            parts.append(mk.keys(said, mkey))
            trs.append((token(mkey), "keys", omitted, "keys"))
        parts.append(b"}")
        out = b"".join(parts)
        return (out, tuple(trs)) if len(out) <= allot else None

    def _rest_fits(
        self,
        pairs: list[Any],
        start: int,
        space: int,
        *,
        total: int,
        n: int | None,
        mkey: str,
        leasts: dict[int, int],
        where: Any,
        depth: int,
    ) -> bool:
        """Whether members *start* on, each with its key whole and its value at its
        least, and the marker of any left out past them fit *space* bytes: then no key
        need be cut or dropped, nor room kept for the marker. Each least measured is put
        in *leasts*; a key that is not a plain str (it is rewritten) answers False."""
        need = 0
        if n is None or n != total:
            need = len(self.mk.keys(None if n is None else n - total, mkey)) + 1
        for i in range(start, total):
            k, v = pairs[i]
            if type(k) is not str or need + len(k) + 3 > space:
                return False
            try:
                kb = _dumps(k)
            except _JSONError:  # lone surrogates: the key is rewritten
                return False
            need += (1 if i > start else 0) + len(kb) + 1
            m = leasts.get(i)
            if m is None:
                m = leasts[i] = self.least(v, (where, k), depth + 1)
            need += m
            if need > space:
                return False
        return True

    def _share(
        self, kept: list[tuple[bytes, str, Trs, Any, int]], space: int, where: Any, depth: int
    ) -> list[Out]:
        """Water-fill *space* among the values: small ones whole, large ones cut evenly."""
        count = len(kept)
        if not count:
            return []
        mins = [c[4] for c in kept]
        full: list[Out | None] = [None] * count
        sizes = [_BIG] * count  # exact size where measured, else _BIG
        asked = [-1] * count
        level = max(space // count, 0)
        # Measure with a cap near the water level, raise the level with what turned out
        # small, and re-measure only what is still unknown. `whole` remembers what it
        # learnt, so a later round re-walks only the members not settled.
        for _ in range(_ROUNDS):
            changed = False
            for i, (_, tok, _, v, m) in enumerate(kept):
                cap = max(level, m)
                if sizes[i] == _BIG and asked[i] < cap:
                    asked[i] = cap
                    exact = self._exact(v, depth + 1)
                    if exact >= 0:
                        # Measured already (in a library output that holds it): written
                        # only if it shows whole, below. Its least stays its least: the
                        # size may be of the value before a hook changed it, and then
                        # only a cut of the snapshot `least` read is sure to fit.
                        if exact <= cap:
                            sizes[i] = exact
                            changed = True
                        continue
                    out = self.whole(v, cap, (where, tok), depth + 1)
                    if out is not None:
                        full[i] = out
                        sizes[i] = len(out[0])
                        mins[i] = min(mins[i], sizes[i])
                        changed = True
            level = _water_level(sizes, mins, space)
            if not changed:
                break
        outs: list[Out] = []
        for i, (_, tok, _, v, m) in enumerate(kept):
            known = full[i]
            share = max(mins[i], min(sizes[i], level))
            if sizes[i] <= share:
                if known is None:
                    known = self.whole(v, sizes[i], (where, tok), depth + 1)
                if known is not None:
                    outs.append(known)
                    continue
            out = self.cut(v, share, (where, tok), depth + 1)
            if out is None:
                # The value changed since `least` measured it (a hook, a finalizer or
                # another thread changed what its snapshot reads on): the rendering
                # `least` found and kept is written.
                out = self._least_kept(v, share, depth + 1)
            if out is None:  # pragma: no cover - `least` sizes a rendering that exists
                raise AssertionError(f"no rendering of {m} bytes at {_path(where)}")
            outs.append(out)
        return outs

    def _least_kept(self, obj: Any, cap: int, depth: int) -> Out | None:
        """The whole rendering of container *obj* that `least` measured and kept, if it
        fits *cap*."""
        ent = self.seen.get((id(obj), depth))
        if ent is None or ent.obj is not obj or ent.exact is None:
            return None
        return ent.exact if len(ent.exact[0]) <= cap else None

    def _cut_map_prefix(self, ent: _Seen, allot: int, where: Any, depth: int) -> Out | None:
        """Members in document order, each taking what it needs, until the budget is spent."""
        mk = self.mk
        avail = allot - 2
        pairs, n, taken, total = self._members(ent, avail, where)
        everything = n is not None and n == total
        mkey = mk.key(taken)
        buf = bytearray(b"{")
        trs: list[Any] = []
        shown = 0
        for i in range(total):
            k, v = pairs[i]
            rest = None if n is None else n - i - 1
            reserve = len(mk.keys(rest, mkey)) + 1 if rest != 0 or not everything else 0
            sep = 1 if i else 0
            room = avail - (len(buf) - 1) - sep - reserve
            key = self._key(k, room - 1, pairs, taken, where, whole=False)
            if key is None:
                break
            kb, tok, ktr = key
            if ktr:
                m = self.least(v, (where, tok), depth + 1)
                if len(kb) + m > room:  # as in `_cut_map`
                    taken.discard(tok)
                    key = self._key(k, room - m, pairs, taken, where, whole=False)
                    if key is None:
                        break
                    kb, tok, ktr = key
            out = self.whole(v, room - len(kb), (where, tok), depth + 1)
            cut = out is None
            if out is None:
                out = self.cut(v, room - len(kb), (where, tok), depth + 1)
                if out is None:
                    break
            if sep:
                buf += b","
            buf += kb
            buf += out[0]
            if ktr:
                trs += ktr
            if out[1]:
                trs.append(_under(token(tok), out[1]))
            shown += 1
            if cut and out[1] is not _UNENCODABLE_TRS and out[1] is not _DEPTH_TRS:
                # A cut value took the room it was given: the budget is spent. A value
                # replaced by its marker (`_marker`) shows no less for having its
                # details left out, and the room it left goes on to the next members.
                break
        if not (everything and shown == total):
            omitted = None if n is None else n - shown
            marker = mk.keys(omitted, mkey)
            fallback = mk.keys(None, mkey)
            if len(buf) + (1 if shown else 0) + len(marker) + 1 > allot and len(fallback) < len(
                marker
            ):
                # A long exact count; "more" is shorter. The report keeps the count.
                marker = fallback
            if shown:
                buf += b","
            buf += marker
            trs.append((token(mkey), "keys", omitted, "keys"))
        buf += b"}"
        return (bytes(buf), tuple(trs)) if len(buf) <= allot else None

    # -- leaves ----------------------------------------------------------------------

    def _scalar(self, obj: Any, cap: int, where: Any, *, shorten: bool = True) -> Out | None:
        """*obj*'s encoding within *cap*, or its marker (see `_marker` for *shorten*)."""
        if isinstance(obj, float) and obj - obj != 0:
            return self._unencodable(float.__repr__(obj), cap, where, shorten=shorten)
        if isinstance(obj, _dt.datetime | _dt.time) and type(obj.tzinfo) not in _SAFE_TZ:
            if not isinstance(obj, _dt.datetime):
                # orjson refuses a time with any tzinfo, one without an offset too: the
                # marker, as for a time in UTC (not the time as if it had none).
                return self._unencodable(_describe(obj), cap, where, shorten=shorten)
            # orjson would call a Python tzinfo itself, and one that raises crashes it
            # (plain orjson.dumps too): ask for the offset here and hand orjson a fixed one.
            try:
                offset = obj.utcoffset()
            except MemoryError:
                raise  # the interpreter's: the datetime is fine
            except Exception as exc:
                if self.error_on_unencodable:
                    raise EncodeError(
                        f"{type(obj).__name__}.utcoffset() raised {type(exc).__name__}",
                        path=_path(where),
                    ) from exc
                return self._marker("unencodable", type(obj).__name__, cap, shorten=shorten)
            # orjson writes +00:00 for no offset
            obj = obj.replace(tzinfo=_dt.UTC if offset is None else _dt.timezone(offset))
        # An offset with seconds, which orjson writes in minutes: written here, whole.
        data = _values.datetime_json(obj) if isinstance(obj, _dt.datetime) else None
        if data is None:
            try:
                data = _dumps(obj)
            except _JSONError:  # an int beyond 64 bits, a datetime whose tzinfo fails
                data = None
        if data is None:
            # Out of the except: an EncodeError (unencodable="error") raised for it showed
            # orjson's TypeError first, "during handling of the above exception".
            return self._unencodable(_describe(obj), cap, where, shorten=shorten)
        return (_compact(data), _NONE) if len(data) <= cap else None

    def _unencodable(self, what: str, cap: int, where: Any, *, shorten: bool = True) -> Out | None:
        if self.error_on_unencodable:
            raise EncodeError(f"cannot encode {what}", path=_path(where))
        return self._marker("unencodable", what, cap, shorten=shorten)

    def _cycle(self, cap: int, where: Any, *, shorten: bool = True) -> Out | None:
        self.cycles += 1
        return self._unencodable("cycle", cap, where, shorten=shorten)

    def _marker(self, kind: str, what: str, cap: int, *, shorten: bool = True) -> Out | None:
        """The marker of *kind* saying *what*, if it fits *cap*; with *shorten*, the kind
        alone where the details do not fit. The full rendering (`whole`) never shortens:
        that would be a cut the budget made."""
        data = self.mk.value(kind, what)
        if len(data) > cap:
            if not shorten:
                return None
            data = self.mk.value(kind, "")  # the kind alone, when the details do not fit
            if len(data) > cap:
                return None
        return _compact(data), _DEPTH_TRS if kind == "depth" else _UNENCODABLE_TRS

    def _whole_str(self, s: str, cap: int, where: Any) -> Out | None:
        field = self.max_field
        lim = min(cap, field)
        n = len(s)
        if n + 2 <= lim:
            try:
                data = _dumps(s)
            except _JSONError:  # lone surrogates: each U+FFFD, and a note says so
                whole = self._scrubbed(s, field)
                if whole is not None:
                    return whole if len(whole[0]) <= cap else None
                # With its note it passes the field cap, whose cut (below) is its full
                # rendering: None here made a short item "oversized" on any page.
            else:
                if len(data) <= lim:
                    return _compact(data), _NONE
                if len(data) <= field:
                    return None  # whole, it is longer than the cap
        elif n + 2 <= field and (field > 2 * cap or 6 * n + 2 <= field):
            return None  # whole it passes the cap; cut by the field cap it would too
        # The field cap cuts it whatever the budget: that cut is its full rendering.
        out = self.cut_str(s, field)
        return out if out is not None and len(out[0]) <= cap else None

    def _whole_blob(self, b: _values.Blob, cap: int) -> Out | None:
        """Binary data's full rendering, as its base64 string's (`_whole_str`): all of
        it where it fits the field cap, else the field cap's cut, if that fits *cap*."""
        field = self.max_field
        if b.chars + 2 <= field:
            return (_compact(_dumps(b.text())), _NONE) if b.chars + 2 <= cap else None
        out = self._cut_blob(b, field)
        return out if out is not None and len(out[0]) <= cap else None

    def _cut_blob(self, b: _values.Blob, allot: int) -> Out | None:
        """Binary data cut as its base64 string is (`cut_str`), encoding only its head."""
        room = min(allot, self.max_field)
        return self._cut_clip(b.head(room), room)

    def cut_str(self, s: str, allot: int) -> Out | None:
        """*s* cut to fit *allot* bytes with its marker; None if not even the marker fits."""
        return cut_text(s, min(allot, self.max_field), self.mk)

    def _whole_clip(self, c: _values.Clip, cap: int) -> Out | None:
        """A clipped text's full rendering: all its head (or the field cap's cut) and its
        marker, if that fits *cap*."""
        out = self._clip(c, cap)
        if out is None:
            return None
        rendering, whole_head = out
        if whole_head or self.max_field <= cap:
            return rendering
        # The field cap's cut is its full rendering, and may come out a little shorter
        # than the cap (a character or escape that does not fit stays out, the count may
        # have fewer digits): under a *cap* below the field cap it may still fit, as
        # `_whole_str` finds of a str. (A str subclass is read as a Clip: the two must
        # agree.) Only near the field cap, so the cost stays that of the cap.
        if self.max_field - cap <= _FIELD_SLACK:
            full = self._clip(c, self.max_field)
            if full is not None and len(full[0][0]) <= cap:
                return full[0]
        return None

    def _cut_clip(self, c: _values.Clip, allot: int) -> Out | None:
        out = self._clip(c, allot)
        return None if out is None else out[0]

    def _clip(self, c: _values.Clip, allot: int) -> tuple[Out, bool] | None:
        """A clipped text cut to fit *allot* bytes, its marker counting from the whole
        value's length (never complete); with whether all of its head was kept."""
        allot = min(allot, self.max_field)
        text, unit = c.text, c.unit
        head, tail = self.mk.string(c.total, unit)  # the longest count
        room = allot - len(head) - len(tail)
        counted = room >= 0
        if not counted:
            head, tail = self.mk.string(None, unit)  # the count does not fit: "…[truncated]"
            room = allot - len(head) - len(tail)
            if room < 0:
                return None
        content, kept, replaced = prefix(text, room)
        stand = c.keep(kept)
        if stand < kept:  # base64 is ASCII: a character a byte
            del content[stand:]
            kept = stand
        omitted = c.omitted(kept)
        if counted:
            head, tail = self.mk.string(omitted, unit)
        trs: tuple[Any, ...] = (("", "string", omitted, unit),)
        if replaced:
            trs += (("", "unencodable", replaced, "chars"),)
        content[0:0] = head
        content += tail
        return (bytes(content), trs), kept == len(text)

    def _scrubbed(self, s: str, cap: int) -> Out | None:
        """A string with lone surrogates: each becomes U+FFFD, and the string says so."""
        if len(s) + 2 > min(cap, self.max_field):
            return None  # whole it does not fit: the cut says how many it replaced
        clean, replaced = SURROGATE.subn("\ufffd", s)
        note = replaced_note(replaced)
        data = _dumps(clean)
        if len(data) + len(note) <= min(cap, self.max_field):
            return data[:-1] + note + b'"', (("", "unencodable", replaced, "chars"),)
        return None

    # -- keys ------------------------------------------------------------------------

    @staticmethod
    def _short_keys(pairs: list[Any]) -> _Taken:
        """The snapshot's short string keys: the only ones a chosen key can repeat."""
        return _Taken(k for k, _ in pairs if _is_str(k) and len(k) <= _SHORT_KEY)

    def _key(
        self, k: Any, room: int, pairs: list[Any], taken: _Taken, where: Any, *, whole: bool
    ) -> tuple[bytes, str, Trs] | None:
        """The encoded key with its colon, the key as written, and its report if rewritten.

        *room* is for the key and its colon. A key that is not a string, holds lone
        surrogates, or alone passes *room* is rewritten: its text carries a ``…[``
        marker (in either marker style: a key cannot hold an object) and differs from
        every other key of the snapshot and every key rewritten so far (*taken*). With
        *whole*, a key that would be cut gives None: the full rendering does not fit.
        None also when not even a rewritten key fits.
        """
        report: tuple[str, int | None, str]
        replaced = 0  # lone surrogates of a cut key written as U+FFFD
        if type(k) is RepeatedKey:
            text = "…[key repeated: " + self._key_text(str(k), where) + "]"
            report = ("unencodable", None, "keys")
        elif _is_str(k):
            n = k.total if type(k) is LongKey else len(k)
            cut = n + 3 > room
            if not cut:
                try:
                    kb = _dumps(k)
                except _JSONError:
                    clean, bad = SURROGATE.subn("\ufffd", k)
                    text = clean + f"…[key: {bad} lone surrogates replaced]"
                    report = ("unencodable", bad, "chars")
                    # Each replacement is 3 bytes, the note more: where they do not fit,
                    # the key is cut like any other, never dropped.
                    cut = len(_dumps(text)) + 1 > room
                else:
                    if len(kb) + 1 <= room:
                        return kb + b":", k, _NONE
                    cut = True
            if cut:  # too long for the room: cut like a string
                if whole:
                    return None
                longest = len(f"…[key truncated: {n} more chars]".encode())
                _, kept, _ = prefix(k, room - 3 - longest)
                # A key whose surrogates' note does not fit may fit whole without it: it is
                # cut by one character at least, so "truncated" is true ("0 more" was not).
                kept = min(kept, n - 1) if n else 0
                text, replaced = SURROGATE.subn("\ufffd", k[:kept])
                text += f"…[key truncated: {n - kept} more chars]"
                report = ("string", n - kept, "chars")
        else:
            text = "…[key: " + self._key_text(k, where) + "]"
            report = ("unencodable", None, "keys")
        base = text
        free = taken.free
        if free is None:
            free = taken.free = {}
        i = free.get(base, 0)
        if i:
            text = f"{base}{i}"
        while text in taken or (len(text) > _SHORT_KEY and taken.repeats(text, pairs)):
            i += 1  # ends: *taken* is finite and each candidate is new
            text = f"{base}{i}"
        if i:
            free[base] = i
        kb = _dumps(text)
        if len(kb) + 1 > room:
            return None
        taken.add(text)
        if replaced:  # reported as a string value's replacements are
            return (
                kb + b":",
                text,
                ((token(text), *report), (token(text), "unencodable", replaced, "chars")),
            )
        return kb + b":", text, ((token(text), *report),)

    def _key_text(self, k: Any, where: Any) -> str:
        """A non-string key described at a bounded cost: its type and a short repr."""
        # By type: isinstance() would read a proxy's __class__, which may raise or claim
        # a class whose methods below then refuse the object.
        kind = type(k)
        name = kind.__name__[:40]
        if issubclass(kind, int) and not issubclass(kind, bool):
            bits = int.bit_length(k)  # int's own: a subclass's methods may raise
            if bits > _KEY_INT_BITS:
                return f"{name} of {bits} bits"
            return f"{name} {int.__repr__(k)}"
        if issubclass(kind, float):
            return f"{name} {float.__repr__(k)}"
        try:
            # reprlib slices built-in containers before it repr()s them; it would also
            # hide a user repr's exception behind an address, so those are called here.
            text = (
                _REPR.repr(k) if _values.has_class(type(k), _REPRLIB_TYPES) else repr(k)[:_KEY_REPR]
            )
        except MemoryError:
            raise  # the interpreter's: the key would lose its description unseen
        except Exception as exc:
            if self.error_on_unencodable:
                raise EncodeError(
                    f"repr() of a {name} key raised {type(exc).__name__}", path=_path(where)
                ) from exc
            return name
        return f"{name} {SURROGATE.sub(chr(0xFFFD), text[:_KEY_REPR])}"


#: Python frames the renderer takes per level of the value it renders, about.
FRAMES_PER_LEVEL = 3


def cut_text(s: str, allot: int, mk: Markers) -> Out | None:
    """*s* cut to fit *allot* bytes with its marker; None if not even the marker fits.

    *allot* already includes any field cap: this is the whole cut of a string.
    """
    n = len(s)
    head, tail = mk.string(n)  # the longest count: the real one has no more digits
    room = allot - len(head) - len(tail)
    if room >= 0:
        mark: Callable[[int], tuple[bytes, bytes]] = lambda kept: mk.string(n - kept)  # noqa: E731 - one of two
    else:
        head, tail = mk.string(None)  # the count does not fit: "…[truncated]"
        room = allot - len(head) - len(tail)
        if room < 0:
            return None
        mark = lambda kept: (head, tail)  # noqa: E731 - the other, same typed name
    data, kept, replaced = cut_string(s, room, mark, len(head), len(tail))
    if kept == n and n:
        # All of it fit in the room, so only its "replaced" note did not: a cut that
        # kept everything would say "0 more chars". It drops the last character.
        data, kept, replaced = cut_string(s[: n - 1], room, mark, len(head), len(tail))
    trs: tuple[Any, ...] = (("", "string", n - kept, "chars"),)
    if replaced:
        trs += (("", "unencodable", replaced, "chars"),)
    return data, trs


def _under(suffix: str, trs: Trs) -> Any:
    """The report entry of a member's reports *trs* under pointer *suffix*: a branch, or
    where the member has one report, that report with *suffix* joined to its own
    pointer, so a marker-heavy list keeps one object a report, not three."""
    if len(trs) != 1 or type(trs) is not tuple:
        return suffix, trs
    entry = trs[0]
    if len(entry) == 2:  # noqa: PLR2004 - a (pointer, reports) branch; a report has 4
        return suffix + entry[0], entry[1]
    return suffix + entry[0], entry[1], entry[2], entry[3]


def _stack_error(where: Any) -> EncodeError:
    # The renderer recurses in Python, about FRAMES_PER_LEVEL frames a level up to
    # max_depth: a caller already near the recursion limit leaves it too little. A deep
    # value never gets here (max_depth stops it); the caller's own depth can.
    return EncodeError(
        "the Python stack ran out while rendering: the caller is nested too deep (the "
        f"renderer needs about {FRAMES_PER_LEVEL} frames a level of the value, up to "
        "max_depth, under sys.getrecursionlimit())",
        path=_path(where),
    )


def _library_error(exc: Exception, obj: Any, where: Any) -> Exception:
    """What to raise for *exc*, raised by a value's library as it wrote or converted *obj*
    (a pydantic serializer or ``exclude_if``, an attrs attribute never set): an
    `EncodeError` at *where*, its ``__cause__`` the library's own exception."""
    if reports_itself(exc):
        return _placed(exc, where)
    err = EncodeError(
        f"{type(obj).__name__} raised {type(exc).__name__} while converted", path=_path(where)
    )
    err.__cause__ = exc
    return err


def reports_itself(exc: BaseException) -> TypeGuard[JsonBudgetError]:
    """Whether *exc*, raised while a value was read, is passed on as itself: a
    `DecodeError` (the bytes read are not valid text or JSON: a source's file, at the
    offset it names) or an `EncodeError` (a value that cannot be written; `_placed` puts
    one without a path at the container's).

    Reading a value raises no other jsonbudget error: a `LimitError` or a `CursorError`
    met there came from a call the caller's code made (a generator, a Mapping's
    ``items()``, a query mapping), and is theirs, wrapped as any other exception of
    theirs. Passed on bare, an inner call's `InvalidCursor` read as this call's cursor
    refused. (Telling the two apart by the traceback's frames was tried: its file names
    depend on how the package was imported, and ``map`` or ``functools.partial`` add no
    frame of the caller's.)
    """
    return isinstance(exc, DecodeError | EncodeError)


def _placed(exc: JsonBudgetError, where: Any) -> JsonBudgetError:
    """*exc* itself, or, for an `EncodeError` raised without a path, one naming *where*
    with the same ``__cause__``."""
    if type(exc) is EncodeError and exc.path is None:
        placed = EncodeError(str(exc), path=_path(where))
        placed.__cause__ = exc.__cause__
        return placed
    return exc


def _dict_items(d: dict[Any, Any], limit: int) -> list[Any]:
    """The first *limit* items of *d*, read with the collector paused: the read allocates
    a tuple an item, and a collection started there runs finalizers and gc callbacks,
    which could change *d* mid-read. No other Python code runs there, so no other thread
    does: `chain` makes the dict's iterator inside `list`'s own loop (an iterator made by
    `islice` before `list` is called would see a change another thread made between)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return list(islice(_chain((d.items(),)), limit))
    finally:
        if collecting:
            gc.enable()


def _goes_on(snap: _Snap, members: list[Any], n: int | None, *, pairs: bool) -> bool:
    """Whether *members* (*n* in all), a new reading of a list or dict, is the container
    *snap* read: as many in all, and the same objects where *snap* read them (a key that
    is not an exact str was made one, `EncodeCall._pairs`, and only its value is compared)."""
    done = snap.members
    if n != snap.n or len(members) < len(done):
        return False
    if not pairs:
        return all(map(_is, done, members))
    return all(
        a[1] is b[1] and (a[0] is b[0] or type(a[0]) is not str or type(b[0]) is not str)
        for a, b in zip(done, members, strict=False)  # *members* may read further
    )


def _counted(v: Any) -> bool:
    """Whether a snapshot of *v* knows how many items *v* holds before it reads them all."""
    return type(v) is list or type(v) is tuple or isinstance(v, _values.SeqView)


def _water_level(sizes: list[int], mins: list[int], space: int) -> int:
    """The largest level L <= space with sum(max(min_i, min(size_i, L))) <= space.

    The sum grows piecewise linearly with L: member i grows from L = min_i to size_i.
    One sweep over those points, sorted, finds where it reaches *space*.
    """
    total = 0
    events: list[tuple[int, int]] = []
    for s, m in zip(sizes, mins, strict=True):
        total += m
        if s > m:
            events.append((m, 1))
            events.append((s, -1))
    if total > space:
        return 0
    events.sort()
    level = slope = 0
    for at, step in events:
        pos = min(at, space)
        if slope and total + slope * (pos - level) > space:
            return level + (space - total) // slope
        total += slope * (pos - level)
        level = pos
        slope += step
    if slope:
        return min(space, level + (space - total) // slope)
    return space
