"""File sources given the path of a pipe (a FIFO): one no writer opens is refused within
`files.WRITER_WAIT` seconds instead of waited on forever (a path a client gave a tool),
and a pipe whose writer comes, or has written, is read as before."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from jsonbudget import (
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    MemoryCursorStore,
    Scope,
    paginate,
)
from jsonbudget._sources import files
from jsonbudget.errors import DecodeError
from tests.limited import run_limited

BODY = {"array": b"[1, 2, 3]", "lines": b"1\n2\n3\n"}
T = TypeVar("T")
NO_WRITER = "the input is a pipe (a FIFO) with no writer and nothing written to it"


def source_of(kind: str, path: Path) -> Any:
    return JsonArrayFileSource(path) if kind == "array" else JsonLinesSource(path)


def first_page(source: Any) -> list[Any]:
    page = paginate(source, scope=Scope("t", {}), store=MemoryCursorStore(), limits=Limits(4096))
    assert page.complete
    return list(page.items)


def within(fifo: Path, call: Callable[[], T], timeout: float = 30) -> T:
    """*call*'s result (or its exception), made in a thread so that a page waiting on
    *fifo* fails the test instead of blocking the run."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        # A writer that comes and goes lets a reader blocked in open() go.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"the page of the FIFO did not return within {timeout} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)


