"""`SpillStore`: large results kept whole in a private directory, read back in bounded pieces."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import heapq
import io
import os
import re
import secrets
import stat
import tempfile
import threading
import time
import unicodedata
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Protocol, runtime_checkable

from .._limits import check_int
from .._paths import cache_home
from ..errors import LimitError, SpillError

__all__ = [
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_TOTAL_BYTES",
    "DEFAULT_READ_BYTES",
    "MAX_LABEL_CHARS",
    "REF_RE",
    "SpillBackend",
    "SpillCleanup",
    "SpillRef",
    "SpillStore",
    "default_spill_dir",
    "extension_of",
    "put_chunks",
    "ref_parts",
    "sanitize_label",
    "spill_name",
]

#: Spilled results older than this many seconds are removed by `SpillStore.cleanup`.
DEFAULT_MAX_AGE = 24 * 3600
#: The store's total size; the oldest files go first when a put pushes it past this.
DEFAULT_MAX_TOTAL_BYTES = 2 * 1024**3
#: What `SpillStore.read` returns at most when no limit is given.
DEFAULT_READ_BYTES = 64 * 1024
#: A label is cut to this many characters after sanitizing.
MAX_LABEL_CHARS = 64

_WRITE_CHUNK = 1024 * 1024
_TEMP_PREFIX = ".tmp-"
_TEMP_SUFFIX = ".part"
#: Opens a temporary file as `tempfile.mkstemp` does (mode 0600, the flags of ``"xb"``:
#: exclusive, close-on-exec), but called from C by `io.FileIO`, so that the descriptor
#: belongs to a file object from the moment it exists: no exception, an interrupt
#: included, can arrive while it is a bare int that nothing would close.
_CREATE_PRIVATE = functools.partial(os.open, mode=0o600)
#: The store's directory as a put opens it: never through a symlink at its path.
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_EXTENSIONS = {"json": "application/json", "txt": "text/plain", "bin": "application/octet-stream"}
#: A stored result's name, in every store of ours: ``label.sha256.ext``.
REF_RE = re.compile(r"[a-z0-9_-]{1,64}\.[0-9a-f]{64}\.(?:json|txt|bin)")
_LABEL_DROP = re.compile(r"[^a-z0-9_-]+")
_MEDIA_TYPE_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}"
)
#: A put scans the directory once this many puts have followed the last scan, or as many
#: as that scan visited entries if more: the scan's cost is spread over the puts after it.
_SCAN_MIN_PUTS = 64
#: The ledgers of this many directories last used are kept when no store uses them.
_RECENT_LEDGERS = 16
_NS = 1_000_000_000
#: What `os.link` fails with on a file system without hard links, or for a directory.
_NO_LINK = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})


@dataclass(frozen=True, slots=True)
class SpillRef:
    """Where a spilled result is and what it is: enough to find, check and page through it."""

    #: Opaque name of the result inside its store (safe to show to a model).
    ref: str
    size: int
    sha256: str
    media_type: str
    label: str
    #: The file (for `RedisSpillStore`, the Redis key, which is no file).
    path: Path

    def to_json(self, *, include_path: bool = False) -> dict[str, Any]:
        """The reference as a JSON-ready dict; the path (which names a home directory) is opt-in."""
        out: dict[str, Any] = {
            "ref": self.ref,
            "size": self.size,
            "sha256": self.sha256,
            "media_type": self.media_type,
        }
        if include_path:
            out["path"] = str(self.path)
        return out


@runtime_checkable
class SpillBackend(Protocol):
    """What the guards and `ResultReader` call on a spill store (`SpillStore`,
    `RedisSpillStore`)."""

    @property
    def max_file_bytes(self) -> int: ...

    def put(
        self,
        data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
        *,
        label: str,
        media_type: str = ...,
    ) -> SpillRef: ...

    def get(self, ref: str) -> SpillRef: ...

    def read(self, ref: str, offset: int = ..., limit: int = ...) -> bytes: ...

    def open(self, ref: str) -> BinaryIO: ...


@dataclass(frozen=True, slots=True)
class SpillCleanup:
    """What one `SpillStore.cleanup` removed and what it kept."""

    removed_files: int
    removed_bytes: int
    kept_files: int
    kept_bytes: int


def sanitize_label(label: str) -> str:
    """Return *label* reduced to ``[a-z0-9_-]``, at most 64 characters, never empty.

    Path separators, dots, NUL and control characters all become ``_``, so a label can
    never name another directory; an empty result becomes ``"result"``.
    """
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, not {type(label).__name__}")
    # Cut first: a 10,000-character label costs no more than a short one.
    ascii_ = unicodedata.normalize("NFKD", label[: MAX_LABEL_CHARS * 4])
    ascii_ = ascii_.encode("ascii", "ignore").decode("ascii").lower()
    clean = _LABEL_DROP.sub("_", ascii_).strip("_-")[:MAX_LABEL_CHARS].strip("_-")
    return clean or "result"


def default_spill_dir() -> Path:
    """The default store directory: ``$XDG_CACHE_HOME/jsonbudget/spill`` or ``~/.cache/...``;
    without a home, or with a relative one, ``<tempdir>/jsonbudget-spill-<uid>``."""
    base = cache_home()
    return _temp_fallback_dir() if base is None else base / "jsonbudget" / "spill"


def _temp_fallback_dir() -> Path:
    uid = os.geteuid() if hasattr(os, "geteuid") else os.getpid()
    return Path(tempfile.gettempdir()) / f"jsonbudget-spill-{uid}"


def spill_name(ref: object) -> str:
    """The name in its store of the result *ref* stands for: *ref* is what `put` returned
    (a `SpillRef`) or its ``ref``. Anything else, or a name no store makes (a path,
    ``..``, NUL), raises `SpillError`, showing at most 80 characters of it."""
    name = ref.ref if isinstance(ref, SpillRef) else ref
    if not isinstance(name, str) or not REF_RE.fullmatch(name):
        shown = repr(ref)[:80]
        raise SpillError(f"not a spill reference (a SpillRef or its .ref): {shown}")
    return name


def ref_parts(ref: str) -> tuple[str, str, str]:
    """The SHA-256, media type and label of a name `REF_RE` matched, in `SpillRef`'s order."""
    label, digest, ext = ref.split(".")
    return digest, _EXTENSIONS[ext], label


