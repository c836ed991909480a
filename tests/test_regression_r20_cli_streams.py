"""The command line's own input layer on pipes: an endless run of whitespace on stdin,
and a writer that stays open after the items a dump shows have come."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import IO

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pipes and FIFOs")

#: The parent's path, as `tests.limited` gives it: a child runs the jsonbudget under test.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
CAP = 256 * 1024 * 1024
#: `main` in a child with the pass-over cap lowered, as the file sources' tests lower it.
LOWERED = (
    "import sys\n"
    "import jsonbudget._cli.main as m\n"
    "m.MAX_PASS_OVER = 1 << 20\n"
    "sys.exit(m.main(sys.argv[1:]))\n"
)


def _feed_forever(stdin: IO[bytes], head: bytes, gz: bool, written: list[int]) -> None:
    """Write *head*, then whitespace (gzip-compressed with *gz*) until the reader goes."""
    block = b" \n" * 32768
    compress = zlib.compressobj(1, zlib.DEFLATED, 31)
    try:
        stdin.write(compress.compress(head) if gz else head)
        while True:
            if gz:
                stdin.write(compress.compress(block) + compress.flush(zlib.Z_SYNC_FLUSH))
            else:
                stdin.write(block)
            written.append(len(block))
    except BrokenPipeError:  # the reader went
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):  # what is buffered has nowhere to go
            stdin.close()


def _run_fed(
    argv: list[str], head: bytes = b"", *, gz: bool = False
) -> tuple[int, bytes, str, int]:
    """Run *argv* with an endless run of whitespace after *head* on its stdin: its exit
    code, stdout and stderr, and how many bytes of the run were written."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    written: list[int] = []
    writer = threading.Thread(target=_feed_forever, args=(proc.stdin, head, gz, written))
    writer.start()
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        writer.join(10)
    return code, proc.stdout.read(), proc.stderr.read().decode(), sum(written)


def test_regression_endless_whitespace_on_stdin_ends_at_the_cap() -> None:
    """`yes ' ' | jsonbudget dump -` never ended: the whitespace before the first value
    was skipped without a cap. It now stops at the file sources' 256 MiB pass-over cap,
    with their error at the run's start."""
    code, out, err, written = _run_fed([sys.executable, "-m", "jsonbudget", "dump", "-"])
    assert code == 1
    assert out == b""
    assert err == (
        f"jsonbudget: error: a run of whitespace is longer than {CAP} bytes in a stream "
        "whose end is not known (a pipe, a device or gzip): it is not passed over further "
        "(at decoded byte 0)\n"
    )
    assert written < CAP + (8 << 20)  # the cap and a few reads in flight, not more


@pytest.mark.parametrize(
    ("head", "gz", "at"),
    [(b"", False, 0), (b"1\n", False, 2), (b"[1]\n", False, 4), (b"", True, 0)],
    ids=["before-the-value", "after-a-value", "after-an-array-line", "gzip"],
)
def test_regression_endless_whitespace_after_a_first_line_ends_at_the_cap(
    head: bytes, gz: bool, at: int
) -> None:
    """The look past a first line for more values (JSON Lines) skipped whitespace
    without a cap too, as did gzip on stdin; here with the cap lowered to 1 MiB."""
    code, _out, err, written = _run_fed([sys.executable, "-c", LOWERED, "dump", "-"], head, gz=gz)
    assert code == 1, err
    assert err == (
        "jsonbudget: error: a run of whitespace is longer than 1048576 bytes in a stream "
        "whose end is not known (a pipe, a device or gzip): it is not passed over further "
        f"(at decoded byte {at})\n"
    )
    # The cap and a few reads in flight; of gzip, what the pipe and a read of it inflate to.
    assert written < (64 if gz else 16) << 20


_OBJECTS = [{"i": i} for i in range(5)]
#: An array whose first line is not a whole value (so streamed), and JSON Lines.
_ARRAY = b"[\n" + b"".join(json.dumps(o).encode() + b",\n" for o in _OBJECTS)
_LINES = b"".join(json.dumps(o).encode() + b"\n" for o in _OBJECTS)


def _start(how: str, tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """The command reading *how* (a pipe on stdin, a non-blocking one, a FIFO named on
    the command line), and the descriptor that writes to it."""
    argv = [sys.executable, "-m", "jsonbudget", "dump", "--max-items", "2", *args]
    if how == "fifo":
        fifo = tmp_path / "in"
        os.mkfifo(fifo)
        proc = subprocess.Popen(
            [*argv, str(fifo)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=ENV
        )
        deadline = time.monotonic() + 30
        while True:  # opened without waiting: a child that failed never opens its end
            try:
                write = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise
                time.sleep(0.05)
        os.set_blocking(write, True)
        return proc, write
    read, write = os.pipe()
    if how == "non-blocking":
        os.set_blocking(read, False)
    try:
        proc = subprocess.Popen([*argv, "-"], stdin=read, stdout=subprocess.PIPE, env=ENV)
    finally:
        os.close(read)
    return proc, write


@pytest.mark.parametrize(
    ("how", "args", "data"),
    [
        ("pipe", [], _ARRAY),
        ("pipe", [], _LINES),
        ("pipe", ["--jsonl"], _LINES),
        ("non-blocking", [], _ARRAY),
        ("fifo", [], _ARRAY),
    ],
    ids=["array", "lines", "jsonl", "non-blocking-stdin", "fifo"],
)
def test_regression_dump_from_a_pipe_writes_once_its_items_arrived(
    tmp_path: Path, how: str, args: list[str], data: bytes
) -> None:
    """`dump --max-items 2` of a pipe whose items had come waited for a whole 64 KiB read
    or for the writer to close (`tail -f log | jsonbudget dump --jsonl -`): a pipe, a
    FIFO or a non-blocking stdin is now read for what has arrived."""
    proc, write = _start(how, tmp_path, args)
    assert proc.stdout is not None
    try:
        os.write(write, data)
        arrived = select.select([proc.stdout], [], [], 15)[0]
        assert arrived, "the dump waited for the writer to close"
        line = proc.stdout.readline()
    finally:
        os.close(write)
        try:
            proc.wait(timeout=30)
        finally:
            proc.kill()
    assert json.loads(line) == [*_OBJECTS[:2], "…[omitted: more items]"]
    assert proc.returncode == 0
