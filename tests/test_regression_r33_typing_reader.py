"""Regressions a user's strict type check of their own reader code caught."""

from __future__ import annotations

from pathlib import Path

from tests.typecheck import strict_errors


def test_regression_a_stream_whose_read_needs_its_argument_is_a_binary_source(
    tmp_path: Path,
) -> None:
    # The docs promise "anything with read(n)"; the reader always passes n, but the
    # protocol declared read(n=-1), so a plain read(self, n) was refused by checkers.
    program = """
        import io

        from jsonbudget import BoundedReader, read_bounded_text
        from jsonbudget.typing import BinarySource


        class Chunked:
            def __init__(self, data: bytes) -> None:
                self._data = io.BytesIO(data)

            def read(self, n: int) -> bytes:
                return self._data.read(n)


        source: BinarySource = Chunked(b"hello")
        print(read_bounded_text(Chunked(b"hello world"), 10).text)
        print(BoundedReader(max_bytes=10).read(Chunked(b"hello")).text)
        print(read_bounded_text(io.BytesIO(b"hello"), 10).text, source)
    """
    assert strict_errors(tmp_path, {"user_stream": program}) == {"user_stream": []}