class SpillStore:
    """A private directory of whole results, written atomically and kept for a while.

    Files are named ``<label>.<sha256>.<ext>`` (the label sanitized), written to a
    temporary file in the same directory, fsynced and renamed into place with mode 0600,
    so a reader never sees a partial file. Retention: files older than *max_age* seconds
    go, then the oldest until the total is within *max_total_bytes*, except what this
    object holds: each thread's latest result and the temporary files being written.
    `cleanup` applies this to the whole directory; a put applies it to what this process
    knows of the directory (its `_Ledger`) and scans the directory only every so often.
    """

    __slots__ = (
        "_dir",
        "_held",
        "_ledger",
        "_lock",
        "_max_age",
        "_max_file_bytes",
        "_max_total_bytes",
        "_writing",
    )

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_age: int = DEFAULT_MAX_AGE,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        max_file_bytes: int | None = None,
    ) -> None:
        self._max_age = check_int("max_age", max_age, minimum=1)
        self._max_total_bytes = check_int("max_total_bytes", max_total_bytes, minimum=1)
        if max_file_bytes is None:
            max_file_bytes = self._max_total_bytes
        check_int("max_file_bytes", max_file_bytes, minimum=1, maximum=self._max_total_bytes)
        self._max_file_bytes = max_file_bytes
        # A caller reads its result back (preview, reference) after put returns, so a
        # thread's latest result is held until that thread puts again or ends; a
        # concurrent put's cleanup would otherwise evict it in between.
        self._held: dict[threading.Thread, str] = {}
        # Temporary files of puts in progress: a stream may pause longer than max_age.
        self._writing: set[str] = set()
        self._lock = threading.Lock()
        if directory is None:
            self._dir, identity = _prepare_default_dir()
        else:
            self._dir, identity = _prepare_dir(_resolved(directory))
        self._ledger = _LEDGERS.get(self._dir, identity)

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def max_file_bytes(self) -> int:
        return self._max_file_bytes

    def put(
        self,
        data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
        *,
        label: str,
        media_type: str = "application/json",
    ) -> SpillRef:
        """Write *data* whole and return its reference.

        *data* is bytes, an iterable of byte chunks, or a binary file; chunks are hashed
        and written as they come, never joined in memory. If the iterable raises, or the
        data grows past ``max_file_bytes`` (`SpillError`), nothing is left behind.
        """
        clean_label = sanitize_label(label)
        ext = extension_of(media_type)
        thread = threading.current_thread()
        # a str: `finally` discards it calling no Python code an interrupt could stop
        tmp_name = _temp_name()
        # Each step below that takes something (the directory's descriptor, the mark, the
        # file, its descriptor) is inside what gives it back: an interrupt between two of
        # them leaks nothing.
        opened: list[int] = []
        try:
            directory = self._open_dir(opened)
            try:
                with contextlib.ExitStack() as on_error:
                    # Whatever goes wrong (the caller's iterable included), leave no
                    # partial file.
                    on_error.push(functools.partial(_remove_temp, tmp_name, directory))
                    with self._lock:
                        self._writing.add(tmp_name)
                        self._held.pop(thread, None)  # this thread is done with its previous result
                    digest, size = self._write(self._create(tmp_name, directory, on_error), data)
                    name = f"{clean_label}.{digest}.{ext}"
                    final = self._dir / name
                    try:
                        # Age counts from when the result was stored, not from its last
                        # chunk; the ledger records that same time.
                        stamp = time.time_ns()
                        os.utime(tmp_name, ns=(stamp, stamp), dir_fd=directory)
                        with self._lock:
                            self._held[thread] = name
                        os.replace(tmp_name, name, src_dir_fd=directory, dst_dir_fd=directory)
                        # The rename is durable only once the directory entry is on disk.
                        os.fsync(directory)
                    except OSError as exc:
                        raise SpillError(
                            f"cannot move the spill file into place: {exc.strerror}"
                        ) from exc
                    on_error.pop_all()
            finally:
                with self._lock:
                    self._writing.discard(tmp_name)
        finally:
            for fd in opened:
                os.close(fd)
        self._settle(name, stamp, size)
        return SpillRef(name, size, digest, media_type, clean_label, final)

    def _open_dir(self, opened: list[int]) -> int:
        """The store's directory, opened and checked as the constructor checks it, its
        descriptor appended to *opened*, which the caller closes, also when this raises.

        A put makes its file relative to this descriptor: the directory may have been
        removed and something else put at its path since the store was made (a symlink
        to a world-writable directory, say), which is refused here and never followed.
        """
        try:
            _open_into(opened, self._dir, _DIR_FLAGS)
            st = os.fstat(opened[0])
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                # O_NOFOLLOW and O_DIRECTORY: a symlink or a file now stands at the path
                raise SpillError(
                    "cannot create a spill file in the store: the spill directory path "
                    "is no longer a directory; refusing to use it"
                ) from exc
            raise SpillError(f"cannot create a spill file in the store: {exc.strerror}") from exc
        refusal = _refusal(st)
        if refusal is not None:
            raise SpillError(f"cannot create a spill file in the store: {refusal}")
        return opened[0]

    def _settle(self, name: str, stamp: int, size: int) -> None:
        """Record the result *name* just stored, then scan the directory if one is due, else
        apply the retention rules to what the ledger knows."""
        ledger = self._ledger
        now = time.time_ns()
        with ledger.lock:
            ledger.add(name, stamp, size)
            ledger.puts += 1
            # Half of max_age: a result another process stored after a scan began is found
            # by a later scan before it is max_age old, so age removal is never late.
            scan = (
                not ledger.scanned
                or ledger.puts >= max(_SCAN_MIN_PUTS, ledger.visited)
                or now - ledger.scan_started > self._max_age * _NS // 2
            )
            if scan:
                # Claimed here, so that the puts of other threads meanwhile do not scan too.
                ledger.scanned = True
                ledger.puts = 0
                ledger.scan_started = now
        if scan:
            self.cleanup(keep=name)
        else:
            self._trim(name)

    def _trim(self, keep: str) -> None:
        """Remove, oldest first, the results the ledger knows that are past ``max_age`` or
        beyond ``max_total_bytes``: work in proportion to what is removed.

        Each file is `stat`ed before it goes: one removed by another process is dropped
        from the ledger, and one stored again since (by another process) is put back with
        its new time, so that age and order are the file's own, as a scan would see them.
        """
        ledger = self._ledger
        max_age = self._max_age * _NS
        try:
            while True:
                now = time.time_ns()
                with ledger.lock:
                    # Under the ledger's lock: a put marks its result held before it adds
                    # it to the ledger, so whatever can be picked here that a put of this
                    # object still needs is in this snapshot.
                    protected = self._protected(keep)
                    picked = ledger.pick(now, max_age, self._max_total_bytes, protected)
                if not picked:
                    return
                for name, mtime, _ in picked:
                    st = self._current(name)
                    if st is None or not stat.S_ISREG(st.st_mode):
                        continue  # removed meanwhile, or not a result any more: not ours
                    if st.st_mtime_ns > mtime and now - st.st_mtime_ns <= max_age:
                        with ledger.lock:
                            ledger.restore(name, st.st_mtime_ns, st.st_size)
                        continue
                    _, stays = self._remove(name, st)
                    if stays is not None:
                        with ledger.lock:
                            ledger.restore(name, stays.st_mtime_ns, stays.st_size)
        except BaseException:
            # What was picked and not yet removed is no longer counted: a scan recounts.
            with ledger.lock:
                ledger.scanned = False
            raise

    def _protected(self, keep: str | None) -> set[str]:
        """The names this object holds: temporary files being written, each live thread's
        latest result, and *keep*."""
        with self._lock:
            # A thread that has ended will read nothing more: its result is let go.
            for thread in [thread for thread in self._held if not thread.is_alive()]:
                del self._held[thread]
            protected = self._writing | set(self._held.values())
        if keep is not None:
            protected.add(keep)
        return protected

    def _create(self, tmp: str, directory: int, on_error: contextlib.ExitStack) -> io.FileIO:
        """The new temporary file *tmp* in the open *directory*, open for writing;
        *on_error* is to remove it."""
        try:
            file = io.FileIO(tmp, "xb", opener=functools.partial(_CREATE_PRIVATE, dir_fd=directory))
        except FileExistsError as exc:
            on_error.pop_all()  # another's file (an unlikely name clash): not ours to remove
            raise SpillError("cannot create a spill file in the store: its name is taken") from exc
        except OSError as exc:
            raise SpillError(f"cannot create a spill file in the store: {exc.strerror}") from exc
        try:
            # The umask takes bits from open's mode: 0o277 left 0400, 0o700 nothing, and
            # the store could not read its own result back.
            os.fchmod(file.fileno(), 0o600)
        except OSError as exc:
            file.close()
            raise SpillError(f"cannot set a spill file's mode: {exc.strerror}") from exc
        return file

    def _write(
        self,
        file: io.FileIO,
        data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
    ) -> tuple[str, int]:
        """Hash and write *data* to *file*, unbuffered, then fsync and close it.

        Unbuffered, so every failed write (a full disk, a file-size limit) is raised where
        it happens as `SpillError`, and closing never flushes: a failure to close cannot
        replace the error that is already on its way out; it is added to it as a note.
        An exception between the closes below closes it as *file* is dropped.
        """
        fd = file.fileno()
        hasher = hashlib.sha256()
        size = 0
        try:
            for chunk in put_chunks(data, self._max_file_bytes):
                size += len(chunk)
                hasher.update(chunk)
                _write_all(fd, chunk)
            try:
                os.fsync(fd)
            except OSError as exc:
                raise SpillError(f"cannot write the spill file: {exc.strerror}") from exc
        except BaseException as exc:
            try:
                file.close()
            except OSError as close_exc:
                exc.add_note(f"closing the spill file failed too: {close_exc.strerror}")
            raise
        try:
            file.close()
        except OSError as exc:
            raise SpillError(f"cannot close the spill file: {exc.strerror}") from exc
        return hasher.hexdigest(), size

    def get(self, ref: SpillRef | str) -> SpillRef:
        """Return the reference of a stored result (hash from its name, size from disk);
        *ref* is what `put` returned or its ``ref``, as for `read`."""
        name = spill_name(ref)
        path = self._dir / name
        fd = self._open(path)
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        return SpillRef(name, size, *ref_parts(name), path)

    def read(self, ref: SpillRef | str, offset: int = 0, limit: int = DEFAULT_READ_BYTES) -> bytes:
        """Return at most *limit* bytes of the result *ref*, starting at byte *offset*.

        *ref* is the `SpillRef` `put` returned, or its ``ref``. An empty result means
        *offset* is at or past the end. A ref that is not a name this store makes (a
        path, ``..``, NUL) or that is gone raises `SpillError`.
        """
        check_int("offset", offset, minimum=0)
        check_int("limit", limit, minimum=1)
        fd = self._open(self._path_of(ref))
        try:
            size = os.fstat(fd).st_size
            want = max(0, min(limit, size - offset))
            parts: list[bytes] = []
            got = 0
            # pread may return less than asked; loop until the wanted span is read.
            while got < want:
                piece = os.pread(fd, want - got, offset + got)
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
            return b"".join(parts)
        except OSError as exc:
            raise SpillError(f"cannot read spilled result: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def open(self, ref: SpillRef | str) -> BinaryIO:
        """Open the result *ref* (a `SpillRef` or its ``ref``) for reading (binary); the
        caller closes it."""
        return open(self._open(self._path_of(ref)), "rb")

    def cleanup(self, *, keep: SpillRef | str | None = None) -> SpillCleanup:
        """Remove results older than ``max_age``, then the oldest beyond ``max_total_bytes``.

        Temporary files last modified more than ``max_age`` ago go too, unless a put of
        this object is still writing them. Neither *keep* nor any thread's latest result
        from this object is removed. A directory that has gone raises `SpillError`.
        This scans the whole directory, and what it keeps becomes the ledger.
        """
        if isinstance(keep, SpillRef):
            keep = keep.ref
        ledger = self._ledger
        with ledger.lock:
            first_seq = ledger.seq + 1  # the ledger's entries from here on are newer
            ledger.scanned = True
            ledger.puts = 0
            ledger.scan_started = time.time_ns()
        try:
            report, survivors, visited = self._scan(keep)
        except BaseException:
            with ledger.lock:
                ledger.scanned = False
            raise
        with ledger.lock:
            ledger.install(survivors, first_seq, visited)
        return report

    def _scan(self, keep: str | None) -> tuple[SpillCleanup, list[tuple[int, str, int]], int]:
        """`cleanup`'s work: the report, the (time ns, name, size) of the results kept,
        and how many directory entries were visited."""
        now = time.time_ns()
        max_age = self._max_age * _NS
        visited = 0
        found: list[tuple[str, bool, os.stat_result]] = []
        try:
            entries = os.scandir(self._dir)
        except OSError as exc:
            raise SpillError(f"cannot list the spill directory: {exc.strerror}") from exc
        with entries:
            for entry in entries:
                visited += 1
                name = entry.name
                is_temp = name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX)
                if not (is_temp or REF_RE.fullmatch(name)):
                    continue  # not ours: never touch it
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed meanwhile by another process's cleanup
                except OSError as exc:  # a directory we may list but not search
                    raise SpillError(f"cannot read {name} in the spill directory: "
                                     f"{exc.strerror}") from exc  # fmt: skip
                if stat.S_ISREG(st.st_mode):
                    found.append((name, is_temp, st))
        # Read only after listing: a put marks its file before renaming it into place, so
        # every file listed above that a put still needs is in this snapshot.
        protected = self._protected(keep)
        removed_files = removed_bytes = 0
        kept: list[tuple[int, str, int]] = []
        for name, is_temp, listed in found:
            st = listed
            if name in protected:
                if not is_temp:
                    kept.append((st.st_mtime_ns, name, st.st_size))  # counted, never removed
                continue
            if now - st.st_mtime_ns > max_age:
                # Listing a big directory takes seconds: the file may have been stored
                # again since, so it is judged by its status now.
                current = self._current(name)
                if current is None or not stat.S_ISREG(current.st_mode):
                    continue  # removed meanwhile, or not a result any more: not ours
                if now - current.st_mtime_ns > max_age:
                    removed, stays = self._remove(name, current)
                    if removed:
                        removed_files += 1
                        removed_bytes += current.st_size
                    if stays is None:
                        continue
                    current = stays
                st = current
            if not is_temp:
                kept.append((st.st_mtime_ns, name, st.st_size))
        total = sum(size for _, _, size in kept)
        kept.sort()
        survivors: list[tuple[int, str, int]] = []
        for entry_ in kept:
            mtime, name, size = entry_
            if total > self._max_total_bytes and name not in protected:
                total -= size
                current = self._current(name)
                if current is None or not stat.S_ISREG(current.st_mode):
                    continue  # removed meanwhile, or not a result any more: not ours
                if current.st_mtime_ns == mtime:
                    removed, stays = self._remove(name, current)
                    if removed:
                        removed_files += 1
                        removed_bytes += size
                    if stays is None:
                        continue
                    current = stays
                # Stored again since the listing: as new as any result here, it stays.
                total += current.st_size
                survivors.append((current.st_mtime_ns, name, current.st_size))
            else:
                survivors.append(entry_)
        report = SpillCleanup(
            removed_files, removed_bytes, len(survivors), sum(s for _, _, s in survivors)
        )
        return report, survivors, visited

    def _current(self, name: str) -> os.stat_result | None:
        """The status of *name* in the directory now (a symlink's own), None if it is gone."""
        try:
            return os.stat(self._dir / name, follow_symlinks=False)
        except FileNotFoundError:
            return None  # removed meanwhile by another process's cleanup
        except OSError as exc:  # a directory we may list but not search
            raise SpillError(f"cannot read {name} in the spill directory: {exc.strerror}") from exc

    def _remove(self, name: str, judged: os.stat_result) -> tuple[bool, os.stat_result | None]:
        """Remove *name* if it is still the file of status *judged*. Return whether it was
        removed, and the status of the file that stays under *name* instead, if any.

        An unlink by name after a check would take a copy that another process's put
        renamed into place in between: the newest copy of a result, just returned to its
        caller. So the file is first renamed to a name of this call's own, which takes
        whatever stands there at once, and checked there (same inode, same time): the
        file judged is removed, any other goes back. The private name is a temporary
        file's, so a process that dies in between leaves nothing a scan will not remove.
        """
        path = self._dir / name
        aside = self._dir / _temp_name()
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False, None  # removed meanwhile by another process's cleanup
        except OSError as exc:  # a read-only directory, say
            raise SpillError(f"cannot remove {name}: {exc.strerror}") from exc
        try:
            try:
                st = os.stat(aside, follow_symlinks=False)
            except FileNotFoundError:
                # Another process's scan took it as an abandoned temporary file, which
                # it removes only once the file is past that store's max_age.
                return False, None
            except OSError as exc:
                raise SpillError(f"cannot remove {name}: {exc.strerror}") from exc
            if (st.st_ino, st.st_dev, st.st_mtime_ns) == (
                judged.st_ino,
                judged.st_dev,
                judged.st_mtime_ns,
            ):
                return _unlink(aside, name), None
        except BaseException as exc:
            # Also on an interrupt: a file taken aside and not removed may be a result
            # just stored. A failure to put it back is added to *exc*, not raised instead.
            try:
                _put_back(aside, path)
            except SpillError as put_exc:
                exc.add_note(str(put_exc))
            raise
        _put_back(aside, path)
        return False, st if stat.S_ISREG(st.st_mode) else None

    def _path_of(self, ref: object) -> Path:
        return self._dir / spill_name(ref)

    def _open(self, path: Path) -> int:
        opened: list[int] = []
        try:
            self._open_to(opened, path)
        except BaseException:
            for fd in opened:  # an interrupt included: the caller never gets it to close
                os.close(fd)
            raise
        return opened[0]

    def _open_to(self, opened: list[int], path: Path) -> None:
        """Open the result at *path* for reading, its descriptor appended to *opened*, which
        the caller closes, also when this raises (one that is not a regular file)."""
        # O_NONBLOCK: opening a FIFO planted under a valid name waited for a writer
        # forever; it opens at once now, and the check below refuses it (a regular
        # file's reads do not block either way).
        flags = (
            os.O_RDONLY
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_NONBLOCK", 0)
        )
        try:
            _open_into(opened, path, flags)
        except FileNotFoundError:
            raise SpillError(
                f"no spilled result {path.name!r} (expired, evicted or never stored)"
            ) from None
        except OSError as exc:
            raise SpillError(f"cannot open spilled result {path.name!r}: {exc.strerror}") from exc
        if not stat.S_ISREG(os.fstat(opened[0]).st_mode):
            raise SpillError(f"spilled result {path.name!r} is not a regular file")


