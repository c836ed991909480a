"""`SQLiteCursorStore`: durable cursors in one SQLite file, shared by local processes."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import secrets
import sqlite3
import stat
import threading
import time
from types import TracebackType
from typing import Final

from .._limits import check_int
from .._shared import Closing
from ..errors import BudgetExhausted, InvalidCursor, LimitError
from .scope import Scope
from .store import (
    _TID_BYTES,
    DEFAULT_MAX_PER_PRINCIPAL,
    DEFAULT_TTL,
    MIN_SECRET_BYTES,
    CursorState,
    JSONValue,
    KeyedStore,
    Keyring,
    as_keyring,
    authenticate,
    check_max_pages,
    check_scope,
    check_scope_arg,
    check_ttl,
    decode_position,
    derived_key,
    encode_position,
    encode_token,
    expired,
    new_operation_id,
    new_token_id,
    state_op_id,
    unknown,
)

__all__ = ["SQLiteCursorStore"]

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS jsonbudget_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    """CREATE TABLE IF NOT EXISTS jsonbudget_ops (
        op_id BLOB PRIMARY KEY,
        principal_fp TEXT NOT NULL,
        query_fp TEXT NOT NULL,
        pages_served INTEGER NOT NULL,
        started_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        max_pages INTEGER
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS jsonbudget_ops_expiry ON jsonbudget_ops (expires_at)",
    """CREATE INDEX IF NOT EXISTS jsonbudget_ops_principal
        ON jsonbudget_ops (principal_fp, started_at)""",
    """CREATE TABLE IF NOT EXISTS jsonbudget_tokens (
        op_id BLOB NOT NULL,
        tid BLOB NOT NULL,
        pos_hash BLOB NOT NULL,
        position BLOB NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (op_id, tid)
    ) WITHOUT ROWID""",
    """CREATE UNIQUE INDEX IF NOT EXISTS jsonbudget_tokens_position
        ON jsonbudget_tokens (op_id, pos_hash)""",
    "CREATE INDEX IF NOT EXISTS jsonbudget_tokens_expiry ON jsonbudget_tokens (expires_at)",
    # The order operations were started in, for evicting the oldest: `started_at` is the
    # wall clock, which set back would make the newest the oldest. A table of its own,
    # created in a file an older version made, whose processes, still writing it, insert
    # into `jsonbudget_ops` without naming columns (a new column there would fail them).
    """CREATE TABLE IF NOT EXISTS jsonbudget_op_order (
        seq INTEGER PRIMARY KEY,
        op_id BLOB NOT NULL UNIQUE,
        expires_at REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS jsonbudget_op_order_expiry ON jsonbudget_op_order (expires_at)",
)
_KEY_NAME: Final = "cursor_mac_key"
#: Expired rows are deleted at most this often (seconds), by whichever process starts.
_SWEEP_EVERY: Final = 10.0

_RESUME_SQL: Final = """
    SELECT o.principal_fp, o.query_fp, o.pages_served, o.started_at, o.expires_at,
           o.max_pages, t.position
    FROM jsonbudget_ops AS o LEFT JOIN jsonbudget_tokens AS t
         ON t.op_id = o.op_id AND t.tid = ?
    WHERE o.op_id = ?"""


class SQLiteCursorStore(KeyedStore):
    """Operations kept in the SQLite database at *path*: durable and multi-process.

    The database runs in WAL mode; every page count is one ``BEGIN IMMEDIATE``
    transaction, so processes sharing the file never overspend a budget. Unless *keys* is
    given, the MAC key is created once in the database and read by every process that
    opens it. One connection per store, guarded by a lock (safe across threads). The file
    holds that key, the positions and the principals' fingerprints: it is created 0600
    whatever the umask, and one it owns is made private as it opens (`_private`).
    """

    __slots__ = (
        "_busy_timeout",
        "_closing",
        "_conn",
        "_last_sweep",
        "_max_per_principal",
        "_pid",
        "path",
        "ttl",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: int = DEFAULT_TTL,
        keys: Keyring | bytes | None = None,
        max_per_principal: int = DEFAULT_MAX_PER_PRINCIPAL,
        busy_timeout: float = 10.0,
    ) -> None:
        self.ttl = check_ttl(ttl)
        self._max_per_principal = check_int("max_per_principal", max_per_principal, minimum=1)
        self._busy_timeout = busy_timeout = _check_busy_timeout(busy_timeout)
        keyring = as_keyring(keys)
        self.path = os.fspath(path)
        _create_private(self.path)
        conn = _connect(self.path, busy_timeout)
        self._lock = threading.Lock()
        # On the monotonic clock: the wall clock set back stopped the sweeps for as long.
        self._last_sweep = -math.inf
        with contextlib.ExitStack() as on_error:
            on_error.callback(conn.close)  # a failed setup leaves no open connection
            _private(self.path)
            _setup(conn, busy_timeout)
            with _Immediate(conn), conn:
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT OR IGNORE INTO jsonbudget_meta (name, value) VALUES (?, ?)",
                    (_KEY_NAME, secrets.token_bytes(MIN_SECRET_BYTES)),
                )
                row = conn.execute(
                    "SELECT value FROM jsonbudget_meta WHERE name = ?", (_KEY_NAME,)
                ).fetchone()
            on_error.pop_all()
        # The connection of the process `_pid`; 0 in a forked child until it opens its own.
        self._conn, self._pid = conn, os.getpid()
        # Closes it when the store is dropped unclosed (a store made per request): the
        # connection is in a reference cycle and would hold its files until a collection.
        self._closing = Closing(conn)
        self._keyring = keyring or Keyring(derived_key(_stored_key(row[0])))
        self._track()

    def _transaction(self) -> _Immediate:
        """``BEGIN IMMEDIATE`` on this process's connection; called with the lock held."""
        return _Immediate(self._connection())

    def _connection(self) -> sqlite3.Connection:
        """This process's connection, opened on first use in a forked child; called with
        the lock held."""
        if self._pid != os.getpid():
            conn = _connect(self.path, self._busy_timeout)
            with contextlib.ExitStack() as on_error:
                on_error.callback(conn.close)
                _setup(conn, self._busy_timeout)
                on_error.pop_all()
            self._conn, self._pid = conn, os.getpid()
            self._closing = Closing(conn)
        return self._conn

    def _after_fork(self) -> None:
        # Never used here: SQLite forbids using a connection across fork. One `_pid` 0
        # was the parent's own inherited one, already dealt with at the parent's fork.
        inherited, opened = self._conn, self._pid != 0
        self._pid = 0
        if opened and self._lock.locked():
            # Another thread of the parent was running a statement on it at the fork:
            # closing it here, or letting it be deallocated (which closes it), would roll
            # that back in the -wal and -shm files the parent still writes through. So it
            # is kept, unused, for this process's life.
            _INHERITED.append(inherited)
        elif opened:
            # Idle, yet closed at once: SQLite keeps one record per file and process of
            # the locks held on it, and this copy claims locks the child does not hold.
            # While it is open, every connection the child opens on the file shares it
            # and takes no lock of its own; the parent, closing what it then takes for the
            # last connection, would delete the -wal and -shm files this process writes
            # to. An idle connection closes without writing while another process holds
            # the file open (the parent does, or it deleted them already).
            inherited.close()
        super()._after_fork()

    def close(self) -> None:
        """Close the connection; the data stays in the file. In a forked child, only the
        child's own connection, if it opened one."""
        with self._lock:
            if self._pid == os.getpid():
                self._conn.close()

    def __enter__(self) -> SQLiteCursorStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        scope = check_scope_arg(scope)
        max_pages = check_max_pages(max_pages)
        op_id = new_operation_id()
        pfp = scope.principal_fingerprint
        with self._lock, self._transaction() as conn, conn:
            now = time.time()
            tick = time.monotonic()
            if tick - self._last_sweep >= _SWEEP_EVERY:
                self._last_sweep = tick
                conn.execute("DELETE FROM jsonbudget_tokens WHERE expires_at <= ?", (now,))
                conn.execute("DELETE FROM jsonbudget_ops WHERE expires_at <= ?", (now,))
                conn.execute("DELETE FROM jsonbudget_op_order WHERE expires_at <= ?", (now,))
            (live,) = conn.execute(
                "SELECT count(*) FROM jsonbudget_ops WHERE principal_fp = ?", (pfp,)
            ).fetchone()
            excess = live - self._max_per_principal + 1
            if excess > 0:
                # In the order started (a new rowid is above every live one); one an older
                # version started has no seq (NULL sorts first) and goes first, by its
                # `started_at`.
                doomed = [
                    (r[0],)
                    for r in conn.execute(
                        """SELECT o.op_id FROM jsonbudget_ops AS o
                           LEFT JOIN jsonbudget_op_order AS s ON s.op_id = o.op_id
                           WHERE o.principal_fp = ? ORDER BY s.seq, o.started_at LIMIT ?""",
                        (pfp, excess),
                    )
                ]
                conn.executemany("DELETE FROM jsonbudget_tokens WHERE op_id = ?", doomed)
                conn.executemany("DELETE FROM jsonbudget_ops WHERE op_id = ?", doomed)
                conn.executemany("DELETE FROM jsonbudget_op_order WHERE op_id = ?", doomed)
            conn.execute(
                "INSERT INTO jsonbudget_ops VALUES (?, ?, ?, 1, ?, ?, ?)",
                (op_id, pfp, scope.query_fingerprint, now, now + self.ttl, max_pages),
            )
            conn.execute(
                "INSERT INTO jsonbudget_op_order (op_id, expires_at) VALUES (?, ?)",
                (op_id, now + self.ttl),
            )
        return CursorState(
            op_id.hex(), pfp, scope.query_fingerprint, None, 1, now, now + self.ttl, max_pages
        )

    def resume(self, token: str, scope: Scope) -> CursorState:
        parsed = authenticate(token, self._keyring)
        scope = check_scope_arg(scope)
        with self._lock, self._transaction() as conn, conn:
            row = conn.execute(_RESUME_SQL, (parsed.tid, parsed.op_id)).fetchone()
            if row is None:
                raise expired()
            pfp, qfp, pages, started, expires, max_pages, data = _checked(row)
            if data is None:
                raise unknown()
            if time.time() >= expires:
                raise expired()
            check_scope(pfp, qfp, scope)
            if max_pages is not None and pages >= max_pages:
                raise BudgetExhausted(limit=max_pages, used=pages)
            pages += 1
            conn.execute(
                "UPDATE jsonbudget_ops SET pages_served = ? WHERE op_id = ?",
                (pages, parsed.op_id),
            )
        return CursorState(
            parsed.op_id.hex(), pfp, qfp, decode_position(data), pages, started, expires, max_pages
        )

    def mint(self, state: CursorState, position: JSONValue) -> str:
        op_id = state_op_id(state)
        data = encode_position(position)
        pos_hash = hashlib.sha256(data).digest()[:16]
        tid = new_token_id()
        with self._lock:
            conn = self._connection()
            # in no transaction an interrupt left open, which would keep the row uncommitted
            _rollback(conn)
            # one statement, atomic on its own; an existing token for this position wins
            conn.execute(
                """INSERT OR IGNORE INTO jsonbudget_tokens
                   SELECT op_id, ?, ?, ?, expires_at FROM jsonbudget_ops WHERE op_id = ?""",
                (tid, pos_hash, data, op_id),
            )
            row = conn.execute(
                "SELECT tid FROM jsonbudget_tokens WHERE op_id = ? AND pos_hash = ?",
                (op_id, pos_hash),
            ).fetchone()
        if row is not None:
            tid = row[0]
            if type(tid) is not bytes or len(tid) != _TID_BYTES:
                raise _not_ours()
        # no row: the operation is gone, and so the token resolves to ExpiredCursor
        return encode_token(self._keyring.current, op_id, tid)

    def __repr__(self) -> str:
        return f"SQLiteCursorStore({self.path!r}, ttl={self.ttl})"


#: Paths SQLite opens no file for: an in-memory and a temporary database.
_NO_FILE: Final = ("", ":memory:")


def _create_private(path: str) -> None:
    """Create the database file *path*, empty, readable and writable by its owner alone,
    unless it exists. SQLite would create it with its default mode under the umask
    (0644 under the usual 022), readable by every local user, and chmod after that
    would leave a window in which another user could open it and read it later. SQLite
    gives its ``-wal`` and ``-shm`` files the database file's own mode."""
    if path in _NO_FILE or not hasattr(os, "geteuid"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return  # an existing file: `_private` once it is open
    except OSError:
        # No file can be made here (no such directory, no permission): SQLite, opening
        # it next, fails for the same cause with its own error, as the docs say.
        return
    os.close(fd)


def _private(path: str) -> None:
    """Make the database file *path* and its ``-wal`` and ``-shm`` files, where this
    process owns them, unreadable to others, and to the group unless the group may
    write them (a store shared by a group on purpose): an older version created them
    under the umask. A file another user owns is left as it is.

    A file that cannot be made private (on a read-only mount, or one the kernel will not
    let us change, such as ``/proc/self/status``) is an unusable database file: it raises
    what SQLite raises for one, `sqlite3.OperationalError`, whatever its mode bits."""
    if path in _NO_FILE or not hasattr(os, "geteuid"):
        return
    for name in (path, path + "-wal", path + "-shm"):
        try:
            st = os.stat(name)
        except FileNotFoundError:
            continue  # no -wal or -shm file yet (SQLite makes them with the file's mode)
        except OSError as exc:
            raise _cannot_open(exc) from exc
        mode = stat.S_IMODE(st.st_mode)
        private = mode & ~0o007 if mode & 0o020 else mode & ~0o077
        if st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode) and private != mode:
            try:
                os.chmod(name, private)
            except OSError as exc:
                raise _cannot_open(exc) from exc


def _cannot_open(exc: OSError) -> sqlite3.OperationalError:
    """SQLite's own error for a database file it cannot open, for *exc* (no path shown)."""
    error = sqlite3.OperationalError(
        f"unable to open database file: cannot make it private: {exc.strerror}"
    )
    error.sqlite_errorcode = sqlite3.SQLITE_CANTOPEN
    error.sqlite_errorname = "SQLITE_CANTOPEN"
    return error


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _stored_key(value: object) -> bytes:
    """The MAC key the file holds, as the store wrote it: a blob of random bytes."""
    if type(value) is not bytes or len(value) < MIN_SECRET_BYTES:
        # As the Redis store answers for its shared key; the value is a secret: not shown.
        raise LimitError("mac-key", "<stored in the database>", "is not a jsonbudget key")
    return value


def _not_ours() -> InvalidCursor:
    return InvalidCursor("the store holds a row for this cursor that it could not have written")


def _checked(
    row: tuple[object, ...],
) -> tuple[str, str, int, float, float, int | None, bytes | str | None]:
    """An operation's row as the store wrote it, else `InvalidCursor`: SQLite's columns
    take any type, and a row changed by hand (or by another tool sharing the table names)
    must not end in a TypeError. A position's JSON is checked as it is decoded, once the
    page is counted (`decode_position`); its type here."""
    pfp, qfp, pages, started, expires, max_pages, data = row
    # Fingerprints are ASCII text: hmac.compare_digest refuses any other str.
    if type(pfp) is not str or not pfp.isascii() or type(qfp) is not str or not qfp.isascii():
        raise _not_ours()
    if type(pages) is not int or pages < 1:
        raise _not_ours()
    if max_pages is not None and (type(max_pages) is not int or max_pages < 1):
        raise _not_ours()
    # None: the operation never issued the token (LEFT JOIN), answered as such.
    if data is not None and type(data) is not bytes and type(data) is not str:
        raise _not_ours()
    return pfp, qfp, pages, _seconds(started), _seconds(expires), max_pages, data


def _seconds(value: object) -> float:
    """A time the store wrote: a finite number of epoch seconds."""
    if (type(value) is float or type(value) is int) and math.isfinite(value):
        return float(value)
    raise _not_ours()


class _Immediate:
    """``BEGIN IMMEDIATE``, entered as ``with _Immediate(conn) as conn, conn:``: the connection's
    own exit (C code, which no interrupt can stop half way) then commits, or rolls back
    when the block raises or the commit fails.

    No exception leaves a transaction open: an open one keeps the write lock, which every
    other connection to the file then waits for, and makes every later BEGIN here fail.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        # A transaction still open here was left by a failure of the rollbacks below
        # (an interrupt inside one): the store's lock is held, so it is no other caller's.
        _rollback(self._conn)
        try:
            # IMMEDIATE takes the write lock now, so read-then-update cannot race
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            # A KeyboardInterrupt is raised as the call returns, once the transaction has
            # begun (a Ctrl-C while waiting for another process's lock), and `with` calls
            # no __exit__ for an __enter__ that raised.
            _rollback(self._conn)
            raise
        return self._conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The connection's exit ran first; a rollback of its that failed left this open.
        _rollback(self._conn)


#: Connections inherited through fork that a child must neither use nor close (`_after_fork`).
_INHERITED: list[sqlite3.Connection] = []


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    # autocommit mode: transactions are explicit, so BEGIN IMMEDIATE is ours to issue
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    # The file may have been changed by hand or by another tool: a text that is not
    # UTF-8 comes back with its bytes escaped, for the checks of what is read
    # (`_checked`) to refuse, not as an error about the column's text.
    conn.text_factory = _text
    return conn


def _setup(conn: sqlite3.Connection, busy_timeout: float) -> None:
    _wal(conn, busy_timeout)
    # NORMAL in WAL survives process crashes; only an OS crash may drop the last pages
    conn.execute("PRAGMA synchronous=NORMAL")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


#: The longest `busy_timeout`: CPython hands SQLite milliseconds as a C int, and a longer
#: wait (or a negative one) silently became no wait at all.
MAX_BUSY_TIMEOUT: Final = 86_400.0


def _check_busy_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_BUSY_TIMEOUT  # NaN fails both
    ):
        raise LimitError("busy_timeout", value, f"must be seconds from 0 to {MAX_BUSY_TIMEOUT:g}")
    return float(value)


def _wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL, waiting up to *busy_timeout* for other connections.

    Two connections switching a new file at once both go from a shared to an exclusive
    lock; SQLite answers one of them BUSY at once, without its busy handler (waiting
    there could deadlock), so the wait the handler would give is given here.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", None) in (
                sqlite3.SQLITE_BUSY,
                sqlite3.SQLITE_LOCKED,
            )
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
        else:
            return