class Writer:
    """A FIFO's write end, closed once."""

    def __init__(self, fifo: Path) -> None:
        self.fd: int | None = os.open(fifo, os.O_WRONLY)

    def write(self, data: bytes) -> None:
        assert self.fd is not None
        os.write(self.fd, data)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def held_open(fifo: Path) -> Iterator[Writer]:
    """A reader holding *fifo* open (so a writer opens it without waiting, and what it
    writes stays there), and a writer of the pipe."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        writer = Writer(fifo)
        try:
            yield writer
        finally:
            writer.close()
    finally:
        os.close(reader)


@pytest.mark.parametrize("way", ["open", "fill", "paginate"])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_fifo_with_no_writer_is_refused_not_waited_on(
    tmp_path: Path, kind: str, way: str
) -> None:
    """Found by a tester: a first page (no cursor) opened its path with a blocking
    open(), which waits for a pipe's writer forever: a paginated tool taking the path
    from a client never answered, and 40 such calls held every worker thread of the
    server. (A resumed page already opened without waiting.) It now opens without
    waiting and refuses a pipe that no writer opens within `WRITER_WAIT`."""
    fifo = tmp_path / "evil.jsonl"
    os.mkfifo(fifo)
    code = f"""
        import time
        from jsonbudget import (JsonArrayFileSource, JsonLinesSource, Limits,
                                MemoryCursorStore, PageBuilder, Scope, paginate)
        from jsonbudget.errors import DecodeError
        cls = JsonArrayFileSource if {kind!r} == "array" else JsonLinesSource
        source = cls({str(fifo)!r})
        started = time.monotonic()
        try:
            if {way!r} == "open":
                list(source.open(None))
            elif {way!r} == "fill":
                source.fill(PageBuilder(Limits(4096)), None)
            else:
                paginate(source, scope=Scope("t", {{}}), store=MemoryCursorStore(),
                         limits=Limits(4096))
        except DecodeError as exc:
            print(exc.offset)
            print(exc)
        print(time.monotonic() - started)
        """
    try:
        done = run_limited(code, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the first page of a FIFO with no writer waited for one (killed at 30 s)")
    assert done.returncode == 0, done.stderr[-2000:]
    offset, message, took = done.stdout.splitlines()
    assert offset == "0"
    assert message.startswith(NO_WRITER)
    assert files.WRITER_WAIT <= float(took) < files.WRITER_WAIT + 10


@pytest.mark.parametrize("kind", ["json", "jsonl"])
def test_regression_cli_page_of_a_fifo_with_no_writer_is_one_error_line(
    tmp_path: Path, kind: str
) -> None:
    """`jsonbudget page FIFO --kind jsonl` went through the same blocking open: it is
    now refused in one line, exit 1, with no traceback."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    # The child imports jsonbudget from where this process does.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jsonbudget",
                "page",
                str(fifo),
                "--kind",
                kind,
                "--store",
                str(tmp_path / "c.sqlite3"),
            ],
            capture_output=True,
            env=env,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("`jsonbudget page FIFO` waited for a writer (killed at 30 s)")
    assert done.returncode == 1
    assert done.stdout == b""
    err = done.stderr.decode()
    assert err.startswith("jsonbudget: error: " + NO_WRITER)
    assert err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_fifo_whose_writer_comes_within_the_wait_is_read(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "WRITER_WAIT", 30.0)  # a loaded machine's thread comes late
    fifo = tmp_path / "late"
    os.mkfifo(fifo)

    def feed() -> None:
        time.sleep(0.5)
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as f:
            f.write(BODY[kind])

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        assert within(fifo, lambda: first_page(source_of(kind, fifo))) == [1, 2, 3]
    finally:
        writer.join(30)


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_fifo_whose_writer_has_it_open_is_waited_for(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that has the pipe open is waited for past `WRITER_WAIT`: a pipe is read
    for what has arrived, and nothing has."""
    monkeypatch.setattr(files, "WRITER_WAIT", 0.2)
    fifo = tmp_path / "slow"
    os.mkfifo(fifo)
    with held_open(fifo) as write:

        def feed() -> None:
            time.sleep(1)
            write.write(BODY[kind])
            write.close()

        writer = threading.Thread(target=feed)
        writer.start()
        try:
            assert within(fifo, lambda: first_page(source_of(kind, fifo))) == [1, 2, 3]
        finally:
            writer.join(30)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_fifo_that_holds_bytes_gives_them_all(tmp_path: Path, kind: str, compress: bool) -> None:
    """What the open read to learn the pipe has a writer is given first: nothing is lost
    (here more than the stream's buffer), and gzip is still told by its first bytes."""
    fifo = tmp_path / "full"
    os.mkfifo(fifo)
    count = 3000 if kind == "lines" else 1
    body = BODY[kind] * count
    data = gzip.compress(body) if compress else body
    assert len(data) < 32768  # it fits the pipe: there, its writer gone, before the open
    with held_open(fifo) as write:
        write.write(data)
        write.close()
        got = within(fifo, lambda: [item for item, _ in source_of(kind, fifo).open(None)])
    assert got == [1, 2, 3] * count


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_fifo_whose_writer_left_without_writing_is_an_empty_input(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that opened the pipe and closed it without writing wrote an empty input:
    read as an empty file is, not refused as a pipe no writer came to."""
    monkeypatch.setattr(files, "WRITER_WAIT", 30.0)
    fifo = tmp_path / "gone"
    os.mkfifo(fifo)

    def come_and_go() -> None:
        time.sleep(0.5)  # the source has opened the pipe and waits for a writer
        deadline = time.monotonic() + 20
        while True:
            try:  # opened without waiting: ENXIO until the source has opened it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    writer = threading.Thread(target=come_and_go)
    writer.start()
    started = time.monotonic()
    try:
        if kind == "lines":
            assert within(fifo, lambda: first_page(source_of(kind, fifo))) == []
        else:  # an empty input is no array, as an empty file is not
            with pytest.raises(DecodeError) as caught:
                within(fifo, lambda: first_page(source_of(kind, fifo)))
            assert "no writer" not in str(caught.value)
    finally:
        writer.join(30)
    assert time.monotonic() - started < 15


def test_an_empty_shell_pipe_is_an_empty_page() -> None:
    # `query | jsonbudget page /dev/stdin` where the query printed nothing: a shell's pipe
    # never made open() wait, and its writer is gone for good. Not a FIFO with no writer.
    cp = subprocess.run(
        [sys.executable, "-m", "jsonbudget", "page", "/dev/stdin", "--kind", "jsonl"],
        input=b"",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (cp.returncode, cp.stderr) == (0, b"")
    page = json.loads(cp.stdout)
    assert (page["items"], page["complete"]) == ([], True)


def test_a_directory_is_refused_as_open_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as caught:
        first_page(JsonLinesSource(tmp_path))
    assert caught.value.filename == str(tmp_path)


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_gzip_over_a_pipe_whose_first_read_gave_one_byte(
    tmp_path: Path, kind: str
) -> None:
    # The check of gzip's two magic bytes peeked once: a slow writer's first byte alone
    # made the gzip stream read as text (a DecodeError, or garbage for JSON Lines).
    fifo = tmp_path / "slow.gz"
    os.mkfifo(fifo)
    data = gzip.compress(BODY[kind])

    def slow_writer() -> None:
        write = Writer(fifo)  # waits for the source's open
        try:
            write.write(data[:1])
            time.sleep(0.3)  # the source's first read has taken the one byte
            write.write(data[1:])
        finally:
            write.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    try:
        got = within(fifo, lambda: [item for item, _ in source_of(kind, fifo).open(None)])
    finally:
        writer.join(30)
    assert got == [1, 2, 3]