class _Ledger:
    """What this process knows of the results in one spill directory, shared by every
    `SpillStore` of the process on it: each result's time (ns) and size, their total, and
    a heap by time, so that a put finds the oldest without listing the directory.

    It holds the results kept by the last scan plus those put since; a scan replaces it.
    Entries of the heap whose time no longer matches ``files`` are stale and skipped.
    Every method is called with ``lock`` held.
    """

    __slots__ = (
        "__weakref__",
        "files",
        "heap",
        "identity",
        "lock",
        "puts",
        "scan_started",
        "scanned",
        "seq",
        "total",
        "visited",
    )

    def __init__(self, identity: tuple[int, int]) -> None:
        #: The directory's (st_dev, st_ino): a directory made anew under the same path
        #: gets a new ledger.
        self.identity = identity
        self.lock = threading.Lock()
        #: name -> (time ns, size, seq); seq orders additions against a scan in progress.
        self.files: dict[str, tuple[int, int, int]] = {}
        self.heap: list[tuple[int, str]] = []
        self.total = 0
        self.seq = 0
        #: Whether a scan has filled the ledger (False again after a failed scan or trim).
        self.scanned = False
        self.scan_started = 0
        self.puts = 0  # since the last scan began
        self.visited = 0  # directory entries the last scan visited

    def add(self, name: str, mtime: int, size: int) -> None:
        old = self.files.get(name)
        if old is not None:
            self.total -= old[1]
        self.seq += 1
        self.files[name] = (mtime, size, self.seq)
        self.total += size
        if old is None or old[0] != mtime:
            heapq.heappush(self.heap, (mtime, name))
            if len(self.heap) > 2 * len(self.files) + _SCAN_MIN_PUTS:
                self._rebuild_heap()  # drop the stale entries: amortized over the pushes

    def restore(self, name: str, mtime: int, size: int) -> None:
        """Put back a picked result found stored again since, unless a put has meanwhile."""
        old = self.files.get(name)
        if old is None or old[0] < mtime:
            self.add(name, mtime, size)

    def pick(
        self, now: int, max_age: int, max_total: int, protected: set[str]
    ) -> list[tuple[str, int, int]]:
        """Take out of the ledger, oldest first, the results past *max_age* and then those
        beyond *max_total*, never one in *protected*; return their (name, time, size)."""
        heap, files = self.heap, self.files
        picked: list[tuple[str, int, int]] = []
        skipped: list[tuple[int, str]] = []
        while heap:
            mtime, name = heap[0]
            entry = files.get(name)
            if entry is None or entry[0] != mtime:
                heapq.heappop(heap)
                continue
            if now - mtime <= max_age and self.total <= max_total:
                break
            heapq.heappop(heap)
            if name in protected:
                skipped.append((mtime, name))  # counted, never removed
                continue
            del files[name]
            self.total -= entry[1]
            picked.append((name, mtime, entry[1]))
        for item in skipped:
            heapq.heappush(heap, item)
        return picked

    def install(self, kept: list[tuple[int, str, int]], first_seq: int, visited: int) -> None:
        """Replace the ledger by what a scan kept, keeping what was added since it began
        (numbered from *first_seq*), which the scan may not have listed."""
        files = {name: (mtime, size, 0) for mtime, name, size in kept}
        for name, entry in self.files.items():
            if entry[2] >= first_seq:
                files[name] = entry
        self.files = files
        self.total = sum(size for _, size, _ in files.values())
        self._rebuild_heap()
        self.visited = visited

    def _rebuild_heap(self) -> None:
        self.heap = [(mtime, name) for name, (mtime, _, _) in self.files.items()]
        heapq.heapify(self.heap)


