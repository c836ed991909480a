"""Fixture: a real redis-server on loopback, started and stopped by the suite.

`redis_server_process` is a plain context manager (the benches use it too); the
session-scoped `redis_server` fixture wraps it and FAILS when Redis cannot start.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import free_port

START_TIMEOUT = 15.0


def _answers(port: int, pid: int) -> bool:
    """Whether the server on *port* is process *pid*: another worker's may hold the port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
            return f"process_id:{pid}\r\n".encode() in reply
    except OSError:
        return False


class RedisServer:
    """One redis-server process without persistence: a restart empties it."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        # Tests run in several processes, each with its own server: a port taken between
        # the probe and the bind is tried again with another, but a restart keeps its port.
        for _attempt in range(5):
            if self._start_once():
                return
            if self.restarts or self._started:
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server could not bind a port:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        log = self.directory / "redis.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def _start_once(self) -> bool:
        """Start on ``self.port``: True once it answers, False if the port was taken."""
        log = self.directory / "redis.log"
        seen = log.stat().st_size if log.exists() else 0
        self.proc = proc = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "no",
                "--logfile", str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                tail = log.read_bytes()[seen:].decode(errors="replace") if log.exists() else ""
                self.proc = None
                if "Address already in use" in err + tail:
                    return False
                raise RuntimeError(
                    f"redis-server exited with status {proc.returncode} on port "
                    f"{self.port}: {err.strip()} {tail.strip()}"
                )
            if _answers(self.port, proc.pid):
                self._started = True
                return True
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {START_TIMEOUT} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()

    def restart(self, *, flush: bool = True) -> None:
        """Stop and start again on the same port. Without persistence the data is gone."""
        if not flush:
            raise ValueError("this server has no persistence: a restart always empties it")
        self.stop()
        self.start()
        self.restarts += 1


class RoundTrips:
    """Counts round trips: each write of one (possibly pipelined) request to Redis."""

    def __init__(self) -> None:
        self.count = 0


def counting_client(url: str) -> tuple[Any, RoundTrips]:
    """A real ``redis.Redis`` client whose connections count their round trips."""
    import redis

    trips = RoundTrips()

    class CountingConnection(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            trips.count += 1
            # redis-py leaves this method unannotated.
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool), trips


@contextlib.contextmanager
def redis_server_process() -> Iterator[RedisServer]:
    """Start redis-server on 127.0.0.1 and a free port in a temp dir; stop it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed; install it (Debian: apt-get install redis-server)"
        )
    with tempfile.TemporaryDirectory(prefix="jsonbudget-redis-") as tmp:
        server = RedisServer(binary, Path(tmp))
        try:
            server.start()
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server for the whole session. Fails (never skips) when it cannot start."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(redis_server_process())
        except RuntimeError as exc:
            pytest.fail(f"cannot start redis-server: {exc}", pytrace=False)
        yield server
