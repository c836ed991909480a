"""Fixture: a real PostgreSQL on loopback, started by the suite in a temporary directory.

``postgres_server`` (session scope) runs ``initdb`` and ``postgres`` on 127.0.0.1 and a
free port, yields a `PostgresServer` with ``.dsn``, and stops the server afterwards. It
fails loudly when the server cannot start; it never skips. Benches use
`running_postgres()`, the same thing as a context manager.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict

import pytest

from tests.loopback import free_port

_START_TIMEOUT = 60.0
_SERVICE_USER = "postgres"


@dataclass(frozen=True)
class PostgresServer:
    """A running server: connect with ``dsn`` (a libpq conninfo string)."""

    host: str
    port: int
    user: str
    dbname: str
    datadir: str

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    @property
    def conninfo(self) -> str:
        return self.dsn


def _find_binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    raise RuntimeError(
        f"PostgreSQL's {name} was not found on PATH or in /usr/lib/postgresql/*/bin; "
        "install it (Debian: apt-get install postgresql)"
    )


class _RunAs(TypedDict, total=False):
    """The keyword arguments that make `subprocess` run a child as another user."""

    user: int
    group: int
    extra_groups: list[int]


def _service_ids() -> tuple[int, int] | None:
    """PostgreSQL refuses to run as root: then run it as the ``postgres`` system user."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(_SERVICE_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", _SERVICE_USER],
            check=True,
        )
        entry = pwd.getpwnam(_SERVICE_USER)
    return entry.pw_uid, entry.pw_gid


def _wait_ready(proc: subprocess.Popen[bytes], host: str, port: int, log: str) -> None:
    import psycopg

    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with psycopg.connect(
                host=host, port=port, user=_db_user(), dbname="postgres", connect_timeout=2
            ):
                return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise RuntimeError(f"postgres did not become ready in {_START_TIMEOUT}s:\n{_tail(log)}")


def _db_user() -> str:
    return _SERVICE_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-4000:]
    except OSError as exc:
        return f"(no log: {exc})"


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL; stop it and delete its files on exit."""
    initdb, postgres = _find_binary("initdb"), _find_binary("postgres")
    ids = _service_ids()
    # Popen's user/group switch in the child, so `proc` is postgres itself (signals reach it).
    as_user: _RunAs = {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}
    root = tempfile.mkdtemp(prefix="jb-pg-")
    datadir = os.path.join(root, "data")
    log = os.path.join(root, "server.log")
    proc: subprocess.Popen[bytes] | None = None
    try:
        if ids is not None:
            os.chown(root, *ids)
        user = _db_user()
        init = subprocess.run(
            [
                initdb,
                "-D",
                datadir,
                "-U",
                user,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ],
            capture_output=True,
            check=False,
            **as_user,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{init.stdout.decode()}\n{init.stderr.decode()}")
        host = "127.0.0.1"
        for _attempt in range(5):
            port = free_port()
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [
                        postgres,
                        "-D",
                        datadir,
                        "-k",
                        root,
                        "-p",
                        str(port),
                        "-c",
                        f"listen_addresses={host}",
                        "-c",
                        "fsync=off",
                        "-c",
                        "synchronous_commit=off",
                        "-c",
                        "full_page_writes=off",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    **as_user,
                )
            try:
                _wait_ready(proc, host, port, log)
                break
            except RuntimeError:
                # Another process may have taken the port between probe and bind.
                if proc.poll() is None:
                    raise
                proc = None
        else:
            raise RuntimeError(f"postgres could not start:\n{_tail(log)}")
        yield PostgresServer(host=host, port=port, user=user, dbname="postgres", datadir=datadir)
    finally:
        if proc is not None and proc.poll() is None:
            # SIGINT is PostgreSQL's "fast shutdown".
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root)


@contextlib.contextmanager
def sql_ascii_database(server: PostgresServer, name: str) -> Iterator[str]:
    """A database *name* on *server* whose encoding is SQL_ASCII (it stores any bytes and
    counts text in bytes), made for the block and dropped after: its dsn, the client
    encoding left as the database makes it (add ``client_encoding=UTF8`` to read its
    text as UTF-8)."""
    import psycopg  # here: the benches import this module where psycopg may be missing

    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
        try:
            yield server.dsn.replace(f"dbname={server.dbname}", f"dbname={name}")
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL for the whole session. Fails (never skips) if it cannot start."""
    with running_postgres() as server:
        yield server