class _Ledgers:
    """Per process, by directory path: the stores of a process on one directory share what
    they know of it. A ledger lives while a store uses it, and the last `_RECENT_LEDGERS`
    used are kept besides, so that the store a gate or a `TurnBudget` makes for itself on
    the default directory does not pay a scan of it at its first put, and a process that
    makes directories without end does not keep a ledger for each."""

    __slots__ = ("by_dir", "lock", "recent")

    def __init__(self) -> None:
        self.by_dir: weakref.WeakValueDictionary[str, _Ledger] = weakref.WeakValueDictionary()
        self.recent: OrderedDict[str, _Ledger] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, directory: Path, identity: tuple[int, int]) -> _Ledger:
        key = os.fspath(directory)
        with self.lock:
            ledger = self.by_dir.get(key)
            if ledger is None or ledger.identity != identity:
                ledger = self.by_dir[key] = _Ledger(identity)
            self.recent[key] = ledger
            self.recent.move_to_end(key)
            if len(self.recent) > _RECENT_LEDGERS:
                self.recent.popitem(last=False)
            return ledger

    def reset_in_child(self) -> None:
        # Another thread may have held a lock at the fork, and never releases it in the
        # child; the child counts as another process, which scans before it trusts what
        # it knows.
        self.lock = threading.Lock()
        for ledger in list(self.by_dir.values()):
            ledger.lock = threading.Lock()
            ledger.scanned = False


_LEDGERS = _Ledgers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LEDGERS.reset_in_child)


def extension_of(media_type: object) -> str:
    """The extension a stored result of *media_type* is named with; `LimitError` if
    *media_type* is not a type/subtype string."""
    if not isinstance(media_type, str) or not _MEDIA_TYPE_RE.fullmatch(media_type):
        raise LimitError("media_type", str(media_type)[:80], "must be a type/subtype string")
    lowered = media_type.lower()
    if lowered == "application/json" or lowered.endswith("+json"):
        return "json"
    if lowered.startswith("text/"):
        return "txt"
    return "bin"


def put_chunks(
    data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
    max_file_bytes: int,
) -> Iterator[Any]:
    """The byte chunks of *data*; `SpillError` once they pass *max_file_bytes*, before the
    chunk that passes it is written anywhere (a store keeps nothing then)."""
    size = 0
    for chunk in _raw_chunks(data):
        size += len(chunk)
        if size > max_file_bytes:
            raise SpillError(
                f"the result is larger than the store's max_file_bytes ({max_file_bytes}); "
                f"nothing was kept"
            )
        yield chunk


def _raw_chunks(
    data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
) -> Iterator[Any]:
    if isinstance(data, bytes | bytearray | memoryview):
        yield data
        return
    if isinstance(data, str):
        raise TypeError("spill data must be bytes or byte chunks, not str")
    if hasattr(data, "read"):
        while True:
            block = data.read(_WRITE_CHUNK)
            if not block:
                return
            if not isinstance(block, bytes | bytearray | memoryview):
                raise TypeError(f"the file must be binary; read() gave {type(block).__name__}")
            yield block
    for chunk in data:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"spill chunks must be bytes, not {type(chunk).__name__}")
        yield chunk


def _write_all(fd: int, chunk: bytes | bytearray | memoryview) -> None:
    view = memoryview(chunk).cast("B")
    while view:
        try:
            written = os.write(fd, view)
        except OSError as exc:
            raise SpillError(f"cannot write the spill file: {exc.strerror}") from exc
        view = view[written:]


def _unlink(path: Path, name: str) -> bool:
    """Remove *path*, the file of the result *name* (taken aside under a private name)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False  # another process's cleanup got there first
    except OSError as exc:  # a read-only directory, say
        raise SpillError(f"cannot remove {name}: {exc.strerror}") from exc
    return True


def _put_back(aside: Path, path: Path) -> None:
    """Move the file at *aside* back to *path*, unless a put has stored its result there
    again meanwhile: that copy has the same bytes (the name is their hash) and a newer
    time, and the one at *aside* goes."""
    try:
        # A link, not a rename, which would replace the newer copy by this older one.
        os.link(aside, path, follow_symlinks=False)
    except FileExistsError:
        pass
    except FileNotFoundError:
        return  # the directory is gone, or another process's scan took the file as old
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise SpillError(f"cannot put {path.name} back: {exc.strerror}") from exc
        # No hard links here (or not a file): a rename, which can replace only a newer
        # copy of the same bytes, and never a file by a directory.
        try:
            os.rename(aside, path)
        except OSError as rename_exc:
            raise SpillError(f"cannot put {path.name} back: {rename_exc.strerror}") from rename_exc
        return
    _unlink(aside, path.name)


def _temp_name() -> str:
    """A name for a temporary file, chosen before the file is made, so that whatever
    removes it is in place first; 128 random bits, so no two puts share one."""
    return f"{_TEMP_PREFIX}{secrets.token_hex(16)}{_TEMP_SUFFIX}"


def _remove_temp(
    name: str,
    directory: int,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool:
    """Remove the temporary file *name* in the open *directory* of a put failing with
    *exc* (a `contextlib.ExitStack` exit callback). A failure to remove it (a file
    system made read-only) is added to *exc* as a note, never raised in its place."""
    try:
        os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        pass  # never made: the put failed before its file was created
    except OSError as unlink_exc:
        if not _is_there(name, directory):
            # Never made either: a read-only file system refuses the unlink (EROFS)
            # before it looks for the file, and no file is left behind to tell of.
            return False
        message = f"removing the temporary spill file failed too: {unlink_exc.strerror}"
        if exc is None:
            raise SpillError(message) from unlink_exc
        exc.add_note(message)
    return False


def _is_there(name: str, directory: int) -> bool:
    """Whether the file *name* is in the open *directory*: True unless it is known not to be."""
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: it may be left behind, which the note then says
    return True


def _open_into(opened: list[int], path: Path, flags: int) -> None:
    """Append ``os.open(path, flags)`` to *opened*, whose owner closes what it holds.

    Called from C (list.extend over map), so the descriptor is in the list as it exists:
    ``fd = os.open(...)`` holds it as a bare int until the assignment, and an exception
    arriving as the call returns (an interrupt) loses it open.
    """
    opened.extend(map(functools.partial(os.open, flags=flags), (path,)))


def _prepare_default_dir() -> tuple[Path, tuple[int, int]]:
    path = default_spill_dir()
    created = _make_dir(path)
    if isinstance(created, OSError):
        # A read-only or missing home: a per-user directory under the system temp dir.
        path = _temp_fallback_dir()
        created = _make_dir(path)
    return _check_dir(path, created)


def _resolved(directory: str | os.PathLike[str]) -> Path:
    """*directory* resolved, symlinks followed."""
    try:
        return Path(os.fspath(directory)).resolve()
    except (UnicodeEncodeError, ValueError) as exc:
        # A path no file can have (a lone surrogate, which the file system encoding
        # cannot write; a NUL) is an unusable directory as a missing one is, not a
        # codec's error from deep in os.path.
        raise SpillError(
            f"the spill directory path cannot name a file: {type(exc).__name__}: {exc}"
        ) from exc


def _prepare_dir(path: Path) -> tuple[Path, tuple[int, int]]:
    return _check_dir(path, _make_dir(path))


def _make_dir(path: Path) -> bool | OSError:
    """Create *path* (mode 0700); True if created, False if it existed, else the error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    except FileExistsError:
        return False  # an existing directory is checked like any other
    except OSError as exc:
        return exc
    return True


def _check_dir(path: Path, created: bool | OSError) -> tuple[Path, tuple[int, int]]:
    """*path* checked as a private directory of ours, and its (st_dev, st_ino)."""
    if isinstance(created, OSError):
        raise SpillError(f"cannot create the spill directory: {created.strerror}") from created
    try:
        st = os.lstat(path)
        if created:
            # mkdir's mode is filtered by the umask; the store wants exactly 0700.
            os.chmod(path, 0o700)
            st = os.lstat(path)
    except OSError as exc:
        raise SpillError(f"cannot inspect the spill directory: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise SpillError("the spill directory path exists and is not a directory")
    refusal = _refusal(st)
    if refusal is not None:
        raise SpillError(refusal)
    return path, (st.st_dev, st.st_ino)


def _refusal(st: os.stat_result) -> str | None:
    """Why the directory of status *st* is not private to us, else None."""
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return "the spill directory is owned by another user; refusing to use it"
    if st.st_mode & 0o022:
        return (
            f"the spill directory is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); refusing to use it"
        )
    return None
